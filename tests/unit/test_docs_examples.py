"""The worked examples of the docs, run: docs/extending.md, docs/architecture.md and
docs/simulator.md.

Each example's code is here between ``# example: NAME`` and ``# end example`` and, the very same
text, in its doc after ``<!-- example: NAME -->``; ``test_every_doc_shows_the_tested_code``
keeps the two the same. The REST calls of the README and docs/controller.md are sent to the API
in-process.
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from pathlib import Path

import pytest
import yaml

from controller import api as api_module
from controller.api import RestApi
from controller.engine import Engine
from controller.registry import Registry
from controller.schedule import N_LEVELS

ROOT = Path(__file__).parents[2]
THIS = Path(__file__)
DOCS = {
    "network-policy": "docs/extending.md",
    "network-policy-run": "docs/extending.md",
    "gpu-policy": "docs/extending.md",
    "gpu-policy-run": "docs/extending.md",
    "topology": "docs/extending.md",
    "topology-use": "docs/extending.md",
    "rest-endpoint": "docs/extending.md",
    "rest-endpoint-spec": "docs/extending.md",
    "rest-endpoint-call": "docs/extending.md",
    "core": "docs/architecture.md",
    "optuna-run": "docs/simulator.md",
    "tune-run": "docs/simulator.md",
}
HOSTS = {"h1": "10.0.0.1", "h2": "10.0.0.2", "h3": "10.0.0.3"}


def doc_block(doc: str, name: str) -> str:
    """The fenced block right after ``<!-- example: NAME -->`` in ``doc``."""
    text = (ROOT / doc).read_text()
    after = text.split(f"<!-- example: {name} -->\n", 1)
    assert len(after) == 2, f"{doc} has no example {name}"
    match = re.match(r"```[a-z]*\n(.*?)```", after[1], re.DOTALL)
    assert match, f"{doc}: example {name} is not followed by a fenced block"
    return match.group(1)


def code_of_example(name: str) -> str:
    """The code of this file between ``# example: NAME`` and ``# end example``, dedented."""
    lines = THIS.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == f"# example: {name}")
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "# end example")
    return textwrap.dedent("".join(lines[start + 1 : end]))


def same_code(text: str) -> str:
    """``text`` without its leading and trailing blank lines, and with two blank lines between
    statements read as one (a module puts two before a class, a function body one)."""
    return re.sub(r"\n{3,}", "\n\n", text.strip("\n"))


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_doc_shows_the_tested_code(name):
    if name == "rest-endpoint-spec":
        shown = doc_block(DOCS[name], name)
        assert yaml.safe_load(shown) == yaml.safe_load(LEVELS_SPEC)
        return
    assert same_code(doc_block(DOCS[name], name)) == same_code(code_of_example(name))


# ---- a network policy ---------------------------------------------------------------------------


def test_a_network_policy_runs_in_the_simulator(capsys):
    # example: network-policy
    from typing import ClassVar

    from controller.model import ClusterState
    from controller.policies import OptionSpec, Policy
    from controller.schedule import Schedule

    class SmallestFirst(Policy):
        """Smallest remaining coflow first: fewest bytes left, ties by arrival, then id."""

        name = "smallest-first"
        OPTIONS: ClassVar[dict[str, OptionSpec]] = {
            "by_weight": OptionSpec(bool, False, "divide the bytes left by the coflow's weight"),
        }

        def __init__(self, by_weight: bool = False) -> None:
            self.by_weight = by_weight

        def schedule(self, state: ClusterState) -> Schedule:
            """Every active coflow a rank of its own, fewest bytes left first."""

            def key(coflow):
                left = coflow.remaining_bytes / (coflow.weight if self.by_weight else 1.0)
                return (left, coflow.arrival_s, coflow.coflow_id)

            return Schedule.from_order(c.coflow_id for c in sorted(state.active_coflows(), key=key))

    # end example

    # example: network-policy-run
    from simulator.engine import Fabric, Simulator
    from simulator.hpo import HpoDriver
    from workloads.hpo import generate

    tasks = generate(n_hosts=6, n_tasks=2, seed=1, configs_per_task=3, min_iterations=2)
    sim = Simulator(Fabric(6, 1e9), SmallestFirst())  # 6 hosts at 1 Gbit/s, levels mode
    driver = HpoDriver(sim, tasks)
    sim.run()
    stages = driver.stage_rows()
    print(len(stages), "stages, average SCT", sum(s["sct_s"] for s in stages) / len(stages))
    # end example

    assert "stages, average SCT" in capsys.readouterr().out
    assert driver.core.finished and stages
    assert all(record.finish_s is not None for record in sim.coflows.values())
    assert all(s["sct_s"] >= s["bound_s"] * (1 - 1e-6) for s in stages)

    # the order it gives: the smaller coflow first, and by weight when asked
    from controller.model import Coflow, Flow

    state = ClusterState.build(
        coflows=[
            Coflow(1, [Flow("h1", "h3", 4e6)], weight=4.0),
            Coflow(2, [Flow("h2", "h3", 2e6)]),
        ],
        link_bps=20e6,
    )
    assert SmallestFirst().schedule(state).order == [2, 1]
    assert SmallestFirst(**check_options_of(SmallestFirst, {"by_weight": True})).schedule(
        state
    ).order == [1, 2]


