"""A testbed experiment's results over its seeds: ``results.json`` (every run), ``stages.csv``,
``summary.json`` (per policy over the seeds: mean +/- 95 % CI, the simulator's prediction, the
ratio to fair sharing paired per seed, the clearly best policy if any, and provenance),
``testbed.png``, and the tables printed at the end."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from controller.stats import (  # noqa: E402
    Interval,
    clear_best,
    format_interval,
    mean_ci,
    paired_ratio_ci,
)
from experiments.figures import error_bars, spread_note  # noqa: E402
from experiments.testbed_settings import TestbedSettings  # noqa: E402
from simulator.metrics import provenance, write_json  # noqa: E402
from workloads.hpo import describe_workload  # noqa: E402

BASELINE = "fair"
PANELS = (
    ("sct_s", "avg_sct_s", "average SCT (s)"),
    ("time_to_90pct_s", "avg_time_to_90pct_s", "time to 90% (s)"),
    ("best_identified_s", "avg_best_identified_s", "best config identified (s)"),
    ("hpo_completion_s", "avg_hpo_completion_s", "HPO completion (s)"),
)


def _interval(values) -> dict | None:
    ci = mean_ci(values)
    return None if ci is None else ci.to_json()


def seed_summary(results: list[dict], settings: TestbedSettings, argv: list[str]) -> dict:
    """Per policy (pair) over the seeds: each metric's mean +/- 95 % CI on the testbed, the
    simulator's on the same workloads, and the average SCT relative to fair sharing's, paired
    per seed; the clearly best policy, if any; where the results come from (``argv``: the
    command line)."""
    labels = list(dict.fromkeys(r["policy"] for r in results))
    by_label = {label: {r["seed"]: r for r in results if r["policy"] == label} for label in labels}
    # fair sharing (with the first GPU policy it ran with, in pairs) is the baseline
    baseline = next((label for label in labels if label.split("+")[0] == BASELINE), None)
    base = by_label.get(baseline, {})
    policies, ratios = {}, {}
    for label, runs in by_label.items():
        policies[label] = entry = policy_entry(runs)
        if base:
            ratio = paired_ratio_ci(
                {s: r["sct_s"].get("mean") for s, r in runs.items()},
                {s: r["sct_s"].get("mean") for s, r in base.items()},
            )
            if ratio is not None:
                ratios[label] = ratio
                entry["avg_sct_vs_baseline"] = ratio.to_json()
            # the same ratio as the calibrated simulator predicts it, to compare rankings
            if "calibrated_sim_avg_sct_s" in entry and all(
                r["simulated_calibrated"] for r in base.values()
            ):
                predicted = paired_ratio_ci(
                    {s: r["simulated_calibrated"]["sct_s"].get("mean") for s, r in runs.items()},
                    {s: r["simulated_calibrated"]["sct_s"].get("mean") for s, r in base.items()},
                )
                if predicted is not None:
                    entry["calibrated_sim_avg_sct_vs_baseline"] = predicted.to_json()
    return {
        "provenance": provenance(argv),
        "link_gbps": settings.modelled_link_bps / 1e9,
        "emulated_link_bps": settings.cluster.link_bps,
        "host_priorities": settings.host_priorities,
        "tcp_rto_max_ms": settings.tcp_rto_max_ms,
        "overheads": settings.overheads.to_json() if settings.overheads else None,
        "topology": settings.topology_json(),
        "workload": workload_json(settings),
        "baseline": baseline,
        "policies": policies,
        "clear_best_avg_sct": clear_best(ratios),
    }


def policy_entry(runs: dict[int, dict]) -> dict:
    """One policy's (pair's) runs by seed, summarised over the seeds: each metric's mean +/-
    95 % CI on the testbed and the simulator's (raw and, where every run has one, calibrated)
    on the same workloads."""
    entry = {"seeds": sorted(runs)}
    for key, name, _ in PANELS:
        entry[name] = _interval(r[key].get("mean") for r in runs.values())
    entry["sim_avg_sct_s"] = _interval(r["simulated"]["sct_s"].get("mean")
                                       for r in runs.values())  # fmt: skip
    entry["sim_over_testbed_avg_sct"] = _interval(
        r["simulated"]["sct_s"]["mean"] / r["sct_s"]["mean"] for r in runs.values()
    )
    if all(r["simulated_calibrated"] for r in runs.values()):
        entry["calibrated_sim_avg_sct_s"] = _interval(
            r["simulated_calibrated"]["sct_s"].get("mean") for r in runs.values()
        )
        entry["calibrated_sim_over_testbed_avg_sct"] = _interval(
            r["simulated_calibrated"]["sct_s"]["mean"] / r["sct_s"]["mean"] for r in runs.values()
        )
    entry["busiest_port_busy"] = _interval(r["busiest_port_busy"] for r in runs.values())
    entry["wire_busiest_port_busy"] = _interval(
        r.get("wire_busiest_port_busy") for r in runs.values()
    )
    return entry


def workload_json(settings: TestbedSettings) -> dict:
    """The experiment's workload, as summary.json states it."""
    w = settings.workload
    return {
        "hosts": settings.cluster.hosts,
        "tasks": w.tasks,
        "configs": w.configs,
        "eta": w.eta,
        "search": w.search,
        "min_iterations": w.min_iterations,
        "workers": w.workers,
        "patterns": list(w.patterns),
        "models": list(w.models),
        "interarrival_s": w.interarrival_s,
        "curves": w.curves,
        "seeds": list(settings.seeds),
    }


