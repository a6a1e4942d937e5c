"""Hermes' claim as a measurement: an HPO's configurations time-sharing GPUs, paired by
submission order.

Hermes (Son et al., Electronics 10(3):350, 2021) claims that convergence-aware preemptive GPU
time-sharing finds the best configuration up to 4.04x faster than FIFO, round-robin and SLAQ.
Two things decide how such a claim can be measured, and this module fixes both:

- **the submission order is a nuisance.** FIFO runs the configurations in the order they were
  submitted, so with one arbitrary order its time to find the best one is whatever position
  the best one was given (seed 1's 64 configurations: from 5 s to 645 s over 8 orders; the
  claim's one order per seed gave 5, 40, 5, 545, 480 s for seeds 1-5). :func:`gpu_hpo_point`
  runs every policy on the *same* ``n_orders`` random orders of a seed's configurations
  (derived from the seed alone: paired by order) and reports every order's metrics and their
  mean, so a policy comparison is made order by order and the order's variance is seen;
- **whether the HPO stops configurations.** If every configuration trains its full budget
  (``search="none"``), the HPO ends when the GPUs have done the same total work under any
  work-conserving policy: only *when* the best configuration is known can differ. With
  successive halving (``"halving"``) configurations that are not kept are terminated, and with
  its asynchronous variant ASHA (``"asha"``) which configurations are promoted depends on the
  order in which they finish their rung, so the policy changes the total work and the whole
  HPO's time can differ too.

Time-sharing follows :func:`workloads.gpu.run_time_sharing` (a :class:`~workloads.gpu.GpuManager`
on one server of ``n_gpus`` GPUs, quanta, a resume cost, one GPU per configuration): jobs only
compute, ``iteration_s`` per iteration, accuracy from the configuration's learning curve after
every iteration it has trained over all its rungs. Every configuration of a rung is a job of its
own (as :class:`workloads.hpo_core.HpoCore` runs them), submitted when its rung starts: a
promoted configuration continues where it stopped, as a new job the policy has not measured yet.
Pure Python, no framework, deterministic for (seed, order).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from workloads.curves import Curve, sample_curves
from workloads.gpu import GpuJob, GpuManager, make_gpu_policy, reschedule
from workloads.hpo import HpoTask, asha_promotions, best_identified_s, stage_plan, survivors

GPU_HPO_SEARCHES = ("none", "halving", "asha")
METRICS = ("best_identified_s", "target_reached_s", "hpo_completion_s")
_EPS = 1e-9


def rung_plan(
    n_configs: int, search: str, max_iterations: int, eta: int = 3
) -> list[tuple[int, int]]:
    """``(configurations, iterations to add)`` per rung of ``search``.

    ``none``: one rung, every configuration trains ``max_iterations``. ``halving`` and
    ``asha``: successive halving's rungs (:func:`workloads.hpo.stage_plan`: rung ``s`` keeps
    ``ceil(n_configs / eta**s)``), with budgets ``max_iterations / eta**(last - s)`` rounded
    (at least one iteration more than the rung below), so that the configuration the search
    ends with has trained as long as every configuration does without a search.
    """
    if search not in GPU_HPO_SEARCHES:
        raise ValueError(f"search must be one of {', '.join(GPU_HPO_SEARCHES)}, got {search!r}")
    if n_configs < 1 or max_iterations < 1:
        raise ValueError("need n_configs >= 1 and max_iterations >= 1")
    if search == "none":
        return [(n_configs, max_iterations)]
    keeps = [keep for keep, _ in stage_plan(n_configs, eta, 1)]
    last = len(keeps) - 1
    plan, total = [], 0
    for s, keep in enumerate(keeps):
        budget = max(total + 1, round(max_iterations / eta ** (last - s)))
        plan.append((keep, budget - total))
        total = budget
    return plan


def target_accuracy(curves: Sequence[Curve], fraction: float = 0.9) -> float:
    """The target of ``target_reached_s``: ``fraction`` of the highest converged accuracy
    (``final_accuracy``) among the seed's configurations, whether or not the search keeps
    that configuration (so a search that drops it early may never reach the target)."""
    if not 0 < fraction < 1:
        raise ValueError("fraction must be in (0, 1)")
    return fraction * max(c.final_accuracy for c in curves)


def submission_orders(seed: int, n_configs: int, n_orders: int) -> list[list[int]]:
    """``n_orders`` random permutations of the configurations, from ``seed`` (and their
    number) alone, in a stream of its own (so that the curves sampled from
    ``random.Random(seed)`` stay those of ``experiments.reproduce``'s claim): every policy,
    search and good fraction gets the same orders."""
    rng = random.Random(f"gpu-hpo-orders:{seed}")  # str seeds hash with SHA-512: stable
    return [rng.sample(range(n_configs), n_configs) for _ in range(n_orders)]


@dataclass
class GpuHpoRun:
    """One HPO run (one submission order under one policy).

    Args:
        best_config: the configuration the HPO ends with: the most accurate of those that
            trained the full budget (ties: lower index).
        best_identified_s: from when on ``best_config`` leads, i.e. its last observed accuracy
            is at least every other configuration's last observed one
            (:func:`workloads.hpo.best_identified_s`, observations at every event as in
            :func:`workloads.gpu.run_time_sharing`); ``None`` if it does not lead at the end.
        target_reached_s: when a configuration first reached ``target`` (exact, within a
            slice); ``None`` if none did.
        hpo_completion_s: when the last job of the HPO ended.
        gpu_s: GPU-seconds of training (resume costs excluded): the HPO's total work.
        trained: iterations each configuration trained in all.
    """

    best_config: int
    best_identified_s: float | None
    target_reached_s: float | None
    hpo_completion_s: float
    gpu_s: float
    preemptions: int
    preemption_cost_gpu_s: float
    trained: list[float] = field(default_factory=list)

    def metrics(self) -> dict:
        """The run's numbers (not ``trained``)."""
        return {
            "best_identified_s": self.best_identified_s,
            "target_reached_s": self.target_reached_s,
            "hpo_completion_s": self.hpo_completion_s,
            "best_config": self.best_config,
            "gpu_s": self.gpu_s,
            "preemptions": self.preemptions,
            "preemption_cost_gpu_s": self.preemption_cost_gpu_s,
        }


def run_gpu_hpo(
    curves: Sequence[Curve],
    order: Sequence[int],
    policy: str,
    search: str,
    n_gpus: int = 8,
    quantum_s: float = 5.0,
    resume_cost_s: float = 0.5,
    iteration_s: float = 0.5,
    max_iterations: int = 200,
    eta: int = 3,
    target: float | None = None,
    max_events: int = 10_000_000,
) -> GpuHpoRun:
    """Run the HPO over ``curves`` with the configurations submitted in ``order`` under the
    GPU ``policy``; see :class:`GpuHpoRun` for what is measured.

    Every configuration is submitted at time 0, in ``order`` (job ids follow it, and every
    policy breaks ties by arrival then id, so FIFO runs them in that order). No gap between
    submissions: a gap would leave GPUs idle at the start and shift every metric by amounts
    that are the workload's, not the policy's, and with none the ``none`` search in the
    identity order is exactly :func:`workloads.gpu.run_time_sharing`'s measurement.

    The search: ``none`` trains everyone ``max_iterations``; ``halving`` waits for a rung's
    last job, then submits the survivors (:func:`workloads.hpo.survivors`: the best by accuracy
    at the rung's budget, best first) for the next rung; ``asha`` submits a configuration for
    the next rung as soon as :func:`workloads.hpo.asha_promotions` promotes it, each time one
    completes a rung (completions at one instant in job-id order). A configuration not kept is
    terminated: its job has ended and it gets no other. The HPO ends when no job is left.

    Args:
        target: accuracy whose first reaching is ``target_reached_s`` (default
            :func:`target_accuracy` of ``curves``).
    """
    n = len(curves)
    if sorted(order) != list(range(n)):
        raise ValueError("order must be a permutation of the configurations")
    target = target_accuracy(curves) if target is None else target
    manager = GpuManager(make_gpu_policy(policy), 1, n_gpus, quantum_s, resume_cost_s)
    hpo = _GpuHpo(curves, rung_plan(n, search, max_iterations, eta), search, eta, target,
                  manager, iteration_s)  # fmt: skip
    hpo.submit(list(order), 0, 0.0)
    boundary = 0.0
    for _ in range(max_events):
        active = manager.active()
        if not active:
            break
        running = [j for j in active if j.running]
        finishes = [max(hpo.now, hpo.ready_at[j.job_id]) + (j.iterations - j.done) * j.iteration_s
                    for j in running]  # fmt: skip
        hpo.train(running, max(hpo.now, min([boundary, *finishes])))
        changed = hpo.report(running)
        boundary = reschedule(manager, hpo.now, boundary, changed, hpo.ready_at)
    else:
        raise RuntimeError("the HPO did not finish within max_events")
    return hpo.result()


class _GpuHpo:
    """The state of one :func:`run_gpu_hpo`: which configuration and rung each job trains, what
    each configuration has trained, the rungs' bookkeeping and the clock.

    Attributes:
        meta: job id -> (configuration, rung).
        trained: iterations each configuration had before its current job.
        waiting: halving: the jobs of each rung still training.
        completed: asha: each rung's ended configurations and their accuracy at its end.
        promoted: asha: each rung's configurations promoted so far.
        ready_at: a running job -> when it computes (after its resume cost).
        observations: (time, configuration, accuracy) of every report.
        reached_s: when some configuration first reached the target (``None``: not yet).
        needed: iterations each configuration needs to reach the target (inf: never).
    """

    def __init__(
        self, curves: Sequence[Curve], plan: list[tuple[int, int]], search: str, eta: int,
        target: float, manager: GpuManager, iteration_s: float,
    ) -> None:  # fmt: skip
        n = len(curves)
        self.curves, self.plan, self.search = curves, plan, search
        self.manager, self.iteration_s = manager, iteration_s
        self.budgets = [sum(add for _, add in plan[: s + 1]) for s in range(len(plan))]
        # survivors() and asha_promotions() read only the curves and the plan: no model, no
        # hosts (nothing here goes over a network)
        self.task = HpoTask(0, 0.0, None, "ps", list(curves), [], plan, eta, search == "asha")
        self.needed = [c.iterations_to(target / c.final_accuracy) if c.final_accuracy > target
                       else math.inf for c in curves]  # fmt: skip
        self.meta: dict[int, tuple[int, int]] = {}
        self.trained = [0.0] * n
        self.waiting = [0] * len(plan)
        self.completed: list[dict[int, float]] = [{} for _ in plan]
        self.promoted: list[list[int]] = [[] for _ in plan]
        self.ready_at: dict[int, float] = {}
        self.observations: list[tuple[float, int, float]] = []
        self.reached_s: float | None = None
        self.now = 0.0

    def submit(self, configs: list[int], rung: int, now: float) -> None:
        """Submit a job of rung ``rung`` for each of ``configs``, in that order."""
        for config in configs:
            job = GpuJob(len(self.meta), 1, now, self.plan[rung][1], self.iteration_s)
            self.meta[job.job_id] = (config, rung)
            self.waiting[rung] += 1
            accuracy = self.curves[config].accuracy(self.trained[config])
            self.manager.submit(job, now, accuracy=accuracy)

    def rung_done(self, config: int, rung: int) -> list[int]:
        """The configurations that start rung ``rung + 1`` now that ``config`` ended ``rung``."""
        self.waiting[rung] -= 1
        if self.search == "asha":
            self.completed[rung][config] = self.curves[config].accuracy(self.budgets[rung])
            going = asha_promotions(self.task, rung, self.completed[rung], self.promoted[rung])
            self.promoted[rung] += going
            return going
        if self.waiting[rung]:
            return []
        budget = self.budgets[rung]
        return survivors(self.task, rung, {c: budget for c in range(len(self.curves))
                                           if self.trained[c] == budget})  # fmt: skip

    def train(self, running: list[GpuJob], until: float) -> None:
        """Advance the running jobs' iterations to ``until`` (each from when it computes) and
        note when the target is first reached."""
        for job in running:
            start = max(self.now, self.ready_at[job.job_id])
            if until <= start:
                continue
            config = self.meta[job.job_id][0]
            before = self.trained[config] + job.done
            job.done = min(float(job.iterations), job.done + (until - start) / job.iteration_s)
            if self.reached_s is None or start < self.reached_s:
                needed = self.needed[config]
                if before < needed <= self.trained[config] + job.done + _EPS:
                    crossing = start + (needed - before) * job.iteration_s
                    self.reached_s = crossing if self.reached_s is None else min(
                        self.reached_s, crossing)  # fmt: skip
        self.now = until

    def report(self, running: list[GpuJob]) -> bool:
        """Report every running job's progress to the manager, end the jobs whose rung is done
        and submit the next rung's; whether a job ended."""
        ended = []
        for job in running:
            config, rung = self.meta[job.job_id]
            accuracy = self.curves[config].accuracy(self.trained[config] + job.done)
            self.manager.report(job.job_id, job.done, accuracy)
            self.observations.append((self.now, config, accuracy))
            if job.done >= job.iterations - _EPS:
                job.done = float(job.iterations)
                self.trained[config] = float(self.budgets[rung])
                self.manager.finish(job.job_id, self.now)
                ended.append((config, rung))
        for config, rung in ended:
            going = self.rung_done(config, rung)
            if going:
                self.submit(going, rung + 1, self.now)
        return bool(ended)

    def result(self) -> GpuHpoRun:
        """What the finished HPO measured."""
        top = self.budgets[-1]
        best = max((c for c in range(len(self.curves)) if self.trained[c] == top),
                   key=lambda c: (self.curves[c].accuracy(top), -c))  # fmt: skip
        stats = self.manager.stats(self.now)
        return GpuHpoRun(
            best_config=best,
            best_identified_s=best_identified_s(self.observations, best),
            target_reached_s=self.reached_s,
            hpo_completion_s=self.now,
            gpu_s=self.manager.busy_gpu_s,
            preemptions=stats["preemptions"],
            preemption_cost_gpu_s=stats["preemption_cost_gpu_s"],
            trained=self.trained,
        )


def _mean(values: list[float | None]) -> float | None:
    """Mean over the orders, or ``None`` if any order has none (a mean over some orders
    would not be paired with another policy's over other orders)."""
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)


