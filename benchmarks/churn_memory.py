"""The controller's memory under churn: does it stay bounded over many add/delete cycles?

    sudo .venv/bin/python benchmarks/churn_memory.py [--cycles 10000] [--every 1000]
                                                     [--policy varys]

Starts OVS if needed, a userspace bridge ``benchchurn`` (no hosts: only the rules matter) and
``python -m controller``; then runs ``--cycles`` cycles of two coflows registered and deleted
(under Varys each gets a marking rule, a meter and a reorder, as in the churn integration test)
and prints the controller's resident memory (VmRSS) every ``--every`` cycles with the rate of
cycles. At the end the switch must hold no rule or meter of ours. Everything it started is
stopped by PID and the bridge deleted by name.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench_switch import controller_on_bridge, our_rules_and_meters

from workloads.launcher import wait_for

BRIDGE = "benchchurn"


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def flows(src: str, dst: str, size: float) -> list[dict]:
    return [{"src": src, "dst": dst, "bytes": size}]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--policy", default="varys")
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.every < 1:
        parser.error("--cycles and --every must be >= 1")

    with controller_on_bridge(BRIDGE, "--policy", args.policy) as ctl:
        client = ctl.client
        pid = ctl.proc.pid
        print(f"policy {args.policy}; controller RSS at start {rss_mb(pid):.1f} MB", flush=True)
        started = time.monotonic()
        for cycle in range(1, args.cycles + 1):
            client.put_coflow(1_000_000 + cycle, flows("10.0.0.1", "10.0.0.3", 1e6))
            client.put_coflow(2_000_000 + cycle, flows("10.0.0.2", "10.0.0.3", 5e5))
            client.delete("coflows", 1_000_000 + cycle)
            client.delete("coflows", 2_000_000 + cycle)
            if cycle % args.every == 0 or cycle == args.cycles:
                elapsed = time.monotonic() - started
                eta = elapsed / cycle * (args.cycles - cycle)
                print(f"  {cycle:>6} cycles: RSS {rss_mb(pid):.1f} MB "
                      f"({cycle / elapsed:.0f} cycles/s, ETA {eta:.0f} s)", flush=True)  # fmt: skip

        wait_for(lambda: our_rules_and_meters(BRIDGE) == (0, 0), timeout_s=10,
                 what="every rule and meter to go")  # fmt: skip
        stats = client.stats()
        print(f"after {args.cycles} cycles: rules and meters of ours on the switch: 0 and 0; "
              f"records left: {stats['registered']['coflows']}; "
              f"switch errors: {stats['switch_errors']}; "
              f"reorder failures: {stats['reorder_failures']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
