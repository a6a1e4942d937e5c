"""The compiled kernels never index outside their arrays.

Numba does not check indices: a kernel writing past an array corrupts memory silently (or
crashes much later). This test compiles the kernels afresh with bounds checking on (its own
cache, about a minute) and runs every policy in both modes, online and offline, on the first
30 coflows of the Facebook trace (150 ports): an index out of bounds raises ``IndexError``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FB_TRACE = ROOT.parent / "shared" / "traces" / "FB2010-1Hr-150-0.txt"

RUNS = """
import sys
from controller.policies import POLICIES, make_policy
from simulator.engine import Fabric, Simulator
from simulator.traces import load_trace

trace = load_trace(sys.argv[1])
for mode in ("ideal", "levels"):
    for offline in (False, True):
        for policy in sorted(POLICIES):
            sim = Simulator(Fabric(trace.n_ports, 1e9), make_policy(policy), mode=mode)
            trace.install(sim, offline=offline)
            sim.run()
            assert all(r.cct_s is not None for r in sim.coflows.values())
print("all runs done")
"""


@pytest.mark.skipif(not FB_TRACE.is_file(), reason=f"{FB_TRACE} not found")
def test_every_policy_and_mode_runs_with_bounds_checked_kernels(tmp_path):
    lines = FB_TRACE.read_text().splitlines()
    ports = lines[0].split()[0]
    cut = tmp_path / "fb30.txt"
    cut.write_text("\n".join([f"{ports} 30", *lines[1:31]]) + "\n")
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(
        [sys.executable, "-c", RUNS, str(cut)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "all runs done" in done.stdout
