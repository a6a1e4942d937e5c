"""The REST dispatcher: routes, status codes, error bodies, and no state lost on bad input."""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import subprocess
import sys
import time

import pytest

from controller.api import ROUTES, RestApi
from controller.engine import Engine, involuntary_switches
from controller.limits import MAX_FLOWS
from controller.registry import Registry
from controller.schedule import Schedule

HOSTS = {"h1": "10.0.0.1", "h2": "10.0.0.2", "h3": "10.0.0.3"}
JOB = {"job_id": 1, "stage_id": 1, "tcp_ports": [5001], "iteration_budget": 4,
       "flows": [{"src": "h1", "dst": "h2", "bytes": 1e6}]}  # fmt: skip


@pytest.fixture
def api():
    engine = Engine(Registry(":memory:", hosts=HOSTS), "beamer")
    wakes = []
    rest = RestApi(engine, on_change=lambda: wakes.append(1))
    rest.wakes = wakes
    return rest


def call(api, method, path, body=None):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body else b""
    return api.handle(method, path, raw, {"Content-Type": "application/json"})


def test_registration_flow(api):
    assert call(api, "POST", "/api/stages", {"stage_id": 1})[0] == 201
    status, job = call(api, "POST", "/api/jobs", JOB)
    assert status == 201 and job["flows"][0]["src"] == "10.0.0.1"
    assert call(api, "GET", "/api/stages/1")[1]["job_ids"] == [1]
    assert (
        call(api, "POST", "/api/jobs/1/progress", {"iterations_done": 2})[1]["iterations_done"] == 2
    )
    status, order = call(api, "GET", "/api/order")
    assert status == 200
    assert [(e["job_id"], e["implicit"], e["level"]) for e in order["order"]] == [(1, True, 0)]
    status, coflow = call(api, "PUT", "/api/coflows/3",
                          {"flows": [{"src": "h3", "dst": "h2", "bytes": 10}]})  # fmt: skip
    assert status == 201 and coflow["coflow_id"] == 3
    assert call(api, "PUT", "/api/coflows/3",
                {"flows": [{"src": "h3", "dst": "h2", "bytes": 20}]})[0] == 200  # fmt: skip
    assert call(api, "POST", "/api/coflows/3/progress", {"done": True})[1]["finished"]
    assert call(api, "GET", "/api/coflows")[1] == []
    assert call(api, "DELETE", "/api/stages/1")[1]["deleted"] == [
        {"kind": "stages", "id": 1}, {"kind": "jobs", "id": 1}]  # fmt: skip
    assert len(api.wakes) == 7  # every change woke the reorder loop
    stats = call(api, "GET", "/api/stats")[1]
    assert stats["events"] == 7 and stats["registered"]["jobs"] == 0


