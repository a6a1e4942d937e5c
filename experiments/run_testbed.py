"""The testbed experiment: one seeded HPO workload on the Mininet testbed under each policy.

    sudo .venv/bin/hpo-testbed [--policy fair fifo-lm sincronia jpas beamer]
        [--gpu-policy none fifo rr slaq hermes] [--gpus-per-host 1] [--quantum 5]
        [--hosts 13] [--bw 20] [--tasks 2] [--configs 9] [--eta 3] [--min-iterations 3]
        [--link-gbps 1] [--patterns ring] [--seeds 1] [--no-host-priorities]
        [--tcp-rto-max-ms 1000|off]
        [--calibrate | --calibration JSON] [--out results/testbed]

The defaults are the main experiment: a network-bound cluster (1 Gbit/s links, ring
all-reduce, the busiest ports mostly busy while stages run). The compute-bound point of
docs/testbed.md is ``--link-gbps 10 --patterns ps ring --min-iterations 10``.

For every policy: start OVS if needed, the controller (``python -m controller``, fresh
registry), the one-switch testbed (userspace OVS, TCLink at ``--bw`` Mbit/s, 8 HTB classes per
switch port), and the HPO driver with its worker processes; collect stage/job completion times,
time to 90 % / 95 % of converged accuracy, link utilisation and bytes per priority class; tear
everything down (by handle and by name, also on Ctrl-C or an error). Bytes are divided by
``--link-gbps / --bw`` (the modelled real link rate over the emulated one) so that
every link keeps the real compute/communication ratio. With ``--gpu-policy`` every network
policy also runs under each GPU time-sharing policy (the job manager of ``workloads/gpu.py``
pauses and resumes the workers; ``none``: every job computes at once). Both flags take policies
of one's own too (``package.module:Class`` or an entry point's name, :mod:`controller.plugins`):
the controller is started with the same ``--policy``, and finds the module where this process
did (``<label>`` is then the policy's ``name``). Every (policy, seed) runs
on the testbed and, beside it, in the simulator on the same workload, seed, link rate and bytes:
the raw fluid model, and with ``--calibrate`` (measure first, into ``<out>/calibration/``) or
``--calibration`` (an earlier ``hpo-calibrate`` result) also the model with the testbed's
measured job start-up and goodput (:mod:`simulator.calibration`, the same for every policy).
The levels are served on the hosts' egress too (:mod:`topologies.host_qos`), as the simulator
serves them on every port; ``--no-host-priorities`` leaves the hosts FIFO (switch only).
TCP's retransmission timeout is capped at 1 s (``--tcp-rto-max-ms``), so that a flow a higher
level starved resumes when promoted: docs/testbed.md, "TCP under priorities".
Writes ``<label>/seed-<N>/`` (result.json with the hosts' TCP retransmissions and timeouts,
stages / jobs / configs / tasks CSV, iterations.csv: every rank's every synchronisation, worker
logs, timeline.json and timeline-simulated.json with schedule.png: the levels and port
utilisation over time as recorded beside the simulator's prediction),
``results.json`` (every run), ``summary.json`` (per policy over the seeds: mean +/- 95 % CI,
the simulator's prediction, the ratio to fair sharing paired per seed, the clearly best policy
if any, and provenance), ``stages.csv`` and ``testbed.png``, and prints the tables.

The policies, the simulator and the testbed's driver (numba's kernels) are imported where a
run needs them, so that ``--help`` and a bad flag answer at once.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from cli.argtypes import (  # noqa: E402
    POLICY_NAMES,
    non_negative,
    number,
    output_folder,
    policy_help,
    policy_name,
    positive,
    program,
)
from cli.progress import Progress  # noqa: E402
from controller.cluster import ONE_SWITCH, Cluster  # noqa: E402
from controller.metrics import summarise  # noqa: E402
from controller.stats import (  # noqa: E402
    Interval,
    clear_best,
    format_interval,
    mean_ci,
    paired_ratio_ci,
)
from controller.timeline import CoflowLevel, Timeline, port_names  # noqa: E402
from experiments.figures import error_bars, spread_note  # noqa: E402
from netsched_data import BUNDLED  # noqa: E402
from simulator.__main__ import run_label  # noqa: E402
from simulator.calibration import Overheads  # noqa: E402
from simulator.metrics import provenance, write_csv, write_json  # noqa: E402
from simulator.schedule_plot import draw as draw_schedule  # noqa: E402

try:  # the testbed's own layer needs Mininet (the simulator-only install has none)
    from topologies import network
    from topologies.testbed import ClusterTopo
except ModuleNotFoundError as missing:
    if (missing.name or "").split(".")[0] not in ("mininet", "ryu"):
        raise
    raise SystemExit(
        f"{Path(sys.argv[0]).name}: {missing.name.split('.')[0]} is not installed: the testbed "
        "needs Mininet, "
        "Ryu and Open vSwitch; `sudo bash scripts/setup.sh` installs them"
    ) from None
from topologies.host_qos import HostPriorities  # noqa: E402
from topologies.qos import class_bytes, parse_class_bytes  # noqa: E402
from workloads.client import ControllerError  # noqa: E402
from workloads.gpu import (  # noqa: E402
    GPU_POLICIES,
    GpuManager,
    gpu_policy_name,
    make_gpu_policy,
)
from workloads.hpo import MODEL_ZOO, PATTERNS, SEARCHES, describe_workload, generate  # noqa: E402
from workloads.launcher import ControllerProcess, free_port  # noqa: E402
from workloads.profiles import PROFILES  # noqa: E402
from workloads.yahpo import LcBench, YahpoError  # noqa: E402

# the checkout this runs from (the OVS start-up script)
ROOT = Path(__file__).resolve().parents[1]

DEFAULT_POLICIES = ["fair", "fifo-lm", "sincronia", "jpas", "beamer"]


def curves_name(args) -> str | None:
    """Where the workload's learning curves come from, if not the parametric ones."""
    return None if args.yahpo is None else f"LCBench task {args.yahpo_task}"


def workload_name(args) -> str:
    """The seeded HPO workload of this run (:func:`workload`) in a figure's title."""
    return describe_workload(
        args.configs, args.search, args.patterns, args.hosts, args.tasks, args.seed,
        curves_name(args),
    )  # fmt: skip


