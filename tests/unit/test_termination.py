"""No input makes an ordering loop run forever: BSSI on any demands and weights (finite, huge,
infinite, NaN), every policy on states with such loads (the controller's mapping and array
paths), and the simulator with flows at the largest size the controller accepts.

Each call runs in a forked child with a deadline, so a loop that does not end fails the test
instead of hanging the suite (the loop is compiled and holds the interpreter: no thread could
interrupt it).
"""

from __future__ import annotations

import math
import multiprocessing
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.bssi import DemandMatrix, bssi_positions
from controller.limits import MAX_FLOW_BYTES, MAX_LINK_BPS
from controller.model import ClusterState, Coflow, Flow, Job, Stage, egress, ingress
from controller.policies import POLICIES, make_policy
from simulator.engine import CoflowSpec, Fabric, Simulator

DEADLINE_S = 60.0  # far above any of these calls (milliseconds once compiled)
EXTREMES = [0.0, 5e-324, 1e-300, 1.0, 2.2e307, 1e308, MAX_FLOW_BYTES, math.inf, math.nan]


def _child(conn, fn, args):
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as exc:  # (the parent reports it)
        conn.send(("raised", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def within_deadline(fn, *args, deadline_s: float = DEADLINE_S):
    """``fn(*args)``'s result, computed in a forked child; fails the test if the child is still
    running after ``deadline_s`` (it is killed by PID) or if it raised."""
    parent, child = multiprocessing.get_context("fork").Pipe(duplex=False)
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(child, fn, args))
    proc.start()
    child.close()
    try:
        if not parent.poll(deadline_s):
            pytest.fail(f"{getattr(fn, '__name__', fn)} did not finish in {deadline_s:g} s")
        status, value = parent.recv()
    finally:
        if proc.is_alive():
            os.kill(proc.pid, 9)
        proc.join()
    assert status == "ok", value
    return value


def _bssi(row_ptr, port, seconds, n_ports, weights):
    matrix = DemandMatrix(
        np.asarray(row_ptr, dtype=np.int64), np.asarray(port, dtype=np.int64),
        np.asarray(seconds, dtype=float), n_ports,
    )  # fmt: skip
    return bssi_positions(matrix, weights).tolist()


any_float = st.one_of(st.sampled_from(EXTREMES), st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def raw_matrices(draw):
    """A demand matrix's arrays as a caller might pass them, with any float in them."""
    n_items = draw(st.integers(1, 8))
    n_ports = draw(st.integers(0, 4))  # (0: every demand dropped, a case that read out of bounds)
    row_ptr, port, seconds = [0], [], []
    for _ in range(n_items):
        ports = draw(st.lists(st.integers(0, max(n_ports - 1, 0)), max_size=n_ports, unique=True))
        port += ports
        seconds += [draw(any_float) for _ in ports]
        row_ptr.append(len(port))
    weights = [draw(st.one_of(st.sampled_from([1e-300, 1.0, 1e300, math.inf]),
                              st.floats(min_value=1e-300, allow_infinity=True)))
               for _ in range(n_items)]  # fmt: skip
    return row_ptr, port, seconds, n_ports, weights


def _bssi_each(matrices):
    return [_bssi(*matrix) for matrix in matrices]


@settings(max_examples=8, deadline=None)
@given(st.lists(raw_matrices(), min_size=25, max_size=25))
def test_bssi_ends_with_a_permutation_on_any_demands_and_weights(matrices):
    orders = within_deadline(_bssi_each, matrices)  # (one child for 25: a fork costs ~0.3 s)
    for matrix, order in zip(matrices, orders, strict=True):
        assert sorted(order) == list(range(len(matrix[0]) - 1))


def test_the_demand_that_froze_the_controller_is_ordered():
    # 1e308 bytes x 8 bits is inf: an infinite load went NaN and the loop never ended
    bits_s = 8 * 1e308 / 20e6
    assert within_deadline(_bssi, [0, 1, 2], [0, 0], [bits_s, 1.0], 1, [1.0, 1.0]) == [1, 0]
    assert within_deadline(_bssi, [0, 1], [0], [math.inf], 1, [1.0]) == [0]
    # two huge flows from one source sum to inf
    assert sorted(within_deadline(_bssi, [0, 1, 2], [0, 0], [1.2e308, 1.2e308], 1, [1, 1])) == [
        0, 1,
    ]  # fmt: skip


def _extreme_state(size: float, per_iteration: float, indexed: bool) -> ClusterState:
    """Three jobs in two stages and a coflow of its own, with one extreme size among them."""
    jobs = [
        Job(1, {egress(0): per_iteration, ingress(1): per_iteration}, 10, 2, 1, arrival_s=0.0),
        Job(2, {egress(0): 1e6, ingress(2): 1e6}, 10, 0, 1, arrival_s=1.0),
        Job(3, {egress(3): per_iteration, ingress(1): 5.0}, 2**31 - 1, 0, 2, arrival_s=2.0),
    ]
    stages = [Stage(1, [1, 2], arrival_s=0.0), Stage(2, [3], arrival_s=1.0)]
    coflows = [
        Coflow(10, [Flow(0, 1, size), Flow(0, 2, size)], arrival_s=0.0, job_id=1),
        Coflow(11, [Flow(0, 2, 1e6)], arrival_s=1.0, job_id=2),
        Coflow(12, [Flow(3, 1, size)], arrival_s=2.0, job_id=3),
        Coflow(13, [Flow(2, 1, size), Flow(3, 2, 1.0)], arrival_s=3.0),
    ]
    return ClusterState.build(coflows, jobs, stages, indexed=indexed, link_bps=20e6)


def _order(name: str, options: dict, state: ClusterState) -> list:
    return list(make_policy(name, **options).schedule(state).order)


POLICY_RUNS = [(name, {}) for name in sorted(POLICIES)] + [
    ("beamer", {"use_rates": True}),
    ("varys", {"use_rates": False}),
]


def _orders(name: str, options: dict) -> list[list]:
    return [
        _order(name, options, _extreme_state(size, per_iteration, indexed))
        for size in (2.2e307, 1e308, MAX_FLOW_BYTES, math.inf)
        for per_iteration in (size, math.nan)
        for indexed in (False, True)  # the mapping path and the array path
    ]


@pytest.mark.parametrize(("name", "options"), POLICY_RUNS)
def test_every_policy_orders_extreme_loads(name, options):
    _order(name, options, _extreme_state(1.0, 1.0, True))  # (kernels loaded before the fork)
    orders = within_deadline(_orders, name, options)
    assert len(orders) == 16
    for order in orders:
        assert sorted(order) == [10, 11, 12, 13]


def _simulate(name: str, options: dict, n_coflows: int) -> list[float]:
    """Coflows at the largest size the controller accepts on links at the fastest rate, some
    beside one-byte flows, released over a simulated day."""
    sim = Simulator(Fabric(4, MAX_LINK_BPS), make_policy(name, **options), mode="levels")
    big = MAX_FLOW_BYTES
    specs = [
        ([0, 0], [1, 2], [big, big]),
        ([0], [1], [1.0]),
        ([3, 2], [1, 1], [big, 1.0]),
        ([1], [3], [big]),
    ][:n_coflows]
    for cid, (src, dst, size) in enumerate(specs):
        spec = CoflowSpec(cid, np.array(src), np.array(dst), np.array(size, dtype=float))
        sim.at(cid * 86_400.0, lambda spec=spec: sim.release(spec))
    sim.run()
    return [sim.coflows[c].finish_s for c in sorted(sim.coflows)]


# JPAS reorders every period_s of simulated time: a simulated year at the longest period it
# accepts is 8,766 reorders (at the default 1 s it would be 3e7: long, not endless)
SIM_OPTIONS = {"jpas": {"period_s": 3600.0}}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_the_simulator_finishes_flows_of_the_largest_size_under_every_policy(name):
    _simulate(name, SIM_OPTIONS.get(name, {}), 2)  # (kernels loaded here, not in the child)
    finish = within_deadline(_simulate, name, SIM_OPTIONS.get(name, {}), 4)
    year_s = 8 * MAX_FLOW_BYTES / MAX_LINK_BPS
    assert all(math.isfinite(t) for t in finish)
    # port 0 sends two of the largest flows: that takes at least two years
    assert max(finish) >= 2 * year_s * (1 - 1e-9)
