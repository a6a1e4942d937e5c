"""The discrete-event, flow-level simulator: one object owns the clock, the event heap and the
active flows; the scheduling policy comes from :mod:`controller.policies`, unchanged.

Between two events every flow keeps a constant rate; the next event is the earliest of a flow
completion, a scheduled event (a coflow release, a compute phase ending, a periodic reorder).
Flows live in numpy arrays (links, remaining bits, coflow) so that an allocation costs a few
vectorised passes. The policy sees each active coflow in bulk (a
:class:`~controller.model.CoflowSummary`: its remaining bytes per host port) and is asked for a
new schedule whenever the set of coflows changes, when the workload says so (stage events,
job progress) and every ``policy.reorder_period_s`` if it has one.

Allocation modes:
- ``levels``: the switch's 8 priority levels (order -> levels as the controller maps them),
  strict priority between levels, max-min fair within a level, MADD caps as meters;
- ``ideal``: one level per rank: flows take rate greedily in the policy's order.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from controller.model import ClusterState, Coflow, CoflowSummary, Job, Stage
from controller.policies import Policy
from controller.schedule import N_LEVELS, coflow_levels
from simulator.allocation import advance, compact, greedy_in_order, priority_max_min

# Flows whose completion time is within this fraction of the step finish with it.
_SIMULTANEOUS = 1e-9


@dataclass(frozen=True)
class Fabric:
    """A non-blocking big switch, or a two-tier leaf-spine fabric.

    Args:
        n_hosts: number of hosts (ids 0..n_hosts-1).
        host_bps: capacity of every host's egress and ingress link.
        hosts_per_leaf: ``None`` for a big switch; else hosts are grouped into leaves of this
            many, and traffic between leaves crosses the source leaf's uplink and the
            destination leaf's downlink.
        oversubscription: leaf uplink capacity = hosts_per_leaf * host_bps / oversubscription.
    """

    n_hosts: int
    host_bps: float = 1e9
    hosts_per_leaf: int | None = None
    oversubscription: float = 1.0

    def __post_init__(self) -> None:
        if self.n_hosts < 1:
            raise ValueError("n_hosts must be >= 1")
        if self.host_bps <= 0:
            raise ValueError("host_bps must be > 0")
        if self.hosts_per_leaf is not None and self.hosts_per_leaf < 1:
            raise ValueError("hosts_per_leaf must be >= 1")
        if self.oversubscription <= 0:
            raise ValueError("oversubscription must be > 0")

    @property
    def n_leaves(self) -> int:
        if self.hosts_per_leaf is None:
            return 0
        return math.ceil(self.n_hosts / self.hosts_per_leaf)

    @property
    def pad_link(self) -> int:
        """Index of the infinite padding link (unused columns of intra-leaf flows)."""
        return 2 * self.n_hosts + 2 * self.n_leaves

    def capacity(self) -> np.ndarray:
        """Capacity of every link: host egress, host ingress, leaf up, leaf down, padding."""
        hosts = np.full(2 * self.n_hosts, float(self.host_bps))
        uplink = (self.hosts_per_leaf or 0) * self.host_bps / self.oversubscription
        leaves = np.full(2 * self.n_leaves, uplink)
        return np.concatenate([hosts, leaves, [np.inf]])

    def links(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """``(n, k)`` links used by flows from hosts ``src`` to hosts ``dst``."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if len(src) and (
            min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= self.n_hosts
        ):
            raise ValueError(f"host id outside 0..{self.n_hosts - 1}")
        columns = [src, self.n_hosts + dst]
        if self.hosts_per_leaf is not None:
            src_leaf, dst_leaf = src // self.hosts_per_leaf, dst // self.hosts_per_leaf
            cross = src_leaf != dst_leaf
            base = 2 * self.n_hosts
            columns.append(np.where(cross, base + src_leaf, self.pad_link))
            columns.append(np.where(cross, base + self.n_leaves + dst_leaf, self.pad_link))
        return np.stack(columns, axis=1)


@dataclass
class CoflowSpec:
    """A coflow to release: parallel arrays of flow sources, destinations and sizes."""

    coflow_id: int
    src: np.ndarray
    dst: np.ndarray
    size_bytes: np.ndarray
    job_id: int | None = None
    stage_id: int | None = None
    weight: float = 1.0


@dataclass
class CoflowRecord:
    """What the simulator knows of a released coflow."""

    coflow_id: int
    arrival_s: float
    size_bytes: float
    n_flows: int
    job_id: int | None
    stage_id: int | None
    weight: float
    finish_s: float | None = None
    flows_left: int = 0

    @property
    def cct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s


@dataclass
class _Flows:
    """The active flows, as parallel arrays."""

    links: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))
    remaining_bits: np.ndarray = field(default_factory=lambda: np.zeros(0))
    coflow: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.remaining_bits)


