"""Every console script's ``--help`` answers without importing numba, Ray or Optuna: the work's
modules are imported where the work runs, so the help (and a bad flag) does not wait seconds
for the compiled kernels' library."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from cli.argtypes import POLICY_NAMES

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numba", "optuna", "ray")

# in a fresh process: the script's main(["--help"]), then how it exited and which of HEAVY it
# imported, as the last two lines
HELP = f"""
import importlib, sys
script, entry = sys.argv[1:]
module, _, function = entry.partition(":")
sys.argv[0] = script
try:
    getattr(importlib.import_module(module), function)(["--help"])
    code = "returned"
except SystemExit as exc:
    code = exc.code
print("exit", code)
print("imported", *sorted(name for name in {HEAVY!r} if name in sys.modules))
"""


def console_scripts() -> dict[str, str]:
    """pyproject.toml's console scripts: name -> ``module:function``."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_every_console_script_answers_help_without_numba_ray_or_optuna():
    scripts = console_scripts()
    assert len(scripts) >= 10
    runs = {
        script: subprocess.Popen([sys.executable, "-c", HELP, script, entry], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for script, entry in scripts.items()
    }  # fmt: skip
    for script, run in runs.items():
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, (script, err)
        *usage, exited, imported = out.splitlines()
        assert usage[0].startswith(f"usage: {script}"), (script, out)
        assert exited == "exit 0", (script, out)
        assert imported == "imported", (script, imported)


def test_the_built_in_policy_names_are_the_registry_s():
    # the commands' help and defaults name the built-ins without importing their module
    from controller.policies import POLICIES

    assert POLICY_NAMES == tuple(sorted(POLICIES))
