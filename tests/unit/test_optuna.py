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
    argv = [sys.executable, "-m", "experiments.optuna_hpo", "--trials", "6", "--parallel", "3",
            "--hosts", "6", "--min-iterations", "2", "--policy", "beamer",
            "--out", str(out)]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "best trial #" in done.stdout
    for name in ("stages", "jobs", "configs", "tasks", "coflows", "trials"):
        assert (out / "seed-1" / f"{name}-beamer.csv").stat().st_size > 0
    assert (out / "summary.json").is_file()
    assert "best trial at s" in done.stdout  # the seed table
    bad = subprocess.run([*argv[:3], "--trials", "0"], cwd=ROOT, capture_output=True, text=True)
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


# ---- Optuna as its users expect: storages, samplers, plots, run_study --------------------------

SMALL = {"n_trials": 9, "parallel": 3, "hosts": 6, "workers": 2, "min_iterations": 2}


def small_run(**settings):
    from experiments.optuna_study import run_study

    return run_study(**{"policy": "beamer", **SMALL, **settings})


def journal(path: Path) -> optuna.storages.BaseStorage:
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))


@pytest.mark.parametrize("kind", ["sqlite", "journal:", ".log", ".jsonl"])
def test_a_stored_study_holds_every_trial_and_its_rungs(tmp_path, kind):
    """Optuna (and so optuna-dashboard and the optuna command) loads the study from the storage:
    every trial, its state, parameters and every rung's accuracy, as the run had them; a
    storage changes nothing of the run."""
    if kind == "sqlite":
        url, reopen = f"sqlite:///{tmp_path}/studies.db", f"sqlite:///{tmp_path}/studies.db"
    elif kind == "journal:":
        url, reopen = f"journal:{tmp_path}/studies", journal(tmp_path / "studies")
    else:
        url, reopen = str(tmp_path / f"studies{kind}"), journal(tmp_path / f"studies{kind}")
    run = small_run(storage=url, studies=2)
    assert optuna.get_all_study_names(reopen) == ["beamer-study0-seed1", "beamer-study1-seed1"]
    for task in run.tasks:
        loaded = optuna.load_study(study_name=task.search.study.study_name, storage=reopen)
        assert len(loaded.trials) == 9
        assert [t.state for t in loaded.trials] == [t.state for t in task.search.study.trials]
        for row in trial_rows(task):
            stored = loaded.trials[row["trial"]]
            assert stored.params == {k[6:]: v for k, v in row.items() if k.startswith("param_")}
            assert stored.last_step == row["last_step"]
            assert stored.intermediate_values  # every rung's accuracy, reported
            assert stored.intermediate_values[row["last_step"]] == pytest.approx(row["value"])
        assert loaded.best_trial.number == run.best[task.task_id]["trial"]
    in_memory = small_run(studies=2)
    assert [trial_rows(t) for t in in_memory.tasks] == [trial_rows(t) for t in run.tasks]


def test_a_rerun_into_the_same_storage_is_refused_naming_the_study(tmp_path):
    from workloads.optuna_search import OptunaSetupError

    url = f"sqlite:///{tmp_path}/studies.db"
    small_run(storage=url, n_trials=3)
    with pytest.raises(OptunaSetupError, match="'beamer-study0-seed1' already exists"):
        small_run(storage=url, n_trials=3)
    small_run(storage=url, n_trials=3, seed=2)  # another seed: other names


def test_the_command_refuses_a_bad_or_used_storage_in_one_line(tmp_path, capsys):
    from experiments import optuna_hpo

    used = f"sqlite:///{tmp_path}/used.db"
    optuna.create_study(storage=used, study_name="fair-study0-seed1")
    cases = [
        ("foo://nowhere", "storage 'foo://nowhere'"),
        ("not-a-url", "neither a database URL"),
        (f"sqlite:///{tmp_path}/no/such/dir/x.db", "unable to open database file"),
        (f"journal:{tmp_path}/no/such/dir/x.log", "No such file or directory"),
        ("journal:", "no file after journal:"),
        (used, "study 'fair-study0-seed1' already exists in storage"),
    ]
    for url, words in cases:
        with pytest.raises(SystemExit) as ended:
            optuna_hpo.main(["--policy", "beamer", "fair", "--storage", url])
        assert ended.value.code == 2, url
        err = capsys.readouterr().err
        assert "Traceback" not in err
        last = err.strip().splitlines()[-1]
        assert ": error: --storage: " in last and words in last, err
    assert optuna.get_all_study_names(used) == ["fair-study0-seed1"]  # nothing added to it


@pytest.mark.parametrize("sampler", ["tpe", "random", "cmaes", "qmc", "gp"])
def test_every_sampler_is_deterministic_for_a_seed_or_names_what_to_install(sampler, capsys):
    from experiments import optuna_hpo
    from workloads.optuna_search import (
        SAMPLERS,
        OptunaSetupError,
        make_sampler,
        missing_packages,
    )

    assert sampler in SAMPLERS
    if missing := missing_packages(sampler):
        with pytest.raises(OptunaSetupError, match=f"pip install {' '.join(missing)}"):
            make_sampler(sampler, 1)
        with pytest.raises(SystemExit) as ended:
            optuna_hpo.main(["--sampler", sampler])
        assert ended.value.code == 2
        (line,) = [x for x in capsys.readouterr().err.splitlines() if "error" in x]
        assert f"sampler {sampler!r} needs {missing[0]}" in line
        return
    first, again, other = small_run(sampler=sampler), small_run(sampler=sampler), None
    assert [trial_rows(t) for t in first.tasks] == [trial_rows(t) for t in again.tasks]
    assert first.best == again.best and first.best[0] is not None
    other = small_run(sampler=sampler, seed=2)
    assert trial_rows(other.tasks[0]) != trial_rows(first.tasks[0])  # the seed matters


