"""Results over seeds: mean +/- 95 % CI, paired ratios against a baseline, no winner where
intervals overlap; and hpo-sim-sweep's summary built from them."""

from __future__ import annotations

import csv
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.stats import Interval, clear_best, mean_ci, paired_ratio_ci, t975
from tests.conftest import installed_here

ROOT = Path(__file__).resolve().parents[2]
# what pip writes as .venv/bin/hpo-sim-sweep: the module imported by name, its main called
CONSOLE_SCRIPT = ("import sys; sys.argv[0] = 'hpo-sim-sweep'; "
                  "from experiments.sim_experiments import main; sys.exit(main())")  # fmt: skip


def test_t_quantiles():
    # the printed tables' values, to their three decimals
    for df, table in ((1, 12.706), (2, 4.303), (3, 3.182), (30, 2.042), (120, 1.980)):
        assert t975(df) == pytest.approx(table, abs=5e-4)
    assert t975(10**6) == pytest.approx(1.959966, abs=1e-6)  # the normal's
    with pytest.raises(ValueError):
        t975(0)


def test_mean_and_interval():
    ci = mean_ci([1.0, 2.0, 3.0, 4.0, None])
    assert ci.n == 4 and ci.mean == 2.5
    assert ci.half_width == pytest.approx(3.182446 * statistics.stdev([1, 2, 3, 4]) / 2)
    assert (ci.low, ci.high) == pytest.approx((2.5 - ci.half_width, 2.5 + ci.half_width))
    one = mean_ci([7.0])
    assert one.n == 1 and math.isnan(one.half_width) and one.format(1) == "7.0 (n=1)"
    assert mean_ci([]) is None and mean_ci([None]) is None


def test_ratios_are_paired_per_seed():
    # policy A is 10 % better than the baseline on every seed although the seeds' workloads
    # differ a lot: the paired ratio is tight, the absolute values are not
    baseline = {1: 100.0, 2: 300.0, 3: 1000.0}
    better = {seed: 0.9 * value for seed, value in baseline.items()}
    ratio = paired_ratio_ci(better, baseline)
    assert ratio.mean == pytest.approx(0.9) and ratio.half_width == pytest.approx(0.0)
    assert mean_ci(better.values()).overlaps(mean_ci(baseline.values()))
    # seeds missing on either side are left out
    assert paired_ratio_ci({1: 50.0, 4: 1.0}, {1: 100.0, 2: 5.0}).n == 1
    # ratios multiply: geometric mean, interval from the log-ratios, never below 0, and
    # X / Y is the inverse of Y / X
    a, b = {1: 1.0, 2: 10.0, 3: 2.0}, {1: 5.0, 2: 1.0, 3: 2.0}
    ab, ba = paired_ratio_ci(a, b), paired_ratio_ci(b, a)
    assert ab.mean == pytest.approx(statistics.geometric_mean([0.2, 10.0, 1.0]))
    assert ab.mean * ba.mean == pytest.approx(1.0)
    assert ab.low * ba.high == pytest.approx(1.0) and ab.low > 0
    assert ab.format(2) == f"{ab.mean:.2f} [{ab.low:.2f}, {ab.high:.2f}]"


def test_no_winner_where_intervals_overlap():
    tight = {"a": Interval(0.8, 0.75, 0.85, 5), "b": Interval(1.0, 1.0, 1.0, 5)}
    assert clear_best(tight) == "a"
    assert clear_best(tight, lower_is_better=False) == "b"
    assert clear_best({**tight, "c": Interval(0.86, 0.84, 0.88, 5)}) is None  # a, c overlap
    assert clear_best({"a": Interval(0.5, 0.5, 0.5, 1), "b": Interval(1.0, 1.0, 1.0, 1)}) is None
    assert clear_best({"a": Interval(0.5, 0.4, 0.6, 3)}) is None


def sweep_rows(path: Path) -> list[dict]:
    """A results CSV's rows without their wall times (which differ from run to run)."""
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in csv.DictReader(f)]


