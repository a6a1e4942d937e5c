"""The experiments' figures, built from constructed results: no error bar and no "95 % CI"
from one seed (experiments.figures), every title names its trace or workload, nothing drawn
for a value that is missing."""

from __future__ import annotations

import math
from argparse import Namespace

import matplotlib.pyplot as plt
import pytest
from matplotlib.container import BarContainer, ErrorbarContainer

from controller.stats import Interval, mean_ci
from experiments import gpu_experiments, run_testbed, sim_experiments, testbed_results
from experiments.figures import error_bars, spread_note
from experiments.testbed_settings import settings_of, workload_name
from workloads.hpo import describe_workload


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def error_containers(ax) -> list[ErrorbarContainer]:
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def whiskers(ax) -> int:
    """How many error bars ``ax`` draws (one line segment each)."""
    return sum(len(c.lines[2][0].get_segments()) for c in error_containers(ax))


def texts(fig) -> str:
    """Every title of ``fig`` and its axes, and every axis label, in one string."""
    parts = [fig.get_suptitle()]
    for ax in fig.axes:
        parts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
    return "\n".join(parts)


def test_the_spread_note_never_says_ci_for_one_seed():
    assert spread_note([1, 1, 1]) == "one seed"
    assert spread_note([]) == "one seed"
    assert spread_note([3, 3]) == "95 % CI over 3 seeds"
    assert spread_note([2, 5]) == "95 % CI over 2-5 seeds"
    assert spread_note([1, 3]) == "95 % CI over 1-3 seeds (none for one)"


def test_error_bars_only_where_there_is_an_interval():
    fig, ax = plt.subplots()
    one = Interval(2.0, 2.0, 2.0, 1)
    three = Interval(3.0, 2.5, 4.0, 3)
    assert error_bars(ax, [0, 1], [one, None]) is None
    assert error_containers(ax) == []
    drawn = error_bars(ax, [0, 1, 2], [one, three, None])
    assert drawn is not None and whiskers(ax) == 1
    ((x0, low), (x1, high)) = drawn.lines[2][0].get_segments()[0]
    assert (x0, x1, low, high) == (1, 1, 2.5, 4.0)
    _, side = plt.subplots()
    error_bars(side, [5], [three], horizontal=True)
    ((low, y0), (high, _)) = error_containers(side)[0].lines[2][0].get_segments()[0]
    assert (low, high, y0) == (2.5, 4.0, 5)


def test_the_workload_title_says_synthetic_and_names_its_size():
    assert describe_workload(9, "halving", ["ring"], 13, 2, seed=1) == (
        "synthetic HPO workload, seed 1: 13 hosts, 2 tasks of 9 configs, halving, ring"
    )
    assert describe_workload(1, "full", ("ps", "ring"), n_tasks=1, curves="LCBench task 3945") == (
        "synthetic HPO workload (LCBench task 3945 curves): 1 task of 1 config, full, ps/ring"
    )


# ---- the testbed: testbed.png and the schedule's title -----------------------------------


def a_testbed_summary(seeds: list[int], missing: str | None = None) -> dict:
    """A summary.json as seed_summary writes it: five policies over ``seeds``; ``missing``: a
    policy whose time to 90 % was never reached."""

    def entry(values):
        ci = mean_ci(values)
        return None if ci is None else {"mean": ci.mean, "ci95": ci.half_width, "n": ci.n}

    policies = {}
    for k, name in enumerate(["fair", "fifo-lm", "sincronia", "jpas", "beamer"]):
        values = [30.0 + 3 * k + seed for seed in seeds]
        policies[name] = {key: entry(values) for _, key, _ in testbed_results.PANELS}
        policies[name]["sim_avg_sct_s"] = entry([0.9 * v for v in values])
    if missing:
        policies[missing]["avg_time_to_90pct_s"] = None
        policies[missing]["sim_avg_sct_s"] = None
    return {
        "link_gbps": 1.0,
        "policies": policies,
        "workload": {"hosts": 13, "tasks": 2, "configs": 9, "search": "halving",
                     "patterns": ["ring"], "curves": None, "seeds": seeds},
    }  # fmt: skip


