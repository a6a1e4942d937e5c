"""The HPO progression core, driven by hand with events (no simulator, no testbed), and the one
percentile definition of the project."""

from __future__ import annotations

import math

import numpy as np
import pytest

import controller.engine
from controller.metrics import nearest_rank_index, percentile, summarise
from workloads.curves import LearningCurve, TabulatedCurve, curve_from_json, curve_to_json
from workloads.gpu import GpuManager, make_gpu_policy
from workloads.hpo import HpoTask, asha_promotions, generate, hyperband_brackets, survivors
from workloads.hpo_core import HpoCore
from workloads.profiles import PROFILES


def task(arrival_s: float = 0.0) -> HpoTask:
    """4 configurations, eta 2: stages of 4 x 2, 2 x 2 and 1 x 4 iterations on 4 hosts."""
    curves = [LearningCurve(0.5, 4), LearningCurve(0.9, 2), LearningCurve(0.7, 3),
              LearningCurve(0.8, 1)]  # fmt: skip
    hosts = [[0, 1], [1, 2], [2, 3], [3, 0]]
    return HpoTask(7, arrival_s, PROFILES["resnet50"], "ring", curves, hosts,
                   [(4, 2), (2, 2), (1, 4)], eta=2)  # fmt: skip


def run_job(core: HpoCore, job_id: int, now_s: float):
    """Every iteration of a job at ``now_s``, then its end; the core's actions."""
    for _ in range(core.jobs[job_id].iterations):
        core.iteration_done(job_id, now_s)
    return core.job_done(job_id, now_s)


def test_stages_follow_successive_halving_and_times_count_from_arrival():
    core = HpoCore([task(arrival_s=100.0)], link_bps=1e9)
    actions = core.arrive(7, now_s=100.0)
    assert [j.config for j in actions.started] == [0, 1, 2, 3]
    assert all(j.start_iteration == 0 and j.iterations == 2 for j in actions.started)
    first = [j.job_id for j in actions.started]
    for job_id in first[:-1]:
        assert run_job(core, job_id, 110.0).started == []  # the stage waits for its last job
    second = run_job(core, first[-1], 112.0).started
    # the two most accurate after 2 iterations go on, resuming at iteration 2
    assert [j.config for j in second] == survivors(task(), 0, dict.fromkeys(range(4), 2))
    assert [j.config for j in second] == [3, 1]  # 0.8 (1 - e^-2) > 0.9 (1 - e^-1)
    assert all(j.start_iteration == 2 and j.target_iteration == 4 for j in second)
    run_job(core, second[0].job_id, 120.0)
    (last,) = run_job(core, second[1].job_id, 121.0).started
    assert last.config == 3 and last.iterations == 4  # 0.8 (1 - e^-4) > 0.9 (1 - e^-2)
    assert not core.finished
    assert run_job(core, last.job_id, 130.0).started == [] and core.finished
    stages = core.stage_rows()
    assert [(s["index"], s["configs"], s["sct_s"]) for s in stages] == [
        (0, "0 1 2 3", 12.0), (1, "3 1", 9.0), (2, "3", 9.0),
    ]  # fmt: skip
    (row,) = core.task_rows()
    assert row["arrival_s"] == row["start_s"] == 100.0 and row["hpo_completion_s"] == 30.0
    assert row["best_config"] == 3
    assert row["bound_s"] == pytest.approx(sum(s["bound_s"] for s in stages))
    configs = {r["config"]: r for r in core.config_rows()}
    assert [configs[c]["trained"] for c in range(4)] == [2, 4, 2, 8]
    # config 3 (tau 1) ends at 8 iterations, 0.8 (1 - e^-8); 90 % of that at 2.3 iterations:
    # its 3rd, at 120 s, 20 s after arrival
    assert configs[3]["converged_accuracy"] == pytest.approx(0.8 * (1 - math.exp(-8)))
    assert configs[3]["time_to_90pct_s"] == 20.0
    # config 0 (tau 4) stops after 2 iterations at 0.5 (1 - e^-0.5), far below its asymptote
    # 0.5; it is counted: its 2nd iteration (at 110 s) is its end, the 1st (0.5 (1 - e^-0.25))
    # is below 90 % of it
    assert configs[0]["final_accuracy"] == 0.5
    assert configs[0]["time_to_90pct_s"] == configs[0]["time_to_95pct_s"] == 10.0