def test_policy_can_be_read_and_switched(api):
    assert call(api, "GET", "/api/policy")[1]["name"] == "beamer"
    status, body = call(
        api, "PUT", "/api/policy", {"name": "varys", "options": {"use_rates": False}}
    )
    assert status == 200 and body["name"] == "varys" and body["options"] == {"use_rates": False}
    assert api.engine.registry.settings["policy"]["name"] == "varys"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "words"),
    [
        ("POST", "/api/jobs", b"{oops", 400, "not valid JSON"),
        ("POST", "/api/jobs", None, 400, "a JSON object is required"),
        ("POST", "/api/jobs", {**JOB, "stage_id": 9}, 400, "stage_id: no stage 9"),
        ("POST", "/api/jobs", {**JOB, "tcp_ports": "5001"}, 400, "tcp_ports: must be a list"),
        ("POST", "/api/stages", {"stage_id": 1}, 409, "already exists"),
        ("GET", "/api/jobs/42", None, 404, "no job 42"),
        ("GET", "/api/jobs/99999999999", None, 404, "no such path"),
        ("DELETE", "/api/coflows/5", None, 404, "no coflow 5"),
        ("PATCH", "/api/jobs/1", {}, 405, "use GET, PUT, DELETE"),
        ("GET", "/api/widgets", None, 404, "no such path"),
        ("GET", "/other", None, 404, "lives under /api/"),
        ("PUT", "/api/policy", {"name": "sjf"}, 400, "unknown policy 'sjf'"),
        ("PUT", "/api/policy", {"name": "jpas", "options": {"period_s": -1}}, 400, "period_s"),
        ("PUT", "/api/policy", {"name": "jpas", "colour": 1}, 400, "colour: unknown field"),
        ("PUT", "/api/policy", {"options": {}}, 400, "name: is required"),
        ("POST", "/api/jobs/1/progress", {"iterations_done": 9}, 400, "<= iteration_budget"),
        ("POST", "/api/jobs/1/progress", {"iterations": 2}, 400, "iterations: unknown field"),
        ("POST", "/api/coflows/3/progress", {"done": True}, 404, "no coflow 3"),
        # an explicit null is refused where the model has no "absent" (it once wedged reorders)
        (
            "POST",
            "/api/coflows",
            {"weight": None, "flows": JOB["flows"]},
            400,
            "weight: must not be null",
        ),
        (
            "POST",
            "/api/coflows",
            {"coflow_id": None, "flows": JOB["flows"]},
            400,
            "coflow_id: must not be null",
        ),
        (
            "PUT",
            "/api/jobs/1",
            {**JOB, "iteration_budget": None},
            400,
            "iteration_budget: must not be null",
        ),
        ("POST", "/api/jobs/1/progress", {"iterations_done": None}, 400, "must not be null"),
        (
            "PUT",
            "/api/jobs/0",
            {**JOB, "job_id": False},
            400,
            "job_id: must be an integer, got False",
        ),  # schemathesis: False == 0 in Python
        (
            "POST",
            "/api/coflows",
            {"flows": [{"src": "h1", "dst": "h2", "bytes": None}]},
            400,
            "flows[0].bytes: must not be null",
        ),
        (
            "POST",
            "/api/jobs",
            {**JOB, "job_id": 2, "tcp_ports": [None]},
            400,
            "tcp_ports[0]: must be an integer",
        ),
        (
            "POST",
            "/api/coflows",
            b'{"flows": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            400,
            "nested too deeply",
        ),
        (
            "POST",
            "/api/coflows",
            b'{"weight": 1'
            + b"0" * 400
            + b', "flows": '
            + json.dumps(JOB["flows"]).encode()
            + b"}",
            400,
            "weight: must be in [1e-06, 1e+06], got an integer of more than 40 digits",
        ),
        ("POST", "/api/coflows", b'{"weight": 1' + b"0" * 5000 + b"}", 400, "not valid JSON"),
        (
            "PUT",
            "/api/policy",
            {"name": "fifo-lm", "options": {"heavy_threshold_bytes": "abc"}},
            400,
            "heavy_threshold_bytes must be a number in (0, 1.61575e+21] or null, got 'abc'",
        ),
        (
            "PUT",
            "/api/policy",
            {"name": "beamer", "options": {"use_rates": "maybe"}},
            400,
            "use_rates must be true or false",
        ),
        (
            "PUT",
            "/api/policy",
            {"name": "beamer", "options": {"use_rates": None}},
            400,
            "use_rates must be true or false, got None",
        ),
        (
            "PUT",
            "/api/policy",
            {"name": "varys", "options": {"use_rates": 2}},
            400,
            "use_rates must be true or false, got 2",
        ),
        (
            "PUT",
            "/api/policy",
            {"name": "beamer", "options": {"period_s": 1}},
            400,
            "policy 'beamer' has no option 'period_s' (options: stage_order, use_rates, "
            "within_stage)",
        ),
    ],
)
def test_errors_are_json_name_the_problem_and_change_nothing(api, method, path, body, status,
                                                             words):  # fmt: skip
    call(api, "POST", "/api/stages", {"stage_id": 1})
    call(api, "POST", "/api/jobs", JOB)
    before = copy.deepcopy(api.engine.registry.records)
    policy = api.engine.policy_name
    got, payload = call(api, method, path, body)
    assert got == status
    assert set(payload) == {"error"} and payload["error"]["code"] == status
    assert words in payload["error"]["message"]
    assert api.engine.registry.records == before
    assert api.engine.policy_name == policy


def test_internal_errors_are_logged_500s(api, caplog):
    def boom(*_a, **_k):
        raise RuntimeError("bug")

    api.engine.order_json = boom
    status, payload = call(api, "GET", "/api/order")
    assert status == 500 and payload["error"]["message"].startswith("internal error")
    assert "internal error serving GET /api/order" in caplog.text


