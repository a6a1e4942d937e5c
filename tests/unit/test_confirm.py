"""experiments/confirm.py: the testbed's confirmation of a map (no testbed here: the cells it
chooses, the command it runs, and the report it makes of a finished experiment)."""

from __future__ import annotations

import json
import math

import pytest

from experiments import atlas, confirm, report_testbed
from experiments.claim_map import ClaimMap, Dimension, Level, Metric, Reading, cell_key
from experiments.claims import CLAIMS, MAPS, TESTBED_MAPS
from experiments.run_testbed import build_parser
from experiments.testbed_settings import settings_of
from workloads.hpo import generate


@pytest.mark.parametrize("key", sorted(TESTBED_MAPS))
def test_every_cell_of_a_testbed_map_runs_its_own_workload_on_the_testbed(key, tmp_path):
    """The command the confirmation runs sets every setting of the cell: the testbed's parser
    reads it back, and the testbed generates the workload the simulator's map ran."""
    small = TESTBED_MAPS[key]
    assert small.key in MAPS and CLAIMS[key].metrics == small.metrics
    assert {b.label for b in small.baselines} == {b.label for b in CLAIMS[key].baselines}
    generated = []
    for cell in small.cells():
        command = confirm.testbed_command(small, cell, confirm.SEEDS, tmp_path)
        assert command[1:3] == ["-m", "experiments.run_testbed"] and "--calibrate" in command
        testbed = settings_of(build_parser().parse_args(command[3:]))
        assert testbed.seeds == tuple(confirm.SEEDS) and testbed.out == tmp_path
        assert testbed.policies == tuple(r.policy for r in small.policies_of(cell))
        settings = small.settings(cell)
        assert testbed.modelled_link_bps == settings["link_bps"]
        simulated = {k: v for k, v in settings.items() if k not in ("link_bps", "mode")}
        simulated = {k: tuple(v) if isinstance(v, list) else v for k, v in simulated.items()}
        # (the bytes as modelled: a link scale of 1)
        mine = testbed.workload.generate(testbed.cluster.hosts, 2, 1.0)
        assert mine == generate(seed=2, **simulated)
        generated.append(mine)
    assert all(a != b for i, a in enumerate(generated) for b in generated[i + 1 :])


def test_a_setting_the_testbed_cannot_take_is_an_error():
    with pytest.raises(ValueError, match="no setting 'good_fraction'"):
        confirm.testbed_arguments({"good_fraction": 0.2})
    with pytest.raises(ValueError, match="mode 'ideal'"):
        confirm.testbed_arguments({"mode": "ideal"})
    assert confirm.testbed_arguments({"mean_interarrival_s": 60.0, "link_bps": 1e10}) == [
        "--interarrival", "60", "--link-gbps", "10",
    ]  # fmt: skip


def toy() -> ClaimMap:
    return ClaimMap(
        key="toy", name="Toy", paper="nobody", statement="x beats the baselines",
        kind="network-hpo", base={},
        grid=(Dimension("size", "why not", tuple(Level(n) for n in ("a", "b", "c", "d"))),),
        variations=(), readings=(Reading("x", "beamer"),),
        baselines=(Reading("p", "fair"), Reading("q", "sincronia")),
        metrics=(Metric("t", "time"),),
    )  # fmt: skip


def judged(ratios: dict[str, tuple[float, float]], wiggle: float = 0.003) -> list[atlas.Cell]:
    """The toy's cells judged on 6 seeds where x's ratio to p and to q is as given, with a
    small spread."""
    claim, results = toy(), {}
    for size, (to_p, to_q) in ratios.items():
        for seed in range(1, 7):
            noise = 1 + wiggle * (-1) ** seed
            key = cell_key({"size": size})
            results[(key, "p", seed)] = {"t": 100.0 + seed}
            results[(key, "x", seed)] = {"t": (100.0 + seed) * to_p * noise}
            results[(key, "q", seed)] = {"t": (100.0 + seed) * to_p / to_q}
    cells = claim.cells()
    return atlas.judge(claim, cells, results, {cell_key(c): range(1, 7) for c in cells})


def test_the_cells_chosen_are_the_largest_effect_and_the_least():
    claim = toy()
    cells = judged({"a": (0.9, 0.95), "b": (0.7, 1.2), "c": (1.01, 0.985), "d": (1.1, 1.05)})
    assert confirm.effect(claim, cells[1]) == pytest.approx(
        (abs(math.log(0.7)) + abs(math.log(1.2))) / 2, rel=0.01
    )
    chosen = confirm.choose_cells(claim, cells)
    assert chosen["largest"].cell == {"size": "b"}  # (an opposite effect counts as much)
    assert chosen["none"].cell == {"size": "c"}
    # a cell judged equivalent against every baseline is taken before a closer undecided one
    cells = judged({"a": (0.9, 0.95), "b": (0.7, 1.2), "c": (1.02, 1.02), "d": (1.0, 1.0)})
    cells[3] = atlas.Cell(cells[3].cell, 6, {}, {})  # d: nothing compared, never chosen
    noisy = judged({"c": (1.0, 1.0)}, wiggle=0.2)
    cells[2] = atlas.Cell({"size": "c"}, 6, noisy[2].decisions, {})  # c: undecided, ratio ~1
    cells[0] = judged({"a": (1.025, 0.98)})[0]
    verdicts = {d.verdict.value for d in cells[0].decisions.values()}
    assert verdicts == {"equivalent"}
    assert confirm.effect(claim, cells[2]) < confirm.effect(claim, cells[0])
    assert confirm.choose_cells(claim, cells)["none"].cell == {"size": "a"}
    with pytest.raises(ValueError, match="fewer than two cells"):
        confirm.choose_cells(claim, cells[3:])