def gpu_hpo_point(
    seed: int,
    policy: str,
    good_fraction: float,
    configs_per_gpu: float,
    search: str,
    n_orders: int = 8,
    n_gpus: int = 8,
    quantum_s: float = 5.0,
    resume_cost_s: float = 0.5,
    iteration_s: float = 0.5,
    max_iterations: int = 200,
    base_tau: float = 40.0,
    eta: int = 3,
    target_fraction: float = 0.9,
) -> dict:
    """One cell of Hermes' claim for one policy and seed, over ``n_orders`` submission orders.

    The seed's ``n_configs = round(configs_per_gpu * n_gpus)`` learning curves are sampled
    once, as ``experiments.reproduce`` samples the claim's (``sample_curves(random.Random(seed),
    n_configs, good_fraction, base_tau)``); the HPO then runs (:func:`run_gpu_hpo`) in each of
    :func:`submission_orders` (the seed's, the same for every policy). Metrics, in seconds from
    the submission of every configuration at time 0:

    - ``best_identified_s``: when the configuration the HPO ends with (the most accurate of
      those that trained the full ``max_iterations``) is identified, i.e. from then on its
      last observed accuracy is at least every other configuration's;
    - ``target_reached_s``: when some configuration first reaches the target accuracy,
      ``target_fraction`` (0.9) of the highest converged accuracy (``final_accuracy``, the
      curve's limit) among the seed's ``n_configs`` configurations
      (:func:`target_accuracy`); ``None`` if no configuration reaches it (a search may drop
      the one that would have);
    - ``hpo_completion_s``: when the HPO's last job ends.

    Returns:
        The point's parameters, ``target_accuracy``, ``orders`` (the permutations, to check the
        pairing), ``per_order`` (each order's metrics, ``gpu_s`` of training and preemptions
        too), and the mean of each metric and of ``gpu_s`` over the orders (``None`` if an
        order has none; ``<metric>_n``: the orders that have one).
    """
    n_configs = round(configs_per_gpu * n_gpus)
    if n_configs < 1 or n_orders < 1:
        raise ValueError("need at least one configuration and one order")
    curves = sample_curves(random.Random(seed), n_configs, good_fraction, base_tau)
    target = target_accuracy(curves, target_fraction)
    orders = submission_orders(seed, n_configs, n_orders)
    runs = [
        run_gpu_hpo(curves, order, policy, search, n_gpus, quantum_s, resume_cost_s,
                    iteration_s, max_iterations, eta, target).metrics()
        for order in orders
    ]  # fmt: skip
    result = {
        "seed": seed,
        "policy": policy,
        "search": search,
        "good_fraction": good_fraction,
        "configs_per_gpu": configs_per_gpu,
        "n_configs": n_configs,
        "n_gpus": n_gpus,
        "n_orders": n_orders,
        "target_accuracy": target,
        "orders": orders,
        "per_order": runs,
    }
    for metric in (*METRICS, "gpu_s"):
        values = [run[metric] for run in runs]
        result[metric] = _mean(values)
        result[f"{metric}_n"] = sum(v is not None for v in values)
    return result
