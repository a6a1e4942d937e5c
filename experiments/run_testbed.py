"""The testbed experiment: one seeded HPO workload on the Mininet testbed under each policy.

    sudo .venv/bin/hpo-testbed [--policy fair fifo-lm sincronia jpas beamer]
        [--gpu-policy none fifo rr slaq hermes] [--gpus-per-host 1] [--quantum 5]
        [--hosts 13] [--bw 20] [--tasks 2] [--configs 9] [--eta 3] [--min-iterations 3]
        [--link-gbps 1] [--patterns ring] [--seeds 1] [--no-host-priorities]
        [--tcp-rto-max-ms 1000|off]
        [--calibrate | --calibration JSON] [--out results/testbed] [--resume]

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

The command line is :mod:`experiments.testbed_settings`'s; one run is
:mod:`experiments.testbed_run`'s (on the testbed of :mod:`experiments.testbed_network`, its
counters :mod:`experiments.testbed_counters`, the simulator beside it
:mod:`experiments.testbed_prediction`), the results over the seeds
:mod:`experiments.testbed_results`. The policies, the simulator and the testbed's driver
(numba's kernels) are imported where a run needs them, so that ``--help`` and a bad flag answer
at once.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from cli.argtypes import program
from cli.progress import Progress
from experiments import calibrate
from experiments.testbed_network import network
from experiments.testbed_results import fmt, plot, print_runs, print_summary, write_results
from experiments.testbed_run import RUN_FAILURES, Run, run_with_retries
from experiments.testbed_settings import TestbedSettings, kept, parse, testbed_parser
from simulator.__main__ import run_label
from simulator.calibration import Overheads
from simulator.metrics import write_json


def build_parser() -> argparse.ArgumentParser:
    """``hpo-testbed``'s command line."""
    return testbed_parser(__doc__.split("\n\n")[0], program(__name__))


def main(argv=None) -> int:
    """Run the experiment holding the testbed lock; the exit status."""
    parser = build_parser()
    settings = parse(parser, argv)
    argv = sys.argv[1:] if argv is None else argv
    try:
        with network.testbed_lock():  # the whole experiment, not only each network
            return experiment(settings, argv, parser.prog)
    except (network.TestbedBusy, network.NamesTaken) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # (each run's network and controller stop in its own finally)
        print(f"\n{parser.prog}: interrupted: the network and the controller were stopped; the "
              f"runs that finished are in {settings.out}", file=sys.stderr)  # fmt: skip
        return 130


def experiment(settings: TestbedSettings, argv: list[str], prog: str) -> int:
    """Calibrate if asked, run every (seed, policy) and write the results; a failing run is
    reported and the others go on. Returns the exit status (1 if any run failed)."""
    if settings.calibrate:
        measured = calibrate.calibrate(settings, settings.out / "calibration", argv)
        settings = replace(settings, overheads=Overheads(**measured["overheads"]))
    results, failures = run_every_policy(settings)
    if failures:
        write_json(settings.out / "failures.json", failures)
    if not results:
        print(f"{prog}: error: every run failed (see {settings.out / 'failures.json'})",
              file=sys.stderr)  # fmt: skip
        return 1
    summary = write_results(results, failures, settings, argv)
    figure = plot(summary, settings.out)
    print_runs(results, settings)
    print_summary(summary, len(settings.seeds))
    print(f"results: {settings.out}/results.json, summary.json, stages.csv, {figure.name}")
    for failure in failures:
        print(f"FAILED: {failure['policy']}, seed {failure['seed']}: {failure['error']}")
    return 1 if failures else 0


def run_every_policy(settings: TestbedSettings) -> tuple[list[dict], list[dict]]:
    """Every seed under every policy pair, each run tried again as the settings say (with
    ``--resume`` one finished under the same settings is read again instead); the results
    (with each run's seed and failed attempts) and the runs that failed."""
    results, failures = [], []
    policies = len(settings.policies) * len(settings.gpu_policies)
    progress = Progress(len(settings.seeds) * policies, "testbed runs")
    for seed in settings.seeds:
        for policy in settings.policies:
            for gpu_policy in settings.gpu_policies:
                label = run_label(policy, gpu_policy)
                run = Run(policy, settings.out / label / f"seed-{seed}", seed, gpu_policy)
                if (result := kept(settings, run.out / "result.json")) is not None:
                    failed = result.get("failed_attempts", [])
                    results.append({"seed": seed, **result, "failed_attempts": failed})
                    progress.step(f"{label}, seed {seed}: finished before (--resume)")
                    continue
                print(f"== {label}, seed {seed}", flush=True)
                try:
                    result, failed = run_with_retries(settings, run)
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
    return results, failures


if __name__ == "__main__":
    sys.exit(main())
