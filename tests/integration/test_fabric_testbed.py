"""The controller on a real leaf-spine fabric: Mininet, userspace OVS, 2 leaves x 2 spines.

What the switches hold is read from OVS (``dump-flows``) and from the HTB classes of every port
(``tc -s class show``); paths are checked against :class:`controller.fabric.FabricGraph`'s,
computed here from the topology alone.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from controller.cluster import Cluster
from controller.fabric import FabricGraph, Link, Location
from controller.schedule import dscp_of_level
from tests.conftest import needs_root_and
from topologies import network
from topologies.qos import class_bytes, level_classid
from topologies.testbed import ClusterTopo

from .fabric import ControllerProcess, free_port, sh, switch_ports, wait_for

pytestmark = [
    pytest.mark.integration,
    needs_root_and("ovs-vsctl", "mnexec", "iperf3", "tc", "ethtool"),
]

LEAVES, SPINES, HOSTS_PER_LEAF = 2, 2, 2
SWITCHES = ["s1", "s2", "s101", "s102"]
PORT = 5311


def expected_graph(table: list[dict]) -> FabricGraph:
    """The fabric the controller should find, built from the topology's wiring."""
    graph = FabricGraph({h["mac"]: Location(h["switch"], h["port"]) for h in table})
    for dpid in (1, 2, 101, 102):
        graph.switch_up(dpid)
    for leaf in (1, 2):
        for k in (1, 2):
            uplink = HOSTS_PER_LEAF + k
            graph.link_seen(Link(leaf, uplink, 100 + k, leaf), 0.0)
            graph.link_seen(Link(100 + k, leaf, leaf, uplink), 0.0)
    return graph


@pytest.fixture
def leaf_spine(tmp_path):
    sh("bash", "scripts/ovs.sh", "start")
    ports_before = switch_ports(*SWITCHES)
    cluster = Cluster.leaf_spine(LEAVES, HOSTS_PER_LEAF, SPINES, 20e6)
    topo = ClusterTopo(cluster)
    table = cluster.host_table()
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps(table))
    ofp_port = free_port()
    ctl = ControllerProcess(tmp_path / "ctl.sqlite", hosts, ofp_port, "--policy", "sincronia")
    ctl.start()
    net = None
    try:
        net = network.start(topo, ofp_port)
        ctl.wait_fabric(switches=4, links=2 * LEAVES * SPINES)
        yield net, ctl, table
    finally:
        if net is not None:
            network.stop(net)
        pid = ctl.proc.pid if ctl.proc else None
        ctl.stop()
    # nothing left behind: no bridge, no interface, no controller process
    for switch in SWITCHES:
        assert sh("ovs-vsctl", "br-exists", switch, check=False).returncode == 2
    assert switch_ports(*SWITCHES) <= ports_before
    if pid is not None:
        assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0


def flows(switch: str, table: int) -> str:
    return sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", switch, f"table={table}").stdout


def received_bytes(iperf_json: str) -> int:
    return int(re.search(r'"bytes":\s*(\d+)', iperf_json.split('"sum_received"')[1]).group(1))


