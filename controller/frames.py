"""The few frames the controller reads or writes itself: LLDP discovery probes and ARP replies.

Pure (``struct`` only), so the fabric logic is testable without Ryu. A probe names the switch
and port it was sent from; when it comes back in a packet-in from another switch, that is one
direction of a link (:meth:`controller.fabric.FabricGraph.link_seen`). ARP requests for a host
the controller knows are answered by the controller (proxy ARP), so no broadcast has to cross
the fabric.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

LLDP_MULTICAST = "01:80:c2:00:00:0e"
ETH_TYPE_LLDP = 0x88CC
ETH_TYPE_ARP = 0x0806
ETH_TYPE_IP = 0x0800
ARP_REQUEST = 1
ARP_REPLY = 2
# chassis ids of our probes start with this, so another controller's LLDP is not a link
PROBE_PREFIX = b"hpo-dpid:"
PROBE_SOURCE_MAC = "02:48:50:4f:00:01"  # locally administered

_TLV_END, _TLV_CHASSIS, _TLV_PORT, _TLV_TTL = 0, 1, 2, 3
_CHASSIS_LOCAL, _PORT_LOCAL = 7, 7


def mac_bytes(mac: str) -> bytes:
    """``"aa:bb:..."`` as 6 bytes (``ValueError`` if it is not a MAC address)."""
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    return bytes(int(p, 16) for p in parts)


def mac_text(raw: bytes) -> str:
    """6 bytes as ``"aa:bb:..."``."""
    return ":".join(f"{b:02x}" for b in raw)


def _tlv(kind: int, value: bytes) -> bytes:
    return struct.pack("!H", (kind << 9) | len(value)) + value


def lldp_probe(dpid: int, port: int) -> bytes:
    """An LLDP frame saying "sent by switch ``dpid`` out of ``port``"."""
    chassis = bytes([_CHASSIS_LOCAL]) + PROBE_PREFIX + f"{dpid:016x}".encode()
    port_id = bytes([_PORT_LOCAL]) + str(port).encode()
    header = mac_bytes(LLDP_MULTICAST) + mac_bytes(PROBE_SOURCE_MAC)
    body = (
        _tlv(_TLV_CHASSIS, chassis)
        + _tlv(_TLV_PORT, port_id)
        + _tlv(_TLV_TTL, struct.pack("!H", 120))
        + _tlv(_TLV_END, b"")
    )
    return header + struct.pack("!H", ETH_TYPE_LLDP) + body


@dataclass(frozen=True, slots=True)
class Probe:
    """Where an LLDP probe of ours was sent from."""

    dpid: int
    port: int


def parse_probe(frame: bytes) -> Probe | None:
    """The sender of one of our LLDP probes; ``None`` for any other frame."""
    if len(frame) < 14 or struct.unpack_from("!H", frame, 12)[0] != ETH_TYPE_LLDP:
        return None
    offset, chassis, port = 14, None, None
    while offset + 2 <= len(frame):
        (head,) = struct.unpack_from("!H", frame, offset)
        kind, length = head >> 9, head & 0x1FF
        value = frame[offset + 2 : offset + 2 + length]
        offset += 2 + length
        if kind == _TLV_END:
            break
        if kind == _TLV_CHASSIS and value[:1] == bytes([_CHASSIS_LOCAL]):
            chassis = value[1:]
        elif kind == _TLV_PORT and value[:1] == bytes([_PORT_LOCAL]):
            port = value[1:]
    if chassis is None or port is None or not chassis.startswith(PROBE_PREFIX):
        return None
    try:
        return Probe(int(chassis[len(PROBE_PREFIX) :], 16), int(port))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Arp:
    """An Ethernet/IPv4 ARP message."""

    op: int
    sender_mac: str
    sender_ip: str
    target_mac: str
    target_ip: str


def _ip_text(raw: bytes) -> str:
    return ".".join(str(b) for b in raw)


def _ip_bytes(ip: str) -> bytes:
    return bytes(int(p) for p in ip.split("."))


def parse_arp(frame: bytes) -> Arp | None:
    """The ARP message in an Ethernet frame; ``None`` for any other frame."""
    if len(frame) < 42 or struct.unpack_from("!H", frame, 12)[0] != ETH_TYPE_ARP:
        return None
    htype, ptype, hlen, plen, op = struct.unpack_from("!HHBBH", frame, 14)
    if (htype, ptype, hlen, plen) != (1, ETH_TYPE_IP, 6, 4):
        return None
    return Arp(
        op,
        mac_text(frame[22:28]),
        _ip_text(frame[28:32]),
        mac_text(frame[32:38]),
        _ip_text(frame[38:42]),
    )


def arp_frame(message: Arp, eth_dst: str) -> bytes:
    """An Ethernet frame from ``message.sender_mac`` to ``eth_dst`` carrying ``message``."""
    header = mac_bytes(eth_dst) + mac_bytes(message.sender_mac) + struct.pack("!H", ETH_TYPE_ARP)
    body = struct.pack("!HHBBH", 1, ETH_TYPE_IP, 6, 4, message.op)
    body += mac_bytes(message.sender_mac) + _ip_bytes(message.sender_ip)
    body += mac_bytes(message.target_mac) + _ip_bytes(message.target_ip)
    return header + body


def arp_reply(request: Arp, answer_mac: str) -> bytes:
    """The reply to ``request``: ``request.target_ip`` is at ``answer_mac``."""
    reply = Arp(ARP_REPLY, answer_mac, request.target_ip, request.sender_mac, request.sender_ip)
    return arp_frame(reply, request.sender_mac)
