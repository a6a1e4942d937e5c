"""Smallest coflow first, by bytes remaining: a network policy of one's own.

Implements the interface of :class:`controller.policies.Policy`: a subclass with a ``name``
(the label of its runs) and ``schedule(state) -> Schedule``, which gets the
:class:`~controller.model.ClusterState` (active coflows, jobs, stages, port capacities) at every
reorder and returns a :class:`~controller.schedule.Schedule`: the coflows in ranks, most urgent
first (the first 7 ranks get a switch priority level each, later ones share the lowest), and
optionally per-flow rate caps. The simulator and the controller call it alike:

    hpo-sim hpo --policy examples.smallest_first:SmallestFirst fair
    hpo-controller --policy examples.smallest_first:SmallestFirst

It is shortest-job-first on coflows without their ports (Varys orders by the bottleneck port's
time instead): a coflow with fewer bytes left goes first, whatever ports it crosses, so many
small synchronisations overtake a big one. Ties go by arrival (the state lists the active
coflows in arrival order, ties by id), which keeps the order deterministic.
"""

from __future__ import annotations

from typing import ClassVar

from controller.model import ClusterState
from controller.policies import OptionSpec, Policy
from controller.schedule import Schedule


class SmallestFirst(Policy):
    """Fewest bytes left first; one rank per coflow, or shared ranks of similar sizes."""

    name = "smallest-first"
    # options are declared as the built-ins' are: --policy-option, PUT /api/policy and the
    # make_policy keyword arguments are checked against this (type, default, range)
    OPTIONS: ClassVar[dict[str, OptionSpec]] = {
        "bucket_bytes": OptionSpec(
            float, None, "coflows whose bytes left fall in the same multiple of this share a "
            "rank (null: a rank each)", low=0, high=1e18, low_open=True, nullable=True,
        ),
    }  # fmt: skip

    def __init__(self, bucket_bytes: float | None = None) -> None:
        self.bucket_bytes = bucket_bytes

    def schedule(self, state: ClusterState) -> Schedule:
        """The active coflows by bytes left, fewest first, ties by arrival."""
        active = state.active_coflows()  # in arrival order
        ids = state.active_ids(active)
        # (sizes and bytes left for the whole list at once: the simulator keeps them in
        # arrays, and this reads them without making each coflow's per-port mapping)
        _sizes, left = state.byte_counts(active, ids)
        by_left = sorted(range(len(ids)), key=lambda k: (left[k], k))  # stable: arrival
        if self.bucket_bytes is None:
            return Schedule.from_order([ids[k] for k in by_left])
        ranks: list[list[int]] = []
        last = None
        for k in by_left:
            bucket = int(left[k] // self.bucket_bytes)
            if bucket != last:
                ranks.append([])
                last = bucket
            ranks[-1].append(ids[k])
        return Schedule.from_groups(ranks)
