"""Command line of the flow-level simulator.

    python -m simulator trace TRACE [--policy beamer sincronia ...] [--mode levels|ideal]
                                    [--offline] [--host-bps 1e9] [--hosts-per-leaf N
                                    --oversubscription X] [--out DIR]

Runs a coflow trace (Facebook benchmark format or per-flow format, told apart automatically)
under each policy and prints average / p95 CCT and the ratio of the total CCT to a lower bound;
``--out`` also writes per-coflow CSV files and a JSON summary.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from controller.policies import POLICIES, make_policy
from simulator.engine import Fabric, Simulator
from simulator.metrics import coflow_rows, summarise, trace_lower_bound, write_csv, write_json
from simulator.traces import TraceError, load_trace


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m simulator",
        description="Flow-level simulator running the controller's coflow scheduling policies.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    trace = sub.add_parser(
        "trace",
        help="run a coflow trace",
        description="Run a coflow trace under each policy and report CCTs.",
    )
    trace.add_argument("trace", help="trace file (Facebook benchmark or per-flow format)")
    trace.add_argument(
        "--policy",
        nargs="+",
        default=sorted(POLICIES),
        choices=sorted(POLICIES),
        help="policies to run (default: all)",
    )
    trace.add_argument(
        "--mode",
        choices=["levels", "ideal"],
        default="levels",
        help="levels: 8 switch priority levels, max-min within a level (default); "
        "ideal: one level per rank, greedy in order",
    )
    trace.add_argument(
        "--offline",
        action="store_true",
        help="release every coflow at t=0 instead of at its arrival",
    )
    trace.add_argument(
        "--host-bps",
        type=_positive(float),
        default=1e9,
        help="capacity of every host link in bit/s (default: 1e9)",
    )
    trace.add_argument(
        "--hosts-per-leaf",
        type=_positive(int),
        default=None,
        help="two-tier leaf-spine with leaves of this many hosts",
    )
    trace.add_argument(
        "--oversubscription",
        type=_positive(float),
        default=1.0,
        help="leaf uplink oversubscription (default: 1)",
    )
    trace.add_argument("--out", type=Path, help="folder for CSV/JSON results")
    return parser


def run_trace(args) -> int:
    try:
        trace = load_trace(args.trace)
    except TraceError as exc:
        print(f"python -m simulator: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{args.trace}: {len(trace.coflows)} coflows, {trace.n_flows} flows, "
        f"{trace.n_ports} ports, {trace.total_bytes / 2**20:,.0f} MB",
        flush=True,
    )
    fabric = Fabric(trace.n_ports, args.host_bps, args.hosts_per_leaf, args.oversubscription)
    bound = trace_lower_bound(trace, args.host_bps, args.offline)
    summary = {
        "trace": str(args.trace),
        "mode": args.mode,
        "offline": args.offline,
        "host_bps": args.host_bps,
        "lower_bound_total_cct_s": bound,
        "policies": {},
    }
    print(f"{'policy':<10} {'avg CCT s':>11} {'p95 CCT s':>11} {'total/bound':>12} {'wall s':>8}")
    for name in args.policy:
        sim = Simulator(fabric, make_policy(name), mode=args.mode)
        trace.install(sim, offline=args.offline)
        started = time.perf_counter()
        sim.run()
        wall = time.perf_counter() - started
        rows = coflow_rows(sim)
        cct = summarise([r["cct_s"] for r in rows])
        total = sum(r["cct_s"] for r in rows)
        ratio = total / bound if bound > 0 else float("nan")
        summary["policies"][name] = {
            "cct_s": cct,
            "total_cct_s": total,
            "ratio_to_bound": ratio,
            "wall_s": wall,
            "steps": sim.steps,
            "reorders": sim.reorders,
        }
        print(
            f"{name:<10} {cct['mean']:>11.3f} {cct['p95']:>11.3f} {ratio:>12.3f} {wall:>8.1f}",
            flush=True,
        )
        if args.out:
            write_csv(args.out / f"coflows-{name}.csv", rows)
    if args.out:
        write_json(args.out / "summary.json", summary)
        print(f"results in {args.out}/")
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "trace":
        return run_trace(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
