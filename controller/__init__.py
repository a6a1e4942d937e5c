"""Network scheduling for HPO clusters: the pure scheduling core and the Ryu app.

Every module but ``ryu_app`` imports no Ryu (``model``, ``bssi``, ``policies``, ``schedule``,
``bounds``, ``rules``, ``switching``, ``engine``, ``api``, ...), so the simulator and the tests
use them without a switch. The modules with kernels point numba's cache at the sources'
directory as they are imported (:mod:`controller.kernel_cache`).
"""
