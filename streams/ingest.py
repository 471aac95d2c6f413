"""The batch ingest stage: observations -> events and routed messages, outside Faust.

``faultstream worker`` (``--stage all``, the default) runs it as a child process beside the
Faust agents (``streams.app.IngestService``); ``--stage ingest`` runs it alone and ``--stage
correlate`` the Faust worker without it, so the two scale apart. The stage is a plain
confluent-kafka loop::

    <prefix>.observations --consume up to batch_size (consumer group <app_id>-ingest)-->
        decode (every record is validated; no cyclic garbage collection while a batch is
        handled): msgspec reads it first (streams.codec.read_observation); a log line no rule
        can match or a telemetry sample that changes nothing (WireObservation.inert) is
        counted, nothing more; every other record is validated by pydantic
        (streams.codec.decode_record), which names what is wrong with a bad one
        -> Pipeline.ingest (correlators.pipeline)
        -> the batch's events to one window key gathered (correlators.pipeline.batch_events)
        -> produce: Route -> <app_id>-by-workload / -by-host / -by-fabric, Publish -> <prefix>.events,
           scheduler workload records -> the remediation agent's by-cluster topic,
           undecodable or failing records -> <prefix>.deadletter (with the reason)
        -> flush (every delivery confirmed) -> commit the batch's offsets

At least once: offsets are committed only after every record the batch produced was
delivered; after a crash the uncommitted batch is read again, and its outputs collapse by id
downstream (events and messages are deterministic; windows keep one copy of each event). A
delivery that fails ends the loop with :class:`DeliveryFailed`, nothing committed.

The stage keeps no allocation: its pipeline routes every event without a workload id to the
host's window (``Pipeline(route_by_index=False)``), which routes it by the claims it holds,
with the same rule. Its other state (the GPU tables collected from telemetry, sent to the host
windows) is a cache of what the host windows keep; the topic is keyed by host, so a host's
samples and lines reach one consumer. Producers partition keys with murmur2 like Faust's, so
a key lands on the partition a Faust producer of the same key picks.

Metrics (Prometheus, ``/metrics`` on 127.0.0.1:``--web-port``): the worker's
``faultstream_observations_total``, ``faultstream_observations_processed_total``,
``faultstream_events_total``, ``faultstream_dead_letters_total`` and
``faultstream_agent_inputs_total{agent="ingest"}``, plus
``faultstream_ingest_batch_seconds`` (consume to commit).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import Counter
from typing import Any, Callable, Optional

import typer

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from prometheus_client import Histogram, start_http_server

from connectors.registry import cli_fail
from correlators.config import EngineConfig, WindowPolicy
from correlators.pipeline import Effect, Pipeline, Publish, batch_events
from correlators.rules.engine import gc_paused, light_record
from schemas.deadletter import DeadLetter
from schemas.messages import message_json
from schemas.records import Event, Position
from schemas.wire import Headers, encode_record
from schemas.topics import DEAD_LETTER_MESSAGE_BYTES
from streams.codec import decode_record, encode_effect, read_observation
from streams.memory import release_memory
from streams.metrics import Metrics
from streams.remediation.inputs import allocation_message
from streams.settings import WorkerSettings
from transport.kafka_settings import KafkaSettings, with_partitioner

log = logging.getLogger("faultstream.ingest")

#: The fields a consumed record's position is given (its file and line, and where on Kafka).
_POSITION_SET = frozenset({"file", "line", "topic", "partition", "offset"})

#: Least seconds between two returns of freed heap memory to the system (after a burst, when
#: a batch comes back empty; streams.memory).
MEMORY_RELEASE_S = 10.0

#: The dead letters' ``source``.
SOURCE = "stage.ingest"


class DeliveryFailed(RuntimeError):
    """A record the stage produced was not delivered: the batch's offsets are not committed."""


