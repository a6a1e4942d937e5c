"""Simulated comparison of the coflow scheduling policies (Beamer's large-scale experiments).

    .venv/bin/hpo-sim-sweep [--hosts 13 64 150] [--loads 0.5 1]
                            [--seeds 1] [--search halving|asha|full]
                            [--trace FILE|NAME|synthetic]
                            [--out results/sim]

For every cluster size and load, one seeded HPO workload (successive halving by default, or
ASHA with ``--search asha``; PS and ring all-reduce jobs of ResNet-50 / VGG-16 / Inception-v3)
runs under every policy on a big switch of 1 Gbit/s ports. Load 1 is two concurrent HPO tasks
per 13 hosts (the testbed's workload); ``tasks = max(1, round(load * 2 * hosts / 13))``.
Then a coflow trace runs under every policy: by default the bundled 16-port trace resampled
from the Facebook one (``fb-526coflows-16ports-load0.9.txt``, :mod:`netsched_data`); ``--trace``
takes a file, a bundled trace's name, or ``synthetic`` (200 coflows generated on 16 ports,
seed 1, called synthetic in the output and in ``trace.csv``). Writes ``hpo.csv``
(one row per run), ``hpo-summary.csv`` (per point and policy: mean +/- 95 % CI over the seeds,
and the ratio to the ``--baseline`` policy's (fair sharing by default) paired per seed:
geometric mean with its CI and the seeds it is over), ``trace.csv`` and PNG figures (average
and p95 stage completion time, time to 90 % accuracy relative to the baseline, with 95 % error
bars from two seeds on; trace CCT) to ``--out``. It prints each run as it goes, then per
point the policies' average SCT and which one is clearly best (its interval clear of every
other's: never with one seed).

The policies and the simulator (numba's kernels) are imported where a run needs them, so that
``--help`` and a bad flag answer at once.
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from cli.argtypes import (  # noqa: E402
    POLICY_NAMES,
    non_negative,
    number,
    output_folder,
    policy_help,
    policy_name,
    positive,
    program,
)
from cli.sweep import SweepError, run_points  # noqa: E402
from cli.sweep import add_arguments as add_sweep_arguments  # noqa: E402
from controller.metrics import summarise  # noqa: E402
from controller.stats import (  # noqa: E402
    Interval,
    clear_best,
    format_interval,
    mean_ci,
    paired_ratio_ci,
)
from experiments.figures import error_bars, spread_note  # noqa: E402
from netsched_data import SMALL_TRACE, TRACES, DataError, find_trace  # noqa: E402
from netsched_data import trace as bundled_trace  # noqa: E402
from simulator.__main__ import hpo_summary  # noqa: E402
from simulator.metrics import coflow_rows, trace_lower_bound, write_csv  # noqa: E402
from workloads.hpo import PATTERNS, SEARCHES, describe_workload, generate  # noqa: E402

if TYPE_CHECKING:
    from simulator.traces import Trace

# the trace of the trace runs unless --trace says otherwise (bundled: always there)
DEFAULT_TRACE = SMALL_TRACE
# --trace synthetic: a generated trace (:func:`synthetic_trace`) of this seed
SYNTHETIC, SYNTHETIC_SEED = "synthetic", 1
CONFIGS, WORKERS = 9, 3
BASELINE = "fair"
METRICS = (
    ("avg_sct_s", "average SCT"),
    ("p95_sct_s", "p95 SCT"),
    ("avg_time_to_90pct_s", "time to 90% accuracy"),
)


def run_point(point: dict) -> dict:
    """One run of the sweep (a sweep point, see cli.sweep): an HPO run or a trace run."""
    return hpo_point(point) if point["kind"] == "hpo" else trace_point(point)


def hpo_point(point: dict) -> dict:
    """One HPO run: a seeded workload under one policy; its row of ``hpo.csv``."""
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator, warm_up
    from simulator.hpo import HpoDriver

    warm_up()  # (a no-op once this process has loaded the kernels: not counted below)
    started = time.perf_counter()
    hosts = point["hosts"]
    sim = Simulator(Fabric(hosts, point["link_gbps"] * 1e9), make_policy(point["policy"]))
    workload = generate(
        hosts, point["tasks"], seed=point["seed"], configs_per_task=CONFIGS, workers=WORKERS,
        search=point["search"],
    )  # fmt: skip
    driver = HpoDriver(sim, workload)
    sim.run()
    result = hpo_summary(driver)
    return {
        **{key: value for key, value in point.items() if key != "kind"},
        "avg_sct_s": result["sct_s"]["mean"],
        "p95_sct_s": result["sct_s"]["p95"],
        "sct_over_bound": result["sct_over_bound"],
        "avg_jct_s": result["jct_s"]["mean"],
        "avg_time_to_90pct_s": result["time_to_90pct_s"].get("mean"),
        "avg_time_to_95pct_s": result["time_to_95pct_s"].get("mean"),
        "avg_hpo_completion_s": result["hpo_completion_s"]["mean"],
        "busiest_port_busy": result["busiest_port_busy"],
        "wall_s": time.perf_counter() - started,
    }


def hpo_points(args) -> list[dict]:
    """Every (hosts, load, seed, policy) of the sweep, in the order the tables list them."""
    return [
        {"kind": "hpo", "link_gbps": args.link_gbps, "search": args.search, "hosts": hosts,
         "load": load, "tasks": max(1, round(load * 2 * hosts / 13)), "seed": seed,
         "policy": name}
        for hosts in args.hosts for load in args.loads for seed in args.seeds
        for name in args.policy
    ]  # fmt: skip


def synthetic_trace(path: Path, seed: int = SYNTHETIC_SEED) -> Path:
    """A generated 16-port, 200-coflow trace in the Facebook format (``--trace synthetic``)."""
    from simulator.traces import write_fb_trace

    rng = random.Random(seed)
    coflows, clock = [], 0
    for cid in range(200):
        clock += int(rng.expovariate(1 / 150))
        mappers = rng.sample(range(16), rng.randint(1, 6))
        reducers = {p: round(rng.lognormvariate(2, 1.5), 1) for p in rng.sample(range(16), 3)}
        coflows.append((cid, clock, mappers, reducers))
    write_fb_trace(path, 16, coflows)
    return path


def trace_key(value: str | None) -> str:
    """What a ``--trace`` value stands for in the sweep's points: a bundled trace's name or
    ``synthetic`` as such (the same points wherever the package is installed), a file as its
    absolute path.

    Raises:
        DataError: a bare name that is neither a file nor a bundled trace.
    """
    if value is None:
        return DEFAULT_TRACE
    if value == SYNTHETIC and not Path(value).exists():
        return SYNTHETIC
    path = find_trace(value).resolve()
    return path.name if path.name in TRACES and path == bundled_trace(path.name) else str(path)


def trace_label(key: str) -> str:
    """How the output names the trace of ``key`` (:func:`trace_key`)."""
    if key == SYNTHETIC:
        return f"synthetic (200 coflows, generated, seed {SYNTHETIC_SEED})"
    return f"{key} (bundled)" if key in TRACES else key


def load_sweep_trace(key: str) -> Trace:
    """The trace of ``key`` (:func:`trace_key`): a synthetic one is generated afresh."""
    from simulator.traces import load_trace

    if key == SYNTHETIC:
        with tempfile.TemporaryDirectory() as folder:
            return load_trace(synthetic_trace(Path(folder) / "synthetic-trace.txt"))
    return load_trace(bundled_trace(key) if key in TRACES else Path(key))


@functools.cache
def trace_and_bound(key: str, link_bps: float) -> tuple[Trace, float]:
    """The trace of ``key`` (:func:`trace_key`) and its lower bound on the total CCT, read once
    per process (every policy's point uses them; ``install`` only reads the trace)."""
    trace = load_sweep_trace(key)
    return trace, trace_lower_bound(trace, link_bps, offline=False)


def trace_point(point: dict) -> dict:
    """One policy on the coflow trace (a sweep point)."""
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator, warm_up

    warm_up()
    link_bps = point["link_gbps"] * 1e9
    trace, bound = trace_and_bound(point["trace"], link_bps)
    sim = Simulator(Fabric(trace.n_ports, link_bps), make_policy(point["policy"]))
    trace.install(sim)
    sim.run()
    cct = [r["cct_s"] for r in coflow_rows(sim)]
    stats = summarise(cct)
    return {
        "policy": point["policy"],
        "avg_cct_s": stats["mean"],
        "p95_cct_s": stats["p95"],
        "total_over_bound": sum(cct) / bound,
        "link_gbps": point["link_gbps"],
    }


def trace_points(args, key: str) -> list[dict]:
    """Every policy on the coflow trace of ``key`` (:func:`trace_key`)."""
    return [
        {"kind": "trace", "trace": key, "link_gbps": args.link_gbps, "policy": name}
        for name in args.policy
    ]  # fmt: skip


def describe(point: dict, row: dict) -> str:
    """A finished run's progress line."""
    if point["kind"] == "trace":
        return (f"trace {point['policy']:<10} avg CCT {row['avg_cct_s']:8.3f} s  "
                f"p95 {row['p95_cct_s']:8.3f} s")  # fmt: skip
    return (
        f"{point['hosts']:>3} hosts load {point['load']:<4} seed {point['seed']} "
        f"{point['policy']:<10} avg SCT {row['avg_sct_s']:8.2f} s  p95 {row['p95_sct_s']:8.2f} s"
    )


def cost(point: dict) -> float:
    """A run's relative cost, so that the longest start first (the trace is about a 13-host
    HPO run's)."""
    return 13 * 2 if point["kind"] == "trace" else point["hosts"] * point["tasks"]


def seed_summary(rows: list[dict], baseline: str = BASELINE) -> list[dict]:
    """Per (hosts, load, policy): each metric's mean and 95 % CI half-width over the seeds, and
    its ratio to the ``baseline`` policy's on the same seed (paired): mean, interval and the
    seeds it is over."""
    by_point: dict[tuple, dict[str, dict[int, dict]]] = {}
    for r in rows:
        point = by_point.setdefault((r["hosts"], r["load"], r["tasks"]), {})
        point.setdefault(r["policy"], {})[r["seed"]] = r
    out = []
    for (hosts, load, tasks), policies in by_point.items():
        base = policies.get(baseline, {})
        for name, runs in policies.items():
            row = {"link_gbps": next(iter(runs.values()))["link_gbps"], "hosts": hosts,
                   "load": load, "tasks": tasks, "policy": name, "seeds": len(runs)}  # fmt: skip
            for metric, _ in METRICS:
                values = {seed: run[metric] for seed, run in runs.items()}
                ci = mean_ci(values.values())
                ratio = paired_ratio_ci(values, {s: b[metric] for s, b in base.items()})
                row[metric] = None if ci is None else ci.mean
                row[f"{metric}_ci95"] = None if ci is None else ci.half_width
                row[f"{metric}_vs_{baseline}"] = None if ratio is None else ratio.mean
                row[f"{metric}_vs_{baseline}_low"] = None if ratio is None else ratio.low
                row[f"{metric}_vs_{baseline}_high"] = None if ratio is None else ratio.high
                row[f"{metric}_vs_{baseline}_n"] = None if ratio is None else ratio.n
            out.append(row)
    return out


def _print_points(rows: list[dict], summary: list[dict], baseline: str = BASELINE) -> None:
    """Per point, every policy's average SCT (mean +/- 95 % CI over the seeds) and its ratio
    to the baseline's, paired per seed. The seeds are different workloads, so policies are
    compared on the paired ratios: the clear best is the one whose ratio interval lies clear of
    every other's (the baseline's is exactly 1), if any."""
    for point in sorted({(r["hosts"], r["load"], r["tasks"]) for r in summary}):
        hosts, load, tasks = point
        mine = {r["policy"]: r for r in summary if (r["hosts"], r["load"], r["tasks"]) == point}
        absolute, ratios = {}, {}
        for name, r in mine.items():
            absolute[name] = mean_ci(
                x["avg_sct_s"] for x in rows
                if (x["hosts"], x["load"], x["tasks"], x["policy"]) == (*point, name)
            )  # fmt: skip
            if r[f"avg_sct_s_vs_{baseline}"] is not None:
                ratios[name] = Interval(r[f"avg_sct_s_vs_{baseline}"],
                                        r[f"avg_sct_s_vs_{baseline}_low"],
                                        r[f"avg_sct_s_vs_{baseline}_high"], r["seeds"])  # fmt: skip
        seeds = max(r["seeds"] for r in mine.values())
        print(f"\n{hosts} hosts, load {load} ({tasks} tasks), {seeds} seed(s): average SCT s, "
              f"and / {baseline}'s paired per seed; clear best: "
              f"{clear_best(ratios) or 'none (intervals overlap)'}")  # fmt: skip
        for name in sorted(mine, key=lambda n: mine[n]["avg_sct_s"]):
            ratio = format_interval(ratios.get(name), 3)
            print(f"  {name:<10} {format_interval(absolute[name], 1):>18}   x {ratio}")


def hpo_figure(summary: list[dict], metric: str, label: str, args):
    """``metric`` relative to the baseline's at the same point, paired per seed (the workloads
    differ between points, so absolute values do not compare across loads): the geometric mean
    ratio over the seeds, with its 95 % interval as error bars where there are two seeds or
    more; a panel per cluster size, titled by the workloads."""
    width = 0.02 * (max(args.loads) - min(args.loads) or 1.0)
    key = f"{metric}_vs_{args.baseline}"
    fig, axes = plt.subplots(
        1, len(args.hosts), figsize=(4.5 * len(args.hosts), 3.6), squeeze=False
    )
    for ax, hosts in zip(axes[0], args.hosts, strict=True):
        seeds = []
        for k, name in enumerate(args.policy):
            points = sorted(
                ((r["load"], Interval(r[key], r[f"{key}_low"], r[f"{key}_high"], r[f"{key}_n"]))
                 for r in summary
                 if r["hosts"] == hosts and r["policy"] == name and r[key] is not None),
                key=lambda point: point[0],
            )  # fmt: skip
            if not points:
                continue
            shift = (k - (len(args.policy) - 1) / 2) * width  # keep error bars apart
            loads = [load + shift for load, _ in points]
            intervals = [ratio for _, ratio in points]
            (line,) = ax.plot(loads, [r.mean for r in intervals], marker="o", label=name)
            error_bars(ax, loads, intervals, capsize=3, color=line.get_color())
            seeds += [r.n for r in intervals]
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_title(f"{hosts} hosts, {spread_note(seeds)}", fontsize=10)
        ax.set_xlabel("load (1 = 2 HPO tasks per 13 hosts)")
        ax.set_ylabel(f"{label} / {args.baseline}'s")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    workloads = describe_workload(CONFIGS, args.search, PATTERNS)
    fig.suptitle(f"{workloads}; {args.link_gbps:g} Gbit/s", fontsize=10)
    fig.tight_layout()
    return fig


def plot_hpo(summary: list[dict], out: Path, args) -> list[Path]:
    """:func:`hpo_figure` of every metric into ``out/hpo-<metric>.png``."""
    paths = []
    for metric, label in METRICS:
        fig = hpo_figure(summary, metric, label, args)
        path = out / f"hpo-{metric}.png"
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


def trace_figure(rows: list[dict]):
    """Average and p95 CCT of every policy on the trace, titled by the trace."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    names = [r["policy"] for r in rows]
    ax.bar(names, [r["avg_cct_s"] for r in rows], color="tab:blue", label="average")
    ax.scatter(names, [r["p95_cct_s"] for r in rows], color="tab:red", zorder=3, label="p95")
    ax.set_ylabel("CCT (s)")
    traces = ", ".join(dict.fromkeys(r["trace"] for r in rows))
    ax.set_title(f"coflow trace: {traces}", fontsize=10)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", rotation_mode="anchor")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_trace(rows: list[dict], out: Path) -> Path:
    """:func:`trace_figure` into ``out/trace-cct.png``."""
    fig = trace_figure(rows)
    path = out / "trace-cct.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def build_parser() -> argparse.ArgumentParser:
    """``hpo-sim-sweep``'s command line."""
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--hosts",
        type=number(int, 2),
        nargs="+",
        default=[13, 64, 150],
        help="cluster sizes of the HPO sweep (default: 13 64 150)",
    )
    parser.add_argument(
        "--loads",
        type=positive(float),
        nargs="+",
        default=[0.5, 1.0],
        help="offered loads of the trace sweep (default: 0.5 1.0)",
    )
    parser.add_argument(
        "--seeds",
        type=non_negative(int),
        nargs="+",
        default=[1],
        help="workload seeds (default: 1)",
    )
    parser.add_argument(
        "--baseline",
        type=policy_name,
        default=BASELINE,
        help="the policy every other is compared with, paired per seed, one of --policy "
        "(default: fair)",
    )
    parser.add_argument(
        "--search",
        choices=SEARCHES,
        default="halving",
        help="the HPO tasks' search: halving (synchronous successive halving, default), asha "
        "(the same rungs without a stage barrier) or full",
    )
    parser.add_argument(
        "--policy",
        nargs="+",
        default=sorted(POLICY_NAMES),
        type=policy_name,
        metavar="POLICY",
        help=f"network policies: {policy_help(POLICY_NAMES)}; the tables name each as given "
        "(default: every built-in)",
    )
    parser.add_argument(
        "--link-gbps",
        type=positive(float),
        default=1.0,
        help="the modelled cluster's host link rate in Gbit/s (default: 1)",
    )
    parser.add_argument(
        "--trace",
        metavar="FILE|NAME|synthetic",
        help=f"coflow trace: a file, a bundled trace ({', '.join(TRACES)}) or synthetic (200 "
        f"coflows generated on 16 ports, seed {SYNTHETIC_SEED}) (default: {DEFAULT_TRACE})",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default="results/sim",
        help="output folder (default: results/sim)",
    )
    add_sweep_arguments(parser)
    return parser


