"""Policies of one's own: ``package.module:Class`` and entry points, wherever a policy name is
accepted (the simulator, the sweeps, the Optuna driver, the testbed, the controller), and the
examples in ``examples/``; the REST API switches only among what was loaded at start."""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import controller.policies as policies
import workloads.gpu as gpu
from controller import plugins
from controller.api import RestApi, openapi_document
from controller.engine import Engine
from controller.model import ClusterState, Coflow, Flow
from controller.policies import POLICIES, make_policy, policy_class, policy_label
from controller.registry import Registry
from workloads.gpu import GpuJob, make_gpu_policy, run_time_sharing

ROOT = Path(__file__).resolve().parents[2]
SMALLEST = "examples.smallest_first:SmallestFirst"
SHORTEST = "examples.shortest_remaining:ShortestRemaining"
HOSTS = {"h1": "10.0.0.1", "h2": "10.0.0.2", "h3": "10.0.0.3"}


@pytest.fixture(autouse=True)
def nothing_loaded(monkeypatch):
    """Every test starts with no policy of outside code loaded in this process (the loaded
    ones are kept per process: a test must not see another's)."""
    monkeypatch.setattr(policies, "_LOADED", {})
    monkeypatch.setattr(gpu, "_LOADED", {})
    monkeypatch.setattr(plugins, "_ROOTS", [])


