"""Forwarding without Ryu: what a connecting switch gets and how packets are learned."""

from __future__ import annotations

from controller.model import HostPort
from controller.switching import Forward, Forwarding, PacketIn, PacketOut, ResetSwitch, TableMiss


def test_a_switch_is_reset_then_gets_table_miss_and_the_known_hosts():
    hosts = [HostPort("h1", "10.0.0.1", "aa:01", 1), HostPort("h2", "10.0.0.2", None, None)]
    ops = Forwarding(hosts).switch_connected(7)
    assert ops == [ResetSwitch(), TableMiss(), Forward("aa:01", 1)]


def test_unknown_destinations_flood_and_known_ones_get_a_rule():
    forwarding = Forwarding()
    forwarding.switch_connected(7)
    first = PacketIn(7, in_port=2, eth_src="aa:02", eth_dst="aa:03", buffer_id=None, data=b"x")
    assert forwarding.packet_in(first) == [PacketOut(first, None)]
    reply = PacketIn(7, in_port=3, eth_src="aa:03", eth_dst="aa:02", buffer_id=5, data=b"")
    assert forwarding.packet_in(reply) == [Forward("aa:02", 2), PacketOut(reply, 2)]
    # learned per switch, forgotten when it goes
    other = PacketIn(8, in_port=1, eth_src="aa:09", eth_dst="aa:02", buffer_id=None, data=b"")
    assert forwarding.packet_in(other) == [PacketOut(other, None)]
    forwarding.switch_gone(7)
    assert 7 not in forwarding.mac_to_port
