"""Order -> 8 priority levels -> DSCP."""

from __future__ import annotations

import numpy as np
import pytest

from controller import schedule as schedule_module
from controller.model import ClusterState, Coflow, Flow, Job, Stage
from controller.policies import make_policy
from controller.schedule import (
    LEVEL_DSCP,
    N_LEVELS,
    Schedule,
    coflow_levels,
    dscp_of_level,
    level_of_dscp,
    level_of_rank,
    one_coflow_ranks,
)


def test_first_seven_ranks_get_their_own_level_the_rest_share_the_lowest():
    schedule = Schedule.from_order(range(10))
    levels = coflow_levels(schedule)
    assert [levels[c] for c in range(10)] == [0, 1, 2, 3, 4, 5, 6, 7, 7, 7]
    assert level_of_rank(100) == N_LEVELS - 1


def test_tied_coflows_share_a_level():
    schedule = Schedule.from_groups([[5, 6], [], [7]])
    assert schedule.ranks == ((5, 6), (7,))
    assert schedule.order == [5, 6, 7]
    assert coflow_levels(schedule) == {5: 0, 6: 0, 7: 1}


def test_dscp_mapping_is_one_to_one_and_lowest_is_best_effort():
    assert len(set(LEVEL_DSCP)) == N_LEVELS
    assert all(0 <= d < 64 for d in LEVEL_DSCP)
    assert dscp_of_level(N_LEVELS - 1) == 0  # unmarked traffic shares the lowest class
    for level in range(N_LEVELS):
        assert level_of_dscp(dscp_of_level(level)) == level
    assert level_of_dscp(46) == N_LEVELS - 1
    with pytest.raises(ValueError, match="level must be in 0..7"):
        dscp_of_level(8)


def test_a_coflow_rank_of_its_own_is_made_once_and_kept():
    order = list(range(1000, 3000))
    first = one_coflow_ranks(order)
    assert first == tuple(zip(order))
    again = one_coflow_ranks(order[::-1])
    assert again == tuple(zip(order[::-1]))
    # the very same tuples: a reorder makes one tuple, not one per coflow
    assert all(a is b for a, b in zip(again, first[::-1], strict=True))
    assert Schedule.from_order(iter(order)).ranks[5] is first[5]


def test_kept_ranks_are_forgotten_when_far_more_than_a_call_asks_for():
    one_coflow_ranks(list(range(20_000)))
    one_coflow_ranks([1, 2, 3])
    assert len(schedule_module._ONE_COFLOW_RANKS) <= 2 * 3 + 4096


def test_ids_of_another_type_get_ranks_of_their_own():
    kept = one_coflow_ranks([5, 6])
    ranks = one_coflow_ranks([np.int64(5), np.int64(6)])
    assert ranks == ((5,), (6,))
    assert ranks[0] is not kept[0] and type(ranks[0][0]) is np.int64
    assert one_coflow_ranks([]) == ()


def _one_coflow_per_job_and_stage(n: int) -> ClusterState:
    """``n`` coflows between 4 hosts, each of its own job in a stage of its own, as arrays
    (indexed), so every policy takes its array path."""
    coflows, jobs, stages = [], [], []
    for k in range(n):
        src = k % 4
        dst = (src + 1 + (k // 4) % 3) % 4
        coflows.append(Coflow(k, [Flow(src, dst, 1e6 * (1 + k % 7))], arrival_s=k, job_id=k))
        jobs.append(Job(k, {}, iteration_budget=2, iterations_done=k % 2, stage_id=k))
        stages.append(Stage(k, [k], arrival_s=k))
    return ClusterState.build(coflows, jobs, stages, link_bps=1e9, indexed=True)


@pytest.mark.parametrize("name", ["sincronia", "varys", "jpas", "fifo-lm", "beamer"])
def test_every_policy_keeps_its_one_coflow_ranks_between_reorders(name):
    state = _one_coflow_per_job_and_stage(40)
    policy = make_policy(name)
    first, again = policy.schedule(state).ranks, policy.schedule(state).ranks
    singles = [rank for rank in first if len(rank) == 1]
    assert len(singles) >= 30  # (FIFO-LM's heavy coflows share its last rank)
    kept = {rank[0]: rank for rank in again if len(rank) == 1}
    assert all(kept[rank[0]] is rank for rank in singles)


def test_a_schedule_from_an_order_makes_its_ranks_only_when_asked():
    order = [9, 4, 7, 1, 8, 2, 6, 3, 5, 0]
    schedule = Schedule.from_order(order)
    order.append(99)  # (the schedule keeps its own list)
    assert schedule.single_order == [9, 4, 7, 1, 8, 2, 6, 3, 5, 0]
    assert schedule.n_ranks == 10 and schedule._ranks is None
    assert schedule.order == [9, 4, 7, 1, 8, 2, 6, 3, 5, 0]
    levels = coflow_levels(schedule)  # (from the order: no rank made)
    assert schedule._ranks is None
    assert schedule.ranks == ((9,), (4,), (7,), (1,), (8,), (2,), (6,), (3,), (5,), (0,))
    assert levels == coflow_levels(Schedule(schedule.ranks))
    assert schedule == Schedule(schedule.ranks) and Schedule(schedule.ranks) == schedule
    assert schedule != Schedule.from_order([4, 9, 7, 1, 8, 2, 6, 3, 5, 0])
    assert schedule != Schedule.from_order(order[:10], flow_rates_bps={(9, 0): 1e6})
    grouped = Schedule.from_groups([[9, 4], [7]])
    assert grouped.single_order is None and grouped.n_ranks == 2


@pytest.mark.parametrize("seed", range(20))
def test_the_levels_of_an_order_are_those_of_its_ranks(seed):
    # every coflow a rank of its own, some listed twice: the level of the last listing, and
    # a coflow among the first seven and the rest is at the lowest, as for ranks
    rng = np.random.default_rng(seed)
    order = rng.integers(0, 15, size=int(rng.integers(0, 25))).tolist()
    fast = schedule_module.level_split(Schedule.from_order(order))
    ranks = schedule_module.level_split(Schedule(tuple((c,) for c in order)))
    assert fast == ranks
    assert coflow_levels(Schedule.from_order(order)) == coflow_levels(
        Schedule(tuple((c,) for c in order))
    )
