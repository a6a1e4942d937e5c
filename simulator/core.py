"""The simulator's compiled core: the flow and group tables, moving flows between groups, and the
step loop that runs between two policy decisions.

Tables are plain numpy arrays (:class:`Tables` holds them and grows them); every function here
is a numba kernel over them, so a step costs no Python.

- A *flow* has a threshold: the service count (bits per flow) of its group at which it ends.
  The flows of a group form a doubly linked list sorted by threshold (``f_prev`` / ``f_next``,
  head ``g_head``), so the next to end is the head and moving a flow out is O(1).
- A *group* stands for ``g_count`` identical flows (same level, same links, no cap) and counts
  the bits ``g_served`` it has given each of them. Shared buckets find a pair's group through a
  row of ``pmap`` (pair -> group); one-flow groups (capped coflows, the ideal mode) have none.
  Freed group ids are reused lowest first (a min-heap), so the kernels scan a short prefix.
- On a big switch each uncapped level also keeps the matrix of its flows per host pair
  (``pairs``: counts, transpose, row and column sums), updated as flows end, so the allocation
  is :func:`simulator.allocation.pair_shares` (O(n) per bottleneck link) plus one pass that
  reads each group's rate off its two links, with no per-step gathering.
- :func:`run_steps` allocates rates, advances to the next completion (or the caller's limit),
  finishes the flows that end and stops as soon as a coflow is complete: the caller then tells
  the listeners and asks the policy again.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from simulator.allocation import _fill, greedy_groups, pair_shares

DONE = -1  # group of a finished flow
PENDING = -2  # released, not placed yet (its threshold is then its size in bits)
NIL = -1  # end of a linked list, no group

# run_steps stops because ...
COFLOW_DONE = 0  # ... a coflow finished
LIMIT = 1  # ... the clock reached the limit
STUCK = 2  # ... nothing has a rate, yet flows are left


def _grow(array: np.ndarray, needed: int, fill) -> np.ndarray:
    """``array`` with room for ``needed`` rows (capacity doubles; new rows are ``fill``)."""
    if needed <= len(array):
        return array
    size = max(needed, 2 * len(array), 64)
    out = np.full((size, *array.shape[1:]), fill, dtype=array.dtype)
    out[: len(array)] = array
    return out


class Tables:
    """The flow and group arrays of one simulation (see the module docstring)."""

    def __init__(self, k: int, n_pairs: int) -> None:
        self.k = k
        self.n_pairs = n_pairs
        self.n_flows = 0
        self.f_links = np.zeros((0, k), dtype=np.int64)
        self.f_pair = np.zeros(0, dtype=np.int64)
        self.f_thr = np.zeros(0)
        self.f_group = np.zeros(0, dtype=np.int64)
        self.f_prev = np.zeros(0, dtype=np.int64)
        self.f_next = np.zeros(0, dtype=np.int64)
        self.f_slot = np.zeros(0, dtype=np.int64)
        self.g_links = np.zeros((0, k), dtype=np.int64)
        self.g_count = np.zeros(0)
        self.g_served = np.zeros(0)
        self.g_rate = np.zeros(0)
        self.g_cap = np.zeros(0)
        self.g_level = np.zeros(0, dtype=np.int64)
        self.g_bucket = np.zeros(0, dtype=np.int64)
        self.g_head = np.zeros(0, dtype=np.int64)
        self.g_next = np.zeros(0)
        self.g_used = np.zeros(0, dtype=np.bool_)
        self.g_row = np.zeros(0, dtype=np.int64)
        self.g_pair = np.zeros(0, dtype=np.int64)
        self.free = np.zeros(0, dtype=np.int64)  # min-heap of freed group ids
        # [freed ids in the heap, ids ever handed out, used prefix (every used id is below)]
        self.meta = np.zeros(3, dtype=np.int64)
        self.pmap = np.full((0, n_pairs), NIL, dtype=np.int64)
        self.n_rows = 0  # rows of pmap handed out
        self.slot_left = np.zeros(0, dtype=np.int64)
        self.enable_pairs(1, 0)

    def add_flows(self, links, pair, size_bits, slot: int) -> tuple[int, int]:
        """Append the flows of a new coflow slot; returns their id range."""
        first, last = self.n_flows, self.n_flows + len(pair)
        for name, fill in (
            ("f_links", 0),
            ("f_pair", 0),
            ("f_thr", 0.0),
            ("f_group", DONE),
            ("f_prev", NIL),
            ("f_next", NIL),
            ("f_slot", 0),
        ):
            setattr(self, name, _grow(getattr(self, name), last, fill))
        self.f_links[first:last] = links
        self.f_pair[first:last] = pair
        self.f_thr[first:last] = size_bits
        self.f_group[first:last] = PENDING
        self.f_slot[first:last] = slot
        self.n_flows = last
        self.slot_left = _grow(self.slot_left, slot + 1, 0)
        self.slot_left[slot] = last - first
        return first, last

    def reserve_groups(self, extra: int) -> None:
        """Make room for ``extra`` more groups (before placing that many flows)."""
        needed = int(self.meta[1]) + extra
        if needed <= len(self.g_count):
            return
        for name, fill in (
            ("g_links", 0),
            ("g_count", 0.0),
            ("g_served", 0.0),
            ("g_rate", 0.0),
            ("g_cap", np.inf),
            ("g_level", 0),
            ("g_bucket", -1),
            ("g_head", NIL),
            ("g_next", np.inf),
            ("g_used", False),
            ("g_row", NIL),
            ("g_pair", 0),
            ("free", 0),
        ):
            setattr(self, name, _grow(getattr(self, name), needed, fill))

    def enable_pairs(self, n_levels: int, n_hosts: int) -> None:
        """Keep, per level, the matrix of flows per host pair (big switch, uncapped levels)."""
        self.pair_hosts = n_hosts
        self.w = np.zeros((n_levels, n_hosts, n_hosts))
        self.wt = np.zeros((n_levels, n_hosts, n_hosts))
        self.row_count = np.zeros((n_levels, n_hosts))
        self.col_count = np.zeros((n_levels, n_hosts))
        self.row_share = np.full((n_levels, n_hosts), np.inf)
        self.col_share = np.full((n_levels, n_hosts), np.inf)
        self.level_row = np.full(n_levels, NIL, dtype=np.int64)

    def new_pmap_row(self, free_rows: list[int]) -> int:
        """A pair -> group row for a shared bucket (reusing a released one)."""
        if free_rows:
            return free_rows.pop()
        row = self.n_rows
        self.n_rows += 1
        self.pmap = _grow(self.pmap, self.n_rows, NIL)
        return row

    def flow_arrays(self):
        return (
            self.f_links,
            self.f_pair,
            self.f_thr,
            self.f_group,
            self.f_prev,
            self.f_next,
            self.f_slot,
        )

    def group_arrays(self):
        return (
            self.g_links,
            self.g_count,
            self.g_served,
            self.g_rate,
            self.g_cap,
            self.g_level,
            self.g_bucket,
            self.g_head,
            self.g_next,
            self.g_used,
            self.g_row,
            self.g_pair,
            self.free,
            self.meta,
            self.pmap,
        )

    def pair_arrays(self):
        return (
            self.w,
            self.wt,
            self.row_count,
            self.col_count,
            self.row_share,
            self.col_share,
            self.level_row,
        )


# ---- groups -------------------------------------------------------------------------------------


@njit(cache=True)
def _heap_push(heap, meta, value):  # pragma: no cover - compiled
    i = meta[0]
    meta[0] += 1
    heap[i] = value
    while i > 0:
        parent = (i - 1) // 2
        if heap[parent] <= heap[i]:
            break
        heap[parent], heap[i] = heap[i], heap[parent]
        i = parent


@njit(cache=True)
def _heap_pop(heap, meta):  # pragma: no cover - compiled
    top = heap[0]
    meta[0] -= 1
    n = meta[0]
    heap[0] = heap[n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and heap[child + 1] < heap[child]:
            child += 1
        if heap[i] <= heap[child]:
            break
        heap[child], heap[i] = heap[i], heap[child]
        i = child
    return top


@njit(cache=True)
def _new_group(groups, links, bucket, row, pair):  # pragma: no cover - compiled
    (
        g_links,
        g_count,
        g_served,
        g_rate,
        g_cap,
        g_level,
        g_bucket,
        g_head,
        g_next,
        g_used,
        g_row,
        g_pair,
        free,
        meta,
        pmap,
    ) = groups
    if meta[0] > 0:
        g = _heap_pop(free, meta)
    else:
        g = meta[1]
        meta[1] += 1
    g_used[g] = True
    if g >= meta[2]:
        meta[2] = g + 1
    g_links[g, :] = links
    g_count[g] = 0.0
    g_served[g] = 0.0
    g_rate[g] = 0.0
    g_cap[g] = np.inf
    g_bucket[g] = bucket  # its level is set with every group's by set_group_levels
    g_head[g] = NIL
    g_next[g] = np.inf
    g_row[g] = row
    g_pair[g] = pair
    if row >= 0:
        pmap[row, pair] = g
    return g


@njit(cache=True)
def _free_group(groups, g):  # pragma: no cover - compiled
    g_count, g_rate, g_head, g_next, g_used, g_row, g_pair = (
        groups[1],
        groups[3],
        groups[7],
        groups[8],
        groups[9],
        groups[10],
        groups[11],
    )
    free, meta, pmap = groups[12], groups[13], groups[14]
    g_count[g] = 0.0
    g_rate[g] = 0.0
    g_head[g] = NIL
    g_next[g] = np.inf
    g_used[g] = False
    if g_row[g] >= 0 and pmap[g_row[g], g_pair[g]] == g:
        pmap[g_row[g], g_pair[g]] = NIL
    g_row[g] = NIL
    _heap_push(free, meta, g)
    while meta[2] > 0 and not g_used[meta[2] - 1]:
        meta[2] -= 1


@njit(cache=True)
def _unlink(flows, groups, f, g):  # pragma: no cover - compiled
    f_thr, f_prev, f_next = flows[2], flows[4], flows[5]
    g_head, g_next = groups[7], groups[8]
    before, after = f_prev[f], f_next[f]
    if before == NIL:
        g_head[g] = after
        g_next[g] = np.inf if after == NIL else f_thr[after]
    else:
        f_next[before] = after
    if after != NIL:
        f_prev[after] = before
    f_prev[f] = NIL
    f_next[f] = NIL


@njit(cache=True)
def _insert(flows, groups, f, g):  # pragma: no cover - compiled
    """Insert ``f`` into ``g``'s list after every flow whose threshold is not larger."""
    f_thr, f_prev, f_next = flows[2], flows[4], flows[5]
    g_head, g_next = groups[7], groups[8]
    thr = f_thr[f]
    before = NIL
    after = g_head[g]
    while after != NIL and f_thr[after] <= thr:
        before = after
        after = f_next[after]
    f_prev[f] = before
    f_next[f] = after
    if after != NIL:
        f_prev[after] = f
    if before == NIL:
        g_head[g] = f
        g_next[g] = thr
    else:
        f_next[before] = f


