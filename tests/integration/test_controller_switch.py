"""The real controller against a real userspace OVS bridge with hosts in namespaces.

Each test starts ``python -m controller`` (fresh SQLite file), registers through the REST API
and checks what the switch really holds (``ovs-ofctl dump-flows`` / ``dump-meters``) and where
real TCP traffic is counted (``tc -s class show``).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.conftest import needs_root_and
from topologies.host_qos import GENERATION_PREFS, HostPriorities, host_batch
from topologies.qos import class_bytes, level_classid, parse_class_bytes
from workloads.launcher import parse_marks, wanted_marks

from .fabric import NetnsFabric, free_port, sh, wait_for

pytestmark = [pytest.mark.integration, needs_root_and("ovs-vsctl", "ovs-ofctl", "iperf3", "tc")]

JOB_PORT = 5301


def job_flows(src="h1", dst="h2", size=2e6):
    return [{"src": src, "dst": dst, "bytes": size}]


@pytest.fixture(scope="module")
def fabric():
    sh("bash", "scripts/ovs.sh", "start")
    ofp_port = free_port()
    net = NetnsFabric(f"it{os.getpid() % 1000}", 3).start(ofp_port)
    net.ofp_port = ofp_port
    try:
        yield net
    finally:
        net.stop()
    assert sh("ovs-vsctl", "br-exists", net.bridge, check=False).returncode == 2
    assert not any(n.startswith(net.prefix) for n in sh("ip", "netns", "list").stdout.split())


@pytest.fixture
def controller(fabric, tmp_path):
    with fabric.controlled_by(tmp_path, "--policy", "varys") as ctl:
        yield ctl


def marks(fabric) -> dict[tuple, tuple]:
    """Our table-0 marking rules: (src, dst, tcp field, port) -> (dscp, meter or None)."""
    return parse_marks(fabric.dump_flows())


def meters(fabric) -> dict[int, int]:
    """meter id -> drop rate in kbit/s."""
    text = fabric.dump_meters()
    return {
        int(m): int(r)
        for m, r in re.findall(r"meter=(\d+) kbps bands=\s*type=drop rate=(\d+)", text)
    }


def test_forwarding_from_the_topology_is_installed_on_connect(fabric, controller):
    table1 = [line for line in fabric.dump_flows().splitlines() if "table=1" in line]
    for host in fabric.hosts:
        want = f"dl_dst={fabric.mac(host)} actions=output:{host[1:]}"
        assert any(want in line for line in table1), (want, table1)
    assert any("priority=0" in line and "CONTROLLER" in line for line in table1)
    ping = fabric.run("h1", "ping", "-c", "1", "-W", "2", "10.0.0.3")
    assert ping.returncode == 0, ping.stdout


def test_registration_reorder_and_delete(fabric, controller):
    client = controller.client
    client.put_stage(1)
    client.put_job(1, stage_id=1, flows=job_flows(), tcp_ports=[JOB_PORT], iteration_budget=5)

    # Varys alone on the fabric: top level (DSCP 56), MADD rate = the whole 20 Mbit/s port.
    # Data h1 -> h2 (the job's port as destination or source) is metered; the reverse
    # direction (its ACKs) has the same mark and no meter.
    want = {("10.0.0.1", "10.0.0.2", "dst", JOB_PORT), ("10.0.0.1", "10.0.0.2", "src", JOB_PORT)}
    acks = {("10.0.0.2", "10.0.0.1", "dst", JOB_PORT), ("10.0.0.2", "10.0.0.1", "src", JOB_PORT)}
    installed = wait_for(
        lambda: marks(fabric) if set(marks(fabric)) == want | acks else None,
        what="the job's marking rules",
    )
    assert {dscp for dscp, _ in installed.values()} == {56}
    (meter_id,) = {installed[k][1] for k in want}
    assert {installed[k][1] for k in acks} == {None}
    assert meters(fabric) == {meter_id: 20000}

    # A smaller coflow sharing h2's downlink goes first: the job drops to level 1 (DSCP 48) and
    # gets no bandwidth left by MADD, so its meter goes.
    client.put_coflow(9, job_flows("h3", "h2", 5e5))
    small = ("10.0.0.3", "10.0.0.2", None, None)
    wait_for(lambda: small in marks(fabric), what="the coflow's rule")
    after = wait_for(lambda: (m := marks(fabric)) and m[small][0] == 56 and m, what="reorder")
    assert {after[k][0] for k in want | acks} == {48}
    assert {after[k][1] for k in want | acks} == {None}
    assert list(meters(fabric).values()) == [20000]  # only the small coflow's meter is left

    # Deleting the coflow and then the stage (and with it the job) removes every rule and meter.
    client.delete("coflows", 9)
    wait_for(lambda: small not in marks(fabric), what="the coflow's rule to go")
    client.delete("stages", 1)
    wait_for(lambda: not marks(fabric) and not meters(fabric), what="all rules and meters to go")
    stats = client.stats()
    assert stats["event_to_flowmods_ms"]["count"] >= 5
    assert stats["switch_errors"] == 0, "the switch rejected a message; see the controller log"
    # what the controller believes is installed matches what the switch holds
    assert client.rules()["switches"][str(0xAA)] == {"flows": [], "meters": []}


def desired_marks(client) -> dict[tuple, tuple]:
    """The controller's wanted marking rules (``/api/rules``), keyed as :func:`marks`."""
    return wanted_marks(client.rules()["desired"])


