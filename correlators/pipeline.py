"""The whole composition of the engine, written once; replay and the stream drive it.

Every part that keeps state is a keyed machine (:class:`correlators.keyed.Keyed`) of one
channel; this module only says which message goes to which machine. Data flow (the channels
are internal Kafka topics in the stream, in-memory queues in replay; messages are
:mod:`schemas.messages`)::

    Observation --ingest--> events: rule pack (correlators.rules)
        | routed by WorkloadIndex (the observation's workload, else the host's span that holds
        | the event time); host facts (GPU tables from all telemetry, the host's XIDs) and the
        | events no workload holds go to the host's window
        |-> Publish("events")                        every extracted event, raw
        |-> Route("workload", "<c>/<wid>")           events, specs, coverage (job ids are per cluster)
        |-> Route("host", "<c>/<h>")                 claims, events without a workload, GPU tables,
        |                                            XIDs (history), interests
        '-> Route("fabric", cluster)                cable / node-down events, topology, spans
    Route("workload", wid) --apply--> WorkloadWindow (correlators.windows)
        '-> Publish("attributions") + Route("fabric", VerdictMessage)
    Route("host", key) --apply--> HostWindow (correlators.host_window)
        '-> Route("workload", wid, EventMessage | HostFactsMessage)
    Route("fabric", cluster) --apply--> FabricWindow (correlators.fabric_window)
        |-> Route("workload", wid, FaultsMessage)   the faults relevant to each workload
        '-> Publish("attributions")                  fabric-port and incident verdicts

:class:`Pipeline` keeps its state in mappings it is given (:class:`Stores`): plain dicts in
replay, changelogged Faust tables in the stream; its in-memory machines are a cache of them,
rebuilt after :meth:`Pipeline.forget`. It reads no clock: a driver passes ``now`` (its
monotonic seconds) to the calls whose *timing* depends on it (provisional emission, idle
close, fabric throttling); what a verdict says never depends on it.

:class:`InMemoryRouter` runs the pipeline to completion over a set of observations -- the
replay driver. In batch mode (``hold``) nothing is emitted until :meth:`InMemoryRouter.finish`,
which decides each workload once: every verdict is revision 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, MutableMapping

from pydantic import BaseModel

from correlators.config import EngineConfig
from correlators.fabric_window import FabricTiming, FabricWindow
from correlators.host_window import MAX_CLAIMS, NODE_HISTORY_MAX, SEP, GpuTables, HostWindow, own_history, stored_event
from correlators.ids import normalise_pci
from correlators.keyed import (
    EVENTS_PER_MESSAGE,
    DeadLetter,
    Effect,
    Execute,
    Keyed,
    Publish,
    Route,
    Tombstone,
    batch_events,
    publish_verdicts,
)
from correlators.router import InMemoryRouter
from correlators.windows import WorkloadIndex, WorkloadWindow, fabric_relevant, host_key, reads_host_facts, workload_key
from correlators.workload_channel import WorkloadWindows
from schemas.bundle import TopologySpec, WorkloadSpec
from schemas.messages import (
    ClaimMessage,
    CoverageMessage,
    EventMessage,
    EventsMessage,
    FlushMessage,
    HistoryMessage,
    InterestMessage,
    Span,
    SpanMessage,
    SpecMessage,
    TopologyMessage,
)
from schemas.records import CoverageEntry, Event, Observation

__all__ = ["EVENTS_PER_MESSAGE", "MAX_CLAIMS", "NODE_HISTORY_MAX", "SEP", "DeadLetter", "Effect", "Execute",
           "InMemoryRouter", "Keyed", "Pipeline", "Publish", "Route", "Stores", "Tombstone", "batch_events",
           "own_history", "publish_verdicts", "stored_event"]

#: Most (host window, workload) interests an ingest remembers having sent; past it the cache is
#: dropped (a resent interest changes nothing), so a long-running ingest stays bounded.
INTEREST_CACHE_MAX = 100_000
#: The key of an event without a workload on the public events topic: ``host:<host>``.
HOST_EVENT_KEY = "host:"


@dataclass
class Stores:
    """The pipeline's durable state, as mappings (values are JSON data or bytes).

    Keyed by the channel's key (one partition owns them): ``window_meta`` (workload id ->
    :meth:`WorkloadWindow.to_state`), ``window_events`` (workload id + SEP + event id -> event
    JSON bytes), ``window_facts`` (workload id + SEP + host -> that host's facts: GPU table
    and history), ``host_meta`` (``<cluster>/<host>`` -> :meth:`HostWindow.to_state`),
    ``host_events`` (host key + SEP + event id -> a waiting event's JSON bytes),
    ``fabric_meta`` (cluster -> :meth:`FabricWindow.to_state`), ``fabric_events`` (cluster +
    SEP + event id -> event JSON bytes), ``topology`` (cluster -> topology data).

    Written while ingesting and read there, so global in the stream (every worker routes):
    ``allocation``, keyed by :func:`correlators.windows.host_key` (``<cluster>/<host>``):
    ``[[workload id, start ns, end ns | None], ...]``."""

    window_meta: MutableMapping[str, Any] = field(default_factory=dict)
    window_events: MutableMapping[str, Any] = field(default_factory=dict)
    window_facts: MutableMapping[str, Any] = field(default_factory=dict)
    fabric_meta: MutableMapping[str, Any] = field(default_factory=dict)
    fabric_events: MutableMapping[str, Any] = field(default_factory=dict)
    topology: MutableMapping[str, Any] = field(default_factory=dict)
    allocation: MutableMapping[str, Any] = field(default_factory=dict)
    host_meta: MutableMapping[str, Any] = field(default_factory=dict)
    host_events: MutableMapping[str, Any] = field(default_factory=dict)


class Pipeline:
    """The composition (see the module docstring).

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
        self.hosts: dict[str, HostWindow] = {}  # host window key -> its window (a cache)
        self.fabric: dict[str, FabricWindow] = {}
        self.fabric_timing: dict[str, FabricTiming] = {}  # cluster -> its decisions' timing
        self._unclaimed: dict[str, set[str]] | None = None
        self._deferred_loaded = False
        self.gpu_tables = GpuTables()
        self._interest: set[tuple[str, str]] = set()  # (host window, workload) interests sent (a cache)
        self.deferred: set[str] = set()  # clusters with evidence not yet decided
        self.workloads = WorkloadWindows(config, self.stores.window_meta, self.stores.window_events,
                                         self.stores.window_facts, hold=hold, deferred=self.deferred)

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
        return self.gpu_tables.known(host_key(cluster, host), pci, gpu_index)

    def ingest(self, obs: Observation) -> list[Effect]:
        """One observation: its facts (workload spec, topology, coverage, GPU table) and its
        events, routed."""
        if obs.kind == "topology":
            spec = TopologySpec.model_validate(obs.attributes.get("topology"))
            return [Route("fabric", obs.cluster, TopologyMessage(topology=spec.model_dump(mode="json")))]
        if obs.kind == "scheduler_event" and obs.format == "workload_yaml":
            return self._ingest_workload(WorkloadSpec.model_validate(obs.attributes.get("workload")))
        if obs.kind == "health_event" and obs.format == "coverage":
            entry = CoverageEntry.model_validate(obs.attributes["coverage"])
            if obs.workload_id:
                return [Route("workload", workload_key(obs.cluster, obs.workload_id), CoverageMessage(entry=entry))]
            return []
        out: list[Effect] = []
        hkey = host_key(obs.cluster, obs.host)
        if obs.kind == "telemetry" and obs.gpu and obs.gpu.pci_bus_id and obs.gpu.index is not None:
            out += self.gpu_tables.learn(hkey, normalise_pci(obs.gpu.pci_bus_id), obs.gpu.index)
        events = self.config.pack.extract(obs)
        if events:
            out += self.gpu_tables.send(hkey)  # the host's table goes ahead of its events
        for event in events:
            out += self._route_event(event, event.cluster or obs.cluster)
        return out

    def _ingest_workload(self, spec: WorkloadSpec) -> list[Effect]:
        """A workload record: its span to the fabric window and the index, its spec to its
        window, a claim to each of its hosts' windows (the events of these hosts routed
        before this record wait there)."""
        span = Span.of(spec)
        if self.route_by_index:
            self.index.add(span)
        return [Route("fabric", spec.cluster, SpanMessage(span=span)),
                Route("workload", workload_key(spec.cluster, spec.workload_id), SpecMessage(spec=spec)),
                *(Route("host", host_key(span.cluster, one.nodes[0]), ClaimMessage(span=one))
                  for one in span.per_host())]

    def _route_event(self, event: Event, cluster: str) -> list[Effect]:
        """One extracted event: published raw, routed to its workload (else its host's window),
        an XID to the host's history, an interest in the host's facts, fabric evidence to the
        cluster's fabric window."""
        wid = event.workload_id or (self.index.route(cluster, event.host, event.at) if self.route_by_index else None)
        hkey = host_key(cluster, event.host)
        out: list[Effect] = [Publish("events", wid or f"{HOST_EVENT_KEY}{event.host}", event),
                             Route("workload", workload_key(cluster, wid), EventMessage(event=event)) if wid
                             else Route("host", hkey, EventMessage(event=event))]
        if event.type == "gpu.xid":
            out.append(Route("host", hkey, HistoryMessage(workload_id=wid, event=event)))
        elif wid and reads_host_facts(event) and (hkey, wid) not in self._interest:
            if len(self._interest) >= INTEREST_CACHE_MAX:
                self._interest.clear()
            self._interest.add((hkey, wid))
            out.append(Route("host", hkey, InterestMessage(workload_id=wid)))
        if fabric_relevant(event):
            out.append(Route("fabric", cluster, EventMessage(event=event)))
        return out

    def pending_tables(self) -> list[Effect]:
        """Every GPU table collected from telemetry and not sent yet, now. A driver calls it
        before it commits the offsets of the observations they came from (the tables live in
        memory only: a table held past a commit would be lost with the process) and at the end
        of a batch."""
        return self.gpu_tables.pending()

    # -- applying channel messages -----------------------------------------------------------

    def apply(self, channel: str, key: str, message: BaseModel, *, now: float = 0.0) -> list[Effect]:
        """Apply one channel message (see :mod:`schemas.messages`) to the machine of ``key``
        on ``channel`` (``workload``, ``host`` or ``fabric``). ``now``: the driver's monotonic
        seconds. Raises ``ValueError`` for another channel or a message the machine does not
        take."""
        if isinstance(message, EventsMessage) and channel in ("workload", "host"):
            # each event as its own EventMessage, in order; what they route on is batched again
            out = []
            for event in message.events:
                out += self.apply(channel, key, EventMessage.model_construct(event=event), now=now)
            return batch_events(out)
        if channel == "workload":
            return self.workloads.apply(key, message, now)
        if channel == "host":
            return self._apply_host(key, message, now)
        if channel == "fabric":
            return self._apply_fabric(key, message, now)
        raise ValueError(f"channel {channel!r}: expected workload, host or fabric")

    def window(self, wid: str) -> WorkloadWindow:
        """The workload window ``wid`` (:meth:`WorkloadWindows.window`)."""
        return self.workloads.window(wid)

    @property
    def windows(self) -> dict[str, WorkloadWindow]:
        """The workload windows in memory, by key."""
        return self.workloads.windows

    def host_window(self, key: str) -> HostWindow:
        """The host window ``key`` (``<cluster>/<host>``; from the cache, else the stores)."""
        hw = self.hosts.get(key)
        if hw is None:
            hw = self.hosts[key] = HostWindow.from_state(
                key, self.stores.host_meta.get(key), route=lambda at, entries: self.index.route("", "", at, entries),
                events=self.stores.host_events, waiting=self._waiting(key))
        return hw

    def _apply_host(self, key: str, message: BaseModel, now: float) -> list[Effect]:
        hw = self.host_window(key)
        out = hw.apply(message, now)
        if hw.changed:
            self.stores.host_meta[key] = hw.to_state()
        return out

    def _waiting(self, key: str) -> set[str]:
        """Event-store keys of the events waiting in host window ``key`` (the index is rebuilt
        from the store once after :meth:`forget`)."""
        if self._unclaimed is None:
            self._unclaimed = {}
            for stored_key in self.stores.host_events.keys():
                self._unclaimed.setdefault(stored_key.split(SEP, 1)[0], set()).add(stored_key)
        return self._unclaimed.setdefault(key, set())

    def idle(self, now: float) -> list[Route]:
        """The workload windows' close and revise ticks due at ``now``
        (:meth:`WorkloadWindows.idle`). A driver calls it on a timer."""
        return self.workloads.idle(now)

    # -- the fabric channel ----------------------------------------------------------------

    def fabric_window(self, cluster: str) -> FabricWindow:
        """The cluster's fabric window (from the cache, else rebuilt from the stores)."""
        fw = self.fabric.get(cluster)
        if fw is None:
            state = self.stores.fabric_meta.get(cluster)
            prefix = f"{cluster}{SEP}"
            events = [stored_event(v) for k, v in self.stores.fabric_events.items() if k.startswith(prefix)]
            context = dict(config=self.config, hold=self.hold, store=self.stores.fabric_events,
                           topologies=self.stores.topology,
                           timing=self.fabric_timing.setdefault(cluster, FabricTiming()))
            fw = FabricWindow.from_state(state, events, **context) if state else FabricWindow(cluster=cluster, **context)
            fw.events.update((e.event_id, e) for e in events)
            self.fabric[cluster] = fw
        return fw

    def _apply_fabric(self, cluster: str, message: BaseModel, now: float) -> list[Effect]:
        fw = self.fabric_window(cluster)
        out = fw.apply(message, now)
        if fw.changed:
            self.stores.fabric_meta[cluster] = fw.to_state()
        if fw.deferred:
            self.deferred.add(cluster)
        else:
            self.deferred.discard(cluster)
        return out

    def due_flushes(self, now: float) -> list[Route]:
        """Flush messages for the clusters with evidence not yet decided whose flush interval
        passed (after a restart: those a previous worker deferred), and the GPU tables
        collected from telemetry, not sent yet, and unchanged since the previous call."""
        if not self._deferred_loaded:
            self._deferred_loaded = True
            self.deferred.update(c for c, state in self.stores.fabric_meta.items() if state and state.get("deferred"))
        every = self.config.window.fabric_flush_s
        fabric = [Route("fabric", c, FlushMessage()) for c in sorted(self.deferred)
                  if now - self.fabric_timing.get(c, FabricTiming()).flushed >= every]
        return fabric + self.gpu_tables.still()

    def forget(self) -> None:
        """Drop every cache (after a rebalance): windows are rebuilt from the stores."""
        self.workloads.forget()
        self.hosts.clear()
        self.fabric.clear()
        self._unclaimed = None
        self._deferred_loaded = False
        self.deferred.clear()
