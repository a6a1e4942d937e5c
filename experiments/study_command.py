"""What ``hpo-optuna`` and ``hpo-tune`` share: the flags of the cluster, the policies and the
backends, the loop over seeds and policies in the simulator and on the testbed, and the table
over the seeds. A command supplies ``study(seed, policy, gpu_policy, **more) -> StudyRun``
(:func:`experiments.optuna_study.run_study`, :func:`experiments.tune_study.run_tune`).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

from cli.argtypes import (
    POLICY_NAMES,
    number,
    output_folder,
    policy_help,
    policy_name,
    positive,
)
from controller.stats import format_interval, mean_ci, paired_ratio_ci
from netsched_data import BUNDLED
from simulator.__main__ import run_label
from simulator.metrics import provenance, write_csv, write_json
from workloads.gpu import add_gpu_policy_argument
from workloads.hpo import PATTERNS
from workloads.optuna_search import BACKENDS, LcBenchSpace
from workloads.profiles import PROFILES
from workloads.yahpo import LcBench, YahpoError

BASELINE = "fair"
# a study of one seed under one (network, GPU) policy pair: StudyRun
Study = Callable[..., object]
# the plots of a run's studies into a folder; a note per plot left out
Plots = Callable[[object, Path], list[str]]


def add_backend_flags(parser: argparse.ArgumentParser) -> None:
    """Where the trials train, and the testbed's link rate and timeout."""
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="simulator",
        help="where the trials train: the simulator (default) or the Mininet testbed (root)",
    )
    parser.add_argument(
        "--bw", type=positive(float), default=20, help="testbed link Mbit/s (default 20)"
    )
    parser.add_argument(
        "--timeout", type=positive(float), default=1800, help="testbed run timeout s"
    )


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    """The LCBench curves, the results folder."""
    parser.add_argument(
        "--yahpo",
        nargs="?",
        const=BUNDLED,
        metavar="DIR",
        help="LCBench curves from the YAHPO Gym surrogate in DIR (holding lcbench/; without DIR, "
        "or 'bundled': the one bundled with the package)",
    )
    parser.add_argument(
        "--yahpo-task", default="3945", help="LCBench task of the surrogate (default: 3945)"
    )
    parser.add_argument("--out", type=output_folder, help="folder for CSV/JSON results")


def add_policy_flags(parser: argparse.ArgumentParser) -> None:
    """The policies each study runs under, its seeds and the baseline."""
    parser.add_argument(
        "--policy",
        nargs="+",
        default=["beamer", "fair"],
        type=policy_name,
        metavar="POLICY",
        help=f"network policies, a study each: {policy_help(POLICY_NAMES)}; a run is labelled by "
        "its policy's name (default: beamer fair)",
    )
    add_gpu_policy_argument(parser, ["none"], "GPU time-sharing policies, each with every "
                            "--policy (default: none)")  # fmt: skip
    parser.add_argument(
        "--seed", type=number(int, 0), nargs="+", default=[1], help="one run per seed"
    )
    parser.add_argument(
        "--baseline",
        help="the run the others are compared with (default: fair sharing's, with the first "
        "--gpu-policy; the first run if --policy has no fair)",
    )


def add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    """The cluster the trials train on and what every trial trains."""
    parser.add_argument(
        "--hosts", type=number(int, 2), default=13, help="hosts of the cluster (default: 13)"
    )
    parser.add_argument("--workers", type=positive(int), default=3, help="GPUs (hosts) per job")
    parser.add_argument(
        "--eta", type=number(int, 2), default=3, help="reduction factor of the rungs (default: 3)"
    )
    parser.add_argument(
        "--min-iterations", type=positive(int), default=10, help="iterations of the first rung"
    )
    parser.add_argument(
        "--model",
        choices=sorted(PROFILES),
        default="resnet50",
        help="model profile of every trial (default: resnet50)",
    )
    parser.add_argument(
        "--pattern",
        choices=PATTERNS,
        default="ring",
        help="synchronisation pattern (default: ring)",
    )
    parser.add_argument(
        "--link-gbps",
        type=positive(float),
        default=1.0,
        help="host link rate in Gbit/s (default: 1)",
    )
    parser.add_argument(
        "--gpus-per-host",
        type=positive(int),
        default=1,
        help="GPUs per host under a GPU policy (default: 1)",
    )
    parser.add_argument(
        "--quantum",
        type=positive(float),
        default=5.0,
        help="GPU time-sharing quantum in s (default: 5)",
    )


def default_baseline(policies: list[str], gpu_policies: list[str]) -> str:
    """The run compared with by default: fair sharing's with the first GPU policy, as in the
    sweeps, or the first run if fair is not among ``policies``."""
    network = BASELINE if BASELINE in policies else policies[0]
    return run_label(network, gpu_policies[0])