def main(argv=None) -> int:
    """Run the sweep, print and write its tables and figures; the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if min(args.hosts) < WORKERS or min(args.loads) <= 0 or args.link_gbps <= 0:
        parser.error(f"--hosts must be >= {WORKERS}, --loads and --link-gbps > 0")
    if args.baseline not in args.policy:
        parser.error(f"--baseline {args.baseline} is not among --policy")
    args.link_bps = args.link_gbps * 1e9
    args.out.mkdir(parents=True, exist_ok=True)
    from simulator.traces import MB, TraceError

    try:  # read before the sweep: a bad trace must not cost the sweep's minutes first
        key = trace_key(args.trace)
        trace, _ = trace_and_bound(key, args.link_bps)
    except (DataError, TraceError) as exc:
        parser.error(f"--trace: {exc}")
    if key == SYNTHETIC:  # what was generated, beside the results
        synthetic_trace(args.out / "synthetic-trace.txt")
    started = time.perf_counter()
    print(
        f"trace {trace_label(key)}: {len(trace.coflows)} coflows, {trace.n_flows} flows, "
        f"{trace.total_bytes / MB:,.0f} MB",
        flush=True,
    )
    points = hpo_points(args) + trace_points(args, key)
    try:
        results = run_points(points, run_point, args.out / "points", args, label="runs",
                             describe=describe, cost=cost)  # fmt: skip
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    written = write_tables(points, results, key, args)
    print(
        f"\nfinished in {time.perf_counter() - started:.0f} s; results and figures in {args.out}/:"
    )
    for path in written:
        print(f"  {path.name}")
    return 0


def write_tables(points: list[dict], results: list[dict], key: str,
                 args: argparse.Namespace) -> list[Path]:  # fmt: skip
    """Write the sweep's tables (``hpo.csv``, ``hpo-summary.csv``, ``trace.csv``) and figures,
    and print the comparison; the files written."""
    rows = [r for p, r in zip(points, results, strict=True) if p["kind"] == "hpo"]
    # (each row names its trace: which one ran, synthetic or not, is in the file)
    trace_rows = [
        {"trace": trace_label(key), **r}
        for p, r in zip(points, results, strict=True)
        if p["kind"] == "trace"
    ]
    write_csv(args.out / "hpo.csv", rows)
    summary = seed_summary(rows, args.baseline)
    write_csv(args.out / "hpo-summary.csv", summary)
    _print_points(rows, summary, args.baseline)
    write_csv(args.out / "trace.csv", trace_rows)
    figures = plot_hpo(summary, args.out, args) + [plot_trace(trace_rows, args.out)]
    return [args.out / "hpo.csv", args.out / "hpo-summary.csv", args.out / "trace.csv", *figures]


if __name__ == "__main__":
    sys.exit(main())
