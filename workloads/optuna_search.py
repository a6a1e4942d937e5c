"""An Optuna study drives an HPO task on the cluster: trials are jobs, rungs are stages.

A task whose ``search`` is an :class:`OptunaSearch` runs asynchronously
(:class:`workloads.hpo_core.HpoCore`): the study's sampler picks every configuration's
hyper-parameters (``study.ask()``), each configuration trains rung by rung of the task's
successive-halving plan as one job per rung, and at the end of every rung its accuracy goes to
``trial.report(accuracy, step=iterations trained)``; the study's own pruner
(``SuccessiveHalvingPruner``, ``HyperbandPruner``, ...) then says whether it trains on
(``trial.should_prune()``). A pruned trial is told ``PRUNED``, one that completes the last rung
is told its final accuracy. Up to ``parallel`` trials train at once; a new one is asked for
whenever one ends, until ``n_trials`` have been asked. The rungs are the stages the network
policies see (Beamer orders them; the controller registers them), with no barrier between them,
as ASHA's.

The configurations' learning curves come from a :class:`ConfigSpace`: the YAHPO Gym LCBench
surrogate (:class:`LcBenchSpace`, so the sampled hyper-parameters are a real MLP's) where its
data is at hand, else :class:`SyntheticSpace`, a smooth response surface over two
hyper-parameters, so a sampler still has something to learn.

Studies live in memory unless given a storage (:func:`open_storage`: any Optuna storage URL, or
a JournalStorage file), where ``optuna-dashboard`` and the ``optuna`` command see them; every
study is named after its run, index and seed (:func:`study_name`).

The HPO core sees only the :class:`workloads.hpo.RungSearch` protocol.
"""

from __future__ import annotations

import importlib.util
import math
import random
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from workloads.curves import Curve, LearningCurve, TabulatedCurve
from workloads.hpo import HpoTask, stage_plan
from workloads.profiles import PROFILES, ModelProfile
from workloads.yahpo import CONTINUOUS, EPOCHS, OUTPUTS, LcBench

if TYPE_CHECKING:  # (Optuna is imported where a study is made or read: --help stays light)
    import optuna

BACKENDS = ("simulator", "testbed")  # where the trials train (experiments.optuna_study)
PRUNERS = ("halving", "hyperband")
SAMPLERS = ("tpe", "random", "cmaes", "qmc", "gp")
# the packages a sampler needs beyond Optuna's own
SAMPLER_NEEDS = {"cmaes": ("cmaes",), "qmc": ("scipy",), "gp": ("torch", "scipy")}
# a storage "URL" naming a JournalStorage file rather than a database
JOURNAL_PREFIX = "journal:"
JOURNAL_SUFFIXES = (".log", ".jsonl", ".journal")


class OptunaSetupError(ValueError):
    """A sampler, storage or study that cannot be set up; the message is one line."""


class ConfigSpace(Protocol):
    """Hyper-parameters a trial suggests, and the learning curve they give."""

    def suggest(self, trial: optuna.Trial, max_iterations: int) -> Curve:
        """Suggest the trial's hyper-parameters; their curve over ``max_iterations``."""


class SyntheticSpace:
    """Two hyper-parameters with a known optimum: ``learning_rate`` (log-uniform in
    [1e-4, 1]) and ``momentum`` (uniform in [0, 0.99]).

    The converged accuracy peaks at 0.95 for a learning rate of 1e-2 and falls with the square
    of its decimal distance from it (0.2 per decade squared, floor 0.3), less 0.1 x
    ``|momentum - 0.9|``; a larger learning rate and more momentum also converge faster
    (``tau`` from 0.1 to 1 of the budget). Made up, stated, and the same for every run."""

    def suggest(self, trial: optuna.Trial, max_iterations: int) -> Curve:
        """See the class docstring."""
        rate = trial.suggest_float("learning_rate", 1e-4, 1.0, log=True)
        momentum = trial.suggest_float("momentum", 0.0, 0.99)
        return synthetic_curve(rate, momentum, max_iterations)


def synthetic_curve(learning_rate: float, momentum: float, max_iterations: int) -> Curve:
    """The synthetic surface's learning curve (see :class:`SyntheticSpace`), for any framework
    that samples the two hyper-parameters (a Ray Tune study: :mod:`workloads.tune_search`)."""
    decades = math.log10(learning_rate) + 2.0
    final = max(0.3, 0.95 - 0.2 * decades**2 - 0.1 * abs(momentum - 0.9))
    speed = (math.log10(learning_rate) + 4.0) / 4.0 * 0.7 + momentum * 0.3  # 0 (slow) .. 1 (fast)
    return LearningCurve(final, max_iterations * (1.0 - 0.9 * speed))


