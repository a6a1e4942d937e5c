"""A short end-to-end testbed run (root, OVS, Mininet): hpo-testbed as a user runs it."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from controller.policies import make_policy
from controller.timeline import Timeline
from simulator.engine import Fabric, Simulator
from simulator.hpo import HpoDriver
from tests.conftest import command, needs_root_and
from topologies.qos import level_classid
from workloads.hpo import generate

pytestmark = [pytest.mark.integration, needs_root_and("ovs-vsctl", "mnexec", "tc", "ethtool")]

ROOT = Path(__file__).resolve().parents[2]


def run_testbed(out: Path, *args: str) -> None:
    """Run hpo-testbed as a user does, writing to ``out``; it must succeed."""
    run = subprocess.run(
        [*command("hpo-testbed", "experiments.run_testbed"), *args, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def structure(stages, jobs, configs, tasks) -> dict:
    """What must not depend on timing: which configurations every stage trained (and how
    long), how far each configuration got, and which one each task ended with."""
    return {
        "stages": sorted((int(s["task_id"]), int(s["index"]), s["configs"], int(s["iterations"]))
                         for s in stages),
        "jobs": sorted((int(j["task_id"]), int(j["config"]), int(j["iterations"])) for j in jobs),
        "configs": sorted((int(c["task_id"]), int(c["config"]), int(c["trained"]))
                          for c in configs),
        "tasks": sorted((int(t["task_id"]), int(t["best_config"])) for t in tasks),
    }  # fmt: skip


def jobs_per_stage(timeline: Timeline) -> dict[str, int]:
    """How many jobs a timeline shows in each stage, by the stage's name."""
    jobs: dict[str, set] = {}
    for span in timeline.spans:
        jobs.setdefault(timeline.stages[span.stage_id], set()).add(span.job_id)
    return {stage: len(ids) for stage, ids in jobs.items()}


