"""The streaming pipeline end to end on a real Kafka broker and the real ClickHouse engine:
bundles published with `faultstream connect bundle`, `faultstream worker` processes consuming
them, verdicts on the attributions topic and in ClickHouse.

Each test uses its own topic prefix and consumer group. Worker processes are real
subprocesses (the installed `faultstream` command), so SIGKILL is a real crash.
"""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from streams.app import free_port
from transport.kafka_settings import with_partitioner

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "incidents"
#: The example bundles. Each is published as its own cluster (node-a01 of one bundle is not the
#: node-a01 of another: their GPU tables and node histories must not mix).
SOURCES = sorted(p.parent for p in EXAMPLES.glob("*/expected.yaml"))
# the worker's internal topics and tables get 4 partitions: unlike the catalogue's 3-partition
# topology and remediation-commands topics, as in a default deployment (12 vs 3), so a table
# written from a stream of a topic with another partition count fails here too
PARTITIONS = 4


class Worker:
    """A `faultstream worker` subprocess with its own log file; ``args``: more options (a
    ``--stage``), ``ready``: the log lines that say it is ready (a whole worker: both stages')."""

    def __init__(
        self, env: dict[str, str], log: Path, *args: str,
        ready: tuple[str, ...] = ("[^Worker]: Ready", "[^Ingest]: Ready"),
    ) -> None:
        self.log = log
        self.ready = ready
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker", "--web-port", str(self.port), "--loglevel", "info", *args],
            cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            if all(mark in text for mark in self.ready):
                return
            if self.proc.poll() is not None:
                pytest.fail(f"worker exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.3)
        pytest.fail(f"worker not ready after {timeout} s:\n{self.log.read_text(errors='replace')[-3000:]}")

    def metrics(self) -> dict[str, float]:
        import urllib.request

        body = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5).read().decode()
        out: dict[str, float] = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def stream_env(kafka_bootstrap: str, kafka_topic_factory: Any, tmp_path: Path):
    """Environment of one pipeline: unique topic prefix and app id, tmp data dirs."""
    prefix = kafka_topic_factory.prefix
    app_id = f"{prefix}-worker"
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "FAULTSTREAM_TOPIC_PREFIX": prefix,
        "FAULTSTREAM_APP_ID": app_id,
        "FAULTSTREAM_PARTITIONS": str(PARTITIONS),
        "FAULTSTREAM_IDLE_TIMEOUT_S": "2",
        "FAULTSTREAM_ALLOWED_LATENESS_S": "30",
        "FAULTSTREAM_DATA_DIR": str(tmp_path / "faust"),
    }
    workers: list[Worker] = []

    def start(name: str = "w", **extra: str) -> Worker:
        worker = Worker({**env, **extra}, tmp_path / f"{name}.log")
        workers.append(worker)
        worker.wait_ready()
        return worker

    yield {"env": env, "prefix": prefix, "start": start, "tmp": tmp_path}
    for worker in workers:
        worker.stop(signal.SIGKILL)
    for suffix in ("observations", "events", "attributions", "remediations", "remediation-commands",
                   "deadletter", "topology", "certifications"):
        kafka_topic_factory.track(f"{prefix}.{suffix}")
    for internal in ("by-workload", "by-fabric", "window_meta-changelog", "window_events-changelog", "window_facts-changelog",
                     "fabric_meta-changelog", "fabric_events-changelog",
                     "topology-changelog", "by-cluster-remediation", "remediation_state-changelog",
                     "by-cluster-alerts", "alert_state-changelog",
                     "__assignor-__leader"):
        kafka_topic_factory.track(f"{app_id}-{internal}")


