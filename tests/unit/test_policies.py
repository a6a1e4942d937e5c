"""Every policy on hand-worked examples, plus properties every policy must have."""

from __future__ import annotations

import copy
import inspect
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import ClusterState, Coflow, Flow, Job, Stage, egress, ingress
from controller.policies import (
    POLICIES,
    Beamer,
    FifoLM,
    Jpas,
    Sincronia,
    Varys,
    check_options,
    make_policy,
    parse_option_text,
)
from controller.schedule import N_LEVELS, coflow_levels
from simulator import reference

from .instances import BYTE_PER_S, state_of


def three_coflows() -> ClusterState:
    """A h1->h3 (4 B), B h2->h3 (2 B), C h1->h2 (3 B), arriving A, B, C; 1 B/s ports."""
    return state_of(
        [
            Coflow(1, [Flow("h1", "h3", 4)], arrival_s=0.0),
            Coflow(2, [Flow("h2", "h3", 2)], arrival_s=0.1),
            Coflow(3, [Flow("h1", "h2", 3)], arrival_s=0.2),
        ]
    )


def test_fair_is_one_rank_in_arrival_order():
    assert make_policy("fair").schedule(three_coflows()).ranks == ((1, 2, 3),)


def test_sincronia_hand_example():
    # See test_bssi.test_multi_port_hand_example: B, C, then A (total CCT 2+3+7=12, optimal).
    assert Sincronia().schedule(three_coflows()).order == [2, 3, 1]


def test_varys_sebf_and_madd():
    # Bottlenecks: A 4 s, B 2 s, C 3 s -> B, C, A. MADD: B alone on h2.out/h3.in gets its
    # whole 8 bit/s for 2 s; C on the free h1.out/h2.in gets 8 bit/s; A meets h1.out with no
    # capacity left, so it gets no cap and waits at the lowest rank.
    schedule = Varys().schedule(three_coflows())
    assert schedule.order == [2, 3, 1]
    assert dict(schedule.flow_rates_bps) == {(2, 0): 8.0, (3, 0): 8.0}


def test_varys_equal_bottlenecks_tie_whatever_the_float_noise():
    # A's bytes left are one float step above B's (the noise of counting bytes served): their
    # bottlenecks are equal, so they go by arrival, plain and indexed; a real difference (a
    # byte more: a second at the 8 bit/s ports) still orders them
    from controller.model import ClusterState

    def state(extra_bytes):
        coflows = [
            Coflow(1, [Flow("h1", "h2", np.nextafter(3e6, 4e6) + extra_bytes)], arrival_s=0.0),
            Coflow(2, [Flow("h3", "h4", 3e6)], arrival_s=0.1),
        ]
        plain = state_of(coflows)
        fast = ClusterState.build(
            plain.coflows.values(), (), (), plain.hosts.values(), indexed=True,
            link_bps=plain.link_bps,
        )  # fmt: skip
        return plain, fast

    for built in state(0.0):
        assert Varys().schedule(built).order == [1, 2]
    for built in state(1.0):
        assert Varys().schedule(built).order == [2, 1]


def test_varys_madd_slows_flows_to_the_bottleneck():
    # One coflow, two flows from h1: 6 B to h2 and 2 B to h3. Gamma = 8 B on h1.out = 8 s,
    # so the flows get 6 and 2 B/s: both end together and h1.out is full.
    state = state_of([Coflow(1, [Flow("h1", "h2", 6), Flow("h1", "h3", 2)])])
    state.link_bps = 64.0  # 8 B/s
    rates = Varys().schedule(state).flow_rates_bps
    assert rates == {(1, 0): pytest.approx(48.0), (1, 1): pytest.approx(16.0)}


def test_fifo_lm_demotes_heavy_coflows_to_a_shared_last_rank():
    state = state_of(
        [
            Coflow(1, [Flow("a", "b", 100, remaining_bytes=40)], arrival_s=0),  # sent 60
            Coflow(2, [Flow("c", "d", 10)], arrival_s=1),  # sent 0
            Coflow(3, [Flow("e", "f", 80, remaining_bytes=10)], arrival_s=2),  # sent 70
        ]
    )
    assert FifoLM(heavy_threshold_bytes=50).schedule(state).ranks == ((2,), (1, 3))
    # heavy means more than the threshold: 60 sent is not
    assert FifoLM(heavy_threshold_bytes=60).schedule(state).ranks == ((1,), (2,), (3,))


