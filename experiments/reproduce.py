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
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
from cli.sweep import SweepError, run_points  # noqa: E402
from cli.sweep import add_arguments as add_sweep_arguments  # noqa: E402
from controller.stats import (  # noqa: E402
    Interval,
    format_interval,
    format_percent,
    mean_ci,
    paired_ratio_ci,
)
from experiments import atlas, atlas_points, claim_map, confirm  # noqa: E402
from experiments.claims import CLAIMS, TESTBED_MAPS  # noqa: E402
from experiments.figures import error_bars, spread_note  # noqa: E402
from experiments.verdicts import MARGIN, Decision, Verdict, decide  # noqa: E402
from simulator.metrics import provenance, write_json  # noqa: E402
from workloads.gpu import add_gpu_policy_argument  # noqa: E402

# the checkout this runs from (the testbed experiment runs from it)
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Comparison:
    """The claimed policy against one baseline: a paired :class:`Decision` over seeds, or a
    proven bound checked over instances (``ratio`` spans them: low the best, high the worst;
    one instance above ``bound`` disproves it)."""

    baseline: str
    ratio: Interval | None
    bound: float | None = None
    decision: Decision | None = None

    @property
    def verdict(self) -> str:
        """Reproduced / opposite (a bound: held / broken), else the decision's verdict."""
        if self.bound is not None and self.ratio is not None:
            return "reproduced" if self.ratio.high <= self.bound else "opposite"
        if self.decision is not None:
            return self.decision.verdict.value
        return "not measured"


@dataclass
class Claim:
    """A claim checked at one setting (the bounds, the testbed): its comparisons."""

    name: str
    paper: str
    statement: str
    setting: str
    metric: str
    comparisons: list[Comparison] = field(default_factory=list)
    note: str = ""
    # measured in the same setting to explain the verdict, not part of it
    context: list[tuple[str, Interval | None]] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """The comparisons' verdict if they agree, else each baseline's."""
        verdicts = {c.verdict for c in self.comparisons}
        if len(verdicts) == 1:
            return verdicts.pop()
        return "; ".join(f"{c.verdict} vs {c.baseline}" for c in self.comparisons)


def paired_comparisons(
    values: dict[str, dict[int, float]], claimed: str, baselines, lower: bool = True
) -> list[Comparison]:
    """The claimed policy against each baseline, paired per seed, one Holm family."""
    families = {}
    for b in baselines:
        mine, theirs = values.get(claimed, {}), values.get(b, {})
        ratios = [mine[s] / theirs[s] for s in sorted(mine) if s in theirs
                  and mine[s] and theirs[s] and mine[s] > 0 and theirs[s] > 0]  # fmt: skip
        if ratios:
            families[b] = ratios
    decisions = decide(families, lower) if families else {}
    return [
        Comparison(b, decisions[b].ratio if b in decisions else None, decision=decisions.get(b))
        for b in baselines
    ]


TESTBED_POLICIES = ("beamer", "sincronia", "fifo-lm", "fair", "jpas")
AGREEMENT = 0.15  # the simulator should predict the testbed's average SCT within this


SINCRONIA_BOUND = 4.0  # BSSI + greedy strict priority, zero release times (Sincronia)
BEAMER_BOUND = 20.0 / 3.0  # average SCT of Beamer's order (Beamer)


def spread(ratios: list[float]) -> Interval:
    """Ratios to the optimum over instances: their mean, best and worst."""
    return Interval(sum(ratios) / len(ratios), min(ratios), max(ratios), len(ratios))


def bssi_ratios() -> dict:
    """BSSI's order against the best of every order on small instances (a sweep point), with
    a uniformly random order's expected ratio and the worst order's beside it: on the random
    instances, and on instances where the order matters (:func:`reference.contended_coflows`),
    where an ordering no better than chance would fail the check."""
    from controller.policies import make_policy
    from simulator import reference

    rng = random.Random("report-bssi")
    out: dict[str, list[float]] = {
        key + suffix: [] for key in ("bssi", "random", "worst") for suffix in ("", "_contended")
    }

    def measure(state, suffix: str) -> None:
        best, values = reference.brute_force_best(state)
        ours = reference.order_value(state, make_policy("sincronia").schedule(state).order)
        out["bssi" + suffix].append(ours / best)
        out["random" + suffix].append(sum(values) / len(values) / best)
        out["worst" + suffix].append(max(values) / best)

    for weighted in (False, True):
        for n in range(2, reference.MAX_COFLOWS + 1):
            for _ in range(6):
                measure(reference.state_of(reference.random_coflows(rng, n, 4, weighted)), "")
    contended = random.Random("report-bssi-contended")
    for n in range(4, reference.MAX_COFLOWS + 1):
        for _ in range(8):
            measure(reference.state_of(reference.contended_coflows(contended, n)), "_contended")
    return out


