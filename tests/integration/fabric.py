"""Test support: a userspace OVS bridge with hosts in network namespaces, and the controller.

Everything is created under a unique prefix and removed by name (namespaces, veths, bridge) or
by PID (processes); nothing is cleaned by broad name.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from topologies.qos import apply_htb
from workloads.launcher import ControllerProcess, free_port, stop_process, wait_for  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result


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

    def host_dev(self, host: str) -> str:
        """The host's own end of its link (its egress)."""
        return f"{self.prefix}{host}e"

    def tc_batch(self, host: str, lines: list[str]) -> None:
        """Run ``tc -batch`` lines inside the host's namespace (a host agent's runner)."""
        result = subprocess.run(
            ["ip", "netns", "exec", self.ns(host), "tc", "-force", "-batch", "-"],
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            timeout=30,
        )
        if result.returncode != 0:
            raise RuntimeError(f"tc -batch in {host}: {result.stderr.strip()}")

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
