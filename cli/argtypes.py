"""argparse types shared by the command lines (controller, simulator, scripts).

Each rejects what is not a finite number of the right kind in range with a one-line error that
argparse prefixes with the flag (``argument --interarrival: must be >= 0, got -5``).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

KIND_NAMES = {int: "an integer", float: "a number"}

# the built-in network policies' names, :data:`controller.policies.POLICIES`' keys, for the
# commands' help and defaults: that module loads numba, which a --help need not wait for
# (tests/unit/test_cli_help.py keeps the two equal)
POLICY_NAMES = ("beamer", "fair", "fifo-lm", "jpas", "sincronia", "varys")


def number(kind: type, low: float | None = None, high: float | None = None, low_open: bool = False):
    """An argparse type: a finite ``kind`` (int or float) in ``[low, high]`` (``(low, high]``
    when ``low_open``); either bound may be ``None`` (no bound)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {KIND_NAMES[kind]}: {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if low is not None and (value <= low if low_open else value < low):
            raise argparse.ArgumentTypeError(
                f"must be {'>' if low_open else '>='} {low}, got {text}"
            )
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high}, got {text}")
        return value

    return parse


def positive(kind: type) -> Callable[[str], float]:
    """An argparse type: a finite ``kind`` (int or float) greater than 0."""
    return number(kind, 0, low_open=True)


def non_negative(kind: type) -> Callable[[str], float]:
    """An argparse type: a finite ``kind`` (int or float) of at least 0."""
    return number(kind, 0)


def fraction(text: str) -> float:
    """An argparse type: a number in [0, 1]."""
    return number(float, 0, 1)(text)


def tcp_port(text: str) -> int:
    """An argparse type: a TCP port number (1..65535)."""
    value = number(int)(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text}")
    return value


def program(module_name: str) -> str:
    """The command as it was typed, for usage and error lines: ``python -m <module>`` for a
    module run with ``-m`` (pass the module's ``__name__``), else the name the process was
    started by (a console script, ``hpo-sim``)."""
    if module_name == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is not None:
            return f"python -m {spec.name.removesuffix('.__main__')}"
    return Path(sys.argv[0]).name or "python"


def output_folder(text: str) -> Path:
    """An argparse type: a folder results can be written to, created if missing, checked
    before any work (a file there, a read-only place or ``/proc`` fail at once, not after a
    run)."""
    path = Path(text)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except FileExistsError:
        raise argparse.ArgumentTypeError(f"{text} exists and is not a folder") from None
    except NotADirectoryError:
        raise argparse.ArgumentTypeError(f"{text}: a part of it is a file") from None
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot write to {text}: {exc.strerror}") from None
    return path


def output_file(text: str) -> Path:
    """An argparse type: a file results can be written to (its folder checked as
    :func:`output_folder`; an existing folder of that name is refused)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    output_folder(str(path.parent))
    return path


def policy_name(text: str) -> str:
    """An argparse type: a network policy: a built-in's name, an installed entry point's name
    or ``package.module:Class`` (:mod:`controller.plugins`), loaded now so that a bad one is
    one line before any work; the text itself (what a sweep point or a child process is
    given, to load it again)."""
    from controller.policies import policy_class  # (only the commands that take a policy)

    try:
        policy_class(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def named(load: Callable[[str], object], also: tuple[str, ...] = ()) -> Callable[[str], str]:
    """An argparse type: a name ``load`` accepts (e.g. :func:`workloads.gpu.gpu_policy_class`),
    or one of ``also`` as it is (e.g. ``none``); loaded now, so that a bad one is one line (its
    ``ValueError``) before any work; the text itself."""

    def parse(text: str) -> str:
        if text in also:
            return text
        try:
            load(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return parse


def add_policy_argument(parser: argparse.ArgumentParser, default, what: str,
                        many: bool = True) -> None:  # fmt: skip
    """A ``--policy`` flag taking network policies as :func:`policy_name` does (``many``: one
    or more); its help says ``what`` they are for, then every way to name one."""
    parser.add_argument(
        "--policy",
        nargs="+" if many else None,
        default=default,
        type=policy_name,
        metavar="POLICY",
        help=f"{what}: {policy_help(POLICY_NAMES)}",
    )


def policy_help(builtins) -> str:
    """How a ``--policy`` flag's help names the choices: the built-ins, and the other ways."""
    return (
        f"{', '.join(sorted(builtins))}, an installed entry point's name, or a class of your "
        "own as package.module:Class"
    )
