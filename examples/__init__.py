"""Policies of one's own, as a user writes them: each file is a template to copy.

``smallest_first`` is a network policy (``--policy examples.smallest_first:SmallestFirst``),
``shortest_remaining`` a GPU policy (``--gpu-policy
examples.shortest_remaining:ShortestRemaining``). The folder is importable when a command runs
from the checkout; it is not part of the installed package (a top-level ``examples`` package in
site-packages would clash with any other distribution's): copy a file next to your work, or into
a package of your own, and name it the same way.
"""
