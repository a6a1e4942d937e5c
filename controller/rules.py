"""From a schedule to the switch rules that enforce it, and the diff against what is installed.

Pure: rules and meters are values, operations are values; the Ryu glue turns operations into
OpenFlow messages. Layout on the switch (OpenFlow 1.3):

- table 0 (``MARK_TABLE``): one rule per (owner, flow pair, TCP port, direction) that sets the
  DSCP of the owner's priority level, optionally sends the packet through the owner's meter for
  that pair, and continues to table 1; a table-miss rule continues to table 1 unmarked;
- table 1 (``FORWARD_TABLE``): forwarding (static from the topology, or learned).

An *owner* is a job (all its coflows share its rules) or a coflow without a job. Cookies carry a
controller tag and the owner in their low 32 bits, so every delete or dump is limited to what this
controller owns. A reorder usually changes only the DSCP of existing rules: a MODIFY_STRICT.
"""

from __future__ import annotations

import enum
import functools
import operator
import weakref
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, replace
from itertools import chain, compress

from controller.model import ClusterState, Coflow
from controller.schedule import LEVEL_DSCP, N_LEVELS, Schedule, level_split

MARK_TABLE = 0
FORWARD_TABLE = 1
PRIORITY_TCP = 200  # rules that match a job's TCP port
PRIORITY_IP = 100  # rules that match a host pair only

COOKIE_TAG = 0x48504F00  # "HPO\0", in the high 32 bits
OWNER_JOB = 0x1
OWNER_COFLOW = 0x2
COOKIE_OURS_MASK = 0xFFFFFF00_00000000  # any rule of this controller
COOKIE_OWNER_MASK = 0xFFFFFFFF_FFFFFFFF

ETH_TYPE_IP = 0x0800
IPPROTO_TCP = 6
OWNER_MATCH = (("eth_type", ETH_TYPE_IP),)  # every marking rule is at least this specific


def owner_cookie(kind: int, ident: int) -> int:
    """Cookie of the rules of a job (``OWNER_JOB``) or a jobless coflow (``OWNER_COFLOW``)."""
    if not 0 <= ident < 2**32:
        raise ValueError(f"owner id {ident} does not fit in 32 bits")
    return ((COOKIE_TAG | kind) << 32) | ident


def cookie_owner(cookie: int) -> tuple[int, int] | None:
    """``(kind, id)`` of one of our cookies, or ``None`` for someone else's."""
    if cookie & COOKIE_OURS_MASK != (COOKIE_TAG << 32) & COOKIE_OURS_MASK:
        return None
    return (cookie >> 32) & 0xFF, cookie & 0xFFFFFFFF


def rate_kbps(rate_bps: float) -> int:
    """Meter rate in kbit/s (at least 1)."""
    return max(1, round(rate_bps / 1000.0))


@dataclass(frozen=True, slots=True)
class FlowRule:
    """A marking rule in table 0.

    ``match`` is a tuple of ``(OXM field name, value)`` pairs in a fixed order (Ryu's
    ``OFPMatch`` keyword names); ``(priority, match)`` identifies the rule on the switch.
    """

    cookie: int
    priority: int
    match: tuple[tuple[str, object], ...]
    dscp: int
    meter_id: int | None = None

    @property
    def key(self) -> tuple:
        """``(priority, match)``: what identifies the rule on the switch."""
        return (self.priority, self.match)

    def to_json(self) -> dict:
        """The rule as ``/api/rules`` shows it (cookie in hex, owner, match as an object)."""
        owner = cookie_owner(self.cookie)
        return {
            "cookie": hex(self.cookie),
            "owner": {OWNER_JOB: "job", OWNER_COFLOW: "coflow"}.get(owner[0]) if owner else None,
            "owner_id": owner[1] if owner else None,
            "table": MARK_TABLE,
            "priority": self.priority,
            "match": dict(self.match),
            "dscp": self.dscp,
            "meter_id": self.meter_id,
        }


class OpKind(enum.StrEnum):
    """What an :class:`Op` does to a switch, in OpenFlow 1.3 terms.

    ``FLOW_MODIFY`` and ``FLOW_DELETE`` are strict (the rule with this priority and match);
    ``OWNER_MODIFY`` is a non-strict MODIFY that gives every rule with ``rule.cookie`` the marks
    ``rule.dscp`` and ``rule.meter_id``; ``METER_DELETE`` also deletes the rules using the meter.
    """

    FLOW_ADD = "flow_add"
    FLOW_MODIFY = "flow_modify"
    FLOW_DELETE = "flow_delete"
    OWNER_MODIFY = "owner_modify"
    METER_ADD = "meter_add"
    METER_MODIFY = "meter_modify"
    METER_DELETE = "meter_delete"
    BARRIER = "barrier"


@dataclass(frozen=True, slots=True)
class Op:
    """One change to a switch: a :class:`OpKind` with the rule or meter it is about."""

    kind: OpKind
    rule: FlowRule | None = None
    meter_id: int | None = None
    rate_kbps: int | None = None


