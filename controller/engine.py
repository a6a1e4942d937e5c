"""The controller's core loop, without Ryu: registry + policy -> schedule -> per-switch ops.

The Ryu app calls :meth:`Engine.note_event` on every registration or progress event,
:meth:`Engine.reorder` from its single reorder loop (on events and on a periodic tick), then
:meth:`Engine.ops_for` per connected switch, sends the operations and reports them with
:meth:`Engine.sent`. Latency from an event to the sending of the operations it caused is kept
for the stats endpoint.
"""

from __future__ import annotations

import collections
import collections.abc
import contextlib
import gc
import logging
import resource
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from controller.metrics import percentile
from controller.model import ClusterState
from controller.policies import (
    POLICIES,
    Policy,
    check_options,
    is_plugin_reference,
    make_policy,
    policy_class,
)
from controller.registry import IMPLICIT_COFLOW_BASE, InvalidInput, Registry
from controller.rules import (
    MarkingTable,
    MeterIds,
    Op,
    SwitchTable,
    diff,
    rule_source_ip,
)
from controller.schedule import Schedule, coflow_levels, dscp_of_level

LOG = logging.getLogger(__name__)
LATENCY_SAMPLES = 10_000
# (the calling thread's own counts where the OS keeps them, as Linux does; else the process's)
_RUSAGE_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def involuntary_switches() -> int:
    """How many times the OS has taken the core from the calling thread to run another task
    (``getrusage``'s ``ru_nivcsw``): a reorder during which it grew was preempted."""
    return resource.getrusage(_RUSAGE_WHO).ru_nivcsw


class NoPlan(Exception):
    """There is no plan to show: the first reorder failed (the message says why)."""


class EngineObserver(Protocol):
    """What the engine tells a monitor (:class:`controller.telemetry.Telemetry`) as it happens,
    one call per reorder, event-loop hold or switch error: counters that never go back, unlike
    :class:`Stats`, which ``DELETE /api/stats`` starts afresh."""

    def reordered(self, policy: str, compute_s: float) -> None:
        """A reorder under ``policy`` computed its plan in ``compute_s`` seconds."""

    def reorder_failed(self) -> None:
        """A reorder raised; the previous plan stays in force."""

    def served(self, policy: str, latency_s: float) -> None:
        """A reorder's operations are sent, ``latency_s`` after the oldest event it served."""

    def held(self, kind: str, wall_s: float) -> None:
        """Work of ``kind`` (one of :data:`HOLD_KINDS`) held the event loop ``wall_s`` seconds."""

    def switch_error(self) -> None:
        """A switch sent an OpenFlow error message."""


@contextlib.contextmanager
def collections_after() -> Iterator[None]:
    """Run the block with the interpreter's garbage collector held; the collection that fell
    due meanwhile, if any, starts at the first allocation after it.

    A collection starts whenever enough objects were allocated, and a reorder allocates most
    of them: one in ~25 reorders of 1,000 coflows ran a young-generation collection in the
    middle, 1-1.5 ms of walking the objects made since the last one (among them the new
    table's rules dict), which was most of the reorders' p99 (benchmarks/reorder_parts.py).
    Held around a reorder and its sending, the collection runs once the operations are out,
    and the interpreter still chooses which generations it takes.
    """
    held = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if held:
            gc.enable()


class GcPauses:
    """Durations of the interpreter's garbage collections, by generation (process-wide; the
    controller installs one): a full collection stops the only event loop, REST and OpenFlow
    alike, for as long as it walks every live object."""

    def __init__(self) -> None:
        self.reset()
        self._started = 0.0
        # told every pause, (generation, seconds): the metrics' histogram of them
        self.observer: Callable[[int, float], None] | None = None

    def install(self) -> GcPauses:
        """Start timing the process's collections; returns itself."""
        gc.callbacks.append(self._on_gc)
        return self

    def uninstall(self) -> None:
        """Stop timing collections."""
        gc.callbacks.remove(self._on_gc)

    def reset(self) -> None:
        """Forget the counts and longest pauses (with the other stats)."""
        self.count = [0, 0, 0]
        self.max_s = [0.0, 0.0, 0.0]

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        paused = time.perf_counter() - self._started
        self.count[generation] += 1
        self.max_s[generation] = max(self.max_s[generation], paused)
        if self.observer is not None:
            self.observer(generation, paused)

    def to_json(self) -> dict:
        """Count and longest pause (ms) per generation, for ``/api/stats``."""
        return {
            f"gen{g}": {"count": self.count[g], "max_ms": round(self.max_s[g] * 1e3, 3)}
            for g in range(3)
        }


