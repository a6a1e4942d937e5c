"""Run generated HPO workloads (``workloads.hpo``) in the simulator.

Every job alternates compute (the model's per-iteration time) and its synchronisation: one
coflow (ring all-reduce) or two one after the other (a parameter server's push, then pull).
Stages, survivors, accuracies and result rows are the HPO core's (:mod:`workloads.hpo_core`,
the testbed's too): this driver only moves simulated time and bytes and tells the core when an
iteration or a job ends. The policy sees the jobs (progress, bytes per iteration per port, and
the accuracy each iteration reached, as a job manager reports it to the controller's registry)
and stages, like the controller's registry gives them.

GPUs: without a job manager every job computes as soon as it can. With one
(:class:`workloads.gpu.GpuManager`, the one the testbed uses too) a job holds one GPU on each of
its hosts and only computes while it holds them: the manager decides at every quantum and when
a job arrives or finishes; a job that loses its GPUs finishes its current iteration (compute and
synchronisation) and then waits, like a worker paused with SIGUSR1; a resumed job first spends
the manager's ``resume_cost_s``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from controller.model import Job, JobTable, Stage, accuracy_report
from simulator.engine import CoflowRecord, CoflowSpec, Simulator
from workloads.gpu import Decision, GpuManager
from workloads.hpo import HpoTask
from workloads.hpo_core import FRACTIONS, Actions, HpoCore, JobRun


@dataclass
class _Progress:
    """What the simulator tracks of a job besides the core's state."""

    in_iteration: bool = False  # computing or synchronising
    resume_delay_s: float = 0.0  # starting up or restoring its state before its next compute