def test_short_testbed_run(tmp_path):
    out = tmp_path / "testbed"
    workload = dict(n_hosts=6, n_tasks=1, seed=1, configs_per_task=4, eta=2, min_iterations=3)
    run_testbed(
        out,
        "--hosts",
        "6",
        "--tasks",
        "1",
        "--seeds",
        "1",
        "--configs",
        "4",
        "--eta",
        "2",
        "--min-iterations",
        "3",
        "--policy",
        "fair",
        "sincronia",
        "--timeout",
        "300",
        "--link-gbps",
        "10",
        "--patterns",
        "ps",
        "ring",
    )
    # The simulator on the same workload and seed (same link rate and bytes) runs the same
    # stages, jobs and configurations, and writes the same metrics with the same columns.
    files = ("stages", "jobs", "configs", "tasks")
    for policy in ("fair", "sincronia"):
        sim = Simulator(Fabric(6, 20e6), make_policy(policy))
        driver = HpoDriver(sim, generate(**workload, link_scale=10e9 / 20e6))
        sim.run()
        simulated = [driver.stage_rows(), driver.job_rows(), driver.config_rows(),
                     driver.task_rows()]  # fmt: skip
        measured = [read_csv(out / policy / "seed-1" / f"{name}.csv") for name in files]
        for name, sim_rows, bed_rows in zip(files, simulated, measured, strict=True):
            assert list(bed_rows[0]) == list(sim_rows[0]), name
        sim_rows = [[{k: str(v) for k, v in row.items()} for row in rows] for rows in simulated]
        assert structure(*measured) == structure(*sim_rows), policy
        # the testbed never beats a lower bound either
        for name in ("stages", "jobs", "tasks"):
            for row in read_csv(out / policy / "seed-1" / f"{name}.csv"):
                assert float(row["ratio_to_bound"]) >= 1.0, (policy, name, row)
    results = {r["policy"]: r for r in json.loads((out / "results.json").read_text())}
    assert set(results) == {"fair", "sincronia"}
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["provenance"]["git_commit"]) == 40 and summary["link_gbps"] == 10
    assert set(summary["policies"]) == {"fair", "sincronia"}
    assert summary["clear_best_avg_sct"] is None  # one seed: no interval, no winner
    for entry in summary["policies"].values():
        assert entry["avg_sct_s"]["n"] == 1 and entry["sim_avg_sct_s"]["mean"] > 0
    for name, result in results.items():
        per_class = result["bytes_per_class"]
        job_bytes = sum(per_class.get(level_classid(level), 0) for level in range(7))
        total = sum(per_class.values())
        assert job_bytes >= 0.9 * total, (name, per_class)  # the workers' traffic was marked
        assert result["controller"]["switch_errors"] == 0
        assert result["sct_s"]["count"] == 3  # stages of 4, 2 and 1 configurations
        for stage in json.loads((out / name / "seed-1" / "result.json").read_text())["stages"]:
            assert stage["sct_s"] >= stage["compute_s"]
        assert 0 < result["link_utilisation"] < 1
        assert result["link_gbps"] == 10 and result["emulated_link_bps"] == 20e6
        assert result["host_priorities"] is True  # the default: the hosts serve the levels too
        # the wire carries at least the workload's bytes (plus headers and resent segments)
        assert result["wire_busiest_port_busy"] >= 0.9 * result["busiest_port_busy"] > 0
        assert result["wire_busiest_port_busy"] < 1.05
        handshakes = result["handshakes"]  # every rank reported how its connections opened
        assert handshakes["longest_connect_s"] > 0 and handshakes["connections_redone"] >= 0
    # fair sharing puts every job at the top level; sincronia spreads them over levels
    fair = results["fair"]["bytes_per_class"]
    assert fair[level_classid(0)] >= 0.9 * sum(fair.values())
    spread = results["sincronia"]["bytes_per_class"]
    assert sum(1 for level in range(7) if spread.get(level_classid(level), 0) > 10_000) >= 2
    assert (out / "testbed.png").stat().st_size > 0
    # every run drew its schedule beside the simulator's, from the timelines it recorded
    for policy in ("fair", "sincronia"):
        run_dir = out / policy / "seed-1"
        measured = Timeline.read(run_dir / "timeline.json")
        predicted = Timeline.read(run_dir / "timeline-simulated.json")
        jobs = {int(row["job_id"]) for row in read_csv(run_dir / "jobs.csv")}
        assert {s.job_id for s in measured.spans} == jobs  # every job's level was seen
        # ids differ between testbed and simulator; stages by name hold the same jobs
        assert jobs_per_stage(measured) == jobs_per_stage(predicted) == {
            "task 0 stage 0": 4, "task 0 stage 1": 2, "task 0 stage 2": 1}  # fmt: skip
        levels = {s.level for s in measured.spans}
        if policy == "fair":
            assert levels == {0}
        else:
            assert len(levels) >= 2, levels
        # the switch's counters saw the workers' bytes (plus headers and ACKs), and no port
        # carried more than its emulated rate
        sent, modelled = sum(measured.port_bytes[-1][:6]), sum(predicted.port_bytes[-1][:6])
        assert 0.98 <= sent / modelled < 1.5, (policy, sent, modelled)
        _, utilisation = measured.utilisation(max(1, round(measured.end_s)))
        assert 0.2 < max(max(row) for row in utilisation) <= 1.1, policy
        assert (run_dir / "schedule.png").stat().st_size > 10_000
    # nothing left behind: bridge, switch ports, worker processes
    assert subprocess.run(["ovs-vsctl", "br-exists", "s1"]).returncode == 2
    assert (
        "s1-eth" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    )
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(out) not in procs and "workloads.worker --job" not in procs


def test_short_testbed_run_with_gpu_time_sharing(tmp_path):
    """Hermes' job manager pauses and resumes real workers: 2 tasks of 4 two-worker jobs share
    one GPU per host on 6 hosts, so jobs wait for GPUs and get preempted; the switch alone
    serves the levels (``--no-host-priorities``)."""
    out = tmp_path / "testbed-gpu"
    run_testbed(
        out,
        "--hosts",
        "6",
        "--tasks",
        "2",
        "--configs",
        "4",
        "--eta",
        "2",
        "--min-iterations",
        "3",
        "--workers",
        "2",
        "--policy",
        "fair",
        "--gpu-policy",
        "hermes",
        "--quantum",
        "2",
        "--timeout",
        "240",
        "--link-gbps",
        "10",
        "--patterns",
        "ps",
        "ring",
        "--no-host-priorities",
    )
    [result] = json.loads((out / "results.json").read_text())
    assert result["policy"] == "fair+hermes" and result["sct_s"]["count"] == 6
    assert result["host_priorities"] is False and result["host_filter_updates"] == 0
    gpu = result["gpu"]
    assert gpu["preemptions"] >= 1 and result["worker_signals"] >= gpu["preemptions"]
    assert 0 < gpu["gpu_utilisation"] <= 1
    # suspended workers kept their iteration (checked by the driver) and sent nothing
    assert result["worker_pauses"] >= 1 and result["bytes_sent_while_paused"] == 0
    assert result["best_identified_s"]["count"] == 2  # both tasks ended with a winner
    # no stage ended before its compute time
    for stage in json.loads((out / "fair+hermes" / "seed-1" / "result.json").read_text())["stages"]:
        assert stage["sct_s"] >= stage["compute_s"]
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "workloads.worker --job" not in procs


