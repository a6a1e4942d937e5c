"""A real Prometheus scrapes the real controller's ``/metrics`` during a short run on a real
userspace OVS bridge with hosts in namespaces and TCP traffic between them.

Prometheus (Debian's ``prometheus`` binary) listens on loopback only, keeps its data under the
test's ``tmp_path`` and scrapes the controller every second with the controller's API token as
its bearer token. Through Prometheus' HTTP API (``/api/v1/query``) the test checks that the
reorders increased and that the bytes of priority level 0 moved on the receiver's switch port
by as much as the transfer sent.

The switch reports a level's bytes through its queue statistics only when it knows the level's
HTB class as one of its queues. Open vSwitch learns a port's classes from its own QoS
configuration (OVSDB, linux-htb), never from classes ``tc`` made behind its back, which it
neither reads nor reports: here the receiver's port gets the eight classes through OVSDB as
queues 15..22 (Open vSwitch makes queue q the class 1:(q + 1), which is level q - 15's class of
``topologies/qos.py``), plus the DSCP filters that pick them.

Prometheus is stopped by its PID; the bridge, its ports and the namespaces are removed by name
(only while they carry this run's mark), and the OVSDB rows made here by their UUIDs. Without
the ``prometheus`` binary the test is skipped, except in CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import requests

from controller.schedule import N_LEVELS, level_queue_id
from tests.conftest import needs_root_and
from topologies.qos import GUARANTEED_FRACTION, htb_commands
from workloads.launcher import parse_marks

from .fabric import NetnsFabric, free_port, sh, stop_process, wait_for

pytestmark = [pytest.mark.integration, needs_root_and("ovs-vsctl", "ovs-ofctl", "iperf3", "tc")]

TOKEN = "prometheus-scrapes-with-this-token"
JOB_PORT = 5401
RATE_BPS = 20e6
SCRAPE_S = 1
SWITCH = "00000000000000aa"  # the fabric's datapath id, as the metrics label it
RECEIVER = "h2"


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    """The ``prometheus`` binary; its absence skips the test, but fails it in CI (asked for
    first, before any switch is made)."""
    found = shutil.which("prometheus")
    if found is None:
        reason = "needs the prometheus binary (scripts/setup.sh installs Debian's prometheus)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; CI=true, so this is a failure, not a skip")
        pytest.skip(reason)
    return found


class PrometheusServer:
    """A Prometheus of this test's own: loopback only, its data in ``folder``, scraping
    ``target``'s ``/metrics`` every :data:`SCRAPE_S` seconds with ``token`` as bearer token."""

    def __init__(self, binary: str, folder: Path, target: str, token: str | None) -> None:
        self.binary = binary
        self.folder = folder
        self.target = target
        self.token = token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = folder / "prometheus.log"

    def config(self) -> dict:
        """The configuration file's content (YAML, written as JSON, which YAML reads)."""
        job: dict = {
            "job_name": "hpo-controller",
            "scrape_interval": f"{SCRAPE_S}s",
            "scrape_timeout": f"{SCRAPE_S}s",
            "metrics_path": "/metrics",
            "static_configs": [{"targets": [self.target]}],
        }
        if self.token is not None:
            token_file = self.folder / "token"
            token_file.write_text(self.token)
            token_file.chmod(0o600)
            job["authorization"] = {"type": "Bearer", "credentials_file": str(token_file)}
        return {
            "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
            "scrape_configs": [job],
        }

    def start(self) -> PrometheusServer:
        """Start it and wait until it is ready."""
        config = self.folder / "prometheus.yml"
        config.write_text(json.dumps(self.config(), indent=2))
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.folder / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_for(self._ready, timeout_s=60, interval_s=0.5, what="Prometheus to be ready")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-2000:]
        try:
            return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    def query(self, expr: str) -> list[dict]:
        """An instant query's result vector."""
        reply = requests.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        reply.raise_for_status()
        body = reply.json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def scalar(self, expr: str) -> float | None:
        """The value of a query that gives at most one series (``None``: none yet)."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        """Stop it by its PID (SIGTERM, then SIGKILL)."""
        if self.proc is not None:
            stop_process(self.proc, timeout_s=20)


@pytest.fixture(scope="module")
def fabric():
    sh("bash", "scripts/ovs.sh", "start")
    ofp_port = free_port()
    net = NetnsFabric(f"pm{os.getpid() % 1000}", 3, RATE_BPS).start(ofp_port)
    net.ofp_port = ofp_port
    try:
        yield net
    finally:
        net.stop()
    assert sh("ovs-vsctl", "br-exists", net.bridge, check=False).returncode == 2
    assert not any(n.startswith(net.prefix) for n in sh("ip", "netns", "list").stdout.split())


@pytest.fixture
def level_queues(fabric):
    """The receiver's switch port with the level classes as OVS queues (OVSDB QoS), and the
    DSCP filters into them; the rows are destroyed afterwards, by UUID."""
    port = fabric.switch_port(RECEIVER)
    rate = int(RATE_BPS)
    floor = max(8000, int(RATE_BPS * GUARANTEED_FRACTION))
    # queue 0 is the default class (1:1, where ARP goes), then one queue per level
    priorities = {0: 0, **{level_queue_id(level): level for level in range(N_LEVELS)}}
    argv = ["ovs-vsctl", "--", "set", "port", port, "qos=@qos",
            "--", "--id=@qos", "create", "qos", "type=linux-htb", f"other-config:max-rate={rate}",
            "queues=" + ",".join(f"{q}=@q{q}" for q in priorities)]  # fmt: skip
    for queue, priority in priorities.items():
        argv += ["--", f"--id=@q{queue}", "create", "queue", f"other-config:min-rate={floor}",
                 f"other-config:max-rate={rate}", f"other-config:priority={priority}"]  # fmt: skip
    made = sh(*argv).stdout.split()  # the new rows' UUIDs, the QoS first
    try:
        assert len(made) == 1 + len(priorities), made
        # OVS made its own HTB qdisc in place of the one tc made: the DSCP filters again
        for cmd in htb_commands(port, RATE_BPS):
            if cmd[1] == "filter":
                sh(*cmd)
        yield port
    finally:
        sh("ovs-vsctl", "--if-exists", "clear", "port", port, "qos", check=False)
        destroy = ["ovs-vsctl", "--", "--if-exists", "destroy", "qos", made[0]]
        for queue in made[1:]:
            destroy += ["--", "--if-exists", "destroy", "queue", queue]
        sh(*destroy, check=False)


@pytest.fixture
def controller(fabric, tmp_path, monkeypatch):
    # (the controller takes its token from the environment, as does the test's client)
    monkeypatch.setenv("HPO_API_TOKEN", TOKEN)
    with fabric.controlled_by(tmp_path, "--policy", "sincronia", "--stats-interval", "1") as ctl:
        yield ctl


def received_bytes(iperf_json: str) -> int:
    """What an ``iperf3 -J`` client's receiver got, in bytes."""
    received = json.loads(iperf_json)["end"]["sum_received"]
    return int(received["bytes"])


