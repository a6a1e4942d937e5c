"""The HPO driver of the testbed: successive halving with real worker processes on hosts.

It runs the same workload as the simulator (:func:`workloads.hpo.generate`): for every stage of
every task it registers the stage and its jobs with the controller (REST), starts one
:mod:`workloads.worker` process per rank on the job's hosts (``host.popen``), follows their JSON
lines, reports each job's progress to the controller, and at the end of a stage keeps the best
configurations by accuracy and starts the next stage with them (resuming their iteration count).
Everything it starts it stops by handle, also on errors.

With a job manager (:class:`workloads.gpu.GpuManager`, the one the simulator uses too) every
host has emulated GPUs: a job's workers start paused (``--start-paused``) and compute only while
the manager gives the job its GPUs; at every quantum boundary, and when a job arrives or
finishes, the manager decides, and the driver pauses (SIGUSR1) or resumes (SIGUSR2) every
worker of the jobs it names. A paused worker stops after its current iteration and sends
nothing until it is resumed; its progress is kept.

Hosts are anything with ``popen(argv, **kwargs)`` and an ``IP()`` (Mininet hosts); the
controller client only runs in the root namespace.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from workloads.client import ControllerClient
from workloads.gpu import Decision, GpuJob, GpuManager
from workloads.hpo import HpoTask, survivors, sync_flows, task_rows

ROOT = Path(__file__).resolve().parents[1]
BASE_PORT = 20000
PORTS_PER_JOB = 8


@dataclass
class TestbedJob:
    job_id: int
    task_id: int
    stage_id: int
    config: int
    start_iteration: int
    target_iteration: int
    start_s: float
    procs: list = field(default_factory=list)
    iteration: int = 0
    finish_s: float | None = None
    ranks_done: set[int] = field(default_factory=set)
    ranks_last: set[int] = field(default_factory=set)  # ranks that reported the last iteration
    ready: set[int] = field(default_factory=set)  # ranks that said "ready" (signals are safe)
    holding: bool = True  # holds its GPUs (always, without a job manager)

    @property
    def base_port(self) -> int:
        return BASE_PORT + PORTS_PER_JOB * self.job_id


@dataclass
class TestbedStage:
    stage_id: int
    task_id: int
    index: int
    start_s: float
    job_ids: list[int] = field(default_factory=list)
    finish_s: float | None = None


class TestbedDriver:
    """Runs HPO tasks on testbed hosts under the controller's scheduling.

    Args:
        hosts: the testbed hosts, host index i of the workload is ``hosts[i]``.
        client: REST client of the controller.
        tasks: the workload (``workloads.hpo.generate``; its profiles already scaled).
        progress: called with a one-line status now and then.
        gpus: the job manager sharing the hosts' GPUs (servers = ``hosts``), or ``None``: every
            job computes as soon as it starts.
        log_dir: folder for every worker's stderr (``None``: discarded).
    """

    def __init__(
        self,
        hosts: list,
        client: ControllerClient,
        tasks: list[HpoTask],
        progress=print,
        gpus: GpuManager | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.log_dir = log_dir
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
        if gpus is not None and gpus.servers != len(hosts):
            raise ValueError(f"the job manager has {gpus.servers} servers for {len(hosts)} hosts")
        self.gpus = gpus
        self.observations: dict[int, list[tuple[float, int, float]]] = {
            t.task_id: [] for t in tasks
        }
        self.signals_sent = 0
        self.pauses = 0  # worker pauses that ended in a resume
        self.bytes_while_paused = 0  # bytes a worker sent between "paused" and "resumed"
        self._paused_at: dict[tuple[int, int], tuple[int, int]] = {}  # -> (iteration, bytes)
        self.hosts = hosts
        self.client = client
        self.tasks = {t.task_id: t for t in tasks}
        self.progress = progress
        self.jobs: dict[int, TestbedJob] = {}
        self.stages: dict[int, TestbedStage] = {}
        self.trained: dict[tuple[int, int], int] = {}
        self.reached: dict[tuple[int, int, float], float] = {}
        self.task_finish_s: dict[int, float] = {}
        self.cct_s: list[float] = []  # one synchronisation (coflow) per job iteration
        self.t0 = time.time()
        self._next_id = 1
        self._buffers: dict[int, bytes] = {}
        self._owner: dict[int, tuple[TestbedJob, int]] = {}  # fd -> (job, rank)

    def _log_path(self, job: TestbedJob, rank: int) -> Path:
        return self.log_dir / f"worker-{job.job_id}-{rank}.log"

    def _log(self, job: TestbedJob, rank: int):
        """Where a worker's stderr goes: a file of ``log_dir`` (closed by the caller after
        starting the worker, which keeps its own descriptor) or nowhere."""
        if self.log_dir is None:
            return subprocess.DEVNULL
        return open(self._log_path(job, rank), "wb")  # noqa: SIM115

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def now(self) -> float:
        return time.time() - self.t0

    # ---- stages -------------------------------------------------------------------------------

    def start_stage(self, task: HpoTask, index: int, configs: list[int]) -> None:
        stage = TestbedStage(self._id(), task.task_id, index, self.now())
        self.stages[stage.stage_id] = stage
        self.client.put_task(task.task_id, name=f"task{task.task_id}")
        self.client.put_stage(stage.stage_id, task_id=task.task_id)
        target = sum(iterations for _, iterations in task.plan[: index + 1])
        for config in configs:
            done = self.trained.setdefault((task.task_id, config), 0)
            job = TestbedJob(
                self._id(), task.task_id, stage.stage_id, config, done, target, self.now()
            )
            self.jobs[job.job_id] = job
            stage.job_ids.append(job.job_id)
            self.start_job(task, job)
        if self.gpus is not None:
            self.apply(self.gpus.schedule(self.now(), preempt=False))
        self.progress(
            f"[{self.now():7.1f} s] task {task.task_id} stage {index}: "
            f"{len(configs)} jobs to iteration {target}"
        )

    def start_job(self, task: HpoTask, job: TestbedJob) -> None:
        hosts = [self.hosts[i] for i in task.hosts[job.config]]
        src, dst, size = sync_flows(task.pattern, list(range(len(hosts))), task.model.sync_bytes)
        flows = [
            {"src": hosts[s].IP(), "dst": hosts[d].IP(), "bytes": float(b)}
            for s, d, b in zip(src, dst, size, strict=True)
        ]
        ports = [job.base_port + r for r in range(len(hosts))]
        self.client.put_job(
            job.job_id,
            stage_id=job.stage_id,
            task_id=job.task_id,
            flows=flows,
            tcp_ports=ports,
            iteration_budget=job.target_iteration - job.start_iteration,
            iterations_done=0,
        )
        curve = task.curves[job.config]
        if self.gpus is not None:
            self.gpus.submit(
                GpuJob(job.job_id, len(hosts), self.now(), servers=list(task.hosts[job.config])),
                self.now(),
                accuracy=curve.accuracy(job.start_iteration),
            )
        addresses = ",".join(h.IP() for h in hosts)
        if self.gpus is not None:
            job.holding = False  # until the manager gives it its GPUs
        for rank, host in enumerate(hosts):
            argv = [
                sys.executable,
                "-m",
                "workloads.worker",
                "--job",
                str(job.job_id),
                "--rank",
                str(rank),
                "--hosts",
                addresses,
                "--pattern",
                task.pattern,
                "--base-port",
                str(job.base_port),
                "--bytes",
                str(task.model.sync_bytes),
                "--compute-s",
                str(task.model.compute_s),
                "--iterations",
                str(job.target_iteration),
                "--start-iteration",
                str(job.start_iteration),
                "--curve",
                str(curve.final_accuracy),
                str(curve.tau_iterations),
            ]
            if self.gpus is not None:
                argv.append("--start-paused")
            log = self._log(job, rank)
            try:
                proc = host.popen(
                    argv,
                    cwd=str(ROOT),
                    stdout=subprocess.PIPE,
                    stderr=log,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                )
            finally:
                if log is not subprocess.DEVNULL:
                    log.close()
            job.procs.append(proc)
            self._owner[proc.stdout.fileno()] = (job, rank)
            self._buffers[proc.stdout.fileno()] = b""

    # ---- events -------------------------------------------------------------------------------

    def run(self, timeout_s: float = 3600) -> None:
        """Run every task to completion (or raise after ``timeout_s``)."""
        pending = sorted(self.tasks.values(), key=lambda t: t.arrival_s)
        boundary = self.gpus.quantum_s if self.gpus is not None else None
        try:
            while pending or any(j.finish_s is None for j in self.jobs.values()):
                while pending and pending[0].arrival_s <= self.now():
                    task = pending.pop(0)
                    self.start_stage(task, 0, list(range(task.n_configs)))
                if self.now() > timeout_s:
                    stuck = [
                        f"job {j.job_id} at iteration {j.iteration}/{j.target_iteration}"
                        f"{'' if j.holding else ' (suspended)'}, ranks ready "
                        f"{sorted(j.ready)} done {sorted(j.ranks_done)}"
                        for j in self.jobs.values()
                        if j.finish_s is None
                    ]
                    raise TimeoutError(
                        f"HPO did not finish in {timeout_s} s; unfinished: {'; '.join(stuck)}"
                    )
                if boundary is not None and self.now() >= boundary:
                    self.apply(self.gpus.schedule(self.now(), preempt=True))
                    boundary = self.now() + self.gpus.quantum_s
                self.poll(0.2)
        finally:
            self.stop_all()

    def apply(self, decision: Decision) -> None:
        """Pause the workers of the jobs that lose their GPUs, resume those that get them.

        Only workers that said ``ready`` get a signal (before that they may not handle it yet
        and they start paused anyway); a worker that gets ready later is resumed then if its
        job holds its GPUs."""
        for gpu_jobs, holding in ((decision.stop, False), (decision.start, True)):
            for gpu_job in gpu_jobs:
                job = self.jobs[gpu_job.job_id]
                job.holding = holding
                for rank in job.ready:
                    self.signal(job, rank)

    def signal(self, job: TestbedJob, rank: int) -> None:
        proc = job.procs[rank]
        # not once it did its last iteration: it is exiting
        if rank not in job.ranks_last and rank not in job.ranks_done and proc.poll() is None:
            proc.send_signal(signal.SIGUSR2 if job.holding else signal.SIGUSR1)
            self.signals_sent += 1

    def poll(self, timeout_s: float) -> None:
        fds = list(self._owner)
        if not fds:
            time.sleep(timeout_s)
            return
        ready, _, _ = select.select(fds, [], [], timeout_s)
        for fd in ready:
            chunk = os.read(fd, 65536)
            job, rank = self._owner[fd]
            if not chunk:  # the worker exited
                del self._owner[fd]
                self._buffers.pop(fd, None)
                code = job.procs[rank].wait()
                if job.finish_s is None and code != 0:
                    where = f"; its stderr: {self._log_path(job, rank)}" if self.log_dir else ""
                    raise RuntimeError(
                        f"worker {rank} of job {job.job_id} failed (exit {code}){where}"
                    )
                continue
            data = self._buffers[fd] + chunk
            *lines, self._buffers[fd] = data.split(b"\n")
            for line in lines:
                if line.strip():
                    self.on_event(job, rank, json.loads(line))

    def on_event(self, job: TestbedJob, rank: int, event: dict) -> None:
        kind = event["event"]
        if kind == "error":
            raise RuntimeError(f"job {job.job_id} rank {rank}: {event.get('message')}")
        if kind == "iteration" and event["iteration"] >= job.target_iteration:
            job.ranks_last.add(rank)
        if kind == "paused":
            self._paused_at[(job.job_id, rank)] = (event["iteration"], event["bytes_sent"])
        elif kind == "resumed" and (job.job_id, rank) in self._paused_at:
            iteration, sent = self._paused_at.pop((job.job_id, rank))
            self.pauses += 1
            self.bytes_while_paused += event["bytes_sent"] - sent
            if event["iteration"] != iteration:
                raise RuntimeError(f"job {job.job_id} rank {rank} advanced while paused")
        if kind == "ready":
            job.ready.add(rank)
            if self.gpus is not None and job.holding:
                self.signal(job, rank)
        elif self.gpus is not None and (
            (kind == "paused" and job.holding) or (kind == "iteration" and not job.holding)
        ):
            # Python runs pending signal handlers in signal-number order, so a resume and a
            # pause sent close together may end in the wrong state: say it again.
            self.signal(job, rank)
        if kind == "iteration" and rank == 0:
            # rank 0 (the PS, or the ring's first worker) sees the whole synchronisation
            self.cct_s.append(event["sync_s"])
            job.iteration = event["iteration"]
            key = (job.task_id, job.config)
            self.trained[key] = job.iteration
            curve = self.tasks[job.task_id].curves[job.config]
            accuracy = curve.accuracy(job.iteration)
            self.observations[job.task_id].append((self.now(), job.config, accuracy))
            if self.gpus is not None:
                self.gpus.report(job.job_id, job.iteration - job.start_iteration, accuracy)
            for fraction in (0.9, 0.95):
                if (*key, fraction) not in self.reached and job.iteration >= curve.iterations_to(
                    fraction
                ):
                    self.reached[(*key, fraction)] = self.now()
            # The last iteration is reported once every rank is done: rank 0 may finish it
            # while other ranks' bytes are still in flight, and a finished job loses its rules.
            if job.iteration < job.target_iteration:
                self.client.job_progress(job.job_id, job.iteration - job.start_iteration)
        elif kind == "done":
            job.ranks_done.add(rank)
            if len(job.ranks_done) == len(job.procs):
                job.finish_s = self.now()
                self.client.job_progress(job.job_id, job.target_iteration - job.start_iteration)
                if self.gpus is not None:
                    self.gpus.finish(job.job_id, job.finish_s)
                self.maybe_end_stage(self.stages[job.stage_id])
                if self.gpus is not None:
                    self.apply(self.gpus.schedule(self.now(), preempt=False))

    def maybe_end_stage(self, stage: TestbedStage) -> None:
        if any(self.jobs[j].finish_s is None for j in stage.job_ids):
            return
        stage.finish_s = self.now()
        task = self.tasks[stage.task_id]
        self.client.delete("stages", stage.stage_id)  # and its jobs
        self.progress(
            f"[{self.now():7.1f} s] task {task.task_id} stage {stage.index} done "
            f"(SCT {stage.finish_s - stage.start_s:.1f} s)"
        )
        if stage.index + 1 >= len(task.plan):
            self.task_finish_s[task.task_id] = self.now()
            return
        configs = [self.jobs[j].config for j in stage.job_ids]
        trained = {c: self.trained[(task.task_id, c)] for c in configs}
        self.start_stage(task, stage.index + 1, survivors(task, stage.index, trained))

    def stop_all(self) -> None:
        """Stop every worker still running (SIGTERM, then SIGKILL), by handle."""
        for job in self.jobs.values():
            for proc in job.procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
        for job in self.jobs.values():
            for proc in job.procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    # ---- results -------------------------------------------------------------------------------

    def stage_rows(self) -> list[dict]:
        return [
            {
                "stage_id": s.stage_id,
                "task_id": s.task_id,
                "index": s.index,
                "jobs": len(s.job_ids),
                "start_s": s.start_s,
                "finish_s": s.finish_s,
                "sct_s": None if s.finish_s is None else s.finish_s - s.start_s,
                "compute_s": (
                    self.jobs[s.job_ids[0]].target_iteration
                    - self.jobs[s.job_ids[0]].start_iteration
                )
                * self.tasks[s.task_id].model.compute_s,
            }
            for s in self.stages.values()
        ]

    def job_rows(self) -> list[dict]:
        return [
            {
                "job_id": j.job_id,
                "task_id": j.task_id,
                "stage_id": j.stage_id,
                "config": j.config,
                "iterations": j.target_iteration - j.start_iteration,
                "start_s": j.start_s,
                "finish_s": j.finish_s,
                "jct_s": None if j.finish_s is None else j.finish_s - j.start_s,
            }
            for j in self.jobs.values()
        ]

    def task_rows(self) -> list[dict]:
        """Per HPO task: see :func:`workloads.hpo.task_row`."""
        return task_rows(
            self.tasks,
            self.stages.values(),
            self.jobs,
            lambda t, c: self.trained[(t, c)],
            self.task_finish_s,
            self.observations,
        )

    def gpu_stats(self) -> dict | None:
        """The job manager's statistics up to the end of the last task (``None`` without)."""
        if self.gpus is None:
            return None
        return self.gpus.stats(max(self.task_finish_s.values(), default=self.now()))

    def config_rows(self) -> list[dict]:
        rows = []
        for (task_id, config), trained in self.trained.items():
            arrival = self.tasks[task_id].arrival_s
            row = {"task_id": task_id, "config": config, "trained": trained}
            for fraction in (0.9, 0.95):
                reached = self.reached.get((task_id, config, fraction))
                row[f"time_to_{round(fraction * 100)}pct_s"] = (
                    None if reached is None else reached - arrival
                )
            rows.append(row)
        return rows
