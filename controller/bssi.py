"""Bottleneck-Select-Scale-Iterate (BSSI), the ordering at the heart of Sincronia and Beamer.

Sincronia (Agarwal et al., SIGCOMM 2018) orders coflows so that any order-preserving,
work-conserving rate allocation is within 4x of the optimal average weighted coflow completion
time (zero release times). Beamer applies the same primal-dual idea to HPO stages.

The algorithm over items k (coflows or stages) with demand ``v[k][p]`` on port p (in seconds of
port time) and weights ``w[k]``: repeatedly take the most loaded port ``b`` over the unordered
items; among those with ``v[k][b] > 0`` put ``s = argmin w[k] / v[k][b]`` *last* among the
unplaced positions and scale the others' weights ``w[k] -= w[s] * v[k][b] / v[s][b]``. Items with
no demand left on any loaded port go first.

The demands travel as a sparse item x port matrix (:class:`DemandMatrix`, rows in item order)
and the loop is one compiled kernel with incremental port loads and a tournament tree that
holds the most loaded port, so one step costs the size of one port's column plus one item's
row times the tree's depth, not items x ports, and no Python runs per item. Callers
that hold their loads in arrays (the simulator) build the matrix without a dict per item.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from controller.kernel_cache import njit

# Loads below this many seconds are rounding residue of the incremental updates.
_EPS_S = 1e-12
# What the kernel makes of a demand or weight that is not a finite positive number (an input
# the callers' checks let through): demands are held in [_TINY, _CAP / entries] and weights in
# [0, _CAP], so every port's load is a finite sum and no step makes a NaN.
_CAP = 1e300
_TINY = 2.2250738585072014e-308  # the smallest normal double
# Ratios within this relative distance of the smallest count as tied.
_TIE_REL = 1e-9


@dataclass(frozen=True)
class DemandMatrix:
    """Demands of items on ports, in compressed sparse rows.

    Item k's demands are ``seconds[row_ptr[k]:row_ptr[k + 1]]`` on ports
    ``port[row_ptr[k]:row_ptr[k + 1]]`` (each port at most once per item, every value > 0).
    Ports are numbered ``0 .. n_ports - 1`` in the order of their first use, reading the rows
    from the first item on: BSSI breaks a tie between equally loaded ports by that number, so
    the numbering keeps the order independent of how the caller names its ports.

    Args:
        row_ptr: ``n_items + 1`` offsets into ``port`` and ``seconds``.
        port: the port of each entry.
        seconds: the demand of each entry, in seconds of port time.
        n_ports: ports used.
    """

    row_ptr: np.ndarray
    port: np.ndarray
    seconds: np.ndarray
    n_ports: int

    @property
    def n_items(self) -> int:
        """Items (rows), including those without demand."""
        return len(self.row_ptr) - 1

    @classmethod
    def from_mappings(cls, demands: Sequence[Mapping[Hashable, float]]) -> DemandMatrix:
        """The matrix of one mapping per item (any hashable port key; entries <= 0 dropped)."""
        counts = np.zeros(len(demands) + 1, dtype=np.int64)
        counts[1:] = [len(d) for d in demands]
        row_ptr = np.cumsum(counts)
        seconds = np.fromiter(chain.from_iterable(d.values() for d in demands), float, row_ptr[-1])
        if not np.all(seconds > 0):
            return cls.from_mappings([{p: v for p, v in d.items() if v > 0} for d in demands])
        # ports numbered by first use: a dict keeps its keys in insertion order
        number = {port: i for i, port in enumerate(dict.fromkeys(chain.from_iterable(demands)))}
        ports = np.fromiter(map(number.__getitem__, chain.from_iterable(demands)), np.int64,
                            row_ptr[-1])  # fmt: skip
        return cls(row_ptr, ports, seconds, len(number))

    @classmethod
    def from_dense(cls, seconds: np.ndarray) -> DemandMatrix:
        """The matrix of a dense items x ports array (columns in their natural order; entries
        <= 0 dropped). Gives the same matrix as :meth:`from_mappings` on mappings that list
        each item's ports in column order."""
        seconds = np.asarray(seconds, dtype=float)
        n_items = seconds.shape[0]
        rows, columns = np.nonzero(seconds > 0)  # row-major: by item, then by column
        counts = np.zeros(n_items + 1, dtype=np.int64)
        counts[1:] = np.bincount(rows, minlength=n_items)
        used, first_use, column_index = np.unique(columns, return_index=True, return_inverse=True)
        number = np.empty(len(used), dtype=np.int64)
        number[np.argsort(first_use, kind="stable")] = np.arange(len(used))
        return cls(
            np.cumsum(counts),
            number[column_index].astype(np.int64),
            seconds[rows, columns],
            len(used),
        )


