"""A Ray Tune study drives an HPO task on the cluster: trials are jobs, rungs are stages.

A task whose ``search`` is a :class:`TuneSearch` runs asynchronously
(:class:`workloads.hpo_core.HpoCore`), as an Optuna study's does
(:mod:`workloads.optuna_search`), but the decisions are Tune's own: a ``Tuner`` runs beside the
cluster (in a thread of this process), its searcher samples every trial's hyper-parameters
from the ``param_space``, and its scheduler (Tune's ``ASHAScheduler``, ``HyperBandScheduler``,
...) says after every rung whether the trial goes on, stops or pauses.

Every Tune trial is the function trainable :func:`train_on_cluster`. It asks the cluster to
train it to the end of its next rung (a call to a small Ray actor, :class:`Mailbox`, that waits
until the cluster answers), then hands the answer to ``tune.report``: ``accuracy`` (the
metric), ``iterations`` trained so far, ``budget`` (those iterations in units of the first
rung's: ``1, eta, eta**2, ...``, the ``time_attr`` the schedulers of :func:`make_scheduler`
use, so that their milestones fall on the rungs' ends) and ``rung``, with a checkpoint naming
the next rung (what a paused trial resumes from). On the cluster side the rung is a job of the
task's successive-halving plan; when the job ends, :meth:`TuneSearch.rung_done` answers the
trial and waits until Tune has settled (below), then moves on every trial that asked for its
next rung.

**Settled.** Tune's controller runs a loop of steps; at the end of each, a callback looks at
every trial: settled means each one is terminated, paused, or waiting for the cluster, at the
end of two steps in a row that both began after the cluster's last answer (one step to take the
answer's consequences, a second to start what they freed: a new trial, a resumed one). The
cluster's clock does not move while Tune decides, so a run in the simulator depends only on the
seed (the searcher's and the placement's), never on how fast Tune was; on the testbed, Tune's
decision time is part of the measured time, as it would be on a real cluster.

The HPO core sees only the :class:`workloads.hpo.RungSearch` protocol.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads import optuna_search
from workloads.curves import Curve
from workloads.hpo import HpoTask
from workloads.optuna_search import LcBenchSpace
from workloads.yahpo import CONTINUOUS

METRIC = "accuracy"  # what every trial reports and the schedulers maximise
TIME_ATTR = "budget"  # iterations trained / the first rung's iterations
SCHEDULERS = ("asha", "hyperband")
SEARCHERS = ("random", "optuna")
CPU_PER_TRIAL = 0.01  # a trial only waits for the cluster: it must not hold a core
SETTLE_STEPS = 2


class TuneSetupError(ValueError):
    """A scheduler, searcher or study that cannot be set up; the message is one line."""


class TuneStalled(RuntimeError):
    """Tune did not settle in time, or its run ended with an error."""


def make_scheduler(name: str, eta: int, rungs: int) -> Any:
    """Tune's scheduler ``name`` (:data:`SCHEDULERS`) on a task's rungs: ``time_attr`` is the
    reported ``budget`` (1 at the first rung's end, ``eta`` times more at each next), so ASHA's
    and Hyperband's milestones are the rungs' ends; ``max_t`` is the last rung's budget."""
    from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler

    max_t = eta ** (rungs - 1)
    if name == "asha":
        return ASHAScheduler(time_attr=TIME_ATTR, max_t=max_t, grace_period=1,
                             reduction_factor=eta)  # fmt: skip
    if name == "hyperband":
        return HyperBandScheduler(time_attr=TIME_ATTR, max_t=max_t, reduction_factor=eta)
    raise TuneSetupError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {name!r}")


def make_searcher(name: str, seed: int) -> Any:
    """Tune's searcher ``name`` (:data:`SEARCHERS`) seeded with ``seed``: ``random`` is Tune's
    own random search (``BasicVariantGenerator``), ``optuna`` Tune's Optuna searcher with a
    seeded TPE sampler."""
    if name == "random":
        from ray.tune.search.basic_variant import BasicVariantGenerator

        return BasicVariantGenerator(random_state=seed)
    if name == "optuna":
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        return OptunaSearch(sampler=optuna.samplers.TPESampler(seed=seed))
    raise TuneSetupError(f"searcher must be one of {', '.join(SEARCHERS)}, got {name!r}")


def synthetic_space() -> dict:
    """The synthetic surface's two hyper-parameters as a Tune ``param_space`` (the ranges of
    :class:`workloads.optuna_search.SyntheticSpace`)."""
    from ray import tune

    return {"learning_rate": tune.loguniform(1e-4, 1.0), "momentum": tune.uniform(0.0, 0.99)}


def synthetic_curve(params: dict, max_iterations: int) -> Curve:
    """The learning curve of ``params`` on the synthetic surface (the formula of
    :class:`workloads.optuna_search.SyntheticSpace`)."""
    rate, momentum = params["learning_rate"], params["momentum"]
    return optuna_search.synthetic_curve(rate, momentum, max_iterations)


def lcbench_space(space: LcBenchSpace) -> dict:
    """The LCBench MLP's seven hyper-parameters as a Tune ``param_space`` (ranges and scales of
    the surrogate's configuration space, as :class:`workloads.optuna_search.LcBenchSpace`
    samples them); ``space.curve`` gives a sample's curve."""
    from ray import tune

    params = {}
    for name in CONTINUOUS[1:]:
        h = space.lcbench.space[name]
        low, high, log = float(h["lower"]), float(h["upper"]), bool(h.get("log"))
        if h["type"] == "uniform_int":
            sample = tune.lograndint if log else tune.randint
            params[name] = sample(int(low), int(high) + 1)  # (Tune's upper bound is exclusive)
        else:
            params[name] = (tune.loguniform if log else tune.uniform)(low, high)
    return params


def _mailbox_class():
    """The :class:`Mailbox` actor class (Ray is imported only when a study starts)."""
    import ray

    return ray.remote(num_cpus=0)(Mailbox)


class Mailbox:
    """Where trials wait for the cluster (a Ray actor of :func:`_mailbox_class`): each trial's
    one open request, its rung and hyper-parameters, until the cluster answers it."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[int, dict]] = {}
        self._answers: dict[str, asyncio.Future] = {}

    async def train(self, trial_id: str, rung: int, params: dict) -> dict | None:
        """Trial ``trial_id`` asks to train to the end of ``rung``; the cluster's answer (the
        metrics to report), or ``None`` if the study was stopped."""
        answer = asyncio.get_running_loop().create_future()
        self._waiting[trial_id] = (rung, params)
        self._answers[trial_id] = answer
        return await answer

    async def waiting(self) -> dict[str, tuple[int, dict]]:
        """The open requests by trial id."""
        return dict(self._waiting)

    async def answer(self, trial_id: str, metrics: dict | None) -> None:
        """Answer trial ``trial_id``'s open request."""
        self._waiting.pop(trial_id)
        self._answers.pop(trial_id).set_result(metrics)

    async def release_all(self) -> None:
        """Answer every open request with ``None`` (the study is being stopped)."""
        for trial_id in list(self._waiting):
            await self.answer(trial_id, None)


