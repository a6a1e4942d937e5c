"""What this project creates on the machine carries its owner's mark; only that is ever deleted.

A testbed, benchmark or test network needs fixed names: OVS bridges (``s1``), interfaces in the
root network namespace (switch ports ``s1-eth1``; a userspace bridge's own interface has the
bridge's name) and, for the namespace fabric of the tests, named network namespaces. Others on
the machine may use the same names (a user's own ``sudo mn`` makes ``s1`` and ``s1-eth1``), and
the testbed lock keeps only testbed runs apart. So every object is marked when it is made:

- a bridge: ``external_ids:hpo-netsched=<tag>`` in the ``ovs-vsctl`` transaction that adds it;
- an interface: its alias, ``hpo-netsched=<tag>`` (``ip link set dev X alias ...``);
- a named namespace: the alias of its loopback interface, the same way.

The tag is ``<kind>.<pid>.<start>``: the process that made it and that process's start time, so
a reused PID is not taken for the owner. Before making its names a run calls :func:`claim`: an
object marked by a process that is gone (a crashed run) or by this process is deleted; an
unmarked one, or one of a running process, stops the run with :class:`NamesTaken`, one line
naming each and how to free it. Afterwards :func:`release` deletes only what carries this run's
own tag.

Everything that runs a command takes a ``run`` function (argv in, ``CompletedProcess`` out), so
the decisions are testable on recorded outputs; :func:`plan` itself runs nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

KEY = "hpo-netsched"
ALIAS_PREFIX = f"{KEY}="

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess]


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess:
    """Run ``argv``, capturing its output as text (never raises on a non-zero status)."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)


class CommandFailed(RuntimeError):
    """A command needed to read or change the machine's network failed; the message says which."""


def _checked(result: subprocess.CompletedProcess, argv: Sequence[str]) -> str:
    if result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip() or f"status {result.returncode}"
        raise CommandFailed(f"{' '.join(argv)}: {detail}")
    return result.stdout


@dataclass(frozen=True)
class Owner:
    """Who made an object: a kind of run (``testbed``, ``bench``, ``test``), a PID and that
    process's start time (clock ticks after boot, ``/proc/<pid>/stat`` field 22)."""

    kind: str
    pid: int
    start: int

    @property
    def tag(self) -> str:
        """The mark's value: ``<kind>.<pid>.<start>`` (characters OVSDB and a shell take bare)."""
        return f"{self.kind}.{self.pid}.{self.start}"

    @classmethod
    def parse(cls, tag: str | None) -> Owner | None:
        """The owner a mark names, or ``None`` for no mark or one not of this form."""
        match = re.fullmatch(r"([a-z][a-z0-9-]*)\.(\d+)\.(\d+)", tag or "")
        if match is None:
            return None
        return cls(match[1], int(match[2]), int(match[3]))


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), or ``None`` if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces and ")"
    return int(stat.rsplit(")", 1)[1].split()[19])


def this_process(kind: str) -> Owner:
    """This process as the owner of what it makes, as ``kind`` of run."""
    if not re.fullmatch(r"[a-z][a-z0-9-]*", kind):
        raise ValueError(f"an owner's kind is lower-case letters, digits and '-', not {kind!r}")
    pid = os.getpid()
    start = process_start(pid)
    if start is None:
        raise RuntimeError("/proc/self/stat is unreadable: no process start time to mark with")
    return Owner(kind, pid, start)


def running(owner: Owner) -> bool:
    """Whether ``owner``'s process still runs (the same PID and the same start time)."""
    return process_start(owner.pid) == owner.start


@dataclass(frozen=True)
class Names:
    """Names a run makes: OVS bridges, interfaces in this (the root) network namespace, and named
    network namespaces."""

    bridges: tuple[str, ...] = ()
    interfaces: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class Found:
    """What exists with its mark's value (``None``: unmarked): every bridge, every interface of
    the root namespace, and the wanted named namespaces (the alias of their loopback)."""

    bridges: Mapping[str, str | None] = field(default_factory=dict)
    interfaces: Mapping[str, str | None] = field(default_factory=dict)
    namespaces: Mapping[str, str | None] = field(default_factory=dict)


BRIDGE, INTERFACE, NAMESPACE = "OVS bridge", "interface", "network namespace"
_DELETE = {BRIDGE: "ovs-vsctl del-br", INTERFACE: "ip link del", NAMESPACE: "ip netns del"}


@dataclass(frozen=True)
class Taken:
    """A wanted name in use: what it is and, when it is marked by a running process, whose."""

    what: str
    name: str
    owner: Owner | None = None


@dataclass(frozen=True)
class Plan:
    """What :func:`claim` does: the leftovers of this project's runs it deletes, and the names in
    use by others it refuses (if any, it deletes nothing)."""

    delete: Names
    taken: tuple[Taken, ...]


class NamesTaken(Exception):  # noqa: N818 (reads as what it reports)
    """Names a run needs are in use by something it did not make; the message is one line naming
    each and how to free it.

    Not a ``RuntimeError``: the retry and "the other runs go on" loops of the experiments catch
    those, and every later run would find the same names taken.
    """

    def __init__(self, taken: Sequence[Taken]) -> None:
        self.taken = tuple(taken)
        super().__init__(describe(self.taken))


