"""The claims atlas: each paper's claim mapped over the regimes that decide it.

A claim (:class:`experiments.claim_map.ClaimMap`) names its policy, its baselines, the metrics
of its paper and the **dimensions** that decide it, each with its levels and the reason it is
there. Its cells are the product of its ``grid`` dimensions, and again with each
``variations`` level alone (the others at their first level, the report's setting);
``--quick`` varies only the dimensions marked ``quick``. In every cell every policy runs on the
same seeds (the same workload per seed), and each baseline comparison is one paired comparison
over the seeds, decided by
:func:`experiments.verdicts.decide`: reproduced, opposite, equivalent (within the margin) or
inconclusive (with the seeds a power estimate says it would need).

Multiplicity: in a cell, one reading's comparisons against its baselines (on one metric) are
one Holm family: the claim in that regime. The atlas also reports how many of the default
reading's verdicts survive Holm across the whole map (every cell and baseline as one family),
the stricter reading of "the claim holds here".

Seeds: a pilot of ``seeds`` per cell, then one sequential round: a cell whose default-reading
comparison on the primary metric is inconclusive gets the seeds the power estimate asks for
(the largest over its baselines) when that is at most ``max_seeds``; cells that would need more
stay inconclusive and report the number. Two looks at the data make the stated levels nominal
(the second look is only taken where the first decided nothing).

A point is one policy on one seed in one cell (a task of :mod:`cli.sweep`, so a map is
resumable and runs on a Ray cluster); :func:`experiments.atlas_points.run_point` runs it.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from controller.stats import mean_ci
from experiments.atlas_points import run_point
from experiments.claim_map import ClaimMap, cell_key, points
from experiments.claims import MAPS
from experiments.verdicts import MARGIN, Decision, Verdict, decide

if TYPE_CHECKING:  # (annotations only: the sweep's flags are the command line's)
    import argparse

    from cli.sweep import SweepSettings

# the short mark of each verdict in figures and tables
MARKS = {
    Verdict.REPRODUCED: "R",
    Verdict.OPPOSITE: "O",
    Verdict.EQUIVALENT: "=",
    Verdict.INCONCLUSIVE: "?",
}


# ---- verdicts -------------------------------------------------------------------------------


@dataclass
class Cell:
    """One cell's outcome: its seeds, each comparison's decision and the regime it is in.

    ``decisions`` maps ``(reading, baseline, metric)`` to its :class:`Decision`."""

    cell: dict[str, str]
    seeds: int
    decisions: dict[tuple[str, str, str], Decision]
    context: dict[str, float | None]


Results = Mapping[tuple[str, str, int], dict]  # (cell key, policy, seed) -> a point's result


def index_results(runs: Iterable[tuple[dict, dict]]) -> dict[tuple[str, str, int], dict]:
    """``(cell key, policy, seed) -> result`` of ``(point, result)`` pairs."""
    return {(cell_key(p["cell"]), p["policy"], p["seed"]): r for p, r in runs}


def paired_ratios(
    results: Results, cell: Mapping[str, str], policy: str, baseline: str, metric: str,
    seeds: Iterable[int],
) -> list[float]:  # fmt: skip
    """``policy / baseline`` on ``metric`` per seed, over the seeds both measured (> 0)."""
    key, ratios = cell_key(cell), []
    for seed in seeds:
        mine = results.get((key, policy, seed), {}).get(metric)
        theirs = results.get((key, baseline, seed), {}).get(metric)
        if mine is not None and theirs is not None and mine > 0 and theirs > 0:
            ratios.append(mine / theirs)
    return ratios


def judge(claim: ClaimMap, cells: Sequence[Mapping[str, str]], results: Results,
          seeds_of: Mapping[str, Sequence[int]], margin: float = MARGIN) -> list[Cell]:  # fmt: skip
    """Every cell's decisions: per reading and metric, its baselines as one Holm family."""
    outcome = []
    for cell in cells:
        key, seeds = cell_key(cell), seeds_of[cell_key(cell)]
        decisions: dict[tuple[str, str, str], Decision] = {}
        readings = [r for r in claim.policies_of(cell) if r in claim.readings]
        for reading, metric in itertools.product(readings, claim.metrics):
            families = {}
            for baseline in claim.baselines:
                ratios = paired_ratios(results, cell, reading.label, baseline.label, metric.key,
                                       seeds)  # fmt: skip
                if ratios:
                    families[baseline.label] = ratios
            if families:
                for baseline, decision in decide(families, metric.lower_is_better, margin).items():
                    decisions[(reading.label, baseline, metric.key)] = decision
        context = {}
        for name in claim.context:
            values = [results.get((key, claim.regime_policy, s), {}).get(name) for s in seeds]
            ci = mean_ci(values)
            context[name] = None if ci is None else ci.mean
        outcome.append(Cell(dict(cell), len(seeds), decisions, context))
    return outcome


