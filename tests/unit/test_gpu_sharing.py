"""GPU time-sharing: policies on hand-worked examples, placement, the manager's invariants."""

from __future__ import annotations

import random

import pytest

from workloads.curves import LearningCurve, sample_curves
from workloads.gpu import (
    GPU_POLICIES,
    Fifo,
    GpuJob,
    GpuManager,
    Hermes,
    RoundRobin,
    Slaq,
    convergence_speed,
    make_gpu_policy,
    normalised_loss_reduction,
    place,
    rebalance,
    run_time_sharing,
)
from workloads.hpo import best_identified_s

FLAT = LearningCurve(0.5, 1e9)  # converges so slowly it looks flat


def job(job_id, gpus=1, arrival=0.0, iterations=10, iteration_s=1.0, curve=FLAT, servers=None):
    return GpuJob(job_id, gpus, arrival, iterations, iteration_s, curve, servers)


def measured(job_id, accuracies, slice_s=10.0):
    """A job observed at the end of slices of ``slice_s`` GPU-seconds with these accuracies."""
    j = job(job_id)
    j.history = [(i * slice_s, a) for i, a in enumerate(accuracies)]
    j.slices = len(accuracies) - 1
    return j


def test_fifo_runs_to_completion_in_submission_order():
    # 2 GPUs: A needs both; B (1 GPU) arrives later and waits until A is done at 10 s
    jobs = [job(1, gpus=2), job(2, arrival=1.0, iterations=5)]
    result = run_time_sharing(jobs, 2, GPU_POLICIES["fifo"](), quantum_s=1.0, resume_cost_s=0)
    assert jobs[0].finish_s == pytest.approx(10.0) and jobs[0].preemptions == 0
    assert jobs[1].finish_s == pytest.approx(15.0)
    assert result.preemptions == 0


def test_round_robin_alternates_equal_slices():
    jobs = [job(1, iterations=4), job(2, iterations=4)]
    run_time_sharing(jobs, 1, RoundRobin(), quantum_s=1.0, resume_cost_s=0)
    # 1 GPU, 1 s slices: A B A B A B A B -> A ends at 7 s, B at 8 s; each was preempted 3 times
    assert (jobs[0].finish_s, jobs[1].finish_s) == (pytest.approx(7.0), pytest.approx(8.0))
    assert jobs[0].preemptions == 3 and jobs[1].preemptions == 3


def test_resuming_costs_its_resume_time():
    # the same rotation with 0.25 s to restore a suspended job: every resumed slice does 0.75
    # iterations, so the two jobs need more slices and each resume is counted
    jobs = [job(1, iterations=2), job(2, iterations=2)]
    result = run_time_sharing(jobs, 1, RoundRobin(), quantum_s=1.0, resume_cost_s=0.25)
    # A: 1 (t 0-1) + 0.75 (t 2.25-3) + 0.25 (t 4.25-4.5); B: 1 (t 1-2) + 0.75 (t 3.25-4), then
    # A's GPU is free at 4.5 and B resumes at once: + 0.25 (t 4.75-5)
    assert jobs[0].finish_s == pytest.approx(4.5)
    assert jobs[1].finish_s == pytest.approx(5.0)
    assert result.preemption_cost_s == pytest.approx(0.25 * 4)


def test_hermes_and_slaq_differ_on_a_good_and_a_poor_configuration():
    # good: fast early (0.3, 0.5, 0.6 after 10 s slices): 0.03, 0.02, 0.01 per s, then 0.7
    # (0.01); poor: slow but steady (0.1, 0.2, 0.3): 0.01 per s, then 0.39 (0.009).
    good = measured(1, [0.0, 0.3, 0.5, 0.6, 0.7])
    poor = measured(2, [0.0, 0.1, 0.2, 0.3, 0.39])
    # Hermes compares raw convergence speeds since the start: 0.7 / 40 s > 0.39 / 40 s
    assert convergence_speed(good) == pytest.approx(0.0175)
    assert convergence_speed(poor) == pytest.approx(0.39 / 40)
    assert [j.job_id for j in Hermes().rank([poor, good], 10.0)] == [1, 2]
    # SLAQ normalises each job by its own largest reduction: good 0.1 / 0.3, poor 0.09 / 0.1
    assert normalised_loss_reduction(good, 10.0) == pytest.approx(0.1 / 0.3)
    assert normalised_loss_reduction(poor, 10.0) == pytest.approx(0.9)
    assert [j.job_id for j in Slaq().rank([good, poor], 10.0)] == [2, 1]
    # the prediction never exceeds the loss left
    nearly = measured(3, [0.0, 0.5, 0.95])
    assert normalised_loss_reduction(nearly, 10.0) == pytest.approx(0.05 / 0.5)


def test_hermes_gives_a_new_job_its_first_slice():
    fast, slow = measured(1, [0.0, 0.5]), measured(2, [0.0, 0.1])
    assert [j.job_id for j in Hermes().rank([slow, fast], 10.0)] == [1, 2]
    newcomer = job(3, arrival=5.0)
    newcomer.history = [(0.0, 0.0)]
    assert Hermes().rank([slow, fast, newcomer], 10.0)[0] is newcomer
    assert Slaq().rank([slow, fast, newcomer], 10.0)[0] is newcomer


