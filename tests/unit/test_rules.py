"""Rules from a schedule and the diff against what is installed, on an in-memory table."""

from __future__ import annotations

import pytest

from controller.model import Coflow, Flow
from controller.rules import (
    OWNER_COFLOW,
    OWNER_JOB,
    PRIORITY_IP,
    PRIORITY_TCP,
    MeterIds,
    Op,
    OpKind,
    SwitchTable,
    apply_ops,
    cookie_owner,
    desired_table,
    diff,
    owner_cookie,
    rate_kbps,
)
from controller.schedule import Schedule

from .instances import state_of


def example():
    state = state_of(
        [
            Coflow(1, [Flow("10.0.0.1", "10.0.0.2", 100)], job_id=7),
            Coflow(2, [Flow("10.0.0.3", "10.0.0.2", 50)]),
        ]
    )
    return state, {7: [5001]}


def by_owner(table: SwitchTable) -> dict:
    out = {}
    for rule in table.rules.values():
        out.setdefault(cookie_owner(rule.cookie), set()).add(
            (rule.priority, dict(rule.match).get("tcp_dst"), dict(rule.match).get("tcp_src"),
             rule.dscp, rule.meter_id)
        )  # fmt: skip
    return out


def test_cookies_tag_our_rules_with_their_owner():
    assert cookie_owner(owner_cookie(OWNER_JOB, 7)) == (OWNER_JOB, 7)
    assert cookie_owner(0x1234) is None
    with pytest.raises(ValueError):
        owner_cookie(OWNER_JOB, 2**32)


def test_job_rules_match_its_tcp_ports_both_ways_and_carry_its_level():
    state, ports = example()
    table = desired_table(state, Schedule.from_order([2, 1]), ports, MeterIds())
    assert len(table.rules) == 6  # and as many for the reverse direction (ACKs)
    assert by_owner(table) == {
        # job 7, rank 1 -> level 1 -> DSCP 48, data to and from port 5001
        (OWNER_JOB, 7): {(PRIORITY_TCP, 5001, None, 48, None),
                         (PRIORITY_TCP, None, 5001, 48, None)},
        # jobless coflow 2, rank 0 -> DSCP 56, any IP traffic between its hosts
        (OWNER_COFLOW, 2): {(PRIORITY_IP, None, None, 56, None)},
    }  # fmt: skip
    assert table.meters == {}


def test_rates_become_meters_shared_by_the_pair():
    state, ports = example()
    schedule = Schedule.from_order([1, 2], {(1, 0): 5e6})
    table = desired_table(state, schedule, ports, MeterIds())
    assert table.meters == {1: 5000}
    job_rules = [r for r in table.rules.values() if cookie_owner(r.cookie) == (OWNER_JOB, 7)]
    data = [r for r in job_rules if dict(r.match)["ipv4_src"] == "10.0.0.1"]
    acks = [r for r in job_rules if dict(r.match)["ipv4_src"] == "10.0.0.2"]
    assert {r.meter_id for r in data} == {1}
    assert len(acks) == 2 and {r.meter_id for r in acks} == {None}  # ACKs are never metered
    assert rate_kbps(10) == 1


def test_reorder_only_modifies_dscp():
    state, ports = example()
    ids = MeterIds()
    first = desired_table(state, Schedule.from_order([1, 2]), ports, ids)
    ops = diff(SwitchTable.empty(), first)
    # job 7: 2 rules each way (its port as destination and as source); coflow 2: 1 each way
    assert [op.kind for op in ops] == ["flow_add"] * 6 + ["barrier"]
    installed = apply_ops(SwitchTable.empty(), ops)
    assert installed == first

    second = desired_table(state, Schedule.from_order([2, 1]), ports, ids)
    ops = diff(installed, second)
    # each owner's rules move together: one MODIFY by cookie each
    assert sorted(op.kind for op in ops) == ["barrier", "owner_modify", "owner_modify"]
    assert apply_ops(installed, ops) == second
    assert diff(second, second) == []  # nothing changed, nothing sent


