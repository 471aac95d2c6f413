"""The streaming quickstart pages someone: the quickstart's bundle published with `faultstream
connect bundle`, a real `faultstream worker` (``FAULTSTREAM_ALERTS_URL`` set) on a real Kafka
broker, and a real Alertmanager 0.25 (started by ``tests/sinks/test_alertmanager.py``'s helper).

The final verdict is an alert in Alertmanager within 2 s of the verdict's record on the
attributions topic; a worker killed with SIGKILL and replaced by one with no local state (its
tables from the changelog) never makes a second alert, resolves the first one when a later
revision changes its labels, and the withdrawal resolves the last one.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from schemas.records import Attribution
from schemas.wire import encode_record
from tests.sinks.test_alertmanager import Alertmanager
from tests.streams.test_stream import publish, stream_env  # noqa: F401

pytestmark = [pytest.mark.kafka, pytest.mark.prometheus]

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "examples" / "incidents" / "public-rc15-pcie-aer-xid79-multinode"
EXPLORER = "http://explorer.example:8077"


@pytest.fixture()
def am(tmp_path: Path):
    server = Alertmanager(tmp_path / "alertmanager")
    yield server
    server.stop()


class Watch:
    """Polls Alertmanager every 50 ms in a thread: when the first alert appeared (wall clock,
    seconds) and the most alerts it ever listed at once."""

    def __init__(self, am: Alertmanager) -> None:
        self.am = am
        self.first_seen: float | None = None
        self.most = 0
        self.latest: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                alerts = self.am.alerts()
            except Exception as exc:  # noqa: BLE001 -- reported by the test
                self.errors.append(repr(exc))
                alerts = self.latest
            now = time.time()
            if alerts and self.first_seen is None:
                self.first_seen = now
            self.most = max(self.most, len(alerts))
            self.latest = alerts
            self.stop.wait(0.05)

    def until(self, cond: Any, what: str, timeout: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond(self.latest):
                return self.latest
            time.sleep(0.05)
        pytest.fail(f"Alertmanager: {what} not seen after {timeout} s; alerts: {self.latest}; "
                    f"errors: {self.errors[-3:]}\n{self.am.tail()}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def final_verdict(bootstrap: str, topic: str, timeout: float = 120) -> tuple[Attribution, float]:
    """The first final workload verdict on ``topic`` and its record's timestamp (the worker's
    producer time, seconds since the epoch)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() or msg.value() is None:
                continue
            data = json.loads(msg.value())
            if data["scope"]["kind"] == "workload" and data["status"] == "final":
                return Attribution.model_validate(data), msg.timestamp()[1] / 1000
    finally:
        consumer.close()
    pytest.fail(f"no final workload verdict on {topic} after {timeout} s")


def test_quickstart_verdict_pages_within_2s_resolves_on_withdrawal_and_never_duplicates(
        stream_env, kafka_bootstrap, am):  # noqa: F811
    env, prefix = stream_env["env"], stream_env["prefix"]
    alerts_env = {"FAULTSTREAM_ALERTS_URL": am.url, "FAULTSTREAM_ALERTS_EXPLORER_URL": EXPLORER}
    worker = stream_env["start"](**alerts_env)
    watch = Watch(am)
    try:
        publish(env, BUNDLE)
        att, published_at = final_verdict(kafka_bootstrap, f"{prefix}.attributions")
        [alert] = watch.until(lambda alerts: len(alerts) == 1, "the final verdict's alert")
        assert watch.first_seen is not None
        latency = watch.first_seen - published_at
        assert latency < 2.0, f"alert {latency:.2f} s after the verdict"
        print(f"alert {latency:.3f} s after the final verdict's record")
        labels = alert["labels"]
        assert labels["verdict_id"] == att.attribution_id
        assert {k: labels[k] for k in ("cluster", "scope", "scope_id", "domain", "root_cause", "quality",
                                       "culprit_host", "severity")} == {
            "cluster": "c1", "scope": "workload", "scope_id": "job-1006", "domain": "gpu_hardware",
            "root_cause": "gpu.xid.79", "quality": "definitive", "culprit_host": "node-a02", "severity": "critical"}
        assert alert["annotations"]["explorer"] == f"{EXPLORER}/incidents/{att.attribution_id}"
        assert "GPU-hours lost" in alert["annotations"]["cost"]

        # a crash, and a replacement with no local state: its tables come from the changelogs and
        # whatever was not committed is read again
        worker.stop(signal.SIGKILL)
        stream_env["start"]("second", FAULTSTREAM_DATA_DIR=str(stream_env["tmp"] / "faust-second"), **alerts_env)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})

        def send(record: Attribution | None) -> None:
            value, headers = encode_record(record) if record is not None else (None, None)
            producer.produce(f"{prefix}.attributions", key=att.attribution_id.encode(), value=value,
                             headers=headers)
            producer.flush(10)

        # a later revision whose quality changed: the first alert resolves, its successor fires
        send(att.model_copy(update={"revision": att.revision + 1, "quality": "ambiguous"}))
        [alert] = watch.until(lambda alerts: [a["labels"]["quality"] for a in alerts] == ["ambiguous"],
                              "the revision's alert alone")
        assert alert["labels"]["severity"] == "warning"
        # the withdrawal, then its tombstone, resolve it
        send(att.model_copy(update={"revision": att.revision + 2, "quality": "ambiguous", "status": "withdrawn",
                                    "root_cause": None}))
        send(None)
        watch.until(lambda alerts: alerts == [], "no alert after the withdrawal")
        assert watch.most == 1, f"{watch.most} alerts at once"
        assert not watch.errors, watch.errors
    finally:
        watch.close()
