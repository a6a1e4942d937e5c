"""What the controller benchmarks share: a real controller on a bare userspace OVS bridge.

:func:`controller_on_bridge` starts OVS if needed, creates the bridge (no hosts: only the rules
matter), starts ``python -m controller`` on free loopback ports, connects the two, and on exit
stops the controller by PID and deletes the bridge by name. :func:`our_rules_and_meters`
counts what the controller has put on it; :func:`our_marks` gives the marks of its rules on
the switch, to compare with :func:`workloads.launcher.wanted_marks` of ``/api/rules``.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workloads.launcher import ControllerProcess, free_port, parse_marks  # noqa: E402


def sh(*argv: str) -> subprocess.CompletedProcess:
    """Run a command; its output, or ``CalledProcessError``."""
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)


@contextlib.contextmanager
def controller_on_bridge(bridge: str, *controller_args: str) -> Iterator[ControllerProcess]:
    """A started controller (``controller_args`` go to ``python -m controller``) connected to a
    new bridge named ``bridge``; both are gone afterwards."""
    sh("bash", str(ROOT / "scripts/ovs.sh"), "start")
    ofp_port = free_port()
    sh("ovs-vsctl", "--if-exists", "del-br", bridge)
    sh("ovs-vsctl", "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev",
       "protocols=OpenFlow13", "fail_mode=secure")  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix=f"{bridge}-"))
    ctl = ControllerProcess(tmp / "ctl.sqlite", None, ofp_port, *controller_args)
    done = False
    try:
        ctl.start()
        sh("ovs-vsctl", "set-controller", bridge, f"tcp:127.0.0.1:{ofp_port}")
        ctl.wait_switch()
        yield ctl
        done = True
    finally:
        ctl.stop()
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", bridge], check=False)
        if done:  # (the controller's database and log; kept to read after a failure)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"the controller's log: {ctl.log}", file=sys.stderr)


def our_rules_and_meters(bridge: str) -> tuple[int, int]:
    """Marking rules (those setting a DSCP) in table 0 and meters on ``bridge``."""
    flows = sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge, "table=0").stdout
    meters = sh("ovs-ofctl", "-O", "OpenFlow13", "dump-meters", bridge).stdout
    return sum("set_field" in line for line in flows.splitlines()), meters.count("meter=")


def our_marks(bridge: str) -> dict[tuple, tuple]:
    """The marking rules in table 0 of ``bridge`` (:func:`workloads.launcher.parse_marks`)."""
    return parse_marks(sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge, "table=0").stdout)