def seeds_wanted(claim: ClaimMap, cell: Cell, max_seeds: int) -> int:
    """The sequential rule: the seeds ``cell`` should have after its first look. A cell whose
    default reading is inconclusive (on the primary metric) against some baseline whose power
    estimate is within ``max_seeds`` grows to the largest such estimate, and by at least two
    seeds (the estimate is a normal approximation: it can ask for what the cell already has),
    at most to ``max_seeds``; otherwise it keeps its seeds."""
    default, primary = claim.readings[0].label, claim.metrics[0].key
    needed = [d.seeds_needed for (r, _, m), d in cell.decisions.items()
              if r == default and m == primary and d.verdict is Verdict.INCONCLUSIVE]  # fmt: skip
    within = [n for n in needed if n is not None and n <= max_seeds]
    if not within:
        return cell.seeds
    return min(max_seeds, max(max(within), cell.seeds + 2))


def map_wide(
    claim: ClaimMap,
    cells: Sequence[Cell],
    results: Results,
    seeds_of: Mapping[str, Sequence[int]],
    margin: float = MARGIN,
) -> dict[str, int]:
    """Verdict counts of the default reading on the primary metric with every cell and
    baseline one Holm family."""
    default, metric = claim.readings[0].label, claim.metrics[0]
    families = {}
    for cell in cells:
        for baseline in claim.baselines:
            ratios = paired_ratios(results, cell.cell, default, baseline.label, metric.key,
                                   seeds_of[cell_key(cell.cell)])  # fmt: skip
            if ratios:
                families[(cell_key(cell.cell), baseline.label)] = ratios
    counts = dict.fromkeys((v.value for v in Verdict), 0)
    for decision in decide(families, metric.lower_is_better, margin).values():
        counts[decision.verdict.value] += 1
    return counts


def counts(claim: ClaimMap, cells: Sequence[Cell], reading: str | None = None,
           metric: str | None = None) -> dict[str, dict[str, int]]:  # fmt: skip
    """Per baseline: how many cells each verdict holds in (a reading on a metric; default: the
    claim's default reading on its primary metric)."""
    reading = reading or claim.readings[0].label
    metric = metric or claim.metrics[0].key
    out = {b.label: dict.fromkeys((v.value for v in Verdict), 0) for b in claim.baselines}
    for cell in cells:
        for b in claim.baselines:
            decision = cell.decisions.get((reading, b.label, metric))
            if decision is not None:
                out[b.label][decision.verdict.value] += 1
    return out


