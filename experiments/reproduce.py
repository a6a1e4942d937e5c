"""Each paper's claim in its own setting, over seeds, in one report.

    .venv/bin/python scripts/reproduce.py --simulator-only [--seeds 5] [--out results/report]
    sudo .venv/bin/python scripts/reproduce.py --quick   # plus one testbed seed (root)
    sudo .venv/bin/python scripts/reproduce.py           # plus three testbed seeds (root)

For every claim: the paper's statement (from its abstract: the Beamer, JPAS and Hermes
algorithms here are reconstructions from their abstracts), the setting it is measured in here,
our value as a ratio to the baseline paired per seed (geometric mean over the seeds with its
95 % CI, :mod:`controller.metrics`), and a verdict decided by a fixed rule: **reproduced** if the
interval lies entirely on the claimed side of 1, **opposite** if entirely on the other side,
**not reproduced** if it contains 1; a claim against several baselines is **partly**
reproduced if it holds against some; a comparison that needs an interval and has one seed is
**inconclusive**. Writes ``REPORT.md``, ``summary.json`` (with provenance) and ``claims.png``
to ``--out``.

``--quick`` and the full mode also run the main testbed experiment (``scripts/run_testbed.py
--calibrate``: the testbed's overheads measured first, then the 13-host network-bound workload
under every network policy, with the simulator beside it) into ``<out>/testbed/``, add Beamer's
claim on the testbed, and a table of the simulator's prediction against the testbed per policy.
``--testbed-results DIR`` takes them from a finished experiment instead (no root needed).
Times here (2 cores), each measured as one command from a clean checkout: ``--simulator-only``
2 min 15 s, ``--quick`` 14 min 47 s, full 54 min (README, "The papers' claims").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from cli.argtypes import non_negative, positive  # noqa: E402
from cli.sweep import SweepError, run_points  # noqa: E402
from cli.sweep import add_arguments as add_sweep_arguments  # noqa: E402
from controller.metrics import Interval, paired_ratio_ci  # noqa: E402
from controller.policies import make_policy  # noqa: E402
from simulator import reference  # noqa: E402
from simulator.engine import Fabric, Simulator, warm_up  # noqa: E402
from simulator.hpo import HpoDriver  # noqa: E402
from simulator.metrics import coflow_rows, provenance, write_json  # noqa: E402
from simulator.traces import load_trace  # noqa: E402
from workloads.curves import sample_curves  # noqa: E402
from workloads.gpu import GpuJob, make_gpu_policy, run_time_sharing  # noqa: E402
from workloads.hpo import generate  # noqa: E402

# the checkout this runs from (OVS start-up script, ../shared traces)
ROOT = Path(__file__).resolve().parents[1]

TRACES = ROOT.parent / "shared" / "traces"
FULL_TRACE, SMALL_TRACE = "FB2010-1Hr-150-0.txt", "fb-526coflows-16ports-load0.9.txt"


@dataclass
class Comparison:
    """The claimed policy against one baseline: metric ratio (policy / baseline) per seed."""

    baseline: str
    ratio: Interval | None
    lower_is_better: bool = True
    needs_interval: bool = False  # one seed of a noisy measurement decides nothing
    # a proven guarantee "ratio <= bound": ``ratio`` spans the instances (low: best, high:
    # worst) and one instance above the bound disproves it
    bound: float | None = None

    @property
    def verdict(self) -> str:
        """This comparison's verdict by the fixed rule of the module docstring."""
        r = self.ratio
        if r is None:
            return "not measured"
        if self.bound is not None:
            return "reproduced" if r.high <= self.bound else "opposite"
        if self.needs_interval and r.n < 2:
            return "inconclusive"
        # one sample (a single trace) has no interval: its point decides
        low, high = (r.mean, r.mean) if r.n < 2 else (r.low, r.high)
        good, bad = (high < 1, low > 1) if self.lower_is_better else (low > 1, high < 1)
        return "reproduced" if good else "opposite" if bad else "not reproduced"


@dataclass
class Claim:
    """One paper's claim, where it is measured here, and what we found."""

    name: str
    paper: str
    statement: str
    setting: str
    metric: str
    comparisons: list[Comparison] = field(default_factory=list)
    note: str = ""
    # measured in the same setting to explain the verdict, not part of it
    context: list[tuple[str, Interval | None]] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """The claim's verdict over its baselines (partly: it holds against some)."""
        verdicts = {c.verdict for c in self.comparisons}
        if len(verdicts) == 1:
            return verdicts.pop()
        if "reproduced" in verdicts:
            return "partly"
        return "inconclusive" if "inconclusive" in verdicts else "not reproduced"


