"""The worker split in two stages on a real broker: ``faultstream worker --stage ingest`` (the
confluent-kafka batch loop, streams/ingest.py) and ``--stage correlate`` (the Faust agents
without it). The verdicts equal replay's, as with the whole worker; bad records are
dead-lettered by the ingest stage; a SIGKILLed ingest stage loses nothing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from transport.kafka_settings import with_partitioner
from tests.streams.test_stream import (  # noqa: F401 -- fixtures
    ROOT,
    SOURCES,
    Worker,
    comparable,
    consume,
    final_for,
    latest_verdicts,
    publish_all,
    replayed,
    standing,
    stream_env,
)


class Stage(Worker):
    """A ``faultstream worker --stage <stage>`` subprocess with its own log file."""

    READY = {"ingest": "[^Ingest]: Ready", "correlate": "[^Worker]: Ready"}

    def __init__(self, stage: str, env: dict[str, str], log: Path, *args: str) -> None:
        super().__init__(env, log, "--stage", stage, *args, ready=(self.READY[stage],))


@pytest.fixture
def stages(stream_env):
    """Start stages of the pipeline of ``stream_env``; all are killed at the end."""
    started: list[Stage] = []

    def start(stage: str, name: str, *args: str, **extra: str) -> Stage:
        proc = Stage(stage, {**stream_env["env"], **extra}, stream_env["tmp"] / f"{name}.log", *args)
        started.append(proc)
        proc.wait_ready()
        return proc

    yield start
    for proc in started:
        proc.stop(signal.SIGKILL)


def test_two_stages_give_the_replay_verdicts(stream_env, stages, kafka_bootstrap, replayed):
    env, prefix = stream_env["env"], stream_env["prefix"]
    stages("correlate", "correlate")
    ingest = stages("ingest", "ingest", "--batch-size", "500")
    expected = publish_all(env, list(replayed), replayed)
    messages = consume(kafka_bootstrap, f"{prefix}.attributions", until=final_for(expected), timeout=150)
    latest = latest_verdicts(messages)
    assert standing(latest) == set(expected)
    for scope, att in expected.items():
        assert comparable(latest[scope]) == comparable(att), scope
        positions = [ref["position"] for item in latest[scope]["evidence"] for ref in item["observations"]]
        assert all(p["topic"] == f"{prefix}.observations" and p["offset"] is not None for p in positions)
    m = ingest.metrics()
    assert m["faultstream_observations_total"] == m["faultstream_observations_processed_total"] > 0
    assert m.get("faultstream_ingest_batch_seconds_count", 0) >= 1


def test_bad_records_are_dead_lettered_by_the_ingest_stage(stream_env, stages, kafka_bootstrap):
    prefix = stream_env["prefix"]
    ingest = stages("ingest", "ingest")
    good = json.loads(subprocess.run(
        [sys.executable, "-c", (
            "from connectors.publish import bundle_records;"
            f"recs,_=bundle_records({str(SOURCES[0])!r});"
            "print(recs[1].model_dump_json())")],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    bad = [
        (b"node-a01", b"{not json", "invalid json"),
        (b"node-a01", json.dumps({**good, "schema_version": 99}).encode(), "schema version"),
        (b"node-a01", json.dumps({**good, "observed_at": "yesterday"}).encode(), "invalid record"),
        (b"node-a01", b"[" * 100_000, "invalid json"),
        (b"node-a01", None, "tombstone"),
    ]
    producer = Producer(with_partitioner({"bootstrap.servers": kafka_bootstrap}))
    for key, value, _ in bad:
        producer.produce(f"{prefix}.observations", key=key, value=value)
    producer.produce(f"{prefix}.observations", key=b"node-a01", value=json.dumps(good).encode())
    assert producer.flush(30) == 0
    letters = consume(kafka_bootstrap, f"{prefix}.deadletter", until=lambda m: len(m) >= len(bad), timeout=60)
    data = [json.loads(m.value()) for m in letters]
    assert sorted(d["reason"].split(":")[0] for d in data) == sorted(r for _, _, r in bad)
    assert {d["source"] for d in data} == {"stage.ingest"}
    assert all(d["position"]["topic"] == f"{prefix}.observations" for d in data)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = ingest.metrics()
        if m.get("faultstream_observations_total", 0) >= len(bad) + 1:
            break
        time.sleep(0.5)
    dead = sum(v for k, v in m.items() if k.startswith("faultstream_dead_letters_total{"))
    assert m["faultstream_observations_total"] == len(bad) + 1
    assert dead == len(bad) and m["faultstream_observations_processed_total"] == 1
    assert ingest.proc.poll() is None


def test_an_ingest_stage_killed_mid_stream_loses_nothing(stream_env, stages, kafka_bootstrap, replayed):
    env, prefix = stream_env["env"], stream_env["prefix"]
    stages("correlate", "correlate")
    first = stages("ingest", "first", "--batch-size", "50")
    bundles = list(replayed)[:12]
    expected = publish_all(env, bundles, replayed)
    time.sleep(0.5)
    first.stop(signal.SIGKILL)  # mid-stream: its last batch produced, maybe not committed
    stages("ingest", "second", "--batch-size", "50")
    messages = consume(kafka_bootstrap, f"{prefix}.attributions", until=final_for(expected), timeout=150)
    latest = latest_verdicts(messages)
    assert standing(latest) == set(expected)
    for scope, att in expected.items():
        assert comparable(latest[scope]) == comparable(att), scope


#: starts ``faultstream worker --stage ingest --parent-pid <its own pid>`` (as a whole worker
#: starts its ingest stage), writes the child's pid to argv[1], then waits on stdin
PARENT = """
import os, subprocess, sys
log = open(sys.argv[2], "ab")
child = subprocess.Popen([sys.executable, "-m", "streams.cli", "worker", "--stage", "ingest", "--web-port",
                          sys.argv[3], "--parent-pid", str(os.getpid())], stdout=log, stderr=subprocess.STDOUT)
open(sys.argv[1], "w").write(str(child.pid))
sys.stdin.read()
"""


def test_an_ingest_stage_whose_worker_died_stops_by_itself(stream_env, tmp_path):
    """The whole worker's ingest child outlives no worker: its parent killed with SIGKILL, the
    child notices (it is re-parented), completes its batch, leaves its group and ends."""
    from tests.streams.test_stream import free_port

    pid_file, log = tmp_path / "child.pid", tmp_path / "child.log"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(pid_file), str(log), str(free_port())],
                              cwd=ROOT, env=stream_env["env"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while not (log.exists() and "[^Ingest]: Ready" in log.read_text(errors="replace")):
            assert parent.poll() is None, f"the parent exited with {parent.returncode}"
            assert time.monotonic() < deadline, f"the ingest stage never got ready:\n{log.read_text()[-2000:]}"
            time.sleep(0.2)
        child = int(pid_file.read_text())
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child}").exists() and "zombie" not in _state(child):
            assert time.monotonic() < deadline, f"the ingest stage {child} still runs 30 s after its worker died"
            time.sleep(0.2)
        text = log.read_text(errors="replace")
        assert f"the worker (process {parent.pid}) ended: stopping" in text
        assert "ingest stage stopped" in text
    finally:
        if parent.poll() is None:
            parent.kill()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].split("\n", 1)[0]
    except (OSError, IndexError):
        return "zombie"
