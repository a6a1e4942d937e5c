"""The bounds on what the controller accepts, each derived from something physical or from how
long one request may hold the controller's only event loop. One definition, read by the
registry (REST bodies and stored records), the OpenAPI document, the command lines, the trace
loaders and the simulator.

Sizes: no flow can be larger than what the fastest link any cluster runs moves in a year.
The fastest Ethernet rate standardised is 1.6 Tbit/s (IEEE 802.3dj), so a flow's size is at
most ``1.6e12 / 8 * 365.25 * 86400`` bytes, about 6.3e18 (2^62.5). Every product the
schedulers form from such sizes stays finite: bits (x 8), a coflow's sum over
:data:`MAX_FLOWS` flows, a job's remaining work over :data:`MAX_ITERATIONS` iterations
(about 1.1e33 bits), and the weights' scaling in BSSI.

Lists that multiply rules: one pair of hosts of a job gets two rules per TCP port (the port as
destination and as source) and its reverse direction as many, so a job's flow template or a
coflow of it with F flows and P ports asks for up to ``4 * F * P`` marking rules.
:data:`MAX_FLOWS`, :data:`MAX_TCP_PORTS` and :data:`MAX_JOB_RULES` keep what one request
parses and the rules it makes, and so the time it holds the controller's only event loop,
within 50 ms: ``benchmarks/loop_hold.py`` registers, reports and deletes the largest jobs and
coflows these allow under every policy and reports the holds (docs/controller.md).
The testbed's largest job (a parameter server and 12 workers on 13 hosts: 24 flows, 13 ports,
1,248 rules) fits.
"""

from __future__ import annotations

from typing import Any

# the fastest link rate the controller, the testbed and the simulator accept (IEEE 802.3dj)
MAX_LINK_BPS = 1.6e12
SECONDS_PER_YEAR = 365.25 * 86400
# the largest flow: a year of the fastest link
MAX_FLOW_BYTES = MAX_LINK_BPS / 8 * SECONDS_PER_YEAR
# ids, iteration counts: what a 32-bit signed integer holds (the low half of a rule's cookie)
MAX_ID = 2**31 - 1
MAX_ITERATIONS = MAX_ID
# flows per job or coflow: a ring all-reduce of 256 workers, a parameter server with 128
MAX_FLOWS = 256
# TCP ports per job: one per worker on a 16-host cluster (the testbed gives each rank one)
MAX_TCP_PORTS = 16
# marking rules a job's flow template or one coflow may ask for (4 x flows x the job's ports)
MAX_JOB_RULES = 2048
# weights of tasks, stages, jobs and coflows: relative urgency within six orders of magnitude
MIN_WEIGHT = 1e-6
MAX_WEIGHT = 1e6
# a job's reported model accuracy: a fraction
MIN_ACCURACY = 0.0
MAX_ACCURACY = 1.0


def job_rules(n_flows: int, n_tcp_ports: int) -> int:
    """The most marking rules a job with ``n_flows`` flows and ``n_tcp_ports`` TCP ports asks
    for: each flow's pair and its reverse direction, one rule per pair without ports, else two
    per port (the port as TCP destination and as source)."""
    return 2 * n_flows * (2 * n_tcp_ports if n_tcp_ports else 1)


def brief(value: Any, width: int = 40) -> str:
    """``repr(value)`` cut to ``width`` characters, for an error message that quotes what it
    got (a 400-digit integer is not worth quoting whole, nor converting to text)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**width:
        return f"an integer of more than {width} digits"
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
