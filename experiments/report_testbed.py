"""The report's testbed parts: the main testbed experiment (run, or read back) with Beamer's
claim on it and the simulator's prediction per policy beside the testbed, and the maps'
confirmations (:mod:`experiments.confirm`): their rows, ``REPORT.md`` sections and figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from controller.stats import (  # noqa: E402
    Interval,
    format_interval,
    format_percent,
    mean_ci,
    paired_ratio_ci,
)
from experiments import atlas, atlas_points, confirm  # noqa: E402
from experiments.figures import error_bars, spread_note  # noqa: E402
from experiments.report_claims import Claim, paired_comparisons  # noqa: E402
from experiments.verdicts import MARGIN  # noqa: E402

# the checkout this runs from (the testbed experiment runs from it)
ROOT = Path(__file__).resolve().parents[1]


TESTBED_POLICIES = ("beamer", "sincronia", "fifo-lm", "fair", "jpas")


AGREEMENT = 0.15  # the simulator should predict the testbed's average SCT within this


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
