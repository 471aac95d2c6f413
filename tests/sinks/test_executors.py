"""Remediation executors (``sinks/executors``).

* Slurm: against the real single-node Slurm 22.05 (``slurm_cluster``): drain with a sanitised
  reason -> ``scontrol show node`` shows DRAIN and the reason; resume -> idle again (the node is
  put back in a ``finally`` even when an assertion fails); reboot refused by a Slurm without
  ``RebootProgram``; unknown node, unsupported action, missing binary, transient failure retried,
  timeout -- all ``ok=False``, never raised.
* Webhook: against a real local HTTP server (``http.server`` in a thread): body = canonical
  JSON, idempotency header, 500 then 200 retried, 400 not retried, connection refused, timeout.
* Kubernetes: the patch/taint/eviction builders; the executor's requests against a *stub* of
  the Kubernetes REST API (a local HTTP server that answers the handful of endpoints the
  official client calls -- it checks what faultstream sends, it is not a cluster); and an
  integration test against a real control plane on loopback (``tests.k8s_fixtures``: etcd,
  kube-apiserver, kube-controller-manager, kwok nodes and pods); it fails when that cannot start.
* Dry run: logs the exact command, changes nothing (the Slurm node, the webhook, the API stub).
* ExecutorSettings: everything off but dry-run; per-cluster entries; option errors at load.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import socket
import subprocess
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client as k8s
from pydantic import ValidationError

from connectors.slurm import parse_scontrol_nodes
from schemas.records import GpuRef, RemediationAction, RemediationTarget, canonical_json
from sinks.executors.alertmanager import AlertmanagerExecutor
from sinks.executors import (
    EXECUTORS,
    ClusterExecutor,
    DryRunExecutor,
    ExecutionResult,
    Executor,
    ExecutorSettings,
    KubernetesExecutor,
    SlurmExecutor,
    WebhookExecutor,
    build_executor,
    slurm_reason,
)
from sinks.executors.kubernetes import (
    CORDONED_BY,
    MIRROR_ANNOTATION,
    NO_HEALTH_FAILURES,
    condition_entries,
    condition_entry,
    condition_patch,
    cordon_patch,
    eviction_body,
    evictable_pods,
    taints_with,
    taints_without,
    uncordon_patch,
)
from sinks.executors.slurm import REASON_MAX_BYTES
from tests.slurm_fixtures import slurm_cluster  # noqa: F401

ACTION_ID = "act-5f0c2a1e5d1b4c579a4e1f2b"
SET_CONDITION = ("PATCH /api/v1/nodes/node-a01/status condition FaultstreamRemediation=True "
                 "reason FaultstreamRemediationIsNotHealthy")


def make_action(kind: str = "drain", host: str | None = "node-a01", *, reason: str = "xid 79: GPU fell off the bus",
                sequence: int = 2, **target: Any) -> RemediationAction:
    return RemediationAction(
        action_id=ACTION_ID, attribution_id="wl-c1-1001-1", incident_id="inc-1", cluster="c1",
        target=RemediationTarget(host=host, **target), action=kind, mode="auto", policy_id="gpu.fell_off_bus",
        cause_code="gpu.fell_off_bus", state="executing", sequence=sequence, reason=reason,
        created_at=1_796_001_600_000_000_000, updated_at=1_796_001_660_000_000_000)


def test_every_executor_follows_the_protocol():
    from sinks.executors.nvsentinel import NVSentinelExecutor

    assert set(EXECUTORS) == {"dry_run", "slurm", "kubernetes", "webhook", "nvsentinel", "alertmanager"}
    for ex in (DryRunExecutor(), SlurmExecutor(), KubernetesExecutor(api_client=object()),
               WebhookExecutor("http://127.0.0.1:9/"), NVSentinelExecutor("127.0.0.1:9"),
               AlertmanagerExecutor("http://127.0.0.1:9/")):
        assert isinstance(ex, Executor)
        assert ex.name in EXECUTORS and isinstance(EXECUTORS[ex.name], type) and isinstance(ex, EXECUTORS[ex.name])


# == Slurm ===========================================================================================


def node_fields(node: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "-o", "show", "node", node], capture_output=True, text=True, check=True)
    return parse_scontrol_nodes(out.stdout)[node]


def flags(state: str) -> tuple[str, set[str]]:
    parts = [p.rstrip("*~#!%$@^-") for p in state.split("+")]
    return parts[0], set(parts[1:])


@contextmanager
def restored(node: str):
    """Put ``node`` back in service when the block ends, whatever happened in it."""
    try:
        yield
    finally:
        base, fl = flags(node_fields(node)["State"])
        if "DRAIN" in fl or base in ("DOWN", "DRAINED"):
            subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], capture_output=True)
        assert "DRAIN" not in flags(node_fields(node)["State"])[1], "the test node was left drained"


def test_slurm_drain_then_resume_real_node(slurm_cluster):  # noqa: F811
    node = slurm_cluster.node
    ex = SlurmExecutor()
    action = make_action("drain", node, reason='xid 79: GPU "fell off" the bus\non GPU 3')
    reason = f'faultstream {ACTION_ID}: xid 79: GPU _fell off_ the bus on GPU 3'
    with restored(node):
        res = ex.execute(action)
        assert res.ok, res.detail
        assert res.executor == "slurm"
        assert res.commands == [f"scontrol update NodeName={node} State=DRAIN 'Reason={reason}'"]
        fields = node_fields(node)
        base, fl = flags(fields["State"])
        assert "DRAIN" in fl and base == "IDLE"
        # slurmctld appends " [user@time]" when it shows the reason
        assert re.fullmatch(re.escape(reason) + r" \[\w+@[\d\-T:]+\]", fields["Reason"]), fields["Reason"]
        assert res.detail == f"{node} State={fields['State']} Reason={reason}"

        back = ex.resume(node, "certification cert-1 passed")
        assert back.ok, back.detail
        assert back.commands == [f"scontrol update NodeName={node} State=RESUME"]
        base, fl = flags(node_fields(node)["State"])
        assert base == "IDLE" and not fl & {"DRAIN", "DOWN", "FAIL"}
        assert "Reason" not in node_fields(node)
        assert back.detail.startswith(f"{node} State=IDLE")

        again = ex.resume(node, "certification cert-1 passed")  # already in service: still ok
        assert again.ok and again.detail.startswith(f"already in service: {node} State=IDLE"), again.detail


def test_slurm_cordon_is_a_drain_and_long_reason_is_cut(slurm_cluster):  # noqa: F811
    node = slurm_cluster.node
    action = make_action("cordon", node, reason="ünïcode ✓ " + "x" * 600)
    with restored(node):
        res = SlurmExecutor().execute(action)
        assert res.ok, res.detail
        stored = re.sub(r" \[[^\]]*\]$", "", node_fields(node)["Reason"])
        assert len(stored.encode()) <= REASON_MAX_BYTES
        assert stored == slurm_reason(f"faultstream {ACTION_ID}: ünïcode ✓ " + "x" * 600)
        assert stored.startswith(f"faultstream {ACTION_ID}: ünïcode ✓ xxx")
        assert SlurmExecutor().resume(node, "cert passed").ok


def test_slurm_reboot_refused_without_reboot_program(slurm_cluster):  # noqa: F811
    node = slurm_cluster.node
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    assert re.search(r"^RebootProgram\s*=\s*\(null\)", config, re.M), \
        "the test Slurm must have no RebootProgram (this test would reboot the machine)"
    with restored(node):
        res = SlurmExecutor().execute(make_action("reboot", node))
        assert res.ok is False
        assert "RebootProgram isn't defined" in res.detail
        assert res.commands == [f"scontrol reboot ASAP nextstate=DOWN 'reason=faultstream {ACTION_ID}: "
                                f"xid 79: GPU fell off the bus' {node}"]


def test_slurm_unknown_node_is_not_raised(slurm_cluster):  # noqa: F811
    res = SlurmExecutor().execute(make_action("drain", "node-zz99"))
    assert res.ok is False
    assert res.detail == "scontrol update NodeName=node-zz99 failed: slurm_update error: Invalid node name specified"


@pytest.mark.parametrize("kind", ["reset_gpu", "disable_port", "swap_hot_spare", "reprovision", "rma", "recertify"])
def test_slurm_unsupported_actions(kind):
    res = SlurmExecutor(scontrol="/nonexistent").execute(make_action(kind, gpu=GpuRef(index=3)))
    assert res == ExecutionResult(ok=False, detail=f"unsupported by slurm executor: {kind}", executor="slurm")


def test_slurm_notify_is_a_no_op():
    res = SlurmExecutor(scontrol="/nonexistent").execute(make_action("notify"))
    assert (res.ok, res.detail, res.commands) == (True, "notify: nothing to do on Slurm", [])


def test_slurm_missing_binary_and_missing_host():
    res = SlurmExecutor(scontrol="/nonexistent").execute(make_action("drain"))
    assert res.ok is False and res.detail == "scontrol not found: /nonexistent (No such file or directory)"
    assert res.commands[0].startswith("/nonexistent update NodeName=node-a01 State=DRAIN")
    res = SlurmExecutor(scontrol="/nonexistent").resume("node-a01", "cert passed")
    assert res.ok is False and "scontrol not found" in res.detail
    res = SlurmExecutor().execute(make_action("drain", None, port="leaf-07/17"))
    assert res.ok is False and res.detail.startswith("drain needs a target host")


def _fake_scontrol(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "scontrol"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


def test_slurm_transient_failure_is_retried(slurm_cluster, tmp_path):  # noqa: F811
    """A controller that is briefly unreachable (the first call fails as scontrol does then) is
    retried by tenacity; the second call is the real scontrol."""
    node = slurm_cluster.node
    count = tmp_path / "calls"
    script = _fake_scontrol(tmp_path, f"""echo x >> {count}
