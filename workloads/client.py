"""Python client of the controller's REST API (see ``controller/openapi.yaml``).

Used by the job manager, the HPO driver and the experiment scripts; it runs in the root network
namespace (Mininet hosts cannot reach the controller's loopback address).

    client = ControllerClient("http://127.0.0.1:8080")
    client.wait_ready()
    client.put_stage(1, task_id=None)
    client.put_job(1, stage_id=1, flows=[{"src": "h1", "dst": "h2", "bytes": 1e6}],
                   tcp_ports=[5001], iteration_budget=100)
    client.job_progress(1, iterations_done=10)
"""

from __future__ import annotations

import os
import time
from typing import Any

import requests


class ControllerError(Exception):
    """The controller refused a request (``status``) or could not be reached (``status`` 0)."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.field = field


class ControllerClient:
    """Thin wrapper over the REST API; every method returns the decoded JSON answer.

    Args:
        base_url: where the controller's REST API listens.
        timeout_s: per-request timeout.
        token: the controller's ``--api-token`` (default: ``$HPO_API_TOKEN``, if set).
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        timeout_s: float = 5.0,
        token: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = requests.Session()
        token = token if token is not None else os.environ.get("HPO_API_TOKEN")
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One request; the JSON answer, or :class:`ControllerError` with the API's message."""
        url = f"{self.base_url}/api{path}"
        try:
            response = self.session.request(method, url, json=body, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise ControllerError(0, f"cannot reach the controller at {url}: {exc}") from None
        try:
            payload = response.json()
        except ValueError:
            raise ControllerError(response.status_code, f"non-JSON answer from {url}") from None
        if response.status_code >= 400:
            error = payload.get("error", {}) if isinstance(payload, dict) else {}
            raise ControllerError(
                response.status_code, error.get("message", str(payload)), error.get("field")
            )
        return payload

    def wait_ready(self, timeout_s: float = 30.0) -> dict:
        """Block until the API answers (e.g. right after starting the controller)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.policy()
            except ControllerError as exc:
                if exc.status or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    # ---- registry ------------------------------------------------------------------------------

    def put_task(self, task_id: int, name: str = "", weight: float = 1.0) -> dict:
        """Register (or replace) a task."""
        return self.request("PUT", f"/tasks/{task_id}", {"name": name, "weight": weight})

    def put_stage(self, stage_id: int, task_id: int | None = None, weight: float = 1.0) -> dict:
        """Register (or replace) a stage."""
        body: dict[str, Any] = {"weight": weight}
        if task_id is not None:
            body["task_id"] = task_id
        return self.request("PUT", f"/stages/{stage_id}", body)

    def put_job(self, job_id: int, **fields: Any) -> dict:
        """Create or replace a job: ``stage_id``, ``flows``, ``tcp_ports``, ``iteration_budget``,
        ``iterations_done``, ``task_id``, ``weight``."""
        return self.request("PUT", f"/jobs/{job_id}", fields)

    def put_coflow(self, coflow_id: int, flows: list[dict], **fields: Any) -> dict:
        """Create or replace a coflow; ``fields``: ``job_id``, ``stage_id``, ``weight``."""
        return self.request("PUT", f"/coflows/{coflow_id}", {"flows": flows, **fields})

    def job_progress(self, job_id: int, iterations_done: int) -> dict:
        """Report a job's iterations done."""
        return self.request(
            "POST", f"/jobs/{job_id}/progress", {"iterations_done": iterations_done}
        )

    def coflow_progress(self, coflow_id: int, remaining_bytes: list[float]) -> dict:
        """Report a coflow's remaining bytes per flow."""
        return self.request(
            "POST", f"/coflows/{coflow_id}/progress", {"remaining_bytes": remaining_bytes}
        )

    def coflow_done(self, coflow_id: int) -> dict:
        """Report that a coflow is done (the controller deletes it)."""
        return self.request("POST", f"/coflows/{coflow_id}/progress", {"done": True})

    def delete(self, kind: str, ident: int) -> dict:
        """Delete a task, stage, job or coflow (``kind`` is the plural) and its dependants."""
        return self.request("DELETE", f"/{kind}/{ident}")

    def list(self, kind: str) -> list[dict]:
        """Every record of a collection (``jobs``, ``coflows``, ...)."""
        return self.request("GET", f"/{kind}")

    # ---- policy and views ----------------------------------------------------------------------

    def policy(self) -> dict:
        """The policy in force and the available ones."""
        return self.request("GET", "/policy")

    def set_policy(self, name: str, **options: Any) -> dict:
        """Switch the policy, with options."""
        return self.request("PUT", "/policy", {"name": name, "options": options})

    def order(self) -> dict:
        """The current coflow order."""
        return self.request("GET", "/order")

    def rules(self) -> dict:
        """The wanted rules and what each switch holds."""
        return self.request("GET", "/rules")

    def stats(self) -> dict:
        """The controller's statistics."""
        return self.request("GET", "/stats")

    def fabric(self) -> dict:
        """The fabric: switches, discovered links, host locations and reroutes."""
        return self.request("GET", "/fabric")
