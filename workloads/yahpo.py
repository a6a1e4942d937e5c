"""Optional realistic learning curves from the YAHPO Gym LCBench surrogate.

YAHPO Gym (Pfisterer et al., AutoML-Conf 2022) ships an ONNX surrogate of the LCBench learning
curves (Zimmer et al., 2021): for an OpenML task, an epoch (1..52) and a configuration of an MLP
(batch size, learning rate, momentum, weight decay, layers, units, dropout) it predicts the
validation accuracy. We run that model with ``onnxruntime`` directly, with the input encoding of
``yahpo_gym`` (integer-coded task, then the continuous parameters in a fixed order), so the
project does not need ``yahpo_gym`` and its ``numpy < 2`` dependencies. The surrogate files
ship with the package (:func:`netsched_data.yahpo`, Apache-2.0): :class:`LcBench` uses them by
default, and ``--yahpo`` without a folder (or ``--yahpo bundled``); another copy is a folder
holding ``lcbench/`` (``model.onnx``, ``encoding.json``, ``config_space.json``).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np

from netsched_data import find_yahpo
from workloads.curves import TabulatedCurve

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


class LcBench:
    """The LCBench surrogate of a YAHPO Gym data folder.

    Args:
        folder: the folder holding ``lcbench/``; ``None`` or ``"bundled"``
            (:data:`netsched_data.BUNDLED`): the one bundled with the package.
        task: OpenML task id (a string, one of :attr:`tasks`).
    """

    def __init__(self, folder: Path | str | None = None, task: str = "3945") -> None:
        root = find_yahpo(folder) / "lcbench"
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
