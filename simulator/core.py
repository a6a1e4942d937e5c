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
  Freed group ids are reused lowest first (a two-level bitmap), so kernels scan a short prefix.
- On a big switch each uncapped level (a *pair level*, up to :data:`MAX_LEVEL_ROWS` shared
  buckets) also keeps the matrix of its flows per host pair (``pairs``: counts, transpose, row
  and column sums), updated as flows end, so its max-min is
  :func:`simulator.allocation.pair_shares` (O(n) per bottleneck link), and the step loop serves
  its groups as classes of their bottleneck link (see "the step loop" below).
- A level whose flows all have caps that fit keeps its rates while they fit, its groups ending
  from a heap (see "groups at a fixed rate"); other levels take the general max-min.
- :func:`run_steps` allocates rates, advances to the next completion (or the caller's limit),
  finishes the flows that end and stops as soon as a coflow is complete: the caller then tells
  the listeners and asks the policy again.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from simulator.allocation import _REL, _fill, _filled, greedy_groups, pair_shares

DONE = -1  # group of a finished flow
PENDING = -2  # released, not placed yet (its threshold is then its size in bits)
NIL = -1  # end of a linked list, no group
# A pair level may hold this many shared buckets (pair rows): more make it a general level. A
# coflow keeps its bucket as it changes level while there is room, so a re-ranking moves few
# flows; a class's members are looked up in every row of its level.
MAX_LEVEL_ROWS = 4

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
        # freed group ids, as bits (one per id) and a summary bit per nonzero word: the lowest
        # is found by scanning ~n/4096 words, and a step's kernels scan a short id prefix
        self.free_bits = np.zeros(0, dtype=np.uint64)
        self.free_summary = np.zeros(0, dtype=np.uint64)
        # [freed ids, ids ever handed out, used prefix (every used id is below)]
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
        ):
            setattr(self, name, _grow(getattr(self, name), needed, fill))
        words = (len(self.g_count) + 63) // 64
        self.free_bits = _grow(self.free_bits, words, 0)
        self.free_summary = _grow(self.free_summary, (words + 63) // 64, 0)

    def enable_pairs(self, n_levels: int, n_hosts: int) -> None:
        """Keep, per level, the matrix of flows per host pair (big switch, uncapped levels)."""
        self.pair_hosts = n_hosts
        self.w = np.zeros((n_levels, n_hosts, n_hosts))
        self.wt = np.zeros((n_levels, n_hosts, n_hosts))
        self.row_count = np.zeros((n_levels, n_hosts))
        self.col_count = np.zeros((n_levels, n_hosts))
        self.row_share = np.full((n_levels, n_hosts), np.inf)
        self.col_share = np.full((n_levels, n_hosts), np.inf)
        # per level: [number of pair rows, the rows...] of the shared buckets at that level
        self.level_row = np.zeros((n_levels, 1 + MAX_LEVEL_ROWS), dtype=np.int64)

    def new_pmap_row(self, free_rows: list[int]) -> int:
        """A pair -> group row for a shared bucket (reusing a released one)."""
        if free_rows:
            return free_rows.pop()
        row = self.n_rows
        self.n_rows += 1
        self.pmap = _grow(self.pmap, self.n_rows, NIL)
        return row

    def flow_arrays(self):
        """The per-flow arrays, in the order the step kernels take them."""
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
        """The per-group arrays, in the order the step kernels take them."""
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
            (self.free_bits, self.free_summary),
            self.meta,
            self.pmap,
        )

    def pair_arrays(self):
        """The host-pair arrays of a big switch, in the order the step kernels take them."""
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
def _lowest_bit(x):  # pragma: no cover - compiled
    """Index of the lowest set bit of a nonzero uint64."""
    i = 0
    for width in (32, 16, 8, 4, 2, 1):
        mask = (np.uint64(1) << np.uint64(width)) - np.uint64(1)
        if x & mask == np.uint64(0):
            x >>= np.uint64(width)
            i += width
    return i


@njit(cache=True)
def _free_push(free, meta, g):  # pragma: no cover - compiled
    bits, summary = free
    word = g >> 6
    bits[word] |= np.uint64(1) << np.uint64(g & 63)
    summary[word >> 6] |= np.uint64(1) << np.uint64(word & 63)
    meta[0] += 1


