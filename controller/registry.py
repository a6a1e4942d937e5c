"""The controller's registry of HPO tasks, stages, jobs and coflows, validated and persistent.

Pure Python (``sqlite3`` is the only I/O): the REST layer hands it parsed JSON, it validates the
whole request before touching anything (a bad request changes nothing), writes through to SQLite
and keeps the records in memory. :meth:`Registry.cluster_state` turns the records into the
scheduling core's :class:`~controller.model.ClusterState`.

Jobs may carry a ``flows`` template: the synchronisation coflow of one iteration. A running job
(``iterations_done < iteration_budget``) with no registered coflow in flight is then scheduled
through an *implicit* coflow built from its template, so its traffic keeps its priority between
explicit coflow registrations and a job manager only has to report progress. The implicit
coflow stands for the current iteration's synchronisation, so it arrives when that iteration
began (the job's last progress report, or its registration), as every iteration's coflow does
in the simulator and in the papers (one coflow per iteration): arrival-ordered policies such as
FIFO-LM then order iterations, not jobs.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import math
import operator
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any

from controller.limits import (
    MAX_ACCURACY,
    MAX_FLOW_BYTES,
    MAX_FLOWS,
    MAX_ID,
    MAX_JOB_RULES,
    MAX_TCP_PORTS,
    MAX_WEIGHT,
    MIN_ACCURACY,
    MIN_WEIGHT,
    brief,
    job_rules,
)
from controller.model import (
    ACCURACY_FIELDS,
    ClusterState,
    Coflow,
    CoflowIndex,
    Flow,
    Host,
    Job,
    Stage,
    accuracy_report,
    port_bytes,
)
from controller.policies import check_options, is_plugin_reference, policy_class

# Implicit coflows of jobs live above every registrable coflow id.
IMPLICIT_COFLOW_BASE = 2**32
KINDS = ("tasks", "stages", "jobs", "coflows")


class RegistryError(Exception):
    """A request the registry refuses: ``message`` names the problem, ``field`` the body field
    at fault (if one is). The REST API maps each kind to its HTTP status."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidInput(RegistryError):
    """A body or value that is not valid (a wrong type or range, or a reference to a record
    that is not registered)."""


class UnknownRecord(RegistryError):
    """No such collection, or no record with that id."""


class DuplicateRecord(RegistryError):
    """A record with that id is already registered (create, not replace)."""


class DatabaseError(Exception):
    """The registry's SQLite file cannot be used; the message names the file and the problem,
    on one line (SQLite's reports can span several: their lines are joined with "; ")."""

    def __init__(self, message: str) -> None:
        super().__init__("; ".join(line.strip() for line in message.splitlines() if line.strip()))


def bad(field_name: str, problem: str) -> InvalidInput:
    """The :class:`InvalidInput` for ``field_name`` with ``problem`` (``"field: problem"``)."""
    return InvalidInput(f"{field_name}: {problem}", field_name)


@dataclass
class FlowSpec:
    """One flow of a job or coflow record: hosts, size and bytes left."""

    src: str
    dst: str
    size_bytes: float
    remaining_bytes: float


@dataclass
class TaskRecord:
    """An HPO task (a search): its name and weight."""

    task_id: int
    name: str = ""
    weight: float = 1.0


@dataclass
class StageRecord:
    """A stage of a task (a successive-halving rung): weight and arrival."""

    stage_id: int
    task_id: int | None = None
    weight: float = 1.0
    arrival_s: float = 0.0


@dataclass
class JobRecord:
    """A training job: its stage and task, flows, TCP ports, iteration budget and progress."""

    job_id: int
    stage_id: int | None = None
    task_id: int | None = None
    flows: list[FlowSpec] = field(default_factory=list)
    tcp_ports: list[int] = field(default_factory=list)
    iteration_budget: int = 1
    iterations_done: int = 0
    weight: float = 1.0
    arrival_s: float = 0.0
    # when the current iteration began: the last progress report that advanced the job, or
    # the registration (None); the implicit coflow's arrival
    iteration_arrival_s: float | None = None
    # the model accuracy of the last progress report that gave one and of the report before
    # it, with the iterations done at each (controller.model.Job's fields, JPAS' maif reading)
    accuracy: float | None = None
    accuracy_iterations: int = 0
    previous_accuracy: float | None = None
    previous_accuracy_iterations: int = 0

    @property
    def running(self) -> bool:
        """Whether the job has iterations left."""
        return self.iterations_done < self.iteration_budget


@dataclass
class CoflowRecord:
    """A coflow (one synchronisation's transfers): flows, owner job or stage, weight, arrival."""

    coflow_id: int
    flows: list[FlowSpec]
    job_id: int | None = None
    stage_id: int | None = None
    weight: float = 1.0
    arrival_s: float = 0.0


# Fields a request body may carry, and those it must carry (the OpenAPI document matches these;
# a test checks it). Ids come from the URL on PUT and are assigned on POST when absent.
BODY_FIELDS = {
    "tasks": ({"task_id", "name", "weight"}, set()),
    "stages": ({"stage_id", "task_id", "weight"}, set()),
    "jobs": (
        {
            "job_id",
            "stage_id",
            "task_id",
            "flows",
            "tcp_ports",
            "iteration_budget",
            "iterations_done",
            "weight",
        },
        set(),
    ),
    "coflows": ({"coflow_id", "flows", "job_id", "stage_id", "weight"}, {"flows"}),
    "flow": ({"src", "dst", "bytes", "remaining_bytes"}, {"src", "dst", "bytes"}),
    "job_progress": ({"iterations_done", "iteration_budget", "accuracy"}, {"iterations_done"}),
    "coflow_progress": ({"remaining_bytes", "done"}, set()),
}

# References that may be null (no task / stage / job); every other field, a record's own id
# included, may only be left out.
NULLABLE_FIELDS = frozenset({"task_id", "stage_id", "job_id"})

