"""Optional realistic learning curves from the YAHPO Gym LCBench surrogate.

YAHPO Gym (Pfisterer et al., AutoML-Conf 2022) ships an ONNX surrogate of the LCBench learning
curves (Zimmer et al., 2021): for an OpenML task, an epoch (1..52) and a configuration of an MLP
(batch size, learning rate, momentum, weight decay, layers, units, dropout) it predicts the
validation accuracy. We run that model with ``onnxruntime`` directly, with the input encoding of
``yahpo_gym`` (integer-coded task, then the continuous parameters in a fixed order), so the
project does not need ``yahpo_gym`` and its ``numpy < 2`` dependencies. The surrogate files are
not part of this repository: point ``--yahpo`` (or :class:`LcBench`) at a folder holding
``lcbench/`` (``model.onnx``, ``encoding.json``, ``config_space.json``), e.g. ``../shared/yahpo``.
"""

from __future__ import annotations

import bisect
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# yahpo_gym's order of the continuous inputs of the LCBench surrogate
CONTINUOUS = (
    "epoch",
    "batch_size",
    "learning_rate",
    "momentum",
    "weight_decay",
    "num_layers",
    "max_units",
    "max_dropout",
)
OUTPUTS = (
    "time",
    "val_accuracy",
    "val_cross_entropy",
    "val_balanced_accuracy",
    "test_cross_entropy",
    "test_balanced_accuracy",
)
EPOCHS = 52


class YahpoError(Exception):
    """The surrogate cannot be used (files or onnxruntime missing, unknown task)."""


@dataclass(frozen=True)
class TabulatedCurve:
    """A learning curve given at epochs: accuracy after ``iterations`` interpolates linearly
    between epochs (``iterations_per_epoch`` each) and from 0 at iteration 0.

    Same interface as :class:`workloads.curves.LearningCurve` (``final_accuracy`` is the
    accuracy after the last epoch; ``tau_iterations`` the iterations to reach 63 % of it, for
    workers that only take a parametric curve).
    """

    epoch_accuracy: tuple[float, ...]
    iterations_per_epoch: float

    @property
    def final_accuracy(self) -> float:
        return self.epoch_accuracy[-1]

    @property
    def tau_iterations(self) -> float:
        return max(self.iterations_to(1.0 - math.exp(-1.0)), 1e-9)

    def accuracy(self, iterations: float) -> float:
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
        running = np.maximum.accumulate(np.asarray(self.epoch_accuracy))
        index = bisect.bisect_left(running.tolist(), target)
        if index >= len(self.epoch_accuracy):
            return math.inf
        before = 0.0 if index == 0 else self.epoch_accuracy[index - 1]
        after = self.epoch_accuracy[index]
        share = 1.0 if after <= before else (target - before) / (after - before)
        return (index + min(max(share, 0.0), 1.0)) * self.iterations_per_epoch


class LcBench:
    """The LCBench surrogate of a YAHPO Gym data folder.

    Args:
        folder: the folder holding ``lcbench/``.
        task: OpenML task id (a string, one of :attr:`tasks`).
    """

    def __init__(self, folder: Path | str, task: str = "3945") -> None:
        root = Path(folder) / "lcbench"
        missing = [
            name
            for name in ("model.onnx", "encoding.json", "config_space.json")
            if not (root / name).is_file()
        ]
        if missing:
            raise YahpoError(f"{root} has no {', '.join(missing)} (YAHPO Gym LCBench data)")
        try:
            import onnxruntime
        except ImportError as exc:  # pragma: no cover - it is in requirements.txt
            raise YahpoError(
                "the LCBench surrogate needs onnxruntime (pip install onnxruntime)"
            ) from exc
        self.encoding = json.loads((root / "encoding.json").read_text())["OpenML_task_id"]
        space = json.loads((root / "config_space.json").read_text())
        self.space = {h["name"]: h for h in space["hyperparameters"]}
        self.tasks = sorted(t for t in self.encoding if t != "#na#")
        if task not in self.encoding or task == "#na#":
            raise YahpoError(f"unknown OpenML task {task!r}; known: {', '.join(self.tasks)}")
        self.task = task
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(root / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = [i.name for i in self.session.get_inputs()]

    def sample_configs(self, rng: random.Random, n: int) -> list[dict]:
        """``n`` configurations drawn uniformly (log-uniformly where the space says so)."""
        configs = []
        for _ in range(n):
            config = {}
            for name in CONTINUOUS[1:]:
                h = self.space[name]
                low, high = float(h["lower"]), float(h["upper"])
                if h.get("log"):
                    value = math.exp(rng.uniform(math.log(low), math.log(high)))
                else:
                    value = rng.uniform(low, high)
                if h["type"] == "uniform_int":
                    value = int(round(min(max(value, low), high)))
                config[name] = value
            configs.append(config)
        return configs

    def predict(self, configs: list[dict], epochs: list[int]) -> np.ndarray:
        """Surrogate outputs (rows: every config x every epoch, columns: :data:`OUTPUTS`)."""
        rows = [
            [epoch, *(config[name] for name in CONTINUOUS[1:])]
            for config in configs
            for epoch in epochs
        ]
        x_cont = np.asarray(rows, dtype=np.float32)
        x_cat = np.full((len(rows), 1), self.encoding[self.task], dtype=np.int32)
        return self.session.run(None, {self._inputs[0]: x_cat, self._inputs[1]: x_cont})[0]

    def curves(
        self, rng: random.Random, n: int, iterations_per_epoch: float
    ) -> list[TabulatedCurve]:
        """Learning curves (validation accuracy in [0, 1] per epoch) of ``n`` sampled
        configurations, each epoch lasting ``iterations_per_epoch`` training iterations."""
        if iterations_per_epoch <= 0:
            raise ValueError("iterations_per_epoch must be > 0")
        configs = self.sample_configs(rng, n)
        out = self.predict(configs, list(range(1, EPOCHS + 1)))
        accuracy = np.clip(out[:, OUTPUTS.index("val_accuracy")] / 100.0, 0.0, 1.0)
        return [
            TabulatedCurve(
                tuple(float(a) for a in accuracy[i * EPOCHS : (i + 1) * EPOCHS]),
                iterations_per_epoch,
            )
            for i in range(n)
        ]
