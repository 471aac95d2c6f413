"""A host's window (channel ``host``, key ``<cluster>/<host>``) and the GPU tables an ingest
collects for it.

A host window holds what belongs to a host rather than to one workload:

* its **claims**: the spans of the workloads that ran on it (the latest :data:`MAX_CLAIMS`),
  by which it routes the host's events that came without a workload id
  (:class:`~correlators.windows.WorkloadIndex`'s rule); an event no claim holds yet waits in
  the window's event store until one does (an event and its claim may arrive in either order);
* its **GPU table** (PCI bus id -> index, from telemetry) and **node history** (the latest
  :data:`NODE_HISTORY_MAX` XID events, each with the workload it belongs to, if known);
* the workloads that read those facts (**wants**: they hold an event of the host naming a
  GPU, :func:`~correlators.windows.reads_host_facts`). Each gets the host's facts
  (:class:`~schemas.messages.HostFactsMessage`) once it both claims and wants them, and
  whenever they change; a verdict reads a host's facts only for such events.

Claims, wants and history owners hold bare workload ids: all are of the host's cluster, whose
windows they are routed to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, MutableMapping, Optional

from pydantic import BaseModel

from correlators.keyed import Effect, Route
from correlators.windows import reads_host_facts, workload_key
from schemas.messages import (
    ClaimMessage,
    EventMessage,
    GpuMessage,
    HistoryMessage,
    HostFactsMessage,
    InterestMessage,
)
from schemas.records import Event, canonical_json

SEP = "\x1f"  # between a window key and an event id in event-store keys
#: the node history keeps this many most recent XID events per host
NODE_HISTORY_MAX = 256
#: a host window keeps the spans of this many most recent workloads on the host
MAX_CLAIMS = 64

#: ``[workload id, start ns, end ns | None]``: a workload's span on the host (UTC ns)
Claim = list
#: ``(event time ns, entries)`` -> the workload id among ``entries`` that holds the time, or None
RouteRule = Callable[[int, list], Optional[str]]


def own_history(history: list[list[Any]], event: Event, wid: str) -> list[list[Any]]:
    """A host window's history (``[[workload id | None, event data], ...]``) with ``event``
    given to ``wid`` where it was kept without a workload."""
    return [[wid if w is None and data["event_id"] == event.event_id else w, data] for w, data in history]


def stored_event(value: Any) -> Event:
    """An event as a store hands it back (bytes, str or dict, depending on the store)."""
    if isinstance(value, dict):
        return Event.model_validate(value)
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    return Event.model_validate_json(value)


@dataclass
class HostWindow:
    """One host's window (see the module docstring); a :class:`~correlators.keyed.Keyed`
    machine of the ``host`` channel.

    ``key``: ``<cluster>/<host>``; ``route``: the routing rule over claims; ``events``: the
    event store the waiting events live in (keys ``<key>`` + :data:`SEP` + event id, values
    event JSON bytes); ``waiting``: the store keys of this window's waiting events (the driver
    indexes them once after a start). State: ``claims``, ``gpus``, ``history`` (``[[workload id
    | None, event data], ...]`` by time) and ``wants``."""

    key: str
    route: RouteRule
    events: MutableMapping[str, Any]
    waiting: set[str] = field(default_factory=set)
    claims: list[Claim] = field(default_factory=list)
    gpus: dict[str, int] = field(default_factory=dict)
    history: list[list[Any]] = field(default_factory=list)
    wants: list[str] = field(default_factory=list)

    @property
    def cluster(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def host(self) -> str:
        return self.key.split("/", 1)[1]

    @classmethod
    def from_state(cls, key: str, state: dict[str, Any] | None, *, route: RouteRule,
                   events: MutableMapping[str, Any], waiting: set[str]) -> "HostWindow":
        """Rebuild from :meth:`to_state` (None: a host not seen yet)."""
        state = state or {}
        return cls(key=key, route=route, events=events, waiting=waiting,
                   claims=[list(c) for c in state.get("claims", [])], gpus=dict(state.get("gpus", {})),
                   history=[list(h) for h in state.get("history", [])], wants=list(state.get("wants", [])))

    def to_state(self) -> dict[str, Any]:
        """Claims, GPU table, history and wants as JSON data (the waiting events are stored
        one per key)."""
        return {"claims": self.claims, "gpus": self.gpus, "history": self.history, "wants": self.wants}

    def apply(self, message: BaseModel, now: float = 0.0) -> list[Effect]:
        """One host-channel message: a claim, an event, an interest, a GPU table or an XID for
        the history. Returns the events routed to their workloads and the facts sent. Raises
        ``ValueError`` for another message."""
        handler = {ClaimMessage: self._claim, EventMessage: self._event, InterestMessage: self._interest,
                   GpuMessage: self._gpu_table, HistoryMessage: self._history}.get(type(message))
        if handler is None:
            raise ValueError(f"host window: unexpected message {getattr(message, 'kind', type(message).__name__)!r}")
        out, notify = handler(message)
        self.changed = notify is not None
        return out + self._facts(notify or [])

    #: whether the last :meth:`apply` changed the state (the driver saves it only then)
    changed: bool = field(default=False, init=False)

    # -- one handler per message: (effects, the claims to send the host's facts to; None:
    # -- the state did not change) ---------------------------------------------------------

    def _claim(self, message: ClaimMessage) -> tuple[list[Effect], list[Claim] | None]:
        span = message.span
        entry = [span.workload_id, span.start, span.end]
        self.claims = sorted([c for c in self.claims if c[0] != span.workload_id] + [entry],
                             key=lambda c: (c[1], c[0]))[-MAX_CLAIMS:]
        out: list[Effect] = []
        for stored_key in sorted(self.waiting):
            event = stored_event(self.events[stored_key])
            if self.route(event.at, [entry]):
                out.append(Route("workload", workload_key(span.cluster, span.workload_id), EventMessage(event=event)))
                del self.events[stored_key]
                self.waiting.discard(stored_key)
                if reads_host_facts(event):
                    self._want(span.workload_id)
                if event.type == "gpu.xid":  # as in _event
                    self.history = own_history(self.history, event, span.workload_id)
        return out, [entry] if span.workload_id in self.wants else []

    def _event(self, message: EventMessage) -> tuple[list[Effect], list[Claim] | None]:
        event = message.event
        target = self.route(event.at, self.claims)
        if not target:
            stored_key = f"{self.key}{SEP}{event.event_id}"
            self.events[stored_key] = canonical_json(event).encode()
            self.waiting.add(stored_key)
            return [], None
        out: list[Effect] = [Route("workload", workload_key(self.cluster, target), message)]
        # an XID kept as history before its workload was known is that workload's own
        owned = own_history(self.history, event, target) if event.type == "gpu.xid" else self.history
        if not (reads_host_facts(event) and (self._want(target) or owned != self.history)):
            return out, None
        self.history = owned
        return out, self._claims_of(target)

    def _interest(self, message: InterestMessage) -> tuple[list[Effect], list[Claim] | None]:
        if not self._want(message.workload_id):
            return [], None
        return [], self._claims_of(message.workload_id)

    def _gpu_table(self, message: GpuMessage) -> tuple[list[Effect], list[Claim] | None]:
        merged = {**self.gpus, **message.gpus}
        if merged == self.gpus:
            return [], None
        self.gpus = merged
        return [], [c for c in self.claims if c[0] in self.wants]

    def _history(self, message: HistoryMessage) -> tuple[list[Effect], list[Claim] | None]:
        event = message.event
        if any(item[1]["event_id"] == event.event_id for item in self.history):
            return [], None
        # the workload it belongs to: as ingest routed it, else by the claims held here
        owner = message.workload_id or self.route(event.at, self.claims)
        self.history.append([owner, event.model_dump(mode="json")])
        self.history = sorted(self.history, key=lambda item: (item[1]["at"], item[1]["event_id"]))[-NODE_HISTORY_MAX:]
        own = owner is not None and self._want(owner)
        return [], [c for c in self.claims if (c[0] == owner and own)
                    or (c[0] != owner and c[0] in self.wants and event.at < c[1])]

    def _want(self, wid: str) -> bool:
        """Add ``wid`` to the workloads reading the facts; True if it is new."""
        if wid in self.wants:
            return False
        self.wants = (self.wants + [wid])[-MAX_CLAIMS:]
        return True

    def _claims_of(self, wid: str) -> list[Claim]:
        return [c for c in self.claims if c[0] == wid]

    def _facts(self, notify: list[Claim]) -> list[Effect]:
        """The host's facts for each claim in ``notify``: its GPU table and the history before
        the claim's start that is not the claimant's own."""
        if not self.gpus and not self.history:
            return []
        out: list[Effect] = []
        for wid, start, _ in notify:
            earlier = [Event.model_validate(data) for w, data in self.history if w != wid and data["at"] < start]
            out.append(Route("workload", workload_key(self.cluster, wid),
                             HostFactsMessage(host=self.host, gpus=self.gpus, history=earlier)))
        return out


class GpuTables:
    """The GPU tables (PCI bus id -> index) an ingest collects from telemetry, per host key
    (``<cluster>/<host>``), and when each goes to its host window (one
    :class:`~schemas.messages.GpuMessage`): when a sample repeats a GPU already collected --
    one sampling round is complete --, before the host's next events (:meth:`send`), once it
    held unchanged for a whole flush interval (:meth:`still`; a host whose samples trickle in
    is sent once, not once per GPU), and whenever a driver is about to commit
    (:meth:`pending`). The tables are a cache (a resend is harmless)."""

    def __init__(self) -> None:
        self.sent: dict[str, dict[str, int]] = {}  # host key -> GPU table sent
        self.new: dict[str, dict[str, int]] = {}  # host key -> table collected, not sent
        self.unchanged: set[str] = set()  # host keys whose collected table held since the last flush

    def known(self, hkey: str, pci: str, index: int) -> bool:
        """True when no table is being collected for ``hkey`` and the one sent maps ``pci``
        to ``index``."""
        return hkey not in self.new and self.sent.get(hkey, {}).get(pci) == index

    def learn(self, hkey: str, pci: str | None, index: int) -> list[Effect]:
        """Collect one sample's PCI id -> index; the table's message when the round is complete."""
        if not pci:
            return []
        new = self.new.get(hkey)
        if new is None:
            if self.sent.get(hkey, {}).get(pci) == index:
                return []
            new = self.new[hkey] = dict(self.sent.get(hkey, {}))
        elif new.get(pci) == index:
            return self.send(hkey)
        new[pci] = index
        self.unchanged.discard(hkey)
        return []

    def send(self, hkey: str) -> list[Effect]:
        """The message of the table collected for ``hkey`` (none when none is)."""
        table = self.new.pop(hkey, None)
        if table is None:
            return []
        self.unchanged.discard(hkey)
        self.sent[hkey] = table
        return [Route("host", hkey, GpuMessage(host=hkey.split("/", 1)[1], gpus=table))]

    def pending(self) -> list[Effect]:
        """Every table collected and not sent yet."""
        return [e for k in sorted(self.new) for e in self.send(k)]

    def still(self) -> list[Effect]:
        """The tables unchanged since the previous call, sent now."""
        out = [e for k in sorted(self.unchanged & self.new.keys()) for e in self.send(k)]
        self.unchanged = set(self.new)
        return out
