"""Beamer's order from the coflows' loads as sparse arrays, in one compiled pass.

Beamer (:class:`controller.policies.Beamer`) sums, for every stage, the bytes its units of work
(jobs, or jobless coflows) still have to move per port: a unit's in-flight coflows, then its
job's future iterations; the stage's units in sorted order. Read from mappings, that is a dict
operation per port and unit at every reorder (:func:`simulator.reference.beamer_schedule` does
it so, the tests' oracle). This module does the same sums from a
:class:`~controller.model.SparsePortBytes`, makes BSSI's demand matrix directly and orders the
stages and their coflows.

The sums are the ones the mappings give, bit for bit: every sum adds the same terms in the same
order (a coflow's bytes are its bits / 8.0, a port enters a sum when it is first listed, at
``0.0 + x``), and every row lists its
ports in the order the mappings would list them (a coflow's ports in column order, a job's in
its ``bytes_per_iteration`` order, a stage's units one after the other), so the ports get the
same numbers of first use and BSSI breaks ties between equally loaded ports the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controller.bssi import _bssi
from controller.kernel_cache import njit
from controller.madd import TIE_DIGITS


def offsets(counts: Sequence[int] | np.ndarray) -> np.ndarray:
    """Offsets of consecutive runs of ``counts`` entries: ``[0, c0, c0 + c1, ...]``."""
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=out[1:])
    return out


@njit(cache=True)
def units_of_jobs(sorted_jobs, units_by_job, job_ids):  # pragma: no cover - compiled
    """The unit of each of ``job_ids`` (-1 for a job that is not one), by binary search.

    Args:
        sorted_jobs: the units' job ids, ascending.
        units_by_job: the unit of each entry of ``sorted_jobs``.
        job_ids: the jobs to look up.
    """
    units = np.empty(job_ids.shape[0], dtype=np.int64)
    at = np.searchsorted(sorted_jobs, job_ids)
    for i in range(job_ids.shape[0]):
        found = at[i] < sorted_jobs.shape[0] and sorted_jobs[at[i]] == job_ids[i]
        units[i] = units_by_job[at[i]] if found else -1
    return units


@njit(cache=True)
def _stage_loads(
    load_ptr, load_column, load_bytes, column_bps, row_ptr, rows, future, extra_ptr,
    extra_column, extra_bytes, stage_ptr, stage_units,
):  # pragma: no cover - compiled  # fmt: skip
    """Every stage's demand and every unit's bottleneck (:func:`job_stage_order`'s sums), as
    the mappings would sum them.

    Args:
        load_ptr, load_column, load_bytes: the sparse loads.
        column_bps: each column's capacity in bit/s.
        row_ptr, rows: unit ``u``'s in-flight coflows are the loads' rows
            ``rows[row_ptr[u]:row_ptr[u + 1]]``, in arrival order.
        future, extra_ptr, extra_column, extra_bytes: its future traffic is ``future[u]``
            times ``extra_bytes`` on the columns ``extra_column``, both
            ``[extra_ptr[u]:extra_ptr[u + 1]]``, in the job's port order.
        stage_ptr, stage_units: stage ``s``'s units, ``stage_units[stage_ptr[s]:stage_ptr[s +
            1]]``, in the order its sum adds them.

    Each unit's load is kept on the columns it lists, in the order it lists them (a marker per
    column says whether the current unit or stage has listed it yet); the stage adds the unit's
    load column by column in that order. (The three "list the column at 0.0, then add" steps
    are written out: a helper taking the arrays made the loop four times slower, measured, from
    reference counting at every call.)

    Returns:
        The demand matrix's (:class:`~controller.bssi.DemandMatrix`) ``row_ptr``, ``port``,
        ``seconds`` and ``n_ports``, and each unit's bottleneck in seconds.
    """
    n_columns = column_bps.shape[0]
    n_stages = len(stage_ptr) - 1
    unit_bottleneck = np.zeros(len(row_ptr) - 1)
    unit_load = np.zeros(n_columns)
    unit_mark = np.full(n_columns, -1, dtype=np.int64)
    unit_columns = np.empty(n_columns, dtype=np.int64)
    stage_load = np.zeros(n_columns)
    stage_mark = np.full(n_columns, -1, dtype=np.int64)
    stage_columns = np.empty(n_columns, dtype=np.int64)
    number = np.full(n_columns, -1, dtype=np.int64)  # port numbers, by first use
    n_ports = 0
    out_ptr = np.zeros(n_stages + 1, dtype=np.int64)
    # a stage's entries are at most its units' entries
    room = 0
    for k in range(len(stage_units)):
        u = stage_units[k]
        room += extra_ptr[u + 1] - extra_ptr[u]
        for i in range(row_ptr[u], row_ptr[u + 1]):
            room += load_ptr[rows[i] + 1] - load_ptr[rows[i]]
    out_port = np.empty(room, dtype=np.int64)
    out_seconds = np.empty(room)
    n_out = 0
    visit = 0  # one per unit summed, so a unit of two stages is summed afresh in each
    for s in range(n_stages):
        n_stage_columns = 0
        for k in range(stage_ptr[s], stage_ptr[s + 1]):
            u = stage_units[k]
            n_unit_columns = 0
            for i in range(row_ptr[u], row_ptr[u + 1]):
                r = rows[i]
                for j in range(load_ptr[r], load_ptr[r + 1]):
                    c = load_column[j]
                    if unit_mark[c] != visit:
                        unit_mark[c] = visit
                        unit_load[c] = 0.0
                        unit_columns[n_unit_columns] = c
                        n_unit_columns += 1
                    unit_load[c] += load_bytes[j]
            for i in range(extra_ptr[u], extra_ptr[u + 1]):
                c = extra_column[i]
                if unit_mark[c] != visit:
                    unit_mark[c] = visit
                    unit_load[c] = 0.0
                    unit_columns[n_unit_columns] = c
                    n_unit_columns += 1
                unit_load[c] += future[u] * extra_bytes[i]
            visit += 1
            bottleneck = 0.0
            for m in range(n_unit_columns):
                c = unit_columns[m]
                bottleneck = max(bottleneck, 8.0 * unit_load[c] / column_bps[c])
                if stage_mark[c] != s:
                    stage_mark[c] = s
                    stage_load[c] = 0.0
                    stage_columns[n_stage_columns] = c
                    n_stage_columns += 1
                stage_load[c] += unit_load[c]
            unit_bottleneck[u] = bottleneck
        for m in range(n_stage_columns):
            c = stage_columns[m]
            seconds = 8.0 * stage_load[c] / column_bps[c]
            if seconds > 0.0:  # as DemandMatrix.from_mappings drops entries <= 0
                if number[c] < 0:
                    number[c] = n_ports
                    n_ports += 1
                out_port[n_out] = number[c]
                out_seconds[n_out] = seconds
                n_out += 1
        out_ptr[s + 1] = n_out
    return out_ptr, out_port[:n_out].copy(), out_seconds[:n_out].copy(), n_ports, unit_bottleneck


@njit(cache=True)
def job_stage_order(
    load_ptr, load_column, load_bytes, column_bps, unit_of, coflow_position, coflow_rows,
    budget, done, extra_ptr, extra_column, extra_bytes, stage_ptr, stage_units, weights,
    slowest_first, srpt,
):  # pragma: no cover - compiled  # fmt: skip
    """Beamer's order of the active coflows (:class:`controller.policies.Beamer`), in one
    compiled call: each unit's in-flight rows and future iterations, the stages with active
    coflows and their units, the stage demands (:func:`_stage_loads`), BSSI over the stages
    (:func:`controller.bssi._bssi`), and the coflows by stage rank, then their unit's
    bottleneck (most first), then arrival. With ``srpt`` the stages go by their largest
    demand instead, least first (rounded to :data:`~controller.madd.TIE_DIGITS` decimals,
    ties in stage order); without ``slowest_first`` a stage's coflows keep their arrival order
    (Beamer's ``stage_order`` and ``within_stage`` readings).

    Args:
        load_ptr, load_column, load_bytes: the sparse loads (:class:`SparsePortBytes`).
        column_bps: each column's capacity in bit/s.
        unit_of: each active coflow's unit of work (its job, or itself), in arrival order.
        coflow_position: each active coflow's stage position (stages in (arrival, id) order).
        coflow_rows: each active coflow's row of the loads.
        budget, done: each unit's iteration budget and iterations done (the iterations not
            started yet, budget - done - its coflows in flight, send its traffic per
            iteration again).
        extra_ptr, extra_column, extra_bytes: each unit's traffic per iteration.
        stage_ptr, stage_units: each stage position's units, in the order its sum adds them
            (a unit may be in several).
        weights: each stage position's weight.
        slowest_first: inside a rank, the coflows of the unit with most work left first.
        srpt: the stages by their largest demand (shortest remaining first), not by BSSI.

    Returns:
        The coflows' order (indices into the active coflows), the offsets of each rank's
        coflows in it, and whether every ranked stage's weight is > 0 (else no order is made).
    """
    n = unit_of.shape[0]
    n_units = budget.shape[0]
    n_positions = stage_ptr.shape[0] - 1
    # each unit's in-flight rows, in arrival order (a counting sort keeps it)
    row_ptr = np.zeros(n_units + 1, dtype=np.int64)
    for i in range(n):
        row_ptr[unit_of[i] + 1] += 1
    for u in range(n_units):
        row_ptr[u + 1] += row_ptr[u]
    fill = row_ptr[:-1].copy()
    rows = np.empty(n, dtype=np.int64)
    for i in range(n):
        rows[fill[unit_of[i]]] = coflow_rows[i]
        fill[unit_of[i]] += 1
    # the iterations whose synchronisation has not started, and their traffic
    future = np.zeros(n_units)
    kept_ptr = np.zeros(n_units + 1, dtype=np.int64)
    for u in range(n_units):
        left = budget[u] - done[u] - (row_ptr[u + 1] - row_ptr[u])
        if left > 0:
            future[u] = left
            kept_ptr[u + 1] = kept_ptr[u] + extra_ptr[u + 1] - extra_ptr[u]
        else:
            kept_ptr[u + 1] = kept_ptr[u]
    kept_column = np.empty(kept_ptr[-1], dtype=np.int64)
    kept_bytes = np.empty(kept_ptr[-1])
    for u in range(n_units):
        if future[u] > 0:
            k = kept_ptr[u]
            for j in range(extra_ptr[u], extra_ptr[u + 1]):
                kept_column[k] = extra_column[j]
                kept_bytes[k] = extra_bytes[j]
                k += 1
    # the stages with active coflows, in order, and their units
    stage_pos = np.empty(n, dtype=np.int64)
    active_stage = np.zeros(n_positions, dtype=np.bool_)
    for i in range(n):
        stage_pos[i] = coflow_position[i]
        active_stage[stage_pos[i]] = True
    present = np.flatnonzero(active_stage)
    n_present = present.shape[0]
    present_ptr = np.zeros(n_present + 1, dtype=np.int64)
    for s in range(n_present):
        p = present[s]
        present_ptr[s + 1] = present_ptr[s] + stage_ptr[p + 1] - stage_ptr[p]
    present_units = np.empty(present_ptr[-1], dtype=np.int64)
    present_weights = np.empty(n_present)
    weights_ok = True
    for s in range(n_present):
        p = present[s]
        present_weights[s] = weights[p]
        weights_ok = weights_ok and weights[p] > 0
        k = present_ptr[s]
        for j in range(stage_ptr[p], stage_ptr[p + 1]):
            present_units[k] = stage_units[j]
            k += 1
    rank_ptr = np.zeros(n_present + 1, dtype=np.int64)
    if not weights_ok:
        return np.arange(n), rank_ptr, False
    d_ptr, d_port, d_seconds, n_ports, bottleneck = _stage_loads(
        load_ptr, load_column, load_bytes, column_bps, row_ptr, rows, future, kept_ptr,
        kept_column, kept_bytes, present_ptr, present_units,
    )  # fmt: skip
    if srpt:
        worst = np.zeros(n_present)
        for s in range(n_present):
            for j in range(d_ptr[s], d_ptr[s + 1]):
                worst[s] = max(worst[s], d_seconds[j])
            worst[s] = np.round(worst[s], TIE_DIGITS)
        stage_order = np.argsort(worst, kind="mergesort")
    else:
        stage_order = _bssi(d_ptr, d_port, d_seconds, n_ports, present_weights)
    rank_of_position = np.empty(n_positions, dtype=np.int64)
    for r in range(n_present):
        rank_of_position[present[stage_order[r]]] = r
    coflow_rank = np.empty(n, dtype=np.int64)
    most_work_first = np.empty(n)
    for i in range(n):
        coflow_rank[i] = rank_of_position[stage_pos[i]]
        rank_ptr[coflow_rank[i] + 1] += 1
        most_work_first[i] = -bottleneck[unit_of[i]]
    for r in range(n_present):
        rank_ptr[r + 1] += rank_ptr[r]
    # by rank, then the most remaining work, then arrival: a stable sort by work, then a
    # counting sort by rank (stable: the order of two stable sorts, in O(n) for the second)
    if slowest_first:
        by_work = np.argsort(most_work_first, kind="mergesort")
    else:  # (arrival order: the active coflows' own)
        by_work = np.arange(n)
    order = np.empty(n, dtype=np.int64)
    fill = rank_ptr[:-1].copy()
    for i in range(n):
        c = by_work[i]
        order[fill[coflow_rank[c]]] = c
        fill[coflow_rank[c]] += 1
    return order, rank_ptr, True
