"""The real Kafka broker of the test session: it answers, carries messages, and the topic
catalogue is created on it idempotently with the declared partitions and cleanup policies."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

# conftest.py imports these too; the fixture shares one broker between both registrations
from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: F401


def test_broker_answers_a_metadata_request(kafka_bootstrap, kafka_config):
    host, port = kafka_bootstrap.rsplit(":", 1)
    assert host and int(port) > 0
    md = AdminClient(dict(kafka_config)).list_topics(timeout=10)
    assert len(md.brokers) == 1
    assert md.cluster_id


def test_produce_consume_round_trip(kafka_config, kafka_topic_factory):
    topic = kafka_topic_factory("roundtrip", partitions=3)
    producer = Producer(dict(kafka_config, acks="all"))
    sent = [(f"host-{i % 3}".encode(), f"value-{i}-{uuid.uuid4().hex}".encode()) for i in range(30)]
    for key, value in sent:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0

    consumer = Consumer(
        dict(kafka_config, **{"group.id": f"g-{uuid.uuid4().hex}", "auto.offset.reset": "earliest",
                              "enable.auto.commit": False})
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.key(), msg.value(), msg.partition()))
    finally:
        consumer.close()
    assert sorted((k, v) for k, v, _ in got) == sorted(sent)
    # same key, same partition
    by_key: dict[bytes, set[int]] = {}
    for k, _, p in got:
        by_key.setdefault(k, set()).add(p)
    assert all(len(ps) == 1 for ps in by_key.values())


def test_topic_factory_names_are_unique_and_created(kafka_config, kafka_topic_factory):
    a = kafka_topic_factory("a", partitions=2)
    b = kafka_topic_factory("b")
    assert a != b and a.startswith(kafka_topic_factory.prefix)
    md = AdminClient(dict(kafka_config)).list_topics(timeout=10)
    assert len(md.topics[a].partitions) == 2
    assert len(md.topics[b].partitions) == 1


def test_auto_topic_creation_is_off(kafka_config):
    name = f"t-never-created-{uuid.uuid4().hex[:8]}"
    producer = Producer(dict(kafka_config, **{"message.timeout.ms": 3000}))
    errors = []
    producer.produce(name, value=b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    md = AdminClient(dict(kafka_config)).list_topics(timeout=10)
    assert name not in md.topics
