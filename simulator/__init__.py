"""The flow-level simulator: the compiled core (:mod:`simulator.core`), the engine that drives it
(:mod:`simulator.engine`), workloads, traces and metrics.

Its kernels, and the controller's it runs, are cached in one directory named after every source
of both packages (:mod:`controller.kernel_cache`), set when ``controller`` is imported (which
importing this package does).
"""

from __future__ import annotations

from controller.kernel_cache import use_source_keyed_cache

use_source_keyed_cache()
