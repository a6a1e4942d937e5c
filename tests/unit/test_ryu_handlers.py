"""Every Ryu handler of the app, driven with fake events and a fake datapath that keeps the
OpenFlow messages it is sent (each serialised, so each is a valid OpenFlow 1.3 message)."""

from __future__ import annotations

import json
import struct
from types import SimpleNamespace

import pytest

ryu_app = pytest.importorskip("controller.ryu_app", reason="Ryu is installed by scripts/setup.sh")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from ryu.app.wsgi import WSGIApplication  # noqa: E402
from ryu.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER  # noqa: E402
from ryu.lib.packet import ethernet, packet  # noqa: E402
from ryu.ofproto import ofproto_parser  # noqa: E402
from ryu.ofproto import ofproto_v1_3 as ofp  # noqa: E402
from ryu.ofproto import ofproto_v1_3_parser as parser  # noqa: E402

from controller.model import HostPort  # noqa: E402

H1, H2, H3 = "00:00:00:00:00:01", "00:00:00:00:00:02", "00:00:00:00:00:03"


class RawMessage(SimpleNamespace):
    """A message the fake switch kept as bytes: ``msg_type``, ``xid`` and ``buf``."""

    def serialize(self) -> None:
        """Already bytes (as a Ryu message is once serialised)."""


class FakeDatapath:
    ofproto = ofp
    ofproto_parser = parser

    def __init__(self, dpid: int) -> None:
        self.id = dpid
        self.sent: list = []
        self.writes = 0  # calls of send (raw bytes)
        self.xid = 0

    def set_xid(self, msg) -> None:
        self.xid += 1  # (as Ryu's: one more for every message)
        msg.set_xid(self.xid)

    def send_msg(self, msg) -> None:
        if msg.xid is None:  # (as Ryu's: a message sent without one gets the next)
            self.set_xid(msg)
        msg.serialize()
        self.sent.append(msg)

    def send(self, buf: bytes) -> None:
        """Raw bytes, as Ryu's ``Datapath.send`` takes them: split into the messages they hold,
        so a write of several messages must be a valid stream of them. FlowMods are parsed
        back (Ryu parses few other messages a controller sends); the rest are kept as
        :class:`RawMessage`."""
        self.writes += 1
        while buf:
            version, msg_type, msg_len, xid = ofproto_parser.header(buf)
            assert version == ofp.OFP_VERSION and ofp.OFP_HEADER_SIZE <= msg_len <= len(buf)
            if msg_type == ofp.OFPT_FLOW_MOD:
                msg = ofproto_parser.msg(self, version, msg_type, msg_len, xid, buf[:msg_len])
                assert msg is not None
            else:
                msg = RawMessage(msg_type=msg_type, xid=xid, buf=bytes(buf[:msg_len]))
            self.sent.append(msg)
            buf = buf[msg_len:]

    def take(self) -> list:
        sent, self.sent = self.sent, []
        return sent


def frame(src: str, dst: str) -> bytes:
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=dst, src=src, ethertype=0x88B5))
    pkt.serialize()
    return bytes(pkt.data)


def packet_in(datapath, in_port: int, src: str, dst: str):
    msg = SimpleNamespace(
        datapath=datapath,
        data=frame(src, dst),
        match={"in_port": in_port},
        buffer_id=ofp.OFP_NO_BUFFER,
    )
    return SimpleNamespace(msg=msg)


@pytest.fixture
def app():
    settings = ryu_app.Settings(
        db_path=":memory:",
        hosts=[HostPort("h1", "10.0.0.1", H1, 1), HostPort("h2", "10.0.0.2", H2, 2)],
    )
    app = ryu_app.HpoScheduler(settings=settings, wsgi=WSGIApplication())
    yield app
    for thread in app.threads:
        thread.kill()


