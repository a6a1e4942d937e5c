"""The ideal mode's greedy redone incrementally equals the whole greedy, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.allocation import greedy_groups
from simulator.greedy import greedy_pass, greedy_start, greedy_update


def random_instance(rng, n_groups, n_links, k, pad):
    """Groups crossing ``k`` distinct links (the last one a padding link of infinite capacity
    if ``pad``), float capacities and caps (some infinite), in a random order."""
    finite = n_links - 1 if pad else n_links
    links = np.empty((n_groups, k), dtype=np.int64)
    for g in range(n_groups):
        chosen = rng.choice(finite, size=k - 1 if pad else k, replace=False)
        links[g] = np.append(chosen, n_links - 1) if pad else chosen
    capacity = rng.uniform(1.0, 10.0, n_links).round(rng.integers(0, 3))
    if pad:
        capacity[-1] = np.inf
    caps = np.where(rng.random(n_groups) < 0.5, np.inf, rng.uniform(0.1, 5.0, n_groups))
    order = rng.permutation(n_groups)
    return links, capacity, caps, order


def end(record, groups, count, rates):
    """What the step loop does as groups with a rate empty: free them, list them."""
    for g in groups:
        count[g] = 0.0
        rates[g] = 0.0
        record.ended[record.n_ended[0]] = g
        record.n_ended[0] += 1


@pytest.mark.parametrize("seed", range(60))
def test_update_equals_the_whole_greedy_after_every_completion(seed):
    rng = np.random.default_rng(seed)
    n_links = int(rng.integers(2, 9))
    pad = bool(rng.integers(0, 2)) and n_links > 2
    k = int(rng.integers(2, min(4, n_links) + 1))
    n_groups = int(rng.integers(1, 80))
    links, capacity, caps, order = random_instance(rng, n_groups, n_links, k, pad)
    count = np.ones(n_groups)
    count[rng.random(n_groups) < 0.1] = 0.0  # some groups are empty from the start
    rates = np.full(n_groups, -1.0)
    record = greedy_pass(len(order), n_links, k, n_groups)
    greedy_start(record, links, count, caps, order, capacity, rates)
    expected = np.full(n_groups, -1.0)
    greedy_groups(links, count, caps, order, capacity, expected)
    assert np.array_equal(rates, expected)
    end_all_and_check(rng, record, links, count, caps, order, capacity, rates)


def end_all_and_check(rng, record, links, count, caps, order, capacity, rates):
    """End the groups with a rate a few at a time until none is left, checking after each
    update that the rates and the listed entries are the whole greedy's."""
    n_groups = len(links)
    while True:
        with_rate = np.flatnonzero(rates > 0)
        if len(with_rate) == 0:
            break
        # a step ends one or several flows: their groups empty and are freed (rate 0)
        n_ending = int(rng.integers(1, min(3, len(with_rate)) + 1))
        ending = rng.choice(with_rate, size=n_ending, replace=False)
        end(record, ending, count, rates)
        visited = greedy_update(record, links, count, caps, order, capacity, rates)
        expected = np.full(n_groups, -1.0)
        greedy_groups(links, count, caps, order, capacity, expected)
        assert np.array_equal(rates, expected)
        assert 0 < visited <= n_groups
        listed = order[record.positive[: record.n_positive[0]]]
        assert listed.tolist() == [g for g in order if expected[g] > 0]


@pytest.mark.parametrize("seed", range(20))
def test_one_pass_with_room_to_spare_serves_order_after_order(seed):
    # the simulator keeps one pass from call to call (a new one's pages cost more than the
    # greedy), with room for the largest order so far: what an earlier order left in it must
    # not count, nor the groups it listed as ended when the step loop stopped
    rng = np.random.default_rng(1000 + seed)
    n_links = int(rng.integers(3, 9))
    pad = bool(rng.integers(0, 2))
    k = int(rng.integers(2, min(4, n_links - pad) + 1))
    record = greedy_pass(100, n_links, k, 100)
    for _ in range(10):
        n_groups = int(rng.integers(1, 100))
        links, capacity, caps, order = random_instance(rng, n_groups, n_links, k, pad)
        count = np.ones(n_groups)
        count[rng.random(n_groups) < 0.1] = 0.0
        rates = np.full(n_groups, -1.0)
        greedy_start(record, links, count, caps, order, capacity, rates)
        expected = np.full(n_groups, -1.0)
        greedy_groups(links, count, caps, order, capacity, expected)
        assert np.array_equal(rates, expected)
        if rng.random() < 0.5:
            end_all_and_check(rng, record, links, count, caps, order, capacity, rates)
        else:  # a few steps, then the loop stops with ended groups not yet taken up
            with_rate = np.flatnonzero(rates > 0)
            if len(with_rate):
                end(record, rng.choice(with_rate, size=1), count, rates)


def test_a_completion_far_from_the_others_visits_few_entries():
    # 100 one-link-pair groups on disjoint host pairs, then 100 on one busy pair: ending a
    # group of the first block leaves the busy pair's entries unvisited
    n_pairs = 100
    links = np.array([[2 * i, 2 * i + 1] for i in range(n_pairs)] + [[0, 1]] * 100)
    capacity = np.full(2 * n_pairs, 1.0)
    caps = np.full(len(links), np.inf)
    order = np.arange(len(links))
    count = np.ones(len(links))
    rates = np.zeros(len(links))
    record = greedy_pass(len(order), len(capacity), 2, len(links))
    greedy_start(record, links, count, caps, order, capacity, rates)
    end(record, [5], count, rates)
    assert greedy_update(record, links, count, caps, order, capacity, rates) == 1
    end(record, [0], count, rates)
    # the pair (0, 1) frees up: its first waiting group takes it, after which the link is full
    # again in both passes and the walk stops
    assert greedy_update(record, links, count, caps, order, capacity, rates) == 2
    assert rates[n_pairs] == 1.0


def test_the_ideal_order_sorts_each_level_by_head_flow_as_lexsort_does():
    from simulator.core import order_by_head

    rng = np.random.default_rng(7)
    n_groups = 500
    level = rng.integers(0, 40, n_groups)
    head = rng.permutation(n_groups * 2)[:n_groups]
    head[:5] = -1  # (ties keep their order, as a stable sort does)
    by_level = np.argsort(level, kind="stable")
    expected = by_level[np.lexsort((head[by_level], level[by_level]))]
    assert order_by_head(by_level, level, head).tolist() == expected.tolist()