def hpo_summary(policy: str, seed: int, host_bps: float, mode: str = "levels", **workload) -> dict:
    """One simulated HPO run (``mode`` as :class:`simulator.engine.Simulator`'s): the HPO
    core's summary."""
    sim = Simulator(Fabric(workload["n_hosts"], host_bps), make_policy(policy), mode=mode)
    driver = HpoDriver(sim, generate(seed=seed, **workload))
    sim.run()
    return driver.core.summary(sim.now_s)


def compare(values: dict[str, dict[int, float]], claimed: str, baselines, lower=True, **kw):
    """The claimed policy's ratio to each baseline, paired per seed."""
    return [
        Comparison(b, paired_ratio_ci(values[claimed], values[b]), lower, **kw) for b in baselines
    ]


TESTBED_POLICIES = ("beamer", "sincronia", "fifo-lm", "fair", "jpas")
AGREEMENT = 0.15  # the simulator should predict the testbed's average SCT within this


SINCRONIA_BOUND = 4.0  # BSSI + greedy strict priority, zero release times (Sincronia)
BEAMER_BOUND = 20.0 / 3.0  # average SCT of Beamer's order (Beamer)


def spread(ratios: list[float]) -> Interval:
    """Ratios to the optimum over instances: their mean, best and worst."""
    return Interval(sum(ratios) / len(ratios), min(ratios), max(ratios), len(ratios))


def bssi_ratios() -> dict:
    """BSSI's order against the best of every order on small instances (a sweep point), with
    a uniformly random order's expected ratio and the worst order's beside it: on the random
    instances, and on instances where the order matters (:func:`reference.contended_coflows`),
    where an ordering no better than chance would fail the check."""
    rng = random.Random("report-bssi")
    out: dict[str, list[float]] = {
        key + suffix: [] for key in ("bssi", "random", "worst") for suffix in ("", "_contended")
    }

    def measure(state, suffix: str) -> None:
        best, values = reference.brute_force_best(state)
        ours = reference.order_value(state, make_policy("sincronia").schedule(state).order)
        out["bssi" + suffix].append(ours / best)
        out["random" + suffix].append(sum(values) / len(values) / best)
        out["worst" + suffix].append(max(values) / best)

    for weighted in (False, True):
        for n in range(2, reference.MAX_COFLOWS + 1):
            for _ in range(6):
                measure(reference.state_of(reference.random_coflows(rng, n, 4, weighted)), "")
    contended = random.Random("report-bssi-contended")
    for n in range(4, reference.MAX_COFLOWS + 1):
        for _ in range(8):
            measure(reference.state_of(reference.contended_coflows(contended, n)), "_contended")
    return out


def stage_ratios() -> dict:
    """Beamer's and Sincronia's orders against the best order's average SCT (a sweep point)."""
    rng = random.Random("report-beamer")
    out: dict[str, list[float]] = {key + suffix: [] for key in ("beamer", "sincronia", "random",
                                   "worst") for suffix in ("", "_contended")}  # fmt: skip

    def measure(state, suffix: str) -> None:
        values = reference.every_order_stage_completion_sums(state)
        best = min(values)
        for policy in ("beamer", "sincronia"):
            order = make_policy(policy).schedule(state).order
            out[policy + suffix].append(reference.stage_completion_sum(state, order) / best)
        out["random" + suffix].append(sum(values) / len(values) / best)
        out["worst" + suffix].append(max(values) / best)

    for n_stages in (2, 3, 4):
        for n_hosts in (3, 5):
            for _ in range(8):
                state = reference.stage_instance(rng, n_stages, max_jobs=2, n_hosts=n_hosts)
                if len(state.coflows) <= reference.MAX_COFLOWS:
                    measure(state, "")
    contended = random.Random("report-beamer-contended")
    for n_stages in (3, 4):
        for _ in range(12):
            state = reference.contended_stage_instance(contended, n_stages, max_jobs=2)
            if len(state.coflows) <= reference.MAX_COFLOWS:
                measure(state, "_contended")
    return out


