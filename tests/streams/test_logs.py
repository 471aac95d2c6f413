"""Structured logs (streams/logs.py): JSON lines with ts/level/logger/message and extra fields,
a plain text format, and `faultstream worker --log-format json` on a real broker and on an
unreachable one."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest

from streams.logs import LogFormat, configure_logging, logging_config

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"ts", "level", "logger", "message"}


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """configure_logging replaces the root handlers (pytest's capture handlers included): put
    them back after the test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for h in root.handlers:
            if h not in handlers:
                h.close()
        root.handlers[:] = handlers
        root.setLevel(level)


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects of ``text``, one per line; librdkafka's own ``%N|...`` lines (written by
    the C library straight to stderr, not through Python logging) are left out. Fails on any
    other line that is not a JSON object."""
    out = []
    for line in text.splitlines():
        if not line.strip() or re.match(r"^%\d\|", line):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON log line: {line!r}")
        assert isinstance(obj, dict), line
        out.append(obj)
    return out


def test_json_lines_have_ts_level_logger_message_and_extras(capsys, restore_logging) -> None:
    configure_logging("json", "info")
    log = logging.getLogger("faultstream.test")
    before = datetime.now(timezone.utc)
    log.info("verdict for %s", "job-1001", extra={"attribution_id": "att-1", "revision": 2,
                                                   "hosts": ["node-a01"]})
    log.debug("not shown at info")
    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError:
        log.error("agent failed", exc_info=True)
    after = datetime.now(timezone.utc)

    lines = json_lines(capsys.readouterr().err)
    assert len(lines) == 2
    first, second = lines
    assert KEYS <= set(first)
    assert first["level"] == "INFO"
    assert first["logger"] == "faultstream.test"
    assert first["message"] == "verdict for job-1001"
    assert first["attribution_id"] == "att-1" and first["revision"] == 2
    assert first["hosts"] == ["node-a01"]
    ts = datetime.fromisoformat(first["ts"])
    assert ts.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= ts <= after
    assert second["level"] == "ERROR" and second["message"] == "agent failed"
    assert "ZeroDivisionError: boom" in second["exc_info"]


def test_text_format_and_levels(capsys, restore_logging) -> None:
    configure_logging(LogFormat.text, "warning")
    log = logging.getLogger("faultstream.test")
    log.info("hidden")
    log.warning("window %s closed late", "job-7")
    err = capsys.readouterr().err
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARNING faultstream\.test: "
                        r"window job-7 closed late\n", err), err


def test_bad_format_or_level_raise() -> None:
    with pytest.raises(ValueError):
        logging_config("xml", "info")
    with pytest.raises(ValueError):
        logging_config("json", "chatty")
    assert logging_config("json", 10)["root"]["level"] == logging.DEBUG


def test_worker_json_logs_on_a_real_broker(kafka_bootstrap, kafka_topic_factory, tmp_path) -> None:
    prefix = kafka_topic_factory.prefix
    app_id = f"{prefix}-worker"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "FAULTSTREAM_TOPIC_PREFIX": prefix, "FAULTSTREAM_APP_ID": app_id,
           "FAULTSTREAM_PARTITIONS": "1", "FAULTSTREAM_DATA_DIR": str(tmp_path / "faust"),
           "FAULTSTREAM_CLICKHOUSE": f"chdb://{tmp_path / 'ch'}"}
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker", "--log-format", "json",
             "--web-port", str(port)],
            cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while "[^Worker]: Ready" not in log_path.read_text(errors="replace"):
            assert proc.poll() is None, f"worker exited {proc.returncode}:\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"worker not ready:\n{log_path.read_text()[-3000:]}"
            time.sleep(0.3)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for suffix in ("observations", "events", "attributions", "remediations", "deadletter",
                       "topology", "certifications"):
            kafka_topic_factory.track(f"{prefix}.{suffix}")
        for internal in ("by-workload", "by-host", "host_meta-changelog", "host_events-changelog", "window_meta-changelog", "window_events-changelog", "window_facts-changelog",
                         "__assignor-__leader"):
            kafka_topic_factory.track(f"{app_id}-{internal}")

    lines = json_lines(log_path.read_text(errors="replace"))  # every line is JSON
    assert len(lines) > 10
    assert all(KEYS <= set(line) for line in lines)
    start = lines[0]
    assert start["message"] == "worker starting" and start["logger"] == "faultstream.worker"
    assert start["app_id"] == app_id and start["bootstrap"] == kafka_bootstrap
    ready = [line for line in lines if line["message"] == "[^Worker]: Ready"]
    assert len(ready) == 1 and ready[0]["level"] == "INFO" and ready[0]["logger"] == "faust.worker"
    assert {line["logger"].split(".")[0] for line in lines} >= {"faultstream", "faust"}
    for line in lines:
        assert datetime.fromisoformat(line["ts"]).utcoffset() == timedelta(0)


@pytest.mark.slow
def test_worker_json_logs_then_a_clean_error_when_the_broker_is_unreachable(tmp_path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": dead, "FAULTSTREAM_APP_ID": "logs-unreachable",
           "FAULTSTREAM_DATA_DIR": str(tmp_path / "faust")}
    run = subprocess.run([sys.executable, "-m", "streams.cli", "worker", "--log-format", "json"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: Kafka at {dead}:")
    logged = json_lines("\n".join(line for line in run.stderr.splitlines()
                                  if line.startswith("{")))
    assert [(x["level"], x["logger"], x["message"]) for x in logged] == [
        ("INFO", "faultstream.worker", "worker starting"),
        ("WARNING", "faultstream.remediation", "remediation: no command keys (FAULTSTREAM_COMMAND_KEYS / "
                                               "FAULTSTREAM_COMMAND_KEY_FILE): every remediation command will "
                                               "be dead-lettered"),
        ("INFO", "faultstream.remediation", "remediation: policy faultstream-default@2026.12-1, "
                                            "executors dry-run for every cluster")]
    assert logged[0]["bootstrap"] == dead


@pytest.mark.slow
def test_worker_rejects_an_unknown_log_format() -> None:
    run = subprocess.run([sys.executable, "-m", "streams.cli", "worker", "--log-format", "xml"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "error:" in run.stderr and "xml" in run.stderr
