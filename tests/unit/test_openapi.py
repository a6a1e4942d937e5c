"""controller/openapi.yaml describes exactly the API the dispatcher and registry implement."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from controller.api import PREFIX, ROUTES
from controller.policies import POLICIES
from controller.registry import BODY_FIELDS, KINDS, NULLABLE_FIELDS

SPEC = yaml.safe_load((Path(__file__).parents[2] / "controller/openapi.yaml").read_text())
SCHEMAS = SPEC["components"]["schemas"]
BODY_SCHEMAS = {"tasks": "Task", "stages": "Stage", "jobs": "Job", "coflows": "Coflow",
                "flow": "Flow", "job_progress": "JobProgress",
                "coflow_progress": "CoflowProgress"}  # fmt: skip


def spec_operations() -> set[tuple[str, str]]:
    ops = set()
    for path, item in SPEC["paths"].items():
        for method in item:
            if method != "parameters":
                ops.add((method.upper(), path))
    return ops


def code_operations() -> set[tuple[str, str]]:
    ops = set()
    for method, pattern, _name in ROUTES:
        kinds = KINDS if "{kind}" in pattern else [None]
        for kind in kinds:
            path = pattern.replace("{kind}", kind) if kind else pattern
            ops.add((method, PREFIX + path))
    return ops


def test_spec_is_openapi_3():
    assert SPEC["openapi"].startswith("3.")


def test_every_route_is_documented_and_nothing_else():
    assert spec_operations() == code_operations()


@pytest.mark.parametrize("name", sorted(BODY_SCHEMAS))
def test_body_schemas_match_the_validator(name):
    schema = SCHEMAS[BODY_SCHEMAS[name]]
    writable = {k for k, v in schema["properties"].items() if not v.get("readOnly")}
    allowed, required = BODY_FIELDS[name]
    assert writable == allowed
    assert set(schema.get("required", [])) == required
    assert schema.get("additionalProperties") is False


def test_policy_enum_matches_the_registry():
    assert set(SCHEMAS["PolicyChoice"]["properties"]["name"]["enum"]) == set(POLICIES)


def test_policy_options_match_every_policys_declaration():
    documented = SCHEMAS["PolicyOptions"]["properties"]
    declared = {}
    for policy in POLICIES.values():
        for key, spec in policy.OPTIONS.items():
            declared.setdefault(key, set()).add(spec.schema()["type"])
    assert set(documented) == set(declared)
    for key, types in declared.items():
        assert types == {documented[key]["type"]}, key
        assert documented[key].get("nullable", False) == any(
            p.OPTIONS[key].nullable for p in POLICIES.values() if key in p.OPTIONS
        )


def test_nullable_fields_are_documented_as_nullable():
    for name in ("Task", "Stage", "Job", "Coflow"):
        own_id = name.lower() + "_id"
        for key, prop in SCHEMAS[name]["properties"].items():
            if prop.get("readOnly"):
                continue
            wanted = key in NULLABLE_FIELDS and key != own_id
            assert prop.get("nullable", False) == wanted, (name, key)


def test_every_reference_resolves():
    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref":
                    _, section, kind, name = value.split("/")
                    assert name in SPEC[section][kind], value
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(SPEC)


def test_every_bound_in_the_spec_is_the_codes():
    """controller/limits.py is the one source of the bounds: the document states the same."""
    from controller import limits

    ids = {"minimum": 0, "maximum": limits.MAX_ID}
    sizes = {"minimum": 0, "maximum": limits.MAX_FLOW_BYTES}
    weight = {"minimum": limits.MIN_WEIGHT, "maximum": limits.MAX_WEIGHT}
    wanted = {
        ("Flow", "bytes"): sizes,
        ("Flow", "remaining_bytes"): sizes,
        ("Task", "task_id"): ids,
        ("Task", "weight"): weight,
        ("Stage", "stage_id"): ids,
        ("Stage", "task_id"): ids,
        ("Stage", "weight"): weight,
        ("Job", "job_id"): ids,
        ("Job", "stage_id"): ids,
        ("Job", "task_id"): ids,
        ("Job", "weight"): weight,
        ("Job", "iteration_budget"): {"minimum": 1, "maximum": limits.MAX_ITERATIONS},
        ("Job", "iterations_done"): {"minimum": 0, "maximum": limits.MAX_ITERATIONS},
        ("Job", "flows"): {"maxItems": limits.MAX_FLOWS},
        ("Job", "tcp_ports"): {"maxItems": limits.MAX_TCP_PORTS, "uniqueItems": True},
        ("Coflow", "coflow_id"): ids,
        ("Coflow", "job_id"): ids,
        ("Coflow", "stage_id"): ids,
        ("Coflow", "weight"): weight,
        ("Coflow", "flows"): {"minItems": 1, "maxItems": limits.MAX_FLOWS},
        ("JobProgress", "iterations_done"): {"minimum": 0, "maximum": limits.MAX_ITERATIONS},
        ("JobProgress", "iteration_budget"): {"minimum": 1, "maximum": limits.MAX_ITERATIONS},
        ("CoflowProgress", "remaining_bytes"): {"maxItems": limits.MAX_FLOWS},
    }
    for (schema, name), bounds in wanted.items():
        prop = SCHEMAS[schema]["properties"][name]
        assert {k: prop.get(k) for k in bounds} == bounds, (schema, name)
    assert SCHEMAS["CoflowProgress"]["properties"]["remaining_bytes"]["items"] == {
        "type": "number", **sizes,
    }  # fmt: skip
    for side in ("src", "dst"):
        assert SCHEMAS["Flow"]["properties"][side]["format"] == "ipv4"
    text = SPEC["info"]["description"]
    for number in (f"{limits.MAX_FLOWS:,}", f"{limits.MAX_TCP_PORTS:,}",
                   f"{limits.MAX_JOB_RULES:,}", "6.31152e18"):  # fmt: skip
        assert number in text, number


def test_every_policy_option_bound_in_the_spec_is_the_declarations():
    documented = SCHEMAS["PolicyOptions"]["properties"]
    for policy in POLICIES.values():
        for key, spec in policy.OPTIONS.items():
            schema = spec.schema()
            for bound in ("minimum", "maximum", "exclusiveMinimum"):
                assert documented[key].get(bound) == schema.get(bound), (policy.name, key, bound)