@dataclass
class Plan:
    """The outcome of one reorder: the state seen, the schedule and the rules enforcing it."""

    state: ClusterState
    schedule: Schedule
    table: SwitchTable
    computed_at: float
    compute_s: float
    started_s: float  # on the engine's monotonic clock, for the slowest event's breakdown


@dataclass(frozen=True)
class SlowEvent:
    """Where the time of the slowest event went: waiting for the reorder loop, computing the
    plan, building and sending the operations; ``cpu_s`` is the process's CPU time over the whole
    event, so ``latency_s - cpu_s`` is time the process did not run (another process had the
    core, or it waited on I/O)."""

    latency_s: float
    wait_s: float
    compute_s: float
    send_s: float
    cpu_s: float

    def to_json(self) -> dict:
        """The breakdown in milliseconds, for ``/api/stats``."""
        return {
            f"{name}_ms": round(getattr(self, f"{name}_s") * 1e3, 3)
            for name in ("latency", "wait", "compute", "send", "cpu")
        }


@dataclass
class Stats:
    """Counters and latency samples since the start or the last reset (``/api/stats``)."""

    reorders: int = 0
    events: int = 0
    ops_sent: int = 0
    switch_errors: int = 0  # OpenFlow error messages received (a rejected FlowMod is a bug)
    latencies_s: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=LATENCY_SAMPLES)
    )
    compute_s: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=LATENCY_SAMPLES)
    )
    # the process's CPU time in each reorder (all its threads): where it falls short of the
    # wall time, another process had the core (the switch and the clients share a small one)
    compute_cpu_s: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=LATENCY_SAMPLES)
    )
    # how many times the OS took the core from the reorder's thread during each reorder
    preemptions: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=LATENCY_SAMPLES)
    )
    slowest: SlowEvent | None = None
    # how long each REST request and each reorder (with its sending) held the event loop, the
    # only one (OpenFlow included), as (wall, CPU) seconds: the glue times both
    # (controller/ryu_app.py); wall time beyond the CPU time is time another process had the core
    holds_s: dict[str, collections.deque] = field(
        default_factory=lambda: {
            kind: collections.deque(maxlen=LATENCY_SAMPLES) for kind in HOLD_KINDS
        }
    )


# what holds the event loop: a REST request, or a reorder with the sending of its operations
HOLD_KINDS = ("rest", "reorder")