def test_meters_come_before_their_rules_and_go_after_them():
    state, ports = example()
    ids = MeterIds()
    plain = desired_table(state, Schedule.from_order([1, 2]), ports, ids)
    metered = desired_table(state, Schedule.from_order([1, 2], {(1, 0): 5e6}), ports, ids)
    up = diff(plain, metered)
    # only the data rules take the meter (not the ACK rules): one strict modify each
    assert [op.kind for op in up] == ["meter_add", "flow_modify", "flow_modify", "barrier"]
    assert apply_ops(plain, up) == metered
    down = diff(metered, plain)
    # back to one mark for all of the job's rules: one MODIFY by cookie, then the meter goes
    assert [op.kind for op in down] == ["owner_modify", "meter_delete", "barrier"]
    # apply-revert-apply gives the same tables
    assert apply_ops(apply_ops(plain, up), down) == plain
    assert apply_ops(apply_ops(apply_ops(plain, up), down), up) == metered
    # the in-memory table refuses the unsafe order (a rule using a meter not yet added)
    with pytest.raises(ValueError, match="meter 1"):
        apply_ops(plain, [up[1]])


def test_owner_rules_with_different_marks_are_modified_one_by_one():
    # Job 7 has two coflows on different pairs at different levels: no single mark fits both.
    state = state_of(
        [
            Coflow(1, [Flow("10.0.0.1", "10.0.0.2", 100)], job_id=7),
            Coflow(3, [Flow("10.0.0.4", "10.0.0.5", 10)], job_id=7),
            Coflow(2, [Flow("10.0.0.3", "10.0.0.2", 50)]),
        ]
    )
    ids = MeterIds()
    first = desired_table(state, Schedule.from_order([1, 3, 2]), {}, ids)
    second = desired_table(state, Schedule.from_order([3, 2, 1]), {}, ids)
    ops = diff(first, second)
    # job 7's four rules end at two levels: strict modifies; coflow 2 moves as one owner
    assert sorted(op.kind for op in ops) == ["barrier"] + ["flow_modify"] * 4 + ["owner_modify"]
    assert apply_ops(first, ops) == second


def test_jobs_that_move_as_a_whole_take_their_dscp_in_one_entry_and_one_message():
    # Beamer's level moves: whole jobs change level; the kept table gives each moved job one
    # DSCP (not a rule per pair), the table's rules are the ones made from scratch, and the
    # diff sends one MODIFY by cookie per moved job and nothing else
    import random

    from controller.model import ClusterState
    from controller.rules import LEVEL_DSCP, MarkingTable

    rng = random.Random(3)
    hosts = [f"10.0.0.{h}" for h in range(1, 9)]
    coflows = [
        Coflow(job * 10 + k, [Flow(*rng.sample(hosts, 2), 100.0) for _ in range(3)], job_id=job)
        for job in range(6)
        for k in range(2)
    ]
    state = ClusterState.build(coflows)
    ports = {job: [5000 + job] for job in range(6)}
    table, fresh = MarkingTable(MeterIds()), MeterIds()
    jobs = list(range(6))
    installed = SwitchTable.empty()
    for step in range(12):
        before = jobs[:]
        rng.shuffle(jobs)
        groups = [[c.coflow_id for c in coflows if c.job_id == job] for job in jobs]
        got = table.update(state, Schedule.from_groups(groups), ports)
        assert got.rules == reference_table(state, Schedule.from_groups(groups), ports, fresh).rules
        ops = diff(installed, got)
        assert apply_ops(installed, ops) == got
        installed = got
        if step == 0:
            continue
        movers = {job for job in jobs if jobs.index(job) != before.index(job)}
        assert {cookie_owner(c)[1]: d for c, d in got.owner_dscp.items() if cookie_owner(c)[1]
                in movers} == {job: LEVEL_DSCP[jobs.index(job)] for job in movers}  # fmt: skip
        assert sorted(got.changed_owners) == sorted(owner_cookie(OWNER_JOB, j) for j in movers)
        assert got.changed_rules == ()
        assert sorted((op.kind, op.rule.cookie, op.rule.dscp) for op in ops[:-1]) == sorted(
            (OpKind.OWNER_MODIFY, owner_cookie(OWNER_JOB, job), LEVEL_DSCP[jobs.index(job)])
            for job in movers
        )
    # a job's coflow gets new flows: its pairs are rebuilt from its DSCP, the table is the
    # same as made from scratch, and the job no longer has a DSCP of its own
    moved = Coflow(coflows[0].coflow_id, [Flow("10.0.0.1", "10.0.0.8", 5.0)], job_id=0)
    state = ClusterState.build([moved, *coflows[1:]])
    groups = [[c.coflow_id for c in coflows if c.job_id == job] for job in jobs]
    got = table.update(state, Schedule.from_groups(groups), ports)
    assert got.rules == reference_table(state, Schedule.from_groups(groups), ports, fresh).rules
    assert owner_cookie(OWNER_JOB, 0) not in got.owner_dscp
    assert apply_ops(installed, diff(installed, got)) == got


