"""Run generated HPO workloads (``workloads.hpo``) in the simulator.

Every job alternates compute (the model's per-iteration time) and its synchronisation coflow;
when the last job of a stage finishes its iterations, the stage ends, the task keeps the best
``ceil(n / eta)`` configurations by accuracy and starts the next stage with them. The policy sees
the jobs (progress, bytes per iteration per port) and stages, like the controller's registry
gives them.

GPUs: without a job manager every job computes as soon as it can. With one
(:class:`workloads.gpu.GpuManager`, the one the testbed uses too) a job holds one GPU on each of
its hosts and only computes while it holds them: the manager decides at every quantum and when
a job arrives or finishes; a job that loses its GPUs finishes its current iteration (compute and
synchronisation) and then waits, like a worker paused with SIGUSR1; a resumed job first spends
the manager's ``resume_cost_s``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from controller.model import Flow as ModelFlow
from controller.model import Job, Stage, port_bytes
from simulator.engine import CoflowRecord, CoflowSpec, Simulator
from workloads.gpu import GpuJob, GpuManager
from workloads.hpo import HpoTask, survivors, sync_flows, task_rows


@dataclass
class JobRun:
    job_id: int
    task_id: int
    stage_id: int
    config: int
    start_s: float
    iterations: int  # to do in this stage
    done: int = 0
    finish_s: float | None = None
    compute_s: float = 0.0
    holding: bool = True  # holds its GPUs (always, without a job manager)
    in_iteration: bool = False  # computing or synchronising
    resume_delay_s: float = 0.0  # restoring its state before its next compute

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.start_s


@dataclass
class StageRun:
    stage_id: int
    task_id: int
    index: int
    start_s: float
    job_ids: list[int] = field(default_factory=list)
    finish_s: float | None = None
    compute_s: float = 0.0  # compute time of its longest job: a floor under its SCT
    network_floor_s: float = 0.0  # all its bytes through its busiest port
    bound_s: float = 0.0  # lower bound on its SCT (see _start_stage)

    @property
    def sct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.start_s


@dataclass
class ConfigRun:
    task_id: int
    config: int
    trained: int = 0  # iterations completed over all stages
    reached_s: dict[float, float] = field(default_factory=dict)  # fraction -> time


class HpoDriver:
    """Drives HPO tasks through a :class:`~simulator.engine.Simulator`.

    Args:
        sim: the simulator (its ``jobs_and_stages`` is set to this driver's view).
        tasks: the workload.
        fractions: accuracy fractions whose time-to-reach is recorded (of converged accuracy).
        gpus: the job manager sharing the GPUs (servers = the fabric's hosts), or ``None``.
    """

    def __init__(
        self,
        sim: Simulator,
        tasks: list[HpoTask],
        fractions=(0.9, 0.95),
        gpus: GpuManager | None = None,
    ) -> None:
        if gpus is not None and gpus.servers != sim.fabric.n_hosts:
            raise ValueError(
                f"the job manager has {gpus.servers} servers, the fabric {sim.fabric.n_hosts} hosts"
            )
        self.sim = sim
        self.gpus = gpus
        self.observations: dict[int, list[tuple[float, int, float]]] = {
            t.task_id: [] for t in tasks
        }
        self._ticking = False
        self.tasks = {t.task_id: t for t in tasks}
        self.fractions = tuple(fractions)
        self.jobs: dict[int, JobRun] = {}
        self.stages: dict[int, StageRun] = {}
        self.configs: dict[tuple[int, int], ConfigRun] = {}
        self.task_finish_s: dict[int, float] = {}
        self._model_jobs: dict[int, Job] = {}
        self._model_stages: dict[int, Stage] = {}
        self._ids = itertools.count(1)
        self._coflow_job: dict[int, int] = {}
        sim.jobs_and_stages = lambda: (self._model_jobs, self._model_stages)
        sim.on_coflow_done(self._coflow_done)
        for task in tasks:
            for c in range(task.n_configs):
                self.configs[(task.task_id, c)] = ConfigRun(task.task_id, c)
            sim.at(task.arrival_s, lambda task=task: self._start_stage(task, 0, None))

    # ---- stages and jobs -----------------------------------------------------------------------

    def _start_stage(self, task: HpoTask, index: int, configs: list[int] | None) -> None:
        keep, iterations = task.plan[index]
        if configs is None:
            configs = list(range(task.n_configs))
        stage = StageRun(next(self._ids), task.task_id, index, self.sim.now_s)
        self.stages[stage.stage_id] = stage
        self._model_stages[stage.stage_id] = Stage(
            stage.stage_id, [], task.task_id, 1.0, stage.start_s
        )
        floor = {}
        sync_alone = 0.0  # bytes on the busiest port of the largest job's synchronisation
        for config in configs:
            job = JobRun(
                next(self._ids),
                task.task_id,
                stage.stage_id,
                config,
                self.sim.now_s,
                iterations,
                compute_s=task.model.compute_s,
            )
            self.jobs[job.job_id] = job
            stage.job_ids.append(job.job_id)
            src, dst, size = sync_flows(task.pattern, task.hosts[config], task.model.sync_bytes)
            flows = [
                ModelFlow(int(s), int(d), float(b)) for s, d, b in zip(src, dst, size, strict=True)
            ]
            per_iteration = port_bytes(flows, remaining=False)
            self._model_jobs[job.job_id] = Job(
                job.job_id, per_iteration, iterations, 0, stage.stage_id, task.task_id, job.start_s
            )
            self._model_stages[stage.stage_id].job_ids.append(job.job_id)
            for port, b in per_iteration.items():
                floor[port] = floor.get(port, 0.0) + b * iterations
            sync_alone = max(sync_alone, max(per_iteration.values(), default=0.0))
            if self.gpus is None:
                self._compute(job)
            else:
                job.holding = False
                curve = task.curves[config]
                trained = self.configs[(task.task_id, config)].trained
                self.gpus.submit(
                    GpuJob(
                        job.job_id,
                        len(task.hosts[config]),
                        self.sim.now_s,
                        servers=list(task.hosts[config]),
                    ),
                    self.sim.now_s,
                    accuracy=curve.accuracy(trained),
                )
        if self.gpus is not None:
            self._apply(self.gpus.schedule(self.sim.now_s, preempt=False))
            if not self._ticking:
                self._ticking = True
                self.sim.at(self.sim.now_s + self.gpus.quantum_s, self._tick)
        bps = self.sim.fabric.host_bps
        stage.compute_s = iterations * task.model.compute_s
        # Lower bounds on the SCT: every job alone needs iterations x (compute + its sync
        # alone), and the stage's busiest port must carry all of the stage's bytes.
        stage.network_floor_s = 8.0 * max(floor.values(), default=0.0) / bps
        stage.bound_s = max(
            iterations * (task.model.compute_s + 8.0 * sync_alone / bps), stage.network_floor_s
        )
        self.sim.request_reorder()

    def _compute(self, job: JobRun) -> None:
        job.in_iteration = True
        delay, job.resume_delay_s = job.resume_delay_s, 0.0
        self.sim.at(self.sim.now_s + delay + job.compute_s, lambda: self._sync(job))

    # ---- GPUs ----------------------------------------------------------------------------------

    def _tick(self) -> None:
        """A quantum boundary: the job manager may preempt."""
        if len(self.task_finish_s) == len(self.tasks):
            self._ticking = False
            return
        self._apply(self.gpus.schedule(self.sim.now_s, preempt=True))
        self.sim.at(self.sim.now_s + self.gpus.quantum_s, self._tick)

    def _apply(self, decision) -> None:
        for gpu_job in decision.stop:
            self.jobs[gpu_job.job_id].holding = False  # it stops after its current iteration
        for gpu_job in decision.start:
            job = self.jobs[gpu_job.job_id]
            job.holding = True
            if gpu_job.job_id in decision.delayed:
                job.resume_delay_s = self.gpus.resume_cost_s
            if not job.in_iteration:
                self._compute(job)

    def _sync(self, job: JobRun) -> None:
        task = self.tasks[job.task_id]
        src, dst, size = sync_flows(task.pattern, task.hosts[job.config], task.model.sync_bytes)
        coflow_id = next(self._ids)
        self._coflow_job[coflow_id] = job.job_id
        self.sim.release(CoflowSpec(coflow_id, src, dst, size, job.job_id, job.stage_id))

    def _coflow_done(self, record: CoflowRecord) -> None:
        job_id = self._coflow_job.pop(record.coflow_id, None)
        if job_id is None:
            return
        job = self.jobs[job_id]
        job.done += 1
        job.in_iteration = False
        self._model_jobs[job_id].iterations_done = job.done
        config = self.configs[(job.task_id, job.config)]
        config.trained += 1
        curve = self.tasks[job.task_id].curves[job.config]
        accuracy = curve.accuracy(config.trained)
        self.observations[job.task_id].append((self.sim.now_s, job.config, accuracy))
        for fraction in self.fractions:
            if fraction not in config.reached_s and config.trained >= curve.iterations_to(fraction):
                config.reached_s[fraction] = self.sim.now_s
        if self.gpus is not None:
            self.gpus.report(job_id, job.done, accuracy)
        if job.done < job.iterations:
            if job.holding:
                self._compute(job)
            return
        job.finish_s = self.sim.now_s
        del self._model_jobs[job_id]
        if self.gpus is not None:
            self.gpus.finish(job_id, self.sim.now_s)
            self._apply(self.gpus.schedule(self.sim.now_s, preempt=False))
        stage = self.stages[job.stage_id]
        if all(self.jobs[j].finish_s is not None for j in stage.job_ids):
            self._end_stage(stage)

    def _end_stage(self, stage: StageRun) -> None:
        stage.finish_s = self.sim.now_s
        self._model_stages.pop(stage.stage_id, None)
        task = self.tasks[stage.task_id]
        if stage.index + 1 >= len(task.plan):
            self.task_finish_s[task.task_id] = self.sim.now_s
            self.sim.request_reorder()
            return
        configs = [self.jobs[j].config for j in stage.job_ids]
        trained = {c: self.configs[(task.task_id, c)].trained for c in configs}
        self._start_stage(task, stage.index + 1, survivors(task, stage.index, trained))

    # ---- results -------------------------------------------------------------------------------

    def gpu_stats(self) -> dict | None:
        """The job manager's statistics up to the end of the last task (``None`` without)."""
        if self.gpus is None:
            return None
        return self.gpus.stats(max(self.task_finish_s.values(), default=self.sim.now_s))

    def task_rows(self) -> list[dict]:
        """Per HPO task: see :func:`workloads.hpo.task_row`."""
        return task_rows(
            self.tasks,
            self.stages.values(),
            self.jobs,
            lambda t, c: self.configs[(t, c)].trained,
            self.task_finish_s,
            self.observations,
        )

    def stage_rows(self) -> list[dict]:
        rows = []
        for stage in self.stages.values():
            floor = stage.compute_s + stage.network_floor_s
            rows.append(
                {
                    "stage_id": stage.stage_id,
                    "task_id": stage.task_id,
                    "index": stage.index,
                    "jobs": len(stage.job_ids),
                    "start_s": stage.start_s,
                    "finish_s": stage.finish_s,
                    "sct_s": stage.sct_s,
                    "compute_s": stage.compute_s,
                    "isolation_bound_s": floor,
                    "ratio_to_bound": (stage.sct_s / floor) if stage.sct_s and floor else math.nan,
                }
            )
        return rows

    def job_rows(self) -> list[dict]:
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
            }
            for j in self.jobs.values()
        ]

    def config_rows(self) -> list[dict]:
        rows = []
        for (task_id, config), run in self.configs.items():
            arrival = self.tasks[task_id].arrival_s
            row = {
                "task_id": task_id,
                "config": config,
                "trained": run.trained,
                "final_accuracy": self.tasks[task_id].curves[config].final_accuracy,
            }
            for fraction in self.fractions:
                reached = run.reached_s.get(fraction)
                row[f"time_to_{round(fraction * 100)}pct_s"] = (
                    None if reached is None else reached - arrival
                )
            rows.append(row)
        return rows