def train_on_cluster(config: dict, mailbox: Any) -> None:
    """The function trainable of every trial: train rung after rung on the cluster, reporting
    each rung's metrics with a checkpoint naming the next rung (see the module docstring)."""
    import ray
    from ray import tune

    rung = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:  # a paused trial resumes at the rung after its last report
        with checkpoint.as_directory() as folder:
            rung = json.loads((Path(folder) / "rung.json").read_text())["next_rung"]
    trial_id = tune.get_context().get_trial_id()
    while True:
        metrics = ray.get(mailbox.train.remote(trial_id, rung, config))
        if metrics is None:
            return
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "rung.json").write_text(json.dumps({"next_rung": rung + 1}))
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
        if metrics["last"]:
            return
        rung += 1


@dataclass
class _Snapshot:
    """Tune as the last step left it: how many steps have ended, how many in a row ended
    settled, every trial's status in creation order, and the open requests."""

    steps: int = 0
    settled_run: int = 0
    statuses: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, tuple[int, dict]] = field(default_factory=dict)


# the studies running in this process, by key: Tune pickles its callbacks and stoppers with
# the experiment's state, so they hold a key, not the study's locks
_RUNNING: dict[str, TuneSearch] = {}


def _running(key: str) -> TuneSearch | None:
    """The running study ``key`` (a module function: pickled by name, not by value)."""
    return _RUNNING.get(key)