def workload(args) -> list:
    """The seeded HPO workload of this run (bytes already divided by the link scale)."""
    return generate(
        args.hosts,
        args.tasks,
        seed=args.seed,
        configs_per_task=args.configs,
        eta=args.eta,
        min_iterations=args.min_iterations,
        workers=args.workers,
        patterns=tuple(args.patterns),
        models=tuple(args.models),
        mean_interarrival_s=args.interarrival,
        link_scale=args.link_scale,
        surrogate=args.surrogate,
        search=args.search,
    )


def cluster_of(args) -> Cluster:
    """The run's network: the one switch, or the leaf-spine fabric of ``--topology
    leaf-spine``, its links at ``--bw`` Mbit/s."""
    link_bps = args.bw * 1e6
    if getattr(args, "topology", ONE_SWITCH) == ONE_SWITCH:
        return Cluster.one_switch(args.hosts, link_bps)
    return Cluster.leaf_spine(args.leaves, args.hosts_per_leaf, args.spines, link_bps,
                              args.oversubscription)  # fmt: skip


# What one ovs-vswitchd thread of this machine forwards with 12 TCP senders (docs/testbed.md),
# and the switches a packet between two leaves crosses (each crossing is one more pass).
SWITCH_FORWARDING_MBPS = 1300
FABRIC_CROSSINGS = 3


def forwarding_load_warning(args) -> str | None:
    """A warning when the leaf-spine's hosts, all sending at line rate across leaves, would
    need more forwarding than this machine's userspace switch has (the links would then no
    longer be the bottleneck); ``None`` when it fits."""
    need = args.hosts * args.bw * FABRIC_CROSSINGS
    if need <= SWITCH_FORWARDING_MBPS:
        return None
    return (
        f"{args.hosts} hosts x {args.bw:g} Mbit/s crossing up to {FABRIC_CROSSINGS} switches "
        f"need up to {need:g} Mbit/s of forwarding, and this machine's userspace switch "
        f"forwards about {SWITCH_FORWARDING_MBPS}: the switch, not the links, may then limit "
        "the run (lower --bw or the hosts; docs/testbed.md, 'A fabric of switches')"
    )


def spine_failure(net, cluster: Cluster, at_s: float, record: dict):
    """A ``sample`` wrapper's action: at ``at_s`` into the run, every link of the first spine
    goes down (both ends of each, as a dead spine's neighbours see it); what happened goes into
    ``record``: when, which spine, and how long the controller took to reroute."""

    def fail(now_s: float) -> None:
        if record or now_s < at_s:
            return
        spine = cluster.spine_switches[0].name
        failed_at = time.monotonic()
        for leaf in cluster.leaf_switches:
            net.configLinkStatus(leaf.name, spine, "down")
        record.update(spine=spine, at_s=now_s, monotonic_s=failed_at)

    return fail


def reroute_summary(record: dict, fabric: dict) -> dict | None:
    """What a spine failure cost the controller: the first reroute after it (seconds from the
    failure to the rules being computed, rules changed) from ``/api/fabric``'s changes."""
    if not record:
        return None
    after = [
        c for c in fabric.get("changes", [])
        if c["at_s"] >= record["monotonic_s"] and c["rules_changed"] > 0
    ]  # fmt: skip
    first = after[0] if after else None
    return {
        "spine": record["spine"],
        "failed_at_s": record["at_s"],
        "reroute_s": None if first is None else first["at_s"] - record["monotonic_s"],
        "rules_changed": sum(c["rules_changed"] for c in after),
        "changes": [c["what"] for c in after],
    }


def job_manager(args, gpu_policy: str) -> GpuManager | None:
    """A fresh GPU job manager for ``gpu_policy`` (``None`` for ``none``); resuming a paused
    worker costs nothing on the testbed."""
    if gpu_policy == "none":
        return None
    return GpuManager(
        make_gpu_policy(gpu_policy), args.hosts, args.gpus_per_host, args.quantum, 0.0
    )


ROOT_CLASS = "1:1"


def class_deltas(before: dict[str, dict], after: dict[str, dict]) -> dict[str, int]:
    """Bytes each HTB class sent between two readings, summed over the devices read."""
    sent: dict[str, int] = {}
    for device, counts in after.items():
        for cls, count in counts.items():
            sent[cls] = sent.get(cls, 0) + count - before[device].get(cls, 0)
    return sent


def host_class_bytes(host) -> dict[str, int]:
    """Bytes sent by each class of a Mininet host's egress (its HTB, or its shaper's root)."""
    return parse_class_bytes(host.cmd(f"tc -s class show dev {host.defaultIntf().name}"))


TCP_COUNTERS = ("RetransSegs", "OutSegs", "TCPTimeouts", "TCPSynRetrans", "TCPLossProbes",
                "TCPSACKReorder", "TCPAbortOnData", "TCPAbortOnClose", "TCPAbortOnMemory",
                "TCPAbortOnTimeout", "TCPAbortOnLinger", "TCPAbortFailed", "ListenOverflows",
                "ListenDrops", "EstabResets", "OutRsts", "SyncookiesSent", "SyncookiesRecv",
                "SyncookiesFailed", "TCPReqQFullDoCookies", "TCPReqQFullDrop")  # fmt: skip


def tcp_counters(host) -> dict[str, int]:
    """The host's TCP counters of :data:`TCP_COUNTERS` (its namespace's ``/proc/net/snmp`` and
    ``/proc/net/netstat``): retransmissions and timeouts say where TCP, not the schedule, lost
    time."""
    return parse_tcp_counters(host.cmd("cat /proc/net/snmp /proc/net/netstat"))


def parse_tcp_counters(text: str) -> dict[str, int]:
    """:data:`TCP_COUNTERS` from ``/proc/net/snmp`` and ``/proc/net/netstat`` text (pairs of a
    header line and a value line per protocol)."""
    counters: dict[str, int] = {}
    lines = text.splitlines()
    for names, values in zip(lines, lines[1:], strict=False):
        head, _, rest = names.partition(":")
        if head in ("Tcp", "TcpExt") and values.startswith(head + ":"):
            counters.update(zip(rest.split(), map(int, values.split()[1:]), strict=True))
    return {key: counters.get(key, 0) for key in TCP_COUNTERS}