def publish(env: dict[str, str], *bundles: Path) -> None:
    """`faultstream connect bundle` of ``bundles``, one after the other, in one process."""
    out = subprocess.run(
        [sys.executable, "-m", "streams.cli", "connect", "bundle", *map(str, bundles),
         "--topic", f"{env['FAULTSTREAM_TOPIC_PREFIX']}.observations"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr


def consume(bootstrap: str, topic: str, *, until: Any, timeout: float = 90) -> list[Any]:
    """Consume ``topic`` from the start until ``until(messages)`` is true, then for 3 s more
    (nothing further may arrive); fails after ``timeout`` s."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    messages: list[Any] = []
    deadline = time.monotonic() + timeout
    settle: float | None = None
    try:
        while True:
            now = time.monotonic()
            if settle is not None and now >= settle:
                return messages
            if now > deadline:
                why = getattr(until, "explain", lambda m: "")(messages)
                pytest.fail(f"{topic}: condition not met after {timeout} s; got {len(messages)} messages{why}")
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                messages.append(msg)
                settle = None
            if settle is None and until(messages):
                settle = time.monotonic() + 3.0
    finally:
        consumer.close()


def scope_key(att: dict) -> str:
    """The attribution id: stable per scope (cluster included: two clusters may have a port or
    job of the same name; a withdrawn fabric verdict and its successor share a port)."""
    return att["attribution_id"]


def standing(verdicts: dict[str, Any]) -> set[str]:
    """The attribution ids of the verdicts left standing: the stream may withdraw fabric or
    incident verdicts it emitted early (status ``withdrawn``: what all the evidence shows
    replaced them); every verdict it leaves standing must be one replay gives."""
    def status(v: Any) -> str:
        return v["status"] if isinstance(v, dict) else v.status
    return {k for k, v in verdicts.items() if status(v) != "withdrawn"}


def named(att: dict) -> str:
    return f"{att['scope']['kind']} {att['scope']['cluster']}/{att['scope']['id']}"


def latest_verdicts(messages: list[Any]) -> dict[str, dict]:
    latest: dict[str, dict] = {}
    for msg in messages:
        if msg.value() is None:
            continue  # the tombstone after a withdrawal: the withdrawal itself is kept
        att = json.loads(msg.value())
        key = scope_key(att)
        if key not in latest or att["revision"] > latest[key]["revision"]:
            latest[key] = att
    return latest


def own_cluster(source: Path, root: Path) -> Path:
    """A copy of bundle ``source`` under ``root`` whose workloads name the bundle as their
    cluster."""
    import shutil

    copy = root / source.name
    shutil.copytree(source, copy)
    for spec in [copy / "workload.yaml", *sorted((copy / "workloads").glob("*.yaml"))]:
        text = spec.read_text()
        spec.write_text(re.sub(r"(?m)^cluster: .*$", f"cluster: {source.name}", text))
    return copy


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, dict]:
    """Each example bundle (as its own cluster) and its `faultstream replay` verdicts (JSON
    data; the workload verdict first, then fabric-port and incident verdicts), the reference."""
    from streams.replay import replay_bundle

    root = tmp_path_factory.mktemp("bundles")
    copies = [own_cluster(b, root) for b in SOURCES]
    return {b: [a.model_dump(mode="json") for a in replay_bundle(b).attributions] for b in copies}


def publish_all(env: dict[str, str], bundles: list[Path], replayed: dict[Path, dict]) -> dict[str, dict]:
    """Publish ``bundles`` with one `faultstream connect bundle`; return their replay verdicts by
    scope id."""
    publish(env, *bundles)
    return {scope_key(att): att for bundle in bundles for att in replayed[bundle]}


def comparable(att: dict) -> dict:
    """A verdict without what legitimately differs between drivers: the revision counter
    and the Kafka transport positions of the evidence."""
    att = json.loads(json.dumps(att))
    att.pop("revision")
    for item in att["evidence"]:
        for ref in item["observations"]:
            for key in ("topic", "partition", "offset"):
                ref["position"][key] = None
    return att


def final_for(expected: dict[str, dict]):
    """until(): every expected scope's latest verdict equals the replay verdict."""
    def done(messages: list[Any]) -> bool:
        latest = latest_verdicts(messages)
        return all(k in latest and comparable(latest[k]) == comparable(v) for k, v in expected.items())

    def explain(messages: list[Any]) -> str:
        latest = latest_verdicts(messages)
        out = []
        for scope, want in expected.items():
            if scope not in latest:
                out.append(f"{named(want)}: no verdict")
                continue
            got, want = comparable(latest[scope]), comparable(want)
            fields = [k for k in want if got.get(k) != want[k]]
            if fields:
                out.append(f"{named(want)}: differs in {fields}: got {[got.get(k) for k in fields]!r:.600} "
                           f"want {[want[k] for k in fields]!r:.600}")
        return "".join(f"\n  {line}" for line in out)
    done.explain = explain  # type: ignore[attr-defined]
    return done


def test_bundles_through_the_stream_equal_replay_on_the_topic_and_in_clickhouse(stream_env, kafka_bootstrap, replayed):
    env, prefix = stream_env["env"], stream_env["prefix"]
    ch_dir = stream_env["tmp"] / "clickhouse"
    worker = stream_env["start"](FAULTSTREAM_CLICKHOUSE=f"chdb://{ch_dir}")
    expected = publish_all(env, list(replayed), replayed)
    messages = consume(kafka_bootstrap, f"{prefix}.attributions", until=final_for(expected), timeout=120)
    latest = latest_verdicts(messages)
    for scope, att in expected.items():
        assert comparable(latest[scope]) == comparable(att), scope
        # the verdict's evidence points at the Kafka records it came from
        positions = [ref["position"] for item in latest[scope]["evidence"] for ref in item["observations"]]
        assert all(p["topic"] == f"{prefix}.observations" and p["offset"] is not None for p in positions)
    # a decisive cause gave a provisional verdict before the final one
    job = next(k for k, v in expected.items() if v["scope"]["id"] == "job-1006")
    assert standing(latest) == set(expected)
    records = [m for m in messages if m.value() is not None]
    revisions = {scope_key(json.loads(m.value())): 0 for m in records}
    for m in records:
        a = json.loads(m.value())
        revisions[scope_key(a)] = max(revisions[scope_key(a)], a["revision"])
    assert revisions[job] >= 2
    # the operator's view of the topic: `faultstream verdicts`
    shown = subprocess.run(
        [sys.executable, "-m", "streams.cli", "verdicts", "--format", "json", "--workload", "job-1006", "--idle-timeout", "3"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    revisions_shown = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [a["revision"] for a in revisions_shown] == list(range(1, revisions[job] + 1))
    assert revisions_shown[-1]["root_cause"]["code"] == "gpu.xid.79"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # ClickHouse writes are batched; let the last batch land
        if worker.metrics().get('faultstream_clickhouse_rows_total{table="attributions"}', 0) >= len(messages):
            break
        time.sleep(0.5)
    worker.stop()
    from sinks.clickhouse import ClickHouseSink

    with ClickHouseSink(f"chdb://{ch_dir}") as sink:
        stored = {a.attribution_id: a for a in sink.fetch("attributions", final=True)}
    assert standing(stored) == set(expected)
    for scope, att in expected.items():
        assert comparable(stored[scope].model_dump(mode="json")) == comparable(att), scope


def test_worker_killed_mid_stream_recovers_from_the_changelog(stream_env, kafka_bootstrap, replayed):
    env, prefix = stream_env["env"], stream_env["prefix"]
    ch_dir = stream_env["tmp"] / "clickhouse"
    first = stream_env["start"]("first", FAULTSTREAM_CLICKHOUSE=f"chdb://{ch_dir}")
    bundles = list(replayed)
    half = len(bundles) // 2
    expected = publish_all(env, bundles[:half], replayed)
    consume(kafka_bootstrap, f"{prefix}.attributions", until=final_for(expected), timeout=120)
    # the second half is published, then the worker dies mid-stream with no chance to clean up
    expected |= publish_all(env, bundles[half:], replayed)
    time.sleep(1.0)
    first.stop(signal.SIGKILL)
    # a new worker on a new machine: no local state, everything from the changelog topics
    second = stream_env["start"]("second", FAULTSTREAM_CLICKHOUSE=f"chdb://{ch_dir}",
                                 FAULTSTREAM_DATA_DIR=str(stream_env["tmp"] / "faust-second"))
    messages = consume(kafka_bootstrap, f"{prefix}.attributions", until=final_for(expected), timeout=150)
    latest = latest_verdicts(messages)
    assert standing(latest) == set(expected)
    for scope, att in expected.items():
        assert comparable(latest[scope]) == comparable(att), scope
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # let the batched ClickHouse writes land
        if second.metrics().get('faultstream_clickhouse_rows_total{table="attributions"}', 0) > 0:
            break
        time.sleep(0.5)
    time.sleep(2)
    second.stop()  # releases the chDB directory
    from sinks.clickhouse import ClickHouseSink

    sink = ClickHouseSink(f"chdb://{ch_dir}")
    with sink:
        stored = {a.attribution_id: a for a in sink.fetch("attributions", final=True)}
    assert standing(stored) == set(expected)
    for scope, att in expected.items():
        assert comparable(stored[scope].model_dump(mode="json")) == comparable(att), scope


def test_two_workers_in_one_group_give_the_same_verdicts(stream_env, kafka_bootstrap, replayed):
    env, prefix = stream_env["env"], stream_env["prefix"]
    a = stream_env["start"]("a")
    b = stream_env["start"]("b", FAULTSTREAM_DATA_DIR=str(stream_env["tmp"] / "faust-b"))
    time.sleep(5)  # let the group settle with both members
    expected = publish_all(env, list(replayed), replayed)
    messages = consume(kafka_bootstrap, f"{prefix}.attributions", until=final_for(expected), timeout=150)
    latest = latest_verdicts(messages)
    assert standing(latest) == set(expected)
    for scope, att in expected.items():
        assert comparable(latest[scope]) == comparable(att), scope
    # both members did work
    seen_a = a.metrics().get("faultstream_observations_total", 0)
    seen_b = b.metrics().get("faultstream_observations_total", 0)
    assert seen_a > 0 and seen_b > 0, (seen_a, seen_b)


def test_malformed_messages_are_dead_lettered_and_counts_reconcile(stream_env, kafka_bootstrap):
    prefix = stream_env["prefix"]
    worker = stream_env["start"]()
    good = json.loads(subprocess.run(
        [sys.executable, "-c", (
            "from connectors.publish import bundle_records; import sys;"
            f"recs,_=bundle_records({str(SOURCES[0])!r});"
            "print(recs[1].model_dump_json())")],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    wrong_version = {**good, "schema_version": 99}
    wrong_types = {**good, "observed_at": "yesterday", "host": 42}
    bad = [
        (b"node-a01", b"{not json", "invalid json"),
        (b"node-a01", json.dumps(wrong_version).encode(), "schema version"),
        (b"node-a01", json.dumps(wrong_types).encode(), "invalid record"),
        (b"node-a01", b"x" * (5 * 1024 * 1024), "too large"),
        (b"node-a01", b"[1, 2, 3]", "invalid record"),
        (b"node-a01", b"\xff\xfe\x00garbage", "invalid json"),
    ]
    producer = Producer(with_partitioner({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 10_000_000}))
    for key, value, _ in bad:
        producer.produce(f"{prefix}.observations", key=key, value=value)
    producer.produce(f"{prefix}.observations", key=b"node-a01", value=json.dumps(good).encode())
    assert producer.flush(30) == 0
    letters = consume(kafka_bootstrap, f"{prefix}.deadletter", until=lambda m: len(m) >= len(bad), timeout=60)
    assert len(letters) == len(bad)
    reasons = sorted(json.loads(m.value())["reason"].split(":")[0] for m in letters)
    assert reasons == sorted(r for _, _, r in bad)
    import base64

    originals = {base64.urlsafe_b64decode(json.loads(m.value())["original"]) for m in letters}
    assert originals == {v for _, v, _ in bad}  # the original bytes, exactly
    keys = {base64.urlsafe_b64decode(json.loads(m.value())["original_key"]) for m in letters}
    assert keys == {b"node-a01"}  # and the key they were sent with
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = worker.metrics()
        seen = m.get("faultstream_observations_total", 0)
        if seen >= len(bad) + 1:
            break
        time.sleep(0.5)
    dead = sum(v for k, v in m.items() if k.startswith("faultstream_dead_letters_total{"))
    processed = m.get("faultstream_observations_processed_total", 0)
    assert seen == len(bad) + 1
    assert dead == len(bad)
    assert processed == 1
    assert seen == processed + dead  # in = processed + dead-lettered
    assert worker.proc.poll() is None  # the worker is still running


def test_events_read_before_their_workload_is_known_are_claimed_later(stream_env, kafka_bootstrap, replayed):
    """A live source (files, syslog) knows no workload: its events reach the correlator by
    the allocation table, which the scheduler's record may fill only after the events were
    extracted (another partition). They wait in their host's window until claimed."""
    from connectors.publish import bundle_records

    prefix = stream_env["prefix"]
    stream_env["start"]()
    bundle = next(b for b in replayed if "rc15" in b.name)
    records, _ = bundle_records(bundle)
    workload_record = next(r for r in records if r.format == "workload_yaml")
    # the lines as a files connector would publish them: no workload id
    anonymous = [
        r.model_copy(update={"workload_id": None}).with_id()
        for r in records if r.kind == "log_line"
    ]
    producer = Producer(with_partitioner({"bootstrap.servers": kafka_bootstrap}))
    from schemas.records import canonical_json

    for obs in anonymous:
        producer.produce(f"{prefix}.observations", key=obs.host.encode(), value=canonical_json(obs).encode())
    assert producer.flush(30) == 0
    time.sleep(3)  # the events are extracted and wait: no workload claims these hosts yet
    producer.produce(f"{prefix}.observations", key=b"_scheduler", value=canonical_json(workload_record).encode())
    assert producer.flush(30) == 0
    expected = replayed[bundle][0]

    def timeouts(att: dict) -> int:
        return sum(1 for i in att["evidence"] if i["type"] == "nccl.watchdog_timeout")

    def done(messages: list[Any]) -> bool:
        latest = latest_verdicts(messages).get(scope_key(expected))
        return bool(latest) and timeouts(latest) == timeouts(expected)

    messages = consume(kafka_bootstrap, f"{prefix}.attributions", until=done, timeout=90)
    latest = latest_verdicts(messages)[scope_key(expected)]
    assert timeouts(expected) == 15  # every other rank of the 16-rank job
    assert latest["root_cause"]["code"] == "gpu.xid.79"
    assert latest["culprits"]["hosts"] == expected["culprits"]["hosts"] == ["node-a02"]
    assert latest["culprits"]["ranks"] == expected["culprits"]["ranks"]


def test_a_topology_from_the_topology_connector_names_the_port_in_the_stream(stream_env, kafka_bootstrap, replayed):
    """Live operation: the cabling comes from `faultstream connect topology` on the compacted
    topology topic (here after the log lines), not from a bundle. The fabric correlator
    re-decides when it arrives, and the verdicts equal replay's."""
    from connectors.publish import bundle_records
    from schemas.records import canonical_json

    env, prefix = stream_env["env"], stream_env["prefix"]
    bundle = next(b for b in replayed if b.name == "fabric-port-flap-host-and-switch")
    records, conn = bundle_records(bundle)
    stream_env["start"]()
    producer = Producer(with_partitioner({"bootstrap.servers": kafka_bootstrap}))
    for obs in records:
        if obs.kind != "topology":
            producer.produce(f"{prefix}.observations", key=obs.host.encode(), value=canonical_json(obs).encode())
    assert producer.flush(30) == 0
    out = subprocess.run(
        [sys.executable, "-m", "streams.cli", "connect", "topology", "--cluster", conn.workload.cluster,
         "--topology-yaml", str(bundle / "topology.yaml"), "--topic", f"{prefix}.topology"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    expected = {scope_key(a): a for a in replayed[bundle]}
    assert [a["scope"]["kind"] for a in expected.values()] == ["workload", "fabric_port", "incident"]
    messages = consume(kafka_bootstrap, f"{prefix}.attributions", until=final_for(expected), timeout=120)
    latest = latest_verdicts(messages)
    fabric = next(a for a in latest.values() if a["scope"]["kind"] == "fabric_port" and a["status"] != "withdrawn")
    assert fabric["scope"]["id"] == "leaf-01/Ethernet16"
    assert fabric["culprits"]["ports"] == ["leaf-01/Ethernet16", "node-a03/mlx5_0/1"]