def test_fifo_lm_percentile_threshold_needs_history():
    state = state_of(
        [
            Coflow(1, [Flow("a", "b", 100, remaining_bytes=40)], arrival_s=0),
            Coflow(2, [Flow("c", "d", 10)], arrival_s=1),
            Coflow(3, [Flow("e", "f", 80, remaining_bytes=10)], arrival_s=2),
        ]
    )
    # Sizes seen: 10, 80, 100; the 90th percentile is 100 B, nobody has sent more: pure FIFO.
    policy = FifoLM(min_history=3)
    assert policy.schedule(state).ranks == ((1,), (2,), (3,))
    assert policy.threshold_bytes() == 100
    # Below min_history nobody is demoted, whatever was sent.
    assert FifoLM(min_history=4).schedule(state).order == [1, 2, 3]


def test_fifo_lm_threshold_uses_sizes_seen_before():
    policy = FifoLM(heavy_percentile=50, min_history=2)
    policy.schedule(state_of([Coflow(1, [Flow("a", "b", 10)]), Coflow(2, [Flow("a", "b", 20)])]))
    later = [
        Coflow(3, [Flow("a", "b", 30, remaining_bytes=5)], arrival_s=5),  # sent 25
        Coflow(4, [Flow("c", "d", 30, remaining_bytes=25)], arrival_s=6),  # sent 5
    ]
    # Sizes seen: 10, 20 (coflows that left) and 30, 30: the median is 20 B, coflow 3 is heavy.
    assert policy.schedule(state_of(copy.deepcopy(later))).ranks == ((4,), (3,))
    # A policy that saw only 30 and 30 has a 30 B threshold: plain FIFO.
    fresh = FifoLM(heavy_percentile=50, min_history=2)
    assert fresh.schedule(state_of(later)).ranks == ((3,), (4,))


def jobs_example() -> ClusterState:
    """Three jobs in two stages sending to h0, plus a jobless coflow; 1 B/s ports.

    Stage 1: job 11 (h1->h0, 10 B/iter, done 1 of 4, one 10 B coflow in flight: 30 B left)
             job 12 (h2->h0, 10 B/iter, done 1 of 2, one 10 B coflow in flight: 10 B left)
    Stage 2: job 21 (h3->h0, 10 B/iter, done 0 of 2, one 10 B coflow in flight: 20 B left)
    Coflow 99 (h4->h5, no job): 8 of 16 B sent.
    """
    jobs = [
        Job(
            11,
            {egress("h1"): 10, ingress("h0"): 10},
            iteration_budget=4,
            iterations_done=1,
            stage_id=1,
            arrival_s=0.0,
        ),
        Job(
            12,
            {egress("h2"): 10, ingress("h0"): 10},
            iteration_budget=2,
            iterations_done=1,
            stage_id=1,
            arrival_s=0.0,
        ),
        Job(
            21,
            {egress("h3"): 10, ingress("h0"): 10},
            iteration_budget=2,
            iterations_done=0,
            stage_id=2,
            arrival_s=0.5,
        ),
    ]
    coflows = [
        Coflow(110, [Flow("h1", "h0", 10)], arrival_s=1.0, job_id=11),
        Coflow(120, [Flow("h2", "h0", 10)], arrival_s=1.1, job_id=12),
        Coflow(210, [Flow("h3", "h0", 10)], arrival_s=1.2, job_id=21),
        Coflow(99, [Flow("h4", "h5", 16, remaining_bytes=8)], arrival_s=3.0),
    ]
    stages = [Stage(1, [11, 12], arrival_s=0.0), Stage(2, [21], arrival_s=0.5)]
    return state_of(coflows, jobs, stages)