def figure(summary: dict):
    """Per policy: each metric's mean over the seeds with its 95 % CI where there are two seeds
    or more (testbed; a missing value has no bar), and the simulator's mean average SCT on the
    same workloads (a missing one has no dot); titled by the workload."""
    names = list(summary["policies"])
    fig, axes = plt.subplots(1, len(PANELS), figsize=(16, 3.6))
    seeds = []
    for ax, (_, key, label) in zip(axes, PANELS, strict=True):
        intervals = [None if (entry := summary["policies"][n][key]) is None
                     else Interval.from_json(entry) for n in names]  # fmt: skip
        means = [math.nan if i is None else i.mean for i in intervals]
        ax.bar(names, means, color="tab:blue", label="testbed")
        error_bars(ax, names, intervals, capsize=3, color="black")
        seeds += [i.n for i in intervals if i is not None]
        if key == "avg_sct_s":
            sim = [math.nan if (entry := summary["policies"][n].get("sim_avg_sct_s")) is None
                   else entry["mean"] for n in names]  # fmt: skip
            ax.scatter(names, sim, color="tab:orange", zorder=3, label="simulator")
            ax.legend()
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", rotation_mode="anchor")
    w = summary["workload"]
    name = describe_workload(w["configs"], w["search"], w["patterns"], w["hosts"], w["tasks"],
                             curves=w.get("curves"))  # fmt: skip
    fig.suptitle(f"testbed, {name}; {summary['link_gbps']:g} Gbit/s modelled; "
                 f"{spread_note(seeds)}")  # fmt: skip
    fig.tight_layout()
    return fig


def plot(summary: dict, out: Path) -> Path:
    """:func:`figure` into ``out/testbed.png``."""
    fig = figure(summary)
    path = out / "testbed.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def fmt(value) -> str:
    """Seconds to one decimal, ``-`` if missing."""
    return "-" if value is None else f"{value:.1f}"


def fmt_ratio(value, reference) -> str:
    """``value / reference`` to two decimals, ``-`` if either is missing."""
    return "-" if not value or not reference else f"{value / reference:.2f}"


def fmt_pct(value) -> str:
    """A share as a percentage, ``-`` if missing."""
    return "-" if value is None or math.isnan(value) else f"{value:.0%}"


