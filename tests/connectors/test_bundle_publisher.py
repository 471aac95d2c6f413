"""``faultstream connect bundle`` against a real Kafka broker: every example bundle published and
consumed back (ids = the bundle reader's ids plus the workload/topology records; event-time
order per partition), ``--speed`` pacing, and the producer's back-pressure and delivery errors
against an address where no broker listens (real librdkafka, no mock)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from connectors.bundle import BundleConnector
from connectors.publish import bundle_records, publish_bundle
from schemas.bundle import WorkloadSpec
from schemas.records import Observation, Source
from transport.kafka import BackPressureTimeout, DeliveryError, RecordProducer
from transport.kafka_settings import KafkaSettings
from streams.cli import app
from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: F401
from tests.connectors.test_files_connector import consume, settings, values  # noqa: F401

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"
BUNDLES = sorted(p.parent for p in EXAMPLES.glob("*/workload.yaml"))


def test_examples_present():
    assert len(BUNDLES) >= 15


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_every_example_bundle_round_trips(bundle: Path, settings: KafkaSettings, kafka_config, kafka_topic_factory):  # noqa: F811
    topic = kafka_topic_factory("obs", partitions=3)
    result = CliRunner().invoke(app, ["connect", "bundle", str(bundle), "--bootstrap",
                                      settings.bootstrap_servers, "--topic", topic])
    assert result.exit_code == 0, result.output
    reader = BundleConnector(bundle)
    reader_ids = {o.observation_id for o in reader.observations()}
    # one coverage record per source and workload (a bundle may hold several jobs:
    # workloads/*.yaml; each gets the coverage of its own nodes' files)
    coverage = [c for w in reader.workloads for c in reader.coverage_for(w.workload_id)]
    spec = reader.workload
    has_topology = (bundle / "topology.yaml").is_file()
    n = len(reader_ids) + len(reader.workloads) + int(has_topology) + len(coverage)
    assert f"published {n} records" in result.output

    msgs = consume(kafka_config, topic, n)
    got = values(msgs)
    assert len(got) == n
    heads = [o for o in got if o["format"] in ("workload_yaml", "topology_yaml")]
    tails = [o for o in got if o["format"] == "coverage"]
    body_ids = {o["observation_id"] for o in got if o not in heads and o not in tails}
    assert body_ids == reader_ids
    # the reader's coverage follows the records, one health_event per source
    assert sorted(o["attributes"]["coverage"]["source"] for o in tails) == sorted(c.source for c in coverage)
    assert all(o["kind"] == "health_event" for o in tails)

    workload_records = [o for o in heads if o["format"] == "workload_yaml"]
    assert [o["workload_id"] for o in workload_records] == [w.workload_id for w in reader.workloads]
    wl = workload_records[0]
    assert wl["kind"] == "scheduler_event" and wl["host"] == "_scheduler"
    assert wl["body"] == (bundle / "workload.yaml").read_text()
    assert WorkloadSpec.model_validate(wl["attributes"]["workload"]) == spec
    assert wl["observed_at"] == spec.start_ns and wl["workload_id"] == spec.workload_id
    assert Observation.model_validate(wl).model_copy().with_id().observation_id == wl["observation_id"]
    topo = [o for o in heads if o["format"] == "topology_yaml"]
    assert len(topo) == int(has_topology)
    if topo:
        assert topo[0]["kind"] == "topology" and topo[0]["attributes"]["topology"]["links"]

    # per partition: the head records first, then event-time order, then coverage
    by_part: dict[int, list] = defaultdict(list)
    for m, o in zip(msgs, got):
        assert m.key().decode() == o["host"]
        by_part[m.partition()].append((m.offset(), o))
    for part, items in by_part.items():
        items.sort(key=lambda x: x[0])
        seq = [o for _, o in items]
        if any(o is wl for o in seq):
            assert seq[0]["format"] == "workload_yaml"
        kinds = ["head" if o in heads else "cov" if o in tails else "body" for o in seq]
        assert kinds == sorted(kinds, key=["head", "body", "cov"].index)
        times = [o["observed_at"] for o, k in zip(seq, kinds) if k == "body"]
        assert times == sorted(times), f"partition {part} out of event-time order"


def _tiny_bundle(root: Path) -> Path:
    b = root / "tiny"
    (b / "logs" / "node-a01").mkdir(parents=True)
    (b / "workload.yaml").write_text(
        "workload_id: job-7\ncluster: c1\nstate: FAILED\nstart: 2026-11-30T01:20:00Z\n"
        "end: 2026-11-30T01:20:05Z\nnodes: [node-a01]\nranks_per_node: 1\n"
    )
    (b / "logs" / "node-a01" / "train.log").write_text(
        "2026-11-30T01:20:01.000Z start\n2026-11-30T01:20:02.000Z middle\n2026-11-30T01:20:03.000Z end\n"
    )
    return b


def test_speed_is_honoured(tmp_path: Path, settings: KafkaSettings, kafka_config, kafka_topic_factory):  # noqa: F811
    bundle = _tiny_bundle(tmp_path)
    topic = kafka_topic_factory("speed")
    records, _ = bundle_records(bundle)
    # workload record at 01:20:00, log lines at :01 .. :03: a 3 s span
    assert [r.observed_at - records[0].observed_at for r in records[:4]] == [0, 10**9, 2 * 10**9, 3 * 10**9]
    assert [r.format for r in records[4:]] == ["coverage"]
    with RecordProducer(settings, topic) as producer:
        t0 = time.monotonic()
        n, _ = publish_bundle(bundle, producer, speed=10)
        paced = time.monotonic() - t0
        t0 = time.monotonic()
        publish_bundle(bundle, producer, speed=0)
        fast = time.monotonic() - t0
    assert n == 5
    assert paced >= 0.29  # 3 s at 10x, the 2 s span alone is >= 0.15 s
    assert paced < 5
    assert fast < paced
    got = values(consume(kafka_config, topic, 10))
    assert [o["body"] for o in got[1:4]] == [
        "2026-11-30T01:20:01.000Z start", "2026-11-30T01:20:02.000Z middle", "2026-11-30T01:20:03.000Z end"]
    assert got[:5] == got[5:]


def test_cli_bad_bundle_is_one_line_error(tmp_path: Path):
    result = CliRunner().invoke(app, ["connect", "bundle", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "not a bundle directory" in result.output


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _obs(i: int) -> Observation:
    return Observation(source=Source(connector="t"), kind="log_line", observed_at=i, time_source="line",
                       time_quality=1.0, host=f"h{i}", body="x").with_id()


def test_back_pressure_then_clear_error_without_broker():
    settings = KafkaSettings(bootstrap_servers=_closed_port())
    producer = RecordProducer(settings, "nowhere", queue_max_messages=3, max_block_s=0.5,
                              delivery_timeout_ms=60_000)
    for i in range(3):
        producer.send(f"h{i}", _obs(i))
    t0 = time.monotonic()
    with pytest.raises(BackPressureTimeout, match="queue full for 0.5 s"):
        producer.send("h3", _obs(3))
    assert 0.45 <= time.monotonic() - t0 < 5
    assert producer.sent == 3 and producer.back_pressure_waits == 1 and len(producer) == 3


@pytest.mark.slow
def test_flush_raises_delivery_error_listing_keys():
    settings = KafkaSettings(bootstrap_servers=_closed_port())
    producer = RecordProducer(settings, "nowhere", delivery_timeout_ms=1_000)
    producer.send("node-a01", _obs(1))
    producer.send("node-a02", _obs(2))
    with pytest.raises(DeliveryError) as info:
        producer.flush(20)
    assert sorted(f.key for f in info.value.failed) == ["node-a01", "node-a02"]
    assert "node-a01, node-a02" in str(info.value) and "timed out" in str(info.value)
    assert producer.flush(1) == 0  # failures were reported once; the queue is empty
    assert producer.delivered == 0


def test_connect_bundle_publishes_to_the_prefixed_observations_topic_by_default(
        monkeypatch, settings: KafkaSettings, kafka_config, kafka_topic_factory):  # noqa: F811
    """Without --topic the connectors publish to the catalogue's observations topic under
    FAULTSTREAM_TOPIC_PREFIX, like every other command (the worker reads that one)."""
    from schemas.topics import catalogue, create_topics

    prefix = kafka_topic_factory.prefix
    spec = catalogue(prefix)["observations"].model_copy(update={"partitions": 1})
    create_topics(kafka_config, [spec])
    kafka_topic_factory.track(spec.name)
    monkeypatch.setenv("FAULTSTREAM_TOPIC_PREFIX", prefix)
    bundle = EXAMPLES / "fabric-roce-gid-index-config"
    result = CliRunner().invoke(app, ["connect", "bundle", str(bundle), "--bootstrap", settings.bootstrap_servers])
    assert result.exit_code == 0, result.output
    n = len(bundle_records(bundle)[0])
    assert f"published {n} records of {bundle} to {prefix}.observations" in result.output
    assert len(consume(kafka_config, spec.name, n)) == n


def test_connect_bundle_publishes_several_bundles_whole_one_after_the_other(
        settings: KafkaSettings, kafka_config, kafka_topic_factory):  # noqa: F811
    """`connect bundle A B`: A's records (workload first, then event-time order) then B's, on one
    partition in exactly the order publishing each alone gives; one summary line a bundle."""
    topic = kafka_topic_factory("obs", partitions=1)
    first, second = EXAMPLES / "fabric-roce-gid-index-config", EXAMPLES / "public-rc58-xid79-kubernetes-gpu"
    result = CliRunner().invoke(app, ["connect", "bundle", str(first), str(second), "--bootstrap",
                                      settings.bootstrap_servers, "--topic", topic])
    assert result.exit_code == 0, result.output
    want = [o.observation_id for b in (first, second) for o in bundle_records(b)[0]]
    got = [o["observation_id"] for o in values(consume(kafka_config, topic, len(want)))]
    assert got == want
    for bundle in (first, second):
        assert f"published {len(bundle_records(bundle)[0])} records of {bundle} to {topic}" in result.output


def test_connect_bundle_names_every_missing_bundle_before_publishing(tmp_path: Path):
    result = CliRunner().invoke(app, ["connect", "bundle", str(EXAMPLES / "public-rc58-xid79-kubernetes-gpu"),
                                      str(tmp_path / "a"), str(tmp_path / "b"), "--bootstrap", _closed_port()])
    assert result.exit_code == 2
    assert f"not a bundle directory: {tmp_path / 'a'}, {tmp_path / 'b'}" in result.output


def test_connect_bundle_stops_at_an_unreadable_bundle_after_publishing_the_ones_before(
        tmp_path: Path, settings: KafkaSettings, kafka_config, kafka_topic_factory):  # noqa: F811
    topic = kafka_topic_factory("obs", partitions=1)
    first = EXAMPLES / "fabric-roce-gid-index-config"
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "workload.yaml").write_text("cluster: [unclosed\n")
    result = CliRunner().invoke(app, ["connect", "bundle", str(first), str(tmp_path / "broken"), "--bootstrap",
                                      settings.bootstrap_servers, "--topic", topic])
    assert result.exit_code == 2
    assert str(tmp_path / "broken" / "workload.yaml") in result.output
    n = len(bundle_records(first)[0])
    # the bundle before it is on the topic, and the output says so
    assert f"published {n} records of {first} to {topic}" in result.output
    assert len(consume(kafka_config, topic, n)) == n


def test_connect_bundle_refuses_a_bundle_given_twice(tmp_path: Path):
    bundle = EXAMPLES / "fabric-roce-gid-index-config"
    link = tmp_path / "same"
    link.symlink_to(bundle)
    result = CliRunner().invoke(app, ["connect", "bundle", str(bundle), str(link), "--bootstrap", _closed_port()])
    assert result.exit_code == 2
    assert f"bundle given twice: {link}" in result.output


def _paced_run(tmp_path: Path, bootstrap: str, topic: str, bundles: list[Path]) -> tuple[Any, Path]:
    """`connect bundle BUNDLES --speed 100` as a subprocess, its stderr in a file; returns
    (process, stderr file) once the first bundle's line is there."""
    err = tmp_path / "stderr"
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "connect", "bundle", *map(str, bundles),
         "--speed", "100", "--bootstrap", bootstrap, "--topic", topic],
        cwd=Path(__file__).resolve().parents[2], env=os.environ, stdout=subprocess.DEVNULL, stderr=err.open("wb"))
    first = f"published {len(bundle_records(bundles[0])[0])} records of {bundles[0]} to {topic}"
    deadline = time.monotonic() + 60
    while first not in err.read_text() and time.monotonic() < deadline:
        assert proc.poll() is None, err.read_text()
        time.sleep(0.1)
    assert first in err.read_text()
    time.sleep(1.0)  # inside the second bundle's paced wait
    return proc, err