def by_level(claim: ClaimMap, cells: Sequence[Cell]) -> list[str]:
    """Where the default reading's verdicts fall, per dimension level (on the primary metric,
    every baseline counted): a markdown table that says which dimension decides the claim."""
    default, metric = claim.readings[0].label, claim.metrics[0].key
    lines = ["| dimension | level | cells | reproduced | opposite | equivalent | inconclusive |",
             "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for d in claim.dimensions:
        for level in d.levels:
            chosen = [c for c in cells if c.cell[d.name] == level.label]
            if not chosen or (len(chosen) == len(cells) and len(d.levels) > 1):
                continue  # (a level no cell varies from says nothing)
            n = dict.fromkeys((v.value for v in Verdict), 0)
            for cell in chosen:
                for (r, _, m), decision in cell.decisions.items():
                    if r == default and m == metric:
                        n[decision.verdict.value] += 1
            lines.append(
                f"| {d.name} | {level.label} | {len(chosen)} | {n['reproduced']} | "
                f"{n['opposite']} | {n['equivalent']} | {n['inconclusive']} |"
            )
    return lines


# ---- output ---------------------------------------------------------------------------------


def write_csv(claim: ClaimMap, cells: Sequence[Cell], path: Path) -> Path:
    """Every comparison of every cell, one row each."""
    names = [d.name for d in claim.dimensions]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*names, *claim.context, "seeds", "reading", "baseline", "metric",
                         "ratio", "low", "high", "p_difference", "p_equivalence", "verdict",
                         "seeds_needed"])  # fmt: skip
        for cell in cells:
            for (reading, baseline, metric), d in cell.decisions.items():
                writer.writerow([
                    *(cell.cell[n] for n in names), *(cell.context.get(c) for c in claim.context),
                    cell.seeds, reading, baseline, metric, d.ratio.mean, d.ratio.low,
                    d.ratio.high, d.p_difference, d.p_equivalence, d.verdict.value,
                    d.seeds_needed if d.seeds_needed is not None else "",
                ])  # fmt: skip
    return path


def decision_text(d: Decision | None) -> str:
    """``0.94 [0.92, 0.96] R`` (``?`` with the seeds it would need)."""
    if d is None:
        return "-"
    r = d.ratio
    span = f"{r.mean:.3f}" if r.n < 2 else f"{r.mean:.3f} [{r.low:.3f}, {r.high:.3f}]"
    need = (
        f" (needs {d.seeds_needed})" if d.seeds_needed and d.verdict is Verdict.INCONCLUSIVE else ""
    )
    return f"{span} {MARKS[d.verdict]}{need}"


def table(claim: ClaimMap, cells: Sequence[Cell], reading: str, metric: str) -> list[str]:
    """A markdown table: one row per cell, one column per baseline."""
    names = [d.name for d in claim.dimensions]
    shown = [n for n in names if len({c.cell[n] for c in cells}) > 1] or names[:1]
    head = [*shown, *claim.context, "seeds", *(f"vs {b.label}" for b in claim.baselines)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for cell in cells:
        if not any(k[0] == reading and k[2] == metric for k in cell.decisions):
            continue
        context = [_number(cell.context.get(c)) for c in claim.context]
        decisions = [cell.decisions.get((reading, b.label, metric)) for b in claim.baselines]
        # (the pairs the reading has: another reading keeps the pilot's seeds)
        pairs = max((d.ratio.n for d in decisions if d is not None), default=0)
        row = [*(cell.cell[n] for n in shown), *context, str(pairs)]
        row += [decision_text(d) for d in decisions]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.2f}"


