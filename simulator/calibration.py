"""The testbed's systematic overheads, measured once and modelled the same for every policy.

The simulator is a fluid model: a job computes the moment it starts and its bytes move at the
line rate the policy gives them. The testbed pays two costs the model does not have, neither
of which depends on the scheduling policy:

- **job start-up**: launching a job's worker processes and connecting them (Python start-up and
  imports on 2 cores, TCP handshakes) before its first iteration;
- **goodput**: the link carries headers (Ethernet, IP, TCP: 66 of every 1514 bytes) and the
  reverse direction's ACKs, and every synchronisation's TCP transfers ramp up again; the
  payload rate a lone job reaches is a fraction of the emulated line rate.

``hpo-calibrate`` measures both on the testbed with workloads in which no scheduling
decision matters (a lone job; one burst of jobs started together) and writes them as
``calibration.json``; the simulator then runs with ``job_startup_s`` and a fabric of
``goodput x`` the line rate. Two parameters, the same for every policy; nothing is fitted to a
policy's result.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Overheads:
    """Measured testbed overheads (see the module docstring).

    Args:
        job_startup_s: seconds from a job's start until its workers compute.
        goodput: the payload rate a lone job reaches over the line rate, in (0, 1].
    """

    job_startup_s: float = 0.0
    goodput: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.job_startup_s) and self.job_startup_s >= 0):
            raise ValueError(
                f"job_startup_s must be a finite number >= 0, not {self.job_startup_s}"
            )
        if not (math.isfinite(self.goodput) and 0 < self.goodput <= 1):
            raise ValueError(f"goodput must be in (0, 1], not {self.goodput}")

    @classmethod
    def load(cls, path: Path) -> Overheads:
        """Read the ``overheads`` of a ``calibration.json``; a clear ``ValueError`` if it is not
        one."""
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc})") from None
        entry = data.get("overheads") if isinstance(data, dict) else None
        if not isinstance(entry, dict) or set(entry) != {"job_startup_s", "goodput"}:
            raise ValueError('expected {"overheads": {"job_startup_s": ..., "goodput": ...}}')
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in entry.values()):
            raise ValueError("job_startup_s and goodput must be numbers")
        return cls(float(entry["job_startup_s"]), float(entry["goodput"]))

    def to_json(self) -> dict:
        """The overheads as a JSON object (for ``summary.json``)."""
        return asdict(self)