def test_jpas_least_progress_first():
    # Progress: job 21 0/2 = 0, job 11 1/4 = 0.25, job 12 1/2 = 0.5, coflow 99 (jobless) 8/16 =
    # 0.5 but it arrived after job 12, so it comes last.
    schedule = Jpas().schedule(jobs_example())
    assert schedule.ranks == ((210,), (110,), (120,), (99,))
    assert Jpas().reorder_period_s == 1.0


def test_jpas_coflows_of_a_job_share_its_rank():
    state = jobs_example()
    state.coflows[111] = Coflow(111, [Flow("h0", "h1", 5)], arrival_s=1.5, job_id=11)
    assert Jpas().schedule(state).ranks[1] == (110, 111)


def test_jpas_equal_progress_ties_by_arrival_despite_float_noise():
    # two jobless coflows that sent the same bytes, one counted a hair off (as a simulator's
    # float sums give): they tie on progress and go by arrival, not by the noise
    state = state_of(
        [
            Coflow(1, [Flow("h0", "h1", 3000, remaining_bytes=1000.0)], arrival_s=0.0),
            Coflow(2, [Flow("h2", "h3", 3000, remaining_bytes=1000.0 + 1e-9)], arrival_s=1.0),
        ]
    )
    assert list(Jpas().schedule(state).order) == [1, 2]


def test_beamer_orders_stages_and_slowest_job_first():
    # Stage demands: stage 1 h0.in 40, h1.out 30, h2.out 10; stage 2 h0.in 20, h3.out 20;
    # coflow 99 (a stage of its own) h4.out 8, h5.in 8. BSSI: h0.in (60) is the bottleneck,
    # stage 1 has the smaller w/v (1/40 < 1/20) and goes last; then h0.in/h3.out (20) hold only
    # stage 2, placed next-to-last; coflow 99 goes first. Inside stage 1, job 11 (30 B left)
    # comes before job 12 (10 B left): the stage ends with its slowest job.
    schedule = Beamer().schedule(jobs_example())
    assert schedule.ranks == ((99,), (210,), (110, 120))


def test_beamer_differs_from_sincronia_when_stages_matter():
    # Coflow by coflow, 110, 120 and 210 are equal (10 B on h0.in each): Sincronia keeps arrival
    # order. Beamer sees that stage 2 needs 20 B in all and stage 1 40 B, and serves stage 2 first.
    state = jobs_example()
    del state.coflows[99]
    assert Sincronia().schedule(state).order == [110, 120, 210]
    assert Beamer().schedule(state).order == [210, 110, 120]


def test_beamer_counts_jobs_of_a_stage_that_are_computing():
    # Job 12 has no coflow in flight but still 1 iteration to do: stage 1 still carries its
    # 10 B of future traffic on h0.in (30 + 10 = 40 B vs stage 2's 20 B).
    state = jobs_example()
    del state.coflows[120]
    del state.coflows[99]
    state.jobs[12].iterations_done = 1
    state.jobs[12].iteration_budget = 2
    assert Beamer().schedule(state).order == [210, 110]


def test_beamer_without_stages_is_sincronia():
    from .test_policies import three_coflows as make

    assert Beamer().schedule(make()).order == Sincronia().schedule(make()).order


def test_beamer_rates_are_madd_along_its_order():
    schedule = Beamer(use_rates=True).schedule(three_coflows())
    assert schedule.order == [2, 3, 1]
    assert dict(schedule.flow_rates_bps) == {(2, 0): 8.0, (3, 0): 8.0}


def test_unknown_policy_and_options_name_the_problem():
    with pytest.raises(ValueError, match="unknown policy 'sjf'; choose from beamer, fair"):
        make_policy("sjf")
    with pytest.raises(ValueError, match=r"policy 'jpas' has no option 'colour' \(options: per"):
        make_policy("jpas", colour="red")
    with pytest.raises(ValueError, match="period_s"):
        make_policy("jpas", period_s=0)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_declared_options_are_the_constructors_keywords_with_its_defaults(name):
    init = POLICIES[name].__init__
    parameters = {} if init is object.__init__ else inspect.signature(init).parameters
    keywords = {k: p.default for k, p in parameters.items() if k != "self"}
    declared = {k: spec.default for k, spec in POLICIES[name].OPTIONS.items()}
    assert declared == keywords


