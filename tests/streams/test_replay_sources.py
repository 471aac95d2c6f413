"""Replay from Kafka and from ClickHouse gives the bundle's verdicts; ``replay --diff`` against
stored verdicts; ``bundle export`` round trip (streams/sources.py, streams/export.py).

Kafka tests use the real broker of tests/kafka_fixtures.py; ClickHouse tests an embedded chDB
engine in a temporary directory (one path at a time per process: every sink is closed after
use, the CLI closes its own)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from connectors.publish import bundle_records, publish_bundle
from schemas.records import Attribution, Observation, Position, Source, canonical_json
from sinks.clickhouse import ClickHouseSink
from transport.kafka import RecordProducer
from transport.kafka_settings import KafkaSettings, with_partitioner
from streams.cli import app
from streams.export import export_bundle
from streams.replay import replay_bundle
from streams.sources import diff_verdicts, parse_time, verdict_key
from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: F401

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"
TWO_JOBS = EXAMPLES / "fabric-port-flap-two-jobs"  # job-2401 (workload.yaml) + job-2417, one port fault
XID43 = EXAMPLES / "h200-xid43-device-assert"  # job-1002, cluster c1, with nvidia-smi -q telemetry
HISTORY = EXAMPLES / "history-xid31-repeated-across-jobs"  # job-4102 + the earlier job-4101 on node-a01
BUNDLES = {"job-2401": TWO_JOBS, "job-1002": XID43, "job-4102": HISTORY}


def canonical(verdicts) -> list[str]:
    return sorted(canonical_json(a) for a in verdicts)


def lines(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.strip())


def keys(verdicts) -> list[tuple[str, str]]:
    return sorted((f"{a.scope.kind}:{a.scope.id}", canonical_json(verdict_key(a))) for a in verdicts)


@pytest.fixture(scope="module")
def expected() -> dict[str, list[str]]:
    """Workload id -> the canonical verdicts of replaying its bundle."""
    return {wid: canonical(replay_bundle(path).attributions) for wid, path in BUNDLES.items()}


def run(*args: str):
    return CliRunner().invoke(app, list(args))


# -- no service needed -------------------------------------------------------------------------


def test_parse_time_is_iso_8601_utc() -> None:
    assert parse_time("2026-11-30T01:00Z") == 1_796_000_400_000_000_000
    assert parse_time("2026-11-30T02:00:00+01:00") == parse_time("2026-11-30T01:00Z")
    assert parse_time("2026-11-30 01:00") == parse_time("2026-11-30T01:00Z")  # no zone: UTC
    for bad in ("yesterday", "1764464400", ""):
        with pytest.raises(ValueError, match="ISO 8601"):
            parse_time(bad)
    with pytest.raises(ValueError) as info:
        parse_time("garbage")
    assert str(info.value) == "'garbage' is not an ISO 8601 date-time (e.g. 2026-11-30T01:00Z)"
    assert parse_time("2262-04-11T00:00Z") == 9_223_286_400_000_000_000
    for far in ("9999-12-31T23:59:59Z", "1600-01-01"):
        with pytest.raises(ValueError, match="outside the times a nanosecond clock holds"):
            parse_time(far)


@pytest.mark.slow
def test_unreachable_broker_is_a_clear_error_not_a_hang() -> None:
    started = time.monotonic()
    result = run("replay", "--from-kafka", "--bootstrap", "127.0.0.1:1", "--timeout", "1",
                 "--since", "2026-11-30T01:00Z")
    assert result.exit_code == 2, result.output
    assert "Kafka at 127.0.0.1:1 did not answer within 1 s" in result.stderr
    assert "Traceback" not in result.output
    assert time.monotonic() - started < 20


def test_one_source_only() -> None:
    result = run("replay", str(XID43), "--from-clickhouse")
    assert result.exit_code == 2
    assert "exactly one source" in result.stderr


def test_export_keeps_task_pids_read_from_scheduler_tables(tmp_path: Path) -> None:
    """The bundle's scheduler/<host>/ listpids table is not exported as a file; the task pids
    it gave the workload record are, in workload.yaml, so the exported bundle still names the
    rank of the pid the XID names."""
    from streams.export import export_bundle

    source = EXAMPLES / "slurm-listpids-xid31-pid-rank"
    observations, _ = bundle_records(source)
    export_bundle(observations, "job-3301", tmp_path / "out")
    text = (tmp_path / "out" / "workload.yaml").read_text()
    assert "task_pids:" in text and not (tmp_path / "out" / "scheduler").exists()
    [verdict] = replay_bundle(tmp_path / "out").attributions
    assert verdict.culprits.ranks == [3] and verdict.root_cause.code == "app.cuda.illegal_address"
    assert keys([verdict]) == keys(replay_bundle(source).attributions)


def test_diff_compares_what_a_verdict_says() -> None:
    before = replay_bundle(TWO_JOBS).attributions
    after = [a.model_copy(deep=True) for a in before]
    after[0].revision = 7  # revisions and decision times are not compared
    after[0].decided_at += 1
    after[1].root_cause.code = "gpu.xid.79"
    diff = diff_verdicts(after[:-1], before[1:] + [])
    assert diff.count("changed") == 1 and diff.count("new") == 1 and diff.count("gone") == 1
    assert diff.summary() == f"{len(before) - 3} same, 1 changed, 1 new, 1 gone"
    changed = next(c for c in diff.changes if c.status == "changed")
    assert changed.fields == ("root_cause",)
    assert f"root_cause: {before[1].root_cause.code} -> gpu.xid.79" in "\n".join(changed.lines())


def test_export_keeps_paths_inside_the_bundle(tmp_path: Path) -> None:
    records, _ = bundle_records(XID43)
    spec = next(o for o in records if o.format == "workload_yaml")
    evil = Observation(source=Source(connector="files", instance="x"), kind="log_line", observed_at=spec.observed_at,
                       time_source="line", time_quality=1.0, host="../node-a01", cluster="c1",
                       body="kernel: NVRM: Xid (PCI:0000:9c:00): 43, pid=1", position=Position(file="../../etc/passwd", line=2)).with_id()
    report = export_bundle([spec, evil], "job-1002", tmp_path / "out")
    assert report.files == ["logs/node-a01/passwd", "workload.yaml"]
    assert (tmp_path / "out" / "logs" / "node-a01" / "passwd").read_text() == "\n" + evil.body + "\n"
    assert not (tmp_path / "etc").exists()


# -- ClickHouse ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A chDB directory holding the observations of the three bundles (as the worker stores
    what it consumes), plus one row whose record is not an Observation."""
    url = f"chdb://{tmp_path_factory.mktemp('replay-sources')}"
    with ClickHouseSink(url) as sink:
        for path in BUNDLES.values():
            sink.write_observations(bundle_records(path)[0])
        t = replay_bundle(XID43).attribution.window.start + 1_000_000_000
        sink.client.insert(f"{sink.database}.observations",
                           [["obs-broken", 1, "log_line", t, "line", 1.0, "node-a01", "c1", "files", "x", "unknown",
                             '{"kind": "log_line", "host": "node-a01"}']],
                           column_names=["observation_id", "schema_version", "kind", "observed_at", "time_source",
                                         "time_quality", "host", "cluster", "source_connector", "source_instance",
                                         "format", "record"])
    return url


