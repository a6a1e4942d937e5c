"""Registry validation, cascades, implicit job coflows and SQLite persistence."""

from __future__ import annotations

import copy

import pytest

from controller.api import ApiError
from controller.policies import make_policy
from controller.registry import IMPLICIT_COFLOW_BASE, Registry, RegistryError

from .instances import VersionCheck, assert_table_is_the_jobs

HOSTS = {"h1": "10.0.0.1", "h2": "10.0.0.2", "h3": "10.0.0.3"}


def job_body(job_id=1, **extra):
    body = {
        "job_id": job_id,
        "flows": [{"src": "h1", "dst": "h2", "bytes": 1e6}],
        "tcp_ports": [5001],
        "iteration_budget": 10,
    }
    body.update(extra)
    return body


@pytest.fixture
def registry():
    ticks = iter(range(1000))
    return Registry(":memory:", hosts=HOSTS, clock=lambda: float(next(ticks)))


@pytest.mark.parametrize(
    ("kind", "body", "field", "words"),
    [
        ("jobs", [1, 2], "body", "must be a JSON object"),
        ("jobs", job_body(colour="red"), "colour", "unknown field"),
        ("jobs", job_body(job_id="x"), "job_id", "must be an integer"),
        ("jobs", job_body(job_id=-1), "job_id", "must be in 0.."),
        ("jobs", job_body(job_id=True), "job_id", "must be an integer"),
        ("jobs", job_body(tcp_ports=[70000]), "tcp_ports[0]", "must be in 1..65535"),
        ("jobs", job_body(tcp_ports=[5, 5]), "tcp_ports", "duplicates"),
        ("jobs", job_body(iteration_budget=0), "iteration_budget", "must be in 1.."),
        ("jobs", job_body(iterations_done=11), "iterations_done", "<= iteration_budget"),
        ("jobs", job_body(stage_id=9), "stage_id", "no stage 9 is registered"),
        (
            "jobs",
            job_body(flows=[{"src": "h1", "dst": "h1", "bytes": 1}]),
            "flows[0].dst",
            "must differ",
        ),
        (
            "jobs",
            job_body(flows=[{"src": "h7", "dst": "h1", "bytes": 1}]),
            "flows[0].src",
            "IPv4 address as a string or one of h1, h2, h3",
        ),
        (
            "jobs",
            job_body(flows=[{"src": "h1", "dst": "h2", "bytes": -1}]),
            "flows[0].bytes",
            "must be in [0, 6.31152e+18], got -1",
        ),
        ("jobs", job_body(flows=[{"src": "h1", "dst": "h2"}]), "flows[0].bytes", "required"),
        ("jobs", job_body(weight=0), "weight", "in [1e-06, 1e+06]"),
        ("coflows", {"coflow_id": 1}, "flows", "required"),
        ("coflows", {"coflow_id": 1, "flows": []}, "flows", "non-empty"),
        (
            "coflows",
            {"coflow_id": 1, "job_id": 4, "flows": [{"src": "h1", "dst": "h2", "bytes": 5}]},
            "job_id",
            "no job 4",
        ),
        (
            "coflows",
            {
                "coflow_id": 1,
                "flows": [{"src": "h1", "dst": "h2", "bytes": 5, "remaining_bytes": 6}],
            },
            "flows[0].remaining_bytes",
            "<= bytes",
        ),
        ("stages", {"stage_id": 1, "task_id": 3}, "task_id", "no task 3"),
        ("tasks", {"task_id": 1, "name": 5}, "name", "must be a string"),
    ],
)
def test_bad_bodies_name_the_field_and_change_nothing(registry, kind, body, field, words):
    registry.create("jobs", job_body(7))
    before = copy.deepcopy(registry.records)
    with pytest.raises(RegistryError) as err:
        registry.create(kind, body)
    assert ApiError.of(err.value).status == 400
    assert err.value.field == field
    assert words in err.value.message
    assert registry.records == before