class Engine:
    """Registry, policy and the installed state of every switch.

    Args:
        registry: the validated, persistent registry.
        policy: policy name (the registry's saved choice wins after a restart).
        policy_options: options for :func:`controller.policies.make_policy`.
        link_bps: capacity of every host port (bit/s) unless ``host_link_bps`` names the host.
        host_link_bps: per-host capacity overrides, by IPv4 address.
        monotonic: clock for latencies.
        cpu_clock: the process's CPU time (for the slowest event's breakdown).
        preemptions: a count that grows each time the OS takes the core from the calling
            thread to run another task (:func:`involuntary_switches`).
        gc_pauses: the process's garbage-collection pauses, for the stats (``None``: not kept).
        edge_switch: the switch a host (by IPv4 address) is attached to, or ``None`` if not
            known. A pair's marking rules and meter then go to its source's switch only (the
            ingress edge: marks travel with the packets, and a meter limits a flow once); rules
            of a host whose switch is not known go to every switch. ``None``: every switch
            gets every rule.
        offered_policies: policies of outside code (``package.module:Class`` or an entry
            point's name, :mod:`controller.plugins`) to load now besides ``policy``, so that
            :meth:`set_policy` may switch to them: it switches only among the built-ins and the
            policies loaded here (the REST API never imports code).
    """

    def __init__(
        self,
        registry: Registry,
        policy: str = "beamer",
        policy_options: dict | None = None,
        link_bps: float = 20e6,
        host_link_bps: dict[str, float] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.process_time,
        preemptions: Callable[[], int] = involuntary_switches,
        gc_pauses: GcPauses | None = None,
        edge_switch: Callable[[str], int | None] | None = None,
        offered_policies: Iterable[str] = (),
    ) -> None:
        self.registry = registry
        self.edge_switch = edge_switch
        self.gc_pauses = gc_pauses
        self.link_bps = link_bps
        self.host_link_bps = dict(host_link_bps or {})
        self.monotonic = monotonic
        self.cpu_clock = cpu_clock
        self.preemptions = preemptions
        # what set_policy may switch to: the built-ins and the policies named at start (the
        # command line's), loaded now; loading imports code, which no request may make happen
        self.policies: dict[str, type[Policy]] = dict(POLICIES)
        for name in (policy, *offered_policies):
            self.policies[name] = policy_class(name)
        self.policy: Policy = make_policy(policy, **(policy_options or {}))
        self.policy_name, self.policy_options = policy, dict(policy_options or {})
        saved = registry.settings.get("policy")
        if saved:
            try:  # (checked when the registry opened its file; one made in code is not)
                self.policy = self._offered(saved["name"], saved.get("options", {}))
                self.policy_name, self.policy_options = saved["name"], saved.get("options", {})
            except (ValueError, TypeError, KeyError) as exc:
                LOG.error("ignoring the policy saved in the database (%s): %s", saved, exc)
        self.reorder_failures = 0
        self.last_reorder_error: str | None = None
        self.meter_ids = MeterIds()
        self.marking = MarkingTable(self.meter_ids)  # the rules, kept between reorders
        self.switches: dict[int, SwitchTable] = {}
        self.plan: Plan | None = None
        self.stats = Stats()
        # told of reorders, latencies and holds as they happen (the Prometheus metrics)
        self.observer: EngineObserver | None = None
        self._pending_events: list[float] = []
        self._oldest_event_cpu = 0.0

    # ---- events and policy -------------------------------------------------------------------

    def note_event(self, at: float | None = None) -> None:
        """Something changed (a registration, progress): the next reorder serves it."""
        if not self._pending_events:
            self._oldest_event_cpu = self.cpu_clock()
        self._pending_events.append(self.monotonic() if at is None else at)
        self.stats.events += 1

    @property
    def dirty(self) -> bool:
        """Whether a reorder is due: an event is pending or there is no plan yet."""
        return bool(self._pending_events) or self.plan is None

    def set_policy(self, name: str, options: dict | None = None) -> None:
        """Switch the policy at run time (persisted); :class:`InvalidInput` for a bad one."""
        if not isinstance(name, str):
            raise InvalidInput("name: must be a string", "name")
        if options is not None and not isinstance(options, dict):
            raise InvalidInput("options: must be a JSON object", "options")
        try:
            policy = self._offered(name, options or {})
        except ValueError as exc:
            field_name = "name" if name not in self.policies else "options"
            raise InvalidInput(f"{field_name}: {exc}", field_name) from None
        self.registry.set_setting("policy", {"name": name, "options": options or {}})
        self.policy, self.policy_name, self.policy_options = policy, name, dict(options or {})
        self.note_event()

    def _offered(self, name: str, options: dict) -> Policy:
        """A new instance of the offered policy ``name`` (:attr:`policies`) with ``options``,
        importing nothing; ``ValueError`` naming what is wrong."""
        if name not in self.policies:
            choices = ", ".join(sorted(self.policies))
            if is_plugin_reference(name):
                raise ValueError(
                    f"policy {name!r} was not loaded at start, and requests import no code: "
                    f"start the controller with --policy {name} (or --load-policy {name}) to "
                    f"offer it; choose from {choices}"
                )
            raise ValueError(f"unknown policy {name!r}; choose from {choices}")
        return self.policies[name](**check_options(name, options, load=False))

    # ---- reordering --------------------------------------------------------------------------

    @property
    def stale(self) -> bool:
        """The last reorder failed: the switches still hold the plan before it."""
        return self.last_reorder_error is not None

    def reorder(self) -> Plan:
        """Recompute the schedule and the rules that enforce it. A failure is counted and kept
        (:attr:`stale`, ``/api/stats``) and re-raised; the previous plan stays in force."""
        started, cpu_started = self.monotonic(), self.cpu_clock()
        preempted_before = self.preemptions()
        try:
            state = self.registry.cluster_state(self.link_bps, self.host_link_bps)
            schedule = self.policy.schedule(state)
            table = self.marking.update(state, schedule, self.registry.job_tcp_ports())
        except Exception as exc:
            # (the kept rules may be half updated: the next reorder makes them from scratch)
            self.marking = MarkingTable(self.meter_ids)
            self.reorder_failures += 1
            self.last_reorder_error = f"{type(exc).__name__}: {exc}"
            if self.observer is not None:
                self.observer.reorder_failed()
            raise
        self.last_reorder_error = None
        elapsed = self.monotonic() - started
        if self.observer is not None:
            self.observer.reordered(self.policy_name, elapsed)
        self.plan = Plan(state, schedule, table, time.time(), elapsed, started)
        self.stats.reorders += 1
        self.stats.compute_s.append(elapsed)
        self.stats.compute_cpu_s.append(self.cpu_clock() - cpu_started)
        self.stats.preemptions.append(self.preemptions() - preempted_before)
        return self.plan

    def switch_connected(self, dpid: int) -> None:
        """A switch (re)connected with none of our rules: everything will be installed."""
        self.switches[dpid] = SwitchTable.empty()

    def switch_gone(self, dpid: int) -> None:
        """A switch disconnected: forget what it held."""
        self.switches.pop(dpid, None)

    def ops_for(self, dpid: int) -> list[Op]:
        """Operations that bring switch ``dpid`` to the current plan (and record them)."""
        if self.plan is None or dpid not in self.switches:
            return []
        desired = self.table_for(dpid)
        ops = diff(self.switches[dpid], desired)
        # what the switch holds once they are done (the next diff then looks only at what the
        # marking table changes)
        self.switches[dpid] = desired
        self.stats.ops_sent += len(ops)
        return ops

    def table_for(self, dpid: int) -> SwitchTable:
        """The part of the plan switch ``dpid`` holds: the marking rules of the hosts it is the
        ingress edge of (and of hosts whose switch is not known), and their meters."""
        table = self.plan.table
        if self.edge_switch is None or len(self.switches) <= 1:
            return table  # one switch is every host's ingress edge
        rules = {
            key: rule
            for key, rule in table.rules.items()
            if self.edge_switch(rule_source_ip(rule)) in (None, dpid)
        }
        if len(rules) == len(table.rules):
            return table
        used = {rule.meter_id for rule in rules.values()}
        return SwitchTable(rules, {m: r for m, r in table.meters.items() if m in used})

    def sent(self, at: float | None = None) -> None:
        """The operations for every pending event have been sent: record the latencies."""
        now = self.monotonic() if at is None else at
        if self._pending_events and self.plan is not None:
            oldest = min(self._pending_events)
            if self.observer is not None:  # (one observation a reorder: its oldest event's)
                self.observer.served(self.policy_name, now - oldest)
            slowest = self.stats.slowest
            if slowest is None or now - oldest > slowest.latency_s:
                plan = self.plan
                self.stats.slowest = SlowEvent(
                    latency_s=now - oldest,
                    wait_s=max(0.0, plan.started_s - oldest),
                    compute_s=plan.compute_s,
                    send_s=max(0.0, now - plan.started_s - plan.compute_s),
                    cpu_s=self.cpu_clock() - self._oldest_event_cpu,
                )
        self.stats.latencies_s.extend(now - t for t in self._pending_events)
        self._pending_events.clear()

    def note_hold(self, kind: str, wall_s: float, cpu_s: float) -> None:
        """Record that a ``kind`` of work (one of :data:`HOLD_KINDS`) held the event loop for
        ``wall_s`` seconds, of which the thread ran ``cpu_s``."""
        self.stats.holds_s[kind].append((wall_s, cpu_s))
        if self.observer is not None:
            self.observer.held(kind, wall_s)

    def note_switch_error(self) -> None:
        """A switch sent an OpenFlow error message (a rejected FlowMod is a bug)."""
        self.stats.switch_errors += 1
        if self.observer is not None:
            self.observer.switch_error()

    def reset_stats(self) -> None:
        """Start the counters and latency samples afresh (e.g. before a measured phase)."""
        self.stats = Stats()
        if self.gc_pauses is not None:
            self.gc_pauses.reset()

    # ---- views for the REST API ----------------------------------------------------------------

    def order_json(self) -> dict:
        """The plan's order for ``/api/order`` (computed now if there is none; :class:`NoPlan` if
        that fails)."""
        plan = self.plan
        if plan is None:
            try:
                plan = self.reorder()
            except Exception:
                LOG.exception("reorder failed")
                error = self.last_reorder_error
                raise NoPlan(f"no plan: the reorder failed ({error})") from None
        levels = coflow_levels(plan.schedule)
        entries = []
        for rank, group in enumerate(plan.schedule.ranks):
            for coflow_id in group:
                coflow = plan.state.coflows[coflow_id]
                implicit = coflow_id >= IMPLICIT_COFLOW_BASE
                entries.append(
                    {
                        "coflow_id": None if implicit else coflow_id,
                        "implicit": implicit,
                        "job_id": coflow.job_id,
                        "stage_id": plan.state.stage_of(coflow),
                        "rank": rank,
                        "level": levels[coflow_id],
                        "dscp": dscp_of_level(levels[coflow_id]),
                        "remaining_bytes": coflow.remaining_bytes,
                        "rates_bps": {
                            str(f.flow_id): plan.schedule.flow_rates_bps[(coflow_id, f.flow_id)]
                            for f in coflow.flows
                            if (coflow_id, f.flow_id) in plan.schedule.flow_rates_bps
                        },
                    }
                )
        return {
            "policy": self.policy_name,
            "computed_at": plan.computed_at,
            "stale": self.stale,
            "order": entries,
        }

    def rules_json(self) -> dict:
        """The wanted rules and meters and each switch's, for ``/api/rules``."""
        desired = self.plan.table if self.plan else SwitchTable.empty()
        return {
            "desired": _table_json(desired),
            "switches": {str(dpid): _table_json(t) for dpid, t in self.switches.items()},
        }

    def stats_json(self) -> dict:
        """Counters, latency percentiles, the slowest event, failures and GC pauses, for
        ``/api/stats``."""
        lat = list(self.stats.latencies_s)
        comp = list(self.stats.compute_s)
        comp_cpu = list(self.stats.compute_cpu_s)
        preemptions = list(self.stats.preemptions)
        # (the reorders that had their core throughout: what the reorder itself costs)
        not_preempted = [s for s, n in zip(comp, preemptions, strict=True) if n == 0]
        ms = lambda v: None if v is None else round(v * 1e3, 3)  # noqa: E731
        return {
            "policy": self.policy_name,
            "switches": sorted(self.switches),
            "events": self.stats.events,
            "reorders": self.stats.reorders,
            "ops_sent": self.stats.ops_sent,
            "switch_errors": self.stats.switch_errors,
            "reorder_failures": self.reorder_failures,
            "last_reorder_error": self.last_reorder_error,
            "plan_stale": self.stale,
            "registered": {k: len(v) for k, v in self.registry.records.items()},
            "active_coflows": len(self.plan.state.coflows) if self.plan else 0,
            "event_to_flowmods_ms": {
                "count": len(lat),
                "p50": ms(percentile(lat, 50)),
                "p99": ms(percentile(lat, 99)),
                "max": ms(max(lat, default=None)),
                "slowest": self.stats.slowest.to_json() if self.stats.slowest else None,
            },
            "gc_pauses": self.gc_pauses.to_json() if self.gc_pauses else None,
            "event_loop_holds_ms": {
                kind: _hold_json(holds) for kind, holds in self.stats.holds_s.items()
            },
            "reorder_compute_ms": {
                "count": len(comp),
                "p50": ms(percentile(comp, 50)),
                "p99": ms(percentile(comp, 99)),
                "cpu_p50": ms(percentile(comp_cpu, 50)),
                "cpu_p99": ms(percentile(comp_cpu, 99)),
                "preempted": sum(n > 0 for n in preemptions),
                "preemptions": sum(preemptions),
                "p99_not_preempted": ms(percentile(not_preempted, 99)),
            },
        }


def _hold_json(holds: collections.abc.Iterable[tuple[float, float]]) -> dict:
    """Count, p50 / p99 / max of the wall times and of the CPU times (ms) of ``holds``."""
    wall, cpu = [w for w, _ in holds], [c for _, c in holds]
    ms = lambda v: None if v is None else round(v * 1e3, 3)  # noqa: E731
    out: dict = {"count": len(wall)}
    for prefix, values in (("", wall), ("cpu_", cpu)):
        out[prefix + "p50"] = ms(percentile(values, 50))
        out[prefix + "p99"] = ms(percentile(values, 99))
        out[prefix + "max"] = ms(max(values, default=None))
    return out


def _table_json(table: SwitchTable) -> dict:
    return {
        "flows": [r.to_json() for r in sorted(table.rules.values(), key=lambda r: r.key)],
        "meters": [{"meter_id": m, "rate_kbps": k} for m, k in sorted(table.meters.items())],
    }
