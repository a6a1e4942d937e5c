"""The engine's bucket assignment, compiled: which bucket each active coflow's flows go to after
a reorder, reusing buckets so that few flows move.

A *bucket* is a set of coflows whose flows share groups at one level (see
:mod:`simulator.core`); a *single* bucket gives each flow a group of its own (capped coflows,
and every coflow in the ideal mode). The rule, for the coflows in the policy's order:

- a capped coflow (every coflow in the ideal mode) keeps its single bucket, or gets a new one;
- the others share buckets: each level keeps up to ``level_rows`` of the existing shared
  buckets, those that hold most of its flows (heaviest first, ties to the one whose coflow
  comes first in order), a bucket for one level only; a coflow in a bucket its level keeps
  stays there, the others join the first bucket their level keeps, or a new one made for the
  level's first such coflow in order.

The engine makes the new buckets this returns, in the order listed (their ids follow the
existing ones), and moves the coflows whose bucket changed. This was a Python loop over every
active coflow at every reorder; the kernel does the same in arrays, with scratch arrays that
it leaves as it found them instead of dicts.
"""

from __future__ import annotations

import numpy as np

from controller.kernel_cache import njit

NO_BUCKET = -1


@njit(cache=True)
def assign_buckets(
    slots: np.ndarray,
    levels: np.ndarray,
    capped: np.ndarray,
    all_single: bool,
    slot_bucket: np.ndarray,
    slot_ranges: np.ndarray,
    b_single: np.ndarray,
    b_level: np.ndarray,
    n_buckets: int,
    n_levels: int,
    level_rows: int,
    entry_of: np.ndarray,
    kept_level: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """The bucket of every active coflow (``slots[i]`` at ``levels[i]``, in the policy's order).

    Args:
        slots: the active coflows' slots, in the policy's order.
        levels: each one's level (``0 .. n_levels - 1``).
        capped: whether each one is capped (its flows get one group each).
        all_single: every coflow is treated as capped (the ideal mode).
        slot_bucket: each slot's current bucket (``NO_BUCKET``: none yet).
        slot_ranges: each slot's flow id range (its flow count is ``last - first``).
        b_single: whether each existing bucket is a single one.
        b_level: every bucket's level, with room for ``len(slots) + n_levels`` new buckets
            after the ``n_buckets`` existing ones; the levels of kept and new buckets are set.
        n_buckets: buckets made so far (new ones get the next ids).
        n_levels: levels.
        level_rows: shared buckets a level may keep.
        entry_of: scratch, ``n_buckets * n_levels`` entries of -1 (left so).
        kept_level: scratch, ``n_buckets`` entries of -1 (left so).

    Returns:
        each coflow's bucket (in the order of ``slots``); whether each new bucket is a single
        one (in the order of their ids, from ``n_buckets`` on); and the coflows whose bucket
        changed (indices into ``slots``), the capped ones first, each part in order, the order
        in which the engine moves them; whether an existing bucket's level changed.
    """
    n = len(slots)
    target = np.full(n, NO_BUCKET, dtype=np.int64)
    new_single = np.zeros(n + n_levels, dtype=np.bool_)
    made = 0
    relevelled = False
    # one group per flow: capped coflows, and every coflow in the ideal mode
    for i in range(n):
        if all_single or capped[i]:
            bucket = slot_bucket[slots[i]]
            if bucket < 0 or not b_single[bucket]:
                bucket = n_buckets + made
                new_single[made] = True
                made += 1
            elif b_level[bucket] != levels[i]:
                relevelled = True
            b_level[bucket] = levels[i]
            target[i] = bucket
    if all_single:
        moved = _moved(target, slots, capped, all_single, slot_bucket)
        return target, new_single[:made], moved, relevelled
    # the flows each (existing shared bucket, level) would keep, in order of first appearance
    key_bucket = np.empty(n, dtype=np.int64)
    key_level = np.empty(n, dtype=np.int64)
    weight = np.zeros(n, dtype=np.int64)
    n_keys = 0
    for i in range(n):
        if target[i] != NO_BUCKET:
            continue
        slot = slots[i]
        bucket = slot_bucket[slot]
        if bucket >= 0 and not b_single[bucket]:
            cell = bucket * n_levels + levels[i]
            key = entry_of[cell]
            if key < 0:
                key = n_keys
                entry_of[cell] = key
                key_bucket[key] = bucket
                key_level[key] = levels[i]
                n_keys += 1
            weight[key] += slot_ranges[slot, 1] - slot_ranges[slot, 0]
    # heaviest first (ties in order of appearance): each level keeps its first level_rows
    # buckets not kept by another level
    kept_count = np.zeros(n_levels, dtype=np.int64)
    head = np.full(n_levels, NO_BUCKET, dtype=np.int64)
    for key in np.argsort(-weight[:n_keys], kind="mergesort"):
        bucket, level = key_bucket[key], key_level[key]
        entry_of[bucket * n_levels + level] = -1
        if kept_level[bucket] < 0 and kept_count[level] < level_rows:
            kept_level[bucket] = level
            if kept_count[level] == 0:
                head[level] = bucket
            kept_count[level] += 1
            relevelled |= b_level[bucket] != level
            b_level[bucket] = level
    for i in range(n):
        if target[i] != NO_BUCKET:
            continue
        bucket = slot_bucket[slots[i]]
        level = levels[i]
        if bucket >= 0 and kept_level[bucket] == level:
            target[i] = bucket
            continue
        if head[level] == NO_BUCKET:  # the level's first coflow in order makes its bucket
            head[level] = n_buckets + made
            b_level[head[level]] = level
            made += 1
        target[i] = head[level]
    for key in range(n_keys):
        kept_level[key_bucket[key]] = -1
    moved = _moved(target, slots, capped, all_single, slot_bucket)
    return target, new_single[:made], moved, relevelled


@njit(cache=True)
def _moved(target, slots, capped, all_single, slot_bucket):  # pragma: no cover - compiled
    """The entries whose target is not their slot's bucket, capped ones first."""
    moved = np.empty(len(slots), dtype=np.int64)
    m = 0
    for single in (True, False):
        for i in range(len(slots)):
            if (all_single or capped[i]) == single and target[i] != slot_bucket[slots[i]]:
                moved[m] = i
                m += 1
    return moved[:m]
