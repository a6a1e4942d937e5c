"""The controller holds the interpreter's garbage collections during a reorder and its sending;
the one that fell due runs right after (``controller.engine.collections_after``)."""

from __future__ import annotations

import gc

import pytest

from controller.engine import collections_after


@pytest.fixture
def collections():
    """The generations of the collections run while the test runs, in order."""
    seen: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    was_enabled = gc.isenabled()
    gc.enable()
    gc.collect()
    gc.callbacks.append(note)
    yield seen
    gc.callbacks.remove(note)
    (gc.enable if was_enabled else gc.disable)()  # (as it was before the test, whatever it did)


def _allocate(n: int) -> list:
    return [[] for _ in range(n)]  # containers the collector tracks, kept alive


def test_no_collection_runs_in_the_block_and_the_due_one_runs_after(collections):
    threshold = gc.get_threshold()[0]
    with collections_after():
        assert not gc.isenabled()
        kept = _allocate(20 * threshold)  # would have started ~20 collections
        assert collections == []
    assert collections == [0]  # one young collection, once the block is done
    assert gc.isenabled() and len(kept) == 20 * threshold
    assert gc.get_count()[0] < threshold


def test_nothing_runs_after_a_block_that_allocated_little(collections):
    with collections_after():
        _allocate(5)
    assert collections == [] and gc.isenabled()


def test_the_middle_generation_runs_when_it_would_have_run_without_the_blocks(collections):
    # (CPython collects a generation once its count exceeds its threshold: the middle one
    # after threshold1 + 1 young collections; holding collections must not skip them)
    threshold0, threshold1, _ = gc.get_threshold()
    kept = []
    for _ in range(threshold1 + 1):
        with collections_after():
            kept.append(_allocate(threshold0 + 1))
    assert collections == [0] * (threshold1 + 1)
    collections.clear()
    with collections_after():
        kept.append(_allocate(threshold0 + 1))
    assert collections == [1]


def test_a_disabled_collector_stays_disabled_and_runs_nothing(collections):
    gc.disable()
    with collections_after():
        _allocate(3 * gc.get_threshold()[0])
    assert not gc.isenabled() and collections == []
