"""Schemathesis against the live controller: generated and mutated requests from the controller's
own ``/api/openapi.json`` get no server error and answers that conform to the document, and the
controller is still whole afterwards (and after a restart on the same database).

The document's links (from a created task, stage, job or coflow to where its id is used next)
give schemathesis' stateful phase scenarios that register linked workloads, so the requests
reach the scheduler: the test checks that the phase ran and that jobs and coflows, coflows of
a registered job among them, were registered (from the run's HAR log of every request).

Bounded by ``--max-time`` so that it stays a few minutes of CI. Left out, with the reason:
``positive_data_acceptance`` (a body valid by the schema may still be refused for what a schema
cannot say: a ``stage_id`` that is not registered, ``src == dst``, ``remaining_bytes > bytes``);
``ensure_resource_availability`` (it takes a 404 for a record a scenario created as lost, but a
delete takes what depends on the record: a task its stages and jobs, a stage its jobs, a job its
coflows, and schemathesis knows nothing of that; ``tests/unit/test_api_property.py`` checks what
it would, knowing it). ``negative_data_rejection`` takes a 413 as a refusal too: a mutated body
of more flows than a record may have can also be over the 1 MiB a request may be.
"""

from __future__ import annotations

import json
import re
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from workloads.launcher import ControllerProcess, free_port

pytestmark = pytest.mark.integration

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
FUZZ_SECONDS = 60
# schemathesis' own list (config/_checks.py) and 413: a body over the size a request may be
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428",
                     "429", "5xx"]
"""
REGISTRATION = re.compile(r"^/api/(?P<kind>jobs|coflows)(/[0-9]+)?$")
# At least this many successful registrations per run: of jobs, of coflows and of coflows of a
# registered job. Measured on a 2-core machine, loaded or not: 84 to 141 jobs, 33 to 117 coflows
# and 4 to 29 coflows of a job a run (before the spec said ipv4: not one coflow).
AT_LEAST = {"jobs": 10, "coflows": 10, "coflows of a job": 1}


def registrations(har: Path) -> dict[str, int]:
    """Successful registrations (POST and PUT, 2xx) in a HAR log: of jobs, of jobs with a flow
    template, of coflows and of coflows of a registered job."""
    counts = dict.fromkeys(("jobs", "jobs with flows", "coflows", "coflows of a job"), 0)
    for entry in json.loads(har.read_text())["log"]["entries"]:
        request, response = entry["request"], entry["response"]
        match = REGISTRATION.match(urlsplit(request["url"]).path)
        if request["method"] not in ("POST", "PUT") or not match or response["status"] // 100 != 2:
            continue
        record = json.loads(response["content"].get("text") or "{}")
        counts[match["kind"]] += 1
        if match["kind"] == "jobs" and record.get("flows"):
            counts["jobs with flows"] += 1
        if match["kind"] == "coflows" and record.get("job_id") is not None:
            counts["coflows of a job"] += 1
    return counts


def stateful_scenarios(output: str) -> tuple[int, str]:
    """How many scenarios schemathesis' stateful phase ran, and for how long, from its output
    (0 and "" when it did not run)."""
    found = re.search(r"Stateful \(in ([^)]*)\)\s+Scenarios:\s+([0-9]+)", output)
    return (int(found[2]), found[1]) if found else (0, "")


@pytest.mark.skipif(not SCHEMATHESIS.exists(), reason="needs schemathesis (scripts/setup.sh)")
def test_generated_requests_get_no_server_error_and_conform(tmp_path, report):
    db = tmp_path / "ctl.sqlite"
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    har = tmp_path / "requests.har"
    ctl = ControllerProcess(db, None, free_port(), "--policy", "sincronia").start()
    try:
        spec = f"http://127.0.0.1:{ctl.rest_port}/api/openapi.json"
        run = subprocess.run(
            [str(SCHEMATHESIS), "--config-file", str(config), "run", spec, "--checks", "all",
             "--exclude-checks", "positive_data_acceptance,ensure_resource_availability",
             "--max-time", str(FUZZ_SECONDS), "--seed", "1",
             # one worker: a second worker's requests would land inside a scenario's (delete
             # the task it registered a stage of, register again an id it deleted), which the
             # stateful checks take for API faults: a race between two clients
             "--workers", "1", "--header", "Content-Type: application/json",
             "--report", "junit,har", "--report-dir", str(tmp_path),
             "--report-har-path", str(har)],
            cwd=tmp_path, capture_output=True, text=True, timeout=FUZZ_SECONDS + 120,
        )  # fmt: skip
        out = run.stdout.splitlines()
        cases = [
            out[i + 1].strip() for i, line in enumerate(out[:-1]) if line.strip() == "Test cases:"
        ]
        report(f"schemathesis against the live controller, {FUZZ_SECONDS} s", (cases or ["?"])[-1])
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
        scenarios, took = stateful_scenarios(run.stdout)
        report("schemathesis' stateful phase: scenarios, time", f"{scenarios}, {took}")
        assert scenarios > 0, "the stateful phase did not run:\n" + run.stdout[-3000:]
        registered = registrations(har)
        report("registrations in the fuzz run", registered)
        assert all(registered[kind] >= least for kind, least in AT_LEAST.items()), registered
        assert ctl.proc.poll() is None
        for kind in ("tasks", "stages", "jobs", "coflows"):
            ctl.client.request("GET", f"/{kind}")  # every record it kept still serialises
        order = ctl.client.order()
        assert order["stale"] is False, ctl.client.stats()["last_reorder_error"]
    finally:
        ctl.stop()
    restarted = ControllerProcess(db, None, free_port()).start()
    try:
        assert restarted.client.order()["stale"] is False
        assert json.dumps(restarted.client.request("GET", "/coflows"))
    finally:
        restarted.stop()


IDLE_CONNECTIONS = 1500


def test_idle_connections_do_not_lock_the_api_out(tmp_path, report):
    """More idle (half-open) connections than eventlet's default pool of 1,024: a request
    still gets its answer at once, and the idle ones are closed after the socket timeout."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * IDLE_CONNECTIONS)), hard))
    ctl = ControllerProcess(tmp_path / "ctl.sqlite", None, free_port()).start()
    idle = []
    try:
        for _ in range(IDLE_CONNECTIONS):
            idle.append(socket.create_connection(("127.0.0.1", ctl.rest_port), timeout=5))
        started = time.monotonic()
        assert ctl.client.stats()["reorder_failures"] == 0
        answered = time.monotonic() - started
        report(f"GET /api/stats beside {IDLE_CONNECTIONS} idle connections (s)", answered)
        assert answered < 2.0
        idle[0].settimeout(30)
        assert idle[0].recv(1) == b""  # the server closed it: nothing was sent within 10 s
    finally:
        for sock in idle:
            sock.close()
        ctl.stop()
