"""What the controller benchmarks share: a real controller on a bare userspace OVS bridge.

:func:`controller_on_bridge` starts OVS if needed, creates the bridge (no hosts: only the rules
matter), starts ``python -m controller`` on free loopback ports, connects the two, and on exit
stops the controller by PID and deletes the bridge by name. :func:`our_rules_and_meters`
counts what the controller has put on it; :func:`our_marks` and :func:`wanted_marks` give the
marks of its rules on the switch and in ``/api/rules``, to compare.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workloads.launcher import ControllerProcess, free_port  # noqa: E402


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
    try:
        ctl.start()
        sh("ovs-vsctl", "set-controller", bridge, f"tcp:127.0.0.1:{ofp_port}")
        ctl.wait_switch()
        yield ctl
    finally:
        ctl.stop()
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", bridge], check=False)


def our_rules_and_meters(bridge: str) -> tuple[int, int]:
    """Marking rules (those setting a DSCP) in table 0 and meters on ``bridge``."""
    flows = sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge, "table=0").stdout
    meters = sh("ovs-ofctl", "-O", "OpenFlow13", "dump-meters", bridge).stdout
    return sum("set_field" in line for line in flows.splitlines()), meters.count("meter=")


def our_marks(bridge: str) -> dict[tuple, tuple]:
    """The marking rules in table 0 of ``bridge``: (source, destination, TCP field, port) ->
    (DSCP, meter id or None)."""
    flows = sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge, "table=0").stdout
    out = {}
    for line in flows.splitlines():
        if "set_field" not in line:
            continue
        src = re.search(r"nw_src=([\d.]+)", line).group(1)
        dst = re.search(r"nw_dst=([\d.]+)", line).group(1)
        tcp = re.search(r"tp_(src|dst)=(\d+)", line)
        dscp = int(re.search(r"set_field:(\d+)->ip_dscp", line).group(1))
        meter = re.search(r"meter:(\d+)", line)
        key = (src, dst, tcp.group(1) if tcp else None, int(tcp.group(2)) if tcp else None)
        out[key] = (dscp, int(meter.group(1)) if meter else None)
    return out


def wanted_marks(rules_json: dict) -> dict[tuple, tuple]:
    """The same for the rules the controller wants (``/api/rules``' ``desired``)."""
    out = {}
    for flow in rules_json["flows"]:
        match = flow["match"]
        tcp = "dst" if "tcp_dst" in match else "src" if "tcp_src" in match else None
        port = match[f"tcp_{tcp}"] if tcp else None
        out[(match["ipv4_src"], match["ipv4_dst"], tcp, port)] = (flow["dscp"], flow["meter_id"])
    return out
