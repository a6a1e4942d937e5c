"""The readings of JPAS and Beamer that their abstracts leave open, as policy options: each
reading changes the order where it should, the defaults are today's schedules, the policies
give the reference's (simulator.reference) schedules under every reading, a job's accuracy
reaches the policy through the REST API (and its database) and through the simulator's HPO
driver, and every reading runs end to end.
"""

from __future__ import annotations

import json
import math
import random
import re
from itertools import product

import numpy as np
import pytest

from controller.api import RestApi
from controller.engine import Engine
from controller.model import (
    ClusterState,
    Coflow,
    Flow,
    Job,
    Stage,
    accuracy_report,
    egress,
    ingress,
)
from controller.policies import (
    PROGRESS_READINGS,
    STAGE_ORDER_READINGS,
    WITHIN_STAGE_READINGS,
    Beamer,
    Jpas,
    _service_bytes,
    _stage_order,
    check_options,
    make_policy,
    parse_option_text,
)
from controller.registry import DatabaseError, Registry
from controller.warm import option_combinations
from simulator import reference
from simulator.engine import Fabric, Simulator
from simulator.hpo import HpoDriver
from workloads.hpo import generate

from .instances import job_stage_ranks
from .test_policies import jobs_example
from .test_stage_loads import mapping_state, tied_instance

BEAMER_READINGS = [
    {"within_stage": w, "stage_order": s}
    for w, s in product(WITHIN_STAGE_READINGS, STAGE_ORDER_READINGS)
]


# ---- the options ------------------------------------------------------------------------------


def test_the_readings_are_declared_options_whose_defaults_are_todays():
    assert Jpas.OPTIONS["progress"].choices == ("iterations", "service", "maif")
    assert Beamer.OPTIONS["within_stage"].choices == ("slowest-first", "arrival")
    assert Beamer.OPTIONS["stage_order"].choices == ("bssi", "srpt")
    assert make_policy("jpas").progress == "iterations"
    beamer = make_policy("beamer")
    assert (beamer.within_stage, beamer.stage_order) == ("slowest-first", "bssi")
    for reading in PROGRESS_READINGS:
        assert make_policy("jpas", progress=reading).progress == reading
    for options in BEAMER_READINGS:
        policy = make_policy("beamer", use_rates=True, **options)
        assert (policy.within_stage, policy.stage_order) == tuple(options.values())
    assert Jpas.OPTIONS["progress"].schema() == {
        "type": "string",
        "default": "iterations",
        "description": Jpas.OPTIONS["progress"].doc,
        "enum": ["iterations", "service", "maif"],
    }
    # the warm-up reorders under every reading
    assert {o["progress"] for o in option_combinations(Jpas)} == set(PROGRESS_READINGS)
    assert len(option_combinations(Beamer)) == 8


@pytest.mark.parametrize(
    ("name", "key", "value", "words"),
    [
        ("jpas", "progress", "bytes", "one of 'iterations', 'service', 'maif', got 'bytes'"),
        ("jpas", "progress", None, "one of 'iterations', 'service', 'maif', got None"),
        ("jpas", "progress", 1, "one of 'iterations', 'service', 'maif', got 1"),
        ("beamer", "within_stage", "fastest-first", "one of 'slowest-first', 'arrival'"),
        ("beamer", "stage_order", ["srpt"], "one of 'bssi', 'srpt', got ['srpt']"),
    ],
)
def test_a_reading_not_declared_is_refused_by_name(name, key, value, words):
    with pytest.raises(ValueError, match=re.escape(f"{name} option {key} must be {words}")):
        check_options(name, {key: value})
    with pytest.raises(ValueError, match=re.escape(f"{name} option {key} must be one of")):
        make_policy(name, **{key: value})


def test_a_reading_on_the_command_line_is_one_of_the_choices():
    assert parse_option_text("jpas", "progress", " Service ") == "service"
    assert parse_option_text("beamer", "stage_order", "srpt") == "srpt"
    with pytest.raises(ValueError, match="must be one of 'bssi', 'srpt', got 'sjf'"):
        parse_option_text("beamer", "stage_order", "sjf")
    with pytest.raises(ValueError, match="progress must be one of"):
        Jpas(progress="fraction")
    with pytest.raises(ValueError, match="within_stage must be one of"):
        Beamer(within_stage="random")


# ---- JPAS: each reading on a constructed state ---------------------------------------------------


