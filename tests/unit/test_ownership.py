"""What a run may delete: only what carries its project's mark (no root, no OVS).

The machine is a fake command runner answering ``ovs-vsctl ... list Bridge``, ``ip -j link
show`` and ``ip -j netns list`` from a table, and recording (and applying) every change.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess

import pytest

from controller.cluster import Cluster
from topologies import ownership
from topologies.ownership import (
    KEY,
    Found,
    Names,
    NamesTaken,
    Owner,
    Taken,
    describe,
    parse_bridges,
    parse_links,
    parse_namespaces,
    plan,
)
from topologies.testbed import ClusterTopo

ME = Owner("testbed", 4242, 1000)
GONE = Owner("testbed", 977, 500)  # a crashed run
OTHER = Owner("bench", 3131, 700)  # a benchmark that runs right now


def alive(owner: Owner) -> bool:
    return owner in (ME, OTHER)


def done(stdout: str = "", code: int = 0, stderr: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], code, stdout, stderr)


class Machine:
    """Bridges and interfaces of the root namespace, and named namespaces (their loopback's
    alias), each name with its mark's value or ``None``."""

    def __init__(self, bridges=None, links=None, namespaces=None, ovs_down=False) -> None:
        self.bridges = dict(bridges or {})
        self.links = {"lo": None, "eth0": None, **(links or {})}
        self.namespaces = dict(namespaces or {})
        self.ovs_down = ovs_down
        self.changes: list[list[str]] = []

    def __call__(self, argv) -> subprocess.CompletedProcess:
        argv = list(argv)
        if argv[0] == "ovs-vsctl" and self.ovs_down:
            return done(code=1, stderr="ovs-vsctl: unix:/var/run/openvswitch/db.sock: database "
                        "connection failed (No such file or directory)")  # fmt: skip
        if argv == list(ownership.BRIDGES_ARGV):
            data = [[name, ["map", [[KEY, mark]] if mark else [["other", "x"]]]]
                    for name, mark in self.bridges.items()]  # fmt: skip
            return done(json.dumps({"data": data, "headings": ["name", "external_ids"]}))
        if argv == list(ownership.LINKS_ARGV):
            return done(self._links(self.links))
        if argv == list(ownership.NAMESPACES_ARGV):
            return done(
                json.dumps([{"name": n} for n in self.namespaces]) if self.namespaces else ""
            )
        if argv[:2] == ["ip", "-n"] and argv[3:] == ["-j", "link", "show"]:
            return done(self._links({"lo": self.namespaces[argv[2]]}))
        if argv[:3] == ["ip", "link", "show"]:
            return done(code=0 if argv[-1] in self.links else 1)
        self.changes.append(argv)
        if argv[:4] == ["ovs-vsctl", "--if-exists", "del-br", argv[-1]]:
            self.bridges.pop(argv[-1], None)
            self.links.pop(argv[-1], None)  # a userspace bridge's own interface goes with it
        elif argv[:4] == ["ip", "link", "del", "dev"]:
            if self.links.pop(argv[-1], "gone") == "gone":
                return done(code=1, stderr=f'Cannot find device "{argv[-1]}"')
        elif argv[:3] == ["ip", "netns", "del"]:
            del self.namespaces[argv[-1]]
        return done()

    @staticmethod
    def _links(links) -> str:
        return json.dumps([
            {"ifindex": i, "ifname": name, **({"ifalias": f"hpo-netsched={mark}"} if mark else {})}
            for i, (name, mark) in enumerate(links.items(), 1)
        ])  # fmt: skip


TESTBED = Names(bridges=("s1",), interfaces=("s1", "s1-eth1", "s1-eth2"))


# marks


def test_a_tag_names_its_process_and_reads_back():
    assert ME.tag == "testbed.4242.1000" and Owner.parse(ME.tag) == ME
    for mark in (None, "", "testbed", "testbed.12", "Testbed.1.2", "testbed.1.2 ", "x.-1.2"):
        assert Owner.parse(mark) is None, mark
    assert ownership.bridge_mark(ME) == "external_ids:hpo-netsched=testbed.4242.1000"
    assert ownership.interface_mark_argv("s1-eth1", ME) == [
        "ip", "link", "set", "dev", "s1-eth1", "alias", "hpo-netsched=testbed.4242.1000",
    ]  # fmt: skip
    assert ownership.interface_mark_argv("lo", ME, namespace="ith1")[:3] == ["ip", "-n", "ith1"]


