"""The HPO driver of the testbed: real worker processes on hosts, driven by the HPO core.

It runs the same workload as the simulator (:func:`workloads.hpo.generate`) through the same
progression core (:class:`workloads.hpo_core.HpoCore`: stages, survivors, accuracy, bounds and
result rows). This driver only moves processes: for every job the core starts it registers the
stage and the job with the controller (REST), starts one :mod:`workloads.worker` process per
rank on the job's hosts (``host.popen``), follows their JSON lines, tells the core when an
iteration (rank 0's report) and a job (every rank done) end, and reports each job's progress
to the controller. Everything it starts it stops by handle, also on errors.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from topologies.host_qos import HostPriorities
from workloads.client import ControllerClient
from workloads.curves import curve_to_json
from workloads.gpu import Decision, GpuManager
from workloads.hpo import HpoTask
from workloads.hpo_core import Actions, HpoCore, JobRun

ROOT = Path(__file__).resolve().parents[1]
BASE_PORT = 20000
PORTS_PER_JOB = 8


@dataclass
class Workers:
    """The worker processes of one job and what they said."""

    procs: list = field(default_factory=list)
    done: set[int] = field(default_factory=set)  # ranks that said "done"
    last: set[int] = field(default_factory=set)  # ranks that reported the last iteration
    ready: set[int] = field(default_factory=set)  # ranks that said "ready" (signals are safe)


def base_port(job_id: int) -> int:
    """The first TCP port of a job's ranks (rank r listens on ``base_port + r``)."""
    return BASE_PORT + PORTS_PER_JOB * job_id


WATCH_PERIOD_S = 1.0
# Seconds the workers get to exit on SIGTERM when a run is stopped before SIGKILL.
STOP_GRACE_S = 2.0


class TestbedFault(RuntimeError):
    """The testbed under a run broke (switch deleted, controller gone); the message names it."""


