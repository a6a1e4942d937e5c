"""The fabric without Ryu: discovery, hop-by-hop ECMP paths, no flooding, proxy ARP, reroutes,
and marking at the ingress edge only.

A small model of a leaf-spine data plane stands in for the switches: it wires ports together,
delivers the controller's probes and frames, keeps the forwarding rules it is sent and walks a
frame through them, so the tests check what the rules do, not only what the controller meant.
"""

from __future__ import annotations

import pytest

from controller.engine import Engine
from controller.fabric import FabricGraph, ForwardKey, Link, Location, ecmp_choice
from controller.frames import (
    ARP_REPLY,
    ARP_REQUEST,
    Arp,
    arp_frame,
    lldp_probe,
    mac_bytes,
    parse_arp,
    parse_probe,
)
from controller.model import HostPort
from controller.registry import Registry
from controller.switching import Forward, Forwarding, PacketIn, PacketOut, SendFrame, Unforward

BROADCAST = "ff:ff:ff:ff:ff:ff"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def leaf_spine(leaves: int, spines: int, hosts_per_leaf: int):
    """Hosts, wiring and host table of a leaf-spine: leaf L is dpid L, spine S is 100 + S;
    a leaf's ports 1..hosts_per_leaf go to its hosts, the next ones to the spines in order."""
    hosts, wires = [], {}
    index = 0
    for leaf in range(1, leaves + 1):
        for port in range(1, hosts_per_leaf + 1):
            index += 1
            hosts.append(HostPort(f"h{index}", f"10.0.0.{index}", f"00:00:00:00:00:{index:02x}",
                                  port, 20e6, leaf))  # fmt: skip
        for s in range(1, spines + 1):
            a, b = (leaf, hosts_per_leaf + s), (100 + s, leaf)
            wires[a], wires[b] = b, a
    return hosts, wires


class Plane:
    """The switches' data plane: wiring, the forwarding rules sent, frames delivered."""

    def __init__(self, forwarding: Forwarding, wires: dict, hosts: list[HostPort]) -> None:
        self.forwarding, self.wires = forwarding, wires
        self.up = set()
        self.rules: dict[int, dict[ForwardKey, int]] = {}
        self.host_at = {Location(h.switch, h.port): h for h in hosts}
        self.delivered: list[tuple[str, bytes]] = []  # (host, frame)
        self.on_fabric: list[tuple[int, int]] = []  # frames the controller sent onto links

    def connect(self, dpid: int) -> None:
        self.up.add(dpid)
        self.rules[dpid] = {}
        self.apply(self.forwarding.switch_connected(dpid))
        ports = sorted({p for (d, p) in self.wires if d == dpid} | {
            loc.port for loc in self.host_at if loc.dpid == dpid})  # fmt: skip
        self.apply(self.forwarding.ports_described(dpid, ports))

    def apply(self, ops: dict) -> None:
        for dpid, switch_ops in ops.items():
            assert dpid in self.up, f"ops for a switch that is not connected: {dpid}"
            for op in switch_ops:
                match op:
                    case Forward(mac=mac, port=port, eth_src=src):
                        self.rules[dpid][ForwardKey(mac, src)] = port
                    case Unforward(mac=mac, eth_src=src):
                        del self.rules[dpid][ForwardKey(mac, src)]
                    case SendFrame(port=port, data=data):
                        self.emit(dpid, port, data)
                    case PacketOut(packet=packet, port=port):
                        assert port is not None, "flooded on a fabric"
                        self.emit(dpid, port, packet.data)

    def emit(self, dpid: int, port: int, data: bytes) -> None:
        if (dpid, port) in self.wires:
            peer, peer_port = self.wires[(dpid, port)]
            if parse_probe(data) is None:
                self.on_fabric.append((dpid, port))
            if peer in self.up:
                self.packet_in(peer, peer_port, data)
        elif (host := self.host_at.get(Location(dpid, port))) is not None:
            if parse_probe(data) is None:  # hosts ignore LLDP
                self.delivered.append((host.name, data))

    def packet_in(self, dpid: int, port: int, data: bytes) -> None:
        dst, src = (":".join(f"{b:02x}" for b in data[k : k + 6]) for k in (0, 6))
        self.apply(self.forwarding.packet_in(PacketIn(dpid, port, src, dst, None, data)))

    def walk(self, src: HostPort, dst: HostPort) -> list[Location]:
        """The hops a frame from ``src`` to ``dst`` takes through the installed rules."""
        hops, here = [], src.switch
        for _ in range(10):
            table = self.rules[here]
            port = table.get(ForwardKey(dst.mac, src.mac), table.get(ForwardKey(dst.mac)))
            if port is None:
                return [*hops, Location(here, -1)]  # a table miss
            hops.append(Location(here, port))
            if (here, port) not in self.wires:
                return hops
            here = self.wires[(here, port)][0]
        raise AssertionError("forwarding loop")


