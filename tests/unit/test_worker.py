"""The traffic-replay worker over loopback TCP: patterns, bytes, pause/resume, stop, errors."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workloads.curves import TabulatedCurve, curve_to_json
from workloads.worker import HELLO, Mismatch, Worker, parse_args, receive_buffer_bytes

ROOT = Path(__file__).resolve().parents[2]


def free_base_port(n: int) -> int:
    """A base port with ``n`` consecutive free ports after it."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        try:
            socks = []
            for p in range(base, base + n):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no free port range")


def start(pattern, ranks, iterations, model_bytes=200_000, compute_s=0.0, extra=(), only=None):
    base = free_base_port(ranks)
    hosts = ",".join(["127.0.0.1"] * ranks)
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workloads.worker",
                "--job",
                "9",
                "--rank",
                str(r),
                "--hosts",
                hosts,
                "--pattern",
                pattern,
                "--base-port",
                str(base),
                "--bytes",
                str(model_bytes),
                "--compute-s",
                str(compute_s),
                "--iterations",
                str(iterations),
                "--connect-timeout",
                "10",
                *extra,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (range(ranks) if only is None else only)
    ]


def finish(procs, timeout=60):
    outs = []
    for proc in procs:
        if proc.pid in _LINES:  # stdout is being read by read_until's thread
            proc.wait(timeout=timeout)
            err = proc.stderr.read()
            out = "".join(iter(lambda p=proc: _LINES[p.pid].get(timeout=timeout), ""))
        else:
            out, err = proc.communicate(timeout=timeout)
        outs.append(([json.loads(line) for line in out.splitlines()], proc.returncode, err))
    return outs


CURVE = '{"final_accuracy": 0.9, "tau_iterations": 2}'


def test_ring_all_reduce_bytes_and_iterations():
    results = finish(start("ring", 3, 4, model_bytes=300_000, extra=["--curve", CURVE]))
    for events, code, err in results:
        assert code == 0, err
        kinds = [e["event"] for e in events]
        assert kinds == ["ready"] + ["iteration"] * 4 + ["done"]
        assert [e["iteration"] for e in events if e["event"] == "iteration"] == [1, 2, 3, 4]
        # 2 (W - 1) / W of the model per iteration
        assert events[-1]["bytes_sent"] == 4 * 400_000  # 2 x 2/3 x 300 kB, 4 times
        assert events[1]["accuracy"] == pytest.approx(0.9 * (1 - 2.718281828**-0.5), rel=1e-4)


def test_worker_reports_the_accuracy_of_the_drivers_curve_object():
    """A YAHPO-style tabulated curve reaches the worker whole: it reports the accuracy the
    simulator's curve object gives (the worker used to rebuild a parametric curve)."""
    curve = TabulatedCurve((0.2, 0.6, 0.65, 0.7), iterations_per_epoch=1.5)
    results = finish(start("ps", 2, 5, extra=["--curve", curve_to_json(curve)]))
    for events, code, err in results:
        assert code == 0, err
        reported = [e["accuracy"] for e in events if e["event"] == "iteration"]
        assert reported == pytest.approx([curve.accuracy(i) for i in range(1, 6)], abs=1e-6)


def test_bad_curve_is_named():
    (proc,) = start("ps", 2, 1, extra=["--curve", '{"final_accuracy": 1}'], only=[1])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "--curve: a curve needs final_accuracy" in err
    assert "Traceback" not in err


def test_parameter_server_bytes():
    results = finish(start("ps", 3, 2))
    ps, workers = results[0], results[1:]
    assert ps[1] == 0 and ps[0][-1]["bytes_sent"] == 2 * 2 * 200_000  # model to 2 workers, x2
    for events, code, _ in workers:
        assert code == 0 and events[-1]["event"] == "done"
        assert events[-1]["bytes_sent"] == 2 * 200_000  # one gradient per iteration


_LINES: dict[int, queue.Queue] = {}


def _lines_of(proc) -> queue.Queue:
    """The process's stdout lines, read by a thread (a blocked readline cannot time out)."""
    if proc.pid not in _LINES:
        lines = _LINES[proc.pid] = queue.Queue()

        def pump():
            for line in iter(proc.stdout.readline, ""):
                lines.put(line)
            lines.put("")

        threading.Thread(target=pump, daemon=True).start()
    return _LINES[proc.pid]


