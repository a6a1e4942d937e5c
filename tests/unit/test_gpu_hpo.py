"""Hermes' claim as a measurement (workloads.gpu_hpo): paired submission orders, the searches'
termination and promotion rules, the metric definitions."""

from __future__ import annotations

import math
import random

import pytest

from workloads.curves import LearningCurve, sample_curves
from workloads.gpu import GPU_POLICIES, GpuJob, make_gpu_policy, run_time_sharing
from workloads.gpu_hpo import (
    GPU_HPO_SEARCHES,
    gpu_hpo_point,
    run_gpu_hpo,
    rung_plan,
    submission_orders,
    target_accuracy,
)

POLICIES = sorted(GPU_POLICIES)


def test_every_policy_gets_the_same_orders():
    points = [gpu_hpo_point(3, p, 0.1, 2, "none", n_orders=4, n_gpus=4) for p in POLICIES]
    orders = points[0]["orders"]
    assert all(p["orders"] == orders for p in points)  # paired by order
    assert orders == submission_orders(3, 8, 4)  # from the seed alone
    assert all(sorted(o) == list(range(8)) for o in orders)
    assert len({tuple(o) for o in orders}) == 4  # different orders
    assert submission_orders(4, 8, 4) != orders
    # the same orders whatever else the cell varies (configurations per GPU aside)
    assert gpu_hpo_point(3, "fifo", 0.5, 2, "asha", n_orders=4, n_gpus=4)["orders"] == orders


def test_fifo_depends_on_the_order_but_the_seed_mean_is_deterministic():
    point = gpu_hpo_point(1, "fifo", 0.1, 8, "none")
    identified = [run["best_identified_s"] for run in point["per_order"]]
    assert len(set(identified)) > 1  # the nuisance is real
    assert point["best_identified_s"] == pytest.approx(sum(identified) / len(identified))
    assert gpu_hpo_point(1, "fifo", 0.1, 8, "none") == point


def test_no_search_in_the_identity_order_is_todays_measurement():
    # experiments.reproduce's Hermes claim: 64 configurations of 200 iterations on 8 GPUs
    curves = sample_curves(random.Random(2), 64, good_fraction=0.1, base_tau=40)
    for policy in POLICIES:
        jobs = [GpuJob(i, 1, 0.0, 200, 0.5, c) for i, c in enumerate(curves)]
        today = run_time_sharing(jobs, 8, make_gpu_policy(policy), quantum_s=5.0,
                                 resume_cost_s=0.5)  # fmt: skip
        run = run_gpu_hpo(curves, list(range(64)), policy, "none")
        assert run.best_identified_s == today.best_identified_s
        assert run.hpo_completion_s == today.makespan_s
        assert run.gpu_s == pytest.approx(64 * 200 * 0.5)


def test_target_is_a_fraction_of_the_best_converged_accuracy():
    curves = [LearningCurve(0.5, 10.0), LearningCurve(0.9, 10.0), LearningCurve(0.8, 5.0)]
    assert target_accuracy(curves) == pytest.approx(0.81)
    assert target_accuracy(curves, 0.5) == pytest.approx(0.45)
    # one GPU, FIFO, no search: configuration 0 trains 0-20 s (40 iterations of 0.5 s), then 1
    # reaches 0.81 = 0.9 of its 0.9 after 10 ln(10) = 23 iterations; 2 (0.8) never does
    run = run_gpu_hpo(curves, [0, 1, 2], "fifo", "none", n_gpus=1, max_iterations=40)
    assert run.target_reached_s == pytest.approx(20.0 + 0.5 * 10.0 * math.log(10.0))
    # in the order 2, 0, 1 configuration 1 starts at 40 s
    run = run_gpu_hpo(curves, [2, 0, 1], "fifo", "none", n_gpus=1, max_iterations=40)
    assert run.target_reached_s == pytest.approx(40.0 + 0.5 * 10.0 * math.log(10.0))
    # a target above every converged accuracy is never reached
    run = run_gpu_hpo(curves, [0, 1, 2], "fifo", "none", n_gpus=1, max_iterations=40,
                      target=0.95)  # fmt: skip
    assert run.target_reached_s is None


