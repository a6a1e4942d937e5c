"""Forwarding on the switches, without Ryu: what a switch gets when it connects and what the
controller does with a packet that reaches it (Faucet's valve, in small).

The Ryu glue turns the values returned here into OpenFlow messages
(:func:`controller.ryu_app.build_message`), as it does with the marking
:class:`controller.rules.Op` values; its handlers only parse the event and send.

On connect a switch loses every rule and meter an earlier run of this controller left (the
cookies say which are ours), gets the table-miss rules (table 0 continues to table 1, table 1
sends to the controller) and, when the topology is known (``--hosts``), a forwarding rule per
host. Without a topology the controller learns MAC addresses from the packets it is sent and
floods until it knows the destination.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.model import HostPort


@dataclass(frozen=True, slots=True)
class ResetSwitch:
    """Delete every rule with our cookie tag and every meter, then a barrier."""


@dataclass(frozen=True, slots=True)
class TableMiss:
    """Table 0 continues to table 1 unmarked; table 1 sends the packet to the controller."""


@dataclass(frozen=True, slots=True)
class Forward:
    """Frames to ``mac`` leave on ``port`` (table 1)."""

    mac: str
    port: int


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


SwitchOp = ResetSwitch | TableMiss | Forward | PacketOut


class Forwarding:
    """Static forwarding from the topology, and MAC learning per switch for the rest.

    Args:
        hosts: the hosts whose MAC and switch port are known (may be empty).
    """

    def __init__(self, hosts: Sequence[HostPort] = ()) -> None:
        self.hosts = list(hosts)
        self.mac_to_port: dict[int, dict[str, int]] = {}

    def switch_connected(self, dpid: int) -> list[SwitchOp]:
        """What a switch that (re)connected gets before any marking rule."""
        self.mac_to_port[dpid] = {}
        static = [Forward(h.mac, h.port) for h in self.hosts if h.mac and h.port]
        return [ResetSwitch(), TableMiss(), *static]

    def switch_gone(self, dpid: int) -> None:
        """Forget what was learned on a switch that disconnected."""
        self.mac_to_port.pop(dpid, None)

    def packet_in(self, packet: PacketIn) -> list[SwitchOp]:
        """Learn the source's port; forward to the destination's if known (and install a rule
        for it), else flood."""
        table = self.mac_to_port.setdefault(packet.dpid, {})
        table[packet.eth_src] = packet.in_port
        out_port = table.get(packet.eth_dst)
        rule = [Forward(packet.eth_dst, out_port)] if out_port is not None else []
        return [*rule, PacketOut(packet, out_port)]