def read_until(proc, predicate, timeout=20):
    deadline = time.monotonic() + timeout
    seen = []
    lines = _lines_of(proc)
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if not line:
            break
        event = json.loads(line)
        seen.append(event)
        if predicate(event):
            return seen
    raise AssertionError(f"not seen in time; got {seen[-3:]}")


def test_pause_keeps_progress_and_stop_is_clean():
    procs = start("ring", 2, 10_000, compute_s=0.02)
    try:
        read_until(procs[0], lambda e: e.get("iteration", 0) >= 3)
        # Rank 0 first: a rank pauses after its current iteration, and one signalled while it
        # waits for a peer that has already paused only pauses once that peer resumes.
        procs[0].send_signal(signal.SIGUSR1)
        paused = read_until(procs[0], lambda e: e["event"] == "paused")[-1]
        procs[1].send_signal(signal.SIGUSR1)
        time.sleep(0.6)
        for proc in procs:
            proc.send_signal(signal.SIGUSR2)
        events = read_until(procs[0], lambda e: e["event"] == "iteration")
        resumed = [e for e in events if e["event"] == "resumed"]
        # nothing happened while paused: it resumes at the iteration it paused at, having sent
        # nothing in between
        assert resumed and resumed[0]["iteration"] == paused["iteration"]
        assert resumed[0]["bytes_sent"] == paused["bytes_sent"]
        assert events[-1]["iteration"] == paused["iteration"] + 1
        assert events[-1]["time"] - resumed[0]["time"] < 0.5
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
    for events, code, err in finish(procs):
        assert code == 0, err
        assert events[-1]["event"] == "stopped"


def test_a_worker_started_paused_connects_and_waits_for_its_gpus():
    procs = start("ps", 2, 3, compute_s=0.01, extra=("--start-paused",))
    try:
        for proc in procs:
            events = read_until(proc, lambda e: e["event"] == "paused")
            assert [e["event"] for e in events] == ["ready", "paused"]
            assert events[-1]["iteration"] == 0 and events[-1]["bytes_sent"] == 0
        time.sleep(0.5)
        for proc in procs:
            proc.send_signal(signal.SIGUSR2)
    except BaseException:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        raise
    for events, code, err in finish(procs):
        assert code == 0, err
        assert events[0]["event"] == "resumed" and events[0]["bytes_sent"] == 0
        assert events[-1]["event"] == "done" and events[-1]["iteration"] == 3


