"""The claims atlas: cells of a map, verdicts per cell on constructed results, the sequential
seed rule, trace windows, and a tiny atlas end to end in the simulator."""

from __future__ import annotations

import argparse
import csv
import json
import math

import pytest

from experiments import atlas, atlas_points, claim_map, claims
from experiments.claim_map import ClaimMap, Dimension, Level, Metric, Reading
from experiments.verdicts import Verdict


def test_the_maps_cover_their_grids_and_each_variation_alone():
    beamer = claims.BEAMER
    grid = 3 * 2 * 2  # load x models x arrivals
    # per-rank levels, ps, ring, hyperband, asha: each alone over the grid
    assert len(beamer.cells()) == grid * (1 + 1 + 2 + 2)
    assert len(beamer.cells(quick=True)) == grid  # the variations are not quick
    assert len(claims.JPAS.cells()) == 3 * 2 * 2 and len(claims.JPAS.cells(quick=True)) == 6
    assert len(claims.HERMES.cells()) == 3 * 3 * 2 * 2 and len(claims.HERMES.cells(quick=True)) == 9
    cells = beamer.cells()
    assert len({claim_map.cell_key(c) for c in cells}) == len(cells)
    # the first cell is the report's setting
    assert beamer.settings(cells[0]) == dict(claims.BEAMER_BASE)
    heavy_ring = {**cells[0], "load": "heavy", "pattern": "ring"}
    settings = beamer.settings(heavy_ring)
    assert settings["n_hosts"] == 16 and settings["patterns"] == ["ring"]
    assert settings["n_tasks"] == 10


def test_other_readings_run_on_the_grid_cells_only():
    beamer = claims.BEAMER
    grid_cell = beamer.cells()[0]
    varied = {**grid_cell, "search": "asha"}
    assert [r.label for r in beamer.policies_of(grid_cell)] == [
        "beamer", "beamer-arrival", "beamer-srpt", "sincronia", "fifo-lm", "fair",
    ]  # fmt: skip
    assert [r.label for r in beamer.policies_of(varied)] == ["beamer", "sincronia", "fifo-lm",
                                                             "fair"]  # fmt: skip
    pts = claim_map.points(beamer, [grid_cell, varied], [1, 2])
    assert len(pts) == 6 * 2 + 4 * 2
    assert pts[0] == {"claim": "beamer", "cell": grid_cell, "policy": "beamer", "seed": 1}


def toy_claim(**kw) -> ClaimMap:
    return ClaimMap(
        key="toy",
        name="Toy",
        paper="nobody",
        statement="x beats the baselines",
        kind="network-hpo",
        base={},
        grid=(Dimension("size", "why not", (Level("small"), Level("big"))),),
        variations=(),
        readings=(Reading("x", "beamer"),),
        baselines=(Reading("a", "fair"), Reading("b", "sincronia")),
        metrics=(Metric("t", "time"),),
        **kw,
    )


def constructed(per_cell: dict[str, dict[str, list[float]]]) -> dict:
    """Results of the toy claim: per cell, per policy, the metric on seeds 1, 2, ..."""
    return {
        (claim_map.cell_key({"size": cell}), policy, seed): {"t": value}
        for cell, policies in per_cell.items()
        for policy, values in policies.items()
        for seed, value in enumerate(values, start=1)
    }