def against_brute_force(results: dict[str, dict]) -> list[Claim]:
    """BSSI's and Beamer's orders against the best of every order on small instances."""
    coflows, stages = results["bssi"], results["stages"]
    bssi = coflows["bssi"]
    beamer, sincronia = stages["beamer"], stages["sincronia"]
    n_contended = len(coflows["bssi_contended"])
    return [
        Claim(
            "BSSI (Sincronia)", "Agarwal et al., SIGCOMM 2018",
            "BSSI with greedy strict priority is within 4x of the optimal total weighted CCT "
            "(all coflows released at 0)",
            f"{len(bssi)} random instances of 2-{reference.MAX_COFLOWS} coflows of 1-3 flows on 4 "
            "hosts, half of them weighted; the optimum by trying every order",
            "total weighted CCT / the best order's: mean [best, worst] over the instances",
            [Comparison("brute force", spread(bssi), bound=SINCRONIA_BOUND),
             Comparison("brute force, contended instances", spread(coflows["bssi_contended"]),
                        bound=SINCRONIA_BOUND)],
            context=[
                ("a uniformly random order on the random instances", spread(coflows["random"])),
                ("the worst order on them", spread(coflows["worst"])),
                (f"BSSI on {n_contended} contended instances (4-{reference.MAX_COFLOWS} coflows "
                 "from one shared port, sizes over three orders of magnitude)",
                 spread(coflows["bssi_contended"])),
                ("a uniformly random order on the contended ones",
                 spread(coflows["random_contended"])),
                ("the worst order on them", spread(coflows["worst_contended"])),
            ],
        ),
        Claim(
            "Beamer vs brute force", "He et al., IEEE TNSM 19(2), 2022",
            "Beamer's order keeps the average SCT within 20/3 of optimal",
            f"{len(beamer)} random instances of 2-4 stages of 1-2 jobs (one in-flight coflow "
            f"each, at most {reference.MAX_COFLOWS}) on 3 or 5 hosts; the optimum by trying every "
            "order",
            "average SCT / the best order's: mean [best, worst] over the instances",
            [Comparison("brute force", spread(beamer), bound=BEAMER_BOUND),
             Comparison("brute force, contended instances", spread(stages["beamer_contended"]),
                        bound=BEAMER_BOUND)],
            context=[("Sincronia's order on the same instances, average SCT / the best order's",
                      spread(sincronia)),
                     ("a uniformly random order on them", spread(stages["random"])),
                     ("the worst order on them", spread(stages["worst"])),
                     (f"Beamer on {len(stages['beamer_contended'])} contended instances (3-4 "
                      "stages, every job on one shared port, stage sizes over three orders of "
                      "magnitude)", spread(stages["beamer_contended"])),
                     ("Sincronia on them", spread(stages["sincronia_contended"])),
                     ("a uniformly random order on them", spread(stages["random_contended"])),
                     ("the worst order on them", spread(stages["worst_contended"]))],
        ),
    ]  # fmt: skip


def load_testbed_experiment(out: Path) -> dict:
    """A finished testbed experiment's ``summary.json`` with its runs under ``"runs"``."""
    summary = json.loads((out / "summary.json").read_text())
    summary["runs"] = json.loads((out / "results.json").read_text())
    return summary


def run_testbed_experiment(seeds: list[int], out: Path, progress) -> dict:
    """The main testbed experiment, calibrated, as ``scripts/run_testbed.py`` runs it (root);
    returns its ``summary.json`` with the per-run results under ``"runs"``."""
    command = [
        sys.executable, "-m", "experiments.run_testbed", "--calibrate",
        "--policy", *TESTBED_POLICIES, "--seeds", *map(str, seeds), "--out", str(out),
    ]  # fmt: skip
    progress(f"testbed: {' '.join(command[2:])}")
    run = subprocess.run(command, cwd=ROOT, text=True)
    if run.returncode != 0 and not (out / "summary.json").exists():
        raise SystemExit(f"the testbed experiment failed (exit {run.returncode}); see above")
    testbed = load_testbed_experiment(out)
    for failure in testbed.get("failures", []):  # the report is made of the runs that finished
        progress(f"testbed: {failure['policy']} seed {failure['seed']} failed: {failure['error']}")
    return testbed


def enforcement(testbed: dict) -> str:
    """Where the testbed served the levels and how its TCP was set, in words."""
    where = "the switch and the hosts" if testbed.get("host_priorities") else "the switch only"
    cap = testbed.get("tcp_rto_max_ms")
    rto = f"TCP timeout capped at {cap / 1000:g} s" if cap else "Linux's TCP timeouts"
    return f"priorities at {where}, {rto}"


def beamer_testbed(testbed: dict) -> Claim:
    """Beamer's claim on the testbed's main experiment."""
    values = {p: {} for p in TESTBED_POLICIES}
    for run in testbed["runs"]:
        values[run["policy"]][run["seed"]] = run["sct_s"]["mean"]
    w = testbed["workload"]
    return Claim(
        "Beamer (testbed)", "He et al., IEEE TNSM 19(2), 2022",
        "stage-aware coflow scheduling lowers the average SCT against Sincronia, FIFO-LM and "
        "per-flow fair sharing",
        f"Mininet testbed, {w['hosts']} hosts on one switch, {testbed['link_gbps']:g} Gbit/s "
        f"modelled at {testbed['emulated_link_bps'] / 1e6:g} Mbit/s, {w['tasks']} tasks of "
        f"successive halving ({w['configs']} configurations, eta {w['eta']}, "
        f"{w['min_iterations']} iterations first, {'/'.join(w['patterns'])}), "
        f"{len(w['seeds'])} seed(s), {enforcement(testbed)}",
        "average SCT, Beamer / baseline",
        compare(values, "beamer", ("sincronia", "fifo-lm", "fair"), needs_interval=True),
    )  # fmt: skip


