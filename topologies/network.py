"""Start a topology in Mininet the way this machine needs it (root only).

- switches: Open vSwitch on the userspace datapath, OpenFlow 1.3, secure fail mode (no kernel
  module here, see ../shared/DESIGN.md section 3);
- links: ``TCLink`` with the topology's ``bw``; on the switch side the root qdisc is then replaced
  by the 8 priority classes of :mod:`topologies.qos` at the same rate, and with
  ``host_priorities`` on the hosts' side too (their filters follow the controller's rules, see
  :mod:`topologies.host_qos`);
- hosts: TCP checksum offload off (TCP through the userspace datapath needs it);
- controller: a remote one on 127.0.0.1.

Always ``stop()`` what :func:`start` returns, in ``finally``; it deletes only its own bridges.
"""

from __future__ import annotations

import subprocess
from functools import partial

from mininet.link import TCLink
from mininet.net import Mininet
from mininet.node import OVSSwitch, RemoteController
from mininet.topo import Topo

from topologies.host_qos import TcRunner, host_batch
from topologies.qos import apply_htb
from topologies.testbed import DEFAULT_BW_MBPS


def tc_runner(host) -> TcRunner:
    """Runs ``tc -batch`` lines inside a Mininet host; raises on a failing command."""

    def run(lines: list[str]) -> None:
        proc = host.popen(
            ["tc", "-force", "-batch", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _, err = proc.communicate("\n".join(lines) + "\n", timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"tc -batch in {host.name} failed: {err.strip()}")

    return run


def start(
    topo: Topo,
    controller_port: int = 6653,
    bw_mbps: float = DEFAULT_BW_MBPS,
    host_priorities: bool = False,
) -> Mininet:
    """Build and start ``topo``; the caller must call ``stop(net)``.

    With ``host_priorities`` every host's egress gets the priority classes too (its filters are
    then kept by a :class:`topologies.host_qos.HostPriorities`)."""
    for switch in topo.switches():  # a crashed run may have left one of ours
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", switch], check=False)
    net = Mininet(
        topo=topo,
        switch=partial(OVSSwitch, datapath="user", protocols="OpenFlow13", failMode="secure"),
        link=TCLink,
        controller=partial(RemoteController, ip="127.0.0.1", port=controller_port),
        autoSetMacs=False,
        waitConnected=False,
    )
    try:
        net.start()
        for host in net.hosts:
            for intf in host.intfList():
                host.cmd(f"ethtool -K {intf} tx off")
        switch_ports = [
            intf.name for sw in net.switches for intf in sw.intfList() if intf.name != "lo"
        ]
        apply_htb(switch_ports, bw_mbps * 1e6)
        if host_priorities:
            for host in net.hosts:
                tc_runner(host)(host_batch(host.defaultIntf().name, bw_mbps * 1e6))
    except BaseException:
        stop(net)
        raise
    return net


def stop(net: Mininet) -> None:
    """Stop the network and delete its bridges by name."""
    try:
        net.stop()
    finally:
        for switch in net.switches:
            subprocess.run(["ovs-vsctl", "--if-exists", "del-br", switch.name], check=False)
