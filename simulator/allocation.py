"""Rate allocation of the flow-level simulator, compiled with numba.

Flows are rows of an ``(n, k)`` array of link indices (a big switch uses 2 links per flow, the
source's egress and the destination's ingress; a leaf-spine fabric adds the two leaf uplinks;
unused columns point at a padding link of infinite capacity).

- :func:`priority_max_min`: strict priority between levels (0 first), max-min fair within a
  level with per-flow caps, work-conserving: each level takes what the levels above it left.
  Progressive filling, exact: the most constrained link's flows are frozen at its fair share,
  flows capped below the current share are frozen at their cap, until every flow is frozen.
  Each link is a bottleneck once, so one level costs O(flows x k + links^2).
- :func:`greedy_in_order`: the "ideal" mode: each flow in turn takes the minimum of what is
  left on its links (and its cap), like :func:`controller.fluid.greedy_completion_times`.

The first call compiles the kernels (a few seconds; cached on disk afterwards).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# relative slack when comparing shares, so that float error never leaves a link a hair short
_REL = 1e-9


@njit(cache=True)
def _fill(members, links, caps, residual, rates):  # pragma: no cover - compiled
    """Max-min fair rates of ``members`` (flow indices) on ``residual``; updates both."""
    n = members.shape[0]
    k = links.shape[1]
    n_links = residual.shape[0]
    if n == 0:
        return
    count = np.zeros(n_links, dtype=np.int64)
    for i in range(n):
        for c in range(k):
            count[links[members[i], c]] += 1
    # flows of every link (CSR), to freeze a bottleneck link's flows without a full scan
    start = np.zeros(n_links + 1, dtype=np.int64)
    for link in range(n_links):
        start[link + 1] = start[link] + count[link]
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
    while left > 0:
        share = np.inf
        for link in range(n_links):
            if count[link] > 0:
                s = residual[link] / count[link]
                if s < share:
                    share = s
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
                take = max(cap, 0.0)
                f = members[i]
                rates[f] = take
                frozen[i] = True
                left -= 1
                for c in range(k):
                    link = links[f, c]
                    residual[link] = max(residual[link] - take, 0.0)
                    count[link] -= 1
                next_capped += 1
            continue
        limit = share * (1 + _REL)
        for link in range(n_links):
            if count[link] == 0 or residual[link] / count[link] > limit:
                continue
            for j in range(start[link], start[link + 1]):
                i = on_link[j]
                if frozen[i]:
                    continue
                f = members[i]
                rates[f] = share
                frozen[i] = True
                left -= 1
                for c in range(k):
                    other = links[f, c]
                    residual[other] = max(residual[other] - share, 0.0)
                    count[other] -= 1


@njit(cache=True)
def _priority_max_min(links, levels, caps, capacity):  # pragma: no cover - compiled
    n = links.shape[0]
    rates = np.zeros(n)
    residual = capacity.copy()
    if n == 0:
        return rates
    # counting sort by level (levels are small integers)
    top = levels.max()
    count = np.zeros(top + 2, dtype=np.int64)
    for f in range(n):
        count[levels[f] + 1] += 1
    for level in range(top + 1):
        count[level + 1] += count[level]
    order = np.empty(n, dtype=np.int64)
    fill = count[:-1].copy()
    for f in range(n):
        order[fill[levels[f]]] = f
        fill[levels[f]] += 1
    for level in range(top + 1):
        if count[level + 1] > count[level]:
            _fill(order[count[level] : count[level + 1]], links, caps, residual, rates)
    return rates


@njit(cache=True)
def _greedy(links, order, caps, capacity):  # pragma: no cover - compiled
    residual = capacity.copy()
    rates = np.zeros(links.shape[0])
    k = links.shape[1]
    for f in order:
        rate = caps[f]
        for c in range(k):
            if residual[links[f, c]] < rate:
                rate = residual[links[f, c]]
        if rate > 0:
            rates[f] = rate
            for c in range(k):
                residual[links[f, c]] -= rate
    return rates


def _caps(n: int, caps: np.ndarray | None) -> np.ndarray:
    return np.full(n, np.inf) if caps is None else np.ascontiguousarray(caps, dtype=np.float64)


def priority_max_min(
    links: np.ndarray,
    levels: np.ndarray,
    capacity: np.ndarray,
    caps: np.ndarray | None = None,
) -> np.ndarray:
    """Rates (bit/s) under strict priority between ``levels`` and max-min within a level.

    Args:
        links: ``(n, k)`` link indices of each flow.
        levels: priority level of each flow (0 is served first).
        capacity: capacity of every link (bit/s).
        caps: per-flow rate caps (``inf`` for none), or ``None``.
    """
    n = links.shape[0]
    return _priority_max_min(
        np.ascontiguousarray(links, dtype=np.int64),
        np.ascontiguousarray(levels, dtype=np.int64),
        _caps(n, caps),
        np.ascontiguousarray(capacity, dtype=np.float64),
    )


def max_min(links: np.ndarray, capacity: np.ndarray, caps: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rates of flows sharing ``capacity`` (one level)."""
    return priority_max_min(links, np.zeros(links.shape[0], dtype=np.int64), capacity, caps)


