"""One testbed run end to end: a policy (pair) on a workload in a fresh testbed, what it
measured, the simulator's prediction beside it, and its files; tried again on a failure.

A run's folder gets ``result.json`` (with the hosts' TCP retransmissions and timeouts),
``stages`` / ``jobs`` / ``configs`` / ``tasks`` CSV, ``iterations.csv`` (every rank's every
synchronisation), worker logs, ``timeline.json`` and ``timeline-simulated.json`` with
``schedule.png`` (the levels and port utilisation over time as recorded beside the simulator's
prediction).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from controller.metrics import summarise
from controller.timeline import Timeline, port_names
from experiments.testbed_counters import (
    Counters,
    Traffic,
    read_counters,
    tcp_counters,
    tcp_deltas,
    testbed_recorder,
    traffic,
)
from experiments.testbed_network import (
    Testbed,
    host_agent,
    reroute_summary,
    running_testbed,
    spine_failure,
    testbed_watch,
)
from experiments.testbed_prediction import Prediction, job_manager, predict
from experiments.testbed_settings import TestbedSettings, run_key, workload, workload_name
from simulator.__main__ import run_label
from simulator.metrics import write_csv, write_json
from simulator.schedule_plot import draw as draw_schedule
from workloads.client import ControllerError
from workloads.hpo import HpoTask

if TYPE_CHECKING:
    from topologies.testbed_driver import TestbedDriver

RUN_FAILURES = (RuntimeError, TimeoutError, OSError, ControllerError)
# what a run trains: a workload, or what makes a fresh one for the testbed and for each
# prediction (called with "testbed" or "prediction"); None: the seeded workload of the settings
Tasks = list | Callable[[str], list] | None


@dataclass(frozen=True)
class Run:
    """One run: ``policy`` with ``gpu_policy`` on ``tasks`` (default: the settings' workload
    of ``seed``; a callable gives fresh tasks for the testbed and for each prediction: tasks
    whose search keeps state, such as an Optuna study's, run once), its files in ``out``,
    named ``title`` on the schedule's picture (default: the workload's name)."""

    policy: str
    out: Path
    seed: int
    gpu_policy: str = "none"
    tasks: Tasks = None
    title: str | None = None

    @property
    def label(self) -> str:
        """The run's name: its policies' (``beamer``, ``fair+hermes``)."""
        return run_label(self.policy, self.gpu_policy)


def run_with_retries(settings: TestbedSettings, run: Run) -> tuple[dict, list[str]]:
    """:func:`run_policy`, tried again in a fresh testbed up to ``settings.retries`` times after
    a failure (runs are independent repeats of the same workload). Returns the result and the
    errors of the attempts that failed, whose folders are kept beside ``run.out`` as
    ``<out>-failed-<attempt>`` (worker logs, ``tcp.json``) and which ``result.json`` lists
    (``failed_attempts``, for a resumed experiment); raises the last error if every attempt
    failed."""
    errors: list[str] = []
    out = run.out
    while True:
        try:
            result = run_policy(settings, run)
            if errors:
                result = {**result, "failed_attempts": errors}
                (out / "result.json").write_text(json.dumps(result, indent=2))
            return result, errors
        except RUN_FAILURES as exc:
            errors.append(str(exc))
            if len(errors) > settings.retries:
                raise
            kept = out.with_name(f"{out.name}-failed-{len(errors)}")
            if out.exists():
                shutil.rmtree(kept, ignore_errors=True)
                out.rename(kept)
            print(f"!! {out}: attempt {len(errors)} failed: {exc}; trying again in a fresh "
                  f"testbed (the failed attempt's files: {kept})", flush=True)  # fmt: skip


def run_policy(settings: TestbedSettings, run: Run) -> dict:
    """``run`` end to end: on the testbed (everything started there is stopped before this
    returns), then the run's tables, the simulator's prediction, the timelines and their
    picture, and ``result.json``; the result."""
    run.out.mkdir(parents=True, exist_ok=True)
    with running_testbed(settings.cluster, run.policy, run.out, settings.host_priorities,
                         settings.tcp_rto_max_ms) as testbed:  # fmt: skip
        measured = measure(settings, run, testbed)
    stages = write_tables(measured.driver, run.out)
    fresh = run.tasks if callable(run.tasks) else None
    prediction = predict(settings, run.policy, run.gpu_policy,
                         lambda: fresh("prediction") if fresh else measured.tasks)  # fmt: skip
    wire_shares = write_timelines(settings, run, measured.timeline, prediction.timeline,
                                  measured.driver)  # fmt: skip
    result = run_result(settings, run, measured, prediction, wire_shares, stages)
    (run.out / "result.json").write_text(json.dumps(result, indent=2))
    return result


@dataclass(frozen=True)
class Measured:
    """What a run measured on the testbed.

    Attributes:
        driver: the testbed driver that ran it (its rows and HPO state).
        tasks: the tasks it trained.
        duration_s: how long the driver ran.
        timeline: the levels and port utilisation as recorded.
        traffic: what the switch ports and the hosts sent, and the hosts' TCP counters.
        host_filter_updates: how often the hosts' egress filters followed the controller.
        fabric: the controller's ``/api/fabric`` after the run (rules, reroutes).
        stats: the controller's ``/api/stats`` after the run.
        spine_failure: the injected spine failure's record (empty: none).
    """

    driver: TestbedDriver
    tasks: list[HpoTask]
    duration_s: float
    timeline: Timeline
    traffic: Traffic
    host_filter_updates: int
    fabric: dict
    stats: dict
    spine_failure: dict


def measure(settings: TestbedSettings, run: Run, testbed: Testbed) -> Measured:
    """Train the run's tasks on ``testbed`` under the controller, recording the timeline and
    reading the counters before and after."""
    from topologies.testbed_driver import TestbedDriver

    cluster, ctl = testbed.cluster, testbed.controller
    hosts = testbed.hosts()
    before = read_counters(cluster, hosts)
    tasks = testbed_tasks(settings, run)
    agent = host_agent(testbed, hosts) if settings.host_priorities else None
    watch = testbed_watch(ctl, [switch.name for switch in cluster.switches])
    timeline = Timeline(port_names(cluster.hosts), cluster.link_bps, "testbed")
    failure: dict = {}
    sample = sampler(settings, testbed, timeline, failure)
    driver = TestbedDriver(
        hosts,
        ctl.client,
        tasks,
        link_bps=cluster.link_bps,
        progress=lambda m: print(f"  {m}"),
        gpus=job_manager(settings, run.gpu_policy),
        log_dir=run.out / "logs",
        host_priorities=agent,
        watch=watch,
        sample=sample,
    )
    started = time.monotonic()
    drive(driver, settings.timeout_s, watch, before, hosts, run.out)
    duration = time.monotonic() - started
    sample(driver.now(), force=True)
    timeline.close(driver.now())
    timeline.stages = driver.core.stage_labels()
    after = read_counters(cluster, hosts)
    return Measured(driver, tasks, duration, timeline, traffic(before, after),
                    agent.updates if agent else 0, ctl.client.fabric(), ctl.client.stats(),
                    failure)  # fmt: skip


def testbed_tasks(settings: TestbedSettings, run: Run) -> list[HpoTask]:
    """What the run trains on the testbed: its tasks, fresh ones, or the seeded workload."""
    if callable(run.tasks):
        return run.tasks("testbed")
    return workload(settings, run.seed) if run.tasks is None else run.tasks


def sampler(
    settings: TestbedSettings, testbed: Testbed, timeline: Timeline, failure: dict
) -> Callable[..., None]:
    """The driver's ``sample``: the timeline's recorder, and with ``fail_spine_s`` the spine
    failure first (its record into ``failure``)."""
    record = testbed_recorder(testbed.controller, timeline, testbed.cluster.host_ports)
    if settings.fail_spine_s is None:
        return record
    fail = spine_failure(testbed, settings.fail_spine_s, failure)

    def sample(now_s: float, force: bool = False) -> None:
        fail(now_s)
        record(now_s, force)

    return sample


def drive(
    driver: TestbedDriver,
    timeout_s: float,
    watch: Callable[[], str | None],
    before: Counters,
    hosts: list,
    out: Path,
) -> None:
    """Run ``driver`` until its tasks end; a failure says what is gone if the ``watch`` knows,
    and leaves each host's TCP counters since ``before`` in ``out/tcp.json`` (resets, aborts)
    for the post-mortem."""
    from topologies.testbed_driver import TestbedFault

    try:
        driver.run(timeout_s=timeout_s)
    except ControllerError as exc:  # say what is gone, if the watch knows
        raise TestbedFault(watch() or str(exc)) from None
    except Exception:
        failed = {h.name: tcp_counters(h) for h in hosts}
        write_json(out / "tcp.json", tcp_deltas(before.tcp, failed))
        raise


def write_tables(driver: TestbedDriver, out: Path) -> list[dict]:
    """The run's stages, jobs, configs, tasks and iterations as CSV files; the stage rows."""
    stages = driver.stage_rows()
    for name, rows in (
        ("stages", stages),
        ("jobs", driver.job_rows()),
        ("configs", driver.config_rows()),
        ("tasks", driver.task_rows()),
        ("iterations", driver.iteration_rows),
    ):
        write_csv(out / f"{name}.csv", rows)
    return stages


