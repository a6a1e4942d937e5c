"""Traffic-replay training worker: one rank of one data-parallel job, over real TCP.

    python -m workloads.worker --job 7 --rank 1 --hosts 10.0.0.1,10.0.0.2,10.0.0.3 \\
        --pattern ps --base-port 5300 --bytes 1e6 --compute-s 0.05 --iterations 20

Every iteration computes (a sleep of ``--compute-s``) and then synchronises with the job's other
ranks, each rank ``r`` listening on ``--base-port + r`` of its host:

- ``ps``: rank 0 is the parameter server on the first host; every other rank pushes ``--bytes``
  to it and pulls ``--bytes`` back (the PS waits for all pushes, then answers each worker);
- ``ring``: every rank sends ``2 (W - 1) / W x --bytes`` to its successor while receiving as much
  from its predecessor (the traffic of a ring all-reduce).

A new connection is used only once both ends have greeted each other (job and rank): a
connection the listening host dropped during its handshake is made again while setting up,
and one that reaches another job's rank is an error.

It prints one JSON object per line on stdout: ``ready`` once connected (``connect_s``: its
longest connect; ``synack_retransmits``; ``handshake_retries``: connections made again), then
``iteration`` after each one (iteration number, wall-clock ``time``, ``elapsed_s`` since start,
bytes sent, ``sync_s``: how long its synchronisation took, the emulated accuracy when
``--curve`` is given), ``paused`` /
``resumed``, and ``done`` or ``stopped``. SIGUSR1 pauses it after the current iteration and
SIGUSR2 resumes it, keeping its progress (with ``--start-paused`` it waits for SIGUSR2 once
connected; SIGSTOP / SIGCONT also pause and resume it); SIGTERM or SIGINT stop it
cleanly (exit 0). A peer that cannot be reached or that fails makes it exit 1 with an ``error``
line.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import struct
import sys
import threading
import time

from cli.argtypes import non_negative, positive, program, tcp_port
from workloads.curves import curve_from_json

HEADER = struct.Struct("!QQ")  # iteration, payload length
HELLO = struct.Struct("!QQ")  # job, rank: what each end of a new connection says first
CHUNK = 1 << 16
_ZEROS = bytes(CHUNK)
# How long a finished worker waits for its peers to finish receiving (the driver stops it
# earlier at the end of a run).
DRAIN_TIMEOUT_S = 300.0
# Linux's default give-up time (15 retries of doubling timeouts), kept whatever cap the host
# puts on the retransmission timeout (topologies/testbed.py sets its retries from it).
TCP_PATIENCE_MS = 924_000
# SO_RCVBUFFORCE (Linux, needs CAP_NET_ADMIN; Python's socket module may not name it).
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
# struct tcp_info (linux/tcp.h): 8 one-byte fields, then 23 u32 up to tcpi_total_retrans.
TCP_INFO_TOTAL_RETRANS = 100
TCP_INFO_BYTES = 104
# The kernel doubles a requested buffer and stores it in an int.
MAX_RECEIVE_BUFFER = (1 << 30) - 1


class Stop(Exception):
    """Raised inside the worker when it was asked to stop."""


class Mismatch(Exception):
    """A connection reached a process that is not the expected rank of this job."""


def peer_name(sock: socket.socket) -> str:
    """``address:port`` of the other end, or why it is unknown."""
    try:
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError as exc:
        return f"? ({exc.strerror})"


def handshake_retransmits(sock: socket.socket) -> int:
    """SYN-ACKs this side of an accepted connection sent again before the peer's ACK came
    (Linux copies the request's retransmissions into ``tcpi_total_retrans``); 0 if unknown."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BYTES)
    except OSError:
        return 0
    if len(info) < TCP_INFO_TOTAL_RETRANS + 4:
        return 0
    return struct.unpack_from("I", info, TCP_INFO_TOTAL_RETRANS)[0]


def connection_name(sock: socket.socket) -> str:
    """``peer <- local`` addresses of a connection, for saying which one failed."""
    try:
        host, port = sock.getsockname()[:2]
        local = f"{host}:{port}"
    except OSError as exc:
        local = f"? ({exc.strerror})"
    return f"{peer_name(sock)} (local {local})"


def patient(sock: socket.socket) -> socket.socket:
    """``sock`` set to wait as long for an acknowledgement as Linux does by default (about 15
    minutes), whatever cap the host puts on the retransmission timeout: a flow starved by
    higher priorities for a while is slow, not broken."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_PATIENCE_MS)
    return sock


def receive_buffer_bytes(model_bytes: float) -> int:
    """Receive buffer that keeps a connection's window open while its reader is busy: room for
    two of the largest messages a rank is sent (a ring share is under twice the model), as the
    kernel counts each packet's overhead against it, plus 1 MiB for headers and slack.

    Why: a rank one iteration ahead sends its next message while the receiver still computes.
    With the kernel's default buffer the window closes, and a closed window with a
    retransmission pending is abandoned (ETIMEDOUT) once the peer has been silent for twice the
    maximum retransmission timeout: 2 s under the testbed's 1 s cap, which a priority class
    starved behind others reaches (``tcp_rtx_probe0_timed_out`` in Linux's tcp_timer.c)."""
    return min(MAX_RECEIVE_BUFFER, int(4 * model_bytes) + (1 << 20))


def roomy(sock: socket.socket, size: int) -> socket.socket:
    """``sock`` with a receive buffer of ``size`` bytes, set before it connects or listens so
    that the window scale it announces can open the whole buffer. Above ``net.core.rmem_max``
    this needs CAP_NET_ADMIN; without it the buffer stays at that limit."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    return sock


class Worker:
    """One rank; :meth:`run` does the iterations."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.hosts = args.hosts
        self.rank = args.rank
        self.size = len(self.hosts)
        self.iteration = args.start_iteration
        self.bytes_sent = 0
        self._sent_lock = threading.Lock()
        # Plain flags, set by the signal handlers: a handler that called Event.set() could run
        # while this very thread holds the Event's lock inside Event.wait() and deadlock.
        self.stop_requested = False
        self.paused = args.start_paused
        self.started = time.monotonic()
        self.listener: socket.socket | None = None
        self.receive_buffer = receive_buffer_bytes(args.bytes)
        self.peers: list[socket.socket] = []
        # the longest successful connect() and the SYN-ACKs resent before accepted peers' ACKs
        # came: a handshake's packets wait in the job's class like its data
        self.longest_connect_s = 0.0
        self.synack_retransmits = 0
        self.handshake_retries = 0  # connections dropped before their greeting, and redone
        # connections being greeted; replaced, never changed in place, so that the stop handler
        # can read it without the lock, which the interrupted thread may hold
        self.opening: tuple[socket.socket, ...] = ()
        self._setup_lock = threading.Lock()  # the ring connects and accepts in two threads

    # ---- output ------------------------------------------------------------------------------

    def emit(self, event: str, **fields) -> None:
        """Print one JSON event line on stdout (the driver reads them)."""
        record = {
            "event": event,
            "job": self.args.job,
            "rank": self.rank,
            "time": round(time.time(), 6),
            "elapsed_s": round(time.monotonic() - self.started, 6),
            **fields,
        }
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()

    def accuracy(self, iteration: int) -> float | None:
        """The curve's accuracy after ``iteration`` iterations (``None`` without ``--curve``)."""
        if self.args.curve is None:
            return None
        return round(self.args.curve.accuracy(iteration), 6)

    # ---- sockets -----------------------------------------------------------------------------

    def port(self, rank: int) -> int:
        """The TCP port rank ``rank`` listens on."""
        return self.args.base_port + rank

    def listen(self) -> None:
        """Listen on this rank's port."""
        self.listener = roomy(socket.socket(), self.receive_buffer)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((self.hosts[self.rank], self.port(self.rank)))
        self.listener.listen(self.size)
        self.listener.settimeout(self.args.connect_timeout)

    def close_listener(self) -> None:
        """Stop listening and wake an accept() blocked in another thread: closing alone does
        not, and the ring accepts in a thread of its own."""
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()

    def accept(self, expected: set[int]) -> tuple[int, socket.socket]:
        """The next connection whose peer greets as one of the ``expected`` ranks of this job
        (within the connect timeout), greeted back; returns the peer's rank and the connection,
        which inherits the listener's receive buffer. A connection that fails before its
        greeting is dropped and the next one awaited (see :meth:`greet`)."""
        deadline = time.monotonic() + self.args.connect_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ConnectionError("no peer connected in time")
            self.listener.settimeout(left)
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                raise ConnectionError("no peer connected in time") from None
            try:
                job, rank = self.greet(conn, deadline, first=False)
            except OSError:
                conn.close()
                self._count_retry()
                continue
            if job != self.args.job or rank not in expected:
                conn.close()
                raise ConnectionError(
                    f"job {job} rank {rank} connected; expected job {self.args.job}, rank "
                    f"{' or '.join(map(str, sorted(expected)))}"
                )
            with self._setup_lock:
                self.synack_retransmits += handshake_retransmits(conn)
            return rank, patient(conn)

    def greet(self, sock: socket.socket, deadline: float, first: bool) -> tuple[int, int]:
        """Exchange :data:`HELLO` on a new connection (this end speaks ``first`` or answers),
        waiting until ``deadline`` at most; returns the peer's job and rank.

        Why: a connect() that succeeded does not prove the other host holds the connection.
        Seen on the testbed: a connecting rank's first synchronisation was reset by the
        listening host, which had no such connection left. A greeting makes that show while
        setting up, where the connecting side can simply try again."""
        with self._setup_lock:
            self.opening = (*self.opening, sock)
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            if first:
                sock.sendall(HELLO.pack(self.args.job, self.rank))
            job, rank = HELLO.unpack(self.recv_exact(sock, HELLO.size))
            if not first:
                sock.sendall(HELLO.pack(self.args.job, self.rank))
            sock.settimeout(None)  # a peer may compute longer than any connect timeout
            return job, rank
        finally:
            with self._setup_lock:
                self.opening = tuple(s for s in self.opening if s is not sock)

    def _count_retry(self) -> None:
        with self._setup_lock:
            self.handshake_retries += 1

    def connect(self, rank: int) -> socket.socket:
        """Connect to rank ``rank`` and greet it, retrying until the connect timeout."""
        address = (self.hosts[rank], self.port(rank))
        deadline = time.monotonic() + self.args.connect_timeout
        while True:
            self.check_stop()
            try:
                # A refused connection (peer not listening yet) returns at once and is retried;
                # a slow handshake (SYN-ACKs queued behind more urgent traffic) is waited for,
                # not abandoned: the peer may already have accepted it, and a retry would leave
                # it reading from a connection this side resets.
                left = max(1.0, deadline - time.monotonic())
                sock = roomy(socket.socket(), self.receive_buffer)
                sock.settimeout(left)
                started = time.monotonic()
                try:
                    sock.connect(address)
                except OSError:
                    sock.close()
                    raise
                self.longest_connect_s = max(self.longest_connect_s, time.monotonic() - started)
                try:
                    job, peer_rank = self.greet(sock, max(deadline, time.monotonic() + 1.0), True)
                except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as exc:
                    # the peer's host dropped the connection before its greeting: the peer
                    # never accepted it, so a new one is safe
                    sock.close()
                    self._count_retry()
                    raise ConnectionError(f"greeting reset: {exc}") from None
                except OSError:
                    sock.close()
                    raise
                if (job, peer_rank) != (self.args.job, rank):
                    sock.close()
                    raise Mismatch(f"{address} is job {job} rank {peer_rank}, not job "
                                   f"{self.args.job} rank {rank}")  # fmt: skip
                return patient(sock)
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise ConnectionError(f"cannot reach rank {rank} at {address}: {exc}") from None
                time.sleep(0.05)

    def send(self, sock: socket.socket, length: int) -> None:
        """Send one message of ``length`` bytes (header, then payload)."""
        try:
            sock.sendall(HEADER.pack(self.iteration, length))
            left = length
            while left > 0:
                self.check_stop()
                n = min(left, CHUNK)
                sock.sendall(_ZEROS[:n])
                left -= n
        except OSError as exc:
            raise ConnectionError(f"sending to {connection_name(sock)}: {exc}") from exc
        with self._sent_lock:  # parallel transfers add to it
            self.bytes_sent += length

    def recv(self, sock: socket.socket) -> int:
        """Receive one message; returns its length."""
        try:
            header = self.recv_exact(sock, HEADER.size)
            iteration, length = HEADER.unpack(header)
            if iteration != self.iteration:
                raise ConnectionError(
                    f"peer is at iteration {iteration}, this rank {self.iteration}"
                )
            left = length
            buf = bytearray(CHUNK)
            while left > 0:
                self.check_stop()
                n = sock.recv_into(buf, min(left, CHUNK))
                if n == 0:
                    raise ConnectionError("peer closed the connection")
                left -= n
        except OSError as exc:
            raise ConnectionError(f"receiving from {connection_name(sock)}: {exc}") from exc
        return length

    @staticmethod
    def recv_exact(sock: socket.socket, n: int) -> bytes:
        """Exactly ``n`` bytes from ``sock`` (``ConnectionError`` if it closes first)."""
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("peer closed the connection")
            data += chunk
        return data

    def check_stop(self) -> None:
        """Leave the run if SIGTERM or SIGINT arrived."""
        if self.stop_requested:
            raise Stop

    def sleep(self, seconds: float) -> None:
        """Sleep, waking up often enough to stop promptly."""
        deadline = time.monotonic() + seconds
        while True:
            self.check_stop()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.02))

    # ---- the job ----------------------------------------------------------------------------

    def setup(self) -> None:
        """Connect to the peers of the pattern (parameter server or ring)."""
        pattern = self.args.pattern
        if pattern == "ps":
            if self.rank == 0:
                self.listen()
                workers = {}
                while len(workers) < self.size - 1:
                    rank, conn = self.accept(set(range(1, self.size)) - set(workers))
                    workers[rank] = conn
                    self.peers = [workers[r] for r in sorted(workers)]
            else:
                self.peers = [self.connect(0)]
        else:
            # Accepting runs beside connecting: every rank waits for its successor's greeting,
            # which the successor sends as it accepts, so one after the other would deadlock.
            self.listen()
            links: dict[str, socket.socket] = {}

            def accept_predecessor() -> None:
                _, links["predecessor"] = self.accept({(self.rank - 1) % self.size})

            def connect_successor() -> None:
                try:
                    links["successor"] = self.connect((self.rank + 1) % self.size)
                except BaseException:
                    self.close_listener()  # ends the accept
                    raise
                self.peers = [links["successor"]]

            self.concurrently([accept_predecessor, connect_successor])
            self.peers = [links["successor"], links["predecessor"]]

    def expected_peers(self) -> int:
        """Connections a rank holds once set up: its successor and predecessor in a ring, every
        worker for a parameter server, the server for a worker."""
        if self.args.pattern == "ps":
            return self.size - 1 if self.rank == 0 else 1
        return 2

    def drain(self) -> None:
        """Stay until every peer has all it was sent: say so (FIN) and wait for each peer's own
        FIN, which it sends once its last iteration is done. A process that exits earlier leaves
        its unsent bytes to an orphaned socket, which the kernel abandons after a few retries
        (seen under strict priority: the last bytes of a starved rank never arrived)."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        for sock in self.peers:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        for sock in self.peers:
            try:
                while (left := deadline - time.monotonic()) > 0:
                    sock.settimeout(left)
                    if not sock.recv(65536):
                        break
            except OSError:  # a timeout, a reset, or a stop request's shutdown
                pass

    def synchronise(self) -> None:
        """One synchronisation. Every coflow's flows run in parallel, as the simulator models
        them: the PS receives every push at once, then (with every gradient in) sends the
        model back to every worker at once; a ring rank sends and receives at once."""
        model = int(self.args.bytes)
        if self.args.pattern == "ps":
            if self.rank == 0:
                self.concurrently([lambda peer=peer: self.recv(peer) for peer in self.peers])
                self.concurrently([lambda peer=peer: self.send(peer, model) for peer in self.peers])
            else:
                self.send(self.peers[0], model)
                self.recv(self.peers[0])
            return
        share = int(2 * (self.size - 1) / self.size * model)
        successor, predecessor = self.peers
        self.concurrently([lambda: self.send(successor, share), lambda: self.recv(predecessor)])

    @staticmethod
    def concurrently(transfers: list) -> None:
        """Run the transfers in parallel threads (the last in this one); raise the first
        error any of them met once all have ended."""
        errors: list[BaseException] = []

        def guarded(transfer) -> None:
            try:
                transfer()
            except BaseException as exc:  # reported by the calling thread
                errors.append(exc)

        threads = [threading.Thread(target=guarded, args=(t,)) for t in transfers[:-1]]
        for thread in threads:
            thread.start()
        guarded(transfers[-1])
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def run(self) -> int:
        """Train: connect, iterate (compute, synchronise, report), drain; the exit status."""
        try:
            self.setup()
            self.emit(
                "ready",
                iteration=self.iteration,
                connect_s=round(self.longest_connect_s, 6),
                synack_retransmits=self.synack_retransmits,
                handshake_retries=self.handshake_retries,
            )
            while self.iteration < self.args.iterations:
                if self.paused:
                    self.emit("paused", iteration=self.iteration, bytes_sent=self.bytes_sent)
                    while self.paused:
                        self.sleep(0.05)
                    self.emit("resumed", iteration=self.iteration, bytes_sent=self.bytes_sent)
                # the parameter server only aggregates; workers compute
                if not (self.args.pattern == "ps" and self.rank == 0):
                    self.sleep(self.args.compute_s)
                sync_started = time.monotonic()
                self.synchronise()
                sync_s = time.monotonic() - sync_started
                self.iteration += 1
                self.emit(
                    "iteration",
                    iteration=self.iteration,
                    bytes_sent=self.bytes_sent,
                    sync_s=round(sync_s, 6),
                    accuracy=self.accuracy(self.iteration),
                )
            self.emit("done", iteration=self.iteration, bytes_sent=self.bytes_sent)
            self.drain()
            return 0
        except Stop:
            self.emit("stopped", iteration=self.iteration, bytes_sent=self.bytes_sent)
            return 0
        except (ConnectionError, OSError, Mismatch) as exc:
            if self.stop_requested:
                self.emit("stopped", iteration=self.iteration, bytes_sent=self.bytes_sent)
                return 0
            self.emit("error", iteration=self.iteration, message=str(exc))
            # the log says where, so that the rank whose failure reset its peers can be found
            phase = "setup" if len(self.peers) < self.expected_peers() else "a synchronisation"
            print(f"rank {self.rank}: {exc!r} in {phase} at iteration {self.iteration}, "
                  f"{time.time():.3f} ({time.monotonic() - self.started:.3f} s after start); "
                  f"peers {[connection_name(p) for p in self.peers]}; longest connect "
                  f"{self.longest_connect_s:.3f} s, SYN-ACKs resent {self.synack_retransmits}, "
                  f"connections redone {self.handshake_retries}",
                  file=sys.stderr, flush=True)  # fmt: skip
            return 1
        finally:
            for sock in [*self.peers, self.listener]:
                if sock is not None:
                    sock.close()


def parse_args(argv=None) -> argparse.Namespace:
    """The worker's command line; a bad flag ends with argparse's one-line error."""
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--job", type=non_negative(int), required=True, help="job id (for the output)"
    )
    parser.add_argument(
        "--rank", type=non_negative(int), required=True, help="this worker's rank, 0-based"
    )
    parser.add_argument(
        "--hosts", required=True, help="comma-separated IPv4 addresses of the ranks, in rank order"
    )
    parser.add_argument(
        "--pattern",
        choices=["ps", "ring"],
        required=True,
        help="synchronisation pattern of the job",
    )
    parser.add_argument(
        "--base-port", type=tcp_port, required=True, help="rank r listens on base-port + r"
    )
    parser.add_argument(
        "--bytes",
        type=positive(float),
        required=True,
        help="model size in bytes (one synchronisation)",
    )
    parser.add_argument(
        "--compute-s",
        type=non_negative(float),
        default=0.0,
        help="compute time of one iteration in s (default: 0)",
    )
    parser.add_argument(
        "--iterations",
        type=non_negative(int),
        required=True,
        help="iteration to stop at (total, counting --start-iteration)",
    )
    parser.add_argument(
        "--start-iteration",
        type=non_negative(int),
        default=0,
        help="iterations already done (resume after a restart)",
    )
    parser.add_argument(
        "--curve",
        metavar="JSON",
        help="the job's learning curve as workloads.curves.curve_to_json writes it, e.g. "
        '\'{"final_accuracy": 0.9, "tau_iterations": 20}\'',
    )
    parser.add_argument(
        "--start-paused",
        action="store_true",
        help="connect to the peers, then wait for SIGUSR2 before the first iteration "
        "(a job manager starts it without its GPUs)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=positive(float),
        default=30.0,
        help="seconds to wait for peers (default: 30)",
    )
    args = parser.parse_args(argv)
    args.hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    if len(args.hosts) < 2:
        parser.error("--hosts needs at least 2 addresses")
    if not 0 <= args.rank < len(args.hosts):
        parser.error(f"--rank must be in 0..{len(args.hosts) - 1}")
    if args.base_port + len(args.hosts) - 1 > 65535:
        parser.error("--base-port + number of ranks exceeds 65535")
    if args.curve is not None:
        try:
            args.curve = curve_from_json(args.curve)
        except ValueError as exc:
            parser.error(f"--curve: {exc}")
    return args


def main(argv=None) -> int:
    """Run one worker with signal handlers installed; the exit status."""
    worker = Worker(parse_args(argv))

    def stop(_signum, _frame) -> None:
        worker.stop_requested = True
        for sock in [*worker.peers, *worker.opening]:  # unblock a pending recv or greeting
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if worker.listener is not None:  # and a pending accept
            worker.close_listener()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGUSR1, lambda *_: setattr(worker, "paused", True))
    signal.signal(signal.SIGUSR2, lambda *_: setattr(worker, "paused", False))
    code = worker.run()
    # A pause or resume that arrives while the interpreter exits must not kill it
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    return code


if __name__ == "__main__":
    sys.exit(main())
