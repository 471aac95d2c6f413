"""Kafka clients of faultstream records (confluent-kafka / librdkafka): the producer every
connector and sink publishes with, and the consumer configuration every reader starts from.

:class:`RecordProducer` publishes pydantic records to one topic:

* value: ``schemas.records.canonical_json(record)`` encoded as UTF-8 (the same bytes ids are
  computed from);
* key: the caller's key (``Observation.host`` for observations), UTF-8;
* headers: ``schema`` (the model's class name, e.g. ``Observation``), ``schema_version`` and
  ``content-type`` (:func:`schemas.wire.headers_for`), on tombstones too
  (:meth:`RecordProducer.send_tombstone`);
* partition: ``(murmur2(key) & 0x7fffffff) % partitions``, the partition Kafka's Java producer
  and the worker (Faust/aiokafka) choose for the same key (librdkafka ``partitioner`` =
  ``murmur2_random``, from :func:`transport.kafka_settings.with_partitioner`; extra
  ``config`` cannot replace it).

Delivery guarantees: the producer is idempotent (``enable.idempotence=true``, ``acks=all``),
so librdkafka's own retries (``message.timeout.ms``, ``retry.backoff.ms``) neither reorder nor
duplicate within a partition. No retry loop is written here, except the back-pressure wait on
a full local queue (``BufferError``): :meth:`RecordProducer.send` serves delivery reports with
``poll`` until the queue has room, for at most ``max_block_s`` seconds, then raises
:class:`BackPressureTimeout`.

Failed deliveries are collected by the delivery callback; :meth:`RecordProducer.flush` raises
:class:`DeliveryError` naming the failed keys (and clears the list), so a caller only advances
its cursor after a flush that did not raise.

:func:`consumer_config` gives the librdkafka configuration of a reader of faultstream topics
(a consumer group of its own, offsets from the start, no auto-commit unless asked for).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from pydantic import BaseModel

from schemas.wire import encode_record, headers_for
from transport.kafka_settings import with_partitioner

if TYPE_CHECKING:  # pragma: no cover
    from transport.kafka_settings import KafkaSettings

__all__ = [
    "RecordProducer",
    "DeliveryError",
    "BackPressureTimeout",
    "FailedDelivery",
    "KafkaProducerError",
    "LIBRDKAFKA_LOG",
    "RepeatFilter",
    "consumer_config",
]


class _HasConfluentConfig(Protocol):
    def confluent_config(self) -> dict[str, Any]: ...


class RepeatFilter(logging.Filter):
    """Lets a log record through once per ``every_s`` seconds for the same text, its numbers
    aside (librdkafka reports a broker that refuses connections every few milliseconds:
    "Connect to ipv4#10.0.0.5:9092 failed: Connection refused (after 0ms in state CONNECT)")."""

    def __init__(self, every_s: float = 30.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        text = re.sub(r"\d+", "#", record.getMessage())
        now = time.monotonic()
        last = self._last.get(text)
        if last is not None and now - last < self.every_s:
            return False
        if len(self._last) >= 1024:  # bounded: the oldest texts may be shown again
            self._last.clear()
        self._last[text] = now
        return True


#: The logger librdkafka's own lines go to (connection refused, ...), each text once per 30 s.
LIBRDKAFKA_LOG = logging.getLogger("faultstream.kafka")
LIBRDKAFKA_LOG.addFilter(RepeatFilter())


class KafkaProducerError(Exception):
    """Base of the errors raised by :class:`RecordProducer`."""


@dataclass(frozen=True)
class FailedDelivery:
    """One message librdkafka gave up on: its key, topic and the broker/client error text."""

    key: str
    topic: str
    error: str


class DeliveryError(KafkaProducerError):
    """Raised by :meth:`RecordProducer.flush` when messages were not delivered (or not all
    were delivered within the flush timeout). ``failed`` lists the :class:`FailedDelivery`
    entries; ``undelivered`` counts messages still queued when the timeout expired."""

    def __init__(self, failed: list[FailedDelivery], undelivered: int = 0):
        self.failed = failed
        self.undelivered = undelivered
        keys = sorted({f.key for f in failed})
        shown = ", ".join(keys[:20]) + (f", ... ({len(keys) - 20} more)" if len(keys) > 20 else "")
        parts = []
        if failed:
            first = failed[0]
            parts.append(f"{len(failed)} message{'s' * (len(failed) != 1)} failed (keys: {shown}; first error on "
                         f"topic {first.topic!r}: {first.error})")
        if undelivered:
            parts.append(f"{undelivered} message{'s' * (undelivered != 1)} still undelivered when the flush timed out")
        super().__init__("Kafka delivery failed: " + "; ".join(parts))


class BackPressureTimeout(KafkaProducerError):
    """The local producer queue stayed full for longer than ``max_block_s``: the broker is
    unreachable or much slower than the input. Nothing was enqueued for the rejected record."""


class RecordProducer:
    """Idempotent producer of pydantic records to ``topic``.

    ``settings``: a :class:`transport.kafka_settings.KafkaSettings` (anything with
    ``confluent_config() -> dict``: bootstrap servers, security settings). ``linger_ms``:
    batching delay (ms). ``max_block_s``: how long :meth:`send` waits (seconds) for room in a
    full local queue before raising :class:`BackPressureTimeout`. ``delivery_timeout_ms``:
    librdkafka's ``message.timeout.ms`` -- how long it retries one message before reporting it
    failed. ``queue_max_messages`` / ``queue_max_kbytes``: the local queue bounds that trigger
    back-pressure. ``config``: extra librdkafka properties, applied last (except
    ``partitioner``, always :data:`transport.kafka_settings.PRODUCER_PARTITIONER`: a different
    one raises ``ValueError``).

    Use as a context manager (``with RecordProducer(...) as p:``): leaving the block flushes
    (raising :class:`DeliveryError` if anything failed, unless the block already raised).
    """

    def __init__(
        self,
        settings: "KafkaSettings | _HasConfluentConfig",
        topic: str,
        *,
        linger_ms: int = 20,
        max_block_s: float = 30.0,
        delivery_timeout_ms: int = 120_000,
        queue_max_messages: int = 100_000,
        queue_max_kbytes: int = 262_144,
        compression: str = "lz4",
        config: dict[str, Any] | None = None,
    ):
        self.topic = topic
        self.max_block_s = max_block_s
        conf: dict[str, Any] = dict(settings.confluent_config())
        self.bootstrap = str(conf.get("bootstrap.servers", ""))
        conf.update({
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "message.timeout.ms": delivery_timeout_ms,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 2_000,
            "queue.buffering.max.messages": queue_max_messages,
            "queue.buffering.max.kbytes": queue_max_kbytes,
            "compression.type": compression,
        })
        # librdkafka's own log lines (connection refused, ...) go to Python logging
        conf.setdefault("logger", LIBRDKAFKA_LOG)
        if config:
            conf.update(config)
        self._producer = Producer(with_partitioner(conf))
        self._failed: list[FailedDelivery] = []
        self.sent = 0  #: messages enqueued
        self.delivered = 0  #: messages acknowledged by the broker
        self.undeliverable = 0  #: messages whose delivery failed for good
        self.back_pressure_waits = 0  #: times send() found the local queue full

    def wait_for_broker(self, timeout_s: float) -> None:
        """Return once a broker answers a metadata request; raises :class:`KafkaProducerError`
        (``Kafka at <servers>: no broker answered within <timeout_s> s``) when none does within
        ``timeout_s`` seconds."""
        try:
            self._producer.list_topics(timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaProducerError(f"Kafka at {self.bootstrap}: no broker answered within {timeout_s:g} s "
                                     f"({exc.args[0].str() if exc.args and hasattr(exc.args[0], 'str') else exc})"
                                     ) from None

    # -- callbacks ------------------------------------------------------------------------

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered += 1
            return
        raw = msg.key()
        key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        self._failed.append(FailedDelivery(key=key, topic=msg.topic() or self.topic, error=err.str()))
        self.undeliverable += 1

    # -- API ------------------------------------------------------------------------------

    def send(self, key: str, record: BaseModel, *, topic: str | None = None) -> None:
        """Enqueue ``record`` under ``key`` (to ``topic``, default the producer's topic).

        Returns once librdkafka has the message; delivery is confirmed by :meth:`flush`.
        Raises :class:`BackPressureTimeout` if the local queue stays full for ``max_block_s``,
        ``TypeError`` if the record is not JSON-serialisable, and
        :class:`KafkaProducerError` for a message librdkafka refuses outright (e.g. larger
        than ``message.max.bytes``)."""
        value, headers = encode_record(record)
        self._produce(topic or self.topic, key, value, headers)

    def send_tombstone(self, key: str, schema: str, *, topic: str | None = None) -> None:
        """Enqueue a tombstone (null value) under ``key``, with the headers of a ``schema``
        record (a model class name, e.g. ``"Observation"`` on the topology topic): on a
        compacted topic it ends the entity the key names. Raises as :meth:`send`."""
        self._produce(topic or self.topic, key, None, headers_for(schema))

    def _produce(self, target: str, key: str, value: bytes | None, headers: list[tuple[str, bytes]]) -> None:
        kbytes = key.encode("utf-8")
        deadline: float | None = None
        while True:  # back-pressure only: wait for room in the local queue
            try:
                self._producer.produce(target, value=value, key=kbytes, headers=headers,
                                       on_delivery=self._on_delivery)
                break
            except BufferError:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.max_block_s
                    self.back_pressure_waits += 1
                elif now >= deadline:
                    raise BackPressureTimeout(
                        f"local Kafka producer queue full for {self.max_block_s:.1f} s "
                        f"({len(self._producer)} messages waiting for topic {target!r}): "
                        "is the broker reachable?"
                    ) from None
                self._producer.poll(min(0.1, max(0.0, deadline - now)))
            except KafkaException as exc:
                raise KafkaProducerError(f"cannot produce to {target!r}: {exc.args[0].str()}") from None
        self.sent += 1
        self._producer.poll(0)

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery reports for up to ``timeout`` seconds; returns how many were served."""
        return self._producer.poll(timeout)

    def flush(self, timeout: float = 60.0) -> int:
        """Wait up to ``timeout`` seconds for every enqueued message to be acknowledged.

        Returns 0 (the number of messages still in flight) on success. Raises
        :class:`DeliveryError` listing the failed keys if any message failed since the last
        flush, or if messages are still undelivered when ``timeout`` expires."""
        remaining = self._producer.flush(timeout)
        failed, self._failed = self._failed, []
        if failed or remaining:
            raise DeliveryError(failed, remaining)
        return remaining

    @property
    def failed(self) -> list[FailedDelivery]:
        """Failures collected since the last :meth:`flush` (a copy)."""
        return list(self._failed)

    def __len__(self) -> int:
        """Messages enqueued whose delivery report has not come yet. Counted here, not with
        ``len()`` of the librdkafka producer, which also counts its pending internal
        events (connection errors, ...) and so varies with timing."""
        return self.sent - self.delivered - self.undeliverable

    def close(self, timeout: float = 60.0) -> None:
        """Flush (see :meth:`flush`; raises :class:`DeliveryError` on failures)."""
        self.flush(timeout)

    def __enter__(self) -> "RecordProducer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.flush()
        else:
            # the block failed already: give in-flight messages a short chance, report nothing
            self._producer.flush(5.0)


def consumer_config(settings: "KafkaSettings | _HasConfluentConfig", group_id: str, *,
                    from_start: bool = True, auto_commit: bool = False,
                    extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """librdkafka configuration of a ``confluent_kafka.Consumer`` reading faultstream topics:
    ``settings``' servers and security, ``group.id`` = ``group_id`` (the consumer group),
    ``auto.offset.reset`` = ``earliest`` when ``from_start`` (a group without committed offsets
    reads each partition from its first record) else ``latest``, ``enable.auto.commit`` =
    ``auto_commit``; ``extra`` properties applied last. Raises ``ValueError`` for an empty
    ``group_id``."""
    if not group_id.strip():
        raise ValueError("a Kafka consumer needs a group id")
    conf: dict[str, Any] = dict(settings.confluent_config())
    conf.update({
        "group.id": group_id,
        "auto.offset.reset": "earliest" if from_start else "latest",
        "enable.auto.commit": auto_commit,
    })
    if extra:
        conf.update(extra)
    return conf