class LcBenchSpace:
    """The LCBench MLP's seven hyper-parameters, ranges and scales from its configuration
    space; the curve is the surrogate's validation accuracy over its 52 epochs, spread over
    the budget."""

    def __init__(self, lcbench: LcBench) -> None:
        self.lcbench = lcbench

    def suggest(self, trial: optuna.Trial, max_iterations: int) -> Curve:
        """See the class docstring."""
        config = {}
        for name in CONTINUOUS[1:]:
            h = self.lcbench.space[name]
            low, high = float(h["lower"]), float(h["upper"])
            if h["type"] == "uniform_int":
                config[name] = trial.suggest_int(name, int(low), int(high), log=bool(h.get("log")))
            else:
                config[name] = trial.suggest_float(name, low, high, log=bool(h.get("log")))
        return self.curve(config, max_iterations)

    def curve(self, config: dict, max_iterations: int) -> Curve:
        """The surrogate's curve of the hyper-parameters ``config`` (any framework's sample)."""
        out = self.lcbench.predict([config], list(range(1, EPOCHS + 1)))
        accuracy = out[:, OUTPUTS.index("val_accuracy")] / 100.0
        points = tuple(float(min(max(a, 0.0), 1.0)) for a in accuracy)
        return TabulatedCurve(points, max_iterations / EPOCHS)


class SuggestSpace:
    """A plain function ``suggest(trial, max_iterations) -> Curve`` as a :class:`ConfigSpace`."""

    def __init__(self, suggest: Callable[[optuna.Trial, int], Curve]) -> None:
        self._suggest = suggest

    def suggest(self, trial: optuna.Trial, max_iterations: int) -> Curve:
        """The wrapped function's curve."""
        return self._suggest(trial, max_iterations)


def as_space(space: ConfigSpace | Callable[[optuna.Trial, int], Curve] | None) -> ConfigSpace:
    """``space`` as a :class:`ConfigSpace`: one as is, a suggest function wrapped, ``None`` the
    :class:`SyntheticSpace`."""
    if space is None:
        return SyntheticSpace()
    if hasattr(space, "suggest"):
        return space
    if callable(space):
        return SuggestSpace(space)
    raise TypeError(f"space must have suggest(trial, max_iterations) or be a function: {space!r}")


def missing_packages(sampler: str) -> list[str]:
    """The packages sampler ``sampler`` needs that are not installed."""
    return [p for p in SAMPLER_NEEDS.get(sampler, ()) if importlib.util.find_spec(p) is None]


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """Optuna's built-in sampler ``name`` (:data:`SAMPLERS`) seeded with ``seed``.

    Raises :class:`OptunaSetupError` for an unknown name, or one whose packages are missing
    (naming what to install)."""
    import optuna

    if name not in SAMPLERS:
        raise OptunaSetupError(f"sampler must be one of {', '.join(SAMPLERS)}, got {name!r}")
    if missing := missing_packages(name):
        raise OptunaSetupError(
            f"sampler {name!r} needs {' and '.join(missing)}: pip install {' '.join(missing)}"
        )
    # every study's first trials are sampled independently: expected, so not warned about
    quiet = {"warn_independent_sampling": False}
    with warnings.catch_warnings():
        # qmc and gp are experimental in Optuna; that is the user's choice, not news every run
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            return optuna.samplers.TPESampler(seed=seed)
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "cmaes":
            return optuna.samplers.CmaEsSampler(seed=seed, **quiet)
        if name == "qmc":
            # scrambled, so that the seed picks the sequence as it does every other sampler's
            return optuna.samplers.QMCSampler(scramble=seed is not None, seed=seed, **quiet)
        return optuna.samplers.GPSampler(seed=seed, **quiet)


