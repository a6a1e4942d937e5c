"""Order -> 8 priority levels -> DSCP."""

from __future__ import annotations

import pytest

from controller.schedule import (
    LEVEL_DSCP,
    N_LEVELS,
    Schedule,
    coflow_levels,
    dscp_of_level,
    level_of_dscp,
    level_of_rank,
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
