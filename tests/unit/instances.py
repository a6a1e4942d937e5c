"""Small instance builders and brute-force optima shared by the unit tests (they live in
:mod:`simulator.reference`, which the reproduction report uses too)."""

from simulator.reference import (  # noqa: F401
    BYTE_PER_S,
    brute_force_best,
    order_value,
    random_coflows,
    stage_completion_sum,
    stage_instance,
    state_of,
)
