"""The Ryu glue: OpenFlow 1.3 handshake, forwarding, rule installation and the REST API.

This is the only module that imports Ryu (a port to os-ken is a rename here). Handlers are short:
they parse the event, call the pure core (:mod:`controller.switching` for forwarding,
:mod:`controller.engine` for marking, :mod:`controller.api` for REST) and turn the operations it
returns into OpenFlow messages. One green thread, the reorder loop, recomputes the schedule on
every change and on a periodic tick, so no handler ever blocks the OpenFlow loop with a reorder.
Another asks every switch for its port and queue counters periodically; the replies go to
:class:`controller.switch_counters.SwitchCounters`, which ``/metrics`` reads.

Start it with ``python -m controller`` (see ``controller/__main__.py``), not ``ryu-manager``
directly: :func:`run_manager` hands the app its :class:`Settings` and applies the eventlet shim
below.
"""

from __future__ import annotations

import gc
import json
import logging
import resource
import time
from dataclasses import dataclass, field

import eventlet.wsgi

# Ryu 4.34's WSGI module imports a name that eventlet >= 0.30 removed; any sentinel works.
if not hasattr(eventlet.wsgi, "ALREADY_HANDLED"):
    eventlet.wsgi.ALREADY_HANDLED = b""

from ryu.app.wsgi import ControllerBase, Response, WSGIApplication, route  # noqa: E402
from ryu.base import app_manager  # noqa: E402
from ryu.controller import ofp_event  # noqa: E402
from ryu.controller.handler import (  # noqa: E402
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from ryu.lib import hub  # noqa: E402
from ryu.lib.pack_utils import msg_pack_into  # noqa: E402
from ryu.lib.packet import ethernet, packet  # noqa: E402
from ryu.ofproto import ofproto_v1_3, ofproto_v1_3_parser  # noqa: E402

from controller.api import JSON, METRICS_PATH, RestApi, allowed_hosts  # noqa: E402
from controller.engine import Engine, GcPauses, collections_after  # noqa: E402
from controller.model import HostPort  # noqa: E402
from controller.registry import Registry  # noqa: E402
from controller.rules import (  # noqa: E402
    CACHE_ENTRIES,
    COOKIE_OURS_MASK,
    COOKIE_OWNER_MASK,
    COOKIE_TAG,
    FORWARD_TABLE,
    MARK_TABLE,
    FlowRule,
    Op,
    OpKind,
)
from controller.switch_counters import PortSample, QueueSample, SwitchCounters  # noqa: E402
from controller.switching import (  # noqa: E402
    Forward,
    Forwarding,
    PacketIn,
    PacketOut,
    PortRequest,
    ResetSwitch,
    SendFrame,
    SwitchOp,
    SwitchOps,
    TableMiss,
    Unforward,
)
from controller.telemetry import Telemetry  # noqa: E402

LOG = logging.getLogger("controller")
APP_KEY = "hpo_app"
FORWARD_PRIORITY = 10  # frames to a host
PAIR_FORWARD_PRIORITY = 20  # frames of one host pair, where a switch chooses among next hops
DISCOVERY_PERIOD_S = 1.0  # link discovery probes every port this often
FORWARD_COOKIE = ((COOKIE_TAG | 0x3) << 32) | 0  # static and learned forwarding rules


@dataclass
class Settings:
    """What the launcher hands the app (:func:`run_manager` passes it to the app's constructor
    with Ryu's contexts)."""

    policy: str = "beamer"
    policy_options: dict = field(default_factory=dict)
    offered_policies: list[str] = field(default_factory=list)  # --load-policy
    db_path: str = "controller.sqlite"
    tick_s: float = 1.0
    link_bps: float = 20e6
    hosts: list[HostPort] = field(default_factory=list)
    verbose: bool = False
    rest_host: str = "127.0.0.1"
    api_token: str | None = None
    stats_s: float = 5.0  # seconds between port and queue statistics requests; 0: none


# A REST connection that sends nothing for this long is closed, so idle or half-open
# connections cannot hold the server's green threads for good; and there are enough of those
# (each costs a few kB) that it takes thousands of idle connections to make a request wait.
REST_SOCKET_TIMEOUT_S = 10
REST_MAX_CONNECTIONS = 8192


def rest_connection_limit() -> int:
    """Connections served at once: :data:`REST_MAX_CONNECTIONS`, raising this process's open
    file limit to its hard limit if need be, and leaving half the descriptors for the rest."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 2 * REST_MAX_CONNECTIONS:
        soft = hard if hard == resource.RLIM_INFINITY else min(hard, 2 * REST_MAX_CONNECTIONS)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft == resource.RLIM_INFINITY:
        return REST_MAX_CONNECTIONS
    return max(64, min(REST_MAX_CONNECTIONS, soft // 2))


class HpoScheduler(app_manager.RyuApp):
    """Installs per-coflow DSCP-marking rules and meters following the active policy."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    _CONTEXTS = {"wsgi": WSGIApplication}

    def __init__(self, *args, settings: Settings, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.settings = settings
        if not settings.verbose:  # one access-log line per REST request is too much
            logging.getLogger("ryu.lib.hub").setLevel(logging.WARNING)
        self.registry = Registry(settings.db_path, hosts={h.name: h.ip for h in settings.hosts})
        self.engine = Engine(
            self.registry,
            settings.policy,
            settings.policy_options,
            settings.link_bps,
            {h.ip: h.bps for h in settings.hosts if h.bps},
            gc_pauses=GcPauses().install(),
            offered_policies=settings.offered_policies,
        )
        self.wake = hub.Event()
        self.switch_counters = SwitchCounters()
        self.api = RestApi(
            self.engine,
            on_change=self.wake.set,
            token=settings.api_token,
            allowed_hosts=allowed_hosts(settings.rest_host),
            fabric=lambda: self.forwarding.to_json(),
            telemetry=Telemetry(self.engine, self.switch_counters),
        )
        # the xid of the last queue statistics request per switch, and the switches that
        # refused one (an error answering it): those are not asked again until they reconnect
        self._queue_stats_xid: dict[int, int] = {}
        self._no_queue_stats: set[int] = set()
        self.forwarding = Forwarding(settings.hosts)
        self.engine.edge_switch = self.forwarding.switch_of_ip
        self.datapaths: dict[int, object] = {}
        kwargs["wsgi"].register(RestController, {APP_KEY: self})
        LOG.info(
            "policy %s, %d coflows / %d jobs restored from %s",
            self.engine.policy_name,
            len(self.registry.records["coflows"]),
            len(self.registry.records["jobs"]),
            settings.db_path,
        )
        self.threads.append(hub.spawn(self._reorder_loop))
        self.threads.append(hub.spawn(self._discovery_loop))
        if settings.stats_s > 0:
            self.threads.append(hub.spawn(self._stats_loop))

    # ---- switch life cycle -------------------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features_handler(self, ev) -> None:
        """A switch connected: reset our rules, install forwarding, and wake the reorder loop to
        install the plan."""
        datapath = ev.msg.datapath
        self.datapaths[datapath.id] = datapath
        self._no_queue_stats.discard(datapath.id)
        self.send_ops(self.forwarding.switch_connected(datapath.id))
        self.engine.switch_connected(datapath.id)
        self.engine.note_event()
        self.wake.set()
        LOG.info("switch %016x connected", datapath.id)

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change_handler(self, ev) -> None:
        """A switch disconnected: forget it until it reconnects."""
        if ev.state == DEAD_DISPATCHER and self.datapaths.pop(ev.datapath.id, None):
            self.send_ops(self.forwarding.switch_gone(ev.datapath.id))
            self.engine.switch_gone(ev.datapath.id)
            self.switch_counters.switch_gone(ev.datapath.id)
            LOG.info("switch %016x disconnected", ev.datapath.id)

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def port_desc_handler(self, ev) -> None:
        """A switch's ports: probe them for links (:class:`Forwarding`)."""
        live, down = port_states(ev.msg.datapath, ev.msg.body)
        self.send_ops(self.forwarding.ports_described(ev.msg.datapath.id, live, down))

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status_handler(self, ev) -> None:
        """A port went down (reroute) or came up (probe it)."""
        datapath, desc = ev.msg.datapath, ev.msg.desc
        up = ev.msg.reason != datapath.ofproto.OFPPR_DELETE and port_is_up(datapath, desc)
        self.send_ops(self.forwarding.port_changed(datapath.id, desc.port_no, up))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def error_msg_handler(self, ev) -> None:
        """The switch rejected a message: count it and log it (a rejected FlowMod is a bug).
        A switch that refuses queue statistics is only not asked for them again."""
        msg = ev.msg
        dpid = msg.datapath.id
        if msg.xid is not None and self._queue_stats_xid.get(dpid) == msg.xid:
            self._no_queue_stats.add(dpid)
            LOG.info(
                "switch %016x has no queue statistics (error type=%d code=%d): its bytes per "
                "priority level are not reported",
                dpid,
                msg.type,
                msg.code,
            )
            return
        self.engine.note_switch_error()
        LOG.error("switch error type=%d code=%d data=%s", msg.type, msg.code, msg.data[:64])

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def port_stats_handler(self, ev) -> None:
        """A switch's port counters (:class:`SwitchCounters`)."""
        msg = ev.msg
        datapath, ofp = msg.datapath, msg.datapath.ofproto
        self.switch_counters.ports_reported(
            datapath.id,
            [
                PortSample(
                    s.port_no, s.rx_bytes, s.tx_bytes, s.rx_packets, s.tx_packets, s.tx_dropped
                )
                for s in msg.body
                if s.port_no <= ofp.OFPP_MAX
            ],
            last=not msg.flags & ofp.OFPMPF_REPLY_MORE,
        )

    @set_ev_cls(ofp_event.EventOFPQueueStatsReply, MAIN_DISPATCHER)
    def queue_stats_handler(self, ev) -> None:
        """A switch's queue counters (:class:`SwitchCounters`: a queue is a level's class)."""
        msg = ev.msg
        datapath, ofp = msg.datapath, msg.datapath.ofproto
        self.switch_counters.queues_reported(
            datapath.id,
            [
                QueueSample(s.port_no, s.queue_id, s.tx_bytes, s.tx_packets, s.tx_errors)
                for s in msg.body
                if s.port_no <= ofp.OFPP_MAX
            ],
            last=not msg.flags & ofp.OFPMPF_REPLY_MORE,
        )

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in_handler(self, ev) -> None:
        """A packet for the controller: learn and forward it (:class:`Forwarding`)."""
        if (packet_in := parse_packet_in(ev.msg)) is not None:
            self.send_ops(self.forwarding.packet_in(packet_in))

    def send_ops(self, ops: SwitchOps) -> None:
        """Send forwarding operations to the switches they are for (if still connected)."""
        for dpid, switch_ops in ops.items():
            if (datapath := self.datapaths.get(dpid)) is not None:
                send(datapath, switch_ops)

    # ---- reordering ----------------------------------------------------------------------------

    def _reorder_loop(self) -> None:
        # Everything loaded so far (Ryu, eventlet, the parsers: most of the heap) lives as long
        # as the process: kept out of full garbage collections, which otherwise walk it all
        # and hold the event loop for 100-140 ms (benchmarks/controller_latency.py).
        gc.freeze()
        while True:
            self.wake.wait(timeout=self.settings.tick_s)
            self.wake.clear()
            try:
                self.reorder_and_send()
            except Exception:  # keep the loop alive; the error is in the log
                LOG.exception("reorder failed")

    def _discovery_loop(self) -> None:
        while True:
            hub.sleep(DISCOVERY_PERIOD_S)
            try:
                self.send_ops(self.forwarding.tick())
            except Exception:  # keep the loop alive; the error is in the log
                LOG.exception("link discovery failed")

    def _stats_loop(self) -> None:
        while True:
            hub.sleep(self.settings.stats_s)
            try:
                self.request_stats()
            except Exception:  # keep the loop alive; the error is in the log
                LOG.exception("port statistics request failed")

    def request_stats(self) -> None:
        """Ask every switch for its port counters and, unless it refused before, its queue
        counters (two small requests; the replies come to the handlers above)."""
        for dpid, datapath in list(self.datapaths.items()):
            parser, ofp = datapath.ofproto_parser, datapath.ofproto
            datapath.send_msg(parser.OFPPortStatsRequest(datapath, 0, ofp.OFPP_ANY))
            if dpid not in self._no_queue_stats:
                request = parser.OFPQueueStatsRequest(datapath, 0, ofp.OFPP_ANY, ofp.OFPQ_ALL)
                datapath.send_msg(request)
                self._queue_stats_xid[dpid] = request.xid

    def reorder_and_send(self) -> None:
        """Recompute the plan and send every switch what changed (garbage collections wait
        until it is sent: :func:`collections_after`)."""
        hold = _Hold(self.engine, "reorder")
        with collections_after():
            plan = self.engine.reorder()
            computed_s = hold.elapsed_s()
            for dpid, datapath in list(self.datapaths.items()):
                ops = self.engine.ops_for(dpid)
                # in slices, the loop free in between: a large update does not stall the
                # other switches and the REST API for its whole length
                for at in range(0, len(ops), SEND_SLICE):
                    if at:
                        hold.end()
                        hub.sleep(0)
                        hold = _Hold(self.engine, "reorder")
                    chunk = ops[at : at + SEND_SLICE]
                    send_together(datapath, [build_message(datapath, op) for op in chunk])
            self.engine.sent()
        hold.end(
            f"a reorder's computation ({computed_s * 1e3:.1f} ms, "
            f"{len(plan.state.coflows)} coflows) and sending"
        )


# a request or reorder that holds the event loop longer is logged (benchmarks/loop_hold.py
# measures the holds at the registration limits of controller/limits.py)
LONG_HOLD_S = 0.05
# FlowMods built and sent between two yields of a reorder (about 0.15 ms each here)
SEND_SLICE = 128


class _Hold:
    """One stretch of work on the event loop, timed (wall and thread CPU) from its creation
    to :meth:`end`, which records it with the engine and logs it when over
    :data:`LONG_HOLD_S`."""

    def __init__(self, engine: Engine, kind: str) -> None:
        self.engine, self.kind = engine, kind
        self.started, self.cpu_started = time.perf_counter(), time.thread_time()

    def elapsed_s(self) -> float:
        """Wall time since the start."""
        return time.perf_counter() - self.started

    def end(self, what: str = "") -> None:
        """Record the stretch (``what`` names it in the log if it was long)."""
        held, cpu = self.elapsed_s(), time.thread_time() - self.cpu_started
        self.engine.note_hold(self.kind, held, cpu)
        if held > LONG_HOLD_S:
            LOG.warning("%s held the event loop %.1f ms, %.1f ms of it running",
                        what or f"a {self.kind} slice", held * 1e3, cpu * 1e3)  # fmt: skip


class RestController(ControllerBase):
    """Hands every ``/api/...`` request and ``/metrics`` to :class:`controller.api.RestApi`."""

    def __init__(self, req, link, data, **config) -> None:
        super().__init__(req, link, data, **config)
        self.app: HpoScheduler = data[APP_KEY]

    # "[\s\S]" and not ".": an id with a newline must still reach the API's JSON errors
    @route("api", "/api/{path}", requirements={"path": r"[\s\S]*"})
    def dispatch(self, req, **_kwargs) -> Response:
        """Every ``/api/...`` request."""
        return self._serve(req)

    @route("api_root", "/api", requirements={})
    def dispatch_root(self, req, **_kwargs) -> Response:
        """``/api`` itself."""
        return self._serve(req)

    @route("metrics", METRICS_PATH, requirements={})
    def metrics(self, req, **_kwargs) -> Response:
        """``/metrics``, for Prometheus."""
        return self._serve(req)

    def _serve(self, req) -> Response:
        hold = _Hold(self.app.api.engine, "rest")
        reply = self.app.api.respond(req.method, req.path, req.body, req.headers)
        json_reply = reply.content_type == JSON
        response = Response(
            status=reply.status,
            content_type=reply.content_type,
            charset="utf-8",
            body=json.dumps(reply.payload) if json_reply else reply.payload,
        )
        response.headers.update(reply.headers)
        hold.end(f"{req.method} {req.path} ({len(req.body)} bytes in, status {reply.status})")
        return response


# ---- OpenFlow message builders (the datapath only supplies the parser) ----------------------


class PackedMatch(ofproto_v1_3_parser.OFPMatch):
    """A rule's match, already in OpenFlow 1.3 wire format: what ``OFPFlowMod.serialize`` needs.

    A reorder re-sends the same matches with new marks, and building and packing OXM fields
    (address parsing) was most of the cost of a FlowMod. Only the bytes are cached: a cached
    ``OFPMatch`` is about ten objects (its lists, wildcards and flow), and every full garbage
    collection walked them all while the event loop waited.
    """

    def __init__(self, fields: tuple, packed: bytes) -> None:
        # OFPMatch.__init__ is skipped on purpose: its parsed state is what is not kept.
        self.fields = fields
        self._packed = packed

    def items(self):
        """The ``(OXM field, value)`` pairs, as ``OFPMatch.items`` gives them."""
        return iter(self.fields)

    def serialize(self, buf, offset) -> int:
        """Write the packed match at ``offset`` in ``buf``; returns its length."""
        msg_pack_into(f"!{len(self._packed)}s", buf, offset, self._packed)
        return len(self._packed)


_MATCHES: dict[tuple, bytes] = {}
_MATCH_CACHE_SIZE = 4 * CACHE_ENTRIES  # up to 4 rules per pair (2 ports x 2 directions)


def packed_match(match: tuple) -> PackedMatch:
    """The packed OpenFlow 1.3 match for a rule's match tuple (its bytes are cached)."""
    packed = _MATCHES.get(match)
    if packed is None:
        if len(_MATCHES) >= _MATCH_CACHE_SIZE:
            _MATCHES.clear()
        buf = bytearray()
        length = ofproto_v1_3_parser.OFPMatch(**dict(match)).serialize(buf, 0)
        packed = _MATCHES[match] = bytes(buf[:length])
    return PackedMatch(match, packed)


def build_message(datapath, op: Op):
    """The OpenFlow 1.3 message for one :class:`controller.rules.Op` (OpenFlow 1.3 only)."""
    parser, ofp = datapath.ofproto_parser, datapath.ofproto
    match op.kind:
        case OpKind.FLOW_ADD | OpKind.FLOW_MODIFY:
            adding = op.kind == OpKind.FLOW_ADD
            return parser.OFPFlowMod(
                datapath=datapath,
                cookie=op.rule.cookie,
                cookie_mask=0 if adding else COOKIE_OWNER_MASK,
                table_id=MARK_TABLE,
                command=ofp.OFPFC_ADD if adding else ofp.OFPFC_MODIFY_STRICT,
                priority=op.rule.priority,
                match=packed_match(op.rule.match),
                instructions=_mark_instructions(datapath, op.rule),
            )
        case OpKind.OWNER_MODIFY:
            return parser.OFPFlowMod(
                datapath=datapath,
                cookie=op.rule.cookie,
                cookie_mask=COOKIE_OWNER_MASK,
                table_id=MARK_TABLE,
                command=ofp.OFPFC_MODIFY,
                match=packed_match(op.rule.match),
                instructions=_mark_instructions(datapath, op.rule),
            )
        case OpKind.FLOW_DELETE:
            return parser.OFPFlowMod(
                datapath=datapath,
                cookie=op.rule.cookie,
                cookie_mask=COOKIE_OWNER_MASK,
                table_id=MARK_TABLE,
                command=ofp.OFPFC_DELETE_STRICT,
                priority=op.rule.priority,
                out_port=ofp.OFPP_ANY,
                out_group=ofp.OFPG_ANY,
                match=packed_match(op.rule.match),
            )
        case OpKind.METER_ADD | OpKind.METER_MODIFY:
            # No burst size: a small burst (5000) halved TCP goodput on this datapath.
            return parser.OFPMeterMod(
                datapath=datapath,
                command=ofp.OFPMC_ADD if op.kind == OpKind.METER_ADD else ofp.OFPMC_MODIFY,
                flags=ofp.OFPMF_KBPS,
                meter_id=op.meter_id,
                bands=[parser.OFPMeterBandDrop(rate=op.rate_kbps, burst_size=0)],
            )
        case OpKind.METER_DELETE:
            return parser.OFPMeterMod(
                datapath=datapath, command=ofp.OFPMC_DELETE, meter_id=op.meter_id
            )
        case OpKind.BARRIER:
            return parser.OFPBarrierRequest(datapath)
    raise ValueError(f"unknown op {op.kind}")


def parse_packet_in(msg) -> PacketIn | None:
    """The :class:`PacketIn` of an OpenFlow packet-in (``None`` for a frame without Ethernet)."""
    eth = packet.Packet(msg.data).get_protocol(ethernet.ethernet)
    if eth is None:
        return None
    no_buffer = msg.buffer_id == msg.datapath.ofproto.OFP_NO_BUFFER
    return PacketIn(
        dpid=msg.datapath.id,
        in_port=msg.match["in_port"],
        eth_src=eth.src,
        eth_dst=eth.dst,
        buffer_id=None if no_buffer else msg.buffer_id,
        data=msg.data,
    )


def send_together(datapath, messages: list) -> None:
    """Send ``messages`` to ``datapath`` as one write, in order: one entry in Ryu's send queue
    and one socket write for a reorder's operations, not one each (the switch reads the same
    stream of OpenFlow messages)."""
    if not messages:
        return
    for msg in messages:
        datapath.set_xid(msg)
        msg.serialize()
    datapath.send(b"".join(msg.buf for msg in messages))


def send(datapath, ops: list[SwitchOp]) -> None:
    """Send the OpenFlow messages of forwarding operations to ``datapath``."""
    for op in ops:
        for msg in switch_messages(datapath, op):
            datapath.send_msg(msg)


def switch_messages(datapath, op: SwitchOp) -> list:
    """The OpenFlow 1.3 messages of one forwarding operation (:mod:`controller.switching`)."""
    parser, ofp = datapath.ofproto_parser, datapath.ofproto
    match op:
        case ResetSwitch():
            return _reset_switch(datapath)
        case TableMiss():
            return _table_miss(datapath)
        case PortRequest():
            return [parser.OFPPortDescStatsRequest(datapath, 0)]
        case Forward(mac=mac, port=port, eth_src=eth_src):
            return [_forward_rule(datapath, mac, port, eth_src)]
        case Unforward(mac=mac, eth_src=eth_src):
            return [_unforward_rule(datapath, mac, eth_src)]
        case SendFrame(port=port, data=data):
            return [
                parser.OFPPacketOut(
                    datapath=datapath,
                    buffer_id=ofp.OFP_NO_BUFFER,
                    in_port=ofp.OFPP_CONTROLLER,
                    actions=[parser.OFPActionOutput(port)],
                    data=data,
                )
            ]
        case PacketOut(packet=packet_in, port=port):
            buffered = packet_in.buffer_id is not None
            return [
                parser.OFPPacketOut(
                    datapath=datapath,
                    buffer_id=packet_in.buffer_id if buffered else ofp.OFP_NO_BUFFER,
                    in_port=packet_in.in_port,
                    actions=[parser.OFPActionOutput(ofp.OFPP_FLOOD if port is None else port)],
                    data=None if buffered else packet_in.data,
                )
            ]
    raise ValueError(f"unknown switch operation {op!r}")


def _mark_instructions(datapath, rule: FlowRule) -> list:
    parser, ofp = datapath.ofproto_parser, datapath.ofproto
    instructions = []
    if rule.meter_id is not None:
        instructions.append(parser.OFPInstructionMeter(rule.meter_id, ofp.OFPIT_METER))
    instructions.append(
        parser.OFPInstructionActions(
            ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionSetField(ip_dscp=rule.dscp)]
        )
    )
    instructions.append(parser.OFPInstructionGotoTable(FORWARD_TABLE))
    return instructions


def _reset_switch(datapath) -> list:
    """Remove what an earlier run of this controller left: our rules, the forwarding table,
    and every meter (the switch's meters belong to this controller)."""
    parser, ofp = datapath.ofproto_parser, datapath.ofproto
    return [
        parser.OFPFlowMod(
            datapath=datapath,
            cookie=COOKIE_TAG << 32,
            cookie_mask=COOKIE_OURS_MASK,
            table_id=ofp.OFPTT_ALL,
            command=ofp.OFPFC_DELETE,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
        ),
        parser.OFPMeterMod(datapath=datapath, command=ofp.OFPMC_DELETE, meter_id=ofp.OFPM_ALL),
        parser.OFPBarrierRequest(datapath),
    ]


def _table_miss(datapath) -> list:
    """Table-miss rules: table 0 -> table 1 -> controller."""
    parser, ofp = datapath.ofproto_parser, datapath.ofproto
    return [
        parser.OFPFlowMod(
            datapath=datapath,
            cookie=FORWARD_COOKIE,
            table_id=MARK_TABLE,
            priority=0,
            match=parser.OFPMatch(),
            instructions=[parser.OFPInstructionGotoTable(FORWARD_TABLE)],
        ),
        parser.OFPFlowMod(
            datapath=datapath,
            cookie=FORWARD_COOKIE,
            table_id=FORWARD_TABLE,
            priority=0,
            match=parser.OFPMatch(),
            instructions=[
                parser.OFPInstructionActions(
                    ofp.OFPIT_APPLY_ACTIONS,
                    [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)],
                )
            ],
        ),
    ]