def write_module(folder: Path, name: str, source: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    sys.modules.pop(name, None)  # (a module of that name from another test's folder)


def run(*argv: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)  # fmt: skip


def state(*coflows: tuple[int, float, float]) -> ClusterState:
    """Coflows ``(id, arrival_s, bytes)``, one flow each, h1 -> h2."""
    return ClusterState.build(
        Coflow(cid, [Flow("h1", "h2", size)], arrival_s=at) for cid, at, size in coflows
    )


# ---- the examples ------------------------------------------------------------------------------


def test_the_example_network_policy_orders_by_bytes_left_ties_by_arrival():
    policy = make_policy(SMALLEST)
    assert type(policy).name == "smallest-first" and policy_label(SMALLEST) == "smallest-first"
    ranks = policy.schedule(state((1, 0.0, 100.0), (2, 1.0, 10.0), (3, 2.0, 10.0))).ranks
    assert ranks == ((2,), (3,), (1,))
    # its declared option is checked as a built-in's are, and shares ranks
    bucketed = make_policy(SMALLEST, bucket_bytes=50)
    assert bucketed.schedule(state((1, 0.0, 100.0), (2, 1.0, 10.0), (3, 2.0, 20.0))).ranks == (
        (2, 3),
        (1,),
    )
    with pytest.raises(ValueError, match="option bucket_bytes must be a number in"):
        make_policy(SMALLEST, bucket_bytes=-1)
    with pytest.raises(ValueError, match="has no option 'use_rates'"):
        make_policy(SMALLEST, use_rates=True)


def test_each_example_says_which_interface_it_implements():
    import examples.shortest_remaining
    import examples.smallest_first

    assert "controller.policies.Policy" in examples.smallest_first.__doc__
    assert "schedule(state) -> Schedule" in examples.smallest_first.__doc__
    assert "workloads.gpu.GpuPolicy" in examples.shortest_remaining.__doc__
    assert "rank(jobs, quantum_s) -> jobs" in examples.shortest_remaining.__doc__


def test_the_examples_are_not_in_the_wheel():
    """``examples`` is importable from the checkout; the wheel leaves it out (a top-level
    ``examples`` package in site-packages would clash with any other distribution's)."""
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "examples" not in packages["packages"]
    assert (ROOT / "examples" / "__init__.py").is_file()


def test_the_example_gpu_policy_runs_the_job_with_fewest_iterations_left_first():
    def jobs():
        return [GpuJob(i, 1, 0.0, iterations, 1.0) for i, iterations in enumerate((30, 10, 20))]

    mine, fifo = jobs(), jobs()
    run_time_sharing(mine, 1, make_gpu_policy(SHORTEST), quantum_s=5.0, resume_cost_s=0.0)
    run_time_sharing(fifo, 1, make_gpu_policy("fifo"), quantum_s=5.0, resume_cost_s=0.0)
    assert [j.finish_s for j in mine] == pytest.approx([60.0, 10.0, 30.0])
    assert [j.finish_s for j in fifo] == pytest.approx([30.0, 40.0, 60.0])


@pytest.mark.parametrize("name", sorted(gpu.GPU_POLICIES))
def test_the_built_in_gpu_policies_ignore_the_iterations_the_drivers_now_give(name, monkeypatch):
    """The HPO drivers give each GpuJob its stage's iterations (the example ranks by those
    left); a built-in's runs are what they were with none given."""
    from simulator.__main__ import hpo_summary
    from simulator.engine import Fabric, Simulator
    from simulator.hpo import HpoDriver
    from workloads import hpo_core
    from workloads.hpo import generate

    def summary() -> dict:
        sim = Simulator(Fabric(6, 1e9), make_policy("beamer"))
        manager = gpu.GpuManager(make_gpu_policy(name), 6, 1, 2.0, 0.1)
        tasks = generate(6, 2, seed=5, configs_per_task=6, min_iterations=4, workers=2)
        driver = HpoDriver(sim, tasks, gpus=manager)
        sim.run()
        return {**hpo_summary(driver), "stages": driver.stage_rows()}

    now = summary()
    monkeypatch.setattr(
        hpo_core, "GpuJob", lambda job_id, gpus, arrival_s, iterations, **kw: GpuJob(
            job_id, gpus, arrival_s, **kw)
    )  # fmt: skip
    assert now == summary()


# ---- the command lines -------------------------------------------------------------------------


def test_the_simulator_runs_the_examples_end_to_end(tmp_path):
    out = tmp_path / "out"
    done = run("-m", "simulator", "hpo", "--hosts", "6", "--tasks", "2", "--configs", "3",
               "--policy", SMALLEST, "fair", "--gpu-policy", "none", SHORTEST,
               "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    labels = ["smallest-first", "smallest-first+shortest-remaining", "fair",
              "fair+shortest-remaining"]  # fmt: skip
    printed = [line.split()[0] for line in done.stdout.splitlines()[1:-1]]
    assert printed == labels
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["policies"]) == set(labels)
    mine = summary["policies"]["smallest-first+shortest-remaining"]
    assert (mine["network_policy"], mine["gpu_policy"]) == (SMALLEST, SHORTEST)
    assert mine["gpu"]["gpu_utilisation"] > 0
    assert (out / "coflows-smallest-first.csv").stat().st_size > 0
    # (the trace subcommand too, and a run's summary says how to name the policy again)
    trace = tmp_path / "trace.txt"
    trace.write_text("4 3\n1 0 1 0 1 1:1\n2 10 1 2 1 3:0.5\n3 20 2 0 1 1 2:2\n")
    done = run("-m", "simulator", "trace", str(trace), "--policy", SMALLEST, "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policies"]["smallest-first"]["policy"] == SMALLEST