def test_a_connecting_switch_is_reset_and_gets_forwarding(app):
    datapath = FakeDatapath(0xAA)
    app.switch_features_handler(SimpleNamespace(msg=SimpleNamespace(datapath=datapath)))
    sent = datapath.take()
    delete, meters, barrier, miss0, miss1, ports, to_h1, to_h2 = sent
    assert delete.command == ofp.OFPFC_DELETE and delete.cookie_mask == ryu_app.COOKIE_OURS_MASK
    assert meters.command == ofp.OFPMC_DELETE and meters.meter_id == ofp.OFPM_ALL
    assert isinstance(barrier, parser.OFPBarrierRequest)
    assert (miss0.table_id, miss1.table_id) == (0, 1)
    assert isinstance(ports, parser.OFPPortDescStatsRequest)
    assert [dict(m.match.items()) for m in (to_h1, to_h2)] == [{"eth_dst": H1}, {"eth_dst": H2}]
    assert app.engine.switches == {0xAA: app.engine.switches[0xAA]} and app.wake.is_set()


def test_a_registration_reaches_the_switch_as_marking_rules(app):
    datapath = FakeDatapath(0xAA)
    app.switch_features_handler(SimpleNamespace(msg=SimpleNamespace(datapath=datapath)))
    datapath.take()
    body = json.dumps({"flows": [{"src": "h1", "dst": "h2", "bytes": 1e6}]}).encode()
    status, _ = app.api.handle("PUT", "/api/coflows/1", body, {"Content-Type": "application/json"})
    assert status == 201
    app.reorder_and_send()
    mods = [m for m in datapath.take() if isinstance(m, parser.OFPFlowMod)]
    # the pair and its reverse direction (the ACKs), each marked with level 0's DSCP
    assert len(mods) == 2 and {m.command for m in mods} == {ofp.OFPFC_ADD}
    assert all(m.instructions[0].actions[0].value == 56 for m in mods)


def test_packets_are_learned_then_forwarded(app):
    datapath = FakeDatapath(0xBB)
    app.switch_features_handler(SimpleNamespace(msg=SimpleNamespace(datapath=datapath)))
    datapath.take()
    # one switch: no loop to fear, so a broadcast floods; its sender is learned on the way
    app.packet_in_handler(packet_in(datapath, 3, H3, "ff:ff:ff:ff:ff:ff"))
    rule, flood = datapath.take()
    assert dict(rule.match.items()) == {"eth_dst": H3} and rule.table_id == 1
    assert rule.instructions[0].actions[0].port == 3
    assert flood.actions[0].port == ofp.OFPP_FLOOD and flood.data is not None
    app.packet_in_handler(packet_in(datapath, 1, H1, H3))
    (out,) = datapath.take()
    assert out.actions[0].port == 3


def test_errors_are_counted_and_a_lost_switch_is_forgotten(app):
    datapath = FakeDatapath(0xCC)
    app.switch_features_handler(SimpleNamespace(msg=SimpleNamespace(datapath=datapath)))
    error = SimpleNamespace(datapath=datapath, xid=7, type=4, code=9, data=b"x")
    app.error_msg_handler(SimpleNamespace(msg=error))
    assert app.engine.stats.switch_errors == 1
    app.state_change_handler(SimpleNamespace(state=MAIN_DISPATCHER, datapath=datapath))
    assert 0xCC in app.datapaths
    app.state_change_handler(SimpleNamespace(state=DEAD_DISPATCHER, datapath=datapath))
    assert 0xCC not in app.datapaths and 0xCC not in app.engine.switches
    assert 0xCC not in app.forwarding.installed and 0xCC not in app.forwarding.fabric.graph


