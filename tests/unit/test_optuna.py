"""Optuna studies drive HPO tasks in the simulator (workloads.optuna_search): deterministic for
a seed, pruned by Optuna's own pruners, and nothing of a pruned trial left running."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from controller.policies import make_policy
from simulator.engine import Fabric, Simulator
from simulator.hpo import HpoDriver
from workloads.optuna_search import best_trial, optuna_tasks, trial_rows

ROOT = Path(__file__).resolve().parents[2]
optuna.logging.set_verbosity(optuna.logging.WARNING)


def run(policy: str = "beamer", pruner: str = "halving", seed: int = 1, studies: int = 1):
    tasks = optuna_tasks(studies, seed, n_hosts=6, n_trials=9, parallel=4, pruner=pruner,
                         min_iterations=2, workers=2)  # fmt: skip
    sim = Simulator(Fabric(6, 1e9), make_policy(policy))
    driver = HpoDriver(sim, tasks)
    sim.run()
    return tasks, driver, sim


@pytest.mark.parametrize("pruner", ["halving", "hyperband"])
def test_a_short_study_is_deterministic_for_a_seed(pruner):
    first, driver, _ = run(pruner=pruner)
    again, driver_again, _ = run(pruner=pruner)
    assert [trial_rows(t) for t in first] == [trial_rows(t) for t in again]
    best = [best_trial(t, driver.job_rows()) for t in first]
    assert best == [best_trial(t, driver_again.job_rows()) for t in again]
    assert driver.stage_rows() == driver_again.stage_rows()
    rows = trial_rows(first[0])
    assert len(rows) == 9  # every trial was asked for
    assert {r["state"] for r in rows} <= {"COMPLETE", "PRUNED"}  # and told
    assert any(r["state"] == "PRUNED" for r in rows)  # the pruner pruned
    assert best[0] is not None and best[0]["found_s"] > 0
    other, _, _ = run(pruner=pruner, seed=2)
    assert trial_rows(other[0]) != rows  # the seed matters


def test_trials_are_jobs_and_rungs_are_stages_and_pruned_trials_leave_nothing():
    (task,), driver, sim = run(studies=1)
    assert driver.core.finished and not sim._active_slots
    assert all(j["finish_s"] is not None for j in driver.job_rows())  # no job left running
    assert driver._model_jobs == {} and driver._model_stages == {}  # nothing left for policies
    steps = [sum(n for _, n in task.plan[: k + 1]) for k in range(len(task.plan))]
    trained = {r["config"]: r["trained"] for r in driver.config_rows()}
    for row in trial_rows(task):
        # a trial trained exactly to the rung it was last reported at, not one iteration more
        assert row["last_step"] in steps and trained[row["config"]] == row["last_step"]
        if row["state"] == "COMPLETE":
            assert row["last_step"] == steps[-1]
    for stage in driver.stage_rows():
        assert stage["sct_s"] >= stage["bound_s"] * (1 - 1e-6)
    (task_row,) = driver.task_rows()
    assert task_row["hpo_completion_s"] >= task_row["bound_s"] * (1 - 1e-6)


def test_the_script_prints_the_best_trial_and_writes_the_result_files(tmp_path):
    out = tmp_path / "optuna"
    argv = [sys.executable, "scripts/optuna_hpo.py", "--trials", "6", "--parallel", "3",
            "--hosts", "6", "--min-iterations", "2", "--policy", "beamer",
            "--out", str(out)]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "best trial #" in done.stdout
    for name in ("stages", "jobs", "configs", "tasks", "coflows", "trials"):
        assert (out / "seed-1" / f"{name}-beamer.csv").stat().st_size > 0
    assert (out / "summary.json").is_file()
    assert "best trial at s" in done.stdout  # the seed table
    bad = subprocess.run([*argv[:2], "--trials", "0"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "--trials" in bad.stderr and "Traceback" not in bad.stderr


def test_the_docs_example_runs():
    text = (ROOT / "docs" / "simulator.md").read_text()
    block = text.split("<!-- optuna-example")[1].split("```python\n")[1].split("```")[0]
    namespace: dict = {}
    exec(compile(block, "docs/simulator.md (optuna example)", "exec"), namespace)
    study, driver = namespace["study"], namespace["driver"]
    assert study.best_trial is not None and driver.core.finished
    assert len(study.trials) == 27


@pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None,
    reason="the LCBench surrogate needs onnxruntime (pip install .[yahpo])",
)
def test_lcbench_curves_give_the_sampled_hyper_parameters_their_meaning():
    """With the surrogate, a trial's parameters are the LCBench MLP's, within its space, and
    its curve is the surrogate's accuracy for them: the same parameters, the same curve."""
    from workloads.optuna_search import LcBenchSpace
    from workloads.yahpo import LcBench

    lcbench = LcBench()  # the bundled surrogate
    space = LcBenchSpace(lcbench)

    def study_run():
        tasks = optuna_tasks(1, 3, n_hosts=6, n_trials=6, parallel=3, min_iterations=2,
                             workers=2, space=space)  # fmt: skip
        sim = Simulator(Fabric(6, 1e9), make_policy("fair"))
        driver = HpoDriver(sim, tasks)
        sim.run()
        return tasks[0], driver

    task, driver = study_run()
    again, _ = study_run()
    assert trial_rows(task) == trial_rows(again)
    for row, curve in zip(trial_rows(task), task.curves, strict=True):
        params = {k[len("param_") :]: v for k, v in row.items() if k.startswith("param_")}
        assert set(params) == set(lcbench.space) - {"OpenML_task_id", "epoch"}
        for name, value in params.items():
            low, high = float(lcbench.space[name]["lower"]), float(lcbench.space[name]["upper"])
            assert low <= value <= high, name
        expected = LcBenchSpace(lcbench).suggest(
            optuna.trial.FixedTrial(params), max_iterations=sum(n for _, n in task.plan)
        )
        assert curve == expected
    assert best_trial(task, driver.job_rows())["value"] > 0.3
