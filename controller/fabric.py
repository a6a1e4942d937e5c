"""The switch fabric as a graph, and the forwarding that follows its shortest paths.

Pure (networkx only): the Ryu glue reports switches, ports and discovered links; this module
answers where a host is, which port leads towards it, and which forwarding rules every switch
needs. Used by :class:`controller.switching.Forwarding`.

Forwarding is hop by hop, like ECMP in a router: at every switch the next hop towards a host is
one of the neighbours on a shortest path (fewest switch-to-switch hops); where there are several
(a leaf's uplinks to equal-cost spines), the choice is a hash of the (source, destination) MAC
pair and the switch, so every packet of a host pair takes one path (no reordering within a
transfer), the pairs spread over the spines, and the choice is the same in every run. A switch
with a single next hop towards a host gets one rule for that destination; a switch with a choice
gets one rule per source host whose traffic passes it. A "flow" of the ECMP hash is thus a host
pair, as a flow is in the simulator's model (:mod:`simulator.engine`).

Nothing here floods: a packet for an unknown destination is delivered to the edge ports (ports
with no switch behind them, :meth:`FabricGraph.edge_ports`) and never sent onto a fabric link,
so a fabric with loops (every leaf linked to every spine) cannot storm.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass

import networkx as nx

# A link not confirmed by discovery for this long is taken as gone (a switch whose data plane
# died while its ports stayed up); discovery probes every link once per tick (1 s by default).
LINK_TIMEOUT_S = 3.5
# A port without a known host counts as an edge port only this long after it was first seen:
# time for discovery (a probe round each tick) to find a switch behind it, so that a broadcast
# arriving while the fabric is being discovered is not sent to another switch.
EDGE_HOLD_S = 1.5


@dataclass(frozen=True, slots=True)
class Location:
    """Where a host is attached: switch (datapath id) and port."""

    dpid: int
    port: int


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of a switch-to-switch link: ``src`` port ``src_port`` reaches ``dst``."""

    src: int
    src_port: int
    dst: int
    dst_port: int


@dataclass(frozen=True, slots=True)
class ForwardKey:
    """What a forwarding rule matches: frames to ``eth_dst``, and from ``eth_src`` when the
    switch chooses among equal-cost next hops per host pair (``None``: any source)."""

    eth_dst: str
    eth_src: str | None = None


def ecmp_choice(eth_src: str, eth_dst: str, dpid: int, choices: int) -> int:
    """Index of the next hop a host pair takes at switch ``dpid`` among ``choices`` equal-cost
    ones: CRC-32 of the pair and the switch (the switch in the key keeps the choices of
    successive tiers independent), the same in every run and process."""
    if choices < 1:
        raise ValueError("choices must be >= 1")
    return zlib.crc32(f"{eth_src}>{eth_dst}@{dpid}".encode()) % choices