def test_misuse_is_refused():
    core = HpoCore([task()], link_bps=1e9)
    job = core.arrive(7, 0.0).started[0]
    with pytest.raises(ValueError, match="before its arrival"):
        HpoCore([task(arrival_s=5.0)], link_bps=1e9).arrive(7, 4.0)
    with pytest.raises(ValueError, match="arrived twice"):
        core.arrive(7, 1.0)
    with pytest.raises(ValueError, match="after 0 of 2 iterations"):
        core.job_done(job.job_id, 1.0)
    run_job(core, job.job_id, 1.0)
    with pytest.raises(ValueError, match="more than its 2 iterations"):
        core.iteration_done(job.job_id, 2.0)
    with pytest.raises(ValueError, match="ended twice"):
        core.job_done(job.job_id, 2.0)
    with pytest.raises(ValueError, match="need a job manager"):
        core.quantum(3.0)
    with pytest.raises(ValueError, match="link_bps must be > 0"):
        HpoCore([task()], link_bps=0)


def test_with_a_job_manager_jobs_wait_for_their_gpus():
    """One GPU per host, four 2-host jobs on 4 hosts: two run, two wait; a finished job's GPUs
    go to a waiting one."""
    gpus = GpuManager(make_gpu_policy("fifo"), servers=4, gpus_per_server=1, quantum_s=5.0)
    core = HpoCore([task()], link_bps=1e9, gpus=gpus)
    actions = core.arrive(7, 0.0)
    (decision,) = actions.gpu
    holding = [j.job_id for j in actions.started if j.holding]
    assert len(holding) == 2 and {g.job_id for g in decision.start} == set(holding)
    after = run_job(core, holding[0], 3.0)
    assert after.started == [] and len(after.gpu) == 1
    assert sum(j.holding for j in core.jobs.values() if j.finish_s is None) >= 1
    assert core.gpu_stats(3.0)["gpu_utilisation"] > 0


def test_accuracy_comes_from_the_curve_object():
    curve = TabulatedCurve((0.2, 0.6, 0.65), iterations_per_epoch=2)
    t = task()
    t.curves[0] = curve
    core = HpoCore([t], link_bps=1e9)
    job = core.arrive(7, 0.0).started[0]
    assert core.iteration_done(job.job_id, 1.0) == pytest.approx(curve.accuracy(1)) == 0.1
    assert core.iteration_done(job.job_id, 2.0) == pytest.approx(0.2)


@pytest.mark.parametrize(
    "curve", [LearningCurve(0.9, 12.5), TabulatedCurve((0.1, 0.5, 0.55), iterations_per_epoch=3)]
)
def test_curves_survive_json(curve):
    again = curve_from_json(curve_to_json(curve))
    assert again == curve
    assert [again.accuracy(i) for i in range(12)] == [curve.accuracy(i) for i in range(12)]


