"""Coflow scheduling policies: one interface, one registry, used by the controller and simulator.

Every policy maps a :class:`~controller.model.ClusterState` to a
:class:`~controller.schedule.Schedule` (ranks of coflows, optional per-flow rate caps):

- ``fair``: per-flow fair sharing; every coflow in one rank, no rates.
- ``fifo-lm``: Baraat's FIFO with limited multiplexing (Dogar et al., SIGCOMM 2014).
- ``sincronia``: BSSI over coflows (Agarwal et al., SIGCOMM 2018).
- ``jpas``: job-progress-aware ranks (reconstructed from Zhou et al., JNCA 158, 2020).
- ``beamer``: BSSI over HPO stages (reconstructed from He et al., IEEE TNSM 19(2), 2022).
- ``varys``: smallest-effective-bottleneck-first with MADD rates (Chowdhury et al., SIGCOMM 2014).

JPAS and Beamer are reconstructed from their published abstracts (docs/architecture.md). Ties are
always broken by arrival time, then id, so every order is deterministic.
"""

from __future__ import annotations

import bisect
import math
import operator
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, compress, count, repeat
from typing import Any, ClassVar, NamedTuple

import numpy as np

from controller import plugins
from controller.bssi import bssi_positions
from controller.limits import MAX_FLOW_BYTES, MAX_FLOWS, brief
from controller.madd import sebf_order, sparse_madd_s
from controller.metrics import nearest_rank_index
from controller.model import (
    EGRESS,
    ClusterState,
    Coflow,
    CoflowId,
    CoflowKeys,
    FlowKey,
    Job,
    Port,
    SparsePortBytes,
    Stage,
    StageId,
    int64_ids,
)
from controller.schedule import Schedule, one_coflow_ranks
from controller.stage_loads import (
    job_stage_order,
    offsets,
    units_of_jobs,
)

_LARGEST_FLOAT = sys.float_info.max
# a list of coflows' ids or weights at C speed (a reorder reads every active coflow's)
_COFLOW_ID = operator.attrgetter("coflow_id")
_WEIGHT = operator.attrgetter("weight")
_JOB_ID = operator.attrgetter("job_id")
_STAGE_ID = operator.attrgetter("stage_id")
_BUDGET = operator.attrgetter("iteration_budget")
_DONE = operator.attrgetter("iterations_done")
_PER_ITERATION = operator.attrgetter("bytes_per_iteration")
_JOB_IDS = operator.attrgetter("job_ids")
_ARRIVAL = operator.attrgetter("arrival_s")
_VALUES = operator.methodcaller("values")
_FLOWS = operator.attrgetter("flows")


@dataclass(frozen=True)
class OptionSpec:
    """One option of a policy: its type, default and range, the single declaration that the
    command line, the REST API and the OpenAPI document check against.

    ``kind`` is ``bool``, ``int``, ``float`` or ``str``; ``low`` / ``high`` bound a number
    (``low_open``: strictly above ``low``); a ``str`` option takes one of ``choices`` (a
    reading of an algorithm, say); ``nullable``: ``None`` is allowed (and means "off")."""

    kind: type
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    nullable: bool = False
    choices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.kind is str) != bool(self.choices):
            raise ValueError("a str option, and only one, lists its choices")
        if self.kind is str and self.default not in self.choices:
            raise ValueError(f"default {self.default!r} is not one of {self.choices}")

    def check(self, value: Any) -> Any:
        """``value`` (a JSON value) if it fits, else ``ValueError`` saying what is expected."""
        if value is None and self.nullable:
            return None
        if self.kind is str:
            ok = isinstance(value, str) and value in self.choices
        elif self.kind is bool:
            ok = isinstance(value, bool)
        elif self.kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            # (an integer beyond every float is not finite as a float: float() overflows)
            ok = ok and (isinstance(value, float) or abs(value) <= _LARGEST_FLOAT)
            ok = ok and math.isfinite(value)
        if ok and self.low is not None:
            ok = value > self.low if self.low_open else value >= self.low
        if ok and self.high is not None:
            ok = value <= self.high
        if not ok:
            raise ValueError(f"must be {self.expects()}, got {brief(value)}")
        return float(value) if self.kind is float else value

    def parse_text(self, text: str) -> Any:
        """A command-line value (``true``, ``3``, ``0.5``, ``null``) converted and checked."""
        word = text.strip().lower()
        if self.nullable and word in ("null", "none", "off"):
            return None
        if self.kind is str:
            if word not in self.choices:
                raise ValueError(f"must be {self.expects()}, got {text!r}")
            return word
        if self.kind is bool:
            if word in ("true", "yes", "on", "1"):
                return True
            if word in ("false", "no", "off", "0"):
                return False
            raise ValueError(f"must be {self.expects()}, got {text!r}")
        try:
            value = self.kind(word)
        except ValueError:
            raise ValueError(f"must be {self.expects()}, got {text!r}") from None
        return self.check(value)

    def expects(self) -> str:
        """What a valid value looks like, in words (``"a number > 0 or null"``)."""
        if self.kind is str:
            words = "one of " + ", ".join(map(repr, self.choices))
            return words + (" or null" if self.nullable else "")
        words = {bool: "true or false", int: "an integer", float: "a number"}[self.kind]
        if self.low is not None and self.high is not None:
            left = "(" if self.low_open else "["
            words += f" in {left}{self.low:g}, {self.high:g}]"
        elif self.low is not None:
            words += f" {'>' if self.low_open else '>='} {self.low:g}"
        return words + (" or null" if self.nullable else "")

    def schema(self) -> dict:
        """The option as a JSON Schema (OpenAPI 3.0) property."""
        schema: dict[str, Any] = {
            "type": {bool: "boolean", int: "integer", float: "number", str: "string"}[self.kind],
            "default": self.default,
            "description": self.doc,
        }
        if self.choices:
            schema["enum"] = list(self.choices)
        if self.low is not None:
            schema["minimum"] = self.low
            if self.low_open:
                schema["exclusiveMinimum"] = True
        if self.high is not None:
            schema["maximum"] = self.high
        if self.nullable:
            schema["nullable"] = True
        return schema


