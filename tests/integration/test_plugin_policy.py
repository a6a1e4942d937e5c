"""A policy of one's own on the real controller and a real userspace OVS bridge.

``python -m controller --policy examples.smallest_first:SmallestFirst`` (started by
:class:`ControllerProcess`, as ``hpo-testbed`` starts it) loads the example at start;
after coflows are registered over REST, the switch holds the marking rules of its order
(``ovs-ofctl -O OpenFlow13 dump-flows``), and ``PUT /api/policy`` switches among the built-ins
and it but refuses a class that was not loaded at start.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import needs_root_and
from workloads.client import ControllerError
from workloads.launcher import parse_marks, wanted_marks

from .fabric import NetnsFabric, free_port, sh, wait_for

pytestmark = [pytest.mark.integration, needs_root_and("ovs-vsctl", "ovs-ofctl", "tc", "ip")]

SMALLEST = "examples.smallest_first:SmallestFirst"
BIG = ("10.0.0.1", "10.0.0.2", None, None)  # coflow 1, h1 -> h2, 5 MB
SMALL = ("10.0.0.3", "10.0.0.2", None, None)  # coflow 2, h3 -> h2, 0.5 MB


@pytest.fixture(scope="module")
def fabric():
    sh("bash", "scripts/ovs.sh", "start")
    ofp_port = free_port()
    net = NetnsFabric(f"ip{os.getpid() % 1000}", 3).start(ofp_port)
    net.ofp_port = ofp_port
    try:
        yield net
    finally:
        net.stop()
    assert sh("ovs-vsctl", "br-exists", net.bridge, check=False).returncode == 2


@pytest.fixture
def controller(fabric, tmp_path):
    with fabric.controlled_by(tmp_path, "--policy", SMALLEST) as ctl:
        yield ctl


def marks(fabric) -> dict[tuple, tuple]:
    """Our table-0 marking rules on the switch: (src, dst, tcp field, port) -> (dscp, meter)."""
    return parse_marks(fabric.dump_flows())


def test_the_example_policy_orders_the_switch(fabric, controller):
    client = controller.client
    assert client.policy()["name"] == SMALLEST
    assert SMALLEST in client.policy()["available"]
    client.put_coflow(1, [{"src": "h1", "dst": "h2", "bytes": 5e6}])
    wait_for(lambda: BIG in marks(fabric), what="the first coflow's rule")
    # alone, it has the top level (DSCP 56); the smaller coflow then goes first, the bigger one
    # drops to level 1 (DSCP 48); the example caps no rates, so no meters
    client.put_coflow(2, [{"src": "h3", "dst": "h2", "bytes": 5e5}])
    installed = wait_for(
        lambda: (
            (m := marks(fabric))
            and (m.get(SMALL, (None,))[0], m.get(BIG, (None,))[0]) == (56, 48)
            and m
        ),
        what="the smaller coflow's rule at the top level, the bigger one's below",
    )
    assert installed[SMALL] == (56, None) and installed[BIG] == (48, None)
    assert installed == wanted_marks(client.rules()["desired"])  # what the controller wants
    # REST switches among the built-ins and what was loaded at start, never imports
    assert client.set_policy("fair")["name"] == "fair"
    wait_for(lambda: marks(fabric).get(BIG, (None,))[0] == 56, what="fair's one level")
    assert client.set_policy(SMALLEST, bucket_bytes=1e7)["options"] == {"bucket_bytes": 1e7}
    with pytest.raises(ControllerError) as refused:
        client.set_policy("controller.policies:Sincronia")
    assert refused.value.status == 400 and "was not loaded at start" in refused.value.message
    client.delete("coflows", 1)
    client.delete("coflows", 2)
    wait_for(lambda: not marks(fabric), what="every rule to go")
    assert client.stats()["switch_errors"] == 0, "the switch rejected a message; see the log"
