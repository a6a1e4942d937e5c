"""GPU time-sharing experiments: Hermes vs FIFO, round-robin and SLAQ, and network and GPU
scheduling together.

    .venv/bin/hpo-gpu-sweep [--seeds 1 2] [--hosts 64] [--out results/gpu]

It prints every run, then per setting and policy the mean +/- 95 % CI over the seeds, and part
3's pairs relative to (fair, fifo), paired per seed (geometric mean [95 % CI]); the same goes to
``summary.json``.

Three parts, every one on seeded workloads where few configurations are good (the case Hermes
targets), printing a table as it goes:

1. ``compute``: jobs that only compute (no network), ``--configs-alone`` configurations of one
   HPO sharing ``--gpus-alone`` GPUs, every configuration trained to the end (a search without
   early stopping): the setting of Hermes' paper.
2. ``cluster``: the flow-level simulator, ``--hosts`` hosts with ``--gpus-per-host`` GPUs
   each and 1 Gbit/s ports, fair network sharing, HPO tasks of ResNet-50 jobs (3 workers
   each) under the four GPU policies, once as a full search and once with successive halving.
   With ``--yahpo [DIR]`` the full search runs once more with YAHPO Gym LCBench learning
   curves (``yahpo-full``; without DIR the surrogate bundled with the package).
3. ``pairs``: network and GPU policies together, (fair, fifo), (fair, hermes), (beamer, fifo)
   and (beamer, hermes), with successive halving and the default models, at 13 and ``--hosts``
   hosts.

``--gpu-policy`` (parts 1 and 2) and ``--pairs`` (part 3) choose other policies, among them
policies of one's own (``package.module:Class`` or an entry point's name,
:mod:`controller.plugins`).

Metrics: time until the HPO's final configuration is identified (it leads the observed
accuracies from then on), time to 90 % of its converged accuracy, HPO completion time, average
stage completion time, GPU utilisation and preemptions. Writes ``gpu.csv``, ``summary.json`` and
PNG figures to ``--out``.

The network policies and the simulator (numba's kernels) are imported where a run needs them,
so that ``--help`` and a bad flag answer at once.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from cli.argtypes import (  # noqa: E402
    fraction,
    non_negative,
    output_folder,
    policy_name,
    positive,
    program,
)
from cli.sweep import SweepError, run_points  # noqa: E402
from cli.sweep import add_arguments as add_sweep_arguments  # noqa: E402
from controller.stats import JSON_KEYS, format_interval, mean_ci, paired_ratio_ci  # noqa: E402
from netsched_data import BUNDLED  # noqa: E402
from simulator.__main__ import hpo_summary  # noqa: E402
from workloads.curves import sample_curves  # noqa: E402
from workloads.gpu import (  # noqa: E402
    GPU_POLICIES,
    GpuJob,
    GpuManager,
    add_gpu_policy_argument,
    gpu_policy_name,
    make_gpu_policy,
    run_time_sharing,
)
from workloads.hpo import generate  # noqa: E402
from workloads.yahpo import LcBench, YahpoError  # noqa: E402

GPU_ORDER = ["fifo", "rr", "slaq", "hermes"]
PAIRS = [("fair", "fifo"), ("fair", "hermes"), ("beamer", "fifo"), ("beamer", "hermes")]
# part 2's HPO tasks (besides --tasks of them)
CLUSTER = dict(configs_per_task=16, eta=4, min_iterations=10, models=("resnet50",))
BASELINE_PAIR = ("fair", "fifo")  # part 3's pairs are compared with it (always run, first)
FIELDS = [
    "part",
    "search",
    "hosts",
    "seed",
    "network",
    "gpu",
    "best_identified_s",
    "best_to_90pct_s",
    "hpo_completion_s",
    "avg_sct_s",
    "gpu_utilisation",
    "preemptions",
    "preemption_cost_s",
    "wall_s",
]


def compute_only(args, seed: int, gpu: str) -> dict:
    """Part 1: configurations that only compute, sharing the GPUs under ``gpu``."""
    rng = random.Random(seed)
    curves = sample_curves(rng, args.configs_alone, good_fraction=args.good_fraction, base_tau=40)
    jobs = [GpuJob(i, 1, 0.0, 200, 0.5, curve) for i, curve in enumerate(curves)]
    result = run_time_sharing(
        jobs, args.gpus_alone, make_gpu_policy(gpu), quantum_s=5.0, resume_cost_s=0.5
    )
    best = max(jobs, key=lambda j: j.curve.accuracy(j.iterations))
    return {
        "best_identified_s": result.best_identified_s,
        "best_to_90pct_s": best.reached_s.get(0.9),
        "hpo_completion_s": result.makespan_s,
        "avg_sct_s": None,
        "gpu_utilisation": result.gpu_utilisation,
        "preemptions": result.preemptions,
        "preemption_cost_s": result.preemption_cost_s,
    }


def simulated(args, seed: int, hosts: int, network: str, gpu: str, search: str, **workload):
    """Parts 2 and 3: one simulated HPO run under a (network, GPU) policy pair."""
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator
    from simulator.hpo import HpoDriver

    surrogate = args.surrogate if search == "yahpo-full" else None
    tasks = generate(
        hosts,
        seed=seed,
        search="full" if search == "yahpo-full" else search,
        good_fraction=args.good_fraction,
        surrogate=surrogate,
        **workload,
    )
    sim = Simulator(Fabric(hosts, 1e9), make_policy(network))
    manager = GpuManager(
        make_gpu_policy(gpu), hosts, args.gpus_per_host, args.quantum, args.resume_cost
    )
    driver = HpoDriver(sim, tasks, gpus=manager)
    sim.run()
    summary = hpo_summary(driver)
    winners = {
        row["task_id"]: row["best_config"]
        for row in driver.task_rows()
        if row["best_config"] is not None  # configuration 0 wins too
    }
    to_90 = [
        row["time_to_90pct_s"]
        for row in driver.config_rows()
        if winners.get(row["task_id"]) == row["config"]
    ]
    stats = summary["gpu"]
    return {
        "best_identified_s": summary["best_identified_s"].get("mean"),
        "best_to_90pct_s": statistics.mean([t for t in to_90 if t is not None] or [float("nan")]),
        "hpo_completion_s": summary["hpo_completion_s"].get("mean"),
        "avg_sct_s": summary["sct_s"].get("mean"),
        "gpu_utilisation": stats["gpu_utilisation"],
        "preemptions": stats["preemptions"],
        "preemption_cost_s": stats["preemption_cost_s"],
    }


def settings_of(args) -> dict:
    """What every run of this sweep depends on besides its own point (stored with each point, so
    that ``--resume`` never keeps a run made with other settings)."""
    return {
        "configs_alone": args.configs_alone,
        "gpus_alone": args.gpus_alone,
        "good_fraction": args.good_fraction,
        "gpus_per_host": args.gpus_per_host,
        "quantum": args.quantum,
        "resume_cost": args.resume_cost,
        "tasks": args.tasks,
        # the bundled surrogate as such: the same points wherever the package is installed
        "yahpo": args.yahpo if args.yahpo in (None, BUNDLED) else str(Path(args.yahpo).resolve()),
    }


def experiments(args) -> list[dict]:
    """Every run, as a sweep point: part, search, hosts, seed, network, GPU policy, settings."""
    settings = settings_of(args)

    def point(part, search, hosts, seed, network, gpu):
        return {"part": part, "search": search, "hosts": hosts, "seed": seed,
                "network": network, "gpu": gpu, "settings": settings}  # fmt: skip

    gpus = args.gpu_policy
    points = [point("compute", "full", 0, s, "-", g) for s in args.compute_seeds for g in gpus]
    searches = ("full", "halving") + (("yahpo-full",) if args.yahpo else ())
    points += [
        point("cluster", search, args.hosts, seed, "fair", gpu)
        for search in searches for seed in args.seeds for gpu in gpus
    ]  # fmt: skip
    points += [
        point("pairs", "halving", hosts, seed, network, gpu)
        for hosts in sorted({13, args.hosts}) for seed in args.seeds for network, gpu in args.pairs
    ]  # fmt: skip
    return points


def pair(text: str) -> tuple[str, str]:
    """An argparse type: ``NETWORK+GPU``, a network and a GPU policy (each a built-in's name,
    an entry point's or ``package.module:Class``), loaded now."""
    network, plus, gpu = text.rpartition("+")
    if not plus or not network or not gpu:
        raise argparse.ArgumentTypeError(f"expected NETWORK+GPU (e.g. beamer+hermes), got {text!r}")
    if gpu == "none":
        raise argparse.ArgumentTypeError(f"{text}: part 3 runs a GPU policy, not none")
    return policy_name(network), gpu_policy_name(gpu)


@functools.cache
def _surrogate(directory: str | None) -> LcBench | None:
    """The YAHPO LCBench surrogate, loaded once per process."""
    return None if directory is None else LcBench(directory)


def pair_tasks(hosts: int) -> int:
    """Part 3's HPO tasks on ``hosts`` hosts (the testbed's load: two per 13 hosts)."""
    return max(2, round(2 * hosts / 13))


def run_point(point: dict) -> dict:
    """One run (a sweep point, see cli.sweep): its row of ``gpu.csv``."""
    if point["part"] != "compute":
        from simulator.engine import warm_up

        warm_up()  # (not counted in wall_s)
    started = time.perf_counter()
    args = SimpleNamespace(**point["settings"])
    args.surrogate = _surrogate(args.yahpo)
    seed, hosts, gpu = point["seed"], point["hosts"], point["gpu"]
    if point["part"] == "compute":
        result = compute_only(args, seed, gpu)
    elif point["part"] == "cluster":
        result = simulated(args, seed, hosts, "fair", gpu, point["search"], n_tasks=args.tasks,
                           **CLUSTER)  # fmt: skip
    else:
        result = simulated(args, seed, hosts, point["network"], gpu, "halving",
                           n_tasks=pair_tasks(hosts))  # fmt: skip
    row = {key: point[key] for key in FIELDS[:6]}
    return {**row, **result, "wall_s": time.perf_counter() - started}


def describe(point: dict, row: dict) -> str:
    """A finished run's progress line."""
    label = label_of(point["part"], point["network"], point["gpu"])
    return (
        f"{point['part']:<8} {point['search']:<8} {point['hosts'] or '-':>5} {point['seed']:>4} "
        f"{label:<14} {fmt(row['best_identified_s']):>8} {fmt(row['best_to_90pct_s']):>8} "
        f"{fmt(row['hpo_completion_s']):>8} {fmt(row['avg_sct_s']):>8} "
        f"{fmt(row['gpu_utilisation'], '.0%'):>5} {row['preemptions']:>7}"
    )


def fmt(value, spec=".1f") -> str:
    """``value`` formatted, ``-`` if missing."""
    return "-" if value is None else format(value, spec)


def mean_of(rows, key):
    """Mean of ``key`` over the rows that have it (``None`` if none)."""
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.mean(values) if values else None


REPORTED = ("best_identified_s", "best_to_90pct_s", "hpo_completion_s")
PAIR_METRICS = ("avg_sct_s", "best_identified_s", "hpo_completion_s")


def half_width(rows, key) -> float | None:
    """Half the 95 % CI of ``key``'s mean over the rows' seeds (NaN for one seed)."""
    ci = mean_ci(r[key] for r in rows)
    return None if ci is None else ci.half_width


def interval(rows, key) -> str:
    """``mean +/- half`` of ``key`` over the rows' seeds."""
    return format_interval(mean_ci(r[key] for r in rows), 1)


def key_parts(key: str) -> tuple:
    """(part, search, hosts) of a summary key such as ``cluster/full/64``."""
    part, search, hosts = key.split("/")
    return part, search, 0 if hosts == "no-network" else int(hosts)


def pair_ratios(rows) -> dict:
    """Part 3: every pair's metrics relative to (fair, fifo) on the same hosts and seed."""
    out: dict = {}
    for hosts in sorted({r["hosts"] for r in rows if r["part"] == "pairs"}):
        groups = dict(grouped(rows, "pairs", "halving", hosts))
        base = groups.get("fair+fifo", [])
        out[hosts] = {}
        for label, group in groups.items():
            if label == "fair+fifo":
                continue
            out[hosts][label] = {}
            for key in PAIR_METRICS:
                ratio = paired_ratio_ci({r["seed"]: r[key] for r in group},
                                        {r["seed"]: r[key] for r in base})  # fmt: skip
                out[hosts][label][key] = {
                    **(dict.fromkeys(JSON_KEYS) if ratio is None else ratio.to_json()),
                    "text": format_interval(ratio, 2),
                }
    return out


def label_of(part: str, network: str, gpu: str) -> str:
    """A run's policy label: the GPU policy, or the (network, GPU) pair in part 3."""
    return f"{network}+{gpu}" if part == "pairs" else gpu


def grouped(rows, part, search=None, hosts=None):
    """(label, rows) per policy (pair) of one part, in the experiment's order."""
    groups: dict[str, list] = {}
    for r in rows:
        if (
            r["part"] == part
            and (search is None or r["search"] == search)
            and (hosts is None or r["hosts"] == hosts)
        ):
            groups.setdefault(label_of(part, r["network"], r["gpu"]), []).append(r)
    return list(groups.items())


def _save(fig, path: Path) -> Path:
    """Legend on the first panel, then write and close the figure."""
    fig.axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def height(value: float | None, reference: float | None = 1.0) -> float:
    """A bar's height, ``value / reference``: NaN where either is missing (no bar, where a bar
    of 0 would read as a measured 0)."""
    return math.nan if value is None or not reference else value / reference


def seeds_note(groups) -> str:
    """How many seeds a panel's bars are the mean of (no interval is drawn)."""
    counts = {len(group) for _, group in groups}
    if max(counts, default=1) < 2:
        return "one seed"
    low, high = min(counts), max(counts)
    return f"mean of {low if low == high else f'{low}-{high}'} seeds"


def policies_figure(rows, args):
    """Parts 1 and 2: every GPU policy's mean times over the seeds, a panel per setting, each
    titled by its workload."""
    cluster = (f"{args.hosts} hosts, {args.tasks} tasks of {CLUSTER['configs_per_task']} "
               f"{'/'.join(CLUSTER['models'])} configs")  # fmt: skip
    panels = [
        ("compute", "full", None,
         f"compute only: {args.configs_alone} configs on {args.gpus_alone} GPUs\nfull search"),
        ("cluster", "full", args.hosts, f"{cluster}\nfull search"),
        ("cluster", "halving", args.hosts, f"{cluster}\nsuccessive halving"),
    ]  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (part, search, hosts, title) in zip(axes, panels, strict=True):
        groups = grouped(rows, part, search, hosts)
        labels = [label for label, _ in groups]
        x = range(len(labels))
        for offset, (key, name, colour) in enumerate(
            [
                ("best_identified_s", "best identified", "tab:green"),
                ("best_to_90pct_s", "best reaches 90%", "tab:blue"),
                ("hpo_completion_s", "HPO completion", "tab:gray"),
            ]
        ):
            ax.bar(
                [i + (offset - 1) * 0.27 for i in x],
                [height(mean_of(g, key)) for _, g in groups],
                width=0.27,
                color=colour,
                label=name,
            )
        ax.set_xticks(list(x), labels)
        ax.set_title(f"{title}, {seeds_note(groups)}", fontsize=10)
        ax.set_ylabel("seconds")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"synthetic HPO workloads ({args.good_fraction:.0%} of configs good): GPU "
                 "time-sharing policies")  # fmt: skip
    return fig