RECORD_TYPES = {
    "tasks": TaskRecord,
    "stages": StageRecord,
    "jobs": JobRecord,
    "coflows": CoflowRecord,
}


# ---- validation ------------------------------------------------------------------------------


def _check_fields(
    body: Any,
    allowed: AbstractSet[str],
    required: AbstractSet[str],
    where: str = "",
    nullable: AbstractSet[str] = frozenset(),
) -> dict:
    """``body`` as a dict of known fields with every required one, and ``null`` only in the
    ``nullable`` ones (references to other records); else a 400 naming the field."""
    if not isinstance(body, dict):
        raise bad(where or "body", "must be a JSON object")
    unknown = body.keys() - allowed
    if unknown:
        raise bad(
            f"{where}{min(unknown)}", f"unknown field (allowed: {', '.join(sorted(allowed))})"
        )
    missing = required - body.keys()
    if missing:
        raise bad(f"{where}{min(missing)}", "is required")
    if None in body.values():
        nulls = sorted(k for k, v in body.items() if v is None and k not in nullable)
        if nulls:
            raise bad(f"{where}{nulls[0]}", "must not be null (leave it out for the default)")
    return body


def _int(body: dict, name: str, default=None, low: int = 0, high: int = MAX_ID, where=""):
    """``body[name]`` (or ``default``) checked as an integer; ``None`` if both are absent."""
    value = body.get(name, default)
    return None if value is None else _int_value(value, where + name, low, high)


def _int_value(value: Any, name: str, low: int = 0, high: int = MAX_ID) -> int:
    """``value`` as an integer in ``low..high`` (``true`` is not 1), else a 400 naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(name, f"must be an integer, got {brief(value)}")
    if not low <= value <= high:
        raise bad(name, f"must be in {low}..{high}, got {brief(value)}")
    return value


def _ref_value(value: Any, name: str) -> int | None:
    """A reference to another record: ``None`` (none) or an id."""
    return None if value is None else _int_value(value, name)


def _not_registered(name: str, kind: str, ident: int) -> InvalidInput:
    """The error for reference ``name`` to a record of ``kind`` that does not exist."""
    return bad(name, f"no {kind[:-1]} {ident} is registered")


def _number(
    body: dict, name: str, default=None, low: float = 0.0, high: float = MAX_FLOW_BYTES, where=""
):
    """``body[name]`` (or ``default``) checked as a number in ``[low, high]``; ``None`` if both
    are absent."""
    value = body.get(name, default)
    return None if value is None else _number_value(value, where + name, low, high)


def _number_value(value: Any, name: str, low: float = 0.0, high: float = MAX_FLOW_BYTES) -> float:
    """``value`` as a float in ``[low, high]`` (finite by construction), else a 400 naming
    ``name``; the default range is a flow's size (:data:`~controller.limits.MAX_FLOW_BYTES`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(name, f"must be a number, got {brief(value)}")
    if value != value:
        raise bad(name, "must be a number, got NaN")
    if not low <= value <= high:  # (exact for integers of any size; inf fails here)
        raise bad(name, f"must be in [{low:g}, {high:g}], got {_shown(value)}")
    return float(value)


def _check_rules(n_flows: int, n_ports: int, field_name: str) -> None:
    """A 400 on ``field_name`` if ``n_flows`` flows matched on ``n_ports`` TCP ports ask for
    more marking rules than :data:`~controller.limits.MAX_JOB_RULES`."""
    rules = job_rules(n_flows, n_ports)
    if rules > MAX_JOB_RULES:
        raise bad(
            field_name,
            f"{n_flows} flows x {n_ports} TCP ports ask for up to {rules} marking rules; at "
            f"most {MAX_JOB_RULES} per job or coflow (4 x flows x ports, or 2 x flows without "
            "ports)",
        )


def _shown(value: int | float) -> str:
    return brief(value) if isinstance(value, int) else f"{value:.6g}"


def _weight(body: dict, name: str = "weight") -> float:
    """A record's weight (1 when absent), within :data:`~controller.limits.MIN_WEIGHT` ..
    :data:`~controller.limits.MAX_WEIGHT`."""
    return _weight_value(body.get(name, 1.0), name)


def _weight_value(value: Any, name: str = "weight") -> float:
    return _number_value(value, name, low=MIN_WEIGHT, high=MAX_WEIGHT)


def _seconds_value(value: Any, name: str) -> float:
    """A time on the registry's clock (an arrival): a finite number of seconds, >= 0. The API
    never takes one (the clock sets them), so this is a stored record's rule only."""
    if isinstance(value, float) and math.isinf(value):
        raise bad(name, f"must be a finite number of seconds, got {value}")
    return _number_value(value, name, low=0.0, high=sys.float_info.max)


def _name_value(value: Any, name: str = "name") -> str:
    if not isinstance(value, str):
        raise bad(name, "must be a string")
    return value


def _ipv4(value: Any, name: str, hosts: Mapping[str, str] | None = None) -> str:
    """``value`` as an IPv4 address: a known host's name resolved through ``hosts``, or an
    address given as a string; else a 400 naming ``name`` and the hosts it could name."""
    if hosts and isinstance(value, str) and value in hosts:
        return hosts[value]
    try:
        if not isinstance(value, str):  # (IPv4Address(1) would be 0.0.0.1, True too)
            raise TypeError
        return _normal_ipv4(value)
    except (ipaddress.AddressValueError, ValueError, TypeError):
        known = f" or one of {', '.join(sorted(hosts))}" if hosts else ""
        raise bad(name, f"must be an IPv4 address as a string{known}, got {brief(value)}") from None


@functools.lru_cache(maxsize=4096)
def _normal_ipv4(text: str) -> str:
    # (a registry of 10,000 records holds a few hundred addresses tens of thousands of times;
    # parsing each took most of the time it takes to check them when the file is opened)
    return str(ipaddress.IPv4Address(text))


