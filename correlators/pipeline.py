"""The whole composition as one pure, keyed state machine; replay and the stream drive it.

Data flow (the channels are internal Kafka topics in the stream, in-memory queues in
replay; messages are :mod:`schemas.messages`)::

    Observation --ingest--> events: rule pack (correlators.rules)
        | routed by WorkloadIndex (the observation's workload, else the host's span that holds
        | the event time); host facts go to the host window "host:<c>/<h>": GPU tables (from
        | all telemetry) and node history (the host's XIDs), which it sends every workload
        | holding an event of the host that names a GPU (HostFactsMessage)
        |-> Publish("events")                        every extracted event, raw
        |-> Route("workload", "<c>/<wid>" | "host:<c>/<h>") events, specs, coverage, claims,
        |                                           host facts (workload_key: job ids are per cluster)
        '-> Route("fabric", cluster)                cable / node-down events, topology, spans
    Route("workload", wid) --apply--> WorkloadWindow (correlators.windows)
        '-> Publish("attributions") + Route("fabric", VerdictMessage)
    Route("fabric", cluster) --apply--> FabricWindow
        |-> Route("workload", wid, FaultsMessage)   the faults relevant to each workload
        '-> Publish("attributions")                  fabric-port and incident verdicts

:class:`Pipeline` keeps its state in mappings it is given (:class:`Stores`): plain dicts in
replay, changelogged Faust tables in the stream; its in-memory windows are a cache of them,
rebuilt after :meth:`Pipeline.forget`. It reads no clock: a driver passes ``now`` (its
monotonic seconds) to the calls whose *timing* depends on it (provisional emission, idle
close, fabric throttling); what a verdict says never depends on it.

:class:`InMemoryRouter` runs the pipeline to completion over a set of observations -- the
replay driver. In batch mode (``hold``) nothing is emitted until :meth:`InMemoryRouter.finish`,
which decides each workload once: every verdict is revision 1.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, MutableMapping, Union

from pydantic import BaseModel

from correlators.config import EngineConfig
from correlators.ids import normalise_pci
from correlators.stragglers import Recheck
from correlators.windows import (
    FabricWindow,
    WorkloadIndex,
    WorkloadWindow,
    fabric_relevant,
    host_key,
    is_decisive,
    reads_host_facts,
    workload_key,
)
from schemas.bundle import TopologySpec, WorkloadSpec
from schemas.messages import (
    ClaimMessage,
    CloseMessage,
    CoverageMessage,
    EventMessage,
    EventsMessage,
    FaultsMessage,
    FlushMessage,
    GpuMessage,
    HistoryMessage,
    HostFactsMessage,
    InterestMessage,
    ReviseMessage,
    Span,
    SpanMessage,
    SpecMessage,
    TopologyMessage,
    VerdictMessage,
)
from schemas.records import Attribution, CoverageEntry, Event, Observation, canonical_json

SEP = "\x1f"  # between a window key and an event id in event-store keys
HOST = "host:"  # a host window's key is host:<cluster>/<host>: events no workload claimed yet
#: the node history keeps this many most recent XID events per host
NODE_HISTORY_MAX = 256
#: a host window keeps the spans of this many most recent workloads on the host
MAX_CLAIMS = 64
#: Most (host window, workload) interests an ingest remembers having sent; past it the cache is
#: dropped (a resent interest changes nothing), so a long-running ingest stays bounded.
INTEREST_CACHE_MAX = 100_000


@dataclass(frozen=True)
class Route:
    """Send ``message`` to channel ``channel`` (``"workload"`` | ``"fabric"``) under ``key``."""

    channel: str
    key: str
    message: BaseModel


@dataclass(frozen=True)
class Publish:
    """Publish ``record`` on public topic ``topic`` (``"events"`` | ``"attributions"``) under
    ``key`` (the event's window key; the verdict's attribution id)."""

    topic: str
    key: str
    record: Union[Event, Attribution]


@dataclass(frozen=True)
class Tombstone:
    """Publish a tombstone (null value) on public topic ``topic`` under ``key``, with the
    headers of a ``schema`` record: the entity the key names has ended (on ``attributions``,
    after a withdrawal, so compaction keeps no verdict for the scope)."""

    topic: str
    key: str
    schema: str


Effect = Union[Route, Publish, Tombstone]

#: Most events in one :class:`~schemas.messages.EventsMessage` (about 1 KB each on the wire).
EVENTS_PER_MESSAGE = 64


def batch_events(effects: Iterable[Effect], limit: int = EVENTS_PER_MESSAGE) -> list[Effect]:
    """``effects`` with the events routed to one workload-channel key gathered: every run of
    :class:`~schemas.messages.EventMessage` routes to a key that no other message to that key
    interrupts becomes one :class:`~schemas.messages.EventsMessage` (at most ``limit`` events,
    in their order) where its first event was. Each key's messages keep their order, so a
    window applies the same messages in the same order; messages to other keys, other channels
    and publications are not moved (no order across keys exists on Kafka: their partitions
    differ). A run of one stays an ``EventMessage``. Raises ``ValueError`` for ``limit`` < 1."""
    if limit < 1:
        raise ValueError(f"limit {limit}: must be at least 1")
    out: list[Effect] = []
    batches: list[tuple[int, str, list[Event]]] = []  # (position in out, key, events)
    open_batch: dict[str, int] = {}  # key -> its batch still open for more events
    for effect in effects:
        if isinstance(effect, Route) and effect.channel == "workload":
            key = effect.key
            if isinstance(effect.message, EventMessage):
                b = open_batch.get(key)
                if b is not None and len(batches[b][2]) < limit:
                    batches[b][2].append(effect.message.event)
                    continue
                open_batch[key] = len(batches)
                batches.append((len(out), key, [effect.message.event]))
            else:
                open_batch.pop(key, None)  # the key's next event starts a new batch after it
        out.append(effect)
    for at, key, events in batches:
        if len(events) > 1:
            out[at] = Route("workload", key, EventsMessage.model_construct(events=events))
    return out


def publish_verdicts(verdicts: Iterable[Attribution]) -> list[Effect]:
    """The publications of ``verdicts`` on ``attributions`` (key: the attribution id), each
    withdrawal followed by the tombstone of its key."""
    out: list[Effect] = []
    for att in verdicts:
        out.append(Publish("attributions", att.attribution_id, att))
        if att.status == "withdrawn":
            out.append(Tombstone("attributions", att.attribution_id, "Attribution"))
    return out


@dataclass
class Stores:
    """The pipeline's durable state, as mappings (values are JSON data or bytes).

    Keyed by the channel's key (one partition owns them): ``window_meta`` (workload id ->
    :meth:`WorkloadWindow.to_state`; ``host:<cluster>/<host>`` -> its claims), ``window_events`` (window key
    + SEP + event id -> event JSON bytes), ``window_facts`` (workload id + SEP + host -> that
    host's facts: GPU table and history), ``fabric_meta`` (cluster ->
    :meth:`FabricWindow.to_state`), ``fabric_events`` (cluster + SEP + event id -> event JSON
    bytes), ``topology`` (cluster -> topology data).

    Written while ingesting and read there, so global in the stream (every worker routes):
    ``allocation``, keyed by :func:`correlators.windows.host_key` (``<cluster>/<host>``):
    ``[[workload id, start ns, end ns | None], ...]``. A host window's ``window_meta`` entry
    holds its claims, GPU table and node history."""

    window_meta: MutableMapping[str, Any] = field(default_factory=dict)
    window_events: MutableMapping[str, Any] = field(default_factory=dict)
    window_facts: MutableMapping[str, Any] = field(default_factory=dict)
    fabric_meta: MutableMapping[str, Any] = field(default_factory=dict)
    fabric_events: MutableMapping[str, Any] = field(default_factory=dict)
    topology: MutableMapping[str, Any] = field(default_factory=dict)
    allocation: MutableMapping[str, Any] = field(default_factory=dict)


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


class Pipeline:
    """The keyed state machine (see the module docstring).

    ``config``: the engine's rules and policies; ``stores``: where state lives (default: new
    dicts); ``hold``: batch mode, nothing emitted until :meth:`finish`; ``route_by_index``:
    :meth:`ingest` routes an event without a workload id by the allocation it has seen
    (``stores.allocation``); False for an ingest stage that runs apart from the windows and
    sees only some of the scheduler's records: every such event goes to its host window,
    which routes it by its claims with the same rule (:class:`~correlators.windows.WorkloadIndex`),
    one hop later. Methods raise
    ``pydantic.ValidationError`` / ``ValueError`` for a message that does not validate; the
    state is unchanged then, and a driver dead-letters the input."""

    def __init__(self, config: EngineConfig, stores: Stores | None = None, *, hold: bool = False,
                 route_by_index: bool = True) -> None:
        self.config = config
        self.stores = stores if stores is not None else Stores()
        self.hold = hold
        self.route_by_index = route_by_index
        rules = config.causal
        self.index = WorkloadIndex(self.stores.allocation, before_ns=rules.before_start_ns,
                                   after_ns=rules.after_end_ns)
        self.windows: dict[str, WorkloadWindow] = {}
        self.hosts: dict[str, dict[str, Any]] = {}  # host window key -> its state (a cache)
        self.fabric: dict[str, FabricWindow] = {}
        self.activity: dict[str, float] = {}  # window key -> driver time of its last message
        self.pending_close: set[str] = set()
        self.flushed: dict[str, float] = {}  # cluster -> driver time of its last decision
        self.shape_since: dict[str, float] = {}  # cluster -> driver time its faults' shape was first seen
        self._unclaimed: dict[str, set[str]] | None = None
        self._deferred_loaded = False
        self._loaded = False
        self._gpus_sent: dict[str, dict[str, int]] = {}  # host key -> GPU table sent
        self._gpus_new: dict[str, dict[str, int]] = {}  # host key -> table collected, not sent
        self._gpus_still: set[str] = set()  # host keys whose collected table held since the last flush
        self._interest: set[tuple[str, str]] = set()  # (host window, workload) interests sent (a cache)
        self.deferred: set[str] = set()  # clusters with evidence not yet decided
        # provisional coalescing (WindowPolicy.provisional_interval_s), timing only, not state:
        self.provisional_at: dict[str, float] = {}  # window key -> driver time of its last provisional
        self.held: set[str] = set()  # window keys with a provisional revision held back
        self.pending_revise: set[str] = set()  # window keys a ReviseMessage was sent to
        self.recheck = Recheck()  # when performance samples re-decide a window (timing only)

    # -- ingest ----------------------------------------------------------------------------

    def delete_topology(self, cluster: str) -> list[Effect]:
        """A tombstone on the topology topic (key: ``cluster``): the cluster's topology is
        deleted; its fabric verdicts are decided again without it."""
        return [Route("fabric", cluster, TopologyMessage(topology=None))]

    def inert(self, obs: Observation) -> bool:
        """True when :meth:`ingest` yields no effect from ``obs`` whatever the pipeline's
        state: a log line without a metric whose body is empty or holds none of the rule
        pack's prefilter literals (:meth:`correlators.rules.RulePack.may_extract`). A driver
        may skip such a record (its position, its ingest) once it has counted it. Pure."""
        return obs.kind == "log_line" and obs.metric is None and self.inert_body(obs.body)

    def inert_body(self, body: str | None) -> bool:
        """True when a log line without a metric whose body is ``body`` is :meth:`inert`: the
        body is empty or holds none of the rule pack's prefilter literals. Pure."""
        return not (body and self.config.pack.may_extract(body))

    def inert_sample(self, cluster: str, host: str, gpu_index: int | None, pci_bus_id: str | None,
                     metric: Mapping[str, float] | None) -> bool:
        """True when :meth:`ingest` of a telemetry sample (``kind`` ``telemetry``) of
        ``cluster``/``host`` with these GPU index, PCI bus id and metric yields no effect and
        changes no state now: no telemetry rule fires on ``metric``
        (:meth:`correlators.rules.RulePack.may_extract_sample`) and the sample names no GPU,
        or the host's GPU table sent last already maps its PCI id to its index and no newer
        table is being collected. Depends on the pipeline's state; reads it only."""
        if self.config.pack.may_extract_sample(metric or {}):
            return False
        pci = normalise_pci(pci_bus_id) if pci_bus_id and gpu_index is not None else None
        if not pci:
            return True
        hkey = host_key(cluster, host)
        return hkey not in self._gpus_new and self._gpus_sent.get(hkey, {}).get(pci) == gpu_index

    def ingest(self, obs: Observation) -> list[Effect]:
        """One observation: its facts (workload spec, topology, coverage, GPU table) and its
        events, routed."""
        out: list[Effect] = []
        if obs.kind == "topology":
            spec = TopologySpec.model_validate(obs.attributes.get("topology"))
            out.append(Route("fabric", obs.cluster, TopologyMessage(topology=spec.model_dump(mode="json"))))
            return out
        if obs.kind == "scheduler_event" and obs.format == "workload_yaml":
            spec = WorkloadSpec.model_validate(obs.attributes.get("workload"))
            span = Span.of(spec)
            if self.route_by_index:
                self.index.add(span)
            out.append(Route("fabric", spec.cluster, SpanMessage(span=span)))
            out.append(Route("workload", workload_key(spec.cluster, spec.workload_id), SpecMessage(spec=spec)))
            # events of these hosts routed before this record wait in their host's window
            out += [Route("workload", f"{HOST}{host_key(span.cluster, one.nodes[0])}", ClaimMessage(span=one))
                    for one in span.per_host()]
            return out
        if obs.kind == "health_event" and obs.format == "coverage":
            entry = CoverageEntry.model_validate(obs.attributes["coverage"])
            if obs.workload_id:
                out.append(Route("workload", workload_key(obs.cluster, obs.workload_id), CoverageMessage(entry=entry)))
            return out
        hkey = host_key(obs.cluster, obs.host)
        if obs.kind == "telemetry" and obs.gpu and obs.gpu.pci_bus_id and obs.gpu.index is not None:
            out += self._learn_gpu(hkey, normalise_pci(obs.gpu.pci_bus_id), obs.gpu.index)
        events = self.config.pack.extract(obs)
        if events and hkey in self._gpus_new:
            out += self._send_gpus(hkey)  # the host's table goes ahead of its events
        for event in events:
            cluster = event.cluster or obs.cluster
            wid = event.workload_id or (self.index.route(cluster, event.host, event.at) if self.route_by_index else None)
            key = workload_key(cluster, wid) if wid else f"{HOST}{host_key(cluster, event.host)}"
            out.append(Publish("events", wid or f"{HOST}{event.host}", event))
            out.append(Route("workload", key, EventMessage(event=event)))
            if event.type == "gpu.xid":
                out.append(Route("workload", f"{HOST}{host_key(cluster, event.host)}",
                                 HistoryMessage(workload_id=wid, event=event)))
            elif wid and reads_host_facts(event):
                window = f"{HOST}{host_key(cluster, event.host)}"
                if (window, wid) not in self._interest:
                    if len(self._interest) >= INTEREST_CACHE_MAX:
                        self._interest.clear()
                    self._interest.add((window, wid))
                    out.append(Route("workload", window, InterestMessage(workload_id=wid)))
            if fabric_relevant(event):
                out.append(Route("fabric", cluster, EventMessage(event=event)))
        return out

    def _learn_gpu(self, hkey: str, pci: str | None, index: int) -> list[Effect]:
        """Collect a telemetry sample's PCI id -> index; a host's table is sent (one
        :class:`~schemas.messages.GpuMessage`) when a sample repeats a GPU already collected
        -- one sampling round is complete --, before the host's next events, by
        :meth:`due_flushes` once it held unchanged for a whole flush interval (a host whose
        samples trickle in is sent once, not once per GPU), and whenever a driver is about to
        commit (:meth:`pending_tables`). The collected tables are a cache (a resend is
        harmless)."""
        if not pci:
            return []
        new = self._gpus_new.get(hkey)
        if new is None:
            if self._gpus_sent.get(hkey, {}).get(pci) == index:
                return []
            new = self._gpus_new[hkey] = dict(self._gpus_sent.get(hkey, {}))
        elif new.get(pci) == index:
            return self._send_gpus(hkey)
        new[pci] = index
        self._gpus_still.discard(hkey)
        return []

    def pending_tables(self) -> list[Effect]:
        """Every GPU table collected from telemetry and not sent yet, now. A driver calls it
        before it commits the offsets of the observations they came from (the tables live in
        memory only: a table held past a commit would be lost with the process) and at the end
        of a batch."""
        return [e for k in sorted(self._gpus_new) for e in self._send_gpus(k)]

    def _send_gpus(self, hkey: str) -> list[Effect]:
        table = self._gpus_new.pop(hkey)
        self._gpus_still.discard(hkey)
        self._gpus_sent[hkey] = table
        return [Route("workload", f"{HOST}{hkey}", GpuMessage(host=hkey.split("/", 1)[1], gpus=table))]

    # -- the workload channel --------------------------------------------------------------

    def apply(self, channel: str, key: str, message: BaseModel, *, now: float = 0.0) -> list[Effect]:
        """Apply one channel message (see :mod:`schemas.messages`) to its window. ``now``:
        the driver's monotonic seconds."""
        if channel == "fabric":
            return self._apply_fabric(key, message, now)
        if isinstance(message, EventsMessage):
            # each event as its own EventMessage, in order; what they route on is batched again
            out = []
            for event in message.events:
                out += self.apply(channel, key, EventMessage.model_construct(event=event), now=now)
            return batch_events(out)
        if key.startswith(HOST):
            return self._apply_host(key, message)
        if isinstance(message, ReviseMessage):  # a tick, not activity: the idle close is not put off
            self.pending_revise.discard(key)
            w = self.window(key)
            if key in self.held and not w.closed and w.events and w.spec is not None:
                return self._emit(w, final=False, now=now)
            self.held.discard(key)
            return []
        self.activity[key] = now
        w = self.window(key)
        out: list[Effect] = []
        if isinstance(message, CloseMessage):
            self.pending_close.discard(key)
            if not w.closed and w.events:
                out += self._emit(w, final=True, now=now)
            return out
        if isinstance(message, EventMessage):
            event = message.event
            if not w.add_event(event):
                return out  # a duplicate from at-least-once delivery
            if self.hold:
                return out  # batch: nothing to recover
            self.stores.window_events[f"{key}{SEP}{event.event_id}"] = canonical_json(event).encode()
            if w.due(self.config.window):
                # a window with cable evidence waits for the fabric correlator's faults (or the
                # idle timer) before it is final: a link down may be one port of a lost switch
                out += self._emit(w, final=not w.cabled, now=now)
            elif w.spec is not None and not w.closed and (is_decisive(event, self.config, w.spec.start_ns)
                                                          or self.recheck.due(key, event)):
                out += self._emit(w, final=False, now=now)
            return out
        if isinstance(message, SpecMessage):
            changed = w.set_spec(message.spec)
        elif isinstance(message, CoverageMessage):
            changed = w.add_coverage(message.entry)
        elif isinstance(message, FaultsMessage):
            changed = w.set_faults(message.events)
        elif isinstance(message, HostFactsMessage):
            changed = w.set_host_facts(message.host, message.gpus, message.history)
        else:
            raise ValueError(f"workload channel: unexpected message {message.kind!r}")
        if not changed:
            return out  # a re-sent record changes nothing: a final verdict stays final
        if self.hold:
            w.closed = False
            return out  # batch: nothing to recover, the state is written when it decides
        if isinstance(message, HostFactsMessage):
            # stored by host: a 2,048-host job does not rewrite its whole state per host
            self.stores.window_facts[f"{key}{SEP}{message.host}"] = w.host_facts[message.host]
            if not w.closed and self.stores.window_meta.get(key) is not None:
                return out
        # new facts re-open the window
        w.closed = False
        self.stores.window_meta[key] = w.to_state()
        if isinstance(message, SpecMessage):
            start = w.spec.start_ns
            if any(is_decisive(e, self.config, start) for e in w.events.values()):
                out += self._emit(w, final=False, now=now)  # decisive evidence came before the spec
        elif isinstance(message, FaultsMessage):
            # a fault is decisive evidence: re-decide now rather than wait for the idle timer
            if w.due(self.config.window):
                out += self._emit(w, final=True, now=now)
            elif w.spec is not None and w.events:
                out += self._emit(w, final=False, now=now)
        # otherwise the idle timer (or the next due event) emits the revision, so a burst of
        # updates gives one revision, not one each
        return out

    def window(self, wid: str) -> WorkloadWindow:
        """The workload window ``wid`` (the cache is filled from the stores once after a start
        or :meth:`forget`)."""
        if not self._loaded:
            self._load_windows()
        w = self.windows.get(wid)
        if w is None:
            w = self.windows[wid] = WorkloadWindow(workload_id=wid)
        return w

    def _emit(self, w: WorkloadWindow, *, final: bool, now: float | None = None) -> list[Effect]:
        """Publish the window's verdict if it changed. A provisional one is coalesced when the
        policy's ``provisional_interval_s`` is set and ``now`` (driver seconds) is given: the
        window's first is published at once; a later one sooner than the interval after the
        previous one is held (:meth:`idle` sends the tick that publishes it), and one that
        says what the last one said is not published. A final verdict is never held."""
        key = w.workload_id
        interval = self.config.window.provisional_interval_s
        coalesce = not final and interval > 0 and now is not None
        if coalesce:
            last = self.provisional_at.get(key)
            if last is not None and now - last < interval:
                self.held.add(key)
                return []
        att = w.emit(self.config, final=final, coalesce=coalesce)
        self.held.discard(key)
        if final:
            self.provisional_at.pop(key, None)
            if not self.hold:  # live: a closed window keeps its evidence, not its caches
                w.drop_caches()
        elif coalesce and att is not None:
            self.provisional_at[key] = now
        self.stores.window_meta[w.workload_id] = w.to_state()
        if att is None:
            return []
        return [Publish("attributions", att.attribution_id, att),
                Route("fabric", att.scope.cluster, VerdictMessage(attribution=att))]

    def _apply_host(self, key: str, message: BaseModel) -> list[Effect]:
        """A host window (key ``host:<cluster>/<host>``): the workload spans seen for the host
        (claims), the host's events no claim holds yet (an event and its claim may arrive in
        either order), its GPU table, its node history (the latest :data:`NODE_HISTORY_MAX`
        XID events) and the workloads that read its facts (``wants``: they hold an event of
        the host that names a GPU; :func:`~correlators.windows.reads_host_facts`). Each of
        those gets the host's facts (:class:`~schemas.messages.HostFactsMessage`) once it
        both claims and wants them, and whenever they change; a verdict reads a host's facts
        only for such events, so the others need none. Claims, wants and history owners hold
        bare workload ids: all are of the host's cluster, whose windows they are routed to."""
        cluster, host = key[len(HOST):].split("/", 1)
        meta = self.hosts.get(key)
        if meta is None:  # the cache is filled from the store once per key after forget()
            meta = self.hosts[key] = dict(self.stores.window_meta.get(key) or {})
        claims = list(meta.get("claims", []))
        gpus = dict(meta.get("gpus", {}))
        history = list(meta.get("history", []))
        wants = list(meta.get("wants", []))
        out: list[Effect] = []
        notify: list[list[Any]] = []  # the claims to send the host's facts to now

        def want(wid: str) -> bool:
            """Add ``wid`` to the workloads reading the facts; True if it is new."""
            nonlocal wants
            if wid in wants:
                return False
            wants = (wants + [wid])[-MAX_CLAIMS:]
            return True

        def claim_of(wid: str) -> list[list[Any]]:
            return [c for c in claims if c[0] == wid]

        if isinstance(message, ClaimMessage):
            span = message.span
            entry = [span.workload_id, span.start, span.end]
            claims = sorted([c for c in claims if c[0] != span.workload_id] + [entry],
                            key=lambda c: (c[1], c[0]))[-MAX_CLAIMS:]
            waiting = self._waiting(key)
            for stored_key in sorted(waiting):
                event = stored_event(self.stores.window_events[stored_key])
                if self.index.route("", "", event.at, [entry]):
                    out.append(Route("workload", workload_key(span.cluster, span.workload_id),
                                     EventMessage(event=event)))
                    del self.stores.window_events[stored_key]
                    waiting.discard(stored_key)
                    if reads_host_facts(event):
                        want(span.workload_id)
                    if event.type == "gpu.xid":  # as below, for an EventMessage
                        history = own_history(history, event, span.workload_id)
            notify = [entry] if span.workload_id in wants else []
        elif isinstance(message, EventMessage):
            event = message.event
            target = self.index.route("", "", event.at, claims)
            if not target:
                stored_key = f"{key}{SEP}{event.event_id}"
                self.stores.window_events[stored_key] = canonical_json(event).encode()
                self._waiting(key).add(stored_key)
                return out
            out.append(Route("workload", workload_key(cluster, target), message))
            # an XID kept as history before its workload was known is that workload's own
            fixed = False
            if event.type == "gpu.xid":
                owned = own_history(history, event, target)
                fixed, history = owned != history, owned
            if not (reads_host_facts(event) and (want(target) or fixed)):
                return out
            notify = claim_of(target)
        elif isinstance(message, InterestMessage):
            if not want(message.workload_id):
                return out
            notify = claim_of(message.workload_id)
        elif isinstance(message, GpuMessage):
            merged = {**gpus, **message.gpus}
            if merged == gpus:
                return out
            gpus, notify = merged, [c for c in claims if c[0] in wants]
        elif isinstance(message, HistoryMessage):
            event = message.event
            if any(item[1]["event_id"] == event.event_id for item in history):
                return out
            # the workload it belongs to: as ingest routed it, else by the claims held here
            owner = message.workload_id or self.index.route("", "", event.at, claims)
            history.append([owner, event.model_dump(mode="json")])
            history = sorted(history, key=lambda item: (item[1]["at"], item[1]["event_id"]))[-NODE_HISTORY_MAX:]
            own = owner is not None and want(owner)
            notify = [c for c in claims if (c[0] == owner and own)
                      or (c[0] != owner and c[0] in wants and event.at < c[1])]
        else:
            raise ValueError(f"host window: unexpected message {message.kind!r}")
        meta = self.hosts[key] = {"claims": claims, "gpus": gpus, "history": history, "wants": wants}
        self.stores.window_meta[key] = meta
        for wid, start, _ in notify:
            if not gpus and not history:
                break
            earlier = [Event.model_validate(data) for w, data in history if w != wid and data["at"] < start]
            out.append(Route("workload", workload_key(cluster, wid), HostFactsMessage(host=host, gpus=gpus, history=earlier)))
        return out

    def _waiting(self, key: str) -> set[str]:
        """Event-store keys of the events waiting in host window ``key`` (the index is rebuilt
        from the store once after :meth:`forget`)."""
        if self._unclaimed is None:
            self._unclaimed = {}
            for stored_key in self.stores.window_events.keys():
                if stored_key.startswith(HOST):
                    self._unclaimed.setdefault(stored_key.split(SEP, 1)[0], set()).add(stored_key)
        return self._unclaimed.setdefault(key, set())

    def idle(self, now: float) -> list[Route]:
        """Close messages for the windows with evidence and a spec that saw nothing for the
        window policy's ``idle_timeout_s`` (live mode; none when it is None), except those of a
        cluster whose fabric evidence this pipeline has not decided yet (their faults may be
        on the way; a worker that does not own the cluster's fabric partition cannot know);
        then revise messages for the windows whose provisional revision was held back
        (:meth:`_emit`) and whose ``provisional_interval_s`` passed, unless they are closed
        now. A driver calls it on a timer, more often than either period."""
        out: list[Route] = []
        timeout = self.config.window.idle_timeout_s
        if timeout:
            if not self._loaded:
                self._load_windows()
            for wid in sorted(self.windows):
                w = self.windows[wid]
                if (not w.closed and w.events and w.spec is not None and wid not in self.pending_close
                        and w.spec.cluster not in self.deferred  # its cluster's faults are settling
                        and now - self.activity.setdefault(wid, now) >= timeout):
                    self.pending_close.add(wid)
                    out.append(Route("workload", wid, CloseMessage()))
        interval = self.config.window.provisional_interval_s
        revise = [wid for wid in sorted(self.held - self.pending_revise - self.pending_close)
                  if now - self.provisional_at.get(wid, -1e18) >= interval]
        self.pending_revise.update(revise)
        return out + [Route("workload", wid, ReviseMessage()) for wid in revise]

    def _load_windows(self) -> None:
        """Bring every stored workload window into the cache (after a restart or a
        rebalance): each window with a state, an event or a host's facts in the stores. A
        window that holds events but has no state yet (its spec has not come, nothing was
        decided) is rebuilt from its events alone."""
        self._loaded = True
        # values come from the iteration: a changelogged table answers a lookup by key only
        # for the partition of the record being processed
        states = {k: v for k, v in self.stores.window_meta.items()
                  if v and not k.startswith(HOST) and k not in self.windows}
        grouped: dict[str, list[Event]] = collections.defaultdict(list)
        for k, v in self.stores.window_events.items():
            wid = k.split(SEP, 1)[0]
            if not wid.startswith(HOST) and wid not in self.windows:
                grouped[wid].append(stored_event(v))
        facts: dict[str, dict[str, Any]] = collections.defaultdict(dict)
        for k, v in self.stores.window_facts.items():
            wid, host = k.split(SEP, 1)
            if wid not in self.windows:
                facts[wid][host] = v
        for wid in sorted(states.keys() | grouped.keys() | facts.keys()):
            state = states.get(wid) or {"workload_id": wid}
            self.windows[wid] = WorkloadWindow.from_state(state, grouped.get(wid, []), facts.get(wid))

    # -- the fabric channel ----------------------------------------------------------------

    def fabric_window(self, cluster: str) -> FabricWindow:
        """The cluster's fabric window (from the cache, else rebuilt from the stores)."""
        fw = self.fabric.get(cluster)
        if fw is None:
            state = self.stores.fabric_meta.get(cluster)
            prefix = f"{cluster}{SEP}"
            events = [stored_event(v) for k, v in self.stores.fabric_events.items() if k.startswith(prefix)]
            fw = FabricWindow.from_state(state, events) if state else FabricWindow(cluster=cluster)
            fw.events.update((e.event_id, e) for e in events)
            self.fabric[cluster] = fw
        return fw

    def _apply_fabric(self, cluster: str, message: BaseModel, now: float) -> list[Effect]:
        fw = self.fabric_window(cluster)
        if isinstance(message, FlushMessage):
            if fw.deferred:
                return self._decide_fabric(fw, now, force=True)
            self.deferred.discard(cluster)
            return []
        if isinstance(message, EventMessage):
            changed = fw.add_event(message.event)
            if changed:
                self.stores.fabric_events[f"{cluster}{SEP}{message.event.event_id}"] = \
                    canonical_json(message.event).encode()
        elif isinstance(message, TopologyMessage):
            if message.topology is not None:
                TopologySpec.model_validate(message.topology)  # refused before it is stored
            changed = fw.set_topology(message.topology)
            if changed and message.topology is None:
                self.stores.topology.pop(cluster, None)
            elif changed:
                self.stores.topology[cluster] = message.topology
        elif isinstance(message, SpanMessage):
            changed = fw.add_span(message.span)
        elif isinstance(message, VerdictMessage):
            changed = fw.add_verdict(message.attribution)
        else:
            raise ValueError(f"fabric channel: unexpected message {message.kind!r}")
        if not changed:
            return []
        # an event is stored under its own key: the window's state changed only otherwise
        return self._decide_fabric(fw, now, state_changed=not isinstance(message, EventMessage))

    def _decide_fabric(self, fw: FabricWindow, now: float, *, force: bool = False,
                       state_changed: bool = True) -> list[Effect]:
        """Re-decide a cluster, at most once per ``fabric_flush_s``: a burst (every counter
        sample of a degrading cable) is decided together by the next flush, and the last
        revision still holds all the evidence. Nothing is sent while the faults' shape is
        settling: a shape (which faults, at which level) is routed to workloads and published
        only once it held for ``fabric_flush_s`` -- four ports going down one after the other
        are one switch fault, never first four port faults with their proposals."""
        settle = self.config.window.fabric_flush_s
        if self.hold or (not force and now - self.flushed.get(fw.cluster, -1e18) < settle):
            return self._defer(fw, state_changed)
        self.flushed[fw.cluster] = now
        shape = fw.refresh(self.config)
        if shape != fw.shape:
            fw.shape = shape
            self.shape_since[fw.cluster] = now
        if now - self.shape_since.setdefault(fw.cluster, now) < settle:
            return self._defer(fw)
        self.deferred.discard(fw.cluster)
        routes = fw.route_faults(self.config)
        verdicts = fw.publish(self.config)
        self.stores.fabric_meta[fw.cluster] = fw.to_state()
        out: list[Effect] = [Route("workload", workload_key(fw.cluster, wid), FaultsMessage(events=events))
                             for wid, events in routes.items()]
        out += publish_verdicts(verdicts)
        return out

    def _defer(self, fw: FabricWindow, state_changed: bool = True) -> list[Effect]:
        """Leave the cluster's evidence for the next flush (stored: after a crash a new worker
        flushes it). The window's state (its verdicts, spans, topology: O(verdicts) to
        serialise) is written when it changed or the window was not deferred yet, not for
        every event of a burst."""
        was = fw.deferred
        fw.deferred = True
        self.deferred.add(fw.cluster)
        if state_changed or not was:
            self.stores.fabric_meta[fw.cluster] = fw.to_state()
        return []

    def due_flushes(self, now: float) -> list[Route]:
        """Flush messages for the clusters with evidence not yet decided whose flush interval
        passed (after a restart: those a previous worker deferred), and the GPU tables
        collected from telemetry, not sent yet, and unchanged since the previous call."""
        if not self._deferred_loaded:
            self._deferred_loaded = True
            self.deferred.update(c for c, state in self.stores.fabric_meta.items() if state and state.get("deferred"))
        every = self.config.window.fabric_flush_s
        fabric = [Route("fabric", c, FlushMessage()) for c in sorted(self.deferred)
                  if now - self.flushed.get(c, -1e18) >= every]
        tables = [e for k in sorted(self._gpus_still & self._gpus_new.keys()) for e in self._send_gpus(k)]
        self._gpus_still = set(self._gpus_new)
        return fabric + tables

    def forget(self) -> None:
        """Drop every cache (after a rebalance): windows are rebuilt from the stores."""
        self.windows.clear()
        self.hosts.clear()
        self.fabric.clear()
        self.pending_close.clear()
        self._unclaimed = None
        self._deferred_loaded = False
        self._loaded = False
        self.deferred.clear()
        self.provisional_at.clear()
        self.held.clear()
        self.pending_revise.clear()
        self.recheck.clear()