def simulate(
    policy: str,
    args,
    tasks: list,
    gpu_policy: str = "none",
    overheads: Overheads | None = None,
    timeline: Timeline | None = None,
) -> dict:
    """The simulator's prediction for the same workload, seed, link rate and bytes (emulated
    bytes at the emulated rate: the same seconds as real bytes at the modelled rate), with the
    testbed's measured ``overheads`` if given; ``stage_sct_s`` has every stage's SCT keyed
    ``"<task>.<index>"`` (stage ids differ between testbed and simulator), for comparing stage by
    stage with the run's ``stages.csv``. Records the run's schedule into ``timeline`` if given."""
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator
    from simulator.hpo import HpoDriver

    overheads = overheads or Overheads()
    cluster = cluster_of(args)
    fabric = Fabric.of(replace(cluster, link_bps=cluster.link_bps * overheads.goodput))
    sim = Simulator(fabric, make_policy(policy), timeline=timeline)
    driver = HpoDriver(
        sim, tasks, gpus=job_manager(args, gpu_policy), job_startup_s=overheads.job_startup_s
    )
    sim.run()
    if timeline is not None:
        timeline.close(sim.now_s)
        timeline.stages = driver.core.stage_labels()
    stage_sct_s = {
        f"{row['task_id']}.{row['index']}": row["sct_s"] for row in driver.core.stage_rows()
    }
    return {**driver.core.summary(sim.now_s), "stage_sct_s": stage_sct_s}


RUN_FAILURES = (RuntimeError, TimeoutError, OSError, ControllerError)
# what a run trains: a workload, or what makes a fresh one for the testbed and for each
# prediction (called with "testbed" or "prediction"); None: the seeded workload of args
Tasks = list | Callable[[str], list] | None


def run_with_retries(
    policy: str,
    args,
    out: Path,
    gpu_policy: str = "none",
    tasks: Tasks = None,
    workload_title: str | None = None,
) -> tuple[dict, list[str]]:
    """:func:`run_policy`, tried again in a fresh testbed up to ``args.retries`` times after a
    failure (runs are independent repeats of the same workload). Returns the result and the
    errors of the attempts that failed, whose folders are kept beside ``out`` as
    ``<out>-failed-<attempt>`` (worker logs, ``tcp.json``); raises the last error if every
    attempt failed."""
    errors: list[str] = []
    while True:
        try:
            return run_policy(policy, args, out, gpu_policy, tasks, workload_title), errors
        except RUN_FAILURES as exc:
            errors.append(str(exc))
            if len(errors) > args.retries:
                raise
            kept = out.with_name(f"{out.name}-failed-{len(errors)}")
            if out.exists():
                shutil.rmtree(kept, ignore_errors=True)
                out.rename(kept)
            print(f"!! {out}: attempt {len(errors)} failed: {exc}; trying again in a fresh "
                  f"testbed (the failed attempt's files: {kept})", flush=True)  # fmt: skip


SAMPLE_PERIOD_S = 0.5  # the testbed's timeline: levels and port counters this often


def testbed_recorder(ctl: ControllerProcess, timeline: Timeline, host_ports: list[str]):
    """A ``sample`` for :class:`TestbedDriver`: every :data:`SAMPLE_PERIOD_S`, the levels of
    the controller's plan (``GET /api/order``; a job's traffic is one coflow ``job<N>`` while
    the job is registered, computing or sending) and the byte counters of the hosts' switch
    ports (``host_ports[I]`` receives what host I sends) into ``timeline``."""
    counters = [
        Path(f"/sys/class/net/{port}/statistics/{side}_bytes")
        for side in ("rx", "tx")
        for port in host_ports
    ]
    start = [int(path.read_text()) for path in counters]
    next_s = 0.0

    def sample(now_s: float, force: bool = False) -> None:
        nonlocal next_s
        if now_s < next_s and not force:
            return
        next_s = now_s + SAMPLE_PERIOD_S
        try:
            order = ctl.client.order()["order"]
        except ControllerError:  # no plan right now: the levels of the last sample hold
            order = None
        if order is not None:
            timeline.levels_at(
                now_s,
                [
                    CoflowLevel(
                        f"job{e['job_id']}" if e["implicit"] else e["coflow_id"],
                        e["job_id"],
                        e["stage_id"],
                        e["level"],
                    )
                    for e in order
                ],
            )
        try:
            timeline.ports_at(
                now_s, [int(p.read_text()) - s for p, s in zip(counters, start, strict=True)]
            )
        except OSError:  # the switch is going away; the watch reports it
            pass

    return sample


SWITCH_LOST_AFTER_S = 2.0


def testbed_watch(ctl: ControllerProcess, bridges: list[str]):
    """A check for :class:`TestbedDriver`: the message naming what is gone (the controller
    process, a bridge, a switch's OpenFlow connection for :data:`SWITCH_LOST_AFTER_S`), or
    ``None`` while all is well."""
    disconnected_at = None

    def check() -> str | None:
        nonlocal disconnected_at
        code = ctl.proc.poll() if ctl.proc is not None else None
        if code is not None:
            return f"the controller (pid {ctl.proc.pid}) exited with status {code}; see {ctl.log}"
        for bridge in bridges:
            if subprocess.run(["ovs-vsctl", "br-exists", bridge], check=False).returncode != 0:
                return f"the switch {bridge} was deleted (ovs-vsctl br-exists {bridge} fails)"
        try:
            connected = len(ctl.client.stats()["switches"])
        except ControllerError as exc:
            return f"the controller stopped answering: {exc}"
        now = time.monotonic()
        if connected == len(bridges):
            disconnected_at = None
        elif disconnected_at is None:
            disconnected_at = now
        elif now - disconnected_at > SWITCH_LOST_AFTER_S:
            lost = len(bridges) - connected
            return (f"{lost} of the switches {', '.join(bridges)} have been disconnected "
                    f"from the controller for {now - disconnected_at:.0f} s")  # fmt: skip
        return None

    return check


