"""The flow-level simulator: the compiled core (:mod:`simulator.core`), the engine that drives it
(:mod:`simulator.engine`), workloads, traces and metrics.

Numba caches each compiled kernel beside its source and checks only that file's date: a kernel
that calls a kernel of another file (the step loop calls :mod:`simulator.allocation` and
:mod:`simulator.greedy`) would keep the old callee after an edit of that file alone. So the
kernels' cache lives in a directory named after a hash of every simulator source: any edit
compiles them afresh, and an unchanged checkout reuses them.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def _use_source_keyed_cache() -> None:
    import numba

    here = Path(__file__).resolve().parent
    digest = hashlib.sha1()
    for source in sorted(here.glob("*.py")):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    base = os.environ.get("NUMBA_CACHE_DIR") or str(here / "__pycache__")
    numba.config.CACHE_DIR = str(Path(base) / f"kernels-{digest.hexdigest()[:12]}")


_use_source_keyed_cache()
