"""Coflow traces: loaders (with errors naming the line), writers, and their release schedule.

Two text formats, both starting with a line ``<#ports> <#coflows>``:

- the public Facebook coflow benchmark format, one coflow per line:
  ``<id> <arrival ms> <#mappers> <mapper port>... <#reducers> <reducer port>:<MB>...``;
  each reducer's megabytes are split equally over the coflow's mappers (the usual convention);
- a per-flow format, one coflow per line:
  ``<id> <arrival ms> <#flows> <#sources> <#destinations>`` followed by ``<src> <dst> <MB>`` for
  each flow.

Ports are 0-based host (rack) ids. A megabyte is 2**20 bytes, as in the Varys and Sincronia
simulators.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.engine import CoflowSpec, Simulator

MB = 2**20


class TraceError(ValueError):
    """A malformed trace; the message names the file and line."""


@dataclass
class TraceCoflow:
    """One coflow of a trace: arrival, and its flows as arrays of ports and sizes."""

    coflow_id: int
    arrival_s: float
    src: np.ndarray
    dst: np.ndarray
    size_bytes: np.ndarray

    def spec(self) -> CoflowSpec:
        """The coflow as the simulator takes it."""
        return CoflowSpec(self.coflow_id, self.src, self.dst, self.size_bytes)


@dataclass
class Trace:
    """A coflow trace: the number of ports and its coflows in arrival order."""

    n_ports: int
    coflows: list[TraceCoflow]

    @property
    def n_flows(self) -> int:
        """Number of flows over every coflow."""
        return sum(len(c.src) for c in self.coflows)

    @property
    def total_bytes(self) -> float:
        """Bytes over every coflow."""
        return float(sum(c.size_bytes.sum() for c in self.coflows))

    def install(self, sim: Simulator, offline: bool = False) -> None:
        """Schedule every coflow's release (at its arrival, or all at 0 when ``offline``)."""
        for coflow in self.coflows:
            spec = coflow.spec()
            sim.at(0.0 if offline else coflow.arrival_s, lambda spec=spec: sim.release(spec))


class _Lines:
    """Tokens of one line, with errors that say where."""

    def __init__(self, path: str, lineno: int, text: str) -> None:
        self.where = f"{path}:{lineno}"
        self.tokens = text.split()
        self.pos = 0

    def fail(self, message: str) -> TraceError:
        """A :class:`TraceError` naming the file and line."""
        return TraceError(f"{self.where}: {message}")

    def next(self, what: str) -> str:
        """The next field of the line (``what`` names it in the error)."""
        if self.pos >= len(self.tokens):
            raise self.fail(f"line ends before {what}")
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def int(self, what: str, low: int = 0, high: int | None = None) -> int:
        """The next field as an integer in ``[low, high]``."""
        token = self.next(what)
        try:
            value = int(token)
        except ValueError:
            raise self.fail(f"{what} must be an integer, got {token!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"{low}..{high}" if high is not None else f">= {low}"
            raise self.fail(f"{what} must be {bound}, got {value}")
        return value

    def float(self, what: str, token: str | None = None) -> float:
        """The next field (or ``token``) as a finite, non-negative number."""
        token = self.next(what) if token is None else token
        try:
            value = float(token)
        except ValueError:
            raise self.fail(f"{what} must be a number, got {token!r}") from None
        if not np.isfinite(value) or value < 0:
            raise self.fail(f"{what} must be a finite number >= 0, got {token!r}")
        return value

    def done(self) -> None:
        """Fail if the line has fields left."""
        if self.pos != len(self.tokens):
            raise self.fail(f"unexpected extra fields: {' '.join(self.tokens[self.pos :][:3])}")


def _read(path: str | Path) -> tuple[int, int, list[_Lines]]:
    path = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror}") from None
    lines = [_Lines(path, i + 1, t) for i, t in enumerate(text.splitlines()) if t.strip()]
    if not lines:
        raise TraceError(f"{path}: empty trace")
    header = lines[0]
    n_ports = header.int("number of ports", low=1)
    n_coflows = header.int("number of coflows", low=0)
    header.done()
    if len(lines) - 1 != n_coflows:
        raise TraceError(f"{path}: header says {n_coflows} coflows, found {len(lines) - 1} lines")
    return n_ports, n_coflows, lines[1:]


def _coflow_head(line: _Lines, seen: set[int]) -> tuple[int, float]:
    """The coflow id (unique in the file) and arrival time (s) that start every line."""
    coflow_id = line.int("coflow id")
    if coflow_id in seen:
        raise line.fail(f"coflow id {coflow_id} appears twice")
    seen.add(coflow_id)
    return coflow_id, line.float("arrival time (ms)") / 1000.0


