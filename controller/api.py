"""The REST API as a plain dispatcher: ``(method, path, body bytes) -> (status, JSON value)``.

No web framework here: the Ryu glue routes every ``/api/...`` request and ``/metrics`` (the
metrics in Prometheus' text format, :mod:`controller.telemetry`) to :meth:`RestApi.respond`,
and the tests call it directly. Errors all have the body
``{"error": {"code": <status>, "message": "...", "field": "..."}}``: 400 bad JSON or field,
401 no or a wrong token, 403 a cross-origin request or a foreign ``Host``, 404 unknown id or
path, 405 method not allowed (with ``Allow``), 409 conflict, 413 a body over 1 MiB, 415 a
body that is not JSON,
500 (logged) for a bug, 503 no plan because the reorder failed.
The API is described by ``controller/openapi.yaml``.
"""

from __future__ import annotations

import copy
import functools
import hmac
import ipaddress
import json
import logging
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from controller.engine import Engine, NoPlan
from controller.policies import POLICIES, Policy
from controller.registry import (
    KINDS,
    DuplicateRecord,
    InvalidInput,
    RegistryError,
    UnknownRecord,
)

if TYPE_CHECKING:  # (prometheus_client is imported when an API is made, not with this module)
    from controller.telemetry import Telemetry

LOG = logging.getLogger(__name__)
PREFIX = "/api"
METRICS_PATH = "/metrics"
JSON = "application/json"

# (method, path pattern) -> handler name; {id} is a decimal id, {kind} a collection
ROUTES: list[tuple[str, str, str]] = [
    ("GET", "/openapi.json", "get_spec"),
    ("GET", "/policy", "get_policy"),
    ("PUT", "/policy", "put_policy"),
    ("GET", "/order", "get_order"),
    ("GET", "/rules", "get_rules"),
    ("GET", "/stats", "get_stats"),
    ("GET", "/fabric", "get_fabric"),
    ("DELETE", "/stats", "reset_stats"),
    ("GET", "/{kind}", "list_records"),
    ("POST", "/{kind}", "create_record"),
    ("GET", "/{kind}/{id}", "get_record"),
    ("PUT", "/{kind}/{id}", "put_record"),
    ("DELETE", "/{kind}/{id}", "delete_record"),
    ("POST", "/jobs/{id}/progress", "job_progress"),
    ("POST", "/coflows/{id}/progress", "coflow_progress"),
]
# routes outside PREFIX: Prometheus scrapes /metrics, the path it asks for unless told otherwise
ROOT_ROUTES: list[tuple[str, str, str]] = [("GET", METRICS_PATH, "get_metrics")]

_KIND_RE = "(?P<kind>" + "|".join(KINDS) + ")"
_ID_RE = r"(?P<id>[0-9]{1,10})"


def _compile(pattern: str) -> re.Pattern:
    regex = re.escape(pattern).replace(r"\{kind\}", _KIND_RE).replace(r"\{id\}", _ID_RE)
    return re.compile(f"^{regex}/?$")


_COMPILED = [(method, _compile(pattern), name) for method, pattern, name in ROUTES]
# the endpoint label of a request to no route (raw paths would make labels without bound)
OTHER_ENDPOINT = "other"


SPEC_PATH = Path(__file__).with_name("openapi.yaml")
# One request is served on the only event loop (OpenFlow included): a bound on its size is a
# bound on how long it can hold that loop. 1 MiB is ~10,000 flows, far above any HPO job.
MAX_BODY_BYTES = 1 << 20


@functools.cache
def openapi_document() -> dict:
    """``controller/openapi.yaml`` as a JSON value (read once)."""
    import yaml  # only this view needs it

    return yaml.safe_load(SPEC_PATH.read_text())


def with_policies(document: dict, extra: Mapping[str, type[Policy]]) -> dict:
    """``document`` (the OpenAPI one) with the policies ``extra`` (loaded at start) among the
    names ``PUT /api/policy`` takes and their options among its options, so that a client
    checking requests against the served document may name them. The document itself is
    left as it is; an option already described (a built-in's keyword) keeps its description."""
    document = copy.deepcopy(document)
    schemas = document["components"]["schemas"]
    schemas["PolicyChoice"]["properties"]["name"]["enum"] += list(extra)
    described = schemas["PolicyOptions"]["properties"]
    for name, policy in extra.items():
        for key, spec in policy.OPTIONS.items():
            if key not in described:
                described[key] = {**spec.schema(), "description": f"{name}: {spec.doc}"}
    return document


