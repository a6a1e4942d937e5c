"""The schedule's timeline (controller.timeline): spans, port utilisation, the simulator's
recording (it changes nothing, conserves bytes and never exceeds a port's rate) and the
pictures (simulator.schedule_plot, ``python -m simulator --schedule``)."""

from __future__ import annotations

import random
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pytest

from controller.policies import POLICIES, make_policy
from controller.timeline import CoflowLevel, Timeline, port_names
from simulator.engine import CoflowSpec, Fabric, Simulator
from simulator.hpo import HpoDriver
from simulator.schedule_plot import draw, figure, gantt_rows, level_scale
from workloads.hpo import generate

BPS = 8.0  # one byte per second


def test_a_span_ends_when_the_level_changes_the_coflow_leaves_or_finishes():
    timeline = Timeline(port_names(1), BPS)
    timeline.levels_at(0.0, [CoflowLevel(1, 7, 3, 0), CoflowLevel(2, 8, 3, 1)])
    timeline.levels_at(1.0, [CoflowLevel(1, 7, 3, 0), CoflowLevel(2, 8, 3, 0)])  # 2 promoted
    timeline.levels_at(2.5, [CoflowLevel(2, 8, 3, 0)])  # 1 left
    timeline.end(2, 4.0)
    timeline.end(2, 5.0)  # already closed: nothing
    spans = sorted((s.key, s.level, s.start_s, s.end_s, s.job_id) for s in timeline.spans)
    assert spans == [("1", 0, 0.0, 2.5, 7), ("2", 0, 1.0, 4.0, 8), ("2", 1, 0.0, 1.0, 8)]


def test_utilisation_spreads_bytes_between_samples_and_keeps_them():
    timeline = Timeline(["a", "b"], BPS)
    timeline.ports_at(0.0, [0, 0])
    timeline.ports_at(2.0, [2, 0])  # port a at line rate for 2 s
    timeline.ports_at(4.0, [3, 4])  # then a at half the rate; b 4 bytes in 2 s (twice it)
    edges, rows = timeline.utilisation(4)
    assert edges == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert rows[0] == pytest.approx([1.0, 1.0, 0.5, 0.5])
    assert rows[1] == pytest.approx([0.0, 0.0, 2.0, 2.0])
    _, coarse = timeline.utilisation(3, end_s=6.0)  # past the last sample nothing is carried
    assert coarse[0] == pytest.approx([1.0, 0.5, 0.0])


def test_busy_share_counts_only_the_windows_once_each():
    timeline = Timeline(["a", "b"], BPS)
    timeline.ports_at(0.0, [0, 0])
    timeline.ports_at(2.0, [2, 0])  # a at line rate for 2 s
    timeline.ports_at(4.0, [3, 4])  # then a at half the rate; b twice it
    # overlapping windows merge into [0, 3]; the empty one and the gap [3, 3.5] count nothing
    share = timeline.busy_share([(0.0, 2.5), (1.0, 3.0), (3.5, 3.5)])
    assert share["a"] == pytest.approx((2 + 0.5) / 3)
    assert share["b"] == pytest.approx(2.0 / 3)
    assert timeline.busy_share([(1.0, 2.0), (3.0, 4.0)])["a"] == pytest.approx(0.75)
    assert timeline.busy_share([]) == {}
    assert Timeline(["a"], BPS).busy_share([(0.0, 1.0)]) == {}


def test_bad_samples_are_refused_and_a_bad_file_is_named(tmp_path):
    timeline = Timeline(["a"], BPS)
    with pytest.raises(ValueError, match="2 port counters for 1 ports"):
        timeline.ports_at(0.0, [1, 2])
    timeline.ports_at(1.0, [1])
    with pytest.raises(ValueError, match="after one at 1.0 s"):
        timeline.ports_at(0.5, [1])
    with pytest.raises(ValueError, match="link_bps"):
        Timeline(["a"], float("nan"))
    bad = tmp_path / "t.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match=f"{bad}: not a timeline"):
        Timeline.read(bad)


def random_run(seed: int, policy: str, timeline: Timeline | None, mode: str = "levels"):
    rng = random.Random(seed)
    sim = Simulator(Fabric(5, BPS), make_policy(policy), mode=mode, timeline=timeline)
    for cid in range(12):
        flows = [rng.sample(range(5), 2) + [float(rng.randint(1, 30))] for _ in range(3)]
        src, dst, size = zip(*flows, strict=True)
        spec = CoflowSpec(cid, np.array(src), np.array(dst), np.array(size), job_id=cid % 4)
        sim.at(rng.uniform(0, 40), lambda spec=spec: sim.release(spec))
    sim.run()
    return sim


@pytest.mark.parametrize("mode", ["levels", "ideal"])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_recording_changes_nothing_keeps_bytes_and_no_port_beats_its_rate(policy, mode):
    for seed in range(3):
        plain = random_run(seed, policy, None, mode)
        timeline = Timeline(port_names(5), BPS)
        recorded = random_run(seed, policy, timeline, mode)
        timeline.close(recorded.now_s)
        assert {c: r.finish_s for c, r in recorded.coflows.items()} == {
            c: r.finish_s for c, r in plain.coflows.items()
        }
        # every byte released went out of one port and into another, and is counted once
        sent = np.asarray(timeline.port_bytes[-1])
        offered = sum(r.size_bytes for r in recorded.coflows.values())
        assert sent[:5].sum() == pytest.approx(offered) and sent[5:].sum() == pytest.approx(offered)
        for n_bins in (7, 50, 400):
            _, rows = timeline.utilisation(n_bins)
            assert max(max(row) for row in rows) <= 1.0 + 1e-9, (policy, seed, n_bins)
        # each coflow's spans cover it from release to finish, without gaps or overlaps
        for cid, record in recorded.coflows.items():
            spans = sorted(
                (s for s in timeline.spans if s.key == str(cid)), key=lambda s: s.start_s
            )
            assert spans[0].start_s == record.arrival_s and spans[-1].end_s == record.finish_s
            for before, after in zip(spans, spans[1:], strict=False):
                assert before.end_s == after.start_s and before.level != after.level