def finished_experiment(seeds, bed: dict[str, list[float]], sim: dict[str, list[float]]) -> dict:
    """A finished testbed experiment: each policy's average SCT per seed, and the calibrated
    simulator's beside it."""
    runs = [
        {"policy": p, "seed": s, "sct_s": {"mean": b, "p95": 2 * b},
         "simulated": {"sct_s": {"mean": 0.9 * c, "p95": 1.8 * c}},
         "simulated_calibrated": {"sct_s": {"mean": c, "p95": 2 * c}}}
        for p in bed for s, b, c in zip(seeds, bed[p], sim[p], strict=True)
    ]  # fmt: skip
    return {"workload": {"seeds": list(seeds)}, "policies": {p: {} for p in bed}, "runs": runs}


def test_a_finished_experiment_is_read_again_only_with_the_seeds_and_policies_asked(tmp_path):
    summary = finished_experiment([1, 2], {"beamer": [1.0, 2.0]}, {"beamer": [1.0, 2.0]})
    runs = summary.pop("runs")
    assert confirm.finished(tmp_path, [1, 2], ["beamer"]) is None  # nothing there
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "results.json").write_text(json.dumps(runs))
    assert confirm.finished(tmp_path, [1, 2], ["beamer"])["runs"] == runs
    assert confirm.finished(tmp_path, [1, 2, 3], ["beamer"]) is None
    assert confirm.finished(tmp_path, [1, 2], ["beamer", "fair"]) is None
    (tmp_path / "results.json").write_text("{not json")
    assert confirm.finished(tmp_path, [1, 2], ["beamer"]) is None


def test_the_report_sets_the_predicted_verdicts_against_the_measured(tmp_path):
    small = TESTBED_MAPS["beamer"]
    seeds = [1, 2, 3, 4, 5]
    base = [30.0, 60.0, 25.0, 40.0, 28.0]
    # beamer 10 % faster than every baseline on the testbed; the simulator predicts that
    # against fair and sincronia but no difference against fifo-lm
    wiggle = [1.0, 1.004, 0.997, 1.002, 0.999]
    bed = {"beamer": [0.9 * b * w for b, w in zip(base, wiggle, strict=True)],
           "sincronia": base, "fifo-lm": base, "fair": base}  # fmt: skip
    sim = {**bed, "fifo-lm": [0.9 * b for b in base]}
    results = {
        (cell_key(c), r.label, s): {"avg_sct_s": s * w, "p95_sct_s": 2 * s * w}
        for c in small.cells() for r in small.policies_of(c)
        for s, w in zip(seeds, wiggle if r.label == "beamer" else [1.0] * 5, strict=True)
    }  # fmt: skip
    cells = atlas.judge(small, small.cells(), results,
                        {cell_key(c): seeds for c in small.cells()})  # fmt: skip
    c = confirm.Confirmation(
        CLAIMS["beamer"], atlas.ClaimOutcome(small, cells, {}),
        {"largest": cells[0], "none": cells[-1]},
        {"largest": finished_experiment(seeds, bed, sim)},
    )  # fmt: skip
    rows = report_testbed.confirmation_rows(c)
    mine = {(r["role"], r["baseline"], r["metric"]): r for r in rows}
    assert len(rows) == 2 * 3 * 2  # cells x baselines x metrics
    fair = mine[("largest", "fair", "avg_sct_s")]
    assert fair["measured"] == fair["predicted"] == "reproduced" and fair["agree"]
    assert fair["map"] == "equivalent"  # (the constructed map: every policy alike)
    assert fair["measured_ratio"]["mean"] == pytest.approx(0.9, rel=0.01)
    fifo = mine[("largest", "fifo-lm", "avg_sct_s")]
    assert fifo["measured"] == "reproduced" and fifo["predicted"] == "equivalent"
    assert fifo["agree"] is False
    assert mine[("largest", "fair", "p95_sct_s")]["measured"] == "reproduced"
    assert mine[("none", "fair", "avg_sct_s")]["measured"] is None  # not run
    text = "\n".join(report_testbed.confirmation_lines(c, tmp_path))
    assert "## Beamer on the testbed" in text and "![Beamer on the testbed]" in text
    assert "Verdicts agree in 4 of 6 comparisons." in text
    assert (tmp_path / "confirm-beamer.png").stat().st_size > 0
    # every ratio over five seeds has its interval drawn; one seed has none, and says so
    sources = ("map_ratio", "predicted_ratio", "measured_ratio")
    fig = report_testbed.confirmation_figure(c, rows)
    assert all(container.has_xerr for ax in fig.axes for container in ax.containers)
    assert sum(len(ax.containers) for ax in fig.axes) == sum(
        1 for r in rows if r["metric"] == "avg_sct_s" for key in sources if r[key]
    )  # (both cells' maps, the testbed's cell's predicted and measured)
    assert "95 % CI over 5 seeds" in fig.axes[0].get_xlabel()
    one = [{**r, **{key: {**r[key], "low": r[key]["mean"], "high": r[key]["mean"], "n": 1}
                    for key in sources if r[key]}}
           for r in rows]  # fmt: skip
    fig = report_testbed.confirmation_figure(c, one)
    assert all(ax.containers == [] for ax in fig.axes)
    assert fig.axes[0].get_xlabel().endswith("(one seed)")
    assert sum(len(ax.get_lines()) for ax in fig.axes) > 5  # the ratios, without bars
    assert "| models=zoo" not in text and "| zoo, together, ring | beamer |" in text
    not_run = confirm.Confirmation(CLAIMS["beamer"], c.small, c.chosen, {})
    assert "not run on the testbed yet: `sudo .venv/bin/hpo-reproduce` runs them" in "\n".join(
        report_testbed.confirmation_lines(not_run, tmp_path)
    )