class SwitchTable:
    """What this controller has installed on one switch (rules by key, meters by id).

    ``rules`` maps each rule's key to the rule. A table made by :meth:`MarkingTable.update`
    keeps them in two parts: the rules as made, and ``owner_dscp``, the DSCP of every rule of
    an owner (a cookie) that moved to one level as a whole, whatever its rule as made says
    (such an owner's rules have no meter). A reorder then moves a job with one entry instead
    of one rule per host pair, and :func:`diff` sends one non-strict MODIFY for it. ``rules``
    puts the two together (once, on first use); :meth:`rule` reads one.

    Such a table also knows the table the same marking table made before it (``base``, held
    weakly) and the rule keys, meter ids and owners whose values differ from it
    (``changed_rules``, ``changed_meters``, ``changed_owners``), so that :func:`diff` from that
    table looks at those only; and the marking table (``maker``, held weakly), which knows each
    owner's rules while this is its last table. Two tables are equal when their rules and
    meters are.
    """

    __slots__ = ("_made", "_rules", "_base_rules", "meters", "owner_dscp", "base", "maker",
                 "changed_rules", "changed_meters", "changed_owners", "__weakref__")  # fmt: skip

    def __init__(
        self,
        rules: dict[tuple, FlowRule],
        meters: dict[int, int],
        owner_dscp: dict[int, int] | None = None,
    ) -> None:
        self._made = rules
        self._rules = None if owner_dscp else rules
        # the table before's rules, if they were put together when this was made
        self._base_rules: dict[tuple, FlowRule] | None = None
        self.meters = meters
        self.owner_dscp = owner_dscp or {}
        self.base: weakref.ref | None = None
        self.maker: weakref.ref | None = None
        self.changed_rules: tuple[tuple, ...] = ()
        self.changed_meters: tuple[int, ...] = ()
        self.changed_owners: tuple[int, ...] = ()

    @property
    def rule_count(self) -> int:
        """How many rules the table holds (without putting :attr:`rules` together)."""
        return len(self._made)

    @property
    def rules(self) -> dict[tuple, FlowRule]:
        """Every rule by its key, with its owner's DSCP."""
        if self._rules is None:
            self._rules = self._from_base()
            if self._rules is None:
                self._rules = {key: self._resolved(rule) for key, rule in self._made.items()}
            self._base_rules = None
        return self._rules

    def _from_base(self) -> dict[tuple, FlowRule] | None:
        """:attr:`rules` from those of the table before, where the marking table that made
        both knows this one's owners' keys: only the changed keys and owners' rules are put
        together (a switch of a fabric gets its part of every table)."""
        if self._base_rules is None:
            return None
        keys_of: dict = {}
        if self.changed_owners:
            maker = self.maker() if self.maker is not None else None
            keys_of = maker.owner_keys(self, self.changed_owners) if maker is not None else None
            if keys_of is None:
                return None
        rules = self._base_rules.copy()
        made, resolved = self._made, self._resolved
        for key in chain(self.changed_rules, chain.from_iterable(keys_of.values())):
            rule = made.get(key)
            if rule is None:
                rules.pop(key, None)
            else:
                rules[key] = resolved(rule)
        return rules

    def rule(self, key: tuple) -> FlowRule | None:
        """The rule with ``key``, if there is one."""
        if self._rules is not None:
            return self._rules.get(key)
        rule = self._made.get(key)
        return None if rule is None else self._resolved(rule)

    def _resolved(self, rule: FlowRule) -> FlowRule:
        # (an owner with a DSCP of its own has no meter: MarkingTable gives one to an owner
        # only where nothing is capped, and rebuilds it when caps come)
        dscp = self.owner_dscp.get(rule.cookie)
        if dscp is None or (dscp == rule.dscp and rule.meter_id is None):
            return rule
        return FlowRule(rule.cookie, rule.priority, rule.match, dscp)

    def changes_from(self, installed: SwitchTable) -> tuple[tuple, tuple, tuple] | None:
        """The rule keys, meter ids and owners whose marks may differ from ``installed``, if
        this table was made right after it by the same marking table; else ``None``
        (everything may)."""
        if self.base is None or self.base() is not installed:
            return None
        return self.changed_rules, self.changed_meters, self.changed_owners

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SwitchTable):
            return NotImplemented
        return self.rules == other.rules and self.meters == other.meters

    __hash__ = None  # (mutable)

    def __repr__(self) -> str:
        return f"SwitchTable(rules={self.rules!r}, meters={self.meters!r})"

    @classmethod
    def empty(cls) -> SwitchTable:
        """A table without rules or meters (a switch that just connected)."""
        return cls({}, {})


class MeterIds:
    """Stable meter ids per ``(owner cookie, src, dst)``; freed ids are reused (lowest first)."""

    def __init__(self, first: int = 1) -> None:
        self._ids: dict[tuple, int] = {}
        self._free: list[int] = []
        self._next = first

    def id_for(self, key: tuple) -> int:
        """The meter id of ``key``: the one it has, else the lowest free one."""
        if key not in self._ids:
            if self._free:
                self._free.sort()
                self._ids[key] = self._free.pop(0)
            else:
                self._ids[key] = self._next
                self._next += 1
        return self._ids[key]

    def keep_only(self, keys: Iterable[tuple]) -> None:
        """Free the ids of every key not in ``keys``."""
        keep = set(keys)
        for key in [k for k in self._ids if k not in keep]:
            self._free.append(self._ids.pop(key))


# The caches hold what the active (owner, host pair)s reuse from one reorder to the next, a
# few thousand; bigger ones fill up with the pairs of coflows long gone, and every object they
# keep is walked by each full garbage collection, which stops the event loop.
CACHE_ENTRIES = 8192


