"""The compiled kernels' min-heap (push, pop, replace and heapify keep the heap order) and
small in-place sort."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.heap import heap_pop, heap_push, heap_replace, heapify, sort_prefix


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 20), max_size=60),
    st.lists(st.tuples(st.sampled_from(["push", "pop", "replace"]), st.integers(0, 20))),
)
def test_the_heap_gives_its_entries_smallest_first(start, operations):
    keys = np.empty(len(start) + len(operations) + 1)
    items = np.empty(len(keys), dtype=np.int64)
    size = np.array([len(start)], dtype=np.int64)
    keys[: len(start)] = start
    items[: len(start)] = np.arange(len(start))
    heapify(keys, items, size)
    held = {i: float(k) for i, k in enumerate(start)}  # item -> key, what the heap must hold
    next_item = len(start)
    for what, key in operations:
        if what == "push":
            heap_push(keys, items, size, float(key), next_item)
            held[next_item] = float(key)
            next_item += 1
        elif size[0] > 0:
            assert keys[0] == min(held.values()) and held[items[0]] == keys[0]
            del held[items[0]]
            if what == "pop":
                heap_pop(keys, items, size)
            else:
                heap_replace(keys, items, size, float(key), next_item)
                held[next_item] = float(key)
                next_item += 1
    drained = []
    while size[0] > 0:
        drained.append((keys[0], held.pop(items[0])))
        heap_pop(keys, items, size)
    assert [k for k, _ in drained] == sorted(k for k, _ in drained)
    assert all(k == v for k, v in drained) and not held


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 300), max_size=80), st.integers(0, 80))
def test_sort_prefix_sorts_the_first_entries_and_leaves_the_rest(values, n):
    n = min(n, len(values))  # by insertion up to 32 entries, by np.sort beyond
    array = np.array(values + [-1], dtype=np.int64)
    sort_prefix(array, n)
    assert array.tolist() == sorted(values[:n]) + values[n:] + [-1]
