"""Forwarding on the switches, without Ryu: what a switch gets when it connects, what the
controller does with a packet that reaches it, and how forwarding follows the fabric
(Faucet's valve, in small).

The Ryu glue turns the values returned here into OpenFlow messages
(:func:`controller.ryu_app.switch_messages`), as it does with the marking
:class:`controller.rules.Op` values; its handlers only parse the event and send. Every method
returns the operations per switch (:data:`SwitchOps`), since a change on one switch (a link
down) may reroute traffic on others.

On connect a switch loses every rule and meter an earlier run of this controller left (the
cookies say which are ours), gets the table-miss rules (table 0 continues to table 1, table 1
sends to the controller) and is asked for its ports. The controller then discovers the links
between its switches with LLDP probes (:mod:`controller.frames`), keeps the fabric as a graph
(:class:`controller.fabric.FabricGraph`) and installs shortest-path forwarding with hop-by-hop
ECMP on every switch of every path; it reroutes when a port, a link or a switch goes.

Hosts come from the ``--hosts`` file (a host with ``switch`` and ``port`` is placed there; with
``port`` only, on the first switch that connects: a one-switch network) or are learned from the
frames they send into an edge port. ARP requests for a known host are answered by the
controller; other broadcasts and frames for unknown hosts are delivered to every edge port,
never onto a link between switches, so a fabric with loops does not storm. While a single
switch is connected there is no loop to fear, and such frames are flooded.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from controller.fabric import LINK_TIMEOUT_S, FabricGraph, ForwardKey, Link, Location
from controller.frames import ARP_REQUEST, arp_reply, lldp_probe, parse_arp, parse_probe
from controller.model import HostPort


@dataclass(frozen=True, slots=True)
class ResetSwitch:
    """Delete every rule with our cookie tag and every meter, then a barrier."""


@dataclass(frozen=True, slots=True)
class TableMiss:
    """Table 0 continues to table 1 unmarked; table 1 sends the packet to the controller."""


@dataclass(frozen=True, slots=True)
class PortRequest:
    """Ask the switch for its ports (OpenFlow 1.3 port description)."""


@dataclass(frozen=True, slots=True)
class Forward:
    """Frames to ``mac`` (and from ``eth_src``, unless ``None``) leave on ``port`` (table 1)."""

    mac: str
    port: int
    eth_src: str | None = None


@dataclass(frozen=True, slots=True)
class Unforward:
    """Delete the forwarding rule for frames to ``mac`` (and from ``eth_src``)."""

    mac: str
    eth_src: str | None = None


@dataclass(frozen=True, slots=True)
class PacketIn:
    """A packet the switch sent to the controller: where it came in and its Ethernet header;
    ``buffer_id`` is ``None`` when the switch sent the whole packet (``data``) instead."""

    dpid: int
    in_port: int
    eth_src: str
    eth_dst: str
    buffer_id: int | None
    data: bytes


@dataclass(frozen=True, slots=True)
class PacketOut:
    """Send a packet the switch handed over out of ``port`` (``None``: flood)."""

    packet: PacketIn
    port: int | None


@dataclass(frozen=True, slots=True)
class SendFrame:
    """Send ``data`` (a whole Ethernet frame) out of ``port``."""

    port: int
    data: bytes


SwitchOp = ResetSwitch | TableMiss | PortRequest | Forward | Unforward | PacketOut | SendFrame
SwitchOps = dict[int, list[SwitchOp]]  # operations per switch (datapath id)


@dataclass(frozen=True, slots=True)
class FabricChange:
    """A change of the fabric and what it cost: when, what, and the forwarding rules sent."""

    at_s: float
    what: str
    rules_changed: int


class Forwarding:
    """The fabric's forwarding: discovery, host locations, paths and the rules that follow them.

    Args:
        hosts: the hosts of the ``--hosts`` file (may be empty).
        clock: seconds, for link discovery's timeouts.
    """

    def __init__(
        self, hosts: Sequence[HostPort] = (), clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.clock = clock
        placed = {
            h.mac: Location(h.switch, h.port)
            for h in hosts
            if h.mac and h.port and h.switch is not None
        }
        self.unplaced = [h for h in hosts if h.mac and h.port and h.switch is None]
        self.fabric = FabricGraph(placed)
        self.ip_to_mac = {h.ip: h.mac for h in hosts if h.mac}
        self.installed: dict[int, dict[ForwardKey, int]] = {}
        self.changes: deque[FabricChange] = deque(maxlen=1000)

    # ---- switch life cycle ----------------------------------------------------------------

    def switch_connected(self, dpid: int) -> SwitchOps:
        """What a switch that (re)connected gets, and what the others get if it changes paths."""
        if self.unplaced and not self.fabric.graph:
            # a hosts file without switch ids describes a one-switch network: this one
            for host in self.unplaced:
                self.fabric.configured_hosts[host.mac] = Location(dpid, host.port)
            self.unplaced = []
        self.fabric.switch_up(dpid, now_s=self.clock())
        self.installed[dpid] = {}
        ops = self._sync(f"switch {dpid} connected")
        return _merge({dpid: [ResetSwitch(), TableMiss(), PortRequest()]}, ops)

    def ports_described(
        self, dpid: int, live: Sequence[int], down: Sequence[int] = ()
    ) -> SwitchOps:
        """A switch's port description arrived: probe every live port for links."""
        if dpid not in self.fabric.graph:
            return {}
        lost = self.fabric.set_ports(dpid, live, down, self.clock())
        ops = self._sync(f"switch {dpid} ports down") if lost else {}
        return _merge(ops, {dpid: [SendFrame(p, lldp_probe(dpid, p)) for p in sorted(live)]})

    def port_changed(self, dpid: int, port: int, up: bool) -> SwitchOps:
        """A port's link went down (reroute now) or came up (probe it)."""
        if dpid not in self.fabric.graph:
            return {}
        if up:
            self.fabric.port_up(dpid, port, self.clock())
            return {dpid: [SendFrame(port, lldp_probe(dpid, port))]}
        if self.fabric.port_down(dpid, port):
            return self._sync(f"port {dpid}/{port} down")
        return {}

    def switch_gone(self, dpid: int) -> SwitchOps:
        """A switch disconnected: forget it and reroute around it."""
        self.installed.pop(dpid, None)
        if self.fabric.switch_down(dpid):
            return self._sync(f"switch {dpid} gone")
        return {}

    def tick(self) -> SwitchOps:
        """Periodic discovery: a probe out of every live port; links not confirmed for
        :data:`controller.fabric.LINK_TIMEOUT_S` are dropped (and traffic rerouted)."""
        ops = self._sync("links timed out") if self.fabric.expire(self.clock()) else {}
        probes = {
            dpid: [SendFrame(p, lldp_probe(dpid, p)) for p in sorted(ports)]
            for dpid, ports in self.fabric.ports.items()
            if ports
        }
        return _merge(ops, probes)

    # ---- packets ----------------------------------------------------------------------------

    def packet_in(self, packet: PacketIn) -> SwitchOps:
        """Discovery probes, ARP for known hosts, learning, and delivery of the packet."""
        probe = parse_probe(packet.data)
        if probe is not None:
            link = Link(probe.dpid, probe.port, packet.dpid, packet.in_port)
            if self.fabric.link_seen(link, self.clock()):
                return self._sync(f"link {link.src}/{link.src_port} -> {link.dst}/{link.dst_port}")
            return {}
        if self.fabric.is_fabric_port(packet.dpid, packet.in_port):
            # from another switch: a frame no rule there knew, which its ingress switch has
            # already sent us; handling it again would deliver it twice
            return {}
        ops = {}
        if self.fabric.learn(packet.eth_src, Location(packet.dpid, packet.in_port)):
            ops = self._sync(f"host {packet.eth_src} at {packet.dpid}/{packet.in_port}")
        arp = parse_arp(packet.data)
        if arp is not None:
            self.ip_to_mac.setdefault(arp.sender_ip, arp.sender_mac)
            known = self.ip_to_mac.get(arp.target_ip)
            if arp.op == ARP_REQUEST and known and self.fabric.location(known):
                reply = SendFrame(packet.in_port, arp_reply(arp, known))
                return _merge(ops, {packet.dpid: [reply]})
        return _merge(ops, self._deliver(packet))

    def _deliver(self, packet: PacketIn) -> SwitchOps:
        dst = self.fabric.location(packet.eth_dst)
        if dst is not None and self.fabric.path(packet.eth_src, packet.eth_dst):
            if dst.dpid == packet.dpid:
                return {packet.dpid: [PacketOut(packet, dst.port)]}
            return {dst.dpid: [SendFrame(dst.port, packet.data)]}
        if len(self.fabric.graph) <= 1:
            return {packet.dpid: [PacketOut(packet, None)]}
        out: SwitchOps = {}
        for dpid, ports in self.fabric.edge_ports(self.clock()).items():
            sends = [
                SendFrame(p, packet.data)
                for p in ports
                if (dpid, p) != (packet.dpid, packet.in_port)
            ]
            if sends:
                out[dpid] = sends
        return out

    # ---- questions ----------------------------------------------------------------------------

    def switch_of_ip(self, ip: str) -> int | None:
        """The switch a host (by IPv4 address) is attached to, if known: its ingress edge."""
        location = self.fabric.location(self.ip_to_mac.get(ip, ""))
        return None if location is None else location.dpid

    def to_json(self) -> dict:
        """The fabric, its installed forwarding and its changes, for ``/api/fabric``."""
        return {
            **self.fabric.to_json(),
            "forwarding_rules": {str(d): len(t) for d, t in sorted(self.installed.items())},
            "link_timeout_s": LINK_TIMEOUT_S,
            "changes": [
                {"at_s": c.at_s, "what": c.what, "rules_changed": c.rules_changed}
                for c in list(self.changes)[-100:]
            ],
        }

    # ---- keeping the switches in line -----------------------------------------------------

    def _sync(self, why: str) -> SwitchOps:
        """The rule changes that bring every connected switch to the fabric's forwarding."""
        wanted = self.fabric.forwarding()
        out: SwitchOps = {}
        changed = 0
        for dpid, installed in self.installed.items():
            table = wanted.get(dpid, {})
            adds = [
                Forward(key.eth_dst, port, key.eth_src)
                for key, port in sorted(table.items(), key=_by_key)
                if installed.get(key) != port
            ]
            # new rules first: a pair's rule that goes gives way to a destination's rule
            deletes = [
                Unforward(key.eth_dst, key.eth_src)
                for key in sorted(installed, key=lambda k: (k.eth_dst, k.eth_src or ""))
                if key not in table
            ]
            if adds or deletes:
                out[dpid] = [*adds, *deletes]
                changed += len(adds) + len(deletes)
                self.installed[dpid] = dict(table)
        if changed:
            self.changes.append(FabricChange(self.clock(), why, changed))
        return out


def _by_key(item: tuple[ForwardKey, int]) -> tuple:
    return (item[0].eth_dst, item[0].eth_src or "")


def _merge(*parts: SwitchOps) -> SwitchOps:
    out: SwitchOps = {}
    for part in parts:
        for dpid, ops in part.items():
            out.setdefault(dpid, []).extend(ops)
    return out
