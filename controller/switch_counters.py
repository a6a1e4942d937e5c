"""The switches' port and queue byte counters, as they last reported them, by priority level.

The Ryu glue asks every switch for its port and queue statistics periodically
(``OFPPortStatsRequest`` / ``OFPQueueStatsRequest``) and hands each reply's numbers to
:class:`SwitchCounters`; ``/metrics`` reads them back (:mod:`controller.telemetry`). Nothing here
talks OpenFlow.

A queue is a priority level's HTB class when the switch serves the classes as its queues:
level l is queue 0x0f + l (:func:`controller.schedule.queue_level`). Queues of no level (the
classes' parent, the control class) are kept with the port but belong to no level.

Counters are the switch's own, cumulative since the port or queue was made: they fall back when
a switch restarts, which Prometheus' ``rate()`` takes as a counter reset. A reply may come in
several messages (OpenFlow's "more" flag): the switch's set of ports or queues is replaced when
the last one arrives, so a port that went away is dropped then.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controller.schedule import queue_level


@dataclass(frozen=True)
class PortSample:
    """One port's counters in a port statistics reply."""

    port_no: int
    rx_bytes: int
    tx_bytes: int
    rx_packets: int = 0
    tx_packets: int = 0
    tx_dropped: int = 0


@dataclass(frozen=True)
class QueueSample:
    """One queue's counters in a queue statistics reply."""

    port_no: int
    queue_id: int
    tx_bytes: int
    tx_packets: int = 0
    tx_errors: int = 0


class SwitchCounters:
    """The last reported port and queue counters of every connected switch."""

    def __init__(self) -> None:
        self.ports: dict[int, dict[int, PortSample]] = {}
        self.queues: dict[int, dict[tuple[int, int], QueueSample]] = {}
        # parts of a reply whose last message has not come yet, by switch
        self._ports_part: dict[int, dict[int, PortSample]] = {}
        self._queues_part: dict[int, dict[tuple[int, int], QueueSample]] = {}

    def ports_reported(self, dpid: int, samples: Iterable[PortSample], last: bool = True) -> None:
        """A port statistics reply (or one message of it, ``last`` being whether it ends it)."""
        part = self._ports_part.setdefault(dpid, {})
        part.update((s.port_no, s) for s in samples)
        if last:
            self.ports[dpid] = self._ports_part.pop(dpid)

    def queues_reported(self, dpid: int, samples: Iterable[QueueSample], last: bool = True) -> None:
        """A queue statistics reply (or one message of it, ``last`` being whether it ends it)."""
        part = self._queues_part.setdefault(dpid, {})
        part.update(((s.port_no, s.queue_id), s) for s in samples)
        if last:
            self.queues[dpid] = self._queues_part.pop(dpid)

    def switch_gone(self, dpid: int) -> None:
        """A switch disconnected: forget its counters."""
        for table in (self.ports, self.queues, self._ports_part, self._queues_part):
            table.pop(dpid, None)

    def level_tx_bytes(self) -> dict[tuple[int, int, int], int]:
        """Bytes sent per ``(switch, port, level)``, from the queues that are a level's class."""
        out: dict[tuple[int, int, int], int] = {}
        for dpid, queues in self.queues.items():
            for (port_no, queue_id), sample in queues.items():
                level = queue_level(queue_id)
                if level is not None:
                    key = (dpid, port_no, level)
                    out[key] = out.get(key, 0) + sample.tx_bytes
        return out
