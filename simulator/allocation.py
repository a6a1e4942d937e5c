"""Rate allocation of the flow-level simulator, compiled with numba.

Flows are rows of an ``(n, k)`` array of link indices (a big switch uses 2 links per flow, the
source's egress and the destination's ingress; a leaf-spine fabric adds the two leaf uplinks;
unused columns point at a padding link of infinite capacity).

- :func:`_fill`: max-min fair within a level with per-flow caps, work-conserving: a level takes
  what the levels above it left. Progressive filling, exact: the most constrained link's flows
  are frozen at its fair share, flows capped below the current share are frozen at their cap,
  until every flow is frozen. Each link is a bottleneck once, so one level costs
  O(flows x k + links^2).
- :func:`greedy_groups`: the "ideal" mode: each flow in turn takes the minimum of what is
  left on its links (and its cap).
- :func:`pair_shares`: the engine's hot path on a big switch: max-min over the matrix of flows
  per host pair, O(n) per bottleneck link however many pairs are active.

Their plain-array forms, for checks, are in :mod:`simulator.reference`.

The first call compiles the kernels (a few seconds; cached on disk afterwards).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from controller.kernel_cache import njit
from simulator.heap import heap_pop, heap_push, heap_replace, heapify, sort_prefix

# relative slack when comparing shares, so that float error never leaves a link a hair short
_REL = 1e-9


@njit(cache=True)
def _filled(residual, capacity, link):  # pragma: no cover - compiled
    """Whether the levels above left ``link`` full: its flows get 0 at this level.

    Args:
        residual: per link, the bit/s the levels above left.
        capacity: per link, its capacity in bit/s (a link of infinite capacity is never full).
        link: the link.
    """
    return residual[link] <= 1e-12 * capacity[link] and capacity[link] < np.inf


@njit(cache=True)
def _freeze(f, rate, links, weights, residual, count, rates):  # pragma: no cover - compiled
    """Give entry ``f`` its final ``rate`` and take its flows off their links.

    Args:
        f: the entry (a row of ``links``).
        rate: the rate of each of its flows in bit/s.
        links: ``(entries, k)`` int: the links each entry's flows cross.
        weights: float per entry: the identical flows it stands for.
        residual: per link, the bit/s left; each of ``f``'s links loses ``rate * weights[f]``.
        count: per link, the flows (weights) not frozen yet; each of ``f``'s links loses
            ``weights[f]``.
        rates: float per entry, bit/s; ``rates[f]`` is set.
    """
    rates[f] = rate
    for c in range(links.shape[1]):
        link = links[f, c]
        residual[link] = max(residual[link] - rate * weights[f], 0.0)
        count[link] -= weights[f]


@njit(cache=True)
def _fill(members, links, caps, weights, residual, capacity, rates):  # pragma: no cover
    """Max-min fair per-flow rates of ``members`` (entry indices) on ``residual``; updates both.

    Entry i stands for ``weights[i]`` identical flows that all get ``rates[i]``. Entries on a
    link that the levels above left full get 0 (their ``rates`` are left as they are, 0) and
    take no further part: exactly what max-min gives them, without their bookkeeping.

    Args:
        members: int: the level's entries (indices into the per-entry arrays).
        links: ``(entries, k)`` int: the links each entry's flows cross.
        caps: float per entry: its flows' rate cap in bit/s, inf without one.
        weights: float per entry: the identical flows it stands for (< 0.5: an empty group,
            which gets 0).
        residual: per link, the bit/s the levels above left; what the level takes is taken
            off.
        capacity: per link, its capacity in bit/s (to tell the links left full).
        rates: float per entry, out: each member flow's rate in bit/s.
    """
    k = links.shape[1]
    n_links = residual.shape[0]
    kept_members = np.empty(members.shape[0], dtype=np.int64)
    n = 0
    for i in range(members.shape[0]):
        starved = weights[members[i]] < 0.5  # an empty group
        if starved:
            rates[members[i]] = 0.0
            continue
        for c in range(k):
            link = links[members[i], c]
            if _filled(residual, capacity, link):
                starved = True
                break
        if starved:
            rates[members[i]] = 0.0
        else:
            kept_members[n] = members[i]
            n += 1
    members = kept_members[:n]
    if n == 0:
        return
    count = np.zeros(n_links)  # flows (weights) on each link
    entries = np.zeros(n_links, dtype=np.int64)
    for i in range(n):
        for c in range(k):
            count[links[members[i], c]] += weights[members[i]]
            entries[links[members[i], c]] += 1
    # entries of every link (CSR), to freeze a bottleneck link's flows without a full scan
    start = np.zeros(n_links + 1, dtype=np.int64)
    for link in range(n_links):
        start[link + 1] = start[link] + entries[link]
    fill = start[:-1].copy()
    on_link = np.empty(start[n_links], dtype=np.int64)
    for i in range(n):
        for c in range(k):
            link = links[members[i], c]
            on_link[fill[link]] = i
            fill[link] += 1
    # flows with a finite cap, lowest cap first (most flows have none)
    n_capped = 0
    for i in range(n):
        if caps[members[i]] < np.inf:
            n_capped += 1
    capped_idx = np.empty(n_capped, dtype=np.int64)
    n_capped = 0
    for i in range(n):
        if caps[members[i]] < np.inf:
            capped_idx[n_capped] = i
            n_capped += 1
    cap_values = np.empty(n_capped)
    for j in range(n_capped):
        cap_values[j] = caps[members[capped_idx[j]]]
    by_cap = capped_idx[np.argsort(cap_values)]
    next_capped = 0
    frozen = np.zeros(n, dtype=np.bool_)
    left = n
    # links this level uses; compacted as they empty, so the scans below stay short
    live = np.empty(n_links, dtype=np.int64)
    n_live = 0
    for link in range(n_links):
        if entries[link] > 0:
            live[n_live] = link
            n_live += 1
    while left > 0:
        share = np.inf
        kept = 0
        for j in range(n_live):
            link = live[j]
            if count[link] > 0.5:
                live[kept] = link
                kept += 1
                # compare before dividing: a division per link and round was the kernel's cost
                if residual[link] < share * count[link]:
                    share = residual[link] / count[link]
        n_live = kept
        if share == np.inf:
            break  # only empty entries are left
        if share < 0.0:
            share = 0.0
        while next_capped < n_capped and frozen[by_cap[next_capped]]:
            next_capped += 1
        if next_capped < n_capped and caps[members[by_cap[next_capped]]] <= share * (1 + _REL):
            # flows capped below the fair share take their cap
            while next_capped < n_capped:
                i = by_cap[next_capped]
                if frozen[i]:
                    next_capped += 1
                    continue
                cap = caps[members[i]]
                if cap > share * (1 + _REL):
                    break
                _freeze(members[i], max(cap, 0.0), links, weights, residual, count, rates)
                frozen[i] = True
                left -= 1
                next_capped += 1
            continue
        limit = share * (1 + _REL)
        for j in range(n_live):
            link = live[j]
            if count[link] < 0.5 or residual[link] > limit * count[link]:
                continue
            for e in range(start[link], start[link + 1]):
                i = on_link[e]
                if frozen[i]:
                    continue
                _freeze(members[i], share, links, weights, residual, count, rates)
                frozen[i] = True
                left -= 1


class PairLevel(NamedTuple):
    """One level of a big switch as the matrix of its flows per host pair (``n`` hosts)."""

    flows: np.ndarray  # (n, n): flows[s, d] flows from host s's egress to host d's ingress
    flows_t: np.ndarray  # (n, n): its transpose, flows_t[d, s]
    row_count: np.ndarray  # (n,): flows leaving each host (row sums)
    col_count: np.ndarray  # (n,): flows entering each host (column sums)
    row_share: np.ndarray  # (n,): out: each egress link's fair share (inf without flows)
    col_share: np.ndarray  # (n,): out: each ingress link's fair share
    # (n, words) uint64: bit d of row s set iff flows[s, d] >= 1 (pair_bits), so that a
    # frozen link of a sparse row visits its pairs, not its n hosts (HPO levels hold a few
    # pairs per host)
    row_bits: np.ndarray
    col_bits: np.ndarray  # (n, words) uint64: the same of flows_t
    row_pairs: np.ndarray  # (n,) int: the bits set in each row of row_bits
    col_pairs: np.ndarray  # (n,) int: the same of col_bits
    # (1,) int: a row is read by its bits while its pairs x this < n (SPARSE_ROW; an array, so
    # that a test can make every row dense or sparse without compiling anew)
    sparse_factor: np.ndarray


# one bit per host of a pair row: uint64 words (numba: a uint64 mixed with an int is a float)
BIT_ONE = np.uint64(1)


def bit_words(n: int) -> int:
    """The uint64 words of a row of ``n`` bits."""
    return (n + 63) // 64


def pair_bits(flows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # (the bits little-endian)
    """``(n, words)`` uint64: bit ``d`` of row ``s`` set iff ``flows[s, d] >= 1``, and the bits
    set per row (a :class:`PairLevel`'s ``row_bits`` and ``row_pairs``; of ``flows_t`` its
    ``col_bits`` and ``col_pairs``)."""
    n = flows.shape[0]
    padded = np.zeros((n, bit_words(n) * 64), dtype=np.uint8)
    padded[:, :n] = flows >= 0.5
    bits = np.packbits(padded, axis=1, bitorder="little").view("<u8").astype(np.uint64)
    return bits, padded.sum(axis=1, dtype=np.int64)


# A row with fewer pairs than one in SPARSE_ROW of the hosts is visited by its bits; a denser
# one by a branch-free pass over the whole row, which the compiler vectorises (by bits, the
# dense levels of the Facebook trace ran 1.5x slower). Both visit the same pairs in the same
# order and differ only by updates that subtract 0 (the capacities are finite: Fabric)
SPARSE_ROW = 8


@njit(cache=True, inline="always")
def sparse_row(pairs, n, factor):  # pragma: no cover - compiled
    """Whether a row of ``pairs`` pairs with flows, of ``n`` hosts, is visited by its bits
    (``factor``: :data:`SPARSE_ROW`, or what a test set)."""
    return pairs * factor < n


@njit(cache=True, inline="always")
def clear_pair_bit(bits, pairs, level, s, d):  # pragma: no cover - compiled
    """Clear bit ``d`` of row ``s`` of ``level``'s ``bits``, taking it off ``pairs[level, s]``
    if it was set."""
    mask = BIT_ONE << np.uint64(d & 63)
    if bits[level, s, d >> 6] & mask:
        bits[level, s, d >> 6] &= ~mask
        pairs[level, s] -= 1


class Singles(NamedTuple):
    """The groups of a pair level that its matrix does not hold: one flow each, usually with a
    rate cap (Varys' MADD caps on the coflows that share the lowest level). Indexed by group id
    (``GroupTable``'s arrays); a big switch, so ``links[g]`` is ``(s, n + d)``."""

    members: np.ndarray  # int: the level's one-flow groups
    links: np.ndarray  # (groups, 2) int: each group's egress and ingress link
    caps: np.ndarray  # float per group: its flow's rate cap in bit/s, inf without one
    weights: np.ndarray  # float per group: its flows (< 0.5: an empty group, which gets 0)
    rates: np.ndarray  # float per group, out: each member's rate in bit/s


@njit(cache=True, inline="always")
def _freeze_link(link, share, count, residual, live, out_share):  # pragma: no cover - compiled
    """Freeze one side's ``link`` at ``share`` (its flows' rate): it takes ``share`` per flow
    from its residual and leaves the live links.

    The arrays are one side's (the egress links or the ingress links) in :func:`pair_shares`,
    ``(n,)`` each.

    Args:
        link: the link's index on its side (its host).
        share: the rate of each of its flows in bit/s.
        count: the flows on each link not frozen yet; the link's becomes 0.
        residual: the bit/s left on each link (a view of ``pair_shares``' ``residual``); the
            link's loses ``share`` per flow.
        live: 1.0 per link not frozen yet; the link's becomes 0.
        out_share: :class:`PairLevel`'s ``row_share`` or ``col_share``; the link's is set to
            ``share``.
    """
    out_share[link] = share
    residual[link] = max(residual[link] - share * count[link], 0.0)
    count[link] = 0.0
    live[link] = 0.0


@njit(cache=True, inline="always")
def _spread_share(share, pairs, bits, sparse, row, other_count, other_residual, other_live):
    # pragma: no cover - compiled
    """The flows of a link just frozen at ``share`` take it on the other side's links:
    ``pairs[row, j]`` of them cross that side's link ``j``, whose count and residual drop.

    Args:
        share: the frozen link's share, bit/s per flow.
        pairs: ``(n, n)``: :class:`PairLevel`'s ``flows`` (the frozen link an egress link)
            or ``flows_t`` (an ingress link).
        bits: its ``row_bits`` or ``col_bits``.
        sparse: the row is sparse (:func:`sparse_row`): visited by its bits (the other
            links' updates would subtract 0), else whole.
        row: the frozen link's host.
        other_count: the other side's flows not frozen yet, per link; drops by ``pairs``.
        other_residual: the other side's bit/s left, per link; drops by ``share`` per flow.
        other_live: the other side's 1.0 per link not frozen yet (0 masks the updates).
    """
    if not sparse:
        for j in range(pairs.shape[0]):
            x = pairs[row, j] * other_live[j]  # links already frozen keep what they have
            other_count[j] -= x
            other_residual[j] = max(other_residual[j] - share * x, 0.0)
        return
    for word in range(bits.shape[1]):
        left = bits[row, word]
        while left:
            j = word * 64 + np.int64(trailing_zeros(left))
            left &= left - BIT_ONE
            x = pairs[row, j] * other_live[j]
            other_count[j] -= x
            other_residual[j] = max(other_residual[j] - share * x, 0.0)


@njit(cache=True)
def _recount_side(hits, level, other_side, cnt, live, other_live, n):
    # pragma: no cover - compiled
    """One side of :func:`_recount_starved`: this side's counts lose the flows of the other
    side's links just frozen at 0, or are recounted from the other side's live links,
    whichever are fewer. A row sparser than :data:`SPARSE_ROW` is read by its bits (its other
    entries would add 0). (The row loops are written out: a helper's array arguments cost a
    reference count each, at every row.)

    Args:
        hits: int: the links just frozen at 0 (``s`` for egress ``s``, ``n + d`` for ingress
            ``d``); those of the other side count.
        level: the :class:`PairLevel`: the other side's links' pairs are read from
            ``flows_t`` (row ``d``: ingress link ``d``'s) and ``col_bits`` if the other side
            is the ingress links, else from ``flows`` and ``row_bits``.
        other_side: 1 if the other side is the ingress links (this side the egress), else 0.
        cnt: this side's flows on each link not frozen yet; updated for its live links.
        live: this side's 1.0 per link not frozen yet.
        other_live: the other side's.
        n: the hosts.
    """
    # (chosen once a call: the loops below read them at every pair)
    matrix = level.flows_t if other_side == 1 else level.flows
    bits = level.col_bits if other_side == 1 else level.row_bits
    n_pairs = level.col_pairs if other_side == 1 else level.row_pairs
    factor = level.sparse_factor[0]
    frozen = 0
    for link in hits:
        if (link >= n) == (other_side == 1):
            frozen += 1
    alive = 0
    for j in range(n):
        if other_live[j] > 0.0:
            alive += 1
    # the other side's rows to add: its links just frozen, taken off this side's counts (adding
    # matrix * -live is subtracting matrix * live, float for float); or its live links,
    # counted afresh (matrix * 1.0) and kept for this side's live links
    subtract = frozen <= alive
    rows = np.empty(n, dtype=np.int64)
    n_rows = 0
    if subtract:
        for link in hits:
            if (link >= n) == (other_side == 1):
                rows[n_rows] = link - n if other_side == 1 else link
                n_rows += 1
        target, weight = cnt, -live
    else:
        for j in range(n):
            if other_live[j] > 0.0:
                rows[n_rows] = j
                n_rows += 1
        target, weight = np.zeros(n), np.ones(n)
    for k in range(n_rows):
        j = rows[k]
        if not sparse_row(n_pairs[j], n, factor):
            for i in range(n):
                target[i] += matrix[j, i] * weight[i]
            continue
        for word in range(bits.shape[1]):
            left = bits[j, word]
            while left:
                i = word * 64 + np.int64(trailing_zeros(left))
                left &= left - BIT_ONE
                target[i] += matrix[j, i] * weight[i]
    if not subtract:
        for i in range(n):
            if live[i] > 0.0:
                cnt[i] = target[i]


@njit(cache=True)
def _recount_starved(hits, level, row_cnt, col_cnt, row_live, col_live, n):
    # pragma: no cover - compiled
    """Take the links of ``hits``, just frozen at 0 (``s`` for egress ``s``, ``n + d`` for
    ingress ``d``), out of the counts at once (they take nothing, so only the other side's
    counts move): each side's counts are updated from the frozen links of the other side, or
    recounted from its live ones, whichever are fewer (lower levels are mostly starved).

    Args:
        hits: int: the links just frozen at 0 (their ``row_live`` / ``col_live`` already 0).
        level: the :class:`PairLevel` (its matrices, bits and pair counts are read).
        row_cnt: the flows on each egress link not frozen yet; updated (0 for frozen links).
        col_cnt: the flows on each ingress link not frozen yet; updated likewise.
        row_live: 1.0 per egress link not frozen yet.
        col_live: 1.0 per ingress link not frozen yet.
        n: the hosts.
    """
    # the rows' counts lose the pairs of frozen columns; then the reverse
    _recount_side(hits, level, 1, row_cnt, row_live, col_live, n)
    _recount_side(hits, level, 0, col_cnt, col_live, row_live, n)
    for i in range(n):
        if row_live[i] == 0.0:
            row_cnt[i] = 0.0
        if col_live[i] == 0.0:
            col_cnt[i] = 0.0


@njit(cache=True, inline="always")
def _leave_link(link, rate, weight, count, residual, live):  # pragma: no cover - compiled
    """``weight`` flows frozen at ``rate`` elsewhere leave ``link``, if it is not frozen yet.

    Args:
        link: the link (``s`` for egress ``s``, ``n + d`` for ingress ``d``).
        rate: the flows' rate in bit/s.
        weight: the flows.
        count: per link, the flows not frozen yet; the link's drops by ``weight``.
        residual: per link, the bit/s left; the link's drops by ``rate * weight``.
        live: 1.0 per link not frozen yet (a frozen link is left as it is).
    """
    if live[link] > 0.0:
        count[link] -= weight
        residual[link] = max(residual[link] - rate * weight, 0.0)


@njit(cache=True)
def _pair_rounds(level, count, residual, live, n):  # pragma: no cover - compiled
    """The rounds of :func:`pair_shares` for a level without singles, its links' shares kept
    in a min-heap instead of found by a pass over the live links at every round.

    A live link's share (its residual over its flows not frozen yet) only grows: a link
    freezes at the round's share, the smallest, and its flows leave its partners at that
    rate. So a share once computed is a lower bound of the link's share from then on, and a
    heap of those keys finds the round's smallest share by recomputing only the links at its
    top. The round itself is :func:`pair_shares`' scan, float for float: the links within the
    relative slack of the smallest share are gathered (with a wider margin, as the keys are
    divisions and the scan compares products), and among them, in host order, the scan's
    rules pick the share and the links it freezes. A dense level of 150 hosts (~180 rounds
    over ~300 links) thus costs its rounds' spreads instead of ~180 passes over every live
    link.

    Args:
        level: the :class:`PairLevel` (its shares are filled, as in :func:`pair_shares`).
        count: per link (``s`` egress, ``n + d`` ingress), the flows not frozen yet; updated.
        residual: per link, the bit/s left; updated.
        live: 1.0 per link not frozen yet; updated.
        n: the hosts.
    """
    w, wt, row_share, col_share = level.flows, level.flows_t, level.row_share, level.col_share
    w_bits, wt_bits, w_pairs, wt_pairs = (
        level.row_bits,
        level.col_bits,
        level.row_pairs,
        level.col_pairs,
    )
    factor = level.sparse_factor[0]
    row_cnt, col_cnt = count[:n], count[n : 2 * n]
    row_res, col_res = residual[:n], residual[n : 2 * n]
    row_live, col_live = live[:n], live[n : 2 * n]
    keys = np.empty(2 * n)
    ids = np.empty(2 * n, dtype=np.int64)
    size = np.zeros(1, dtype=np.int64)
    for link in range(2 * n):
        if live[link] > 0.0 and count[link] > 0.5:
            keys[size[0]], ids[size[0]] = residual[link] / count[link], link
            size[0] += 1
    heapify(keys, ids, size)
    near = np.empty(2 * n, dtype=np.int64)  # the round's candidates, then its links to freeze
    far = np.empty(2 * n, dtype=np.int64)  # candidates outside the slack, back to the heap
    while True:
        # the smallest share: a top whose recomputed share is still at most the next key
        smallest = np.inf
        while size[0] > 0:
            link = ids[0]
            if count[link] <= 0.5:
                heap_pop(keys, ids, size)
                continue  # its flows froze with its partners: it leaves
            share_here = residual[link] / count[link]
            below = np.inf  # the smallest key below the top
            if size[0] > 1:
                below = keys[1]
            if size[0] > 2 and keys[2] < below:
                below = keys[2]
            if share_here <= below:
                heap_pop(keys, ids, size)
                smallest = share_here
                near[0] = link
                break
            heap_replace(keys, ids, size, share_here, link)
        if smallest == np.inf:
            break
        n_near = 1
        # every link whose share may be within the slack (keys never exceed the shares)
        wide = smallest * (1 + _REL) * (1 + 1e-12)
        while size[0] > 0 and keys[0] <= wide:
            link = ids[0]
            heap_pop(keys, ids, size)
            if count[link] > 0.5:
                near[n_near] = link
                n_near += 1
        sort_prefix(near, n_near)  # in host order, as the scan visits the links
        share = np.inf
        for i in range(n_near):
            link = near[i]
            if residual[link] < share * count[link]:
                share = residual[link] / count[link]
        limit = share * (1 + _REL)
        n_hits = 0
        n_far = 0
        for i in range(n_near):
            link = near[i]
            if residual[link] <= limit * count[link]:
                near[n_hits] = link
                n_hits += 1
            else:
                far[n_far] = link
                n_far += 1
        for i in range(n_far):
            heap_push(keys, ids, size, residual[far[i]] / count[far[i]], far[i])
        if share < 0.0:
            share = 0.0
        # (the freeze and spread written out: the helpers' array arguments cost a reference
        # count each at every frozen link, ~10 atomic operations, a third of a dense fill)
        for h in range(n_hits):
            link = near[h]
            if link < n:
                row_share[link] = share
                row_res[link] = max(row_res[link] - share * row_cnt[link], 0.0)
                row_cnt[link] = 0.0
                row_live[link] = 0.0
                if not sparse_row(w_pairs[link], n, factor):
                    for j in range(n):
                        x = w[link, j] * col_live[j]
                        col_cnt[j] -= x
                        col_res[j] = max(col_res[j] - share * x, 0.0)
                else:
                    for word in range(w_bits.shape[1]):
                        left = w_bits[link, word]
                        while left:
                            j = word * 64 + np.int64(trailing_zeros(left))
                            left &= left - BIT_ONE
                            x = w[link, j] * col_live[j]
                            col_cnt[j] -= x
                            col_res[j] = max(col_res[j] - share * x, 0.0)
            else:
                d = link - n
                col_share[d] = share
                col_res[d] = max(col_res[d] - share * col_cnt[d], 0.0)
                col_cnt[d] = 0.0
                col_live[d] = 0.0
                if not sparse_row(wt_pairs[d], n, factor):
                    for j in range(n):
                        x = wt[d, j] * row_live[j]
                        row_cnt[j] -= x
                        row_res[j] = max(row_res[j] - share * x, 0.0)
                else:
                    for word in range(wt_bits.shape[1]):
                        left = wt_bits[d, word]
                        while left:
                            j = word * 64 + np.int64(trailing_zeros(left))
                            left &= left - BIT_ONE
                            x = wt[d, j] * row_live[j]
                            row_cnt[j] -= x
                            row_res[j] = max(row_res[j] - share * x, 0.0)


@njit(cache=True)
def pair_shares(level, residual, capacity, n, singles):  # pragma: no cover - compiled
    """Max-min fair shares of one level (a :class:`PairLevel`) of a big switch.

    Link ``s`` is host ``s``'s egress, link ``n + d`` host ``d``'s ingress. Progressive filling
    over links: a pair's flows freeze with the first of their two links to fill, at that
    link's share, so every flow of pair ``(s, d)`` gets
    ``min(level.row_share[s], level.col_share[d])`` (both filled here; ``inf`` for links
    without flows). A round is one pass over the live links (finding the smallest share and
    the links at it) plus O(n) per link it freezes, whatever the number of pairs: a dense level
    of a 150-port switch (20k pairs) takes tens of microseconds. (The helpers take arrays, not
    named tuples: a field read in a callee costs a reference count per call; and they are
    inlined: they run once per frozen link, and the calls alone cost a tenth of the kernel,
    measured on a dense 150-host level.)

    The level's ``singles`` (one-flow groups outside the matrix, usually capped) take part as
    in :func:`_fill`: they count on their links, a round whose smallest share reaches the
    lowest of their caps freezes the flows capped at or below it instead of a link, and a
    frozen link freezes its singles at its share. So a level of many shared pairs and a few
    capped coflows (Varys' lowest) costs what a pair level costs, plus O(1) per single.

    Args:
        level: the :class:`PairLevel`: its ``flows``, ``flows_t`` and counts are read (not
            modified); ``row_share`` and ``col_share`` are filled (bit/s per flow).
        residual: per link, the bit/s the levels above left (links ``0..2n-1`` as above);
            updated in place: what the level takes is taken off.
        capacity: per link, its capacity in bit/s (to tell the links left full).
        n: the hosts.
        singles: the level's :class:`Singles`; their ``rates`` are set (0 for an empty group
            or one on a link the levels above filled).
    """
    w, wt, row_share, col_share = level.flows, level.flows_t, level.row_share, level.col_share
    w_bits, wt_bits, w_pairs, wt_pairs = (
        level.row_bits,
        level.col_bits,
        level.row_pairs,
        level.col_pairs,
    )
    factor = level.sparse_factor[0]
    count = np.empty(2 * n)  # flows on each link not frozen yet: egress links, then ingress
    count[:n] = level.row_count
    count[n:] = level.col_count
    row_cnt, col_cnt = count[:n], count[n:]
    row_res = residual[:n]
    col_res = residual[n : 2 * n]
    live = np.zeros(2 * n)  # 1.0 while the link is not frozen: masks the updates
    row_live, col_live = live[:n], live[n:]
    # the singles that take part: with flows, on links the levels above did not fill
    members, s_links, s_caps, s_weights, s_rates = singles
    m = members.shape[0]
    taking = np.zeros(m, dtype=np.bool_)  # takes part and is not frozen yet
    extra = np.zeros(2 * n if m > 0 else 0)  # their flows on each link
    n_capped = 0
    for i in range(m):
        g = members[i]
        s_rates[g] = 0.0
        a, b = s_links[g, 0], s_links[g, 1]
        if s_weights[g] < 0.5 or _filled(residual, capacity, a) or _filled(residual, capacity, b):
            continue
        taking[i] = True
        extra[a] += s_weights[g]
        extra[b] += s_weights[g]
        if s_caps[g] < np.inf:
            n_capped += 1
    links = np.empty(2 * n, dtype=np.int64)  # live links: s for egress s, n + d for ingress d
    n_links = 0
    for link in range(2 * n):
        if link < n:
            row_share[link] = np.inf
        else:
            col_share[link - n] = np.inf
        if count[link] > 0.5 or (m > 0 and extra[link] > 0.5):
            links[n_links] = link
            n_links += 1
            live[link] = 1.0
    # the first round freezes, at 0, the links the levels above left full
    hits = np.empty(2 * n, dtype=np.int64)
    n_hits = 0
    for j in range(n_links):
        if _filled(residual, capacity, links[j]):
            hits[n_hits] = links[j]
            n_hits += 1
    if n_hits > 0:
        for link in hits[:n_hits]:
            if link < n:
                row_share[link], row_live[link] = 0.0, 0.0
            else:
                col_share[link - n], col_live[link - n] = 0.0, 0.0
        _recount_starved(hits[:n_hits], level, row_cnt, col_cnt, row_live, col_live, n)
        n_hits = 0
    if m == 0:
        _pair_rounds(level, count, residual, live, n)
        return
    # the singles on each link (CSR), and those with a cap, lowest first
    first = np.zeros(2 * n + 1 if m > 0 else 1, dtype=np.int64)
    on_link = np.empty(2 * np.count_nonzero(taking), dtype=np.int64)
    by_cap = np.empty(n_capped, dtype=np.int64)
    if m > 0:
        for link in range(2 * n):  # (no single is on a link frozen above)
            count[link] += extra[link]
        for i in range(m):
            if taking[i]:
                first[s_links[members[i], 0] + 1] += 1
                first[s_links[members[i], 1] + 1] += 1
        for link in range(2 * n):
            first[link + 1] += first[link]
        fill = first[:-1].copy()
        capped_caps = np.empty(n_capped)
        n_capped = 0
        for i in range(m):
            if taking[i]:
                for c in range(2):
                    link = s_links[members[i], c]
                    on_link[fill[link]] = i
                    fill[link] += 1
                if s_caps[members[i]] < np.inf:
                    by_cap[n_capped] = i
                    capped_caps[n_capped] = s_caps[members[i]]
                    n_capped += 1
        by_cap = by_cap[np.argsort(capped_caps, kind="mergesort")]
    next_capped = 0
    share = 0.0
    while True:
        for h in range(n_hits):
            link = hits[h]
            if live[link] == 0.0:
                continue
            if link < n:
                _freeze_link(link, share, row_cnt, row_res, row_live, row_share)
                sparse = sparse_row(w_pairs[link], n, factor)
                _spread_share(share, w, w_bits, sparse, link, col_cnt, col_res, col_live)
            else:
                d = link - n
                _freeze_link(d, share, col_cnt, col_res, col_live, col_share)
                sparse = sparse_row(wt_pairs[d], n, factor)
                _spread_share(share, wt, wt_bits, sparse, d, row_cnt, row_res, row_live)
            if m == 0:
                continue
            for e in range(first[link], first[link + 1]):
                i = on_link[e]
                if taking[i]:
                    taking[i] = False
                    g = members[i]
                    s_rates[g] = share
                    other = s_links[g, 0] + s_links[g, 1] - link
                    _leave_link(other, share, s_weights[g], count, residual, live)
        # one pass: drop links left without flows, find the smallest share and the links at
        # it (within the relative slack, so float error never leaves a link a hair short)
        share = np.inf
        limit = np.inf
        n_hits = 0
        kept = 0
        for j in range(n_links):
            link = links[j]
            if link < n:
                count_here, left = row_cnt[link], row_res[link]
            else:
                count_here, left = col_cnt[link - n], col_res[link - n]
            if count_here <= 0.5:
                continue
            links[kept] = link
            kept += 1
            if left > limit * count_here:
                continue
            if left < share * count_here:
                share = left / count_here
                limit = share * (1 + _REL)
                # earlier hits stay only if still within the slack of the new share
                m_hits = 0
                for h in range(n_hits):
                    other = hits[h]
                    if other < n:
                        near = row_res[other] <= limit * row_cnt[other]
                    else:
                        near = col_res[other - n] <= limit * col_cnt[other - n]
                    if near:
                        hits[m_hits] = other
                        m_hits += 1
                n_hits = m_hits
            hits[n_hits] = link
            n_hits += 1
        n_links = kept
        if n_hits == 0:
            break
        if share < 0.0:
            share = 0.0
        while next_capped < n_capped and not taking[by_cap[next_capped]]:
            next_capped += 1
        if next_capped < n_capped and s_caps[members[by_cap[next_capped]]] <= share * (1 + _REL):
            # flows capped below the fair share take their cap (and no link freezes yet)
            while next_capped < n_capped:
                i = by_cap[next_capped]
                g = members[i]
                if taking[i]:
                    if s_caps[g] > share * (1 + _REL):
                        break
                    taking[i] = False
                    s_rates[g] = max(s_caps[g], 0.0)
                    for c in range(2):
                        _leave_link(s_links[g, c], s_rates[g], s_weights[g], count, residual, live)
                next_capped += 1
            n_hits = 0


@njit(cache=True)
def greedy_groups(links, count, caps, order, capacity, rates):  # pragma: no cover - compiled
    """Each flow group in ``order`` takes what its links have left (empty ones get 0), in place.

    Args:
        links: ``(groups, k)`` int: the links each group's flows cross.
        count: float per group: the flows it stands for (< 0.5: empty, which gets 0).
        caps: float per group: its flows' rate cap in bit/s, inf without one.
        order: int: the groups to serve, most urgent first.
        capacity: per link, its capacity in bit/s.
        rates: float per group, out: the rate in bit/s of the groups of ``order``.
    """
    residual = capacity.copy()
    k = links.shape[1]
    for e in range(order.shape[0]):
        g = order[e]
        rates[g] = 0.0
        if count[g] < 0.5:
            continue
        rate = caps[g]
        for c in range(k):
            if residual[links[g, c]] < rate:
                rate = residual[links[g, c]]
        if rate > 0:
            rates[g] = rate
            for c in range(k):
                residual[links[g, c]] -= rate
