"""What a testbed run counts: bytes per priority class on the switch ports and the hosts'
egress (``tc``), the hosts' TCP counters (``/proc/net``), and the switch ports' byte counters
over time with the controller's levels (the run's timeline)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from controller.cluster import Cluster
from controller.timeline import CoflowLevel, Timeline
from topologies.qos import class_bytes, parse_class_bytes
from workloads.client import ControllerError
from workloads.launcher import ControllerProcess

ROOT_CLASS = "1:1"  # a port's root HTB class: it counts every byte once
TCP_COUNTERS = ("RetransSegs", "OutSegs", "TCPTimeouts", "TCPSynRetrans", "TCPLossProbes",
                "TCPSACKReorder", "TCPAbortOnData", "TCPAbortOnClose", "TCPAbortOnMemory",
                "TCPAbortOnTimeout", "TCPAbortOnLinger", "TCPAbortFailed", "ListenOverflows",
                "ListenDrops", "EstabResets", "OutRsts", "SyncookiesSent", "SyncookiesRecv",
                "SyncookiesFailed", "TCPReqQFullDoCookies", "TCPReqQFullDrop")  # fmt: skip
SAMPLE_PERIOD_S = 0.5  # the testbed's timeline: levels and port counters this often


def class_deltas(before: dict[str, dict], after: dict[str, dict]) -> dict[str, int]:
    """Bytes each HTB class sent between two readings, summed over the devices read."""
    sent: dict[str, int] = {}
    for device, counts in after.items():
        for cls, count in counts.items():
            sent[cls] = sent.get(cls, 0) + count - before[device].get(cls, 0)
    return sent


def host_class_bytes(host) -> dict[str, int]:
    """Bytes sent by each class of a Mininet host's egress (its HTB, or its shaper's root)."""
    return parse_class_bytes(host.cmd(f"tc -s class show dev {host.defaultIntf().name}"))


def tcp_counters(host) -> dict[str, int]:
    """The host's TCP counters of :data:`TCP_COUNTERS` (its namespace's ``/proc/net/snmp`` and
    ``/proc/net/netstat``): retransmissions and timeouts say where TCP, not the schedule, lost
    time."""
    return parse_tcp_counters(host.cmd("cat /proc/net/snmp /proc/net/netstat"))


def parse_tcp_counters(text: str) -> dict[str, int]:
    """:data:`TCP_COUNTERS` from ``/proc/net/snmp`` and ``/proc/net/netstat`` text (pairs of a
    header line and a value line per protocol)."""
    counters: dict[str, int] = {}
    lines = text.splitlines()
    for names, values in zip(lines, lines[1:], strict=False):
        head, _, rest = names.partition(":")
        if head in ("Tcp", "TcpExt") and values.startswith(head + ":"):
            counters.update(zip(rest.split(), map(int, values.split()[1:]), strict=True))
    return {key: counters.get(key, 0) for key in TCP_COUNTERS}


def tcp_deltas(before: dict[str, dict], after: dict[str, dict]) -> dict[str, dict[str, int]]:
    """Each host's :data:`TCP_COUNTERS` between two readings."""
    return {h: {k: after[h][k] - before[h][k] for k in TCP_COUNTERS} for h in after}


@dataclass(frozen=True)
class Counters:
    """One reading of a run's counters: bytes per HTB class of every host's switch port, of
    every inter-switch port and of every host's egress, and every host's TCP counters (by
    port or host name)."""

    host_ports: dict[str, dict[str, int]]
    fabric_ports: dict[str, dict[str, int]]
    host_egress: dict[str, dict[str, int]]
    tcp: dict[str, dict[str, int]]


def read_counters(cluster: Cluster, hosts: list) -> Counters:
    """The counters of ``cluster``'s switch ports and of its Mininet ``hosts``, now."""
    return Counters(
        {port: class_bytes(port) for port in cluster.host_ports},
        {port: class_bytes(port) for port in cluster.fabric_ports},
        {h.name: host_class_bytes(h) for h in hosts},
        {h.name: tcp_counters(h) for h in hosts},
    )


@dataclass(frozen=True)
class Traffic:
    """What a run sent, from two :class:`Counters`: bytes per priority class (the root class
    left out) on the hosts' switch ports, on the inter-switch ports and on the hosts' egress,
    every byte once on the hosts' switch ports, and the hosts' TCP counters summed."""

    per_class: dict[str, int]
    total_bytes: int
    fabric_per_class: dict[str, int]
    host_per_class: dict[str, int]
    tcp: dict[str, int]


def traffic(before: Counters, after: Counters) -> Traffic:
    """What was sent between the readings ``before`` and ``after``."""
    per_class = class_deltas(before.host_ports, after.host_ports)
    total = per_class.pop(ROOT_CLASS, 0)
    fabric_per_class = class_deltas(before.fabric_ports, after.fabric_ports)
    fabric_per_class.pop(ROOT_CLASS, None)
    host_per_class = class_deltas(before.host_egress, after.host_egress)
    host_per_class.pop(ROOT_CLASS, None)
    tcp = tcp_deltas(before.tcp, after.tcp)
    summed = {key: sum(tcp[h][key] for h in tcp) for key in TCP_COUNTERS}
    return Traffic(per_class, total, fabric_per_class, host_per_class, summed)


def testbed_recorder(
    ctl: ControllerProcess, timeline: Timeline, host_ports: list[str]
) -> Callable[..., None]:
    """A ``sample`` for :class:`topologies.testbed_driver.TestbedDriver`: every
    :data:`SAMPLE_PERIOD_S`, the levels of the controller's plan (``GET /api/order``; a job's
    traffic is one coflow ``job<N>`` while the job is registered, computing or sending) and the
    byte counters of the hosts' switch ports (``host_ports[I]`` receives what host I sends)
    into ``timeline``."""
    counters = [
        Path(f"/sys/class/net/{port}/statistics/{side}_bytes")
        for side in ("rx", "tx")
        for port in host_ports
    ]
    start = [int(path.read_text()) for path in counters]
    next_s = 0.0

    def sample(now_s: float, force: bool = False) -> None:
        nonlocal next_s
        if now_s < next_s and not force:
            return
        next_s = now_s + SAMPLE_PERIOD_S
        try:
            order = ctl.client.order()["order"]
        except ControllerError:  # no plan right now: the levels of the last sample hold
            order = None
        if order is not None:
            timeline.levels_at(
                now_s,
                [
                    CoflowLevel(
                        f"job{e['job_id']}" if e["implicit"] else e["coflow_id"],
                        e["job_id"],
                        e["stage_id"],
                        e["level"],
                    )
                    for e in order
                ],
            )
        try:
            timeline.ports_at(
                now_s, [int(p.read_text()) - s for p, s in zip(counters, start, strict=True)]
            )
        except OSError:  # the switch is going away; the watch reports it
            pass

    return sample