def agreement(testbed: dict) -> list[dict]:
    """Per policy: the testbed's average SCT, the simulator's raw and calibrated predictions,
    and whether the calibrated one is within :data:`AGREEMENT`; plus, for every other policy
    the testbed clearly separates it from, whether the calibrated simulator ranks the two the
    same.

    Policies are compared as everywhere else in the project: by their ratio paired per seed (the
    same workload under both), separated where its 95 % interval excludes 1. The absolute
    intervals over seeds mostly measure how the seeds' workloads differ and almost never
    separate. The simulator agrees if its own paired ratio (the geometric mean over the same
    seeds) lies on the same side of 1."""
    bed: dict[str, dict] = {}
    sim: dict[str, dict] = {}
    for run in testbed.get("runs", []):
        bed.setdefault(run["policy"], {})[run["seed"]] = run["sct_s"].get("mean")
        calibrated = run.get("simulated_calibrated") or {}
        sim.setdefault(run["policy"], {})[run["seed"]] = calibrated.get("sct_s", {}).get("mean")
    rows = []
    policies = testbed["policies"]
    for name, entry in policies.items():
        calibrated = entry.get("calibrated_sim_over_testbed_avg_sct")
        rows.append({
            "policy": name,
            "testbed": entry["avg_sct_s"],
            "simulator": entry["sim_avg_sct_s"],
            "calibrated": entry.get("calibrated_sim_avg_sct_s"),
            "calibrated_over_testbed": calibrated,
            "within": None if calibrated is None
            else abs(calibrated["mean"] - 1) <= AGREEMENT,
            "busiest_port": entry.get("busiest_port_busy"),
            "wire_busiest_port": entry.get("wire_busiest_port_busy"),
            "ranking": [],
        })  # fmt: skip
    for row in rows:
        name = row["policy"]
        for other in policies:
            if other == name or row["calibrated"] is None:
                continue
            measured = paired_ratio_ci(bed.get(name, {}), bed.get(other, {}))
            if measured is None or measured.n < 2 or not measured.high < 1:
                continue  # not clearly faster on the testbed
            predicted = paired_ratio_ci(sim.get(name, {}), sim.get(other, {}))
            row["ranking"].append({
                "faster_than": other,
                "testbed_ratio": asdict(measured),
                "simulator_ratio": None if predicted is None else predicted.mean,
                "simulator_interval": None if predicted is None else asdict(predicted),
                "simulator_agrees": predicted is not None and predicted.mean < 1,
            })  # fmt: skip
    return rows


BEAMER_WORKLOAD = dict(n_hosts=64, n_tasks=10, configs_per_task=9, eta=3, min_iterations=10)
BEAMER_POLICIES = ("beamer", "sincronia", "fifo-lm", "fair")
# also run with one priority level per rank (the simulator's ideal mode): whether the 8 levels
# are what hides Beamer's gain over Sincronia
BEAMER_IDEAL_POLICIES = ("beamer", "sincronia")
JPAS_WORKLOAD = dict(n_hosts=13, n_tasks=4, configs_per_task=4, search="full",
                     mean_interarrival_s=60.0, min_iterations=10)  # fmt: skip
JPAS_POLICIES = ("jpas", "fair", "sincronia", "fifo-lm")
HERMES_POLICIES = ("hermes", "fifo", "rr", "slaq")
VARYS_POLICIES = ("varys", "fair")


def varys_trace() -> str:
    """The Facebook trace Varys' claim runs on: the full one where present."""
    return FULL_TRACE if (TRACES / FULL_TRACE).exists() else SMALL_TRACE


def claim_points(claim: str, seeds: list[int]) -> list[dict]:
    """The sweep points of one claim: every run it needs, each a task of its own."""
    if claim == "optimum":
        # (contended: the instances where the order matters joined the points' results)
        return [{"claim": claim, "part": part, "contended": True} for part in ("bssi", "stages")]
    if claim == "varys":
        return [{"claim": claim, "policy": p, "trace": varys_trace()} for p in VARYS_POLICIES]
    policies = {"beamer": BEAMER_POLICIES, "jpas": JPAS_POLICIES, "hermes": HERMES_POLICIES}
    points = [{"claim": claim, "policy": p, "seed": s} for s in seeds for p in policies[claim]]
    if claim == "beamer":
        points += [{"claim": claim, "policy": p, "seed": s, "mode": "ideal"}
                   for s in seeds for p in BEAMER_IDEAL_POLICIES]  # fmt: skip
    return points