@pytest.mark.parametrize(
    "text, message",
    [
        ("nonsense", "must be JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"final_accuracy": 0.9}', "needs final_accuracy and tau_iterations"),
        ('{"final_accuracy": 0.9, "tau_iterations": 0}', "tau_iterations must be > 0"),
        ('{"epoch_accuracy": [], "iterations_per_epoch": 2}', "iterations_per_epoch > 0"),
    ],
)
def test_bad_curves_are_named(text, message):
    with pytest.raises(ValueError, match=message):
        curve_from_json(text)


def test_generated_workloads_run_on_the_core_alone():
    """Any workload runs through the core with a trivial event order (all jobs of a stage end
    at once), independent of any clock: the core needs no simulator."""
    tasks = generate(8, 3, seed=9, configs_per_task=5, eta=2, min_iterations=2)
    core = HpoCore(tasks, link_bps=1e9)
    now = 0.0
    pending = []
    for t in tasks:
        pending += core.arrive(t.task_id, now).started
    while pending:
        now += 1.0
        job = pending.pop(0)
        pending += run_job(core, job.job_id, now).started
    assert core.finished
    assert len(core.stage_rows()) == sum(len(t.plan) for t in tasks)


# ---- percentiles: one definition ------------------------------------------------------------


def test_percentile_is_nearest_rank():
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 6.0]
    assert percentile(values, 50) == 3.0  # the 3rd of 6
    assert percentile(values, 95) == 6.0  # ceil(5.7) = the 6th: the largest of 6
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 6.0
    assert percentile([], 50) is None
    assert nearest_rank_index(1000, 99.9) == 998  # no float noise: 999th of 1000
    with pytest.raises(ValueError):
        nearest_rank_index(3, 101)
    # numpy's inverted_cdf is the same definition
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 7, 20, 101):
        data = rng.random(n).tolist()
        for q in (1, 25, 50, 90, 95, 99, 100):
            assert percentile(data, q) == np.percentile(data, q, method="inverted_cdf")


def test_one_definition_everywhere():
    assert controller.engine.percentile is percentile
    summary = summarise([5.0, 1.0, 4.0, 2.0, 3.0, 6.0, None])
    assert summary == {"count": 6, "mean": 3.5, "p50": 3.0, "p95": 6.0, "p99": 6.0, "max": 6.0}
    assert summarise([None]) == {"count": 0}


def test_a_late_start_counts_from_the_arrival():
    """A driver busy elsewhere (the testbed launching another task's workers) starts a task
    late: its times still count from the workload's arrival, and the delay shows."""
    core = HpoCore([task(arrival_s=10.0)], link_bps=1e9)
    pending = core.arrive(7, now_s=12.5).started
    assert core.stages[pending[0].stage_id].start_s == 12.5
    now = 12.5
    while pending:
        now += 1.0
        pending += run_job(core, pending.pop(0).job_id, now).started
    (row,) = core.task_rows()
    assert (row["arrival_s"], row["start_s"]) == (10.0, 12.5)
    assert row["hpo_completion_s"] == pytest.approx(now - 10.0)


def asha_task() -> HpoTask:
    """:func:`task` run asynchronously (ASHA) over the same rungs."""
    t = task()
    t.asynchronous = True
    return t


def test_asha_promotes_without_waiting_for_the_rung():
    """Rung 0 lets half of its completed configurations go on (2 of 4): the first goes when two
    have completed, while the others still train; a late leader joins the open rung; a rung
    ends with its last job once the rung below has ended, and the task with its last rung."""
    core = HpoCore([asha_task()], link_bps=1e9)
    first = {j.config: j.job_id for j in core.arrive(7, now_s=0.0).started}
    assert run_job(core, first[0], 10.0).started == []  # 1 completed: none may go yet
    (promoted,) = run_job(core, first[1], 11.0).started  # 2 completed: the better one goes
    assert promoted.config == 1 and promoted.start_iteration == 2 and promoted.start_s == 11.0
    (joined,) = run_job(core, first[3], 12.0).started  # config 3 leads the 3 completed now
    assert joined.config == 3 and joined.stage_id == promoted.stage_id
    assert joined.start_s == 12.0
    actions = run_job(core, first[2], 13.0)  # the last of rung 0: its top 2 went already
    assert actions.started == []
    assert [s.index for s in actions.finished_stages] == [0]
    assert run_job(core, promoted.job_id, 15.0).started == []  # 1 of 2 completed: none goes
    actions = run_job(core, joined.job_id, 16.0)
    (last,) = actions.started
    assert last.config == 3 and last.iterations == 4  # 0.8 (1 - e^-4) > 0.9 (1 - e^-2)
    assert [s.index for s in actions.finished_stages] == [1]
    assert not core.finished
    actions = run_job(core, last.job_id, 20.0)
    assert [s.index for s in actions.finished_stages] == [2] and core.finished
    stages = core.stage_rows()
    assert [(s["index"], s["configs"], s["start_s"], s["sct_s"]) for s in stages] == [
        (0, "0 1 2 3", 0.0, 13.0), (1, "1 3", 11.0, 5.0), (2, "3", 16.0, 4.0),
    ]  # fmt: skip
    assert all(s["bound_s"] > 0 for s in stages)  # (these hand-made times are not physical)
    (row,) = core.task_rows()
    assert row["hpo_completion_s"] == 20.0 and row["best_config"] == 3
    # rungs overlap: the task's bound is its first rung's or one configuration's whole chain
    assert row["bound_s"] >= stages[0]["bound_s"]
    assert row["bound_s"] < sum(s["bound_s"] for s in stages)