def progress_state(indexed: bool = False) -> ClusterState:
    """Jobs sending to h0 with one coflow each, 4 iterations of budget; arrivals 1, 2, 3.

    Job 1: done 1, 100 B per iteration (service 100). Job 2: done 1, 10 B (service 10).
    Job 3: done 3, 10 B (service 30).
    """
    jobs = [
        Job(1, {egress("h1"): 100, ingress("h0"): 100}, 4, 1, arrival_s=1.0),
        Job(2, {egress("h2"): 10, ingress("h0"): 10}, 4, 1, arrival_s=2.0),
        Job(3, {egress("h3"): 10, ingress("h0"): 10}, 4, 3, arrival_s=3.0),
    ]
    coflows = [Coflow(10 * j, [Flow(f"h{j}", "h0", 10)], float(j), j) for j in (1, 2, 3)]
    return ClusterState.build(coflows, jobs, link_bps=8.0, indexed=indexed)


def test_jpas_service_reading_puts_the_job_that_synchronised_fewer_bytes_first():
    # iterations: jobs 1 and 2 tie at 1/4 (by arrival), job 3 at 3/4 is last. service: job 2
    # (10 B), job 3 (30 B, more iterations but fewer bytes), then job 1 (100 B)
    for indexed in (False, True):
        state = progress_state(indexed)
        assert Jpas().schedule(state).order == [10, 20, 30]
        assert Jpas(progress="service").schedule(state).order == [20, 30, 10]
        assert reference.jpas_ranks(state, "service") == ((20,), (30,), (10,))


def test_jpas_service_is_the_bytes_sent_once_each_over_the_iterations_done():
    # a byte leaves one egress port and enters one ingress port: only the egress side counts
    job = Job(1, {egress("a"): 60.0, ingress("b"): 120.0, egress("c"): 60.0}, 9, 3)
    assert _service_bytes(job) == 3 * 120.0
    assert _service_bytes(Job(2, {ingress("b"): 5.0}, 9, 3)) == 0.0
    assert _service_bytes(Job(3, {egress("a"): 5.0}, 9, 0)) == 0.0


def test_jpas_service_reading_ranks_a_jobless_coflow_by_the_bytes_it_sent():
    # a jobless coflow has attained the bytes it sent (here 20 B: after job 2's 10 B, before
    # job 3's 30 B), not the fraction the iterations reading takes (20 of 24: last)
    state = progress_state()
    state.coflows[99] = Coflow(99, [Flow("h4", "h5", 24, remaining_bytes=4)], 0.5)
    assert Jpas(progress="service").schedule(state).order == [20, 99, 30, 10]
    assert Jpas().schedule(state).order == [10, 20, 30, 99]


def maif_state(indexed: bool = False) -> ClusterState:
    """Four jobs of equal progress (2 of 8), arriving 1, 2, 3, 4: job 1 gained 0.01 accuracy
    per iteration between its last two reports, job 2 0.05, job 3 reported once, job 4
    never."""
    jobs = [Job(j, {egress(f"h{j}"): 10, ingress("h0"): 10}, 8, 2, arrival_s=float(j))
            for j in (1, 2, 3, 4)]  # fmt: skip
    for job, reports in zip(jobs, ([(0.50, 0), (0.52, 2)], [(0.40, 1), (0.45, 2)], [(0.3, 2)]),
                            strict=False):  # fmt: skip
        for accuracy, at in reports:
            for name, value in accuracy_report(job, accuracy, at).items():
                setattr(job, name, value)
    coflows = [Coflow(10 * j, [Flow(f"h{j}", "h0", 10)], float(j), j) for j in (1, 2, 3, 4)]
    return ClusterState.build(coflows, jobs, link_bps=8.0, indexed=indexed)


def test_jpas_maif_reading_puts_unmeasured_jobs_then_the_most_gain_first():
    for indexed in (False, True):
        state = maif_state(indexed)
        assert [state.jobs[j].accuracy_gain for j in (3, 4)] == [None, None]
        assert state.jobs[1].accuracy_gain == pytest.approx(0.01)
        assert state.jobs[2].accuracy_gain == pytest.approx(0.05)
        assert Jpas().schedule(state).order == [10, 20, 30, 40]  # equal progress: by arrival
        # jobs 3 and 4 need a measurement (by arrival), then job 2 (0.05), then job 1 (0.01)
        assert Jpas(progress="maif").schedule(state).order == [30, 40, 20, 10]
        assert reference.jpas_ranks(state, "maif") == ((30,), (40,), (20,), (10,))


