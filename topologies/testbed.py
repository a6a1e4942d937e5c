"""Mininet topologies: the 13-server, one-switch testbed (default) and a leaf-spine fabric.

A Topo is only a graph (Mininet's habit): no namespace is made until a ``Mininet`` object starts
it, so the graph, and the controller's host table derived from it, are testable without root.
From the command line (as root, from the repository's root)::

    sudo mn --custom topologies/testbed.py --topo testbed,13 --switch hpo --host hpo \\
        --link tc --controller remote,ip=127.0.0.1,port=6653

The leaf-spine fabric the same way: ``--topo leafspine,3,4,2`` (3 leaves of 4 hosts, 2 spines);
the controller then discovers the links and routes over them (:mod:`controller.fabric`).
``--switch hpo`` (:class:`HpoSwitch`) is userspace OVS speaking OpenFlow 1.3 with the 8 HTB
priority classes on every port, and ``--host hpo`` (:class:`HpoHost`) turns TCP checksum
offload off (the userspace datapath drops offloaded segments) and caps TCP's retransmission
timeout as the experiments do: without them the controller's DSCP marks select no class.

Every host ``hI`` has IP ``10.0.0.I`` and MAC ``00:00:00:00:00:I`` (hex), so one description
gives both the Mininet topology and the controller's ``--hosts`` file
(:func:`host_table`). Links are shaped with a token bucket (``use_tbf``: Mininet's HTB
shaping warns at these rates); on switch ports :mod:`topologies.network` replaces it with the
priority classes. Link rates default to 20 Mbit/s, the rate this 2-core machine's userspace
datapath sustains for 12 simultaneous TCP senders (docs/testbed.md).
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from mininet.node import Host, OVSSwitch
from mininet.topo import Topo

DEFAULT_BW_MBPS = 20
# TCP_RTO_MAX_MS: a flow that a higher level starves keeps timing out, and Linux doubles its
# retransmission timeout each time, up to 120 s: once promoted it may then sit idle for as long
# as it was starved, an idle time the fluid model (and a transport built for priorities, e.g.
# pFabric's fixed timeout) does not have. 1 s is the smallest cap the kernel accepts.
# MAX_TCP_RETRIES: TCP gives up on a connection after a number of retransmissions (15; 8 once
# its process has exited), which Linux's doubling timeouts spread over about 15 minutes. Capped
# at 1 s they would take 15 s (8 s), and a flow starved that long would be dropped: keep the
# patience in seconds instead, as far as the kernel allows (the workers also set
# TCP_USER_TIMEOUT to workloads.worker.TCP_PATIENCE_MS, which overrides the count). The
# handshake keeps it too: Linux 6.19 caps the SYN-ACK timer the same way, and 5 SYN-ACKs 1 s
# apart would drop a connection whose ACK waited 6 s behind higher levels.
# 255 is the most retries the kernel takes, 127 for SYNs.
TCP_RTO_MAX_MS = 1000
MAX_TCP_RETRIES = 255
MAX_SYN_RETRIES = 127
RTO_MAX_SYSCTL = "/proc/sys/net/ipv4/tcp_rto_max_ms"


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

    Leaf ``L`` is switch ``sL`` (datapath id L), spine ``S`` is ``s<100+S>`` (datapath id
    100 + S). On a leaf, ports 1..hosts_per_leaf go to its hosts in order and the next ones to
    the spines in order; on a spine, port L goes to leaf L. Hosts are numbered leaf by leaf
    (``h1`` .. on leaf 1), as the simulator's :class:`simulator.engine.Fabric` groups them.

    Args:
        leaves: leaf switches.
        hosts_per_leaf: hosts under each leaf.
        spines: spine switches; every leaf links to every spine.
        bw: host link rate in Mbit/s.
        oversubscription: a leaf's hosts' rate over its uplinks' (each uplink runs at
            ``hosts_per_leaf * bw / (spines * oversubscription)`` Mbit/s).
    """

    def build(
        self,
        leaves: int = 2,
        hosts_per_leaf: int = 4,
        spines: int = 2,
        bw: float = DEFAULT_BW_MBPS,
        oversubscription: float = 1.0,
    ) -> None:
        """Leaves with their hosts, every leaf linked to every spine."""
        if leaves < 1 or hosts_per_leaf < 1 or spines < 1:
            raise ValueError("leaves, hosts_per_leaf and spines must be >= 1")
        if not oversubscription > 0:
            raise ValueError("oversubscription must be > 0")
        uplink_bw = hosts_per_leaf * bw / (spines * oversubscription)
        spine_names = [
            self.addSwitch(f"s{SPINE_BASE + k}", dpid=f"{SPINE_BASE + k:x}", protocols="OpenFlow13")
            for k in range(1, spines + 1)
        ]
        index = 0
        for leaf in range(1, leaves + 1):
            s = self.addSwitch(f"s{leaf}", dpid=f"{leaf:x}", protocols="OpenFlow13")
            for port in range(1, hosts_per_leaf + 1):
                index += 1
                h = self.addHost(f"h{index}", ip=f"{host_ip(index)}/16", mac=host_mac(index))
                self.addLink(h, s, port2=port, bw=bw, use_tbf=True)
            for k, spine in enumerate(spine_names, start=1):
                self.addLink(
                    s, spine, port1=hosts_per_leaf + k, port2=leaf, bw=uplink_bw, use_tbf=True
                )