def test_testbed_figure_of_one_seed_has_no_error_bars_and_says_one_seed():
    fig = testbed_results.figure(a_testbed_summary([1], missing="jpas"))
    title = fig.get_suptitle()
    assert "95 % CI" not in title and title.endswith("; one seed")
    assert "synthetic HPO workload: 13 hosts, 2 tasks of 9 configs, halving, ring" in title
    for ax in fig.axes:
        assert error_containers(ax) == []
        (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
        assert bars.errorbar is None
    # a value never measured is no bar, not a bar of 0
    heights = [patch.get_height() for patch in fig.axes[1].containers[0]]
    assert math.isnan(heights[3]) and all(h > 0 for i, h in enumerate(heights) if i != 3)
    # nor a simulator's value it does not have a dot at 0
    (dots,) = [c for c in fig.axes[0].collections if c.get_label() == "simulator"]
    sim = [y for _, y in dots.get_offsets()]
    assert len(sim) == 5 and math.isnan(sim[3]) and all(y > 0 for i, y in enumerate(sim) if i != 3)


def test_testbed_figure_of_three_seeds_has_an_interval_per_policy():
    summary = a_testbed_summary([1, 2, 3])
    fig = testbed_results.figure(summary)
    assert fig.get_suptitle().endswith("; 95 % CI over 3 seeds")
    for ax, (_, key, _) in zip(fig.axes, testbed_results.PANELS, strict=True):
        assert whiskers(ax) == 5
        segment = error_containers(ax)[0].lines[2][0].get_segments()[0]
        fair = summary["policies"]["fair"][key]
        assert segment[1][1] - segment[0][1] == pytest.approx(2 * fair["ci95"])


def test_the_testbed_s_schedule_is_titled_by_its_workload():
    parse_args = run_testbed.build_parser().parse_args
    settings = settings_of(parse_args(["--configs", "9", "--hosts", "13", "--tasks", "2"]))
    assert workload_name(settings, 4) == (
        "synthetic HPO workload, seed 4: 13 hosts, 2 tasks of 9 configs, halving, ring"
    )
    settings = settings_of(parse_args(["--yahpo"]))  # (the surrogate itself is not needed)
    assert "(LCBench task 3945 curves)" in workload_name(settings, 4)


# ---- sim_experiments.py: hpo-<metric>.png and trace-cct.png ---------------------------------


def sweep_rows(seeds: list[int]) -> list[dict]:
    """hpo.csv's rows of a sweep over 13 and 64 hosts, two loads, three policies."""
    return [
        {"hosts": hosts, "load": load, "tasks": 2, "policy": policy, "seed": seed,
         "link_gbps": 1.0, "avg_sct_s": 10.0 + seed + 2 * (policy == "beamer"),
         "p95_sct_s": 20.0 + seed, "avg_time_to_90pct_s": 30.0 + seed * (1 + k)}
        for hosts in (13, 64) for load in (0.5, 1.0) for seed in seeds
        for k, policy in enumerate(("fair", "beamer", "sincronia"))
    ]  # fmt: skip


def sweep_args(seeds: list[int]) -> Namespace:
    return Namespace(hosts=[13, 64], loads=[0.5, 1.0], policy=["fair", "beamer", "sincronia"],
                     baseline="fair", seeds=seeds, search="halving", link_gbps=1.0)  # fmt: skip


@pytest.mark.parametrize("seeds", [[1], [1, 2, 3]])
def test_sim_sweep_figures_draw_intervals_only_over_seeds(seeds):
    summary = sim_experiments.seed_summary(sweep_rows(seeds))
    assert {row["avg_sct_s_vs_fair_n"] for row in summary} == {len(seeds)}
    fig = sim_experiments.hpo_figure(summary, "avg_sct_s", "average SCT", sweep_args(seeds))
    assert fig.get_suptitle() == (
        "synthetic HPO workload: tasks of 9 configs, halving, ps/ring; 1 Gbit/s"
    )
    for ax, hosts in zip(fig.axes, (13, 64), strict=True):
        if len(seeds) == 1:
            assert ax.get_title() == f"{hosts} hosts, one seed" and whiskers(ax) == 0
        else:
            assert ax.get_title() == f"{hosts} hosts, 95 % CI over 3 seeds"
            assert whiskers(ax) == 3 * 2  # every policy at both loads
        assert len(ax.get_lines()) >= 3  # every policy's ratios, with or without bars


def test_the_trace_figure_names_its_trace():
    rows = [{"trace": sim_experiments.trace_label("synthetic"), "policy": policy,
             "avg_cct_s": 3.0, "p95_cct_s": 5.0} for policy in ("beamer", "fair")]  # fmt: skip
    fig = sim_experiments.trace_figure(rows)
    assert fig.axes[0].get_title() == "coflow trace: synthetic (200 coflows, generated, seed 1)"
    bundled = [{**row, "trace": sim_experiments.trace_label(sim_experiments.DEFAULT_TRACE)}
               for row in rows]  # fmt: skip
    title = sim_experiments.trace_figure(bundled).axes[0].get_title()
    assert title == f"coflow trace: {sim_experiments.DEFAULT_TRACE} (bundled)"


# ---- gpu_experiments.py: gpu_policies.png and gpu_network_pairs.png -------------------------


def gpu_rows() -> list[dict]:
    """gpu.csv's rows: part 1 over three seeds, parts 2 and 3 over one; round-robin never
    saw its best configuration reach 90 %."""

    def row(part, search, hosts, seed, network, gpu, k):
        return {"part": part, "search": search, "hosts": hosts, "seed": seed,
                "network": network, "gpu": gpu, "best_identified_s": 10.0 + k,
                "best_to_90pct_s": None if gpu == "rr" else 12.0 + k,
                "hpo_completion_s": 30.0 + k, "avg_sct_s": 5.0 + k}  # fmt: skip

    rows = []
    for k, gpu in enumerate(gpu_experiments.GPU_ORDER):
        rows += [row("compute", "full", 0, seed, "-", gpu, k) for seed in (1, 2, 3)]
        rows += [row("cluster", search, 64, 1, "fair", gpu, k) for search in ("full", "halving")]
    for hosts in (13, 64):
        rows += [row("pairs", "halving", hosts, 1, network, gpu, k)
                 for k, (network, gpu) in enumerate(gpu_experiments.PAIRS)]  # fmt: skip
    return rows


def test_gpu_figures_name_their_workloads_and_seeds():
    args = Namespace(hosts=64, tasks=8, configs_alone=64, gpus_alone=8, good_fraction=0.1)
    fig = gpu_experiments.policies_figure(gpu_rows(), args)
    assert fig.get_suptitle().startswith("synthetic HPO workloads (10% of configs good)")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [
        "compute only: 64 configs on 8 GPUs\nfull search, mean of 3 seeds",
        "64 hosts, 8 tasks of 16 resnet50 configs\nfull search, one seed",
        "64 hosts, 8 tasks of 16 resnet50 configs\nsuccessive halving, one seed",
    ]
    assert "95 % CI" not in texts(fig) and all(whiskers(ax) == 0 for ax in fig.axes)
    rr_to_90 = fig.axes[0].containers[1][1]  # (the second metric's bar of the second policy)
    assert math.isnan(rr_to_90.get_height())
    pairs = gpu_experiments.pairs_figure(gpu_rows(), args)
    assert [ax.get_title() for ax in pairs.axes] == [
        "13 hosts, 2 tasks of 9 configs, successive halving, one seed",
        "64 hosts, 10 tasks of 9 configs, successive halving, one seed",
    ]
    assert pairs.get_suptitle().startswith("synthetic HPO workloads")