def test_every_route_has_a_handler(api):
    for _method, _path, name in ROUTES:
        assert callable(getattr(api, name))


def test_a_null_reference_means_none(api):
    status, coflow = call(api, "POST", "/api/coflows", {"job_id": None, "flows": JOB["flows"]})
    assert status == 201 and coflow["job_id"] is None
    assert call(api, "GET", "/api/order")[0] == 200


def test_a_retried_put_keeps_progress_unless_the_body_sets_it(api):
    call(api, "POST", "/api/stages", {"stage_id": 1})
    call(api, "PUT", "/api/jobs/1", JOB)
    call(api, "POST", "/api/jobs/1/progress", {"iterations_done": 3})
    assert call(api, "PUT", "/api/jobs/1", JOB)[1]["iterations_done"] == 3
    assert call(api, "PUT", "/api/jobs/1", {**JOB, "iterations_done": 0})[1]["iterations_done"] == 0
    call(api, "POST", "/api/jobs/1/progress", {"iterations_done": 3})
    status, body = call(api, "PUT", "/api/jobs/1", {**JOB, "iteration_budget": 2})
    assert status == 400 and "3 (kept from the stored job) must be <=" in body["error"]["message"]

    flows = [{"src": "h1", "dst": "h2", "bytes": 100}, {"src": "h3", "dst": "h2", "bytes": 50}]
    call(api, "PUT", "/api/coflows/7", {"flows": flows})
    call(api, "POST", "/api/coflows/7/progress", {"remaining_bytes": [40, 50]})
    kept = call(api, "PUT", "/api/coflows/7", {"flows": flows})[1]
    assert [f["remaining_bytes"] for f in kept["flows"]] == [40, 50]
    changed = [{**flows[0], "bytes": 200}, flows[1]]  # a different flow starts afresh
    renewed = call(api, "PUT", "/api/coflows/7", {"flows": changed})[1]
    assert [f["remaining_bytes"] for f in renewed["flows"]] == [200, 50]


def test_a_failing_reorder_is_counted_named_and_marks_the_plan_stale(api):
    call(api, "POST", "/api/stages", {"stage_id": 1})
    call(api, "POST", "/api/jobs", JOB)
    assert call(api, "GET", "/api/order")[1]["stale"] is False
    healthy = api.engine.policy.schedule

    def broken(_state):
        raise ZeroDivisionError("division by zero")

    api.engine.policy.schedule = broken
    with pytest.raises(ZeroDivisionError):
        api.engine.reorder()
    stats = call(api, "GET", "/api/stats")[1]
    assert stats["reorder_failures"] == 1 and stats["plan_stale"] is True
    assert stats["last_reorder_error"] == "ZeroDivisionError: division by zero"
    order = call(api, "GET", "/api/order")[1]
    assert order["stale"] is True and [e["job_id"] for e in order["order"]] == [1]

    api.engine.policy.schedule = healthy
    api.engine.reorder()
    stats = call(api, "GET", "/api/stats")[1]
    assert stats["plan_stale"] is False and stats["last_reorder_error"] is None
    assert stats["reorder_failures"] == 1


def test_without_any_plan_a_failing_reorder_is_a_503_naming_it(api):
    def broken(_state):
        raise ValueError("bad threshold")

    api.engine.policy.schedule = broken
    status, body = call(api, "GET", "/api/order")
    assert status == 503 and "ValueError: bad threshold" in body["error"]["message"]


def test_a_stored_policy_with_untyped_options_is_ignored_at_start(caplog):
    registry = Registry(":memory:", hosts=HOSTS)
    # (set_setting and a registry opening a file refuse it: only a registry changed in memory
    # can hold one)
    registry.settings["policy"] = {"name": "fifo-lm", "options": {"heavy_threshold_bytes": "abc"}}
    engine = Engine(registry, "fair")
    assert engine.policy_name == "fair"
    assert "ignoring the policy saved in the database" in caplog.text


def test_policy_lists_every_policys_typed_options(api):
    specs = call(api, "GET", "/api/policy")[1]["option_specs"]
    assert specs["varys"]["use_rates"] == {
        "type": "boolean",
        "default": True,
        "description": "cap every flow at its MADD rate",
    }
    assert specs["fifo-lm"]["heavy_threshold_bytes"]["nullable"] is True
    assert specs["fair"] == {}


# ---- requests a browser page on another site, or a stranger, could send ----------------------

