"""HPO workload generator (workloads/) and the simulator's HPO driver."""

from __future__ import annotations

import math
import random

import pytest

from controller.policies import POLICIES, make_policy
from simulator.engine import Fabric, Simulator
from simulator.hpo import HpoDriver
from workloads.curves import LearningCurve, sample_curves
from workloads.hpo import HpoTask, generate, stage_plan, survivors, sync_flows, sync_phases
from workloads.profiles import PROFILES

from .instances import assert_table_is_the_jobs


def test_successive_halving_plan():
    # 9 configs, eta 3, 10 iterations first: 9 x 10, then the best 3 to 30 (+20), 1 to 90 (+60)
    assert stage_plan(9, 3, 10) == [(9, 10), (3, 20), (1, 60)]
    assert stage_plan(1, 3, 5) == [(1, 5)]
    with pytest.raises(ValueError):
        stage_plan(9, 1, 10)


def test_sync_patterns():
    src, dst, size = sync_flows("ps", [4, 1, 2], 100.0)
    # PS on host 4: workers 1 and 2 push, then pull
    assert list(zip(src.tolist(), dst.tolist(), strict=True)) == [(1, 4), (2, 4), (4, 1), (4, 2)]
    assert size.tolist() == [100.0] * 4
    # the PS sends the model back only once it has every gradient: push, then pull
    push, pull = sync_phases("ps", [4, 1, 2], 100.0)
    assert list(zip(push.src.tolist(), push.dst.tolist(), strict=True)) == [(1, 4), (2, 4)]
    assert list(zip(pull.src.tolist(), pull.dst.tolist(), strict=True)) == [(4, 1), (4, 2)]
    (ring,) = sync_phases("ring", [0, 1, 2, 3], 100.0)
    assert ring.size_bytes.tolist() == pytest.approx([150.0] * 4)
    src, dst, size = sync_flows("ring", [0, 1, 2, 3], 100.0)
    assert list(zip(src.tolist(), dst.tolist(), strict=True)) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert size.tolist() == pytest.approx([150.0] * 4)  # 2 (N - 1) / N of the model
    with pytest.raises(ValueError, match="pattern must be one of ps, ring"):
        sync_flows("tree", [0, 1], 1.0)


def test_profiles_scale_bytes_and_compute_together():
    resnet = PROFILES["resnet50"]
    assert resnet.sync_bytes == pytest.approx(102.4e6)
    small = resnet.scaled(100)
    assert small.sync_bytes / small.compute_s == pytest.approx(resnet.sync_bytes / resnet.compute_s)


def test_curves():
    curve = LearningCurve(0.9, 100.0)
    assert curve.accuracy(curve.iterations_to(0.9)) == pytest.approx(0.81)
    assert curve.iterations_to(0.9) == pytest.approx(100 * math.log(10))
    curves = sample_curves(random.Random(1), 200, good_fraction=0.2)
    good = [c for c in curves if c.final_accuracy >= 0.85]
    assert 20 <= len(good) <= 60
    # good configurations converge faster, on average
    mean = lambda cs: sum(c.tau_iterations for c in cs) / len(cs)  # noqa: E731
    assert mean(good) < mean([c for c in curves if c not in good])


def test_generation_is_seeded():
    first = generate(13, 3, seed=5)
    assert [t.hosts for t in first] == [t.hosts for t in generate(13, 3, seed=5)]
    assert [t.hosts for t in first] != [t.hosts for t in generate(13, 3, seed=6)]
    assert all(len(set(h)) == 3 for t in first for h in t.hosts)
    with pytest.raises(ValueError, match="unknown model 'gpt'"):
        generate(13, 1, models=("gpt",))


