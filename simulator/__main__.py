"""Command line of the flow-level simulator.

    python -m simulator trace TRACE [--policy beamer sincronia ...] [--mode levels|ideal]
                                    [--offline] [--host-bps 1e9] [--hosts-per-leaf N
                                    --oversubscription X] [--out DIR [--schedule]]
    python -m simulator hpo [--hosts 13 --tasks 4 ...] [same options]

Runs a coflow trace (Facebook benchmark format or per-flow format, told apart automatically;
a file, or the name of a trace bundled with the package, :mod:`netsched_data`, e.g.
``FB2010-1Hr-150-0.txt``) under each policy and prints average / p95 CCT and the ratio of the
total CCT to a lower bound;
``--out`` also writes per-coflow CSV files and a JSON summary; with ``--schedule`` every run also
draws its schedule (``schedule-<policy>.png``: levels over time and port utilisation, from
``timeline-<policy>.json``; see :mod:`simulator.schedule_plot`).

``--policy`` and ``--gpu-policy`` take the built-ins' names and policies of one's own,
``package.module:Class`` or an installed entry point's name (:mod:`controller.plugins`); a run
is labelled by its policy's ``name``.

The policies and the engine (numba's kernels) are imported where a run needs them, so that
``--help`` and a bad flag answer at once.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cli.argtypes import (
    POLICY_NAMES,
    fraction,
    non_negative,
    output_folder,
    policy_help,
    policy_name,
    positive,
    program,
)
from cli.progress import Progress
from controller.metrics import summarise
from controller.timeline import Timeline, port_names
from netsched_data import BUNDLED, TRACES, DataError, find_trace
from simulator.metrics import coflow_rows, trace_lower_bound, write_csv, write_json
from workloads.flags import add_workload_arguments
from workloads.gpu import (
    GpuManager,
    add_gpu_policy_argument,
    gpu_policy_label,
    make_gpu_policy,
)
from workloads.hpo import PATTERNS, describe_workload, generate
from workloads.yahpo import LcBench, YahpoError

if TYPE_CHECKING:
    from simulator.engine import Fabric, Simulator
    from simulator.hpo import HpoDriver


def build_parser() -> argparse.ArgumentParser:
    """The simulator's command line (``trace`` and ``hpo`` subcommands)."""
    parser = argparse.ArgumentParser(
        prog=program(__name__),
        description="Flow-level simulator running the controller's coflow scheduling policies.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    trace = sub.add_parser(
        "trace",
        help="run a coflow trace",
        description="Run a coflow trace under each policy and report CCTs.",
    )
    trace.add_argument(
        "trace",
        help="trace file (Facebook benchmark or per-flow format) or the name of a bundled one "
        f"({', '.join(TRACES)})",
    )
    trace.add_argument(
        "--offline",
        action="store_true",
        help="release every coflow at t=0 instead of at its arrival",
    )
    _common_options(trace)

    hpo = sub.add_parser(
        "hpo",
        help="run a generated HPO workload",
        description="Run seeded HPO tasks (successive halving; one synchronisation coflow per "
        "training iteration) under each policy and report stage, job and accuracy metrics.",
    )
    hpo.add_argument("--hosts", type=positive(int), default=13, help="hosts (default: 13)")
    add_workload_arguments(hpo, tasks=4, min_iterations=10, patterns=PATTERNS)
    hpo.add_argument(
        "--scale",
        type=positive(float),
        default=1.0,
        help="divide model bytes and compute time by this (default: 1)",
    )
    hpo.add_argument("--seed", type=non_negative(int), default=1, help="workload seed (default: 1)")
    hpo.add_argument(
        "--yahpo",
        nargs="?",
        const=BUNDLED,
        metavar="DIR",
        help="take learning curves from the YAHPO Gym LCBench surrogate in DIR (the folder "
        "holding lcbench/; without DIR, or 'bundled': the one bundled with the package) instead "
        "of the parametric ones",
    )
    hpo.add_argument(
        "--yahpo-task",
        default="3945",
        help="OpenML task of the LCBench surrogate (default: 3945)",
    )
    hpo.add_argument(
        "--good-fraction",
        type=fraction,
        default=0.2,
        help="share of configurations with a good learning curve (default: 0.2)",
    )
    add_gpu_policy_argument(hpo, ["none"], "GPU time-sharing policies of the job manager, "
                            "every network policy run with each (default: none, every job "
                            "computes as soon as it can)")  # fmt: skip
    hpo.add_argument(
        "--gpus-per-host",
        type=positive(int),
        default=1,
        help="GPUs of every host when a GPU policy is given (default: 1)",
    )
    hpo.add_argument(
        "--quantum",
        type=positive(float),
        default=5.0,
        help="time-sharing quantum in s (default: 5)",
    )
    hpo.add_argument(
        "--resume-cost",
        type=non_negative(float),
        default=0.2,
        help="s a suspended job needs to resume (default: 0.2)",
    )
    _common_options(hpo)
    return parser


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        nargs="+",
        default=sorted(POLICY_NAMES),
        type=policy_name,
        metavar="POLICY",
        help=f"policies to run: {policy_help(POLICY_NAMES)}; a run is labelled (and its files "
        "named) by its policy's name (default: every built-in)",
    )
    parser.add_argument(
        "--mode",
        choices=["levels", "ideal"],
        default="levels",
        help="levels: 8 switch priority levels, max-min within a level "
        "(default); ideal: one level per rank, greedy in order",
    )
    parser.add_argument(
        "--link-gbps",
        type=positive(float),
        default=1.0,
        help="the modelled cluster's host link rate in Gbit/s, as on the testbed "
        "(hpo-testbed --link-gbps) (default: 1)",
    )
    parser.add_argument(  # the same in bit/s, the older spelling
        "--host-bps", dest="link_bps", type=positive(float), default=None, help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--hosts-per-leaf",
        type=positive(int),
        default=None,
        help="two-tier leaf-spine with leaves of this many hosts",
    )
    parser.add_argument(
        "--oversubscription",
        type=positive(float),
        default=1.0,
        help="leaf uplink oversubscription (default: 1)",
    )
    parser.add_argument("--out", type=output_folder, help="folder for CSV/JSON results")
    parser.add_argument(
        "--schedule",
        action="store_true",
        help="also record every run's schedule and draw it into --out (schedule-<policy>.png: "
        "levels over time and port utilisation, from timeline-<policy>.json)",
    )