def check_options_of(policy_class, options: dict) -> dict:
    """``options`` checked against ``policy_class.OPTIONS``, as the registry checks a policy's."""
    return {key: policy_class.OPTIONS[key].check(value) for key, value in options.items()}


# ---- a GPU policy -------------------------------------------------------------------------------


def test_a_gpu_policy_shares_the_gpus(capsys):
    # example: gpu-policy
    from workloads.gpu import GpuJob, GpuPolicy

    class LeastAttainedFirst(GpuPolicy):
        """The job that has held its GPUs the shortest time first; preemptive."""

        name = "las"
        preemptive = True

        def rank(self, jobs: list[GpuJob], quantum_s: float) -> list[GpuJob]:
            """Least GPU time held first, ties by arrival, then id."""
            return sorted(jobs, key=lambda job: (job.held_s, job.arrival_s, job.job_id))

    # end example

    # example: gpu-policy-run
    from workloads.curves import LearningCurve
    from workloads.gpu import run_time_sharing

    jobs = [
        GpuJob(job_id=i, gpus=1, arrival_s=0.0, iterations=n, curve=LearningCurve(0.9, n / 3))
        for i, n in enumerate([40, 10, 25, 5])
    ]
    result = run_time_sharing(jobs, n_gpus=2, policy=LeastAttainedFirst(), quantum_s=5.0)
    print(result.makespan_s, result.preemptions, [job.finish_s for job in jobs])
    # end example

    assert capsys.readouterr().out
    assert all(job.finished for job in jobs)
    assert result.preemptions > 0  # it shares: the long jobs give way to those that held less
    # 80 GPU-seconds of work on 2 GPUs: at least 40 s, plus the resumes
    assert 40.0 <= result.makespan_s < 80.0
    # the shortest jobs end first
    assert jobs[3].finish_s < jobs[1].finish_s < jobs[2].finish_s < jobs[0].finish_s

    # the same policy in the simulator's HPO runs, through a GpuManager
    from controller.policies import make_policy
    from simulator.engine import Fabric, Simulator
    from simulator.hpo import HpoDriver
    from workloads.gpu import GpuManager
    from workloads.hpo import generate

    sim = Simulator(Fabric(6, 1e9), make_policy("fair"))
    gpus = GpuManager(LeastAttainedFirst(), 6, 1, 5.0, 0.2)
    driver = HpoDriver(sim, generate(6, 2, seed=1, configs_per_task=3), gpus=gpus)
    sim.run()
    assert driver.core.finished


# ---- a topology ---------------------------------------------------------------------------------


def test_a_topology_gives_the_controller_its_hosts_and_the_simulator_its_fabric(capsys):
    pytest.importorskip("mininet")
    # example: topology
    from controller.cluster import Cluster
    from topologies.testbed import ClusterTopo

    cluster = Cluster.leaf_spine(
        leaves=2, hosts_per_leaf=4, spines=1, link_bps=20e6, oversubscription=2
    )
    topo = ClusterTopo(cluster)  # the Mininet graph: switches s1, s2 and s101, hosts h1..h8
    # end example

    # example: topology-use
    from simulator.engine import Fabric

    hosts = cluster.host_table()  # the controller's --hosts file, as JSON
    print(hosts[0], hosts[-1])
    # the simulator's model of it: leaves of 4 hosts whose uplinks carry 40 Mbit/s
    fabric = Fabric.of(cluster)
    print(cluster.host_ports, cluster.fabric_ports)  # where a run reads its byte counters
    # end example

    assert capsys.readouterr().out
    assert hosts[0] == {
        "name": "h1",
        "ip": "10.0.0.1",
        "mac": "00:00:00:00:00:01",
        "switch": 1,
        "port": 1,
        "bps": 20e6,
    }
    assert [(h["switch"], h["port"]) for h in hosts[4:]] == [(2, p) for p in range(1, 5)]
    assert topo.switches() == ["s1", "s2", "s101"] and topo.port("s1", "s101") == (5, 1)
    assert topo.linkInfo("s2", "s101")["bw"] == 40
    assert list(fabric.capacity()[16:18]) == [40e6, 40e6]  # each rack's uplink
    assert cluster.fabric_ports == ["s1-eth5", "s2-eth5", "s101-eth1", "s101-eth2"]


