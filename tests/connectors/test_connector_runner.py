"""The connector runner (``connectors/runner.py``) and the Source contract
(``connectors/source.py``), without a broker: a producer stand-in records what was sent and
flushed, real connectors run against files in a temporary directory."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from connectors.certifications import CertificationFiles
from connectors.counters import CountersConnector
from connectors.cursor import CursorStore
from connectors.files import FilesConnector
from connectors.runner import run
from connectors.slurm import SlurmConnector
from connectors.source import Rewindable, Source
from connectors.topology import TopologyConnector
from schemas.records import CoverageEntry, Observation, Source as Provenance
from transport.kafka import DeliveryError, FailedDelivery, consumer_config
from transport.kafka_settings import KafkaSettings, KafkaSettingsError, kafka_settings

TS = "2026-11-30T01:20:{:02d}.000Z"


class Producer:
    """A RecordProducer stand-in: ``sent`` holds (key, record) per send, ``flushed`` the
    records of every successful flush; ``fail`` flushes fail with DeliveryError first."""

    def __init__(self, fail: int = 0) -> None:
        self.queued: list[tuple[str, object]] = []
        self.flushed: list[list[tuple[str, object]]] = []
        self.fail = fail

    def send(self, key, record, *, topic=None) -> None:
        self.queued.append((key, record))

    def flush(self, timeout: float = 60.0) -> int:
        batch, self.queued = self.queued, []
        if self.fail:
            self.fail -= 1
            raise DeliveryError([FailedDelivery(key=k, topic="t", error="broker down") for k, _ in batch])
        self.flushed.append(batch)
        return 0


def obs(i: int, host: str = "node-a01") -> Observation:
    return Observation(source=Provenance(connector="test", instance="x"), kind="log_line",
                       observed_at=1_796_000_000_000_000_000 + i, time_source="line", time_quality=1.0,
                       host=host, body=f"line {i}").with_id()


class ListSource:
    """A Source over fixed batches; ``checkpoint`` is the number of batches handed out."""

    def __init__(self, batches: list[list[Observation]], pending_after: int = 0) -> None:
        self.batches = batches
        self.i = 0
        self.rewinds = 0
        self.pending_after = pending_after
        self.saved_at = 0

    def poll(self) -> list[Observation]:
        out = self.batches[self.i] if self.i < len(self.batches) else []
        self.i += 1
        return out

    @property
    def pending(self) -> bool:
        return self.i < self.pending_after

    def checkpoint(self) -> dict:
        return {"batches": self.i}

    def coverage(self) -> list[CoverageEntry]:
        return [CoverageEntry(source="list", status="present", records=sum(map(len, self.batches)))]

    def rewind(self) -> None:
        self.rewinds += 1
        self.i = self.saved_at


def test_every_live_connector_is_a_source(tmp_path: Path) -> None:
    cursor = CursorStore(tmp_path / "c.json")
    files = FilesConnector([tmp_path / "x.log"], host="node-a01", cursor=cursor)
    slurm = SlurmConnector("c1", cursor=cursor)
    counters = CountersConnector(node="node-a01", sysfs_root=tmp_path)
    certs = CertificationFiles([tmp_path / "none.txt"], cluster="c1", host="node-a01")
    topo = TopologyConnector("c1", hosts=[tmp_path / "hosts"])
    for source in (files, slurm, counters, certs, topo):
        assert isinstance(source, Source), type(source).__name__
    assert isinstance(slurm, Rewindable)
    assert isinstance(files, Rewindable)  # a failed files delivery is retried from the saved cursor


def test_one_shot_publishes_flushes_then_saves(tmp_path: Path) -> None:
    cursor = CursorStore(tmp_path / "cursor.json")
    source = ListSource([[obs(1), obs(2, "node-a02")]])
    producer = Producer()
    assert run(source, producer, cursor=cursor) == 2
    assert [[k for k, _ in b] for b in producer.flushed] == [["node-a01", "node-a02"]]
    assert cursor.load() == {"batches": 1}


def test_a_failed_flush_leaves_the_cursor_where_it_was(tmp_path: Path) -> None:
    cursor = CursorStore(tmp_path / "cursor.json")
    cursor.save({"batches": 0})
    with pytest.raises(DeliveryError, match="broker down"):
        run(ListSource([[obs(1)]]), Producer(fail=1), cursor=cursor)
    assert cursor.load() == {"batches": 0}


def test_pending_source_is_polled_again_waiting_only_after_an_empty_batch(tmp_path: Path) -> None:
    waits: list[float] = []
    source = ListSource([[obs(1)], [], [obs(2)]], pending_after=3)
    producer = Producer()
    assert run(source, producer, poll_s=5.0, wait=waits.append) == 2
    assert source.i == 3 and waits == [5.0]  # after the empty second batch only


def test_follow_retries_a_failed_delivery_after_rewinding(tmp_path: Path) -> None:
    cursor = CursorStore(tmp_path / "cursor.json")
    stop = threading.Event()
    source = ListSource([[obs(1)], [obs(2)]])
    producer = Producer(fail=1)
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        if source.i >= 3:
            stop.set()

    assert run(source, producer, cursor=cursor, follow=True, poll_s=0.5, stop=stop, retry=True, wait=wait) == 2
    assert source.rewinds == 1
    assert [[r.body for _, r in b] for b in producer.flushed if b] == [["line 1"], ["line 2"]]
    assert cursor.load() == {"batches": 3}
    assert waits and set(waits) == {0.5}


def test_follow_without_retry_stops_at_the_first_error(tmp_path: Path) -> None:
    with pytest.raises(DeliveryError):
        run(ListSource([[obs(1)]]), Producer(fail=1), follow=True, retry=False, wait=lambda s: None)


def test_the_source_can_pick_the_key(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("10.0.0.11 node-a01\n")
    topo = TopologyConnector("c1", hosts=[hosts], clock=lambda: 1_796_000_000_000_000_000)
    producer = Producer()
    assert run(topo, producer) == 1
    ((key, record),) = producer.flushed[0]
    assert key == "c1" and record.host == "_fabric" and record.kind == "topology"
    (cov,) = topo.coverage()
    assert cov.source == f"topology:{hosts}" and cov.records == 1 and cov.status == "present"


def test_files_one_shot_through_the_runner(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(f"{TS.format(0)} a\n{TS.format(1)} b\n")
    cursor = CursorStore(tmp_path / "cursor.json")
    conn = FilesConnector([log], host="node-a01", cursor=cursor)
    producer = Producer()
    assert run(conn, producer, cursor=cursor) == 2
    assert cursor.load()["files"][str(log)]["offset"] == log.stat().st_size
    again = FilesConnector([log], host="node-a01", cursor=cursor)
    assert run(again, Producer(), cursor=cursor) == 0


def test_kafka_settings_and_consumer_config(monkeypatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "10.0.0.5:9092")
    assert kafka_settings().bootstrap_servers == "10.0.0.5:9092"
    assert kafka_settings("10.0.0.6:9092, 10.0.0.7:9092").bootstrap_servers == "10.0.0.6:9092,10.0.0.7:9092"
    with pytest.raises(KafkaSettingsError, match="^Kafka settings: .*host:port"):
        kafka_settings("no-port")
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    with pytest.raises(KafkaSettingsError, match="KAFKA_SASL_MECHANISM is required"):
        kafka_settings()
    conf = consumer_config(KafkaSettings(bootstrap_servers="10.0.0.5:9092", security_protocol="PLAINTEXT"),
                           "g1", extra={"log_level": 0})
    assert conf == {"bootstrap.servers": "10.0.0.5:9092", "security.protocol": "PLAINTEXT", "group.id": "g1",
                    "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0}
    with pytest.raises(ValueError, match="group id"):
        consumer_config(KafkaSettings(bootstrap_servers="10.0.0.5:9092", security_protocol="PLAINTEXT"), " ")
    assert json.loads(json.dumps(conf)) == conf
