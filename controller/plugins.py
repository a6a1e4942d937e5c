"""Policies from outside this package: a user brings a policy without editing our files.

Wherever a policy name is accepted (:func:`controller.policies.make_policy`,
:func:`workloads.gpu.make_gpu_policy`, every ``--policy`` and ``--gpu-policy``), besides a
built-in's name it may be

- ``package.module:Class``: the class is imported from that module (found on the Python path,
  or in the working directory, which a console script such as ``hpo-sim`` does not put on the
  path by itself, as ``python -m`` does);
- the name of an entry point of an installed distribution, in the group
  :data:`~controller.policies.NETWORK_POLICY_GROUP` (``hpo_scheduling.network_policies``) or
  :data:`~workloads.gpu.GPU_POLICY_GROUP` (``hpo_scheduling.gpu_policies``), e.g. in the
  plugin's ``pyproject.toml``::

      [project.entry-points."hpo_scheduling.network_policies"]
      smallest-first = "my_policies.smallest:SmallestFirst"

A built-in's name always means the built-in. The class must subclass the kind's base class and
have a ``name`` (letters, digits, ``.``, ``_``, ``-``: runs are labelled and files named by it)
that is not a built-in's. Every refusal is one line naming the reference and what is wrong.

Loading imports the user's code, so it happens only where the user named the policy (a command
line, a call): the controller's REST API switches only among the policies loaded at start.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

# a policy's name labels its runs and names their files (coflows-<name>.csv): nothing a path
# or a shell would read otherwise
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")

# the folders on the Python path that module:Class references were imported from, for child
# processes (the testbed's controller, local Ray workers) to find them as this process did
_ROOTS: list[str] = []


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of spaces made single spaces (an exception's
    message may span lines; a refusal is one line)."""
    return " ".join(str(text).split())


