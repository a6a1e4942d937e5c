"""The speed benchmarks run end to end on tiny instances and print the machine's pace beside
their numbers (their figures are measured by hand; this checks that they still run)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import hpo_scale  # noqa: E402
import ordering_speed  # noqa: E402
import reorder_parts  # noqa: E402

from controller.policies import POLICIES  # noqa: E402


def test_ordering_speed_times_every_policy_between_two_paces(capsys):
    assert ordering_speed.main(["--coflows", "40", "--hosts", "6", "--repeat", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("machine pace before: compiled ")
    assert lines[-1].startswith("machine pace after:  compiled ")
    rows = {line.split("  ")[0] for line in lines[4:-1]}
    assert set(POLICIES) <= rows
    assert "beamer 1/stage, versioned" in rows


def test_reorder_parts_times_each_part_between_two_paces(capsys, monkeypatch):
    from controller.rules import MarkingTable

    # (the script times MarkingTable.update by replacing it: put it back afterwards)
    monkeypatch.setattr(MarkingTable, "update", MarkingTable.update)
    args = ["--policy", "sincronia", "--active", "20", "--registrations", "5"]
    assert reorder_parts.main(args) == 0
    out = capsys.readouterr().out
    assert "sincronia, 20 coflows of 10 jobs active, 10 reorders" in out
    for part in ("registry view", "schedule", "marking rules", "whole reorder", "switch ops"):
        assert f"  {part}" in out
    assert "machine pace before: compiled " in out and "machine pace after:  compiled " in out


def test_hpo_scale_prints_each_point_with_the_pace_read_during_it(capsys):
    assert hpo_scale.main(["--sizes", "8x1", "--policy", "fair", "--mode", "ideal"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[-4:] == ["us/step", "run", "pace", "ms"]
    fields = row.split()
    assert fields[:5] == ["8", "x", "1", "fair", "ideal"]
    assert float(fields[5]) >= 0 and float(fields[-1]) > 0


def test_hpo_scale_times_a_point_with_the_pace_read_during_it():
    point = hpo_scale.run_one(8, 1, "fair", "levels")
    assert point["coflows"] > 0 and point["reorders"] > 0 and point["steps"] > 0
    assert point["wall_s"] > 0 and point["pace_ms"] > 0 and point["pace_readings"] >= 1
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_hpo_scale_sums_up_repeated_runs_of_a_point():
    def runs(*pairs):
        return [{"wall_s": wall, "pace_ms": pace_ms} for wall, pace_ms in pairs]

    line = hpo_scale.repeat_summary(runs((10.0, 0.5), (16.0, 0.8), (12.0, 0.6)))
    assert line == (
        "  3 runs: wall 10.0-16.0 s, run pace 0.500-0.800 ms, correlation 1.00; "
        "wall / run pace 20.0-20.0 s per ms"
    )
    line = hpo_scale.repeat_summary(runs((10.0, 0.5), (8.0, 0.6), (6.0, 0.7)))
    assert "correlation -1.00; wall / run pace 8.6-20.0 s per ms" in line
    assert "correlation undefined" in hpo_scale.repeat_summary(runs(*[(10.0, 0.5)] * 3))
    assert hpo_scale.repeat_summary(runs((10.0, 0.5), (9.0, 0.4))) == (
        "  2 runs finished: too few to summarise"
    )


def test_hpo_scale_refuses_a_repeat_below_one(capsys):
    with pytest.raises(SystemExit) as exited:
        hpo_scale.main(["--repeat", "0"])
    assert exited.value.code == 2
    assert "--repeat must be >= 1" in capsys.readouterr().err
