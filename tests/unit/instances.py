"""Small instance builders and brute-force optima shared by the unit tests (they live in
:mod:`simulator.reference`, which the reproduction report uses too)."""

import numpy as np

from controller.policies import _job_stage_order
from simulator.reference import (  # noqa: F401
    BYTE_PER_S,
    brute_force_best,
    order_value,
    random_coflows,
    stage_completion_sum,
    stage_instance,
    state_of,
)


def job_stage_ranks(state, active, sparse, kept, slowest_first=True, srpt=False):
    """The ranks of Beamer's path for HPO states (:func:`controller.policies._job_stage_order`;
    ``None`` for a state it leaves to the general path) and the stage structure it kept."""
    ordered, structure = _job_stage_order(state, active, sparse, kept, slowest_first, srpt)
    return (None if ordered is None else ordered.ranks), structure


def assert_table_is_the_jobs(state) -> None:
    """The state's job table holds every one of its jobs' numbers and no other job."""
    table = state.job_table()
    assert table is not None
    assert table.job_ids.tolist() == sorted(state.jobs)
    for job in state.jobs.values():
        row = table.numbers[table.rows_of(np.array([job.job_id]))[0]]
        assert (row["budget"], row["done"], row["arrival_s"]) == (
            job.iteration_budget, job.iterations_done, job.arrival_s)  # fmt: skip
        assert (row["has_stage"], row["stage_id"]) == (job.stage_id is not None, job.stage_id or 0)


class VersionCheck:
    """Checks ClusterState.stages_version's promise from one state to the next: while it is
    the same object, the stages (ids, listed jobs, arrivals, weights), the jobs and each one's
    loads per iteration (ports in order, bytes) are the same."""

    def __init__(self) -> None:
        self.version: object | None = None
        self.vouched: tuple | None = None
        self.kept = 0  # states that kept the version of the one before

    def check(self, state) -> None:
        stages = tuple((s.stage_id, tuple(s.job_ids), s.arrival_s, s.weight)
                       for s in state.stages.values())  # fmt: skip
        jobs = tuple(sorted((j, tuple(job.bytes_per_iteration.items()))
                            for j, job in state.jobs.items()))  # fmt: skip
        if state.stages_version is not None and state.stages_version is self.version:
            assert (stages, jobs) == self.vouched
            self.kept += 1
        self.version, self.vouched = state.stages_version, (stages, jobs)
