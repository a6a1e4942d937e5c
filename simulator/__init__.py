"""The flow-level simulator: the compiled core (:mod:`simulator.core`), the engine that drives it
(:mod:`simulator.engine`), workloads, traces and metrics.

Its kernels, and the controller's it runs, are cached in one directory named after every source
of both packages (:mod:`controller.kernel_cache`), set when the first module with kernels is
imported.
"""
