"""`pip install .`: the packages, their data (the controller's OpenAPI document, the bundled
traces and LCBench surrogate) and the console scripts, without root, working from any folder;
and requirements.txt pins every dependency pyproject.toml declares."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from controller.kernel_cache import use_source_keyed_cache
from simulator.engine import warm_up

ROOT = Path(__file__).resolve().parents[2]


def names(requirements: list[str]) -> set[str]:
    """Distribution names of requirement strings, normalised as pip does."""
    return {re.split(r"[<>=!~\[; ]", r.strip(), maxsplit=1)[0].lower().replace("_", "-")
            for r in requirements if r.strip() and not r.strip().startswith("#")}  # fmt: skip


def test_requirements_lock_pins_every_declared_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = names(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared |= names(extra)
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    pinned = {n for n in names(lines)}
    assert declared - pinned == set()
    assert all("==" in line for line in lines if line.strip() and not line.startswith("#"))


def new_virtualenv(where: Path) -> tuple[Path, Path]:
    """A new virtualenv at ``where`` that sees this interpreter's installed dependencies (not
    this checkout: the project itself is not installed in it), so that installing the project
    needs no download; its ``bin`` and ``site-packages``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    (site,) = where.glob("lib/python3*/site-packages")
    dependencies = sysconfig.get_paths()["purelib"]
    (site / "dependencies.pth").write_text(f"import site; site.addsitedir({dependencies!r})\n")
    return where / "bin", site


def test_pip_install_into_a_new_virtualenv_gives_the_package_its_data_and_its_commands(tmp_path):
    # build from a copy: building in place would leave build/ and *.egg-info in the checkout
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv", ".git", "results", "__pycache__", "*.egg-info", "build"))  # fmt: skip
    bin_dir, target = new_virtualenv(tmp_path / "venv")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "--quiet",
         "--no-deps", "--no-build-isolation", "--disable-pip-version-check", str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    assert (target / "controller" / "openapi.yaml").is_file()
    data = ["traces/FB2010-1Hr-150-0.txt", "traces/fb-526coflows-16ports-load0.9.txt",
            "traces/README.md", "yahpo/README.md", "yahpo/LICENSE", "yahpo/lcbench/model.onnx",
            "yahpo/lcbench/encoding.json", "yahpo/lcbench/config_space.json",
            "yahpo/lcbench/LICENSE-2.0.txt"]  # fmt: skip
    for name in data:  # byte for byte the checkout's
        installed = (target / "netsched_data" / name).read_bytes()
        assert installed == (ROOT / "netsched_data" / name).read_bytes(), name
    assert (target / "experiments" / "sim_experiments.py").is_file()
    assert not (target / "tests").exists() and not (target / "scripts").exists()
    elsewhere = tmp_path / "elsewhere"  # not the checkout: only the installed packages
    elsewhere.mkdir()
    # the same sources share the checkout's compiled kernels (controller.kernel_cache), so
    # the installed copy loads them instead of compiling them again (~90 s)
    warm_up(stream=io.StringIO())
    shared = str(use_source_keyed_cache().parent)
    env = {**os.environ, "NUMBA_CACHE_DIR": shared}
    env.pop("PYTHONPATH", None)
    run = subprocess.run(
        [str(bin_dir / "hpo-sim"), "hpo", "--hosts", "4", "--tasks", "1", "--configs",
         "3", "--policy", "fair", "beamer"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "beamer" in run.stdout and "avg SCT" in run.stdout
    assert "compiling" not in run.stderr, run.stderr[-3000:]
    # the installed package finds its own data: a trace by name, the sweep's default trace
    run = subprocess.run(
        [str(bin_dir / "hpo-sim"), "trace", "fb-526coflows-16ports-load0.9.txt",
         "--policy", "fair"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0 and "526 coflows, 5249 flows" in run.stdout, run.stderr[-3000:]
    run = subprocess.run(
        [str(bin_dir / "hpo-sim-sweep"), "--hosts", "3", "--loads", "0.5", "--policy",
         "fair", "--sequential", "--out", "sweep"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "trace fb-526coflows-16ports-load0.9.txt (bundled): 526 coflows" in run.stdout
    for command in ("hpo-sim-sweep", "hpo-reproduce", "hpo-controller", "hpo-testbed"):
        helped = subprocess.run([str(bin_dir / command), "--help"], cwd=elsewhere,
                                env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert helped.returncode == 0 and "usage:" in helped.stdout, command + helped.stderr
    # a policy of one's own, in a module in the user's folder, in a sweep
    shutil.copy(ROOT / "examples" / "smallest_first.py", elsewhere / "mine.py")
    run = subprocess.run(
        [str(bin_dir / "hpo-sim-sweep"), "--hosts", "3", "--loads", "0.5", "--policy", "fair",
         "mine:SmallestFirst", "--sequential", "--out", "mine"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert ",mine:SmallestFirst," in (elsewhere / "mine" / "trace.csv").read_text()
    # a quick report (one small map)
    run = subprocess.run(
        [str(bin_dir / "hpo-reproduce"), "--simulator-only", "--quick", "--claims", "varys",
         "--seeds", "2", "--max-seeds", "2", "--sequential", "--out", "report"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "## Varys" in (elsewhere / "report" / "REPORT.md").read_text()
    # bad input: one line naming what is wrong (after argparse's usage), no traceback
    for named, command, *arguments in (
        ("/proc/nope", "hpo-sim", "hpo", "--out", "/proc/nope"),
        ("no-such-trace.txt", "hpo-sim", "trace", "no-such-trace.txt"),
        ("nowhere", "hpo-reproduce", "--simulator-only", "--policy", "nowhere:Nothing"),
        ("127.0.0.1:1", "hpo-sim-sweep", "--ray-address", "127.0.0.1:1"),
    ):
        bad = subprocess.run([str(bin_dir / command), *arguments], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        said = (bad.stderr.strip() or bad.stdout.strip()).splitlines()
        assert bad.returncode != 0 and not any("Traceback" in line for line in said), said
        assert named in said[-1], said


def test_the_source_distribution_carries_the_data_and_the_licences(tmp_path):
    import tarfile

    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv", ".git", "results", "__pycache__", "*.egg-info", "build"))  # fmt: skip
    build = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta; "
         "print(build_meta.build_sdist(sys.argv[1]))", str(tmp_path / "dist")],
        cwd=source, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    name = build.stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / "dist" / name) as sdist:
        root = sdist.getnames()[0].split("/")[0]
        members = {n.removeprefix(root + "/") for n in sdist.getnames()}
    for data in ("netsched_data/traces/FB2010-1Hr-150-0.txt", "netsched_data/traces/README.md",
                 "netsched_data/yahpo/lcbench/model.onnx", "netsched_data/yahpo/LICENSE",
                 "LICENSE", "controller/openapi.yaml"):  # fmt: skip
        assert data in members, data
