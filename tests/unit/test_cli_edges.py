"""Command lines at their edges: the usage names the command as it was typed, and a missing
Mininet or Ryu is one line naming the set-up script, not a traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_the_usage_names_the_console_script_or_the_module():
    as_script = python(
        "import sys; sys.argv[0] = '/venv/bin/hpo-sim'; "
        "from simulator.__main__ import main; main(['hpo', '--hosts', '0'])"
    )
    assert as_script.returncode == 2
    assert as_script.stderr.startswith("usage: hpo-sim")
    assert "hpo-sim hpo: error: argument --hosts" in as_script.stderr
    as_module = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--seeds", "1",
                                "--simulator-only"], cwd=ROOT, capture_output=True, text=True,
                               timeout=120)  # fmt: skip
    assert as_module.returncode == 2
    assert as_module.stderr.startswith("usage: python -m experiments.reproduce")


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="CI's .venv comes from scripts/setup.sh")
def test_the_set_up_installs_every_console_script_running_this_checkout():
    """``scripts/setup.sh`` installs the checkout into ``.venv``, editable: every console script
    of pyproject.toml is in ``.venv/bin`` and runs this checkout's code."""
    from tests.conftest import installed_here

    assert installed_here(), "the project is not installed editable from this checkout"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    bin_dir = Path(sys.executable).parent
    assert [name for name in scripts if not (bin_dir / name).is_file()] == []
    usage = subprocess.run([str(bin_dir / "hpo-reproduce"), "--seeds", "0"], cwd="/",
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert usage.returncode == 2 and usage.stderr.startswith("usage: hpo-reproduce")


def test_a_missing_mininet_is_one_line_naming_the_set_up_script():
    run = python("import sys; sys.modules['mininet'] = None; sys.argv = ['hpo-testbed', '--help']; "
                 "import experiments.run_testbed")  # fmt: skip
    assert run.returncode == 1
    assert run.stderr == (
        "hpo-testbed: mininet is not installed: the testbed needs Mininet, Ryu "
        "and Open vSwitch; `sudo bash scripts/setup.sh` installs them\n"
    )
    calibrate = python("import sys; sys.modules['mininet'] = None; sys.argv = ['hpo-calibrate']; "
                       "import experiments.calibrate")  # fmt: skip
    assert calibrate.returncode == 1 and calibrate.stderr.count("\n") == 1
    assert "scripts/setup.sh" in calibrate.stderr and "Traceback" not in calibrate.stderr


def test_a_missing_ryu_is_one_line_naming_the_set_up_script(tmp_path):
    run = python("import sys; sys.modules['ryu'] = None; sys.argv[0] = 'hpo-controller'; "
                 "from controller.__main__ import main; "
                 f"sys.exit(main(['--db', {str(tmp_path / 'c.sqlite')!r}]))")  # fmt: skip
    assert run.returncode == 1
    assert run.stderr.endswith("hpo-controller: error: ryu is not installed: `sudo bash "
                               "scripts/setup.sh` installs it (or pip install -r "
                               "requirements.txt)\n")  # fmt: skip
    assert "Traceback" not in run.stderr


def test_an_unusable_out_is_refused_before_any_work(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for module, args in (
        ("simulator", ["hpo", "--tasks", "50"]),  # (would simulate for minutes)
        ("experiments.sim_experiments", []),
        ("experiments.reproduce", ["--simulator-only"]),
        ("experiments.gpu_experiments", []),
    ):
        for out, message in ((a_file, "exists and is not a folder"),
                             (a_file / "below", "a part of it is a file"),
                             ("/proc/nope", "cannot write to /proc/nope")):  # fmt: skip
            run = subprocess.run([sys.executable, "-m", module, *args, "--out", str(out)],
                                 cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
            assert run.returncode == 2, (module, out, run.stderr)
            assert message in run.stderr.splitlines()[-1], (module, run.stderr)
    made = tmp_path / "new" / "deeper"
    from cli.argtypes import output_folder

    assert output_folder(str(made)) == made and made.is_dir() and not list(made.iterdir())


COMMANDS = ("simulator.__main__", "experiments.sim_experiments", "experiments.gpu_experiments",
            "experiments.reproduce", "experiments.run_testbed", "experiments.calibrate",
            "experiments.optuna_hpo", "experiments.tune_hpo", "simulator.schedule_plot",
            "controller.__main__",
            "workloads.worker")  # fmt: skip


def test_every_flag_of_every_command_has_help(monkeypatch):
    import argparse
    import importlib

    class Parsed(Exception):
        pass

    seen: dict[str, list[str]] = {}

    def record(parser, args=None, namespace=None):
        parsers = [parser] + [p for a in parser._actions
                              if isinstance(a, argparse._SubParsersAction)
                              for p in a.choices.values()]  # fmt: skip
        for p in parsers:
            for action in p._actions:
                if action.option_strings and action.help is None:
                    seen.setdefault(p.prog, []).append(action.option_strings[-1])
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", record)
    for name in COMMANDS:
        module = importlib.import_module(name)
        try:
            module.main([])
        except Parsed:
            pass
    assert seen == {}


def test_the_first_compile_says_which_kernels_and_where_they_are_kept(monkeypatch):
    import io

    from controller import kernel_cache

    monkeypatch.setattr(kernel_cache, "is_cached", lambda kernel: False)
    monkeypatch.setattr(kernel_cache, "_warmed", set())
    stream = io.StringIO()
    called = []
    steps = [("sincronia, levels mode", lambda: called.append(1)),
             ("beamer, levels mode", lambda: called.append(2))]  # fmt: skip
    kernel_cache.warm_once("simulator", None, steps, stream, note="a while; ",
                           kernels="the fluid model's event steps")  # fmt: skip
    first, *progress, last = stream.getvalue().splitlines()
    assert first.startswith(
        "compiling the simulator's numba kernels (the fluid model's event "
        "steps), once per machine and source version: a while; cached in "
    )
    # step by step: which kernels are done, and the time so far
    assert called == [1, 2] and len(progress) == 2
    assert re.fullmatch(r"  \[1/2\] sincronia, levels mode: \d+ s \(\d+ s so far\)", progress[0])
    assert progress[1].startswith("  [2/2] beamer, levels mode: ")
    assert last.startswith("compiled the simulator's kernels in ")
    # warm already: nothing more is said or run
    assert kernel_cache.warm_once("simulator", None, steps, stream) == 0.0 and called == [1, 2]


def test_a_compile_names_each_of_our_kernels_as_numba_finishes_it(monkeypatch):
    import io

    import numba

    from controller import kernel_cache

    def tiny(x):
        return x + 1

    tiny.__module__ = "simulator.made_for_the_test"  # one of ours, by its module
    kernel = numba.njit(cache=False)(tiny)
    monkeypatch.setattr(kernel_cache, "is_cached", lambda kernel: False)
    monkeypatch.setattr(kernel_cache, "_warmed", set())
    stream = io.StringIO()
    kernel_cache.warm_once("tiny", kernel, [("tiny", lambda: kernel(1))], stream)
    lines = stream.getvalue().splitlines()
    assert re.fullmatch(r"    simulator\.made_for_the_test\.[\w.<>]*tiny \(\d+ s\)", lines[1])
    assert lines[2].startswith("  [1/1] tiny: ") and len(lines) == 4
