"""Offset continuity of the worker's agents: a record Faust never handed over is read again.

Faust (0.15) can leave records of a partition out of an agent's stream across a rebalance: it
resumes the flow before it seeks to the committed offsets, reads records from where the
consumer had fetched ahead, drops the records it reads again below the highest offset it has
read, and counts the offsets it jumped over as processed (its "gaps"), so its commits pass
records no agent processed (seen with two and three workers and a rebalance mid-stream:
observations of one partition never extracted, a verdict without its cause). The internal
topics the agents read (by-workload and by-fabric) are never compacted and never written in
transactions, so their offsets are consecutive: a jump is a record left out.

Three measures close it, with :mod:`streams.faust_transport`: the stream partitions resume
only after the seek; a jump in these topics, or a record missing right after the committed
offset, is never committed past (the transport's ``_add_gap`` and ``_new_offset``), so the
records stay uncommitted until processed; and :class:`ContinuityGuard`
follows, per topic partition and consumer generation, the first offset not yet handed over,
from the committed offset the consumer was seeked to (:meth:`ContinuityGuard.start`): an
offset past it is a gap, and the driver seeks the partition back to the gap
(:meth:`ContinuityGuard.seen` says where). The record in hand is processed all the same, and
every record read again collapses by id downstream (the pipeline is idempotent).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

#: Largest number of offsets held past a gap per partition; beyond it the partition's
#: tracking starts again at the newest offset (a gap that never fills is counted in
#: ``ContinuityGuard.abandoned`` and logged by the worker, not held).
MAX_AHEAD = 100_000
#: Records handed over past a gap after a seek back before the guard asks for the seek again
#: (Faust can drop the records read again once more when a stale fetch follows the seek).
RESEEK_AFTER = 256


@dataclass
class _Partition:
    generation: int
    next: int  # the first offset not handed over yet
    ahead: set[int] = field(default_factory=set)  # offsets handed over past ``next``
    sought: int | None = None  # the gap last sought back to
    since_seek: int = 0  # records handed over past the gap since that seek


class ContinuityGuard:
    """Which offsets of each partition an agent has been handed, within one consumer
    generation.

    ``seen(tp, offset, generation)`` -> the offset to seek ``tp`` back to (the first one left
    out) when ``offset`` skips past offsets not handed over yet and no seek to that offset is
    outstanding (again after :data:`RESEEK_AFTER` more records while it stays open); else
    None. Where a partition starts in a generation is set by :meth:`start` (the committed
    offset the consumer was seeked to), else by its first record (a gap before it is not seen
    then); a record of an earlier generation than the partition's is ignored. ``tp`` is any hashable partition id (Faust's
    ``TP``); offsets are Kafka offsets (int); ``generation`` the consumer group generation."""

    def __init__(self) -> None:
        self._parts: dict[Hashable, _Partition] = {}
        self.gaps = 0  # gaps seen (a gap partly filled by a re-read is still the same gap)
        self.abandoned = 0  # gaps given up after MAX_AHEAD offsets past them

    def seen(self, tp: Hashable, offset: int, generation: int) -> int | None:
        part = self._parts.get(tp)
        if part is not None and generation < part.generation:
            return None  # a record of an earlier generation, handed over late: no bearing
        if part is None or part.generation != generation:
            self._parts[tp] = _Partition(generation=generation, next=offset + 1)
            return None
        if offset < part.next or offset in part.ahead:
            return None  # read again after a seek: handed over before
        if offset == part.next:
            part.next += 1
            while part.next in part.ahead:
                part.ahead.discard(part.next)
                part.next += 1
            if not part.ahead:
                part.sought = None
            return None
        part.ahead.add(offset)
        if len(part.ahead) > MAX_AHEAD:
            self.abandoned += 1
            self._parts[tp] = _Partition(generation=generation, next=offset + 1)
            return None
        if part.sought == part.next:
            part.since_seek += 1
            if part.since_seek < RESEEK_AFTER:
                return None  # the seek back is on its way
        elif part.sought is None:
            self.gaps += 1  # a new gap (a re-read that fills part of one leaves the same gap)
        part.sought, part.since_seek = part.next, 0
        return part.next

    def start(self, tp: Hashable, offset: int, generation: int) -> None:
        """The first record of ``tp`` in ``generation`` is at ``offset`` (where the consumer
        was seeked): a first record past it is a gap. Nothing changes for a partition already
        followed in that generation or a later one."""
        part = self._parts.get(tp)
        if part is None or part.generation < generation:
            self._parts[tp] = _Partition(generation=generation, next=offset)

    def open_gaps(self) -> dict[Hashable, int]:
        """Partition -> the first offset left out, for every partition with records handed over
        past a gap that has not filled yet (a driver seeks back again to a gap that stays open:
        a quiet partition brings no record that would ask for it)."""
        return {tp: part.next for tp, part in self._parts.items() if part.ahead}

    def missing(self, tp: Hashable) -> int:
        """How many offsets of ``tp`` below the highest one handed over are not handed over
        yet (0 for a partition not seen)."""
        part = self._parts.get(tp)
        if part is None or not part.ahead:
            return 0
        return max(part.ahead) - part.next + 1 - len(part.ahead)

    def reset(self) -> None:
        """Forget every partition (a rebalance: the generation starts again)."""
        self._parts.clear()
