"""OpenTelemetry logs in (connectors/otlp.py): OTLP payloads built with the official
``opentelemetry-proto`` classes, encoded as the Collector's kafka exporter encodes them
(``otlp_proto``: the ExportLogsServiceRequest bytes; ``otlp_json``: OTLP/JSON, hex ids, 64-bit
integers as strings, enums as numbers), mapped to observations; and the same lines through
``connect files`` and through a Kafka topic of OTLP logs give the same verdicts."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest
from confluent_kafka import Producer
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue, KeyValueList
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from typer.testing import CliRunner

from connectors.files import FilesConnector
from connectors.otlp import AttributeMap, OtlpError, OtlpLogs, decode_logs, log_lines
from connectors.prefilter import EdgePrefilter
from connectors.publish import bundle_records
from correlators.config import EngineConfig
from schemas.deadletter import DeadLetter
from schemas.records import (TIME_QUALITY_EXACT, TIME_QUALITY_INHERITED, TIME_QUALITY_SECONDS, TIME_QUALITY_TRANSPORT, Observation,
                             canonical_json)
from schemas.utc import parse_utc
from streams.replay import replay_bundle, replay_observations
from streams.sources import verdict_key
from tests.connectors.test_files_connector import consume, settings  # noqa: F401
from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: F401

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"
T0 = parse_utc("2026-11-30T01:35:00Z")


# -- payloads from the official classes --------------------------------------------------------------

def value(v) -> AnyValue:
    """A Python value as an OTLP AnyValue."""
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    if isinstance(v, bytes):
        return AnyValue(bytes_value=v)
    if isinstance(v, dict):
        return AnyValue(kvlist_value=KeyValueList(values=attrs(v)))
    return AnyValue(string_value=v)


def attrs(d: dict) -> list[KeyValue]:
    return [KeyValue(key=k, value=value(v)) for k, v in d.items()]


def record(body, *, attributes: dict | None = None, time_ns: int = 0, observed_ns: int = 0,
           severity: int = 0, severity_text: str = "", trace_id: bytes = b"", span_id: bytes = b"") -> logs_pb2.LogRecord:
    rec = logs_pb2.LogRecord(time_unix_nano=time_ns, observed_time_unix_nano=observed_ns, severity_number=severity,
                             severity_text=severity_text, attributes=attrs(attributes or {}),
                             trace_id=trace_id, span_id=span_id)
    if body is not None:
        rec.body.CopyFrom(value(body))
    return rec


def request(*resources: tuple[dict, list[logs_pb2.LogRecord]], scope: str = "filelog") -> ExportLogsServiceRequest:
    """An ExportLogsServiceRequest: one ResourceLogs per (resource attributes, records)."""
    req = ExportLogsServiceRequest()
    for res, records in resources:
        rl = req.resource_logs.add(resource=Resource(attributes=attrs(res)))
        sl = rl.scope_logs.add()
        sl.scope.name = scope
        sl.log_records.extend(records)
    return req


def otlp_json(req: ExportLogsServiceRequest) -> bytes:
    """OTLP/JSON as the collector's JSON marshaler writes it: lowerCamelCase, enums as numbers,
    64-bit integers as strings, trace and span ids as hex."""
    doc = json_format.MessageToDict(req, use_integers_for_enums=True)
    for rl in doc.get("resourceLogs", []):
        for sl in rl.get("scopeLogs", []):
            for rec in sl.get("logRecords", []):
                for key in ("traceId", "spanId"):
                    if key in rec:
                        rec[key] = base64.b64decode(rec[key]).hex()
    return json.dumps(doc).encode()


NODE = {"k8s.node.name": "node-a01", "host.name": "otel-collector-7f9c2", "service.name": "trainer",
        "k8s.pod.name": "trainer-0", "k8s.namespace.name": "training"}
TRAIN = "/var/log/pods/training_trainer-0_1f2e/trainer/0.log"


def file_records(lines: list[str], path: str = TRAIN, observed_ns: int = T0, first: int = 1) -> list[logs_pb2.LogRecord]:
    """The filelog receiver's records of ``lines`` (include_file_path, include_file_record_number)."""
    return [record(line, attributes={"log.file.path": path, "log.file.name": os.path.basename(path),
                                     "log.file.record_number": first + i}, observed_ns=observed_ns)
            for i, line in enumerate(lines)]


