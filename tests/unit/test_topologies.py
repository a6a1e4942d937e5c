"""Topologies are plain graphs: checked without root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cluster import Cluster, host_ip, host_mac
from simulator.engine import Fabric
from topologies import testbed
from topologies.testbed import ClusterTopo, topos

ROOT = Path(__file__).resolve().parents[2]


def test_testbed_is_13_hosts_on_one_switch():
    cluster = Cluster.one_switch(13, 20e6)
    topo = ClusterTopo(cluster)
    assert len(topo.hosts()) == 13 and topo.switches() == ["s1"]
    table = cluster.host_table()
    assert table[0] == {
        "name": "h1",
        "ip": "10.0.0.1",
        "mac": "00:00:00:00:00:01",
        "port": 1,
        "bps": 20e6,
    }
    assert [row["port"] for row in table] == list(range(1, 14))
    assert len({row["mac"] for row in table}) == 13
    assert cluster.host_ports == [f"s1-eth{i}" for i in range(1, 14)] and not cluster.fabric_ports
    assert Fabric.of(cluster) == Fabric(13, 20e6)


def test_addresses_and_options():
    assert host_ip(300) == "10.0.1.44" and host_mac(300) == "00:00:00:00:01:2c"
    cluster = Cluster.one_switch(4, 50e6, switch_prefix="tb")
    topo = ClusterTopo(cluster)
    assert topo.switches() == ["tb1"] and topo.linkInfo("h4", "tb1")["bw"] == 50
    assert cluster.host_table()[3]["bps"] == 50e6 and cluster.host_ports[3] == "tb1-eth4"
    for wrong in ({"hosts": 1}, {"link_bps": 0.0}, {"link_bps": float("nan")}):
        with pytest.raises(ValueError):
            Cluster.one_switch(**{"hosts": 4, "link_bps": 20e6, **wrong})


def test_leaf_spine():
    cluster = Cluster.leaf_spine(leaves=3, hosts_per_leaf=2, spines=2, link_bps=20e6,
                                 oversubscription=2)  # fmt: skip
    topo = ClusterTopo(cluster)
    assert len(topo.hosts()) == 6 and len(topo.switches()) == 5
    assert len(topo.links()) == 6 + 3 * 2
    table = cluster.host_table()
    # several switches: every host names its leaf's datapath id and its port there
    assert [(row["switch"], row["port"]) for row in table] == [
        (1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)]  # fmt: skip
    assert topo.port("s2", "s102") == (4, 2)  # leaf 2's second uplink, spine 102's port 2
    assert topo.linkInfo("s2", "s102")["bw"] == 2 * 20 / (2 * 2)
    assert topo.nodeInfo("s101")["dpid"] == "65"
    assert Fabric.of(cluster) == Fabric(6, 20e6, hosts_per_leaf=2, oversubscription=2)
    assert cluster.to_json() == {"kind": "leaf-spine", "leaves": 3, "spines": 2,
                                 "hosts_per_leaf": 2, "oversubscription": 2}  # fmt: skip
    for wrong in ({"oversubscription": 0}, {"spines": 0}, {"leaves": 0}):
        with pytest.raises(ValueError):
            Cluster.leaf_spine(**{"leaves": 2, "hosts_per_leaf": 4, "spines": 2,
                                  "link_bps": 20e6, **wrong})  # fmt: skip


def test_the_leaf_spine_names_every_host_port_and_fabric_port():
    cluster = Cluster.leaf_spine(leaves=3, hosts_per_leaf=2, spines=2, link_bps=20e6)
    assert [s.name for s in cluster.switches] == ["s1", "s2", "s3", "s101", "s102"]
    assert cluster.host_ports == ["s1-eth1", "s1-eth2", "s2-eth1", "s2-eth2", "s3-eth1", "s3-eth2"]
    # each leaf's two uplinks and each spine's three downlinks: every link's two directions
    assert cluster.fabric_ports == [
        "s1-eth3", "s1-eth4", "s2-eth3", "s2-eth4", "s3-eth3", "s3-eth4",
        "s101-eth1", "s101-eth2", "s101-eth3", "s102-eth1", "s102-eth2", "s102-eth3",
    ]  # fmt: skip
    # the names Mininet gives the topology built from the same cluster
    topo = ClusterTopo(cluster)
    switch_ports = {f"{node}-eth{info[f'port{end}']}"
                    for _src, _dst, info in topo.links(withInfo=True) for end in "12"
                    if topo.isSwitch(node := info[f"node{end}"])}  # fmt: skip
    assert switch_ports == set(cluster.host_ports + cluster.fabric_ports)


def test_mn_custom_contract():
    assert set(topos) == {"testbed", "leafspine"}
    assert len(topos["testbed"](5).hosts()) == 5
    assert topos["testbed"](4, 50).linkInfo("h1", "s1")["bw"] == 50
    assert topos["testbed"](4).linkInfo("h1", "s1")["bw"] == 20  # the testbed's rate
    assert len(topos["leafspine"](3, 4, 2).switches()) == 5


TRY_LOCK = """
import sys
from topologies import network
try:
    with network.testbed_lock(sys.argv[1]):
        print("took it")
except network.TestbedBusy as exc:
    print(exc)
"""


def test_the_testbed_lock_is_reentrant_names_its_holder_and_is_released(tmp_path):
    from topologies import network

    path = str(tmp_path / "testbed.lock")

    def other_process() -> str:
        return subprocess.run([sys.executable, "-c", TRY_LOCK, path], capture_output=True,
                              text=True, cwd=ROOT, timeout=60).stdout  # fmt: skip

    with network.testbed_lock(path), network.testbed_lock(path):  # one experiment, nested
        refused = other_process()
    assert f"another testbed run holds {path} (pid {os.getpid()}:" in refused
    assert other_process().strip() == "took it"


def test_tcp_keeps_its_patience_in_seconds_under_the_timeout_cap():
    from workloads.worker import TCP_PATIENCE_MS

    settings = dict(s.split("=") for s in testbed.tcp_settings(1000))
    assert settings["net.ipv4.tcp_rto_max_ms"] == "1000"
    # a connection, an orphan and a handshake each get as many 1-s retries as the kernel takes
    for name in ("tcp_retries2", "tcp_orphan_retries", "tcp_synack_retries"):
        assert settings[f"net.ipv4.{name}"] == str(testbed.MAX_TCP_RETRIES)
    assert settings["net.ipv4.tcp_syn_retries"] == str(testbed.MAX_SYN_RETRIES)
    # with a looser cap, fewer retries cover the same patience
    loose = dict(s.split("=") for s in testbed.tcp_settings(10_000))
    assert int(loose["net.ipv4.tcp_synack_retries"]) * 10_000 >= TCP_PATIENCE_MS


def test_the_controller_check_connects_without_reading_its_binary_hello():
    """Mininet's own check reads the controller's OpenFlow hello through telnet as UTF-8 and
    fails the start on a transaction id that is not; ours only connects."""
    import socket
    import threading

    from topologies.network import accepts_connections

    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def hello() -> None:
            connection, _ = server.accept()
            with connection:
                connection.sendall(b"\x04\x00\x00\x08\xda \xa2\xab")  # not UTF-8

        answering = threading.Thread(target=hello)
        answering.start()
        assert accepts_connections("127.0.0.1", port)
        answering.join(timeout=5)
    assert not accepts_connections("127.0.0.1", port, timeout_s=1.0)  # closed now