def make_pruner(
    name: str, min_iterations: int, max_iterations: int, eta: int
) -> optuna.pruners.BasePruner:
    """Optuna's own pruner ``name`` (:data:`PRUNERS`) on the task's rungs: a first rung of
    ``min_iterations``, then ``eta`` times more each."""
    import optuna

    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=min_iterations, reduction_factor=eta
        )
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=min_iterations, max_resource=max_iterations, reduction_factor=eta
        )
    raise ValueError(f"pruner must be one of {', '.join(PRUNERS)}, got {name!r}")


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """The Optuna storage ``url`` names: ``journal:PATH`` or a path ending in ``.log``,
    ``.jsonl`` or ``.journal`` is a JournalStorage file (created if absent), ``redis://...`` a
    JournalStorage on Redis, anything else an RDB URL (``sqlite:///studies.db``,
    ``postgresql://...``).

    Raises :class:`OptunaSetupError` (one line) if it cannot be opened."""
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend, JournalRedisBackend

    try:
        if url.startswith(JOURNAL_PREFIX) or url.endswith(JOURNAL_SUFFIXES):
            path = url.removeprefix(JOURNAL_PREFIX)
            if not path:
                raise OptunaSetupError(f"storage {url!r}: no file after {JOURNAL_PREFIX}")
            return JournalStorage(JournalFileBackend(path))
        if url.startswith(("redis://", "rediss://", "unix://")):
            return JournalStorage(JournalRedisBackend(url))
        if "://" not in url:
            raise OptunaSetupError(
                f"storage {url!r} is neither a database URL (e.g. sqlite:///studies.db) nor a "
                f"journal file ({JOURNAL_PREFIX}PATH or a path ending in "
                f"{', '.join(JOURNAL_SUFFIXES)})"
            )
        return RDBStorage(url)
    except OptunaSetupError:
        raise
    except Exception as exc:  # SQLAlchemy, drivers and the file system raise their own kinds
        raise OptunaSetupError(f"storage {url!r}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    """An exception's message, its first line (SQLAlchemy's run to several)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def study_name(run: str, index: int, seed: int) -> str:
    """The name of study ``index`` of run ``run`` (its policies' label) with seed ``seed``."""
    return f"{run}-study{index}-seed{seed}"


def check_new_studies(storage: optuna.storages.BaseStorage, names: Iterable[str], url: str) -> None:
    """Raise :class:`OptunaSetupError` if ``storage`` (opened from ``url``) already holds a
    study of one of ``names``: a rerun into the same storage would mix two runs' trials."""
    existing = {study.study_name for study in storage.get_all_studies()}
    taken = [name for name in names if name in existing]
    if taken:
        more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
        raise OptunaSetupError(
            f"study {taken[0]!r}{more} already exists in storage {url}: give another --storage, "
            f"or delete it (optuna delete-study --study-name {taken[0]} --storage {url})"
        )


class OptunaSearch:
    """A study deciding one task's configurations and rungs (see the module docstring).

    Args:
        study: the study (direction ``maximize``: the value is the final accuracy).
        space: the hyper-parameters and the curves they give.
        n_trials: trials to ask for in all.
        parallel: trials training at once.
        n_hosts: hosts of the cluster; every trial's job runs on ``workers`` of them, drawn
            with ``rng``.
        workers: GPUs (hosts) per job.
        rng: draws the hosts (seeded: the same seed, the same placement).
    """

    def __init__(
        self,
        study: optuna.Study,
        space: ConfigSpace,
        n_trials: int,
        parallel: int,
        n_hosts: int,
        workers: int,
        rng: random.Random,
    ) -> None:
        if n_trials < 1 or parallel < 1:
            raise ValueError("need n_trials >= 1 and parallel >= 1")
        if workers > n_hosts:
            raise ValueError(f"workers ({workers}) exceed n_hosts ({n_hosts})")
        self.study = study
        self.space = space
        self.n_trials = n_trials
        self.parallel = parallel
        self.n_hosts = n_hosts
        self.workers = workers
        self.rng = rng
        self.trials: dict[int, optuna.Trial] = {}  # configuration -> its trial
        self.running = 0  # trials asked and not told yet

    def _ask(self, task: HpoTask, count: int) -> list[int]:
        """Ask for up to ``count`` new trials; they become the task's next configurations."""
        configs = []
        while len(configs) < count and len(self.trials) < self.n_trials:
            trial = self.study.ask()
            max_iterations = sum(iterations for _, iterations in task.plan)
            task.curves.append(self.space.suggest(trial, max_iterations))
            task.hosts.append(self.rng.sample(range(self.n_hosts), self.workers))
            config = len(task.curves) - 1
            self.trials[config] = trial
            self.running += 1
            configs.append(config)
        return configs

    def first_configs(self, task: HpoTask) -> list[int]:
        """The first ``parallel`` trials."""
        return self._ask(task, self.parallel)

    def rung_done(
        self, task: HpoTask, rung: int, config: int, completed: dict[int, float],
        promoted: list[int],
    ) -> list[int]:  # fmt: skip
        """Report the rung's accuracy to the trial; it goes on unless the pruner prunes it
        or it has completed the last rung."""
        trial = self.trials[config]
        accuracy = completed[config]
        step = sum(iterations for _, iterations in task.plan[: rung + 1])
        trial.report(accuracy, step)
        if rung + 1 >= len(task.plan):
            self._tell(trial, accuracy)
            return []
        if trial.should_prune():
            self._tell(trial, None)
            return []
        return [config]

    def _tell(self, trial: optuna.Trial, accuracy: float | None) -> None:
        import optuna

        if accuracy is None:
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            self.study.tell(trial, accuracy)
        self.running -= 1

    def more_configs(self, task: HpoTask) -> list[int]:
        """New trials for the places that ended trials left."""
        return self._ask(task, self.parallel - self.running)

    def exhausted(self, task: HpoTask) -> bool:
        """Whether every trial has been asked for."""
        return len(self.trials) >= self.n_trials


