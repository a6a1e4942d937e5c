"""The controller's metrics for Prometheus (``GET /metrics``, text exposition format).

Each controller has a registry of its own (not ``prometheus_client``'s global one), so that
several engines in one process, as the tests make, keep their numbers apart. Two kinds of
metric:

- **Counted as it happens**, one observation each (O(1) per reorder, request or pause): the
  engine tells :class:`Telemetry` of every reorder, failure, served event and event-loop hold
  (:class:`controller.engine.EngineObserver`), its :class:`controller.engine.GcPauses` of every
  garbage collection, and :class:`controller.api.RestApi` of every request. These never go
  back, unlike ``/api/stats``, which ``DELETE /api/stats`` starts afresh.
- **Read when scraped** from what the engine already holds (a few ``len`` calls; the plan's
  level counts once per plan) and from the switches' last port and queue counters
  (:class:`controller.switch_counters.SwitchCounters`): nothing is read from the disk or the
  network while a scrape holds the event loop (``process_*`` come from ``/proc``, in memory).

:data:`METRIC_NAMES` lists every family; ``grafana/hpo-controller.json`` charts them.
"""

from __future__ import annotations

from collections.abc import Iterator

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from controller.engine import HOLD_KINDS, Engine, Plan
from controller.registry import KINDS
from controller.schedule import N_LEVELS, coflow_levels
from controller.switch_counters import SwitchCounters

# the text format every Prometheus 2.x reads, which generate_latest writes
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# from a fraction of a millisecond (a reorder of a few coflows) to the seconds of a stalled loop
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10)
GC_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
# methods a request is counted under by name; any other is "other" (labels stay bounded)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})

METRIC_NAMES = (
    "hpo_reorders",
    "hpo_reorder_failures",
    "hpo_reorder_latency_seconds",
    "hpo_reorder_compute_seconds",
    "hpo_event_loop_hold_seconds",
    "hpo_gc_pause_seconds",
    "hpo_switch_errors",
    "hpo_rest_requests",
    "hpo_policy_info",
    "hpo_coflows_active",
    "hpo_jobs_active",
    "hpo_stages_active",
    "hpo_level_coflows",
    "hpo_registered_records",
    "hpo_plan_stale",
    "hpo_switches_connected",
    "hpo_switch_rules",
    "hpo_switch_meters",
    "hpo_port_rx_bytes",
    "hpo_port_tx_bytes",
    "hpo_port_tx_dropped",
    "hpo_port_level_tx_bytes",
)


def switch_label(dpid: int) -> str:
    """A datapath id as the ``switch`` label: 16 hex digits, as OVS and the log print it."""
    return f"{dpid:016x}"


