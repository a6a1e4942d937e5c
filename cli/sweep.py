"""One sweep runner for every experiment script: each point (workload, seed, policy, load, ...)
is one task, and its result one file.

- By default each point is a **Ray** task on a local Ray that uses every core;
  ``--ray-address`` runs the same sweep on a Ray cluster (the repository is shipped to the
  workers as the job's working directory).
- ``--sequential`` runs the points one after another in this process, without Ray: the
  reference the parallel runs must match. A small sweep on a machine of 2 cores or fewer
  (:func:`runs_in_process`) runs so too, with a note: a local Ray's start-up costs more there
  than the second core saves; ``--parallel`` or ``--ray-address`` still asks for Ray.
- A point may name a policy of one's own (``package.module:Class``): local workers get the
  folder its module was found in on their ``PYTHONPATH``; on a Ray cluster it must be
  installed on the nodes, or live in the repository (shipped as the working directory).
- Every finished point is written to ``<folder>/<point>.json`` at once, so a crash loses the
  points that were running, not the sweep; ``--resume`` keeps the points already written
  (when their parameters match) and runs only the others.
- A point that raises is reported with its parameters and traceback (also written next to
  where its result would be) while the others go on; the sweep then ends with
  :class:`SweepError` naming every failed point.

A point function takes the point's parameters (a JSON-able dict) and returns a JSON-able dict.
It must be a module-level function (Ray ships it to its workers by reference or by value).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import re
import socket
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cli.argtypes import positive
from cli.progress import Progress
from controller.plugins import child_pythonpath

ROOT = Path(__file__).resolve().parents[1]
# What a Ray cluster does not need from the repository (``--ray-address``).
SHIPPING_EXCLUDES = [".venv/", ".git/", "results/", "**/__pycache__/"]


class SweepError(Exception):
    """Some points failed (their results are missing; the others were written)."""


@dataclass(frozen=True)
class Failure:
    """What a point that raised left: its error and traceback."""

    error: str
    traceback: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sweep flags every experiment script takes."""
    group = parser.add_argument_group("sweep (each point a Ray task, one result file per point)")
    group.add_argument(
        "--sequential",
        action="store_true",
        help="run the points one after another in this process, without Ray (the reference)",
    )
    group.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="run on this Ray cluster (e.g. ray://head:10001, or auto for the one this machine "
        "belongs to); default: a local Ray on all cores",
    )
    group.add_argument(
        "--parallel",
        type=positive(int),
        metavar="N",
        help="local Ray: at most N points at once (default: one per core)",
    )
    group.add_argument(
        "--resume",
        action="store_true",
        help="keep the points already written in the output folder and run only the others",
    )


@dataclass(frozen=True)
class SweepSettings:
    """How a sweep runs (the flags of :func:`add_arguments`, typed).

    Attributes:
        sequential: one point after another in this process, without Ray.
        ray_address: the Ray cluster to run on (``None``: a local Ray).
        parallel: a local Ray's points at once (``None``: one per core).
        resume: keep the points already written and run only the others.
    """

    sequential: bool = False
    ray_address: str | None = None
    parallel: int | None = None
    resume: bool = False

    @classmethod
    def of(cls, args: argparse.Namespace | SweepSettings) -> SweepSettings:
        """The settings a command line's namespace (of :func:`add_arguments`) gives; settings
        as they are."""
        if isinstance(args, cls):
            return args
        return cls(args.sequential, args.ray_address, args.parallel, args.resume)


# A sweep of at most this many points per core runs in-process on a machine of 2 cores or
# fewer: a local Ray's start-up (several seconds, more on a busy machine) outweighed what the
# second core saved on such sweeps (0.5-0.9x of --sequential's speed, measured on 2 cores).
SMALL_SWEEP_POINTS_PER_CORE = 2