def test_jpas_maif_reading_ranks_coflows_without_accuracy_with_the_unmeasured():
    # a jobless coflow and a coflow of a job not registered have no accuracy: first, with the
    # unmeasured jobs, by arrival
    state = maif_state()
    state.coflows[99] = Coflow(99, [Flow("h5", "h6", 8)], 3.5)
    state.coflows[77] = Coflow(77, [Flow("h6", "h7", 8)], 0.5, job_id=70)
    assert Jpas(progress="maif").schedule(state).order == [77, 30, 99, 40, 20, 10]


def test_an_accuracy_report_keeps_the_last_two_measurements_at_different_iterations():
    job = Job(1, iteration_budget=9)

    def report(accuracy, at):
        for name, value in accuracy_report(job, accuracy, at).items():
            setattr(job, name, value)

    assert job.accuracy is None and job.accuracy_gain is None
    report(0.2, 1)
    assert (job.accuracy, job.accuracy_iterations, job.previous_accuracy) == (0.2, 1, None)
    assert job.accuracy_gain is None  # one report: no gain yet
    report(0.5, 4)
    assert job.accuracy_gain == pytest.approx(0.1)  # (0.5 - 0.2) / (4 - 1)
    report(0.6, 4)  # the same iterations again (a retried report): replaces the last
    assert (job.previous_accuracy, job.previous_accuracy_iterations) == (0.2, 1)
    assert job.accuracy_gain == pytest.approx(0.4 / 3)
    report(0.55, 6)  # accuracy may fall: a negative gain
    assert job.accuracy_gain == pytest.approx(-0.025)
    report(0.1, 2)  # fewer iterations than the last (the job was set back): afresh
    assert (job.accuracy, job.accuracy_iterations, job.previous_accuracy) == (0.1, 2, None)
    with pytest.raises(ValueError, match="a previous accuracy needs an accuracy measured"):
        Job(2, accuracy=0.5, accuracy_iterations=3, previous_accuracy=0.4,
            previous_accuracy_iterations=3)  # fmt: skip


# ---- JPAS: the paths agree, the default is today's ----------------------------------------------


def random_jobs_state(seed: int, jobless: bool, indexed: bool) -> ClusterState:
    """Jobs of few distinct sizes, iterations, arrivals and accuracy histories (so that every
    key ties somewhere), coflows of them and of an unregistered job (99), and jobless
    coflows if ``jobless``."""
    rng = random.Random(seed)
    jobs = []
    for j in range(1, rng.randint(2, 8)):
        size = rng.choice((1e6 / 3, 1e6 / 3, 2e6 / 3, 10.0))
        hosts = rng.sample(range(5), 2)
        per_iteration = {egress(hosts[0]): size, ingress(hosts[1]): size}
        if rng.random() < 0.3:  # two senders: another sum order of the same bytes
            per_iteration = {egress(hosts[1]): size / 3, ingress(hosts[0]): size,
                             egress(4): 2 * size / 3}  # fmt: skip
        budget = rng.choice((4, 8))
        job = Job(j, per_iteration, budget, rng.randint(0, budget), arrival_s=rng.choice((0, 1)))
        at = 0
        for _ in range(rng.choice((0, 1, 2, 3))):
            at += rng.choice((1, 2))
            accuracy = rng.choice((0.1, 0.3, 0.5, 0.7))
            for name, value in accuracy_report(job, accuracy, at).items():
                setattr(job, name, value)
        jobs.append(job)
    coflows = []
    for cid in range(rng.randint(1, 14)):
        job_id = rng.choice([None if jobless else 99, 99, *(j.job_id for j in jobs)])
        size = float(rng.choice((4, 8)))
        flow = Flow(0, 1, size, size - rng.choice((0, 2, 4)))
        coflows.append(Coflow(cid, [flow], float(rng.choice((0, 1))), job_id))
    return ClusterState.build(coflows, jobs, link_bps=8.0, indexed=indexed)