def stage_ratios() -> dict:
    """Beamer's and Sincronia's orders against the best order's average SCT (a sweep point)."""
    from controller.policies import make_policy
    from simulator import reference

    rng = random.Random("report-beamer")
    out: dict[str, list[float]] = {key + suffix: [] for key in ("beamer", "sincronia", "random",
                                   "worst") for suffix in ("", "_contended")}  # fmt: skip

    def measure(state, suffix: str) -> None:
        values = reference.every_order_stage_completion_sums(state)
        best = min(values)
        for policy in ("beamer", "sincronia"):
            order = make_policy(policy).schedule(state).order
            out[policy + suffix].append(reference.stage_completion_sum(state, order) / best)
        out["random" + suffix].append(sum(values) / len(values) / best)
        out["worst" + suffix].append(max(values) / best)

    for n_stages in (2, 3, 4):
        for n_hosts in (3, 5):
            for _ in range(8):
                state = reference.stage_instance(rng, n_stages, max_jobs=2, n_hosts=n_hosts)
                if len(state.coflows) <= reference.MAX_COFLOWS:
                    measure(state, "")
    contended = random.Random("report-beamer-contended")
    for n_stages in (3, 4):
        for _ in range(12):
            state = reference.contended_stage_instance(contended, n_stages, max_jobs=2)
            if len(state.coflows) <= reference.MAX_COFLOWS:
                measure(state, "_contended")
    return out


def against_brute_force(results: dict[str, dict]) -> list[Claim]:
    """BSSI's and Beamer's orders against the best of every order on small instances."""
    from simulator import reference

    coflows, stages = results["bssi"], results["stages"]
    bssi = coflows["bssi"]
    beamer, sincronia = stages["beamer"], stages["sincronia"]
    n_contended = len(coflows["bssi_contended"])
    return [
        Claim(
            "BSSI (Sincronia)", "Agarwal et al., SIGCOMM 2018",
            "BSSI with greedy strict priority is within 4x of the optimal total weighted CCT "
            "(all coflows released at 0)",
            f"{len(bssi)} random instances of 2-{reference.MAX_COFLOWS} coflows of 1-3 flows on 4 "
            "hosts, half of them weighted; the optimum by trying every order",
            "total weighted CCT / the best order's: mean [best, worst] over the instances",
            [Comparison("brute force", spread(bssi), bound=SINCRONIA_BOUND),
             Comparison("brute force, contended instances", spread(coflows["bssi_contended"]),
                        bound=SINCRONIA_BOUND)],
            context=[
                ("a uniformly random order on the random instances", spread(coflows["random"])),
                ("the worst order on them", spread(coflows["worst"])),
                (f"BSSI on {n_contended} contended instances (4-{reference.MAX_COFLOWS} coflows "
                 "from one shared port, sizes over three orders of magnitude)",
                 spread(coflows["bssi_contended"])),
                ("a uniformly random order on the contended ones",
                 spread(coflows["random_contended"])),
                ("the worst order on them", spread(coflows["worst_contended"])),
            ],
        ),
        Claim(
            "Beamer vs brute force", "He et al., IEEE TNSM 19(2), 2022",
            "Beamer's order keeps the average SCT within 20/3 of optimal",
            f"{len(beamer)} random instances of 2-4 stages of 1-2 jobs (one in-flight coflow "
            f"each, at most {reference.MAX_COFLOWS}) on 3 or 5 hosts; the optimum by trying every "
            "order",
            "average SCT / the best order's: mean [best, worst] over the instances",
            [Comparison("brute force", spread(beamer), bound=BEAMER_BOUND),
             Comparison("brute force, contended instances", spread(stages["beamer_contended"]),
                        bound=BEAMER_BOUND)],
            context=[("Sincronia's order on the same instances, average SCT / the best order's",
                      spread(sincronia)),
                     ("a uniformly random order on them", spread(stages["random"])),
                     ("the worst order on them", spread(stages["worst"])),
                     (f"Beamer on {len(stages['beamer_contended'])} contended instances (3-4 "
                      "stages, every job on one shared port, stage sizes over three orders of "
                      "magnitude)", spread(stages["beamer_contended"])),
                     ("Sincronia on them", spread(stages["sincronia_contended"])),
                     ("a uniformly random order on them", spread(stages["random_contended"])),
                     ("the worst order on them", spread(stages["worst_contended"]))],
        ),
    ]  # fmt: skip