if [ "$(wc -l < {count})" -eq 1 ]; then
  echo "slurm_update error: Unable to contact slurm controller (connect failure)" >&2; exit 1
fi
exec scontrol "$@"
""")
    with restored(node):
        res = SlurmExecutor(scontrol=str(script), retry_wait_s=0.05).execute(make_action("drain", node))
        assert res.ok, res.detail
        assert "DRAIN" in flags(node_fields(node)["State"])[1]
        assert SlurmExecutor().resume(node, "cert passed").ok
    # 1 failed + 1 successful update + 1 read-back
    assert len(count.read_text().splitlines()) == 3


def test_slurm_retries_run_out_and_timeouts(tmp_path):
    down = _fake_scontrol(tmp_path, 'echo "slurm_update error: Unable to contact slurm controller (connect failure)" >&2\nexit 1\n')
    res = SlurmExecutor(scontrol=str(down), attempts=2, retry_wait_s=0.01).execute(make_action("cordon"))
    assert res == ExecutionResult(ok=False, executor="slurm", commands=res.commands,
                                  detail="slurm_update error: Unable to contact slurm controller (connect failure)")
    slow = _fake_scontrol(tmp_path, "sleep 5\n")
    t0 = time.monotonic()
    res = SlurmExecutor(scontrol=str(slow), timeout_s=0.3, attempts=1).execute(make_action("cordon"))
    assert time.monotonic() - t0 < 3
    assert res.ok is False and res.detail == f"{slow} update NodeName=node-a01 timed out after 0.3 s"


def test_slurm_reason_sanitising():
    assert slurm_reason('a "b" \'c\' `d` \\e') == "a _b_ _c_ _d_ _e"
    assert slurm_reason("line1\n\tline2\x00 \r\n end") == "line1 line2 end"
    assert slurm_reason("   ") == "faultstream"
    cut = slurm_reason("é" * 300)  # 2 bytes each: cut at a character boundary
    assert cut == "é" * 127 and len(cut.encode()) == 254
    assert slurm_reason("x" * 300) == "x" * REASON_MAX_BYTES


# == Webhook =========================================================================================


class HookServer:
    """A real HTTP server on 127.0.0.1: records every request, answers from ``responses``
    (status, body, delay in s), then 200."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.responses: list[tuple[int, str, float]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.requests.append({"path": self.path, "body": body,
                                        "headers": {k.lower(): v for k, v in self.headers.items()}})
                status, text, delay = server.responses.pop(0) if server.responses else (200, '{"accepted": true}', 0)
                if delay:
                    time.sleep(delay)
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks/remediation"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hook():
    server = HookServer()
    yield server
    server.close()