class FabricGraph:
    """Switches, their ports, the links between them and where hosts are.

    Args:
        hosts: known host locations by MAC (from the ``--hosts`` file); more are learned.
    """

    def __init__(self, hosts: dict[str, Location] | None = None) -> None:
        self.graph = nx.MultiDiGraph()
        self.ports: dict[int, set[int]] = {}
        self.port_since_s: dict[tuple[int, int], float] = {}
        self.down_ports: set[tuple[int, int]] = set()
        self.links: dict[tuple[int, int], Link] = {}  # by (src, src_port)
        self.link_seen_s: dict[tuple[int, int], float] = {}
        self.configured_hosts = dict(hosts or {})
        self.learned_hosts: dict[str, Location] = {}

    # ---- what the switches report ---------------------------------------------------------

    def switch_up(self, dpid: int, ports: Iterable[int] = (), now_s: float = 0.0) -> None:
        """A switch connected (with its port numbers, when known)."""
        self.graph.add_node(dpid)
        self.down_ports = {p for p in self.down_ports if p[0] != dpid}
        self.port_since_s = {p: t for p, t in self.port_since_s.items() if p[0] != dpid}
        self.ports[dpid] = set()
        for port in ports:
            self.port_up(dpid, port, now_s)

    def set_ports(
        self, dpid: int, live: Iterable[int], down: Iterable[int] = (), now_s: float = 0.0
    ) -> bool:
        """A switch's port description at ``now_s``: its live ports and those whose link is
        down. Returns whether a link was lost."""
        for port in live:
            if (dpid, port) not in self.port_since_s:
                self.port_up(dpid, port, now_s)
        self.ports[dpid] = set(live) | set(down)
        changed = False
        for port in down:
            changed |= self.port_down(dpid, port)
        return changed

    def switch_down(self, dpid: int) -> bool:
        """A switch disconnected: its links and the hosts learned on it go. Returns whether the
        graph changed."""
        if dpid not in self.graph:
            return False
        self.graph.remove_node(dpid)
        self.ports.pop(dpid, None)
        self.port_since_s = {p: t for p, t in self.port_since_s.items() if p[0] != dpid}
        for key in [k for k, link in self.links.items() if dpid in (link.src, link.dst)]:
            self._drop_link(key)
        for mac in [m for m, loc in self.learned_hosts.items() if loc.dpid == dpid]:
            del self.learned_hosts[mac]
        return True

    def port_down(self, dpid: int, port: int) -> bool:
        """A port lost its link: the links through it go. Returns whether a link was lost."""
        self.down_ports.add((dpid, port))
        lost = [
            key
            for key, link in self.links.items()
            if (link.src, link.src_port) == (dpid, port)
            or (link.dst, link.dst_port) == (dpid, port)
        ]
        for key in lost:
            self._drop_link(key)
        return bool(lost)

    def port_up(self, dpid: int, port: int, now_s: float = 0.0) -> None:
        """A port's link came up at ``now_s`` (discovery will find what is behind it)."""
        self.down_ports.discard((dpid, port))
        self.ports.setdefault(dpid, set()).add(port)
        self.port_since_s[(dpid, port)] = now_s

    def link_seen(self, link: Link, now_s: float) -> bool:
        """Discovery saw ``link`` (a probe sent out of ``src_port`` arrived at ``dst_port``).
        Returns whether it is new."""
        if link.src not in self.graph or link.dst not in self.graph:
            return False
        if (link.src, link.src_port) in self.down_ports or (
            link.dst,
            link.dst_port,
        ) in self.down_ports:
            return False
        key = (link.src, link.src_port)
        self.link_seen_s[key] = now_s
        if self.links.get(key) == link:
            return False
        if key in self.links:
            self._drop_link(key)
        self.links[key] = link
        self.graph.add_edge(link.src, link.dst, key=link.src_port, port=link.src_port)
        # a port with a switch behind it has no host behind it
        for mac in [m for m, loc in self.learned_hosts.items() if loc == Location(*key)]:
            del self.learned_hosts[mac]
        return True

    def expire(self, now_s: float) -> bool:
        """Drop links discovery has not confirmed for :data:`LINK_TIMEOUT_S`; returns whether
        any went."""
        old = [k for k, seen in self.link_seen_s.items() if now_s - seen > LINK_TIMEOUT_S]
        for key in old:
            self._drop_link(key)
        return bool(old)

    def _drop_link(self, key: tuple[int, int]) -> None:
        link = self.links.pop(key, None)
        self.link_seen_s.pop(key, None)
        if link is not None and self.graph.has_edge(link.src, link.dst, key=link.src_port):
            self.graph.remove_edge(link.src, link.dst, key=link.src_port)

    def learn(self, mac: str, at: Location) -> bool:
        """A frame from ``mac`` entered the fabric at ``at``: learn the host there unless the
        port is a fabric link's or the host's location is configured. Returns whether anything
        changed."""
        if mac in self.configured_hosts or self.is_fabric_port(at.dpid, at.port):
            return False
        if self.learned_hosts.get(mac) == at:
            return False
        self.learned_hosts[mac] = at
        return True

    # ---- questions -------------------------------------------------------------------------

    @property
    def hosts(self) -> dict[str, Location]:
        """Every host location, configured ones winning over learned ones."""
        return {**self.learned_hosts, **self.configured_hosts}

    def location(self, mac: str) -> Location | None:
        """Where host ``mac`` is (configured before learned), without building :attr:`hosts`:
        the controller asks this for every marking rule at every reorder."""
        found = self.configured_hosts.get(mac)
        return found if found is not None else self.learned_hosts.get(mac)

    def is_fabric_port(self, dpid: int, port: int) -> bool:
        """Whether a discovered link leaves from (or arrives at) this port."""
        return (dpid, port) in self.links or any(
            (link.dst, link.dst_port) == (dpid, port) for link in self.links.values()
        )

    def edge_ports(self, now_s: float | None = None) -> dict[int, list[int]]:
        """Per connected switch, its live ports with no switch behind them (hosts' ports). At
        ``now_s``, a port where no host is known counts only :data:`EDGE_HOLD_S` after it came
        up (``None``: every such port counts)."""
        fabric = set(self.links) | {(ln.dst, ln.dst_port) for ln in self.links.values()}
        host_ports = {(loc.dpid, loc.port) for loc in self.hosts.values()}
        edge: dict[int, list[int]] = {}
        for dpid in sorted(self.graph.nodes):
            edge[dpid] = sorted(
                port
                for port in self.ports.get(dpid, set())
                if (dpid, port) not in fabric
                and (dpid, port) not in self.down_ports
                and (
                    now_s is None
                    or (dpid, port) in host_ports
                    or now_s - self.port_since_s.get((dpid, port), now_s) >= EDGE_HOLD_S
                )
            )
        return edge

    def path(self, eth_src: str, eth_dst: str) -> list[Location]:
        """The hops (switch, output port) a frame from host ``eth_src`` to host ``eth_dst``
        takes, hop-by-hop ECMP; empty if either host is unknown or unreachable."""
        src, dst = self.location(eth_src), self.location(eth_dst)
        if src is None or dst is None or {src.dpid, dst.dpid} - set(self.graph):
            return []
        return self._walk(eth_src, eth_dst, src, dst, self._distances_to(dst.dpid))

    def _walk(
        self, eth_src: str, eth_dst: str, src: Location, dst: Location, towards: dict[int, int]
    ) -> list[Location]:
        hops, here = [], src.dpid
        while here != dst.dpid:
            ports = self._ports_closer(here, towards) if here in towards else []
            if not ports:
                return []
            port = ports[ecmp_choice(eth_src, eth_dst, here, len(ports))]
            hops.append(Location(here, port))
            here = self.links[(here, port)].dst
        return [*hops, Location(dst.dpid, dst.port)]

    def forwarding(self) -> dict[int, dict[ForwardKey, int]]:
        """The forwarding rules of every connected switch: ``{dpid: {match: output port}}``.

        A switch with one next hop towards a host's switch gets a rule for the destination; one
        with several gets a rule per (source, destination) pair whose path passes it.
        """
        tables: dict[int, dict[ForwardKey, int]] = {dpid: {} for dpid in self.graph.nodes}
        hosts = sorted(self.hosts.items())
        distances: dict[int, dict[int, int]] = {}
        for dst_mac, dst in hosts:
            if dst.dpid not in self.graph:
                continue
            if dst.dpid not in distances:
                distances[dst.dpid] = self._distances_to(dst.dpid)
            towards = distances[dst.dpid]
            tables[dst.dpid][ForwardKey(dst_mac)] = dst.port
            choosing = set()
            for dpid in tables:
                if dpid == dst.dpid or dpid not in towards:
                    continue
                ports = self._ports_closer(dpid, towards)
                if len(ports) == 1:
                    tables[dpid][ForwardKey(dst_mac)] = ports[0]
                else:
                    choosing.add(dpid)
            if not choosing:
                continue
            for src_mac, src in hosts:
                if src_mac == dst_mac or src.dpid not in self.graph:
                    continue
                for hop in self._walk(src_mac, dst_mac, src, dst, towards)[:-1]:
                    if hop.dpid in choosing:
                        tables[hop.dpid][ForwardKey(dst_mac, src_mac)] = hop.port
        return tables

    def _distances_to(self, dpid: int) -> dict[int, int]:
        return nx.shortest_path_length(self.graph, target=dpid)

    def _ports_closer(self, dpid: int, distance: dict[int, int]) -> list[int]:
        return sorted(
            data["port"]
            for _, neighbour, data in self.graph.out_edges(dpid, data=True)
            if distance.get(neighbour) == distance[dpid] - 1
        )

    def to_json(self) -> dict:
        """The fabric as ``/api/fabric`` shows it."""
        return {
            "switches": sorted(self.graph.nodes),
            "links": [
                {"src": ln.src, "src_port": ln.src_port, "dst": ln.dst, "dst_port": ln.dst_port}
                for ln in sorted(self.links.values(), key=lambda ln: (ln.src, ln.src_port))
            ],
            "hosts": {
                mac: {"dpid": loc.dpid, "port": loc.port} for mac, loc in sorted(self.hosts.items())
            },
            "edge_ports": {str(d): ports for d, ports in self.edge_ports().items()},
        }