def test_this_process_is_running_and_a_reused_pid_is_not_its_owner():
    me = ownership.this_process("test")
    assert me.pid == os.getpid() and me.start == ownership.process_start(os.getpid())
    assert ownership.running(me)
    assert not ownership.running(Owner("test", me.pid, me.start + 1))  # same PID, later process
    with pytest.raises(ValueError):
        ownership.this_process("a b")


# what the commands print


def test_recorded_outputs_are_read():
    ovs = (
        '{"data":[["benchhold",["map",[]]],["s1",["map",[["hpo-netsched","testbed.4242.1000"],'
        '["other","x"]]]]],"headings":["name","external_ids"]}'
    )
    assert parse_bridges(ovs) == {"benchhold": None, "s1": ME.tag}
    links = (
        '[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536},'
        '{"ifindex":9,"ifname":"s1-eth1","link":"h1-eth0","ifalias":"hpo-netsched=testbed.977.500"},'
        '{"ifindex":10,"ifname":"s1-eth2","ifalias":"uplink to the lab"}]'
    )
    assert parse_links(links) == {"lo": None, "s1-eth1": GONE.tag, "s1-eth2": None}
    assert parse_namespaces("") == set()  # (what ip prints with no namespace at all)
    assert parse_namespaces('[{"name":"ith1","id":0},{"name":"ith2"}]') == {"ith1", "ith2"}


# the decision


def test_free_names_need_nothing():
    decided = plan(TESTBED, Found({"benchhold": None}, {"eth0": None}), ME, alive)
    assert decided.delete == Names() and decided.taken == ()


def test_a_foreign_bridge_with_a_wanted_name_is_refused():
    found = Found(bridges={"s1": None}, interfaces={"s1": None})
    decided = plan(TESTBED, found, ME, alive)
    assert decided.taken == (Taken("OVS bridge", "s1"),)  # its own interface goes with it
    assert decided.delete == Names()


def test_leftovers_of_a_crashed_run_and_of_this_process_are_deleted():
    found = Found(
        bridges={"s1": GONE.tag, "s2": ME.tag},
        interfaces={"s1": None, "s1-eth1": GONE.tag, "s1-eth2": ME.tag, "s2": None},
    )
    wanted = Names(bridges=("s1", "s2"), interfaces=("s1", "s2", "s1-eth1", "s1-eth2"))
    decided = plan(wanted, found, ME, alive)
    assert decided.taken == ()
    assert decided.delete == Names(bridges=("s1", "s2"), interfaces=("s1-eth1", "s1-eth2"))


def test_names_of_a_running_process_or_unmarked_ones_are_refused():
    found = Found(
        bridges={"s1": OTHER.tag, "s101": "something else"},
        interfaces={"s1-eth1": None, "s1-eth2": GONE.tag},
        namespaces={"ith1": OTHER.tag, "ith2": None},
    )
    wanted = Names(("s1", "s101"), ("s1-eth1", "s1-eth2"), ("ith1", "ith2", "ith3"))
    decided = plan(wanted, found, ME, alive)
    assert decided.taken == (
        Taken("OVS bridge", "s1", OTHER),
        Taken("OVS bridge", "s101"),
        Taken("interface", "s1-eth1"),
        Taken("network namespace", "ith1", OTHER),
        Taken("network namespace", "ith2"),
    )
    assert decided.delete == Names(interfaces=("s1-eth2",))  # (claim deletes nothing then)


def test_an_interface_named_like_a_wanted_bridge_without_that_bridge_is_judged_itself():
    decided = plan(TESTBED, Found(bridges={}, interfaces={"s1": None}), ME, alive)
    assert decided.taken == (Taken("interface", "s1"),)


# the error