def _forward_match(parser, mac: str, eth_src: str | None):
    if eth_src is None:
        return FORWARD_PRIORITY, parser.OFPMatch(eth_dst=mac)
    return PAIR_FORWARD_PRIORITY, parser.OFPMatch(eth_src=eth_src, eth_dst=mac)


def _forward_rule(datapath, mac: str, port: int, eth_src: str | None = None):
    parser, ofp = datapath.ofproto_parser, datapath.ofproto
    priority, match = _forward_match(parser, mac, eth_src)
    return parser.OFPFlowMod(
        datapath=datapath,
        cookie=FORWARD_COOKIE,
        table_id=FORWARD_TABLE,
        priority=priority,
        match=match,
        instructions=[
            parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(port)])
        ],
    )


def _unforward_rule(datapath, mac: str, eth_src: str | None):
    parser, ofp = datapath.ofproto_parser, datapath.ofproto
    priority, match = _forward_match(parser, mac, eth_src)
    return parser.OFPFlowMod(
        datapath=datapath,
        cookie=FORWARD_COOKIE,
        cookie_mask=COOKIE_OWNER_MASK,
        table_id=FORWARD_TABLE,
        command=ofp.OFPFC_DELETE_STRICT,
        priority=priority,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=match,
    )


def port_is_up(datapath, desc) -> bool:
    """Whether an OpenFlow 1.3 port is administratively up and has a link."""
    ofp = datapath.ofproto
    return not (desc.state & ofp.OFPPS_LINK_DOWN or desc.config & ofp.OFPPC_PORT_DOWN)


