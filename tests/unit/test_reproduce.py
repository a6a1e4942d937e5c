"""scripts/reproduce.py: the verdict rule, and a short simulator-only run writing its report."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.metrics import Interval

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("reproduce", ROOT / "scripts" / "reproduce.py")
reproduce = importlib.util.module_from_spec(spec)
sys.modules["reproduce"] = reproduce  # dataclasses look their module up there
spec.loader.exec_module(reproduce)


@pytest.mark.parametrize(
    "ratio, lower_is_better, verdict",
    [
        (Interval(0.8, 0.7, 0.9, 5), True, "reproduced"),
        (Interval(0.9, 0.8, 1.05, 5), True, "not reproduced"),
        (Interval(1.3, 1.1, 1.5, 5), True, "opposite"),
        (Interval(1.3, 1.1, 1.5, 5), False, "reproduced"),
        (Interval(0.4, 0.4, 0.4, 1), True, "reproduced"),  # one trace: the point decides
        (None, True, "not measured"),
    ],
)
def test_verdict_rule(ratio, lower_is_better, verdict):
    assert reproduce.Comparison("base", ratio, lower_is_better).verdict == verdict


def test_claim_verdict_over_baselines():
    good = reproduce.Comparison("a", Interval(0.8, 0.7, 0.9, 5))
    unclear = reproduce.Comparison("b", Interval(0.95, 0.8, 1.1, 5))
    claim = reproduce.Claim("X", "paper", "statement", "setting", "metric", [good, unclear])
    assert claim.verdict == "partly"
    assert reproduce.Claim("X", "p", "s", "s", "m", [good, good]).verdict == "reproduced"
    assert reproduce.Claim("X", "p", "s", "s", "m", [unclear]).verdict == "not reproduced"


def test_simulator_only_report(tmp_path):
    out = tmp_path / "report"
    run = subprocess.run(
        [sys.executable, "scripts/reproduce.py", "--simulator-only", "--seeds", "2",
         "--claims", "jpas", "hermes", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    report = (out / "REPORT.md").read_text()
    assert "| JPAS (Zhou et al., JNCA 158, 2020) |" in report and "| Hermes (" in report
    assert "reconstructions from the papers'" in report and "git commit:" in report
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "simulator-only" and summary["seeds"] == [1, 2]
    assert len(summary["provenance"]["git_commit"]) == 40
    for claim in summary["claims"]:
        for comparison in claim["comparisons"]:
            assert comparison["n"] == 2 and 0 < comparison["low"] <= comparison["high"]
            assert comparison["verdict"] in ("reproduced", "not reproduced", "opposite")
    assert (out / "claims.png").stat().st_size > 0
    bad = subprocess.run([sys.executable, "scripts/reproduce.py", "--simulator-only", "--seeds",
                          "1"], cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "--seeds must be >= 2" in bad.stderr
