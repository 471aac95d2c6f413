"""Verdicts as alerts in a real Alertmanager (Debian 12's prometheus-alertmanager 0.25,
``deploy/alertmanager/setup.sh``): each test starts its own server on a free loopback port with a
temporary storage directory and stops it at the end; a server that cannot start fails the test
(never a skip).

The verdict is the replay verdict of the streaming quickstart's bundle
(``public-rc15-pcie-aer-xid79-multinode``: XID 79 on node-a02, job-1006 of cluster c1); its
revisions (provisional, another quality, withdrawn) are derived from it as the stream worker
publishes them. The alerts agent's own logic (:class:`streams.alerts.AlertMachine` over an
:class:`sinks.alertmanager.AlertBook`) is driven here without a broker, its state carried over
as the worker's changelogged table carries it; ``tests/streams/test_alerts_stream.py`` runs it
in a real worker on a real broker.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from correlators.keyed import Execute
from schemas.messages import CertificationInMessage, TickMessage, VerdictInMessage
from schemas.records import Attribution, Certification, RemediationAction, RemediationTarget, canonical_json
from schemas.utc import parse_utc
from sinks.alertmanager import AlertBook, AlertmanagerClient, AlertmanagerError, AlertmanagerUnavailable, verdict_labels
from streams.alerts import AlertMachine, AlertSettings
from tests.setup_fixtures import ensure

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "examples" / "incidents" / "public-rc15-pcie-aer-xid79-multinode"
NS = 1_000_000_000
#: Alertmanager's configuration: one receiver that sends nothing (the tests read the API).
CONFIG = """\
route:
  receiver: nowhere
  group_by: [cluster, incident]
receivers:
  - name: nowhere
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alertmanager_binary() -> str:
    """The prometheus-alertmanager binary, installed by ``deploy/alertmanager/setup.sh`` where
    missing; fails the test when there is none."""
    ensure("alertmanager")
    found = shutil.which("prometheus-alertmanager")
    if found is None:
        pytest.fail("deploy/alertmanager/setup.sh ran but there is no prometheus-alertmanager on PATH", pytrace=False)
    return found


