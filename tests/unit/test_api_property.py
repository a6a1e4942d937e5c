"""Random workloads through the REST dispatcher, with a reorder after every request.

Tasks, stages, jobs with flow templates and TCP ports, coflows, progress reports, deletes and
switches among every policy with random options, the numbers drawn to include the extremes the
limits allow (:mod:`controller.limits`: the largest flow, the smallest and largest weight, the
largest id and iteration budget, nothing or everything left of a flow, 5e-324 bytes) and some
past them. After each request the engine reorders and computes a switch's operations, as the
Ryu app's reorder loop does on every change (``controller/ryu_app.py``).

The properties: every response is a 2xx or a 4xx; a 4xx changes neither the registry nor the
policy; what a 2xx created or replaced reads back as answered, and what a delete removed is
gone (with the records that depend on it: no record names a missing one); every reorder ends
within :data:`REORDER_BOUND_S` and its plan orders every active coflow exactly once.

Schemathesis against the live controller (tests/integration/test_rest_fuzz.py) reaches the
scheduler too, but its flows are rarely valid (a source equal to its destination, bytes left
over the size), and it never registers the largest records; here every workload is valid
unless a rule spoils it on purpose.
"""

from __future__ import annotations

import copy
import json
import math
import time

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from controller.api import RestApi
from controller.engine import Engine
from controller.limits import (
    MAX_FLOW_BYTES,
    MAX_FLOWS,
    MAX_ID,
    MAX_ITERATIONS,
    MAX_JOB_RULES,
    MAX_TCP_PORTS,
    MAX_WEIGHT,
    MIN_WEIGHT,
)
from controller.policies import POLICIES
from controller.registry import IMPLICIT_COFLOW_BASE, KINDS, Registry

# A wedged reorder holds the controller's only event loop: far above what any of these
# takes (milliseconds; the largest records below: about a second, two on a loaded machine).
REORDER_BOUND_S = 5.0
JSON = {"Content-Type": "application/json"}
HOSTS = {f"h{i}": f"10.0.0.{i}" for i in range(1, 7)}
# host names, their addresses and addresses of no host (a flow may give either)
ADDRESSES = [*HOSTS, *HOSTS.values(), "192.0.2.1", "0.0.0.0", "255.255.255.255"]
ID_FIELD = {kind: kind[:-1] + "_id" for kind in KINDS}

sizes = st.one_of(
    st.sampled_from([0, 0.0, 5e-324, 1e-300, 1, 1e6, MAX_FLOW_BYTES]),
    st.floats(0, MAX_FLOW_BYTES),
    st.integers(0, int(MAX_FLOW_BYTES)),
)
weights = st.one_of(st.sampled_from([MIN_WEIGHT, 1, MAX_WEIGHT]), st.floats(MIN_WEIGHT, MAX_WEIGHT))
ids = st.one_of(st.sampled_from([0, 1, MAX_ID]), st.integers(0, MAX_ID))
budgets = st.one_of(st.sampled_from([1, 2, MAX_ITERATIONS]), st.integers(1, MAX_ITERATIONS))
tcp_ports = st.lists(st.integers(1, 65535), unique=True, max_size=MAX_TCP_PORTS)


def _address(name: str) -> str:
    return HOSTS.get(name, name)


@st.composite
def flows(draw, min_size: int = 0, max_size: int = 6) -> list[dict]:
    """Valid flows: distinct endpoints, any size the limits allow, and nothing, part or all
    of it left (or left out: all of it)."""
    result = []
    for _ in range(draw(st.integers(min_size, max_size))):
        src, dst = draw(st.lists(st.sampled_from(ADDRESSES), min_size=2, max_size=2,
                                 unique_by=_address))  # fmt: skip
        size = draw(sizes)
        flow = {"src": src, "dst": dst, "bytes": size}
        left = draw(st.sampled_from(["absent", "none", "all", "part"]))
        if left == "none":
            flow["remaining_bytes"] = 0
        elif left == "all":
            flow["remaining_bytes"] = size
        elif left == "part":
            flow["remaining_bytes"] = draw(st.floats(0, float(size)))
        result.append(flow)
    return result