def test_webhook_posts_canonical_json_with_idempotency_key(hook):
    action = make_action("drain")
    res = WebhookExecutor(hook.url, {"Authorization": "Bearer t0ken"}, timeout_s=5).execute(action)
    assert res == ExecutionResult(ok=True, detail='HTTP 200: {"accepted": true}', executor="webhook",
                                  commands=[f"POST {hook.url} Idempotency-Key: {ACTION_ID}-2"])
    (req,) = hook.requests
    assert req["path"] == "/hooks/remediation"
    assert req["body"] == canonical_json(action).encode()
    assert RemediationAction.model_validate_json(req["body"]) == action
    assert req["headers"]["content-type"] == "application/json"
    assert req["headers"]["idempotency-key"] == f"{ACTION_ID}-2"
    assert req["headers"]["authorization"] == "Bearer t0ken"


def test_webhook_500_then_200_is_retried_with_the_same_key(hook):
    hook.responses = [(500, '{"error": "database locked"}', 0)]
    res = WebhookExecutor(hook.url, retry_wait_s=0.01).execute(make_action("cordon", sequence=5))
    assert res.ok and res.detail == 'HTTP 200: {"accepted": true}'
    assert len(hook.requests) == 2
    assert {r["headers"]["idempotency-key"] for r in hook.requests} == {f"{ACTION_ID}-5"}
    assert hook.requests[0]["body"] == hook.requests[1]["body"]


def test_webhook_400_is_not_retried(hook):
    hook.responses = [(400, '{"error": "unknown action kind", "detail": "' + "y" * 400 + '"}', 0)]
    res = WebhookExecutor(hook.url, retry_wait_s=0.01).execute(make_action("cordon"))
    assert res.ok is False
    assert res.detail.startswith(f'cordon {ACTION_ID} to {hook.url} failed: HTTP 400: {{"error": "unknown action kind"')
    assert res.detail.endswith("...") and len(res.detail) < 320
    assert len(hook.requests) == 1


def test_webhook_5xx_until_retries_run_out(hook):
    hook.responses = [(503, "busy", 0)] * 3
    res = WebhookExecutor(hook.url, attempts=3, retry_wait_s=0.01).execute(make_action("cordon"))
    assert res.ok is False
    assert res.detail == f"cordon {ACTION_ID} to {hook.url} failed after 3 attempts: HTTP 503: busy"
    assert len(hook.requests) == 3


def test_webhook_connection_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/hook"
    res = WebhookExecutor(url, attempts=2, retry_wait_s=0.01).execute(make_action("cordon"))
    assert res.ok is False
    assert res.detail.startswith(f"cordon {ACTION_ID} to {url} failed after 2 attempts: ConnectError:")


def test_webhook_timeout(hook):
    hook.responses = [(200, "late", 1.0)]
    res = WebhookExecutor(hook.url, timeout_s=0.2, attempts=1).execute(make_action("cordon"))
    assert res.ok is False
    assert res.detail == f"cordon {ACTION_ID} to {hook.url} failed: timed out after 0.2 s (ReadTimeout)"


def test_webhook_resume(hook):
    res = WebhookExecutor(hook.url).resume("node-a01", "certification cert-1 passed")
    assert res.ok
    (req,) = hook.requests
    assert json.loads(req["body"]) == {"kind": "resume", "host": "node-a01", "reason": "certification cert-1 passed"}
    assert req["headers"]["idempotency-key"].startswith("resume-")
    assert res.commands == [f"POST {hook.url} Idempotency-Key: {req['headers']['idempotency-key']}"]
    # the same resume gives the same key
    WebhookExecutor(hook.url).resume("node-a01", "certification cert-1 passed")
    assert hook.requests[1]["headers"]["idempotency-key"] == req["headers"]["idempotency-key"]


@pytest.mark.parametrize("url, error", [("not a url", "UnsupportedProtocol"), ("http://[::1/hook", "InvalidURL")])
def test_webhook_invalid_url_is_not_raised_nor_retried(url, error):
    t0 = time.monotonic()
    res = WebhookExecutor(url, retry_wait_s=1.0).execute(make_action("cordon"))
    assert res.ok is False and res.detail.startswith(f"cordon {ACTION_ID} to {url} failed: {error}: ")
    assert time.monotonic() - t0 < 0.9  # no retry wait


# == Kubernetes: builders ============================================================================


def test_cordon_and_uncordon_patches():
    assert cordon_patch(ACTION_ID) == {"metadata": {"annotations": {CORDONED_BY: ACTION_ID}},
                                       "spec": {"unschedulable": True}}
    assert uncordon_patch() == {"metadata": {"annotations": {CORDONED_BY: None}}, "spec": {"unschedulable": False}}


