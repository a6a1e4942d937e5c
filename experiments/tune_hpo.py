"""Ray Tune studies tuning on the cluster: trials are jobs, rungs are stages.

    .venv/bin/hpo-tune [--backend simulator|testbed] [--scheduler asha|hyperband]
        [--searcher random|optuna] [--trials 27] [--parallel 9] [--studies 1]
        [--policy beamer fair ...] [--gpu-policy none hermes ...] [--seed 1] [--baseline fair]
        [--out DIR]

Every study (one HPO task, :mod:`workloads.tune_search`) is a Tune ``Tuner`` whose trials
train on the cluster: each trial samples its hyper-parameters with Tune's searcher, trains a
job per rung of successive halving's plan, reports every rung's accuracy with ``tune.report``,
and Tune's scheduler (``ASHAScheduler`` or ``HyperBandScheduler``, their milestones on the
rungs' ends) decides whether it goes on, stops or pauses. The cluster's clock waits while Tune
decides, so a seed gives the same trials, stops and best trial in the simulator.
``--backend simulator`` (default) trains on the simulated cluster (``--link-gbps`` big
switch, ``--hosts`` hosts, ``--workers`` GPUs per job); ``--backend testbed`` (root, Open
vSwitch) trains the same trials as traffic-replay workers on the Mininet testbed, registered
with the controller over REST, with the simulator's prediction (fresh studies, same seed)
beside each run. The same studies run under each network policy (``--policy``) and GPU policy
(``--gpu-policy``), each from fresh studies with the same seeds.

It prints, per run, the stage and HPO metrics and each study's best trial, then a table over
the seeds with ratios to ``--baseline``'s run (default: fair sharing's); ``--out`` gets the
result files of ``hpo-optuna`` (stages, jobs, configs, tasks, coflows and trials CSVs per run,
``summary.json``; a trial's state is ``COMPLETE``, ``STOPPED`` by the scheduler or ``PAUSED``)
and Tune's own experiment folders (``tune/<run>-study<k>-seed<s>``, readable with
``tune.Tuner.restore`` or TensorBoard). Every run goes through
:func:`experiments.tune_study.run_tune`, the function to call from Python with a search space
and a scheduler or searcher of one's own.

Curves: the YAHPO Gym LCBench surrogate with ``--yahpo [DIR]`` (the MLP's seven
hyper-parameters as Tune's search space), else the synthetic response surface of
:class:`workloads.optuna_search.SyntheticSpace`.

Ray, Tune and the simulator are imported once the command line is read, so that ``--help``
and a bad flag answer at once.
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
    on_simulator,
    on_testbed,
    study_arguments,
)
from workloads.tune_search import SCHEDULERS, SEARCHERS


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n\n")[0])
    add_backend_flags(parser)
    parser.add_argument(
        "--scheduler",
        choices=SCHEDULERS,
        default="asha",
        help="Tune's trial scheduler, its milestones on the rungs (default: asha)",
    )
    parser.add_argument(
        "--searcher",
        choices=SEARCHERS,
        default="random",
        help="Tune's searcher, seeded from --seed: random (Tune's random search) or optuna "
        "(Tune's OptunaSearch with TPE) (default: random)",
    )
    parser.add_argument("--trials", type=positive(int), default=27, help="trials per study")
    parser.add_argument(
        "--parallel", type=positive(int), default=9, help="trials of a study training at once"
    )
    parser.add_argument("--studies", type=positive(int), default=1, help="concurrent studies")
    add_policy_flags(parser)
    add_cluster_flags(parser)
    add_output_flags(parser)
    return parser


def main(argv=None) -> int:
    """Run the studies under every policy; the exit status for the shell."""
    parser = build_parser()
    args = parser.parse_args(argv)
    lcbench = checked(parser, args)
    from experiments.tune_study import run_tune
    from workloads.tune_search import lcbench_space

    space = curve = None
    if lcbench is not None:
        space, curve = lcbench_space(lcbench), lcbench.curve

    def study(seed: int, name: str, gpu_policy: str, **more):
        out = more.pop("out", None)
        if out is None and args.out is not None:
            out = args.out / f"seed-{seed}"
        return run_tune(
            space, curve, policy=name, gpu_policy=gpu_policy, seed=seed,
            scheduler=args.scheduler, searcher=args.searcher, out=out,
            **study_arguments(args), **more,
        )  # fmt: skip

    if args.backend == "testbed":
        return on_testbed(args, argv, study, None, "tune-testbed", parser.prog)
    return on_simulator(args, argv, study, None)


if __name__ == "__main__":
    sys.exit(main())
