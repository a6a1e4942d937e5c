"""Wall time and peak memory of the simulator's HPO runs as the cluster grows (issue #19).

    .venv/bin/python benchmarks/hpo_scale.py [--sizes 130x20 260x40 520x80]
        [--policy fair sincronia ...] [--mode levels ideal] [--timeout 300] [--repeat 1]
        [--against DIR]

Each point (hosts x tasks, policy, mode) is ``python -m simulator hpo --hosts H --tasks T``
with its other defaults (9 configurations per task, eta 3, 3 workers per job, PS and ring,
1 Gbit/s big switch), run in its own process so that its peak RSS is its own. The time is the
run's own (``sim.run()``, kernels compiled beforehand), as the simulator prints it; a point
that has not finished after ``--timeout`` seconds is stopped and shown as ``>T``. The cost
model's two terms are printed beside it: the wall time of a reorder (the policy's schedule and
the engine's regrouping) and of a step of the compiled loop (one completion or rate change).
A first line names the processor (a VM may start on other hardware from one day to the
next). The last column is the machine's pace during the run. On a shared VM the same run takes up
to twice as long in a slow hour, and readings taken before and after a run do not tell its
time (the pace swings within it). So the point's process times the compiled reference of
``benchmarks/pace.py`` every 0.25 s while it runs (:class:`pace.RunPace`, 1-2 % of the run,
left out of its wall time); *run pace* is their mean in ms (lower is quicker). Within an hour
a run's wall time is close to proportional to it, so two commits' runs of one hour compare by
wall time over run pace (:class:`pace.RunPace`). With
``--repeat N`` each point runs N times in a row, and from three runs a line sums them up:
the ranges of wall time, run pace and wall time over run pace, and the correlation of the
first two.

``--against DIR`` compares this checkout with another (``git worktree add DIR COMMIT``; its
``.venv`` is not used): each run is followed by the same point with ``DIR``'s code (its line's
mode marked ``*``), and a line per point gives each side's wall time over run pace and this
checkout's over the other's, pair by pair. Both sides' paces are read with the compiled
reference of their own checkout, so the line refuses to compare where that code differs.
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
CHECKOUT_FILES = ("controller/policies.py", "simulator/engine.py", "simulator/hpo.py",
                  "workloads/hpo.py")  # fmt: skip


def run_one(hosts: int, tasks: int, policy: str, mode: str) -> dict:
    """Run one point in this process; its wall time, peak RSS, pace and what it computed
    (with the code of the checkout first on ``sys.path``)."""
    from pace import RunPace, reference_fingerprint

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
        "pace_reference": reference_fingerprint(),
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
    label: str, hosts: int, tasks: int, policy: str, mode: str, timeout_s: float,
    code: Path | None = None,
) -> dict | None:  # fmt: skip
    """Run one point in its own process, with this checkout's code or ``code``'s, and print
    its line; what it measured (``None`` if it failed or was stopped after ``timeout_s``)."""
    command = [sys.executable, __file__, "--one", f"{hosts},{tasks},{policy},{mode}"]
    try:
        out = subprocess.run(
            command + (["--code", str(code)] if code else []),
            capture_output=True, text=True, check=True, timeout=timeout_s,
        ).stdout  # fmt: skip
    except subprocess.TimeoutExpired:
        print(f"{label} {'>' + format(timeout_s, 'g'):>8}", flush=True)
        return None
    except subprocess.CalledProcessError as failed:
        why = (failed.stderr.strip().splitlines() or [f"exit status {failed.returncode}"])[-1]
        print(f"{label} failed: {why}", flush=True)
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


def pair_summary(ours: list[dict | None], theirs: list[dict | None]) -> str:
    """One line on alternating runs of one point with this checkout's code and another's:
    each side's wall time over run pace, and this checkout's over the other's, pair by pair
    (below 1: this checkout is quicker). Runs whose pace references differ are not compared."""
    pairs = [(a, b) for a, b in zip(ours, theirs, strict=True) if a is not None and b is not None]
    if not pairs:
        return "  paired: no pair finished"
    if any(a["pace_reference"] != b["pace_reference"] for a, b in pairs):
        return "  paired: not compared, the two checkouts' pace references differ"
    mine = np.array([a["wall_s"] / a["pace_ms"] for a, _ in pairs])
    other = np.array([b["wall_s"] / b["pace_ms"] for _, b in pairs])
    ratio = mine / other
    return (
        f"  paired: {len(pairs)} pairs, wall / run pace {mine.min():.1f}-{mine.max():.1f} "
        f"against {other.min():.1f}-{other.max():.1f} s per ms; this / against "
        f"{ratio.min():.3f}-{ratio.max():.3f} (mean {ratio.mean():.3f})"
    )


def checkout(text: str) -> Path:
    """A directory holding another checkout of this project (``--against``)."""
    path = Path(text).resolve()
    missing = [name for name in CHECKOUT_FILES if not (path / name).is_file()]
    if missing:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a checkout of this project (no {missing[0]})"
        )
    return path


def run_child(argv: list[str]) -> int:
    """``--one H,T,POLICY,MODE [--code DIR]``: one point in this process, its figures as a
    line of JSON; with ``DIR``'s code put first on ``sys.path`` (nothing of it imported yet)."""
    parser = argparse.ArgumentParser(prog="hpo_scale.py --one")
    parser.add_argument("point")
    parser.add_argument("--code", type=checkout)
    args = parser.parse_args(argv)
    if args.code:
        sys.path.insert(0, str(args.code))
    hosts, tasks, policy, mode = args.point.split(",")
    print(json.dumps(run_one(int(hosts), int(tasks), policy, mode)))
    return 0