@njit(cache=True)
def _free_pop(free, meta):  # pragma: no cover - compiled
    """The lowest freed id (there is one)."""
    bits, summary = free
    for s in range(summary.shape[0]):
        if summary[s] != np.uint64(0):
            word = s * 64 + _lowest_bit(summary[s])
            bit = _lowest_bit(bits[word])
            bits[word] &= ~(np.uint64(1) << np.uint64(bit))
            if bits[word] == np.uint64(0):
                summary[s] &= ~(np.uint64(1) << np.uint64(word & 63))
            meta[0] -= 1
            return word * 64 + bit
    return NIL


@njit(cache=True)
def _new_group(groups, links, bucket, row, pair, reuse):  # pragma: no cover - compiled
    """A group for ``pair`` in ``bucket``: ``reuse`` if it is a group id just emptied (and not
    freed: saves freeing and finding an id per flow a reorder moves), else a free id."""
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
    if reuse != NIL:
        g = reuse
    elif meta[0] > 0:
        g = _free_pop(free, meta)
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
def _empty_group(groups, g):  # pragma: no cover - compiled
    """Take an emptied group off its bucket's pair row (before reusing or freeing it)."""
    g_row, g_pair, pmap = groups[10], groups[11], groups[14]
    if g_row[g] >= 0 and pmap[g_row[g], g_pair[g]] == g:
        pmap[g_row[g], g_pair[g]] = NIL
    g_row[g] = NIL


@njit(cache=True)
def _free_group(groups, g):  # pragma: no cover - compiled
    g_count, g_rate, g_head, g_next, g_used = groups[1], groups[3], groups[7], groups[8], groups[9]
    free, meta = groups[12], groups[13]
    g_count[g] = 0.0
    g_rate[g] = 0.0
    g_head[g] = NIL
    g_next[g] = np.inf
    g_used[g] = False
    _empty_group(groups, g)
    _free_push(free, meta, g)
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
    spare = NIL  # an emptied group, not freed yet
    for f in range(first, last):
        old = f_group[f]
        if old == DONE:
            continue
        if old >= 0:
            left = max(f_thr[f] - g_served[old], 0.0)
            _unlink(flows, groups, f, old)
            g_count[old] -= 1.0
            if g_count[old] < 0.5:
                _empty_group(groups, old)
                if spare != NIL:
                    _free_group(groups, spare)
                spare = old
        else:
            left = f_thr[f]
        g = NIL
        if row >= 0:
            g = pmap[row, f_pair[f]]
        if g == NIL:
            g = _new_group(groups, f_links[f], bucket, row, f_pair[f], spare)
            spare = NIL
        f_thr[f] = g_served[g] + left
        f_group[f] = g
        _insert(flows, groups, f, g)
        g_count[g] += 1.0
    if spare != NIL:
        _free_group(groups, spare)


@njit(cache=True)
def set_group_levels(groups, pairs, bucket_level, bucket_row, bucket_live, n_levels, n_hosts):
    # pragma: no cover - compiled
    """Give every used group its bucket's level and sort out how each level is allocated.

    A level takes the general max-min (``general``) if ``n_hosts == 0``, if it holds a one-group-
    per-flow bucket (``bucket_row`` -1: capped coflows, the ideal mode) or more than
    :data:`MAX_LEVEL_ROWS` shared buckets; the others are pair levels, whose per-level pair
    matrices and rows this rebuilds. Returns the groups of general levels sorted by level
    (stable counting sort), each level's segment start in that order, and ``general``.

    Levels at or beyond ``n_levels`` (only empty, parked buckets have them) share the last."""
    g_links, g_count, g_level, g_bucket = groups[0], groups[1], groups[5], groups[6]
    g_used, meta = groups[9], groups[13]
    w, wt, row_count, col_count, row_share, col_share, level_row = pairs
    general = np.zeros(n_levels, dtype=np.bool_)
    if n_hosts == 0:
        general[:] = True
    else:
        level_row[:, 0] = 0
    for b in range(bucket_level.shape[0]):
        level = min(bucket_level[b], n_levels - 1)
        if not bucket_live[b] or general[level]:
            continue
        if bucket_row[b] < 0 or level_row[level, 0] == MAX_LEVEL_ROWS:
            general[level] = True
        else:
            level_row[level, 0] += 1
            level_row[level, level_row[level, 0]] = bucket_row[b]
    if n_hosts > 0:
        # clear the rows and columns with flows (a row is empty if its sum is 0: counts are
        # whole numbers), not 8 x 2 x n^2 entries at every reorder
        for level in range(w.shape[0]):
            for link in range(n_hosts):
                if row_count[level, link] != 0.0:
                    w[level, link, :] = 0.0
                    row_count[level, link] = 0.0
                if col_count[level, link] != 0.0:
                    wt[level, link, :] = 0.0
                    col_count[level, link] = 0.0
        row_share[:] = np.inf
        col_share[:] = np.inf
    n = meta[2]
    start = np.zeros(n_levels + 1, dtype=np.int64)
    for g in range(n):
        if g_used[g]:
            level = min(bucket_level[g_bucket[g]], n_levels - 1)
            g_level[g] = level
            if general[level]:
                start[level + 1] += 1
                continue
            s = g_links[g, 0]
            d = g_links[g, 1] - n_hosts
            w[level, s, d] += g_count[g]
            wt[level, d, s] += g_count[g]
            row_count[level, s] += g_count[g]
            col_count[level, d] += g_count[g]
    for level in range(n_levels):
        start[level + 1] += start[level]
    order = np.empty(start[n_levels], dtype=np.int64)
    if order.shape[0] > 0:
        fill = start[:-1].copy()
        for g in range(n):
            if g_used[g] and general[g_level[g]]:
                order[fill[g_level[g]]] = g
                fill[g_level[g]] += 1
    return order, start, general


