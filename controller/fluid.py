"""Reference fluid schedule: coflows served in strict priority order on a big switch.

Given a total order of coflows, every flow gets, in order, the minimum of the capacity left at
its source's egress port and its destination's ingress port (optionally capped by a rate from the
policy). This is the greedy, order-preserving and work-conserving allocation under which
Sincronia's 4x guarantee holds, and the "ideal" mode of the simulator. It is exact but simple
(every event re-allocates every active flow), meant for checks on small instances.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from controller.model import ClusterState, CoflowId, FlowKey, Port, egress, ingress

_REL_EPS = 1e-9


def greedy_completion_times(
    state: ClusterState,
    order: Sequence[CoflowId],
    releases: bool = True,
    flow_rates_bps: Mapping[FlowKey, float] | None = None,
) -> dict[CoflowId, float]:
    """Completion time of each coflow of ``order`` served in strict priority.

    Args:
        state: the coflows (``remaining_bytes`` of their flows is the work) and port capacities.
        order: coflow ids, most urgent first; every coflow to schedule appears once.
        releases: honour ``arrival_s`` (else every coflow is released at ``state.now_s``).
        flow_rates_bps: optional rate cap per ``(coflow_id, flow_id)``.

    Returns:
        Absolute completion time per coflow id (a coflow with nothing to send completes on
        release).
    """
    if len(set(order)) != len(order):
        raise ValueError("order lists a coflow twice")
    caps = flow_rates_bps or {}
    flows = []  # [priority, release_s, src_port, dst_port, remaining_bits, cap, coflow_id]
    done_at: dict[CoflowId, float] = {}
    for position, coflow_id in enumerate(order):
        coflow = state.coflows[coflow_id]
        release = max(coflow.arrival_s, state.now_s) if releases else state.now_s
        done_at[coflow_id] = release
        for flow in coflow.flows:
            if flow.remaining_bytes > 0:
                cap = caps.get((coflow_id, flow.flow_id), math.inf)
                flows.append(
                    [
                        position,
                        release,
                        egress(flow.src),
                        ingress(flow.dst),
                        8.0 * flow.remaining_bytes,
                        cap,
                        coflow_id,
                    ]
                )
    flows.sort(key=lambda f: (f[0], f[1]))
    now = state.now_s
    pending = sorted(flows, key=lambda f: f[1])
    active: list[list] = []
    while pending or active:
        while pending and pending[0][1] <= now:
            active.append(pending.pop(0))
        if not active:
            now = pending[0][1]
            continue
        active.sort(key=lambda f: f[0])
        residual: dict[Port, float] = {}
        rates = []
        for flow in active:
            src_left = residual.get(flow[2], state.port_bps(flow[2]))
            dst_left = residual.get(flow[3], state.port_bps(flow[3]))
            rate = max(0.0, min(src_left, dst_left, flow[5]))
            residual[flow[2]] = src_left - rate
            residual[flow[3]] = dst_left - rate
            rates.append(rate)
        step = min(
            (f[4] / r for f, r in zip(active, rates, strict=True) if r > 0), default=math.inf
        )
        if pending:
            step = min(step, pending[0][1] - now)
        if not math.isfinite(step):
            raise ValueError("flows can never finish: a port or rate cap is zero")
        now += step
        still = []
        for flow, rate in zip(active, rates, strict=True):
            flow[4] -= rate * step
            if flow[4] <= _REL_EPS * max(1.0, rate * step):
                done_at[flow[6]] = max(done_at[flow[6]], now)
            else:
                still.append(flow)
        active = still
    return done_at


def weighted_completion(
    state: ClusterState, completion_s: Mapping[CoflowId, float], releases: bool = False
) -> float:
    """Sum of ``weight x completion time`` (measured from arrival when ``releases``)."""
    total = 0.0
    for coflow_id, done in completion_s.items():
        coflow = state.coflows[coflow_id]
        start = coflow.arrival_s if releases else state.now_s
        total += coflow.weight * (done - start)
    return total
