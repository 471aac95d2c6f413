"""The files connector while deliveries fail: ``FilesConnector.rewind`` returns to the saved
cursor so a retried batch carries the same observation ids, and ``faultstream connect files
--follow`` keeps retrying while no broker answers, never moving its cursor past undelivered
records (a real broker receives everything once one answers)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from connectors.cursor import CursorStore
from connectors.files import FilesConnector
from connectors.runner import publish, run
from connectors.source import Rewindable
from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: F401
from tests.connectors.test_files_connector import consume, values
from transport.kafka import DeliveryError, FailedDelivery

TS = "2026-11-30T01:20:{:02d}.000Z"


class FailingDelivery:
    """A producer whose first ``fail`` flushes report every queued message as failed (a failed
    delivery, the error a RecordProducer raises); later flushes succeed. ``delivered`` holds the
    records of each successful flush."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.queued: list = []
        self.delivered: list[list] = []

    def send(self, key, record, *, topic=None) -> None:
        self.queued.append(record)

    def flush(self, timeout: float = 60.0) -> int:
        batch, self.queued = self.queued, []
        if self.fail:
            self.fail -= 1
            raise DeliveryError([FailedDelivery(key=r.host, topic="t", error="broker down") for r in batch])
        self.delivered.append(batch)
        return 0


def ids(records) -> list[str]:
    return [r.observation_id for r in records]


