"""What a controller reorder spends, part by part, without a switch (issue #19).

    .venv/bin/python benchmarks/reorder_parts.py [--policy beamer] [--active 1000]
                                                 [--registrations 300]

The workload of ``benchmarks/controller_latency.py`` (``--active`` coflows of jobs in stages
between 13 hosts; each registration adds a coflow and deletes the oldest), driven straight into
the registry and the engine in this process: every registration and every deletion is followed
by ``Engine.reorder()``. Prints p50 / p99 / max of the whole reorder and of its parts: the
registry's view (``cluster_state``), the policy's schedule, and the marking rules
(``MarkingTable.update``); and of what follows a reorder before anything is sent, the
operations for one switch (``Engine.ops_for``: the diff against the switch's recorded table,
and the record's update). As in the controller, the interpreter's garbage collections wait until
the operations are made (``controller.engine.collections_after``); the last line is the
collection then run, if one was due. No OVS, no Ryu, no REST: what is left of the controller's
work once the event loop, the client and the switch are out of the picture. The machine's pace
(``benchmarks/pace.py``) is printed before and after the reorders are timed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller_latency import coflow_body  # noqa: E402
from pace import measure  # noqa: E402

from cli.argtypes import add_policy_argument  # noqa: E402
from controller.engine import Engine, collections_after  # noqa: E402
from controller.metrics import percentile  # noqa: E402
from controller.registry import Registry  # noqa: E402
from controller.rules import MarkingTable  # noqa: E402


class _Timed:
    """Wraps a callable and keeps the wall time of every call."""

    def __init__(self, call):
        self.call, self.seconds = call, []

    def __call__(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return self.call(*args, **kwargs)
        finally:
            self.seconds.append(time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_policy_argument(parser, "beamer", "the network policy (default: beamer)", many=False)
    parser.add_argument("--active", type=int, default=1000)
    parser.add_argument("--registrations", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.active < 1 or args.registrations < 1:
        parser.error("--active and --registrations must be >= 1")

    registry = Registry(":memory:")
    engine = Engine(registry, policy=args.policy, link_bps=1e9)
    rng = random.Random(args.seed)
    n_jobs = max(1, args.active // 2)
    for stage in range(1, n_jobs // 8 + 2):
        registry.put("stages", stage, {})
    for job in range(1, n_jobs + 1):
        registry.put("jobs", job, {"stage_id": job // 8 + 1, "tcp_ports": [5000 + job],
                                   "iteration_budget": rng.randint(5, 50)})  # fmt: skip
    for coflow in range(1, args.active + 1):
        registry.put("coflows", coflow, coflow_body(rng, coflow, n_jobs))
    engine.switch_connected(1)
    engine.reorder()
    engine.ops_for(1)

    parts = {
        "registry view": _Timed(registry.cluster_state),
        "schedule": _Timed(engine.policy.schedule),
    }
    registry.cluster_state = parts["registry view"]
    engine.policy.schedule = parts["schedule"]
    update = parts["marking rules"] = _Timed(MarkingTable.update)
    MarkingTable.update = lambda table, *a: update(table, *a)
    whole = parts["whole reorder"] = _Timed(engine.reorder)
    ops = parts["switch ops"] = _Timed(engine.ops_for)
    oldest, newest = 1, args.active
    collected = parts["collection after"] = _Timed(None)

    def reorder_and_ops() -> None:
        # as the controller does: the interpreter's collections wait until the ops are made
        with collections_after():
            whole()
            ops(1)
            leaving = time.perf_counter()
        collected.seconds.append(time.perf_counter() - leaving)

    pace_before = measure()
    for _ in range(args.registrations):
        newest += 1
        registry.put("coflows", newest, coflow_body(rng, newest, n_jobs))
        reorder_and_ops()
        registry.delete("coflows", oldest)
        oldest += 1
        reorder_and_ops()
    pace_after = measure()
    print(f"{args.policy}, {args.active} coflows of {n_jobs} jobs active, "
          f"{len(whole.seconds)} reorders; {len(engine.plan.table.rules)} rules")  # fmt: skip
    for name, timed in parts.items():
        ms = [s * 1e3 for s in timed.seconds]
        print(f"  {name:<16} p50 {percentile(ms, 50):6.2f} ms   p99 {percentile(ms, 99):6.2f} ms"
              f"   max {max(ms):6.2f} ms")  # fmt: skip
    print(f"machine pace before: {pace_before.describe()}")
    print(f"machine pace after:  {pace_after.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
