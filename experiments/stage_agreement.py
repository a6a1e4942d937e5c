"""Stage by stage: the testbed's SCT against the simulator's for a finished testbed experiment.

    .venv/bin/hpo-stage-agreement results/testbed [--raw]

For every run of ``DIR`` (``<policy>/seed-<N>/stages.csv``) it replays the same workload in the
simulator (the experiment's own command line and measured overheads, from its
``summary.json``; the simulator is deterministic, so this is the prediction the run made) and
prints each stage's testbed SCT, the calibrated prediction (``--raw``: the fluid model alone)
and their ratio, stage ``<task>.<index>`` with its number of jobs in brackets. No root needed.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from cli.argtypes import program
from experiments import run_testbed
from experiments.testbed_prediction import simulate
from experiments.testbed_settings import settings_of, workload
from simulator.calibration import Overheads


def predictions(folder: Path, raw: bool = False):
    """Yield (policy, seed, rows) for every run of the experiment in ``folder``: rows of
    (stage key, jobs, testbed SCT, predicted SCT), in task and stage order."""
    summary = json.loads((folder / "summary.json").read_text())
    command = summary["provenance"]["command"]
    # hpo-testbed records its own path, python -m the module's file (or its name, as typed)
    script = next(i for i, arg in enumerate(command) if Path(arg).name == "hpo-testbed"
                  or arg.endswith("run_testbed.py")
                  or arg == "experiments.run_testbed")  # fmt: skip
    settings = settings_of(run_testbed.build_parser().parse_args(command[script + 1 :]))
    measured = summary.get("overheads")
    overheads = None
    if measured and not raw:
        overheads = Overheads(measured["job_startup_s"], measured["goodput"])
    for seed in settings.seeds:
        for policy in settings.policies:
            stages = folder / policy / f"seed-{seed}" / "stages.csv"
            if not stages.exists():
                continue  # a failed run
            tasks = workload(settings, seed)
            predicted = simulate(policy, settings, tasks, "none", overheads)["stage_sct_s"]
            with open(stages, newline="") as f:
                measured_rows = list(csv.DictReader(f))
            measured_rows.sort(key=lambda r: (int(r["task_id"]), int(r["index"])))
            rows = []
            for row in measured_rows:
                key = f"{row['task_id']}.{row['index']}"
                rows.append((key, int(row["jobs"]), float(row["sct_s"]), predicted[key]))
            yield policy, seed, rows


def main(argv=None) -> int:
    """Print the stage-by-stage table; the exit status."""
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="an hpo-testbed output folder")
    parser.add_argument("--raw", action="store_true", help="the fluid model without overheads")
    args = parser.parse_args(argv)
    if not (args.folder / "summary.json").is_file():
        parser.error(f"{args.folder}: no summary.json (not a finished hpo-testbed experiment)")
    what = "raw" if args.raw else "calibrated"
    print(f"stage [jobs]: testbed SCT s / {what} prediction s = prediction / testbed")
    for policy, seed, rows in predictions(args.folder, args.raw):
        cells = [f"{key}[{jobs}] {bed:5.1f}/{sim:5.1f}={sim / bed:.2f}"
                 for key, jobs, bed, sim in rows]  # fmt: skip
        print(f"{policy:<10} seed {seed}  " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