def jpas_by_definition(state: ClusterState, reading: str) -> list[tuple[int, ...]]:
    """JPAS's ranks as its docstring states each reading: one entry per job and jobless
    coflow, sorted by (key, arrival, kind, id)."""

    def significant(x: float) -> float:
        return float(f"{x:.9g}")

    def job_key(job: Job | None) -> float:
        if reading == "iterations":
            return 0.0 if job is None else min(1.0, job.iterations_done / job.iteration_budget)
        if reading == "service":
            if job is None:
                return 0.0
            sent = sum(v for (_, way), v in job.bytes_per_iteration.items() if way == 0)
            return significant(job.iterations_done * sent)
        if job is None or job.previous_accuracy is None:
            return -math.inf
        gain = (job.accuracy - job.previous_accuracy) / (
            job.accuracy_iterations - job.previous_accuracy_iterations
        )
        return -significant(gain)

    entries, by_job = [], {}
    for coflow in state.active_coflows():
        if coflow.job_id is None:
            if reading == "iterations":
                key = round(coflow.sent_bytes / coflow.size_bytes, 9)
            elif reading == "service":
                key = significant(coflow.sent_bytes)
            else:
                key = -math.inf
            entries.append(((key, coflow.arrival_s, 1, coflow.coflow_id), [coflow.coflow_id]))
        else:
            by_job.setdefault(coflow.job_id, []).append(coflow)
    for job_id, coflows in by_job.items():
        job = state.jobs.get(job_id)
        arrival = job.arrival_s if job else coflows[0].arrival_s
        entries.append(((job_key(job), arrival, 0, job_id), [c.coflow_id for c in coflows]))
    entries.sort(key=lambda entry: entry[0])
    return [tuple(ids) for _, ids in entries]


@pytest.mark.parametrize("reading", PROGRESS_READINGS)
@pytest.mark.parametrize("seed", range(40))
def test_jpas_paths_agree_and_follow_the_definition_under_every_reading(seed, reading):
    # with and without jobless coflows, with the job table where the state keeps one: the
    # ranks of the definition and of the reference
    for jobless, indexed in product((False, True), (False, True)):
        state = random_jobs_state(seed, jobless, indexed)
        expected = jpas_by_definition(state, reading)
        schedule = Jpas(progress=reading).schedule(state)
        assert list(schedule.ranks) == expected
        assert schedule.ranks == reference.jpas_ranks(state, reading)


@pytest.mark.parametrize("seed", range(40))
def test_jpas_default_reading_is_todays_schedule(seed):
    for jobless, indexed in product((False, True), (False, True)):
        state = random_jobs_state(seed, jobless, indexed)
        today = make_policy("jpas").schedule(state)
        assert make_policy("jpas", progress="iterations").schedule(state) == today
        assert list(today.ranks) == jpas_by_definition(state, "iterations")


def test_the_jpas_readings_do_order_the_random_states_differently():
    # guard on the instances above: each reading changes the order of some of them
    differs = dict.fromkeys(("service", "maif"), 0)
    for seed in range(40):
        state = random_jobs_state(seed, False, False)
        today = Jpas().schedule(state).ranks
        for reading in differs:
            differs[reading] += Jpas(progress=reading).schedule(state).ranks != today
    assert min(differs.values()) >= 10, differs


# ---- Beamer: each reading on a constructed state ------------------------------------------------


def test_beamer_arrival_within_stage_drops_the_slowest_job_first_preference():
    # stage 1 (see jobs_example): job 11 has 30 B left, job 12 10 B; job 11's coflow arrives
    # after job 12's here. Slowest-first still puts job 11 first, arrival does not
    state = jobs_example()
    state.coflows[110].arrival_s = 1.15  # after 120 (1.1), before 210 (1.2)
    assert Beamer().schedule(state).ranks == ((99,), (210,), (110, 120))
    assert Beamer(within_stage="arrival").schedule(state).ranks == ((99,), (210,), (120, 110))
    # every coflow a job's of its stage, from arrays: the compiled path
    del state.coflows[99]
    coflows, jobs, stages = state.coflows.values(), state.jobs.values(), state.stages.values()
    fast = ClusterState.build(coflows, jobs, stages, link_bps=8.0, indexed=True)
    active, sparse = fast.active_coflows(), fast.sparse_port_bytes()
    assert job_stage_ranks(fast, active, sparse, None)[0] == ((210,), (110, 120))
    assert Beamer().schedule(fast).ranks == ((210,), (110, 120))
    assert Beamer(within_stage="arrival").schedule(fast).ranks == ((210,), (120, 110))
    assert job_stage_ranks(fast, active, sparse, None, False)[0] == ((210,), (120, 110))


def stage_state(weights, demands, indexed: bool) -> ClusterState:
    """One stage per entry, each one job (its stage's only one, on its last iteration) with
    one coflow of the given bytes per destination host from its own sender; ports at 8
    bit/s; stages arrive in order."""
    jobs, coflows, stages = [], [], []
    for k, (weight, demand) in enumerate(zip(weights, demands, strict=True), start=1):
        flows = [Flow(f"s{k}", dst, size, flow_id=i) for i, (dst, size) in enumerate(demand)]
        per_iteration = {egress(f"s{k}"): float(sum(s for _, s in demand))}
        per_iteration.update({ingress(dst): float(size) for dst, size in demand})
        jobs.append(Job(k, per_iteration, 1, 0, stage_id=k, arrival_s=float(k)))
        coflows.append(Coflow(10 * k, flows, float(k), k))
        stages.append(Stage(k, [k], weight=weight, arrival_s=float(k)))
    return ClusterState.build(coflows, jobs, stages, link_bps=8.0, indexed=indexed)