def test_the_error_is_one_line_naming_each_name_and_how_to_free_it():
    message = describe([Taken("OVS bridge", "s1"), Taken("interface", "s1-eth9")])
    assert message == (
        "names this run needs are taken: OVS bridge s1, interface s1-eth9 exist and were not "
        "made by this project's runs: delete them if nothing uses them (ovs-vsctl del-br s1; "
        "ip link del s1-eth9) or stop what uses them"
    )
    assert describe([Taken("network namespace", "ith1")]) == (
        "names this run needs are taken: network namespace ith1 exists and was not made by this "
        "project's runs: delete it if nothing uses it (ip netns del ith1) or stop what uses it"
    )
    both = describe([Taken("OVS bridge", "s1", OTHER), Taken("interface", "s1-eth1")])
    assert "\n" not in both
    assert both.endswith(
        "; OVS bridge s1 belongs to the running process 3131 (a bench run): wait for it to end "
        "or stop it"
    )
    assert str(NamesTaken([Taken("OVS bridge", "s1")])).startswith("names this run needs")


def test_the_error_passes_the_experiments_run_loops():
    # they retry, or go on with the next run, on these; every later run would be refused too
    from experiments.testbed_run import RUN_FAILURES

    assert not isinstance(NamesTaken([Taken("OVS bridge", "s1")]), RUN_FAILURES)


# on the (fake) machine


def test_claim_refuses_and_deletes_nothing():
    machine = Machine(bridges={"s1": None}, links={"s1": None, "s1-eth1": GONE.tag})
    with pytest.raises(NamesTaken, match=r"OVS bridge s1 exists .*\(ovs-vsctl del-br s1\)"):
        ownership.claim(TESTBED, ME, machine, alive)
    assert machine.changes == []
    assert "s1" in machine.bridges and "s1-eth1" in machine.links


def test_claim_deletes_a_crashed_run_s_leftovers_by_name():
    machine = Machine(
        bridges={"s1": GONE.tag, "benchhold": None},
        links={"s1": None, "s1-eth1": GONE.tag, "s1-eth2": GONE.tag, "s1-eth3": None},
    )
    deleted = ownership.claim(TESTBED, ME, machine, alive)
    assert deleted == Names(bridges=("s1",), interfaces=("s1-eth1", "s1-eth2"))
    assert machine.changes == [
        ["ovs-vsctl", "--if-exists", "del-br", "s1"],
        ["ip", "link", "del", "dev", "s1-eth1"],
        ["ip", "link", "del", "dev", "s1-eth2"],
    ]
    assert set(machine.bridges) == {"benchhold"} and "s1-eth3" in machine.links


def test_a_veth_pair_s_second_end_already_gone_is_no_error():
    machine = Machine(links={"s1-eth3": GONE.tag, "s101-eth1": GONE.tag})
    wanted = Names(interfaces=("s1-eth3", "s101-eth1"))

    def pair(argv):  # deleting one end deletes the other
        result = machine(argv)
        if list(argv) == ["ip", "link", "del", "dev", "s1-eth3"]:
            machine.links.pop("s101-eth1")
        return result

    ownership.claim(wanted, ME, pair, alive)
    assert "s1-eth3" not in machine.links and "s101-eth1" not in machine.links


def test_a_failing_deletion_of_an_interface_still_there_is_an_error():
    machine = Machine(links={"s1-eth1": GONE.tag})

    def refuse_deletes(argv):
        if list(argv)[:3] == ["ip", "link", "del"]:
            return done(code=2, stderr="RTNETLINK answers: Operation not permitted")
        return machine(argv)

    with pytest.raises(ownership.CommandFailed, match="ip link del dev s1-eth1: RTNETLINK"):
        ownership.claim(Names(interfaces=("s1-eth1",)), ME, refuse_deletes, alive)


def test_namespaces_are_judged_by_their_loopback_s_mark():
    machine = Machine(namespaces={"ith1": GONE.tag, "ith2": ME.tag, "other": None})
    wanted = Names(namespaces=("ith1", "ith2", "ith3"))
    assert ownership.claim(wanted, ME, machine, alive) == Names(namespaces=("ith1", "ith2"))
    assert machine.changes == [["ip", "netns", "del", "ith1"], ["ip", "netns", "del", "ith2"]]
    assert set(machine.namespaces) == {"other"}