def test_taints_with_and_without():
    added = datetime(2026, 11, 30, 1, 20, tzinfo=timezone.utc)
    existing = [k8s.V1Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule"),
                k8s.V1Taint(key="node.kubernetes.io/unreachable", effect="NoExecute", time_added=added),
                k8s.V1Taint(key="faultstream.io/remediation", value="act-old", effect="NoSchedule")]
    new = taints_with(existing, "faultstream.io/remediation", ACTION_ID, "NoSchedule")
    assert new == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-30T01:20:00Z"},
        {"key": "faultstream.io/remediation", "value": ACTION_ID, "effect": "NoSchedule"},
    ]
    # another effect of the same key is a second taint
    both = taints_with(new, "faultstream.io/remediation", ACTION_ID, "NoExecute")
    assert [(t["key"], t["effect"]) for t in both][-2:] == [("faultstream.io/remediation", "NoSchedule"),
                                                           ("faultstream.io/remediation", "NoExecute")]
    assert taints_without(both, "faultstream.io/remediation") == new[:2]
    assert taints_with(None, "k", "v", "NoSchedule") == [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    assert taints_without(None, "k") == []


def pod(name: str, ns: str = "default", *, owner: str | None = "ReplicaSet", annotations: dict | None = None,
        phase: str = "Running", deleting: bool = False, node: str = "node-a01", labels: dict | None = None) -> k8s.V1Pod:
    refs = [k8s.V1OwnerReference(api_version="apps/v1", kind=owner, name=f"{name}-owner", uid=str(uuid.uuid4()))] if owner else None
    return k8s.V1Pod(
        api_version="v1", kind="Pod",
        metadata=k8s.V1ObjectMeta(name=name, namespace=ns, owner_references=refs, annotations=annotations,
                                  labels=labels, deletion_timestamp=datetime.now(timezone.utc) if deleting else None),
        spec=k8s.V1PodSpec(node_name=node, containers=[k8s.V1Container(name="c", image="registry.k8s.io/pause:3.9")]),
        status=k8s.V1PodStatus(phase=phase))


def test_evictable_pods_like_kubectl_drain():
    pods = [pod("trainer-0"), pod("dcgm-exporter-x", "gpu-operator", owner="DaemonSet"),
            pod("kube-proxy-node-a01", "kube-system", owner="Node", annotations={MIRROR_ANNOTATION: "abc"}),
            pod("done-job", phase="Succeeded", owner="Job"), pod("bare-pod", owner=None),
            pod("going", deleting=True)]
    evict, skipped = evictable_pods(pods)
    assert [p.metadata.name for p in evict] == ["trainer-0", "bare-pod"]
    assert [(p.metadata.name, why) for p, why in skipped] == [
        ("dcgm-exporter-x", "DaemonSet pod"), ("kube-proxy-node-a01", "mirror pod"),
        ("done-job", "finished (Succeeded)"), ("going", "already terminating")]


def test_eviction_body():
    body = eviction_body(pod("trainer-0", "ml"))
    assert body.to_dict() == {"api_version": "policy/v1", "kind": "Eviction", "delete_options": None,
                              "metadata": k8s.V1ObjectMeta(name="trainer-0", namespace="ml").to_dict()}


def test_kubernetes_plans():
    ex = KubernetesExecutor(api_client=object())
    assert ex.plan(make_action("drain")) == [
        "kubectl cordon node-a01",
        f"kubectl annotate node node-a01 {CORDONED_BY}={ACTION_ID} --overwrite",
        f"kubectl taint nodes node-a01 faultstream.io/remediation={ACTION_ID}:NoSchedule --overwrite",
        SET_CONDITION,
        "kubectl drain node-a01 --ignore-daemonsets --delete-emptydir-data --force"]
    only = KubernetesExecutor(api_client=object(), taint_only=True, taint_key="example.com/fault", node_condition=None)
    assert only.plan(make_action("drain")) == [f"kubectl taint nodes node-a01 example.com/fault={ACTION_ID}:NoExecute --overwrite"]
    assert only.plan(make_action("cordon")) == [f"kubectl taint nodes node-a01 example.com/fault={ACTION_ID}:NoSchedule --overwrite"]
    assert ex.plan(make_action("reboot")) == []
    assert ex.plan_resume("node-a01", "recertified")[-1] == (
        "PATCH /api/v1/nodes/node-a01/status condition FaultstreamRemediation=False reason FaultstreamRemediationIsHealthy")
    with pytest.raises(ValueError, match="CamelCase"):
        KubernetesExecutor(node_condition="faultstream/remediation")


def test_node_condition_entries_and_patch():
    action = make_action("drain", gpu=GpuRef(index=3, pci_bus_id="0000:41:00.0", uuid="GPU-00000000-0000-4000-8000-000000000003"),
                         reason="xid 79: GPU fell off the bus;\n   injected: cordon node-b02")
    entry = condition_entry(action)
    assert entry == ("ErrorCode:gpu.fell_off_bus GPU:3 PCI:0000:41:00.0 GPU_UUID:GPU-00000000-0000-4000-8000-000000000003 "
                     "xid 79: GPU fell off the bus, injected: cordon node-b02 "
                     f"(faultstream drain {ACTION_ID}, verdict wl-c1-1001-1)")
    assert condition_entry(make_action("cordon", reason="")).startswith("ErrorCode:gpu.fell_off_bus gpu.fell_off_bus (faultstream cordon")
    assert condition_entries(None) == condition_entries(NO_HEALTH_FAILURES) == []
    assert condition_entries("a x;b y;") == ["a x", "b y"]
    at = 1_796_001_660_000_000_000  # 2026-11-30T01:21:00Z
    kubelet = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}
    set_ = condition_patch([kubelet], "FaultstreamRemediation", [entry], at)
    assert set_ == {"status": {"conditions": [{
        "type": "FaultstreamRemediation", "status": "True", "reason": "FaultstreamRemediationIsNotHealthy",
        "message": entry + ";", "lastHeartbeatTime": "2026-11-30T01:21:00Z", "lastTransitionTime": "2026-11-30T01:21:00Z"}]}}
    # the status unchanged: the transition time stays; cleared: False, IsHealthy, the time of the change
    before = k8s.V1NodeCondition(type="FaultstreamRemediation", status="True", message=entry + ";",
                                 last_transition_time=datetime(2026, 11, 30, 1, 21, tzinfo=timezone.utc))
    again = condition_patch([before], "FaultstreamRemediation", [entry, "second"], at + 60 * 10**9)["status"]["conditions"][0]
    assert (again["message"], again["lastTransitionTime"], again["lastHeartbeatTime"]) == (
        entry + ";second;", "2026-11-30T01:21:00Z", "2026-11-30T01:22:00Z")
    cleared = condition_patch([before], "FaultstreamRemediation", [], at + 120 * 10**9)["status"]["conditions"][0]
    assert (cleared["status"], cleared["reason"], cleared["message"], cleared["lastTransitionTime"]) == (
        "False", "FaultstreamRemediationIsHealthy", NO_HEALTH_FAILURES, "2026-11-30T01:23:00Z")
    # the oldest entries go first beyond the limit
    many = condition_patch([], "T", [f"{i:04d}" + "x" * 995 for i in range(6)], at)["status"]["conditions"][0]["message"]
    assert len(many) <= 4096 and many.startswith("0002") and many.endswith("x;")


