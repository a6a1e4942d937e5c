"""One description of a cluster's network: its shape, its hosts and its link rate.

The testbed's Mininet topology (:class:`topologies.testbed.ClusterTopo`), the controller's
``--hosts`` file (:meth:`Cluster.host_table`), the simulator's model of the network
(:meth:`simulator.engine.Fabric.of`) and the switch ports a run reads its counters from
(:attr:`Cluster.host_ports`, :attr:`Cluster.fabric_ports`) all derive from one
:class:`Cluster`, so they cannot disagree.

Two shapes: ``one-switch`` (every host on one switch, the JPAS testbed's 13 servers) and
``leaf-spine`` (leaves of hosts, every leaf linked to every spine). The one switch is a leaf
without spines. Names follow Mininet's habits:

- host ``hI`` (numbered from 1, leaf by leaf, as :class:`simulator.engine.Fabric` groups
  them) has IP ``10.0.0.I`` and MAC ``00:00:00:00:00:I`` (hex);
- leaf ``L`` (the one switch: 1) is switch ``s<L>`` with datapath id L, spine ``S`` is
  ``s<100+S>`` with datapath id 100 + S (``s`` is :attr:`Cluster.switch_prefix`);
- on a leaf, ports 1..hosts_per_leaf go to its hosts in order and the next ones to the spines
  in order; on a spine, port L goes to leaf L; a switch's port P is interface
  ``<switch>-eth<P>``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ONE_SWITCH = "one-switch"
LEAF_SPINE = "leaf-spine"
TOPOLOGIES = (ONE_SWITCH, LEAF_SPINE)
SPINE_BASE = 100  # spine S is switch s<100+S>, datapath id 100 + S
# the rate this 2-core machine's userspace datapath sustains for 12 simultaneous TCP senders
# (docs/testbed.md): the testbed's links and the controller's default
TESTBED_LINK_BPS = 20e6


def host_ip(index: int) -> str:
    """IP address of host ``h<index>`` (1-based)."""
    if not 1 <= index <= 65534:
        raise ValueError("host index must be in 1..65534")
    return f"10.0.{index // 256}.{index % 256}"


def host_mac(index: int) -> str:
    """MAC address of host ``h<index>``."""
    return ":".join(f"{(index >> (8 * k)) & 0xFF:02x}" for k in range(5, -1, -1))


@dataclass(frozen=True)
class Switch:
    """A switch: its name (also its OVS bridge's) and its OpenFlow datapath id."""

    name: str
    dpid: int

    def port(self, number: int) -> str:
        """The interface name of the switch's port ``number``."""
        return f"{self.name}-eth{number}"


@dataclass(frozen=True)
class HostLink:
    """A host, its addresses and the switch port its one link ends at."""

    name: str
    ip: str
    mac: str
    switch: Switch
    port: int


@dataclass(frozen=True)
class FabricLink:
    """A link between a leaf and a spine, with the port it ends at on each."""

    leaf: Switch
    leaf_port: int
    spine: Switch
    spine_port: int


@dataclass(frozen=True)
class Cluster:
    """A cluster's network; build one with :meth:`one_switch` or :meth:`leaf_spine`.

    Args:
        topology: :data:`ONE_SWITCH` or :data:`LEAF_SPINE`.
        leaves: leaf switches (1 for the one switch).
        hosts_per_leaf: hosts under each leaf (the one switch: every host).
        link_bps: every host link's rate in bit/s.
        spines: spine switches (0 for the one switch); every leaf links to every spine.
        oversubscription: a leaf's hosts' rate over its uplinks' (each uplink runs at
            :attr:`uplink_bps`).
        switch_prefix: the switches' names before their number (a test's own keeps clear of a
            live run's ``s1``).
    """

    topology: str
    leaves: int
    hosts_per_leaf: int
    link_bps: float
    spines: int = 0
    oversubscription: float = 1.0
    switch_prefix: str = "s"

    @classmethod
    def one_switch(cls, hosts: int, link_bps: float, switch_prefix: str = "s") -> Cluster:
        """``hosts`` hosts on one switch, every link at ``link_bps``."""
        return cls(ONE_SWITCH, 1, hosts, link_bps, switch_prefix=switch_prefix)

    @classmethod
    def leaf_spine(
        cls,
        leaves: int,
        hosts_per_leaf: int,
        spines: int,
        link_bps: float,
        oversubscription: float = 1.0,
        switch_prefix: str = "s",
    ) -> Cluster:
        """``leaves`` leaves of ``hosts_per_leaf`` hosts, each linked to every one of
        ``spines`` spines; host links at ``link_bps``."""
        return cls(LEAF_SPINE, leaves, hosts_per_leaf, link_bps, spines, oversubscription,
                   switch_prefix)  # fmt: skip

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"topology must be one of {', '.join(TOPOLOGIES)}")
        if self.topology == ONE_SWITCH:
            if (self.leaves, self.spines) != (1, 0):
                raise ValueError("one switch is one leaf without spines")
            if self.hosts_per_leaf < 2:
                raise ValueError("the testbed needs at least 2 hosts")
        elif self.leaves < 1 or self.hosts_per_leaf < 1 or self.spines < 1:
            raise ValueError("leaves, hosts_per_leaf and spines must be >= 1")
        if not 0 < self.oversubscription < math.inf:  # (NaN fails too)
            raise ValueError("oversubscription must be finite and > 0")
        if not 0 < self.link_bps < math.inf:
            raise ValueError("link_bps must be finite and > 0")

    @property
    def hosts(self) -> int:
        """Number of hosts."""
        return self.leaves * self.hosts_per_leaf

    @property
    def host_names(self) -> list[str]:
        """Every host's name, in host order."""
        return [f"h{index}" for index in range(1, self.hosts + 1)]

    @property
    def leaf_switches(self) -> list[Switch]:
        """The leaves in order (the one switch)."""
        return [Switch(f"{self.switch_prefix}{n}", n) for n in range(1, self.leaves + 1)]

    @property
    def spine_switches(self) -> list[Switch]:
        """The spines in order (none for the one switch)."""
        numbers = range(SPINE_BASE + 1, SPINE_BASE + self.spines + 1)
        return [Switch(f"{self.switch_prefix}{n}", n) for n in numbers]

    @property
    def switches(self) -> list[Switch]:
        """Every switch: the leaves, then the spines."""
        return self.leaf_switches + self.spine_switches

    @property
    def host_links(self) -> list[HostLink]:
        """Every host with its addresses and its switch port, in host order."""
        links = []
        for leaf in self.leaf_switches:
            for port in range(1, self.hosts_per_leaf + 1):
                index = (leaf.dpid - 1) * self.hosts_per_leaf + port
                links.append(HostLink(f"h{index}", host_ip(index), host_mac(index), leaf, port))
        return links

    @property
    def fabric_links(self) -> list[FabricLink]:
        """Every leaf-spine link, leaf by leaf."""
        return [
            FabricLink(leaf, self.hosts_per_leaf + k, spine, leaf.dpid)
            for leaf in self.leaf_switches
            for k, spine in enumerate(self.spine_switches, start=1)
        ]

    @property
    def uplink_bps(self) -> float:
        """Each leaf-spine link's rate: a leaf's hosts' rate spread over its uplinks, divided
        by the oversubscription."""
        return self.hosts_per_leaf * self.link_bps / (self.spines * self.oversubscription)

    @property
    def host_ports(self) -> list[str]:
        """The switch port of every host, in host order (it receives what the host sends)."""
        return [link.switch.port(link.port) for link in self.host_links]

    @property
    def fabric_ports(self) -> list[str]:
        """Both ends of every leaf-spine link: every leaf's uplinks, then every spine's
        downlinks (each is one direction of a link, as topology discovery counts them)."""
        links = self.fabric_links
        up = [link.leaf.port(link.leaf_port) for link in links]
        down = sorted(links, key=lambda link: (link.spine.dpid, link.spine_port))
        return up + [link.spine.port(link.spine_port) for link in down]

    def host_table(self) -> list[dict]:
        """The controller's ``--hosts`` description: every host's name, ip, mac, the port on
        its switch, its link's rate (``bps``) and, when there are several switches, that
        switch's datapath id."""
        table = []
        for link in self.host_links:
            entry = {"name": link.name, "ip": link.ip, "mac": link.mac}
            if self.topology != ONE_SWITCH:
                entry["switch"] = link.switch.dpid
            entry["port"] = link.port
            entry["bps"] = float(self.link_bps)
            table.append(entry)
        return table

    def to_json(self) -> dict:
        """The network as results state it (``topology`` of result.json and summary.json)."""
        if self.topology == ONE_SWITCH:
            return {"kind": ONE_SWITCH, "hosts": self.hosts}
        return {
            "kind": LEAF_SPINE,
            "leaves": self.leaves,
            "spines": self.spines,
            "hosts_per_leaf": self.hosts_per_leaf,
            "oversubscription": self.oversubscription,
        }
