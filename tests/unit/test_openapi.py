"""controller/openapi.yaml describes exactly the API the dispatcher and registry implement."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from controller.api import PREFIX, ROOT_ROUTES, ROUTES
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
    ops.update((method, path) for method, path, _name in ROOT_ROUTES)
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
    accuracy = {"minimum": limits.MIN_ACCURACY, "maximum": limits.MAX_ACCURACY}
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
        ("JobProgress", "accuracy"): accuracy,
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
            for bound in ("minimum", "maximum", "exclusiveMinimum", "enum"):
                assert documented[key].get(bound) == schema.get(bound), (policy.name, key, bound)


def _resolve(node: dict) -> dict:
    """``node`` with its ``$ref`` (and theirs) followed."""
    while "$ref" in node:
        _, section, kind, name = node["$ref"].split("/")
        node = SPEC[section][kind][name]
    return node


def _operations() -> dict[str, dict]:
    """Every operation by operationId, with its path's parameters added to its own."""
    found = {}
    for item in SPEC["paths"].values():
        for method, operation in item.items():
            if method != "parameters":
                shared = [_resolve(p) for p in item.get("parameters", [])]
                own = [_resolve(p) for p in operation.get("parameters", [])]
                found[operation["operationId"]] = {**operation, "all_parameters": shared + own}
    return found


def _links() -> list[tuple[str, str, str, dict, dict]]:
    """(source operationId, status, link name, link, response schema) of every link."""
    found = []
    for operation_id, operation in _operations().items():
        for status, response in operation["responses"].items():
            response = _resolve(response)
            schema = _resolve(response.get("content", {}).get("application/json", {})
                              .get("schema", {}))  # fmt: skip
            for name, link in response.get("links", {}).items():
                found.append((operation_id, status, name, link, schema))
    return found


def _target(link: dict) -> str | None:
    """The operationId of a link's target, named or referred to (``operationRef``: a JSON
    pointer into this document, ``#/paths/<path>/<method>``); ``None`` if there is none."""
    if "operationRef" not in link:
        return link.get("operationId")
    _, paths, path, method = link["operationRef"].split("/")
    path = path.replace("~1", "/").replace("~0", "~")
    return SPEC[paths].get(path, {}).get(method, {}).get("operationId")


def test_every_registration_links_to_where_its_id_is_used():
    """Schemathesis' stateful phase follows the links: from every created record at least to
    its own GET, PUT and DELETE."""
    linked = {(source, status) for source, status, *_ in _links()}
    for kind in ("task", "stage", "job", "coflow"):
        assert (f"create_{kind}", "201") in linked
        targets = {
            _target(link) for source, _, _, link, _ in _links() if source == f"create_{kind}"
        }
        assert {f"get_{kind}", f"put_{kind}", f"delete_{kind}"} <= targets


def test_every_link_targets_an_operation_with_what_it_fills_from_the_response():
    """Every link names an operation that exists, fills only its parameters and writable body
    fields, and takes each value from a field the source's response has."""
    operations = _operations()
    for source, status, name, link, schema in _links():
        where = f"{source} {status} {name}"
        keys = {"description", "parameters", "requestBody"}
        assert len(set(link) - keys) == 1 and set(link) - keys <= {"operationId", "operationRef"}
        operation_id = _target(link)
        target = operations.get(operation_id)
        assert target is not None, f"{where}: no operation {operation_id}"
        expressions = list(link.get("parameters", {}).values())
        for key in link.get("parameters", {}):
            location, _, parameter = key.partition(".")
            assert any(p["in"] == location and p["name"] == parameter
                       for p in target["all_parameters"]), f"{where}: {key}"  # fmt: skip
        if "requestBody" in link:
            body = _resolve(target["requestBody"]["content"]["application/json"]["schema"])
            for key, expression in link["requestBody"].items():
                assert key in body["properties"] and not body["properties"][key].get("readOnly")
                expressions.append(expression)
        assert expressions, where
        for expression in expressions:
            prefix, _, field = expression.partition("#/")
            assert prefix == "$response.body" and field in schema["properties"], (where, expression)