def greedy_in_order(
    links: np.ndarray,
    order: np.ndarray,
    capacity: np.ndarray,
    caps: np.ndarray | None = None,
) -> np.ndarray:
    """Each flow, in ``order`` (flow indices, most urgent first), takes what its links have left."""
    n = links.shape[0]
    return _greedy(
        np.ascontiguousarray(links, dtype=np.int64),
        np.ascontiguousarray(order, dtype=np.int64),
        _caps(n, caps),
        np.ascontiguousarray(capacity, dtype=np.float64),
    )


@njit(cache=True)
def _advance(remaining, rates, limit, simultaneous):  # pragma: no cover - compiled
    n = remaining.shape[0]
    step = limit
    for f in range(n):
        if rates[f] > 0:
            t = remaining[f] / rates[f]
            if t < step:
                step = t
    done = np.zeros(n, dtype=np.bool_)
    n_done = 0
    if step == np.inf:
        return step, done, n_done
    for f in range(n):
        if rates[f] > 0:
            if remaining[f] / rates[f] <= step * (1 + simultaneous):
                remaining[f] = 0.0
                done[f] = True
                n_done += 1
            else:
                remaining[f] -= rates[f] * step
    return step, done, n_done


def advance(
    remaining: np.ndarray, rates: np.ndarray, limit_s: float, simultaneous: float = 1e-9
) -> tuple[float, np.ndarray, int]:
    """Move time forward to the first flow completion or ``limit_s``, whichever is first.

    ``remaining`` (bits) is updated in place. Flows that would finish within ``simultaneous``
    (relative) of the step finish with it. Returns the step, the mask of finished flows and
    their number; the step is ``inf`` when no flow moves and there is no limit.
    """
    return _advance(remaining, rates, float(limit_s), float(simultaneous))


@njit(cache=True)
def _compact(done, n_done, links, remaining, coflow, caps):  # pragma: no cover - compiled
    n = done.shape[0]
    m = n - n_done
    new_links = np.empty((m, links.shape[1]), dtype=links.dtype)
    new_remaining = np.empty(m)
    new_coflow = np.empty(m, dtype=coflow.dtype)
    new_caps = np.empty(m)
    finished = []
    j = 0
    for f in range(n):
        if done[f]:
            finished.append(coflow[f])
            continue
        new_links[j] = links[f]
        new_remaining[j] = remaining[f]
        new_coflow[j] = coflow[f]
        new_caps[j] = caps[f]
        j += 1
    return new_links, new_remaining, new_coflow, new_caps, np.array(finished, dtype=np.int64)


def compact(done, n_done, links, remaining, coflow, caps):
    """Drop the finished flows from the per-flow arrays; also returns their coflow slots."""
    return _compact(done, n_done, links, remaining, coflow, caps)
