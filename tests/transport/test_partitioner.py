"""One partitioner for every producer: a key lands on the same partition whichever faultstream
producer writes it, and on the one Kafka's Java producer chooses.

Three producers write the same keys to one topic of :data:`PARTITIONS` partitions on the
session's real broker:

* ``record-producer``: :class:`transport.kafka.RecordProducer` (librdkafka), the producer of
  the connectors (``connectors.registry.make_producer``) and of the CLI
  (``streams.remediation.cli``);
* ``worker``: ``aiokafka.AIOKafkaProducer`` with the partitioner of the worker's own Faust
  producer (``streams.app.create_app(...).producer.partitioner``; Faust builds its aiokafka
  producer with that object);
* ``java``: Kafka's console producer (``org.apache.kafka.tools.ConsoleProducer``, which sends
  with ``KafkaProducer`` and its built-in partitioner) from the broker's Maven jars plus the
  ``kafka-tools`` jar of the same version, resolved with Maven into ``.state/kafka/tools/``.

The topic is then read back with a confluent_kafka consumer; every key must sit on one
partition for all three, equal to ``(murmur2(key) & 0x7fffffff) % PARTITIONS`` with aiokafka's
pure-Python ``murmur2`` (Kafka's ``Utils.murmur2``). A Java producer that cannot be started
fails the test (it never skips).
"""

from __future__ import annotations

import ast
import asyncio
import os
import shutil
import subprocess
import time
import uuid
import zlib
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner, murmur2
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from pydantic import BaseModel

from transport.kafka import RecordProducer
from transport.kafka_settings import PRODUCER_PARTITIONER, KafkaSettings, with_partitioner

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 12
#: Separator of key and value in the console producer's input lines (no key below holds it).
KEY_SEPARATOR = "|"

#: Keys as faultstream produces them: host names (observations), cluster ids (topology,
#: certifications), workload and attribution ids, remediation action ids, an event key of a
#: host without a workload, fabric ports, a non-ASCII UTF-8 key and the empty key (the key of a
#: breaker-reset command).
KEYS: list[str] = [
    *(f"node-a{i:02d}" for i in range(1, 17)),
    "c1", "c2", "c7", "cluster-h200",
    "job-1234", "job-2401", "job-4102", "1234_7",
    "att-3f9c0a6e51d2b7c4", "att-0000000000000000",
    "act-000000000000000000000001",
    "host:node-a05",
    "leaf-03/swp12", "node-a05/mlx5_0/1",
    "nœud-a01/ГПУ-0 ✓",
    "",
]


def java_partition(key: str) -> int:
    """The partition Kafka's Java producer picks for ``key`` (UTF-8 bytes) on a topic of
    :data:`PARTITIONS` partitions, computed here from aiokafka's murmur2."""
    return (murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % PARTITIONS


class Probe(BaseModel):
    """The value every producer writes: which producer, which key index."""

    producer: str
    index: int


# -- the partitioner setting -----------------------------------------------------------------------

def test_every_producer_configuration_names_the_java_compatible_partitioner():
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9092")
    assert PRODUCER_PARTITIONER == "murmur2_random"
    assert with_partitioner(settings.confluent_config()) == {**settings.confluent_config(), "partitioner": "murmur2_random"}
    assert "partitioner" not in settings.confluent_config()  # consumers and admin clients: no producer property
    assert with_partitioner({"bootstrap.servers": "b:1", "partitioner": "murmur2_random"})["partitioner"] == "murmur2_random"
    with pytest.raises(ValueError, match="consistent_random"):
        with_partitioner({"bootstrap.servers": "b:1", "partitioner": "consistent_random"})
    with pytest.raises(ValueError, match="murmur2_random"):
        RecordProducer(settings, "t", config={"partitioner": "consistent"})


def test_the_keys_tell_the_partitioners_apart():
    """The key set is one where librdkafka's default (``consistent_random``: CRC32 of the key)
    disagrees with murmur2, and it covers most partitions, so the broker test below fails if a
    producer falls back to the default."""
    crc32_differs = [k for k in KEYS if k and zlib.crc32(k.encode()) % PARTITIONS != java_partition(k)]
    assert len(crc32_differs) >= len(KEYS) // 2, crc32_differs
    assert len({java_partition(k) for k in KEYS}) >= 9
    # values of Kafka's Utils.murmur2 (Java ints, from Kafka's UtilsTest): aiokafka returns
    # the same 32 bits, unsigned
    java = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536, b"abc": 479470107}
    assert {k: murmur2(k) for k in java} == {k: v & 0xFFFFFFFF for k, v in java.items()}