def test_bad_arguments_and_unreachable_peers():
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "workloads.worker",
            "--job",
            "1",
            "--rank",
            "5",
            "--hosts",
            "127.0.0.1,127.0.0.1",
            "--pattern",
            "ps",
            "--base-port",
            "5000",
            "--bytes",
            "10",
            "--iterations",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--rank must be in 0..1" in bad.stderr
    lonely = start("ps", 2, 1, extra=["--connect-timeout", "0.5"], only=[1])  # no PS
    ((events, code, _),) = finish(lonely)
    assert code == 1 and events[-1]["event"] == "error"
    assert "cannot reach rank 0" in events[-1]["message"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a buffer above net.core.rmem_max needs root")
def test_a_peers_next_message_fits_while_this_rank_is_busy():
    """A worker one message ahead finishes sending it although the receiver is not reading
    (computing): the receiver's window stays open, so the kernel never has a closed window to
    give up on."""
    model = 32e6  # far beyond the kernel's default buffers (tcp_rmem 6 MB + tcp_wmem 4 MB)
    base = free_base_port(2)
    argv = ["--job", "1", "--hosts", "127.0.0.1,127.0.0.1", "--pattern", "ps",
            "--base-port", str(base), "--bytes", str(model), "--iterations", "1"]  # fmt: skip
    server, client = (Worker(parse_args([*argv, "--rank", str(r)])) for r in (0, 1))
    setup = threading.Thread(target=server.setup)
    setup.start()
    client.setup()
    setup.join(10)
    try:
        for sock in (*server.peers, *client.peers):
            # the kernel reports twice what was asked for (it counts packet overhead)
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= receive_buffer_bytes(
                model
            )
        sender = threading.Thread(target=client.send, args=(client.peers[0], int(model)))
        sender.start()
        sender.join(20)
        assert not sender.is_alive(), "the sender blocked: the receiver's window closed"
        assert server.recv(server.peers[0]) == int(model)
    finally:
        for sock in (*server.peers, *client.peers, server.listener):
            sock.close()


def _worker(rank: int, base: int, ranks: int = 2, job: int = 9, timeout: float = 5.0) -> Worker:
    return Worker(parse_args([
        "--job", str(job), "--rank", str(rank), "--hosts", ",".join(["127.0.0.1"] * ranks),
        "--pattern", "ps", "--base-port", str(base), "--bytes", "1000", "--iterations", "1",
        "--connect-timeout", str(timeout),
    ]))  # fmt: skip


def _listen(port: int) -> socket.socket:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(4)
    listener.settimeout(10)
    return listener


def _reset(conn: socket.socket) -> None:
    """Close ``conn`` with a reset, as a host that holds no such connection answers."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def test_a_connection_reset_before_its_greeting_is_made_again():
    base = free_base_port(2)
    listener = _listen(base)
    answered = []

    def rank_0() -> None:  # resets the first connection, greets on the second
        first, _ = listener.accept()
        first.recv(HELLO.size)
        _reset(first)
        second, _ = listener.accept()
        answered.append(HELLO.unpack(second.recv(HELLO.size)))
        second.sendall(HELLO.pack(9, 0))
        answered.append(second)

    thread = threading.Thread(target=rank_0)
    thread.start()
    worker = _worker(1, base)
    sock = worker.connect(0)
    thread.join()
    assert answered[0] == (9, 1) and worker.handshake_retries == 1
    sock.sendall(b"x")  # the connection kept is the greeted one
    assert answered[1].recv(1) == b"x"
    for s in (sock, answered[1], listener):
        s.close()


def test_the_listening_rank_skips_a_connection_that_never_greets():
    base = free_base_port(2)
    server = _worker(0, base)
    server.listen()
    result = []
    thread = threading.Thread(target=lambda: result.append(server.accept({1})))
    thread.start()
    silent = socket.create_connection(("127.0.0.1", base))
    silent.close()  # gone before it greeted
    peer = socket.create_connection(("127.0.0.1", base))
    peer.sendall(HELLO.pack(9, 1))
    assert HELLO.unpack(peer.recv(HELLO.size)) == (9, 0)
    thread.join()
    ((rank, conn),) = result
    assert rank == 1 and server.handshake_retries == 1
    for s in (conn, peer, server.listener):
        s.close()


def test_a_connection_to_another_job_is_an_error_naming_both():
    base = free_base_port(2)
    listener = _listen(base)

    def other_job() -> None:
        conn, _ = listener.accept()
        conn.recv(HELLO.size)
        conn.sendall(HELLO.pack(8, 0))
        time.sleep(0.5)
        conn.close()

    thread = threading.Thread(target=other_job)
    thread.start()
    with pytest.raises(Mismatch, match="is job 8 rank 0, not job 9 rank 0"):
        _worker(1, base).connect(0)
    thread.join()
    listener.close()

    server = _worker(0, base)
    server.listen()
    stranger = threading.Thread(
        target=lambda: socket.create_connection(("127.0.0.1", base)).sendall(HELLO.pack(8, 1))
    )
    stranger.start()
    with pytest.raises(ConnectionError, match="job 8 rank 1 connected; expected job 9, rank 1"):
        server.accept({1})
    stranger.join()
    server.listener.close()


def test_a_ring_rank_waiting_for_its_predecessor_stops_at_once():
    # rank 2 never starts: rank 0 is connected to rank 1 and waits (in its accepting thread)
    # for rank 2, which a stop must end at once, not after the connect timeout
    procs = start("ring", 3, 1, extra=["--connect-timeout", "60"], only=[0, 1])
    time.sleep(2.0)
    stopped_at = time.monotonic()
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    outcomes = finish(procs, timeout=30)
    assert time.monotonic() - stopped_at < 5.0
    assert [code for _, code, _ in outcomes] == [0, 0]
    assert all(events[-1]["event"] == "stopped" for events, _, _ in outcomes)