def test_an_asha_rung_ends_only_once_nothing_can_join_it():
    """Rung 1's jobs are all done before rung 0 has ended: it stays open, since another
    configuration may still be promoted into it."""
    core = HpoCore([asha_task()], link_bps=1e9)
    first = {j.config: j.job_id for j in core.arrive(7, now_s=0.0).started}
    run_job(core, first[0], 1.0)
    (promoted,) = run_job(core, first[1], 2.0).started
    actions = run_job(core, promoted.job_id, 3.0)  # rung 1 has no job running now
    assert actions.finished_stages == [] and actions.started == []
    (joined,) = run_job(core, first[3], 4.0).started
    assert joined.stage_id == promoted.stage_id


def test_asha_rule_follows_the_plan_fraction():
    t = asha_task()  # rung 0 keeps 2 of 4: half of those completed may go
    accuracy = {0: 0.1, 1: 0.5, 2: 0.3}
    assert asha_promotions(t, 0, {0: 0.1}, []) == []
    assert asha_promotions(t, 0, accuracy, []) == [1]
    assert asha_promotions(t, 0, {**accuracy, 3: 0.9}, [1]) == [3]
    assert asha_promotions(t, 0, {0: 0.5, 1: 0.5}, []) == [0]  # ties: lower index
    assert asha_promotions(t, 2, {3: 0.9}, []) == []  # the last rung promotes nobody


def test_generated_asha_runs_overlap_their_rungs_in_the_simulator():
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator
    from simulator.hpo import HpoDriver

    tasks = generate(13, 2, seed=1, search="asha")
    assert all(t.asynchronous for t in tasks)
    runs = []
    for _ in range(2):
        sim = Simulator(Fabric(13, 1e9), make_policy("beamer"))
        driver = HpoDriver(sim, generate(13, 2, seed=1, search="asha"))
        sim.run()
        runs.append((driver.stage_rows(), driver.job_rows(), driver.task_rows()))
    assert runs[0] == runs[1]  # deterministic for a seed
    stages, jobs, tasks_done = runs[0]
    assert all(t["hpo_completion_s"] is not None for t in tasks_done)
    by_task_index = {(s["task_id"], s["index"]): s for s in stages}
    overlapping = [
        s for s in stages if s["index"] > 0
        and s["start_s"] < by_task_index[(s["task_id"], s["index"] - 1)]["finish_s"]
    ]  # fmt: skip
    assert overlapping  # a rung started before the one below it ended: no barrier


