"""Lower bounds on total (weighted) completion time, for "how far from optimal" figures.

Items are coflows or stages, each with a demand per port in seconds of port time. Every port is a
single machine that must process all of its items' demand, so:

- zero release times: on each port, Smith's rule (shortest ``p / w`` first) is the optimal
  single-machine schedule, and its ``sum w * C`` bounds the fabric's from below; take the max over
  ports (:func:`smith_bound`);
- with release times: per-port preemptive SRPT is optimal for the unweighted ``sum C`` of one
  machine, so it bounds the fabric's ``sum C`` (:func:`srpt_bound`);
- an item never finishes before ``release + its own bottleneck (+ its compute time)``
  (:func:`isolation_bound`).

:func:`completion_lower_bound` returns the largest bound that applies.

HPO stages and jobs (:func:`job_lower_bound`, :func:`stage_lower_bound`): a job repeats
``iterations`` times "compute, then synchronise"; a synchronisation is one or more phases run
one after the other (a parameter server's push, then its pull: the server sends the model back
only once it has every gradient), and a worker computes its next iteration as soon as its own
flows of the last phase are done, not when every worker's are. So iterations may overlap by
that much: a worker whose pull ends first computes and pushes while the others still pull. With
``c`` the compute time, ``B_i`` phase i's bottleneck port at line rate (its bytes there over the
rate), ``f`` the shortest flow of the last phase alone, and ``n`` iterations, the job needs

    n (c + B_1 + ... + B_m) - (n - 1) (B_m - f)

(every phase of iteration k+1 starts after the first last-phase flow of k ends plus ``c``, and
the phases within an iteration are each other's barriers). For ring all-reduce (one phase, every
worker alone on its sending port) ``f = B_1`` and the bound is ``n (c + B_1)``. A stage ends with
its last job, so it needs the larger of its slowest job alone and, for every port, the time
before any of its jobs can send there (one compute) plus all of the stage's bytes through that
port at line rate. Both hold for any schedule, priority, GPU sharing or pause (those only add
waiting) and whether workers move on together or one by one: on the simulator, whose coflows
end together, and on the testbed, whose workers do not.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

Demand = Mapping[Hashable, float]


def _by_port(demands: Sequence[Demand]) -> dict[Hashable, list[tuple[int, float]]]:
    ports: dict[Hashable, list[tuple[int, float]]] = {}
    for k, demand in enumerate(demands):
        for port, value in demand.items():
            if value > 0:
                ports.setdefault(port, []).append((k, value))
    return ports


def smith_bound(demands: Sequence[Demand], weights: Sequence[float] | None = None) -> float:
    """Max over ports of the optimal single-port ``sum w * C`` (zero release times)."""
    weights = weights if weights is not None else [1.0] * len(demands)
    best = 0.0
    for jobs in _by_port(demands).values():
        jobs.sort(key=lambda kv: kv[1] / weights[kv[0]])
        clock, total = 0.0, 0.0
        for k, p in jobs:
            clock += p
            total += weights[k] * clock
        best = max(best, total)
    return best


def _srpt_sum_completion(jobs: list[tuple[float, float]]) -> float:
    """Sum of completion times of preemptive SRPT on one machine; jobs are (release, size)."""
    jobs = sorted(jobs)
    heap: list[float] = []
    clock, total, i = 0.0, 0.0, 0
    while i < len(jobs) or heap:
        if not heap:
            clock = max(clock, jobs[i][0])
        while i < len(jobs) and jobs[i][0] <= clock:
            heapq.heappush(heap, jobs[i][1])
            i += 1
        remaining = heapq.heappop(heap)
        next_release = jobs[i][0] if i < len(jobs) else float("inf")
        if clock + remaining <= next_release:
            clock += remaining
            total += clock
        else:
            heapq.heappush(heap, remaining - (next_release - clock))
            clock = next_release
    return total


def srpt_bound(demands: Sequence[Demand], releases: Sequence[float]) -> float:
    """Max over ports of the per-port SRPT ``sum C`` (items idle on a port count their release)."""
    best = 0.0
    release_total = sum(releases)
    for jobs in _by_port(demands).values():
        on_port = {k for k, _ in jobs}
        idle = release_total - sum(releases[k] for k in on_port)
        best = max(best, idle + _srpt_sum_completion([(releases[k], p) for k, p in jobs]))
    return best


def isolation_bound(
    demands: Sequence[Demand],
    weights: Sequence[float] | None = None,
    releases: Sequence[float] | None = None,
    extra_s: Sequence[float] | None = None,
) -> float:
    """``sum w * (release + bottleneck + extra)``: every item alone on the fabric."""
    n = len(demands)
    weights = weights if weights is not None else [1.0] * n
    releases = releases if releases is not None else [0.0] * n
    extra_s = extra_s if extra_s is not None else [0.0] * n
    return sum(
        weights[k] * (releases[k] + max(demands[k].values(), default=0.0) + extra_s[k])
        for k in range(n)
    )


def completion_lower_bound(
    demands: Sequence[Demand],
    weights: Sequence[float] | None = None,
    releases: Sequence[float] | None = None,
    extra_s: Sequence[float] | None = None,
) -> float:
    """The best lower bound on ``sum w * C`` (absolute completion times) that applies.

    Args:
        demands: per item, seconds of port time per port.
        weights: item weights (1 when omitted).
        releases: release times (0 when omitted).
        extra_s: time each item needs besides the network (e.g. a stage's compute time); only
            the isolation bound uses it.
    """
    bound = isolation_bound(demands, weights, releases, extra_s)
    unweighted = weights is None or all(w == 1.0 for w in weights)
    if releases is None or not any(releases):
        bound = max(bound, smith_bound(demands, weights))
    elif unweighted:
        bound = max(bound, srpt_bound(demands, releases))
    return bound


@dataclass(frozen=True)
class JobDemand:
    """What one HPO job must do in its stage.

    Args:
        iterations: iterations to train, each a compute phase then a synchronisation.
        compute_s: compute time of one iteration.
        phases: the coflows of one synchronisation, run one after the other: bytes each puts
            through each port.
        shortest_last_flow_bytes: the smallest flow of the last phase; a worker can go on to
            its next iteration once its own flow of the last phase is done. ``None``: the
            largest load of the last phase on a port (no overlap, as when every flow of it
            has a port to itself, like ring all-reduce).
    """

    iterations: int
    compute_s: float
    phases: Sequence[Mapping[Hashable, float]]
    shortest_last_flow_bytes: float | None = None

    @property
    def sync_bytes(self) -> dict[Hashable, float]:
        """Bytes one whole synchronisation puts through each port."""
        total: dict[Hashable, float] = {}
        for phase in self.phases:
            for port, size in phase.items():
                total[port] = total.get(port, 0.0) + size
        return total


def job_lower_bound(job: JobDemand, link_bps: float) -> float:
    """``n (c + B_1 + ... + B_m) - (n - 1) (B_m - f)``: every iteration's compute and its
    phases' bottlenecks, less what consecutive iterations may overlap (see the module
    docstring)."""
    if job.iterations <= 0:
        return 0.0
    bottlenecks = [8.0 * max(phase.values(), default=0.0) / link_bps for phase in job.phases]
    overlap = 0.0
    if bottlenecks and job.shortest_last_flow_bytes is not None:
        shortest = 8.0 * job.shortest_last_flow_bytes / link_bps
        overlap = max(bottlenecks[-1] - shortest, 0.0)
    return job.iterations * (job.compute_s + sum(bottlenecks)) - (job.iterations - 1) * overlap


def stage_lower_bound(jobs: Sequence[JobDemand], link_bps: float) -> float:
    """The larger of the stage's slowest job alone (:func:`job_lower_bound`) and, over its
    ports, the earliest any of its jobs can send there plus all its bytes there at line rate.

    Args:
        jobs: the stage's jobs, all starting with the stage.
        link_bps: capacity of every port.
    """
    alone = max((job_lower_bound(job, link_bps) for job in jobs), default=0.0)
    load: dict[Hashable, float] = {}
    first_send: dict[Hashable, float] = {}
    for job in jobs:
        for port, size in job.sync_bytes.items():
            if size > 0 and job.iterations > 0:
                load[port] = load.get(port, 0.0) + job.iterations * size
                first_send[port] = min(first_send.get(port, job.compute_s), job.compute_s)
    busiest = max((first_send[p] + 8.0 * load[p] / link_bps for p in load), default=0.0)
    return max(alone, busiest)


def staggered_stage_lower_bound(
    joins: Sequence[tuple[float, JobDemand]], start_s: float, link_bps: float
) -> float:
    """A lower bound on the SCT of a stage whose jobs join it over time (ASHA's rungs).

    Every job of ``joins`` that joins at ``t`` or later can do nothing before ``t``, and those
    jobs together need at least :func:`stage_lower_bound` of them from a common start; so the
    stage cannot end before ``t - start_s`` plus that, for every join time ``t``. With one
    join time (successive halving's stages) this is :func:`stage_lower_bound` itself.

    Args:
        joins: ``(join time, job)`` of every job of the stage.
        start_s: the stage's start (its first join).
        link_bps: capacity of every port.
    """
    best = 0.0
    for t in sorted({join_s for join_s, _ in joins}):
        later = [job for join_s, job in joins if join_s >= t]
        best = max(best, t - start_s + stage_lower_bound(later, link_bps))
    return best