def test_ovs_not_answering_is_an_error_naming_the_command():
    with pytest.raises(ownership.CommandFailed, match="list Bridge: ovs-vsctl: unix:"):
        ownership.claim(TESTBED, ME, Machine(ovs_down=True), alive)
    # without bridges to make, OVS is not asked
    ownership.claim(Names(interfaces=("x",)), ME, Machine(ovs_down=True), alive)


def test_release_deletes_only_what_carries_this_run_s_own_tag():
    machine = Machine(
        bridges={"s1": ME.tag, "s2": GONE.tag, "s3": None},
        links={"s1-eth1": ME.tag, "s2-eth1": OTHER.tag, "s3-eth1": None},
        namespaces={"ith1": ME.tag, "ith2": None},
    )
    wanted = Names(
        ("s1", "s2", "s3"), ("s1", "s1-eth1", "s2-eth1", "s3-eth1"), ("ith1", "ith2", "ith3")
    )
    released = ownership.release(wanted, ME, machine)
    assert released == Names(("s1",), ("s1-eth1",), ("ith1",))
    assert set(machine.bridges) == {"s2", "s3"}
    assert {"s2-eth1", "s3-eth1"} <= set(machine.links) and "s1-eth1" not in machine.links
    assert set(machine.namespaces) == {"ith2"}


def test_confirm_finds_each_new_bridge_ours_or_says_what_went_wrong():
    ownership.confirm(["s1"], ME, Machine(bridges={"s1": ME.tag}), alive)
    with pytest.raises(NamesTaken, match="OVS bridge s1 exists and was not made"):
        ownership.confirm(["s1"], ME, Machine(bridges={"s1": None}), alive)
    with pytest.raises(NamesTaken, match="belongs to the running process 3131"):
        ownership.confirm(["s1"], ME, Machine(bridges={"s1": OTHER.tag}), alive)
    with pytest.raises(ownership.CommandFailed, match="OVS did not add the bridge s2 "):
        ownership.confirm(["s1", "s2"], ME, Machine(bridges={"s1": ME.tag}), alive)


# the testbed's names


def test_the_testbed_s_names_are_its_bridges_and_switch_ports():
    assert ownership.mininet_names(ClusterTopo(Cluster.one_switch(3, 20e6))) == Names(
        bridges=("s1",), interfaces=("s1", "s1-eth1", "s1-eth2", "s1-eth3")
    )
    fabric = ownership.mininet_names(ClusterTopo(Cluster.leaf_spine(2, 1, 1, 20e6)))
    assert fabric.bridges == ("s1", "s2", "s101")
    # hosts' ports live in their own namespaces; both ends of an uplink in the root one
    assert sorted(fabric.interfaces) == sorted(
        ["s1", "s2", "s101", "s1-eth1", "s2-eth1", "s1-eth2", "s101-eth1", "s2-eth2", "s101-eth2"]
    )
    assert not any(name.startswith("h") for name in fabric.interfaces)


# Mininet's switch, as the testbed starts it


MININET_START = (
    '-- --id=@s1c0 create Controller target=\\"tcp:127.0.0.1:6653\\" max_backoff=1000 -- '
    "--if-exists del-br s1 -- add-br s1 -- set bridge s1 controller=[@s1c0] "
    "other_config:datapath-id=1 fail_mode=secure datapath_type=netdev"
)


def test_the_switch_s_start_no_longer_deletes_a_bridge_of_its_name():
    from topologies.network import keep_existing_bridge

    kept = keep_existing_bridge(MININET_START, "s1")
    assert "del-br" not in kept and " -- add-br s1 -- set bridge s1 " in kept
    assert keep_existing_bridge(MININET_START, "s10") == MININET_START  # another switch's


class _Controller:
    name, protocol, port = "c0", "tcp", 6653

    def IP(self) -> str:  # noqa: N802 (Mininet's name)
        return "127.0.0.1"


