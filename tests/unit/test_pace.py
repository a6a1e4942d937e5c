"""benchmarks/pace.py: the machine's pace that the benchmarks print beside their numbers."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import pace  # noqa: E402


def test_the_references_are_the_same_work_every_time():
    first, second = pace.References(), pace.References()
    assert first.matrix.n_items == pace.N_ITEMS
    assert first.matrix.n_ports == pace.N_PORTS
    order = first.compiled()
    assert sorted(order) == list(range(pace.N_ITEMS))
    assert second.compiled() == order
    assert first.compiled() == order  # (BSSI scales a copy of the weights, not the matrix)
    assert first.interpreted() == second.interpreted() == first.interpreted()
    assert first.memory() == second.memory() == first.memory()
    assert sorted(first.gather_at.tolist()) == list(range(pace.GATHERED))


def test_the_pace_is_two_medians_of_positive_timings():
    got = pace.measure(samples=3)
    assert got.samples == 3
    assert got.compiled_ms > 0 and got.interpreted_ms > 0 and got.memory_ms > 0
    line = got.describe()
    assert f"compiled {got.compiled_ms:.3f} ms" in line
    assert f"interpreted {got.interpreted_ms:.3f} ms" in line
    assert f"memory {got.memory_ms:.2f} ms" in line
    assert "medians of 3" in line
    with pytest.raises(ValueError, match="samples"):
        pace.measure(samples=0)


def test_measuring_on_a_cpu_gives_this_thread_its_cpus_back():
    had = os.sched_getaffinity(0)
    one = min(had)
    seen = []
    real = pace.measure

    def spy(samples):
        seen.append(os.sched_getaffinity(0))
        return real(samples)

    pace.measure = spy
    try:
        pace.measure_on({one}, samples=1)
    finally:
        pace.measure = real
    assert seen == [{one}]
    assert os.sched_getaffinity(0) == had


def test_the_command_prints_the_pace_and_refuses_bad_flags(capsys):
    assert pace.main(["--samples", "2"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 2 and out[0] == pace.describe_machine()
    assert "pace: compiled " in out[1] and "medians of 2" in out[1]
    for flags, message in [
        (["--samples", "0"], "--samples must be >= 1"),
        (["--watch", "-1"], "--watch must be >= 0"),
        (["--cpu", "4096"], "--cpu 4096: not one of this machine's CPUs"),
    ]:
        with pytest.raises(SystemExit) as exited:
            pace.main(flags)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err


def _busy(seconds: float) -> int:
    """Interpreted work for ``seconds`` of wall time (where a signal handler can run)."""
    ends, turns = time.perf_counter() + seconds, 0
    while time.perf_counter() < ends:
        turns += 1
    return turns


def test_a_run_pace_reads_while_the_run_goes_on_and_puts_the_timer_back():
    def before(signum, frame):
        raise AssertionError("the run's own handler must not be called during it")

    had = signal.signal(signal.SIGALRM, before)
    try:
        with pace.RunPace(interval_s=0.02, calls=2) as run:
            _busy(0.4)
        assert signal.getsignal(signal.SIGALRM) is before
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.signal(signal.SIGALRM, had)
    assert 5 <= len(run.readings_ms) <= 21
    assert all(reading > 0 for reading in run.readings_ms)
    assert run.mean_ms == pytest.approx(sum(run.readings_ms) / len(run.readings_ms))
    # each reading is two calls of the compiled reference, timed inside the readings' time
    assert 2 * sum(run.readings_ms) / 1e3 <= run.spent_s < 0.4


def test_a_run_shorter_than_an_interval_gets_one_reading_at_its_end():
    with pace.RunPace(interval_s=30.0) as run:
        assert run.readings_ms == [] and run.mean_ms is None
    assert len(run.readings_ms) == 1 and run.mean_ms == run.readings_ms[0] > 0
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_run_pace_refuses_other_threads_and_bad_settings():
    failed = []

    def enter():
        try:
            with pace.RunPace():
                pass
        except RuntimeError as error:
            failed.append(str(error))

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert failed == ["RunPace reads on SIGALRM, which only the main thread can take"]
    for settings in ({"interval_s": 0.0}, {"calls": 0}):
        with pytest.raises(ValueError, match="interval_s > 0 and calls >= 1"):
            pace.RunPace(**settings)


def test_the_machine_is_named_from_cpuinfo():
    cpuinfo = (
        "processor\t: 0\ncpu family\t: 6\nmodel\t\t: 207\n"
        "model name\t: Intel(R) Xeon(R) Processor\nstepping\t: 2\n\n"
        "processor\t: 1\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Other\n"
    )
    total = os.cpu_count()
    assert pace.describe_machine(cpuinfo) == (
        f"machine: Intel(R) Xeon(R) Processor (family 6, model 207, stepping 2), {total} CPUs"
    )
    assert pace.describe_machine("") == f"machine: processor unknown, {total} CPUs"
    assert pace.describe_machine().startswith("machine: ")
    had = os.sched_getaffinity(0)
    if total > 1:  # (on one CPU of several, the line says so)
        os.sched_setaffinity(0, {min(had)})
        try:
            assert pace.describe_machine("").endswith(f"{total} CPUs (this process on 1)")
        finally:
            os.sched_setaffinity(0, had)