def bssi_order(
    demands: Sequence[Mapping[Hashable, float]] | DemandMatrix,
    weights: Sequence[float] | None = None,
) -> list[int]:
    """Order items with BSSI.

    Args:
        demands: for each item, its demand per port (any hashable port key), in a common unit
            (seconds of port time when capacities differ); zero or negative entries are
            ignored. Or the same as a :class:`DemandMatrix`.
        weights: positive weight per item; 1 for every item when omitted.

    Returns:
        Item indices, most urgent first. Ties (equal ``w/v`` on the bottleneck) put the item with
        the higher index last, so listing items in arrival order makes ties first-come first.
    """
    return bssi_positions(demands, weights).tolist()


def bssi_positions(
    demands: Sequence[Mapping[Hashable, float]] | DemandMatrix,
    weights: Sequence[float] | np.ndarray | None = None,
) -> np.ndarray:
    """:func:`bssi_order` as an int64 array (for callers that index arrays with it)."""
    matrix = demands if isinstance(demands, DemandMatrix) else DemandMatrix.from_mappings(demands)
    n = matrix.n_items
    if weights is None:
        w = np.ones(n)
    else:
        if len(weights) != n:
            raise ValueError(f"{len(weights)} weights for {n} items")
        w = np.array(weights, dtype=float)
        if n and not w.min() > 0:
            raise ValueError("weights must be > 0")
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    return _bssi(matrix.row_ptr, matrix.port, matrix.seconds, matrix.n_ports, w)


@njit(cache=True)
def _bssi(row_ptr, port, seconds, n_ports, w):  # pragma: no cover - compiled
    """BSSI's loop on a :class:`DemandMatrix`'s arrays; scales ``w`` in place.

    Args:
        row_ptr: offsets of each item's entries.
        port: each entry's port number.
        seconds: each entry's demand.
        n_ports: ports used.
        w: the items' weights.

    Returns:
        Item indices, most urgent first.

    Termination, on any input: every pass of the main loop either places one item (at most
    ``n`` passes) or retires a port whose items are all placed, setting its load to exactly 0
    (at most ``n_ports``: a retired port's load never changes again, so it is never picked
    again), or ends the loop; the loop is also written as at most ``n + n_ports`` passes. A
    non-finite or non-positive demand or weight is clamped first (see :data:`_CAP`), so the
    loads are finite, every ratio is in ``[0, inf]`` and a bottleneck with unplaced items
    always yields a pick (all-infinite ratios tie, and the latest item goes last). Items but
    no port (every demand dropped, e.g. bytes so few that their seconds are 0) all go first.
    """
    n = len(row_ptr) - 1
    if n_ports == 0:
        # (the tournament tree below would hold no port, and its root would index -1: the
        # kernel does not check bounds, so that read, and the writes after it, would be out
        # of the arrays)
        return np.arange(n)
    cap = _CAP / max(len(port), 1)
    clean = np.empty(len(port))
    for j in range(len(port)):
        value = seconds[j]
        clean[j] = value if value <= cap else cap  # (NaN too)
        if not clean[j] >= _TINY:
            clean[j] = _TINY
    seconds = clean
    for k in range(n):
        if not w[k] <= _CAP:
            w[k] = _CAP
        elif not w[k] >= 0.0:
            w[k] = 0.0
    # Column view: each port's items (ascending) and their demands.
    col_ptr = np.zeros(n_ports + 1, dtype=np.int64)
    for j in range(len(port)):
        col_ptr[port[j] + 1] += 1
    for p in range(n_ports):
        col_ptr[p + 1] += col_ptr[p]
    col_item = np.empty(len(port), dtype=np.int64)
    col_seconds = np.empty(len(port))
    # A port's items not placed yet are the first col_live[p] of its column: a placed item is
    # swapped with the last of them (so a step scans no placed item; the scans below do not
    # depend on the order within a column). col_entry / entry_at link a column slot and the
    # row entry it holds.
    col_entry = np.empty(len(port), dtype=np.int64)
    entry_at = np.empty(len(port), dtype=np.int64)
    fill = col_ptr[:-1].copy()
    load = np.zeros(n_ports)
    for k in range(n):
        for j in range(row_ptr[k], row_ptr[k + 1]):
            p = port[j]
            col_item[fill[p]] = k
            col_seconds[fill[p]] = seconds[j]
            col_entry[fill[p]] = j
            entry_at[j] = fill[p]
            fill[p] += 1
            load[p] += seconds[j]
    col_live = fill - col_ptr[:-1]
    alive = np.ones(n, dtype=np.bool_)
    placed_last = np.empty(n, dtype=np.int64)
    n_placed = 0
    # The most loaded port, the first of equals, from a tournament tree over the ports (a
    # node holds the winner of its two children, the left one on a tie), so a step updates
    # the few ports of one item instead of scanning them all.
    leaves = 1
    while leaves < max(n_ports, 1):
        leaves *= 2
    tree = np.full(2 * leaves, -1, dtype=np.int64)
    for p in range(n_ports):
        tree[leaves + p] = p
    for node in range(leaves - 1, 0, -1):
        left, right = tree[2 * node], tree[2 * node + 1]
        tree[node] = right if right >= 0 and (left < 0 or load[right] > load[left]) else left
    # A port's load only goes down (every demand is > 0), so after it does only the matches it
    # had won are replayed, from its leaf up: the first match up the tree that it had lost
    # keeps its winner (a lower load cannot make it win, and whoever now wins the match below
    # is no more loaded than it was, on the same side), and so does every match above. The
    # replay is written out, not a helper: a helper taking the arrays costs reference counting
    # at every call (measured: the stage sums' loop ran four times slower with one).
    # the ports whose load goes down after a step, and by how much
    lowered = np.empty(max(n_ports, 1), dtype=np.int64)
    lowered_by = np.empty(max(n_ports, 1))
    # each live item's w / v on the bottleneck, divided once a step and read twice
    ratio = np.empty(max(len(port), 1))
    for _ in range(n + n_ports):
        b = tree[1]
        if not load[b] > _EPS_S:
            break
        lo = col_ptr[b]
        hi = lo + col_live[b]
        best = np.inf
        for j in range(lo, hi):
            ratio[j] = w[col_item[j]] / col_seconds[j]
            best = min(best, ratio[j])
        # Among ties, the latest item goes last (earlier arrivals are served first).
        tie = best + abs(best) * _TIE_REL
        pick = -1
        for j in range(lo, hi):
            if ratio[j] <= tie and (pick < 0 or col_item[j] > col_item[pick]):
                pick = j
        if pick < 0:
            # no item left on this port: only rounding residue was, and the port retires
            lowered[0], lowered_by[0] = b, load[b]
            n_lowered = 1
        else:
            sigma = col_item[pick]
            w_sigma, v_sigma = w[sigma], col_seconds[pick]
            if w_sigma > 0.0:  # (else every scaling subtracts 0: no 0 x inf)
                for j in range(lo, hi):
                    k = col_item[j]
                    # scaled weights stay >= 0 in exact arithmetic; clip the rounding error
                    scaled = w[k] - w_sigma * col_seconds[j] / v_sigma
                    w[k] = scaled if scaled > 0.0 else 0.0
            alive[sigma] = False
            placed_last[n_placed] = sigma
            n_placed += 1
            n_lowered = 0
            for j in range(row_ptr[sigma], row_ptr[sigma + 1]):
                p = port[j]
                lowered[n_lowered], lowered_by[n_lowered] = p, seconds[j]
                n_lowered += 1
                # out of its port's live items: swap with the last of them
                at, last = entry_at[j], col_ptr[p] + col_live[p] - 1
                moved = col_entry[last]
                col_item[at] = col_item[last]
                col_seconds[at] = col_seconds[last]
                col_entry[at] = moved
                entry_at[moved] = at
                col_live[p] -= 1
        for m in range(n_lowered):
            p = lowered[m]
            # a port left without items retires at exactly 0 (x - x is 0.0 for finite x)
            load[p] = load[p] - lowered_by[m] if col_live[p] > 0 else 0.0
            node = (leaves + p) // 2
            while node >= 1 and tree[node] == p:
                left, right = tree[2 * node], tree[2 * node + 1]
                tree[node] = (
                    right if right >= 0 and (left < 0 or load[right] > load[left]) else left
                )
                node //= 2
    order = np.empty(n, dtype=np.int64)
    i = 0
    for k in range(n):
        if alive[k]:
            order[i] = k
            i += 1
    for m in range(n_placed - 1, -1, -1):
        order[i] = placed_last[m]
        i += 1
    return order


