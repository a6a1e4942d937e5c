"""One definition per metric for the whole project: the controller's latency statistics, the
simulator and the testbed summarise with these functions.

Percentiles are **nearest rank**: the p-th percentile of n values is the ``ceil(p / 100 * n)``-th
smallest (the 1st for p = 0), always an observed value, never an interpolation between two
(numpy's ``method="inverted_cdf"``; the lower order statistic the coflow literature's tools
report). With few values this matters: the p95 of 6 stage times is the largest of them.

Across seeds: a result is a mean with its two-sided **95 % confidence interval** (Student's t
with n - 1 degrees of freedom, :func:`mean_ci`); a comparison against a baseline is the
geometric mean of the **per-seed ratios** (paired: the same workload under both policies) with
its interval, from the log-ratios (:func:`paired_ratio_ci`); a policy is called best only if its
interval lies clear of every other's (:func:`clear_best`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

# two-sided 95 %: Student's t quantile 0.975 for 1..30 degrees of freedom
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip
_Z975 = 1.959964


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


def t975(df: int) -> float:
    """Student's t quantile 0.975 (two-sided 95 %) for ``df`` degrees of freedom: tabulated
    to 30, then the Cornish-Fisher expansion (error below 1e-3)."""
    if df < 1:
        raise ValueError("a t quantile needs at least 1 degree of freedom")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` seeds and its 95 % confidence interval ``[low, high]`` (both the mean
    when n = 1: one seed gives no interval). Ratios have asymmetric intervals."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        """Half the interval's width (NaN for one seed)."""
        return math.nan if self.n < 2 else (self.high - self.low) / 2

    def overlaps(self, other: Interval) -> bool:
        """Whether the intervals share a point (with one seed: always, nothing is separated)."""
        if self.n < 2 or other.n < 2:
            return True
        return self.low <= other.high and other.low <= self.high

    def format(self, digits: int = 2) -> str:
        """``mean +/- half_width``, ``mean [low, high]`` when asymmetric, ``mean (n=1)``."""
        if self.n < 2:
            return f"{self.mean:.{digits}f} (n=1)"
        if math.isclose(self.mean - self.low, self.high - self.mean, rel_tol=1e-6, abs_tol=1e-12):
            return f"{self.mean:.{digits}f} +/- {self.half_width:.{digits}f}"
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def mean_ci(values: Iterable[float | None]) -> Interval | None:
    """Mean and 95 % confidence interval of ``values`` (``None`` dropped); ``None`` if empty."""
    data = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not data:
        return None
    n = len(data)
    mean = math.fsum(data) / n
    if n == 1:
        return Interval(mean, mean, mean, 1)
    variance = math.fsum((x - mean) ** 2 for x in data) / (n - 1)
    half = t975(n - 1) * math.sqrt(variance / n)
    return Interval(mean, mean - half, mean + half, n)


def paired_ratio_ci(
    values: Mapping[Hashable, float | None], baseline: Mapping[Hashable, float | None]
) -> Interval | None:
    """Ratio of ``values`` to ``baseline`` over the seeds both have, paired per seed: the
    geometric mean of the per-seed ratios and its 95 % interval, computed on their logarithms
    (ratios multiply: X / Y is then exactly the inverse of Y / X, and the interval is never
    below 0)."""
    logs = [
        math.log(values[k] / baseline[k])
        for k in values
        if values[k] is not None and values[k] > 0 and (baseline.get(k) or 0) > 0
    ]
    ci = mean_ci(logs)
    if ci is None:
        return None
    return Interval(math.exp(ci.mean), math.exp(ci.low), math.exp(ci.high), ci.n)


def clear_best(intervals: Mapping[str, Interval | None], lower_is_better: bool = True):
    """The name whose interval lies entirely on the good side of every other's, or ``None``
    (no winner where intervals overlap, or with one seed)."""
    known = {k: v for k, v in intervals.items() if v is not None}
    if len(known) < 2:
        return None
    best = (min if lower_is_better else max)(known, key=lambda k: known[k].mean)
    for name, other in known.items():
        if name != best and known[best].overlaps(other):
            return None
    return best
