"""The compiled kernels never index outside their arrays.

Numba does not check indices: a kernel writing past an array corrupts memory silently (or
crashes much later). This test compiles the kernels afresh with bounds checking on (its own
cache, about a minute and a half of one core) and runs every policy in both modes, online and
offline, on the first 30 coflows of the Facebook trace (150 ports): an index out of bounds
raises ``IndexError``.

The compile is most of that, so the run starts in the background as soon as the test is
collected (``tests/conftest.py``), at the lowest CPU priority: it takes the core the other
tests leave idle, and the test waits for it and checks what it printed.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from netsched_data import FULL_TRACE, trace

ROOT = Path(__file__).resolve().parents[2]
FB_TRACE = trace(FULL_TRACE)  # bundled with the package

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


class BoundsCheckedRuns:
    """The runs above in a process of their own, started once, in the background."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.work: Path | None = None

    def start(self, work: Path, niceness: int = 19) -> None:
        """Start the runs in ``work`` (their trace, cache and output; no-op once started),
        ``niceness`` added to their CPU priority. They are killed if this process dies
        first."""
        if self.proc is not None:
            return
        self.work = work
        lines = FB_TRACE.read_text().splitlines()
        ports = lines[0].split()[0]
        cut = work / "fb30.txt"
        cut.write_text("\n".join([f"{ports} 30", *lines[1:31]]) + "\n")
        env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(work / "cache"))

        def in_background() -> None:
            os.nice(niceness)
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

        with open(work / "out", "w") as out, open(work / "err", "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", RUNS, str(cut)], cwd=ROOT, env=env, stdout=out,
                stderr=err, preexec_fn=in_background,
            )  # fmt: skip

    def wait(self, work: Path, timeout_s: float) -> tuple[int, str, str]:
        """Wait for the runs (starting them now, in ``work``, if they were not); their exit
        code, output and error output."""
        self.start(work, niceness=0)
        assert self.proc is not None and self.work is not None
        code = self.proc.wait(timeout=timeout_s)
        return code, (self.work / "out").read_text(), (self.work / "err").read_text()

    def stop(self) -> None:
        """Stop the runs if they are still going (by their PID) and remove their cache."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.work is not None:
            shutil.rmtree(self.work / "cache", ignore_errors=True)


PR_SET_PDEATHSIG = 1  # (linux/prctl.h)
BOUNDS_CHECKED_RUNS = BoundsCheckedRuns()


def test_every_policy_and_mode_runs_with_bounds_checked_kernels(tmp_path):
    try:
        code, out, err = BOUNDS_CHECKED_RUNS.wait(tmp_path, timeout_s=900)
        assert code == 0, err[-2000:]
        assert "all runs done" in out
    finally:
        BOUNDS_CHECKED_RUNS.stop()