class TestbedDriver:
    """Runs HPO tasks on testbed hosts under the controller's scheduling.

    Args:
        hosts: the testbed hosts, host index i of the workload is ``hosts[i]``.
        client: REST client of the controller.
        tasks: the workload (``workloads.hpo.generate``; its profiles already scaled).
        link_bps: the emulated capacity of every host link (for the lower bounds).
        progress: called with a one-line status now and then.
        gpus: the job manager sharing the hosts' GPUs (servers = ``hosts``), or ``None``: every
            job computes as soon as it starts.
        log_dir: folder for every worker's stderr (``None``: discarded).
        host_priorities: keeps the hosts' egress classes in step with the controller's rules
            (``None``: hosts send FIFO, only the switch enforces levels).
        watch: called about every :data:`WATCH_PERIOD_S` while the run goes on; a message it
            returns (the switch or the controller is gone) ends the run with
            :class:`TestbedFault`.
        sample: called with the run's clock on every turn of the event loop (at least every
            0.2 s); it decides itself when to record (e.g. the schedule's timeline).
    """

    def __init__(
        self,
        hosts: list,
        client: ControllerClient,
        tasks: list[HpoTask],
        link_bps: float,
        progress=print,
        gpus: GpuManager | None = None,
        log_dir: Path | None = None,
        host_priorities: HostPriorities | None = None,
        watch: Callable[[], str | None] | None = None,
        sample: Callable[[float], None] | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.watch = watch
        self.sample = sample
        self.host_priorities = host_priorities
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
        if gpus is not None and gpus.servers != len(hosts):
            raise ValueError(f"the job manager has {gpus.servers} servers for {len(hosts)} hosts")
        self.gpus = gpus
        self.core = HpoCore(tasks, link_bps, gpus)
        self.tasks, self.jobs, self.stages = self.core.tasks, self.core.jobs, self.core.stages
        self.signals_sent = 0
        self.pauses = 0  # worker pauses that ended in a resume
        self.bytes_while_paused = 0  # bytes a worker sent between "paused" and "resumed"
        self._paused_at: dict[tuple[int, int], tuple[int, int]] = {}  # -> (iteration, bytes)
        self.hosts = hosts
        self.client = client
        self.progress = progress
        self.workers: dict[int, Workers] = {}
        self._registered_stages: set[int] = set()  # stages put to the controller
        self.cct_s: list[float] = []  # one synchronisation (coflow) per job iteration
        # every rank's every iteration: when it was reported and how long its synchronisation took
        self.iteration_rows: list[dict] = []
        # per job: seconds from its stage's start until every rank was connected and ready
        self.startup_s: dict[int, float] = {}
        # handshakes, as the workers report them once connected: the longest connect() and the
        # SYN-ACKs resent before the connecting side's ACK arrived
        self.longest_connect_s = 0.0
        self.synack_retransmits = 0
        self.handshake_retries = 0  # connections the listening host dropped, made again
        self.t0 = time.monotonic()
        self._buffers: dict[int, bytes] = {}
        self._owner: dict[int, tuple[JobRun, int]] = {}  # fd -> (job, rank)

    def _log_path(self, job: JobRun, rank: int) -> Path:
        return self.log_dir / f"worker-{job.job_id}-{rank}.log"

    def _log(self, job: JobRun, rank: int):
        """Where a worker's stderr goes: a file of ``log_dir`` (closed by the caller after
        starting the worker, which keeps its own descriptor) or nowhere."""
        if self.log_dir is None:
            return subprocess.DEVNULL
        return open(self._log_path(job, rank), "wb")  # noqa: SIM115

    def now(self) -> float:
        """Seconds since the driver was made (monotonic)."""
        return time.monotonic() - self.t0

    @property
    def task_finish_s(self) -> dict[int, float]:
        """Task id -> when its last stage ended, for the tasks that ended."""
        return {t: run.finish_s for t, run in self.core.runs.items() if run.finish_s is not None}

    # ---- what the core asks for -----------------------------------------------------------------

    def carry_out(self, actions: Actions) -> None:
        """Register and start the jobs the core started, then apply its GPU decisions."""
        joined: dict[int, int] = {}  # stage id -> jobs that joined it now
        for job in actions.started:
            stage = self.stages[job.stage_id]
            if stage.stage_id not in self._registered_stages:
                self._registered_stages.add(stage.stage_id)
                self.client.put_task(stage.task_id, name=f"task{stage.task_id}")
                self.client.put_stage(stage.stage_id, task_id=stage.task_id)
            joined[stage.stage_id] = joined.get(stage.stage_id, 0) + 1
            self.start_job(self.tasks[job.task_id], job)
        for decision in actions.gpu:
            self.apply(decision)
        for stage_id, count in joined.items():
            stage = self.stages[stage_id]
            self.progress(
                f"[{self.now():7.1f} s] task {stage.task_id} stage {stage.index}: "
                f"{count} jobs to iteration {self.jobs[stage.job_ids[-1]].target_iteration}"
            )

    def start_job(self, task: HpoTask, job: JobRun) -> None:
        """Register a job (flows, TCP ports) with the controller and start its workers."""
        hosts = [self.hosts[i] for i in job.hosts]
        flows = [
            {"src": self.hosts[s].IP(), "dst": self.hosts[d].IP(), "bytes": float(b)}
            for phase in job.phases
            for s, d, b in zip(*phase, strict=True)
        ]
        first_port = base_port(job.job_id)
        self.client.put_job(
            job.job_id,
            stage_id=job.stage_id,
            task_id=job.task_id,
            flows=flows,
            tcp_ports=[first_port + r for r in range(len(hosts))],
            iteration_budget=job.iterations,
            iterations_done=0,
        )
        workers = self.workers[job.job_id] = Workers()
        addresses = ",".join(h.IP() for h in hosts)
        curve = curve_to_json(task.curves[job.config])
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
                str(first_port),
                "--bytes",
                str(task.model.sync_bytes),
                "--compute-s",
                str(task.model.compute_s),
                "--iterations",
                str(job.target_iteration),
                "--start-iteration",
                str(job.start_iteration),
                "--curve",
                curve,
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
            workers.procs.append(proc)
            self._owner[proc.stdout.fileno()] = (job, rank)
            self._buffers[proc.stdout.fileno()] = b""

    # ---- events -------------------------------------------------------------------------------

    def run(self, timeout_s: float = 3600) -> None:
        """Run every task to completion (or raise after ``timeout_s``); the clock (and the
        workload's arrival times) start now."""
        self.t0 = time.monotonic()
        pending = sorted(self.tasks.values(), key=lambda t: t.arrival_s)
        boundary = self.gpus.quantum_s if self.gpus is not None else None
        next_watch = 0.0
        try:
            while pending or not self.core.finished:
                if self.watch is not None and self.now() >= next_watch:
                    problem = self.watch()
                    if problem:
                        raise TestbedFault(f"{problem} (at {self.now():.1f} s of the run)")
                    next_watch = self.now() + WATCH_PERIOD_S
                while pending and pending[0].arrival_s <= self.now():
                    self.carry_out(self.core.arrive(pending.pop(0).task_id, self.now()))
                if self.now() > timeout_s:
                    raise TimeoutError(
                        f"HPO did not finish in {timeout_s} s; unfinished: {self._unfinished()}"
                    )
                if boundary is not None and self.now() >= boundary:
                    self.apply(self.core.quantum(self.now()))
                    boundary = self.now() + self.gpus.quantum_s
                if self.host_priorities is not None:
                    self.host_priorities.maybe_refresh()
                if self.sample is not None:
                    self.sample(self.now())
                self.poll(0.1 if self.host_priorities is not None else 0.2)
        finally:
            self.stop_all()

    def _unfinished(self) -> str:
        return "; ".join(
            f"job {j.job_id} at iteration {j.start_iteration + j.done}/{j.target_iteration}"
            f"{'' if j.holding else ' (suspended)'}, ranks ready "
            f"{sorted(self.workers[j.job_id].ready)} done {sorted(self.workers[j.job_id].done)}"
            for j in self.jobs.values()
            if j.finish_s is None
        )

    def apply(self, decision: Decision) -> None:
        """Pause the workers of the jobs that lost their GPUs, resume those that got them (the
        core set their ``holding``).

        Only workers that said ``ready`` get a signal (before that they may not handle it yet
        and they start paused anyway); a worker that gets ready later is resumed then if its
        job holds its GPUs."""
        for gpu_job in [*decision.stop, *decision.start]:
            job = self.jobs[gpu_job.job_id]
            for rank in self.workers[job.job_id].ready:
                self.signal(job, rank)

    def signal(self, job: JobRun, rank: int) -> None:
        """Pause or resume one worker as the GPU manager decided."""
        workers = self.workers[job.job_id]
        proc = workers.procs[rank]
        # not once it did its last iteration: it is exiting
        if rank not in workers.last and rank not in workers.done and proc.poll() is None:
            proc.send_signal(signal.SIGUSR2 if job.holding else signal.SIGUSR1)
            self.signals_sent += 1

    def poll(self, timeout_s: float) -> None:
        """Read the workers' events for up to ``timeout_s`` and act on them."""
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
                code = self.workers[job.job_id].procs[rank].wait()
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

    def on_event(self, job: JobRun, rank: int, event: dict) -> None:
        """One worker event: progress, synchronisation, pause, done or failure."""
        kind = event["event"]
        workers = self.workers[job.job_id]
        if kind == "error":
            raise RuntimeError(f"job {job.job_id} rank {rank}: {event.get('message')}")
        if kind == "iteration":
            self.iteration_rows.append(
                {"job_id": job.job_id, "rank": rank, "iteration": event["iteration"],
                 "at_s": self.now(), "sync_s": event["sync_s"]}
            )  # fmt: skip
            if event["iteration"] >= job.target_iteration:
                workers.last.add(rank)
        if kind == "paused":
            self._paused_at[(job.job_id, rank)] = (event["iteration"], event["bytes_sent"])
        elif kind == "resumed" and (job.job_id, rank) in self._paused_at:
            iteration, sent = self._paused_at.pop((job.job_id, rank))
            self.pauses += 1
            self.bytes_while_paused += event["bytes_sent"] - sent
            if event["iteration"] != iteration:
                raise RuntimeError(f"job {job.job_id} rank {rank} advanced while paused")
        if kind == "ready":
            workers.ready.add(rank)
            self.longest_connect_s = max(self.longest_connect_s, event.get("connect_s", 0.0))
            self.synack_retransmits += event.get("synack_retransmits", 0)
            self.handshake_retries += event.get("handshake_retries", 0)
            if len(workers.ready) == len(workers.procs):
                self.startup_s[job.job_id] = self.now() - job.start_s
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
            expected = job.start_iteration + job.done + 1
            if event["iteration"] != expected:
                raise RuntimeError(
                    f"job {job.job_id} reported iteration {event['iteration']}, not {expected}"
                )
            self.cct_s.append(event["sync_s"])
            self.core.iteration_done(job.job_id, self.now())
            # The last iteration is reported once every rank is done: rank 0 may finish it
            # while other ranks' bytes are still in flight, and a finished job loses its rules.
            if job.done < job.iterations:
                self.client.job_progress(job.job_id, job.done)
        elif kind == "done":
            workers.done.add(rank)
            if len(workers.done) == len(workers.procs):
                self.client.job_progress(job.job_id, job.iterations)
                actions = self.core.job_done(job.job_id, self.now())
                for stage in actions.finished_stages:
                    self.client.delete("stages", stage.stage_id)  # and its jobs
                    self.progress(
                        f"[{self.now():7.1f} s] task {stage.task_id} stage {stage.index} done "
                        f"(SCT {stage.sct_s:.1f} s)"
                    )
                self.carry_out(actions)

    def stop_all(self) -> None:
        """Stop every worker still running (SIGTERM, then SIGKILL to those still running
        :data:`STOP_GRACE_S` later), by handle."""
        procs = [proc for workers in self.workers.values() for proc in workers.procs]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        # one deadline for all workers, so that a failed run ends within seconds however many
        # of its workers are slow to leave
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # ---- results: the core's ------------------------------------------------------------------

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

    def gpu_stats(self) -> dict | None:
        """The job manager's statistics up to the end of the last task (``None`` without)."""
        return self.core.gpu_stats(self.now())
