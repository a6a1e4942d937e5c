"""The verdict rule on constructed ratios: each of the four outcomes, Holm across a family, the
power estimate, and the t distribution it rests on."""

from __future__ import annotations

import math

import pytest

from controller.stats import t975, t_cdf
from experiments.verdicts import Verdict, decide, holm_levels, seeds_needed

FAST = [0.80, 0.82, 0.79, 0.81, 0.80]
SLOW = [1.20, 1.22, 1.19, 1.21, 1.20]
SAME = [1.001, 0.999, 1.002, 0.998, 1.0, 1.001, 0.999, 1.0]
NOISE = [0.7, 1.3, 0.9, 1.2]
BARELY = [0.9, 1.0, 0.85, 0.95, 0.92]  # p = 0.041 alone


@pytest.mark.parametrize("df", range(1, 31))
def test_the_t_cdf_meets_the_quantiles(df):
    assert t_cdf(t975(df), df) == pytest.approx(0.975, abs=1e-12)
    assert t_cdf(-t975(df), df) == pytest.approx(0.025, abs=1e-12)
    assert t_cdf(0.0, df) == 0.5


def test_the_t_cdf_at_known_points():
    assert t_cdf(1.3, 7) == pytest.approx(0.882616, abs=1e-5)
    assert t_cdf(-2.1, 3) == pytest.approx(0.063283, abs=1e-5)
    assert t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-12)  # Cauchy: 1/2 + atan(1)/pi
    assert t_cdf(math.inf, 4) == 1.0 and t_cdf(-math.inf, 4) == 0.0


@pytest.mark.parametrize(
    ("ratios", "lower_is_better", "verdict"),
    [(FAST, True, Verdict.REPRODUCED), (SLOW, True, Verdict.OPPOSITE),
     (FAST, False, Verdict.OPPOSITE), (SLOW, False, Verdict.REPRODUCED),
     (SAME, True, Verdict.EQUIVALENT), (NOISE, True, Verdict.INCONCLUSIVE)],
)  # fmt: skip
def test_each_of_the_four_outcomes(ratios, lower_is_better, verdict):
    decision = decide({"baseline": ratios}, lower_is_better=lower_is_better)["baseline"]
    assert decision.verdict == verdict
    assert (decision.seeds_needed is None) == (verdict != Verdict.INCONCLUSIVE)
    assert decision.ratio.n == len(ratios)


def test_a_small_but_certain_effect_inside_the_margin_is_equivalent_not_reproduced():
    ratios = [0.990, 0.991, 0.989, 0.990, 0.992, 0.990]
    decision = decide({"b": ratios})["b"]
    assert decision.p_difference < 0.001  # a real difference ...
    assert decision.verdict == Verdict.EQUIVALENT  # ... smaller than what matters
    assert decide({"b": ratios}, margin=0.005)["b"].verdict == Verdict.REPRODUCED


def test_one_seed_decides_nothing():
    decision = decide({"b": [0.5]})["b"]
    assert decision.verdict == Verdict.INCONCLUSIVE and decision.seeds_needed is None


def test_the_inverse_ratios_give_the_mirrored_verdict():
    for ratios in (FAST, SLOW, SAME, NOISE):
        a = decide({"b": ratios})["b"]
        b = decide({"b": [1 / r for r in ratios]}, lower_is_better=False)["b"]
        assert a.verdict == b.verdict
        assert a.p_difference == pytest.approx(b.p_difference)


def test_holm_steps_down_and_stops_at_the_first_kept_hypothesis():
    assert holm_levels({"a": 0.01, "b": 0.03, "c": 0.5}) == pytest.approx(
        {"a": 0.05 / 3, "b": 0.0, "c": 0.0}
    )
    assert holm_levels({"a": 0.001, "b": 0.02, "c": 0.04}) == pytest.approx(
        {"a": 0.05 / 3, "b": 0.05 / 2, "c": 0.05}
    )


def test_a_comparison_significant_alone_is_not_in_a_family_of_three():
    assert decide({"b": BARELY})["b"].verdict == Verdict.REPRODUCED
    family = decide({"b": BARELY, "c": NOISE, "d": [1.3, 0.8, 1.1, 0.9]})
    assert family["b"].verdict == Verdict.INCONCLUSIVE
    assert family["b"].seeds_needed > len(BARELY)
    # a decisive comparison survives the adjustment
    assert decide({"b": FAST, "c": NOISE, "d": SLOW})["b"].verdict == Verdict.REPRODUCED


def test_the_seeds_needed_follow_the_normal_approximation():
    # ((1.960 + 0.842) x 0.1 / 0.05)^2 = 31.4
    assert seeds_needed(-0.05, 0.1, margin=0.0, level=0.05) == 32
    # more spread, more seeds; no spread, no estimate
    assert seeds_needed(-0.05, 0.2, 0.0, 0.05) > seeds_needed(-0.05, 0.1, 0.0, 0.05)
    assert seeds_needed(-0.05, 0.0, 0.03, 0.05) is None
    # a mean well inside the margin is decided sooner as equivalence
    assert seeds_needed(0.001, 0.02, 0.03, 0.05) < seeds_needed(0.001, 0.02, 0.0, 0.05)


@pytest.mark.parametrize("bad", [[0.0, 1.0], [-1.0, 1.0], [math.inf, 1.0], [math.nan, 1.0], []])
def test_ratios_must_be_finite_and_positive(bad):
    with pytest.raises(ValueError, match="finite and > 0"):
        decide({"b": bad})
