"""Varys' bottlenecks and MADD times from the coflows' loads as sparse arrays, compiled.

Varys (Chowdhury et al., SIGCOMM 2014) orders coflows by their bottleneck time (smallest
effective bottleneck first) and gives each, in that order, the rates that finish all its flows
together at its bottleneck time on what its predecessors left (Minimum Allocation for Desired
Duration). These kernels do it on a :class:`~controller.model.SparsePortBytes` (a row's
entries are the coflow's :meth:`~controller.model.Coflow.port_bytes` items in the same order)
with the arithmetic of one mapping per coflow (:mod:`simulator.reference`'s Varys, the tests'
oracle), so the results are the same bit for bit.
"""

from __future__ import annotations

import numpy as np

from controller.kernel_cache import njit

# A port whose residual is at most this fraction of its capacity is full.
_FULL = 1e-9
# Bottleneck times (s) within a nanosecond tie: equal bottlenecks must tie (and go by arrival)
# whatever the float noise in the bytes left (a last-bit difference flipped two equal coflows
# of an HPO workload, and the runs went apart from there).
TIE_DIGITS = 9


@njit(cache=True)
def sparse_bottlenecks_s(row_ptr, column, size_bytes, rows, column_bps):
    # pragma: no cover - compiled
    """Each of ``rows``' bottleneck time: ``max(8 * bytes / bps)`` over its ports, 0 without
    load (:func:`controller.model.bottleneck_s`)."""
    out = np.zeros(rows.shape[0])
    for i in range(rows.shape[0]):
        r = rows[i]
        worst = 0.0
        for j in range(row_ptr[r], row_ptr[r + 1]):
            worst = max(worst, 8.0 * size_bytes[j] / column_bps[column[j]])
        out[i] = worst
    return out


@njit(cache=True)
def sebf_order(row_ptr, column, size_bytes, rows, column_bps):  # pragma: no cover - compiled
    """Smallest effective bottleneck first: the positions of ``rows`` by their bottleneck
    time (:func:`sparse_bottlenecks_s`) rounded to :data:`TIE_DIGITS` decimals, ties in the
    given order (a stable sort), as ``np.argsort(np.round(gamma, TIE_DIGITS), kind="stable")``
    gives them."""
    gamma = sparse_bottlenecks_s(row_ptr, column, size_bytes, rows, column_bps)
    for i in range(gamma.shape[0]):
        gamma[i] = np.round(gamma[i], TIE_DIGITS)
    return np.argsort(gamma, kind="mergesort")


@njit(cache=True)
def sparse_madd_s(row_ptr, column, size_bytes, order, column_bps):  # pragma: no cover - compiled
    """MADD along ``order`` (rows, most urgent first): each row's time Gamma on the capacity
    its predecessors left, 0 where it gets no cap (no load, or a port with nothing left)."""
    residual = column_bps.copy()
    out = np.zeros(order.shape[0])
    for i in range(order.shape[0]):
        r = order[i]
        lo, hi = row_ptr[r], row_ptr[r + 1]
        if lo == hi:
            continue
        gamma_s = 0.0
        for j in range(lo, hi):
            capacity = residual[column[j]]
            if capacity <= _FULL * column_bps[column[j]]:
                gamma_s = np.inf
                break
            gamma_s = max(gamma_s, 8.0 * size_bytes[j] / capacity)
        if not np.isfinite(gamma_s) or gamma_s <= 0:
            continue
        out[i] = gamma_s
        for j in range(lo, hi):
            residual[column[j]] = max(0.0, residual[column[j]] - 8.0 * size_bytes[j] / gamma_s)
    return out