def _plural(items: Sequence, one: str, many: str) -> str:
    return one if len(items) == 1 else many


def describe(taken: Sequence[Taken]) -> str:
    """One line naming every taken name and how to free it."""
    parts = []
    foreign = [t for t in taken if t.owner is None]
    if foreign:
        them = _plural(foreign, "it", "them")
        commands = "; ".join(f"{_DELETE[t.what]} {t.name}" for t in foreign)
        parts.append(
            f"{', '.join(f'{t.what} {t.name}' for t in foreign)} "
            f"{_plural(foreign, 'exists', 'exist')} and {_plural(foreign, 'was', 'were')} not "
            f"made by this project's runs: delete {them} if nothing uses {them} ({commands}) "
            f"or stop what uses {them}"
        )
    owners = sorted({t.owner for t in taken if t.owner is not None}, key=lambda o: o.pid)
    for owner in owners:
        mine = [t for t in taken if t.owner == owner]
        parts.append(
            f"{', '.join(f'{t.what} {t.name}' for t in mine)} "
            f"{_plural(mine, 'belongs', 'belong')} to the running process {owner.pid} (a "
            f"{owner.kind} run): wait for it to end or stop it"
        )
    return "names this run needs are taken: " + "; ".join(parts)


def plan(wanted: Names, found: Found, me: Owner, alive: Callable[[Owner], bool] = running) -> Plan:
    """Decide, for every wanted name that exists, delete (marked by this process or by one that
    is gone) or refuse (unmarked, or marked by another running process). An interface named like
    a wanted bridge that exists is that bridge's own and goes with it."""
    delete: dict[str, list[str]] = {BRIDGE: [], INTERFACE: [], NAMESPACE: []}
    taken: list[Taken] = []

    def judge(what: str, name: str, mark: str | None) -> None:
        owner = Owner.parse(mark)
        if owner is None:
            taken.append(Taken(what, name))
        elif owner == me or not alive(owner):
            delete[what].append(name)
        else:
            taken.append(Taken(what, name, owner))

    for name in dict.fromkeys(wanted.bridges):
        if name in found.bridges:
            judge(BRIDGE, name, found.bridges[name])
    for name in dict.fromkeys(wanted.interfaces):
        if name in found.interfaces and not (name in wanted.bridges and name in found.bridges):
            judge(INTERFACE, name, found.interfaces[name])
    for name in dict.fromkeys(wanted.namespaces):
        if name in found.namespaces:
            judge(NAMESPACE, name, found.namespaces[name])
    return Plan(
        Names(tuple(delete[BRIDGE]), tuple(delete[INTERFACE]), tuple(delete[NAMESPACE])),
        tuple(taken),
    )


def parse_bridges(text: str) -> dict[str, str | None]:
    """Every bridge and its mark, from ``ovs-vsctl --format=json --columns=name,external_ids
    list Bridge``."""
    table = json.loads(text)
    name_at = table["headings"].index("name")
    ids_at = table["headings"].index("external_ids")
    found = {}
    for row in table["data"]:
        kind, pairs = row[ids_at]  # an OVSDB map: ["map", [[key, value], ...]]
        found[row[name_at]] = dict(pairs).get(KEY) if kind == "map" else None
    return found


def parse_links(text: str) -> dict[str, str | None]:
    """Every interface and its mark, from ``ip -j link show``."""
    found = {}
    for link in json.loads(text or "[]"):
        alias = link.get("ifalias") or ""
        marked = alias.startswith(ALIAS_PREFIX)
        found[link["ifname"]] = alias[len(ALIAS_PREFIX) :] if marked else None
    return found


def parse_namespaces(text: str) -> set[str]:
    """The named network namespaces, from ``ip -j netns list`` (which prints nothing when
    there are none)."""
    return {entry["name"] for entry in json.loads(text.strip() or "[]")}


BRIDGES_ARGV = ("ovs-vsctl", "--format=json", "--columns=name,external_ids", "list", "Bridge")
LINKS_ARGV = ("ip", "-j", "link", "show")
NAMESPACES_ARGV = ("ip", "-j", "netns", "list")


def _links_argv(namespace: str | None) -> list[str]:
    return ["ip", *(["-n", namespace] if namespace else []), "-j", "link", "show"]


def bridge_marks(run: Runner = run_command) -> dict[str, str | None]:
    """Every OVS bridge and its mark (:class:`CommandFailed` if OVS does not answer)."""
    return parse_bridges(_checked(run(BRIDGES_ARGV), BRIDGES_ARGV))


def survey(wanted: Names, run: Runner = run_command) -> Found:
    """What exists on the machine with the marks it carries (OVS is asked only when bridges are
    wanted, each wanted namespace that exists for its loopback's alias)."""
    bridges = bridge_marks(run) if wanted.bridges else {}
    interfaces = parse_links(_checked(run(LINKS_ARGV), LINKS_ARGV))
    namespaces: dict[str, str | None] = {}
    if wanted.namespaces:
        existing = parse_namespaces(_checked(run(NAMESPACES_ARGV), NAMESPACES_ARGV))
        for name in wanted.namespaces:
            if name in existing:
                argv = _links_argv(name)
                namespaces[name] = parse_links(_checked(run(argv), argv)).get("lo")
    return Found(bridges, interfaces, namespaces)