def checked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> LcBenchSpace | None:
    """Check what the shared flags say together (a bad one ends the command with one line):
    the baseline is one of the runs (default :func:`default_baseline`); the LCBench space
    with ``--yahpo``, else ``None``."""
    if args.workers > args.hosts:
        parser.error(f"--workers ({args.workers}) exceed --hosts ({args.hosts})")
    labels = run_labels(args)
    if args.baseline is not None and args.baseline not in labels:
        parser.error(f"--baseline {args.baseline} is not one of the runs ({', '.join(labels)})")
    args.baseline = args.baseline or default_baseline(args.policy, args.gpu_policy)
    if args.yahpo is None:
        return None
    try:
        return LcBenchSpace(LcBench(args.yahpo, args.yahpo_task))
    except YahpoError as exc:
        parser.error(f"--yahpo: {exc}")


def run_labels(args: argparse.Namespace) -> list[str]:
    """Every run's label: each network policy with each GPU policy."""
    return [run_label(name, gpu) for name in args.policy for gpu in args.gpu_policy]


def study_arguments(args: argparse.Namespace) -> dict:
    """The keyword arguments of a study function (``run_study``, ``run_tune``) the shared flags
    give: the backend, cluster, workload and trials."""
    return dict(
        backend=args.backend, n_trials=args.trials, parallel=args.parallel,
        studies=args.studies, hosts=args.hosts, workers=args.workers, eta=args.eta,
        min_iterations=args.min_iterations, model=args.model, pattern=args.pattern,
        link_bps=args.link_gbps * 1e9, gpus_per_host=args.gpus_per_host, quantum=args.quantum,
    )  # fmt: skip


def on_simulator(args: argparse.Namespace, argv, study: Study, plots: Plots | None) -> int:
    """Every seed's and (network, GPU) policy's run in the simulator, a line each, then the
    seed table; ``--out`` gets each run's CSVs, ``plots`` of its studies and ``summary.json``.
    The exit status."""
    from simulator.engine import warm_up

    summary = {"provenance": provenance(argv), "settings": vars(args) | {"out": str(args.out)}}
    summary["settings"]["yahpo"] = str(args.yahpo) if args.yahpo else None
    summary["runs"] = {}
    warm_up()
    print(
        f"{'run':<17} {'seed':>4} {'avg SCT s':>10} {'SCT/bound':>10} {'HPO end s':>10} "
        f"{'best at s':>10} {'trials':>6} {'pruned':>6} {'wall s':>7}"
    )
    notes: list[str] = []
    for seed in args.seed:
        for name in args.policy:
            for gpu_policy in args.gpu_policy:
                run = study(seed, name, gpu_policy)
                result, label = run.result, run.label
                summary["runs"].setdefault(label, []).append(result)
                found = [b["found_s"] for b in run.best.values() if b is not None]
                print(
                    f"{label:<17} {seed:>4} {result['sct_s']['mean']:>10.3f} "
                    f"{result['sct_over_bound']:>10.3f} "
                    f"{result['hpo_completion_s']['mean']:>10.2f} "
                    f"{_fmt(sum(found) / len(found) if found else None):>10} "
                    f"{result['trials']:>6} {result['pruned']:>6} {run.wall_s:>7.1f}",
                    flush=True,
                )
                _print_best(run.best)
                if args.out:
                    folder = args.out / f"seed-{seed}"
                    for table, rows in run.rows.items():
                        write_csv(folder / f"{table}-{label}.csv", rows)
                    if plots is not None:
                        notes += plots(run, folder / "plots")
    summary["table"] = seed_table(summary["runs"], args.baseline)
    print_table(summary["table"], args.baseline, len(args.seed))
    _print_notes(notes)
    if args.out:
        write_json(args.out / "summary.json", summary)
        print(f"results in {args.out}/")
    return 0


def _study_means(result: dict, key: str) -> float | None:
    """The mean over a run's studies of their best trial's ``key`` (None if none completed)."""
    values = [b[key] for b in result["best_trial"].values() if b is not None]
    return sum(values) / len(values) if values else None


def seed_table(runs: dict[str, list[dict]], baseline: str) -> dict[str, dict]:
    """Per run label, over the seeds: HPO completion, when each study's best trial completed
    and its accuracy (means over the studies), each as mean and 95 % interval, and the first
    two as ratios to ``baseline``'s, paired per seed (geometric mean and interval)."""
    metrics = {
        "hpo_completion_s": lambda r: r["hpo_completion_s"]["mean"],
        "best_found_s": lambda r: _study_means(r, "found_s"),
        "best_accuracy": lambda r: _study_means(r, "value"),
    }
    table = {}
    for label, results in runs.items():
        row = {}
        for key, get in metrics.items():
            values = {r["seed"]: get(r) for r in results}
            base = {r["seed"]: get(r) for r in runs.get(baseline, [])}
            ci = mean_ci(values.values())
            row[key] = None if ci is None else ci.to_json()
            if key != "best_accuracy":
                ratio = paired_ratio_ci(values, base)
                row[f"{key}_vs_baseline"] = None if ratio is None else ratio.to_json()
        table[label] = row
    return table


