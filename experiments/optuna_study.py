"""Your Optuna study on the cluster: :func:`run_study` trains its trials as jobs (a rung of
successive halving each) under a network and a GPU policy, in the simulator or on the Mininet
testbed, with Optuna's own sampler, pruner and storage; :func:`write_plots` draws Optuna's plots
of the studies. ``hpo-optuna`` (:mod:`experiments.optuna_hpo`) runs every study through these.
"""

from __future__ import annotations

import csv
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import optuna

from controller.policies import make_policy
from simulator.__main__ import run_label
from simulator.engine import Fabric, Simulator, warm_up
from simulator.hpo import HpoDriver
from simulator.metrics import coflow_rows
from workloads.curves import Curve
from workloads.gpu import GpuManager, make_gpu_policy
from workloads.hpo import HpoTask
from workloads.optuna_search import (
    BACKENDS,
    ConfigSpace,
    best_trial,
    open_storage,
    optuna_tasks,
    study_name,
    trial_rows,
)
from workloads.profiles import PROFILES, ModelProfile

Suggest = Callable[[optuna.Trial, int], Curve]


@dataclass
class StudyRun:
    """What :func:`run_study` gives back.

    Attributes:
        label: the run's label, its policies' names (``beamer``, ``fair+hermes``).
        seed: the seed the studies and the workload were drawn with.
        tasks: the HPO tasks, one per study (``task.search.study`` is the study).
        result: the run's stage and HPO metrics (``hpo-sim hpo``'s summary in the
            simulator, the testbed run's in :mod:`experiments.testbed_run`) plus ``trials``,
            ``pruned`` and ``best_trial``.
        best: per study (task id), its best completed trial (number, value, params, when it
            completed), or ``None`` if every trial was pruned.
        rows: result tables by name (``trials``, ``jobs``, and in the simulator ``stages``,
            ``configs``, ``tasks``, ``coflows``), ready for CSV files.
        wall_s: seconds the run took (the simulation alone, in the simulator).
    """

    label: str
    seed: int
    tasks: list[HpoTask]
    result: dict
    best: dict[int, dict | None]
    rows: dict[str, list[dict]] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def studies(self) -> list[optuna.Study]:
        """The run's studies, in task order."""
        return [task.search.study for task in self.tasks]


