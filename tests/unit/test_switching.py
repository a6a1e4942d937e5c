"""Forwarding without Ryu on one switch: what a connecting switch gets and how hosts are learned
(the fabric's paths, discovery and reroutes: tests/unit/test_fabric.py)."""

from __future__ import annotations

from controller.model import HostPort
from controller.switching import (
    Forward,
    Forwarding,
    PacketIn,
    PacketOut,
    PortRequest,
    ResetSwitch,
    TableMiss,
)


def test_a_switch_is_reset_then_gets_table_miss_a_port_request_and_the_known_hosts():
    hosts = [HostPort("h1", "10.0.0.1", "aa:01", 1), HostPort("h2", "10.0.0.2", None, None)]
    ops = Forwarding(hosts).switch_connected(7)
    assert ops == {7: [ResetSwitch(), TableMiss(), PortRequest(), Forward("aa:01", 1)]}


def test_on_one_switch_unknown_destinations_flood_and_senders_are_learned():
    forwarding = Forwarding()
    forwarding.switch_connected(7)
    first = PacketIn(7, in_port=2, eth_src="aa:02", eth_dst="aa:03", buffer_id=None, data=b"x")
    assert forwarding.packet_in(first) == {7: [Forward("aa:02", 2), PacketOut(first, None)]}
    reply = PacketIn(7, in_port=3, eth_src="aa:03", eth_dst="aa:02", buffer_id=5, data=b"")
    assert forwarding.packet_in(reply) == {7: [Forward("aa:03", 3), PacketOut(reply, 2)]}
    # learned hosts are forgotten with their switch
    assert forwarding.switch_gone(7) == {}
    assert 7 not in forwarding.installed and forwarding.fabric.hosts == {}