def _settle_callback(key: str):
    """A Tune callback that records a :class:`_Snapshot` of study ``key`` at the end of every
    step."""
    import ray
    from ray.tune import Callback
    from ray.tune.experiment import Trial

    quiet = {Trial.TERMINATED, Trial.ERROR, Trial.PAUSED}

    class Settle(Callback):
        def on_step_end(self, iteration: int, trials: list, **info) -> None:
            study = _running(key)
            if study is None:
                return
            waiting = ray.get(study._mailbox.waiting.remote())
            settled = all(t.status in quiet or t.trial_id in waiting for t in trials)
            snapshot = study._snapshot
            with study._changed:
                snapshot.steps += 1
                snapshot.settled_run = snapshot.settled_run + 1 if settled else 0
                snapshot.statuses = {t.trial_id: t.status for t in trials}
                snapshot.waiting = waiting
                study._changed.notify_all()

    return Settle()


def _abort_stopper(key: str):
    """A Tune stopper that ends the whole study ``key`` once it is aborted."""
    from ray.tune import Stopper

    class Abort(Stopper):
        def __call__(self, trial_id: str, result: dict) -> bool:
            return False

        def stop_all(self) -> bool:
            study = _running(key)
            return study is None or study._abort.is_set()

    return Abort()


def ensure_ray() -> None:
    """Start Ray in this process unless it runs already (quietly, no dashboard)."""
    import ray

    if not ray.is_initialized():
        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                 object_store_memory=256 * 1024 * 1024)  # fmt: skip


