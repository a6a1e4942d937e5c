"""The set-up script is idempotent and OVS runs on the userspace datapath (root, real OVS)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import needs_root_and

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
    assert elapsed < 30, f"second set-up run took {elapsed:.1f} s"


def test_userspace_bridge_takes_openflow13_rules_and_meters():
    run("bash", str(ROOT / "scripts/ovs.sh"), "start")
    bridge = f"tst{os.getpid() % 100000}"
    run("ovs-vsctl", "--if-exists", "del-br", bridge)
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
        run("ovs-vsctl", "--if-exists", "del-br", bridge)
    assert run("ovs-vsctl", "br-exists", bridge, check=False).returncode == 2