def nothing_left_behind(out: Path) -> None:
    """No bridge, switch port or worker of the run is left."""
    assert subprocess.run(["ovs-vsctl", "br-exists", "s1"]).returncode == 2
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "s1-eth" not in links
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(out) not in procs and "workloads.worker --job" not in procs


def test_asha_runs_its_rungs_without_a_barrier_on_the_testbed(tmp_path):
    """ASHA (``--search asha``): rungs are stages that jobs join as they are promoted; the
    controller takes each rung once, however many jobs join it later."""
    out = tmp_path / "testbed-asha"
    run_testbed(out, "--hosts", "6", "--tasks", "1", "--configs", "6", "--eta", "3",
                "--min-iterations", "2", "--workers", "2", "--search", "asha",
                "--policy", "beamer", "--timeout", "240", "--link-gbps", "10")  # fmt: skip
    run_dir = out / "beamer" / "seed-1"
    stages = {int(s["index"]): s for s in read_csv(run_dir / "stages.csv")}
    jobs = read_csv(run_dir / "jobs.csv")
    assert sorted(stages) == [0, 1, 2] and stages[0]["jobs"] == "6"
    for index in (1, 2):  # every promoted configuration completed the rung below first
        below = set(stages[index - 1]["configs"].split())
        assert set(stages[index]["configs"].split()) <= below
        joins = {float(j["start_s"]) for j in jobs if j["stage_id"] == stages[index]["stage_id"]}
        assert min(joins) == float(stages[index]["start_s"])
    for name in ("stages", "jobs", "tasks"):
        for row in read_csv(run_dir / f"{name}.csv"):
            assert float(row["ratio_to_bound"]) >= 1.0, (name, row)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["workload"]["search"] == "asha"
    [result] = json.loads((out / "results.json").read_text())
    assert result["controller"]["switch_errors"] == 0 and result["sct_s"]["count"] == 3
    nothing_left_behind(out)


def test_hyperband_runs_its_brackets_side_by_side_on_the_testbed(tmp_path):
    """``--search hyperband``: 3 configurations' budgets give two brackets (3 configurations
    halved once, and 2 at the full budget) that start together; each bracket's stages follow
    one another."""
    out = tmp_path / "testbed-hyperband"
    run_testbed(out, "--hosts", "6", "--tasks", "1", "--configs", "3", "--eta", "3",
                "--min-iterations", "2", "--workers", "2", "--search", "hyperband",
                "--policy", "beamer", "--timeout", "240", "--link-gbps", "10")  # fmt: skip
    run_dir = out / "beamer" / "seed-1"
    stages = {(int(s["bracket"]), int(s["index"])): s for s in read_csv(run_dir / "stages.csv")}
    assert {k: int(s["jobs"]) for k, s in stages.items()} == {(0, 0): 3, (0, 1): 1, (1, 0): 2}
    assert stages[(0, 0)]["start_s"] == stages[(1, 0)]["start_s"]  # side by side
    assert float(stages[(0, 1)]["start_s"]) >= float(stages[(0, 0)]["finish_s"])
    for name in ("stages", "jobs", "tasks"):
        for row in read_csv(run_dir / f"{name}.csv"):
            assert float(row["ratio_to_bound"]) >= 1.0, (name, row)
    timeline = Timeline.read(run_dir / "timeline.json")
    assert "task 0 bracket 1 stage 0" in timeline.stages.values()
    nothing_left_behind(out)


