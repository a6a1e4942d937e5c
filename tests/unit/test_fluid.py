"""The reference strict-priority fluid schedule on analytic cases."""

from __future__ import annotations

import pytest

from controller.model import Coflow, Flow
from simulator.reference import greedy_completion_times, weighted_completion

from .instances import state_of


def test_one_flow_takes_size_over_rate():
    state = state_of([Coflow(1, [Flow("a", "b", 5)])])
    assert greedy_completion_times(state, [1]) == {1: 5.0}


def test_strict_priority_serves_the_first_coflow_alone():
    state = state_of([Coflow(1, [Flow("a", "b", 5)]), Coflow(2, [Flow("a", "c", 3)])])
    assert greedy_completion_times(state, [2, 1]) == {2: 3.0, 1: 8.0}


def test_disjoint_ports_run_in_parallel_and_releases_delay():
    state = state_of(
        [Coflow(1, [Flow("a", "b", 5)]), Coflow(2, [Flow("c", "d", 3)], arrival_s=4.0)]
    )
    assert greedy_completion_times(state, [2, 1]) == {2: 7.0, 1: 5.0}
    assert greedy_completion_times(state, [2, 1], releases=False) == {2: 3.0, 1: 5.0}


def test_a_lower_flow_uses_what_the_upper_leaves():
    # Coflow 1 capped at 4 bit/s (half a byte per second) leaves half of a's port to coflow 2.
    state = state_of([Coflow(1, [Flow("a", "b", 2)]), Coflow(2, [Flow("a", "c", 2)])])
    done = greedy_completion_times(state, [1, 2], flow_rates_bps={(1, 0): 4.0})
    assert done == {1: pytest.approx(4.0), 2: pytest.approx(4.0)}


def test_weighted_completion_and_bad_orders():
    state = state_of([Coflow(1, [Flow("a", "b", 2)], weight=3.0)])
    assert weighted_completion(state, greedy_completion_times(state, [1])) == 6.0
    with pytest.raises(ValueError, match="twice"):
        greedy_completion_times(state, [1, 1])
    with pytest.raises(ValueError, match="never finish"):
        greedy_completion_times(state, [1], flow_rates_bps={(1, 0): 0.0})
