"""Learning curves of HPO configurations: seeded, with a few good configurations that converge
fast early (the observation Hermes relies on).

A parametric curve is ``accuracy(i) = final * (1 - exp(-i / tau))``: ``final`` is the converged
accuracy, ``tau`` the iterations to reach 63 % of it; 90 % is reached at ``tau * ln 10``
iterations. A tabulated curve (e.g. from the YAHPO LCBench surrogate, :mod:`workloads.yahpo`)
interpolates accuracies given per epoch. Both travel as JSON (:func:`curve_to_json`,
:func:`curve_from_json`), so a testbed worker evaluates the very curve the simulator does.
No numpy here: 27 workers starting at once each import this module.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class LearningCurve:
    """Accuracy as a function of completed iterations."""

    final_accuracy: float
    tau_iterations: float

    def accuracy(self, iterations: float) -> float:
        """Accuracy after ``iterations`` iterations."""
        return self.final_accuracy * (1.0 - math.exp(-iterations / self.tau_iterations))

    def iterations_to(self, fraction: float) -> float:
        """Iterations needed to reach ``fraction`` (< 1) of the converged accuracy."""
        if not 0 < fraction < 1:
            raise ValueError("fraction must be in (0, 1)")
        return -self.tau_iterations * math.log(1.0 - fraction)


@dataclass(frozen=True)
class TabulatedCurve:
    """A learning curve given at epochs: accuracy after ``iterations`` interpolates linearly
    between epochs (``iterations_per_epoch`` each) and from 0 at iteration 0.

    Same interface as :class:`LearningCurve` (``final_accuracy`` is the accuracy after the last
    epoch; ``tau_iterations`` the iterations to reach 63 % of it).
    """

    epoch_accuracy: tuple[float, ...]
    iterations_per_epoch: float

    @property
    def final_accuracy(self) -> float:
        """Accuracy at the last tabulated epoch."""
        return self.epoch_accuracy[-1]

    @property
    def tau_iterations(self) -> float:
        """Iterations to reach 1 - 1/e of the final accuracy (the parametric curves' time
        constant)."""
        return max(self.iterations_to(1.0 - math.exp(-1.0)), 1e-9)

    def accuracy(self, iterations: float) -> float:
        """Accuracy after ``iterations`` iterations, interpolated between epochs."""
        epoch = iterations / self.iterations_per_epoch
        if epoch <= 0:
            return 0.0
        if epoch >= len(self.epoch_accuracy):
            return self.epoch_accuracy[-1]
        low = int(epoch)
        before = 0.0 if low == 0 else self.epoch_accuracy[low - 1]
        return before + (epoch - low) * (self.epoch_accuracy[low] - before)

    def iterations_to(self, fraction: float) -> float:
        """Iterations until the accuracy first reaches ``fraction`` of the final accuracy
        (``inf`` if the curve never gets there before its last epoch)."""
        if not 0 < fraction < 1:
            raise ValueError("fraction must be in (0, 1)")
        target = fraction * self.final_accuracy
        running = list(itertools.accumulate(self.epoch_accuracy, max))
        index = bisect.bisect_left(running, target)
        if index >= len(self.epoch_accuracy):
            return math.inf
        before = 0.0 if index == 0 else self.epoch_accuracy[index - 1]
        after = self.epoch_accuracy[index]
        share = 1.0 if after <= before else (target - before) / (after - before)
        return (index + min(max(share, 0.0), 1.0)) * self.iterations_per_epoch


Curve = LearningCurve | TabulatedCurve


def curve_to_json(curve: Curve) -> str:
    """One line of JSON that :func:`curve_from_json` turns back into an equal curve."""
    if isinstance(curve, TabulatedCurve):
        data = {
            "epoch_accuracy": list(curve.epoch_accuracy),
            "iterations_per_epoch": curve.iterations_per_epoch,
        }
    else:
        data = {"final_accuracy": curve.final_accuracy, "tau_iterations": curve.tau_iterations}
    return json.dumps(data)


def curve_from_json(text: str) -> Curve:
    """The curve :func:`curve_to_json` wrote; ``ValueError`` naming what is wrong otherwise."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"a curve must be JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("a curve must be a JSON object")
    try:
        if "epoch_accuracy" in data:
            accuracy = tuple(float(a) for a in data["epoch_accuracy"])
            per_epoch = float(data["iterations_per_epoch"])
            if not accuracy or not per_epoch > 0:
                raise ValueError("needs epoch accuracies and iterations_per_epoch > 0")
            return TabulatedCurve(accuracy, per_epoch)
        final, tau = float(data["final_accuracy"]), float(data["tau_iterations"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"a curve needs final_accuracy and tau_iterations: {exc}") from None
    if not tau > 0:
        raise ValueError("a curve's tau_iterations must be > 0")
    return LearningCurve(final, tau)


def sample_curves(
    rng: random.Random, n: int, good_fraction: float = 0.2, base_tau: float = 200.0
) -> list[LearningCurve]:
    """``n`` curves: about ``good_fraction`` good ones (high accuracy, fast), the rest poor."""
    curves = []
    for _ in range(n):
        if rng.random() < good_fraction:
            final, tau = rng.uniform(0.85, 0.95), base_tau * rng.uniform(0.3, 0.8)
        else:
            final, tau = rng.uniform(0.4, 0.8), base_tau * rng.uniform(0.8, 2.0)
        curves.append(LearningCurve(final, tau))
    return curves
