"""Each paper's claim mapped over the regimes that decide it, in one report.

    .venv/bin/hpo-reproduce --simulator-only --quick   # a coarse atlas, no root
    .venv/bin/hpo-reproduce --simulator-only           # the full atlas
    sudo .venv/bin/hpo-reproduce [--quick]             # plus the testbed (root)

Every claim (:mod:`experiments.claims`) is a map (:mod:`experiments.atlas`): its cells are the
regimes that decide it (load, model mix, arrivals, ...), every cell a paired comparison over
seeds of the claimed policy against each baseline, with a verdict that can say "no effect"
(:mod:`experiments.verdicts`: reproduced, opposite, equivalent within 3 %, or inconclusive with
the seeds it would need). The Beamer, JPAS and Hermes algorithms here are reconstructions from
their abstracts; each reading an abstract allows runs beside the default one. Beside the maps:
BSSI's and Beamer's orders against brute force (a proven bound, on instances where the order
matters), and with the testbed, Beamer's claim on the testbed's main experiment
(``hpo-testbed --calibrate``) with the simulator's prediction per policy, and (not
with ``--quick``) the testbed's confirmation of the Beamer and JPAS maps
(:mod:`experiments.confirm`: the cells of largest and least predicted effect at the testbed's
size, 5 seeds each, predicted against measured verdicts; about 5 hours).

Writes ``REPORT.md``, ``summary.json`` (with provenance), ``atlas.png`` (verdict counts) and per
claim ``atlas-<claim>.png`` / ``.csv`` / ``.json`` to ``--out``; every run is a file under
``<out>/points`` (``--resume`` keeps them, ``--ray-address`` runs them on a Ray cluster).
``--testbed-results DIR`` takes the testbed's claim from a finished experiment (no root).

The policies and the brute force (numba's kernels) are imported where a check needs them, so
that ``--help`` and a bad flag answer at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from cli.argtypes import (  # noqa: E402
    POLICY_NAMES,
    non_negative,
    output_folder,
    policy_help,
    policy_name,
    positive,
    program,
)
from cli.sweep import SweepError, SweepSettings, run_points  # noqa: E402
from cli.sweep import add_arguments as add_sweep_arguments  # noqa: E402
from controller.stats import (  # noqa: E402
    format_interval,
)
from experiments import atlas, claim_map, confirm  # noqa: E402
from experiments.claims import CLAIMS, TESTBED_MAPS  # noqa: E402
from experiments.report_claims import Claim, against_brute_force, run_optimum_point  # noqa: E402
from experiments.report_testbed import (  # noqa: E402
    TESTBED_CLAIMS,
    agreement,
    agreement_lines,
    beamer_testbed,
    confirmation_lines,
    confirmation_rows,
    predicted_against_measured,
    run_testbed_experiment,
    testbed_provenance,
    verdict_lines,
)
from experiments.verdicts import MARGIN, Verdict  # noqa: E402
from simulator.metrics import provenance, write_json  # noqa: E402
from workloads.gpu import add_gpu_policy_argument  # noqa: E402


def summary_lines(outcomes: list[atlas.ClaimOutcome], claims: list[Claim]) -> list[str]:
    """The verdict counts of every map and the verdicts of the fixed-setting claims."""
    lines = [
        "| claim | baseline | cells | reproduced | opposite | equivalent | inconclusive |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for o in outcomes:
        for baseline, n in atlas.counts(o.claim, o.cells).items():
            lines.append(
                f"| {o.claim.name} | {baseline} | {len(o.cells)} | {n['reproduced']} | "
                f"{n['opposite']} | {n['equivalent']} | {n['inconclusive']} |"
            )
    for c in claims:
        for x in c.comparisons:
            mark = {v: "1" if x.verdict == v else "0" for v in Verdict}
            lines.append(f"| {c.name} | {x.baseline} | 1 | {mark[Verdict.REPRODUCED]} | "
                         f"{mark[Verdict.OPPOSITE]} | {mark[Verdict.EQUIVALENT]} | "
                         f"{mark[Verdict.INCONCLUSIVE]} |")  # fmt: skip
    return lines


def claim_lines(claims: list[Claim]) -> list[str]:
    """The fixed-setting claims: one row each, then their notes."""
    lines = [
        "| claim | paper's statement | setting | metric | our value | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in claims:
        values = "; ".join(
            f"vs {x.baseline}: {format_interval(x.ratio, 3)} ({x.verdict})" for x in c.comparisons
        )
        lines.append(f"| {c.name} ({c.paper}) | {c.statement} | {c.setting} | {c.metric} | "
                     f"{values} | **{c.verdict}** |")  # fmt: skip
    notes = [f"- {c.name}: {c.note}" for c in claims if c.note]
    for c in claims:
        notes += [f"- {c.name}, same setting: {label} {format_interval(r, 3)}"
                  for label, r in c.context]  # fmt: skip
    return lines + (["", "Notes:", *notes] if notes else [])


def report(
    outcomes: list[atlas.ClaimOutcome],
    claims: list[Claim],
    meta: dict,
    out: Path,
    testbed: dict | None = None,
    confirmations: Sequence[confirm.Confirmation] = (),
) -> Path:
    """``REPORT.md``: the verdict counts, each claim's map, the bound checks, the simulator
    against the testbed, the testbed's confirmation of the maps, provenance."""
    lines = [
        "# Reproduction report",
        "",
        "The Beamer, JPAS and Hermes algorithms are our reconstructions from the papers'",
        "abstracts, not the authors' code. Each claim is mapped over the regimes that decide it;",
        "in every cell each policy runs on the same seeds and the claimed policy's metric is a",
        "ratio to each baseline's, paired per seed (geometric mean [95 % CI]). Verdicts: "
        "**reproduced** / **opposite** where a two-sided paired t-test on the log-ratios rejects",
        f"no difference (on the claimed / the other side), **equivalent** where two one-sided "
        f"tests put the ratio within +/-{MARGIN:.0%} (no effect), else **inconclusive** with the",
        "seeds a power estimate says it would need; Holm across a cell's baselines. Seeds: a "
        f"pilot of {meta['seeds']} per cell, then undecided cells get the seeds the power "
        f"estimate asks for, up to {meta['max_seeds']}. The bound checks give mean [best, "
        "worst] over instances and hold when the worst is within the proven bound.",
        "",
        "![verdicts per claim](atlas.png)",
        "",
        *summary_lines(outcomes, claims),
        "",
    ]
    for o in outcomes:
        lines += atlas.markdown(o, out)
    if claims:
        lines += ["## Claims at one setting", "", *claim_lines(claims), ""]
    if testbed is not None:
        lines += agreement_lines(agreement(testbed), testbed)
        lines += verdict_lines(testbed)
    for c in confirmations:
        lines += confirmation_lines(c, out)
    p = meta["provenance"]
    lines += [
        "",
        "## Provenance",
        "",
        f"- mode: {meta['mode']}; atlas: {'quick' if meta['quick'] else 'full'}; pilot seeds: "
        f"{meta['seeds']}, at most {meta['max_seeds']}; testbed seeds: "
        f"{meta['testbed_seeds'] or '-'}; wall time: {meta['wall_s']:.0f} s",
        f"- git commit: {p['git_commit']}"
        + (" (with uncommitted changes)" if p["git_dirty"] else ""),  # fmt: skip
        f"- command: `{' '.join(p['command'])}`",
        f"- Python {p['python']}; " + ", ".join(f"{k} {v}" for k, v in p["packages"].items() if v),
        f"- machine: {p['machine']['platform']}, {p['machine']['cpus']} CPUs",
        *testbed_provenance(testbed),
        "",
    ]
    path = out / "REPORT.md"
    path.write_text("\n".join(lines))
    return path