def print_table(table: dict[str, dict], baseline: str, n_seeds: int) -> None:
    """The seed table, one line per run."""
    print(f"\nover {n_seeds} seed(s), mean +/- 95 % CI; ratios to {baseline}'s paired per seed")
    print(f"{'run':<17} {'HPO end s':>18} {'x':>22} {'best trial at s':>18} {'x':>22} "
          f"{'best accuracy':>16}")  # fmt: skip
    for label, row in table.items():
        cells = []
        for key in ("hpo_completion_s", "best_found_s"):
            cells.append(format_interval(row[key], 1))
            cells.append(format_interval(row[f"{key}_vs_baseline"], 3))
        print(f"{label:<17} {cells[0]:>18} {cells[1]:>22} {cells[2]:>18} {cells[3]:>22} "
              f"{format_interval(row['best_accuracy'], 4):>16}")  # fmt: skip


def on_testbed(
    args: argparse.Namespace, argv, study: Study, plots: Plots | None, default_out: str,
    prog: str,
) -> int:  # fmt: skip
    """Every seed's and (network, GPU) policy's run of the same fresh studies on the Mininet
    testbed, as ``hpo-testbed`` runs one (its files in ``<out>/<run>/seed-<k>/``, default
    ``results/<default_out>``), plus each run's ``trials.csv``, ``plots`` of its studies and
    best trials, and the seed table; the exit status. ``study(seed, policy, gpu_policy,
    **more)`` runs one; ``prog`` names the command in an error."""
    from experiments.testbed_network import network  # Mininet: only on this path

    out = args.out or Path("results") / default_out
    summary = {"provenance": provenance(argv), "settings": {**vars(args), "out": str(out)}}
    summary["settings"]["yahpo"] = str(args.yahpo) if args.yahpo else None
    summary["runs"] = {}
    notes: list[str] = []
    try:
        with network.testbed_lock():
            for seed, name, gpu_policy in itertools.product(
                args.seed, args.policy, args.gpu_policy
            ):
                label = run_label(name, gpu_policy)
                run_dir = out / label / f"seed-{seed}"
                print(f"== {label}, seed {seed}", flush=True)
                run = study(seed, name, gpu_policy, out=run_dir,
                            emulated_link_bps=args.bw * 1e6, timeout=args.timeout)  # fmt: skip
                result = run.result
                write_csv(run_dir / "trials.csv", run.rows["trials"])
                if plots is not None:
                    notes += plots(run, run_dir / "plots")
                summary["runs"].setdefault(label, []).append({
                    "seed": seed,
                    "avg_sct_s": result["sct_s"]["mean"],
                    "hpo_completion_s": result["hpo_completion_s"],
                    "simulated_hpo_completion_s": result["simulated"]["hpo_completion_s"],
                    "trials": result["trials"],
                    "pruned": result["pruned"],
                    "best_trial": run.best,
                })  # fmt: skip
                print(
                    f"{label}, seed {seed}: avg SCT {result['sct_s']['mean']:.2f} s, HPO end "
                    f"{result['hpo_completion_s']['mean']:.2f} s (simulator "
                    f"{result['simulated']['hpo_completion_s']['mean']:.2f} s)"
                )
                _print_best(run.best)
    except (network.TestbedBusy, network.NamesTaken) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    summary["table"] = seed_table(summary["runs"], args.baseline)
    print_table(summary["table"], args.baseline, len(args.seed))
    _print_notes(notes)
    write_json(out / "summary.json", summary)
    print(f"results in {out}/")
    return 0


def _print_notes(notes: list[str]) -> None:
    """A line per kind of plot left out (``write_plots``' notes), however many studies."""
    studies: dict[str, list[str]] = {}
    for note in notes:
        name, _, what = note.partition(": ")
        studies.setdefault(what, []).append(name)
    for what, names in studies.items():
        which = names[0] if len(names) == 1 else f"{len(names)} studies, e.g. {names[0]}"
        print(f"note: {what}: {which}")


def _print_best(best: dict) -> None:
    """A line per study with its best trial."""
    for task_id, trial in best.items():
        if trial is None:
            print(f"  study {task_id}: best trial: none completed (all pruned)")
            continue
        params = ", ".join(f"{k}={v:.4g}" for k, v in sorted(trial["params"].items()))
        print(
            f"  study {task_id}: best trial #{trial['trial']} accuracy {trial['value']:.4f} "
            f"at {trial['found_s']:.1f} s ({params})"
        )


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"