def test_hyperband_brackets_are_the_papers():
    """R = 27, eta = 3 (Li et al., JMLR 2018, Table 1): brackets of 27, 12, 6 and 4
    configurations starting at budgets 1, 3, 9 and 27."""
    brackets = hyperband_brackets(27, 3, 1)
    assert [len(b.configs) for b in brackets] == [27, 12, 6, 4]
    assert [[keep for keep, _ in b.plan] for b in brackets] == [[27, 9, 3, 1], [12, 4, 1],
                                                                 [6, 2], [4]]  # fmt: skip
    for b in brackets:  # every bracket ends at the full budget
        assert sum(n for _, n in b.plan) == 27
    assert [b.plan[0][1] for b in brackets] == [1, 3, 9, 27]
    assert sorted(c for b in brackets for c in b.configs) == list(range(49))


def test_hyperband_runs_its_brackets_side_by_side():
    (t,) = generate(13, 1, seed=3, configs_per_task=9, eta=3, min_iterations=2,
                    search="hyperband")  # fmt: skip
    assert t.n_configs == 17 and len(t.all_brackets) == 3 and t.n_stages == 6
    core = HpoCore([t], link_bps=1e9)
    started = core.arrive(0, now_s=0.0).started
    assert len(started) == 17  # every bracket's first stage starts at once
    now, pending = 0.0, [j.job_id for j in started]
    while pending:
        now += 1.0
        pending = pending[1:] + [j.job_id for j in run_job(core, pending[0], now).started]
    assert core.finished
    stages = core.stage_rows()
    assert sorted((s["bracket"], s["index"], s["jobs"]) for s in stages) == [
        (0, 0, 9), (0, 1, 3), (0, 2, 1), (1, 0, 5), (1, 1, 1), (2, 0, 3),
    ]  # fmt: skip
    labels = set(core.stage_labels().values())
    assert "task 0 bracket 1 stage 1" in labels
    (row,) = core.task_rows()
    finals = {
        s["configs"] for s in stages if (s["bracket"], s["index"]) in {(0, 2), (1, 1), (2, 0)}
    }
    assert str(row["best_config"]) in " ".join(finals).split()
    per_bracket = {}
    for s in stages:
        per_bracket[s["bracket"]] = per_bracket.get(s["bracket"], 0.0) + s["bound_s"]
    assert row["bound_s"] == pytest.approx(max(per_bracket.values()))  # brackets overlap


def test_generated_hyperband_runs_in_the_simulator_deterministically():
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator
    from simulator.hpo import HpoDriver

    runs = []
    for _ in range(2):
        sim = Simulator(Fabric(13, 1e9), make_policy("beamer"))
        driver = HpoDriver(sim, generate(13, 2, seed=1, search="hyperband"))
        sim.run()
        runs.append((driver.stage_rows(), driver.task_rows()))
        assert driver.core.finished and len(driver.stage_rows()) == driver.n_stages
    assert runs[0] == runs[1]


def test_time_to_fraction_is_of_the_end_of_training_even_far_from_the_asymptote():
    # one configuration whose curve is still almost linear when its budget ends (tau 1000
    # iterations, 10 trained: 1 % of its asymptote); 90 % of its end is first met at iteration 9
    slow = HpoTask(1, 5.0, PROFILES["resnet50"], "ring", [LearningCurve(0.9, 1000.0)], [[0, 1]],
                   [(1, 10)], eta=3)  # fmt: skip
    core = HpoCore([slow], link_bps=1e9)
    (job,) = core.arrive(1, now_s=5.0).started
    for i in range(10):
        core.iteration_done(job.job_id, 10.0 + i)
    core.job_done(job.job_id, 19.0)
    (row,) = core.config_rows()
    assert row["converged_accuracy"] == pytest.approx(0.9 * (1 - math.exp(-0.01)))
    assert row["converged_accuracy"] < 0.02 * row["final_accuracy"]
    # accuracy after i iterations ~ i / 10 of the end's: 0.9 first at the 9th (i = 8, 18 s)
    assert row["time_to_90pct_s"] == 18.0 - 5.0
    assert row["time_to_95pct_s"] == 19.0 - 5.0
