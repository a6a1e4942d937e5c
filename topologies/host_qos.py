"""The end-host half of priority enforcement: every host's egress serves the controller's levels.

A host's NIC is a bottleneck as much as a switch port: under ring all-reduce or a parameter
server a host sends to several receivers at once, so its uplink is as busy as the busiest switch
egress. The switch can only mark and queue traffic after it left the host, so on the host's own
egress the jobs shared a FIFO whatever the controller decided, and the testbed enforced only half
of the schedule the simulator models (the simulator serves levels on every port, uplink and
downlink). Coflow schedulers enforce priority at end hosts for this reason (Sincronia's
priority-enabled transport, Varys' and Aalo's end-host daemons).

Here an end-host agent mirrors the controller's marking rules (``GET /api/rules``): each rule
whose source is the host becomes a ``u32`` filter on the host's egress that sends the matched
packets (destination, TCP port) to the HTB class of the rule's level, the same class its DSCP
selects on the switch. Filters come in two generations at alternating ``tc`` preferences: a new
set is added before the old one is deleted, so packets never fall back to the lowest class while
the agent updates a host.

:func:`host_filters` and :func:`filter_batch` are pure; :class:`HostPriorities` polls the
controller and runs ``tc -batch`` through a runner per host (a Mininet host or a namespace).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.schedule import LEVEL_DSCP
from topologies.qos import htb_commands, level_classid

# tc preferences (lower is tried first): two generations of per-rule filters, then the DSCP
# filters that send every unmatched (unmarked, DSCP 0) packet to the lowest class.
GENERATION_PREFS = (2, 3)
HOST_DSCP_PREF = 10
# Mininet's TCLink shaper on a host (tbf, 15 kB burst, 15 * 8 / bw ms of latency) holds about
# 30 kB, 20 full-size packets, at any rate; a class queues no more, so that serving levels on the
# host changes the order in which its packets leave, not how much it buffers.
HOST_QUEUE_PACKETS = 20

PORT_FIELDS = {"tcp_dst": "dport", "tcp_src": "sport"}

TcRunner = Callable[[list[str]], None]


@dataclass(frozen=True, order=True)
class HostFilter:
    """Packets to ``dst_ip`` (and, with a ``port_field``, TCP ``port`` as source or destination)
    leave the host in the class of ``level``."""

    dst_ip: str
    port_field: str | None  # "sport", "dport" or None (any traffic to dst_ip)
    port: int | None
    level: int


def host_filters(rules: Iterable[Mapping[str, Any]], host_ip: str) -> frozenset[HostFilter]:
    """The filters that give ``host_ip``'s egress traffic the levels of the controller's rules
    (the ``flows`` of ``GET /api/rules``' ``desired`` table)."""
    filters = set()
    for rule in rules:
        match = rule["match"]
        if match.get("ipv4_src") != host_ip or "ipv4_dst" not in match:
            continue
        level = LEVEL_DSCP.index(rule["dscp"])
        port_field = next((PORT_FIELDS[k] for k in PORT_FIELDS if k in match), None)
        port = None
        if port_field is not None:
            port = int(match["tcp_dst" if port_field == "dport" else "tcp_src"])
        filters.add(HostFilter(match["ipv4_dst"], port_field, port, level))
    return frozenset(filters)


def filter_batch(dev: str, filters: Iterable[HostFilter], pref: int) -> list[str]:
    """``tc -batch`` lines that add ``filters`` on ``dev`` at preference ``pref``.

    Port filters come first: like the switch's rules (TCP rules above host-pair rules), the most
    specific match wins, and u32 tries the filters of one preference in the order added."""
    ordered = sorted(filters, key=lambda f: (f.port_field is None, f))
    lines = []
    for f in ordered:
        match = f"match ip dst {f.dst_ip}/32"
        if f.port_field is not None:
            match += f" match ip protocol 6 0xff match ip {f.port_field} {f.port} 0xffff"
        lines.append(
            f"filter add dev {dev} parent 1: protocol ip prio {pref} u32 {match} "
            f"flowid {level_classid(f.level)}"
        )
    return lines


def host_batch(dev: str, link_bps: float) -> list[str]:
    """``tc -batch`` lines that give a host's egress ``dev`` the 8 priority classes, with the
    DSCP filters after the per-rule filters of :class:`HostPriorities`, each class queueing at
    most what the FIFO shaper it replaces would (:data:`HOST_QUEUE_PACKETS`)."""
    commands = htb_commands(
        dev, link_bps, dscp_pref=HOST_DSCP_PREF, queue_packets=HOST_QUEUE_PACKETS
    )
    return [" ".join(cmd[1:]) for cmd in commands]


def delete_batch(dev: str, pref: int) -> list[str]:
    """``tc -batch`` line that deletes every filter of preference ``pref`` on ``dev``."""
    return [f"filter del dev {dev} parent 1: protocol ip prio {pref} u32"]


@dataclass
class _HostState:
    dev: str
    run: TcRunner
    filters: frozenset[HostFilter] = frozenset()
    generation: int = 0  # index into GENERATION_PREFS of the installed set


class HostPriorities:
    """Keeps every host's egress filters in step with the controller's marking rules.

    Args:
        hosts: host IP -> ``(egress device, runner)``; the runner executes ``tc -batch`` lines
            inside the host (its device must already have the priority classes, see
            :func:`topologies.qos.htb_commands` with ``dscp_pref=HOST_DSCP_PREF``).
        rules: returns the controller's desired marking rules (e.g. a REST call).
        interval_s: :meth:`maybe_refresh` polls at most this often.
    """

    def __init__(
        self,
        hosts: Mapping[str, tuple[str, TcRunner]],
        rules: Callable[[], list[dict]],
        interval_s: float = 0.2,
    ) -> None:
        self.hosts = {ip: _HostState(dev, run) for ip, (dev, run) in hosts.items()}
        self.rules = rules
        self.interval_s = interval_s
        self.updates = 0  # host updates applied
        self.polls = 0
        self._last_poll = float("-inf")

    def maybe_refresh(self) -> int:
        """:meth:`refresh` if the last poll is at least ``interval_s`` old; hosts updated."""
        if time.monotonic() - self._last_poll < self.interval_s:
            return 0
        return self.refresh()

    def refresh(self) -> int:
        """Fetch the rules and update the hosts whose filters changed; returns how many."""
        self._last_poll = time.monotonic()
        self.polls += 1
        rules = self.rules()
        changed = 0
        for ip, host in self.hosts.items():
            wanted = host_filters(rules, ip)
            if wanted == host.filters:
                continue
            new = 1 - host.generation
            lines = filter_batch(host.dev, wanted, GENERATION_PREFS[new])
            if host.filters:
                lines += delete_batch(host.dev, GENERATION_PREFS[host.generation])
            host.run(lines)
            host.filters, host.generation = wanted, new
            changed += 1
        self.updates += changed
        return changed