class TuneSearch:
    """A Tune study deciding one task's configurations and rungs (see the module docstring).

    Args:
        param_space: Tune's search space (``tune.uniform`` and friends).
        curve: the learning curve of a trial's sampled hyper-parameters over
            ``max_iterations``: ``curve(params, max_iterations) -> Curve``.
        scheduler: a Tune scheduler; with ``time_attr`` :data:`TIME_ATTR` its milestones
            fall on the rungs' ends (:func:`make_scheduler`'s do).
        searcher: a Tune searcher (seeded: the same seed, the same trials), or ``None`` for
            Tune's random search seeded with ``seed``.
        n_trials: trials in all (Tune's ``num_samples``).
        parallel: trials training at once (Tune's ``max_concurrent_trials``).
        n_hosts: hosts of the cluster; every trial's job runs on ``workers`` of them, drawn
            with ``rng``.
        workers: GPUs (hosts) per job.
        rng: draws the hosts.
        name: the Tune experiment's name; its files go to ``storage_path`` (default: a
            temporary folder).
        seed: seeds the default searcher.
        settle_timeout_s: how long to wait for Tune to settle before giving up
            (:class:`TuneStalled`).
    """

    def __init__(
        self,
        param_space: dict,
        curve: Callable[[dict, int], Curve],
        scheduler: Any,
        searcher: Any,
        n_trials: int,
        parallel: int,
        n_hosts: int,
        workers: int,
        rng: random.Random,
        name: str = "study",
        storage_path: Path | None = None,
        seed: int = 1,
        settle_timeout_s: float = 600.0,
    ) -> None:
        if n_trials < 1 or parallel < 1:
            raise ValueError("need n_trials >= 1 and parallel >= 1")
        if workers > n_hosts:
            raise ValueError(f"workers ({workers}) exceed n_hosts ({n_hosts})")
        self.param_space = param_space
        self.curve = curve
        self.scheduler = scheduler
        self.searcher = searcher
        self.n_trials = n_trials
        self.parallel = parallel
        self.n_hosts = n_hosts
        self.workers = workers
        self.rng = rng
        self.name = name
        self.storage_path = storage_path
        self.seed = seed
        self.settle_timeout_s = settle_timeout_s
        self.trial_of: dict[int, str] = {}  # configuration -> its Tune trial id
        self.config_of: dict[str, int] = {}
        self.params: dict[int, dict] = {}
        self.reported: dict[int, list[tuple[int, float]]] = {}  # config -> (iterations, accuracy)
        self.results = None  # Tune's ResultGrid once the study ended
        self._snapshot = _Snapshot()
        self._changed = threading.Condition()
        self._abort = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._mailbox = None
        self._temporary: tempfile.TemporaryDirectory | None = None
        self._key = ""
        self._unplaced: dict[str, tuple[int, dict]] = {}  # open requests at the last settle

    # ---- the RungSearch protocol --------------------------------------------------------------

    def first_configs(self, task: HpoTask) -> list[int]:
        """Start the Tune study; its first trials, once they all wait for the cluster."""
        self._start()
        return self._new_configs(task, self._settle(0))

    def rung_done(
        self, task: HpoTask, rung: int, config: int, completed: dict[int, float],
        promoted: list[int],
    ) -> list[int]:  # fmt: skip
        """Report the rung's metrics to the trial, let Tune decide; the trials that completed
        ``rung`` and now ask for the next one move on."""
        import ray

        iterations = sum(added for _, added in task.plan[: rung + 1])
        accuracy = completed[config]
        self.reported.setdefault(config, []).append((iterations, accuracy))
        metrics = {METRIC: accuracy, "iterations": iterations, "rung": rung,
                   TIME_ATTR: iterations / task.plan[0][1],
                   "last": rung + 1 >= len(task.plan)}  # fmt: skip
        mark = self._snapshot_steps()
        ray.get(self._mailbox.answer.remote(self.trial_of[config], metrics))
        waiting = self._settle(mark)
        self._unplaced = waiting
        going = []
        for trial_id, (asked, _) in waiting.items():
            other = self.config_of.get(trial_id)
            if other is not None and asked == rung + 1 and other in completed:
                if other not in promoted:
                    going.append(other)
        return sorted(going)

    def more_configs(self, task: HpoTask) -> list[int]:
        """Trials Tune started since: new configurations of the first rung."""
        return self._new_configs(task, self._unplaced)

    def exhausted(self, task: HpoTask) -> bool:
        """Whether Tune has started all its trials."""
        with self._changed:
            return len(self._snapshot.statuses) >= self.n_trials

    def status(self, trial_id: str) -> str | None:
        """Tune's status of trial ``trial_id`` at the last step (``TERMINATED``, ``PAUSED``,
        ...), ``None`` if Tune has not reported it."""
        with self._changed:
            return self._snapshot.statuses.get(trial_id)

    # ---- Tune's side ------------------------------------------------------------------------

    def _new_configs(self, task: HpoTask, waiting: dict[str, tuple[int, dict]]) -> list[int]:
        """Every waiting trial not yet a configuration becomes one, in Tune's creation order."""
        order = list(self._snapshot.statuses)
        fresh = sorted((t for t in waiting if t not in self.config_of), key=order.index)
        max_iterations = sum(added for _, added in task.plan)
        configs = []
        for trial_id in fresh:
            rung, params = waiting[trial_id]
            if rung != 0:
                raise TuneStalled(f"trial {trial_id} asked for rung {rung} before training")
            task.curves.append(self.curve(params, max_iterations))
            task.hosts.append(self.rng.sample(range(self.n_hosts), self.workers))
            config = len(task.curves) - 1
            self.trial_of[config] = trial_id
            self.config_of[trial_id] = config
            self.params[config] = dict(params)
            configs.append(config)
        return configs

    def _start(self) -> None:
        """Start Ray (if need be), the mailbox and the Tuner in a thread."""
        from ray import tune
        from ray.tune import CheckpointConfig, RunConfig, TuneConfig, Tuner

        # Tune's own progress tables: the command prints its own lines (legacy output at
        # verbose 0 prints nothing)
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        ensure_ray()
        self._mailbox = _mailbox_class().remote()
        self._key = f"{self.name}-{id(self)}"
        _RUNNING[self._key] = self
        storage = self.storage_path
        if storage is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="hpo-tune-")
            storage = Path(self._temporary.name)
        searcher = self.searcher
        if searcher is None:
            searcher = make_searcher("random", self.seed)
        trainable = tune.with_resources(
            tune.with_parameters(train_on_cluster, mailbox=self._mailbox), {"cpu": CPU_PER_TRIAL}
        )
        tuner = Tuner(
            trainable,
            param_space=self.param_space,
            tune_config=TuneConfig(
                metric=METRIC,
                mode="max",
                scheduler=self.scheduler,
                search_alg=searcher,
                num_samples=self.n_trials,
                max_concurrent_trials=self.parallel,
                reuse_actors=True,
            ),  # fmt: skip
            run_config=RunConfig(
                name=self.name,
                storage_path=str(Path(storage).resolve()),
                callbacks=[_settle_callback(self._key)],
                stop=_abort_stopper(self._key),
                checkpoint_config=CheckpointConfig(num_to_keep=1),
                verbose=0,
            ),
        )

        def fit() -> None:
            try:
                self.results = tuner.fit()
            except BaseException as exc:  # reported by the waiting side, in its thread
                self._error = exc
            finally:
                _RUNNING.pop(self._key, None)
                with self._changed:
                    self._changed.notify_all()

        self._thread = threading.Thread(target=fit, name=f"tune-{self.name}", daemon=True)
        self._thread.start()

    def _snapshot_steps(self) -> int:
        with self._changed:
            return self._snapshot.steps

    def _settle(self, mark: int) -> dict[str, tuple[int, dict]]:
        """Wait until Tune is settled after step ``mark`` (see the module docstring); the open
        requests then."""
        deadline = time.monotonic() + self.settle_timeout_s
        snapshot = self._snapshot
        with self._changed:
            while not (snapshot.settled_run >= SETTLE_STEPS
                       and snapshot.steps - snapshot.settled_run >= mark):  # fmt: skip
                if self._error is not None:
                    raise TuneStalled(f"the Tune study {self.name} failed: {self._error}")
                if self._thread is not None and not self._thread.is_alive():
                    return {}  # every trial has ended: none waits
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TuneStalled(
                        f"the Tune study {self.name} did not settle in {self.settle_timeout_s:g} s"
                    )
                self._changed.wait(min(left, 1.0))
            return dict(snapshot.waiting)

    def close(self, timeout_s: float = 120.0) -> None:
        """End the study: wait for Tune to finish its trials (every one has reported its last
        rung or been stopped), or stop it; Tune's results are then in :attr:`results`."""
        import ray

        if self._thread is None:
            return
        self._thread.join(timeout=5.0)
        if self._thread.is_alive():  # trials left waiting or paused: stop the study
            self._abort.set()
            ray.get(self._mailbox.release_all.remote())
            self._thread.join(timeout=timeout_s)
        if self._temporary is not None:
            self._temporary.cleanup()
            self._temporary = None