def run_policy(
    policy: str,
    args,
    out: Path,
    gpu_policy: str = "none",
    tasks: Tasks = None,
    workload_title: str | None = None,
) -> dict:
    """One policy (pair) end to end on ``tasks`` (default: the seeded workload of ``args``; a
    callable gives fresh tasks for the testbed and for each prediction: tasks whose search
    keeps state, such as an Optuna study's, run once), named ``workload_title`` on the
    schedule's picture (default: :func:`workload_name`); everything started here is stopped
    before returning."""
    from topologies.testbed_driver import TestbedDriver, TestbedFault
    from workloads.hpo_core import busiest_shares

    fresh = tasks if callable(tasks) else None
    out.mkdir(parents=True, exist_ok=True)
    cluster = cluster_of(args)
    hosts_file = out / "hosts.json"
    hosts_file.write_text(json.dumps(cluster.host_table()))
    db = out / "controller.sqlite"
    db.unlink(missing_ok=True)
    ofp_port = free_port()
    ctl = ControllerProcess(
        db, hosts_file, ofp_port, "--policy", policy, "--port-bps", str(cluster.link_bps)
    )
    net = None
    try:
        ctl.start()
        net = network.start(
            ClusterTopo(cluster),
            ofp_port,
            host_priorities=args.host_priorities,
            tcp_rto_max_ms=args.tcp_rto_max_ms,
        )
        if cluster.fabric_ports:  # (each direction of a link counts once)
            ctl.wait_fabric(len(cluster.switches), len(cluster.fabric_ports), timeout_s=30)
        else:
            ctl.wait_switch(timeout_s=30)
        ports = cluster.host_ports
        before = {p: class_bytes(p) for p in ports}
        fabric_before = {p: class_bytes(p) for p in cluster.fabric_ports}
        if fresh is not None:
            tasks = fresh("testbed")
        elif tasks is None:
            tasks = workload(args)
        hosts = [net.get(name) for name in cluster.host_names]
        host_before = {h.name: host_class_bytes(h) for h in hosts}
        tcp_before = {h.name: tcp_counters(h) for h in hosts}
        agent = None
        if args.host_priorities:
            agent = HostPriorities(
                {h.IP(): (h.defaultIntf().name, network.tc_runner(h)) for h in hosts},
                lambda: ctl.client.rules()["desired"]["flows"],
            )
        gpus = job_manager(args, gpu_policy)
        watch = testbed_watch(ctl, [switch.name for switch in cluster.switches])
        timeline = Timeline(port_names(cluster.hosts), cluster.link_bps, "testbed")
        recorder = testbed_recorder(ctl, timeline, ports)
        failure: dict = {}
        if args.fail_spine is not None:
            fail = spine_failure(net, cluster, args.fail_spine, failure)
            record_levels = recorder

            def recorder(now_s: float, force: bool = False) -> None:
                fail(now_s)
                record_levels(now_s, force)

        driver = TestbedDriver(
            hosts,
            ctl.client,
            tasks,
            link_bps=cluster.link_bps,
            progress=lambda m: print(f"  {m}"),
            gpus=gpus,
            log_dir=out / "logs",
            host_priorities=agent,
            watch=watch,
            sample=recorder,
        )
        started = time.monotonic()
        try:
            driver.run(timeout_s=args.timeout)
        except ControllerError as exc:  # say what is gone, if the watch knows
            raise TestbedFault(watch() or str(exc)) from None
        except Exception:  # keep what each host's TCP saw (resets, aborts) for the post-mortem
            tcp_failed = {h.name: tcp_counters(h) for h in hosts}
            write_json(out / "tcp.json", {
                h: {k: tcp_failed[h][k] - tcp_before[h][k] for k in TCP_COUNTERS}
                for h in tcp_failed
            })  # fmt: skip
            raise
        duration = time.monotonic() - started
        recorder(driver.now(), force=True)
        timeline.close(driver.now())
        timeline.stages = driver.core.stage_labels()
        after = {p: class_bytes(p) for p in ports}
        fabric_after = {p: class_bytes(p) for p in cluster.fabric_ports}
        fabric_state = ctl.client.fabric()
        host_after = {h.name: host_class_bytes(h) for h in hosts}
        tcp_after = {h.name: tcp_counters(h) for h in hosts}
        stats = ctl.client.stats()
    finally:
        if net is not None:
            network.stop(net)
        ctl.stop()
    per_class = class_deltas(before, after)
    total = per_class.pop(ROOT_CLASS, 0)  # the port's root class counts every byte once
    fabric_per_class = class_deltas(fabric_before, fabric_after)
    fabric_per_class.pop(ROOT_CLASS, None)
    host_per_class = class_deltas(host_before, host_after)
    host_per_class.pop(ROOT_CLASS, None)
    stages = driver.stage_rows()
    for name, rows in (
        ("stages", stages),
        ("jobs", driver.job_rows()),
        ("configs", driver.config_rows()),
        ("tasks", driver.task_rows()),
        ("iterations", driver.iteration_rows),
    ):
        write_csv(out / f"{name}.csv", rows)
    label = run_label(policy, gpu_policy)
    predicted = Timeline(
        port_names(cluster.hosts),
        cluster.link_bps,
        "simulator, calibrated" if args.overheads else "simulator",
    )
    simulated = simulate(
        policy, args, fresh("prediction") if fresh else tasks, gpu_policy,
        timeline=None if args.overheads else predicted,
    )  # fmt: skip
    calibrated = None
    if args.overheads:
        calibrated = simulate(
            policy,
            args,
            fresh("prediction") if fresh else tasks,
            gpu_policy,
            args.overheads,
            predicted,
        )
    timeline.write(out / "timeline.json")
    predicted.write(out / "timeline-simulated.json")
    wire_busiest, wire_quarter = busiest_shares(
        timeline.busy_share(
            (s.start_s, s.finish_s) for s in driver.stages.values() if s.finish_s is not None
        ).values()
    )
    name = workload_title or workload_name(args)
    timeline.workload = predicted.workload = name
    draw_schedule([timeline, predicted], out / "schedule.png", f"{label}: {name}")
    result = {
        "policy": label,
        "network_policy": policy,
        "gpu_policy": gpu_policy,
        "link_gbps": args.link_gbps,
        "emulated_link_bps": cluster.link_bps,
        "duration_s": duration,
        **driver.core.summary(driver.now()),
        "cct_s": summarise(driver.cct_s),
        "job_startup_s": summarise(driver.startup_s.values()),
        "handshakes": {
            "longest_connect_s": driver.longest_connect_s,
            "synack_retransmits": driver.synack_retransmits,
            "connections_redone": driver.handshake_retries,
        },
        "worker_signals": driver.signals_sent,
        "worker_pauses": driver.pauses,
        "bytes_sent_while_paused": driver.bytes_while_paused,
        "link_utilisation": 8.0 * total / (duration * cluster.link_bps * len(ports)),
        # the switch ports' own byte counters (headers and resent segments included) over the
        # stages' time: how busy the wire was, where busiest_port_busy counts the model's bytes
        "wire_busiest_port_busy": wire_busiest,
        "wire_busiest_quarter_busy": wire_quarter,
        "bytes_per_class": per_class,
        "topology": topology_json(args),
        "fabric_bytes_per_class": fabric_per_class,
        "fabric_rules": fabric_state.get("forwarding_rules", {}),
        "spine_failure": reroute_summary(failure, fabric_state),
        "host_priorities": args.host_priorities,
        "tcp_rto_max_ms": args.tcp_rto_max_ms,
        "host_bytes_per_class": host_per_class,
        "host_filter_updates": agent.updates if agent else 0,
        "tcp": {
            key: sum(tcp_after[h][key] - tcp_before[h][key] for h in tcp_after)
            for key in TCP_COUNTERS
        },
        "controller": {k: stats[k] for k in ("event_to_flowmods_ms", "ops_sent", "switch_errors")},
        "simulated": simulated,
        "overheads": args.overheads.to_json() if args.overheads else None,
        "simulated_calibrated": calibrated,
        "stages": stages,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))
    return result


