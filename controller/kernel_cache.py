"""Where the compiled kernels are cached: one directory named after the sources.

Numba caches each kernel beside its source and checks only that file's date: a kernel that calls
a kernel of another file would keep the old callee after an edit of that file alone (Beamer's
stage kernel in :mod:`controller.stage_loads` calls BSSI in :mod:`controller.bssi`; the
simulator's step loop calls :mod:`simulator.allocation`; the simulator runs the controller's
kernels), and a kernel keeps the value a global constant had when it was compiled. So every
kernel of ``controller`` and ``simulator`` is cached in one directory named after a hash of every
source of the two packages: any edit compiles them afresh, and an unchanged checkout reuses
them. Directories of other sources left untouched for a day are removed (a checkout that is
edited or updated would otherwise keep every version's kernels, ~8 MB each).

Inside that directory numba would file each kernel under a hash of its source's absolute
directory; :class:`SourceKeyedCacheLocator` files it under its package's name instead, so
another copy of the same sources (a clone elsewhere, ``pip install``) pointed at the same base
directory (``NUMBA_CACHE_DIR``) loads the kernels instead of compiling them again. Numba still
checks each source file's hash against the one the kernel was compiled from.

Importing this module points numba there (:func:`use_source_keyed_cache`), and every module
with kernels takes its ``njit`` from here, so that is done before its first kernel is decorated;
importing ``controller`` or ``simulator`` alone loads no numba (a command's ``--help`` answers
without it).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from numba import njit as njit  # (re-exported for the kernel modules, see above)
from numba.core import config as numba_config
from numba.core.caching import CacheImpl, UserProvidedCacheLocator

PACKAGES = ("controller", "simulator")
PREFIX = "kernels-"
STALE_S = 24 * 3600.0

_ROOT = Path(__file__).resolve().parents[1]


def package_sources(root: Path) -> list[Path]:
    """Every ``.py`` source of :data:`PACKAGES` under ``root``, in a fixed order."""
    return sorted(path for package in PACKAGES for path in (root / package).glob("*.py"))


def cache_dir(sources: Iterable[Path], root: Path, base: Path) -> Path:
    """The directory under ``base`` for kernels compiled from ``sources`` (paths under
    ``root``): named after a hash of their paths relative to ``root`` and their bytes."""
    digest = hashlib.sha1()
    for source in sources:
        digest.update(source.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(source.read_bytes())
    return base / f"{PREFIX}{digest.hexdigest()[:12]}"


def prune(base: Path, keep: Path, now_s: float | None = None) -> list[Path]:
    """Remove the kernel directories under ``base`` but ``keep`` whose last change is more than
    :data:`STALE_S` old; returns those removed. (A process still running an older source has
    its kernels loaded; one it has not called yet is compiled again.)"""
    now_s = time.time() if now_s is None else now_s
    removed = []
    for path in base.glob(f"{PREFIX}*"):
        if path == keep or not path.is_dir():
            continue
        try:
            if now_s - path.stat().st_mtime > STALE_S:
                shutil.rmtree(path)
                removed.append(path)
        except OSError:  # (another process removed it first, or the tree is not ours)
            continue
    return removed


_chosen: Path | None = None


class SourceKeyedCacheLocator(UserProvidedCacheLocator):
    """Numba's cache locator for the kernels of :data:`PACKAGES` while numba caches in the
    directory :func:`use_source_keyed_cache` chose: each kernel under its package's name
    (``controller/``, ``simulator/``), not under a hash of its source's absolute directory.
    That directory's name already stands for every source of both packages, so the same
    sources anywhere share it. Other files get numba's own locators."""

    @classmethod
    def get_suitable_cache_subpath(cls, py_file: str) -> str:
        """The name of the package ``py_file`` is in."""
        return Path(py_file).resolve().parent.name

    @classmethod
    def from_function(cls, py_func, py_file: str):
        """A locator for a kernel of :data:`PACKAGES` under this root while the source-keyed
        directory is numba's cache; else ``None`` (numba tries its next locator)."""
        source = Path(py_file).resolve()
        if (
            _chosen is None
            or numba_config.CACHE_DIR != str(_chosen)
            or source.parent.name not in PACKAGES
            or source.parent.parent != _ROOT
        ):
            return None
        return super().from_function(py_func, py_file)