def test_jobs_moved_as_a_whole_are_remarked_on_the_switch(fabric, controller):
    # Beamer moves whole stages: job 1 (two coflows) drops a level when a smaller stage on its
    # receiver's downlink comes, and comes back when it goes (the job's rules move by its DSCP,
    # one MODIFY by cookie): the switch ends with every rule's DSCP as wanted
    client = controller.client
    client.set_policy("beamer")
    client.put_stage(1)
    client.put_job(1, stage_id=1, tcp_ports=[JOB_PORT], iteration_budget=5)
    client.put_coflow(11, job_flows("h1", "h2", 4e6), job_id=1)
    client.put_coflow(12, job_flows("h3", "h2", 4e6), job_id=1)
    job1 = set(wait_for(lambda: len(m := marks(fabric)) == 8 and m, what="job 1's rules"))
    wait_for(lambda: marks(fabric) == desired_marks(client), what="the wanted marks")
    assert {marks(fabric)[k][0] for k in job1} == {56}

    client.put_stage(2)
    client.put_job(2, stage_id=2, tcp_ports=[JOB_PORT + 1], iteration_budget=5)
    client.put_coflow(21, job_flows("h1", "h2", 1e5), job_id=2)
    moved = wait_for(lambda: len(m := marks(fabric)) == 12 and {m[k][0] for k in job1} == {48}
                     and m, what="job 1 one level down")  # fmt: skip
    assert moved == desired_marks(client)
    assert {dscp for key, (dscp, _) in moved.items() if key not in job1} == {56}

    client.delete("stages", 2)
    back = wait_for(lambda: len(m := marks(fabric)) == 8 and m, what="job 2's rules to go")
    assert back == desired_marks(client) and {dscp for dscp, _ in back.values()} == {56}
    stats = client.stats()
    assert stats["switch_errors"] == 0 and stats["reorder_failures"] == 0


def test_restart_restores_rules_from_the_registry(fabric, controller, tmp_path):
    client = controller.client
    client.put_stage(1)
    client.put_job(1, stage_id=1, flows=job_flows(), tcp_ports=[JOB_PORT], iteration_budget=5)
    client.set_policy("sincronia")
    # sincronia installs no meters: wait until the switch from varys has landed
    before = wait_for(
        lambda: (
            (m := marks(fabric))
            and len(m) == 4
            and all(meter is None for _, meter in m.values())
            and m
        ),
        what="the job's rules (both directions), without meters",
    )

    controller.stop()
    # while the controller is down, wipe our rules from the switch by cookie
    sh(
        "ovs-ofctl",
        "-O",
        "OpenFlow13",
        "del-flows",
        fabric.bridge,
        "cookie=0x48504f0000000000/0xffffff0000000000",
    )
    assert marks(fabric) == {}

    controller.start()
    fabric.set_controller(fabric.ofp_port)
    # a dump may catch the batch half-installed: wait for the whole set
    wait_for(lambda: marks(fabric) == before, timeout_s=20, what="the same rules after restart")
    assert controller.client.policy()["name"] == "sincronia"  # the policy choice persisted
    assert [j["job_id"] for j in controller.client.list("jobs")] == [1]