@pytest.mark.parametrize(
    ("name", "options", "words"),
    [
        (
            "fifo-lm",
            {"heavy_threshold_bytes": "abc"},
            "must be a number in (0, 1.61575e+21] or null",
        ),
        ("fifo-lm", {"heavy_percentile": 101}, "must be a number in (0, 100]"),
        ("fifo-lm", {"heavy_percentile": 0}, "must be a number in (0, 100]"),
        ("fifo-lm", {"min_history": 2.5}, "must be an integer in [1, 1e+06]"),
        ("jpas", {"period_s": True}, "must be a number in [0.01, 3600], got True"),
        ("jpas", {"period_s": float("nan")}, "must be a number in [0.01, 3600]"),
        ("beamer", {"use_rates": "False"}, "must be true or false, got 'False'"),
        ("varys", {"use_rates": 1}, "must be true or false"),
    ],
)
def test_options_of_the_wrong_type_or_range_are_refused_by_name(name, options, words):
    with pytest.raises(ValueError, match=re.escape(f"{name} option {next(iter(options))} {words}")):
        check_options(name, options)


def test_command_line_option_text_takes_the_declared_type():
    assert parse_option_text("varys", "use_rates", "False") is False
    assert parse_option_text("beamer", "use_rates", "true") is True
    assert parse_option_text("fifo-lm", "heavy_threshold_bytes", "null") is None
    assert parse_option_text("fifo-lm", "min_history", "3") == 3
    assert parse_option_text("jpas", "period_s", "0.5") == 0.5
    assert make_policy("varys", use_rates=False).use_rates is False
    with pytest.raises(ValueError, match="must be an integer in \\[1, 1e\\+06\\], got '2.5'"):
        parse_option_text("fifo-lm", "min_history", "2.5")


# ---- properties every policy must have ------------------------------------------------------


@st.composite
def cluster_states(draw) -> ClusterState:
    n_hosts = draw(st.integers(2, 6))
    n_stages = draw(st.integers(0, 3))
    n_jobs = draw(st.integers(0, 5))
    jobs, stages = [], [Stage(s, [], arrival_s=float(s)) for s in range(n_stages)]
    for j in range(n_jobs):
        stage = draw(st.sampled_from([None, *range(n_stages)]))
        host = draw(st.integers(0, n_hosts - 1))
        budget = draw(st.integers(1, 10))
        jobs.append(
            Job(
                j,
                {egress(host): draw(st.integers(0, 50))},
                budget,
                draw(st.integers(0, budget)),
                stage,
                arrival_s=float(j),
            )
        )
        if stage is not None:
            stages[stage].job_ids.append(j)
    coflows = []
    for k in range(draw(st.integers(0, 12))):
        flows = []
        for _ in range(draw(st.integers(1, 3))):
            src, dst = draw(
                st.lists(st.integers(0, n_hosts - 1), min_size=2, max_size=2, unique=True)
            )
            size = draw(st.integers(0, 100))
            flows.append(Flow(src, dst, size, remaining_bytes=draw(st.integers(0, size))))
        job = draw(st.sampled_from([None, *range(n_jobs)]))
        coflows.append(
            Coflow(
                k,
                flows,
                arrival_s=float(draw(st.integers(0, 5))),
                job_id=job,
                weight=float(draw(st.integers(1, 3))),
            )
        )
    return ClusterState.build(coflows, jobs, stages, link_bps=BYTE_PER_S)


@settings(max_examples=60, deadline=None)
@given(cluster_states(), st.sampled_from(sorted(POLICIES)))
def test_schedule_is_a_deterministic_permutation_of_active_coflows(state, name):
    active = {c.coflow_id for c in state.active_coflows()}
    before = copy.deepcopy(state)
    schedule = make_policy(name).schedule(state)
    assert sorted(schedule.order) == sorted(active)
    assert len(schedule.order) == len(active)
    assert all(schedule.ranks), "no empty rank"
    # deterministic: a fresh instance on a copy gives the same schedule; the state is untouched
    assert make_policy(name).schedule(copy.deepcopy(state)) == schedule
    assert state == before
    levels = coflow_levels(schedule)
    assert set(levels) == active
    assert all(0 <= level < N_LEVELS for level in levels.values())


