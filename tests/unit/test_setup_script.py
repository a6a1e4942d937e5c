"""scripts/setup.sh installs with uv and falls back to pip where uv cannot (uv does not read
pip's configuration); checked with its own functions on two small local projects, offline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).with_name("uv")


def a_project(where: Path, name: str) -> Path:
    """A one-module project ``name`` with setuptools as its build backend."""
    where.mkdir()
    (where / f"{name}.py").write_text("ANSWER = 42\n")
    (where / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "1.0"\n[tool.setuptools]\npy-modules = ["{name}"]\n'
    )
    return where


def install_with(venv: Path, project: Path) -> subprocess.CompletedProcess:
    """setup.sh's ``install_with`` of ``project`` into ``venv`` (its functions sourced)."""
    setup = ROOT / "scripts" / "setup.sh"
    script = f"source {setup} && install_with --no-deps --no-build-isolation {project}"
    return subprocess.run(["bash", "-c", script], env={**os.environ, "VENV": str(venv)},
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.skipif(not UV.exists() and os.environ.get("CI") != "true",
                    reason="needs uv (scripts/setup.sh installs it)")  # fmt: skip
def test_uv_installs_and_pip_takes_over_where_uv_cannot(tmp_path):
    venv = tmp_path / "venv"  # Python 3.11's venv brings pip and setuptools: no download
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # and this one's packages after its own (wheel, which setuptools 65 builds wheels with)
    (site,) = venv.glob("lib/python3*/site-packages")
    (site / "ours.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = venv / "bin" / "python"
    (venv / "bin" / "uv").symlink_to(UV)
    by_uv = install_with(venv, a_project(tmp_path / "first", "first_project"))
    assert by_uv.returncode == 0, by_uv.stderr
    assert "pip installs it instead" not in by_uv.stdout
    (venv / "bin" / "uv").unlink()  # a uv that cannot reach its index, as behind a mirror
    (venv / "bin" / "uv").write_text("#!/bin/sh\necho 'error: no index reachable' >&2\nexit 2\n")
    (venv / "bin" / "uv").chmod(0o755)
    by_pip = install_with(venv, a_project(tmp_path / "second", "second_project"))
    assert by_pip.returncode == 0, by_pip.stderr
    assert "[setup] uv could not install that; pip installs it instead" in by_pip.stdout
    (venv / "bin" / "uv").unlink()  # no uv at all (pip found none to install): pip does it
    without = install_with(venv, a_project(tmp_path / "third", "third_project"))
    assert without.returncode == 0 and "uv could not" not in without.stdout, without.stderr
    every = "import first_project, second_project, third_project"
    imported = subprocess.run([str(python), "-c", every], cwd=tmp_path, capture_output=True,
                              text=True)  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    shutil.rmtree(venv)
