"""Priority levels on a switch port: an HTB qdisc with one class per level, chosen by DSCP.

The userspace datapath ignores ``set_queue`` (docs/architecture.md), so a priority level is a DSCP
value that the controller's rules set plus an HTB class on every switch egress port, selected by
a ``u32`` filter on the IP TOS byte. Classes share the port rate; a lower level number has a
lower HTB ``prio``, so it borrows spare bandwidth first (strict-as-possible priority), and every
class keeps a small guaranteed rate so that nothing starves forever. Non-IP traffic (ARP) goes
to a small control class served first.

:func:`htb_commands` is pure (returns ``tc`` argument lists); :func:`apply_htb` runs them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from controller.schedule import LEVEL_CLASS_BASE, LEVEL_DSCP, N_LEVELS

CONTROL_CLASS_MINOR = 0x20
# A class per level: 1:10 for level 0 ... 1:17 for level 7 (LEVEL_CLASS_BASE is the
# controller's, which reads a class's bytes as OpenFlow queue 0x0f + level).
GUARANTEED_FRACTION = 0.01


def level_classid(level: int) -> str:
    """HTB class id (``"1:10"`` ...) of a priority level."""
    if not 0 <= level < N_LEVELS:
        raise ValueError(f"level must be in 0..{N_LEVELS - 1}")
    return f"1:{LEVEL_CLASS_BASE + level:x}"


def htb_commands(
    dev: str, link_bps: float, dscp_pref: int = 1, queue_packets: int | None = None
) -> list[list[str]]:
    """``tc`` commands (argument lists) that give ``dev`` the 8 priority classes.

    ``dscp_pref`` is the ``tc`` preference of the filters that choose a class by DSCP; a host's
    egress puts them after its per-job filters (:mod:`topologies.host_qos`). ``queue_packets``
    bounds every class's FIFO (default: the device's ``txqueuelen``, 1000 packets)."""
    if link_bps <= 0:
        raise ValueError("link_bps must be > 0")
    rate = f"{int(link_bps)}bit"
    floor = f"{max(8000, int(link_bps * GUARANTEED_FRACTION))}bit"
    control = f"1:{CONTROL_CLASS_MINOR:x}"
    cmds = [
        ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb",
         "default", f"{CONTROL_CLASS_MINOR:x}"],
        ["tc", "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
         "rate", rate, "ceil", rate],
        ["tc", "class", "replace", "dev", dev, "parent", "1:1", "classid", control, "htb",
         "rate", floor, "ceil", rate, "prio", "0"],
    ]  # fmt: skip
    for level in range(N_LEVELS):
        classid = level_classid(level)
        cmds.append(
            ["tc", "class", "replace", "dev", dev, "parent", "1:1", "classid", classid, "htb",
             "rate", floor, "ceil", rate, "prio", str(level)]
        )  # fmt: skip
        if queue_packets is not None:
            cmds.append(
                ["tc", "qdisc", "replace", "dev", dev, "parent", classid,
                 "handle", f"{LEVEL_CLASS_BASE + level:x}:", "pfifo", "limit", str(queue_packets)]
            )  # fmt: skip
        tos = LEVEL_DSCP[level] << 2
        cmds.append(
            ["tc", "filter", "replace", "dev", dev, "parent", "1:", "protocol", "ip",
             "prio", str(dscp_pref), "handle", f"800::{level + 1:x}", "u32",
             "match", "ip", "tos", f"0x{tos:02x}", "0xfc", "flowid", classid]
        )  # fmt: skip
    return cmds


def apply_htb(devs: Sequence[str], link_bps: float) -> None:
    """Install the priority classes on every device in ``devs`` (root namespace, needs root)."""
    for dev in devs:
        for cmd in htb_commands(dev, link_bps):
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed: {result.stderr.strip()}")


def class_bytes(dev: str) -> dict[str, int]:
    """Bytes sent by each HTB class of ``dev`` (``tc -s class show``), by class id."""
    out = subprocess.run(
        ["tc", "-s", "class", "show", "dev", dev], capture_output=True, text=True, check=True
    ).stdout
    return parse_class_bytes(out)


def parse_class_bytes(text: str) -> dict[str, int]:
    """Parse ``tc -s class show`` output into ``{classid: bytes sent}``."""
    counts: dict[str, int] = {}
    current = None
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "class" and words[1] == "htb":
            current = words[2]
        elif current and words[:1] == ["Sent"]:
            counts[current] = int(words[1])
            current = None
    return counts
