"""No record can wedge faultstream: every field is bounded at the edge (schemas/records.py),
the ClickHouse writer refuses only the bad row (sinks/clickhouse.py), readers of files skip
binary content and cut endless lines (connectors/files.py), and the worker and the verdicts
command fail clearly (streams/app.py, streams/cli.py, streams/settings.py).

The tests marked with a broker start a real Kafka broker (tests/kafka_fixtures.py) and real
`faultstream worker` processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from connectors.cursor import CursorStore
from connectors.files import MAX_LINE_BYTES, FilesConnector
from schemas.records import (
    TIME_NS_MAX,
    Attribution,
    Event,
    EvidenceRef,
    GpuRef,
    Observation,
    Position,
    Source,
    canonical_json,
)
from sinks.clickhouse import TABLES, ClickHouseSink
from streams.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_796_001_664_123_000_000  # 2026-11-30 01:21:04.123 UTC, ns


def observation(**update: Any) -> Observation:
    data = dict(
        source=Source(connector="files", instance="node-a01"), kind="log_line", observed_at=T0,
        time_source="line", time_quality=0.9, host="node-a01", cluster="c1", workload_id="job-1001",
        format="dmesg_t", body="NVRM: Xid (PCI:0000:9c:00): 79, pid=4118, GPU has fallen off the bus.",
        position=Position(file="logs/node-a01/dmesg.log", line=1412),
    )
    data.update(update)
    return Observation(**data).with_id()


def xid_event(xid: int, **update: Any) -> Event:
    obs = observation()
    data = dict(
        type="gpu.xid", at=T0, time_quality=0.9, host="node-a01", cluster="c1", workload_id="job-1001",
        gpu=GpuRef(pci_bus_id="0000:9c:00"), attributes={"xid": xid}, rule="gpu.xid@1",
        evidence=[EvidenceRef(observation_id=obs.observation_id, position=obs.position)],
    )
    data.update(update)
    return Event(**data).with_id()


# -- bounds at the edge -----------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [
    ("rank", 2**31), ("rank", -(2**31) - 1), ("observed_at", TIME_NS_MAX + 1),
    ("observed_at", -(2**63)), ("gpu", {"index": 2**40}), ("position", {"offset": 2**63}),
    ("attributes", {"x": 2**64}), ("attributes", {"deep": json.loads("[" * 40 + "]" * 40)}),
    ("schema_version", 70_000),
])
def test_out_of_range_fields_are_rejected_with_the_field_named(field: str, value: Any) -> None:
    data = json.loads(canonical_json(observation()))
    data[field] = value
    with pytest.raises(ValidationError) as info:
        Observation.model_validate_json(json.dumps(data))
    assert field in str(info.value)


def test_in_range_extremes_are_accepted() -> None:
    data = json.loads(canonical_json(observation()))
    del data["observed_at_utc"]  # the time alone: its twin is filled from it
    data.update(rank=2**31 - 1, observed_at=TIME_NS_MAX, attributes={"n": 2**63 - 1, "d": json.loads("[" * 30 + "]" * 30)})
    obs = Observation.model_validate_json(json.dumps(data))
    assert obs.rank == 2**31 - 1 and obs.observed_at == TIME_NS_MAX


def test_attribution_counters_are_bounded() -> None:
    from tests.schemas.test_schema_files import sample_attribution

    data = json.loads(canonical_json(sample_attribution()))
    for field, value in (("revision", 2**32), ("decided_at", 2**64), ("culprits", {"ranks": [2**31]})):
        bad = {**data, field: value}
        with pytest.raises(ValidationError, match=field):
            Attribution.model_validate(bad)


# -- the ClickHouse writer refuses only the bad row -------------------------------------------


@pytest.fixture
def sink(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    s = ClickHouseSink(f"chdb://{tmp_path_factory.getbasetemp() / 'chdb-poison'}",
                       database=f"p_{request.node.name.split('[')[0][-20:]}_{os.getpid()}")
    yield s
    s.close()


def test_xid_above_int32_is_stored_with_a_null_xid_column(sink: ClickHouseSink) -> None:
    big, ok = xid_event(3_000_000_000), xid_event(79)
    assert sink.write_events([big, ok], on_reject=lambda r, why: pytest.fail(why)) == 2
    rows = dict(sink.client.query(f"SELECT event_id, xid FROM {sink.database}.events FINAL").result_rows)
    assert rows == {big.event_id: None, ok.event_id: 79}
    stored = {e.event_id: e for e in sink.fetch("events")}
    assert stored[big.event_id].attributes["xid"] == 3_000_000_000  # the record keeps it


def test_a_row_out_of_its_column_range_is_rejected_and_the_rest_stored(sink: ClickHouseSink) -> None:
    good = xid_event(79)
    bad = Event.model_construct(**{**xid_event(31).__dict__, "rank": 2**40})  # bypasses validation
    rejected: list[tuple[Any, str]] = []
    assert sink.write_events([bad, good], on_reject=lambda r, why: rejected.append((r, why))) == 1
    assert [r.event_id for r, _ in rejected] == [bad.event_id]
    assert "column rank" in rejected[0][1]
    assert [e.event_id for e in sink.fetch("events")] == [good.event_id]


def test_a_refused_insert_is_bisected_to_the_bad_row(sink: ClickHouseSink, monkeypatch) -> None:
    events = [xid_event(x) for x in range(20, 36)]
    poison = events[5].event_id
    spec = TABLES["events"]
    row = spec.row

    def bad_row(e: Event, record: str) -> list[Any]:
        out = row(e, record)
        if e.event_id == poison:
            out[spec.columns.index("host")] = 12345  # a string column gets an int: the insert fails
        return out

    monkeypatch.setitem(TABLES, "events", spec.__class__(**{**spec.__dict__, "row": bad_row}))
    rejected: list[str] = []
    assert sink.write_events(events, on_reject=lambda r, why: rejected.append(r.event_id)) == 15
    assert rejected == [poison]
    assert sorted(e.event_id for e in sink.fetch("events")) == sorted(e.event_id for e in events if e.event_id != poison)


def test_without_on_reject_a_bad_row_still_raises(sink: ClickHouseSink) -> None:
    from sinks.clickhouse import SinkError

    bad = Event.model_construct(**{**xid_event(31).__dict__, "rank": 2**40})
    with pytest.raises(SinkError, match="column rank") as info:
        sink.write_events([bad])
    assert info.value.transient is False


# -- files: binary content and endless lines --------------------------------------------------


def test_binary_file_is_reported_not_read_as_lines(tmp_path: Path) -> None:
    binary = tmp_path / "core.log"
    binary.write_bytes(bytes(range(256)) * 4000)  # 1 MB of every byte value, NULs included
    text = tmp_path / "ok.log"
    text.write_text("2026-11-30T01:20:00.000Z start\n")
    conn = FilesConnector([binary, text], host="node-a01", cursor=CursorStore(tmp_path / "c.json"))
    records = conn.poll()
    assert [r.body for r in records] == ["2026-11-30T01:20:00.000Z start"]
    cov = {c.source: c for c in conn.coverage()}
    entry = cov[f"file:{binary}"]
    assert entry.status == "failed" and entry.records == 0
    assert "binary content" in entry.detail
    # the cursor moves past it: appending text to a binary file reads nothing more of it
    assert conn.checkpoint()["files"][str(binary)]["offset"] == binary.stat().st_size


def test_a_200mb_line_without_newline_is_not_held_in_memory(tmp_path: Path) -> None:
    log = tmp_path / "runaway.log"
    with log.open("wb") as fh:
        fh.write(b"2026-11-30T01:20:00.000Z before\n2026-11-30T01:20:01.000Z ")
        block = b"A" * (16 << 20)
        for _ in range(12):
            fh.write(block)  # ~200 MB, no newline
    conn = FilesConnector([log], host="node-a01", cursor=CursorStore(tmp_path / "c.json"), follow=True,
                          idle_s=0.0)
    seen = []
    for _ in range(20):
        seen += conn.poll()
        tail = conn._tails[0]
        assert len(tail.partial) <= MAX_LINE_BYTES  # the rest is skipped, not buffered
        if not conn.pending:
            break
    assert [r.body for r in seen] == ["2026-11-30T01:20:00.000Z before"]
    with log.open("ab") as fh:
        fh.write(b"B\n2026-11-30T01:20:02.000Z after\n")
    conn.follow = False
    seen = conn.poll()
    assert [r.body.split("\n")[0][:40] for r in seen][1:] == ["2026-11-30T01:20:02.000Z after"]
    cut = seen[0]
    assert cut.attributes["truncated"] == 12 * (16 << 20) + len("2026-11-30T01:20:01.000Z B")  # the whole line
    assert "[faultstream: cut" in cut.body
    detail = conn.coverage()[0].detail
    assert f"1 lines longer than {MAX_LINE_BYTES} bytes cut" in detail
    # the cursor is after the whole line: the offsets count the skipped bytes
    assert conn.checkpoint()["files"][str(log)]["offset"] == log.stat().st_size


# -- settings and the command line ------------------------------------------------------------


@pytest.mark.parametrize("field, value", [("allowed_lateness_s", -5), ("idle_timeout_s", -1),
                                          ("fabric_flush_s", -0.1), ("partitions", 0), ("web_port", 70000)])
def test_worker_settings_reject_negative_and_out_of_range_values(field: str, value: Any) -> None:
    with pytest.raises(ValidationError, match=field):
        WorkerSettings(**{field: value})


def faultstream(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_worker_rejects_negative_lateness_with_a_message(tmp_path: Path) -> None:
    out = faultstream("worker", "--lateness", "-5", env={"FAULTSTREAM_DATA_DIR": str(tmp_path)})
    assert out.returncode == 2
    assert "allowed_lateness_s" in out.stderr and "greater than or equal to 0" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_verdicts_without_a_broker_exits_non_zero_with_a_message() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    out = faultstream("verdicts", "--timeout", "3", env={"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"})
    assert out.returncode == 2, out
    assert f"error: Kafka at 127.0.0.1:{port}: no broker answered within 3 s" in out.stderr
    assert "Traceback" not in out.stderr
    assert time.monotonic() - started < 30


@pytest.mark.slow
def test_one_data_dir_one_worker(tmp_path: Path) -> None:
    from streams.app import DataDirLocked, lock_data_dir

    held = lock_data_dir(tmp_path / "w")
    try:
        with pytest.raises(DataDirLocked, match=rf"in use by another worker \(pid {os.getpid()}\)"):
            lock_data_dir(tmp_path / "w")
        # another process gets the same clear error from the command line
        out = faultstream("worker", env={"FAULTSTREAM_DATA_DIR": str(tmp_path), "FAULTSTREAM_APP_ID": "w",
                                         "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9"})
        assert out.returncode == 2, out
        assert f"error: the data directory {tmp_path / 'w'} is in use by another worker (pid {os.getpid()})" in out.stderr
        assert "Traceback" not in out.stderr
    finally:
        held.close()
    lock_data_dir(tmp_path / "w").close()  # released with its file: the next worker gets it


# -- through a real broker and real workers ---------------------------------------------------

from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: E402,F401
from tests.streams.test_stream import (  # noqa: E402,F401 -- fixtures and helpers of the stream tests
    SOURCES,
    consume,
    latest_verdicts,
    own_cluster,
    publish,
    stream_env,
)


def produce(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes | None]]) -> None:
    from confluent_kafka import Producer

    from transport.kafka_settings import with_partitioner

    producer = Producer(with_partitioner({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000_000}))
    for key, value in messages:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def wait_metric(worker: Any, predicate: Any, timeout: float = 60, what: str = "") -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        m = worker.metrics()
        if predicate(m):
            return m
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not reached after {timeout} s; metrics: "
                        f"{ {k: v for k, v in m.items() if k.startswith('faultstream_')} }")
        time.sleep(0.5)


def test_poison_records_never_wedge_the_clickhouse_writers(stream_env, kafka_bootstrap):
    from tests.schemas.test_schema_files import sample_attribution

    prefix = stream_env["prefix"]
    ch_dir = stream_env["tmp"] / "clickhouse"
    worker = stream_env["start"](FAULTSTREAM_CLICKHOUSE=f"chdb://{ch_dir}", FAULTSTREAM_SHUTDOWN_TIMEOUT_S="20")
    big, good = xid_event(3_000_000_000), xid_event(79)
    too_big_rank = json.loads(canonical_json(xid_event(31)))
    too_big_rank["rank"] = 2**40
    produce(kafka_bootstrap, f"{prefix}.events", [
        (b"node-a01", canonical_json(big).encode()),        # valid: its xid column is NULL
        (b"node-a01", json.dumps(too_big_rank).encode()),   # invalid: dead-lettered
        (b"node-a01", None),                                # tombstone: dead-lettered
        (b"node-a01", b"{not json"),                        # dead-lettered
        (b"node-a01", canonical_json(good).encode()),
    ])
    att = sample_attribution()
    produce(kafka_bootstrap, f"{prefix}.attributions", [
        (b"job-1001", None), (b"job-1001", b"[" * 100_000), (b"job-1001", canonical_json(att).encode()),
    ])
    m = wait_metric(worker, lambda m: m.get('faultstream_clickhouse_rows_total{table="events"}', 0) >= 2
                    and m.get('faultstream_clickhouse_rows_total{table="attributions"}', 0) >= 1,
                    what="the valid events and verdict stored")
    assert m['faultstream_clickhouse_skipped_total{model="Event"}'] == 3
    # the attributions tombstone is the contract's end of a withdrawn verdict: not skipped
    assert m['faultstream_clickhouse_skipped_total{model="Attribution"}'] == 1
    letters = consume(kafka_bootstrap, f"{prefix}.deadletter",
                      until=lambda ms: sum(json.loads(x.value())["source"] == "sink.clickhouse.events" for x in ms) >= 3,
                      timeout=60)
    reasons = sorted(json.loads(x.value())["reason"].split(":")[0] for x in letters
                     if json.loads(x.value())["source"] == "sink.clickhouse.events")
    assert reasons == ["invalid event"] * 3
    # idle: no lag on any topic an agent reads, and no changelog listed as lagging
    time.sleep(6)
    lag = {k: v for k, v in worker.metrics().items() if k.startswith("faultstream_consumer_lag{")}
    assert lag and not [k for k in lag if "changelog" in k]
    assert all(v == 0 for v in lag.values()), lag
    started = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    worker.proc.wait(timeout=40)
    assert time.monotonic() - started < 40
    with ClickHouseSink(f"chdb://{ch_dir}") as sink:
        rows = dict(sink.client.query(f"SELECT event_id, xid FROM {sink.database}.events FINAL").result_rows)
        assert rows == {big.event_id: None, good.event_id: 79}
        assert [a.attribution_id for a in sink.fetch("attributions")] == [att.attribution_id]


def test_sigterm_is_bounded_while_clickhouse_is_unreachable(stream_env, kafka_bootstrap):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prefix = stream_env["prefix"]
    worker = stream_env["start"](FAULTSTREAM_CLICKHOUSE=f"http://127.0.0.1:{port}", FAULTSTREAM_SHUTDOWN_TIMEOUT_S="15")
    produce(kafka_bootstrap, f"{prefix}.events", [(b"node-a01", canonical_json(xid_event(79)).encode())])
    deadline = time.monotonic() + 60
    while "ClickHouse write failed" not in worker.log.read_text(errors="replace"):
        assert time.monotonic() < deadline, worker.log.read_text(errors="replace")[-3000:]
        time.sleep(0.5)
    started = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    worker.proc.wait(timeout=45)  # raises TimeoutExpired when SIGTERM is ignored
    assert time.monotonic() - started < 30
    assert "exiting without committing" in worker.log.read_text(errors="replace")


def test_deep_nesting_is_dead_lettered_and_counts_reconcile(stream_env, kafka_bootstrap):
    prefix = stream_env["prefix"]
    worker = stream_env["start"]()
    deep = [(b"node-a01", b"[" * 100_000), (b"node-a01", b'{"a":' * 50_000 + b"1" + b"}" * 50_000),
            (b"node-a01", json.dumps({**json.loads(canonical_json(observation())),
                                      "attributes": {"x": json.loads("[" * 200 + "]" * 200)}}).encode()),
            (b"node-a01", None)]
    produce(kafka_bootstrap, f"{prefix}.observations", [*deep, (b"node-a01", canonical_json(observation()).encode())])
    m = wait_metric(worker, lambda m: m.get("faultstream_observations_total", 0) >= len(deep) + 1,
                    what="every observation read")
    dead = sum(v for k, v in m.items() if k.startswith("faultstream_dead_letters_total{"))
    processed = m["faultstream_observations_processed_total"]
    assert (m["faultstream_observations_total"], processed, dead) == (len(deep) + 1, 1, len(deep))
    letters = consume(kafka_bootstrap, f"{prefix}.deadletter", until=lambda ms: len(ms) >= len(deep), timeout=60)
    reasons = sorted(json.loads(x.value())["reason"][:30] for x in letters)
    assert reasons[0].startswith("invalid json: nested too deep") and reasons[1].startswith("invalid json: nested too deep")
    assert any(r.startswith("invalid record") for r in reasons) and any(r.startswith("tombstone") for r in reasons)
    assert worker.proc.poll() is None


def test_resent_scheduler_record_changes_no_final_verdict(stream_env, kafka_bootstrap, tmp_path):
    from connectors.publish import bundle_records

    prefix = stream_env["prefix"]
    stream_env["start"]()
    bundle = own_cluster(next(b for b in SOURCES if "rc15" in b.name), tmp_path)
    records, _ = bundle_records(bundle)
    produce(kafka_bootstrap, f"{prefix}.observations",
            [(r.host.encode(), canonical_json(r).encode()) for r in records])

    def final(ms: list[Any]) -> bool:
        return any(v["scope"]["kind"] == "workload" and v["status"] == "final" for v in latest_verdicts(ms).values())

    before = consume(kafka_bootstrap, f"{prefix}.attributions", until=final, timeout=120)
    workload = next(r for r in records if r.format == "workload_yaml")
    produce(kafka_bootstrap, f"{prefix}.observations", [(workload.host.encode(), canonical_json(workload).encode())] * 2)
    time.sleep(8)  # more than the idle timeout (2 s) and a fabric flush
    after = consume(kafka_bootstrap, f"{prefix}.attributions", until=lambda ms: len(ms) >= len(before), timeout=60)
    assert len(after) == len(before)  # no new revision of anything
    assert latest_verdicts(after) == latest_verdicts(before)
    job = [v for v in latest_verdicts(after).values() if v["scope"]["kind"] == "workload"]
    assert job and all(v["status"] == "final" for v in job)


def test_verdicts_skips_bad_records_and_passes_over_tombstones(stream_env, kafka_bootstrap):
    from tests.schemas.test_schema_files import sample_attribution

    env, prefix = stream_env["env"], stream_env["prefix"]
    from schemas.topics import catalogue, create_topics

    create_topics({"bootstrap.servers": kafka_bootstrap}, [catalogue(prefix)["attributions"]])
    att = sample_attribution()
    produce(kafka_bootstrap, f"{prefix}.attributions", [
        (b"job-1001", None), (b"job-1001", b"{not json"), (b"job-1001", canonical_json(att).encode()),
        (b"job-1001", b'{"schema_version": 1}'),
    ])
    out = faultstream("verdicts", "--format", "json", "--idle-timeout", "4", env=env)
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["attribution_id"] for line in out.stdout.splitlines()] == [att.attribution_id]
    # the tombstone is the contract's end of a withdrawn verdict: not a bad record
    assert out.stderr.count("warning: skipped") == 2
    assert "2 records skipped: not verdicts" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_rule_event_with_a_value_out_of_range_keeps_the_rest_and_says_why() -> None:
    """An XID code beyond Int64 in a driver line: the event is still the XID the line states,
    its out-of-range value kept as text and the reason in ``attributes.invalid``; the worker
    never crashes on it."""
    from correlators.rules import load_rule_pack
    from schemas.records import Observation, Source

    line = ("[Tue Nov 30 01:21:06 2026] NVRM: Xid (PCI:0000:9c:00): 99999999999999999999999, pid=123, "
            "name=python3, Ch 00000010")
    obs = Observation(source=Source(connector="test", instance="t"), kind="log_line", observed_at=1,
                      time_source="line", time_quality=1.0, host="node-a01", cluster="c1", format="x",
                      body=line).with_id()
    (event,) = load_rule_pack().extract(obs)
    assert event.type == "gpu.xid"
    assert event.attributes["xid"] == "99999999999999999999999"
    assert "attributes" in event.attributes["invalid"]
    assert event.attributes["pid"] == 123