def test_paths_marks_at_ingress_and_classes_on_every_hop(leaf_spine):
    net, ctl, table = leaf_spine
    graph = expected_graph(table)
    fabric = ctl.client.fabric()
    assert sorted(fabric["switches"]) == [1, 2, 101, 102]
    assert len(fabric["links"]) == 8 and fabric["edge_ports"] == {
        "1": [1, 2], "2": [1, 2], "101": [], "102": []}  # fmt: skip

    # every host reaches every other (ARP answered by the controller, nothing flooded)
    assert net.pingAll(timeout="2") == 0.0
    # the forwarding on every switch is the computed one
    by_mac = {h["mac"]: h for h in table}
    for src in table:
        for dst in table:
            if src is dst:
                continue
            for hop in graph.path(src["mac"], dst["mac"]):
                rules = flows(f"s{hop.dpid}", 1)
                pair = f"dl_src={src['mac']},dl_dst={dst['mac']} actions=output:{hop.port}"
                to_dst = f"dl_dst={dst['mac']} actions=output:{hop.port}"
                assert pair in rules or to_dst in rules, (src["name"], dst["name"], hop, rules)
    assert set(by_mac) == {h["mac"] for h in table}

    # a job h1 -> h3 crosses the fabric; its marks are set at h1's leaf only
    ctl.client.put_job(
        1, flows=[{"src": "h1", "dst": "h3", "bytes": 1e6}], tcp_ports=[PORT], iteration_budget=5
    )
    dscp = dscp_of_level(0)
    wait_for(lambda: f"set_field:{dscp}->ip_dscp" in flows("s1", 0), what="h1's marking rules")
    time.sleep(1.0)  # a reorder later: nothing else appeared elsewhere
    s1_marks = [line for line in flows("s1", 0).splitlines() if "ip_dscp" in line]
    s2_marks = [line for line in flows("s2", 0).splitlines() if "ip_dscp" in line]
    assert s1_marks and all("nw_src=10.0.0.1" in line for line in s1_marks)
    # the reverse direction (ACKs) is marked where it enters: h3's leaf
    assert s2_marks and all("nw_src=10.0.0.3" in line for line in s2_marks)
    for spine in ("s101", "s102"):
        assert "ip_dscp" not in flows(spine, 0)

    # the bytes travel in level 0's class on every hop of the computed path
    path = graph.path(by_host(table, "h1")["mac"], by_host(table, "h3")["mac"])
    hop_ports = [f"s{hop.dpid}-eth{hop.port}" for hop in path]
    for dev in hop_ports:
        assert {level_classid(level) for level in range(8)} <= set(class_bytes(dev))
    h1, h3 = net.get("h1", "h3")
    before = {dev: class_bytes(dev) for dev in hop_ports}
    server = h3.popen(["iperf3", "-s", "-1", "-p", str(PORT)])
    try:
        wait_for(lambda: f":{PORT}" in h3.cmd("ss -ltn"), what="iperf3 server")
        got = received_bytes(h1.cmd(f"iperf3 -c 10.0.0.3 -p {PORT} -t 2 -J"))
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert got > 1e6
    for dev in hop_ports:
        after = class_bytes(dev)
        level0 = after[level_classid(0)] - before[dev].get(level_classid(0), 0)
        assert level0 >= 0.9 * got, (dev, level0, got)
    assert ctl.client.stats()["switch_errors"] == 0


def by_host(table: list[dict], name: str) -> dict:
    return next(h for h in table if h["name"] == name)


def test_a_spine_failure_reroutes_a_running_transfer(leaf_spine, report):
    net, ctl, table = leaf_spine
    graph = expected_graph(table)
    h1, h3 = net.get("h1", "h3")
    path = graph.path(by_host(table, "h1")["mac"], by_host(table, "h3")["mac"])
    spine = f"s{path[1].dpid}"
    other = "s102" if spine == "s101" else "s101"

    def spine_bytes(name: str) -> int:  # what a spine sent down to h3's leaf
        return class_bytes(f"{name}-eth2").get("1:1", 0)

    assert net.pingAll(timeout="2") == 0.0
    server = h3.popen(["iperf3", "-s", "-1", "-p", str(PORT)])
    try:
        wait_for(lambda: f":{PORT}" in h3.cmd("ss -ltn"), what="iperf3 server")
        start = {name: spine_bytes(name) for name in (spine, other)}
        client = h1.popen(
            ["iperf3", "-c", "10.0.0.3", "-p", str(PORT), "-t", "8", "-i", "0.25", "-J"],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(3.0)
        before = {name: spine_bytes(name) for name in (spine, other)}
        failed_at = time.monotonic()
        for leaf in ("s1", "s2"):  # the spine on the transfer's path fails: all its links
            net.configLinkStatus(leaf, spine, "down")
        out, _ = client.communicate(timeout=30)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert client.returncode == 0, out
    # before the failure the transfer took its computed spine, afterwards the other one
    assert before[spine] - start[spine] > 1e6 and before[other] - start[other] < 1e5
    assert spine_bytes(other) - before[other] > 1e6
    # the longest stretch without traffic: the failure's cost to the transfer
    intervals = json.loads(out)["intervals"]
    rate = sum(i["sum"]["bytes"] for i in intervals) / len(intervals)
    gap_s = stretch = 0.0
    for interval in intervals:
        idle = interval["sum"]["bytes"] < 0.1 * rate
        stretch = stretch + interval["sum"]["seconds"] if idle else 0.0
        gap_s = max(gap_s, stretch)
    report("fabric reroute: longest stall of a transfer across a spine failure (s)", gap_s)
    assert gap_s < 3.0, [i["sum"]["bytes"] for i in intervals]
    changes = ctl.client.fabric()["changes"]
    downs = [c for c in changes if "down" in c["what"] and c["rules_changed"] > 0]
    assert downs, changes
    # one clock: CLOCK_MONOTONIC is the machine's, in the controller's process as here
    report("fabric reroute: failure to rerouting rules (s)", downs[0]["at_s"] - failed_at)
    assert downs[0]["at_s"] - failed_at < 1.0
    assert ctl.client.stats()["switch_errors"] == 0
