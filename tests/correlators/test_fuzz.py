"""Fuzzing (hypothesis) of everything that reads a record: the pure pipeline
(``correlators.pipeline.Pipeline.ingest`` / ``apply``) and every agent of a real worker.

Inputs are real records of the example incidents (``connectors.publish.bundle_records``) and
the internal messages the pipeline makes of them, mutated (a field replaced by a random JSON
value, huge integers, deep nesting, a wrong type), plus random bytes and tombstones.

* Pure: a message either fails with a clear ``pydantic.ValidationError`` / ``ValueError``
  and leaves the stores unchanged, or gives effects; never another exception.
* Worker (real broker, one ``faultstream worker`` with ClickHouse): every record sent to the
  observations, topology, remediation-commands and internal by-workload / by-fabric topics is
  processed or dead-lettered (``in = processed + dead-lettered``, from /metrics and the
  dead-letter topic), the worker stays alive, and a valid incident published after the
  garbage still gets its verdict and its ClickHouse rows.

Bounded for CI: ``FUZZ_EXAMPLES`` (default 50) examples per test.
"""

from __future__ import annotations

import copy
import json
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from correlators.config import EngineConfig
from correlators.pipeline import Pipeline, Route, Stores
from schemas.messages import PARSERS, message_json
from schemas.records import Observation, canonical_json

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "incidents"
FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "50"))


@lru_cache(maxsize=1)
def real_records() -> tuple[list[dict], dict[str, list[dict]]]:
    """Observations of two example incidents (JSON data) and the internal messages the
    pipeline routes for them, by channel."""
    from connectors.publish import bundle_records
    from correlators.config import WindowPolicy

    bundles = sorted(p.parent for p in EXAMPLES.glob("*/expected.yaml"))
    picked = [b for b in bundles if "rc15" in b.name or "fabric" in b.name][:2] or bundles[:2]
    observations: list[dict] = []
    for bundle in picked:
        records, _ = bundle_records(bundle)
        # the head records (workload, topology), then a sample of the lines
        observations += [json.loads(canonical_json(r)) for r in records[:3] + records[3::40][:30]]
    pipeline = Pipeline(EngineConfig.default(window=WindowPolicy(idle_timeout_s=None)))
    messages: dict[str, list[dict]] = {"workload": [], "host": [], "fabric": []}
    for data in observations:
        for effect in pipeline.ingest(Observation.model_validate(data)):
            if isinstance(effect, Route) and len(messages[effect.channel]) < 40:
                messages[effect.channel].append({"key": effect.key, "value": json.loads(message_json(effect.message))})
    return observations, messages


json_scalars = st.one_of(
    st.none(), st.booleans(), st.text(max_size=20),
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([2**31, 2**63, -(2**63) - 1, 2**64, 10**30, -1, 0]),
)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


def deep(n: int) -> Any:
    value: Any = 1
    for _ in range(n):
        value = [value]
    return value


