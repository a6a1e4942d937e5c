"""The papers' claims as maps (:class:`experiments.claim_map.ClaimMap`): the dimensions that decide
each, their levels, and why each is there.

The Beamer, JPAS and Hermes algorithms are reconstructions from the papers' abstracts; where an
abstract allows several readings, each is a :class:`~experiments.claim_map.Reading` of the claim,
run side by side with the default one (the claim's verdict is the default's; the others are
reported beside it, whichever wins).
"""

from __future__ import annotations

import netsched_data
from experiments.claim_map import ClaimMap, Dimension, Level, Metric, Reading
from netsched_data import FULL_TRACE


def trace_path(name: str) -> str:
    """The path of a bundled coflow trace (:data:`netsched_data.TRACES`) by its name (the
    name, not the path, is in a claim's settings: the same points wherever it is installed)."""
    return str(netsched_data.trace(name))


# the report's Beamer setting: 64 hosts on a 1 Gbit/s big switch, 10 concurrent tasks of
# synchronous successive halving (9 configurations, eta 3: 10 / 30 / 90 iterations)
BEAMER_BASE = dict(
    n_hosts=64,
    n_tasks=10,
    configs_per_task=9,
    eta=3,
    min_iterations=10,
    models=["resnet50", "vgg16", "inception3"],
    patterns=["ps", "ring"],
    mean_interarrival_s=0.0,
    search="halving",
    link_bps=1e9,
    mode="levels",
)

BEAMER = ClaimMap(
    key="beamer",
    name="Beamer",
    paper="He et al., IEEE TNSM 19(2), 2022",
    statement="stage-aware coflow scheduling lowers the average stage completion time (SCT) "
    "against Sincronia, FIFO-LM and per-flow fair sharing",
    kind="network-hpo",
    base=BEAMER_BASE,
    grid=(
        Dimension("load", "how much the stages compete for ports: an order matters only where "
                  "coflows queue; stated as the busiest quarter of ports' busy share (fair's)",
                  (Level("medium"), Level("light", {"n_tasks": 5}),
                   Level("heavy", {"n_hosts": 16}))),
        Dimension("models", "with one model every task's jobs look alike, so only a stage-level "
                  "order separates them; with the zoo the coflow sizes already differ 5x",
                  (Level("zoo"), Level("one", {"models": ["resnet50"]}))),
        Dimension("arrivals", "tasks starting together make many equal first stages compete; "
                  "spread, stages of different tasks are at different points",
                  (Level("together"), Level("spread", {"mean_interarrival_s": 100.0}))),
    ),
    variations=(
        Dimension("levels", "8 switch priority levels put many coflows in the lowest level; "
                  "one level per rank shows the order itself",
                  (Level("8"), Level("per-rank", {"mode": "ideal"})), quick=False),
        Dimension("pattern", "a parameter server concentrates bytes on one port, a ring "
                  "spreads them: the stage's bottleneck differs",
                  (Level("mixed"), Level("ps", {"patterns": ["ps"]}),
                   Level("ring", {"patterns": ["ring"]})), quick=False),
        Dimension("search", "Hyperband runs brackets side by side (more stages at once), ASHA "
                  "has no stage barrier",
                  (Level("halving"), Level("hyperband", {"search": "hyperband"}),
                   Level("asha", {"search": "asha"})), quick=False),
    ),
    readings=(
        Reading("beamer", "beamer", {}, "stages in BSSI order of their remaining demand, inside a "
                "stage the slowest job first (the stage ends with it)"),
        Reading("beamer-arrival", "beamer", {"within_stage": "arrival"}, "the same stage order "
                "without the slowest-job-first preference inside a stage. A stage's coflows "
                "are one tied rank (they share a priority level), so the order inside it is "
                "only their listing order, which only MADD rate caps (`use_rates`) read: "
                "without them this reading runs exactly as the default, and the map shows it"),
        Reading("beamer-srpt", "beamer", {"stage_order": "srpt"}, "stages by shortest "
                "remaining bottleneck first instead of BSSI: the simplest stage-aware order"),
    ),
    baselines=(Reading("sincronia", "sincronia"), Reading("fifo-lm", "fifo-lm"),
               Reading("fair", "fair")),
    metrics=(Metric("avg_sct_s", "average SCT"), Metric("p95_sct_s", "p95 SCT")),
    context=("busiest_quarter_busy",),
)  # fmt: skip

# the report's JPAS setting: the 13-server testbed's size, 4 tasks arriving 60 s apart on
# average, each training 4 configurations to completion (no early stopping)
JPAS_BASE = dict(n_hosts=13, n_tasks=4, configs_per_task=4, eta=3, min_iterations=10,
                 models=["resnet50", "vgg16", "inception3"], patterns=["ps", "ring"],
                 mean_interarrival_s=60.0, search="full", link_bps=1e9, mode="levels")  # fmt: skip