def versus(claim: str, baseline: str) -> str:
    """A figure's row label ``"<claim> vs <baseline>"``; a claim whose name already says what
    it is compared with (``"Beamer vs brute force"``) is named by what it claims for, so that
    no label names two baselines or one twice."""
    return f"{claim.partition(' vs ')[0]} vs {baseline}"


def atlas_figure(outcomes: list[atlas.ClaimOutcome]):
    """Per claim and baseline, the cells of each verdict as one stacked bar, titled by what
    they count."""
    rows = [(versus(o.claim.name, b), n) for o in outcomes
            for b, n in atlas.counts(o.claim, o.cells).items()]  # fmt: skip
    colours = {"reproduced": "tab:green", "equivalent": "tab:grey", "opposite": "tab:red",
               "inconclusive": "white"}  # fmt: skip
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.3))
    for i, (_, n) in enumerate(rows):
        left = 0
        for verdict, colour in colours.items():
            ax.barh(i, n[verdict], left=left, color=colour, edgecolor="black", linewidth=0.5,
                    label=verdict if i == 0 else None)  # fmt: skip
            left += n[verdict]
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("cells of the claim's map")
    ax.legend(fontsize=7, ncols=4, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    cells = sum(len(o.cells) for o in outcomes)
    # (pad: above the legend's row)
    ax.set_title(f"Claims atlas (simulator): the verdict of every cell of each claim's map\n"
                 f"{cells} cells; each claim's first reading, on its primary metric",
                 fontsize=9, pad=22)  # fmt: skip
    fig.tight_layout()
    return fig


def plot(outcomes: list[atlas.ClaimOutcome], out: Path) -> Path:
    """:func:`atlas_figure` into ``out/atlas.png``."""
    fig = atlas_figure(outcomes)
    path = out / "atlas.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


MAP_CLAIMS = ("beamer", "jpas", "hermes", "varys")


def build_parser() -> argparse.ArgumentParser:
    """``hpo-reproduce``'s command line."""
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulator-only", action="store_true",
                        help="only the simulator (no root, no testbed)")  # fmt: skip
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a coarse atlas (fewer dimensions varied, fewer seeds) and one testbed seed, "
        "without the testbed's confirmation of the maps",
    )
    parser.add_argument(
        "--testbed-results",
        type=Path,
        metavar="DIR",
        help="take the testbed's claim from a finished hpo-testbed experiment in DIR "
        "(its summary.json keeps its own provenance) instead of running it",
    )
    parser.add_argument("--seeds", type=positive(int),
                        help="pilot seeds per cell (default: 4 with --quick, else 5)")  # fmt: skip
    parser.add_argument(
        "--max-seeds",
        type=positive(int),
        help="seeds an undecided cell may grow to (default: 8 with --quick, else 12)",
    )
    parser.add_argument(
        "--testbed-seeds",
        type=non_negative(int),
        nargs="+",
        help="seeds of the testbed experiment (default: 1 with --quick, else 1 2 3)",
    )
    parser.add_argument(
        "--claims",
        nargs="+",
        default=[*MAP_CLAIMS, "optimum"],
        choices=[*MAP_CLAIMS, "optimum"],
        help="claims to run (default: all; optimum: BSSI and Beamer against brute force)",
    )
    parser.add_argument(
        "--policy",
        nargs="+",
        default=[],
        type=policy_name,
        metavar="POLICY",
        help=f"network policies of your own, each mapped beside the paper's readings on the "
        f"Beamer, JPAS and Varys maps' grid cells against the same baselines: "
        f"{policy_help(POLICY_NAMES)}",
    )
    # (not "none": the Hermes map is time-sharing)
    add_gpu_policy_argument(parser, [], "GPU policies of your own, mapped likewise on the "
                            "Hermes map", none=False)  # fmt: skip
    parser.add_argument("--out", type=output_folder, default="results/report",
                        help="output folder (default: results/report)")  # fmt: skip
    add_sweep_arguments(parser)
    return parser