def test_tcp_traffic_is_counted_in_the_class_of_its_priority(fabric, controller):
    client = controller.client
    client.set_policy("sincronia")
    client.put_job(1, flows=job_flows(size=4e6), tcp_ports=[JOB_PORT], iteration_budget=5)
    client.put_coflow(9, job_flows("h3", "h2", 1e6))
    job_rules = [("10.0.0.1", "10.0.0.2", "dst", JOB_PORT)]

    def iperf_bytes_by_class() -> tuple[dict, int]:
        server = fabric.popen("h2", "iperf3", "-s", "-1", "-p", str(JOB_PORT))
        wait_for(
            lambda: fabric.run("h2", "ss", "-ltn").stdout.count(f":{JOB_PORT}"),
            what="iperf3 server",
        )
        before = class_bytes(fabric.switch_port("h2"))
        result = fabric.run("h1", "iperf3", "-c", "10.0.0.2", "-p", str(JOB_PORT), "-t", "2", "-J")
        assert result.returncode == 0, result.stderr
        server.wait(timeout=10)
        after = class_bytes(fabric.switch_port("h2"))
        # bytes that reached h2 (what crossed the switch port; the classes also count headers)
        got = int(re.search(r'"bytes":\s*(\d+)', result.stdout.split('"sum_received"')[1]).group(1))
        return {c: after[c] - before.get(c, 0) for c in after}, got

    # The coflow (1 MB) is smaller than the job (4 MB): job at level 1, class 1:11.
    wait_for(lambda: (m := marks(fabric)) and m.get(job_rules[0], (0,))[0] == 48, what="level 1")
    delta, sent = iperf_bytes_by_class()
    assert delta[level_classid(1)] >= 0.9 * sent, delta
    assert delta[level_classid(0)] < 0.05 * sent, delta

    # Give the job a weight that puts it first: its traffic moves to level 0, class 1:10.
    client.put_job(
        1, flows=job_flows(size=4e6), tcp_ports=[JOB_PORT], iteration_budget=5, weight=100
    )
    wait_for(lambda: marks(fabric)[job_rules[0]][0] == 56, what="level 0")
    delta, sent = iperf_bytes_by_class()
    assert delta[level_classid(0)] >= 0.9 * sent, delta
    assert delta[level_classid(1)] < 0.05 * sent, delta
    assert client.stats()["switch_errors"] == 0


def test_htb_classes_really_prioritise(fabric, controller):
    """Two TCP senders into h2's 20 Mbit/s port: the higher level gets most of it."""
    client = controller.client
    client.set_policy("sincronia")
    client.put_job(1, flows=job_flows("h1", "h2", 1e6), tcp_ports=[JOB_PORT], iteration_budget=5)
    client.put_job(
        2, flows=job_flows("h3", "h2", 8e6), tcp_ports=[JOB_PORT + 1], iteration_budget=5
    )
    wait_for(lambda: len(marks(fabric)) == 8, what="both jobs' rules, both directions")
    servers = [
        fabric.popen("h2", "iperf3", "-s", "-1", "-p", str(p)) for p in (JOB_PORT, JOB_PORT + 1)
    ]
    wait_for(lambda: fabric.run("h2", "ss", "-ltn").stdout.count(":53") >= 2, what="servers")
    clients = [
        fabric.popen(h, "iperf3", "-c", "10.0.0.2", "-p", str(p), "-t", "3", "-J")
        for h, p in (("h1", JOB_PORT), ("h3", JOB_PORT + 1))
    ]
    rates = [received_bps(proc) for proc in clients]
    for server in servers:
        server.wait(timeout=10)
    print(f"level 0: {rates[0] / 1e6:.1f} Mbit/s, level 1: {rates[1] / 1e6:.1f} Mbit/s")
    assert rates[0] > 3 * rates[1]
    assert rates[0] + rates[1] > 0.7 * 20e6