@settings(max_examples=60, deadline=None)
@given(cluster_states(), st.sampled_from(["varys", "beamer"]))
def test_rates_fit_port_capacities(state, name):
    schedule = make_policy(name, use_rates=True).schedule(state)
    used: dict = {}
    for (coflow_id, flow_id), rate in schedule.flow_rates_bps.items():
        assert rate > 0
        flow = next(f for f in state.coflows[coflow_id].flows if f.flow_id == flow_id)
        for port in (egress(flow.src), ingress(flow.dst)):
            used[port] = used.get(port, 0.0) + rate
    assert all(total <= BYTE_PER_S * (1 + 1e-9) for total in used.values())


def _jpas_by_key(state: ClusterState) -> list[tuple[int, ...]]:
    """JPAS's ranks as its definition states them: one entry per job (registered: its progress
    and arrival; unregistered: 0 and its first coflow's arrival) and per jobless coflow (bytes
    sent over size, rounded), stably sorted by (progress, arrival, kind, id)."""
    entries, by_job = [], {}
    for coflow in state.active_coflows():
        if coflow.job_id is None:
            sent = round(coflow.sent_bytes / coflow.size_bytes, 9) if coflow.size_bytes else 1.0
            entries.append(((sent, coflow.arrival_s, 1, coflow.coflow_id), [coflow.coflow_id]))
        else:
            by_job.setdefault(coflow.job_id, []).append(coflow)
    for job_id, coflows in by_job.items():
        job = state.jobs.get(job_id)
        key = (job.progress, job.arrival_s) if job else (0.0, coflows[0].arrival_s)
        entries.append(((*key, 0, job_id), [c.coflow_id for c in coflows]))
    entries.sort(key=lambda entry: entry[0])
    return [tuple(ids) for _, ids in entries]


@given(st.integers(0, 10_000), st.booleans())
@settings(max_examples=80, deadline=None)
def test_jpas_ranks_follow_its_key_with_every_kind_of_tie(seed, jobless):
    # equal progress and arrival between jobs, jobs and jobless coflows and unregistered jobs:
    # the tie goes by kind, then id, never by anything else, as in the reference
    import random

    rng = random.Random(seed)
    jobs = [
        Job(j, iteration_budget=4, iterations_done=rng.choice((0, 2, 2, 4)),
            arrival_s=float(rng.choice((0, 1))))
        for j in range(1, rng.randint(1, 6))
    ]  # fmt: skip
    coflows = []
    for cid in range(rng.randint(1, 14)):
        job_id = rng.choice([None if jobless else 99, 99, *(j.job_id for j in jobs)])
        size = float(rng.choice((4, 8)))
        flow = Flow(0, 1, size, size - rng.choice((0, 2, 4)))
        coflows.append(Coflow(cid, [flow], float(rng.choice((0, 1))), job_id))
    state = ClusterState.build(coflows, jobs)
    assert list(Jpas().schedule(state).ranks) == _jpas_by_key(state)
    assert Jpas().schedule(state).ranks == reference.jpas_ranks(state)


def test_fifo_lm_keeps_every_size_seen_in_order_however_many_arrive_at_once():
    # many new coflows at one call are merged into the sorted sizes, a few are inserted; the
    # threshold is the percentile of every size seen either way
    import random

    from controller.metrics import nearest_rank_index

    rng = random.Random(3)
    coflows = [Coflow(k, [Flow("a", "b", rng.randint(1, 10_000))], arrival_s=k)
               for k in range(300)]  # fmt: skip
    policy = FifoLM(heavy_percentile=75, min_history=1)
    for batch in (coflows[:200], coflows[200:203], coflows[203:]):
        policy.schedule(state_of(batch))
    sizes = sorted(c.size_bytes for c in coflows)
    assert policy._sizes == sizes
    assert policy.threshold_bytes() == sizes[nearest_rank_index(len(sizes), 75)]