def test_the_marked_switch_adds_its_bridge_marked_and_deletes_none_in_one_transaction(
    monkeypatch,
):
    """Mininet's own start code, run in batch mode (it only composes the ``ovs-vsctl`` command)
    on a switch whose shell is never started: no root needed."""
    from topologies.network import MarkedSwitch

    monkeypatch.setattr(MarkedSwitch, "OVSVersion", "3.1", raising=False)  # (OVSSwitch.setup's)

    switch = object.__new__(MarkedSwitch)
    switch.name, switch.owner, switch.dpid = "s1", ME, "0000000000000001"
    switch.failMode, switch.datapath, switch.inband = "secure", "user", False
    switch.protocols, switch.stp, switch.reconnectms = "OpenFlow13", False, 1000
    switch.listenPort, switch.inNamespace, switch.batch = None, False, True
    switch.commands, switch.intfs, switch.ports, switch._uuids = [], {}, {}, []
    switch.start([_Controller()])
    [command] = switch.commands  # one ovs-vsctl command: one transaction
    assert "del-br" not in command
    add = command.index(" -- add-br s1 -- set bridge s1 ")
    assert command.index(" external_ids:hpo-netsched=testbed.4242.1000", add) > add


# the command lines


@pytest.fixture
def no_machine_lock(monkeypatch):
    """The testbed lock is the machine's: these tests must not take it."""
    from topologies import network

    monkeypatch.setattr(network, "testbed_lock", contextlib.nullcontext)


def taken(*_args, **_kwargs):
    raise NamesTaken([Taken("OVS bridge", "s1")])


def test_run_testbed_turns_taken_names_into_one_line_and_status_1(
    monkeypatch, capsys, no_machine_lock
):
    from experiments import run_testbed

    monkeypatch.setattr("sys.argv", ["/x/.venv/bin/hpo-testbed"])  # (the usage names it)
    monkeypatch.setattr(run_testbed, "parse", lambda parser, argv: argparse.Namespace())
    monkeypatch.setattr(run_testbed, "experiment", taken)
    assert run_testbed.main(["--hosts", "4"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "hpo-testbed: error: names this run needs are taken: OVS bridge s1 exists and was not "
        "made by this project's runs: delete it if nothing uses it (ovs-vsctl del-br s1) or stop "
        "what uses it\n"
    )


def test_calibrate_turns_taken_names_into_one_line_and_status_1(
    monkeypatch, capsys, no_machine_lock, tmp_path
):
    from experiments import calibrate

    monkeypatch.setattr("sys.argv", ["/x/.venv/bin/hpo-calibrate"])
    monkeypatch.setattr(calibrate, "parse", lambda parser, argv: argparse.Namespace(out=tmp_path))
    monkeypatch.setattr(calibrate, "calibrate", taken)
    assert calibrate.main([]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hpo-calibrate: error: names this run needs are taken: OVS bridge s1")
    assert err.count("\n") == 1 and "Traceback" not in err


def interrupted(*_args, **_kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_in_the_testbed_is_one_line_and_status_130(monkeypatch, capsys, no_machine_lock,
                                                          tmp_path):  # fmt: skip
    from experiments import calibrate, run_testbed

    monkeypatch.setattr("sys.argv", ["hpo-testbed"])
    monkeypatch.setattr(run_testbed, "parse",
                        lambda parser, argv: argparse.Namespace(out=tmp_path))  # fmt: skip
    monkeypatch.setattr(run_testbed, "experiment", interrupted)
    assert run_testbed.main([]) == 130
    err = capsys.readouterr().err
    assert err == (f"\nhpo-testbed: interrupted: the network and the controller were stopped; "
                   f"the runs that finished are in {tmp_path}\n")  # fmt: skip
    monkeypatch.setattr(calibrate, "parse", lambda parser, argv: argparse.Namespace(out=tmp_path))
    monkeypatch.setattr(calibrate, "calibrate", interrupted)
    assert calibrate.main([]) == 130
    assert "interrupted: the network and the controller were stopped" in capsys.readouterr().err
