"""Compacting a topic for real: a log-cleaner pass of the broker, forced and waited for.

The log cleaner never touches a partition's active segment, and by default it waits for half
the log to be dirty (``min.cleanable.dirty.ratio=0.5``). :func:`force_compaction`:

1. sets the topics' configs so that any dirt is enough and nothing is held back:
   :data:`CLEANER_CONFIG` (``min.cleanable.dirty.ratio=0.01``, ``segment.ms=100``,
   ``segment.bytes`` at the broker's minimum, ``min.compaction.lag.ms=0``,
   ``delete.retention.ms=100``), with IncrementalAlterConfigs;
2. rolls the active segment of every non-empty partition: after ``segment.ms`` it appends a
   copy of the partition's last record (same key, value and headers, to the same
   partition), so the records before it sit in closed segments and the state per key does
   not change;
3. waits until every partition holds one record per key before that copy (polling the
   records with a Python consumer), at most ``timeout_s`` seconds (the cleaner thread sleeps
   ``log.cleaner.backoff.ms``, 15 s by default, when it finds nothing to clean). Fails the
   test naming the partitions still holding duplicate keys when it does not happen in time.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from tests.contract.clients import Record

#: Topic configs that make the log cleaner compact everything it may, at once.
CLEANER_CONFIG = {
    "min.cleanable.dirty.ratio": "0.01",
    "segment.ms": "100",
    "segment.bytes": "1048576",  # the smallest value Kafka 4 accepts
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "100",
}


@dataclass(frozen=True)
class Rolled:
    """The copy appended to roll one partition's segment: where it landed."""

    topic: str
    partition: int
    offset: int
    key: str | None


def set_cleaner_config(config: dict[str, str], topics: list[str]) -> None:
    """Apply :data:`CLEANER_CONFIG` to ``topics``; raises ``confluent_kafka.KafkaException``
    when the broker refuses."""
    admin = AdminClient(dict(config))
    resources = [ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in CLEANER_CONFIG.items()])
        for topic in topics]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(timeout=30)


def roll_segments(config: dict[str, str], records: dict[str, list[Record]]) -> list[Rolled]:
    """Append, to every partition that holds records, a copy of its last record (by offset);
    return where the copies landed. ``records``: every record of each topic, as read."""
    producer = Producer(dict(config, **{"acks": "all", "enable.idempotence": True}))
    landed: list[Rolled] = []
    errors: list[str] = []

    def delivered(err, msg):
        if err is not None:
            errors.append(f"{msg.topic()}/{msg.partition()}: {err}")
        else:
            key = msg.key()
            landed.append(Rolled(msg.topic(), msg.partition(), msg.offset(), None if key is None else key.decode()))

    for topic, recs in records.items():
        last: dict[int, Record] = {}
        for r in recs:
            if r.partition not in last or r.offset > last[r.partition].offset:
                last[r.partition] = r
        for partition, r in sorted(last.items()):
            producer.produce(topic, partition=partition, key=None if r.key is None else r.key.encode(),
                             value=None if r.value is None else r.value.encode(),
                             headers=[(k, None if v is None else v.encode()) for k, v in r.headers],
                             on_delivery=delivered)
    producer.flush(30)
    if errors or len(landed) != sum(len({r.partition for r in recs}) for recs in records.values()):
        pytest.fail(f"rolling the segments failed: {errors or 'not every copy was delivered'}", pytrace=False)
    return landed


def _keys_before(config: dict[str, str], rolled: list[Rolled]) -> dict[tuple[str, int], list[str | None]]:
    """The keys of the records before each rolled copy, in offset order."""
    consumer = Consumer(dict(config, **{"group.id": f"contract-compaction-{uuid.uuid4().hex}",
                                        "enable.auto.commit": False, "enable.partition.eof": True,
                                        "auto.offset.reset": "earliest"}))
    ends = {(r.topic, r.partition): r.offset for r in rolled}
    keys: dict[tuple[str, int], list[str | None]] = {tp: [] for tp in ends}
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in ends])
    open_parts = set(ends)
    deadline = time.monotonic() + 60
    try:
        while open_parts and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            tp = (msg.topic(), msg.partition())
            if msg.error() is not None:
                continue  # partition EOF: the copy is the last record, read below
            if msg.offset() >= ends[tp]:
                open_parts.discard(tp)
                continue
            key = msg.key()
            keys[tp].append(None if key is None else key.decode())
    finally:
        consumer.close()
    if open_parts:
        pytest.fail(f"could not read the partitions back up to the rolled copies: {sorted(open_parts)}", pytrace=False)
    return keys


def wait_compacted(config: dict[str, str], rolled: list[Rolled], timeout_s: float = 180.0) -> float:
    """Wait until, in every partition of ``rolled``, the records before the rolled copy have
    distinct keys (the cleaner has run over them); return the seconds it took. Fails the test
    after ``timeout_s`` seconds naming the partitions still holding duplicates."""
    t0 = time.monotonic()
    while True:
        keys = _keys_before(config, rolled)
        dirty = {f"{t}/{p}": f"{len(ks)} records for {len(set(ks))} keys" for (t, p), ks in keys.items()
                 if len(ks) != len(set(ks))}
        if not dirty:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            pytest.fail(f"the log cleaner did not compact within {timeout_s:.0f} s (configs {CLEANER_CONFIG}; the "
                        f"broker's log.cleaner.backoff.ms, 15 s by default, is its idle sleep); still holding "
                        f"duplicate keys: {dirty}", pytrace=False)
        time.sleep(2.0)


def force_compaction(config: dict[str, str], records: dict[str, list[Record]], timeout_s: float = 180.0
                     ) -> tuple[list[Rolled], float]:
    """Steps 1-3 of the module docstring for the topics of ``records`` (every record of each,
    as read before); return the rolled copies and the seconds the cleaner took."""
    set_cleaner_config(config, list(records))
    time.sleep(1.0)  # older than segment.ms: the next append rolls the segment
    rolled = roll_segments(config, records)
    return rolled, wait_compacted(config, rolled, timeout_s)
