"""The scheduling data model: hosts and their ports, flows, coflows, jobs, stages.

Plain dataclasses with no framework imports, shared by the Ryu app, the simulator and the
experiment scripts. Every host has one egress port (what it sends) and one ingress port (what it
receives), each with a capacity in bit/s, as on a non-blocking "big switch". A flow uses its
source's egress port and its destination's ingress port.

Units are in the names: ``*_bytes``, ``*_bps`` (bits per second), ``*_s`` (seconds).
"""

from __future__ import annotations

import functools
import operator
from array import array
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, count, islice, repeat

import numpy as np

from controller.bssi import DemandMatrix, port_seconds_matrix

EGRESS = 0
INGRESS = 1

HostId = Hashable
Port = tuple  # (host, EGRESS | INGRESS)
CoflowId = int
JobId = int
StageId = int
FlowKey = tuple  # (coflow_id, flow_id)

DEFAULT_LINK_BPS = 1e9


def egress(host: HostId) -> Port:
    """The port on which ``host`` sends."""
    return (host, EGRESS)


def ingress(host: HostId) -> Port:
    """The port on which ``host`` receives."""
    return (host, INGRESS)


@dataclass
class Host:
    """A server attached to the switch.

    Args:
        name: host identifier (a Mininet name like ``"h1"`` or a trace port number).
        egress_bps: capacity of the host's uplink (what it can send).
        ingress_bps: capacity of the host's downlink (what it can receive).
    """

    name: HostId
    egress_bps: float = DEFAULT_LINK_BPS
    ingress_bps: float = DEFAULT_LINK_BPS


@dataclass
class HostPort:
    """How a host is attached: address, MAC, switch (datapath id) and port on it, link rate
    (from the topology description; ``switch`` ``None``: the only switch)."""

    name: str
    ip: str
    mac: str | None = None
    port: int | None = None
    bps: float | None = None
    switch: int | None = None


@dataclass
class Flow:
    """One transfer of a coflow from ``src`` to ``dst``.

    Args:
        src: sending host.
        dst: receiving host.
        size_bytes: total size of the flow.
        remaining_bytes: bytes not yet delivered (defaults to ``size_bytes``).
        flow_id: identifier unique within its coflow (its index by default).
    """

    src: HostId
    dst: HostId
    size_bytes: float
    remaining_bytes: float | None = None
    flow_id: int = 0

    def __post_init__(self) -> None:
        if self.size_bytes < 0:
            raise ValueError(f"flow {self.src}->{self.dst}: size_bytes must be >= 0")
        if self.remaining_bytes is None:
            self.remaining_bytes = self.size_bytes
        if not 0 <= self.remaining_bytes <= self.size_bytes:
            raise ValueError(
                f"flow {self.src}->{self.dst}: remaining_bytes must be in [0, size_bytes]"
            )


@dataclass(frozen=True)
class CoflowSummary:
    """A coflow's load in bulk, for callers that track flows in arrays (the simulator).

    Args:
        size_bytes: total bytes of the coflow.
        remaining_bytes: bytes not yet delivered.
        port_remaining_bytes: bytes still to cross each port.
    """

    size_bytes: float
    remaining_bytes: float
    port_remaining_bytes: Mapping[Port, float]


@dataclass
class Coflow:
    """A set of flows that is only useful once all of them have finished.

    Args:
        coflow_id: integer identifier (also the low 32 bits of its OpenFlow cookies).
        flows: the flows; their ``flow_id`` must be unique within the coflow.
        arrival_s: release time.
        job_id: the training job this coflow synchronises, if any.
        stage_id: the HPO stage it belongs to, if any (defaults to its job's stage).
        weight: importance in weighted completion time (Sincronia's ``w``).
        summary: the load in bulk instead of ``flows`` (which may then be empty); policies see
            the same per-port loads and totals, and rate caps come as per-coflow MADD times.
    """

    coflow_id: CoflowId
    flows: list[Flow]
    arrival_s: float = 0.0
    job_id: JobId | None = None
    stage_id: StageId | None = None
    weight: float = 1.0
    summary: CoflowSummary | None = None

    def __post_init__(self) -> None:
        if self.weight <= 0:
            raise ValueError(f"coflow {self.coflow_id}: weight must be > 0")
        ids = [flow.flow_id for flow in self.flows]
        if len(set(ids)) != len(ids):
            # Flows given without ids are numbered in order.
            if all(i == 0 for i in ids):
                for index, flow in enumerate(self.flows):
                    flow.flow_id = index
            else:
                raise ValueError(f"coflow {self.coflow_id}: duplicate flow_id")

    @property
    def size_bytes(self) -> float:
        """Total bytes of the coflow."""
        if self.summary is not None:
            return self.summary.size_bytes
        return sum(flow.size_bytes for flow in self.flows)

    @property
    def remaining_bytes(self) -> float:
        """Bytes not yet delivered."""
        if self.summary is not None:
            return self.summary.remaining_bytes
        return sum(flow.remaining_bytes for flow in self.flows)

    def port_bytes(self) -> dict[Port, float]:
        """Remaining bytes this coflow must still put through each port."""
        if self.summary is not None:
            return dict(self.summary.port_remaining_bytes.items())
        return port_bytes(self.flows)

    @property
    def sent_bytes(self) -> float:
        """Bytes delivered so far."""
        return self.size_bytes - self.remaining_bytes

    @property
    def done(self) -> bool:
        """Whether every byte is delivered."""
        return self.remaining_bytes <= 0