def _flow_list(value: Any, name: str, required: bool) -> list:
    """A record's list of flows checked as a list (non-empty if ``required``) of at most
    :data:`~controller.limits.MAX_FLOWS`."""
    if not isinstance(value, list) or (required and not value):
        raise bad(name, "must be a non-empty list of flows")
    if len(value) > MAX_FLOWS:
        raise bad(name, f"{len(value)} flows; at most {MAX_FLOWS} per record")
    return value


def _flow_ends(src: str, dst: str, where: str) -> None:
    if src == dst:
        raise bad(where + "dst", "must differ from src")


def _remaining_value(value: Any, size: float, name: str, size_name: str) -> float:
    """A flow's bytes left: a size (:func:`_number_value`) of at most the flow's ``size``
    (``size_name`` says where it came from)."""
    remaining = _number_value(value, name)
    if remaining > size:
        raise bad(name, f"must be <= {size_name}")
    return remaining


def _tcp_ports_value(value: Any, name: str = "tcp_ports") -> list[int]:
    """A job's TCP ports: a list of at most :data:`~controller.limits.MAX_TCP_PORTS` distinct
    port numbers."""
    if not isinstance(value, list):
        raise bad(name, "must be a list of TCP port numbers")
    if len(value) > MAX_TCP_PORTS:
        raise bad(name, f"{len(value)} ports; at most {MAX_TCP_PORTS} per job")
    ports = [_int_value(port, f"{name}[{i}]", low=1, high=65535) for i, port in enumerate(value)]
    if len(set(ports)) != len(ports):
        raise bad(name, "has duplicates")
    return ports


def _budget_value(value: Any, name: str = "iteration_budget") -> int:
    return _int_value(value, name, low=1)


def _accuracy_value(value: Any, name: str = "accuracy") -> float:
    """A job's model accuracy: a number in [:data:`~controller.limits.MIN_ACCURACY`,
    :data:`~controller.limits.MAX_ACCURACY`]."""
    return _number_value(value, name, low=MIN_ACCURACY, high=MAX_ACCURACY)


def _accuracy_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """A stored job's accuracy fields, checked: each accuracy null or in range, each
    iteration count an integer, and a previous accuracy only before a later one."""
    accuracy, at, previous, previous_at = (data[name] for name in ACCURACY_FIELDS)
    accuracy = None if accuracy is None else _accuracy_value(accuracy)
    previous = None if previous is None else _accuracy_value(previous, "previous_accuracy")
    at = _int_value(at, "accuracy_iterations")
    previous_at = _int_value(previous_at, "previous_accuracy_iterations")
    if previous is not None and (accuracy is None or previous_at >= at):
        raise bad(
            "previous_accuracy",
            "needs an accuracy measured at more iterations (accuracy_iterations > "
            "previous_accuracy_iterations)",
        )
    return dict(zip(ACCURACY_FIELDS, (accuracy, at, previous, previous_at), strict=True))


def _done_value(value: Any, budget: int, name: str = "iterations_done", kept: str = "") -> int:
    """A job's completed iterations, at most its ``budget``; ``kept`` notes where the value
    came from when the request did not give it."""
    done = _int_value(value, name)
    if done > budget:
        raise bad(name, f"{done}{kept} must be <= iteration_budget ({budget})")
    return done


# ---- stored records and settings ---------------------------------------------------------------

# The references a record of each kind holds: (field, kind of the record it names).
REFERENCES = {
    "tasks": (),
    "stages": (("task_id", "tasks"),),
    "jobs": (("stage_id", "stages"), ("task_id", "tasks")),
    "coflows": (("job_id", "jobs"), ("stage_id", "stages")),
}


@functools.cache
def _declared(record_type: type) -> tuple[tuple, frozenset[str], frozenset[str]]:
    """A record dataclass's fields, their names, and the names of those without a default."""
    declared = fields(record_type)
    names = frozenset(f.name for f in declared)
    required = frozenset(
        f.name for f in declared if f.default is MISSING and f.default_factory is MISSING
    )
    return declared, names, required


def _stored_fields(record_type: type, data: Any, where: str = "") -> dict:
    """``data`` (a stored record or flow: the dataclass's fields) with every field present, the
    dataclass's default standing in for one left out; unknown fields and missing required ones
    are refused. Nulls pass here: each field's own check says whether it may be one."""
    declared, names, required = _declared(record_type)
    if not isinstance(data, dict):
        raise bad(where.rstrip(".") or "body", f"must be a JSON object, got {brief(data)}")
    _check_fields(data, names, required, where, nullable=names)
    full = {}
    for f in declared:
        if f.name in data:
            full[f.name] = data[f.name]
        else:
            full[f.name] = f.default_factory() if f.default is MISSING else f.default
    return full


def _stored_flows(value: Any, name: str, required: bool) -> list[FlowSpec]:
    """Stored flows: the API's rules on a flow, with addresses already resolved."""
    specs = []
    for i, flow in enumerate(_flow_list(value, name, required)):
        where = f"{name}[{i}]."
        data = _stored_fields(FlowSpec, flow, where)
        src = _ipv4(data["src"], where + "src")
        dst = _ipv4(data["dst"], where + "dst")
        _flow_ends(src, dst, where)
        size = _number_value(data["size_bytes"], where + "size_bytes")
        left = _remaining_value(
            data["remaining_bytes"], size, where + "remaining_bytes", "size_bytes"
        )
        specs.append(FlowSpec(src, dst, size, left))
    return specs


