"""The compiled kernels' cache directory follows every source of the two packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from controller.bssi import bssi_order
from controller.kernel_cache import (
    PREFIX,
    STALE_S,
    cache_dir,
    package_sources,
    prune,
    use_source_keyed_cache,
)

ROOT = Path(__file__).resolve().parents[2]


def copy_packages(to: Path) -> None:
    for package in ("controller", "simulator"):
        (to / package).mkdir(parents=True)
        for source in (ROOT / package).glob("*.py"):
            shutil.copy(source, to / package / source.name)


def test_an_edit_of_any_source_of_either_package_names_another_directory(tmp_path):
    # a kernel that calls one of another file (Beamer's stage kernel calls BSSI; the simulator
    # runs the controller's kernels) must not keep the old callee: an edit of the callee's
    # file alone, or of a file whose constants a kernel froze, moves every kernel elsewhere
    copy_packages(tmp_path)
    sources = package_sources(tmp_path)
    assert {p.relative_to(tmp_path).as_posix() for p in sources} >= {
        "controller/bssi.py",
        "controller/stage_loads.py",
        "simulator/core.py",
        "simulator/engine.py",
    }
    base = tmp_path / "cache"
    first = cache_dir(sources, tmp_path, base)
    assert first.parent == base and first.name.startswith(PREFIX)
    assert cache_dir(package_sources(tmp_path), tmp_path, base) == first  # unchanged: reused
    seen = {first}
    for edited in ("controller/bssi.py", "controller/schedule.py", "simulator/allocation.py"):
        path = tmp_path / edited
        path.write_text(path.read_text() + "\n# an edit\n")
        again = cache_dir(package_sources(tmp_path), tmp_path, base)
        assert again not in seen, edited
        seen.add(again)
    # the same bytes under another name are another source
    (tmp_path / "simulator" / "bssi.py").write_bytes((tmp_path / "controller/bssi.py").read_bytes())
    assert cache_dir(package_sources(tmp_path), tmp_path, base) not in seen


def test_stale_kernel_directories_are_pruned_and_the_current_one_kept(tmp_path):
    now = time.time()
    keep, fresh, stale, other = (
        tmp_path / f"{PREFIX}current",
        tmp_path / f"{PREFIX}fresh",
        tmp_path / f"{PREFIX}stale",
        tmp_path / "not-kernels",
    )
    for path in (keep, fresh, stale, other):
        path.mkdir()
        (path / "k.nbi").write_bytes(b"x")
    old = now - STALE_S - 60
    for path in (keep, stale, other):
        os.utime(path, (old, old))
    assert prune(tmp_path, keep, now) == [stale]
    assert keep.exists() and fresh.exists() and other.exists() and not stale.exists()


def test_a_process_uses_the_directory_of_its_sources(tmp_path):
    # what numba is told in a fresh process, as the modules with kernels set it on import (the
    # controller's alone, as `python -m controller` runs, or the simulator's)
    expected = cache_dir(package_sources(ROOT), ROOT, tmp_path)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    for imports in ("controller.policies", "simulator.engine"):
        code = f"import numba, {imports}; print(numba.config.CACHE_DIR)"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
            check=True,
        ).stdout.split()  # fmt: skip
        assert out == [str(expected)], imports


WARM_CHECK = """
import importlib, pkgutil, sys
import controller, simulator
from numba.core.registry import CPUDispatcher

kernels = {}
for package in (controller, simulator):
    for info in pkgutil.iter_modules(package.__path__):
        if info.name in ("ryu_app", "__main__"):  # (Ryu's glue and the command line)
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, CPUDispatcher) and obj.__module__ == module.__name__:
                kernels[f"{module.__name__}.{name}"] = obj

def loaded_by(action):
    before = {n: len(k.signatures) for n, k in kernels.items()}
    action()
    return sorted(n for n, k in kernels.items() if len(k.signatures) != before[n])

