"""The bounds of controller/limits.py as the API applies them, the rules diff's cost in what
changed, and the event-loop holds the stats report."""

from __future__ import annotations

import json

import pytest

from controller import limits, rules
from controller.api import RestApi
from controller.engine import Engine
from controller.registry import Registry

HOSTS = {f"h{i}": f"10.0.0.{i}" for i in range(1, 40)}


@pytest.fixture
def api():
    return RestApi(Engine(Registry(":memory:", hosts=HOSTS), "beamer"))


def call(api, method, path, body=None):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body else b""
    return api.handle(method, path, raw, {"Content-Type": "application/json"})


def flows(n: int, size: float = 1e6) -> list[dict]:
    """``n`` flows between distinct host pairs."""
    pairs = [(s, d) for s in range(1, 40) for d in range(1, 40) if s != d]
    return [{"src": f"h{s}", "dst": f"h{d}", "bytes": size} for s, d in pairs[:n]]


def test_the_largest_flow_is_a_year_of_the_fastest_link():
    assert limits.MAX_FLOW_BYTES == pytest.approx(1.6e12 / 8 * 365.25 * 86400)
    # every product the schedulers form from it stays finite
    assert limits.MAX_FLOW_BYTES * 8 * limits.MAX_FLOWS * limits.MAX_ITERATIONS < 1e40


@pytest.mark.parametrize(
    ("size", "status"),
    [(1e308, 400), (2.3e307, 400), (10**400, 400), (limits.MAX_FLOW_BYTES * 1.000001, 400),
     (limits.MAX_FLOW_BYTES, 201), (0, 201)],
)  # fmt: skip
def test_flow_sizes_beyond_a_year_of_the_fastest_link_are_refused(api, size, status):
    body = {"flows": [{"src": "h1", "dst": "h2", "bytes": size}]}
    got, payload = call(api, "PUT", "/api/coflows/9", body)
    assert got == status, payload
    if status == 400:
        assert payload["error"]["field"] == "flows[0].bytes"
        assert api.engine.registry.records["coflows"] == {}
    api.engine.reorder()  # (and the controller orders what it took)


@pytest.mark.parametrize("value", [True, False, 167772161, None, ["10.0.0.1"], 1.5])
def test_addresses_must_be_strings(api, value):
    got, payload = call(api, "PUT", "/api/coflows/9",
                        {"flows": [{"src": value, "dst": "h2", "bytes": 1}]})  # fmt: skip
    assert got == 400 and payload["error"]["field"] == "flows[0].src"
    assert "as a string" in payload["error"]["message"] or value is None


@pytest.mark.parametrize("weight", [0, 1e-7, 1e7, 10**400, float("nan")])
def test_weights_outside_six_orders_of_magnitude_are_refused(api, weight):
    raw = json.dumps({"task_id": 1, "weight": weight}).encode()
    got, payload = call(api, "POST", "/api/tasks", raw)
    assert got == 400 and payload["error"]["field"] == "weight"
    assert len(payload["error"]["message"]) < 120  # (a 400-digit integer is not quoted)


def test_tcp_ports_and_the_rules_they_multiply_are_bounded(api):
    too_many = list(range(5000, 5000 + limits.MAX_TCP_PORTS + 1))
    got, payload = call(api, "PUT", "/api/jobs/1", {"tcp_ports": too_many})
    assert got == 400 and payload["error"]["field"] == "tcp_ports"
    ports = list(range(5000, 5000 + limits.MAX_TCP_PORTS))
    most = limits.MAX_JOB_RULES // (4 * len(ports))
    assert call(api, "PUT", "/api/jobs/1", {"tcp_ports": ports, "flows": flows(most)})[0] == 201
    got, payload = call(api, "PUT", "/api/jobs/2", {"tcp_ports": ports, "flows": flows(most + 1)})
    assert got == 400 and "marking rules" in payload["error"]["message"]
    # a coflow of the job is matched on its ports too
    got, payload = call(api, "PUT", "/api/coflows/3", {"job_id": 1, "flows": flows(most + 1)})
    assert got == 400 and payload["error"]["field"] == "flows"
    assert call(api, "PUT", "/api/coflows/3", {"job_id": 1, "flows": flows(most)})[0] == 201
    # and more ports for a job whose coflow is wide are refused
    assert call(api, "PUT", "/api/jobs/4", {"flows": flows(2)})[0] == 201
    assert call(api, "PUT", "/api/coflows/5", {"job_id": 4, "flows": flows(most + 1)})[0] == 201
    got, payload = call(api, "PUT", "/api/jobs/4", {"flows": flows(2), "tcp_ports": ports})
    assert got == 400 and payload["error"]["field"] == "tcp_ports"
    assert api.engine.registry.records["jobs"][4].tcp_ports == []


