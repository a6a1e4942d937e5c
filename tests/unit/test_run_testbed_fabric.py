"""``hpo-testbed --topology leaf-spine`` without root: its flags, the network they describe,
the simulator's matching fabric, and what a spine failure's record says."""

from __future__ import annotations

import pytest

from controller.cluster import Cluster
from experiments import run_testbed
from experiments.testbed_network import reroute_summary
from experiments.testbed_prediction import simulate
from experiments.testbed_settings import forwarding_load_warning, parse, settings_of
from simulator.engine import Fabric
from workloads.hpo import generate


def settings(*argv: str):
    return settings_of(run_testbed.build_parser().parse_args(list(argv)))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--topology", "leaf-spine", "--hosts", "13"], "--hosts 13 but --leaves x"),
        (["--fail-spine", "10"], "--fail-spine needs --topology leaf-spine"),
        (["--topology", "leaf-spine", "--oversubscription", "nan"], "--oversubscription"),
        (["--topology", "ring"], "invalid choice"),
        (["--hosts", "1", "--workers", "1"], "at least 2 hosts"),
    ],
)  # fmt: skip
def test_bad_fabric_flags_are_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse(run_testbed.build_parser(), argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


LEAF_SPINE = ("--topology", "leaf-spine", "--leaves", "3", "--spines", "2",
              "--hosts-per-leaf", "2")  # fmt: skip


def test_the_flags_describe_the_cluster():
    assert settings(*LEAF_SPINE).cluster == Cluster.leaf_spine(3, 2, 2, 20e6)
    assert settings("--hosts", "6", "--bw", "50").cluster == Cluster.one_switch(6, 50e6)
    # the bytes are scaled by the modelled rate over the emulated one
    assert settings("--link-gbps", "10", "--bw", "20").link_scale == 500


def test_the_prediction_models_the_fabric_s_oversubscribed_uplinks():
    tasks = generate(6, 1, seed=4, configs_per_task=3, min_iterations=3, patterns=("ring",))
    flat = simulate("fair", settings("--hosts", "6"), tasks)["sct_s"]["mean"]
    full = simulate("fair", settings(*LEAF_SPINE), tasks)["sct_s"]["mean"]
    thin = simulate("fair", settings(*LEAF_SPINE, "--oversubscription", "4"), tasks)
    assert full == pytest.approx(flat)  # non-blocking uplinks: a big switch
    assert thin["sct_s"]["mean"] > 1.2 * flat
    assert Fabric.of(settings(*LEAF_SPINE).cluster).hosts_per_leaf == 2


def test_a_spine_failure_is_reported_with_the_first_reroute_after_it():
    record = {"spine": "s101", "at_s": 20.0, "monotonic_s": 100.0}
    fabric = {
        "changes": [
            {"at_s": 50.0, "what": "link 1/3 -> 101/1", "rules_changed": 4},
            {"at_s": 100.012, "what": "port 1/3 down", "rules_changed": 7},
            {"at_s": 100.013, "what": "port 101/2 down", "rules_changed": 0},
            {"at_s": 100.02, "what": "port 2/3 down", "rules_changed": 5},
        ]
    }
    summary = reroute_summary(record, fabric)
    assert summary["reroute_s"] == pytest.approx(0.012)
    assert summary["rules_changed"] == 12
    assert summary["changes"] == ["port 1/3 down", "port 2/3 down"]
    assert reroute_summary({}, fabric) is None


def test_a_fabric_too_big_for_this_machine_s_switch_is_warned_about():
    assert forwarding_load_warning(settings(*LEAF_SPINE).cluster) is None  # 6 x 20 x 3
    big = Cluster.leaf_spine(12, 2, 2, 20e6)
    assert "need up to 1440 Mbit/s of forwarding" in forwarding_load_warning(big)
