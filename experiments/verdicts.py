"""Verdicts that can say "no effect": one rule for every paired comparison of the reproduction.

A comparison is a policy against a baseline on one metric (lower is better unless said), over
seeds paired by seed: each seed gives the ratio policy / baseline, and the test works on the
ratios' logarithms (ratios multiply, so X / Y is exactly the inverse of Y / X). With ``m`` the
equivalence margin (0.03: a ratio within [1/1.03, 1.03] is "no effect"), the verdict is

- **equivalent** if the two one-sided tests (TOST) reject a difference beyond the margin on
  both sides: the effect is smaller than what the margin says matters, whatever its sign;
- else **reproduced** if a two-sided t-test rejects "no difference" and the ratio is on the
  claimed side of 1, **opposite** if it is on the other;
- else **inconclusive**, with the seeds a normal-approximation power estimate says would decide
  it (80 % power at the same level, for the observed mean and spread): the fewer of those for
  a difference and those for equivalence.

Several comparisons of one claim are adjusted together with Holm's step-down procedure (each
comparison's two tests at the family's level ``alpha``): :func:`decide` takes the whole family.
The t and normal distributions are scipy's (:mod:`controller.stats`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from controller.stats import Interval, mean_ci, normal_quantile, t_cdf, t_sf

MARGIN = 0.03
ALPHA = 0.05
POWER = 0.8


class Verdict(enum.StrEnum):
    """The four outcomes of a comparison."""

    REPRODUCED = "reproduced"
    OPPOSITE = "opposite"
    EQUIVALENT = "equivalent"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Decision:
    """One comparison's verdict with what decided it.

    Attributes:
        verdict: the outcome.
        ratio: the geometric-mean ratio and its (unadjusted) 95 % interval.
        p_difference: the two-sided t-test's p-value for "ratio = 1".
        p_equivalence: the TOST p-value for "ratio outside the margin" (the larger one-sided).
        level_difference, level_equivalence: the Holm-adjusted levels each p was held to.
        seeds_needed: for an inconclusive comparison, the seeds that would decide it (None
            otherwise, or where no estimate exists: one seed, or no spread).
    """

    verdict: Verdict
    ratio: Interval
    p_difference: float
    p_equivalence: float
    level_difference: float
    level_equivalence: float
    seeds_needed: int | None


@dataclass(frozen=True)
class _Tests:
    ratio: Interval
    p_difference: float
    p_equivalence: float
    mean: float  # of the log ratios
    sd: float
    n: int


def _tests(log_ratios: Sequence[float], margin: float) -> _Tests:
    n = len(log_ratios)
    ci = mean_ci(log_ratios)
    ratio = Interval(math.exp(ci.mean), math.exp(ci.low), math.exp(ci.high), n)
    mean = ci.mean
    if n < 2:
        return _Tests(ratio, 1.0, 1.0, mean, math.nan, n)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in log_ratios) / (n - 1))
    bound = math.log1p(margin)
    if sd == 0.0:  # every seed the same ratio: the tests are exact
        p_diff = 1.0 if mean == 0.0 else 0.0
        p_equiv = 0.0 if abs(mean) < bound else 1.0
        return _Tests(ratio, p_diff, p_equiv, mean, sd, n)
    se = sd / math.sqrt(n)
    p_diff = 2.0 * t_sf(abs(mean) / se, n - 1)
    p_equiv = max(t_sf((mean + bound) / se, n - 1), t_cdf((mean - bound) / se, n - 1))
    return _Tests(ratio, p_diff, p_equiv, mean, sd, n)


def holm_levels(p_values: Mapping[Hashable, float], alpha: float = ALPHA) -> dict:
    """Holm's step-down levels: the level each of ``p_values`` is compared with, in ascending
    order of p ``alpha / m``, ``alpha / (m - 1)``, ...; once one is not rejected, every larger
    p is held to level 0 (not rejected either)."""
    order = sorted(p_values, key=lambda k: (p_values[k], str(k)))
    levels, stopped = {}, False
    for i, key in enumerate(order):
        level = alpha / (len(order) - i)
        if stopped or p_values[key] > level:
            stopped = True
            levels[key] = 0.0
        else:
            levels[key] = level
    return levels


def seeds_needed(mean: float, sd: float, margin: float, level: float, power: float = POWER):
    """Seeds (paired) a normal-approximation power estimate says would decide a comparison
    with this mean and spread of log ratios at ``level``: for a difference
    ``((z_{1-level/2} + z_power) sd / |mean|)^2``, for equivalence
    ``((z_{1-level} + z_{(1+power)/2}) sd / (log(1+margin) - |mean|))^2`` (when ``|mean|`` is
    inside the margin); the fewer. ``None`` without spread or a usable level."""
    if not (sd > 0) or not 0 < level < 1:
        return None
    z = normal_quantile
    candidates = []
    if mean != 0:
        candidates.append(((z(1 - level / 2) + z(power)) * sd / abs(mean)) ** 2)
    room = math.log1p(margin) - abs(mean)
    if room > 0:
        candidates.append(((z(1 - level) + z((1 + power) / 2)) * sd / room) ** 2)
    return max(2, math.ceil(min(candidates))) if candidates else None


def decide(
    families: Mapping[Hashable, Sequence[float]],
    lower_is_better: bool = True,
    margin: float = MARGIN,
    alpha: float = ALPHA,
) -> dict[Hashable, Decision]:
    """The verdict of each comparison of one claim (``families``: comparison -> its per-seed
    ratios policy / baseline, paired), Holm-adjusted across them (the difference tests as one
    family, the equivalence tests as another)."""
    tests = {}
    for key, ratios in families.items():
        if not ratios or any(not (r > 0) or math.isinf(r) for r in ratios):
            raise ValueError(f"{key}: ratios must be finite and > 0, got {list(ratios)}")
        tests[key] = _tests([math.log(r) for r in ratios], margin)
    diff_levels = holm_levels({k: t.p_difference for k, t in tests.items()}, alpha)
    equiv_levels = holm_levels({k: t.p_equivalence for k, t in tests.items()}, alpha)
    out = {}
    for key, t in tests.items():
        better = t.mean < 0 if lower_is_better else t.mean > 0
        if t.n >= 2 and t.p_equivalence <= equiv_levels[key]:
            verdict, needed = Verdict.EQUIVALENT, None
        elif t.n >= 2 and t.p_difference <= diff_levels[key]:
            verdict, needed = (Verdict.REPRODUCED if better else Verdict.OPPOSITE), None
        else:
            verdict = Verdict.INCONCLUSIVE
            # held to the family's first Holm level: the strictest it could meet
            needed = seeds_needed(t.mean, t.sd, margin, alpha / len(tests))
        out[key] = Decision(verdict, t.ratio, t.p_difference, t.p_equivalence,
                            diff_levels[key], equiv_levels[key], needed)  # fmt: skip
    return out