def heat_maps(claim: ClaimMap, cells: Sequence[Cell], path: Path, readings: bool = False) -> Path:
    """One figure: a heat map per (row, baseline) of the ratio on the primary metric, each
    square marked with its verdict. Rows are the variations (the default reading), or with
    ``readings`` the readings on the grid cells."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import Normalize

    metric = claim.metrics[0]
    grid = [d for d in claim.grid if len({c.cell[d.name] for c in cells}) > 1] or list(
        claim.grid[:1]
    )
    y_dim, x_dims = grid[0], grid[1:]
    y_levels = [
        lv.label for lv in y_dim.levels if any(c.cell[y_dim.name] == lv.label for c in cells)
    ]
    x_levels = list(itertools.product(*[
        [lv.label for lv in d.levels if any(c.cell[d.name] == lv.label for c in cells)]
        for d in x_dims
    ]))  # fmt: skip
    if readings:
        rows = [
            (r.label, r.label, lambda c: claim.is_default_variant(c.cell)) for r in claim.readings
        ]
    else:
        variants = []
        for cell in cells:
            variant = tuple((d.name, cell.cell[d.name]) for d in claim.variations)
            if variant not in variants:
                variants.append(variant)
        rows = []
        for variant in variants:
            changed = [f"{n}={v}" for n, v in variant if v != claim.dimension(n).levels[0].label]
            rows.append(
                (
                    ", ".join(changed) or "report's setting",
                    claim.readings[0].label,
                    lambda c, variant=variant: all(c.cell[n] == v for n, v in variant),
                )
            )
    n_rows, n_cols = len(rows), len(claim.baselines)
    fig, axes = plt.subplots(n_rows, n_cols, squeeze=False,
                             figsize=(1.1 + 1.25 * max(2, len(x_levels)) * n_cols,
                                      0.6 + (0.55 * len(y_levels) + 1.3) * n_rows))  # fmt: skip
    # (room between rows for each map's title under the x labels of the one above)
    fig.subplots_adjust(hspace=0.9 if n_rows > 1 else 0.2, top=1.0 - 1.0 / fig.get_figheight())
    norm = Normalize(vmin=-math.log(1.5), vmax=math.log(1.5))  # symmetric: 1 is white
    image = None
    for i, (title, reading, chosen) in enumerate(rows):
        for j, baseline in enumerate(claim.baselines):
            ax = axes[i][j]
            values = [[math.nan] * len(x_levels) for _ in y_levels]
            for cell in cells:
                if not chosen(cell):
                    continue
                d = cell.decisions.get((reading, baseline.label, metric.key))
                if d is None:
                    continue
                y = y_levels.index(cell.cell[y_dim.name])
                x = x_levels.index(tuple(cell.cell[dim.name] for dim in x_dims))
                values[y][x] = math.log(d.ratio.mean)
                dark = abs(values[y][x]) > 0.6 * math.log(1.5)  # (white text on dark squares)
                ax.text(x, y, f"{d.ratio.mean:.2f}\n{MARKS[d.verdict]}", ha="center",
                        va="center", fontsize=7, color="white" if dark else "black")  # fmt: skip
            image = ax.imshow(values, cmap="RdBu_r", norm=norm, aspect="auto")
            ax.set_xticks(range(len(x_levels)), ["\n".join(x) for x in x_levels], fontsize=6)
            ax.set_yticks(range(len(y_levels)), y_levels, fontsize=7)
            ax.set_title(f"{title}\n{reading} / {baseline.label}", fontsize=7)
            if j == 0:
                ax.set_ylabel(y_dim.name, fontsize=7)
    if image is not None:
        from matplotlib.cm import ScalarMappable

        bar = fig.colorbar(ScalarMappable(norm, "RdBu_r"), ax=axes.ravel().tolist(), shrink=0.8)
        bar.set_ticks([math.log(v) for v in (1 / 1.5, 1 / 1.2, 1.0, 1.2, 1.5)],
                      labels=["0.67", "0.83", "1", "1.2", "1.5"])  # fmt: skip
        bar.ax.tick_params(labelsize=7)
        bar.set_label(f"{metric.label}: ratio (< 1: the claimed policy is better)", fontsize=7)
    x_name = " / ".join(d.name for d in x_dims) or "-"
    fig.suptitle(f"{claim.name}: R reproduced, O opposite, = equivalent (within {MARGIN:.0%}), "
                 f"? inconclusive\nrows of each map: {y_dim.name}; columns: {x_name}",
                 fontsize=8, y=1.0 - 0.1 / fig.get_figheight())  # fmt: skip
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def summary_json(claim: ClaimMap, cells: Sequence[Cell]) -> dict:
    """The map as JSON: every cell's context, seeds and decisions."""
    return {
        "claim": claim.key,
        "cells": [
            {
                "cell": c.cell,
                "seeds": c.seeds,
                "context": c.context,
                "comparisons": [
                    {
                        "reading": r,
                        "baseline": b,
                        "metric": m,
                        "verdict": d.verdict.value,
                        "ratio": d.ratio.mean,
                        "low": d.ratio.low,
                        "high": d.ratio.high,
                        "p_difference": d.p_difference,
                        "p_equivalence": d.p_equivalence,
                        "seeds_needed": d.seeds_needed,
                    }  # fmt: skip
                    for (r, b, m), d in c.decisions.items()
                ],
            }
            for c in cells
        ],
    }