class Policy:
    """Base class: subclasses set ``name``, declare their constructor's keyword arguments in
    ``OPTIONS`` and implement :meth:`schedule`.

    A policy of your own (``--policy package.module:Class``, see :mod:`controller.plugins`)
    subclasses this the same way; its ``name`` labels its runs and may not be a built-in's.

    Attributes:
        name: the registry key.
        reorder_period_s: if set, the order depends on quantities that change without an event
            (job progress), so the caller should recompute it at least this often.
    """

    name: str = ""
    OPTIONS: ClassVar[dict[str, OptionSpec]] = {}
    reorder_period_s: float | None = None

    def schedule(self, state: ClusterState) -> Schedule:
        """The order (ranks of coflow groups, most urgent first) and rate caps for ``state``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def madd(
    state: ClusterState,
    order: Sequence[Coflow],
    loads: Mapping[CoflowId, Mapping[Port, float]] | None = None,
) -> tuple[dict[FlowKey, float], dict]:
    """Varys' Minimum-Allocation-for-Desired-Duration along ``order``.

    Each coflow in turn gets, on the capacity its predecessors left, the rates that finish all of
    its flows together at its bottleneck time Gamma: flow rate = remaining bits / Gamma. A coflow
    that meets a port with no capacity left gets no cap (it is served by work conservation at its
    lower priority). The arithmetic is Varys' and Beamer's own, compiled
    (:func:`controller.madd.sparse_madd_s`), on the coflows' loads read into sparse rows.

    ``loads`` are the coflows' bytes per port if the caller has them already.

    Returns:
        The per-flow rates (bit/s) of coflows given as flows, and Gamma (s) of every capped
        coflow (for coflows given as a summary, each flow's cap is its remaining bits / Gamma).
    """
    order = list(order)
    ids = list(map(_COFLOW_ID, order))
    rows = SparsePortBytes.from_mappings(
        ids, [c.port_bytes() for c in order] if loads is None else list(map(loads.__getitem__, ids))
    )
    everyone = np.arange(len(order), dtype=np.int64)
    return _sparse_madd(state, rows, order, everyone, np.array(ids, dtype=object), everyone)


class Fair(Policy):
    """Per-flow fair sharing: one rank, no meters; TCP shares every port."""

    name = "fair"

    def schedule(self, state: ClusterState) -> Schedule:
        """Every active coflow in one group: per-flow max-min fair sharing."""
        return Schedule.from_groups([[c.coflow_id for c in state.active_coflows()]])


# new sizes beyond which FIFO-LM merges them into its sorted list instead of inserting each
_MERGE_AT = 64


class FifoLM(Policy):
    """FIFO with limited multiplexing (Baraat).

    Coflows are served in arrival order, one rank each. A coflow that has sent more than the heavy
    threshold is demoted to a shared last rank, so the coflows behind it are no longer blocked by
    it and multiplex with it. The threshold is ``heavy_percentile`` of the sizes of all coflows
    seen so far (once ``min_history`` sizes are known; no demotion before), or a fixed
    ``heavy_threshold_bytes``.

    The policy remembers the sizes it has seen, so use one instance per run.
    """

    name = "fifo-lm"
    OPTIONS: ClassVar[dict[str, OptionSpec]] = {
        "heavy_percentile": OptionSpec(
            float, 90.0, "percentile of seen coflow sizes beyond which a coflow is heavy",
            low=0, high=100, low_open=True,
        ),
        "min_history": OptionSpec(
            int, 10, "coflow sizes seen before any demotion", low=1, high=1_000_000
        ),
        "heavy_threshold_bytes": OptionSpec(
            float, None, "a fixed heavy threshold in bytes instead of the percentile",
            low=0, high=MAX_FLOWS * MAX_FLOW_BYTES, low_open=True, nullable=True,
        ),
    }  # fmt: skip

    def __init__(
        self,
        heavy_percentile: float = 90.0,
        min_history: int = 10,
        heavy_threshold_bytes: float | None = None,
    ) -> None:
        if not 0 < heavy_percentile <= 100:
            raise ValueError("heavy_percentile must be in (0, 100]")
        if min_history < 1:
            raise ValueError("min_history must be >= 1")
        self.heavy_percentile = heavy_percentile
        self.min_history = min_history
        self.heavy_threshold_bytes = heavy_threshold_bytes
        self._seen: set[int] = set()
        self._sizes: list[float] = []  # sorted

    def threshold_bytes(self) -> float:
        """Bytes sent beyond which a coflow counts as heavy."""
        if self.heavy_threshold_bytes is not None:
            return self.heavy_threshold_bytes
        if len(self._sizes) < self.min_history:
            return math.inf
        return self._sizes[nearest_rank_index(len(self._sizes), self.heavy_percentile)]

    def schedule(self, state: ClusterState) -> Schedule:
        """Arrival order, one rank each; coflows that sent more than the heavy threshold share a
        last rank."""
        active = state.active_coflows()
        ids = state.active_ids(active)
        sizes, left = state.byte_counts(active, ids)
        seen = self._seen
        new = []
        if not seen.issuperset(ids):  # (the positions of those not seen yet, at C speed)
            new = list(compress(count(), map(operator.not_, map(seen.__contains__, ids))))
        if new:
            seen.update(map(ids.__getitem__, new))
            if len(new) > _MERGE_AT:  # (many: merged in, one pass over the sizes seen)
                self._sizes.extend(map(sizes.__getitem__, new))
                self._sizes.sort()
            else:
                for k in new:
                    bisect.insort(self._sizes, sizes[k])
        threshold = self.threshold_bytes()
        if threshold == math.inf:
            return Schedule.from_order(ids)
        # Coflow.sent_bytes: size - remaining
        heavy = np.subtract(sizes, left) > threshold
        light = one_coflow_ranks(list(compress(ids, ~heavy)))
        shared = tuple(compress(ids, heavy))
        return Schedule((*light, shared) if shared else light)


class Sincronia(Policy):
    """BSSI over individual coflows (weights from ``Coflow.weight``)."""

    name = "sincronia"

    def schedule(self, state: ClusterState) -> Schedule:
        """BSSI order of the active coflows (weighted port loads in seconds), on the state's
        loads as arrays (a plain state's read into them first,
        :meth:`ClusterState.with_sparse_loads`)."""
        state = state.with_sparse_loads()
        active = state.active_coflows()
        ids = state.active_ids(active)
        positions = bssi_positions(state.demand_matrix(active, ids), state.coflow_weights(active))
        order = map(ids.__getitem__, positions.tolist())
        sparse = state.sparse_port_bytes()
        return Schedule.from_order(order, rows=_rows(sparse, ids)[positions], loads=sparse)


class Varys(Policy):
    """Smallest effective bottleneck first, with MADD rate caps; bottlenecks within a
    nanosecond tie, and ties go by arrival."""

    name = "varys"
    OPTIONS: ClassVar[dict[str, OptionSpec]] = {
        "use_rates": OptionSpec(bool, True, "cap every flow at its MADD rate"),
    }

    def __init__(self, use_rates: bool = True) -> None:
        self.use_rates = use_rates

    def schedule(self, state: ClusterState) -> Schedule:
        """Smallest bottleneck first (SEBF), with MADD rates when ``use_rates`` is set: both
        compiled (:mod:`controller.madd`) on the state's loads as arrays (a plain state's read
        into them first, :meth:`ClusterState.with_sparse_loads`)."""
        state = state.with_sparse_loads()
        active = state.active_coflows()
        sparse = state.sparse_port_bytes()
        ids = state.active_ids(active)
        rows = _rows(sparse, ids)
        bps = state.column_bps(sparse)
        # (ties by arrival)
        by_gamma = sebf_order(sparse.row_ptr, sparse.column, sparse.size_bytes, rows, bps)
        ordered = _id_array(ids)[by_gamma]
        ordered_rows = rows[by_gamma]
        if not self.use_rates:
            return Schedule.from_order(ordered.tolist(), rows=ordered_rows, loads=sparse)
        rates, gammas = _sparse_madd(state, sparse, active, by_gamma, ordered, ordered_rows)
        return Schedule.from_order(ordered.tolist(), rates, gammas, ordered_rows, sparse)


def _id_array(ids: list[CoflowId | None]) -> np.ndarray:
    """``ids`` as int64 (0 for ``None``), or as the ids themselves where one is not an int64."""
    try:
        return np.asarray(ids, dtype=np.int64)  # (the usual case, the quickest)
    except (OverflowError, TypeError):
        pass
    try:
        return int64_ids(ids)
    except (OverflowError, TypeError):
        return np.array([0 if i is None else i for i in ids], dtype=object)


def _rows(sparse: SparsePortBytes, ids: list[CoflowId]) -> np.ndarray:
    """The sparse loads' row of each of the coflows ``ids``."""
    rows = sparse.rows_of(ids)
    return np.arange(len(ids), dtype=np.int64) if rows is None else rows


