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
import pace  # noqa: E402
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
    machine, header, row = capsys.readouterr().out.splitlines()
    assert machine == pace.describe_machine()
    assert header.split()[-4:] == ["us/step", "run", "pace", "ms"]
    fields = row.split()
    assert fields[:5] == ["8", "x", "1", "fair", "ideal"]
    assert float(fields[5]) >= 0 and float(fields[-1]) > 0


def test_a_benchmark_times_a_policy_of_ones_own(capsys):
    mine = "examples.smallest_first:SmallestFirst"
    assert hpo_scale.main(["--sizes", "8x1", "--policy", mine, "--mode", "ideal"]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert mine in row and "failed" not in row and float(row.split()[-1]) > 0


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
    assert hpo_scale.repeat_summary(runs((10.0, 0.5), (16.0, 0.8), (12.0, 0.6)), "this: ") == (
        "  this: 3 runs: wall 10.0-16.0 s, run pace 0.500-0.800 ms, correlation 1.00; "
        "wall / run pace 20.0-20.0 s per ms"
    )
    assert hpo_scale.repeat_summary(runs((10.0, 0.5), (9.0, 0.4))) == (
        "  2 runs finished: too few to summarise"
    )


def test_hpo_scale_refuses_a_repeat_below_one(capsys):
    with pytest.raises(SystemExit) as exited:
        hpo_scale.main(["--repeat", "0"])
    assert exited.value.code == 2
    assert "--repeat must be >= 1" in capsys.readouterr().err


_FAKE_SIMULATOR = """
import time


def warm_up():
    pass


class Fabric:
    def __init__(self, hosts, link_bps):
        self.hosts = hosts


class Simulator:
    def __init__(self, fabric, policy, mode):
        self.coflows, self.reorders, self.steps = [1, 2, 3], 12345, 678
        self.reorder_s = self.step_s = 0.1

    def run(self):
        time.sleep(0.3)
"""


CHECKOUT = Path(__file__).resolve().parents[2]


def _fake_checkout(root: Path, bssi_source: str) -> Path:
    """A directory that passes for another checkout: the HPO point's modules as stubs whose
    run reports 12,345 reorders, and ``bssi_source`` as the pace reference's code."""
    files = {
        "controller/__init__.py": "",
        "controller/bssi.py": bssi_source,
        # (the kernels take numba's decorator from the cache module that points numba's cache)
        "controller/kernel_cache.py": (CHECKOUT / "controller" / "kernel_cache.py").read_text(),
        "controller/policies.py": "def make_policy(name):\n    return name\n",
        "simulator/__init__.py": "",
        "simulator/engine.py": _FAKE_SIMULATOR,
        "simulator/hpo.py": (
            "class HpoDriver:\n    def __init__(self, sim, workload):\n        self.n_stages = 1\n"
        ),
        "workloads/__init__.py": "",
        "workloads/hpo.py": "def generate(hosts, tasks, seed):\n    return None\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_hpo_scale_against_another_checkout_runs_its_code_and_compares(tmp_path, capsys):
    bssi_source = (Path(__file__).resolve().parents[2] / "controller" / "bssi.py").read_text()
    same = _fake_checkout(tmp_path / "same", bssi_source)
    args = ["--sizes", "8x1", "--policy", "fair", "--mode", "ideal", "--against", str(same)]
    assert hpo_scale.main(args) == 0
    _, header, ours, theirs, paired = capsys.readouterr().out.splitlines()
    assert ours.split()[3:5] == ["fair", "ideal"] and ours.split()[8] != "12345"
    assert theirs.split()[3:5] == ["fair", "ideal*"]
    assert theirs.split()[7:9] == ["3", "12345"]  # (the other checkout's code ran)
    assert paired.startswith("  paired: 1 pairs, wall / run pace ")
    assert " s per ms; this / against " in paired and "(mean " in paired

    # the other checkout's pace reference differs (its BSSI kernels' source): not compared
    edited = bssi_source.replace("def _bssi(", "def _bssi(  # edited\n", 1)
    assert edited != bssi_source
    other = _fake_checkout(tmp_path / "other", edited)
    assert hpo_scale.main([*args[:-1], str(other)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "  paired: not compared, the two checkouts' pace references differ"
    )


def test_hpo_scale_refuses_a_directory_that_is_not_a_checkout(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        hpo_scale.main(["--against", str(tmp_path)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"'{tmp_path}' is not a checkout of this project (no controller/policies.py)" in err


def test_hpo_scale_pairs_runs_by_wall_time_over_run_pace():
    def run(wall_s, pace_ms, reference="r1"):
        return {"wall_s": wall_s, "pace_ms": pace_ms, "pace_reference": reference}

    line = hpo_scale.pair_summary(
        [run(10.0, 0.5), None, run(9.0, 0.6)], [run(12.0, 0.5), run(1.0, 0.1), run(12.0, 0.6)]
    )
    assert line == (
        "  paired: 2 pairs, wall / run pace 15.0-20.0 against 20.0-24.0 s per ms; "
        "this / against 0.750-0.833 (mean 0.792)"
    )
    assert hpo_scale.pair_summary([None], [run(1.0, 0.1)]) == "  paired: no pair finished"
    assert hpo_scale.pair_summary([run(1.0, 0.1)], [run(1.0, 0.1, "r2")]) == (
        "  paired: not compared, the two checkouts' pace references differ"
    )
