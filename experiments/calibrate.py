"""Measure the testbed's systematic overheads, the same for every policy (``calibration.json``).

    sudo .venv/bin/python scripts/calibrate.py [--hosts 13] [--bw 20] [--link-gbps 1]
        [--patterns ring] [--calibration-iterations 20] [--out results/calibration]

Two workloads in which no scheduling decision matters, under fair sharing, on the testbed of
``scripts/run_testbed.py`` (same flags, same regime):

1. **goodput**: one lone job per synchronisation pattern, ``--calibration-iterations``
   iterations. Its iteration time after the first (start-up excluded) against the simulator's
   for the same job, ``goodput = (simulated - compute) / (measured - compute)``: the payload
   rate the testbed reaches over the line rate (headers, ACKs, TCP ramp-up per
   synchronisation);
2. **job start-up**: a burst like the main workload's first stage (``--tasks`` x ``--configs``
   jobs started at once, one iteration each, then the rest of successive halving): the mean time
   from a job's start until all its workers are connected and ready.

Writes ``<out>/calibration.json`` (``overheads``: ``job_startup_s``, ``goodput``; what was
measured; provenance). ``scripts/run_testbed.py --calibration <out>/calibration.json`` then also
predicts every policy with them (:mod:`simulator.calibration`).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from controller.policies import make_policy
from experiments import run_testbed
from simulator.calibration import Overheads
from simulator.engine import Fabric, Simulator
from simulator.hpo import HpoDriver
from simulator.metrics import provenance, write_json
from workloads.hpo import generate

POLICY = "fair"
LONE_ITERATIONS = 20  # run_testbed.py --calibration-iterations


def lone_job(args, pattern: str) -> list:
    """One task of one configuration: a single job of ``args.iterations`` iterations."""
    return generate(
        args.hosts,
        1,
        seed=args.seed,
        configs_per_task=1,
        eta=args.eta,
        min_iterations=args.iterations,
        workers=args.workers,
        patterns=(pattern,),
        link_scale=args.link_scale,
    )


def simulated_iteration_s(args, tasks: list) -> float:
    """The simulator's iteration time of the lone job at the full line rate."""
    sim = Simulator(Fabric(args.hosts, args.bw * 1e6), make_policy(POLICY))
    driver = HpoDriver(sim, tasks)
    sim.run()
    (job,) = driver.jobs.values()
    return (job.finish_s - job.start_s) / job.iterations


def measured_iteration_s(out: Path) -> float:
    """The lone job's iteration time on the testbed: rank 0's reports after the first."""
    with open(out / "iterations.csv", newline="") as f:
        times = sorted(float(r["at_s"]) for r in csv.DictReader(f) if r["rank"] == "0")
    if len(times) < 3:
        raise RuntimeError(f"too few iterations reported in {out} to measure")
    return (times[-1] - times[0]) / (len(times) - 1)


def calibrate(args, out: Path, argv: list[str], iterations: int = LONE_ITERATIONS) -> dict:
    """Measure the overheads on the testbed of ``args`` (run_testbed's, after ``parse``) into
    ``out`` (``calibration.json`` and each measurement's run); returns what it wrote."""
    args = argparse.Namespace(**{**vars(args), "iterations": iterations, "overheads": None})
    args.seed = args.seeds[0]
    lone = {}
    for pattern in args.patterns:
        tasks = lone_job(args, pattern)
        print(f"== calibration: a lone {pattern} job, {iterations} iterations", flush=True)
        run_testbed.run_with_retries(POLICY, args, out / f"lone-{pattern}", tasks=tasks)
        compute_s = tasks[0].model.compute_s
        bed = measured_iteration_s(out / f"lone-{pattern}")
        sim = simulated_iteration_s(args, tasks)
        lone[pattern] = {
            "compute_s": compute_s,
            "testbed_iteration_s": bed,
            "simulated_iteration_s": sim,
            "goodput": min(1.0, (sim - compute_s) / (bed - compute_s)),
        }
        print(f"  iteration {bed:.3f} s on the testbed, {sim:.3f} s simulated "
              f"(compute {compute_s:.3f} s): goodput {lone[pattern]['goodput']:.3f}")  # fmt: skip

    print(f"== calibration: {args.tasks} x {args.configs} jobs started at once", flush=True)
    burst_args = argparse.Namespace(**{**vars(args), "min_iterations": 1})
    burst, _ = run_testbed.run_with_retries(POLICY, burst_args, out / "burst")
    startup = burst["job_startup_s"]
    goodput = sum(entry["goodput"] for entry in lone.values()) / len(lone)
    overheads = Overheads(job_startup_s=startup["mean"], goodput=goodput)
    calibration = {
        "provenance": provenance(argv),
        "link_gbps": args.link_gbps,
        "emulated_link_bps": args.bw * 1e6,
        "host_priorities": args.host_priorities,
        "tcp_rto_max_ms": args.tcp_rto_max_ms,
        "overheads": overheads.to_json(),
        "lone_jobs": lone,
        "burst_job_startup_s": startup,
    }
    write_json(out / "calibration.json", calibration)
    print(f"  job start-up {overheads.job_startup_s:.2f} s (mean of {startup['count']} jobs, p95 "
          f"{startup['p95']:.2f} s); goodput {overheads.goodput:.3f} of the line rate")  # fmt: skip
    return calibration


def main(argv=None) -> int:
    """Measure the overheads and write ``calibration.json``; the exit status."""
    parser = run_testbed.build_parser(__doc__.split("\n\n")[0])
    parser.set_defaults(policy=[POLICY], out=Path("results") / "calibration")
    args = run_testbed.parse(parser, argv)
    argv = sys.argv[1:] if argv is None else argv
    try:
        with run_testbed.network.testbed_lock():
            calibrate(args, args.out, argv, args.calibration_iterations)
    except run_testbed.network.TestbedBusy as exc:
        print(f"calibrate.py: error: {exc}", file=sys.stderr)
        return 1
    path = args.out / "calibration.json"
    print(f"wrote {path}; use: scripts/run_testbed.py --calibration {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
