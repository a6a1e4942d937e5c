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

import csv
import sys
from dataclasses import replace
from pathlib import Path

from cli.argtypes import program
from controller.stats import format_interval, mean_ci
from experiments.testbed_network import network
from experiments.testbed_run import Run, run_with_retries
from experiments.testbed_settings import TestbedSettings, kept, parse, run_key, testbed_parser
from simulator.calibration import Overheads
from simulator.metrics import provenance, write_json
from workloads.hpo import HpoTask, generate

POLICY = "fair"


def lone_job(settings: TestbedSettings, seed: int, pattern: str, iterations: int) -> list[HpoTask]:
    """One task of one configuration: a single job of ``iterations`` iterations."""
    return generate(
        settings.cluster.hosts,
        1,
        seed=seed,
        configs_per_task=1,
        eta=settings.workload.eta,
        min_iterations=iterations,
        workers=settings.workload.workers,
        patterns=(pattern,),
        link_scale=settings.link_scale,
    )


def simulated_iteration_s(settings: TestbedSettings, tasks: list[HpoTask]) -> float:
    """The simulator's iteration time of the lone job at the full line rate, on the settings'
    cluster as the predictions model it (a leaf-spine's paths are then not counted as lost
    goodput, and again by the prediction's fabric)."""
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator
    from simulator.hpo import HpoDriver

    sim = Simulator(Fabric.of(settings.cluster), make_policy(POLICY))
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


def lone_goodput(settings: TestbedSettings, seed: int, pattern: str, out: Path) -> dict:
    """Run the lone ``pattern`` job of the settings' calibration runs on the testbed
    (``out/lone-<pattern>-<n>``) and measure its goodput each time; the mean of the repeats
    and each repeat's measurement."""
    runs = settings.calibration_runs
    tasks = lone_job(settings, seed, pattern, runs.iterations)
    compute_s = tasks[0].model.compute_s
    simulated = simulated_iteration_s(settings, tasks)
    measured = []
    for repeat in range(1, runs.repeats + 1):
        print(f"== calibration: a lone {pattern} job, {runs.iterations} iterations "
              f"(repeat {repeat} of {runs.repeats})", flush=True)  # fmt: skip
        title = f"calibration: a lone {pattern} job of {runs.iterations} iterations"
        tasks = lone_job(settings, seed, pattern, runs.iterations)
        run = Run(POLICY, out / f"lone-{pattern}-{repeat}", seed, tasks=tasks, title=title)
        run_with_retries(settings, run)
        measured.append(measured_iteration_s(run.out))
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


def calibrate(settings: TestbedSettings, out: Path, argv: list[str]) -> dict:
    """Measure the overheads on the testbed of ``settings`` (its calibration runs, the first
    seed) into ``out`` (``calibration.json`` and each measurement's run); returns what it
    wrote. ``argv``: the command line, for the provenance."""
    settings = replace(settings, overheads=None)
    if (done := kept(settings, out / "calibration.json")) is not None:
        print(f"== calibration: finished before in {out} (--resume)", flush=True)
        return done
    seed = settings.seeds[0]
    lone = {pattern: lone_goodput(settings, seed, pattern, out)
            for pattern in settings.workload.patterns}  # fmt: skip
    w = settings.workload
    print(f"== calibration: {w.tasks} x {w.configs} jobs started at once", flush=True)
    burst = replace(settings, workload=replace(w, min_iterations=1))
    measured, _ = run_with_retries(burst, Run(POLICY, out / "burst", seed))
    startup = measured["job_startup_s"]
    goodput = sum(entry["goodput"] for entry in lone.values()) / len(lone)
    overheads = Overheads(job_startup_s=startup["mean"], goodput=goodput)
    calibration = {
        "provenance": provenance(argv),
        "link_gbps": settings.modelled_link_bps / 1e9,
        "emulated_link_bps": settings.cluster.link_bps,
        "host_priorities": settings.host_priorities,
        "tcp_rto_max_ms": settings.tcp_rto_max_ms,
        "overheads": overheads.to_json(),
        "lone_jobs": lone,
        "burst_job_startup_s": startup,
        "run_key": run_key(settings),
    }
    write_json(out / "calibration.json", calibration)
    spreads = ", ".join(
        f"{pattern} {format_interval(mean_ci(r['goodput'] for r in entry['repeats']), 3)}"
        for pattern, entry in lone.items()
        if entry["goodput_ci95"] is not None
    )
    print(f"  job start-up {overheads.job_startup_s:.2f} s (mean of {startup['count']} jobs, p95 "
          f"{startup['p95']:.2f} s); goodput {overheads.goodput:.3f} of the line rate"
          + (f" (over {settings.calibration_runs.repeats} repeats: {spreads})"
             if spreads else ""))  # fmt: skip
    return calibration


def main(argv=None) -> int:
    """Measure the overheads and write ``calibration.json``; the exit status."""
    parser = testbed_parser(__doc__.split("\n\n")[0], program(__name__))
    parser.set_defaults(policy=[POLICY], out="results/calibration")
    settings = parse(parser, argv)
    argv = sys.argv[1:] if argv is None else argv
    try:
        with network.testbed_lock():
            calibrate(settings, settings.out, argv)
    except (network.TestbedBusy, network.NamesTaken) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # (each run's network and controller stop in its own finally)
        print(f"\n{parser.prog}: interrupted: the network and the controller were stopped",
              file=sys.stderr)  # fmt: skip
        return 130
    path = settings.out / "calibration.json"
    print(f"wrote {path}; use: hpo-testbed --calibration {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
