"""The Faust app: observations in, events, verdicts and dead letters out.

A thin driver of the engine (``correlators``), like the replay driver. Data flow::

    <prefix>.observations (key host)
        -> agent extract: decode (bad input -> dead letter), extract events with the rule
           pack, route by workload (the observation's workload, else the allocation table
           host -> workload by event time)
        -> <prefix>.events (public, key workload) and <app_id>-by-workload (internal, key
           workload: events, workload specs, coverage reports, GPU tables, close ticks)
        -> agent correlate: event-time windows per workload (correlators.windows) whose
           state lives in changelogged tables; provisional verdicts on decisive causes,
           final ones when the watermark passes the workload's end (or, live, when idle)
        -> <prefix>.attributions (compacted, key attribution_id)
        extract also sends events about a cable (link up/down, port states, async port
        errors, counter deltas), scheduler node-down events, topology records and the
        workload spans to <app_id>-by-fabric (internal, key cluster)
        -> agent fabric: per-cluster fabric state (its events, the topology, the workloads
           and their latest verdicts) in changelogged tables; per-port hopping windows
           decide port faults, grouped into switch/rack faults (correlators.fabric); each
           workload gets the fault events relevant to it (by-workload, kind "faults"), and
           every fault its fabric-port and incident verdicts
        -> <prefix>.attributions
    agents store_*: batches of events / verdicts / dead letters -> ClickHouse (idempotent;
    while ClickHouse is down the agent waits and its offsets are not committed).

Tables (changelogged, ``FAULTSTREAM_STORE``): ``window_meta`` (workload -> window state),
``window_events`` (workload + event id -> event), the global ``allocation`` table (host
-> workloads with their time span) and the global ``topology`` table (cluster -> its latest
topology) every worker reads, ``fabric_meta`` (cluster ->
topology, workload spans, latest workload verdicts, what was sent) and ``fabric_events``
(cluster + event id -> event). The in-memory windows are a cache of
these tables, rebuilt after a restart or a rebalance.

The verdict content is ``decide`` over the window's full event set; only *when* it is emitted
depends on arrival and the wall clock (see ``correlators.windows``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import faust
from faust.types import TP
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from pydantic import ValidationError
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from correlators.attribution import default_causal_rules
from correlators.enrich import normalise_pci
from correlators.fabric import PORT_EVENT_TYPES, assemble, correlate as correlate_fabric, superseded, workload_faults
from correlators.rules import load_rule_pack
from correlators.topology import FabricIndex
from correlators.windows import WindowPolicy, WorkloadWindow, is_decisive, verdict_digest
from schemas.bundle import TopologySpec, WorkloadSpec
from schemas.records import (
    SCHEMA_VERSION,
    Attribution,
    CoverageEntry,
    Event,
    Observation,
    Position,
    canonical_json,
)
from sinks.deadletter import DeadLetter
from sinks.kafka_settings import KafkaSettings
from schemas.topics import DEAD_LETTER_MESSAGE_BYTES
from streams.settings import WorkerSettings

log = logging.getLogger("faultstream.worker")
NS = 1_000_000_000
SEP = "\x1f"  # between workload id and event id in window_events keys


class Metrics:
    """Prometheus metrics of one worker process (served at ``/metrics``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.observations = Counter("faultstream_observations_total", "observations consumed", registry=r)
        self.processed = Counter("faultstream_observations_processed_total", "observations processed (not dead-lettered)", registry=r)
        self.events = Counter("faultstream_events_total", "events extracted", ["type"], registry=r)
        self.dead_letters = Counter("faultstream_dead_letters_total", "inputs dead-lettered", ["reason"], registry=r)
        self.verdicts = Counter("faultstream_verdicts_total", "verdicts emitted", ["domain", "kind"], registry=r)
        self.open_windows = Gauge("faultstream_open_windows", "workload windows not closed", registry=r)
        self.lag = Gauge("faultstream_consumer_lag", "messages behind the high watermark", ["topic", "partition"], registry=r)
        self.clickhouse_rows = Counter("faultstream_clickhouse_rows_total", "rows written", ["table"], registry=r)


def _credentials(kafka: KafkaSettings) -> Any:
    kw = kafka.aiokafka_kwargs()
    protocol = kw.get("security_protocol", "PLAINTEXT")
    if protocol.startswith("SASL_"):
        return faust.SASLCredentials(
            username=kw["sasl_plain_username"],
            password=kw["sasl_plain_password"],
            mechanism=kw["sasl_mechanism"],
            ssl_context=kw.get("ssl_context"),
        )
    if protocol == "SSL":
        return faust.SSLCredentials(kw["ssl_context"])
    return None


#: The worker's tables (their changelog topics are declared up front, see declare_topics).
TABLES = ("window_meta", "window_events", "allocation", "fabric_meta", "fabric_events", "topology", "remediation_state")


def internal_topic_specs(settings: WorkerSettings) -> list[Any]:
    """The worker's internal topics: the by-workload repartition topic, the tables'
    changelogs and Faust's leader topic, with ``settings.partitions`` partitions."""
    from schemas.topics import TopicSpec, faust_internal_topics

    by_workload = TopicSpec(
        name=f"{settings.app_id}-by-workload", key="workload id", value_schema=None,
        partitions=settings.partitions, cleanup_policy="delete",
        description="events, workload specs, coverage and GPU tables re-keyed by workload",
    )
    by_fabric = TopicSpec(
        name=f"{settings.app_id}-by-fabric", key="cluster", value_schema=None,
        partitions=settings.partitions, cleanup_policy="delete",
        description="cable events, node-down events, topology, workload spans and workload "
                    "verdicts re-keyed by cluster for the fabric correlator",
    )
    from streams.remediate import remediation_topic_spec

    return [by_workload, by_fabric, remediation_topic_spec(settings),
            *faust_internal_topics(settings.app_id, TABLES, partitions=settings.partitions)]


def declare_topics(settings: WorkerSettings, kafka: KafkaSettings) -> list[str]:
    """Create (idempotently) every topic the worker reads or writes before it starts, so no
    consumer subscribes to a topic that does not exist yet. Returns the names created.
    Raises ``confluent_kafka.KafkaException`` when the broker is unreachable and
    ``schemas.topics.TopicMismatchError`` when an existing topic differs."""
    from schemas.topics import catalogue, create_topics

    # the allocation table is written while consuming observations, so its changelog and the
    # observations topic must have the same partition count: settings.partitions
    public = catalogue(settings.topic_prefix)
    public["observations"] = public["observations"].model_copy(update={"partitions": settings.partitions})
    return create_topics(kafka.confluent_config(), [*public.values(), *internal_topic_specs(settings)])


def create_app(settings: WorkerSettings | None = None, kafka: KafkaSettings | None = None) -> faust.App:
    """Build the worker app. Raises ``pydantic.ValidationError`` for invalid settings."""
    settings = settings or WorkerSettings()
    kafka = kafka or KafkaSettings()
    policy = WindowPolicy(
        allowed_lateness_s=settings.allowed_lateness_s,
        idle_timeout_s=settings.idle_timeout_s or None,
    )
    pack = load_rule_pack()
    metrics = Metrics()
    (settings.data_dir / settings.app_id).mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{s}" for s in kafka.bootstrap_servers.split(",")],
        broker_credentials=_credentials(kafka),
        store=settings.store,
        datadir=str(settings.data_dir / settings.app_id),
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        topic_allow_declare=True,
        consumer_auto_offset_reset="earliest",
        web_enabled=True,
        web_host="127.0.0.1",
        web_bind="127.0.0.1",
        web_port=settings.web_port,
        # a dead letter carries its input base64-encoded: up to the observations topic's
        # limit (schemas.topics.LARGE_MESSAGE_BYTES) plus a third
        producer_max_request_size=DEAD_LETTER_MESSAGE_BYTES,
        # a crashed worker's partitions move to the others after this long
        broker_session_timeout=10.0,
        broker_heartbeat_interval=2.0,
        broker_commit_every=100,
        broker_commit_interval=1.0,
    )
    app.faultstream_metrics = metrics  # type: ignore[attr-defined]

    observations = app.topic(settings.topic("observations"), value_serializer="raw", key_serializer="raw")
    events_out = app.topic(settings.topic("events"), value_serializer="raw", key_serializer="raw")
    attributions = app.topic(settings.topic("attributions"), value_serializer="raw", key_serializer="raw")
    dead_letters = app.topic(settings.topic("deadletter"), value_serializer="raw", key_serializer="raw")
    by_workload = app.topic(
        f"{settings.app_id}-by-workload", internal=True, partitions=settings.partitions,
        value_serializer="raw", key_serializer="raw",
    )
    by_fabric = app.topic(
        f"{settings.app_id}-by-fabric", internal=True, partitions=settings.partitions,
        value_serializer="raw", key_serializer="raw",
    )
    topology_in = app.topic(settings.topic("topology"), value_serializer="raw", key_serializer="raw")
    json_schema = faust.Schema(key_type=str, value_type=None, key_serializer="json", value_serializer="json")
    raw_values = faust.Schema(key_type=str, value_type=bytes, key_serializer="json", value_serializer="raw")
    window_meta = app.Table("window_meta", default=None, partitions=settings.partitions, schema=json_schema)
    window_events = app.Table("window_events", default=None, partitions=settings.partitions, schema=raw_values)
    allocation = app.GlobalTable("allocation", default=None, partitions=settings.partitions, schema=json_schema)
    fabric_meta = app.Table("fabric_meta", default=None, partitions=settings.partitions, schema=json_schema)
    fabric_events = app.Table("fabric_events", default=None, partitions=settings.partitions, schema=raw_values)
    #: cluster -> its latest TopologySpec (JSON data), on every worker (failure domains, ports)
    topology = app.GlobalTable("topology", default=None, partitions=settings.partitions, schema=json_schema)
    app.faultstream_topology = topology  # type: ignore[attr-defined]
    causal = default_causal_rules()
    verdict_version = f"{pack.version}+causal.{causal.version}"

    windows: dict[str, WorkloadWindow] = {}
    window_partition: dict[str, int] = {}
    last_activity: dict[str, float] = {}
    pending_close: set[str] = set()  # close ticks sent and not processed yet
    loaded = {"done": False}

    # -- helpers ---------------------------------------------------------------------------

    async def dead_letter(source: str, reason: str, original: bytes, message: Any) -> None:
        letter = DeadLetter(
            source=source,
            reason=reason,
            original=original,
            original_key=message.key,
            position=Position(topic=message.topic, partition=message.partition, offset=message.offset),
            at_ns=time.time_ns(),
        ).with_id()
        metrics.dead_letters.labels(reason.split(":")[0]).inc()
        log.warning("dead letter from %s at %s/%s/%s: %s", source, message.topic, message.partition,
                    message.offset, reason)
        await dead_letters.send(key=source.encode(), value=canonical_json(letter).encode())

    def span_match(spans: list, at: int) -> str | None:
        """The workload whose span (as the correlator's window: 120 s before the start to
        300 s after the end) holds event time ``at``."""
        for wid, start, end in spans:
            if start - 120 * NS <= at <= (end if end is not None else at) + 300 * NS:
                return wid
        return None

    def workload_of(event: Event) -> str | None:
        return event.workload_id or span_match(allocation.get(event.host) or [], event.at)

    def stored_event(value: Any) -> Event:
        """An event as the window_events table hands it back (bytes, or str/dict depending on
        where the store read it from)."""
        if isinstance(value, dict):
            return Event.model_validate(value)
        if isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        return Event.model_validate_json(value)

    def load_windows() -> None:
        """Rebuild the in-memory windows of this worker's partitions from the tables."""
        if loaded["done"]:
            return
        loaded["done"] = True
        stored: dict[str, list[Event]] = {}
        for key, value in window_events.items():
            wid = key.split(SEP, 1)[0]
            if wid.startswith("host:"):
                continue  # a host's unclaimed events, read when a claim arrives
            stored.setdefault(wid, []).append(stored_event(value))
        for wid, meta in window_meta.items():
            if meta and wid not in windows and not wid.startswith("host:"):
                windows[wid] = WorkloadWindow.from_state(meta, stored.get(wid, []))
                last_activity[wid] = time.monotonic()

    def window(wid: str, partition: int) -> WorkloadWindow:
        load_windows()
        w = windows.get(wid)
        if w is None:
            meta = window_meta.get(wid)
            w = WorkloadWindow.from_state(meta, []) if meta else WorkloadWindow(workload_id=wid)
            windows[wid] = w
        window_partition[wid] = partition
        last_activity[wid] = time.monotonic()
        return w

    async def emit(w: WorkloadWindow, *, final: bool) -> None:
        att = w.emit(pack.version, final=final)
        window_meta[w.workload_id] = w.meta_state()
        if att is None:
            return
        metrics.verdicts.labels(att.domain, "final" if final else "provisional").inc()
        body = canonical_json(att)
        await attributions.send(key=att.attribution_id.encode(), value=body.encode())
        await route_fabric(att.scope.cluster, {"kind": "verdict", "attribution": json.loads(body)})
        log.info(
            "verdict %s rev %d %s %s %s", att.scope.id, att.revision, att.root_cause.code,
            att.quality, "final" if final else "provisional",
        )

    async def route(wid: str, payload: dict[str, Any]) -> None:
        await by_workload.send(key=wid.encode(), value=json.dumps(payload, sort_keys=True).encode())

    async def route_fabric(cluster: str, payload: dict[str, Any]) -> None:
        await by_fabric.send(key=cluster.encode(), value=json.dumps(payload, sort_keys=True).encode())

    def fabric_relevant(event: Event) -> bool:
        """Events the fabric correlator reads: about a cable, or a node the scheduler lost."""
        return event.type in PORT_EVENT_TYPES or (
            event.type == "sched.node_state" and str(event.attributes.get("state", "")).upper() == "DOWN"
        )

    # -- agents ----------------------------------------------------------------------------

    @app.agent(observations)
    async def extract(stream: Any) -> None:
        async for item in stream.events():
            raw: bytes = item.value or b""
            message = item.message
            metrics.observations.inc()
            if len(raw) > settings.max_message_bytes:
                await dead_letter("agent.extract", f"too large: {len(raw)} bytes > {settings.max_message_bytes}", raw, message)
                continue
            try:
                data = json.loads(raw)
                if not isinstance(data, dict):
                    raise ValueError(f"expected a JSON object, got {type(data).__name__}")
                if data.get("schema_version") != SCHEMA_VERSION:
                    await dead_letter("agent.extract", f"schema version: {data.get('schema_version')!r} is not {SCHEMA_VERSION}", raw, message)
                    continue
                obs = Observation.model_validate(data)
            except (ValueError, ValidationError) as exc:
                undecodable = isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError))
                reason = "invalid json" if undecodable else "invalid record"
                await dead_letter("agent.extract", f"{reason}: {str(exc).splitlines()[0][:300]}", raw, message)
                continue
            obs.position = Position.model_construct(
                file=obs.position.file, line=obs.position.line,
                topic=message.topic, partition=message.partition, offset=message.offset,
            )
            try:
                await handle_observation(obs)
            except Exception as exc:  # noqa: BLE001 -- a bad record never stops the agent
                log.exception("observation %s failed", obs.observation_id)
                await dead_letter("agent.extract", f"processing error: {type(exc).__name__}: {exc}", raw, message)
                continue
            metrics.processed.inc()

    async def handle_observation(obs: Observation) -> None:
        if obs.kind == "topology":
            await handle_topology(obs)
            return
        if obs.kind == "scheduler_event" and obs.format == "workload_yaml":
            spec = WorkloadSpec.model_validate(obs.attributes["workload"])
            span = [spec.workload_id, spec.start_ns, spec.end_ns]
            await route_fabric(spec.cluster, {"kind": "workload", "workload_id": spec.workload_id,
                                              "nodes": sorted(spec.nodes), "start": spec.start_ns,
                                              "end": spec.end_ns})
            for host in spec.nodes:
                spans = [s for s in (allocation.get(host) or []) if s[0] != spec.workload_id]
                allocation[host] = sorted([*spans, span], key=lambda s: s[1])
            await route(spec.workload_id, {"kind": "workload", "spec": spec.model_dump(mode="json")})
            # events of these hosts extracted before this record (another partition, another
            # worker) wait in their host's window: claim them
            for host in spec.nodes:
                await route(f"host:{host}", {"kind": "claim", "span": span})
            return
        if obs.kind == "health_event" and obs.format == "coverage":
            entry = CoverageEntry.model_validate(obs.attributes["coverage"])
            if obs.workload_id:
                await route(obs.workload_id, {"kind": "coverage", "entry": entry.model_dump(mode="json")})
            return
        if obs.kind == "telemetry" and obs.gpu and obs.gpu.pci_bus_id and obs.gpu.index is not None and obs.workload_id:
            pci = normalise_pci(obs.gpu.pci_bus_id)
            await route(obs.workload_id, {"kind": "gpu", "host": obs.host, "pci": pci, "index": obs.gpu.index})
        for event in pack.extract(obs):
            metrics.events.labels(event.type).inc()
            wid = workload_of(event)
            body = canonical_json(event)
            await events_out.send(key=(wid or f"host:{event.host}").encode(), value=body.encode())
            await route(wid or f"host:{event.host}", {"kind": "event", "event": json.loads(body)})
            if fabric_relevant(event):
                await route_fabric(event.cluster or obs.cluster, {"kind": "event", "event": json.loads(body)})

    async def handle_topology(obs: Observation) -> None:
        """A topology record (bundle ``topology.yaml`` or ``faultstream connect topology``):
        validated, then handed to the cluster's fabric correlator."""
        spec = TopologySpec.model_validate(obs.attributes.get("topology")).model_dump(mode="json")
        await route_fabric(obs.cluster, {"kind": "topology", "topology": spec})

    @app.agent(topology_in)
    async def topology_records(stream: Any) -> None:
        async for item in stream.events():
            raw: bytes = item.value or b""
            try:
                obs = Observation.model_validate_json(raw)
                if obs.kind != "topology":
                    raise ValueError(f"expected kind 'topology', got {obs.kind!r}")
                await handle_topology(obs)
            except (ValueError, ValidationError) as exc:
                await dead_letter("agent.topology", f"invalid topology record: {str(exc).splitlines()[0][:300]}",
                                  raw, item.message)

    @app.agent(by_workload)
    async def correlate(stream: Any) -> None:
        async for item in stream.events():
            try:
                await correlate_one(item)
                metrics.open_windows.set(sum(1 for x in windows.values() if not x.closed))
            except Exception as exc:  # noqa: BLE001 -- one bad record never stops the agent
                log.exception("correlation of %r failed", item.key)
                await dead_letter("agent.correlate", f"processing error: {type(exc).__name__}: {exc}",
                                  item.value or b"", item.message)

    async def correlate_one(item: Any) -> None:
        """Apply one by-workload record to its window (see the module docstring)."""
        wid = (item.key or b"").decode()
        payload = json.loads(item.value)
        if wid.startswith("host:"):
            await host_window(wid, payload)
            return
        w = window(wid, item.message.partition)
        kind = payload["kind"]
        if kind == "close":
            pending_close.discard(wid)
            if not w.closed and w.events:
                await emit(w, final=True)
            return
        if kind == "event":
            event = Event.model_validate(payload["event"])
            if not w.add_event(event):
                return  # a duplicate from at-least-once delivery
            window_events[f"{wid}{SEP}{event.event_id}"] = canonical_json(event).encode()
            spec = w.workload
            if w.due(w.max_at, policy):
                # the workload's own events are past its end plus the lateness
                await emit(w, final=True)
            elif spec is not None and not w.closed and is_decisive(event, policy.decisive_weight, spec.start_ns):
                await emit(w, final=False)
            return
        if kind == "workload":
            w.spec = payload["spec"]
            start_ns = w.workload.start_ns
            if any(is_decisive(e, policy.decisive_weight, start_ns) for e in w.events.values()):
                # decisive evidence arrived before the scheduler's record (another partition)
                await emit(w, final=False)
                return
        elif kind == "coverage":
            w.add_coverage(CoverageEntry.model_validate(payload["entry"]))
        elif kind == "gpu":
            w.learn_gpu(payload["host"], payload["pci"], int(payload["index"]))
        elif kind == "faults":
            if not w.set_faults([Event.model_validate(e) for e in payload["events"]]):
                return
            # a fault is decisive evidence: re-decide now rather than wait for the idle timer
            w.closed = False
            window_meta[wid] = w.meta_state()
            if w.due(w.max_at, policy):
                await emit(w, final=True)
            elif w.spec is not None and w.events:
                await emit(w, final=False)
            return
        # new facts re-open a closed window; the idle timer (or the next due event)
        # emits the revision, so a burst of updates gives one revision, not one each
        w.closed = False
        window_meta[wid] = w.meta_state()

    async def host_window(key: str, payload: dict[str, Any]) -> None:
        """Events of a host that no known workload claimed yet, and the claims (workload
        spans) seen for the host: an event and its claim may arrive in either order."""
        meta = window_meta.get(key) or {"claims": []}
        if payload["kind"] == "claim":
            claims = [c for c in meta["claims"] if c[0] != payload["span"][0]] + [payload["span"]]
            meta = {"claims": sorted(claims, key=lambda c: c[1])}
            window_meta[key] = meta
            waiting = unclaimed(key)
            for stored_key in sorted(waiting):
                event = stored_event(window_events[stored_key])
                target = span_match([payload["span"]], event.at)
                if target:
                    await route(target, {"kind": "event", "event": event.model_dump(mode="json")})
                    del window_events[stored_key]
                    waiting.discard(stored_key)
        elif payload["kind"] == "event":
            event = Event.model_validate(payload["event"])
            target = span_match(meta["claims"], event.at)
            if target:
                await route(target, {"kind": "event", "event": payload["event"]})
            else:
                stored_key = f"{key}{SEP}{event.event_id}"
                window_events[stored_key] = canonical_json(event).encode()
                unclaimed(key).add(stored_key)

    host_index: dict[str, set[str]] = {}
    host_index_built = {"done": False}

    def unclaimed(key: str) -> set[str]:
        """Keys of the events waiting in host window ``key`` (index rebuilt from the table
        once after a start or a rebalance)."""
        if not host_index_built["done"]:
            host_index_built["done"] = True
            for stored_key in window_events.keys():
                if stored_key.startswith("host:"):
                    host_index.setdefault(stored_key.split(SEP, 1)[0], set()).add(stored_key)
        return host_index.setdefault(key, set())

    # -- the fabric correlator -----------------------------------------------------------------

    fabric_cache: dict[str, dict[str, Event]] = {}  # cluster -> event id -> event
    fabric_flushed: dict[str, float] = {}  # cluster -> monotonic time of its last full decision
    fabric_deferred: set[str] = set()  # clusters with evidence not yet published
    deferred_loaded = {"done": False}

    def cluster_meta(cluster: str) -> dict[str, Any]:
        """The cluster's fabric state: topology, workload spans, their latest verdicts, what
        was sent to each workload, what was published (revision and digest per verdict)."""
        return fabric_meta.get(cluster) or {"topology": None, "workloads": {}, "verdicts": {}, "sent": {}, "emitted": {}}

    def cluster_events(cluster: str) -> dict[str, Event]:
        events = fabric_cache.get(cluster)
        if events is None:
            events = fabric_cache[cluster] = {}
            prefix = f"{cluster}{SEP}"
            for key, value in fabric_events.items():
                if key.startswith(prefix):
                    event = stored_event(value)
                    events[event.event_id] = event
        return events

    @app.agent(by_fabric)
    async def fabric(stream: Any) -> None:
        # one record at a time: Faust writes table changelogs only inside stream iteration.
        # Re-deciding a cluster costs one pass over its cable events (anomalies only: counter
        # samples without error deltas never become events)
        async for item in stream.events():
            try:
                cluster = (item.key or b"").decode()
                payload = json.loads(item.value)
                if payload["kind"] == "flush":
                    if cluster in fabric_deferred:
                        await fabric_decide(cluster, force=True)
                elif fabric_one(cluster, payload):
                    await fabric_decide(cluster)
            except Exception as exc:  # noqa: BLE001 -- one bad record never stops the agent
                log.exception("fabric record %r failed", item.key)
                await dead_letter("agent.fabric", f"processing error: {type(exc).__name__}: {exc}",
                                  item.value or b"", item.message)

    def fabric_one(cluster: str, payload: dict[str, Any]) -> bool:
        """Apply one by-fabric record to the cluster's state; True if the faults or their
        verdicts may have changed."""
        meta = cluster_meta(cluster)
        kind = payload["kind"]
        if kind == "event":
            event = Event.model_validate(payload["event"])
            events = cluster_events(cluster)
            if event.event_id in events:
                return False
            events[event.event_id] = event
            fabric_events[f"{cluster}{SEP}{event.event_id}"] = canonical_json(event).encode()
            return True
        if kind == "topology":
            meta["topology"] = payload["topology"]
            # written here, from the by-fabric stream: a table's changelog must have as many
            # partitions as the topic whose stream writes it (the topology topic has fewer)
            topology[cluster] = payload["topology"]
        elif kind == "workload":
            meta["workloads"][payload["workload_id"]] = [payload["nodes"], payload["start"], payload["end"]]
        elif kind == "verdict":
            att = payload["attribution"]
            old = meta["verdicts"].get(att["scope"]["id"])
            if old is not None and old["revision"] > att["revision"]:
                return False
            meta["verdicts"][att["scope"]["id"]] = att
        fabric_meta[cluster] = meta
        return True

    async def fabric_decide(cluster: str, *, force: bool = False) -> None:
        """Re-decide the cluster's faults from its full event set (as replay does), send each
        workload the fault events relevant to it when that set changed, and emit the fabric
        and incident verdicts whose content changed.

        Throttled: a cluster is re-decided at most once per ``fabric_flush_s``; records that
        arrive sooner are decided together by the next flush tick -- a burst (every counter
        sample of a degrading cable) costs a few passes over the cluster's events and gives a
        few revisions, not one each, and the last revision still holds all the evidence."""
        meta = cluster_meta(cluster)
        now = time.monotonic()
        if not force and now - fabric_flushed.get(cluster, 0.0) < settings.fabric_flush_s:
            fabric_deferred.add(cluster)
            if not meta.get("deferred"):
                meta["deferred"] = True  # survives a crash: a new worker flushes it
                fabric_meta[cluster] = meta
            return
        fabric_deferred.discard(cluster)
        fabric_flushed[cluster] = now
        meta["deferred"] = False
        topo = TopologySpec.model_validate(meta["topology"]) if meta.get("topology") else None
        faults = correlate_fabric(cluster_events(cluster).values(), FabricIndex(topo), cluster=cluster)
        for wid, (nodes, start, end) in sorted(meta["workloads"].items()):
            linked = workload_faults(faults, nodes, start, end, causal.before_start_ns, causal.after_end_ns)
            ids = sorted(ev.event_id for ev in linked)
            if ids != meta["sent"].get(wid, []):
                meta["sent"][wid] = ids
                await route(wid, {"kind": "faults", "events": [ev.model_dump(mode="json") for ev in linked]})
        verdicts = [Attribution.model_validate(v) for _, v in sorted(meta["verdicts"].items())]
        current = assemble(faults, verdicts, ruleset_version=verdict_version)
        live = meta.setdefault("live", {})  # attribution id -> last emitted, still standing
        for att in current:
            linked = [v for v in verdicts if v.incident_id == att.incident_id]
            att = att.model_copy(update={"final": all(v.final for v in linked)})
            if await emit_fabric(meta, att):
                live[att.attribution_id] = att.model_dump(mode="json")
        # verdicts the evidence no longer supports (ports that turned out to be one switch,
        # an episode whose start moved): withdraw them by a revision, never leave them standing
        standing = {a.attribution_id for a in current}
        for att_id in sorted(set(live) - standing):
            await emit_fabric(meta, superseded(Attribution.model_validate(live.pop(att_id)), current))
        fabric_meta[cluster] = meta

    async def emit_fabric(meta: dict[str, Any], att: Attribution) -> bool:
        """Publish a fabric or incident verdict if its content changed; True if published."""
        digest = verdict_digest(att)
        revision, last = meta["emitted"].get(att.attribution_id, [0, None])
        if digest == last:
            return False
        att = att.model_copy(update={"revision": revision + 1})
        meta["emitted"][att.attribution_id] = [revision + 1, digest]
        metrics.verdicts.labels(att.domain, att.scope.kind).inc()
        await attributions.send(key=att.attribution_id.encode(), value=canonical_json(att).encode())
        log.info("verdict %s %s rev %d %s", att.scope.kind, att.scope.id, att.revision, att.root_cause.code)
        return True

    @app.timer(interval=max(0.2, settings.fabric_flush_s / 2))
    async def fabric_flush() -> None:
        # tables are written only while an agent iterates its stream: ask the agent to flush
        try:
            if not deferred_loaded["done"] and app.tables.recovery.completed.is_set():
                deferred_loaded["done"] = True  # after a restart: what the last worker deferred
                fabric_deferred.update(c for c, m in fabric_meta.items() if m and m.get("deferred"))
            for cluster in sorted(fabric_deferred):
                if time.monotonic() - fabric_flushed.get(cluster, 0.0) >= settings.fabric_flush_s:
                    await route_fabric(cluster, {"kind": "flush"})
        except Exception:  # noqa: BLE001 -- a timer must never take the worker down
            log.exception("fabric flush failed")

    if policy.idle_timeout_s:

        @app.timer(interval=max(0.5, policy.idle_timeout_s / 4))
        async def idle_close() -> None:
            if app.rebalancing or not app.tables.recovery.completed.is_set():
                return
            try:
                load_windows()  # windows recovered from the changelog close too
                now = time.monotonic()
                for wid, w in list(windows.items()):
                    if (
                        not w.closed
                        and w.events  # nothing to say yet about a job without evidence
                        and w.spec is not None
                        and wid not in pending_close
                        and now - last_activity.get(wid, now) >= policy.idle_timeout_s
                    ):
                        pending_close.add(wid)
                        await route(wid, {"kind": "close"})
            except Exception:  # noqa: BLE001 -- a timer must never take the worker down
                log.exception("idle close failed")

    @app.on_partitions_revoked.connect
    async def on_revoked(app: faust.App, revoked: set[TP], **kwargs: Any) -> None:
        lost = {tp.partition for tp in revoked if tp.topic == by_workload.get_topic_name()}
        for wid in [w for w, p in window_partition.items() if p in lost]:
            windows.pop(wid, None)
            window_partition.pop(wid, None)
        loaded["done"] = False
        fabric_cache.clear()
        deferred_loaded["done"] = False
        host_index.clear()
        host_index_built["done"] = False

    @app.timer(interval=5.0)
    async def report_lag() -> None:
        consumer = app.consumer
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            read = consumer._read_offset.get(tp)  # faust's last offset handed to an agent
            if high is not None:
                # the high watermark is the next offset to be written
                metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, high - (read + 1 if read is not None else 0)))

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        return web.bytes(generate_latest(metrics.registry), content_type="text/plain; version=0.0.4")

    if settings.clickhouse:
        attach_clickhouse(app, settings, metrics, events_out, attributions, dead_letters)
    from streams.remediate import attach_remediation

    attach_remediation(app, settings, attributions_topic=attributions, dead_letter=dead_letter, metrics=metrics)
    return app