def run_testbed_experiment(seeds: list[int], out: Path, progress) -> dict:
    """The main testbed experiment, calibrated, as ``hpo-testbed`` runs it (root);
    returns its ``summary.json`` with the per-run results under ``"runs"``."""
    command = [
        sys.executable, "-m", "experiments.run_testbed", "--calibrate",
        "--policy", *TESTBED_POLICIES, "--seeds", *map(str, seeds), "--out", str(out),
    ]  # fmt: skip
    progress(f"testbed: {' '.join(command[2:])}")
    run = subprocess.run(command, cwd=ROOT, text=True)
    if run.returncode != 0 and not (out / "summary.json").exists():
        raise SystemExit(f"the testbed experiment failed (exit {run.returncode}); see above")
    testbed = confirm.load_testbed_experiment(out)
    for failure in testbed.get("failures", []):  # the report is made of the runs that finished
        progress(f"testbed: {failure['policy']} seed {failure['seed']} failed: {failure['error']}")
    return testbed


def enforcement(testbed: dict) -> str:
    """Where the testbed served the levels and how its TCP was set, in words."""
    where = "the switch and the hosts" if testbed.get("host_priorities") else "the switch only"
    cap = testbed.get("tcp_rto_max_ms")
    rto = f"TCP timeout capped at {cap / 1000:g} s" if cap else "Linux's TCP timeouts"
    return f"priorities at {where}, {rto}"


def beamer_testbed(testbed: dict) -> Claim:
    """Beamer's claim on the testbed's main experiment."""
    values = {p: {} for p in TESTBED_POLICIES}
    for run in testbed["runs"]:
        values[run["policy"]][run["seed"]] = run["sct_s"]["mean"]
    w = testbed["workload"]
    return Claim(
        "Beamer (testbed)", "He et al., IEEE TNSM 19(2), 2022",
        "stage-aware coflow scheduling lowers the average SCT against Sincronia, FIFO-LM and "
        "per-flow fair sharing",
        f"Mininet testbed, {w['hosts']} hosts on one switch, {testbed['link_gbps']:g} Gbit/s "
        f"modelled at {testbed['emulated_link_bps'] / 1e6:g} Mbit/s, {w['tasks']} tasks of "
        f"successive halving ({w['configs']} configurations, eta {w['eta']}, "
        f"{w['min_iterations']} iterations first, {'/'.join(w['patterns'])}), "
        f"{len(w['seeds'])} seed(s), {enforcement(testbed)}",
        "average SCT, Beamer / baseline",
        paired_comparisons(values, "beamer", ("sincronia", "fifo-lm", "fair")),
    )  # fmt: skip


