"""The speed benchmarks run end to end on tiny instances and print the machine's pace beside
their numbers (their figures are measured by hand; this checks that they still run)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

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