def run(policy: str, n_hosts: int = 8, tasks: int = 2):
    sim = Simulator(Fabric(n_hosts, 1e9), make_policy(policy))
    driver = HpoDriver(
        sim, generate(n_hosts, tasks, seed=3, configs_per_task=4, eta=2, min_iterations=3, scale=10)
    )
    sim.run()
    return sim, driver


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_hpo_run_is_consistent(policy):
    sim, driver = run(policy)
    assert sim.bytes_delivered == pytest.approx(sim.bytes_offered)
    stages = driver.stage_rows()
    # every task runs every stage of its plan, each with the planned number of jobs
    for task in driver.tasks.values():
        mine = sorted((r for r in stages if r["task_id"] == task.task_id), key=lambda r: r["index"])
        assert [r["jobs"] for r in mine] == [keep for keep, _ in task.plan]
        # stages follow one another
        for before, after in zip(mine, mine[1:], strict=False):
            assert after["start_s"] == pytest.approx(before["finish_s"])
    for row in stages:
        assert row["sct_s"] >= row["compute_s"] - 1e-9
        assert row["sct_s"] >= row["bound_s"] * (1 - 1e-9)
    for job in driver.job_rows():
        assert job["jct_s"] is not None and job["jct_s"] > 0
    for config in driver.config_rows():
        t90, t95 = config["time_to_90pct_s"], config["time_to_95pct_s"]
        if t95 is not None:
            assert t90 is not None and t90 <= t95
    assert len(driver.task_finish_s) == len(driver.tasks)


def test_hpo_runs_are_deterministic():
    first, second = run("beamer")[1].stage_rows(), run("beamer")[1].stage_rows()
    assert first == second


def test_policy_sees_jobs_and_stages():
    seen = []

    class Spy(type(make_policy("beamer"))):
        def schedule(self, state):
            seen.append((len(state.jobs), len(state.stages)))
            return super().schedule(state)

    sim = Simulator(Fabric(8, 1e9), Spy())
    HpoDriver(sim, generate(8, 2, seed=3, configs_per_task=4, eta=2, min_iterations=3, scale=10))
    sim.run()
    assert max(jobs for jobs, _ in seen) == 8  # both tasks' first stages: 2 x 4 jobs
    assert max(stages for _, stages in seen) == 2


@pytest.mark.parametrize("mode", ["levels", "ideal"])
def test_every_state_s_job_table_is_the_numbers_of_its_jobs(mode):
    # JPAS reads progress and arrival, Beamer budgets, iterations and stages, from the HPO
    # driver's arrays: at every reorder they must be those of the state's job objects, and
    # list no job that ended
    seen = []

    class Spy(type(make_policy("jpas"))):
        def schedule(self, state):
            assert_table_is_the_jobs(state)
            assert all(job.stage_id is not None for job in state.jobs.values())
            seen.append(sum(job.iterations_done for job in state.jobs.values()))
            return super().schedule(state)

    sim = Simulator(Fabric(8, 1e9), Spy(), mode=mode)
    HpoDriver(sim, generate(8, 2, seed=3, configs_per_task=4, eta=2, min_iterations=3, scale=10))
    sim.run()
    assert len(seen) > 20 and max(seen) > 0  # (iterations were done while jobs ran)


def test_survivors_are_the_most_accurate():
    (task,) = generate(8, 1, seed=2, configs_per_task=4, eta=2, min_iterations=3)
    trained = {c: 3 for c in range(4)}
    by_accuracy = sorted(range(4), key=lambda c: -task.curves[c].accuracy(3))
    assert survivors(task, 0, trained) == by_accuracy[:2]
    assert survivors(task, len(task.plan) - 1, {0: 12}) == []  # the last stage keeps nobody


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_parameter_server_pulls_after_it_pushes(policy):
    """One PS job alone (PS + 2 workers, 1 Gbit/s, 125 MB model): every iteration is compute,
    then both pushes through the PS's ingress (2 s), then both pulls through its egress (2 s),
    as a real PS and the testbed's workers do it. The simulator's pull coflow ends for both
    workers at once; the bound lets the first worker's next iteration start when its own pull
    (1 s alone) is done, as on the testbed."""
    model = PROFILES["resnet50"].scaled(1.0)
    model = type(model)("toy", params_millions=125e6 / 4e6, compute_s=0.5)
    task = HpoTask(0, 0.0, model, "ps", [LearningCurve(0.9, 5.0)], [[0, 1, 2]], [(1, 10)])
    sim = Simulator(Fabric(3, 1e9), make_policy(policy))
    driver = HpoDriver(sim, [task])
    sim.run()
    (job,) = driver.job_rows()
    assert job["jct_s"] == pytest.approx(10 * (0.5 + 2.0 + 2.0))
    assert job["bound_s"] == pytest.approx(10 * (0.5 + 2.0 + 2.0) - 9 * (2.0 - 1.0))
    assert len(sim.coflows) == 2 * 10  # a push and a pull per iteration