@pytest.mark.parametrize("workload", sorted(BUNDLES))
def test_replay_from_clickhouse_equals_the_bundle(store: str, expected, workload: str) -> None:
    result = run("replay", "--from-clickhouse", "--clickhouse", store, "--workload", workload, "--json")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == expected[workload]
    if workload == "job-1002":  # the broken row lies in its window: reported, not fatal
        assert "1 invalid and skipped (first: observations row: " in result.stderr
    else:
        assert "invalid" not in result.stderr


def test_replay_from_clickhouse_by_cluster_and_range(store: str, expected) -> None:
    # the fabric bundle is a cluster of its own: the whole cluster is the bundle
    result = run("replay", "--from-clickhouse", "--clickhouse", store, "--cluster", "fabric-port-flap-two-jobs", "--json")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == expected["job-2401"]
    # a range of c1 around the history bundle's jobs only
    result = run("replay", "--from-clickhouse", "--clickhouse", store, "--cluster", "c1",
                 "--since", "2026-11-21T00:00Z", "--until", "2026-11-22T00:00Z", "--json")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == expected["job-4102"]


def test_unknown_workload_is_a_clear_error(store: str) -> None:
    result = run("replay", "--from-clickhouse", "--clickhouse", store, "--workload", "job-0")
    assert result.exit_code == 2
    assert "no workload record (scheduler_event, format workload_yaml) for job-0" in result.stderr