SOURCE_FIELD = 1  # every marking rule's match starts (eth_type, ipv4_src, ipv4_dst, ...)


def rule_source_ip(rule: FlowRule) -> str:
    """The source host (IPv4 address) a marking rule matches."""
    name, value = rule.match[SOURCE_FIELD]
    if name != "ipv4_src":
        raise ValueError(f"not a marking rule of a host pair: {rule.match}")
    return value


@functools.lru_cache(maxsize=CACHE_ENTRIES)
def _matches(src: str, dst: str, tcp_ports: tuple[int, ...]) -> tuple[tuple[int, tuple], ...]:
    base = (("eth_type", ETH_TYPE_IP), ("ipv4_src", src), ("ipv4_dst", dst))
    ports = sorted(set(tcp_ports))
    if not ports:
        return ((PRIORITY_IP, base),)
    out = []
    for port in ports:
        # The job's port may be the receiver's (data to tcp_dst) or the sender's (replies of a
        # server, e.g. a parameter server's model pull, come from tcp_src).
        out.append((PRIORITY_TCP, (*base, ("ip_proto", IPPROTO_TCP), ("tcp_dst", port))))
        out.append((PRIORITY_TCP, (*base, ("ip_proto", IPPROTO_TCP), ("tcp_src", port))))
    return tuple(out)


def desired_table(
    state: ClusterState,
    schedule: Schedule,
    job_tcp_ports: Mapping[int, Iterable[int]],
    meter_ids: MeterIds,
) -> SwitchTable:
    """The rules and meters that enforce ``schedule`` (:meth:`MarkingTable.update` of a new
    table: see there)."""
    return MarkingTable(meter_ids).update(state, schedule, job_tcp_ports)


Pair = tuple  # (owner cookie, source host, destination host)
# what a pair's rules carry: its level, its TCP ports, its summed cap (bit/s) or None
_Want = tuple[int, tuple[int, ...], float | None]


@dataclass(slots=True)
class _Marks:
    """What one coflow asked of the table at the last update: its level, owner, TCP ports and
    each flow with bytes left as ``(pair, flow id, rate cap or None)``. Only the level changes
    in place (a coflow that only moved); anything else makes new marks."""

    coflow: Coflow
    level: int
    cookie: int
    ports: tuple[int, ...]
    flows: tuple[tuple[Pair, int, float | None], ...]
    capped: bool


