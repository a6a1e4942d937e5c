"""One definition per metric for the whole project: the controller's latency statistics, the
simulator and the testbed summarise with these functions.

Percentiles are **nearest rank**: the p-th percentile of n values is the ``ceil(p / 100 * n)``-th
smallest (the 1st for p = 0), always an observed value, never an interpolation between two
(numpy's ``method="inverted_cdf"``; the lower order statistic the coflow literature's tools
report). With few values this matters: the p95 of 6 stage times is the largest of them.

Across seeds (a mean's confidence interval, paired ratios, the verdicts' distributions):
:mod:`controller.stats`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The ``(start, end)`` intervals merged where they overlap or touch, sorted; empty ones
    dropped."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def nearest_rank_index(n: int, q: float) -> int:
    """Index (0-based, in ascending order) of the ``q``-th percentile of ``n`` values."""
    if n < 1:
        raise ValueError("no values")
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile must be in [0, 100], got {q!r}")
    # round away float noise (99.9 * 1000 / 100 is 999.0000000000001)
    return min(n - 1, max(0, math.ceil(round(q / 100.0 * n, 9)) - 1))


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (nearest rank) of ``values``; ``None`` when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[nearest_rank_index(len(ordered), q)]


def summarise(values: Iterable[float | None]) -> dict:
    """Count, mean, median, p95, p99 (nearest rank) and max of ``values``; ``None`` entries
    (things that did not finish) are dropped."""
    data = sorted(float(v) for v in values if v is not None)
    if not data:
        return {"count": 0}
    n = len(data)
    return {
        "count": n,
        "mean": math.fsum(data) / n,
        "p50": data[nearest_rank_index(n, 50)],
        "p95": data[nearest_rank_index(n, 95)],
        "p99": data[nearest_rank_index(n, 99)],
        "max": data[-1],
    }