@dataclass(frozen=True)
class ReportSettings:
    """What a report runs (the command line's flags, checked and with defaults filled in).

    Attributes:
        out: the report's folder (absolute; the testbed experiment runs from the checkout).
        mode: ``simulator-only``, ``with the testbed`` or ``testbed results given``.
        quick: the quick maps (fewer cells and seeds; no testbed confirmation).
        claims: the claims to map (:data:`experiments.claims.CLAIMS` keys and ``optimum``).
        seeds: the pilot's seeds per cell; max_seeds: at most, for an undecided cell.
        testbed_seeds: the main testbed experiment's seeds.
        testbed_results: where the main testbed experiment's results are read from.
        policies, gpu_policies: policies of one's own, further readings of the maps.
        sweep: how the points run.
    """

    out: Path
    mode: str
    quick: bool
    claims: tuple[str, ...]
    seeds: int
    max_seeds: int
    testbed_seeds: tuple[int, ...]
    testbed_results: Path | None
    policies: tuple[str, ...]
    gpu_policies: tuple[str, ...]
    sweep: SweepSettings


def checked_arguments(parser: argparse.ArgumentParser, argv) -> ReportSettings:
    """The report's settings from the command line, defaults filled in and ``mode`` set
    (simulator-only, with the testbed, or testbed results given); a contradiction is
    ``parser.error``. The folder is made."""
    args = parser.parse_args(argv)
    seeds = args.seeds or (4 if args.quick else 5)
    max_seeds = args.max_seeds or (8 if args.quick else 12)
    if seeds < 2:
        parser.error("--seeds must be >= 2 (an interval needs two)")
    if max_seeds < seeds:
        parser.error("--max-seeds must be >= --seeds")
    if args.simulator_only and args.testbed_results is not None:
        parser.error("--simulator-only and --testbed-results exclude each other")
    mode = "simulator-only" if args.simulator_only else "with the testbed"
    if args.testbed_results is not None:
        mode = "testbed results given"
        if not (args.testbed_results / "summary.json").is_file():
            parser.error(f"--testbed-results {args.testbed_results}: no summary.json there")
    testbed_seeds = args.testbed_seeds or ([1] if args.quick else [1, 2, 3])
    if mode == "with the testbed" and os.geteuid() != 0:
        parser.error("the testbed needs root: run as root, or use --simulator-only")
    out = args.out.resolve()  # the testbed experiment runs from the checkout's root
    out.mkdir(parents=True, exist_ok=True)
    return ReportSettings(
        out=out, mode=mode, quick=args.quick, claims=tuple(args.claims), seeds=seeds,
        max_seeds=max_seeds, testbed_seeds=tuple(testbed_seeds),
        testbed_results=args.testbed_results, policies=tuple(args.policy or ()),
        gpu_policies=tuple(args.gpu_policy or ()), sweep=SweepSettings.of(args),
    )  # fmt: skip