class MarkingTable:
    """The rules and meters that enforce a schedule, kept from one reorder to the next so that
    an update re-reads only the coflows whose level, object (their flows), owner's TCP ports or
    rate caps changed, and rebuilds only the pairs they use.

    Every (owner, source, destination) pair gets the most urgent level among the owner's
    coflows that use it, and a meter when the schedule caps those flows (the sum of their caps,
    added in (coflow id, flow id) order); the reverse direction of a pair (its ACKs) gets the
    same level and no meter, unless it is a pair of its own. Two owners with the same match
    (same hosts, same port) cannot be told apart on the wire: the rule of the first pair in
    (cookie, source, destination) order is the one installed. Meter ids come from
    ``meter_ids``: a pair keeps its id while it is metered, and pairs newly metered take the
    lowest free ids in pair order.

    A reorder of Beamer or JPAS usually moves whole jobs between levels. Where every coflow of
    an owner ends up at one level and nothing else of the owner changed (its flows and ports;
    no caps anywhere), the owner's DSCP is set once (:class:`SwitchTable`'s ``owner_dscp``)
    instead of rebuilding its pairs one by one. Its rules as made are brought up to date
    (folded) only when a later update rebuilds any of its pairs.
    """

    def __init__(self, meter_ids: MeterIds) -> None:
        self.meter_ids = meter_ids
        self._marks: dict[int, _Marks] = {}
        self._coflow_of: dict[int, Coflow] = {}  # each marked coflow's object
        # the last update's levels: of the coflows of the first ranks (a level each), and the
        # coflows that share the lowest; and its jobs' TCP ports
        self._top: dict[int, int] = {}
        self._lowest: set[int] = set()
        self._ports_kept: dict = {}
        # the serial of the index snapshot the last update's coflows came from (0: none)
        self._snapshot_seen = 0
        self._job_coflows: dict[int, set[int]] = {}  # job id -> its marked coflows
        self._capped: set[int] = set()  # coflows with caps
        self._level: dict[int, int] = {}  # each marked coflow's level
        self._users: dict[Pair, set[int]] = {}  # forward pair -> the coflows that use it
        self._caps: dict[Pair, dict[tuple[int, int], float]] = {}  # -> {(coflow, flow): bps}
        self._ports: dict[Pair, tuple[int, ...]] = {}  # forward pair -> its owner's TCP ports
        self._rated: dict[Pair, float] = {}  # metered pair -> its rate
        self._meter_of: dict[Pair, int] = {}
        # pair -> the (ports, dscp, meter) its rules are made from (by _pair_rules)
        self._made_from: dict[Pair, tuple] = {}
        self._rule_pairs: dict[tuple, set[Pair]] = {}  # rule key -> the pairs that make it
        self._owner_pairs: dict[int, set[Pair]] = {}  # cookie -> its pairs with rules
        # cookie -> the DSCP of all its rules (no meter), whatever its rules as made say
        self.owner_dscp: dict[int, int] = {}
        self._owner_keys: dict[int, set[tuple]] = {}  # cookie -> the keys its rules hold
        self.rules: dict[tuple, FlowRule] = {}  # as made (see owner_dscp)
        self.meters: dict[int, int] = {}
        # the rule keys, meter ids and owners this update changed (ordered sets), and its table
        self._changed_rules: dict[tuple, None] = {}
        self._changed_meters: dict[int, None] = {}
        self._changed_owners: dict[int, None] = {}
        self._last: SwitchTable | None = None

    def update(
        self, state: ClusterState, schedule: Schedule, job_tcp_ports: Mapping[int, Iterable[int]]
    ) -> SwitchTable:
        """The table for ``schedule`` (of ``state``'s coflows), given each job's TCP ports
        (to change a job's ports, give them as a new object, as the registry's records do)."""
        caps = schedule.flow_rates_bps
        self._changed_rules, self._changed_meters, self._changed_owners = {}, {}, {}
        # the levels without a dict of every coflow: the few of the first ranks, and a set of
        # the others
        top, shared = level_split(schedule)
        candidates, ports_moved = self._candidates(state, top, shared, caps, job_tcp_ports)
        self._top, self._lowest = top, shared
        touched, moved = self._mark(state.coflows, candidates, top, shared, caps,
                                    job_tcp_ports, ports_moved)  # fmt: skip
        if moved:
            self._move_levels(moved, touched)
        self._rebuild(touched | {(cookie, dst, src) for cookie, src, dst in touched})
        return self._table(state)

    def _candidates(
        self,
        state: ClusterState,
        top: Mapping[int, int],
        shared: Set[int],
        caps: Mapping[tuple[int, int], float],
        job_tcp_ports: Mapping[int, Iterable[int]],
    ) -> tuple[set[int], set[int]]:
        """The coflows that may have changed, found at C speed: those whose level changed or
        that came or went, those whose object is not the one marked, those of jobs whose TCP
        ports changed, and every coflow with caps now or before; and the jobs whose ports
        changed."""
        coflows = state.coflows
        candidates = {c for c, _ in top.items() ^ self._top.items()}
        candidates.update(shared ^ self._lowest)
        objects_changed = self._objects_changed(state)
        if objects_changed is None:
            scheduled = [*top, *shared]
            candidates.update(
                compress(
                    scheduled,
                    map(
                        operator.is_not,
                        map(coflows.__getitem__, scheduled),
                        map(self._coflow_of.get, scheduled),
                    ),
                )
            )
        else:
            candidates.update(objects_changed)
        ports_moved: set[int] = set()  # jobs whose TCP ports changed
        if job_tcp_ports != self._ports_kept:  # (C speed: the same objects compare at once)
            kept = self._ports_kept
            for job_id in job_tcp_ports.keys() | kept.keys():
                if job_tcp_ports.get(job_id) != kept.get(job_id):
                    ports_moved.add(job_id)
                    candidates.update(self._job_coflows.get(job_id, ()))
            self._ports_kept = dict(job_tcp_ports)
        if caps or self._capped:
            candidates.update(coflow_id for coflow_id, _ in caps)
            candidates.update(self._capped)
        return candidates, ports_moved

    def _mark(
        self,
        coflows: Mapping[int, Coflow],
        candidates: set[int],
        top: Mapping[int, int],
        shared: Set[int],
        caps: Mapping[tuple[int, int], float],
        job_tcp_ports: Mapping[int, Iterable[int]],
        ports_moved: set[int],
    ) -> tuple[set[Pair], dict[int, list[_Marks]]]:
        """Mark every candidate coflow anew at its level (unmark one no longer scheduled); the
        pairs whose rules must be made again, and by owner cookie the marks of coflows of which
        only the level moved."""
        lowest = N_LEVELS - 1
        touched: set[Pair] = set()
        moved: dict[int, list[_Marks]] = {}  # cookie -> its coflows of which only the level moved
        for coflow_id in candidates:
            level = lowest if coflow_id in shared else top.get(coflow_id)
            old = self._marks.get(coflow_id)
            if level is None:
                if old is not None:
                    touched.update(self._unmark(coflow_id))
                continue
            coflow = coflows[coflow_id]
            if old is not None and old.coflow is coflow and coflow.job_id not in ports_moved:
                # the same object: the same owner, whose ports did not change
                same, cookie, ports = True, old.cookie, old.ports
            else:
                if coflow.job_id is not None:
                    cookie = owner_cookie(OWNER_JOB, coflow.job_id)
                    ports = tuple(job_tcp_ports.get(coflow.job_id, ()))
                else:
                    cookie, ports = owner_cookie(OWNER_COFLOW, coflow_id), ()
                same = (
                    old is not None
                    and old.coflow is coflow
                    and old.cookie == cookie
                    and old.ports == ports
                )
            if (
                same
                and old.level == level
                and (
                    not (caps or old.capped)
                    or all(caps.get((coflow_id, flow_id)) == cap for _, flow_id, cap in old.flows)
                )
            ):
                continue
            if same and not (caps or old.capped):
                # only its level moved (Beamer moves whole stages): the same flows on the same
                # pairs, which take the new level (below, by owner)
                old.level = level
                self._level[coflow_id] = level
                moved.setdefault(cookie, []).append(old)
                continue
            if old is not None:
                touched.update(self._unmark(coflow_id))
            flows = tuple(
                ((cookie, flow.src, flow.dst), flow.flow_id, caps.get((coflow_id, flow.flow_id)))
                for flow in coflow.flows
                if flow.remaining_bytes > 0
            )
            capped = any(cap is not None for _, _, cap in flows)
            self._marks[coflow_id] = _Marks(coflow, level, cookie, ports, flows, capped)
            self._coflow_of[coflow_id] = coflow
            if coflow.job_id is not None:
                self._job_coflows.setdefault(coflow.job_id, set()).add(coflow_id)
            if capped:
                self._capped.add(coflow_id)
            self._level[coflow_id] = level
            for pair, flow_id, cap in flows:
                self._users.setdefault(pair, set()).add(coflow_id)
                self._ports[pair] = ports
                if cap is not None:
                    self._caps.setdefault(pair, {})[(coflow_id, flow_id)] = cap
                touched.add(pair)
        return touched, moved

    def _move_levels(self, moved: dict[int, list[_Marks]], touched: set[Pair]) -> None:
        """Owners of which only coflows' levels moved: one whose rules all sit at one level
        takes it as its DSCP (its rules are not made again); the others' pairs join
        ``touched``."""
        rebuilt = {cookie for cookie, _, _ in touched}
        for cookie, marks in moved.items():
            # (only the level of uncapped coflows moves, where nothing is capped; a coflow
            # of the owner capped before is rebuilt: the owner's pairs have no meter)
            # (an owner without pairs has no rules: no DSCP is kept for it)
            if (
                cookie not in rebuilt
                and cookie in self._owner_pairs
                and self._at_one_level(marks[0])
            ):
                # every rule of the owner: its pairs' levels are the minimum of one level
                dscp = LEVEL_DSCP[marks[0].level]
                if self.owner_dscp.get(cookie) != dscp:  # (else its rules have it already)
                    self.owner_dscp[cookie] = dscp
                    self._changed_owners[cookie] = None
            else:
                touched.update(pair for m in marks for pair, _, _ in m.flows)

    def _table(self, state: ClusterState) -> SwitchTable:
        """The table as it now stands, linked to the last one (what changed since)."""
        # (copy() clones a dict with few deleted entries at C speed; dict() inserts one by one)
        table = SwitchTable(self.rules.copy(), self.meters.copy(), self.owner_dscp.copy())
        table.maker = weakref.ref(self)
        if self._last is not None:
            table.base = weakref.ref(self._last)
            if table._rules is None:  # (else it has them: nothing to keep)
                table._base_rules = self._last._rules
            table.changed_rules = tuple(self._changed_rules)
            table.changed_meters = tuple(self._changed_meters)
            table.changed_owners = tuple(self._changed_owners)
        self._last = table
        loads = state.loads
        self._snapshot_seen = (
            loads.serial if loads is not None and loads.coflows_by_id is state.coflows else 0
        )
        return table

    def _objects_changed(self, state: ClusterState) -> frozenset[int] | tuple[()] | None:
        """The coflows whose object may not be the one the last update saw, from the index
        snapshot the state's coflows are (:class:`~controller.model.CoflowLoads`) when it
        says what changed since the snapshot of the last update; ``None`` if it cannot, and
        every scheduled coflow's object is then compared with the one marked.

        After an update every scheduled coflow is marked with the object the state had; one
        that was not scheduled then and is now changed level, so it is a candidate anyway."""
        loads = state.loads
        seen = self._snapshot_seen
        if not seen or loads is None or loads.coflows_by_id is not state.coflows:
            return None
        if loads.serial == seen:
            return ()
        since = loads.changed_since
        return since[1] if since is not None and since[0] == seen else None

    def _at_one_level(self, marks: _Marks) -> bool:
        """Whether every marked coflow of the owner of ``marks``' coflow is at its level."""
        job_id = marks.coflow.job_id
        if job_id is None:
            return True  # (the owner's only coflow)
        # (C speed: an owner that moved has its coflows compared at every reorder)
        return all(map(marks.level.__eq__, map(self._level.__getitem__, self._job_coflows[job_id])))

    def _fold(self, cookie: int) -> None:
        """Make an owner's rules as made carry its DSCP, and forget the DSCP (the table's rules
        do not change)."""
        dscp = self.owner_dscp.pop(cookie)
        made_from, table = self._made_from, self.rules
        for pair in self._owner_pairs[cookie]:
            made = made_from[pair] = (made_from[pair][0], dscp, None)
            for rule in _pair_rules(*pair, *made):
                if table[rule.key].cookie == cookie:  # (else another owner's pair's rule)
                    table[rule.key] = rule

    def owner_keys(self, table: SwitchTable, cookies: Iterable[int]) -> dict | None:
        """The keys of the rules each of ``cookies`` owns in ``table``, if ``table`` is the last
        one this made (else ``None``). The sets are this table's: do not change them."""
        if table is not self._last:
            return None
        owner_keys = self._owner_keys
        return {cookie: owner_keys[cookie] for cookie in cookies if cookie in owner_keys}

    def owner_marks(
        self, table: SwitchTable, cookies: Iterable[int]
    ) -> dict[int, set[tuple[int, int | None]]] | None:
        """The marks (DSCP, meter) of the rules each of ``cookies`` owns in ``table``, read
        from its rules alone, if ``table`` is the last one this made (else ``None``)."""
        if table is not self._last:
            return None
        rule, owner_keys, owner_dscp = table.rule, self._owner_keys, table.owner_dscp
        return {
            cookie: (
                {(owner_dscp[cookie], None)}
                if cookie in owner_dscp
                else {(r.dscp, r.meter_id) for r in map(rule, owner_keys[cookie])}
            )
            for cookie in cookies
            if cookie in owner_keys
        }

    def _unmark(self, coflow_id: int) -> list[Pair]:
        """Take a coflow's marks out of its pairs; returns the pairs."""
        marks = self._marks.pop(coflow_id)
        del self._coflow_of[coflow_id], self._level[coflow_id]
        job_id = marks.coflow.job_id
        if job_id is not None:
            self._job_coflows[job_id].discard(coflow_id)
            if not self._job_coflows[job_id]:
                del self._job_coflows[job_id]
        self._capped.discard(coflow_id)
        pairs = []
        for pair, flow_id, cap in marks.flows:
            users = self._users.get(pair)
            if users is not None:
                users.discard(coflow_id)
                if not users:
                    del self._users[pair]
                    self._ports.pop(pair, None)
            if cap is not None:
                pair_caps = self._caps[pair]
                del pair_caps[(coflow_id, flow_id)]
                if not pair_caps:
                    del self._caps[pair]
            pairs.append(pair)
        return pairs

    def _rebuild(self, pairs: set[Pair]) -> None:
        """Make the marks, meters and rules of ``pairs`` (and the rules they share) anew."""
        if self.owner_dscp:
            for cookie in self.owner_dscp.keys() & {cookie for cookie, _, _ in pairs}:
                self._fold(cookie)
        wanted = self._wanted(pairs)
        self._renumber_meters(wanted)
        self._settle_rules(self._remake_pairs(wanted))

    def _wanted(self, pairs: set[Pair]) -> dict[Pair, _Want | None]:
        """What each pair's rules must now carry: the lowest level of its coflows (or of the
        coflows whose ACKs it carries), its TCP ports and its summed cap; ``None``: no rule."""
        wanted: dict[Pair, _Want | None] = {}
        level_of = self._level.__getitem__
        for pair in pairs:
            users = self._users.get(pair)
            if users:
                pair_caps = self._caps.get(pair)
                rate = sum(pair_caps[k] for k in sorted(pair_caps)) if pair_caps else None
                wanted[pair] = (min(map(level_of, users)), self._ports[pair], rate)
                continue
            cookie, src, dst = pair
            forward = self._users.get((cookie, dst, src))  # pair carries that one's ACKs
            if forward:
                wanted[pair] = (min(map(level_of, forward)), self._ports[(cookie, dst, src)], None)
            else:
                wanted[pair] = None
        return wanted

    def _renumber_meters(self, wanted: dict[Pair, _Want | None]) -> None:
        """Free the meters of pairs no longer metered, then number the new ones in order."""
        for pair, want in wanted.items():
            if want is not None and want[2] is not None:
                self._rated[pair] = want[2]
            elif self._rated.pop(pair, None) is not None:
                meter_id = self._meter_of.pop(pair)
                del self.meters[meter_id]
                self._changed_meters[meter_id] = None
        self.meter_ids.keep_only(self._rated)
        for pair in sorted(
            p for p, want in wanted.items() if want is not None and want[2] is not None
        ):
            meter_id = self._meter_of[pair] = self.meter_ids.id_for(pair)
            self.meters[meter_id] = rate_kbps(wanted[pair][2])
            self._changed_meters[meter_id] = None

    def _remake_pairs(self, wanted: dict[Pair, _Want | None]) -> set[tuple]:
        """Make each pair's rules from what it wants; a rule only its pair makes takes its new
        marks at once. The keys of the rules whose makers changed, to settle."""
        changed_keys = set()
        made_from = self._made_from
        # (bound once: a level move passes here for hundreds of pairs)
        rule_pairs, table, changed_rules = self._rule_pairs, self.rules, self._changed_rules
        for pair, want in wanted.items():
            if want is None:
                if pair not in made_from:
                    continue  # no rules before, none now
                made, rules = None, ()
            else:
                level, ports, rate = want
                meter_id = self._meter_of[pair] if rate is not None else None
                made = (ports, LEVEL_DSCP[level], meter_id)  # (levels from level_split)
                before = made_from.get(pair)
                if made == before:
                    continue  # (a pair's rules are made from these alone)
                rules = _pair_rules(*pair, *made)
                if before is not None and before[0] == ports:
                    # the same matches with other marks (a level moved): no maker changes
                    made_from[pair] = made
                    for rule in rules:
                        key = rule.key
                        # its own rule if it alone made it (and still does): else settled below
                        if len(rule_pairs[key]) == 1 and key not in changed_keys:
                            table[key] = rule
                            changed_rules[key] = None
                        else:
                            changed_keys.add(key)
                    continue
            cookie = pair[0]
            if pair in made_from:
                for rule in _pair_rules(*pair, *made_from[pair]):
                    rule_pairs[rule.key].discard(pair)
                    changed_keys.add(rule.key)
            for rule in rules:
                rule_pairs.setdefault(rule.key, set()).add(pair)
                changed_keys.add(rule.key)
            if rules:
                made_from[pair] = made
                self._owner_pairs.setdefault(cookie, set()).add(pair)
            else:
                del made_from[pair]
                owner_pairs = self._owner_pairs[cookie]
                owner_pairs.discard(pair)
                if not owner_pairs:
                    del self._owner_pairs[cookie]
        return changed_keys

    def _settle_rules(self, changed_keys: set[tuple]) -> None:
        """Every changed key's rule from its first maker pair (none left: the rule goes), and
        the owners' keys follow."""
        owner_keys, made_from = self._owner_keys, self._made_from
        # each maker pair's rules by key, looked up once per pair (a scan per key made a job
        # with many TCP ports quadratic: 2 rules per port, every one scanning them all)
        rules_by_key: dict[Pair, dict[tuple, FlowRule]] = {}
        for key in changed_keys:
            self._changed_rules[key] = None
            makers = self._rule_pairs.get(key)
            old = self.rules.get(key)
            if not makers:
                self._rule_pairs.pop(key, None)
                self.rules.pop(key, None)
                rule = None
            else:
                first = min(makers)
                by_key = rules_by_key.get(first)
                if by_key is None:
                    by_key = rules_by_key[first] = _pair_rules_by_key(*first, *made_from[first])
                rule = by_key[key]
                self.rules[key] = rule
            if old is not None and (rule is None or rule.cookie != old.cookie):
                keys = owner_keys[old.cookie]
                keys.discard(key)
                if not keys:
                    del owner_keys[old.cookie]
            if rule is not None and (old is None or rule.cookie != old.cookie):
                owner_keys.setdefault(rule.cookie, set()).add(key)


