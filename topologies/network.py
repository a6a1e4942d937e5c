"""Start a topology in Mininet the way this machine needs it (root only).

- switches: Open vSwitch on the userspace datapath, OpenFlow 1.3, secure fail mode (no kernel
  module here, see docs/architecture.md);
- links: ``TCLink`` with the topology's ``bw``; on every switch port the root qdisc is then
  replaced by the 8 priority classes of :mod:`topologies.qos` at the link's rate (a fabric's
  uplinks included), and with
  ``host_priorities`` on the hosts' side too, at their links' rate (their filters follow the
  controller's rules, see :mod:`topologies.host_qos`);
- hosts: TCP checksum offload off (TCP through the userspace datapath needs it), and TCP's
  retransmission timeout capped (``tcp_rto_max_ms``, see :data:`TCP_RTO_MAX_MS`);
- controller: a remote one on 127.0.0.1.

Always ``stop()`` what :func:`start` returns, in ``finally``.

One testbed at a time per machine: every Mininet testbed uses the same switch, host and
interface names, so :func:`start` first takes a machine-wide lock (:func:`testbed_lock`) and a
second run stops at once with an error naming the holder, instead of deleting a live run's
switch. A process may hold the lock across several networks (a whole experiment).

The lock does not keep out anything else on the machine with these names (a user's own
``sudo mn`` makes ``s1`` and ``s1-eth1`` too), so what a run makes carries its mark
(:mod:`topologies.ownership`): the bridges from the transaction that adds them
(:class:`MarkedSwitch`), the switch ports from right after their veth pair is made
(:class:`MarkedTCLink`). :func:`start` deletes only a crashed run's marked leftovers and stops
with :class:`NamesTaken` (one line naming each) on anything else with a name it needs;
:func:`stop` deletes only what carries the run's own mark.
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
from functools import partial

from mininet.link import TCLink
from mininet.log import warn
from mininet.net import Mininet
from mininet.node import OVSSwitch, RemoteController, Switch
from mininet.topo import Topo
from mininet.util import errRun

from topologies import ownership
from topologies.host_qos import TcRunner, host_batch
from topologies.qos import apply_htb
from topologies.testbed import (
    RTO_MAX_SYSCTL,
    TCP_RTO_MAX_MS,
    rto_cap_supported,
    shaped_bps,
    tune_host,
)

LOCK_PATH = "/run/hpo-testbed.lock"
NamesTaken = ownership.NamesTaken  # what start raises besides TestbedBusy, for callers to catch


class TestbedBusy(RuntimeError):
    """Another process holds the machine's testbed lock; the message names it."""