# ---- a REST endpoint ----------------------------------------------------------------------------


class LevelsApi(RestApi):
    """The API with the example's endpoint (in the repository it would be a method of RestApi)."""

    # example: rest-endpoint
    def get_levels(self, body) -> tuple[int, object]:
        """``GET /api/levels``: how many coflows the current plan puts at each priority level."""
        counts = [0] * N_LEVELS
        for entry in self.engine.order_json()["order"]:
            counts[entry["level"]] += 1
        return 200, {"coflows_per_level": counts}

    # end example


LEVELS_SPEC = """
/api/levels:
  get:
    summary: How many coflows the current plan puts at each priority level
    operationId: get_levels
    responses:
      default: {$ref: "#/components/responses/Error"}
      "200":
        description: Coflows per level, level 0 (the highest) first
        content:
          application/json:
            schema:
              type: object
              properties:
                coflows_per_level: {type: array, items: {type: integer}}
"""


def test_a_rest_endpoint_answers_in_process(monkeypatch, capsys):
    # the route, as the line in ROUTES would add it (the dispatcher compiles ROUTES at import)
    route = ("GET", "/levels", "get_levels")
    monkeypatch.setattr(api_module, "ROUTES", [*api_module.ROUTES, route])
    compiled = (route[0], api_module._compile(route[1]), route[2])
    monkeypatch.setattr(api_module, "_COMPILED", [*api_module._COMPILED, compiled])
    RestApi = LevelsApi  # noqa: N806 (the example's name for the API with its new method)

    # example: rest-endpoint-call
    import json

    from controller.engine import Engine
    from controller.registry import Registry

    engine = Engine(Registry(":memory:", hosts={"h1": "10.0.0.1", "h2": "10.0.0.2"}), "sincronia")
    api = RestApi(engine)
    JSON = {"Content-Type": "application/json"}
    for coflow_id, size in ((1, 4e6), (2, 2e6)):
        body = {"flows": [{"src": "h1", "dst": "h2", "bytes": size}]}
        api.handle("PUT", f"/api/coflows/{coflow_id}", json.dumps(body).encode(), JSON)
    status, levels = api.handle("GET", "/api/levels", b"", JSON)
    print(status, levels)  # 200 {'coflows_per_level': [1, 1, 0, 0, 0, 0, 0, 0]}
    # end example

    shown = doc_block(DOCS["rest-endpoint-call"], "rest-endpoint-call")
    assert capsys.readouterr().out.strip() == shown.rsplit("# ", 1)[1].strip()
    assert (status, levels) == (200, {"coflows_per_level": [1, 1, 0, 0, 0, 0, 0, 0]})
    spec = yaml.safe_load(LEVELS_SPEC)
    assert spec["/api/levels"]["get"]["operationId"] == route[2]


# ---- the scheduling core (docs/architecture.md) -------------------------------------------------


def test_the_core_example_prints_what_its_comments_say(capsys):
    # example: core
    from controller.model import ClusterState, Coflow, Flow
    from controller.policies import make_policy
    from controller.schedule import coflow_levels, dscp_of_level

    state = ClusterState.build(
        coflows=[Coflow(1, [Flow("h1", "h3", 4e6)]), Coflow(2, [Flow("h2", "h3", 2e6)])],
        link_bps=20e6,
    )
    schedule = make_policy("sincronia").schedule(state)  # ranks of coflow ids, optional rates
    levels = coflow_levels(schedule)  # {2: 0, 1: 1}: first 7 ranks own a level
    print(schedule.order, {c: dscp_of_level(level) for c, level in levels.items()})
    # end example

    assert levels == {2: 0, 1: 1}
    assert capsys.readouterr().out.strip() == "[2, 1] {2: 56, 1: 48}"


# ---- your Optuna study on the cluster (docs/simulator.md) ----------------------------------------