def test_an_hpo_run_is_drawn_grouped_by_stage(tmp_path):
    timeline = Timeline(port_names(6), 20e6, "simulator")
    sim = Simulator(Fabric(6, 20e6), make_policy("beamer"), timeline=timeline)
    tasks = generate(6, 2, seed=1, configs_per_task=4, eta=2, min_iterations=2, link_scale=50)
    driver = HpoDriver(sim, tasks)
    sim.run()
    timeline.close(sim.now_s)
    timeline.stages = driver.core.stage_labels()
    timeline.workload = "synthetic HPO workload, seed 1: 6 hosts, 2 tasks of 4 configs"
    rows, groups = gantt_rows(timeline)
    assert len(rows) == len(driver.core.jobs)  # one row per job
    assert sorted(label for label, _ in groups) == sorted(timeline.stages.values())
    path = timeline.write(tmp_path / "timeline.json")
    again = Timeline.read(path)
    assert again.spans == timeline.spans and again.stages == timeline.stages
    assert again.workload == timeline.workload
    picture = draw([timeline, again], tmp_path / "schedule.png", "two columns")
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def two_coflows_at(levels: tuple[int, int], then: tuple[int, int]) -> Timeline:
    """Two coflows of one stage on two hosts, at ``levels`` for 2 s, then at ``then``."""
    timeline = Timeline(port_names(2), BPS, "simulator, fair", workload="trace tiny.txt")
    timeline.ports_at(0.0, [0, 0, 0, 0])
    timeline.levels_at(0.0, [CoflowLevel(k, k, 0, level) for k, level in enumerate(levels)])
    timeline.levels_at(2.0, [CoflowLevel(k, k, 0, level) for k, level in enumerate(then)])
    timeline.ports_at(4.0, [8, 4, 4, 8])
    timeline.close(4.0)
    return timeline


def colour_bars(fig) -> list:
    return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


def test_the_colour_scale_holds_only_the_levels_the_schedule_used():
    fig = figure([two_coflows_at((2, 5), (5, 5))])
    levels_bar, _utilisation = colour_bars(fig)
    assert [t.get_text() for t in levels_bar.get_yticklabels()] == ["2", "5"]
    assert levels_bar.get_ylabel() == "priority level (0 = highest)"
    # one colour per level used, as far apart as the colour map goes (not levels 2 and 5 of 8)
    viridis = plt.get_cmap("viridis")
    colours = {tuple(c) for c in fig.axes[0].collections[0].get_colors()}
    assert colours == {tuple(viridis(0.0)), tuple(viridis(1.0))}
    assert fig.get_suptitle() == "trace tiny.txt"  # the timelines' workload by default
    assert figure([two_coflows_at((0, 0), (0, 0))], "mine").get_suptitle() == "mine"
    lone = colour_bars(figure([two_coflows_at((0, 0), (0, 0))]))[0]
    assert [t.get_text() for t in lone.get_yticklabels()] == ["0"]
    # the simulator's ideal mode: positions in the order, from the first used to the last
    _, positions, ticks = level_scale([40, 20, 31])
    assert ticks is None and (positions.norm.vmin, positions.norm.vmax) == (20, 40)
    ideal = colour_bars(figure([two_coflows_at((20, 31), (40, 31))]))[0]
    assert ideal.get_ylabel() == "position in the order (0 = first)"
    assert ideal.get_ylim() == (20, 40)


def test_the_simulator_cli_draws_every_run_and_wants_a_folder_for_it(tmp_path):
    run = [sys.executable, "-m", "simulator", "hpo", "--hosts", "6", "--tasks", "1",
           "--configs", "3", "--min-iterations", "2", "--policy", "fair", "sincronia"]  # fmt: skip
    refused = subprocess.run([*run, "--schedule"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--schedule needs --out" in refused.stderr
    done = subprocess.run([*run, "--schedule", "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for policy in ("fair", "sincronia"):
        timeline = Timeline.read(tmp_path / f"timeline-{policy}.json")
        assert timeline.spans and timeline.workload == (
            "synthetic HPO workload, seed 1: 6 hosts, 1 task of 3 configs, halving, ps/ring"
        )
        assert (tmp_path / f"schedule-{policy}.png").stat().st_size > 10_000
    redraw = subprocess.run(
        [sys.executable, "-m", "simulator.schedule_plot", str(tmp_path / "timeline-fair.json"),
         str(tmp_path / "timeline-sincronia.json"), "-o", str(tmp_path / "both.png")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert redraw.returncode == 0 and (tmp_path / "both.png").exists(), redraw.stderr
    bad = subprocess.run([sys.executable, "-m", "simulator.schedule_plot",
                          str(tmp_path / "no.json")],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "not a timeline" in bad.stderr
    assert "Traceback" not in bad.stderr
