"""The testbed experiment: one seeded HPO workload on the Mininet testbed under each policy.

    sudo .venv/bin/python scripts/run_testbed.py [--policy fair fifo-lm sincronia jpas beamer]
        [--gpu-policy none fifo rr slaq hermes] [--gpus-per-host 1] [--quantum 5]
        [--hosts 13] [--bw 20] [--tasks 2] [--configs 9] [--eta 3] [--min-iterations 10]
        [--seed 1] [--out results/testbed]

For every policy: start OVS if needed, the controller (``python -m controller``, fresh
registry), the one-switch testbed (userspace OVS, TCLink at ``--bw`` Mbit/s, 8 HTB classes per
switch port), and the HPO driver with its worker processes; collect stage/job completion times,
time to 90 % / 95 % of converged accuracy, link utilisation and bytes per priority class; tear
everything down (by handle and by name, also on Ctrl-C or an error). Bytes are divided by
``--link-gbps / --bw`` (the modelled real link rate over the emulated one) so that
every link keeps the real compute/communication ratio. With ``--gpu-policy`` every network
policy also runs under each GPU time-sharing policy (the job manager of ``workloads/gpu.py``
pauses and resumes the workers; ``none``: every job computes at once). Writes ``results.json``,
``stages.csv`` and PNG figures to ``--out`` and prints a comparison table.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from controller.argtypes import positive  # noqa: E402
from controller.launcher import ControllerProcess, free_port  # noqa: E402
from controller.metrics import summarise  # noqa: E402
from controller.policies import POLICIES  # noqa: E402
from simulator.metrics import write_csv  # noqa: E402
from topologies import network  # noqa: E402
from topologies.qos import class_bytes  # noqa: E402
from topologies.testbed import OneSwitchTopo, host_table  # noqa: E402
from workloads.gpu import GPU_POLICIES, GpuManager, make_gpu_policy  # noqa: E402
from workloads.hpo import generate  # noqa: E402
from workloads.testbed_driver import TestbedDriver  # noqa: E402
from workloads.yahpo import LcBench, YahpoError  # noqa: E402

DEFAULT_POLICIES = ["fair", "fifo-lm", "sincronia", "jpas", "beamer"]


def run_policy(policy: str, args, out: Path, gpu_policy: str = "none") -> dict:
    """One policy (pair) end to end; everything started here is stopped before returning."""
    out.mkdir(parents=True, exist_ok=True)
    topo = OneSwitchTopo(n=args.hosts, bw=args.bw, switch="s1")
    hosts_file = out / "hosts.json"
    hosts_file.write_text(json.dumps(host_table(topo)))
    db = out / "controller.sqlite"
    db.unlink(missing_ok=True)
    ofp_port = free_port()
    ctl = ControllerProcess(
        db, hosts_file, ofp_port, "--policy", policy, "--port-bps", str(args.bw * 1e6)
    )
    net = None
    try:
        ctl.start()
        net = network.start(topo, ofp_port, args.bw)
        ctl.wait_switch(timeout_s=30)
        ports = [f"s1-eth{i}" for i in range(1, args.hosts + 1)]
        before = {p: class_bytes(p) for p in ports}
        tasks = generate(
            args.hosts,
            args.tasks,
            seed=args.seed,
            configs_per_task=args.configs,
            eta=args.eta,
            min_iterations=args.min_iterations,
            workers=args.workers,
            link_scale=args.link_scale,
            surrogate=args.surrogate,
        )
        hosts = [net.get(f"h{i}") for i in range(1, args.hosts + 1)]
        gpus = None
        if gpu_policy != "none":
            gpus = GpuManager(
                make_gpu_policy(gpu_policy), args.hosts, args.gpus_per_host, args.quantum, 0.0
            )
        driver = TestbedDriver(
            hosts,
            ctl.client,
            tasks,
            port_bps=args.bw * 1e6,
            progress=lambda m: print(f"  {m}"),
            gpus=gpus,
            log_dir=out / "logs",
        )
        started = time.monotonic()
        driver.run(timeout_s=args.timeout)
        duration = time.monotonic() - started
        after = {p: class_bytes(p) for p in ports}
        stats = ctl.client.stats()
    finally:
        if net is not None:
            network.stop(net)
        ctl.stop()
    per_class: dict[str, int] = {}
    total = 0
    for port in ports:
        for cls, count in after[port].items():
            if cls == "1:1":
                total += count - before[port].get(cls, 0)
            else:
                per_class[cls] = per_class.get(cls, 0) + count - before[port].get(cls, 0)
    stages = driver.stage_rows()
    for name, rows in (
        ("stages", stages),
        ("jobs", driver.job_rows()),
        ("configs", driver.config_rows()),
        ("tasks", driver.task_rows()),
    ):
        write_csv(out / f"{name}.csv", rows)
    label = policy if gpu_policy == "none" else f"{policy}+{gpu_policy}"
    result = {
        "policy": label,
        "network_policy": policy,
        "gpu_policy": gpu_policy,
        "link_gbps": args.link_gbps,
        "emulated_link_bps": args.bw * 1e6,
        "duration_s": duration,
        **driver.core.summary(driver.now()),
        "cct_s": summarise(driver.cct_s),
        "job_startup_s": summarise(driver.startup_s.values()),
        "worker_signals": driver.signals_sent,
        "worker_pauses": driver.pauses,
        "bytes_sent_while_paused": driver.bytes_while_paused,
        "link_utilisation": 8.0 * total / (duration * args.bw * 1e6 * len(ports)),
        "bytes_per_class": per_class,
        "controller": {k: stats[k] for k in ("event_to_flowmods_ms", "ops_sent", "switch_errors")},
        "stages": stages,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))
    return result


def plot(results: list[dict], out: Path) -> Path:
    names = [r["policy"] for r in results]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    panels = (
        ("sct_s", "stage completion time (s)"),
        ("time_to_90pct_s", "time to 90% (s)"),
        ("best_identified_s", "best config identified (s)"),
        ("hpo_completion_s", "HPO completion (s)"),
    )
    for ax, (key, label) in zip(axes, panels, strict=True):
        ax.bar(names, [r[key].get("mean") or 0 for r in results], color="tab:blue", label="mean")
        ax.scatter(
            names, [r[key].get("p95") or 0 for r in results], color="tab:red", zorder=3, label="p95"
        )
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        ax.tick_params(axis="x", rotation=30)
    axes[0].legend()
    fig.tight_layout()
    path = out / "testbed.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fmt(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def fmt_pct(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", nargs="+", default=DEFAULT_POLICIES, choices=sorted(POLICIES))
    parser.add_argument(
        "--gpu-policy",
        nargs="+",
        default=["none"],
        choices=["none", *sorted(GPU_POLICIES)],
        help="GPU time-sharing policies, each run with every --policy (default: none)",
    )
    parser.add_argument(
        "--gpus-per-host", type=positive(int), default=1, help="emulated GPUs per host (default 1)"
    )
    parser.add_argument(
        "--quantum", type=positive(float), default=5.0, help="time-sharing quantum s (default 5)"
    )
    parser.add_argument("--hosts", type=positive(int), default=13)
    parser.add_argument("--bw", type=positive(float), default=20, help="link Mbit/s (default 20)")
    parser.add_argument("--tasks", type=positive(int), default=2)
    parser.add_argument("--configs", type=positive(int), default=9)
    parser.add_argument("--eta", type=int, default=3)
    parser.add_argument("--min-iterations", type=positive(int), default=10)
    parser.add_argument("--workers", type=positive(int), default=3)
    parser.add_argument(
        "--link-gbps",
        type=positive(float),
        default=10.0,
        help="the modelled cluster's host link rate in Gbit/s, emulated at --bw: bytes are "
        "divided by link-gbps / bw; the simulator's --link-gbps means the same (default: 10)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--yahpo",
        type=Path,
        metavar="DIR",
        help="learning curves from the YAHPO Gym LCBench surrogate in DIR (holding lcbench/)",
    )
    parser.add_argument("--yahpo-task", default="3945", help="its OpenML task (default 3945)")
    parser.add_argument(
        "--timeout",
        type=positive(float),
        default=900,
        help="seconds per policy before giving up (default 900)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "testbed")
    args = parser.parse_args(argv)
    if args.workers > args.hosts or args.eta < 2:
        parser.error("--workers must be <= --hosts and --eta >= 2")
    args.link_scale = args.link_gbps * 1e9 / (args.bw * 1e6)
    args.surrogate = None
    if args.yahpo is not None:
        try:
            args.surrogate = LcBench(args.yahpo, args.yahpo_task)
        except YahpoError as exc:
            parser.error(str(exc))
    import os

    if os.geteuid() != 0:
        parser.error("run as root (Mininet and Open vSwitch need it)")
    import subprocess

    subprocess.run(["bash", str(ROOT / "scripts" / "ovs.sh"), "start"], check=True)
    results = []
    for policy in args.policy:
        for gpu_policy in args.gpu_policy:
            label = policy if gpu_policy == "none" else f"{policy}+{gpu_policy}"
            print(f"== {label}", flush=True)
            results.append(run_policy(policy, args, args.out / label, gpu_policy))
    with open(args.out / "stages.csv", "w", newline="") as f:
        rows = [{"policy": r["policy"], **s} for r in results for s in r["stages"]]
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summary = [{k: v for k, v in r.items() if k != "stages"} for r in results]
    (args.out / "results.json").write_text(json.dumps(summary, indent=2))
    figure = plot(results, args.out)
    print(
        f"\n{'policy':<17} {'avg SCT':>8} {'p95 SCT':>8} {'to 90%':>7} {'best id':>8} "
        f"{'HPO end':>8} {'link':>6} {'GPU':>5} {'preempt':>7}"
    )
    for r in results:
        gpu = r["gpu"] or {}
        print(
            f"{r['policy']:<17} {fmt(r['sct_s'].get('mean')):>8} {fmt(r['sct_s'].get('p95')):>8} "
            f"{fmt(r['time_to_90pct_s'].get('mean')):>7} "
            f"{fmt(r['best_identified_s'].get('mean')):>8} "
            f"{fmt(r['hpo_completion_s'].get('mean')):>8} {r['link_utilisation']:>6.1%} "
            f"{fmt_pct(gpu.get('gpu_utilisation')):>5} {gpu.get('preemptions', '-'):>7}"
        )
    print(f"results: {args.out}/results.json, stages.csv, {figure.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
