"""Generated HPO workloads: tasks doing successive halving over configurations, as data.

Used by the simulator (simulated time) and by the testbed (real workers), so both run the same
workload for a seed. A *task* trains ``n_configs`` configurations of one model in stages: stage s
keeps the best ``ceil(n_configs / eta**s)`` configurations and trains each for
``min_iterations * eta**s`` iterations in all (survivors resume where they stopped). Every
configuration of a stage is a *job*: data-parallel training on ``workers`` GPUs on distinct hosts,
one synchronisation coflow per iteration (parameter server or ring all-reduce).

Parameter server (two coflows per iteration, one after the other): the PS sits on the job's first
host; every worker on the other hosts pushes its gradient (the model's bytes) to the PS, and once
the PS has every gradient it sends the updated model back (the pull). Ring all-reduce (one
coflow): each of the W workers sends 2 (W - 1) / W of the model's bytes to its successor.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from workloads.curves import LearningCurve, sample_curves
from workloads.profiles import PROFILES, ModelProfile

PATTERNS = ("ps", "ring")
MODEL_ZOO = ("resnet50", "vgg16", "inception3")  # the models a workload draws from by default
SEARCHES = ("halving", "full", "asha", "hyperband")


class Flows(NamedTuple):
    """Parallel arrays of flow sources, destinations and sizes in bytes (one coflow)."""

    src: np.ndarray
    dst: np.ndarray
    size_bytes: np.ndarray


def _flows(src: list[int], dst: list[int], size: list[float]) -> Flows:
    return Flows(np.asarray(src), np.asarray(dst), np.asarray(size, dtype=float))


def sync_phases(pattern: str, hosts: list[int], model_bytes: float) -> list[Flows]:
    """The coflows of one synchronisation of a job on ``hosts``, in the order they must run:
    a parameter server gathers every gradient (push) before it sends the model back (pull),
    two coflows; a ring all-reduce exchanges with both neighbours at once, one coflow."""
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {', '.join(PATTERNS)}, got {pattern!r}")
    if len(hosts) < 2:
        raise ValueError(
            "a parameter-server job needs at least 2 hosts (PS + 1 worker)"
            if pattern == "ps"
            else "a ring all-reduce job needs at least 2 hosts"
        )
    if pattern == "ps":
        ps, workers = hosts[0], list(hosts[1:])
        push = _flows(workers, [ps] * len(workers), [model_bytes] * len(workers))
        pull = _flows([ps] * len(workers), workers, [model_bytes] * len(workers))
        return [push, pull]
    n = len(hosts)
    return [_flows(list(hosts), list(hosts[1:]) + [hosts[0]],
                   [2.0 * (n - 1) / n * model_bytes] * n)]  # fmt: skip


def sync_flows(pattern: str, hosts: list[int], model_bytes: float) -> Flows:
    """Every flow of one synchronisation of a job on ``hosts`` (its phases together: what the
    controller registers as the job's flows of an iteration)."""
    phases = sync_phases(pattern, hosts, model_bytes)
    return Flows(*(np.concatenate([getattr(p, f) for p in phases]) for f in Flows._fields))


def stage_plan(n_configs: int, eta: int, min_iterations: int) -> list[tuple[int, int]]:
    """Successive halving: ``(configurations, iterations to add)`` for every stage."""
    if n_configs < 1 or eta < 2 or min_iterations < 1:
        raise ValueError("need n_configs >= 1, eta >= 2, min_iterations >= 1")
    plan, total, s = [], 0, 0
    while True:
        keep = math.ceil(n_configs / eta**s)
        target = min_iterations * eta**s
        plan.append((keep, target - total))
        total = target
        if keep == 1:
            return plan
        s += 1


def hyperband_brackets(n_configs: int, eta: int, min_iterations: int) -> list[Bracket]:
    """Hyperband's brackets (Li et al., "Hyperband: A Novel Bandit-Based Approach to
    Hyperparameter Optimization", JMLR 18, 2018) over the budgets of successive halving on
    ``n_configs`` configurations: with ``s_max + 1`` the number of its stages and ``R`` its
    last budget, bracket ``s`` (``s_max`` down to 0) starts ``ceil((s_max + 1) / (s + 1) *
    eta**s)`` configurations at budget ``R / eta**s`` and halves them ``s`` times, keeping
    ``floor(n / eta**i)`` in its stage ``i``. Bracket ``s_max`` is successive halving itself;
    the others trade configurations for longer first stages. Configurations are numbered
    bracket after bracket."""
    s_max = len(stage_plan(n_configs, eta, min_iterations)) - 1
    top = min_iterations * eta**s_max
    brackets, first = [], 0
    for s in range(s_max, -1, -1):
        n = math.ceil((s_max + 1) / (s + 1) * eta**s)
        plan, total = [], 0
        for i in range(s + 1):
            target = top // eta ** (s - i)
            plan.append((max(1, n // eta**i), target - total))
            total = target
        brackets.append(Bracket(list(range(first, first + n)), plan))
        first += n
    return brackets


def survivors(
    task: HpoTask, stage_index: int, trained: dict[int, int], bracket: int = 0
) -> list[int]:
    """The configurations that go on after stage ``stage_index`` of ``task``'s ``bracket``.

    Args:
        trained: iterations each configuration of the finished stage has done.
        bracket: which of the task's brackets (:attr:`HpoTask.all_brackets`) the stage is of.

    Returns:
        The best ``ceil(n / eta)`` by accuracy now (ties: lower index), as successive halving
        keeps them (the bracket plan's count); empty after the last stage.
    """
    plan = task.all_brackets[bracket].plan
    if stage_index + 1 >= len(plan):
        return []
    keep = plan[stage_index + 1][0]
    ranked = sorted(trained, key=lambda c: (-task.curves[c].accuracy(trained[c]), c))
    return ranked[:keep]


def asha_promotions(
    task: HpoTask, rung: int, completed: dict[int, float], promoted: Iterable[int]
) -> list[int]:
    """The configurations ASHA promotes out of ``rung`` now, best first.

    Asynchronous successive halving (Li et al., "A System for Massively Parallel
    Hyperparameter Tuning", MLSys 2020) promotes a configuration as soon as it ranks in the top
    ``1 / eta`` of the configurations that have *completed* the rung so far, instead of waiting
    for the whole rung (the stage barrier of successive halving). Here the fraction is the
    halving plan's own, ``keep(rung + 1) / keep(rung)`` (``1 / eta`` when the counts divide),
    so the rungs have the plan's budgets. A promotion is never taken back: a configuration that
    led early and was overtaken has moved on all the same, so a rung may promote more than
    successive halving keeps.

    Args:
        task: its ``plan`` gives the rungs (the halving stages).
        rung: the rung whose results these are.
        completed: configuration -> accuracy at the end of ``rung``, for every configuration
            that completed it.
        promoted: the configurations already promoted out of ``rung``.

    Returns:
        The configurations to promote (ranked by accuracy, ties: lower index); empty from the
        last rung.
    """
    if rung + 1 >= len(task.plan):
        return []
    keep, size = task.plan[rung + 1][0], task.plan[rung][0]
    allowed = min(keep, len(completed) * keep // size)
    ranked = sorted(completed, key=lambda c: (-completed[c], c))[:allowed]
    done = set(promoted)
    return [c for c in ranked if c not in done]


@dataclass
class Bracket:
    """Configurations that run one successive-halving plan together (a Hyperband bracket)."""

    configs: list[int]
    plan: list[tuple[int, int]]  # (configurations, iterations to add) per stage


class RungSearch(Protocol):
    """What decides an asynchronous task's rungs: which configurations start, and which move
    on each time one completes a rung (:class:`workloads.hpo_core.HpoCore` asks it).
    :class:`Asha` is the default; :class:`workloads.optuna_search.OptunaSearch` lets an Optuna
    study decide."""

    def first_configs(self, task: HpoTask) -> list[int]:
        """The configurations that start when the task arrives."""

    def rung_done(
        self, task: HpoTask, rung: int, config: int, completed: dict[int, float],
        promoted: list[int],
    ) -> list[int]:  # fmt: skip
        """``config`` just completed ``rung`` (``completed``: accuracy at the rung's end of
        every configuration that completed it, this one included; ``promoted``: those that
        moved on already); the configurations to move on to the next rung now."""

    def more_configs(self, task: HpoTask) -> list[int]:
        """New configurations to start now (a job of the task just ended)."""

    def exhausted(self, task: HpoTask) -> bool:
        """Whether no configuration will start any more."""


class Asha:
    """ASHA over a task's own configurations: all start at its arrival, and
    :func:`asha_promotions` decides who moves on."""

    def first_configs(self, task: HpoTask) -> list[int]:
        """Every configuration of the task."""
        return list(range(task.n_configs))

    def rung_done(
        self, task: HpoTask, rung: int, config: int, completed: dict[int, float],
        promoted: list[int],
    ) -> list[int]:  # fmt: skip
        """:func:`asha_promotions`."""
        return asha_promotions(task, rung, completed, promoted)

    def more_configs(self, task: HpoTask) -> list[int]:
        """None: every configuration started at the arrival."""
        return []

    def exhausted(self, task: HpoTask) -> bool:
        """Always."""
        return True


@dataclass
class HpoTask:
    """One HPO task: a model, its configurations and where their jobs run."""

    task_id: int
    arrival_s: float
    model: ModelProfile
    pattern: str
    curves: list[LearningCurve]
    hosts: list[list[int]]  # per configuration: the hosts of its job
    plan: list[tuple[int, int]] = field(default_factory=list)
    eta: int = 3
    asynchronous: bool = False  # rungs promote as results come, no stage barrier
    search: RungSearch | None = None  # what decides an asynchronous task's rungs (None: ASHA)
    brackets: list[Bracket] = field(default_factory=list)  # Hyperband's; empty: one, ``plan``

    @property
    def n_configs(self) -> int:
        """Number of configurations the task starts with."""
        return len(self.curves)

    @property
    def all_brackets(self) -> list[Bracket]:
        """Its brackets, run side by side: Hyperband's, or one of every configuration on
        ``plan``."""
        return self.brackets or [Bracket(list(range(self.n_configs)), self.plan)]

    @property
    def n_stages(self) -> int:
        """The stages it runs (at most, for a search that may stop early)."""
        return sum(len(b.plan) for b in self.all_brackets)


def generate(
    n_hosts: int,
    n_tasks: int,
    seed: int = 0,
    configs_per_task: int = 9,
    eta: int = 3,
    min_iterations: int = 10,
    workers: int = 3,
    models: tuple[str, ...] = MODEL_ZOO,
    patterns: tuple[str, ...] = PATTERNS,
    mean_interarrival_s: float = 0.0,
    scale: float = 1.0,
    good_fraction: float = 0.2,
    link_scale: float = 1.0,
    search: str = "halving",
    surrogate=None,
) -> list[HpoTask]:
    """A seeded HPO workload.

    Args:
        n_hosts: hosts of the cluster; each job's workers go on distinct random hosts.
        n_tasks: concurrent HPO tasks.
        seed: everything random derives from it.
        configs_per_task: configurations each task starts with.
        eta: successive-halving reduction factor.
        min_iterations: iterations of the first stage.
        workers: GPUs (hosts) per job; a PS job also uses them (the PS shares the first host).
        models: model profiles to draw from (:data:`workloads.profiles.PROFILES`).
        patterns: synchronisation patterns to draw from.
        mean_interarrival_s: tasks arrive as a Poisson process of this mean gap (0: all at 0).
        scale: divide bytes and compute by this factor (see ModelProfile.scaled).
        good_fraction: share of configurations with a good learning curve.
        link_scale: also divide the bytes (only) by this factor: the real link rate over the
            emulated one, so that an emulated link keeps the real compute/communication ratio
            (e.g. 10 Gbit/s emulated at 20 Mbit/s: 500).
        search: ``halving`` (successive halving) or ``full``: one stage in which every
            configuration trains as long as the halving survivor would (a grid/random search
            without early stopping, the setting where GPU time-sharing decides what is learnt
            first); ``asha``: the halving plan's rungs run asynchronously (see
            :func:`asha_promotions`); or ``hyperband``: Hyperband's brackets over the halving
            plan's budgets side by side, each successive halving (:func:`hyperband_brackets`;
            more configurations than ``configs_per_task`` in all).
        surrogate: a :class:`workloads.yahpo.LcBench` to take the learning curves from (its 52
            epochs spread over the survivor's budget; ``good_fraction`` is then unused), or
            ``None`` for the parametric curves of :mod:`workloads.curves`.
    """
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {', '.join(SEARCHES)}, got {search!r}")
    if workers > n_hosts:
        raise ValueError(f"workers ({workers}) exceed n_hosts ({n_hosts})")
    unknown = [m for m in models if m not in PROFILES]
    if unknown:
        raise ValueError(f"unknown model {unknown[0]!r}; known: {', '.join(sorted(PROFILES))}")
    rng = random.Random(seed)
    tasks, clock = [], 0.0
    for t in range(n_tasks):
        if mean_interarrival_s > 0 and t:
            clock += rng.expovariate(1.0 / mean_interarrival_s)
        model = PROFILES[rng.choice(models)].scaled(scale).with_bytes_divided_by(link_scale)
        pattern = rng.choice(patterns)
        plan = stage_plan(configs_per_task, eta, min_iterations)
        if search == "full":
            plan = [(configs_per_task, sum(iterations for _, iterations in plan))]
        brackets = []
        n_configs = configs_per_task
        if search == "hyperband":
            brackets = hyperband_brackets(configs_per_task, eta, min_iterations)
            n_configs = sum(len(b.configs) for b in brackets)
        # the survivor trains sum(increments) iterations; good curves reach 90 % well before
        longest = sum(iterations for _, iterations in plan)
        if surrogate is None:
            curves = sample_curves(rng, n_configs, good_fraction, base_tau=longest / 3)
        else:
            curves = surrogate.curves(rng, n_configs, iterations_per_epoch=longest / 52)
        hosts = [rng.sample(range(n_hosts), workers) for _ in range(n_configs)]
        tasks.append(HpoTask(t, clock, model, pattern, curves, hosts, plan, eta,
                             asynchronous=search == "asha", brackets=brackets))  # fmt: skip
    return tasks


def describe_workload(
    configs_per_task: int,
    search: str = "halving",
    patterns: Iterable[str] = PATTERNS,
    n_hosts: int | None = None,
    n_tasks: int | None = None,
    seed: int | None = None,
    curves: str | None = None,
) -> str:
    """A figure title's short name for workloads :func:`generate` makes, e.g. ``"synthetic HPO
    workload, seed 1: 13 hosts, 2 tasks of 9 configs, halving, ring"``: generated, so
    synthetic (``curves`` names where the learning curves come from if not the parametric
    ones); hosts, tasks and seed where the figure has one of each."""
    name = "synthetic HPO workload" + (f" ({curves} curves)" if curves else "")
    if seed is not None:
        name += f", seed {seed}"
    size = [] if n_hosts is None else [f"{n_hosts} hosts"]
    tasks = "tasks" if n_tasks is None else f"{n_tasks} task{'s' * (n_tasks != 1)}"
    size.append(f"{tasks} of {configs_per_task} config{'s' * (configs_per_task != 1)}")
    return f"{name}: {', '.join(size)}, {search}, {'/'.join(patterns)}"


def best_identified_s(
    observations: Iterable[tuple[float, Hashable, float]], best: Hashable
) -> float | None:
    """When the HPO's best configuration was identified: the time from which on it leads (its
    last observed accuracy is at least every other configuration's), or ``None`` if it does not
    lead at the end.

    Args:
        observations: ``(time, configuration, accuracy)``, in any order.
        best: the configuration with the highest converged accuracy.
    """
    latest: dict[Hashable, float] = {}
    since = None
    for time_s, config, accuracy in sorted(observations, key=lambda o: o[0]):
        latest[config] = accuracy
        if latest.get(best, -math.inf) >= max(latest.values()):
            since = time_s if since is None else since
        else:
            since = None
    return since


def task_row(
    task: HpoTask,
    finish_s: float | None,
    final_configs: list[int],
    trained: dict[int, int],
    observations: Iterable[tuple[float, int, float]],
) -> dict:
    """Outcome of one HPO task: completion time, the configuration it ends with (the most
    accurate of its last stage) and when that one was identified, both from its arrival.

    Args:
        finish_s: when its last stage ended (``None``: not finished).
        final_configs: the configurations of its last stage.
        trained: iterations each of those configurations has done.
        observations: ``(time, configuration, accuracy)`` as its jobs reported them.
    """
    winner = None
    if finish_s is not None and final_configs:
        winner = max(final_configs, key=lambda c: (task.curves[c].accuracy(trained[c]), -c))
    identified = None if winner is None else best_identified_s(observations, winner)
    return {
        "task_id": task.task_id,
        "arrival_s": task.arrival_s,
        "hpo_completion_s": None if finish_s is None else finish_s - task.arrival_s,
        "best_config": winner,
        "best_identified_s": None if identified is None else identified - task.arrival_s,
    }


def task_rows(
    tasks: dict[int, HpoTask],
    stages: Iterable,
    jobs: dict,
    trained: Callable[[int, int], int],
    finish_s: dict[int, float],
    observations: dict[int, list[tuple[float, int, float]]],
) -> list[dict]:
    """:func:`task_row` of every task, from a driver's records.

    Args:
        stages: the stages run so far (``task_id``, ``index``, ``job_ids``).
        jobs: job id -> job (with its ``config``).
        trained: ``(task_id, config)`` -> iterations that configuration has done.
        finish_s: task id -> when its last stage ended.
        observations: task id -> ``(time, configuration, accuracy)`` as its jobs reported.
    """
    last: dict[int, object] = {}
    for stage in stages:
        if stage.task_id not in last or stage.index > last[stage.task_id].index:
            last[stage.task_id] = stage
    rows = []
    for task_id, task in tasks.items():
        stage = last.get(task_id)
        finals = [] if stage is None else [jobs[j].config for j in stage.job_ids]
        rows.append(
            task_row(
                task,
                finish_s.get(task_id),
                finals,
                {c: trained(task_id, c) for c in finals},
                observations[task_id],
            )
        )
    return rows