def test_rewind_after_a_failed_delivery_gives_the_same_ids_then_the_cursor_moves(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(f"{TS.format(0)} one\n{TS.format(1)} two\n")
    cursor = CursorStore(tmp_path / "cursor.json")
    conn = FilesConnector([log], host="node-a01", cursor=cursor)
    assert isinstance(conn, Rewindable)
    publish(conn.poll(), FailingDelivery(0), cursor=cursor, state=conn.checkpoint)
    saved = cursor.load()
    assert saved["files"][str(log)]["line"] == 2

    with log.open("a") as fh:
        fh.write(f"{TS.format(2)} three\nno time here\n{TS.format(3)} four\n")
    first = conn.poll()
    assert [r.body for r in first] == [f"{TS.format(2)} three", "no time here", f"{TS.format(3)} four"]
    with pytest.raises(DeliveryError, match="broker down"):
        publish(first, FailingDelivery(1), cursor=cursor, state=conn.checkpoint)
    assert cursor.load() == saved  # the failed delivery moved nothing

    conn.rewind()
    again = conn.poll()
    assert ids(again) == ids(first) and [r.position.line for r in again] == [3, 4, 5]
    assert again[1].observed_at == again[0].observed_at  # the untimed line inherits as before
    assert conn.records == 5  # the re-read records are not counted twice
    producer = FailingDelivery(0)
    assert publish(again, producer, cursor=cursor, state=conn.checkpoint) == 3
    assert cursor.load()["files"][str(log)] == {**saved["files"][str(log)], "offset": log.stat().st_size,
                                                "line": 5, "last_ns": again[2].observed_at}
    conn.rewind()  # at the saved cursor: nothing comes again
    assert conn.poll() == []
    conn.close()


def test_rewind_across_a_rotation_reads_the_rotated_file_again(tmp_path: Path) -> None:
    log = tmp_path / "syslog"
    log.write_text(f"{TS.format(0)} a\n")
    cursor = CursorStore(tmp_path / "cursor.json")
    conn = FilesConnector([log], host="node-a01", cursor=cursor, follow=True, idle_s=0.0)
    publish(conn.poll(), FailingDelivery(0), cursor=cursor, state=conn.checkpoint)
    with log.open("a") as fh:
        fh.write(f"{TS.format(1)} b\n{TS.format(2)} c")  # the last line has no newline yet
    log.rename(tmp_path / "syslog.1")
    log.write_text(f"{TS.format(3)} d\n")
    first = conn.poll()
    assert [r.body for r in first] == [f"{TS.format(1)} b", f"{TS.format(2)} c", f"{TS.format(3)} d"]
    conn.rewind()  # the delivery of `first` failed: the saved cursor names the rotated inode
    again = conn.poll()
    assert ids(again) == ids(first)
    assert again[2].attributes == {"file_epoch": 1} and again[2].position.line == 1
    conn.close()


def test_follow_run_retries_until_delivered_then_saves_the_cursor(tmp_path: Path, caplog) -> None:
    log = tmp_path / "train.log"
    log.write_text(f"{TS.format(0)} one\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
                   f"RuntimeError: boom\n{TS.format(5)} after\n")
    cursor = CursorStore(tmp_path / "cursor.json")
    conn = FilesConnector([log], host="node-a01", cursor=cursor, follow=True, idle_s=0.0)
    producer = FailingDelivery(3)
    stop = threading.Event()
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        if producer.delivered:
            stop.set()

    with caplog.at_level("WARNING", logger="faultstream.connector"):
        n = run(conn, producer, cursor=cursor, follow=True, poll_s=0.5, stop=stop, retry=True, wait=wait)
    assert n == 3 and conn.rewinds == 3
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 3 and all("broker down" in r.getMessage() for r in retries)
    (batch,) = [b for b in producer.delivered if b]
    assert [r.body.splitlines()[0] for r in batch] == [f"{TS.format(0)} one", "Traceback (most recent call last):",
                                                       f"{TS.format(5)} after"]
    assert cursor.load()["files"][str(log)]["offset"] == log.stat().st_size
    assert conn.records == 3
    conn.close()


# -- the CLI against no broker, then against the real one --------------------------------------


def _dead_address() -> str:
    """``127.0.0.1:<port>`` where nothing listens (a port bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from streams.cli import app; app()", "connect", "files", *args]


def test_cli_follow_keeps_retrying_without_a_broker_and_loses_nothing(tmp_path, kafka_bootstrap, kafka_config,  # noqa: F811
                                                                      kafka_topic_factory):  # noqa: F811
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() or kafka_bootstrap
    topic = kafka_topic_factory("outage")
    log = tmp_path / "node-a01.log"
    cur = tmp_path / "cursor.json"
    log.write_text(f"{TS.format(0)} before 1\n{TS.format(1)} before 2\n")
    common = [str(log), "--host", "node-a01", "--cursor", str(cur), "--topic", topic]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    once = subprocess.run(_cli(*common, "--bootstrap", bootstrap), env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert once.returncode == 0 and "published 2 records" in once.stderr, once.stderr
    saved = cur.read_bytes()
    with log.open("a") as fh:
        fh.write("".join(f"{TS.format(2 + i)} during outage {i}\n" for i in range(5)))

    # the old connector gave up after one flush timeout (60 s): it must still be retrying at 90 s
    err_path = tmp_path / "follow.stderr"
    with err_path.open("w") as err:
        proc = subprocess.Popen(_cli(*common, "--follow", "--bootstrap", _dead_address()), env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"connect files --follow exited ({proc.returncode}) after "
                            f"{90 - (deadline - time.monotonic()):.0f} s without a broker; stderr:\n"
                            f"{err_path.read_text()[-3000:]}")
            time.sleep(1.0)
        text = err_path.read_text()
        retries = [line for line in text.splitlines() if "retrying in" in line]
        assert retries, f"no retry warning after 90 s without a broker; stderr:\n{text[-3000:]}"
        assert "undelivered" in retries[0] or "failed" in retries[0], retries[0]
        assert cur.read_bytes() == saved, "the cursor moved although nothing was delivered"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)  # a crash during the outage: the cursor must cover it
        proc.wait(timeout=30)

    # the broker answers again: everything after the saved cursor arrives, the earlier lines once
    after = subprocess.run(_cli(*common, "--bootstrap", bootstrap), env=env, capture_output=True, text=True,
                           timeout=60, check=False)
    assert after.returncode == 0 and "published 5 records" in after.stderr, after.stderr
    got = values(consume(kafka_config, topic, 7))
    assert [o["body"] for o in got] == ([f"{TS.format(0)} before 1", f"{TS.format(1)} before 2"]
                                        + [f"{TS.format(2 + i)} during outage {i}" for i in range(5)])
    assert len({o["observation_id"] for o in got}) == 7
    assert CursorStore(cur).load()["files"][str(log)]["line"] == 7