@functools.lru_cache(maxsize=CACHE_ENTRIES)
def _pair_rules(cookie, src, dst, ports, dscp, meter_id) -> tuple[FlowRule, ...]:
    # rules are immutable values, so a reorder reuses those of pairs whose marks did not change
    return tuple(FlowRule(cookie, p, m, dscp, meter_id) for p, m in _matches(src, dst, ports))


@functools.lru_cache(maxsize=CACHE_ENTRIES)
def _pair_rules_by_key(cookie, src, dst, ports, dscp, meter_id) -> dict[tuple, FlowRule]:
    # (read only: shared by every caller with the same marks)
    return {rule.key: rule for rule in _pair_rules(cookie, src, dst, ports, dscp, meter_id)}


def diff(installed: SwitchTable, desired: SwitchTable) -> list[Op]:
    """Operations that turn ``installed`` into ``desired``, in a safe order.

    Flow deletes first; then meter adds/modifies (before the flows that use them); then flow
    adds and modifies; then meter deletes (in OpenFlow 1.3 deleting a meter deletes the flows
    that still use it, so they go last); then a barrier. Nothing is sent for what is unchanged.
    """
    flow_deletes, flow_adds = [], []
    mods: dict[int, list[FlowRule]] = {}  # owner cookie -> its rules to modify
    moved: dict[int, set[tuple]] = {}  # owner cookie -> keys of its rules that took its DSCP
    # Only the keys, meters and owners that may differ are looked at: those the marking table
    # changed since ``installed``, if it made ``desired`` right after it; else all of them.
    changes = desired.changes_from(installed)
    if changes is None:
        old_keys, new_keys = installed.rules, desired.rules
        old_meters, new_meters = installed.meters, desired.meters
        wanted, had = desired.rules.get, installed.rules.get
    else:
        old_keys = new_keys = changes[0]
        old_meters = new_meters = changes[1]
        wanted, had = desired.rule, installed.rule
        if changes[2]:
            moved = _owner_moves(installed, desired, changes[0], changes[2])
    # (a rule left as it was is usually the very object installed: the identity test spares
    # comparing its fields, thousands of times a reorder)
    for key in old_keys:
        rule, want = had(key), wanted(key)
        if rule is not None and want is not rule and (want is None or want.cookie != rule.cookie):
            flow_deletes.append(Op(OpKind.FLOW_DELETE, rule=rule))
    for key in new_keys:
        rule, have = wanted(key), had(key)
        if rule is None or have is rule:
            continue
        if have is None or have.cookie != rule.cookie:
            flow_adds.append(Op(OpKind.FLOW_ADD, rule=rule))
        elif have.dscp != rule.dscp or have.meter_id != rule.meter_id:
            # (same key and owner: only the marks can differ)
            mods.setdefault(rule.cookie, []).append(rule)
    meter_puts, meter_deletes = [], []
    for meter_id in new_meters:
        kbps = desired.meters.get(meter_id)
        if kbps is None:
            continue
        if meter_id not in installed.meters:
            meter_puts.append(Op(OpKind.METER_ADD, meter_id=meter_id, rate_kbps=kbps))
        elif installed.meters[meter_id] != kbps:
            meter_puts.append(Op(OpKind.METER_MODIFY, meter_id=meter_id, rate_kbps=kbps))
    for meter_id in old_meters:
        if meter_id in installed.meters and meter_id not in desired.meters:
            meter_deletes.append(Op(OpKind.METER_DELETE, meter_id=meter_id))
    modifies = _by_owner(mods, moved, desired)
    ops = flow_deletes + meter_puts + flow_adds + modifies + meter_deletes
    return [*ops, Op(OpKind.BARRIER)] if ops else []