def topology_json(args) -> dict:
    """The run's network, as result.json and summary.json state it."""
    cluster = cluster_of(args)
    if cluster.topology == ONE_SWITCH:
        return cluster.to_json()
    return {**cluster.to_json(), "fail_spine_s": args.fail_spine}


BASELINE = "fair"
PANELS = (
    ("sct_s", "avg_sct_s", "average SCT (s)"),
    ("time_to_90pct_s", "avg_time_to_90pct_s", "time to 90% (s)"),
    ("best_identified_s", "avg_best_identified_s", "best config identified (s)"),
    ("hpo_completion_s", "avg_hpo_completion_s", "HPO completion (s)"),
)


def _interval(values) -> dict | None:
    ci = mean_ci(values)
    return None if ci is None else ci.to_json()


def seed_summary(results: list[dict], args, argv) -> dict:
    """Per policy (pair) over the seeds: each metric's mean +/- 95 % CI on the testbed, the
    simulator's on the same workloads, and the average SCT relative to fair sharing's, paired
    per seed; the clearly best policy, if any; where the results come from."""
    labels = list(dict.fromkeys(r["policy"] for r in results))
    by_label = {label: {r["seed"]: r for r in results if r["policy"] == label} for label in labels}
    # fair sharing (with the first GPU policy it ran with, in pairs) is the baseline
    baseline = next((label for label in labels if label.split("+")[0] == BASELINE), None)
    base = by_label.get(baseline, {})
    policies, ratios = {}, {}
    for label, runs in by_label.items():
        entry = {"seeds": sorted(runs)}
        for key, name, _ in PANELS:
            entry[name] = _interval(r[key].get("mean") for r in runs.values())
        entry["sim_avg_sct_s"] = _interval(r["simulated"]["sct_s"].get("mean")
                                           for r in runs.values())  # fmt: skip
        entry["sim_over_testbed_avg_sct"] = _interval(
            r["simulated"]["sct_s"]["mean"] / r["sct_s"]["mean"] for r in runs.values()
        )
        if all(r["simulated_calibrated"] for r in runs.values()):
            entry["calibrated_sim_avg_sct_s"] = _interval(
                r["simulated_calibrated"]["sct_s"].get("mean") for r in runs.values()
            )
            entry["calibrated_sim_over_testbed_avg_sct"] = _interval(
                r["simulated_calibrated"]["sct_s"]["mean"] / r["sct_s"]["mean"]
                for r in runs.values()
            )
        entry["busiest_port_busy"] = _interval(r["busiest_port_busy"] for r in runs.values())
        entry["wire_busiest_port_busy"] = _interval(
            r.get("wire_busiest_port_busy") for r in runs.values()
        )
        if base:
            ratio = paired_ratio_ci(
                {s: r["sct_s"].get("mean") for s, r in runs.items()},
                {s: r["sct_s"].get("mean") for s, r in base.items()},
            )
            if ratio is not None:
                ratios[label] = ratio
                entry["avg_sct_vs_baseline"] = ratio.to_json()
            # the same ratio as the calibrated simulator predicts it, to compare rankings
            if "calibrated_sim_avg_sct_s" in entry and all(
                r["simulated_calibrated"] for r in base.values()
            ):
                predicted = paired_ratio_ci(
                    {s: r["simulated_calibrated"]["sct_s"].get("mean") for s, r in runs.items()},
                    {s: r["simulated_calibrated"]["sct_s"].get("mean") for s, r in base.items()},
                )
                if predicted is not None:
                    entry["calibrated_sim_avg_sct_vs_baseline"] = predicted.to_json()
        policies[label] = entry
    return {
        "provenance": provenance(argv),
        "link_gbps": args.link_gbps,
        "emulated_link_bps": args.bw * 1e6,
        "host_priorities": args.host_priorities,
        "tcp_rto_max_ms": args.tcp_rto_max_ms,
        "overheads": args.overheads.to_json() if args.overheads else None,
        "topology": topology_json(args),
        "workload": {
            "hosts": args.hosts,
            "tasks": args.tasks,
            "configs": args.configs,
            "eta": args.eta,
            "search": args.search,
            "min_iterations": args.min_iterations,
            "workers": args.workers,
            "patterns": args.patterns,
            "models": args.models,
            "interarrival_s": args.interarrival,
            "curves": curves_name(args),
            "seeds": args.seeds,
        },  # fmt: skip
        "baseline": baseline,
        "policies": policies,
        "clear_best_avg_sct": clear_best(ratios),
    }