def entry_points(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    """The entry points of ``group`` by name, read from the installed distributions' metadata
    (nothing is imported); where two share a name, the first listed."""
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for point in importlib.metadata.entry_points(group=group):
        found.setdefault(point.name, point)
    return found


def load(
    reference: str, *, base: type, group: str, kind: str, builtins: Mapping[str, type]
) -> type | None:
    """The class ``reference`` names as ``package.module:Class`` or as an entry point of
    ``group``, imported and checked; ``None`` if it is neither (no colon, no such entry point).

    Args:
        base: the class it must subclass.
        kind: what it is, for the messages (``"policy"``, ``"GPU policy"``).
        builtins: the built-ins by name (a loaded class may not take one of their names).

    Raises:
        ValueError: one line naming ``reference`` and the problem (no such module, the import
            failed, no such class, not a subclass of ``base``, no or a bad ``name``).
    """
    if ":" in reference:
        return _load_class(reference, repr(reference), base, kind, builtins, record_root=True)
    point = entry_points(group).get(reference)
    if point is None:
        return None
    label = f"{reference!r} (entry point {point.name} = {point.value} of {group})"
    if not point.attr:
        raise ValueError(f"{kind} {label}: names a module, not a class (module:Class)")
    return _load_class(f"{point.module}:{point.attr}", label, base, kind, builtins)


def unknown_hint(reference: str, group: str) -> str:
    """What ends an "unknown policy ...; choose from <built-ins>" message: the installed entry
    points of ``group``, and how to name a class of one's own (with the colon, if ``reference``
    looks like a dotted path without one)."""
    installed = sorted(entry_points(group))
    also = f", the installed {', '.join(installed)}" if installed else ""
    module, dot, last = reference.rpartition(".")
    if not dot or not module or not last:
        return f"{also}, or a class of your own as package.module:Class"
    # (the classic slip: a dotted path instead of module:Class)
    if last[0].isupper():
        return f"{also}; to load a class write package.module:Class, e.g. {module}:{last}"
    return f"{also}; to load a class of module {reference} write {reference}:ClassName"


def import_roots() -> list[str]:
    """The folders on the Python path that the ``module:Class`` references loaded so far were
    imported from (for a child process's ``PYTHONPATH``)."""
    return list(_ROOTS)


def child_pythonpath(pythonpath: str | None) -> str | None:
    """``pythonpath`` (a child's ``PYTHONPATH``) with :func:`import_roots` in front, so that a
    child given the same ``--policy package.module:Class`` finds the module as this process
    did; ``pythonpath`` itself when nothing was loaded that way."""
    given = [entry for entry in (pythonpath or "").split(os.pathsep) if entry]
    roots = [root for root in _ROOTS if root not in given]
    return os.pathsep.join(roots + given) if roots else pythonpath


def _load_class(
    reference: str,
    label: str,
    base: type,
    kind: str,
    builtins: Mapping[str, type],
    record_root: bool = False,
) -> type:
    """The class ``module:Qualified.Name`` names, imported and checked (see :func:`load`);
    ``label`` is how messages name it; ``record_root``: a reference the user typed, looked
    for in the working directory too and remembered where it was found (:func:`import_roots`;
    an entry point's distribution is installed: a child process finds it as this one did)."""
    module_name, _, qualname = (part.strip() for part in reference.partition(":"))
    dotted = (module_name.split("."), qualname.split("."))
    if not all(part.isidentifier() for parts in dotted for part in parts):
        raise ValueError(f"{kind} {label}: expected package.module:Class")
    if record_root:  # (an entry point's module is installed: found without it)
        _import_from_working_directory()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise ValueError(
                f"{kind} {label}: no module named {missing!r} on the Python path or in the "
                f"working directory {_working_directory()}"
            ) from None
        raise ValueError(
            f"{kind} {label}: importing {module_name} failed: {one_line(exc)}"
        ) from None
    except Exception as exc:  # whatever the user's module raised: one line, not its traceback
        raise ValueError(
            f"{kind} {label}: importing {module_name} failed: {type(exc).__name__}: "
            f"{one_line(exc)} (python -c 'import {module_name}' shows where)"
        ) from None
    found: object = module
    for part in qualname.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ValueError(f"{kind} {label}: module {module_name} has no {qualname}") from None
    where = f"{module_name}.{qualname}"
    expected = f"{base.__module__}.{base.__qualname__}"
    if not isinstance(found, type) or not issubclass(found, base):
        raise ValueError(f"{kind} {label}: {where} is not a subclass of {expected}")
    name = getattr(found, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} {label}: {where} has no name (set the class attribute name)")
    if not NAME.match(name):
        raise ValueError(
            f"{kind} {label}: {where}'s name {name!r} must be letters, digits, '.', '_' or '-'"
        )
    if name in builtins and builtins[name] is not found:
        raise ValueError(
            f"{kind} {label}: {where}'s name {name!r} is a built-in {kind}'s; give it another"
        )
    if record_root:
        _record_root(module_name)
    return found


def _working_directory() -> str:
    try:
        return os.getcwd()
    except OSError:  # (deleted under us)
        return "?"


def _import_from_working_directory() -> None:
    """Put the working directory on the Python path (at the end: it never shadows an installed
    module), as ``python -m`` does and a console script does not, so that ``--policy
    my_policy:Mine`` finds ``./my_policy.py`` whichever way the command was started."""
    cwd = _working_directory()
    if cwd != "?" and "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)


def _record_root(module_name: str) -> None:
    """Remember the folder on the Python path that ``module_name``'s top package (or module)
    was found in."""
    top = sys.modules.get(module_name.split(".")[0])
    places = list(getattr(top, "__path__", None) or [])  # a package (namespace ones: several)
    if not places and getattr(top, "__file__", None):
        places = [top.__file__]
    for place in places:
        root = str(Path(place).resolve().parent)
        if root not in _ROOTS:
            _ROOTS.append(root)
