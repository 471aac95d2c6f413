"""The Faust worker: a thin driver of the pipeline (:mod:`correlators.pipeline`).

It maps the pipeline onto Kafka and only adds transport, timers and sinks::

    <prefix>.observations (key host) --batch ingest stage (streams.ingest, a child process)--> Pipeline.ingest
    <app_id>-by-workload (key cluster/workload) --KeyedAgent--> Pipeline.apply("workload")
    <app_id>-by-host (key cluster/host) --KeyedAgent--> Pipeline.apply("host")
    <app_id>-by-fabric (key cluster) --KeyedAgent--> Pipeline.apply("fabric")
    effects (streams.agent.EffectRunner): Route -> the internal topics; Publish ->
    <prefix>.events, <prefix>.attributions
    timers: they only send messages (idle close, revise, fabric flush); the agents apply them
    agents store_*: batches of events / verdicts / dead letters -> ClickHouse (idempotent;
    while ClickHouse is down the agent waits and its offsets are not committed)
    remediation (streams.remediation.agent) and, with FAULTSTREAM_ALERTS_URL, the verdicts as
    Alertmanager alerts (streams.alerts): agents of their own, keyed by cluster

The pipeline's :class:`~correlators.pipeline.Stores` are changelogged Faust tables
(``FAULTSTREAM_STORE``): ``window_meta``, ``window_events``, ``window_facts``, ``host_meta``,
``host_events``, ``fabric_meta``, ``fabric_events`` partitioned like their channel, and the
global table ``topology``, which every worker reads. The in-memory windows are a cache of the tables, rebuilt after a restart
or a rebalance. A record that does not decode or fails is dead-lettered with the reason.

The observations, the high-volume input, do not pass through Faust: the batch ingest stage
(:mod:`streams.ingest`, a confluent-kafka loop in consumer group ``<app_id>-ingest``, which
commits a batch's offsets only after every record it produced was delivered) runs as a child
process of the worker (:class:`IngestService`), started once the tables are recovered and
stopped before the agents, and restarted with back-off when it dies (the worker supervises
it; ``faultstream_ingest_restarts_total``); ``/metrics`` serves both processes' metrics. With
``create_app(stage="correlate")`` it is left out and runs apart (``faultstream worker --stage
ingest``), so the two stages scale on their own.

The verdict content is the engine's decision over a window's whole evidence; only *when* it
is emitted depends on arrival and the wall clock (``docs/architecture.md``).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any, Awaitable, BinaryIO, Callable

import faust
import mode
from faust.types import TP
from prometheus_client import generate_latest
from pydantic import ValidationError

from correlators.config import EngineConfig, WindowPolicy
from correlators.pipeline import Effect, Pipeline, Stores
from schemas.deadletter import DeadLetter as DeadLetterRecord, reason_of
from schemas.messages import PARSERS
from schemas.records import Position
from schemas.topics import DEAD_LETTER_MESSAGE_BYTES
from schemas.wire import encode_record
from sinks.kafka_settings import KafkaSettings
from streams.agent import DeadLetterFn, EffectRunner, KeyedAgent
from streams.codec import decode_record
from streams.memory import release_memory
from streams.metrics import Metrics, merge_expositions
from streams.offsets import MAX_AHEAD, ContinuityGuard
from streams.settings import WorkerSettings

log = logging.getLogger("faultstream.worker")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DataDirLocked(RuntimeError):
    """Another worker process holds the data directory (its RocksDB and chDB files)."""


def lock_data_dir(path: Path) -> BinaryIO:
    """Take an exclusive, non-blocking ``fcntl.flock`` on ``<path>/.lock`` (the directory is
    created) and return the open lock file; the lock lasts while the file is open, and the
    operating system releases it when the process ends, however it ends. Its content is the
    holder's pid. Raises :class:`DataDirLocked` naming the holder when another process holds
    it, ``OSError`` when the directory cannot be created."""
    path.mkdir(parents=True, exist_ok=True)
    lock_path = path / ".lock"
    fh = open(lock_path, "a+b")  # noqa: SIM115 -- held for the life of the worker
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().decode(errors="replace").strip() or "?"
        fh.close()
        raise DataDirLocked(
            f"the data directory {path} is in use by another worker (pid {holder}): give each "
            "worker on a host its own FAULTSTREAM_DATA_DIR") from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()).encode())
    fh.flush()
    return fh


#: RocksDB options of every table partition (each one is a database of its own: 6 tables x
#: FAULTSTREAM_PARTITIONS). Faust's defaults (64 MiB write buffers, up to 3 of them, and a
#: 2 GiB block cache, per database) let what a burst wrote stay resident, in memtables not
#: yet flushed and cached blocks: a worker stayed ~140 MiB above its start after one
#: 16,384-rank job. With these, a database holds at most 2 x 4 MiB of unflushed writes and
#: 4 MiB of cached blocks; the tables are read once per window after a restart or a
#: rebalance, so a small cache costs nothing measurable.
ROCKSDB_OPTIONS = {"write_buffer_size": 4 << 20, "max_write_buffer_number": 2, "block_cache_size": 4 << 20,
                   "block_cache_compressed_size": 4 << 20}

#: seconds between two returns of freed heap memory to the operating system (streams.memory)
MEMORY_RELEASE_S = 15.0

#: child processes that end with the worker when it exits without a commit (its ingest stage)
CHILDREN: set[subprocess.Popen] = set()


def exit_without_commit(reason: str, code: int = 1) -> None:
    """End the process now (``os._exit``), committing no offset: as after a crash, what was
    not committed is read again at the next start (every effect is idempotent). For a
    shutdown that would otherwise wait on a sink or a hung stop. Every process in
    :data:`CHILDREN` still running is killed first (SIGKILL: a hung child must not outlive it)."""
    log.error("exiting without committing: %s", reason)
    for child in list(CHILDREN):
        if child.poll() is None:
            child.kill()
    for handler in logging.getLogger().handlers + log.handlers:
        try:
            handler.flush()
        except Exception:  # noqa: BLE001 -- exiting anyway
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class Worker(faust.Worker):
    """A ``faust.Worker`` (logging as ``Worker``, like it) whose shutdown on SIGTERM / SIGINT takes at most
    ``shutdown_timeout_s`` seconds: the signal sets ``app.faultstream_stop`` (the ClickHouse
    writers stop retrying) and starts a timer that ends the process with
    :func:`exit_without_commit` if the orderly stop has not finished by then."""

    def __init__(self, app: faust.App, *args: Any, shutdown_timeout_s: float = 30.0, **kwargs: Any) -> None:
        super().__init__(app, *args, **kwargs)
        self._faultstream_app = app
        self._shutdown_timeout_s = shutdown_timeout_s

    def _schedule_shutdown(self, signal: Any) -> None:
        stop = getattr(self._faultstream_app, "faultstream_stop", None)
        if stop is not None:
            stop.set()
        timer = threading.Timer(self._shutdown_timeout_s, exit_without_commit,
                                args=(f"shutdown not finished after {self._shutdown_timeout_s:g} s",))
        timer.daemon = True
        timer.start()
        super()._schedule_shutdown(signal)


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
TABLES = ("window_meta", "window_events", "window_facts", "host_meta", "host_events", "allocation", "fabric_meta",
          "fabric_events", "topology", "remediation_state", "alert_state")


def internal_topic_specs(settings: WorkerSettings) -> list[Any]:
    """The worker's internal topics: the by-workload repartition topic, the tables'
    changelogs and Faust's leader topic, with ``settings.partitions`` partitions."""
    from schemas.topics import TopicSpec, faust_internal_topics

    by_workload = TopicSpec(
        name=settings.channel_topic("workload"), key="workload id", value_schema=None,
        partitions=settings.partitions, cleanup_policy="delete",
        description="events, workload specs, coverage, faults and host facts re-keyed by workload",
    )
    by_host = TopicSpec(
        name=settings.channel_topic("host"), key="cluster/host", value_schema=None,
        partitions=settings.partitions, cleanup_policy="delete",
        description="workload claims, events without a workload, GPU tables, XIDs and interests re-keyed by host",
    )
    by_fabric = TopicSpec(
        name=settings.channel_topic("fabric"), key="cluster", value_schema=None,
        partitions=settings.partitions, cleanup_policy="delete",
        description="cable events, node-down events, topology, workload spans and workload "
                    "verdicts re-keyed by cluster for the fabric correlator",
    )
    from streams.alerts import alerts_topic_spec
    from streams.remediation.agent import remediation_topic_spec

    return [by_workload, by_host, by_fabric, remediation_topic_spec(settings), alerts_topic_spec(settings),
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


def engine_config(settings: WorkerSettings) -> EngineConfig:
    """The engine's configuration with the window policy of ``settings``."""
    return EngineConfig.default(window=WindowPolicy(
        allowed_lateness_s=settings.allowed_lateness_s,
        idle_timeout_s=settings.idle_timeout_s or None,
        fabric_flush_s=settings.fabric_flush_s,
        provisional_interval_s=settings.provisional_interval_s,
    ))


def create_app(settings: WorkerSettings | None = None, kafka: KafkaSettings | None = None, *,
               stage: str = "all", batch_size: int = 2000, loglevel: str = "info",
               log_format: str = "text", metrics: Metrics | None = None,
               stop: asyncio.Event | None = None) -> faust.App:
    """Build the worker app. ``stage``: ``all`` (the batch ingest stage runs as a child process
    of the worker, ``batch_size`` records per batch, logging at ``loglevel`` in ``log_format``:
    :class:`IngestService`; its metrics are served with the worker's) or ``correlate`` (no
    ingest: a stage apart, :mod:`streams.ingest`, feeds the internal topics). ``metrics``: the
    worker's Prometheus metrics (default: new); ``stop``: the event a shutdown sets (the
    ClickHouse writers stop retrying; default: new), kept as ``app.faultstream_stop``. Raises
    ``pydantic.ValidationError`` for invalid settings, ``ValueError`` for another stage or a
    batch size below 1, :class:`DataDirLocked` when another worker holds the data directory."""
    if stage not in ("all", "correlate"):
        raise ValueError(f"stage {stage!r}: expected all or correlate (the ingest stage is streams.ingest)")
    if batch_size < 1:
        raise ValueError(f"batch_size {batch_size}: must be at least 1")
    settings = settings or WorkerSettings()
    kafka = kafka or KafkaSettings()
    metrics = metrics or Metrics()
    app = faust_app(settings, kafka, metrics, stop or asyncio.Event())
    raw_topic = partial(app.topic, value_serializer="raw", key_serializer="raw")
    public = {name: raw_topic(settings.topic(name)) for name in ("events", "attributions", "deadletter")}
    channels = {channel: raw_topic(settings.channel_topic(channel), internal=True, partitions=settings.partitions)
                for channel in CHANNELS}
    stores = worker_stores(app, settings)
    app.faultstream_topology = stores.topology  # type: ignore[attr-defined]
    pipeline = Pipeline(engine_config(settings), stores)
    dead_letter = dead_letter_sender(public["deadletter"], metrics)
    runner = EffectRunner(channels, public, metrics, dead_letter)
    before = attach_continuity(app, channels, metrics)
    for channel, topic in channels.items():
        agent = KeyedAgent(channel, PARSERS[channel], lambda c, k, m, now: pipeline.apply(c, k, m, now=now),
                           runner, before=before)
        app.agent(topic, name=f"{__name__}.{channel}")(agent.consume)
    attach_topology_agent(app, raw_topic(settings.topic("topology")), pipeline, runner, metrics)
    attach_timers(app, settings, pipeline, runner, metrics)
    ingest_port = free_port() if stage == "all" else None
    attach_metrics_page(app, metrics, f"http://127.0.0.1:{ingest_port}/metrics" if ingest_port else None)
    if settings.clickhouse:
        from streams.store import attach_clickhouse

        attach_clickhouse(app, settings, metrics, observations=raw_topic(settings.topic("observations")),
                          events=public["events"], attributions=public["attributions"],
                          dead_letters=public["deadletter"], dead_letter=dead_letter,
                          exit_without_commit=exit_without_commit)
    from streams.remediation.agent import attach_remediation

    attach_remediation(app, settings, attributions_topic=public["attributions"], dead_letter=dead_letter,
                       metrics=metrics)
    from streams.alerts import attach_alerts

    attach_alerts(app, settings, attributions_topic=public["attributions"], dead_letter=dead_letter, metrics=metrics,
                  exit_without_commit=exit_without_commit)
    if ingest_port is not None:
        command, env = ingest_command(settings, metrics_port=ingest_port, batch_size=batch_size,
                                      loglevel=loglevel, log_format=log_format)
        IngestService.attach(app, command, env=env, join_timeout_s=settings.shutdown_timeout_s,
                             restarts=metrics.ingest_restarts)
    return app


#: The pipeline's channels, each an internal topic ``<app_id>-by-<channel>`` and an agent.
CHANNELS = ("workload", "host", "fabric")


def faust_app(settings: WorkerSettings, kafka: KafkaSettings, metrics: Metrics, stop: asyncio.Event) -> faust.App:
    """The ``faust.App`` of a worker, its data directory locked (one worker per directory:
    RocksDB and chDB files cannot be shared); ``metrics`` and ``stop`` are kept on it as
    ``faultstream_metrics`` / ``faultstream_stop``."""
    data_lock = lock_data_dir(settings.data_dir / settings.app_id)
    app = faust.App(
        settings.app_id,
        # Faust's aiokafka transport with the fetch wait set for latency (streams.faust_transport)
        broker=[f"faultstream://{s}" for s in kafka.bootstrap_servers.split(",")],
        broker_credentials=_credentials(kafka),
        store=settings.store,
        datadir=str(settings.data_dir / settings.app_id),
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        topic_allow_declare=True,
        consumer_auto_offset_reset="earliest",
        web_enabled=True,
        web_host="127.0.0.1",
        web_bind=settings.web_bind,
        web_port=settings.web_port,
        consumer_group_instance_id=settings.group_instance_id,
        # a dead letter carries its input base64-encoded: up to the observations topic's
        # limit (schemas.topics.LARGE_MESSAGE_BYTES) plus a third
        producer_max_request_size=DEAD_LETTER_MESSAGE_BYTES,
        # a crashed worker's partitions move to the others after this long
        broker_session_timeout=10.0,
        broker_heartbeat_interval=2.0,
        broker_commit_every=100,
        producer_linger=settings.producer_linger_ms / 1000.0,
        broker_commit_interval=1.0,
    )
    app.faultstream_metrics = metrics  # type: ignore[attr-defined]
    app.faultstream_fetch_max_wait_ms = settings.fetch_max_wait_ms  # type: ignore[attr-defined]
    app.faultstream_data_lock = data_lock  # type: ignore[attr-defined]
    app.faultstream_stop = stop  # type: ignore[attr-defined]
    return app


def worker_stores(app: faust.App, settings: WorkerSettings) -> Stores:
    """The pipeline's stores as changelogged Faust tables (``topology`` global: every worker
    reads it)."""
    json_schema = faust.Schema(key_type=str, value_type=None, key_serializer="json", value_serializer="json")
    raw_values = faust.Schema(key_type=str, value_type=bytes, key_serializer="json", value_serializer="raw")

    def table(name: str, schema: Any, *, global_: bool = False) -> Any:
        factory = app.GlobalTable if global_ else app.Table
        options = dict(ROCKSDB_OPTIONS) if settings.store.startswith("rocksdb") else None
        return factory(name, default=None, partitions=settings.partitions, schema=schema, options=options)

    return Stores(
        window_meta=table("window_meta", json_schema),
        window_events=table("window_events", raw_values),
        window_facts=table("window_facts", json_schema),
        host_meta=table("host_meta", json_schema),
        host_events=table("host_events", raw_values),
        fabric_meta=table("fabric_meta", json_schema),
        fabric_events=table("fabric_events", raw_values),
        # written from the by-fabric stream (a table's changelog has as many partitions as
        # the topic whose stream writes it); read by the remediation agent for failure domains
        topology=table("topology", json_schema, global_=True),
    )


def dead_letter_sender(topic: Any, metrics: Metrics) -> DeadLetterFn:
    """A coroutine function sending a :class:`~schemas.deadletter.DeadLetter` of an input
    (``source``, ``reason``, the original bytes, the Faust message it came in) to ``topic``."""

    async def dead_letter(source: str, reason: str, original: bytes | None, message: Any) -> None:
        letter = DeadLetterRecord(
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
        value, headers = encode_record(letter)
        await topic.send(key=source.encode(), value=value, headers=headers)

    return dead_letter


def attach_continuity(app: faust.App, channels: dict[str, Any], metrics: Metrics) -> Callable[[Any], Awaitable[None]]:
    """Offset continuity of the agents' input topics (no holes in their offsets: delete
    policy, no transactions; :mod:`streams.offsets`): Faust commits no jump in them, each
    partition's start is checked, and a record after records left out seeks its partition
    back. Returns the check to run before each record; a timer seeks back again to a gap still
    open since its last tick (Faust can drop the records read again once more, and a quiet
    partition brings no record that would ask)."""
    guard = ContinuityGuard()
    app.faultstream_consecutive_topics = frozenset(  # type: ignore[attr-defined]
        channel.get_topic_name() for channel in channels.values())

    def on_seek(starts: dict[TP, int]) -> None:
        for tp, offset in starts.items():
            guard.start(tp, offset, app.consumer_generation_id)

    app.faultstream_on_seek = on_seek  # type: ignore[attr-defined]

    async def read_again_if_left_out(message: Any) -> None:
        abandoned = guard.abandoned
        back = guard.seen(message.tp, message.offset, app.consumer_generation_id)
        if guard.abandoned != abandoned:
            log.error("%s/%s: a gap in offsets before %d did not fill after %d records; given up",
                      message.topic, message.partition, message.offset, MAX_AHEAD)
        if back is None:
            return
        metrics.offset_gaps.labels(message.topic).inc()
        log.warning("%s/%s: offsets %d..%d were not handed to the agent; reading them again",
                    message.topic, message.partition, back, message.offset - 1)
        await app.consumer.seek(message.tp, back)

    open_before: dict[Any, int] = {}  # the gaps open at the last tick

    @app.timer(interval=2.0)
    async def read_open_gaps_again() -> None:
        if not ready(app):
            return
        now_open = guard.open_gaps()
        assignment = app.consumer.assignment()
        for tp, back in sorted(now_open.items()):
            if open_before.get(tp) == back and tp in assignment:
                metrics.offset_gaps.labels(tp.topic).inc()
                log.warning("%s/%s: offsets from %d are still not handed to the agent; reading them again",
                            tp.topic, tp.partition, back)
                await app.consumer.seek(tp, back)
        open_before.clear()
        open_before.update(now_open)

    @app.on_partitions_revoked.connect
    async def reset_guard(app: faust.App, revoked: set[TP], **kwargs: Any) -> None:
        guard.reset()

    return read_again_if_left_out


def ready(app: faust.App) -> bool:
    """True when the app is not rebalancing and its tables are recovered."""
    return not app.rebalancing and app.tables.recovery.completed.is_set()


def attach_topology_agent(app: faust.App, topic: Any, pipeline: Pipeline, runner: EffectRunner,
                          metrics: Metrics) -> None:
    """The agent of the topology topic: a record is ingested (its fabric window gets the
    topology), a tombstone deletes the topology of the cluster its key names; a bad one is
    dead-lettered. No size limit: a fleet's topology may be larger than an observation."""
    outcome = {o: metrics.inputs.labels("topology", o) for o in ("processed", "dead_lettered")}

    async def refuse(reason: str, raw: bytes | None, message: Any) -> None:
        await runner.dead_letter("agent.topology", reason, raw, message)
        outcome["dead_lettered"].inc()

    async def one(item: Any) -> None:
        raw: bytes | None = item.value
        if raw is None:
            cluster = (item.key or b"").decode("utf-8", "replace").strip()
            if not cluster:
                return await refuse("topology tombstone without a cluster key", None, item.message)
            await runner.run(pipeline.delete_topology(cluster))
            outcome["processed"].inc()
            return
        obs = decode_record(raw, None)
        if not isinstance(obs, str) and obs.kind != "topology":
            obs = f"invalid record: expected kind 'topology', got {obs.kind!r}"
        if isinstance(obs, str):
            return await refuse(f"invalid topology record: {obs}", raw, item.message)
        try:
            await runner.run(pipeline.ingest(obs))
        except (ValueError, ValidationError) as exc:  # the pipeline refused it: no traceback
            return await refuse(f"invalid topology record: {reason_of(exc)}", raw, item.message)
        except Exception as exc:  # noqa: BLE001 -- a bad record never stops the agent
            log.exception("topology record %s failed", obs.observation_id)
            return await refuse(f"processing error: {type(exc).__name__}: {str(exc)[:300]}", raw, item.message)
        outcome["processed"].inc()

    @app.agent(topic)
    async def topology_records(stream: Any) -> None:
        async for item in stream.events():
            await one(item)


def attach_timers(app: faust.App, settings: WorkerSettings, pipeline: Pipeline, runner: EffectRunner,
                  metrics: Metrics) -> None:
    """The worker's timers. They only send messages (the agents apply them and write the
    tables): fabric flushes and GPU tables (:meth:`Pipeline.due_flushes`), idle closes and
    provisional revisions held back (:meth:`Pipeline.idle`); and they sample the open windows
    and the consumer lag, and return freed heap memory. A failing timer logs and goes on. After
    a rebalance the pipeline's caches are dropped (rebuilt from the tables)."""

    def every(interval: float, name: str, ticks: Callable[[float], list[Effect]]) -> None:
        async def tick() -> None:
            try:
                if ready(app):
                    await runner.run(ticks(time.monotonic()))
            except Exception:  # noqa: BLE001 -- a timer must never take the worker down
                log.exception("%s failed", name)

        app.timer(interval=interval, name=f"{__name__}.{name}")(tick)

    window = pipeline.config.window
    every(max(0.2, settings.fabric_flush_s / 2), "fabric flush", pipeline.due_flushes)
    periods = [p for p in (window.idle_timeout_s, window.provisional_interval_s) if p]
    if periods:  # idle close, and the provisional revisions held back by the minimum interval
        every(max(0.5, min(periods) / 4), "idle close", pipeline.idle)

    @app.timer(interval=MEMORY_RELEASE_S)
    async def release_freed_memory() -> None:
        """Return the heap a burst freed to the operating system (streams/memory.py)."""
        release_memory()

    @app.on_partitions_revoked.connect
    async def on_revoked(app: faust.App, revoked: set[TP], **kwargs: Any) -> None:
        pipeline.forget()

    @app.timer(interval=5.0)
    async def report_lag() -> None:
        metrics.open_windows.set(sum(1 for w in pipeline.windows.values() if not w.closed))
        sample_lag(app, metrics)


def sample_lag(app: faust.App, metrics: Metrics) -> None:
    """Set ``faultstream_consumer_lag`` of every assigned partition an agent consumes (the
    changelogs are read by table recovery, not agents): the high watermark less the next
    offset to read (one after the last handed to an agent, else the committed offset)."""
    consumer = app.consumer
    consumed = {name for agent in app.agents.values() for name in getattr(agent.channel, "topics", ())}
    for tp in consumer.assignment():
        if tp.topic not in consumed:
            continue
        high = consumer.highwater(tp)
        if high is None:
            continue
        read = consumer._read_offset.get(tp)
        committed = consumer._committed_offset.get(tp)
        position = read + 1 if read is not None else (committed if committed is not None else 0)
        metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, high - position))