@pytest.mark.parametrize("indexed", [False, True])
def test_beamer_srpt_stage_order_takes_the_shortest_bottleneck_first(indexed):
    # stage 1 needs 10 s on port p1, stages 2 and 3 6 s each on p2 (12 s together): BSSI puts
    # the largest on the most loaded port (p2) last (the later of the tie), then stage 1 last
    # of the rest: 2, 1, 3. SRPT: 2 and 3 (6 s, by arrival), then 1 (10 s)
    state = stage_state([1, 1, 1], [[("p1", 10)], [("p2", 6)], [("p2", 6)]], indexed)
    assert (state.sparse_port_bytes() is not None) == indexed
    if indexed:  # (every coflow a job's of its stage: the compiled path)
        active, sparse = state.active_coflows(), state.sparse_port_bytes()
        assert job_stage_ranks(state, active, sparse, None, True, True)[0] == (
            (20,), (30,), (10,))  # fmt: skip
    assert Beamer().schedule(state).order == [20, 10, 30]
    assert Beamer(stage_order="srpt").schedule(state).order == [20, 30, 10]
    # weights: BSSI serves the heavy stage first (w/v 10/40 against 1/20 on the shared
    # port), SRPT ignores weights and serves the 20 s stage first
    state = stage_state([10, 1], [[("p", 40)], [("p", 20)]], indexed)
    assert Beamer().schedule(state).order == [10, 20]
    assert Beamer(stage_order="srpt").schedule(state).order == [20, 10]


@pytest.mark.parametrize("indexed", [False, True])
def test_beamer_srpt_ties_within_a_nanosecond_go_by_arrival(indexed):
    # 6 s and 6 s plus a hair: tied, so by arrival (stage 2 first whichever is a hair larger)
    for hair in (1e-12, -1e-12):
        state = stage_state([1, 1, 1], [[("p1", 10)], [("p2", 6 + hair)], [("p3", 6)]], indexed)
        assert Beamer(stage_order="srpt").schedule(state).order == [20, 30, 10]


@pytest.mark.parametrize("indexed", [False, True])
def test_beamer_srpt_refuses_a_ranked_stage_weight_not_above_zero_as_bssi_does(indexed):
    state = stage_state([1, 0.0], [[("p1", 10)], [("p2", 6)]], indexed)
    for options in BEAMER_READINGS:
        with pytest.raises(ValueError, match="weights must be > 0"):
            Beamer(**options).schedule(state)


# ---- Beamer: the paths agree, the default is today's --------------------------------------------


@pytest.mark.parametrize("options", BEAMER_READINGS, ids=lambda o: "-".join(o.values()))
@pytest.mark.parametrize("seed", range(40))
def test_beamer_paths_agree_under_every_reading(seed, options):
    # the general path (coflows without a job or a stage), the path of jobs in their stages
    # (_job_stage_order), from the sparse loads and from the plain mappings, give the
    # reference's schedule
    state = tied_instance(seed)
    for use_rates in (False, True):
        want = reference.beamer_schedule(mapping_state(state), use_rates, **options)
        for built in (state, mapping_state(state)):
            got = Beamer(use_rates=use_rates, **options).schedule(built)
            assert got.ranks == want.ranks
            assert got.flow_rates_bps == want.flow_rates_bps
            assert got.coflow_gamma_s == want.coflow_gamma_s
    state = tied_instance(seed, jobs_only=True)
    active, sparse = state.active_coflows(), state.sparse_port_bytes()
    slowest_first = options["within_stage"] == "slowest-first"
    srpt = options["stage_order"] == "srpt"
    ranks, _ = job_stage_ranks(state, active, sparse, None, slowest_first, srpt)
    if not active:
        return
    assert ranks == tuple(map(tuple, reference.beamer_ranks(state, slowest_first, srpt)))
    assert ranks == _stage_order(state, active, sparse, slowest_first, srpt).ranks
    assert ranks == Beamer(**options).schedule(mapping_state(state)).ranks
    assert ranks == Beamer(**options).schedule(state).ranks


