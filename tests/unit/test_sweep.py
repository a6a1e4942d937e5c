"""cli.sweep: one file per point, --resume runs only what is missing, a failing point loses
itself only; cli.progress: the ETA."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from cli import sweep
from cli.progress import Progress, clock
from cli.sweep import SweepError, add_arguments, point_file, run_points

ROOT = Path(__file__).resolve().parents[2]
CALLS: list[dict] = []


def square(point: dict) -> dict:
    CALLS.append(point)
    if point["x"] == 3 and point.get("fail"):
        raise ValueError("three is unlucky")
    return {"square": point["x"] ** 2}


def flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--sequential", *argv])


def test_a_failing_point_loses_only_itself_and_resume_runs_only_what_is_missing(tmp_path):
    points = [{"x": x, "fail": True} for x in range(5)]
    CALLS.clear()
    with pytest.raises(SweepError, match="1 of 5 points failed") as failed:
        run_points(points, square, tmp_path, flags())
    assert "three is unlucky" in str(failed.value) and '"x": 3' in str(failed.value)
    assert len(CALLS) == 5  # the points after the failure still ran
    written = {json.loads(p.read_text())["point"]["x"] for p in tmp_path.glob("*.json")}
    assert written == {0, 1, 2, 4}
    assert "ValueError" in next(tmp_path.glob("*.error.txt")).read_text()

    CALLS.clear()
    fixed = [dict(point) for point in points]
    fixed[3]["fail"] = False  # other parameters: its failure's file does not count as done
    results = run_points(fixed, square, tmp_path, flags("--resume"))
    assert [r["square"] for r in results] == [0, 1, 4, 9, 16]  # in the points' order
    # only the point whose parameters changed ran again (the others kept their files)
    assert CALLS == [{"x": 3, "fail": False}]
    CALLS.clear()
    run_points(fixed, square, tmp_path, flags())  # without --resume everything runs again
    assert len(CALLS) == 5


def test_point_files_are_readable_and_distinct():
    a, b = point_file({"policy": "fair", "seed": 1}), point_file({"policy": "fair", "seed": 2})
    assert a.startswith("policy=fair_seed=1_") and a.endswith(".json") and a != b
    assert "/" not in point_file({"trace": "/some/where/trace.txt"})


def test_progress_estimates_the_time_left(capsys, monkeypatch):
    now = [100.0]
    monkeypatch.setattr("cli.progress.time.monotonic", lambda: now[0])
    progress = Progress(4, "runs", done=1, bar=False)  # one done before (a resumed sweep)
    assert progress.eta_s() is None
    now[0] += 10.0
    progress.step("first")
    # one counted step in 10 s, two left
    assert progress.eta_s() == pytest.approx(20.0)
    assert capsys.readouterr().out == "[2/4 0:10 elapsed, ETA 0:20] first\n"
    assert clock(3725) == "1:02:05" and clock(59.6) == "1:00"


def test_start_up_counts_as_elapsed_but_not_in_the_rate(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("cli.progress.time.monotonic", lambda: now[0])
    progress = Progress(4, "runs", bar=False, lines=False)
    now[0] += 30.0  # Ray starting
    progress.begin_work()
    now[0] += 5.0
    progress.step()
    assert progress.eta_s() == pytest.approx(15.0)  # 5 s a point, not 35
    assert "0:35 elapsed" in progress.line("")


def test_a_weighted_eta_is_not_fooled_by_the_longest_points_going_first(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("cli.progress.time.monotonic", lambda: now[0])
    # one point of cost 8, then four of cost 1: 12 units of work
    progress = Progress(5, "runs", bar=False, lines=False, work=12.0)
    unweighted = Progress(5, "runs", bar=False, lines=False)
    now[0] = 8.0  # the big one took 8 s
    progress.step(work=8.0)
    assert progress.eta_s() == pytest.approx(4.0)  # 4 units left at 1 unit/s, not 4 x 8 s
    unweighted.step()
    assert unweighted.eta_s() == pytest.approx(32.0)  # what counting steps alone would say


def test_the_sweep_weighs_its_eta_by_cost(tmp_path, capsys):
    points = [{"x": x} for x in (1, 4, 2)]
    run_points(points, square, tmp_path, flags(), cost=lambda p: p["x"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("] ")[1].split(" (")[0] for line in lines] == [
        json.dumps({"x": 4}),
        json.dumps({"x": 2}),
        json.dumps({"x": 1}),
    ]  # the costliest first
    assert "ETA" in lines[0] and "ETA" not in lines[-1]


def test_a_corrupt_point_file_is_reported_and_run_again(tmp_path, capsys):
    points = [{"x": x} for x in range(3)]
    run_points(points, square, tmp_path, flags())
    broken = tmp_path / point_file(points[1])
    broken.write_text('{"point": {"x": 1}, "resu')  # cut off mid-write
    (tmp_path / point_file(points[2])).write_text('{"point": {"x": 2}, "result": 4}')
    CALLS.clear()
    results = run_points(points, square, tmp_path, flags("--resume"))
    assert [r["square"] for r in results] == [0, 1, 4]
    assert CALLS == [{"x": 1}, {"x": 2}]
    out = capsys.readouterr().out
    assert f"{broken}: unreadable (JSONDecodeError" in out and "running the point again" in out
    assert "not a point's result; running the point again" in out


def test_an_unreachable_ray_address_is_one_line_at_once(tmp_path):
    import socket
    import time

    from cli.sweep import check_reachable

    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(SweepError, match=f"--ray-address 127.0.0.1:{port}: cannot connect"):
            check_reachable(f"127.0.0.1:{port}")
        with pytest.raises(SweepError, match="cannot connect"):
            check_reachable(f"ray://127.0.0.1:{port}")
    assert time.monotonic() - started < 30
    check_reachable("auto")  # left to Ray


def test_ctrl_c_ends_a_sweep_with_the_resume_hint_and_no_traceback(tmp_path):
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    script = tmp_path / "slow_sweep.py"
    script.write_text(
        textwrap.dedent(f"""
        import argparse, signal, sys, time
        # (a shell starts a background job with SIGINT ignored, and Python then keeps it so:
        # a user's terminal delivers it, so the test makes it deliverable whatever ran pytest)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, {str(ROOT)!r})
        from cli.sweep import add_arguments, run_points
        def slow(point):
            time.sleep(0.2 if point["x"] < 2 else 60)
            return {{"x": point["x"]}}
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        args = parser.parse_args(["--sequential"])
        run_points([{{"x": x}} for x in range(4)], slow, __import__("pathlib").Path(sys.argv[1]),
                   args, label="points")
    """)
    )
    folder = tmp_path / "points"
    child = subprocess.Popen([sys.executable, str(script), str(folder)], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    while len(list(folder.glob("*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    assert "interrupted: 2 of 4 points saved in" in err and "rerun with --resume" in err
    assert "Traceback" not in err + out


def test_a_point_function_of_a_module_run_with_m_is_taken_from_its_module(monkeypatch):
    import types

    from cli.sweep import importable

    assert importable(square) is square  # (a module's own function: as it is)
    fake_main = types.ModuleType("__main__")
    fake_main.__spec__ = types.SimpleNamespace(name="tests.unit.test_sweep")
    monkeypatch.setitem(__import__("sys").modules, "__main__", fake_main)

    def as_main(point: dict) -> dict:  # what `python -m tests.unit.test_sweep` would define
        return square(point)

    as_main.__module__, as_main.__qualname__ = "__main__", "square"
    found = importable(as_main)
    assert found.__module__ == "tests.unit.test_sweep" and found.__qualname__ == "square"


def test_a_small_sweep_on_two_cores_runs_in_process_with_a_note(tmp_path, capsys, monkeypatch):
    """Nothing asks for Ray and 4 points on 2 cores: they run here, said so; ``--parallel``
    asks for Ray even then, and a bigger sweep or machine keeps the default Ray."""
    parser = argparse.ArgumentParser()
    sweep.add_arguments(parser)
    default, parallel = parser.parse_args([]), parser.parse_args(["--parallel", "2"])
    assert sweep.runs_in_process(default, 4, cores=2)
    assert not sweep.runs_in_process(default, 5, cores=2)
    assert not sweep.runs_in_process(default, 4, cores=4)
    assert not sweep.runs_in_process(parallel, 1, cores=1)
    assert not sweep.runs_in_process(parser.parse_args(["--ray-address", "auto"]), 1, cores=1)
    monkeypatch.setattr(sweep.os, "cpu_count", lambda: 2)

    def no_ray(*_args, **_kwargs):
        raise AssertionError("a small sweep on 2 cores started Ray")

    monkeypatch.setattr(sweep, "_on_ray", no_ray)
    points = [{"x": x} for x in range(4)]
    assert sweep.run_points(points, square, tmp_path, default) == [
        {"square": x * x} for x in range(4)
    ]
    assert "4 points on 2 cores run in this process" in capsys.readouterr().out