# What spoils a body (field, value): each is refused by the registry's checks.
SPOILED_WEIGHTS = [0, -1, math.nextafter(MAX_WEIGHT, math.inf), math.nextafter(MIN_WEIGHT, 0),
                   math.nan, math.inf, "1", True, None]  # fmt: skip
SPOILED_IDS = [-1, MAX_ID + 1, 1.5, "1", True]
SPOILED_FLOWS = [
    [{"src": "10.0.0.1", "dst": "10.0.0.1", "bytes": 1}],
    [{"src": "h1", "dst": "10.0.0.1", "bytes": 1}],
    [{"src": "10.0.0.1", "dst": "10.0.0.2", "bytes": math.nextafter(MAX_FLOW_BYTES, math.inf)}],
    [{"src": "10.0.0.1", "dst": "10.0.0.2", "bytes": -1}],
    [{"src": "10.0.0.1", "dst": "10.0.0.2", "bytes": 1, "remaining_bytes": 2}],
    [{"src": "300.0.0.1", "dst": "10.0.0.2", "bytes": 1}],
    [{"src": 167772161, "dst": "10.0.0.2", "bytes": 1}],
    [{"src": "10.0.0.1", "dst": "10.0.0.2"}],
    [{"src": "10.0.0.1", "dst": "10.0.0.2", "bytes": 1, "rate": 1}],
    [{}] * (MAX_FLOWS + 1),
]
# with every TCP port, one flow more than the marking rules allow (4 x flows x ports)
OVER_THE_RULES = [{"src": "10.0.0.1", "dst": f"10.2.0.{i + 1}", "bytes": 1}
                  for i in range(MAX_JOB_RULES // (4 * MAX_TCP_PORTS) + 1)]  # fmt: skip
SPOILED_JOB_FIELDS = {
    "tcp_ports": [list(range(1, MAX_TCP_PORTS + 2)), [80, 80], [0], [65536], "80"],
    "iteration_budget": [0, MAX_ITERATIONS + 1, 1.0],
    "iterations_done": [-1, MAX_ITERATIONS + 1],
}


class Workloads(RuleBasedStateMachine):
    """The registry, the engine with one connected switch, and the REST API in front."""

    def __init__(self) -> None:
        super().__init__()
        self.api: RestApi | None = None
        self.last = "(no request yet)"

    # ---- requests --------------------------------------------------------------------------

    @initialize(policy=st.sampled_from(sorted(POLICIES)), data=st.data())
    def start(self, policy: str, data) -> None:
        """A fresh controller under a random policy with random valid options."""
        options = data.draw(policy_options(policy), label="options")
        engine = Engine(Registry(":memory:", hosts=HOSTS), policy, options)
        engine.switch_connected(1)
        self.api = RestApi(engine)
        self.reorder()

    @rule(data=st.data())
    def register_task(self, data) -> None:
        """POST or PUT a task."""
        body = {"weight": data.draw(weights), "name": data.draw(st.text(max_size=8))}
        self.register(data, "tasks", body)

    @rule(data=st.data())
    def register_stage(self, data) -> None:
        """POST or PUT a stage, of a registered task or of none."""
        body = {"weight": data.draw(weights)}
        self.reference(data, body, "task_id", "tasks")
        self.register(data, "stages", body)

    @rule(data=st.data())
    def register_job(self, data) -> None:
        """POST or PUT a job with a flow template and TCP ports within the rules' limit."""
        template = data.draw(flows())  # (6 flows x 64 ports: 1,536 rules, within the limit)
        ports = data.draw(tcp_ports)
        budget = data.draw(budgets)
        done = data.draw(st.one_of(st.sampled_from([0, budget]), st.integers(0, budget)))
        body = {"flows": template, "tcp_ports": ports, "iteration_budget": budget,
                "iterations_done": done, "weight": data.draw(weights)}  # fmt: skip
        self.reference(data, body, "stage_id", "stages")
        self.reference(data, body, "task_id", "tasks")
        self.register(data, "jobs", body)

    @rule(data=st.data())
    def register_coflow(self, data) -> None:
        """POST or PUT a coflow of a registered job or stage, or of none."""
        body = {"flows": data.draw(flows(min_size=1, max_size=8)), "weight": data.draw(weights)}
        self.reference(data, body, "job_id", "jobs")
        self.reference(data, body, "stage_id", "stages")
        self.register(data, "coflows", body)

    @rule(data=st.data(), count=st.integers(2, 12))
    def register_many_coflows(self, data, count: int) -> None:
        """Several coflows in a row (one request, and one reorder, each): states with more
        coflows contending for the same hosts than single registrations build up."""
        jobs = sorted(self.records("jobs"))
        for _ in range(count):
            body = {"flows": data.draw(flows(min_size=1, max_size=4)), "weight": data.draw(weights)}
            if jobs and data.draw(st.booleans()):
                body["job_id"] = data.draw(st.sampled_from(jobs))
            self.request("POST", "/api/coflows", body)

    @rule(data=st.data())
    def report_job_progress(self, data) -> None:
        """Iterations done of a job, within its budget or past it, sometimes a new budget."""
        job_id = self.some_id(data, "jobs")
        job = self.records("jobs").get(job_id)
        budget = job.iteration_budget if job else 1
        body = {"iterations_done": data.draw(st.one_of(
            st.sampled_from([0, budget, budget + 1]), st.integers(0, MAX_ITERATIONS)))}  # fmt: skip
        if data.draw(st.booleans()):
            body["iteration_budget"] = data.draw(budgets)
        if data.draw(st.booleans()):  # an accuracy, in [0, 1] or not
            wrong = st.sampled_from([0, 1, -0.1, 1.5, None, "0.5", True])
            body["accuracy"] = data.draw(st.one_of(st.floats(0, 1), wrong))
        self.request("POST", f"/api/jobs/{job_id}/progress", body)

    @rule(data=st.data())
    def report_coflow_progress(self, data) -> None:
        """Bytes left per flow (none, all, part, or over the size), or that it is done."""
        coflow_id = self.some_id(data, "coflows")
        coflow = self.records("coflows").get(coflow_id)
        sizes_now = [f.size_bytes for f in coflow.flows] if coflow else [1.0]
        body = {}
        if data.draw(st.booleans()):
            body["remaining_bytes"] = [
                data.draw(st.one_of(st.sampled_from([0, size]), st.floats(0, size)))
                for size in sizes_now
            ]
            if data.draw(st.integers(0, 4)) == 0:  # one wrong: too many, or past a size
                spoil = data.draw(st.sampled_from(["longer", "over", "negative"]))
                if spoil == "longer":
                    body["remaining_bytes"].append(0)
                else:
                    body["remaining_bytes"][0] = -1 if spoil == "negative" else sizes_now[0] * 2 + 1
        if not body or data.draw(st.booleans()):
            body["done"] = data.draw(st.one_of(st.booleans(), st.just("yes")))
        self.request("POST", f"/api/coflows/{coflow_id}/progress", body)

    @rule(data=st.data(), kind=st.sampled_from(KINDS))
    def delete(self, data, kind: str) -> None:
        """Delete a record (and what depends on it), or one that is not there."""
        self.request("DELETE", f"/api/{kind}/{self.some_id(data, kind)}")

    @rule(policy=st.sampled_from(sorted(POLICIES)), data=st.data())
    def switch_policy(self, policy: str, data) -> None:
        """Switch to any policy with random valid options, or with one spoiled."""
        body = {"name": policy, "options": data.draw(policy_options(policy))}
        if data.draw(st.integers(0, 5)) == 0:
            other = data.draw(st.sampled_from(sorted(POLICIES)))
            body = {"name": other, "options": {"period_s": 0, "use_rates": 1, "min_history": 0}}
        self.request("PUT", "/api/policy", body)

    @rule(kind=st.sampled_from(KINDS), data=st.data())
    def register_spoiled(self, kind: str, data) -> None:
        """A body with one field past the limits or inconsistent: refused, nothing changed."""
        body = {"flows": data.draw(flows(min_size=1, max_size=2))} if kind == "coflows" else {}
        fields = {"weight": SPOILED_WEIGHTS, ID_FIELD[kind]: SPOILED_IDS, "colour": ["red"]}
        if kind in ("jobs", "coflows"):
            fields["flows"] = SPOILED_FLOWS
        if kind == "jobs":
            fields.update(SPOILED_JOB_FIELDS)
        if kind != "tasks":
            reference = {"stages": "task_id", "jobs": "stage_id", "coflows": "job_id"}[kind]
            fields[reference] = [self.unused_id(reference[:-3] + "s"), -1]
        name = data.draw(st.sampled_from(sorted(fields)))
        body[name] = data.draw(st.sampled_from(fields[name]))
        if kind == "jobs" and name == "tcp_ports" and data.draw(st.booleans()):
            # every port and one flow more than the rules allow with them
            body.update(tcp_ports=list(range(1, MAX_TCP_PORTS + 1)), flows=OVER_THE_RULES)
        status = self.register(data, kind, body)
        assert 400 <= status < 500, (status, self.last)

    # ---- helpers ---------------------------------------------------------------------------

    def records(self, kind: str) -> dict:
        return self.api.registry.records[kind]

    def some_id(self, data, kind: str) -> int:
        """A registered id of ``kind`` mostly, else any id."""
        known = sorted(self.records(kind))
        if known and data.draw(st.integers(0, 4)) > 0:
            return data.draw(st.sampled_from(known))
        return data.draw(ids)

    def unused_id(self, kind: str) -> int:
        return max(self.records(kind), default=0) + 1 if MAX_ID in self.records(kind) else MAX_ID

    def reference(self, data, body: dict, name: str, kind: str) -> None:
        """Refer to a registered record of ``kind`` (or none: absent or null)."""
        choice = data.draw(st.sampled_from(["absent", "null", "registered"]))
        if choice == "null":
            body[name] = None
        elif choice == "registered" and self.records(kind):
            body[name] = data.draw(st.sampled_from(sorted(self.records(kind))))

    def register(self, data, kind: str, body: dict) -> int:
        """POST (id assigned, or chosen) or PUT (at a new or a registered id) the record; the
        reply's status."""
        how = data.draw(st.sampled_from(["post", "post with id", "put"]))
        if how == "post":
            return self.request("POST", f"/api/{kind}", body)
        if how == "post with id":
            body = {ID_FIELD[kind]: self.some_id(data, kind), **body}
            return self.request("POST", f"/api/{kind}", body)
        ident = self.some_id(data, kind)
        if ID_FIELD[kind] in body and isinstance(body[ID_FIELD[kind]], int):
            # (an id the route takes, near the body's: the request reaches the registry)
            ident = abs(body[ID_FIELD[kind]]) % (MAX_ID + 1)
        return self.request("PUT", f"/api/{kind}/{ident}", body)

    def request(self, method: str, path: str, body=None) -> int:
        """Send a request, check the reply's status and what it changed, then reorder; the
        reply's status."""
        raw = json.dumps(body).encode() if body is not None else b""
        self.last = f"{method} {path} {raw[:400]!r}"
        registry, engine = self.api.registry, self.api.engine
        records = {kind: dict(registry.records[kind]) for kind in KINDS}
        small = sum(len(getattr(r, "flows", ())) for r in registry.records["coflows"].values())
        copied = copy.deepcopy(registry.records) if small < 1000 else None
        policy = (engine.policy_name, copy.deepcopy(engine.policy_options))
        status, payload = self.api.handle(method, path, raw, JSON)
        assert 200 <= status < 300 or 400 <= status < 500, (status, payload, self.last)
        if status >= 400:
            # the same record objects (the registry replaces a record, never edits it), and
            # the same values in them
            assert {kind: dict(registry.records[kind]) for kind in KINDS} == records, self.last
            assert all(
                registry.records[kind][i] is records[kind][i]
                for kind in KINDS
                for i in records[kind]
            ), self.last
            if copied is not None:
                assert registry.records == copied, self.last
            assert (engine.policy_name, engine.policy_options) == policy, self.last
            assert set(payload) == {"error"} and payload["error"]["code"] == status, self.last
        else:
            self.check_success(method, path, payload)
        self.reorder()
        return status

    def check_success(self, method: str, path: str, payload) -> None:
        """What a 2xx did reads back: the record as answered, or a deleted one gone."""
        parts = path.strip("/").split("/")
        if parts[1] in KINDS and method in ("POST", "PUT"):
            if len(parts) == 4 and payload.get("finished"):  # a coflow's last progress report
                assert self.api.handle("GET", f"/api/coflows/{parts[2]}")[0] == 404, self.last
                return
            kind = parts[1]
            ident = payload[ID_FIELD[kind]]
            got_status, got = self.api.handle("GET", f"/api/{kind}/{ident}")
            payload = {k: v for k, v in payload.items() if k != "finished"}
            assert (got_status, got) == (200, payload), self.last
        if method == "DELETE":
            for removed in payload["deleted"]:
                gone = self.api.handle("GET", f"/api/{removed['kind']}/{removed['id']}")[0]
                assert gone == 404, (removed, self.last)
        if parts[1] == "policy":
            assert self.api.engine.policy_name == payload["name"], self.last

    def reorder(self) -> None:
        """What the reorder loop does after a change: the plan, then one switch's operations;
        in time, and ordering every active coflow once."""
        plan = timed_reorder(self.api.engine, self.last)
        ordered = plan.schedule.order
        assert len(ordered) == len(set(ordered)), f"a coflow ordered twice after {self.last}"
        assert set(ordered) == active_coflows(self.api.registry), self.last

    # ---- invariants ------------------------------------------------------------------------

    @invariant()
    def every_reference_names_a_registered_record(self) -> None:
        """Deletes take what depends on them: no record refers to a missing one."""
        if self.api is None:
            return
        tasks, stages, jobs = (self.records(kind) for kind in ("tasks", "stages", "jobs"))
        for stage in self.records("stages").values():
            assert stage.task_id is None or stage.task_id in tasks, (stage, self.last)
        for job in jobs.values():
            assert job.stage_id is None or job.stage_id in stages, (job, self.last)
            assert job.task_id is None or job.task_id in tasks, (job, self.last)
        for coflow in self.records("coflows").values():
            assert coflow.job_id is None or coflow.job_id in jobs, (coflow, self.last)
            assert coflow.stage_id is None or coflow.stage_id in stages, (coflow, self.last)

    @invariant()
    def the_order_is_served(self) -> None:
        """``GET /api/order`` answers from the plan, not stale."""
        if self.api is None:
            return
        status, order = self.api.handle("GET", "/api/order")
        assert status == 200 and order["stale"] is False, (status, self.last)


def timed_reorder(engine, after: str):
    """What the reorder loop does after a change (the plan, then one switch's operations),
    within :data:`REORDER_BOUND_S`; returns the plan."""
    started = time.perf_counter()
    plan = engine.reorder()
    engine.ops_for(1)
    engine.sent()
    elapsed = time.perf_counter() - started
    assert elapsed < REORDER_BOUND_S, f"reorder took {elapsed:.2f} s after {after}"
    return plan


def active_coflows(registry: Registry) -> set[int]:
    """The coflows a plan must order, from the records: the registered ones with bytes left,
    and the implicit coflow of each running job with a template of some bytes that has no
    registered coflow with bytes left."""
    coflows = registry.records["coflows"]
    active = {c for c, r in coflows.items() if any(f.remaining_bytes > 0 for f in r.flows)}
    busy = {coflows[c].job_id for c in active}
    for job_id, job in registry.records["jobs"].items():
        running = job.iterations_done < job.iteration_budget
        if running and job_id not in busy and any(f.size_bytes > 0 for f in job.flows):
            active.add(IMPLICIT_COFLOW_BASE + job_id)
    return active


def option_values(spec) -> st.SearchStrategy:
    """Valid values of one policy option, its bounds (or each of its choices) among them."""
    if spec.kind is str:
        values = st.sampled_from(spec.choices)
    elif spec.kind is bool:
        values = st.booleans()
    elif spec.kind is int:
        values = st.integers(int(spec.low), int(spec.high))
    else:
        low = math.nextafter(spec.low, math.inf) if spec.low_open else spec.low
        values = st.one_of(st.sampled_from([low, spec.high]), st.floats(low, spec.high))
    return st.one_of(values, st.none()) if spec.nullable else values


def policy_options(policy: str) -> st.SearchStrategy:
    """A random subset of ``policy``'s options with valid values."""
    specs = POLICIES[policy].OPTIONS
    return st.fixed_dictionaries({}, optional={key: option_values(s) for key, s in specs.items()})


TestWorkloads = Workloads.TestCase
TestWorkloads.settings = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_the_largest_records_the_limits_allow_are_ordered_in_time_by_every_policy():
    """A coflow of the most flows at the largest size and the most urgent weight, and a job of
    the most marking rules, the least urgent, with 5e-324 bytes per flow: every policy orders
    both, and every reorder (the first makes the 20,000 rules) ends in time."""
    engine = Engine(Registry(":memory:", hosts=HOSTS), "fair")
    engine.switch_connected(1)
    api = RestApi(engine)
    # (distinct pairs among 200 addresses: a 10,000-flow all-to-all)
    hosts = [f"10.1.{i // 250}.{i % 250 + 1}" for i in range(200)]
    pairs = [(a, b) for a in hosts for b in hosts if a != b][:MAX_FLOWS]
    coflow = [{"src": a, "dst": b, "bytes": MAX_FLOW_BYTES} for a, b in pairs]
    n_flows = MAX_JOB_RULES // (4 * MAX_TCP_PORTS)
    template = [{"src": a, "dst": b, "bytes": 5e-324} for a, b in pairs[:n_flows]]
    requests = [
        ("POST", "/api/coflows", {"flows": coflow, "weight": MAX_WEIGHT}),
        ("POST", "/api/jobs", {"flows": template, "tcp_ports": list(range(1, MAX_TCP_PORTS + 1)),
                               "iteration_budget": MAX_ITERATIONS, "weight": MIN_WEIGHT}),
        *[("PUT", "/api/policy", {"name": name}) for name in sorted(POLICIES)],
        ("POST", "/api/coflows/1/progress", {"remaining_bytes": [0] * (MAX_FLOWS - 1) + [1]}),
    ]  # fmt: skip
    for method, path, body in requests:
        status, payload = api.handle(method, path, json.dumps(body).encode(), JSON)
        assert status in (200, 201), payload
        plan = timed_reorder(engine, f"{method} {path}")
        assert sorted(plan.schedule.order) == sorted(active_coflows(engine.registry)), path
    assert sorted(plan.schedule.order) == [1, IMPLICIT_COFLOW_BASE + 1]
    assert len(engine.switches[1].rules) >= 4 * n_flows * MAX_TCP_PORTS