def run_claim_point(point: dict) -> dict:
    """One run of a claim (a sweep point, see cli.sweep): the values its claim reads."""
    claim = point["claim"]
    if claim == "optimum":
        return bssi_ratios() if point["part"] == "bssi" else stage_ratios()
    if claim == "hermes":
        curves = sample_curves(random.Random(point["seed"]), 64, good_fraction=0.1, base_tau=40)
        jobs = [GpuJob(i, 1, 0.0, 200, 0.5, curve) for i, curve in enumerate(curves)]
        result = run_time_sharing(jobs, 8, make_gpu_policy(point["policy"]), quantum_s=5.0,
                                  resume_cost_s=0.5)  # fmt: skip
        return {"best_identified_s": result.best_identified_s}
    warm_up()
    if claim == "varys":
        trace = load_trace(TRACES / point["trace"])
        sim = Simulator(Fabric(trace.n_ports, 1e9), make_policy(point["policy"]))
        trace.install(sim)
        sim.run()
        cct = [r["cct_s"] for r in coflow_rows(sim)]
        return {"avg_cct_s": sum(cct) / len(cct)}
    workload = BEAMER_WORKLOAD if claim == "beamer" else JPAS_WORKLOAD
    summary = hpo_summary(point["policy"], point["seed"], 1e9, point.get("mode", "levels"),
                          **workload)  # fmt: skip
    return {
        "avg_sct_s": summary["sct_s"]["mean"],
        "time_to_90pct_s": summary["time_to_90pct_s"].get("mean"),
        "avg_jct_s": summary["jct_s"].get("mean"),
    }


def by_policy(runs: list[tuple[dict, dict]], key: str) -> dict[str, dict[int, float]]:
    """``{policy: {seed: result[key]}}`` of a claim's runs."""
    values: dict[str, dict[int, float]] = {}
    for point, result in runs:
        values.setdefault(point["policy"], {})[point.get("seed", 0)] = result[key]
    return values


def beamer(runs: list[tuple[dict, dict]]) -> Claim:
    """Average SCT under synchronous successive halving, against Sincronia, FIFO-LM, fair;
    beside it, Beamer against Sincronia with one priority level per rank."""
    levels = [(p, r) for p, r in runs if p.get("mode", "levels") == "levels"]
    ideal = by_policy([(p, r) for p, r in runs if p.get("mode") == "ideal"], "avg_sct_s")
    values = by_policy(levels, "avg_sct_s")
    context, note = [], ""
    if set(BEAMER_IDEAL_POLICIES) <= set(ideal):
        unlimited = paired_ratio_ci(ideal["beamer"], ideal["sincronia"])
        context.append((
            "Beamer / Sincronia with one priority level per rank (the simulator's ideal mode)",
            unlimited,
        ))  # fmt: skip
        verdict = Comparison("sincronia", unlimited).verdict
        note = {
            "reproduced": "with a priority level for every rank (beside) Beamer is faster than "
            "Sincronia: the 8 levels, where many coflows share the lowest, hide its gain.",
            "opposite": "with a priority level for every rank (beside) Beamer is slower than "
            "Sincronia: the 8 levels are not what hides a gain.",
        }.get(verdict, "with a priority level for every rank (beside) Beamer is still level "
              "with Sincronia: the 8 levels are not what hides a gain.")  # fmt: skip
    return Claim(
        "Beamer", "He et al., IEEE TNSM 19(2), 2022",
        "stage-aware coflow scheduling lowers the average stage completion time (SCT) against "
        "Sincronia, FIFO-LM and per-flow fair sharing",
        "simulator, 64 hosts on a 1 Gbit/s big switch, 10 concurrent HPO tasks of successive "
        "halving (9 configurations, eta 3, 10/30/90 iterations; ResNet-50 / VGG-16 / "
        "Inception-v3, parameter server or ring), 8 priority levels",
        "average SCT, Beamer / baseline",
        compare(values, "beamer", BEAMER_POLICIES[1:]),
        note,
        context,
    )  # fmt: skip


