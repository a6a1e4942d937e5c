"""Optuna studies tuning on the cluster: trials are jobs, rungs are stages.

    .venv/bin/python scripts/optuna_hpo.py [--backend simulator|testbed]
        [--pruner halving|hyperband] [--sampler tpe|random] [--trials 27] [--parallel 9]
        [--studies 1] [--policy beamer fair ...] [--gpu-policy none hermes ...] [--seed 1]
        [--out DIR]

Every study (one HPO task, :mod:`workloads.optuna_search`) asks its sampler for trials, trains
each as a job per rung of successive halving's plan, reports every rung's accuracy to the trial
and lets Optuna's own pruner decide whether it goes on. ``--backend simulator`` (default)
trains on the simulated cluster (``--link-gbps`` big switch, ``--hosts`` hosts, ``--workers``
GPUs per job, the model's real bytes and compute); ``--backend testbed`` (root, Open vSwitch)
trains the same trials as traffic-replay workers on the Mininet testbed
(``scripts/run_testbed.py``'s, links at ``--bw`` Mbit/s standing for ``--link-gbps``),
registered with the controller over REST, with the simulator's prediction beside each run.
The same studies run under each network policy (``--policy``) and GPU policy
(``--gpu-policy``), each from fresh studies with the same seeds, so the runs differ only by the
scheduling (both flags also take policies of one's own, ``package.module:Class`` or an entry
point's name, :mod:`controller.plugins`; a run is labelled by its policies' names). It prints,
per run, the stage and HPO metrics as ``python -m simulator hpo`` does
and a line with the best trial of each study; ``--out`` gets the same result files (stages,
jobs, configs, tasks, coflows CSVs per run, ``summary.json``) plus ``trials-<run>.csv``. The
same seed gives the same trials, prunings and best trial.

Curves: the YAHPO Gym LCBench surrogate with ``--yahpo [DIR]`` (without DIR the one bundled with
the package; the sampled hyper-parameters are an MLP's), else the synthetic response surface of
:class:`workloads.optuna_search.SyntheticSpace`.

Optuna, the policies and the simulator (numba's kernels) are imported once the command line is
read, so that ``--help`` and a bad flag answer at once.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import sys
import time
from pathlib import Path

from cli.argtypes import (
    POLICY_NAMES,
    number,
    output_folder,
    policy_help,
    policy_name,
    positive,
    program,
)
from controller.metrics import mean_ci, paired_ratio_ci
from netsched_data import BUNDLED
from simulator.__main__ import run_label
from simulator.metrics import coflow_rows, provenance, write_csv, write_json
from workloads.gpu import (
    GPU_POLICIES,
    GpuManager,
    gpu_policy_name,
    make_gpu_policy,
)
from workloads.hpo import PATTERNS
from workloads.optuna_search import (
    PRUNERS,
    SAMPLERS,
    LcBenchSpace,
    best_trial,
    optuna_tasks,
    trial_rows,
)
from workloads.profiles import PROFILES
from workloads.yahpo import LcBench, YahpoError

BACKENDS = ("simulator", "testbed")


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n\n")[0])
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
    parser.add_argument(
        "--pruner",
        choices=PRUNERS,
        default="halving",
        help="Optuna pruner deciding the rungs (default: halving)",
    )
    parser.add_argument(
        "--sampler", choices=SAMPLERS, default="tpe", help="Optuna sampler (default: tpe)"
    )
    parser.add_argument("--trials", type=positive(int), default=27, help="trials per study")
    parser.add_argument(
        "--parallel", type=positive(int), default=9, help="trials of a study training at once"
    )
    parser.add_argument("--studies", type=positive(int), default=1, help="concurrent studies")
    parser.add_argument(
        "--policy",
        nargs="+",
        default=["beamer", "fair"],
        type=policy_name,
        metavar="POLICY",
        help=f"network policies, a study each: {policy_help(POLICY_NAMES)}; a run is labelled by "
        "its policy's name (default: beamer fair)",
    )
    parser.add_argument(
        "--gpu-policy",
        nargs="+",
        default=["none"],
        type=gpu_policy_name,
        metavar="GPU_POLICY",
        help=f"GPU time-sharing policies, each with every --policy: none, "
        f"{policy_help(GPU_POLICIES)} (default: none)",
    )
    parser.add_argument(
        "--seed", type=number(int, 0), nargs="+", default=[1], help="one run per seed"
    )
    parser.add_argument(
        "--baseline", help="the run the others are compared with (default: the first)"
    )
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
    return parser


def main(argv=None) -> int:
    """Run the studies under every policy; the exit status for the shell."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.workers > args.hosts:
        parser.error(f"--workers ({args.workers}) exceed --hosts ({args.hosts})")
    space = None
    if args.yahpo is not None:
        try:
            space = LcBenchSpace(LcBench(args.yahpo, args.yahpo_task))
        except YahpoError as exc:
            parser.error(f"--yahpo: {exc}")
    import optuna

    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator, warm_up
    from simulator.hpo import HpoDriver

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def studies(seed: int, link_scale: float = 1.0):
        return optuna_tasks(
            args.studies, seed, args.hosts, args.trials, args.parallel, args.pruner,
            args.sampler, args.eta, args.min_iterations, args.workers,
            PROFILES[args.model].with_bytes_divided_by(link_scale), args.pattern, space,
        )  # fmt: skip

    labels = [run_label(name, gpu) for name in args.policy for gpu in args.gpu_policy]
    if args.baseline is not None and args.baseline not in labels:
        parser.error(f"--baseline {args.baseline} is not one of the runs ({', '.join(labels)})")
    if args.backend == "testbed":
        return on_testbed(args, argv, studies)

    fabric = Fabric(args.hosts, args.link_gbps * 1e9)
    summary = {"provenance": provenance(argv), "settings": vars(args) | {"out": str(args.out)}}
    summary["settings"]["yahpo"] = str(args.yahpo) if args.yahpo else None
    summary["runs"] = {}
    warm_up()
    print(
        f"{'run':<17} {'seed':>4} {'avg SCT s':>10} {'SCT/bound':>10} {'HPO end s':>10} "
        f"{'best at s':>10} {'trials':>6} {'pruned':>6} {'wall s':>7}"
    )
    for seed in args.seed:
        for name in args.policy:
            for gpu_policy in args.gpu_policy:
                label = run_label(name, gpu_policy)
                sim = Simulator(fabric, make_policy(name))
                gpus = None
                if gpu_policy != "none":
                    gpus = GpuManager(make_gpu_policy(gpu_policy), args.hosts,
                                      args.gpus_per_host, args.quantum, 0.0)  # fmt: skip
                tasks = studies(seed)
                driver = HpoDriver(sim, tasks, gpus=gpus)
                started = time.perf_counter()
                sim.run()
                wall = time.perf_counter() - started
                result = driver.core.summary(sim.now_s)
                trials = [row for task in tasks for row in trial_rows(task)]
                jobs = driver.job_rows()
                best = {task.task_id: best_trial(task, jobs) for task in tasks}
                result.update(
                    seed=seed, wall_s=wall, trials=len(trials), best_trial=best,
                    pruned=sum(row["state"] == "PRUNED" for row in trials),
                )  # fmt: skip
                summary["runs"].setdefault(label, []).append(result)
                found = [b["found_s"] for b in best.values() if b is not None]
                print(
                    f"{label:<17} {seed:>4} {result['sct_s']['mean']:>10.3f} "
                    f"{result['sct_over_bound']:>10.3f} "
                    f"{result['hpo_completion_s']['mean']:>10.2f} "
                    f"{_fmt(sum(found) / len(found) if found else None):>10} {len(trials):>6} "
                    f"{result['pruned']:>6} {wall:>7.1f}",
                    flush=True,
                )
                _print_best(best)
                if args.out:
                    folder = args.out / f"seed-{seed}"
                    write_csv(folder / f"stages-{label}.csv", driver.stage_rows())
                    write_csv(folder / f"jobs-{label}.csv", jobs)
                    write_csv(folder / f"configs-{label}.csv", driver.config_rows())
                    write_csv(folder / f"tasks-{label}.csv", driver.task_rows())
                    write_csv(folder / f"coflows-{label}.csv", coflow_rows(sim))
                    write_csv(folder / f"trials-{label}.csv", trials)
    summary["table"] = seed_table(summary["runs"], args.baseline or labels[0])
    print_table(summary["table"], args.baseline or labels[0], len(args.seed))
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
            row[key] = None if ci is None else {"mean": ci.mean, "ci95": ci.half_width, "n": ci.n}
            if key != "best_accuracy":
                ratio = paired_ratio_ci(values, base)
                row[f"{key}_vs_baseline"] = None if ratio is None else {
                    "mean": ratio.mean, "low": ratio.low, "high": ratio.high}  # fmt: skip
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
            cells.append(_interval(row[key]))
            cells.append(_ratio(row[f"{key}_vs_baseline"]))
        print(f"{label:<17} {cells[0]:>18} {cells[1]:>22} {cells[2]:>18} {cells[3]:>22} "
              f"{_interval(row['best_accuracy'], 4):>16}")  # fmt: skip


