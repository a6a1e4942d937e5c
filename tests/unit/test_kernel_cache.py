"""The compiled kernels' cache directory follows every source of the two packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from controller.kernel_cache import PREFIX, STALE_S, cache_dir, package_sources, prune

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
    # what numba is told in a fresh process, as either package sets it on import (the
    # controller alone, as `python -m controller` runs, or the simulator)
    expected = cache_dir(package_sources(ROOT), ROOT, tmp_path)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    for imports in ("controller.policies", "simulator.engine"):
        code = f"import numba, {imports}; print(numba.config.CACHE_DIR)"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
            check=True,
        ).stdout.split()  # fmt: skip
        assert out == [str(expected)], imports
