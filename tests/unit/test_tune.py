"""Ray Tune studies drive HPO tasks on the simulated cluster (workloads.tune_search): Tune's own
schedulers decide on the rungs, a seed gives the same run however fast Tune was, and the command
writes the result files of the other experiments."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.hpo import stage_plan
from workloads.optuna_search import LcBenchSpace
from workloads.tune_search import (
    TIME_ATTR,
    TuneSetupError,
    lcbench_space,
    make_scheduler,
    make_searcher,
)
from workloads.yahpo import CONTINUOUS, LcBench, YahpoError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ray_session():
    """Ray in this process for the test, shut down after it (the sweeps' tests start their
    own)."""
    import ray

    yield
    ray.shutdown()


def steps_of(plan: list[tuple[int, int]]) -> list[int]:
    """Cumulative iterations at every rung's end."""
    return [sum(added for _, added in plan[: k + 1]) for k in range(len(plan))]


def test_the_schedulers_milestones_are_the_rungs_ends():
    plan = stage_plan(9, 3, 2)  # rungs end at 2, 6, 18 iterations: budgets 1, 3, 9
    asha = make_scheduler("asha", 3, len(plan))
    assert asha._time_attr == TIME_ATTR and asha._max_t == 9
    (bracket,) = asha._brackets
    assert sorted(milestone for milestone, _ in bracket._rungs) == [1, 3, 9]
    hyperband = make_scheduler("hyperband", 3, len(plan))
    assert hyperband._s_max_1 == 3  # brackets starting at budgets 9, 3 and 1: rung ends
    assert [hyperband._get_r0(s) for s in range(3)] == [9, 3, 1]
    # the searchers are seeded by the study's seed: another seed, other samples
    import optuna

    firsts = []
    for seed in (1, 2):
        sampler = make_searcher("optuna", seed)._sampler
        study = optuna.create_study(sampler=sampler)
        firsts.append(study.ask().suggest_float("x", 0.0, 1.0))
    assert firsts[0] != firsts[1]
    draws = [make_searcher("random", seed)._random_state.uniform(0, 1) for seed in (1, 1, 2)]
    assert draws[0] == draws[1] != draws[2]
    with pytest.raises(TuneSetupError, match="scheduler must be one of asha, hyperband"):
        make_scheduler("pbt", 3, 3)
    with pytest.raises(TuneSetupError, match="searcher must be one of random, optuna"):
        make_searcher("hyperopt", 1)


def test_the_lcbench_space_is_the_surrogates_configuration_space():
    try:
        space = LcBenchSpace(LcBench())
    except YahpoError as exc:
        pytest.skip(f"no LCBench surrogate: {exc}")
    params = lcbench_space(space)
    assert list(params) == list(CONTINUOUS[1:])
    for name, domain in params.items():
        h = space.lcbench.space[name]
        assert domain.lower == pytest.approx(float(h["lower"]))
        # Tune's integer upper bound is exclusive: the surrogate's is inclusive
        upper = float(h["upper"]) + (1 if h["type"] == "uniform_int" else 0)
        assert domain.upper == pytest.approx(upper)


def run(scheduler: str = "asha", searcher: str = "optuna"):
    from experiments.tune_study import run_tune

    return run_tune(backend="simulator", policy="beamer", scheduler=scheduler,
                    searcher=searcher, n_trials=6, parallel=3, hosts=6, workers=2,
                    min_iterations=2, seed=1)  # fmt: skip


def test_a_tune_study_is_deterministic_and_trains_what_it_reports(ray_session):
    first, again = run(), run()
    ids = {"trial_id"}  # Tune's ids carry a random prefix; the trial numbers are in order
    same = [{k: v for k, v in row.items() if k not in ids} for row in first.rows["trials"]]
    assert same == [{k: v for k, v in row.items() if k not in ids} for row in again.rows["trials"]]
    assert first.rows["jobs"] == again.rows["jobs"] and first.best == again.best
    (task,) = first.tasks
    steps = steps_of(task.plan)
    rows = first.rows["trials"]
    assert len(rows) == 6 and [row["trial"] for row in rows] == list(range(6))
    assert {row["state"] for row in rows} <= {"COMPLETE", "STOPPED"}
    assert any(row["state"] == "STOPPED" for row in rows)  # ASHA stopped some
    assert any(row["state"] == "COMPLETE" for row in rows)
    trained = {row["config"]: row["trained"] for row in first.rows["configs"]}
    for row in rows:  # a trial trained exactly to the rung it last reported, not one more
        assert row["last_step"] in steps and trained[row["config"]] == row["last_step"]
    # Tune's own record agrees: every trial's last report is the rung it stopped at
    tune_last = {r.metrics["trial_id"]: r.metrics["iterations"] for r in task.search.results}
    assert {row["trial_id"]: row["last_step"] for row in rows} == tune_last
    best = first.best[0]
    assert best is not None and best["found_s"] > 0
    assert first.result["pruned"] == sum(row["state"] == "STOPPED" for row in rows)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_the_command_runs_hyperband_and_writes_the_result_files(tmp_path):
    out = tmp_path / "tune"
    done = subprocess.run(
        [sys.executable, "-m", "experiments.tune_hpo", "--scheduler", "hyperband", "--trials",
         "6", "--parallel", "6", "--hosts", "6", "--workers", "2", "--min-iterations", "2",
         "--policy", "beamer", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "best trial #" in done.stdout and "Traceback" not in done.stderr
    folder = out / "seed-1"
    for table in ("stages", "jobs", "configs", "tasks", "coflows", "trials"):
        assert (folder / f"{table}-beamer.csv").is_file(), table
    trials = read_csv(folder / "trials-beamer.csv")
    assert len(trials) == 6 and {t["state"] for t in trials} <= {"COMPLETE", "STOPPED"}
    trained = {c["config"]: int(c["trained"]) for c in read_csv(folder / "configs-beamer.csv")}
    for trial in trials:
        assert trained[trial["config"]] == int(trial["last_step"])
    stages = read_csv(folder / "stages-beamer.csv")
    assert len(stages) == 3  # the three rungs, each a stage
    summary = json.loads((out / "summary.json").read_text())
    assert [r["trials"] for r in summary["runs"]["beamer"]] == [6]
    assert (folder / "tune" / "beamer-study0-seed1").is_dir()  # Tune's own experiment folder