def test_a_job_at_one_level_again_modifies_only_the_rules_that_were_elsewhere():
    # job 7 (no TCP ports: one rule a pair) sends both ways; each direction is the other's
    # ACK pair but has users of its own, so each takes its own coflow's level. Coflow 2 joins
    # coflow 1's level: the job is at one level, and only the one rule of 10.0.0.2 -> .1 moves
    from controller.model import ClusterState
    from controller.rules import LEVEL_DSCP, MarkingTable

    state = ClusterState.build(
        [
            Coflow(1, [Flow("10.0.0.1", "10.0.0.2", 100)], job_id=7),
            Coflow(2, [Flow("10.0.0.2", "10.0.0.1", 100)], job_id=7),
        ]
    )
    table = MarkingTable(MeterIds())
    first = table.update(state, Schedule.from_groups([[1], [2]]), {})
    second = table.update(state, Schedule.from_groups([[1, 2]]), {})
    assert second.owner_dscp == {owner_cookie(OWNER_JOB, 7): LEVEL_DSCP[0]}
    ops = diff(first, second)
    assert [(op.kind, op.rule.match[1], op.rule.dscp) for op in ops[:-1]] == [
        (OpKind.FLOW_MODIFY, ("ipv4_src", "10.0.0.2"), LEVEL_DSCP[0])
    ]
    assert apply_ops(first, ops) == second


def test_a_coflow_with_no_bytes_left_moving_alone_sends_nothing():
    # coflow 3 of job 7 has no bytes left (no pairs, no rules): its moves leave every rule as
    # it was, and the diffs are empty, also when the job is at one level again
    from controller.model import ClusterState
    from controller.rules import MarkingTable

    state = ClusterState.build(
        [
            Coflow(1, [Flow("10.0.0.1", "10.0.0.2", 100)], job_id=7),
            Coflow(2, [Flow("10.0.0.1", "10.0.0.3", 100)], job_id=7),
            Coflow(3, [Flow("10.0.0.1", "10.0.0.2", 100, 0.0)], job_id=7),
            Coflow(9, [Flow("10.0.0.4", "10.0.0.5", 100)]),
        ]
    )
    table = MarkingTable(MeterIds())
    table.update(state, Schedule.from_groups([[1, 2, 3], [9]]), {})
    first = table.update(state, Schedule.from_groups([[9], [1, 2, 3]]), {})
    apart = table.update(state, Schedule.from_groups([[9], [1, 2], [3]]), {})
    again = table.update(state, Schedule.from_groups([[9], [1, 2, 3]]), {})
    assert first.rules == apart.rules == again.rules
    assert diff(first, apart) == diff(apart, again) == []


