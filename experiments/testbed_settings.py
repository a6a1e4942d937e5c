"""The testbed experiment's settings: the typed value every testbed run reads, and the command
line that makes it.

``hpo-testbed`` (:mod:`experiments.run_testbed`), ``hpo-calibrate``
(:mod:`experiments.calibrate`) and an Optuna study on the testbed
(:mod:`experiments.optuna_study`) share one command line (:func:`testbed_parser`); :func:`parse`
checks it, converts the flags' units (``--bw`` Mbit/s, ``--link-gbps`` Gbit/s) to bit/s and
gives a :class:`TestbedSettings`, which is all that the code below the command line reads.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from cli.argtypes import (
    POLICY_NAMES,
    non_negative,
    output_folder,
    policy_help,
    policy_name,
    positive,
)
from controller.cluster import LEAF_SPINE, ONE_SWITCH, TOPOLOGIES, Cluster
from experiments.testbed_network import network
from netsched_data import BUNDLED
from simulator.calibration import Overheads
from workloads.flags import add_workload_arguments
from workloads.gpu import add_gpu_policy_argument
from workloads.hpo import HpoTask, describe_workload, generate
from workloads.yahpo import LcBench, YahpoError

# the checkout this runs from (the OVS start-up script)
ROOT = Path(__file__).resolve().parents[1]

DEFAULT_POLICIES = ["fair", "fifo-lm", "sincronia", "jpas", "beamer"]
AUTO_RTO_CAP = "auto"
# What one ovs-vswitchd thread of this machine forwards with 12 TCP senders (docs/testbed.md),
# and the switches a packet between two leaves crosses (each crossing is one more pass).
SWITCH_FORWARDING_BPS = 1300e6
FABRIC_CROSSINGS = 3


@dataclass(frozen=True)
class WorkloadSettings:
    """What the seeded HPO workload of every run draws (:func:`workloads.hpo.generate`).

    Attributes:
        tasks: concurrent HPO tasks.
        configs: configurations each task starts with.
        eta: successive halving's reduction factor.
        search: ``halving``, ``asha`` or ``full`` (:data:`workloads.hpo.SEARCHES`).
        min_iterations: iterations of the first stage.
        workers: GPUs (hosts) per job.
        patterns: synchronisation patterns to draw from.
        models: model profiles the tasks draw from.
        interarrival_s: the mean gap of the tasks' Poisson arrivals (0: all at the start).
        surrogate: the YAHPO Gym LCBench surrogate of the learning curves (``None``: the
            parametric ones).
        curves: what the learning curves are called in titles (``None``: the parametric ones).
    """

    tasks: int
    configs: int
    eta: int
    search: str
    min_iterations: int
    workers: int
    patterns: tuple[str, ...]
    models: tuple[str, ...]
    interarrival_s: float
    surrogate: LcBench | None = None
    curves: str | None = None

    def generate(self, hosts: int, seed: int, link_scale: float) -> list[HpoTask]:
        """The workload of ``seed`` on ``hosts`` hosts, its bytes divided by ``link_scale``."""
        return generate(
            hosts,
            self.tasks,
            seed=seed,
            configs_per_task=self.configs,
            eta=self.eta,
            min_iterations=self.min_iterations,
            workers=self.workers,
            patterns=self.patterns,
            models=self.models,
            mean_interarrival_s=self.interarrival_s,
            link_scale=link_scale,
            surrogate=self.surrogate,
            search=self.search,
        )


@dataclass(frozen=True)
class CalibrationRuns:
    """How ``hpo-calibrate`` measures: iterations of its lone job, and how many times it runs."""

    iterations: int
    repeats: int


@dataclass(frozen=True)
class TestbedSettings:
    """Everything a testbed run reads, the command line's flags in bit/s and seconds.

    Attributes:
        cluster: the testbed's network (its links at the emulated rate, ``--bw``).
        modelled_link_bps: the modelled cluster's link rate (``--link-gbps``): every run's
            bytes are divided by :attr:`link_scale`, so that an emulated link keeps the real
            compute/communication ratio.
        workload: what the seeded workload draws.
        seeds: the workload seeds, each run under every policy (pair).
        policies: the network policies, each a run.
        gpu_policies: the GPU time-sharing policies, each run with every network policy.
        gpus_per_host: emulated GPUs per host.
        quantum_s: the GPU time-sharing quantum.
        host_priorities: the hosts' egress serves the levels too (else only the switch does).
        tcp_rto_max_ms: the hosts' cap on TCP's retransmission timeout (``None``: Linux's).
        fail_spine_s: when every link of the first spine goes down in a leaf-spine run
            (``None``: never).
        retries: how many times a failed run is tried again in a fresh testbed.
        timeout_s: seconds a run may take.
        out: the output folder.
        overheads: the testbed's measured overheads the simulator beside every run also
            predicts with (``None``: the raw model only).
        calibrate: measure the overheads first (``hpo-calibrate``) and predict with them.
        calibration_runs: how the overheads are measured.
        resume: keep the runs (and the calibration) already finished in :attr:`out` under the
            same :meth:`run_key`, and run only the others.
    """

    cluster: Cluster
    modelled_link_bps: float
    workload: WorkloadSettings
    seeds: tuple[int, ...]
    policies: tuple[str, ...]
    gpu_policies: tuple[str, ...]
    gpus_per_host: int
    quantum_s: float
    host_priorities: bool
    tcp_rto_max_ms: int | None
    fail_spine_s: float | None
    retries: int
    timeout_s: float
    out: Path
    overheads: Overheads | None
    calibrate: bool
    calibration_runs: CalibrationRuns
    resume: bool = False

    @property
    def link_scale(self) -> float:
        """The modelled link rate over the emulated one: what every run's bytes are divided by."""
        return self.modelled_link_bps / self.cluster.link_bps

    def topology_json(self) -> dict:
        """The run's network, as result.json and summary.json state it."""
        if self.cluster.topology == ONE_SWITCH:
            return self.cluster.to_json()
        return {**self.cluster.to_json(), "fail_spine_s": self.fail_spine_s}


def run_key(settings: TestbedSettings) -> dict:
    """What decides a run's outcome besides its policies and seed, as JSON (``result.json``
    and ``calibration.json`` keep it): a run finished under an equal key is a run of the same
    experiment, which ``--resume`` keeps."""
    w = settings.workload
    key = {
        "topology": settings.topology_json(),
        "modelled_link_bps": settings.modelled_link_bps,
        "workload": {f.name: getattr(w, f.name) for f in fields(w) if f.name != "surrogate"},
        "gpus_per_host": settings.gpus_per_host,
        "quantum_s": settings.quantum_s,
        "host_priorities": settings.host_priorities,
        "tcp_rto_max_ms": settings.tcp_rto_max_ms,
        "calibration_runs": [
            settings.calibration_runs.iterations,
            settings.calibration_runs.repeats,
        ],  # fmt: skip
        "overheads": settings.overheads.to_json() if settings.overheads else None,
    }
    return json.loads(json.dumps(key))  # (tuples as lists: as read back from a file)


def kept(settings: TestbedSettings, path: Path) -> dict | None:
    """The JSON at ``path`` if ``--resume`` keeps it: the file is there, readable, and was
    written under this experiment's :func:`run_key`; else ``None`` (the run is done again)."""
    if not settings.resume:
        return None
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        print(f"{path}: unreadable ({type(exc).__name__}: {exc}); running it again", flush=True)
        return None
    if not isinstance(record, dict) or record.get("run_key") != run_key(settings):
        print(f"{path}: of other settings; running it again", flush=True)
        return None
    return record


def workload(settings: TestbedSettings, seed: int) -> list[HpoTask]:
    """The seeded HPO workload of a run (bytes already divided by the link scale)."""
    return settings.workload.generate(settings.cluster.hosts, seed, settings.link_scale)


def workload_name(settings: TestbedSettings, seed: int) -> str:
    """The seeded HPO workload of a run (:func:`workload`) in a figure's title."""
    w = settings.workload
    return describe_workload(w.configs, w.search, w.patterns, settings.cluster.hosts, w.tasks,
                             seed, w.curves)  # fmt: skip


def forwarding_load_warning(cluster: Cluster) -> str | None:
    """A warning when the leaf-spine's hosts, all sending at line rate across leaves, would
    need more forwarding than this machine's userspace switch has (the links would then no
    longer be the bottleneck); ``None`` when it fits."""
    need_bps = cluster.hosts * cluster.link_bps * FABRIC_CROSSINGS
    if need_bps <= SWITCH_FORWARDING_BPS:
        return None
    return (
        f"{cluster.hosts} hosts x {cluster.link_bps / 1e6:g} Mbit/s crossing up to "
        f"{FABRIC_CROSSINGS} switches need up to {need_bps / 1e6:g} Mbit/s of forwarding, and "
        f"this machine's userspace switch forwards about {SWITCH_FORWARDING_BPS / 1e6:g}: the "
        "switch, not the links, may then limit the run (lower --bw or the hosts; "
        "docs/testbed.md, 'A fabric of switches')"
    )


def testbed_parser(description: str, prog: str) -> argparse.ArgumentParser:
    """The testbed's command line, with the command's own ``description`` and ``prog``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    _policy_flags(parser)
    _network_flags(parser)
    _workload_flags(parser)
    _host_flags(parser)
    _run_flags(parser)
    _calibration_flags(parser)
    parser.add_argument(
        "--out",
        type=output_folder,
        default="results/testbed",
        help="output folder (default: results/testbed)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs (and the calibration) already finished in --out under the same "
        "settings and run only the others",
    )
    return parser


def _policy_flags(parser: argparse.ArgumentParser) -> None:
    """The network and GPU policies each run is made of."""
    parser.add_argument(
        "--policy",
        nargs="+",
        default=DEFAULT_POLICIES,
        type=policy_name,
        metavar="POLICY",
        help=f"network policies, each a run: {policy_help(POLICY_NAMES)} (the controller loads "
        "it too); a run is labelled by its policy's name (default: "
        f"{' '.join(DEFAULT_POLICIES)})",
    )
    add_gpu_policy_argument(parser, ["none"], "GPU time-sharing policies, each run with "
                            "every --policy (default: none)")  # fmt: skip
    parser.add_argument(
        "--gpus-per-host", type=positive(int), default=1, help="emulated GPUs per host (default 1)"
    )
    parser.add_argument(
        "--quantum", type=positive(float), default=5.0, help="time-sharing quantum s (default 5)"
    )


def _network_flags(parser: argparse.ArgumentParser) -> None:
    """The testbed's network: its shape and its links' emulated rate."""
    parser.add_argument(
        "--hosts",
        type=positive(int),
        default=13,
        help="hosts on the one switch (default 13); with --topology leaf-spine it is "
        "--leaves x --hosts-per-leaf",
    )
    parser.add_argument(
        "--topology",
        choices=TOPOLOGIES,
        default="one-switch",
        help="one-switch: the 13-server testbed (default); leaf-spine: --leaves leaf switches "
        "of --hosts-per-leaf hosts, each linked to every one of --spines spines, the controller "
        "routing over them (shortest paths, ECMP per host pair) and marking at the ingress leaf; "
        "the simulator beside it models the same leaves with their uplinks pooled",
    )
    parser.add_argument("--leaves", type=positive(int), default=3, help="leaf switches (3)")
    parser.add_argument("--spines", type=positive(int), default=2, help="spine switches (2)")
    parser.add_argument(
        "--hosts-per-leaf", type=positive(int), default=4, help="hosts under each leaf (4)"
    )
    parser.add_argument(
        "--oversubscription",
        type=positive(float),
        default=1.0,
        help="a leaf's host rate over its uplinks' (default 1: each of the --spines uplinks "
        "runs at hosts-per-leaf x bw / spines)",
    )
    parser.add_argument(
        "--fail-spine",
        type=non_negative(float),
        default=None,
        metavar="SECONDS",
        help="leaf-spine only: this many seconds into every run, every link of the first spine "
        "goes down; the controller reroutes and the run goes on (result.json: spine_failure)",
    )
    parser.add_argument("--bw", type=positive(float), default=20, help="link Mbit/s (default 20)")


def _workload_flags(parser: argparse.ArgumentParser) -> None:
    """The seeded HPO workload every run trains."""
    add_workload_arguments(parser, tasks=2, min_iterations=3, patterns=("ring",),
                           patterns_note="a parameter server keeps its ports at most about "
                           "half busy, see docs/testbed.md")  # fmt: skip
    parser.add_argument(
        "--link-gbps",
        type=positive(float),
        default=1.0,
        help="the modelled cluster's host link rate in Gbit/s, emulated at --bw: bytes are "
        "divided by link-gbps / bw; the simulator's --link-gbps means the same (default: 1)",
    )


def _host_flags(parser: argparse.ArgumentParser) -> None:
    """What the emulated links stand for, and the hosts' priorities and TCP."""
    parser.add_argument(
        "--host-priorities",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve the controller's levels on every host's egress too, as the simulator does "
        "on every port and as Sincronia and Varys enforce them at end hosts (default: on; "
        "--no-host-priorities leaves the hosts' sending links FIFO and only the switch enforces "
        "the levels, see docs/testbed.md)",
    )
    parser.add_argument(
        "--tcp-rto-max-ms",
        type=rto_cap,
        default=AUTO_RTO_CAP,
        metavar="MS|off|auto",
        help=f"cap TCP's retransmission timeout in every host at MS (>= 1000): a flow that a "
        f"higher level starved then resumes within MS of its promotion; 'off' keeps Linux's 120 s "
        f"(default: {network.TCP_RTO_MAX_MS} where the kernel can, Linux 6.15+, else off)",
    )
    parser.add_argument(
        "--retries",
        type=non_negative(int),
        default=1,
        help="try a failed run (or calibration run) again this many times, each in a fresh "
        "testbed; every failed attempt is reported, kept as <run>-failed-<N>/ and listed in "
        "results.json (default: 1)",
    )


def _run_flags(parser: argparse.ArgumentParser) -> None:
    """The runs: their retries, seeds, learning curves and time limit."""
    parser.add_argument(
        "--seeds",
        type=non_negative(int),
        nargs="+",
        default=[1],
        help="workload seeds, each run under every policy (default: 1)",
    )
    parser.add_argument(
        "--yahpo",
        nargs="?",
        const=BUNDLED,
        metavar="DIR",
        help="learning curves from the YAHPO Gym LCBench surrogate in DIR (holding lcbench/; "
        "without DIR, or 'bundled': the one bundled with the package)",
    )
    parser.add_argument("--yahpo-task", default="3945", help="its OpenML task (default 3945)")
    parser.add_argument(
        "--timeout",
        type=positive(float),
        default=900,
        help="seconds per policy before giving up (default 900)",
    )
    parser.add_argument(
        "--calibration",
        type=Path,
        metavar="JSON",
        help="the testbed's measured overheads (hpo-calibrate's calibration.json): the "
        "simulator beside every run then also predicts with them (default: raw model only)",
    )


def _calibration_flags(parser: argparse.ArgumentParser) -> None:
    """The testbed's measured overheads, given or measured first."""
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="first measure the overheads (hpo-calibrate) into <out>/calibration/ and "
        "predict with them",
    )
    parser.add_argument(
        "--calibration-iterations",
        type=positive(int),
        default=20,
        help="iterations of the calibration's lone job (default 20)",
    )
    parser.add_argument(
        "--calibration-repeats",
        type=positive(int),
        default=3,
        help="runs of the calibration's lone job; its goodput is their mean (default 3)",
    )