@njit(cache=True)
def slot_loads(flows, groups, slot_first, slot_last, n_hosts, with_ports):
    # pragma: no cover - compiled
    """Bits left of the given coflow slots (flow id ranges): in total and, if ``with_ports``,
    per host port (columns 0..n-1 egress of host i, n..2n-1 ingress; else no columns)."""
    f_pair, f_thr, f_group = flows[1], flows[2], flows[3]
    g_served = groups[2]
    n_slots = slot_first.shape[0]
    total = np.zeros(n_slots)
    ports = np.zeros((n_slots, 2 * n_hosts if with_ports else 0))
    for i in range(n_slots):
        for f in range(slot_first[i], slot_last[i]):
            g = f_group[f]
            if g == DONE:
                continue
            left = f_thr[f] - g_served[g] if g >= 0 else f_thr[f]
            if left <= 0.0:
                continue
            total[i] += left
            if with_ports:
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
#
# On the pair levels of a big switch every flow of pair (s, d) gets min(row share of s, column
# share of d): it is *bottlenecked* by one of its two links (the row on a tie). All the groups a
# link bottlenecks progress at that link's share, so the loop serves them together, as the
# *class* of that link (one per level and link): the class counts the bits it has served per
# flow (``served``) and keeps the smallest *key* of its members. While run_steps runs, a member
# group's ``g_served`` holds its offset (bits served = offset + its class's count; key =
# threshold of its head flow - offset). A step then costs O(links), not O(groups): a group is
# touched only when a flow of it ends or its bottleneck changes. Membership is not stored: it
# follows from the shares the classes hold. Every ``g_served`` is exact again on return.

# class state: c_float rows
_SERVED, _SHARE, _KEY = 0, 1, 2


@njit(cache=True)
def _pair_class(rows, cols, s, d, n, base):  # pragma: no cover - compiled
    """Class of pair (s, d) under these row / column shares; NIL without a rate."""
    rate = min(rows[s], cols[d])
    if rate > 0.0 and rate < np.inf:
        return base + (s if rows[s] <= cols[d] else n + d)
    return NIL


@njit(cache=True)
def _class_members(w, wt, pmap, level_row, c_share, c, n, out):  # pragma: no cover - compiled
    """The groups of class ``c`` (into ``out``); returns how many."""
    level = c // (2 * n)
    base = level * 2 * n
    rows, cols = c_share[base : base + n], c_share[base + n : base + 2 * n]
    m = 0
    for j in range(n):
        s, d = (c - base, j) if c - base < n else (j, c - base - n)
        weight = w[level, s, d] if c - base < n else wt[level, d, s]
        if weight > 0.5 and _pair_class(rows, cols, s, d, n, base) == c:
            for r in range(1, level_row[level, 0] + 1):
                g = pmap[level_row[level, r], s * n + d]
                if g != NIL:
                    out[m] = g
                    m += 1
    return m


