"""The simulator's rate allocation: max-min properties, priority, caps, greedy order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.allocation import PairLevel, Singles, pair_bits, pair_shares
from simulator.reference import (
    greedy_in_order,
    max_min,
    pair_max_min,
    pair_max_min_with_singles,
    priority_max_min,
)


@st.composite
def instances(draw):
    n_links = draw(st.integers(2, 6))
    n = draw(st.integers(1, 12))
    links = np.array(
        [draw(st.lists(st.integers(0, n_links - 1), min_size=2, max_size=2, unique=True))
         for _ in range(n)]
    )  # fmt: skip
    capacity = np.array([float(draw(st.integers(1, 20))) for _ in range(n_links)])
    caps = np.array([draw(st.sampled_from([np.inf, 0.5, 2.0, 7.0])) for _ in range(n)])
    levels = np.array([draw(st.integers(0, 2)) for _ in range(n)])
    return links, capacity, caps, levels


def load(links, rates, n_links):
    used = np.zeros(n_links)
    np.add.at(used, links.ravel(), np.repeat(rates, links.shape[1]))
    return used


@settings(max_examples=200, deadline=None)
@given(instances())
def test_max_min_is_feasible_and_every_flow_has_a_bottleneck(instance):
    links, capacity, caps, _ = instance
    rates = max_min(links, capacity, caps)
    used = load(links, rates, len(capacity))
    assert (used <= capacity * (1 + 1e-9)).all()
    assert (rates <= caps * (1 + 1e-9)).all()
    for f, row in enumerate(links):
        if rates[f] >= caps[f] * (1 - 1e-9):
            continue  # limited by its own cap
        # a saturated link on which no flow gets more than f: raising f would hurt a poorer flow
        sharing = [
            link for link in row
            if used[link] >= capacity[link] * (1 - 1e-9)
            and rates[(links == link).any(axis=1)].max() <= rates[f] * (1 + 1e-9)
        ]  # fmt: skip
        assert sharing, (f, rates, used)


@settings(max_examples=200, deadline=None)
@given(instances())
def test_priority_levels_are_strict(instance):
    links, capacity, caps, levels = instance
    rates = priority_max_min(links, levels, capacity, caps)
    for level in np.unique(levels):
        # what a level gets is exactly max-min on what the levels above left
        above = levels < level
        left = capacity - load(links[above], rates[above], len(capacity))
        members = levels == level
        expect = max_min(links[members], np.maximum(left, 0), caps[members])
        assert np.allclose(rates[members], expect)


def test_hand_examples():
    capacity = np.array([10.0, 10, 10, 10, np.inf])
    links = np.array([[0, 2], [0, 3], [1, 3]])
    assert max_min(links, capacity).tolist() == [5, 5, 5]
    # flow 0 capped at 1: flow 1 is then limited by link 3, shared with flow 2
    assert max_min(links, capacity, np.array([1.0, np.inf, np.inf])).tolist() == [1, 5, 5]
    # flow 1 alone at level 0 takes links 0 and 3: flows 0 and 2 get nothing
    assert priority_max_min(links, np.array([1, 0, 1]), capacity).tolist() == [0, 10, 0]
    assert greedy_in_order(links, np.array([2, 0, 1]), capacity).tolist() == [10, 0, 10]
    # the padding link (infinite) never limits
    assert max_min(np.array([[0, 4]]), capacity).tolist() == [10]


@settings(max_examples=100, deadline=None)
@given(instances(), st.lists(st.integers(1, 4), min_size=12, max_size=12))
def test_a_weighted_entry_equals_that_many_identical_flows(instance, weights):
    links, capacity, _, levels = instance
    weights = np.array(weights[: len(links)], dtype=float)
    grouped = priority_max_min(links, levels, capacity, weights=weights)
    expanded = np.repeat(np.arange(len(links)), weights.astype(int))
    single = priority_max_min(links[expanded], levels[expanded], capacity)
    assert np.allclose(single, grouped[expanded])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 3), min_size=n * n, max_size=n * n),
            st.lists(st.integers(0, 20), min_size=2 * n, max_size=2 * n),
        )
    )
)
def test_pair_matrix_max_min_equals_the_general_one(instance):
    # the big switch's fast path (flows per host pair) against max-min over every flow,
    # including links already full (capacity 0, as lower priority levels see them)
    counts, capacity = instance
    n = len(capacity) // 2
    w = np.array(counts, dtype=float).reshape(n, n)
    capacity = np.array(capacity, dtype=float)
    rates = pair_max_min(w, capacity)
    src, dst = np.nonzero(w)
    reps = w[src, dst].astype(int)
    links = np.stack([np.repeat(src, reps), n + np.repeat(dst, reps)], axis=1)
    if len(links) == 0:
        assert np.isinf(rates).all()
        return
    expect = max_min(links, capacity)
    assert rates[links[:, 0], links[:, 1] - n] == pytest.approx(expect, abs=1e-9)


@st.composite
def sparse_levels(draw):
    """A pair level of up to 70 hosts (two words of bits) with a few pairs per host, one host
    talking to most of the others (a dense row and column beside sparse ones), and links the
    levels above filled (capacity 0) or left part of."""
    n = draw(st.integers(9, 70))
    w = np.zeros((n, n))
    for s in range(n):
        for d in draw(st.lists(st.integers(0, n - 1), max_size=3)):
            w[s, d] += draw(st.integers(1, 3))
    hub = draw(st.integers(0, n - 1))
    w[hub, : n // 2] += 1.0
    w[n // 3 :, hub] += 2.0
    capacity = np.array(draw(st.lists(st.sampled_from([0, 1, 4, 6, 20]), min_size=2 * n,
                                      max_size=2 * n)), dtype=float)  # fmt: skip
    return w, capacity


def test_pair_bits_mark_the_pairs_with_flows():
    rng = np.random.default_rng(5)
    for n in (1, 63, 64, 65, 130):
        w = rng.integers(0, 3, size=(n, n)) * (rng.random((n, n)) < 0.1)
        bits, pairs = pair_bits(w.astype(float))
        assert bits.dtype == np.uint64 and bits.shape == (n, (n + 63) // 64)
        unpacked = np.unpackbits(bits.view(np.uint8), axis=1, bitorder="little")[:, :n]
        assert (unpacked == (w > 0)).all()
        assert (pairs == (w > 0).sum(axis=1)).all()
        assert not np.unpackbits(bits.view(np.uint8), axis=1, bitorder="little")[:, n:].any()


def _pair_level_shares(w, capacity, factor):
    # pair_shares with rows read by their bits while their pairs x ``factor`` < n: 0 reads
    # every row by its bits, n + 1 every row whole
    n = w.shape[0]
    w_t = np.ascontiguousarray(w.T)
    (row_bits, row_pairs), (col_bits, col_pairs) = pair_bits(w), pair_bits(w_t)
    level = PairLevel(w, w_t, w.sum(axis=1), w.sum(axis=0), np.zeros(n), np.zeros(n), row_bits,
                      col_bits, row_pairs, col_pairs, np.array([factor]))  # fmt: skip
    residual = capacity.copy()
    none = np.zeros(0, dtype=np.int64)
    singles = Singles(none, np.zeros((0, 2), dtype=np.int64), np.zeros(0), np.zeros(0),
                      np.zeros(0))  # fmt: skip
    pair_shares(level, residual, capacity, n, singles)
    return level.row_share, level.col_share, residual


@settings(max_examples=150, deadline=None)
@given(sparse_levels())
def test_a_sparse_pair_level_equals_the_general_max_min_bit_for_bit_either_way(instance):
    # HPO levels hold a few pairs per host: a frozen link visits its row's pairs by their bits
    # instead of its n hosts. The general max-min gives the rates; reading every row whole or
    # every row by its bits gives the same floats
    w, capacity = instance
    n = w.shape[0]
    rates = pair_max_min(w, capacity)
    src, dst = np.nonzero(w)
    reps = w[src, dst].astype(int)
    links = np.stack([np.repeat(src, reps), n + np.repeat(dst, reps)], axis=1)
    expect = max_min(links, capacity)
    assert rates[links[:, 0], links[:, 1] - n] == pytest.approx(expect, abs=1e-9)
    whole = _pair_level_shares(w, capacity, n + 1)
    by_bits = _pair_level_shares(w, capacity, 0)
    for a, b in zip(whole, by_bits, strict=True):
        assert np.array_equal(a, b)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 3), min_size=n * n, max_size=n * n),
            st.lists(
                st.tuples(
                    st.integers(0, n - 1),
                    st.integers(0, n - 1),
                    st.sampled_from([np.inf, 0.0, 0.5, 2.0, 3.0, 7.0]),
                    st.sampled_from([0.0, 1.0, 1.0, 2.0]),
                ),
                max_size=8,
            ),
            st.lists(st.sampled_from([0, 1, 4, 6, 20]), min_size=2 * n, max_size=2 * n),
        )
    )
)
def test_a_pair_level_with_capped_singles_equals_the_general_max_min(instance):
    # Varys' lowest level: shared pairs in the matrix and a few one-flow groups (capped
    # coflows) beside it, against max-min over every flow with its cap, including links the
    # levels above filled (capacity 0) and empty groups (weight 0, rate 0)
    counts, singles, capacity = instance
    n = len(capacity) // 2
    w = np.array(counts, dtype=float).reshape(n, n)
    pairs = np.array([(s, d) for s, d, _, _ in singles], dtype=np.int64).reshape(-1, 2)
    caps = np.array([cap for _, _, cap, _ in singles])
    weights = np.array([weight for _, _, _, weight in singles])
    capacity = np.array(capacity, dtype=float)
    pair_rates, single_rates = pair_max_min_with_singles(w, pairs, caps, weights, capacity)
    src, dst = np.nonzero(w)
    reps = w[src, dst].astype(int)
    flows = np.stack([np.repeat(src, reps), n + np.repeat(dst, reps)], axis=1)
    taking = weights > 0
    expanded = np.repeat(np.flatnonzero(taking), weights[taking].astype(int))
    links = np.concatenate([flows, pairs[expanded] + np.array([0, n])]).reshape(-1, 2)
    all_caps = np.concatenate([np.full(len(flows), np.inf), caps[expanded]])
    assert (single_rates[~taking] == 0).all()
    if len(links) == 0:
        assert np.isinf(pair_rates).all()
        return
    expect = max_min(links, capacity, all_caps)
    got = np.concatenate([pair_rates[flows[:, 0], flows[:, 1] - n], single_rates[expanded]])
    assert got == pytest.approx(expect, abs=1e-9)


@st.composite
def tied_levels(draw):
    """A pair level of up to 40 hosts, dense or sparse, whose links' shares tie, nearly tie
    (within the allocation's relative slack of 1e-9, or just outside it) or differ, some links
    filled by the levels above (0 left)."""
    n = draw(st.integers(2, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    density = draw(st.sampled_from([0.05, 0.3, 1.0]))
    w = rng.integers(1, 4, size=(n, n)) * (rng.random((n, n)) < density)
    base = draw(st.sampled_from([1.0, 3.0, 10.0]))
    jitter = [0.0, 0.0, 3e-10, -4e-10, 2e-9, 0.37, 1.9]
    factors = rng.choice(jitter, size=2 * n) + rng.integers(1, 4, size=2 * n)
    capacity = base * factors * w.sum() / (2 * n)
    capacity[rng.random(2 * n) < draw(st.sampled_from([0.0, 0.2]))] = 0.0
    return w.astype(float), capacity


def _shares_both_ways(w, capacity):
    # pair_shares without singles (its rounds from a heap of shares) and with one empty single
    # (which takes no part, so the rates are the same, but sends it through the scan over the
    # live links that levels with singles take)
    n = w.shape[0]
    w_t = np.ascontiguousarray(w.T)
    (row_bits, row_pairs), (col_bits, col_pairs) = pair_bits(w), pair_bits(w_t)
    out = []
    for members in (np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)):
        level = PairLevel(w, w_t, w.sum(axis=1), w.sum(axis=0), np.zeros(n), np.zeros(n),
                          row_bits, col_bits, row_pairs, col_pairs, np.array([4]))  # fmt: skip
        residual = capacity.copy()
        singles = Singles(members, np.array([[0, n]]), np.array([np.inf]), np.zeros(1),
                          np.zeros(1))  # fmt: skip
        pair_shares(level, residual, capacity, n, singles)
        out.append((level.row_share, level.col_share, residual))
    return out


@settings(max_examples=300, deadline=None)
@given(tied_levels())
def test_the_heap_of_shares_freezes_what_the_scan_freezes_float_for_float(instance):
    # A level without singles finds each round's smallest share from a heap of lower bounds
    # instead of a pass over every live link; the links it freezes, their order and so every
    # float must be the scan's, ties and near ties included (the simulator's results are
    # compared bit for bit across changes)
    w, capacity = instance
    (rows, cols, left), (scan_rows, scan_cols, scan_left) = _shares_both_ways(w, capacity)
    assert np.array_equal(rows, scan_rows)
    assert np.array_equal(cols, scan_cols)
    assert np.array_equal(left, scan_left)
    src, dst = np.nonzero(w)
    reps = w[src, dst].astype(int)
    links = np.stack([np.repeat(src, reps), w.shape[0] + np.repeat(dst, reps)], axis=1)
    if len(links):
        got = np.minimum(rows[links[:, 0]], cols[links[:, 1] - w.shape[0]])
        assert got == pytest.approx(max_min(links, capacity), rel=1e-6, abs=1e-9)
