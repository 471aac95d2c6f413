"""ClickHouseSink against the real embedded engine (chDB through clickhouse-connect).

chDB hosts one engine path per process, so this module opens ONE chDB directory (module
fixture) and gives every test its own database on it; every sink is closed, so the engine is
released for other test modules when this one ends.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError, ProgrammingError

from schemas.records import (
    Affected,
    Alternative,
    Attribution,
    Cost,
    CoverageEntry,
    Culprits,
    Event,
    EvidenceItem,
    EvidenceRef,
    GpuRef,
    GuardResult,
    Observation,
    Position,
    RemediationAction,
    RemediationTarget,
    RootCause,
    Scope,
    Source,
    Window,
    canonical_json,
    content_id,
)
from sinks.clickhouse import ClickHouseSink, SinkError, _is_transient
from sinks.deadletter import DeadLetter

T0 = 1_796_001_664_123_000_000  # 2026-11-30 01:21:04.123 UTC, ns
SEC = 1_000_000_000

_db_counter = itertools.count()


@pytest.fixture(scope="module")
def chdb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chdb")


@pytest.fixture
def sink(chdb_dir: Path, request: pytest.FixtureRequest):
    s = ClickHouseSink(f"chdb://{chdb_dir}", database=f"t{next(_db_counter)}")
    yield s
    s.close()


# --------------------------------------------------------------------------------------------
# realistic records: XID 79 on node-a01 GPU 0000:9c:00, watchdog timeouts on ranks 1-15


def xid_observation() -> Observation:
    return Observation(
        source=Source(connector="files", instance="examples/incidents/xid79"),
        kind="log_line",
        observed_at=T0,
        time_source="line",
        time_quality=0.9,
        host="node-a01",
        cluster="c1",
        workload_id="job-1001",
        gpu=GpuRef(pci_bus_id="0000:9c:00"),
        format="dmesg_t",
        body="[Mon Nov 30 01:21:04 2026] NVRM: Xid (PCI:0000:9c:00): 79, pid=4118, "
        "name=python, GPU has fallen off the bus.",
        position=Position(file="logs/node-a01/dmesg.log", line=1412),
    ).with_id()


def watchdog_observation(rank: int) -> Observation:
    host = "node-a01" if rank < 8 else "node-a02"
    return Observation(
        source=Source(connector="files", instance="examples/incidents/xid79"),
        kind="log_line",
        observed_at=T0 + 600 * SEC + rank * 1_000_000,
        time_source="line",
        time_quality=1.0,
        host=host,
        cluster="c1",
        workload_id="job-1001",
        rank=rank,
        format="glog",
        body=f"[rank{rank}]:[E1130 01:31:04.{rank:03d}000 550 ProcessGroupNCCL.cpp:632] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4711, "
        "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.",
        position=Position(file=f"logs/{host}/rank{rank}.log", line=88),
    ).with_id()


def xid_event(obs: Observation) -> Event:
    return Event(
        type="gpu.xid",
        at=obs.observed_at,
        time_quality=0.9,
        host="node-a01",
        cluster="c1",
        workload_id="job-1001",
        gpu=GpuRef(pci_bus_id="0000:9c:00"),
        attributes={"xid": 79, "mnemonic": "GPU_HAS_FALLEN_OFF_THE_BUS", "pid": 4118},
        rule="gpu.xid@1",
        evidence=[EvidenceRef(observation_id=obs.observation_id, position=obs.position)],
    ).with_id()


def watchdog_event(obs: Observation) -> Event:
    return Event(
        type="nccl.watchdog_timeout",
        at=obs.observed_at,
        began_at=obs.observed_at - 600_017_000_000,
        host=obs.host,
        cluster="c1",
        workload_id="job-1001",
        rank=obs.rank,
        attributes={"seq_num": 4711, "op_type": "ALLREDUCE", "timeout_ms": 600000,
                    "ran_for_ms": 600017},
        rule="nccl.watchdog_timeout@2",
        evidence=[EvidenceRef(observation_id=obs.observation_id, position=obs.position)],
    ).with_id()


def attribution(revision: int = 1, confidence: float = 0.86) -> Attribution:
    xid_obs = xid_observation()
    xid = xid_event(xid_obs)
    wd = [watchdog_event(watchdog_observation(r)) for r in range(1, 16)]
    evidence = [
        EvidenceItem(at=xid.at, event_id=xid.event_id, type=xid.type, role="cause",
                     host="node-a01", summary="XID 79 GPU fell off the bus on 0000:9c:00",
                     observations=xid.evidence)
    ] + [
        EvidenceItem(at=e.effective_at, event_id=e.event_id, type=e.type, role="symptom",
                     host=e.host, rank=e.rank,
                     summary="watchdog timeout ALLREDUCE SeqNum=4711 after 600017 ms",
                     observations=e.evidence)
        for e in wd
    ]
    return Attribution(
        attribution_id=content_id("att", "workload", "c1", "job-1001"),
        revision=revision,
        scope=Scope(kind="workload", id="job-1001", cluster="c1"),
        window=Window(start=T0 - 80 * SEC, end=T0 + 616 * SEC),
        outcome="failed",
        domain="gpu_hardware",
        root_cause=RootCause(code="gpu.xid.79", text="GPU 0000:9c:00 on node-a01 fell off the bus",
                             event_id=xid.event_id),
        culprits=Culprits(hosts=["node-a01"], ranks=[0], gpus=[GpuRef(index=0, pci_bus_id="0000:9c:00")]),
        affected=Affected(hosts=["node-a01", "node-a02"], ranks=list(range(1, 16)),
                          workloads=["job-1001"]),
        symptoms=[e.event_id for e in wd],
        evidence=evidence,
        confidence=confidence,
        quality="definitive" if revision > 1 else "probable",
        alternatives=[Alternative(code="fabric.link_down", domain="fabric",
                                  text="IB link flap on leaf-02/Eth1/12", score=0.21,
                                  hosts=["node-a02"])],
        coverage=[
            CoverageEntry(source="logs/node-a01", status="present", records=5210, events=3),
            CoverageEntry(source="metrics/node-a01", status="failed", detail="truncated CSV"),
        ],
        ruleset_version="rules-2026.11.1",
        engine_version="0.1.0",
        decided_at=T0 + 616 * SEC,
    )


def remediation(state: str = "proposed", sequence: int = 1) -> RemediationAction:
    att = attribution()
    return RemediationAction(
        action_id=content_id("act", att.attribution_id, "node-a01", "cordon"),
        attribution_id=att.attribution_id,
        target=RemediationTarget(host="node-a01", gpu=GpuRef(pci_bus_id="0000:9c:00")),
        action="cordon",
        mode="needs_approval",
        policy_id="gpu-hardware-default@1",
        guards=[GuardResult(guard="circuit_breaker", passed=True, detail="1/64 cordoned"),
                GuardResult(guard="cooldown", passed=False, detail="node-a01 cordoned 2h ago")],
        state=state,
        sequence=sequence,
        reason="XID 79 on 0000:9c:00",
        created_at=T0 + 616 * SEC,
    )


# --------------------------------------------------------------------------------------------


def test_write_twice_no_duplicates_plain_or_final(sink: ClickHouseSink) -> None:
    obs = [xid_observation()] + [watchdog_observation(r) for r in range(1, 16)]
    events = [xid_event(obs[0])] + [watchdog_event(o) for o in obs[1:]]
    assert sink.write_observations(obs) == 16
    assert sink.write_events(events) == 16
    assert sink.write_attributions([attribution()]) == 1
    assert sink.write_remediations([remediation()]) == 1

    # rerun of the same replay: same batches again
    assert sink.write_observations(obs) == 16
    assert sink.write_events(events) == 16
    assert sink.write_attributions([attribution()]) == 1
    assert sink.write_remediations([remediation()]) == 1

    for table, n in (("observations", 16), ("events", 16), ("attributions", 1), ("remediations", 1)):
        assert sink.count(table, final=True) == n, table
        # the insert deduplication token held: not even a physical duplicate row
        assert sink.count(table, final=False) == n, table


def test_batch_order_and_in_batch_duplicates_do_not_matter(sink: ClickHouseSink) -> None:
    obs = [watchdog_observation(r) for r in range(16)]
    assert sink.write_observations(obs + obs[:3]) == 16
    assert sink.write_observations(list(reversed(obs))) == 16  # same set => same token
    assert sink.count("observations", final=False) == 16


def test_regrouped_batches_collapse_under_final(sink: ClickHouseSink) -> None:
    obs = [watchdog_observation(r) for r in range(16)]
    sink.write_observations(obs)
    sink.write_observations(obs[:8])  # a different batch: its token differs
    assert sink.count("observations", final=True) == 16
    assert sink.count("observations", final=False) == 24


def test_latest_revision_wins(sink: ClickHouseSink) -> None:
    r1 = attribution(revision=1, confidence=0.62)
    r2 = attribution(revision=2, confidence=0.93)
    assert r1.attribution_id == r2.attribution_id
    sink.write_attributions([r2])
    sink.write_attributions([r1])  # a late, older revision arrives after the newer one
    assert sink.count("attributions", final=True) == 1
    assert sink.count("attributions", final=False) == 2
    (back,) = sink.fetch("attributions", [r1.attribution_id])
    assert back.revision == 2
    assert back.confidence == 0.93
    assert back.quality == "definitive"
    row = sink.client.query(
        f"SELECT revision, quality, confidence FROM {sink.database}.attributions FINAL"
    ).result_rows
    assert row == [(2, "definitive", 0.93)]
    # every revision stays in attribution_revisions, also after a merge collapses attributions
    sink.client.command(f"OPTIMIZE TABLE {sink.database}.attributions FINAL")
    sink.client.command(f"OPTIMIZE TABLE {sink.database}.attribution_revisions FINAL")
    assert sink.count("attributions", final=False) == 1
    assert [(a.revision, a.confidence) for a in sink.fetch("attribution_revisions")] == [(1, 0.62), (2, 0.93)]
    first = sink.client.query(
        f"SELECT argMin(confidence, revision) FROM {sink.database}.attribution_revisions FINAL"
    ).result_rows
    assert first == [(0.62,)]


def test_remediation_later_state_wins(sink: ClickHouseSink) -> None:
    sink.write_remediations([remediation("done", sequence=4)])
    sink.write_remediations([remediation("proposed", sequence=1)])  # replayed proposal after completion
    (back,) = sink.fetch("remediations")
    assert back.state == "done"
    rows = sink.client.query(
        f"SELECT state, target_host, target_gpu, guards_failed FROM {sink.database}.remediations FINAL"
    ).result_rows
    assert rows == [("done", "node-a01", "0000:9c:00", ["cooldown"])]


def test_round_trip_record_json_and_typed_columns(sink: ClickHouseSink) -> None:
    att = attribution(revision=1)
    xid_obs = xid_observation()
    ev = xid_event(xid_obs)
    sink.write_attributions([att])
    sink.write_observations([xid_obs])
    sink.write_events([ev])

    raw = sink.client.query(
        f"SELECT record FROM {sink.database}.attributions FINAL WHERE attribution_id = %(id)s",
        parameters={"id": att.attribution_id},
    ).result_rows[0][0]
    assert raw == canonical_json(att)
    assert Attribution.model_validate_json(raw) == att
    assert sink.fetch("observations") == [xid_obs]
    assert sink.fetch("events", [ev.event_id]) == [ev]

    (row,) = sink.client.query(
        f"""SELECT scope_kind, scope_id, domain, root_cause_code, culprit_hosts, culprit_ranks,
                   culprit_gpus, symptom_count, quality, alternative_codes, coverage_problems,
                   toUnixTimestamp64Nano(decided_at), toString(decided_at), toTypeName(decided_at)
            FROM {sink.database}.attributions FINAL"""
    ).result_rows
    assert row == (
        "workload", "job-1001", "gpu_hardware", "gpu.xid.79", ["node-a01"], [0],
        ["0000:9c:00"], 15, "probable", ["fabric.link_down"], ["metrics/node-a01:failed"],
        T0 + 616 * SEC, "2026-11-30 01:31:20.123000000", "DateTime64(9, 'UTC')",
    )
    (erow,) = sink.client.query(
        f"""SELECT type, host, xid, gpu_pci_bus_id, rank, toUnixTimestamp64Nano(at), rule,
                   observation_ids FROM {sink.database}.events FINAL"""
    ).result_rows
    assert erow == ("gpu.xid", "node-a01", 79, "0000:9c:00", None, T0, "gpu.xid@1",
                    [xid_obs.observation_id])
    (orow,) = sink.client.query(
        f"""SELECT host, kind, toString(observed_at), position_file, position_line
            FROM {sink.database}.observations"""
    ).result_rows
    assert orow == ("node-a01", "log_line", "2026-11-30 01:21:04.123000000",
                    "logs/node-a01/dmesg.log", 1412)


def test_watchdog_began_at_is_back_dated(sink: ClickHouseSink) -> None:
    ev = watchdog_event(watchdog_observation(7))
    sink.write_events([ev])
    (row,) = sink.client.query(
        f"""SELECT rank, toUnixTimestamp64Nano(began_at), toUnixTimestamp64Nano(effective_at),
                   xid FROM {sink.database}.events"""
    ).result_rows
    assert row == (7, ev.at - 600_017_000_000, ev.at - 600_017_000_000, None)


def test_missing_ids_are_filled_from_content(sink: ClickHouseSink) -> None:
    obs = xid_observation()
    bare = obs.model_copy(update={"observation_id": ""})
    assert sink.write_observations([bare]) == 1
    assert bare.observation_id == ""  # the caller's object is not mutated
    assert sink.fetch("observations") == [obs]


def test_dead_letters_keep_original_bytes(sink: ClickHouseSink) -> None:
    original = b'{"host": "node-a01", "body": "\xff\xfe truncated'
    dl = DeadLetter(
        source="connector.files:examples/incidents/xid79",
        reason="not UTF-8 at byte 32",
        original=original,
        position=Position(file="logs/node-a01/kern.log", line=17, topic="faultstream.observations",
                          partition=3, offset=9912),
        at_ns=T0,
    ).with_id()
    assert dl.dead_letter_id.startswith("dl-")
    assert sink.write_dead_letters([dl]) == 1
    # same bad input rejected again later: same id, same row
    again = dl.model_copy(update={"at_ns": T0 + 5 * SEC, "dead_letter_id": ""}).with_id()
    assert again.dead_letter_id == dl.dead_letter_id
    sink.write_dead_letters([again])
    assert sink.count("dead_letters", final=True) == 1
    rows = sink.client.query(
        f"SELECT original, reason, topic, partition, offset FROM {sink.database}.dead_letters FINAL",
        query_formats={"String": "bytes"},
    ).result_rows
    assert rows[0][0] == original
    assert rows[0][3:] == (3, 9912)
    (back,) = sink.fetch("dead_letters")
    assert back.original == original
    assert back.at_ns == T0 + 5 * SEC  # the last write wins for equal keys


def test_a_tombstones_dead_letter_is_stored(sink: ClickHouseSink) -> None:
    """A record without a value (a tombstone on the observations topic) is dead-lettered with
    ``original`` None: its row is stored too, with empty original bytes."""
    dl = DeadLetter(source="stage.ingest", reason="tombstone: no value", original=None, original_key=b"node-a01",
                    position=Position(topic="faultstream.observations", partition=1, offset=77), at_ns=T0).with_id()
    assert sink.write_dead_letters([dl]) == 1
    rows = sink.client.query(f"SELECT original, reason, offset FROM {sink.database}.dead_letters FINAL",
                             query_formats={"String": "bytes"}).result_rows
    assert rows == [(b"", b"tombstone: no value", 77)]  # every String column read as bytes here
    (back,) = sink.fetch("dead_letters")
    assert back.original is None and back.reason == "tombstone: no value"


def test_databases_on_one_path_are_isolated(chdb_dir: Path) -> None:
    a = ClickHouseSink(f"chdb://{chdb_dir}", database="iso_a")
    b = ClickHouseSink(f"chdb://{chdb_dir}/", database="iso_b")  # same dir, other spelling
    try:
        a.write_attributions([attribution()])
        assert a.count("attributions") == 1
        assert b.count("attributions") == 0
        assert a.client is b.client  # one shared engine client per path
    finally:
        a.close()
        b.close()
    with pytest.raises(SinkError, match="closed"):
        a.count("attributions")


def test_second_chdb_path_is_refused_while_first_is_open(chdb_dir: Path, tmp_path: Path) -> None:
    held = ClickHouseSink(f"chdb://{chdb_dir}", database="held")
    try:
        with pytest.raises(SinkError, match="one engine per process"):
            ClickHouseSink(f"chdb://{tmp_path / 'other'}")
    finally:
        held.close()


def test_engine_moves_to_another_path_once_all_sinks_close(
    chdb_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Only meaningful when no other sink of this module is open; the fixture sinks are closed
    # after each test, so this test opens a second path and then comes back.
    other = tmp_path / "elsewhere"
    with ClickHouseSink(f"chdb://{other}", database="moved") as s:
        s.write_attributions([attribution()])
        assert s.count("attributions") == 1
    with ClickHouseSink(f"chdb://{chdb_dir}", database="back") as s:
        assert s.count("attributions") == 0
    with ClickHouseSink(f"chdb://{other}", database="moved") as s:
        assert s.count("attributions") == 1  # data persisted across engine restarts


def test_relative_chdb_url_resolves_against_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with ClickHouseSink("chdb://.state/clickhouse", database="rel") as s:
        assert s.count("events") == 0
    assert (tmp_path / ".state" / "clickhouse").is_dir()


@pytest.mark.parametrize(
    ("url", "database", "message"),
    [
        ("ftp://node-a01/x", "faultstream", "unsupported ClickHouse URL"),
        ("clickhouse.local:8123", "faultstream", "unsupported ClickHouse URL"),
        ("chdb:///tmp/x?udf_path=/y", "faultstream", "takes no query"),
        ("http://default:secret@127.0.0.1:8123/faultstream", "faultstream", "database="),
        ("chdb://memory", "bad-name; DROP", "bad database name"),
        ("chdb://", "faultstream", "names no directory"),
        ("http://[::1", "faultstream", "malformed ClickHouse URL"),
    ],
)
def test_bad_urls(url: str, database: str, message: str) -> None:
    with pytest.raises(SinkError, match=message) as info:
        ClickHouseSink(url, database=database)
    assert "secret" not in str(info.value)


def test_unreachable_server_is_retried_then_reported() -> None:
    # port 9 (discard) on loopback: nothing listens, the connection is refused at once
    with pytest.raises(SinkError, match=r"cannot connect to ClickHouse at http://default:\*\*\*@127\.0\.0\.1:9 after 3 attempts") as info:
        ClickHouseSink("http://default:secret@127.0.0.1:9", retry_attempts=3, retry_max_wait_s=0.05,
                       connect_timeout_s=1)
    assert "secret" not in str(info.value)


def test_https_is_not_downgraded_to_plain_http() -> None:
    with pytest.raises(SinkError) as info:
        ClickHouseSink("https://127.0.0.1:9", retry_attempts=1, connect_timeout_s=1)
    assert "HTTPSConnectionPool" in str(info.value)


def test_transient_classification() -> None:
    assert _is_transient(OperationalError("connection refused"))
    assert _is_transient(DatabaseError("Code: 252. Too many parts", code=252))
    assert _is_transient(DatabaseError("Code: 209. Timeout", code=209))
    assert not _is_transient(DatabaseError("Code: 60. Unknown table", code=60))
    assert not _is_transient(ProgrammingError("bad setting"))
    assert not _is_transient(ValueError("x"))


def test_wrong_record_type_and_unknown_table(sink: ClickHouseSink) -> None:
    with pytest.raises(TypeError, match="attribution_revisions takes Attribution records, got Event"):
        sink.write_attributions([xid_event(xid_observation())])  # type: ignore[list-item]
    with pytest.raises(SinkError, match="unknown table"):
        sink.count("verdicts")
    assert sink.write_events([]) == 0


def test_ddl_is_idempotent(chdb_dir: Path) -> None:
    with ClickHouseSink(f"chdb://{chdb_dir}", database="ddl_twice") as s1:
        s1.write_observations([xid_observation()])
    with ClickHouseSink(f"chdb://{chdb_dir}", database="ddl_twice") as s2:
        assert s2.count("observations") == 1
        tables = [r[0] for r in s2.client.query(
            "SELECT name FROM system.tables WHERE database = 'ddl_twice' ORDER BY name"
        ).result_rows]
        assert tables == ["attribution_revisions", "attributions", "certifications", "dead_letters", "events",
                          "observations", "remediation_transitions", "remediations"]
        engines = {r[0] for r in s2.client.query(
            "SELECT engine FROM system.tables WHERE database = 'ddl_twice'"
        ).result_rows}
        assert engines == {"ReplacingMergeTree"}


def test_a_store_made_before_the_goodput_columns_takes_them_on_open(chdb_dir: Path) -> None:
    """A store whose ``attributions`` and ``attribution_revisions`` lack the columns added since
    (the verdict's goodput cost) gains them when a sink opens it, and stores verdicts again."""
    db = "before_goodput"
    new_columns = ("goodput_lost_fraction", "gpu_hours_lost_per_hour")
    with ClickHouseSink(f"chdb://{chdb_dir}", database=db) as old:
        for table in ("attributions", "attribution_revisions"):
            old.client.command(f"ALTER TABLE {db}.{table} " + ", ".join(f"DROP COLUMN {c}" for c in new_columns))
    degraded = attribution().model_copy(update={"cost": Cost(
        lost_from=T0, lost_until=T0 + 3600 * SEC, lost_s=3600.0, gpus=16, nodes=2, verdict_after_s=30.0,
        jobs_hit=1, nodes_hit=2, goodput_lost_fraction=0.25, gpu_hours_lost_per_hour=4.0)})
    with ClickHouseSink(f"chdb://{chdb_dir}", database=db) as sink:
        assert sink.write_attributions([degraded]) == 1
        for table in ("attributions", "attribution_revisions"):
            columns = [r[0] for r in sink.client.query(
                f"SELECT name FROM system.columns WHERE database = '{db}' AND table = '{table}' ORDER BY position"
            ).result_rows]
            assert columns[columns.index("nodes_hit") + 1:columns.index("nodes_hit") + 3] == list(new_columns)
            row = sink.client.query(f"SELECT goodput_lost_fraction, gpu_hours_lost_per_hour FROM {db}.{table}").result_rows
            assert row == [(0.25, 4.0)]


def test_observation_records_one_per_id_any_of_and_pushed_down_prefilter(sink: ClickHouseSink) -> None:
    xid = xid_observation()
    watchdogs = [watchdog_observation(r) for r in (3, 9)]
    noise = Observation(
        source=Source(connector="files", instance="examples/incidents/xid79"), kind="log_line",
        observed_at=T0 + SEC, time_source="line", time_quality=1.0, host="node-a02", cluster="c1",
        workload_id="job-1001", format="glog", body="I1130 01:21:05.000000 550 train.py:212] step 7 loss 2.1",
        position=Position(file="logs/node-a02/train.log", line=7)).with_id()
    sink.write_observations([xid, *watchdogs, noise])
    # the same observation again as the stream delivered it (its transport position set):
    # a second physical row of the id
    again = xid.model_copy(update={"position": Position(file=xid.position.file, line=xid.position.line,
                                                        topic="faultstream.observations", partition=0, offset=5)})
    sink.write_observations([again])
    assert sink.count("observations", final=False) == 5
    ids = lambda rows: [Observation.model_validate_json(r).observation_id for r in rows]  # noqa: E731
    everything = ids(sink.observation_records())
    assert everything == sorted(everything, key=lambda i: {o.observation_id: o.observed_at for o in
                                                           [xid, *watchdogs, noise]}[i])
    assert sorted(everything) == sorted(o.observation_id for o in [xid, *watchdogs, noise])  # one per id
    # selections OR-ed, each AND-ed: node-a01's rows, or node-a02's after the noise line
    got = ids(sink.observation_records(any_of=[{"hosts": ["node-a01"]},
                                               {"hosts": ["node-a02"], "start_ns": T0 + 2 * SEC}]))
    assert got == [xid.observation_id, watchdogs[0].observation_id, watchdogs[1].observation_id]
    assert sink.observation_records(any_of=[]) == [] and sink.observation_records(any_of=[{"hosts": []}]) == []
    # the prefilter on the server: the noise line holds no literal, the watchdog lines hold "Watchdog caught"
    got = ids(sink.observation_records(body_any=["Watchdog caught", "a(b"]))
    assert got == [w.observation_id for w in watchdogs]
    got = ids(sink.observation_records(body_any=["fallen off the bus."]))
    assert got == [xid.observation_id]  # '.' is a literal dot, not any character
    with pytest.raises(ValueError, match="unknown observation filter"):
        sink.observation_records(any_of=[{"host": "node-a01"}])