@njit(cache=True)
def _mark_dirty(dirty, n_dirty, c):  # pragma: no cover - compiled
    """Note that class ``c``'s key must be recomputed (``dirty`` flags it, ``n_dirty`` holds
    the count, then the dirty classes)."""
    if c != NIL and not dirty[c]:
        dirty[c] = True
        n_dirty[0] += 1
        n_dirty[n_dirty[0]] = c


@njit(cache=True)
def _update_classes(groups, pairs, c_float, dirty, n_dirty, level, n):
    # pragma: no cover - compiled
    """Take a pair level's new shares: move the groups whose class changed.

    Only pairs of a link whose share changed can change class: every pair of a row, of a
    column that gains or loses its rate; for a column whose positive share moved, only the
    pairs whose row has a finite share (the others are bottlenecked by the column)."""
    w, wt, row_share, col_share, level_row = pairs[0], pairs[1], pairs[4], pairs[5], pairs[6]
    g_served, pmap = groups[2], groups[14]
    base = level * 2 * n
    old_rows = c_float[_SHARE, base : base + n].copy()
    old_cols = c_float[_SHARE, base + n : base + 2 * n].copy()
    rows, cols = row_share[level], col_share[level]
    w_level, wt_level = w[level], wt[level]
    # rows with a finite share; rows and columns with flows and a share in the old or new
    # shares (a pair whose links had and have none has no rate either way: starved levels
    # cost nothing)
    flows = np.empty((2, n))
    flows[0], flows[1] = pairs[2][level], pairs[3][level]
    finite = np.empty(n, dtype=np.int64)
    n_finite = 0
    some = np.empty((2, n), dtype=np.int64)
    n_some = np.zeros(2, dtype=np.int64)
    for side in range(2):
        for link in range(n):
            old, new = (old_rows[link], rows[link]) if side == 0 else (old_cols[link], cols[link])
            if side == 0 and new > 0.0 and new < np.inf:
                finite[n_finite] = link
                n_finite += 1
            if (old > 0.0 or new > 0.0) and flows[side, link] > 0.5:
                some[side, n_some[side]] = link
                n_some[side] += 1
    row_moved = np.zeros(n, dtype=np.bool_)  # all its pairs were looked at
    for side in range(2):
        for link in range(n):
            old, new = (old_rows[link], rows[link]) if side == 0 else (old_cols[link], cols[link])
            if new == old:
                continue
            c_float[_SHARE, base + side * n + link] = new
            if flows[side, link] < 0.5:
                continue
            if side == 0:
                row_moved[link] = True
            whole = side == 0 or (old > 0.0) != (new > 0.0)
            for j in range(n_some[1 - side] if whole else n_finite):
                if side == 0:
                    s, d = link, some[1, j]
                    weight = w_level[s, d]
                else:
                    s, d = (some[0, j] if whole else finite[j]), link
                    weight = wt_level[d, s]
                if weight < 0.5 or (side == 1 and row_moved[s]):
                    continue
                c = _pair_class(rows, cols, s, d, n, base)
                was = _pair_class(old_rows, old_cols, s, d, n, base)
                if c == was:
                    continue
                # offset: its bits served minus its class's count (0 before the first step)
                moved = 0.0
                if was != NIL:
                    moved += c_float[_SERVED, was]
                    if not dirty[was]:  # (checked here: a call per pair costs)
                        _mark_dirty(dirty, n_dirty, was)
                if c != NIL:
                    moved -= c_float[_SERVED, c]
                    if not dirty[c]:
                        _mark_dirty(dirty, n_dirty, c)
                if moved != 0.0:
                    for r in range(1, level_row[level, 0] + 1):
                        g = pmap[level_row[level, r], s * n + d]
                        if g != NIL:
                            g_served[g] += moved


@njit(cache=True)
def _refresh_keys(groups, pairs, c_float, dirty, n_dirty, n, scratch):
    # pragma: no cover - compiled
    """Recompute the smallest key of every dirty class."""
    g_served, g_next, pmap = groups[2], groups[8], groups[14]
    w, wt, level_row = pairs[0], pairs[1], pairs[6]
    for i in range(1, n_dirty[0] + 1):
        c = n_dirty[i]
        dirty[c] = False
        key = np.inf
        for j in range(_class_members(w, wt, pmap, level_row, c_float[_SHARE], c, n, scratch)):
            g = scratch[j]
            if g_next[g] - g_served[g] < key:
                key = g_next[g] - g_served[g]
        c_float[_KEY, c] = key
    n_dirty[0] = 0