class InMemoryRouter:
    """Runs a :class:`Pipeline` without a broker: routes go to an in-memory queue and are
    applied in order until none is left; published records are collected in ``published``.

    Used in batch mode (``Pipeline(hold=True)``) by replay: :meth:`feed` every observation,
    then :meth:`finish` decides each cluster's faults, then each workload once (final), then
    each cluster's fabric and incident verdicts over those workload verdicts."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.queue: collections.deque[Route] = collections.deque()
        self.published: list[Publish | Tombstone] = []

    def send(self, effects: Iterable[Effect]) -> None:
        """Queue routes, collect publications."""
        for effect in effects:
            if isinstance(effect, Route):
                self.queue.append(effect)
            else:
                self.published.append(effect)

    def drain(self) -> None:
        """Apply queued routes until the queue is empty."""
        while self.queue:
            route = self.queue.popleft()
            self.send(self.pipeline.apply(route.channel, route.key, route.message))

    def feed(self, observations: Iterable[Observation]) -> None:
        """Ingest every observation and apply what it routes."""
        for obs in observations:
            self.send(self.pipeline.ingest(obs))
            self.drain()

    def finish(self) -> list[Attribution]:
        """Decide everything fed so far (batch mode); returns the verdicts published by this
        call: the workload verdicts in workload-id order, then per cluster its fabric and
        incident verdicts in the fabric correlator's order."""
        p = self.pipeline
        start = len(self.published)
        self.send(p.pending_tables())
        self.drain()
        for cluster in sorted(p.fabric):
            fw = p.fabric[cluster]
            fw.refresh(p.config)
            routes = fw.route_faults(p.config)
            for wid, events in routes.items():
                self.send([Route("workload", workload_key(cluster, wid), FaultsMessage(events=events))])
        self.drain()
        p._load_windows()
        for wid in sorted(p.windows):
            w = p.windows[wid]
            if w.spec is not None:
                self.send(p._emit(w, final=True))
        self.drain()
        for cluster in sorted(p.fabric):
            fw = p.fabric[cluster]
            self.send(publish_verdicts(fw.publish(p.config)))
            p.stores.fabric_meta[cluster] = fw.to_state()
        return [e.record for e in self.published[start:] if isinstance(e, Publish) and e.topic == "attributions"]
