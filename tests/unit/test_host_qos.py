"""The end-host agent: the controller's marking rules become the same levels on a host's egress."""

from __future__ import annotations

from controller.model import Coflow, Flow
from controller.rules import MeterIds, desired_table
from controller.schedule import Schedule
from topologies.host_qos import (
    GENERATION_PREFS,
    HOST_DSCP_PREF,
    HOST_QUEUE_PACKETS,
    HostFilter,
    HostPriorities,
    filter_batch,
    host_batch,
    host_filters,
)
from topologies.qos import htb_commands, level_classid

from .instances import state_of


def rules_json(order: list[int]) -> list[dict]:
    """The controller's desired rules (as ``GET /api/rules`` serves them) for two coflows."""
    state = state_of(
        [
            Coflow(1, [Flow("10.0.0.1", "10.0.0.2", 100)], job_id=7),
            Coflow(2, [Flow("10.0.0.1", "10.0.0.3", 50)]),
        ]
    )
    table = desired_table(state, Schedule.from_order(order), {7: [5001, 5002]}, MeterIds())
    return [rule.to_json() for rule in table.rules.values()]


def test_a_hosts_filters_are_the_rules_it_sends_under_with_their_levels():
    rules = rules_json([2, 1])  # the jobless coflow first (level 0), job 7 at level 1
    assert host_filters(rules, "10.0.0.1") == {
        HostFilter("10.0.0.2", "dport", 5001, 1),
        HostFilter("10.0.0.2", "dport", 5002, 1),
        HostFilter("10.0.0.2", "sport", 5001, 1),
        HostFilter("10.0.0.2", "sport", 5002, 1),
        HostFilter("10.0.0.3", None, None, 0),
    }
    # the receivers send the ACKs of the same transfers at the same levels
    assert host_filters(rules, "10.0.0.2") == {
        HostFilter("10.0.0.1", field, port, 1)
        for field in ("dport", "sport")
        for port in (5001, 5002)
    }
    assert host_filters(rules, "10.0.0.3") == {HostFilter("10.0.0.1", None, None, 0)}
    assert host_filters(rules, "10.0.0.9") == frozenset()


def test_port_filters_come_before_host_pair_filters_and_name_the_levels_class():
    lines = filter_batch(
        "h1-eth0",
        [HostFilter("10.0.0.3", None, None, 0), HostFilter("10.0.0.2", "dport", 5001, 3)],
        2,
    )
    assert lines == [
        "filter add dev h1-eth0 parent 1: protocol ip prio 2 u32 match ip dst 10.0.0.2/32 "
        f"match ip protocol 6 0xff match ip dport 5001 0xffff flowid {level_classid(3)}",
        "filter add dev h1-eth0 parent 1: protocol ip prio 2 u32 match ip dst 10.0.0.3/32 "
        f"flowid {level_classid(0)}",
    ]


def test_a_hosts_dscp_filters_come_after_its_job_filters():
    prefs = {
        cmd[cmd.index("prio") + 1]
        for cmd in htb_commands("h1-eth0", 20e6, dscp_pref=HOST_DSCP_PREF)
        if cmd[1] == "filter"
    }
    assert prefs == {str(HOST_DSCP_PREF)}
    assert HOST_DSCP_PREF > max(GENERATION_PREFS)


def test_the_agent_adds_the_new_generation_before_deleting_the_old_and_skips_unchanged_hosts():
    ran: dict[str, list[list[str]]] = {"10.0.0.1": [], "10.0.0.2": [], "10.0.0.3": []}
    current = {"rules": rules_json([2, 1])}
    agent = HostPriorities(
        {ip: (f"dev{ip[-1]}", ran[ip].append) for ip in ran}, lambda: current["rules"]
    )
    assert agent.refresh() == 3
    assert all(len(batches) == 1 for batches in ran.values())
    first = ran["10.0.0.1"][0]
    assert all(f"prio {GENERATION_PREFS[1]} " in line for line in first)
    assert agent.refresh() == 0  # nothing changed: no tc at all

    current["rules"] = rules_json([1, 2])  # job 7 moves to level 0, the coflow to level 1
    assert agent.refresh() == 3
    update = ran["10.0.0.1"][1]
    adds = [line for line in update if line.startswith("filter add")]
    assert all(f"prio {GENERATION_PREFS[0]} " in line for line in adds)
    assert update[-1] == f"filter del dev dev1 parent 1: protocol ip prio {GENERATION_PREFS[1]} u32"
    assert sum(f"flowid {level_classid(0)}" in line for line in adds) == 4

    current["rules"] = []  # everything finished: only the old generation goes
    assert agent.refresh() == 3
    assert ran["10.0.0.2"][2] == [
        f"filter del dev dev2 parent 1: protocol ip prio {GENERATION_PREFS[0]} u32"
    ]
    assert agent.updates == 9 and agent.polls == 4


def test_a_hosts_classes_buffer_no_more_than_the_shaper_they_replace():
    lines = host_batch("h1-eth0", 20e6)
    queues = [line for line in lines if " pfifo " in line]
    assert len(queues) == 8
    assert all(line.endswith(f"pfifo limit {HOST_QUEUE_PACKETS}") for line in queues)
    assert queues[0].startswith(f"qdisc replace dev h1-eth0 parent {level_classid(0)} ")
    # a switch port keeps its device's queue
    assert not any("pfifo" in cmd for cmd in htb_commands("s1-eth1", 20e6))