@pytest.mark.parametrize("seed", range(40))
def test_beamer_default_readings_are_todays_schedule(seed):
    for state in (tied_instance(seed), tied_instance(seed, jobs_only=True)):
        for use_rates in (False, True):
            today = make_policy("beamer", use_rates=use_rates).schedule(state)
            spelled = make_policy("beamer", use_rates=use_rates, within_stage="slowest-first",
                                  stage_order="bssi").schedule(state)  # fmt: skip
            assert spelled.ranks == today.ranks
            assert spelled.flow_rates_bps == today.flow_rates_bps
            assert spelled.coflow_gamma_s == today.coflow_gamma_s


def test_the_beamer_readings_do_order_the_random_states_differently():
    # guard on the instances above: each reading changes the order of some of them
    differs = {"within_stage": 0, "stage_order": 0}
    for seed in range(40):
        state = tied_instance(seed, jobs_only=True)
        today = Beamer().schedule(state).ranks
        differs["within_stage"] += Beamer(within_stage="arrival").schedule(state).ranks != today
        differs["stage_order"] += Beamer(stage_order="srpt").schedule(state).ranks != today
    assert min(differs.values()) >= 5, differs


# ---- accuracy through the REST API and the registry's file -------------------------------------

HOSTS = {"h1": "10.0.0.1", "h2": "10.0.0.2", "h3": "10.0.0.3", "h4": "10.0.0.4"}
JSON = {"Content-Type": "application/json"}


def call(api, method, path, body=None):
    raw = json.dumps(body).encode() if body is not None else b""
    return api.handle(method, path, raw, JSON)


def jobs_api(path: str = ":memory:") -> RestApi:
    """Three jobs of 8 iterations, each with a one-flow template to h4 (an implicit coflow:
    1 MB, job 3's 0.3 MB), registered one after the other."""
    api = RestApi(Engine(Registry(path, hosts=HOSTS), "fair"))
    for j in (1, 2, 3):
        flow = {"src": f"h{j}", "dst": "h4", "bytes": 3e5 if j == 3 else 1e6}
        body = {"job_id": j, "iteration_budget": 8, "flows": [flow]}
        assert call(api, "POST", "/api/jobs", body)[0] == 201
    return api


def test_a_progress_report_with_an_accuracy_is_kept_and_ranks_jobs_under_maif():
    api = jobs_api()
    status, policy = call(api, "PUT", "/api/policy", {"name": "jpas",
                                                      "options": {"progress": "maif"}})  # fmt: skip
    assert status == 200 and policy["options"] == {"progress": "maif"}
    assert policy["option_specs"]["jpas"]["progress"]["enum"] == list(PROGRESS_READINGS)
    reports = {1: [(1, 0.2), (2, 0.22)], 2: [(1, 0.1), (3, 0.3)], 3: [(2, 0.5)]}
    for job_id, steps in reports.items():
        for done, accuracy in steps:
            body = {"iterations_done": done, "accuracy": accuracy}
            status, job = call(api, "POST", f"/api/jobs/{job_id}/progress", body)
            assert status == 200 and job["accuracy"] == accuracy, job
    job = call(api, "GET", "/api/jobs/2")[1]
    assert (job["accuracy"], job["accuracy_iterations"]) == (0.3, 3)
    assert (job["previous_accuracy"], job["previous_accuracy_iterations"]) == (0.1, 1)
    # a report without an accuracy keeps the last ones
    assert call(api, "POST", "/api/jobs/2/progress", {"iterations_done": 4})[1]["accuracy"] == 0.3
    state = api.registry.cluster_state(1e9)
    assert state.jobs[2].accuracy_gain == pytest.approx(0.1)
    assert state.jobs[1].accuracy_gain == pytest.approx(0.02)
    assert state.jobs[3].accuracy_gain is None
    # job 3 (one report) first, then job 2 (0.1 per iteration), then job 1 (0.02)
    api.engine.reorder()  # (what the reorder loop does after a change)
    order = call(api, "GET", "/api/order")[1]["order"]
    assert [entry["job_id"] for entry in order] == [3, 2, 1]
    # the other readings from the same registry: equal budgets, iterations 2, 4, 2 (jobs 1
    # and 3 tie: by arrival); bytes synchronised 2 MB, 4 MB, 0.6 MB
    for reading, jobs in (("iterations", [1, 3, 2]), ("service", [3, 1, 2])):
        body = {"name": "jpas", "options": {"progress": reading}}
        assert call(api, "PUT", "/api/policy", body)[0] == 200
        api.engine.reorder()
        assert [e["job_id"] for e in call(api, "GET", "/api/order")[1]["order"]] == jobs
    # a replaced job keeps its accuracy reports, as its iterations
    assert call(api, "PUT", "/api/jobs/2", {"iteration_budget": 9})[1]["previous_accuracy"] == 0.1