JSON = {"Content-Type": "application/json"}


def guarded(token=None):
    engine = Engine(Registry(":memory:", hosts=HOSTS), "beamer")
    return RestApi(engine, token=token, allowed_hosts={"127.0.0.1", "localhost", "::1"})


@pytest.mark.parametrize(
    ("headers", "status", "words"),
    [
        (
            {"Content-Type": "text/plain"},
            415,
            "Content-Type must be application/json, got 'text/plain'",
        ),
        ({}, 415, "got 'none'"),
        ({**JSON, "Origin": "http://evil.example"}, 403, "cross-origin requests are refused"),
        ({**JSON, "Host": "evil.example:8080"}, 403, "Host 'evil.example:8080' is not an address"),
    ],
)
def test_cross_site_and_foreign_host_requests_are_refused_and_change_nothing(headers, status,
                                                                            words):  # fmt: skip
    api = guarded()
    body = json.dumps({"flows": JOB["flows"], "weight": 1}).encode()
    got, payload = api.handle("POST", "/api/coflows", body, headers)
    assert got == status and words in payload["error"]["message"]
    assert api.registry.records["coflows"] == {}


@pytest.mark.parametrize(
    "headers",
    [
        {"content-type": "application/json; charset=utf-8", "host": "127.0.0.1:8080"},
        {"Content-Type": "application/json", "Host": "[::1]:8080"},
        {"Content-Type": "application/json", "Host": "localhost"},
    ],
)
def test_same_machine_json_requests_pass(headers):
    body = json.dumps({"flows": JOB["flows"]}).encode()
    assert guarded().handle("POST", "/api/coflows", body, headers)[0] == 201


def test_a_token_is_required_when_set():
    api = guarded(token="s3cret")
    status, payload = api.handle("GET", "/api/stats", b"", {})
    assert status == 401 and "Authorization: Bearer" in payload["error"]["message"]
    assert api.handle("GET", "/api/stats", b"", {"Authorization": "Bearer wrong"})[0] == 401
    assert api.handle("GET", "/api/stats", b"", {"Authorization": "Bearer s3cret"})[0] == 200


def test_the_api_serves_its_own_spec_and_says_what_a_405_allows(api):
    status, spec = call(api, "GET", "/api/openapi.json")
    assert status == 200 and spec["openapi"].startswith("3.") and "/api/jobs" in spec["paths"]
    reply = api.respond("PATCH", "/api/jobs/1", b"", {})
    assert reply.status == 405 and reply.headers == {"Allow": "GET, PUT, DELETE"}


def test_oversized_requests_are_refused_before_parsing(api):
    flow = {"src": "h1", "dst": "h2", "bytes": 1}
    status, body = call(api, "POST", "/api/coflows", {"flows": [flow] * (MAX_FLOWS + 1)})
    assert status == 400
    assert f"{MAX_FLOWS + 1} flows; at most {MAX_FLOWS} per record" in body["error"]["message"]
    status, body = call(api, "POST", "/api/coflows", b" " * (1 << 20) + b"{}")
    assert status == 413 and "at most 1048576" in body["error"]["message"]
    assert api.registry.records["coflows"] == {}


def test_garbage_collection_pauses_are_in_the_stats():
    import gc

    from controller.engine import GcPauses

    pauses = GcPauses().install()
    try:
        engine = Engine(Registry(":memory:"), "fair", gc_pauses=pauses)
        gc.collect()
        full = RestApi(engine).handle("GET", "/api/stats")[1]["gc_pauses"]["gen2"]
    finally:
        pauses.uninstall()
    assert full["count"] >= 1 and full["max_ms"] > 0


