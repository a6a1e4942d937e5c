"""Wall time and peak memory of the simulator's HPO runs as the cluster grows (issue #19).

    .venv/bin/python benchmarks/hpo_scale.py [--sizes 130x20 260x40 520x80]
        [--policy fair sincronia ...] [--mode levels ideal] [--timeout 300] [--repeat 1]

Each point (hosts x tasks, policy, mode) is ``python -m simulator hpo --hosts H --tasks T``
with its other defaults (9 configurations per task, eta 3, 3 workers per job, PS and ring,
1 Gbit/s big switch), run in its own process so that its peak RSS is its own. The time is the
run's own (``sim.run()``, kernels compiled beforehand), as the simulator prints it; a point
that has not finished after ``--timeout`` seconds is stopped and shown as ``>T``. The cost
model's two terms are printed beside it: the wall time of a reorder (the policy's schedule and
the engine's regrouping) and of a step of the compiled loop (one completion or rate change).
The last column is the machine's pace during the run. On a shared VM the same run takes up
to twice as long in a slow hour, and readings taken before and after a run do not tell its
time (the pace swings within it). So the point's process times the compiled reference of
``benchmarks/pace.py`` every 0.25 s while it runs (:class:`pace.RunPace`, 1-2 % of the run,
left out of its wall time); *run pace* is their mean in ms (lower is quicker). Within an hour
a run's wall time is close to proportional to it, so two commits' runs of one hour compare by
wall time over run pace (:class:`pace.RunPace`). With
``--repeat N`` each point runs N times in a row, and from three runs a line sums them up:
the ranges of wall time, run pace and wall time over run pace, and the correlation of the
first two.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pace import RunPace  # noqa: E402


def run_one(hosts: int, tasks: int, policy: str, mode: str) -> dict:
    """Run one point in this process; its wall time, peak RSS, pace and what it computed."""
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator, warm_up
    from simulator.hpo import HpoDriver
    from workloads.hpo import generate

    warm_up()
    sim = Simulator(Fabric(hosts, 1e9), make_policy(policy), mode=mode)
    driver = HpoDriver(sim, generate(hosts, tasks, seed=1))
    with RunPace() as pace:
        started = time.perf_counter()
        sim.run()
        wall = time.perf_counter() - started
    return {
        "wall_s": wall - pace.spent_s,
        "pace_ms": pace.mean_ms,
        "pace_readings": len(pace.readings_ms),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "stages": driver.n_stages,
        "coflows": len(sim.coflows),
        "reorders": sim.reorders,
        "steps": sim.steps,
        "reorder_s": sim.reorder_s,
        "step_s": sim.step_s,
    }


def size(text: str) -> tuple[int, int]:
    """``HOSTSxTASKS`` as two positive integers."""
    try:
        hosts, tasks = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HOSTSxTASKS, got {text!r}") from None
    if hosts < 4 or tasks < 1:
        raise argparse.ArgumentTypeError(f"need at least 4 hosts and 1 task, got {text!r}")
    return hosts, tasks


def run_point(
    label: str, hosts: int, tasks: int, policy: str, mode: str, timeout_s: float
) -> dict | None:
    """Run one point in its own process and print its line; what it measured (``None`` if
    it was stopped after ``timeout_s``)."""
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--one", f"{hosts},{tasks},{policy},{mode}"],
            capture_output=True, text=True, check=True, timeout=timeout_s,
        ).stdout  # fmt: skip
    except subprocess.TimeoutExpired:
        print(f"{label} {'>' + format(timeout_s, 'g'):>8}", flush=True)
        return None
    r = json.loads(out.strip().splitlines()[-1])
    per_reorder = 1e6 * r["reorder_s"] / max(r["reorders"], 1)
    per_step = 1e6 * r["step_s"] / max(r["steps"], 1)
    print(
        f"{label} {r['wall_s']:>8.1f} {r['peak_rss_mb']:>12.0f} "
        f"{r['coflows']:>8} {r['reorders']:>9} {per_reorder:>11.0f} "
        f"{r['steps']:>9} {per_step:>8.1f} {r['pace_ms']:>12.3f}",
        flush=True,
    )
    return r


def repeat_summary(runs: list[dict]) -> str:
    """One line on repeated runs of one point: the ranges of their wall times, their run
    paces and wall time over run pace, and how the first two correlate (Pearson's r)."""
    if len(runs) < 3:
        return f"  {len(runs)} runs finished: too few to summarise"
    walls = np.array([r["wall_s"] for r in runs])
    paces = np.array([r["pace_ms"] for r in runs])
    per_pace = walls / paces
    spread = walls.std() > 0 and paces.std() > 0
    correlation = f"{np.corrcoef(walls, paces)[0, 1]:.2f}" if spread else "undefined"
    return (
        f"  {len(runs)} runs: wall {walls.min():.1f}-{walls.max():.1f} s, run pace "
        f"{paces.min():.3f}-{paces.max():.3f} ms, correlation {correlation}; wall / run pace "
        f"{per_pace.min():.1f}-{per_pace.max():.1f} s per ms"
    )


def main(argv: list[str] | None = None) -> int:
    from controller.policies import POLICIES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=size, nargs="+", default=[(130, 20), (260, 40), (520, 80)])
    parser.add_argument("--policy", nargs="+", default=sorted(POLICIES), choices=sorted(POLICIES))
    parser.add_argument("--mode", nargs="+", default=["levels"], choices=["levels", "ideal"])
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per point")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each point in a row (from 3: a summary)")  # fmt: skip
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one point in this process
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    if args.one:
        hosts, tasks, policy, mode = args.one.split(",")
        print(json.dumps(run_one(int(hosts), int(tasks), policy, mode)))
        return 0
    print(
        f"{'hosts x tasks':<14} {'policy':<10} {'mode':<7} {'wall s':>8} {'peak RSS MB':>12} "
        f"{'coflows':>8} {'reorders':>9} {'us/reorder':>11} {'steps':>9} {'us/step':>8} "
        f"{'run pace ms':>12}"
    )
    for hosts, tasks in args.sizes:
        for mode in args.mode:
            for policy in args.policy:
                label = f"{f'{hosts} x {tasks}':<14} {policy:<10} {mode:<7}"
                runs = [run_point(label, hosts, tasks, policy, mode, args.timeout)
                        for _ in range(args.repeat)]  # fmt: skip
                if args.repeat >= 3:
                    print(repeat_summary([r for r in runs if r is not None]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
