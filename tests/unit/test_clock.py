"""The simulator's clock never runs backwards: periodic reorders across idle gaps, HPO runs with
gaps between tasks, and the guard that refuses a backwards move even under ``python -O``."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from controller.policies import POLICIES, make_policy
from simulator.engine import Fabric, Simulator, _Ticks
from simulator.hpo import HpoDriver
from simulator.metrics import coflow_rows
from simulator.traces import MB, load_trace, write_fb_trace
from workloads.hpo import generate

ROOT = Path(__file__).resolve().parents[2]
# policies that reorder on a timer (JPAS), with a period short enough to tick inside the gaps
PERIODIC = [name for name in sorted(POLICIES) if make_policy(name).reorder_period_s]
SECONDS_OF_WORK = 119.2 * MB * 8 / 1e9  # one coflow of the trace alone on a 1 Gbit/s port


def gap_trace(tmp_path: Path) -> Path:
    """The 2-port trace of the bug report: 1 s of work at 0 ms, the same again at 5,000 ms."""
    path = tmp_path / "gap.txt"
    write_fb_trace(path, 2, [(1, 0, [0], {1: 119.2}), (2, 5000, [0], {1: 119.2})])
    return path


def test_some_policy_reorders_on_a_timer():
    assert PERIODIC == ["jpas"]


@pytest.mark.parametrize("offline", [False, True], ids=["online", "offline"])
@pytest.mark.parametrize("mode", ["levels", "ideal"])
@pytest.mark.parametrize("policy", PERIODIC)
@pytest.mark.parametrize("period_s", [0.3, 1.0, 7.0])
def test_idle_gap_keeps_the_clock_moving_forward(tmp_path, policy, mode, offline, period_s):
    trace = load_trace(gap_trace(tmp_path))
    sim = Simulator(Fabric(2, 1e9), make_policy(policy, period_s=period_s), mode=mode)
    trace.install(sim, offline=offline)
    sim.run()
    rows = {r["coflow_id"]: r for r in coflow_rows(sim)}
    if offline:  # both at 0, sharing the link: one ends at 2 s at the latest
        assert max(r["finish_s"] for r in rows.values()) == pytest.approx(2 * SECONDS_OF_WORK)
    else:  # each alone: 1 s of work each, the second starting at 5 s
        assert rows[1]["finish_s"] == pytest.approx(SECONDS_OF_WORK)
        assert rows[2]["finish_s"] == pytest.approx(5.0 + SECONDS_OF_WORK)
    for row in rows.values():
        assert row["cct_s"] >= SECONDS_OF_WORK * (1 - 1e-9)


@pytest.mark.parametrize("mode", ["levels", "ideal"])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_hpo_tasks_arriving_after_idle_gaps(policy, mode):
    """Tasks arriving far apart leave the network idle in between: every coflow, job, stage
    and task still ends after it starts, and the run ends when the last task does."""
    sim = Simulator(Fabric(6, 1e9), make_policy(policy), mode=mode)
    tasks = generate(
        6, 3, seed=4, configs_per_task=3, eta=3, min_iterations=2, scale=20,
        mean_interarrival_s=200.0,
    )  # fmt: skip
    arrivals = [task.arrival_s for task in tasks]
    assert min(b - a for a, b in zip(arrivals, arrivals[1:], strict=False)) > 5
    driver = HpoDriver(sim, tasks)
    times = []
    sim.on_coflow_done(lambda record: times.append(sim.now_s))
    sim.run()
    assert times == sorted(times)
    for row in coflow_rows(sim):
        assert row["finish_s"] >= row["arrival_s"]
    for row in driver.stage_rows() + driver.job_rows():
        assert row["finish_s"] >= row["start_s"]
    for row in driver.task_rows():
        assert row["hpo_completion_s"] > 0
    assert sim.now_s == pytest.approx(max(driver.task_finish_s.values()))


def test_ticks_skip_the_ones_an_idle_gap_passed():
    ticks = _Ticks(0.0, 1.0)
    assert ticks.after(0.0) == 1.0 and not ticks.due(0.5) and ticks.due(1.0)
    assert ticks.after(1.0) == 2.0
    assert ticks.after(5.3) == 6.0  # 2..5 fell in a gap
    assert ticks.due(6.0) and ticks.after(6.0) == 7.0
    assert _Ticks(0.0, None).after(3.0) == math.inf and not _Ticks(0.0, None).due(3.0)
    with pytest.raises(ValueError, match="period must be > 0"):
        _Ticks(0.0, 0.0)


def test_running_to_a_time_in_the_past_raises(tmp_path):
    sim = Simulator(Fabric(2, 1e9), make_policy("fair"))
    load_trace(gap_trace(tmp_path)).install(sim)
    sim.run(until_s=0.5)
    assert sim.now_s == 0.5
    with pytest.raises(RuntimeError, match="the clock would run backwards: 0.5 s -> 0.2 s"):
        sim.run(until_s=0.2)
    assert sim.now_s == 0.5


def test_backwards_guard_survives_python_O(tmp_path):
    """``python -O`` strips asserts; the clock guard is not one."""
    script = (
        "from controller.policies import make_policy\n"
        "from simulator.engine import Fabric, Simulator\n"
        "sim = Simulator(Fabric(2, 1e9), make_policy('fair'))\n"
        "sim.now_s = 5.0\n"
        "try:\n"
        "    sim._advance(4.0)\n"
        "except RuntimeError as exc:\n"
        "    print('refused:', exc)\n"
    )
    run = subprocess.run(
        [sys.executable, "-O", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert "refused: the clock would run backwards" in run.stdout


def test_jpas_period_does_not_change_an_hpo_run():
    """A job's progress (completed iterations) only changes when one of its coflows completes,
    and every completion makes the engine reorder: JPAS' timer adds nothing to HPO workloads
    but float rounding (a tick splits a step in two); it matters on traces, where JPAS ranks by
    bytes sent."""
    runs = []
    for period_s in (0.2, 1.0, 5.0):
        sim = Simulator(Fabric(8, 1e9), make_policy("jpas", period_s=period_s))
        driver = HpoDriver(sim, generate(8, 3, seed=2, configs_per_task=3, eta=3,
                                         min_iterations=2, mean_interarrival_s=20.0))  # fmt: skip
        sim.run()
        runs.append(driver.stage_rows())
    for other in runs[1:]:
        assert [r["configs"] for r in other] == [r["configs"] for r in runs[0]]
        assert [r["finish_s"] for r in other] == pytest.approx(
            [r["finish_s"] for r in runs[0]], rel=1e-12
        )