class IngestStage:
    """The batch ingest loop (module docstring).

    ``settings`` / ``kafka``: as the worker's (``app_id`` names the consumer group
    ``<app_id>-ingest`` and the internal topics; ``producer_linger_ms`` is the producer's
    ``linger.ms``; ``group_instance_id``, when set, makes the consumer a static member of its
    group, as the Faust agents are of theirs). ``batch_size``: most records per batch;
    ``poll_timeout_s``: how long one consume call waits for the first record (a latency bound,
    seconds). With ``settings.remediation`` the scheduler's workload records also go to the
    remediation agents' topic (their allocations). Raises ``ValueError`` for a batch size below 1."""

    def __init__(self, settings: WorkerSettings, kafka: KafkaSettings, *, batch_size: int = 2000,
                 poll_timeout_s: float = 0.05) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size {batch_size}: must be at least 1")
        self.settings = settings
        self.batch_size = batch_size
        self.poll_timeout_s = poll_timeout_s
        config = EngineConfig.default(window=WindowPolicy(
            allowed_lateness_s=settings.allowed_lateness_s,
            idle_timeout_s=settings.idle_timeout_s or None,
            fabric_flush_s=settings.fabric_flush_s,
        ))
        self.pipeline = Pipeline(config, route_by_index=False)
        self.metrics = Metrics()
        self.batch_seconds = Histogram("faultstream_ingest_batch_seconds", "one batch, consume to commit (s)",
                                       registry=self.metrics.registry)
        self._processed = self.metrics.inputs.labels("ingest", "processed")
        self._dead_lettered = self.metrics.inputs.labels("ingest", "dead_lettered")
        self.topics = {
            **{channel: settings.channel_topic(channel) for channel in ("workload", "host", "fabric")},
            "events": settings.topic("events"),
            "attributions": settings.topic("attributions"),
            "deadletter": settings.topic("deadletter"),
        }
        from streams.remediation.agent import remediation_topic_spec

        self.remediation_topic = remediation_topic_spec(settings).name if settings.remediation else None
        base = kafka.confluent_config()
        membership = {"group.instance.id": settings.group_instance_id} if settings.group_instance_id else {}
        self.consumer = Consumer(base | membership | {
            "group.id": f"{settings.app_id}-ingest",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # latency, not library defaults: a fetch returns as soon as there is data
            "fetch.wait.max.ms": 10,
            "partition.assignment.strategy": "cooperative-sticky",
            # a crashed stage's partitions move to the others as soon as the Faust agents' do
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 2_000,
        })
        self.producer = Producer(with_partitioner(base | {
            "enable.idempotence": True,
            "linger.ms": settings.producer_linger_ms,
            "message.max.bytes": DEAD_LETTER_MESSAGE_BYTES,
        }))
        self._failed: list[str] = []
        self._batch: list[Effect] = []  # the effects of the batch being handled
        self._last_flush = time.monotonic()

    # -- one record -------------------------------------------------------------------------

    def _produce(self, topic: str, key: bytes, value: bytes | None, headers: Headers | None = None) -> None:
        while True:
            try:
                self.producer.produce(topic, key=key, value=value, headers=headers, on_delivery=self._delivered)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.1)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._failed.append(f"{msg.topic()}: {err}")

    def _effects(self, effects: list[Effect]) -> None:
        published: Counter[str] = Counter()  # events per type, counted once per call
        for effect in effects:
            where, key, value, headers = encode_effect(effect)
            self._produce(self.topics[where], key, value, headers)
            if isinstance(effect, Publish) and isinstance(effect.record, Event):
                published[effect.record.type] += 1
        for event_type, n in published.items():
            self.metrics.events.labels(event_type).inc(n)

    def _dead_letter(self, reason: str, msg: Message) -> None:
        letter = DeadLetter(
            source=SOURCE, reason=reason, original=msg.value(),
            original_key=msg.key(),
            position=Position(topic=msg.topic(), partition=msg.partition(), offset=msg.offset()),
            at_ns=time.time_ns(),
        ).with_id()
        self.metrics.dead_letters.labels(reason.split(":")[0]).inc()
        self._dead_lettered.inc()
        log.warning("dead letter at %s/%s/%s: %s", msg.topic(), msg.partition(), msg.offset(), reason)
        self._produce(self.topics["deadletter"], SOURCE.encode(), *encode_record(letter))

    def handle(self, msg: Message) -> bool:
        """One consumed record: its effects kept for the batch's produce (:meth:`run_batch`),
        or a dead letter produced. Returns True when the record was processed, False when it
        was dead-lettered; never raises for a bad record. A record that validates and can
        change nothing (:meth:`streams.codec.WireObservation.inert`: a log line no rule can
        match, a telemetry sample no rule fires on that names no GPU or a GPU already in the
        host's table) is processed without more work."""
        raw = msg.value()
        limit = self.settings.max_message_bytes
        if raw is not None:
            wire = read_observation(raw, limit)
            if wire is not None and wire.inert(self.pipeline):
                return True  # a valid record that can change nothing, never built as a record
        obs = decode_record(raw, limit) if raw is not None else "tombstone: no value"
        if isinstance(obs, str):
            self._dead_letter(obs, msg)
            return False
        if self.pipeline.inert(obs):
            return True
        position = obs.position
        obs.position = light_record(Position, {
            "file": position.file, "line": position.line,
            "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
        }, set(_POSITION_SET))
        try:
            effects = self.pipeline.ingest(obs)
            payload = allocation_message(obs) if self.remediation_topic else None
        except Exception as exc:  # noqa: BLE001 -- a bad record never stops the stage
            log.exception("observation %s failed", obs.observation_id)
            self._dead_letter(f"processing error: {type(exc).__name__}: {str(exc)[:300]}", msg)
            return False
        self._batch.extend(effects)
        if payload is not None:
            self._produce(self.remediation_topic, payload.cluster.encode(), message_json(payload))
        return True

    # -- the loop ---------------------------------------------------------------------------

    def run_batch(self) -> int:
        """Consume one batch, produce its outputs, wait for their delivery, commit. Returns the
        number of records consumed (0 when none came within ``poll_timeout_s``). Raises
        :class:`DeliveryFailed` (nothing committed) when a produced record was not delivered,
        ``confluent_kafka.KafkaException`` for a consumer error that is not transient."""
        messages = self.consumer.consume(self.batch_size, self.poll_timeout_s)
        now = time.monotonic()
        if now - self._last_flush >= max(0.2, self.settings.fabric_flush_s / 2):
            self._last_flush = now
            self._effects(self.pipeline.due_flushes(now))  # GPU tables collected and held
        if not messages:
            self.producer.poll(0)
            return 0
        started = time.monotonic()
        seen = processed = 0
        try:
            # no cyclic garbage collection while the batch's records are built (they hold no
            # cycles: reference counting frees them; a collection in between only walks them)
            with gc_paused():
                for msg in messages:
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF or error.retriable():
                            continue
                        raise KafkaException(error)
                    seen += 1
                    processed += self.handle(msg)
        finally:  # the counters of the batch, once
            self.metrics.observations.inc(seen)
            self.metrics.processed.inc(processed)
            self._processed.inc(processed)
        # the batch's routes with each key's events gathered (correlators.pipeline.batch_events),
        # then its GPU tables, before its offsets are committed (held in memory only)
        effects, self._batch = self._batch, []
        self._effects(batch_events(effects))
        self._effects(self.pipeline.pending_tables())
        self.producer.flush()
        if self._failed:
            failed, self._failed = self._failed, []
            raise DeliveryFailed(f"{len(failed)} record(s) not delivered, first: {failed[0]}")
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as exc:
            # partitions revoked during the batch: their new owner reads it again (duplicates
            # collapse by id)
            log.warning("commit refused, the batch will be read again: %s", exc)
        self.batch_seconds.observe(time.monotonic() - started)
        return len(messages)

    def run(self, stop: threading.Event | None = None, on_ready: Callable[[], Any] | None = None) -> None:
        """Subscribe and run batches until ``stop`` is set; then flush and close (offsets of a
        batch in progress are committed only if it completed). ``on_ready`` is called once,
        when the group's first assignment reaches this consumer (its partitions, possibly none
        when the group has more members than partitions): from then on a record produced to
        an assigned partition is read within one batch. Idle after a burst (an empty batch, at
        most every :data:`MEMORY_RELEASE_S`), it returns the heap the burst freed to the
        system (:func:`streams.memory.release_memory`)."""
        stop = stop or threading.Event()
        pending = [on_ready] if on_ready is not None else []

        def assigned(_consumer: Consumer, partitions: list[Any]) -> None:
            log.info("ingest stage given %d more partition(s)", len(partitions))
            while pending:
                pending.pop()()

        self.consumer.subscribe([self.settings.topic("observations")], on_assign=assigned)
        log.info("ingest stage started: group %s-ingest, topic %s", self.settings.app_id,
                 self.settings.topic("observations"))
        busy, released = False, time.monotonic()
        try:
            while not stop.is_set():
                if self.run_batch():
                    busy = True
                elif busy and time.monotonic() - released >= MEMORY_RELEASE_S:
                    # idle after a burst: the heap its batches freed goes back to the system
                    release_memory()
                    busy, released = False, time.monotonic()
        finally:
            self.producer.flush(10)
            self.consumer.close()
            log.info("ingest stage stopped")