def _interval(entry: dict | None, digits: int = 1) -> str:
    if entry is None:
        return "-"
    return f"{entry['mean']:.{digits}f} +/- {entry['ci95']:.{digits}f}"


def _ratio(entry: dict | None) -> str:
    if entry is None:
        return "-"
    return f"{entry['mean']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"


class StudiesMade:
    """Fresh studies for each use of a testbed run (``run_testbed.Tasks``), keeping the last
    ones the testbed trained (a failed attempt's are replaced by the next attempt's)."""

    def __init__(self, studies, seed: int, link_scale: float) -> None:
        self.studies = studies
        self.seed = seed
        self.link_scale = link_scale
        self.testbed: list = []

    def __call__(self, use: str) -> list:
        """Fresh studies for ``use`` (``"testbed"`` or ``"prediction"``)."""
        tasks = self.studies(self.seed, self.link_scale)
        if use == "testbed":
            self.testbed = tasks
        return tasks


def on_testbed(args, argv, studies) -> int:
    """Every seed's and (network, GPU) policy's run of the same fresh studies on the Mininet
    testbed, as ``scripts/run_testbed.py`` runs one (its files in ``<out>/<run>/seed-<k>/``),
    plus each run's ``trials.csv`` and best trials, and the seed table; the exit status."""
    from experiments import run_testbed  # Mininet and the controller: only on this path

    out = args.out or Path("results") / "optuna-testbed"
    testbed_argv = [
        "--hosts", str(args.hosts), "--workers", str(args.workers), "--eta", str(args.eta),
        "--min-iterations", str(args.min_iterations), "--link-gbps", str(args.link_gbps),
        "--bw", str(args.bw), "--timeout", str(args.timeout),
        "--gpus-per-host", str(args.gpus_per_host), "--quantum", str(args.quantum),
        "--out", str(out),
    ]  # fmt: skip
    testbed = run_testbed.parse(run_testbed.build_parser(), testbed_argv)
    summary = {"provenance": provenance(argv), "settings": {**vars(args), "out": str(out)}}
    summary["settings"]["yahpo"] = str(args.yahpo) if args.yahpo else None
    summary["runs"] = {}
    try:
        with run_testbed.network.testbed_lock():
            for seed, name, gpu_policy in itertools.product(
                args.seed, args.policy, args.gpu_policy
            ):
                label = run_label(name, gpu_policy)
                run_dir = out / label / f"seed-{seed}"
                testbed.seed = seed
                made = StudiesMade(studies, seed, testbed.link_scale)
                print(f"== {label}, seed {seed}", flush=True)
                result, _ = run_testbed.run_with_retries(
                    name, testbed, run_dir, gpu_policy, tasks=made
                )
                trials = [row for task in made.testbed for row in trial_rows(task)]
                write_csv(run_dir / "trials.csv", trials)
                jobs = read_rows(run_dir / "jobs.csv")
                best = {task.task_id: best_trial(task, jobs) for task in made.testbed}
                summary["runs"].setdefault(label, []).append({
                    "seed": seed,
                    "avg_sct_s": result["sct_s"]["mean"],
                    "hpo_completion_s": result["hpo_completion_s"],
                    "simulated_hpo_completion_s": result["simulated"]["hpo_completion_s"],
                    "trials": len(trials),
                    "pruned": sum(row["state"] == "PRUNED" for row in trials),
                    "best_trial": best,
                })  # fmt: skip
                print(
                    f"{label}, seed {seed}: avg SCT {result['sct_s']['mean']:.2f} s, HPO end "
                    f"{result['hpo_completion_s']['mean']:.2f} s (simulator "
                    f"{result['simulated']['hpo_completion_s']['mean']:.2f} s)"
                )
                _print_best(best)
    except (run_testbed.network.TestbedBusy, run_testbed.network.NamesTaken) as exc:
        print(f"optuna_hpo.py: error: {exc}", file=sys.stderr)
        return 1
    labels = list(summary["runs"])
    summary["table"] = seed_table(summary["runs"], args.baseline or labels[0])
    print_table(summary["table"], args.baseline or labels[0], len(args.seed))
    write_json(out / "summary.json", summary)
    print(f"results in {out}/")
    return 0


def read_rows(path: Path) -> list[dict]:
    """A CSV file's rows."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


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


if __name__ == "__main__":
    sys.exit(main())
