"""NVSentinel interop (``connectors/nvsentinel.py``): HealthEvents in, final verdicts out.

Inputs under ``tests/data/nvsentinel/`` are written in the JSON forms NVSentinel produces, with
the field names and enum values of its ``health_event.proto``: a syslog-health-monitor XID 79
event (protojson, as its XID handler fills it: ``"XID 79; Resolution: RESTART_BM"``, PCI and GPU
UUID entities, the kernel line in ``JOURNAL_MESSAGE``), gpu-health-monitor DCGM watch events
(``GpuMemWatch`` / ``GpuThermalWatch``, GPU index, PCI and ``GPU_UUID`` entities, DCGM's
message templates) and their recovery, the event exporter's CloudEvent (numeric enum) and a
MongoDB document (lower-case keys, ``{seconds, nanos}``). ``verdicts/`` holds verdicts the engine
gave for example bundles (``faultstream replay examples/incidents/<bundle> --json``). The Kafka
test uses the real broker of ``tests/kafka_fixtures.py``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from typer.testing import CliRunner

from connectors.cursor import CursorStore
from connectors.nvsentinel import (
    BridgeOptions,
    HealthEvent,
    HealthEventError,
    HealthEventFiles,
    health_event_values,
    is_final,
    parse_health_event,
    parse_timestamp,
    recommended_action,
    to_observation,
    verdict_health_events,
)
from correlators.remediation.policy import load_policy
from correlators.rules import load_rule_pack
from schemas.deadletter import DeadLetter
from schemas.records import TIME_QUALITY_EXACT, Attribution, Observation
from schemas.utc import format_utc
from tests.connectors.test_files_connector import consume, settings  # noqa: F401
from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: F401

DATA = Path(__file__).resolve().parents[1] / "data" / "nvsentinel"
XID79_NS = 1_796_001_664_512_339_081  # 2026-11-30T01:21:04.512339081Z
UUID3 = "GPU-00000000-0000-4000-8000-000000000003"


def read_all(*names: str) -> list:
    src = HealthEventFiles([DATA / n for n in names], cursor=None)
    return src.poll()


def verdict(name: str) -> Attribution:
    return Attribution.model_validate(json.loads((DATA / "verdicts" / f"{name}.json").read_text()))


# -- HealthEvents -> observations ----------------------------------------------------------------

def test_syslog_xid79_event_becomes_a_health_event_observation():
    [obs] = read_all("syslog-xid79.json")
    assert isinstance(obs, Observation)
    assert (obs.kind, obs.format, obs.host, obs.source.connector) == ("health_event", "nvsentinel", "node-a01", "nvsentinel")
    assert (obs.observed_at, obs.time_source, obs.time_quality) == (XID79_NS, "line", TIME_QUALITY_EXACT)
    assert (obs.gpu.uuid, obs.gpu.pci_bus_id, obs.gpu.index) == (UUID3, "0000:9c:00", None)
    a = obs.attributes
    assert (a["agent"], a["checkName"], a["componentClass"]) == ("syslog-health-monitor", "SysLogsXIDError", "GPU")
    assert (a["isFatal"], a["isHealthy"], a["recommendedAction"], a["errorCode"]) == (True, False, "RESTART_BM", ["79"])
    assert a["generatedTimestamp"] == "2026-11-30T01:21:04.512339081Z"
    assert "NVRM: Xid (PCI:0000:9c:00): 79" in a["metadata"]["JOURNAL_MESSAGE"]
    assert obs.body == ("NVSentinel HealthEvent syslog-health-monitor/SysLogsXIDError on node-a01: unhealthy, "
                        "fatal=true, recommendedAction=RESTART_BM, errorCode=79, component=GPU, "
                        f"entities=PCI=0000:9c:00 GPU={UUID3}; message: XID 79; Resolution: RESTART_BM")
    # the engine reads it as the XID it reports (rules/nvsentinel.yaml): catalog meaning and GPU
    [ev] = load_rule_pack().extract(obs)
    assert (ev.type, ev.host, ev.gpu.pci_bus_id, ev.at) == ("gpu.xid", "node-a01", "0000:9c:00", XID79_NS)
    assert {k: ev.attributes[k] for k in ("xid", "reported_by", "action", "fatal", "immediate_action")} == {
        "xid": 79, "reported_by": "nvsentinel", "action": "RESTART_BM", "fatal": "true",
        "immediate_action": "RESTART_BM"}
    assert "pid" not in ev.attributes  # the kernel line's pid is not claimed
    assert obs.position.file == str(DATA / "syslog-xid79.json") and obs.position.line == 1


def test_dcgm_watch_events_are_read_by_the_dcgm_rules_and_recoveries_are_not():
    dbe, thermal, recovered = read_all("gpu-health-monitor-dcgm.jsonl")
    assert (dbe.host, dbe.gpu.index, dbe.gpu.pci_bus_id, dbe.gpu.uuid) == (
        "node-a02", 1, "0000:1b:00", "GPU-00000000-0000-4000-8000-000000000012")
    assert dbe.observed_at == 1_796_001_910_004_118_000 and [o.position.line for o in (dbe, thermal, recovered)] == [1, 2, 3]
    pack = load_rule_pack()
    [ev] = pack.extract(dbe)
    assert (ev.type, ev.host, ev.gpu.index) == ("dcgm.failure", "node-a02", 1)
    assert {k: ev.attributes[k] for k in ("fr_code", "severity", "fault_class", "detail")} == {
        "fr_code": "DCGM_FR_VOLATILE_DBE_DETECTED", "severity": "ISOLATE", "fault_class": "gpu_hardware",
        "detail": "Detected 2 volatile double-bit ECC error(s) in GPU 1."}
    [ev] = pack.extract(thermal)
    assert (ev.attributes["fr_code"], ev.attributes["severity"], ev.gpu.index) == ("DCGM_FR_CLOCKS_EVENT_THERMAL", "MONITOR", 3)
    assert recovered.attributes["isHealthy"] is True and recovered.attributes["errorCode"] == ["DCGM_FR_VOLATILE_DBE_DETECTED"]
    assert "DCGM_FR_" not in recovered.body and pack.extract(recovered) == []


def test_exporter_cloudevent_and_mongodb_document_read_like_protojson():
    [proto] = read_all("syslog-xid79.json")
    [cloud] = read_all("event-exporter-cloudevent.json")
    [mongo] = read_all("mongodb-document.json")
    for obs in (cloud, mongo):
        assert (obs.host, obs.observed_at, obs.gpu.pci_bus_id, obs.gpu.uuid) == ("node-a01", XID79_NS, "0000:9c:00", UUID3)
        assert obs.attributes["recommendedAction"] == "RESTART_BM"  # the exporter's number 24
        assert obs.attributes["generatedTimestamp"] == proto.attributes["generatedTimestamp"]
    assert cloud.cluster == "c1" and mongo.cluster == "" and proto.cluster == ""
    assert mongo.attributes["checkName"] == "SysLogsXIDError" and mongo.attributes["isFatal"] is True


def test_batches_go_struct_keys_and_enum_forms():
    raw = {"version": 1, "events": [
        {"NodeName": "node-a04", "CheckName": "GpuNvlinkWatch", "Agent": "gpu-health-monitor", "IsFatal": True,
         "RecommendedAction": 5, "ErrorCode": ["DCGM_FR_NVLINK_DOWN"], "ProcessingStrategy": 2,
         "EntitiesImpacted": [{"EntityType": "GPU", "EntityValue": "4"}],
         "GeneratedTimestamp": {"seconds": 1796001700, "nanos": 5}},
        {"nodeName": "node-a04", "checkName": "SysLogsXIDError", "recommendedAction": "NODE_REBOOT", "errorCode": "74"},
    ]}
    items = health_event_values(raw)
    assert len(items) == 2
    (first, at1), (second, at2) = parse_health_event(items[0][0]), parse_health_event(items[1][0])
    assert (first.nodeName, first.recommendedAction, first.processingStrategy, at1) == (
        "node-a04", "CONTACT_SUPPORT", "STORE_ONLY", 1_796_001_700_000_000_005)
    assert first.entitiesImpacted[0].entityValue == "4" and first.generatedTimestamp == "2026-11-30T01:21:40.000000005Z"
    assert (second.recommendedAction, second.errorCode, at2) == ("NODE_REBOOT", ["74"], None)  # the older enum's name
    obs = to_observation(second, at2, instance="t", transport_ns=1_796_001_701_000_000_000)
    assert (obs.observed_at, obs.time_source) == (1_796_001_701_000_000_000, "transport")


@pytest.mark.parametrize("obj, reason", [
    ([1], "not a JSON object"),
    ({"checkName": "X"}, "no nodeName"),
    ({"nodeName": "node-a01"}, "no checkName"),
    ({"nodeName": "node-a01", "checkName": "X", "recommendedAction": "REBOOT_NOW"}, "not a name of the enum"),
    ({"nodeName": "node-a01", "checkName": "X", "generatedTimestamp": "yesterday"}, "not RFC 3339"),
    ({"nodeName": "node-a01", "checkName": "X", "generatedTimestamp": "1969-07-20T20:17:40Z"}, "outside 1990..2100"),
    ({"nodeName": "node-a01", "checkName": "X", "errorCode": [{"a": 1}]}, "errorCode is not a list of strings"),
    ({"nodeName": "node-a01", "checkName": "X", "isFatal": "maybe"}, "isFatal"),
])
def test_invalid_events_are_refused_with_a_reason(obj, reason):
    with pytest.raises(HealthEventError, match=reason):
        parse_health_event(obj[0] if isinstance(obj, list) else obj)


def test_bad_input_is_dead_lettered_and_the_next_event_is_read():
    records = read_all("bad.jsonl")
    dead = [r for r in records if isinstance(r, DeadLetter)]
    good = [r for r in records if isinstance(r, Observation)]
    assert [(d.position.line, d.reason) for d in dead] == [
        (1, "not a HealthEvent: no nodeName: the node the event is about is unknown"),
        (2, "not a HealthEvent: recommendedAction 'REBOOT_NOW' is not a name of the enum"),
        (3, "not a HealthEvent: generatedTimestamp '30/11/2026 01:30' is not RFC 3339"),
        (4, "invalid JSON: Expecting value at line 4"),
    ]
    lines = (DATA / "bad.jsonl").read_bytes().splitlines(keepends=True)
    assert dead[0].original == lines[0].rstrip(b"\n") and dead[3].original == lines[3]
    assert all(d.source == f"connector.nvsentinel:{DATA / 'bad.jsonl'}" and d.dead_letter_id for d in dead)
    [obs] = good
    assert (obs.host, obs.gpu.pci_bus_id, obs.position.line, obs.attributes["errorCode"]) == ("node-a03", "0000:07:00", 5, ["48"])


def test_file_follow_partial_value_cursor_restart_and_rewind(tmp_path):
    path = tmp_path / "events.jsonl"
    events = (DATA / "gpu-health-monitor-dcgm.jsonl").read_text().splitlines(keepends=True)
    path.write_text(events[0] + events[1][:100])  # the second still being written
    cursor = CursorStore(tmp_path / "cursor.json")
    src = HealthEventFiles([path], cursor=cursor)
    first = src.poll()
    assert len(first) == 1 and "bytes of an incomplete JSON value wait" in src.coverage()[0].detail
    cursor.save(src.checkpoint())
    assert cursor.load()["files"][str(path)]["offset"] == len(events[0].encode())
    with path.open("a") as fh:
        fh.write(events[1][100:] + events[2])
    again = HealthEventFiles([path], cursor=cursor)  # a restart
    second = again.poll()
    assert [o.position.line for o in second] == [2, 3]
    again.rewind()  # the delivery failed: the same records again
    assert [o.observation_id for o in again.poll()] == [o.observation_id for o in second]
    ids = {o.observation_id for o in first + second}
    assert ids == {o.observation_id for o in read_all_path(path)}


def read_all_path(path: Path) -> list:
    return HealthEventFiles([path], cursor=None).poll()


def test_rotated_file_is_read_from_its_start(tmp_path):
    path = tmp_path / "e.json"
    path.write_text((DATA / "syslog-xid79.json").read_text())
    cursor = CursorStore(tmp_path / "c.json")
    src = HealthEventFiles([path], cursor=cursor)
    assert len(src.poll()) == 1
    cursor.save(src.checkpoint())
    path.rename(tmp_path / "e.json.1")  # rotated: a new file (inode) under the name
    path.write_text((DATA / "mongodb-document.json").read_text())
    src = HealthEventFiles([path], cursor=cursor)
    [obs] = src.poll()
    assert obs.attributes["recommendedAction"] == "RESTART_BM" and obs.position.line == 1


@hsettings(max_examples=200, deadline=None)
@given(st.integers(min_value=631_152_000 * 10**9, max_value=4_102_444_800 * 10**9))
def test_timestamp_forms_agree(ns):
    secs, nanos = divmod(ns, 10**9)
    assert parse_timestamp(format_utc(ns)) == parse_timestamp({"seconds": secs, "nanos": nanos}) == ns
    offset = format_utc(ns).replace("Z", "+00:00")
    assert parse_timestamp(offset) == ns


# -- verdicts -> HealthEvents -------------------------------------------------------------------

def test_definitive_xid79_verdict_asks_for_a_reboot():
    [ev] = verdict_health_events(verdict("xid79-definitive"), load_policy())
    assert ev.model_dump(mode="json") == {
        "version": 1, "agent": "faultstream", "componentClass": "GPU", "checkName": "FaultstreamGpuHardware",
        "isFatal": True, "isHealthy": False,
        "message": "GPU 0000:02:00 on node-a02 fell off the bus (XID 79) [faultstream verdict on workload job-1006 "
                   "(c1), revision 1: gpu_hardware gpu.xid.79, quality definitive, confidence 1.00]",
        "recommendedAction": "RESTART_BM", "errorCode": ["gpu.xid.79", "79"],
        "entitiesImpacted": [{"entityType": "GPU", "entityValue": "1"}, {"entityType": "PCI", "entityValue": "0000:02:00"}],
        "metadata": {
            "faultstream_attribution_id": "att-2dc4877907761f69802e67cc", "faultstream_revision": "1",
            "faultstream_scope": "workload/job-1006", "faultstream_root_cause": "gpu.xid.79",
            "faultstream_domain": "gpu_hardware", "faultstream_quality": "definitive", "faultstream_confidence": "1.0000",
            "faultstream_ruleset_version": "2026.12.0+causal.1+fabric.1", "faultstream_cluster": "c1",
            "faultstream_policy_rule": "gpu-fell-off-bus"},
        "generatedTimestamp": "2026-11-30T01:31:10.000000000Z", "nodeName": "node-a02",
        "quarantineOverrides": None, "drainOverrides": None, "processingStrategy": "EXECUTE_REMEDIATION",
    }
    vm = verdict_health_events(verdict("xid79-definitive"), load_policy(), BridgeOptions(reboot_action="RESTART_VM"))
    assert vm[0].recommendedAction == "RESTART_VM"


def test_xid48_verdict_resets_the_gpu_by_uuid_else_reboots():
    att = verdict("xid48-definitive")
    [ev] = verdict_health_events(att, load_policy())
    assert (ev.recommendedAction, ev.isFatal, ev.nodeName, ev.errorCode) == ("COMPONENT_RESET", True, "node-a01", ["gpu.xid.48", "48"])
    assert [(e.entityType, e.entityValue) for e in ev.entitiesImpacted] == [
        ("GPU", "2"), ("PCI", "0000:9c:00"), ("GPU_UUID", "GPU-00000000-0000-4000-8000-000000001002")]
    att.culprits.gpus[0].uuid = None
    [ev] = verdict_health_events(att, load_policy())
    assert ev.recommendedAction == "RESTART_BM"  # NVSentinel resets a GPU by its UUID


def test_ambiguous_and_software_verdicts_are_not_fatal():
    [amb] = verdict_health_events(verdict("xid79-ambiguous"), load_policy())
    assert (amb.recommendedAction, amb.isFatal, amb.metadata["faultstream_quality"]) == ("NONE", False, "ambiguous")
    assert "faultstream_policy_rule" not in amb.metadata
    [app] = verdict_health_events(verdict("app-illegal-address"), load_policy())
    assert (app.checkName, app.componentClass, app.recommendedAction, app.isFatal) == (
        "FaultstreamSoftware", "INFRASTRUCTURE", "NONE", False)
    assert recommended_action(verdict("app-illegal-address"), load_policy()) == ("NONE", "software")


def test_scopes_outcomes_hosts_and_determinism():
    policy = load_policy()
    att = verdict("xid79-definitive")
    assert [e.model_dump_json() for e in verdict_health_events(att, policy)] == [
        e.model_dump_json() for e in verdict_health_events(verdict("xid79-definitive"), policy)]
    two = att.model_copy(deep=True)
    two.culprits.hosts = ["node-a03", "node-a02"]
    evs = verdict_health_events(two, policy)
    assert [e.nodeName for e in evs] == ["node-a02", "node-a03"] and all(e.entitiesImpacted == [] for e in evs)
    incident = att.model_copy(deep=True)
    incident.scope.kind = "incident"
    assert verdict_health_events(incident, policy) == []
    assert len(verdict_health_events(incident, policy, BridgeOptions(scopes=("workload", "incident")))) == 1
    done = att.model_copy(deep=True)
    done.outcome = "completed"
    assert verdict_health_events(done, policy) == []
    store = verdict_health_events(att, policy, BridgeOptions(processing_strategy="STORE_ONLY"))
    assert store[0].processingStrategy == "STORE_ONLY"
    withdrawn = att.model_copy(deep=True)
    withdrawn.root_cause = None  # a withdrawal names no cause
    assert verdict_health_events(withdrawn, policy) == [] and recommended_action(withdrawn, policy) == ("NONE", None)


def test_finality_from_status_or_the_older_final_flag():
    assert is_final({"status": "final"}) and not is_final({"status": "provisional"}) and not is_final({"status": "withdrawn"})
    assert is_final({"final": True}) and not is_final({"final": False}) and is_final({})


def test_a_published_health_event_reads_back_as_an_observation():
    [ev] = verdict_health_events(verdict("xid48-definitive"), load_policy())
    parsed, at = parse_health_event(json.loads(ev.model_dump_json()))
    assert parsed == ev and at == verdict("xid48-definitive").decided_at
    obs = to_observation(parsed, at, instance="t", transport_ns=0)
    assert (obs.host, obs.gpu.index, obs.gpu.uuid) == ("node-a01", 2, "GPU-00000000-0000-4000-8000-000000001002")


# -- Kafka ------------------------------------------------------------------------------------------

def _produce(config: dict, topic: str, items: list[tuple[str | None, bytes | None]]) -> None:
    from confluent_kafka import Producer

    p = Producer(dict(config))
    for key, value in items:
        p.produce(topic, key=key.encode() if key else None, value=value)
    assert p.flush(30) == 0


def test_kafka_round_trip_health_events_in_verdicts_out(settings, kafka_config, kafka_topic_factory):  # noqa: F811
    app = __import__("streams.cli", fromlist=["app"]).app
    boot = settings.bootstrap_servers
    events_in, obs, dl = kafka_topic_factory("he-in"), kafka_topic_factory("obs", partitions=3), kafka_topic_factory("dl")
    lines = (DATA / "gpu-health-monitor-dcgm.jsonl").read_bytes().splitlines()
    _produce(kafka_config, events_in, [("node-a01", (DATA / "syslog-xid79.json").read_bytes()),
                                       *[("node-a02", line) for line in lines],
                                       ("node-a03", b'{"nodeName": "node-a03", "checkName": '),
                                       ("node-a03", None)])
    args = ["connect", "nvsentinel", "--from-topic", events_in, "--topic", obs, "--deadletter-topic", dl,
            "--bootstrap", boot, "--group", f"g-{events_in}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"published 6 records (observations from {events_in}) to {obs}" in result.output
    got = [json.loads(m.value()) for m in consume(kafka_config, obs, 4)]
    assert sorted((o["host"], o["attributes"]["checkName"]) for o in got) == [
        ("node-a01", "SysLogsXIDError"), ("node-a02", "GpuMemWatch"), ("node-a02", "GpuMemWatch"), ("node-a02", "GpuThermalWatch")]
    assert all(o["kind"] == "health_event" and o["source"]["instance"] == events_in for o in got)
    dead = [DeadLetter.model_validate_json(m.value()) for m in consume(kafka_config, dl, 2)]
    assert sorted(d.reason.split(":")[0] for d in dead) == ["invalid JSON", "tombstone"]
    assert {d.original for d in dead} == {b'{"nodeName": "node-a03", "checkName": ', None}
    # the offsets were committed after delivery: a second run publishes nothing
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "published 0 records" in again.output, again.output

    # verdicts out: final ones (status, or the older final flag) -> one HealthEvent per culprit host
    atts, he = kafka_topic_factory("att", partitions=2), kafka_topic_factory("he-out")
    names = ["xid79-definitive", "xid48-definitive", "xid79-ambiguous", "app-illegal-address"]
    raw = [(DATA / "verdicts" / f"{n}.json").read_bytes() for n in names]
    provisional = json.loads(raw[0])
    provisional.update(status="provisional", revision=1)
    older = json.loads(raw[1])
    del older["status"]
    older["final"] = False
    _produce(kafka_config, atts, [(verdict(n).attribution_id, r) for n, r in zip(names, raw)]
             + [("p", json.dumps(provisional).encode()), ("o", json.dumps(older).encode()),
                ("x", b"[1, 2]"), ("t", None)])
    result = CliRunner().invoke(app, ["connect", "nvsentinel", "--publish-verdicts", "--attributions-topic", atts,
                                      "--health-topic", he, "--deadletter-topic", dl, "--bootstrap", boot,
                                      "--group", f"g-{atts}"])
    assert result.exit_code == 0, result.output
    assert f"published 5 records (HealthEvents from {atts}) to {he}" in result.output  # 4 events + 1 dead letter
    msgs = consume(kafka_config, he, 4)
    policy = load_policy()
    want = {e.nodeName + e.metadata["faultstream_scope"]: json.loads(e.model_dump_json())
            for n in names for e in verdict_health_events(verdict(n), policy)}
    got_he = {m.key().decode() + json.loads(m.value())["metadata"]["faultstream_scope"]: json.loads(m.value()) for m in msgs}
    assert got_he == want
    assert {dict(m.headers())["schema"] for m in msgs} == {b"HealthEvent"}
    dead = [DeadLetter.model_validate_json(m.value()) for m in consume(kafka_config, dl, 3)]
    assert any(d.reason.startswith("not a verdict") and d.original == b"[1, 2]" for d in dead)

    # and NVSentinel's side of the topic: what the bridge wrote reads back as HealthEvents
    back = kafka_topic_factory("obs-back")
    result = CliRunner().invoke(app, ["connect", "nvsentinel", "--from-topic", he, "--topic", back, "--deadletter-topic", dl,
                                      "--bootstrap", boot, "--group", f"g-{he}"])
    assert result.exit_code == 0, result.output
    obs_back = [json.loads(m.value()) for m in consume(kafka_config, back, 4)]
    assert sorted((o["host"], o["attributes"]["recommendedAction"]) for o in obs_back) == [
        ("node-a01", "COMPONENT_RESET"), ("node-a01", "NONE"), ("node-a01", "NONE"), ("node-a02", "RESTART_BM")]


def test_cli_needs_exactly_one_mode(tmp_path):
    app = __import__("streams.cli", fromlist=["app"]).app
    result = CliRunner().invoke(app, ["connect", "nvsentinel"])
    assert result.exit_code == 2 and "exactly one" in result.output
    result = CliRunner().invoke(app, ["connect", "nvsentinel", str(DATA / "bad.jsonl"), "--publish-verdicts"])
    assert result.exit_code == 2 and "exactly one" in result.output


@pytest.mark.parametrize("connector", ["nvsentinel", "files"])
def test_a_missing_file_or_a_directory_is_refused_before_anything_is_published(tmp_path, connector):
    app = __import__("streams.cli", fromlist=["app"]).app
    missing = tmp_path / "absent.jsonl"
    result = CliRunner().invoke(app, ["connect", connector, str(missing), str(tmp_path), "--bootstrap", "127.0.0.1:9"])
    assert result.exit_code == 2
    assert f"{tmp_path}: is a directory" in result.output and f"{missing}: no such file" in result.output
    assert "published" not in result.output


def test_a_binary_file_is_one_dead_letter_then_passed_over(tmp_path):
    path = tmp_path / "events.jsonl"
    head = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 40 + b"\n{}\n" * 50
    path.write_bytes(head)
    source = HealthEventFiles([str(path)], cursor=None, cluster="c1", workload_id=None)
    first = source.poll()
    assert [type(r).__name__ for r in first] == ["DeadLetter"]
    assert first[0].reason == "not a HealthEvent file: binary content (NUL bytes), not JSON text"
    assert first[0].original == head[:4096] and first[0].position.file == str(path)
    assert source.poll() == []
    assert source.checkpoint()["files"][str(path)]["offset"] == len(head)


@pytest.mark.slow
def test_unreachable_broker_for_a_topic_fails_with_a_message():
    app = __import__("streams.cli", fromlist=["app"]).app
    started = time.monotonic()
    result = CliRunner().invoke(app, ["connect", "nvsentinel", "--from-topic", "nowhere", "--bootstrap", "127.0.0.1:9",
                                      "--timeout", "3"])
    assert result.exit_code == 2
    assert "error: Kafka at 127.0.0.1:9: no broker answered within 3 s" in result.output
    assert time.monotonic() - started < 20


def test_health_event_model_is_the_protojson_field_set():
    assert list(HealthEvent.model_fields) == [
        "version", "agent", "componentClass", "checkName", "isFatal", "isHealthy", "message", "recommendedAction",
        "errorCode", "entitiesImpacted", "metadata", "generatedTimestamp", "nodeName", "quarantineOverrides",
        "drainOverrides", "processingStrategy"]


# -- HealthEvents as evidence of a verdict ----------------------------------------------------------

def _verdict(observations: list[Observation]):
    """The verdict of a 2-node, 16-rank job on node-a01/node-a02 that failed 10 minutes after
    the XID, over ``observations`` (NVSentinel's events and, optionally, the kernel line)."""
    import datetime as dt

    from correlators.attribution import WorkloadInfo, decide
    from correlators.enrich import Allocation
    from schemas.bundle import WorkloadSpec

    start = dt.datetime.fromtimestamp(XID79_NS // 10**9 - 1800, tz=dt.timezone.utc)
    spec = WorkloadSpec(workload_id="job-77", cluster="c1", state="FAILED", start=start,
                        end=start + dt.timedelta(seconds=2400), nodes=["node-a01", "node-a02"], ranks_per_node=8)
    alloc = Allocation.from_workload(spec)
    pack = load_rule_pack()
    events = [alloc.enrich(e) for o in observations for e in pack.extract(o)]
    return decide(WorkloadInfo.from_spec(spec), alloc, events, [], ruleset_version="test")


def test_an_nvsentinel_xid_alone_is_the_cause_and_beside_the_kernel_line_one_cause():
    [health] = read_all("syslog-xid79.json")
    att = _verdict([health])
    assert (att.root_cause.code, att.domain, att.culprits.hosts) == ("gpu.xid.79", "gpu_hardware", ["node-a01"])
    assert [g.pci_bus_id for g in att.culprits.gpus] == ["0000:9c:00"]
    # the kernel line NVSentinel read, as the files connector would publish it, 0.5 s earlier
    kernel = Observation(
        source={"connector": "files", "instance": "node-a01"}, kind="log_line", observed_at=XID79_NS - 500_000_000,
        time_source="line", time_quality=TIME_QUALITY_EXACT, host="node-a01", cluster="c1", format="syslog",
        body=health.attributes["metadata"]["JOURNAL_MESSAGE"]).with_id()
    both = _verdict([health, kernel])
    assert (both.root_cause.code, both.culprits.hosts) == ("gpu.xid.79", ["node-a01"])
    assert [a.code for a in both.alternatives if a.code.startswith("gpu.xid")] == []  # one cause, not two
    causes = [item for item in both.evidence if item.role == "cause"]
    assert {item.host for item in causes} == {"node-a01"} and len(causes) == 2


def test_a_fatal_nic_health_event_is_a_weaker_fabric_cause_and_a_non_fatal_one_only_evidence():
    from schemas.records import Source

    def health(fatal: bool) -> Observation:
        return Observation(
            source=Source(connector="nvsentinel", instance="t"), kind="health_event", observed_at=XID79_NS,
            time_source="line", time_quality=TIME_QUALITY_EXACT, host="node-a02", cluster="c1", format="nvsentinel",
            body=("NVSentinel HealthEvent nic-health-monitor/InfiniBandDegradationCheck on node-a02: unhealthy, "
                  f"fatal={'true' if fatal else 'false'}, recommendedAction={'RESTART_BM' if fatal else 'NONE'}, "
                  "errorCode=-, component=NIC, entities=NIC=mlx5_0; message: port 1 state DOWN")).with_id()

    att = _verdict([health(True)])
    assert (att.root_cause.code, att.domain, att.culprits.hosts) == (
        "fabric.nvsentinel.InfiniBandDegradationCheck", "fabric", ["node-a02"])
    assert att.root_cause.text == ("NVSentinel nic-health-monitor: InfiniBandDegradationCheck (-) on node-a02: "
                                   "port 1 state DOWN")
    assert _verdict([health(False)]).cost is None  # evidence only: no cause
