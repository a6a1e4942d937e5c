"""The policies' compiled paths against the reference's mappings (simulator.reference, the
policies as their definitions read): Beamer's sums (controller.stage_loads) give the same
demand matrix entry for entry (values, port numbers of first use) and both of its paths the
same schedule, Varys' and MADD's (controller.madd) the same order and MADD times, on instances
full of ties like ring all-reduce's equal per-port loads."""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict
from dataclasses import dataclass
from itertools import chain

import numpy as np
import pytest

from controller.bssi import DemandMatrix, bssi_order
from controller.model import (
    ClusterState,
    Coflow,
    CoflowSummary,
    Host,
    Job,
    SparsePortBytes,
    Stage,
    egress,
    ingress,
)
from controller.policies import Beamer, Varys, _stage_order, _unit, madd, make_policy
from controller.schedule import Schedule
from controller.stage_loads import _stage_loads, offsets
from simulator import reference
from simulator.engine import CoflowSpec, Fabric, Simulator
from simulator.hpo import HpoDriver
from workloads.hpo import generate

from .instances import VersionCheck, job_stage_ranks


@dataclass
class ArrayState(ClusterState):
    """A plain state that also offers its coflows' loads as sparse arrays."""

    sparse: SparsePortBytes | None = None

    def sparse_port_bytes(self) -> SparsePortBytes | None:
        return self.sparse


def summary(coflow: Coflow) -> CoflowSummary:
    """The coflow's loads copied into a plain dict."""
    return CoflowSummary(coflow.size_bytes, coflow.remaining_bytes, dict(coflow.port_bytes()))


def mapping_state(state: ClusterState) -> ClusterState:
    """The same state without the array: every coflow's loads as a plain dict."""
    coflows = {
        cid: Coflow(cid, [], c.arrival_s, c.job_id, c.stage_id, c.weight, summary(c))
        for cid, c in state.coflows.items()
    }
    return ClusterState(state.hosts, coflows, state.jobs, state.stages, state.now_s, state.link_bps)