def serve_metrics(metrics: Metrics, port: int) -> None:
    """Serve ``metrics`` at ``http://127.0.0.1:<port>/metrics`` from a daemon thread."""
    start_http_server(port, addr="127.0.0.1", registry=metrics.registry)


def run_stage(settings: WorkerSettings, kafka: KafkaSettings, batch_size: int, parent_pid: int | None = None) -> None:
    """Run the stage as a process (``faultstream worker --stage ingest``, or the whole worker's
    child, :func:`main`): declare the topics, serve /metrics on 127.0.0.1:``settings.web_port``,
    run the batch loop until SIGTERM / SIGINT, or until the process ``parent_pid`` is no longer
    this one's parent (the whole worker's child outlives no worker); the batch in progress
    completes, then it returns. Exits (``typer.Exit``) with 2 and ``error: ...`` on stderr when
    the broker refuses the topics or the port is taken, with 1 when a delivery fails."""
    from streams.app import declare_topics

    try:
        declare_topics(settings, kafka)
        stage = IngestStage(settings, kafka, batch_size=batch_size)
    except (KafkaException, RuntimeError) as exc:
        cli_fail(f"Kafka at {kafka.bootstrap_servers}: {exc}")
    try:
        serve_metrics(stage.metrics, settings.web_port)
    except OSError as exc:
        cli_fail(f"--web-port {settings.web_port}: {exc}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if parent_pid is not None:
        def watch_parent() -> None:
            while not stop.wait(0.5):
                if os.getppid() != parent_pid:
                    log.warning("the worker (process %d) ended: stopping", parent_pid)
                    stop.set()

        threading.Thread(target=watch_parent, name="parent-watch", daemon=True).start()
    try:
        stage.run(stop, on_ready=lambda: log.info("[^Ingest]: Ready"))
    except (DeliveryFailed, KafkaException) as exc:
        log.error("%s: exiting without committing the batch", exc)
        raise typer.Exit(1)


def _child(web_port: int = typer.Option(..., "--web-port"), batch_size: int = typer.Option(..., "--batch-size", min=1),
           loglevel: str = typer.Option("info", "--loglevel"), log_format: str = typer.Option("text", "--log-format"),
           parent_pid: Optional[int] = typer.Option(None, "--parent-pid")) -> None:
    from schemas.deadletter import reason_of
    from streams.logs import configure_logging

    try:
        configure_logging(log_format, loglevel)
    except ValueError as exc:
        cli_fail(str(exc))
    try:
        settings, kafka = WorkerSettings(web_port=web_port), KafkaSettings()
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        cli_fail(f"worker settings: {reason_of(exc, most=None)}")
    run_stage(settings, kafka, batch_size, parent_pid)


def main() -> None:
    """The whole worker's ingest child (``python -m streams.ingest``, started by
    ``streams.app.IngestService`` with :func:`streams.app.ingest_command`): the options of
    ``faultstream worker --stage ingest`` it is given, every other setting from the
    ``FAULTSTREAM_*`` and ``KAFKA_*`` environment. Its own entry, so the child loads the
    stage's modules only, not the command line's connectors."""
    typer.run(_child)


if __name__ == "__main__":
    main()