# what _caps_fit found
NO_FIT = 0  # some flow has no cap, or the caps do not fit: take the general fill
FIT = 1  # every flow takes its cap
FIT_STARVED = 2  # every flow takes its cap but those on links the levels above filled (0)


@njit(cache=True)
def _caps_fit(members, links, caps, weights, residual, capacity, rates, usage):
    # pragma: no cover - compiled
    """If every flow of a level has a cap and the caps fit in ``residual`` on every link, give
    each its cap (what max-min gives then; Varys' MADD caps usually fit) without the general
    fill. Flows on a link the levels above filled get 0, as in the general fill. Returns
    :data:`NO_FIT`, :data:`FIT` or :data:`FIT_STARVED`; ``usage`` (zero on entry) is left with
    what the level takes on every link if they fit, zero if not."""
    k = links.shape[1]
    for i in range(members.shape[0]):
        if weights[members[i]] >= 0.5 and caps[members[i]] == np.inf:
            return NO_FIT
    result = FIT
    for i in range(members.shape[0]):
        g = members[i]
        rates[g] = 0.0
        if weights[g] < 0.5:
            continue
        starved = False
        for c in range(k):
            starved = starved or _filled(residual, capacity, links[g, c])
        if starved:
            result = FIT_STARVED
            continue
        rates[g] = caps[g]
        for c in range(k):
            usage[links[g, c]] += caps[g] * weights[g]
    if not _take(usage, residual):
        usage[:] = 0.0
        return NO_FIT
    return result


@njit(cache=True)
def _take(usage, residual):  # pragma: no cover - compiled
    """If ``usage`` fits in ``residual`` on every link, take it off and return True."""
    for link in range(usage.shape[0]):
        if usage[link] > residual[link] * (1.0 + _REL):
            return False
    for link in range(usage.shape[0]):
        residual[link] = max(residual[link] - usage[link], 0.0)
    return True


# ---- groups at a fixed rate ------------------------------------------------------------------
#
# A general level whose flows all take their caps (Varys' MADD) keeps those rates as long as the
# caps fit, so its groups need no per-step work: each is *fixed* with its projected end time in
# a min-heap, its ``g_served`` counting the bits served at ``t0`` (one entry per fixed group is
# valid: the one whose time is its ``end``). The level's use of every link is kept, so a step
# checks that the caps still fit in O(links).


@njit(cache=True)
def _fixed_state(n_levels, n_links, n_groups):  # pragma: no cover - compiled
    return (
        np.zeros(n_levels, dtype=np.bool_),  # 0 level fixed
        np.zeros((n_levels, n_links)),  # 1 its use of every link
        np.zeros(n_groups, dtype=np.bool_),  # 2 group fixed
        np.empty(n_groups),  # 3 t0: when its g_served was exact
        np.empty(n_groups),  # 4 end: its projected end time
        np.empty(2 * n_groups + 16),  # 5 heap times
        np.empty(2 * n_groups + 16, dtype=np.int64),  # 6 heap groups
        np.zeros(1, dtype=np.int64),  # 7 heap size
    )


@njit(cache=True)
def _end_push(times, ids, size, t, g):  # pragma: no cover - compiled
    """Push (end time ``t``, group ``g``) on the min-heap of fixed groups' end times."""
    i = size[0]
    size[0] += 1
    times[i], ids[i] = t, g
    while i > 0:
        parent = (i - 1) // 2
        if times[parent] <= times[i]:
            break
        times[parent], times[i] = times[i], times[parent]
        ids[parent], ids[i] = ids[i], ids[parent]
        i = parent


