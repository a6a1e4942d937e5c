"""controller/stats.py: the distributions at known points, an interval's one JSON shape (and
the older one result files on disk still hold), and how intervals are written out."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from controller.stats import (
    JSON_KEYS,
    Interval,
    format_interval,
    format_percent,
    mean_ci,
    normal_quantile,
    paired_ratio_ci,
    t_quantile,
    t_sf,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_distributions_at_known_points():
    assert normal_quantile(0.975) == pytest.approx(1.959963985, abs=1e-9)
    assert normal_quantile(0.8) == pytest.approx(0.841621234, abs=1e-9)
    assert normal_quantile(0.5) == 0.0
    assert t_quantile(0.975, 1) == pytest.approx(12.7062047, abs=1e-7)
    assert t_quantile(0.025, 5) == pytest.approx(-2.5705818, abs=1e-7)
    # the upper tail stays exact where 1 - CDF would round to 0
    assert 0 < t_sf(40.0, 30) < 1e-25
    assert t_sf(0.0, 3) == 0.5


@pytest.mark.parametrize(
    "call",
    [
        lambda: t_quantile(0.5, 0),
        lambda: t_sf(1.0, 0.5),
        lambda: normal_quantile(0.0),
        lambda: t_quantile(1.0, 3),
    ],
)
def test_out_of_range_arguments_are_errors(call):
    with pytest.raises(ValueError):
        call()


def test_an_interval_round_trips_through_its_json():
    ci = mean_ci([1.0, 2.0, 4.0])
    entry = json.loads(json.dumps(ci.to_json()))
    assert tuple(entry) == JSON_KEYS
    assert entry["ci95"] == pytest.approx(ci.half_width)
    assert Interval.from_json(entry) == ci
    ratio = paired_ratio_ci({1: 1.0, 2: 3.0}, {1: 2.0, 2: 2.0})
    assert Interval.from_json(ratio.to_json()) == ratio
    one = json.loads(json.dumps(mean_ci([5.0]).to_json()))  # (NaN half-width, as before)
    assert Interval.from_json(one) == Interval(5.0, 5.0, 5.0, 1)


def test_the_older_mean_ci95_n_entries_still_read():
    assert Interval.from_json({"mean": 10.0, "ci95": 2.0, "n": 3}) == Interval(10.0, 8.0, 12.0, 3)
    assert Interval.from_json({"mean": 10.0, "ci95": math.nan, "n": 1}).format(1) == "10.0 (n=1)"
    assert format_interval({"mean": 31.25, "ci95": 1.5, "n": 3}, 1) == "31.2 +/- 1.5"


def test_one_way_of_writing_intervals():
    ci = Interval(30.0, 28.5, 31.5, 4)
    assert format_interval(ci, 1) == format_interval(ci.to_json(), 1) == "30.0 +/- 1.5"
    ratio = Interval(0.9, 0.85, 0.96, 4)
    assert format_interval(ratio, 3) == "0.900 [0.850, 0.960]"
    assert format_interval(Interval(0.9, 0.9, 0.9, 1), 3) == "0.900 (n=1)"
    assert format_interval(None) == "-"
    assert format_interval(dict.fromkeys(JSON_KEYS)) == "-"  # a ratio that could not be formed
    assert format_percent(Interval(0.62, 0.57, 0.67, 3)) == "62 +/- 5"
    assert format_percent({"mean": 0.62, "ci95": 0.05, "n": 3}) == "62 +/- 5"
    assert format_percent(None) == "-"


def test_scipy_is_imported_on_first_use_not_with_the_module():
    code = ("import sys, controller.stats as s\n"
            "s.format_interval(s.Interval(1.0, 0.5, 1.5, 3))\n"
            "print('scipy.stats' in sys.modules)\n"
            "s.mean_ci([1.0, 2.0])\n"
            "print('scipy.stats' in sys.modules)\n")  # fmt: skip
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert run.stdout.split() == ["False", "True"]