def jpas(runs: list[tuple[dict, dict]]) -> Claim:
    """Time to 90 % of converged accuracy for concurrent jobs arriving over time; beside it,
    JCT and the SRPT-like orders in the same setting."""
    to_90 = by_policy(runs, "time_to_90pct_s")
    jct = by_policy(runs, "avg_jct_s")
    context = [
        ("JPAS average JCT / fair's", paired_ratio_ci(jct["jpas"], jct["fair"])),
        ("Sincronia time to 90 % / fair's", paired_ratio_ci(to_90["sincronia"], to_90["fair"])),
        ("FIFO-LM time to 90 % / fair's", paired_ratio_ci(to_90["fifo-lm"], to_90["fair"])),
    ]
    return Claim(
        "JPAS", "Zhou et al., JNCA 158, 2020",
        "job-progress-aware flow priorities cut the time to reach 90 % / 95 % of converged "
        "accuracy by up to 38 % (13-server one-switch testbed)",
        "simulator, 13 hosts at 1 Gbit/s, 4 tasks arriving 60 s apart on average, each training "
        "4 configurations to completion (no early stopping), 8 priority levels",
        "mean time to 90 % of converged accuracy, JPAS / fair",
        compare(to_90, "jpas", ["fair"]),
        "our JPAS ranks jobs least attained progress first. Jobs trained to completion have "
        "equal budgets, and least-attained-first then equalises progress, so they end late "
        "together (see the JCT ratio); SRPT-like orders end some jobs early. Its 1 s timer "
        "changes nothing here beyond float rounding: a job's progress only changes when one "
        "of its coflows completes, when every policy reorders anyway.",
        context,
    )  # fmt: skip


def hermes(runs: list[tuple[dict, dict]]) -> Claim:
    """Time until the best configuration is identified, GPU time-sharing, compute only."""
    values = by_policy(runs, "best_identified_s")
    return Claim(
        "Hermes", "Son et al., Electronics 10(3):350, 2021",
        "convergence-aware preemptive GPU time-sharing finds the best configuration up to "
        "4.04x faster than FIFO, round-robin and SLAQ",
        "64 configurations (10 % good) of 200 iterations each sharing 8 GPUs in 5 s quanta, "
        "0.5 s resume cost, no network",
        "time until the best configuration is identified, Hermes / baseline",
        compare(values, "hermes", HERMES_POLICIES[1:]),
    )  # fmt: skip


def varys(runs: list[tuple[dict, dict]]) -> Claim:
    """Average CCT on the Facebook trace against per-flow fair sharing."""
    name = runs[0][0]["trace"]
    values = by_policy(runs, "avg_cct_s")
    return Claim(
        "Varys", "Chowdhury et al., SIGCOMM 2014",
        "SEBF ordering with MADD rates lowers the average coflow completion time (CCT) against "
        "per-flow fair sharing",
        f"simulator, the Facebook trace `{name}` on a 1 Gbit/s big switch, arrivals as traced",
        "average CCT, Varys / fair (one trace: no interval)",
        compare(values, "varys", ["fair"]),
    )  # fmt: skip


def agreement_lines(rows: list[dict], testbed: dict) -> list[str]:
    """The simulator-against-testbed section of ``REPORT.md``."""
    overheads = testbed.get("overheads") or {}
    lines = [
        "",
        "## The simulator against the testbed",
        "",
        f"Main testbed experiment, average SCT in s, mean +/- 95 % CI over seeds "
        f"{testbed['workload']['seeds']}. *Simulator*: the fluid model on the same workload, "
        "seed, link rate and bytes; *calibrated*: the same with the testbed's overheads, "
        f"measured once before the runs and the same for every policy (job start-up "
        f"{overheads.get('job_startup_s', float('nan')):.2f} s, goodput "
        f"{overheads.get('goodput', float('nan')):.3f} of the line rate; "
        "`scripts/calibrate.py`). Target: calibrated within "
        f"{AGREEMENT:.0%} of the testbed. *Busiest port*: its busy share while stages run, by "
        "the workload's bytes at the line rate / by the switch port's byte counter (the wire).",
        "",
        "| policy | testbed | simulator | calibrated | calibrated / testbed | within "
        f"{AGREEMENT:.0%} | ranking where the testbed separates policies (paired per seed) "
        "| busiest port % (bytes / wire) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        ranking = (
            "; ".join(
                f"faster than {r['faster_than']} "
                f"({Interval(**r['testbed_ratio']).format(3)}): simulator "
                + ("agrees" if r["simulator_agrees"] else "disagrees")
                + (
                    ""
                    if r["simulator_interval"] is None
                    else f" ({Interval(**r['simulator_interval']).format(3)})"
                )
                for r in row["ranking"]
            )
            or "-"
        )
        within = "-" if row["within"] is None else "yes" if row["within"] else "no"
        lines.append(
            f"| {row['policy']} | {_fmt(row['testbed'])} | {_fmt(row['simulator'])} | "
            f"{_fmt(row['calibrated'])} | {_fmt(row['calibrated_over_testbed'], 2)} | {within} | "
            f"{ranking} | {_pct(row.get('busiest_port'))} / {_pct(row.get('wire_busiest_port'))} |"
        )
    return lines