TRACEBACK = [
    "2026-11-30 01:35:02,100 INFO step 10 loss 2.31",
    "[rank3]: Traceback (most recent call last):",
    '[rank3]:   File "train.py", line 42, in <module>',
    "[rank3]:     loss.backward()",
    "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered",
    "2026-11-30 01:35:03,000 INFO rank 3 exiting",
]
KERNEL = {"MESSAGE": "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.",
          "SYSLOG_IDENTIFIER": "kernel", "_HOSTNAME": "node-a02", "_TRANSPORT": "kernel",
          "PRIORITY": "3", "__REALTIME_TIMESTAMP": str((T0 + 4_123_456_000) // 1000)}
KUBELET = {"MESSAGE": b"E1130 01:35:05.000000 2211 kubelet.go:2412] \"Error syncing pod\"",
           "SYSLOG_IDENTIFIER": "kubelet", "_PID": "2211", "_SYSTEMD_UNIT": "kubelet.service", "_HOSTNAME": "node-a02"}


def sample() -> ExportLogsServiceRequest:
    return request(
        (NODE, file_records(TRACEBACK)),
        ({}, [record(KERNEL, time_ns=T0 + 4_123_456_000, observed_ns=T0 + 9, severity=17),
              record(KUBELET, time_ns=T0 + 5_000_000_000, observed_ns=T0 + 10, severity_text="err",
                     trace_id=bytes.fromhex("5b8efff798038103d269b633813fc60c"), span_id=bytes.fromhex("eee19b7ec3c1b174"))]),
    )


def observations(*payloads: bytes, **kw) -> list[Observation]:
    logs = OtlpLogs(**kw)
    for i, raw in enumerate(payloads):
        assert logs.add(raw, where=("otlp_logs", 0, i)) is None
    return logs.emit(final=True)


# -- mapping -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("encode", [ExportLogsServiceRequest.SerializeToString, otlp_json], ids=["otlp_proto", "otlp_json"])
def test_records_map_to_observations_with_their_source(encode) -> None:
    obs = observations(encode(sample()))
    assert [(o.host, o.body.splitlines()[0][:40], o.position.file, o.position.line) for o in obs] == [
        ("node-a01", "2026-11-30 01:35:02,100 INFO step 10 los", TRAIN, 1),
        ("node-a01", "[rank3]: Traceback (most recent call las", TRAIN, 2),
        ("node-a01", "2026-11-30 01:35:03,000 INFO rank 3 exit", TRAIN, 6),
        ("node-a02", "kernel: NVRM: Xid (PCI:0000:18:00): 79, ", None, None),
        ("node-a02", "kubelet[2211]: E1130 01:35:05.000000 221", None, None),
    ]
    step, tb, exiting, xid, kubelet = obs
    # k8s.node.name wins over the collector pod's host.name; resource attributes are kept
    assert step.attributes == {"service": "trainer", "pod": "trainer-0", "namespace": "training"}
    assert step.source.connector == "otlp" and step.source.instance == "node-a01"
    # the traceback is one record, its rank from the prefix, its time inherited from the line before
    assert tb.body == "\n".join(TRACEBACK[1:5]) and tb.rank == 3
    assert (tb.observed_at, tb.time_source, tb.time_quality) == (step.observed_at, "inferred", TIME_QUALITY_INHERITED)
    assert step.observed_at == T0 + 2_100_000_000 and step.time_source == "line"
    # journald: the journal's time, the unit, the severity; host from the trusted _HOSTNAME field
    assert (xid.observed_at, xid.time_source, xid.time_quality) == (T0 + 4_123_456_000, "line", TIME_QUALITY_EXACT)
    assert xid.attributes == {"unit": "kernel", "severity": "ERROR"}
    assert kubelet.attributes == {"unit": "kubelet.service", "severity": "err",
                                  "trace_id": "5b8efff798038103d269b633813fc60c", "span_id": "eee19b7ec3c1b174"}
    # the journal's whole-second time: "line" at seconds quality (the glog text after the tag is not a line time)
    assert (kubelet.observed_at, kubelet.time_source, kubelet.time_quality, kubelet.format) == (
        T0 + 5_000_000_000, "line", TIME_QUALITY_SECONDS, "unknown")


def test_both_encodings_give_the_same_observations() -> None:
    proto = observations(sample().SerializeToString())
    js = observations(otlp_json(sample()))
    assert [canonical_json(o) for o in proto] == [canonical_json(o) for o in js]


def test_host_attributes_and_fallbacks() -> None:
    req = request(({"host.name": "node-a03"}, [record("a line")]),
                  ({}, [record("no host anywhere", observed_ns=T0)]),
                  ({"service.name": "x"}, [record({"msg": "structured", "level": "error"}, attributes={"host.name": "node-a04"})]))
    lines = list(log_lines(decode_logs(req.SerializeToString())))
    assert [(x.host, x.host_found, x.text) for x in lines] == [
        ("node-a03", True, "a line"), ("_unknown", False, "no host anywhere"), ("node-a04", True, "structured")]
    named = list(log_lines(decode_logs(req.SerializeToString()), AttributeMap(host=("service.name",)), default_host="node-z"))
    assert [x.host for x in named] == ["node-z", "node-z", "x"]
    logs = OtlpLogs()
    logs.add(req.SerializeToString())
    [*_, untimed, _] = logs.emit(final=True)
    assert (untimed.observed_at, untimed.time_source, untimed.time_quality) == (T0, "transport", TIME_QUALITY_TRANSPORT)
    assert "1 streams without a host attribute" in logs.coverage("t")[0].detail


def test_a_host_named_in_the_text_is_never_the_records_host() -> None:
    line = "Nov 30 01:35:04 node-a07 kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus."
    [obs] = observations(request(({"host.name": "node-a01"}, [record(line)])).SerializeToString(), year=2026)
    assert obs.host == "node-a01" and obs.body == line


def test_a_record_open_at_the_end_of_a_message_waits_for_the_next_one() -> None:
    logs = OtlpLogs()
    first = request((NODE, file_records(TRACEBACK[:3]))).SerializeToString()
    rest = request((NODE, file_records(TRACEBACK[3:], first=4))).SerializeToString()
    logs.add(first, where=("t", 2, 40))
    out = logs.emit()
    assert [o.body for o in out] == [TRACEBACK[0]]  # the traceback may go on
    assert logs.held() == {("t", 2): 40}
    logs.add(rest, where=("t", 2, 41))
    out = logs.emit()
    assert [o.body for o in out] == ["\n".join(TRACEBACK[1:5])]
    assert logs.emit(idle_s=5.0, now=1e12)[0].body == TRACEBACK[5]  # an idle stream closes its last record
    assert logs.held() == {} and len(logs._streams) == 1
    assert logs.emit(now=1e12 + 3600) == [] and logs._streams == {}  # silent for an hour: forgotten


@pytest.mark.parametrize("raw, reason", [
    (b"", "empty message"),
    (b"\xff\xfe garbage", "invalid OTLP protobuf"),
    (b'"a raw body"', "not an OTLP/JSON logs document but a JSON str"),
    (b'[1, 2]', "not an OTLP/JSON logs document but a JSON list"),
    (b'{"resourceLogs": [', "invalid OTLP/JSON"),
    (b'{"resourceSpans": []}', "no resourceLogs"),
    (b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": "zz"}]}]}]}',
     "resourceLogs[0].scopeLogs[0].logRecords[0].traceId 'zz' is not hex"),
    (b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"timeUnixNano": "soon"}]}]}]}',
     "invalid OTLP/JSON logs: resourceLogs.scopeLogs.logRecords.timeUnixNano: "),
    (b'{"resourceLogs": 5}', "resourceLogs is a number, not an array"),
    (b'{"resourceLogs": [{"scopeLogs": [{"logRecords": "x"}]}]}', "resourceLogs[0].scopeLogs[0].logRecords is a string, not an array"),
    (b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": 5}]}]}]}',
     "invalid OTLP/JSON logs: resourceLogs.scopeLogs.logRecords.body: a value of the wrong type"),
    (None, "tombstone"),
], ids=["empty", "garbage", "raw-string", "raw-array", "truncated", "spans", "bad-hex", "bad-int", "not-an-array",
        "records-not-an-array", "wrong-type", "tombstone"])
