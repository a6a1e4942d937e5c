"""The testbed under one run: the controller and the Mininet network of a cluster, started
together and always stopped together, what watches them while the run goes on, and the spine
failure a leaf-spine run may inject.

This is the one module of the experiments that imports the testbed's Mininet layer
(:mod:`topologies.network`; the others take ``network`` from here): without Mininet, the
simulator-only install, importing a testbed command is then one line naming the set-up
script, not a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from controller.cluster import Cluster
from topologies.host_qos import HostPriorities
from workloads.client import ControllerError
from workloads.launcher import ControllerProcess, free_port

try:  # the testbed's own layer needs Mininet (the simulator-only install has none)
    from topologies import network
    from topologies.testbed import ClusterTopo
except ModuleNotFoundError as missing:
    if (missing.name or "").split(".")[0] not in ("mininet", "ryu"):
        raise
    raise SystemExit(
        f"{Path(sys.argv[0]).name}: {missing.name.split('.')[0]} is not installed: the testbed "
        "needs Mininet, "
        "Ryu and Open vSwitch; `sudo bash scripts/setup.sh` installs them"
    ) from None

CONNECT_TIMEOUT_S = 30  # for the switches (and the fabric's links) to reach the controller
SWITCH_LOST_AFTER_S = 2.0


@dataclass(frozen=True)
class Testbed:
    """A running testbed: a cluster's Mininet network and its controller."""

    cluster: Cluster
    net: object  # mininet.net.Mininet
    controller: ControllerProcess

    def hosts(self) -> list:
        """The Mininet hosts in host order: host ``i`` of a workload is ``hosts()[i]``."""
        return [self.net.get(name) for name in self.cluster.host_names]


@contextmanager
def running_testbed(
    cluster: Cluster,
    policy: str,
    out: Path,
    host_priorities: bool,
    tcp_rto_max_ms: int | None,
) -> Iterator[Testbed]:
    """The controller (under ``policy``, a fresh registry in ``out``, the cluster's hosts file
    ``out/hosts.json``) and the cluster's network, up and connected; both are stopped when the
    block ends, also on an error or Ctrl-C."""
    hosts_file = out / "hosts.json"
    hosts_file.write_text(json.dumps(cluster.host_table()))
    db = out / "controller.sqlite"
    db.unlink(missing_ok=True)
    ofp_port = free_port()
    ctl = ControllerProcess(
        db, hosts_file, ofp_port, "--policy", policy, "--port-bps", str(cluster.link_bps)
    )
    net = None
    try:
        ctl.start()
        net = network.start(
            ClusterTopo(cluster),
            ofp_port,
            host_priorities=host_priorities,
            tcp_rto_max_ms=tcp_rto_max_ms,
        )
        if cluster.fabric_ports:  # (each direction of a link counts once)
            ctl.wait_fabric(len(cluster.switches), len(cluster.fabric_ports),
                            timeout_s=CONNECT_TIMEOUT_S)  # fmt: skip
        else:
            ctl.wait_switch(timeout_s=CONNECT_TIMEOUT_S)
        yield Testbed(cluster, net, ctl)
    finally:
        if net is not None:
            network.stop(net)
        ctl.stop()


def host_agent(testbed: Testbed, hosts: list) -> HostPriorities:
    """What keeps the ``hosts``' egress classes in step with the controller's rules."""
    ctl = testbed.controller
    return HostPriorities(
        {h.IP(): (h.defaultIntf().name, network.tc_runner(h)) for h in hosts},
        lambda: ctl.client.rules()["desired"]["flows"],
    )


def testbed_watch(ctl: ControllerProcess, bridges: list[str]) -> Callable[[], str | None]:
    """A check for :class:`topologies.testbed_driver.TestbedDriver`: the message naming what is
    gone (the controller process, a bridge, a switch's OpenFlow connection for
    :data:`SWITCH_LOST_AFTER_S`), or ``None`` while all is well."""
    disconnected_at = None

    def check() -> str | None:
        nonlocal disconnected_at
        code = ctl.proc.poll() if ctl.proc is not None else None
        if code is not None:
            return f"the controller (pid {ctl.proc.pid}) exited with status {code}; see {ctl.log}"
        for bridge in bridges:
            if subprocess.run(["ovs-vsctl", "br-exists", bridge], check=False).returncode != 0:
                return f"the switch {bridge} was deleted (ovs-vsctl br-exists {bridge} fails)"
        try:
            connected = len(ctl.client.stats()["switches"])
        except ControllerError as exc:
            return f"the controller stopped answering: {exc}"
        now = time.monotonic()
        if connected == len(bridges):
            disconnected_at = None
        elif disconnected_at is None:
            disconnected_at = now
        elif now - disconnected_at > SWITCH_LOST_AFTER_S:
            lost = len(bridges) - connected
            return (f"{lost} of the switches {', '.join(bridges)} have been disconnected "
                    f"from the controller for {now - disconnected_at:.0f} s")  # fmt: skip
        return None

    return check


def spine_failure(testbed: Testbed, at_s: float, record: dict) -> Callable[[float], None]:
    """A ``sample`` wrapper's action: at ``at_s`` into the run, every link of the first spine
    goes down (both ends of each, as a dead spine's neighbours see it); what happened goes into
    ``record``: when, which spine, and the monotonic clock then (for :func:`reroute_summary`)."""

    def fail(now_s: float) -> None:
        if record or now_s < at_s:
            return
        spine = testbed.cluster.spine_switches[0].name
        failed_at = time.monotonic()
        for leaf in testbed.cluster.leaf_switches:
            testbed.net.configLinkStatus(leaf.name, spine, "down")
        record.update(spine=spine, at_s=now_s, monotonic_s=failed_at)

    return fail


def reroute_summary(record: dict, fabric: dict) -> dict | None:
    """What a spine failure cost the controller: the first reroute after it (seconds from the
    failure to the rules being computed, rules changed) from ``/api/fabric``'s changes."""
    if not record:
        return None
    after = [
        c for c in fabric.get("changes", [])
        if c["at_s"] >= record["monotonic_s"] and c["rules_changed"] > 0
    ]  # fmt: skip
    first = after[0] if after else None
    return {
        "spine": record["spine"],
        "failed_at_s": record["at_s"],
        "reroute_s": None if first is None else first["at_s"] - record["monotonic_s"],
        "rules_changed": sum(c["rules_changed"] for c in after),
        "changes": [c["what"] for c in after],
    }