def test_bundle_export_round_trips(store: str, expected, tmp_path: Path) -> None:
    out = tmp_path / "two-jobs"
    result = run("bundle", "export", "job-2401", "--clickhouse", store, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert (out / "workload.yaml").read_text() == (TWO_JOBS / "workload.yaml").read_text()
    assert (out / "workloads" / "job-2417.yaml").read_text() == (TWO_JOBS / "workloads" / "job-2417.yaml").read_text()
    assert (out / "topology.yaml").read_text() == (TWO_JOBS / "topology.yaml").read_text()
    assert (out / "fabric" / "leaf-02" / "syslog").read_text() == (TWO_JOBS / "fabric" / "leaf-02" / "syslog").read_text()
    # byte-identical verdicts: the same records at the same lines give the same ids
    assert canonical(replay_bundle(out).attributions) == expected["job-2401"]
    # a second export into the same directory is refused
    again = run("bundle", "export", "job-2401", "--clickhouse", store, "--out", str(out))
    assert again.exit_code == 2 and "not an empty directory" in again.stderr


def test_bundle_export_without_telemetry_and_of_a_second_job(store: str, tmp_path: Path) -> None:
    # telemetry is not written (reported); the verdict still says the same
    out = tmp_path / "xid43"
    result = run("bundle", "export", "job-1002", "--clickhouse", store, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "not written: 1 telemetry" in result.stderr
    assert keys(replay_bundle(out).attributions) == keys(replay_bundle(XID43).attributions)
    # the earlier job of the history bundle becomes workload.yaml of its own bundle
    out = tmp_path / "job-4101"
    result = run("bundle", "export", "job-4101", "--clickhouse", store, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert (out / "workload.yaml").read_text() == (HISTORY / "workloads" / "job-4101.yaml").read_text()
    source = run("replay", "--from-clickhouse", "--clickhouse", store, "--workload", "job-4101", "--json")
    assert keys(replay_bundle(out).attributions) == keys(
        Attribution.model_validate_json(line) for line in lines(source.stdout))


@pytest.mark.slow
def test_diff_against_stored_verdicts(tmp_path: Path, store: str) -> None:
    url = f"chdb://{tmp_path / 'diff'}"
    with ClickHouseSink(url) as sink:
        sink.write_observations(bundle_records(TWO_JOBS)[0])
        stored = replay_bundle(TWO_JOBS).attributions
        sink.write_attributions(stored)
    result = run("replay", "--from-clickhouse", "--clickhouse", url, "--workload", "job-2401", "--diff")
    assert result.exit_code == 0, result.output
    assert f"{len(stored)} same, 0 changed, 0 new, 0 gone" in result.stdout
    # an earlier rule pack said something else about job-2417 (a later revision of it)
    old = next(a for a in stored if a.scope.id == "job-2417").model_copy(deep=True)
    old.revision += 1
    old.root_cause.code = "gpu.xid.79"
    old.quality = "probable"
    with ClickHouseSink(url) as sink:
        sink.write_attributions([old])
    for args in (["--from-clickhouse", "--workload", "job-2401"], [str(TWO_JOBS)]):
        result = run("replay", *args, "--clickhouse", url, "--diff")
        assert result.exit_code == 1, result.output
        assert f"changed workload:job-2417 {old.attribution_id}" in result.stdout
        assert "root_cause: gpu.xid.79 -> fabric.port.flapping" in result.stdout
        assert "quality: probable -> definitive" in result.stdout
        assert f"{len(stored) - 1} same, 1 changed, 0 new, 0 gone" in result.stdout
    # --diff never stores: the tampered verdict is still the latest
    with ClickHouseSink(url) as sink:
        assert sink.fetch("attributions", [old.attribution_id])[0].root_cause.code == "gpu.xid.79"


# -- Kafka ---------------------------------------------------------------------------------------


def _observations_topic(config: dict, factory) -> tuple[str, str]:
    prefix = f"{factory.prefix}-{uuid.uuid4().hex[:4]}"
    topic = f"{prefix}.observations"
    admin = AdminClient(dict(config))
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(timeout=30)
    factory.track(topic)
    factory._wait_listed(topic)
    return prefix, topic


def _stamp() -> str:
    """Now as ISO 8601 with milliseconds, then a pause so the next message is later."""
    now = time.time()
    time.sleep(0.05)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def test_replay_from_kafka_range_equals_the_bundle(kafka_config, kafka_topic_factory, expected, tmp_path: Path) -> None:  # noqa: F811
    prefix, topic = _observations_topic(kafka_config, kafka_topic_factory)
    settings = KafkaSettings(bootstrap_servers=kafka_config["bootstrap.servers"])
    with RecordProducer(settings, topic) as producer:
        publish_bundle(XID43, producer)
    t0 = _stamp()
    with RecordProducer(settings, topic) as producer:
        publish_bundle(TWO_JOBS, producer)
    bad = Producer(with_partitioner(dict(kafka_config, log_level=0)))  # a message that is not an Observation, inside the range
    bad.produce(topic, key=b"node-a05", value=b'{"kind": "log_line"')
    bad.flush(30)
    t1 = _stamp()
    with RecordProducer(settings, topic) as producer:
        publish_bundle(HISTORY, producer)
    t2 = _stamp()
    bootstrap = kafka_config["bootstrap.servers"]
    base = ["replay", "--from-kafka", "--bootstrap", bootstrap, "--topic-prefix", prefix, "--json"]

    result = run(*base, "--since", t0, "--until", t1)
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == expected["job-2401"]
    n = len(bundle_records(TWO_JOBS)[0])
    assert f"{n + 1:,} records read, 1 invalid and skipped (first: partition " in result.stderr

    # the whole topic, one workload: its selection
    result = run(*base, "--until", t2, "--workload", "job-4102")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == expected["job-4102"]
    result = run(*base, "--workload", "job-1002", "--cluster", "c1")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == expected["job-1002"]

    # an empty range reads nothing and stops
    result = run(*base, "--since", t2)
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and "0 records read" in result.stderr

    # bundle export from the same range
    target = tmp_path / "export"
    result = run("bundle", "export", "job-2401", "--from-kafka", "--bootstrap", bootstrap, "--topic-prefix", prefix,
                 "--since", t0, "--until", t1, "--out", str(target))
    assert result.exit_code == 0, result.output
    assert canonical(replay_bundle(target).attributions) == expected["job-2401"]


@pytest.mark.parametrize("workload", sorted(BUNDLES))
def test_pushed_down_prefilter_reads_fewer_rows_for_the_same_verdicts(store: str, workload: str) -> None:
    from correlators.config import EngineConfig
    from streams.replay import replay_observations
    from streams.sources import ReadReport, observations_from_clickhouse

    config = EngineConfig.default()
    out = {}
    for prefilter in (False, True):
        report = ReadReport()
        with ClickHouseSink(store) as sink:
            observations = list(observations_from_clickhouse(sink, config, workload=workload, report=report,
                                                             prefilter=prefilter))
        out[prefilter] = (canonical(replay_observations(observations, config)[0]), report, observations)
    assert out[True][0] == out[False][0]
    assert out[True][1].read < out[False][1].read if workload == "job-1002" else out[True][1].read <= out[False][1].read
    assert out[True][1].invalid == out[False][1].invalid  # a row without a body is still read and reported
    pack = config.pack
    kept = {o.observation_id for o in out[True][2]}
    # every row left on the server is one the pipeline skips: a log line without a keyword
    for obs in out[False][2]:
        if obs.observation_id not in kept:
            assert obs.kind == "log_line" and obs.metric is None and not pack.may_extract(obs.body or "")