def dumps(data: dict) -> str:
    """JSON with NaN as null."""
    return json.dumps(data, indent=1, default=str).replace("NaN", "null")


# ---- a whole atlas --------------------------------------------------------------------------


@dataclass
class ClaimOutcome:
    """One claim's map after both looks: its cells, verdict counts and files."""

    claim: ClaimMap
    cells: list[Cell]
    map_wide: dict[str, int]
    files: dict[str, Path] = field(default_factory=dict)


def point_cost(point: dict) -> float:
    """A rough relative run time of a point (the sweep starts the longest first)."""
    claim = MAPS[point["claim"]]
    settings = claim.settings(point["cell"])
    if claim.kind == "network-hpo":
        return (
            0.1
            * settings["n_tasks"]
            * settings["configs_per_task"]
            * (3 if settings.get("search") == "hyperband" else 1)
        )
    return 1.0 if claim.kind == "gpu-hpo" else 0.5


def run_atlas(
    claims: Sequence[ClaimMap],
    out: Path,
    how: SweepSettings | argparse.Namespace,
    quick: bool = False,
    seeds: int = 5,
    max_seeds: int = 12,
    progress: Callable[[str], None] = print,
) -> list[ClaimOutcome]:
    """Map every claim (two looks, see the module docstring) and write its files to ``out``:
    ``atlas-<claim>.csv`` (every comparison), ``atlas-<claim>.json``, ``atlas-<claim>.png`` (the
    default reading over every cell) and ``atlas-<claim>-readings.png`` (the readings on the
    grid cells). ``how`` the points run: :class:`cli.sweep.SweepSettings`."""
    from cli.sweep import run_points

    cells = {c.key: c.cells(quick) for c in claims}
    seeds_of = {(c.key, cell_key(cell)): list(range(1, seeds + 1)) for c in claims
                for cell in cells[c.key]}  # fmt: skip
    every: list[dict] = [p for c in claims for p in points(c, cells[c.key], range(1, seeds + 1))]
    results: dict[str, dict] = {c.key: {} for c in claims}

    def sweep(batch: list[dict], label: str) -> None:
        outcome = run_points(batch, run_point, out / "points", how, label=label,
                             describe=_describe, cost=point_cost)  # fmt: skip
        for point, result in zip(batch, outcome, strict=True):
            results[point["claim"]].update(index_results([(point, result)]))

    progress(f"atlas: {len(every)} runs over {sum(map(len, cells.values()))} cells, "
             f"{seeds} seeds each (the pilot)")  # fmt: skip
    sweep(every, "atlas pilot runs")
    more: list[dict] = []
    for c in claims:
        by_cell = {k: s for (key, k), s in seeds_of.items() if key == c.key}
        for cell in judge(c, cells[c.key], results[c.key], by_cell):
            wanted = seeds_wanted(c, cell, max_seeds)
            if wanted > cell.seeds:
                extra = range(cell.seeds + 1, wanted + 1)
                seeds_of[(c.key, cell_key(cell.cell))] = list(range(1, wanted + 1))
                # (the other readings keep the pilot's seeds: the rule follows the default)
                more += [p for p in points(c, [cell.cell], extra)
                         if p["policy"] not in {r.label for r in c.readings[1:]}]  # fmt: skip
    if more:
        progress(f"atlas: {len(more)} more runs for the cells the pilot left undecided")
        sweep(more, "atlas sequential runs")
    outcomes = []
    for c in claims:
        by_cell = {k: s for (key, k), s in seeds_of.items() if key == c.key}
        judged = judge(c, cells[c.key], results[c.key], by_cell)
        outcome = ClaimOutcome(c, judged, map_wide(c, judged, results[c.key], by_cell))
        outcome.files["csv"] = write_csv(c, judged, out / f"atlas-{c.key}.csv")
        (out / f"atlas-{c.key}.json").write_text(dumps(summary_json(c, judged)))
        outcome.files["map"] = heat_maps(c, judged, out / f"atlas-{c.key}.png")
        if len(c.readings) > 1:
            outcome.files["readings"] = heat_maps(
                c, judged, out / f"atlas-{c.key}-readings.png", readings=True
            )
        outcomes.append(outcome)
    return outcomes