def _confluent_producer_calls(path: Path) -> list[tuple[int, str]]:
    """``(line, first argument source)`` of every call of ``confluent_kafka.Producer`` in the
    module at ``path`` (imported as ``from confluent_kafka import Producer`` or called as
    ``confluent_kafka.Producer``)."""
    tree = ast.parse(path.read_text(), str(path))
    local_names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "confluent_kafka"
        for alias in node.names
        if alias.name == "Producer"
    }
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        named = isinstance(f, ast.Name) and f.id in local_names
        dotted = (isinstance(f, ast.Attribute) and f.attr == "Producer" and isinstance(f.value, ast.Name)
                  and f.value.id == "confluent_kafka")
        if named or dotted:
            calls.append((node.lineno, ast.unparse(node.args[0]) if node.args else ""))
    return calls


@pytest.mark.slow
def test_no_project_producer_bypasses_the_partitioner():
    """Every ``confluent_kafka.Producer`` of the project (the benchmarks under bench/ aside) is
    built from ``with_partitioner(...)``, which sets ``partitioner=murmur2_random`` and refuses
    another one; the connectors and the CLI produce through transport/kafka.py's
    RecordProducer, which does so."""
    found: dict[str, list[tuple[int, str]]] = {}
    for package in ("connectors", "correlators", "deploy", "schemas", "sinks", "streams", "transport"):
        for path in sorted((REPO / package).rglob("*.py")):
            calls = _confluent_producer_calls(path)
            if calls:
                found[str(path.relative_to(REPO))] = calls
    assert "transport/kafka.py" in found, found
    bypass = {f"{name}:{line}": arg for name, calls in found.items() for line, arg in calls
              if not arg.startswith("with_partitioner(")}
    assert bypass == {}, (
        "confluent_kafka.Producer built without transport.kafka_settings.with_partitioner(config) "
        f"(or RecordProducer): {bypass}")


# -- three producers, one broker ---------------------------------------------------------------------

def _local_broker():
    from tests.kafka_fixtures import _local_broker_module

    return _local_broker_module()


def java_tools_classpath() -> str:
    """Classpath of Kafka's command-line tools: the broker's jars (``deploy/kafka/broker.py
    fetch``) and ``kafka-tools-<broker version>.jar``, copied by Maven into
    ``.state/kafka/tools/`` when missing. Fails the test (never skips) when ``java`` or Maven
    is missing or cannot resolve the jar."""
    broker = _local_broker()
    try:
        return broker.fetch_tools()
    except broker.BrokerError as exc:
        pytest.fail(f"Kafka's Java tools could not be fetched: {exc}", pytrace=False)


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH; fails the test when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        pytest.fail("`java` not found on PATH: the Java producer (Kafka's console producer) needs Java 17+",
                    pytrace=False)
    return java


