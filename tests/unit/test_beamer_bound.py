"""Beamer's average stage completion time against brute force on small stage instances."""

from __future__ import annotations

import itertools
import random

from controller.bounds import completion_lower_bound
from controller.model import port_bytes, port_seconds
from controller.policies import Beamer, Sincronia

from .instances import stage_completion_sum, stage_instance

BEAMER_BOUND = 20.0 / 3.0


def test_beamer_within_20_3_of_brute_force(report):
    """Average SCT of Beamer's order <= 20/3 x the best over every coflow order.

    Brute force tries every strict-priority order of the coflows (at most 7), so its best is
    at least the best over stage orders. The stage lower bound is below every order's value.
    """
    rng = random.Random("beamer-stages")
    worst_beamer, worst_sincronia = 1.0, 1.0
    for n_stages in (2, 3, 4):
        for n_hosts in (3, 5):
            for _ in range(8):
                state = stage_instance(rng, n_stages, max_jobs=2, n_hosts=n_hosts)
                if len(state.coflows) > 7:
                    continue
                values = [
                    stage_completion_sum(state, perm)
                    for perm in itertools.permutations(sorted(state.coflows))
                ]
                best = min(values)
                beamer = stage_completion_sum(state, Beamer().schedule(state).order)
                sincronia = stage_completion_sum(state, Sincronia().schedule(state).order)
                assert beamer / best <= BEAMER_BOUND + 1e-9
                worst_beamer = max(worst_beamer, beamer / best)
                worst_sincronia = max(worst_sincronia, sincronia / best)

                stages = sorted(state.stages.values(), key=lambda s: s.stage_id)
                demands = []
                for stage in stages:
                    flows = [f for j in stage.job_ids for f in state.coflows[j].flows]
                    demands.append(port_seconds(state, port_bytes(flows)))
                assert completion_lower_bound(demands) <= best + 1e-9
    report("worst Beamer / brute-force average SCT ratio", worst_beamer)
    report("worst Sincronia / brute-force average SCT ratio (same instances)", worst_sincronia)