def port_states(datapath, ports) -> tuple[list[int], list[int]]:
    """The physical ports of a port description, as (up, down) port numbers."""
    live, down = [], []
    for desc in ports:
        if desc.port_no <= datapath.ofproto.OFPP_MAX:
            (live if port_is_up(datapath, desc) else down).append(desc.port_no)
    return live, down


def run_manager(
    settings: Settings, ofp_host: str, ofp_port: int, rest_host: str, rest_port: int, extra=()
) -> None:
    """Run this app under Ryu's manager with ``settings`` (blocks until the process is stopped).

    What ``ryu-manager`` does, except that the app gets ``settings`` with Ryu's contexts."""
    from ryu import cfg, log
    from ryu.app import wsgi
    from ryu.base.app_manager import AppManager
    from ryu.cmd import manager  # noqa: F401  (registers the options parsed below)

    max_connections = rest_connection_limit()

    def serve_bounded(server) -> None:  # Ryu's own serve_forever sets no limits
        server.logger = hub.LoggingWrapper()
        eventlet.wsgi.server(
            server.server,
            server.handle,
            server.logger,
            max_size=max_connections,
            socket_timeout=REST_SOCKET_TIMEOUT_S,
        )

    wsgi.WSGIServer.serve_forever = serve_bounded
    cfg.CONF(
        args=[
            "--ofp-listen-host",
            ofp_host,
            "--ofp-tcp-listen-port",
            str(ofp_port),
            "--wsapi-host",
            rest_host,
            "--wsapi-port",
            str(rest_port),
            *extra,
        ],
        project="ryu",
    )
    log.init_log()
    hub.patch(thread=True)
    app_mgr = AppManager.get_instance()
    app_mgr.load_apps([__name__])
    contexts = app_mgr.create_contexts()
    services = app_mgr.instantiate_apps(settings=settings, **contexts)
    services.append(hub.spawn(wsgi.start_service(app_mgr)))
    try:
        hub.joinall(services)
    finally:
        app_mgr.close()