def stored_record(kind: str, ident: int, data: Any) -> Any:
    """The record of ``kind`` stored under id ``ident`` as ``data`` (its dataclass's fields, as
    :meth:`Registry._write` stores them), checked field by field with the rules a request body
    meets, references aside (:func:`check_references`).

    Raises:
        InvalidInput: naming the field and what is wrong with it.
    """
    data = _stored_fields(RECORD_TYPES[kind], data)
    id_name = kind[:-1] + "_id"
    if _int_value(data[id_name], id_name) != ident:
        raise bad(id_name, f"{data[id_name]} differs from the row's id {ident}")
    weight = _weight_value(data["weight"])
    if kind == "tasks":
        return TaskRecord(ident, _name_value(data["name"]), weight)
    refs = {name: _ref_value(data[name], name) for name, _ in REFERENCES[kind]}
    arrival = _seconds_value(data["arrival_s"], "arrival_s")
    if kind == "stages":
        return StageRecord(ident, refs["task_id"], weight, arrival)
    if kind == "coflows":
        flows = _stored_flows(data["flows"], "flows", required=True)
        return CoflowRecord(ident, flows, refs["job_id"], refs["stage_id"], weight, arrival)
    flows = _stored_flows(data["flows"], "flows", required=False)
    ports = _tcp_ports_value(data["tcp_ports"])
    _check_rules(len(flows), len(ports), "tcp_ports")
    budget = _budget_value(data["iteration_budget"])
    done = _done_value(data["iterations_done"], budget)
    began = data["iteration_arrival_s"]
    began = None if began is None else _seconds_value(began, "iteration_arrival_s")
    return JobRecord(
        ident, refs["stage_id"], refs["task_id"], flows, ports, budget, done, weight, arrival,
        began, **_accuracy_fields(data),
    )  # fmt: skip


def check_references(kind: str, record: Any, records: Mapping[str, Mapping[int, Any]]) -> None:
    """Every record ``record`` (of ``kind``) names exists in ``records``.

    Raises:
        InvalidInput: naming the first reference to a record that does not exist.
    """
    for name, target in REFERENCES[kind]:
        ident = getattr(record, name)
        if ident is not None and ident not in records[target]:
            raise _not_registered(name, target, ident)
    if kind == "coflows" and record.job_id is not None:  # matched on its job's ports
        _check_rules(len(record.flows), len(records["jobs"][record.job_id].tcp_ports), "flows")


def _policy_setting(value: Any) -> dict:
    """The saved policy, ``{"name": ..., "options": {...}}``, checked as the engine will use
    it: a known policy, and options its declaration accepts
    (:func:`~controller.policies.check_options`, which the policy's construction applies).

    Nothing is imported: a policy of outside code (``module:Class``, an entry point's name)
    that this process has not loaded is kept with its options unchecked; the engine uses it
    only if it was loaded at start, else says it ignores it (a database never makes the
    controller import code, nor refuses to open for a policy not loaded this time)."""
    if not isinstance(value, dict):
        raise bad("value", f"must be a JSON object, got {brief(value)}")
    _check_fields(value, {"name", "options"}, {"name"})
    name, options = value["name"], value.get("options", {})
    if not isinstance(name, str):
        raise bad("name", f"must be a string, got {brief(name)}")
    try:
        policy_class(name, load=False)
    except ValueError as exc:
        if not is_plugin_reference(name):
            raise bad("name", str(exc)) from None
        known = False
    else:
        known = True
    if not isinstance(options, dict):
        raise bad("options", f"must be a JSON object, got {brief(options)}")
    try:
        if known:
            check_options(name, options, load=False)
    except ValueError as exc:
        raise bad("options", str(exc)) from None
    return value


# The settings a registry keeps, each with the check its value meets.
SETTINGS: dict[str, Callable[[Any], Any]] = {"policy": _policy_setting}


def check_setting(key: Any, value: Any) -> Any:
    """``value`` if it is valid for the setting ``key``.

    Raises:
        InvalidInput: an unknown setting, or a value it does not accept, naming the field.
    """
    if key not in SETTINGS:
        raise bad("key", f"unknown setting {brief(key)} (known: {', '.join(sorted(SETTINGS))})")
    return SETTINGS[key](value)


