"""Topologies are plain graphs: checked without root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from topologies import testbed
from topologies.testbed import LeafSpineTopo, OneSwitchTopo, host_ip, host_mac, host_table, topos

ROOT = Path(__file__).resolve().parents[2]


def test_testbed_is_13_hosts_on_one_switch():
    topo = OneSwitchTopo()
    assert len(topo.hosts()) == 13 and topo.switches() == ["s1"]
    table = host_table(topo)
    assert table[0] == {
        "name": "h1",
        "ip": "10.0.0.1",
        "mac": "00:00:00:00:00:01",
        "port": 1,
        "bps": 20e6,
    }
    assert [row["port"] for row in table] == list(range(1, 14))
    assert len({row["mac"] for row in table}) == 13


def test_addresses_and_options():
    assert host_ip(300) == "10.0.1.44" and host_mac(300) == "00:00:00:00:01:2c"
    topo = OneSwitchTopo(n=4, bw=50, switch="tb7")
    assert topo.switches() == ["tb7"] and host_table(topo)[3]["bps"] == 50e6
    with pytest.raises(ValueError):
        OneSwitchTopo(n=1)


def test_leaf_spine():
    topo = LeafSpineTopo(leaves=3, hosts_per_leaf=2, spines=2, bw=20, oversubscription=2)
    assert len(topo.hosts()) == 6 and len(topo.switches()) == 5
    assert len(topo.links()) == 6 + 3 * 2
    table = host_table(topo)
    # several switches: every host names its leaf's datapath id and its port there
    assert [(row["switch"], row["port"]) for row in table] == [
        (1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)]  # fmt: skip
    assert topo.port("s2", "s102") == (4, 2)  # leaf 2's second uplink, spine 102's port 2
    assert topo.linkInfo("s2", "s102")["bw"] == 2 * 20 / (2 * 2)
    assert topo.nodeInfo("s101")["dpid"] == "65"
    with pytest.raises(ValueError):
        LeafSpineTopo(oversubscription=0)


def test_mn_custom_contract():
    assert set(topos) == {"testbed", "leafspine"}
    assert len(topos["testbed"](5).hosts()) == 5


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
