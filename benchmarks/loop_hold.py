"""How long one request holds the controller's event loop at the registration limits.

    sudo .venv/bin/python benchmarks/loop_hold.py [--policies fair,beamer,...] [--rounds 20]
                                                  [--active 100]

The controller serves REST and OpenFlow on one event loop, so a request or reorder that runs
long stalls every switch and client. For each policy this starts OVS if needed, a userspace
bridge ``benchhold`` (no hosts: only the rules matter) and ``python -m controller``, registers
``--active`` background coflows (jobs in stages, with TCP ports), then runs ``--rounds``
rounds of the largest registrations :mod:`controller.limits` allows:

- a job with :data:`~controller.limits.MAX_TCP_PORTS` ports and as many flows as
  :data:`~controller.limits.MAX_JOB_RULES` leaves room for, its iterations reported, and
  deleted;
- a job with the most flows the rule limit allows without ports;
- a coflow with :data:`~controller.limits.MAX_FLOWS` flows between distinct host pairs, its
  bytes reported, and deleted.

After each registration it waits for the reorder that serves it. The controller times every
REST request and every reorder (with the building and sending of its FlowMods) on its event
loop (``/api/stats`` ``event_loop_holds_ms``); the script prints their p50 / p99 / max per
policy and exits 1 if any hold exceeded ``--budget-ms`` (50). Everything it started is stopped
by PID and the bridge deleted by name.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench_switch import controller_on_bridge
from pace import measure

from controller.limits import MAX_FLOWS, MAX_JOB_RULES, MAX_TCP_PORTS, job_rules
from controller.policies import POLICIES
from workloads.launcher import wait_for

BRIDGE = "benchhold"


def address(i: int) -> str:
    """The ``i``-th host's IPv4 address (10.1.0.0/16: as many hosts as the pairs need)."""
    return f"10.1.{i // 250}.{i % 250 + 1}"


def distinct_pairs(n: int, offset: int = 0) -> list[dict]:
    """``n`` flows between distinct host pairs (each host sends to its next few)."""
    hosts = 2
    while hosts * (hosts - 1) < n:
        hosts += 1
    flows = []
    for k in range(n):
        src, step = k % hosts, 1 + k // hosts
        flows.append({"src": address(offset + src), "dst": address(offset + (src + step) % hosts),
                      "bytes": 1e6})  # fmt: skip
    return flows


def most_flows(n_ports: int) -> int:
    """The most flows a job with ``n_ports`` TCP ports may have within the rule limit."""
    flows = MAX_FLOWS
    while job_rules(flows, n_ports) > MAX_JOB_RULES:
        flows -= 1
    return flows


def served(client, request, *args) -> None:
    """Make ``request(*args)`` (a last dict argument: its keyword arguments) and wait until the
    controller has made the reorder it causes."""
    keywords = args[-1] if args and isinstance(args[-1], dict) else {}
    before = client.stats()["reorders"]
    request(*args[: len(args) - bool(keywords)], **keywords)
    wait_for(lambda: client.stats()["reorders"] > before, timeout_s=60, what="a reorder")