def _owner_moves(
    installed: SwitchTable,
    desired: SwitchTable,
    changed_rules: tuple,
    changed_owners: tuple,
) -> dict[int, set[tuple]]:
    """For each owner whose DSCP ``desired`` set (made right after ``installed``), the keys of
    its rules that only that DSCP changed (the other keys are looked at one by one)."""
    changed = set(changed_rules)
    keys_of = _keys_by_owner(desired, changed_owners)
    moved = {}
    for cookie in changed_owners:
        dscp = desired.owner_dscp[cookie]
        before = installed.owner_dscp.get(cookie)
        # (C speed) the owner's keys not changed one by one hold its rules as made before; if
        # it had a DSCP of its own, it was another (an owner is listed only when its DSCP
        # changed): every key moves
        keys = keys_of.get(cookie, set()) - changed
        if before is None:  # its rules' marks as made, maybe several: read them
            keys = {
                key
                for key in keys
                if (rule := installed.rule(key)).dscp != dscp or rule.meter_id is not None
            }
        if keys:
            moved[cookie] = keys
    return moved


def _keys_by_owner(table: SwitchTable, cookies: Iterable[int]) -> dict[int, set[tuple]]:
    """The keys of the rules each of ``cookies`` owns in ``table``."""
    maker = table.maker() if table.maker is not None else None
    keys = maker.owner_keys(table, cookies) if maker is not None else None
    if keys is None:  # (every rule read)
        wanted, keys = set(cookies), {}
        for key, rule in table.rules.items():
            if rule.cookie in wanted:
                keys.setdefault(rule.cookie, set()).add(key)
    return keys