def figure(summary: dict):
    """Per policy: each metric's mean over the seeds with its 95 % CI where there are two seeds
    or more (testbed; a missing value has no bar), and the simulator's mean average SCT on the
    same workloads; titled by the workload."""
    names = list(summary["policies"])
    fig, axes = plt.subplots(1, len(PANELS), figsize=(16, 3.6))
    seeds = []
    for ax, (_, key, label) in zip(axes, PANELS, strict=True):
        intervals = [None if (entry := summary["policies"][n][key]) is None
                     else Interval.from_json(entry) for n in names]  # fmt: skip
        means = [math.nan if i is None else i.mean for i in intervals]
        ax.bar(names, means, color="tab:blue", label="testbed")
        error_bars(ax, names, intervals, capsize=3, color="black")
        seeds += [i.n for i in intervals if i is not None]
        if key == "avg_sct_s":
            sim = [summary["policies"][n]["sim_avg_sct_s"]["mean"] for n in names]
            ax.scatter(names, sim, color="tab:orange", zorder=3, label="simulator")
            ax.legend()
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", rotation_mode="anchor")
    w = summary["workload"]
    name = describe_workload(w["configs"], w["search"], w["patterns"], w["hosts"], w["tasks"],
                             curves=w.get("curves"))  # fmt: skip
    fig.suptitle(f"testbed, {name}; {summary['link_gbps']:g} Gbit/s modelled; "
                 f"{spread_note(seeds)}")  # fmt: skip
    fig.tight_layout()
    return fig


def plot(summary: dict, out: Path) -> Path:
    """:func:`figure` into ``out/testbed.png``."""
    fig = figure(summary)
    path = out / "testbed.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def fmt(value) -> str:
    """Seconds to one decimal, ``-`` if missing."""
    return "-" if value is None else f"{value:.1f}"


def fmt_ratio(value, reference) -> str:
    """``value / reference`` to two decimals, ``-`` if either is missing."""
    return "-" if not value or not reference else f"{value / reference:.2f}"


def fmt_pct(value) -> str:
    """A share as a percentage, ``-`` if missing."""
    return "-" if value is None or math.isnan(value) else f"{value:.0%}"


def build_parser(
    description: str | None = None, prog: str | None = None
) -> argparse.ArgumentParser:
    """The experiment's command line (``hpo-calibrate`` shares it, with its own
    ``description`` and ``prog``)."""
    parser = argparse.ArgumentParser(
        prog=prog or program(__name__), description=description or __doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--policy",
        nargs="+",
        default=DEFAULT_POLICIES,
        type=policy_name,
        metavar="POLICY",
        help=f"network policies, each a run: {policy_help(POLICY_NAMES)} (the controller loads "
        "it too); a run is labelled by its policy's name (default: "
        f"{' '.join(DEFAULT_POLICIES)})",
    )
    parser.add_argument(
        "--gpu-policy",
        nargs="+",
        default=["none"],
        type=gpu_policy_name,
        metavar="GPU_POLICY",
        help=f"GPU time-sharing policies, each run with every --policy: none, "
        f"{policy_help(GPU_POLICIES)} (default: none)",
    )
    parser.add_argument(
        "--gpus-per-host", type=positive(int), default=1, help="emulated GPUs per host (default 1)"
    )
    parser.add_argument(
        "--quantum", type=positive(float), default=5.0, help="time-sharing quantum s (default 5)"
    )
    parser.add_argument(
        "--hosts",
        type=positive(int),
        default=13,
        help="hosts on the one switch (default 13); with --topology leaf-spine it is "
        "--leaves x --hosts-per-leaf",
    )
    parser.add_argument(
        "--topology",
        choices=["one-switch", "leaf-spine"],
        default="one-switch",
        help="one-switch: the 13-server testbed (default); leaf-spine: --leaves leaf switches "
        "of --hosts-per-leaf hosts, each linked to every one of --spines spines, the controller "
        "routing over them (shortest paths, ECMP per host pair) and marking at the ingress leaf; "
        "the simulator beside it models the same leaves with their uplinks pooled",
    )
    parser.add_argument("--leaves", type=positive(int), default=3, help="leaf switches (3)")
    parser.add_argument("--spines", type=positive(int), default=2, help="spine switches (2)")
    parser.add_argument(
        "--hosts-per-leaf", type=positive(int), default=4, help="hosts under each leaf (4)"
    )
    parser.add_argument(
        "--oversubscription",
        type=positive(float),
        default=1.0,
        help="a leaf's host rate over its uplinks' (default 1: each of the --spines uplinks "
        "runs at hosts-per-leaf x bw / spines)",
    )
    parser.add_argument(
        "--fail-spine",
        type=non_negative(float),
        default=None,
        metavar="SECONDS",
        help="leaf-spine only: this many seconds into every run, every link of the first spine "
        "goes down; the controller reroutes and the run goes on (result.json: spine_failure)",
    )
    parser.add_argument("--bw", type=positive(float), default=20, help="link Mbit/s (default 20)")
    parser.add_argument(
        "--tasks", type=positive(int), default=2, help="concurrent HPO tasks (default: 2)"
    )
    parser.add_argument(
        "--configs",
        type=positive(int),
        default=9,
        help="configurations each task starts with (default: 9)",
    )
    parser.add_argument(
        "--eta",
        type=number(int, 2),
        default=3,
        help="successive halving's reduction factor (default: 3)",
    )
    parser.add_argument(
        "--search",
        choices=SEARCHES,
        default="halving",
        help="halving: synchronous successive halving (default); asha: the same rungs without "
        "a stage barrier; full: one stage, every configuration trained to the end",
    )
    parser.add_argument(
        "--min-iterations",
        type=positive(int),
        default=3,
        help="iterations of the first stage (default: 3, then 9 and 27 with eta 3)",
    )
    parser.add_argument(
        "--workers", type=positive(int), default=3, help="GPUs (hosts) per job (default: 3)"
    )
    parser.add_argument(
        "--patterns",
        nargs="+",
        default=["ring"],
        choices=PATTERNS,
        help="synchronisation patterns to draw from (default: ring; a parameter server keeps "
        "its ports at most about half busy, see docs/testbed.md)",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=list(MODEL_ZOO),
        choices=sorted(PROFILES),
        help="model profiles the tasks draw from (default: the zoo, "
        f"{' '.join(MODEL_ZOO)}; one model makes every task's jobs alike)",
    )
    parser.add_argument(
        "--interarrival",
        type=non_negative(float),
        default=0.0,
        metavar="SECONDS",
        help="tasks arrive as a Poisson process of this mean gap (default 0: all at the start)",
    )
    parser.add_argument(
        "--link-gbps",
        type=positive(float),
        default=1.0,
        help="the modelled cluster's host link rate in Gbit/s, emulated at --bw: bytes are "
        "divided by link-gbps / bw; the simulator's --link-gbps means the same (default: 1)",
    )
    parser.add_argument(
        "--host-priorities",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve the controller's levels on every host's egress too, as the simulator does "
        "on every port and as Sincronia and Varys enforce them at end hosts (default: on; "
        "--no-host-priorities leaves the hosts' sending links FIFO and only the switch enforces "
        "the levels, see docs/testbed.md)",
    )
    parser.add_argument(
        "--tcp-rto-max-ms",
        type=rto_cap,
        default=AUTO_RTO_CAP,
        metavar="MS|off|auto",
        help=f"cap TCP's retransmission timeout in every host at MS (>= 1000): a flow that a "
        f"higher level starved then resumes within MS of its promotion; 'off' keeps Linux's 120 s "
        f"(default: {network.TCP_RTO_MAX_MS} where the kernel can, Linux 6.15+, else off)",
    )
    parser.add_argument(
        "--retries",
        type=non_negative(int),
        default=1,
        help="try a failed run (or calibration run) again this many times, each in a fresh "
        "testbed; every failed attempt is reported, kept as <run>-failed-<N>/ and listed in "
        "results.json (default: 1)",
    )
    parser.add_argument(
        "--seeds",
        type=non_negative(int),
        nargs="+",
        default=[1],
        help="workload seeds, each run under every policy (default: 1)",
    )
    parser.add_argument(
        "--yahpo",
        nargs="?",
        const=BUNDLED,
        metavar="DIR",
        help="learning curves from the YAHPO Gym LCBench surrogate in DIR (holding lcbench/; "
        "without DIR, or 'bundled': the one bundled with the package)",
    )
    parser.add_argument("--yahpo-task", default="3945", help="its OpenML task (default 3945)")
    parser.add_argument(
        "--timeout",
        type=positive(float),
        default=900,
        help="seconds per policy before giving up (default 900)",
    )
    parser.add_argument(
        "--calibration",
        type=Path,
        metavar="JSON",
        help="the testbed's measured overheads (hpo-calibrate's calibration.json): the "
        "simulator beside every run then also predicts with them (default: raw model only)",
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="first measure the overheads (hpo-calibrate) into <out>/calibration/ and "
        "predict with them",
    )
    parser.add_argument(
        "--calibration-iterations",
        type=positive(int),
        default=20,
        help="iterations of the calibration's lone job (default 20)",
    )
    parser.add_argument(
        "--calibration-repeats",
        type=positive(int),
        default=3,
        help="runs of the calibration's lone job; its goodput is their mean (default 3)",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default="results/testbed",
        help="output folder (default: results/testbed)",
    )
    return parser


