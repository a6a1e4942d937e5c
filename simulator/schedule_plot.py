"""Pictures of a run's schedule: which priority level every job (or coflow) held over time,
and how busy every host port was.

    .venv/bin/hpo-schedule-plot TIMELINE.json [TIMELINE.json ...] [-o schedule.png]

Each timeline (:mod:`controller.timeline`, written by ``hpo-sim ... --timeline DIR`` and by
every testbed run) becomes one column on a common time axis: on top a Gantt-style chart, one
row per job (per coflow where there are no jobs), grouped and labelled by stage, coloured by
level (0 the highest; the colour scale holds only the levels used); below, one row per host
port (``hostI-out`` sends, ``hostI-in`` receives), shaded by its utilisation averaged over bins
of about half a second. A testbed run draws its own timeline beside the simulator's prediction
of the same workload. The title names the workload or trace the timelines ran.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import BoundaryNorm, Normalize  # noqa: E402

from cli.argtypes import output_file, program  # noqa: E402
from controller.schedule import N_LEVELS  # noqa: E402
from controller.timeline import LevelSpan, Timeline  # noqa: E402

BIN_S = 0.5  # utilisation bins: the testbed's poll period
MAX_BINS = 400
MAX_LABELLED_GROUPS = 30


def _row_of(span: LevelSpan) -> str:
    return f"job {span.job_id}" if span.job_id is not None else f"coflow {span.key}"


def _group_of(span: LevelSpan, timeline: Timeline) -> str:
    if span.stage_id is None:
        return ""
    return timeline.stages.get(span.stage_id, f"stage {span.stage_id}")


def gantt_rows(timeline: Timeline) -> tuple[dict[str, int], list[tuple[str, float]]]:
    """Every row's position (jobs or coflows, grouped by stage; groups and rows in order of
    their first span) and every group's label with its middle row position."""
    first: dict[str, float] = {}
    group_first: dict[str, float] = {}
    group_of_row: dict[str, str] = {}
    for span in timeline.spans:
        row, group = _row_of(span), _group_of(span, timeline)
        first[row] = min(first.get(row, span.start_s), span.start_s)
        group_first[group] = min(group_first.get(group, span.start_s), span.start_s)
        group_of_row.setdefault(row, group)
    ordered = sorted(first, key=lambda r: (group_first[group_of_row[r]], first[r], r))
    position = {row: i for i, row in enumerate(ordered)}
    labels = []
    for group in sorted(group_first, key=group_first.get):
        rows = [position[r] for r in ordered if group_of_row[r] == group]
        labels.append((group, (rows[0] + rows[-1]) / 2))
    return position, labels


def level_scale(levels: Sequence[int]):
    """The colour scale of the levels the runs used (no other): ``(colour_of, mappable,
    ticks)``, where ``colour_of`` gives a level's colour, ``mappable`` draws the colour bar and
    ``ticks`` is ``(positions, labels)`` on it, or ``None`` for a continuous scale. Priority
    levels get one colour each, spread over the whole colour map however few were used; the
    simulator's ideal mode (one level per position in the order, as many as coflows) a
    continuous scale from the first position used to the last."""
    used = sorted(set(levels))
    if used[-1] >= 2 * N_LEVELS:  # positions in the order
        norm = Normalize(used[0], max(used[-1], used[0] + 1))
        cmap = plt.get_cmap("viridis")
        return (lambda level: cmap(norm(level))), plt.cm.ScalarMappable(norm, cmap), None
    rank = {level: i for i, level in enumerate(used)}
    cmap = plt.get_cmap("viridis", len(used))
    norm = BoundaryNorm([i - 0.5 for i in range(len(used) + 1)], cmap.N)
    ticks = (list(range(len(used))), [str(level) for level in used])
    return (lambda level: cmap(norm(rank[level]))), plt.cm.ScalarMappable(norm, cmap), ticks


