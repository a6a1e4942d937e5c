"""Schemathesis against the live controller: generated and mutated requests from the controller's
own ``/api/openapi.json`` get no server error and answers that conform to the document, and the
controller is still whole afterwards (and after a restart on the same database).

Bounded by ``--max-time`` so that it stays a few minutes of CI. Left out, with the reason:
``positive_data_acceptance`` (a body valid by the schema may still be refused for what a schema
cannot say: a ``stage_id`` that is not registered, ``src == dst``, ``remaining_bytes > bytes``).
"""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workloads.launcher import ControllerProcess, free_port

pytestmark = pytest.mark.integration

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
FUZZ_SECONDS = 60


@pytest.mark.skipif(not SCHEMATHESIS.exists(), reason="needs schemathesis (scripts/setup.sh)")
def test_generated_requests_get_no_server_error_and_conform(tmp_path, report):
    db = tmp_path / "ctl.sqlite"
    ctl = ControllerProcess(db, None, free_port(), "--policy", "sincronia").start()
    try:
        spec = f"http://127.0.0.1:{ctl.rest_port}/api/openapi.json"
        run = subprocess.run(
            [str(SCHEMATHESIS), "run", spec, "--checks", "all", "--exclude-checks",
             "positive_data_acceptance", "--max-time", str(FUZZ_SECONDS), "--seed", "1",
             # one worker: the stateful phase expects what a scenario created to stay until it
             # deletes it, and a second worker's scenario may delete its task meanwhile (a task
             # takes its stages): a race between the two clients, not an API fault
             "--workers", "1", "--header", "Content-Type: application/json",
             "--report", "junit", "--report-dir", str(tmp_path)],
            cwd=tmp_path, capture_output=True, text=True, timeout=FUZZ_SECONDS + 120,
        )  # fmt: skip
        out = run.stdout.splitlines()
        cases = [
            out[i + 1].strip() for i, line in enumerate(out[:-1]) if line.strip() == "Test cases:"
        ]
        report(f"schemathesis against the live controller, {FUZZ_SECONDS} s", (cases or ["?"])[-1])
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
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
