"""Metrics of a simulation run: per-coflow rows, a trace's lower bound, CSV and JSON files.

Summaries (mean, nearest-rank percentiles) are :func:`controller.metrics.summarise`, the one
definition simulator, testbed and controller share."""

from __future__ import annotations

import csv
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from controller.bounds import completion_lower_bound

if TYPE_CHECKING:  # (the engine loads numba: the commands' --help need not)
    from simulator.engine import Simulator
    from simulator.traces import Trace


def trace_lower_bound(trace: Trace, link_bps: float, offline: bool) -> float:
    """Lower bound on the total CCT of ``trace`` on a big switch (controller.bounds).

    Demands are seconds of port time per host port; release times are the arrivals (zero when
    offline). The bound is on the sum of completion times, so the arrivals are subtracted.
    """
    demands, releases = [], []
    for coflow in trace.coflows:
        seconds = 8.0 * coflow.size_bytes / link_bps
        out = np.bincount(coflow.src, weights=seconds, minlength=trace.n_ports)
        into = np.bincount(coflow.dst, weights=seconds, minlength=trace.n_ports)
        demand = {("out", int(p)): float(out[p]) for p in np.flatnonzero(out)}
        demand.update({("in", int(p)): float(into[p]) for p in np.flatnonzero(into)})
        demands.append(demand)
        releases.append(0.0 if offline else coflow.arrival_s)
    return completion_lower_bound(demands, releases=releases) - sum(releases)


def coflow_rows(sim: Simulator) -> list[dict]:
    """One row per coflow (arrival order): arrival, finish, CCT, bytes, owner."""
    rows = []
    for record in sorted(sim.coflows.values(), key=lambda r: (r.arrival_s, r.coflow_id)):
        rows.append(
            {
                "coflow_id": record.coflow_id,
                "job_id": record.job_id,
                "stage_id": record.stage_id,
                "arrival_s": record.arrival_s,
                "finish_s": record.finish_s,
                "cct_s": record.cct_s,
                "size_bytes": record.size_bytes,
                "flows": record.n_flows,
            }
        )
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` (dicts with the same keys) as CSV, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        if not rows:
            return
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` as sorted, indented JSON, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def provenance(argv: list[str] | None = None) -> dict:
    """Where a result comes from: git commit (and whether tracked files had changes), the
    command line (``argv``: the arguments after the script, default this process's), Python
    and package versions, and the machine."""
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str | None:
        try:
            run = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                 timeout=10)  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return None
        return run.stdout.strip() if run.returncode == 0 else None

    versions = {}
    for package in ("numpy", "numba", "matplotlib", "ryu", "mininet", "hypothesis"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "command": [sys.executable, *(sys.argv if argv is None else [sys.argv[0], *argv])],
        "python": platform.python_version(),
        "packages": versions,
        "machine": {
            "platform": platform.platform(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
    }