def attach_metrics_page(app: faust.App, metrics: Metrics, ingest_metrics: str | None) -> None:
    """``/metrics``: the worker's metrics and, with ``ingest_metrics`` (its URL), the ingest
    stage's, one family per name."""

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        body = generate_latest(metrics.registry)
        if ingest_metrics is not None:
            import aiohttp

            try:
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
                    async with session.get(ingest_metrics) as response:
                        body = merge_expositions(body.decode(), await response.text())
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
                log.warning("the ingest stage's metrics at %s: %s", ingest_metrics, exc)
        return web.bytes(body, content_type="text/plain; version=0.0.4")


#: Seconds between an ingest child's death and its restart, by consecutive failure (1st,
#: 2nd, ...; the last one repeats): the first restart is at once (a crash or a kill -9 costs
#: a consumer-group rejoin, no more), a child that keeps dying is retried at most every 30 s.
RESTART_BACKOFF_S = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0)


def restart_delay(failures: int, schedule: tuple[float, ...] = RESTART_BACKOFF_S) -> float:
    """Seconds to wait before restarting a child after its ``failures``-th consecutive death
    (1-based; ``failures`` below 1 is taken as 1): ``schedule[failures - 1]``, capped at its
    last entry (a bounded back-off)."""
    return schedule[min(max(failures, 1), len(schedule)) - 1]