class Alertmanager:
    """One Alertmanager process on loopback (no cluster gossip), its data under ``root``, on
    ``port`` (None: a free one)."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        root.mkdir(parents=True, exist_ok=True)
        (root / "alertmanager.yml").write_text(CONFIG)
        self.log = root / "alertmanager.log"
        self.proc = subprocess.Popen(
            [alertmanager_binary(), f"--config.file={root / 'alertmanager.yml'}", f"--storage.path={root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="],
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"Alertmanager exited with status {self.proc.returncode} at start:\n{self.tail()}",
                            pytrace=False)
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"Alertmanager not ready on {self.url} after 30 s:\n{self.tail()}", pytrace=False)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])

    def alerts(self) -> list[dict[str, Any]]:
        """faultstream's alerts not resolved, straight from the API (it lists none whose
        ``endsAt`` has passed)."""
        resp = httpx.get(f"{self.url}/api/v2/alerts", params={"filter": 'source="faultstream"'}, timeout=5)
        resp.raise_for_status()
        return resp.json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture()
def am(tmp_path: Path):
    server = Alertmanager(tmp_path / "alertmanager")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def verdict() -> Attribution:
    from streams.replay import replay_bundle

    (att,) = [a for a in replay_bundle(BUNDLE).attributions if a.scope.kind == "workload"]
    assert att.cause_code == "gpu.xid.79" and att.culprits.hosts == ["node-a02"]
    return att


class Worker:
    """What the worker's alerts agent does with one cluster's messages, without Kafka: the
    machine built from the table state, its alerts posted, then the state kept."""

    def __init__(self, am: Alertmanager, table: dict[str, Any] | None = None, **settings: Any) -> None:
        self.settings = AlertSettings(url=am.url, **settings)
        self.client = AlertmanagerClient(am.url, attempts=2, retry_wait_s=0.05)
        self.table: dict[str, Any] = table if table is not None else {}

    def apply(self, cluster: str, message: Any) -> list[dict[str, Any]]:
        machine = AlertMachine(cluster, self.settings.book(self.table.get(cluster)))
        posted = []
        for effect in machine.apply(message):
            assert isinstance(effect, Execute) and effect.kind == "alerts"
            self.client.post(effect.job)
            posted += effect.job
        self.table[cluster] = machine.to_state()
        return posted

    def verdict(self, att: Attribution) -> list[dict[str, Any]]:
        return self.apply(att.scope.cluster, VerdictInMessage(attribution=att))


def revision(att: Attribution, n: int, **update: Any) -> Attribution:
    """Revision ``n`` of ``att`` with ``update`` (a withdrawal names no root cause)."""
    if update.get("status") == "withdrawn":
        update.setdefault("root_cause", None)
    return att.model_copy(update={"revision": n, **update})


def test_labels_are_a_function_of_the_verdict(verdict: Attribution) -> None:
    labels = verdict_labels(verdict)
    assert labels == {
        "alertname": "FaultstreamVerdict", "source": "faultstream", "verdict_id": verdict.attribution_id,
        "incident": verdict.attribution_id, "cluster": "c1", "scope": "workload", "scope_id": "job-1006", "domain": "gpu_hardware",
        "root_cause": "gpu.xid.79", "quality": "definitive", "severity": "critical",
        "culprit_host": "node-a02", "culprit_gpu": "node-a02:1",
    }
    # the same in any process: from the verdict's JSON alone
    assert verdict_labels(Attribution.model_validate_json(canonical_json(verdict))) == labels
    assert verdict_labels(revision(verdict, 7)) == labels  # the revision number is no label


def test_one_fabric_fault_is_one_incident_whatever_the_scope() -> None:
    """A flapping switch port that failed two jobs: two workload verdicts, the port's and the
    incident's, each its own alert (its own verdict_id and alertname), all one ``incident``."""
    from streams.replay import replay_bundle

    atts = replay_bundle(BUNDLE.parent / "fabric-port-flap-two-jobs").attributions
    labels = sorted((verdict_labels(a) for a in atts), key=lambda x: (x["alertname"], x["scope_id"]))
    assert [(x["alertname"], x["scope"], x["scope_id"]) for x in labels] == [
        ("FaultstreamFabricFault", "fabric_port", "leaf-02/swp1"),
        ("FaultstreamIncident", "incident", atts[0].incident_id),
        ("FaultstreamVerdict", "workload", "job-2401"), ("FaultstreamVerdict", "workload", "job-2417")]
    assert {x["incident"] for x in labels} == {atts[0].incident_id} and atts[0].incident_id.startswith("inc-")
    assert len({x["verdict_id"] for x in labels}) == 4
    assert {(x["domain"], x["root_cause"], x["culprit_host"]) for x in labels} == {
        ("fabric", "fabric.port.flapping", "node-a05")}
    assert labels[0]["culprit_port"] == "leaf-02/swp1,node-a05/mlx5_0/1"
    assert labels[2]["culprit_port"] == "leaf-02/swp1"


def test_fires_updates_and_resolves(am: Alertmanager, verdict: Attribution) -> None:
    worker = Worker(am, explorer_url="http://explorer.example:8077")
    assert worker.verdict(revision(verdict, 1, status="provisional", quality="probable")) == []
    assert am.alerts() == []  # by default only final verdicts page

    worker.verdict(revision(verdict, 2))
    [alert] = am.alerts()
    assert alert["labels"] == verdict_labels(verdict)
    assert alert["status"]["state"] == "active"
    annotations = alert["annotations"]
    assert annotations["explorer"] == f"http://explorer.example:8077/incidents/{verdict.attribution_id}"
    assert alert["generatorURL"] == annotations["explorer"]
    assert annotations["revision"] == "2" and annotations["status"] == "final"
    assert annotations["cost"].startswith("2.6954 GPU-hours lost; 0.3369 node-hours lost")
    assert annotations["summary"] == ("failed workload job-1006 (c1): gpu.xid.79 on node-a02; gpu_hardware, "
                                      "definitive, final")
    assert parse_utc(alert["startsAt"]) == verdict.decided_at
    assert 3500 * NS < parse_utc(alert["endsAt"]) - time.time_ns() <= 3600 * NS  # hold_s ahead

    # a later revision with another quality: the old alert resolves, one fires with the new labels
    worker.verdict(revision(verdict, 3, quality="ambiguous"))
    [alert] = am.alerts()
    assert alert["labels"]["quality"] == "ambiguous" and alert["labels"]["severity"] == "warning"
    # (the API lists no alert whose endsAt has passed: the definitive one is gone)

    worker.verdict(revision(verdict, 4, status="withdrawn", quality="ambiguous"))
    assert am.alerts() == []
    assert worker.table["c1"]["firing"] == {}