def check(
    wanted: Names, me: Owner, run: Runner = run_command, alive: Callable[[Owner], bool] = running
) -> Plan:
    """:func:`plan` on what exists now; :class:`NamesTaken` if any wanted name is in use by
    others."""
    decided = plan(wanted, survey(wanted, run), me, alive)
    if decided.taken:
        raise NamesTaken(decided.taken)
    return decided


def claim(
    wanted: Names, me: Owner, run: Runner = run_command, alive: Callable[[Owner], bool] = running
) -> Names:
    """Make ``wanted`` free for ``me``: refuse (:class:`NamesTaken`, nothing deleted) if any is
    in use by others, else delete the leftovers of this project's runs. Returns what it
    deleted."""
    decided = check(wanted, me, run, alive)
    delete(decided.delete, run)
    return decided.delete


def confirm(
    bridges: Sequence[str],
    me: Owner,
    run: Runner = run_command,
    alive: Callable[[Owner], bool] = running,
) -> None:
    """After making ``bridges``: each must carry ``me``'s mark. :class:`NamesTaken` for one that
    someone else made in the meantime (its ``add-br`` then failed), :class:`CommandFailed` for
    one that is missing."""
    marks = bridge_marks(run)
    taken = []
    for name in bridges:
        if name in marks and marks[name] != me.tag:
            owner = Owner.parse(marks[name])
            live = owner is not None and owner != me and alive(owner)
            taken.append(Taken(BRIDGE, name, owner if live else None))
    if taken:
        raise NamesTaken(taken)
    missing = [name for name in bridges if name not in marks]
    if missing:
        raise CommandFailed(
            f"OVS did not add the bridge{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            "(is ovs-vswitchd running? scripts/ovs.sh start)"
        )


def release(wanted: Names, me: Owner, run: Runner = run_command) -> Names:
    """Delete those of ``wanted`` that carry ``me``'s own tag, and nothing else. Returns what it
    deleted."""
    found = survey(wanted, run)

    def ours(names: Iterable[str], marks: Mapping[str, str | None]) -> tuple[str, ...]:
        return tuple(n for n in dict.fromkeys(names) if n in marks and marks[n] == me.tag)

    mine = Names(
        ours(wanted.bridges, found.bridges),
        ours(wanted.interfaces, found.interfaces),
        ours(wanted.namespaces, found.namespaces),
    )
    delete(mine, run)
    return mine


def delete(names: Names, run: Runner = run_command) -> None:
    """Delete these (already judged) objects: namespaces, then bridges, then interfaces. An
    interface already gone is no error: deleting one end of a veth pair deletes both."""
    for name in names.namespaces:
        argv = ["ip", "netns", "del", name]
        _checked(run(argv), argv)
    for name in names.bridges:
        argv = ["ovs-vsctl", "--if-exists", "del-br", name]
        _checked(run(argv), argv)
    for name in names.interfaces:
        argv = ["ip", "link", "del", "dev", name]
        result = run(argv)
        if result.returncode != 0 and run(["ip", "link", "show", "dev", name]).returncode == 0:
            _checked(result, argv)


def bridge_mark(owner: Owner) -> str:
    """The ``ovs-vsctl ... -- set bridge NAME`` setting that marks a bridge as ``owner``'s."""
    return f"external_ids:{KEY}={owner.tag}"


def interface_mark_argv(name: str, owner: Owner, namespace: str | None = None) -> list[str]:
    """The command marking interface ``name`` (in ``namespace``, default the root one)."""
    ns = ["-n", namespace] if namespace else []
    return ["ip", *ns, "link", "set", "dev", name, "alias", f"{ALIAS_PREFIX}{owner.tag}"]


def mark_interface(
    name: str, owner: Owner, run: Runner = run_command, namespace: str | None = None
) -> None:
    """Mark interface ``name`` as ``owner``'s (its alias)."""
    argv = interface_mark_argv(name, owner, namespace)
    _checked(run(argv), argv)


def mark_namespace(name: str, owner: Owner, run: Runner = run_command) -> None:
    """Mark named namespace ``name`` as ``owner``'s (the alias of its loopback interface)."""
    mark_interface("lo", owner, run, namespace=name)


def mininet_names(topo) -> Names:
    """The names Mininet gives ``topo`` outside the hosts' own namespaces: each switch's bridge
    and, on the userspace datapath, its interface of the same name, and every switch port
    ``<switch>-eth<port>`` (Mininet's naming; hosts' ports live in their namespaces)."""
    switches = tuple(topo.switches())
    ports = []
    for _src, _dst, info in topo.links(sort=True, withInfo=True):
        for end in ("1", "2"):
            node = info[f"node{end}"]
            if topo.isSwitch(node):
                ports.append(f"{node}-eth{info[f'port{end}']}")
    return Names(bridges=switches, interfaces=switches + tuple(ports))