class IngestService(mode.Service):
    """The batch ingest stage (:mod:`streams.ingest`) as a child process of the worker, so the
    two halves use two cores (one Python process runs on one at a time), as a Faust service:
    started once the app has recovered its tables, stopped before the agents. The worker
    supervises it.

    ``command``: the child's command line (:func:`ingest_command`); ``env``: its environment;
    ``restarts``: a Prometheus counter (``faultstream_ingest_restarts_total``) or None.
    The child stops by itself when the worker's process ends, however it ends (it watches its
    parent, ``--parent-pid``). Stop: SIGTERM to the child, whose batch in progress completes
    and is committed, then at most ``join_timeout_s`` seconds' wait before SIGKILL. When the
    child exits on its own (a produced record not delivered, a consumer error that is not
    transient, a crash, a kill -9) the worker starts a new one after :func:`restart_delay`
    seconds (:data:`RESTART_BACKOFF_S`: at once, then 1, 2, 5, 10, 30 s for a child that keeps
    dying; the count of consecutive failures is reset once a child has run
    ``stable_after_s`` seconds) and counts the restart. Nothing is lost: the dead child
    committed only batches whose records were delivered, and its consumer group (the same
    ``<app_id>-ingest``) hands the new child the uncommitted offsets again. A worker that
    exits without a commit (a stop past its deadline) kills the child first
    (:data:`CHILDREN`)."""

    command: list[str]
    env: dict[str, str] | None = None
    join_timeout_s: float = 30.0
    poll_s: float = 0.5
    stable_after_s: float = 60.0
    backoff_s: tuple[float, ...] = RESTART_BACKOFF_S
    restarts: Any = None

    @classmethod
    def attach(cls, app: faust.App, command: list[str], *, env: dict[str, str] | None = None,
               join_timeout_s: float = 30.0, restarts: Any = None) -> None:
        """Register a service running ``command`` with ``app`` (``app.service``); ``restarts``:
        the counter to increment per restart (a ``prometheus_client.Counter``) or None."""
        app.service(type("Ingest", (cls,), {"command": command, "env": env, "join_timeout_s": join_timeout_s,
                                            "restarts": restarts}))

    def __post_init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self._stopping = False
        self.failures = 0  # consecutive deaths of the child
        self.restarted = 0  # restarts since the worker started

    def _spawn(self) -> None:
        # a session of its own: a terminal's Ctrl-C reaches the worker, which stops the child
        self.proc = subprocess.Popen(self.command, env=self.env, start_new_session=True)
        self._started_at = time.monotonic()
        CHILDREN.add(self.proc)
        log.info("ingest stage started as process %d", self.proc.pid)

    async def on_start(self) -> None:
        self._spawn()
        self.add_future(self._watch())

    async def _watch(self) -> None:
        while not self._stopping:
            proc = self.proc
            assert proc is not None
            code = proc.poll()
            if code is None:
                await asyncio.sleep(self.poll_s)
                continue
            CHILDREN.discard(proc)
            if self._stopping:
                return
            ran = time.monotonic() - self._started_at
            self.failures = 1 if ran >= self.stable_after_s else self.failures + 1
            delay = restart_delay(self.failures, self.backoff_s)
            how = f"killed by signal {-code}" if code < 0 else f"exited with {code}"
            log.error("the ingest stage (process %d) %s after %.1f s: restarting it in %g s "
                      "(consecutive failure %d)", proc.pid, how, ran, delay, self.failures)
            deadline = time.monotonic() + delay
            while not self._stopping and time.monotonic() < deadline:
                await asyncio.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())))
            if self._stopping:
                return
            self._spawn()
            self.restarted += 1
            if self.restarts is not None:
                self.restarts.inc()

    async def on_stop(self) -> None:
        self._stopping = True
        proc = self.proc
        if proc is None or proc.poll() is not None:
            if proc is not None:
                CHILDREN.discard(proc)
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.get_running_loop().run_in_executor(None, proc.wait, self.join_timeout_s)
        except subprocess.TimeoutExpired:
            log.error("the ingest stage (process %d) did not stop in %g s: killed", proc.pid, self.join_timeout_s)
            proc.kill()
            proc.wait()
        CHILDREN.discard(proc)


def ingest_command(settings: WorkerSettings, *, metrics_port: int, batch_size: int, loglevel: str,
                   log_format: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of the worker's ingest stage (``python -m
    streams.ingest``, :func:`streams.ingest.main`, the options of ``faultstream worker --stage
    ingest``): this interpreter, the worker's effective settings (every
    :class:`WorkerSettings` field as its ``FAULTSTREAM_*`` variable, over the worker's
    environment), ``/metrics`` on 127.0.0.1:``metrics_port``, watching this process
    (``--parent-pid``)."""
    effective = {f"FAULTSTREAM_{name.upper()}": str(value)
                 for name, value in settings.model_dump(mode="json").items() if value is not None}
    env = dict(os.environ) | effective | {"FAULTSTREAM_WEB_BIND": "127.0.0.1"}
    command = [sys.executable, "-m", "streams.ingest",
               "--web-port", str(metrics_port), "--batch-size", str(batch_size),
               "--loglevel", loglevel, "--log-format", log_format, "--parent-pid", str(os.getpid())]
    return command, env