def test_halving_terminates_those_it_does_not_keep():
    curves = sample_curves(random.Random(5), 27, good_fraction=0.3, base_tau=40)
    plan = rung_plan(27, "halving", 200)
    assert [keep for keep, _ in plan] == [27, 9, 3, 1]
    budgets = [7, 22, 67, 200]  # 200 / 27, 200 / 9, 200 / 3, 200, rounded
    assert [sum(add for _, add in plan[: s + 1]) for s in range(4)] == budgets
    for policy in POLICIES:
        run = run_gpu_hpo(curves, list(range(27))[::-1], policy, "halving", n_gpus=4)
        # every configuration trained exactly the budget of the rung it was dropped after
        assert sorted(set(run.trained)) == budgets
        for s, (keep, _) in enumerate(plan):
            reached = [c for c in range(27) if run.trained[c] >= budgets[s]]
            assert len(reached) == keep
            if s:  # the best at the rung below's budget went on
                below = [c for c in range(27) if run.trained[c] >= budgets[s - 1]]
                ranked = sorted(below, key=lambda c: (-curves[c].accuracy(budgets[s - 1]), c))
                assert sorted(reached) == sorted(ranked[:keep])
        assert run.gpu_s == pytest.approx(sum(run.trained) * 0.5)
        assert run.best_config == next(c for c in range(27) if run.trained[c] == 200)


def test_asha_total_work_depends_on_the_finishing_order():
    # 9 configurations that differ only in converged accuracy (the same ranking at every
    # budget), rungs of 9, 3, 1 at 1, 3, 9 iterations; one GPU and FIFO finish them in the
    # submission order. ASHA promotes whoever is in the top third of those that completed the
    # rung so far, and never takes a promotion back:
    # best first: rung 0 promotes 0 (3 done), 1 (6 done), 2 (9 done); rung 1 promotes 0
    #   -> 9 + 3 * 2 + 6 = 21 iterations;
    # worst first: from the third completion on every one is the new best and is promoted:
    #   6, 5, ..., 0 out of rung 0, then 4, 3, ..., 0 out of rung 1 -> 9 + 7 * 2 + 5 * 6 = 53
    curves = [LearningCurve(0.9 - 0.05 * c, 5.0) for c in range(9)]
    assert rung_plan(9, "asha", 9) == [(9, 1), (3, 2), (1, 6)]
    best_first = run_gpu_hpo(curves, list(range(9)), "fifo", "asha", n_gpus=1, max_iterations=9)
    worst_first = run_gpu_hpo(curves, list(range(9))[::-1], "fifo", "asha", n_gpus=1,
                              max_iterations=9)  # fmt: skip
    assert best_first.gpu_s == pytest.approx(21 * 0.5)
    assert worst_first.gpu_s == pytest.approx(53 * 0.5)
    assert best_first.trained == [9, 3, 3] + [1] * 6
    assert worst_first.trained == [9] * 5 + [3, 3, 1, 1]
    # one GPU and no idle time: the HPO ends when its work is done
    assert worst_first.hpo_completion_s == pytest.approx(worst_first.gpu_s)
    # synchronous halving does the same work in either order
    halving = [run_gpu_hpo(curves, order, "fifo", "halving", n_gpus=1, max_iterations=9).gpu_s
               for order in (list(range(9)), list(range(9))[::-1])]  # fmt: skip
    assert halving == [pytest.approx((9 + 3 * 2 + 6) * 0.5)] * 2


@pytest.mark.parametrize("search", GPU_HPO_SEARCHES)
def test_every_policy_finishes_every_search(search):
    for policy in POLICIES:
        point = gpu_hpo_point(7, policy, 0.3, 4, search, n_orders=3, n_gpus=4)
        assert point["n_configs"] == 16 and len(point["per_order"]) == 3
        for run in point["per_order"]:
            assert 0 < run["hpo_completion_s"] < math.inf
            assert run["best_identified_s"] is None or 0 <= run["best_identified_s"] <= run[
                "hpo_completion_s"]  # fmt: skip
            assert run["gpu_s"] > 0
        assert point["hpo_completion_s_n"] == 3
        assert point["hpo_completion_s"] == pytest.approx(
            sum(r["hpo_completion_s"] for r in point["per_order"]) / 3
        )


def test_bad_arguments_are_refused():
    curves = [LearningCurve(0.5, 10.0)] * 3
    with pytest.raises(ValueError, match="search"):
        rung_plan(3, "hyperband", 10)
    with pytest.raises(ValueError, match="permutation"):
        run_gpu_hpo(curves, [0, 0, 1], "fifo", "none")
    with pytest.raises(ValueError, match="GPU policy"):
        run_gpu_hpo(curves, [0, 1, 2], "lifo", "none")