def agreement(testbed: dict) -> list[dict]:
    """Per policy: the testbed's average SCT, the simulator's raw and calibrated predictions,
    and whether the calibrated one is within :data:`AGREEMENT`; plus, for every other policy
    the testbed clearly separates it from, whether the calibrated simulator ranks the two the
    same.

    Policies are compared as everywhere else in the project: by their ratio paired per seed (the
    same workload under both), separated where its 95 % interval excludes 1. The absolute
    intervals over seeds mostly measure how the seeds' workloads differ and almost never
    separate. The simulator agrees if its own paired ratio (the geometric mean over the same
    seeds) lies on the same side of 1."""
    bed: dict[str, dict] = {}
    sim: dict[str, dict] = {}
    for run in testbed.get("runs", []):
        bed.setdefault(run["policy"], {})[run["seed"]] = run["sct_s"].get("mean")
        calibrated = run.get("simulated_calibrated") or {}
        sim.setdefault(run["policy"], {})[run["seed"]] = calibrated.get("sct_s", {}).get("mean")
    rows = []
    policies = testbed["policies"]
    for name, entry in policies.items():
        calibrated = entry.get("calibrated_sim_over_testbed_avg_sct")
        rows.append({
            "policy": name,
            "testbed": entry["avg_sct_s"],
            "simulator": entry["sim_avg_sct_s"],
            "calibrated": entry.get("calibrated_sim_avg_sct_s"),
            "calibrated_over_testbed": calibrated,
            "within": None if calibrated is None
            else abs(calibrated["mean"] - 1) <= AGREEMENT,
            "busiest_port": entry.get("busiest_port_busy"),
            "wire_busiest_port": entry.get("wire_busiest_port_busy"),
            "ranking": [],
        })  # fmt: skip
    for row in rows:
        name = row["policy"]
        for other in policies:
            if other == name or row["calibrated"] is None:
                continue
            measured = paired_ratio_ci(bed.get(name, {}), bed.get(other, {}))
            if measured is None or measured.n < 2 or not measured.high < 1:
                continue  # not clearly faster on the testbed
            predicted = paired_ratio_ci(sim.get(name, {}), sim.get(other, {}))
            row["ranking"].append({
                "faster_than": other,
                "testbed_ratio": measured.to_json(),
                "simulator_ratio": None if predicted is None else predicted.mean,
                "simulator_interval": None if predicted is None else predicted.to_json(),
                "simulator_agrees": predicted is not None and predicted.mean < 1,
            })  # fmt: skip
    return rows


def run_optimum_point(point: dict) -> dict:
    """One part of the bound checks (a sweep point, see cli.sweep): BSSI's or Beamer's ratios."""
    return bssi_ratios() if point["part"] == "bssi" else stage_ratios()


def predicted_against_measured(
    testbed: dict, claimed: str, baselines, metric: str = "sct_s", statistic: str = "mean"
) -> list[dict]:
    """Per baseline: the verdict the calibrated simulator predicts (its runs beside the
    testbed's, on the same workload and seeds) and the testbed's own, each by the verdict rule
    over the seeds (``metric``'s ``statistic`` per run), and whether the two agree."""
    bed: dict[str, dict] = {}
    sim: dict[str, dict] = {}
    for run in testbed.get("runs", []):
        measured = (run.get(metric) or {}).get(statistic)
        bed.setdefault(run["policy"], {})[run["seed"]] = measured
        calibrated = (run.get("simulated_calibrated") or {}).get(metric) or {}
        sim.setdefault(run["policy"], {})[run["seed"]] = calibrated.get(statistic)
    baselines = [b for b in baselines if b in bed]
    if claimed not in bed or not baselines:
        return []
    measured = paired_comparisons(bed, claimed, baselines)
    predicted = paired_comparisons(sim, claimed, baselines)
    return [
        {
            "claimed": claimed,
            "baseline": m.baseline,
            "metric": metric,
            "predicted": p.verdict,
            "predicted_ratio": None if p.ratio is None else p.ratio.to_json(),
            "measured": m.verdict,
            "measured_ratio": None if m.ratio is None else m.ratio.to_json(),
            "agree": p.verdict == m.verdict,
        }
        for p, m in zip(predicted, measured, strict=True)
        if p.ratio is not None and m.ratio is not None  # (a metric the runs did not record)
    ]


TESTBED_CLAIMS = (("beamer", ("sincronia", "fifo-lm", "fair"), "sct_s"),
                  ("jpas", ("fair", "sincronia"), "time_to_90pct_s"))  # fmt: skip