def _stored_json(text: Any, name: str) -> Any:
    """A stored column's JSON text parsed; JSON's NaN and Infinity pass here, the fields'
    checks refuse them."""
    if not isinstance(text, str):
        raise bad(name, f"must be JSON text, got {brief(text)}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise bad(name, f"is not valid JSON ({exc})") from None


def _row_label(kind: Any, ident: Any) -> str:
    shown = ident if isinstance(ident, int) else brief(ident)
    if kind in RECORD_TYPES:
        return f"stored {kind[:-1]} {shown}"
    return f"stored record {shown} of kind {brief(kind)}"


# ---- the file ----------------------------------------------------------------------------------

# The registry's tables: each column's name, declared type and place in the primary key (0: not
# in it), as SQLite's table_info reports them. Rows are written by position and replaced by key.
SCHEMA = {
    "records": (("kind", "TEXT", 1), ("id", "INTEGER", 2), ("body", "TEXT", 0)),
    "settings": (("key", "TEXT", 1), ("value", "TEXT", 0)),
}


def _table_sql(columns: Sequence[tuple[str, str, int]]) -> str:
    """A table's columns as SQL: ``(kind TEXT, id INTEGER, body TEXT, PRIMARY KEY (kind, id))``."""
    parts = [f"{name} {kind}".rstrip() for name, kind, _ in columns]
    key = [name for name, _, place in sorted(columns, key=operator.itemgetter(2)) if place]
    if key:
        parts.append(f"PRIMARY KEY ({', '.join(key)})")
    return f"({', '.join(parts)})"


def check_file(db: sqlite3.Connection, db_path: str) -> None:
    """Refuse a file SQLite finds damaged (``PRAGMA integrity_check``: every page of every table
    and index read, its structure checked and each index against its table; 8 ms for 10,000
    records, under 1 % of opening them) or one that is not the registry's: without its tables
    while holding others, with one of its two tables missing, or with columns other than
    :data:`SCHEMA`'s. A database with no tables at all is a new one.

    Raises:
        DatabaseError: naming ``db_path`` and the first problem found.
        sqlite3.Error: the file is not an SQLite database, or cannot be read.
    """
    report = [row[0] for row in db.execute("PRAGMA integrity_check(1)")]
    if report != ["ok"]:
        lines = [line for line in str(report[0]).splitlines() if not line.startswith("***")]
        raise DatabaseError(
            f"{db_path}: damaged, SQLite's integrity check says: {'; '.join(lines)}"
        )
    tables = {
        name
        for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    }
    if not tables & SCHEMA.keys():
        if tables:
            held = ", ".join(repr(name) for name in sorted(tables))
            raise DatabaseError(
                f"{db_path}: an SQLite database but not a registry: no records or settings "
                f"table (it holds {held})"
            )
        return
    for table, columns in SCHEMA.items():
        if table not in tables:
            (other,) = SCHEMA.keys() - {table}
            raise DatabaseError(f"{db_path}: has a {other} table but no {table} table")
        found = tuple(
            (name, str(kind).upper(), place)
            for _, name, kind, _, _, place in db.execute(f"PRAGMA table_info({table})")
        )
        if found != columns:
            raise DatabaseError(
                f"{db_path}: the {table} table has columns {_table_sql(found)}; a registry's "
                f"are {_table_sql(columns)}"
            )


class Registry:
    """Tasks, stages, jobs and coflows by id, with validation and SQLite write-through.

    Args:
        db_path: SQLite file (``":memory:"`` keeps nothing across restarts).
        hosts: known host names -> IPv4 address; flows may name a host or give an address.
        clock: wall-clock time source for arrival times (persisted across restarts).
    """

    def __init__(
        self,
        db_path: str = ":memory:",
        hosts: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.hosts = dict(hosts or {})
        self.clock = clock
        self.records: dict[str, dict[int, Any]] = {kind: {} for kind in KINDS}
        self.settings: dict[str, Any] = {}
        self._models: dict[tuple, tuple[Any, Any]] = {}  # (type, id) -> (record, model object)
        # the scheduling view, kept up to date as records change (see cluster_state)
        self._index = CoflowIndex()  # the coflows, explicit and implicit
        self._busy: dict[int, set[int]] = {}  # job id -> its coflows with bytes left
        self._busy_job: dict[int, int] = {}  # coflow id -> the job it keeps busy
        self._jobs_view: dict[int, Job] = {}
        self._stages_view: dict[int, Stage] | None = None  # None: to be made
        self._stages_version = object()  # see ClusterState.stages_version
        self._job_ports: dict[int, list[int]] | None = None  # None: to be made
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:  # no such folder, unreadable
            raise DatabaseError(f"{db_path}: cannot use it as the registry: {exc}") from None
        try:
            self._open(db_path)
            self._load(db_path)
        except BaseException:
            self._db.close()
            raise
        self._reindex(list(self.records["coflows"]), list(self.records["jobs"]))

    # ---- persistence -------------------------------------------------------------------------

    def _open(self, db_path: str) -> None:
        """Check the file (:func:`check_file`), then set it up; a new file gets the tables."""
        try:
            # checked before anything is written: a damaged or foreign file is left as it was
            check_file(self._db, db_path)
            # WAL + NORMAL: a commit survives a controller crash (not a power cut) and costs no
            # fsync, so a registration stays well under a millisecond.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            for table, columns in SCHEMA.items():
                self._db.execute(f"CREATE TABLE IF NOT EXISTS {table} {_table_sql(columns)}")
        except sqlite3.Error as exc:  # not a database, read-only
            raise DatabaseError(f"{db_path}: cannot use it as the registry: {exc}") from None

    def _load(self, db_path: str) -> None:
        """Read every record and setting, each checked as the API checks what it stores
        (:func:`stored_record`, :func:`check_references`, :func:`check_setting`)."""
        try:
            rows = list(self._db.execute("SELECT kind, id, body FROM records"))
            settings = list(self._db.execute("SELECT key, value FROM settings"))
        except sqlite3.Error as exc:
            raise DatabaseError(f"{db_path}: cannot read the registry: {exc}") from None
        for kind, ident, body in rows:
            try:
                if kind not in RECORD_TYPES:
                    raise bad("kind", f"unknown kind {brief(kind)} (known: {', '.join(KINDS)})")
                ident = _int_value(ident, "id")
                record = stored_record(kind, ident, _stored_json(body, "body"))
            except InvalidInput as exc:
                raise DatabaseError(f"{db_path}: {_row_label(kind, ident)}: {exc}") from None
            self.records[kind][ident] = record
        for kind in KINDS:  # (after every record is in: a reference may name a later row)
            for ident, record in self.records[kind].items():
                try:
                    check_references(kind, record, self.records)
                except InvalidInput as exc:
                    raise DatabaseError(f"{db_path}: {_row_label(kind, ident)}: {exc}") from None
        for key, text in settings:
            try:
                self.settings[key] = check_setting(key, _stored_json(text, "value"))
            except InvalidInput as exc:
                raise DatabaseError(f"{db_path}: stored setting {brief(key)}: {exc}") from None

    def _write(self, puts: list[tuple[str, Any]], deletes: list[tuple[str, int]]) -> None:
        """Apply puts and deletes to SQLite in one transaction, then to memory."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for kind, ident in deletes:
                    self._db.execute("DELETE FROM records WHERE kind=? AND id=?", (kind, ident))
                for kind, record in puts:
                    self._db.execute(
                        "INSERT OR REPLACE INTO records VALUES (?, ?, ?)",
                        (kind, _ident(kind, record), json.dumps(asdict(record))),
                    )
                self._db.execute("COMMIT")
            except Exception:
                self._db.execute("ROLLBACK")
                raise
            changed = {kind: [] for kind in KINDS}
            for kind, ident in deletes:
                old = self.records[kind].pop(ident, None)
                self._models.pop((RECORD_TYPES[kind], ident), None)  # else churn grows it
                changed[kind].append((ident, old))
            for kind, record in puts:
                ident = _ident(kind, record)
                changed[kind].append((ident, self.records[kind].get(ident)))
                self.records[kind][ident] = record
            self._reindex([c for c, _ in changed["coflows"]], [j for j, _ in changed["jobs"]])
            jobs = self.records["jobs"]
            if changed["jobs"]:
                self._job_ports = None
            # a stage lists its jobs: made again when a stage or a job's stage changes
            if changed["stages"] or any(
                old is None or jobs.get(j) is None or jobs[j].stage_id != old.stage_id
                for j, old in changed["jobs"]
            ):
                self._stages_view = None
                self._stages_version = object()
            elif any(jobs[j].flows is not old.flows for j, old in changed["jobs"]):
                self._stages_version = object()  # a job's loads per iteration may differ

    def set_setting(self, key: str, value: Any) -> None:
        """Persist a controller setting (e.g. the policy) under ``key``; :class:`InvalidInput`
        if the registry would refuse it when it opens the file again (:func:`check_setting`)."""
        check_setting(key, value)
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, json.dumps(value))
            )
            self.settings[key] = value

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    # ---- parsing -----------------------------------------------------------------------------

    def _flows(
        self, body: dict, name: str, required: bool, old: Sequence[FlowSpec] = ()
    ) -> list[FlowSpec]:
        """The flows of ``body[name]``; a flow without ``remaining_bytes`` that is the same
        (source, destination, size) as the stored flow at its index keeps its progress."""
        flows = body.get(name)
        if flows is None:
            if required:
                raise bad(name, "is required")
            return []
        specs = []
        for i, flow in enumerate(_flow_list(flows, name, required)):
            where = f"{name}[{i}]."
            _check_fields(flow, *BODY_FIELDS["flow"], where)
            src = _ipv4(flow["src"], where + "src", self.hosts)
            dst = _ipv4(flow["dst"], where + "dst", self.hosts)
            _flow_ends(src, dst, where)
            size = _number(flow, "bytes", where=where)
            stored = old[i] if i < len(old) else None
            same = stored is not None and (stored.src, stored.dst, stored.size_bytes) == (
                src,
                dst,
                size,
            )
            default = stored.remaining_bytes if same else size
            left = flow.get("remaining_bytes", default)
            remaining = _remaining_value(left, size, where + "remaining_bytes", "bytes")
            specs.append(FlowSpec(src, dst, size, remaining))
        return specs

    def _ref(self, body: dict, name: str, kind: str, pending: dict | None = None) -> int | None:
        ident = _int(body, name)
        if (
            ident is not None
            and ident not in self.records[kind]
            and not (pending and ident in pending.get(kind, ()))
        ):
            raise _not_registered(name, kind, ident)
        return ident

    def parse(self, kind: str, body: Any, ident: int | None = None) -> Any:
        """Validate ``body`` as a record of ``kind``; ``ident`` is the id from the URL, if any."""
        if kind not in RECORD_TYPES:
            raise UnknownRecord(f"unknown collection {kind!r}")
        id_name = kind[:-1] + "_id"
        _check_fields(body, *BODY_FIELDS[kind], nullable=NULLABLE_FIELDS - {id_name})
        if ident is not None:
            # checked as an integer first: false == 0 in Python, not in the API
            if id_name in body and _int_value(body[id_name], id_name) != ident:
                raise bad(id_name, f"{body[id_name]!r} differs from the id {ident} in the URL")
            body = {**body, id_name: ident}
        elif id_name not in body:
            body = {**body, id_name: self._next_id(kind)}
        new_id = _int(body, id_name, low=0)
        if kind == "tasks":
            return TaskRecord(new_id, _name_value(body.get("name", "")), _weight(body))
        if kind == "stages":
            old = self.records["stages"].get(new_id)
            return StageRecord(
                new_id,
                self._ref(body, "task_id", "tasks"),
                _weight(body),
                old.arrival_s if old else self.clock(),
            )
        if kind == "jobs":
            old = self.records["jobs"].get(new_id)
            ports = _tcp_ports_value(body.get("tcp_ports", []))
            budget = _budget_value(body.get("iteration_budget", 1))
            # a replaced job keeps its progress unless the body sets it: a retried PUT loses none
            kept = "" if "iterations_done" in body else " (kept from the stored job)"
            done = body.get("iterations_done", old.iterations_done if old else 0)
            done = _done_value(done, budget, kept=kept)
            stage_id = self._ref(body, "stage_id", "stages")
            task_id = self._ref(body, "task_id", "tasks")
            if task_id is None and stage_id is not None:
                task_id = self.records["stages"][stage_id].task_id
            flows = self._flows(body, "flows", required=False, old=old.flows if old else ())
            # its coflows' flows are matched on its ports too: looked for only when a stored
            # job gains ports (a new job has no coflow yet; fewer ports make fewer rules)
            widest = 0
            if old is not None and len(ports) > len(old.tcp_ports):
                widest = max(
                    (len(c.flows) for c in self.records["coflows"].values() if c.job_id == new_id),
                    default=0,
                )
            _check_rules(max(len(flows), widest), len(ports), "tcp_ports")
            # (a replaced job keeps its accuracy reports too: only progress reports set them)
            accuracy = {name: getattr(old, name) for name in ACCURACY_FIELDS} if old else {}
            return JobRecord(
                new_id,
                stage_id,
                task_id,
                flows,
                ports,
                budget,
                done,
                _weight(body),
                old.arrival_s if old else self.clock(),
                _iteration_arrival(old, done, self.clock),
                **accuracy,
            )
        old = self.records["coflows"].get(new_id)
        flows = self._flows(body, "flows", required=True, old=old.flows if old else ())
        job_id = self._ref(body, "job_id", "jobs")
        ports = self.records["jobs"][job_id].tcp_ports if job_id is not None else ()
        _check_rules(len(flows), len(ports), "flows")
        return CoflowRecord(
            new_id,
            flows,
            job_id,
            self._ref(body, "stage_id", "stages"),
            _weight(body),
            old.arrival_s if old else self.clock(),
        )

    def _next_id(self, kind: str) -> int:
        return max(self.records[kind], default=0) + 1

    # ---- mutations ---------------------------------------------------------------------------

    def create(self, kind: str, body: Any) -> Any:
        """Register a new record (``POST``); :class:`DuplicateRecord` if its id is taken."""
        record = self.parse(kind, body)
        if _ident(kind, record) in self.records[kind]:
            raise DuplicateRecord(f"{kind[:-1]} {_ident(kind, record)} already exists; use PUT")
        self._write([(kind, record)], [])
        return record

    def put(self, kind: str, ident: int, body: Any) -> tuple[Any, bool]:
        """Create or replace a record (``PUT``); returns it and whether it is new."""
        self.get(kind, ident, must_exist=False)
        record = self.parse(kind, body, ident)
        created = ident not in self.records[kind]
        self._write([(kind, record)], [])
        return record, created

    def get(self, kind: str, ident: int, must_exist: bool = True) -> Any:
        """One record; :class:`UnknownRecord` if there is none and ``must_exist``."""
        if kind not in RECORD_TYPES:
            raise UnknownRecord(f"unknown collection {kind!r}")
        if not 0 <= ident <= MAX_ID:
            raise UnknownRecord(f"{kind[:-1]} id must be in 0..{MAX_ID}")
        record = self.records[kind].get(ident)
        if record is None and must_exist:
            raise UnknownRecord(f"no {kind[:-1]} {ident}")
        return record

    def delete(self, kind: str, ident: int) -> list[tuple[str, int]]:
        """Delete a record and what depends on it; returns every ``(kind, id)`` removed.

        A task takes its stages and jobs, a stage its jobs, a job its coflows.
        """
        self.get(kind, ident)
        doomed = [(kind, ident)]
        if kind == "tasks":
            doomed += [
                ("stages", s) for s, r in self.records["stages"].items() if r.task_id == ident
            ]
        stage_ids = {i for k, i in doomed if k == "stages"}
        if kind in ("tasks", "stages"):
            doomed += [
                ("jobs", j)
                for j, r in self.records["jobs"].items()
                if r.stage_id in stage_ids or (kind == "tasks" and r.task_id == ident)
            ]
        job_ids = {i for k, i in doomed if k == "jobs"}
        doomed += [
            ("coflows", c)
            for c, r in self.records["coflows"].items()
            if r.job_id in job_ids or r.stage_id in stage_ids
        ]
        doomed = list(dict.fromkeys(doomed))
        self._write([], doomed)
        return doomed

    def job_progress(self, job_id: int, body: Any) -> JobRecord:
        """Record a job's completed iterations (``{"iterations_done": n}``), and its model
        accuracy with that many iterations done if the body gives one (``"accuracy"``, in
        [0, 1]; see :func:`~controller.model.accuracy_report`)."""
        job = self.get("jobs", job_id)
        _check_fields(body, *BODY_FIELDS["job_progress"])
        budget = _budget_value(body.get("iteration_budget", job.iteration_budget))
        done = _done_value(body["iterations_done"], budget)
        accuracy = {}
        if "accuracy" in body:
            accuracy = accuracy_report(job, _accuracy_value(body["accuracy"]), done)
        started = self.clock() if done != job.iterations_done else job.iteration_arrival_s
        updated = replace(
            job,
            iterations_done=done,
            iteration_budget=budget,
            iteration_arrival_s=started,
            **accuracy,
        )
        self._write([("jobs", updated)], [])
        return updated

    def coflow_progress(self, coflow_id: int, body: Any) -> CoflowRecord | None:
        """Record bytes left per flow (``{"remaining_bytes": [..]}``) or ``{"done": true}``.

        A coflow with nothing left is finished and removed; returns ``None`` then. Every field
        the body has is checked, ``remaining_bytes`` beside ``"done": true`` too: a bad body is
        refused whole, and changes nothing.
        """
        coflow = self.get("coflows", coflow_id)
        _check_fields(body, *BODY_FIELDS["coflow_progress"])
        done = body.get("done", False)
        if not isinstance(done, bool):
            raise bad("done", "must be true or false")
        if done and "remaining_bytes" not in body:
            self._write([], [("coflows", coflow_id)])
            return None
        remaining = body.get("remaining_bytes")
        if not isinstance(remaining, list) or len(remaining) != len(coflow.flows):
            raise bad("remaining_bytes", f"must be a list of {len(coflow.flows)} numbers")
        flows = []
        for i, (flow, left) in enumerate(zip(coflow.flows, remaining, strict=True)):
            size = flow.size_bytes
            value = _remaining_value(
                left, size, f"remaining_bytes[{i}]", f"the flow's {size} bytes"
            )
            flows.append(FlowSpec(flow.src, flow.dst, flow.size_bytes, value))
        if done or all(f.remaining_bytes <= 0 for f in flows):
            self._write([], [("coflows", coflow_id)])
            return None
        updated = replace(coflow, flows=flows)
        self._write([("coflows", updated)], [])
        return updated

    # ---- scheduling view -----------------------------------------------------------------------

    def cluster_state(self, link_bps: float, host_link_bps: Mapping[str, float] | None = None):
        """The scheduling core's view: active coflows (explicit and implicit), jobs, stages.

        The coflows with bytes left are the registered ones, and a running job's implicit
        coflow while none of its registered coflows has bytes left. They are kept in an index
        (:class:`~controller.model.CoflowIndex`), updated as records change, so a reorder
        reads no coflow's flows; model objects are cached per record (records are replaced,
        never changed in place). The dicts and models are shared between states: policies
        must not mutate them.
        """
        loads = self._index.snapshot()
        coflows = loads.coflows_by_id
        if self._stages_view is None:
            stages = {
                rec.stage_id: Stage(rec.stage_id, [], rec.task_id, rec.weight, rec.arrival_s)
                for rec in self.records["stages"].values()
            }
            for rec in self.records["jobs"].values():
                if rec.stage_id in stages:
                    stages[rec.stage_id].job_ids.append(rec.job_id)
            self._stages_view = stages
        hosts = {ip: Host(ip, bps, bps) for ip, bps in (host_link_bps or {}).items()}
        return ClusterState(hosts, coflows, self._jobs_view, self._stages_view, self.clock(),
                            link_bps, loads, self._stages_version)  # fmt: skip

    def job_tcp_ports(self) -> dict[int, list[int]]:
        """Each job's TCP ports (the record's list), kept until a job changes; the dict is
        shared between calls: do not mutate it."""
        if self._job_ports is None:
            self._job_ports = {j: rec.tcp_ports for j, rec in self.records["jobs"].items()}
        return self._job_ports

    def _reindex(self, coflow_ids: list[int], job_ids: list[int]) -> None:
        """Bring the scheduling view up to date after the records of these coflows and jobs
        changed (were created, replaced or deleted)."""
        index, busy = self._index, self._busy
        jobs = dict.fromkeys(job_ids)  # (in order: the jobs view lists them as the records do)
        for coflow_id in coflow_ids:
            was_busy = self._busy_job.pop(coflow_id, None)
            if was_busy is not None:
                busy[was_busy].discard(coflow_id)
                if not busy[was_busy]:
                    del busy[was_busy]
                jobs[was_busy] = None
            rec = self.records["coflows"].get(coflow_id)
            if rec is None:
                index.remove(coflow_id)
                continue
            coflow = self._model(rec, _coflow_of)
            index.put(coflow)
            if rec.job_id is not None:
                jobs[rec.job_id] = None
                if not coflow.done:
                    busy.setdefault(rec.job_id, set()).add(coflow_id)
                    self._busy_job[coflow_id] = rec.job_id
        if jobs:
            self._jobs_view = dict(self._jobs_view)  # (states made before keep theirs)
        for job_id in jobs:
            rec = self.records["jobs"].get(job_id)
            implicit = None
            if rec is None:
                self._jobs_view.pop(job_id, None)
                index.remove_job(job_id)
            else:
                job, implicit = self._job_model(rec)
                self._jobs_view[job_id] = job
                index.put_job(job)
            if implicit is not None and rec.running and job_id not in busy:
                index.put(implicit)
            else:
                index.remove(IMPLICIT_COFLOW_BASE + job_id)
        index.mirror(self._jobs_view)  # (a dict never changed once a state holds it)

    def _model(self, record: Any, build: Callable[[Any], Any]) -> Any:
        key = (type(record), _ident(RECORD_KIND[type(record)], record))
        cached = self._models.get(key)
        if cached is None or cached[0] is not record:
            cached = self._models[key] = (record, build(record))
        return cached[1]

    def _job_model(self, record: JobRecord) -> tuple[Job, Coflow | None]:
        """The job and its implicit coflow (:func:`_job_of`); a job whose record changed but
        kept its flows (a progress report) keeps its ``bytes_per_iteration`` dict, so what a
        policy derived from it stays valid."""
        key = (JobRecord, record.job_id)
        cached = self._models.get(key)
        if cached is not None and cached[0] is record:
            return cached[1]
        job, implicit = _job_of(record)
        if cached is not None and cached[0].flows is record.flows:
            job.bytes_per_iteration = cached[1][0].bytes_per_iteration
        self._models[key] = (record, (job, implicit))
        return job, implicit

    def to_json(self, kind: str, record: Any) -> dict:
        """A record as the REST API shows it (``bytes`` for sizes, a stage's job ids)."""
        data = asdict(record)
        for flow in data.get("flows", []):
            flow["bytes"] = flow.pop("size_bytes")
        if kind == "stages":
            data["job_ids"] = sorted(
                j for j, r in self.records["jobs"].items() if r.stage_id == record.stage_id
            )
        return data


RECORD_KIND = {record_type: kind for kind, record_type in RECORD_TYPES.items()}
_COFLOW_ID = operator.attrgetter("coflow_id")


def _iteration_arrival(
    old: JobRecord | None, done: int, clock: Callable[[], float]
) -> float | None:
    """When a job's current iteration began after a (re)registration with ``done`` iterations:
    unchanged progress keeps it, changed progress starts a new iteration now."""
    if old is None:
        return None
    return old.iteration_arrival_s if done == old.iterations_done else clock()


def _coflow_of(rec: CoflowRecord) -> Coflow:
    flows = [
        Flow(f.src, f.dst, f.size_bytes, f.remaining_bytes, i) for i, f in enumerate(rec.flows)
    ]
    return Coflow(rec.coflow_id, flows, rec.arrival_s, rec.job_id, rec.stage_id, rec.weight)


def _job_of(rec: JobRecord) -> tuple[Job, Coflow | None]:
    """The job, and the implicit coflow of its iteration template (``None`` without one)."""
    flows = [Flow(f.src, f.dst, f.size_bytes, f.size_bytes, i) for i, f in enumerate(rec.flows)]
    job = Job(
        rec.job_id,
        port_bytes(flows, remaining=False),
        rec.iteration_budget,
        rec.iterations_done,
        rec.stage_id,
        rec.task_id,
        rec.arrival_s,
        **{name: getattr(rec, name) for name in ACCURACY_FIELDS},
    )
    implicit = None
    if flows:
        cid = IMPLICIT_COFLOW_BASE + rec.job_id
        arrival = rec.arrival_s if rec.iteration_arrival_s is None else rec.iteration_arrival_s
        implicit = Coflow(cid, flows, arrival, rec.job_id, None, rec.weight)
    return job, implicit


def _ident(kind: str, record: Any) -> int:
    return getattr(record, kind[:-1] + "_id")