if sys.argv[1] == "controller":
    # its warm-up, then a reorder under every policy and boolean or choice option, of coflows
    # of jobs in stages and then with a coflow without a job (Beamer's general path)
    from itertools import product
    from controller.engine import Engine
    from controller.policies import POLICIES
    from controller.warm import _tiny_registry, warm_up
    registry = _tiny_registry()

    def reorders():
        for coflow in (None, {"flows": [{"src": "10.0.0.3", "dst": "10.0.0.1", "bytes": 1e5}]}):
            if coflow:
                registry.put("coflows", 9, coflow)
            for name, policy in POLICIES.items():
                listed = {key: (False, True) if spec.kind is bool else spec.choices
                          for key, spec in policy.OPTIONS.items() if spec.kind in (bool, str)}
                for values in product(*listed.values()):
                    options = dict(zip(listed, values))
                    Engine(registry, policy=name, policy_options=options).reorder()

    print("warm-up:", len(loaded_by(warm_up)))
    print("loaded after:", loaded_by(reorders))
else:
    # its warm-up, then HPO runs of every policy in both modes, drawing their schedules
    import runpy
    from simulator.engine import warm_up

    def runs():
        for mode in ("levels", "ideal"):
            sys.argv = ["simulator", "hpo", "--hosts", "6", "--tasks", "1", "--mode", mode,
                        "--out", out, "--schedule"]
            try:
                runpy.run_module("simulator", run_name="__main__")
            except SystemExit:
                pass

    out = sys.argv[2]
    print("warm-up:", len(loaded_by(warm_up)))
    print("loaded after:", loaded_by(runs))
"""


def test_after_the_warm_up_no_run_or_reorder_loads_a_kernel(tmp_path):
    # set-up and every command call the warm-up so that no run or reorder compiles a kernel
    # (or loads it from the disk cache) inside what it measures: in a process started after
    # set-up, after the controller's warm-up its reorders under every policy and option load
    # none, and after the simulator's, HPO runs of every policy in both modes, drawing their
    # schedules, load none
    def python(*args: str) -> list[str]:
        run = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=900)  # fmt: skip
        assert run.returncode == 0, run.stderr
        return run.stdout.splitlines()

    python("-c", "from simulator.engine import warm_up; warm_up()")  # (the set-up's step)
    for side, least in (("controller", 5), ("simulator", 8)):
        lines = python("-c", WARM_CHECK, side, str(tmp_path))
        warmed = next(line for line in lines if line.startswith("warm-up:"))
        assert int(warmed.split()[1]) >= least, (side, lines)
        assert "loaded after: []" in lines, (side, lines)


COPY_CHECK = """
import controller, numba
from controller.bssi import _bssi, bssi_order
from controller.kernel_cache import is_cached
print("path", _bssi._cache._cache_path)
print("cached", is_cached(_bssi))
bssi_order([{"a": 1.0, "b": 2.0}, {"b": 1.0}])
stats = _bssi.stats
print("hits", sum(stats.cache_hits.values()), "misses", sum(stats.cache_misses.values()))
"""


def test_a_copy_of_the_sources_elsewhere_loads_the_kernels_the_checkout_compiled(tmp_path):
    # numba files a kernel under a hash of its source's absolute directory; here under its
    # package's name inside the directory named after every source, so a clone elsewhere or
    # a pip install of the same sources, given the same NUMBA_CACHE_DIR, compiles nothing
    bssi_order([{"a": 1.0, "b": 2.0}, {"b": 1.0}])  # (compiled or loaded here)
    chosen = use_source_keyed_cache()
    copy = tmp_path / "elsewhere"
    copy_packages(copy)
    run = subprocess.run(
        [sys.executable, "-c", COPY_CHECK], cwd=copy, capture_output=True, text=True,
        env=dict(os.environ, NUMBA_CACHE_DIR=str(chosen.parent), PYTHONPATH=str(copy)),
        timeout=300, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert run[0] == f"path {chosen / 'controller'}"
    assert run[1:] == ["cached True", "hits 1 misses 0"]
    # an edited copy has a directory of its own and compiles there
    bssi = copy / "controller" / "bssi.py"
    bssi.write_text(bssi.read_text() + "\n# an edit\n")
    edited = cache_dir(package_sources(copy), copy, chosen.parent)
    assert edited != chosen
    run = subprocess.run(
        [sys.executable, "-c", COPY_CHECK], cwd=copy, capture_output=True, text=True,
        env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(copy)),
        timeout=300, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert run[0] == f"path {cache_dir(package_sources(copy), copy, tmp_path / 'cache')}/controller"
    assert run[1:] == ["cached False", "hits 0 misses 1"]
