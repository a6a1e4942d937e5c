"""The Ryu glue: OpenFlow messages built from ops, and the REST API through Ryu's WSGI app."""

from __future__ import annotations

import json

import pytest

ryu_app = pytest.importorskip("controller.ryu_app", reason="Ryu is installed by scripts/setup.sh")

from ryu.app.wsgi import WSGIApplication  # noqa: E402
from ryu.ofproto import ofproto_v1_3 as ofp  # noqa: E402
from ryu.ofproto import ofproto_v1_3_parser as parser  # noqa: E402
from webob import Request  # noqa: E402

from controller.api import RestApi  # noqa: E402
from controller.engine import Engine  # noqa: E402
from controller.registry import Registry  # noqa: E402
from controller.rules import OWNER_MATCH, FlowRule, Op, owner_cookie  # noqa: E402


class ProtocolOnly:
    """Just the protocol modules a datapath carries; enough to build and serialise messages."""

    ofproto = ofp
    ofproto_parser = parser
    id = 1

    def set_xid(self, msg):
        msg.set_xid(1)


RULE = FlowRule(
    owner_cookie(1, 7),
    200,
    (("eth_type", 0x800), ("ipv4_src", "10.0.0.1"), ("ipv4_dst", "10.0.0.2"),
     ("ip_proto", 6), ("tcp_dst", 5001)),
    48,
    3,
)  # fmt: skip


def built(op):
    msg = ryu_app.build_message(ProtocolOnly(), op)
    msg.serialize()  # must be a valid OpenFlow 1.3 message
    return msg


def test_flow_add_marks_meters_and_continues_to_forwarding():
    msg = built(Op("flow_add", rule=RULE))
    assert msg.command == ofp.OFPFC_ADD and msg.table_id == 0 and msg.priority == 200
    assert msg.cookie == RULE.cookie
    assert dict(msg.match.items())["tcp_dst"] == 5001
    kinds = [type(i).__name__ for i in msg.instructions]
    assert kinds == ["OFPInstructionMeter", "OFPInstructionActions", "OFPInstructionGotoTable"]
    assert msg.instructions[0].meter_id == 3
    assert msg.instructions[1].actions[0].value == 48  # set_field ip_dscp
    assert msg.instructions[2].table_id == 1


def test_modify_and_delete_are_strict_and_limited_to_our_cookie():
    modify = built(Op("flow_modify", rule=RULE))
    assert modify.command == ofp.OFPFC_MODIFY_STRICT and modify.cookie_mask == 2**64 - 1
    delete = built(Op("flow_delete", rule=RULE))
    assert delete.command == ofp.OFPFC_DELETE_STRICT and delete.cookie_mask == 2**64 - 1
    assert delete.instructions == []


def test_owner_modify_is_a_non_strict_modify_of_the_owners_cookie():
    msg = built(Op("owner_modify", rule=FlowRule(RULE.cookie, 0, OWNER_MATCH, 56, None)))
    assert msg.command == ofp.OFPFC_MODIFY and msg.table_id == 0
    assert msg.cookie == RULE.cookie and msg.cookie_mask == 2**64 - 1
    # set_field ip_dscp needs IP in the match, or OVS rejects the FlowMod
    assert list(msg.match.items()) == [("eth_type", 0x800)]
    assert [type(i).__name__ for i in msg.instructions] == [
        "OFPInstructionActions",
        "OFPInstructionGotoTable",
    ]


def test_packed_matches_serialise_like_ryus():
    match = dict(RULE.match)
    plain, packed = bytearray(), bytearray()
    parser.OFPMatch(**match).serialize(plain, 0)
    ryu_app.packed_match(RULE.match).serialize(packed, 0)
    assert packed == plain


def test_meters_have_a_drop_band_in_kbps_without_burst():
    add = built(Op("meter_add", meter_id=3, rate_kbps=5000))
    assert add.command == ofp.OFPMC_ADD and add.flags == ofp.OFPMF_KBPS
    assert [(b.rate, b.burst_size) for b in add.bands] == [(5000, 0)]
    assert built(Op("meter_modify", meter_id=3, rate_kbps=1)).command == ofp.OFPMC_MODIFY
    assert built(Op("meter_delete", meter_id=3)).command == ofp.OFPMC_DELETE
    assert isinstance(built(Op("barrier")), parser.OFPBarrierRequest)


def test_switch_reset_touches_only_our_rules():
    reset = ryu_app._reset_switch(ProtocolOnly())
    for msg in reset:
        msg.serialize()
    assert reset[0].cookie_mask == 0xFFFFFF00_00000000 and reset[0].table_id == ofp.OFPTT_ALL


def test_rest_through_ryus_wsgi_application():
    class Holder:
        api = RestApi(Engine(Registry(":memory:"), "sincronia"))

    wsgi = WSGIApplication()
    wsgi.register(ryu_app.RestController, {ryu_app.APP_KEY: Holder()})
    body = {"coflow_id": 4, "flows": [{"src": "10.0.0.1", "dst": "10.0.0.2", "bytes": 10}]}
    raw = json.dumps(body).encode()
    for content_type, extra, status in (
        ("text/plain", {}, 415),  # what a page on another site can send without asking
        ("application/json", {"Origin": "http://evil.example"}, 403),
    ):
        req = Request.blank("/api/coflows", method="POST", body=raw, headers=extra)
        req.content_type = content_type
        assert req.get_response(wsgi).status_int == status
    req = Request.blank("/api/coflows", method="POST", body=raw)
    req.content_type = "application/json"
    res = req.get_response(wsgi)
    assert res.status_int == 201 and res.content_type == "application/json"
    assert json.loads(res.body)["coflow_id"] == 4
    res = Request.blank("/api/coflows/9").get_response(wsgi)
    assert res.status_int == 404 and json.loads(res.body)["error"]["message"] == "no coflow 9"
    res = Request.blank("/api").get_response(wsgi)
    assert res.status_int == 404 and "error" in json.loads(res.body)
    res = Request.blank("/api/coflows/4", method="PATCH").get_response(wsgi)
    assert res.status_int == 405 and res.headers["Allow"] == "GET, PUT, DELETE"
    # control characters in an id (a newline included) still reach the API and get JSON
    res = Request.blank("/api/stages/k%C2%A0%0A%09x").get_response(wsgi)
    assert res.status_int == 404 and res.content_type == "application/json"
    assert "error" in json.loads(res.body)


def test_metrics_through_ryus_wsgi_application():
    class Holder:
        api = RestApi(Engine(Registry(":memory:"), "sincronia"), token="s3cret")

    wsgi = WSGIApplication()
    wsgi.register(ryu_app.RestController, {ryu_app.APP_KEY: Holder()})
    res = Request.blank("/metrics").get_response(wsgi)
    assert res.status_int == 401 and res.content_type == "application/json"
    assert "Bearer" in json.loads(res.body)["error"]["message"]
    res = Request.blank("/metrics", headers={"Authorization": "Bearer s3cret"}).get_response(wsgi)
    assert res.status_int == 200
    assert res.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert b"# TYPE hpo_reorders_total counter" in res.body
    res = Request.blank("/metrics", method="POST", headers={"Authorization": "Bearer s3cret"})
    res = res.get_response(wsgi)
    assert res.status_int == 405 and res.headers["Allow"] == "GET"
