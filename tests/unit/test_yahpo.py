"""Learning curves from the YAHPO Gym LCBench surrogate (bundled with the package,
:mod:`netsched_data`; run with onnxruntime, the optional ``yahpo`` extra)."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil

import pytest

import netsched_data
from workloads.curves import TabulatedCurve
from workloads.hpo import generate
from workloads.yahpo import LcBench, YahpoError

BUNDLED = netsched_data.yahpo()
needs_data = pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None,
    reason="the LCBench surrogate needs onnxruntime (pip install .[yahpo])",
)

# yahpo_gym 1.0.2's BenchmarkSet("lcbench"), instance 3945, objective_function(...) at epochs
# 1, 10 and 52 (val_accuracy, time), computed once with the official package as a reference
REFERENCE = [
    (
        dict(
            batch_size=64,
            learning_rate=0.01,
            momentum=0.9,
            weight_decay=0.001,
            num_layers=3,
            max_units=256,
            max_dropout=0.2,
        ),
        [40.4073, 88.6944, 90.6469],
        [20.783, 49.14, 155.768],
    ),
    (
        dict(
            batch_size=400,
            learning_rate=0.0003,
            momentum=0.3,
            weight_decay=0.05,
            num_layers=1,
            max_units=100,
            max_dropout=0.7,
        ),
        [44.5785, 44.3212, 57.4493],
        [3.274, 32.161, 93.99],
    ),
]


def test_tabulated_curve_interpolates_between_epochs():
    curve = TabulatedCurve((0.4, 0.6, 0.8, 0.8), iterations_per_epoch=10)
    assert curve.accuracy(0) == 0.0 and curve.accuracy(5) == pytest.approx(0.2)
    assert curve.accuracy(15) == pytest.approx(0.5) and curve.accuracy(100) == 0.8
    assert curve.final_accuracy == 0.8
    # 90 % of 0.8 = 0.72: between epoch 2 (0.6) and 3 (0.8), at 2.6 epochs
    assert curve.iterations_to(0.9) == pytest.approx(26.0)
    assert curve.accuracy(curve.iterations_to(0.9)) == pytest.approx(0.72)
    # a curve that peaks early and falls back: the first time it gets there counts
    bumpy = TabulatedCurve((0.9, 0.5, 0.6), iterations_per_epoch=1)
    assert bumpy.iterations_to(0.9) == pytest.approx(0.6)
    with pytest.raises(ValueError):
        curve.iterations_to(1.0)


def test_the_surrogate_files_are_bundled_with_their_licence():
    lcbench = netsched_data.lcbench()
    assert lcbench == BUNDLED / "lcbench" and BUNDLED.is_dir()
    for name in ("model.onnx", "encoding.json", "config_space.json", "LICENSE-2.0.txt"):
        assert (lcbench / name).is_file(), name
    assert "Apache License" in (BUNDLED / "LICENSE").read_text()
    readme = (BUNDLED / "README.md").read_text()
    assert "Pfisterer" in readme and "Apache" in readme
    assert json.loads((lcbench / "encoding.json").read_text())["OpenML_task_id"]["3945"] == 34
    assert netsched_data.find_yahpo(None) == netsched_data.find_yahpo("bundled") == BUNDLED


@needs_data
def test_surrogate_matches_the_official_package():
    bench = LcBench(BUNDLED, "3945")
    for config, accuracy, time_s in REFERENCE:
        out = bench.predict([config], [1, 10, 52])
        assert out[:, 1] == pytest.approx(accuracy, abs=1e-3)
        assert out[:, 0] == pytest.approx(time_s, abs=1e-2)


@needs_data
def test_generated_workloads_take_their_curves_from_the_surrogate():
    bench = LcBench()  # the bundled one
    tasks = generate(13, 2, seed=4, configs_per_task=9, surrogate=bench)
    again = generate(13, 2, seed=4, configs_per_task=9, surrogate=bench)
    for task, twin in zip(tasks, again, strict=True):
        budget = sum(iterations for _, iterations in task.plan)
        assert [c.epoch_accuracy for c in task.curves] == [c.epoch_accuracy for c in twin.curves]
        for curve in task.curves:
            assert isinstance(curve, TabulatedCurve)
            assert curve.iterations_per_epoch * 52 == pytest.approx(budget)
            assert all(0 <= a <= 1 for a in curve.epoch_accuracy)
            to_90 = curve.iterations_to(0.9)
            assert math.isinf(to_90) or 0 < to_90 <= budget
    finals = [c.final_accuracy for t in tasks for c in t.curves]
    assert max(finals) - min(finals) > 0.05  # configurations differ


@needs_data
@pytest.mark.parametrize("given", ["folder", "bundled", "nothing"])
def test_simulated_hpo_runs_on_surrogate_curves(tmp_path, given):
    """``--yahpo DIR``, ``--yahpo bundled`` and ``--yahpo`` alone (the bundled surrogate)."""
    from simulator.__main__ import main

    folder = tmp_path / "copy"
    shutil.copytree(BUNDLED, folder)
    yahpo = {"folder": [str(folder)], "bundled": ["bundled"], "nothing": []}[given]
    out = tmp_path / "y"
    code = main(
        [
            "hpo",
            "--yahpo",
            *yahpo,
            "--tasks",
            "1",
            "--configs",
            "4",
            "--min-iterations",
            "3",
            "--policy",
            "fair",
            "--gpu-policy",
            "hermes",
            "--out",
            str(out),
        ]
    )
    assert code == 0 and (out / "tasks-fair+hermes.csv").stat().st_size > 0
    curves = json.loads((out / "summary.json").read_text())["workload"]["curves"]
    assert curves == f"YAHPO LCBench task 3945 ({yahpo[0] if yahpo else 'bundled'})"


def test_missing_data_and_unknown_tasks_are_clear_errors(tmp_path):
    with pytest.raises(YahpoError, match="has no model.onnx, encoding.json, config_space.json"):
        LcBench(tmp_path)
    if importlib.util.find_spec("onnxruntime") is not None:
        with pytest.raises(YahpoError, match="unknown OpenML task '42'; known: 126025"):
            LcBench(BUNDLED, "42")