def write_timelines(
    settings: TestbedSettings,
    run: Run,
    recorded: Timeline,
    predicted: Timeline,
    driver: TestbedDriver,
) -> tuple[float, float]:
    """Both timelines as JSON and their picture (named by the run's title); the busy share of
    the busiest switch port and of the busiest quarter, by the ports' byte counters over the
    stages' time."""
    from workloads.hpo_core import busiest_shares

    recorded.write(run.out / "timeline.json")
    predicted.write(run.out / "timeline-simulated.json")
    wire_shares = busiest_shares(
        recorded.busy_share(
            (s.start_s, s.finish_s) for s in driver.stages.values() if s.finish_s is not None
        ).values()
    )
    name = run.title or workload_name(settings, run.seed)
    recorded.workload = predicted.workload = name
    draw_schedule([recorded, predicted], run.out / "schedule.png", f"{run.label}: {name}")
    return wire_shares


def run_result(
    settings: TestbedSettings,
    run: Run,
    measured: Measured,
    prediction: Prediction,
    wire_shares: tuple[float, float],
    stages: list[dict],
) -> dict:
    """``result.json``: what the run measured beside the simulator's predictions."""
    driver, sent, cluster = measured.driver, measured.traffic, settings.cluster
    wire_busiest, wire_quarter = wire_shares
    capacity_bits = measured.duration_s * cluster.link_bps * len(cluster.host_ports)
    return {
        "policy": run.label,
        "network_policy": run.policy,
        "gpu_policy": run.gpu_policy,
        "link_gbps": settings.modelled_link_bps / 1e9,
        "emulated_link_bps": cluster.link_bps,
        "duration_s": measured.duration_s,
        **driver.core.summary(driver.now()),
        "cct_s": summarise(driver.cct_s),
        "job_startup_s": summarise(driver.startup_s.values()),
        "handshakes": {
            "longest_connect_s": driver.longest_connect_s,
            "synack_retransmits": driver.synack_retransmits,
            "connections_redone": driver.handshake_retries,
        },
        "worker_signals": driver.signals_sent,
        "worker_pauses": driver.pauses,
        "bytes_sent_while_paused": driver.bytes_while_paused,
        "link_utilisation": 8.0 * sent.total_bytes / capacity_bits,
        # the switch ports' own byte counters (headers and resent segments included) over the
        # stages' time: how busy the wire was, where busiest_port_busy counts the model's bytes
        "wire_busiest_port_busy": wire_busiest,
        "wire_busiest_quarter_busy": wire_quarter,
        "bytes_per_class": sent.per_class,
        "topology": settings.topology_json(),
        "fabric_bytes_per_class": sent.fabric_per_class,
        "fabric_rules": measured.fabric.get("forwarding_rules", {}),
        "spine_failure": reroute_summary(measured.spine_failure, measured.fabric),
        "host_priorities": settings.host_priorities,
        "tcp_rto_max_ms": settings.tcp_rto_max_ms,
        "host_bytes_per_class": sent.host_per_class,
        "host_filter_updates": measured.host_filter_updates,
        "tcp": sent.tcp,
        "controller": {
            k: measured.stats[k] for k in ("event_to_flowmods_ms", "ops_sent", "switch_errors")
        },
        "simulated": prediction.simulated,
        "overheads": settings.overheads.to_json() if settings.overheads else None,
        "simulated_calibrated": prediction.calibrated,
        "stages": stages,
        "run_key": run_key(settings),
    }