def _sparse_madd(
    state: ClusterState,
    sparse: SparsePortBytes,
    active: Sequence[Coflow],
    positions: np.ndarray,
    ids: np.ndarray,
    rows: np.ndarray,
) -> tuple[dict[FlowKey, float], dict]:
    """MADD (:func:`madd`) along the coflows ``active[positions]``, with ids ``ids`` and loads
    the sparse ``rows``, compiled (:func:`controller.madd.sparse_madd_s`). Only the capped
    coflows are read."""
    madd_s = sparse_madd_s(sparse.row_ptr, sparse.column, sparse.size_bytes, rows,
                           state.column_bps(sparse))  # fmt: skip
    capped = np.flatnonzero(madd_s > 0)
    times = madd_s[capped].tolist()
    gammas = dict(zip(ids[capped].tolist(), times, strict=True))
    capped_coflows = list(map(active.__getitem__, positions[capped].tolist()))
    rates = {}
    if any(map(_FLOWS, capped_coflows)):  # (coflows given in bulk, the simulator's, have none)
        for coflow, time_s in zip(capped_coflows, times, strict=True):
            for flow in coflow.flows:
                if flow.remaining_bytes > 0:
                    rates[(coflow.coflow_id, flow.flow_id)] = 8.0 * flow.remaining_bytes / time_s
    return rates, gammas


_PROGRESS_DIGITS = 9
# significant digits to which JPAS' service and accuracy-gain readings compare amounts: equal
# amounts summed or divided in another order must tie (and go by arrival), as equal progress
# does (_PROGRESS_DIGITS)
_SIGNIFICANT_DIGITS = 9
PROGRESS_READINGS = ("iterations", "service", "maif")


class Jpas(Policy):
    """Job-progress-aware priorities: least attained progress first.

    Jobs are ranked by their progress, ties by arrival then id; every coflow of a job shares
    the job's rank. Progress changes without events, so the order is recomputed every
    ``period_s``.

    JPAS' abstract ranks jobs by their progress without saying how progress is measured, so
    the ``progress`` option names the reading (each can be run beside the others):

    - ``"iterations"`` (the default): completed iterations over the stage budget
      (:attr:`Job.progress`), least first, so early-stage jobs are preferred. A coflow
      without a registered job is ranked as a job of its own whose progress is the fraction
      of its bytes already sent; a coflow of a job that is not registered has progress 0.
    - ``"service"``: least attained service first, the service being the bytes the job has
      synchronised so far: iterations done times the bytes of one iteration (the sum of its
      ``bytes_per_iteration`` over egress ports: every byte once, where it leaves its sender).
      An absolute amount, not a fraction: at equal iterations the job with the bigger model
      has received more service and goes later. This is the classic least-attained-service
      reading of progress; unlike the iterations reading it does not hand the bandwidth to
      the biggest jobs when jobs' iterations differ in bytes. A coflow without a job has
      attained the bytes it sent; a job that is not registered, none.
    - ``"maif"``: maximum accuracy improvement first (the abstract also speaks of preferring
      the jobs whose accuracy gains most): jobs by their accuracy gained per iteration
      between their last two accuracy reports (:attr:`Job.accuracy_gain`), most first. A job
      with fewer than two reports (at different iteration counts) ranks before every
      measured job, since it needs a measurement; so do a coflow without a job and one of a
      job that is not registered (they have no accuracy).

    Service amounts and gains are compared to 9 significant digits, so that equal amounts tie
    whatever the float noise and go by arrival.
    """

    name = "jpas"
    OPTIONS: ClassVar[dict[str, OptionSpec]] = {
        "period_s": OptionSpec(
            float, 1.0, "seconds between reorders (progress moves without events; at least "
            "10 ms, so that the reorders leave the event loop time for the rest)",
            low=0.01, high=3600,
        ),
        "progress": OptionSpec(
            str, "iterations", "how job progress is read: iterations (done over the stage "
            "budget, least first), service (bytes synchronised so far, least first) or maif "
            "(accuracy gained per iteration between the last two reports, most first)",
            choices=PROGRESS_READINGS,
        ),
    }  # fmt: skip

    def __init__(self, period_s: float = 1.0, progress: str = "iterations") -> None:
        if period_s <= 0:
            raise ValueError("period_s must be > 0")
        if progress not in PROGRESS_READINGS:
            raise ValueError(f"progress must be one of {', '.join(PROGRESS_READINGS)}")
        self.reorder_period_s = period_s
        self.progress = progress

    def schedule(self, state: ClusterState) -> Schedule:
        """Jobs (and coflows without a job) by least attained progress first (in the
        ``progress`` reading), ties by arrival."""
        active = state.active_coflows()
        if not active:
            return Schedule(())
        return _by_progress(state, active, self.progress)


def _significant(amount: float) -> float:
    """``amount`` rounded to :data:`_SIGNIFICANT_DIGITS` significant digits."""
    return float(f"{amount:.{_SIGNIFICANT_DIGITS}g}")


def _service_bytes(job: Job) -> float:
    """JPAS' ``"service"`` key: the bytes the job has synchronised so far, its iterations
    done times the bytes one iteration sends (its egress ports' bytes)."""
    per_iteration = sum(size for (_, way), size in job.bytes_per_iteration.items() if way == EGRESS)
    return _significant(job.iterations_done * per_iteration)


