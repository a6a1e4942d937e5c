"""The ideal mode's greedy allocation, redone only where a change reaches.

In ideal mode every flow is a group of its own, and the groups of the policy's order take rates
greedily: each takes the least of its cap and what its links have left
(:func:`simulator.allocation.greedy_groups`). Between two calls of the step loop the order
stays, and the only change is that groups empty as their flow ends. Redoing the whole greedy at
every completion costs steps x groups: an offline run of the Facebook trace has about 10^5 steps
over 7 x 10^5 flows.

:func:`greedy_start` runs the whole greedy and records the pass: the rate of every entry of the
order, and for every entry with a rate the residual of each of its links after it.
:func:`greedy_update` redoes the pass after some groups emptied, visiting only the entries that
cross a *diff* link, one whose residual at that point of the new pass differs from the recorded
one. Every other entry sees exactly the residuals it saw before, so it takes the same rate and
leaves the same residuals, bit for bit. An entry that empties, or whose rate changes, puts its
links in the diff; a link leaves the diff at an entry after which its residual equals the
recorded one again (typically 0 in both passes: the link is full either way). The result is
:func:`greedy_groups`' on the same input, exactly (``tests/unit/test_greedy.py`` checks it on
random orders).

Links of infinite capacity (a fabric's padding link) never change and are left out. The
helpers the walk calls at every visit take the arrays they use rather than the record, and the
merges are inlined: numba counts references to every array a function is handed or takes out
of a tuple, an atomic operation on a header that is rarely in cache, and with the record (~35
arrays) those counts took 27 % of a Varys ideal-mode run (`perf`, the first 150 coflows of the
Facebook trace offline). For the same reason the merges copy with loops, not slices, and the
scratch arrays live in the record.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from controller.kernel_cache import njit
from simulator.heap import heap_pop, heap_push


class GreedyPass(NamedTuple):
    """The last greedy pass over one order (entries are positions in the order), and the room
    :func:`greedy_update` works in. Per-link lists share one layout: link ``L``'s start at
    ``link_start[L]``, with room for every entry crossing it."""

    entry_rate: np.ndarray  # float per entry: its group's rate in the pass
    after: np.ndarray  # (entries, k): for an entry with a rate, each link's residual after it
    positive: np.ndarray  # int: the entries with a rate, increasing (first n_positive[0])
    n_positive: np.ndarray  # int [entries with a rate]
    entry_of: np.ndarray  # int per group id: its entry
    ended: np.ndarray  # int: the groups with a rate that emptied since the pass ...
    n_ended: np.ndarray  # ... [how many] (filled by the step loop)
    link_start: np.ndarray  # (links + 1) int: each link's first index in the per-link lists
    link_entry: np.ndarray  # int: per link, every entry crossing it, increasing
    link_partner: np.ndarray  # (entries * k, k - 1) int: the other links of each of those
    hist_count: np.ndarray  # int per link: its entries with a rate in the pass ...
    hist_entry: np.ndarray  # int: ... per link, increasing ...
    hist_after: np.ndarray  # float: ... and its residual after each
    closed_at: np.ndarray  # int per link: the entry after which it is full in the pass
    capped: np.ndarray  # bool per link: an entry crossing it has a cap
    state: np.ndarray  # int [per-link lists built (0 / 1), passes made, started (0 / 1)]
    # scratch of greedy_update
    in_diff: np.ndarray  # bool per link: its residual differs from the recorded pass
    diff_residual: np.ndarray  # float per link: its residual in the new pass, while in the diff
    queued: np.ndarray  # bool per link: it has an entry in the heap
    cursor: np.ndarray  # int per link: its first history entry not before the visit ...
    cursor_pass: np.ndarray  # int per link: ... valid in this pass
    heap_entry: np.ndarray  # int: the min-heap of links' next entries ...
    heap_link: np.ndarray  # ... their links ...
    heap_size: np.ndarray  # ... [its entries]
    emptied: np.ndarray  # int: the entries with a rate whose group emptied
    visited: np.ndarray  # int: the entries the new pass visited, increasing ...
    visit_links: np.ndarray  # int: ... a bit per column whose history entry changed
    flipped: np.ndarray  # int: the visited entries that gained or lost their rate
    merged: np.ndarray  # int: the new list of entries with a rate
    touched: np.ndarray  # int per link: the visits crossing it (then their first index) ...
    touched_visit: np.ndarray  # int: ... per link, the visits crossing it ...
    touched_column: np.ndarray  # int: ... and the link's column in the entry's links
    merged_entry: np.ndarray  # int: room to merge a link's history ...
    merged_after: np.ndarray  # float: ... and residuals
    touched_fill: np.ndarray  # int per link: where the next visit crossing it goes
    before: np.ndarray  # float per column: the residuals the visited entry finds


@njit(cache=True)
def greedy_pass(n_entries, n_links, k, n_groups):  # pragma: no cover - compiled
    """An empty :class:`GreedyPass` for an order of up to ``n_entries`` groups (ids below
    ``n_groups``) crossing ``k`` of ``n_links`` links each (a pass serves any shorter order:
    the functions go by the order's length, not the pass's)."""
    return GreedyPass(
        np.zeros(n_entries),
        np.empty((n_entries, k)),
        np.empty(n_entries, dtype=np.int64),
        np.zeros(1, dtype=np.int64),
        np.empty(n_groups, dtype=np.int64),
        np.empty(n_entries, dtype=np.int64),
        np.zeros(1, dtype=np.int64),
        np.zeros(n_links + 1, dtype=np.int64),
        np.empty(n_entries * k, dtype=np.int64),
        np.empty((n_entries * k, max(k - 1, 1)), dtype=np.int64),
        np.zeros(n_links, dtype=np.int64),
        np.empty(n_entries * k, dtype=np.int64),
        np.empty(n_entries * k),
        np.zeros(n_links, dtype=np.int64),
        np.zeros(n_links, dtype=np.bool_),
        np.zeros(3, dtype=np.int64),
        np.zeros(n_links, dtype=np.bool_),
        np.zeros(n_links),
        np.zeros(n_links, dtype=np.bool_),
        np.zeros(n_links, dtype=np.int64),
        np.zeros(n_links, dtype=np.int64),
        np.empty(n_links + 1, dtype=np.int64),
        np.empty(n_links + 1, dtype=np.int64),
        np.zeros(1, dtype=np.int64),
        np.empty(n_entries, dtype=np.int64),
        np.empty(n_entries, dtype=np.int64),
        np.empty(n_entries, dtype=np.int64),
        np.empty(n_entries, dtype=np.int64),
        np.empty(n_entries, dtype=np.int64),
        np.zeros(n_links + 1, dtype=np.int64),
        np.empty(n_entries * k, dtype=np.int64),
        np.empty(n_entries * k, dtype=np.int64),
        np.empty(n_entries * k, dtype=np.int64),
        np.empty(n_entries * k),
        np.empty(n_links, dtype=np.int64),
        np.empty(k),
    )


@njit(cache=True)
def greedy_start(record, links, count, caps, order, capacity, rates):  # pragma: no cover
    """The whole greedy over ``order`` (as :func:`simulator.allocation.greedy_groups`, same
    arguments), recorded in ``record`` (a :func:`greedy_pass` with room for the order)."""
    k = links.shape[1]
    entry_rate, after, positive = record.entry_rate, record.after, record.positive
    entry_of = record.entry_of
    residual = capacity.copy()
    n_positive = 0
    for e in range(order.shape[0]):
        g = order[e]
        entry_of[g] = e
        rates[g] = 0.0
        entry_rate[e] = 0.0
        if count[g] < 0.5:
            continue
        rate = caps[g]
        for c in range(k):
            if residual[links[g, c]] < rate:
                rate = residual[links[g, c]]
        if rate > 0:
            rates[g] = rate
            entry_rate[e] = rate
            for c in range(k):
                residual[links[g, c]] -= rate
                after[e, c] = residual[links[g, c]]
            positive[n_positive] = e
            n_positive += 1
    record.n_positive[0] = n_positive
    record.n_ended[0] = 0
    record.state[0] = 0
    record.state[2] = 1


@njit(cache=True)
def _closed_at(
    closed_at, link_start, hist_count, hist_entry, hist_after, link, capacity, n_entries
):  # pragma: no cover - compiled
    """Set ``closed_at`` of ``link`` from its history: a full link stays full to the end of
    the pass (nothing after it crossing it has a rate)."""
    last = link_start[link] + hist_count[link] - 1
    if capacity[link] <= 0.0:
        closed_at[link] = -1
    elif hist_count[link] > 0 and hist_after[last] == 0.0:
        closed_at[link] = hist_entry[last]
    else:
        closed_at[link] = n_entries


@njit(cache=True)
def _build_link_lists(record, links, caps, order, capacity):  # pragma: no cover - compiled
    """Per finite link, every entry of the order crossing it, increasing (``link_*``), whether
    one has a cap (``capped``), and the history of the pass (``hist_*``, ``closed_at``)."""
    k = links.shape[1]
    start, entry, partner = record.link_start, record.link_entry, record.link_partner
    hist_count, hist_entry, hist_after = record.hist_count, record.hist_entry, record.hist_after
    positive, after = record.positive, record.after
    start[:] = 0
    for e in range(order.shape[0]):
        for c in range(k):
            if capacity[links[order[e], c]] < np.inf:
                start[links[order[e], c] + 1] += 1
    for link in range(capacity.shape[0]):
        start[link + 1] += start[link]
    fill = start[:-1].copy()
    capped = record.capped
    capped[:] = False
    for e in range(order.shape[0]):
        g = order[e]
        for c in range(k):
            link = links[g, c]
            if capacity[link] < np.inf:
                capped[link] = capped[link] or caps[g] < np.inf
                entry[fill[link]] = e
                j = 0
                for other in range(k):
                    if other != c:
                        partner[fill[link], j] = links[g, other]
                        j += 1
                fill[link] += 1
    hist_count[:] = 0
    for i in range(record.n_positive[0]):
        e = positive[i]
        g = order[e]
        for c in range(k):
            link = links[g, c]
            if capacity[link] < np.inf:
                at = start[link] + hist_count[link]
                hist_entry[at] = e
                hist_after[at] = after[e, c]
                hist_count[link] += 1
    for link in range(capacity.shape[0]):
        _closed_at(
            record.closed_at, start, hist_count, hist_entry, hist_after, link, capacity,
            order.shape[0],
        )  # fmt: skip
    record.state[0] = 1


@njit(cache=True, inline="always")
def _next_open(
    entry, partner, in_diff, closed_at, n_partners, i, end
):  # pragma: no cover - compiled
    """The first index from ``i`` (below ``end``) of a link's entries (``link_entry``) that
    may change: one whose other links are not all full in both passes. A link full in the
    recorded pass and outside the diff is full in the new one too, from there to the end, so
    the entries crossing it keep rate 0 and leave every residual as it was. (A link that joins
    the diff later walks its own entries.)"""
    while i < end:
        e = entry[i]
        blocked = False
        for j in range(n_partners):
            other = partner[i, j]
            if closed_at[other] < e and not in_diff[other]:
                blocked = True
                break
        if not blocked:
            return i
        i += 1
    return end


@njit(cache=True, inline="always")
def _next_to_visit(
    link_start, hist_count, hist_entry, closed_at, link_entry, partner, in_diff, n_partners, link,
    e, n_entries,
):  # fmt: skip
    # pragma: no cover - compiled
    """The next entry after ``e`` crossing ``link`` (in the diff) that may change, or
    ``n_entries``. While the link was not full in the recorded pass, an entry crossing it
    without a rate there had another link full (or no flow, or a zero cap): that link, if in
    the diff, walks the entry itself, else the entry keeps rate 0. So the walk visits the
    link's history there, and from where the link was full every entry :func:`_next_open`
    does not rule out."""
    start = link_start[link]
    count = hist_count[link]
    h = _first_after(hist_entry, start, start + count, e)
    if h < start + count:
        return hist_entry[h]  # (at or before closed_at: nothing has a rate after)
    closed = closed_at[link]
    if closed >= n_entries:
        return n_entries
    end = link_start[link + 1]
    i = _first_after(link_entry, start, end, max(e, closed))
    i = _next_open(link_entry, partner, in_diff, closed_at, n_partners, i, end)
    return link_entry[i] if i < end else n_entries


@njit(cache=True, inline="always")
def _capped_run(
    link_start, hist_count, hist_entry, hist_after, entry_rate, after, in_diff, diff_residual,
    visited, visit_links, links, caps, order, link, e, limit, n_visited,
):  # fmt: skip
    # pragma: no cover - compiled
    """Visit, in one sweep, the entries of ``link``'s history after ``e`` and before ``limit``
    that took their cap in the recorded pass and still can: every other link of theirs is out
    of the diff (so it still allows the cap) and ``link`` still has the cap left. Each keeps
    its rate and only ``link``'s residual after it moves (no heap, no look-ups: Varys' capped
    flows make most visits). Stops at the first other entry, or where ``link`` leaves the diff.

    Returns:
        ``(the last entry visited (e if none), the visits listed)``.
    """
    start = link_start[link]
    end = start + hist_count[link]
    k = links.shape[1]
    h = _first_after(hist_entry, start, end, e)
    while h < end and hist_entry[h] < limit:
        at = hist_entry[h]
        g = order[at]
        cap = caps[g]
        if entry_rate[at] != cap or diff_residual[link] < cap:
            break
        column = -1
        for c in range(k):
            if links[g, c] == link:
                column = c
            elif in_diff[links[g, c]]:
                column = -2
                break
        if column < 0:
            break
        # (it had a rate, so it is not emptied: emptied entries are visited on their own)
        now = diff_residual[link] - cap
        after[at, column] = now
        visited[n_visited] = at
        visit_links[n_visited] = 1 << column if now != hist_after[h] else 0
        n_visited += 1
        e = at
        if now == hist_after[h]:
            in_diff[link] = False
            break
        diff_residual[link] = now
        h += 1
    return e, n_visited


@njit(cache=True, inline="always")
def _first_after(entries, lo, hi, e):  # pragma: no cover - compiled
    """The first index in ``entries[lo:hi]`` (increasing) whose entry is above ``e``."""
    while lo < hi:
        mid = (lo + hi) // 2
        if entries[mid] <= e:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def greedy_update(record, links, count, caps, order, capacity, rates):  # pragma: no cover
    """Redo the greedy of ``record`` (started by :func:`greedy_start` on the same order, links
    and caps) after the groups listed in its ``ended`` emptied (each had a rate): ``rates`` and
    ``record`` become what :func:`greedy_start` would give now, visiting only the entries the
    change reaches. ``ended`` is emptied.

    Returns:
        The number of entries visited (0 if no group emptied).
    """
    k = links.shape[1]
    entry_rate, after = record.entry_rate, record.after
    hist_count, hist_entry, hist_after = record.hist_count, record.hist_entry, record.hist_after
    link_start = record.link_start
    in_diff, diff_residual, queued = record.in_diff, record.diff_residual, record.queued
    cursor, cursor_pass = record.cursor, record.cursor_pass
    heap_entry, heap_link, size = record.heap_entry, record.heap_link, record.heap_size
    emptied, visited = record.emptied, record.visited
    visit_links, flipped = record.visit_links, record.flipped
    n_emptied = record.n_ended[0]
    if n_emptied == 0:
        return 0
    record.n_ended[0] = 0
    for i in range(n_emptied):  # their entries, increasing (insertion sort: a few)
        e = record.entry_of[record.ended[i]]
        j = i
        while j > 0 and emptied[j - 1] > e:
            emptied[j] = emptied[j - 1]
            j -= 1
        emptied[j] = e
    if record.state[0] == 0:
        _build_link_lists(record, links, caps, order, capacity)
    closed_at, link_entry, partner = record.closed_at, record.link_entry, record.link_partner
    n_partners = partner.shape[1] if k > 1 else 0
    record.state[1] += 1
    this_pass = record.state[1]
    for link in range(capacity.shape[0]):
        in_diff[link] = False
        queued[link] = False
    before = record.before
    size[0] = 0
    next_emptied = 0
    last = -1
    n_visited = 0
    n_flipped = 0
    n_entries = order.shape[0]
    while True:
        e = n_entries
        link = -1
        if size[0] > 0:
            e, link = heap_entry[0], heap_link[0]
        if next_emptied < n_emptied and emptied[next_emptied] <= e:
            e, link = emptied[next_emptied], -1
            next_emptied += 1
        elif size[0] > 0:
            heap_pop(heap_entry, heap_link, size)
        if e == n_entries:
            break
        if e > last:
            last = e
            g = order[e]
            old_rate = entry_rate[e]
            for c in range(k):  # the residuals this entry finds, and the recorded ones
                at = links[g, c]
                if capacity[at] == np.inf:
                    before[c] = np.inf
                    continue
                end = link_start[at] + hist_count[at]
                if cursor_pass[at] != this_pass:  # a busy link's history is long: search it
                    cursor_pass[at] = this_pass
                    cursor[at] = _first_after(hist_entry, link_start[at], end, e - 1)
                while cursor[at] < end and hist_entry[cursor[at]] < e:
                    cursor[at] += 1
                if in_diff[at]:
                    before[c] = diff_residual[at]
                elif cursor[at] > link_start[at]:
                    before[c] = hist_after[cursor[at] - 1]
                else:
                    before[c] = capacity[at]
            new_rate = 0.0
            if count[g] >= 0.5:
                rate = caps[g]
                for c in range(k):
                    if before[c] < rate:
                        rate = before[c]
                if rate > 0:
                    new_rate = rate
            rates[g] = new_rate
            entry_rate[e] = new_rate
            visited[n_visited] = e
            visit_links[n_visited] = 0
            if (old_rate > 0) != (new_rate > 0):
                flipped[n_flipped] = e
                n_flipped += 1
            n_visited += 1
            for c in range(k):
                at = links[g, c]
                if capacity[at] == np.inf:
                    continue
                if old_rate > 0:  # the recorded residual after it is its history entry
                    recorded = hist_after[cursor[at]]
                elif cursor[at] > link_start[at]:
                    recorded = hist_after[cursor[at] - 1]
                else:
                    recorded = capacity[at]
                now = before[c] - new_rate if new_rate > 0 else before[c]
                if new_rate > 0:
                    after[e, c] = now
                if (old_rate > 0) != (new_rate > 0) or (new_rate > 0 and now != recorded):
                    visit_links[n_visited - 1] |= 1 << c  # its history entry changes
                if now == recorded:
                    in_diff[at] = False
                    continue
                diff_residual[at] = now
                if not in_diff[at]:
                    in_diff[at] = True
                    if not queued[at]:
                        following = _next_to_visit(
                            link_start, hist_count, hist_entry, closed_at, link_entry, partner,
                            in_diff, n_partners, at, e, n_entries,
                        )  # fmt: skip
                        if following < n_entries:
                            queued[at] = True
                            heap_push(heap_entry, heap_link, size, following, at)
        if link >= 0:  # the link's walk moves on while it is in the diff
            following = n_entries
            if in_diff[link] and record.capped[link]:
                # nothing else can change before the next walk's entry or emptied entry
                limit = heap_entry[0] if size[0] > 0 else n_entries
                if next_emptied < n_emptied:
                    limit = min(limit, emptied[next_emptied])
                e, n_visited = _capped_run(
                    link_start, hist_count, hist_entry, hist_after, entry_rate, after, in_diff,
                    diff_residual, visited, visit_links, links, caps, order, link, e, limit,
                    n_visited,
                )  # fmt: skip
                last = max(last, e)
            if in_diff[link]:
                following = _next_to_visit(
                    link_start, hist_count, hist_entry, closed_at, link_entry, partner, in_diff,
                    n_partners, link, e, n_entries,
                )  # fmt: skip
            if following < n_entries:
                heap_push(heap_entry, heap_link, size, following, link)
            else:
                queued[link] = False
    _merge_positive(
        record.positive, record.n_positive, flipped, entry_rate, record.merged, n_flipped
    )
    _merge_history(record, links, order, capacity, n_visited)
    return n_visited


@njit(cache=True, inline="always")
def _merge_positive(
    positive, n_positive_cell, flipped, entry_rate, merged, n_flipped
):  # pragma: no cover - compiled
    """The entries with a rate after a pass: the recorded ones, without those that lost their
    rate and with those that gained one (the first ``n_flipped`` of ``flipped``; both lists
    are increasing)."""
    n_positive = n_positive_cell[0]
    m = 0
    i = 0
    for j in range(n_flipped):
        e = flipped[j]
        first = i
        i = _first_after(positive, i, n_positive, e - 1)  # the first entry not before e
        for t in range(first, i):  # (runs between visits: copied whole)
            merged[m] = positive[t]
            m += 1
        if i < n_positive and positive[i] == e:
            i += 1
        if entry_rate[e] > 0:
            merged[m] = e
            m += 1
    for t in range(i, n_positive):
        merged[m] = positive[t]
        m += 1
    for t in range(m):
        positive[t] = merged[t]
    n_positive_cell[0] = m


@njit(cache=True, inline="always")
def _merge_history(record, links, order, capacity, n_visited):
    # pragma: no cover - compiled
    """The history of every link whose entry a visit changed (``visit_links``), merged as
    :func:`_merge_positive` merges the entries (the others' did not change)."""
    k = links.shape[1]
    link_start, hist_count = record.link_start, record.hist_count
    hist_entry, hist_after, after = record.hist_entry, record.hist_after, record.after
    visited, entry_rate = record.visited, record.entry_rate
    touched, touched_visit, touched_column = (
        record.touched,
        record.touched_visit,
        record.touched_column,
    )
    n_links = capacity.shape[0]
    visit_links, closed_at = record.visit_links, record.closed_at
    entries, residuals = record.merged_entry, record.merged_after
    touched[:] = 0
    for j in range(n_visited):
        g = order[visited[j]]
        for c in range(k):
            if visit_links[j] & (1 << c):
                touched[links[g, c] + 1] += 1
    for link in range(n_links):
        touched[link + 1] += touched[link]
    fill = record.touched_fill
    for link in range(n_links):
        fill[link] = touched[link]
    for j in range(n_visited):
        g = order[visited[j]]
        for c in range(k):
            link = links[g, c]
            if visit_links[j] & (1 << c):
                touched_visit[fill[link]] = visited[j]
                touched_column[fill[link]] = c
                fill[link] += 1
    for link in range(n_links):
        lo, hi = touched[link], touched[link + 1]
        if lo == hi:
            continue
        base = link_start[link]
        end = base + hist_count[link]
        m = 0
        i = base
        for j in range(lo, hi):
            e = touched_visit[j]
            first = i
            i = _first_after(hist_entry, i, end, e - 1)
            for t in range(first, i):
                entries[m] = hist_entry[t]
                residuals[m] = hist_after[t]
                m += 1
            if i < end and hist_entry[i] == e:
                i += 1
            if entry_rate[e] > 0:
                entries[m] = e
                residuals[m] = after[e, touched_column[j]]
                m += 1
        for t in range(i, end):
            entries[m] = hist_entry[t]
            residuals[m] = hist_after[t]
            m += 1
        for t in range(m):
            hist_entry[base + t] = entries[t]
            hist_after[base + t] = residuals[t]
        hist_count[link] = m
        _closed_at(
            closed_at, link_start, hist_count, hist_entry, hist_after, link, capacity,
            order.shape[0],
        )  # fmt: skip
