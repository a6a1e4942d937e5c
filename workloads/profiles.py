"""Model communication/compute profiles and the one scale factor that maps them to a testbed.

Bytes per synchronisation are the model's parameters x 4 B (fp32); compute is the time of one
training iteration on one GPU (batch 64, synthetic data), from public benchmarks (see
DESIGN.md section 5). Scaling bytes and compute time by the *same* factor keeps the
real compute/communication ratio when the link rate is scaled down by it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelProfile:
    """One model's per-iteration cost.

    Args:
        name: model name.
        params_millions: trainable parameters, in millions.
        compute_s: compute time of one iteration on one GPU (P100 unless noted).
    """

    name: str
    params_millions: float
    compute_s: float

    @property
    def sync_bytes(self) -> float:
        """Bytes of one gradient/model exchange: parameters x 4 B."""
        return self.params_millions * 1e6 * 4

    def scaled(self, factor: float) -> ModelProfile:
        """The profile with bytes and compute both divided by ``factor`` (factor > 1 shrinks).

        Dividing the link rate by the same factor keeps every ratio of the real cluster.
        """
        if factor <= 0:
            raise ValueError("factor must be > 0")
        return replace(
            self, params_millions=self.params_millions / factor, compute_s=self.compute_s / factor
        )

    def with_bytes_divided_by(self, factor: float) -> ModelProfile:
        """The profile with only its bytes divided by ``factor``: what a link ``factor`` times
        slower than the real one carries in the real communication time."""
        if factor <= 0:
            raise ValueError("factor must be > 0")
        return replace(self, params_millions=self.params_millions / factor)


PROFILES: dict[str, ModelProfile] = {
    p.name: p
    for p in (
        ModelProfile("resnet50", 25.6, 0.29),
        ModelProfile("vgg16", 138.0, 0.42),
        ModelProfile("alexnet", 61.0, 0.10),
        ModelProfile("inception3", 23.8, 0.45),
        ModelProfile("resnet152", 60.0, 0.70),
        ModelProfile("bert-base", 110.0, 0.60),
    )
}