def trial_rows(task: HpoTask) -> list[dict]:
    """One row per trial: its number (in Tune's creation order, the configuration's), Tune's
    trial id, configuration, state (``COMPLETE``: it trained
    every rung; ``STOPPED``: the scheduler stopped it after its last reported rung;
    ``PAUSED``: left paused), value (its last reported accuracy), the iterations it last
    reported at and its hyper-parameters."""
    search: TuneSearch = task.search
    rows = []
    total = sum(added for _, added in task.plan)
    for config, trial_id in sorted(search.trial_of.items()):
        reports = search.reported.get(config, [])
        last_step, value = reports[-1] if reports else (0, None)
        status = search.status(trial_id)
        state = "COMPLETE" if last_step == total else "PAUSED" if status == "PAUSED" else "STOPPED"
        rows.append({
            "task_id": task.task_id,
            "trial": config,
            "trial_id": trial_id,
            "config": config,
            "state": state,
            "value": value,
            "last_step": last_step,
            **{f"param_{k}": v for k, v in sorted(search.params[config].items())},
        })  # fmt: skip
    return rows


def best_trial(task: HpoTask, job_rows: list[dict]) -> dict | None:
    """The study's best trial among those that trained every rung: its number, value
    (final accuracy), parameters and ``found_s``, when its last job ended from the task's
    arrival; ``None`` if none did."""
    complete = [row for row in trial_rows(task) if row["state"] == "COMPLETE"]
    if not complete:
        return None
    best = max(complete, key=lambda row: (row["value"], -row["config"]))
    ends = [
        float(row["finish_s"])
        for row in job_rows
        if int(row["task_id"]) == task.task_id and int(row["config"]) == best["config"]
    ]
    return {
        "trial": best["trial"],
        "value": best["value"],
        "params": dict(task.search.params[best["config"]]),
        "found_s": max(ends) - task.arrival_s,
    }
