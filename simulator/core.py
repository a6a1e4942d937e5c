"""The simulator's compiled core: the flow and group tables, moving flows between groups, and the
step loop that runs between two policy decisions.

Tables are plain numpy arrays (:class:`Tables` holds them and grows them) that travel through
the kernels bundled as named tuples (:class:`FlowTable`, :class:`GroupTable`,
:class:`PairTable`, and the step loop's own state), so every kernel reads a field by its name
and a step costs no Python. A kernel reads the fields it uses once, at its top, and hands the
smallest helpers the arrays themselves: a field read inside a branch or a loop costs
reference counting at every pass (measured: moving flows between groups took 2.5 times as
long), and passing a whole table to a helper that is not inlined copies it.

- A *flow* has a threshold: the service count (bits per flow) of its group at which it ends.
  The flows of a group form a doubly linked list sorted by threshold (``FlowTable.prev`` /
  ``next``, head ``GroupTable.head``), so the next to end is the head and moving a flow out is
  O(1).
- A *group* stands for ``GroupTable.n_flows`` identical flows (same level, same links, no cap)
  and counts the bits ``served`` it has given each of them. Shared buckets find a pair's group
  through a row of ``pair_group`` (pair -> group); one-flow groups (capped coflows, the ideal
  mode) have none. Freed group ids are reused lowest first (a two-level bitmap), so kernels
  scan a short prefix.
- On a big switch each level of up to :data:`MAX_LEVEL_ROWS` shared buckets (a *pair level*)
  also keeps the matrix of its flows per host pair (:class:`PairTable`: counts, transpose, row
  and column sums), updated as flows end, so its max-min is
  :func:`simulator.allocation.pair_shares` (O(n) per bottleneck link), and the step loop serves
  its groups as classes of their bottleneck link (see "the step loop" below). Its one-flow
  groups, if any (capped coflows sharing the level), stay out of the matrix: the max-min gives
  each its own rate (``pair_shares``' singles) and the step loop serves them by it.
- A level whose flows all have caps that fit keeps its rates while they fit, its groups ending
  from a heap (see "groups at a fixed rate"); other levels take the general max-min.
- :func:`run_steps` allocates rates, advances to the next completion (or the caller's limit),
  finishes the flows that end and stops as soon as a coflow is complete: the caller then tells
  the listeners and asks the policy again.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from controller.kernel_cache import njit
from simulator.allocation import (
    _REL,
    BIT_ONE,
    SPARSE_ROW,
    PairLevel,
    Singles,
    _fill,
    _filled,
    bit_words,
    clear_pair_bit,
    pair_shares,
    sparse_row,
)
from simulator.greedy import GreedyPass, greedy_start, greedy_update
from simulator.heap import heap_pop, heap_push, sort_prefix

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

# entries of GroupTable.ids
FREED = 0  # group ids freed and not handed out again
HANDED_OUT = 1  # group ids ever handed out (the next new id)
USED_PREFIX = 2  # every group in use has an id below this


class FlowTable(NamedTuple):
    """Every flow of the simulation, indexed by flow id, and its coflow slot's count."""

    links: np.ndarray  # (flows, k) int: the links the flow crosses
    pair: np.ndarray  # int: source host * hosts + destination host
    threshold: np.ndarray  # float: its group's served bits at which it ends
    group: np.ndarray  # int: its group, DONE or PENDING
    prev: np.ndarray  # int: the flow before it in its group's list, NIL at the head
    next: np.ndarray  # int: the flow after it, NIL at the tail
    slot: np.ndarray  # int: its coflow slot
    slot_left: np.ndarray  # per coflow slot: its flows not finished yet


class GroupTable(NamedTuple):
    """Every flow group, indexed by group id, with the free list of ids and the pair rows."""

    links: np.ndarray  # (groups, k) int: the links its flows cross
    n_flows: np.ndarray  # float: the identical flows it stands for
    served: np.ndarray  # float: bits served to each of its flows (an offset in a class)
    rate: np.ndarray  # float: each flow's rate (general levels)
    cap: np.ndarray  # float: each flow's rate cap, inf without one
    level: np.ndarray  # int: its level (set by set_group_levels)
    bucket: np.ndarray  # int: its bucket
    head: np.ndarray  # int: its first flow (the next to end), NIL if empty
    head_threshold: np.ndarray  # float: that flow's threshold, inf if empty
    used: np.ndarray  # bool: the id is in use
    row: np.ndarray  # int: its bucket's pair row, NIL for a one-flow group
    pair: np.ndarray  # int: its flows' host pair
    free_bits: np.ndarray  # uint64: a bit per freed id
    free_summary: np.ndarray  # uint64: a bit per nonzero word of free_bits
    ids: np.ndarray  # int [FREED, HANDED_OUT, USED_PREFIX]
    pair_group: np.ndarray  # (pair rows, pairs) int: a shared bucket's group of each pair


class PairTable(NamedTuple):
    """Per level of a big switch, the matrix of its flows per host pair (n hosts)."""

    flows: np.ndarray  # (levels, n, n): flows from host s to host d
    flows_t: np.ndarray  # (levels, n, n): its transpose
    row_count: np.ndarray  # (levels, n): flows leaving each host
    col_count: np.ndarray  # (levels, n): flows entering each host
    row_share: np.ndarray  # (levels, n): each egress link's share at the last allocation
    col_share: np.ndarray  # (levels, n): each ingress link's share
    level_rows: np.ndarray  # (levels, 1 + MAX_LEVEL_ROWS): [rows, the shared buckets' rows]
    # (levels, n, words) uint64: bit d of row s set iff flows[level, s, d] >= 1, so that the
    # kernels visit a host's pairs rather than its n hosts (PairLevel's row_bits)
    row_bits: np.ndarray
    col_bits: np.ndarray  # (levels, n, words) uint64: the same of flows_t
    row_pairs: np.ndarray  # (levels, n) int: the bits set in each row of row_bits
    col_pairs: np.ndarray  # (levels, n) int: the same of col_bits
    sparse_factor: np.ndarray  # (1,) int: PairLevel's (SPARSE_ROW unless a test set it)


class LevelPlan(NamedTuple):
    """How the levels are allocated, as :func:`set_group_levels` sorted them out."""

    order: np.ndarray  # the groups of general levels and pair levels' one-flow groups, by level
    start: np.ndarray  # each level's first entry in ``order`` (levels + 1 entries)
    general: np.ndarray  # bool per level: it takes the general max-min (else a pair level)


class SlotFlows(NamedTuple):
    """Each coflow slot's flows, as a reorder's scans read them."""

    ranges: np.ndarray  # (slots, 2): each slot's flow ids, first and one past its last
    # each slot's flows not seen finished yet, in flow order, from its first flow id: slot s's
    # are live[first:first + n_live[s]] (:class:`Tables`' ``f_live`` and ``slot_live``)
    live: np.ndarray
    n_live: np.ndarray


class StepSettings(NamedTuple):
    """What stays the same through a simulation's steps."""

    ideal: bool  # one level per rank, greedy in order (else max-min within a level)
    capacity: np.ndarray  # every link's capacity in bit/s
    n_hosts: int  # hosts of the pair matrices, 0 without them
    simultaneous: float  # flows ending within this fraction of a step end with it
    fix_rates: bool  # serve levels whose caps fit at fixed rates (see below)


class StepBuffers(NamedTuple):
    """The caller's room for a :func:`run_steps` call."""

    positive: np.ndarray  # int, at least one per group of ``LevelPlan.order``: those with a rate
    finished: np.ndarray  # int, one per active slot: the slots that finished
    # the ideal mode's greedy pass, with room for the order and the group ids (kept from
    # call to call: an offline run's first pass is ~10^8 bytes, and the pages are the cost)
    greedy: GreedyPass


def _grow(array: np.ndarray, needed: int, fill) -> np.ndarray:
    """``array`` with room for ``needed`` rows (capacity doubles; new rows are ``fill``)."""
    if needed <= len(array):
        return array
    size = max(needed, 2 * len(array), 64)
    out = np.full((size, *array.shape[1:]), fill, dtype=array.dtype)
    out[: len(array)] = array
    return out