def test_a_sweep_runs_the_example_policy(tmp_path):
    trace = tmp_path / "trace.txt"
    trace.write_text("4 3\n1 0 1 0 1 1:1\n2 10 1 2 1 3:0.5\n3 20 2 0 1 1 2:2\n")
    out = tmp_path / "sweep"
    done = run("-m", "experiments.sim_experiments", "--sequential", "--hosts", "6", "--loads",
               "0.5", "--seeds", "1", "--policy", "fair", SMALLEST, "--trace", str(trace),
               "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out / "hpo.csv", newline="") as f:
        rows = {row["policy"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"fair", SMALLEST}  # (as given: what a resumed point loads again)
    assert float(rows[SMALLEST]["avg_sct_s"]) > 0
    with open(out / "hpo-summary.csv", newline="") as f:
        summary = {row["policy"]: row for row in csv.DictReader(f)}
    assert float(summary[SMALLEST]["avg_sct_s_vs_fair"]) > 0
    with open(out / "trace.csv", newline="") as f:
        assert {row["policy"] for row in csv.DictReader(f)} == {"fair", SMALLEST}


def test_the_gpu_sweep_takes_gpu_policies_and_pairs_of_ones_own(tmp_path, monkeypatch):
    from experiments import gpu_experiments

    class Parsed(Exception):
        pass

    def keep(args):
        raise Parsed(args)

    monkeypatch.setattr(gpu_experiments, "experiments", keep)
    argv = ["--gpu-policy", "fifo", SHORTEST, "--pairs", f"beamer+{SHORTEST}"]
    with pytest.raises(Parsed) as parsed:
        gpu_experiments.main([*argv, "--out", str(tmp_path)])
    args = parsed.value.args[0]
    assert args.gpu_policy == ["fifo", SHORTEST]
    assert args.pairs == [("fair", "fifo"), ("beamer", SHORTEST)]  # the baseline first
    with pytest.raises(Parsed) as parsed:
        gpu_experiments.main(["--out", str(tmp_path)])
    assert parsed.value.args[0].pairs == gpu_experiments.PAIRS  # (the default, as it was)


def test_the_gpu_sweep_points_run_the_examples():
    from experiments.gpu_experiments import run_point

    settings = {"configs_alone": 4, "gpus_alone": 2, "good_fraction": 0.5, "gpus_per_host": 1,
                "quantum": 5.0, "resume_cost": 0.2, "tasks": 1, "yahpo": None}  # fmt: skip
    row = run_point({"part": "compute", "search": "full", "hosts": 0, "seed": 1,
                     "network": "-", "gpu": SHORTEST, "settings": settings})  # fmt: skip
    assert row["gpu"] == SHORTEST and row["hpo_completion_s"] > 0
    row = run_point({"part": "pairs", "search": "halving", "hosts": 6, "seed": 1,
                     "network": SMALLEST, "gpu": SHORTEST, "settings": settings})  # fmt: skip
    assert row["network"] == SMALLEST and row["avg_sct_s"] > 0


def test_the_optuna_driver_and_the_testbed_take_the_examples(tmp_path):
    from experiments import optuna_hpo, run_testbed
    from simulator.__main__ import run_label

    args = optuna_hpo.build_parser().parse_args(["--policy", SMALLEST, "--gpu-policy", SHORTEST])
    assert (args.policy, args.gpu_policy) == ([SMALLEST], [SHORTEST])
    argv = ["--policy", SMALLEST, "fair", "--out", str(tmp_path)]  # (--out is made at once)
    args = run_testbed.build_parser().parse_args(argv)
    assert args.policy == [SMALLEST, "fair"]
    assert run_label(SMALLEST, SHORTEST) == "smallest-first+shortest-remaining"
    assert run_label("beamer", "hermes") == "beamer+hermes" and run_label("fair") == "fair"


def test_the_optuna_driver_runs_the_example(tmp_path):
    out = tmp_path / "optuna"
    done = run("-m", "experiments.optuna_hpo", "--trials", "3", "--parallel", "3", "--hosts",
               "6", "--min-iterations", "2", "--policy", SMALLEST, "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "seed-1" / "stages-smallest-first.csv").stat().st_size > 0


def test_the_testbed_starts_its_controller_with_the_policy_and_where_to_find_it(
    tmp_path, monkeypatch
):
    """``run_testbed`` starts ``python -m controller --policy NAME`` in the checkout: a module
    found elsewhere (here, in the working directory) is put on the child's ``PYTHONPATH``."""
    from workloads import launcher

    write_module(tmp_path, "mine_for_testbed", """
        from controller.policies import Fair

        class Mine(Fair):
            name = "mine"
    """)  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert policy_label("mine_for_testbed:Mine") == "mine"
    started = {}

    class Popen:
        def __init__(self, argv, **kwargs):
            started.update(argv=argv, **kwargs)

    monkeypatch.setattr(launcher.subprocess, "Popen", Popen)
    monkeypatch.setattr(launcher.ControllerClient, "wait_ready", lambda self, timeout_s: None)
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    ctl = launcher.ControllerProcess(tmp_path / "c.sqlite", None, 6653, "--policy",
                                     "mine_for_testbed:Mine")  # fmt: skip
    ctl.start()
    assert started["argv"][-2:] == ["--policy", "mine_for_testbed:Mine"]
    assert started["env"]["PYTHONPATH"].split(":") == [str(tmp_path.resolve()), "/somewhere"]


# ---- entry points ------------------------------------------------------------------------------


def installed_plugin(site: Path) -> Path:
    """A distribution in ``site`` offering the examples under entry points (as ``pip install``
    of a plugin with ``[project.entry-points."hpo_scheduling.network_policies"]`` leaves it)."""
    info = site / "hpo_plugin_example-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hpo-plugin-example\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(
        f"[hpo_scheduling.network_policies]\nsmallest = {SMALLEST}\n"
        "broken = examples.smallest_first\n\n"
        f"[hpo_scheduling.gpu_policies]\nshortest = {SHORTEST}\n"
    )
    return site


def test_entry_points_name_policies(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(installed_plugin(tmp_path / "site")))
    assert policy_class("smallest").name == "smallest-first"
    assert type(make_gpu_policy("shortest")).name == "shortest-remaining"
    with pytest.raises(ValueError, match=r"installed broken, smallest, or a class of your own"):
        policy_class("nope")
    with pytest.raises(
        ValueError,
        match=r"'broken' \(entry point broken = examples.smallest_fi"
        r"rst of hpo_scheduling.network_policies\): names a mod",
    ):
        policy_class("broken")  # fmt: skip


def test_the_simulator_takes_an_entry_points_name(tmp_path):
    site = installed_plugin(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = run("-m", "simulator", "hpo", "--hosts", "6", "--tasks", "1", "--configs", "3",
               "--policy", "smallest", "--gpu-policy", "shortest", env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "smallest-first+shortest-remaining" in done.stdout


# ---- what a bad name gets: one line ------------------------------------------------------------


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    """Modules of one's own in the working directory, which is not on the path (as for a
    console script such as ``hpo-sim``)."""
    write_module(tmp_path, "user_policies", """
        from controller.policies import Fair, Policy
        from workloads.gpu import GpuPolicy

        class Nameless(Policy):
            pass

        class Spaced(Fair):
            name = "my policy"

        class Shadow(Fair):
            name = "beamer"

        class Gpu(GpuPolicy):
            name = "a-gpu-one"

        def function():
            pass
    """)  # fmt: skip
    write_module(tmp_path, "user_broken", "import math\nraise RuntimeError('no GPU\\nfound')\n")
    write_module(tmp_path, "user_needs", "import a_package_nobody_has\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    return tmp_path


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("no_such_module:Policy",
         "policy 'no_such_module:Policy': no module named 'no_such_module' on the Python path "
         "or in the working directory"),
        ("examples.no_such:X", "no module named 'examples.no_such'"),
        ("user_needs:X",
         "policy 'user_needs:X': importing user_needs failed: No module named "
         "'a_package_nobody_has'"),
        ("user_broken:X",
         "policy 'user_broken:X': importing user_broken failed: RuntimeError: no GPU found "
         "(python -c 'import user_broken' shows where)"),
        ("user_policies:Missing", "policy 'user_policies:Missing': module user_policies has no "
                                  "Missing"),
        ("user_policies:function",
         "user_policies.function is not a subclass of controller.policies.Policy"),
        ("user_policies:Gpu", "user_policies.Gpu is not a subclass of controller.policies.Policy"),
        ("user_policies:Nameless",
         "user_policies.Nameless has no name (set the class attribute name)"),
        ("user_policies:Spaced", "name 'my policy' must be letters, digits, '.', '_' or '-'"),
        ("user_policies:Shadow",
         "user_policies.Shadow's name 'beamer' is a built-in policy's; give it another"),
        ("user_policies.Spaced",
         "unknown policy 'user_policies.Spaced'; choose from beamer, fair, fifo-lm, jpas, "
         "sincronia, varys; to load a class write package.module:Class, e.g. "
         "user_policies:Spaced"),
        ("user_policies",
         "choose from beamer, fair, fifo-lm, jpas, sincronia, varys, or a class of your own as "
         "package.module:Class"),
        ("user_policies:", "policy 'user_policies:': expected package.module:Class"),
        ("a-b:C", "policy 'a-b:C': expected package.module:Class"),
        ("sjf", "unknown policy 'sjf'; choose from beamer, fair, fifo-lm, jpas, sincronia, "
                "varys, or a class of your own as package.module:Class"),
    ],
)  # fmt: skip
def test_a_bad_policy_is_one_line(user_modules, name, words):
    with pytest.raises(ValueError) as refused:
        policy_class(name)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_bad_gpu_policy_is_one_line(user_modules):
    assert make_gpu_policy("user_policies:Gpu").name == "a-gpu-one"
    for name, words in (
        ("user_policies:Spaced", "user_policies.Spaced is not a subclass of workloads.gpu.Gpu"),
        ("lifo", "unknown GPU policy 'lifo'; known: fifo, hermes, rr, slaq, or a class of your"),
        ("no_such_module:G", "GPU policy 'no_such_module:G': no module named 'no_such_module'"),
    ):
        with pytest.raises(ValueError, match="^[^\n]*$") as refused:
            make_gpu_policy(name)
        assert words in str(refused.value)


def test_a_module_in_the_working_directory_is_found_without_it_on_the_path(user_modules):
    write_module(user_modules, "user_good", """
        from controller.policies import Fair

        class Good(Fair):
            name = "good"
    """)  # fmt: skip
    assert policy_label("user_good:Good") == "good"
    assert plugins.import_roots() == [str(user_modules.resolve())]
    assert plugins.child_pythonpath(None) == str(user_modules.resolve())


@pytest.mark.parametrize(
    ("module", "argv", "words"),
    [
        ("simulator.__main__", ["hpo", "--policy", "no_such_module:P"],
         "argument --policy: policy 'no_such_module:P': no module named 'no_such_module'"),
        ("simulator.__main__", ["hpo", "--policy", "sjf"],
         "argument --policy: unknown policy 'sjf'; choose from beamer, fair, fifo-lm, jpas, "
         "sincronia, varys, or a class of your own as package.module:Class"),
        ("simulator.__main__", ["hpo", "--gpu-policy", "user_policies:Spaced"],
         "argument --gpu-policy: GPU policy 'user_policies:Spaced': user_policies.Spaced is not "
         "a subclass of workloads.gpu.GpuPolicy"),
        ("experiments.sim_experiments", ["--policy", "user_policies:Nameless"],
         "argument --policy: policy 'user_policies:Nameless': user_policies.Nameless has no name"),
        ("experiments.gpu_experiments", ["--pairs", "fair"],
         "argument --pairs: expected NETWORK+GPU (e.g. beamer+hermes), got 'fair'"),
        ("experiments.gpu_experiments", ["--pairs", "fair+lifo"],
         "argument --pairs: unknown GPU policy 'lifo'"),
        ("experiments.optuna_hpo", ["--policy", "user_policies.Spaced"],
         "e.g. user_policies:Spaced"),
        ("experiments.run_testbed", ["--policy", "user_policies:Shadow"], "is a built-in"),
        ("controller.__main__", ["--policy", "user_broken:X"],
         "argument --policy: policy 'user_broken:X': importing user_broken failed"),
        ("controller.__main__", ["--load-policy", "user_policies:function"],
         "argument --load-policy: policy 'user_policies:function': user_policies.function is "
         "not a subclass"),
    ],
)  # fmt: skip
def test_every_command_refuses_a_bad_policy_in_one_line(user_modules, capsys, module, argv, words):
    import importlib

    command = importlib.import_module(module)
    with pytest.raises(SystemExit) as ended:
        command.main(argv)
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert words in err.splitlines()[-1], err
    assert "Traceback" not in err


def test_the_built_ins_keep_their_names_and_the_simulator_its_labels():
    assert policy_label("beamer") == "beamer" and policy_class("fair") is POLICIES["fair"]
    assert make_gpu_policy("hermes").name == "hermes"
    assert policies._LOADED == {} and gpu._LOADED == {}  # (a built-in loads nothing)


# ---- the controller ----------------------------------------------------------------------------


def call(api: RestApi, method: str, path: str, body=None) -> tuple[int, object]:
    raw = json.dumps(body).encode() if body is not None else b""
    return api.handle(method, path, raw, {"Content-Type": "application/json"})


def test_the_controller_runs_a_policy_loaded_at_start_with_its_options():
    engine = Engine(Registry(":memory:", hosts=HOSTS), SMALLEST, {"bucket_bytes": 1e6})
    api = RestApi(engine)
    status, body = call(api, "GET", "/api/policy")
    assert status == 200 and body["name"] == SMALLEST and body["options"] == {"bucket_bytes": 1e6}
    assert body["available"] == sorted([*POLICIES, SMALLEST])
    assert body["option_specs"][SMALLEST]["bucket_bytes"]["nullable"] is True
    assert call(api, "POST", "/api/coflows", {"coflow_id": 1, "flows": [
        {"src": "h1", "dst": "h2", "bytes": 5e6}]})[0] == 201  # fmt: skip
    assert call(api, "POST", "/api/coflows", {"coflow_id": 2, "flows": [
        {"src": "h3", "dst": "h2", "bytes": 1e5}]})[0] == 201  # fmt: skip
    engine.reorder()
    order = call(api, "GET", "/api/order")[1]["order"]
    assert [entry["coflow_id"] for entry in order] == [2, 1]  # fewest bytes first
    # switching away and back, with options checked by its declaration
    assert call(api, "PUT", "/api/policy", {"name": "fair"})[0] == 200
    status, body = call(
        api, "PUT", "/api/policy", {"name": SMALLEST, "options": {"bucket_bytes": 0}}
    )
    assert status == 400 and body["error"]["field"] == "options"
    assert "bucket_bytes must be a number in (0, 1e+18] or null, got 0" in body["error"]["message"]
    status, body = call(api, "PUT", "/api/policy", {"name": SMALLEST})
    assert status == 200 and body["name"] == SMALLEST
    assert engine.registry.settings["policy"] == {"name": SMALLEST, "options": {}}
    # the served document lets a client name it
    schemas = call(api, "GET", "/api/openapi.json")[1]["components"]["schemas"]
    assert SMALLEST in schemas["PolicyChoice"]["properties"]["name"]["enum"]
    assert "bucket_bytes" in schemas["PolicyOptions"]["properties"]


def test_rest_never_imports_a_policy_not_loaded_at_start(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    write_module(tmp_path, "rest_side_effect", f"""
        from pathlib import Path
        Path({str(marker)!r}).write_text("imported")
        from controller.policies import Fair

        class Evil(Fair):
            name = "evil"
    """)  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    engine = Engine(Registry(":memory:", hosts=HOSTS), "beamer")
    api = RestApi(engine)
    for name in ("rest_side_effect:Evil", SMALLEST):
        status, body = call(api, "PUT", "/api/policy", {"name": name})
        assert status == 400 and body["error"]["field"] == "name"
        assert body["error"]["message"] == (
            f"name: policy {name!r} was not loaded at start, and requests import no code: "
            f"start the controller with --policy {name} (or --load-policy {name}) to offer it; "
            "choose from beamer, fair, fifo-lm, jpas, sincronia, varys"
        )
    assert not marker.exists() and "rest_side_effect" not in sys.modules
    assert engine.policy_name == "beamer" and "policy" not in engine.registry.settings
    # what the built-ins got before, they get now
    status, body = call(api, "PUT", "/api/policy", {"name": "sjf"})
    assert body["error"]["message"] == (
        "name: unknown policy 'sjf'; choose from beamer, fair, fifo-lm, jpas, sincronia, varys"
    )
    assert call(api, "GET", "/api/policy")[1]["available"] == sorted(POLICIES)
    assert call(api, "GET", "/api/openapi.json")[1] is openapi_document()  # (as it is)


def test_load_policy_offers_more_policies_to_rest():
    engine = Engine(Registry(":memory:", hosts=HOSTS), "beamer", offered_policies=[SMALLEST])
    api = RestApi(engine)
    assert engine.policy_name == "beamer"
    status, body = call(
        api, "PUT", "/api/policy", {"name": SMALLEST, "options": {"bucket_bytes": 2}}
    )
    assert status == 200 and body["options"] == {"bucket_bytes": 2}


def test_a_saved_policy_of_ones_own_is_used_only_if_loaded_at_start(tmp_path, caplog):
    db = str(tmp_path / "ctl.sqlite")
    first = Registry(db, hosts=HOSTS)
    Engine(first, SMALLEST).set_policy(SMALLEST, {"bucket_bytes": 3})
    first.close()
    policies._LOADED.clear()  # a new process: nothing loaded yet
    # the registry opens (nothing imported to check it) ...
    registry = Registry(db, hosts=HOSTS)
    assert registry.settings["policy"] == {"name": SMALLEST, "options": {"bucket_bytes": 3}}
    assert policies._LOADED == {}
    # ... and the engine ignores the saved policy unless the command line loaded it
    assert Engine(registry, "fair").policy_name == "fair"
    assert "ignoring the policy saved in the database" in caplog.text
    assert "was not loaded at start" in caplog.text
    engine = Engine(registry, "fair", offered_policies=[SMALLEST])
    assert engine.policy_name == SMALLEST and engine.policy.bucket_bytes == 3
    registry.close()


def test_a_saved_unknown_name_is_still_refused(tmp_path):
    """A misspelt built-in is not taken for a policy of one's own: no colon, no entry point."""
    registry = Registry(":memory:")
    with pytest.raises(Exception, match="name: unknown policy 'sjf'; choose from beamer"):
        registry.set_setting("policy", {"name": "sjf"})
    registry.set_setting("policy", {"name": "someone:Else", "options": {"any": 1}})


def test_the_controller_command_line_loads_the_policy_and_types_its_options(user_modules):
    from controller.__main__ import parse_args

    write_module(user_modules, "user_more", """
        from controller.policies import Fair

        class More(Fair):
            name = "more"
    """)  # fmt: skip
    args = parse_args(["--policy", SMALLEST, "--policy-option", "bucket_bytes=5",
                       "--load-policy", "user_more:More"])  # fmt: skip
    assert args.policy == SMALLEST and args.options == {"bucket_bytes": 5.0}
    assert args.load_policy == ["user_more:More"]
    assert isinstance(parse_args([]).policy, str) and parse_args([]).load_policy == []


def test_the_argument_types_return_what_was_typed():
    from cli.argtypes import named, policy_name
    from workloads.gpu import gpu_policy_class

    gpu_policy_name = named(gpu_policy_class, also=("none",))

    assert policy_name(SMALLEST) == SMALLEST and policy_name("beamer") == "beamer"
    assert gpu_policy_name("none") == "none" and gpu_policy_name(SHORTEST) == SHORTEST
    with pytest.raises(argparse.ArgumentTypeError, match="unknown GPU policy 'x'"):
        gpu_policy_name("x")
