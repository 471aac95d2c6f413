"""`faultstream connect slurm` against the real single-node Slurm (``slurm_cluster``) and the real
Kafka broker (``kafka_bootstrap``): a failing job's transitions reach the topic exactly once,
and a re-run from the saved cursor publishes none of them again."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import Consumer

from connectors.registry import connectors
from connectors.slurm import SCHEDULER_HOST, connect_slurm_cli
from tests.connectors.test_slurm_connector import sbatch, wait_terminal

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streams.cli", "connect", "slurm", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def consume(bootstrap: str, topic: str, until: Callable[[list[dict]], bool] = lambda _: True,
            timeout: float = 60.0, settle: float = 1.5) -> list[dict]:
    """Every message of ``topic`` from the beginning as ``{"key", "value"}`` (value decoded
    from JSON): reads until ``until(messages)`` holds, then ``settle`` more seconds to catch
    extras. Raises AssertionError when ``until`` does not hold within ``timeout`` seconds."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[dict] = []
    deadline, settle_until = time.monotonic() + timeout, None
    try:
        while True:
            msg = c.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append({"key": msg.key().decode(), "value": json.loads(msg.value())})
            now = time.monotonic()
            if settle_until is None and until(out):
                settle_until = now + settle
            if settle_until is not None and now >= settle_until:
                return out
            if now > deadline:
                raise AssertionError(f"{topic}: condition not met in {timeout:g} s; got "
                                     f"{[(m['value']['attributes'].get('job_id'), m['value']['attributes'].get('state')) for m in out]}")
    finally:
        c.close()


def of_job(messages: list[dict], job: str) -> list[tuple[str, str]]:
    """(state, key) of the job-level observations of ``job``, in topic order."""
    return [(m["value"]["attributes"]["state"], m["key"]) for m in messages
            if m["value"]["attributes"].get("job_id") == job]


def published(stderr: str) -> int:
    m = re.search(r"published (\d+) records of Slurm cluster", stderr)
    assert m, stderr
    return int(m[1])


def test_connect_slurm_is_registered() -> None:
    assert connectors()["slurm"] is connect_slurm_cli


def test_connect_slurm_once_publishes_a_failed_job_once_and_never_again(
        slurm_cluster, kafka_bootstrap, kafka_topic_factory, tmp_path: Path) -> None:
    topic = kafka_topic_factory("obs")
    cursor = tmp_path / "cursors" / "slurm.json"
    args = (slurm_cluster.name, "--once", "--cursor", str(cursor), "--bootstrap", kafka_bootstrap,
            "--topic", topic)
    job = sbatch("--wrap", "exit 3")
    wait_terminal(job)

    # sacct can list the end a little later than the state: run --once until the job's final
    # state was published (each run commits its cursor, so nothing is sent twice)
    deadline = time.monotonic() + 60
    total = 0
    while True:
        run = cli(*args)
        assert run.returncode == 0, run.stderr
        total += published(run.stderr)
        msgs = consume(kafka_bootstrap, topic, until=lambda m: len(m) >= total, timeout=30, settle=0.5)
        if ("FAILED", SCHEDULER_HOST) in of_job(msgs, job) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert cursor.exists()
    assert len(msgs) == total > 0

    assert of_job(msgs, job) == [("PENDING", SCHEDULER_HOST), ("RUNNING", SCHEDULER_HOST),
                                 ("FAILED", SCHEDULER_HOST)]
    final = next(m["value"] for m in msgs if m["value"]["attributes"].get("job_id") == job
                 and m["value"]["attributes"]["state"] == "FAILED")
    assert final["attributes"]["exit_code"] == 3 and final["attributes"]["exit_status"] == "3:0"
    assert final["workload_id"] == job and final["cluster"] == slurm_cluster.name
    assert final["source"] == {"connector": "slurm", "instance": slurm_cluster.name}
    assert final["kind"] == "scheduler_event" and final["host"] == SCHEDULER_HOST
    assert final["body"].split()[0] == job and "FAILED" in final["body"].split()
    batch = [m for m in msgs if m["value"]["attributes"].get("job_id") == f"{job}.batch"
             and m["value"]["attributes"]["state"] == "FAILED"]
    assert len(batch) == 1 and batch[0]["key"] == slurm_cluster.node  # key = the step's host
    ids = [m["value"]["observation_id"] for m in msgs]
    assert len(ids) == len(set(ids))

    # a re-run from the saved cursor: nothing already published comes again
    again = cli(*args)
    assert again.returncode == 0, again.stderr
    n_new = published(again.stderr)
    after = consume(kafka_bootstrap, topic, until=lambda m: len(m) >= total + n_new, timeout=30)
    assert len(after) == total + n_new
    assert of_job(after, job) == of_job(msgs, job)
    ids = [m["value"]["observation_id"] for m in after]
    assert len(ids) == len(set(ids)), "an observation was published twice"


def test_connect_slurm_polls_until_stopped(slurm_cluster, kafka_bootstrap, kafka_topic_factory,
                                           tmp_path: Path) -> None:
    topic = kafka_topic_factory("obs")
    cursor = tmp_path / "slurm.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "connect", "slurm", slurm_cluster.name,
         "--follow", "--interval", "0.5", "--cursor", str(cursor), "--bootstrap", kafka_bootstrap, "--topic", topic],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        job = sbatch("--wrap", "sleep 1; exit 7")
        msgs = consume(kafka_bootstrap, topic, timeout=90, settle=2.0,
                       until=lambda m: ("FAILED", SCHEDULER_HOST) in of_job(m, job))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    # PENDING/RUNNING may fall in one poll with the end: each state still comes exactly once
    assert of_job(msgs, job) == [("PENDING", SCHEDULER_HOST), ("RUNNING", SCHEDULER_HOST),
                                 ("FAILED", SCHEDULER_HOST)]
    final = [m["value"] for m in msgs if m["value"]["attributes"].get("job_id") == job][-1]
    assert final["attributes"]["exit_code"] == 7
    n = published(err)  # everything the connector sent before it stopped, each once
    everything = consume(kafka_bootstrap, topic, until=lambda m: len(m) >= n, timeout=30)
    assert len(everything) == n >= len(msgs)
    ids = [m["value"]["observation_id"] for m in everything]
    assert len(ids) == len(set(ids))
    saved: dict[str, Any] = json.loads(cursor.read_text())
    assert saved["cluster"] == slurm_cluster.name
    assert saved["jobs"][f"job:{job}"]["state"] == "FAILED"