def test_bad_payloads_become_dead_letters_with_the_reason(raw, reason) -> None:
    logs = OtlpLogs()
    dead = logs.add(raw, where=("otlp_logs", 1, 7), key=b"k")
    assert isinstance(dead, DeadLetter) and dead.reason.startswith(reason), dead and dead.reason
    assert "object is not" not in dead.reason and "argument must be" not in dead.reason  # no interpreter text
    assert dead.original == raw and dead.original_key == b"k" and dead.position.offset == 7
    assert logs.emit(final=True) == [] and logs.counts.dead == 1


def test_decode_refuses_a_forced_wrong_encoding() -> None:
    with pytest.raises(OtlpError, match="invalid OTLP/JSON"):
        decode_logs(sample().SerializeToString(), "otlp_json")


def test_the_same_file_through_files_and_otlp_gives_the_same_records(tmp_path: Path) -> None:
    log = tmp_path / "torchrun.log"
    log.write_text("\n".join(TRACEBACK + ["continuation without a time"]) + "\n")
    files = list(FilesConnector([log], host="node-a01", cluster="c1", cursor=None, year=2026).observations())
    mtime = log.stat().st_mtime_ns
    lines = log.read_text().splitlines()
    got = observations(request(({"k8s.node.name": "node-a01"}, file_records(lines, str(log), mtime))).SerializeToString(),
                       cluster="c1", year=2026)
    fields = lambda o: (o.host, o.cluster, o.body, o.observed_at, o.time_source, o.time_quality, o.rank, o.format,  # noqa: E731
                        o.position.file, o.position.line)
    assert [fields(o) for o in got] == [fields(o) for o in files]


