"""Network scheduling for HPO clusters: the pure scheduling core and the Ryu app.

Every module but ``ryu_app`` imports no Ryu (``model``, ``bssi``, ``policies``, ``schedule``,
``bounds``, ``rules``, ``switching``, ``engine``, ``api``, ...), so the simulator and the tests
use them without a switch.
"""

from controller.kernel_cache import use_source_keyed_cache

use_source_keyed_cache()
