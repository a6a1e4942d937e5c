"""The testbed's measured overheads in the simulator, and the testbed's diagnostics."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import pytest

from controller.policies import make_policy
from experiments import run_testbed, testbed_run
from experiments.testbed_counters import TCP_COUNTERS, parse_tcp_counters
from experiments.testbed_prediction import simulate
from experiments.testbed_results import seed_summary
from experiments.testbed_settings import settings_of, workload
from simulator.calibration import Overheads
from simulator.engine import Fabric, Simulator
from simulator.hpo import HpoDriver
from workloads.hpo import generate

ROOT = Path(__file__).resolve().parents[2]


def test_overheads_load_and_refuse_nonsense(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"overheads": {"job_startup_s": 1.5, "goodput": 0.93}}))
    assert Overheads.load(path) == Overheads(1.5, 0.93)
    for text, message in (
        ("{", "not JSON"),
        ("[]", "expected"),
        ('{"overheads": {"goodput": 0.9}}', "expected"),
        ('{"overheads": {"job_startup_s": "1", "goodput": 0.9}}', "numbers"),
        ('{"overheads": {"job_startup_s": 1, "goodput": 1.5}}', "goodput"),
        ('{"overheads": {"job_startup_s": -1, "goodput": 0.5}}', "job_startup_s"),
        ('{"overheads": {"job_startup_s": NaN, "goodput": 0.5}}', "job_startup_s"),
    ):
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            Overheads.load(path)


def test_overheads_slow_the_prediction_by_what_they_say():
    # a lone ring job: goodput g stretches only its network time, start-up adds once
    tasks = generate(6, 1, seed=3, configs_per_task=1, min_iterations=10, patterns=("ring",))
    settings = settings_of(run_testbed.build_parser().parse_args(["--hosts", "6", "--bw", "20"]))
    raw = simulate("fair", settings, tasks)
    calibrated = simulate("fair", settings, tasks, overheads=Overheads(2.0, 0.8))
    sim = Simulator(Fabric(6, 20e6), make_policy("fair"))
    driver = HpoDriver(sim, tasks)
    sim.run()
    (job,) = driver.jobs.values()
    compute = tasks[0].model.compute_s * job.iterations
    network = job.finish_s - job.start_s - compute
    assert raw["sct_s"]["mean"] == pytest.approx(compute + network)
    assert calibrated["sct_s"]["mean"] == pytest.approx(2.0 + compute + network / 0.8)
    # stage by stage too: one stage here, with the same SCT
    (stage_sct,) = calibrated["stage_sct_s"].values()
    assert stage_sct == pytest.approx(calibrated["sct_s"]["mean"])


def test_tcp_counters_are_read_from_proc_text():
    text = (
        "Ip: Forwarding DefaultTTL\nIp: 1 64\n"
        "Tcp: RtoAlgorithm OutSegs RetransSegs\nTcp: 1 1000 12\n"
        "TcpExt: SyncookiesSent TCPTimeouts TCPLossProbes TCPAbortOnMemory\nTcpExt: 0 3 7 2\n"
    )
    counters = parse_tcp_counters(text)
    assert set(counters) == set(TCP_COUNTERS)
    assert {k: v for k, v in counters.items() if v} == {
        "RetransSegs": 12,
        "OutSegs": 1000,
        "TCPTimeouts": 3,
        "TCPLossProbes": 7,
        "TCPAbortOnMemory": 2,
    }


def test_the_seed_summary_reports_the_calibrated_prediction_beside_the_raw_one():
    def run(policy, seed, bed, sim, calibrated):
        return {
            "policy": policy,
            "seed": seed,
            "sct_s": {"mean": bed},
            "time_to_90pct_s": {"mean": 1.0},
            "best_identified_s": {"mean": 1.0},
            "hpo_completion_s": {"mean": 1.0},
            "busiest_port_busy": 0.7,
            "simulated": {"sct_s": {"mean": sim}},
            "simulated_calibrated": {"sct_s": {"mean": calibrated}},
        }

    results = [run("fair", 1, 10.0, 8.0, 9.5), run("fair", 2, 20.0, 16.0, 19.0),
               run("beamer", 1, 9.0, 7.0, 9.5), run("beamer", 2, 18.0, 14.0, 17.1)]  # fmt: skip
    argv = ["--seeds", "1", "2", "--models", "resnet50", "--tcp-rto-max-ms", "1000"]
    settings = settings_of(run_testbed.build_parser().parse_args(argv), None, Overheads(1.0, 0.9))
    summary = seed_summary(results, settings, argv)
    fair = summary["policies"]["fair"]
    assert fair["sim_over_testbed_avg_sct"]["mean"] == pytest.approx(0.8)
    assert fair["calibrated_sim_over_testbed_avg_sct"]["mean"] == pytest.approx(0.95)
    assert fair["calibrated_sim_avg_sct_s"]["mean"] == pytest.approx(14.25)
    assert summary["overheads"] == {"job_startup_s": 1.0, "goodput": 0.9}
    assert summary["tcp_rto_max_ms"] == 1000 and summary["host_priorities"] is True
    # beamer / fair paired per seed: 0.9 on the testbed; as calibrated, 1.0 and 0.9
    beamer = summary["policies"]["beamer"]
    assert beamer["avg_sct_vs_baseline"]["mean"] == pytest.approx(0.9)
    predicted = beamer["calibrated_sim_avg_sct_vs_baseline"]
    assert predicted["mean"] == pytest.approx(0.9**0.5) and predicted["n"] == 2
    assert predicted["low"] < 0.9 < 1.0 < predicted["high"]


# as the console script and as python -m record themselves
STARTED_AS = ["/x/.venv/bin/hpo-testbed", "/x/experiments/run_testbed.py"]


@pytest.mark.parametrize("started_as", STARTED_AS)
def test_stage_agreement_matches_stages_by_task_and_index(tmp_path, started_as):
    """hpo-stage-agreement replays a finished experiment's workload from its command line
    (as the console script or ``python -m`` recorded it) and overheads and pairs each stage of
    a run with the simulator's same stage."""
    from experiments import stage_agreement

    command = ["/x/.venv/bin/python", started_as, "--policy", "fair", "beamer", "--seeds", "4",
               "--hosts", "6", "--tasks", "2", "--configs", "3",
               "--min-iterations", "2"]  # fmt: skip
    summary = {"provenance": {"command": command},
               "overheads": {"job_startup_s": 1.0, "goodput": 0.9}}  # fmt: skip
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    settings = settings_of(run_testbed.build_parser().parse_args(command[2:]))
    predicted = simulate("fair", settings, workload(settings, 4), "none",
                         Overheads(1.0, 0.9))["stage_sct_s"]  # fmt: skip
    run = tmp_path / "fair" / "seed-4"
    run.mkdir(parents=True)
    with open(run / "stages.csv", "w") as f:  # the testbed twice as slow, stages out of order
        f.write("task_id,index,jobs,sct_s\n")
        for key, sct in reversed(list(predicted.items())):
            task, index = key.split(".")
            f.write(f"{task},{index},3,{2 * sct}\n")
    ((policy, seed, rows),) = stage_agreement.predictions(tmp_path)  # beamer's run is missing
    assert (policy, seed) == ("fair", 4) and len(rows) == len(predicted) >= 4
    in_order = sorted(predicted, key=lambda key: tuple(map(int, key.split("."))))
    assert [key for key, *_ in rows] == in_order
    for _key, _jobs, bed, sim in rows:
        assert sim / bed == pytest.approx(0.5)