def tied_instance(seed: int, jobs_only: bool = False) -> ArrayState:
    """Ring-like jobs in stages, with equal per-port bytes (exact ties), some jobs computing
    (no coflow in flight, future iterations left), finished jobs still listed by their stage,
    coflows of an unregistered job, jobless coflows with and without a stage. ``jobs_only``:
    only the jobs of the stages, some finished (an HPO workload's state)."""
    rng = random.Random(seed)
    n_hosts = rng.randint(3, 6)
    # few distinct values, so many ports carry equal loads, none exact in binary, so sums
    # added in another order round differently
    sizes = (1e6 / 3, 1e6 / 3, 1e6 / 3, 2e6 / 3)
    jobs, stages, coflow_rows = [], [], []  # coflow_rows: (job, stage, arrival, {column: bytes})
    next_id = iter(range(1, 10_000))
    for _ in range(rng.randint(2, 6)):
        stage_id = next(next_id)
        stage = Stage(stage_id, [], arrival_s=float(rng.choice((0, 0, 1))),
                      weight=float(rng.choice((1, 1, 2))))  # fmt: skip
        for _ in range(rng.randint(1, 3)):
            job_id = next(next_id)
            stage.job_ids.append(job_id)
            if rng.random() < 0.15:
                continue  # finished: listed by its stage, no longer registered
            hosts = rng.sample(range(n_hosts), rng.randint(2, min(4, n_hosts)))
            size = rng.choice(sizes)
            per_iteration = {}  # ring order, not column order
            for a, b in zip(hosts, hosts[1:] + hosts[:1], strict=True):
                per_iteration[egress(a)] = per_iteration.get(egress(a), 0.0) + size
                per_iteration[ingress(b)] = per_iteration.get(ingress(b), 0.0) + size
            budget = rng.randint(1, 3)
            done = rng.randint(0, budget)
            jobs.append(Job(job_id, per_iteration, budget, done, stage_id))
            for _ in range(rng.choice((0, 0, 1, 1, 1, 2))):  # 0: computing
                share = rng.choice((1.0, 1.0, 1.0, 0.7))
                row = {n_hosts * d + h: share * v for (h, d), v in per_iteration.items()}
                coflow_rows.append((job_id, None, float(rng.choice((0, 1, 2))), row))
        stages.append(stage)
    # jobless, some in a stage, some of an unknown job
    for _ in range(0 if jobs_only else rng.randint(0, 4)):
        a, b = rng.sample(range(n_hosts), 2)
        row = {a: rng.choice(sizes), n_hosts + b: rng.choice(sizes)}
        stage_id = rng.choice([None, None, *(s.stage_id for s in stages)])
        job_id = rng.choice((None, None, 9_999))
        coflow_rows.append((job_id, stage_id, float(rng.choice((0, 1, 2))), row))
    bits = np.zeros((len(coflow_rows), 2 * n_hosts))
    coflows, row_of = {}, {}
    for i, (job_id, stage_id, arrival, row) in enumerate(coflow_rows):
        cid = next(next_id)
        for column, size in row.items():
            bits[i, column] = 8.0 * size
        loads = {(c % n_hosts, c // n_hosts): bits[i, c] / 8.0 for c in np.flatnonzero(bits[i])}
        total = float(bits[i].sum() / 16.0)
        coflows[cid] = Coflow(cid, [], arrival, job_id, stage_id, float(rng.choice((1, 1, 3))),
                              CoflowSummary(total, total, loads))  # fmt: skip
        row_of[cid] = i
    hosts = {}
    if seed % 3 == 0:  # ports of different capacities
        hosts = {h: Host(h, rng.choice((1e9, 2e9)), rng.choice((1e9, 4e9))) for h in range(2)}
    return ArrayState(
        hosts, coflows, {j.job_id: j for j in jobs}, {s.stage_id: s for s in stages},
        sparse=SparsePortBytes.from_dense(bits, row_of),
    )  # fmt: skip


def kernel_loads(state: ClusterState, in_flight, stage_units):
    """The stage demands and each unit's bottleneck as Beamer's kernel sums them
    (controller.stage_loads._stage_loads), for units and stages listed as the reference lists
    them."""
    sparse = state.sparse_port_bytes()
    units = list(dict.fromkeys(chain.from_iterable(stage_units)))
    rows, row_counts, future, extra_counts, extra_columns, extra_bytes = [], [], [], [], [], []
    for unit in units:
        coflows = in_flight.get(unit, [])
        rows += [sparse.row_of[c.coflow_id] for c in coflows]
        row_counts.append(len(coflows))
        job = state.jobs.get(unit[1]) if unit[0] == 0 else None
        n_future = 0 if job is None else job.iteration_budget - job.iterations_done - len(coflows)
        future.append(max(0, n_future))
        ports = job.bytes_per_iteration if n_future > 0 else {}
        extra_counts.append(len(ports))
        extra_columns += sparse.columns(ports, len(ports)).tolist()
        extra_bytes += list(ports.values())
    row_ptr, port, seconds, n_ports, bottleneck = _stage_loads(
        sparse.row_ptr, sparse.column, sparse.size_bytes, state.column_bps(sparse),
        offsets(row_counts), np.array(rows, dtype=np.int64), np.array(future, dtype=float),
        offsets(extra_counts), np.array(extra_columns, dtype=np.int64),
        np.array(extra_bytes, dtype=float), offsets(list(map(len, stage_units))),
        np.array([units.index(u) for u in chain.from_iterable(stage_units)], dtype=np.int64),
    )  # fmt: skip
    return DemandMatrix(row_ptr, port, seconds, n_ports), dict(
        zip(units, bottleneck.tolist(), strict=True)
    )


def both_loads(state: ClusterState):
    """The reference's loads of ``state``'s stages (their units as Beamer lists them: demand
    mappings and a unit's bottleneck), the kernel's (matrix and bottlenecks), and every
    unit."""
    in_flight, by_stage = defaultdict(list), defaultdict(set)
    for c in state.active_coflows():
        in_flight[_unit(c)].append(c)
        stage_id = state.stage_of(c)
        by_stage[(0, stage_id) if stage_id is not None else (1, c.coflow_id)].add(_unit(c))
    for (kind, stage_id), units in by_stage.items():
        if kind == 0 and stage_id in state.stages:
            units.update((0, job_id) for job_id in state.stages[stage_id].job_ids)
    stage_units = [sorted(units) for units in by_stage.values()]
    plain = reference.stage_loads_plain(mapping_state(state), in_flight, stage_units)
    fast = kernel_loads(state, in_flight, stage_units)
    return plain, fast, sorted(set().union(*by_stage.values()))


def assert_same_matrix(fast: DemandMatrix, plain: DemandMatrix) -> None:
    for name in ("row_ptr", "port", "seconds"):
        assert np.array_equal(getattr(fast, name), getattr(plain, name)), name
    assert fast.n_ports == plain.n_ports


@pytest.mark.parametrize("seed", range(60))
def test_the_kernel_s_stage_loads_equal_the_mappings_bit_for_bit(seed):
    state = tied_instance(seed)
    (demands, bottleneck_s), (matrix, bottlenecks), units = both_loads(state)
    assert_same_matrix(matrix, DemandMatrix.from_mappings(demands))
    for unit in units:
        assert bottlenecks[unit] == bottleneck_s(unit), unit


@pytest.mark.parametrize("seed", range(60))
def test_beamer_gives_the_reference_schedule(seed):
    # the state's sparse loads, and the same state as plain mappings (indexed by the policy):
    # the reference's ranks, rates and MADD times, in every reading
    state = tied_instance(seed)
    assert state.sparse_port_bytes() is not None
    readings = [{}, {"use_rates": True}, {"within_stage": "arrival"}, {"stage_order": "srpt"},
                {"use_rates": True, "within_stage": "arrival", "stage_order": "srpt"}]  # fmt: skip
    options = readings[seed % len(readings)]
    want = reference.beamer_schedule(mapping_state(state), **options)
    for built in (state, mapping_state(state)):
        got = Beamer(**options).schedule(built)
        assert got.ranks == want.ranks
        assert got.flow_rates_bps == want.flow_rates_bps
        assert got.coflow_gamma_s == want.coflow_gamma_s


@pytest.mark.parametrize("seed", range(60))
def test_beamer_s_path_for_jobs_in_their_stages_gives_the_general_schedule(seed):
    # an HPO state (every coflow of a registered job its stage lists) takes the path of
    # _job_stage_order; it gives the ranks of the general path and of the reference
    state = tied_instance(seed, jobs_only=True)
    active, sparse = state.active_coflows(), state.sparse_port_bytes()
    fast, kept = job_stage_ranks(state, active, sparse, None)
    if not active:
        assert fast is None
        return
    assert fast is not None
    assert fast == _stage_order(state, active, sparse).ranks
    assert fast == tuple(map(tuple, reference.beamer_ranks(mapping_state(state))))
    # what it kept serves the next call while the stages and jobs stay, and only then
    assert job_stage_ranks(state, active, sparse, kept) == (fast, kept)
    job = state.jobs[active[0].job_id]
    job.bytes_per_iteration = dict(job.bytes_per_iteration)  # equal loads (a progress report)
    assert job_stage_ranks(state, active, sparse, kept) == (fast, kept)
    # the same ports in another order (their numbers of first use change), other bytes
    per_iteration = job.bytes_per_iteration
    for loads in (dict(reversed(per_iteration.items())),
                  {port: 3.0 * size for port, size in per_iteration.items()}):  # fmt: skip
        job.bytes_per_iteration = loads
        again, made = job_stage_ranks(state, active, sparse, kept)
        assert made is not kept
        assert again == tuple(map(tuple, reference.beamer_ranks(state)))
        assert again == _stage_order(state, active, sparse).ranks
        kept = made


@pytest.mark.parametrize("seed", range(40))
def test_beamer_s_path_takes_a_job_listed_twice_as_the_general_path_does(seed):
    # a job listed by two stages counts in both stages' sums and is the later one's (its
    # own); a job listed twice by one stage counts once: the structure's path for such
    # listings gives the ranks of the general path and of the reference
    state = tied_instance(seed, jobs_only=True)
    active, sparse = state.active_coflows(), state.sparse_port_bytes()
    stages = list(state.stages.values())
    if not active or len(stages) < 2:
        return
    job_id = active[-1].job_id
    own = state.stages[state.jobs[job_id].stage_id]
    other = next(s for s in stages if s is not own)
    if list(state.stages).index(other.stage_id) > list(state.stages).index(own.stage_id):
        other.job_ids.append(own.job_ids[0])  # (listed later by its own stage: still its)
        state.stages[own.stage_id] = state.stages.pop(own.stage_id)
    other.job_ids.append(job_id)
    own.job_ids.append(own.job_ids[0])
    fast, _ = job_stage_ranks(state, active, sparse, None)
    assert fast is not None
    assert fast == _stage_order(state, active, sparse).ranks
    assert fast == tuple(map(tuple, reference.beamer_ranks(mapping_state(state))))


def test_the_instances_tie_so_port_numbers_matter():
    # Guard on the test instances: with the ports numbered in another order BSSI orders some
    # of them differently, so the tests above would see a wrong numbering of first use.
    changed = 0
    for seed in range(60):
        state = tied_instance(seed)
        (demands, _), _, _ = both_loads(state)
        weights = [1.0] * len(demands)
        matrix = DemandMatrix.from_mappings(demands)
        renumbered = DemandMatrix(matrix.row_ptr, matrix.n_ports - 1 - matrix.port,
                                  matrix.seconds, matrix.n_ports)  # fmt: skip
        changed += bssi_order(matrix, weights) != bssi_order(renumbered, weights)
    assert changed >= 5


def test_a_port_outside_the_matrix_is_refused():
    matrix = SparsePortBytes.from_dense(np.zeros((0, 6)), {})
    assert matrix.columns([egress(2), ingress(0)]).tolist() == [2, 3]
    with pytest.raises(ValueError, match="not one of hosts 0..2"):
        matrix.columns([egress(3)])
    with pytest.raises(ValueError, match="rows 0..1 one coflow each"):
        SparsePortBytes.from_dense(np.zeros((2, 6)), {5: 0})
    rows = SparsePortBytes.from_dense(np.ones((2, 6)), {7: 1, 5: 0})
    assert rows.ids == [5, 7] and rows.row_of == {5: 0, 7: 1}
    assert rows.rows_of([5, 7]) is None and rows.rows_of([7, 5]).tolist() == [1, 0]


@pytest.mark.parametrize("pattern", ["ring", "ps"])
def test_the_simulators_beamer_schedules_equal_the_reference(pattern):
    # at every reorder of a small HPO run, the simulator's state (path of _job_stage_order, its
    # stages kept from one reorder to the next) and the reference on the same state as plain
    # mappings give the same ranks
    checked, kept, versions = [], set(), VersionCheck()

    class Both(type(make_policy("beamer"))):
        def schedule(self, state):
            versions.check(state)
            schedule = super().schedule(state)
            assert state.sparse_port_bytes() is not None
            ranks, _ = job_stage_ranks(state, state.active_coflows(),
                                       state.sparse_port_bytes(), None)  # fmt: skip
            assert ranks is not None  # an HPO state: every coflow's job listed by its stage
            kept.add(id(self._job_stages))
            # the driver's table answers for every job a stage lists, as the jobs do, and
            # finds their rows without a search
            listed = np.array([j for s in state.stages.values() for j in s.job_ids], np.int64)
            table = state.job_table()
            assert len(listed) and table is not None and table.rows_are_ids
            live = [j if j in state.jobs else -1 for j in listed.tolist()]
            assert table.rows_of(listed).tolist() == live
            jobs = [state.jobs.get(j) for j in listed.tolist()]
            by_jobs = ([1 if j is None else j.iteration_budget for j in jobs],
                       [1 if j is None else j.iterations_done for j in jobs])  # fmt: skip
            assert [a.tolist() for a in state.job_iterations(listed)] == list(by_jobs)
            keys = state.coflow_keys()
            assert keys.coflow_id.tolist() == [c.coflow_id for c in state.active_coflows()]
            want = reference.beamer_ranks(mapping_state(state))
            assert tuple(map(tuple, want)) == schedule.ranks
            checked.append(len(schedule.order))
            return schedule

    sim = Simulator(Fabric(9, 1e9), Both())
    # (tasks arriving one after the other: stages and jobs come while others run)
    tasks = generate(9, 3, seed=5, configs_per_task=4, eta=2, min_iterations=2, scale=50,
                     patterns=(pattern,), mean_interarrival_s=0.5)  # fmt: skip
    HpoDriver(sim, tasks)
    sim.run()
    assert len(checked) > 20 and max(checked) > 3
    assert 1 < len(kept) < len(checked) / 2  # made again as stages change, kept in between
    assert versions.kept > len(checked) / 2  # the driver's version vouched for most reorders


def test_the_simulators_matrix_rows_are_its_coflows_mappings():
    # SparsePortBytes' promise: a coflow's port_bytes() is its row's entries, in column order,
    # and the simulator's rows are the nonzero per-port bits of its flows, each as bits / 8
    sim = Simulator(Fabric(7, 1e9), make_policy("beamer"))
    HpoDriver(sim, generate(7, 2, seed=2, configs_per_task=3, min_iterations=2, scale=50))
    state = sim.cluster_state()
    while len(state.coflows) < 3 and sim.now_s < 60:
        sim.run(until_s=sim.now_s + 0.05)
        state = sim.cluster_state()
    assert len(state.coflows) >= 3
    sparse = state.sparse_port_bytes()
    _, total, bits = sim._slot_bits(with_ports=True)  # the dense per-port bits, summed apart
    for cid, coflow in state.coflows.items():
        row = sparse.row_of[cid]
        lo, hi = sparse.row_ptr[row], sparse.row_ptr[row + 1]
        expected = [((c % 7, c // 7), bits[row, c] / 8.0) for c in np.flatnonzero(bits[row])]
        entries = zip(sparse.column[lo:hi].tolist(), sparse.size_bytes[lo:hi].tolist(),
                      strict=True)  # fmt: skip
        assert [((c % 7, c // 7), size) for c, size in entries] == expected
        assert list(coflow.port_bytes().items()) == expected
        # the total comes from the same pass as the rows, summed as slot_loads sums it
        assert coflow.remaining_bytes == total[row] / 8.0


@pytest.mark.parametrize("seed", range(60))
def test_varys_gives_the_reference_schedule(seed):
    # controller.madd's kernels against the reference's Varys on the mappings: the same SEBF
    # order (ties by arrival), the same MADD times, bit for bit, with ports of unequal capacity
    # too, from the state's sparse loads and from the plain mappings (indexed by the policy)
    state = tied_instance(seed)
    for use_rates in (True, False):
        want = reference.varys_schedule(mapping_state(state), use_rates)
        for built in (state, mapping_state(state)):
            got = Varys(use_rates=use_rates).schedule(built)
            assert got.ranks == want.ranks
            assert got.coflow_gamma_s == want.coflow_gamma_s
            assert got.flow_rates_bps == want.flow_rates_bps == {}


@pytest.mark.parametrize("seed", range(30))
def test_madd_gives_the_reference_rates(seed):
    # the helper that plugins call (controller.policies.madd) runs Varys' compiled MADD on the
    # coflows' mappings: the reference's rates and times along any order of any coflows, with
    # loads given or read, coflows with flows and without, ports of unequal capacity
    state = tied_instance(seed)
    rng = random.Random(seed)
    plain = mapping_state(state)
    coflows = list(plain.coflows.values())
    rng.shuffle(coflows)
    with_flows = reference.random_coflows(rng, 4, 4, weighted=False)
    for built, order in ((plain, coflows), (reference.state_of(with_flows), with_flows)):
        loads = {c.coflow_id: c.port_bytes() for c in order}
        for given in (None, loads):
            want = reference.madd_plain(built, order, given)
            assert madd(built, order, given) == want
            assert list(madd(built, order, given)[1]) == list(want[1])  # (in order)


def test_varys_skips_a_coflow_whose_port_is_full():
    # two coflows on the same egress port: MADD's first takes all of it, the second gets no
    # cap (it is served by work conservation); the sparse path agrees
    bits = np.array([[8e6, 0.0, 0.0, 8e6], [8e6, 0.0, 0.0, 0.0]])
    coflows = {
        cid: Coflow(cid, [], float(cid), summary=CoflowSummary(1e6, 1e6, {})) for cid in (1, 2)
    }
    state = ArrayState({}, coflows, sparse=SparsePortBytes.from_dense(bits, {1: 0, 2: 1}))
    schedule = Varys().schedule(state)
    assert schedule.order == [1, 2]  # equal bottlenecks: by arrival
    assert schedule.coflow_gamma_s == {1: pytest.approx(8e6 / 1e9)}


def test_the_simulators_varys_schedules_equal_the_reference():
    checked = []

    class Both(Varys):
        def schedule(self, state):
            schedule = super().schedule(state)
            assert state.sparse_port_bytes() is not None
            plain = reference.varys_schedule(mapping_state(state))
            assert (plain.ranks, plain.coflow_gamma_s) == (schedule.ranks, schedule.coflow_gamma_s)
            checked.append(len(schedule.coflow_gamma_s))
            return schedule

    sim = Simulator(Fabric(9, 1e9), Both())
    HpoDriver(sim, generate(9, 3, seed=5, configs_per_task=4, eta=2, min_iterations=2, scale=50))
    sim.run()
    assert len(checked) > 20 and max(checked) > 3


def test_sparse_rows_of_coflows_wide_and_narrow_equal_the_dense_bits():
    # a row's columns are sorted in place when a coflow touches few ports and by a full sort
    # when it touches many (here 2 x 39 + 1): both give the dense array's nonzero entries
    rng = random.Random(3)
    sim = Simulator(Fabric(40, 1e9), make_policy("fair"))
    wide = CoflowSpec(1, np.zeros(39, dtype=np.int64), np.arange(1, 40),
                      np.array([rng.uniform(1e5, 1e6) for _ in range(39)]))  # fmt: skip
    narrow = CoflowSpec(2, np.array([5, 9, 5]), np.array([3, 3, 7]), np.array([2e5, 1e5, 3e5]))
    fan_in = CoflowSpec(3, np.arange(2, 40), np.full(38, 1), np.full(38, 1e5))
    for spec in (wide, narrow, fan_in):
        sim.release(spec)
    sim.run(until_s=0.001)
    state = sim.cluster_state()
    sparse = state.sparse_port_bytes()
    bits = sim._slot_bits(with_ports=True)[2]
    assert len(state.coflows) == 3
    for cid in state.coflows:
        row = sparse.row_of[cid]
        lo, hi = sparse.row_ptr[row], sparse.row_ptr[row + 1]
        assert sparse.column[lo:hi].tolist() == np.flatnonzero(bits[row]).tolist()
        assert sparse.size_bytes[lo:hi].tolist() == (bits[row][bits[row] != 0] / 8.0).tolist()
    assert sparse.row_ptr[sparse.row_of[1] + 1] - sparse.row_ptr[sparse.row_of[1]] == 40


def test_a_stage_weight_not_above_zero_is_refused_only_where_it_is_ranked():
    # the reference's BSSI refuses a ranked stage of weight <= 0; both of Beamer's paths say
    # the same, and a stage without active coflows is not ranked, whatever its weight
    state = tied_instance(3, jobs_only=True)
    active, sparse = state.active_coflows(), state.sparse_port_bytes()
    ranked = {c.stage_id or state.jobs[c.job_id].stage_id for c in active}
    idle = [s for s in state.stages.values() if s.stage_id not in ranked]
    assert idle
    for stage in idle:
        stage.weight = 0.0
    fast, _ = job_stage_ranks(state, active, sparse, None)
    assert fast == tuple(map(tuple, reference.beamer_ranks(state)))
    assert fast == _stage_order(state, active, sparse).ranks
    state.stages[sorted(ranked)[0]].weight = 0.0
    for path in (lambda: job_stage_ranks(state, active, sparse, None),
                 lambda: _stage_order(state, active, sparse),
                 lambda: reference.beamer_ranks(state)):  # fmt: skip
        with pytest.raises(ValueError, match="weights must be > 0"):
            path()


def test_the_simulators_coflow_keys_follow_its_coflows():
    # released out of id order at one instant, and some ending: the keys stay in the order
    # of the state's active coflows, with each one's job and stage
    seen = []

    class Watch(type(make_policy("fair"))):
        def schedule(self, state):
            active = state.active_coflows()
            keys = state.coflow_keys()
            if state.all_left:
                assert keys.coflow_id.tolist() == [c.coflow_id for c in active]
                assert keys.job_id.tolist() == [c.job_id or 0 for c in active]
                assert keys.has_job.tolist() == [c.job_id is not None for c in active]
                assert keys.stage_id.tolist() == [c.stage_id or 0 for c in active]
                assert keys.has_stage.tolist() == [c.stage_id is not None for c in active]
                seen.append(keys.coflow_id.tolist())
                # (while a coflow is done, the active coflows skip it: no keys then)
                assert dataclasses.replace(state, all_left=False).coflow_keys() is None
            return super().schedule(state)

    sim = Simulator(Fabric(4, 1e9), Watch())
    for coflow_id, job, stage in ((9, 2, 1), (3, None, None), (5, 4, None), (4, 1, 7)):
        sim.release(CoflowSpec(coflow_id, np.array([0]), np.array([coflow_id % 3 + 1]),
                               np.array([1e5 * coflow_id]), job, stage))  # fmt: skip
    sim.run()
    assert seen[0] == [3, 4, 5, 9] and len(seen) > 2


@pytest.mark.parametrize(
    "name, options",
    [("sincronia", {}), ("varys", {}), ("varys", {"use_rates": False}), ("beamer", {}),
     ("beamer", {"use_rates": True})],
)  # fmt: skip
def test_a_schedule_s_rows_are_its_order_in_the_state_s_loads(name, options):
    # the policies that order coflows from the state's sparse loads hand the order back as
    # rows of those loads too; at every reorder of an HPO run the rows list the order's
    # coflows, and the simulator that reads them ends every coflow when the one that looks
    # each id up does
    checked = []

    class Rows(type(make_policy(name))):
        def schedule(self, state):
            schedule = super().schedule(state)
            sparse = state.sparse_port_bytes()
            assert schedule.loads is sparse and schedule.rows is not None
            assert [sparse.ids[r] for r in schedule.rows.tolist()] == schedule.order
            checked.append(len(schedule.order))
            return schedule

    class Ids(type(make_policy(name))):
        def schedule(self, state):
            made = super().schedule(state)  # the same order and caps, without the rows
            if made.single_order is not None:
                return Schedule.from_order(made.single_order, made.flow_rates_bps,
                                           made.coflow_gamma_s)  # fmt: skip
            return Schedule(made.ranks, made.flow_rates_bps, made.coflow_gamma_s)

    finish = []
    for policy in (Rows(**options), Ids(**options)):
        sim = Simulator(Fabric(9, 1e9), policy)
        tasks = generate(9, 3, seed=5, configs_per_task=4, eta=2, min_iterations=2, scale=50,
                         mean_interarrival_s=0.5)  # fmt: skip
        HpoDriver(sim, tasks)
        sim.run()
        finish.append([(c, r.finish_s) for c, r in sorted(sim.coflows.items())])
    assert len(checked) > 20 and max(checked) > 3
    assert finish[0] == finish[1]
