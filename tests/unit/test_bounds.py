"""Lower bounds on hand-worked examples."""

from __future__ import annotations

import itertools

import pytest

from controller.bounds import (
    completion_lower_bound,
    isolation_bound,
    smith_bound,
    srpt_bound,
)


def test_smith_bound_is_the_single_port_optimum():
    # One port, p = 3, 1, 2 with weights 1, 1, 2: Smith (p/w: 3, 1, 1) -> 1, 2, 3 ->
    # completions 1, 3, 6 -> 1*1 + 2*3 + 1*6 = 13, and no order does better.
    demands = [{"p": 3}, {"p": 1}, {"p": 2}]
    weights = [1, 1, 2]
    assert smith_bound(demands, weights) == 13
    best = min(
        sum(weights[k] * sum(demands[j]["p"] for j in perm[: i + 1]) for i, k in enumerate(perm))
        for perm in itertools.permutations(range(3))
    )
    assert best == 13


def test_smith_bound_takes_the_worst_port():
    demands = [{"a": 1, "b": 5}, {"a": 1, "b": 5}]
    assert smith_bound(demands) == 15  # port b: 5 + 10


def test_srpt_bound_with_releases():
    # One port: job 0 (r=0, p=4), job 1 (r=1, p=1). SRPT: 0 runs 0-1, 1 runs 1-2, 0 ends at 5:
    # sum C = 2 + 5 = 7.
    assert srpt_bound([{"p": 4}, {"p": 1}], [0.0, 1.0]) == 7
    # An item idle on the port still completes no earlier than its release.
    assert srpt_bound([{"p": 2}, {}], [0.0, 10.0]) == 12


def test_isolation_bound_counts_release_bottleneck_and_compute():
    assert isolation_bound([{"a": 2, "b": 3}], releases=[1.0], extra_s=[0.5]) == 4.5


def test_completion_lower_bound_picks_the_best_applicable():
    # zero releases: Smith (2 + 4 = 6) beats isolation (2 + 2 = 4)
    assert completion_lower_bound([{"p": 2}, {"p": 2}]) == 6
    # releases: SRPT (item 0 keeps the port, 2 + 4 = 6) vs isolation (0+2 + 1+2 = 5)
    assert completion_lower_bound([{"p": 2}, {"p": 2}], releases=[0, 1]) == 6
    # weighted with releases: only the isolation bound holds, 2*(0+2) + 1*(1+2) = 7
    assert completion_lower_bound([{"p": 2}, {"p": 2}], [2, 1], [0, 1]) == pytest.approx(7)


def test_the_contended_instances_make_the_order_matter():
    """On them a uniformly random order averages at least 1.5x the best order, so a bound
    check there could fail for an ordering no better than chance."""
    import random
    import statistics

    from simulator import reference

    rng = random.Random(7)
    coflow_ratios = []
    for n in range(4, reference.MAX_COFLOWS + 1):
        for _ in range(4):
            best, values = reference.brute_force_best(
                reference.state_of(reference.contended_coflows(rng, n))
            )
            coflow_ratios.append(statistics.fmean(values) / best)
    assert statistics.fmean(coflow_ratios) >= 1.5, coflow_ratios
    stage_ratios = []
    for _ in range(10):
        state = reference.contended_stage_instance(rng, 3, max_jobs=2)
        values = reference.every_order_stage_completion_sums(state)
        stage_ratios.append(statistics.fmean(values) / min(values))
    assert statistics.fmean(stage_ratios) >= 1.5, stage_ratios