def rto_cap(text: str) -> int | str | None:
    """An argparse type: ``off`` (None), ``auto`` or a whole number of ms the kernel accepts."""
    if text == "off":
        return None
    if text == AUTO_RTO_CAP:
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of ms or 'off': {text!r}") from None
    if not 1000 <= value <= 120000:
        raise argparse.ArgumentTypeError(f"must be within 1000..120000 ms, got {text}")
    return value


def cluster_of(args: argparse.Namespace) -> Cluster:
    """The network of the command line: the one switch of ``--hosts``, or the leaf-spine
    fabric of ``--topology leaf-spine``; its links at ``--bw`` Mbit/s."""
    link_bps = args.bw * 1e6
    if args.topology == ONE_SWITCH:
        return Cluster.one_switch(args.hosts, link_bps)
    return Cluster.leaf_spine(args.leaves, args.hosts_per_leaf, args.spines, link_bps,
                              args.oversubscription)  # fmt: skip


def settings_of(
    args: argparse.Namespace,
    surrogate: LcBench | None = None,
    overheads: Overheads | None = None,
) -> TestbedSettings:
    """The settings of a parsed command line (checked by :func:`parse`), with the learning
    curves' ``surrogate`` and the measured ``overheads`` if loaded; ``--tcp-rto-max-ms auto``
    is the cap where this kernel has it."""
    tcp_rto_max_ms = args.tcp_rto_max_ms
    if tcp_rto_max_ms == AUTO_RTO_CAP:
        tcp_rto_max_ms = network.TCP_RTO_MAX_MS if network.rto_cap_supported() else None
    workload = WorkloadSettings(
        tasks=args.tasks,
        configs=args.configs,
        eta=args.eta,
        search=args.search,
        min_iterations=args.min_iterations,
        workers=args.workers,
        patterns=tuple(args.patterns),
        models=tuple(args.models),
        interarrival_s=args.interarrival,
        surrogate=surrogate,
        curves=None if args.yahpo is None else f"LCBench task {args.yahpo_task}",
    )
    return TestbedSettings(
        cluster=cluster_of(args),
        modelled_link_bps=args.link_gbps * 1e9,
        workload=workload,
        seeds=tuple(args.seeds),
        policies=tuple(args.policy),
        gpu_policies=tuple(args.gpu_policy),
        gpus_per_host=args.gpus_per_host,
        quantum_s=args.quantum,
        host_priorities=args.host_priorities,
        tcp_rto_max_ms=tcp_rto_max_ms,
        fail_spine_s=args.fail_spine,
        retries=args.retries,
        timeout_s=args.timeout,
        out=args.out,
        overheads=overheads,
        calibrate=args.calibrate,
        calibration_runs=CalibrationRuns(args.calibration_iterations, args.calibration_repeats),
        resume=args.resume,
    )