def test_ids_conflicts_and_put(registry):
    registry.create("jobs", job_body(1))
    with pytest.raises(RegistryError) as err:
        registry.create("jobs", job_body(1))
    assert ApiError.of(err.value).status == 409
    job, created = registry.put("jobs", 1, job_body(1, iteration_budget=20))
    assert not created and job.iteration_budget == 20
    assert job.arrival_s == 0.0  # a replace keeps the arrival time
    with pytest.raises(RegistryError, match="differs from the id 2 in the URL"):
        registry.put("jobs", 2, job_body(1))
    auto = registry.create("tasks", {"name": "resnet"})
    assert auto.task_id == 1
    with pytest.raises(RegistryError) as err:
        registry.get("jobs", 99)
    assert ApiError.of(err.value).status == 404


def test_host_names_resolve_to_addresses(registry):
    job = registry.create("jobs", job_body(1))
    assert (job.flows[0].src, job.flows[0].dst) == ("10.0.0.1", "10.0.0.2")


def test_delete_cascades(registry):
    registry.create("tasks", {"task_id": 1})
    registry.create("stages", {"stage_id": 1, "task_id": 1})
    registry.create("jobs", job_body(1, stage_id=1))
    registry.create("jobs", job_body(2))
    registry.create("coflows", {"coflow_id": 1, "job_id": 1,
                                "flows": [{"src": "h1", "dst": "h2", "bytes": 5}]})  # fmt: skip
    assert registry.records["jobs"][1].task_id == 1  # inherited from the stage
    removed = registry.delete("tasks", 1)
    assert removed == [("tasks", 1), ("stages", 1), ("jobs", 1), ("coflows", 1)]
    assert list(registry.records["jobs"]) == [2]


def test_progress(registry):
    registry.create("jobs", job_body(1))
    assert registry.job_progress(1, {"iterations_done": 4}).iterations_done == 4
    with pytest.raises(RegistryError, match="iterations_done: 11 must be <= iteration_budget"):
        registry.job_progress(1, {"iterations_done": 11})
    registry.create(
        "coflows",
        {
            "coflow_id": 5,
            "flows": [
                {"src": "h1", "dst": "h2", "bytes": 10},
                {"src": "h3", "dst": "h2", "bytes": 10},
            ],
        },
    )
    coflow = registry.coflow_progress(5, {"remaining_bytes": [0, 4]})
    assert [f.remaining_bytes for f in coflow.flows] == [0, 4]
    with pytest.raises(RegistryError, match=r"remaining_bytes\[1\]: must be <= the flow's 10"):
        registry.coflow_progress(5, {"remaining_bytes": [0, 11]})
    assert registry.coflow_progress(5, {"remaining_bytes": [0, 0]}) is None
    assert 5 not in registry.records["coflows"]
    # "done" does not excuse a bad remaining_bytes beside it (schemathesis sent -1): refused,
    # and the coflow is not finished
    registry.create("coflows", {"coflow_id": 6, "flows": [{"src": "h1", "dst": "h2", "bytes": 10}]})
    with pytest.raises(RegistryError, match=r"remaining_bytes\[0\]: must be in \[0, "):
        registry.coflow_progress(6, {"done": True, "remaining_bytes": [-1]})
    with pytest.raises(RegistryError, match="done: must be true or false"):
        registry.coflow_progress(6, {"done": 1})
    assert 6 in registry.records["coflows"]
    assert registry.coflow_progress(6, {"done": True, "remaining_bytes": [3]}) is None
    assert 6 not in registry.records["coflows"]


def test_cluster_state_has_implicit_coflows_for_running_jobs(registry):
    registry.create("stages", {"stage_id": 3})
    registry.create("jobs", job_body(1, stage_id=3))
    registry.create("jobs", job_body(2, iterations_done=10))  # finished: no traffic
    state = registry.cluster_state(link_bps=20e6)
    assert set(state.coflows) == {IMPLICIT_COFLOW_BASE + 1}
    assert state.stages[3].job_ids == [1]
    assert state.jobs[1].bytes_per_iteration == {("10.0.0.1", 0): 1e6, ("10.0.0.2", 1): 1e6}
    # an explicit coflow of the job replaces the implicit one
    registry.create("coflows", {"coflow_id": 8, "job_id": 1,
                                "flows": [{"src": "h1", "dst": "h2", "bytes": 5}]})  # fmt: skip
    assert set(registry.cluster_state(20e6).coflows) == {8}