SPINE_BASE = 100  # spine S is switch s<100+S>


def host_table(topo: Topo, bw: float | None = None) -> list[dict]:
    """The controller's ``--hosts`` description of ``topo``: name, ip, mac, bps, the port on
    its switch and, when there are several switches, that switch's datapath id."""
    single = len(topo.switches()) == 1
    table = []
    for name in sorted(topo.hosts(), key=lambda h: int(h[1:])):
        info = topo.nodeInfo(name)
        (switch,) = topo.g[name]  # a host has one link, to its switch
        entry = {"name": name, "ip": info["ip"].split("/")[0], "mac": info["mac"]}
        if not single:
            entry["switch"] = int(topo.nodeInfo(switch)["dpid"], 16)
        entry["port"] = topo.port(name, switch)[1]
        link_bw = topo.linkInfo(name, switch).get("bw", bw)
        if link_bw:
            entry["bps"] = float(link_bw) * 1e6
        table.append(entry)
    return table


def rto_cap_supported() -> bool:
    """Whether this kernel can cap TCP's retransmission timeout (``tcp_rto_max_ms``, 6.15+)."""
    return os.path.exists(RTO_MAX_SYSCTL)


def tcp_settings(rto_max_ms: float) -> list[str]:
    """The sysctls of a testbed host's namespace that cap TCP's retransmission timeout at
    ``rto_max_ms`` and keep its patience (a namespace starts from the kernel's defaults)."""
    _repository_on_path()
    from workloads.worker import TCP_PATIENCE_MS  # noqa: PLC0415 (stdlib only, path set above)

    retries = min(MAX_TCP_RETRIES, math.ceil(TCP_PATIENCE_MS / rto_max_ms))
    return [
        f"net.ipv4.tcp_rto_max_ms={int(rto_max_ms)}",
        f"net.ipv4.tcp_retries2={retries}",
        f"net.ipv4.tcp_orphan_retries={retries}",
        f"net.ipv4.tcp_synack_retries={retries}",
        f"net.ipv4.tcp_syn_retries={min(MAX_SYN_RETRIES, retries)}",
    ]


def tune_host(host, rto_max_ms: float | None) -> None:
    """Checksum offload off on every interface of ``host`` and, unless ``rto_max_ms`` is
    ``None``, TCP's timeout capped (raises ``RuntimeError`` naming a setting that fails)."""
    for intf in host.intfList():
        host.cmd(f"ethtool -K {intf} tx off")
    if rto_max_ms is None:
        return
    for setting in tcp_settings(rto_max_ms):
        out = host.cmd(f"sysctl -qw {setting}; echo rc=$?")
        if "rc=0" not in out:
            raise RuntimeError(f"{setting} in {host.name} failed: {out.strip()}")


class HpoHost(Host):
    """A testbed host for ``mn --custom`` (``--host hpo``): :func:`tune_host` once configured
    (the timeout cap where the kernel has it, Linux 6.15+)."""

    def config(self, **params):
        """Mininet's configuration, then the testbed's."""
        result = super().config(**params)
        tune_host(self, TCP_RTO_MAX_MS if rto_cap_supported() else None)
        return result


def shaped_bps(intf) -> float:
    """The rate Mininet shapes ``intf``'s link at, in bit/s (its ``bw`` is in Mbit/s; a link
    without one runs at :data:`DEFAULT_BW_MBPS`)."""
    return float(intf.params.get("bw") or DEFAULT_BW_MBPS) * 1e6


def _repository_on_path() -> None:
    """Let this file import the repository's packages also under ``mn --custom``, which runs it
    with the system Python and without ``__file__`` (the code object still names the file)."""
    root = str(Path(_repository_on_path.__code__.co_filename).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)


class HpoSwitch(OVSSwitch):
    """The testbed's switch for ``mn --custom`` (``--switch hpo``): userspace OVS, OpenFlow 1.3,
    and once started the 8 HTB priority classes on every port at its link's rate."""

    def __init__(self, name, **params):
        params.setdefault("datapath", "user")
        params.setdefault("protocols", "OpenFlow13")
        super().__init__(name, **params)

    def start(self, controllers) -> None:
        """Start OVS, then put the priority classes on the ports."""
        super().start(controllers)
        self.serve_levels()

    @classmethod
    def batchStartup(cls, switches, **kwargs):  # noqa: N802 (Mininet's name)
        """Mininet starts OVS switches in a batch, not with :meth:`start`: the classes then."""
        started = super().batchStartup(switches, **kwargs)
        for switch in started:
            switch.serve_levels()
        return started

    def serve_levels(self) -> None:
        """The 8 HTB priority classes on every port, at its link's rate."""
        _repository_on_path()
        from topologies.qos import apply_htb  # noqa: PLC0415 (the path is set just above)

        for intf in self.intfList():
            if intf.name != "lo":
                apply_htb([intf.name], shaped_bps(intf))


topos = {"testbed": OneSwitchTopo, "leafspine": LeafSpineTopo}
switches = {"hpo": HpoSwitch}
hosts = {"hpo": HpoHost}