class Telemetry:
    """The metrics of one controller (engine, REST API, switches) in a registry of its own.

    Made with the engine, it becomes the engine's observer (and its garbage-collection
    timer's, if it keeps one): one :class:`Telemetry` per engine.

    Args:
        engine: the controller's engine.
        counters: the switches' port and queue counters (the Ryu glue polls them); ``None``:
            an empty set (no switch reports).
        process: also export the process' CPU time, memory and open files (``process_*``, from
            ``/proc``, in memory).
    """

    def __init__(
        self, engine: Engine, counters: SwitchCounters | None = None, process: bool = True
    ) -> None:
        # (a counter's _created series doubles what is sent and nothing here charts it)
        prometheus_client.disable_created_metrics()
        self.engine = engine
        self.counters = counters if counters is not None else SwitchCounters()
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self._reorders = Counter("hpo_reorders", "Reorders that made a plan", registry=registry)
        self._failures = Counter(
            "hpo_reorder_failures",
            "Reorders that raised (the previous plan stayed in force)",
            registry=registry,
        )
        self._latency = Histogram(
            "hpo_reorder_latency_seconds",
            "Per reorder, from the oldest registration or progress event it served to its "
            "operations sent to every switch",
            ["policy"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._compute = Histogram(
            "hpo_reorder_compute_seconds",
            "Time a reorder took to compute its plan and rules",
            ["policy"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._holds = Histogram(
            "hpo_event_loop_hold_seconds",
            "How long a REST request (rest) or a reorder slice with its sending (reorder) held "
            "the only event loop, OpenFlow included: the lag of everything queued behind it",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._gc = Histogram(
            "hpo_gc_pause_seconds",
            "Garbage collections of the controller process by generation (each stops the "
            "event loop)",
            ["generation"],
            buckets=GC_BUCKETS,
            registry=registry,
        )
        self._switch_errors = Counter(
            "hpo_switch_errors",
            "OpenFlow error messages received from switches",
            registry=registry,
        )
        self._requests = Counter(
            "hpo_rest_requests",
            "REST requests by route template, method and status code",
            ["endpoint", "method", "status"],
            registry=registry,
        )
        # (children made once: a reorder's observations are then a dict look-up each)
        self._latency_of: dict[str, Histogram] = {}
        self._compute_of: dict[str, Histogram] = {}
        self._hold_of = {kind: self._holds.labels(kind) for kind in HOLD_KINDS}
        self._gc_of = [self._gc.labels(str(generation)) for generation in range(3)]
        registry.register(_StateCollector(engine, self.counters))
        if process:
            ProcessCollector(registry=registry)
        engine.observer = self
        if engine.gc_pauses is not None:
            engine.gc_pauses.observer = self.gc_paused

    # ---- what the engine, its GC timer and the REST API report --------------------------------

    def reordered(self, policy: str, compute_s: float) -> None:
        """A reorder under ``policy`` computed its plan in ``compute_s`` seconds."""
        self._reorders.inc()
        child = self._compute_of.get(policy)
        if child is None:
            child = self._compute_of[policy] = self._compute.labels(policy)
        child.observe(compute_s)

    def reorder_failed(self) -> None:
        """A reorder raised."""
        self._failures.inc()

    def served(self, policy: str, latency_s: float) -> None:
        """A reorder's operations are out, ``latency_s`` after the oldest event it served."""
        child = self._latency_of.get(policy)
        if child is None:
            child = self._latency_of[policy] = self._latency.labels(policy)
        child.observe(latency_s)

    def held(self, kind: str, wall_s: float) -> None:
        """Work of ``kind`` held the event loop ``wall_s`` seconds."""
        child = self._hold_of.get(kind)
        if child is None:
            child = self._hold_of[kind] = self._holds.labels(kind)
        child.observe(wall_s)

    def switch_error(self) -> None:
        """A switch sent an OpenFlow error message."""
        self._switch_errors.inc()

    def gc_paused(self, generation: int, seconds: float) -> None:
        """A garbage collection of ``generation`` stopped the process ``seconds`` seconds."""
        self._gc_of[generation].observe(seconds)

    def request(self, endpoint: str, method: str, status: int) -> None:
        """A REST request to the route ``endpoint`` (its template, e.g. ``/api/jobs/{id}``, or
        ``other`` for an unknown path) was answered with ``status``."""
        method = method if method in METHODS else "other"
        self._requests.labels(endpoint, method, str(status)).inc()

    # ---- the exposition ----------------------------------------------------------------------

    def render(self) -> bytes:
        """Every metric in Prometheus' text exposition format (:data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)


class _StateCollector:
    """The metrics read when scraped: the plan's occupancy, the registry, the switches' rules
    and meters as the engine installed them, and the switches' port and queue counters."""

    def __init__(self, engine: Engine, counters: SwitchCounters) -> None:
        self.engine = engine
        self.counters = counters
        self._plan: Plan | None = None
        self._occupancy: tuple[int, int, int, list[int]] = (0, 0, 0, [0] * N_LEVELS)

    def describe(self) -> list[Metric]:
        """The families (without reading anything): the registry checks names with them."""
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        """The families with their values now."""
        engine, counters = self.engine, self.counters
        family = {f.name: f for f in self._families()}
        family["hpo_policy_info"].add_metric([engine.policy_name], 1)
        n_coflows, n_jobs, n_stages, per_level = self._plan_occupancy()
        family["hpo_coflows_active"].add_metric([], n_coflows)
        family["hpo_jobs_active"].add_metric([], n_jobs)
        family["hpo_stages_active"].add_metric([], n_stages)
        for level, count in enumerate(per_level):
            family["hpo_level_coflows"].add_metric([str(level)], count)
        for kind in KINDS:
            family["hpo_registered_records"].add_metric([kind], len(engine.registry.records[kind]))
        family["hpo_plan_stale"].add_metric([], int(engine.stale))
        family["hpo_switches_connected"].add_metric([], len(engine.switches))
        for dpid, table in sorted(engine.switches.items()):
            family["hpo_switch_rules"].add_metric([switch_label(dpid)], table.rule_count)
            family["hpo_switch_meters"].add_metric([switch_label(dpid)], len(table.meters))
        rx, tx = family["hpo_port_rx_bytes"], family["hpo_port_tx_bytes"]
        dropped, level_tx = family["hpo_port_tx_dropped"], family["hpo_port_level_tx_bytes"]
        for dpid, ports in sorted(counters.ports.items()):
            for port_no, sample in sorted(ports.items()):
                labels = [switch_label(dpid), str(port_no)]
                rx.add_metric(labels, sample.rx_bytes)
                tx.add_metric(labels, sample.tx_bytes)
                dropped.add_metric(labels, sample.tx_dropped)
        for (dpid, port_no, level), sent in sorted(counters.level_tx_bytes().items()):
            level_tx.add_metric([switch_label(dpid), str(port_no), str(level)], sent)
        yield from family.values()

    def _plan_occupancy(self) -> tuple[int, int, int, list[int]]:
        """Active coflows, the jobs and stages they belong to, and coflows per level, in the
        plan in force (counted once per plan: scrapes between two reorders reuse it)."""
        plan = self.engine.plan
        if plan is None:
            return 0, 0, 0, [0] * N_LEVELS
        if plan is not self._plan:
            state = plan.state
            jobs, stages = set(), set()
            for coflow in state.coflows.values():
                if coflow.job_id is not None:
                    jobs.add(coflow.job_id)
                stage = state.stage_of(coflow)
                if stage is not None:
                    stages.add(stage)
            per_level = [0] * N_LEVELS
            for level in coflow_levels(plan.schedule).values():
                per_level[level] += 1
            self._plan, self._occupancy = (
                plan,
                (len(state.coflows), len(jobs), len(stages), per_level),
            )
        return self._occupancy

    @staticmethod
    def _families() -> tuple[Metric, ...]:
        switch, port = ["switch"], ["switch", "port"]
        return (
            GaugeMetricFamily("hpo_policy_info", "The policy in force (1)", labels=["policy"]),
            GaugeMetricFamily("hpo_coflows_active", "Coflows with bytes left in the plan"),
            GaugeMetricFamily("hpo_jobs_active", "Jobs with a coflow in the plan"),
            GaugeMetricFamily("hpo_stages_active", "Stages with a coflow in the plan"),
            GaugeMetricFamily(
                "hpo_level_coflows", "Coflows at each priority level in the plan", labels=["level"]
            ),
            GaugeMetricFamily(
                "hpo_registered_records", "Registered records by collection", labels=["kind"]
            ),
            GaugeMetricFamily(
                "hpo_plan_stale",
                "1 when the last reorder failed (the switches hold the plan before it)",
            ),
            GaugeMetricFamily("hpo_switches_connected", "Switches connected"),
            GaugeMetricFamily(
                "hpo_switch_rules",
                "Marking rules the controller installed per switch",
                labels=switch,
            ),
            GaugeMetricFamily(
                "hpo_switch_meters", "Meters the controller installed per switch", labels=switch
            ),
            CounterMetricFamily(
                "hpo_port_rx_bytes",
                "Bytes received by a switch port (its port statistics)",
                labels=port,
            ),
            CounterMetricFamily(
                "hpo_port_tx_bytes",
                "Bytes sent by a switch port (its port statistics)",
                labels=port,
            ),
            CounterMetricFamily(
                "hpo_port_tx_dropped", "Packets a switch port dropped on sending", labels=port
            ),
            CounterMetricFamily(
                "hpo_port_level_tx_bytes",
                "Bytes a switch port sent from a priority level's HTB class (its queue "
                "statistics: level l is queue 0x0f + l)",
                labels=[*port, "level"],
            ),
        )