def test_a_job_s_implicit_coflow_arrives_when_its_current_iteration_began(registry):
    """One coflow per iteration, as in the simulator: FIFO-LM serves the iteration that has
    waited longest, not the job registered first."""
    registry.create("jobs", job_body(1))  # clock 0
    registry.create("jobs", job_body(2))  # clock 1

    def fifo_order():
        state = registry.cluster_state(link_bps=20e6)
        order = make_policy("fifo-lm").schedule(state).order
        return [state.coflows[c].job_id for c in order]

    assert fifo_order() == [1, 2]
    registry.job_progress(1, {"iterations_done": 1})  # job 1's second iteration begins
    assert registry.records["jobs"][1].iteration_arrival_s > registry.records["jobs"][2].arrival_s
    assert fifo_order() == [2, 1]
    began = registry.records["jobs"][1].iteration_arrival_s
    registry.job_progress(1, {"iterations_done": 1})  # the same report again: no new iteration
    registry.put("jobs", 1, job_body(1))  # a re-registration keeps the progress and its start
    assert registry.records["jobs"][1].iteration_arrival_s == began
    registry.put("jobs", 2, job_body(2, iterations_done=2))  # progress set by a PUT: a new one
    assert registry.records["jobs"][2].iteration_arrival_s > began
    assert fifo_order() == [1, 2]


def test_registry_survives_a_restart(tmp_path):
    path = str(tmp_path / "reg.sqlite")
    first = Registry(path, hosts=HOSTS)
    first.create("stages", {"stage_id": 1})
    first.create("jobs", job_body(1, stage_id=1))
    first.job_progress(1, {"iterations_done": 3})
    first.set_setting("policy", {"name": "jpas", "options": {}})
    with pytest.raises(RegistryError):
        first.create("jobs", job_body(2, stage_id=7))
    first.close()
    second = Registry(path, hosts=HOSTS)
    assert second.records == first.records
    assert second.records["jobs"][1].iterations_done == 3
    assert second.settings["policy"]["name"] == "jpas"
    assert 2 not in second.records["jobs"]


def test_churn_does_not_grow_the_model_cache():
    registry = Registry(":memory:")
    flows = [{"src": "10.0.0.1", "dst": "10.0.0.2", "bytes": 10}]
    for cycle in range(1000):
        registry.create("coflows", {"coflow_id": cycle, "flows": flows})
        registry.cluster_state(1e9)  # builds and caches the coflow's model
        if cycle % 2:
            registry.delete("coflows", cycle)
        else:
            registry.coflow_progress(cycle, {"done": True})
    assert registry.records["coflows"] == {} and registry._models == {}


def rebuilt_state(registry: Registry, link_bps: float = 20e6):
    """The scheduling view made from the records alone, as nothing were kept: every registered
    coflow with bytes left, the implicit coflow of a running job without one, every job, and
    every stage listing its jobs in registration order."""
    from controller.model import ClusterState, Stage
    from controller.registry import _coflow_of, _job_of

    coflows, busy = {}, set()
    for rec in registry.records["coflows"].values():
        coflow = _coflow_of(rec)
        if not coflow.done:
            coflows[rec.coflow_id] = coflow
            if rec.job_id is not None:
                busy.add(rec.job_id)
    jobs = {}
    for rec in registry.records["jobs"].values():
        job, implicit = _job_of(rec)
        jobs[rec.job_id] = job
        if implicit is not None and rec.running and rec.job_id not in busy:
            coflows[implicit.coflow_id] = implicit
    stages = {
        rec.stage_id: Stage(rec.stage_id, [], rec.task_id, rec.weight, rec.arrival_s)
        for rec in registry.records["stages"].values()
    }
    for job in jobs.values():
        if job.stage_id in stages:
            stages[job.stage_id].job_ids.append(job.job_id)
    return ClusterState({}, coflows, jobs, stages, 0.0, link_bps)


_last_version = VersionCheck()


