"""Start a topology in Mininet the way this machine needs it (root only).

- switches: Open vSwitch on the userspace datapath, OpenFlow 1.3, secure fail mode (no kernel
  module here, see ../shared/DESIGN.md section 3);
- links: ``TCLink`` with the topology's ``bw``; on the switch side the root qdisc is then replaced
  by the 8 priority classes of :mod:`topologies.qos` at the same rate;
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

from topologies.qos import apply_htb
from topologies.testbed import DEFAULT_BW_MBPS


def start(topo: Topo, controller_port: int = 6653, bw_mbps: float = DEFAULT_BW_MBPS) -> Mininet:
    """Build and start ``topo``; the caller must call ``stop(net)``."""
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
