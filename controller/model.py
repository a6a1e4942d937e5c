"""The scheduling data model: hosts and their ports, flows, coflows, jobs, stages.

Plain dataclasses with no framework imports, shared by the Ryu app, the simulator and the
experiment scripts. Every host has one egress port (what it sends) and one ingress port (what it
receives), each with a capacity in bit/s, as on a non-blocking "big switch". A flow uses its
source's egress port and its destination's ingress port.

Units are in the names: ``*_bytes``, ``*_bps`` (bits per second), ``*_s`` (seconds).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.bssi import DemandMatrix

EGRESS = 0
INGRESS = 1

HostId = Hashable
Port = tuple  # (host, EGRESS | INGRESS)
CoflowId = int
JobId = int
StageId = int
FlowKey = tuple  # (coflow_id, flow_id)

DEFAULT_PORT_BPS = 1e9


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
    egress_bps: float = DEFAULT_PORT_BPS
    ingress_bps: float = DEFAULT_PORT_BPS


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

    Hosts are ``0 .. n_hosts - 1``; column ``h`` is ``egress(h)`` and column ``n_hosts + h`` is
    ``ingress(h)``. Row ``i``'s entries are ``row_ptr[i]:row_ptr[i + 1]``, columns ascending:
    exactly the items of the coflow's :meth:`Coflow.port_bytes`, in the same order and with the
    same values.

    Args:
        row_ptr: ``rows + 1`` offsets into ``column`` and ``size_bytes``.
        column: each entry's column.
        size_bytes: each entry's bytes left (> 0).
        ids: each row's coflow id (a policy that lists the coflows in this order needs no
            lookup of their rows).
        n_hosts: hosts, half the columns.
    """

    row_ptr: np.ndarray
    column: np.ndarray
    size_bytes: np.ndarray
    ids: Sequence[CoflowId]
    n_hosts: int

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
        column = _host_port_columns(self.n_hosts)
        try:
            return np.fromiter(map(column.__getitem__, ports), np.int64, count)
        except KeyError as error:
            raise ValueError(f"port {error} is not one of hosts 0..{self.n_hosts - 1}") from None


@functools.cache
def _host_port_columns(n_hosts: int) -> dict[Port, int]:
    """:class:`SparsePortBytes`' column of every port of hosts ``0 .. n_hosts - 1``."""
    return {(host, direction): direction * n_hosts + host
            for direction in (EGRESS, INGRESS) for host in range(n_hosts)}  # fmt: skip


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
    """

    job_id: JobId
    bytes_per_iteration: dict[Port, float] = field(default_factory=dict)
    iteration_budget: int = 1
    iterations_done: int = 0
    stage_id: StageId | None = None
    task_id: int | None = None
    arrival_s: float = 0.0

    def __post_init__(self) -> None:
        if self.iteration_budget <= 0:
            raise ValueError(f"job {self.job_id}: iteration_budget must be > 0")
        if self.iterations_done < 0:
            raise ValueError(f"job {self.job_id}: iterations_done must be >= 0")

    @property
    def progress(self) -> float:
        """Attained service: completed iterations over the stage budget, in [0, 1]."""
        return min(1.0, self.iterations_done / self.iteration_budget)


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
            ``default_port_bps``.
        coflows: active coflows by id.
        jobs: registered jobs by id.
        stages: registered stages by id.
        now_s: current time.
        default_port_bps: capacity of ports of hosts missing from ``hosts``.
    """

    hosts: dict[HostId, Host] = field(default_factory=dict)
    coflows: dict[CoflowId, Coflow] = field(default_factory=dict)
    jobs: dict[JobId, Job] = field(default_factory=dict)
    stages: dict[StageId, Stage] = field(default_factory=dict)
    now_s: float = 0.0
    default_port_bps: float = DEFAULT_PORT_BPS

    @classmethod
    def build(
        cls,
        coflows: Iterable[Coflow] = (),
        jobs: Iterable[Job] = (),
        stages: Iterable[Stage] = (),
        hosts: Iterable[Host] = (),
        **kwargs,
    ) -> ClusterState:
        """A state from lists instead of dicts."""
        return cls(
            hosts={h.name: h for h in hosts},
            coflows={c.coflow_id: c for c in coflows},
            jobs={j.job_id: j for j in jobs},
            stages={s.stage_id: s for s in stages},
            **kwargs,
        )

    def port_bps(self, port: Port) -> float:
        """Capacity of ``port`` in bit/s."""
        host = self.hosts.get(port[0])
        if host is None:
            return self.default_port_bps
        return host.egress_bps if port[1] == EGRESS else host.ingress_bps

    def active_coflows(self) -> list[Coflow]:
        """Coflows with bytes left, in arrival order (ties by id)."""
        return sorted(
            (c for c in self.coflows.values() if not c.done),
            key=lambda c: (c.arrival_s, c.coflow_id),
        )

    def demand_matrix(self, coflows: Sequence[Coflow]) -> DemandMatrix:
        """The coflows' remaining demands in seconds of port time (bytes at each port's
        capacity), one row per coflow in the given order, as BSSI takes them.

        A state that keeps its loads in arrays (the simulator's) may override this with a faster
        build of the same matrix."""
        return DemandMatrix.from_mappings([port_seconds(self, c.port_bytes()) for c in coflows])

    def sparse_port_bytes(self) -> SparsePortBytes | None:
        """The active coflows' bytes left per port as sparse rows, if this state keeps its
        loads in arrays; ``None`` here (policies then read each :meth:`Coflow.port_bytes`)."""
        return None

    def host_ports_bps(self, n_hosts: int) -> np.ndarray:
        """Capacity in bit/s of the ports of hosts ``0 .. n_hosts - 1``, in the column order of
        :class:`SparsePortBytes`."""
        if not self.hosts:
            return np.full(2 * n_hosts, float(self.default_port_bps))
        ports = ((k % n_hosts, k // n_hosts) for k in range(2 * n_hosts))
        return np.fromiter(map(self.port_bps, ports), float, 2 * n_hosts)

    def stage_of(self, coflow: Coflow) -> StageId | None:
        """The coflow's stage: its own ``stage_id``, else its job's."""
        if coflow.stage_id is not None:
            return coflow.stage_id
        job = self.jobs.get(coflow.job_id) if coflow.job_id is not None else None
        return job.stage_id if job is not None else None


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
        bps = state.default_port_bps
        return {port: 8.0 * size / bps for port, size in load_bytes.items()}
    return {port: 8.0 * size / state.port_bps(port) for port, size in load_bytes.items()}


def bottleneck_s(state: ClusterState, load_bytes: Mapping[Port, float]) -> float:
    """Time the most loaded port needs alone (Varys' Gamma); 0 for no load."""
    if not state.hosts:
        # x -> 8 x / bps is monotone in floating point too, so this is the same maximum
        return 8.0 * max(load_bytes.values(), default=0.0) / state.default_port_bps
    return max(port_seconds(state, load_bytes).values(), default=0.0)