def _describe(point: dict, result: dict) -> str:
    shown = ", ".join(f"{k} {v:.4g}" for k, v in result.items() if isinstance(v, float))
    where = f"{point['claim']} {cell_key(point['cell'])} {point['policy']} seed {point['seed']}"
    return f"{where}: {shown}"


def markdown(outcome: ClaimOutcome, out: Path) -> list[str]:
    """A claim's section of ``REPORT.md``: statement, dimensions, verdict counts, figures and
    the cell tables."""
    c, cells = outcome.claim, outcome.cells
    default, primary = c.readings[0].label, c.metrics[0]
    lines = [f"## {c.name} ({c.paper})", "", f"Claim: {c.statement}.", ""]
    lines += ["Dimensions (first level: the report's setting):", ""]
    for d in c.dimensions:
        levels = ", ".join(lv.label for lv in d.levels)
        lines.append(f"- **{d.name}** ({levels}): {d.why}.")
    if c.note:
        lines += ["", f"Note: {c.note}."]
    lines += ["", f"Verdicts of `{default}` on {primary.label}, cells per baseline "
              f"({len(cells)} cells; Holm within each cell):", "",
              "| baseline | reproduced | opposite | equivalent | inconclusive |",
              "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for baseline, n in counts(c, cells).items():
        lines.append(f"| {baseline} | {n['reproduced']} | {n['opposite']} | {n['equivalent']} | "
                     f"{n['inconclusive']} |")  # fmt: skip
    w = outcome.map_wide
    lines += ["", f"With every cell and baseline as one Holm family: {w['reproduced']} "
              f"reproduced, {w['opposite']} opposite, {w['equivalent']} equivalent, "
              f"{w['inconclusive']} inconclusive.", ""]  # fmt: skip
    lines += ["Where they fall, per level of each dimension (every baseline counted):", "",
              *by_level(c, cells), ""]  # fmt: skip
    lines += [f"![{c.name} map]({outcome.files['map'].relative_to(out)})", ""]
    for metric in c.metrics:
        lines += [f"{metric.label}, `{default}` / baseline (geometric mean over seeds [95 % CI]; "
                  "R reproduced, O opposite, = equivalent, ? inconclusive):", ""]  # fmt: skip
        lines += table(c, cells, default, metric.key) + [""]
    if len(c.readings) > 1:
        lines += ["Readings (each against the baselines on the grid cells; the claim's verdict "
                  f"is `{default}`'s):", ""]  # fmt: skip
        for r in c.readings:
            lines.append(f"- `{r.label}`: {r.why}.")
        lines += ["", "| reading | metric | baseline | reproduced | opposite | equivalent | "
                  "inconclusive |", "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
        grid_cells = [cell for cell in cells if c.is_default_variant(cell.cell)]
        for r, metric in itertools.product(c.readings, c.metrics):
            for baseline, n in counts(c, grid_cells, r.label, metric.key).items():
                lines.append(
                    f"| {r.label} | {metric.label} | {baseline} | {n['reproduced']} | "
                    f"{n['opposite']} | {n['equivalent']} | {n['inconclusive']} |"
                )
        lines += ["", f"![{c.name} readings]({outcome.files['readings'].relative_to(out)})", ""]
        for r in c.readings[1:]:
            lines += [f"`{r.label}` on {primary.label}:", ""]
            lines += table(c, grid_cells, r.label, primary.key) + [""]
    lines.append(f"Every comparison: `{outcome.files['csv'].relative_to(out)}`.")
    return lines + [""]