# -- the same verdicts through connect files and a topic of OTLP logs --------------------------------

#: bundles of different domains: an application exception (torchrun), an HBM XID 48 in kern.log, a
#: port flap under two jobs (fabric and incident verdicts), a stalled rank, a memory kill, an XID 79
#: in a Kubernetes node's syslog
BUNDLES = ["h200-torchrun-rank1-exception", "public-rc13-hbm-xid48-hang", "fabric-port-flap-two-jobs",
           "multinode-stalled-rank-11", "memory-sigkill-psi-full", "k8s-admission-after-xid79"]
#: those whose files read by connect files also give the bundle's own verdicts (the fabric one
#: differs: without the bundle reader's coverage records of its node files)
SAME_AS_BUNDLE = set(BUNDLES) - {"fabric-port-flap-two-jobs"}


def _node_files(bundle: Path) -> dict[str, list[Path]]:
    """Host -> its log files (the bundle's logs/<host>/ folders; the scheduler's stay bundle records)."""
    out: dict[str, list[Path]] = {}
    for d in sorted((bundle / "logs").iterdir()):
        if d.is_dir() and not d.name.startswith("_"):
            out[d.name] = sorted(p for p in d.iterdir() if p.is_file())
    return out


def _verdicts(observations: list[Observation]) -> list[str]:
    atts, _, _ = replay_observations(observations, EngineConfig.default())
    return sorted(canonical_json({"scope": a.scope.model_dump(mode="json"), **verdict_key(a),
                                  "decided_at": a.decided_at, "status": a.status}) for a in atts)


