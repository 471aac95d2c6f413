"""Scaling out: two and three `faultstream worker` processes in one consumer group on the real
local broker, a rebalance while bundles are being published and processed (one worker stopped
with SIGTERM, as Kubernetes stops a pod, and a new one added with an empty data directory, as a
new pod on another node), and the same final verdicts as `faultstream replay`, none lost and
none duplicated.

The workers, the publishing, the replay reference and the comparison are those of
``tests/streams/test_stream.py`` (imported, not copied).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.streams.test_stream import (  # noqa: F401 -- stream_env and replayed are fixtures
    Worker, comparable, consume, final_for, latest_verdicts, publish, replayed, scope_key, standing, stream_env,
)

pytestmark = pytest.mark.kafka


def revisions_by_id(messages: list[Any]) -> dict[str, list[int]]:
    """attribution id -> the revisions on the attributions topic, in topic order per partition
    (tombstones left out)."""
    out: dict[str, list[int]] = {}
    for msg in messages:
        if msg.value() is None:
            continue
        att = json.loads(msg.value())
        out.setdefault(scope_key(att), []).append(att["revision"])
    return out


def run_rebalance(stream_env: dict[str, Any], kafka_bootstrap: str, replayed: dict[Path, list[dict]],
                  members: int, bundles: list[Path]) -> None:
    """Start ``members`` workers in one group, publish a third of ``bundles``, send SIGTERM to
    the first worker and publish the rest while it stops, start a new worker (own data
    directory) as soon as it has gone, then check the attributions topic against replay."""
    tmp = stream_env["tmp"]
    workers = [stream_env["start"](f"w{i}", FAULTSTREAM_DATA_DIR=str(tmp / f"faust-{i}")) for i in range(members)]
    time.sleep(5)  # let the group settle with every member
    expected = {scope_key(att): att for b in bundles for att in replayed[b]}
    first = max(1, len(bundles) // 3)
    published = threading.Event()  # the first third is on the topic
    go_on = threading.Event()  # the rebalance has begun: publish the rest
    errors: list[BaseException] = []

    def publisher() -> None:
        try:
            publish(stream_env["env"], *bundles[:first])
            published.set()
            go_on.wait(120)
            publish(stream_env["env"], *bundles[first:])
        except BaseException as exc:  # noqa: BLE001 -- reported by the main thread
            errors.append(exc)
        finally:
            published.set()

    thread = threading.Thread(target=publisher, daemon=True)
    thread.start()
    assert published.wait(120), "the first third of the bundles was not published in 120 s"
    assert not errors, errors
    # the rebalance while the stream is busy: windows of the published bundles are open and
    # the other bundles are published while the worker stops
    leaving = workers[0]
    leaving.proc.send_signal(signal.SIGTERM)
    go_on.set()
    leaving.proc.wait(timeout=60)
    assert leaving.proc.returncode == 0, f"SIGTERM: exit {leaving.proc.returncode}\n" \
                                         f"{leaving.log.read_text(errors='replace')[-2000:]}"
    added = stream_env["start"]("added", FAULTSTREAM_DATA_DIR=str(tmp / "faust-added"))
    thread.join(300)
    assert not thread.is_alive(), "publishing did not finish in 300 s"
    assert not errors, errors

    messages = consume(kafka_bootstrap, f"{stream_env['prefix']}.attributions", until=final_for(expected), timeout=240)
    latest = latest_verdicts(messages)
    # nothing lost: every replay verdict is on the topic, as replay gives it; nothing extra stands
    assert standing(latest) == set(expected)
    for scope, att in expected.items():
        assert comparable(latest[scope]) == comparable(att), scope
    # nothing duplicated: each verdict's revisions are 1, 2, ... once each, in order
    for scope, revs in revisions_by_id(messages).items():
        assert revs == list(range(1, len(revs) + 1)), (scope, revs)
    # the added worker took over partitions (it reports the lag of each one it holds); the ones
    # that stayed kept working
    held = [k for k in added.metrics() if k.startswith("faultstream_consumer_lag{")]
    assert held, "the added worker holds no partition"
    for w in workers[1:]:
        assert w.proc.poll() is None, w.log.read_text(errors="replace")[-2000:]


def test_two_workers_then_a_rebalance_give_the_replay_verdicts(stream_env, kafka_bootstrap, replayed):
    bundles = sorted(replayed)[0::4]
    run_rebalance(stream_env, kafka_bootstrap, replayed, 2, bundles)


def test_three_workers_then_a_rebalance_give_the_replay_verdicts(stream_env, kafka_bootstrap, replayed):
    bundles = sorted(replayed)[2::4]
    run_rebalance(stream_env, kafka_bootstrap, replayed, 3, bundles)
