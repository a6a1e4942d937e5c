"""Shortest remaining iterations first: a GPU time-sharing policy of one's own.

Implements the interface of :class:`workloads.gpu.GpuPolicy`: a subclass with a ``name`` (the
label of its runs), ``preemptive`` (whether a quantum boundary may take a running job's GPUs)
and ``rank(jobs, quantum_s) -> jobs``, which gets the unfinished
:class:`~workloads.gpu.GpuJob` s at every quantum boundary (and when GPUs free up) and returns
them most deserving first; the job manager then runs, in that order, every job whose GPUs are
all free. The simulator, the sweeps and the testbed call it alike:

    hpo-sim hpo --gpu-policy examples.shortest_remaining:ShortestRemaining hermes

Shortest remaining processing time on iterations: the job with the fewest iterations left in
its stage goes first, so short jobs finish (and free their GPUs) early and the stage's
stragglers are not slowed by them. Ties go by arrival, then id.
"""

from __future__ import annotations

from workloads.gpu import GpuJob, GpuPolicy


class ShortestRemaining(GpuPolicy):
    """Fewest iterations left first; preemptive."""

    name = "shortest-remaining"
    preemptive = True

    def rank(self, jobs: list[GpuJob], quantum_s: float) -> list[GpuJob]:
        """The jobs by iterations left (``iterations - done``), fewest first."""
        return sorted(jobs, key=lambda j: (j.iterations - j.done, j.arrival_s, j.job_id))
