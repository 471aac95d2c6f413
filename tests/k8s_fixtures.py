"""A real Kubernetes control plane on loopback for the tests (never a mock): etcd,
kube-apiserver, kube-controller-manager and kwok.

Import into a test module (or ``tests/conftest.py``)::

    from tests.k8s_fixtures import k8s_cluster  # noqa: F401

``k8s_cluster`` (session): a :class:`KubeCluster`. Start-up, in this order:

* ``deploy/kubernetes/setup.sh`` (:func:`tests.setup_fixtures.ensure`): etcd installed and the
  binaries built where missing, cached under ``.state/kubernetes``;
* etcd (Debian ``etcd-server``, ``/usr/bin/etcd``) on a free loopback port, data in a temporary
  directory;
* kube-apiserver (built by ``deploy/kubernetes/setup.sh`` into ``.state/kubernetes/bin``) on a
  free loopback port: a test CA made with the ``openssl`` CLI signs its serving certificate
  (``127.0.0.1``/``localhost``), a service-account signing key, a static admin token
  (``--token-auth-file``, group ``system:masters``), ``--authorization-mode=Node,RBAC``;
  waited for until ``/readyz`` answers ``ok``;
* the CRDs the tests own (``tests/data/kubernetes/*.yaml``: Kueue's ``Workload`` and kwok's
  ``Logs``), applied with kubectl and waited for until established;
* kube-controller-manager (service-account and token controllers, disruption, job,
  garbage collector, node lifecycle, ...; no leader election, no serving port): waited for
  until the ``default`` ServiceAccount of ``default`` exists;
* kwok (``--manage-all-nodes``, its default node and pod stages: a pod bound to a kwok node
  becomes Running, a deleted one goes away) serving the kubelet API (logs) on a free loopback
  port with the same certificate; nodes get ``127.0.0.1`` as address, so the API server's
  ``pods/log`` reaches kwok, which serves the files named by ``Logs`` objects
  (:meth:`KubeCluster.serve_logs`, CRI log format).

A missing binary, a component that exits, or a server that does not come up in time makes the
fixture FAIL (``pytest.fail``) with the reason and the tail of that component's log; it never
skips. Teardown stops the processes (SIGTERM, then SIGKILL after 10 s) and removes the
temporary directory. About 10-20 s to start.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.setup_fixtures import ensure

REPO = Path(__file__).resolve().parents[1]
#: the binaries setup.sh built: ``$FAULTSTREAM_K8S_STATE/bin`` (the variable setup.sh reads too),
#: default ``.state/kubernetes/bin`` of this checkout
BIN = Path(os.environ.get("FAULTSTREAM_K8S_STATE", REPO / ".state" / "kubernetes")) / "bin"
DATA = REPO / "tests" / "data" / "kubernetes"
SETUP = "bash deploy/kubernetes/setup.sh"
START_TIMEOUT_S = 120.0

__all__ = ["KubeCluster", "cri_log_line", "k8s_cluster", "start_cluster", "wait_for"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text("utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def cri_log_line(at: datetime, text: str, stream: str = "stdout") -> str:
    """One line of a container log in the CRI format the kubelet (and kwok) read:
    ``<RFC 3339 nano, UTC> <stdout|stderr> F <text>`` (``F``: a full line), with a newline."""
    ts = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
    return f"{ts} {stream} F {text}\n"


@dataclass
class KubeCluster:
    """A running test control plane.

    ``kubeconfig``: the admin kubeconfig (token of group ``system:masters``); ``server``: the
    API server's URL; ``ca``: its CA certificate; ``workdir``: the temporary directory (logs of
    each component under ``logs/``, pod log files under ``pod-logs/``); ``bin``: the
    directory of the binaries; ``etcd_url``: etcd's client URL."""

    kubeconfig: Path
    server: str
    ca: Path
    token: str
    workdir: Path
    bin: Path
    etcd_url: str = ""
    _procs: list[tuple[str, subprocess.Popen, Path]] = field(default_factory=list, repr=False)

    def api_client(self):
        """A new ``kubernetes.client.ApiClient`` for :attr:`kubeconfig`."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60) -> str:
        """Run ``kubectl --kubeconfig ... <args>``; returns stdout. Raises
        ``subprocess.CalledProcessError`` (with stderr) when it fails."""
        out = subprocess.run([str(self.bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
                             input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if out.returncode != 0:
            raise subprocess.CalledProcessError(out.returncode, out.args, out.stdout, out.stderr)
        return out.stdout

    def add_node(self, name: str, *, labels: dict[str, str] | None = None, gpus: int = 8,
                 timeout_s: float = 60) -> None:
        """Create a kwok node ``name`` (annotation ``kwok.x-k8s.io/node: fake``, capacity
        ``gpus`` of ``nvidia.com/gpu``) and wait until kwok reports it Ready. An existing
        node of that name is left as it is. Raises ``AssertionError`` on time-out."""
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        core = k8s.CoreV1Api(self.api_client())
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        node = k8s.V1Node(
            metadata=k8s.V1ObjectMeta(name=name, annotations={"kwok.x-k8s.io/node": "fake"},
                                      labels={"type": "kwok", "kubernetes.io/hostname": name, **(labels or {})}),
            status=k8s.V1NodeStatus(capacity=capacity, allocatable=capacity))
        try:
            core.create_node(node)
        except ApiException as exc:
            if exc.status != 409:
                raise
        deadline = time.monotonic() + timeout_s
        while True:
            conds = core.read_node(name).status.conditions or []
            if any(c.type == "Ready" and c.status == "True" for c in conds):
                return
            assert time.monotonic() < deadline, f"kwok did not make node {name} Ready in {timeout_s} s"
            time.sleep(0.2)

    def wait_for_service_account(self, namespace: str, timeout_s: float = 60) -> None:
        """Wait until the controller manager made the ``default`` ServiceAccount of
        ``namespace`` (pods cannot be created before). Raises ``AssertionError`` on time-out."""
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        core = k8s.CoreV1Api(self.api_client())
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                core.read_namespaced_service_account("default", namespace)
                return
            except ApiException as exc:
                if exc.status != 404:
                    raise
            assert time.monotonic() < deadline, f"no default ServiceAccount in {namespace} after {timeout_s} s"
            time.sleep(0.2)

    def serve_logs(self, namespace: str, pod: str, container: str) -> Path:
        """Have kwok serve the logs of ``container`` of ``namespace/pod`` from a file (a kwok
        ``Logs`` object, ``follow: false``); returns the file's path (created empty). Append
        :func:`cri_log_line` lines to it; ``pods/log`` then returns them."""
        path = self.workdir / "pod-logs" / namespace / pod / f"{container}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        doc = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
               "metadata": {"name": pod, "namespace": namespace},
               "spec": {"logs": [{"containers": [container], "logsFile": str(path), "follow": False}]}}
        self.kubectl("apply", "-f", "-", input=json.dumps(doc))
        return path

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (through etcd's v3 JSON gateway),
        as the API server does every few minutes: a watch from an older resourceVersion then
        gets ``410 Gone``. Returns the revision compacted to."""
        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read())

        rev = int(post("/v3/kv/range", {"key": "Lw=="})["header"]["revision"])  # key "/"
        post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    # -- lifecycle --------------------------------------------------------------------------------

    def _start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        fh = log.open("wb")
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=self.workdir)
        fh.close()
        self._procs.append((name, proc, log))
        return proc

    def _fail(self, name: str, why: str) -> None:
        log = self.workdir / "logs" / f"{name}.log"
        self.stop()
        pytest.fail(f"Kubernetes test cluster: {name} {why}; last lines of {log}:\n{_tail(log)}", pytrace=False)

    def _wait(self, name: str, check, what: str, timeout_s: float = START_TIMEOUT_S) -> None:
        proc = next(p for n, p, _ in self._procs if n == name)
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                self._fail(name, f"exited with status {proc.returncode} before {what}")
            try:
                if check():
                    return
            except Exception:  # noqa: BLE001, S110 -- not up yet: connection refused, 503, 404 ...
                pass
            if time.monotonic() > deadline:
                self._fail(name, f"did not get {what} within {timeout_s:.0f} s")
            time.sleep(0.25)

    def _get(self, path: str) -> tuple[int, str]:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        req = urllib.request.Request(self.server + path, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def stop(self) -> None:
        """Stop every component (reverse start order): SIGTERM, SIGKILL after 10 s."""
        while self._procs:
            _name, proc, _ = self._procs.pop()
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


def _openssl(*args: str, cwd: Path) -> None:
    out = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.fail(f"Kubernetes test cluster: openssl {' '.join(args)} failed: {out.stderr.strip()}", pytrace=False)


def _make_certs(pki: Path) -> None:
    """CA, API server / kwok serving certificate for 127.0.0.1 and localhost, service-account
    key pair, all with the openssl CLI."""
    pki.mkdir(parents=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "2", "-subj", "/CN=faultstream-test-ca", cwd=pki)
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=kube-apiserver", cwd=pki)
    (pki / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,IP:10.96.0.1\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "server.ext", cwd=pki)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def _kubeconfig(server: str, ca: Path, token: str) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "faultstream-test",
        "clusters": [{"name": "faultstream-test", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "faultstream-test", "context": {"cluster": "faultstream-test", "user": "admin"}}],
    }, indent=1)


