"""The operations ``rules.diff`` plans, sent as the OpenFlow messages the Ryu glue builds, turn an
OpenFlow 1.3 table written here from the specification (not from ``rules.apply_ops``) into the
wanted table, for any pair of tables."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ryu_app = pytest.importorskip("controller.ryu_app", reason="Ryu is installed by scripts/setup.sh")

from ryu.ofproto import ofproto_v1_3 as ofp  # noqa: E402
from ryu.ofproto import ofproto_v1_3_parser as parser  # noqa: E402

from controller.rules import (  # noqa: E402
    ETH_TYPE_IP,
    IPPROTO_TCP,
    MARK_TABLE,
    OWNER_JOB,
    FlowRule,
    SwitchTable,
    diff,
    owner_cookie,
)


class ProtocolOnly:
    ofproto = ofp
    ofproto_parser = parser
    id = 1


@dataclass
class Entry:
    cookie: int
    dscp: int | None
    meter_id: int | None


@dataclass
class OpenFlowTable:
    """Table 0 and the meter table of an OpenFlow 1.3 switch, as the specification (1.3.5,
    sections 6.4 and 6.6) defines the messages the controller sends: ADD replaces an entry
    with the same match and priority; MODIFY (non-strict) changes the instructions of every
    entry whose match contains the message's fields, MODIFY_STRICT and DELETE_STRICT the one
    with the same match and priority, all limited by the cookie mask and none of them adding;
    a flow may only use an existing meter; deleting a meter deletes the entries using it."""

    entries: dict[tuple, Entry] = field(default_factory=dict)
    meters: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def send(self, msg) -> None:
        msg.serialize()
        if isinstance(msg, parser.OFPFlowMod):
            self._flow_mod(msg)
        elif isinstance(msg, parser.OFPMeterMod):
            self._meter_mod(msg)
        elif not isinstance(msg, parser.OFPBarrierRequest):
            self.errors.append(f"unexpected message {type(msg).__name__}")

    def _flow_mod(self, msg) -> None:
        if msg.table_id != MARK_TABLE:
            self.errors.append(f"flow mod for table {msg.table_id}")
            return
        fields = frozenset(msg.match.items())
        dscp, meter_id = None, None
        for instruction in msg.instructions:
            if isinstance(instruction, parser.OFPInstructionMeter):
                meter_id = instruction.meter_id
            elif isinstance(instruction, parser.OFPInstructionActions):
                for action in instruction.actions:
                    if action.key == "ip_dscp":
                        dscp = action.value
        if meter_id is not None and meter_id not in self.meters:
            self.errors.append(f"flow mod uses unknown meter {meter_id}")
            return

        def cookie_ok(entry: Entry) -> bool:
            return entry.cookie & msg.cookie_mask == msg.cookie & msg.cookie_mask

        key = (msg.priority, fields)
        if msg.command == ofp.OFPFC_ADD:
            self.entries[key] = Entry(msg.cookie, dscp, meter_id)
        elif msg.command in (ofp.OFPFC_MODIFY_STRICT, ofp.OFPFC_DELETE_STRICT):
            entry = self.entries.get(key)
            if entry is not None and cookie_ok(entry):
                if msg.command == ofp.OFPFC_DELETE_STRICT:
                    del self.entries[key]
                else:
                    entry.dscp, entry.meter_id = dscp, meter_id
        elif msg.command == ofp.OFPFC_MODIFY:
            for (_, entry_fields), entry in self.entries.items():
                if fields <= entry_fields and cookie_ok(entry):
                    entry.dscp, entry.meter_id = dscp, meter_id
        else:
            self.errors.append(f"unexpected flow mod command {msg.command}")

    def _meter_mod(self, msg) -> None:
        exists = msg.meter_id in self.meters
        if msg.command == ofp.OFPMC_ADD and exists:
            self.errors.append(f"meter {msg.meter_id} exists")
        elif msg.command == ofp.OFPMC_MODIFY and not exists:
            self.errors.append(f"meter {msg.meter_id} is unknown")
        elif msg.command == ofp.OFPMC_DELETE:
            self.meters.pop(msg.meter_id, None)
            self.entries = {k: e for k, e in self.entries.items() if e.meter_id != msg.meter_id}
        else:
            (band,) = msg.bands
            self.meters[msg.meter_id] = band.rate

    def as_wanted(self) -> tuple[dict, dict]:
        return (
            {k: (e.cookie, e.dscp, e.meter_id) for k, e in self.entries.items()},
            dict(self.meters),
        )


def wanted(table: SwitchTable) -> tuple[dict, dict]:
    rules = {
        (r.priority, frozenset(r.match)): (r.cookie, r.dscp, r.meter_id)
        for r in table.rules.values()
    }
    return rules, dict(table.meters)


def send_diff(switch: OpenFlowTable, installed: SwitchTable, desired: SwitchTable) -> None:
    for op in diff(installed, desired):
        switch.send(ryu_app.build_message(ProtocolOnly(), op))


MATCHES = [
    (
        200,
        (
            ("eth_type", ETH_TYPE_IP),
            ("ipv4_src", src),
            ("ipv4_dst", dst),
            ("ip_proto", IPPROTO_TCP),
            (port_field, 5001),
        ),
    )
    for src, dst in [("10.0.0.1", "10.0.0.2"), ("10.0.0.2", "10.0.0.1"), ("10.0.0.3", "10.0.0.2")]
    for port_field in ("tcp_dst", "tcp_src")
] + [(100, (("eth_type", ETH_TYPE_IP), ("ipv4_src", "10.0.0.1"), ("ipv4_dst", "10.0.0.3")))]


@st.composite
def tables(draw) -> SwitchTable:
    """Owners with some of the matches each: usually one mark for all of an owner's rules (as
    the controller's tables have), sometimes not; meters for every meter id used, and spares."""
    table = SwitchTable.empty()
    meters = draw(st.dictionaries(st.integers(1, 4), st.integers(1, 10**6), max_size=4))
    meter_ids = st.sampled_from([None, *meters])
    for owner in range(1, draw(st.integers(0, 3)) + 1):
        cookie = owner_cookie(OWNER_JOB, owner)
        dscp, meter_id = draw(st.sampled_from([0, 8, 16, 56])), draw(meter_ids)
        uniform = draw(st.booleans())
        for index in draw(st.sets(st.integers(0, len(MATCHES) - 1))):
            if not uniform:
                dscp, meter_id = draw(st.sampled_from([0, 8, 16, 56])), draw(meter_ids)
            priority, match = MATCHES[index]
            rule = FlowRule(cookie, priority, match, dscp, meter_id)
            table.rules.setdefault(rule.key, rule)
    table.meters.update(meters)
    return table


@settings(max_examples=300, deadline=None)
@given(tables(), tables())
def test_the_diffs_messages_turn_the_switch_into_the_wanted_table(first, second):
    switch = OpenFlowTable()
    send_diff(switch, SwitchTable.empty(), first)
    assert switch.errors == [] and switch.as_wanted() == wanted(first)
    send_diff(switch, first, second)
    assert switch.errors == [] and switch.as_wanted() == wanted(second)


def test_the_model_refuses_what_a_switch_refuses():
    switch = OpenFlowTable()
    rule = FlowRule(owner_cookie(OWNER_JOB, 1), *MATCHES[0], 8, 3)
    send_diff(switch, SwitchTable.empty(), SwitchTable({rule.key: rule}, {}))
    assert switch.errors == ["flow mod uses unknown meter 3"]