def test_finished_owners_lose_rules_and_meters():
    state, ports = example()
    ids = MeterIds()
    full = desired_table(state, Schedule.from_order([1, 2], {(1, 0): 5e6}), ports, ids)
    del state.coflows[1]
    rest = desired_table(state, Schedule.from_order([2]), ports, ids)
    ops = diff(full, rest)
    # job 7's four rules go, then coflow 2 moves up to level 0, then job 7's meter goes
    kinds = ["flow_delete"] * 4 + ["owner_modify", "meter_delete", "barrier"]
    assert [op.kind for op in ops] == kinds
    assert apply_ops(full, ops) == rest
    assert rest.meters == {}


def test_meter_ids_are_stable_and_reused():
    ids = MeterIds()
    assert [ids.id_for("a"), ids.id_for("b"), ids.id_for("a")] == [1, 2, 1]
    ids.keep_only(["b"])
    assert ids.id_for("c") == 1
    assert ids.id_for("b") == 2


def test_apply_ops_rejects_nonsense():
    with pytest.raises(ValueError, match="unknown op"):
        apply_ops(SwitchTable.empty(), [Op("flow_explode")])


def reference_table(state, schedule, job_tcp_ports, meter_ids) -> SwitchTable:
    """The table made from scratch, one pair after the other (what MarkingTable keeps)."""
    from controller.rules import _pair_rules
    from controller.schedule import coflow_levels, dscp_of_level

    pair_level, pair_caps, pair_ports = {}, {}, {}
    for coflow_id, level in coflow_levels(schedule).items():
        coflow = state.coflows[coflow_id]
        if coflow.job_id is not None:
            cookie = owner_cookie(OWNER_JOB, coflow.job_id)
            ports = tuple(job_tcp_ports.get(coflow.job_id, ()))
        else:
            cookie, ports = owner_cookie(OWNER_COFLOW, coflow_id), ()
        for flow in coflow.flows:
            if flow.remaining_bytes <= 0:
                continue
            pair = (cookie, flow.src, flow.dst)
            pair_level[pair] = min(level, pair_level.get(pair, level))
            pair_ports[pair] = ports
            cap = schedule.flow_rates_bps.get((coflow_id, flow.flow_id))
            if cap is not None:
                pair_caps.setdefault(pair, {})[(coflow_id, flow.flow_id)] = cap
    for (cookie, src, dst), level in list(pair_level.items()):
        if (cookie, dst, src) not in pair_ports:
            pair_level[(cookie, dst, src)] = level
            pair_ports[(cookie, dst, src)] = pair_ports[(cookie, src, dst)]
    pair_rate = {pair: sum(caps[k] for k in sorted(caps)) for pair, caps in pair_caps.items()}
    meter_ids.keep_only(pair_rate)
    table = SwitchTable.empty()
    for pair in sorted(pair_level):
        meter_id = None
        if pair in pair_rate:
            meter_id = meter_ids.id_for(pair)
            table.meters[meter_id] = rate_kbps(pair_rate[pair])
        rules = _pair_rules(*pair, pair_ports[pair], dscp_of_level(pair_level[pair]), meter_id)
        for rule in rules:
            table.rules.setdefault(rule.key, rule)
    return table


def _phase(op: Op) -> str:
    """An operation's place in a diff's order (modifies of one rule or of an owner's rules
    come in one phase, meter adds and modifies in another)."""
    if op.kind in (OpKind.FLOW_MODIFY, OpKind.OWNER_MODIFY):
        return "flow modify"
    return "meter put" if op.kind in (OpKind.METER_ADD, OpKind.METER_MODIFY) else op.kind.name