@njit(cache=True)
def _end_pop(times, ids, size):  # pragma: no cover - compiled
    """Drop the earliest entry of that heap."""
    size[0] -= 1
    n = size[0]
    times[0], ids[0] = times[n], ids[n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and times[child + 1] < times[child]:
            child += 1
        if times[i] <= times[child]:
            break
        times[child], times[i] = times[i], times[child]
        ids[child], ids[i] = ids[i], ids[child]
        i = child


@njit(cache=True)
def _fix(fixed, groups, g, now):  # pragma: no cover - compiled
    """Fix ``g`` at its cap from ``now`` (its ``g_served`` exact)."""
    g_served, g_cap, g_next = groups[2], groups[4], groups[8]
    g_fixed, t0, end, times, ids, size = fixed[2], fixed[3], fixed[4], fixed[5], fixed[6], fixed[7]
    g_fixed[g] = True
    t0[g] = now
    end[g] = now + (g_next[g] - g_served[g]) / g_cap[g]
    if size[0] == times.shape[0]:  # only stale entries can fill it: drop them
        kept = 0
        for i in range(size[0]):
            if g_fixed[ids[i]] and end[ids[i]] == times[i]:
                times[kept], ids[kept] = times[i], ids[i]
                kept += 1
        size[0] = 0
        for i in range(kept):
            _end_push(times, ids, size, times[i], ids[i])
    _end_push(times, ids, size, end[g], g)


@njit(cache=True)
def _unfix(fixed, groups, g, now):  # pragma: no cover - compiled
    """Make ``g``'s ``g_served`` exact at ``now`` and free it from its fixed rate."""
    groups[2][g] += groups[4][g] * (now - fixed[3][g])
    groups[3][g] = groups[4][g]
    fixed[2][g] = False


@njit(cache=True)
def _next_fixed(fixed):  # pragma: no cover - compiled
    """The earliest valid end time in the heap (stale entries dropped), inf if none."""
    g_fixed, end, times, ids, size = fixed[2], fixed[4], fixed[5], fixed[6], fixed[7]
    while size[0] > 0:
        g = ids[0]
        if g_fixed[g] and end[g] == times[0]:
            return times[0]
        _end_pop(times, ids, size)
    return np.inf


@njit(cache=True)
def _allocate(
    groups, pairs, c_float, dirty, n_dirty, order, level_start, general, ideal, capacity, n_hosts,
    positive, fixed, fix_rates, now, first, saved_residual, saved_positive,
):  # fmt: skip  # pragma: no cover - compiled
    """Rates for levels ``first`` and below: ``g_rate`` of the groups of general levels (those
    that get one are listed first in ``positive``; returns how many), classes for the pair
    levels. The levels above keep their rates: what each level found left and how many groups
    of ``positive`` came before it are saved for that (``saved_residual``, ``saved_positive``)."""
    g_links, g_count, g_rate, g_cap = groups[0], groups[1], groups[3], groups[4]
    w, wt, row_count, col_count, row_share, col_share = (
        pairs[0],
        pairs[1],
        pairs[2],
        pairs[3],
        pairs[4],
        pairs[5],
    )
    n_positive = 0
    if ideal:
        greedy_groups(g_links, g_count, g_cap, order, capacity, g_rate)
        for e in range(order.shape[0]):
            if g_rate[order[e]] > 0.0:
                positive[n_positive] = order[e]
                n_positive += 1
        return n_positive
    residual = saved_residual[first].copy() if first > 0 else capacity.copy()
    n_positive = saved_positive[first] if first > 0 else 0
    usage = np.zeros(capacity.shape[0])
    n = n_hosts
    for level in range(first, level_start.shape[0] - 1):
        saved_residual[level, :] = residual
        saved_positive[level] = n_positive
        members = order[level_start[level] : level_start[level + 1]]
        if general[level]:
            level_fixed, use = fixed[0], fixed[1][level]
            if level_fixed[level]:
                if _take(use, residual):
                    continue  # its caps still fit: its groups keep their rates
                level_fixed[level] = False
                use[:] = 0.0
                for e in range(members.shape[0]):
                    if fixed[2][members[e]]:
                        _unfix(fixed, groups, members[e], now)
            scratch = use if fix_rates else usage
            fit = _caps_fit(members, g_links, g_cap, g_count, residual, capacity, g_rate, scratch)
            if fit == FIT and fix_rates:
                level_fixed[level] = True
                for e in range(members.shape[0]):
                    if g_count[members[e]] >= 0.5:
                        _fix(fixed, groups, members[e], now)
                continue
            scratch[:] = 0.0
            if fit == NO_FIT:
                _fill(members, g_links, g_cap, g_count, residual, capacity, g_rate)
            for e in range(members.shape[0]):
                if g_rate[members[e]] > 0.0:
                    positive[n_positive] = members[e]
                    n_positive += 1
            continue
        flows = 0.0
        for s in range(n):
            flows += row_count[level, s]
        if flows < 0.5:
            continue  # (its classes emptied as their last flows ended)
        pair_shares(
            w[level],
            wt[level],
            row_count[level],
            col_count[level],
            residual,
            capacity,
            n,
            row_share[level],
            col_share[level],
        )
        _update_classes(groups, pairs, c_float, dirty, n_dirty, level, n)
    return n_positive


@njit(cache=True)
def _finish_flows(flows, groups, pairs, g, reach, in_pairs, n_hosts, slot_left, finished,
                  n_finished):  # fmt: skip  # pragma: no cover - compiled
    """End the flows of ``g`` whose threshold is at most ``reach`` (at least its head);
    returns the new count of finished slots. ``g`` is freed by the caller if it emptied."""
    f_thr, f_group, f_prev, f_next, f_slot = flows[2], flows[3], flows[4], flows[5], flows[6]
    g_links, g_count, g_level, g_head, g_next = (
        groups[0],
        groups[1],
        groups[5],
        groups[7],
        groups[8],
    )
    w, wt, row_count, col_count = pairs[0], pairs[1], pairs[2], pairs[3]
    if g_head[g] != NIL and f_thr[g_head[g]] > reach:
        reach = f_thr[g_head[g]]  # its next flow ends now, whatever float error says
    level = g_level[g]
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
        f_prev[f] = NIL
    g_head[g] = f
    g_next[g] = np.inf if f == NIL else f_thr[f]
    return n_finished


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
    now,
    limit,
    simultaneous,
    finished,
    fix_rates,
):  # pragma: no cover - compiled
    """Step from ``now`` until a coflow finishes or the clock reaches ``limit``.

    Returns ``(why, now, steps, n_finished)``: why it stopped (:data:`COFLOW_DONE`,
    :data:`LIMIT`, :data:`STUCK`), the clock, the steps taken and the slots that finished (the
    first ``n_finished`` entries of ``finished``). ``positive`` is scratch room for the groups
    of general levels; ``fix_rates`` fixes the rates of levels whose caps fit (see above)."""
    g_links, g_count, g_served, g_rate, g_cap, g_level, g_next = (
        groups[0],
        groups[1],
        groups[2],
        groups[3],
        groups[4],
        groups[5],
        groups[8],
    )
    w, wt, level_row, pmap = pairs[0], pairs[1], pairs[6], groups[14]
    # (no general level, no fixed-rate state to set up: JPAS makes 5,000 calls)
    fix_rates = fix_rates and not ideal and general.any()
    n_fixable = groups[13][2] if fix_rates else 0
    fixed = _fixed_state(level_start.shape[0] - 1, capacity.shape[0], n_fixable)
    level_fixed, fixed_use, fixed_ids = fixed[0], fixed[1], fixed[6]
    n = n_hosts
    n_levels = level_start.shape[0] - 1
    use_classes = n > 0 and not ideal
    n_classes = n_levels * 2 * n if use_classes else 0
    c_float = np.zeros((3, n_classes))
    c_float[_KEY, :] = np.inf
    served, share, key = c_float[_SERVED], c_float[_SHARE], c_float[_KEY]
    dirty = np.zeros(n_classes, dtype=np.bool_)
    n_dirty = np.zeros(n_classes + 1, dtype=np.int64)  # [count, dirty classes...]
    active = np.zeros(n_levels, dtype=np.bool_)  # pair levels whose classes have a share
    scratch = np.empty(max(n * MAX_LEVEL_ROWS, 1), dtype=np.int64)
    ending = np.empty(n_classes, dtype=np.int64)
    before = np.empty(n_classes)
    # the highest level a completion changed: the levels above keep their rates
    changed = 0
    saved_residual = np.empty((max(n_levels, 1), capacity.shape[0]))
    saved_positive = np.zeros(max(n_levels, 1), dtype=np.int64)
    steps = 0
    n_finished = 0
    realloc = True
    n_positive = 0
    why = LIMIT
    while True:
        if realloc:
            n_positive = _allocate(
                groups,
                pairs,
                c_float,
                dirty,
                n_dirty,
                order,
                level_start,
                general,
                ideal,
                capacity,
                n,
                positive,
                fixed,
                fix_rates,
                now,
                changed,
                saved_residual,
                saved_positive,
            )
            changed = n_levels
            _refresh_keys(groups, pairs, c_float, dirty, n_dirty, n, scratch)
            for level in range(n_levels if use_classes else 0):
                active[level] = False
                for c in range(level * 2 * n, (level + 1) * 2 * n):
                    if key[c] < np.inf:
                        active[level] = True
                        break
            realloc = False
        # advance to the first completion among the classes and the groups with a rate, or
        # to the limit (compare before dividing: divisions are the cost)
        span = limit - now
        step = span
        for level in range(n_levels if use_classes else 0):
            if active[level]:
                for c in range(level * 2 * n, (level + 1) * 2 * n):
                    if key[c] - served[c] < step * share[c]:
                        step = (key[c] - served[c]) / share[c]
        for i in range(n_positive):
            g = positive[i]
            left = g_next[g] - g_served[g]
            if left < step * g_rate[g]:
                step = left / g_rate[g]
        if fix_rates and _next_fixed(fixed) - now < step:
            step = _next_fixed(fixed) - now
        if step == np.inf:
            why = STUCK
            break
        if step < 0.0:
            step = 0.0
        steps += 1
        reached = step >= span
        then = now
        now = limit if reached else now + step
        cutoff = step * (1.0 + simultaneous)
        ended = False
        n_ending = 0
        for level in range(n_levels if use_classes else 0):
            if not active[level]:
                continue
            for c in range(level * 2 * n, (level + 1) * 2 * n):
                if key[c] == np.inf:
                    continue
                left = key[c] - served[c]
                before[c] = served[c]
                served[c] += share[c] * step
                if left <= cutoff * share[c]:
                    ending[n_ending] = c
                    n_ending += 1
        for k in range(n_ending):
            c = ending[k]
            for j in range(_class_members(w, wt, pmap, level_row, share, c, n, scratch)):
                g = scratch[j]
                if g_next[g] - g_served[g] - before[c] > cutoff * share[c]:
                    continue
                ended = True
                changed = min(changed, c // (2 * n))
                reach = g_served[g] + served[c] + share[c] * step * simultaneous + 1e-6
                n_finished = _finish_flows(
                    flows, groups, pairs, g, reach, True, n, slot_left, finished, n_finished
                )
                if g_count[g] < 0.5:
                    _free_group(groups, g)
            _mark_dirty(dirty, n_dirty, c)
        for i in range(n_positive):
            g = positive[i]
            left = g_next[g] - g_served[g]
            g_served[g] += g_rate[g] * step
            if left > cutoff * g_rate[g]:
                continue
            ended = True
            changed = min(changed, g_level[g])
            reach = g_served[g] + g_rate[g] * step * simultaneous + 1e-6
            in_pairs = use_classes and not general[g_level[g]]
            n_finished = _finish_flows(
                flows, groups, pairs, g, reach, in_pairs, n, slot_left, finished, n_finished
            )
            if g_count[g] < 0.5:
                _free_group(groups, g)
        while fix_rates and _next_fixed(fixed) - then <= cutoff:
            g = fixed_ids[0]
            _end_pop(fixed[5], fixed_ids, fixed[7])
            _unfix(fixed, groups, g, now)
            ended = True
            changed = min(changed, g_level[g])
            before_count = g_count[g]
            reach = g_served[g] + g_cap[g] * step * simultaneous + 1e-6
            n_finished = _finish_flows(
                flows, groups, pairs, g, reach, False, n, slot_left, finished, n_finished
            )
            for c in range(g_links.shape[1]):  # its level now takes less of its links
                link = g_links[g, c]
                use = fixed_use[g_level[g], link] - g_cap[g] * (before_count - g_count[g])
                fixed_use[g_level[g], link] = max(use, 0.0)
            if g_count[g] < 0.5:
                _free_group(groups, g)
            else:
                _fix(fixed, groups, g, now)
        if ended:
            realloc = True
        if n_finished > 0:
            why = COFLOW_DONE
            break
        if reached:
            break
    for level in range(level_fixed.shape[0]):
        if level_fixed[level]:
            for e in range(level_start[level], level_start[level + 1]):
                if fixed[2][order[e]]:
                    _unfix(fixed, groups, order[e], now)
    # every member's g_served back from offset to bits served
    for c in range(n_classes):
        if served[c] != 0.0:
            for j in range(_class_members(w, wt, pmap, level_row, share, c, n, scratch)):
                g_served[scratch[j]] += served[c]
    return why, now, steps, n_finished
