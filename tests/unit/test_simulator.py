"""The flow-level simulator on analytic cases, against the reference fluid schedule, and its
invariants (bytes conserved, order respected, deterministic)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from controller.model import ClusterState, Coflow, CoflowSummary, Flow
from controller.policies import Policy, make_policy
from controller.schedule import Schedule
from simulator.engine import CoflowSpec, Fabric, Simulator
from simulator.reference import greedy_completion_times

BPS = 8.0  # one byte per second


def run(specs, policy="fair", fabric=None, mode="levels", at=None):
    sim = Simulator(fabric or Fabric(6, BPS), make_policy(policy), mode=mode)
    for i, spec in enumerate(specs):
        when = at[i] if at else 0.0
        sim.at(when, lambda spec=spec: sim.release(spec))
    sim.run()
    return sim


def spec(cid, flows):
    src, dst, size = zip(*flows, strict=True)
    return CoflowSpec(cid, np.array(src), np.array(dst), np.array(size, dtype=float))


def test_one_flow_takes_size_over_rate():
    assert run([spec(1, [(0, 1, 10)])]).coflows[1].finish_s == pytest.approx(10)


def test_flows_sharing_a_port_get_equal_shares():
    # three flows out of host 0: each gets a third, so all end at 30 s
    sim = run([spec(1, [(0, 1, 10), (0, 2, 10), (0, 3, 10)])])
    assert sim.coflows[1].finish_s == pytest.approx(30)
    # unequal sizes: 1/3 each until the 5 B flow ends at 15 s, then 1/2 each: 10 B ends at 25 s
    sim = run([spec(1, [(0, 1, 5)]), spec(2, [(0, 2, 10)]), spec(3, [(0, 3, 20)])])
    assert [sim.coflows[c].finish_s for c in (1, 2, 3)] == pytest.approx([15, 25, 35])


def test_strict_priority_starves_the_lower_level_until_the_upper_finishes():
    # Sincronia puts the smaller coflow first: it runs alone, then the other
    sim = run([spec(1, [(0, 1, 10)]), spec(2, [(0, 2, 5)])], "sincronia")
    assert sim.coflows[2].finish_s == pytest.approx(5)
    assert sim.coflows[1].finish_s == pytest.approx(15)


def test_work_conservation_lets_a_lower_level_use_idle_ports():
    sim = run([spec(1, [(0, 1, 10)]), spec(2, [(2, 3, 4)])], "sincronia")
    assert sim.coflows[2].finish_s == pytest.approx(4)
    assert sim.coflows[1].finish_s == pytest.approx(10)


def test_two_tier_oversubscription_bottleneck():
    # 2 leaves of 2 hosts, oversubscription 2: leaf uplink = 2 x 8 / 2 = 8 bit/s, shared by the
    # two cross-leaf flows (4 bit/s each); an intra-leaf flow is not limited by it
    fabric = Fabric(4, BPS, hosts_per_leaf=2, oversubscription=2)
    sim = run([spec(1, [(0, 2, 10), (1, 3, 10)]), spec(2, [(0, 1, 0.0001)])], fabric=fabric)
    assert sim.coflows[1].finish_s == pytest.approx(20, rel=1e-3)
    sim = run([spec(1, [(0, 1, 10)])], fabric=fabric)
    assert sim.coflows[1].finish_s == pytest.approx(10)


def test_online_releases_and_madd_caps():
    # Varys: a coflow of 6 B and 2 B from host 0: MADD gives both flows the same 8 s
    sim = run([spec(1, [(0, 1, 6), (0, 2, 2)])], "varys")
    assert sim.coflows[1].finish_s == pytest.approx(8)
    sim = run([spec(1, [(0, 1, 10)]), spec(2, [(2, 3, 4)])], at=[0.0, 3.0])
    assert sim.coflows[2].arrival_s == 3.0 and sim.coflows[2].cct_s == pytest.approx(4)


def random_specs(rng, n, n_hosts):
    out = []
    for cid in range(n):
        flows = []
        for _ in range(rng.randint(1, 3)):
            src, dst = rng.sample(range(n_hosts), 2)
            flows.append((src, dst, float(rng.randint(1, 20))))
        out.append(spec(cid, flows))
    return out


@pytest.mark.parametrize("policy", ["fair", "fifo-lm"])
def test_ideal_mode_matches_the_reference_fluid_schedule(policy):
    """With an order that completions do not change (arrival order), the ideal mode is the
    greedy strict-priority schedule of simulator.reference, coflow for coflow."""
    rng = random.Random(policy)
    for _ in range(20):
        specs = random_specs(rng, rng.randint(2, 7), 4)
        coflows = [
            Coflow(
                s.coflow_id,
                [
                    Flow(int(a), int(b), float(c))
                    for a, b, c in zip(s.src, s.dst, s.size_bytes, strict=True)
                ],
            )
            for s in specs
        ]
        want = greedy_completion_times(
            ClusterState.build(coflows, link_bps=BPS), [s.coflow_id for s in specs]
        )
        sim = run(specs, policy, fabric=Fabric(4, BPS), mode="ideal")
        assert {c: r.finish_s for c, r in sim.coflows.items()} == pytest.approx(want)


def test_the_order_is_respected_on_one_port():
    # every coflow only uses host 0's uplink: completions follow Sincronia's order exactly
    rng = random.Random(7)
    specs = [spec(c, [(0, rng.randint(1, 5), float(rng.randint(1, 30)))]) for c in range(8)]
    sim = run(specs, "sincronia", mode="ideal")
    finish = sorted(sim.coflows, key=lambda c: sim.coflows[c].finish_s)
    sizes = {s.coflow_id: s.size_bytes.sum() for s in specs}
    assert finish == sorted(sizes, key=lambda c: (sizes[c], c))


@pytest.mark.parametrize("policy", ["fair", "sincronia", "varys", "jpas", "beamer", "fifo-lm"])
@pytest.mark.parametrize("mode", ["levels", "ideal"])
def test_bytes_conserved_and_runs_deterministic(policy, mode):
    def once():
        rng = random.Random(3)
        specs = random_specs(rng, 25, 6)
        at = sorted(rng.uniform(0, 20) for _ in specs)
        return run(specs, policy, mode=mode, at=at)

    first, second = once(), once()
    assert first.bytes_delivered == pytest.approx(first.bytes_offered)
    assert all(r.finish_s is not None for r in first.coflows.values())
    assert {c: r.finish_s for c, r in first.coflows.items()} == {
        c: r.finish_s for c, r in second.coflows.items()
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"link_bps": 0.0}, "link_bps must be finite and > 0"),
        ({"link_bps": float("inf")}, "link_bps must be finite and > 0"),
        ({"link_bps": float("nan")}, "link_bps must be finite and > 0"),
        ({"oversubscription": float("inf")}, "oversubscription must be finite and > 0"),
        ({"oversubscription": -1.0}, "oversubscription must be finite and > 0"),
    ],
)
def test_a_fabric_needs_finite_positive_rates(kwargs, message):
    # (an infinite link would share inf * 0 = NaN with the links it does not touch)
    with pytest.raises(ValueError, match=message):
        Fabric(4, **kwargs)


def test_scheduling_errors_are_loud():
    sim = Simulator(Fabric(2, BPS), make_policy("fair"))
    sim.now_s = 5.0
    with pytest.raises(ValueError, match="cannot schedule at 1"):
        sim.at(1.0, lambda: None)
    with pytest.raises(ValueError, match="host id outside 0..1"):
        sim.release(spec(1, [(0, 7, 1)]))
    sim.release(spec(2, [(0, 1, 1)]))
    with pytest.raises(ValueError, match="released twice"):
        sim.release(spec(2, [(0, 1, 1)]))
    with pytest.raises(ValueError, match="mode must be"):
        Simulator(Fabric(2, BPS), make_policy("fair"), mode="fast")


@pytest.mark.parametrize("policy", ["fair", "fifo-lm", "sincronia", "varys", "jpas"])
def test_pair_matrix_fast_path_matches_the_general_allocation(policy, monkeypatch):
    # a big switch keeps flows per host pair and recomputes only the rates that moved; the
    # general path recomputes every group's max-min rate at every step: same completions
    def once():
        rng = random.Random(11)
        specs = random_specs(rng, 30, 6)
        at = sorted(rng.uniform(0, 20) for _ in specs)
        return run(specs, policy, at=at)

    fast = once()
    assert fast._pair_hosts == 6
    monkeypatch.setattr("simulator.engine._MAX_PAIR_HOSTS", 0)
    general = once()
    assert general._pair_hosts == 0
    for c, record in fast.coflows.items():
        assert record.finish_s == pytest.approx(general.coflows[c].finish_s, rel=1e-9)


def _pooled_specs(rng, n_coflows, n_hosts, n_pairs):
    # coflows drawing their flows from a few host pairs: several coflows, of one level and of
    # several buckets, share a pair, whose bit must stay while any of their flows is left
    pool = [tuple(rng.sample(range(n_hosts), 2)) for _ in range(n_pairs)]
    out = []
    for cid in range(n_coflows):
        flows = [(*rng.choice(pool), float(rng.randint(1, 20))) for _ in range(rng.randint(1, 4))]
        out.append(spec(cid, flows))
    return out


@pytest.mark.parametrize("policy", ["fair", "sincronia", "varys", "jpas"])
def test_sparse_pair_levels_keep_their_bits_and_match_the_general_allocation(policy):
    # on 70 hosts (two words of bits a row) a level holds a few pairs per host, so the kernels
    # read a row's pairs from its bits, kept as flows end and coflows arrive: before and after
    # every reorder and at the end, each level's bits and pair counts are those of its matrix,
    # and the completions are the general allocation's
    from simulator.allocation import pair_bits

    def check_bits(sim):
        pairs = sim._tables.pairs
        for level in range(pairs.flows.shape[0]):
            for matrix, bits, counts in (
                (pairs.flows[level], pairs.row_bits[level], pairs.row_pairs[level]),
                (pairs.flows_t[level], pairs.col_bits[level], pairs.col_pairs[level]),
            ):
                expect_bits, expect_counts = pair_bits(matrix)
                assert np.array_equal(bits, expect_bits)
                assert np.array_equal(counts, expect_counts)

    def once(pair_levels):
        rng = random.Random(23)
        specs = _pooled_specs(rng, 150, 70, 40)
        sim = Simulator(Fabric(70, BPS), make_policy(policy), pair_levels=pair_levels)
        reorder, checks = sim._reorder, []

        def checked(*args, **kwargs):
            if pair_levels:  # (what the steps kept since the last reorder)
                check_bits(sim)
            reorder(*args, **kwargs)
            if pair_levels:
                check_bits(sim)
                checks.append(sim.now_s)

        sim._reorder = checked
        for i, s in enumerate(specs):
            sim.at(rng.uniform(0, 40) if i % 2 else 0.0, lambda s=s: sim.release(s))
        sim.run()
        if pair_levels:
            check_bits(sim)
        return sim, checks

    fast, checks = once(True)
    assert fast._pair_hosts == 70 and len(checks) > 50
    assert fast.bytes_delivered == pytest.approx(fast.bytes_offered)
    general, _ = once(False)
    for c, record in fast.coflows.items():
        assert record.finish_s == pytest.approx(general.coflows[c].finish_s, rel=1e-9)


@pytest.mark.parametrize("policy", ["fair", "sincronia", "beamer", "varys"])
def test_pair_levels_read_by_bits_or_whole_give_the_same_ccts(policy):
    # a row of a pair level is read by its bits when sparse, whole when dense: the same pairs
    # in the same order, so every row read one way or every row the other gives the same
    # completion times, float for float (an HPO workload: shared levels, capped singles,
    # classes moving as flows end)
    from simulator.hpo import HpoDriver
    from workloads.hpo import generate

    def ccts(factor):
        sim = Simulator(Fabric(40, 1e9), make_policy(policy))
        if factor is not None:
            sim._tables.pairs.sparse_factor[0] = factor
        HpoDriver(sim, generate(40, 6, seed=2))
        sim.run()
        return [sim.coflows[c].cct_s for c in sorted(sim.coflows)]

    default = ccts(None)
    assert len(default) > 300
    assert ccts(0) == default  # every row by its bits
    assert ccts(41) == default  # every row whole


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_level_of_shared_pairs_and_capped_coflows_matches_the_general_allocation(seed):
    # Varys caps the coflows it admits (MADD); beyond the first seven ranks capped and uncapped
    # coflows share the lowest level, which keeps its shared pairs in the matrix and serves the
    # capped flows beside it (pair_shares' singles): the general allocation's completions
    def once(mixed_levels, pair_levels=True):
        rng = random.Random(seed)
        specs = random_specs(rng, 60, 6)
        sim = Simulator(Fabric(6, BPS), make_policy("varys"), pair_levels=pair_levels)
        reorder = sim._reorder

        def noted(*args, **kwargs):
            reorder(*args, **kwargs)
            plan = sim._plan
            for level in range(len(plan.general)):
                if not plan.general[level] and plan.start[level + 1] > plan.start[level]:
                    mixed_levels.append(level)

        sim._reorder = noted
        for s in specs:
            sim.release(s)
        sim.run()
        return sim

    mixed_levels = []
    fast = once(mixed_levels)
    assert fast._pair_hosts == 6 and 7 in mixed_levels
    assert fast.bytes_delivered == pytest.approx(fast.bytes_offered)
    general = once([], pair_levels=False)
    assert general._pair_hosts == 0
    for c, record in fast.coflows.items():
        assert record.finish_s == pytest.approx(general.coflows[c].finish_s, rel=1e-9)


def test_a_varys_hpo_run_does_not_depend_on_the_order_of_float_sums():
    # an HPO run reacts to every completion, so a last-bit difference that swaps two coflows of
    # equal bottleneck sends it elsewhere (one CCT of this workload moved 75-fold before Varys
    # compared bottlenecks to the nanosecond); the general max-min adds in another order
    from simulator.hpo import HpoDriver
    from workloads.hpo import generate

    def ccts(pair_levels):
        sim = Simulator(Fabric(30, 1e9), make_policy("varys"), pair_levels=pair_levels)
        HpoDriver(sim, generate(30, 6, seed=3))
        sim.run()
        return [sim.coflows[c].cct_s for c in sorted(sim.coflows)]

    fast, general = ccts(True), ccts(False)
    assert len(fast) > 500
    assert fast == pytest.approx(general, rel=1e-9)


class _GivenOrder(Policy):
    """Ranks the coflows in ``self.order`` (a test's knob); every rank gets its own level."""

    name = "given"

    def __init__(self, order):
        self.order = order

    def schedule(self, state):
        return Schedule.from_order(c for c in self.order if c in state.coflows)


def test_a_coflow_changing_level_keeps_its_groups_and_rates_follow():
    # two levels; coflow 1 drops from level 0 to level 1, where 3 is: it keeps its own bucket
    # (no flow of it moves: a level holds several), 2 leaves 3's bucket for level 0 (moves);
    # the completions are those of the general allocation, which has no such buckets
    def once():
        policy = _GivenOrder([1, 2, 3])
        sim = Simulator(Fabric(4, BPS), policy, n_levels=2)
        sim.release(spec(1, [(0, 1, 40), (2, 3, 40)]))
        sim.release(spec(2, [(0, 3, 60), (2, 1, 60)]))
        sim.release(spec(3, [(0, 1, 50), (1, 2, 30), (3, 0, 20)]))
        sim.run(until_s=2.0)
        buckets = list(sim._slot_bucket)
        groups = sim._tables.f_group[:2].copy()
        policy.order = [2, 1, 3]
        sim.request_reorder()
        sim.run(until_s=2.5)
        kept = [sim._slot_bucket[slot] == buckets[slot] for slot in range(3)]
        kept_groups = (sim._tables.f_group[:2] == groups).all()
        levels = [sim._b_level[sim._slot_bucket[slot]] for slot in range(3)]
        sim.run()
        return sim, (kept, kept_groups), levels

    fast, (kept, kept_groups), levels = once()
    assert fast._pair_hosts == 4 and levels == [1, 0, 1]
    assert kept == [True, False, True] and kept_groups
    import simulator.engine as engine

    saved, engine._MAX_PAIR_HOSTS = engine._MAX_PAIR_HOSTS, 0
    try:
        general, _, _ = once()
    finally:
        engine._MAX_PAIR_HOSTS = saved
    assert general._pair_hosts == 0
    for c, record in fast.coflows.items():
        assert record.finish_s == pytest.approx(general.coflows[c].finish_s, rel=1e-9)


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_fixed_rate_levels_match_recomputing_every_step(seed):
    # Varys' capped levels keep their rates while the caps fit, their groups ending from a heap;
    # recomputing every level at every step gives the same completions
    def once(fixed):
        rng = random.Random(seed)
        specs = random_specs(rng, 30, 6)
        at = sorted(rng.uniform(0, 20) for _ in specs)
        sim = Simulator(Fabric(6, BPS), make_policy("varys"))
        sim._fixed_rates = fixed
        for when, s in zip(at, specs, strict=True):
            sim.at(when, lambda s=s: sim.release(s))
        sim.run()
        return sim

    lazy, eager = once(True), once(False)
    assert lazy.bytes_delivered == pytest.approx(lazy.bytes_offered)
    for c, record in lazy.coflows.items():
        assert record.finish_s == pytest.approx(eager.coflows[c].finish_s, rel=1e-9)


def test_every_kernel_takes_at_most_8_arguments_and_says_what_it_does():
    # the tables travel as named tuples (simulator.core): a kernel reads its fields by name
    # instead of taking them one by one; a kernel's parameters are arrays and tuple fields
    # whose meaning, units and in-place changes the signature cannot tell, so its docstring
    # names every one of them
    import ast
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "simulator"
    kernels = []
    for module in ("core.py", "allocation.py", "reference.py"):
        for node in ast.walk(ast.parse((root / module).read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                "njit" in ast.unparse(d) for d in node.decorator_list
            ):
                kernels.append(node)
    assert len(kernels) > 20
    too_many = [k.name for k in kernels if len(k.args.args) > 8]
    undocumented = [k.name for k in kernels if not ast.get_docstring(k)]
    assert too_many == [] and undocumented == []
    unnamed = [
        (k.name, a.arg)
        for k in kernels
        for a in k.args.args
        if not re.search(rf"\b{re.escape(a.arg)}\b", ast.get_docstring(k))
    ]
    assert unnamed == []


def test_caps_that_fit_are_what_max_min_gives():
    # the shortcut for capped levels (caps fit: each flow its cap; flows on a link the levels
    # above filled: 0) against the general priority max-min
    from simulator.core import FIT, FIT_STARVED, NO_FIT, _caps_fit
    from simulator.reference import priority_max_min

    rng = np.random.default_rng(4)
    capacity = np.array([10.0, 10.0, 10.0, 10.0, np.inf])
    outcomes = set()
    for _ in range(200):
        n = int(rng.integers(1, 6))
        links = np.stack([rng.integers(0, 2, n), rng.integers(2, 4, n)], axis=1)
        caps = rng.uniform(0.5, 6.0, n)
        residual = capacity.copy()
        residual[rng.integers(0, 4)] = 0.0 if rng.random() < 0.3 else residual[0]
        rates = np.zeros(n)
        usage = np.zeros(len(capacity))
        left = residual.copy()
        fit = _caps_fit(np.arange(n), links, caps, np.ones(n), left, capacity, rates, usage)
        outcomes.add(fit)
        if fit == NO_FIT:
            assert not usage.any()
            continue
        # the same flows below a level holding exactly what the residual lacks
        full = np.flatnonzero(residual[:4] < capacity[:4])
        above = np.array([[link, 4] for link in full], dtype=np.int64).reshape(-1, 2)
        all_links = np.concatenate([above, links])
        levels = np.concatenate([np.zeros(len(above), dtype=np.int64), np.ones(n, dtype=np.int64)])
        all_caps = np.concatenate([capacity[full] - residual[full], caps])
        expected = priority_max_min(all_links, levels, capacity, all_caps)[len(above) :]
        np.testing.assert_allclose(rates, expected, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(left, np.maximum(residual - usage, 0.0))
    assert outcomes == {NO_FIT, FIT, FIT_STARVED}


def test_port_loads_cannot_be_read_after_the_simulator_moved_on():
    sim = Simulator(Fabric(2, BPS), make_policy("fair"))
    sim.release(spec(1, [(0, 1, 10)]))
    state = sim.cluster_state()
    ports = state.coflows[1].port_bytes()
    assert dict(ports) == {(0, 0): 10.0, (1, 1): 10.0}
    stale = sim.cluster_state()
    sim.run(until_s=1.0)
    with pytest.raises(RuntimeError, match="after the simulator moved on"):
        stale.coflows[1].port_bytes()[(0, 0)]


@pytest.mark.parametrize("seed", range(5))
def test_the_simulators_demand_matrix_is_the_one_built_from_its_coflows(seed):
    # BSSI's matrix straight from the port-bits array must equal the one built from each
    # coflow's summary (ClusterState.demand_matrix), entry for entry, rows in any given order.
    from controller.bssi import DemandMatrix

    rng = random.Random(seed)
    sim = Simulator(Fabric(7, 1e9), make_policy("sincronia"))
    for cid in range(25):
        flows = [(*rng.sample(range(7), 2), rng.choice((1e6, 2e6, 3.3e6))) for _ in range(3)]
        coflow = spec(cid, flows)
        sim.at(rng.choice((0.0, 0.004)), lambda coflow=coflow: sim.release(coflow))
    sim.run(until_s=0.01)
    state = sim.cluster_state()
    coflows = list(state.coflows.values())
    rng.shuffle(coflows)
    fast = state.demand_matrix(coflows)
    plain = ClusterState.demand_matrix(state, coflows)
    assert isinstance(fast, DemandMatrix) and fast.n_items == len(coflows) > 0
    for name in ("row_ptr", "port", "seconds"):
        assert np.array_equal(getattr(fast, name), getattr(plain, name)), name
    assert fast.n_ports == plain.n_ports


@pytest.mark.parametrize("seed", range(5))
def test_the_simulators_byte_counts_are_its_coflows(seed):
    # FIFO-LM's sizes and bytes left, gathered from the port bits, must be what each coflow
    # object says, for every active coflow in arrival order and for any subset in any order;
    # with more coflows than the slot arrays' first room, some finished (the rows are not the
    # slots) and every size distinct
    rng = random.Random(seed)
    sim = Simulator(Fabric(7, 1e9), make_policy("fifo-lm"))
    for cid in range(40):
        flows = [(*rng.sample(range(7), 2), 2e4 * (1 + cid) + 1e2 * k) for k in range(3)]
        coflow = spec(cid, flows)
        sim.at(rng.uniform(0.0, 0.02), lambda coflow=coflow: sim.release(coflow))
    sim.run(until_s=0.015)
    state = sim.cluster_state()
    active = state.active_coflows()
    some = rng.sample(active, len(active) // 2)
    finished = [r for r in sim.coflows.values() if r.finish_s is not None]
    assert len(sim.coflows) > 16 and finished and len(active) > 2
    assert any(c.remaining_bytes < c.size_bytes for c in active)
    for coflows in (active, some):
        ids = [c.coflow_id for c in coflows]
        expected = ([c.size_bytes for c in coflows], [c.remaining_bytes for c in coflows])
        assert state.byte_counts(coflows) == expected
        assert state.byte_counts(coflows, ids) == expected
    with pytest.raises(RuntimeError, match="not active"):
        state.byte_counts(active, [c.coflow_id for c in active] + [finished[0].coflow_id])
    sim.run(until_s=0.016)
    with pytest.raises(RuntimeError, match="after the simulator moved on"):
        state.byte_counts(active)


def fresh_coflows(sim: Simulator) -> dict[int, Coflow]:
    """The policy's coflows built from scratch, one new object per active coflow, as the
    simulator once built them at every reorder."""
    slots, total_bits, port_bits = sim._slot_bits(with_ports=True)
    n_hosts = sim.fabric.n_hosts
    coflows = {}
    for i, slot in enumerate(slots):
        record = sim._slots[slot]
        columns = np.flatnonzero(port_bits[i]).tolist()
        loads = {(c % n_hosts, c // n_hosts): float(port_bits[i, c]) / 8.0 for c in columns}
        summary = CoflowSummary(record.size_bytes, float(total_bits[i]) / 8.0, loads)
        coflows[record.coflow_id] = Coflow(record.coflow_id, [], record.arrival_s, record.job_id,
                                           record.stage_id, record.weight, summary)  # fmt: skip
    return coflows


class CheckedPolicy(Policy):
    """Wraps a policy and checks, at every reorder, that the state it is given (the kept coflow
    objects) equals one built from scratch: same coflows in the same order, same values."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.reorder_period_s = inner.reorder_period_s
        self.sim: Simulator | None = None
        self.checked = 0

    def schedule(self, state: ClusterState) -> Schedule:
        fresh = fresh_coflows(self.sim)
        assert list(state.coflows) == list(fresh)
        for cid, coflow in state.coflows.items():
            expected = fresh[cid]
            for name in ("coflow_id", "arrival_s", "job_id", "stage_id", "weight", "flows",
                         "size_bytes", "remaining_bytes", "sent_bytes", "done"):  # fmt: skip
                assert getattr(coflow, name) == getattr(expected, name), (cid, name)
            assert list(coflow.port_bytes().items()) == list(expected.port_bytes().items())
        plain = ClusterState(coflows=fresh)
        assert [c.coflow_id for c in state.active_coflows()] == [
            c.coflow_id for c in plain.active_coflows()
        ]
        self.checked += 1
        return self.inner.schedule(state)


@pytest.mark.parametrize("policy", ["beamer", "varys", "fifo-lm", "jpas", "sincronia"])
def test_every_reorder_sees_the_state_built_from_scratch_hpo(policy):
    from simulator.hpo import HpoDriver
    from workloads.hpo import generate

    checked = CheckedPolicy(make_policy(policy))
    sim = Simulator(Fabric(7, 1e9), checked)
    checked.sim = sim
    HpoDriver(sim, generate(7, 2, seed=3, configs_per_task=3, min_iterations=2, scale=50))
    sim.run()
    assert checked.checked == sim.reorders > 20


@pytest.mark.parametrize("mode", ["levels", "ideal"])
@pytest.mark.parametrize("seed", range(3))
def test_every_reorder_sees_the_state_built_from_scratch_out_of_order_ids(seed, mode):
    # coflows released at one instant in any id order: the kept (arrival, id) order must
    # still be active_coflows' sort
    rng = random.Random(seed)
    checked = CheckedPolicy(make_policy("sincronia"))
    sim = Simulator(Fabric(6, 1e9), checked, mode=mode)
    checked.sim = sim
    ids = list(range(30))
    rng.shuffle(ids)
    for cid in ids:
        flows = [(*rng.sample(range(6), 2), rng.choice((1e5, 2e5, 3.3e5))) for _ in range(3)]
        coflow = spec(cid, flows)
        sim.at(rng.choice((0.0, 0.001, 0.002)), lambda coflow=coflow: sim.release(coflow))
    sim.run()
    assert checked.checked == sim.reorders > 5


def test_a_coflow_keeps_its_object_from_release_to_finish():
    sim = Simulator(Fabric(3, BPS), make_policy("fair"))
    sim.release(spec(1, [(0, 1, 10)]))
    sim.release(spec(2, [(0, 2, 20)]))
    first = sim.cluster_state()
    assert [first.coflows[c].remaining_bytes for c in (1, 2)] == [10.0, 20.0]
    sim.run(until_s=4.0)
    second = sim.cluster_state()
    assert second.coflows[1] is first.coflows[1]  # not rebuilt, read anew
    assert [second.coflows[c].remaining_bytes for c in (1, 2)] == [8.0, 18.0]
    assert dict(second.coflows[1].port_bytes()) == {(0, 0): 8.0, (1, 1): 8.0}
    sim.run(until_s=25.0)  # coflow 1 ended at 20 s
    assert list(sim.cluster_state().coflows) == [2]
    with pytest.raises(RuntimeError, match="not active"):
        _ = second.coflows[1].remaining_bytes


def test_remaining_bytes_cannot_be_read_after_the_simulator_moved_on():
    sim = Simulator(Fabric(2, BPS), make_policy("fair"))
    sim.release(spec(1, [(0, 1, 10)]))
    state = sim.cluster_state()
    assert state.coflows[1].remaining_bytes == 10.0
    sim.run(until_s=1.0)
    with pytest.raises(RuntimeError, match="after the simulator moved on"):
        _ = state.coflows[1].remaining_bytes


@pytest.mark.parametrize(
    ("policy", "mode"), [("fair", "levels"), ("beamer", "levels"), ("varys", "levels"),
                         ("sincronia", "ideal")]
)  # fmt: skip
def test_keeping_every_bucket_is_what_assigning_them_anew_does(policy, mode, monkeypatch):
    # the reorder's shortcut (no coflow changed level or capping: nothing to assign) must give
    # the run that assigning every coflow's bucket again gives, to the last bit
    from simulator.hpo import HpoDriver
    from workloads.hpo import generate

    def finish_times(shortcut: bool) -> tuple[list, int]:
        if not shortcut:
            monkeypatch.setattr(Simulator, "_keeps_buckets", lambda *args: False)
        sim = Simulator(Fabric(9, 1e9), make_policy(policy), mode=mode)
        HpoDriver(sim, generate(9, 3, seed=4, configs_per_task=4, min_iterations=2, scale=50))
        sim.run()
        monkeypatch.undo()
        return [(c, r.finish_s) for c, r in sim.coflows.items()], sim.reorders

    kept, reorders = finish_times(shortcut=True)
    assert reorders > 20
    assert kept == finish_times(shortcut=False)[0]


def test_the_cost_model_s_two_terms_are_measured_within_the_run():
    import time

    rng = random.Random(5)
    specs, times = [], []
    for k in range(30):
        pairs = [rng.sample(range(6), 2) for _ in range(3)]
        specs.append(spec(k, [(s, d, rng.uniform(10, 100)) for s, d in pairs]))
        times.append(0.5 * k)
    started = time.perf_counter()
    sim = run(specs, "sincronia", at=times)
    wall = time.perf_counter() - started
    assert sim.reorders > 0 and sim.steps >= sim.reorders / 2
    assert 0 < sim.reorder_s and 0 < sim.step_s and sim.reorder_s + sim.step_s <= wall


@pytest.mark.parametrize("policy", ["fair", "sincronia", "varys", "jpas", "beamer", "fifo-lm"])
def test_the_ideal_order_without_a_sort_is_the_sorted_one(monkeypatch, policy):
    """At every reorder of the ideal mode, the order listed coflow by coflow
    (``ideal_order``) is the one sorting every group by level, then head, gives, and so are
    the groups' levels; and it is taken at nearly every reorder."""
    import simulator.engine as engine

    taken, sims = [], []

    def checked(f_group, g_n_flows, g_used, g_level, slot_flows, slots, used_prefix):
        order = engine_ideal_order(f_group, g_n_flows, g_used, g_level, slot_flows, slots,
                                   used_prefix)  # fmt: skip
        taken.append(order is not None)
        if order is not None:
            used = np.flatnonzero(g_used[:used_prefix])
            levels = g_level[used].copy()
            g_level[used] = -1  # (set again by the sort)
            sorted_plan = sims[0]._sorted_plan(sims[0]._tables, max(len(slots), 1))
            assert np.array_equal(order, sorted_plan.order)
            assert np.array_equal(g_level[used], levels)
        return order

    engine_ideal_order = engine.ideal_order
    monkeypatch.setattr(engine, "ideal_order", checked)
    rng = random.Random(policy)
    for offline in (False, True):
        specs = random_specs(rng, 30, 6)
        at = [0.0] * len(specs) if offline else sorted(rng.uniform(0, 20) for _ in specs)
        sim = Simulator(Fabric(6, BPS), make_policy(policy), mode="ideal")
        sims[:] = [sim]
        for when, one in zip(at, specs, strict=True):
            sim.at(when, lambda one=one, sim=sim: sim.release(one))
        sim.run()
    assert len(taken) > 20 and all(taken)


def test_the_ideal_order_declines_groups_it_cannot_vouch_for():
    """``ideal_order`` lists each coflow's flows' groups in turn, and gives ``None`` (the
    sorting kernels then decide) for a group in use that no listed flow has, or a group of
    two flows."""
    from simulator.core import SlotFlows, ideal_order

    slot_ranges = np.array([[0, 2], [2, 4]], dtype=np.int64)
    f_group = np.array([0, 1, -1, 2], dtype=np.int64)  # flow 2 finished
    g_used = np.ones(3, dtype=np.bool_)
    g_n_flows = np.ones(3)
    g_level = np.zeros(3, dtype=np.int64)
    # (every flow in its slot's live list)
    slot_flows = SlotFlows(slot_ranges, np.arange(4), np.array([2, 2]))
    order = ideal_order(f_group, g_n_flows, g_used, g_level, slot_flows,
                        np.array([1, 0], dtype=np.int64), 3)  # fmt: skip
    assert order.tolist() == [2, 0, 1] and g_level.tolist() == [1, 1, 0]
    listed_once = ideal_order(f_group, g_n_flows, g_used, g_level, slot_flows,
                              np.array([1], dtype=np.int64), 3)  # fmt: skip
    assert listed_once is None  # groups 0 and 1 are in use and not listed
    g_n_flows[2] = 2.0
    assert ideal_order(f_group, g_n_flows, g_used, g_level, slot_flows,
                       np.array([1, 0], dtype=np.int64), 3) is None  # fmt: skip


@pytest.mark.parametrize(
    "policy, reads_ports",
    [("jpas", False), ("fifo-lm", False), ("fair", False), ("sincronia", True), ("varys", True)],
)
def test_the_ports_loads_are_made_only_for_a_policy_that_reads_them(policy, reads_ports):
    """A state's bytes left per port (a second compiled pass over every active flow) are
    made when a policy first reads them, and then equal the loads summed from the flows."""
    rng = random.Random(5)
    specs = random_specs(rng, 12, 6)
    sim = Simulator(Fabric(6, BPS), make_policy(policy), mode="levels")
    for one in specs:
        sim.release(one)
    sim.run(until_s=3.0)
    state = sim.cluster_state()
    sim.policy.schedule(state)
    loads = sim._loads.latest
    assert (loads.made_sparse() is not None) == reads_ports
    sparse = state.sparse_port_bytes()
    assert loads.made_sparse() is sparse
    # against the dense per-port bits left of every active coflow (another kernel)
    slots, _, dense = sim._slot_bits(with_ports=True)
    id_of = {slot: cid for cid, slot in sim._slot_of.items()}
    assert len(state.active_coflows()) == len(slots) > 3
    for slot, bits in zip(slots, dense, strict=True):
        row = sparse.row_of[id_of[slot]]
        lo, hi = sparse.row_ptr[row], sparse.row_ptr[row + 1]
        assert sparse.column[lo:hi].tolist() == np.flatnonzero(bits).tolist()
        assert sparse.size_bytes[lo:hi].tolist() == (bits[bits != 0] / 8.0).tolist()


@pytest.mark.parametrize("mode", ["levels", "ideal"])
def test_each_slot_lists_its_flows_not_finished_in_flow_order(mode):
    """A reorder's scans read each coflow's live flows, not its whole range: the list holds
    every flow not finished, in flow order (the order every sum adds them in), and after a
    reorder no finished one; the bits left read from it are those of the whole range."""
    from simulator.core import DONE

    rng = random.Random(9)
    specs = random_specs(rng, 20, 6)
    sim = Simulator(Fabric(6, BPS), make_policy("jpas", period_s=0.5), mode=mode)
    for one in specs:
        sim.release(one)
    dropped = 0
    for until in (2.0, 5.0, 9.0, 14.0):
        sim.run(until_s=until)
        sim.cluster_state()  # (a reorder's first scan)
        tables = sim._tables
        slots, total, _ = sim._slot_bits(with_ports=False)
        assert sim._loads.latest._remaining == (total / 8.0).tolist()
        for slot in slots:
            first, last = sim._slot_ranges[slot]
            listed = tables.f_live[first : first + tables.slot_live[slot]].tolist()
            live = [f for f in range(first, last) if tables.f_group[f] != DONE]
            assert listed == live
            dropped += (last - first) - len(listed)
    assert dropped > 0
