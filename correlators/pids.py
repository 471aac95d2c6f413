"""pid -> rank: which rank a process id of a host was, from every place that states it.

Kernel and driver lines name a process, not a rank: the OOM killer's ``Killed process 48211``,
an ``NVRM: Xid ... pid=647``, a segfault line. The rank is stated elsewhere, by whoever started
or tagged that process:

* ``ranks.<N>.pid`` in a bundle's ``workload.yaml`` (scheduler/launcher records; :class:`~correlators.enrich.Allocation.pids`);
* torchrun's failure summary, one ``torchrun.child_failed`` per entry: ``rank : R (local_rank: L)`` +
  ``exitcode : X (pid: P)`` (global rank and pid of one worker on ``host``);
* torchrun's agent line ``failed (exitcode: X) local_rank: L (pid: P)`` (``proc.killed`` /
  ``proc.exited`` with ``local_rank`` and ``pid``; the rank comes from the allocation's local
  rank on that host, filled by enrichment);
* NCCL's ``host:pid:tid [dev]`` prefix on a line tagged ``[rankN]`` (or whose ``[dev]`` the
  allocation maps to a rank): the extraction engine copies the pid to ``attributes.nccl_pid``.

The map is per host (pids repeat across hosts). A (host, pid) that two sources give different
ranks (a pid reused by a later attempt, a wrong record) is dropped, never guessed, so the map is
a function of the set of statements, not of their order.

:func:`assign_ranks` gives the rank to every event with a ``pid`` attribute and no rank. It
keeps the event's ``event_id``: the rank is a reading of the event in the context of the whole
window (it changes no line), and the verdict's evidence must keep naming the event as stored.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from schemas.records import Event

#: Event types whose ``pid`` + rank state which rank a process was (the launcher's own records).
STATING_TYPES = ("torchrun.child_failed", "proc.killed", "proc.exited")


def pid_statements(alloc, events: Iterable[Event]) -> list[tuple[str, int, int, str]]:
    """Every (host, pid, rank, source) the allocation and the events state, in no order."""
    out: list[tuple[str, int, int, str]] = []
    for (host, pid), rank in getattr(alloc, "pids", {}).items():
        out.append((host, pid, rank, "workload.yaml"))
    for e in events:
        if e.rank is None or not e.host or e.host == "_scheduler":
            continue
        a = e.attributes
        if e.type in STATING_TYPES and _pid(a.get("pid")) is not None:
            out.append((e.host, _pid(a["pid"]), e.rank, e.type))
        if _pid(a.get("nccl_pid")) is not None:
            out.append((e.host, _pid(a["nccl_pid"]), e.rank, "nccl_prefix"))
    return out


def pid_map(alloc, events: Iterable[Event]) -> dict[tuple[str, int], int]:
    """(host, pid) -> rank; pairs stated with two different ranks are left out."""
    ranks: dict[tuple[str, int], set[int]] = {}
    for host, pid, rank, _ in pid_statements(alloc, events):
        ranks.setdefault((host, pid), set()).add(rank)
    return {key: next(iter(r)) for key, r in sorted(ranks.items()) if len(r) == 1}


def assign_ranks(alloc, events: Mapping[str, Event]) -> dict[str, Event]:
    """``events`` (event_id -> event) with the rank of every pid-bearing, rank-less event filled
    from :func:`pid_map` (same ids; unchanged events are the same objects)."""
    table = pid_map(alloc, events.values())
    if not table:
        return dict(events)
    out: dict[str, Event] = {}
    for event_id, e in events.items():
        pid = _pid(e.attributes.get("pid"))
        rank = table.get((e.host, pid)) if pid is not None and e.rank is None else None
        if rank is not None:
            attrs = {**e.attributes, "rank_from": "pid"}
            e = e.model_copy(update={"rank": rank, "attributes": attrs})
        out[event_id] = e
    return out


def _pid(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    return None
