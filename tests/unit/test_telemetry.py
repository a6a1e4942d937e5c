"""``GET /metrics``: Prometheus' text format from the pure core (engine, REST API, switch
counters), the token, the request counter's route templates, bytes per priority level from the
switches' queue counters, and that a reorder costs a fixed number of observations."""

from __future__ import annotations

import gc
import json

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.api import RestApi
from controller.engine import Engine, GcPauses
from controller.registry import Registry
from controller.schedule import N_LEVELS, level_queue_id, queue_level
from controller.switch_counters import PortSample, QueueSample, SwitchCounters
from controller.telemetry import CONTENT_TYPE, METRIC_NAMES, Telemetry
from topologies.qos import CONTROL_CLASS_MINOR, level_classid

HOSTS = {"h1": "10.0.0.1", "h2": "10.0.0.2", "h3": "10.0.0.3"}
JSON = {"Content-Type": "application/json"}
SWITCH = 0xAA


def make_api(**kwargs) -> RestApi:
    engine = Engine(Registry(":memory:", hosts=HOSTS), "sincronia", gc_pauses=GcPauses())
    counters = SwitchCounters()
    return RestApi(engine, telemetry=Telemetry(engine, counters), **kwargs)


def put(api: RestApi, path: str, body: dict) -> int:
    return api.handle("PUT", path, json.dumps(body).encode(), JSON)[0]


def reorder(api: RestApi) -> None:
    """What the Ryu glue's reorder loop does: reorder, send every switch its operations."""
    engine = api.engine
    engine.reorder()
    for dpid in engine.switches:
        engine.ops_for(dpid)
    engine.sent()


def scrape(api: RestApi, headers: dict | None = None) -> dict:
    """``GET /metrics`` parsed: family name -> family."""
    reply = api.respond("GET", "/metrics", b"", headers or {})
    assert reply.status == 200 and reply.content_type == CONTENT_TYPE
    assert reply.content_type.startswith("text/plain; version=0.0.4")
    families = text_string_to_metric_families(reply.payload.decode())
    return {family.name: family for family in families}