def test_your_optuna_study_runs_on_the_simulated_cluster(tmp_path, monkeypatch, capsys):
    import optuna

    monkeypatch.chdir(tmp_path)  # the example writes into results/
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # example: optuna-run
    from pathlib import Path

    import optuna

    from experiments.optuna_study import run_study, write_plots
    from workloads.curves import LearningCurve

    def suggest(trial: optuna.Trial, max_iterations: int) -> LearningCurve:
        """Your objective's suggest_* calls, and the learning curve they give (made up here)."""
        rate = trial.suggest_float("learning_rate", 1e-4, 1e-1, log=True)
        layers = trial.suggest_int("layers", 1, 4)
        return LearningCurve(0.9 - 0.05 * abs(layers - 2), max_iterations * rate * 5)

    folder = Path("results/my-study")
    folder.mkdir(parents=True, exist_ok=True)
    run = run_study(
        suggest,
        backend="simulator",  # or "testbed" (root, Open vSwitch; out=folder)
        policy="beamer",  # the network policy; gpu_policy="hermes" time-shares the GPUs
        sampler="tpe",  # or cmaes, qmc, random, gp, or a sampler object
        pruner="hyperband",  # or halving, or a pruner object
        storage=f"sqlite:///{folder}/studies.db",  # or journal:PATH; default in memory
        n_trials=9,
        parallel=3,  # trials training at once
        hosts=6,
        workers=2,  # GPUs (hosts) per trial
        seed=1,
    )
    study = run.studies[0]  # "beamer-study0-seed1" in studies.db
    print(study.best_params, study.best_value, run.best[0]["found_s"])
    print(write_plots(run.studies, folder))  # notes of plots left out: [] here
    # end example

    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == "[]" and "learning_rate" in printed[0]
    assert len(study.trials) == 9 and run.result["hpo_completion_s"]["mean"] > 0
    loaded = optuna.load_study(study_name="beamer-study0-seed1",
                               storage="sqlite:///results/my-study/studies.db")  # fmt: skip
    assert loaded.best_trial.number == study.best_trial.number
    assert (tmp_path / folder / "beamer-study0-seed1-intermediate.png").is_file()


def test_your_tune_study_runs_on_the_simulated_cluster(capsys):
    import ray

    try:
        # example: tune-run
        from ray import tune
        from ray.tune.schedulers import ASHAScheduler

        from experiments.tune_study import run_tune
        from workloads.curves import LearningCurve

        def curve(params: dict, max_iterations: int) -> LearningCurve:
            """The learning curve your hyper-parameters give (made up here)."""
            final = 0.9 - 0.05 * abs(params["layers"] - 2)
            return LearningCurve(final, max_iterations * params["learning_rate"] * 5)

        run = run_tune(
            {"learning_rate": tune.loguniform(1e-4, 1e-1), "layers": tune.randint(1, 5)},
            curve,
            backend="simulator",  # or "testbed" (root, Open vSwitch; out=folder)
            policy="beamer",  # the network policy; gpu_policy="hermes" time-shares the GPUs
            # rungs of 10, 30 and 90 iterations are budgets 1, 3 and 9 (or "asha", "hyperband")
            scheduler=lambda: ASHAScheduler(
                time_attr="budget", max_t=9, grace_period=1, reduction_factor=3
            ),
            searcher="optuna",  # or "random", or a function of the seed returning a Tune searcher
            n_trials=9,
            parallel=3,  # trials training at once
            hosts=6,
            workers=2,  # GPUs (hosts) per trial
            seed=1,
        )
        print(run.best[0]["params"], run.best[0]["value"], run.best[0]["found_s"])
        print(len(run.tasks[0].search.results))  # Tune's own ResultGrid: 9 trials
        # end example
    finally:
        ray.shutdown()

    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == "9" and "learning_rate" in printed[-2]
    states = {row["state"] for row in run.rows["trials"]}
    assert "STOPPED" in states and "COMPLETE" in states  # ASHA stopped some, others finished
    assert run.result["hpo_completion_s"]["mean"] > 0


# ---- the REST calls of the README and docs/controller.md ----------------------------------------

CURL = re.compile(r"^curl (?:-X (?P<method>[A-Z]+) )?\$A(?P<path>/\S*)")


def curl_calls(doc: str) -> list[tuple[str, str, bytes]]:
    """``(method, path, body)`` of every ``curl`` line of ``doc``'s shell blocks using ``$A``."""
    calls = []
    for block in re.findall(r"```sh\n(.*?)```", (ROOT / doc).read_text(), re.DOTALL):
        if "A=http://127.0.0.1:8080/api" not in block:
            continue
        for line in block.splitlines():
            for command in (part.strip() for part in line.split(";")):
                match = CURL.match(command)
                if match is None:
                    continue
                words = shlex.split(command)
                body = words[words.index("-d") + 1].encode() if "-d" in words else b""
                calls.append((match["method"] or "GET", "/api" + match["path"], body))
    return calls


@pytest.mark.parametrize("doc", ["README.md", "docs/controller.md"])
def test_the_documented_curl_calls_are_accepted(doc):
    calls = curl_calls(doc)
    assert len(calls) >= 4, f"{doc}: no curl calls found"
    engine = Engine(Registry(":memory:", hosts=HOSTS), "beamer")
    rest = RestApi(engine)
    for method, path, body in calls:
        json.loads(body or b"null")  # the body is JSON as written
        status, reply = rest.handle(method, path, body, {"Content-Type": "application/json"})
        assert status in (200, 201), (method, path, reply)