def variant(draw: Any, value: Any, depth: int = 0) -> Any:
    """``value`` changed: mostly a value of the same type (so the record often still passes
    the edge and reaches the pipeline), sometimes anything (wrong type, huge, deep)."""
    roll = draw(st.integers(0, 9))
    if roll == 0:
        return draw(json_values)
    if roll == 1:
        return deep(draw(st.integers(20, 300)))
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return draw(st.one_of(st.integers(-(2**40), 2**40), st.sampled_from([0, -1, 2**31 - 1, 2**63 - 1, value + 1])))
    if isinstance(value, float):
        return draw(st.floats(-1e12, 1e12))
    if isinstance(value, str):
        return draw(st.one_of(st.text(max_size=30), st.just(value[: len(value) // 2]), st.just(value + "\x00\ufffd")))
    if isinstance(value, list):
        if value and draw(st.booleans()):
            out = list(value)
            i = draw(st.integers(0, len(out) - 1))
            out[i] = variant(draw, out[i], depth + 1)
            return out
        return draw(st.permutations(value)) if value and draw(st.booleans()) else value[: len(value) // 2]
    if isinstance(value, dict) and value:
        out = dict(value)
        key = draw(st.sampled_from(sorted(out)))
        if draw(st.integers(0, 5)) == 0:
            del out[key]
        else:
            out[key] = variant(draw, out[key], depth + 1)
        return out
    return draw(json_values)


@st.composite
def mutated(draw: Any, records: list[dict]) -> dict:
    """A real record with one to three changes (top level or nested, see :func:`variant`)."""
    record = copy.deepcopy(draw(st.sampled_from(records)))
    for _ in range(draw(st.integers(1, 3))):
        record = variant(draw, record)
    return record if isinstance(record, dict) else {"value": record}


def snapshot(stores: Stores) -> dict[str, Any]:
    return {name: copy.deepcopy(dict(getattr(stores, name))) for name in stores.__dataclass_fields__}


# -- pure: the pipeline ----------------------------------------------------------------------


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pipeline_ingest_fails_clearly_or_gives_effects(data: Any) -> None:
    observations, _ = real_records()
    pipeline = Pipeline(EngineConfig.default())
    for good in observations[:3]:  # a workload and its topology are known
        pipeline.ingest(Observation.model_validate(good))
    record = data.draw(mutated(observations))
    before = snapshot(pipeline.stores)
    try:
        obs = Observation.model_validate_json(json.dumps(record))
    except ValidationError:
        event("refused at the edge")
        return  # the worker dead-letters it
    try:
        effects = pipeline.ingest(obs)
    except (ValidationError, ValueError) as exc:
        event(f"refused by the pipeline: {type(exc).__name__}")
        assert snapshot(pipeline.stores) == before  # nothing half-applied
        return
    event("effects")
    assert isinstance(effects, list)


@pytest.mark.parametrize("attributes", [{}, {"workload": None}, {"workload": [1, 2]}, {"topology": "x"}])
def test_pipeline_refuses_a_record_without_its_spec_clearly(attributes: dict) -> None:
    """Found by the fuzzer: a scheduler (or topology) record whose spec is missing or of the
    wrong type is a ValidationError / ValueError, with the stores unchanged."""
    observations, _ = real_records()
    head = next(o for o in observations if o["format"] == ("topology_yaml" if "topology" in attributes else "workload_yaml"))
    pipeline = Pipeline(EngineConfig.default())
    before = snapshot(pipeline.stores)
    with pytest.raises((ValidationError, ValueError)):
        pipeline.ingest(Observation.model_validate({**head, "attributes": attributes}))
    assert snapshot(pipeline.stores) == before


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), channel=st.sampled_from(["workload", "host", "fabric"]))
def test_pipeline_apply_fails_clearly_or_gives_effects(data: Any, channel: str) -> None:
    observations, messages = real_records()
    pipeline = Pipeline(EngineConfig.default())
    for good in observations[:3]:
        pipeline.ingest(Observation.model_validate(good))
    item = data.draw(st.sampled_from(messages[channel]))
    raw = data.draw(st.one_of(
        st.just(json.dumps(data.draw(mutated([item["value"]])))),
        st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
    ))
    key = data.draw(st.one_of(st.just(item["key"]), st.text(max_size=12)))
    parse = PARSERS[channel]
    before = snapshot(pipeline.stores)
    try:
        message = parse(raw)
    except ValidationError:
        event("refused at the edge")
        return
    try:
        effects = pipeline.apply(channel, key, message, now=0.0)
    except (ValidationError, ValueError) as exc:
        event(f"refused by the pipeline: {type(exc).__name__}")
        assert snapshot(pipeline.stores) == before
        return
    event("effects")
    assert isinstance(effects, list)


# -- a real worker: every agent ----------------------------------------------------------------

from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: E402,F401
from tests.streams.test_stream import SOURCES, consume, latest_verdicts, own_cluster, stream_env  # noqa: E402,F401


def garbage(records: list[dict]) -> Any:
    """Raw message values for a topic whose real records are ``records`` (JSON data)."""
    as_bytes = st.builds(lambda d: json.dumps(d).encode(), mutated(records))
    return st.one_of(
        as_bytes, as_bytes, as_bytes,
        st.binary(max_size=200),
        st.just(None),  # tombstone
        st.just(b"[" * 100_000),
        st.builds(lambda d: json.dumps(d).encode(), json_values),
        st.sampled_from([b'{"schema_version": 2, "kind": "topology"}', b"1" * 5000, b'{"kind": "event"}']),
    )


def high_watermarks(bootstrap: str, topic: str) -> int:
    """Messages ever written to ``topic`` (sum of its partitions' high watermarks)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-watermarks"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts)
    finally:
        c.close()


def test_worker_agents_survive_fuzzed_records_and_every_sink_progresses(stream_env, kafka_bootstrap, tmp_path):
    from confluent_kafka import Producer

    from transport.kafka_settings import with_partitioner

    prefix, env = stream_env["prefix"], stream_env["env"]
    app_id = env["FAULTSTREAM_APP_ID"]
    ch_dir = tmp_path / "clickhouse"
    worker = stream_env["start"](FAULTSTREAM_CLICKHOUSE=f"chdb://{ch_dir}")
    observations, messages = real_records()
    topology = [o for o in observations if o["kind"] == "topology"] or observations[:1]
    command = {"schema_version": 2, "command_id": "", "command": "approve", "action_id": "act-0", "cluster": "c1",
               "by": "alice", "reason": "ok", "at": 1_796_001_664_123_000_000, "key_id": "", "signature": ""}
    topics = {
        f"{prefix}.observations": garbage(observations),
        f"{prefix}.topology": garbage(topology),
        f"{prefix}.remediation-commands": garbage([command]),
        f"{app_id}-by-workload": garbage([m["value"] for m in messages["workload"]]),
        f"{app_id}-by-host": garbage([m["value"] for m in messages["host"]]),
        f"{app_id}-by-fabric": garbage([m["value"] for m in messages["fabric"]]),
    }
    producer = Producer(with_partitioner({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 10_000_000}))
    sent = {t: 0 for t in topics}
    refused: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            sent[msg.topic()] += 1
        else:
            refused.append(f"{msg.topic()}: {err}")

    def feeder(topic: str, strategy: Any) -> Any:
        @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        # keys are never empty: the topology topic is compacted (a keyless record is refused)
        @given(value=strategy, key=st.one_of(st.binary(min_size=1, max_size=12), st.just(b"c1")))
        def feed(value: bytes | None, key: bytes) -> None:
            producer.produce(topic, key=key, value=value, on_delivery=delivered)
            producer.poll(0)

        return feed

    for topic, strategy in topics.items():
        feeder(topic, strategy)()
    assert producer.flush(30) == 0
    assert not refused
    assert all(sent.values()), sent

    def agents(m: dict[str, float], agent: str) -> float:
        return sum(v for k, v in m.items() if k.startswith("faultstream_agent_inputs_total{") and f'agent="{agent}"' in k)

    def command_letters(ms: list[Any]) -> int:
        return sum(1 for x in ms if json.loads(x.value())["position"]["topic"] == f"{prefix}.remediation-commands")

    deadline = time.monotonic() + 120
    while True:
        assert worker.proc.poll() is None, worker.log.read_text(errors="replace")[-3000:]
        m = worker.metrics()
        # every record on a topic is read by its agent and either processed or dead-lettered
        ins = {agent: high_watermarks(kafka_bootstrap, topic) for agent, topic in (
            ("ingest", f"{prefix}.observations"), ("topology", f"{prefix}.topology"),
            ("workload", f"{app_id}-by-workload"), ("host", f"{app_id}-by-host"), ("fabric", f"{app_id}-by-fabric"))}
        outs = {agent: agents(m, agent) for agent in ins}
        if ins == outs:
            break
        assert time.monotonic() < deadline, f"in {ins} != processed + dead-lettered {outs}"
        time.sleep(1)
    assert ins["ingest"] == sent[f"{prefix}.observations"]
    assert ins["topology"] == sent[f"{prefix}.topology"]
    assert m["faultstream_observations_total"] == m["faultstream_observations_processed_total"] + sum(
        v for k, v in m.items() if k.startswith('faultstream_agent_inputs_total{agent="ingest",outcome="dead_lettered"'))
    # no fuzzed command is signed: each is dead-lettered
    letters = consume(kafka_bootstrap, f"{prefix}.deadletter", timeout=90,
                      until=lambda ms: command_letters(ms) >= sent[f"{prefix}.remediation-commands"])
    assert command_letters(letters) == sent[f"{prefix}.remediation-commands"]
    assert "Crashed reason" not in worker.log.read_text(errors="replace")  # no agent crashed on the way

    # every sink still progresses: a valid incident after the garbage gets its verdict and rows
    bundle = own_cluster(next(b for b in SOURCES if "rc15" in b.name), tmp_path)
    from connectors.publish import bundle_records

    records, _ = bundle_records(bundle)
    for r in records:
        producer.produce(f"{prefix}.observations", key=r.host.encode(), value=canonical_json(r).encode())
    assert producer.flush(30) == 0

    def verdict(ms: list[Any]) -> bool:
        return any(v["scope"]["cluster"] == bundle.name and v["scope"]["kind"] == "workload" and v["status"] == "final"
                   for v in latest_verdicts(ms).values())

    latest = latest_verdicts(consume(kafka_bootstrap, f"{prefix}.attributions", until=verdict, timeout=120))
    job = next(v for v in latest.values() if v["scope"]["cluster"] == bundle.name and v["scope"]["kind"] == "workload")
    assert job["root_cause"]["code"] == "gpu.xid.79"
    stored = worker.metrics()
    deadline = time.monotonic() + 60
    while stored.get('faultstream_clickhouse_rows_total{table="attributions"}', 0) < 1 or \
            stored.get('faultstream_clickhouse_rows_total{table="observations"}', 0) < len(records):
        assert time.monotonic() < deadline, {k: v for k, v in stored.items() if "clickhouse" in k}
        time.sleep(1)
        stored = worker.metrics()
    assert worker.proc.poll() is None
