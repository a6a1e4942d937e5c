"""``python -m simulator``: runs a generated trace, writes results, rejects bad input clearly."""

from __future__ import annotations

import json
import subprocess
import sys

from controller.timeline import Timeline
from simulator.__main__ import trace_name
from simulator.traces import write_fb_trace


def sim_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_trace_run_writes_results(tmp_path):
    trace = tmp_path / "fb.txt"
    write_fb_trace(trace, 4, [(1, 0, [0, 1], {2: 4.0, 3: 2.0}), (2, 100, [3], {0: 1.0}),
                              (3, 200, [2], {1: 8.0})])  # fmt: skip
    out = tmp_path / "out"
    result = sim_cli("trace", str(trace), "--policy", "sincronia", "fair", "--out", str(out),
                     "--schedule")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "sincronia" in result.stdout and "fair" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["policies"]) == {"sincronia", "fair"}
    for name, entry in summary["policies"].items():
        assert entry["cct_s"]["count"] == 3
        assert entry["ratio_to_bound"] >= 1.0 - 1e-9, name  # the bound is below every schedule
    lines = (out / "coflows-fair.csv").read_text().splitlines()
    assert lines[0].startswith("coflow_id,") and len(lines) == 4
    # the schedule's picture is titled by the trace
    assert Timeline.read(out / "timeline-fair.json").workload == "trace fb.txt"
    assert trace_name("FB2010-1Hr-150-0.txt", offline=True) == (
        "trace FB2010-1Hr-150-0.txt, all released at 0"
    )


def test_bad_input_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("4 1\n1 0 1 0 1 9:1\n")
    result = sim_cli("trace", str(bad))
    assert result.returncode == 2
    assert f"{bad}:2: reducer port must be 0..3, got 9" in result.stderr
    assert "Traceback" not in result.stderr
    result = sim_cli("trace", str(bad), "--host-bps", "-1")
    assert result.returncode == 2 and "must be > 0" in result.stderr
    result = sim_cli("trace", str(bad), "--policy", "sjf")
    assert result.returncode == 2 and "unknown policy 'sjf'; choose from beamer" in result.stderr


def test_help_explains_the_options():
    result = sim_cli("trace", "--help")
    assert result.returncode == 0
    for option in ("--policy", "--mode", "--offline", "--hosts-per-leaf", "--out"):
        assert option in result.stdout


def test_link_rate_is_one_flag_stated_in_the_results(tmp_path):
    """``--link-gbps`` is the modelled cluster (``--host-bps``, in bit/s, the older spelling);
    HPO results state it with the busiest ports' busy shares: the default workload keeps its
    busiest port far busier at 1 Gbit/s than at 10."""
    busy = {}
    for gbps in ("1", "10"):
        out = tmp_path / gbps
        result = sim_cli("hpo", "--hosts", "13", "--tasks", "2", "--policy", "fair",
                         "--link-gbps", gbps, "--out", str(out))  # fmt: skip
        assert result.returncode == 0, result.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["link_gbps"] == float(gbps) and summary["host_bps"] == float(gbps) * 1e9
        fair = summary["policies"]["fair"]
        assert fair["busiest_port_busy"] >= fair["busiest_quarter_busy"] > 0
        busy[gbps] = fair["busiest_port_busy"]
    assert busy["1"] > 0.5 > 0.4 > busy["10"]
    result = sim_cli("hpo", "--hosts", "13", "--tasks", "2", "--policy", "fair",
                     "--host-bps", "1e9", "--out", str(tmp_path / "old"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "old" / "summary.json").read_text())["link_gbps"] == 1.0
    result = sim_cli("hpo", "--link-gbps", "0")
    assert result.returncode == 2 and "must be > 0" in result.stderr


def test_numeric_flags_refuse_non_finite_and_out_of_range_values():
    for flag, value, words in (
        ("--host-bps", "nan", "argument --host-bps: must be a finite number, got nan"),
        ("--link-gbps", "inf", "argument --link-gbps: must be a finite number, got inf"),
        ("--interarrival", "-5", "argument --interarrival: must be >= 0, got -5"),
        ("--good-fraction", "1.5", "argument --good-fraction: must be <= 1, got 1.5"),
        ("--eta", "1", "argument --eta: must be >= 2, got 1"),
        ("--hosts", "3.5", "argument --hosts: not an integer: '3.5'"),
    ):
        result = sim_cli("hpo", flag, value)
        assert result.returncode == 2, (flag, value)
        assert result.stderr.strip().splitlines()[-1].endswith(words), result.stderr
        assert "Traceback" not in result.stderr
