"""Reference implementations: exact, simple and slow, for checking the fast paths and for the
report's brute-force rows. Nothing in the controller or the simulator's engine uses them.

- **Fluid schedule** (:func:`greedy_completion_times`): coflows served in strict priority
  order on a big switch. Given a total order of coflows, every flow gets, in order, the minimum
  of the capacity left at its source's egress port and its destination's ingress port
  (optionally capped by a rate from the policy). This is the greedy, order-preserving and
  work-conserving allocation under which Sincronia's 4x guarantee holds, and the "ideal" mode
  of the simulator. Every event re-allocates every active flow.
- **Brute-force optima** on small instances, which BSSI and Beamer are measured against (the
  unit tests' approximation guarantees, ``hpo-reproduce``'s "against brute force"
  rows). Ports run at 8 bit/s, so a byte takes one second and sizes read as seconds of port
  time. Every strict-priority order of at most 7 coflows is tried (5,040 orders), each served
  by the fluid schedule.
- **Plain-array allocations** (:func:`priority_max_min`, :func:`max_min`,
  :func:`greedy_in_order`, :func:`pair_max_min`): the simulator's compiled allocation kernels
  (:mod:`simulator.allocation`) called on plain arrays, level by level.
- **The policies on mappings** (:func:`varys_schedule`, :func:`madd_plain`,
  :func:`jpas_ranks`, :func:`beamer_schedule`): Varys, MADD, JPAS and Beamer as their
  definitions read, a Python step per coflow, job and port, on each coflow's
  :meth:`~controller.model.Coflow.port_bytes`. The policies (:mod:`controller.policies`)
  compute on arrays, compiled, and must give the same schedules bit for bit: the same sums
  added in the same order, the same ties.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from controller.bssi import bssi_order
from controller.kernel_cache import njit
from controller.madd import TIE_DIGITS
from controller.model import (
    ClusterState,
    Coflow,
    CoflowId,
    Flow,
    FlowKey,
    Job,
    Port,
    Stage,
    bottleneck_s,
    egress,
    ingress,
    port_seconds,
)
from controller.policies import _JOB_PROGRESS, _PROGRESS_DIGITS, _UNMEASURED, _significant
from controller.schedule import Schedule
from simulator.allocation import (
    SPARSE_ROW,
    PairLevel,
    Singles,
    _fill,
    greedy_groups,
    pair_bits,
    pair_shares,
)

# ---- fluid schedule ------------------------------------------------------------------------

_REL_EPS = 1e-9


def greedy_completion_times(
    state: ClusterState,
    order: Sequence[CoflowId],
    releases: bool = True,
    flow_rates_bps: Mapping[FlowKey, float] | None = None,
) -> dict[CoflowId, float]:
    """Completion time of each coflow of ``order`` served in strict priority.

    Args:
        state: the coflows (``remaining_bytes`` of their flows is the work) and port capacities.
        order: coflow ids, most urgent first; every coflow to schedule appears once.
        releases: honour ``arrival_s`` (else every coflow is released at ``state.now_s``).
        flow_rates_bps: optional rate cap per ``(coflow_id, flow_id)``.

    Returns:
        Absolute completion time per coflow id (a coflow with nothing to send completes on
        release).
    """
    if len(set(order)) != len(order):
        raise ValueError("order lists a coflow twice")
    caps = flow_rates_bps or {}
    flows = []  # [priority, release_s, src_port, dst_port, remaining_bits, cap, coflow_id]
    done_at: dict[CoflowId, float] = {}
    for position, coflow_id in enumerate(order):
        coflow = state.coflows[coflow_id]
        release = max(coflow.arrival_s, state.now_s) if releases else state.now_s
        done_at[coflow_id] = release
        for flow in coflow.flows:
            if flow.remaining_bytes > 0:
                cap = caps.get((coflow_id, flow.flow_id), math.inf)
                flows.append(
                    [
                        position,
                        release,
                        egress(flow.src),
                        ingress(flow.dst),
                        8.0 * flow.remaining_bytes,
                        cap,
                        coflow_id,
                    ]
                )
    flows.sort(key=lambda f: (f[0], f[1]))
    now = state.now_s
    pending = sorted(flows, key=lambda f: f[1])
    active: list[list] = []
    while pending or active:
        while pending and pending[0][1] <= now:
            active.append(pending.pop(0))
        if not active:
            now = pending[0][1]
            continue
        active.sort(key=lambda f: f[0])
        residual: dict[Port, float] = {}
        rates = []
        for flow in active:
            src_left = residual.get(flow[2], state.port_bps(flow[2]))
            dst_left = residual.get(flow[3], state.port_bps(flow[3]))
            rate = max(0.0, min(src_left, dst_left, flow[5]))
            residual[flow[2]] = src_left - rate
            residual[flow[3]] = dst_left - rate
            rates.append(rate)
        step = min(
            (f[4] / r for f, r in zip(active, rates, strict=True) if r > 0), default=math.inf
        )
        if pending:
            step = min(step, pending[0][1] - now)
        if not math.isfinite(step):
            raise ValueError("flows can never finish: a port or rate cap is zero")
        now += step
        still = []
        for flow, rate in zip(active, rates, strict=True):
            flow[4] -= rate * step
            if flow[4] <= _REL_EPS * max(1.0, rate * step):
                done_at[flow[6]] = max(done_at[flow[6]], now)
            else:
                still.append(flow)
        active = still
    return done_at


def weighted_completion(
    state: ClusterState, completion_s: Mapping[CoflowId, float], releases: bool = False
) -> float:
    """Sum of ``weight x completion time`` (measured from arrival when ``releases``)."""
    total = 0.0
    for coflow_id, done in completion_s.items():
        coflow = state.coflows[coflow_id]
        start = coflow.arrival_s if releases else state.now_s
        total += coflow.weight * (done - start)
    return total


# ---- brute-force optima --------------------------------------------------------------------

BYTE_PER_S = 8.0
MAX_COFLOWS = 7


def state_of(coflows, jobs=(), stages=()) -> ClusterState:
    """A cluster state of ``coflows`` (and their jobs and stages) on 8 bit/s ports."""
    return ClusterState.build(coflows, jobs, stages, link_bps=BYTE_PER_S)


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


def contended_coflows(rng: random.Random, n: int, n_hosts: int = 4) -> list[Coflow]:
    """``n`` coflows where the order matters: every one sends from host 0 (one shared egress
    port) and a third also from a second host, sizes log-uniform over three orders of magnitude
    (1-1000 bytes), so serving a large one first delays every small one behind it. A uniformly
    random order averages at least 1.5x the best order's total CCT on these
    (``tests/unit/test_bounds.py`` checks it), so an ordering no better than chance fails a
    check against them."""
    coflows = []
    for k in range(n):
        flows = [Flow(0, rng.randrange(1, n_hosts), round(10 ** rng.uniform(0, 3), 3))]
        if rng.random() < 1 / 3:
            src = rng.randrange(1, n_hosts)
            dst = rng.choice([h for h in range(n_hosts) if h != src])
            flows.append(Flow(src, dst, round(10 ** rng.uniform(0, 3), 3)))
        coflows.append(Coflow(k, flows))
    return coflows


def contended_stage_instance(rng: random.Random, n_stages: int, max_jobs: int) -> ClusterState:
    """Stages whose order matters: every job sends from host 0 (a shared port), stage sizes
    spread over three orders of magnitude (a stage's jobs alike within it), each job one
    in-flight coflow and its last iteration, as :func:`stage_instance`."""
    coflows, jobs, stages = [], [], []
    next_id = 0
    for s in range(n_stages):
        scale = 10 ** rng.uniform(0, 3)
        job_ids = []
        for _ in range(rng.randint(1, max_jobs)):
            size = round(scale * rng.uniform(0.5, 1.5), 3)
            coflows.append(Coflow(next_id, [Flow(0, rng.randrange(1, 4), size)], job_id=next_id))
            jobs.append(Job(next_id, iteration_budget=1, stage_id=s))
            job_ids.append(next_id)
            next_id += 1
        stages.append(Stage(s, job_ids))
    return state_of(coflows, jobs, stages)


def every_order_stage_completion_sums(state: ClusterState) -> list[float]:
    """:func:`stage_completion_sum` of every order of the coflows (their mean is a uniformly
    random order's expected value, their max the worst order's)."""
    if len(state.coflows) > MAX_COFLOWS:
        raise ValueError(f"brute force tries at most {MAX_COFLOWS} coflows")
    return [
        stage_completion_sum(state, perm) for perm in itertools.permutations(sorted(state.coflows))
    ]


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


# ---- BSSI as written -----------------------------------------------------------------------


def bssi_order_plain(
    demands: Sequence[Mapping], weights: Sequence[float] | None = None
) -> list[int]:
    """BSSI (:mod:`controller.bssi`) step by step in plain Python, for checking the compiled
    kernel: the same rules (the most loaded port, the first of equals in order of first use;
    the smallest ``w / v`` within a relative 1e-9, the latest item of equals; weights scaled
    and clipped at 0; port loads kept by subtraction) and so the same floating-point results."""
    w = [1.0] * len(demands) if weights is None else [float(x) for x in weights]
    load: dict = {}  # insertion order = order of first use
    for demand in demands:
        for port, value in demand.items():
            if value > 0:
                load[port] = load.get(port, 0.0) + value
    alive = [True] * len(demands)
    placed_last: list[int] = []
    while load:
        bottleneck = max(load, key=load.get)  # the first of equals
        if load[bottleneck] <= 1e-12:
            break
        on_port = [k for k in range(len(demands)) if alive[k] and demands[k].get(bottleneck, 0) > 0]
        if not on_port:
            load[bottleneck] = 0.0
            continue
        ratio = {k: w[k] / demands[k][bottleneck] for k in on_port}
        best = min(ratio.values())
        sigma = max(k for k in on_port if ratio[k] <= best + abs(best) * 1e-9)
        w_sigma, v_sigma = w[sigma], demands[sigma][bottleneck]
        for k in on_port:
            w[k] = max(w[k] - w_sigma * demands[k][bottleneck] / v_sigma, 0.0)
        alive[sigma] = False
        placed_last.append(sigma)
        for port, value in demands[sigma].items():
            if value > 0:
                load[port] -= value
    return [k for k in range(len(demands)) if alive[k]] + placed_last[::-1]


# ---- the policies on mappings --------------------------------------------------------------


def tie_noise(gamma_s) -> np.ndarray:
    """Times to sort by, rounded to :data:`controller.madd.TIE_DIGITS` decimals (times within a
    nanosecond tie)."""
    return np.round(np.asarray(gamma_s, dtype=np.float64), TIE_DIGITS)


def madd_plain(
    state: ClusterState,
    order: Sequence[Coflow],
    loads: Mapping[CoflowId, Mapping[Port, float]] | None = None,
) -> tuple[dict[FlowKey, float], dict]:
    """:func:`controller.policies.madd` on one mapping per coflow (``loads``, else each
    coflow's :meth:`~controller.model.Coflow.port_bytes`): each coflow in turn gets, on the
    capacity its predecessors left, the rates that finish its flows together at its bottleneck
    time Gamma; none where a port of it has nothing left (at most 1e-9 of its capacity)."""
    residual_bps: dict[Port, float] = {}
    port_bps: dict[Port, float] = {}
    rates: dict[FlowKey, float] = {}
    gammas: dict = {}
    for coflow in order:
        load = loads[coflow.coflow_id] if loads is not None else coflow.port_bytes()
        if not load:
            continue
        gamma_s = 0.0
        for port, size in load.items():
            if port not in port_bps:
                port_bps[port] = residual_bps[port] = state.port_bps(port)
            capacity = residual_bps[port]
            if capacity <= 1e-9 * port_bps[port]:
                gamma_s = math.inf
                break
            gamma_s = max(gamma_s, 8.0 * size / capacity)
        if not math.isfinite(gamma_s) or gamma_s <= 0:
            continue
        gammas[coflow.coflow_id] = gamma_s
        for flow in coflow.flows:
            if flow.remaining_bytes > 0:
                rates[(coflow.coflow_id, flow.flow_id)] = 8.0 * flow.remaining_bytes / gamma_s
        for port, size in load.items():
            residual_bps[port] = max(0.0, residual_bps[port] - 8.0 * size / gamma_s)
    return rates, gammas


def varys_schedule(state: ClusterState, use_rates: bool = True) -> Schedule:
    """:class:`controller.policies.Varys`' schedule: the active coflows by bottleneck time
    (:func:`tie_noise`), ties by arrival, with MADD rates (:func:`madd_plain`) along that
    order if ``use_rates``."""
    active = state.active_coflows()
    loads = {c.coflow_id: c.port_bytes() for c in active}
    gamma = tie_noise([bottleneck_s(state, loads[c.coflow_id]) for c in active])
    order = [active[i] for i in np.argsort(gamma, kind="stable")]
    rates, gammas = madd_plain(state, order, loads) if use_rates else ({}, {})
    return Schedule.from_order((c.coflow_id for c in order), rates, gammas)


def jpas_ranks(
    state: ClusterState, progress: str = "iterations"
) -> tuple[tuple[CoflowId, ...], ...]:
    """:class:`controller.policies.Jpas`' ranks in the ``progress`` reading: one entry per job
    (a registered one's key in the reading and its arrival; the unmeasured key and its first
    coflow's arrival for one that is not registered) and one per coflow without a job (the
    fraction of its bytes sent, to 9 decimals; the bytes it sent, to 9 significant digits; or
    the unmeasured key), sorted by (key, arrival, jobs before coflows, id); a job's coflows
    share its rank, in arrival order."""
    by_job: dict[int, list[int]] = {}  # job id -> its coflow ids, in arrival order
    first_arrival: dict[int, float] = {}
    jobless: list[Coflow] = []
    for coflow in state.active_coflows():
        job_id = coflow.job_id
        if job_id is None:
            jobless.append(coflow)
        elif job_id in by_job:
            by_job[job_id].append(coflow.coflow_id)
        else:
            by_job[job_id] = [coflow.coflow_id]
            first_arrival[job_id] = coflow.arrival_s
    # (key, arrival, kind, id, coflow ids): the first four are unique (kind 0 a job id, kind 1
    # a coflow id), so a plain tuple sort orders by them alone
    entries = []
    job_key, unmeasured = _JOB_PROGRESS[progress], _UNMEASURED[progress]
    for job_id, ids in by_job.items():
        job = state.jobs.get(job_id)
        if job is not None:
            entries.append((job_key(job), job.arrival_s, 0, job_id, ids))
        else:
            entries.append((unmeasured, first_arrival[job_id], 0, job_id, ids))
    for coflow in jobless:
        size, left = coflow.size_bytes, coflow.remaining_bytes
        if progress == "iterations":
            sent = round((size - left) / size if size else 1.0, _PROGRESS_DIGITS)
        elif progress == "service":
            sent = _significant(size - left)
        else:
            sent = unmeasured
        entries.append((sent, coflow.arrival_s, 1, coflow.coflow_id, [coflow.coflow_id]))
    entries.sort()
    return tuple(tuple(e[4]) for e in entries)


def _unit(coflow: Coflow) -> tuple:
    """A coflow's unit of work: ``(0, job_id)``, or ``(1, coflow_id)`` without a job."""
    return (0, coflow.job_id) if coflow.job_id is not None else (1, coflow.coflow_id)


def _sum_loads(loads) -> dict[Port, float]:
    """The mappings ``loads`` added port by port, each port where it is first listed."""
    total: dict[Port, float] = {}
    for load in loads:
        for port, size in load.items():
            total[port] = total.get(port, 0.0) + size
    return total


def job_remaining_bytes(job: Job, active_coflows: Sequence[Coflow]) -> dict[Port, float]:
    """Bytes a job still has to move in its stage, per port: the bytes left of its in-flight
    coflows, then ``bytes_per_iteration`` for every iteration of its budget whose
    synchronisation has not started yet."""
    load = _sum_loads(coflow.port_bytes() for coflow in active_coflows)
    future = max(0, job.iteration_budget - job.iterations_done - len(active_coflows))
    if future:
        for port, size in job.bytes_per_iteration.items():
            load[port] = load.get(port, 0.0) + future * size
    return load


def stage_loads_plain(
    state: ClusterState, in_flight: Mapping[tuple, list[Coflow]], stage_units: list[list[tuple]]
) -> tuple[list[dict[Port, float]], Callable[[tuple], float]]:
    """Beamer's stage demands, in seconds of port time (one mapping per stage), and a unit's
    bottleneck time, summed from the coflows' port mappings and the jobs' bytes per iteration.

    Args:
        state: the cluster state.
        in_flight: each unit's active coflows, in arrival order.
        stage_units: each stage's units, in the order its sum adds them.
    """
    unit_load: dict[tuple, dict[Port, float]] = {}

    def load_of(unit: tuple) -> dict[Port, float]:
        if unit not in unit_load:
            coflows = in_flight.get(unit, [])
            job = state.jobs.get(unit[1]) if unit[0] == 0 else None
            if job is not None:
                unit_load[unit] = job_remaining_bytes(job, coflows)
            else:
                unit_load[unit] = _sum_loads(c.port_bytes() for c in coflows)
        return unit_load[unit]

    demands = []
    for units in stage_units:
        load: dict[Port, float] = {}
        for unit in units:
            for port, size in load_of(unit).items():
                load[port] = load.get(port, 0.0) + size
        demands.append(port_seconds(state, load))
    return demands, lambda unit: bottleneck_s(state, load_of(unit))


def srpt_order(demands: Sequence[Mapping[Port, float]], weights: Sequence[float]) -> list[int]:
    """Beamer's ``stage_order="srpt"``: the stages (``demands``, in arrival order) by their
    largest demand, least first, ties (:func:`tie_noise`) in the given order; the weights
    must be > 0, as BSSI's."""
    if len(weights) and not min(weights) > 0:
        raise ValueError("weights must be > 0")
    worst = [max(demand.values(), default=0.0) for demand in demands]
    return np.argsort(tie_noise(worst), kind="stable").tolist()


def beamer_ranks(
    state: ClusterState, slowest_first: bool = True, srpt: bool = False
) -> list[list[CoflowId]]:
    """:class:`controller.policies.Beamer`'s ranks (``slowest_first`` and ``srpt`` its
    ``within_stage`` and ``stage_order`` readings) as its definition reads: units of work
    (jobs, or jobless coflows) grouped into stages (a coflow's own or its job's, else a stage
    of its own), in (arrival, key) order; each stage's demand its units' loads
    (:func:`stage_loads_plain`, its listed jobs that compute included), the stages by BSSI
    (or by their largest demand) and a stage's coflows by their unit's bottleneck, most
    first, ties by arrival."""
    in_flight: dict[tuple, list[Coflow]] = defaultdict(list)  # work unit -> its coflows
    stages: dict[tuple, list[Coflow]] = defaultdict(list)  # stage key -> its coflows
    unit_of: dict[int, tuple] = {}
    for coflow in state.active_coflows():
        unit = unit_of[coflow.coflow_id] = _unit(coflow)
        in_flight[unit].append(coflow)
        stage_id = state.stage_of(coflow)
        stages[(0, stage_id) if stage_id is not None else (1, coflow.coflow_id)].append(coflow)

    def arrival(key: tuple) -> float:
        stage = state.stages.get(key[1]) if key[0] == 0 else None
        return stage.arrival_s if stage is not None else min(c.arrival_s for c in stages[key])

    keys = sorted(stages, key=lambda k: (arrival(k), k))
    stage_units, weights = [], []
    for key in keys:
        units = {unit_of[c.coflow_id] for c in stages[key]}
        stage = state.stages.get(key[1]) if key[0] == 0 else None
        if stage is not None:  # jobs of the stage that are computing count too
            units.update((0, job_id) for job_id in stage.job_ids)
        stage_units.append(sorted(units))
        weights.append(stage.weight if stage else max(c.weight for c in stages[key]))
    demands, unit_bottleneck_s = stage_loads_plain(state, in_flight, stage_units)
    order = srpt_order(demands, weights) if srpt else bssi_order(demands, weights)
    ranks = []
    for index in order:
        members = stages[keys[index]]  # (in arrival order)
        if slowest_first and len(members) > 1:
            work = {u: unit_bottleneck_s(u) for u in {unit_of[c.coflow_id] for c in members}}
            members = sorted(members, key=lambda c: -work[unit_of[c.coflow_id]])  # (stable)
        ranks.append([c.coflow_id for c in members])
    return ranks


def beamer_schedule(
    state: ClusterState,
    use_rates: bool = False,
    within_stage: str = "slowest-first",
    stage_order: str = "bssi",
) -> Schedule:
    """:class:`controller.policies.Beamer`'s schedule with the same options: its ranks
    (:func:`beamer_ranks`) and, with ``use_rates``, MADD rates along them (:func:`madd_plain`)."""
    ranks = beamer_ranks(state, within_stage == "slowest-first", stage_order == "srpt")
    if not use_rates:
        return Schedule.from_groups(ranks)
    order = [state.coflows[c] for c in itertools.chain.from_iterable(ranks)]
    rates, gammas = madd_plain(state, order)
    return Schedule.from_groups(ranks, rates, gammas)


# ---- plain-array allocations ---------------------------------------------------------------


@njit(cache=True)
def _priority_max_min(links, levels, caps, weights, capacity):  # pragma: no cover - compiled
    """Rates under strict priority between levels and max-min within a level: the compiled
    part of :func:`priority_max_min`, on contiguous arrays.

    Args:
        links: ``(n, k)`` int64: the links each entry's flows cross.
        levels: int64 per entry: its priority level (0 is served first).
        caps: float per entry: its flows' rate cap in bit/s, inf without one.
        weights: float per entry: the identical flows it stands for.
        capacity: per link, its capacity in bit/s.

    Returns:
        The rate in bit/s of each entry's flows.
    """
    n = links.shape[0]
    rates = np.zeros(n)
    residual = capacity.copy()
    if n == 0:
        return rates
    # counting sort by level (levels are small integers)
    top = levels.max()
    count = np.zeros(top + 2, dtype=np.int64)
    for f in range(n):
        count[levels[f] + 1] += 1
    for level in range(top + 1):
        count[level + 1] += count[level]
    order = np.empty(n, dtype=np.int64)
    fill = count[:-1].copy()
    for f in range(n):
        order[fill[levels[f]]] = f
        fill[levels[f]] += 1
    for level in range(top + 1):
        if count[level + 1] > count[level]:
            _fill(
                order[count[level] : count[level + 1]],
                links,
                caps,
                weights,
                residual,
                capacity,
                rates,
            )
    return rates


def _caps(n: int, caps: np.ndarray | None) -> np.ndarray:
    return np.full(n, np.inf) if caps is None else np.ascontiguousarray(caps, dtype=np.float64)


def _weights(n: int, weights: np.ndarray | None) -> np.ndarray:
    return np.ones(n) if weights is None else np.ascontiguousarray(weights, dtype=np.float64)


def priority_max_min(
    links: np.ndarray,
    levels: np.ndarray,
    capacity: np.ndarray,
    caps: np.ndarray | None = None,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """Rates (bit/s) under strict priority between ``levels`` and max-min within a level.

    Args:
        links: ``(n, k)`` link indices of each entry.
        levels: priority level of each entry (0 is served first).
        capacity: capacity of every link (bit/s).
        caps: per-flow rate caps (``inf`` for none), or ``None``.
        weights: number of identical flows each entry stands for (1 when omitted; identical
            uncapped flows at one level get equal rates under max-min, so grouping them is
            exact); the result is the rate of each of those flows.
    """
    n = links.shape[0]
    return _priority_max_min(
        np.ascontiguousarray(links, dtype=np.int64),
        np.ascontiguousarray(levels, dtype=np.int64),
        _caps(n, caps),
        _weights(n, weights),
        np.ascontiguousarray(capacity, dtype=np.float64),
    )


def max_min(links: np.ndarray, capacity: np.ndarray, caps: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rates of flows sharing ``capacity`` (one level)."""
    return priority_max_min(links, np.zeros(links.shape[0], dtype=np.int64), capacity, caps)


def greedy_in_order(
    links: np.ndarray,
    order: np.ndarray,
    capacity: np.ndarray,
    caps: np.ndarray | None = None,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """Each flow, in ``order`` (flow indices, most urgent first), takes what its links have left.

    Entries with weight 0 (empty groups) are skipped."""
    n = links.shape[0]
    rates = np.zeros(n)
    greedy_groups(
        np.ascontiguousarray(links, dtype=np.int64),
        _weights(n, weights),
        _caps(n, caps),
        np.ascontiguousarray(order, dtype=np.int64),
        np.ascontiguousarray(capacity, dtype=np.float64),
        rates,
    )
    return rates


def pair_max_min(w: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Per-flow max-min rates of a big switch's host pairs (one level, no caps).

    Args:
        w: ``(n, n)`` number of flows from host ``s`` to host ``d``.
        capacity: ``2n`` link capacities (egress of host i, then ingress of host i).

    Returns:
        ``(n, n)`` rate of each flow of every pair (``inf`` where there is none).
    """
    none = np.zeros(0)
    return pair_max_min_with_singles(w, np.zeros((0, 2), dtype=np.int64), none, none, capacity)[0]


def pair_max_min_with_singles(
    w: np.ndarray, pairs: np.ndarray, caps: np.ndarray, weights: np.ndarray, capacity: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pair_max_min` with one-flow groups beside the matrix (capped coflows sharing a
    pair level: :class:`simulator.allocation.Singles`).

    Args:
        w: ``(n, n)`` number of uncapped flows from host ``s`` to host ``d``.
        pairs: ``(m, 2)`` each single's source and destination host.
        caps: each single's rate cap (``inf`` for none).
        weights: each single's flows (0: an empty group).
        capacity: ``2n`` link capacities (egress of host i, then ingress of host i).

    Returns:
        ``(n, n)`` rate of each flow of every pair (``inf`` where there is none), and each
        single's rate.
    """
    w = np.ascontiguousarray(w, dtype=np.float64)
    n = w.shape[0]
    row_share, col_share = np.zeros(n), np.zeros(n)
    residual = np.ascontiguousarray(capacity, dtype=np.float64).copy()
    w_t = np.ascontiguousarray(w.T)
    (row_bits, row_pairs), (col_bits, col_pairs) = pair_bits(w), pair_bits(w_t)
    level = PairLevel(w, w_t, w.sum(axis=1), w.sum(axis=0), row_share, col_share, row_bits,
                      col_bits, row_pairs, col_pairs,
                      np.array([SPARSE_ROW], dtype=np.int64))  # fmt: skip
    m = len(pairs)
    links = np.asarray(pairs, dtype=np.int64).reshape(m, 2) + np.array([0, n])
    rates = np.zeros(m)
    singles = Singles(np.arange(m, dtype=np.int64), links, _caps(m, caps), _weights(m, weights),
                      rates)  # fmt: skip
    pair_shares(level, residual, residual.copy(), n, singles)
    return np.minimum(row_share[:, None], col_share[None, :]), rates
