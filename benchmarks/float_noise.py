"""How far a simulator run moves with the order of its float sums alone.

    .venv/bin/python benchmarks/float_noise.py [--sizes 60x10 130x20] [--seeds 1]
                                               [--policy fair sincronia ...]

Every point (HPO workload hosts x tasks and seed, policy) runs twice in levels mode on a
1 Gbit/s big switch: with pair levels, the default fast path, and with the general max-min
over every group (``Simulator(pair_levels=False)``): the same allocation, its sums in another
order. Printed per point: the largest relative difference of a coflow's completion time, the
coflows whose completion times differ by more than 1e-9 (relative), both runs' average CCT and
both runs' wall time (``sim.run()`` alone: which allocation is the cheaper one for the
workload).

Differences near 1e-12 are float noise. Larger ones mean a last-bit difference flipped a
discrete choice (the order of two equal coflows, flows ending in one step or in two) and the
runs went apart from there: that workload's results move with any change of arithmetic, so
compare policies over seeds (``hpo-sim-sweep``), not single runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpo_scale import size  # noqa: E402

NOISE = 1e-9  # relative CCT difference counted as a run gone apart


def completion_times(
    hosts: int, tasks: int, seed: int, policy: str, pair_levels: bool
) -> tuple[np.ndarray, float]:
    """Every coflow's CCT (by coflow id) of one HPO run in levels mode, and the run's wall
    time in seconds."""
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator
    from simulator.hpo import HpoDriver
    from workloads.hpo import generate

    sim = Simulator(Fabric(hosts, 1e9), make_policy(policy), pair_levels=pair_levels)
    HpoDriver(sim, generate(hosts, tasks, seed=seed))
    started = time.perf_counter()
    sim.run()
    took = time.perf_counter() - started
    return np.array([sim.coflows[c].cct_s for c in sorted(sim.coflows)]), took


def compare(fast: np.ndarray, general: np.ndarray) -> tuple[float, int]:
    """The largest relative CCT difference and the coflows beyond :data:`NOISE`."""
    if fast.shape != general.shape:  # (a workload that reacts to completions may differ)
        return float("inf"), max(len(fast), len(general))
    relative = np.abs(fast - general) / np.maximum(np.abs(general), 1e-12)
    return float(relative.max(initial=0.0)), int((relative > NOISE).sum())


def main(argv: list[str] | None = None) -> int:
    from cli.argtypes import add_policy_argument
    from controller.policies import POLICIES
    from simulator.engine import warm_up

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=size, nargs="+", default=[(60, 10), (130, 20)],
                        metavar="HOSTSxTASKS")  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    add_policy_argument(parser, sorted(POLICIES), "network policies (default: every built-in)")
    args = parser.parse_args(argv)
    warm_up()
    print(f"HPO workloads in levels mode, 1 Gbit/s big switch: pair levels against the general "
          f"max-min; coflows beyond a relative difference of {NOISE:g}")  # fmt: skip
    print(f"{'hosts x tasks':<14}{'seed':>5}  {'policy':<10}{'max rel diff':>14}{'beyond':>8}"
          f"{'avg CCT s (pairs)':>20}{'(general)':>14}{'run s (pairs)':>15}"
          f"{'(general)':>11}")  # fmt: skip
    for hosts, tasks in args.sizes:
        for seed in args.seeds:
            for policy in args.policy:
                fast, fast_s = completion_times(hosts, tasks, seed, policy, pair_levels=True)
                general, general_s = completion_times(hosts, tasks, seed, policy, pair_levels=False)
                worst, beyond = compare(fast, general)
                print(f"{f'{hosts} x {tasks}':<14}{seed:>5}  {policy:<10}{worst:>14.2e}"
                      f"{beyond:>8}{fast.mean():>20.6f}{general.mean():>14.6f}"
                      f"{fast_s:>15.2f}{general_s:>11.2f}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