def test_sim_experiments_summarises_seeds_the_same_on_ray_and_sequentially(tmp_path):
    out = tmp_path / "sim"
    command = [sys.executable, "-m", "experiments.sim_experiments", "--hosts", "13", "--loads",
               "0.5", "--seeds", "1", "2", "3", "--policy", "fair", "sincronia"]  # fmt: skip
    run = subprocess.run([*command, "--out", str(out), "--parallel", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "3 seed(s)" in run.stdout and "clear best:" in run.stdout
    assert "ETA" in run.stdout  # progress lines
    reference = tmp_path / "sequential"
    run = subprocess.run([*command, "--out", str(reference), "--sequential"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    for name in ("hpo.csv", "hpo-summary.csv", "trace.csv"):
        assert sweep_rows(out / name) == sweep_rows(reference / name), name
    assert len(list((out / "points").glob("*.json"))) == 3 * 2 + 2  # HPO runs, trace runs
    with open(out / "hpo.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    with open(out / "hpo-summary.csv", newline="") as f:
        summary = {row["policy"]: row for row in csv.DictReader(f)}
    assert set(summary) == {"fair", "sincronia"}  # one row per point and policy
    sct = {(r["policy"], int(r["seed"])): float(r["avg_sct_s"]) for r in runs}
    mine = [sct[("sincronia", seed)] for seed in (1, 2, 3)]
    ratios = [sct[("sincronia", seed)] / sct[("fair", seed)] for seed in (1, 2, 3)]
    logs = mean_ci([math.log(r) for r in ratios])
    row = summary["sincronia"]
    assert int(row["seeds"]) == 3
    assert float(row["avg_sct_s"]) == pytest.approx(statistics.mean(mine))
    assert float(row["avg_sct_s_ci95"]) == pytest.approx(mean_ci(mine).half_width)
    assert float(row["avg_sct_s_vs_fair"]) == pytest.approx(statistics.geometric_mean(ratios))
    assert float(row["avg_sct_s_vs_fair_low"]) == pytest.approx(math.exp(logs.low))
    assert float(row["avg_sct_s_vs_fair_high"]) == pytest.approx(math.exp(logs.high))
    assert float(summary["fair"]["avg_sct_s_vs_fair"]) == 1.0
    assert (out / "hpo-avg_sct_s.png").stat().st_size > 0


def test_gpu_experiments_report_intervals(tmp_path):
    """hpo-gpu-sweep: mean +/- 95 % CI per policy over the seeds, and the pairs
    relative to (fair, fifo) paired per seed, recomputed here from its own per-run CSV."""
    out = tmp_path / "gpu"
    run = subprocess.run(
        [sys.executable, "-m", "experiments.gpu_experiments", "--sequential", "--hosts", "13",
         "--tasks", "1",
         "--seeds", "1", "2", "--compute-seeds", "1", "2", "3", "--configs-alone", "16",
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "mean +/- 95 % CI over seeds" in run.stdout
    with open(out / "gpu.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    summary = json.loads((out / "summary.json").read_text())

    def values(part, label, key):
        return {int(r["seed"]): float(r[key]) for r in rows
                if r["part"] == part and r["hosts"] in ("0", "13")
                and (r["gpu"] if part != "pairs" else f"{r['network']}+{r['gpu']}") == label
                and r["search"] in ("full", "halving") and r[key] not in ("", "None")}  # fmt: skip

    hermes = summary["compute/full/no-network"]["hermes"]
    assert hermes["seeds"] == 3
    best = values("compute", "hermes", "best_to_90pct_s")
    assert hermes["best_to_90pct_s"] == pytest.approx(statistics.mean(best.values()))
    assert hermes["ci95"]["best_to_90pct_s"] == pytest.approx(mean_ci(best.values()).half_width)
    ratio = summary["pairs_vs_fair_fifo"]["13"]["beamer+hermes"]["avg_sct_s"]
    expected = paired_ratio_ci(values("pairs", "beamer+hermes", "avg_sct_s"),
                               values("pairs", "fair+fifo", "avg_sct_s"))  # fmt: skip
    assert (ratio["mean"], ratio["low"], ratio["high"]) == pytest.approx(
        (expected.mean, expected.low, expected.high)
    )


def test_sim_experiments_reads_its_trace_before_the_sweep(tmp_path):
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "experiments.sim_experiments", "--trace", "/nonexistent",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "python -m experiments.sim_experiments: error: --trace: /nonexistent: No such file or "
        "directory"
    )
    assert time.monotonic() - started < 30 and not (tmp_path / "hpo.csv").exists()


def test_every_documented_way_to_start_a_sweep_runs_on_ray(tmp_path):
    """``python -m`` (whose point functions live in ``__main__``) and the console script (whose
    live in the module) both run their points as Ray tasks; without the project installed, the
    console script's own two lines stand in for it."""
    tiny = ["--hosts", "13", "--loads", "0.5", "--seeds", "1", "--policy", "fair",
            "--parallel", "1"]  # fmt: skip
    script = Path(sys.executable).parent / "hpo-sim-sweep"
    for way, argv in (
        ("module", [sys.executable, "-m", "experiments.sim_experiments"]),
        ("console script", [str(script)] if installed_here() and script.is_file()
         else [sys.executable, "-c", CONSOLE_SCRIPT]),
    ):  # fmt: skip
        out = tmp_path / way
        run = subprocess.run([*argv, *tiny, "--out", str(out)], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
        assert run.returncode == 0, (way, run.stderr[-2000:])
        assert len(list((out / "points").glob("*.json"))) == 2, way