class HpoDriver:
    """Drives HPO tasks through a :class:`~simulator.engine.Simulator`.

    Args:
        sim: the simulator (its ``jobs_and_stages`` is set to this driver's view).
        tasks: the workload.
        fractions: accuracy fractions whose time-to-reach is recorded (of converged accuracy).
        gpus: the job manager sharing the GPUs (servers = the fabric's hosts), or ``None``.
        job_startup_s: seconds from a job's start until it can compute (launching its
            workers and connecting them; the testbed's is measured by ``hpo-calibrate``).
    """

    def __init__(
        self,
        sim: Simulator,
        tasks: list[HpoTask],
        fractions=FRACTIONS,
        gpus: GpuManager | None = None,
        job_startup_s: float = 0.0,
    ) -> None:
        if not job_startup_s >= 0:
            raise ValueError("job_startup_s must be >= 0")
        if gpus is not None and gpus.servers != sim.fabric.n_hosts:
            raise ValueError(
                f"the job manager has {gpus.servers} servers, the fabric {sim.fabric.n_hosts} hosts"
            )
        self.sim = sim
        self.gpus = gpus
        self.job_startup_s = job_startup_s
        # stages, jobs and coflows share one id sequence
        self._ids = itertools.count(1)
        self.core = HpoCore(tasks, sim.fabric.link_bps, gpus, fractions, self._ids.__next__)
        self.tasks, self.jobs, self.stages = self.core.tasks, self.core.jobs, self.core.stages
        self._ticking = False
        self._progress: dict[int, _Progress] = {}
        self._model_jobs: dict[int, Job] = {}
        self._model_stages: dict[int, Stage] = {}
        self._coflow_job: dict[int, tuple[int, int]] = {}  # coflow -> (job, phase)
        self._stage_listeners: list[Callable[[], None]] = []
        self.n_stages = sum(task.n_stages for task in tasks)  # stages the workload will run
        sim.jobs_and_stages = lambda: (self._model_jobs, self._model_stages)
        # replaced whenever a stage or a job comes or goes (ClusterState.stages_version)
        self._stages_version = object()
        sim.stages_version = lambda: self._stages_version
        # each job's numbers, a row per job id, what the states' job table reads (Beamer's
        # reorders read no job object, JPAS reads every job's progress and arrival): live
        # while the job runs; a job that ended has none left (a budget and iterations done of
        # 1, as for a job the state does not have). The table is kept until a job comes or
        # goes; a state reads it during its reorder (the rows change as the jobs do).
        self._numbers = JobTable.empty_numbers(16)
        self._table: JobTable | None = None
        sim.job_table = self._job_table
        sim.on_coflow_done(self._coflow_done)
        for task in tasks:
            sim.at(task.arrival_s, lambda task=task: self._arrive(task.task_id))

    @property
    def task_finish_s(self) -> dict[int, float]:
        """Task id -> when its last stage ended, for the tasks that ended."""
        return {t: run.finish_s for t, run in self.core.runs.items() if run.finish_s is not None}

    # ---- events --------------------------------------------------------------------------------

    def _arrive(self, task_id: int) -> None:
        self._carry_out(self.core.arrive(task_id, self.sim.now_s))

    def _carry_out(self, actions: Actions) -> None:
        """Start the jobs the core started, then apply its GPU decisions."""
        if actions.started:
            self._stages_version = object()
        for job in actions.started:
            self._progress[job.job_id] = _Progress(resume_delay_s=self.job_startup_s)
            if job.stage_id not in self._model_stages:
                stage = self.core.stages[job.stage_id]
                self._model_stages[job.stage_id] = Stage(
                    stage.stage_id, [], stage.task_id, 1.0, stage.start_s
                )
            self._model_stages[job.stage_id].job_ids.append(job.job_id)
            self._model_jobs[job.job_id] = Job(
                job.job_id, job.sync_bytes, job.iterations, 0, job.stage_id, job.task_id,
                job.start_s,
            )  # fmt: skip
            self._room_for(job.job_id)
            self._numbers[job.job_id] = (job.job_id, job.iterations, 0, job.start_s,
                                         job.stage_id, True, True)  # fmt: skip
            self._table = None
            if self.gpus is None:
                self._compute(job)
        for decision in actions.gpu:
            self._apply(decision)
        if actions.started:
            if self.gpus is not None and not self._ticking:
                self._ticking = True
                self.sim.at(self.sim.now_s + self.gpus.quantum_s, self._tick)
            self.sim.request_reorder()

    def _room_for(self, job_id: int) -> None:
        """Rows up to ``job_id``'s (twice as many as before, at least)."""
        if job_id >= len(self._numbers):
            more = JobTable.empty_numbers(max(job_id + 1, 2 * len(self._numbers)))
            more[: len(self._numbers)] = self._numbers
            self._numbers, self._table = more, None

    def _job_table(self) -> JobTable:
        """The running jobs' numbers, for the jobs dict the states get."""
        if self._table is None:
            running = np.flatnonzero(self._numbers["live"])
            self._table = JobTable(running, running, self._numbers, self._model_jobs, True)
        return self._table

    def _compute(self, job: JobRun) -> None:
        progress = self._progress[job.job_id]
        progress.in_iteration = True
        delay, progress.resume_delay_s = progress.resume_delay_s, 0.0
        compute_s = self.tasks[job.task_id].model.compute_s
        self.sim.at(self.sim.now_s + delay + compute_s, lambda: self._sync(job))

    def _tick(self) -> None:
        """A quantum boundary: the job manager may preempt."""
        if self.core.finished:
            self._ticking = False
            return
        self._apply(self.core.quantum(self.sim.now_s))
        self.sim.at(self.sim.now_s + self.gpus.quantum_s, self._tick)

    def _apply(self, decision: Decision) -> None:
        """Jobs that lose their GPUs stop after their current iteration (the core cleared
        their ``holding``); jobs that get them compute, after a resume if they pay one."""
        for gpu_job in decision.start:
            job = self.core.jobs[gpu_job.job_id]
            progress = self._progress[job.job_id]
            if gpu_job.job_id in decision.delayed:
                progress.resume_delay_s = max(progress.resume_delay_s, self.gpus.resume_cost_s)
            if not progress.in_iteration:
                self._compute(job)

    def _sync(self, job: JobRun, phase: int = 0) -> None:
        """Release coflow ``phase`` of the job's synchronisation."""
        flows = job.phases[phase]
        coflow_id = next(self._ids)
        self._coflow_job[coflow_id] = (job.job_id, phase)
        self.sim.release(CoflowSpec(coflow_id, *flows, job.job_id, job.stage_id))

    def _coflow_done(self, record: CoflowRecord) -> None:
        owner = self._coflow_job.pop(record.coflow_id, None)
        if owner is None:
            return
        job_id, phase = owner
        if phase + 1 < len(self.core.jobs[job_id].phases):
            self._sync(self.core.jobs[job_id], phase + 1)  # the pull follows the push
            return
        now = self.sim.now_s
        job = self.core.jobs[job_id]
        self._progress[job_id].in_iteration = False
        accuracy = self.core.iteration_done(job_id, now)
        model_job = self._model_jobs[job_id]
        model_job.iterations_done = job.done
        # (the accuracy with that many iterations done, as a progress report gives it: JPAS'
        # maif reading ranks by its gain; the job table holds no accuracy, so it stays as is)
        for name, value in accuracy_report(model_job, accuracy, job.done).items():
            setattr(model_job, name, value)
        self._numbers["done"][job_id] = job.done
        if job.done < job.iterations:
            if job.holding:
                self._compute(job)
            return
        del self._model_jobs[job_id]
        numbers = self._numbers
        numbers["budget"][job_id] = numbers["done"][job_id] = 1
        numbers["live"][job_id], self._table = False, None
        self._stages_version = object()
        actions = self.core.job_done(job_id, now)
        for stage in actions.finished_stages:
            self._model_stages.pop(stage.stage_id, None)
            self.sim.request_reorder()
            for listener in self._stage_listeners:
                listener()
        self._carry_out(actions)

    def on_stage_done(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever a stage ends (e.g. to show progress)."""
        self._stage_listeners.append(listener)

    # ---- results: the core's ------------------------------------------------------------------

    def gpu_stats(self) -> dict | None:
        """The job manager's statistics up to the end of the last task (``None`` without)."""
        return self.core.gpu_stats(self.sim.now_s)

    def stage_rows(self) -> list[dict]:
        """See :meth:`workloads.hpo_core.HpoCore.stage_rows`."""
        return self.core.stage_rows()

    def job_rows(self) -> list[dict]:
        """See :meth:`workloads.hpo_core.HpoCore.job_rows`."""
        return self.core.job_rows()

    def config_rows(self) -> list[dict]:
        """See :meth:`workloads.hpo_core.HpoCore.config_rows`."""
        return self.core.config_rows()

    def task_rows(self) -> list[dict]:
        """See :meth:`workloads.hpo_core.HpoCore.task_rows`."""
        return self.core.task_rows()
