"""One point of the claims atlas: a policy (a claim's reading) on one seed in one cell of a
claim's map, run in the simulator (a task of :mod:`cli.sweep`, so a map is resumable and runs
on a Ray cluster). The simulator is imported where a point runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from experiments.claim_map import Reading
from experiments.claims import MAPS, trace_path

# a point's metric and where the HPO core's summary (a simulator run's, or a testbed run's and
# the simulator's beside it in its result.json) holds it: (metric, statistic)
RUN_METRICS = {
    "avg_sct_s": ("sct_s", "mean"),
    "p95_sct_s": ("sct_s", "p95"),
    "time_to_90pct_s": ("time_to_90pct_s", "mean"),
    "time_to_95pct_s": ("time_to_95pct_s", "mean"),
}


def run_network_hpo(reading: Reading, seed: int, settings: Mapping[str, Any]) -> dict:
    """Concurrent HPO tasks on a big switch in the simulator (:mod:`simulator.hpo`): the HPO
    core's metrics and the regime (the busiest quarter of ports' busy share)."""
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator, warm_up
    from simulator.hpo import HpoDriver
    from workloads.hpo import generate

    warm_up()
    workload = {k: v for k, v in settings.items() if k not in ("link_bps", "mode")}
    for key in ("models", "patterns"):
        if key in workload:
            workload[key] = tuple(workload[key])
    sim = Simulator(
        Fabric(workload["n_hosts"], settings["link_bps"]),
        make_policy(reading.policy, **reading.options),
        mode=settings.get("mode", "levels"),
    )
    driver = HpoDriver(sim, generate(seed=seed, **workload))
    sim.run()
    summary = driver.core.summary(sim.now_s)
    return {
        **{key: summary[metric].get(statistic) for key, (metric, statistic) in RUN_METRICS.items()},
        "configs_counted": summary["time_to_90pct_s"].get("count", 0),
        "avg_jct_s": summary["jct_s"].get("mean"),
        "hpo_completion_s": summary["hpo_completion_s"].get("mean"),
        "busiest_quarter_busy": summary["busiest_quarter_busy"],
    }


def run_gpu_hpo(reading: Reading, seed: int, settings: Mapping[str, Any]) -> dict:
    """HPO on time-shared GPUs, compute only (:func:`workloads.gpu_hpo.gpu_hpo_point`),
    every metric the mean over the seed's random submission orders."""
    from workloads.gpu_hpo import gpu_hpo_point

    return gpu_hpo_point(seed=seed, policy=reading.policy, **settings)


def run_trace(reading: Reading, seed: int, settings: Mapping[str, Any]) -> dict:
    """Average CCT of one window of a coflow trace (the seed picks the window) with its
    arrivals compressed by the load factor (:func:`trace_window`)."""
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator, warm_up
    from simulator.metrics import coflow_rows

    warm_up()
    trace = trace_window(trace_path(settings["trace"]), seed, settings["windows"], settings["load"])
    sim = Simulator(Fabric(trace.n_ports, settings["link_bps"]),
                    make_policy(reading.policy, **reading.options))  # fmt: skip
    trace.install(sim)
    sim.run()
    cct = [r["cct_s"] for r in coflow_rows(sim)]
    return {"avg_cct_s": sum(cct) / len(cct), "coflows": len(cct)}


def trace_window(path: str, window: int, windows: int, load: float):
    """Window ``window`` (1 .. ``windows``) of the trace at ``path``: its coflows split into
    ``windows`` runs of consecutive arrivals, each an independent sample of the trace's traffic
    (a replicate), its arrivals shifted to start at 0 and divided by ``load`` (2: twice the
    offered load)."""
    from simulator.traces import Trace, TraceCoflow, load_trace

    if not 1 <= window <= windows:
        raise ValueError(f"window must be in 1..{windows}, got {window}")
    trace = load_trace(path)
    ordered = sorted(trace.coflows, key=lambda c: (c.arrival_s, c.coflow_id))
    size = len(ordered) // windows
    chosen = ordered[(window - 1) * size : window * size]
    start = chosen[0].arrival_s
    return Trace(trace.n_ports, [
        TraceCoflow(c.coflow_id, (c.arrival_s - start) / load, c.src, c.dst, c.size_bytes)
        for c in chosen
    ])  # fmt: skip


RUNNERS: dict[str, Callable[[Reading, int, Mapping[str, Any]], dict]] = {
    "network-hpo": run_network_hpo,
    "gpu-hpo": run_gpu_hpo,
    "trace": run_trace,
}


def run_point(point: dict) -> dict:
    """One point of the atlas (a sweep point, see :mod:`cli.sweep`): its metrics."""
    claim = MAPS[point["claim"]]
    settings = claim.settings(point["cell"])
    known = {r.label for r in claim.readings + claim.baselines}
    label = point["policy"]  # (a policy of the user's is its own reading, see with_policies)
    reading = claim.reading(label) if label in known else Reading(label, label)
    return RUNNERS[claim.kind](reading, point["seed"], settings)
