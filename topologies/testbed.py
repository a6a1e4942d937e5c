"""Mininet topologies: the 13-server, one-switch testbed (default) and a leaf-spine fabric.

A Topo is only a graph (Mininet's habit): no namespace is made until a ``Mininet`` object starts
it, so the graph, and the controller's host table derived from it, are testable without root.
From the command line (as root)::

    sudo mn --custom topologies/testbed.py --topo testbed,13 --switch user,protocols=OpenFlow13 \\
        --link tc --controller remote,ip=127.0.0.1,port=6653

Every host ``hI`` has IP ``10.0.0.I`` and MAC ``00:00:00:00:00:I`` (hex), so one description
gives both the Mininet topology and the controller's ``--hosts`` file
(:func:`host_table`). Links are shaped with a token bucket (``use_tbf``: Mininet's HTB
shaping warns at these rates); on switch ports :mod:`topologies.network` replaces it with the
priority classes. Link rates default to 20 Mbit/s, the rate this 2-core machine's userspace
datapath sustains for 12 simultaneous TCP senders (../shared/DESIGN.md section 3).
"""

from __future__ import annotations

from mininet.topo import Topo

DEFAULT_BW_MBPS = 20


def host_ip(index: int) -> str:
    """IP address of host ``h<index>`` (1-based)."""
    if not 1 <= index <= 65534:
        raise ValueError("host index must be in 1..65534")
    return f"10.0.{index // 256}.{index % 256}"


def host_mac(index: int) -> str:
    """MAC address of host ``h<index>``."""
    return ":".join(f"{(index >> (8 * k)) & 0xFF:02x}" for k in range(5, -1, -1))


class OneSwitchTopo(Topo):
    """``n`` hosts on one switch (the JPAS testbed: 13 servers, one switch).

    Args:
        n: number of hosts.
        bw: link rate in Mbit/s (TCLink ``bw``).
        switch: name of the switch (and of its OVS bridge); its datapath id is 1.
    """

    def build(self, n: int = 13, bw: float = DEFAULT_BW_MBPS, switch: str = "s1") -> None:
        """``n`` hosts on one switch, every link at ``bw`` Mbit/s."""
        if n < 2:
            raise ValueError("the testbed needs at least 2 hosts")
        s = self.addSwitch(switch, dpid="1", protocols="OpenFlow13")
        for i in range(1, n + 1):
            h = self.addHost(f"h{i}", ip=f"{host_ip(i)}/16", mac=host_mac(i))
            # the switch-side port number equals the host index
            self.addLink(h, s, port2=i, bw=bw, use_tbf=True)


class LeafSpineTopo(Topo):
    """A two-tier fabric: ``leaves`` leaf switches of ``hosts_per_leaf`` hosts, ``spines`` spines.

    Args:
        leaves: leaf switches.
        hosts_per_leaf: hosts under each leaf.
        spines: spine switches; every leaf links to every spine.
        bw: host link rate in Mbit/s.
        uplink_bw: leaf-spine link rate in Mbit/s (oversubscription =
            hosts_per_leaf * bw / (spines * uplink_bw)).
    """

    def build(
        self,
        leaves: int = 4,
        hosts_per_leaf: int = 4,
        spines: int = 2,
        bw: float = DEFAULT_BW_MBPS,
        uplink_bw: float = DEFAULT_BW_MBPS,
    ) -> None:
        """Leaves with their hosts, every leaf linked to every spine."""
        if leaves < 1 or hosts_per_leaf < 1 or spines < 1:
            raise ValueError("leaves, hosts_per_leaf and spines must be >= 1")
        spine_names = [
            self.addSwitch(f"s{100 + k}", protocols="OpenFlow13") for k in range(1, spines + 1)
        ]
        index = 0
        for leaf in range(1, leaves + 1):
            s = self.addSwitch(f"s{leaf}", protocols="OpenFlow13")
            for _ in range(hosts_per_leaf):
                index += 1
                h = self.addHost(f"h{index}", ip=f"{host_ip(index)}/16", mac=host_mac(index))
                self.addLink(h, s, bw=bw, use_tbf=True)
            for spine in spine_names:
                self.addLink(s, spine, bw=uplink_bw, use_tbf=True)


def host_table(topo: Topo, bw: float | None = None) -> list[dict]:
    """The controller's ``--hosts`` description of ``topo``: name, ip, mac, bps, and the switch
    port when there is a single switch (with several, the controller learns where hosts are)."""
    single = len(topo.switches()) == 1
    table = []
    for name in sorted(topo.hosts(), key=lambda h: int(h[1:])):
        info = topo.nodeInfo(name)
        (switch,) = topo.g[name]  # a host has one link, to its switch
        entry = {"name": name, "ip": info["ip"].split("/")[0], "mac": info["mac"]}
        if single:
            entry["port"] = topo.port(name, switch)[1]
        link_bw = topo.linkInfo(name, switch).get("bw", bw)
        if link_bw:
            entry["bps"] = float(link_bw) * 1e6
        table.append(entry)
    return table


topos = {"testbed": OneSwitchTopo, "leafspine": LeafSpineTopo}