def load_fb_trace(path: str | Path) -> Trace:
    """Load a trace in the Facebook coflow benchmark format."""
    n_ports, _, lines = _read(path)
    coflows, seen = [], set()
    for line in lines:
        coflow_id, arrival_s = _coflow_head(line, seen)
        n_mappers = line.int("number of mappers", low=1)
        mappers = [line.int("mapper port", high=n_ports - 1) for _ in range(n_mappers)]
        n_reducers = line.int("number of reducers", low=1)
        reducers, megabytes = [], []
        for _ in range(n_reducers):
            token = line.next("reducer port:MB")
            port, sep, mb = token.partition(":")
            if not sep:
                raise line.fail(f"reducer must be <port>:<MB>, got {token!r}")
            try:
                port_id = int(port)
            except ValueError:
                raise line.fail(f"reducer port must be an integer, got {port!r}") from None
            if not 0 <= port_id < n_ports:
                raise line.fail(f"reducer port must be 0..{n_ports - 1}, got {port_id}")
            reducers.append(port_id)
            megabytes.append(line.float("reducer MB", mb))
        line.done()
        src = np.tile(np.asarray(mappers, dtype=np.int64), n_reducers)
        dst = np.repeat(np.asarray(reducers, dtype=np.int64), n_mappers)
        size = np.repeat(np.asarray(megabytes) * MB / n_mappers, n_mappers)
        coflows.append(TraceCoflow(coflow_id, arrival_s, src, dst, size))
    coflows.sort(key=lambda c: (c.arrival_s, c.coflow_id))
    return Trace(n_ports, coflows)


def load_flow_trace(path: str | Path) -> Trace:
    """Load a trace in the per-flow format."""
    n_ports, _, lines = _read(path)
    coflows, seen = [], set()
    for line in lines:
        coflow_id, arrival_s = _coflow_head(line, seen)
        n_flows = line.int("number of flows", low=1)
        line.int("number of sources", low=1)
        line.int("number of destinations", low=1)
        src, dst, size = [], [], []
        for _ in range(n_flows):
            src.append(line.int("flow source", high=n_ports - 1))
            dst.append(line.int("flow destination", high=n_ports - 1))
            size.append(line.float("flow MB") * MB)
        line.done()
        coflows.append(
            TraceCoflow(
                coflow_id,
                arrival_s,
                np.asarray(src, dtype=np.int64),
                np.asarray(dst, dtype=np.int64),
                np.asarray(size),
            )
        )
    coflows.sort(key=lambda c: (c.arrival_s, c.coflow_id))
    return Trace(n_ports, coflows)


def load_trace(path: str | Path) -> Trace:
    """Load either format, telling them apart by the second line's shape."""
    path = str(path)
    try:
        with open(path) as f:
            f.readline()
            first = f.readline().split()
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror}") from None
    # FB: id arrival #mappers mappers... #reducers port:MB ...; the last token has a colon
    if first and ":" in first[-1]:
        return load_fb_trace(path)
    return load_flow_trace(path)


def write_fb_trace(path: str | Path, n_ports: int, coflows: list[tuple]) -> None:
    """Write ``(id, arrival_ms, mappers, {reducer: MB})`` tuples in the Facebook format."""
    lines = [f"{n_ports} {len(coflows)}"]
    for coflow_id, arrival_ms, mappers, reducers in coflows:
        red = " ".join(f"{port}:{mb}" for port, mb in reducers.items())
        lines.append(
            f"{coflow_id} {arrival_ms} {len(mappers)} {' '.join(map(str, mappers))} "
            f"{len(reducers)} {red}"
        )
    Path(path).write_text("\n".join(lines) + "\n")


def write_flow_trace(path: str | Path, n_ports: int, coflows: list[tuple]) -> None:
    """Write ``(id, arrival_ms, [(src, dst, MB), ...])`` tuples in the per-flow format."""
    lines = [f"{n_ports} {len(coflows)}"]
    for coflow_id, arrival_ms, flows in coflows:
        n_src = len({f[0] for f in flows})
        n_dst = len({f[1] for f in flows})
        body = " ".join(f"{s} {d} {mb}" for s, d, mb in flows)
        lines.append(f"{coflow_id} {arrival_ms} {len(flows)} {n_src} {n_dst} {body}")
    Path(path).write_text("\n".join(lines) + "\n")