def test_prometheus_sees_reorders_and_level_bytes_move(
    prometheus_binary, fabric, level_queues, controller, tmp_path
):
    metrics_url = f"http://127.0.0.1:{controller.rest_port}/metrics"
    assert requests.get(metrics_url, timeout=5).status_code == 401  # the token is required
    target = f"127.0.0.1:{controller.rest_port}"
    prometheus = PrometheusServer(prometheus_binary, tmp_path, target, TOKEN).start()
    pid = prometheus.proc.pid
    try:
        wait_for(lambda: prometheus.scalar('up{job="hpo-controller"}') == 1, timeout_s=30,
                 what="Prometheus' first successful scrape (with the token)")  # fmt: skip
        wait_for(
            lambda: prometheus.scalar('sum(hpo_port_level_tx_bytes_total{port="2"})') is not None,
            timeout_s=30,
            what="the receiver port's level counters (queue statistics) in Prometheus",
        )
        reorders_before = prometheus.scalar("hpo_reorders_total")
        served_before = prometheus.scalar("sum(hpo_reorder_latency_seconds_count)") or 0.0
        level0 = 'sum(hpo_port_level_tx_bytes_total{port="2", level="0"})'
        level1 = 'sum(hpo_port_level_tx_bytes_total{port="2", level="1"})'
        bytes_before = {expr: prometheus.scalar(expr) or 0.0 for expr in (level0, level1)}

        # alone on the fabric, the job is at level 0 (DSCP 56) under Sincronia
        client = controller.client
        client.put_job(1, flows=[{"src": "h1", "dst": RECEIVER, "bytes": 4e6}],
                       tcp_ports=[JOB_PORT], iteration_budget=5)  # fmt: skip
        data_rule = ("10.0.0.1", "10.0.0.2", "dst", JOB_PORT)
        wait_for(lambda: parse_marks(fabric.dump_flows()).get(data_rule, (None,))[0] == 56,
                 what="the job's level-0 marking rule on the switch")  # fmt: skip

        server = fabric.popen(RECEIVER, "iperf3", "-s", "-1", "-p", str(JOB_PORT))
        wait_for(lambda: f":{JOB_PORT}" in fabric.run(RECEIVER, "ss", "-ltn").stdout,
                 what="the iperf3 server")  # fmt: skip
        run = fabric.run("h1", "iperf3", "-c", "10.0.0.2", "-p", str(JOB_PORT), "-t", "3", "-J")
        assert run.returncode == 0, run.stderr
        server.wait(timeout=10)
        sent = received_bytes(run.stdout)
        assert sent > 0

        def moved(expr: str) -> float:
            return (prometheus.scalar(expr) or 0.0) - bytes_before[expr]

        # the classes count headers too: at least what reached the receiver
        wait_for(lambda: moved(level0) >= 0.9 * sent, timeout_s=30,
                 what=f"level 0's bytes on the receiver's port to grow by {sent}")  # fmt: skip
        assert moved(level1) < 0.05 * sent
        wait_for(lambda: prometheus.scalar("hpo_reorders_total") > reorders_before,
                 what="the reorders to increase")  # fmt: skip
        wait_for(
            lambda: prometheus.scalar("sum(hpo_reorder_latency_seconds_count)") > served_before,
            what="a reorder that served the registration to be observed",
        )
        rules = prometheus.scalar(f'hpo_switch_rules{{switch="{SWITCH}"}}')
        assert rules == len(client.rules()["switches"][str(0xAA)]["flows"]) > 0
        assert prometheus.scalar('hpo_level_coflows{level="0"}') >= 1
        endpoints = {r["metric"]["endpoint"] for r in
                     prometheus.query("count by (endpoint) (hpo_rest_requests_total)")}  # fmt: skip
        assert {"/api/jobs/{id}", "/metrics"} <= endpoints, endpoints
        assert not any(re.search(r"[0-9]", e) for e in endpoints), endpoints
        assert client.stats()["switch_errors"] == 0
    finally:
        prometheus.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    listening = subprocess.run(["ss", "-ltn"], capture_output=True, text=True).stdout
    assert f"127.0.0.1:{prometheus.port} " not in listening
