"""A claim mapped over the regimes that decide it: the types of the claims atlas.

A claim (:class:`ClaimMap`) names its policy, its baselines, the metrics of its paper and the
**dimensions** that decide it, each with its levels and the reason it is there. Its cells are
the product of its ``grid`` dimensions, and again with each ``variations`` level alone (the
others at their first level, the report's setting); ``--quick`` varies only the dimensions
marked ``quick``. In every cell every policy runs on the same seeds (the same workload per
seed): a point is one policy on one seed in one cell (:func:`points`). The papers' claims are
in :mod:`experiments.claims`, the atlas that runs and judges them in :mod:`experiments.atlas`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Level:
    """One level of a dimension: its label and the settings it overrides."""

    label: str
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Dimension:
    """A dimension of a claim's map: why it decides the claim, and its levels (the first is the
    report's setting); ``quick``: varied in the quick atlas (else held at its first level)."""

    name: str
    why: str
    levels: tuple[Level, ...]
    quick: bool = True

    def level(self, label: str) -> Level:
        """The level called ``label``."""
        for level in self.levels:
            if level.label == label:
                return level
        raise KeyError(f"{self.name} has no level {label!r}")


@dataclass(frozen=True)
class Metric:
    """A paper's metric: the key of a point's result that holds it."""

    key: str
    label: str
    lower_is_better: bool = True


@dataclass(frozen=True)
class Reading:
    """A policy as the atlas runs it: a label, the policy's name, its options and why."""

    label: str
    policy: str
    options: Mapping[str, Any] = field(default_factory=dict)
    why: str = ""


@dataclass(frozen=True)
class ClaimMap:
    """One claim and its map.

    Attributes:
        key: the claim's short name (points and files carry it).
        kind: how a point runs (a key of :data:`experiments.atlas_points.RUNNERS`).
        base: the settings every cell starts from.
        grid: dimensions whose levels are crossed (the heat maps' axes).
        variations: dimensions whose levels are each run alone over the grid.
        readings: the claimed policy's readings; the first is the default (the claim's verdict
            is its). The others run on the grid cells only (every variation at its first level).
        baselines: what each reading is compared with.
        metrics: the paper's metrics; the first decides the seed rule and the figure.
        context: keys of a point's result shown beside a cell (from :attr:`regime_policy`'s
            runs).
    """

    key: str
    name: str
    paper: str
    statement: str
    kind: str
    base: Mapping[str, Any]
    grid: tuple[Dimension, ...]
    variations: tuple[Dimension, ...]
    readings: tuple[Reading, ...]
    baselines: tuple[Reading, ...]
    metrics: tuple[Metric, ...]
    context: tuple[str, ...] = ()
    note: str = ""

    @property
    def regime_policy(self) -> str:
        """The runs a cell's context comes from: fair sharing's if it is a baseline (the
        regime is stated as fair's busy share), else the first baseline's."""
        labels = [b.label for b in self.baselines]
        return "fair" if "fair" in labels else labels[0]

    @property
    def dimensions(self) -> tuple[Dimension, ...]:
        """Every dimension, grid first."""
        return self.grid + self.variations

    def dimension(self, name: str) -> Dimension:
        """The dimension called ``name``."""
        for d in self.dimensions:
            if d.name == name:
                return d
        raise KeyError(f"{self.key} has no dimension {name!r}")

    def reading(self, label: str) -> Reading:
        """The reading or baseline called ``label``."""
        for r in self.readings + self.baselines:
            if r.label == label:
                return r
        raise KeyError(f"{self.key} has no policy {label!r}")

    def settings(self, cell: Mapping[str, str]) -> dict[str, Any]:
        """The base settings with each of the cell's levels applied, in dimension order."""
        settings = dict(self.base)
        for d in self.dimensions:
            settings.update(d.level(cell[d.name]).settings)
        return settings

    def cells(self, quick: bool = False) -> list[dict[str, str]]:
        """Every cell of the map: the grid's product, for the report's variations and each
        other variation level alone."""

        def varied(d: Dimension) -> tuple[Level, ...]:
            return d.levels if d.quick or not quick else d.levels[:1]

        default = {d.name: d.levels[0].label for d in self.variations}
        variants = [default] + [{**default, d.name: level.label} for d in self.variations
                                for level in varied(d)[1:]]  # fmt: skip
        names = [d.name for d in self.grid]
        combos = list(itertools.product(*[[lv.label for lv in varied(d)] for d in self.grid]))
        return [{**dict(zip(names, combo, strict=True)), **v} for v in variants for combo in combos]

    def is_default_variant(self, cell: Mapping[str, str]) -> bool:
        """Whether every variation of ``cell`` is at its first level (a grid cell)."""
        return all(cell[d.name] == d.levels[0].label for d in self.variations)

    def policies_of(self, cell: Mapping[str, str]) -> list[Reading]:
        """What runs in ``cell``: every reading on grid cells, the default one elsewhere, and
        the baselines."""
        readings = self.readings if self.is_default_variant(cell) else self.readings[:1]
        return [*readings, *self.baselines]


def cell_key(cell: Mapping[str, str]) -> str:
    """A cell as one string (``dim=level, ...``), stable across runs."""
    return ", ".join(f"{k}={v}" for k, v in cell.items())


def points(claim: ClaimMap, cells: Iterable[Mapping[str, str]], seeds: Iterable[int]) -> list[dict]:
    """The sweep points of ``cells`` for ``seeds``: every policy of each cell on every seed."""
    seeds = list(seeds)
    return [
        {"claim": claim.key, "cell": dict(cell), "policy": reading.label, "seed": seed}
        for cell in cells for reading in claim.policies_of(cell) for seed in seeds
    ]  # fmt: skip


def with_policies(
    claim: ClaimMap, network: Sequence[str] = (), gpu: Sequence[str] = ()
) -> ClaimMap:
    """``claim`` with policies of the user's (names or ``package.module:Class``) as further
    readings: on the grid cells, against the same baselines, reported beside the paper's;
    network policies join the network claims, GPU policies the GPU claim."""
    refs = gpu if claim.kind == "gpu-hpo" else network
    known = {r.label for r in claim.readings + claim.baselines}
    extra = tuple(Reading(ref, ref, {}, "a policy given with --policy / --gpu-policy")
                  for ref in dict.fromkeys(refs) if ref not in known)  # fmt: skip
    return replace(claim, readings=claim.readings + extra) if extra else claim
