"""Network scheduling for HPO clusters: the pure scheduling core and the Ryu app.

The core modules (``model``, ``bssi``, ``policies``, ``schedule``, ``bounds``, ``fluid``) import
no Ryu, so the simulator and the tests use them without a switch.
"""
