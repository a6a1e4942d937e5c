"""The discrete-event, flow-level simulator: one object owns the clock, the event heap and the
active flows; the scheduling policy comes from :mod:`controller.policies`, unchanged.

Between two events every flow keeps a constant rate; the next event is the earliest of a flow
completion, a scheduled event (a coflow release, a compute phase ending, a periodic reorder).

Exact aggregation keeps a step cheap when hundreds of thousands of flows are active: flows of the
same priority level between the same two hosts, without a rate cap, get the same rate under
max-min fairness, so they form one *group* (weight = its number of flows). A group counts the bits
it has served per flow; each flow joins with a threshold (that count plus its size) and finishes
when the count reaches it, and a completion pops the head of the group's sorted flow list. A
*bucket* is a set of coflows sharing a level (a level may keep several); a reorder relabels
buckets and moves only the coflows that changed bucket. Capped coflows (MADD) and the ideal mode
use one group per flow. Everything between two policy decisions runs compiled
(:mod:`simulator.core`, which also says how a step avoids touching every group); this module
keeps the events, the buckets and the policy's view.

The policy sees each active coflow in bulk (a
:class:`~controller.model.CoflowSummary`: its remaining bytes per host port) and is asked for a
new schedule whenever the set of coflows changes, when the workload says so (stage events,
job progress) and every ``policy.reorder_period_s`` if it has one.

Allocation modes:
- ``levels``: the switch's 8 priority levels (order -> levels as the controller maps them),
  strict priority between levels, max-min fair within a level, MADD caps as meters;
- ``ideal``: one level per rank: flows take rate greedily in the policy's order.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.cluster import ONE_SWITCH, Cluster
from controller.kernel_cache import warm_once
from controller.model import (
    ClusterState,
    Coflow,
    CoflowKeys,
    Job,
    JobTable,
    SparsePortBytes,
    Stage,
)
from controller.policies import Policy, make_policy
from controller.schedule import N_LEVELS, Schedule
from controller.timeline import CoflowLevel, Timeline
from simulator.buckets import assign_buckets
from simulator.core import (
    MAX_LEVEL_ROWS,
    STUCK,
    USED_PREFIX,
    LevelPlan,
    SlotFlows,
    StepBuffers,
    StepSettings,
    Tables,
    ideal_order,
    move_coflows,
    order_by_head,
    run_steps,
    set_coflow_caps,
    set_group_levels,
    slot_bits_left,
    slot_loads,
    slot_port_bytes,
)
from simulator.greedy import GreedyPass, greedy_pass

_COFLOW_ID = operator.attrgetter("coflow_id")
# Flows whose completion time is within this fraction of the step finish with it.
_SIMULTANEOUS = 1e-9
# Beyond this many hosts the per-level pair matrices (8 x 2 x n^2 floats) cost too much memory.
_MAX_PAIR_HOSTS = 512


@dataclass(frozen=True)
class Fabric:
    """A non-blocking big switch, or a two-tier leaf-spine fabric.

    Args:
        n_hosts: number of hosts (ids 0..n_hosts-1).
        link_bps: capacity of every host's egress and ingress link.
        hosts_per_leaf: ``None`` for a big switch; else hosts are grouped into leaves of this
            many, and traffic between leaves crosses the source leaf's uplink and the
            destination leaf's downlink.
        oversubscription: leaf uplink capacity = hosts_per_leaf * link_bps / oversubscription.
    """

    n_hosts: int
    link_bps: float = 1e9
    hosts_per_leaf: int | None = None
    oversubscription: float = 1.0

    def __post_init__(self) -> None:
        if self.n_hosts < 1:
            raise ValueError("n_hosts must be >= 1")
        if not 0 < self.link_bps < math.inf:  # (NaN fails too)
            raise ValueError("link_bps must be finite and > 0")
        if self.hosts_per_leaf is not None and self.hosts_per_leaf < 1:
            raise ValueError("hosts_per_leaf must be >= 1")
        if not 0 < self.oversubscription < math.inf:
            raise ValueError("oversubscription must be finite and > 0")

    @classmethod
    def of(cls, cluster: Cluster) -> Fabric:
        """The model of ``cluster``'s network: a big switch, or its leaves with their uplinks
        pooled (all spines together carry ``hosts_per_leaf * link_bps / oversubscription``:
        ECMP taken as perfectly balanced)."""
        if cluster.topology == ONE_SWITCH:
            return cls(cluster.hosts, cluster.link_bps)
        return cls(cluster.hosts, cluster.link_bps, cluster.hosts_per_leaf,
                   cluster.oversubscription)  # fmt: skip

    @property
    def n_leaves(self) -> int:
        """Number of leaf switches (0 for a big switch)."""
        if self.hosts_per_leaf is None:
            return 0
        return math.ceil(self.n_hosts / self.hosts_per_leaf)

    @property
    def pad_link(self) -> int:
        """Index of the infinite padding link (unused columns of intra-leaf flows)."""
        return 2 * self.n_hosts + 2 * self.n_leaves

    def capacity(self) -> np.ndarray:
        """Capacity of every link: host egress, host ingress, leaf up, leaf down, padding."""
        hosts = np.full(2 * self.n_hosts, float(self.link_bps))
        uplink = (self.hosts_per_leaf or 0) * self.link_bps / self.oversubscription
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

    @property
    def cct_s(self) -> float | None:
        """Coflow completion time from arrival (``None`` while unfinished)."""
        return None if self.finish_s is None else self.finish_s - self.arrival_s


class Simulator:
    """Run coflows through a fabric under a policy.

    Args:
        fabric: the network.
        policy: a policy from :data:`controller.policies.POLICIES` (one instance per run).
        mode: ``"levels"`` (8 priority levels, max-min within a level) or ``"ideal"``.
        n_levels: priority levels of the switch in ``levels`` mode.
        jobs_and_stages: callable giving the current jobs and stages (HPO workloads).
        timeline: record every coflow's level at each reorder and every host port's delivered
            bytes at each event into it (:mod:`controller.timeline`; ports as
            :func:`controller.timeline.port_names` of the fabric's hosts). Recording only reads
            the state: the run's results are the same with or without it.
        pair_levels: keep a big switch's levels as matrices of flows per host pair (the fast
            path, :mod:`simulator.allocation`); ``False`` gives every level the general
            max-min: the same allocation with its sums in another order (what
            ``benchmarks/float_noise.py`` compares).
    """

    def __init__(
        self,
        fabric: Fabric,
        policy: Policy,
        mode: str = "levels",
        n_levels: int = N_LEVELS,
        jobs_and_stages: Callable[[], tuple[dict[int, Job], dict[int, Stage]]] | None = None,
        timeline: Timeline | None = None,
        pair_levels: bool = True,
    ) -> None:
        if mode not in ("levels", "ideal"):
            raise ValueError(f"mode must be 'levels' or 'ideal', got {mode!r}")
        self.fabric = fabric
        self.policy = policy
        self.mode = mode
        self.n_levels = n_levels
        self.jobs_and_stages = jobs_and_stages or (lambda: ({}, {}))
        # the states' stages_version (see ClusterState): the workload driver's, if it keeps one
        self.stages_version: Callable[[], object | None] = lambda: None
        # the states' job_table from the workload driver's arrays, if it keeps them
        self.job_table: Callable[[], JobTable | None] | None = None
        self.now_s = 0.0
        self._heap: list = []
        self._seq = itertools.count()
        self._capacity = fabric.capacity()
        n = fabric.n_hosts
        k = fabric.links(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)).shape[1]
        self._tables = Tables(k, n * n)
        # a big switch's uncapped levels keep flows per host pair (see simulator.allocation)
        big_switch = k == 2 and mode == "levels" and pair_levels
        self._pair_hosts = n if big_switch and n <= _MAX_PAIR_HOSTS else 0
        # shared buckets a level may keep (one where the general max-min takes every level)
        self._level_rows = MAX_LEVEL_ROWS if self._pair_hosts else 1
        if self._pair_hosts:
            self._tables.enable_pairs(n_levels, n)
        # groups in use sorted by level (set at reorders; groups only appear at reorders)
        self._plan = LevelPlan(
            np.zeros(0, dtype=np.int64), np.zeros(2, dtype=np.int64), np.ones(1, dtype=np.bool_)
        )
        self._positive = np.zeros(0, dtype=np.int64)  # run_steps' scratch: groups with a rate
        self._greedy = greedy_pass(0, len(self._capacity), k, 0)  # and the ideal mode's pass
        # what the sorted groups were built from: (levels, capped slots), and whether a
        # bucket's level changed since (see _reorder)
        self._layout: tuple | None = None
        self._relevelled = True
        self._fixed_rates = True  # serve capped levels whose caps fit lazily (simulator.core)
        # buckets: sets of coflow slots sharing a level
        # (level and row are arrays with spare room at the end, so that a reorder hands them to
        # the compiled code without converting a list that grows with every bucket ever made)
        self._n_buckets = 0
        self._b_level = np.zeros(16, dtype=np.int64)
        self._b_single = np.zeros(16, dtype=np.bool_)  # one group per flow (capped, ideal mode)
        self._b_row = np.full(16, -1, dtype=np.int64)  # pair -> group row if shared, else -1
        # the bucket assignment's scratch (simulator.buckets): -1 everywhere between reorders
        self._entry_of = np.full(16 * n_levels, -1, dtype=np.int64)  # (bucket, level) -> key
        self._kept_level = np.full(16, -1, dtype=np.int64)
        self._b_count = np.zeros(16, dtype=np.int64)  # coflows in each bucket
        self._live_buckets: set[int] = set()
        self._emptied: set[int] = set()  # buckets whose last coflow left since the last reorder
        self._free_rows: list[int] = []
        # coflows, by slot
        self._slots: list[CoflowRecord] = []
        self._slot_flows: list[tuple[int, int]] = []  # flow id range
        # the same ranges as an array (rows beyond the slots are spare), to gather them at C speed
        self._slot_ranges = np.zeros((16, 2), dtype=np.int64)
        self._slot_bucket = np.full(16, -1, dtype=np.int64)
        # each slot's level and capping at the last reorder (-1: not placed yet), so that a
        # reorder that changes neither for any coflow keeps every bucket (see _reorder)
        self._slot_level = np.full(16, -1, dtype=np.int64)
        self._slot_capped = np.zeros(16, dtype=np.bool_)
        self._slot_flag = np.zeros(16, dtype=np.bool_)  # scratch, False between reorders
        self._slot_size = np.zeros(16)  # each slot's coflow size in bytes (its record's)
        self._active_slots: set[int] = set()
        self.coflows: dict[int, CoflowRecord] = {}
        # the policy's view of the active coflows, kept from release to finish (cluster_state)
        self._loads = _CurrentLoads()
        self._views = _CoflowViews()
        self._slot_of: dict[int, int] = {}  # active coflow id -> slot
        self._listeners: list[Callable[[CoflowRecord], None]] = []
        self._dirty = True  # ask the policy again
        self.bytes_offered = 0.0
        self.reorders = 0
        self.steps = 0
        # wall time in the policy's reorders and in the compiled step loop (the cost model)
        self.reorder_s = 0.0
        self.step_s = 0.0
        self.timeline = timeline
        if timeline is not None and len(timeline.ports) != 2 * n:
            raise ValueError(f"the timeline has {len(timeline.ports)} ports, the fabric {2 * n}")
        self._released_port_bits = np.zeros(2 * n)  # per host port, for the timeline
        self._sampled_steps = -1

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
        """Release a coflow now (it is placed at its level by the next reorder)."""
        if spec.coflow_id in self.coflows:
            raise ValueError(f"coflow {spec.coflow_id} released twice")
        sizes = np.asarray(spec.size_bytes, dtype=float)
        if sizes.size and sizes.min() < 0:
            raise ValueError(f"coflow {spec.coflow_id}: negative flow size")
        keep = sizes > 0
        src = np.asarray(spec.src, dtype=np.int64)[keep]
        dst = np.asarray(spec.dst, dtype=np.int64)[keep]
        links = self.fabric.links(src, dst)
        n = int(keep.sum())
        record = CoflowRecord(
            spec.coflow_id,
            self.now_s,
            float(sizes.sum()),
            n,
            spec.job_id,
            spec.stage_id,
            spec.weight,
        )
        self.coflows[spec.coflow_id] = record
        self.bytes_offered += record.size_bytes
        if n == 0:
            record.finish_s = self.now_s
            self._finished(record)
            return record
        slot = len(self._slots)
        pair = src * self.fabric.n_hosts + dst
        if self.timeline is not None:
            bits = 8.0 * sizes[keep]
            np.add.at(self._released_port_bits, src, bits)
            np.add.at(self._released_port_bits, self.fabric.n_hosts + dst, bits)
        self._slot_flows.append(self._tables.add_flows(links, pair, 8.0 * sizes[keep], slot))
        if slot == len(self._slot_ranges):
            self._slot_ranges = _grown(self._slot_ranges, slot, 0)
            self._slot_bucket = _grown(self._slot_bucket, slot, -1)
            self._slot_level = _grown(self._slot_level, slot, -1)
            self._slot_capped = _grown(self._slot_capped, slot, False)
            self._slot_flag = _grown(self._slot_flag, slot, False)
            self._slot_size = _grown(self._slot_size, slot, 0.0)
        self._slot_ranges[slot] = self._slot_flows[slot]
        self._slot_size[slot] = record.size_bytes
        self._slots.append(record)
        self._active_slots.add(slot)
        self._slot_of[record.coflow_id] = slot
        self._views.add(record, self._loads)
        self._dirty = True
        return record

    # ---- the loop ----------------------------------------------------------------------------

    def run(self, until_s: float = math.inf) -> None:
        """Process events until none is left (or the clock reaches ``until_s``)."""
        ticks = _Ticks(self.now_s, self.policy.reorder_period_s)
        tables = self._tables
        while True:
            self._fire_due_events()
            if self._dirty:
                reordering = time.perf_counter()
                self._reorder()
                self.reorder_s += time.perf_counter() - reordering
            next_event = self._heap[0][0] if self._heap else math.inf
            if not self._active_slots:
                if next_event == math.inf or next_event > until_s:
                    break
                self._advance(next_event)
                continue
            limit = min(next_event, ticks.after(self.now_s), until_s)
            if self.timeline is not None:
                self._sample_ports()
            finished = np.empty(len(self._active_slots), dtype=np.int64)
            settings = StepSettings(
                self.mode == "ideal",
                self._capacity,
                self._pair_hosts,
                _SIMULTANEOUS,
                self._fixed_rates,
            )
            stepping = time.perf_counter()
            why, now_s, steps, n_finished = run_steps(
                tables.flow_table(),
                tables.group_table(),
                tables.pair_table(),
                self._plan,
                settings,
                StepBuffers(self._positive, finished, self._greedy_room(tables)),
                self.now_s,
                limit,
            )
            self.step_s += time.perf_counter() - stepping
            self._advance(now_s)
            self.steps += steps
            if self.timeline is not None:
                self._sample_ports()
            if why == STUCK:
                raise RuntimeError(
                    f"stuck at {self.now_s} s: {len(self._active_slots)} coflows can never "
                    "finish (a link or rate cap is zero)"
                )
            for slot in sorted(finished[:n_finished].tolist()):  # release order
                self._slot_done(slot)
            if ticks.due(self.now_s):
                self._dirty = True
            if self.now_s >= until_s:
                break

    def _advance(self, time_s: float) -> None:
        """Move the clock to ``time_s``; moving it backwards is a bug and always raises
        (a plain ``if``, so ``python -O`` cannot switch it off)."""
        if not time_s >= self.now_s:
            raise RuntimeError(f"the clock would run backwards: {self.now_s!r} s -> {time_s!r} s")
        self.now_s = time_s

    def _fire_due_events(self) -> None:
        while self._heap and self._heap[0][0] <= self.now_s * (1 + 1e-15) + 1e-12:
            _, _, callback = heapq.heappop(self._heap)
            callback()

    def _slot_done(self, slot: int) -> None:
        record = self._slots[slot]
        record.finish_s = self.now_s
        if self.timeline is not None:
            self.timeline.end(record.coflow_id, self.now_s)
        self._active_slots.discard(slot)
        del self._slot_of[record.coflow_id]
        self._views.drop(record.coflow_id)
        bucket = int(self._slot_bucket[slot])
        self._b_count[bucket] -= 1
        if self._b_count[bucket] == 0:
            self._emptied.add(bucket)
        self._finished(record)

    def _finished(self, record: CoflowRecord) -> None:
        self._dirty = True
        for listener in self._listeners:
            listener(record)

    # ---- placement ---------------------------------------------------------------------------

    def _place(self, slots: np.ndarray, buckets: np.ndarray) -> None:
        """Move the unfinished flows of each coflow of ``slots`` into the groups of its bucket
        of ``buckets``, one coflow after the other (in one compiled call)."""
        ranges = self._slot_ranges[slots]
        tables = self._tables
        tables.reserve_groups(int((ranges[:, 1] - ranges[:, 0]).sum()))
        emptied = move_coflows(
            tables.flow_table(),
            tables.group_table(),
            slots,
            buckets,
            self._slot_ranges,
            self._slot_bucket,
            self._b_count,
            self._b_row,
        )
        self._emptied.update(emptied.tolist())

    # ---- policy and allocation -----------------------------------------------------------------

    def _slot_bits(
        self, with_ports: bool, slots: list[int] | None = None
    ) -> tuple[list[int], np.ndarray, np.ndarray]:
        """Active slots (or ``slots``), the bits each has left, and (if asked) its bits left per
        host port."""
        if slots is None:
            slots = sorted(self._active_slots)
        ranges = self._slot_ranges[np.asarray(slots, dtype=np.int64)]
        first, last = ranges[:, 0].copy(), ranges[:, 1].copy()
        tables = self._tables
        flows, groups = tables.flow_table(), tables.group_table()
        total, ports = slot_loads(flows, groups, first, last, self.fabric.n_hosts, with_ports)
        return slots, total, ports

    def cluster_state(self) -> ClusterState:
        """The policy's view: every active coflow in bulk, plus the workload's jobs and stages.

        The coflow objects live from release to finish (a reorder makes none and copies two
        dicts); their remaining bytes and per-port loads read the loads of the latest state
        (the bytes left computed here in one compiled pass, the loads per port in another
        when a policy first reads them), and reading them after the simulator moved on
        raises."""
        # active coflows in release order: slots ascending
        slot_of = self._slot_of
        slots = np.fromiter(slot_of.values(), np.int64, len(slot_of))
        port_bits = _PortBits(self, slots, list(slot_of))
        self._loads.latest = port_bits
        jobs, stages = self.jobs_and_stages()
        return _SimulatorState(
            {},
            dict(self._views.by_slot),
            jobs,
            stages,
            self.now_s,
            self.fabric.link_bps,
            stages_version=self.stages_version(),
            port_bits=port_bits,
            by_arrival=self._views.by_arrival(),
            all_left=port_bits.all_left,
            packed_keys=self._views.packed_keys(),
            table_of=self.job_table,
        )

    def _reserve_buckets(self, extra: int) -> None:
        """Room in the bucket arrays for ``extra`` more buckets."""
        size = len(self._b_level)
        if self._n_buckets + extra <= size:
            return
        while size < self._n_buckets + extra:
            size *= 2
        grow = size - len(self._b_level)
        self._b_level = _grown(self._b_level, grow, 0)
        self._b_row = _grown(self._b_row, grow, -1)
        self._b_single = _grown(self._b_single, grow, False)
        self._b_count = _grown(self._b_count, grow, 0)
        self._kept_level = _grown(self._kept_level, grow, -1)
        if self.mode == "levels":
            self._entry_of = _grown(self._entry_of, grow * self.n_levels, -1)

    def _open_bucket(self, single: bool) -> int:
        """Make the next bucket (its level already set, room reserved)."""
        bucket = self._n_buckets
        self._n_buckets += 1
        self._b_single[bucket] = single
        self._b_row[bucket] = -1 if single else self._tables.new_pair_row(self._free_rows)
        self._live_buckets.add(bucket)
        self._relevelled = True
        return bucket

    def _levels(self, schedule: Schedule) -> tuple[np.ndarray, np.ndarray, int]:
        """The scheduled coflows' slots in the schedule's order, the level of each (its
        :func:`~controller.schedule.coflow_levels` level; its position in the ideal mode), and
        the number of levels."""
        latest = self._loads.latest
        made = latest.made_sparse() if latest is not None else None
        if made is not None and schedule.rows is not None and schedule.loads is made:
            slots = latest.slots[schedule.rows]  # (the order as rows of the state's loads)
            n = len(slots)
        else:
            ids = schedule.order
            n = len(ids)
            if latest is not None and ids == latest.ids:  # the state's order (fair, FIFO-LM)
                slots = latest.slots
            else:
                slots = np.fromiter(map(self._slot_of.__getitem__, ids), np.int64, n)
        if self.mode == "ideal":
            return slots, np.arange(n, dtype=np.int64), max(n, 1)
        if schedule.n_ranks == n:
            rank = np.arange(n, dtype=np.int64)
        else:
            ranks = schedule.ranks
            sizes = np.fromiter(map(len, ranks), np.int64, len(ranks))
            rank = np.repeat(np.arange(len(ranks), dtype=np.int64), sizes)
        return slots, np.minimum(rank, self.n_levels - 1), self.n_levels

    def _reorder(self) -> None:
        """Ask the policy for a schedule and put every coflow in the bucket of its level."""
        self._dirty = False
        if not self._active_slots:
            return
        self.reorders += 1
        tables = self._tables
        schedule = self.policy.schedule(self.cluster_state())
        slot_of = self._slot_of
        slots, level, n_levels = self._levels(schedule)
        gammas = schedule.coflow_gamma_s
        capped_slots = np.fromiter(map(slot_of.__getitem__, gammas), np.int64, len(gammas))
        # each scheduled coflow's capping, in the schedule's order (via a per-slot scratch flag)
        flag = self._slot_flag
        flag[capped_slots] = True
        capped = flag[slots]
        flag[capped_slots] = False
        if self.timeline is not None:
            self._record_levels(slots, level)
        was_capped = self._slot_capped[slots]
        moved = False
        if self._keeps_buckets(slots, level, capped):
            self._park_empty_buckets()
        else:
            moved = self._assign_buckets(slots, level, capped, n_levels)
        self._slot_level[slots] = level
        self._slot_capped[slots] = capped
        # MADD caps: every flow of a capped coflow ends at gamma if it gets its cap
        if gammas:
            ranges = self._slot_ranges[capped_slots]
            set_coflow_caps(
                tables.flow_table(),
                tables.group_table(),
                ranges[:, 0].copy(),
                ranges[:, 1].copy(),
                np.fromiter(gammas.values(), float, len(gammas)),
            )
        # a group starts without a cap: only the coflows capped last time and not now keep
        # groups whose caps must go
        for s in slots[was_capped & ~capped].tolist():
            if self._b_single[self._slot_bucket[s]]:
                first, last = self._slot_flows[s]
                groups = tables.f_group[first:last]
                tables.g_cap[groups[groups >= 0]] = np.inf
        layout = (n_levels, frozenset(slots[capped].tolist()))
        if not moved and not self._relevelled and layout == self._layout:
            return  # same groups at the same levels: the sorted groups still hold
        self._layout, self._relevelled = layout, False
        order = None
        if self.mode == "ideal":
            order = ideal_order(
                tables.f_group,
                tables.g_n_flows,
                tables.g_used,
                tables.g_level,
                SlotFlows(self._slot_ranges, tables.f_live, tables.slot_live),
                slots,
                tables.ids[USED_PREFIX],
            )
        if order is not None:  # (every coflow its level, every flow its group: no sort)
            self._plan = LevelPlan(
                order, np.asarray([0, len(order)], dtype=np.int64), np.ones(n_levels, bool)
            )
        else:
            self._plan = self._sorted_plan(tables, n_levels)
        room = len(self._plan.order)
        if len(self._positive) < room:  # (kept: a new one costs a page fault a page)
            self._positive = np.empty(max(room, 2 * len(self._positive)), dtype=np.int64)

    def _sorted_plan(self, tables: Tables, n_levels: int) -> LevelPlan:
        """Every group in use given its bucket's level and sorted by level
        (:func:`~simulator.core.set_group_levels`; in the ideal mode, then by head flow)."""
        bucket_level = self._b_level[: self._n_buckets]
        bucket_row = self._b_row[: self._n_buckets]
        live = np.fromiter(self._live_buckets, np.int64, len(self._live_buckets))
        live.sort()
        order, start, general = set_group_levels(
            tables.group_table(),
            tables.pair_table(),
            bucket_level,
            bucket_row,
            live,
            n_levels,
            self._pair_hosts,
        )
        if self.mode == "ideal":
            # one flow per group: by level, then release order inside a coflow
            order = order_by_head(order, tables.g_level, tables.g_head)
            start = np.asarray([0, len(order)], dtype=np.int64)
        return LevelPlan(order, start, general)

    def _greedy_room(self, tables: Tables) -> GreedyPass:
        """The ideal mode's greedy pass with room for the order and the group ids: kept, or made
        again when they outgrow it, with twice the room of what was outgrown (so it holds up to
        twice the longest order's room, ~230 bytes an entry of two links, for the run)."""
        if self.mode != "ideal":
            return self._greedy
        room_entries, room_ids = len(self._greedy.entry_rate), len(self._greedy.entry_of)
        entries, group_ids = len(self._plan.order), len(tables.g_n_flows)
        if room_entries < entries or room_ids < group_ids:
            self._greedy = greedy_pass(
                room_entries if room_entries >= entries else max(entries, 2 * room_entries),
                len(self._capacity),
                tables.k,
                room_ids if room_ids >= group_ids else max(group_ids, 2 * room_ids),
            )
        return self._greedy

    def _record_levels(self, slots: np.ndarray, level: np.ndarray) -> None:
        """The timeline's snapshot of every scheduled coflow's level (in the schedule's order)."""
        snapshot = []
        for slot, lvl in zip(slots.tolist(), level.tolist(), strict=True):
            record = self._slots[slot]
            snapshot.append(CoflowLevel(record.coflow_id, record.job_id, record.stage_id, lvl))
        self.timeline.levels_at(self.now_s, snapshot)

    def _sample_ports(self) -> None:
        """The timeline's port sample: bits released so far minus bits left, per host port
        (skipped where the last sample is already at this moment and nothing moved since)."""
        samples = self.timeline.sample_s
        if samples and samples[-1] == self.now_s and self._sampled_steps == self.steps:
            return
        self._sampled_steps = self.steps
        _, _, left = self._slot_bits(with_ports=True)
        delivered = self._released_port_bits - left.sum(axis=0)
        self.timeline.ports_at(self.now_s, np.maximum(delivered, 0.0) / 8.0)

    def _keeps_buckets(self, slots: np.ndarray, level: np.ndarray, capped: np.ndarray) -> bool:
        """Whether :meth:`_assign_buckets` would leave every coflow in its bucket and every
        bucket at its level: each scheduled coflow had this level and this capping at the last
        reorder (coflows may have finished since, none arrived).

        After an assignment every shared bucket holds coflows of one level only, and each level
        at most ``_level_rows`` buckets, so each one keeps its bucket, and a single-flow bucket
        stays with its coflow."""
        return bool(
            np.array_equal(self._slot_level[slots], level)
            and np.array_equal(self._slot_capped[slots], capped)
        )

    def _assign_buckets(
        self, slots: np.ndarray, level: np.ndarray, capped: np.ndarray, n_levels: int
    ) -> bool:
        """Put every scheduled coflow in its bucket (:func:`simulator.buckets.assign_buckets`),
        reusing buckets so that few flows move; whether any coflow moved."""
        ideal = self.mode == "ideal"
        stride = n_levels if ideal else self.n_levels
        self._reserve_buckets(len(slots) + stride)
        target, new_single, moved, relevelled = assign_buckets(
            slots,
            level,
            capped,
            ideal,
            self._slot_bucket,
            self._slot_ranges,
            self._b_single,
            self._b_level,
            self._n_buckets,
            stride,
            self._level_rows,
            self._entry_of,
            self._kept_level,
        )
        self._relevelled |= relevelled
        for single in new_single.tolist():
            self._open_bucket(single)
        if len(moved):
            self._place(slots[moved], target[moved])
        self._park_empty_buckets()
        return len(moved) > 0

    def _park_empty_buckets(self) -> None:
        """Buckets left without coflows keep no level (below every level) and give back their
        pair row (their groups were freed as they emptied); only those that emptied since the
        last reorder are looked at (a reorder leaves every bucket in use holding coflows)."""
        emptied, self._emptied = sorted(self._emptied), set()
        for bucket in emptied:
            if bucket in self._live_buckets and self._b_count[bucket] == 0:
                self._relevelled = True
                self._b_level[bucket] = 1 << 30
                self._live_buckets.discard(bucket)
                if self._b_row[bucket] >= 0:
                    self._free_rows.append(int(self._b_row[bucket]))
                    self._b_row[bucket] = -1

    # ---- results -----------------------------------------------------------------------------

    @property
    def bytes_delivered(self) -> float:
        """Bytes delivered so far, over every coflow."""
        _, total_bits, _ = self._slot_bits(with_ports=False)
        return self.bytes_offered - float(total_bits.sum()) / 8.0


class _Ticks:
    """A policy's periodic reorders: at ``origin + k * period`` for k = 1, 2, ..., on a fixed
    grid like the controller's timer, whether or not the network was busy in between (so an
    idle gap never leaves a tick behind the clock). No period: never."""

    def __init__(self, origin_s: float, period_s: float | None) -> None:
        if period_s is not None and not period_s > 0:
            raise ValueError(f"a reorder period must be > 0 s, got {period_s!r}")
        self._origin = origin_s
        self._period = period_s
        self._k = 1  # the next tick is origin + k * period

    def after(self, now_s: float) -> float:
        """The first tick strictly after ``now_s``, unless one is due at ``now_s`` (then it)."""
        if self._period is None:
            return math.inf
        tick = self._origin + self._k * self._period
        if tick < now_s:  # ticks that fell in an idle gap did nothing: skip them
            self._k = max(self._k, math.floor((now_s - self._origin) / self._period))
            while (tick := self._origin + self._k * self._period) < now_s:
                self._k += 1
        return tick

    def due(self, now_s: float) -> bool:
        """Whether a tick is due at ``now_s``; if so the next one is scheduled."""
        if self._period is None or self.after(now_s) > now_s:
            return False
        self._k += 1
        return True


def _grown(array: np.ndarray, extra: int, fill) -> np.ndarray:
    """``array`` with ``extra`` more rows (along its first axis) of ``fill`` at the end."""
    spare = np.full((extra, *array.shape[1:]), fill, dtype=array.dtype)
    return np.concatenate([array, spare])


class _PortBits:
    """The active coflows' loads as a state saw them: each one's bytes left, computed with the
    state in one compiled pass, and its bytes left per port (sparse rows), computed in another
    when a policy first reads them (JPAS and FIFO-LM never do). Reading them after the
    simulator moved on (its clock or its step count changed) is an error.

    Args:
        sim: the simulator.
        slots: the active slots, in release order (the rows).
        ids: their coflow ids.

    Attributes:
        slots: each row's slot.
        ids: each row's coflow id.
        all_left: whether every coflow has bytes left.
    """

    def __init__(self, sim: Simulator, slots: np.ndarray, ids: list[int]) -> None:
        self._sim, self._now_s, self._steps = sim, sim.now_s, sim.steps
        self.slots = slots
        self.ids = ids
        self._bytes: list[dict] | None = None
        self._sparse: SparsePortBytes | None = None
        tables = sim._tables
        total_bits = slot_bits_left(
            tables.f_threshold,
            tables.f_group,
            tables.g_served,
            SlotFlows(sim._slot_ranges, tables.f_live, tables.slot_live),
            slots,
        )
        # the policy's arithmetic: bytes = bits / 8, done when bytes <= 0
        remaining_bytes = total_bits / 8.0
        self._remaining = remaining_bytes.tolist()
        self.all_left = not len(remaining_bytes) or bool(remaining_bytes.min() > 0)

    @property
    def sparse(self) -> SparsePortBytes:
        """Every row's bytes left per port, as the policies read them (made on first use)."""
        if self._sparse is None:
            row_ptr, column, size_bytes, _ = self._compute()
            self._sparse = SparsePortBytes(row_ptr, column, size_bytes, self.ids, self.n_hosts)
        return self._sparse

    def made_sparse(self) -> SparsePortBytes | None:
        """:attr:`sparse` if a policy read it, else ``None`` (without making it)."""
        return self._sparse

    @functools.cached_property
    def row_of(self) -> dict[int, int]:
        """Each active coflow's row (made on first use)."""
        if self._sparse is not None:
            return self._sparse.row_of
        return dict(zip(self.ids, range(len(self.ids)), strict=True))

    def _check_current(self) -> None:
        if (self._sim.now_s, self._sim.steps) != (self._now_s, self._steps):
            raise RuntimeError("a coflow's loads were read after the simulator moved on")

    def _row(self, coflow_id: int) -> int:
        self._check_current()
        try:
            return self.row_of[coflow_id]
        except KeyError:
            raise RuntimeError(f"coflow {coflow_id} was not active in the latest state") from None

    def remaining_bytes(self, coflow_id: int) -> float:
        """Bytes still to send of an active coflow."""
        return self._remaining[self._row(coflow_id)]

    def byte_counts(self, ids: list[int]) -> tuple[list[float], list[float]]:
        """The size and the bytes still to send of each of the active coflows ``ids``, in one
        gather (the numbers :attr:`Coflow.size_bytes` and :meth:`remaining_bytes` give)."""
        self._check_current()
        try:
            rows = (
                None
                if ids == self.ids
                else np.fromiter(map(self.row_of.__getitem__, ids), np.int64, len(ids))
            )
        except KeyError as missing:
            raise RuntimeError(
                f"coflow {missing.args[0]} was not active in the latest state"
            ) from None
        sizes = self._sim._slot_size[self.slots]
        if rows is None:
            return sizes.tolist(), list(self._remaining)
        return sizes[rows].tolist(), list(map(self._remaining.__getitem__, rows.tolist()))

    @property
    def n_hosts(self) -> int:
        """Hosts of the fabric (columns: their egress ports, then their ingress ports)."""
        return self._sim.fabric.n_hosts

    def _compute(self) -> tuple:
        """:func:`~simulator.core.slot_port_bytes` of every active coflow."""
        self._check_current()
        tables = self._sim._tables
        return slot_port_bytes(
            tables.f_pair,
            tables.f_threshold,
            tables.f_group,
            tables.g_served,
            SlotFlows(self._sim._slot_ranges, tables.f_live, tables.slot_live),
            self.slots,
            self.n_hosts,
        )

    def row_bytes(self, coflow_id: int) -> dict:
        """Bytes still to send of an active coflow per port ``(host, EGRESS | INGRESS)``, ports
        in column order. The first call builds every row's mapping in one pass over the
        sparse rows (a policy that looks at one coflow's ports looks at all)."""
        row = self._row(coflow_id)
        if self._bytes is None:
            row_ptr, column, size_bytes = self.sparse.rows(None)
            n_hosts = self.n_hosts
            ports = list(zip((column % n_hosts).tolist(), (column // n_hosts).tolist(),
                             strict=True))  # fmt: skip
            sizes = size_bytes.tolist()
            bounds = row_ptr.tolist()
            self._bytes = [
                dict(zip(ports[lo:hi], sizes[lo:hi], strict=True))
                for lo, hi in zip(bounds, bounds[1:], strict=False)
            ]
        return self._bytes[row]


class _CurrentLoads:
    """Where the live coflow objects read their loads: the latest state's :class:`_PortBits`
    (``None`` before the first state)."""

    __slots__ = ("latest",)

    def __init__(self) -> None:
        self.latest: _PortBits | None = None


class _PortLoads(Mapping):
    """A coflow's bytes left per port, as the policy's mapping: the latest state's, so it never
    shows an older state's loads (read after the simulator moved on, it raises)."""

    __slots__ = ("_loads", "_coflow_id")

    def __init__(self, loads: _CurrentLoads, coflow_id: int) -> None:
        self._loads = loads
        self._coflow_id = coflow_id

    def _current(self) -> dict:
        return self._loads.latest.row_bytes(self._coflow_id)

    def __getitem__(self, port):
        return self._current()[port]

    def items(self):  # a dict's view: dict(mapping.items()) then copies at C speed
        """``(port, bytes)`` pairs of the ports with bytes left."""
        return self._current().items()

    def __iter__(self):
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


class _LiveSummary:
    """An active coflow's :class:`~controller.model.CoflowSummary` (the same three attributes),
    made once at its release: its size is fixed, its remaining bytes and per-port loads are
    read from the latest state's loads (:class:`_CurrentLoads`)."""

    __slots__ = ("size_bytes", "port_remaining_bytes", "_loads", "_coflow_id")

    def __init__(self, size_bytes: float, coflow_id: int, loads: _CurrentLoads) -> None:
        self.size_bytes = size_bytes
        self.port_remaining_bytes = _PortLoads(loads, coflow_id)
        self._loads = loads
        self._coflow_id = coflow_id

    @property
    def remaining_bytes(self) -> float:
        """Bytes not yet delivered, as the latest state computed them."""
        return self._loads.latest.remaining_bytes(self._coflow_id)


class _CoflowViews:
    """The :class:`~controller.model.Coflow` object of every active coflow, made at its
    release and dropped when it finishes, so that a reorder builds none.

    Attributes:
        by_slot: coflow id -> object, in release order (the order of a state's ``coflows``).
    """

    def __init__(self) -> None:
        self.by_slot: dict[int, Coflow] = {}
        # the same objects in ClusterState.active_coflows' order, (arrival_s, coflow_id);
        # releases come in clock order, so only ids released out of order at one instant
        # call for a sort
        self._by_arrival: dict[int, Coflow] = {}
        self._keys: dict[int, bytes | None] = {}  # each one's packed CoflowKeys row, same order
        self._unkeyed = 0  # active coflows whose keys do not pack
        self._last_key: tuple[float, int] | None = None
        self._sorted = True

    def add(self, record: CoflowRecord, loads: _CurrentLoads) -> None:
        """Make the object of a coflow just released."""
        summary = _LiveSummary(record.size_bytes, record.coflow_id, loads)
        coflow = Coflow(
            record.coflow_id,
            [],
            record.arrival_s,
            record.job_id,
            record.stage_id,
            record.weight,
            summary,
        )
        self.by_slot[record.coflow_id] = coflow
        self._by_arrival[record.coflow_id] = coflow
        packed = self._keys[record.coflow_id] = CoflowKeys.pack(coflow)
        self._unkeyed += packed is None
        key = (record.arrival_s, record.coflow_id)
        if self._last_key is None or key > self._last_key:
            self._last_key = key
        else:
            self._sorted = False

    def drop(self, coflow_id: int) -> None:
        """Forget a coflow that finished."""
        del self.by_slot[coflow_id]
        del self._by_arrival[coflow_id]
        self._unkeyed -= self._keys.pop(coflow_id) is None

    def by_arrival(self) -> list[Coflow]:
        """The objects in (arrival time, id) order."""
        if not self._sorted:
            ordered = sorted(self._by_arrival.values(), key=lambda c: (c.arrival_s, c.coflow_id))
            self._by_arrival = {c.coflow_id: c for c in ordered}
            self._keys = {c.coflow_id: self._keys[c.coflow_id] for c in ordered}
            self._sorted = True
        return list(self._by_arrival.values())

    def packed_keys(self) -> bytes | None:
        """Their :class:`~controller.model.CoflowKeys` rows in :meth:`by_arrival`'s order,
        packed (``None`` if one does not pack); call it after :meth:`by_arrival`."""
        return None if self._unkeyed else b"".join(self._keys.values())


@dataclass
class _SimulatorState(ClusterState):
    """The simulator's view for the policy: a :class:`ClusterState` that offers its loads as
    the sparse arrays the port bits were computed in (BSSI's demand matrix and the policies
    that sum loads in arrays read them, not one mapping per coflow), and lists its active
    coflows in the order the simulator keeps them in.

    Args:
        port_bits: the active coflows' loads.
        by_arrival: the coflows in (arrival time, id) order.
        all_left: whether every coflow has bytes left (none is done).
        packed_keys: the :class:`CoflowKeys` rows of ``by_arrival``, packed (``None``: not
            offered).
        table_of: the workload driver's job table, if it keeps one (for the jobs dict it
            gives the state).
    """

    port_bits: _PortBits | None = None
    by_arrival: list[Coflow] = field(default_factory=list)
    all_left: bool = True
    packed_keys: bytes | None = None
    table_of: Callable[[], JobTable | None] | None = None

    @property
    def row_of(self) -> dict[int, int]:
        """Each active coflow's row in ``port_bits``."""
        return self.port_bits.row_of

    def active_coflows(self) -> list[Coflow]:
        """The same list as :meth:`ClusterState.active_coflows`, without a sort."""
        if self.all_left:
            return list(self.by_arrival)
        return [c for c in self.by_arrival if not c.done]

    def sparse_port_bytes(self) -> SparsePortBytes:
        """The active coflows' bytes left per port as sparse rows (rows as ``row_of``), the
        arrays every coflow's mapping is read from."""
        return self.port_bits.sparse

    def byte_counts(
        self, coflows: Sequence[Coflow], ids: list[int] | None = None
    ) -> tuple[list[float], list[float]]:
        """:meth:`ClusterState.byte_counts` from the port bits' arrays, no coflow read (FIFO-LM
        reads every active coflow's at every reorder)."""
        return self.port_bits.byte_counts(list(map(_COFLOW_ID, coflows)) if ids is None else ids)

    def _kept_job_table(self) -> JobTable | None:
        """The workload driver's job table, if it keeps one."""
        return self.table_of() if self.table_of is not None else None

    def coflow_keys(self) -> CoflowKeys | None:
        """The active coflows' ids, jobs and stages as arrays, in :meth:`active_coflows`
        order (while every coflow has bytes left)."""
        if not self.all_left or self.packed_keys is None:
            return None
        return CoflowKeys.unpack(self.packed_keys)


def warm_up(stream=None) -> float:
    """Load the simulator's kernels and the controller's (compiling them the first time on a
    machine, about a minute, then cached on disk) with tiny runs, once per process, so that
    what a run reports as its wall time excludes it. Says so on ``stream`` (default stderr)
    when it compiles. Returns the seconds it took (0 once warm)."""
    from controller.warm import warm_up as controller_warm_up

    def run(policy: str, mode: str) -> None:
        sim = Simulator(Fabric(3, 1e9), make_policy(policy), mode=mode)
        for cid, (src, dst) in enumerate(((0, 1), (0, 2), (1, 2))):
            sim.release(CoflowSpec(cid, np.array([src, src]), np.array([dst, dst]),
                                   np.array([1e5, 2e5])))  # fmt: skip
        sim.run()
        _ = sim.bytes_delivered

    # pair levels and port loads (sincronia), capped one-flow groups at fixed rates (varys),
    # the greedy ideal mode, the stage loads (beamer), the per-slot loads (``bytes_delivered``,
    # a timeline's samples), and the controller's kernels (Beamer's stage kernel, which HPO
    # runs call, among them)
    steps = [
        (f"{policy}, {mode} mode", lambda policy=policy, mode=mode: run(policy, mode))
        for policy, mode in (
            ("sincronia", "levels"),
            ("varys", "levels"),
            ("sincronia", "ideal"),
            ("beamer", "levels"),
        )
    ]
    steps.append(("the controller's kernels", lambda: controller_warm_up(stream)))
    return warm_once("simulator", run_steps, steps, stream,
                     note="1-2 minutes on an idle 2-core machine, longer on a busy one; ",
                     kernels="the fluid model's event steps")  # fmt: skip
