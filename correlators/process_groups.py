"""Process-group membership: which global ranks belong to which process group, from what the
ranks' own logs state.

A job has many process groups besides the world (data-, tensor-, pipeline-parallel groups made
with ``new_group`` / ``split_group``); a watchdog timeout names the group it was in, not its
members. The members are stated at initialisation, each by the member itself
(``nccl.pg_init`` events, ``correlators/rules/nccl.yaml``):

* ``stage: pg_options`` -- ProcessGroupNCCL's ``initialization options: size: N, global rank:
  G`` under the ``[PG ID <id> PG GUID <guid>(<desc>) Rank <group rank>]`` prefix (2.4+) or
  ``[PG <name> Rank r]`` (2.2-2.3): rank G is a member, the group has N members;
* ``stage: comm_created`` -- ``ProcessGroupNCCL created ncclComm_ 0x..`` under the same prefix:
  the rank is a member, and the pointer names the group's NCCL communicator in that process;
* ``stage: comm_init`` -- NCCL's ``comm 0x.. rank r nranks n ... - Init COMPLETE``: the
  communicator has n members; through the pointer it adds to the group the ``comm_created``
  line of the same rank named.

A group's identity across ranks is its GUID (PyTorch: the group name, "a global unique ID
across ranks"; ``PG Name:`` in the options line) when the line states one, else the id as
printed (``PG ID`` is the creation index on one rank, the same on every rank that created its
groups in the same order; ``[PG n Rank r]`` of 2.2-2.3). A wait (``nccl.watchdog_timeout`` with
``pg``) is placed in a group through its own rank's statements: the rank that logged ``PG ID 3``
at init with GUID 5 waited in GUID 5.

Membership is *known* when as many distinct ranks stated it as the size says. Contradictions
(two sizes for one group, more members than its size, one rank's id naming two groups) make
the group or the mapping unknown, never guessed. The result is a function of the set of events,
not of their order. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterable

from schemas.records import Event

#: The event type that states membership (``correlators/vocabulary.py``).
INIT_TYPE = "nccl.pg_init"


@dataclass(frozen=True)
class ProcessGroup:
    """One process group as its members stated it.

    ``key``: the cross-rank identity (``"guid:<guid>"`` or ``"pg:<id>"``); ``label``: how the
    logs print it (``"PG 3 (pp_group, GUID 5)"``); ``size``: the stated member count (None when
    unstated or contradictory); ``members``: the global ranks that stated membership."""

    key: str
    label: str
    size: int | None
    members: frozenset[int]

    @property
    def known(self) -> bool:
        """Every member stated itself: ``len(members) == size``."""
        return self.size is not None and len(self.members) == self.size


@dataclass
class Membership:
    """Process groups of one workload. ``groups``: key -> :class:`ProcessGroup`; ``local``:
    (global rank, printed PG id) -> key, how one rank's ``pg`` attribute resolves (absent when
    that rank stated two groups under one id)."""

    groups: dict[str, ProcessGroup] = field(default_factory=dict)
    local: dict[tuple[int, int], str] = field(default_factory=dict)

    def group_of(self, event: Event) -> ProcessGroup | None:
        """The group an event with ``pg`` (and a global ``rank``) was in: through its rank's own
        init statement, else through the id when every rank that stated that id meant the same
        group. None when the event names no group or the group is not stated."""
        pg = event.attributes.get("pg")
        if not isinstance(pg, int) or isinstance(pg, bool):
            return None
        key = self.local.get((event.rank, pg)) if event.rank is not None else None
        if key is None:
            keys = {k for (_, i), k in self.local.items() if i == pg}
            if len(keys) != 1:
                return None
            key = next(iter(keys))
        return self.groups.get(key)


def _key(attrs: dict) -> str | None:
    guid = attrs.get("pg_guid") or attrs.get("pg_name")
    if guid not in (None, ""):
        return f"guid:{guid}"
    if isinstance(attrs.get("pg"), int):
        return f"pg:{attrs['pg']}"
    return None


def _label(attrs: dict) -> str:
    pg, guid, desc = attrs.get("pg"), attrs.get("pg_guid") or attrs.get("pg_name"), attrs.get("pg_desc")
    head = f"PG {pg}" if pg is not None else f"PG {guid}"
    extra = [d for d in (desc, f"GUID {guid}" if guid not in (None, "") and str(guid) != str(pg) else None) if d]
    return head + (f" ({', '.join(extra)})" if extra else "")


def build_membership(events: Iterable[Event]) -> Membership:
    """Membership of every process group the ``nccl.pg_init`` events of one workload state.
    Events of other types are ignored; an init event without a global rank states nothing
    usable (its group rank is not a global rank)."""
    members: dict[str, set[int]] = {}
    sizes: dict[str, set[int]] = {}
    labels: dict[str, set[str]] = {}
    local: dict[tuple[int, int], set[str]] = {}
    comms: dict[tuple[int, str], set[str]] = {}
    comm_sizes: dict[tuple[int, str], set[int]] = {}
    for e in events:
        if e.type != INIT_TYPE or e.rank is None:
            continue
        a = e.attributes
        if a.get("stage") == "comm_init":
            if a.get("comm") and isinstance(a.get("pg_size"), int):
                comm_sizes.setdefault((e.rank, a["comm"]), set()).add(a["pg_size"])
            continue
        key = _key(a)
        if key is None:
            continue
        members.setdefault(key, set()).add(e.rank)
        labels.setdefault(key, set()).add(_label(a))
        if isinstance(a.get("pg_size"), int):
            sizes.setdefault(key, set()).add(a["pg_size"])
        if isinstance(a.get("pg"), int):
            local.setdefault((e.rank, a["pg"]), set()).add(key)
        if a.get("comm"):
            comms.setdefault((e.rank, a["comm"]), set()).add(key)
    # NCCL's communicator size, for groups whose options line was not logged
    for rc, keys in comms.items():
        if len(keys) == 1 and rc in comm_sizes:
            sizes.setdefault(next(iter(keys)), set()).update(comm_sizes[rc])
    out = Membership()
    for key in sorted(members):
        stated = sizes.get(key, set())
        size = next(iter(stated)) if len(stated) == 1 else None
        if size is not None and len(members[key]) > size:
            size = None  # more ranks than the group has: the id is not one group across ranks
        out.groups[key] = ProcessGroup(key=key, label=min(labels[key], key=lambda t: (-len(t), t)),
                                       size=size, members=frozenset(members[key]))
    out.local = {rk: next(iter(keys)) for rk, keys in sorted(local.items()) if len(keys) == 1}
    return out
