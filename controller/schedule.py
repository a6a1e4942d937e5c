"""What a policy returns, and how its order becomes switch priority levels and DSCP marks.

A :class:`Schedule` is an order of coflows in *ranks*: a rank is a group of coflows that share a
priority (ties), and the order inside a group is the policy's preference (used where one level
per coflow is available, e.g. the simulator's ideal mode). Optionally it carries per-flow rate
caps (enforced on the switch with OpenFlow meters).

The switch has ``N_LEVELS`` = 8 priority levels, like commodity switches and Sincronia: the
first 7 ranks get a level each and every later rank shares the lowest. A level is enforced as a
DSCP value that the controller's rules set and an HTB class on each switch port serves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (the model's module loads numba: the schedule plot's --help need not)
    from controller.model import CoflowId, FlowKey

N_LEVELS = 8

# Level 0 is the most urgent. Level 7 is DSCP 0, so unmarked traffic shares the lowest class.
LEVEL_DSCP: tuple[int, ...] = (56, 48, 40, 32, 24, 16, 8, 0)

# Level l's HTB class on a switch port is 1:(0x10 + l) (topologies/qos.py makes them). A switch
# that serves HTB classes as OpenFlow queues numbers them as Open vSwitch's linux-htb QoS does,
# queue q being class 1:(q + 1), so level l is queue 0x0f + l (15..22).
LEVEL_CLASS_BASE = 0x10


class _OneCoflowRanks(dict):
    """Each coflow id's rank of its own, ``(coflow_id,)``, made the first time it is asked for
    (see :func:`one_coflow_ranks`)."""

    def __missing__(self, coflow_id: CoflowId) -> tuple[CoflowId]:
        rank = self[coflow_id] = (coflow_id,)
        return rank


_ONE_COFLOW_RANKS = _OneCoflowRanks()


def one_coflow_ranks(order: Sequence[CoflowId]) -> tuple[tuple[CoflowId], ...]:
    """A rank of its own for each coflow of ``order``, in order.

    Each rank is made once per coflow id and kept, so a reorder makes one tuple, not one per
    coflow: 10,000 new tuples a reorder started ten collections of the interpreter's youngest
    generation and one of the middle one, from a seventh (Sincronia) to half (FIFO-LM) of the
    time to order 10,000 coflows (``docs/performance.md``). The kept ranks are
    forgotten once they are more than twice a call's coflows plus 4,096. Ids are ints
    (:data:`~controller.model.CoflowId`); an order whose first id is of another type gets
    new ranks.
    """
    if not order or type(order[0]) is not int:
        # (kept ranks are found by equal ids: an id of another type, say numpy's, would get
        # the int's rank; such ids get ranks of their own)
        return tuple(zip(order))
    ranks = _ONE_COFLOW_RANKS
    if len(ranks) > 2 * len(order) + 4096:
        ranks.clear()
    return tuple(map(ranks.__getitem__, order))


class Schedule:
    """An order of coflows, most urgent first, in ranks of tied coflows.

    Args:
        ranks: groups of coflow ids; ``ranks[0]`` is served first. Inside a group the listed
            order is the policy's preference.
        flow_rates_bps: optional rate cap per flow, keyed by ``(coflow_id, flow_id)``.
        coflow_gamma_s: optional MADD time per coflow: each of its flows is capped at its
            remaining bits / gamma, so they all finish together (the form rate caps take for
            coflows given in bulk, see :class:`~controller.model.CoflowSummary`).
        rows: optional: every coflow of :attr:`order`, in turn, as its row of ``loads``
            (an int array), where the policy ordered the coflows from those rows; a caller
            that keeps its coflows in the same rows (the simulator) reads the order from it
            instead of looking each id up.
        loads: the :class:`~controller.model.SparsePortBytes` that ``rows`` index (callers
            check it is the one their state offered).

    A schedule made by :meth:`from_order` keeps its order as one list and makes the ranks of
    one coflow each only if asked for them (:attr:`single_order`): the controller's levels and
    the simulator's read the order, and a reorder of 1,000 coflows then makes no rank at all.
    Two schedules are equal when their ranks, rates and MADD times are. Treat a schedule as
    immutable.
    """

    __slots__ = ("_ranks", "_single_order", "flow_rates_bps", "coflow_gamma_s", "rows", "loads")

    def __init__(
        self,
        ranks: tuple[tuple[CoflowId, ...], ...],
        flow_rates_bps: Mapping[FlowKey, float] | None = None,
        coflow_gamma_s: Mapping[CoflowId, float] | None = None,
        rows: Any = None,
        loads: Any = None,
    ) -> None:
        self._ranks: tuple[tuple[CoflowId, ...], ...] | None = ranks
        self._single_order: list[CoflowId] | None = None
        self.flow_rates_bps: Mapping[FlowKey, float] = (
            {} if flow_rates_bps is None else flow_rates_bps
        )
        self.coflow_gamma_s: Mapping[CoflowId, float] = (
            {} if coflow_gamma_s is None else coflow_gamma_s
        )
        self.rows = rows
        self.loads = loads

    @classmethod
    def from_order(
        cls,
        order: Iterable[CoflowId],
        flow_rates_bps: Mapping[FlowKey, float] | None = None,
        coflow_gamma_s: Mapping[CoflowId, float] | None = None,
        rows: Any = None,
        loads: Any = None,
    ) -> Schedule:
        """A schedule in which every coflow has a rank of its own."""
        schedule = cls(None, dict(flow_rates_bps or {}), dict(coflow_gamma_s or {}), rows, loads)
        schedule._single_order = list(order)  # (its own: the caller's list may change)
        return schedule

    @classmethod
    def from_groups(
        cls,
        groups: Iterable[Sequence[CoflowId]],
        flow_rates_bps: Mapping[FlowKey, float] | None = None,
        coflow_gamma_s: Mapping[CoflowId, float] | None = None,
        rows: Any = None,
        loads: Any = None,
    ) -> Schedule:
        """A schedule from groups of tied coflows (empty groups are dropped)."""
        return cls(
            tuple(map(tuple, filter(len, groups))),  # (at C speed: 10,000 stages are 10,000)
            dict(flow_rates_bps or {}),
            dict(coflow_gamma_s or {}),
            rows,
            loads,
        )

    @property
    def ranks(self) -> tuple[tuple[CoflowId, ...], ...]:
        """The groups of tied coflow ids, most urgent first."""
        if self._ranks is None:
            self._ranks = one_coflow_ranks(self._single_order)
        return self._ranks

    @property
    def single_order(self) -> list[CoflowId] | None:
        """The order, where the schedule was made by :meth:`from_order` (every coflow a rank
        of its own); else ``None``. The schedule's own list: do not change it."""
        return self._single_order

    @property
    def n_ranks(self) -> int:
        """How many ranks there are (without making them)."""
        if self._single_order is not None:
            return len(self._single_order)
        return len(self._ranks)

    @property
    def order(self) -> list[CoflowId]:
        """Every coflow once, most urgent first."""
        if self._single_order is not None:
            return list(self._single_order)
        return [c for group in self.ranks for c in group]

    def rank_of(self) -> dict[CoflowId, int]:
        """Rank index of each coflow (0 = most urgent)."""
        return {c: r for r, group in enumerate(self.ranks) for c in group}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        if self._single_order is not None and other._single_order is not None:
            same_ranks = self._single_order == other._single_order
        else:
            same_ranks = self.ranks == other.ranks
        return (
            same_ranks
            and self.flow_rates_bps == other.flow_rates_bps
            and self.coflow_gamma_s == other.coflow_gamma_s
        )

    __hash__ = None  # (its rates are a dict)

    def __repr__(self) -> str:
        return (
            f"Schedule(ranks={self.ranks!r}, flow_rates_bps={self.flow_rates_bps!r}, "
            f"coflow_gamma_s={self.coflow_gamma_s!r})"
        )


