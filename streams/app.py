"""The Faust worker: a thin driver of the pipeline (:mod:`correlators.pipeline`).

It maps the pipeline onto Kafka and only adds transport, timers and sinks::

    <prefix>.observations (key host) --agent extract--> Pipeline.ingest
    <app_id>-by-workload (key workload | host:<h>) --agent correlate--> Pipeline.apply("workload")
    <app_id>-by-fabric (key cluster) --agent fabric--> Pipeline.apply("fabric")
    effects: Route -> the two internal topics; Publish -> <prefix>.events, <prefix>.attributions
    timers: idle close and fabric flush send messages (the agents apply them)
    agents store_*: batches of events / verdicts / dead letters -> ClickHouse (idempotent;
    while ClickHouse is down the agent waits and its offsets are not committed)

The pipeline's :class:`~correlators.pipeline.Stores` are changelogged Faust tables
(``FAULTSTREAM_STORE``): ``window_meta``, ``window_events``, ``fabric_meta``,
``fabric_events`` partitioned like their channel, and the global tables ``allocation``,
``gpus``, ``node_history`` (written while consuming observations) and ``topology``, which
every worker reads. The in-memory windows are a cache of the tables, rebuilt after a restart
or a rebalance. A record that does not decode or fails is dead-lettered with the reason.

The verdict content is the engine's decision over a window's whole evidence; only *when* it
is emitted depends on arrival and the wall clock (``docs/architecture.md``).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import faust
from faust.types import TP
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from pydantic import ValidationError

from correlators.config import EngineConfig, WindowPolicy
from correlators.pipeline import Effect, Pipeline, Route, Stores
from schemas.messages import message_json, parse_fabric_message, parse_workload_message
from schemas.records import SCHEMA_VERSION, Attribution, Observation, Position, canonical_json
from schemas.deadletter import DeadLetter
from sinks.kafka_settings import KafkaSettings
from schemas.topics import DEAD_LETTER_MESSAGE_BYTES
from streams.settings import WorkerSettings

log = logging.getLogger("faultstream.worker")


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
TABLES = ("window_meta", "window_events", "allocation", "fabric_meta", "fabric_events", "topology", "gpus",
          "node_history", "remediation_state")


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
    config = EngineConfig.default(window=WindowPolicy(
        allowed_lateness_s=settings.allowed_lateness_s,
        idle_timeout_s=settings.idle_timeout_s or None,
        fabric_flush_s=settings.fabric_flush_s,
    ))
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

    def raw_topic(name: str, **kw: Any) -> Any:
        return app.topic(name, value_serializer="raw", key_serializer="raw", **kw)

    observations = raw_topic(settings.topic("observations"))
    topology_in = raw_topic(settings.topic("topology"))
    public = {"events": raw_topic(settings.topic("events")),
              "attributions": raw_topic(settings.topic("attributions"))}
    dead_letters = raw_topic(settings.topic("deadletter"))
    channels = {
        "workload": raw_topic(f"{settings.app_id}-by-workload", internal=True, partitions=settings.partitions),
        "fabric": raw_topic(f"{settings.app_id}-by-fabric", internal=True, partitions=settings.partitions),
    }
    json_schema = faust.Schema(key_type=str, value_type=None, key_serializer="json", value_serializer="json")
    raw_values = faust.Schema(key_type=str, value_type=bytes, key_serializer="json", value_serializer="raw")

    def table(name: str, schema: Any, *, global_: bool = False) -> Any:
        factory = app.GlobalTable if global_ else app.Table
        return factory(name, default=None, partitions=settings.partitions, schema=schema)

    stores = Stores(
        window_meta=table("window_meta", json_schema),
        window_events=table("window_events", raw_values),
        fabric_meta=table("fabric_meta", json_schema),
        fabric_events=table("fabric_events", raw_values),
        # written while consuming observations (keyed by host), read by every worker
        allocation=table("allocation", json_schema, global_=True),
        gpus=table("gpus", json_schema, global_=True),
        node_history=table("node_history", json_schema, global_=True),
        # written from the by-fabric stream (a table's changelog has as many partitions as
        # the topic whose stream writes it); read by the remediation agent for failure domains
        topology=table("topology", json_schema, global_=True),
    )
    app.faultstream_topology = stores.topology  # type: ignore[attr-defined]
    pipeline = Pipeline(config, stores)

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

    async def run(effects: list[Effect]) -> None:
        """Carry out the pipeline's effects: routes onto the internal topics, records onto
        the public ones."""
        for effect in effects:
            if isinstance(effect, Route):
                await channels[effect.channel].send(key=effect.key.encode(), value=message_json(effect.message))
                continue
            record = effect.record
            await public[effect.topic].send(key=effect.key.encode(), value=canonical_json(record).encode())
            if isinstance(record, Attribution):
                kind = ("final" if record.final else "provisional") if record.scope.kind == "workload" else record.scope.kind
                metrics.verdicts.labels(record.domain, kind).inc()
                log.info("verdict %s %s rev %d %s %s %s", record.scope.kind, record.scope.id, record.revision,
                         record.root_cause.code, record.quality, kind)
            else:
                metrics.events.labels(record.type).inc()

    def decode_observation(raw: bytes) -> Observation | str:
        """The observation in ``raw``, or the reason it is dead-lettered."""
        if len(raw) > settings.max_message_bytes:
            return f"too large: {len(raw)} bytes > {settings.max_message_bytes}"
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError(f"expected a JSON object, got {type(data).__name__}")
            if data.get("schema_version") != SCHEMA_VERSION:
                return f"schema version: {data.get('schema_version')!r} is not {SCHEMA_VERSION}"
            return Observation.model_validate(data)
        except RecursionError:
            return "invalid json: nested too deeply"
        except (ValueError, ValidationError) as exc:
            undecodable = isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError))
            reason = "invalid json" if undecodable else "invalid record"
            return f"{reason}: {str(exc).splitlines()[0][:300]}"

    # -- agents ----------------------------------------------------------------------------

    @app.agent(observations)
    async def extract(stream: Any) -> None:
        async for item in stream.events():
            raw: bytes = item.value or b""
            message = item.message
            metrics.observations.inc()
            obs = decode_observation(raw)
            if isinstance(obs, str):
                await dead_letter("agent.extract", obs, raw, message)
                continue
            obs.position = Position.model_construct(
                file=obs.position.file, line=obs.position.line,
                topic=message.topic, partition=message.partition, offset=message.offset,
            )
            try:
                await run(pipeline.ingest(obs))
            except Exception as exc:  # noqa: BLE001 -- a bad record never stops the agent
                log.exception("observation %s failed", obs.observation_id)
                await dead_letter("agent.extract", f"processing error: {type(exc).__name__}: {exc}", raw, message)
                continue
            metrics.processed.inc()

    @app.agent(topology_in)
    async def topology_records(stream: Any) -> None:
        async for item in stream.events():
            raw: bytes = item.value or b""
            try:
                obs = Observation.model_validate_json(raw)
                if obs.kind != "topology":
                    raise ValueError(f"expected kind 'topology', got {obs.kind!r}")
                await run(pipeline.ingest(obs))
            except (ValueError, ValidationError) as exc:
                await dead_letter("agent.topology", f"invalid topology record: {str(exc).splitlines()[0][:300]}",
                                  raw, item.message)

    async def apply(channel: str, item: Any) -> None:
        """One internal record through the pipeline; a bad one is dead-lettered."""
        try:
            parse = parse_workload_message if channel == "workload" else parse_fabric_message
            message = parse(item.value or b"")
            await run(pipeline.apply(channel, (item.key or b"").decode(), message, now=time.monotonic()))
        except Exception as exc:  # noqa: BLE001 -- one bad record never stops the agent
            log.exception("%s record %r failed", channel, item.key)
            await dead_letter(f"agent.{channel}", f"processing error: {type(exc).__name__}: {exc}",
                              item.value or b"", item.message)

    @app.agent(channels["workload"])
    async def correlate(stream: Any) -> None:
        async for item in stream.events():
            await apply("workload", item)
            metrics.open_windows.set(sum(1 for w in pipeline.windows.values() if not w.closed))

    @app.agent(channels["fabric"])
    async def fabric(stream: Any) -> None:
        # one record at a time: Faust writes table changelogs only inside stream iteration
        async for item in stream.events():
            await apply("fabric", item)

    # -- timers: they only send messages; the agents apply them (and write the tables) -----

    def ready() -> bool:
        return not app.rebalancing and app.tables.recovery.completed.is_set()

    @app.timer(interval=max(0.2, settings.fabric_flush_s / 2))
    async def fabric_flush() -> None:
        try:
            if ready():
                await run(pipeline.due_flushes(time.monotonic()))
        except Exception:  # noqa: BLE001 -- a timer must never take the worker down
            log.exception("fabric flush failed")

    if config.window.idle_timeout_s:

        @app.timer(interval=max(0.5, config.window.idle_timeout_s / 4))
        async def idle_close() -> None:
            try:
                if ready():
                    await run(pipeline.idle(time.monotonic()))
            except Exception:  # noqa: BLE001 -- a timer must never take the worker down
                log.exception("idle close failed")

    @app.on_partitions_revoked.connect
    async def on_revoked(app: faust.App, revoked: set[TP], **kwargs: Any) -> None:
        pipeline.forget()

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
        from streams.store import attach_clickhouse

        attach_clickhouse(app, settings, metrics, observations=observations, events=public["events"],
                          attributions=public["attributions"], dead_letters=dead_letters)
    from streams.remediate import attach_remediation

    attach_remediation(app, settings, attributions_topic=public["attributions"], dead_letter=dead_letter, metrics=metrics)
    return app