def verdict_lines(testbed: dict) -> list[str]:
    """The verdicts the calibrated simulator predicts against the testbed's, per claim and
    baseline."""
    rows = [row for claimed, baselines, metric in TESTBED_CLAIMS
            for row in predicted_against_measured(testbed, claimed, baselines, metric)]  # fmt: skip
    if not rows:
        return []
    lines = ["", "Verdicts on the testbed's seeds: what the calibrated simulator predicts (its "
             "runs beside the testbed's) and what the testbed measured, by the same rule:", "",
             "| policy / baseline | metric | predicted | measured | agree |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip

    def text(verdict: str, ratio: dict | None) -> str:
        return verdict if ratio is None else f"{format_interval(ratio, 3)} {verdict}"

    for r in rows:
        lines.append(f"| {r['claimed']} / {r['baseline']} | {r['metric']} | "
                     f"{text(r['predicted'], r['predicted_ratio'])} | "
                     f"{text(r['measured'], r['measured_ratio'])} | "
                     f"{'yes' if r['agree'] else 'no'} |")  # fmt: skip
    return lines


def confirmation_rows(c: confirm.Confirmation) -> list[dict]:
    """Per chosen cell, baseline and metric of the claim: the verdict of the simulator's map
    (its seeds), the calibrated simulator's beside the testbed (the testbed's seeds) and the
    testbed's, and whether the last two agree."""
    small, default = c.small.claim, c.small.claim.readings[0].label
    rows = []
    for role, cell in c.chosen.items():
        testbed = c.testbeds.get(role)
        for metric in small.metrics:
            key, statistic = atlas_points.RUN_METRICS[metric.key]
            measured = {} if testbed is None else {
                r["baseline"]: r for r in predicted_against_measured(
                    testbed, small.readings[0].policy, [b.policy for b in small.baselines],
                    key, statistic)}  # fmt: skip
            for b in small.baselines:
                mapped = cell.decisions.get((default, b.label, metric.key))
                row = measured.get(b.policy, {})
                rows.append({
                    "claim": c.claim.key, "cell": cell.cell, "role": role,
                    "baseline": b.label, "metric": metric.key,
                    "map": None if mapped is None else mapped.verdict.value,
                    "map_ratio": None if mapped is None else mapped.ratio.to_json(),
                    "predicted": row.get("predicted"),
                    "predicted_ratio": row.get("predicted_ratio"),
                    "measured": row.get("measured"),
                    "measured_ratio": row.get("measured_ratio"),
                    "agree": row.get("agree"),
                })  # fmt: skip
    return rows


def confirmation_lines(c: confirm.Confirmation, out: Path) -> list[str]:
    """A claim's testbed confirmation in ``REPORT.md``: the simulator's map at the testbed's
    size, the two cells the testbed ran, and per cell and baseline the verdicts predicted and
    measured; then each policy's value on the testbed against the calibrated simulator."""
    small, claim = c.small.claim, c.claim
    default, primary = small.readings[0].label, small.metrics[0]
    seeds = sorted({s for t in c.testbeds.values() for s in t["workload"]["seeds"]})
    lines = [
        "", f"## {claim.name} on the testbed", "",
        f"The simulator's map at the testbed's size ({_settings(small.base)}), "
        f"{primary.label}, `{default}` / baseline:", "",
        *atlas.table(small, c.small.cells, default, primary.key), "",
        f"The testbed ran the cell where this map predicts the largest effect and the one "
        f"where it predicts the least (`experiments/confirm.py`), seeds {seeds}, every policy "
        "on the same seeds, priorities served as in the main experiment; beside every run the "
        "simulator on the same workload and seed, calibrated with the testbed's measured "
        "overheads. *Predicted*: the calibrated simulator's verdict over those runs; "
        "*measured*: the testbed's, by the same rule.", "",
    ]  # fmt: skip
    rows = confirmation_rows(c)
    if not c.testbeds:
        chosen = "; ".join(f"{confirm.ROLES[role]}: {', '.join(cell.cell.values())}"
                           for role, cell in c.chosen.items())  # fmt: skip
        return lines + [f"Cells chosen ({chosen}) not run on the testbed yet: "
                        "`sudo .venv/bin/hpo-reproduce` runs them.", ""]  # fmt: skip
    if (figure := confirmation_plot(c, rows, out)) is not None:
        lines += [f"![{claim.name} on the testbed]({figure.name})", ""]
    lines += ["| cell | chosen as | metric | baseline | simulator's map | predicted | measured "
              "| agree |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    labels = {m.key: m.label for m in small.metrics}

    def text(verdict: str | None, ratio: dict | None) -> str:
        if verdict is None or ratio is None:
            return verdict or "-"
        return f"{format_interval(ratio, 3)} {verdict}"

    for r in rows:
        agree = "-" if r["agree"] is None else "yes" if r["agree"] else "no"
        lines.append(f"| {', '.join(r['cell'].values())} | {confirm.ROLES[r['role']]} | "
                     f"{labels[r['metric']]} | {r['baseline']} | "
                     f"{text(r['map'], r['map_ratio'])} | "
                     f"{text(r['predicted'], r['predicted_ratio'])} | "
                     f"{text(r['measured'], r['measured_ratio'])} | {agree} |")  # fmt: skip
    judged = [r for r in rows if r["agree"] is not None]
    lines += ["", f"Verdicts agree in {sum(r['agree'] for r in judged)} of {len(judged)} "
              "comparisons.", "", f"{primary.label} per policy, mean +/- 95 % CI over the seeds "
              "(s):", "", "| cell | policy | testbed | simulator | calibrated | calibrated / "
              "testbed |", "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    key, statistic = atlas_points.RUN_METRICS[primary.key]
    for role, testbed in c.testbeds.items():
        cell = ", ".join(c.chosen[role].cell.values())
        for policy, values in per_policy(testbed, key, statistic).items():
            shown = [values[k] for k in ("testbed", "simulator", "calibrated")]
            texts = [format_interval(v, 1) for v in shown]
            texts.append(format_interval(values["calibrated_over_testbed"], 2))
            lines.append(f"| {cell} | {policy} | " + " | ".join(texts) + " |")
    return lines


def per_policy(testbed: dict, metric: str, statistic: str) -> dict[str, dict[str, Interval | None]]:
    """Per policy: ``metric``'s ``statistic`` on the testbed, the simulator's (raw and
    calibrated) beside it, and calibrated over testbed paired per seed, each mean and CI over
    the seeds."""
    out = {}
    for run in testbed.get("runs", []):
        values = out.setdefault(run["policy"], {"testbed": [], "simulator": [], "calibrated": [],
                                                "calibrated_over_testbed": []})  # fmt: skip
        bed = (run.get(metric) or {}).get(statistic)
        raw = ((run.get("simulated") or {}).get(metric) or {}).get(statistic)
        calibrated = ((run.get("simulated_calibrated") or {}).get(metric) or {}).get(statistic)
        values["testbed"].append(bed)
        values["simulator"].append(raw)
        values["calibrated"].append(calibrated)
        if bed and calibrated:
            values["calibrated_over_testbed"].append(calibrated / bed)
    return {policy: {k: mean_ci(v) for k, v in values.items()} for policy, values in out.items()}


def _settings(settings: dict) -> str:
    """A testbed-size map's base settings in words."""
    return (f"{settings['n_hosts']} hosts, {settings['n_tasks']} tasks of "
            f"{settings['configs_per_task']} configurations, {settings['search']}, "
            f"{settings['min_iterations']} iterations first, {'/'.join(settings['patterns'])}, "
            f"{settings['link_bps'] / 1e9:g} Gbit/s")  # fmt: skip


def confirmation_figure(c: confirm.Confirmation, rows: list[dict]):
    """Per chosen cell, the primary metric's ratio to each baseline: the simulator's map, the
    calibrated simulator beside the testbed and the testbed, each with its 95 % interval where
    it has one (two seeds or more)."""
    primary = c.small.claim.metrics[0].key
    rows = [r for r in rows if r["metric"] == primary]
    roles = list(c.chosen)
    sources = (("map_ratio", "simulator's map", "tab:grey", "s"),
               ("predicted_ratio", "calibrated simulator", "tab:blue", "o"),
               ("measured_ratio", "testbed", "tab:red", "D"))  # fmt: skip
    fig, axes = plt.subplots(1, len(roles), figsize=(4.2 * len(roles), 2.8), sharex=True,
                             squeeze=False)  # fmt: skip
    seeds = []
    for ax, role in zip(axes[0], roles, strict=True):
        mine = [r for r in rows if r["role"] == role]
        for i, r in enumerate(mine):
            for j, (key, label, colour, marker) in enumerate(sources):
                if r[key] is None:
                    continue
                ratio, y = Interval.from_json(r[key]), i + (j - 1) * 0.22
                ax.plot(ratio.mean, y, marker=marker, linestyle="none", color=colour,
                        label=label if i == 0 else None)  # fmt: skip
                error_bars(ax, [y], [ratio], horizontal=True, color=colour, capsize=2)
                seeds.append(ratio.n)
        ax.axvspan(1 - MARGIN, 1 + MARGIN, color="0.9", zorder=0)
        ax.axvline(1, color="black", linewidth=0.6)
        ax.set_yticks(range(len(mine)), [f"vs {r['baseline']}" for r in mine], fontsize=8)
        ax.set_ylim(len(mine) - 0.5, -0.5)  # every row in full, the first on top
        ax.set_title(f"{', '.join(c.chosen[role].cell.values())}\n({confirm.ROLES[role]})",
                     fontsize=8)  # fmt: skip
    for ax in axes[0]:
        ax.set_xlabel(f"{c.small.claim.readings[0].label} / baseline ({spread_note(seeds)})",
                      fontsize=8)  # fmt: skip
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper center", ncols=3)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    return fig


def confirmation_plot(c: confirm.Confirmation, rows: list[dict], out: Path) -> Path | None:
    """:func:`confirmation_figure` into ``out/confirm-<claim>.png``."""
    fig = confirmation_figure(c, rows)
    path = out / f"confirm-{c.claim.key}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def agreement_lines(rows: list[dict], testbed: dict) -> list[str]:
    """The simulator-against-testbed section of ``REPORT.md``."""
    overheads = testbed.get("overheads") or {}
    lines = [
        "",
        "## The simulator against the testbed",
        "",
        f"Main testbed experiment, average SCT in s, mean +/- 95 % CI over seeds "
        f"{testbed['workload']['seeds']}. *Simulator*: the fluid model on the same workload, "
        "seed, link rate and bytes; *calibrated*: the same with the testbed's overheads, "
        f"measured once before the runs and the same for every policy (job start-up "
        f"{overheads.get('job_startup_s', float('nan')):.2f} s, goodput "
        f"{overheads.get('goodput', float('nan')):.3f} of the line rate; "
        "`hpo-calibrate`). Target: calibrated within "
        f"{AGREEMENT:.0%} of the testbed. *Busiest port*: its busy share while stages run, by "
        "the workload's bytes at the line rate / by the switch port's byte counter (the wire).",
        "",
        "| policy | testbed | simulator | calibrated | calibrated / testbed | within "
        f"{AGREEMENT:.0%} | ranking where the testbed separates policies (paired per seed) "
        "| busiest port % (bytes / wire) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        ranking = (
            "; ".join(
                f"faster than {r['faster_than']} "
                f"({format_interval(r['testbed_ratio'], 3)}): simulator "
                + ("agrees" if r["simulator_agrees"] else "disagrees")
                + (
                    ""
                    if r["simulator_interval"] is None
                    else f" ({format_interval(r['simulator_interval'], 3)})"
                )
                for r in row["ranking"]
            )
            or "-"
        )
        within = "-" if row["within"] is None else "yes" if row["within"] else "no"
        lines.append(
            f"| {row['policy']} | {format_interval(row['testbed'], 1)} | "
            f"{format_interval(row['simulator'], 1)} | {format_interval(row['calibrated'], 1)} | "
            f"{format_interval(row['calibrated_over_testbed'], 2)} | {within} | {ranking} | "
            f"{format_percent(row.get('busiest_port'))} / "
            f"{format_percent(row.get('wire_busiest_port'))} |"
        )
    return lines


def testbed_provenance(testbed: dict | None) -> list[str]:
    """Where the testbed's numbers come from (its own run, possibly an earlier one)."""
    if testbed is None:
        return []
    p = testbed["provenance"]
    dirty = " (with uncommitted changes)" if p["git_dirty"] else ""
    lines = [f"- testbed experiment: git commit {p['git_commit']}{dirty}, command "
             f"`{' '.join(p['command'])}`; {enforcement(testbed)}"]  # fmt: skip
    lines += [f"- testbed run that failed and is left out: {f['policy']}, seed {f['seed']}: "
              f"{f['error']}" for f in testbed.get("failures", [])]  # fmt: skip
    return lines


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
    """Per claim and baseline, the cells of each verdict as one stacked bar."""
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


def checked_arguments(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """The parsed command line with its defaults filled in and ``mode`` set (simulator-only,
    with the testbed, or testbed results given); a contradiction is ``parser.error``."""
    args = parser.parse_args(argv)
    args.seeds = args.seeds or (4 if args.quick else 5)
    args.max_seeds = args.max_seeds or (8 if args.quick else 12)
    if args.seeds < 2:
        parser.error("--seeds must be >= 2 (an interval needs two)")
    if args.max_seeds < args.seeds:
        parser.error("--max-seeds must be >= --seeds")
    if args.simulator_only and args.testbed_results is not None:
        parser.error("--simulator-only and --testbed-results exclude each other")
    mode = "simulator-only" if args.simulator_only else "with the testbed"
    if args.testbed_results is not None:
        mode = "testbed results given"
        if not (args.testbed_results / "summary.json").is_file():
            parser.error(f"--testbed-results {args.testbed_results}: no summary.json there")
    if args.testbed_seeds is None:
        args.testbed_seeds = [1] if args.quick else [1, 2, 3]
    if mode == "with the testbed" and os.geteuid() != 0:
        parser.error("the testbed needs root: run as root, or use --simulator-only")
    args.out = args.out.resolve()  # the testbed experiment runs from the checkout's root
    args.out.mkdir(parents=True, exist_ok=True)
    args.mode = mode
    return args


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


def map_claims(args: argparse.Namespace, progress: Callable[[str], None]
               ) -> tuple[list[atlas.ClaimOutcome], list[Claim]]:  # fmt: skip
    """The simulator's part: the maps asked for (with the user's policies as further readings)
    and the bound checks against brute force. Raises :class:`SweepError` if points failed."""
    maps = [claim_map.with_policies(CLAIMS[name], args.policy, args.gpu_policy)
            for name in args.claims if name in MAP_CLAIMS]  # fmt: skip
    outcomes = atlas.run_atlas(maps, args.out, args, args.quick, args.seeds, args.max_seeds,
                               progress)  # fmt: skip
    claims: list[Claim] = []
    if "optimum" in args.claims:
        parts = [{"claim": "optimum", "part": part, "contended": True}
                 for part in ("bssi", "stages")]  # fmt: skip
        results = run_points(parts, run_optimum_point, args.out / "points", args,
                             label="bound checks")  # fmt: skip
        claims += against_brute_force({p["part"]: r for p, r in zip(parts, results, strict=True)})
    return outcomes, claims


def testbed_part(args: argparse.Namespace, progress: Callable[[str], None]
                 ) -> tuple[dict | None, list[confirm.Confirmation]]:  # fmt: skip
    """The testbed's part: the main experiment (run as root, or read from
    ``--testbed-results``; none when simulator-only) and the maps' confirmations (run with
    the testbed, read with ``--testbed-results``, skipped with ``--quick``)."""
    testbed = None
    if args.testbed_results is not None:
        testbed = confirm.load_testbed_experiment(args.testbed_results)
        args.testbed_seeds = testbed["workload"]["seeds"]
    elif args.mode == "with the testbed":
        testbed = run_testbed_experiment(args.testbed_seeds, args.out / "testbed", progress)
    confirmations = []
    if args.mode != "simulator-only" and not args.quick:
        for key in (k for k in args.claims if k in TESTBED_MAPS):
            confirmations.append(confirm.confirm(
                CLAIMS[key], args.out / "confirm", args, progress=progress,
                run=args.mode == "with the testbed"))  # fmt: skip
    return testbed, confirmations


def main(argv=None) -> int:
    """Map the claims (and run the testbed experiment), write the report; the exit status."""
    args = checked_arguments(build_parser(), argv)
    started = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", flush=True)

    try:
        outcomes, claims = map_claims(args, progress)
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    testbed, confirmations = testbed_part(args, progress)
    if testbed is not None:
        claims.append(beamer_testbed(testbed))
    meta = {
        "mode": args.mode,
        "quick": args.quick,
        "seeds": args.seeds,
        "max_seeds": args.max_seeds,
        "testbed_seeds": None if testbed is None else args.testbed_seeds,
        "wall_s": time.perf_counter() - started,
        "provenance": provenance(sys.argv[1:] if argv is None else argv),
    }
    path = report(outcomes, claims, meta, args.out, testbed, confirmations)
    plot(outcomes, args.out)
    write_json(
        args.out / "summary.json",
        summary_json(meta, outcomes, claims, testbed, confirmations, args.out),
    )
    print_verdicts(outcomes, claims)
    print(f"\n{path} ({meta['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