def _binaries() -> dict[str, str]:
    ensure("kubernetes")  # etcd and the Go builds (deploy/kubernetes/setup.sh), cached under .state/
    found: dict[str, str] = {}
    missing = []
    for name in ("kube-apiserver", "kube-controller-manager", "kubectl", "kwok"):
        path = BIN / name
        if path.is_file() and os.access(path, os.X_OK):
            found[name] = str(path)
        else:
            missing.append(str(path))
    etcd = shutil.which("etcd")
    if etcd:
        found["etcd"] = etcd
    else:
        missing.append("etcd (Debian package etcd-server)")
    if missing:
        pytest.fail(f"Kubernetes test cluster: missing {', '.join(missing)}; build them with `{SETUP}` "
                    "(about 10 minutes cold)", pytrace=False)
    return found


def start_cluster(workdir: Path) -> KubeCluster:
    """Start etcd, kube-apiserver, the CRDs, kube-controller-manager and kwok in ``workdir``
    (see the module docstring); returns the running :class:`KubeCluster`. Fails the test
    (``pytest.fail``) when a part is missing or does not come up."""
    bins = _binaries()
    pki = workdir / "pki"
    _make_certs(pki)
    token = secrets.token_hex(16)
    (pki / "tokens.csv").write_text(f'{token},admin,admin-uid,"system:masters"\n')
    etcd_port, peer_port, api_port, kwok_port = (_free_port() for _ in range(4))
    server = f"https://127.0.0.1:{api_port}"
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(_kubeconfig(server, pki / "ca.crt", token))
    cluster = KubeCluster(kubeconfig=kubeconfig, server=server, ca=pki / "ca.crt", token=token,
                          workdir=workdir, bin=BIN)

    etcd_url = f"http://127.0.0.1:{etcd_port}"
    cluster.etcd_url = etcd_url
    peer_url = f"http://127.0.0.1:{peer_port}"
    cluster._start("etcd", [
        bins["etcd"], "--name", "fs-test", "--data-dir", str(workdir / "etcd"),
        "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
        "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", f"fs-test={peer_url}", "--initial-cluster-state", "new",
        "--quota-backend-bytes", str(1 << 30)])

    def etcd_healthy() -> bool:
        with urllib.request.urlopen(f"{etcd_url}/health", timeout=2) as resp:
            return json.loads(resp.read()).get("health") == "true"

    cluster._wait("etcd", etcd_healthy, "healthy")

    cluster._start("kube-apiserver", [
        bins["kube-apiserver"], f"--etcd-servers={etcd_url}", "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
        f"--tls-cert-file={pki / 'server.crt'}", f"--tls-private-key-file={pki / 'server.key'}",
        f"--client-ca-file={pki / 'ca.crt'}", f"--token-auth-file={pki / 'tokens.csv'}",
        "--authorization-mode=Node,RBAC", "--service-cluster-ip-range=10.96.0.0/16",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--allow-privileged=true", "--enable-priority-and-fairness=false",
        "--kubelet-preferred-address-types=InternalIP,Hostname", "--profiling=false", "--v=1"])
    cluster._wait("kube-apiserver", lambda: cluster._get("/readyz") == (200, "ok"), "ready (/readyz ok)")

    for crd in sorted(DATA.glob("*-crd.yaml")):
        try:
            cluster.kubectl("apply", "-f", str(crd))
        except subprocess.CalledProcessError as exc:
            cluster.stop()
            pytest.fail(f"Kubernetes test cluster: kubectl apply -f {crd} failed: {exc.stderr}", pytrace=False)
    try:
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                        "crd/workloads.kueue.x-k8s.io", "crd/logs.kwok.x-k8s.io")
    except subprocess.CalledProcessError as exc:
        cluster.stop()
        pytest.fail(f"Kubernetes test cluster: CRDs not established: {exc.stderr}", pytrace=False)

    cluster._start("kube-controller-manager", [
        bins["kube-controller-manager"], f"--kubeconfig={kubeconfig}",
        f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        "--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false",
        "--controllers=*", "--profiling=false", "--v=1"])
    cluster._wait("kube-controller-manager",
                  lambda: cluster._get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
                  "the default ServiceAccount made")

    cluster._start("kwok", [
        bins["kwok"], f"--kubeconfig={kubeconfig}", "--manage-all-nodes=true",
        "--node-ip=127.0.0.1", f"--node-port={kwok_port}", f"--server-address=127.0.0.1:{kwok_port}",
        f"--tls-cert-file={pki / 'server.crt'}", f"--tls-private-key-file={pki / 'server.key'}",
        "--enable-crds=Logs"])
    kwok_ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))

    def kwok_healthy() -> bool:
        with urllib.request.urlopen(f"https://127.0.0.1:{kwok_port}/healthz", context=kwok_ctx, timeout=2) as r:
            return r.status == 200

    cluster._wait("kwok", kwok_healthy, "healthy (/healthz)")
    return cluster


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[KubeCluster]:
    """The running test control plane (:class:`KubeCluster`; ``.kubeconfig`` is the admin
    kubeconfig path). Stopped and removed after the session."""
    workdir = Path(tempfile.mkdtemp(prefix="faultstream-k8s-"))
    cluster = start_cluster(workdir)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def wait_for(check, what: str, timeout_s: float = 30.0, interval_s: float = 0.2) -> Any:
    """Poll ``check()`` until it returns a true value (returned); ``AssertionError`` naming
    ``what`` after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(interval_s)
