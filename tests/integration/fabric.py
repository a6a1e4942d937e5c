"""Test support: a userspace OVS bridge with hosts in network namespaces, and the controller.

Everything is created under a unique prefix and removed by name (namespaces, veths, bridge) or
by PID (processes); nothing is cleaned by broad name.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from topologies.qos import apply_htb
from workloads.client import ControllerClient

ROOT = Path(__file__).resolve().parents[2]


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result


def free_port() -> int:
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


class NetnsFabric:
    """``n_hosts`` namespaces ``<prefix>h<i>`` (10.0.0.i) on bridge ``<prefix>br``.

    The switch-side veth of host i is ``<prefix>s<i>`` on OpenFlow port i, with the 8 HTB
    priority classes at ``rate_bps``.
    """

    def __init__(self, prefix: str, n_hosts: int, rate_bps: float = 20e6) -> None:
        self.prefix = prefix
        self.bridge = f"{prefix}br"
        self.n_hosts = n_hosts
        self.rate_bps = rate_bps
        self.hosts = {f"h{i}": f"10.0.0.{i}" for i in range(1, n_hosts + 1)}
        self.procs: list[subprocess.Popen] = []

    def ns(self, host: str) -> str:
        return f"{self.prefix}{host}"

    def switch_port(self, host: str) -> str:
        return f"{self.prefix}s{host[1:]}"

    def start(self, controller_port: int) -> NetnsFabric:
        self.stop()  # in case a crashed run left ours behind
        sh(
            "ovs-vsctl",
            "add-br",
            self.bridge,
            "--",
            "set",
            "bridge",
            self.bridge,
            "datapath_type=netdev",
            "protocols=OpenFlow13",
            "fail_mode=secure",
            "other_config:datapath-id=00000000000000aa",
        )
        self.set_controller(controller_port)
        for host, ip in self.hosts.items():
            ns, inside, outside = self.ns(host), f"{self.prefix}{host}e", self.switch_port(host)
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", inside, "type", "veth", "peer", "name", outside)
            sh("ip", "link", "set", inside, "netns", ns)
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ip}/24", "dev", inside)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", inside, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            # TCP through the userspace datapath needs checksums done in software
            sh("ip", "netns", "exec", ns, "ethtool", "-K", inside, "tx", "off")
            sh("ip", "link", "set", outside, "up")
            sh(
                "ovs-vsctl",
                "add-port",
                self.bridge,
                outside,
                "--",
                "set",
                "interface",
                outside,
                f"ofport_request={host[1:]}",
            )
        apply_htb([self.switch_port(h) for h in self.hosts], self.rate_bps)
        return self

    def set_controller(self, port: int) -> None:
        """Point the bridge at the controller; a new record connects at once (no backoff)."""
        sh("ovs-vsctl", "del-controller", self.bridge)
        sh("ovs-vsctl", "set-controller", self.bridge, f"tcp:127.0.0.1:{port}")

    def mac(self, host: str) -> str:
        inside = f"{self.prefix}{host}e"
        return sh(
            "ip", "netns", "exec", self.ns(host), "cat", f"/sys/class/net/{inside}/address"
        ).stdout.strip()

    def hosts_file(self, path: Path) -> Path:
        """The topology description the controller takes: name, IP, MAC, switch port."""
        entries = [
            {"name": h, "ip": ip, "mac": self.mac(h), "port": int(h[1:])}
            for h, ip in self.hosts.items()
        ]
        path.write_text(json.dumps(entries))
        return path

    def popen(self, host: str, *argv: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(host), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def run(self, host: str, *argv: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ip", "netns", "exec", self.ns(host), *argv],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def dump_flows(self) -> str:
        return sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", self.bridge).stdout

    def dump_meters(self) -> str:
        return sh("ovs-ofctl", "-O", "OpenFlow13", "dump-meters", self.bridge).stdout

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc)
        self.procs.clear()
        for host in self.hosts:
            sh("ip", "netns", "del", self.ns(host), check=False)
            sh("ip", "link", "del", self.switch_port(host), check=False)
        sh("ovs-vsctl", "--if-exists", "del-br", self.bridge)


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

    def __init__(self, db: Path, hosts_file: Path | None, ofp_port: int, *extra: str) -> None:
        self.db = db
        self.hosts_file = hosts_file
        self.ofp_port = ofp_port
        self.rest_port = free_port()
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.log = db.with_suffix(".log")
        self.client = ControllerClient(f"http://127.0.0.1:{self.rest_port}")

    def start(self) -> ControllerProcess:
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
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ}
            )
        self.client.wait_ready(timeout_s=30)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def wait_switch(self, timeout_s: float = 20.0) -> None:
        wait_for(lambda: self.client.stats()["switches"], timeout_s, what="the switch to connect")
