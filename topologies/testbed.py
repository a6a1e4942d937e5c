"""The testbed's Mininet topology of a :class:`controller.cluster.Cluster`, and its switch and
hosts for ``mn --custom``.

A Topo is only a graph (Mininet's habit): no namespace is made until a ``Mininet`` object starts
it, so the graph is testable without root. The cluster it is built from also gives the
controller's ``--hosts`` file (:meth:`controller.cluster.Cluster.host_table`), so the two
cannot disagree. From the command line (as root, from the repository's root)::

    sudo mn --custom topologies/testbed.py --topo testbed,13 --switch hpo --host hpo \\
        --link tc --controller remote,ip=127.0.0.1,port=6653

The leaf-spine fabric the same way: ``--topo leafspine,3,4,2`` (3 leaves of 4 hosts, 2 spines);
the controller then discovers the links and routes over them (:mod:`controller.fabric`).
``--switch hpo`` (:class:`HpoSwitch`) is userspace OVS speaking OpenFlow 1.3 with the 8 HTB
priority classes on every port, and ``--host hpo`` (:class:`HpoHost`) turns TCP checksum
offload off (the userspace datapath drops offloaded segments) and caps TCP's retransmission
timeout as the experiments do: without them the controller's DSCP marks select no class.

Links are shaped with a token bucket (``use_tbf``: Mininet's HTB shaping warns at these
rates); on switch ports :mod:`topologies.network` replaces it with the priority classes.
``mn --custom`` runs this file with the system Python: it imports the repository's modules
(standard library only) where it needs them, after putting the repository on the path.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mininet.node import Host, OVSSwitch
from mininet.topo import Topo

if TYPE_CHECKING:
    from controller.cluster import Cluster

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


class ClusterTopo(Topo):
    """The Mininet graph of ``cluster``: its switches (OpenFlow 1.3, their datapath ids), every
    host with its addresses on its switch port, and the leaves' uplinks; host links at the
    cluster's link rate, uplinks at its uplink rate (Mininet's ``bw`` is in Mbit/s)."""

    def build(self, cluster: Cluster) -> None:
        """Switches, hosts and links as ``cluster`` describes them."""
        for switch in cluster.switches:
            self.addSwitch(switch.name, dpid=f"{switch.dpid:x}", protocols="OpenFlow13")
        for host in cluster.host_links:
            self.addHost(host.name, ip=f"{host.ip}/16", mac=host.mac)
            self.addLink(host.name, host.switch.name, port2=host.port,
                         bw=cluster.link_bps / 1e6, use_tbf=True)  # fmt: skip
        for link in cluster.fabric_links:
            self.addLink(link.leaf.name, link.spine.name, port1=link.leaf_port,
                         port2=link.spine_port, bw=cluster.uplink_bps / 1e6,
                         use_tbf=True)  # fmt: skip


def one_switch_topo(n: int = 13, bw: float | None = None) -> ClusterTopo:
    """``--topo testbed,N[,BW]``: ``n`` hosts on one switch, links of ``bw`` Mbit/s (default:
    the testbed's rate)."""
    _repository_on_path()
    from controller.cluster import TESTBED_LINK_BPS, Cluster  # noqa: PLC0415 (path set above)

    return ClusterTopo(Cluster.one_switch(n, TESTBED_LINK_BPS if bw is None else bw * 1e6))


def leaf_spine_topo(
    leaves: int = 2,
    hosts_per_leaf: int = 4,
    spines: int = 2,
    bw: float | None = None,
    oversubscription: float = 1.0,
) -> ClusterTopo:
    """``--topo leafspine,LEAVES,HOSTS_PER_LEAF,SPINES[,BW,OVERSUBSCRIPTION]``: the leaf-spine
    fabric of :meth:`controller.cluster.Cluster.leaf_spine`, host links of ``bw`` Mbit/s
    (default: the testbed's rate)."""
    _repository_on_path()
    from controller.cluster import TESTBED_LINK_BPS, Cluster  # noqa: PLC0415 (path set above)

    link_bps = TESTBED_LINK_BPS if bw is None else bw * 1e6
    return ClusterTopo(Cluster.leaf_spine(leaves, hosts_per_leaf, spines, link_bps,
                                          oversubscription))  # fmt: skip


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
    without one runs at the testbed's rate)."""
    _repository_on_path()
    from controller.cluster import TESTBED_LINK_BPS  # noqa: PLC0415 (the path is set above)

    bw = intf.params.get("bw")
    return float(bw) * 1e6 if bw else TESTBED_LINK_BPS


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


topos = {"testbed": one_switch_topo, "leafspine": leaf_spine_topo}
switches = {"hpo": HpoSwitch}
hosts = {"hpo": HpoHost}
