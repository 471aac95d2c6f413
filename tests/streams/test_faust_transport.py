"""The worker's Faust transport: its consumer is built with the configured fetch wait, not
Faust's fixed 1.5 s (streams/faust_transport.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from streams.app import create_app
from streams.faust_transport import FETCH_MAX_WAIT_MS, ConsumerThread, Transport
from streams.settings import WorkerSettings
from transport.kafka_settings import KafkaSettings


def worker_consumer(tmp_path: Path, **settings):
    """The aiokafka consumer the worker's Faust app would start (built, never started)."""
    async def build():
        app = create_app(WorkerSettings(data_dir=tmp_path, remediation=False, **settings),
                         KafkaSettings(bootstrap_servers="127.0.0.1:1"))
        thread = app.consumer._thread
        assert isinstance(app.transport, Transport) and isinstance(thread, ConsumerThread)
        return thread._create_worker_consumer(app.transport)
    return asyncio.run(build())


def test_the_consumer_waits_the_configured_time_not_faust_s(tmp_path: Path) -> None:
    assert worker_consumer(tmp_path / "a")._fetch_max_wait_ms == FETCH_MAX_WAIT_MS == 50
    assert worker_consumer(tmp_path / "b", fetch_max_wait_ms=250)._fetch_max_wait_ms == 250


def test_a_jump_is_committed_past_only_in_topics_with_holes(tmp_path: Path) -> None:
    """Faust's gaps (offsets it jumped over, then committed as if processed) are kept for
    topics whose offsets may have holes (compacted: the topology topic) and not for the
    internal topics, whose offsets are consecutive: there a jump is records left out."""
    from faust.types import TP

    async def gaps() -> dict[str, list[tuple[int, int]]]:
        app = create_app(WorkerSettings(data_dir=tmp_path, remediation=False, app_id="fs-t"),
                         KafkaSettings(bootstrap_servers="127.0.0.1:1"), stage="correlate")
        assert app.faultstream_consecutive_topics == {"fs-t-by-workload", "fs-t-by-host", "fs-t-by-fabric"}
        out = {}
        for topic in ("fs-t-by-workload", "fs-t-by-host", "fs-t-by-fabric", "faultstream.topology"):
            tp = TP(topic, 0)
            await app.consumer._add_gap(tp, 5, 9)
            out[topic] = sorted((iv.begin, iv.end) for iv in app.consumer._gap[tp])
        return out

    assert asyncio.run(gaps()) == {"fs-t-by-workload": [], "fs-t-by-host": [], "fs-t-by-fabric": [],
                                   "faultstream.topology": [(5, 10)]}


def test_a_record_missing_right_after_the_commit_holds_the_commit_back(tmp_path: Path) -> None:
    """Committed offset 683 is the next record to process. With 684 and 685 processed and 683
    not, Faust 0.15 would commit 686 (it takes the committed offset for the last one
    processed); in the internal topics nothing is committed until 683 is processed. The
    compacted topology topic keeps Faust's rule."""
    from faust.types import TP

    async def offsets() -> dict[str, list]:
        app = create_app(WorkerSettings(data_dir=tmp_path, remediation=False, app_id="fs-t"),
                         KafkaSettings(bootstrap_servers="127.0.0.1:1"), stage="correlate")
        consumer = app.consumer
        out: dict[str, list] = {}
        for topic in ("fs-t-by-workload", "faultstream.topology"):
            tp = TP(topic, 2)
            consumer._committed_offset[tp] = 683
            got = []
            for processed in ([684, 685], [683]):  # 683 comes late
                for offset in processed:
                    consumer._acked[tp].append(offset)
                    consumer._acked_index[tp].add(offset)
                got.append(consumer._new_offset(tp))
            out[topic] = got
        return out

    # Faust's rule: 686 at once (683 passed), then 684 for the late 683 (below what was committed)
    assert asyncio.run(offsets()) == {"fs-t-by-workload": [None, 686], "faultstream.topology": [686, 684]}