def _fmt(entry: dict | None, digits: int = 1) -> str:
    if entry is None:
        return "-"
    if entry["n"] < 2:
        return f"{entry['mean']:.{digits}f} (n=1)"
    return f"{entry['mean']:.{digits}f} +/- {entry['ci95']:.{digits}f}"


def _pct(entry: dict | None) -> str:
    """A share's mean +/- CI in percent, ``-`` if missing."""
    if entry is None:
        return "-"
    scaled = {**entry, "mean": 100 * entry["mean"], "ci95": 100 * entry.get("ci95", 0.0)}
    return _fmt(scaled, 0)


def testbed_provenance(testbed: dict | None) -> list[str]:
    """Where the testbed's numbers come from (its own run, possibly an earlier one)."""
    if testbed is None:
        return []
    p = testbed["provenance"]
    dirty = " (with uncommitted changes)" if p["git_dirty"] else ""
    lines = [f"- testbed experiment: git commit {p['git_commit']}{dirty}, command "
             f"`{' '.join(p['command'])}`; {enforcement(testbed)}"]  # fmt: skip
    lines += [f"- testbed run that failed and is left out: {f['policy']}, seed {f['seed']}: "
              f"{f['error']}" for f in testbed.get("failures", [])]  # fmt: skip
    return lines


