"""Ordering time of every policy on random sparse instances (issue: scheduling core).

    .venv/bin/python benchmarks/ordering_speed.py [--coflows 1000 10000] [--hosts 150]

Each instance has ``--hosts`` hosts (2 ports each) and N active coflows of 1-4 flows between
random hosts (sizes log-uniform, 10 KB - 100 MB). Coflow k belongs to job k; jobs are grouped
into stages of ``--jobs-per-stage`` jobs, each job with a per-iteration demand and a budget, so
Beamer orders N / jobs-per-stage stages; ``beamer (1 coflow/stage)`` is Beamer's worst case,
BSSI over N single-coflow stages.

The state keeps its coflows in a :class:`~controller.model.CoflowIndex`, as the controller's
registry does between reorders (``--no-index``: the plain state, every coflow's loads read
from its flows at every call); building the index is timed apart, per coflow. Each cell is
``first / next`` in ms, medians of ``--repeat``: ``first`` is ``policy.schedule(state)`` of a
new policy (state -> schedule, including building the demand vectors), ``next`` the same
policy's next call after the newest coflow finished (what a reorder costs while the stages
stay: Beamer keeps what it derived from them). The states carry no ``stages_version``, so
Beamer checks at every call that the stages and jobs are still those it derived its structure
from; the ``versioned`` rows give the state one, as the registry's and the simulator's states
carry, which spares that check. One untimed call first loads the compiled kernels. The
machine's pace (``benchmarks/pace.py``) is printed before and after the timings.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pace import measure  # noqa: E402

from controller.model import (  # noqa: E402
    ClusterState,
    Coflow,
    CoflowIndex,
    Flow,
    Job,
    Stage,
    egress,
    ingress,
)
from controller.policies import POLICIES, make_policy  # noqa: E402


def random_state(n_coflows: int, n_hosts: int, jobs_per_stage: int, seed: int) -> ClusterState:
    rng = random.Random(seed)
    coflows, jobs, stages = [], [], {}
    for k in range(n_coflows):
        flows = []
        for _ in range(rng.randint(1, 4)):
            src, dst = rng.sample(range(n_hosts), 2)
            flows.append(Flow(src, dst, 10 ** rng.uniform(4, 8)))
        stage_id = k // jobs_per_stage
        coflows.append(Coflow(k, flows, arrival_s=k * 1e-3, job_id=k))
        per_iter = {}
        for flow in flows:
            for port in (egress(flow.src), ingress(flow.dst)):
                per_iter[port] = per_iter.get(port, 0.0) + flow.size_bytes
        budget = rng.randint(1, 20)
        jobs.append(Job(k, per_iter, budget, rng.randint(0, budget - 1), stage_id, arrival_s=k))
        stages.setdefault(stage_id, Stage(stage_id, [], arrival_s=stage_id)).job_ids.append(k)
    return ClusterState.build(coflows, jobs, stages.values(), link_bps=1e9)


def index_of(state: ClusterState) -> CoflowIndex:
    """The state's coflows and its jobs' loads per iteration indexed, as the controller's
    registry keeps them."""
    index = CoflowIndex(state.coflows.values())
    for job in state.jobs.values():
        index.put_job(job)
    index.mirror(state.jobs)  # (the jobs' numbers as arrays, as the registry's index has them)
    return index


def time_policy(
    name: str, state: ClusterState, index: CoflowIndex | None, repeat: int, **options
) -> tuple[float, float]:
    """Median wall times of ``repeat`` first calls of a new policy and of its next call after
    the newest coflow finished, after one untimed call (that loads the compiled kernels from
    numba's cache, or compiles them). With an ``index``, the state reads its coflows from it,
    and a call's time includes the index's snapshot after the change."""

    def set_loads():
        if index is not None:
            state.loads = index.snapshot()

    set_loads()
    make_policy(name, **options).schedule(state)
    newest = state.active_coflows()[-1]
    first, after = [], []
    for _ in range(repeat):
        policy = make_policy(name, **options)
        started = time.perf_counter()
        set_loads()
        schedule = policy.schedule(state)
        first.append(time.perf_counter() - started)
        assert len(schedule.order) == len(state.coflows)
        del state.coflows[newest.coflow_id]
        if index is not None:
            index.remove(newest.coflow_id)
        started = time.perf_counter()
        set_loads()
        schedule = policy.schedule(state)
        after.append(time.perf_counter() - started)
        assert len(schedule.order) == len(state.coflows)
        state.coflows[newest.coflow_id] = newest
        if index is not None:
            index.put(newest)
    return statistics.median(first), statistics.median(after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coflows", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--hosts", type=int, default=150)
    parser.add_argument("--jobs-per-stage", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-index", action="store_true",
                        help="plain states: every coflow's loads read from its flows")  # fmt: skip
    args = parser.parse_args(argv)
    if args.hosts < 2 or args.jobs_per_stage < 1 or args.repeat < 1:
        parser.error("--hosts must be >= 2, --jobs-per-stage and --repeat >= 1")
    if min(args.coflows) < 1:
        parser.error("--coflows must be >= 1")

    cases = [(name, name, {}) for name in sorted(POLICIES)]
    cases.append(("beamer (1 coflow/stage)", "beamer", {}))
    cases.append(("beamer + MADD rates", "beamer", {"use_rates": True}))
    # the same with a stages_version, as the registry's and the simulator's states carry
    cases.append(("beamer, versioned", "beamer", {}))
    cases.append(("beamer 1/stage, versioned", "beamer", {}))
    kind = "plain states" if args.no_index else "indexed states"
    print(f"ordering time, {args.hosts} hosts ({2 * args.hosts} ports), {kind}, "
          f"median of {args.repeat}; first / next call in ms")  # fmt: skip
    states = {}
    for n in args.coflows:
        for per_stage in (args.jobs_per_stage, 1):
            state = random_state(n, args.hosts, per_stage, args.seed)
            started = time.perf_counter()
            index = None if args.no_index else index_of(state)
            took = time.perf_counter() - started
            states[(n, per_stage)] = (state, index)
        if not args.no_index:
            print(f"  building the index: {took / n * 1e6:.1f} us a coflow ({n:,} coflows)")
    print(f"machine pace before: {measure().describe()}")
    print(f"{'policy':<26}" + "".join(f"{n:>17,} coflows" for n in args.coflows))
    for label, name, options in cases:
        row = f"{label:<26}"
        for n in args.coflows:
            per_stage = (
                1 if "1 coflow/stage" in label or "1/stage" in label else args.jobs_per_stage
            )
            state, index = states[(n, per_stage)]
            # (the stages and jobs stay the same from call to call: one version vouches)
            state.stages_version = object() if "versioned" in label else None
            first, after = time_policy(name, state, index, args.repeat, **options)
            row += f"{first * 1e3:>15.1f} / {after * 1e3:<7.1f}"
        print(row, flush=True)
    print(f"machine pace after:  {measure().describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