def test_each_cell_gets_its_own_verdict_per_baseline():
    base = [100.0, 120.0, 90.0, 110.0, 105.0]
    wiggle = [1.01, 0.99, 1.0, 1.005, 0.995]
    results = constructed({
        # x 20 % faster than a; within 1 % of b: reproduced and equivalent
        "small": {"x": [v * 0.8 * w for v, w in zip(base, wiggle, strict=True)], "a": base,
                  "b": [v * 0.8 for v in base]},
        # x 20 % slower than a; all over the place against b: opposite and inconclusive
        "big": {"x": [v * 1.2 * w for v, w in zip(base, wiggle, strict=True)], "a": base,
                "b": [v * f for v, f in zip(base, [0.5, 2.0, 0.7, 1.6, 1.0], strict=True)]},
    })  # fmt: skip
    toy = toy_claim()
    cells = toy.cells()
    seeds = {claim_map.cell_key(c): [1, 2, 3, 4, 5] for c in cells}
    small, big = atlas.judge(toy, cells, results, seeds)
    verdict = {(c.cell["size"], b): d.verdict for c in (small, big)
               for (_, b, _), d in c.decisions.items()}  # fmt: skip
    assert verdict == {
        ("small", "a"): Verdict.REPRODUCED, ("small", "b"): Verdict.EQUIVALENT,
        ("big", "a"): Verdict.OPPOSITE, ("big", "b"): Verdict.INCONCLUSIVE,
    }  # fmt: skip
    assert small.decisions[("x", "a", "t")].ratio.mean == pytest.approx(0.8, rel=0.01)
    needed = big.decisions[("x", "b", "t")].seeds_needed
    assert needed is not None and needed > 5
    # the sequential rule: the undecided cell grows to what the power estimate asks, if the
    # cap allows; the decided one stays
    assert atlas.seeds_wanted(toy, small, max_seeds=100) == 5
    assert atlas.seeds_wanted(toy, big, max_seeds=needed) == needed
    assert atlas.seeds_wanted(toy, big, max_seeds=needed - 1) == 5
    counts = atlas.counts(toy, [small, big])
    assert counts["a"] == {"reproduced": 1, "opposite": 1, "equivalent": 0, "inconclusive": 0}
    assert counts["b"] == {"reproduced": 0, "opposite": 0, "equivalent": 1, "inconclusive": 1}
    # one Holm family over the whole map is stricter, never more decisive
    wide = atlas.map_wide(toy, [small, big], results, seeds)
    assert sum(wide.values()) == 4 and wide["inconclusive"] >= 1
    rows = atlas.table(toy, [small, big], "x", "t")
    assert rows[2].startswith("| small | 5 | 0.80") and " R |" in rows[2] and " = |" in rows[2]
    assert "? (needs" in rows[3]


def test_a_seed_a_policy_did_not_measure_is_left_out_of_the_pairs():
    results = constructed({"small": {"x": [1.0, None, 3.0], "a": [2.0, 2.0, 0.0]}})
    assert atlas.paired_ratios(results, {"size": "small"}, "x", "a", "t", [1, 2, 3, 4]) == [0.5]


def test_trace_windows_partition_the_trace_and_scale_the_load(tmp_path):
    from simulator.traces import load_trace, write_flow_trace

    path = tmp_path / "trace.txt"
    write_flow_trace(path, 4, [(i, 10_000 * i, [(0, 1, 1.0)]) for i in range(1, 13)])  # 10 s apart
    whole = load_trace(path)
    windows = [atlas_points.trace_window(str(path), w, 3, 2.0) for w in (1, 2, 3)]
    ids = [c.coflow_id for w in windows for c in w.coflows]
    assert sorted(ids) == sorted(c.coflow_id for c in whole.coflows) and len(set(ids)) == 12
    for w in windows:
        arrivals = [c.arrival_s for c in w.coflows]
        assert arrivals[0] == 0.0 and arrivals[1:] == pytest.approx([5.0, 10.0, 15.0])
    with pytest.raises(ValueError, match="window must be in 1..3"):
        atlas_points.trace_window(str(path), 4, 3, 1.0)