def runs_in_process(
    args: SweepSettings | argparse.Namespace, n_points: int, cores: int | None = None
) -> bool:
    """Whether ``n_points`` points run in this process rather than on Ray: with
    ``--sequential``, or when nothing asks for Ray (no ``--parallel``, no ``--ray-address``)
    and the sweep is small for a machine of ``cores`` (default: this one's) 2 or fewer."""
    args = SweepSettings.of(args)
    if args.sequential or n_points == 0:
        return True
    if args.ray_address or args.parallel is not None:
        return False
    cores = cores or os.cpu_count() or 1
    return cores <= 2 and n_points <= SMALL_SWEEP_POINTS_PER_CORE * cores


def point_file(point: dict) -> str:
    """The file name of a point's result: readable, and unique by a hash of its parameters."""
    readable = re.sub(r"[^A-Za-z0-9.=_-]+", "-", "_".join(f"{k}={v}" for k, v in point.items()))
    digest = hashlib.sha256(json.dumps(point, sort_keys=True).encode()).hexdigest()[:10]
    return f"{readable[:120]}_{digest}.json"


def _stored(path: Path, point: dict) -> dict | None:
    """The result stored at ``path`` for ``point``, or ``None`` (missing, or of other
    parameters). A file that is there but cannot be read as a point's result is reported (it
    is then run again and overwritten)."""
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"{path}: unreadable ({type(exc).__name__}: {exc}); running the point again")
        return None
    if not isinstance(record, dict) or not isinstance(record.get("result"), dict):
        print(f"{path}: not a point's result; running the point again")
        return None
    if record.get("point") != point:
        return None
    return record["result"]


def _write(path: Path, point: dict, result: dict) -> None:
    """Write atomically: a reader (or a resumed sweep) never sees half a file."""
    temporary = path.with_suffix(f".tmp{os.getpid()}")
    temporary.write_text(json.dumps({"point": point, "result": result}, indent=1) + "\n")
    temporary.replace(path)


def guarded(run: Callable[[dict], dict], point: dict) -> dict | Failure:
    """``run(point)``, or the :class:`Failure` it raised (so one point cannot end the sweep)."""
    try:
        return run(point)
    except Exception as exc:  # reported with the point's parameters by the caller
        return Failure(f"{type(exc).__name__}: {exc}", traceback.format_exc())


def run_points(
    points: Sequence[dict],
    run: Callable[[dict], dict],
    folder: Path,
    args: SweepSettings | argparse.Namespace,
    label: str = "points",
    describe: Callable[[dict, dict], str] | None = None,
    cost: Callable[[dict], float] | None = None,
) -> list[dict]:
    """Run ``run`` on every point (see the module docstring); the results in ``points``' order.

    ``args`` says how (:class:`SweepSettings`, or the namespace of :func:`add_arguments`);
    ``describe(point, result)`` is the progress line of a finished point; ``cost(point)``, if
    given, orders the submissions largest first so that the longest points do not start last,
    and weighs the points in the ETA.
    Raises :class:`SweepError` if any point failed, after every other point has finished."""
    args = SweepSettings.of(args)
    folder.mkdir(parents=True, exist_ok=True)
    results: list[dict | None] = [None] * len(points)
    todo = []
    for i, point in enumerate(points):
        stored = _stored(folder / point_file(point), point) if args.resume else None
        if stored is None:
            todo.append(i)
        else:
            results[i] = stored
    if cost is not None:
        todo.sort(key=lambda i: -cost(points[i]))
    work = None if cost is None else sum(cost(points[i]) for i in todo)
    progress = Progress(len(points), label, done=len(points) - len(todo), work=work)
    if len(todo) < len(points):
        print(f"{label}: {len(points) - len(todo)} of {len(points)} already done (--resume)")
    failures: list[str] = []

    def share(point: dict) -> float:
        return 1.0 if cost is None else cost(point)

    def finished(i: int, outcome: dict | Failure, wall_s: float) -> None:
        point, path = points[i], folder / point_file(points[i])
        if isinstance(outcome, Failure):
            path.with_suffix(".error.txt").write_text(outcome.traceback)
            failures.append(f"{json.dumps(point)}: {outcome.error}")
            progress.step(f"FAILED {json.dumps(point)}: {outcome.error}", share(point))
            return
        _write(path, point, outcome)
        results[i] = outcome
        text = describe(point, outcome) if describe else json.dumps(point)
        progress.step(f"{text} ({wall_s:.1f} s)", share(point))

    in_process = runs_in_process(args, len(todo))
    if in_process and todo and not args.sequential:
        print(f"{label}: {len(todo)} points on {os.cpu_count()} cores run in this process (a "
              "local Ray's start-up would cost more than it saves); --parallel N runs them on "
              "Ray")  # fmt: skip
    try:
        if in_process:
            for i in todo:
                started = time.monotonic()
                finished(i, guarded(run, points[i]), time.monotonic() - started)
        else:
            _on_ray(run, points, todo, finished, args, ready=progress.begin_work)
    except KeyboardInterrupt:
        progress.close()
        saved = sum(r is not None for r in results)
        print(f"\ninterrupted: {saved} of {len(points)} {label} saved in {folder}; rerun with "
              "--resume to run only the others", file=sys.stderr, flush=True)  # fmt: skip
        raise SystemExit(130) from None
    finally:
        progress.close()
    if failures:
        raise SweepError(
            f"{len(failures)} of {len(points)} {label} failed (tracebacks in {folder}/*.error.txt; "
            "--resume reruns only them):\n  " + "\n  ".join(failures)
        )
    return results  # every point has its result: a failure raised above


