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

Links of infinite capacity (a fabric's padding link) never change and are left out.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit


class GreedyPass(NamedTuple):
    """The last greedy pass over one order (entries are positions in the order), and the room
    :func:`greedy_update` works in."""

    entry_rate: np.ndarray  # float per entry: its group's rate in the pass
    after: np.ndarray  # (entries, k): for an entry with a rate, each link's residual after it
    positive: np.ndarray  # int: the entries with a rate, increasing (first n_positive[0])
    n_positive: np.ndarray  # int [entries with a rate]
    hist_start: np.ndarray  # (links + 1) int: each link's first index in hist_entry
    hist_entry: np.ndarray  # int: per link, the entries with a rate crossing it, increasing
    hist_after: np.ndarray  # float: the link's residual after each of them
    link_start: np.ndarray  # (links + 1) int: each link's first index in link_entry
    link_entry: np.ndarray  # int: per link, every entry crossing it, increasing
    link_partner: np.ndarray  # (entries * k, k - 1) int: the other links of each of those
    closed_at: np.ndarray  # int per link: the entry after which it is full in the pass
    state: np.ndarray  # int [link lists built (0 / 1), passes made, started (0 / 1)]
    # scratch of greedy_update
    in_diff: np.ndarray  # bool per link: its residual differs from the recorded pass
    diff_residual: np.ndarray  # float per link: its residual in the new pass, while in the diff
    queued: np.ndarray  # bool per link: it has an entry in the heap
    next_index: np.ndarray  # int per link: its next entry to visit (index in link_entry)
    cursor: np.ndarray  # int per link: its first entry of hist_entry not before the visit
    heap_entry: np.ndarray  # int: the min-heap of links' next entries ...
    heap_link: np.ndarray  # ... and their links
    emptied: np.ndarray  # int: the entries with a rate whose group emptied
    visited: np.ndarray  # int: the entries the new pass visited, increasing
    stamp: np.ndarray  # int per entry: the pass that last visited it
    merged: np.ndarray  # int: the new list of entries with a rate


@njit(cache=True)
def greedy_pass(n_entries, n_links, k):  # pragma: no cover - compiled
    """An empty :class:`GreedyPass` for an order of ``n_entries`` groups crossing ``k`` of
    ``n_links`` links each."""
    return GreedyPass(
        np.zeros(n_entries),
        np.empty((n_entries, k)),
        np.empty(n_entries, dtype=np.int64),
        np.zeros(1, dtype=np.int64),
        np.zeros(n_links + 1, dtype=np.int64),
        np.empty(n_entries * k, dtype=np.int64),
        np.empty(n_entries * k),
        np.zeros(n_links + 1, dtype=np.int64),
        np.empty(n_entries * k, dtype=np.int64),
        np.empty((n_entries * k, max(k - 1, 1)), dtype=np.int64),
        np.zeros(n_links, dtype=np.int64),
        np.zeros(3, dtype=np.int64),
        np.zeros(n_links, dtype=np.bool_),
        np.zeros(n_links),
        np.zeros(n_links, dtype=np.bool_),
        np.zeros(n_links, dtype=np.int64),
        np.zeros(n_links, dtype=np.int64),
        np.empty(n_links + 1, dtype=np.int64),
        np.empty(n_links + 1, dtype=np.int64),
        np.empty(n_entries, dtype=np.int64),
        np.empty(n_entries, dtype=np.int64),
        np.zeros(n_entries, dtype=np.int64),
        np.empty(n_entries, dtype=np.int64),
    )


@njit(cache=True)
def greedy_start(record, links, count, caps, order, capacity, rates):  # pragma: no cover
    """The whole greedy over ``order`` (as :func:`simulator.allocation.greedy_groups`, same
    arguments), recorded in ``record`` (a :func:`greedy_pass` of the order's length)."""
    k = links.shape[1]
    entry_rate, after, positive = record.entry_rate, record.after, record.positive
    residual = capacity.copy()
    n_positive = 0
    for e in range(order.shape[0]):
        g = order[e]
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
    record.state[0] = 0
    record.state[2] = 1
    _record_history(record, links, order, capacity)


@njit(cache=True)
def _record_history(record, links, order, capacity):  # pragma: no cover - compiled
    """Per finite link, the entries with a rate crossing it and its residual after each
    (``hist_*`` of ``record``, from its ``positive`` and ``after``)."""
    k = links.shape[1]
    start, entry, residual_after = record.hist_start, record.hist_entry, record.hist_after
    positive, after = record.positive, record.after
    n_positive = record.n_positive[0]
    start[:] = 0
    for i in range(n_positive):
        g = order[positive[i]]
        for c in range(k):
            if capacity[links[g, c]] < np.inf:
                start[links[g, c] + 1] += 1
    for link in range(capacity.shape[0]):
        start[link + 1] += start[link]
    fill = start[:-1].copy()
    for i in range(n_positive):
        e = positive[i]
        g = order[e]
        for c in range(k):
            link = links[g, c]
            if capacity[link] < np.inf:
                entry[fill[link]] = e
                residual_after[fill[link]] = after[e, c]
                fill[link] += 1
    # a full link stays full to the end of the pass: nothing after it crossing it has a rate
    closed_at = record.closed_at
    for link in range(capacity.shape[0]):
        closed_at[link] = order.shape[0]
        if capacity[link] <= 0.0:
            closed_at[link] = -1
        elif start[link + 1] > start[link] and residual_after[start[link + 1] - 1] == 0.0:
            closed_at[link] = entry[start[link + 1] - 1]


@njit(cache=True)
def _record_link_entries(record, links, order, capacity):  # pragma: no cover - compiled
    """Per finite link, every entry of the order crossing it, increasing (``link_*``)."""
    k = links.shape[1]
    start, entry = record.link_start, record.link_entry
    start[:] = 0
    for e in range(order.shape[0]):
        for c in range(k):
            if capacity[links[order[e], c]] < np.inf:
                start[links[order[e], c] + 1] += 1
    for link in range(capacity.shape[0]):
        start[link + 1] += start[link]
    fill = start[:-1].copy()
    partner = record.link_partner
    for e in range(order.shape[0]):
        g = order[e]
        for c in range(k):
            link = links[g, c]
            if capacity[link] < np.inf:
                entry[fill[link]] = e
                j = 0
                for other in range(k):
                    if other != c:
                        partner[fill[link], j] = links[g, other]
                        j += 1
                fill[link] += 1
    record.state[0] = 1


@njit(cache=True)
def _next_open(record, i, end):  # pragma: no cover - compiled
    """The first index from ``i`` (below ``end``) of a link's entries (``link_entry``) that
    may change: one whose other links are not all full in both passes. A link full in the
    recorded pass and outside the diff is full in the new one too, from there to the end, so
    the entries crossing it keep rate 0 and leave every residual as it was. (A link that joins
    the diff later walks its own entries.)"""
    entry, partner = record.link_entry, record.link_partner
    in_diff, closed_at = record.in_diff, record.closed_at
    n_partners = partner.shape[1] if record.after.shape[1] > 1 else 0
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


@njit(cache=True)
def _heap_push(entries, heap_links, size, e, link):  # pragma: no cover - compiled
    """Push (entry ``e``, ``link``) on the min-heap of entries; ``size`` is its length, the new
    one is returned."""
    i = size
    entries[i], heap_links[i] = e, link
    while i > 0:
        parent = (i - 1) // 2
        if entries[parent] <= entries[i]:
            break
        entries[parent], entries[i] = entries[i], entries[parent]
        heap_links[parent], heap_links[i] = heap_links[i], heap_links[parent]
        i = parent
    return size + 1


@njit(cache=True)
def _heap_pop(entries, heap_links, size):  # pragma: no cover - compiled
    """Drop the smallest entry of the min-heap of ``size`` entries; returns the new size."""
    size -= 1
    entries[0], heap_links[0] = entries[size], heap_links[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and entries[child + 1] < entries[child]:
            child += 1
        if entries[i] <= entries[child]:
            break
        entries[child], entries[i] = entries[i], entries[child]
        heap_links[child], heap_links[i] = heap_links[i], heap_links[child]
        i = child
    return size


@njit(cache=True)
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
    and caps) after groups of it emptied: ``rates`` and ``record`` become what
    :func:`greedy_start` would give now, visiting only the entries the change reaches.

    Returns:
        The number of entries visited (0 if no group with a rate emptied).
    """
    k = links.shape[1]
    positive, entry_rate, after = record.positive, record.entry_rate, record.after
    hist_start, hist_entry, hist_after = record.hist_start, record.hist_entry, record.hist_after
    link_start, link_entry = record.link_start, record.link_entry
    in_diff, diff_residual, queued = record.in_diff, record.diff_residual, record.queued
    next_index, cursor = record.next_index, record.cursor
    heap_entry, heap_link = record.heap_entry, record.heap_link
    emptied, visited, stamp, merged = record.emptied, record.visited, record.stamp, record.merged
    n_positive = record.n_positive[0]
    # only entries with a rate make progress, so only they can have emptied
    n_emptied = 0
    for i in range(n_positive):
        if count[order[positive[i]]] < 0.5:
            emptied[n_emptied] = positive[i]
            n_emptied += 1
    if n_emptied == 0:
        return 0
    if record.state[0] == 0:
        _record_link_entries(record, links, order, capacity)
    record.state[1] += 1
    this_pass = record.state[1]
    for link in range(capacity.shape[0]):
        in_diff[link] = False
        queued[link] = False
        cursor[link] = hist_start[link]
    before = np.empty(k)
    size = 0
    next_emptied = 0
    last = -1
    n_visited = 0
    n_entries = order.shape[0]
    while True:
        e = n_entries
        link = -1
        if size > 0:
            e, link = heap_entry[0], heap_link[0]
        if next_emptied < n_emptied and emptied[next_emptied] <= e:
            e, link = emptied[next_emptied], -1
            next_emptied += 1
        elif size > 0:
            size = _heap_pop(heap_entry, heap_link, size)
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
                while cursor[at] < hist_start[at + 1] and hist_entry[cursor[at]] < e:
                    cursor[at] += 1
                if in_diff[at]:
                    before[c] = diff_residual[at]
                elif cursor[at] > hist_start[at]:
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
            stamp[e] = this_pass
            visited[n_visited] = e
            n_visited += 1
            for c in range(k):
                at = links[g, c]
                if capacity[at] == np.inf:
                    continue
                if old_rate > 0:  # the recorded residual after it is its history entry
                    recorded = hist_after[cursor[at]]
                elif cursor[at] > hist_start[at]:
                    recorded = hist_after[cursor[at] - 1]
                else:
                    recorded = capacity[at]
                now = before[c] - new_rate if new_rate > 0 else before[c]
                if new_rate > 0:
                    after[e, c] = now
                if now == recorded:
                    in_diff[at] = False
                    continue
                diff_residual[at] = now
                if not in_diff[at]:
                    in_diff[at] = True
                    if not queued[at]:
                        i = _first_after(link_entry, link_start[at], link_start[at + 1], e)
                        i = _next_open(record, i, link_start[at + 1])
                        if i < link_start[at + 1]:
                            next_index[at] = i
                            queued[at] = True
                            size = _heap_push(heap_entry, heap_link, size, link_entry[i], at)
        if link >= 0:  # the link's walk moves on while it is in the diff
            i = next_index[link] + 1
            if in_diff[link]:
                i = _next_open(record, i, link_start[link + 1])
            if in_diff[link] and i < link_start[link + 1]:
                next_index[link] = i
                size = _heap_push(heap_entry, heap_link, size, link_entry[i], link)
            else:
                queued[link] = False
    # the new entries with a rate: the recorded ones not visited, and the visited with a rate
    m = 0
    i = 0
    j = 0
    while i < n_positive or j < n_visited:
        if j == n_visited or (i < n_positive and positive[i] < visited[j]):
            if stamp[positive[i]] != this_pass:
                merged[m] = positive[i]
                m += 1
            i += 1
        else:
            if entry_rate[visited[j]] > 0:
                merged[m] = visited[j]
                m += 1
            j += 1
    positive[:m] = merged[:m]
    record.n_positive[0] = m
    _record_history(record, links, order, capacity)
    return n_visited