def pairs_figure(rows, args):
    """Part 3: every (network, GPU) pair's mean times over the seeds relative to the first
    pair's (fair, fifo), a panel per cluster size, each titled by its workload."""
    hosts_list = sorted({13, args.hosts})
    fig, axes = plt.subplots(1, len(hosts_list), figsize=(6.5 * len(hosts_list), 3.8))
    axes = list(axes) if len(hosts_list) > 1 else [axes]
    for ax, hosts in zip(axes, hosts_list, strict=True):
        groups = grouped(rows, "pairs", hosts=hosts)
        base = {key: mean_of(groups[0][1], key) for key in FIELDS[6:10]}
        labels = [label for label, _ in groups]
        for offset, (key, name, colour) in enumerate(
            [
                ("avg_sct_s", "avg SCT", "tab:orange"),
                ("best_identified_s", "best identified", "tab:green"),
                ("hpo_completion_s", "HPO completion", "tab:gray"),
            ]
        ):
            ax.bar(
                [i + (offset - 1) * 0.27 for i in range(len(labels))],
                [height(mean_of(g, key), base[key]) for _, g in groups],
                width=0.27,
                color=colour,
                label=name,
            )
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_title(f"{hosts} hosts, {pair_tasks(hosts)} tasks of 9 configs, successive "
                     f"halving, {seeds_note(groups)}", fontsize=10)  # fmt: skip
        ax.set_ylabel(f"relative to {labels[0]}")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"synthetic HPO workloads ({args.good_fraction:.0%} of configs good): "
                 "network + GPU policy pairs")  # fmt: skip
    return fig