@pytest.mark.slow
def test_ctrl_c_in_a_paced_run_counts_the_records_the_broker_has(
        tmp_path: Path, settings: KafkaSettings, kafka_config, kafka_topic_factory):  # noqa: F811
    topic = kafka_topic_factory("obs", partitions=1)
    proc, err = _paced_run(tmp_path, settings.bootstrap_servers, topic,
                           [EXAMPLES / "fabric-roce-gid-index-config", EXAMPLES / "public-rc58-xid79-kubernetes-gpu"])
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=20) == 130
    m = re.search(r"interrupted after (\d+) records delivered", err.read_text())
    assert m and int(m.group(1)) > len(bundle_records(EXAMPLES / "fabric-roce-gid-index-config")[0]), err.read_text()
    assert len(consume(kafka_config, topic, int(m.group(1)))) == int(m.group(1))


@pytest.mark.slow
def test_sigterm_in_a_paced_run_reports_each_bundle_and_what_was_left(
        tmp_path: Path, settings: KafkaSettings, kafka_config, kafka_topic_factory):  # noqa: F811
    """--speed 100: the first bundle (79 s of records) is reported once the broker has it, while
    the second (1,500 s) is being paced; SIGTERM then ends the paced wait at once, says how much
    of the second bundle and which bundles were not published, and exits 143."""
    topic = kafka_topic_factory("obs", partitions=1)
    first, second, third = (EXAMPLES / n for n in ("fabric-roce-gid-index-config", "public-rc58-xid79-kubernetes-gpu",
                                                    "h200-xid31-illegal-address"))
    proc, err = _paced_run(tmp_path, settings.bootstrap_servers, topic, [first, second, third])
    n_first = len(bundle_records(first)[0])
    stopped_at = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143
    assert time.monotonic() - stopped_at < 5
    text = err.read_text()
    m = re.search(rf"stopped: (\d+) of {len(bundle_records(second)[0])} records of {re.escape(str(second))} published", text)
    assert m, text
    assert f"stopped: not published: {third}" in text
    assert len(consume(kafka_config, topic, n_first + int(m.group(1)))) == n_first + int(m.group(1))