def run_trace(args) -> int:
    """Replay a coflow trace under each policy and print (and write) the results."""
    from controller.policies import make_policy, policy_label
    from simulator.engine import Fabric, Simulator, warm_up
    from simulator.traces import TraceError, load_trace

    try:
        trace = load_trace(find_trace(args.trace))
    except (DataError, TraceError) as exc:
        print(f"{program(__name__)}: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{args.trace}: {len(trace.coflows)} coflows, {trace.n_flows} flows, "
        f"{trace.n_ports} ports, {trace.total_bytes / 2**20:,.0f} MB",
        flush=True,
    )
    fabric = Fabric(trace.n_ports, args.link_bps, args.hosts_per_leaf, args.oversubscription)
    bound = trace_lower_bound(trace, args.link_bps, args.offline)
    summary = {
        "trace": str(args.trace),
        "mode": args.mode,
        "offline": args.offline,
        "link_gbps": args.link_bps / 1e9,
        "host_bps": args.link_bps,
        "lower_bound_total_cct_s": bound,
        "policies": {},
    }
    print(f"{'policy':<10} {'avg CCT s':>11} {'p95 CCT s':>11} {'total/bound':>12} {'wall s':>8}")
    warm_up()  # (compiles the kernels the first time; not part of any run's wall time)
    workload = trace_name(args.trace, args.offline)
    for name in args.policy:
        label = policy_label(name)  # (a built-in's name; a loaded class's name)
        timeline = _timeline(args, fabric, label, workload)
        sim = Simulator(fabric, make_policy(name), mode=args.mode, timeline=timeline)
        trace.install(sim, offline=args.offline)
        progress = Progress(len(trace.coflows), f"{label} coflows", lines=False)
        sim.on_coflow_done(lambda _record, progress=progress: progress.step())
        started = time.perf_counter()
        sim.run()
        wall = time.perf_counter() - started
        progress.close()
        rows = coflow_rows(sim)
        cct = summarise([r["cct_s"] for r in rows])
        total = sum(r["cct_s"] for r in rows)
        ratio = total / bound if bound > 0 else float("nan")
        summary["policies"][label] = {
            "cct_s": cct,
            "total_cct_s": total,
            "ratio_to_bound": ratio,
            "wall_s": wall,
            "steps": sim.steps,
            "reorders": sim.reorders,
        }
        if label != name:  # (what to name it by to run it again)
            summary["policies"][label]["policy"] = name
        print(
            f"{label:<10} {cct['mean']:>11.3f} {cct['p95']:>11.3f} {ratio:>12.3f} {wall:>8.1f}",
            flush=True,
        )
        if args.out:
            write_csv(args.out / f"coflows-{label}.csv", rows)
            _draw(timeline, sim, args.out, label)
    if args.out:
        write_json(args.out / "summary.json", summary)
        print(f"results in {args.out}/")
    return 0


