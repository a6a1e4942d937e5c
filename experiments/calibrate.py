"""Measure the testbed's systematic overheads, the same for every policy (``calibration.json``).

    sudo .venv/bin/hpo-calibrate [--hosts 13] [--bw 20] [--link-gbps 1]
        [--patterns ring] [--calibration-iterations 20] [--calibration-repeats 3]
        [--out results/calibration]

Two workloads in which no scheduling decision matters, under fair sharing, on the testbed of
``hpo-testbed`` (same flags, same regime):

1. **goodput**: one lone job per synchronisation pattern, ``--calibration-iterations``
   iterations, run ``--calibration-repeats`` times in a fresh testbed each. Its iteration time
   after the first (start-up excluded) against the simulator's for the same job,
   ``goodput = (simulated - compute) / (measured - compute)``: the payload rate the testbed
   reaches over the line rate (headers, ACKs, TCP ramp-up per synchronisation). The mean over
   the repeats is used: one run alone varies by several per cent from one repeat to the next
   (five repeats of the 20-iteration ring job here: 0.80-0.87), and every calibrated
   prediction moves with it;
2. **job start-up**: a burst like the main workload's first stage (``--tasks`` x ``--configs``
   jobs started at once, one iteration each, then the rest of successive halving): the mean time
   from a job's start until all its workers are connected and ready.

Writes ``<out>/calibration.json`` (``overheads``: ``job_startup_s``, ``goodput``; what was
measured; provenance). ``hpo-testbed --calibration <out>/calibration.json`` then also
predicts every policy with them (:mod:`simulator.calibration`).

The policies and the simulator (numba's kernels) are imported where a prediction needs them,
so that ``--help`` and a bad flag answer at once.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from cli.argtypes import program
from controller.stats import format_interval, mean_ci
from experiments import run_testbed
from simulator.calibration import Overheads
from simulator.metrics import provenance, write_json
from workloads.hpo import generate

POLICY = "fair"
LONE_ITERATIONS = 20  # hpo-testbed --calibration-iterations
LONE_REPEATS = 3  # hpo-testbed --calibration-repeats


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
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator
    from simulator.hpo import HpoDriver

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


def lone_goodput(args, pattern: str, out: Path, repeats: int) -> dict:
    """Run the lone ``pattern`` job ``repeats`` times on the testbed (``out/lone-<pattern>-<n>``)
    and measure its goodput each time; the mean of the repeats and each repeat's measurement."""
    tasks = lone_job(args, pattern)
    compute_s = tasks[0].model.compute_s
    simulated = simulated_iteration_s(args, tasks)
    measured = []
    for repeat in range(1, repeats + 1):
        print(f"== calibration: a lone {pattern} job, {args.iterations} iterations "
              f"(repeat {repeat} of {repeats})", flush=True)  # fmt: skip
        run = out / f"lone-{pattern}-{repeat}"
        run_testbed.run_with_retries(
            POLICY, args, run, tasks=lone_job(args, pattern),
            workload_title=f"calibration: a lone {pattern} job of {args.iterations} iterations",
        )  # fmt: skip
        measured.append(measured_iteration_s(run))
        goodput = (simulated - compute_s) / (measured[-1] - compute_s)
        print(f"  iteration {measured[-1]:.3f} s on the testbed, {simulated:.3f} s simulated "
              f"(compute {compute_s:.3f} s): goodput {goodput:.3f}")  # fmt: skip
    goodputs = [min(1.0, (simulated - compute_s) / (bed - compute_s)) for bed in measured]
    spread = mean_ci(goodputs)
    return {
        "compute_s": compute_s,
        "testbed_iteration_s": sum(measured) / len(measured),
        "simulated_iteration_s": simulated,
        "goodput": spread.mean,
        "goodput_ci95": spread.half_width if spread.n > 1 else None,
        "repeats": [
            {"testbed_iteration_s": bed, "goodput": goodput}
            for bed, goodput in zip(measured, goodputs, strict=True)
        ],
    }


def calibrate(
    args,
    out: Path,
    argv: list[str],
    iterations: int = LONE_ITERATIONS,
    repeats: int = LONE_REPEATS,
) -> dict:
    """Measure the overheads on the testbed of ``args`` (run_testbed's, after ``parse``) into
    ``out`` (``calibration.json`` and each measurement's run); returns what it wrote."""
    args = argparse.Namespace(**{**vars(args), "iterations": iterations, "overheads": None})
    args.seed = args.seeds[0]
    lone = {pattern: lone_goodput(args, pattern, out, repeats) for pattern in args.patterns}
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
    spreads = ", ".join(
        f"{pattern} {format_interval(mean_ci(r['goodput'] for r in entry['repeats']), 3)}"
        for pattern, entry in lone.items()
        if entry["goodput_ci95"] is not None
    )
    print(f"  job start-up {overheads.job_startup_s:.2f} s (mean of {startup['count']} jobs, p95 "
          f"{startup['p95']:.2f} s); goodput {overheads.goodput:.3f} of the line rate"
          + (f" (over {repeats} repeats: {spreads})" if spreads else ""))  # fmt: skip
    return calibration


def main(argv=None) -> int:
    """Measure the overheads and write ``calibration.json``; the exit status."""
    parser = run_testbed.build_parser(__doc__.split("\n\n")[0], program(__name__))
    parser.set_defaults(policy=[POLICY], out="results/calibration")
    args = run_testbed.parse(parser, argv)
    argv = sys.argv[1:] if argv is None else argv
    try:
        with run_testbed.network.testbed_lock():
            calibrate(args, args.out, argv, args.calibration_iterations, args.calibration_repeats)
    except (run_testbed.network.TestbedBusy, run_testbed.network.NamesTaken) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # (each run's network and controller stop in its own finally)
        print(f"\n{parser.prog}: interrupted: the network and the controller were stopped",
              file=sys.stderr)  # fmt: skip
        return 130
    path = args.out / "calibration.json"
    print(f"wrote {path}; use: hpo-testbed --calibration {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