def test_a_failed_run_is_tried_again_in_a_fresh_testbed_and_its_files_kept(tmp_path, monkeypatch):
    attempts = []

    def flaky(settings, run):
        attempts.append(run.out)
        run.out.mkdir(parents=True, exist_ok=True)
        (run.out / "tcp.json").write_text(str(len(attempts)))
        if len(attempts) == 1:
            raise RuntimeError("job 3 rank 1: [Errno 104] Connection reset by peer")
        return {"policy": run.policy}

    monkeypatch.setattr(testbed_run, "run_policy", flaky)
    out = tmp_path / "fair" / "seed-1"
    run = testbed_run.Run("fair", out, seed=1)
    result, failed = testbed_run.run_with_retries(Namespace(retries=1), run)
    assert attempts == [out, out]
    assert failed == ["job 3 rank 1: [Errno 104] Connection reset by peer"]
    assert result == {"policy": "fair", "failed_attempts": failed}
    # result.json says so too: a resumed experiment reports the attempts its kept run failed
    assert json.loads((out / "result.json").read_text())["failed_attempts"] == failed
    assert (out / "tcp.json").read_text() == "2"  # the retry's own files
    assert (tmp_path / "fair" / "seed-1-failed-1" / "tcp.json").read_text() == "1"
    attempts.clear()
    with pytest.raises(RuntimeError, match="Connection reset"):
        run = testbed_run.Run("fair", tmp_path / "other", seed=1)
        testbed_run.run_with_retries(Namespace(retries=0), run)
    assert len(attempts) == 1


def test_calibration_simulates_its_lone_job_on_the_cluster_the_predictions_model():
    """On an oversubscribed leaf-spine a lone job whose ring crosses leaves is slower than on a
    big switch: calibration must compare the testbed with that fabric's time, or the
    fabric's loss would be counted as lost goodput and then again by the prediction."""
    from experiments import calibrate

    argv = ["--topology", "leaf-spine", "--leaves", "3", "--hosts-per-leaf", "4", "--spines",
            "2", "--oversubscription", "4", "--workers", "4", "--bw", "20"]  # fmt: skip
    settings = settings_of(run_testbed.build_parser().parse_args(argv))
    assert settings.cluster.oversubscription > 1
    slower = 0
    for seed in range(1, 6):
        tasks = calibrate.lone_job(settings, seed, "ring", 5)
        on_cluster = calibrate.simulated_iteration_s(settings, tasks)
        sim = Simulator(Fabric(settings.cluster.hosts, settings.cluster.link_bps),
                        make_policy("fair"))  # fmt: skip
        driver = HpoDriver(sim, calibrate.lone_job(settings, seed, "ring", 5))
        sim.run()
        (job,) = driver.jobs.values()
        big_switch = (job.finish_s - job.start_s) / job.iterations
        assert on_cluster >= big_switch * (1 - 1e-9)
        slower += on_cluster > big_switch * 1.01
    assert slower >= 1
