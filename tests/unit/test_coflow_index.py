"""The coflow index (:class:`controller.model.CoflowIndex`): a state that reads its coflows'
loads from it lists the same coflows, offers their loads as the same numbers, and every
policy orders it exactly as it orders the same state without it."""

from __future__ import annotations

import random
from itertools import chain

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.bssi import DemandMatrix
from controller.model import (
    EGRESS,
    INGRESS,
    SPLICE_LIMIT,
    ClusterState,
    Coflow,
    CoflowIndex,
    CoflowLoads,
    Flow,
    Host,
    Job,
    JobTable,
    SparsePortBytes,
    Stage,
    _Rows,
    port_seconds,
)
from controller.policies import POLICIES, make_policy
from controller.schedule import Schedule
from simulator import reference

from .instances import job_stage_ranks
from .test_policies import cluster_states

VARIANTS = [(name, {}) for name in sorted(POLICIES)] + [
    ("beamer", {"use_rates": True}),
    ("varys", {"use_rates": False}),
    ("fifo-lm", {"min_history": 1, "heavy_percentile": 50.0}),
]


def named_hosts(state: ClusterState, seed: int) -> ClusterState:
    """The same state with hosts named by IPv4 address (as the controller names them), each
    with its own capacities."""
    rng = random.Random(seed)
    name = {}

    def host(h):
        if h not in name:
            name[h] = f"10.0.{rng.randint(0, 3)}.{h + 1}"
        return name[h]

    def ports(load):
        return {(host(h), way): size for (h, way), size in load.items()}

    coflows = [
        Coflow(c.coflow_id,
               [Flow(host(f.src), host(f.dst), f.size_bytes, f.remaining_bytes, f.flow_id)
                for f in c.flows],
               c.arrival_s, c.job_id, c.stage_id, c.weight)
        for c in state.coflows.values()
    ]  # fmt: skip
    jobs = [
        Job(j.job_id, ports(j.bytes_per_iteration), j.iteration_budget, j.iterations_done,
            j.stage_id, j.task_id, j.arrival_s)
        for j in state.jobs.values()
    ]  # fmt: skip
    scale = state.link_bps
    hosts = [
        Host(n, scale * rng.choice((0.5, 1, 2)), scale * rng.choice((1, 3))) for n in name.values()
    ]
    return ClusterState.build(coflows, jobs, state.stages.values(), hosts,
                              link_bps=scale)  # fmt: skip


def indexed(state: ClusterState) -> ClusterState:
    """``state`` with an index of its coflows (hosts of its jobs included)."""
    return ClusterState.build(state.coflows.values(), state.jobs.values(), state.stages.values(),
                              state.hosts.values(), indexed=True,
                              link_bps=state.link_bps)  # fmt: skip