def _gain_key(job: Job) -> float:
    """JPAS' ``"maif"`` key: minus the job's accuracy gain per iteration (most gain first),
    ``-inf`` (first) for a job not measured twice yet."""
    gain = job.accuracy_gain
    return -math.inf if gain is None else -_significant(gain)


# each reading's key of a registered job (least first), and of a job or coflow it cannot
# measure (a job not registered; for maif also a coflow without a job)
_JOB_PROGRESS: dict[str, Callable[[Job], float]] = {
    "iterations": operator.attrgetter("progress"),
    "service": _service_bytes,
    "maif": _gain_key,
}
_UNMEASURED = {"iterations": 0.0, "service": 0.0, "maif": -math.inf}


def _by_progress(
    state: ClusterState, active: list[Coflow], progress: str = "iterations"
) -> Schedule:
    """:class:`Jpas`' schedule of the (nonempty) ``active`` coflows, from arrays.

    One entry per job (its key in the ``progress`` reading, and its arrival; the unmeasured key
    and its first coflow's arrival for a job that is not registered) and one per coflow
    without a job (its own key: see :class:`Jpas`), sorted by (key, arrival, jobs before
    coflows, id); each job's coflows share its rank, in arrival order. No Python step per job
    where the state has its jobs' numbers as arrays (:meth:`ClusterState.job_table`; the
    iterations reading only: the table holds neither bytes nor accuracies, so the other
    readings read each job's key from its object, one call per job); one per coflow without a
    job."""
    n = len(active)
    keys = state.coflow_keys()
    if keys is not None:  # (the ids packed: no coflow read for them)
        ids, job_of, has_job = keys.coflow_id, keys.job_id, keys.has_job
    else:
        jobs_of = list(map(_JOB_ID, active))
        has_job = np.fromiter(map(operator.is_not, jobs_of, repeat(None)), bool, n)
        ids, job_of = _id_array(list(map(_COFLOW_ID, active))), _id_array(jobs_of)
    every_job = bool(has_job.all())
    with_job = np.flatnonzero(has_job)
    # the jobs (by id: the keys are unique, so the listing order does not matter), each one's
    # first coflow, and each coflow's job
    job_id_array, first, coflow_job = np.unique(
        job_of if every_job else job_of[with_job], return_index=True, return_inverse=True
    )
    n_jobs = len(job_id_array)
    by_iterations = progress == "iterations"
    key = np.full(n_jobs, _UNMEASURED[progress])
    # (a table's rows are found by int64 ids)
    table = state.job_table() if by_iterations and job_id_array.dtype == np.int64 else None
    if table is not None:
        rows = table.rows_of(job_id_array)
        known = np.flatnonzero(rows >= 0)
        rows, numbers = rows[known], table.numbers
        # (each field gathered alone: a gather of whole rows moves every field)
        done, budget = numbers["done"][rows].astype(float), numbers["budget"][rows].astype(float)
        registered_arrival = numbers["arrival_s"][rows]
    else:
        registered = list(map(state.jobs.get, job_id_array.tolist()))
        if not all(map(operator.is_not, registered, repeat(None))):  # (`in` calls __eq__)
            known = [k for k, job in enumerate(registered) if job is not None]
            registered = [registered[k] for k in known]
        else:
            known = slice(None)
        if by_iterations:
            done = np.fromiter(map(_DONE, registered), float, len(registered))
            budget = np.fromiter(map(_BUDGET, registered), float, len(registered))
        else:
            measured = np.fromiter(map(_JOB_PROGRESS[progress], registered), float,
                                   len(registered))  # fmt: skip
        registered_arrival = np.fromiter(map(_ARRIVAL, registered), float, len(registered))
    if len(registered_arrival) == n_jobs:  # (every job registered: no coflow's arrival needed)
        job_arrival = registered_arrival
    else:
        job_arrival = np.fromiter(map(_ARRIVAL, active), float, n)[with_job[first]]
        job_arrival[known] = registered_arrival
    if len(registered_arrival):
        # (Job.progress, or the reading's key of each job)
        key[known] = np.minimum(1.0, done / budget) if by_iterations else measured
    coflow_job = coflow_job.reshape(-1)
    if every_job:
        entry_id, kind = job_id_array, None
    else:  # (the coflows without a job, after the jobs)
        jobless = np.flatnonzero(~has_job)
        coflows = list(map(active.__getitem__, jobless.tolist()))
        key = np.concatenate((key, _jobless_keys(state, coflows, progress)))
        arrival = np.fromiter(map(_ARRIVAL, coflows), float, len(coflows))
        job_arrival = np.concatenate((job_arrival, arrival))
        entry_id = np.concatenate((job_id_array, ids[jobless]))
        kind = np.repeat(np.array([0, 1], dtype=np.int64), [n_jobs, len(coflows)])
    n_entries = len(key)
    rank = np.empty(n_entries, dtype=np.int64)
    by_key = (entry_id, job_arrival, key) if kind is None else (entry_id, kind, job_arrival, key)
    rank[np.lexsort(by_key)] = np.arange(n_entries)
    if every_job:
        coflow_rank = rank[coflow_job]
    else:
        coflow_rank = np.empty(n, dtype=np.int64)
        coflow_rank[with_job] = rank[coflow_job]
        coflow_rank[jobless] = rank[n_jobs:]
    ordered = ids[np.argsort(coflow_rank, kind="stable")].tolist()
    if n_entries == n:  # one coflow per entry
        return Schedule.from_order(ordered)
    bounds = offsets(np.bincount(coflow_rank, minlength=n_entries)).tolist()
    return Schedule(tuple(map(tuple, map(ordered.__getitem__, map(slice, bounds, bounds[1:])))))


def _jobless_keys(state: ClusterState, coflows: list[Coflow], progress: str) -> np.ndarray:
    """JPAS' key of each of ``coflows`` (active, without a job) in the ``progress`` reading:
    the fraction of its bytes sent (iterations), the bytes it sent (service), or the
    unmeasured key (maif: no accuracy)."""
    if progress not in ("iterations", "service"):
        return np.full(len(coflows), _UNMEASURED[progress])
    # (sizes and bytes left in one gather where the state keeps them in arrays)
    sizes, lefts = state.byte_counts(coflows)
    if progress == "service":  # (Coflow.sent_bytes)
        return np.array(list(map(_significant, map(operator.sub, sizes, lefts))), dtype=float)
    # Coflow.sent_bytes / size_bytes; equal progress must tie (and go by arrival) whatever the
    # float noise in the bytes counted, else the order flips between equals at every re-ranking
    return np.array([round((size - left) / size if size else 1.0, _PROGRESS_DIGITS)
                     for size, left in zip(sizes, lefts, strict=True)], dtype=float)  # fmt: skip