def test_run_study_takes_a_suggest_function_and_optuna_objects():
    from workloads.curves import LearningCurve

    def suggest(trial, max_iterations):
        layers = trial.suggest_int("layers", 1, 4)
        return LearningCurve(0.9 - 0.1 * abs(layers - 2), max_iterations / 3)

    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=2, reduction_factor=3)
    run = small_run(space=suggest, sampler=optuna.samplers.RandomSampler(seed=3), pruner=pruner,
                    label="mine")  # fmt: skip
    (study,) = run.studies
    assert study.study_name == "mine-study0-seed1" and study.pruner is pruner
    assert {row["param_layers"] for row in run.rows["trials"]} <= {1, 2, 3, 4}
    assert set(run.rows) == {"stages", "jobs", "configs", "tasks", "coflows", "trials"}
    assert run.result["trials"] == 9 and run.best[0]["value"] <= 0.9


def test_optunas_plots_are_written_and_those_that_do_not_apply_noted(tmp_path, monkeypatch):
    from experiments.optuna_study import PLOTS, write_plots

    run = small_run(pruner="hyperband", label="fair")  # hyperband completes several trials
    assert write_plots(run.studies, tmp_path) == []
    for kind in PLOTS:
        assert (tmp_path / f"fair-study0-seed1-{kind}.png").stat().st_size > 0
    # a missing package (scikit-learn for fANOVA, say) or a refusal: a one-line note, no crash
    from optuna.visualization import matplotlib as plots

    def missing(study):
        raise ImportError("Tried to import 'sklearn' but failed.\nPlease install it.")

    monkeypatch.setattr(plots, "plot_param_importances", missing)
    empty = optuna.create_study(study_name="empty")
    notes = write_plots([*run.studies, empty], tmp_path / "again")
    sklearn = "Tried to import 'sklearn' but failed."
    assert notes[0] == f"fair-study0-seed1: no importances plot ({sklearn})"
    assert all(n.startswith("empty: no ") for n in notes[1:]) and len(notes) == 5
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == [
        "fair-study0-seed1-history.png", "fair-study0-seed1-intermediate.png",
        "fair-study0-seed1-parallel.png"]  # fmt: skip


def test_the_command_keeps_its_studies_and_writes_their_plots(tmp_path, capsys):
    from experiments import optuna_hpo

    url = f"sqlite:///{tmp_path}/studies.db"
    out = tmp_path / "out"
    argv = ["--trials", "6", "--parallel", "3", "--hosts", "6", "--min-iterations", "2",
            "--policy", "beamer", "fair", "--storage", url, "--out", str(out)]  # fmt: skip
    assert optuna_hpo.main(argv) == 0
    printed = capsys.readouterr().out
    assert "ratios to fair's paired per seed" in printed  # fair is the baseline by default
    assert optuna.get_all_study_names(url) == ["beamer-study0-seed1", "fair-study0-seed1"]
    for label in ("beamer", "fair"):
        assert (out / "seed-1" / "plots" / f"{label}-study0-seed1-history.png").is_file()
    assert (out / "seed-1" / "trials-fair.csv").is_file()


def test_fair_is_the_default_baseline():
    from experiments.optuna_hpo import default_baseline

    assert default_baseline(["beamer", "fair"], ["none"]) == "fair"
    assert default_baseline(["beamer", "fair"], ["hermes", "none"]) == "fair+hermes"
    assert default_baseline(["beamer", "sincronia"], ["none"]) == "beamer"


def test_a_testbed_retry_replaces_the_failed_attempts_studies_in_the_storage(tmp_path):
    """The testbed's studies go to the storage; the simulator's prediction's stay in memory,
    and a failed attempt's are replaced by the next attempt's (so the names stay unique)."""
    from experiments.optuna_study import StudiesMade

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/studies.db")

    def make(link_scale, keep):
        return optuna_tasks(1, 1, n_hosts=6, n_trials=3, parallel=3, min_iterations=2,
                            workers=2, storage=storage if keep else None, run="beamer")  # fmt: skip

    made = StudiesMade(make, 1.0, storage)
    failed = made("testbed")
    failed[0].search.study.ask()  # the failed attempt got as far as a trial
    made("prediction")
    kept = made("testbed")
    assert kept is made.testbed and kept is not failed
    (loaded,) = storage.get_all_studies()
    assert loaded.study_name == "beamer-study0-seed1"
    assert optuna.load_study(study_name=loaded.study_name, storage=storage).trials == []


def test_the_testbed_run_gets_run_testbeds_own_flags(tmp_path):
    """run_study(backend="testbed") hands its settings to hpo-testbed's parser (the
    testbed itself needs root: tests/integration)."""
    from experiments import run_testbed
    from experiments.optuna_study import testbed_argv, testbed_flags

    settings = testbed_flags(hosts=6, workers=2, eta=3, min_iterations=2, link_bps=10e9,
                             emulated_link_bps=20e6, timeout=600.0, gpus_per_host=1,
                             quantum=5.0)  # fmt: skip
    assert settings == {"hosts": 6, "workers": 2, "eta": 3, "min_iterations": 2,
                        "link_gbps": 10.0, "bw": 20.0, "timeout": 600.0, "gpus_per_host": 1,
                        "quantum": 5.0}  # fmt: skip
    args = run_testbed.build_parser().parse_args(testbed_argv(settings, tmp_path / "run"))
    assert {key: getattr(args, key) for key in settings} == settings
    assert args.out == tmp_path / "run"
