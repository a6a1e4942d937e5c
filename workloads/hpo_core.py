"""The HPO progression core: one state machine of tasks, stages, jobs and configurations for the
simulator and the testbed.

It owns no clock and moves no bytes. A driver feeds it events with the time they happened
(:meth:`HpoCore.arrive`, :meth:`HpoCore.iteration_done`, :meth:`HpoCore.job_done`,
:meth:`HpoCore.quantum`) and carries out the :class:`Actions` it returns: start these jobs,
give or take these GPUs. The core alone decides which configurations survive a stage, when a
stage ends, what accuracy a configuration has, and writes the rows of every result file, so
the simulator (:mod:`simulator.hpo`, bytes through a simulated fabric) and the testbed
(:mod:`topologies.testbed_driver`, worker processes on Mininet hosts) report the same metrics
with the same definitions:

- every time of a task counts from its **arrival**, the workload's ``arrival_s`` on the
  driver's clock (time to 90 % / 95 % of a configuration's converged accuracy, the accuracy
  at the end of its training, see :meth:`HpoCore.config_rows`; best
  configuration identified, HPO completion), so a driver that starts a task late (the testbed
  launching another task's workers) counts the delay; ``start_s`` says when it started;
- a stage's SCT runs from its start (its first jobs submitted) to its last job's end; a job's
  JCT from its stage's start to its own end;
- lower bounds from :mod:`controller.bounds` (``bound_s``; ``ratio_to_bound`` = measured /
  bound, never below 1): a job alone; a stage (the larger of its slowest job alone and its
  busiest port); a task (the sum of its stages' bounds: its stages run one after the other);
- accuracy comes from the configuration's learning curve object (:mod:`workloads.curves`)
  after the iterations it has trained over all its stages;
- a port's **busy** share is the time its synchronisation bytes need at line rate over the
  time any stage runs (:meth:`HpoCore.port_busy`): the regime a result belongs to (network-
  bound where the busiest ports are mostly busy).

The search is successive halving (:func:`workloads.hpo.survivors` picks who goes on); a task's
``plan`` lists its stages. A Hyperband task runs several such plans side by side, one per
bracket (``HpoTask.brackets``, :func:`workloads.hpo.hyperband_brackets`): each bracket's stages
follow one another, the task ends with its last bracket, and its bound is its slowest
bracket's sum of stage bounds. An ``asynchronous`` task runs the same plan as ASHA
(:func:`workloads.hpo.asha_promotions`): its rungs have no barrier, a configuration moves on
as soon as it ranks high enough among those that completed its rung. Each rung is still a
**stage** (what Beamer orders, what the controller registers): the jobs training towards that
rung's budget, which join it as they are promoted. It starts with its first job and ends with
its last one once no more can join (the rung below has ended); its lower bound allows for the
later joins (:func:`controller.bounds.staggered_stage_lower_bound`), and its task's bound is
the larger of its first rung's and the shortest chain of one configuration through the rungs
it reached (stages overlap, so they do not add up); what starts and moves on is its
``search``'s (:class:`workloads.hpo.RungSearch`: ASHA, or an Optuna study).
:meth:`HpoCore._after_job` is the one place that decides what starts after an event, for every
search.

With a job manager (:class:`workloads.gpu.GpuManager`) the core submits every job it starts,
reports progress, and returns the manager's decisions; ``JobRun.holding`` says whether a job
holds its GPUs (always true without a manager).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from controller.bounds import JobDemand, job_lower_bound, staggered_stage_lower_bound
from controller.metrics import merge_intervals, summarise
from controller.model import EGRESS, Flow, Port, port_bytes
from workloads.gpu import Decision, GpuJob, GpuManager
from workloads.hpo import (
    Asha,
    Flows,
    HpoTask,
    RungSearch,
    best_identified_s,
    survivors,
    sync_phases,
)

FRACTIONS = (0.9, 0.95)


@dataclass
class JobRun:
    """One configuration training in one stage.

    Args:
        job_id: unique over the run (stages and jobs share one id sequence).
        task_id, stage_id, config: where it belongs.
        hosts: workload host indices of its workers (the PS or first ring rank first).
        phases: the coflows of one synchronisation between those hosts, in the order they
            run (:func:`workloads.hpo.sync_phases`).
        start_iteration: iterations its configuration trained before this stage.
        iterations: iterations to train in this stage.
        start_s: when it started: its stage's start, or later for a job that joined an
            asynchronous rung.
        sync_bytes: bytes one synchronisation puts through each port (``controller.model``
            ports of the workload host indices), all its coflows together.
        bound_s: lower bound on its JCT.
    """

    job_id: int
    task_id: int
    stage_id: int
    config: int
    hosts: list[int]
    phases: list[Flows]
    start_iteration: int
    iterations: int
    start_s: float
    sync_bytes: dict[Port, float]
    bound_s: float
    done: int = 0  # iterations completed in this stage
    finish_s: float | None = None
    holding: bool = True  # holds its GPUs (always, without a job manager)

    @property
    def target_iteration(self) -> int:
        """The configuration's iteration count once this job is done."""
        return self.start_iteration + self.iterations

    @property
    def jct_s(self) -> float | None:
        """Job completion time from its start (``None`` while running)."""
        return None if self.finish_s is None else self.finish_s - self.start_s


