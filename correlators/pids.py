"""pid -> rank: which rank a process id of a host was, from every place that states it.

Kernel and driver lines name a process, not a rank: the OOM killer's ``Killed process 48211``,
an ``NVRM: Xid ... pid=647``, a segfault line. The rank is stated elsewhere, by whoever started
or tagged that process:

* ``ranks.<N>.pid`` in a bundle's ``workload.yaml`` (scheduler/launcher records; :class:`~correlators.enrich.Allocation.pids`);
* the scheduler's step records, ``workload.yaml`` ``task_pids`` (:attr:`~correlators.enrich.Allocation.task_pids`;
  the bundle reader fills them from ``scontrol listpids`` tables, :mod:`connectors.slurm_pids`):
  a task's global id (``SLURM_PROCID``) is its rank when srun started one task per rank. A
  step whose task ids the allocation places on other hosts (or does not have) was started
  otherwise (one launcher task per node: the task id is the node's index) and states no rank;
  without a rank layout the records are taken as stated;
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
    out += task_statements(alloc)
    for e in events:
        if e.rank is None or not e.host or e.host == "_scheduler":
            continue
        a = e.attributes
        if e.type in STATING_TYPES and _pid(a.get("pid")) is not None:
            out.append((e.host, _pid(a["pid"]), e.rank, e.type))
        if _pid(a.get("nccl_pid")) is not None:
            out.append((e.host, _pid(a["nccl_pid"]), e.rank, "nccl_prefix"))
    return out


def task_statements(alloc) -> list[tuple[str, int, int, str]]:
    """(host, pid, rank, source) of the allocation's step records (``alloc.task_pids``) whose
    step's task ids agree with the rank layout: every record of the step names a rank that
    ``alloc.ranks`` places on the record's host. A step with one record that does not is
    left out whole (its task ids are not the training ranks); records without a step are one
    group. No layout (empty ``alloc.ranks``): every record, as stated."""
    records = list(getattr(alloc, "task_pids", ()))
    layout = getattr(alloc, "ranks", {})
    if layout:
        bad_steps = {step for host, _pid, rank, step, _src in records
                     if rank not in layout or layout[rank][0] != host}
        records = [r for r in records if r[3] not in bad_steps]
    return [(host, pid, rank, source) for host, pid, rank, _step, source in records]


def pid_map(alloc, events: Iterable[Event]) -> dict[tuple[str, int], int]:
    """(host, pid) -> rank; pairs stated with two different ranks are left out."""
    ranks: dict[tuple[str, int], set[int]] = {}
    for host, pid, rank, _ in pid_statements(alloc, events):
        ranks.setdefault((host, pid), set()).add(rank)
    return {key: next(iter(r)) for key, r in sorted(ranks.items()) if len(r) == 1}


def pid_conflicts(alloc, events: Iterable[Event]) -> list[str]:
    """One sentence per (host, pid) that a rank-less event names and that two sources give
    different ranks (so :func:`pid_map` leaves it out), e.g. ``"pid 647 on node-a01 is stated
    as rank 3 (scheduler/node-a01/scontrol-listpids.txt:5) and rank 5 (...:19): no rank taken
    from it"``; sorted by host, pid."""
    events = list(events)
    named = {(e.host, _pid(e.attributes.get("pid"))) for e in events if e.rank is None and "pid" in e.attributes}
    if not named:
        return []  # no rank-less event names a pid: nothing to explain
    stated: dict[tuple[str, int], dict[int, set[str]]] = {}
    for host, pid, rank, source in pid_statements(alloc, events):
        stated.setdefault((host, pid), {}).setdefault(rank, set()).add(source)
    out = []
    for (host, pid), ranks in sorted(stated.items()):
        if len(ranks) > 1 and (host, pid) in named:
            said = " and ".join(f"rank {r} ({', '.join(sorted(src))})" for r, src in sorted(ranks.items()))
            out.append(f"pid {pid} on {host} is stated as {said}: no rank taken from it")
    return out


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
