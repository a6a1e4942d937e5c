"""Bottleneck-Select-Scale-Iterate (BSSI), the ordering at the heart of Sincronia and Beamer.

Sincronia (Agarwal et al., SIGCOMM 2018) orders coflows so that any order-preserving,
work-conserving rate allocation is within 4x of the optimal average weighted coflow completion
time (zero release times). Beamer applies the same primal-dual idea to HPO stages.

The algorithm over items k (coflows or stages) with demand ``v[k][p]`` on port p (in seconds of
port time) and weights ``w[k]``: repeatedly take the most loaded port ``b`` over the unordered
items; among those with ``v[k][b] > 0`` put ``s = argmin w[k] / v[k][b]`` *last* among the
unplaced positions and scale the others' weights ``w[k] -= w[s] * v[k][b] / v[s][b]``. Items with
no demand left on any loaded port go first.

The implementation keeps the demand matrix sparse (column and row views as numpy arrays) and the
port loads incremental, so one step costs the size of one port's column, not items x ports.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

# Loads below this many seconds are rounding residue of the incremental updates.
_EPS_S = 1e-12


def bssi_order(
    demands: Sequence[Mapping[Hashable, float]],
    weights: Sequence[float] | None = None,
) -> list[int]:
    """Order items with BSSI.

    Args:
        demands: for each item, its demand per port (any hashable port key), in a common unit
            (seconds of port time when capacities differ). Zero or negative entries are ignored.
        weights: positive weight per item; 1 for every item when omitted.

    Returns:
        Item indices, most urgent first. Ties (equal ``w/v`` on the bottleneck) put the item with
        the higher index last, so listing items in arrival order makes ties first-come first.
    """
    n = len(demands)
    if weights is None:
        w = np.ones(n)
    else:
        if len(weights) != n:
            raise ValueError(f"{len(weights)} weights for {n} items")
        w = np.asarray(weights, dtype=float).copy()
        if n and w.min() <= 0:
            raise ValueError("weights must be > 0")
    if n == 0:
        return []

    port_index: dict[Hashable, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for k, demand in enumerate(demands):
        for port, value in demand.items():
            if value > 0:
                rows.append(k)
                cols.append(port_index.setdefault(port, len(port_index)))
                vals.append(value)
    row_arr = np.asarray(rows, dtype=np.int64)
    col_arr = np.asarray(cols, dtype=np.int64)
    val_arr = np.asarray(vals, dtype=float)
    n_ports = len(port_index)

    # Column view: for each port, the items that use it and their demands.
    by_col = np.argsort(col_arr, kind="stable")
    col_items = row_arr[by_col]
    col_vals = val_arr[by_col]
    col_ptr = np.zeros(n_ports + 1, dtype=np.int64)
    np.cumsum(np.bincount(col_arr, minlength=n_ports), out=col_ptr[1:])
    # Row view: for each item, the ports it uses (rows were appended in item order).
    row_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_arr, minlength=n), out=row_ptr[1:])

    load = np.bincount(col_arr, weights=val_arr, minlength=n_ports).astype(float)
    alive = np.ones(n, dtype=bool)
    placed_last: list[int] = []

    while True:
        b = int(np.argmax(load)) if n_ports else 0
        if n_ports == 0 or load[b] <= _EPS_S:
            break
        lo, hi = col_ptr[b], col_ptr[b + 1]
        items = col_items[lo:hi]
        mask = alive[items]
        if not mask.any():
            load[b] = 0.0  # only rounding residue was left on this port
            continue
        items = items[mask]
        vals_b = col_vals[lo:hi][mask]
        ratio = w[items] / vals_b
        best = ratio.min()
        # Among ties, the latest item goes last (earlier arrivals are served first).
        tied = np.flatnonzero(ratio <= best + abs(best) * 1e-9)
        pick = tied[np.argmax(items[tied])]
        sigma = int(items[pick])
        # scaled weights stay >= 0 in exact arithmetic; clip the rounding error
        w[items] = np.maximum(w[items] - w[sigma] * vals_b / vals_b[pick], 0.0)
        alive[sigma] = False
        placed_last.append(sigma)
        s_lo, s_hi = row_ptr[sigma], row_ptr[sigma + 1]
        load[col_arr[s_lo:s_hi]] -= val_arr[s_lo:s_hi]  # an item uses each port once

    first = [int(k) for k in np.flatnonzero(alive)]
    return first + placed_last[::-1]