@dataclass
class StageRun:
    """One successive-halving round of a task: its jobs start together, it ends with the last
    (an ASHA rung: its jobs join as they are promoted; see the module docstring)."""

    stage_id: int
    task_id: int
    index: int
    start_s: float
    iterations: int
    compute_s: float  # compute time of each of its jobs: a floor under its SCT
    bound_s: float  # lower bound on its SCT (controller.bounds.stage_lower_bound)
    job_ids: list[int] = field(default_factory=list)
    finish_s: float | None = None
    bracket: int = 0  # its task's bracket (Hyperband's; 0 for the other searches)

    @property
    def sct_s(self) -> float | None:
        """Stage completion time from its start (``None`` while running)."""
        return None if self.finish_s is None else self.finish_s - self.start_s


@dataclass
class ConfigRun:
    """A configuration over all its stages: the iterations it trained."""

    task_id: int
    config: int
    trained: int = 0


@dataclass
class TaskRun:
    """An HPO task: when it arrived (the origin of its times), started and ended."""

    task_id: int
    arrival_s: float
    start_s: float
    finish_s: float | None = None
    bound_s: float = 0.0  # sum of its stages' bounds


@dataclass
class Actions:
    """What a driver must do after an event, in this order: retire the stages of
    ``finished_stages`` (they ended; their jobs are done), start ``started`` (jobs of new or
    open stages, already submitted to the job manager), then apply every GPU decision in
    turn."""

    started: list[JobRun] = field(default_factory=list)
    gpu: list[Decision] = field(default_factory=list)
    finished_stages: list[StageRun] = field(default_factory=list)

    def extend(self, other: Actions) -> None:
        """Add ``other``'s actions to these."""
        self.started += other.started
        self.gpu += other.gpu
        self.finished_stages += other.finished_stages


@dataclass
class _Rung:
    """One rung of an asynchronous task: its stage (once a job joined it), the accuracy of
    every configuration that completed it, those promoted out of it, and whether it ended."""

    stage: StageRun | None = None
    completed: dict[int, float] = field(default_factory=dict)
    promoted: list[int] = field(default_factory=list)
    ended: bool = False


def _shortest_remote_flow(phase) -> float | None:
    """The smallest flow of a phase that crosses the network (``None`` if none does)."""
    sizes = [float(b) for s, d, b in zip(*phase, strict=True) if s != d and b > 0]
    return min(sizes, default=None)