def test_no_garbage_collection_starts_while_a_reorder_is_computed_or_sent(app, monkeypatch):
    import gc

    datapath = FakeDatapath(0xAA)
    app.switch_features_handler(SimpleNamespace(msg=SimpleNamespace(datapath=datapath)))
    body = json.dumps({"flows": [{"src": "h1", "dst": "h2", "bytes": 1e6}]}).encode()
    app.api.handle("PUT", "/api/coflows/1", body, {"Content-Type": "application/json"})
    enabled_in = []  # whether the collector may run, at the reorder and at each write

    def noting(call):
        return lambda *args: enabled_in.append(gc.isenabled()) or call(*args)

    monkeypatch.setattr(app.engine, "reorder", noting(app.engine.reorder))
    monkeypatch.setattr(datapath, "send", noting(datapath.send))
    monkeypatch.setattr(datapath, "send_msg", noting(datapath.send_msg))
    was_enabled = gc.isenabled()
    gc.enable()  # (as the controller runs)
    try:
        app.reorder_and_send()
        enabled_after = gc.isenabled()
    finally:
        (gc.enable if was_enabled else gc.disable)()
    assert len(enabled_in) >= 2 and not any(enabled_in) and enabled_after  # (a reorder, a write)


@pytest.mark.parametrize("policy", ["fair", "varys"])  # (varys: meters too)
def test_a_reorder_reaches_each_switch_as_one_write_of_its_messages_in_order(app, policy):
    app.engine.set_policy(policy)
    datapath = FakeDatapath(0xAA)
    app.switch_features_handler(SimpleNamespace(msg=SimpleNamespace(datapath=datapath)))
    datapath.take()
    for coflow_id, (src, dst) in enumerate([("h1", "h2"), ("h2", "h1"), ("h1", "h2")], 1):
        body = json.dumps({"flows": [{"src": src, "dst": dst, "bytes": 1e6 * coflow_id}]})
        app.api.handle("PUT", f"/api/coflows/{coflow_id}", body.encode(),
                       {"Content-Type": "application/json"})  # fmt: skip
    ops = None
    real_ops_for = app.engine.ops_for

    def keeping(dpid):
        nonlocal ops
        ops = real_ops_for(dpid)
        return ops

    app.engine.ops_for = keeping
    app.reorder_and_send()
    sent = datapath.take()
    assert datapath.writes == 1 and len(ops) >= 3 and len(sent) == len(ops)
    if policy == "varys":  # its rate caps: meters, sent in the same write
        assert any(isinstance(m, RawMessage) and m.msg_type == ofp.OFPT_METER_MOD for m in sent)
    xids = [m.xid for m in sent]
    assert xids == sorted(set(xids))  # each its own, in the order of the operations
    for op, msg in zip(ops, sent, strict=True):
        expected = ryu_app.build_message(datapath, op)
        expected.set_xid(msg.xid)
        expected.serialize()
        msg.serialize()
        assert bytes(msg.buf) == bytes(expected.buf)
    app.reorder_and_send()  # nothing changed: nothing written
    assert datapath.writes == 1 and datapath.take() == []


def stats_reply(datapath, kind: int, pack: str, rows: list[tuple], more: bool = False):
    """A multipart reply of ``kind`` with ``rows`` packed as ``pack``, as the switch sends it,
    parsed by Ryu (the event a handler gets)."""
    body = b"".join(struct.pack(pack, *row) for row in rows)
    head = struct.pack(ofp.OFP_MULTIPART_REPLY_PACK_STR, kind, ofp.OFPMPF_REPLY_MORE if more else 0)
    length = ofp.OFP_HEADER_SIZE + len(head) + len(body)
    buf = struct.pack(ofp.OFP_HEADER_PACK_STR, ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY, length,
                      9) + head + body  # fmt: skip
    msg = ofproto_parser.msg(datapath, ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY, length, 9, buf)
    return SimpleNamespace(msg=msg)


def port_row(port_no: int, rx_bytes: int, tx_bytes: int, tx_dropped: int = 0) -> tuple:
    # port, rx/tx packets, rx/tx bytes, rx/tx dropped, rx/tx errors, 4 error counts, duration
    return (port_no, 10, 20, rx_bytes, tx_bytes, 0, tx_dropped, 0, 0, 0, 0, 0, 0, 5, 0)


