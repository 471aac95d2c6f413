"""The Helm chart (``deploy/helm/faultstream``): ``helm lint``, ``helm template`` of several value
sets with assertions on the rendered objects, then every rendered manifest applied to the real
loopback kube-apiserver (``kubectl apply --dry-run=server``, then for real) and the chart's
ServiceAccounts' rights checked with ``kubectl auth can-i --as=system:serviceaccount:...``.

helm is built by ``deploy/helm/setup.sh``, kubectl and the control plane by
``deploy/kubernetes/setup.sh`` (both into ``.state/kubernetes/bin``); a missing binary fails the
test with the command that builds it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s_fixtures import BIN, REPO, KubeCluster, wait_for
from tests.setup_fixtures import ensure

pytestmark = pytest.mark.k8s

CHART = REPO / "deploy" / "helm" / "faultstream"
SERVICEMONITOR_CRD = REPO / "tests" / "data" / "helm" / "servicemonitor-crd.yaml"
SERVICEMONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"

#: value sets: name -> (values, extra ``helm template`` arguments)
VALUE_SETS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "defaults": ({}, []),
    "everything": ({
        "workers": {"replicas": 3, "extraEnv": [{"name": "FAULTSTREAM_REMEDIATION_FLEET_SIZE", "value": "64"}]},
        "executors": {"kubernetes": {"enabled": True, "clusters": ["k8s-1", "k8s-2"]}},
        "nodeAgents": {"nvml": {"enabled": True, "xidEvents": True}},
        "kubernetesConnector": {"namespaces": ["training", "inference"]},
        "ui": {"allowCommands": True, "secureCookies": True,
               "tokens": {"existingSecret": "fs-ui-tokens", "sessionSecretKey": "session"}},
        "commandKeys": {"existingSecret": "fs-command-keys"},
        "topics": {"partitions": 24},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    }, ["--api-versions", SERVICEMONITOR_API]),
    "sasl-tls": ({
        "kafka": {"bootstrapServers": "kafka-0.kafka:9093,kafka-1.kafka:9093", "securityProtocol": "SASL_SSL",
                  "sasl": {"enabled": True, "mechanism": "SCRAM-SHA-512", "existingSecret": "fs-kafka-sasl",
                           "usernameKey": "username", "passwordKey": "password"},
                  "tls": {"caSecret": "fs-kafka-ca"}},
        "clickhouse": {"existingSecret": "fs-clickhouse"},
        "commandKeys": {"existingSecret": "fs-command-keys"},
    }, []),
    "executors": ({
        "executors": {"kubernetes": {"enabled": True, "clusters": ["k8s-1"], "dryRun": False}},
    }, []),
    # secret values given inline: they may appear in the chart's Secret and nowhere else
    "inline-secrets": ({
        "kafka": {"securityProtocol": "SASL_PLAINTEXT",
                  "sasl": {"enabled": True, "mechanism": "PLAIN", "username": "fs-user",
                           "password": "kafka-pass-9f1c2e7d4b8a6e3f"}},
        "clickhouse": {"url": "", "credentialedUrl": "http://writer:ch-pass-5d2a7e9c1f3b@clickhouse:8123"},
        "commandKeys": {"keys": {"ops-1": "cmd-key-0123456789abcdef0123456789abcdef"}},
    }, []),
}
INLINE_SECRETS = ["kafka-pass-9f1c2e7d4b8a6e3f", "ch-pass-5d2a7e9c1f3b", "cmd-key-0123456789abcdef0123456789abcdef"]

#: the exact rules of the Kubernetes connector's ClusterRole (what connectors/kubernetes.py reads)
CONNECTOR_RULES = [
    {"apiGroups": [""], "resources": ["pods", "nodes", "events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch"]},
]
#: the exact rules of the executor's ClusterRole (what sinks/executors/kubernetes.py calls)
EXECUTOR_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
]


def _binary(name: str, setup: str) -> str:
    ensure("helm" if name == "helm" else "kubernetes")
    path = BIN / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"{path} is missing: build it with `{setup}`", pytrace=False)
    return str(path)


def helm_bin() -> str:
    """Path of helm (``.state/kubernetes/bin/helm``); fails the test when it is missing."""
    return _binary("helm", "bash deploy/helm/setup.sh")


def _run(argv: list[str], *, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=120, check=False)
    if check and out.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {out.returncode}:\n{out.stderr}\n{out.stdout[-2000:]}", pytrace=False)
    return out


def release(value_set: str) -> str:
    """The release name of a value set (distinct, so the cluster-scoped RBAC objects differ)."""
    return f"fs-{value_set}"


def render(value_set: str, tmp_path: Path, namespace: str = "faultstream") -> str:
    """``helm template`` of the chart with ``value_set`` -> the multi-document YAML."""
    values, extra = VALUE_SETS[value_set]
    vfile = tmp_path / f"{value_set}.values.json"
    vfile.write_text(json.dumps(values))
    return _run([helm_bin(), "template", release(value_set), str(CHART), "--namespace", namespace,
                 "-f", str(vfile), *extra]).stdout


def objects(manifest: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(manifest) if d]


def by_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def workloads(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] in ("StatefulSet", "Deployment", "DaemonSet", "Job")]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


# -- helm lint and template -----------------------------------------------------------------------


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_helm_lint(value_set: str, tmp_path: Path) -> None:
    values, _ = VALUE_SETS[value_set]   # helm lint takes no --api-versions: no ServiceMonitor here
    vfile = tmp_path / "values.json"
    vfile.write_text(json.dumps(values))
    out = _run([helm_bin(), "lint", "--strict", str(CHART), "-f", str(vfile)])
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout


def test_defaults_render_the_safe_install(tmp_path: Path) -> None:
    objs = objects(render("defaults", tmp_path))
    kinds = sorted({o["kind"] for o in objs})
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "Deployment", "Job",
                     "PersistentVolumeClaim", "PodDisruptionBudget", "Service", "ServiceAccount", "StatefulSet"]
    rel = release("defaults")
    # no executor rights, no Secret (nothing given inline), no ServiceMonitor
    assert set(by_kind(objs, "ClusterRole")) == {f"{rel}-faultstream-k8s-connector"}
    assert set(by_kind(objs, "ServiceAccount")) == {f"{rel}-faultstream", f"{rel}-faultstream-k8s-connector"}
    assert by_kind(objs, "ClusterRole")[f"{rel}-faultstream-k8s-connector"]["rules"] == CONNECTOR_RULES
    assert set(by_kind(objs, "Deployment")) == {f"{rel}-faultstream-k8s-connector", f"{rel}-faultstream-ui"}

    sts = by_kind(objs, "StatefulSet")[f"{rel}-faultstream-worker"]
    spec = pod_spec(sts)
    assert spec["serviceAccountName"] == f"{rel}-faultstream" and spec["automountServiceAccountToken"] is False
    worker = spec["containers"][0]
    env = env_of(worker)
    assert worker["args"][0] == "worker"
    assert "FAULTSTREAM_EXECUTOR_CLUSTERS" not in env          # every cluster dry-run
    assert env["FAULTSTREAM_REMEDIATION"]["value"] == "true"
    assert env["FAULTSTREAM_DATA_DIR"]["value"] == "/data/faust"
    # the stable member identity is the pod's name
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["FAULTSTREAM_GROUP_INSTANCE_ID"]["value"] == "$(POD_NAME)"
    # one state volume per pod, mounted where the data dir lives
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "state" and claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert {"name": "state", "mountPath": "/data"} in worker["volumeMounts"]
    # probes read the worker's own /metrics page
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert "http://127.0.0.1:6066/metrics" in " ".join(worker[probe]["exec"]["command"])
    assert sts["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert sts["spec"]["serviceName"] == f"{rel}-faultstream-worker"
    assert by_kind(objs, "Service")[f"{rel}-faultstream-worker"]["spec"]["clusterIP"] == "None"

    ui = pod_spec(by_kind(objs, "Deployment")[f"{rel}-faultstream-ui"])["containers"][0]
    assert ui["args"] == ["ui", "--host", "0.0.0.0", "--port", "8077"]     # read-only: no --allow-commands
    assert ui["readinessProbe"]["httpGet"]["path"] == "/healthz"
    svc = by_kind(objs, "Service")[f"{rel}-faultstream-ui"]
    assert svc["spec"]["type"] == "ClusterIP" and svc["spec"]["ports"][0]["port"] == 8077

    job = by_kind(objs, "Job")[f"{rel}-faultstream-topics"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"
    assert pod_spec(job)["containers"][0]["args"] == ["topics", "create"]


def test_everything_on(tmp_path: Path) -> None:
    objs = objects(render("everything", tmp_path))
    rel = release("everything")
    smon = by_kind(objs, "ServiceMonitor")[f"{rel}-faultstream-worker"]
    assert smon["metadata"]["labels"]["release"] == "prometheus"
    assert smon["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    assert by_kind(objs, "ClusterRole")[f"{rel}-faultstream-executor"]["rules"] == EXECUTOR_RULES

    sts = by_kind(objs, "StatefulSet")[f"{rel}-faultstream-worker"]
    assert sts["spec"]["replicas"] == 3
    spec = pod_spec(sts)
    assert spec["serviceAccountName"] == f"{rel}-faultstream-executor"
    env = env_of(spec["containers"][0])
    assert json.loads(env["FAULTSTREAM_EXECUTOR_CLUSTERS"]["value"]) == {
        c: {"kind": "kubernetes", "dry_run": True, "taint_only": False} for c in ("k8s-1", "k8s-2")}
    assert env["FAULTSTREAM_COMMAND_KEY_FILE"]["value"] == "/etc/faultstream/command-keys/keys.json"
    assert env["FAULTSTREAM_REMEDIATION_FLEET_SIZE"]["value"] == "64"
    assert {"name": "command-keys", "secret": {"secretName": "fs-command-keys",
                                               "items": [{"key": "keys.json", "path": "keys.json"}]}} in spec["volumes"]

    ds = pod_spec(by_kind(objs, "DaemonSet")[f"{rel}-faultstream-node"])
    assert [c["name"] for c in ds["containers"]] == ["files", "counters", "nvml"]
    assert ds["runtimeClassName"] == "nvidia"
    nvml = ds["containers"][2]
    assert "--xid-events" in nvml["args"] and "$(NODE_NAME)" in nvml["args"]
    connector = pod_spec(by_kind(objs, "Deployment")[f"{rel}-faultstream-k8s-connector"])["containers"][0]
    assert connector["args"][-4:] == ["--namespace", "training", "--namespace", "inference"]

    ui = pod_spec(by_kind(objs, "Deployment")[f"{rel}-faultstream-ui"])
    uenv = env_of(ui["containers"][0])
    assert ui["containers"][0]["args"][-1] == "--allow-commands"
    assert uenv["FAULTSTREAM_UI_SESSION_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "fs-ui-tokens", "key": "session"}
    assert uenv["FAULTSTREAM_UI_SECURE_COOKIES"]["value"] == "true"
    assert pod_spec(by_kind(objs, "Job")[f"{rel}-faultstream-topics"])["containers"][0]["args"] == [
        "topics", "create", "--partitions", "24"]

    # without the API version the ServiceMonitor is left out, whatever the values say
    values, _ = VALUE_SETS["everything"]
    vfile = tmp_path / "no-crd.json"
    vfile.write_text(json.dumps(values))
    plain = objects(_run([helm_bin(), "template", rel, str(CHART), "-f", str(vfile)]).stdout)
    assert not by_kind(plain, "ServiceMonitor")


def test_sasl_tls_from_existing_secrets(tmp_path: Path) -> None:
    objs = objects(render("sasl-tls", tmp_path))
    assert not by_kind(objs, "Secret")            # every secret is the operator's own
    for obj in workloads(objs):
        spec = pod_spec(obj)
        for c in spec["containers"]:
            env = env_of(c)
            assert env["KAFKA_SECURITY_PROTOCOL"]["value"] == "SASL_SSL", c["name"]
            assert env["KAFKA_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"
            assert env["KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "fs-kafka-sasl", "key": "password"}
            assert env["KAFKA_SASL_USERNAME"]["valueFrom"]["secretKeyRef"] == {"name": "fs-kafka-sasl", "key": "username"}
            assert env["KAFKA_SSL_CA_LOCATION"]["value"] == "/etc/faultstream/kafka-ca/ca.crt"
            assert {"name": "kafka-ca", "mountPath": "/etc/faultstream/kafka-ca", "readOnly": True} in c["volumeMounts"]
            if "FAULTSTREAM_CLICKHOUSE" in env:
                assert env["FAULTSTREAM_CLICKHOUSE"]["valueFrom"]["secretKeyRef"] == {"name": "fs-clickhouse", "key": "url"}
        assert {"name": "kafka-ca", "secret": {"secretName": "fs-kafka-ca",
                                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}} in spec["volumes"]


def test_executor_rbac_only_when_enabled(tmp_path: Path) -> None:
    objs = objects(render("executors", tmp_path))
    rel = release("executors")
    roles = by_kind(objs, "ClusterRole")
    assert roles[f"{rel}-faultstream-executor"]["rules"] == EXECUTOR_RULES
    binding = by_kind(objs, "ClusterRoleBinding")[f"{rel}-faultstream-executor"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{rel}-faultstream-executor",
                                    "namespace": "faultstream"}]
    env = env_of(pod_spec(by_kind(objs, "StatefulSet")[f"{rel}-faultstream-worker"])["containers"][0])
    assert json.loads(env["FAULTSTREAM_EXECUTOR_CLUSTERS"]["value"]) == {
        "k8s-1": {"kind": "kubernetes", "dry_run": False, "taint_only": False}}
    for name in ("defaults", "sasl-tls", "inline-secrets"):
        assert not any("executor" in n for n in by_kind(objects(render(name, tmp_path)), "ClusterRole"))


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_no_secret_in_plain_env_and_locked_down_containers(value_set: str, tmp_path: Path) -> None:
    manifest = render(value_set, tmp_path)
    objs = objects(manifest)
    secret_names = ("PASSWORD", "SECRET", "TOKENS", "COMMAND_KEYS")
    for obj in objs:
        if obj["kind"] != "Secret":
            text = yaml.safe_dump(obj)
            assert not [s for s in INLINE_SECRETS if s in text], f"a secret value in {obj['kind']} {obj['metadata']['name']}"
    for obj in workloads(objs):
        spec = pod_spec(obj)
        where = f"{obj['kind']} {obj['metadata']['name']}"
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert (sc["runAsNonRoot"], sc["allowPrivilegeEscalation"], sc["readOnlyRootFilesystem"]) == (True, False, True), where
            assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsUser"] == 10001, where
            assert "privileged" not in sc, where
            for e in c.get("env", []):
                if any(s in e["name"] for s in secret_names):
                    assert "value" not in e, f"{where}: {e['name']} has a plain value"
                if e["name"] == "FAULTSTREAM_CLICKHOUSE" and "value" in e:
                    assert "@" not in e["value"], f"{where}: credentials in the ClickHouse URL"
        for c in spec.get("initContainers", []):     # the one root step: chown of the cursor dir
            assert c["command"][0] == "chown" and c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
        host_paths = {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}
        for c in spec["containers"]:
            for m in c.get("volumeMounts", []):
                if m["name"] in host_paths and m["name"] != "state":
                    assert m.get("readOnly") is True, f"{where}: host path {host_paths[m['name']]} mounted writable"
        if host_paths:
            assert host_paths.pop("state") == "/var/lib/faultstream"
            assert sorted(host_paths.values()) == (["/sys", "/var/log"] if obj["kind"] == "DaemonSet" else [])
    if value_set == "inline-secrets":
        secret = by_kind(objs, "Secret")[f"{release(value_set)}-faultstream-secrets"]
        assert json.loads(secret["stringData"]["command-keys.json"]) == VALUE_SETS[value_set][0]["commandKeys"]["keys"]
        assert secret["stringData"]["kafka-sasl-password"] == INLINE_SECRETS[0]


def test_unsafe_values_are_refused(tmp_path: Path) -> None:
    cases = {
        "clickhouse.url must not hold credentials": {"clickhouse": {"url": "http://u:p@clickhouse:8123"}},
        "ui.allowCommands needs ui.tokens.existingSecret": {"ui": {"allowCommands": True}},
        "executors.kubernetes.enabled needs executors.kubernetes.clusters": {"executors": {"kubernetes": {"enabled": True}}},
        "kafka.sasl.enabled needs kafka.sasl.existingSecret": {
            "kafka": {"securityProtocol": "SASL_SSL", "sasl": {"enabled": True, "username": "u"}}},
    }
    for message, values in cases.items():
        vfile = tmp_path / "bad.json"
        vfile.write_text(json.dumps(values))
        out = _run([helm_bin(), "template", "bad", str(CHART), "-f", str(vfile)], check=False)
        assert out.returncode != 0 and message in out.stderr, (message, out.stderr)


# -- on the real API server -----------------------------------------------------------------------

#: (verb, resource, extra kubectl args) that no faultstream ServiceAccount without a role may do
NOTHING = [("get", "pods", []), ("list", "nodes", []), ("patch", "nodes", []), ("create", "pods", ["--subresource=eviction"]),
           ("list", "events", []), ("get", "secrets", []), ("watch", "workloads.kueue.x-k8s.io", []), ("create", "pods", [])]


def can_i(cluster: KubeCluster, namespace: str, sa: str, verb: str, resource: str, *extra: str,
          where: str | None = None) -> bool:
    """``kubectl auth can-i VERB RESOURCE`` in namespace ``where`` (default: ``namespace``) as
    ``system:serviceaccount:<namespace>:<sa>``; True for yes."""
    out = subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "auth", "can-i", verb, resource,
                          *extra, "-n", where or namespace, f"--as=system:serviceaccount:{namespace}:{sa}"],
                         capture_output=True, text=True, timeout=30, check=False)
    answer = out.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl auth can-i {verb} {resource}: {out.stdout} {out.stderr}"
    return answer == "yes"


def _prepare(cluster: KubeCluster, value_set: str, namespace: str) -> None:
    cluster.kubectl("create", "namespace", namespace)
    secrets = {"fs-ui-tokens": {"tokens.json": json.dumps({"alice": "a" * 40}), "session": "s" * 40},
               "fs-command-keys": {"keys.json": json.dumps({"ops-1": "k" * 40})},
               "fs-kafka-sasl": {"username": "fs-user", "password": "p" * 20},
               "fs-kafka-ca": {"ca.crt": cluster.ca.read_text()},
               "fs-clickhouse": {"url": "http://writer:pw@clickhouse:8123"}}
    for name, data in secrets.items():
        cluster.kubectl("create", "secret", "generic", name, "-n", namespace,
                        *[f"--from-literal={k}={v}" for k, v in data.items()])
    if value_set == "everything":
        cluster.kubectl("apply", "-f", str(SERVICEMONITOR_CRD))
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/servicemonitors.monitoring.coreos.com")
        cluster.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}))


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_applies_to_the_api_server_with_least_rbac(value_set: str, k8s_cluster: KubeCluster, tmp_path: Path) -> None:
    _binary("kubectl", "bash deploy/kubernetes/setup.sh")
    namespace = f"helm-{value_set}"
    rel = release(value_set)
    manifest = render(value_set, tmp_path, namespace)
    _prepare(k8s_cluster, value_set, namespace)
    try:
        dry = k8s_cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=manifest)
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"kubectl apply --dry-run=server refused the {value_set} manifests:\n{exc.stderr}", pytrace=False)
    count = len(objects(manifest))
    assert dry.count("(server dry run)") == count, dry
    try:
        real = k8s_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=manifest)
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"kubectl apply refused the {value_set} manifests:\n{exc.stderr}", pytrace=False)
    assert real.count(" created") == count, real

    # the StatefulSet controller made each worker's own state claim
    replicas = by_kind(objects(manifest), "StatefulSet")[f"{rel}-faultstream-worker"]["spec"]["replicas"]
    want = {f"state-{rel}-faultstream-worker-{i}" for i in range(replicas)}

    def claims() -> bool:
        got = set(k8s_cluster.kubectl("get", "pvc", "-n", namespace, "-o", "jsonpath={.items[*].metadata.name}").split())
        return want <= got

    wait_for(claims, f"the worker state claims {sorted(want)}", timeout_s=60)
    if value_set == "everything":
        assert k8s_cluster.kubectl("get", "servicemonitors", "-n", namespace, "-o", "name").strip() == \
            f"servicemonitor.monitoring.coreos.com/{rel}-faultstream-worker"

    # wait for the service accounts, then check what each may and may not do
    base, connector, executor = f"{rel}-faultstream", f"{rel}-faultstream-k8s-connector", f"{rel}-faultstream-executor"
    for verb, resource, extra in NOTHING:
        assert not can_i(k8s_cluster, namespace, base, verb, resource, *extra), (base, verb, resource, extra)
    reads = [("get", "pods"), ("list", "pods"), ("watch", "pods"), ("list", "nodes"), ("watch", "nodes"),
             ("list", "events"), ("watch", "events"), ("list", "workloads.kueue.x-k8s.io"),
             ("watch", "workloads.kueue.x-k8s.io")]
    for verb, resource in reads:
        assert can_i(k8s_cluster, namespace, connector, verb, resource), (connector, verb, resource)
    assert can_i(k8s_cluster, namespace, connector, "get", "pods", "--subresource=log", where="training")
    for verb, resource, extra in [("patch", "nodes", []), ("create", "pods", ["--subresource=eviction"]),
                                  ("delete", "pods", []), ("get", "secrets", []), ("update", "workloads.kueue.x-k8s.io", []),
                                  ("create", "events", [])]:
        assert not can_i(k8s_cluster, namespace, connector, verb, resource, *extra), (connector, verb, resource)
    executor_on = VALUE_SETS[value_set][0].get("executors", {}).get("kubernetes", {}).get("enabled", False)
    assert can_i(k8s_cluster, namespace, executor, "patch", "nodes") is executor_on
    assert can_i(k8s_cluster, namespace, executor, "patch", "nodes", "--subresource=status") is executor_on
    assert can_i(k8s_cluster, namespace, executor, "create", "pods", "--subresource=eviction",
                 where="training") is executor_on
    assert can_i(k8s_cluster, namespace, executor, "list", "pods") is executor_on
    for verb, resource, extra in [("delete", "nodes", []), ("delete", "pods", []), ("get", "secrets", []),
                                  ("create", "pods", []), ("update", "nodes", [])]:
        assert not can_i(k8s_cluster, namespace, executor, verb, resource, *extra), (executor, verb, resource)