def test_provisional_verdicts_page_by_policy(am: Alertmanager, verdict: Attribution) -> None:
    worker = Worker(am, provisional=True)
    worker.verdict(revision(verdict, 1, status="provisional"))
    [alert] = am.alerts()
    assert alert["labels"]["severity"] == "warning" and alert["annotations"]["status"] == "provisional"
    worker.verdict(revision(verdict, 2))
    [alert] = am.alerts()  # the provisional alert resolved, the final one fires
    assert alert["labels"]["severity"] == "critical" and alert["annotations"]["status"] == "final"


def test_a_restart_never_duplicates(am: Alertmanager, verdict: Attribution) -> None:
    first = Worker(am)
    first.verdict(revision(verdict, 2))
    assert len(am.alerts()) == 1
    # a new process with the table the changelog gives back reads the same verdict again
    second = Worker(am, table={k: v for k, v in first.table.items()})
    second.verdict(revision(verdict, 2))
    assert len(am.alerts()) == 1
    # and resolves what the first one fired when the next revision changes the label set
    second.verdict(revision(verdict, 3, quality="ambiguous"))
    assert [a["labels"]["quality"] for a in am.alerts()] == ["ambiguous"]
    # a process that lost its state entirely still posts the same alert, never a second one
    third = Worker(am)
    third.verdict(revision(verdict, 3, quality="ambiguous"))
    assert len(am.alerts()) == 1


def test_refresh_moves_ends_at_ahead(am: Alertmanager, verdict: Attribution) -> None:
    worker = Worker(am, hold_s=60)
    worker.verdict(verdict)
    first_end = parse_utc(am.alerts()[0]["endsAt"])
    time.sleep(1.1)
    assert len(worker.apply("c1", TickMessage())) == 1
    [alert] = am.alerts()
    assert parse_utc(alert["endsAt"]) - first_end >= NS
    assert worker.apply("other", TickMessage()) == []  # nothing firing there


def test_the_node_back_in_service_resolves(am: Alertmanager, verdict: Attribution) -> None:
    worker = Worker(am)
    worker.verdict(verdict)
    cert = Certification(host="node-a02", cluster="c1", suite="dcgmi-diag-r3", passed=False,
                         finished_at=verdict.decided_at + 600 * NS)
    assert worker.apply("c1", CertificationInMessage(certification=cert)) == []
    early = cert.model_copy(update={"passed": True, "finished_at": verdict.decided_at - NS})
    assert worker.apply("c1", CertificationInMessage(certification=early)) == []
    other = cert.model_copy(update={"passed": True, "host": "node-a01"})
    assert worker.apply("c1", CertificationInMessage(certification=other)) == []
    assert len(am.alerts()) == 1  # a failed one, one from before the verdict, another node: no
    [resolution] = worker.apply("c1", CertificationInMessage(certification=cert.model_copy(update={"passed": True})))
    assert resolution["labels"]["verdict_id"] == verdict.attribution_id
    assert am.alerts() == []


def test_a_verdict_of_several_hosts_resolves_when_all_passed(verdict: Attribution) -> None:
    culprits = verdict.culprits.model_copy(update={"hosts": ["node-a02", "node-a01"], "gpus": []})
    att = verdict.model_copy(update={"culprits": culprits})
    book = AlertBook()
    now = att.decided_at + 10 * NS
    [fired] = book.verdict(att, now)
    assert fired["labels"]["culprit_host"] == "node-a01,node-a02" and "culprit_gpu" not in fired["labels"]
    passed = Certification(host="node-a01", suite="nvcre", passed=True, finished_at=now)
    assert book.certification(passed, now) == []
    [resolution] = book.certification(passed.model_copy(update={"host": "node-a02"}), now)
    assert parse_utc(resolution["endsAt"]) == now and book.firing == {}