def run_policy(policy: str, rounds: int, active: int) -> dict:
    """Every hold of one policy's run, as ``/api/stats`` gives them."""
    with controller_on_bridge(BRIDGE, "--policy", policy) as ctl:
        client = ctl.client
        for stage in range(1, active // 10 + 2):
            client.put_stage(stage)
        for job in range(1, active + 1):
            client.put_job(job, stage_id=job // 10 + 1, tcp_ports=[5000 + job % 50],
                           iteration_budget=20,
                           flows=[{"src": address(job % 13), "dst": address((job + 1) % 13),
                                   "bytes": 1e6}])  # fmt: skip
        time.sleep(1)
        client.request("DELETE", "/stats")
        ported = most_flows(MAX_TCP_PORTS)
        plain = most_flows(0)
        for r in range(rounds):
            big_job = 100_000 + r
            flows = distinct_pairs(MAX_FLOWS, offset=900)
            for request, *args in (
                (client.put_job, big_job, {"stage_id": 1, "iteration_budget": 50,
                 "tcp_ports": list(range(10_000, 10_000 + MAX_TCP_PORTS)),
                 "flows": distinct_pairs(ported, offset=300)}),
                (client.job_progress, big_job, 10),
                (client.put_job, big_job + 1000, {"stage_id": 2, "iteration_budget": 50,
                 "flows": distinct_pairs(plain, offset=600)}),
                (client.put_coflow, big_job, flows, {"stage_id": 3}),
                (client.coflow_progress, big_job, [5e5] * len(flows)),
                (client.delete, "jobs", big_job),
                (client.delete, "jobs", big_job + 1000),
                (client.delete, "coflows", big_job),
            ):  # fmt: skip
                served(client, request, *args)
            print(f"  {policy}: round {r + 1}/{rounds}", flush=True)
        stats = client.stats()
        long_holds = [line.split(" - ")[-1].strip() for line in ctl.log.read_text().splitlines()
                      if "held the event loop" in line]  # fmt: skip
        return {"holds": stats["event_loop_holds_ms"], "ops": stats["ops_sent"],
                "errors": stats["switch_errors"], "long": long_holds}  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", default=",".join(sorted(POLICIES)),
                        help="comma-separated policies (default: every one)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=20, help="rounds per policy (default 20)")
    parser.add_argument(
        "--active",
        type=int,
        default=100,
        help="background jobs, each with an implicit coflow (default 100)",
    )
    parser.add_argument("--budget-ms", type=float, default=50.0,
                        help="the longest hold allowed (default 50 ms)")  # fmt: skip
    args = parser.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    unknown = sorted(set(policies) - set(POLICIES))
    if unknown or args.rounds < 1 or args.active < 1:
        parser.error(f"unknown policies {unknown}" if unknown else "--rounds, --active >= 1")
    print(f"limits: {MAX_TCP_PORTS} TCP ports and {most_flows(MAX_TCP_PORTS)} flows per job "
          f"({job_rules(most_flows(MAX_TCP_PORTS), MAX_TCP_PORTS)} rules), "
          f"{most_flows(0)} flows without ports, {MAX_FLOWS} flows per coflow")  # fmt: skip
    print(f"machine pace before: {measure().describe()}", flush=True)
    rows = []
    started = time.monotonic()
    for i, policy in enumerate(policies):
        result = run_policy(policy, args.rounds, args.active)
        rows.append((policy, result))
        left = (time.monotonic() - started) / (i + 1) * (len(policies) - i - 1)
        print(f"{policy} done ({i + 1}/{len(policies)}, ETA {left:.0f} s)", flush=True)
    print(f"machine pace after: {measure().describe()}")
    print(
        "\nholds of the event loop, ms: p50 / p99 / max of the time the loop's thread ran "
        "(the wall time's max beside it: more where another process had the core)"
    )
    print(f"{'policy':<10} {'holds':>6} {'rest':>22} {'reorder':>22} {'ops sent':>9} "
          f"{'errors':>6}")  # fmt: skip
    worst = 0.0
    for policy, result in rows:
        rest, reorder = result["holds"]["rest"], result["holds"]["reorder"]
        cells = [f"{h['cpu_p50']:.1f} / {h['cpu_p99']:.1f} / {h['cpu_max']:.1f} ({h['max']:.0f})"
                 for h in (rest, reorder)]  # fmt: skip
        print(f"{policy:<10} {rest['count'] + reorder['count']:>6} {cells[0]:>22} "
              f"{cells[1]:>22} {result['ops']:>9} {result['errors']:>6}")  # fmt: skip
        worst = max(worst, rest["cpu_max"], reorder["cpu_max"])
    for policy, result in rows:
        for line in result["long"][-5:]:
            print(f"{policy}: {line}")
    verdict = "within" if worst <= args.budget_ms else "OVER"
    print(f"\nlongest hold (running) {worst:.1f} ms: {verdict} the {args.budget_ms:g} ms budget")
    return 0 if worst <= args.budget_ms else 1


if __name__ == "__main__":
    sys.exit(main())