def optuna_tasks(
    n_studies: int,
    seed: int,
    n_hosts: int,
    n_trials: int,
    parallel: int,
    pruner: str | optuna.pruners.BasePruner = "halving",
    sampler: str | optuna.samplers.BaseSampler = "tpe",
    eta: int = 3,
    min_iterations: int = 10,
    workers: int = 3,
    model: ModelProfile | None = None,
    pattern: str = "ring",
    space: ConfigSpace | Callable[[optuna.Trial, int], Curve] | None = None,
    storage: optuna.storages.BaseStorage | str | None = None,
    run: str = "run",
) -> list[HpoTask]:
    """``n_studies`` HPO tasks, each driven by a fresh seeded study (see the module docstring).

    Every study has its own sampler seed (``seed`` and the study's index; a sampler given as an
    object is shared by the studies as it is), the same pruner (a name of :data:`PRUNERS`, on
    rungs of ``min_iterations * eta**k`` iterations, as many as successive halving over
    ``n_trials`` configurations has stages, or a pruner object) and its jobs on ``workers``
    hosts drawn with a generator seeded the same way; everything is fresh, so building them
    again with the same arguments replays the same run (each run needs its own tasks: a study
    remembers its trials). ``space`` is a :class:`ConfigSpace` or a function
    ``suggest(trial, max_iterations) -> Curve`` (default :class:`SyntheticSpace`). The studies
    go into ``storage`` (a storage or its URL, :func:`open_storage`; default in memory) named
    :func:`study_name` of ``run``; one of the same name there already raises
    :class:`OptunaSetupError`."""
    import optuna

    if isinstance(sampler, str) and sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
    model = model or PROFILES["resnet50"]
    space = as_space(space)
    if isinstance(storage, str):
        storage = open_storage(storage)
    plan = stage_plan(n_trials, eta, min_iterations)
    max_iterations = sum(iterations for _, iterations in plan)
    tasks = []
    for index in range(n_studies):
        study_seed = seed * 1000 + index
        name = study_name(run, index, seed)
        try:
            study = optuna.create_study(
                storage=storage,
                direction="maximize",
                sampler=make_sampler(sampler, study_seed) if isinstance(sampler, str) else sampler,
                pruner=(
                    make_pruner(pruner, min_iterations, max_iterations, eta)
                    if isinstance(pruner, str)
                    else pruner
                ),
                study_name=name,
            )
        except optuna.exceptions.DuplicatedStudyError as exc:
            raise OptunaSetupError(
                f"study {name!r} already exists in the storage: give another storage, or "
                f"delete the study (optuna delete-study --study-name {name})"
            ) from exc
        search = OptunaSearch(
            study, space, n_trials, parallel, n_hosts, workers, random.Random(study_seed)
        )
        tasks.append(HpoTask(index, 0.0, model, pattern, [], [], plan, eta, asynchronous=True,
                             search=search))  # fmt: skip
    return tasks


def trial_rows(task: HpoTask) -> list[dict]:
    """One row per trial of the task's study: its number, configuration, state, value (its
    final accuracy if it completed; Optuna gives a pruned one its last reported accuracy), the
    step it was last reported at and its hyper-parameters."""
    search = task.search
    frozen_trials = search.study.trials  # once: a database storage reads them all every time
    rows = []
    for config, trial in search.trials.items():
        frozen = frozen_trials[trial.number]
        rows.append(
            {
                "task_id": task.task_id,
                "trial": trial.number,
                "config": config,
                "state": frozen.state.name,
                "value": frozen.value,
                "last_step": frozen.last_step,
                **{f"param_{k}": v for k, v in sorted(frozen.params.items())},
            }
        )
    return rows


def best_trial(task: HpoTask, job_rows: list[dict]) -> dict | None:
    """The study's best completed trial: its number, value (final accuracy), parameters and
    ``found_s``, when it completed (its last job ended) from the task's arrival, from the run's
    ``job_rows`` (:meth:`workloads.hpo_core.HpoCore.job_rows`, or read back from its CSV);
    ``None`` if no trial completed."""
    import optuna

    study = task.search.study
    if not any(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials):
        return None
    best = study.best_trial
    config = next(c for c, trial in task.search.trials.items() if trial.number == best.number)
    ends = [
        float(row["finish_s"])
        for row in job_rows
        if int(row["task_id"]) == task.task_id and int(row["config"]) == config
    ]
    return {
        "trial": best.number,
        "value": best.value,
        "params": dict(best.params),
        "found_s": max(ends) - task.arrival_s,
    }