def test_unreachable_and_refusing_alertmanager_are_clear_errors(am: Alertmanager, verdict: Attribution) -> None:
    gone = AlertmanagerClient(f"http://127.0.0.1:{free_port()}", attempts=2, retry_wait_s=0.01)
    with pytest.raises(AlertmanagerUnavailable, match="failed after 2 attempts"):
        gone.post([{"labels": {"alertname": "x"}}])
    client = AlertmanagerClient(am.url, attempts=3, retry_wait_s=0.01)
    with pytest.raises(AlertmanagerError, match="HTTP 400") as info:  # an alert without labels
        client.post([{"labels": {}, "annotations": {}}])
    assert not isinstance(info.value, AlertmanagerUnavailable)  # a refusal is not retried
    assert am.alerts() == []


def action(kind: str, host: str = "node-a02") -> RemediationAction:
    return RemediationAction(
        action_id=f"act-{kind}-0001", attribution_id="att-2dc4877907761f69802e67cc", cluster="c1",
        target=RemediationTarget(host=host), action=kind, policy_id="gpu.fell_off_bus", policy_version="7",
        cause_code="gpu.xid.79", reason="xid 79: GPU fell off the bus", state="approved",
        created_at=1_796_001_600 * NS)


def test_notify_goes_to_alertmanager_everything_else_to_the_executor(am: Alertmanager) -> None:
    from sinks.executors.settings import ExecutorSettings, NotifyRouted

    settings = ExecutorSettings(clusters={"c1": {"kind": "dry_run", "notify": {"kind": "alertmanager", "url": am.url}}})
    executor = settings.executor_for("c1")
    assert isinstance(executor, NotifyRouted) and executor.name == "dry_run"
    res = executor.execute(action("notify"))
    assert res.ok and res.executor == "alertmanager", res
    assert res.commands == [f"POST {am.url}/api/v2/alerts action_id=act-notify-0001"]
    drained = executor.execute(action("drain"))
    assert drained.ok and drained.executor == "dry_run" and drained.detail.startswith("dry-run")
    [alert] = am.alerts()
    assert alert["labels"] == {"alertname": "FaultstreamRemediation", "source": "faultstream",
                               "action_id": "act-notify-0001", "verdict_id": "att-2dc4877907761f69802e67cc",
                               "incident": "att-2dc4877907761f69802e67cc",
                               "action": "notify", "cluster": "c1", "root_cause": "gpu.xid.79",
                               "target_host": "node-a02", "severity": "warning"}
    assert alert["annotations"]["reason"] == "xid 79: GPU fell off the bus"
    executor.execute(action("notify"))  # the same action again (a retry, a restart): the same alert
    assert len(am.alerts()) == 1
    # a target that is not a node name never reaches Alertmanager
    refused = executor.execute(action("notify", host="node-a01; reboot"))
    assert not refused.ok and "not a valid node name" in refused.detail and refused.commands == []
    assert len(am.alerts()) == 1
    # as a cluster's only executor it notifies and refuses to pretend it drained anything
    from sinks.executors.alertmanager import AlertmanagerExecutor

    alone = AlertmanagerExecutor(am.url)
    not_done = alone.execute(action("drain"))
    assert not not_done.ok and not_done.detail == "unsupported by alertmanager executor: drain (it only notifies)"
    assert alone.plan(action("drain")) == [] and len(am.alerts()) == 1


def test_notify_to_a_generic_webhook() -> None:
    from sinks.executors.settings import ExecutorSettings
    from sinks.executors.webhook import WebhookExecutor

    settings = ExecutorSettings(clusters={"c1": {"kind": "slurm", "notify": {"kind": "webhook",
                                                                             "url": "http://127.0.0.1:9/hook"}}})
    executor = settings.executor_for("c1")
    assert isinstance(executor.notifier, WebhookExecutor) and executor.name == "slurm"
    assert executor.plan(action("notify"))[0].startswith("POST http://127.0.0.1:9/hook")
    assert executor.plan(action("drain"))[0].startswith("scontrol update")


def test_a_notify_route_must_be_alertmanager_or_webhook() -> None:
    from sinks.executors.settings import ClusterExecutor

    with pytest.raises(ValueError, match="expected one of alertmanager, webhook"):
        ClusterExecutor(kind="slurm", notify={"kind": "slurm"})
    with pytest.raises(ValueError, match="url"):
        ClusterExecutor(kind="slurm", notify={"kind": "alertmanager"})
