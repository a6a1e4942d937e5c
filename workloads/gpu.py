"""GPU time-sharing between HPO jobs: the policies and one manager for testbed and simulator.

Every server has G GPUs. A job holds one GPU per worker: on submission its workers are placed on
the least-loaded GPUs (of their own servers when the workload fixes them), and when jobs finish
workers of waiting jobs migrate so that the number of jobs time-sharing each GPU stays
balanced (Hermes' global scheduler). Time is shared in quanta: at every quantum boundary the
policy ranks the unfinished jobs and, in that order, a job runs if all its GPUs are still free
(gang scheduling, work-conserving); between boundaries, GPUs freed by a finished job go to
waiting jobs without preempting anyone. A job that loses its GPUs is suspended, keeping its
progress; resuming it continues where it stopped and costs ``resume_cost_s`` (restoring its
state). Policies (docs/architecture.md):

- ``fifo``: run to completion in submission order (no preemption);
- ``rr``: equal slices in rotation (least recently run first);
- ``slaq``: largest predicted *normalised* loss reduction first: the loss it would lose in the
  next quantum at its recent rate, over the largest such reduction seen for that job (SLAQ,
  Zhang et al., SoCC 2017). Each job is measured against itself, so a poor configuration early
  in training counts as much as a good one;
- ``hermes``: fastest convergence first (accuracy gained per GPU-second since the job started,
  not normalised, so configurations that converge fast early, the promising ones, go first),
  and a new job first gets one slice so that its convergence can be measured (reconstructed
  from Hermes' abstract, Son et al., Electronics 10(3):350, 2021).

:class:`GpuManager` holds the decisions and knows no clock: :func:`run_time_sharing` drives it in
simulated time with jobs that only compute, ``simulator.hpo.HpoDriver`` drives it with the
network simulated, and ``topologies.testbed_driver.TestbedDriver`` with real worker processes
(suspended with SIGUSR1 and resumed with SIGUSR2 at an iteration boundary).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from cli.argtypes import named, policy_help
from controller import plugins
from workloads.curves import LearningCurve
from workloads.hpo import best_identified_s

Gpu = tuple[int, int]  # (server, GPU index on that server)
_EPS = 1e-9


@dataclass
class GpuJob:
    """A training job competing for GPUs.

    Args:
        job_id: identifier.
        gpus: GPUs it needs at once (one per worker).
        arrival_s: submission time.
        iterations: iterations to do (in a stage, for the HPO drivers; a policy may rank by
            what is left, ``iterations - done``; :func:`run_time_sharing` simulates them).
        iteration_s: time of one iteration while it holds its GPUs (idem).
        curve: its learning curve (idem; drivers :meth:`GpuManager.report` accuracy instead).
        servers: the server of each worker when the workload fixes it (then it gets GPUs of
            those servers and only migrates within them); ``None``: any GPUs of the cluster.
    """

    job_id: int
    gpus: int
    arrival_s: float
    iterations: int = 0
    iteration_s: float = 1.0
    curve: LearningCurve | None = None
    servers: list[int] | None = None
    done: float = 0.0  # iterations done (fractions carry over between slices)
    accuracy: float = 0.0  # last reported
    held_s: float = 0.0  # time it has held its GPUs
    history: list[tuple[float, float]] = field(default_factory=list)  # (held_s, accuracy)
    placement: list[Gpu] = field(default_factory=list)
    running: bool = False
    run_since_s: float | None = None
    last_run_s: float | None = None  # when it last lost its GPUs
    slices: int = 0  # measured slices
    resumes: int = 0  # starts that first restored its state (after a suspension or migration)
    preemptions: int = 0
    migrations: int = 0
    finish_s: float | None = None
    reached_s: dict[float, float] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """Whether the job has finished (or was stopped)."""
        return self.finish_s is not None

    def observe(self) -> None:
        """Record the accuracy at the GPU time held so far (the convergence history)."""
        self.history.append((self.held_s, self.accuracy))


def gains_per_second(job: GpuJob) -> list[float]:
    """Accuracy gained per GPU-second between consecutive observations of ``job``."""
    return [
        (a1 - a0) / (h1 - h0)
        for (h0, a0), (h1, a1) in zip(job.history, job.history[1:], strict=False)
        if h1 - h0 > _EPS
    ]


def convergence_speed(job: GpuJob) -> float | None:
    """Hermes' measure: accuracy gained per GPU-second since the job started (``None`` before
    its first measured slice). Good configurations converge fast early, so it stays high for
    them; an instantaneous rate would instead favour whichever job last ran least."""
    (h0, a0), (h1, a1) = job.history[0], job.history[-1]
    return (a1 - a0) / (h1 - h0) if h1 - h0 > _EPS else None


def normalised_loss_reduction(job: GpuJob, quantum_s: float) -> float | None:
    """SLAQ's score: the loss (1 - accuracy) it would lose in the next quantum at its recent
    rate, over the largest reduction per quantum seen for this job (``None`` before a slice)."""
    gains = gains_per_second(job)
    if not gains:
        return None
    loss_now = 1.0 - job.history[-1][1]
    predicted = min(loss_now, max(0.0, gains[-1]) * quantum_s)
    largest = max(gains) * quantum_s
    return predicted / largest if largest > 0 else 0.0


class GpuPolicy:
    """Ranks unfinished jobs, most deserving first.

    A policy of your own (``--gpu-policy package.module:Class``, see :mod:`controller.plugins`)
    subclasses this, sets ``name`` (its runs' label) and implements :meth:`rank`; the manager
    makes one instance per run, without arguments. At every quantum boundary the manager runs,
    in the ranked order, each job whose GPUs are all still free (a job left out of the ranking
    waits); ``preemptive = False`` keeps the running jobs running until they finish.
    """

    name = ""
    preemptive = True

    def rank(self, jobs: list[GpuJob], quantum_s: float) -> list[GpuJob]:
        """The jobs, most deserving of a GPU first, for the next ``quantum_s``."""
        raise NotImplementedError


class Fifo(GpuPolicy):
    """First come, first served; no preemption."""

    name = "fifo"
    preemptive = False

    def rank(self, jobs, quantum_s):
        """By arrival."""
        return sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))


class RoundRobin(GpuPolicy):
    """Time-sharing in turn: least recently run first."""

    name = "rr"

    def rank(self, jobs, quantum_s):
        """Least recently run first (running jobs count as run now)."""
        never = -math.inf
        # running jobs count as having run now; then least recently run first
        return sorted(
            jobs,
            key=lambda j: (
                math.inf if j.running else (never if j.last_run_s is None else j.last_run_s),
                j.arrival_s,
                j.job_id,
            ),
        )


class Slaq(GpuPolicy):
    """SLAQ: largest predicted normalised loss reduction first."""

    name = "slaq"

    def rank(self, jobs, quantum_s):
        """By predicted normalised loss reduction in the next quantum, largest first."""

        def key(job: GpuJob):
            score = normalised_loss_reduction(job, quantum_s)
            # unmeasured jobs first: they need a slice to be predicted at all
            return (score is not None, -(score or 0.0), job.arrival_s, job.job_id)

        return sorted(jobs, key=key)


class Hermes(GpuPolicy):
    """Hermes (reconstructed): fastest converging first, a new job's first slice before that;
    preemptive."""

    name = "hermes"

    def rank(self, jobs, quantum_s):
        """New jobs first (one slice to measure them), then by convergence speed, fastest first."""

        def key(job: GpuJob):
            speed = convergence_speed(job)
            # a new job first gets one slice, so that its convergence can be measured
            return (speed is not None, -(speed or 0.0), job.arrival_s, job.job_id)

        return sorted(jobs, key=key)


GPU_POLICIES: dict[str, Callable[[], GpuPolicy]] = {
    p.name: p for p in (Fifo, RoundRobin, Slaq, Hermes)
}

# the entry-point group in which an installed distribution offers GPU policies
# (controller.plugins)
GPU_POLICY_GROUP = "hpo_scheduling.gpu_policies"

# the GPU policies of outside code loaded in this process, by the reference they were loaded by
_LOADED: dict[str, type[GpuPolicy]] = {}


def gpu_policy_class(name: str) -> Callable[[], GpuPolicy]:
    """The GPU policy ``name`` names: a built-in's name, or (see :mod:`controller.plugins`)
    ``package.module:Class`` or an entry point of :data:`GPU_POLICY_GROUP`, imported the first
    time; ``ValueError`` (one line) naming the choices, or why the class could not be loaded."""
    if name in GPU_POLICIES:
        return GPU_POLICIES[name]
    if name in _LOADED:
        return _LOADED[name]
    unknown = f"unknown GPU policy {name!r}; known: {', '.join(sorted(GPU_POLICIES))}"
    if not isinstance(name, str):
        raise ValueError(unknown)
    found = plugins.load(
        name, base=GpuPolicy, group=GPU_POLICY_GROUP, kind="GPU policy", builtins=GPU_POLICIES
    )
    if found is None:
        raise ValueError(unknown + plugins.unknown_hint(name, GPU_POLICY_GROUP))
    _LOADED[name] = found
    return found


# the --gpu-policy flag's argparse type, one for every command: ``none`` or a GPU policy
gpu_policy_name = named(gpu_policy_class, also=("none",))


def add_gpu_policy_argument(parser: argparse.ArgumentParser, default: list[str], what: str,
                            none: bool = True) -> None:  # fmt: skip
    """A ``--gpu-policy`` flag taking one or more GPU policies (``none``: also ``none``, every
    job computing at once); its help says ``what`` they are for, then every way to name one."""
    parser.add_argument(
        "--gpu-policy",
        nargs="+",
        default=default,
        type=gpu_policy_name if none else named(gpu_policy_class),
        metavar="GPU_POLICY",
        help=f"{what}: {'none, ' if none else ''}{policy_help(GPU_POLICIES)}",
    )


def make_gpu_policy(name: str) -> GpuPolicy:
    """A new GPU policy by name (see :func:`gpu_policy_class`); ``ValueError`` naming the
    choices otherwise."""
    return gpu_policy_class(name)()


def gpu_policy_label(name: str) -> str:
    """What runs under GPU policy ``name`` are labelled by: its class's ``name``."""
    return gpu_policy_class(name).name


# ---- placement ---------------------------------------------------------------------------------


def _loads(assignment: dict[int, list[Gpu]], gpus_all: list[Gpu]) -> dict[Gpu, int]:
    load = dict.fromkeys(gpus_all, 0)
    for gpus in assignment.values():
        for gpu in gpus:
            load[gpu] += 1
    return load


def place(
    demands: dict[int, int],
    servers: int,
    gpus_per_server: int,
    assignment: dict[int, list[Gpu]] | None = None,
    fixed_servers: dict[int, list[int]] | None = None,
) -> dict[int, list[Gpu]]:
    """Put each job's workers on the least-loaded GPUs (load = jobs time-sharing the GPU).

    Args:
        demands: job id -> GPUs it needs (one per worker, on distinct GPUs).
        servers: servers in the cluster; ``gpus_per_server`` GPUs each.
        assignment: jobs already placed (kept as they are).
        fixed_servers: job id -> the server of each of its workers, for jobs whose hosts the
            workload fixes (their workers get the least-loaded GPUs of those servers).

    Returns:
        job id -> its GPUs, for every job of ``demands`` and ``assignment``.
    """
    out = {job: list(gpus) for job, gpus in (assignment or {}).items()}
    gpus_all = [(s, g) for s in range(servers) for g in range(gpus_per_server)]
    load = _loads(out, gpus_all)
    for job in sorted(demands):
        if job in out:
            continue
        hosts = (fixed_servers or {}).get(job)
        if hosts is None:
            if demands[job] > len(gpus_all):
                raise ValueError(
                    f"job {job} needs {demands[job]} GPUs, the cluster has {len(gpus_all)}"
                )
            chosen = sorted(gpus_all, key=lambda gpu: (load[gpu], gpu))[: demands[job]]
        else:
            if len(hosts) != demands[job]:
                raise ValueError(f"job {job}: {len(hosts)} servers for {demands[job]} workers")
            chosen = []
            for server in hosts:
                if not 0 <= server < servers:
                    raise ValueError(f"job {job}: server {server} is not in 0..{servers - 1}")
                free = [(server, g) for g in range(gpus_per_server) if (server, g) not in chosen]
                if not free:
                    raise ValueError(
                        f"job {job} has more workers on server {server} than its "
                        f"{gpus_per_server} GPUs"
                    )
                chosen.append(min(free, key=lambda gpu: (load[gpu], gpu)))
        for gpu in chosen:
            load[gpu] += 1
        out[job] = chosen
    return out


def rebalance(
    assignment: dict[int, list[Gpu]],
    servers: int,
    gpus_per_server: int,
    fixed_servers: set[int] | frozenset[int] = frozenset(),
    pinned: set[int] | frozenset[int] = frozenset(),
) -> tuple[dict[int, list[Gpu]], int]:
    """Migrate workers from busier to less busy GPUs until no move evens the loads further
    (Hermes' global scheduler): loads end within 1 of each other when every job may move
    anywhere; jobs in ``fixed_servers`` only move between GPUs of the same server, jobs in
    ``pinned`` (running ones) do not move.

    Returns the new assignment and the number of worker migrations.
    """
    out = {job: list(gpus) for job, gpus in assignment.items()}
    gpus_all = [(s, g) for s in range(servers) for g in range(gpus_per_server)]
    load = _loads(out, gpus_all)
    migrations = 0
    if max(load.values()) - min(load.values()) < 2:
        # no move can even the loads (one needs a difference of 2): the usual case at a
        # quantum boundary, spared a pass over every job's workers
        return out, migrations
    while True:
        best = None  # (load difference, job, worker index, destination)
        for job in sorted(set(out) - set(pinned)):
            for index, gpu in enumerate(out[job]):
                allowed = [
                    other
                    for other in gpus_all
                    if other not in out[job] and (job not in fixed_servers or other[0] == gpu[0])
                ]
                if not allowed:
                    continue
                destination = min(allowed, key=lambda other: (load[other], other))
                diff = load[gpu] - load[destination]
                if diff >= 2 and (best is None or diff > best[0]):
                    best = (diff, job, index, destination)
        if best is None:
            return out, migrations
        _, job, index, destination = best
        load[out[job][index]] -= 1
        load[destination] += 1
        out[job][index] = destination
        migrations += 1


# ---- the manager -------------------------------------------------------------------------------


@dataclass
class Decision:
    """What changes now: jobs that get their GPUs, jobs that lose them, and the started jobs
    that first pay ``resume_cost_s`` (resumed after a suspension, or migrated while waiting)."""

    start: list[GpuJob] = field(default_factory=list)
    stop: list[GpuJob] = field(default_factory=list)
    delayed: set[int] = field(default_factory=set)


class GpuManager:
    """Places jobs on GPUs and time-shares them under a policy; the driver owns the clock.

    The driver calls :meth:`submit` when a job arrives, :meth:`report` with its progress,
    :meth:`finish` when it is done, :meth:`schedule` at every quantum boundary (``preempt=True``)
    and after an arrival or a finish (``preempt=False``: only free GPUs are handed out), and
    applies each :class:`Decision`.
    """

    def __init__(
        self,
        policy: GpuPolicy,
        servers: int,
        gpus_per_server: int,
        quantum_s: float = 10.0,
        resume_cost_s: float = 0.5,
    ) -> None:
        if servers < 1 or gpus_per_server < 1:
            raise ValueError("need at least one server and one GPU per server")
        if quantum_s <= 0 or resume_cost_s < 0 or resume_cost_s >= quantum_s:
            raise ValueError("need quantum_s > resume_cost_s >= 0")
        self.policy = policy
        self.servers = servers
        self.gpus_per_server = gpus_per_server
        self.quantum_s = quantum_s
        self.resume_cost_s = resume_cost_s
        self.jobs: dict[int, GpuJob] = {}
        self.busy_gpu_s = 0.0
        self.first_arrival_s: float | None = None

    @property
    def n_gpus(self) -> int:
        """GPUs in the cluster."""
        return self.servers * self.gpus_per_server

    def active(self) -> list[GpuJob]:
        """Jobs not finished."""
        return [j for j in self.jobs.values() if not j.finished]

    def submit(self, job: GpuJob, now: float, accuracy: float = 0.0) -> None:
        """Admit ``job`` (its accuracy so far: a configuration resumed from an earlier stage)
        and place it on the least-loaded GPUs."""
        if job.job_id in self.jobs:
            raise ValueError(f"job {job.job_id} was already submitted")
        active = {j.job_id: j.placement for j in self.active()}
        fixed = {job.job_id: job.servers} if job.servers is not None else None
        job.placement = place(
            {job.job_id: job.gpus}, self.servers, self.gpus_per_server, active, fixed
        )[job.job_id]
        job.accuracy = accuracy
        job.observe()
        self.jobs[job.job_id] = job
        if self.first_arrival_s is None:
            self.first_arrival_s = now

    def report(self, job_id: int, done: float, accuracy: float) -> None:
        """Progress of a job: iterations done and its accuracy now."""
        job = self.jobs[job_id]
        job.done, job.accuracy = done, accuracy

    def _account(self, now: float) -> None:
        """Add the time since the last call to every running job's GPU time (restoring a
        resumed job's state is not training time: it is counted as preemption cost)."""
        for job in self.jobs.values():
            if job.running and job.run_since_s is not None and now > job.run_since_s:
                held = now - job.run_since_s
                job.held_s += held
                self.busy_gpu_s += held * job.gpus
                job.run_since_s = now

    def finish(self, job_id: int, now: float) -> None:
        """``job_id`` is done: its GPUs are free (hand them out with ``schedule(now, False)``)."""
        self._account(now)
        job = self.jobs[job_id]
        job.finish_s = now
        job.running = False

    def _rebalance(self) -> set[int]:
        active = {j.job_id: j for j in self.active()}
        fixed = {j.job_id for j in active.values() if j.servers is not None}
        current = {i: j.placement for i, j in active.items()}
        running = {i for i, j in active.items() if j.running}
        new, _ = rebalance(current, self.servers, self.gpus_per_server, fixed, running)
        moved = set()
        for job_id, gpus in new.items():
            job = active[job_id]
            changes = sum(a != b for a, b in zip(job.placement, gpus, strict=True))
            if changes:
                job.placement = gpus
                job.migrations += changes
                moved.add(job_id)
        return moved

    def schedule(self, now: float, preempt: bool = True) -> Decision:
        """Decide who holds the GPUs from ``now``: the policy's ranking at a quantum boundary
        (``preempt``), or only free GPUs handed out in rank order between boundaries."""
        self._account(now)
        active = self.active()
        moved: set[int] = set()
        if preempt:
            for job in active:
                if job.running and job.held_s > job.history[-1][0] + _EPS:
                    job.observe()
                    job.slices += 1
            moved = self._rebalance()
        ranked = self.policy.rank(active, self.quantum_s)
        keep_running = not preempt or not self.policy.preemptive
        chosen: list[GpuJob] = []
        busy: set[Gpu] = set()
        if keep_running:
            chosen = [j for j in ranked if j.running]
            busy = {gpu for j in chosen for gpu in j.placement}
        # by id: `job in chosen` would compare the dataclasses field by field (their histories
        # too), most of a time-sharing run's cost; a job's id is unique in the manager
        chosen_ids = {j.job_id for j in chosen}
        for job in ranked:
            if job.job_id in chosen_ids or busy.intersection(job.placement):
                continue
            chosen.append(job)
            chosen_ids.add(job.job_id)
            busy.update(job.placement)
        decision = Decision()
        for job in active:
            if job.running and job.job_id not in chosen_ids:
                job.running = False
                job.run_since_s = None
                job.last_run_s = now
                job.preemptions += 1
                decision.stop.append(job)
        for job in chosen:
            if job.running:
                continue
            if job.last_run_s is not None or job.job_id in moved:  # restore its state first
                decision.delayed.add(job.job_id)
                job.resumes += 1
            job.running = True
            job.run_since_s = now + (self.resume_cost_s if job.job_id in decision.delayed else 0)
            decision.start.append(job)
        return decision

    def stats(self, now: float) -> dict:
        """GPU utilisation (training, not restoring) since the first arrival, preemptions and
        what they cost."""
        self._account(now)
        span = now - (self.first_arrival_s or 0.0)
        jobs = self.jobs.values()
        return {
            "gpu_utilisation": self.busy_gpu_s / (self.n_gpus * span) if span > 0 else 0.0,
            "preemptions": sum(j.preemptions for j in jobs),
            "migrations": sum(j.migrations for j in jobs),
            "resumes": sum(j.resumes for j in jobs),
            # time spent restoring state: per job, and in GPU-seconds (all its GPUs wait)
            "preemption_cost_s": sum(j.resumes for j in jobs) * self.resume_cost_s,
            "preemption_cost_gpu_s": sum(j.resumes * j.gpus for j in jobs) * self.resume_cost_s,
        }


# ---- simulated time, compute only --------------------------------------------------------------


@dataclass
class TimeSharingResult:
    """Outcome of a GPU time-sharing run: the jobs and the makespan."""

    jobs: list[GpuJob]
    makespan_s: float
    gpu_utilisation: float
    preemptions: int
    preemption_cost_s: float
    migrations: int = 0
    best_identified_s: float | None = None


def reschedule(
    manager: GpuManager, now: float, boundary: float, changed: bool, ready_at: dict[int, float]
) -> float:
    """One scheduling step of a time-sharing loop at ``now``: at a quantum ``boundary`` the
    manager may preempt (and the next boundary is a quantum later), after a ``changed`` event
    (arrival, end) it only fills free GPUs. Every job started records in ``ready_at`` when it
    computes (after the resume cost if it was preempted before). Returns the next boundary."""
    if now >= boundary - _EPS:
        decision = manager.schedule(now, preempt=True)
        boundary = now + manager.quantum_s
    elif changed:
        decision = manager.schedule(now, preempt=False)
    else:
        return boundary
    for job in decision.start:
        delay = manager.resume_cost_s if job.job_id in decision.delayed else 0
        ready_at[job.job_id] = now + delay
    return boundary


def run_time_sharing(
    jobs: list[GpuJob],
    n_gpus: int,
    policy: GpuPolicy,
    quantum_s: float = 10.0,
    resume_cost_s: float = 0.5,
    fractions: tuple[float, ...] = (0.9, 0.95),
    max_events: int = 10_000_000,
    gpus_per_server: int | None = None,
) -> TimeSharingResult:
    """Share ``n_gpus`` between ``jobs`` that only compute, in simulated time, through a
    :class:`GpuManager` (``gpus_per_server``: servers of that many GPUs; default one server).

    A job computes ``iterations`` of ``iteration_s`` each while it holds its GPUs, after paying
    ``resume_cost_s`` whenever it resumes; its accuracy follows its ``curve``.
    """
    per_server = gpus_per_server or n_gpus
    if n_gpus % per_server:
        raise ValueError("n_gpus must be a multiple of gpus_per_server")
    if any(j.gpus > n_gpus for j in jobs):
        raise ValueError("a job needs more GPUs than the cluster has")
    manager = GpuManager(policy, n_gpus // per_server, per_server, quantum_s, resume_cost_s)
    pending = sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))
    ready_at: dict[int, float] = {}  # running job -> when it computes (after its resume cost)
    observations: list[tuple[float, int, float]] = []
    now, boundary = 0.0, 0.0

    def advance(job: GpuJob, until: float) -> None:
        start = max(now, ready_at[job.job_id])
        if until <= start:
            return
        before = job.done
        job.done = min(float(job.iterations), job.done + (until - start) / job.iteration_s)
        for fraction in fractions:
            target = job.curve.iterations_to(fraction) if job.curve else math.inf
            if fraction not in job.reached_s and before < target <= job.done + _EPS:
                job.reached_s[fraction] = start + (target - before) * job.iteration_s

    for _ in range(max_events):
        running = [j for j in manager.active() if j.running]
        if not pending and not manager.active():
            break
        finishes = [
            max(now, ready_at[j.job_id]) + (j.iterations - j.done) * j.iteration_s for j in running
        ]
        if not manager.active():  # idle: skip to the quantum boundary of the next arrival
            boundary = max(boundary, math.floor(pending[0].arrival_s / quantum_s) * quantum_s)
        candidates = [boundary] + finishes + ([pending[0].arrival_s] if pending else [])
        until = max(now, min(candidates))
        for job in running:
            advance(job, until)
        now = until
        changed = False
        for job in running:
            manager.report(job.job_id, job.done, job.curve.accuracy(job.done) if job.curve else 0.0)
            observations.append((now, job.job_id, job.accuracy))
            if job.done >= job.iterations - _EPS:
                job.done = float(job.iterations)
                manager.finish(job.job_id, now)
                changed = True
        while pending and pending[0].arrival_s <= now + _EPS:
            job = pending.pop(0)
            manager.submit(job, now)
            changed = True
        boundary = reschedule(manager, now, boundary, changed, ready_at)
    else:
        raise RuntimeError("time sharing did not finish within max_events")
    stats = manager.stats(now)
    makespan = max((j.finish_s for j in jobs), default=0.0)
    # the best configuration: the most accurate once trained (what the HPO will pick)
    best = max(jobs, key=lambda j: (j.curve.accuracy(j.iterations) if j.curve else 0.0, -j.job_id))
    return TimeSharingResult(
        jobs,
        makespan,
        manager.busy_gpu_s / (n_gpus * makespan) if makespan else 0.0,
        stats["preemptions"],
        stats["preemption_cost_s"],
        stats["migrations"],
        best_identified_s(observations, best.job_id) if jobs else None,
    )
