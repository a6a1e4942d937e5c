"""What the controller benchmarks share: a real controller on a bare userspace OVS bridge.

:func:`controller_on_bridge` starts OVS if needed, creates the bridge (no hosts: only the rules
matter) marked as this process's (:mod:`topologies.ownership`), starts ``python -m controller``
on free loopback ports, connects the two, and on exit stops the controller by PID and deletes
the bridge by name if it still carries that mark. A bridge of that name that a crashed benchmark
left is deleted first; anyone else's stops the benchmark with a one-line error.
:func:`our_rules_and_meters` counts what the controller has put on it; :func:`our_marks` gives
the marks of its rules on the switch, to compare with :func:`workloads.launcher.wanted_marks`
of ``/api/rules``.
:func:`switch_on_cpus` keeps OVS off the CPUs a benchmark gives the controller alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from topologies import ownership  # noqa: E402
from workloads.launcher import ControllerProcess, free_port, parse_marks  # noqa: E402

# (where ovs-ctl, which scripts/ovs.sh runs, writes it)
OVS_PIDFILE = Path("/var/run/openvswitch/ovs-vswitchd.pid")


def sh(*argv: str) -> subprocess.CompletedProcess:
    """Run a command; its output, or ``CalledProcessError``."""
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)


@contextlib.contextmanager
def controller_on_bridge(
    bridge: str, *controller_args: str, cpus: set[int] | None = None
) -> Iterator[ControllerProcess]:
    """A started controller (``controller_args`` go to ``python -m controller``; it runs on
    ``cpus`` if given) connected to a new bridge named ``bridge``; both are gone afterwards."""
    sh("bash", str(ROOT / "scripts/ovs.sh"), "start")
    ofp_port = free_port()
    owner = ownership.this_process("bench")
    names = ownership.Names(bridges=(bridge,), interfaces=(bridge,))  # (a netdev bridge's port)
    try:
        ownership.claim(names, owner)
    except ownership.NamesTaken as exc:
        sys.exit(f"{Path(sys.argv[0]).name}: error: {exc}")
    sh("ovs-vsctl", "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev",
       "protocols=OpenFlow13", "fail_mode=secure", ownership.bridge_mark(owner))  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix=f"{bridge}-"))
    ctl = ControllerProcess(tmp / "ctl.sqlite", None, ofp_port, *controller_args, cpus=cpus)
    done = False
    try:
        ctl.start()
        sh("ovs-vsctl", "set-controller", bridge, f"tcp:127.0.0.1:{ofp_port}")
        ctl.wait_switch()
        yield ctl
        done = True
    finally:
        ctl.stop()
        ownership.release(names, owner)
        if done:  # (the controller's database and log; kept to read after a failure)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"the controller's log: {ctl.log}", file=sys.stderr)


@contextlib.contextmanager
def switch_on_cpus(cpus: set[int]) -> Iterator[None]:
    """ovs-vswitchd's threads (found by its pid file) kept to ``cpus``; afterwards each one
    it had gets its own set back, and any it made since gets the set its main thread had."""
    pid = int(OVS_PIDFILE.read_text())
    kept = {}
    for tid in _threads(pid):
        kept[tid] = os.sched_getaffinity(tid)
        os.sched_setaffinity(tid, cpus)
    try:
        yield
    finally:
        for tid in _threads(pid):
            with contextlib.suppress(ProcessLookupError):  # (a thread that ended since)
                os.sched_setaffinity(tid, kept.get(tid, kept[pid]))


def _threads(pid: int) -> list[int]:
    return [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]


def our_rules_and_meters(bridge: str) -> tuple[int, int]:
    """Marking rules (those setting a DSCP) in table 0 and meters on ``bridge``."""
    flows = sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge, "table=0").stdout
    meters = sh("ovs-ofctl", "-O", "OpenFlow13", "dump-meters", bridge).stdout
    return sum("set_field" in line for line in flows.splitlines()), meters.count("meter=")


def our_marks(bridge: str) -> dict[tuple, tuple]:
    """The marking rules in table 0 of ``bridge`` (:func:`workloads.launcher.parse_marks`)."""
    return parse_marks(sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge, "table=0").stdout)