def _by_owner(
    mods: dict[int, list[FlowRule]], moved: dict[int, set[tuple]], desired: SwitchTable
) -> list[Op]:
    """The modifies of the rules ``mods`` and of the keys ``moved``, by owner, those of an
    owner whose rules all end up with the same marks folded into one.

    A reorder usually moves whole owners (jobs) between levels; one non-strict MODIFY limited
    by the owner's cookie then replaces a MODIFY_STRICT per rule.
    """
    if not (mods or moved):
        return []
    cookies = [*mods, *(cookie for cookie in moved if cookie not in mods)]
    maker = desired.maker() if desired.maker is not None else None
    marks = maker.owner_marks(desired, cookies) if maker is not None else None
    if marks is None:  # (every rule read)
        marks, wanted = {}, set(cookies)
        for rule in desired.rules.values():
            if rule.cookie in wanted:
                marks.setdefault(rule.cookie, set()).add((rule.dscp, rule.meter_id))
    out = []
    for cookie in cookies:
        rules, keys = mods.get(cookie, ()), moved.get(cookie, ())
        if len(rules) + len(keys) > 1 and len(marks[cookie]) == 1:
            ((dscp, meter_id),) = marks[cookie]
            # the match must name IP: set_field ip_dscp needs it as a prerequisite
            template = FlowRule(cookie, 0, OWNER_MATCH, dscp, meter_id)
            out.append(Op(OpKind.OWNER_MODIFY, rule=template))
        else:
            out.extend(Op(OpKind.FLOW_MODIFY, rule=rule) for rule in rules)
            out.extend(Op(OpKind.FLOW_MODIFY, rule=desired.rule(key)) for key in keys)
    return out


