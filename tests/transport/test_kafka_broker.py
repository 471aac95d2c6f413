"""The real Kafka broker of the test session: it answers, carries messages, and the topic
catalogue is created on it idempotently with the declared partitions and cleanup policies."""

from __future__ import annotations

import pytest
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


# -- topic catalogue ----------------------------------------------------------------------------

def _describe(kafka_config, names):
    from confluent_kafka.admin import ConfigResource

    admin = AdminClient(dict(kafka_config))
    md = admin.list_topics(timeout=10)
    futs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, n) for n in names])
    out = {}
    for res, fut in futs.items():
        cfg = fut.result(timeout=30)
        out[res.name] = (
            len(md.topics[res.name].partitions),
            cfg["cleanup.policy"].value,
            cfg["retention.ms"].value,
            cfg["max.message.bytes"].value,
        )
    return out


def test_catalogue_names_follow_the_prefix(monkeypatch):
    from schemas.topics import TOPICS, catalogue, topic_prefix

    assert TOPICS["observations"].name == "faultstream.observations"
    assert sorted(TOPICS) == sorted(
        ["observations", "events", "attributions", "remediations", "remediation-commands", "deadletter",
         "topology", "certifications"]
    )
    monkeypatch.setenv("FAULTSTREAM_TOPIC_PREFIX", "t-xyz")
    assert topic_prefix() == "t-xyz"
    assert catalogue()["deadletter"].name == "t-xyz.deadletter"
    assert catalogue("other")["events"].name == "other.events"


def test_faust_internal_topic_names():
    from schemas.topics import faust_internal_topics

    specs = {s.name: s for s in faust_internal_topics(
        "faultstream-worker", tables=["windows"], group_bys=[("streams.app.extract", "faultstream.events", "workload_id")],
        partitions=6,
    )}
    assert specs["faultstream-worker-windows-changelog"].cleanup_policy == "compact"
    assert specs["faultstream-worker-windows-changelog"].partitions == 6
    assert specs["streams.app.extract-faultstream.events-workload_id-repartition"].cleanup_policy == "delete"
    assert specs["faultstream-worker-__assignor-__leader"].partitions == 1


def test_create_topics_is_idempotent_and_matches_the_catalogue(kafka_config, kafka_topic_factory):
    from schemas.topics import DAY_MS, catalogue, create_topics

    specs = catalogue(kafka_topic_factory.prefix)
    for s in specs.values():
        kafka_topic_factory.track(s.name)
    first = create_topics(kafka_config, specs)
    assert first == [s.name for s in specs.values()]
    assert create_topics(kafka_config, specs) == []  # second run: nothing to do, no error

    got = _describe(kafka_config, [s.name for s in specs.values()])
    p = kafka_topic_factory.prefix
    assert got[f"{p}.observations"] == (12, "delete", str(7 * DAY_MS), str(10 * 1024 * 1024))
    assert got[f"{p}.events"][:3] == (12, "delete", str(7 * DAY_MS))
    assert got[f"{p}.attributions"][:2] == (12, "compact")
    assert got[f"{p}.remediations"][:2] == (12, "compact")
    assert got[f"{p}.remediation-commands"][:3] == (3, "delete", str(30 * DAY_MS))
    assert got[f"{p}.deadletter"] == (3, "delete", str(30 * DAY_MS), str(16 * 1024 * 1024))
    assert got[f"{p}.topology"][:2] == (3, "compact")
    assert got[f"{p}.certifications"][:3] == (12, "delete", str(30 * DAY_MS))


def test_create_topics_reports_a_partition_mismatch(kafka_config, kafka_topic_factory):
    import pytest

    from schemas.topics import TopicMismatchError, catalogue, create_topics

    specs = catalogue(kafka_topic_factory.prefix)
    for s in specs.values():
        kafka_topic_factory.track(s.name)
    events = specs["events"]
    assert create_topics(kafka_config, [events], partitions_override=2) == [events.name]
    with pytest.raises(TopicMismatchError) as info:
        create_topics(kafka_config, specs)  # wants 12; the others get created anyway
    assert info.value.mismatches == [f"{events.name}: 2 partitions, catalogue wants 12"]
    assert events.name not in info.value.created and len(info.value.created) == len(specs) - 1


def test_cli_topics_create(kafka_config, kafka_bootstrap, kafka_topic_factory, monkeypatch):
    from typer.testing import CliRunner

    from schemas.topics import catalogue
    from streams.cli import app

    prefix = kafka_topic_factory.prefix
    names = [s.name for s in catalogue(prefix).values()]
    for n in names:
        kafka_topic_factory.track(n)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("FAULTSTREAM_TOPIC_PREFIX", prefix)
    runner = CliRunner()
    result = runner.invoke(app, ["topics", "create", "--partitions", "2"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [f"created {n}" for n in names]
    again = runner.invoke(app, ["topics", "create", "--bootstrap", kafka_bootstrap, "--partitions", "2"])
    assert again.exit_code == 0, again.output
    assert again.output.splitlines() == [f"exists  {n}" for n in names]
    got = _describe(kafka_config, names)
    assert {n: got[n][0] for n in names} == {n: 2 for n in names}
    assert got[f"{prefix}.attributions"][1] == "compact"
    # the catalogue's default (12) now differs from the broker: reported, exit 1
    mismatch = runner.invoke(app, ["topics", "create"])
    assert mismatch.exit_code == 1
    assert f"{prefix}.observations: 2 partitions, catalogue wants 12" in mismatch.output


@pytest.mark.slow
def test_cli_topics_create_unreachable_broker_is_a_clean_error():
    from typer.testing import CliRunner

    from streams.cli import app

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        result = CliRunner().invoke(app, ["topics", "create", "--bootstrap", f"127.0.0.1:{port}", "--timeout", "3"])
    assert result.exit_code == 2
    assert "error" in result.output and f"127.0.0.1:{port}" in result.output


# -- KafkaSettings --------------------------------------------------------------------------------

def test_kafka_settings_from_environment(monkeypatch):
    import ssl

    import pydantic
    import pytest

    from transport.kafka_settings import KafkaSettings

    for var in ("KAFKA_BOOTSTRAP_SERVERS", "KAFKA_SECURITY_PROTOCOL", "KAFKA_SASL_MECHANISM",
                "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD", "KAFKA_SSL_CA_LOCATION"):
        monkeypatch.delenv(var, raising=False)
    assert KafkaSettings().confluent_config() == {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "PLAINTEXT"}

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "a:9093, b:9093")
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "sasl_ssl")
    monkeypatch.setenv("KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "alice")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "s3cret")
    s = KafkaSettings()
    assert "s3cret" not in repr(s)
    assert s.confluent_config() == {
        "bootstrap.servers": "a:9093,b:9093", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "s3cret",
    }
    kw = s.aiokafka_kwargs()
    assert kw["bootstrap_servers"] == ["a:9093", "b:9093"]
    assert (kw["security_protocol"], kw["sasl_mechanism"], kw["sasl_plain_username"], kw["sasl_plain_password"]) == (
        "SASL_SSL", "SCRAM-SHA-512", "alice", "s3cret")
    assert isinstance(kw["ssl_context"], ssl.SSLContext)

    monkeypatch.delenv("KAFKA_SASL_MECHANISM")
    with pytest.raises(pydantic.ValidationError, match="KAFKA_SASL_MECHANISM"):
        KafkaSettings()
