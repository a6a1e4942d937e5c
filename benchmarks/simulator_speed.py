"""Wall time and peak memory of the simulator on a coflow trace, one process per policy.

    .venv/bin/python benchmarks/simulator_speed.py [--trace FB2010-1Hr-150-0.txt|FILE]
                                                   [--policy fair sincronia ...]
                                                   [--mode levels ideal] [--arrivals online offline]
                                                   [--timeout 600]

Each run (policy x mode x arrivals) is its own process (so its peak RSS is its own) on a 1 Gbit/s
big switch (the trace: a file, or a bundled trace's name, by default the Facebook coflow
benchmark trace), coflows released at their arrival times (``online``, default) or all at 0
(``offline``), in ``levels`` mode (default) or ``ideal``; the time excludes loading the trace
and compiling the kernels (a warm-up run on a tiny trace compiles them first).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_TRACE = "FB2010-1Hr-150-0.txt"  # bundled with the package (netsched_data)


def run_one(trace_path: str, policy: str, mode: str = "levels", offline: bool = False) -> dict:
    import numpy as np

    from controller.policies import make_policy
    from simulator.engine import CoflowSpec, Fabric, Simulator
    from simulator.traces import load_trace

    warm = Simulator(Fabric(2, 1e9), make_policy(policy), mode=mode)  # compile the kernels
    warm.release(CoflowSpec(0, np.array([0]), np.array([1]), np.array([1.0])))
    warm.run()
    trace = load_trace(trace_path)
    sim = Simulator(Fabric(trace.n_ports, 1e9), make_policy(policy), mode=mode)
    trace.install(sim, offline=offline)
    started = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - started
    cct = [r.cct_s for r in sim.coflows.values()]
    return {
        "policy": policy,
        "wall_s": wall,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "avg_cct_s": sum(cct) / len(cct),
        "steps": sim.steps,
        "reorders": sim.reorders,
        "flows": trace.n_flows,
        "delivered_fraction": sim.bytes_delivered / sim.bytes_offered,
    }


def main(argv=None) -> int:
    from cli.argtypes import add_policy_argument
    from controller.policies import POLICIES
    from netsched_data import DataError, find_trace

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trace",
        default=DEFAULT_TRACE,
        help=f"a trace file or a bundled trace's name (default: {DEFAULT_TRACE})",
    )
    add_policy_argument(parser, sorted(POLICIES), "network policies (default: every built-in)")
    parser.add_argument("--mode", nargs="+", default=["levels"], choices=["levels", "ideal"])
    parser.add_argument("--arrivals", nargs="+", default=["online"], choices=["online", "offline"])
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds a run may take before it is stopped and shown as '>T' (default 600)",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one policy in this process
    args = parser.parse_args(argv)
    if args.one:
        policy, mode, arrivals = args.one.split(",")
        print(json.dumps(run_one(args.trace, policy, mode, arrivals == "offline")))
        return 0
    try:
        args.trace = str(find_trace(args.trace))
    except DataError as exc:
        print(exc)
        return 1
    if not Path(args.trace).exists():
        print(f"trace {args.trace} not found; pass --trace FILE")
        return 1
    print(
        f"{'policy':<10} {'mode':<7} {'arrivals':<8} {'wall s':>8} {'peak RSS MB':>12} "
        f"{'avg CCT s':>10} {'steps':>8} {'reorders':>8}"
    )
    for mode in args.mode:
        for arrivals in args.arrivals:
            for policy in args.policy:
                try:
                    out = subprocess.run(
                        [sys.executable, __file__, "--trace", args.trace, "--one",
                         f"{policy},{mode},{arrivals}"],
                        capture_output=True, text=True, check=True, timeout=args.timeout,
                    ).stdout  # fmt: skip
                except subprocess.TimeoutExpired:
                    print(f"{policy:<10} {mode:<7} {arrivals:<8} {'>' + str(args.timeout):>8}",
                          flush=True)  # fmt: skip
                    continue
                r = json.loads(out.strip().splitlines()[-1])
                print(
                    f"{policy:<10} {mode:<7} {arrivals:<8} {r['wall_s']:>8.1f} "
                    f"{r['peak_rss_mb']:>12.0f} {r['avg_cct_s']:>10.3f} {r['steps']:>8} "
                    f"{r['reorders']:>8}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