def test_otlp_logs_from_kafka_give_the_verdicts_of_connect_files(tmp_path, settings, kafka_config, kafka_topic_factory):  # noqa: F811
    app = __import__("streams.cli", fromlist=["app"]).app
    for n, name in enumerate(BUNDLES):
        bundle = EXAMPLES / name
        records, conn = bundle_records(bundle)
        spec = conn.workloads[0]
        year = int(__import__("time").gmtime(spec.start_ns / 1e9).tm_year)
        hosts = _node_files(bundle)
        rel = {f"logs/{h}/{p.name}" for h, ps in hosts.items() for p in ps}
        fixed = [o for o in records if o.position.file not in rel]
        # through connect files: each node's files read with that node as their host
        copy = tmp_path / name
        via_files: list[Observation] = []
        sent: list[tuple[bytes, bytes]] = []
        encode = ExportLogsServiceRequest.SerializeToString if n % 2 == 0 else otlp_json
        for host, paths in hosts.items():
            for p in paths:
                (copy / host).mkdir(parents=True, exist_ok=True)
                (copy / host / p.name).write_bytes(p.read_bytes())
            local = [copy / host / p.name for p in paths]
            via_files += FilesConnector(local, host=host, cluster=spec.cluster, workload_id=spec.workload_id,
                                        cursor=None, year=year).observations()
            # the same lines as the collector's filelog receiver sends them: 40 records a message,
            # one resource per node (partition_logs_by_resource_attributes: key = the hash)
            resource = {"k8s.node.name": host, "host.name": f"otel-agent-{host}"}
            key = hashlib.blake2b(json.dumps(sorted(resource.items())).encode(), digest_size=16).digest()
            for path in local:
                lines = path.read_bytes().decode("utf-8", "replace").splitlines()
                recs = file_records(lines, str(path), path.stat().st_mtime_ns)
                for i in range(0, len(recs), 40):
                    sent.append((key, encode(request((resource, recs[i:i + 40])))))
        assert via_files, f"{name}: connect files read no record"
        topic, obs_topic, dl = (kafka_topic_factory(f"{s}{n}", partitions=p) for s, p in (("otlp", 3), ("obs", 2), ("dl", 1)))
        producer = Producer(dict(kafka_config))
        for key, raw in sent + [(b"bad", b'"raw body"')]:
            producer.produce(topic, value=raw, key=key)
        assert producer.flush(30) == 0
        del producer
        result = CliRunner().invoke(app, ["connect", "otlp", "--from-topic", topic, "--topic", obs_topic,
                                          "--deadletter-topic", dl, "--bootstrap", settings.bootstrap_servers,
                                          "--group", f"g-{topic}", "--cluster", spec.cluster, "--workload",
                                          spec.workload_id, "--year", str(year)] + (["--prefilter"] if n in (0, 4) else []))
        assert result.exit_code == 0, result.output
        unfiltered = via_files
        if n in (0, 4):  # with the edge prefilter: only the records a rule can use, the same verdicts
            keep = EdgePrefilter().keep
            dropped = [o for o in via_files if not keep(o.body)]
            via_files = [o for o in via_files if keep(o.body)]
            assert dropped and f"{len(dropped)} records dropped at the edge" in result.output, result.output
        assert f"published {len(via_files) + 1} records" in result.output, result.output
        if n == 0:  # the offsets were committed after delivery: a second run publishes nothing
            again = CliRunner().invoke(app, ["connect", "otlp", "--from-topic", topic, "--topic", obs_topic,
                                             "--bootstrap", settings.bootstrap_servers, "--group", f"g-{topic}"])
            assert again.exit_code == 0 and "published 0 records" in again.output, again.output
        via_otlp = [Observation.model_validate_json(m.value()) for m in consume(kafka_config, obs_topic, len(via_files))]
        assert len(via_otlp) == len(via_files)
        [dead] = consume(kafka_config, dl, 1)
        assert DeadLetter.model_validate_json(dead.value()).reason.startswith("not an OTLP/JSON logs document")
        same = lambda o: (o.host, o.body, o.observed_at, o.time_source, o.rank, o.position.file)  # noqa: E731
        assert sorted(map(same, via_otlp)) == sorted(map(same, via_files)), name
        expected = _verdicts(fixed + unfiltered)
        assert expected, f"{name}: no verdict"
        assert _verdicts(fixed + via_otlp) == expected, name
        if name in SAME_AS_BUNDLE:
            atts, _, _ = replay_observations(fixed + via_otlp, EngineConfig.default())
            assert sorted(canonical_json(verdict_key(a)) for a in atts) == \
                sorted(canonical_json(verdict_key(a)) for a in replay_bundle(bundle).attributions), name


def test_the_shipped_collector_config_sends_what_the_connector_reads() -> None:
    import yaml

    cfg = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy" / "otel" / "collector.yaml").read_text())
    fl = cfg["receivers"]["filelog"]
    # indentation kept (tracebacks join on it), the file and line of every record sent, no multiline in the collector
    assert fl["preserve_leading_whitespaces"] is True and fl["preserve_trailing_whitespaces"] is True
    assert fl["include_file_path"] is True and fl["include_file_record_number"] is True and "multiline" not in fl
    assert cfg["receivers"]["journald/kernel"]["dmesg"] is True
    kafka = cfg["exporters"]["kafka"]
    assert kafka["logs"]["encoding"] in ("otlp_proto", "otlp_json") and kafka["partition_logs_by_resource_attributes"] is True
    node = cfg["processors"]["resource/node"]["attributes"][0]
    assert node["key"] == AttributeMap().host[0] == "k8s.node.name"
    pipe = cfg["service"]["pipelines"]["logs"]
    assert set(pipe["receivers"]) == {"journald/kernel", "journald/services", "filelog"} and pipe["exporters"] == ["kafka"]
    assert set(pipe["processors"]) <= set(cfg["processors"])


def test_the_edge_prefilter_publishes_the_records_a_rule_can_use_with_their_times() -> None:
    raw = sample().SerializeToString()
    everything = observations(raw)
    kept = observations(raw, prefilter=EdgePrefilter())
    assert 0 < len(kept) < len(everything)
    assert [canonical_json(o) for o in kept] == [canonical_json(o) for o in everything if EdgePrefilter().keep(o.body)]
    assert any("Xid" in o.body for o in kept) and any("Traceback" in o.body for o in kept)
