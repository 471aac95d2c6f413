"""faultstream's topic contract (v2), checked the way a consumer in another language meets it.

One real worker (``faultstream worker`` subprocess) on the session's real broker takes, under a
topic prefix of its own:

* every example bundle, each as its own cluster: all but one with ``faultstream connect
  bundle``, the last (two port faults that turn out to be one) in two deliveries through the
  connectors' producer, after which the worker withdraws a verdict (:func:`withdrawal_plan`);
  the run waits until every verdict standing equals `faultstream replay`'s;
* three topologies (``faultstream connect topology``; one published twice), two of them then
  deleted: with ``faultstream connect topology --delete`` and with a tombstone from Kafka's
  Java console producer (a foreign producer);
* bad input on the observations topic (not JSON, a tombstone, an empty value, a
  ``schema_version`` 99 record) and on the commands topic (not JSON);
* a remediation approve flow on the XID 79 bundle: drain and reboot of node-a02 proposed,
  approved with ``faultstream remediation approve``, run in dry run; a breaker reset;
  certifications with ``faultstream connect certifications``: a failing run, two that cannot
  apply (finished in 2001, before the drain; in 2099, after the worker's clock: both
  dead-lettered), one of a host no action awaits (recorded, not an error), a passing run.

The worker is stopped, and every public topic of the catalogue (``schemas.topics``) is read
with Kafka's Java console consumer (``kafka-tools``). Then:

* every record is validated with ajv against ``schemas/json`` (``deploy/contract/validate.mjs``:
  the AsyncAPI document maps topics to schema files; lossless JSON; every ``*_utc`` twin equal
  to its integer); exactly the bad inputs the test sent fail;
* the AsyncAPI document parses with the official parser (``asyncapi-check.mjs``);
* headers, keys (contract v2, keys, with the attribution-id recipe recomputed here) and the
  partition of every key (murmur2, as Kafka's Java producer) on every record;
* lifecycle semantics: withdrawals and tombstones, monotonic ``updated_at``, dead letters
  (standard base64, ``null`` for a tombstone, ``""`` for an empty value; certifications that
  cannot apply);
* the example Node consumer (``examples/consumers/node/follow.mjs``, kafkajs) follows the
  attributions and remediations topics for a few seconds and ends with the current state;
* the compacted topics are compacted for real (configs altered, a segment rolled, the log
  cleaner waited for) and the latest record per key is the current state.

The contract is version 2 (docs/contract.md, docs/contract-changelog.md);
"contract v2, <rule>" names the rule a check is about. Where the documentation and the rules
these tests were written against differ, the three functions after the constants say which.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka.partitioner import murmur2
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from schemas.topics import catalogue
from tests.contract.clients import (
    CONTRACT,
    EXAMPLE_NODE,
    Record,
    console_consume,
    console_produce,
    install_node_packages,
    run_node,
    validate,
)
from tests.contract.compaction import force_compaction
from tests.kafka_fixtures import TopicFactory
from tests.streams.test_stream import Worker, comparable, publish_all, replayed  # noqa: F401
from tests.transport.test_partitioner import java_tools_classpath
from transport.kafka_settings import with_partitioner

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
CERTS = ROOT / "tests" / "data" / "certifications"
FABRIC_BUNDLE = ROOT / "examples" / "incidents" / "fabric-port-flap-host-and-switch"
#: The bundle of the remediation flow (XID 79 on node-a02), published as its own cluster.
FLOW_CLUSTER = "public-rc15-pcie-aer-xid79-multinode"
FLOW_HOST = "node-a02"
COMMAND_KEYS = {"contract-1": "c" * 40}
#: Clusters of the topologies sent without a bundle: one kept, one deleted with
#: ``faultstream connect topology --delete``, one by a tombstone from Kafka's Java producer.
TOPOLOGY_KEPT = "contract-topology-kept"
TOPOLOGY_GONE = "contract-topology-gone"
TOPOLOGY_GONE_JAVA = "contract-topology-gone-java"
#: The bundle whose verdicts the worker withdraws (two port faults that turn out to be one):
#: published not with the others but in two deliveries (see withdrawal_plan).
WITHDRAWAL_BUNDLE = "fabric-port-flap-two-jobs"
#: The public topics, by logical name (schemas.topics.catalogue).
LOGICAL = list(catalogue("x"))
COMPACTED = [name for name, spec in catalogue("x").items() if spec.cleanup_policy == "compact"]
#: Headers on every record of every topic (contract v2, headers).
CONTRACT_HEADERS = ("schema", "schema_version", "content-type")
#: The integer times each topic's records must carry with their ``_utc`` twin (contract v2,
#: RFC 3339 twins), as validate.mjs names them (``evidence[].at``: ``at`` of every evidence item).
TWIN_FIELDS = {
    "observations": {"observed_at"},
    "events": {"at"},
    "attributions": {"decided_at", "window.start", "window.end", "evidence[].at"},
    "remediations": {"created_at", "updated_at", "decision.at"},
    "remediation-commands": {"at"},
    "deadletter": {"at_ns"},
    "topology": {"observed_at"},
    "certifications": {"finished_at"},
}

# The rules as docs/contract.md, schemas/topics.py, schemas/wire.py and
# the AsyncAPI document state them.


def schema_header(schema_file: str) -> str:
    """Headers: the ``schema`` header is the record model's class name, the ``title`` of its
    JSON Schema file (``Attribution``); the topology topic's records are ``Observation`` records
    (their payload schema, ``TopologyObservation``, narrows Observation)."""
    title = json.loads((ROOT / "schemas" / "json" / schema_file).read_text())["title"]
    return "Observation" if title == "TopologyObservation" else title


def event_key(event: dict) -> str:
    """Keys: the workload id; ``host:<host>`` for an event no workload claims."""
    return event["workload_id"] or f"host:{event['host']}"


def command_key(command: dict) -> str:
    """Keys: the action id; the empty key for ``reset_breaker``."""
    return command["action_id"] or ""


#: Bad input the test sends to the observations topic: key -> value (None: a tombstone).
BAD_OBSERVATIONS: dict[str, bytes | None] = {
    "contract-bad-json": b"{not json",
    "contract-tombstone": None,
    "contract-empty": b"",
}
BAD_VERSION_KEY = "contract-schema-version-99"
BAD_COMMAND_KEY = "contract-bad-command"


@dataclass
class Run:
    """What the worker run left: the topics as the Java console consumer read them."""

    prefix: str
    bootstrap: str
    config: dict[str, str]
    env: dict[str, str]
    tmp: Path
    #: replay's verdicts (JSON data) by attribution id: the current state of the attributions
    expected: dict[str, dict]
    #: logical topic -> every record, as read after the worker stopped
    records: dict[str, list[Record]] = field(default_factory=dict)
    #: logical topic -> partition count
    partitions: dict[str, int] = field(default_factory=dict)
    #: (logical topic, key) of the bad input the test sent (exempt from the conformance checks)
    injected: set[tuple[str, str]] = field(default_factory=set)
    #: bad observation key -> the value sent (None: tombstone)
    bad_values: dict[str, bytes | None] = field(default_factory=dict)
    #: the attribution ids the worker is to withdraw (withdrawal_plan)
    withdrawn: set[str] = field(default_factory=set)
    #: the flow's drain and reboot action ids
    flow: dict[str, str] = field(default_factory=dict)
    #: steps of the run that did not reach their state (step -> why); checked by a test
    problems: dict[str, str] = field(default_factory=dict)
    #: seconds per step, for the record
    timings: dict[str, float] = field(default_factory=dict)

    def topic(self, logical: str) -> str:
        """The full topic name of a logical topic."""
        return f"{self.prefix}.{logical}"

    def conforming(self, logical: str) -> list[Record]:
        """The records of ``logical`` less the bad input the test sent."""
        return [r for r in self.records[logical] if (logical, r.key) not in self.injected]


# -- helpers ----------------------------------------------------------------------------------------


def cli(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``faultstream ARGS`` (the installed CLI module) with ``env``."""
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def read_topic(config: dict[str, str], topic: str, *, until: Any, timeout: float) -> list[tuple[str | None, Any]]:
    """(key, JSON value or None for a tombstone) of every record of ``topic`` from the start,
    read with a Python consumer until ``until(records)`` holds (asked when the consumer has
    caught up, at most once a second); raises TimeoutError after ``timeout`` seconds."""
    consumer = Consumer(dict(config, **{"group.id": f"contract-wait-{os.urandom(6).hex()}",
                                        "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    consumer.subscribe([topic])
    got: list[tuple[str | None, Any]] = []
    deadline = time.monotonic() + timeout
    asked = 0.0
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                value = msg.value()
                try:
                    parsed = None if value is None else json.loads(value)
                except ValueError:
                    parsed = {"_not_json": value.decode("utf-8", "replace")}
                got.append((None if msg.key() is None else msg.key().decode(), parsed))
                if time.monotonic() - asked < 1.0:
                    continue
            asked = time.monotonic()
            if until(got):
                return got
    finally:
        consumer.close()
    raise TimeoutError(f"{topic}: condition not met after {timeout:.0f} s ({len(got)} records)")


def current_state(records: list[tuple[str | None, Any]]) -> dict[str | None, Any]:
    """key -> its last value in log order (None: tombstoned)."""
    state: dict[str | None, Any] = {}
    for key, value in records:
        state[key] = value
    return state


def verdicts_settled(expected: dict[str, dict]):
    """until(): every expected verdict's key holds the replay verdict (revision and transport
    positions aside)."""
    want = {k: comparable(v) for k, v in expected.items()}

    def done(records: list[tuple[str | None, Any]]) -> bool:
        state = current_state(records)
        return all(state.get(k) is not None and comparable(state[k]) == v for k, v in want.items())
    return done


def flow_actions(records: list[tuple[str | None, Any]]) -> dict[str, dict]:
    """The flow's latest drain and reboot of node-a02 (highest sequence), by action kind."""
    out: dict[str, dict] = {}
    for _, value in records:
        if not value or "_not_json" in value or value.get("cluster") != FLOW_CLUSTER:
            continue
        if value.get("target", {}).get("host") != FLOW_HOST or value.get("action") not in ("drain", "reboot"):
            continue
        held = out.get(value["action"])
        if held is None or value["sequence"] > held["sequence"]:
            out[value["action"]] = value
    return out


def watermarks(config: dict[str, str], topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """partition -> (low, high) watermark of ``topic``."""
    consumer = Consumer(dict(config, **{"group.id": f"contract-wm-{os.urandom(6).hex()}"}))
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)}
    finally:
        consumer.close()


def wait_quiet(config: dict[str, str], topics: dict[str, int], quiet_s: float = 6.0, timeout_s: float = 90.0) -> None:
    """Wait until no topic of ``topics`` (name -> partitions) grows for ``quiet_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    last = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        now = {t: sum(h for _, h in watermarks(config, t, n).values()) for t, n in topics.items()}
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(1.0)
    raise TimeoutError(f"the topics kept growing for {timeout_s:.0f} s: {last}")


def attribution_id(att: dict) -> str:
    """The attribution id recomputed from its documented recipe (contract v2, keys): ``att-``
    + 24 hex of BLAKE2b-96 over the canonical JSON (sorted keys, no spaces, UTF-8) of the
    scope's parts."""
    scope = att["scope"]
    if scope["kind"] == "workload":
        parts: list[Any] = ["workload", scope["cluster"], scope["id"]]
    elif scope["kind"] == "fabric_port":
        parts = ["fabric_port", att["incident_id"]]
    else:
        parts = ["incident", att.get("incident_id") or scope["id"]]
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "att-" + hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


def java_partition(key: str, partitions: int) -> int:
    """The partition Kafka's Java producer picks for ``key`` (murmur2 of its UTF-8 bytes)."""
    return (murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % partitions


def withdrawal_plan(bundle: Path) -> tuple[list[Any], list[Any], set[str]]:
    """Two deliveries of ``bundle``'s records (shuffled, seed 0, split at the first point that
    works) after which the pure pipeline, with the worker's window settings, withdraws a
    verdict: fed the first delivery, then a fabric flush, then the second. Returns (first,
    second, the attribution ids it withdraws). Fails the test when no split does."""
    import random

    from connectors.publish import bundle_records
    from correlators.config import EngineConfig, WindowPolicy
    from correlators.pipeline import InMemoryRouter, Pipeline, Publish

    config = EngineConfig.default(window=WindowPolicy(idle_timeout_s=2.0, allowed_lateness_s=30.0, fabric_flush_s=2.0))
    order = list(bundle_records(bundle)[0])
    random.Random(0).shuffle(order)
    def apply_all(router: InMemoryRouter, now: float) -> None:
        while router.queue:
            route = router.queue.popleft()
            router.send(router.pipeline.apply(route.channel, route.key, route.message, now=now))

    def withdrawn_by(k: int) -> set[str]:
        router = InMemoryRouter(Pipeline(config))
        now = 0.0
        for chunk in (order[:k], order[k:]):
            for obs in chunk:
                router.send(router.pipeline.ingest(obs))
                apply_all(router, now)
            now += 3.0  # the worker's timers: idle windows and fabric flushes
            router.send(router.pipeline.idle(now) + router.pipeline.due_flushes(now))
            apply_all(router, now)
        for _ in range(50):  # then until nothing is left
            now += 60.0
            ticks = router.pipeline.idle(now) + router.pipeline.due_flushes(now)
            if not ticks:
                break
            router.send(ticks)
            apply_all(router, now)
        return {e.record.attribution_id for e in router.published
                if isinstance(e, Publish) and e.topic == "attributions" and e.record.status == "withdrawn"}

    # the middle of the first run of splits that withdraw: the stream's timing differs a little
    working: list[tuple[int, set[str]]] = []
    for k in range(4, len(order) - 4):
        withdrawn = withdrawn_by(k)
        if withdrawn:
            working.append((k, withdrawn))
        elif working:
            break
    if working:
        k, withdrawn = working[len(working) // 2]
        return order[:k], order[k:], withdrawn
    pytest.fail(f"no split of {bundle.name} into two deliveries makes the pipeline withdraw a verdict", pytrace=False)


def latest_by_offset(records: list[Record]) -> dict[str | None, Record]:
    """key -> its record with the highest offset (keys live on one partition)."""
    out: dict[str | None, Record] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        out[r.key] = r
    return out


def sample(items: Any, n: int = 8) -> str:
    """The first ``n`` items of a dict or list, for a failure message."""
    if isinstance(items, dict):
        items = list(items.items())
    return json.dumps(items[:n], default=str, ensure_ascii=False)[:4000] + (f" ... ({len(items)} in all)" if len(items) > n else "")


# -- the run ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node_packages() -> None:
    """The npm packages of deploy/contract and the example consumer (deploy/contract/setup.sh)."""
    install_node_packages()


@pytest.fixture(scope="module")
def run(node_packages, kafka_bootstrap: str, kafka_config: dict[str, str], replayed: dict[Path, list[dict]],  # noqa: F811
        tmp_path_factory: pytest.TempPathFactory):
    """The worker run of the module docstring; yields a :class:`Run` once the worker stopped
    and every public topic was read with the Java console consumer."""
    java_tools_classpath()  # fetch kafka-tools (or fail) before anything runs
    tmp = tmp_path_factory.mktemp("contract")
    factory = TopicFactory(kafka_config, "contract")
    prefix = factory.prefix
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "FAULTSTREAM_TOPIC_PREFIX": prefix,
        "FAULTSTREAM_APP_ID": f"{prefix}-worker",
        "FAULTSTREAM_PARTITIONS": "4",
        "FAULTSTREAM_IDLE_TIMEOUT_S": "2",
        "FAULTSTREAM_ALLOWED_LATENESS_S": "30",
        "FAULTSTREAM_DATA_DIR": str(tmp / "faust"),
        "FAULTSTREAM_COMMAND_KEYS": json.dumps(COMMAND_KEYS),
        # the bundles' events are hours old: proposals must outlive the wall-clock expiry
        "FAULTSTREAM_REMEDIATION_PROPOSAL_TTL_S": "31536000",
        "FAULTSTREAM_REMEDIATION_TICK_INTERVAL_S": "1",
    }
    r = Run(prefix=prefix, bootstrap=kafka_bootstrap, config=dict(kafka_config), env=env, tmp=tmp, expected={})
    worker = Worker(env, tmp / "worker.log")
    try:
        t0 = time.monotonic()
        worker.wait_ready(timeout=120)
        r.timings["worker ready"] = time.monotonic() - t0
        _drive(r, replayed)
        t0 = time.monotonic()
        worker.stop(signal.SIGTERM)
        r.timings["worker stop"] = time.monotonic() - t0
        _read_everything(r)
        (tmp / "timings.json").write_text(json.dumps(r.timings, indent=1))
        yield r
    finally:
        worker.stop(signal.SIGKILL)
        admin = AdminClient(dict(kafka_config))
        for name in admin.list_topics(timeout=30).topics:
            if name.startswith(prefix):
                factory.track(name)
        factory.cleanup()


def _step(r: Run, name: str, fn: Any) -> Any:
    """Run one step of the flow; a step that does not reach its state is recorded in
    ``r.problems`` (checked by test_the_run_reached_every_state) and the run goes on."""
    t0 = time.monotonic()
    try:
        return fn()
    except (TimeoutError, AssertionError, KeyError) as exc:
        r.problems[name] = f"{type(exc).__name__}: {exc}"
        return None
    finally:
        r.timings[name] = time.monotonic() - t0


def _drive(r: Run, replayed: dict[Path, list[dict]]) -> None:  # noqa: F811
    env, config = r.env, r.config
    t0 = time.monotonic()
    split = next(b for b in replayed if b.name == WITHDRAWAL_BUNDLE)
    r.expected = publish_all(env, [b for b in replayed if b != split], replayed)
    r.timings["publish bundles"] = time.monotonic() - t0

    # a withdrawal: a fabric verdict decided on part of the evidence, taken back by the rest
    from connectors.registry import make_producer
    from connectors.runner import publish

    first, second, r.withdrawn = withdrawal_plan(split)
    r.expected.update((a["attribution_id"], a) for a in replayed[split])
    with make_producer(r.bootstrap, r.topic("observations")) as connector:
        publish(first, connector)
        _step(r, "the verdict to withdraw published", lambda: read_topic(
            config, r.topic("attributions"), timeout=90,
            until=lambda recs: all(current_state(recs).get(k) is not None for k in r.withdrawn)))
        time.sleep(3.0)  # a fabric flush interval (FAULTSTREAM_FABRIC_FLUSH_S, 2 s)
        publish(second, connector)

    # topologies: one cluster's twice, two others' once and then deleted: with the CLI and
    # with a tombstone from a foreign producer (the headers of the record it deletes)
    yaml = str(FABRIC_BUNDLE / "topology.yaml")
    for cluster in (TOPOLOGY_KEPT, TOPOLOGY_KEPT, TOPOLOGY_GONE, TOPOLOGY_GONE_JAVA):
        out = cli(env, "connect", "topology", "--cluster", cluster, "--topology-yaml", yaml, "--topic", r.topic("topology"))
        assert out.returncode == 0, out.stderr
    out = cli(env, "connect", "topology", "--cluster", TOPOLOGY_GONE, "--delete", "--topic", r.topic("topology"))
    assert out.returncode == 0, out.stderr
    marks = watermarks(config, r.topic("topology"), catalogue(r.prefix)["topology"].partitions)
    published = console_consume(r.bootstrap, r.topic("topology"), sum(h - lo for lo, h in marks.values()))
    gone = next(rec for rec in published if rec.key == TOPOLOGY_GONE_JAVA)
    console_produce(r.bootstrap, r.topic("topology"),
                    [(TOPOLOGY_GONE_JAVA, None, [(k, v) for k, v in gone.headers if v is not None] or [("schema", "")])])

    # bad input: not JSON, a tombstone, an empty value, a record of schema version 99
    producer = Producer(with_partitioner(dict(config)))
    from connectors.publish import bundle_records
    from schemas.records import canonical_json

    good = json.loads(canonical_json(bundle_records(FABRIC_BUNDLE)[0][1]))
    r.bad_values = {**BAD_OBSERVATIONS, BAD_VERSION_KEY: json.dumps({**good, "schema_version": 99}).encode()}
    for key, value in r.bad_values.items():
        producer.produce(r.topic("observations"), key=key.encode(), value=value)
        r.injected.add(("observations", key))
    producer.produce(r.topic("remediation-commands"), key=BAD_COMMAND_KEY.encode(), value=b"{not json")
    r.injected.add(("remediation-commands", BAD_COMMAND_KEY))
    assert producer.flush(30) == 0

    # the remediation flow on the XID 79 bundle
    def proposals() -> None:
        def ready(records: list) -> bool:
            acts = flow_actions(records)
            return all(kind in acts and acts[kind]["state"] == "proposed" and all(g["passed"] for g in acts[kind]["guards"])
                       for kind in ("drain", "reboot"))
        acts = flow_actions(read_topic(config, r.topic("remediations"), until=ready, timeout=240))
        r.flow = {kind: acts[kind]["action_id"] for kind in ("drain", "reboot")}

    _step(r, "drain and reboot proposed", proposals)
    if r.flow:
        seen: dict[str, int] = {}

        def approve() -> None:
            for kind in ("drain", "reboot"):
                out = cli(env, "remediation", "approve", r.flow[kind], "--by", "alice", "--reason", "checked")
                assert out.returncode == 0, out.stderr
            out = cli(env, "remediation", "reset-breaker", "--cluster", FLOW_CLUSTER, "--by", "alice", "--reason",
                      "checked")
            assert out.returncode == 0, out.stderr

            def executed(records: list) -> bool:
                acts = flow_actions(records)
                seen["drain"] = acts.get("drain", {}).get("sequence", 0)
                return (acts.get("reboot", {}).get("state") == "done" and acts.get("drain", {}).get("state") == "executing"
                        and acts["drain"].get("result", "").endswith("awaiting certification"))
            read_topic(config, r.topic("remediations"), until=executed, timeout=120)

        _step(r, "approved, reboot done, drain awaiting certification", approve)

        def certify(path: Path, host: str = FLOW_HOST, finished: str | None = None) -> None:
            finished = finished or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            out = cli(env, "connect", "certifications", str(path), "--host", host, "--cluster", FLOW_CLUSTER,
                      "--finished-at", finished, "--topic", r.topic("certifications"))
            assert out.returncode == 0, out.stderr

        def failed_run() -> None:
            before = seen["drain"]
            certify(CERTS / "dcgm-diag-r3-4x-fail.txt")
            read_topic(config, r.topic("remediations"), timeout=120,
                       until=lambda recs: flow_actions(recs).get("drain", {}).get("sequence", 0) > before)

        _step(r, "failed certification recorded", failed_run)
        # two that cannot apply, dead-lettered: one finished before the drain started, one in
        # 2099 (after the worker's clock); and one of a host no action awaits (recorded as a
        # known-healthy host, not an error)
        _step(r, "certifications that cannot apply published", lambda: (
            certify(CERTS / "dcgm-diag-r2-3x-pass.json", finished="2001-01-01T00:00:00Z"),
            certify(CERTS / "dcgm-diag-r2-3x-pass.json", finished="2099-01-01T00:00:00Z"),
            certify(CERTS / "dcgm-diag-r2-3x-pass.json", host="node-z99")))

        def passed_run() -> None:
            certify(CERTS / "dcgm-diag-r2-3x-pass.json")
            read_topic(config, r.topic("remediations"), until=lambda recs: flow_actions(recs).get("drain", {}).get("state")
                       == "done", timeout=120)

        _step(r, "drain done after a passing certification", passed_run)

    _step(r, "the verdict withdrawn, then tombstoned", lambda: read_topic(
        config, r.topic("attributions"), timeout=120,
        until=lambda recs: all(k in current_state(recs) and current_state(recs)[k] is None for k in r.withdrawn)))
    _step(r, "every verdict equals replay's", lambda: read_topic(
        config, r.topic("attributions"), until=verdicts_settled(r.expected), timeout=300))
    r.partitions = {logical: len(AdminClient(dict(config)).list_topics(r.topic(logical), timeout=30)
                                 .topics[r.topic(logical)].partitions) for logical in LOGICAL}
    _step(r, "dead letters of the bad input", lambda: read_topic(
        config, r.topic("deadletter"), until=lambda recs: len(recs) >= len(r.bad_values) + 1, timeout=120))
    _step(r, "topics quiet", lambda: wait_quiet(config, {r.topic(t): n for t, n in r.partitions.items()}))


def _read_everything(r: Run) -> None:
    """Read every public topic with the Java console consumer; check nothing is missing."""
    for logical in LOGICAL:
        t0 = time.monotonic()
        topic = r.topic(logical)
        marks = watermarks(r.config, topic, r.partitions[logical])
        records = console_consume(r.bootstrap, topic, sum(h - lo for lo, h in marks.values()))
        r.timings[f"read {logical}"] = time.monotonic() - t0
        last = {}
        for rec in records:
            last[rec.partition] = max(last.get(rec.partition, -1), rec.offset)
        missing = {p: (last.get(p), h - 1) for p, (lo, h) in marks.items() if h > lo and last.get(p) != h - 1}
        assert not missing, f"{topic}: the console consumer stopped short of the end of {missing}"
        r.records[logical] = records


# -- the tests --------------------------------------------------------------------------------------


def test_the_run_reached_every_state(run: Run):
    """Every step of the run did what it should: proposals, approvals, executions, the
    certifications, verdicts equal to replay's, the dead letters, quiet topics."""
    assert run.flow, "no drain/reboot proposal of node-a02"
    assert run.problems == {}, json.dumps(run.problems, indent=1)
    assert all(run.records[t] for t in LOGICAL), {t: len(run.records[t]) for t in LOGICAL}


def test_every_record_of_every_public_topic_validates_with_ajv(run: Run):
    records = [rec for logical in LOGICAL for rec in run.records[logical]]
    code, report = validate(records, run.tmp, prefix=run.prefix)
    failing = {(f["topic"], f["key"]): f["errors"] for f in report["failures"]}
    injected = {(run.topic(t), k) for t, k in run.injected}
    unexpected = {f"{t} key={k}": errs for (t, k), errs in failing.items() if (t, k) not in injected}
    assert unexpected == {}, f"records that break their schema: {sample(unexpected)}"
    # the validator catches the bad input the test sent (all of it, and only it)
    assert set(failing) == injected, (set(failing) ^ injected)
    assert code == 1 and report["failed"] == len(injected)
    assert report["records"] == len(records)
    for logical in LOGICAL:
        summary = report["topics"][run.topic(logical)]
        assert summary["records"] == len(run.records[logical]) > 0, logical
        assert summary["channel"] == logical
        # contract v2, constant schema_version
        assert summary["schema_version_const"] == 2, (logical, summary["schema_file"])
        # contract v2, RFC 3339 twins: equal to the exact integer
        missing = TWIN_FIELDS[logical] - set(summary["twin_fields"])
        assert not missing, f"{logical}: time fields without an _utc twin: {sorted(missing)} (found {summary['twin_fields']})"
        assert summary["unsafe_integers"] > 0, logical  # times above 2**53, read exactly


def test_every_record_carries_the_contract_headers(run: Run):
    """Contract v2, headers: ``schema`` (:func:`schema_header`), ``schema_version`` ``2`` and
    ``content-type`` ``application/json`` on every record of every topic, tombstones
    included."""
    channels = run_node(CONTRACT / "asyncapi-check.mjs").json()["channels"]
    files = {logical: channels[logical]["messages"][0]["schema_file"] for logical in LOGICAL}
    wrong: dict[str, Any] = {}
    for logical in LOGICAL:
        want = {"schema": schema_header(files[logical]), "schema_version": "2", "content-type": "application/json"}
        for rec in run.conforming(logical):
            names = [k for k, _ in rec.headers]
            got = {k: rec.header(k) for k in CONTRACT_HEADERS}
            if got != want or any(names.count(k) != 1 for k in CONTRACT_HEADERS):
                wrong.setdefault(logical, {"want": want, "got": []})
                if len(wrong[logical]["got"]) < 3:
                    wrong[logical]["got"].append({"key": rec.key, "offset": rec.offset, "headers": rec.headers,
                                                  "tombstone": rec.tombstone})
    assert wrong == {}, json.dumps(wrong, indent=1)


def test_every_key_follows_the_contract_and_lands_where_a_java_producer_puts_it(run: Run):
    """Contract v2, keys, and one partitioner for every producer: the partition of every record is
    murmur2 of its key (Kafka's Java producer)."""
    wrong: dict[str, list] = {}

    def bad(logical: str, rec: Record, why: str) -> None:
        wrong.setdefault(logical, [])
        if len(wrong[logical]) < 5:
            wrong[logical].append({"key": rec.key, "partition": rec.partition, "offset": rec.offset, "why": why})

    for logical in LOGICAL:
        for rec in run.conforming(logical):
            if rec.key is None:
                bad(logical, rec, "no key")
                continue
            if rec.partition != java_partition(rec.key, run.partitions[logical]):
                bad(logical, rec, f"partition {rec.partition}, murmur2 says {java_partition(rec.key, run.partitions[logical])}")
            if rec.tombstone:
                continue
            v = rec.json()
            if logical in ("observations", "topology"):
                want = v["host"] if logical == "observations" else v["cluster"]
            elif logical == "events":
                want = event_key(v)
            elif logical == "attributions":
                want = v["attribution_id"]
                if attribution_id(v) != want:
                    bad(logical, rec, f"attribution_id {want} is not the documented recipe's {attribution_id(v)} "
                                      f"(scope {v['scope']}, incident {v.get('incident_id')})")
            elif logical == "remediations":
                want = v["action_id"]
            elif logical == "remediation-commands":
                want = command_key(v)
            elif logical == "deadletter":
                want = v["source"]
            else:  # certifications
                want = v["host"]
            if rec.key != want:
                bad(logical, rec, f"key {rec.key!r}, the contract says {want!r}")
    assert wrong == {}, json.dumps(wrong, indent=1)
    # keys of the contract that the run must have produced
    commands = [rec.json() for rec in run.conforming("remediation-commands")]
    assert any(c["command"] == "reset_breaker" for c in commands), "no breaker reset on the commands topic"
    events = [rec.key for rec in run.conforming("events")]
    assert any(k.startswith("host:") for k in events), "no event without a workload (host:<cluster>/<host>)"


def test_lifecycle_semantics_are_in_the_records(run: Run):
    """Contract v2: withdrawal status and tombstone; tombstones only where an entity ends;
    monotonic updated_at; the latest record of a key last in the log."""
    problems: dict[str, Any] = {}
    for logical in LOGICAL:
        stones = [rec for rec in run.conforming(logical) if rec.tombstone]
        if stones and logical not in COMPACTED:
            problems[f"{logical}: tombstones on a topic that is not compacted"] = [r.key for r in stones[:5]]

    # attributions: revisions only grow along the log; a withdrawal is a status, then a tombstone
    by_key: dict[str, list[Record]] = {}
    for rec in sorted(run.conforming("attributions"), key=lambda r: (r.partition, r.offset)):
        by_key.setdefault(rec.key, []).append(rec)
    withdrawn = 0
    for key, recs in by_key.items():
        values = [None if r.tombstone else r.json() for r in recs]
        revisions = [v["revision"] for v in values if v is not None]
        if revisions != sorted(revisions):
            problems.setdefault("attribution revisions go backwards in the log", []).append((key, revisions))
        for i, v in enumerate(values):
            if v is None:
                before = next((p for p in reversed(values[:i]) if p is not None), None)
                if before is None or before.get("status") != "withdrawn":
                    problems.setdefault("tombstone not after a withdrawal", []).append(key)
                continue
            if v.get("status") not in ("provisional", "final", "withdrawn"):
                problems.setdefault("attribution status not provisional|final|withdrawn", []).append((key, v.get("status")))
            if (v.get("root_cause") or {}).get("code") == "superseded":
                problems.setdefault("a withdrawal as root cause 'superseded'", []).append(key)
            if v.get("status") == "withdrawn":
                withdrawn += 1
                if v.get("root_cause") is not None:
                    problems.setdefault("a withdrawal with a root cause", []).append(key)
                if not any(later is None for later in values[i + 1:]):
                    problems.setdefault("a withdrawal without a tombstone after it", []).append(key)

    # remediations: the highest sequence last, updated_at never decreasing with the sequence
    actions: dict[str, list[dict]] = {}
    for rec in sorted(run.conforming("remediations"), key=lambda r: (r.partition, r.offset)):
        if not rec.tombstone:
            actions.setdefault(rec.key, []).append(rec.json())
    for key, recs in actions.items():
        if recs[-1]["sequence"] != max(a["sequence"] for a in recs):
            problems.setdefault("a remediation whose last record is not its highest sequence", []).append(key)
        ordered = sorted(recs, key=lambda a: a["sequence"])
        times = [a["updated_at"] for a in ordered]
        if times != sorted(times):
            problems.setdefault("updated_at decreases with sequence", []).append(
                (key, [(a["sequence"], a["state"], a["updated_at_utc"]) for a in ordered]))
    assert problems == {}, sample(problems, 10)
    assert actions, "no remediation records"
    # the run withdrew the verdicts withdrawal_plan predicted, each then tombstoned
    assert run.withdrawn and withdrawn >= len(run.withdrawn), (withdrawn, run.withdrawn)
    assert all(by_key[k][-1].tombstone for k in run.withdrawn), {k: [r.tombstone for r in by_key.get(k, [])]
                                                                  for k in run.withdrawn}


def test_dead_letters_keep_the_original_bytes_in_standard_base64(run: Run):
    """Contract v2, dead-letter bytes: ``original`` is standard base64 of the bytes as
    received, ``null`` for a tombstone, ``""`` for an empty value; the key too. Contract v2,
    certifications that cannot apply: each is a dead letter with the reason. A topology
    tombstone deletes the topology: it is not a dead letter."""
    letters = [rec.json() for rec in run.conforming("deadletter")]
    by_key: dict[bytes | None, list[dict]] = {}
    for d in letters:
        key = d.get("original_key")
        by_key.setdefault(None if key is None else base64.b64decode(key, validate=True), []).append(d)
    problems: dict[str, Any] = {}
    for key, sent in run.bad_values.items():
        found = by_key.get(key.encode(), [])
        if len(found) != 1:
            problems[f"bad input {key!r}"] = f"{len(found)} dead letters: {found}"
            continue
        original = found[0]["original"]
        want = None if sent is None else base64.b64encode(sent).decode()
        if original != want:
            problems[f"bad input {key!r}"] = f"original {original!r}, want {want!r} (reason {found[0]['reason']!r})"
    commands = by_key.get(BAD_COMMAND_KEY.encode(), [])
    if [d["original"] for d in commands] != [base64.b64encode(b"{not json").decode()]:
        problems["bad command"] = commands
    for cluster in (TOPOLOGY_GONE, TOPOLOGY_GONE_JAVA):
        if cluster.encode() in by_key:
            problems[f"topology tombstone of {cluster} dead-lettered"] = by_key[cluster.encode()]

    def certification(d: dict) -> dict | None:
        try:
            value = json.loads(base64.b64decode(d["original"] or ""))
        except ValueError:
            return None
        return value if isinstance(value, dict) and "certification_id" in value else None

    def year(c: dict) -> int:
        return datetime.fromtimestamp(c["finished_at"] // 10**9, UTC).year

    not_applied = sorted((c["host"], year(c) if c["host"] == FLOW_HOST else None, d["reason"])
                         for d in letters if (c := certification(d)) is not None)
    reasons = [reason.split(":")[0] for *_, reason in not_applied]
    if [(host, y) for host, y, _ in not_applied] != [(FLOW_HOST, 2001), (FLOW_HOST, 2099)] or \
            reasons != ["certification not applied", "invalid certification"]:
        problems["certifications that cannot apply (finished 2001 and 2099 on node-a02)"] = not_applied
    assert problems == {}, json.dumps(problems, indent=1)


def test_the_asyncapi_document_maps_every_public_topic_to_a_schema_file(node_packages):
    """The AsyncAPI document parses with the official parser without errors, names every
    public topic of the catalogue (default prefix) and gives each a payload whose JSON Schema
    file is in schemas/json; a broken copy is refused."""
    result = run_node(CONTRACT / "asyncapi-check.mjs")
    report = result.json()
    assert result.returncode == 0 and report["ok"], (report["problems"], [d for d in report["diagnostics"]
                                                                           if d["severity"] == "error"])
    addresses = {name: ch["address"] for name, ch in report["channels"].items()}
    assert addresses == {name: spec.name for name, spec in catalogue("faultstream").items()}
    assert all(m["schema_file"] for ch in report["channels"].values() for m in ch["messages"]), report["channels"]
    # directions, as the worker sees them: people publish commands (the CLI), the worker reads them
    actions = {op["channels"][0]: op["action"] for op in report["operations"].values()}
    assert actions == {"observations": "receive", "events": "send", "attributions": "send", "remediations": "send",
                       "remediation-commands": "receive", "deadletter": "send", "topology": "receive",
                       "certifications": "receive"}


def test_the_asyncapi_check_refuses_a_broken_document(node_packages, tmp_path: Path):
    text = (ROOT / "schemas" / "asyncapi.yaml").read_text()
    broken = tmp_path / "asyncapi.yaml"
    broken.write_text(text.replace("$ref: '#/channels/attributions'", "$ref: '#/channels/no-such-channel'", 1))
    assert broken.read_text() != text
    result = run_node(CONTRACT / "asyncapi-check.mjs", "--asyncapi", str(broken))
    report = result.json()
    assert result.returncode == 1 and not report["ok"]
    assert any(d["severity"] == "error" and "no-such-channel" in json.dumps(d) for d in report["diagnostics"]), report


def test_the_validator_refuses_what_a_foreign_consumer_would_trip_over(node_packages, tmp_path: Path):
    """validate.mjs itself: a record as faultstream writes it passes; the same record after a
    JavaScript JSON.parse/stringify round trip (times rounded to doubles), a version-99
    record, a record without its headers and a dead letter with base64url bytes fail, each
    with the reason."""
    from connectors.publish import bundle_records
    from schemas.deadletter import DeadLetter
    from schemas.records import canonical_json

    # a time a double cannot hold (its last digits are not zero)
    obs = bundle_records(FABRIC_BUNDLE)[0][1].model_copy(update={"observed_at": 1714564800123456789})
    from schemas.wire import headers_for

    # the headers as faultstream's producers write them
    headers = [(k, v.decode()) for k, v in headers_for("Observation")]
    good = Record("t-v.observations", 0, 0, obs.host, canonical_json(obs), tuple(headers))
    rounded_value = json.loads(canonical_json(obs))
    rounded_value["observed_at"] = int(float(rounded_value["observed_at"]))  # what JSON.parse keeps
    assert rounded_value["observed_at"] != obs.observed_at
    rounded = Record("t-v.observations", 0, 1, obs.host, json.dumps(rounded_value), tuple(headers))
    v99 = Record("t-v.observations", 0, 2, obs.host, json.dumps({**json.loads(canonical_json(obs)), "schema_version": 99}),
                 tuple(headers[:1] + [("schema_version", "99")] + headers[2:]))
    bare = Record("t-v.observations", 0, 3, obs.host, canonical_json(obs), ())
    letter = json.loads(canonical_json(DeadLetter(source="agent.extract", reason="invalid json", original=b"\xfb\xff?>",
                                                  at_ns=obs.observed_at).with_id()))
    assert letter["original"] == "+/8/Pg=="
    urlsafe = Record("t-v.deadletter", 0, 0, "agent.extract", json.dumps({**letter, "original": "-_8_Pg"}),
                     tuple((k, v.decode()) for k, v in headers_for("DeadLetter")))

    code, report = validate([good], tmp_path, prefix="t-v")
    assert (code, report["failed"]) == (0, 0), report["failures"]
    code, report = validate([good, rounded, v99, bare, urlsafe], tmp_path, prefix="t-v")
    assert code == 1
    errors = {f["offset"] if f["topic"].endswith("observations") else "dl": " | ".join(f["errors"])
              for f in report["failures"]}
    assert set(errors) == {1, 2, 3, "dl"}, errors
    assert "observed_at_utc" in errors[1] and str(rounded_value["observed_at"]) in errors[1]
    assert "schema_version" in errors[2]
    assert all(f"header {h} missing" in errors[3] for h in CONTRACT_HEADERS)
    assert "/original" in errors["dl"] and "base64" in errors["dl"]


def test_the_example_node_consumer_ends_with_the_current_state(run: Run):
    """``examples/consumers/node/follow.mjs`` (kafkajs) reads the attributions and
    remediations topics from the beginning for a few seconds: its last line per key is the
    current state (latest revision, latest sequence, tombstoned keys ended), its times the
    ``_utc`` strings of the records."""
    result = run_node(EXAMPLE_NODE / "follow.mjs", "--bootstrap", run.bootstrap, "--prefix", run.prefix,
                      "--from-beginning", "--idle-exit-s", "6", timeout_s=180)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines and lines[-1].startswith("summary "), result.stdout[-2000:]
    seen: dict[tuple[str, str], str] = {}
    for line in lines[:-1]:
        kind, key, rest = line.split(" ", 2)
        seen[(kind, key)] = rest

    want: dict[tuple[str, str], str] = {}
    for rec in latest_by_offset(run.conforming("attributions")).values():
        if rec.tombstone:
            continue
        v = rec.json()
        scope = v["scope"]
        code = (v.get("root_cause") or {}).get("code") or "-"
        want[("attribution", rec.key)] = (f"rev {v['revision']} {v['status']} {code} decided {v['decided_at_utc']} "
                                          f"scope {scope['kind']} {scope['cluster'] or '-'}/{scope['id']}")
    for rec in latest_by_offset(run.conforming("remediations")).values():
        if rec.tombstone:
            continue
        v = rec.json()
        target = v["target"].get("host") or v["target"].get("port") or "-"
        want[("remediation", rec.key)] = (f"seq {v['sequence']} {v['state']} {v['action']} {target} "
                                          f"updated {v['updated_at_utc']}")
    live = {k: v for k, v in seen.items() if v != "ended"}
    assert live == want, sample({f"{k}": (live.get(k), want.get(k)) for k in set(live) | set(want) if live.get(k) != want.get(k)})
    n_att = sum(1 for kind, _ in want if kind == "attribution")
    assert lines[-1] == f"summary attributions {n_att} remediations {len(want) - n_att}"
    # a verdict withdrawn and tombstoned: the consumer held it, then ended it
    ended = {k for k, v in seen.items() if v == "ended"}
    stoned = {("attribution", r.key) for r in latest_by_offset(run.conforming("attributions")).values() if r.tombstone}
    assert ended == stoned and {("attribution", k) for k in run.withdrawn} <= ended, (ended, stoned)


def test_compaction_leaves_the_current_state(run: Run):
    """The compacted topics after a real log-cleaner pass: one record per key (the roll copy
    aside), the latest one of each key as before, every verdict equal to replay's, the flow's
    actions done, no verdict for a withdrawn scope and no topology for a deleted cluster."""
    before = {logical: run.records[logical] for logical in COMPACTED}
    rolled, took = force_compaction(run.config, {run.topic(t): recs for t, recs in before.items()})
    run.timings["log cleaner"] = took
    copies = {(c.topic, c.partition): c.offset for c in rolled}
    after: dict[str, list[Record]] = {}
    for logical in COMPACTED:
        topic = run.topic(logical)
        counts = _count(run.config, topic, run.partitions[logical])
        after[logical] = console_consume(run.bootstrap, topic, counts)
    for logical in COMPACTED:
        kept = [r for r in after[logical] if copies.get((run.topic(logical), r.partition)) != r.offset]
        keys = [r.key for r in kept]
        assert len(keys) == len(set(keys)), f"{logical}: keys left twice after compaction"
        old, new = latest_by_offset(before[logical]), latest_by_offset(after[logical])
        assert set(new) <= set(old)
        lost = {k: (o.value, o.headers) for k, o in old.items() if not o.tombstone and (
            k not in new or (new[k].value, new[k].headers) != (o.value, o.headers))}
        assert lost == {}, f"{logical}: compaction lost the latest record of {sample(list(lost))}"
        ended = {k for k, o in old.items() if o.tombstone}
        assert not [r.key for r in after[logical] if r.key in ended and not r.tombstone], \
            f"{logical}: a deleted key still has a value after compaction"
    assert len(after["attributions"]) < len(before["attributions"])  # revisions were compacted away
    assert len(after["remediations"]) < len(before["remediations"])  # transitions too

    verdicts = {k: r.json() for k, r in latest_by_offset(after["attributions"]).items() if not r.tombstone}
    differ = {k: v["scope"] for k, v in run.expected.items() if k not in verdicts or comparable(verdicts[k]) != comparable(v)}
    assert differ == {}, f"verdicts after compaction differ from replay's: {sample(differ)}"
    withdrawn = {r.key for r in before["attributions"] if not r.tombstone and r.json().get("status") == "withdrawn"}
    assert run.withdrawn <= withdrawn and not withdrawn & set(verdicts), "a withdrawn scope keeps a verdict"
    (run.tmp / "compaction.json").write_text(json.dumps({
        "log cleaner s": took, "records before": {t: len(before[t]) for t in COMPACTED},
        "records after (roll copies included)": {t: len(after[t]) for t in COMPACTED},
        "withdrawn": sorted(withdrawn)}, indent=1))
    actions = {k: r.json() for k, r in latest_by_offset(after["remediations"]).items() if not r.tombstone}
    assert {kind: actions[aid]["state"] for kind, aid in run.flow.items()} == {"drain": "done", "reboot": "done"}
    topologies = {k for k, r in latest_by_offset(after["topology"]).items() if not r.tombstone}
    assert TOPOLOGY_KEPT in topologies and not {TOPOLOGY_GONE, TOPOLOGY_GONE_JAVA} & topologies
    assert sum(1 for r in after["topology"] if r.key == TOPOLOGY_KEPT and not r.tombstone) <= 2  # kept + roll copy


def _count(config: dict[str, str], topic: str, partitions: int) -> int:
    """How many records ``topic`` holds now (read to the end of every partition)."""
    consumer = Consumer(dict(config, **{"group.id": f"contract-count-{os.urandom(6).hex()}",
                                        "enable.partition.eof": True, "auto.offset.reset": "earliest",
                                        "enable.auto.commit": False}))
    from confluent_kafka import OFFSET_BEGINNING

    marks = watermarks(config, topic, partitions)
    todo = {p for p, (lo, h) in marks.items() if h > lo}
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
    n = 0
    deadline = time.monotonic() + 60
    try:
        while todo and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                todo.discard(msg.partition())
                continue
            n += 1
            if msg.offset() >= marks[msg.partition()][1] - 1:
                todo.discard(msg.partition())
    finally:
        consumer.close()
    assert not todo, f"{topic}: could not read partitions {todo} to the end"
    return n