def report(claims: list[Claim], meta: dict, out: Path, testbed: dict | None = None) -> Path:
    """``REPORT.md``: one row per claim, the comparisons, the simulator against the testbed,
    provenance."""
    lines = [
        "# Reproduction report",
        "",
        "The Beamer, JPAS and Hermes algorithms are our reconstructions from the papers'",
        "abstracts, not the authors' code. Values are ratios to the baseline, paired per seed:",
        "geometric mean over the seeds [95 % CI, Student's t on the log-ratios]; the rows",
        "against brute force give mean [best, worst] over the instances and are reproduced",
        "when the worst is within the proven bound. Verdicts follow a fixed rule: reproduced",
        "when the interval lies entirely on the claimed side of 1, opposite when entirely on",
        "the other side, not reproduced when it contains 1; partly when a claim holds against",
        "some of its baselines only.",
        "",
        "| claim | paper's statement | setting | metric | our value | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in claims:
        values = "; ".join(
            f"vs {x.baseline}: {x.ratio.format(3) if x.ratio else '-'} ({x.verdict})"
            for x in c.comparisons
        )
        lines.append(f"| {c.name} ({c.paper}) | {c.statement} | {c.setting} | {c.metric} | "
                     f"{values} | **{c.verdict}** |")  # fmt: skip
    notes = [f"- {c.name}: {c.note}" for c in claims if c.note]
    for c in claims:
        notes += [f"- {c.name}, same setting: {label} {r.format(3) if r else '-'}"
                  for label, r in c.context]  # fmt: skip
    if notes:
        lines += ["", "Notes:", *notes]
    if testbed is not None:
        lines += agreement_lines(agreement(testbed), testbed)
    p = meta["provenance"]
    lines += [
        "",
        "## Provenance",
        "",
        f"- mode: {meta['mode']}; seeds: {meta['seeds']}; testbed seeds: "
        f"{meta['testbed_seeds'] or '-'}; wall time: {meta['wall_s']:.0f} s",
        f"- git commit: {p['git_commit']}"
        + (" (with uncommitted changes)" if p["git_dirty"] else ""),  # fmt: skip
        f"- command: `{' '.join(p['command'])}`",
        f"- Python {p['python']}; " + ", ".join(f"{k} {v}" for k, v in p["packages"].items() if v),
        f"- machine: {p['machine']['platform']}, {p['machine']['cpus']} CPUs",
        *testbed_provenance(testbed),
        "",
        "![claims](claims.png)",
        "",
    ]
    path = out / "REPORT.md"
    path.write_text("\n".join(lines))
    return path


def plot(claims: list[Claim], out: Path) -> Path:
    """Every comparison's ratio with its 95 % interval, and the line of no difference."""
    rows = [(f"{c.name} vs {x.baseline}", x.ratio) for c in claims for x in c.comparisons
            if x.ratio is not None]  # fmt: skip
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2))
    for i, (_, r) in enumerate(rows):
        error = [[0.0], [0.0]] if r.n < 2 else [[r.mean - r.low], [r.high - r.mean]]
        ax.errorbar(r.mean, i, xerr=error, fmt="o", capsize=4, color="tab:blue")
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("ratio to the baseline (geometric mean over seeds, 95 % CI; < 1: faster)")
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = out / "claims.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    """Run the claims (and the testbed experiment), write the report; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--simulator-only", action="store_true", help="only the simulator's claims (no root)"
    )
    mode.add_argument(
        "--quick",
        action="store_true",
        help="the simulator's claims and one seed of the main testbed experiment (root)",
    )
    mode.add_argument(
        "--testbed-results",
        type=Path,
        metavar="DIR",
        help="take the testbed's claims from a finished run_testbed.py experiment in DIR "
        "(its summary.json keeps its own provenance) instead of running it",
    )
    parser.add_argument(
        "--seeds", type=positive(int), default=5, help="seeds per claim (default: 5)"
    )
    parser.add_argument(
        "--testbed-seeds",
        type=non_negative(int),
        nargs="+",
        help="seeds of the testbed experiment (default: 1 with --quick, else 1 2 3)",
    )
    parser.add_argument(
        "--claims",
        nargs="+",
        default=["beamer", "jpas", "hermes", "varys", "optimum"],
        choices=["beamer", "jpas", "hermes", "varys", "optimum"],
        help="claims to run (default: all; optimum: BSSI and Beamer against brute force)",
    )
    parser.add_argument("--out", type=Path, default=Path("results") / "report")
    add_sweep_arguments(parser)
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error("--seeds must be >= 2 (an interval needs two)")
    mode = "simulator-only" if args.simulator_only else "quick" if args.quick else "full"
    if args.testbed_results is not None:
        mode = "testbed results given"
        if not (args.testbed_results / "summary.json").is_file():
            parser.error(f"--testbed-results {args.testbed_results}: no summary.json there")
    if args.testbed_seeds is None:
        args.testbed_seeds = [1] if args.quick else [1, 2, 3]
    if mode in ("quick", "full") and os.geteuid() != 0:
        parser.error(f"the {mode} mode runs the testbed: run as root (or use --simulator-only)")
    args.out = args.out.resolve()  # the testbed experiment runs from the checkout's root
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = list(range(1, args.seeds + 1))
    started = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", flush=True)

    points = [point for name in args.claims for point in claim_points(name, seeds)]
    try:
        results = run_points(
            points, run_claim_point, args.out / "points", args, label="simulator runs",
            describe=lambda p, _: " ".join(str(v) for v in p.values()),
            cost=lambda p: {"beamer": 3, "varys": 2, "jpas": 1}.get(p["claim"], 0.2),
        )  # fmt: skip
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    runs: dict[str, list] = {}
    for point, result in zip(points, results, strict=True):
        runs.setdefault(point["claim"], []).append((point, result))
    builders = {"beamer": beamer, "jpas": jpas, "hermes": hermes, "varys": varys}
    claims = []
    for name in args.claims:
        if name == "optimum":
            claims += against_brute_force({p["part"]: r for p, r in runs[name]})
        else:
            claims.append(builders[name](runs[name]))
    testbed = None
    if args.testbed_results is not None:
        testbed = load_testbed_experiment(args.testbed_results)
        args.testbed_seeds = testbed["workload"]["seeds"]
    elif mode != "simulator-only":
        testbed = run_testbed_experiment(args.testbed_seeds, args.out / "testbed", progress)
    if testbed is not None:
        claims.append(beamer_testbed(testbed))
    meta = {
        "mode": mode,
        "seeds": seeds,
        "testbed_seeds": None if testbed is None else args.testbed_seeds,
        "wall_s": time.perf_counter() - started,
        "provenance": provenance(sys.argv[1:] if argv is None else argv),
    }
    path = report(claims, meta, args.out, testbed)
    plot(claims, args.out)
    write_json(
        args.out / "summary.json",
        {
            **meta,
            "claims": [
                {
                    "name": c.name,
                    "verdict": c.verdict,
                    "setting": c.setting,
                    "metric": c.metric,
                    "context": [
                        {"what": label, "mean": r.mean, "low": r.low, "high": r.high, "n": r.n}
                        for label, r in c.context
                        if r is not None
                    ],
                    "comparisons": [
                        {
                            "baseline": x.baseline,
                            "verdict": x.verdict,
                            "mean": None if x.ratio is None else x.ratio.mean,
                            "low": None if x.ratio is None else x.ratio.low,
                            "high": None if x.ratio is None else x.ratio.high,
                            "n": None if x.ratio is None else x.ratio.n,
                        }
                        for x in c.comparisons
                    ],
                }
                for c in claims
            ],
            "simulator_vs_testbed": None if testbed is None else agreement(testbed),
        },
    )
    print()
    for c in claims:
        print(f"{c.name:<7} {c.verdict:<15} " + "; ".join(
            f"vs {x.baseline} {x.ratio.format(3) if x.ratio else '-'}" for x in c.comparisons
        ))  # fmt: skip
    print(f"\n{path} ({meta['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
