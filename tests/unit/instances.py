"""Small instance builders and brute-force optima shared by the unit tests (they live in
:mod:`simulator.reference`, which the reproduction report uses too)."""

from simulator.reference import (  # noqa: F401
    BYTE_PER_S,
    brute_force_best,
    order_value,
    random_coflows,
    stage_completion_sum,
    stage_instance,
    state_of,
)


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
