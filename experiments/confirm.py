"""The testbed's confirmation of a claim's map.

A claim's map (:mod:`experiments.claims`) is drawn by the simulator at its own size. The testbed
confirms it at the testbed's size: the simulator first maps the claim's testbed-size grid
(:data:`experiments.claims.TESTBED_MAPS`, a few seconds), then the testbed runs two of its
cells over :data:`SEEDS` seeds, each policy on the same seeds:

- the cell where the simulator predicts the largest effect: the largest mean absolute
  log-ratio of the default reading to its baselines (every baseline counted, whatever its
  verdict);
- the cell where it predicts no effect: a cell judged equivalent against every baseline if
  there is one, else the cell whose mean absolute log-ratio is smallest (the closest to none;
  its verdicts are reported as they are).

Every testbed run has the simulator beside it on the same workload and seed, raw and calibrated
with the testbed's measured overheads; per cell and baseline the calibrated simulator's verdict
(its runs) is set against the testbed's (by the same rule, :mod:`experiments.verdicts`).
A cell's testbed experiment is ``hpo-testbed`` in ``<out>/<claim>/<cell>/``;
one that finished with the wanted seeds and policies is read again, not rerun.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments import atlas
from experiments.atlas import Cell
from experiments.claim_map import ClaimMap, cell_key

if TYPE_CHECKING:  # (annotations only: the sweep's flags are the command line's)
    import argparse

    from cli.sweep import SweepSettings

# the checkout this runs from (the testbed experiment runs from it)
ROOT = Path(__file__).resolve().parents[1]

SEEDS = (1, 2, 3, 4, 5)

# a map's setting and the testbed's flag that sets it
FLAGS = {
    "n_hosts": "--hosts",
    "n_tasks": "--tasks",
    "configs_per_task": "--configs",
    "eta": "--eta",
    "min_iterations": "--min-iterations",
    "workers": "--workers",
    "models": "--models",
    "patterns": "--patterns",
    "mean_interarrival_s": "--interarrival",
    "search": "--search",
}


def testbed_arguments(settings: Mapping[str, Any]) -> list[str]:
    """``hpo-testbed``'s flags for a cell's settings; a setting the testbed cannot
    take is an error (the confirmation would run something else)."""
    arguments: list[str] = []
    for key, value in settings.items():
        if key == "link_bps":
            arguments += ["--link-gbps", f"{value / 1e9:g}"]
        elif key == "mode":
            if value != "levels":
                raise ValueError(f"the testbed serves priority levels, not mode {value!r}")
        elif key in FLAGS:
            values = value if isinstance(value, list | tuple) else [value]
            arguments += [FLAGS[key], *(f"{v:g}" if isinstance(v, float) else str(v)
                                        for v in values)]  # fmt: skip
        else:
            raise ValueError(f"the testbed has no setting {key!r}")
    return arguments


def effect(claim: ClaimMap, cell: Cell) -> float | None:
    """The mean absolute log-ratio of the default reading to its baselines on the primary
    metric: how far from "no effect" the simulator puts the cell (None: nothing compared)."""
    default, metric = claim.readings[0].label, claim.metrics[0].key
    logs = [abs(math.log(d.ratio.mean)) for (r, _, m), d in cell.decisions.items()
            if r == default and m == metric and d.ratio is not None]  # fmt: skip
    return sum(logs) / len(logs) if logs else None


def choose_cells(claim: ClaimMap, cells: Sequence[Cell]) -> dict[str, Cell]:
    """The two cells the testbed runs (see the module docstring): ``largest`` and ``none``."""
    scored = [(effect(claim, c), c) for c in cells]
    scored = [(e, c) for e, c in scored if e is not None]
    if len(scored) < 2:
        raise ValueError(f"{claim.key}: fewer than two cells with comparisons to choose from")
    largest = max(scored, key=lambda ec: ec[0])[1]
    default, metric = claim.readings[0].label, claim.metrics[0].key

    def equivalent(cell: Cell) -> bool:
        verdicts = [d.verdict.value for (r, _, m), d in cell.decisions.items()
                    if r == default and m == metric]  # fmt: skip
        return bool(verdicts) and all(v == "equivalent" for v in verdicts)

    others = [(e, c) for e, c in scored if c is not largest]
    candidates = [(e, c) for e, c in others if equivalent(c)] or others
    return {"largest": largest, "none": min(candidates, key=lambda ec: ec[0])[1]}


def slug(cell: Mapping[str, str]) -> str:
    """A cell as a folder name."""
    return re.sub(r"[^A-Za-z0-9.-]+", "-", "_".join(f"{k}-{v}" for k, v in cell.items()))


def testbed_command(claim: ClaimMap, cell: Mapping[str, str], seeds: Sequence[int],
                    out: Path) -> list[str]:  # fmt: skip
    """The testbed experiment of one cell: its settings, every policy of the cell, calibrated;
    a cell cut short goes on with the runs it has not finished (``--resume``)."""
    policies = [r.policy for r in claim.policies_of(cell)]
    if len(set(policies)) != len(policies) or any(r.options for r in claim.policies_of(cell)):
        raise ValueError(f"{claim.key}: the testbed runs each policy once, without options")
    return [
        sys.executable, "-m", "experiments.run_testbed", "--calibrate",
        *testbed_arguments(claim.settings(cell)), "--policy", *policies,
        "--seeds", *map(str, seeds), "--out", str(out), "--resume",
    ]  # fmt: skip


def load_testbed_experiment(out: Path) -> dict:
    """A finished testbed experiment's ``summary.json`` with its runs under ``"runs"``."""
    summary = json.loads((out / "summary.json").read_text())
    summary["runs"] = json.loads((out / "results.json").read_text())
    return summary


