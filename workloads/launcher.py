"""Start and stop ``python -m controller`` as a child process (scripts, benchmarks, tests).

Only the process started here is ever signalled, by its handle.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from controller.plugins import child_pythonpath
from workloads.client import ControllerClient

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout_s: float = 10.0, interval_s: float = 0.1, what: str = ""):
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` after timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def stop_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM, wait, then SIGKILL: only the process we started."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ControllerProcess:
    """``python -m controller`` on free loopback ports with its own SQLite file."""

    def __init__(
        self,
        db: Path,
        hosts_file: Path | None,
        ofp_port: int,
        *extra: str,
        cpus: set[int] | None = None,
    ) -> None:
        self.db = db
        self.cpus = cpus  # the CPUs it may run on (None: this process's)
        self.hosts_file = hosts_file
        self.ofp_port = ofp_port
        self.rest_port = free_port()
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.log = db.with_suffix(".log")
        self.client = ControllerClient(f"http://127.0.0.1:{self.rest_port}")

    def start(self) -> ControllerProcess:
        """Start the controller and wait until its REST API answers."""
        argv = [
            sys.executable,
            "-m",
            "controller",
            "--db",
            str(self.db),
            "--ofp-port",
            str(self.ofp_port),
            "--rest-port",
            str(self.rest_port),
            "--tick",
            "0.5",
            *self.extra,
        ]
        if self.hosts_file:
            argv += ["--hosts", str(self.hosts_file)]
        env = {**os.environ}
        # a --policy package.module:Class this process loaded: the controller (started in the
        # checkout, not where this process was started) finds the module where this one did
        pythonpath = child_pythonpath(env.get("PYTHONPATH"))
        if pythonpath is not None:
            env["PYTHONPATH"] = pythonpath
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                # (set before it starts: every thread it makes inherits the set)
                preexec_fn=None if self.cpus is None else self._keep_to_cpus,
            )
        self.client.wait_ready(timeout_s=30)
        return self

    def _keep_to_cpus(self) -> None:
        os.sched_setaffinity(0, self.cpus)

    def stop(self) -> None:
        """Stop the controller we started (SIGTERM, then SIGKILL)."""
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def wait_switch(self, timeout_s: float = 20.0) -> None:
        """Wait until a switch is connected to the controller."""
        wait_for(lambda: self.client.stats()["switches"], timeout_s, what="the switch to connect")

    def wait_fabric(self, switches: int, links: int, timeout_s: float = 30.0) -> dict:
        """Wait until ``switches`` switches are connected and discovery has found ``links``
        links between them (each direction counts once); returns ``/api/fabric``."""
        fabric: dict = {}

        def complete() -> bool:
            nonlocal fabric
            fabric = self.client.fabric()
            return len(fabric["switches"]) >= switches and len(fabric["links"]) >= links

        try:
            wait_for(complete, timeout_s, what=f"{switches} switches and {links} links")
        except AssertionError as exc:
            have = f"{len(fabric.get('switches', []))} and {len(fabric.get('links', []))}"
            raise AssertionError(f"{exc} (found {have})") from None
        return fabric


def parse_marks(dump_flows: str) -> dict[tuple, tuple]:
    """The marking rules in ``ovs-ofctl -O OpenFlow13 dump-flows`` output (those that set a
    DSCP): (source, destination, TCP field, port) -> (DSCP, meter id or None)."""
    out = {}
    for line in dump_flows.splitlines():
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
