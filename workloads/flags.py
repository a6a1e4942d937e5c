"""The command-line flags of a seeded HPO workload (:func:`workloads.hpo.generate`), one
definition for ``hpo-sim hpo`` and ``hpo-testbed``, which differ only in their defaults."""

from __future__ import annotations

import argparse

from cli.argtypes import non_negative, number, positive
from workloads.hpo import MODEL_ZOO, PATTERNS, SEARCHES
from workloads.profiles import PROFILES

SEARCH_HELP = (
    "halving: synchronous successive halving (default); asha: the same rungs without a stage "
    "barrier; hyperband: brackets of halving from several first budgets; full: one stage, "
    "every configuration trained to the end"
)


def add_workload_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    tasks: int,
    min_iterations: int,
    patterns: tuple[str, ...],
    patterns_note: str = "",
) -> None:
    """``--tasks --configs --eta --search --min-iterations --workers --patterns --models
    --interarrival`` with these defaults (``patterns_note``: why the default patterns)."""
    parser.add_argument("--tasks", type=positive(int), default=tasks,
                        help=f"concurrent HPO tasks (default: {tasks})")  # fmt: skip
    parser.add_argument("--configs", type=positive(int), default=9,
                        help="configurations each task starts with (default: 9)")  # fmt: skip
    parser.add_argument("--eta", type=number(int, 2), default=3,
                        help="successive halving's reduction factor (default: 3)")  # fmt: skip
    parser.add_argument("--search", choices=SEARCHES, default="halving", help=SEARCH_HELP)
    parser.add_argument(
        "--min-iterations",
        type=positive(int),
        default=min_iterations,
        help=f"iterations of the first stage (default: {min_iterations}, each next stage eta "
        "times more)",
    )
    parser.add_argument("--workers", type=positive(int), default=3,
                        help="GPUs (hosts) per job (default: 3)")  # fmt: skip
    parser.add_argument(
        "--patterns",
        nargs="+",
        default=list(patterns),
        choices=PATTERNS,
        help=f"synchronisation patterns to draw from (default: {' '.join(patterns)}"
        f"{'; ' + patterns_note if patterns_note else ''})",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=list(MODEL_ZOO),
        choices=sorted(PROFILES),
        metavar="MODEL",
        help=f"model profiles the tasks draw from: {', '.join(sorted(PROFILES))} (default: the "
        f"zoo, {' '.join(MODEL_ZOO)}; one model makes every task's jobs alike)",
    )
    parser.add_argument(
        "--interarrival",
        type=non_negative(float),
        default=0.0,
        metavar="SECONDS",
        help="tasks arrive as a Poisson process of this mean gap (default 0: all at the start)",
    )
