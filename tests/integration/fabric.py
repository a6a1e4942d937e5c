"""Test support: a userspace OVS bridge with hosts in network namespaces, and the controller.

Everything is created under a unique prefix, marked as this process's
(:mod:`topologies.ownership`) and removed by name only while it carries that mark (namespaces,
veths, bridge), or by PID (processes); nothing is cleaned by broad name.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

from topologies import ownership
from topologies.qos import apply_htb
from workloads.launcher import ControllerProcess, free_port, stop_process, wait_for  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result


def switch_ports(*switches: str) -> set[str]:
    """The interfaces in this namespace named as a port of one of ``switches`` (``s1-eth3``).

    Tests compare this set before and after what they run: what another run on the machine
    holds under these names is then neither blamed on the test nor touched by it."""
    lines = sh("ip", "-o", "link").stdout.splitlines()
    names = {line.split(": ")[1].split("@")[0] for line in lines}
    pattern = re.compile(rf"({'|'.join(map(re.escape, switches))})-eth\d+")
    return {name for name in names if pattern.fullmatch(name)}


class NetnsFabric:
    """``n_hosts`` namespaces ``<prefix>h<i>`` (10.0.0.i) on bridge ``<prefix>br``.

    The switch-side veth of host i is ``<prefix>s<i>`` on OpenFlow port i, with the 8 HTB
    priority classes at ``link_bps``.
    """

    def __init__(self, prefix: str, n_hosts: int, link_bps: float = 20e6) -> None:
        self.prefix = prefix
        self.bridge = f"{prefix}br"
        self.n_hosts = n_hosts
        self.link_bps = link_bps
        self.hosts = {f"h{i}": f"10.0.0.{i}" for i in range(1, n_hosts + 1)}
        self.procs: list[subprocess.Popen] = []
        self.owner: ownership.Owner | None = None

    def ns(self, host: str) -> str:
        return f"{self.prefix}{host}"

    def switch_port(self, host: str) -> str:
        return f"{self.prefix}s{host[1:]}"

    def names(self) -> ownership.Names:
        """Everything :meth:`start` makes, by name (a host's own end is made in the root
        namespace before it moves into the host's)."""
        return ownership.Names(
            bridges=(self.bridge,),
            interfaces=(
                self.bridge,
                *(self.switch_port(h) for h in self.hosts),
                *(self.host_dev(h) for h in self.hosts),
            ),
            namespaces=tuple(self.ns(h) for h in self.hosts),
        )

    def start(self, controller_port: int) -> NetnsFabric:
        """Make the bridge, the namespaces and their links, each marked as this process's; a
        crashed run's marked leftovers go first, anything else with these names is refused
        (:class:`ownership.NamesTaken`). Whatever fails part way is removed again."""
        self.owner = ownership.this_process("test")
        ownership.claim(self.names(), self.owner)
        try:
            self._make(controller_port)
        except BaseException:
            self.stop()
            raise
        return self

    def _make(self, controller_port: int) -> None:
        owner = self.owner
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
            ownership.bridge_mark(owner),
        )
        self.set_controller(controller_port)
        for host, ip in self.hosts.items():
            ns, inside, outside = self.ns(host), self.host_dev(host), self.switch_port(host)
            sh("ip", "netns", "add", ns)
            ownership.mark_namespace(ns, owner)
            sh("ip", "link", "add", inside, "type", "veth", "peer", "name", outside)
            ownership.mark_interface(outside, owner)
            ownership.mark_interface(inside, owner)
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
        apply_htb([self.switch_port(h) for h in self.hosts], self.link_bps)

    def set_controller(self, port: int) -> None:
        """Point the bridge at the controller; a new record connects at once (no backoff)."""
        sh("ovs-vsctl", "del-controller", self.bridge)
        sh("ovs-vsctl", "set-controller", self.bridge, f"tcp:127.0.0.1:{port}")

    @contextlib.contextmanager
    def controlled_by(self, folder: Path, *arguments: str) -> Iterator[ControllerProcess]:
        """A controller of this fabric (its registry and hosts file in ``folder``,
        ``arguments`` on its command line), connected to the bridge; stopped on leaving."""
        ctl = ControllerProcess(folder / "ctl.sqlite", self.hosts_file(folder / "hosts.json"),
                                self.ofp_port, *arguments)  # fmt: skip
        ctl.start()
        self.set_controller(self.ofp_port)
        try:
            ctl.wait_switch()
            yield ctl
        finally:
            ctl.stop()

    def mac(self, host: str) -> str:
        inside = self.host_dev(host)
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
        if self.owner is not None:  # only what carries this process's mark
            ownership.release(self.names(), self.owner)
