"""GPU time-sharing between HPO jobs: the policies and a quantum-by-quantum manager (pure).

Every quantum the policy ranks the unfinished jobs; jobs take GPUs in that order while enough
are free (a job needs one GPU per worker, all at once); the others wait, suspended with their
progress kept. Policies (../shared/DESIGN.md section 6):

- ``fifo``: run to completion in submission order (no preemption);
- ``rr``: equal slices in rotation (least recently run first);
- ``slaq``: largest predicted normalised loss reduction first (SLAQ, Zhang et al., SoCC 2017);
- ``hermes``: fastest recent convergence first, and a new job first gets one slice so that its
  convergence can be measured (reconstructed from Hermes' abstract, Son et al., Electronics
  10(3):350, 2021).

The manager here runs in simulated time (no network); the same policies rank real jobs on the
testbed, where a suspended job's workers are paused (SIGUSR1) and resumed (SIGUSR2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from workloads.curves import LearningCurve


@dataclass
class GpuJob:
    """A training job competing for GPUs.

    Args:
        job_id: identifier.
        gpus: GPUs it needs at once (one per worker).
        arrival_s: submission time.
        iterations: iterations to do.
        iteration_s: time of one iteration while it holds its GPUs.
        curve: its learning curve (the manager observes accuracy as it trains).
    """

    job_id: int
    gpus: int
    arrival_s: float
    iterations: int
    iteration_s: float
    curve: LearningCurve
    done: float = 0.0  # iterations done (fractions carry over between slices)
    history: list[tuple[float, float]] = field(default_factory=list)  # (done, accuracy)
    last_run_s: float | None = None
    slices: int = 0
    preemptions: int = 0
    finish_s: float | None = None
    reached_s: dict[float, float] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.done >= self.iterations

    def observe(self) -> None:
        self.history.append((self.done, self.curve.accuracy(self.done)))


def recent_gain(job: GpuJob) -> float | None:
    """Accuracy gained per iteration over its last slice (``None`` before two observations)."""
    if len(job.history) < 2:
        return None
    (i0, a0), (i1, a1) = job.history[-2], job.history[-1]
    return (a1 - a0) / (i1 - i0) if i1 > i0 else 0.0


def predicted_loss_reduction(job: GpuJob, iterations: float) -> float | None:
    """SLAQ's estimate: the loss (1 - accuracy) it would lose in ``iterations`` more, normalised
    by its initial loss, extrapolating its last observed slope (``None`` without history)."""
    gain = recent_gain(job)
    if gain is None:
        return None
    # loss = 1 - accuracy starts at 1 for every curve (accuracy 0), so it is already normalised
    loss_now = 1.0 - job.history[-1][1]
    return loss_now - max(0.0, loss_now - gain * iterations)


class GpuPolicy:
    """Ranks unfinished jobs, most deserving first."""

    name = ""
    preemptive = True

    def rank(self, jobs: list[GpuJob], quantum_s: float) -> list[GpuJob]:
        raise NotImplementedError


class Fifo(GpuPolicy):
    name = "fifo"
    preemptive = False

    def rank(self, jobs, quantum_s):
        # running jobs keep their GPUs; then submission order
        return sorted(jobs, key=lambda j: (j.slices == 0, j.arrival_s, j.job_id))


class RoundRobin(GpuPolicy):
    name = "rr"

    def rank(self, jobs, quantum_s):
        never = float("-inf")
        return sorted(
            jobs,
            key=lambda j: (never if j.last_run_s is None else j.last_run_s, j.arrival_s, j.job_id),
        )


class Slaq(GpuPolicy):
    name = "slaq"

    def rank(self, jobs, quantum_s):
        def key(job: GpuJob):
            reduction = predicted_loss_reduction(job, quantum_s / job.iteration_s)
            # unmeasured jobs first (they need a slice to be predicted at all)
            return (reduction is not None, -(reduction or 0.0), job.arrival_s, job.job_id)

        return sorted(jobs, key=key)


class Hermes(GpuPolicy):
    name = "hermes"

    def rank(self, jobs, quantum_s):
        def key(job: GpuJob):
            gain = recent_gain(job)
            # a new job first gets one slice, so that its convergence can be measured
            return (job.slices > 0, -(gain or 0.0), job.arrival_s, job.job_id)

        return sorted(jobs, key=key)


GPU_POLICIES: dict[str, Callable[[], GpuPolicy]] = {
    p.name: p for p in (Fifo, RoundRobin, Slaq, Hermes)
}


def choose(ranked: list[GpuJob], n_gpus: int) -> list[GpuJob]:
    """Jobs that run this quantum: in rank order, each if all its GPUs are free."""
    free, chosen = n_gpus, []
    for job in ranked:
        if job.gpus <= free:
            chosen.append(job)
            free -= job.gpus
    return chosen


@dataclass
class TimeSharingResult:
    jobs: list[GpuJob]
    makespan_s: float
    gpu_utilisation: float
    preemptions: int
    preemption_cost_s: float


def run_time_sharing(
    jobs: list[GpuJob],
    n_gpus: int,
    policy: GpuPolicy,
    quantum_s: float = 10.0,
    resume_cost_s: float = 0.5,
    fractions: tuple[float, ...] = (0.9, 0.95),
    max_quanta: int = 1_000_000,
) -> TimeSharingResult:
    """Share ``n_gpus`` between ``jobs`` quantum by quantum (simulated time).

    A job that did not run in the previous quantum and runs now pays ``resume_cost_s`` of its
    slice (restoring its state); a running job that loses its GPUs counts a preemption.
    """
    if any(j.gpus > n_gpus for j in jobs):
        raise ValueError("a job needs more GPUs than the cluster has")
    if quantum_s <= 0 or resume_cost_s < 0 or resume_cost_s >= quantum_s:
        raise ValueError("need quantum_s > resume_cost_s >= 0")
    now, busy_gpu_s, cost_s = 0.0, 0.0, 0.0
    running: set[int] = set()
    for _ in range(max_quanta):
        waiting = [j for j in jobs if not j.finished and j.arrival_s <= now]
        if not waiting:
            future = [j.arrival_s for j in jobs if not j.finished]
            if not future:
                break
            now = max(now, min(future))
            continue
        ranked = policy.rank(waiting, quantum_s)
        if not policy.preemptive:
            ranked = [j for j in ranked if j.job_id in running] + [
                j for j in ranked if j.job_id not in running
            ]
        chosen = choose(ranked, n_gpus)
        chosen_ids = {j.job_id for j in chosen}
        for job in waiting:
            if job.job_id in running and job.job_id not in chosen_ids:
                job.preemptions += 1
        for job in chosen:
            usable = quantum_s
            if job.job_id not in running and job.slices > 0:
                usable -= resume_cost_s
                cost_s += resume_cost_s
            if not job.history:
                job.observe()  # its starting point, so that one slice measures its convergence
            start_done = job.done
            job.done = min(job.iterations, job.done + usable / job.iteration_s)
            ran_s = (job.done - start_done) * job.iteration_s
            busy_gpu_s += ran_s * job.gpus
            for fraction in fractions:
                target = job.curve.iterations_to(fraction)
                if fraction not in job.reached_s and start_done < target <= job.done:
                    offset = quantum_s - usable
                    job.reached_s[fraction] = now + offset + (target - start_done) * job.iteration_s
            job.observe()
            job.slices += 1
            job.last_run_s = now + quantum_s
            if job.finished:
                job.finish_s = now + (quantum_s - usable) + ran_s
        running = {j.job_id for j in chosen if not j.finished}
        now += quantum_s
    else:
        raise RuntimeError("time sharing did not finish within max_quanta")
    makespan = max((j.finish_s for j in jobs), default=0.0)
    utilisation = busy_gpu_s / (n_gpus * makespan) if makespan else 0.0
    return TimeSharingResult(jobs, makespan, utilisation, sum(j.preemptions for j in jobs), cost_s)


# ---- placement ---------------------------------------------------------------------------------

Gpu = tuple[int, int]  # (server, gpu index on that server)


def place(
    demands: dict[int, int], servers: int, gpus_per_server: int, assignment=None
) -> dict[int, list[Gpu]]:
    """Put each job's workers on the least-loaded GPUs (load = jobs time-sharing the GPU).

    Args:
        demands: job id -> GPUs it needs (one per worker, on distinct GPUs).
        servers: servers in the cluster; ``gpus_per_server`` GPUs each.
        assignment: jobs already placed (kept as they are).

    Returns:
        job id -> its GPUs, for every job of ``demands`` and ``assignment``.
    """
    out = {job: list(gpus) for job, gpus in (assignment or {}).items()}
    load = {(s, g): 0 for s in range(servers) for g in range(gpus_per_server)}
    for gpus in out.values():
        for gpu in gpus:
            load[gpu] += 1
    for job in sorted(demands):
        if job in out:
            continue
        if demands[job] > len(load):
            raise ValueError(f"job {job} needs {demands[job]} GPUs, the cluster has {len(load)}")
        chosen = sorted(load, key=lambda gpu: (load[gpu], gpu))[: demands[job]]
        for gpu in chosen:
            load[gpu] += 1
        out[job] = chosen
    return out


def rebalance(assignment: dict[int, list[Gpu]], servers: int, gpus_per_server: int):
    """Migrate workers from the most to the least loaded GPUs until loads differ by at most 1
    (Hermes' global scheduler). Returns the new assignment and the number of migrations."""
    out = {job: list(gpus) for job, gpus in assignment.items()}
    gpus_all = [(s, g) for s in range(servers) for g in range(gpus_per_server)]
    migrations = 0
    while True:
        load = {gpu: 0 for gpu in gpus_all}
        for gpus in out.values():
            for gpu in gpus:
                load[gpu] += 1
        busiest = max(gpus_all, key=lambda gpu: (load[gpu], gpu))
        idlest = min(gpus_all, key=lambda gpu: (load[gpu], gpu))
        if load[busiest] - load[idlest] <= 1:
            return out, migrations
        # move one worker of a job on the busiest GPU that is not already on the idlest one
        for job in sorted(out):
            if busiest in out[job] and idlest not in out[job]:
                out[job][out[job].index(busiest)] = idlest
                migrations += 1
                break
        else:
            return out, migrations