def write_results(
    results: list[dict], failures: list[dict], settings: TestbedSettings, argv: list[str]
) -> dict:
    """Every run's stages into ``stages.csv``, the runs into ``results.json``, and their
    summary over the seeds, with the failed and the retried runs, into ``summary.json``;
    returns the summary."""
    out = settings.out
    with open(out / "stages.csv", "w", newline="") as f:
        rows = [{"policy": r["policy"], "seed": r["seed"], **s} for r in results
                for s in r["stages"]]  # fmt: skip
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    runs = [{k: v for k, v in r.items() if k != "stages"} for r in results]
    (out / "results.json").write_text(json.dumps(runs, indent=2))
    summary = seed_summary(results, settings, argv)
    summary["failures"] = failures
    summary["retried"] = [
        {"policy": r["policy"], "seed": r["seed"], "errors": r["failed_attempts"]}
        for r in results
        if r["failed_attempts"]
    ]
    for entry in summary["retried"]:
        print(f"retried: {entry['policy']}, seed {entry['seed']} (failed first: "
              f"{'; '.join(entry['errors'])})")  # fmt: skip
    write_json(out / "summary.json", summary)
    return summary


def print_runs(results: list[dict], settings: TestbedSettings) -> None:
    """A table of every run: the testbed's and the simulator's average SCT and the rest."""
    print(
        f"\n{'policy':<17} {'seed':>4} {'avg SCT':>8} {'sim SCT':>8} {'sim/bed':>7} "
        f"{'cal/bed':>7} {'p95 SCT':>8} {'to 90%':>7} {'best id':>8} {'HPO end':>8} "
        f"{'busiest':>7} {'wire':>5} {'RTOs':>6} {'GPU':>5} {'preempt':>7}"
    )
    for r in results:
        gpu = r["gpu"] or {}
        bed, sim = r["sct_s"].get("mean"), r["simulated"]["sct_s"].get("mean")
        calibrated = (r["simulated_calibrated"] or {}).get("sct_s", {}).get("mean")
        print(
            f"{r['policy']:<17} {r['seed']:>4} {fmt(bed):>8} {fmt(sim):>8} "
            f"{fmt_ratio(sim, bed):>7} {fmt_ratio(calibrated, bed):>7} "
            f"{fmt(r['sct_s'].get('p95')):>8} {fmt(r['time_to_90pct_s'].get('mean')):>7} "
            f"{fmt(r['best_identified_s'].get('mean')):>8} "
            f"{fmt(r['hpo_completion_s'].get('mean')):>8} {r['busiest_port_busy']:>7.0%} "
            f"{fmt_pct(r.get('wire_busiest_port_busy')):>5} {r['tcp']['TCPTimeouts']:>6} "
            f"{fmt_pct(gpu.get('gpu_utilisation')):>5} {gpu.get('preemptions', '-'):>7}"
        )
    print(
        f"(link {settings.modelled_link_bps / 1e9:g} Gbit/s modelled at "
        f"{settings.cluster.link_bps / 1e6:g} Mbit/s; sim: the simulator on "
        "the same workload, seed, link rate and bytes; cal: with the measured overheads; "
        "busiest: the busiest port's busy share, by the workload's bytes at the line rate; wire: "
        "by its switch port's byte counter; RTOs: the hosts' TCP timeouts)"
    )


def print_summary(summary: dict, seeds: int) -> None:
    """A table of every policy (pair) over the ``seeds`` seeds: the testbed's, the simulator's
    and the calibrated simulator's average SCT, and the ratio to the baseline's."""
    print(f"\nover {seeds} seed(s): average SCT s (mean +/- 95 % CI), and / "
          f"{summary['baseline'] or BASELINE}'s paired per seed")  # fmt: skip
    for label, entry in summary["policies"].items():
        ratio = entry.get("avg_sct_vs_baseline")
        versus = format_interval(ratio, 3)
        predicted_ratio = entry.get("calibrated_sim_avg_sct_vs_baseline")
        if ratio and predicted_ratio:
            versus += f" (calibrated x {format_interval(predicted_ratio, 3)})"
        calibrated = ""
        if "calibrated_sim_avg_sct_s" in entry:
            predicted = format_interval(entry["calibrated_sim_avg_sct_s"], 1)
            over = format_interval(entry["calibrated_sim_over_testbed_avg_sct"], 2)
            calibrated = f"  calibrated {predicted:>16} (/bed {over})"
        bed, sim = (format_interval(entry[k], 1) for k in ("avg_sct_s", "sim_avg_sct_s"))
        print(f"  {label:<17} testbed {bed:>16}  simulator {sim:>16}{calibrated}  x {versus}")
    print(f"  clearly best: {summary['clear_best_avg_sct'] or 'none (intervals overlap)'}")