def assert_same_view(plain: ClusterState, fast: ClusterState) -> None:
    """``fast`` (indexed) lists the coflows of ``plain`` and offers their loads exactly."""
    active = plain.active_coflows()
    listed = fast.active_coflows()
    assert [id(c) for c in listed] == [id(c) for c in active]
    sparse = fast.sparse_port_bytes()
    assert list(sparse.ids) == [c.coflow_id for c in active]
    hosts = list(sparse.hosts)
    n_hosts = sparse.n_hosts
    for row, coflow in enumerate(active):
        lo, hi = sparse.row_ptr[row], sparse.row_ptr[row + 1]
        ports = [(hosts[col % n_hosts], col // n_hosts) for col in sparse.column[lo:hi].tolist()]
        assert list(zip(ports, sparse.size_bytes[lo:hi].tolist(), strict=True)) == list(
            coflow.port_bytes().items()
        )
        for port in ports:
            assert sparse.columns([port]).tolist() == [sparse.column_of[port]]
    assert fast.byte_counts(active) == (
        [c.size_bytes for c in active],
        [c.remaining_bytes for c in active],
    )
    keys = fast.coflow_keys()
    assert keys.coflow_id.tolist() == [c.coflow_id for c in active]
    assert keys.in_row_order and keys.coflow_id.tolist() == list(sparse.ids)
    assert keys.has_job.tolist() == [c.job_id is not None for c in active]
    assert keys.job_id.tolist() == [c.job_id or 0 for c in active]
    assert keys.has_stage.tolist() == [c.stage_id is not None for c in active]
    assert keys.stage_id.tolist() == [c.stage_id or 0 for c in active]
    assert fast.column_bps(sparse).tolist() == [
        plain.port_bps((hosts[k % n_hosts], k // n_hosts)) for k in range(2 * n_hosts)
    ]
    # BSSI's matrix, of every active coflow and of a subset in another order
    for coflows in (active, active[::-2]):
        want = DemandMatrix.from_mappings([port_seconds(plain, c.port_bytes()) for c in coflows])
        got = fast.demand_matrix(coflows)
        assert got.n_ports == want.n_ports
        for a, b in zip((got.row_ptr, got.port, got.seconds),
                        (want.row_ptr, want.port, want.seconds), strict=True):  # fmt: skip
            assert np.array_equal(a, b)


@settings(max_examples=80, deadline=None)
@given(cluster_states(), st.integers(0, 3))
def test_an_indexed_state_lists_the_same_coflows_and_loads(state, seed):
    for plain in (state, named_hosts(state, seed)):
        assert_same_view(plain, indexed(plain))


@settings(max_examples=80, deadline=None)
@given(cluster_states(), st.integers(0, 3), st.sampled_from(VARIANTS))
def test_every_policy_orders_an_indexed_state_as_the_plain_one(state, seed, variant):
    name, options = variant
    for plain in (state, named_hosts(state, seed)):
        fast = indexed(plain)
        assert make_policy(name, **options).schedule(fast) == make_policy(name, **options).schedule(
            plain
        )
        # a policy that ordered the state before orders it again the same way
        kept = make_policy(name, **options)
        kept.schedule(fast)
        assert kept.schedule(fast) == make_policy(name, **options).schedule(plain)


@settings(max_examples=60, deadline=None)
@given(cluster_states(), st.integers(0, 3))
def test_a_plain_state_s_loads_read_into_arrays_are_its_coflows_mappings(state, seed):
    # what the policies that compute on arrays order a plain state by: the same dicts, the
    # same coflows, each row a coflow's port_bytes() items in order, every job's port a
    # column; a state with its loads as arrays already is its own
    for plain in (state, named_hosts(state, seed)):
        fast = plain.with_sparse_loads()
        assert fast.with_sparse_loads() is fast
        assert (fast.coflows, fast.jobs, fast.stages) == (plain.coflows, plain.jobs, plain.stages)
        assert fast.coflows is plain.coflows and fast.jobs is plain.jobs
        active = plain.active_coflows()
        assert [id(c) for c in fast.active_coflows()] == [id(c) for c in active]
        sparse = fast.sparse_port_bytes()
        assert sparse.ids == [c.coflow_id for c in active]
        hosts, n_hosts = sparse.hosts, sparse.n_hosts
        for row, coflow in enumerate(active):
            lo, hi = sparse.row_ptr[row], sparse.row_ptr[row + 1]
            ports = [(hosts[c % n_hosts], c // n_hosts) for c in sparse.column[lo:hi].tolist()]
            assert list(zip(ports, sparse.size_bytes[lo:hi].tolist(), strict=True)) == list(
                coflow.port_bytes().items()
            )
        for job in plain.jobs.values():
            sparse.columns(job.bytes_per_iteration)  # (no port outside the columns)
        assert fast.byte_counts(active) == plain.byte_counts(active)
        assert fast.column_bps(sparse).tolist() == [
            plain.port_bps((hosts[k % n_hosts], k // n_hosts)) for k in range(2 * n_hosts)
        ]
        built = indexed(plain)
        assert built.with_sparse_loads() is built
    with pytest.raises(ValueError, match="is not \\(host, EGRESS or INGRESS\\)"):
        SparsePortBytes.from_mappings([1], [{("a", 2): 1.0}])


# the policies that keep an exact slow version in simulator.reference, with each reading
REFERENCES = [
    ("varys", {}, reference.varys_schedule),
    ("varys", {"use_rates": False}, reference.varys_schedule),
    ("beamer", {}, reference.beamer_schedule),
    ("beamer", {"use_rates": True}, reference.beamer_schedule),
    ("beamer", {"within_stage": "arrival", "stage_order": "srpt"}, reference.beamer_schedule),
    ("jpas", {}, lambda state: Schedule(reference.jpas_ranks(state))),
    ("jpas", {"progress": "service"}, lambda state, progress: Schedule(
        reference.jpas_ranks(state, progress))),
    ("jpas", {"progress": "maif"}, lambda state, progress: Schedule(
        reference.jpas_ranks(state, progress))),
]  # fmt: skip


@settings(max_examples=120, deadline=None)
@given(cluster_states(), st.integers(0, 3), st.sampled_from(REFERENCES))
def test_every_policy_gives_the_reference_schedule(state, seed, variant):
    # plain (indexed by the policy) and indexed, hosts numbered and named (unequal ports): the
    # reference's ranks, rates and MADD times, bit for bit
    name, options, slow = variant
    for plain in (state, named_hosts(state, seed)):
        want = slow(plain, **options)
        for built in (plain, indexed(plain)):
            got = make_policy(name, **options).schedule(built)
            assert got == want
            assert list(got.coflow_gamma_s) == list(want.coflow_gamma_s)  # (in order)


def test_puts_and_removals_keep_the_arrival_order_and_loads():
    rng = random.Random(7)
    index, coflows = CoflowIndex(), {}
    jobs = [Job(j, {(f"h{j}", EGRESS): 5.0, (f"x{j}", INGRESS): 5.0}) for j in range(3)]
    for job in jobs:
        index.add_hosts(host for host, _ in job.bytes_per_iteration)
    older = []  # states made before later changes: they must show what they showed
    for step in range(400):
        coflow_id = rng.randrange(30)
        if rng.random() < 0.25:
            index.remove(coflow_id)
            coflows.pop(coflow_id, None)
        else:
            flows = []
            for _ in range(rng.randint(1, 3)):
                src, dst = rng.sample([f"h{h}" for h in range(8)], 2)
                size = float(rng.choice((0, 10, 25)))
                flows.append(Flow(src, dst, size, rng.choice((0.0, size / 2, size))))
            # same arrival (a progress report: the coflow keeps its place) or another one
            old = coflows.get(coflow_id)
            arrival = old.arrival_s if old is not None and rng.random() < 0.5 else rng.randint(0, 9)
            coflows[coflow_id] = Coflow(coflow_id, flows, float(arrival), job_id=coflow_id % 3)
            index.put(coflows[coflow_id])
        assert len(index) == len(coflows) and all(c in index for c in coflows)
        plain = ClusterState.build(coflows.values(), jobs)  # (puts make new objects)
        fast = ClusterState.build(plain.coflows.values(), jobs, loads=index.snapshot())
        assert index.snapshot() is fast.loads  # kept until the next change
        assert_same_view(plain, fast)
        if rng.random() < 0.1:
            older.append((plain, fast))
        if step % 40 == 0:
            for state in older:
                assert_same_view(*state)
            for name, options in VARIANTS:
                want = make_policy(name, **options).schedule(plain)
                assert make_policy(name, **options).schedule(fast) == want
    assert len(older) > 20


def assert_same_snapshot(got: CoflowLoads, want: CoflowLoads) -> None:
    """Two snapshots list the same coflow objects with the same numbers, array for array."""
    assert [id(c) for c in got.coflows] == [id(c) for c in want.coflows]
    assert list(got.sparse.ids) == list(want.sparse.ids)
    assert (got.sparse.n_hosts, got.sparse.hosts) == (want.sparse.n_hosts, want.sparse.hosts)
    for name in ("row_ptr", "column", "size_bytes"):
        a, b = getattr(got.sparse, name), getattr(want.sparse, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert (got.size_bytes, got.remaining_bytes) == (want.size_bytes, want.remaining_bytes)
    assert got.weights.dtype == want.weights.dtype == np.float64
    assert got.weights.tolist() == want.weights.tolist() == [c.weight for c in want.coflows]
    for name in ("coflow_id", "job_id", "has_job", "stage_id", "has_stage", "in_row_order"):
        assert np.array_equal(getattr(got.keys, name), getattr(want.keys, name)), name


@pytest.mark.parametrize("seed", range(6))
def test_a_snapshot_after_a_few_changes_is_the_last_one_spliced(seed, monkeypatch):
    """Coflows arrive in order (new ones at the end of the rows), report progress (replaced
    in their place), finish, leave, come back, and a host is added, a few changes at a time:
    each snapshot, spliced from the one before, equals a snapshot made anew, and older
    snapshots keep showing what they showed."""
    spliced = []
    splice = _Rows.spliced
    monkeypatch.setattr(_Rows, "spliced", lambda *a: spliced.append(1) or splice(*a))
    rng = random.Random(seed)
    index, coflows, clock, older = CoflowIndex(), {}, 0.0, []
    hosts = [f"h{h}" for h in range(6)]

    def new_coflow(coflow_id, arrival_s):
        flows = []
        for _ in range(rng.randint(1, 3)):
            src, dst = rng.sample(hosts, 2)
            size = float(rng.choice((10, 25, 40)))
            flows.append(Flow(src, dst, size, rng.choice((size / 4, size / 2, size))))
        job = rng.choice((None, coflow_id % 4))
        return Coflow(coflow_id, flows, arrival_s, job_id=job, stage_id=rng.choice((None, 2)),
                      weight=rng.choice((1.0, 0.5, 3.0)))  # fmt: skip

    for _round in range(300):
        for _ in range(rng.choice((1, 1, 2, 3, 5, 40))):
            action, active = rng.random(), [c for c in coflows if c in index._active]
            if action < 0.35 or not active:
                clock += 1.0
                coflow_id = rng.randrange(10**6)
                coflows[coflow_id] = new_coflow(coflow_id, clock)
            elif action < 0.6:  # progress: the same arrival, fewer bytes left
                coflow_id = rng.choice(active)
                coflows[coflow_id] = new_coflow(coflow_id, coflows[coflow_id].arrival_s)
            elif action < 0.7:  # finished: no bytes left
                old = coflows[coflow_id := rng.choice(active)]
                coflows[coflow_id] = Coflow(
                    coflow_id, [Flow(f.src, f.dst, f.size_bytes, 0.0) for f in old.flows],
                    old.arrival_s)  # fmt: skip
            elif action < 0.9:
                index.remove(coflows.pop(rng.choice(active)).coflow_id)
                continue
            elif action < 0.95:  # back again, later
                clock += 1.0
                coflow_id = rng.choice(list(coflows))
                coflows[coflow_id] = new_coflow(coflow_id, clock)
            else:
                hosts.append(f"n{len(hosts)}")
                index.add_hosts(hosts[-1:])
                continue
            index.put(coflows[coflow_id])
        rows = index._rows  # (what is noted for the next splice stays small)
        assert rows is None or len(index._touched) <= max(SPLICE_LIMIT, len(rows.ids) // 8)
        assert rows is not None or not (index._touched or index._moved)
        fresh = CoflowIndex()
        fresh.add_hosts(index._hosts)
        for entry in index._active.values():
            fresh.put(entry.coflow)
        view = index.snapshot()
        assert_same_snapshot(view, fresh.snapshot())
        assert_changes_named(view, older[-1][0] if older else None)
        older.append((view, fresh.snapshot()))
    for got, want in older:
        assert_same_snapshot(got, want)
    assert len(spliced) > 150  # most snapshots were spliced
    assert sum(got.changed_since is not None for got, _ in older) == len(spliced)


def assert_changes_named(view: CoflowLoads, before: CoflowLoads | None) -> None:
    """A snapshot's coflows by id are its coflows in row order, object for object; a spliced
    one names the snapshot before it and every coflow whose object is not that one's."""
    assert [(i, id(c)) for i, c in view.coflows_by_id.items()] == [
        (i, id(c)) for i, c in zip(view.sparse.ids, view.coflows, strict=True)
    ]
    if before is None or view.changed_since is None:
        return
    assert view.serial > before.serial > 0
    serial, ids = view.changed_since
    assert serial == before.serial
    old, new = before.coflows_by_id, view.coflows_by_id
    differ = {i for i in old.keys() | new.keys() if old.get(i) is not new.get(i)}
    assert differ <= ids


def test_a_kept_stage_structure_reads_the_jobs_stages_again_where_no_version_vouches():
    """Beamer keeps what it derived from the stages; the jobs' own stages (the stage of a
    coflow that names none) are read again when the state does not vouch for its jobs: a job
    moved to a stage that does not list it takes its coflows off the array path."""
    for seed in range(5):
        plain = hpo_state(seed, "none")
        fast = indexed(plain)
        sparse = fast.sparse_port_bytes()
        ranks, kept = job_stage_ranks(fast, fast.active_coflows(), sparse, None)
        assert ranks is not None
        moved = plain.active_coflows()[-1].job_id
        jobs = [Job(j.job_id, j.bytes_per_iteration, j.iteration_budget, j.iterations_done,
                    99 if j.job_id == moved else j.stage_id, arrival_s=j.arrival_s)
                for j in plain.jobs.values()]  # fmt: skip
        again = indexed(ClusterState.build(plain.coflows.values(), jobs, plain.stages.values(),
                                           link_bps=1e3))  # fmt: skip
        ranks, still = job_stage_ranks(
            again, again.active_coflows(), again.sparse_port_bytes(), kept
        )
        assert still is kept and ranks is None


def test_jobs_loads_are_packed_when_put_and_read_from_the_dict_put():
    """A job's loads per iteration, packed when the job is put, read as the sparse columns and
    bytes of its ``bytes_per_iteration`` (in its order); a job put again with another dict, or
    not put, gives none; a snapshot keeps the jobs it was made with."""
    rng = random.Random(3)
    hosts = [f"10.0.0.{h}" for h in range(1, 9)]

    def job(job_id):
        ports = rng.sample(
            [(h, way) for h in hosts for way in (EGRESS, INGRESS)], rng.randint(1, 6)
        )
        return Job(job_id, {port: float(rng.randint(1, 9)) for port in ports})

    index = CoflowIndex([Coflow(1, [Flow("10.0.0.1", "10.0.0.2", 5.0)])])
    jobs = {j: job(j) for j in range(6)}
    for each in jobs.values():
        index.put_job(each)
    index.remove_job(5)
    index.remove_job(99)  # (not there: no error)
    first = index.snapshot()
    index.put_job(Job(2, jobs[2].bytes_per_iteration, iteration_budget=7))  # the same loads
    assert index.snapshot() is first
    ids = [4, 0, 3]
    sources = [jobs[j].bytes_per_iteration for j in ids]
    counts, columns, loads = first.job_loads(ids, sources)
    assert counts.tolist() == [len(s) for s in sources]
    assert columns.tolist() == first.sparse.columns(chain.from_iterable(sources)).tolist()
    assert loads.tolist() == [v for s in sources for v in s.values()]
    assert first.job_loads([5], [jobs[5].bytes_per_iteration]) is None  # removed
    assert first.job_loads([0], [dict(jobs[0].bytes_per_iteration)]) is None  # another dict
    # a job put again (new loads) shows in the next snapshot, not in the one before
    old = jobs[0]
    jobs[0] = job(0)
    index.put_job(jobs[0])
    second = index.snapshot()
    assert second is not first
    assert second.job_loads([0], [old.bytes_per_iteration]) is None
    got = second.job_loads([0], [jobs[0].bytes_per_iteration])
    assert got[1].tolist() == second.sparse.columns(jobs[0].bytes_per_iteration).tolist()
    assert first.job_loads([0], [old.bytes_per_iteration])[2].tolist() == list(
        old.bytes_per_iteration.values()
    )
    index.remove_job(3)
    assert index.snapshot().job_loads([3], [jobs[3].bytes_per_iteration]) is None
    assert second.job_loads([3], [jobs[3].bytes_per_iteration]) is not None
    assert ClusterState().job_loads([0], [old.bytes_per_iteration]) is None  # (no index)


def test_a_port_of_a_host_the_index_does_not_know_is_named():
    index = CoflowIndex([Coflow(1, [Flow("a", "b", 10.0)])])
    with pytest.raises(ValueError, match=r"\('c', 0\) is not one of hosts \['a', 'b'\]"):
        index.snapshot().sparse.columns([("c", EGRESS)])


def hpo_state(seed: int, change: str) -> ClusterState:
    """An HPO-like state (every coflow's job listed by its stage: Beamer's array path), or one
    with a ``change`` that makes some coflow leave it."""
    rng = random.Random(seed)
    jobs, stages, coflows = [], {}, []
    for j in range(12):
        stage_id = j // 4  # (stage 0: an absent id is packed as 0 with a flag)
        per_iteration = {(rng.randrange(6), rng.choice((EGRESS, INGRESS))): 3.0 * (j + 1)}
        jobs.append(Job(100 - j, per_iteration, 5, rng.randrange(5), stage_id, arrival_s=j))
        stages.setdefault(stage_id, Stage(stage_id, [], arrival_s=rng.choice((0.0, 1.0))))
        stages[stage_id].job_ids.append(100 - j)
    for k in range(30):
        job = jobs[rng.randrange(len(jobs))]
        src, dst = rng.sample(range(6), 2)
        own_stage = job.stage_id if change == "own stages" and k % 2 else None
        coflows.append(Coflow(k, [Flow(src, dst, rng.randint(1, 99))], float(rng.randrange(4)),
                              job_id=job.job_id, stage_id=own_stage))  # fmt: skip
    last = coflows[-1]
    if change == "no job":
        coflows[-1] = Coflow(last.coflow_id, last.flows, last.arrival_s)
    elif change == "unlisted job":
        coflows[-1] = Coflow(last.coflow_id, last.flows, last.arrival_s, job_id=7)
        jobs.append(Job(7, {}, 1, 0, 0))
    elif change == "other stage":
        listed = next(j.stage_id for j in jobs if j.job_id == last.job_id)
        coflows[-1] = Coflow(last.coflow_id, last.flows, last.arrival_s, job_id=last.job_id,
                             stage_id=1 if listed != 1 else 2)  # fmt: skip
    elif change == "job without stage":  # a job of stage 0 that does not say so itself
        coflows[-1] = Coflow(last.coflow_id, last.flows, last.arrival_s, job_id=100)
        jobs = [Job(j.job_id, j.bytes_per_iteration, 5, 0, None) if j.job_id == 100 else j
                for j in jobs]  # fmt: skip
    elif change == "huge id":
        coflows[-1] = Coflow(2**70, last.flows, last.arrival_s, job_id=last.job_id)
    elif change == "huge job stage":  # a job's own stage that no int64 holds, no stage lists
        jobs = [Job(j.job_id, j.bytes_per_iteration, 5, 0, 2**70) if j.job_id == last.job_id
                else j for j in jobs]  # fmt: skip
    return ClusterState.build(coflows, jobs, stages.values(), link_bps=1e3)


@pytest.mark.parametrize(
    "change",
    ["none", "own stages", "no job", "unlisted job", "other stage", "job without stage",
     "huge id", "huge job stage"],
)  # fmt: skip
def test_beamer_orders_an_indexed_hpo_state_from_its_keys(change):
    for seed in range(5):
        plain = hpo_state(seed, change)
        fast = indexed(plain)
        assert (fast.coflow_keys() is None) == (change == "huge id")
        ranks, _ = job_stage_ranks(fast, fast.active_coflows(), fast.sparse_port_bytes(), None)
        # the array path takes the HPO states and leaves the others (an id that no int64
        # holds too) to the general one
        assert (ranks is not None) == (change in ("none", "own stages"))
        plain_ranks, _ = job_stage_ranks(plain, plain.active_coflows(),
                                          fast.sparse_port_bytes(), None)  # fmt: skip
        assert plain_ranks == ranks  # (the keys read from the objects: the same path)
        for options in ({}, {"use_rates": True}):
            want = make_policy("beamer", **options).schedule(plain)
            assert make_policy("beamer", **options).schedule(fast) == want
            kept = make_policy("beamer", **options)
            kept.schedule(fast)
            assert kept.schedule(fast) == want
        # (and every policy with a reference: an id no int64 holds is read as an int)
        for name, options, slow in REFERENCES:
            for built in (plain, fast):
                assert make_policy(name, **options).schedule(built) == slow(plain, **options)


@pytest.mark.parametrize("seed", range(4))
def test_a_table_whose_rows_are_the_ids_finds_the_rows_a_search_finds(seed):
    """A job table kept a row per job id (the simulator's HPO driver) finds a job's row by its
    id, without a search: the rows a searched table over the live rows finds, -1 for ids
    outside the rows, of rows no live job holds, and negative ones."""
    rng = np.random.default_rng(seed)
    numbers = JobTable.empty_numbers(int(rng.integers(1, 40)))
    numbers["live"] = rng.random(len(numbers)) < 0.6
    numbers["job_id"] = np.arange(len(numbers))
    live = np.flatnonzero(numbers["live"])
    by_id = JobTable(live, live, numbers, {}, rows_are_ids=True)
    searched = JobTable(live, live, numbers, {})
    asked = rng.integers(-3, len(numbers) + 3, size=60)
    assert by_id.rows_of(asked).tolist() == searched.rows_of(asked).tolist()
    assert by_id.rows_of(np.zeros(0, dtype=np.int64)).tolist() == []


def test_the_job_table_is_the_numbers_of_the_very_jobs_the_index_mirrors():
    """Snapshots offer the jobs' numbers as arrays only for the jobs dict named by mirror(),
    until a job is put or removed again; a snapshot keeps the numbers it was made with."""
    index = CoflowIndex([Coflow(1, [Flow("10.0.0.1", "10.0.0.2", 5.0)], job_id=3)])
    jobs = {j: Job(j, iteration_budget=4 + j, iterations_done=j % 3, stage_id=None if j == 1
                   else 10 + j, arrival_s=0.5 * j) for j in (7, 3, 1)}  # fmt: skip
    for job in jobs.values():
        index.put_job(job)
    assert index.snapshot().job_table is None  # (not mirrored)
    index.mirror(jobs)
    first = index.snapshot()
    state = ClusterState(jobs=jobs, loads=first)
    table = state.job_table()
    assert table is not None and table.job_ids.tolist() == [1, 3, 7]
    rows = table.rows_of(np.array([7, 2, 1, 3, 99]))
    assert (rows[[1, 4]] == -1).all()
    picked = table.numbers[rows[[0, 2, 3]]]
    assert picked["budget"].tolist() == [11, 5, 7] and picked["done"].tolist() == [1, 1, 0]
    assert picked["arrival_s"].tolist() == [3.5, 0.5, 1.5]
    assert picked["has_stage"].tolist() == [True, False, True]
    assert picked["stage_id"].tolist() == [17, 0, 13]
    budget, done = state.job_iterations(np.array([3, 2]))
    assert budget.tolist() == [7, 1] and done.tolist() == [0, 1]  # (2: unknown, nothing left)
    assert ClusterState(jobs=dict(jobs), loads=first).job_table() is None  # another dict
    # a progress report (a new job object): no table until the caller mirrors again
    later = dict(jobs)
    later[3] = Job(3, jobs[3].bytes_per_iteration, 7, 6, stage_id=13, arrival_s=1.5)
    index.put_job(later[3])
    assert index.snapshot().job_table is None
    index.mirror(later)
    assert index.snapshot().sparse is first.sparse  # (only the jobs' numbers changed)
    index.remove_job(7)
    del later[7]
    index.mirror(later)
    second = index.snapshot()
    table2 = ClusterState(jobs=later, loads=second).job_table()
    assert table2.job_ids.tolist() == [1, 3]
    assert table2.numbers[table2.rows_of(np.array([3]))]["done"].tolist() == [6]
    # the first snapshot's table still shows what it was made with
    assert table.numbers[table.rows_of(np.array([3]))]["done"].tolist() == [0]
    assert table.job_ids.tolist() == [1, 3, 7]
    # a job id that is not an int64: no table from then on
    index.put_job(Job(2**70))
    index.mirror({**later, 2**70: Job(2**70)})
    assert index.snapshot().job_table is None
