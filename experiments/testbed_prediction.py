"""The simulator beside every testbed run: the same workload, seed, link rate and bytes, as
the fluid model predicts them, raw and with the testbed's measured overheads.

The policies and the simulator (numba's kernels) are imported where a prediction is made, so
that a testbed command's ``--help`` and a bad flag answer at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from controller.timeline import Timeline, port_names
from experiments.testbed_settings import TestbedSettings
from simulator.calibration import Overheads
from workloads.gpu import GpuManager, make_gpu_policy
from workloads.hpo import HpoTask


def job_manager(settings: TestbedSettings, gpu_policy: str) -> GpuManager | None:
    """A fresh GPU job manager for ``gpu_policy`` (``None`` for ``none``); resuming a paused
    worker costs nothing on the testbed."""
    if gpu_policy == "none":
        return None
    return GpuManager(make_gpu_policy(gpu_policy), settings.cluster.hosts, settings.gpus_per_host,
                      settings.quantum_s, 0.0)  # fmt: skip


def simulate(
    policy: str,
    settings: TestbedSettings,
    tasks: list[HpoTask],
    gpu_policy: str = "none",
    overheads: Overheads | None = None,
    timeline: Timeline | None = None,
) -> dict:
    """The simulator's prediction for the same workload, seed, link rate and bytes (emulated
    bytes at the emulated rate: the same seconds as real bytes at the modelled rate), with the
    testbed's measured ``overheads`` if given; ``stage_sct_s`` has every stage's SCT keyed
    ``"<task>.<index>"`` (stage ids differ between testbed and simulator), for comparing stage by
    stage with the run's ``stages.csv``. Records the run's schedule into ``timeline`` if given."""
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator
    from simulator.hpo import HpoDriver

    overheads = overheads or Overheads()
    cluster = settings.cluster
    fabric = Fabric.of(replace(cluster, link_bps=cluster.link_bps * overheads.goodput))
    sim = Simulator(fabric, make_policy(policy), timeline=timeline)
    driver = HpoDriver(
        sim,
        tasks,
        gpus=job_manager(settings, gpu_policy),
        job_startup_s=overheads.job_startup_s,
    )
    sim.run()
    if timeline is not None:
        timeline.close(sim.now_s)
        timeline.stages = driver.core.stage_labels()
    stage_sct_s = {
        f"{row['task_id']}.{row['index']}": row["sct_s"] for row in driver.core.stage_rows()
    }
    return {**driver.core.summary(sim.now_s), "stage_sct_s": stage_sct_s}


@dataclass(frozen=True)
class Prediction:
    """The simulator's predictions of a run: the raw fluid model's, the one with the measured
    overheads (``None`` without them), and the timeline of the last of them."""

    simulated: dict
    calibrated: dict | None
    timeline: Timeline


def predict(
    settings: TestbedSettings,
    policy: str,
    gpu_policy: str,
    tasks: Callable[[], list[HpoTask]],
) -> Prediction:
    """The predictions of a run of ``policy`` and ``gpu_policy`` on ``tasks()`` (called for
    each prediction), raw and, with the settings' overheads, calibrated."""
    calibrated = None
    source = "simulator, calibrated" if settings.overheads else "simulator"
    timeline = Timeline(port_names(settings.cluster.hosts), settings.cluster.link_bps, source)
    simulated = simulate(policy, settings, tasks(), gpu_policy,
                         timeline=None if settings.overheads else timeline)  # fmt: skip
    if settings.overheads:
        calibrated = simulate(policy, settings, tasks(), gpu_policy, settings.overheads, timeline)
    return Prediction(simulated, calibrated, timeline)
