"""Your Ray Tune study on the cluster: :func:`run_tune` trains its trials as jobs (a rung of
successive halving each) under a network and a GPU policy, in the simulator or on the Mininet
testbed, with Tune's own scheduler (ASHA, Hyperband, ...) and searcher deciding
(:mod:`workloads.tune_search`). ``hpo-tune`` (:mod:`experiments.tune_hpo`) runs every study
through it; the runs, files and tables are those of the Optuna path
(:mod:`experiments.optuna_study`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.optuna_study import (
    StudiesMade,
    StudyRun,
    finish_run,
    on_testbed,
    simulate,
    testbed_flags,
)
from simulator.__main__ import run_label
from workloads.curves import Curve
from workloads.hpo import HpoTask, stage_plan
from workloads.optuna_search import BACKENDS
from workloads.profiles import PROFILES, ModelProfile
from workloads.tune_search import (
    TuneSearch,
    best_trial,
    make_scheduler,
    make_searcher,
    synthetic_curve,
    synthetic_space,
    trial_rows,
)


def tune_tasks(
    n_studies: int,
    seed: int,
    n_hosts: int,
    n_trials: int,
    parallel: int,
    scheduler: str | Callable[[], Any] = "asha",
    searcher: str | Callable[[int], Any] = "random",
    eta: int = 3,
    min_iterations: int = 10,
    workers: int = 3,
    model: ModelProfile | None = None,
    pattern: str = "ring",
    param_space: dict | None = None,
    curve: Callable[[dict, int], Curve] | None = None,
    run: str = "run",
    storage_path: Path | None = None,
) -> list[HpoTask]:
    """``n_studies`` HPO tasks, each driven by a fresh Tune study (:class:`TuneSearch`).

    Every study has its own searcher (a name of :data:`workloads.tune_search.SEARCHERS` seeded
    with ``seed`` and the study's index, or a function of that seed returning a Tune searcher)
    and scheduler (``asha`` or ``hyperband`` on the rungs, :func:`make_scheduler`, or a function
    returning a Tune scheduler), and its jobs on ``workers`` hosts drawn with a generator seeded
    the same way; building them again replays the same run. ``param_space`` (default: the
    synthetic surface's two hyper-parameters) is Tune's search space, ``curve(params,
    max_iterations)`` the learning curve of a sample (default :func:`synthetic_curve`). Tune's
    own files go to ``storage_path/<run>-study<k>-seed<seed>`` (default: a temporary folder)."""
    model = model or PROFILES["resnet50"]
    plan = stage_plan(n_trials, eta, min_iterations)
    tasks = []
    for index in range(n_studies):
        study_seed = seed * 1000 + index
        made_scheduler = (
            make_scheduler(scheduler, eta, len(plan)) if isinstance(scheduler, str) else scheduler()
        )
        made_searcher = (
            make_searcher(searcher, study_seed) if isinstance(searcher, str)
            else searcher(study_seed)
        )  # fmt: skip
        search = TuneSearch(
            param_space if param_space is not None else synthetic_space(),
            curve or synthetic_curve,
            made_scheduler,
            made_searcher,
            n_trials,
            parallel,
            n_hosts,
            workers,
            random.Random(study_seed),
            name=f"{run}-study{index}-seed{seed}",
            storage_path=storage_path,
            seed=study_seed,
        )
        tasks.append(HpoTask(index, 0.0, model, pattern, [], [], plan, eta, asynchronous=True,
                             search=search))  # fmt: skip
    return tasks


def run_tune(
    param_space: dict | None = None,
    curve: Callable[[dict, int], Curve] | None = None,
    *,
    backend: str = "simulator",
    policy: str = "fair",
    gpu_policy: str = "none",
    scheduler: str | Callable[[], Any] = "asha",
    searcher: str | Callable[[int], Any] = "random",
    n_trials: int = 27,
    parallel: int = 9,
    studies: int = 1,
    seed: int = 1,
    hosts: int = 13,
    workers: int = 3,
    eta: int = 3,
    min_iterations: int = 10,
    model: str | ModelProfile = "resnet50",
    pattern: str = "ring",
    link_bps: float = 1e9,
    gpus_per_host: int = 1,
    quantum: float = 5.0,
    label: str | None = None,
    out: Path | None = None,
    emulated_link_bps: float = 20e6,
    timeout: float = 1800.0,
) -> StudyRun:
    """Run ``studies`` concurrent Ray Tune studies of ``n_trials`` trials each on the cluster.

    Every trial samples ``param_space`` (Tune's search space; default the synthetic surface's
    ``learning_rate`` and ``momentum``) and trains, rung after rung, as one job on ``workers``
    of ``hosts`` hosts (rungs of ``min_iterations * eta**k`` iterations), up to ``parallel``
    trials of a study at once; Tune's scheduler decides after every rung whether it goes on.
    ``curve(params, max_iterations)`` gives a sample's learning curve (default: the synthetic
    surface's, :func:`workloads.tune_search.synthetic_curve`).

    Args:
        param_space, curve: as above.
        backend: ``"simulator"`` (hosts on a big switch of ``link_bps`` bit/s links) or
            ``"testbed"`` (root and Open vSwitch: the Mininet testbed at ``emulated_link_bps``
            per link standing for ``link_bps``, files in ``out``, ``timeout`` s per attempt;
            its simulator prediction runs fresh studies of the same seed).
        policy: the network policy's name (or ``package.module:Class``).
        gpu_policy: the GPU time-sharing policy's name (``none``: a GPU per worker), with
            ``gpus_per_host`` GPUs per host and a ``quantum`` of that many seconds.
        scheduler: ``"asha"`` or ``"hyperband"`` (Tune's, on the rungs), or a function
            returning a Tune scheduler (with ``time_attr="budget"``, the iterations trained in
            units of the first rung's, its milestones fall on the rungs' ends).
        searcher: ``"random"`` or ``"optuna"`` (seeded from ``seed`` and the study's index), or
            a function of that seed returning a Tune searcher.
        n_trials, parallel, studies, seed, hosts, workers, eta, min_iterations: as above.
        model: every trial's model profile (a name of :data:`workloads.profiles.PROFILES`).
        pattern: the jobs' synchronisation pattern (``ring``, ``ps``, ...).
        label: names the run and its studies (default: the policies', ``beamer+hermes``).
        out: the testbed's folder; in the simulator, where Tune keeps its own files
            (``out/tune``; default a temporary folder).

    Returns:
        The run's :class:`experiments.optuna_study.StudyRun` (``task.search`` is each study's
        :class:`TuneSearch`, ``task.search.results`` Tune's ``ResultGrid``). The same arguments
        give the same trials, stops and best trials in the simulator.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    label = label or run_label(policy, gpu_policy)
    profile = PROFILES[model] if isinstance(model, str) else model

    def make_tasks(link_scale: float = 1.0, keep: bool = True) -> list[HpoTask]:
        storage = out / "tune" if out is not None and keep else None
        return tune_tasks(
            studies, seed, hosts, n_trials, parallel, scheduler, searcher, eta, min_iterations,
            workers, profile.with_bytes_divided_by(link_scale), pattern, param_space, curve,
            run=label, storage_path=storage,
        )  # fmt: skip

    if backend == "testbed":
        flags = testbed_flags(hosts, workers, eta, min_iterations, link_bps,
                              emulated_link_bps, timeout, gpus_per_host, quantum)  # fmt: skip
        made = _Closing(make_tasks)
        try:
            return on_testbed(label, seed, policy, gpu_policy, made, flags, out, trial_rows,
                              best_trial)  # fmt: skip
        finally:
            made.close()

    tasks = make_tasks()
    try:
        simulated = simulate(tasks, policy, gpu_policy, hosts, link_bps, gpus_per_host, quantum)
    finally:
        for task in tasks:
            task.search.close()
    trials = [row for task in tasks for row in trial_rows(task)]
    best = {task.task_id: best_trial(task, simulated.rows["jobs"]) for task in tasks}
    return finish_run(label, seed, tasks, simulated, trials, best)


class _Closing(StudiesMade):
    """Fresh Tune studies for each use of a testbed run, every one closed at the end."""

    def __init__(self, make: Callable[[float, bool], list[HpoTask]]) -> None:
        super().__init__(make, 1.0, None)
        self.made: list[HpoTask] = []

    def __call__(self, use: str) -> list[HpoTask]:
        """Fresh studies for ``use``, remembered to be closed."""
        tasks = super().__call__(use)
        self.made += tasks
        return tasks

    def close(self) -> None:
        """End every study made (a failed attempt's too)."""
        for task in self.made:
            task.search.close()


__all__ = ["run_tune", "tune_tasks"]