def summary_json(meta: dict, outcomes: list[atlas.ClaimOutcome], claims: list[Claim],
                 testbed: dict | None, confirmations: Sequence[confirm.Confirmation],
                 out: Path) -> dict:  # fmt: skip
    """``summary.json``: the run's settings and provenance, every map's verdict counts, every
    claim's comparisons and the testbed's against the simulator."""
    return {
        **meta,
        "maps": [
            {
                "claim": o.claim.key,
                "cells": len(o.cells),
                "verdicts": atlas.counts(o.claim, o.cells),
                "map_wide": o.map_wide,
                "files": {k: str(v.relative_to(out)) for k, v in o.files.items()},
            }
            for o in outcomes
        ],
        "claims": [
            {
                "name": c.name,
                "verdict": c.verdict,
                "setting": c.setting,
                "metric": c.metric,
                "context": [
                    {"what": label, "mean": r.mean, "low": r.low, "high": r.high, "n": r.n}
                    for label, r in c.context
                    if r is not None
                ],
                "comparisons": [
                    {
                        "baseline": x.baseline,
                        "verdict": x.verdict,
                        "mean": None if x.ratio is None else x.ratio.mean,
                        "low": None if x.ratio is None else x.ratio.low,
                        "high": None if x.ratio is None else x.ratio.high,
                        "n": None if x.ratio is None else x.ratio.n,
                    }
                    for x in c.comparisons
                ],
            }
            for c in claims
        ],
        "simulator_vs_testbed": None if testbed is None else agreement(testbed),
        "testbed_confirmation": [row for c in confirmations for row in confirmation_rows(c)],
        "testbed_verdicts": None
        if testbed is None
        else [
            row
            for claimed, baselines, metric in TESTBED_CLAIMS
            for row in predicted_against_measured(testbed, claimed, baselines, metric)
        ],
    }