@njit(cache=True)
def place_flows(flows, groups, first, last, bucket, row):  # pragma: no cover - compiled
    """Move the unfinished flows ``first..last-1`` (one coflow) into ``bucket``'s groups.

    ``row`` is the bucket's pair -> group row, or -1 for one group per flow. A flow keeps the
    bits it has left; its old group is freed when it empties."""
    f_links, f_pair, f_thr, f_group = flows[0], flows[1], flows[2], flows[3]
    g_count, g_served, pmap = groups[1], groups[2], groups[14]
    for f in range(first, last):
        old = f_group[f]
        if old == DONE:
            continue
        if old >= 0:
            left = max(f_thr[f] - g_served[old], 0.0)
            _unlink(flows, groups, f, old)
            g_count[old] -= 1.0
            if g_count[old] < 0.5:
                _free_group(groups, old)
        else:
            left = f_thr[f]
        g = NIL
        if row >= 0:
            g = pmap[row, f_pair[f]]
        if g == NIL:
            g = _new_group(groups, f_links[f], bucket, row, f_pair[f])
        f_thr[f] = g_served[g] + left
        f_group[f] = g
        _insert(flows, groups, f, g)
        g_count[g] += 1.0


@njit(cache=True)
def set_group_levels(groups, pairs, bucket_level, n_levels, n_hosts):  # pragma: no cover
    """Give every used group its bucket's level; return the used groups sorted by level (stable
    counting sort), each level's segment start, and which levels take the general max-min
    (``n_hosts == 0``, a rate cap, or groups of more than one pair row). Rebuilds the per-level
    pair matrices of the others.

    Levels at or beyond ``n_levels`` (only empty, parked buckets have them) share the last
    segment."""
    g_links, g_count, g_cap, g_level, g_bucket = (
        groups[0],
        groups[1],
        groups[4],
        groups[5],
        groups[6],
    )
    g_used, g_row, meta = groups[9], groups[10], groups[13]
    w, wt, row_count, col_count, row_share, col_share, level_row = pairs
    n = meta[2]
    start = np.zeros(n_levels + 1, dtype=np.int64)
    general = np.zeros(n_levels, dtype=np.bool_)
    if n_hosts == 0:
        general[:] = True
    else:
        level_row[:] = -2  # not seen yet
    for g in range(n):
        if g_used[g]:
            level = min(bucket_level[g_bucket[g]], n_levels - 1)
            g_level[g] = level
            start[level + 1] += 1
            if g_cap[g] < np.inf:
                general[level] = True
            if n_hosts > 0:
                if level_row[level] == -2:
                    level_row[level] = g_row[g]
                elif level_row[level] != g_row[g] or g_row[g] < 0:
                    general[level] = True
    for level in range(n_levels):
        start[level + 1] += start[level]
    order = np.empty(start[n_levels], dtype=np.int64)
    fill = start[:-1].copy()
    for g in range(n):
        if g_used[g]:
            order[fill[g_level[g]]] = g
            fill[g_level[g]] += 1
    if n_hosts > 0:
        w[:] = 0.0
        wt[:] = 0.0
        row_count[:] = 0.0
        col_count[:] = 0.0
        row_share[:] = np.inf
        col_share[:] = np.inf
        for e in range(order.shape[0]):
            g = order[e]
            level = g_level[g]
            if general[level]:
                continue
            s = g_links[g, 0]
            d = g_links[g, 1] - n_hosts
            w[level, s, d] += g_count[g]
            wt[level, d, s] += g_count[g]
            row_count[level, s] += g_count[g]
            col_count[level, d] += g_count[g]
    return order, start, general


