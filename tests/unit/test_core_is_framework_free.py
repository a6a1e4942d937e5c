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


def module_name(path, root) -> str:
    """The dotted module name of the file ``path`` under ``root`` (a package: its ``__init__``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the source of module ``name`` imports, at any depth (an
    import inside a function counts): ``import a.b`` names ``a.b``, ``from a import b`` the
    module ``a.b`` if there is one, else ``a``; relative imports count from ``name``'s
    package."""
    import ast

    package = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{module}.{alias.name}" for alias in node.names] + [module]
            targets = [t for t in targets[:-1] if t in modules] or targets[-1:]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            known = next((".".join(parts[:k]) for k in range(len(parts), 0, -1)
                          if ".".join(parts[:k]) in modules), None)  # fmt: skip
            if known is not None and known != name:
                found.add(known)
    return found


def import_graph(root) -> dict[str, set[str]]:
    """Every module of the repository under ``root`` -> the repository modules it imports."""
    paths = [p for p in sorted(root.rglob("*.py"))
             if not any(part.startswith(".") for part in p.relative_to(root).parts)]  # fmt: skip
    names = {module_name(p, root): p for p in paths}
    modules = set(names)
    return {name: imported_modules(path.read_text(), name, path.name == "__init__.py", modules)
            for name, path in names.items()}  # fmt: skip


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle, as a path that ends where it starts, through every group of modules that
    import each other (Tarjan's strongly connected components, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                on_stack.add(target)
                work.append((target, iter(sorted(graph.get(target, ())))))
            elif target in on_stack:
                low[node] = min(low[node], index[target])
    return [cycle_through(group, graph) for group in groups]


def cycle_through(group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest cycle from the group's first module back to it, inside the group."""
    first = min(group)
    paths = {first: [first]}
    frontier = [first]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & group):
                if target == first:
                    return paths[node] + [first]
                if target not in paths:
                    paths[target] = paths[node] + [target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {first}")


def test_no_module_of_the_repository_imports_itself_round_a_circle():
    """A circle of imports works only in some orders of first import (and hides behind an
    import inside a function): every module's imports, at any depth, form no cycle."""
    from pathlib import Path

    cycles = import_cycles(import_graph(Path(__file__).resolve().parents[2]))
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_circle_hidden_in_a_function():
    """The check can fail: the circle experiments/calibrate.py and run_testbed.py once made,
    run_testbed importing calibrate inside a function."""
    modules = {"experiments", "experiments.calibrate", "experiments.run_testbed", "cli.argtypes"}
    calibrate = "from cli.argtypes import program\nfrom experiments import run_testbed\n"
    run_testbed = "def experiment():\n    from experiments import calibrate\n"
    graph = {
        "experiments.calibrate": imported_modules(calibrate, "experiments.calibrate", False,
                                                  modules),
        "experiments.run_testbed": imported_modules(run_testbed, "experiments.run_testbed",
                                                    False, modules),
        "cli.argtypes": set(),
        "experiments": set(),
    }  # fmt: skip
    assert graph["experiments.calibrate"] == {"cli.argtypes", "experiments.run_testbed"}
    assert import_cycles(graph) == [
        ["experiments.calibrate", "experiments.run_testbed", "experiments.calibrate"]
    ]