class Simulator:
    """Run coflows through a fabric under a policy.

    Args:
        fabric: the network.
        policy: a policy from :data:`controller.policies.POLICIES` (one instance per run).
        mode: ``"levels"`` (8 priority levels, max-min within a level) or ``"ideal"``.
        n_levels: priority levels of the switch in ``levels`` mode.
        jobs_and_stages: callable giving the current jobs and stages (HPO workloads).
    """

    def __init__(
        self,
        fabric: Fabric,
        policy: Policy,
        mode: str = "levels",
        n_levels: int = N_LEVELS,
        jobs_and_stages: Callable[[], tuple[dict[int, Job], dict[int, Stage]]] | None = None,
    ) -> None:
        if mode not in ("levels", "ideal"):
            raise ValueError(f"mode must be 'levels' or 'ideal', got {mode!r}")
        self.fabric = fabric
        self.policy = policy
        self.mode = mode
        self.n_levels = n_levels
        self.jobs_and_stages = jobs_and_stages or (lambda: ({}, {}))
        self.now_s = 0.0
        self._heap: list = []
        self._seq = itertools.count()
        self._capacity = fabric.capacity()
        self._flows = _Flows(
            links=np.zeros((0, fabric.links(np.zeros(0), np.zeros(0)).shape[1]), dtype=np.int64)
        )
        self._slots: list[CoflowRecord] = []  # slot index (used in _flows.coflow) -> record
        self.coflows: dict[int, CoflowRecord] = {}
        self._listeners: list[Callable[[CoflowRecord], None]] = []
        self._dirty = True
        # per coflow slot: priority level (levels mode) or position in the order (ideal mode)
        self._slot_rank = np.zeros(0, dtype=np.int64)
        self._caps = np.zeros(0)  # per active flow; inf when uncapped
        self.bytes_offered = 0.0
        self.reorders = 0
        self.steps = 0

    # ---- events ----------------------------------------------------------------------------

    def at(self, time_s: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` at ``time_s`` (not in the past)."""
        if time_s < self.now_s - 1e-12:
            raise ValueError(f"cannot schedule at {time_s} s, the clock is at {self.now_s} s")
        heapq.heappush(self._heap, (max(time_s, self.now_s), next(self._seq), callback))

    def on_coflow_done(self, listener: Callable[[CoflowRecord], None]) -> None:
        """Call ``listener(record)`` whenever a coflow finishes."""
        self._listeners.append(listener)

    def request_reorder(self) -> None:
        """Something the policy looks at changed (a stage started, a job progressed)."""
        self._dirty = True

    def release(self, spec: CoflowSpec) -> CoflowRecord:
        """Release a coflow now."""
        if spec.coflow_id in self.coflows:
            raise ValueError(f"coflow {spec.coflow_id} released twice")
        sizes = np.asarray(spec.size_bytes, dtype=float)
        if sizes.size and sizes.min() < 0:
            raise ValueError(f"coflow {spec.coflow_id}: negative flow size")
        keep = sizes > 0
        record = CoflowRecord(
            spec.coflow_id,
            self.now_s,
            float(sizes.sum()),
            int(keep.sum()),
            spec.job_id,
            spec.stage_id,
            spec.weight,
            flows_left=int(keep.sum()),
        )
        self.coflows[spec.coflow_id] = record
        self.bytes_offered += record.size_bytes
        if record.flows_left == 0:
            record.finish_s = self.now_s
            self._finished(record)
            return record
        slot = len(self._slots)
        self._slots.append(record)
        links = self.fabric.links(np.asarray(spec.src)[keep], np.asarray(spec.dst)[keep])
        flows = self._flows
        flows.links = np.concatenate([flows.links, links])
        flows.remaining_bits = np.concatenate([flows.remaining_bits, 8.0 * sizes[keep]])
        flows.coflow = np.concatenate([flows.coflow, np.full(record.flows_left, slot)])
        self._caps = np.concatenate([self._caps, np.full(record.flows_left, np.inf)])
        self._slot_rank = np.append(self._slot_rank, 0)
        self._dirty = True
        return record

    # ---- the loop ----------------------------------------------------------------------------

    def run(self, until_s: float = math.inf) -> None:
        """Process events until none is left (or the clock reaches ``until_s``)."""
        period = self.policy.reorder_period_s
        next_tick = self.now_s + period if period else math.inf
        while True:
            self._fire_due_events()
            if self._dirty:
                self._reorder()
            flows = self._flows
            next_event = self._heap[0][0] if self._heap else math.inf
            if not len(flows):
                if next_event == math.inf or next_event > until_s:
                    break
                self.now_s = next_event
                continue
            rates = self._allocate()
            limit = min(next_event, next_tick, until_s) - self.now_s
            step, done, n_done = advance(flows.remaining_bits, rates, limit, _SIMULTANEOUS)
            if not math.isfinite(step):
                raise RuntimeError(
                    f"stuck at {self.now_s} s: {len(flows)} flows can never finish "
                    "(a link or rate cap is zero)"
                )
            self.steps += 1
            self.now_s += step
            if n_done:
                self._complete(done, n_done)
            if self.now_s >= next_tick:
                next_tick = self.now_s + period
                self._dirty = True
            if self.now_s >= until_s:
                break

    def _fire_due_events(self) -> None:
        while self._heap and self._heap[0][0] <= self.now_s * (1 + 1e-15) + 1e-12:
            _, _, callback = heapq.heappop(self._heap)
            callback()

    def _complete(self, done: np.ndarray, n_done: int) -> None:
        flows = self._flows
        flows.links, flows.remaining_bits, flows.coflow, self._caps, slots = compact(
            done, n_done, flows.links, flows.remaining_bits, flows.coflow, self._caps
        )
        finished_slots = np.bincount(slots, minlength=len(self._slots))
        for slot in np.flatnonzero(finished_slots):
            record = self._slots[slot]
            record.flows_left -= int(finished_slots[slot])
            if record.flows_left == 0:
                record.finish_s = self.now_s
                self._finished(record)

    def _finished(self, record: CoflowRecord) -> None:
        self._dirty = True
        for listener in self._listeners:
            listener(record)

    # ---- policy and allocation -----------------------------------------------------------------

    def cluster_state(self) -> ClusterState:
        """The policy's view: every active coflow in bulk, plus the workload's jobs and stages."""
        flows = self._flows
        n = self.fabric.n_hosts
        slots, row = np.unique(flows.coflow, return_inverse=True)
        remaining_bytes = flows.remaining_bits / 8.0
        # bytes left per (coflow, host link): egress links are 0..n-1, ingress n..2n-1
        cells = np.concatenate(
            [row * (2 * n) + flows.links[:, 0], row * (2 * n) + flows.links[:, 1]]
        )
        load = np.bincount(
            cells,
            weights=np.concatenate([remaining_bytes, remaining_bytes]),
            minlength=len(slots) * 2 * n,
        ).reshape(len(slots), 2 * n)
        totals = np.bincount(row, weights=remaining_bytes, minlength=len(slots))
        coflows = {}
        for i, slot in enumerate(slots.tolist()):
            record = self._slots[slot]
            links = np.flatnonzero(load[i])
            ports = {(int(k % n), int(k // n)): float(load[i, k]) for k in links}
            summary = CoflowSummary(record.size_bytes, float(totals[i]), ports)
            coflows[record.coflow_id] = Coflow(
                record.coflow_id,
                [],
                record.arrival_s,
                record.job_id,
                record.stage_id,
                record.weight,
                summary,
            )
        jobs, stages = self.jobs_and_stages()
        return ClusterState({}, coflows, jobs, stages, self.now_s, self.fabric.host_bps)

    def _reorder(self) -> None:
        """Ask the policy for a schedule; keep it per coflow slot (flows index it)."""
        self._dirty = False
        flows = self._flows
        if not len(flows):
            return
        self.reorders += 1
        schedule = self.policy.schedule(self.cluster_state())
        slot_of = {self._slots[s].coflow_id: s for s in np.unique(flows.coflow).tolist()}
        if self.mode == "levels":
            for coflow_id, level in coflow_levels(schedule, self.n_levels).items():
                self._slot_rank[slot_of[coflow_id]] = level
        else:
            for position, coflow_id in enumerate(schedule.order):
                self._slot_rank[slot_of[coflow_id]] = position
        gamma = np.full(len(self._slots), np.inf)
        for coflow_id, g in schedule.coflow_gamma_s.items():
            gamma[slot_of[coflow_id]] = g
        # MADD: the flows of a coflow are capped so that they all end together at its gamma
        flow_gamma = gamma[flows.coflow]
        self._caps = np.where(np.isfinite(flow_gamma), flows.remaining_bits / flow_gamma, np.inf)

    def _allocate(self) -> np.ndarray:
        flows = self._flows
        caps = self._caps if np.isfinite(self._caps).any() else None
        rank = self._slot_rank[flows.coflow]
        if self.mode == "levels":
            return priority_max_min(flows.links, rank, self._capacity, caps)
        # stable: inside a coflow, flows keep their release order
        order = np.argsort(rank, kind="stable")
        return greedy_in_order(flows.links, order, self._capacity, caps)

    # ---- results -----------------------------------------------------------------------------

    @property
    def bytes_delivered(self) -> float:
        return self.bytes_offered - float(self._flows.remaining_bits.sum()) / 8.0