class testbed_lock:  # noqa: N801 (used like a function: ``with testbed_lock():``)
    """The machine-wide testbed lock, re-entrant within this process.

    ``flock`` on :data:`LOCK_PATH`: the kernel drops it when the holder exits, even by
    ``kill -9``, so a crashed run never blocks the next one. The file names the holder.
    """

    _fd: int | None = None
    _depth = 0

    def __init__(self, path: str = LOCK_PATH) -> None:
        self.path = path

    def __enter__(self) -> testbed_lock:
        self.acquire()
        return self

    def __exit__(self, *_exc) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock (or count one more holder in this process); :class:`TestbedBusy` if
        another process has it."""
        cls = type(self)
        if cls._depth == 0:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise TestbedBusy(
                    f"another testbed run holds {self.path} ({holder}); wait for it to end or "
                    "stop that process (one Mininet testbed per machine)"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}: {' '.join(sys.argv)}\n".encode(), 0)
            cls._fd = fd
        cls._depth += 1

    def release(self) -> None:
        """Drop one hold; the last one releases the lock."""
        cls = type(self)
        cls._depth -= 1
        if cls._depth == 0 and cls._fd is not None:
            os.close(cls._fd)  # releases the flock
            cls._fd = None


def tc_runner(host) -> TcRunner:
    """Runs ``tc -batch`` lines inside a Mininet host; raises on a failing command."""

    def run(lines: list[str]) -> None:
        proc = host.popen(
            ["tc", "-force", "-batch", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _, err = proc.communicate("\n".join(lines) + "\n", timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"tc -batch in {host.name} failed: {err.strip()}")

    return run


def start(
    topo: Topo,
    controller_port: int = 6653,
    host_priorities: bool = False,
    tcp_rto_max_ms: int | None = TCP_RTO_MAX_MS,
) -> Mininet:
    """Build and start ``topo``; the caller must call ``stop(net)``.

    With ``host_priorities`` every host's egress gets the priority classes too (its filters are
    then kept by a :class:`topologies.host_qos.HostPriorities`). ``tcp_rto_max_ms`` caps TCP's
    retransmission timeout in every host (``None``: the kernel's 120 s); a kernel without the
    setting raises ``RuntimeError``, so check :func:`rto_cap_supported` first."""
    if tcp_rto_max_ms is not None and not rto_cap_supported():
        raise RuntimeError(
            f"this kernel has no {RTO_MAX_SYSCTL} (Linux 6.15+); run without the cap"
        )
    lock = testbed_lock()
    lock.acquire()
    try:
        net = _start_locked(topo, controller_port, host_priorities, tcp_rto_max_ms)
    except BaseException:
        lock.release()
        raise
    net.hpo_lock = lock
    return net


class LoopbackController(RemoteController):
    """Mininet's remote controller, its liveness checked by a plain TCP connect.

    Mininet's own check pipes ``telnet`` to the port through its shell and decodes what comes
    back as UTF-8; an OpenFlow controller answers with a binary hello whose random transaction
    id is often not UTF-8, and the decode then fails the whole start (seen in CI)."""

    def checkListening(self) -> None:
        """Warn, as Mininet does, if nothing accepts connections at the controller's port."""
        if not accepts_connections(self.ip, self.port):
            warn(f"Unable to contact the remote controller at {self.ip}:{self.port}\n")


def accepts_connections(ip: str, port: int, timeout_s: float = 5.0) -> bool:
    """Whether a TCP connection to ``ip``:``port`` is accepted (nothing is read from it)."""
    try:
        with socket.create_connection((ip, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _start_locked(topo, controller_port, host_priorities, tcp_rto_max_ms) -> Mininet:
    owner = ownership.this_process("testbed")
    names = ownership.mininet_names(topo)
    # Under the lock no other testbed run is live, so a bridge or port marked by one is a
    # crashed run's leftover; anything else with these names is refused before anything is made.
    ownership.claim(names, owner)
    net = Mininet(
        topo=topo,
        switch=partial(
            MarkedSwitch, owner=owner, datapath="user", protocols="OpenFlow13", failMode="secure"
        ),
        link=partial(MarkedTCLink, owner=owner),
        controller=partial(LoopbackController, ip="127.0.0.1", port=controller_port),
        autoSetMacs=False,
        waitConnected=False,
        build=False,  # net.start builds it, inside the try: a failing link is then cleaned up
    )
    net.hpo_owner, net.hpo_names = owner, names
    try:
        net.start()
        ownership.confirm(names.bridges, owner)
        for host in net.hosts:
            tune_host(host, tcp_rto_max_ms)
        for sw in net.switches:
            for intf in sw.intfList():
                if intf.name != "lo":  # every port at its own link's rate (a fabric's uplinks)
                    apply_htb([intf.name], shaped_bps(intf))
        if host_priorities:
            for host in net.hosts:
                intf = host.defaultIntf()
                tc_runner(host)(host_batch(intf.name, shaped_bps(intf)))
    except BaseException:
        _stop_unlocked(net)
        raise
    return net


def stop(net: Mininet) -> None:
    """Stop the network, delete what carries its mark and release the testbed lock."""
    try:
        _stop_unlocked(net)
    finally:
        lock = getattr(net, "hpo_lock", None)
        if lock is not None:
            net.hpo_lock = None
            lock.release()


def _stop_unlocked(net: Mininet) -> None:
    try:
        net.stop()
    finally:
        for controller in net.controllers:  # LoopbackController.stop leaves its shell running
            controller.terminate()
        # what net.stop did not get to (it failed part way), and only what carries our mark
        ownership.release(net.hpo_names, net.hpo_owner)


def keep_existing_bridge(command: str, bridge: str) -> str:
    """Mininet's ``ovs-vsctl`` command starting switch ``bridge``, without the ``--if-exists
    del-br`` it runs first in the same transaction: ``add-br`` then fails on a bridge of that
    name (someone else's, made since :func:`ownership.claim`) instead of deleting it."""
    return command.replace(
        f" -- --if-exists del-br {bridge} -- add-br {bridge} ", f" -- add-br {bridge} "
    )


class MarkedSwitch(OVSSwitch):
    """An OVS switch whose bridge carries ``owner``'s mark (an :class:`ownership.Owner`) from
    the transaction that adds it, and which deletes a bridge only while it carries that mark.

    Mininet's own start deletes any bridge of the switch's name, and its stop deletes the bridge
    and an interface of that name, whoever made them.
    """

    def __init__(self, name, owner: ownership.Owner, **params):
        self.owner = owner
        super().__init__(name, **params)

    def bridgeOpts(self) -> str:  # noqa: N802 (Mininet's name)
        """Mininet's bridge settings and the owner's mark, set with ``add-br``."""
        return f"{super().bridgeOpts()} {ownership.bridge_mark(self.owner)}"

    def vsctl(self, *args, **kwargs):
        """Mininet's ``ovs-vsctl`` (run now or kept for a batch) minus the ``del-br`` of this
        switch's name (:func:`keep_existing_bridge`)."""
        args = tuple(keep_existing_bridge(str(arg), self.name) for arg in args)
        return super().vsctl(*args, **kwargs)

    def ours(self) -> bool:
        """Whether the bridge of this switch's name carries its owner's mark."""
        return _marked_bridges([self]) == [self]

    def stop(self, deleteIntfs=True):  # noqa: N803 (Mininet's name)
        """Mininet's stop if the bridge is ours; otherwise only the ports this switch made."""
        if self.ours():
            super().stop(deleteIntfs)
        else:
            Switch.stop(self, deleteIntfs)

    @classmethod
    def batchShutdown(cls, switches, run=errRun):  # noqa: N802 (Mininet's name)
        """Mininet's batch stop (``del-br``, then the switches' shells end) for those whose bridge
        carries their owner's mark; the others' shells only end."""
        ours = _marked_bridges(switches)
        if ours:
            super().batchShutdown(ours, run)
        for switch in switches:
            if switch not in ours:
                switch.terminate()
        return switches


def _marked_bridges(switches) -> list:
    """Those of ``switches`` whose bridge carries their own owner's mark (none when OVS does
    not answer: nothing could be deleted then either)."""
    try:
        marks = ownership.bridge_marks()
    except ownership.CommandFailed:
        return []
    return [s for s in switches if marks.get(s.name) == s.owner.tag]


class MarkedTCLink(TCLink):
    """Mininet's shaped link whose ends in the root namespace (switch ports) carry ``owner``'s
    mark from right after the veth pair is made."""

    def __init__(self, node1, node2, owner: ownership.Owner, **params):
        super().__init__(node1, node2, **params)
        try:
            for intf in (self.intf1, self.intf2):
                if not intf.node.inNamespace:
                    ownership.mark_interface(intf.name, owner)
        except ownership.CommandFailed:
            self.delete()  # unmarked, a later run could not tell it from someone else's
            raise
