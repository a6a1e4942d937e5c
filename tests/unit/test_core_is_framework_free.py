"""The scheduling core must import without Ryu, Mininet or eventlet (Faucet's habit)."""

from __future__ import annotations

import subprocess
import sys

CORE = [
    "model",
    "bssi",
    "stage_loads",
    "policies",
    "schedule",
    "bounds",
    "switching",
    "rules",
    "engine",
    "api",
    "timeline",
]


def test_core_imports_with_frameworks_blocked():
    code = (
        "import sys\n"
        "for name in ('ryu', 'mininet', 'eventlet', 'os_ken'):\n"
        "    sys.modules[name] = None  # any import of them raises ImportError\n"
        + "".join(f"import controller.{m}\n" for m in CORE)
        + "from controller.policies import make_policy, POLICIES\n"
        "from controller.model import ClusterState\n"
        "for name in POLICIES: make_policy(name).schedule(ClusterState())\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_controller_imports_nothing_from_the_experiments():
    """``controller/`` is the switch-facing side: the workloads, the simulator, the testbed
    topologies and the scripts build on it, never the other way round."""
    import ast
    from pathlib import Path

    outside = {
        "workloads",
        "simulator",
        "topologies",
        "experiments",
        "scripts",
        "benchmarks",
        "tests",
    }
    found = []
    for path in sorted((Path(__file__).resolve().parents[2] / "controller").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in outside]
    assert found == []


# the packages from the bottom up: each may import its own and the ones before it (a rank
# holds packages that may import each other: the command-line helpers and the controller's own
# command line use each other, the simulator and the testbed stand side by side)
LAYERS = (
    {"netsched_data"},
    {"cli", "controller"},
    {"workloads"},
    {"simulator", "topologies"},
    {"experiments", "benchmarks", "examples"},
)


def imports_of(path) -> list[str]:
    """Every absolute import in ``path``, at any depth (an import inside a function counts)."""
    import ast

    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_the_packages_import_only_downwards():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    rank = {package: i for i, layer in enumerate(LAYERS) for package in layer}
    found = []
    for package in rank:
        for path in sorted((root / package).rglob("*.py")):
            for name in imports_of(path):
                target = name.split(".")[0]
                if target in rank and rank[target] > rank[package]:
                    found.append(f"{path.relative_to(root)}: {name}")
    assert found == []
    # and the check can fail: the layering it guards was broken here once
    assert rank["experiments"] > rank["simulator"] and rank["topologies"] > rank["workloads"]