def test_gang_scheduling_on_placed_gpus_skips_jobs_whose_gpus_are_taken():
    manager = GpuManager(RoundRobin(), servers=2, gpus_per_server=1, quantum_s=1.0)
    a = job(1, gpus=2)  # both GPUs
    b = job(2, servers=[0])
    c = job(3, servers=[1])
    for j in (a, b, c):
        manager.submit(j, 0.0)
    assert (a.placement, b.placement, c.placement) == ([(0, 0), (1, 0)], [(0, 0)], [(1, 0)])
    first = manager.schedule(0.0)
    assert [j.job_id for j in first.start] == [1]  # b and c would need one of a's GPUs
    second = manager.schedule(1.0)  # a ran last: b and c (disjoint GPUs) run together
    assert sorted(j.job_id for j in second.start) == [2, 3] and second.stop == [a]
    assert a.preemptions == 1


def test_free_gpus_are_handed_out_without_preempting():
    manager = GpuManager(Hermes(), servers=1, gpus_per_server=1, quantum_s=10.0)
    a, b = job(1), job(2)
    manager.submit(a, 0.0)
    assert manager.schedule(0.0).start == [a]
    manager.submit(b, 3.0)  # Hermes would rank the new job first, but not between boundaries
    assert manager.schedule(3.0, preempt=False).start == []
    manager.finish(1, 5.0)
    fill = manager.schedule(5.0, preempt=False)
    assert fill.start == [b] and not fill.delayed and a.preemptions == 0
    assert manager.stats(5.0)["gpu_utilisation"] == pytest.approx(1.0)


@pytest.mark.parametrize("name", sorted(GPU_POLICIES))
def test_progress_is_kept_and_metrics_are_consistent(name):
    rng = random.Random(name)
    curves = sample_curves(rng, 12, good_fraction=0.25, base_tau=30)
    jobs = [
        job(
            i,
            gpus=rng.choice([1, 2]),
            arrival=rng.uniform(0, 20),
            iterations=40,
            iteration_s=0.5,
            curve=curves[i],
        )
        for i in range(12)
    ]
    result = run_time_sharing(
        jobs, 4, GPU_POLICIES[name](), quantum_s=2.0, resume_cost_s=0.2, gpus_per_server=2
    )
    for j in jobs:
        assert j.finished and j.done == j.iterations  # suspended jobs lost no progress
        assert j.finish_s >= j.arrival_s + j.iterations * j.iteration_s - 1e-9
        for t in j.reached_s.values():
            assert j.arrival_s <= t <= j.finish_s
    assert 0 < result.gpu_utilisation <= 1
    busy = sum(j.iterations * j.iteration_s * j.gpus for j in jobs)
    assert result.gpu_utilisation * 4 * result.makespan_s == pytest.approx(busy, rel=1e-6)
    if name == "fifo":
        assert result.preemptions == 0 and result.preemption_cost_s == 0


def test_hermes_finds_the_best_configuration_sooner_when_few_are_good(report):
    """The case Hermes targets: 16 configurations, about 1 in 5 good, 4 GPUs, averaged over 10
    seeds (FIFO is lucky when the best one happens to be submitted first)."""

    def mean_times(name):
        identified, reached = [], []
        for seed in range(10):
            rng = random.Random(seed)
            curves = sample_curves(rng, 16, good_fraction=0.2, base_tau=40)
            jobs = [job(i, iterations=200, iteration_s=0.5, curve=curves[i]) for i in range(16)]
            result = run_time_sharing(
                jobs, 4, make_gpu_policy(name), quantum_s=5.0, resume_cost_s=0.5
            )
            best = max(jobs, key=lambda j: j.curve.final_accuracy)
            identified.append(result.best_identified_s)
            reached.append(best.reached_s[0.9])
        return sum(identified) / 10, sum(reached) / 10

    times = {name: mean_times(name) for name in GPU_POLICIES}
    report(
        "mean time until the best configuration is identified / reaches 90 % (s), 10 seeds",
        ", ".join(f"{n} {a:.1f} / {b:.1f}" for n, (a, b) in sorted(times.items())),
    )
    for other in ("fifo", "rr", "slaq"):
        assert times["hermes"][0] < times[other][0], other
        assert times["hermes"][1] < times[other][1], other


def test_best_identified_is_when_the_best_starts_leading_for_good():
    obs = [(1.0, "a", 0.5), (2.0, "b", 0.4), (3.0, "b", 0.6), (4.0, "a", 0.7), (5.0, "b", 0.8)]
    assert best_identified_s(obs, "b") == 5.0  # leads at 3, loses the lead at 4, back at 5
    assert best_identified_s(obs, "a") is None  # does not lead at the end
    assert best_identified_s(list(reversed(obs)), "b") == 5.0  # order of the input is irrelevant
    assert best_identified_s([], "a") is None