def attach_clickhouse(app: faust.App, settings: WorkerSettings, metrics: Metrics, events_out: Any,
                      attributions: Any, dead_letters: Any) -> None:
    """Agents that batch events, verdicts and dead letters into ClickHouse. A batch is
    retried with exponential back-off until it is written; until then the agent does not
    move on, so its offsets are not committed and nothing is lost (writes are idempotent,
    so a batch replayed after a crash adds no rows)."""
    from sinks.clickhouse import ClickHouseSink, SinkError

    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clickhouse")
    state: dict[str, Any] = {"sink": None}

    def write(table: str, records: list[Any]) -> None:
        if state["sink"] is None:
            state["sink"] = ClickHouseSink(settings.clickhouse)
        sink = state["sink"]
        {"events": sink.write_events, "attributions": sink.write_attributions,
         "dead_letters": sink.write_dead_letters, "remediations": sink.write_remediations,
         "certifications": sink.write_certifications}[table](records)

    async def store(table: str, records: list[Any]) -> None:
        loop = asyncio.get_running_loop()
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(SinkError),
            wait=wait_exponential(multiplier=0.5, max=30),
            before_sleep=lambda rs: log.warning("ClickHouse write failed (%s); retrying", rs.outcome.exception()),
            reraise=True,
        ):
            with attempt:
                await loop.run_in_executor(executor, write, table, records)
        metrics.clickhouse_rows.labels(table).inc(len(records))

    @app.agent(events_out)
    async def store_events(stream: Any) -> None:
        async for batch in stream.take(1000, within=1.0):
            await store("events", [Event.model_validate_json(v) for v in batch])

    @app.agent(attributions)
    async def store_attributions(stream: Any) -> None:
        async for batch in stream.take(100, within=1.0):
            await store("attributions", [Attribution.model_validate_json(v) for v in batch])

    @app.agent(dead_letters)
    async def store_dead_letters(stream: Any) -> None:
        async for batch in stream.take(100, within=1.0):
            await store("dead_letters", [DeadLetter.model_validate_json(v) for v in batch])

    # every remediation transition (ReplacingMergeTree(sequence): the latest per action under
    # FINAL, each transition in remediation_transitions) and every certification; a record that
    # does not validate is logged and skipped here (the remediation agent dead-letters bad input)
    from schemas.records import Certification, RemediationAction

    def valid(model: Any, batch: list[Any]) -> list[Any]:
        out = []
        for value in batch:
            try:
                out.append(model.model_validate_json(value))
            except ValidationError as exc:
                log.warning("%s not stored in ClickHouse: %s", model.__name__, str(exc).splitlines()[0])
        return out

    remediations_in = app.topic(settings.topic("remediations"), value_serializer="raw", key_serializer="raw")
    certifications_in = app.topic(settings.topic("certifications"), value_serializer="raw", key_serializer="raw")

    @app.agent(remediations_in)
    async def store_remediations(stream: Any) -> None:
        async for batch in stream.take(100, within=1.0):
            await store("remediations", valid(RemediationAction, batch))

    @app.agent(certifications_in)
    async def store_certifications(stream: Any) -> None:
        async for batch in stream.take(100, within=1.0):
            await store("certifications", valid(Certification, batch))