def test_port_and_queue_counters_are_asked_for_and_kept_by_level(app):
    datapath = FakeDatapath(0xAA)
    app.switch_features_handler(SimpleNamespace(msg=SimpleNamespace(datapath=datapath)))
    datapath.take()
    app.request_stats()
    ports, queues = datapath.take()
    assert isinstance(ports, parser.OFPPortStatsRequest) and ports.port_no == ofp.OFPP_ANY
    assert isinstance(queues, parser.OFPQueueStatsRequest)
    assert (queues.port_no, queues.queue_id) == (ofp.OFPP_ANY, ofp.OFPQ_ALL)

    ports_pack, queues_pack = ofp.OFP_PORT_STATS_PACK_STR, ofp.OFP_QUEUE_STATS_PACK_STR
    port_rows = [port_row(1, 500, 1_000), port_row(2, 40, 9_000, 2), port_row(ofp.OFPP_LOCAL, 1, 1)]
    app.port_stats_handler(stats_reply(datapath, ofp.OFPMP_PORT_STATS, ports_pack, port_rows))
    # queue 15 is level 0's class (1:10), 16 level 1's (1:11), 0 their parent (1:1); the reply
    # comes in two messages
    first, rest = (
        [(2, 15, 7_000, 5, 0, 5, 0)],
        [(2, 16, 1_500, 1, 0, 5, 0), (2, 0, 8_500, 6, 0, 5, 0)],
    )
    app.queue_stats_handler(stats_reply(datapath, ofp.OFPMP_QUEUE, queues_pack, first, more=True))
    app.queue_stats_handler(stats_reply(datapath, ofp.OFPMP_QUEUE, queues_pack, rest))
    counters = app.switch_counters
    assert sorted(counters.ports[0xAA]) == [1, 2]  # not the switch's own LOCAL port
    assert counters.ports[0xAA][2].tx_bytes == 9_000 and counters.ports[0xAA][2].tx_dropped == 2
    assert counters.level_tx_bytes() == {(0xAA, 2, 0): 7_000, (0xAA, 2, 1): 1_500}

    status, text = app.api.handle("GET", "/metrics", b"", {})
    assert status == 200
    (family,) = [
        f for f in text_string_to_metric_families(text.decode())
        if f.name == "hpo_port_level_tx_bytes"
    ]  # fmt: skip
    assert {(s.labels["switch"], s.labels["port"], s.labels["level"]): s.value
            for s in family.samples} == {("00000000000000aa", "2", "0"): 7_000,
                                         ("00000000000000aa", "2", "1"): 1_500}  # fmt: skip

    app.state_change_handler(SimpleNamespace(state=DEAD_DISPATCHER, datapath=datapath))
    assert counters.ports == {} and counters.queues == {}


def test_a_switch_refusing_queue_statistics_is_not_asked_again_nor_counted_as_an_error(app):
    datapath = FakeDatapath(0xAA)
    app.switch_features_handler(SimpleNamespace(msg=SimpleNamespace(datapath=datapath)))
    datapath.take()
    app.request_stats()
    _, queues = datapath.take()
    refusal = SimpleNamespace(datapath=datapath, xid=queues.xid, type=ofp.OFPET_QUEUE_OP_FAILED,
                              code=ofp.OFPQOFC_BAD_QUEUE, data=b"")  # fmt: skip
    app.error_msg_handler(SimpleNamespace(msg=refusal))
    assert app.engine.stats.switch_errors == 0
    app.request_stats()
    (ports,) = datapath.take()
    assert isinstance(ports, parser.OFPPortStatsRequest)
    # another error is the switch's: counted
    other = SimpleNamespace(datapath=datapath, xid=queues.xid + 100, type=4, code=9, data=b"x")
    app.error_msg_handler(SimpleNamespace(msg=other))
    assert app.engine.stats.switch_errors == 1
    # reconnected, it is asked again
    app.switch_features_handler(SimpleNamespace(msg=SimpleNamespace(datapath=datapath)))
    datapath.take()
    app.request_stats()
    assert len(datapath.take()) == 2
