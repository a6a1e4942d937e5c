"""The REST API as a plain dispatcher: ``(method, path, body bytes) -> (status, JSON value)``.

No web framework here: the Ryu glue routes every ``/api/...`` request to :meth:`RestApi.handle`,
and the tests call it directly. Errors all have the body
``{"error": {"code": <status>, "message": "...", "field": "..."}}``: 400 bad JSON or field,
404 unknown id or path, 405 method not allowed, 409 conflict, 500 (logged) for a bug.
The API is described by ``controller/openapi.yaml``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable

from controller.engine import Engine
from controller.policies import POLICIES
from controller.registry import KINDS, ApiError

LOG = logging.getLogger(__name__)
PREFIX = "/api"

# (method, path pattern) -> handler name; {id} is a decimal id, {kind} a collection
ROUTES: list[tuple[str, str, str]] = [
    ("GET", "/policy", "get_policy"),
    ("PUT", "/policy", "put_policy"),
    ("GET", "/order", "get_order"),
    ("GET", "/rules", "get_rules"),
    ("GET", "/stats", "get_stats"),
    ("DELETE", "/stats", "reset_stats"),
    ("GET", "/{kind}", "list_records"),
    ("POST", "/{kind}", "create_record"),
    ("GET", "/{kind}/{id}", "get_record"),
    ("PUT", "/{kind}/{id}", "put_record"),
    ("DELETE", "/{kind}/{id}", "delete_record"),
    ("POST", "/jobs/{id}/progress", "job_progress"),
    ("POST", "/coflows/{id}/progress", "coflow_progress"),
]

_KIND_RE = "(?P<kind>" + "|".join(KINDS) + ")"
_ID_RE = r"(?P<id>[0-9]{1,10})"


def _compile(pattern: str) -> re.Pattern:
    regex = re.escape(pattern).replace(r"\{kind\}", _KIND_RE).replace(r"\{id\}", _ID_RE)
    return re.compile(f"^{regex}/?$")


_COMPILED = [(method, _compile(pattern), name) for method, pattern, name in ROUTES]


class RestApi:
    """Routes requests to the engine and its registry.

    Args:
        engine: the controller engine (registry, policy, switches).
        on_change: called after every successful change, to wake the reorder loop.
    """

    def __init__(self, engine: Engine, on_change: Callable[[], None] = lambda: None) -> None:
        self.engine = engine
        self.registry = engine.registry
        self.on_change = on_change

    def handle(self, method: str, path: str, body: bytes = b"") -> tuple[int, object]:
        """Serve one request; never raises."""
        try:
            return self._dispatch(method.upper(), path, body)
        except ApiError as exc:
            return exc.status, exc.to_json()
        except Exception:
            LOG.exception("internal error serving %s %s", method, path)
            return 500, {"error": {"code": 500, "message": "internal error; see the log"}}

    def _dispatch(self, method: str, path: str, body: bytes) -> tuple[int, object]:
        if not path.startswith(PREFIX):
            raise ApiError(404, f"no such path {path!r}; the API lives under {PREFIX}/")
        rel = path[len(PREFIX) :] or "/"
        allowed = []
        for route_method, regex, name in _COMPILED:
            match = regex.match(rel)
            if match is None:
                continue
            if route_method != method:
                allowed.append(route_method)
                continue
            args = match.groupdict()
            if "id" in args:
                args["id"] = int(args["id"])
            return getattr(self, name)(_parse_json(body, method), **args)
        if allowed:
            raise ApiError(405, f"{method} not allowed on {path}; use {', '.join(allowed)}")
        raise ApiError(404, f"no such path {path!r}")

    def _changed(self) -> None:
        self.engine.note_event()
        self.on_change()

    # ---- policy and views ----------------------------------------------------------------------

    def get_policy(self, body) -> tuple[int, object]:
        return 200, {
            "name": self.engine.policy_name,
            "options": self.engine.policy_options,
            "available": sorted(POLICIES),
        }

    def put_policy(self, body) -> tuple[int, object]:
        if not isinstance(body, dict) or "name" not in body:
            raise ApiError(400, "name: is required", "name")
        unknown = sorted(set(body) - {"name", "options"})
        if unknown:
            raise ApiError(400, f"{unknown[0]}: unknown field (allowed: name, options)", unknown[0])
        self.engine.set_policy(body["name"], body.get("options"))
        self.on_change()
        return self.get_policy(None)

    def get_order(self, body) -> tuple[int, object]:
        return 200, self.engine.order_json()

    def get_rules(self, body) -> tuple[int, object]:
        return 200, self.engine.rules_json()

    def get_stats(self, body) -> tuple[int, object]:
        return 200, self.engine.stats_json()

    def reset_stats(self, body) -> tuple[int, object]:
        self.engine.reset_stats()
        return 200, self.engine.stats_json()

    # ---- registry ------------------------------------------------------------------------------

    def list_records(self, body, kind: str) -> tuple[int, object]:
        records = self.registry.records[kind]
        return 200, [self.registry.to_json(kind, records[i]) for i in sorted(records)]

    def create_record(self, body, kind: str) -> tuple[int, object]:
        record = self.registry.create(kind, _require_body(body))
        self._changed()
        return 201, self.registry.to_json(kind, record)

    def get_record(self, body, kind: str, id: int) -> tuple[int, object]:
        return 200, self.registry.to_json(kind, self.registry.get(kind, id))

    def put_record(self, body, kind: str, id: int) -> tuple[int, object]:
        record, created = self.registry.put(kind, id, _require_body(body))
        self._changed()
        return (201 if created else 200), self.registry.to_json(kind, record)

    def delete_record(self, body, kind: str, id: int) -> tuple[int, object]:
        removed = self.registry.delete(kind, id)
        self._changed()
        return 200, {"deleted": [{"kind": k, "id": i} for k, i in removed]}

    def job_progress(self, body, id: int) -> tuple[int, object]:
        job = self.registry.job_progress(id, _require_body(body))
        self._changed()
        return 200, self.registry.to_json("jobs", job)

    def coflow_progress(self, body, id: int) -> tuple[int, object]:
        coflow = self.registry.coflow_progress(id, _require_body(body))
        self._changed()
        if coflow is None:
            return 200, {"coflow_id": id, "finished": True}
        return 200, {**self.registry.to_json("coflows", coflow), "finished": False}


def _parse_json(body: bytes, method: str):
    if method in ("GET", "DELETE") or not body or not body.strip():
        return None
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"body: not valid JSON ({exc})", "body") from None


def _require_body(body):
    if body is None:
        raise ApiError(400, "body: a JSON object is required", "body")
    return body