@pytest.mark.parametrize(
    ("accuracy", "words"),
    [
        (1.5, "accuracy: must be in [0, 1], got 1.5"),
        (-0.1, "accuracy: must be in [0, 1], got -0.1"),
        ("0.5", "accuracy: must be a number, got '0.5'"),
        (True, "accuracy: must be a number, got True"),
        (None, "accuracy: must not be null"),
        ([0.5], "accuracy: must be a number, got [0.5]"),
    ],
)
def test_a_progress_report_with_an_accuracy_out_of_range_is_refused_in_one_line(accuracy, words):
    api = jobs_api()
    call(api, "POST", "/api/jobs/1/progress", {"iterations_done": 1, "accuracy": 0.4})
    before = api.registry.records["jobs"][1]
    body = {"iterations_done": 2, "accuracy": accuracy}
    status, payload = call(api, "POST", "/api/jobs/1/progress", body)
    assert status == 400
    message = payload["error"]["message"]
    assert message.startswith(words) and "\n" not in message
    assert payload["error"]["field"] == "accuracy"
    assert api.registry.records["jobs"][1] is before  # nothing changed
    # NaN (Python's JSON reads it) and infinity too
    for raw in (b'{"iterations_done": 2, "accuracy": NaN}',
                b'{"iterations_done": 2, "accuracy": Infinity}'):  # fmt: skip
        status, payload = api.handle("POST", "/api/jobs/1/progress", raw, JSON)
        assert status == 400 and payload["error"]["field"] == "accuracy"


def test_a_reading_that_is_not_a_choice_is_refused_by_the_rest_api():
    api = jobs_api()
    body = {"name": "beamer", "options": {"stage_order": "sjf"}}
    status, payload = call(api, "PUT", "/api/policy", body)
    assert status == 400
    words = "beamer option stage_order must be one of 'bssi', 'srpt', got 'sjf'"
    assert words in payload["error"]["message"]
    for options in BEAMER_READINGS:
        body = {"name": "beamer", "options": options}
        assert call(api, "PUT", "/api/policy", body)[0] == 200
        assert len(api.engine.reorder().schedule.order) == 3


def test_the_accuracy_reports_are_kept_in_the_registry_s_file(tmp_path):
    path = str(tmp_path / "registry.sqlite")
    api = jobs_api(path)
    for done, accuracy in ((1, 0.25), (3, 0.5)):
        body = {"iterations_done": done, "accuracy": accuracy}
        assert call(api, "POST", "/api/jobs/1/progress", body)[0] == 200
    written = api.registry.records["jobs"][1]
    api.registry.close()
    again = Registry(path, hosts=HOSTS)
    assert again.records["jobs"][1] == written
    assert again.cluster_state(1e9).jobs[1].accuracy_gain == pytest.approx(0.125)
    assert again.records["jobs"][2].accuracy is None
    again.close()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"accuracy": 2.0}, "stored job 1: accuracy: must be in [0, 1], got 2"),
        ({"previous_accuracy": "x"}, "stored job 1: previous_accuracy: must be a number"),
        ({"accuracy_iterations": -1}, "stored job 1: accuracy_iterations: must be in 0.."),
        ({"previous_accuracy_iterations": 3},
         "stored job 1: previous_accuracy: needs an accuracy measured at more iterations"),
        ({"accuracy": None}, "stored job 1: previous_accuracy: needs an accuracy measured"),
    ],
)  # fmt: skip
def test_a_stored_accuracy_the_api_would_refuse_is_refused_when_the_file_opens(
    tmp_path, change, words
):
    import sqlite3

    path = str(tmp_path / "registry.sqlite")
    api = jobs_api(path)
    for done, accuracy in ((1, 0.25), (3, 0.5)):
        call(api, "POST", "/api/jobs/1/progress", {"iterations_done": done, "accuracy": accuracy})
    api.registry.close()
    with sqlite3.connect(path) as db:
        (body,) = db.execute("SELECT body FROM records WHERE kind='jobs' AND id=1").fetchone()
        data = {**json.loads(body), **change}
        db.execute("UPDATE records SET body=? WHERE kind='jobs' AND id=1", (json.dumps(data),))
    db.close()
    with pytest.raises(DatabaseError) as err:
        Registry(path, hosts=HOSTS)
    assert str(err.value).startswith(f"{path}: {words}") and "\n" not in str(err.value)