@pytest.mark.parametrize(
    "script, module, stopped",
    [("hpo-optuna", "experiments.optuna_hpo", "PRUNED"),
     ("hpo-tune", "experiments.tune_hpo", "STOPPED")],
)  # fmt: skip
def test_a_frameworks_study_trains_its_trials_on_the_testbed(tmp_path, script, module, stopped):
    """``hpo-optuna`` / ``hpo-tune --backend testbed``: an Optuna study's or a Ray Tune study's
    trials run as workers on the Mininet testbed, registered with the controller; Optuna's
    pruner prunes (Tune's ASHA stops) some after a rung, and their workers train no further;
    every trial is told; nothing is left behind."""
    out = tmp_path / script
    run = subprocess.run(
        [*command(script, module), "--backend", "testbed", "--hosts", "6",
         "--workers", "2", "--trials", "6", "--parallel", "3", "--min-iterations", "2",
         "--link-gbps", "10", "--policy", "beamer", "--timeout", "240", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "best trial #" in run.stdout
    run_dir = out / "beamer" / "seed-1"
    trials = read_csv(run_dir / "trials.csv")
    assert len(trials) == 6 and {t["state"] for t in trials} <= {"COMPLETE", stopped}
    assert any(t["state"] == stopped for t in trials)
    assert any(t["state"] == "COMPLETE" for t in trials)
    trained = {c["config"]: int(c["trained"]) for c in read_csv(run_dir / "configs.csv")}
    for trial in trials:  # a stopped trial's workers stopped at the rung it was stopped at
        assert trained[trial["config"]] == int(trial["last_step"])
    # and its job left the controller's plan when it ended, though its rung went on: no level
    # (DSCP mark, HTB class) is held for it after its end (the plan is sampled every 0.5 s)
    finish = {int(j["job_id"]): float(j["finish_s"]) for j in read_csv(run_dir / "jobs.csv")}
    timeline = Timeline.read(run_dir / "timeline.json")
    assert {s.job_id for s in timeline.spans} == set(finish)
    for span in timeline.spans:
        assert span.end_s <= finish[span.job_id] + 1.0, span
    result = json.loads((run_dir / "result.json").read_text())
    assert result["controller"]["switch_errors"] == 0
    assert result["simulated"]["hpo_completion_s"]["mean"] > 0  # the prediction beside it
    summary = json.loads((out / "summary.json").read_text())
    assert [r["trials"] for r in summary["runs"]["beamer"]] == [6]
    if script == "hpo-tune":
        assert (run_dir / "tune" / "beamer-study0-seed1").is_dir()  # Tune's own record
    nothing_left_behind(out)


def test_calibrated_run_with_host_priorities(tmp_path):
    """``--calibrate`` measures the testbed's overheads first (hpo-calibrate at a small
    size) and predicts with them; with ``--host-priorities`` the hosts' egress serves the levels
    and their bytes per class are counted."""
    out = tmp_path / "testbed"
    run_testbed(
        out, "--hosts", "4", "--tasks", "1", "--configs", "3", "--timeout", "240", "--eta", "3",
        "--min-iterations", "1", "--policy", "sincronia", "--host-priorities", "--calibrate",
        "--calibration-iterations", "5", "--calibration-repeats", "2",
    )  # fmt: skip
    measured = json.loads((out / "calibration" / "calibration.json").read_text())
    lone = measured["lone_jobs"]["ring"]
    # the testbed is never faster than the fluid model of the same lone job
    assert lone["testbed_iteration_s"] >= lone["simulated_iteration_s"] * 0.98
    # the goodput is the mean of the lone job's repeats, each run in its own testbed
    repeats = [entry["goodput"] for entry in lone["repeats"]]
    assert len(repeats) == 2 and lone["goodput"] == pytest.approx(sum(repeats) / 2)
    assert lone["goodput_ci95"] >= 0
    for n in (1, 2):
        assert (out / "calibration" / f"lone-ring-{n}" / "iterations.csv").exists()
    overheads = measured["overheads"]
    assert 0.5 < overheads["goodput"] <= 1.0 and 0 < overheads["job_startup_s"] < 10
    assert measured["burst_job_startup_s"]["count"] >= 3
    assert len(measured["provenance"]["git_commit"]) == 40

    [result] = json.loads((out / "results.json").read_text())
    assert result["host_priorities"] and result["host_filter_updates"] >= 1
    assert result["overheads"] == overheads
    raw, calibrated = result["simulated"]["sct_s"]["mean"], result["simulated_calibrated"]
    assert calibrated["sct_s"]["mean"] > raw  # the overheads only add time
    per_class = result["host_bytes_per_class"]
    job_bytes = sum(per_class.get(level_classid(level), 0) for level in range(7))
    assert job_bytes >= 0.9 * sum(per_class.values()), per_class  # the hosts classified them
    summary = json.loads((out / "summary.json").read_text())
    assert summary["host_priorities"] and summary["overheads"] == overheads
    assert summary["policies"]["sincronia"]["calibrated_sim_avg_sct_s"]["n"] == 1
    rows = read_csv(out / "sincronia" / "seed-1" / "iterations.csv")
    assert {r["rank"] for r in rows} == {"0", "1", "2"}
    assert all(float(r["sync_s"]) > 0 for r in rows)
    assert subprocess.run(["ovs-vsctl", "br-exists", "s1"]).returncode == 2


def mininet_shells() -> set[int]:
    """Process ids of the Mininet node shells (``bash ... mininet:<node>``) on the machine (read
    only: this test must not touch another run's)."""
    ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return {int(line.split()[0]) for line in ps.splitlines() if "mininet:" in line}


def controller_of(run_pid: int) -> int:
    """The PID of the ``python -m controller`` that the run ``run_pid`` started."""
    ps = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    for line in ps.splitlines():
        pid, ppid, args = line.split(None, 2)
        if int(ppid) == run_pid and "-m controller" in args:
            return int(pid)
    raise AssertionError(f"run {run_pid} has no controller running")


def read_until(run: subprocess.Popen, lines: list[str], words: str) -> float:
    """Read the run's output into ``lines`` until a line has ``words``; when it came."""
    for line in run.stdout:
        lines.append(line)
        if words in line:
            return time.monotonic()
    raise AssertionError(f"{words!r} never came:\n" + "".join(lines[-30:]))


def test_faults_end_one_run_each_and_a_second_testbed_is_refused(tmp_path, report):
    """Faults on the real testbed: a second experiment on the machine is refused at once
    (naming the holder) instead of deleting the live switch; deleting the switch under the
    first policy, and killing the controller under the second, each end that run within 5 s
    with a message naming what is gone; the third policy still runs and its results are kept;
    nothing is left behind."""
    out = tmp_path / "faults"
    shells_before = mininet_shells()
    argv = [*command("hpo-testbed", "experiments.run_testbed"), "--hosts", "4", "--tasks", "1",
            "--configs", "3", "--eta", "3", "--min-iterations", "20", "--workers", "2", "--policy",
            "fair", "jpas", "sincronia", "--timeout", "300", "--link-gbps", "10", "--retries", "0",
            "--out", str(out)]  # fmt: skip
    run = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)  # fmt: skip
    lines: list[str] = []
    try:
        read_until(run, lines, "stage 0:")  # the first policy's first stage runs
        second = subprocess.run([*argv[:-1], str(tmp_path / "second")], cwd=ROOT,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert second.returncode == 1
        assert f"another testbed run holds /run/hpo-testbed.lock (pid {run.pid}" in second.stderr
        assert subprocess.run(["ovs-vsctl", "br-exists", "s1"]).returncode == 0  # still there

        deleted_at = time.monotonic()
        subprocess.run(["ovs-vsctl", "del-br", "s1"], check=True)
        switch_noticed = read_until(run, lines, "!! fair, seed 1 failed") - deleted_at
        assert "the switch s1 was deleted" in lines[-1]

        read_until(run, lines, "stage 0:")  # jpas
        controller = controller_of(run.pid)
        killed_at = time.monotonic()
        os.kill(controller, signal.SIGKILL)
        controller_noticed = read_until(run, lines, "!! jpas, seed 1 failed") - killed_at
        assert f"the controller (pid {controller}) exited with status -9" in lines[-1]

        lines += run.stdout.readlines()
        assert run.wait(timeout=300) == 1, "".join(lines[-30:])
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(timeout=60)
    report("switch deleted -> run ended (s)", switch_noticed)
    report("controller killed -> run ended (s)", controller_noticed)
    assert switch_noticed < 5.0 and controller_noticed < 5.0
    text = "".join(lines)
    assert "FAILED: fair, seed 1: the switch s1 was deleted" in text
    assert "FAILED: jpas, seed 1: the controller" in text
    results = json.loads((out / "results.json").read_text())
    assert [r["policy"] for r in results] == ["sincronia"]
    failures = json.loads((out / "summary.json").read_text())["failures"]
    assert [(f["policy"], f["seed"]) for f in failures] == [("fair", 1), ("jpas", 1)]
    assert json.loads((out / "failures.json").read_text()) == failures
    # the run that failed inside the driver kept what every host's TCP saw
    tcp = json.loads((out / "fair" / "seed-1" / "tcp.json").read_text())
    assert sorted(tcp) == ["h1", "h2", "h3", "h4"]
    assert all(set(counters) >= {"OutSegs", "EstabResets", "TCPAbortOnMemory"}
               for counters in tcp.values())  # fmt: skip
    assert sum(counters["OutSegs"] for counters in tcp.values()) > 0
    assert mininet_shells() - shells_before == set()
    assert subprocess.run(["ovs-vsctl", "br-exists", "s1"]).returncode != 0