@njit(cache=True)
def slot_loads(flows, groups, slot_first, slot_last, n_hosts):  # pragma: no cover - compiled
    """Bits left of the given coflow slots (flow id ranges): in total and per host port
    (columns 0..n-1 egress of host i, n..2n-1 ingress)."""
    f_pair, f_thr, f_group = flows[1], flows[2], flows[3]
    g_served = groups[2]
    n_slots = slot_first.shape[0]
    total = np.zeros(n_slots)
    ports = np.zeros((n_slots, 2 * n_hosts))
    for i in range(n_slots):
        for f in range(slot_first[i], slot_last[i]):
            g = f_group[f]
            if g == DONE:
                continue
            left = f_thr[f] - g_served[g] if g >= 0 else f_thr[f]
            if left <= 0.0:
                continue
            total[i] += left
            ports[i, f_pair[f] // n_hosts] += left
            ports[i, n_hosts + f_pair[f] % n_hosts] += left
    return total, ports


@njit(cache=True)
def flow_remaining(flows, groups, ids):  # pragma: no cover - compiled
    """Bits left of the flows ``ids`` (0 for finished ones)."""
    f_thr, f_group = flows[2], flows[3]
    g_served = groups[2]
    out = np.zeros(ids.shape[0])
    for i in range(ids.shape[0]):
        g = f_group[ids[i]]
        if g == DONE:
            continue
        left = f_thr[ids[i]] - g_served[g] if g >= 0 else f_thr[ids[i]]
        out[i] = max(left, 0.0)
    return out


# ---- the step loop ------------------------------------------------------------------------------


@njit(cache=True)
def _allocate(
    groups, pairs, order, level_start, general, ideal, capacity, n_hosts, positive
):  # pragma: no cover - compiled
    """The per-flow rate (``g_rate``) of every group that gets one; returns how many groups,
    listed first in ``positive``, got one (the others' rates are stale and never read)."""
    g_links, g_count, g_rate, g_cap, pmap = groups[0], groups[1], groups[3], groups[4], groups[14]
    w, wt, row_count, col_count, row_share, col_share, level_row = pairs
    n_positive = 0
    if ideal:
        greedy_groups(g_links, g_count, g_cap, order, capacity, g_rate)
        for e in range(order.shape[0]):
            if g_rate[order[e]] > 0.0:
                positive[n_positive] = order[e]
                n_positive += 1
        return n_positive
    residual = capacity.copy()
    n = n_hosts
    for level in range(level_start.shape[0] - 1):
        members = order[level_start[level] : level_start[level + 1]]
        if members.shape[0] == 0:
            continue
        if general[level]:
            _fill(members, g_links, g_cap, g_count, residual, capacity, g_rate)
            for e in range(members.shape[0]):
                if g_rate[members[e]] > 0.0:
                    positive[n_positive] = members[e]
                    n_positive += 1
            continue
        rows, cols = row_share[level], col_share[level]
        pair_shares(
            w[level],
            wt[level],
            row_count[level],
            col_count[level],
            residual,
            capacity,
            n,
            rows,
            cols,
        )
        # only pairs whose two links got a share have a rate: walk those rows of the pair
        # matrix (levels the ones above starve cost O(n), not O(groups)); the rates of the
        # other groups are never read
        row = level_row[level]
        w_level = w[level]
        for src in range(n):
            if rows[src] <= 0.0:  # (inf: every pair of it froze through its other link)
                continue
            w_src = w_level[src]
            for dst in range(n):
                if w_src[dst] > 0.5 and cols[dst] > 0.0:
                    g = pmap[row, src * n + dst]
                    g_rate[g] = min(rows[src], cols[dst])
                    positive[n_positive] = g
                    n_positive += 1
    return n_positive


@njit(cache=True)
def run_steps(
    flows,
    groups,
    pairs,
    slot_left,
    order,
    level_start,
    general,
    ideal,
    capacity,
    n_hosts,
    positive,
    n_positive,
    realloc,
    now,
    limit,
    simultaneous,
    finished,
):  # pragma: no cover - compiled
    """Step from ``now`` until a coflow finishes or the clock reaches ``limit``.

    Returns ``(why, now, steps, n_positive, realloc, n_finished)``: why it stopped
    (:data:`COFLOW_DONE`, :data:`LIMIT`, :data:`STUCK`), the clock, the steps taken, how many
    groups of ``positive`` have a rate and whether the rates must be recomputed (pass both back
    when nothing else changed), and the slots that finished (the first ``n_finished`` entries
    of ``finished``)."""
    f_thr, f_group, f_next, f_slot = flows[2], flows[3], flows[5], flows[6]
    g_links, g_count, g_served, g_rate, g_level = (
        groups[0],
        groups[1],
        groups[2],
        groups[3],
        groups[5],
    )
    g_head, g_next = groups[7], groups[8]
    w, wt, row_count, col_count = pairs[0], pairs[1], pairs[2], pairs[3]
    steps = 0
    n_finished = 0
    while True:
        if realloc:
            n_positive = _allocate(
                groups, pairs, order, level_start, general, ideal, capacity, n_hosts, positive
            )
            realloc = False
        # advance to the first completion among the groups with a rate, or to the limit
        span = limit - now
        step = span
        for i in range(n_positive):
            g = positive[i]
            left = g_next[g] - g_served[g]
            if left < step * g_rate[g]:  # compare before dividing: divisions are the cost
                step = left / g_rate[g]
        if step == np.inf:
            return STUCK, now, steps, n_positive, realloc, n_finished
        if step < 0.0:
            step = 0.0
        steps += 1
        reached = step >= span
        now = limit if reached else now + step
        cutoff = step * (1.0 + simultaneous)
        ended = False
        for i in range(n_positive):
            g = positive[i]
            left = g_next[g] - g_served[g]
            g_served[g] += g_rate[g] * step
            if left > cutoff * g_rate[g]:
                continue
            # finish the flows of g that reached their threshold
            ended = True
            reach = g_served[g] + g_rate[g] * step * simultaneous + 1e-6
            if g_head[g] != NIL and f_thr[g_head[g]] > reach:
                reach = f_thr[g_head[g]]  # its next flow ends now, whatever float error says
            level = g_level[g]
            in_pairs = n_hosts > 0 and not ideal and not general[level]
            f = g_head[g]
            while f != NIL and f_thr[f] <= reach:
                nxt = f_next[f]
                f_group[f] = DONE
                g_count[g] -= 1.0
                if in_pairs:
                    s = g_links[g, 0]
                    d = g_links[g, 1] - n_hosts
                    w[level, s, d] -= 1.0
                    wt[level, d, s] -= 1.0
                    row_count[level, s] -= 1.0
                    col_count[level, d] -= 1.0
                slot = f_slot[f]
                slot_left[slot] -= 1
                if slot_left[slot] == 0:
                    finished[n_finished] = slot
                    n_finished += 1
                f = nxt
            if f != NIL:
                flows[4][f] = NIL
            g_head[g] = f
            g_next[g] = np.inf if f == NIL else f_thr[f]
            if g_count[g] < 0.5:
                _free_group(groups, g)
        if ended:
            realloc = True
        if n_finished > 0:
            return COFLOW_DONE, now, steps, n_positive, realloc, n_finished
        if reached:
            return LIMIT, now, steps, n_positive, realloc, n_finished