def figure(timelines: Sequence[Timeline], title: str = ""):
    """``timelines`` side by side on one time axis, titled ``title`` (default: the timelines'
    workloads)."""
    if not timelines:
        raise ValueError("no timeline to draw")
    end_s = max(t.end_s for t in timelines) or 1.0
    n_bins = max(1, min(MAX_BINS, round(end_s / BIN_S)))
    levels = [s.level for t in timelines for s in t.spans]
    colour_of, levels_scale, ticks = level_scale(levels) if levels else (None, None, None)
    n_ports = max(len(t.ports) for t in timelines)
    fig, axes = plt.subplots(
        2,
        len(timelines),
        figsize=(6.5 * len(timelines) + 1.5, 9),
        squeeze=False,
        sharex=True,
        gridspec_kw={"height_ratios": [3, max(1.0, min(2.0, n_ports / 13))]},
    )
    levels_image = ports_image = None
    for column, timeline in enumerate(timelines):
        gantt, ports = axes[0][column], axes[1][column]
        position, groups = gantt_rows(timeline)
        if timeline.spans:
            width = max(0.5, min(6.0, 250 / max(len(position), 1)))
            levels_image = gantt.hlines(
                [position[_row_of(s)] for s in timeline.spans],
                [s.start_s for s in timeline.spans],
                [s.end_s for s in timeline.spans],
                colors=[colour_of(s.level) for s in timeline.spans],
                linewidth=width,
            )
        gantt.set_ylim(len(position) - 0.5, -0.5)
        if len(groups) <= MAX_LABELLED_GROUPS and any(label for label, _ in groups):
            gantt.set_yticks([middle for _, middle in groups])
            gantt.set_yticklabels([label for label, _ in groups], fontsize=7)
        else:
            gantt.set_yticks([])
        gantt.set_title(f"{timeline.source or 'run'}: levels ({len(position)} rows)")
        gantt.grid(axis="x", alpha=0.3)
        edges, utilisation = timeline.utilisation(n_bins, end_s)
        ports_image = ports.imshow(
            utilisation if any(utilisation) else [[0.0]],
            aspect="auto",
            interpolation="nearest",
            extent=(0, end_s, len(timeline.ports), 0),
            vmin=0,
            vmax=1,
            cmap="Greys",
        )
        if len(timeline.ports) <= 2 * 16:
            ports.set_yticks([i + 0.5 for i in range(len(timeline.ports))])
            ports.set_yticklabels(timeline.ports, fontsize=5)
        else:
            ports.set_yticks([])
        ports.set_xlabel("time (s)")
        ports.set_title(f"port utilisation (bins of {end_s / n_bins:.2g} s)", fontsize=9)
        ports.set_xlim(0, end_s)
    if levels_image is not None:
        bar = fig.colorbar(levels_scale, ax=axes[0].tolist(), pad=0.01)
        if ticks is not None:
            bar.set_label("priority level (0 = highest)")
            bar.set_ticks(ticks[0], labels=ticks[1])
        else:
            bar.set_label("position in the order (0 = first)")
    if ports_image is not None:
        fig.colorbar(ports_image, ax=axes[1].tolist(), pad=0.01).set_label("utilisation")
    title = title or "; ".join(dict.fromkeys(t.workload for t in timelines if t.workload))
    if title:
        fig.suptitle(title)
    return fig


def draw(timelines: Sequence[Timeline], out: Path, title: str = "") -> Path:
    """Draw ``timelines`` side by side on one time axis into ``out`` (PNG), titled ``title``
    (default: the timelines' workloads)."""
    fig = figure(timelines, title)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    """Draw the timelines named on the command line."""
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n\n")[0])
    parser.add_argument("timelines", nargs="+", type=Path, metavar="TIMELINE.json")
    parser.add_argument(
        "-o",
        "--out",
        type=output_file,
        default="schedule.png",
        help="the figure (default: schedule.png)",
    )
    parser.add_argument(
        "--title", default="", help="the figure's title (default: the timelines' workloads)"
    )
    args = parser.parse_args(argv)
    try:
        timelines = [Timeline.read(path) for path in args.timelines]
    except ValueError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    print(draw(timelines, args.out, args.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