JPAS = ClaimMap(
    key="jpas",
    name="JPAS",
    paper="Zhou et al., JNCA 158, 2020",
    statement="job-progress-aware flow priorities cut the time to reach 90 % / 95 % of "
    "converged accuracy by up to 38 % (13-server one-switch testbed)",
    kind="network-hpo",
    base=JPAS_BASE,
    grid=(
        Dimension("arrivals", "JPAS' premise: early-stage jobs beside late-stage ones; with "
                  "tasks 60 s apart all are early together, 400 s apart (about a third of a "
                  "job) early ones meet late ones",
                  (Level("60s"), Level("together", {"mean_interarrival_s": 0.0}),
                   Level("400s", {"mean_interarrival_s": 400.0}))),
        Dimension("models", "least progress first equalises iterations; with the zoo an "
                  "iteration differs 5.4x in bytes between jobs, with one model it does not",
                  (Level("zoo"), Level("one", {"models": ["resnet50"]}))),
        Dimension("load", "more tasks on the same 13 hosts: more jobs per port",
                  (Level("4 tasks"), Level("8 tasks", {"n_tasks": 8})), quick=False),
    ),
    variations=(),
    readings=(
        Reading("jpas", "jpas", {}, "progress as completed iterations over the stage budget, "
                "least first"),
        Reading("jpas-service", "jpas", {"progress": "service"}, "progress as attained service "
                "(bytes synchronised), least first: does not favour big models"),
        Reading("jpas-maif", "jpas", {"progress": "maif"}, "maximum accuracy improvement "
                "first: the job whose accuracy rose most per iteration recently"),
    ),
    baselines=(Reading("fair", "fair"), Reading("sincronia", "sincronia")),
    metrics=(Metric("time_to_90pct_s", "mean time to 90 % of converged accuracy"),
             Metric("time_to_95pct_s", "mean time to 95 % of converged accuracy")),
    context=("busiest_quarter_busy",),
)  # fmt: skip

HERMES = ClaimMap(
    key="hermes",
    name="Hermes",
    paper="Son et al., Electronics 10(3):350, 2021",
    statement="convergence-aware preemptive GPU time-sharing finds the best configuration up "
    "to 4.04x faster than FIFO, round-robin and SLAQ",
    kind="gpu-hpo",
    base=dict(good_fraction=0.1, configs_per_gpu=8, search="none", n_orders=8, n_gpus=8),
    grid=(
        Dimension("good", "the paper: gains are largest when few configurations are good",
                  (Level("10%"), Level("25%", {"good_fraction": 0.25}),
                   Level("50%", {"good_fraction": 0.5}))),
        Dimension("search", "without early stopping every configuration trains to the end and "
                  "whole-HPO time cannot change; halving and ASHA terminate configurations",
                  (Level("none"), Level("halving", {"search": "halving"}),
                   Level("asha", {"search": "asha"}))),
        Dimension("per-gpu", "configurations per GPU: how long the queue is",
                  (Level("8"), Level("2", {"configs_per_gpu": 2})), quick=False),
    ),
    variations=(
        Dimension("quantum", "halving's and ASHA's first rungs (1-2.5 s jobs at 64 "
                  "configurations) are shorter than a 5 s quantum, so time-sharing acts "
                  "inside a rung only with a shorter one",
                  (Level("5s"), Level("1s", {"quantum_s": 1.0})), quick=False),
    ),
    readings=(Reading("hermes", "hermes", {}, "fastest converging first, a new job's first "
                      "slice before that, preemptive"),),
    baselines=(Reading("fifo", "fifo"), Reading("rr", "rr"), Reading("slaq", "slaq")),
    metrics=(Metric("best_identified_s", "time to identify the best configuration"),
             Metric("target_reached_s", "time until a configuration reaches the target"),
             Metric("hpo_completion_s", "HPO completion time")),
    note="compute only (no network): 8 GPUs in 5 s quanta, 0.5 s to resume a preempted job, "
    "200 iterations of 0.5 s at most; every metric is the mean over 8 random submission "
    "orders of the seed, the same orders for every policy. The target accuracy is 90 % of the "
    "best converged accuracy among the seed's configurations",
)  # fmt: skip

