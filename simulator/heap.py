"""A binary min-heap of (key, item) pairs kept in numpy arrays, for the compiled kernels: the
fixed-rate groups' projected end times (:mod:`simulator.core`), the greedy's walk over links
by order entry (:mod:`simulator.greedy`) and the pair levels' filling rounds
(:mod:`simulator.allocation`); and the in-place sort of a few ids those kernels share."""

from __future__ import annotations

import numpy as np

from controller.kernel_cache import njit


@njit(cache=True, inline="always")
def _sift_down(keys, items, n, i):  # pragma: no cover - compiled
    """Move entry ``i`` down the heap of the first ``n`` entries until neither child is smaller."""
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and keys[child + 1] < keys[child]:
            child += 1
        if keys[i] <= keys[child]:
            break
        keys[child], keys[i] = keys[i], keys[child]
        items[child], items[i] = items[i], items[child]
        i = child


@njit(cache=True, inline="always")
def heap_push(keys, items, size, key, item):  # pragma: no cover - compiled
    """Push (``key``, ``item``) on the min-heap.

    Args:
        keys: the heap's keys, with room for one more entry.
        items: its items, alongside.
        size: ``[entries in the heap]``; goes up by one.
        key: the new entry's key.
        item: its item.
    """
    i = size[0]
    size[0] += 1
    keys[i], items[i] = key, item
    while i > 0:
        parent = (i - 1) // 2
        if keys[parent] <= keys[i]:
            break
        keys[parent], keys[i] = keys[i], keys[parent]
        items[parent], items[i] = items[i], items[parent]
        i = parent


@njit(cache=True, inline="always")
def heap_pop(keys, items, size):  # pragma: no cover - compiled
    """Drop the smallest entry of the min-heap (there is one).

    Args:
        keys: the heap's keys.
        items: its items, alongside.
        size: ``[entries in the heap]``; goes down by one.
    """
    size[0] -= 1
    n = size[0]
    keys[0], items[0] = keys[n], items[n]
    _sift_down(keys, items, n, 0)


@njit(cache=True, inline="always")
def heap_replace(keys, items, size, key, item):  # pragma: no cover - compiled
    """Replace the smallest entry of the min-heap (there is one) by (``key``, ``item``): one
    pass down the heap, where a pop and a push take two.

    Args:
        keys: the heap's keys.
        items: its items, alongside.
        size: ``[entries in the heap]`` (unchanged).
        key: the new entry's key.
        item: its item.
    """
    n = size[0]
    keys[0], items[0] = key, item
    _sift_down(keys, items, n, 0)


@njit(cache=True)
def heapify(keys, items, size):  # pragma: no cover - compiled
    """Make the first ``size[0]`` entries a min-heap in place, in O(entries) (pushing them one
    by one takes O(entries log entries)).

    Args:
        keys: the entries' keys.
        items: their items, alongside.
        size: ``[entries]``.
    """
    n = size[0]
    for start in range(n // 2 - 1, -1, -1):
        _sift_down(keys, items, n, start)


@njit(cache=True, inline="always")
def sort_prefix(values, n):  # pragma: no cover - compiled
    """Sort the first ``n`` entries of ``values`` in place: by insertion for a few (no
    allocation; most calls sort a handful), else with ``np.sort``."""
    if n > 32:
        values[:n] = np.sort(values[:n])
        return
    for m in range(1, n):
        value = values[m]
        t = m - 1
        while t >= 0 and values[t] > value:
            values[t + 1] = values[t]
            t -= 1
        values[t + 1] = value