def test_the_slowest_event_is_broken_down_into_wait_compute_and_send():
    # The clocks' readings in the order the engine takes them: two events (0 and 10 ms), the
    # reorder loop starts at 30 ms and has the plan at 35 ms, of which the process ran 4 ms,
    # the operations are sent at 45 ms.
    wall = iter([0.0, 0.010, 0.030, 0.035, 0.045, 1.0, 1.001])
    cpu = iter([0.0, 0.002, 0.006, 0.012, 0.5, 0.5])
    engine = Engine(
        Registry(":memory:"), "fair", monotonic=lambda: next(wall), cpu_clock=lambda: next(cpu)
    )
    engine.note_event()
    engine.note_event()
    engine.reorder()
    engine.sent()
    slowest = RestApi(engine).handle("GET", "/api/stats")[1]["event_to_flowmods_ms"]["slowest"]
    assert slowest == {
        "latency_ms": 45.0,
        "wait_ms": 30.0,
        "compute_ms": 5.0,
        "send_ms": 10.0,
        "cpu_ms": 12.0,
    }
    compute = RestApi(engine).handle("GET", "/api/stats")[1]["reorder_compute_ms"]
    assert {k: compute[k] for k in ("count", "p50", "p99", "cpu_p50", "cpu_p99")} == {
        "count": 1, "p50": 5.0, "p99": 5.0, "cpu_p50": 4.0, "cpu_p99": 4.0
    }  # fmt: skip
    engine.note_event()  # a faster event later (1 ms) does not replace it
    engine.sent()
    assert engine.stats.slowest.latency_s == pytest.approx(0.045)


def test_the_stats_count_the_reorders_another_task_took_the_core_from():
    # Three reorders of 2, 7 and 3 ms (wall clock); the OS took the core from the reorder's
    # thread twice during the second (its count of involuntary switches goes 4 -> 6).
    wall = iter([0.0, 0.002, 1.0, 1.007, 2.0, 2.003])
    switches = iter([4, 4, 4, 6, 6, 6])
    engine = Engine(
        Registry(":memory:"), "fair", monotonic=lambda: next(wall),
        preemptions=lambda: next(switches),
    )  # fmt: skip
    for _ in range(3):
        engine.reorder()
    compute = RestApi(engine).handle("GET", "/api/stats")[1]["reorder_compute_ms"]
    assert compute["count"] == 3 and compute["p99"] == 7.0
    assert compute["preempted"] == 1 and compute["preemptions"] == 2
    assert compute["p99_not_preempted"] == 3.0  # the 7 ms reorder is the preempted one


def test_the_reorder_thread_s_involuntary_switches_are_read_from_the_os():
    # this thread and a busy process on one core for 0.5 s: the OS takes the core from this
    # thread every few ms to run the other (a thread that waits gives it up itself, and is
    # not counted)
    cpu = min(os.sched_getaffinity(0))
    kept = os.sched_getaffinity(0)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(busy.pid, {cpu})
        os.sched_setaffinity(0, {cpu})
        before = involuntary_switches()
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            pass
        after = involuntary_switches()
    finally:
        os.sched_setaffinity(0, kept)
        busy.kill()
        busy.wait()
    assert after - before >= 10


def test_the_host_header_may_name_loopback_or_the_listen_address():
    from controller.api import allowed_hosts, is_loopback

    every_ipv4 = str(ipaddress.IPv4Address(0))
    assert allowed_hosts("127.0.0.1") == {"127.0.0.1", "localhost", "::1"}
    assert allowed_hosts("10.1.2.3") == {"127.0.0.1", "localhost", "::1", "10.1.2.3"}
    assert allowed_hosts("ctl.example") == {"127.0.0.1", "localhost", "::1", "ctl.example"}
    assert allowed_hosts(every_ipv4) is None and allowed_hosts("::") is None
    assert is_loopback("127.0.0.2") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("10.1.2.3") and not is_loopback(every_ipv4)


def test_a_reorder_that_fails_while_making_the_rules_leaves_none_half_made(api):
    from controller.rules import MeterIds, desired_table

    call(api, "POST", "/api/jobs", JOB)
    api.engine.reorder()
    healthy = api.engine.policy.schedule
    flows = [{"src": "h1", "dst": "h3", "bytes": 100}]
    call(api, "PUT", "/api/coflows/5", {"flows": flows})

    def half(state):  # a last rank naming a coflow the state does not have
        return Schedule((*healthy(state).ranks, (99,)))

    api.engine.policy.schedule = half
    with pytest.raises(KeyError):
        api.engine.reorder()
    api.engine.policy.schedule = healthy
    plan = api.engine.reorder()
    job_ports = {j: r.tcp_ports for j, r in api.engine.registry.records["jobs"].items()}
    assert plan.table == desired_table(plan.state, plan.schedule, job_ports, MeterIds())
    assert any(rule.match[1] == ("ipv4_src", "10.0.0.1") and rule.match[2][1] == "10.0.0.3"
               for rule in plan.table.rules.values())  # fmt: skip
