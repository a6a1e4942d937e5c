"""The REST dispatcher: routes, status codes, error bodies, and no state lost on bad input."""

from __future__ import annotations

import copy
import json

import pytest

from controller.api import ROUTES, RestApi
from controller.engine import Engine
from controller.registry import Registry

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
    return api.handle(method, path, raw)


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
