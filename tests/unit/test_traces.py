"""Trace loaders: both formats, errors naming the line, and the public traces bundled with the
package (:mod:`netsched_data`): byte for byte as obtained, found by name or path."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

import netsched_data
from netsched_data import FULL_TRACE, SMALL_TRACE, DataError, find_trace
from simulator.traces import (
    MB,
    TraceError,
    load_fb_trace,
    load_flow_trace,
    load_trace,
    write_fb_trace,
    write_flow_trace,
)

# the bundled traces' SHA-256: the files stay byte for byte the published ones
SHA256 = {
    FULL_TRACE: "cdd0d94d26c6ab10ce3634cf6a0f836859578e914de6b6faa980a245237dbc6e",
    SMALL_TRACE: "6e63cfb4cc472a4ee2c87dd41095749954cce478ffeea9f898f8dcdf0d7adba4",
}


def test_fb_format_splits_each_reducer_over_the_mappers(tmp_path):
    path = tmp_path / "fb.txt"
    write_fb_trace(path, 4, [(1, 0, [0, 1], {2: 4.0, 3: 2.0}), (2, 1500, [3], {0: 1.0})])
    trace = load_trace(path)
    assert trace.n_ports == 4 and [c.coflow_id for c in trace.coflows] == [1, 2]
    first = trace.coflows[0]
    pairs = sorted(zip(first.src.tolist(), first.dst.tolist(), (first.size_bytes / MB).tolist(),
                       strict=True))  # fmt: skip
    assert pairs == [(0, 2, 2.0), (0, 3, 1.0), (1, 2, 2.0), (1, 3, 1.0)]
    assert trace.coflows[1].arrival_s == 1.5
    assert trace.n_flows == 5 and trace.total_bytes == pytest.approx(7 * MB)


def test_flow_format(tmp_path):
    path = tmp_path / "flows.txt"
    write_flow_trace(path, 3, [(7, 250, [(0, 1, 1.5), (2, 1, 0.5)])])
    trace = load_trace(path)
    (coflow,) = trace.coflows
    assert coflow.coflow_id == 7 and coflow.arrival_s == 0.25
    assert coflow.src.tolist() == [0, 2] and coflow.dst.tolist() == [1, 1]
    assert np.allclose(coflow.size_bytes, [1.5 * MB, 0.5 * MB])


@pytest.mark.parametrize(
    ("loader", "text", "words"),
    [
        (load_fb_trace, "", "empty trace"),
        (load_fb_trace, "4\n", ":1: line ends before number of coflows"),
        (load_fb_trace, "4 2\n1 0 1 0 1 2:1\n", "header says 2 coflows, found 1"),
        (load_fb_trace, "4 1\n1 0 1 x 1 2:1\n", ":2: mapper port must be an integer, got 'x'"),
        (load_fb_trace, "4 1\n1 0 1 9 1 2:1\n", ":2: mapper port must be 0..3, got 9"),
        (load_fb_trace, "4 1\n1 0 1 0 1 2\n", ":2: reducer must be <port>:<MB>, got '2'"),
        (load_fb_trace, "4 1\n1 0 1 0 1 2:-1\n", ":2: reducer MB must be a finite number >= 0"),
        (load_fb_trace, "4 1\n1 0 1 0 2 2:1\n", ":2: line ends before reducer port:MB"),
        (load_fb_trace, "4 1\n1 0 1 0 1 2:1 7\n", ":2: unexpected extra fields: 7"),
        (load_fb_trace, "4 2\n1 0 1 0 1 2:1\n1 5 1 0 1 2:1\n", ":3: coflow id 1 appears twice"),
        (load_flow_trace, "3 1\n1 0 2 1 1 0 1 1.0\n", ":2: line ends before flow source"),
        (load_flow_trace, "3 1\n1 0 1 1 1 0 5 1.0\n", ":2: flow destination must be 0..2"),
        (load_flow_trace, "3 1\n1 -4 1 1 1 0 1 1.0\n", ":2: arrival time (ms) must be a finite"),
    ],
)
def test_malformed_traces_name_the_line(tmp_path, loader, text, words):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        loader(path)
    assert str(err.value).startswith(str(path))
    assert words in str(err.value)


def test_missing_file():
    with pytest.raises(TraceError, match="No such file"):
        load_trace("/nonexistent/trace.txt")


def test_the_bundled_traces_load():
    assert netsched_data.TRACES == (FULL_TRACE, SMALL_TRACE)
    for name, digest in SHA256.items():
        assert hashlib.sha256(netsched_data.trace(name).read_bytes()).hexdigest() == digest
    fb = load_trace(netsched_data.trace(FULL_TRACE))
    assert (fb.n_ports, len(fb.coflows), fb.n_flows) == (150, 526, 706397)
    resampled = load_trace(netsched_data.trace(SMALL_TRACE))
    assert (resampled.n_ports, len(resampled.coflows), resampled.n_flows) == (16, 526, 5249)
    assert resampled.total_bytes / MB == pytest.approx(58807, rel=1e-3)
    readme = (netsched_data.trace(FULL_TRACE).parent / "README.md").read_text()
    assert "Varys" in readme and "Aalo" in readme and "SIGCOMM" in readme


def test_a_trace_is_a_path_or_a_bundled_name(tmp_path, monkeypatch):
    assert find_trace(SMALL_TRACE) == netsched_data.trace(SMALL_TRACE)
    mine = tmp_path / "mine.txt"
    write_fb_trace(mine, 2, [(1, 0, [0], {1: 1.0})])
    assert find_trace(str(mine)) == mine
    monkeypatch.chdir(tmp_path)
    assert find_trace("mine.txt").resolve() == mine  # a file in the working folder
    (tmp_path / SMALL_TRACE).write_text("2 0\n")
    assert find_trace(SMALL_TRACE).resolve() == tmp_path / SMALL_TRACE  # a file comes first
    # a missing file with a folder part stays a path, for the loader to report
    assert find_trace("sub/none.txt") == Path("sub/none.txt")


def test_an_unknown_trace_name_is_one_line_naming_the_bundled_ones():
    expected = f"unknown trace 'fb.txt'; bundled: {FULL_TRACE}, {SMALL_TRACE}"
    with pytest.raises(DataError) as err:
        netsched_data.trace("fb.txt")
    assert str(err.value) == expected
    with pytest.raises(DataError) as err:
        find_trace("fb.txt")
    assert (
        str(err.value) == f"fb.txt: no such file, nor a bundled trace ({FULL_TRACE}, {SMALL_TRACE})"
    )