def value(families: dict, name: str, sample: str | None = None, **labels) -> float:
    """The value of the sample ``sample`` (default: the family's name) with ``labels``."""
    wanted = sample or name
    found = [
        s.value
        for s in families[name].samples
        if s.name == wanted and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (wanted, labels, families[name].samples)
    return found[0]


@pytest.fixture
def api() -> RestApi:
    api = make_api()
    api.engine.switch_connected(SWITCH)
    assert put(api, "/api/stages/1", {}) == 201
    job = {"stage_id": 1, "tcp_ports": [5001], "iteration_budget": 4,
           "flows": [{"src": "h1", "dst": "h2", "bytes": 4e6}]}  # fmt: skip
    assert put(api, "/api/jobs/1", job) == 201
    assert put(api, "/api/coflows/7", {"flows": [{"src": "h3", "dst": "h2", "bytes": 1e6}]}) == 201
    reorder(api)
    return api


def test_metrics_parse_and_carry_the_reorders_plan_and_rules(api):
    families = scrape(api)
    assert set(METRIC_NAMES) <= set(families)
    assert value(families, "hpo_reorders", "hpo_reorders_total") == 1
    assert value(families, "hpo_reorder_failures", "hpo_reorder_failures_total") == 0
    latency = "hpo_reorder_latency_seconds"
    assert value(families, latency, f"{latency}_count", policy="sincronia") == 1
    assert value(families, latency, f"{latency}_bucket", policy="sincronia", le="+Inf") == 1
    compute = "hpo_reorder_compute_seconds"
    assert value(families, compute, f"{compute}_count", policy="sincronia") == 1
    assert value(families, "hpo_policy_info", policy="sincronia") == 1
    # the job's implicit coflow and coflow 7: two coflows of one job and one stage (the
    # coflow has neither), the smaller first
    assert value(families, "hpo_coflows_active") == 2
    assert value(families, "hpo_jobs_active") == 1
    assert value(families, "hpo_stages_active") == 1
    per_level = [value(families, "hpo_level_coflows", level=str(lv)) for lv in range(N_LEVELS)]
    assert per_level == [1, 1, 0, 0, 0, 0, 0, 0]
    assert value(families, "hpo_registered_records", kind="jobs") == 1
    assert value(families, "hpo_registered_records", kind="coflows") == 1
    assert value(families, "hpo_switches_connected") == 1
    assert value(families, "hpo_plan_stale") == 0
    installed = api.engine.switches[SWITCH]
    assert value(families, "hpo_switch_rules", switch="00000000000000aa") == len(installed.rules)
    assert value(families, "hpo_switch_rules", switch="00000000000000aa") > 0
    assert value(families, "hpo_switch_meters", switch="00000000000000aa") == len(installed.meters)
    assert families["process_resident_memory_bytes"].samples[0].value > 0


def test_every_family_is_listed_and_nothing_comes_from_the_global_registry(api):
    names = {family.name for family in api.telemetry.registry.collect()}
    assert {n for n in names if not n.startswith("process_")} == set(METRIC_NAMES)
    assert not any(n.startswith("hpo_") for n in prometheus_client.REGISTRY._names_to_collectors)


def test_each_controller_counts_its_own(api):
    other = make_api()
    reorder(other)
    reorder(other)
    assert value(scrape(api), "hpo_reorders", "hpo_reorders_total") == 1
    assert value(scrape(other), "hpo_reorders", "hpo_reorders_total") == 2


def test_counters_do_not_go_back_when_the_stats_are_reset(api):
    assert api.handle("DELETE", "/api/stats", b"", {})[0] == 200
    assert api.engine.stats.reorders == 0
    assert value(scrape(api), "hpo_reorders", "hpo_reorders_total") == 1


def test_a_failing_reorder_is_counted_and_marks_the_plan_stale(api, monkeypatch):
    def broken(state):
        raise RuntimeError("broken policy")

    monkeypatch.setattr(api.engine.policy, "schedule", broken)
    api.engine.note_event()
    with pytest.raises(RuntimeError):
        api.engine.reorder()
    families = scrape(api)
    assert value(families, "hpo_reorder_failures", "hpo_reorder_failures_total") == 1
    assert value(families, "hpo_plan_stale") == 1
    assert value(families, "hpo_reorders", "hpo_reorders_total") == 1


def test_a_token_is_required_as_prometheus_sends_it():
    api = make_api(token="s3cret")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        status, payload = api.handle("GET", "/metrics", b"", headers)
        assert status == 401 and "Authorization: Bearer" in payload["error"]["message"]
    # what Prometheus sends with `authorization: {credentials: s3cret}` (its default type)
    families = scrape(api, {"Authorization": "Bearer s3cret", "Accept": "text/plain"})
    assert "hpo_reorders" in families
    # the refused scrapes are counted too, under the route they asked for
    assert value(families, "hpo_rest_requests", "hpo_rest_requests_total",
                 endpoint="/metrics", method="GET", status="401") == 3  # fmt: skip


def test_metrics_are_open_without_a_token_but_keep_the_apis_other_guards():
    api = make_api(allowed_hosts={"127.0.0.1"})
    assert api.handle("GET", "/metrics", b"", {"Host": "127.0.0.1:8080"})[0] == 200
    assert api.handle("GET", "/metrics", b"", {"Host": "evil.example"})[0] == 403
    assert api.handle("GET", "/metrics", b"", {"Origin": "http://evil.example"})[0] == 403
    reply = api.respond("POST", "/metrics", b"", {})
    assert reply.status == 405 and reply.headers["Allow"] == "GET"
    assert api.handle("GET", "/metrics/extra", b"", {})[0] == 404


def test_rest_requests_are_counted_by_route_template_not_raw_path(api):
    for job_id in (2, 3, 4):
        api.handle("GET", f"/api/jobs/{job_id}", b"", {})
    api.handle("GET", "/api/coflows/7", b"", {})
    api.handle("POST", "/api/jobs/1/progress", b'{"iterations_done": 1}', JSON)
    api.handle("PATCH", "/api/jobs/1", b"", {})
    api.handle("BREW", "/api/tasks", b"", {})
    api.handle("GET", "/api/no/such/path/12345", b"", {})
    api.handle("GET", "/nowhere", b"", {})
    families = scrape(api)
    counts = {
        (s.labels["endpoint"], s.labels["method"], s.labels["status"]): s.value
        for s in families["hpo_rest_requests"].samples
        if s.name == "hpo_rest_requests_total"
    }
    assert counts[("/api/jobs/{id}", "GET", "404")] == 3
    assert counts[("/api/coflows/{id}", "GET", "200")] == 1
    assert counts[("/api/jobs/{id}/progress", "POST", "200")] == 1
    assert counts[("/api/jobs/{id}", "PATCH", "405")] == 1
    assert counts[("/api/tasks", "other", "405")] == 1
    assert counts[("other", "GET", "404")] == 2
    assert counts[("/api/jobs/{id}", "PUT", "201")] == 1  # the fixture's registration
    endpoints = {endpoint for endpoint, _, _ in counts}
    assert not any(char.isdigit() for endpoint in endpoints for char in endpoint), endpoints


def test_queue_and_port_counters_become_bytes_per_port_and_level():
    api = make_api()
    counters = api.telemetry.counters
    level0, level1 = level_queue_id(0), level_queue_id(1)
    counters.ports_reported(SWITCH, [PortSample(2, rx_bytes=100, tx_bytes=9_000, tx_dropped=3)])
    counters.queues_reported(
        SWITCH,
        [
            QueueSample(2, level0, tx_bytes=7_000),
            QueueSample(2, level1, tx_bytes=1_500),
            QueueSample(2, 0, tx_bytes=8_600),  # the classes' parent (1:1): no level
            QueueSample(2, CONTROL_CLASS_MINOR - 1, tx_bytes=100),  # ARP's class: no level
        ],
    )
    families = scrape(api)
    port = {"switch": "00000000000000aa", "port": "2"}
    assert value(families, "hpo_port_tx_bytes", "hpo_port_tx_bytes_total", **port) == 9_000
    assert value(families, "hpo_port_rx_bytes", "hpo_port_rx_bytes_total", **port) == 100
    assert value(families, "hpo_port_tx_dropped", "hpo_port_tx_dropped_total", **port) == 3
    by_level = {s.labels["level"]: s.value for s in families["hpo_port_level_tx_bytes"].samples}
    assert by_level == {"0": 7_000, "1": 1_500}

    # a reply in two messages counts once both are in; a queue that went away is dropped
    counters.queues_reported(SWITCH, [QueueSample(2, level0, tx_bytes=9_000)], last=False)
    assert counters.level_tx_bytes()[(SWITCH, 2, 0)] == 7_000
    counters.queues_reported(SWITCH, [QueueSample(3, level0, tx_bytes=10)], last=True)
    assert counters.level_tx_bytes() == {(SWITCH, 2, 0): 9_000, (SWITCH, 3, 0): 10}

    counters.switch_gone(SWITCH)
    families = scrape(api)
    assert families["hpo_port_level_tx_bytes"].samples == []
    assert families["hpo_port_tx_bytes"].samples == []


def test_a_levels_queue_is_its_htb_class():
    """Open vSwitch's linux-htb numbers queue q as class 1:(q + 1): the testbed's class of
    level l (``topologies/qos.py``) is queue 0x0f + l."""
    for level in range(N_LEVELS):
        queue = level_queue_id(level)
        assert level_classid(level) == f"1:{queue + 1:x}"
        assert queue_level(queue) == level
    assert [queue_level(q) for q in (0, 14, 23, CONTROL_CLASS_MINOR - 1)] == [None] * 4
    with pytest.raises(ValueError):
        level_queue_id(N_LEVELS)


class Recording:
    """An engine observer that records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *args))


def test_a_reorder_makes_a_fixed_number_of_observations_whatever_it_served():
    engine = Engine(Registry(":memory:", hosts=HOSTS), "sincronia")
    engine.observer = observer = Recording()
    for i in range(1_000):
        engine.note_event(at=float(i))
    engine.reorder()
    engine.sent(at=2_000.0)
    names = [call[0] for call in observer.calls]
    assert names == ["reordered", "served"]
    assert observer.calls[1] == ("served", "sincronia", 2_000.0)  # from the oldest event
    engine.note_hold("rest", 0.004, 0.003)
    engine.note_switch_error()
    assert observer.calls[2:] == [("held", "rest", 0.004), ("switch_error",)]
    assert engine.stats.switch_errors == 1


def test_event_loop_holds_and_garbage_collections_are_histograms():
    api = make_api()
    gc_pauses = api.engine.gc_pauses
    gc_pauses.install()
    try:
        gc.collect()
    finally:
        gc_pauses.uninstall()
    api.engine.note_hold("reorder", 0.03, 0.02)
    api.engine.note_switch_error()
    families = scrape(api)  # (this request's own hold is recorded after it is served)
    holds = "hpo_event_loop_hold_seconds"
    assert value(families, holds, f"{holds}_count", kind="reorder") == 1
    assert value(families, holds, f"{holds}_bucket", kind="reorder", le="0.02") == 0
    assert value(families, holds, f"{holds}_bucket", kind="reorder", le="0.05") == 1
    assert value(families, holds, f"{holds}_count", kind="rest") == 0
    assert value(families, "hpo_gc_pause_seconds", "hpo_gc_pause_seconds_count",
                 generation="2") >= 1  # fmt: skip
    assert value(families, "hpo_switch_errors", "hpo_switch_errors_total") == 1


def test_the_command_line_sets_how_often_the_switches_are_asked():
    from controller.__main__ import parse_args

    assert parse_args([]).stats_interval == 5.0
    assert parse_args(["--stats-interval", "0"]).stats_interval == 0.0
    with pytest.raises(SystemExit):
        parse_args(["--stats-interval", "-1"])
