"""Ordering time of every policy on random sparse instances (issue: scheduling core).

    .venv/bin/python benchmarks/ordering_speed.py [--coflows 1000 10000] [--hosts 150]

Each instance has ``--hosts`` hosts (2 ports each) and N active coflows of 1-4 flows between
random hosts (sizes log-uniform, 10 KB - 100 MB). Coflow k belongs to job k; jobs are grouped
into stages of ``--jobs-per-stage`` jobs, each job with a per-iteration demand and a budget, so
Beamer orders N / jobs-per-stage stages; ``beamer (1 coflow/stage)`` is Beamer's worst case,
BSSI over N single-coflow stages. Times are the median of ``--repeat`` calls of
``policy.schedule(state)``, state -> schedule, including building the demand vectors, after
one untimed call that loads the compiled kernels.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.model import ClusterState, Coflow, Flow, Job, Stage, egress, ingress  # noqa: E402
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
    return ClusterState.build(coflows, jobs, stages.values(), default_port_bps=1e9)


def time_policy(name: str, state: ClusterState, repeat: int, **options) -> float:
    """Median wall time of ``repeat`` calls, after one untimed call (that loads the compiled
    kernels from numba's cache, or compiles them)."""
    make_policy(name, **options).schedule(state)
    times = []
    for _ in range(repeat):
        policy = make_policy(name, **options)
        started = time.perf_counter()
        schedule = policy.schedule(state)
        times.append(time.perf_counter() - started)
        assert len(schedule.order) == len(state.coflows)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coflows", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--hosts", type=int, default=150)
    parser.add_argument("--jobs-per-stage", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.hosts < 2 or args.jobs_per_stage < 1 or args.repeat < 1:
        parser.error("--hosts must be >= 2, --jobs-per-stage and --repeat >= 1")

    cases = [(name, name, {}) for name in sorted(POLICIES)]
    cases.append(("beamer (1 coflow/stage)", "beamer", {}))
    cases.append(("beamer + MADD rates", "beamer", {"use_rates": True}))
    print(f"ordering time, {args.hosts} hosts ({2 * args.hosts} ports), median of {args.repeat}")
    print(f"{'policy':<26}" + "".join(f"{n:>14,} coflows" for n in args.coflows))
    states = {}
    for n in args.coflows:
        states[n] = random_state(n, args.hosts, args.jobs_per_stage, args.seed)
        states[(n, 1)] = random_state(n, args.hosts, 1, args.seed)
    for label, name, options in cases:
        row = f"{label:<26}"
        for n in args.coflows:
            state = states[(n, 1)] if "1 coflow/stage" in label else states[n]
            row += f"{time_policy(name, state, args.repeat, **options) * 1e3:>18.1f} ms"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
