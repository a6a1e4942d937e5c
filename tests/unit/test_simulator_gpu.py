"""The simulator's HPO driver with the GPU job manager (workloads.gpu.GpuManager)."""

from __future__ import annotations

import pytest

from controller.policies import make_policy
from simulator.engine import Fabric, Simulator
from simulator.hpo import HpoDriver
from workloads.curves import LearningCurve
from workloads.gpu import GPU_POLICIES, GpuManager, make_gpu_policy
from workloads.hpo import HpoTask, generate
from workloads.profiles import ModelProfile

TINY = ModelProfile("tiny", 0.001, 1.0)  # 4 kB per synchronisation, 1 s of compute


def run(
    tasks,
    gpu_policy=None,
    hosts=4,
    gpus_per_host=1,
    quantum_s=5.0,
    resume_cost_s=0.0,
    link_bps=1e12,
    network="fair",
    job_startup_s=0.0,
):
    sim = Simulator(Fabric(hosts, link_bps), make_policy(network))
    gpus = None
    if gpu_policy is not None:
        gpus = GpuManager(
            make_gpu_policy(gpu_policy), hosts, gpus_per_host, quantum_s, resume_cost_s
        )
    driver = HpoDriver(sim, tasks, gpus=gpus, job_startup_s=job_startup_s)
    sim.run()
    return driver


def two_jobs_on_the_same_hosts(iterations=10):
    curves = [LearningCurve(0.9, 5.0), LearningCurve(0.5, 50.0)]
    return [HpoTask(0, 0.0, TINY, "ring", curves, [[0, 1], [0, 1]], [(2, iterations)], 2)]


def finish_times(driver):
    return sorted(job.finish_s for job in driver.jobs.values())


def test_round_robin_on_shared_gpus_alternates_whole_quanta():
    # one GPU per host, both jobs on hosts 0 and 1; 1 s iterations, 5 s quanta: A computes
    # 0-5 and 10-15, B 5-10 and 15-20 (the network is nearly instantaneous)
    driver = run(two_jobs_on_the_same_hosts(), "rr", hosts=2)
    assert finish_times(driver) == pytest.approx([15.0, 20.0], abs=0.01)
    stats = driver.gpu_stats()
    # A loses the GPUs at 5 and at 15 (its last synchronisation ends just after that boundary),
    # B at 10
    assert stats["preemptions"] == 3 and stats["gpu_utilisation"] == pytest.approx(1.0, abs=0.01)
    # without the manager both compute at once
    assert finish_times(run(two_jobs_on_the_same_hosts())) == pytest.approx([10.0, 10.0], abs=0.01)


def test_resume_cost_delays_the_resumed_job():
    driver = run(two_jobs_on_the_same_hosts(), "rr", resume_cost_s=0.5)
    # A: 5 iterations (0-5), resumes at 10 and computes from 10.5: 4 more by 14.5 (stops after
    # the iteration that ends past 15, at 15.5), ... every resume costs 0.5 s of its quantum
    for job in driver.jobs.values():
        assert job.done == job.iterations
    assert max(finish_times(driver)) > 20.0
    assert driver.gpu_stats()["preemption_cost_s"] == pytest.approx(
        0.5 * sum(j.resumes for j in driver.gpus.jobs.values())
    )


def test_job_startup_delays_every_jobs_first_compute_once():
    # two stages of successive halving: each stage's jobs start up once, 2 s each
    curves = [LearningCurve(0.9, 5.0), LearningCurve(0.5, 50.0)]
    task = HpoTask(0, 0.0, TINY, "ring", curves, [[0, 1], [2, 3]], [(2, 3), (1, 6)], 2)
    plain = finish_times(run([task]))
    assert plain == pytest.approx([3.0, 3.0, 9.0], abs=0.01)
    assert finish_times(run([task], job_startup_s=2.0)) == pytest.approx([5.0, 5.0, 13.0], abs=0.01)
    # with a job manager the start-up and a resume are not paid twice
    shared = finish_times(run([task], "fifo", job_startup_s=2.0, resume_cost_s=0.5))
    assert shared == pytest.approx([5.0, 5.0, 13.0], abs=0.01)
    with pytest.raises(ValueError, match="job_startup_s"):
        run([task], job_startup_s=-1.0)


def test_hermes_runs_the_fast_converging_job_first():
    # after each got its first slice, the good configuration (fast curve) keeps the GPUs
    driver = run(two_jobs_on_the_same_hosts(iterations=20), "hermes", quantum_s=2.0)
    good, poor = sorted(driver.jobs.values(), key=lambda j: j.config)
    assert good.finish_s < poor.finish_s
    assert good.finish_s == pytest.approx(2 + 2 + 18, abs=0.05)  # its slice, B's, then the rest


def test_enough_gpus_change_nothing():
    tasks = generate(13, 2, seed=3, min_iterations=4)
    plain = run(tasks, None, hosts=13, link_bps=1e9)
    shared = run(
        generate(13, 2, seed=3, min_iterations=4),
        "hermes",
        hosts=13,
        gpus_per_host=20,
        link_bps=1e9,
    )
    assert [s["sct_s"] for s in shared.stage_rows()] == pytest.approx(
        [s["sct_s"] for s in plain.stage_rows()], rel=1e-6
    )
    assert shared.gpu_stats()["preemptions"] == 0


@pytest.mark.parametrize("name", sorted(GPU_POLICIES))
def test_every_policy_completes_the_hpo_and_keeps_progress(name):
    tasks = generate(6, 2, seed=5, configs_per_task=6, min_iterations=4, workers=2)
    driver = run(tasks, name, hosts=6, quantum_s=2.0, resume_cost_s=0.1, link_bps=1e9)
    assert len(driver.task_finish_s) == 2
    for job in driver.jobs.values():
        assert job.done == job.iterations and job.finish_s is not None
    for row in driver.task_rows():
        assert row["best_config"] is not None
        assert 0 <= row["best_identified_s"] <= row["hpo_completion_s"]
    stats = driver.gpu_stats()
    assert 0 < stats["gpu_utilisation"] <= 1
    if name == "fifo":
        assert stats["preemptions"] == 0


def test_manager_and_fabric_must_agree():
    sim = Simulator(Fabric(4, 1e9), make_policy("fair"))
    with pytest.raises(ValueError, match="3 servers, the fabric 4 hosts"):
        HpoDriver(sim, two_jobs_on_the_same_hosts(), gpus=GpuManager(make_gpu_policy("rr"), 3, 1))