@pytest.mark.parametrize("seed", range(8))
def test_a_kept_marking_table_equals_one_made_from_scratch_at_every_update(seed):
    # coflows come, go, change flows and levels, get caps; jobs change TCP ports; owners share
    # matches (two jobs on the same hosts and port); the table kept from update to update is
    # the one made from scratch, meter ids included
    import random

    from controller.model import ClusterState
    from controller.rules import MarkingTable

    rng = random.Random(seed)
    hosts = [f"10.0.0.{h}" for h in range(1, 5)]
    kept_ids, fresh_ids = MeterIds(), MeterIds()
    table = MarkingTable(kept_ids)
    coflows: dict[int, Coflow] = {}
    job_ports = {job: [5000 + job % 2] for job in range(4)}
    installed = older = SwitchTable.empty()
    kept = []  # tables of earlier updates
    for step in range(150):
        for _ in range(rng.randint(1, 3)):
            coflow_id = rng.randrange(12)
            if rng.random() < 0.3:
                coflows.pop(coflow_id, None)
                continue
            flows = []
            for _ in range(rng.randint(1, 3)):
                src, dst = rng.sample(hosts, 2)
                flows.append(Flow(src, dst, 100.0, rng.choice((0.0, 50.0, 100.0))))
            coflows[coflow_id] = Coflow(coflow_id, flows, job_id=rng.choice((None, 0, 1, 2, 3)))
        if rng.random() < 0.1:
            job_ports[rng.randrange(4)] = rng.choice(([], [5000], [5000, 5001]))
        order = list(coflows)
        rng.shuffle(order)
        caps = {}
        if rng.random() < 0.5:
            for coflow_id in order:
                for flow in coflows[coflow_id].flows:
                    if rng.random() < 0.5:
                        caps[(coflow_id, flow.flow_id)] = rng.choice((1e6, 2.5e6, 7e6))
        if rng.random() < 0.5:
            schedule = Schedule.from_order(order, caps)
        else:  # ranks of ties
            cut = rng.randint(0, len(order))
            schedule = Schedule.from_groups([order[:cut], order[cut:]], caps)
        state = ClusterState.build(coflows.values())
        got = table.update(state, schedule, job_ports)
        # a table keeps the one before's rules only until it puts its own together
        assert got._base_rules is None or got._rules is None
        want = reference_table(state, schedule, job_ports, fresh_ids)
        assert got.rules == want.rules
        assert got.meters == want.meters
        # the diff from the table before looks only at what changed, and gives the operations
        # the whole diff gives (in another order within a kind) and what the switch ends with
        assert (got.changes_from(installed) is None) == (step == 0)
        quick = diff(installed, got)
        # (plain copies: every rule read, the owners' marks too)
        whole = diff(SwitchTable(dict(installed.rules), dict(installed.meters)),
                     SwitchTable(dict(got.rules), dict(got.meters)))  # fmt: skip
        owners = {}
        for key, rule in got.rules.items():
            owners.setdefault(rule.cookie, set()).add(key)
        assert table._owner_keys == owners
        assert list(map(_phase, quick)) == list(map(_phase, whole))  # kinds come in order
        assert sorted(map(repr, quick)) == sorted(map(repr, whole))
        assert apply_ops(installed, quick) == got
        # from an older table (a switch that missed an update) the whole diff is taken
        assert apply_ops(older, diff(older, got)) == got
        older, installed = installed, got
        if step % 10 == 5:
            kept.append(got)
        if step % 10 == 0:  # the same update again changes nothing
            again = table.update(state, schedule, job_ports)
            assert again.changed_rules == again.changed_meters == again.changed_owners == ()
            assert diff(installed, again) == []
            installed = again
        assert (
            desired_table(state, schedule, job_ports, MeterIds()).rules.keys() == want.rules.keys()
        )

    # a table the marking table made before its last is diffed to from its rules alone
    def plain(t):
        return SwitchTable(dict(t.rules), dict(t.meters))

    for early in kept:
        assert sorted(map(repr, diff(plain(installed), early))) == sorted(
            map(repr, diff(plain(installed), plain(early)))
        )
    # nothing is kept of coflows gone (churn does not grow it)
    emptied = table.update(ClusterState(), Schedule(()), job_ports)
    assert emptied == SwitchTable.empty()
    assert not (table._marks or table._users or table._caps or table._ports or table._rated)
    assert not (table._coflow_of or table._top or table._lowest or table._made_from)
    assert not (table._meter_of or table._rule_pairs or table._level)
    assert not (table._owner_pairs or table.owner_dscp)
    assert not (table._job_coflows or table._capped)


