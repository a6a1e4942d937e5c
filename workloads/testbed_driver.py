"""The HPO driver of the testbed: successive halving with real worker processes on hosts.

It runs the same workload as the simulator (:func:`workloads.hpo.generate`): for every stage of
every task it registers the stage and its jobs with the controller (REST), starts one
:mod:`workloads.worker` process per rank on the job's hosts (``host.popen``), follows their JSON
lines, reports each job's progress to the controller, and at the end of a stage keeps the best
configurations by accuracy and starts the next stage with them (resuming their iteration count).
Everything it starts it stops by handle, also on errors.

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
from workloads.hpo import HpoTask, survivors, sync_flows

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
    ranks_done: int = 0

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
    """

    def __init__(
        self, hosts: list, client: ControllerClient, tasks: list[HpoTask], progress=print
    ) -> None:
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
        addresses = ",".join(h.IP() for h in hosts)
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
            proc = host.popen(
                argv,
                cwd=str(ROOT),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            job.procs.append(proc)
            self._owner[proc.stdout.fileno()] = (job, rank)
            self._buffers[proc.stdout.fileno()] = b""

    # ---- events -------------------------------------------------------------------------------

    def run(self, timeout_s: float = 3600) -> None:
        """Run every task to completion (or raise after ``timeout_s``)."""
        pending = sorted(self.tasks.values(), key=lambda t: t.arrival_s)
        try:
            while pending or any(j.finish_s is None for j in self.jobs.values()):
                while pending and pending[0].arrival_s <= self.now():
                    task = pending.pop(0)
                    self.start_stage(task, 0, list(range(task.n_configs)))
                if self.now() > timeout_s:
                    raise TimeoutError(f"HPO did not finish in {timeout_s} s")
                self.poll(0.2)
        finally:
            self.stop_all()

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
                if job.finish_s is None and job.procs[rank].wait() != 0:
                    raise RuntimeError(f"worker {rank} of job {job.job_id} failed")
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
        if kind == "iteration" and rank == 0:
            # rank 0 (the PS, or the ring's first worker) sees the whole synchronisation
            self.cct_s.append(event["sync_s"])
            job.iteration = event["iteration"]
            key = (job.task_id, job.config)
            self.trained[key] = job.iteration
            curve = self.tasks[job.task_id].curves[job.config]
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
            job.ranks_done += 1
            if job.ranks_done == len(job.procs):
                job.finish_s = self.now()
                self.client.job_progress(job.job_id, job.target_iteration - job.start_iteration)
                self.maybe_end_stage(self.stages[job.stage_id])

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
