"""NVSentinel's platform-connector gRPC interface with real grpcio servers built from the
vendored ``health_event.proto``: faultstream's HealthEvents reach such a server (bridge and
remediation executor), and events sent to faultstream's own server become observations."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
from confluent_kafka import Producer
from google.protobuf import descriptor_pb2, empty_pb2, json_format
from typer.testing import CliRunner

from connectors.nvsentinel import HealthEventReceiver, PlatformConnectorProducer, verdict_health_events
from correlators.remediation.policy import load_policy
from schemas.deadletter import DeadLetter
from schemas.records import Attribution, GpuRef, Observation, RemediationAction, RemediationTarget
from sinks.executors.nvsentinel import CHECK_NAME, NVSentinelExecutor
from streams.cli import app
from transport.nvsentinel import PlatformConnectorClient, PlatformConnectorError
from transport.nvsentinel_pb import health_event_pb2 as pb
from transport.nvsentinel_pb import health_event_pb2_grpc as pb_grpc
from tests.connectors.test_files_connector import consume

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "nvsentinel"


class Recorder(pb_grpc.PlatformConnectorServicer):
    """A platform connector that keeps what it receives; fails the first ``fail`` calls
    UNAVAILABLE."""

    def __init__(self, fail: int = 0) -> None:
        self.batches: list[pb.HealthEvents] = []
        self.fail = fail

    def HealthEventOccurredV1(self, request, context):  # noqa: N802
        if self.fail:
            self.fail -= 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
        self.batches.append(request)
        return empty_pb2.Empty()


@pytest.fixture
def platform_connector():
    from concurrent import futures

    rec = Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_PlatformConnectorServicer_to_server(rec, server)
    port = server.add_insecure_port("127.0.0.1:0")
    assert port > 0, "could not bind a free port"
    server.start()
    yield rec, f"127.0.0.1:{port}"
    server.stop(0).wait()


def test_checked_in_stubs_describe_the_vendored_proto(tmp_path):
    out = tmp_path / "set.pb"
    rc = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", ".", f"--descriptor_set_out={out}",
                         "transport/nvsentinel_pb/health_event.proto"], cwd=ROOT, capture_output=True, text=True)
    assert rc.returncode == 0, rc.stderr
    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    checked_in = descriptor_pb2.FileDescriptorProto.FromString(pb.DESCRIPTOR.serialized_pb)
    for message in fresh.message_type:  # the Python gencode leaves out the derived json_name
        for m in [message, *message.nested_type]:
            for f in m.field:
                f.ClearField("json_name")
    assert fresh == checked_in, "run deploy/nvsentinel/gen-proto.sh"
    assert pb.DESCRIPTOR.services_by_name["PlatformConnector"].full_name == "datamodels.PlatformConnector"


def test_a_verdict_health_event_reaches_the_platform_connector(platform_connector):
    rec, target = platform_connector
    att = Attribution.model_validate(json.loads(sorted((DATA / "verdicts").glob("*.json"))[0].read_text()))
    events = verdict_health_events(att, load_policy())
    assert events, "the sample verdict gives HealthEvents"

    class Kafka:
        sent: list = []

        def send(self, key, record, topic=None):
            self.sent.append((topic, record))

        def flush(self, timeout=60.0):
            return 0

    kafka = Kafka()
    producer = PlatformConnectorProducer(PlatformConnectorClient(target), kafka, deadletter_topic="dl")
    for e in events:
        producer.send(e.nodeName, e)
    dead = DeadLetter(source="t", reason="r", original=b"x", at_ns=1).with_id()
    producer.send("t", dead)
    producer.flush()
    [batch] = rec.batches
    assert batch.version == 1 and len(batch.events) == len(events)
    got = batch.events[0]
    assert (got.nodeName, got.checkName, got.agent) == (events[0].nodeName, events[0].checkName, "faultstream")
    assert pb.RecommendedAction.Name(got.recommendedAction) == events[0].recommendedAction
    assert list(got.errorCode) == events[0].errorCode and got.isFatal == events[0].isFatal
    assert got.generatedTimestamp.ToNanoseconds() == att.decided_at
    assert kafka.sent == [("dl", dead)] and producer.sent == len(events)


def _action(kind: str, **kw) -> RemediationAction:
    return RemediationAction(action_id="act-1", attribution_id="att-1", cluster="c1", policy_id="xid79",
                             cause_code="gpu.xid.79", action=kind, created_at=1_796_000_000_000_000_000,
                             target=RemediationTarget(host="node-a01", gpu=kw.pop("gpu", None)), **kw)


def test_executor_drives_quarantine_drain_and_resume(platform_connector):
    rec, target = platform_connector
    ex = NVSentinelExecutor(target, retry_wait_s=0.01)
    r = ex.execute(_action("cordon"))
    assert r.ok, r.detail
    r = ex.execute(_action("reset_gpu", gpu=GpuRef(index=3, uuid="GPU-00000000-0000-4000-8000-000000000003")))
    assert r.ok, r.detail
    assert ex.resume("node-a01", "recertified").ok
    cordon, reset, resume = (b.events[0] for b in rec.batches)
    assert (cordon.nodeName, cordon.checkName, cordon.isFatal, cordon.drainOverrides.skip) == ("node-a01", CHECK_NAME, True, True)
    assert pb.RecommendedAction.Name(cordon.recommendedAction) == "CONTACT_SUPPORT"
    assert cordon.metadata["faultstream_action_id"] == "act-1" and list(cordon.errorCode) == ["gpu.xid.79"]
    assert pb.RecommendedAction.Name(reset.recommendedAction) == "COMPONENT_RESET"
    assert [(e.entityType, e.entityValue) for e in reset.entitiesImpacted] == [
        ("GPU", "3"), ("GPU_UUID", "GPU-00000000-0000-4000-8000-000000000003")]
    assert (resume.isHealthy, resume.isFatal, resume.checkName) == (True, False, CHECK_NAME)
    assert not ex.execute(_action("disable_port")).ok
    assert ex.execute(_action("notify")).ok and len(rec.batches) == 3


def test_transient_failures_are_retried_and_a_dead_target_is_a_failed_result(platform_connector):
    rec, target = platform_connector
    rec.fail = 1
    assert NVSentinelExecutor(target, retry_wait_s=0.01).execute(_action("drain")).ok
    assert len(rec.batches) == 1
    r = NVSentinelExecutor("127.0.0.1:1", attempts=2, retry_wait_s=0.01, timeout_s=1).execute(_action("drain"))
    assert not r.ok and "UNAVAILABLE" in r.detail
    with pytest.raises(PlatformConnectorError):
        PlatformConnectorClient(target).send([{"nodeName": "n", "recommendedAction": "NOT_AN_ACTION"}])


def test_an_event_sent_to_our_server_becomes_an_observation():
    receiver = HealthEventReceiver("127.0.0.1:0", cluster="c1", ack_timeout_s=10)
    address = receiver.start()
    try:
        event = json.loads((DATA / "syslog-xid79.json").read_text())
        result: list = []
        t = threading.Thread(target=lambda: result.append(PlatformConnectorClient(address).send(
            [event, {"checkName": "X", "agent": "a"}])))
        t.start()
        records: list = []
        for _ in range(100):
            records = receiver.poll()
            if records:
                break
            threading.Event().wait(0.05)
        assert not result, "the call must wait for the delivery"
        receiver.cursor.save(receiver.checkpoint())  # what the runner does after its flush
        t.join(10)
        assert result == [2]
        obs, dead = records
        assert isinstance(obs, Observation) and isinstance(dead, DeadLetter)
        assert (obs.kind, obs.host, obs.cluster, obs.observed_at) == ("health_event", "node-a01", "c1", 1_796_001_664_512_339_081)
        assert obs.attributes["checkName"] == "SysLogsXIDError" and obs.attributes["recommendedAction"] == "RESTART_BM"
        assert obs.gpu.uuid == "GPU-00000000-0000-4000-8000-000000000003"
        assert "no nodeName" in dead.reason
        assert receiver.coverage()[0].records == 1
    finally:
        receiver.close()


def test_an_unacknowledged_call_fails_unavailable_and_comes_again_after_rewind():
    receiver = HealthEventReceiver("127.0.0.1:0", ack_timeout_s=0.3)
    address = receiver.start()
    try:
        event = json.loads((DATA / "syslog-xid79.json").read_text())
        with pytest.raises(PlatformConnectorError, match="UNAVAILABLE"):
            PlatformConnectorClient(address, attempts=1).send([event])
        first = receiver.poll()
        receiver.rewind()
        assert [r.observation_id for r in receiver.poll()] == [r.observation_id for r in first]
    finally:
        receiver.close()


# -- the command, both ways, through the real broker ------------------------------------------------

def test_cli_verdicts_reach_the_platform_connector_and_its_events_become_observations(
        tmp_path, platform_connector, kafka_bootstrap, kafka_config, kafka_topic_factory):
    """``connect nvsentinel --publish-verdicts --platform-connector``: final verdicts from Kafka
    reach a server of NVSentinel's service; ``connect nvsentinel --listen``: an event sent to it
    by NVSentinel's client stub is on the observations topic when the call returns."""
    rec, target = platform_connector
    atts, dl = kafka_topic_factory("att"), kafka_topic_factory("dl")
    raw = (DATA / "verdicts" / "xid79-definitive.json").read_bytes()
    producer = Producer(dict(kafka_config))
    producer.produce(atts, key=b"v", value=raw)
    producer.produce(atts, key=b"x", value=b"[1, 2]")
    assert producer.flush(30) == 0
    args = ["connect", "nvsentinel", "--publish-verdicts", "--platform-connector", target, "--attributions-topic", atts,
            "--deadletter-topic", dl, "--bootstrap", kafka_bootstrap, "--group", f"g-{atts}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"published 2 records (HealthEvents from {atts}) to NVSentinel's platform connector at {target}" in result.output
    want = verdict_health_events(Attribution.model_validate(json.loads(raw)), load_policy())
    [batch] = rec.batches
    assert [(e.nodeName, e.checkName, pb.RecommendedAction.Name(e.recommendedAction)) for e in batch.events] == [
        (e.nodeName, e.checkName, e.recommendedAction) for e in want]
    [dead] = [DeadLetter.model_validate_json(m.value()) for m in consume(kafka_config, dl, 1)]
    assert dead.reason.startswith("not a verdict") and dead.original == b"[1, 2]"
    again = CliRunner().invoke(app, args)  # committed after the call succeeded: nothing comes twice
    assert again.exit_code == 0 and "published 0 records" in again.output and len(rec.batches) == 1

    obs = kafka_topic_factory("obs")
    sock = tmp_path / "nvsentinel.sock"
    proc = subprocess.Popen([sys.executable, "-c", "from streams.cli import app; app()", "connect", "nvsentinel",
                             "--listen", f"unix://{sock}", "--topic", obs, "--deadletter-topic", dl, "--cluster", "c1",
                             "--bootstrap", kafka_bootstrap],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            if sock.exists() or proc.poll() is not None:
                break
            threading.Event().wait(0.05)
        assert sock.exists(), f"the server did not start: {proc.communicate(timeout=5)}"
        stub = pb_grpc.PlatformConnectorStub(grpc.insecure_channel(f"unix://{sock}"))
        message = pb.HealthEvents(version=1)
        json_format.ParseDict(json.loads((DATA / "syslog-xid79.json").read_text()), message.events.add())
        stub.HealthEventOccurredV1(message, timeout=30)
        [got] = [Observation.model_validate_json(m.value()) for m in consume(kafka_config, obs, 1, timeout_s=5)]
        assert (got.kind, got.host, got.cluster, got.observed_at) == ("health_event", "node-a01", "c1", 1_796_001_664_512_339_081)
        assert got.attributes["checkName"] == "SysLogsXIDError"
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"published 1 records (observations received on unix://{sock}) to {obs}" in err