@pytest.mark.parametrize(
    ("options", "field"),
    [({"period_s": 1e-300}, "period_s"), ({"period_s": 10**400}, "period_s"),
     ({"min_history": 10**300}, "min_history"), ({"heavy_percentile": 10**400}, "heavy"),
     ({"heavy_threshold_bytes": 10**400}, "heavy_threshold_bytes")],
)  # fmt: skip
def test_policy_options_out_of_range_are_a_400_not_a_500(api, options, field):
    name = "jpas" if "period_s" in options else "fifo-lm"
    got, payload = call(api, "PUT", "/api/policy", {"name": name, "options": options})
    assert got == 400, payload
    assert field in payload["error"]["message"]
    assert api.engine.policy_name == "beamer"


def test_the_rules_diff_reads_each_changed_rule_once(monkeypatch, api):
    """Building a job's rules costs work linear in them: each rule's key is computed a
    bounded number of times (a scan of the pair's rules per changed rule made a job with many
    TCP ports quadratic)."""
    reads = [0]
    key = rules.FlowRule.key

    def counted(self):
        reads[0] += 1
        return key.fget(self)

    api.engine.switch_connected(1)
    ports = list(range(5000, 5000 + limits.MAX_TCP_PORTS))
    n_flows = limits.MAX_JOB_RULES // (4 * len(ports))
    rules._pair_rules.cache_clear()
    rules._pair_rules_by_key.cache_clear()
    monkeypatch.setattr(rules.FlowRule, "key", property(counted))
    body = {"tcp_ports": ports, "flows": flows(n_flows), "iteration_budget": 5}
    assert call(api, "PUT", "/api/jobs/1", body)[0] == 201
    api.engine.reorder()
    n_rules = len(api.engine.plan.table.rules)
    assert n_rules == limits.job_rules(n_flows, len(ports))
    assert reads[0] <= 6 * n_rules, f"{reads[0]} key reads for {n_rules} rules"


def test_the_stats_report_the_event_loop_holds(api):
    engine = api.engine
    engine.note_hold("rest", 0.004, 0.003)
    engine.note_hold("reorder", 0.020, 0.010)
    engine.note_hold("reorder", 0.030, 0.029)
    holds = call(api, "GET", "/api/stats")[1]["event_loop_holds_ms"]
    assert holds["rest"]["count"] == 1 and holds["rest"]["max"] == 4.0
    assert holds["reorder"] == {"count": 2, "p50": 20.0, "p99": 30.0, "max": 30.0,
                                "cpu_p50": 10.0, "cpu_p99": 29.0, "cpu_max": 29.0}  # fmt: skip
    call(api, "DELETE", "/api/stats")
    assert call(api, "GET", "/api/stats")[1]["event_loop_holds_ms"]["reorder"]["count"] == 0


@pytest.mark.parametrize("pattern", ["ps", "ring"])
def test_the_testbeds_largest_jobs_fit_the_limits(pattern):
    from workloads.hpo import sync_flows

    hosts = list(range(13))  # every host of the testbed, one TCP port per rank
    n_flows = len(sync_flows(pattern, hosts, 1e6).src)
    assert n_flows <= limits.MAX_FLOWS and len(hosts) <= limits.MAX_TCP_PORTS
    assert limits.job_rules(n_flows, len(hosts)) <= limits.MAX_JOB_RULES
    if pattern == "ps":
        assert limits.job_rules(n_flows, len(hosts)) == 1248  # (as docs/controller.md)
