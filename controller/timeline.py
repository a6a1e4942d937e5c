"""What a run's schedule looked like: every coflow's priority level over time and every host
port's utilisation, recorded the same way by the simulator and the testbed.

A :class:`Timeline` takes **snapshots**: the levels of the coflows active at a moment (the
simulator at every reorder, the testbed by polling the controller's ``GET /api/order``) and
each port's bytes carried so far (the simulator's delivered bits, the testbed's switch port
counters). Between two snapshots a coflow keeps the level it had at the first one, and a
port's bytes are spread evenly, so utilisation is an average over the recorder's sampling
interval (the simulator's events, the testbed's poll period), never a peak.

Ports are named as :meth:`workloads.hpo_core.HpoCore.port_busy` names them: ``hostI-out`` is
what host ``I`` (0-based) sends, ``hostI-in`` what it receives.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from controller.metrics import merge_intervals


@dataclass(frozen=True)
class CoflowLevel:
    """One active coflow in a snapshot: its key (a coflow id, or ``"job<N>"`` where the
    controller knows a job's traffic only as the job), its job and stage, and its level
    (0 highest; in the simulator's ideal mode, its position in the order)."""

    key: Hashable
    job_id: int | None
    stage_id: int | None
    level: int


@dataclass(frozen=True)
class LevelSpan:
    """A coflow held ``level`` from ``start_s`` to ``end_s``."""

    key: str
    job_id: int | None
    stage_id: int | None
    level: int
    start_s: float
    end_s: float


def port_names(n_hosts: int) -> list[str]:
    """The ports of ``n_hosts`` hosts: every host's sending side, then every receiving side."""
    return [f"host{i}-out" for i in range(n_hosts)] + [f"host{i}-in" for i in range(n_hosts)]


@dataclass
class Timeline:
    """A run's schedule as recorded; see the module docstring.

    Args:
        ports: the recorded ports' names, in the order of :meth:`ports_at`'s values.
        link_bps: every port's line rate (what utilisation 1 means).
        source: what recorded it (``"simulator"``, ``"testbed"``), shown on pictures.
        stages: a label per stage id (e.g. ``"task 0 stage 1"``): pictures group and name rows
            by it, so that runs whose ids differ (testbed and simulator) line up.
        workload: what ran (the trace's or the workload's name), the pictures' title.
    """

    ports: list[str]
    link_bps: float
    source: str = ""
    spans: list[LevelSpan] = field(default_factory=list)
    sample_s: list[float] = field(default_factory=list)
    port_bytes: list[list[float]] = field(default_factory=list)  # cumulative, per sample
    stages: dict[int, str] = field(default_factory=dict)
    workload: str = ""
    _open: dict[Hashable, tuple[CoflowLevel, float]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.link_bps) and self.link_bps > 0):
            raise ValueError(f"link_bps must be a positive number, got {self.link_bps!r}")

    def levels_at(self, now_s: float, active: Iterable[CoflowLevel]) -> None:
        """A snapshot of every active coflow's level at ``now_s``: a coflow whose level
        changed, or that is no longer active, ends its span now."""
        seen = {}
        for entry in active:
            seen[entry.key] = entry
            held = self._open.get(entry.key)
            if held is not None and held[0].level == entry.level:
                continue
            if held is not None:
                self._close(entry.key, now_s)
            self._open[entry.key] = (entry, now_s)
        for key in [k for k in self._open if k not in seen]:
            self._close(key, now_s)

    def end(self, key: Hashable, now_s: float) -> None:
        """Coflow ``key`` finished at ``now_s`` (nothing if it is not open)."""
        if key in self._open:
            self._close(key, now_s)

    def ports_at(self, now_s: float, cumulative_bytes: Sequence[float]) -> None:
        """Each port's bytes carried from the start of the run until ``now_s``."""
        if len(cumulative_bytes) != len(self.ports):
            raise ValueError(f"{len(cumulative_bytes)} port counters for {len(self.ports)} ports")
        if self.sample_s and now_s < self.sample_s[-1]:
            raise ValueError(f"port sample at {now_s} s after one at {self.sample_s[-1]} s")
        if self.sample_s and now_s == self.sample_s[-1]:
            self.port_bytes[-1] = [float(b) for b in cumulative_bytes]
            return
        self.sample_s.append(float(now_s))
        self.port_bytes.append([float(b) for b in cumulative_bytes])

    def close(self, now_s: float) -> None:
        """The run ended at ``now_s``: every open span ends."""
        for key in list(self._open):
            self._close(key, now_s)

    def _close(self, key: Hashable, now_s: float) -> None:
        entry, start_s = self._open.pop(key)
        if now_s > start_s:
            self.spans.append(
                LevelSpan(str(key), entry.job_id, entry.stage_id, entry.level, start_s, now_s)
            )

    # ---- reading it -----------------------------------------------------------------------------

    @property
    def end_s(self) -> float:
        """The last moment recorded."""
        ends = [s.end_s for s in self.spans] + self.sample_s[-1:]
        return max(ends, default=0.0)

    def utilisation(self, n_bins: int, end_s: float | None = None) -> tuple[list[float], list]:
        """Every port's utilisation (bytes carried at the line rate over the time) in
        ``n_bins`` equal bins from 0 to ``end_s`` (default: :attr:`end_s`): the bin edges and
        one row per port. Bytes between two samples are spread evenly over the interval (each
        port's counter is interpolated linearly between samples)."""
        end_s = self.end_s if end_s is None else end_s
        if n_bins < 1 or not end_s > 0 or not self.sample_s:
            return [0.0], [[] for _ in self.ports]
        edges = np.linspace(0.0, end_s, n_bins + 1)
        counters = np.asarray(self.port_bytes, dtype=float)
        scale = 8.0 / (self.link_bps * end_s / n_bins)
        rows = [
            (np.diff(np.interp(edges, self.sample_s, counters[:, p])) * scale).tolist()
            for p in range(len(self.ports))
        ]
        return edges.tolist(), rows

    def busy_share(self, windows: Iterable[tuple[float, float]]) -> dict[str, float]:
        """Per port, the share of ``windows`` (``(start_s, end_s)``, merged where they overlap)
        that its recorded bytes keep it sending at the line rate: bytes carried inside the
        windows (counters interpolated as in :meth:`utilisation`) over what the line carries
        in them. The testbed's counters count every byte on the wire (headers, resent
        segments), so there it is the port's measured busy time. Empty without samples."""
        merged = merge_intervals(windows)
        length = sum(end - start for start, end in merged)
        if not merged or not self.sample_s:
            return {}
        counters = np.asarray(self.port_bytes, dtype=float)
        edges = np.asarray(merged, dtype=float)
        share = {}
        for p, name in enumerate(self.ports):
            at = np.interp(edges, self.sample_s, counters[:, p])
            share[name] = float((at[:, 1] - at[:, 0]).sum() * 8.0 / (self.link_bps * length))
        return share

    def to_json(self) -> dict:
        """A JSON document (open spans are not included: :meth:`close` first)."""
        return {
            "source": self.source,
            "port_bps": self.link_bps,
            "ports": self.ports,
            "spans": [asdict(s) for s in self.spans],
            "sample_s": self.sample_s,
            "port_bytes": self.port_bytes,
            "stages": {str(k): v for k, v in self.stages.items()},
            "workload": self.workload,
        }

    @classmethod
    def from_json(cls, doc: dict) -> Timeline:
        """The timeline :meth:`to_json` wrote."""
        return cls(
            list(doc["ports"]),
            float(doc["port_bps"]),
            doc.get("source", ""),
            [LevelSpan(**s) for s in doc["spans"]],
            [float(t) for t in doc["sample_s"]],
            [[float(b) for b in row] for row in doc["port_bytes"]],
            {int(k): str(v) for k, v in doc.get("stages", {}).items()},
            str(doc.get("workload", "")),
        )

    def write(self, path: Path) -> Path:
        """Write :meth:`to_json` to ``path`` (compact: a long run has many spans)."""
        path.write_text(json.dumps(self.to_json(), separators=(",", ":")))
        return path

    @classmethod
    def read(cls, path: Path) -> Timeline:
        """The timeline at ``path``, or ``ValueError`` naming the file and what is wrong."""
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a timeline ({exc})") from None