WITHIN_STAGE_READINGS = ("slowest-first", "arrival")
STAGE_ORDER_READINGS = ("bssi", "srpt")


def _future_iterations(job: Job, n_in_flight: int) -> int:
    """Iterations of the job's budget whose synchronisation has not started yet."""
    return max(0, job.iteration_budget - job.iterations_done - n_in_flight)


class Beamer(Policy):
    """Stage-aware coflow ordering: BSSI over HPO stages.

    The demand of a stage on a port is the remaining bytes of all its jobs until the stage budget
    is reached; stages are ordered with BSSI (stage weights), every coflow gets the rank of its
    stage, and inside a stage the job with the most remaining work (bottleneck time) is listed
    first, because the stage ends with its slowest job. A stage's coflows are one tied rank (one
    priority level), so that listing only matters to the MADD rate caps of ``use_rates``, which
    give rates in that order. A coflow without a stage is a stage of its own;
    a coflow without a job is a unit of work of its own. With ``use_rates`` the order also gets
    MADD rate caps.

    Beamer's abstract says only that the ordering is stage-aware, so two choices of this
    reconstruction are options, to run each reading beside the other:

    - ``stage_order``: ``"bssi"`` (the default) orders the stages by BSSI as above;
      ``"srpt"`` orders them by shortest remaining bottleneck time first: a stage's largest
      demand over its ports, in seconds at the ports' rates (the time its busiest port needs
      for what the stage has left), ties within a nanosecond by arrival, then id (as Varys'
      bottlenecks tie). Stage-level shortest-remaining-first is the natural simple
      alternative to BSSI's weighted ordering; it ignores the stages' weights (they must
      still be > 0, as BSSI requires).
    - ``within_stage``: ``"slowest-first"`` (the default) puts the job with the most
      remaining work first inside a stage, as above; ``"arrival"`` keeps a stage's coflows in
      arrival order (then id), without that preference.

    The loads are summed, the stages ordered and their coflows listed by one compiled pass
    (:func:`controller.stage_loads.job_stage_order`) over the state's loads as arrays (a plain
    state's read into them first, :meth:`ClusterState.with_sparse_loads`).
    """

    name = "beamer"
    OPTIONS: ClassVar[dict[str, OptionSpec]] = {
        "use_rates": OptionSpec(bool, False, "also cap every flow at its MADD rate"),
        "within_stage": OptionSpec(
            str, "slowest-first", "order inside a stage: slowest-first (the job with the most "
            "remaining work first) or arrival",
            choices=WITHIN_STAGE_READINGS,
        ),
        "stage_order": OptionSpec(
            str, "bssi", "order of the stages: bssi (BSSI over their weighted demands) or srpt "
            "(shortest remaining bottleneck time first)",
            choices=STAGE_ORDER_READINGS,
        ),
    }  # fmt: skip

    def __init__(
        self,
        use_rates: bool = False,
        within_stage: str = "slowest-first",
        stage_order: str = "bssi",
    ) -> None:
        if within_stage not in WITHIN_STAGE_READINGS:
            raise ValueError(f"within_stage must be one of {', '.join(WITHIN_STAGE_READINGS)}")
        if stage_order not in STAGE_ORDER_READINGS:
            raise ValueError(f"stage_order must be one of {', '.join(STAGE_ORDER_READINGS)}")
        self.use_rates = use_rates
        self.within_stage = within_stage
        self.stage_order = stage_order
        self._job_stages: _JobStages | None = None  # see _job_stage_order

    def schedule(self, state: ClusterState) -> Schedule:
        """Stages in BSSI order of their demands (or ``stage_order``'s); within a stage, the
        most remaining work first (or ``within_stage``'s order)."""
        state = state.with_sparse_loads()
        active = state.active_coflows()
        sparse = state.sparse_port_bytes()
        staged, self._job_stages = _job_stage_order(
            state, active, sparse, self._job_stages, self._slowest_first, self._srpt
        )
        if staged is None:  # (not every coflow of a job its stage lists)
            staged = _stage_order(state, active, sparse, self._slowest_first, self._srpt)
        if not self.use_rates:
            return Schedule.from_groups(staged.ranks, rows=staged.rows, loads=sparse)
        # (the coflows in rank order, by their index, not their id)
        rates, gammas = _sparse_madd(
            state, sparse, active, staged.positions, staged.ids, staged.rows
        )
        return Schedule.from_groups(staged.ranks, rates, gammas, staged.rows, sparse)

    @property
    def _slowest_first(self) -> bool:
        return self.within_stage == "slowest-first"

    @property
    def _srpt(self) -> bool:
        return self.stage_order == "srpt"


# a job its stage lists but the state no longer has: no iterations left, no ports
_UNREGISTERED = Job(-1, {}, iteration_budget=1, iterations_done=1)