AUTO_RTO_CAP = "auto"


def rto_cap(text: str) -> int | None:
    """An argparse type: ``off`` (None), ``auto`` or a whole number of ms the kernel accepts."""
    if text == "off":
        return None
    if text == AUTO_RTO_CAP:
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of ms or 'off': {text!r}") from None
    if not 1000 <= value <= 120000:
        raise argparse.ArgumentTypeError(f"must be within 1000..120000 ms, got {text}")
    return value


def parse(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """Parse and check the command line, derive the link scale, load the surrogate and the
    calibration, and make sure this runs as root with OVS up."""
    args = parser.parse_args(argv)
    if args.topology == "leaf-spine":
        fabric_hosts = args.leaves * args.hosts_per_leaf
        given = sys.argv[1:] if argv is None else argv
        if any(a == "--hosts" or a.startswith("--hosts=") for a in given) and (
            args.hosts != fabric_hosts
        ):
            parser.error(f"--hosts {args.hosts} but --leaves x --hosts-per-leaf is {fabric_hosts}"
                         " (leave --hosts out with --topology leaf-spine)")  # fmt: skip
        args.hosts = fabric_hosts
        if (warning := forwarding_load_warning(args)) is not None:
            print(f"warning: {warning}", flush=True)
    else:
        if args.fail_spine is not None:
            parser.error("--fail-spine needs --topology leaf-spine")
    if args.workers > args.hosts or args.eta < 2:
        parser.error("--workers must be <= --hosts and --eta >= 2")
    args.link_scale = args.link_gbps * 1e9 / (args.bw * 1e6)
    if args.tcp_rto_max_ms == AUTO_RTO_CAP:
        args.tcp_rto_max_ms = network.TCP_RTO_MAX_MS if network.rto_cap_supported() else None
        if args.tcp_rto_max_ms is None:
            print(
                "note: this kernel cannot cap TCP's retransmission timeout (Linux 6.15+); "
                "starved flows back off up to 120 s (docs/testbed.md, 'TCP under priorities')"
            )
    elif args.tcp_rto_max_ms is not None and not network.rto_cap_supported():
        parser.error(
            "--tcp-rto-max-ms: this kernel cannot cap TCP's timeout (Linux 6.15+); "
            "pass --tcp-rto-max-ms off"
        )
    args.surrogate = None
    if args.yahpo is not None:
        try:
            args.surrogate = LcBench(args.yahpo, args.yahpo_task)
        except YahpoError as exc:
            parser.error(str(exc))
    args.overheads = None
    if args.calibration is not None:
        try:
            args.overheads = Overheads.load(args.calibration)
        except (OSError, ValueError) as exc:
            parser.error(f"--calibration {args.calibration}: {exc}")
    if os.geteuid() != 0:
        parser.error("run as root (Mininet and Open vSwitch need it)")
    subprocess.run(["bash", str(ROOT / "scripts" / "ovs.sh"), "start"], check=True)
    return args


def main(argv=None) -> int:
    """Run the experiment holding the testbed lock; the exit status."""
    parser = build_parser()
    args = parse(parser, argv)
    argv = sys.argv[1:] if argv is None else argv
    try:
        with network.testbed_lock():  # the whole experiment, not only each network
            return experiment(parser, args, argv)
    except (network.TestbedBusy, network.NamesTaken) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # (each run's network and controller stop in its own finally)
        print(f"\n{parser.prog}: interrupted: the network and the controller were stopped; the "
              f"runs that finished are in {args.out}", file=sys.stderr)  # fmt: skip
        return 130


def experiment(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list) -> int:
    """Calibrate if asked, run every (seed, policy) and write the results; a failing run is
    reported and the others go on. Returns the exit status (1 if any run failed)."""
    if args.calibrate:
        if args.calibration is not None:
            parser.error("--calibrate and --calibration exclude each other")
        from experiments import calibrate  # noqa: PLC0415 (it imports this module)

        measured = calibrate.calibrate(
            args,
            args.out / "calibration",
            argv,
            args.calibration_iterations,
            args.calibration_repeats,
        )
        args.overheads = Overheads(**measured["overheads"])
    results, failures = [], []
    progress = Progress(len(args.seeds) * len(args.policy) * len(args.gpu_policy), "testbed runs")
    for seed in args.seeds:
        args.seed = seed  # the workload's
        for policy in args.policy:
            for gpu_policy in args.gpu_policy:
                label = run_label(policy, gpu_policy)
                print(f"== {label}, seed {seed}", flush=True)
                try:
                    result, failed = run_with_retries(
                        policy, args, args.out / label / f"seed-{seed}", gpu_policy
                    )
                except RUN_FAILURES as exc:
                    print(f"!! {label}, seed {seed} failed: {exc}; the other runs go on",
                          flush=True)  # fmt: skip
                    failures.append({"policy": label, "seed": seed, "error": str(exc)})
                    progress.step(f"{label}, seed {seed} failed")
                    continue
                results.append({"seed": seed, **result, "failed_attempts": failed})
                average = fmt(result["sct_s"].get("mean"))
                progress.step(f"{label}, seed {seed}: average SCT {average} s")
    progress.close()
    if failures:
        write_json(args.out / "failures.json", failures)
    if not results:
        print(f"{parser.prog}: error: every run failed (see {args.out / 'failures.json'})",
              file=sys.stderr)  # fmt: skip
        return 1
    with open(args.out / "stages.csv", "w", newline="") as f:
        rows = [{"policy": r["policy"], "seed": r["seed"], **s} for r in results
                for s in r["stages"]]  # fmt: skip
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    runs = [{k: v for k, v in r.items() if k != "stages"} for r in results]
    (args.out / "results.json").write_text(json.dumps(runs, indent=2))
    summary = seed_summary(results, args, argv)
    summary["failures"] = failures
    summary["retried"] = [
        {"policy": r["policy"], "seed": r["seed"], "errors": r["failed_attempts"]}
        for r in results
        if r["failed_attempts"]
    ]
    for entry in summary["retried"]:
        print(f"retried: {entry['policy']}, seed {entry['seed']} (failed first: "
              f"{'; '.join(entry['errors'])})")  # fmt: skip
    write_json(args.out / "summary.json", summary)
    figure = plot(summary, args.out)
    print(
        f"\n{'policy':<17} {'seed':>4} {'avg SCT':>8} {'sim SCT':>8} {'sim/bed':>7} "
        f"{'cal/bed':>7} {'p95 SCT':>8} {'to 90%':>7} {'best id':>8} {'HPO end':>8} "
        f"{'busiest':>7} {'wire':>5} {'RTOs':>6} {'GPU':>5} {'preempt':>7}"
    )
    for r in results:
        gpu = r["gpu"] or {}
        bed, sim = r["sct_s"].get("mean"), r["simulated"]["sct_s"].get("mean")
        calibrated = (r["simulated_calibrated"] or {}).get("sct_s", {}).get("mean")
        print(
            f"{r['policy']:<17} {r['seed']:>4} {fmt(bed):>8} {fmt(sim):>8} "
            f"{fmt_ratio(sim, bed):>7} {fmt_ratio(calibrated, bed):>7} "
            f"{fmt(r['sct_s'].get('p95')):>8} {fmt(r['time_to_90pct_s'].get('mean')):>7} "
            f"{fmt(r['best_identified_s'].get('mean')):>8} "
            f"{fmt(r['hpo_completion_s'].get('mean')):>8} {r['busiest_port_busy']:>7.0%} "
            f"{fmt_pct(r.get('wire_busiest_port_busy')):>5} {r['tcp']['TCPTimeouts']:>6} "
            f"{fmt_pct(gpu.get('gpu_utilisation')):>5} {gpu.get('preemptions', '-'):>7}"
        )
    print(
        f"(link {args.link_gbps:g} Gbit/s modelled at {args.bw:g} Mbit/s; sim: the simulator on "
        "the same workload, seed, link rate and bytes; cal: with the measured overheads; "
        "busiest: the busiest port's busy share, by the workload's bytes at the line rate; wire: "
        "by its switch port's byte counter; RTOs: the hosts' TCP timeouts)"
    )
    print(f"\nover {len(args.seeds)} seed(s): average SCT s (mean +/- 95 % CI), and / "
          f"{summary['baseline'] or BASELINE}'s paired per seed")  # fmt: skip
    for label, entry in summary["policies"].items():
        ratio = entry.get("avg_sct_vs_baseline")
        versus = format_interval(ratio, 3)
        predicted_ratio = entry.get("calibrated_sim_avg_sct_vs_baseline")
        if ratio and predicted_ratio:
            versus += f" (calibrated x {format_interval(predicted_ratio, 3)})"
        calibrated = ""
        if "calibrated_sim_avg_sct_s" in entry:
            predicted = format_interval(entry["calibrated_sim_avg_sct_s"], 1)
            over = format_interval(entry["calibrated_sim_over_testbed_avg_sct"], 2)
            calibrated = f"  calibrated {predicted:>16} (/bed {over})"
        bed, sim = (format_interval(entry[k], 1) for k in ("avg_sct_s", "sim_avg_sct_s"))
        print(f"  {label:<17} testbed {bed:>16}  simulator {sim:>16}{calibrated}  x {versus}")
    print(f"  clearly best: {summary['clear_best_avg_sct'] or 'none (intervals overlap)'}")
    print(f"results: {args.out}/results.json, summary.json, stages.csv, {figure.name}")
    for failure in failures:
        print(f"FAILED: {failure['policy']}, seed {failure['seed']}: {failure['error']}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
