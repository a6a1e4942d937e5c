"""Learning curves of HPO configurations: seeded, with a few good configurations that converge
fast early (the observation Hermes relies on).

A curve is ``accuracy(i) = final * (1 - exp(-i / tau))``: ``final`` is the converged accuracy,
``tau`` the iterations to reach 63 % of it; 90 % is reached at ``tau * ln 10`` iterations.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class LearningCurve:
    """Accuracy as a function of completed iterations."""

    final_accuracy: float
    tau_iterations: float

    def accuracy(self, iterations: float) -> float:
        return self.final_accuracy * (1.0 - math.exp(-iterations / self.tau_iterations))

    def iterations_to(self, fraction: float) -> float:
        """Iterations needed to reach ``fraction`` (< 1) of the converged accuracy."""
        if not 0 < fraction < 1:
            raise ValueError("fraction must be in (0, 1)")
        return -self.tau_iterations * math.log(1.0 - fraction)


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