def plot(rows, out: Path, args) -> list[Path]:
    """The GPU policies' bars and the (network, GPU) pairs relative to (fair, fifo)."""
    return [
        _save(policies_figure(rows, args), out / "gpu_policies.png"),
        _save(pairs_figure(rows, args), out / "gpu_network_pairs.png"),
    ]


def build_parser() -> argparse.ArgumentParser:
    """``hpo-gpu-sweep``'s command line."""
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seeds", type=non_negative(int), nargs="+", default=[1, 2], help="default: 1 2"
    )
    parser.add_argument(
        "--hosts", type=positive(int), default=64, help="simulated cluster (default 64)"
    )
    parser.add_argument(
        "--tasks", type=positive(int), default=8, help="HPO tasks of part 2 (default 8)"
    )
    parser.add_argument(
        "--configs-alone", type=positive(int), default=64, help="part 1 configurations (64)"
    )
    parser.add_argument("--gpus-alone", type=positive(int), default=8, help="part 1 GPUs (8)")
    parser.add_argument(
        "--compute-seeds",
        type=non_negative(int),
        nargs="+",
        default=list(range(1, 11)),
        help="seeds of part 1 (default 1..10; it takes well under a second each)",
    )
    parser.add_argument(
        "--gpus-per-host",
        type=positive(int),
        default=2,
        help="GPUs per simulated host (default 2; with 1, jobs running at once never share a "
        "host, so the network policy hardly matters)",
    )
    parser.add_argument(
        "--good-fraction",
        type=fraction,
        default=0.1,
        help="share of good configurations (default 0.1)",
    )
    parser.add_argument("--quantum", type=positive(float), default=5.0, help="s (default 5)")
    parser.add_argument(
        "--resume-cost", type=non_negative(float), default=0.2, help="s (default 0.2)"
    )
    parser.add_argument(
        "--yahpo",
        nargs="?",
        const=BUNDLED,
        metavar="DIR",
        help="also run part 2's full search with YAHPO Gym LCBench curves (DIR holds lcbench/; "
        "without DIR, or 'bundled': the surrogate bundled with the package)",
    )
    add_gpu_policy_argument(parser, GPU_ORDER, f"GPU policies of parts 1 and 2 (default: "
                            f"{' '.join(GPU_ORDER)})", none=False)  # fmt: skip
    parser.add_argument(
        "--pairs",
        nargs="+",
        type=pair,
        default=PAIRS,
        metavar="NETWORK+GPU",
        help="(network, GPU) policy pairs of part 3, each policy named as --policy and "
        "--gpu-policy take them; fair+fifo, the baseline, always runs (default: "
        f"{' '.join('+'.join(p) for p in PAIRS)})",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default="results/gpu",
        help="output folder (default: results/gpu)",
    )
    add_sweep_arguments(parser)
    return parser


