"""The Kubernetes connector (``connectors/kubernetes.py``) against a real control plane on
loopback (``tests.k8s_fixtures``: etcd, kube-apiserver, kube-controller-manager, kwok nodes and
pods, Kueue's Workload CRD): a Kueue Workload admitting a suspended Job whose two pods run
on two kwok nodes (ranks from the pods' environment), their logs served by kwok, a container
OOMKilled, a node condition, events, a pod evicted through the Eviction API and one deleted,
a resume after a restart without duplicates, and an expired watch (410 Gone) relisted.
Values are checked as the API server and the rule pack give them; the tests fail (never
skip) when the control plane cannot start.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client as k8s

from connectors.cursor import CursorStore
from connectors.kubernetes import KubernetesConnector, pod_rank, pod_workload
from correlators.rules.loader import load_rule_pack
from schemas.bundle import WorkloadSpec
from tests.k8s_fixtures import cri_log_line, wait_for

pytestmark = pytest.mark.k8s

CLUSTER = "fs-k8s"
NODES = ("node-a01", "node-a02")


@pytest.fixture(scope="module")
def cluster(k8s_cluster):
    for name in NODES:
        k8s_cluster.add_node(name)
    return k8s_cluster


@pytest.fixture
def ns(cluster):
    core = k8s.CoreV1Api(cluster.api_client())
    name = f"train-{uuid.uuid4().hex[:6]}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    cluster.wait_for_service_account(name)
    yield name
    core.delete_namespace(name)


def _connector(cluster, tmp_path, ns, **kw) -> KubernetesConnector:
    return KubernetesConnector(CLUSTER, api_client=cluster.api_client(), cursor=CursorStore(tmp_path / "cursor.json"),
                               spool_dir=tmp_path / "spool", namespaces=[ns], idle_s=0.1, **kw)


def _poll_until(conn, want, what, timeout_s=30.0):
    """Poll (committing each batch, as the runner does) until ``want(all so far)`` is true;
    returns everything polled."""
    seen = []

    def step():
        batch = conn.poll()
        conn.commit()
        seen.extend(batch)
        return want(seen)

    wait_for(step, what, timeout_s=timeout_s, interval_s=0.1)
    return seen


def _of(obs, fmt, **attrs):
    return [o for o in obs if o.format == fmt and all(o.attributes.get(k) == v for k, v in attrs.items())]


def _suspended_job(batch, ns, name):
    return batch.create_namespaced_job(ns, k8s.V1Job(
        metadata=k8s.V1ObjectMeta(name=name, labels={"kueue.x-k8s.io/queue-name": "team-a"}),
        spec=k8s.V1JobSpec(suspend=True, parallelism=2, completions=2, completion_mode="Indexed",
                           template=k8s.V1PodTemplateSpec(spec=k8s.V1PodSpec(
                               restart_policy="Never", containers=[k8s.V1Container(name="trainer", image="trainer:1")])))))


def _workload(custom, ns, job, count=2):
    body = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": f"job-{job.metadata.name}-3f2a1", "namespace": ns,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job.metadata.name,
                                              "uid": job.metadata.uid, "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": {"queueName": "team-a", "podSets": [{"name": "main", "count": count, "template": {
                "spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}}}]}}
    return custom.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "workloads", body)


def _set_workload_status(custom, ns, name, status):
    return custom.patch_namespaced_custom_object_status(
        "kueue.x-k8s.io", "v1beta1", ns, "workloads", name, {"status": status})


def _cond(ctype, reason, message, status="True"):
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def _pod(core, ns, name, job, node, index, nproc=8):
    return core.create_namespaced_pod(ns, k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, labels={"batch.kubernetes.io/job-name": job},
                                  annotations={"batch.kubernetes.io/job-completion-index": str(index)}),
        spec=k8s.V1PodSpec(node_name=node, restart_policy="Never", termination_grace_period_seconds=0,
                           containers=[k8s.V1Container(name="trainer", image="trainer:1", env=[
                               k8s.V1EnvVar(name="PET_NODE_RANK", value=str(index)),
                               k8s.V1EnvVar(name="PET_NPROC_PER_NODE", value=str(nproc))])])))


def _running(core, ns, name):
    return wait_for(lambda: core.read_namespaced_pod(name, ns).status.phase == "Running", f"pod {name} Running")


def _log(path, lines):
    with path.open("a") as fh:
        fh.writelines(cri_log_line(at, text) for at, text in lines)


def test_pod_rank_and_workload_from_labels_and_env():
    pod = {"metadata": {"namespace": "ml", "labels": {"jobset.sigs.k8s.io/jobset-name": "llm",
                                                      "batch.kubernetes.io/job-name": "llm-workers-0"},
                        "annotations": {"batch.kubernetes.io/job-completion-index": "3"}},
           "spec": {"containers": [{"name": "t", "env": [{"name": "PET_NPROC_PER_NODE", "value": "4"}]}]}}
    assert pod_workload(pod) == ("ml/llm", "JobSet")
    assert pod_rank(pod) == (12, 15)
    pod["spec"]["containers"][0]["env"].append({"name": "RANK", "value": "5"})
    assert pod_rank(pod) == (5, 5)
    assert pod_workload({"metadata": {"namespace": "ml", "labels": {"training.kubeflow.org/job-name": "pt"}}}) == (
        "ml/pt", "PyTorchJob")
    assert pod_workload({"metadata": {"namespace": "ml", "labels": {"app": "web"}}}) is None


def test_kueue_workload_pods_logs_oom_resume(cluster, ns, tmp_path):
    api = cluster.api_client()
    core, batch, custom = k8s.CoreV1Api(api), k8s.BatchV1Api(api), k8s.CustomObjectsApi(api)
    pack = load_rule_pack()
    job = _suspended_job(batch, ns, "llm")
    wl = _workload(custom, ns, job)
    wid = f"{ns}/llm"

    conn = _connector(cluster, tmp_path, ns)
    seen = _poll_until(conn, lambda s: _of(s, "k8s_workload", state="PENDING"), "the Workload PENDING")
    (pending,) = _of(seen, "k8s_workload")
    assert pending.workload_id == wid and pending.host == "_scheduler" and pending.kind == "scheduler_event"
    assert pending.attributes["queue"] == "team-a" and pending.attributes["kind"] == "Job"

    # Kueue admits it: quota reserved on cluster queue cq-a, the pods start on two kwok nodes
    _set_workload_status(custom, ns, wl["metadata"]["name"], {
        "admission": {"clusterQueue": "cq-a", "podSetAssignments": [
            {"name": "main", "count": 2, "flavors": {"nvidia.com/gpu": "h200"}}]},
        "conditions": [_cond("QuotaReserved", "QuotaReserved", "Quota reserved in ClusterQueue cq-a"),
                       _cond("Admitted", "Admitted", "The workload is admitted")]})
    for i, node in enumerate(NODES):
        _pod(core, ns, f"llm-{i}", "llm", node, i)
    for i in range(2):
        _running(core, ns, f"llm-{i}")
    logs = {i: cluster.serve_logs(ns, f"llm-{i}", "trainer") for i in range(2)}
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=30)
    _log(logs[0], [(t0, "[rank0]: step 100 loss 2.31"), (t0 + timedelta(seconds=1), "[rank0]: step 101 loss 2.30")])
    _log(logs[1], [(t0, "[rank8]: step 100 loss 2.31"),
                   (t0 + timedelta(seconds=1), (
                       "[rank9]:[E1130 01:20:31.299000000 ProcessGroupNCCL.cpp:632] [Rank 9] Watchdog caught "
                       "collective operation timeout: WorkNCCL(SeqNum=4242, OpType=ALLREDUCE, NumelIn=1048576, "
                       "NumelOut=1048576, Timeout(ms)=600000) ran for 600005 milliseconds before timing out."))])
    seen = _poll_until(conn, lambda s: _of(s, "workload_yaml") and len([o for o in s if o.kind == "log_line"]) >= 4,
                       "pods RUNNING, the spec and the 4 log lines")

    running = {o.attributes["step"]: o for o in _of(seen, "k8s_pod", state="RUNNING")}
    assert set(running) == {"llm-0", "llm-1"}
    assert running["llm-0"].host == "node-a01" and running["llm-1"].host == "node-a02"
    assert running["llm-1"].attributes["ranks"] == {"node-a02": [8, 15]}
    assert running["llm-1"].workload_id == wid
    (wrun,) = _of(seen, "k8s_workload", state="RUNNING")
    assert wrun.attributes["nodes"] == list(NODES)
    assert wrun.attributes["ranks"] == {"node-a01": [0, 7], "node-a02": [8, 15]} and wrun.attributes["ntasks"] == 16
    assert wrun.attributes["cluster_queue"] == "cq-a"
    pod1 = core.read_namespaced_pod("llm-1", ns)
    assert wrun.attributes["start_ns"] == int(min(core.read_namespaced_pod(f"llm-{i}", ns).status.start_time.timestamp()
                                                  for i in range(2))) * 10**9
    (spec_obs,) = _of(seen, "workload_yaml")
    spec = WorkloadSpec.model_validate(spec_obs.attributes["workload"])
    assert (spec.workload_id, spec.scheduler, spec.cluster, spec.state) == (wid, "kueue", CLUSTER, "RUNNING")
    assert spec.nodes == list(NODES) and spec.ranks_per_node == 8 and len(spec.ranks) == 16
    assert spec.ranks[9].host == "node-a02" and spec.start_ns == wrun.attributes["start_ns"]

    lines = sorted((o for o in seen if o.kind == "log_line"), key=lambda o: (o.host, o.position.line))
    assert [(o.host, o.rank, o.position.line) for o in lines] == [
        ("node-a01", 0, 1), ("node-a01", 0, 2), ("node-a02", 8, 1), ("node-a02", 9, 2)]
    nccl = lines[3]
    assert nccl.source.connector == "kubernetes" and nccl.workload_id == wid
    assert nccl.attributes["pod"] == f"{ns}/llm-1" and nccl.attributes["container"] == "trainer"
    assert nccl.position.file == f"pods/{ns}/llm-1/trainer" and nccl.format == "glog"
    assert "Watchdog caught collective operation timeout" in nccl.body
    assert any(e.type.startswith("nccl.") for e in pack.extract(nccl)), [e.type for e in pack.extract(nccl)]
    first_ids = {o.observation_id for o in seen}

    # restart: a new connector on the same cursor reads only what came after
    conn.close()
    _log(logs[1], [(t0 + timedelta(seconds=1), "[rank8]: step 101 loss 2.29"),
                   (t0 + timedelta(seconds=2), "[rank8]: step 102 loss 2.28")])
    conn = _connector(cluster, tmp_path, ns)
    seen2 = _poll_until(conn, lambda s: len([o for o in s if o.kind == "log_line"]) >= 2, "the 2 new log lines")
    seen2 += conn.poll()
    assert not first_ids & {o.observation_id for o in seen2}
    assert [(o.rank, o.position.line, o.body) for o in seen2 if o.kind == "log_line"] == [
        (8, 3, "[rank8]: step 101 loss 2.29"), (8, 4, "[rank8]: step 102 loss 2.28")]
    assert [o for o in seen2 if o.kind != "log_line"] == []

    # llm-1 is OOMKilled (the kubelet's status as kwok's would be), Kueue marks it finished
    started = pod1.status.start_time.strftime("%Y-%m-%dT%H:%M:%SZ")
    finished = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    core.patch_namespaced_pod_status("llm-1", ns, {"status": {"phase": "Failed", "containerStatuses": [{
        "name": "trainer", "image": "trainer:1", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": started,
                                 "finishedAt": finished}}}]}})
    _set_workload_status(custom, ns, wl["metadata"]["name"], {"conditions": [
        _cond("QuotaReserved", "QuotaReserved", "Quota reserved in ClusterQueue cq-a"),
        _cond("Admitted", "Admitted", "The workload is admitted"),
        _cond("Finished", "Failed", "Job failed: pod llm-1 OOMKilled")]})
    seen3 = _poll_until(conn, lambda s: _of(s, "k8s_workload", state="OUT_OF_MEMORY") and _of(s, "workload_yaml"),
                        "the workload OUT_OF_MEMORY")
    (oom,) = _of(seen3, "k8s_pod", state="OUT_OF_MEMORY")
    assert oom.host == "node-a02" and oom.attributes["exit_code"] == 137 and oom.attributes["reason"] == "OOMKilled"
    assert oom.observed_at == int(datetime.strptime(finished, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=UTC).timestamp()) * 10**9
    terminated = [e for e in pack.extract(oom) if e.type == "k8s.pod_terminated"]
    assert terminated and terminated[0].attributes["reason"] == "OOMKilled" and terminated[0].attributes["exit_code"] == 137
    (wend,) = _of(seen3, "k8s_workload", state="OUT_OF_MEMORY")
    assert wend.attributes["exit_status"] == "137:0" and wend.attributes["reason"] == "Failed"
    (final_spec,) = _of(seen3, "workload_yaml")
    fspec = WorkloadSpec.model_validate(final_spec.attributes["workload"])
    assert fspec.state == "OUT_OF_MEMORY" and fspec.exit_code == "137:0" and fspec.end is not None
    assert final_spec.observed_at == spec_obs.observed_at  # the same record, now with its end
    assert _of(seen3, "k8s_pod", step="llm-0") == []  # llm-0 still runs


def test_node_condition_and_events(cluster, ns, tmp_path):
    api = cluster.api_client()
    core = k8s.CoreV1Api(api)
    _pod(core, ns, "ev-0", "ev", "node-a01", 0)
    _running(core, ns, "ev-0")
    conn = _connector(cluster, tmp_path, ns, logs=False)
    _poll_until(conn, lambda s: _of(s, "k8s_pod", state="RUNNING"), "ev-0 RUNNING")

    # an NVSentinel-style node condition (True = the problem) and two warning events
    core.patch_node_status("node-a01", {"status": {"conditions": [{
        "type": "GpuXidError", "status": "True", "reason": "XidError79",
        "message": "GPU 0000:9c:00 reported Xid 79 (GPU has fallen off the bus)",
        "lastHeartbeatTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}]}})
    now = datetime.now(UTC)
    core.create_namespaced_event(ns, k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name="ev-0.oom"), type="Warning", reason="OOMKilling",
        message="Memory cgroup out of memory: Killed process 4242 (python3) total-vm:1000kB, anon-rss:900kB",
        involved_object=k8s.V1ObjectReference(kind="Pod", name="ev-0", namespace=ns),
        source=k8s.V1EventSource(component="kernel-monitor", host="node-a01"),
        first_timestamp=now, last_timestamp=now, count=1))
    core.create_namespaced_event(ns, k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name="ev-0.normal"), type="Normal", reason="Pulled", message="image pulled",
        involved_object=k8s.V1ObjectReference(kind="Pod", name="ev-0", namespace=ns),
        first_timestamp=now, last_timestamp=now, count=1))
    seen = _poll_until(conn, lambda s: _of(s, "k8s_node") and _of(s, "k8s_event"), "the node condition and the event")
    pack = load_rule_pack()
    try:
        (node_obs,) = _of(seen, "k8s_node")
        assert node_obs.host == "node-a01" and node_obs.attributes["bad"] == ["GpuXidError"]
        conds = [e for e in pack.extract(node_obs) if e.type == "k8s.node_condition"]
        assert [(e.attributes["condition"], e.attributes["status"], e.attributes["reason"]) for e in conds] == [
            ("GpuXidError", "True", "XidError79")]
        (ev,) = _of(seen, "k8s_event")
        assert ev.host == "node-a01" and ev.workload_id == f"{ns}/ev" and ev.attributes["reason"] == "OOMKilling"
        assert ev.observed_at == int(now.timestamp()) * 10**9
        kev = [e for e in pack.extract(ev) if e.type == "k8s.event"]
        assert kev and kev[0].attributes["reason"] == "OOMKilling" and kev[0].attributes["object"] == "pod/ev-0"
        assert conn.poll() == []  # nothing twice
    finally:
        core.patch_node_status("node-a01", {"status": {"conditions": [{
            "type": "GpuXidError", "status": "False", "reason": "NoXid", "message": "no XID"}]}})


def test_evicted_and_deleted_pods_and_410_relist(cluster, ns, tmp_path):
    api = cluster.api_client()
    core, policy = k8s.CoreV1Api(api), k8s.PolicyV1Api(api)
    for i, node in enumerate(NODES):
        _pod(core, ns, f"rl-{i}", "rl", node, i, nproc=1)
    _pod(core, ns, "rl-2", "rl", "node-a01", 2, nproc=1)
    for i in range(3):
        _running(core, ns, f"rl-{i}")
    conn = _connector(cluster, tmp_path, ns, logs=False)
    seen = _poll_until(conn, lambda s: len(_of(s, "k8s_pod", state="RUNNING")) == 3, "3 pods RUNNING")
    (wrun,) = _of(seen, "k8s_workload", state="RUNNING")
    assert wrun.attributes["ranks"] == {"node-a01": [0, 2], "node-a02": [1, 1]}

    # the Eviction API (a drain): DisruptionTarget EvictionByEvictionAPI, then kwok removes it
    policy_body = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name="rl-1", namespace=ns))
    core.create_namespaced_pod_eviction("rl-1", ns, policy_body)
    wait_for(lambda: "rl-1" not in {p.metadata.name for p in core.list_namespaced_pod(ns).items}, "rl-1 gone")
    seen = _poll_until(conn, lambda s: _of(s, "k8s_pod", step="rl-1"), "rl-1 ended")
    (ev,) = _of(seen, "k8s_pod", step="rl-1")
    assert (ev.attributes["state"], ev.attributes["reason"], ev.host) == ("PREEMPTED", "EvictionByEvictionAPI", "node-a02")
    assert policy is not None

    # stop; rl-2 is deleted while nobody watches; the saved resourceVersion has expired
    conn.commit()
    conn.close()
    core.delete_namespaced_pod("rl-2", ns, grace_period_seconds=0)
    wait_for(lambda: "rl-2" not in {p.metadata.name for p in core.list_namespaced_pod(ns).items}, "rl-2 gone")
    saved_rv = CursorStore(tmp_path / "cursor.json").load()["rv"]["pods"]
    assert cluster.compact_etcd() > int(saved_rv)  # the saved resourceVersion expires: 410 Gone
    conn = _connector(cluster, tmp_path, ns, logs=False)
    seen = _poll_until(conn, lambda s: _of(s, "k8s_pod", step="rl-2"), "rl-2 found ended by the relist")
    assert conn.relists == 1
    (gone,) = _of(seen, "k8s_pod", step="rl-2")
    assert (gone.attributes["state"], gone.attributes["reason"], gone.host) == ("CANCELLED", "Deleted", "node-a01")
    assert _of(seen, "k8s_pod", step="rl-0") == [] and _of(seen, "k8s_pod", step="rl-1") == []
    assert int(conn.checkpoint()["rv"]["pods"]) > int(saved_rv)


def test_indexed_job_run_by_the_job_controller_completes(cluster, ns, tmp_path):
    """A batch/v1 indexed Job whose pods the controller manager's job controller creates (its
    labels and completion-index annotations), pinned to a kwok node that runs and completes
    them: the workload goes PENDING -> RUNNING -> COMPLETED with the indices as ranks."""
    api = cluster.api_client()
    batch = k8s.BatchV1Api(api)
    batch.create_namespaced_job(ns, k8s.V1Job(
        metadata=k8s.V1ObjectMeta(name="idx"),
        spec=k8s.V1JobSpec(parallelism=2, completions=2, completion_mode="Indexed", template=k8s.V1PodTemplateSpec(
            spec=k8s.V1PodSpec(node_name="node-a02", restart_policy="Never", termination_grace_period_seconds=0,
                               containers=[k8s.V1Container(name="trainer", image="trainer:1")])))))
    conn = _connector(cluster, tmp_path, ns, logs=False)
    seen = _poll_until(conn, lambda s: _of(s, "k8s_workload", state="COMPLETED"), "the Job COMPLETED", timeout_s=60)
    wid = f"{ns}/idx"
    states = [o.attributes["state"] for o in _of(seen, "k8s_workload")]  # in the order polled
    assert states == ["PENDING", "RUNNING", "COMPLETED"]
    (done,) = _of(seen, "k8s_workload", state="COMPLETED")
    assert done.workload_id == wid and done.attributes["nodes"] == ["node-a02"]
    assert done.attributes["ranks"] == {"node-a02": [0, 1]} and done.attributes["exit_status"] == "0:0"
    assert done.attributes["kind"] == "Job" and done.attributes["pods"] == 2
    pods = {o.attributes["step"]: o for o in _of(seen, "k8s_pod", state="COMPLETED")}
    assert len(pods) == 2 and {o.attributes["rank_first"] for o in pods.values()} == {0, 1}
    spec = WorkloadSpec.model_validate(_of(seen, "workload_yaml")[-1].attributes["workload"])
    assert (spec.scheduler, spec.state, spec.nodes, sorted(spec.ranks)) == ("kubernetes", "COMPLETED", ["node-a02"], [0, 1])
    assert wait_for(lambda: batch.read_namespaced_job("idx", ns).status.succeeded == 2, "the Job succeeded")


def test_connect_kubernetes_once_publishes_to_kafka_once(cluster, ns, kafka_bootstrap, kafka_topic_factory, tmp_path):
    """``faultstream connect kubernetes --once`` (a subprocess, the registered command) against
    the control plane and the real Kafka broker: a finished pod's transitions and its log line
    reach the topic, key = host; a second run from the saved cursor publishes none of them
    again."""
    import subprocess
    import sys
    from pathlib import Path

    from connectors.kubernetes import connect_kubernetes_cli
    from connectors.registry import connectors
    from tests.connectors.test_slurm_cli import consume

    assert connectors()["kubernetes"] is connect_kubernetes_cli
    core = k8s.CoreV1Api(cluster.api_client())
    _pod(core, ns, "cli-0", "cli", "node-a01", 0, nproc=1)
    _running(core, ns, "cli-0")
    _log(cluster.serve_logs(ns, "cli-0", "trainer"), [(datetime.now(UTC), "[rank0]: epoch 1 done")])
    topic = kafka_topic_factory("obs")
    args = [sys.executable, "-m", "streams.cli", "connect", "kubernetes", CLUSTER, "--once", "--kubeconfig",
            str(cluster.kubeconfig), "--namespace", ns, "--cursor", str(tmp_path / "c.json"),
            "--bootstrap", kafka_bootstrap, "--topic", topic]
    root = Path(__file__).resolve().parents[2]

    def run_once() -> int:
        out = subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=120, check=False)
        assert out.returncode == 0, out.stderr
        return int(out.stderr.rsplit("published ", 1)[1].split()[0])

    total = run_once()
    msgs = consume(kafka_bootstrap, topic, until=lambda m: len(m) >= total, timeout=30, settle=0.5)
    assert len(msgs) == total
    pods = [(m["value"]["attributes"]["state"], m["key"]) for m in msgs if m["value"]["format"] == "k8s_pod"]
    assert pods == [("PENDING", "_scheduler"), ("RUNNING", "node-a01")]
    lines = [m for m in msgs if m["value"]["kind"] == "log_line"]
    assert [(m["key"], m["value"]["body"], m["value"]["rank"]) for m in lines] == [("node-a01", "[rank0]: epoch 1 done", 0)]
    assert lines[0]["value"]["source"] == {"connector": "kubernetes", "instance": CLUSTER}
    assert run_once() == 0  # nothing twice
    ids = [m["value"]["observation_id"] for m in consume(kafka_bootstrap, topic, until=lambda m: len(m) >= total)]
    assert len(ids) == len(set(ids)) == total


def test_kueue_job_failing_on_one_node_gives_the_bundles_verdict(cluster, ns, tmp_path):
    """examples/incidents/public-rc69-rank11-cuda-oom run on the test cluster: a Kueue-admitted
    Job of 4 pods x 4 ranks on node-a01..a04; rank 11's pod (node-a03) logs the bundle's
    train.log lines (its torchrun glog line re-timed into the run) and fails with exit code 1;
    Kueue marks the workload Finished/Failed. The connector's records, replayed through the
    pipeline, give the verdict of the equivalent bundle (the connector's workload spec as
    workload.yaml, the same lines as logs/node-a03/train.log), and the bundle's expected one
    (software, app.cuda.out_of_memory, node-a03, rank 11)."""
    import time
    from pathlib import Path

    import yaml

    from correlators.config import EngineConfig
    from streams.replay import replay_bundle, replay_observations

    api = cluster.api_client()
    core, batch, custom = k8s.CoreV1Api(api), k8s.BatchV1Api(api), k8s.CustomObjectsApi(api)
    nodes = ["node-a01", "node-a02", "node-a03", "node-a04"]
    for name in nodes:
        cluster.add_node(name)
    job = _suspended_job(batch, ns, "job-1069")
    wl = _workload(custom, ns, job, count=4)
    _set_workload_status(custom, ns, wl["metadata"]["name"], {
        "admission": {"clusterQueue": "cq-a", "podSetAssignments": [{"name": "main", "count": 4}]},
        "conditions": [_cond("QuotaReserved", "QuotaReserved", "Quota reserved in ClusterQueue cq-a"),
                       _cond("Admitted", "Admitted", "The workload is admitted")]})
    for i, node in enumerate(nodes):
        _pod(core, ns, f"job-1069-{i}", "job-1069", node, i, nproc=4)
    for i in range(4):
        _running(core, ns, f"job-1069-{i}")
    conn = _connector(cluster, tmp_path / "k8s", ns)
    records = _poll_until(conn, lambda s: _of(s, "k8s_workload", state="RUNNING"), "job-1069 RUNNING")

    bundle_log = Path(__file__).resolve().parents[2] / "examples/incidents/public-rc69-rank11-cuda-oom/logs/node-a03/train.log"
    time.sleep(1.1)
    at = datetime.now(UTC)
    lines = bundle_log.read_text().splitlines()
    lines = [re.sub(r"^W1026 03:51:31\.", at.strftime("W%m%d %H:%M:%S."), line) for line in lines]
    assert lines[2].startswith(at.strftime("W%m%d"))
    _log(cluster.serve_logs(ns, "job-1069-2", "trainer"), [(at, line) for line in lines])
    time.sleep(1.1)
    done = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    start = core.read_namespaced_pod("job-1069-2", ns).status.start_time.strftime("%Y-%m-%dT%H:%M:%SZ")
    core.patch_namespaced_pod_status("job-1069-2", ns, {"status": {"phase": "Failed", "containerStatuses": [{
        "name": "trainer", "image": "trainer:1", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": start, "finishedAt": done}}}]}})
    _set_workload_status(custom, ns, wl["metadata"]["name"], {"conditions": [
        _cond("QuotaReserved", "QuotaReserved", "Quota reserved in ClusterQueue cq-a"),
        _cond("Admitted", "Admitted", "The workload is admitted"),
        _cond("Finished", "Failed", "Job has reached the specified backoff limit")]})
    records += _poll_until(conn, lambda s: _of(s, "k8s_workload", state="FAILED") and
                           len([o for o in s if o.kind == "log_line"]) == 3, "job-1069 FAILED with its 3 log records")
    records += conn.poll()
    (final,) = [o for o in records if o.format == "workload_yaml" and o.attributes["workload"]["state"] == "FAILED"]
    spec = WorkloadSpec.model_validate(final.attributes["workload"])
    assert spec.nodes == nodes and spec.ranks_per_node == 4 and spec.ranks[11].host == "node-a03"
    assert spec.exit_code == "1:0"

    config = EngineConfig.default()
    verdicts, _, _ = replay_observations(records, config)
    (stream,) = [v for v in verdicts if v.scope.kind == "workload" and v.scope.id == f"{ns}/job-1069"]

    bundle = tmp_path / "bundle"
    (bundle / "logs" / "node-a03").mkdir(parents=True)
    (bundle / "workload.yaml").write_text(yaml.safe_dump(final.attributes["workload"], sort_keys=False))
    (bundle / "logs" / "node-a03" / "train.log").write_text("\n".join(lines) + "\n")
    offline = replay_bundle(bundle).attribution

    def verdict(v):  # what a verdict says (event ids differ: other observations, another workload id)
        return (v.domain, v.root_cause.code, v.root_cause.text, v.culprits.hosts, v.culprits.ranks,
                v.culprits.gpus, v.quality, [(a.code, a.domain) for a in v.alternatives])

    assert verdict(stream) == verdict(offline)
    assert (stream.domain, stream.root_cause.code, stream.culprits.hosts, stream.culprits.ranks) == (
        "software", "app.cuda.out_of_memory", ["node-a03"], [11])


def test_crash_before_the_cursor_save_and_rewind_repeat_the_same_records(cluster, ns, tmp_path):
    """Observations polled but never confirmed (a crash before the cursor save, or a failed
    delivery and :meth:`rewind`) come again with the same ids, log lines included, and the
    spool holds each line once."""
    core = k8s.CoreV1Api(cluster.api_client())
    _pod(core, ns, "cr-0", "cr", "node-a02", 0, nproc=1)
    _running(core, ns, "cr-0")
    t0 = datetime.now(UTC).replace(microsecond=0)
    _log(cluster.serve_logs(ns, "cr-0", "trainer"), [(t0, "[rank0]: step 1"), (t0, "[rank0]: step 2")])
    conn = _connector(cluster, tmp_path, ns, follow=False)
    conn.commit()  # an empty cursor: nothing confirmed yet
    first = wait_for(lambda: (b := conn.poll()) and [o for o in b if o.kind == "log_line"] and b, "the first batch")
    ids = sorted(o.observation_id for o in first)
    conn.rewind()  # the delivery failed
    again = conn.poll()
    assert sorted(o.observation_id for o in again) == ids
    conn.close()
    restarted = _connector(cluster, tmp_path, ns, follow=False)  # a crash: the cursor was never saved
    third = restarted.poll()
    assert sorted(o.observation_id for o in third) == ids
    assert [o.body for o in third if o.kind == "log_line"] == ["[rank0]: step 1", "[rank0]: step 2"]
    restarted.commit()
    later = restarted.poll()  # (cluster-wide node records of other tests may come; none of these)
    assert not {o.observation_id for o in later} & set(ids)
    assert [o for o in later if o.workload_id == f"{ns}/cr"] == []
    (spool,) = (tmp_path / "spool").glob("*.log")
    assert spool.read_text() == "[rank0]: step 1\n[rank0]: step 2\n"
