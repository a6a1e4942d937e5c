"""Shared fixtures: a ``report`` fixture whose figures are printed at the end of the run."""

from __future__ import annotations

import json
import os
import shutil
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import pytest

ROOT = Path(__file__).resolve().parents[1]

_REPORT: list[tuple[str, str]] = []


@pytest.fixture
def report():
    """Record a measured figure: ``report("worst BSSI ratio", 1.23)``; printed in the summary."""

    def record(name: str, value) -> None:
        _REPORT.append((name, f"{value:.4f}" if isinstance(value, float) else str(value)))

    return record


def pytest_terminal_summary(terminalreporter):
    if _REPORT:
        terminalreporter.section("measured figures")
        for name, value in _REPORT:
            terminalreporter.write_line(f"{name}: {value}")


def needs_root_and(*commands: str):
    """Skip an integration test unless running as root with ``commands`` on PATH."""
    missing = [c for c in commands if shutil.which(c) is None]
    reason = None
    if os.geteuid() != 0:
        reason = "needs root (CI runs as root)"
    elif missing:
        reason = f"needs {', '.join(missing)} (run scripts/setup.sh)"
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def installed_here() -> bool:
    """Whether this interpreter has this checkout installed editable (``scripts/setup.sh``
    does it for ``.venv``): its console scripts then run the code under test, not another
    checkout's."""
    try:
        url = json.loads(distribution("hpo-netsched").read_text("direct_url.json") or "{}")
    except PackageNotFoundError:
        return False
    if not url.get("dir_info", {}).get("editable") or not url.get("url", "").startswith("file:"):
        return False
    return Path(url2pathname(urlparse(url["url"]).path)).resolve() == ROOT


def command(script: str, module: str) -> list[str]:
    """How a user starts ``module``: its console script ``script`` beside this interpreter when
    it runs this checkout's code, else ``python -m module`` (run from the checkout's root)."""
    installed = Path(sys.executable).parent / script
    if installed_here() and installed.is_file():
        return [str(installed)]
    return [sys.executable, "-m", module]


def pytest_collection_finish(session):
    """Start the slow background part of a collected test as soon as the run is known: the
    bounds-checked kernels' compile (``tests/unit/test_kernel_bounds.py``)."""
    for item in session.items:
        runs = getattr(getattr(item, "module", None), "BOUNDS_CHECKED_RUNS", None)
        if runs is not None:
            runs.start(session.config._tmp_path_factory.mktemp("kernel-bounds"))
            return


def pytest_sessionfinish(session):
    """Stop what :func:`pytest_collection_finish` started if its test did not run to the end
    (a run stopped early, ``-x``)."""
    for item in session.items:
        runs = getattr(getattr(item, "module", None), "BOUNDS_CHECKED_RUNS", None)
        if runs is not None:
            runs.stop()
            return