class ApiError(Exception):
    """A refused request: HTTP ``status``, ``message`` naming the problem, the body ``field`` at
    fault (if one is) and extra response headers (e.g. ``Allow`` on a 405)."""

    def __init__(
        self,
        status: int,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.headers = headers or {}

    @classmethod
    def of(cls, exc: RegistryError | NoPlan) -> ApiError:
        """The HTTP error for a refusal of the registry or the engine."""
        return cls(DOMAIN_STATUS[type(exc)], str(exc), getattr(exc, "field", None))

    def to_json(self) -> dict:
        """The error body every refused request gets: ``{"error": {code, message, field}}``."""
        error: dict = {"code": self.status, "message": self.message}
        if self.field:
            error["field"] = self.field
        return {"error": error}


DOMAIN_STATUS = {InvalidInput: 400, UnknownRecord: 404, DuplicateRecord: 409, NoPlan: 503}


@dataclass(frozen=True)
class Reply:
    """A response: HTTP status, payload, extra headers and the payload's media type (a JSON
    value for ``application/json``, else the body's bytes)."""

    status: int
    payload: object
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = JSON


class RestApi:
    """Routes requests to the engine and its registry, after the request checks.

    Args:
        engine: the controller engine (registry, policy, switches).
        on_change: called after every successful change, to wake the reorder loop.
        token: if set, every request must carry ``Authorization: Bearer <token>`` (401 else).
        allowed_hosts: host names the ``Host`` header may carry (403 else, against DNS
            rebinding); ``None`` accepts any.
        telemetry: the metrics ``GET /metrics`` serves, which count every request by route
            template, method and status; ``None``: a :class:`controller.telemetry.Telemetry`
            of ``engine`` alone, with no switch counters.

    Whatever the settings, a request that a browser page on another site could send is
    refused: one with an ``Origin`` header (403), and a body that is not declared
    ``application/json`` (415, the only type a page can send cross-site without asking).
    """

    def __init__(
        self,
        engine: Engine,
        on_change: Callable[[], None] = lambda: None,
        token: str | None = None,
        allowed_hosts: Collection[str] | None = None,
        fabric: Callable[[], dict] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        if telemetry is None:
            from controller.telemetry import Telemetry

            telemetry = Telemetry(engine)
        self.telemetry = telemetry
        self.engine = engine
        self.fabric = fabric
        self.registry = engine.registry
        self.on_change = on_change
        self.token = token
        self.allowed_hosts = None if allowed_hosts is None else frozenset(allowed_hosts)

    def handle(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, object]:
        """Serve one request: ``(status, JSON value)``; never raises."""
        reply = self.respond(method, path, body, headers)
        return reply.status, reply.payload

    def respond(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """Serve one request with the response headers it needs (``Allow`` on a 405); never
        raises. ``headers`` are the request's, in any case. The request is counted in the
        metrics under its route's template (``/api/jobs/{id}``), method and status."""
        method = method.upper()
        endpoint, routes = _resolve(path)
        reply = self._respond(method, path, body, headers or {}, routes)
        try:
            self.telemetry.request(endpoint, method, reply.status)
        except Exception:  # (the request was served; a metric is not worth failing it)
            LOG.exception("counting %s %s", method, path)
        return reply

    def _respond(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        routes: list[tuple[str, str, dict]],
    ) -> Reply:
        try:
            self._check_request(method, body, headers)
            result = self._dispatch(method, path, body, routes)
            return result if isinstance(result, Reply) else Reply(*result)
        except (RegistryError, NoPlan) as exc:
            error = ApiError.of(exc)
            return Reply(error.status, error.to_json())
        except ApiError as exc:
            return Reply(exc.status, exc.to_json(), exc.headers)
        except Exception:
            LOG.exception("internal error serving %s %s", method, path)
            return Reply(500, {"error": {"code": 500, "message": "internal error; see the log"}})

    def _check_request(self, method: str, body: bytes, headers: Mapping[str, str]) -> None:
        if len(body) > MAX_BODY_BYTES:
            raise ApiError(413, f"body: {len(body)} bytes, at most {MAX_BODY_BYTES} are taken")
        lower = {k.lower(): v for k, v in headers.items()}
        if self.token is not None:
            given = lower.get("authorization", "")
            expected = f"Bearer {self.token}"
            if not hmac.compare_digest(given.encode(), expected.encode()):
                raise ApiError(401, "missing or wrong token (send Authorization: Bearer <token>)")
        if "origin" in lower:
            raise ApiError(403, f"cross-origin requests are refused (Origin: {lower['origin']})")
        if self.allowed_hosts is not None and "host" in lower:
            host = _host_name(lower["host"])
            if host not in self.allowed_hosts:
                raise ApiError(403, f"Host {lower['host']!r} is not an address of this controller")
        if method in ("POST", "PUT") and body.strip():
            content_type = lower.get("content-type", "").split(";")[0].strip().lower()
            if content_type != "application/json":
                raise ApiError(
                    415, f"Content-Type must be application/json, got {content_type or 'none'!r}"
                )

    def _dispatch(
        self, method: str, path: str, body: bytes, routes: list[tuple[str, str, dict]]
    ) -> tuple[int, object] | Reply:
        if not routes and not path.startswith(PREFIX):
            raise ApiError(404, f"no such path {path!r}; the API lives under {PREFIX}/")
        allowed = []
        for route_method, name, args in routes:
            if route_method != method:
                allowed.append(route_method)
                continue
            return getattr(self, name)(_parse_json(body, method), **args)
        if allowed:
            raise ApiError(
                405,
                f"{method} not allowed on {path}; use {', '.join(allowed)}",
                headers={"Allow": ", ".join(allowed)},
            )
        raise ApiError(404, f"no such path {path!r}")

    def _changed(self) -> None:
        self.engine.note_event()
        self.on_change()

    # ---- policy and views ----------------------------------------------------------------------

    def get_metrics(self, body) -> Reply:
        """``GET /metrics``: every metric in Prometheus' text exposition format."""
        from controller.telemetry import CONTENT_TYPE

        return Reply(200, self.telemetry.render(), content_type=CONTENT_TYPE)

    def get_spec(self, body) -> tuple[int, object]:
        """``GET /api/openapi.json``: the OpenAPI document this API follows (with the policies
        loaded at start besides the built-ins, if any)."""
        offered = self.engine.policies
        extra = {name: offered[name] for name in sorted(offered) if name not in POLICIES}
        return 200, openapi_document() if not extra else with_policies(openapi_document(), extra)

    def get_policy(self, body) -> tuple[int, object]:
        """``GET /api/policy``: the policy in force, its options and the option specs of every
        policy it may be switched to (the built-ins and those loaded at start)."""
        offered = self.engine.policies
        return 200, {
            "name": self.engine.policy_name,
            "options": self.engine.policy_options,
            "available": sorted(offered),
            "option_specs": {
                name: {key: spec.schema() for key, spec in offered[name].OPTIONS.items()}
                for name in sorted(offered)
            },
        }

    def put_policy(self, body) -> tuple[int, object]:
        """``PUT /api/policy``: switch the policy (``name``, optional ``options``); persisted."""
        if not isinstance(body, dict) or "name" not in body:
            raise ApiError(400, "name: is required", "name")
        unknown = sorted(set(body) - {"name", "options"})
        if unknown:
            raise ApiError(400, f"{unknown[0]}: unknown field (allowed: name, options)", unknown[0])
        self.engine.set_policy(body["name"], body.get("options"))
        self.on_change()
        return self.get_policy(None)

    def get_order(self, body) -> tuple[int, object]:
        """``GET /api/order``: the current plan's coflow order, levels, DSCP and rates."""
        return 200, self.engine.order_json()

    def get_rules(self, body) -> tuple[int, object]:
        """``GET /api/rules``: the wanted rules and what each switch holds."""
        return 200, self.engine.rules_json()

    def get_stats(self, body) -> tuple[int, object]:
        """``GET /api/stats``: counters, latencies, reorder failures and GC pauses."""
        return 200, self.engine.stats_json()

    def get_fabric(self, body) -> tuple[int, object]:
        """``GET /api/fabric``: switches, discovered links, host locations, forwarding rules
        per switch and the fabric's recent changes (reroutes)."""
        return 200, self.fabric() if self.fabric else {"switches": [], "links": [], "hosts": {}}

    def reset_stats(self, body) -> tuple[int, object]:
        """``DELETE /api/stats``: start the counters and latency samples afresh."""
        self.engine.reset_stats()
        return 200, self.engine.stats_json()

    # ---- registry ------------------------------------------------------------------------------

    def list_records(self, body, kind: str) -> tuple[int, object]:
        """``GET /api/{kind}``: every record of a collection, by id."""
        records = self.registry.records[kind]
        return 200, [self.registry.to_json(kind, records[i]) for i in sorted(records)]

    def create_record(self, body, kind: str) -> tuple[int, object]:
        """``POST /api/{kind}``: register a new record (409 if its id is taken)."""
        record = self.registry.create(kind, _require_body(body))
        self._changed()
        return 201, self.registry.to_json(kind, record)

    def get_record(self, body, kind: str, id: int) -> tuple[int, object]:
        """``GET /api/{kind}/{id}``: one record."""
        return 200, self.registry.to_json(kind, self.registry.get(kind, id))

    def put_record(self, body, kind: str, id: int) -> tuple[int, object]:
        """``PUT /api/{kind}/{id}``: create or replace a record (stored progress is kept unless the
        body sets it)."""
        record, created = self.registry.put(kind, id, _require_body(body))
        self._changed()
        return (201 if created else 200), self.registry.to_json(kind, record)

    def delete_record(self, body, kind: str, id: int) -> tuple[int, object]:
        """``DELETE /api/{kind}/{id}``: delete a record and what depends on it."""
        removed = self.registry.delete(kind, id)
        self._changed()
        return 200, {"deleted": [{"kind": k, "id": i} for k, i in removed]}

    def job_progress(self, body, id: int) -> tuple[int, object]:
        """``POST /api/jobs/{id}/progress``: a job's iterations done."""
        job = self.registry.job_progress(id, _require_body(body))
        self._changed()
        return 200, self.registry.to_json("jobs", job)

    def coflow_progress(self, body, id: int) -> tuple[int, object]:
        """``POST /api/coflows/{id}/progress``: a coflow's remaining bytes, or that it is done."""
        coflow = self.registry.coflow_progress(id, _require_body(body))
        self._changed()
        if coflow is None:
            return 200, {"coflow_id": id, "finished": True}
        return 200, {**self.registry.to_json("coflows", coflow), "finished": False}


def _resolve(path: str) -> tuple[str, list[tuple[str, str, dict]]]:
    """The route template ``path`` matches (``/api/jobs/{id}``: a collection's name is kept, an
    id is not; :data:`OTHER_ENDPOINT` if none), and the ``(method, handler name, arguments)``
    of every route it matches."""
    if not path.startswith(PREFIX):
        routes = [(method, name, {}) for method, root, name in ROOT_ROUTES if root == path]
        return (path if routes else OTHER_ENDPOINT), routes
    rel = path[len(PREFIX) :] or "/"
    endpoint, routes = OTHER_ENDPOINT, []
    for route_method, regex, name in _COMPILED:
        match = regex.match(rel)
        if match is None:
            continue
        args = match.groupdict()
        if "id" in args:
            args["id"] = int(args["id"])
        if not routes:
            template = PREFIX + next(p for _, p, n in ROUTES if n == name)
            endpoint = template.replace("{kind}", args["kind"]) if "kind" in args else template
        routes.append((route_method, name, args))
    return endpoint, routes


LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def is_loopback(address: str) -> bool:
    """Whether a listen address only takes connections from this machine."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def allowed_hosts(listen_address: str) -> frozenset[str] | None:
    """Names a request's ``Host`` header may carry: loopback and the listen address; ``None``
    (any) when listening on every address, where any name of the machine is fair."""
    try:
        every = not listen_address or ipaddress.ip_address(listen_address).is_unspecified
    except ValueError:  # a host name
        every = False
    return None if every else LOOPBACK_NAMES | {listen_address}


def _host_name(host_header: str) -> str:
    """The name in a ``Host`` header without its port (``[::1]:8080`` -> ``::1``)."""
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _parse_json(body: bytes, method: str):
    if method in ("GET", "DELETE") or not body or not body.strip():
        return None
    try:
        return json.loads(body)
    except RecursionError:
        raise ApiError(400, "body: JSON nested too deeply", "body") from None
    except ValueError as exc:  # bad UTF-8, bad JSON, an integer of more than 4,300 digits
        raise ApiError(400, f"body: not valid JSON ({exc})", "body") from None


def _require_body(body):
    if body is None:
        raise ApiError(400, "body: a JSON object is required", "body")
    return body