def assert_view_is_the_records(registry: Registry, beamer=None) -> None:
    """The kept view is the records'; ``beamer``, a policy kept from one call to the next
    (what it keeps rests on the view's stages_version), orders it as a new one does."""
    kept, want = registry.cluster_state(20e6), rebuilt_state(registry)
    _last_version.check(kept)
    if beamer is not None:
        assert beamer.schedule(kept) == make_policy("beamer").schedule(want)
    assert kept.coflows == want.coflows
    assert kept.jobs == want.jobs and list(kept.jobs) == list(want.jobs)
    assert kept.stages == want.stages
    assert kept.active_coflows() == want.active_coflows()
    ports = registry.job_tcp_ports()
    assert ports == {j: rec.tcp_ports for j, rec in registry.records["jobs"].items()}
    assert list(ports) == list(registry.records["jobs"])
    for name in ("fifo-lm", "sincronia", "jpas", "beamer", "varys"):
        assert make_policy(name).schedule(kept) == make_policy(name).schedule(want)
    assert_table_is_the_jobs(kept)


@pytest.mark.parametrize("seed", range(6))
def test_the_kept_scheduling_view_is_the_records_after_every_change(tmp_path, seed):
    import random

    rng = random.Random(seed)
    path = str(tmp_path / "reg.sqlite")
    ticks = iter(range(100_000))
    registry = Registry(path, hosts=HOSTS, clock=lambda: float(next(ticks)))
    hosts = list(HOSTS)

    def flows():
        return [{"src": a, "dst": b, "bytes": rng.choice((10, 1e6))}
                for a, b in (rng.sample(hosts, 2) for _ in range(rng.randint(1, 2)))]  # fmt: skip

    older, beamer = [], make_policy("beamer")
    for _ in range(300):
        action = rng.random()
        stages, jobs = list(registry.records["stages"]), list(registry.records["jobs"])
        coflows = list(registry.records["coflows"])
        try:
            if action < 0.1:
                registry.put("stages", rng.randrange(4), {"weight": rng.choice((1, 2))})
            elif action < 0.3:
                body = job_body(rng.randrange(8), flows=flows(), iteration_budget=3,
                                iterations_done=rng.randint(0, 3),
                                tcp_ports=rng.choice(([], [5001], [5001, 6000])))  # fmt: skip
                if stages and rng.random() < 0.7:
                    body["stage_id"] = rng.choice(stages)
                if rng.random() < 0.2:
                    body.pop("flows")  # a job without a template: no implicit coflow
                registry.put("jobs", body.pop("job_id"), body)
            elif action < 0.5 and jobs:
                job = registry.records["jobs"][rng.choice(jobs)]
                registry.job_progress(job.job_id, {"iterations_done": rng.randint(0, 3),
                                                   "iteration_budget": 3})  # fmt: skip
            elif action < 0.7:
                body = {"flows": flows()}
                if jobs and rng.random() < 0.7:
                    body["job_id"] = rng.choice(jobs)
                registry.put("coflows", rng.randrange(10), body)
            elif action < 0.85 and coflows:
                coflow = registry.records["coflows"][rng.choice(coflows)]
                left = [rng.choice((0, f.size_bytes / 2)) for f in coflow.flows]
                registry.coflow_progress(coflow.coflow_id, {"remaining_bytes": left})
            elif action < 0.95 and (coflows or jobs or stages):
                kind = rng.choice([k for k, ids in (("coflows", coflows), ("jobs", jobs),
                                                    ("stages", stages)) if ids])  # fmt: skip
                registry.delete(kind, rng.choice(list(registry.records[kind])))
            else:
                registry.close()
                registry = Registry(path, hosts=HOSTS, clock=lambda: float(next(ticks)))
        except RegistryError:
            continue
        if rng.random() < 0.1:  # a state made now shows the same later
            older.append((registry.cluster_state(20e6), rebuilt_state(registry)))
        assert_view_is_the_records(registry, beamer)
    for kept, want in older:
        assert kept.coflows == want.coflows and kept.jobs == want.jobs
        assert kept.stages == want.stages and kept.active_coflows() == want.active_coflows()
        assert_table_is_the_jobs(kept)  # (later changes copied the numbers first)
    assert len(older) > 10