def repeat_summary(runs: list[dict], side: str = "") -> str:
    """One line on repeated runs of one point (``side``: which checkout's, with ``--against``):
    the ranges of their wall times, their run paces and wall time over run pace, and how the
    first two correlate (Pearson's r)."""
    if len(runs) < 3:
        return f"  {side}{len(runs)} runs finished: too few to summarise"
    walls = np.array([r["wall_s"] for r in runs])
    paces = np.array([r["pace_ms"] for r in runs])
    per_pace = walls / paces
    spread = walls.std() > 0 and paces.std() > 0
    correlation = f"{np.corrcoef(walls, paces)[0, 1]:.2f}" if spread else "undefined"
    return (
        f"  {side}{len(runs)} runs: wall {walls.min():.1f}-{walls.max():.1f} s, run pace "
        f"{paces.min():.3f}-{paces.max():.3f} ms, correlation {correlation}; wall / run pace "
        f"{per_pace.min():.1f}-{per_pace.max():.1f} s per ms"
    )


def point_label(hosts: int, tasks: int, policy: str, mode: str) -> str:
    """The first columns of a point's line."""
    return f"{f'{hosts} x {tasks}':<14} {policy:<10} {mode:<7}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one"]:  # (before anything imports this checkout's packages)
        return run_child(argv[1:])
    from cli.argtypes import add_policy_argument
    from controller.policies import POLICIES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=size, nargs="+", default=[(130, 20), (260, 40), (520, 80)])
    add_policy_argument(parser, sorted(POLICIES), "network policies (default: every built-in)")
    parser.add_argument("--mode", nargs="+", default=["levels"], choices=["levels", "ideal"])
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per point")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each point in a row (from 3: a summary)")  # fmt: skip
    parser.add_argument("--against", type=checkout, metavar="DIR",
                        help="another checkout (a git worktree of another commit): each run "
                        "is followed by one with its code, and each point compared")  # fmt: skip
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    from pace import describe_machine

    print(describe_machine())
    print(
        f"{'hosts x tasks':<14} {'policy':<10} {'mode':<7} {'wall s':>8} {'peak RSS MB':>12} "
        f"{'coflows':>8} {'reorders':>9} {'us/reorder':>11} {'steps':>9} {'us/step':>8} "
        f"{'run pace ms':>12}"
    )
    for hosts, tasks in args.sizes:
        for mode in args.mode:
            for policy in args.policy:
                label = point_label(hosts, tasks, policy, mode)
                marked = point_label(hosts, tasks, policy, mode + "*")  # (the other checkout)
                point = (hosts, tasks, policy, mode, args.timeout)
                ours, theirs = [], []
                for _ in range(args.repeat):
                    ours.append(run_point(label, *point))
                    if args.against:
                        theirs.append(run_point(marked, *point, code=args.against))
                for side, runs in (("this: " if args.against else "", ours), ("against: ", theirs)):
                    if args.repeat >= 3 and runs:
                        done = [r for r in runs if r is not None]
                        print(repeat_summary(done, side), flush=True)
                if args.against:
                    print(pair_summary(ours, theirs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