@njit(cache=True)
def port_seconds_matrix(row_ptr, column, size_bytes, column_bps):  # pragma: no cover - compiled
    """BSSI's demand matrix from per-port bytes in sparse rows (a
    :class:`~controller.model.SparsePortBytes`' arrays): each entry as ``8.0 * bytes / bps`` of
    its column, entries <= 0 dropped, ports numbered by first use, the numbers
    :meth:`DemandMatrix.from_mappings` gives for the same loads as mappings.

    Args:
        row_ptr: the rows' offsets into ``column`` and ``size_bytes``.
        column: each entry's host port column.
        size_bytes: each entry's bytes left.
        column_bps: each column's capacity in bit/s.

    Returns:
        ``(row_ptr, port, seconds, n_ports)`` of the :class:`DemandMatrix`.
    """
    number = np.full(column_bps.shape[0], -1, dtype=np.int64)
    out_ptr = np.zeros(row_ptr.shape[0], dtype=np.int64)
    port = np.empty(column.shape[0], dtype=np.int64)
    seconds = np.empty(column.shape[0])
    n_ports = 0
    k = 0
    for i in range(row_ptr.shape[0] - 1):
        for j in range(row_ptr[i], row_ptr[i + 1]):
            value = 8.0 * size_bytes[j] / column_bps[column[j]]
            if value > 0:
                if number[column[j]] < 0:
                    number[column[j]] = n_ports
                    n_ports += 1
                port[k] = number[column[j]]
                seconds[k] = value
                k += 1
        out_ptr[i + 1] = k
    return out_ptr, port[:k].copy(), seconds[:k].copy(), n_ports
