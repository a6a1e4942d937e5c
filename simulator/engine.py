"""The discrete-event, flow-level simulator: one object owns the clock, the event heap and the
active flows; the scheduling policy comes from :mod:`controller.policies`, unchanged.

Between two events every flow keeps a constant rate; the next event is the earliest of a flow
completion, a scheduled event (a coflow release, a compute phase ending, a periodic reorder).

Exact aggregation keeps a step cheap when hundreds of thousands of flows are active: flows of the
same priority level between the same two hosts, without a rate cap, get the same rate under
max-min fairness, so they form one *group* (weight = its number of flows). A group counts the bits
it has served per flow; each flow joins with a threshold (that count plus its size) and finishes
when the count reaches it, so a step costs O(groups), and a completion pops a heap. A *bucket*
is a set of coflows sharing a level; a reorder relabels buckets and moves only the coflows that
changed bucket. Capped coflows (MADD) and the ideal mode use one group per flow.

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

import heapq
import itertools
import math
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from controller.model import ClusterState, Coflow, CoflowSummary, Job, Stage
from controller.policies import Policy
from controller.schedule import N_LEVELS, coflow_levels
from simulator.allocation import advance_listed, greedy_in_order, ordered_group_rates

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


def _grow(array: np.ndarray, needed: int, fill) -> np.ndarray:
    """``array`` with room for ``needed`` rows (capacity doubles; new rows are ``fill``)."""
    if needed <= len(array):
        return array
    size = max(needed, 2 * len(array), 64)
    out = np.full((size, *array.shape[1:]), fill, dtype=array.dtype)
    out[: len(array)] = array
    return out


DONE = -1  # flow group of a finished flow
PENDING = -2  # flow released but not yet placed in a group (placed at the next reorder)


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
        k = fabric.links(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)).shape[1]
        # flows, by flow id (a coflow's flows have consecutive ids)
        self._n_flows = 0
        self._f_links = np.zeros((0, k), dtype=np.int64)
        self._f_pair = np.zeros(0, dtype=np.int64)  # src * n_hosts + dst
        self._f_thr = np.zeros(0)  # group service (bits) at which it ends; size while PENDING
        self._f_group = np.zeros(0, dtype=np.int64)
        # groups, by group id (ids of emptied groups are reused)
        self._g_links = np.zeros((0, k), dtype=np.int64)
        self._g_count = np.zeros(0)
        self._g_served = np.zeros(0)  # bits served to each of its flows so far
        self._g_rate = np.zeros(0)
        self._g_cap = np.zeros(0)
        self._g_bucket = np.zeros(0, dtype=np.int64)
        self._g_next = np.zeros(0)  # smallest threshold among its flows
        self._g_heap: list[list] = []
        self._g_key: list = []
        self._group_of: dict = {}
        self._free_groups: list[int] = []  # a min-heap: new groups take the lowest free id
        self._g_used = np.zeros(0, dtype=np.bool_)
        self._n_used = 0  # every group id in use is below this: the kernels scan [:_n_used]
        self._g_level = np.zeros(0, dtype=np.int64)  # level of its bucket (set at reorders)
        # groups in use sorted by level (set at reorders; groups only appear at reorders)
        self._level_order = np.zeros(0, dtype=np.int64)
        self._level_start = np.zeros(1, dtype=np.int64)
        self._served = np.zeros(0, dtype=np.int64)  # groups with a positive rate
        self._positive = np.zeros(0, dtype=np.int64)  # the buffer _served is a view of
        # buckets: sets of coflow slots sharing a level
        self._b_level: list[int] = []
        self._b_single: list[bool] = []  # one group per flow (capped coflows, ideal mode)
        self._b_members: list[set] = []
        self._live_buckets: set[int] = set()
        # coflows, by slot
        self._slots: list[CoflowRecord] = []
        self._slot_flows: list[tuple[int, int]] = []  # flow id range
        self._slot_starts: list[int] = []  # first flow id of every slot, for bisection
        self._slot_bucket: list[int] = []
        self._active_slots: set[int] = set()
        self.coflows: dict[int, CoflowRecord] = {}
        self._listeners: list[Callable[[CoflowRecord], None]] = []
        self._dirty = True  # ask the policy again
        self._realloc = True  # recompute rates
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
        """Release a coflow now (it is placed at its level by the next reorder)."""
        if spec.coflow_id in self.coflows:
            raise ValueError(f"coflow {spec.coflow_id} released twice")
        sizes = np.asarray(spec.size_bytes, dtype=float)
        if sizes.size and sizes.min() < 0:
            raise ValueError(f"coflow {spec.coflow_id}: negative flow size")
        keep = sizes > 0
        links = self.fabric.links(np.asarray(spec.src)[keep], np.asarray(spec.dst)[keep])
        n = int(keep.sum())
        record = CoflowRecord(
            spec.coflow_id,
            self.now_s,
            float(sizes.sum()),
            n,
            spec.job_id,
            spec.stage_id,
            spec.weight,
            flows_left=n,
        )
        self.coflows[spec.coflow_id] = record
        self.bytes_offered += record.size_bytes
        if n == 0:
            record.finish_s = self.now_s
            self._finished(record)
            return record
        first, last = self._n_flows, self._n_flows + n
        self._f_links = _grow(self._f_links, last, 0)
        self._f_pair = _grow(self._f_pair, last, 0)
        self._f_thr = _grow(self._f_thr, last, 0.0)
        self._f_group = _grow(self._f_group, last, DONE)
        self._f_links[first:last] = links
        hosts = self.fabric.n_hosts
        src = np.asarray(spec.src, dtype=np.int64)[keep]
        self._f_pair[first:last] = src * hosts + np.asarray(spec.dst, dtype=np.int64)[keep]
        self._f_thr[first:last] = 8.0 * sizes[keep]
        self._f_group[first:last] = PENDING
        self._n_flows = last
        slot = len(self._slots)
        self._slots.append(record)
        self._slot_flows.append((first, last))
        self._slot_starts.append(first)
        self._slot_bucket.append(-1)
        self._active_slots.add(slot)
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
            next_event = self._heap[0][0] if self._heap else math.inf
            if not self._active_slots:
                if next_event == math.inf or next_event > until_s:
                    break
                self.now_s = next_event
                continue
            if self._realloc:
                self._allocate()
            limit = min(next_event, next_tick, until_s) - self.now_s
            step, ending = advance_listed(
                self._served, self._g_rate, self._g_served, self._g_next, limit, _SIMULTANEOUS
            )
            if not math.isfinite(step):
                raise RuntimeError(
                    f"stuck at {self.now_s} s: {len(self._active_slots)} coflows can never "
                    "finish (a link or rate cap is zero)"
                )
            self.steps += 1
            self.now_s += step
            if len(ending):
                self._complete(ending, step)
            if self.now_s >= next_tick:
                next_tick = self.now_s + period
                self._dirty = True
            if self.now_s >= until_s:
                break

    def _fire_due_events(self) -> None:
        while self._heap and self._heap[0][0] <= self.now_s * (1 + 1e-15) + 1e-12:
            _, _, callback = heapq.heappop(self._heap)
            callback()

    def _complete(self, ending: np.ndarray, step: float) -> None:
        """Finish the flows of ``ending`` groups that reached their threshold."""
        finished_slots: dict[int, int] = {}
        f_group, f_thr = self._f_group, self._f_thr
        for g in ending.tolist():
            served = self._g_served[g]
            slack = self._g_rate[g] * step * _SIMULTANEOUS + 1e-6
            heap = self._g_heap[g]
            while heap:
                thr, f = heap[0]
                if f_group[f] != g or f_thr[f] != thr:
                    heapq.heappop(heap)  # stale: the flow moved or finished
                    continue
                if thr > served + slack:
                    break
                heapq.heappop(heap)
                f_group[f] = DONE
                self._g_count[g] -= 1
                slot = self._slot_of_flow(f)
                finished_slots[slot] = finished_slots.get(slot, 0) + 1
            self._refresh(g)
        self._realloc = True
        for slot, n in finished_slots.items():
            record = self._slots[slot]
            record.flows_left -= n
            if record.flows_left == 0:
                record.finish_s = self.now_s
                self._active_slots.discard(slot)
                self._b_members[self._slot_bucket[slot]].discard(slot)
                self._finished(record)

    def _slot_of_flow(self, f: int) -> int:
        # flows of a slot are consecutive and slots are released in order: bisect the starts
        return bisect_right(self._slot_starts, f) - 1

    def _finished(self, record: CoflowRecord) -> None:
        self._dirty = True
        for listener in self._listeners:
            listener(record)

    # ---- groups ------------------------------------------------------------------------------

    def _new_group(self, key, links: np.ndarray, bucket: int) -> int:
        if self._free_groups:
            g = heapq.heappop(self._free_groups)
        else:
            g = len(self._g_heap)
            self._g_heap.append([])
            self._g_key.append(None)
            size = g + 1
            self._g_links = _grow(self._g_links, size, 0)
            self._g_count = _grow(self._g_count, size, 0.0)
            self._g_served = _grow(self._g_served, size, 0.0)
            self._g_rate = _grow(self._g_rate, size, 0.0)
            self._g_cap = _grow(self._g_cap, size, np.inf)
            self._g_bucket = _grow(self._g_bucket, size, -1)
            self._g_next = _grow(self._g_next, size, np.inf)
            self._g_used = _grow(self._g_used, size, False)
            self._g_level = _grow(self._g_level, size, 0)
        self._g_used[g] = True
        if g >= self._n_used:
            self._n_used = g + 1
        self._g_links[g] = links
        self._g_count[g] = 0.0
        self._g_served[g] = 0.0
        self._g_rate[g] = 0.0
        self._g_cap[g] = np.inf
        self._g_bucket[g] = bucket
        self._g_next[g] = np.inf
        self._g_heap[g] = []
        self._g_key[g] = key
        self._group_of[key] = g
        return g

    def _refresh(self, g: int) -> None:
        """Recompute a group's next threshold; recycle it when empty."""
        heap = self._g_heap[g]
        while heap and (self._f_group[heap[0][1]] != g or self._f_thr[heap[0][1]] != heap[0][0]):
            heapq.heappop(heap)
        self._g_next[g] = heap[0][0] if heap else np.inf
        if self._g_count[g] <= 0.5:
            self._g_count[g] = 0.0
            self._g_heap[g] = []
            self._g_next[g] = np.inf
            del self._group_of[self._g_key[g]]
            self._g_key[g] = None
            self._g_used[g] = False
            heapq.heappush(self._free_groups, g)
            while self._n_used and not self._g_used[self._n_used - 1]:
                self._n_used -= 1

    def _place(self, slot: int, bucket: int) -> None:
        """Move the unfinished flows of a coflow into the groups of ``bucket``."""
        old = self._slot_bucket[slot]
        if old >= 0:
            self._b_members[old].discard(slot)
        self._slot_bucket[slot] = bucket
        self._b_members[bucket].add(slot)
        first, last = self._slot_flows[slot]
        flows = np.arange(first, last)
        groups = self._f_group[first:last]
        flows = flows[groups != DONE]
        groups = self._f_group[flows]
        remaining = self._remaining(flows, groups)
        touched = set()
        single = self._b_single[bucket]
        for f, g_old, left in zip(flows.tolist(), groups.tolist(), remaining.tolist(), strict=True):
            key = (bucket, f) if single else (bucket, int(self._f_pair[f]))
            g = self._group_of.get(key)
            if g is None:
                g = self._new_group(key, self._f_links[f], bucket)
            thr = self._g_served[g] + left
            self._f_thr[f] = thr
            self._f_group[f] = g
            heapq.heappush(self._g_heap[g], (thr, f))
            self._g_count[g] += 1
            if thr < self._g_next[g]:
                self._g_next[g] = thr
            if g_old >= 0:
                self._g_count[g_old] -= 1
                touched.add(g_old)
        for g in touched:
            self._refresh(g)
        self._realloc = True

    def _remaining(self, flows: np.ndarray, groups: np.ndarray) -> np.ndarray:
        """Bits left of ``flows`` (whose groups are ``groups``, PENDING or a group id)."""
        served = np.zeros(len(flows))
        placed = groups >= 0
        served[placed] = self._g_served[groups[placed]]
        return np.maximum(self._f_thr[flows] - served, 0.0)

    # ---- policy and allocation -----------------------------------------------------------------

    def _active_flow_ids(self) -> np.ndarray:
        slots = sorted(self._active_slots)
        if not slots:
            return np.zeros(0, dtype=np.int64)
        ids = np.concatenate([np.arange(*self._slot_flows[s]) for s in slots])
        return ids[self._f_group[ids] != DONE]

    def cluster_state(self) -> ClusterState:
        """The policy's view: every active coflow in bulk, plus the workload's jobs and stages."""
        n = self.fabric.n_hosts
        flows = self._active_flow_ids()
        remaining = self._remaining(flows, self._f_group[flows]) / 8.0
        slot_starts = np.asarray(self._slot_starts)
        slot = np.searchsorted(slot_starts, flows, side="right") - 1
        slots, row = np.unique(slot, return_inverse=True)
        src = self._f_pair[flows] // n
        dst = self._f_pair[flows] % n
        cells = np.concatenate([row * (2 * n) + src, row * (2 * n) + n + dst])
        load = np.bincount(
            cells, weights=np.concatenate([remaining, remaining]), minlength=len(slots) * 2 * n
        ).reshape(len(slots), 2 * n)
        totals = np.bincount(row, weights=remaining, minlength=len(slots))
        coflows = {}
        for i, s in enumerate(slots.tolist()):
            record = self._slots[s]
            ports = {(int(k % n), int(k // n)): float(load[i, k]) for k in np.flatnonzero(load[i])}
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

    def _new_bucket(self, level: int, single: bool) -> int:
        self._b_level.append(level)
        self._b_single.append(single)
        self._b_members.append(set())
        self._live_buckets.add(len(self._b_level) - 1)
        return len(self._b_level) - 1

    def _reorder(self) -> None:
        """Ask the policy for a schedule and put every coflow in the bucket of its level."""
        self._dirty = False
        if not self._active_slots:
            return
        self.reorders += 1
        schedule = self.policy.schedule(self.cluster_state())
        slot_of = {self._slots[s].coflow_id: s for s in self._active_slots}
        if self.mode == "levels":
            level = {slot_of[c]: lvl for c, lvl in coflow_levels(schedule, self.n_levels).items()}
        else:
            level = {slot_of[c]: pos for pos, c in enumerate(schedule.order)}
        capped = {slot_of[c] for c in schedule.coflow_gamma_s}
        target = self._assign_buckets(level, capped)
        for s, bucket in target.items():
            if self._slot_bucket[s] != bucket:
                self._place(s, bucket)
        # MADD caps: every flow of a capped coflow ends at gamma if it gets its cap
        for c, gamma in schedule.coflow_gamma_s.items():
            first, last = self._slot_flows[slot_of[c]]
            flows = np.arange(first, last)
            flows = flows[self._f_group[flows] >= 0]
            groups = self._f_group[flows]
            self._g_cap[groups] = self._remaining(flows, groups) / gamma
        for s in self._active_slots - capped:
            if self._b_single[self._slot_bucket[s]]:
                first, last = self._slot_flows[s]
                groups = self._f_group[first:last]
                self._g_cap[groups[groups >= 0]] = np.inf
        n = self._n_used
        self._g_level[:n] = np.asarray(self._b_level, dtype=np.int64)[self._g_bucket[:n]]
        used = np.flatnonzero(self._g_used[:n])
        by_level = np.argsort(self._g_level[used], kind="stable")
        self._level_order = used[by_level]
        levels = self._g_level[self._level_order]
        _, starts = np.unique(levels, return_index=True)
        self._level_start = np.append(starts, len(levels)).astype(np.int64)
        self._positive = np.empty(len(self._level_order), dtype=np.int64)
        self._realloc = True

    def _assign_buckets(self, level: dict[int, int], capped: set[int]) -> dict[int, int]:
        """The bucket of every active coflow, reusing buckets so that few flows move."""
        target: dict[int, int] = {}
        # one group per flow: capped coflows, and every coflow in ideal mode
        for s, lvl in level.items():
            if s in capped or self.mode == "ideal":
                bucket = self._slot_bucket[s]
                if bucket < 0 or not self._b_single[bucket]:
                    bucket = self._new_bucket(lvl, True)
                self._b_level[bucket] = lvl
                target[s] = bucket
        # shared buckets: give each level the existing bucket that holds most of its flows
        weight: dict[tuple[int, int], int] = {}
        for s, lvl in level.items():
            bucket = self._slot_bucket[s]
            if s in target or bucket < 0 or self._b_single[bucket]:
                continue
            first, last = self._slot_flows[s]
            weight[(bucket, lvl)] = weight.get((bucket, lvl), 0) + (last - first)
        bucket_of_level: dict[int, int] = {}
        used = set()
        for (bucket, lvl), _ in sorted(weight.items(), key=lambda kv: -kv[1]):
            if bucket not in used and lvl not in bucket_of_level:
                used.add(bucket)
                bucket_of_level[lvl] = bucket
                self._b_level[bucket] = lvl
        for s, lvl in level.items():
            if s in target:
                continue
            if lvl not in bucket_of_level:
                bucket_of_level[lvl] = self._new_bucket(lvl, False)
            target[s] = bucket_of_level[lvl]
        # buckets left empty keep no level: park them below every level
        kept = set(target.values())
        for bucket in list(self._live_buckets - kept):
            if not self._b_members[bucket]:
                self._b_level[bucket] = 1 << 30
                self._live_buckets.discard(bucket)
        return target

    def _allocate(self) -> None:
        self._realloc = False
        n = self._n_used
        levels = self._g_level[:n]
        if self.mode == "levels":
            count = ordered_group_rates(
                self._g_links,
                self._g_count,
                self._g_cap,
                self._level_order,
                self._level_start,
                self._capacity,
                self._g_rate,
                self._positive,
            )
            self._served = self._positive[:count]
            return
        # ideal: one group per flow, greedy by level, then release order inside a coflow
        active = np.flatnonzero(self._g_count[:n] > 0.5)
        first_flow = np.asarray([self._g_key[g][1] for g in active.tolist()], dtype=np.int64)
        order = np.lexsort((first_flow, levels[active]))
        caps = self._g_cap[active]
        rates = greedy_in_order(
            self._g_links[active], order, self._capacity, caps if np.isfinite(caps).any() else None
        )
        self._g_rate[:n] = 0.0
        self._g_rate[active] = rates
        self._served = active[rates > 0]

    # ---- results -----------------------------------------------------------------------------

    @property
    def bytes_delivered(self) -> float:
        flows = self._active_flow_ids()
        left = self._remaining(flows, self._f_group[flows]).sum() / 8.0
        return self.bytes_offered - float(left)
