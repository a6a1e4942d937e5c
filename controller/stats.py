"""Statistics across seeds, for the whole project, on ``scipy.stats``: the t and normal
distributions, a mean's interval, paired ratios, and how intervals are written out.

A result over seeds is a mean with its two-sided **95 % confidence interval** (Student's t with
n - 1 degrees of freedom, :func:`mean_ci`); a comparison against a baseline is the geometric
mean of the **per-seed ratios** (paired: the same workload under both policies) with its
interval, from the log-ratios (:func:`paired_ratio_ci`); a policy is called best only if its
interval lies clear of every other's (:func:`clear_best`). The verdicts' tests
(``experiments/verdicts.py``) use the distributions here.

An :class:`Interval` is written to JSON in one shape, :meth:`Interval.to_json`, read back by
:meth:`Interval.from_json`, and printed by :func:`format_interval` (``mean +/- half-width``, or
``mean [low, high]`` where asymmetric, as ratios are) and :func:`format_percent`.

``scipy.stats`` is imported on first use, not with this module: importing it takes seconds,
and formatting, ``--help`` and the controller need none of it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# the keys of an interval's JSON, in the order written
JSON_KEYS = ("mean", "low", "high", "n", "ci95")


def _check_df(df: float) -> None:
    if not df >= 1:
        raise ValueError(f"the t distribution needs at least 1 degree of freedom, got {df!r}")


def t_quantile(p: float, df: float) -> float:
    """Student's t distribution's ``p`` quantile with ``df`` degrees of freedom."""
    from scipy import stats

    _check_df(df)
    if not 0.0 < p < 1.0:
        raise ValueError(f"a probability in (0, 1) is needed, got {p!r}")
    return float(stats.t.ppf(p, df))


@functools.cache
def t975(df: int) -> float:
    """Student's t quantile 0.975 (two-sided 95 %) for ``df`` degrees of freedom."""
    return t_quantile(0.975, df)


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution's CDF at ``t`` with ``df`` degrees of freedom."""
    from scipy import stats

    _check_df(df)
    return float(stats.t.cdf(t, df))


def t_sf(t: float, df: float) -> float:
    """Student's t distribution's upper tail ``P(T > t)`` with ``df`` degrees of freedom
    (exact where ``1 - t_cdf`` would round to 0)."""
    from scipy import stats

    _check_df(df)
    return float(stats.t.sf(t, df))


def normal_quantile(p: float) -> float:
    """The standard normal distribution's ``p`` quantile."""
    from scipy import stats

    if not 0.0 < p < 1.0:
        raise ValueError(f"a probability in (0, 1) is needed, got {p!r}")
    return float(stats.norm.ppf(p))


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

    def scaled(self, factor: float) -> Interval:
        """The interval of ``factor`` times the values (a share in percent: 100)."""
        return Interval(factor * self.mean, factor * self.low, factor * self.high, self.n)

    def to_json(self) -> dict[str, Any]:
        """The interval as every result file holds it: ``mean``, ``low``, ``high``, ``n`` and
        ``ci95``, the half-width (NaN for one seed; for a ratio, half its asymmetric width)."""
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n,
                "ci95": self.half_width}  # fmt: skip

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> Interval:
        """The interval :meth:`to_json` wrote; also the ``mean``, ``ci95``, ``n`` entries (a
        symmetric interval by its half-width) of result files written before ``low`` and
        ``high`` were."""
        mean, n = entry["mean"], entry["n"]
        if entry.get("low") is not None:
            return cls(mean, entry["low"], entry["high"], n)
        half = entry.get("ci95")
        if n < 2 or half is None or math.isnan(half):
            half = 0.0
        return cls(mean, mean - half, mean + half, n)


def _as_interval(value: Interval | Mapping[str, Any] | None) -> Interval | None:
    if isinstance(value, Mapping):
        return None if value.get("mean") is None else Interval.from_json(value)
    return value


def format_interval(value: Interval | Mapping[str, Any] | None, digits: int = 2) -> str:
    """An interval (or its JSON) as :meth:`Interval.format` writes it; ``-`` if missing."""
    interval = _as_interval(value)
    return "-" if interval is None else interval.format(digits)


def format_percent(value: Interval | Mapping[str, Any] | None, digits: int = 0) -> str:
    """A share's interval (or its JSON) in percent (``62 +/- 5``); ``-`` if missing."""
    interval = _as_interval(value)
    return "-" if interval is None else interval.scaled(100.0).format(digits)


def mean_ci(values: Iterable[float | None]) -> Interval | None:
    """Mean and 95 % confidence interval of ``values`` (``None`` and NaN dropped); ``None`` if
    empty."""
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


def clear_best(
    intervals: Mapping[str, Interval | None], lower_is_better: bool = True
) -> str | None:
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
