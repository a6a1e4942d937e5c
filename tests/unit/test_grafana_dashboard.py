"""grafana/hpo-controller.json: a Grafana dashboard on a Prometheus data source chosen by a
variable, whose every query names only metrics the controller exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from controller.engine import Engine
from controller.registry import Registry
from controller.telemetry import Telemetry

DASHBOARD = Path(__file__).parents[2] / "grafana" / "hpo-controller.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# PromQL words that are not metric names where they stand (no parenthesis after them)
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan"}  # fmt: skip
# the sample names a family of each type has in the text format
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count"),
            "info": ("_info",), "summary": ("", "_sum", "_count"), "unknown": ("",)}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana's variables allowed)."""
    expr = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # strings (label values, regexes)
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges ($__rate_interval among them)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        word, rest = match.group(), expr[match.end() :].lstrip()
        if rest.startswith("(") or word in KEYWORDS:  # a function or an aggregation
            continue
        names.add(word)
    return names


def exported() -> set[str]:
    """Every sample name the controller's registry can serve."""
    telemetry = Telemetry(Engine(Registry(":memory:"), "sincronia"))
    return {
        family.name + suffix
        for family in telemetry.registry.collect()
        for suffix in SUFFIXES[family.type]
    }


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict) -> list[dict]:
    """Every panel but rows, those inside collapsed rows included."""
    out = []
    for panel in dashboard["panels"]:
        out += panel.get("panels", []) if panel["type"] == "row" else [panel]
    return out


def test_the_metric_name_parser_skips_functions_labels_and_variables():
    expr = (
        "histogram_quantile(0.99, sum by (le, policy) (rate(hpo_reorder_latency_seconds_bucket"
        '{instance=~"$instance", status=~"5.."}[$__rate_interval]))) / on(instance) '
        "group_left up"
    )
    assert metric_names(expr) == {"hpo_reorder_latency_seconds_bucket", "up"}


def test_the_dashboard_takes_its_prometheus_from_a_variable(dashboard):
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("instance", "switch"):
        assert variables[name]["datasource"] == DATASOURCE
        # Grafana's label_values(<series selector>, <label>)
        selector = re.fullmatch(r"label_values\((.*), *\w+\)", variables[name]["definition"])
        assert metric_names(selector[1]) <= exported()
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert panel["targets"] and len(refs) == len(set(refs)), panel["title"]


def test_every_query_names_only_metrics_the_controller_exports(dashboard):
    known = exported()
    used = set()
    for panel in panels(dashboard):
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            assert names <= known, (panel["title"], names - known)
            used |= names
    # what an operator looks at: latency, occupancy, port bytes by level, errors, rules and
    # meters, event-loop lag
    assert {
        "hpo_reorder_latency_seconds_bucket",
        "hpo_level_coflows",
        "hpo_port_level_tx_bytes_total",
        "hpo_reorder_failures_total",
        "hpo_rest_requests_total",
        "hpo_switch_rules",
        "hpo_switch_meters",
        "hpo_event_loop_hold_seconds_bucket",
    } <= used


def test_reorder_latency_is_charted_at_p50_p95_and_p99(dashboard):
    exprs = [t["expr"] for p in panels(dashboard) for t in p["targets"]]
    quantiles = {
        float(m[1])
        for e in exprs
        if "hpo_reorder_latency_seconds_bucket" in e
        for m in [re.match(r"histogram_quantile\(([0-9.]+)", e)]
        if m
    }
    assert quantiles == {0.5, 0.95, 0.99}
