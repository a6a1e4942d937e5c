"""A testbed run deletes only what carries its project's mark (root, OVS, Mininet).

Each test makes its own "foreign" objects or "crashed run's leftovers", recognisable by a token
only this test puts on them, and in ``finally`` deletes, by name, exactly those it made that
still carry its token: whatever else has these names is never touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cluster import Cluster
from tests.conftest import needs_root_and
from topologies import network, ownership
from topologies.qos import class_bytes, level_classid
from topologies.testbed import ClusterTopo

from .fabric import free_port, sh, switch_ports

pytestmark = [
    pytest.mark.integration,
    needs_root_and("ovs-vsctl", "mnexec", "tc", "ethtool"),
]

ROOT = Path(__file__).resolve().parents[2]
# not the experiments' s1: a live testbed run elsewhere is never in the way
CLUSTER = Cluster.one_switch(2, 20e6, switch_prefix="tbown")
SWITCH = CLUSTER.switches[0].name  # tbown1
PORT = CLUSTER.host_ports[1]  # host 2's switch port
PEER = f"{SWITCH}-peer2"  # the other end of the veth standing in for PORT
TEST_KEY = "ownership-test"  # the test's own mark: not the project's, so "foreign" to a run


def token() -> str:
    return f"t{os.getpid()}"


def bridge_token(name: str) -> str | None:
    """The test's mark on bridge ``name`` (``None``: no such bridge or no mark)."""
    got = sh("ovs-vsctl", "--if-exists", "get", "bridge", name, f"external_ids:{TEST_KEY}",
             check=False)  # fmt: skip
    if got.returncode != 0:
        return None
    return got.stdout.strip().strip('"') or None


def link_alias(name: str) -> str | None:
    """The alias of interface ``name`` in this namespace (``None``: no such interface)."""
    try:
        return Path(f"/sys/class/net/{name}/ifalias").read_text().strip()
    except OSError:
        return None


def make_test_bridge(name: str, *settings: str) -> None:
    sh("ovs-vsctl", "add-br", name, "--", "set", "bridge", name, "datapath_type=netdev",
       f"external_ids:{TEST_KEY}={token()}", *settings)  # fmt: skip


def make_veth(name: str, peer: str, alias: str) -> None:
    """A veth pair, both ends with ``alias`` (how the test knows them again)."""
    sh("ip", "link", "add", name, "type", "veth", "peer", "name", peer)
    for end in (name, peer):
        sh("ip", "link", "set", "dev", end, "alias", alias)


def delete_bridge_if_made_here(name: str) -> None:
    if bridge_token(name) == token():
        sh("ovs-vsctl", "del-br", name)


def delete_link_if_made_here(name: str, alias: str) -> None:
    if link_alias(name) == alias:
        sh("ip", "link", "del", "dev", name)  # (and its peer)


def test_a_foreign_bridge_and_port_with_the_testbed_s_names_are_refused_and_kept():
    """A bridge and an interface named like the topology's switch and one of its ports, made by
    someone else: the start stops with one line naming both and how to free them, and both
    are still there afterwards; nothing of the testbed is made."""
    sh("bash", "scripts/ovs.sh", "start")
    topo = ClusterTopo(CLUSTER)
    alias = f"{TEST_KEY}={token()}"
    with network.testbed_lock():  # (a testbed run elsewhere waits: it would hit these names)
        try:
            make_test_bridge(SWITCH)
            make_veth(PORT, PEER, alias)
            with pytest.raises(network.NamesTaken) as refused:
                network.start(topo, free_port(), tcp_rto_max_ms=None)
            message = str(refused.value)
            assert "\n" not in message
            assert f"OVS bridge {SWITCH}, interface {PORT} exist" in message, message
            assert f"(ovs-vsctl del-br {SWITCH}; ip link del {PORT})" in message, message
            assert bridge_token(SWITCH) == token()  # still there, still the foreign one
            assert link_alias(PORT) == alias
            assert sh("ovs-vsctl", "get", "bridge", SWITCH, "datapath_type").stdout.strip() == (
                "netdev"
            )
            assert f"{SWITCH}-eth1" not in sh("ip", "-o", "link").stdout  # nothing was made
        finally:
            delete_link_if_made_here(PORT, alias)
            delete_link_if_made_here(PEER, alias)
            delete_bridge_if_made_here(SWITCH)
    assert link_alias(PORT) is None and link_alias(PEER) is None
    assert bridge_token(SWITCH) is None


