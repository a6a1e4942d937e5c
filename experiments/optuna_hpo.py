"""Optuna studies tuning on the cluster: trials are jobs, rungs are stages.

    .venv/bin/hpo-optuna [--backend simulator|testbed]
        [--pruner halving|hyperband] [--sampler tpe|random|cmaes|qmc|gp] [--trials 27]
        [--parallel 9] [--studies 1] [--policy beamer fair ...] [--gpu-policy none hermes ...]
        [--seed 1] [--baseline fair] [--storage URL] [--out DIR] [--no-plots]

Every study (one HPO task, :mod:`workloads.optuna_search`) asks its sampler for trials, trains
each as a job per rung of successive halving's plan, reports every rung's accuracy to the trial
and lets Optuna's own pruner decide whether it goes on. ``--backend simulator`` (default)
trains on the simulated cluster (``--link-gbps`` big switch, ``--hosts`` hosts, ``--workers``
GPUs per job, the model's real bytes and compute); ``--backend testbed`` (root, Open vSwitch)
trains the same trials as traffic-replay workers on the Mininet testbed
(``hpo-testbed``'s, links at ``--bw`` Mbit/s standing for ``--link-gbps``),
registered with the controller over REST, with the simulator's prediction beside each run.
The same studies run under each network policy (``--policy``) and GPU policy
(``--gpu-policy``), each from fresh studies with the same seeds, so the runs differ only by the
scheduling (both flags also take policies of one's own, ``package.module:Class`` or an entry
point's name, :mod:`controller.plugins`; a run is labelled by its policies' names). It prints,
per run, the stage and HPO metrics as ``hpo-sim hpo`` does
and a line with the best trial of each study, then a table over the seeds with ratios to
``--baseline``'s run (default: fair sharing's, else the first); ``--out`` gets the same result
files (stages, jobs, configs, tasks, coflows CSVs per run, ``summary.json``) plus
``trials-<run>.csv`` and Optuna's own plots of every study (:func:`experiments.optuna_study.
write_plots`; ``--no-plots`` skips them). The same seed gives the same trials, prunings and best
trial.

``--storage URL`` keeps every study in an Optuna storage (``sqlite:///studies.db``, any RDB URL,
or a JournalStorage file: ``journal:PATH`` or a path ending in ``.log``/``.jsonl``) under the
name ``<run>-study<k>-seed<s>``, for ``optuna-dashboard URL`` and ``optuna studies --storage URL``
(for a journal file give the CLI its path); a study of the same name already there is refused
before anything runs. Every run goes through :func:`experiments.optuna_study.run_study`, the
function to call from Python.

Curves: the YAHPO Gym LCBench surrogate with ``--yahpo [DIR]`` (without DIR the one bundled with
the package; the sampled hyper-parameters are an MLP's), else the synthetic response surface of
:class:`workloads.optuna_search.SyntheticSpace`.

Optuna, the policies and the simulator (numba's kernels) are imported once the command line is
read, so that ``--help`` and a bad flag answer at once.
"""

from __future__ import annotations

import argparse
import sys

from cli.argtypes import positive, program
from experiments.study_command import (
    add_backend_flags,
    add_cluster_flags,
    add_output_flags,
    add_policy_flags,
    checked,
    default_baseline,
    on_simulator,
    on_testbed,
    run_labels,
    seed_table,
    study_arguments,
)
from workloads.optuna_search import (
    PRUNERS,
    SAMPLERS,
    OptunaSetupError,
    check_new_studies,
    make_sampler,
    open_storage,
    study_name,
)

__all__ = ["build_parser", "default_baseline", "main", "seed_table"]


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n\n")[0])
    add_backend_flags(parser)
    _study_flags(parser)
    add_policy_flags(parser)
    add_cluster_flags(parser)
    add_output_flags(parser)
    parser.add_argument(
        "--no-plots",
        action="store_true",
        help="write no Optuna plots into --out (default: each study's history, intermediate "
        "values, parallel coordinates and parameter importances, as PNG)",
    )
    return parser


def _study_flags(parser: argparse.ArgumentParser) -> None:
    """Optuna's side: pruner, sampler, storage, trials and studies."""
    parser.add_argument(
        "--pruner",
        choices=PRUNERS,
        default="halving",
        help="Optuna pruner deciding the rungs (default: halving)",
    )
    parser.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default="tpe",
        help="Optuna's built-in sampler, seeded from --seed (default: tpe; cmaes needs the "
        "cmaes package, qmc scipy, gp torch and scipy)",
    )
    parser.add_argument(
        "--storage",
        metavar="URL",
        help="keep the studies in this Optuna storage: an RDB URL (sqlite:///studies.db) or a "
        "JournalStorage file (journal:PATH, or a path ending in .log or .jsonl); each study is "
        "named <run>-study<k>-seed<s> (default: in memory)",
    )
    parser.add_argument("--trials", type=positive(int), default=27, help="trials per study")
    parser.add_argument(
        "--parallel", type=positive(int), default=9, help="trials of a study training at once"
    )
    parser.add_argument("--studies", type=positive(int), default=1, help="concurrent studies")


def main(argv=None) -> int:
    """Run the studies under every policy; the exit status for the shell."""
    parser = build_parser()
    args = parser.parse_args(argv)
    space = checked(parser, args)
    import optuna

    from experiments.optuna_study import run_study, write_plots

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        make_sampler(args.sampler, 0)  # a missing package: said now, not after the first run
    except OptunaSetupError as exc:
        parser.error(f"--sampler: {exc}")
    storage = None
    if args.storage is not None:
        names = [study_name(label, k, seed) for seed in args.seed for label in run_labels(args)
                 for k in range(args.studies)]  # fmt: skip
        try:
            storage = open_storage(args.storage)
            check_new_studies(storage, names, args.storage)
        except OptunaSetupError as exc:
            parser.error(f"--storage: {exc}")

    def study(seed: int, name: str, gpu_policy: str, **more):
        return run_study(
            space, policy=name, gpu_policy=gpu_policy, seed=seed, sampler=args.sampler,
            pruner=args.pruner, storage=storage, **study_arguments(args), **more,
        )  # fmt: skip

    plots = None if args.no_plots else lambda run, folder: write_plots(run.studies, folder)
    if args.backend == "testbed":
        status = on_testbed(args, argv, study, plots, "optuna-testbed", parser.prog)
    else:
        status = on_simulator(args, argv, study, plots)
    if storage is not None and status == 0:
        print(f"studies in {args.storage} (optuna-dashboard {args.storage})")
    return status


if __name__ == "__main__":
    sys.exit(main())
