"""Brute-force optima on small instances: the reference BSSI and Beamer are measured against.

Used by the unit tests (the approximation guarantees) and by ``scripts/reproduce.py`` (the
report's "against brute force" rows). Ports run at 8 bit/s, so a byte takes one second and
sizes read as seconds of port time. Every strict-priority order of at most 7 coflows is tried
(5,040 orders), each served greedily by :mod:`controller.fluid`.
"""

from __future__ import annotations

import itertools
import random

from controller.fluid import greedy_completion_times, weighted_completion
from controller.model import ClusterState, Coflow, Flow, Job, Stage

BYTE_PER_S = 8.0
MAX_COFLOWS = 7


def state_of(coflows, jobs=(), stages=()) -> ClusterState:
    """A cluster state of ``coflows`` (and their jobs and stages) on 8 bit/s ports."""
    return ClusterState.build(coflows, jobs, stages, default_port_bps=BYTE_PER_S)


def random_coflows(rng: random.Random, n: int, n_hosts: int, weighted: bool) -> list[Coflow]:
    """``n`` coflows of 1-3 flows between ``n_hosts`` hosts (one port pair if ``n_hosts`` is 2)."""
    coflows = []
    for k in range(n):
        flows = []
        for _ in range(rng.randint(1, 3)):
            if n_hosts == 2:
                src, dst = 0, 1
            else:
                src, dst = rng.sample(range(n_hosts), 2)
            flows.append(Flow(src, dst, float(rng.randint(1, 20))))
        weight = float(rng.randint(1, 5)) if weighted else 1.0
        coflows.append(Coflow(k, flows, weight=weight))
    return coflows


def order_value(state: ClusterState, order) -> float:
    """Total weighted CCT of serving ``order`` in strict priority (zero release times)."""
    return weighted_completion(state, greedy_completion_times(state, list(order), releases=False))


def brute_force_best(state: ClusterState) -> tuple[float, list[float]]:
    """Best total weighted CCT over every strict-priority order, and all the values."""
    if len(state.coflows) > MAX_COFLOWS:
        raise ValueError(f"brute force tries at most {MAX_COFLOWS} coflows")
    values = [order_value(state, perm) for perm in itertools.permutations(sorted(state.coflows))]
    return min(values), values


def stage_instance(rng: random.Random, n_stages: int, max_jobs: int, n_hosts: int) -> ClusterState:
    """Stages of 1..max_jobs jobs, each job one in-flight coflow and its last iteration."""
    coflows, jobs, stages = [], [], []
    next_id = 0
    for s in range(n_stages):
        job_ids = []
        for _ in range(rng.randint(1, max_jobs)):
            src, dst = rng.sample(range(n_hosts), 2)
            size = float(rng.randint(1, 20))
            coflows.append(Coflow(next_id, [Flow(src, dst, size)], job_id=next_id))
            jobs.append(Job(next_id, iteration_budget=1, stage_id=s))
            job_ids.append(next_id)
            next_id += 1
        stages.append(Stage(s, job_ids))
    return state_of(coflows, jobs, stages)


def stage_completion_sum(state: ClusterState, order) -> float:
    """Sum of stage completion times when coflows are served in ``order`` (zero releases)."""
    done = greedy_completion_times(state, list(order), releases=False)
    return sum(max(done[j] for j in stage.job_ids) for stage in state.stages.values())


def best_stage_completion_sum(state: ClusterState) -> float:
    """The smallest :func:`stage_completion_sum` over every order of the coflows."""
    if len(state.coflows) > MAX_COFLOWS:
        raise ValueError(f"brute force tries at most {MAX_COFLOWS} coflows")
    return min(
        stage_completion_sum(state, perm) for perm in itertools.permutations(sorted(state.coflows))
    )