VARYS = ClaimMap(
    key="varys",
    name="Varys",
    paper="Chowdhury et al., SIGCOMM 2014",
    statement="SEBF ordering with MADD rates lowers the average coflow completion time (CCT) "
    "against per-flow fair sharing",
    kind="trace",
    base=dict(trace=FULL_TRACE, windows=12, load=1.0, link_bps=1e9),
    grid=(
        Dimension("load", "the trace's arrivals compressed (x2) or stretched (x0.5): ordering "
                  "matters only where coflows queue",
                  (Level("x1"), Level("x0.5", {"load": 0.5}), Level("x2", {"load": 2.0}))),
    ),
    variations=(),
    readings=(Reading("varys", "varys"),),
    baselines=(Reading("fair", "fair"),),
    metrics=(Metric("avg_cct_s", "average CCT"),),
    note="a seed is one of 12 windows of consecutive arrivals of the Facebook trace",
)  # fmt: skip

# The testbed confirms a claim at its own size: the main testbed experiment's workload
# (``hpo-testbed``'s defaults: 13 hosts, 2 tasks of 9 configurations, halving at
# 3 / 9 / 27 iterations, 3 GPUs per job, ring all-reduce, 1 Gbit/s modelled) crossed with the
# dimensions of the claim's map that decided it in the simulator. A testbed run lasts as long as
# the modelled cluster would (85-260 s here), so load is held at 2 tasks: doubling it doubles
# every run. The simulator maps this small grid first; the confirmation runs the cell where it
# predicts the largest effect and one where it predicts none (experiments/confirm.py).
TESTBED_BASE = dict(
    n_hosts=13,
    n_tasks=2,
    configs_per_task=9,
    eta=3,
    min_iterations=3,
    workers=3,
    models=["resnet50", "vgg16", "inception3"],
    patterns=["ring"],
    mean_interarrival_s=0.0,
    search="halving",
    link_bps=1e9,
    mode="levels",
)

BEAMER_TESTBED = ClaimMap(
    key="beamer-testbed",
    name="Beamer at the testbed's size",
    paper=BEAMER.paper,
    statement=BEAMER.statement,
    kind="network-hpo",
    base=TESTBED_BASE,
    grid=(
        Dimension("models", BEAMER.dimension("models").why,
                  (Level("zoo"), Level("one", {"models": ["resnet50"]}))),
        Dimension("arrivals", "tasks starting together make many equal first stages compete; "
                  "60 s apart (a third to two thirds of a task here), stages of different tasks "
                  "are at different points",
                  (Level("together"), Level("spread", {"mean_interarrival_s": 60.0}))),
        Dimension("pattern", BEAMER.dimension("pattern").why,
                  (Level("ring"), Level("mixed", {"patterns": ["ps", "ring"]}))),
    ),
    variations=(),
    readings=BEAMER.readings[:1],
    baselines=BEAMER.baselines,
    metrics=BEAMER.metrics,
    context=BEAMER.context,
)  # fmt: skip

# JPAS at the testbed's size: its map's workload (4 tasks of 4 configurations on 13 hosts,
# each trained to the end, PS and ring) with 1 iteration first instead of 10, so every
# configuration trains 9 iterations instead of 90 and a job lasts about a tenth as long (a
# testbed run 3-7 minutes instead of 30-55); the arrival gaps shrink with the jobs (60 s -> 6 s,
# 400 s -> 40 s: the same share of a job).
JPAS_TESTBED = ClaimMap(
    key="jpas-testbed",
    name="JPAS at the testbed's size",
    paper=JPAS.paper,
    statement=JPAS.statement,
    kind="network-hpo",
    base={**JPAS_BASE, "min_iterations": 1, "mean_interarrival_s": 6.0},
    grid=(
        Dimension("arrivals", JPAS.dimension("arrivals").why.replace("60 s", "6 s").replace(
                      "400 s", "40 s"),
                  (Level("6s"), Level("together", {"mean_interarrival_s": 0.0}),
                   Level("40s", {"mean_interarrival_s": 40.0}))),
        Dimension("models", JPAS.dimension("models").why,
                  (Level("zoo"), Level("one", {"models": ["resnet50"]}))),
    ),
    variations=(),
    readings=JPAS.readings[:1],
    baselines=JPAS.baselines,
    metrics=JPAS.metrics,
    context=JPAS.context,
)  # fmt: skip

CLAIMS: dict[str, ClaimMap] = {c.key: c for c in (BEAMER, JPAS, HERMES, VARYS)}
# the testbed-size maps, by the claim they confirm
TESTBED_MAPS: dict[str, ClaimMap] = {"beamer": BEAMER_TESTBED, "jpas": JPAS_TESTBED}
# every map by its key (a sweep point names its map)
MAPS: dict[str, ClaimMap] = {**CLAIMS, **{m.key: m for m in TESTBED_MAPS.values()}}