def test_placement_uses_the_least_loaded_gpus_and_rebalancing_evens_them():
    # 2 servers x 2 GPUs; jobs of 2, 1 and 2 GPUs: 1 -> (0,0),(0,1); 2 -> (1,0); 3 -> (1,1),(0,0)
    placed = place({1: 2, 2: 1, 3: 2}, servers=2, gpus_per_server=2)
    assert placed == {1: [(0, 0), (0, 1)], 2: [(1, 0)], 3: [(1, 1), (0, 0)]}
    assert all(len(set(gpus)) == len(gpus) for gpus in placed.values())
    # an uneven assignment: three jobs on (0, 0), nothing elsewhere
    uneven = {1: [(0, 0)], 2: [(0, 0)], 3: [(0, 0)]}
    even, moves = rebalance(uneven, servers=2, gpus_per_server=2)
    loads = [sum(gpu in gpus for gpus in even.values()) for gpu in [(0, 0), (0, 1), (1, 0), (1, 1)]]
    assert max(loads) - min(loads) <= 1 and moves == 2
    assert rebalance(even, 2, 2)[1] == 0  # already balanced: nothing moves
    # jobs whose servers are fixed only move within their server: (0, 1) takes one, server 1
    # stays empty
    pinned, moves = rebalance(uneven, 2, 2, fixed_servers={1, 2, 3})
    assert moves == 1 and all(gpu[0] == 0 for gpus in pinned.values() for gpu in gpus)
    with pytest.raises(ValueError, match="needs 5 GPUs"):
        place({1: 5}, servers=2, gpus_per_server=2)


def test_fixed_servers_get_the_least_loaded_gpu_of_their_server():
    placed = place({1: 2, 2: 1}, 3, 2, fixed_servers={1: [2, 0], 2: [2]})
    assert placed == {1: [(2, 0), (0, 0)], 2: [(2, 1)]}
    with pytest.raises(ValueError, match="more workers on server 1"):
        place({1: 3}, 3, 2, fixed_servers={1: [1, 1, 1]})
    with pytest.raises(ValueError, match="server 7"):
        place({1: 1}, 3, 2, fixed_servers={1: [7]})


def test_manager_migrates_to_balance_when_jobs_finish():
    manager = GpuManager(Fifo(), servers=1, gpus_per_server=2, quantum_s=1.0, resume_cost_s=0)
    jobs = [job(i) for i in range(1, 5)]  # placed (0,0), (0,1), (0,0), (0,1)
    for j in jobs:
        manager.submit(j, 0.0)
    manager.schedule(0.0)
    manager.finish(1, 0.5)
    manager.finish(3, 0.6)  # both on (0, 0): loads 0 and 2
    manager.schedule(1.0)
    assert manager.stats(1.0)["migrations"] == 1
    assert sorted(g for j in manager.active() for g in j.placement) == [(0, 0), (0, 1)]


def test_bad_input():
    with pytest.raises(ValueError, match="more GPUs"):
        run_time_sharing([job(1, gpus=5)], 4, RoundRobin())
    with pytest.raises(ValueError, match="quantum_s"):
        run_time_sharing([job(1)], 4, RoundRobin(), quantum_s=1.0, resume_cost_s=2.0)
    with pytest.raises(ValueError, match="unknown GPU policy 'lifo'; known: fifo, hermes"):
        make_gpu_policy("lifo")
    manager = GpuManager(RoundRobin(), 1, 1)
    manager.submit(job(1), 0.0)
    with pytest.raises(ValueError, match="already submitted"):
        manager.submit(job(1), 0.0)


@pytest.mark.parametrize("name", sorted(GPU_POLICIES))
def test_running_jobs_never_share_a_gpu(name):
    """Random arrivals and finishes on 3 servers x 2 GPUs, with migrations: at every decision
    the running jobs hold disjoint GPUs, of their own servers when those are fixed."""
    rng = random.Random(7)
    manager = GpuManager(make_gpu_policy(name), 3, 2, quantum_s=1.0, resume_cost_s=0.1)
    next_id, now = 1, 0.0
    for step in range(200):
        now += 0.5
        if rng.random() < 0.4:
            servers = rng.sample(range(3), rng.choice([1, 2])) if rng.random() < 0.5 else None
            j = job(next_id, gpus=len(servers) if servers else rng.choice([1, 2, 3]))
            j.servers = servers
            manager.submit(j, now, accuracy=rng.random())
            next_id += 1
        running = [j for j in manager.active() if j.running]
        if running and rng.random() < 0.3:
            manager.finish(rng.choice(running).job_id, now)
        for j in manager.active():
            manager.report(j.job_id, j.done + 1, min(1.0, j.accuracy + rng.random() / 10))
        manager.schedule(now, preempt=step % 2 == 0)
        held = [gpu for j in manager.active() if j.running for gpu in j.placement]
        assert len(held) == len(set(held))
        for j in manager.active():
            assert len(set(j.placement)) == j.gpus
            if j.servers is not None:
                assert [gpu[0] for gpu in j.placement] == j.servers
    assert manager.stats(now)["preemptions"] >= (0 if name == "fifo" else 1)