def test_a_tiny_atlas_end_to_end(tmp_path, monkeypatch):
    tiny = ClaimMap(
        key="tiny",
        name="Tiny",
        paper="nobody",
        statement="beamer beats fair on a tiny cluster",
        kind="network-hpo",
        base=dict(n_hosts=6, n_tasks=2, configs_per_task=3, eta=3, min_iterations=2,
                  models=["resnet50"], patterns=["ring"], mean_interarrival_s=0.0,
                  search="halving", link_bps=1e9, mode="levels"),
        grid=(Dimension("tasks", "how many compete", (Level("2"), Level("3", {"n_tasks": 3}))),),
        variations=(Dimension("levels", "a variation", (Level("8"),
                                                          Level("per-rank", {"mode": "ideal"}))),),
        readings=(Reading("beamer", "beamer"),),
        baselines=(Reading("fair", "fair"),),
        metrics=(Metric("avg_sct_s", "average SCT"), Metric("p95_sct_s", "p95 SCT")),
        context=("busiest_quarter_busy",),
    )  # fmt: skip
    monkeypatch.setitem(claims.MAPS, "tiny", tiny)
    args = argparse.Namespace(sequential=True, ray_address=None, parallel=None, resume=False)
    (outcome,) = atlas.run_atlas([tiny], tmp_path, args, seeds=2, max_seeds=3,
                                 progress=lambda _: None)  # fmt: skip
    assert len(outcome.cells) == 2 * 2
    for cell in outcome.cells:
        assert cell.seeds in (2, 3)
        assert {m for (_, _, m) in cell.decisions} == {"avg_sct_s", "p95_sct_s"}
        assert 0 < cell.context["busiest_quarter_busy"] <= 1
    with (tmp_path / "atlas-tiny.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 * 2 and {r["verdict"] for r in rows} <= {v.value for v in Verdict}
    assert all(float(r["low"]) <= float(r["ratio"]) <= float(r["high"]) for r in rows)
    stored = json.loads((tmp_path / "atlas-tiny.json").read_text())
    assert len(stored["cells"]) == 4
    assert (tmp_path / "atlas-tiny.png").stat().st_size > 0
    assert sum(outcome.map_wide.values()) == 4
    text = "\n".join(atlas.markdown(outcome, tmp_path))
    assert "## Tiny (nobody)" in text and "![Tiny map](atlas-tiny.png)" in text
    assert "- **tasks** (2, 3): how many compete." in text
    # every run is a point file: a rerun with --resume runs nothing new
    runs = len(list((tmp_path / "points").glob("*.json")))
    assert runs >= 4 * 2 * 2
    args.resume = True
    again = atlas.run_atlas([tiny], tmp_path, args, seeds=2, max_seeds=3, progress=lambda _: None)
    assert len(list((tmp_path / "points").glob("*.json"))) == runs
    assert [c.decisions for c in again[0].cells] == [c.decisions for c in outcome.cells]
    assert not math.isnan(outcome.cells[0].decisions[("beamer", "fair", "avg_sct_s")].ratio.mean)


def test_the_sequential_rule_follows_the_estimates_within_the_cap():
    from controller.stats import Interval
    from experiments.verdicts import Decision

    def cell(*needed):
        decisions = {
            ("x", b, "t"): Decision(
                Verdict.INCONCLUSIVE, Interval(1.0, 0.9, 1.1, 4), 0.5, 0.5, 0.05, 0.05, n
            )  # fmt: skip
            for b, n in zip("ab", needed, strict=True)
        }
        return atlas.Cell({"size": "small"}, 4, decisions, {})

    toy = toy_claim()
    assert atlas.seeds_wanted(toy, cell(7, 30), max_seeds=12) == 7  # b cannot be decided
    assert atlas.seeds_wanted(toy, cell(3, 30), max_seeds=12) == 6  # at least two more
    assert atlas.seeds_wanted(toy, cell(3, 30), max_seeds=5) == 5  # never past the cap
    assert atlas.seeds_wanted(toy, cell(30, None), max_seeds=12) == 4  # nothing within reach


def test_the_breakdown_per_level_says_where_the_verdicts_fall():
    from controller.stats import Interval
    from experiments.verdicts import Decision

    def decided(verdict):
        return Decision(verdict, Interval(1.0, 0.9, 1.1, 5), 0.5, 0.5, 0.05, 0.05, None)

    toy = toy_claim()
    cells = [
        atlas.Cell({"size": "small"}, 5, {("x", "a", "t"): decided(Verdict.REPRODUCED),
                                           ("x", "b", "t"): decided(Verdict.REPRODUCED)}, {}),
        atlas.Cell({"size": "big"}, 5, {("x", "a", "t"): decided(Verdict.OPPOSITE),
                                         ("x", "b", "t"): decided(Verdict.EQUIVALENT)}, {}),
    ]  # fmt: skip
    lines = atlas.by_level(toy, cells)
    assert lines[2:] == [
        "| size | small | 1 | 2 | 0 | 0 | 0 |",
        "| size | big | 1 | 0 | 1 | 1 | 0 |",
    ]


def test_a_users_policies_join_the_maps_as_readings():
    network, gpu = (
        "examples.smallest_first:SmallestFirst",
        "examples.shortest_remaining:ShortestRemaining",
    )
    beamer = claim_map.with_policies(claims.BEAMER, [network, "beamer", network], [gpu])
    assert [r.label for r in beamer.readings] == [
        *(r.label for r in claims.BEAMER.readings), network,  # once; beamer is there already
    ]  # fmt: skip
    assert beamer.baselines == claims.BEAMER.baselines
    hermes = claim_map.with_policies(claims.HERMES, [network], [gpu])
    assert [r.label for r in hermes.readings] == ["hermes", gpu]
    assert claim_map.with_policies(claims.VARYS) is claims.VARYS
    # on the grid cells only, like the other readings
    cells = hermes.cells()
    assert {p["policy"] for p in claim_map.points(hermes, cells[:1], [1])} == {
        "hermes",
        gpu,
        "fifo",
        "rr",
        "slaq",
    }
    # a worker knows only the paper's map: the point names the policy, and it is loaded there
    small = next(c for c in cells if c["per-gpu"] == "2" and c["search"] == "halving")
    point = {"claim": "hermes", "cell": small, "policy": gpu, "seed": 1}
    mine = atlas_points.run_point(point)
    fifo = atlas_points.run_point({**point, "policy": "fifo"})
    assert set(mine) == set(fifo) and mine["best_identified_s"] > 0
    assert mine != fifo  # (it ran a policy of its own)
