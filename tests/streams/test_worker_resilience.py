"""A whole `faultstream worker` under faults and load on a real broker: its ingest child killed
with SIGKILL (the worker restarts it and loses nothing), the provisional revisions of a
two-job leaf-switch failure (coalesced: a few per scope, the first as early as before), and
its memory after bursts of observations (back under a ceiling).

Workers are real subprocesses (``tests/streams/test_stream.py``'s ``Worker``); the broker is
the tests' real one (``tests/kafka_fixtures.py``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.streams.test_stream import (  # noqa: F401 -- stream_env and replayed are fixtures
    EXAMPLES,
    consume,
    final_for,
    latest_verdicts,
    own_cluster,
    publish,
    publish_all,
    replayed,
    scope_key,
    standing,
    comparable,
    stream_env,
)

CHILD = re.compile(r"ingest stage started as process (\d+)")


def ingest_pids(log: Path) -> list[int]:
    """The pids of the ingest children the worker started, in order (from its log)."""
    return [int(pid) for pid in CHILD.findall(log.read_text(errors="replace"))]


def wait_for(what: str, check: Any, timeout: float, log: Path | None = None) -> Any:
    """Poll ``check()`` every 0.2 s until it returns a true value (returned); fail after
    ``timeout`` s naming ``what`` (and the tail of ``log``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log else ""
    pytest.fail(f"{what}: not after {timeout} s\n{tail}")


def test_the_worker_restarts_its_killed_ingest_child_and_loses_nothing(stream_env, kafka_bootstrap, replayed):
    env, prefix = stream_env["env"], stream_env["prefix"]
    worker = stream_env["start"]("w")
    log = worker.log
    first = ingest_pids(log)
    assert len(first) == 1, f"one ingest child at start, the log says {first}"
    bundles = list(replayed)[:12]
    half = len(bundles) // 2
    expected = publish_all(env, bundles[:half], replayed)
    time.sleep(0.5)
    os.kill(first[0], signal.SIGKILL)  # mid-stream: its last batch produced, maybe not committed
    pids = wait_for("a new ingest child", lambda: ingest_pids(log)[1:] or None, 20, log)
    assert pids[0] != first[0]
    expected |= publish_all(env, bundles[half:], replayed)
    messages = consume(kafka_bootstrap, f"{prefix}.attributions", until=final_for(expected), timeout=150)
    assert worker.proc.poll() is None, f"the worker exited with {worker.proc.returncode}"
    latest = latest_verdicts(messages)
    assert standing(latest) == set(expected)
    for scope, att in expected.items():
        assert comparable(latest[scope]) == comparable(att), scope
    metrics = worker.metrics()
    assert metrics.get("faultstream_ingest_restarts_total") == 1.0, \
        {k: v for k, v in metrics.items() if "restart" in k}
    assert "killed by signal 9" in log.read_text(errors="replace")
    assert len(ingest_pids(log)) == 2, "one restart, no more"


LEAF = EXAMPLES / "fabric-leaf-switch-down-two-jobs"


def test_a_leaf_switch_failure_gives_a_few_provisional_revisions_per_scope(stream_env, kafka_bootstrap, tmp_path):
    """The two-job leaf-switch example (``examples/incidents/fabric-leaf-switch-down-two-jobs``):
    at most 5 provisional revisions per scope (there were 49 of one verdict in 3.4 s before
    they were coalesced), the first provisional verdict of each job as early as before (the
    first decisive event emits at once), the finals equal to replay's."""
    from streams.replay import replay_bundle

    env, prefix = stream_env["env"], stream_env["prefix"]
    bundle = own_cluster(LEAF, tmp_path / "bundles")
    expected = {scope_key(a): a for a in (x.model_dump(mode="json") for x in replay_bundle(bundle).attributions)}
    assert {a["scope"]["kind"] for a in expected.values()} >= {"workload", "fabric_port", "incident"}
    stream_env["start"]("w")
    started_ms = time.time() * 1000
    publish(env, bundle)
    published_ms = time.time() * 1000
    messages = consume(kafka_bootstrap, f"{prefix}.attributions", until=final_for(expected), timeout=120)
    latest = latest_verdicts(messages)
    for scope, att in expected.items():
        assert comparable(latest[scope]) == comparable(att), scope
    by_scope: dict[str, list[tuple[float, dict]]] = {}
    for msg in messages:
        if msg.value() is not None:
            att = json.loads(msg.value())
            by_scope.setdefault(scope_key(att), []).append((msg.timestamp()[1], att))
    report = {f"{a[0][1]['scope']['kind']} {a[0][1]['scope']['id']}":
              [(x["revision"], x["status"], round((t - started_ms) / 1000, 2)) for t, x in a]
              for a in by_scope.values()}
    print(f"publish took {(published_ms - started_ms) / 1000:.2f} s; revisions per scope "
          "(revision, status, s after the publish began):", json.dumps(report, indent=1))
    for scope, revisions in by_scope.items():
        provisional = [att for _, att in revisions if att["status"] == "provisional"]
        assert len(provisional) <= 5, f"{scope}: {len(provisional)} provisional revisions: {report}"
        assert [att["revision"] for _, att in revisions] == list(range(1, len(revisions) + 1)), report
    for scope, att in expected.items():
        if att["scope"]["kind"] != "workload":
            continue
        first_t, first = by_scope[scope][0]
        # the first verdict of each job is provisional: it was not held back until the final
        assert first["status"] == "provisional", report
        # and it came while the bundle was still being published or right after (the first
        # decisive event emits at once; the final waits for the 2 s idle timeout)
        final_t = next(t for t, a in by_scope[scope] if a["status"] == "final")
        assert first_t < final_t - 1000, report