@pytest.mark.parametrize("seed", range(6))
def test_a_kept_table_on_the_index_snapshots_reads_only_the_coflows_that_changed(seed):
    # states as the registry makes them (their coflows are their snapshot's coflows_by_id):
    # an update reads the objects of the coflows the index says changed since the snapshot it
    # saw last, not every coflow's; coflows arrive, report progress (new objects in their
    # place, fewer bytes or other flows), finish, leave, come back, now and then many at once
    # (a snapshot made anew) or none; the table is the one made from scratch at every update
    import random

    from controller.model import ClusterState, CoflowIndex
    from controller.rules import MarkingTable

    rng = random.Random(seed)
    hosts = [f"10.0.0.{h}" for h in range(1, 6)]
    table, index = MarkingTable(MeterIds()), CoflowIndex()
    coflows: dict[int, Coflow] = {}
    job_ports = {job: [5000 + job] for job in range(4)}
    used = []
    real = MarkingTable._objects_changed

    def spy(self, state):
        got = real(self, state)
        used.append(got is not None)
        return got

    MarkingTable._objects_changed = spy
    try:
        clock = 0.0
        for step in range(200):
            for change in range(rng.choice((0, 1, 1, 2, 3, 40))):
                if change == 1 and rng.random() < 0.3:
                    index.snapshot()  # (one the table does not see)
                coflow_id = rng.randrange(60)
                action = rng.random()
                if action < 0.2:
                    coflows.pop(coflow_id, None)
                    index.remove(coflow_id)
                    continue
                old = coflows.get(coflow_id)
                flows = []
                for _ in range(rng.randint(1, 3)):
                    src, dst = rng.sample(hosts, 2)
                    flows.append(Flow(src, dst, 100.0, rng.choice((0.0, 50.0, 100.0))))
                if old is not None and action < 0.7:  # progress: the same arrival
                    arrival = old.arrival_s
                else:
                    clock += 1.0
                    arrival = clock
                job = rng.choice((None, 0, 1, 2, 3))
                coflows[coflow_id] = Coflow(coflow_id, flows, arrival, job_id=job)
                index.put(coflows[coflow_id])
            loads = index.snapshot()
            state = ClusterState(coflows=loads.coflows_by_id, loads=loads)
            order = list(state.coflows)
            rng.shuffle(order)
            schedule = Schedule.from_order(order)
            got = table.update(state, schedule, job_ports)
            want = reference_table(state, schedule, job_ports, MeterIds())
            assert got.rules == want.rules
            assert got.meters == want.meters
            if step % 10 == 9 and coflows:
                # the same snapshot with coflows of another dict: their objects are read
                other = dict(state.coflows)
                moved = rng.choice(list(other))
                src, dst = rng.sample(hosts, 2)
                other[moved] = Coflow(moved, [Flow(src, dst, 100.0)], other[moved].arrival_s,
                                      job_id=other[moved].job_id)  # fmt: skip
                state = ClusterState(coflows=other, loads=loads)
                got = table.update(state, schedule, job_ports)
                assert got.rules == reference_table(state, schedule, job_ports, MeterIds()).rules
    finally:
        MarkingTable._objects_changed = real
    assert used[0] is False  # (the first update has seen no snapshot)
    assert sum(used) > len(used) // 2  # most updates read only what changed