def use_source_keyed_cache() -> Path:
    """Point numba's cache at the directory of the current sources (under ``NUMBA_CACHE_DIR``
    if set, else ``simulator/__pycache__``), with :class:`SourceKeyedCacheLocator` first
    among its locators (unless ``NUMBA_CACHE_LOCATOR_CLASSES`` names others), prune stale
    directories, and return it; once per process."""
    global _chosen
    if _chosen is None:
        base = Path(os.environ.get("NUMBA_CACHE_DIR") or _ROOT / "simulator" / "__pycache__")
        _chosen = cache_dir(package_sources(_ROOT), _ROOT, base)
        numba_config.CACHE_DIR = str(_chosen)
        if not numba_config.CACHE_LOCATOR_CLASSES:
            # (numba resolves its own locators' bare names in its caching module)
            numba_config.CACHE_LOCATOR_CLASSES = ",".join(
                [f"{__name__}.{SourceKeyedCacheLocator.__name__}"]
                + [locator.__name__ for locator in CacheImpl._locator_classes]
            )
        prune(base, _chosen)
    return _chosen


use_source_keyed_cache()


def is_cached(kernel) -> bool | None:
    """Whether numba's on-disk cache holds ``kernel`` (a compiled function) for this source
    (``None``: cannot tell; it reads numba's cache index, not a public interface)."""
    try:
        return bool(kernel._cache._cache_file._load_index())
    except Exception:  # another numba version: the warm-up still works, silently
        return None


_warmed: set[str] = set()


def warm_once(
    what: str,
    kernel,
    load: Callable[[], object] | Sequence[tuple[str, Callable[[], object]]],
    stream=None,
    note: str = "",
    kernels: str = "",
) -> float:
    """Call ``load`` (tiny runs that load ``what``'s kernels) once per process. Where ``kernel``
    is not in the disk cache, say on ``stream`` (default stderr) that they compile (``note``:
    how long that takes), and in how long it did. ``load`` may be steps, ``(label, call)``
    pairs: then a compile also says, step by step, how long each took. While it compiles, each
    kernel of ours is named as numba finishes it. Returns the seconds it took (0 once warm)."""
    if what in _warmed:
        return 0.0
    stream = stream if stream is not None else sys.stderr
    started = time.perf_counter()
    compiling = is_cached(kernel) is False
    steps = [("", load)] if callable(load) else list(load)
    if compiling:
        where = _chosen or "numba's cache"
        print(f"compiling the {what}'s numba kernels{f' ({kernels})' if kernels else ''}, once "
              f"per machine and source version: {note}cached in {where} afterwards",
              file=stream, flush=True)  # fmt: skip
    with _naming_compiles(stream, started) if compiling else contextlib.nullcontext():
        _run_steps(steps, stream, started, compiling)
    _warmed.add(what)
    took = time.perf_counter() - started
    if compiling:
        print(f"compiled the {what}'s kernels in {took:.0f} s", file=stream, flush=True)
    return took


def _run_steps(steps, stream, started: float, compiling: bool) -> None:
    """Call every step; when compiling, say after each labelled one how long it took."""
    for number, (label, call) in enumerate(steps, start=1):
        step_started = time.perf_counter()
        call()
        if compiling and label:
            done = time.perf_counter()
            print(f"  [{number}/{len(steps)}] {label}: {done - step_started:.0f} s "
                  f"({done - started:.0f} s so far)", file=stream, flush=True)  # fmt: skip


OWN_PACKAGES = ("controller.", "simulator.")


@contextlib.contextmanager
def _naming_compiles(stream, started: float):
    """While inside, name on ``stream`` each of our kernels as numba finishes compiling it (once
    per kernel, however many signatures), with the seconds since ``started``."""
    from numba.core import event

    named: set[str] = set()

    class Naming(event.Listener):
        def on_start(self, ev) -> None:
            pass

        def on_end(self, ev) -> None:
            function = ev.data["dispatcher"].py_func
            name = f"{function.__module__}.{function.__qualname__}"
            if function.__module__.startswith(OWN_PACKAGES) and name not in named:
                named.add(name)
                print(f"    {name} ({time.perf_counter() - started:.0f} s)", file=stream,
                      flush=True)  # fmt: skip

    with event.install_listener("numba:compile", Naming()):
        yield
