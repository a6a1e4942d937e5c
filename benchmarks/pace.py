"""How quick this machine is right now: three fixed workloads, timed (issue #19).

    .venv/bin/python benchmarks/pace.py [--samples 20] [--watch SECONDS] [--cpu N]

A benchmark on a shared virtual machine measures the machine as much as the code. On the VM
the numbers of docs/performance.md come from, the same compiled kernel takes 1.8x as long in
one second as in the next (``--watch``), so a p99 over a minute of reorders samples the
machine's slow seconds, and two runs an hour apart differ by more than most changes to the
code. The benchmarks print this pace before and after they run (``controller_latency.py``,
``reorder_parts.py``, ``ordering_speed.py``): the readings tell a slow hour from a quick one,
though not one run's own time (the pace swings within a run), so a speed-up is claimed only
from runs alternating with the commit before. ``hpo_scale.py`` reads the compiled reference
during each run instead (:class:`RunPace`), which does tell that run's time within an hour.

The pace is three medians of ``--samples`` timings each, taken in turn (lower is quicker):

- *compiled*: BSSI (:mod:`controller.bssi`) over one fixed demand matrix of 1,000 items on 26
  ports, the size of the controller benchmark's reorders;
- *interpreted*: a fixed piece of the dict, set and sort work a reorder's Python does (a copy
  of a 6,000-entry dict, the symmetric difference of two 1,000-element sets, a sort of 6,000
  items);
- *memory*: a gather of 2^20 floats (8 MB, twice a core's L2 cache here) through a fixed
  permutation, the kind of access the simulator's step loop makes at 520 hosts, whose speed
  swings with the other tenants' use of the memory more than the first two show.

The command first names the processor (:func:`describe_machine`): a VM may start on other
hardware from one day to the next. ``--watch SECONDS`` prints the pace every two seconds for
that long; ``--cpu N`` measures on CPU N (as ``taskset -c N`` would).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import os
import signal
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# (appended: a caller that put another checkout first, as hpo_scale.py --against does, times
# that checkout's code against its own BSSI; reference_fingerprint tells whether they match)
sys.path.append(str(Path(__file__).resolve().parents[1]))

from controller import bssi  # noqa: E402
from controller.bssi import DemandMatrix, bssi_order  # noqa: E402

N_ITEMS, N_PORTS = 1000, 26
DICT_ENTRIES, SET_SIZE = 6000, 1000
GATHERED = 1 << 20


@dataclass(frozen=True)
class Pace:
    """Medians of the three reference workloads' wall times, in ms (lower is quicker)."""

    compiled_ms: float
    interpreted_ms: float
    memory_ms: float
    samples: int

    def describe(self) -> str:
        """One line: the three medians and how many timings each is of."""
        return (
            f"compiled {self.compiled_ms:.3f} ms, interpreted {self.interpreted_ms:.3f} ms, "
            f"memory {self.memory_ms:.2f} ms (medians of {self.samples}; lower is quicker)"
        )


def reference_matrix(rng: np.random.Generator | None = None) -> DemandMatrix:
    """The compiled reference's fixed demand matrix (from seed 0 unless ``rng`` goes on from
    it): 1,000 items, each on 1-5 of 26 ports."""
    rng = rng or np.random.default_rng(0)
    dense = np.zeros((N_ITEMS, N_PORTS))
    for item in range(N_ITEMS):
        ports = rng.choice(N_PORTS, size=int(rng.integers(1, 6)), replace=False)
        dense[item, ports] = 10.0 ** rng.uniform(-4.0, 0.0, size=len(ports))
    return DemandMatrix.from_dense(dense)


def reference_fingerprint() -> str:
    """A digest of the compiled reference's code (the source of every compiled function of
    :mod:`controller.bssi` that was imported): two checkouts' readings are on one scale only
    where it is the same."""
    kernels = sorted(
        (name, inspect.getsource(value.py_func))
        for name, value in vars(bssi).items()
        if hasattr(value, "py_func")
    )
    return hashlib.sha1(repr(kernels).encode()).hexdigest()[:12]


class References:
    """The three fixed workloads (their inputs made once, from a fixed seed)."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.matrix = reference_matrix(rng)
        self.rules = {(k, k * 7 % 13, k * 3): k for k in range(DICT_ENTRIES)}
        self.before = set(range(SET_SIZE))
        self.after = set(range(7, SET_SIZE + 7))
        self.gathered = rng.random(GATHERED)
        self.gather_at = rng.permutation(GATHERED)
        self.gather_out = np.empty(GATHERED)

    def compiled(self) -> list[int]:
        """BSSI's order of the fixed matrix."""
        return bssi_order(self.matrix)

    def interpreted(self) -> int:
        """The fixed dict, set and sort work; returns a count that depends on all of it."""
        copied = self.rules.copy()
        changed = self.before ^ self.after
        by_second = sorted(copied.items(), key=lambda item: item[0][1])
        return len(copied) + len(changed) + by_second[0][1]

    def memory(self) -> float:
        """The fixed gather; returns its first value."""
        np.take(self.gathered, self.gather_at, out=self.gather_out)
        return float(self.gather_out[0])