def level_of_rank(rank: int, n_levels: int = N_LEVELS) -> int:
    """Priority level of a rank: the first ``n_levels - 1`` ranks get their own level."""
    if rank < 0:
        raise ValueError("rank must be >= 0")
    return min(rank, n_levels - 1)


def coflow_levels(schedule: Schedule, n_levels: int = N_LEVELS) -> dict[CoflowId, int]:
    """Priority level of every coflow of ``schedule`` (:func:`level_of_rank` of its rank)."""
    levels, lowest = level_split(schedule, n_levels)
    levels.update(dict.fromkeys(lowest, n_levels - 1))
    return levels


def level_split(
    schedule: Schedule, n_levels: int = N_LEVELS
) -> tuple[dict[CoflowId, int], set[CoflowId]]:
    """:func:`coflow_levels` in two parts, made at C speed a rank at a time: the coflows of
    the first ``n_levels - 1`` ranks with their level, and the set of those that share the
    lowest (a coflow listed twice is at the level of its last listing; one in both parts is at
    the lowest). Every reorder of the controller makes this call."""
    if n_levels < 1:
        raise ValueError("n_levels must be >= 1")
    lowest = n_levels - 1
    order = schedule.single_order
    if order is not None:  # (a rank each: no rank made)
        return dict(zip(order[:lowest], range(lowest), strict=False)), set(order[lowest:])
    first: dict[CoflowId, int] = {}
    for rank, group in enumerate(schedule.ranks[:lowest]):
        first.update(dict.fromkeys(group, rank))
    return first, set(chain.from_iterable(schedule.ranks[lowest:]))


def dscp_of_level(level: int) -> int:
    """DSCP value that marks ``level`` (0 = most urgent)."""
    if not 0 <= level < len(LEVEL_DSCP):
        raise ValueError(f"level must be in 0..{len(LEVEL_DSCP) - 1}, got {level}")
    return LEVEL_DSCP[level]


def level_queue_id(level: int) -> int:
    """The OpenFlow queue id of ``level``'s HTB class on a switch port (15 for level 0)."""
    if not 0 <= level < N_LEVELS:
        raise ValueError(f"level must be in 0..{N_LEVELS - 1}, got {level}")
    return LEVEL_CLASS_BASE + level - 1


def queue_level(queue_id: int) -> int | None:
    """The priority level whose HTB class is OpenFlow queue ``queue_id``; ``None`` for a queue
    of no level (the classes' parent, the control class, a switch's own queues)."""
    level = queue_id + 1 - LEVEL_CLASS_BASE
    return level if 0 <= level < N_LEVELS else None


def level_of_dscp(dscp: int) -> int:
    """Priority level that ``dscp`` marks; unknown values map to the lowest level."""
    try:
        return LEVEL_DSCP.index(dscp)
    except ValueError:
        return len(LEVEL_DSCP) - 1
