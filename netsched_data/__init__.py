"""The public data the project ships: two coflow traces and the YAHPO Gym LCBench surrogate.

Installed with the package (``pip install .``) and found through :mod:`importlib.resources`,
so nothing needs a data folder beside the checkout:

- :func:`trace` gives a bundled coflow trace by name (:data:`TRACES`; ``traces/README.md``
  gives their source and citation), :func:`find_trace` a trace given on a command line (a path
  or a bundled name);
- :func:`yahpo` gives the YAHPO Gym data folder holding ``lcbench/`` (what
  :class:`workloads.yahpo.LcBench` and ``yahpo_gym``'s ``set_data_path`` take), :func:`lcbench`
  that ``lcbench/`` folder itself, and :func:`find_yahpo` a ``--yahpo`` value (a folder, or
  :data:`BUNDLED` for the bundled one); ``yahpo/README.md`` gives the source, citation and
  licence (Apache-2.0, ``yahpo/LICENSE``).

The package is named ``netsched_data``, not ``datasets``, so that it does not shadow the
Hugging Face ``datasets`` package in the same environment.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

# the bundled coflow traces: the Facebook coflow benchmark trace (150 ports) and 526 coflows
# resampled from it on 16 ports at load 0.9
FULL_TRACE, SMALL_TRACE = "FB2010-1Hr-150-0.txt", "fb-526coflows-16ports-load0.9.txt"
TRACES = (FULL_TRACE, SMALL_TRACE)
# the word that names the bundled YAHPO Gym surrogate where a folder is expected (``--yahpo``)
BUNDLED = "bundled"


class DataError(LookupError):
    """A bundled data file asked for by an unknown name, or missing from the installation."""


def _root() -> Path:
    """The package's folder (a real folder: the package installs unzipped)."""
    root = files(__name__)
    if not isinstance(root, Path):  # pragma: no cover - e.g. imported from a zip file
        raise DataError(f"{__name__} is not installed as a folder ({root}); install it with pip")
    return root


def trace(name: str) -> Path:
    """The path of the bundled coflow trace ``name`` (one of :data:`TRACES`).

    Raises:
        DataError: ``name`` is not a bundled trace (the message names the bundled ones).
    """
    if name not in TRACES:
        raise DataError(f"unknown trace {name!r}; bundled: {', '.join(TRACES)}")
    path = _root() / "traces" / name
    if not path.is_file():  # pragma: no cover - an installation without its package data
        raise DataError(f"{path}: missing from the installed package (reinstall it)")
    return path


def find_trace(value: str | Path) -> Path:
    """A trace given on a command line: an existing file, else a bundled trace's name.

    A value naming no file that has no folder part (``FB2010-1Hr-150-0.txt``) must be a bundled
    trace's name; one with a folder part (``traces/x.txt``) is returned as a path, for the
    trace loader to report as missing.

    Raises:
        DataError: a bare name that is neither a file nor a bundled trace.
    """
    path = Path(value)
    if path.exists() or len(path.parts) != 1:
        return path
    if str(value) not in TRACES:
        raise DataError(f"{value}: no such file, nor a bundled trace ({', '.join(TRACES)})")
    return trace(str(value))


def yahpo() -> Path:
    """The bundled YAHPO Gym data folder, the one holding ``lcbench/``."""
    return _root() / "yahpo"


def lcbench() -> Path:
    """The bundled LCBench surrogate's folder (``model.onnx``, ``encoding.json``,
    ``config_space.json``)."""
    return yahpo() / "lcbench"


def find_yahpo(value: str | Path | None) -> Path:
    """A ``--yahpo`` value as a folder holding ``lcbench/``: :data:`BUNDLED` (or ``None``) is
    the bundled surrogate's, anything else the folder it names."""
    if value is None or str(value) == BUNDLED:
        return yahpo()
    return Path(value)