def fabric(leaves=2, spines=2, hosts_per_leaf=3):
    hosts, wires = leaf_spine(leaves, spines, hosts_per_leaf)
    clock = Clock()
    forwarding = Forwarding(hosts, clock)
    plane = Plane(forwarding, wires, hosts)
    for dpid in [*range(1, leaves + 1), *(100 + s for s in range(1, spines + 1))]:
        plane.connect(dpid)
    plane.apply(forwarding.tick())  # the leaves' first probes found no spine connected yet
    return hosts, plane, clock


def test_discovery_finds_every_link_in_both_directions():
    hosts, plane, _ = fabric(leaves=3, spines=2)
    links = plane.forwarding.fabric.links
    assert len(links) == 2 * 3 * 2
    assert Link(1, 4, 101, 1) in links.values() and Link(101, 1, 1, 4) in links.values()
    assert plane.forwarding.fabric.edge_ports() == {
        1: [1, 2, 3], 2: [1, 2, 3], 3: [1, 2, 3], 101: [], 102: []}  # fmt: skip


def test_installed_rules_take_every_pair_along_its_computed_shortest_path():
    hosts, plane, _ = fabric(leaves=3, spines=2)
    graph = plane.forwarding.fabric
    spines_used = set()
    for src in hosts:
        for dst in hosts:
            if src is dst:
                continue
            computed = graph.path(src.mac, dst.mac)
            assert plane.walk(src, dst) == computed
            assert computed[-1] == Location(dst.switch, dst.port)
            if src.switch == dst.switch:
                assert len(computed) == 1
            else:  # leaf, spine, leaf: and the uplink the pair's hash chose at the leaf
                assert len(computed) == 3
                uplinks = [4, 5]
                assert computed[0].port == uplinks[ecmp_choice(src.mac, dst.mac, src.switch, 2)]
                spines_used.add(computed[1].dpid)
    assert spines_used == {101, 102}  # ECMP spreads the pairs over both spines


def test_paths_are_the_same_in_every_run():
    first = fabric()[1].forwarding.fabric.forwarding()
    assert fabric()[1].forwarding.fabric.forwarding() == first


def test_a_choice_is_a_pair_rule_and_no_choice_a_destination_rule():
    hosts, plane, _ = fabric()
    leaf = plane.rules[1]
    # towards its own hosts a leaf has one port; towards the other leaf's, two uplinks
    assert ForwardKey(hosts[0].mac) in leaf and ForwardKey(hosts[3].mac) not in leaf
    assert ForwardKey(hosts[3].mac, hosts[0].mac) in leaf
    # a spine has one port towards each leaf: destination rules only
    assert all(key.eth_src is None for key in plane.rules[101])


def test_broadcasts_never_go_onto_a_link_between_switches():
    hosts, plane, _ = fabric()
    frame = mac_bytes(BROADCAST) + mac_bytes(hosts[0].mac) + b"\x88\xb5payload"
    plane.packet_in(1, 1, frame)
    assert plane.on_fabric == []
    assert sorted(h for h, _ in plane.delivered) == sorted(h.name for h in hosts[1:])


def test_a_port_without_a_known_host_gets_broadcasts_once_discovery_had_its_time():
    hosts, plane, clock = fabric()
    plane.apply(plane.forwarding.port_changed(1, 9, up=True))  # a new port, nothing known
    frame = mac_bytes(BROADCAST) + mac_bytes(hosts[0].mac) + b"\x88\xb5payload"
    assert [op.port for op in _sends(plane, frame)] == [2, 3]  # h2 and h3 only
    clock.now += 2.0
    assert [op.port for op in _sends(plane, frame)] == [2, 3, 9]


def _sends(plane, frame):
    ops = plane.forwarding.packet_in(PacketIn(1, 1, "00:00:00:00:00:01", BROADCAST, None, frame))
    return [op for op in ops.get(1, []) if isinstance(op, SendFrame)]


def test_arp_for_a_known_host_is_answered_by_the_controller():
    hosts, plane, _ = fabric()
    asker, target = hosts[0], hosts[4]
    request = Arp(ARP_REQUEST, asker.mac, asker.ip, "00:00:00:00:00:00", target.ip)
    assert parse_arp(arp_frame(request, BROADCAST)) == request
    plane.packet_in(asker.switch, asker.port, arp_frame(request, BROADCAST))
    ((to, reply),) = plane.delivered
    answer = parse_arp(reply)
    assert to == asker.name and plane.on_fabric == []
    assert answer == Arp(ARP_REPLY, target.mac, target.ip, asker.mac, asker.ip)