def finished(out: Path, seeds: Sequence[int], policies: Sequence[str]) -> dict | None:
    """A cell's finished testbed experiment in ``out`` if it ran ``seeds`` under ``policies``
    (:func:`load_testbed_experiment`), else None."""
    try:
        summary = load_testbed_experiment(out)
    except (OSError, ValueError):
        return None
    if summary["workload"]["seeds"] != list(seeds) or set(summary["policies"]) != set(policies):
        return None
    return summary


def run_cell(claim: ClaimMap, cell: Mapping[str, str], seeds: Sequence[int], out: Path,
             progress: Callable[[str], None]) -> dict:  # fmt: skip
    """A cell's testbed experiment (root), or the one already finished in ``out``."""
    policies = [r.policy for r in claim.policies_of(cell)]
    done = finished(out, seeds, policies)
    if done is not None:
        progress(f"testbed {claim.key} {cell_key(cell)}: finished in {out}, read again")
        return done
    command = testbed_command(claim, cell, seeds, out)
    progress(f"testbed {claim.key} {cell_key(cell)}: {' '.join(command[2:])}")
    run = subprocess.run(command, cwd=ROOT, text=True)
    done = finished(out, seeds, policies)
    if done is None:
        raise SystemExit(f"the testbed experiment of {cell_key(cell)} failed (exit "
                         f"{run.returncode}); see above")  # fmt: skip
    return done


@dataclass
class Confirmation:
    """A claim's confirmation: its testbed-size map (the simulator's), the two cells chosen
    (``largest``, ``none``) and each one's testbed experiment (its summary, runs under
    ``"runs"``)."""

    claim: ClaimMap
    small: atlas.ClaimOutcome
    chosen: dict[str, Cell]
    testbeds: dict[str, dict] = field(default_factory=dict)


def confirm(claim: ClaimMap, out: Path, sweep: SweepSettings | argparse.Namespace,
            seeds: Sequence[int] = SEEDS,
            progress: Callable[[str], None] = print, run: bool = True) -> Confirmation:  # fmt: skip
    """Map ``claim``'s testbed-size grid in the simulator (into ``out/<map>/``), choose the two
    cells and run each on the testbed (root; a finished one is read again; with ``run``
    false, only that: a cell not finished is left out)."""
    from experiments.claims import TESTBED_MAPS

    small = TESTBED_MAPS[claim.key]
    where = out / small.key
    where.mkdir(parents=True, exist_ok=True)
    (outcome,) = atlas.run_atlas([small], where, sweep, progress=progress)
    chosen = choose_cells(small, outcome.cells)
    confirmation = Confirmation(claim, outcome, chosen)
    for role, cell in chosen.items():
        progress(f"confirm {claim.key}: {ROLES[role]}: {cell_key(cell.cell)} "
                 f"(mean |log ratio| {effect(small, cell):.3f})")  # fmt: skip
        folder = where / slug(cell.cell)
        if run:
            confirmation.testbeds[role] = run_cell(small, cell.cell, seeds, folder, progress)
        elif done := finished(folder, seeds, [r.policy for r in small.policies_of(cell.cell)]):
            confirmation.testbeds[role] = done
    return confirmation


ROLES = {"largest": "the largest effect predicted", "none": "the least effect predicted"}