# ---- the simulator: accuracy reported, every reading end to end ----------------------------------


def tiny_run(policy, seed: int = 3) -> tuple[dict, HpoDriver]:
    """A small simulated HPO run (as experiments/reproduce.py's hpo_summary) under ``policy``."""
    sim = Simulator(Fabric(7, 1e9), policy)
    tasks = generate(7, 2, seed=seed, configs_per_task=4, eta=2, min_iterations=2, scale=50,
                     mean_interarrival_s=0.5)  # fmt: skip
    driver = HpoDriver(sim, tasks)
    sim.run()
    return driver.core.summary(sim.now_s), driver


READINGS = [("jpas", {"progress": r}) for r in PROGRESS_READINGS] + [
    ("beamer", options) for options in BEAMER_READINGS
]


@pytest.mark.parametrize(("name", "options"), READINGS, ids=lambda v: str(v))
def test_the_simulator_runs_every_reading_to_the_end(name, options):
    summary, driver = tiny_run(make_policy(name, **options))
    assert driver.core.finished and summary["stages"] == driver.n_stages
    assert summary["sct_s"]["count"] == driver.n_stages
    assert all(math.isfinite(r["jct_s"]) for r in driver.job_rows())


@pytest.mark.parametrize("name", ["jpas", "beamer"])
def test_the_simulators_default_readings_run_as_today(name):
    # the options spelled at their defaults give the run without them, figure for figure
    defaults = {key: spec.default for key, spec in make_policy(name).OPTIONS.items()}
    assert tiny_run(make_policy(name, **defaults))[0] == tiny_run(make_policy(name))[0]


def test_the_simulators_jobs_carry_the_accuracy_of_every_iteration():
    # at every reorder each running job's accuracy is its configuration's after the
    # iterations trained so far, and its gain the last iteration's; maif ranks as the
    # reference does on those jobs
    seen = {"measured": 0, "reorders": 0}

    class Watch(Jpas):
        def schedule(self, state):
            driver = self.driver
            for job_id, job in state.jobs.items():
                run = driver.core.jobs[job_id]
                if run.done == 0:
                    assert job.accuracy is None
                    continue
                curve = driver.tasks[run.task_id].curves[run.config]
                trained = driver.core.configs[(run.task_id, run.config)].trained
                assert (job.accuracy, job.accuracy_iterations) == (curve.accuracy(trained),
                                                                   run.done)  # fmt: skip
                if run.done >= 2:
                    assert job.previous_accuracy == curve.accuracy(trained - 1)
                    seen["measured"] += 1
            schedule = super().schedule(state)
            assert schedule.ranks == reference.jpas_ranks(state, "maif")
            seen["reorders"] += 1
            return schedule

    policy = Watch(progress="maif")
    sim = Simulator(Fabric(7, 1e9), policy)
    tasks = generate(7, 2, seed=3, configs_per_task=4, eta=2, min_iterations=2, scale=50,
                     mean_interarrival_s=0.5)  # fmt: skip
    policy.driver = HpoDriver(sim, tasks)
    sim.run()
    assert seen["reorders"] > 20 and seen["measured"] > 10, seen


def test_the_simulators_jpas_schedules_equal_the_reference_under_every_reading():
    # the simulator's states (coflow keys packed, the job table) against the same jobs and
    # coflows as plain mappings, and the reference on those, at every reorder
    checked = []
    for reading in PROGRESS_READINGS:

        class Both(Jpas):
            def schedule(self, state):
                schedule = super().schedule(state)
                assert state.coflow_keys() is not None and state.job_table() is not None
                plain = mapping_state(state)
                assert schedule.ranks == Jpas(progress=self.progress).schedule(plain).ranks
                assert schedule.ranks == reference.jpas_ranks(plain, self.progress)
                checked.append(len(schedule.order))
                return schedule

        tiny_run(Both(progress=reading), seed=5)
    assert len(checked) > 60 and max(checked) > 3


def test_a_job_table_gather_is_not_what_the_other_readings_read():
    # the job table holds no bytes or accuracy: under service and maif the policy reads
    # each job's key from its object, so a table whose numbers lag the jobs changes nothing
    state = maif_state(indexed=True)
    assert state.job_table() is not None
    state.jobs[1].iterations_done = 7  # (the table still says 2)
    expected = jpas_by_definition(state, "service")
    assert list(Jpas(progress="service").schedule(state).ranks) == expected
    np.testing.assert_array_equal(state.job_table().numbers["done"][:4], [2, 2, 2, 2])