def run_study(
    space: ConfigSpace | Suggest | None = None,
    *,
    backend: str = "simulator",
    policy: str = "fair",
    gpu_policy: str = "none",
    sampler: str | optuna.samplers.BaseSampler = "tpe",
    pruner: str | optuna.pruners.BasePruner = "halving",
    storage: str | optuna.storages.BaseStorage | None = None,
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
    """Run ``studies`` concurrent Optuna studies of ``n_trials`` trials each on the cluster.

    Every trial asks ``space`` for its hyper-parameters and learning curve: a
    :class:`workloads.optuna_search.ConfigSpace`, or a function ``suggest(trial,
    max_iterations) -> Curve`` calling ``trial.suggest_*`` (default: the synthetic surface).
    It trains as one job on ``workers`` of ``hosts`` hosts per rung (rungs of
    ``min_iterations * eta**k`` iterations), up to ``parallel`` trials of a study at once;
    each rung's accuracy is reported to the trial and the pruner decides whether it trains on.

    Args:
        space: the search space (see above).
        backend: ``"simulator"`` (hosts on a big switch of ``link_bps`` bit/s links) or
            ``"testbed"`` (root and Open vSwitch: the Mininet testbed at ``emulated_link_bps``
            per link standing for ``link_bps``, files in ``out``, ``timeout`` s per attempt).
        policy: the network policy's name (or ``package.module:Class``).
        gpu_policy: the GPU time-sharing policy's name (``none``: a GPU per worker), with
            ``gpus_per_host`` GPUs per host and a ``quantum`` of that many seconds.
        sampler: a name of :data:`workloads.optuna_search.SAMPLERS` (seeded from ``seed`` and
            the study's index) or a sampler object (shared by the studies as it is).
        pruner: ``"halving"`` or ``"hyperband"`` on the rungs, or a pruner object.
        storage: an Optuna storage or its URL (``sqlite:///studies.db``, ``journal:PATH``,
            :func:`workloads.optuna_search.open_storage`); default in memory. Its studies are
            named ``<label>-study<k>-seed<seed>``; one of those names there already raises
            :class:`workloads.optuna_search.OptunaSetupError`.
        n_trials, parallel, studies, seed, hosts, workers, eta, min_iterations: as above.
        model: every trial's model profile (a name of :data:`workloads.profiles.PROFILES`).
        pattern: the jobs' synchronisation pattern (``ring``, ``ps``, ...).
        label: names the run and its studies (default: the policies', ``beamer+hermes``).

    Returns:
        The run's :class:`StudyRun`. The same arguments give the same trials, prunings and
        best trials in the simulator.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    label = label or run_label(policy, gpu_policy)
    profile = PROFILES[model] if isinstance(model, str) else model
    if isinstance(storage, str):
        storage = open_storage(storage)

    def make_tasks(link_scale: float = 1.0, keep: bool = True) -> list[HpoTask]:
        return optuna_tasks(
            studies, seed, hosts, n_trials, parallel, pruner, sampler, eta, min_iterations,
            workers, profile.with_bytes_divided_by(link_scale), pattern, space,
            storage=storage if keep else None, run=label,
        )  # fmt: skip

    if backend == "testbed":
        flags = testbed_flags(hosts, workers, eta, min_iterations, link_bps,
                              emulated_link_bps, timeout, gpus_per_host, quantum)  # fmt: skip
        return _on_testbed(label, seed, policy, gpu_policy, make_tasks, flags, out, storage)

    tasks = make_tasks()
    simulated = simulate(tasks, policy, gpu_policy, hosts, link_bps, gpus_per_host, quantum)
    trials = [row for task in tasks for row in trial_rows(task)]
    best = {task.task_id: best_trial(task, simulated.rows["jobs"]) for task in tasks}
    return finish_run(label, seed, tasks, simulated, trials, best)


@dataclass
class Simulated:
    """A run of HPO tasks in the simulator (:func:`simulate`): its summary, result tables
    (``stages``, ``jobs``, ``configs``, ``tasks``, ``coflows``) and the simulation's seconds."""

    result: dict
    rows: dict[str, list[dict]]
    wall_s: float


def simulate(
    tasks: list[HpoTask],
    policy: str,
    gpu_policy: str,
    hosts: int,
    link_bps: float,
    gpus_per_host: int,
    quantum: float,
) -> Simulated:
    """Train ``tasks`` on ``hosts`` hosts of a big switch of ``link_bps`` links under network
    policy ``policy`` and GPU policy ``gpu_policy`` (``none``: a GPU per worker)."""
    warm_up()
    sim = Simulator(Fabric(hosts, link_bps), make_policy(policy))
    gpus = None
    if gpu_policy != "none":
        gpus = GpuManager(make_gpu_policy(gpu_policy), hosts, gpus_per_host, quantum, 0.0)
    driver = HpoDriver(sim, tasks, gpus=gpus)
    started = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - started
    rows = {"stages": driver.stage_rows(), "jobs": driver.job_rows(),
            "configs": driver.config_rows(), "tasks": driver.task_rows(),
            "coflows": coflow_rows(sim)}  # fmt: skip
    return Simulated(driver.core.summary(sim.now_s), rows, wall)


def finish_run(
    label: str,
    seed: int,
    tasks: list[HpoTask],
    simulated: Simulated,
    trials: list[dict],
    best: dict[int, dict | None],
) -> StudyRun:
    """The :class:`StudyRun` of a simulated run, its trials' rows and best trials; a trial
    is pruned when its state says so (Optuna's ``PRUNED``, Tune's ``STOPPED``)."""
    result = dict(simulated.result)
    result.update(seed=seed, wall_s=simulated.wall_s, trials=len(trials), best_trial=best,
                  pruned=sum(row["state"] in PRUNED_STATES for row in trials))  # fmt: skip
    rows = {**simulated.rows, "trials": trials}
    return StudyRun(label, seed, tasks, result, best, rows, simulated.wall_s)


PRUNED_STATES = ("PRUNED", "STOPPED")


class StudiesMade:
    """Fresh studies for each use of a testbed run (``experiments.testbed_run.Tasks``): the
    testbed's go to the storage, replacing a failed attempt's; the simulator's prediction's
    stay in memory.

    ``make(link_scale, keep)`` builds the tasks (``keep``: into the storage)."""

    def __init__(
        self,
        make: Callable[[float, bool], list[HpoTask]],
        link_scale: float,
        storage: optuna.storages.BaseStorage | None = None,
    ) -> None:
        self.make = make
        self.link_scale = link_scale
        self.storage = storage
        self.testbed: list[HpoTask] = []

    def __call__(self, use: str) -> list[HpoTask]:
        """Fresh studies for ``use`` (``"testbed"`` or ``"prediction"``)."""
        if use != "testbed":
            return self.make(self.link_scale, False)
        if self.storage is not None:
            for task in self.testbed:  # a failed attempt's studies: the new attempt's replace them
                optuna.delete_study(study_name=task.search.study.study_name, storage=self.storage)
        self.testbed = self.make(self.link_scale, True)
        return self.testbed


def testbed_flags(
    hosts: int,
    workers: int,
    eta: int,
    min_iterations: int,
    link_bps: float,
    emulated_link_bps: float,
    timeout: float,
    gpus_per_host: int,
    quantum: float,
) -> dict:
    """A framework study's ``hpo-testbed`` flags (for :func:`testbed_argv`): the cluster, the
    rungs and the GPUs, with the link rates in the units the flags take."""
    return {"hosts": hosts, "workers": workers, "eta": eta, "min_iterations": min_iterations,
            "link_gbps": link_bps / 1e9, "bw": emulated_link_bps / 1e6, "timeout": timeout,
            "gpus_per_host": gpus_per_host, "quantum": quantum}  # fmt: skip


def testbed_argv(flags: dict, out: Path) -> list[str]:
    """``hpo-testbed``'s command line for ``flags`` (their names, with ``_`` for ``-``) and
    the folder ``out``."""
    return [*(f"--{key.replace('_', '-')}={value}" for key, value in flags.items()),
            "--out", str(out)]  # fmt: skip


def _on_testbed(
    label: str,
    seed: int,
    policy: str,
    gpu_policy: str,
    make_tasks: Callable[[float, bool], list[HpoTask]],
    flags: dict,
    out: Path | None,
    storage: optuna.storages.BaseStorage | None,
) -> StudyRun:
    """The run on the Mininet testbed as ``hpo-testbed`` runs one with ``flags`` (its files in
    ``out``), the simulator's prediction beside it."""
    made = StudiesMade(make_tasks, 1.0, storage)
    return on_testbed(label, seed, policy, gpu_policy, made, flags, out, trial_rows, best_trial)


def on_testbed(
    label: str,
    seed: int,
    policy: str,
    gpu_policy: str,
    made: StudiesMade,
    flags: dict,
    out: Path | None,
    rows_of: Callable[[HpoTask], list[dict]],
    best_of: Callable[[HpoTask, list[dict]], dict | None],
) -> StudyRun:
    """The run of the tasks ``made`` makes on the Mininet testbed as ``hpo-testbed`` runs one
    with ``flags`` (its files in ``out``), the simulator's prediction beside it; each task's
    trial rows from ``rows_of(task)``, its best trial from ``best_of(task, job_rows)``."""
    # Mininet and the controller: only on this path
    from experiments import run_testbed
    from experiments.testbed_network import network
    from experiments.testbed_run import Run, run_with_retries
    from experiments.testbed_settings import parse

    if out is None:
        raise ValueError("the testbed backend needs out, the folder for its files")
    settings = parse(run_testbed.build_parser(), testbed_argv(flags, out))
    made.link_scale = settings.link_scale
    run = Run(policy, out, seed, gpu_policy, made, f"studies {label}, seed {seed}")
    started = time.perf_counter()
    with network.testbed_lock():  # (re-entrant: the command holds it for all runs)
        result, _ = run_with_retries(settings, run)
    wall = time.perf_counter() - started
    trials = [row for task in made.testbed for row in rows_of(task)]
    with open(out / "jobs.csv", newline="") as f:
        jobs = list(csv.DictReader(f))
    best = {task.task_id: best_of(task, jobs) for task in made.testbed}
    result.update(seed=seed, trials=len(trials), best_trial=best,
                  pruned=sum(row["state"] in PRUNED_STATES for row in trials))  # fmt: skip
    return StudyRun(label, seed, made.testbed, result, best, {"trials": trials}, wall)


PLOTS = ("history", "intermediate", "parallel", "importances")


def write_plots(studies: list[optuna.Study], folder: Path) -> list[str]:
    """Optuna's own plots (``optuna.visualization.matplotlib``) of each study, as
    ``<folder>/<study name>-<plot>.png`` for every plot of :data:`PLOTS` that applies: the
    optimisation history and the parallel coordinates (at least one completed trial), the
    intermediate values (a reported rung), the parameter importances (two completed trials).
    Returns a one-line note for every plot left out, and why."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as plots

    folder.mkdir(parents=True, exist_ok=True)
    notes = []
    for study in studies:
        trials = study.trials
        completed = sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
        reported = any(t.intermediate_values for t in trials)
        drawers = {
            "history": (plots.plot_optimization_history, completed >= 1, "no completed trial"),
            "intermediate": (plots.plot_intermediate_values, reported, "no reported rung"),
            "parallel": (plots.plot_parallel_coordinate, completed >= 1, "no completed trial"),
            "importances": (
                plots.plot_param_importances,
                completed >= 2,
                f"{completed} completed trial(s), needs 2",
            ),
        }
        for kind, (draw, applies, why) in drawers.items():
            if not applies:
                notes.append(f"{study.study_name}: no {kind} plot ({why})")
                continue
            try:
                with warnings.catch_warnings():
                    # Optuna's matplotlib plots are experimental; saying so on every run is noise
                    warnings.simplefilter("ignore")
                    ax = draw(study)
            except Exception as exc:  # a missing package or too few trials: a note, not a crash
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                notes.append(f"{study.study_name}: no {kind} plot ({first})")
                plt.close("all")
                continue
            # Optuna puts some titles on the left: name the study in whichever it used
            loc = next((at for at in ("left", "right") if ax.get_title(at)), "center")
            ax.set_title(f"{ax.get_title(loc)}\n{study.study_name}", loc=loc)
            figure = ax.figure
            figure.tight_layout()
            figure.savefig(folder / f"{study.study_name}-{kind}.png", dpi=100)
            plt.close(figure)
    return notes


__all__ = ["BACKENDS", "PLOTS", "StudyRun", "run_study", "study_name", "write_plots"]