def apply_ops(table: SwitchTable, ops: Iterable[Op]) -> SwitchTable:
    """What a switch holding ``table`` holds after ``ops`` (the model :func:`diff` is checked
    against; the engine records the desired table itself)."""
    rules = dict(table.rules)
    meters = dict(table.meters)
    for op in ops:
        match op.kind:
            case OpKind.FLOW_DELETE:
                rules.pop(op.rule.key, None)
            case OpKind.FLOW_ADD | OpKind.FLOW_MODIFY:
                if op.kind == OpKind.FLOW_MODIFY and op.rule.key not in rules:
                    raise ValueError(f"modify of a rule that is not installed: {op.rule}")
                _check_meter(op.rule, meters)
                rules[op.rule.key] = op.rule
            case OpKind.OWNER_MODIFY:
                _check_meter(op.rule, meters)
                for key, rule in rules.items():
                    if rule.cookie == op.rule.cookie:
                        rules[key] = replace(rule, dscp=op.rule.dscp, meter_id=op.rule.meter_id)
            case OpKind.METER_ADD | OpKind.METER_MODIFY:
                if (op.kind == OpKind.METER_ADD) == (op.meter_id in meters):
                    raise ValueError(f"{op.kind} of meter {op.meter_id}: wrong state")
                meters[op.meter_id] = op.rate_kbps
            case OpKind.METER_DELETE:
                meters.pop(op.meter_id)
                rules = {k: r for k, r in rules.items() if r.meter_id != op.meter_id}
            case OpKind.BARRIER:
                pass
            case _:
                raise ValueError(f"unknown op {op.kind}")
    return SwitchTable(rules, meters)


def _check_meter(rule: FlowRule, meters: Mapping[int, int]) -> None:
    if rule.meter_id is not None and rule.meter_id not in meters:
        raise ValueError(f"rule uses meter {rule.meter_id}, which does not exist")