def parse(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> TestbedSettings:
    """Parse and check the command line, load the surrogate and the calibration, and make
    sure this runs as root with OVS up; the run's settings."""
    args = parser.parse_args(argv)
    check(parser, args, sys.argv[1:] if argv is None else argv)
    surrogate = overheads = None
    if args.yahpo is not None:
        try:
            surrogate = LcBench(args.yahpo, args.yahpo_task)
        except YahpoError as exc:
            parser.error(str(exc))
    if args.calibration is not None:
        try:
            overheads = Overheads.load(args.calibration)
        except (OSError, ValueError) as exc:
            parser.error(f"--calibration {args.calibration}: {exc}")
    if os.geteuid() != 0:
        parser.error("run as root (Mininet and Open vSwitch need it)")
    subprocess.run(["bash", str(ROOT / "scripts" / "ovs.sh"), "start"], check=True)
    return settings_of(args, surrogate, overheads)


def check(parser: argparse.ArgumentParser, args: argparse.Namespace, given: list[str]) -> None:
    """Refuse flags that contradict each other or this kernel (``parser.error``, status 2);
    warn of a fabric this machine's switch cannot forward at line rate. ``given``: the
    arguments as typed (``--hosts`` is derived with ``--topology leaf-spine``)."""
    try:
        cluster = cluster_of(args)
    except ValueError as exc:  # (a one-switch testbed of one host)
        parser.error(str(exc))
    if cluster.topology == LEAF_SPINE:
        given_hosts = any(a == "--hosts" or a.startswith("--hosts=") for a in given)
        if given_hosts and args.hosts != cluster.hosts:
            parser.error(
                f"--hosts {args.hosts} but --leaves x --hosts-per-leaf is {cluster.hosts} "
                "(leave --hosts out with --topology leaf-spine)"
            )
        if (warning := forwarding_load_warning(cluster)) is not None:
            print(f"warning: {warning}", flush=True)
    elif args.fail_spine is not None:
        parser.error("--fail-spine needs --topology leaf-spine")
    if args.workers > cluster.hosts or args.eta < 2:
        parser.error("--workers must be <= --hosts and --eta >= 2")
    if args.tcp_rto_max_ms == AUTO_RTO_CAP:
        if not network.rto_cap_supported():
            print(
                "note: this kernel cannot cap TCP's retransmission timeout (Linux 6.15+); "
                "starved flows back off up to 120 s (docs/testbed.md, 'TCP under priorities')"
            )
    elif args.tcp_rto_max_ms is not None and not network.rto_cap_supported():
        parser.error(
            "--tcp-rto-max-ms: this kernel cannot cap TCP's timeout (Linux 6.15+); "
            "pass --tcp-rto-max-ms off"
        )
    if args.calibrate and args.calibration is not None:
        parser.error("--calibrate and --calibration exclude each other")