def test_a_hosts_egress_serves_the_controllers_levels(fabric, controller):
    """h1 sends to h2 and h3 at once: only h1's own 20 Mbit/s egress is shared, and the host
    agent gives the more urgent job most of it (the switch ports are not the bottleneck)."""
    client = controller.client
    client.set_policy("sincronia")
    client.put_job(1, flows=job_flows("h1", "h2", 1e6), tcp_ports=[JOB_PORT], iteration_budget=5)
    client.put_job(
        2, flows=job_flows("h1", "h3", 8e6), tcp_ports=[JOB_PORT + 1], iteration_budget=5
    )
    wait_for(lambda: len(marks(fabric)) == 8, what="both jobs' rules, both directions")
    dev = fabric.host_dev("h1")
    fabric.tc_batch("h1", host_batch(dev, 20e6))
    agent = HostPriorities(
        {fabric.hosts["h1"]: (dev, lambda lines: fabric.tc_batch("h1", lines))},
        lambda: client.rules()["desired"]["flows"],
    )
    try:
        assert agent.refresh() == 1
        classes = agent_classes(fabric.run("h1", "tc", "filter", "show", "dev", dev).stdout)
        # job 1's port in both directions at level 0, job 2's at level 1
        assert sorted(classes) == [level_classid(0)] * 2 + [level_classid(1)] * 2
        before = parse_class_bytes(fabric.run("h1", "tc", "-s", "class", "show", "dev", dev).stdout)
        servers = [
            fabric.popen(h, "iperf3", "-s", "-1", "-p", str(p))
            for h, p in (("h2", JOB_PORT), ("h3", JOB_PORT + 1))
        ]
        for h, p in (("h2", JOB_PORT), ("h3", JOB_PORT + 1)):
            wait_for(lambda h=h, p=p: f":{p}" in fabric.run(h, "ss", "-ltn").stdout, what="server")
        clients = [
            fabric.popen("h1", "iperf3", "-c", ip, "-p", str(p), "-t", "3", "-J")
            for ip, p in (("10.0.0.2", JOB_PORT), ("10.0.0.3", JOB_PORT + 1))
        ]
        rates = [received_bps(proc) for proc in clients]
        for server in servers:
            server.wait(timeout=10)
        after = parse_class_bytes(fabric.run("h1", "tc", "-s", "class", "show", "dev", dev).stdout)
        sent = {c: after[c] - before.get(c, 0) for c in after}
        print(f"level 0: {rates[0] / 1e6:.1f} Mbit/s, level 1: {rates[1] / 1e6:.1f} Mbit/s")
        assert rates[0] > 3 * rates[1]
        assert rates[0] + rates[1] > 0.7 * 20e6
        assert sent[level_classid(0)] > 3 * sent[level_classid(1)] > 0
        assert sent[level_classid(7)] < 0.01 * sent[level_classid(0)]  # nothing unclassified

        # job 2 becomes the urgent one: the agent swaps the classes on the host
        client.put_job(
            2, flows=job_flows("h1", "h3", 1e5), tcp_ports=[JOB_PORT + 1], iteration_budget=5
        )
        wait_for(lambda: agent.refresh() == 1, what="the host's filters to change")
        shown = fabric.run("h1", "tc", "filter", "show", "dev", dev).stdout
        assert sorted(agent_classes(shown)) == [level_classid(0)] * 2 + [level_classid(1)] * 2
        assert f"pref {GENERATION_PREFS[1]} " not in shown  # the old generation is gone
    finally:
        fabric.run("h1", "tc", "qdisc", "del", "dev", dev, "root")


def agent_classes(shown: str) -> list[str]:
    """The classes of the host agent's filters in ``tc filter show`` output (not the DSCP
    filters every class has)."""
    prefs = tuple(f" pref {p} " for p in GENERATION_PREFS)
    return [
        line.split("flowid ")[1].split()[0]
        for line in shown.splitlines()
        if "flowid" in line and any(p in line for p in prefs)
    ]


def received_bps(proc) -> float:
    """What an ``iperf3 -J`` client's receiver got, in bit/s."""
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    received = out.split('"sum_received"')[1]
    return float(re.search(r'"bits_per_second":\s*([\d.e+]+)', received).group(1))


CHURN_CYCLES = 500


def test_churn_leaves_no_stale_rule_meter_or_record(fabric, controller, report):
    """Coflows registered and deleted over and over (Varys: each gets a rule, a meter and a
    reorder): afterwards the switch holds none of them and the controller's memory of records
    has not grown with the ids it has seen."""
    client = controller.client
    flows = job_flows("h1", "h3", 1e6)
    for cycle in range(CHURN_CYCLES):
        client.put_coflow(1000 + cycle, flows)
        client.put_coflow(5000 + cycle, job_flows("h2", "h3", 5e5))
        client.delete("coflows", 1000 + cycle)
        client.delete("coflows", 5000 + cycle)
    wait_for(lambda: not marks(fabric) and not meters(fabric), what="every rule and meter to go")
    stats = client.stats()
    assert stats["registered"]["coflows"] == 0 and stats["switch_errors"] == 0
    assert stats["reorder_failures"] == 0 and not stats["plan_stale"]
    assert client.rules()["switches"][str(0xAA)] == {"flows": [], "meters": []}
    rss_kb = int(open(f"/proc/{controller.proc.pid}/status").read().split("VmRSS:")[1].split()[0])
    report(f"controller RSS after {CHURN_CYCLES} x 2 coflow add/delete cycles (MB)", rss_kb / 1024)


def test_nothing_left_running(fabric, controller):
    """The controller's PID is ours and stops on SIGTERM."""
    pid = controller.proc.pid
    controller.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert (
        subprocess.run(["ss", "-ltn"], capture_output=True, text=True).stdout.count(
            f":{controller.rest_port} "
        )
        == 0
    )
