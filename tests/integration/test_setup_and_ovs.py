"""The set-up script is idempotent and OVS runs on the userspace datapath (root, real OVS)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import needs_root_and
from topologies import ownership

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, needs_root_and("ovs-vsctl", "ovs-ofctl")]


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=120)


def test_second_setup_run_finds_everything_in_place():
    started = time.monotonic()
    result = run("bash", str(ROOT / "scripts/setup.sh"))
    elapsed = time.monotonic() - started
    assert "apt packages present" in result.stdout
    assert "up to date" in result.stdout
    assert "project installed in" in result.stdout  # the editable install, not redone
    assert elapsed < 30, f"second set-up run took {elapsed:.1f} s"


def test_userspace_bridge_takes_openflow13_rules_and_meters():
    run("bash", str(ROOT / "scripts/ovs.sh"), "start")
    bridge = f"tst{os.getpid() % 100000}"
    owner = ownership.this_process("test")
    names = ownership.Names(bridges=(bridge,), interfaces=(bridge,))
    ownership.claim(names, owner)  # a crashed run's marked bridge goes; anyone else's is refused
    try:
        run(
            "ovs-vsctl",
            "add-br",
            bridge,
            "--",
            "set",
            "bridge",
            bridge,
            "datapath_type=netdev",
            "protocols=OpenFlow13",
            "fail_mode=secure",
            ownership.bridge_mark(owner),
        )
        assert run("ovs-vsctl", "get", "bridge", bridge, "datapath_type").stdout.strip() == (
            "netdev"
        )
        of13 = ("ovs-ofctl", "-O", "OpenFlow13")
        run(*of13, "add-meter", bridge, "meter=3,kbps,band=type=drop,rate=20000")
        rule = "cookie=0x51,priority=100,ip,nw_src=10.0.0.1"
        run(*of13, "add-flow", bridge, rule + ",actions=meter:3,set_field:46->ip_dscp,output:1")
        flows = run(*of13, "dump-flows", bridge).stdout
        assert "cookie=0x51" in flows
        assert "meter:3" in flows and "set_field:46->ip_dscp" in flows
        meters = run(*of13, "dump-meters", bridge).stdout
        assert "meter=3" in meters and "rate=20000" in meters
    finally:
        ownership.release(names, owner)
    assert run("ovs-vsctl", "br-exists", bridge, check=False).returncode == 2


def _thread_cpus(pid: int) -> dict[int, set[int]]:
    return {
        int(task.name): os.sched_getaffinity(int(task.name))
        for task in Path(f"/proc/{pid}/task").iterdir()
    }


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_benchmark_keeps_ovs_and_the_controller_on_cpus_of_their_own(tmp_path):
    # controller_latency.py --controller-cpu: the controller's threads on one CPU, OVS's on
    # the others while it runs, and OVS's own CPU sets back afterwards
    run("bash", str(ROOT / "scripts/ovs.sh"), "start")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_switch import OVS_PIDFILE, switch_on_cpus

    from workloads.launcher import ControllerProcess, free_port

    cpus = os.sched_getaffinity(0)
    alone, others = max(cpus), cpus - {max(cpus)}
    ovs = int(OVS_PIDFILE.read_text())
    before = _thread_cpus(ovs)
    with switch_on_cpus(others):
        assert set(map(frozenset, _thread_cpus(ovs).values())) == {frozenset(others)}
        ctl = ControllerProcess(tmp_path / "ctl.sqlite", None, free_port(), cpus={alone})
        try:
            ctl.start()
            threads = _thread_cpus(ctl.proc.pid)
            assert len(threads) >= 1
            assert all(cpu_set == {alone} for cpu_set in threads.values())
        finally:
            ctl.stop()
    after = _thread_cpus(ovs)
    assert all(after[tid] == cpu_set for tid, cpu_set in before.items() if tid in after)
    assert os.sched_getaffinity(0) == cpus  # (this process's own set is not touched)