def run_hpo(args) -> int:
    """Run the HPO workload under each policy and print (and write) the results."""
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator, warm_up
    from simulator.hpo import HpoDriver

    try:
        kwargs = dict(
            n_hosts=args.hosts,
            n_tasks=args.tasks,
            seed=args.seed,
            configs_per_task=args.configs,
            eta=args.eta,
            min_iterations=args.min_iterations,
            workers=args.workers,
            models=tuple(args.models),
            patterns=tuple(args.patterns),
            mean_interarrival_s=args.interarrival,
            scale=args.scale,
            search=args.search,
            good_fraction=args.good_fraction,
        )
        surrogate = None if args.yahpo is None else LcBench(args.yahpo, args.yahpo_task)
        generate(**kwargs, surrogate=surrogate)
    except (ValueError, YahpoError) as exc:
        print(f"{program(__name__)}: error: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.resume_cost < args.quantum:
        print(f"{program(__name__)}: error: need 0 <= --resume-cost < --quantum", file=sys.stderr)
        return 2
    fabric = Fabric(args.hosts, args.link_bps, args.hosts_per_leaf, args.oversubscription)
    summary = {
        "workload": dict(kwargs),
        "mode": args.mode,
        "link_gbps": args.link_bps / 1e9,
        "host_bps": args.link_bps,
        "policies": {},
    }
    if surrogate is not None:
        summary["workload"]["curves"] = f"YAHPO LCBench task {args.yahpo_task} ({args.yahpo})"
    workload = describe_workload(
        args.configs, args.search, args.patterns, args.hosts, args.tasks, args.seed,
        None if surrogate is None else f"LCBench task {args.yahpo_task}",
    )  # fmt: skip
    warm_up()  # (compiles the kernels the first time; not part of any run's wall time)
    print(
        f"{'policy':<17} {'avg SCT s':>10} {'p95 SCT s':>10} {'SCT/bound':>10} "
        f"{'avg JCT s':>10} {'to 90% s':>9} {'best id s':>9} {'HPO end s':>10} {'GPU use':>7} "
        f"{'preempt':>7} {'wall s':>7}"
    )
    for name in args.policy:
        for gpu_policy in args.gpu_policy:
            label = run_label(name, gpu_policy)
            timeline = _timeline(args, fabric, label, workload)
            sim = Simulator(fabric, make_policy(name), mode=args.mode, timeline=timeline)
            gpus = None
            if gpu_policy != "none":
                gpus = GpuManager(
                    make_gpu_policy(gpu_policy),
                    args.hosts,
                    args.gpus_per_host,
                    args.quantum,
                    args.resume_cost,
                )
            driver = HpoDriver(sim, generate(**kwargs, surrogate=surrogate), gpus=gpus)
            progress = Progress(driver.n_stages, f"{label} stages", lines=False)
            driver.on_stage_done(progress.step)
            started = time.perf_counter()
            sim.run()
            wall = time.perf_counter() - started
            progress.close()
            result = hpo_summary(driver)
            result["wall_s"] = wall
            result["network_policy"], result["gpu_policy"] = name, gpu_policy
            summary["policies"][label] = result
            gpu = result.get("gpu") or {}
            print(
                f"{label:<17} {result['sct_s']['mean']:>10.3f} {result['sct_s']['p95']:>10.3f} "
                f"{result['sct_over_bound']:>10.3f} {result['jct_s']['mean']:>10.3f} "
                f"{_fmt(result['time_to_90pct_s'].get('mean')):>9} "
                f"{_fmt(result['best_identified_s'].get('mean')):>9} "
                f"{result['hpo_completion_s']['mean']:>10.2f} "
                f"{_pct(gpu.get('gpu_utilisation')):>7} {gpu.get('preemptions', '-'):>7} "
                f"{wall:>7.1f}",
                flush=True,
            )
            if args.out:
                write_csv(args.out / f"stages-{label}.csv", driver.stage_rows())
                write_csv(args.out / f"jobs-{label}.csv", driver.job_rows())
                write_csv(args.out / f"configs-{label}.csv", driver.config_rows())
                write_csv(args.out / f"tasks-{label}.csv", driver.task_rows())
                write_csv(args.out / f"coflows-{label}.csv", coflow_rows(sim))
                if timeline is not None:
                    timeline.stages = driver.core.stage_labels()
                _draw(timeline, sim, args.out, label)
    if args.out:
        write_json(args.out / "summary.json", summary)
        print(f"results in {args.out}/")
    return 0


def run_label(network: str, gpu: str = "none") -> str:
    """A run's label (and its files' name part): the network policy's name, with ``+`` and the
    GPU policy's name if there is one (for the built-ins, the names given; for a class of
    one's own, its ``name``, not the ``module:Class`` that loaded it)."""
    from controller.policies import policy_label

    label = policy_label(network)
    return label if gpu == "none" else f"{label}+{gpu_policy_label(gpu)}"


def trace_name(trace: str, offline: bool = False) -> str:
    """The trace given as ``trace`` (a file or a bundled trace's name) in a figure's title."""
    return f"trace {Path(trace).name}" + (", all released at 0" if offline else "")


def _timeline(args, fabric: Fabric, label: str, workload: str) -> Timeline | None:
    """A timeline to record the run ``label`` of ``workload`` (its name) into, if
    ``--schedule`` asked for one."""
    if not args.schedule:
        return None
    return Timeline(port_names(fabric.n_hosts), fabric.link_bps, f"simulator, {label}",
                    workload=workload)  # fmt: skip


def _draw(timeline: Timeline | None, sim: Simulator, out: Path, label: str) -> None:
    """Write the run's timeline and its picture into ``out`` (nothing without a timeline)."""
    if timeline is None:
        return
    from simulator.schedule_plot import draw  # matplotlib only where a picture is asked for

    timeline.close(sim.now_s)
    timeline.write(out / f"timeline-{label}.json")
    print(f"  {draw([timeline], out / f'schedule-{label}.png')}")


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def hpo_summary(driver: HpoDriver) -> dict:
    """Stage, job, accuracy and completion metrics of one HPO run (the HPO core's summary)."""
    return driver.core.summary(driver.sim.now_s)


def main(argv=None) -> int:
    """Run the simulator's command line; the exit status for the shell."""
    args = build_parser().parse_args(argv)
    if args.link_bps is None:
        args.link_bps = args.link_gbps * 1e9
    if args.schedule and args.out is None:
        build_parser().error("--schedule needs --out DIR")
    if args.command == "trace":
        return run_trace(args)
    return run_hpo(args)


if __name__ == "__main__":
    sys.exit(main())