class HpoCore:
    """The state of HPO tasks driven by events; see the module docstring.

    Args:
        tasks: the workload (:func:`workloads.hpo.generate`).
        link_bps: capacity of every host port (for the lower bounds).
        gpus: the job manager sharing the GPUs, or ``None``: every job computes at once.
        fractions: accuracy fractions (of converged accuracy) whose time to reach is recorded.
        new_id: gives stage and job ids (default: 1, 2, ...); a driver that numbers more
            things from one sequence passes its own.
    """

    def __init__(
        self,
        tasks: Iterable[HpoTask],
        link_bps: float,
        gpus: GpuManager | None = None,
        fractions: Iterable[float] = FRACTIONS,
        new_id: Callable[[], int] | None = None,
    ) -> None:
        if not link_bps > 0:
            raise ValueError(f"link_bps must be > 0, got {link_bps!r}")
        self.tasks = {t.task_id: t for t in tasks}
        self.link_bps = float(link_bps)
        self.gpus = gpus
        self.fractions = tuple(fractions)
        self._new_id = new_id or itertools.count(1).__next__
        self.runs: dict[int, TaskRun] = {}
        self.stages: dict[int, StageRun] = {}
        self.jobs: dict[int, JobRun] = {}
        self.configs: dict[tuple[int, int], ConfigRun] = {
            (t.task_id, c): ConfigRun(t.task_id, c) for t in self.tasks.values()
            for c in range(t.n_configs)
        }  # fmt: skip
        # task id -> (time, configuration, accuracy) as its jobs reported them
        self.observations: dict[int, list[tuple[float, int, float]]] = {t: [] for t in self.tasks}
        self._rungs: dict[int, list[_Rung]] = {
            t.task_id: [_Rung() for _ in t.plan] for t in self.tasks.values() if t.asynchronous
        }
        self._joins: dict[int, list[tuple[float, JobDemand]]] = {}  # stage id -> its jobs
        # per synchronous task: the sum of each bracket's stage bounds (its stages run one
        # after the other; brackets run side by side) and how many brackets still run
        self._bracket_bounds: dict[int, list[float]] = {}
        self._brackets_running: dict[int, int] = {}

    # ---- events -------------------------------------------------------------------------------

    def arrive(self, task_id: int, now_s: float) -> Actions:
        """Task ``task_id`` starts (at or after its ``arrival_s``): its first stage starts
        with every configuration."""
        if task_id in self.runs:
            raise ValueError(f"task {task_id} arrived twice")
        task = self.tasks[task_id]
        if now_s < task.arrival_s - 1e-9:
            raise ValueError(f"task {task_id} started at {now_s} s, before its arrival")
        self.runs[task_id] = TaskRun(task_id, task.arrival_s, now_s)
        if task.asynchronous:
            configs = self._search(task).first_configs(task)
            if not configs:
                raise ValueError(f"task {task_id}'s search started no configuration")
            return self._start_stage(task, 0, configs, now_s)
        brackets = task.all_brackets
        self._bracket_bounds[task_id] = [0.0] * len(brackets)
        self._brackets_running[task_id] = len(brackets)
        actions = Actions()
        for index, bracket in enumerate(brackets):
            actions.extend(self._start_stage(task, 0, list(bracket.configs), now_s, index))
        return actions

    def iteration_done(self, job_id: int, now_s: float) -> float:
        """Job ``job_id`` finished one more iteration (compute and synchronisation).

        Returns:
            The configuration's accuracy now.
        """
        job = self.jobs[job_id]
        if job.done >= job.iterations:
            raise ValueError(f"job {job_id} reported more than its {job.iterations} iterations")
        job.done += 1
        config = self.configs[(job.task_id, job.config)]
        config.trained += 1
        curve = self.tasks[job.task_id].curves[job.config]
        accuracy = curve.accuracy(config.trained)
        self.observations[job.task_id].append((now_s, job.config, accuracy))
        if self.gpus is not None:
            self.gpus.report(job_id, job.done, accuracy)
        return accuracy

    def job_done(self, job_id: int, now_s: float) -> Actions:
        """Job ``job_id`` ended (every worker done); its stage may end and the next start."""
        job = self.jobs[job_id]
        if job.done != job.iterations:
            raise ValueError(f"job {job_id} ended after {job.done} of {job.iterations} iterations")
        if job.finish_s is not None:
            raise ValueError(f"job {job_id} ended twice")
        job.finish_s = now_s
        return self._after_job(job, now_s)

    def quantum(self, now_s: float) -> Decision:
        """A time-sharing quantum boundary: the job manager may preempt."""
        if self.gpus is None:
            raise ValueError("quantum boundaries need a job manager")
        return self._decide(now_s, preempt=True)

    @property
    def finished(self) -> bool:
        """Whether every task has ended."""
        return len(self.runs) == len(self.tasks) and all(
            run.finish_s is not None for run in self.runs.values()
        )

    # ---- decisions ----------------------------------------------------------------------------

    def _after_job(self, job: JobRun, now_s: float) -> Actions:
        """What starts after a job ends: its GPUs go to waiting jobs; if it was its stage's
        last, the stage ends and successive halving starts the next with the survivors."""
        actions = Actions()
        if self.gpus is not None:
            self.gpus.finish(job.job_id, now_s)
            actions.gpu.append(self._decide(now_s, preempt=False))
        stage = self.stages[job.stage_id]
        task = self.tasks[stage.task_id]
        if task.asynchronous:
            actions.extend(self._after_rung_job(task, stage, job, now_s))
            return actions
        if any(self.jobs[j].finish_s is None for j in stage.job_ids):
            return actions
        stage.finish_s = now_s
        actions.finished_stages.append(stage)
        configs = [self.jobs[j].config for j in stage.job_ids]
        trained = {c: self.configs[(task.task_id, c)].trained for c in configs}
        following = survivors(task, stage.index, trained, stage.bracket)
        if following:
            actions.extend(
                self._start_stage(task, stage.index + 1, following, now_s, stage.bracket)
            )
            return actions
        self._brackets_running[task.task_id] -= 1
        if self._brackets_running[task.task_id] == 0:
            self.runs[task.task_id].finish_s = now_s
        return actions

    def _after_rung_job(self, task: HpoTask, stage: StageRun, job: JobRun, now_s: float) -> Actions:
        """ASHA: the job's configuration completed its rung; promote whom the rung now lets
        go, then end, lowest first, every rung that nothing can join any more and whose jobs
        are done (its stage ends with its last job), and the task with its last rung."""
        actions = Actions()
        search = self._search(task)
        rungs = self._rungs[task.task_id]
        rung = rungs[stage.index]
        trained = self.configs[(task.task_id, job.config)].trained
        rung.completed[job.config] = task.curves[job.config].accuracy(trained)
        promoted = search.rung_done(task, stage.index, job.config, rung.completed, rung.promoted)
        if promoted:
            rung.promoted += promoted
            following = rungs[stage.index + 1].stage
            if following is None:
                actions.extend(self._start_stage(task, stage.index + 1, promoted, now_s))
            else:
                actions.extend(self._add_jobs(task, following, promoted, now_s))
        fresh = search.more_configs(task)
        if fresh:
            actions.extend(self._add_jobs(task, rungs[0].stage, fresh, now_s))
        below_ended = search.exhausted(task)  # (the first rung takes new configurations)
        for rung in rungs:
            if not rung.ended and below_ended:
                jobs = [] if rung.stage is None else [self.jobs[j] for j in rung.stage.job_ids]
                if all(j.finish_s is not None for j in jobs):
                    rung.ended = True
                    if rung.stage is not None:
                        rung.stage.finish_s = max(j.finish_s for j in jobs)
                        actions.finished_stages.append(rung.stage)
            below_ended = rung.ended
        if below_ended:
            run = self.runs[task.task_id]
            run.finish_s = now_s
            # its stages overlap: see the module docstring
            reached = max(i for i, r in enumerate(rungs) if r.stage is not None)
            run.bound_s = max(rungs[0].stage.bound_s, self._shortest_chain_s(task, reached))
        return actions

    def _start_stage(
        self, task: HpoTask, index: int, configs: list[int], now_s: float, bracket: int = 0
    ) -> Actions:
        """Stage ``index`` of ``task``'s ``bracket`` starts now with ``configs``."""
        _, iterations = task.all_brackets[bracket].plan[index]
        stage = StageRun(self._new_id(), task.task_id, index, now_s, iterations,
                         iterations * task.model.compute_s, 0.0, bracket=bracket)  # fmt: skip
        self.stages[stage.stage_id] = stage
        self._joins[stage.stage_id] = []
        if task.asynchronous:
            self._rungs[task.task_id][index].stage = stage
        return self._add_jobs(task, stage, configs, now_s)

    @staticmethod
    def _search(task: HpoTask) -> RungSearch:
        """What decides an asynchronous task's rungs."""
        return task.search if task.search is not None else _ASHA

    @staticmethod
    def _phases(task: HpoTask, config: int) -> list[Flows]:
        """The coflows of one synchronisation of ``config``'s job, in the order they run."""
        return sync_phases(task.pattern, list(task.hosts[config]), task.model.sync_bytes)

    @staticmethod
    def _job_demand(task: HpoTask, phases: list[Flows], iterations: int) -> JobDemand:
        """What ``iterations`` iterations of a job synchronising in ``phases`` must compute and
        send."""
        return JobDemand(iterations, task.model.compute_s, [
            port_bytes([Flow(int(s), int(d), float(b)) for s, d, b in zip(*phase, strict=True)],
                       remaining=False)
            for phase in phases
        ], _shortest_remote_flow(phases[-1]) if phases else None)  # fmt: skip

    def _shortest_chain_s(self, task: HpoTask, last: int) -> float:
        """The least time any one of the task's configurations needs to train alone through
        stages ``0..last``: one of them did, if stage ``last`` ran."""
        return min(
            sum(job_lower_bound(self._job_demand(task, self._phases(task, c), n), self.link_bps)
                for _, n in task.plan[: last + 1])
            for c in range(task.n_configs)
        )  # fmt: skip

    def _add_jobs(
        self, task: HpoTask, stage: StageRun, configs: list[int], now_s: float
    ) -> Actions:
        """A job for each of ``configs`` joins ``stage`` now; the stage's bound (and a
        synchronous task's, the sum of its stages') takes them in."""
        actions = Actions()
        for config in configs:
            hosts = list(task.hosts[config])
            phases = self._phases(task, config)
            demand = self._job_demand(task, phases, stage.iterations)
            self._joins[stage.stage_id].append((now_s, demand))
            # (a search may add configurations as it goes)
            run = self.configs.setdefault((task.task_id, config), ConfigRun(task.task_id, config))
            trained = run.trained
            job = JobRun(
                self._new_id(), task.task_id, stage.stage_id, config, hosts, phases, trained,
                stage.iterations, now_s, demand.sync_bytes, job_lower_bound(demand, self.link_bps),
            )  # fmt: skip
            self.jobs[job.job_id] = job
            stage.job_ids.append(job.job_id)
            actions.started.append(job)
            if self.gpus is not None:
                job.holding = False  # until the manager gives it its GPUs
                self.gpus.submit(
                    # (its iterations are read by no built-in GPU policy; one of a user's may
                    # rank by those left: GpuJob.done is what the reports say)
                    GpuJob(job.job_id, len(hosts), now_s, stage.iterations, servers=hosts),
                    now_s,
                    accuracy=task.curves[config].accuracy(trained),
                )
        before = stage.bound_s
        stage.bound_s = staggered_stage_lower_bound(
            self._joins[stage.stage_id], stage.start_s, self.link_bps
        )
        if not task.asynchronous:
            sums = self._bracket_bounds[task.task_id]
            sums[stage.bracket] += stage.bound_s - before
            self.runs[task.task_id].bound_s = max(sums)
        if self.gpus is not None:
            actions.gpu.append(self._decide(now_s, preempt=False))
        return actions

    def _decide(self, now_s: float, preempt: bool) -> Decision:
        decision = self.gpus.schedule(now_s, preempt=preempt)
        for gpu_job in decision.stop:
            self.jobs[gpu_job.job_id].holding = False
        for gpu_job in decision.start:
            self.jobs[gpu_job.job_id].holding = True
        return decision

    # ---- results ------------------------------------------------------------------------------

    def gpu_stats(self, now_s: float) -> dict | None:
        """The job manager's statistics up to the end of the last task (``None`` without)."""
        if self.gpus is None:
            return None
        ends = [run.finish_s for run in self.runs.values() if run.finish_s is not None]
        return self.gpus.stats(max(ends, default=now_s))

    def port_busy(self) -> dict[str, float]:
        """Per host port (``"host3-out"``, ``"host3-in"``: workload host indices, from 0): the
        bytes its jobs' completed synchronisations put through it, at line rate, over the time
        during which at least one stage ran. Sorted busiest first."""
        load: dict[Port, float] = {}
        for job in self.jobs.values():
            for port, size in job.sync_bytes.items():
                load[port] = load.get(port, 0.0) + size * job.done
        window = _union_length(
            (s.start_s, s.finish_s) for s in self.stages.values() if s.finish_s is not None
        )
        if not window:
            return {}
        busy = {
            f"host{host}-{'out' if direction == EGRESS else 'in'}": 8.0
            * size
            / self.link_bps
            / window
            for (host, direction), size in load.items()
        }
        return dict(sorted(busy.items(), key=lambda kv: -kv[1]))

    def summary(self, now_s: float) -> dict:
        """The run's metrics, summarised (:func:`controller.metrics.summarise`) from the rows:
        SCT, JCT, time to each accuracy fraction, HPO completion and best identified (from the
        task's arrival), total SCT over total bound, stage count and the GPU statistics."""
        stages, tasks, configs = self.stage_rows(), self.task_rows(), self.config_rows()
        sct = [r["sct_s"] for r in stages if r["sct_s"] is not None]
        bound = sum(r["bound_s"] for r in stages if r["sct_s"] is not None)
        result = {
            "sct_s": summarise(sct),
            "sct_over_bound": sum(sct) / bound if bound else math.nan,
            "jct_s": summarise([r["jct_s"] for r in self.job_rows()]),
        }
        for fraction in self.fractions:
            key = f"time_to_{round(fraction * 100)}pct_s"
            result[key] = summarise([r[key] for r in configs])
        result["hpo_completion_s"] = summarise([r["hpo_completion_s"] for r in tasks])
        result["best_identified_s"] = summarise([r["best_identified_s"] for r in tasks])
        result["stages"] = len(stages)
        result["gpu"] = self.gpu_stats(now_s)
        result["port_bps"] = self.link_bps
        busiest, quarter = busiest_shares(self.port_busy().values())
        result["busiest_port_busy"], result["busiest_quarter_busy"] = busiest, quarter
        return result

    def stage_labels(self) -> dict[int, str]:
        """Stage id -> ``"task T stage I"`` (``"task T bracket B stage I"`` in a task of
        several brackets): the same stage under the same name wherever its id differs (testbed
        and simulator number stages as they start)."""
        labels = {}
        for s in self.stages.values():
            bracket = f"bracket {s.bracket} " if self.tasks[s.task_id].brackets else ""
            labels[s.stage_id] = f"task {s.task_id} {bracket}stage {s.index}"
        return labels

    def stage_rows(self) -> list[dict]:
        """One row per stage: times, SCT, compute floor, lower bound and SCT over it."""
        return [
            {
                "stage_id": s.stage_id,
                "task_id": s.task_id,
                "bracket": s.bracket,
                "index": s.index,
                "jobs": len(s.job_ids),
                "configs": " ".join(str(self.jobs[j].config) for j in s.job_ids),
                "iterations": s.iterations,
                "start_s": s.start_s,
                "finish_s": s.finish_s,
                "sct_s": s.sct_s,
                "compute_s": s.compute_s,
                "bound_s": s.bound_s,
                "ratio_to_bound": _ratio(s.sct_s, s.bound_s),
            }
            for s in self.stages.values()
        ]

    def job_rows(self) -> list[dict]:
        """One row per job: its configuration, iterations, times, JCT and its bound."""
        return [
            {
                "job_id": j.job_id,
                "task_id": j.task_id,
                "stage_id": j.stage_id,
                "config": j.config,
                "iterations": j.iterations,
                "start_s": j.start_s,
                "finish_s": j.finish_s,
                "jct_s": j.jct_s,
                "bound_s": j.bound_s,
                "ratio_to_bound": _ratio(j.jct_s, j.bound_s),
            }
            for j in self.jobs.values()
        ]

    def config_rows(self) -> list[dict]:
        """One row per configuration: iterations trained, the curve's asymptote
        (``final_accuracy``), the accuracy it converged to (``converged_accuracy``: at the end
        of its training, the last iteration it trained), and the time from its task's arrival
        until its observed accuracy first reached each fraction of the converged one.

        The converged accuracy is the end of training, not the curve's asymptote: a
        configuration trained for a finite budget (or stopped by the search) never reaches its
        asymptote, and measuring against it would drop every configuration that stops short
        of 90 % of it. Every configuration that trained at least one iteration reaches each
        fraction of its own end, so every one is counted."""
        first_reached: dict[tuple[int, int, float], float] = {}
        converged = {
            key: self.tasks[key[0]].curves[key[1]].accuracy(run.trained)
            for key, run in self.configs.items()
            if run.trained
        }
        for task_id, observed in self.observations.items():
            for time_s, config, accuracy in observed:
                for fraction in self.fractions:
                    key = (task_id, config, fraction)
                    # (1e-12: the converged accuracy is this very float at the last iteration)
                    target = fraction * converged[(task_id, config)] * (1.0 - 1e-12)
                    if key not in first_reached and accuracy >= target:
                        first_reached[key] = time_s
        rows = []
        for (task_id, config), run in self.configs.items():
            arrival = self.tasks[task_id].arrival_s
            row = {
                "task_id": task_id,
                "config": config,
                "trained": run.trained,
                "final_accuracy": self.tasks[task_id].curves[config].final_accuracy,
                "converged_accuracy": converged.get((task_id, config)),
            }
            for fraction in self.fractions:
                reached = first_reached.get((task_id, config, fraction))
                row[f"time_to_{round(fraction * 100)}pct_s"] = (
                    None if reached is None else reached - arrival
                )
            rows.append(row)
        return rows

    def task_rows(self) -> list[dict]:
        """One row per task: HPO completion time and its bound, the configuration it ends with
        (the most accurate of its last stage, of every bracket's last stage with several) and
        when that one was identified (from then on its observed accuracy is the highest of the
        task), all from the task's arrival."""
        last: dict[tuple[int, int], StageRun] = {}  # (task, bracket) -> its last stage
        for stage in self.stages.values():
            key = (stage.task_id, stage.bracket)
            if key not in last or stage.index > last[key].index:
                last[key] = stage
        rows = []
        for task_id, task in self.tasks.items():
            run = self.runs.get(task_id)
            winner = identified = completion = None
            if run is not None and run.finish_s is not None:
                finals = [self.jobs[j].config for (t, _), stage in last.items() if t == task_id
                          for j in stage.job_ids]  # fmt: skip
                trained = {c: self.configs[(task_id, c)].trained for c in finals}
                winner = max(finals, key=lambda c: (task.curves[c].accuracy(trained[c]), -c))
                found = best_identified_s(self.observations[task_id], winner)
                identified = None if found is None else found - run.arrival_s
                completion = run.finish_s - run.arrival_s
            rows.append(
                {
                    "task_id": task_id,
                    "arrival_s": task.arrival_s,
                    "start_s": None if run is None else run.start_s,
                    "hpo_completion_s": completion,
                    "bound_s": None if run is None else run.bound_s,
                    "ratio_to_bound": _ratio(completion, None if run is None else run.bound_s),
                    "best_config": winner,
                    "best_identified_s": identified,
                }
            )
        return rows


_ASHA = Asha()


def busiest_shares(shares: Iterable[float]) -> tuple[float, float]:
    """The busiest port's share and the mean of the busiest quarter's (NaN without ports)."""
    ordered = sorted(shares, reverse=True)
    if not ordered:
        return math.nan, math.nan
    quarter = ordered[: max(1, len(ordered) // 4)]
    return ordered[0], sum(quarter) / len(quarter)


def _union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by the ``(start, end)`` intervals."""
    return sum(end - start for start, end in merge_intervals(intervals))


def _ratio(measured: float | None, bound: float | None) -> float:
    """``measured / bound``, NaN while either is missing or the bound is zero."""
    if measured is None or not bound:
        return math.nan
    return measured / bound