def main(argv=None) -> int:
    """Run the sweep, print and write its tables and figures; the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.resume_cost < args.quantum:
        parser.error("need 0 <= --resume-cost < --quantum")
    if args.hosts < 3:
        parser.error("--hosts must be at least 3 (jobs have 3 workers)")
    if "none" in args.gpu_policy:
        parser.error("--gpu-policy: every run of parts 1 and 2 time-shares under a policy; "
                     "none is not one")  # fmt: skip
    # (the baseline first: part 3's figure and ratios compare every pair with it)
    args.pairs = [BASELINE_PAIR, *dict.fromkeys(p for p in args.pairs if p != BASELINE_PAIR)]
    assert sorted(GPU_ORDER) == sorted(GPU_POLICIES)
    if args.yahpo is not None:
        try:
            _surrogate(settings_of(args)["yahpo"])  # a bad folder is named before the sweep
        except YahpoError as exc:
            parser.error(str(exc))
    args.out.mkdir(parents=True, exist_ok=True)
    runs = experiments(args)
    started = time.perf_counter()
    print(
        f"{len(runs)} runs\n{'part':<8} {'search':<8} {'hosts':>5} {'seed':>4} {'policy':<14} "
        f"{'best id':>8} {'to 90%':>8} {'HPO end':>8} {'avg SCT':>8} {'GPU':>5} {'preempt':>7}"
    )
    try:
        rows = run_points(
            runs, run_point, args.out / "points", args, label="runs", describe=describe,
            cost=lambda p: 0.1 if p["part"] == "compute" else p["hosts"],
        )  # fmt: skip
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with open(args.out / "gpu.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    summary = summarise_rows(rows)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print_summary(rows, summary)
    figures = plot(rows, args.out, args)
    print(f"\nwrote {args.out}/gpu.csv, summary.json, " + ", ".join(p.name for p in figures))
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


def summarise_rows(rows: list[dict]) -> dict:
    """``summary.json``: per part, search and cluster size each policy's means and 95 % CIs
    over the seeds, and the pairs' ratios to fair+fifo paired per seed."""
    summary = {}
    for part, search, hosts in sorted({(r["part"], r["search"], r["hosts"]) for r in rows}):
        key = f"{part}/{search}/{hosts or 'no-network'}"
        summary[key] = {
            label: {
                **{k: mean_of(group, k) for k in FIELDS[6:13]},
                "ci95": {k: half_width(group, k) for k in REPORTED},
                "seeds": len(group),
            }
            for label, group in grouped(rows, part, search, hosts)
        }
    summary["pairs_vs_fair_fifo"] = pair_ratios(rows)
    return summary


def print_summary(rows: list[dict], summary: dict) -> None:
    """:func:`summarise_rows`' intervals and ratios, on the terminal."""
    print("\nmean +/- 95 % CI over seeds (s): best identified / best at 90% / HPO completion")
    for key in summary:
        if key == "pairs_vs_fair_fifo":
            continue
        print(f"  {key}:")
        for label, group in grouped(rows, *key_parts(key)):
            cells = " / ".join(interval(group, k) for k in REPORTED)
            print(f"    {label:<14} {cells}  ({len(group)} seeds)")
    print("\npairs relative to fair+fifo, paired per seed (geometric mean [95 % CI]): "
          "avg SCT / best identified / HPO completion")  # fmt: skip
    for hosts, by_label in summary["pairs_vs_fair_fifo"].items():
        for label, ratios in by_label.items():
            cells = " / ".join(ratios[k]["text"] for k in PAIR_METRICS)
            print(f"  {hosts:>4} hosts {label:<14} {cells}")


if __name__ == "__main__":
    sys.exit(main())
