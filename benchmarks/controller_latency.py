"""Registration -> FlowMods sent, measured on the real controller and a real OVS bridge.

    sudo .venv/bin/python benchmarks/controller_latency.py [--policy beamer] [--active 200]
                                                           [--registrations 1000]

Starts OVS if needed, a userspace bridge ``benchlat`` (no hosts: only the rules matter) and
``python -m controller``; registers ``--active`` coflows between 13 hosts (jobs in stages, with
TCP ports), resets the statistics, then makes ``--registrations`` registrations, each a new
coflow followed by the deletion of the oldest, so ``--active`` coflows stay active. The controller
measures, for every event, the time from the REST handler to the last FlowMod of the reorder that
served it being handed to the switch connection; the script prints its p50/p99 and the client's
request round trip, then compares the rules on the switch with what the controller expects:
their number, and each one's DSCP and meter (exit status 1 if one differs).
Everything it started is stopped by PID and the bridge deleted by name.

By default the controller, OVS and the client share every CPU, and on a small machine OVS,
applying the FlowMods of one event, takes the controller's core during the next reorder (the
script prints how many reorders the OS preempted). ``--controller-cpu N`` measures the
controller as where the switch is another machine: the controller alone on CPU N, OVS's
threads (found by its pid file, each given its own CPU set back afterwards) and this client on
the others.

The machine's pace (``benchmarks/pace.py``) is printed before and after the measured events,
taken on the controller's CPU with ``--controller-cpu``: on a shared VM the same reorder takes
up to twice as long in a slow second, and the readings tell a slow hour from a quick one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import time

from bench_switch import controller_on_bridge, our_marks, our_rules_and_meters, switch_on_cpus
from pace import measure_on

from workloads.launcher import wait_for, wanted_marks

BRIDGE = "benchlat"
HOSTS = [f"10.0.0.{i}" for i in range(1, 14)]


def coflow_body(rng: random.Random, coflow_id: int, n_jobs: int) -> dict:
    src, dst = rng.sample(HOSTS, 2)
    flows = [{"src": src, "dst": dst, "bytes": rng.uniform(1e5, 1e8)}]
    if rng.random() < 0.5:
        a, b = rng.sample(HOSTS, 2)
        flows.append({"src": a, "dst": b, "bytes": rng.uniform(1e5, 1e8)})
    return {"flows": flows, "job_id": coflow_id % n_jobs + 1}


def main(argv=None) -> int:
    """Fill the controller with ``--active`` coflows, time ``--registrations`` registrations
    (each with a deletion), print the latencies and check the switch; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="beamer")
    parser.add_argument("--active", type=int, default=200)
    parser.add_argument("--registrations", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--controller-cpu", type=int, default=None, metavar="N",
        help="run the controller alone on CPU N, and OVS and this client on the others (as "
             "where the switch is another machine); default: the three share every CPU",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.active < 1 or args.registrations < 1:
        parser.error("--active and --registrations must be >= 1")
    cpus = os.sched_getaffinity(0)
    if args.controller_cpu is not None and (args.controller_cpu not in cpus or len(cpus) < 2):
        parser.error(f"--controller-cpu: CPU {args.controller_cpu} must be one of this "
                     f"process's CPUs {sorted(cpus)}, with another left for OVS and the "
                     f"client")  # fmt: skip

    with contextlib.ExitStack() as stack:
        if args.controller_cpu is None:
            ctl = stack.enter_context(controller_on_bridge(BRIDGE, "--policy", args.policy))
            print(f"the controller, OVS and this client share CPUs {sorted(cpus)}")
        else:
            others = cpus - {args.controller_cpu}
            os.sched_setaffinity(0, others)
            ctl = stack.enter_context(
                controller_on_bridge(BRIDGE, "--policy", args.policy, cpus={args.controller_cpu})
            )
            stack.enter_context(switch_on_cpus(others))  # (OVS runs: the bridge is up)
            print(f"the controller alone on CPU {args.controller_cpu}; OVS and this client on "
                  f"CPUs {sorted(others)}")  # fmt: skip
        rng = random.Random(args.seed)
        n_jobs = fill(ctl.client, rng, args.active)
        print(f"{args.active} coflows of {n_jobs} jobs active; policy {args.policy}", flush=True)
        time.sleep(1)
        pace_cpus = None if args.controller_cpu is None else {args.controller_cpu}
        where = "" if pace_cpus is None else f" (CPU {args.controller_cpu})"
        print(f"machine pace before{where}: {measure_on(pace_cpus).describe()}", flush=True)
        ctl.client.request("DELETE", "/stats")
        round_trips = churn(ctl.client, rng, args.active, n_jobs, args.registrations)
        time.sleep(1)
        stats = ctl.client.stats()
        print(f"machine pace after{where}: {measure_on(pace_cpus).describe()}")
        print_latencies(stats, round_trips)
        return 1 if switch_disagrees(ctl.client) else 0


def fill(client, rng: random.Random, active: int) -> int:
    """Register stages, ``active // 2`` jobs and ``active`` coflows; the number of jobs."""
    n_jobs = max(1, active // 2)
    for stage in range(1, n_jobs // 8 + 2):
        client.put_stage(stage)
    for job in range(1, n_jobs + 1):
        client.put_job(job, stage_id=job // 8 + 1, tcp_ports=[5000 + job],
                       iteration_budget=rng.randint(5, 50))  # fmt: skip
    for coflow in range(1, active + 1):
        client.put_coflow(coflow, **coflow_body(rng, coflow, n_jobs))
    return n_jobs


def churn(client, rng: random.Random, active: int, n_jobs: int, registrations: int) -> list[float]:
    """Register a new coflow and delete the oldest, ``registrations`` times; each
    registration's REST round trip (s)."""
    round_trips = []
    oldest, newest = 1, active
    for i in range(registrations):
        newest += 1
        started = time.perf_counter()
        client.put_coflow(newest, **coflow_body(rng, newest, n_jobs))
        round_trips.append(time.perf_counter() - started)
        client.delete("coflows", oldest)
        oldest += 1
        if (i + 1) % 200 == 0:
            print(f"  {i + 1}/{registrations} registrations", flush=True)
    return round_trips


def print_latencies(stats: dict, round_trips: list[float]) -> None:
    """The controller's event-to-FlowMods latency, reorder compute time, preemptions, garbage
    collections and the client's round trips."""
    lat = stats["event_to_flowmods_ms"]
    comp = stats["reorder_compute_ms"]
    print(f"events measured: {lat['count']} (a registration and a deletion each)")
    print(f"registration -> FlowMods sent: p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, "
          f"max {lat['max']:.2f} ms")  # fmt: skip
    if slowest := lat.get("slowest"):
        print("slowest event: {latency_ms:.1f} ms = wait {wait_ms:.1f} + compute "
              "{compute_ms:.1f} + send {send_ms:.1f} ms; the controller's CPU time in it "
              "{cpu_ms:.1f} ms".format(**slowest))  # fmt: skip
    print(f"reorder compute: p50 {comp['p50']:.2f} ms, p99 {comp['p99']:.2f} ms "
          f"over {comp['count']} reorders; the controller's CPU time in them: "
          f"p50 {comp['cpu_p50']:.2f} ms, p99 {comp['cpu_p99']:.2f} ms")  # fmt: skip
    others = comp["p99_not_preempted"]
    print(f"reorders the OS took the core from to run another task: {comp['preempted']} "
          f"of {comp['count']} ({comp['preemptions']} times); the p99 of the others: "
          + ("none was not" if others is None else f"{others:.2f} ms"))  # fmt: skip
    print(f"REST round trip (client): p50 {statistics.median(round_trips) * 1e3:.2f} ms, "
          f"p99 {sorted(round_trips)[int(0.99 * len(round_trips))] * 1e3:.2f} ms")  # fmt: skip
    print(f"ops sent: {stats['ops_sent']}, switch errors: {stats['switch_errors']}")
    pauses = ", ".join(f"{g} {v['count']} x, max {v['max_ms']:.1f} ms"
                       for g, v in stats["gc_pauses"].items())  # fmt: skip
    print(f"garbage collections in the controller while measured: {pauses}")


def switch_disagrees(client) -> int:
    """Check the switch holds the controller's desired rules and meters with their marks;
    the number of rules whose DSCP or meter is not the wanted one (printed)."""
    desired = client.rules()["desired"]
    want = (len(desired["flows"]), len(desired["meters"]))
    got = wait_for(lambda: (n := our_rules_and_meters(BRIDGE)) == want and n, timeout_s=10,
                   what=f"{want[0]} rules and {want[1]} meters on the switch")  # fmt: skip
    print(f"rules on the switch: {got[0]} (expected {want[0]}); "
          f"meters: {got[1]} (expected {want[1]})")  # fmt: skip
    wanted = wanted_marks(desired)

    def wrong() -> int:
        held = our_marks(BRIDGE)
        return sum(held.get(key) != marks for key, marks in wanted.items())

    with contextlib.suppress(AssertionError):  # (the count below says how many)
        wait_for(lambda: wrong() == 0, timeout_s=10, what="every rule's marks")
    print(f"rules whose DSCP or meter on the switch is not the wanted one: {wrong()}")
    return wrong()


if __name__ == "__main__":
    sys.exit(main())