def test_the_command_line_refuses_a_foreign_s1_in_one_line(tmp_path):
    """The reported case: ``ovs-vsctl add-br s1 -- set bridge s1 datapath_type=netdev`` (as a
    user's own ``sudo mn`` makes it), then ``hpo-testbed --hosts 4``: the command exits 1
    with one line naming s1, no traceback, and s1 is still there."""
    sh("bash", "scripts/ovs.sh", "start")
    if sh("ovs-vsctl", "br-exists", "s1", check=False).returncode != 2:
        pytest.skip("a bridge s1 exists already (someone's run): not this test's to touch")
    argv = [sys.executable, "-m", "experiments.run_testbed", "--hosts", "4", "--tasks", "1",
            "--configs", "3", "--eta", "3", "--min-iterations", "20", "--workers", "2",
            "--policy", "fair", "--timeout", "300", "--link-gbps", "10", "--retries", "0",
            "--out", str(tmp_path / "out")]  # fmt: skip
    ports_before = switch_ports("s1")
    try:
        make_test_bridge("s1")
        run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
        if "another testbed run holds" in run.stderr:
            pytest.skip(f"a testbed run is under way: {run.stderr.strip()}")
        assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
        assert "Traceback" not in run.stderr, run.stderr
        errors = [line for line in run.stderr.splitlines() if "error:" in line]
        assert len(errors) == 1 and run.stderr.strip().endswith(errors[0]), run.stderr
        line = errors[0]
        assert line.startswith(
            "python -m experiments.run_testbed: error: names this run needs are taken: OVS "
            "bridge s1 exists"
        ), line
        assert "ovs-vsctl del-br s1" in line
        assert bridge_token("s1") == token()
        assert sh("ovs-vsctl", "get", "bridge", "s1", "datapath_type").stdout.strip() == "netdev"
        assert switch_ports("s1") <= ports_before  # the refused run made no port
    finally:
        delete_bridge_if_made_here("s1")
    assert bridge_token("s1") is None


def test_a_crashed_run_s_marked_leftovers_are_deleted_and_the_run_goes_on():
    """A bridge and a switch port marked by a testbed run that is gone (a crash): the next start
    deletes both, makes its own (marked with its own tag) and runs; its stop leaves nothing."""
    sh("bash", "scripts/ovs.sh", "start")
    ended = subprocess.Popen(["true"])
    ended.wait()
    crashed = ownership.Owner("testbed", ended.pid, 0)  # start 0: no live process matches
    assert not ownership.running(crashed)
    crashed_alias = f"{ownership.ALIAS_PREFIX}{crashed.tag}"
    topo = ClusterTopo(CLUSTER)
    net = None
    with network.testbed_lock():
        try:
            make_test_bridge(SWITCH, ownership.bridge_mark(crashed))
            make_veth(PORT, PEER, crashed_alias)
            net = network.start(topo, free_port(), tcp_rto_max_ms=None)
            mine = ownership.this_process("testbed").tag
            assert ownership.bridge_marks()[SWITCH] == mine  # the run's own bridge now
            assert bridge_token(SWITCH) is None
            assert link_alias(PORT) == f"{ownership.ALIAS_PREFIX}{mine}"  # the run's own port
            assert link_alias(PEER) is None  # the leftover pair went as a whole
            classes = class_bytes(PORT)  # the run went on: its port has the priority classes
            assert {level_classid(level) for level in range(8)} <= set(classes)
            network.stop(net)
            net = None
            assert sh("ovs-vsctl", "br-exists", SWITCH, check=False).returncode == 2
            assert f"{SWITCH}-eth" not in sh("ip", "-o", "link").stdout
        finally:
            if net is not None:
                network.stop(net)
            # only if the leftovers this test made are still there, unchanged
            delete_link_if_made_here(PORT, crashed_alias)
            delete_link_if_made_here(PEER, crashed_alias)
            if ownership.bridge_marks().get(SWITCH) == crashed.tag:
                delete_bridge_if_made_here(SWITCH)