def test_a_spine_port_going_down_reroutes_every_pair_within_one_event():
    hosts, plane, _ = fabric()
    graph = plane.forwarding.fabric
    plane.apply(plane.forwarding.port_changed(101, 1, up=False))  # spine 101 loses leaf 1
    for src in hosts:
        for dst in hosts:
            if src is not dst:
                hops = plane.walk(src, dst)
                assert hops == graph.path(src.mac, dst.mac) and hops[-1].port == dst.port
                assert 101 not in {h.dpid for h in hops}
    # leaf 1 now has a single uplink: its pair rules gave way to destination rules
    assert all(key.eth_src is None for key in plane.rules[1])
    assert plane.forwarding.changes[-1].what == "port 101/1 down"


def test_a_spine_that_disconnects_is_routed_around_and_used_again_when_it_returns():
    hosts, plane, clock = fabric()
    plane.up.discard(102)
    plane.apply(plane.forwarding.switch_gone(102))
    for src, dst in [(hosts[0], hosts[3]), (hosts[5], hosts[1])]:
        assert [h.dpid for h in plane.walk(src, dst)] == [src.switch, 101, dst.switch]
    plane.connect(102)
    clock.now += 1
    plane.apply(plane.forwarding.tick())
    used = {plane.walk(s, d)[1].dpid for s in hosts for d in hosts if s.switch != d.switch}
    assert used == {101, 102}


def test_a_link_discovery_stops_confirming_times_out():
    hosts, plane, clock = fabric()
    del plane.wires[(1, 4)], plane.wires[(101, 1)]  # the cable is cut; ports stay up
    clock.now += 2
    plane.apply(plane.forwarding.tick())
    assert len(plane.forwarding.fabric.links) == 8
    clock.now += 2
    plane.apply(plane.forwarding.tick())
    assert len(plane.forwarding.fabric.links) == 6
    assert all(101 not in {h.dpid for h in plane.walk(hosts[0], d)} for d in hosts[3:])


def test_hosts_are_learned_on_edge_ports_only():
    graph = FabricGraph()
    graph.switch_up(1, [1, 2])
    graph.switch_up(2, [1, 2])
    graph.link_seen(Link(1, 2, 2, 2), 0.0)
    assert not graph.learn("aa:01", Location(2, 2))  # a fabric port
    assert graph.learn("aa:01", Location(1, 1)) and graph.hosts == {"aa:01": Location(1, 1)}


def test_lldp_probes_name_their_port_and_other_frames_are_not_probes():
    probe = parse_probe(lldp_probe(0x65, 7))
    assert (probe.dpid, probe.port) == (0x65, 7)
    assert parse_probe(mac_bytes(BROADCAST) * 2 + b"\x88\xcc\x02\x07\x04abcdefg\x00\x00") is None
    assert parse_probe(b"\x00" * 60) is None


def test_marks_and_meters_go_to_the_source_s_edge_switch_only():
    hosts, plane, _ = fabric()
    registry = Registry(":memory:", hosts={h.name: h.ip for h in hosts})
    engine = Engine(registry, "varys", edge_switch=plane.forwarding.switch_of_ip)
    flows = [{"src": "h1", "dst": "h4", "bytes": 1e6}, {"src": "h5", "dst": "h2", "bytes": 2e6}]
    registry.put("coflows", 1, {"flows": flows})
    for dpid in (1, 2, 101, 102):
        engine.switch_connected(dpid)
    engine.reorder()
    assert engine.plan.table.meters, "varys rates every flow: there are meters to place"
    by_switch = {dpid: engine.table_for(dpid) for dpid in (1, 2, 101, 102)}
    assert not by_switch[101].rules and not by_switch[102].rules and not by_switch[101].meters
    for dpid, table in by_switch.items():
        for rule in table.rules.values():
            assert plane.forwarding.switch_of_ip(dict(rule.match)["ipv4_src"]) == dpid
    metered = {(dpid, dict(r.match)["ipv4_src"]) for dpid, t in by_switch.items()
               for r in t.rules.values() if r.meter_id is not None}  # fmt: skip
    assert metered == {(1, "10.0.0.1"), (2, "10.0.0.5")}
    placed = sum(len(t.rules) for t in by_switch.values())
    assert placed == len(engine.plan.table.rules)  # each rule on exactly one switch


@pytest.mark.parametrize("choices", [1, 2, 3, 8])
def test_ecmp_choice_is_in_range_and_deterministic(choices):
    picks = [ecmp_choice(f"aa:{i:02x}", "bb:01", 1, choices) for i in range(50)]
    assert all(0 <= p < choices for p in picks)
    assert picks == [ecmp_choice(f"aa:{i:02x}", "bb:01", 1, choices) for i in range(50)]
    if choices > 1:
        assert len(set(picks)) == choices
