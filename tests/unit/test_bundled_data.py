"""The public data ships with the package (:mod:`netsched_data`) and every command finds it there:
no code of the repository reads a data folder beside the checkout, a trace on a command line is
a file or a bundled trace's name, and a generated trace is called synthetic."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

import netsched_data
from netsched_data import FULL_TRACE, SMALL_TRACE, TRACES

ROOT = Path(__file__).resolve().parents[2]
# a path into the data folder that used to sit beside the checkout (written so that this file
# does not match itself): a relative "../" path, or Path arithmetic from a parent
OUTSIDE = re.compile(r"\.\./" + "shared" + r"|\.parents?(\[\d+\])?\s*/\s*[\"']" + "shared")
SKIP = {".venv", ".git", "build", "results", "__pycache__", "node_modules"}


def test_no_code_reads_data_beside_the_checkout():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if SKIP.isdisjoint(path.relative_to(ROOT).parts):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if OUTSIDE.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []
    assert OUTSIDE.search('x = ROOT.parent / "sh' + 'ared" / "traces"')  # (the pattern works)
    assert OUTSIDE.search("e.g. ../sh" + "ared/yahpo")


def test_the_claims_find_their_trace_by_name():
    from experiments.atlas_points import trace_window
    from experiments.claims import CLAIMS, trace_path

    assert CLAIMS["varys"].base["trace"] == FULL_TRACE  # (points are keyed by the name)
    assert trace_path(FULL_TRACE) == str(netsched_data.trace(FULL_TRACE))
    window = trace_window(trace_path(FULL_TRACE), 1, 12, 1.0)
    assert window.n_ports == 150 and len(window.coflows) == 43
    with pytest.raises(netsched_data.DataError, match="^unknown trace 'x.txt'; bundled: FB"):
        trace_path("x.txt")


def cct_rows(folder: Path, policy: str) -> list[dict]:
    with open(folder / f"coflows-{policy}.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_the_simulator_takes_a_trace_name_or_a_path(tmp_path, capsys):
    from simulator.__main__ import main

    by_name, by_path = tmp_path / "name", tmp_path / "path"
    assert main(["trace", SMALL_TRACE, "--policy", "fair", "--out", str(by_name)]) == 0
    assert f"{SMALL_TRACE}: 526 coflows, 5249 flows, 16 ports" in capsys.readouterr().out
    path = str(netsched_data.trace(SMALL_TRACE))
    assert main(["trace", path, "--policy", "fair", "--out", str(by_path)]) == 0
    assert cct_rows(by_name, "fair") == cct_rows(by_path, "fair")
    assert json.loads((by_name / "summary.json").read_text())["trace"] == SMALL_TRACE
    capsys.readouterr()
    assert main(["trace", "nope.txt"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        f"error: nope.txt: no such file, nor a bundled trace ({', '.join(TRACES)})\n"
    )
    assert len(err.splitlines()) == 1


def sweep(tmp_path: Path, name: str, *trace: str) -> tuple[Path, list[dict]]:
    """A tiny hpo-sim-sweep (one 3-host HPO run, fair only) into ``tmp_path / name``: the
    folder and the rows of its trace.csv."""
    from experiments.sim_experiments import main

    out = tmp_path / name
    args = ["--hosts", "3", "--loads", "0.5", "--policy", "fair", "--sequential", "--out"]
    assert main([*args, str(out), *trace]) == 0
    with open(out / "trace.csv", newline="") as f:
        return out, list(csv.DictReader(f))


def printed_trace_line(capsys) -> str:
    return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("trace "))


def test_the_sweep_runs_the_bundled_16_port_trace_by_default(tmp_path, capsys):
    out, rows = sweep(tmp_path, "default")
    assert printed_trace_line(capsys) == (
        f"trace {SMALL_TRACE} (bundled): 526 coflows, 5249 flows, 58,807 MB"
    )
    assert [r["trace"] for r in rows] == [f"{SMALL_TRACE} (bundled)"]
    points = [json.loads(p.read_text())["point"] for p in (out / "points").glob("*.json")]
    assert [p["trace"] for p in points if p["kind"] == "trace"] == [SMALL_TRACE]
    # the bundled file given by its path is the same trace, keyed by its name
    _, again = sweep(tmp_path, "path", "--trace", str(netsched_data.trace(SMALL_TRACE)))
    assert printed_trace_line(capsys).startswith(f"trace {SMALL_TRACE} (bundled): 526 coflows")
    assert again == rows


def test_a_generated_trace_is_called_synthetic(tmp_path, capsys):
    out, rows = sweep(tmp_path, "synthetic", "--trace", "synthetic")
    label = "synthetic (200 coflows, generated, seed 1)"
    assert printed_trace_line(capsys) == f"trace {label}: 200 coflows, 2154 flows, 11,939 MB"
    assert [r["trace"] for r in rows] == [label]
    # what was generated is beside the results, and given as a file it is the same trace
    written = out / "synthetic-trace.txt"
    _, again = sweep(tmp_path, "file", "--trace", str(written))
    assert printed_trace_line(capsys).startswith(f"trace {written}: 200 coflows")
    assert [{**r, "trace": label} for r in again] == rows


def test_an_unknown_sweep_trace_is_one_line_before_the_sweep(tmp_path, capsys):
    from experiments.sim_experiments import main

    with pytest.raises(SystemExit) as stop:
        main(["--trace", "fb.txt", "--out", str(tmp_path)])
    assert stop.value.code == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(
            f"error: --trace: fb.txt: no such file, nor a bundled trace ({', '.join(TRACES)})"
        )
    )
    assert not (tmp_path / "hpo.csv").exists()