def describe_machine(cpuinfo: str | None = None) -> str:
    """One line naming the processor (from ``/proc/cpuinfo``, or ``cpuinfo``'s text), the
    machine's CPUs and, if fewer, those this process may run on: a VM may start on other
    hardware from one day to the next, which no pace reading tells."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    total, here = os.cpu_count() or 0, len(os.sched_getaffinity(0))
    cpus = f"{total} CPUs" + (f" (this process on {here})" if here < total else "")
    if "model name" not in fields:
        return f"machine: processor unknown, {cpus}"
    return (
        f"machine: {fields['model name']} (family {fields.get('cpu family', '?')}, model "
        f"{fields.get('model', '?')}, stepping {fields.get('stepping', '?')}), {cpus}"
    )


def measure(samples: int = 20, references: References | None = None) -> Pace:
    """The machine's pace now: ``samples`` timings of each reference, in turn."""
    if samples < 1:
        raise ValueError("samples must be >= 1")
    refs = references or References()
    refs.compiled()  # (loads the compiled kernel first, from numba's cache)
    timings: dict = {refs.compiled: [], refs.interpreted: [], refs.memory: []}
    for _ in range(samples):
        for reference, took in timings.items():
            started = time.perf_counter()
            reference()
            took.append(time.perf_counter() - started)
    compiled, interpreted, memory = (statistics.median(took) * 1e3 for took in timings.values())
    return Pace(compiled, interpreted, memory, samples)


def measure_on(cpus: set[int] | None, samples: int = 20) -> Pace:
    """:func:`measure` with this thread on ``cpus`` meanwhile (``None``: where it is)."""
    if cpus is None:
        return measure(samples)
    had = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        return measure(samples)
    finally:
        os.sched_setaffinity(0, had)


@dataclass
class RunPace:
    """The compiled reference timed every ``interval_s`` of wall time while a run goes on, in
    the run's own thread (a ``SIGALRM`` timer; a context manager).

    Readings taken before and after a run do not tell its time, since the pace swings within
    it; the mean of these does, within an hour: eight runs in a row of one HPO point (260 x 40,
    Varys, levels) took 16.9-22.8 s, their wall times correlated 0.98 with this mean and their
    wall time over it stayed within 31.7-33.8 s per ms; six of 520 x 80 (fair sharing, levels),
    28.0-34.5 s, 0.96, 49.2-54.8 s per ms (docs/performance.md). Whether it carries from
    one day to another is not known: the tables there that give no run pace were taken
    without it.
    Each reading is the quickest of ``calls`` calls of the compiled reference, 1-2 % of the run
    at the default interval, counted in :attr:`spent_s` so that the run's own time can be told
    without it; a run shorter than ``interval_s`` gets one reading at its end. The handler runs
    between two of the interpreter's instructions, so a long compiled call delays a reading; it
    never cuts one short. Only the main thread may set a signal handler: entering from another
    thread is an error.

    Attributes:
        interval_s: the wall time between two readings.
        calls: calls of the compiled reference per reading (its quickest is the reading).
        readings_ms: the readings, in ms, in the order taken.
        spent_s: the wall time the readings took, in all.
    """

    interval_s: float = 0.25
    calls: int = 3
    readings_ms: list[float] = field(default_factory=list)
    spent_s: float = 0.0

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.calls < 1:
            raise ValueError("RunPace needs interval_s > 0 and calls >= 1")
        # (the matrix alone: the other references' 24 MB would raise the run's peak RSS)
        self._matrix = reference_matrix()
        bssi_order(self._matrix)  # (loads the kernel before the run starts)
        self._handler_before = None

    def _read(self, signum, frame) -> None:
        started = time.perf_counter()
        quickest = min(self._timed() for _ in range(self.calls))
        self.readings_ms.append(quickest * 1e3)
        self.spent_s += time.perf_counter() - started

    def _timed(self) -> float:
        started = time.perf_counter()
        bssi_order(self._matrix)
        return time.perf_counter() - started

    def __enter__(self) -> RunPace:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("RunPace reads on SIGALRM, which only the main thread can take")
        self._handler_before = signal.signal(signal.SIGALRM, self._read)
        signal.setitimer(signal.ITIMER_REAL, self.interval_s, self.interval_s)
        return self

    def __exit__(self, *exc) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._handler_before)
        if not self.readings_ms:  # (a run shorter than one interval: one reading after it)
            self._read(signal.SIGALRM, None)

    @property
    def mean_ms(self) -> float | None:
        """The mean reading (``None`` before the first; after the run there is one at least)."""
        return statistics.fmean(self.readings_ms) if self.readings_ms else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20, help="timings per reference")
    parser.add_argument("--watch", type=float, default=0.0, metavar="SECONDS",
                        help="print the pace every two seconds for this long")  # fmt: skip
    parser.add_argument("--cpu", type=int, help="measure on this CPU")
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error("--samples must be >= 1")
    if args.watch < 0:
        parser.error("--watch must be >= 0")
    cpus = None
    if args.cpu is not None:
        if args.cpu not in os.sched_getaffinity(0):
            parser.error(f"--cpu {args.cpu}: not one of this machine's CPUs "
                         f"{sorted(os.sched_getaffinity(0))}")  # fmt: skip
        cpus = {args.cpu}
    ends = time.monotonic() + args.watch
    print(describe_machine())
    while True:
        print(f"{time.strftime('%H:%M:%S')} pace: {measure_on(cpus, args.samples).describe()}",
              flush=True)  # fmt: skip
        if time.monotonic() + 2.0 > ends:
            return 0
        time.sleep(2.0)


if __name__ == "__main__":
    sys.exit(main())
