"""The Mininet testbed on userspace OVS with the real controller (root, Mininet, OVS)."""

from __future__ import annotations

import json
import re

import pytest

from controller.cluster import Cluster
from tests.conftest import needs_root_and
from topologies import network
from topologies.qos import class_bytes, level_classid
from topologies.testbed import ClusterTopo

from .fabric import ControllerProcess, free_port, sh, wait_for

pytestmark = [
    pytest.mark.integration,
    needs_root_and("ovs-vsctl", "mnexec", "iperf3", "tc", "ethtool"),
]

CLUSTER = Cluster.one_switch(4, 20e6, switch_prefix="tbint")
SWITCH = CLUSTER.switches[0].name  # tbint1
PORT = 5301


@pytest.fixture
def testbed(tmp_path):
    sh("bash", "scripts/ovs.sh", "start")
    topo = ClusterTopo(CLUSTER)
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps(CLUSTER.host_table()))
    ofp_port = free_port()
    ctl = ControllerProcess(tmp_path / "ctl.sqlite", hosts, ofp_port, "--policy", "sincronia")
    ctl.start()
    net = None
    try:
        net = network.start(topo, ofp_port)
        ctl.wait_switch()
        yield net, ctl
    finally:
        if net is not None:
            network.stop(net)
        ctl.stop()
    # nothing left behind: no bridge, no interface of the topology
    assert sh("ovs-vsctl", "br-exists", SWITCH, check=False).returncode == 2
    assert f"{SWITCH}-eth" not in sh("ip", "-o", "link").stdout


def test_testbed_forwards_and_prioritises(testbed):
    net, ctl = testbed
    h1, h2 = net.get("h1", "h2")
    assert net.pingAll(timeout="2") == 0.0
    flows = sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", SWITCH, "table=1").stdout
    for i in range(1, 5):
        assert f"dl_dst=00:00:00:00:00:{i:02x} actions=output:{i}" in flows
    for i in range(1, 5):
        classes = class_bytes(f"{SWITCH}-eth{i}")
        assert {level_classid(level) for level in range(8)} <= set(classes)

    ctl.client.put_job(
        1, flows=[{"src": "h1", "dst": "h2", "bytes": 1e6}], tcp_ports=[PORT], iteration_budget=5
    )
    wait_for(
        lambda: (
            "set_field:56->ip_dscp"
            in sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", SWITCH).stdout
        ),
        what="the job's marking rule",
    )
    server = h2.popen(["iperf3", "-s", "-1", "-p", str(PORT)])
    try:
        wait_for(lambda: f":{PORT}" in h2.cmd("ss -ltn"), what="iperf3 server")
        before = class_bytes(f"{SWITCH}-eth2")
        out = h1.cmd(f"iperf3 -c 10.0.0.2 -p {PORT} -t 2 -J")
        got = int(re.search(r'"bytes":\s*(\d+)', out.split('"sum_received"')[1]).group(1))
        after = class_bytes(f"{SWITCH}-eth2")
    finally:
        server.terminate()
        server.wait(timeout=10)
    level0 = after[level_classid(0)] - before.get(level_classid(0), 0)
    assert got > 1e6 and level0 >= 0.9 * got
    assert ctl.client.stats()["switch_errors"] == 0


def test_the_mn_custom_switch_and_hosts_serve_the_levels(tmp_path):
    """What ``sudo mn --custom topologies/testbed.py --switch hpo --host hpo`` builds (the same
    classes, through Mininet's API: the ``mn`` command cleans up every bridge and controller on
    the machine after any error): HTB priority classes on every switch port, checksum offload
    off and the TCP timeout capped in every host."""
    from functools import partial

    from mininet.net import Mininet
    from mininet.node import RemoteController

    from topologies import ownership
    from topologies.testbed import HpoHost, HpoSwitch, tcp_settings

    owner = ownership.this_process("test")

    class MarkedHpoSwitch(network.MarkedSwitch, HpoSwitch):
        """``--switch hpo`` with its bridge marked as this test's (a class, as ``mn`` takes it:
        Mininet then starts the switches in a batch)."""

        def __init__(self, name, **params):
            super().__init__(name, owner=owner, **params)

    sh("bash", "scripts/ovs.sh", "start")
    cluster = Cluster.one_switch(3, 20e6, switch_prefix="tbmn")
    switch = cluster.switches[0].name
    topo = ClusterTopo(cluster)
    names = ownership.mininet_names(topo)
    with network.testbed_lock():
        ownership.claim(names, owner)  # a crashed run's marked leftovers go; others' are refused
        net = Mininet(
            topo=topo, switch=MarkedHpoSwitch, host=HpoHost,
            link=partial(network.MarkedTCLink, owner=owner),
            controller=lambda name: RemoteController(name, ip="127.0.0.1", port=free_port()),
            autoSetMacs=False, waitConnected=False,
        )  # fmt: skip
        try:
            net.start()
            datapath = sh("ovs-vsctl", "get", "bridge", switch, "datapath_type").stdout
            assert datapath.strip() == "netdev"  # userspace
            for i in range(1, 4):
                classes = class_bytes(f"{switch}-eth{i}")
                assert {level_classid(level) for level in range(8)} <= set(classes)
            for host in net.hosts:
                offload = host.cmd(f"ethtool -k {host.defaultIntf()}")
                assert "tx-checksumming: off" in offload, offload
                if network.rto_cap_supported():
                    for setting in tcp_settings(network.TCP_RTO_MAX_MS):
                        name, value = setting.split("=")
                        assert host.cmd(f"sysctl -n {name}").strip() == value
        finally:
            net.stop()
            for controller in net.controllers:
                controller.terminate()
            ownership.release(names, owner)
    assert sh("ovs-vsctl", "br-exists", switch, check=False).returncode == 2
    assert f"{switch}-eth" not in sh("ip", "-o", "link").stdout