def check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Raise :class:`SweepError` if nothing listens at a Ray ``address`` (``host:port`` or
    ``ray://host:port``; ``auto`` and other forms are left to Ray), within ``timeout_s``: Ray
    itself retries an unreachable address for minutes."""
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise SweepError(f"--ray-address {address}: cannot connect ({exc})") from None


def importable(run: Callable[[dict], dict]) -> Callable[[dict], dict]:
    """``run`` as Ray's workers can import it: a function of a module run with ``python -m``
    lives in ``__main__``, which a worker cannot import, so take the same function from the
    module under its own name."""
    if getattr(run, "__module__", None) != "__main__":
        return run
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec is None:  # (a script run by path: Ray ships the function by value)
        return run
    return getattr(importlib.import_module(spec.name), run.__qualname__)


def _on_ray(
    run, points, todo, finished, args: SweepSettings, ready: Callable[[], None] = lambda: None
) -> None:
    """Submit the points as Ray tasks and report each as it finishes (``ready``: called once
    Ray has started)."""
    run = importable(run)
    try:
        import ray
    except ImportError:
        raise SweepError("Ray is not installed: pip install ray, or run --sequential") from None
    if args.ray_address:
        check_reachable(args.ray_address)
        runtime_env = {"working_dir": str(ROOT), "excludes": SHIPPING_EXCLUDES}
        ray.init(address=args.ray_address, runtime_env=runtime_env, logging_level="ERROR")
    else:
        # the local workers inherit this environment: let them import the repository's packages
        path = os.environ.get("PYTHONPATH")
        if str(ROOT) not in (path or "").split(os.pathsep):
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), path]))
        # and the modules of the policies of one's own the command line loaded (a point names
        # one as package.module:Class and the worker loads it again), wherever they were found
        path = child_pythonpath(os.environ.get("PYTHONPATH"))
        if path is not None:
            os.environ["PYTHONPATH"] = path
        ray.init(
            num_cpus=args.parallel,
            include_dashboard=False,
            logging_level="ERROR",
            object_store_memory=256 * 1024 * 1024,  # results are small
        )
    ready()
    try:
        task = ray.remote(_timed).options(num_cpus=1, max_retries=0)
        pending = {task.remote(run, points[i]): i for i in todo}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                outcome, wall_s = ray.get(ref)
                finished(pending.pop(ref), outcome, wall_s)
    finally:
        ray.shutdown()


def _timed(run: Callable[[dict], dict], point: dict) -> tuple[dict | Failure, float]:
    """:func:`guarded` and how long it took (run inside a Ray worker)."""
    started = time.monotonic()
    outcome = guarded(run, point)
    return outcome, time.monotonic() - started
