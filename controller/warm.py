"""Load the compiled kernels the controller's policies call, before the first reorder needs them.

numba compiles a kernel the first time a machine runs it (seconds for Beamer's stage kernel)
and loads it from its on-disk cache afterwards (milliseconds, once per process). Either would
otherwise happen inside the first reorder that reaches the kernel, while the controller's only
event loop waits. :func:`warm_up` reorders a tiny registry under every policy and every
combination of its boolean and choice options instead: ``python -m controller`` calls it
before it serves, and ``scripts/setup.sh`` once, so that a fresh set-up does not compile on
the first request.
"""

from __future__ import annotations

from itertools import product

from controller.engine import Engine
from controller.kernel_cache import warm_once
from controller.policies import POLICIES, Policy
from controller.registry import Registry

HOSTS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


def _tiny_registry() -> Registry:
    """Two stages of jobs with TCP ports and a coflow of each job on three hosts (every coflow
    with a job in a stage: Beamer's path by stage)."""
    registry = Registry(":memory:")
    for stage in (1, 2):
        registry.put("stages", stage, {})
    for job, (src, dst) in enumerate(((0, 1), (0, 2), (1, 2)), start=1):
        registry.put("jobs", job, {"stage_id": 1 + job // 3, "tcp_ports": [5000 + job],
                                   "iteration_budget": 5})  # fmt: skip
        flow = {"src": HOSTS[src], "dst": HOSTS[dst], "bytes": 1e5 * job}
        registry.put("coflows", job, {"flows": [flow], "job_id": job})
    return registry


def option_combinations(policy: type[Policy]) -> list[dict]:
    """Every combination of a policy's boolean options (false, true) and choice options (each
    of its choices, the readings of :class:`~controller.policies.Jpas` and
    :class:`~controller.policies.Beamer`); its other options at their defaults."""
    listed = {key: (False, True) if spec.kind is bool else spec.choices
              for key, spec in policy.OPTIONS.items() if spec.kind in (bool, str)}  # fmt: skip
    return [dict(zip(listed, values, strict=True)) for values in product(*listed.values())]


def warm_up(stream=None) -> float:
    """Reorder a tiny registry under every policy and boolean or choice option, once per
    process, so that the kernels are loaded (compiled the first time on a machine; says so on
    ``stream``, default stderr). Returns the seconds it took (0 once warm)."""
    from controller.stage_loads import job_stage_order

    steps = [(name, lambda name=name: _reorders(name)) for name in POLICIES]
    return warm_once("controller", job_stage_order, steps, stream,
                     kernels="stage loads, BSSI and the policies' orders")  # fmt: skip


def _reorders(name: str) -> None:
    """Policy ``name`` with every boolean or choice option, on coflows of jobs in stages and
    then with a coflow without a job besides them (Beamer's general path)."""
    registry = _tiny_registry()
    jobless = {"flows": [{"src": HOSTS[2], "dst": HOSTS[0], "bytes": 4e5}]}
    policy = POLICIES[name]
    try:
        for with_jobless in (False, True):
            if with_jobless:
                registry.put("coflows", 4, jobless)
            for options in option_combinations(policy):
                Engine(registry, policy=name, policy_options=options).reorder()
    finally:
        registry.close()