def produce_with_java(bootstrap: str, topic: str, keys: list[str]) -> None:
    """Send ``key|{"index": i, "producer": "java"}`` lines through Kafka's console producer
    (``parse.key=true``, ``acks=all``); fails the test with the tool's output when it exits
    non-zero."""
    lines = "".join(f'{key}{KEY_SEPARATOR}{{"index":{i},"producer":"java"}}\n' for i, key in enumerate(keys))
    cmd = [java_binary(), "-Xmx256m", "-cp", java_tools_classpath(), "org.apache.kafka.tools.ConsoleProducer",
           "--bootstrap-server", bootstrap, "--topic", topic,
           "--property", "parse.key=true", "--property", f"key.separator={KEY_SEPARATOR}",
           "--producer-property", "acks=all"]
    try:
        proc = subprocess.run(cmd, input=lines.encode("utf-8"), capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"Kafka's console producer (Java) did not run: {exc}", pytrace=False)
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr).decode("utf-8", "replace")[-3000:]
        pytest.fail(f"Kafka's console producer (Java) exited {proc.returncode}:\n{out}", pytrace=False)


def worker_partitioner(tmp_path: Path, bootstrap: str):
    """The partitioner of the worker's Faust producer (the app is built, never started)."""
    from streams.app import create_app
    from streams.settings import WorkerSettings

    app = create_app(WorkerSettings(data_dir=tmp_path / "worker"), KafkaSettings(bootstrap_servers=bootstrap))
    try:
        return app.producer.partitioner
    finally:
        app.faultstream_data_lock.close()


async def produce_with_aiokafka(settings: KafkaSettings, topic: str, keys: list[str], partitioner) -> None:
    """Send every key through aiokafka with ``partitioner``, as the worker's Faust producer does."""
    producer = AIOKafkaProducer(**settings.aiokafka_kwargs(), partitioner=partitioner, acks="all")
    await producer.start()
    try:
        for i, key in enumerate(keys):
            value = Probe(producer="worker", index=i).model_dump_json().encode()
            await producer.send(topic, key=key.encode("utf-8"), value=value)
        await producer.flush()
    finally:
        await producer.stop()


def read_all(config: dict, topic: str, expected: int, timeout_s: float = 60.0) -> list[tuple[str, str, int, int]]:
    """``(producer, key, index, partition)`` of the first ``expected`` records of every partition
    of ``topic`` (read from the start); fails when fewer arrive within ``timeout_s`` seconds."""
    consumer = Consumer(dict(config, **{"group.id": f"g-{uuid.uuid4().hex}", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: list[tuple[str, str, int, int]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            probe = Probe.model_validate_json(msg.value())
            got.append((probe.producer, msg.key().decode("utf-8"), probe.index, msg.partition()))
    finally:
        consumer.close()
    assert len(got) == expected, f"read {len(got)} of {expected} records from {topic} in {timeout_s:.0f} s"
    return got


def test_a_key_lands_on_one_partition_from_every_producer(kafka_bootstrap, kafka_config, kafka_topic_factory, tmp_path):
    topic = kafka_topic_factory("partitioner", partitions=PARTITIONS)
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    partitioner = worker_partitioner(tmp_path, kafka_bootstrap)
    assert isinstance(partitioner, DefaultPartitioner)

    with RecordProducer(settings, topic, linger_ms=0) as producer:
        for i, key in enumerate(KEYS):
            producer.send(key, Probe(producer="record-producer", index=i))
    asyncio.run(produce_with_aiokafka(settings, topic, KEYS, partitioner))
    produce_with_java(kafka_bootstrap, topic, KEYS)

    records = read_all(kafka_config, topic, 3 * len(KEYS))
    placed: dict[str, dict[str, int]] = {}
    for producer_name, key, index, partition in records:
        assert key == KEYS[index], (producer_name, key, index)
        placed.setdefault(key, {})[producer_name] = partition
    wrong = {key: (by, java_partition(key)) for key, by in placed.items()
             if set(by.values()) != {java_partition(key)}}
    assert wrong == {}, f"keys off murmur2's partition ({{key: ({{producer: partition}}, murmur2)}}): {wrong}"
    assert set(placed) == set(KEYS)
    assert all(set(by) == {"record-producer", "worker", "java"} for by in placed.values()), placed