def print_verdicts(outcomes: list[atlas.ClaimOutcome], claims: list[Claim]) -> None:
    """The verdict counts per map and each claim's verdict, on the terminal."""
    print()
    for o in outcomes:
        print(f"{o.claim.name:<8} " + "; ".join(
            f"vs {b}: " + ", ".join(f"{v} {k}" for k, v in n.items() if v)
            for b, n in atlas.counts(o.claim, o.cells).items()
        ))  # fmt: skip
    for c in claims:
        print(f"{c.name:<8} {c.verdict}")


def map_claims(settings: ReportSettings, progress: Callable[[str], None]
               ) -> tuple[list[atlas.ClaimOutcome], list[Claim]]:  # fmt: skip
    """The simulator's part: the maps asked for (with the user's policies as further readings)
    and the bound checks against brute force. Raises :class:`SweepError` if points failed."""
    maps = [claim_map.with_policies(CLAIMS[name], settings.policies, settings.gpu_policies)
            for name in settings.claims if name in MAP_CLAIMS]  # fmt: skip
    outcomes = atlas.run_atlas(maps, settings.out, settings.sweep, settings.quick,
                               settings.seeds, settings.max_seeds, progress)  # fmt: skip
    claims: list[Claim] = []
    if "optimum" in settings.claims:
        parts = [{"claim": "optimum", "part": part, "contended": True}
                 for part in ("bssi", "stages")]  # fmt: skip
        results = run_points(parts, run_optimum_point, settings.out / "points", settings.sweep,
                             label="bound checks")  # fmt: skip
        claims += against_brute_force({p["part"]: r for p, r in zip(parts, results, strict=True)})
    return outcomes, claims


def testbed_part(settings: ReportSettings, progress: Callable[[str], None]
                 ) -> tuple[dict | None, list[confirm.Confirmation], tuple[int, ...]]:  # fmt: skip
    """The testbed's part: the main experiment (run as root, or read from
    ``--testbed-results``; none when simulator-only), the maps' confirmations (run with the
    testbed, read with ``--testbed-results``, skipped with ``--quick``) and the main
    experiment's seeds (those of the results read, if given)."""
    testbed, seeds = None, settings.testbed_seeds
    if settings.testbed_results is not None:
        testbed = confirm.load_testbed_experiment(settings.testbed_results)
        seeds = tuple(testbed["workload"]["seeds"])
    elif settings.mode == "with the testbed":
        testbed = run_testbed_experiment(list(seeds), settings.out / "testbed", progress)
    confirmations = []
    if settings.mode != "simulator-only" and not settings.quick:
        for key in (k for k in settings.claims if k in TESTBED_MAPS):
            confirmations.append(confirm.confirm(
                CLAIMS[key], settings.out / "confirm", settings.sweep, progress=progress,
                run=settings.mode == "with the testbed"))  # fmt: skip
    return testbed, confirmations, seeds


def main(argv=None) -> int:
    """Map the claims (and run the testbed experiment), write the report; the exit status."""
    settings = checked_arguments(build_parser(), argv)
    started = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", flush=True)

    try:
        outcomes, claims = map_claims(settings, progress)
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    testbed, confirmations, testbed_seeds = testbed_part(settings, progress)
    if testbed is not None:
        claims.append(beamer_testbed(testbed))
    meta = {
        "mode": settings.mode,
        "quick": settings.quick,
        "seeds": settings.seeds,
        "max_seeds": settings.max_seeds,
        "testbed_seeds": None if testbed is None else list(testbed_seeds),
        "wall_s": time.perf_counter() - started,
        "provenance": provenance(sys.argv[1:] if argv is None else argv),
    }
    path = report(outcomes, claims, meta, settings.out, testbed, confirmations)
    plot(outcomes, settings.out)
    write_json(
        settings.out / "summary.json",
        summary_json(meta, outcomes, claims, testbed, confirmations, settings.out),
    )
    print_verdicts(outcomes, claims)
    print(f"\n{path} ({meta['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