class _JobStages:
    """What Beamer derives from the stages and their jobs alone, not from the coflows, for
    :func:`_job_stage_order`: made again only when the stages (ids, listed jobs, arrivals,
    weights) or the hosts change, or a listed job's ``bytes_per_iteration`` (its ports, in
    order, and their bytes; a job registered or replaced with the same loads changes nothing).

    Every listed job is a unit of work; stages are in (arrival, id) order, a stage's units its
    listed jobs in id order (the order its sum adds them in), and each unit's future traffic
    per iteration is its job's ports in ``bytes_per_iteration`` order.
    """

    def __init__(self, state: ClusterState, sparse: SparsePortBytes, key: tuple) -> None:
        self.key = key
        self.version: object | None = None  # the state's stages_version it was checked at
        stage_ids, (listed, per_stage), arrivals, weights, _ = key
        n_stages = len(stage_ids)
        stage_id_array = np.asarray(stage_ids, dtype=np.int64)
        by_arrival = np.lexsort((stage_id_array, np.asarray(arrivals)))
        self.weights = np.asarray(weights, dtype=float)[by_arrival]
        # every (stage position, listed job), sorted, each once: a stage's units in id order
        position = np.empty(n_stages, dtype=np.int64)
        position[by_arrival] = np.arange(n_stages)
        listing_position = np.repeat(position, per_stage)  # (the listings in the stages' order)
        listing_job = np.asarray(listed, dtype=np.int64)
        by_stage = np.lexsort((listing_job, listing_position))
        listing_stage, stage_jobs = listing_position[by_stage], listing_job[by_stage]
        first = np.ones(len(by_stage), dtype=bool)
        first[1:] = np.diff(listing_stage) != 0
        first[1:] |= np.diff(stage_jobs) != 0
        stage_jobs = stage_jobs[first]
        # the units: every job once, in the order first listed (by stage position, then id);
        # the jobs ascending and each one's unit, and each stage's units
        by_job = np.argsort(stage_jobs, kind="stable")
        ascending = stage_jobs[by_job]
        new_job = np.ones(len(ascending), dtype=bool)
        new_job[1:] = ascending[1:] != ascending[:-1]
        first_listed = by_job[new_job]
        by_first = np.argsort(first_listed, kind="stable")
        unit_of_job = np.empty(len(by_first), dtype=np.int64)
        unit_of_job[by_first] = np.arange(len(by_first))
        self.sorted_jobs, self.units_by_job = stage_jobs[first_listed], unit_of_job
        self.unit_jobs = self.sorted_jobs[by_first]
        self.units = self.unit_jobs.tolist()
        job_rank = np.empty(len(stage_jobs), dtype=np.int64)
        job_rank[by_job] = np.cumsum(new_job) - 1
        self.stage_units = unit_of_job[job_rank]
        # each unit's stage: the one that lists its job (a job listed by two stages is in the
        # one that lists it last, in the stages' own order), by its position and its id
        by_listed_job = np.argsort(listing_job, kind="stable")
        listed_ascending = listing_job[by_listed_job]
        last_of_job = np.ones(len(listed_ascending), dtype=bool)
        last_of_job[:-1] = listed_ascending[1:] != listed_ascending[:-1]
        self.unit_position = listing_position[by_listed_job[last_of_job]][by_first]
        self.unit_stage = stage_id_array[by_arrival][self.unit_position]
        self.jobs_read: list[Job] | None = self.jobs(state)  # (handed out once by current)
        self._job_stages: tuple[np.ndarray, np.ndarray] | None = None  # see job_stages
        self.sources = list(map(_PER_ITERATION, self.jobs_read))
        self.stage_ptr = offsets(np.bincount(listing_stage[first], minlength=n_stages))
        packed = state.job_loads(self.units, self.sources)
        if packed is not None:  # (packed when the jobs were registered)
            counts, self.extra_column, self.extra_bytes = packed
            self.extra_ptr = offsets(counts)
        else:
            counts = list(map(len, self.sources))
            self.extra_ptr = offsets(counts)
            self.extra_column = sparse.columns(chain.from_iterable(self.sources), sum(counts))
            self.extra_bytes = np.fromiter(
                chain.from_iterable(map(_VALUES, self.sources)), float, sum(counts)
            )
            # (read-only as the packed bytes are: one compiled kernel serves both)
            self.extra_bytes.flags.writeable = False

    def units_of(self, job_ids: np.ndarray) -> np.ndarray:
        """The unit of each of ``job_ids`` (-1 for a job no stage lists)."""
        return units_of_jobs(self.sorted_jobs, self.units_by_job, job_ids)

    @staticmethod
    def key_of(stages: Mapping[StageId, Stage], sparse: SparsePortBytes) -> tuple:
        """What the stages are, compared at C speed: their ids, listed jobs (one stage after
        the other, and how many each), arrivals and weights, and the hosts (the columns)."""
        values = list(stages.values())
        job_lists = list(map(_JOB_IDS, values))
        return (
            tuple(stages),
            (tuple(chain.from_iterable(job_lists)), tuple(map(len, job_lists))),
            tuple(map(_ARRIVAL, values)),
            tuple(map(_WEIGHT, values)),
            (sparse.n_hosts, sparse.hosts),
        )

    @classmethod
    def current(
        cls, kept: _JobStages | None, state: ClusterState, sparse: SparsePortBytes
    ) -> tuple[_JobStages, list[Job] | None]:
        """``kept`` if the state's stages and jobs are still what it was made of, else a new
        one; and each unit's job if that took reading them (``None`` where the state's
        ``stages_version`` vouched for them)."""
        version = state.stages_version
        if (
            kept is not None
            and version is not None
            and kept.version is version
            and kept.key[-1] == (sparse.n_hosts, sparse.hosts)
        ):  # the state's maker vouches that the stages and the jobs' loads are the same
            return kept, None
        key = cls.key_of(state.stages, sparse)
        if kept is not None and kept.key == key:
            filled = kept.jobs(state)
            if all(map(operator.is_, map(_PER_ITERATION, filled), kept.sources)):
                kept.version = version
                return kept, filled
            # (a job replaced by one with equal per-iteration loads, as a progress report
            # does, changes nothing kept: the same ports in the same order, the same bytes)
            sources = list(map(_PER_ITERATION, filled))
            if sources == kept.sources and all(
                list(kept.sources[k].items()) == list(sources[k].items())
                for k in compress(count(), map(operator.is_not, sources, kept.sources))
            ):
                kept.sources, kept.version = sources, version
                return kept, filled
        made = cls(state, sparse, key)
        made.version = version
        filled, made.jobs_read = made.jobs_read, None
        return made, filled

    def job_stages(
        self, state: ClusterState, filled: list[Job] | None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Each unit's job's own stage id (0 for none) and whether it has one: where the
        state's ``stages_version`` vouched for the jobs (``filled`` is ``None``), kept from the
        last read; else gathered from the state's job table (:meth:`ClusterState.job_table`)
        or read from ``filled`` (each unit's job, as :meth:`current` gave them). ``None`` if a
        stage id is not an int64."""
        if filled is None and self._job_stages is not None:
            return self._job_stages
        table = state.job_table()
        if table is not None:  # (the same ids and flags, gathered)
            rows = table.rows_of(self.unit_jobs)
            known = rows >= 0
            stage_id, has_stage = table.numbers["stage_id"][rows], table.numbers["has_stage"][rows]
            self._job_stages = (np.where(known, stage_id, 0), known & has_stage)
            return self._job_stages
        stage_ids = list(map(_STAGE_ID, filled or self.jobs(state)))
        has_stage = np.fromiter(map(operator.is_not, stage_ids, repeat(None)), bool)
        try:
            self._job_stages = (int64_ids(stage_ids), has_stage)
        except (OverflowError, TypeError):
            self._job_stages = None
        return self._job_stages

    def jobs(self, state: ClusterState) -> list[Job]:
        """Each unit's job in ``state`` (:data:`_UNREGISTERED` if it has none)."""
        return list(map(state.jobs.get, self.units, repeat(_UNREGISTERED)))


class _StageOrder(NamedTuple):
    """Beamer's ranks, with the order they list the coflows in as arrays (for the MADD rates
    that follow it)."""

    ranks: tuple[tuple[CoflowId, ...], ...]
    positions: np.ndarray  # each coflow of the ranks in turn, as its index in the active list
    ids: np.ndarray  # its id
    rows: np.ndarray  # and its row of the sparse loads


def _job_stage_order(
    state: ClusterState,
    active: list[Coflow],
    sparse: SparsePortBytes,
    kept: _JobStages | None,
    slowest_first: bool = True,
    srpt: bool = False,
) -> tuple[_StageOrder | None, _JobStages | None]:
    """Beamer's ranks where every active coflow has a job that its own stage lists (HPO
    workloads), with the stages and their units from arrays: each step is a pass at C speed
    over the active coflows or the units, none a Python step per unit, and what depends on
    the stages alone is kept (``kept``, returned again or made anew). ``None`` ranks for any
    other state (:func:`_stage_order` takes it). ``slowest_first`` and ``srpt`` are Beamer's
    ``within_stage`` and ``stage_order`` readings (the defaults: ``"slowest-first"`` and
    ``"bssi"``).

    With every unit a job of its stage, a stage's units are its listed jobs in id order, the
    stages come in (arrival, id) order and a coflow is in its job's stage: what
    :func:`_stage_order` finds one coflow and one unit at a time."""
    n = len(active)
    if not n:
        return None, kept
    keys = state.coflow_keys() or CoflowKeys.of(active)
    if keys is None or not keys.has_job.all():
        return None, kept
    structure, filled = _JobStages.current(kept, state, sparse)
    unit_of = structure.units_of(keys.job_id)
    if (unit_of < 0).any():
        return None, structure  # a coflow whose job no stage lists
    stage_of, has_stage = keys.stage_id, keys.has_stage
    if not has_stage.all():  # a coflow without a stage of its own is in its job's
        job_stages = structure.job_stages(state, filled)
        if job_stages is None:  # a job's stage is not an int64
            return None, structure
        of_job, has_job_stage = job_stages
        if not (has_stage | has_job_stage[unit_of]).all():
            return None, structure
        stage_of = np.where(has_stage, stage_of, of_job[unit_of])
    if not np.array_equal(structure.unit_stage[unit_of], stage_of):
        return None, structure  # a coflow whose job its stage does not list
    if keys.in_row_order:
        coflow_rows = np.arange(n, dtype=np.int64)
    else:
        coflow_rows = _rows(sparse, keys.coflow_id.tolist())
    if filled is None or state.job_table() is not None:
        budget, done = state.job_iterations(structure.unit_jobs)
    else:  # (read already: the same numbers)
        budget = np.fromiter(map(_BUDGET, filled), np.int64, len(filled))
        done = np.fromiter(map(_DONE, filled), np.int64, len(filled))
    # (every coflow is in the stage that lists its job, checked above)
    order, bounds, weights_ok = job_stage_order(
        sparse.row_ptr, sparse.column, sparse.size_bytes, state.column_bps(sparse), unit_of,
        structure.unit_position[unit_of], coflow_rows, budget, done, structure.extra_ptr,
        structure.extra_column, structure.extra_bytes, structure.stage_ptr,
        structure.stage_units, structure.weights, slowest_first, srpt,
    )  # fmt: skip
    if not weights_ok:
        raise ValueError("weights must be > 0")  # (as bssi_order says it)
    ordered_ids = keys.coflow_id[order]
    ranks = _ranks_of(ordered_ids.tolist(), bounds)
    return _StageOrder(ranks, order, ordered_ids, coflow_rows[order]), structure


def _stage_order(
    state: ClusterState,
    active: list[Coflow],
    sparse: SparsePortBytes,
    slowest_first: bool = True,
    srpt: bool = False,
) -> _StageOrder:
    """Beamer's ranks for any state (coflows without a job or a stage, jobs their stage does
    not list): the stages and their units found one coflow and one unit at a time, the sums
    and orders by the kernel :func:`_job_stage_order` calls.

    A coflow's unit of work is its job (``(0, job_id)``), or itself without a job (``(1,
    coflow_id)``); its stage its own or its job's (:meth:`ClusterState.stage_of`), or itself
    without one. Stages go in (arrival, key) order, the arrival a registered stage's own, else
    its coflows' earliest; a stage's units are its coflows' and its listed jobs', in sorted order
    (the order its sum adds them in), its weight a registered stage's own, else its coflows'
    largest. A unit's load is its in-flight coflows' (in arrival order) and, for a registered
    job, its future iterations' (:func:`_future_iterations`), in every stage it is in."""
    n = len(active)
    if not n:
        empty = np.zeros(0, dtype=np.int64)
        return _StageOrder((), empty, empty, empty)
    ids = list(map(_COFLOW_ID, active))
    coflow_units = list(map(_unit, active))
    members: dict[tuple, list[int]] = {}  # stage key -> its coflows (indices into active)
    stage_of = state.stage_of
    for i, coflow in enumerate(active):
        stage_id = stage_of(coflow)
        key = (0, stage_id) if stage_id is not None else (1, coflow.coflow_id)
        members.setdefault(key, []).append(i)
    stages = state.stages

    def arrival(key: tuple) -> float:
        stage = stages.get(key[1]) if key[0] == 0 else None
        if stage is not None:
            return stage.arrival_s
        return min(active[i].arrival_s for i in members[key])

    unit_index: dict[tuple, int] = {}  # each unit's index, in the order first met
    coflow_position = np.empty(n, dtype=np.int64)
    stage_units, weights = [], []
    for position, key in enumerate(sorted(members, key=lambda k: (arrival(k), k))):
        own = members[key]
        coflow_position[own] = position
        units = set(map(coflow_units.__getitem__, own))
        stage = stages.get(key[1]) if key[0] == 0 else None
        if stage is not None:  # jobs of the stage that are computing count too
            units.update((0, job_id) for job_id in stage.job_ids)
        stage_units.append([unit_index.setdefault(u, len(unit_index)) for u in sorted(units)])
        weights.append(stage.weight if stage is not None else max(active[i].weight for i in own))
    unit_of = np.fromiter(map(unit_index.__getitem__, coflow_units), np.int64, n)
    # each unit's iterations left to start (a job's future traffic), for the registered jobs
    # that have some; the others' budget and iterations done leave none
    n_units = len(unit_index)
    in_flight = np.bincount(unit_of, minlength=n_units).tolist()
    budget, done = np.ones(n_units, dtype=np.int64), np.ones(n_units, dtype=np.int64)
    with_future, job_ids, sources = [], [], []
    jobs = state.jobs
    for u, (kind, unit_id) in enumerate(unit_index):
        job = jobs.get(unit_id) if kind == 0 else None
        if job is not None and _future_iterations(job, in_flight[u]):
            budget[u], done[u] = job.iteration_budget, job.iterations_done
            with_future.append(u)
            job_ids.append(unit_id)
            sources.append(job.bytes_per_iteration)
    extra_counts = np.zeros(n_units, dtype=np.int64)
    packed = state.job_loads(job_ids, sources)
    if packed is not None:  # (packed when the jobs were registered)
        counts, extra_column, extra_bytes = packed
    else:
        counts = list(map(len, sources))
        extra_column = sparse.columns(chain.from_iterable(sources), sum(counts))
        extra_bytes = np.fromiter(chain.from_iterable(map(_VALUES, sources)), float, sum(counts))
        # (read-only as the packed bytes are: one compiled kernel serves both)
        extra_bytes.flags.writeable = False
    extra_counts[with_future] = counts
    coflow_rows = _rows(sparse, state.active_ids(active))
    stage_ptr = offsets(list(map(len, stage_units)))
    order, bounds, weights_ok = job_stage_order(
        sparse.row_ptr, sparse.column, sparse.size_bytes, state.column_bps(sparse), unit_of,
        coflow_position, coflow_rows, budget, done, offsets(extra_counts), extra_column,
        extra_bytes, stage_ptr,
        np.fromiter(chain.from_iterable(stage_units), np.int64, stage_ptr[-1]),
        np.asarray(weights, dtype=float), slowest_first, srpt,
    )  # fmt: skip
    if not weights_ok:
        raise ValueError("weights must be > 0")  # (as bssi_order says it)
    ordered = list(map(ids.__getitem__, order.tolist()))
    ranks = _ranks_of(ordered, bounds)
    return _StageOrder(ranks, order, np.array(ordered, dtype=object), coflow_rows[order])


def _ranks_of(ordered: list[CoflowId], bounds: np.ndarray) -> tuple[tuple[CoflowId, ...], ...]:
    """The ranks of the coflows ``ordered``, rank ``r`` theirs from ``bounds[r]`` on."""
    if len(bounds) == len(ordered) + 1:  # one coflow per rank
        return one_coflow_ranks(ordered)
    bounds = bounds.tolist()
    return tuple(map(tuple, map(ordered.__getitem__, map(slice, bounds, bounds[1:]))))


def _unit(coflow: Coflow) -> tuple:
    """The unit of work a coflow belongs to: ``(0, job_id)``, or ``(1, coflow_id)`` if jobless."""
    return (0, coflow.job_id) if coflow.job_id is not None else (1, coflow.coflow_id)


POLICIES: dict[str, type[Policy]] = {
    Fair.name: Fair,
    FifoLM.name: FifoLM,
    Sincronia.name: Sincronia,
    Jpas.name: Jpas,
    Beamer.name: Beamer,
    Varys.name: Varys,
}

# the entry-point group in which an installed distribution offers network policies
# (controller.plugins)
NETWORK_POLICY_GROUP = "hpo_scheduling.network_policies"

# the policies of outside code loaded in this process, by the reference they were loaded by
# (package.module:Class or an entry point's name): loaded once, then looked up like a built-in
_LOADED: dict[str, type[Policy]] = {}


def policy_class(name: str, load: bool = True) -> type[Policy]:
    """The policy ``name`` names: a built-in's name, or (see :mod:`controller.plugins`)
    ``package.module:Class`` or an entry point of :data:`NETWORK_POLICY_GROUP`, imported the
    first time. ``load=False`` imports nothing: only the built-ins and the policies this
    process loaded already are found (the controller's REST API and its saved setting).

    Raises:
        ValueError: one line: an unknown name (naming the choices), or why the class named
            could not be loaded.
    """
    try:
        return POLICIES[name]
    except KeyError:
        pass
    if name in _LOADED:
        return _LOADED[name]
    unknown = f"unknown policy {name!r}; choose from {', '.join(sorted(POLICIES))}"
    if not load or not isinstance(name, str):
        raise ValueError(unknown)
    found = plugins.load(
        name, base=Policy, group=NETWORK_POLICY_GROUP, kind="policy", builtins=POLICIES
    )
    if found is None:
        raise ValueError(unknown + plugins.unknown_hint(name, NETWORK_POLICY_GROUP))
    _check_declared_options(name, found)
    _LOADED[name] = found
    return found


def is_plugin_reference(name: str) -> bool:
    """Whether ``name`` could name a policy of outside code (``module:Class``, or an installed
    entry point's name), telling it from a misspelt built-in without importing anything."""
    return ":" in name or name in plugins.entry_points(NETWORK_POLICY_GROUP)


def _check_declared_options(name: str, policy: type[Policy]) -> None:
    """A loaded policy's ``OPTIONS`` are what the command line and the REST API check
    options against: a dict of :class:`OptionSpec` by keyword, or a one-line refusal."""
    declared = policy.OPTIONS
    if not isinstance(declared, dict) or not all(
        isinstance(key, str) and isinstance(spec, OptionSpec) for key, spec in declared.items()
    ):
        raise ValueError(
            f"policy {name!r}: {policy.__qualname__}.OPTIONS must map each option's keyword "
            "to an OptionSpec"
        )


def _option_value(
    name: str, key: str, convert: Callable[[OptionSpec], Any], load: bool = True
) -> Any:
    """``convert(spec)`` for option ``key`` of policy ``name``, every ``ValueError`` naming
    the policy and the option."""
    declared = policy_class(name, load).OPTIONS
    if key not in declared:
        allowed = ", ".join(sorted(declared)) or "none"
        raise ValueError(f"policy {name!r} has no option {key!r} (options: {allowed})")
    try:
        return convert(declared[key])
    except ValueError as exc:
        raise ValueError(f"{name} option {key} {exc}") from None


def check_options(name: str, options: Mapping[str, Any], load: bool = True) -> dict[str, Any]:
    """``options`` of policy ``name`` checked against its declaration (JSON-typed values);
    ``load``: as :func:`policy_class` takes it.

    Raises:
        ValueError: unknown policy or option, or a value of the wrong type or range, naming it.
    """
    return {
        key: _option_value(name, key, lambda spec, v=value: spec.check(v), load)
        for key, value in options.items()
    }


def parse_option_text(name: str, key: str, text: str) -> Any:
    """A command-line ``KEY=VALUE`` of policy ``name`` converted by its declared type."""
    return _option_value(name, key, lambda spec: spec.parse_text(text))


def make_policy(name: str, **options) -> Policy:
    """A new policy instance by name, e.g. ``make_policy("beamer", use_rates=True)`` or
    ``make_policy("examples.smallest_first:SmallestFirst")`` (see :func:`policy_class`).

    Raises:
        ValueError: unknown name or option, a bad value, or a class that could not be loaded,
            naming it.
    """
    return policy_class(name)(**check_options(name, options))


def policy_label(name: str) -> str:
    """What runs of policy ``name`` are labelled and their files named by: its class's
    ``name`` (a built-in's is its name; ``package.module:Class`` has a colon, a file name
    should not)."""
    return policy_class(name).name


__all__ = [
    "NETWORK_POLICY_GROUP",
    "POLICIES",
    "PROGRESS_READINGS",
    "STAGE_ORDER_READINGS",
    "WITHIN_STAGE_READINGS",
    "OptionSpec",
    "Beamer",
    "Fair",
    "FifoLM",
    "Jpas",
    "Policy",
    "Sincronia",
    "Varys",
    "check_options",
    "is_plugin_reference",
    "madd",
    "make_policy",
    "parse_option_text",
    "policy_class",
    "policy_label",
]