@pytest.mark.parametrize("kind", ["reset_gpu", "reboot", "disable_port", "swap_hot_spare", "reprovision", "rma", "recertify"])
def test_kubernetes_unsupported_actions_touch_nothing(kind):
    res = KubernetesExecutor(api_client=object()).execute(make_action(kind))
    assert res == ExecutionResult(ok=False, detail=f"unsupported by kubernetes executor: {kind}", executor="kubernetes")


def test_kubernetes_without_configuration(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    res = KubernetesExecutor().execute(make_action("cordon"))
    assert res.ok is False
    assert res.detail.startswith("no Kubernetes configuration: kubeconfig: Invalid kube-config file.")
    assert "in-cluster: Service host/port is not set." in res.detail


# == Kubernetes: requests, against a stub of the REST API =================================================


def _merge(target: dict, patch: dict) -> dict:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def _pod_json(p: k8s.V1Pod) -> dict:
    return k8s.ApiClient().sanitize_for_serialization(p)


class ApiStub:
    """A local HTTP server answering the Kubernetes endpoints the executor uses (nodes GET/PATCH
    with resourceVersion conflicts, nodes/<name>/status PATCH merging conditions by type, pods
    list by spec.nodeName, pod evictions with PDB refusals).
    Not a cluster: it records the requests the official client sends."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict] = {"node-a01": {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": "node-a01", "resourceVersion": "100", "annotations": {}}, "spec": {
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}}}
        self.pods: list[dict] = []
        self.pdb_protected: set[str] = set()
        self.sticky = False  # evicted pods stay listed (a pod that does not terminate)
        self.conflicts = 0  # answer this many resourceVersion PATCHes with 409
        self.status_forbidden = False  # refuse PATCHes of nodes/<name>/status (no RBAC for it)
        self.requests: list[dict] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, doc: dict) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, reason: str, message: str) -> None:
                self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                  "message": message, "reason": reason, "code": code})

            def _record(self) -> dict | None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                stub.requests.append({"method": self.command, "path": urlparse(self.path).path,
                                      "query": parse_qs(urlparse(self.path).query),
                                      "content_type": self.headers.get("Content-Type"), "body": body})
                return body

            def do_GET(self) -> None:  # noqa: N802
                self._record()
                url = urlparse(self.path)
                if m := re.fullmatch(r"/api/v1/nodes/([^/]+)", url.path):
                    node = stub.nodes.get(m[1])
                    return self._send(200, node) if node else self._status(404, "NotFound", f'nodes "{m[1]}" not found')
                if url.path == "/api/v1/pods":
                    sel = parse_qs(url.query).get("fieldSelector", [""])[0]
                    name = sel.removeprefix("spec.nodeName=")
                    items = [p for p in stub.pods if p["spec"]["nodeName"] == name]
                    return self._send(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})
                self._status(404, "NotFound", "no such endpoint")

            def do_PATCH(self) -> None:  # noqa: N802
                body = self._record()
                m = re.fullmatch(r"/api/v1/nodes/([^/]+)(/status)?", urlparse(self.path).path)
                node = stub.nodes.get(m[1]) if m else None
                if node is None:
                    return self._status(404, "NotFound", "node not found")
                rv = (body.get("metadata") or {}).get("resourceVersion")
                if rv is not None:
                    if stub.conflicts > 0:
                        stub.conflicts -= 1
                        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
                    if rv != node["metadata"]["resourceVersion"]:
                        return self._status(409, "Conflict", "the object has been modified; please apply "
                                                             "your changes to the latest version and try again")
                if m[2]:  # the status subresource: a strategic merge patch, conditions merged by type
                    if stub.status_forbidden:
                        return self._status(403, "Forbidden", f'nodes "{m[1]}" is forbidden: User "x" cannot '
                                                              'patch resource "nodes/status"')
                    conditions = {c["type"]: c for c in node.setdefault("status", {}).get("conditions", [])}
                    for c in body["status"]["conditions"]:
                        conditions[c["type"]] = {**conditions.get(c["type"], {}), **c}
                    node["status"]["conditions"] = list(conditions.values())
                else:
                    _merge(node, {k: v for k, v in body.items()})
                node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
                self._send(200, node)

            def do_POST(self) -> None:  # noqa: N802
                self._record()
                m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction", urlparse(self.path).path)
                if not m:
                    return self._status(404, "NotFound", "no such endpoint")
                key = f"{m[1]}/{m[2]}"
                if key in stub.pdb_protected:
                    return self._status(429, "TooManyRequests",
                                        "Cannot evict pod as it would violate the pod's disruption budget.")
                if not stub.sticky:
                    stub.pods = [p for p in stub.pods if f"{p['metadata']['namespace']}/{p['metadata']['name']}" != key]
                self._send(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        cfg = k8s.Configuration()
        cfg.host = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.api_client = k8s.ApiClient(cfg)

    def node(self) -> dict:
        return self.nodes["node-a01"]

    def calls(self) -> list[tuple[str, str]]:
        return [(r["method"], r["path"]) for r in self.requests]

    def close(self) -> None:
        self.api_client.close()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def api():
    stub = ApiStub()
    yield stub
    stub.close()


def test_kubernetes_cordon_requests(api):
    res = KubernetesExecutor(api_client=api.api_client).execute(make_action("cordon"))
    assert res.ok, res.detail
    assert res.detail == f"node-a01 cordoned and tainted faultstream.io/remediation={ACTION_ID}:NoSchedule"
    assert res.commands == KubernetesExecutor(api_client=object()).plan(make_action("cordon"))
    assert api.calls() == [("PATCH", "/api/v1/nodes/node-a01"), ("GET", "/api/v1/nodes/node-a01"),
                           ("PATCH", "/api/v1/nodes/node-a01"), ("GET", "/api/v1/nodes/node-a01"),
                           ("PATCH", "/api/v1/nodes/node-a01/status")]
    cordon, _, taint, _, condition = api.requests
    assert cordon["content_type"] == "application/merge-patch+json" and cordon["body"] == cordon_patch(ACTION_ID)
    assert taint["body"] == {"metadata": {"resourceVersion": "101"}, "spec": {"taints": [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "faultstream.io/remediation", "value": ACTION_ID, "effect": "NoSchedule"}]}}
    assert condition["content_type"] == "application/strategic-merge-patch+json"
    assert condition["body"] == {"metadata": {"resourceVersion": "102"}, "status": {"conditions": [{
        "type": "FaultstreamRemediation", "status": "True", "reason": "FaultstreamRemediationIsNotHealthy",
        "message": f"ErrorCode:gpu.fell_off_bus xid 79: GPU fell off the bus (faultstream cordon {ACTION_ID}, "
                   "verdict wl-c1-1001-1);",
        "lastHeartbeatTime": "2026-11-30T01:21:00Z", "lastTransitionTime": "2026-11-30T01:21:00Z"}]}}
    assert api.node()["spec"]["unschedulable"] is True
    assert api.node()["metadata"]["annotations"] == {CORDONED_BY: ACTION_ID}


def test_kubernetes_node_condition_keeps_other_actions_and_a_refusal_is_a_failed_result(api):
    api.node()["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
    ex = KubernetesExecutor(api_client=api.api_client)
    first = make_action("cordon")
    assert ex.execute(first).ok and ex.execute(first).ok  # the same action again: one entry
    second = make_action("cordon").model_copy(update={"action_id": "act-2", "cause_code": "gpu.xid.48", "reason": "xid 48"})
    assert ex.execute(second).ok
    ready, mine = api.node()["status"]["conditions"]
    assert ready == {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    assert condition_entries(mine["message"]) == [condition_entry(first), condition_entry(second)]
    api.status_forbidden = True
    res = ex.execute(make_action("drain"))
    assert res.ok is False and res.detail == (
        "node-a01 cordoned; 0 pods evicted; node condition not set: set node condition FaultstreamRemediation "
        'of node-a01: HTTP 403 nodes "node-a01" is forbidden: User "x" cannot patch resource "nodes/status"')
    assert res.commands[-1] == "kubectl drain node-a01 --ignore-daemonsets --delete-emptydir-data --force"


def test_kubernetes_drain_evicts_like_kubectl(api):
    for p in (pod("trainer-0", "ml"), pod("trainer-1", "ml"), pod("dcgm-exporter-x", "gpu-operator", owner="DaemonSet"),
              pod("kube-proxy-node-a01", "kube-system", owner="Node", annotations={MIRROR_ANNOTATION: "abc"}),
              pod("other-node", node="node-a02")):
        api.pods.append(_pod_json(p))
    res = KubernetesExecutor(api_client=api.api_client, drain_timeout_s=2).execute(make_action("drain"))
    assert res.ok, res.detail
    assert res.detail == ("node-a01 cordoned; 2 pods evicted, 2 skipped (gpu-operator/dcgm-exporter-x "
                          "(DaemonSet pod), kube-system/kube-proxy-node-a01 (mirror pod)), all gone")
    assert res.commands[-3:] == ["kubectl drain node-a01 --ignore-daemonsets --delete-emptydir-data --force",
                                 "POST /api/v1/namespaces/ml/pods/trainer-0/eviction",
                                 "POST /api/v1/namespaces/ml/pods/trainer-1/eviction"]
    evictions = [r for r in api.requests if r["method"] == "POST"]
    assert [r["body"] for r in evictions] == [
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": n, "namespace": "ml"}}
        for n in ("trainer-0", "trainer-1")]
    listing = next(r for r in api.requests if r["path"] == "/api/v1/pods")
    assert listing["query"]["fieldSelector"] == ["spec.nodeName=node-a01"]
    assert [p["metadata"]["name"] for p in api.pods] == ["dcgm-exporter-x", "kube-proxy-node-a01", "other-node"]


def test_kubernetes_drain_blocked_by_pdb(api):
    api.pods += [_pod_json(pod("db-0", "data")), _pod_json(pod("trainer-0", "ml"))]
    api.pdb_protected.add("data/db-0")
    res = KubernetesExecutor(api_client=api.api_client).execute(make_action("drain"))
    assert res.ok is False
    assert res.detail == ("eviction blocked by PodDisruptionBudget: data/db-0 "
                          "(node-a01 cordoned; 1 pods evicted; node stays cordoned)")
    assert api.node()["spec"]["unschedulable"] is True
    # a 429 of a PDB is not retried
    assert [r["path"] for r in api.requests if r["method"] == "POST"] == [
        "/api/v1/namespaces/data/pods/db-0/eviction", "/api/v1/namespaces/ml/pods/trainer-0/eviction"]


@pytest.mark.slow
def test_kubernetes_drain_pods_that_do_not_go(api):
    api.pods.append(_pod_json(pod("stuck-0", "ml")))
    api.sticky = True
    res = KubernetesExecutor(api_client=api.api_client, drain_timeout_s=1.5).execute(make_action("drain"))
    assert res.ok is False
    assert res.detail == "node-a01 cordoned; 1 pods evicted; still on the node after 1.5 s: ml/stuck-0"


def test_kubernetes_taint_only(api):
    res = KubernetesExecutor(api_client=api.api_client, taint_only=True).execute(make_action("drain"))
    assert res.ok and res.detail == f"node-a01 tainted faultstream.io/remediation={ACTION_ID}:NoExecute"
    assert api.calls() == [("GET", "/api/v1/nodes/node-a01"), ("PATCH", "/api/v1/nodes/node-a01"),
                           ("GET", "/api/v1/nodes/node-a01"), ("PATCH", "/api/v1/nodes/node-a01/status")]
    assert res.commands[-1] == SET_CONDITION
    assert api.node()["status"]["conditions"][0]["status"] == "True"
    assert "unschedulable" not in api.node()["spec"]
    assert api.node()["spec"]["taints"][-1] == {"key": "faultstream.io/remediation", "value": ACTION_ID,
                                                "effect": "NoExecute"}


def test_kubernetes_taint_conflict_is_retried(api):
    api.conflicts = 1
    res = KubernetesExecutor(api_client=api.api_client, taint_only=True, node_condition=None,
                             retry_wait_s=0.01).execute(make_action("cordon"))
    assert res.ok, res.detail
    assert api.calls() == [("GET", "/api/v1/nodes/node-a01"), ("PATCH", "/api/v1/nodes/node-a01"),
                           ("GET", "/api/v1/nodes/node-a01"), ("PATCH", "/api/v1/nodes/node-a01")]


def test_kubernetes_resume_uncordons_only_what_faultstream_cordoned(api):
    ex = KubernetesExecutor(api_client=api.api_client)
    assert ex.execute(make_action("cordon")).ok
    res = ex.resume("node-a01", "certification cert-1 passed")
    assert res.ok and res.detail == (f"node-a01 taint faultstream.io/remediation removed, uncordoned "
                                     f"(cordoned by {ACTION_ID}); condition FaultstreamRemediation cleared")
    [cleared] = api.node()["status"]["conditions"]
    assert (cleared["status"], cleared["reason"], cleared["message"]) == (
        "False", "FaultstreamRemediationIsHealthy", NO_HEALTH_FAILURES)
    assert api.node()["spec"] == {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
                                  "unschedulable": False}
    assert api.node()["metadata"]["annotations"] == {}
    assert res.commands == ["kubectl taint nodes node-a01 faultstream.io/remediation-", "kubectl uncordon node-a01",
                            f"kubectl annotate node node-a01 {CORDONED_BY}-",
                            "PATCH /api/v1/nodes/node-a01/status condition FaultstreamRemediation=False "
                            "reason FaultstreamRemediationIsHealthy"]
    # a node a person cordoned stays cordoned
    api.node()["spec"]["unschedulable"] = True
    res = ex.resume("node-a01", "certification cert-2 passed")
    assert res.ok is False and "stays cordoned: it was not cordoned by faultstream" in res.detail
    assert api.node()["spec"]["unschedulable"] is True


def test_kubernetes_unknown_node_and_unreachable_api(api):
    res = KubernetesExecutor(api_client=api.api_client).execute(make_action("cordon", "node-zz99"))
    assert res.ok is False and res.detail == 'cordon node node-zz99: HTTP 404 node not found'
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = k8s.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    res = KubernetesExecutor(api_client=k8s.ApiClient(cfg), attempts=2, retry_wait_s=0.01).execute(make_action("cordon"))
    assert res.ok is False and res.detail.startswith("cordon node node-a01: MaxRetryError")


# == Kubernetes: a real control plane (tests.k8s_fixtures) ============================================


@pytest.mark.k8s
def test_kubernetes_cluster_cordon_drain_resume(k8s_cluster):
    """Against the loopback control plane (``k8s_cluster``: kube-apiserver, the controller
    manager's disruption controller, kwok): cordons, taints, sets the FaultstreamRemediation node
    condition and drains one kwok node (``node-x01``), with a pod pinned to it in a fresh
    namespace protected by a PodDisruptionBudget, then without it; resumes the node in any case
    (the condition cleared) and deletes the namespace."""
    api_client = k8s_cluster.api_client()
    core, policy = k8s.CoreV1Api(api_client), k8s.PolicyV1Api(api_client)
    name = "node-x01"
    k8s_cluster.add_node(name)
    ns = f"faultstream-test-{uuid.uuid4().hex[:8]}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    k8s_cluster.wait_for_service_account(ns)
    ex = KubernetesExecutor(api_client=api_client, drain_timeout_s=120)
    action = make_action("drain", name)
    try:
        core.create_namespaced_pod(ns, k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name="guarded", labels={"app": "guarded"}),
            spec=k8s.V1PodSpec(node_name=name, termination_grace_period_seconds=0, tolerations=[
                k8s.V1Toleration(operator="Exists")],
                containers=[k8s.V1Container(name="pause", image="registry.k8s.io/pause:3.9")])))
        policy.create_namespaced_pod_disruption_budget(ns, k8s.V1PodDisruptionBudget(
            metadata=k8s.V1ObjectMeta(name="guarded"),
            spec=k8s.V1PodDisruptionBudgetSpec(min_available=1, selector=k8s.V1LabelSelector(match_labels={"app": "guarded"}))))
        deadline = time.monotonic() + 120
        while core.read_namespaced_pod("guarded", ns).status.phase != "Running":
            assert time.monotonic() < deadline, "the test pod did not start"
            time.sleep(1)
        time.sleep(2)  # the disruption controller computes the budget

        blocked = ex.execute(action)
        assert blocked.ok is False and f"eviction blocked by PodDisruptionBudget: {ns}/guarded" in blocked.detail
        node = core.read_node(name)
        assert node.spec.unschedulable is True
        assert node.metadata.annotations[CORDONED_BY] == ACTION_ID
        assert any(t.key == "faultstream.io/remediation" and t.value == ACTION_ID for t in node.spec.taints or [])
        [marked] = [c for c in node.status.conditions if c.type == "FaultstreamRemediation"]
        assert (marked.status, marked.reason, marked.message) == (
            "True", "FaultstreamRemediationIsNotHealthy", condition_entry(action) + ";")
        assert marked.last_heartbeat_time == datetime(2026, 11, 30, 1, 21, tzinfo=timezone.utc)
        assert {c.type for c in node.status.conditions} >= {"Ready", "FaultstreamRemediation"}

        policy.delete_namespaced_pod_disruption_budget("guarded", ns)
        done = ex.execute(action)
        assert done.ok, done.detail
        # kwok's node heartbeats since then kept it; the same action is not listed twice
        [marked] = [c for c in core.read_node(name).status.conditions if c.type == "FaultstreamRemediation"]
        assert (marked.status, marked.message) == ("True", condition_entry(action) + ";")
        assert f"{ns}/guarded" not in {f"{p.metadata.namespace}/{p.metadata.name}" for p in
                                       core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items}
    finally:
        back = ex.resume(name, "integration test cleanup")
        core.delete_namespace(ns)
    assert back.ok, back.detail
    node = core.read_node(name)
    assert not node.spec.unschedulable
    assert not any(t.key == "faultstream.io/remediation" for t in node.spec.taints or [])
    assert CORDONED_BY not in (node.metadata.annotations or {})
    [cleared] = [c for c in node.status.conditions if c.type == "FaultstreamRemediation"]
    assert (cleared.status, cleared.reason, cleared.message) == ("False", "FaultstreamRemediationIsHealthy", NO_HEALTH_FAILURES)
    assert cleared.last_transition_time > marked.last_transition_time
    assert "condition FaultstreamRemediation cleared" in back.detail


# == Dry run ==========================================================================================


def test_dry_run_logs_the_command_and_changes_nothing(slurm_cluster, hook, api, caplog):  # noqa: F811
    node = slurm_cluster.node
    before = node_fields(node)
    caplog.set_level(logging.INFO, logger="faultstream.executor.dry_run")
    action = make_action("drain", node)
    res = DryRunExecutor(would=SlurmExecutor()).execute(action)
    expected = f"scontrol update NodeName={node} State=DRAIN 'Reason=faultstream {ACTION_ID}: xid 79: GPU fell off the bus'"
    assert res == ExecutionResult(ok=True, executor="dry_run", commands=[expected], detail=f"dry-run: would run: {expected}")
    (rec,) = caplog.records
    assert rec.getMessage() == res.detail
    assert (rec.action_id, rec.action, rec.host, rec.sequence, rec.would, rec.commands) == (
        ACTION_ID, "drain", node, 2, "slurm", [expected])
    after = node_fields(node)
    assert (after["State"], after.get("Reason")) == (before["State"], before.get("Reason"))

    assert DryRunExecutor(would=WebhookExecutor(hook.url)).execute(action).commands == [
        f"POST {hook.url} Idempotency-Key: {ACTION_ID}-2"]
    assert DryRunExecutor(would=KubernetesExecutor(api_client=api.api_client)).execute(action).ok
    assert hook.requests == [] and api.requests == []

    res = DryRunExecutor(would=SlurmExecutor()).resume(node, "cert passed")
    assert res.detail == f"dry-run: would run: scontrol update NodeName={node} State=RESUME"
    assert node_fields(node)["State"] == before["State"]


def test_dry_run_without_a_target_executor():
    res = DryRunExecutor().execute(make_action("reset_gpu", gpu=GpuRef(index=3)))
    assert res.ok and res.detail == f"dry-run: would do: reset_gpu host=node-a01 gpu=3 (action {ACTION_ID}, seq 2)"
    res = DryRunExecutor(would=SlurmExecutor()).execute(make_action("reset_gpu"))
    assert res.ok and res.commands == [] and res.detail == "dry-run: would do: nothing (reset_gpu needs no command on slurm)"
    assert DryRunExecutor().resume("node-a01", "ok").detail == "dry-run: would do: resume host=node-a01"


# == Settings =========================================================================================


def test_settings_everything_off_but_dry_run(monkeypatch):
    monkeypatch.delenv("FAULTSTREAM_EXECUTOR_CLUSTERS", raising=False)
    settings = ExecutorSettings()
    assert settings.clusters == {} and settings.enabled() == {}
    ex = settings.executor_for("c1")
    assert isinstance(ex, DryRunExecutor) and ex.would is None
    assert settings.executor_for("c1") is ex


def test_settings_per_cluster_entries(monkeypatch):
    monkeypatch.setenv("FAULTSTREAM_EXECUTOR_CLUSTERS", json.dumps({
        "c1": {"kind": "slurm"},
        "c2": {"kind": "slurm", "dry_run": True, "scontrol": "/usr/local/bin/scontrol"},
        "k8s-a": {"kind": "kubernetes", "taint_only": True, "taint_key": "example.com/fault"},
        "c3": {"kind": "webhook", "url": "https://remedy.example/hook", "headers": {"Authorization": "Bearer x"},
               "timeout_s": 3},
    }))
    s = ExecutorSettings()
    assert s.enabled() == {"c1": "slurm", "c3": "webhook", "k8s-a": "kubernetes"}
    assert isinstance(s.executor_for("c1"), SlurmExecutor) and s.executor_for("c1").scontrol == "scontrol"
    c2 = s.executor_for("c2")
    assert isinstance(c2, DryRunExecutor) and isinstance(c2.would, SlurmExecutor)
    assert c2.would.scontrol == "/usr/local/bin/scontrol"
    k = s.executor_for("k8s-a")
    assert isinstance(k, KubernetesExecutor) and k.taint_only and k.taint_key == "example.com/fault"
    w = s.executor_for("c3")
    assert isinstance(w, WebhookExecutor) and (w.url, w.headers, w.timeout_s) == (
        "https://remedy.example/hook", {"Authorization": "Bearer x"}, 3)
    assert isinstance(s.executor_for("elsewhere"), DryRunExecutor)


@pytest.mark.parametrize("entry, message", [
    ({"kind": "slurm", "bogus": 1}, "slurm executor options ['bogus']: got an unexpected keyword argument 'bogus'"),
    ({"kind": "webhook"}, "webhook executor options []: missing a required argument: 'url'"),
    ({"kind": "ansible"}, "Input should be 'dry_run', 'slurm', 'kubernetes', 'webhook', 'nvsentinel' or 'alertmanager'"),
])
def test_settings_errors_at_load(monkeypatch, entry, message):
    monkeypatch.setenv("FAULTSTREAM_EXECUTOR_CLUSTERS", json.dumps({"c1": entry}))
    with pytest.raises(ValidationError, match=re.escape(message)):
        ExecutorSettings()


def test_build_executor():
    ex = build_executor("dry_run", would="slurm")
    assert isinstance(ex, DryRunExecutor) and isinstance(ex.would, SlurmExecutor)
    assert isinstance(build_executor("webhook", url="http://127.0.0.1:9/"), WebhookExecutor)
    with pytest.raises(ValueError, match="unknown executor kind 'ssh'"):
        build_executor("ssh")
    assert ClusterExecutor(kind="slurm", attempts=5).options == {"attempts": 5}