class Tables:
    """The flow and group arrays of one simulation (see the module docstring); the kernels
    take them as :meth:`flow_table`, :meth:`group_table` and :meth:`pair_table`."""

    def __init__(self, k: int, n_pairs: int) -> None:
        self.k = k
        self.n_pairs = n_pairs
        self.n_flows = 0
        self.f_links = np.zeros((0, k), dtype=np.int64)
        self.f_pair = np.zeros(0, dtype=np.int64)
        self.f_threshold = np.zeros(0)
        self.f_group = np.zeros(0, dtype=np.int64)
        self.f_prev = np.zeros(0, dtype=np.int64)
        self.f_next = np.zeros(0, dtype=np.int64)
        self.f_slot = np.zeros(0, dtype=np.int64)
        self.g_links = np.zeros((0, k), dtype=np.int64)
        self.g_n_flows = np.zeros(0)
        self.g_served = np.zeros(0)
        self.g_rate = np.zeros(0)
        self.g_cap = np.zeros(0)
        self.g_level = np.zeros(0, dtype=np.int64)
        self.g_bucket = np.zeros(0, dtype=np.int64)
        self.g_head = np.zeros(0, dtype=np.int64)
        self.g_head_threshold = np.zeros(0)
        self.g_used = np.zeros(0, dtype=np.bool_)
        self.g_row = np.zeros(0, dtype=np.int64)
        self.g_pair = np.zeros(0, dtype=np.int64)
        # freed group ids, as bits (one per id) and a summary bit per nonzero word: the lowest
        # is found by scanning ~n/4096 words, and a step's kernels scan a short id prefix
        self.free_bits = np.zeros(0, dtype=np.uint64)
        self.free_summary = np.zeros(0, dtype=np.uint64)
        self.ids = np.zeros(3, dtype=np.int64)  # [FREED, HANDED_OUT, USED_PREFIX]
        self.pair_group = np.full((0, n_pairs), NIL, dtype=np.int64)
        self.n_rows = 0  # rows of pair_group handed out
        self.slot_left = np.zeros(0, dtype=np.int64)
        # each slot's flows not seen finished yet, in flow order: slot s's are
        # f_live[first:first + slot_live[s]] of its range (the scans of a reorder read them and
        # drop the finished ones, so an offline run's reorders stop reading finished flows)
        self.f_live = np.zeros(0, dtype=np.int64)
        self.slot_live = np.zeros(0, dtype=np.int64)
        self.enable_pairs(1, 0)

    def add_flows(self, links, pair, size_bits, slot: int) -> tuple[int, int]:
        """Append the flows of a new coflow slot; returns their id range."""
        first, last = self.n_flows, self.n_flows + len(pair)
        for name, fill in (
            ("f_links", 0),
            ("f_pair", 0),
            ("f_threshold", 0.0),
            ("f_group", DONE),
            ("f_prev", NIL),
            ("f_next", NIL),
            ("f_slot", 0),
            ("f_live", 0),
        ):
            setattr(self, name, _grow(getattr(self, name), last, fill))
        self.f_links[first:last] = links
        self.f_pair[first:last] = pair
        self.f_threshold[first:last] = size_bits
        self.f_group[first:last] = PENDING
        self.f_slot[first:last] = slot
        self.n_flows = last
        self.slot_left = _grow(self.slot_left, slot + 1, 0)
        self.slot_left[slot] = last - first
        self.f_live[first:last] = np.arange(first, last)
        self.slot_live = _grow(self.slot_live, slot + 1, 0)
        self.slot_live[slot] = last - first
        return first, last

    def reserve_groups(self, extra: int) -> None:
        """Make room for ``extra`` more groups (before placing that many flows)."""
        needed = int(self.ids[HANDED_OUT]) + extra
        if needed <= len(self.g_n_flows):
            return
        for name, fill in (
            ("g_links", 0),
            ("g_n_flows", 0.0),
            ("g_served", 0.0),
            ("g_rate", 0.0),
            ("g_cap", np.inf),
            ("g_level", 0),
            ("g_bucket", -1),
            ("g_head", NIL),
            ("g_head_threshold", np.inf),
            ("g_used", False),
            ("g_row", NIL),
            ("g_pair", 0),
        ):
            setattr(self, name, _grow(getattr(self, name), needed, fill))
        words = (len(self.g_n_flows) + 63) // 64
        self.free_bits = _grow(self.free_bits, words, 0)
        self.free_summary = _grow(self.free_summary, (words + 63) // 64, 0)

    def enable_pairs(self, n_levels: int, n_hosts: int) -> None:
        """Keep, per level, the matrix of flows per host pair (big switch, uncapped levels)."""
        self.pairs = PairTable(
            flows=np.zeros((n_levels, n_hosts, n_hosts)),
            flows_t=np.zeros((n_levels, n_hosts, n_hosts)),
            row_count=np.zeros((n_levels, n_hosts)),
            col_count=np.zeros((n_levels, n_hosts)),
            row_share=np.full((n_levels, n_hosts), np.inf),
            col_share=np.full((n_levels, n_hosts), np.inf),
            level_rows=np.zeros((n_levels, 1 + MAX_LEVEL_ROWS), dtype=np.int64),
            row_bits=np.zeros((n_levels, n_hosts, bit_words(n_hosts)), dtype=np.uint64),
            col_bits=np.zeros((n_levels, n_hosts, bit_words(n_hosts)), dtype=np.uint64),
            row_pairs=np.zeros((n_levels, n_hosts), dtype=np.int64),
            col_pairs=np.zeros((n_levels, n_hosts), dtype=np.int64),
            sparse_factor=np.array([SPARSE_ROW], dtype=np.int64),
        )

    def new_pair_row(self, free_rows: list[int]) -> int:
        """A pair -> group row for a shared bucket (reusing a released one)."""
        if free_rows:
            return free_rows.pop()
        row = self.n_rows
        self.n_rows += 1
        self.pair_group = _grow(self.pair_group, self.n_rows, NIL)
        return row

    def flow_table(self) -> FlowTable:
        """The flow arrays as the kernels take them (rebuilt after the arrays grow)."""
        return FlowTable(
            self.f_links,
            self.f_pair,
            self.f_threshold,
            self.f_group,
            self.f_prev,
            self.f_next,
            self.f_slot,
            self.slot_left,
        )

    def group_table(self) -> GroupTable:
        """The group arrays as the kernels take them (rebuilt after the arrays grow)."""
        return GroupTable(
            self.g_links,
            self.g_n_flows,
            self.g_served,
            self.g_rate,
            self.g_cap,
            self.g_level,
            self.g_bucket,
            self.g_head,
            self.g_head_threshold,
            self.g_used,
            self.g_row,
            self.g_pair,
            self.free_bits,
            self.free_summary,
            self.ids,
            self.pair_group,
        )

    def pair_table(self) -> PairTable:
        """The host-pair matrices of a big switch (empty without them)."""
        return self.pairs


# ---- groups -------------------------------------------------------------------------------------


@njit(cache=True)
def _lowest_bit(x):  # pragma: no cover - compiled
    """Index of the lowest set bit of ``x``, a nonzero uint64."""
    i = 0
    for width in (32, 16, 8, 4, 2, 1):
        mask = (np.uint64(1) << np.uint64(width)) - np.uint64(1)
        if x & mask == np.uint64(0):
            x >>= np.uint64(width)
            i += width
    return i


@njit(cache=True)
def _free_push(bits, summary, ids, g):  # pragma: no cover - compiled
    """Put group id ``g`` on the free list.

    Args:
        bits: :class:`GroupTable`'s ``free_bits`` (a bit per freed id); ``g``'s bit is set.
        summary: :class:`GroupTable`'s ``free_summary`` (a bit per nonzero word of ``bits``);
            the bit of ``g``'s word is set.
        ids: :class:`GroupTable`'s ``ids``; its :data:`FREED` count goes up by one.
        g: the group id, emptied and no longer in use.
    """
    word = g >> 6
    bits[word] |= np.uint64(1) << np.uint64(g & 63)
    summary[word >> 6] |= np.uint64(1) << np.uint64(word & 63)
    ids[FREED] += 1


@njit(cache=True)
def _free_pop(bits, summary, ids):  # pragma: no cover - compiled
    """The lowest freed id (there is one), taken off the free list.

    Args:
        bits: :class:`GroupTable`'s ``free_bits``; the id's bit is cleared.
        summary: :class:`GroupTable`'s ``free_summary``; the bit of the id's word is cleared
            if the word empties.
        ids: :class:`GroupTable`'s ``ids``; its :data:`FREED` count goes down by one.

    Returns:
        The group id (:data:`NIL` if the list is empty: callers check ``ids[FREED]`` first).
    """
    for s in range(summary.shape[0]):
        if summary[s] != np.uint64(0):
            word = s * 64 + _lowest_bit(summary[s])
            bit = _lowest_bit(bits[word])
            bits[word] &= ~(np.uint64(1) << np.uint64(bit))
            if bits[word] == np.uint64(0):
                summary[s] &= ~(np.uint64(1) << np.uint64(word & 63))
            ids[FREED] -= 1
            return word * 64 + bit
    return NIL


@njit(cache=True)
def _empty_group(groups, g):  # pragma: no cover - compiled
    """Take the emptied group ``g`` off its bucket's pair row (before reusing or freeing it).

    ``groups`` is the :class:`GroupTable`: ``g``'s entry of ``pair_group`` (if it still names
    ``g``) and its ``row`` become :data:`NIL`."""
    row, pair, pair_group = groups.row, groups.pair, groups.pair_group
    if row[g] >= 0 and pair_group[row[g], pair[g]] == g:
        pair_group[row[g], pair[g]] = NIL
    row[g] = NIL


@njit(cache=True)
def _free_group(groups, g):  # pragma: no cover - compiled
    """Free the emptied group ``g`` (its id goes back on the free list).

    ``groups`` is the :class:`GroupTable`, modified in place: ``g``'s flow count, rate, head
    and pair row are cleared, it is marked unused, and ``ids[USED_PREFIX]`` drops below the
    unused ids at the end of the prefix."""
    n_flows, rate, head, head_threshold = (
        groups.n_flows,
        groups.rate,
        groups.head,
        groups.head_threshold,
    )
    used, free_bits, free_summary, ids = (
        groups.used,
        groups.free_bits,
        groups.free_summary,
        groups.ids,
    )
    n_flows[g] = 0.0
    rate[g] = 0.0
    head[g] = NIL
    head_threshold[g] = np.inf
    used[g] = False
    _empty_group(groups, g)
    _free_push(free_bits, free_summary, ids, g)
    while ids[USED_PREFIX] > 0 and not used[ids[USED_PREFIX] - 1]:
        ids[USED_PREFIX] -= 1


@njit(cache=True)
def place_flows(flows, groups, first, last, bucket, row):  # pragma: no cover - compiled
    """Move the unfinished flows ``first..last-1`` (one coflow) into ``bucket``'s groups.

    A flow keeps the bits it has left; its old group is freed when it empties.

    Args:
        flows: the :class:`FlowTable`; the moved flows' ``threshold`` (now relative to their
            new group's ``served``), ``group``, ``prev`` and ``next`` are modified.
        groups: the :class:`GroupTable`, modified in place: groups are created, filled,
            emptied and freed.
        first: the coflow's first flow id.
        last: one past its last flow id.
        bucket: the bucket the flows move into.
        row: the bucket's pair -> group row (of ``GroupTable.pair_group``), or -1 for one
            group per flow.
    """
    # (fields read once, and the list and group steps written out, not helpers taking the
    # tables: a field read, or an array handed to a callee, costs a reference count per flow)
    f_links, f_pair, f_threshold, f_group = flows.links, flows.pair, flows.threshold, flows.group
    f_prev, f_next = flows.prev, flows.next
    n_flows, served, pair_group = groups.n_flows, groups.served, groups.pair_group
    g_links, g_rate, g_cap, g_bucket = groups.links, groups.rate, groups.cap, groups.bucket
    head, head_threshold = groups.head, groups.head_threshold
    g_used, g_row, g_pair, ids = groups.used, groups.row, groups.pair, groups.ids
    free_bits, free_summary = groups.free_bits, groups.free_summary
    k = f_links.shape[1]
    spare = NIL  # an emptied group, not freed yet
    for f in range(first, last):
        old = f_group[f]
        if old == DONE:
            continue
        if old >= 0:
            left = max(f_threshold[f] - served[old], 0.0)
            # off its old group's list
            before, after = f_prev[f], f_next[f]
            if before == NIL:
                head[old] = after
                head_threshold[old] = np.inf if after == NIL else f_threshold[after]
            else:
                f_next[before] = after
            if after != NIL:
                f_prev[after] = before
            f_prev[f] = NIL
            f_next[f] = NIL
            n_flows[old] -= 1.0
            if n_flows[old] < 0.5:
                # off its pair row (_empty_group)
                if g_row[old] >= 0 and pair_group[g_row[old], g_pair[old]] == old:
                    pair_group[g_row[old], g_pair[old]] = NIL
                g_row[old] = NIL
                if spare != NIL:
                    # freed (_free_group: its row is already off)
                    n_flows[spare] = 0.0
                    g_rate[spare] = 0.0
                    head[spare] = NIL
                    head_threshold[spare] = np.inf
                    g_used[spare] = False
                    word = spare >> 6
                    free_bits[word] |= np.uint64(1) << np.uint64(spare & 63)
                    free_summary[word >> 6] |= np.uint64(1) << np.uint64(word & 63)
                    ids[FREED] += 1
                    while ids[USED_PREFIX] > 0 and not g_used[ids[USED_PREFIX] - 1]:
                        ids[USED_PREFIX] -= 1
                spare = old
        else:
            left = f_threshold[f]
        g = NIL
        if row >= 0:
            g = pair_group[row, f_pair[f]]
        if g == NIL:
            # a new group: the one just emptied (saves freeing it and finding an id), else
            # the lowest freed id, else a new one
            if spare != NIL:
                g = spare
                spare = NIL
            elif ids[FREED] > 0:
                g = _free_pop(free_bits, free_summary, ids)
            else:
                g = ids[HANDED_OUT]
                ids[HANDED_OUT] += 1
            g_used[g] = True
            if g >= ids[USED_PREFIX]:
                ids[USED_PREFIX] = g + 1
            for c in range(k):
                g_links[g, c] = f_links[f, c]
            n_flows[g] = 0.0
            served[g] = 0.0
            g_rate[g] = 0.0
            g_cap[g] = np.inf
            g_bucket[g] = bucket  # its level is set with every group's by set_group_levels
            head[g] = NIL
            head_threshold[g] = np.inf
            g_row[g] = row
            g_pair[g] = f_pair[f]
            if row >= 0:
                pair_group[row, f_pair[f]] = g
        f_threshold[f] = served[g] + left
        f_group[f] = g
        # into its group's list, after every flow whose threshold is not larger
        thr = f_threshold[f]
        before = NIL
        after = head[g]
        while after != NIL and f_threshold[after] <= thr:
            before = after
            after = f_next[after]
        f_prev[f] = before
        f_next[f] = after
        if after != NIL:
            f_prev[after] = f
        if before == NIL:
            head[g] = f
            head_threshold[g] = thr
        else:
            f_next[before] = f
        n_flows[g] += 1.0
    if spare != NIL:
        _free_group(groups, spare)


@njit(cache=True)
def move_coflows(flows, groups, slots, buckets, slot_ranges, slot_bucket, bucket_count, bucket_row):
    # pragma: no cover - compiled
    """Move each coflow of ``slots`` into its bucket of ``buckets`` (its unfinished flows, one
    coflow after the other: :func:`place_flows`), keeping the buckets' coflow counts; returns
    the buckets it left that it emptied (a bucket left twice is listed twice).

    Args:
        flows: the :class:`FlowTable` (modified as :func:`place_flows` does).
        groups: the :class:`GroupTable` (modified as :func:`place_flows` does).
        slots: int per coflow to move: its slot.
        buckets: int per coflow: the bucket it moves into.
        slot_ranges: int ``(slot, 2)``: each slot's first flow id and one past its last.
        slot_bucket: int per slot: its bucket (-1 for none yet), set to ``buckets``.
        bucket_count: int per bucket: the coflows in it, updated.
        bucket_row: int per bucket: its pair row, or -1 for one group per flow.
    """
    n = slots.shape[0]
    left = np.empty(n, dtype=np.int64)
    for i in range(n):
        left[i] = slot_bucket[slots[i]]
        if left[i] >= 0:
            bucket_count[left[i]] -= 1
    for i in range(n):
        bucket_count[buckets[i]] += 1
    emptied = np.empty(n, dtype=np.int64)
    n_emptied = 0
    for i in range(n):
        if left[i] >= 0 and bucket_count[left[i]] == 0:
            emptied[n_emptied] = left[i]
            n_emptied += 1
    for i in range(n):
        s = slots[i]
        slot_bucket[s] = buckets[i]
        place_flows(
            flows, groups, slot_ranges[s, 0], slot_ranges[s, 1], buckets[i], bucket_row[buckets[i]]
        )
    return emptied[:n_emptied]


@njit(cache=True)
def set_group_levels(groups, pairs, bucket_level, bucket_row, live_buckets, n_levels, n_hosts):
    # pragma: no cover - compiled
    """Give every used group its bucket's level and sort out how each level is allocated.

    A level takes the general max-min (``general``) if ``n_hosts == 0``, if it holds only one-
    group-per-flow buckets (``bucket_row`` -1: capped coflows, the ideal mode) or more than
    :data:`MAX_LEVEL_ROWS` shared buckets; the others are pair levels, whose per-level pair
    matrices and rows this rebuilds from their shared buckets' groups (their one-flow groups
    are listed in ``order`` instead).

    Levels at or beyond ``n_levels`` (only empty, parked buckets have them) share the last.

    Args:
        groups: the :class:`GroupTable`; every used group's ``level`` is set.
        pairs: the :class:`PairTable`; with ``n_hosts`` > 0 its matrices and counts are
            rebuilt from the groups of pair levels, its shares reset to inf and its
            ``level_rows`` list each pair level's shared buckets' rows.
        bucket_level: int per bucket: its level.
        bucket_row: int per bucket: its row of ``GroupTable.pair_group``, -1 for one group per
            flow.
        live_buckets: int: the buckets in use, ascending (parked buckets are not and take no
            part in choosing how a level is allocated; they are never read, so a run that has
            made many buckets does not pay for them here).
        n_levels: the levels of the schedule.
        n_hosts: hosts of the pair matrices (as :class:`StepSettings`' ``n_hosts``), 0
            without them.

    Returns:
        The :class:`LevelPlan`: the groups of general levels and the one-flow groups of pair
        levels sorted by level (stable counting sort), each level's segment start in that
        order, and ``general``.
    """
    g_links, g_n_flows, g_level, g_bucket, g_used = (
        groups.links,
        groups.n_flows,
        groups.level,
        groups.bucket,
        groups.used,
    )
    w, wt, row_count, col_count = pairs.flows, pairs.flows_t, pairs.row_count, pairs.col_count
    row_share, col_share, level_rows = pairs.row_share, pairs.col_share, pairs.level_rows
    row_bits, col_bits, row_pairs, col_pairs = (
        pairs.row_bits,
        pairs.col_bits,
        pairs.row_pairs,
        pairs.col_pairs,
    )
    general = np.zeros(n_levels, dtype=np.bool_)
    if n_hosts == 0:
        general[:] = True
    else:
        level_rows[:, 0] = 0
    singles = np.zeros(n_levels, dtype=np.bool_)  # a level holds one-group-per-flow buckets
    for b in live_buckets:
        level = min(bucket_level[b], n_levels - 1)
        if general[level]:
            continue
        if bucket_row[b] < 0:
            singles[level] = True
        elif level_rows[level, 0] == MAX_LEVEL_ROWS:
            general[level] = True
        else:
            level_rows[level, 0] += 1
            level_rows[level, level_rows[level, 0]] = bucket_row[b]
    for level in range(n_levels):
        # one-flow groups alone: the general max-min, whose caps may fit (Varys' fixed rates);
        # beside shared pairs: a pair level that serves them apart (pair_shares' singles)
        if singles[level] and level_rows[level, 0] == 0:
            general[level] = True
    if n_hosts > 0:
        # clear the rows and columns with flows (a row is empty if its sum is 0: counts are
        # whole numbers), not 8 x 2 x n^2 entries at every reorder
        for level in range(w.shape[0]):
            for link in range(n_hosts):
                if row_count[level, link] != 0.0:
                    w[level, link, :] = 0.0
                    row_bits[level, link, :] = 0
                    row_pairs[level, link] = 0
                    row_count[level, link] = 0.0
                if col_count[level, link] != 0.0:
                    wt[level, link, :] = 0.0
                    col_bits[level, link, :] = 0
                    col_pairs[level, link] = 0
                    col_count[level, link] = 0.0
        row_share[:] = np.inf
        col_share[:] = np.inf
    n = groups.ids[USED_PREFIX]
    start = np.zeros(n_levels + 1, dtype=np.int64)
    for g in range(n):
        if g_used[g]:
            level = min(bucket_level[g_bucket[g]], n_levels - 1)
            g_level[g] = level
            if general[level] or bucket_row[g_bucket[g]] < 0:
                start[level + 1] += 1
                continue
            s = g_links[g, 0]
            d = g_links[g, 1] - n_hosts
            w[level, s, d] += g_n_flows[g]
            wt[level, d, s] += g_n_flows[g]
            if g_n_flows[g] >= 0.5:
                # (the pair's bits set here, not by an inlined helper: its array arguments
                # would cost a reference count each, at every group of every reorder)
                mask = BIT_ONE << np.uint64(d & 63)
                if not row_bits[level, s, d >> 6] & mask:
                    row_bits[level, s, d >> 6] |= mask
                    row_pairs[level, s] += 1
                mask = BIT_ONE << np.uint64(s & 63)
                if not col_bits[level, d, s >> 6] & mask:
                    col_bits[level, d, s >> 6] |= mask
                    col_pairs[level, d] += 1
            row_count[level, s] += g_n_flows[g]
            col_count[level, d] += g_n_flows[g]
    for level in range(n_levels):
        start[level + 1] += start[level]
    order = np.empty(start[n_levels], dtype=np.int64)
    if order.shape[0] > 0:
        fill = start[:-1].copy()
        for g in range(n):
            if g_used[g] and (general[g_level[g]] or bucket_row[g_bucket[g]] < 0):
                order[fill[g_level[g]]] = g
                fill[g_level[g]] += 1
    return LevelPlan(order, start, general)


@njit(cache=True)
def order_by_head(order, g_level, g_head):  # pragma: no cover - compiled
    """The groups of ``order`` (sorted by level, as :func:`set_group_levels` gives them) by
    level, then by head flow: release order inside a coflow, for the ideal mode's one-flow
    groups (a stable sort of each level's run).

    Args:
        order: int: group ids, by level.
        g_level: :class:`GroupTable`'s ``level``.
        g_head: :class:`GroupTable`'s ``head``.
    """
    out = order.copy()
    n = order.shape[0]
    i = 0
    while i < n:
        j = i + 1
        while j < n and g_level[order[j]] == g_level[order[i]]:
            j += 1
        in_order = True  # (groups made in release order usually are)
        for t in range(i + 1, j):
            if g_head[order[t]] < g_head[order[t - 1]]:
                in_order = False
                break
        if not in_order:
            heads = np.empty(j - i, dtype=np.int64)
            for t in range(i, j):
                heads[t - i] = g_head[order[t]]
            by_head = np.argsort(heads, kind="mergesort")
            for t in range(j - i):
                out[i + t] = order[i + by_head[t]]
        i = j
    return out


@njit(cache=True)
def ideal_order(f_group, g_n_flows, g_used, g_level, slot_flows, slots, used_prefix):
    # pragma: no cover - compiled
    """The ideal mode's order without sorting every group: each coflow of ``slots`` (the
    schedule's order) in turn, its flows' groups in flow order, each group's level set to its
    coflow's position. This is :func:`set_group_levels` then :func:`order_by_head` where every
    coflow has a level of its own and every flow a group of its own (its head), so that a
    level's groups are one coflow's, by head. ``None`` unless the groups listed are every group
    in use, each of one flow (so listed once): then those two kernels are the way.

    Args:
        f_group: :class:`FlowTable`'s ``group``.
        g_n_flows: :class:`GroupTable`'s ``n_flows``.
        g_used: :class:`GroupTable`'s ``used``.
        g_level: :class:`GroupTable`'s ``level``; set for the groups listed.
        slot_flows: the :class:`SlotFlows` (its live lists are read).
        slots: the scheduled coflows' slots, in the schedule's order.
        used_prefix: ``GroupTable.ids[USED_PREFIX]``: every group in use is below it.
    """
    ranges, live, n_live = slot_flows
    n = 0
    for i in range(slots.shape[0]):
        n += n_live[slots[i]]
    order = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(slots.shape[0]):
        first = ranges[slots[i], 0]
        for e in range(first, first + n_live[slots[i]]):
            g = f_group[live[e]]
            if g >= 0:
                if not g_used[g] or g_n_flows[g] > 1.5:
                    return None
                order[k] = g
                g_level[g] = i
                k += 1
    n_used = 0
    for g in range(used_prefix):
        if g_used[g]:
            n_used += 1
    if k != n_used:
        return None
    return order[:k]


@njit(cache=True, inline="always")
def _bits_left(f, f_group, f_threshold, g_served):  # pragma: no cover - compiled
    """Bits flow ``f`` has left: 0 once finished, its size while pending (no group yet),
    else its threshold minus what its group has served (<= 0 when it is due to finish).

    Args:
        f: the flow id.
        f_group: each flow's group (``DONE`` once finished, < 0 while pending).
        f_threshold: each flow's finishing point on its group's served count.
        g_served: each group's bits served per flow.
    """
    g = f_group[f]
    if g == DONE:
        return 0.0
    return f_threshold[f] - g_served[g] if g >= 0 else f_threshold[f]


@njit(cache=True)
def slot_loads(flows, groups, slot_first, slot_last, n_hosts, with_ports):
    # pragma: no cover - compiled
    """Bits left of the given coflow slots (flow id ranges): in total and, if ``with_ports``,
    per host port (columns 0..n-1 egress of host i, n..2n-1 ingress; else no columns).

    Args:
        flows: the :class:`FlowTable` (read only).
        groups: the :class:`GroupTable` (read only: ``served``).
        slot_first: int per slot: its first flow id.
        slot_last: int per slot: one past its last flow id.
        n_hosts: the fabric's hosts ``n`` (a flow's ``pair`` is source * n + destination).
        with_ports: also sum the bits left per host port.

    Returns:
        ``(total, ports)``: the bits left of each slot, and ``(slots, 2n)`` the bits left of
        each slot per host port (``(slots, 0)`` without ``with_ports``).
    """
    f_pair, f_threshold, f_group = flows.pair, flows.threshold, flows.group
    g_served = groups.served
    n_slots = slot_first.shape[0]
    total = np.zeros(n_slots)
    ports = np.zeros((n_slots, 2 * n_hosts if with_ports else 0))
    for i in range(n_slots):
        for f in range(slot_first[i], slot_last[i]):
            left = _bits_left(f, f_group, f_threshold, g_served)
            if left <= 0.0:
                continue
            total[i] += left
            if with_ports:
                ports[i, f_pair[f] // n_hosts] += left
                ports[i, n_hosts + f_pair[f] % n_hosts] += left
    return total, ports


@njit(cache=True)
def slot_bits_left(f_threshold, f_group, g_served, slot_flows, slots):
    # pragma: no cover - compiled
    """Each of the given coflow slots' bits left in total: :func:`slot_port_bytes`' ``total``
    (the same sums in the same order) without the ports, for the policies that read no port
    (JPAS ranks by progress, FIFO-LM by bytes left). It reads each slot's live flows and drops
    from them the flows that finished, in place.

    Args:
        f_threshold: :class:`FlowTable`'s ``threshold``.
        f_group: :class:`FlowTable`'s ``group``.
        g_served: :class:`GroupTable`'s ``served``.
        slot_flows: the :class:`SlotFlows`; the finished flows leave its live lists.
        slots: the slots.
    """
    ranges, live, n_live = slot_flows
    total = np.zeros(slots.shape[0])
    for i in range(slots.shape[0]):
        first = ranges[slots[i], 0]
        kept = first
        for e in range(first, first + n_live[slots[i]]):
            f = live[e]
            if f_group[f] == DONE:
                continue  # (adds nothing: its bits left are 0)
            live[kept] = f
            kept += 1
            left = _bits_left(f, f_group, f_threshold, g_served)
            if left <= 0.0:
                continue
            total[i] += left
        n_live[slots[i]] = kept - first
    return total


@njit(cache=True)
def slot_port_bytes(f_pair, f_threshold, f_group, g_served, slot_flows, slots, n_hosts):
    # pragma: no cover - compiled
    """Bytes left of the given coflow slots per host port, in compressed sparse rows, without
    the dense slots x ports array: the nonzero entries of :func:`slot_loads`' per-port bits
    (summed in the same flow order), each as ``bits / 8.0``, columns ascending in a row; and
    each slot's bits left in total, :func:`slot_loads`' ``total`` (summed in the same order).

    The flow and group arrays come one by one, not as the tables: unpacking a table costs
    microseconds at every call (a reorder makes one).

    Args:
        f_pair: :class:`FlowTable`'s ``pair``.
        f_threshold: :class:`FlowTable`'s ``threshold``.
        f_group: :class:`FlowTable`'s ``group``.
        g_served: :class:`GroupTable`'s ``served``.
        slot_flows: the :class:`SlotFlows` (its live lists are read; a finished flow in them
            adds nothing).
        slots: the slots, one row each.
        n_hosts: the fabric's hosts ``n`` (columns as :func:`slot_loads`).

    Returns:
        ``(row_ptr, column, size_bytes, total)``: row i's entries are
        ``row_ptr[i]:row_ptr[i + 1]``, its bits left ``total[i]``.
    """
    ranges, f_live, n_live = slot_flows
    n_slots = slots.shape[0]
    slot_first = np.empty(n_slots, dtype=np.int64)
    slot_last = np.empty(n_slots, dtype=np.int64)  # (one past its last live flow's entry)
    for i in range(n_slots):
        slot_first[i] = ranges[slots[i], 0]
        slot_last[i] = slot_first[i] + n_live[slots[i]]
    n_columns = 2 * n_hosts
    bits = np.zeros(n_columns)
    touched = np.zeros(n_columns, dtype=np.bool_)
    columns = np.empty(n_columns, dtype=np.int64)
    n_entries = 0
    for i in range(n_slots):
        n_entries += 2 * (slot_last[i] - slot_first[i])
    row_ptr = np.zeros(n_slots + 1, dtype=np.int64)
    column_out = np.empty(n_entries, dtype=np.int64)
    size_bytes = np.empty(n_entries)
    total = np.zeros(n_slots)
    k = 0
    for i in range(n_slots):
        n_touched = 0
        for e in range(slot_first[i], slot_last[i]):
            f = f_live[e]
            left = _bits_left(f, f_group, f_threshold, g_served)
            if left <= 0.0:
                continue
            total[i] += left
            for column in (f_pair[f] // n_hosts, n_hosts + f_pair[f] % n_hosts):
                if not touched[column]:
                    touched[column] = True
                    columns[n_touched] = column
                    n_touched += 1
                bits[column] += left
        sort_prefix(columns, n_touched)  # (most coflows touch a few ports)
        for m in range(n_touched):
            column = columns[m]
            if bits[column] != 0.0:
                column_out[k] = column
                size_bytes[k] = bits[column] / 8.0
                k += 1
            bits[column] = 0.0
            touched[column] = False
        row_ptr[i + 1] = k
    return row_ptr, column_out[:k].copy(), size_bytes[:k].copy(), total


@njit(cache=True)
def set_coflow_caps(flows, groups, slot_first, slot_last, gamma_s):
    # pragma: no cover - compiled
    """Cap every placed, unfinished flow of the given slots at its bits left / the slot's
    ``gamma_s`` (MADD: each flow then ends at gamma), on the flow's own group.

    Args:
        flows: the :class:`FlowTable` (read only).
        groups: the :class:`GroupTable`: ``cap`` is set, ``served`` read.
        slot_first: int per capped slot: its first flow id.
        slot_last: int per capped slot: one past its last flow id.
        gamma_s: float per capped slot: its MADD time.
    """
    f_group, f_threshold = flows.group, flows.threshold
    g_served, g_cap = groups.served, groups.cap
    for i in range(slot_first.shape[0]):
        for f in range(slot_first[i], slot_last[i]):
            g = f_group[f]
            if g >= 0:
                g_cap[g] = max(f_threshold[f] - g_served[g], 0.0) / gamma_s[i]


# ---- the step loop ------------------------------------------------------------------------------
#
# On the pair levels of a big switch every flow of pair (s, d) gets min(row share of s, column
# share of d): it is *bottlenecked* by one of its two links (the row on a tie). All the groups a
# link bottlenecks progress at that link's share, so the loop serves them together, as the
# *class* of that link (one per level and link): the class counts the bits it has served per
# flow (``served``) and keeps the smallest *key* of its members. While run_steps runs, a member
# group's ``served`` holds its offset (bits served = offset + its class's count; key =
# threshold of its head flow - offset). A step then costs O(links), not O(groups): a group is
# touched only when a flow of it ends or its bottleneck changes. Membership is not stored: it
# follows from the shares the classes hold. Every group's ``served`` is exact again on return.


class Classes(NamedTuple):
    """The classes of the pair levels, class ``level * 2n + link`` (link ``s`` egress of host
    ``s``, ``n + d`` ingress of host ``d``)."""

    served: np.ndarray  # bits the class has served each of its flows
    share: np.ndarray  # its link's share: the rate of each of its flows
    key: np.ndarray  # the smallest key of its members (inf if none)
    dirty: np.ndarray  # bool: its key must be recomputed
    dirty_list: np.ndarray  # int: [count, the dirty classes...]
    # (levels, words) uint64: per level, a bit per class (link) whose key is finite: the step's
    # scans visit those, not the level's 2n classes (most have no flows in an HPO level or a
    # one-coflow level)
    keyed: np.ndarray


@njit(cache=True, inline="always")
def _pair_class(row, col, s, d, n, base):  # pragma: no cover - compiled
    """Class of pair (s, d) under these shares of its links; NIL without a rate. (It takes the
    two shares, not the arrays: an array argument costs a reference count at every pair.)

    Args:
        row: its egress link's share (bit/s per flow, inf without flows).
        col: its ingress link's share.
        s: the source host.
        d: the destination host.
        n: the hosts.
        base: the level's first class (``level * 2n``).

    Returns:
        ``base + s`` if the egress link bottlenecks the pair (on a tie too), ``base + n + d``
        if the ingress link does, :data:`NIL` if its rate is 0 or infinite.
    """
    rate = min(row, col)
    if rate > 0.0 and rate < np.inf:
        return base + (s if row <= col else n + d)
    return NIL


@njit(cache=True)
def _class_members(row_bits, col_bits, pair_group, level_rows, share, c, n, out):
    # pragma: no cover - compiled
    """The groups of class ``c`` under the classes' ``share`` (into ``out``); returns how
    many.

    Args:
        row_bits: :class:`PairTable`'s ``row_bits`` (the pairs with flows).
        col_bits: :class:`PairTable`'s ``col_bits``.
        pair_group: :class:`GroupTable`'s ``pair_group``.
        level_rows: :class:`PairTable`'s ``level_rows``.
        share: :class:`Classes`' ``share`` (bit/s per flow of every class).
        c: the class (``level * 2n + link``).
        n: the hosts.
        out: int, room for ``n * MAX_LEVEL_ROWS`` group ids; the members fill its first
            entries.

    Returns:
        The number of members written to ``out``.
    """
    level = c // (2 * n)
    base = level * 2 * n
    egress = c - base < n
    m = 0
    for word in range(row_bits.shape[2]):
        left = row_bits[level, c - base, word] if egress else col_bits[level, c - base - n, word]
        while left:
            j = word * 64 + np.int64(trailing_zeros(left))
            left &= left - BIT_ONE
            s, d = (c - base, j) if egress else (j, c - base - n)
            if _pair_class(share[base + s], share[base + n + d], s, d, n, base) == c:
                for r in range(1, level_rows[level, 0] + 1):
                    g = pair_group[level_rows[level, r], s * n + d]
                    if g != NIL:
                        out[m] = g
                        m += 1
    return m


@njit(cache=True)
def _mark_dirty(dirty, dirty_list, c):  # pragma: no cover - compiled
    """Note that class ``c``'s key must be recomputed.

    Args:
        dirty: :class:`Classes`' ``dirty``; ``c``'s flag is set.
        dirty_list: :class:`Classes`' ``dirty_list``; ``c`` is appended unless already dirty.
        c: the class, or :data:`NIL` (then nothing changes).
    """
    if c != NIL and not dirty[c]:
        dirty[c] = True
        dirty_list[0] += 1
        dirty_list[dirty_list[0]] = c


@njit(cache=True, inline="always")
def _moves_class(old_row, new_row, old_col, col):  # pragma: no cover - compiled
    """Whether a pair with flows changes class (as :func:`_pair_class` tells) when its row's
    share goes from ``old_row`` to ``new_row`` and its column's from ``old_col`` to ``col``
    (branch-free)."""
    old_rate = min(old_row, old_col)
    new_rate = min(new_row, col)
    had = (old_rate > 0.0) & (old_rate < np.inf)
    has = (new_rate > 0.0) & (new_rate < np.inf)
    by_row = (old_row <= old_col) != (new_row <= col)
    return (had != has) | (has & by_row)


@njit(cache=True)
def _drop_moved(rows, n_rows, row_moved):  # pragma: no cover - compiled
    """Keep the first ``n_rows`` entries of ``rows`` (host ids) whose ``row_moved`` is False,
    in order, at its start; returns how many."""
    kept = 0
    for i in range(n_rows):
        if not row_moved[rows[i]]:
            rows[kept] = rows[i]
            kept += 1
    return kept


@njit(cache=True)
def _update_classes(groups, pairs, classes, level, n):  # pragma: no cover - compiled
    """Take a pair level's new shares: move the groups whose class changed.

    Only pairs of a link whose share changed can change class: every pair of a row, of a
    column that gains or loses its rate; for a column whose positive share moved, only the
    pairs whose row has a finite share (the others are bottlenecked by the column). A row is
    first checked in one branch-free pass (does any pair :func:`_moves_class`?) and its pairs
    are looked at one by one only if one does; the columns look only at the rows that did not
    move. A sparse link's pairs are read from its bits (``row_bits``, ``col_bits``); a dense
    one's from the lists of the other side's links that qualify, as its matrix row says.
    Either way in host order.

    Args:
        groups: the :class:`GroupTable`; the ``served`` offset of every group whose class
            changed moves by its old class's count minus its new class's.
        pairs: the :class:`PairTable` (read only): ``level``'s new ``row_share`` and
            ``col_share`` (from :func:`simulator.allocation.pair_shares`), its matrices,
            bits, counts and ``level_rows``.
        classes: the :class:`Classes`; the level's ``share`` entries become the new shares,
            and the classes that gain or lose members are marked dirty.
        level: the pair level.
        n: the hosts.
    """
    g_served, pair_group, level_rows = groups.served, groups.pair_group, pairs.level_rows
    c_served, c_share, dirty, dirty_list = (
        classes.served,
        classes.share,
        classes.dirty,
        classes.dirty_list,
    )
    base = level * 2 * n
    old_rows = c_share[base : base + n].copy()
    old_cols = c_share[base + n : base + 2 * n].copy()
    rows, cols = pairs.row_share[level], pairs.col_share[level]
    w_level = pairs.flows[level]
    row_bits, col_bits = pairs.row_bits[level], pairs.col_bits[level]
    row_pairs, col_pairs = pairs.row_pairs[level], pairs.col_pairs[level]
    factor = pairs.sparse_factor[0]
    # rows with a finite share; rows with flows and a share in the old or new shares (a pair
    # whose links had and have none has no rate either way: starved levels cost nothing);
    # the same of the columns is asked of their pairs as they are read
    flows = np.empty((2, n))
    flows[0], flows[1] = pairs.row_count[level], pairs.col_count[level]
    finite = np.empty(n, dtype=np.int64)
    n_finite = 0
    some = np.empty(n, dtype=np.int64)
    n_some = 0
    for link in range(n):
        if rows[link] > 0.0 and rows[link] < np.inf:
            finite[n_finite] = link
            n_finite += 1
        if (old_rows[link] > 0.0 or rows[link] > 0.0) and flows[0, link] > 0.5:
            some[n_some] = link
            n_some += 1
    row_moved = np.zeros(n, dtype=np.bool_)  # all its pairs were looked at
    for side in range(2):
        if side == 1:
            # the pairs of the rows that moved were all looked at: the columns look at the
            # others only
            n_some = _drop_moved(some, n_some, row_moved)
            n_finite = _drop_moved(finite, n_finite, row_moved)
        for link in range(n):
            old, new = (old_rows[link], rows[link]) if side == 0 else (old_cols[link], cols[link])
            if new == old:
                continue
            c_share[base + side * n + link] = new
            if flows[side, link] < 0.5:
                continue
            if side == 0:
                row_moved[link] = True
                # nearly every share of a dense level moves a little at each allocation, but
                # few pairs change class: a branch-free pass over the row finds out (written
                # out: a helper's array arguments cost a reference count each, at every row)
                changes = 0
                if not sparse_row(row_pairs[link], n, factor):
                    for d in range(n):
                        moves = _moves_class(old, new, old_cols[d], cols[d])
                        changes += (w_level[link, d] >= 0.5) & moves
                else:
                    for word in range(row_bits.shape[1]):
                        pending = row_bits[link, word]
                        while pending:
                            d = word * 64 + np.int64(trailing_zeros(pending))
                            pending &= pending - BIT_ONE
                            changes += _moves_class(old, new, old_cols[d], cols[d])
                if changes == 0:
                    continue
            whole = side == 0 or (old > 0.0) != (new > 0.0)
            # the link's pairs in host order: a row's and a sparse column's from their bits, a
            # dense column's from the rows that did not move (in a dense level nearly all do)
            sparse = side == 0 or sparse_row(col_pairs[link], n, factor)
            n_listed = n_some if whole else n_finite
            listed = 0
            word = 0
            # (the bits read side by side, not an array chosen per link: a reference count)
            left = (row_bits[link, 0] if side == 0 else col_bits[link, 0]) if sparse else BIT_ONE
            while True:
                if sparse:
                    while left == 0 and word + 1 < row_bits.shape[1]:
                        word += 1
                        left = row_bits[link, word] if side == 0 else col_bits[link, word]
                    if left == 0:
                        break
                    j = word * 64 + np.int64(trailing_zeros(left))
                    left &= left - BIT_ONE
                    # (the lists' conditions, on the link's pairs)
                    if side == 0:
                        if not (old_cols[j] > 0.0 or cols[j] > 0.0):
                            continue
                    elif row_moved[j]:
                        continue
                    elif whole and not (old_rows[j] > 0.0 or rows[j] > 0.0):
                        continue
                    elif not whole and not (rows[j] > 0.0 and rows[j] < np.inf):
                        continue
                    s, d = (link, j) if side == 0 else (j, link)
                else:
                    if listed == n_listed:
                        break
                    s, d = (some[listed] if whole else finite[listed]), link
                    listed += 1
                    if w_level[s, d] < 0.5:
                        continue
                c = _pair_class(rows[s], cols[d], s, d, n, base)
                was = _pair_class(old_rows[s], old_cols[d], s, d, n, base)
                if c == was:
                    continue
                # offset: its bits served minus its class's count (0 before the first step)
                moved = 0.0
                if was != NIL:
                    moved += c_served[was]
                    if not dirty[was]:  # (checked here: a call per pair costs)
                        _mark_dirty(dirty, dirty_list, was)
                if c != NIL:
                    moved -= c_served[c]
                    if not dirty[c]:
                        _mark_dirty(dirty, dirty_list, c)
                if moved != 0.0:
                    for r in range(1, level_rows[level, 0] + 1):
                        g = pair_group[level_rows[level, r], s * n + d]
                        if g != NIL:
                            g_served[g] += moved


@njit(cache=True)
def _refresh_keys(groups, pairs, classes, n, scratch):  # pragma: no cover - compiled
    """Recompute the smallest key of every dirty class.

    Args:
        groups: the :class:`GroupTable` (read only: ``served`` offsets, ``head_threshold``,
            ``pair_group``).
        pairs: the :class:`PairTable` (read only: ``flows``, ``flows_t``, ``level_rows``).
        classes: the :class:`Classes`; every dirty class's ``key`` is set, its ``keyed`` bit
            with it, and its ``dirty`` flag cleared, and ``dirty_list`` is emptied.
        n: the hosts.
        scratch: int, room for a class's members (``n * MAX_LEVEL_ROWS``).
    """
    g_served, head_threshold, pair_group = groups.served, groups.head_threshold, groups.pair_group
    share, keys, dirty, dirty_list = classes.share, classes.key, classes.dirty, classes.dirty_list
    keyed = classes.keyed
    row_bits, col_bits, level_rows = pairs.row_bits, pairs.col_bits, pairs.level_rows
    for i in range(1, dirty_list[0] + 1):
        c = dirty_list[i]
        dirty[c] = False
        key = np.inf
        n_members = _class_members(row_bits, col_bits, pair_group, level_rows, share, c, n, scratch)
        for j in range(n_members):
            g = scratch[j]
            if head_threshold[g] - g_served[g] < key:
                key = head_threshold[g] - g_served[g]
        keys[c] = key
        link = c % (2 * n)
        bit = BIT_ONE << np.uint64(link & 63)
        if key < np.inf:
            keyed[c // (2 * n), link >> 6] |= bit
        else:
            keyed[c // (2 * n), link >> 6] &= ~bit
    dirty_list[0] = 0


# what _caps_fit found
NO_FIT = 0  # some flow has no cap, or the caps do not fit: take the general fill
FIT = 1  # every flow takes its cap
FIT_STARVED = 2  # every flow takes its cap but those on links the levels above filled (0)


@njit(cache=True)
def _caps_fit(members, links, caps, weights, residual, capacity, rates, usage):
    # pragma: no cover - compiled
    """If every flow of a level has a cap and the caps fit in ``residual`` on every link, give
    each its cap (what max-min gives then; Varys' MADD caps usually fit) without the general
    fill. Flows on a link the levels above filled get 0, as in the general fill. Entries are
    as in :func:`simulator.allocation._fill`.

    Args:
        members: int: the level's entries (group ids).
        links: ``(entries, k)`` int: the links each entry's flows cross.
        caps: float per entry: its flows' rate cap in bit/s, inf without one.
        weights: float per entry: the flows it stands for (< 0.5: empty, ignored).
        residual: per link, the bit/s the levels above left; what the level takes is taken
            off if the caps fit, else it is unchanged.
        capacity: per link, its capacity in bit/s (to tell the links left full).
        rates: float per entry, out: each member flow's rate in bit/s (its cap, or 0);
            meaningless when :data:`NO_FIT` is returned.
        usage: per link, zero on entry: left with the bit/s the level takes on every link
            if the caps fit, zero if not.

    Returns:
        :data:`NO_FIT`, :data:`FIT` or :data:`FIT_STARVED`.
    """
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
    """If ``usage`` (bit/s per link) fits in ``residual`` (bit/s left per link) on every link,
    take it off ``residual`` and return True."""
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
# a min-heap, its ``served`` counting the bits served at ``since`` (one entry per fixed group is
# valid: the one whose time is its ``end``). The level's use of every link is kept, so a step
# checks that the caps still fit in O(links).


class FixedRates(NamedTuple):
    """The levels and groups served at fixed rates during one :func:`run_steps` call."""

    level_fixed: np.ndarray  # bool per level: its groups are fixed
    level_use: np.ndarray  # (levels, links): what a fixed level takes of every link
    group_fixed: np.ndarray  # bool per group
    since: np.ndarray  # per group: when its ``served`` was exact
    end: np.ndarray  # per group: its projected end time
    heap_times: np.ndarray  # the min-heap of end times ...
    heap_groups: np.ndarray  # ... and their groups
    heap_size: np.ndarray  # [entries in the heap]


@njit(cache=True)
def _fixed_state(n_levels, n_links, n_groups):  # pragma: no cover - compiled
    """Empty :class:`FixedRates` (the heap has room for two entries per group: stale ones are
    dropped when it fills).

    Args:
        n_levels: the levels of the :class:`LevelPlan`.
        n_links: the links (entries of ``StepSettings.capacity``).
        n_groups: group ids are below this (0 when no level can be served at fixed rates).
    """
    return FixedRates(
        np.zeros(n_levels, dtype=np.bool_),
        np.zeros((n_levels, n_links)),
        np.zeros(n_groups, dtype=np.bool_),
        np.empty(n_groups),
        np.empty(n_groups),
        np.empty(2 * n_groups + 16),
        np.empty(2 * n_groups + 16, dtype=np.int64),
        np.zeros(1, dtype=np.int64),
    )


@njit(cache=True)
def _fix(fixed, groups, g, now):  # pragma: no cover - compiled
    """Fix ``g`` at its cap from ``now`` (its ``served`` exact).

    Args:
        fixed: the :class:`FixedRates`; ``g`` is marked fixed since ``now`` and its projected
            end is recorded and pushed on the heap (stale entries are dropped if it is full).
        groups: the :class:`GroupTable` (read only: ``g``'s ``head_threshold``, ``served``
            and ``cap``).
        g: the group id, with flows and a finite cap.
        now: the simulated clock in seconds.
    """
    times, ids, size, end = fixed.heap_times, fixed.heap_groups, fixed.heap_size, fixed.end
    group_fixed = fixed.group_fixed
    group_fixed[g] = True
    fixed.since[g] = now
    end[g] = now + (groups.head_threshold[g] - groups.served[g]) / groups.cap[g]
    if size[0] == times.shape[0]:  # only stale entries can fill it: drop them
        kept = 0
        for i in range(size[0]):
            if group_fixed[ids[i]] and end[ids[i]] == times[i]:
                times[kept], ids[kept] = times[i], ids[i]
                kept += 1
        size[0] = 0
        for i in range(kept):
            heap_push(times, ids, size, times[i], ids[i])
    heap_push(times, ids, size, end[g], g)


@njit(cache=True)
def _unfix(fixed, groups, g, now):  # pragma: no cover - compiled
    """Make ``g``'s ``served`` exact at ``now`` and free it from its fixed rate.

    Args:
        fixed: the :class:`FixedRates`; ``g`` is no longer marked fixed (its heap entry goes
            stale).
        groups: the :class:`GroupTable`; ``g``'s ``served`` gains the bits served at its cap
            since it was fixed, and its ``rate`` becomes its cap.
        g: the fixed group id.
        now: the simulated clock in seconds.
    """
    groups.served[g] += groups.cap[g] * (now - fixed.since[g])
    groups.rate[g] = groups.cap[g]
    fixed.group_fixed[g] = False


@njit(cache=True)
def _next_fixed(fixed):  # pragma: no cover - compiled
    """The earliest valid end time (seconds) in the heap of ``fixed`` (the :class:`FixedRates`;
    stale entries at its top are dropped), inf if none."""
    times, ids, size = fixed.heap_times, fixed.heap_groups, fixed.heap_size
    group_fixed, end = fixed.group_fixed, fixed.end
    while size[0] > 0:
        g = ids[0]
        if group_fixed[g] and end[g] == times[0]:
            return times[0]
        heap_pop(times, ids, size)
    return np.inf


class StepState(NamedTuple):
    """What one :func:`run_steps` call keeps between its allocations."""

    classes: Classes
    fixed: FixedRates
    saved_residual: np.ndarray  # (levels, links): what each level found left
    saved_positive: np.ndarray  # per level: the groups with a rate listed before it


@njit(cache=True)
def _allocate(groups, pairs, plan, settings, state, positive, now, first):
    # pragma: no cover - compiled
    """Rates for levels ``first`` and below, in levels mode (:func:`run_steps` runs the ideal
    mode's greedy itself): ``rate`` of the groups of ``plan.order`` (those
    that get one are listed first in ``positive``; returns how many), classes for the pair
    levels' shared groups. The levels above keep their rates: what each level found left and
    how many groups of ``positive`` came before it are saved in ``state`` for that.

    Args:
        groups: the :class:`GroupTable`; the groups of ``plan.order`` get their ``rate``
            (bit/s per flow), and the fixed groups of a level whose caps no longer fit are
            unfixed.
        pairs: the :class:`PairTable`; the pair levels' ``row_share`` and ``col_share`` are
            recomputed.
        plan: the :class:`LevelPlan` of the last reorder.
        settings: the :class:`StepSettings`.
        state: the :class:`StepState` of the :func:`run_steps` call; its classes, fixed rates
            and saved residuals and counts are updated.
        positive: int, at least one per group of ``plan.order`` (:class:`StepBuffers`'
            ``positive``); out: the groups of ``plan.order`` with a rate (fixed groups are not
            listed).
        now: the simulated clock in seconds (when groups are fixed or unfixed).
        first: the highest level whose rates may have changed (0: every level).

    Returns:
        The number of groups listed in ``positive``.
    """
    g_links, g_n_flows, g_rate, g_cap = groups.links, groups.n_flows, groups.rate, groups.cap
    order, level_start, general = plan.order, plan.start, plan.general
    capacity, n = settings.capacity, settings.n_hosts
    fixed, saved_residual, saved_positive = state.fixed, state.saved_residual, state.saved_positive
    level_fixed, level_use, group_fixed = fixed.level_fixed, fixed.level_use, fixed.group_fixed
    classes, fix_rates = state.classes, settings.fix_rates
    w, wt, row_count, col_count = pairs.flows, pairs.flows_t, pairs.row_count, pairs.col_count
    row_share, col_share = pairs.row_share, pairs.col_share
    residual = saved_residual[first].copy() if first > 0 else capacity.copy()
    n_positive = saved_positive[first] if first > 0 else 0
    usage = np.zeros(capacity.shape[0])
    for level in range(first, level_start.shape[0] - 1):
        saved_residual[level, :] = residual
        saved_positive[level] = n_positive
        members = order[level_start[level] : level_start[level + 1]]
        if general[level]:
            use = level_use[level]
            if level_fixed[level]:
                if _take(use, residual):
                    continue  # its caps still fit: its groups keep their rates
                level_fixed[level] = False
                use[:] = 0.0
                for e in range(members.shape[0]):
                    if group_fixed[members[e]]:
                        _unfix(fixed, groups, members[e], now)
            scratch = use if fix_rates else usage
            fit = _caps_fit(members, g_links, g_cap, g_n_flows, residual, capacity, g_rate, scratch)
            if fit == FIT and fix_rates:
                level_fixed[level] = True
                for e in range(members.shape[0]):
                    if g_n_flows[members[e]] >= 0.5:
                        _fix(fixed, groups, members[e], now)
                continue
            scratch[:] = 0.0
            if fit == NO_FIT:
                _fill(members, g_links, g_cap, g_n_flows, residual, capacity, g_rate)
            for e in range(members.shape[0]):
                if g_rate[members[e]] > 0.0:
                    positive[n_positive] = members[e]
                    n_positive += 1
            continue
        flows = 0.0
        for s in range(n):
            flows += row_count[level, s]
        if flows < 0.5 and members.shape[0] == 0:
            continue  # (its classes emptied as their last flows ended)
        level_pairs = PairLevel(
            w[level], wt[level], row_count[level], col_count[level], row_share[level],
            col_share[level], pairs.row_bits[level], pairs.col_bits[level],
            pairs.row_pairs[level], pairs.col_pairs[level], pairs.sparse_factor,
        )  # fmt: skip
        singles = Singles(members, g_links, g_cap, g_n_flows, g_rate)
        pair_shares(level_pairs, residual, capacity, n, singles)
        for e in range(members.shape[0]):  # its one-flow groups are served at their rates
            if g_rate[members[e]] > 0.0:
                positive[n_positive] = members[e]
                n_positive += 1
        if flows >= 0.5:
            _update_classes(groups, pairs, classes, level, n)
    return n_positive


@njit(cache=True)
def _finish_flows(flows, groups, pairs, g, reach, in_pairs, finished, n_finished):
    # pragma: no cover - compiled
    """End the flows of ``g`` whose threshold is at most ``reach`` (at least its head), taking
    them off the pair matrices if ``in_pairs``; the slots they complete are appended to
    ``finished``, and the new count returned. ``g`` is freed by the caller if it emptied.

    Args:
        flows: the :class:`FlowTable`; the ended flows' ``group`` becomes :data:`DONE`, the
            new head's ``prev`` :data:`NIL`, and their slots' ``slot_left`` counts drop.
        groups: the :class:`GroupTable`; ``g``'s ``n_flows``, ``head`` and
            ``head_threshold`` are updated.
        pairs: the :class:`PairTable`; with ``in_pairs``, the ended flows leave the matrices
            and counts of ``g``'s level.
        g: the group id.
        reach: the bits served per flow (on the scale of the flows' thresholds) up to which
            flows end.
        in_pairs: ``g`` belongs to a pair level.
        finished: int (:class:`StepBuffers`' ``finished``): the slots that finished.
        n_finished: the entries of ``finished`` already used.

    Returns:
        The new number of entries used in ``finished``.
    """
    f_threshold, f_group, f_next, f_slot = flows.threshold, flows.group, flows.next, flows.slot
    f_prev = flows.prev
    slot_left, g_n_flows, g_links, head = flows.slot_left, groups.n_flows, groups.links, groups.head
    w, wt, row_count, col_count = pairs.flows, pairs.flows_t, pairs.row_count, pairs.col_count
    row_bits, col_bits = pairs.row_bits, pairs.col_bits
    n_hosts = row_count.shape[1]
    if head[g] != NIL and f_threshold[head[g]] > reach:
        reach = f_threshold[head[g]]  # its next flow ends now, whatever float error says
    level = groups.level[g]
    f = head[g]
    while f != NIL and f_threshold[f] <= reach:
        nxt = f_next[f]
        f_group[f] = DONE
        g_n_flows[g] -= 1.0
        if in_pairs:
            s = g_links[g, 0]
            d = g_links[g, 1] - n_hosts
            w[level, s, d] -= 1.0
            wt[level, d, s] -= 1.0
            if w[level, s, d] < 0.5:
                clear_pair_bit(row_bits, pairs.row_pairs, level, s, d)
                clear_pair_bit(col_bits, pairs.col_pairs, level, d, s)
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
    head[g] = f
    groups.head_threshold[g] = np.inf if f == NIL else f_threshold[f]
    return n_finished


@njit(cache=True)
def run_steps(flows, groups, pairs, plan, settings, buffers, now, limit):
    # pragma: no cover - compiled
    """Step from ``now`` until a coflow finishes or the clock reaches ``limit``.

    Args:
        flows: the :class:`FlowTable`; flows that end are marked :data:`DONE` and their
            slots' ``slot_left`` counts drop.
        groups: the :class:`GroupTable`; ``served`` and ``rate`` move on and emptied groups
            are freed (every ``served`` is bits served again on return).
        pairs: the :class:`PairTable`; the pair levels' shares are recomputed and ended flows
            leave the matrices.
        plan: the :class:`LevelPlan` of the last reorder.
        settings: the :class:`StepSettings`.
        buffers: the caller's :class:`StepBuffers`; ``finished`` receives the slots that
            finished.
        now: the simulated clock in seconds.
        limit: the clock in seconds at which to stop at the latest (the next event or
            policy tick).

    Returns:
        ``(why, now, steps, n_finished)``: why it stopped (:data:`COFLOW_DONE`, :data:`LIMIT`,
        :data:`STUCK`), the clock, the steps taken and the slots that finished (the first
        ``n_finished`` entries of ``buffers.finished``).
    """
    g_links, g_n_flows, g_served, g_rate = groups.links, groups.n_flows, groups.served, groups.rate
    g_cap, g_level, head_threshold = groups.cap, groups.level, groups.head_threshold
    pair_group, level_rows = groups.pair_group, pairs.level_rows
    row_bits, col_bits = pairs.row_bits, pairs.col_bits
    order, level_start, general = plan.order, plan.start, plan.general
    positive, finished = buffers.positive, buffers.finished
    ideal, capacity, simultaneous = settings.ideal, settings.capacity, settings.simultaneous
    # (no general level, no fixed-rate state to set up: JPAS makes 5,000 calls)
    fix_rates = settings.fix_rates and not ideal and general.any()
    n_fixable = groups.ids[USED_PREFIX] if fix_rates else 0
    fixed = _fixed_state(level_start.shape[0] - 1, capacity.shape[0], n_fixable)
    n = settings.n_hosts
    n_levels = level_start.shape[0] - 1
    use_classes = n > 0 and not ideal
    n_classes = n_levels * 2 * n if use_classes else 0
    classes = Classes(
        np.zeros(n_classes),
        np.zeros(n_classes),
        np.full(n_classes, np.inf),
        np.zeros(n_classes, dtype=np.bool_),
        np.zeros(n_classes + 1, dtype=np.int64),
        np.zeros((n_levels if use_classes else 0, (2 * n + 63) // 64), dtype=np.uint64),
    )
    served, share, key = classes.served, classes.share, classes.key
    dirty, dirty_list, keyed = classes.dirty, classes.dirty_list, classes.keyed
    level_fixed, level_use, group_fixed = fixed.level_fixed, fixed.level_use, fixed.group_fixed
    heap_times, heap_groups, heap_size = fixed.heap_times, fixed.heap_groups, fixed.heap_size
    state = StepState(
        classes,
        fixed,
        np.empty((max(n_levels, 1), capacity.shape[0])),
        np.zeros(max(n_levels, 1), dtype=np.int64),
    )
    greedy = buffers.greedy
    greedy.state[2] = 0  # (not started on this order)
    greedy_ended, n_greedy_ended = greedy.ended, greedy.n_ended
    active = np.zeros(n_levels, dtype=np.bool_)  # pair levels whose classes have a share
    scratch = np.empty(max(n * MAX_LEVEL_ROWS, 1), dtype=np.int64)
    ending = np.empty(n_classes, dtype=np.int64)
    before = np.empty(n_classes)
    # the highest level a completion changed: the levels above keep their rates
    changed = 0
    steps = 0
    n_finished = 0
    realloc = True
    n_positive = 0
    why = LIMIT
    while True:
        if realloc:
            if ideal:  # (simulator.greedy finds what the emptied groups change)
                if greedy.state[2] == 0:
                    greedy_start(greedy, g_links, g_n_flows, g_cap, order, capacity, g_rate)
                else:
                    greedy_update(greedy, g_links, g_n_flows, g_cap, order, capacity, g_rate)
                n_positive = greedy.n_positive[0]
                greedy_positive = greedy.positive
                for i in range(n_positive):
                    positive[i] = order[greedy_positive[i]]
            else:
                n_positive = _allocate(groups, pairs, plan, settings, state, positive, now, changed)
                _refresh_keys(groups, pairs, classes, n, scratch)
            changed = n_levels
            for level in range(n_levels if use_classes else 0):
                active[level] = False
                for word in range(keyed.shape[1]):
                    if keyed[level, word]:
                        active[level] = True
                        break
            realloc = False
        # advance to the first completion among the classes and the groups with a rate, or
        # to the limit (compare before dividing: divisions are the cost)
        span = limit - now
        step = span
        # (the classes with a finite key, each level's in class order, from its bits)
        for level in range(n_levels if use_classes else 0):
            if active[level]:
                for word in range(keyed.shape[1]):
                    bits = keyed[level, word]
                    while bits:
                        c = level * 2 * n + word * 64 + np.int64(trailing_zeros(bits))
                        bits &= bits - BIT_ONE
                        if key[c] - served[c] < step * share[c]:
                            step = (key[c] - served[c]) / share[c]
        for i in range(n_positive):
            g = positive[i]
            left = head_threshold[g] - g_served[g]
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
            for word in range(keyed.shape[1]):
                bits = keyed[level, word]
                while bits:
                    c = level * 2 * n + word * 64 + np.int64(trailing_zeros(bits))
                    bits &= bits - BIT_ONE
                    left = key[c] - served[c]
                    before[c] = served[c]
                    served[c] += share[c] * step
                    if left <= cutoff * share[c]:
                        ending[n_ending] = c
                        n_ending += 1
        for k in range(n_ending):
            c = ending[k]
            n_members = _class_members(
                row_bits, col_bits, pair_group, level_rows, share, c, n, scratch
            )
            for j in range(n_members):
                g = scratch[j]
                if head_threshold[g] - g_served[g] - before[c] > cutoff * share[c]:
                    continue
                ended = True
                changed = min(changed, c // (2 * n))
                reach = g_served[g] + served[c] + share[c] * step * simultaneous + 1e-6
                n_finished = _finish_flows(
                    flows, groups, pairs, g, reach, True, finished, n_finished
                )
                if g_n_flows[g] < 0.5:
                    _free_group(groups, g)
            _mark_dirty(dirty, dirty_list, c)
        for i in range(n_positive):
            g = positive[i]
            left = head_threshold[g] - g_served[g]
            g_served[g] += g_rate[g] * step
            if left > cutoff * g_rate[g]:
                continue
            ended = True
            changed = min(changed, g_level[g])
            reach = g_served[g] + g_rate[g] * step * simultaneous + 1e-6
            # (a group with a rate of its own is not in a pair matrix)
            n_finished = _finish_flows(flows, groups, pairs, g, reach, False, finished, n_finished)
            if g_n_flows[g] < 0.5:
                _free_group(groups, g)
                if ideal:  # its greedy redoes what this reaches
                    greedy_ended[n_greedy_ended[0]] = g
                    n_greedy_ended[0] += 1
        while fix_rates and _next_fixed(fixed) - then <= cutoff:
            g = heap_groups[0]
            heap_pop(heap_times, heap_groups, heap_size)
            _unfix(fixed, groups, g, now)
            ended = True
            changed = min(changed, g_level[g])
            before_count = g_n_flows[g]
            reach = g_served[g] + g_cap[g] * step * simultaneous + 1e-6
            n_finished = _finish_flows(flows, groups, pairs, g, reach, False, finished, n_finished)
            for c in range(g_links.shape[1]):  # its level now takes less of its links
                link = g_links[g, c]
                use = level_use[g_level[g], link] - g_cap[g] * (before_count - g_n_flows[g])
                level_use[g_level[g], link] = max(use, 0.0)
            if g_n_flows[g] < 0.5:
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
                if group_fixed[order[e]]:
                    _unfix(fixed, groups, order[e], now)
    # every member's served back from offset to bits served
    for c in range(n_classes):
        if served[c] != 0.0:
            n_members = _class_members(
                row_bits, col_bits, pair_group, level_rows, share, c, n, scratch
            )
            for j in range(n_members):
                g_served[scratch[j]] += served[c]
    return why, now, steps, n_finished