@dataclass(frozen=True)
class SparsePortBytes:
    """Every active coflow's bytes left per port as sparse rows, for policies that compute in
    arrays (a state that keeps its loads as arrays offers it, see
    :meth:`ClusterState.sparse_port_bytes`).

    Host ``h`` is ``hosts[h]`` (``h`` itself when ``hosts`` is ``None``, as in the simulator);
    column ``h`` is its egress port and column ``n_hosts + h`` its ingress port. Row ``i``'s
    entries are ``row_ptr[i]:row_ptr[i + 1]``: exactly the items of the coflow's
    :meth:`Coflow.port_bytes`, in the same order and with the same values (columns ascending
    in the simulator's).

    Args:
        row_ptr: ``rows + 1`` offsets into ``column`` and ``size_bytes``.
        column: each entry's column.
        size_bytes: each entry's bytes left (> 0).
        ids: each row's coflow id (a policy that lists the coflows in this order needs no
            lookup of their rows).
        n_hosts: hosts, half the columns.
        hosts: each host's name, if not its number.
    """

    row_ptr: np.ndarray
    column: np.ndarray
    size_bytes: np.ndarray
    ids: Sequence[CoflowId]
    n_hosts: int
    hosts: Sequence[HostId] | None = None

    @functools.cached_property
    def row_of(self) -> dict[CoflowId, int]:
        """Each active coflow's row (made on first use)."""
        return dict(zip(self.ids, range(len(self.ids)), strict=True))

    def rows_of(self, ids: list[CoflowId]) -> np.ndarray | None:
        """The row of each of the coflows ``ids``, in that order; ``None`` when they are every
        row in row order (the usual case: a policy lists coflows in arrival order), which needs
        no lookup."""
        if ids == self.ids:
            return None
        return np.fromiter(map(self.row_of.__getitem__, ids), np.int64, len(ids))

    @classmethod
    def from_mappings(
        cls,
        ids: Sequence[CoflowId],
        loads: Sequence[Mapping[Port, float]],
        more_hosts: Iterable[HostId] = (),
    ) -> SparsePortBytes:
        """The rows of the coflows ``ids`` with the bytes per port ``loads``: each mapping's
        items in its order, as given; hosts numbered by first use, then ``more_hosts`` (those
        of the jobs' loads, say).

        Raises:
            ValueError: a port's direction is neither :data:`EGRESS` nor :data:`INGRESS`.
        """
        in_rows = (port[0] for load in loads for port in load)
        hosts = tuple(dict.fromkeys(chain(in_rows, more_hosts)))
        n_hosts = len(hosts)
        column_of = {(host, way): way * n_hosts + h for h, host in enumerate(hosts)
                     for way in (EGRESS, INGRESS)}  # fmt: skip
        row_ptr = np.zeros(len(loads) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, loads), np.int64, len(loads)), out=row_ptr[1:])
        n_entries = int(row_ptr[-1])
        try:
            column = np.fromiter(map(column_of.__getitem__, chain.from_iterable(loads)), np.int64,
                                 n_entries)  # fmt: skip
        except KeyError as error:
            raise ValueError(f"port {error} is not (host, EGRESS or INGRESS)") from None
        size_bytes = np.fromiter(chain.from_iterable(map(_VALUES, loads)), float, n_entries)
        return cls(row_ptr, column, size_bytes, list(ids), n_hosts, hosts)

    @classmethod
    def from_dense(cls, bits_left: np.ndarray, row_of: Mapping[CoflowId, int]) -> SparsePortBytes:
        """The rows of a dense array of bits left (one row per coflow, ``2 * n_hosts``
        columns, coflow ``c`` in row ``row_of[c]``): its nonzero entries, each as
        ``bits / 8.0``.

        Raises:
            ValueError: ``row_of`` does not give every row one coflow.
        """
        bits_left = np.asarray(bits_left, dtype=float)
        ids = sorted(row_of, key=row_of.__getitem__)
        if [row_of[c] for c in ids] != list(range(bits_left.shape[0])):
            raise ValueError(f"row_of must give rows 0..{bits_left.shape[0] - 1} one coflow each")
        rows, columns = np.nonzero(bits_left)  # row-major: by row, then by column
        row_ptr = np.zeros(bits_left.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=bits_left.shape[0]), out=row_ptr[1:])
        return cls(row_ptr, columns.astype(np.int64), bits_left[rows, columns] / 8.0, ids,
                   bits_left.shape[1] // 2)  # fmt: skip

    def columns(self, ports: Iterable[Port], count: int = -1) -> np.ndarray:
        """The column of each of ``ports`` (``count`` of them, if known).

        Raises:
            ValueError: a port's host is not one of the hosts ``0 .. n_hosts - 1``.
        """
        try:
            return np.fromiter(map(self.column_of.__getitem__, ports), np.int64, count)
        except KeyError as error:
            known = f"0..{self.n_hosts - 1}" if self.hosts is None else f"{list(self.hosts)}"
            raise ValueError(f"port {error} is not one of hosts {known}") from None

    @functools.cached_property
    def column_of(self) -> dict[Port, int]:
        """Each port's column (made on first use)."""
        if self.hosts is None:
            return _host_port_columns(self.n_hosts)
        n_hosts, hosts = self.n_hosts, enumerate(self.hosts)
        return {(host, way): way * n_hosts + h for h, host in hosts for way in (EGRESS, INGRESS)}

    def rows(self, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(row_ptr, column, size_bytes)`` of the rows ``rows``, in that order (every row
        when ``None``)."""
        if rows is None:
            return self.row_ptr, self.column, self.size_bytes
        first = self.row_ptr[rows]
        lengths = self.row_ptr[rows + 1] - first
        row_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=row_ptr[1:])
        entries = np.repeat(first - row_ptr[:-1], lengths) + np.arange(row_ptr[-1])
        return row_ptr, self.column[entries], self.size_bytes[entries]


@functools.cache
def _host_port_columns(n_hosts: int) -> dict[Port, int]:
    """:class:`SparsePortBytes`' column of every port of hosts ``0 .. n_hosts - 1``."""
    return {(host, direction): direction * n_hosts + host
            for direction in (EGRESS, INGRESS) for host in range(n_hosts)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class _PackedJob:
    """A job's loads per iteration in a :class:`CoflowIndex`, packed as a coflow's are: the
    ``bytes_per_iteration`` dict they were read from, its ports (``2 * host number +
    direction``, int64) and its bytes (float64), in the dict's order."""

    source: Mapping[Port, float]
    n_ports: int
    ports: bytes
    load_bytes: bytes


@dataclass(frozen=True, slots=True)
class _Indexed:
    """A coflow in a :class:`CoflowIndex`, as read when it was put: its totals, and its
    :meth:`Coflow.port_bytes` as packed arrays (one C-speed join lists every coflow's), each
    port as ``2 * host number + direction`` (int64) with its bytes (float64)."""

    coflow: Coflow
    arrival_key: tuple[float, CoflowId]
    size_bytes: float
    remaining_bytes: float
    n_ports: int
    ports: bytes
    load_bytes: bytes
    keys: bytes | None  # its id, job and stage as a CoflowKeys row; None if one is not an int64


@dataclass(frozen=True)
class CoflowKeys:
    """The ids of a state's active coflows and of their jobs and stages, as arrays in
    :meth:`ClusterState.active_coflows` order, for policies that group coflows at C speed
    (Beamer by job and stage); a :class:`CoflowIndex` and the simulator keep them packed.

    Args:
        coflow_id: each coflow's id.
        job_id: its job's id (0 where it has none).
        has_job: whether it has a job.
        stage_id: its own stage's id (0 where it has none).
        has_stage: whether it has a stage of its own.
        in_row_order: whether coflow ``i`` is row ``i`` of the state's sparse loads (a
            :class:`CoflowIndex`'s are), else its row is looked up by id.
    """

    coflow_id: np.ndarray
    job_id: np.ndarray
    has_job: np.ndarray
    stage_id: np.ndarray
    has_stage: np.ndarray
    in_row_order: bool = False

    @staticmethod
    def pack(coflow: Coflow) -> bytes | None:
        """A coflow's row, packed (an absent job or stage is 0 with a 0 flag); ``None`` if an
        id does not fit an int64."""
        job, stage = coflow.job_id, coflow.stage_id
        try:
            return array("q", [coflow.coflow_id, job is not None, job or 0, stage is not None,
                               stage or 0]).tobytes()  # fmt: skip
        except (OverflowError, TypeError):
            return None

    @classmethod
    def of(cls, coflows: Sequence[Coflow]) -> CoflowKeys | None:
        """The keys of ``coflows``, read from the objects at C speed (for a state that keeps
        none packed); ``None`` if an id does not fit an int64."""
        if not coflows:
            return cls.unpack(b"")
        ids, jobs, stages = zip(*map(_ID_JOB_STAGE, coflows), strict=True)
        has_job = np.fromiter(map(operator.is_not, jobs, repeat(None)), bool, len(jobs))
        has_stage = np.fromiter(map(operator.is_not, stages, repeat(None)), bool, len(stages))
        try:
            return cls(int64_ids(ids), int64_ids(jobs), has_job, int64_ids(stages), has_stage)
        except (OverflowError, TypeError):
            return None

    @classmethod
    def unpack(cls, packed: bytes, in_row_order: bool = False) -> CoflowKeys:
        """The keys from rows packed by :meth:`pack`, one after the other."""
        return cls.from_rows(np.frombuffer(packed, dtype=np.int64).reshape(-1, 5), in_row_order)

    @classmethod
    def from_rows(cls, rows: np.ndarray, in_row_order: bool = False) -> CoflowKeys:
        """The keys from packed rows as an ``n x 5`` int64 array."""
        return cls(rows[:, 0].copy(), rows[:, 2].copy(), rows[:, 1] != 0, rows[:, 4].copy(),
                   rows[:, 3] != 0, in_row_order)  # fmt: skip


def int64_ids(ids: Sequence[int | None]) -> np.ndarray:
    """``ids`` as int64 (0 for ``None``), at C speed; ``OverflowError`` or ``TypeError`` for an
    id that is not an int64."""
    if None in ids:
        ids = [0 if i is None else i for i in ids]
    return np.asarray(array("q", ids), dtype=np.int64)


_ID_JOB_STAGE = operator.attrgetter("coflow_id", "job_id", "stage_id")
_ENTRY_COFLOW = operator.attrgetter("coflow")
_KEYS = operator.attrgetter("keys")
_N_PORTS = operator.attrgetter("n_ports")
_PORTS = operator.attrgetter("ports")
_LOAD_BYTES = operator.attrgetter("load_bytes")
_LEFT = operator.attrgetter("remaining_bytes")
_SIZE = operator.attrgetter("size_bytes")
_COFLOW_ID = operator.attrgetter("coflow_id")
_VALUES = operator.methodcaller("values")
_SOURCE = operator.attrgetter("source")
_WEIGHT = operator.attrgetter("weight")


_JOB_NUMBERS = np.dtype(
    [("job_id", np.int64), ("budget", np.int64), ("done", np.int64), ("arrival_s", np.float64),
     ("stage_id", np.int64), ("has_stage", np.bool_), ("live", np.bool_)]
)  # fmt: skip


@dataclass(frozen=True)
class JobTable:
    """The numbers of the jobs of a :class:`CoflowIndex` as arrays, at one moment, for
    policies that read every job at every reorder (JPAS: progress and arrival; Beamer: budget,
    iterations done and stage): a gather instead of a Python step per job.

    A state offers it only for the very jobs dict it was read from (:attr:`jobs`: the one
    the state's maker named with :meth:`CoflowIndex.mirror`, or the simulator's HPO driver
    keeps its numbers for): the same job objects, so the same numbers.

    Args:
        job_ids: the jobs' ids, ascending.
        rows: each one's row of the numbers.
        numbers: per row: id, iteration budget, iterations done, arrival, stage id (0 for
            none) and whether it has one (at least one row, so that a gather at -1 for a job
            the table lacks, masked afterwards, reads one).
        jobs: the jobs dict these are the numbers of.
        rows_are_ids: every job's row is its id, and a row's ``live`` says whether the table
            has that job (the simulator's HPO driver keeps its numbers so): a job's row is then
            found without a search.
    """

    job_ids: np.ndarray
    rows: np.ndarray
    numbers: np.ndarray
    jobs: Mapping[JobId, Job]
    rows_are_ids: bool = False

    @staticmethod
    def empty_numbers(n_rows: int) -> np.ndarray:
        """Rows of numbers for ``n_rows`` jobs, all zero (``live`` false: no job)."""
        return np.zeros(n_rows, dtype=_JOB_NUMBERS)

    def rows_of(self, job_ids: np.ndarray) -> np.ndarray:
        """Each of ``job_ids``' row of :attr:`numbers` (-1 for a job the table lacks)."""
        if self.rows_are_ids:
            inside = (job_ids >= 0) & (job_ids < len(self.numbers))
            live = self.numbers["live"][np.where(inside, job_ids, 0)]
            return np.where(inside & live, job_ids, -1)
        if not len(self.job_ids):
            return np.full(len(job_ids), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.job_ids, job_ids), len(self.job_ids) - 1)
        return np.where(self.job_ids[at] == job_ids, self.rows[at], -1)


class CoflowIndex:
    """Coflows with their loads read once, when they are put, so that a state lists its active
    coflows and offers their loads as :class:`SparsePortBytes` without reading every coflow's
    flows at every reorder: a reorder joins the coflows' packed loads at C speed. The
    controller's registry keeps one, updated as coflows are registered, report progress and
    finish.

    A coflow's loads are read when it is put: put it again after its flows change. Hosts are
    numbered in the order they are first seen, in a coflow's flows, a job's loads per
    iteration (:meth:`put_job`: packed the same way, Beamer reads them) or by
    :meth:`add_hosts`.
    """

    def __init__(self, coflows: Iterable[Coflow] = ()) -> None:
        # the coflows with bytes left, in (arrival, id) order when _ordered; and the others
        self._active: dict[CoflowId, _Indexed] = {}
        self._ordered = True
        self._done: dict[CoflowId, _Indexed] = {}
        self._hosts: list[HostId] = []
        self._host_number: dict[HostId, int] = {}
        self._view: CoflowLoads | None = None  # the snapshot, until the next change
        self._unkeyed: set[CoflowId] = set()  # active coflows whose keys are not packed
        # the last snapshot's rows, and what changed since: each coflow put or removed (and
        # whether it was active then), and those taken out of the active order (deleted, or
        # put back at its end); the next snapshot splices the changed rows into the last one's
        self._rows: _Rows | None = None
        self._touched: dict[CoflowId, bool] = {}
        self._moved: set[CoflowId] = set()
        self._serial = 0  # the last snapshot's
        # each job's loads per iteration, packed (copied before a change once a snapshot
        # holds the dict)
        self._jobs: dict[JobId, _PackedJob] = {}
        self._jobs_shared = False
        # each job's numbers (a JobTable's), a row per job id, with the job object they were
        # read from; the table of the last snapshot until a job changes; the ids in order
        # until a job comes or goes; the jobs dict named by mirror() until a job changes
        self._job_row: dict[JobId, int] = {}
        self._job_objects: list[Job | None] = []
        self._job_numbers = JobTable.empty_numbers(16)
        self._job_table: JobTable | None = None
        self._table_stale = False  # (the snapshot's table, until the next one)
        self._job_order: tuple[np.ndarray, np.ndarray] | None = None
        self._mirrored: Mapping[JobId, Job] | None = None
        self._tabled = True  # (False once a job's id or stage id is not an int64)
        for coflow in coflows:
            self.put(coflow)

    def add_hosts(self, hosts: Iterable[HostId]) -> None:
        """Number the hosts not seen yet."""
        for host in hosts:
            if host not in self._host_number:
                self._host_number[host] = len(self._hosts)
                self._hosts.append(host)
                self._view = None

    def put(self, coflow: Coflow) -> None:
        """Add a coflow, or replace the one with its id (its loads are read now)."""
        load = coflow.port_bytes()
        entry = _Indexed(
            coflow,
            (coflow.arrival_s, coflow.coflow_id),
            coflow.size_bytes,
            coflow.remaining_bytes,
            len(load),
            *self._pack(load),
            CoflowKeys.pack(coflow),
        )
        coflow_id, active = coflow.coflow_id, self._active
        self._view = None
        self._touch(coflow_id)
        self._done.pop(coflow_id, None)
        self._unkeyed.discard(coflow_id)
        if entry.remaining_bytes <= 0:  # (Coflow.done)
            if active.pop(coflow_id, None) is not None:
                self._left(coflow_id)
            self._done[coflow_id] = entry
            return
        if entry.keys is None:
            self._unkeyed.add(coflow_id)
        old = active.get(coflow_id)
        if old is not None and old.arrival_key == entry.arrival_key:
            active[coflow_id] = entry  # keeps its place
            return
        if old is not None:
            del active[coflow_id]
            self._left(coflow_id)
        if active and next(reversed(active.values())).arrival_key > entry.arrival_key:
            self._ordered = False
        active[coflow_id] = entry

    def put_job(self, job: Job) -> None:
        """Add a job's loads per iteration, or replace the ones with its id (read now: put it
        again with a new ``bytes_per_iteration``; the same dict again changes nothing)."""
        self._number(job)
        load = job.bytes_per_iteration
        kept = self._jobs.get(job.job_id)
        if kept is not None and kept.source is load:
            return  # (the same dict: the same loads)
        self._own_jobs()[job.job_id] = _PackedJob(load, len(load), *self._pack(load))
        self._view = None

    def _number(self, job: Job) -> None:
        """Note a job's numbers in its row (a new row for a new id)."""
        row = self._job_row.get(job.job_id)
        if row is not None and self._job_objects[row] is job:
            return  # (the same object: the same numbers)
        self._mirrored, self._table_stale = None, True
        if not self._tabled:
            return
        stage = job.stage_id
        try:
            numbers = (job.job_id, job.iteration_budget, job.iterations_done, job.arrival_s,
                       0 if stage is None else stage, stage is not None, True)  # fmt: skip
            self._own_numbers()
            if row is None:
                row = len(self._job_objects)
                if row == len(self._job_numbers):
                    grown = JobTable.empty_numbers(max(16, 2 * row))
                    grown[:row] = self._job_numbers
                    self._job_numbers = grown
                self._job_numbers[row] = numbers
                self._job_row[job.job_id] = row
                self._job_objects.append(job)
                self._job_order = None
            else:
                self._job_numbers[row] = numbers
                self._job_objects[row] = job
        except (OverflowError, TypeError, ValueError):  # an id that is not an int64
            self._tabled, self._job_table = False, None

    def _pack(self, load: Mapping[Port, float]) -> tuple[bytes, bytes]:
        """A load's ports (``2 * host number + direction``, its hosts numbered if new) and
        bytes, packed in its order."""
        self.add_hosts([port[0] for port in load])
        number = self._host_number
        return (
            array("q", [2 * number[host] + way for host, way in load]).tobytes(),
            array("d", load.values()).tobytes(),
        )

    def remove_job(self, job_id: JobId) -> None:
        """Forget a job's loads (no error if they are not there)."""
        if job_id in self._jobs:
            del self._own_jobs()[job_id]
            self._view = None
        row = self._job_row.pop(job_id, None)
        if row is not None:
            self._mirrored, self._table_stale, self._job_order = None, True, None
            self._own_numbers()
            self._job_numbers["live"][row] = False
            self._job_objects[row] = None

    def mirror(self, jobs: Mapping[JobId, Job]) -> None:
        """Say that the jobs put (and not removed) are exactly ``jobs``, object for object,
        until the next put or removal of a job: snapshots then offer their :class:`JobTable`
        to states whose ``jobs`` is this very dict (:meth:`ClusterState.job_table`). The
        caller must not change the dict, or a job in it, afterwards."""
        self._mirrored, self._table_stale = jobs, True

    def _table(self) -> JobTable | None:
        """The jobs' numbers as a :class:`JobTable` (kept until a job changes), for the jobs
        dict named by :meth:`mirror`; ``None`` without one."""
        if self._mirrored is None or not self._tabled:
            return None
        if self._job_table is None or self._job_table.jobs is not self._mirrored:
            n_rows = len(self._job_objects)
            if self._job_order is None:
                numbers = self._job_numbers[:n_rows]
                live = np.flatnonzero(numbers["live"])
                rows = live[np.argsort(numbers["job_id"][live], kind="stable")]
                self._job_order = (numbers["job_id"][rows], rows)
            job_ids, rows = self._job_order
            self._job_table = JobTable(job_ids, rows, self._job_numbers, self._mirrored)
        return self._job_table

    def _own_numbers(self) -> None:
        """Copy the jobs' numbers before a change if a snapshot's table holds them."""
        if self._job_table is not None:
            self._job_numbers, self._job_table = self._job_numbers.copy(), None

    def _own_jobs(self) -> dict[JobId, _PackedJob]:
        if self._jobs_shared:
            self._jobs, self._jobs_shared = dict(self._jobs), False
        return self._jobs

    def remove(self, coflow_id: CoflowId) -> None:
        """Forget a coflow (no error if it is not there)."""
        if coflow_id in self._active:
            self._touch(coflow_id)
            del self._active[coflow_id]
            self._left(coflow_id)
            self._view = None
        self._done.pop(coflow_id, None)
        self._unkeyed.discard(coflow_id)

    def _touch(self, coflow_id: CoflowId) -> None:
        """Note that a coflow is about to change (before it does)."""
        if self._rows is None or coflow_id in self._touched:
            return
        if len(self._touched) >= max(SPLICE_LIMIT, len(self._rows.ids) // 8):
            # too many changes to splice: the next snapshot is made anew
            self._rows, self._touched, self._moved = None, {}, set()
            return
        self._touched[coflow_id] = coflow_id in self._active  # (active now = in the rows)

    def _left(self, coflow_id: CoflowId) -> None:
        """Note that a coflow was taken out of the active order."""
        if self._rows is not None:
            self._moved.add(coflow_id)

    def __contains__(self, coflow_id: object) -> bool:
        return coflow_id in self._active or coflow_id in self._done

    def __len__(self) -> int:
        return len(self._active) + len(self._done)

    def snapshot(self) -> CoflowLoads:
        """The active coflows and their loads as they are now (kept until the next change; a
        state holds it, so later puts do not change what an older state shows)."""
        if self._view is not None:
            if self._table_stale:  # (only the jobs' numbers changed)
                table, self._table_stale = self._table(), False
                if table is not self._view.job_table:
                    self._view = replace(self._view, job_table=table)
            return self._view
        self._table_stale = False
        if not self._ordered:
            ordered = sorted(self._active.values(), key=operator.attrgetter("arrival_key"))
            self._active = {entry.coflow.coflow_id: entry for entry in ordered}
            self._ordered = True
            self._rows = None
        rows = self._rows
        changed: tuple[int, frozenset[CoflowId]] | None = None
        if rows is None or rows.keys is None or self._unkeyed:
            rows = self._rows = _Rows.of(list(self._active.values()))
        else:
            rows = self._rows = rows.spliced(self._active, self._touched, self._moved)
            changed = (self._serial, frozenset(self._touched))
        self._touched, self._moved = {}, set()
        self._serial = next(_SNAPSHOTS)
        n_hosts = len(self._hosts)
        column = _columns(rows.ports, n_hosts)
        sparse = SparsePortBytes(rows.row_ptr, column, rows.load_bytes.copy(), rows.ids,
                                 n_hosts, tuple(self._hosts))  # fmt: skip
        self._view = CoflowLoads(
            tuple(rows.coflows),
            sparse,
            rows.size_bytes,
            rows.remaining_bytes,
            None if rows.keys is None else CoflowKeys.from_rows(rows.keys.view(np.int64), True),
            self._jobs,
            self._table(),
            rows.weights,
            rows.by_id,
            self._serial,
            changed,
        )
        self._jobs_shared = True
        return self._view


def _columns(ports: np.ndarray, n_hosts: int) -> np.ndarray:
    """:class:`SparsePortBytes` columns of ports packed as ``2 * host number + direction``."""
    return (ports & 1) * n_hosts + (ports >> 1)


# a snapshot with more coflows changed than this (and than an eighth of its rows) is made anew
SPLICE_LIMIT = 32
_SNAPSHOTS = count(1)  # serial numbers of snapshots, unique in the process
_KEY_ROW = np.dtype((np.void, 40))  # a CoflowKeys row, moved as one item


@dataclass(frozen=True)
class _Rows:
    """What a :class:`CoflowIndex` snapshot is made of, per active coflow in row order: the
    next snapshot is this with the changed coflows' rows spliced in (every list and array is
    new, so older snapshots keep what they showed)."""

    ids: list[CoflowId]
    coflows: list[Coflow]
    size_bytes: list[float]
    remaining_bytes: list[float]
    weights: np.ndarray  # per row
    row_ptr: np.ndarray  # the rows' offsets into the entries
    ports: np.ndarray  # per entry, packed as ``2 * host number + direction``
    load_bytes: np.ndarray  # per entry
    keys: np.ndarray | None  # the CoflowKeys rows (n x 1 of 5 int64); None if one has none
    by_id: dict[CoflowId, Coflow]  # the coflows by id, in row order

    @classmethod
    def of(cls, entries: list[_Indexed]) -> _Rows:
        """The rows of ``entries``, joined at C speed."""
        keys = list(map(_KEYS, entries))
        row_ptr = np.zeros(len(entries) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(_N_PORTS, entries), np.int64, len(entries)), out=row_ptr[1:])
        coflows = list(map(_ENTRY_COFLOW, entries))
        ids = list(map(_COFLOW_ID, coflows))
        return cls(
            ids,
            coflows,
            list(map(_SIZE, entries)),
            list(map(_LEFT, entries)),
            np.fromiter(map(_WEIGHT, coflows), float, len(entries)),
            row_ptr,
            np.frombuffer(b"".join(map(_PORTS, entries)), dtype=np.int64),
            np.frombuffer(b"".join(map(_LOAD_BYTES, entries)), dtype=float),
            None if None in keys else np.frombuffer(b"".join(keys), _KEY_ROW).reshape(-1, 1),
            dict(zip(ids, coflows, strict=True)),
        )

    def spliced(
        self, active: dict[CoflowId, _Indexed], touched: dict[CoflowId, bool], moved: set
    ) -> _Rows:
        """These rows after the changes to ``touched`` (each with whether it was one of these
        rows): a row whose coflow left the active order (``moved``, or not active) goes, one
        put again in its place is replaced, and the coflows appended since follow the rest
        (an active coflow that was not touched kept its place, before every appended one)."""
        # each of these rows that changed: None if it goes, else the entry that replaces it
        changed: dict[int, _Indexed | None] = {}
        for coflow_id, was_row in touched.items():
            if was_row:
                stays = coflow_id in active and coflow_id not in moved
                changed[self.ids.index(coflow_id)] = active[coflow_id] if stays else None
        n_kept = len(self.ids) - sum(entry is None for entry in changed.values())
        appended = list(map(active.__getitem__, islice(reversed(active), len(active) - n_kept)))
        # the new rows in order: runs (first, end) of these rows, and new entries
        pieces: list[tuple[int, int] | _Indexed] = []
        first = 0
        for row in sorted(changed):
            if first < row:
                pieces.append((first, row))
            if changed[row] is not None:
                pieces.append(changed[row])
            first = row + 1
        if first < len(self.ids):
            pieces.append((first, len(self.ids)))
        pieces.extend(reversed(appended))
        if not pieces:
            return _Rows.of([])
        # the coflows by id: a row changed in place keeps its place, those that go are
        # dropped, the appended ones follow (a dict's order, as the rows')
        by_id = self.by_id.copy()
        for row, entry in changed.items():
            if entry is None:
                del by_id[self.ids[row]]
            else:
                by_id[self.ids[row]] = entry.coflow
        by_id.update((entry.coflow.coflow_id, entry.coflow) for entry in reversed(appended))
        ptr = self.row_ptr
        old_n_ports = ptr[1:] - ptr[:-1]
        ids, coflows, size_bytes, remaining_bytes, weights = [], [], [], [], []
        n_ports, ports, load_bytes, keys = [], [], [], []
        for piece in pieces:
            if type(piece) is tuple:
                a, b = piece
                ids += self.ids[a:b]
                coflows += self.coflows[a:b]
                size_bytes += self.size_bytes[a:b]
                remaining_bytes += self.remaining_bytes[a:b]
                weights.append(self.weights[a:b])
                n_ports.append(old_n_ports[a:b])
                ports.append(self.ports[ptr[a] : ptr[b]])
                load_bytes.append(self.load_bytes[ptr[a] : ptr[b]])
                keys.append(self.keys[a:b])
            else:
                ids.append(piece.coflow.coflow_id)
                coflows.append(piece.coflow)
                size_bytes.append(piece.size_bytes)
                remaining_bytes.append(piece.remaining_bytes)
                weights.append([piece.coflow.weight])
                n_ports.append([piece.n_ports])
                ports.append(np.frombuffer(piece.ports, dtype=np.int64))
                load_bytes.append(np.frombuffer(piece.load_bytes))
                keys.append(np.frombuffer(piece.keys, dtype=_KEY_ROW).reshape(1, 1))
        row_ptr = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(np.concatenate(n_ports), out=row_ptr[1:])
        return _Rows(
            ids,
            coflows,
            size_bytes,
            remaining_bytes,
            np.concatenate(weights, dtype=float),
            row_ptr,
            np.concatenate(ports),
            np.concatenate(load_bytes),
            np.concatenate(keys),
            by_id,
        )


@dataclass(frozen=True)
class CoflowLoads:
    """A :class:`CoflowIndex`'s active coflows at one moment (:meth:`CoflowIndex.snapshot`),
    what a :class:`ClusterState` reads them from.

    Args:
        coflows: the coflows with bytes left, in (arrival, id) order.
        sparse: their bytes left per port, one row each in that order.
        size_bytes: each one's size.
        remaining_bytes: each one's bytes left.
        keys: their ids, jobs and stages as arrays (``None`` if an id does not fit an int64).
        jobs: the jobs' loads per iteration the index packed, by job id.
        job_table: the jobs' numbers, for the jobs dict the index mirrors (``None``: none).
        weights: each coflow's weight, an array (``None``: not kept).
        coflows_by_id: ``coflows`` by id, in the same order (``None``: not kept); shared by
            the states made from the snapshot, which must not change it.
        serial: the snapshot's number, unique in the process (0: none).
        changed_since: ``(serial, ids)``: the snapshot numbered ``serial`` had the same
            coflow objects as this one but for those of ``ids`` (put or removed since; some
            may be the same as before); ``None``: not known.
    """

    coflows: tuple[Coflow, ...]
    sparse: SparsePortBytes
    size_bytes: list[float]
    remaining_bytes: list[float]
    keys: CoflowKeys | None = None
    jobs: Mapping[JobId, _PackedJob] = field(default_factory=dict)
    job_table: JobTable | None = None
    weights: np.ndarray | None = None
    coflows_by_id: Mapping[CoflowId, Coflow] | None = None
    serial: int = 0
    changed_since: tuple[int, frozenset[CoflowId]] | None = None

    def job_loads(
        self, job_ids: Sequence[JobId], sources: Sequence[Mapping[Port, float]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Each of ``job_ids``' loads per iteration as ``(counts, columns, bytes)`` of the
        sparse loads' columns, joined from what the index packed, if it packed every one of
        them from the very dict the caller holds (``sources``); else ``None``."""
        packed = list(map(self.jobs.get, job_ids))
        if not all(map(operator.is_not, packed, repeat(None))) or not all(
            map(operator.is_, map(_SOURCE, packed), sources)
        ):
            return None
        ports = np.frombuffer(b"".join(map(_PORTS, packed)), dtype=np.int64)
        return (
            np.fromiter(map(_N_PORTS, packed), np.int64, len(packed)),
            _columns(ports, self.sparse.n_hosts),
            np.frombuffer(b"".join(map(_LOAD_BYTES, packed))),
        )

    def byte_counts(
        self, coflows: Sequence[Coflow], ids: list[CoflowId] | None = None
    ) -> tuple[list[float], list[float]]:
        """Each of ``coflows``' (active ones, with ``ids`` if known) size and bytes left."""
        rows = self.sparse.rows_of(list(map(_COFLOW_ID, coflows)) if ids is None else ids)
        if rows is None:
            return list(self.size_bytes), list(self.remaining_bytes)
        rows = rows.tolist()
        return (list(map(self.size_bytes.__getitem__, rows)),
                list(map(self.remaining_bytes.__getitem__, rows)))  # fmt: skip


@dataclass
class Job:
    """A data-parallel training job of one HPO configuration.

    Args:
        job_id: integer identifier.
        bytes_per_iteration: bytes the job's synchronisation puts on each port per iteration
            (``{egress("h1"): 1e6, ingress("h2"): 1e6, ...}``). To change it, give the job a
            new dict: a policy may keep what it derived from this one (Beamer does).
        iteration_budget: iterations the job trains in its current stage.
        iterations_done: iterations completed (compute and synchronisation) so far.
        stage_id: the stage the job belongs to.
        task_id: the HPO task the job belongs to.
        arrival_s: submission time (ties in progress-based orders go to the earliest).
        accuracy: the job's model accuracy at its last report that gave one (a fraction),
            ``None`` before the first; JPAS' ``progress="maif"`` reading ranks by its gain.
        accuracy_iterations: iterations done when ``accuracy`` was measured.
        previous_accuracy: the accuracy of the report before that one, at an earlier
            iteration count (``None`` until two reports at different counts).
        previous_accuracy_iterations: iterations done when ``previous_accuracy`` was measured.

    Change the four accuracy fields together, as :func:`accuracy_report` gives them.
    """

    job_id: JobId
    bytes_per_iteration: dict[Port, float] = field(default_factory=dict)
    iteration_budget: int = 1
    iterations_done: int = 0
    stage_id: StageId | None = None
    task_id: int | None = None
    arrival_s: float = 0.0
    accuracy: float | None = None
    accuracy_iterations: int = 0
    previous_accuracy: float | None = None
    previous_accuracy_iterations: int = 0

    def __post_init__(self) -> None:
        if self.iteration_budget <= 0:
            raise ValueError(f"job {self.job_id}: iteration_budget must be > 0")
        if self.iterations_done < 0:
            raise ValueError(f"job {self.job_id}: iterations_done must be >= 0")
        if self.previous_accuracy is not None and not (
            self.accuracy is not None
            and self.previous_accuracy_iterations < self.accuracy_iterations
        ):  # (the gain divides by the iterations between the two)
            raise ValueError(
                f"job {self.job_id}: a previous accuracy needs an accuracy measured at more "
                "iterations"
            )

    @property
    def progress(self) -> float:
        """Attained service: completed iterations over the stage budget, in [0, 1]."""
        return min(1.0, self.iterations_done / self.iteration_budget)

    @property
    def accuracy_gain(self) -> float | None:
        """Accuracy gained per iteration between the job's last two accuracy reports:
        ``(accuracy - previous_accuracy) / (accuracy_iterations -
        previous_accuracy_iterations)``; ``None`` with fewer than two reports."""
        if self.accuracy is None or self.previous_accuracy is None:
            return None
        iterations = self.accuracy_iterations - self.previous_accuracy_iterations
        return (self.accuracy - self.previous_accuracy) / iterations


# the fields accuracy_report sets, in Job and in the registry's job records alike
ACCURACY_FIELDS = (
    "accuracy", "accuracy_iterations", "previous_accuracy", "previous_accuracy_iterations"
)  # fmt: skip


def accuracy_report(holder, accuracy: float, iterations: int) -> dict:
    """The accuracy fields (:data:`ACCURACY_FIELDS`) of a job after it reports ``accuracy``
    measured with ``iterations`` iterations done; ``holder`` has the fields as they were (a
    :class:`Job`, or the registry's record of one).

    The report becomes the last one and the last one the previous, so that
    :attr:`Job.accuracy_gain` is the gain between the two latest measurements. A report at the
    iteration count of the last one replaces it (a retried report: no gain over zero
    iterations); one at fewer iterations than the last starts afresh (the job was set back).
    """
    last_at = holder.accuracy_iterations
    if holder.accuracy is None or iterations < last_at:
        previous, previous_at = None, 0
    elif iterations == last_at:
        previous, previous_at = holder.previous_accuracy, holder.previous_accuracy_iterations
    else:
        previous, previous_at = holder.accuracy, last_at
    return dict(zip(ACCURACY_FIELDS, (accuracy, iterations, previous, previous_at), strict=True))


@dataclass
class Stage:
    """One round of successive halving of an HPO task: it ends when its slowest job ends.

    Args:
        stage_id: integer identifier.
        job_ids: the jobs training in this stage.
        task_id: the HPO task.
        weight: importance in weighted stage completion time.
        arrival_s: start time of the stage.
    """

    stage_id: StageId
    job_ids: list[JobId] = field(default_factory=list)
    task_id: int | None = None
    weight: float = 1.0
    arrival_s: float = 0.0


@dataclass
class ClusterState:
    """Everything a policy may look at: the fabric, active coflows, jobs and stages.

    Args:
        hosts: known hosts with their port capacities; ports of unknown hosts get
            ``link_bps``.
        coflows: active coflows by id.
        jobs: registered jobs by id.
        stages: registered stages by id.
        now_s: current time.
        link_bps: capacity of ports of hosts missing from ``hosts``.
        loads: the active coflows of ``coflows`` with their loads read beforehand (a
            :class:`CoflowIndex`'s snapshot; the controller's registry keeps one index between
            reorders); the state then lists its active coflows and offers their loads as
            arrays from it (:meth:`sparse_port_bytes`). Its hosts must include those of the
            jobs' ports.
        stages_version: an object the state's maker replaces by a new one whenever the
            stages (ids, listed jobs, arrivals, weights), the set of jobs, a job's stage or
            its ``bytes_per_iteration`` change (``None``: not tracked). While it is the same
            object, a policy may keep what it derived from them (Beamer does).
    """

    hosts: dict[HostId, Host] = field(default_factory=dict)
    coflows: dict[CoflowId, Coflow] = field(default_factory=dict)
    jobs: dict[JobId, Job] = field(default_factory=dict)
    stages: dict[StageId, Stage] = field(default_factory=dict)
    now_s: float = 0.0
    link_bps: float = DEFAULT_LINK_BPS
    loads: CoflowLoads | None = None
    stages_version: object | None = None

    @classmethod
    def build(
        cls,
        coflows: Iterable[Coflow] = (),
        jobs: Iterable[Job] = (),
        stages: Iterable[Stage] = (),
        hosts: Iterable[Host] = (),
        indexed: bool = False,
        **kwargs,
    ) -> ClusterState:
        """A state from lists instead of dicts; ``indexed``: with a :class:`CoflowIndex` of
        the coflows (and of the jobs' hosts)."""
        state = cls(
            hosts={h.name: h for h in hosts},
            coflows={c.coflow_id: c for c in coflows},
            jobs={j.job_id: j for j in jobs},
            stages={s.stage_id: s for s in stages},
            **kwargs,
        )
        if indexed:
            index = CoflowIndex(state.coflows.values())
            for job in state.jobs.values():
                index.put_job(job)
            index.mirror(state.jobs)
            state.loads = index.snapshot()
        return state

    def with_sparse_loads(self) -> ClusterState:
        """This state if it offers its loads as arrays (:meth:`sparse_port_bytes`), else the
        same state (its very dicts) with its active coflows' loads read into arrays, each
        coflow's :meth:`Coflow.port_bytes` once (the jobs' hosts among the columns): what the
        policies that compute on arrays order, so that a plain state and the controller's or
        the simulator's take one path."""
        if self.sparse_port_bytes() is not None:
            return self
        active = self.active_coflows()
        job_hosts = (port[0] for job in self.jobs.values() for port in job.bytes_per_iteration)
        sparse = SparsePortBytes.from_mappings(
            list(map(_COFLOW_ID, active)), [c.port_bytes() for c in active], job_hosts
        )
        loads = CoflowLoads(tuple(active), sparse, list(map(_SIZE, active)),
                            list(map(_LEFT, active)))  # fmt: skip
        return ClusterState(self.hosts, self.coflows, self.jobs, self.stages, self.now_s,
                            self.link_bps, loads, self.stages_version)  # fmt: skip

    def job_table(self) -> JobTable | None:
        """The jobs' numbers as arrays, if the state's maker keeps them for its very
        :attr:`jobs` dict (:meth:`CoflowIndex.mirror`); else ``None``."""
        table = self._kept_job_table()
        return table if table is not None and table.jobs is self.jobs else None

    def _kept_job_table(self) -> JobTable | None:
        """The job table the state's maker keeps, for whichever jobs dict (the loads')."""
        return self.loads.job_table if self.loads is not None else None

    def port_bps(self, port: Port) -> float:
        """Capacity of ``port`` in bit/s."""
        host = self.hosts.get(port[0])
        if host is None:
            return self.link_bps
        return host.egress_bps if port[1] == EGRESS else host.ingress_bps

    def active_coflows(self) -> list[Coflow]:
        """Coflows with bytes left, in arrival order (ties by id)."""
        if self.loads is not None:
            return list(self.loads.coflows)
        return sorted(
            (c for c in self.coflows.values() if not c.done),
            key=lambda c: (c.arrival_s, c.coflow_id),
        )

    def job_loads(
        self, job_ids: Sequence[JobId], sources: Sequence[Mapping[Port, float]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`CoflowLoads.job_loads` of the state's loads (``None`` if it keeps none)."""
        return None if self.loads is None else self.loads.job_loads(job_ids, sources)

    def coflow_weights(self, active: Sequence[Coflow]) -> Sequence[float]:
        """The weights of :meth:`active_coflows` (``active``, that list): from the loads when
        the state keeps them (an array, no coflow read; shared: do not change it), else read
        from ``active`` (a list)."""
        if self.loads is not None and self.loads.weights is not None:
            return self.loads.weights
        return list(map(_WEIGHT, active))

    def active_ids(self, active: Sequence[Coflow] | None = None) -> list[CoflowId]:
        """The ids of :meth:`active_coflows`, in that order: from the loads when the state
        keeps them (no coflow read), else from ``active`` (that list, if the caller has it)."""
        if self.loads is not None:
            return list(self.loads.sparse.ids)
        return list(map(_COFLOW_ID, self.active_coflows() if active is None else active))

    def demand_matrix(
        self, coflows: Sequence[Coflow], ids: list[CoflowId] | None = None
    ) -> DemandMatrix:
        """The coflows' (with ``ids`` if known) remaining demands in seconds of port time
        (bytes at each port's capacity), one row per coflow in the given order, as BSSI takes
        them: from the sparse loads when the state keeps them (the same numbers, compiled),
        else from each coflow's mapping."""
        sparse = self.sparse_port_bytes()
        if sparse is None:
            return DemandMatrix.from_mappings([port_seconds(self, c.port_bytes()) for c in coflows])
        rows = sparse.rows_of(list(map(_COFLOW_ID, coflows)) if ids is None else ids)
        return DemandMatrix(*port_seconds_matrix(*sparse.rows(rows), self.column_bps(sparse)))

    def sparse_port_bytes(self) -> SparsePortBytes | None:
        """The active coflows' bytes left per port as sparse rows, if this state keeps its
        loads in arrays (:attr:`loads`); else ``None`` (policies then read each
        :meth:`Coflow.port_bytes`)."""
        return self.loads.sparse if self.loads is not None else None

    def coflow_keys(self) -> CoflowKeys | None:
        """The ids of the active coflows (in :meth:`active_coflows` order) and of their jobs
        and stages as arrays, if the state keeps its loads in arrays (:attr:`loads`) that
        have them; else ``None``."""
        return self.loads.keys if self.loads is not None else None

    def byte_counts(
        self, coflows: Sequence[Coflow], ids: list[CoflowId] | None = None
    ) -> tuple[list[float], list[float]]:
        """Each of ``coflows``' (active ones, with ``ids`` if known) size and bytes left
        (:attr:`Coflow.size_bytes`, :attr:`Coflow.remaining_bytes`)."""
        if self.loads is not None:
            return self.loads.byte_counts(coflows, ids)
        return list(map(_SIZE, coflows)), list(map(_LEFT, coflows))

    def column_bps(self, sparse: SparsePortBytes) -> np.ndarray:
        """Capacity in bit/s of each of ``sparse``'s columns."""
        n_hosts = sparse.n_hosts
        if not self.hosts:
            return np.full(2 * n_hosts, float(self.link_bps))
        names = range(n_hosts) if sparse.hosts is None else sparse.hosts
        ports = ((names[k % n_hosts], k // n_hosts) for k in range(2 * n_hosts))
        return np.fromiter(map(self.port_bps, ports), float, 2 * n_hosts)

    def job_iterations(self, job_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each of ``job_ids``' iteration budget and iterations done, as int64 arrays (1 and
        1, nothing left, for a job the state does not have). A state whose maker keeps them
        in arrays may answer without reading every job (the simulator's does)."""
        table = self.job_table()
        if table is not None:
            rows = table.rows_of(job_ids)
            # (a field's gather: a gather of whole rows moves every field, twice the time)
            budget, done = table.numbers["budget"][rows], table.numbers["done"][rows]
            known = rows >= 0
            if known.all():
                return budget, done
            return (np.where(known, budget, _NO_JOB.iteration_budget),
                    np.where(known, done, _NO_JOB.iterations_done))  # fmt: skip
        jobs = list(map(self.jobs.get, job_ids.tolist(), repeat(_NO_JOB)))
        return (np.fromiter(map(_BUDGET, jobs), np.int64, len(jobs)),
                np.fromiter(map(_DONE, jobs), np.int64, len(jobs)))  # fmt: skip

    def stage_of(self, coflow: Coflow) -> StageId | None:
        """The coflow's stage: its own ``stage_id``, else its job's."""
        if coflow.stage_id is not None:
            return coflow.stage_id
        job = self.jobs.get(coflow.job_id) if coflow.job_id is not None else None
        return job.stage_id if job is not None else None


_NO_JOB = Job(-1, iteration_budget=1, iterations_done=1)  # (job_iterations of an unknown job)
_BUDGET = operator.attrgetter("iteration_budget")
_DONE = operator.attrgetter("iterations_done")


def port_bytes(flows: Iterable[Flow], remaining: bool = True) -> dict[Port, float]:
    """Bytes each port must carry for ``flows`` (remaining bytes, or sizes)."""
    load: dict[Port, float] = {}
    for flow in flows:
        size = flow.remaining_bytes if remaining else flow.size_bytes
        if size <= 0:
            continue
        for port in (egress(flow.src), ingress(flow.dst)):
            load[port] = load.get(port, 0.0) + size
    return load


def port_seconds(state: ClusterState, load_bytes: Mapping[Port, float]) -> dict[Port, float]:
    """Convert per-port bytes into the seconds each port needs at its capacity."""
    if not state.hosts:  # every port at the default capacity (the simulator's states)
        bps = state.link_bps
        return {port: 8.0 * size / bps for port, size in load_bytes.items()}
    return {port: 8.0 * size / state.port_bps(port) for port, size in load_bytes.items()}


def bottleneck_s(state: ClusterState, load_bytes: Mapping[Port, float]) -> float:
    """Time the most loaded port needs alone (Varys' Gamma); 0 for no load."""
    if not state.hosts:
        # x -> 8 x / bps is monotone in floating point too, so this is the same maximum
        return 8.0 * max(load_bytes.values(), default=0.0) / state.link_bps
    return max(port_seconds(state, load_bytes).values(), default=0.0)
