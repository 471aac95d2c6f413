"""Reading a Kafka topic as a connector's input, through a consumer group whose committed
offsets are the cursor (:class:`TopicReader`): the NVSentinel HealthEvent input and verdict
bridge (:mod:`connectors.nvsentinel`) and the OpenTelemetry logs input (:mod:`connectors.otlp`).

The runner (:func:`connectors.runner.run`) saves the source's checkpoint only after the
producer's flush; a reader's cursor (:class:`_Commit`) saves it by committing the offsets to the
consumer group, so a message is committed only once what it became was delivered.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from confluent_kafka import Message

__all__ = ["KafkaReadError", "TopicReader", "message_ns"]


class KafkaReadError(Exception):
    """The topic cannot be read: no partition assigned in time, a consumer error, a failed commit."""


class _Commit:
    """The cursor of a Kafka-fed source: ``save(doc)`` commits ``doc["offsets"]`` to the consumer
    group (synchronously); the runner calls it only after the producer's flush."""

    def __init__(self, reader: TopicReader) -> None:
        self.reader = reader
        self.path = f"consumer group {reader.group}"

    def load(self) -> dict[str, Any]:
        return {}

    def save(self, doc: dict[str, Any]) -> None:
        self.reader.commit(doc.get("offsets") or {})


class TopicReader:
    """A consumer-group reader of one topic for :func:`connectors.runner.run`: ``poll`` returns
    what ``handle(msg)`` makes of the consumed messages, ``checkpoint`` the next offsets, the
    :attr:`cursor` commits them. ``pending`` is true while an assigned partition has not been read
    to the end offset it had when assigned (a one-shot run reads the backlog and stops)."""

    def __init__(self, config: dict[str, Any], topic: str, group: str, *, batch: int = 500,
                 poll_timeout_s: float = 1.0, assign_timeout_s: float = 30.0) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self.group = group
        self.batch = batch
        self.poll_timeout_s = poll_timeout_s
        self.assign_timeout_s = assign_timeout_s
        self._consumer = Consumer(dict(config) | {
            "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "enable.partition.eof": False, "log_level": 0,
        })
        self._assigned: list[tuple[str, int]] | None = None
        self._consumer.subscribe([topic], on_assign=self._on_assign)
        self._start: dict[tuple[str, int], int] = {}  # committed (or first) offset at assignment
        self._high: dict[tuple[str, int], int] = {}  # end offset at assignment
        self._next: dict[tuple[str, int], int] = {}  # after the last consumed message
        self._committed: dict[tuple[str, int], int] = {}
        self.cursor = _Commit(self)
        self.consumed = 0

    def _on_assign(self, consumer, partitions) -> None:
        self._assigned = [(tp.topic, tp.partition) for tp in partitions]

    def _learn_assignment(self) -> None:
        from confluent_kafka import OFFSET_INVALID, KafkaException, TopicPartition

        parts = [TopicPartition(t, p) for t, p in self._assigned or []]
        try:
            committed = self._consumer.committed(parts, timeout=10)
            for tp in committed:
                low, high = self._consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
                key = (tp.topic, tp.partition)
                self._start[key] = tp.offset if tp.offset != OFFSET_INVALID and tp.offset >= 0 else low
                self._high[key] = high
        except KafkaException as exc:
            raise KafkaReadError(f"topic {self.topic!r}: offsets: {exc.args[0].str() if exc.args else exc}") from None

    def messages(self) -> list[Message]:
        """The next batch of messages (waits for the first assignment)."""
        from confluent_kafka import KafkaError

        deadline = time.monotonic() + self.assign_timeout_s
        msgs = []
        while True:
            msgs = self._consumer.consume(self.batch, self.poll_timeout_s)
            if self._assigned is not None:
                break
            if time.monotonic() >= deadline:
                raise KafkaReadError(f"no partition of topic {self.topic!r} was assigned to consumer group "
                                     f"{self.group!r} within {self.assign_timeout_s:g} s: is the broker "
                                     "reachable and does the topic exist?")
        if not self._start and self._assigned:
            self._learn_assignment()
        good = []
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF or err.retriable():
                    continue
                raise KafkaReadError(f"topic {self.topic!r}: {err.str()}")
            self._next[(msg.topic(), msg.partition())] = msg.offset() + 1
            good.append(msg)
        self.consumed += len(good)
        return good

    @property
    def pending(self) -> bool:
        """True while an assigned partition is behind its end offset at assignment."""
        if self._assigned is None:
            return True
        return any(self._next.get(k, self._start.get(k, 0)) < high for k, high in self._high.items())

    def checkpoint(self) -> dict[str, Any]:
        """``{"offsets": {"<topic>/<partition>": <next offset>}}`` of the messages polled so far."""
        return {"offsets": {f"{t}/{p}": o for (t, p), o in sorted(self._next.items())}}

    def commit(self, offsets: dict[str, int]) -> None:
        """Commit ``{"<topic>/<partition>": offset}`` to the consumer group (synchronously)."""
        from confluent_kafka import KafkaException, TopicPartition

        parts = []
        for name, off in offsets.items():
            t, _, p = name.rpartition("/")
            parts.append(TopicPartition(t, int(p), int(off)))
        if not parts:
            return
        try:
            self._consumer.commit(offsets=parts, asynchronous=False)
        except KafkaException as exc:
            raise KafkaReadError(f"commit to consumer group {self.group!r}: {exc.args[0].str() if exc.args else exc}") from None
        self._committed.update({(tp.topic, tp.partition): tp.offset for tp in parts})

    def rewind(self) -> None:
        """Seek every partition read since the last commit back to its committed offset."""
        from confluent_kafka import TopicPartition

        for key, nxt in list(self._next.items()):
            back = self._committed.get(key, self._start.get(key))
            if back is not None and back < nxt:
                self._consumer.seek(TopicPartition(key[0], key[1], back))
                self._next[key] = back

    def close(self) -> None:
        """Leave the consumer group."""
        self._consumer.close()


def message_ns(msg: Message) -> int:
    """A consumed message's Kafka timestamp in UTC ns (now when it has none)."""
    kind, ms = msg.timestamp()
    return ms * 1_000_000 if kind and ms > 0 else time.time_ns()
