"""Kubernetes connector: Kueue Workloads, the pods of Jobs / JobSets / PyTorchJobs, node
conditions, events and pod logs -> Observations.

``KubernetesConnector(cluster, api_client=..., cursor=CursorStore(...), spool_dir=...)`` watches
the API server (the official ``kubernetes`` client, raw JSON objects):

* ``kueue.x-k8s.io/v1beta1`` ``workloads`` (all namespaces; a cluster without the CRD is
  noted in the coverage and watched no further): ``metadata.ownerReferences`` (the Job,
  JobSet or PyTorchJob it admits), ``spec.queueName``, ``spec.podSets[].{name,count}``,
  ``status.admission.{clusterQueue,podSetAssignments}``, ``status.conditions`` (``Admitted``,
  ``Finished`` with reason ``Succeeded``/``Failed``, ``Evicted``/``Preempted``);
* ``pods`` of workloads: those labelled ``jobset.sigs.k8s.io/jobset-name`` (JobSet),
  ``training.kubeflow.org/job-name`` (PyTorchJob and the other Kubeflow jobs) or
  ``batch.kubernetes.io/job-name`` / ``job-name`` (batch/v1 Job), in that order of precedence
  (a JobSet's pods carry their child Job's label too). Per pod: ``spec.nodeName``, the rank
  (container env ``RANK``; else the node rank from ``PET_NODE_RANK`` / ``NODE_RANK`` /
  ``JOB_COMPLETION_INDEX`` or the annotation ``batch.kubernetes.io/job-completion-index``
  times ``PET_NPROC_PER_NODE`` / ``NPROC_PER_NODE``), ``status.phase``,
  ``status.containerStatuses[].state.terminated`` (reason ``OOMKilled``, exit code),
  ``status.reason`` (``Evicted``, ``DeadlineExceeded``) and the ``DisruptionTarget``
  condition's reason (``PreemptionByScheduler``, ``EvictionByEvictionAPI``,
  ``DeletionByTaintManager``, ``TerminationByKubelet``, ``DeletionByPodGC``);
* ``nodes``: ``status.conditions`` (the kubelet's, and node-problem-detector / NVSentinel
  style conditions, where ``True`` is the problem) and ``spec.unschedulable``;
* ``events`` (core/v1): warnings, and the normal ones a rule reads (``Preempted``,
  ``Evicted``, ...), of nodes and of workload pods.

The workload id is ``<namespace>/<job name>`` (the Job, JobSet or PyTorchJob; a Workload
without an owner: its own name).

Observations -- the same ``scheduler_event`` observations the Slurm connector
(:mod:`connectors.slurm`) emits, one per **transition**, with its attribute names and states:

* per workload (host ``_scheduler``, ``format="k8s_workload"``): PENDING (Workload created /
  first pod), RUNNING (first pod running), then COMPLETED, FAILED, OUT_OF_MEMORY (a pod's
  container OOMKilled), NODE_FAIL (a pod lost to its node: kubelet eviction, taint manager,
  pod GC), PREEMPTED (Kueue eviction/preemption, scheduler preemption, Eviction API),
  TIMEOUT (``DeadlineExceeded``) or CANCELLED (a running pod deleted). ``body``: a ``kubectl
  get workloads`` row (``<namespace> <name> <queue> <cluster queue> <admitted> <finished>``;
  without Kueue ``<kind> <id>: <n> pods on <nodes>``) followed by the Kueue conditions as
  JSON lines (the ``kueue.workload_message`` and ``k8s.job_condition`` rules read their
  messages);
  ``attributes``: ``job_id`` (the workload id), ``state``, ``exit_code``, ``exit_status``
  (``"137:0"``), ``nodes``, ``submit_ns``, ``start_ns``, ``end_ns``, ``ranks`` (``{node:
  [first, last]}``), ``ntasks``, ``reason``, ``name``, ``namespace``, ``kind``, ``queue``,
  ``cluster_queue``, ``pods``;
* per pod (the ``step`` of the workload; host = its node, ``format="k8s_pod"``): the same
  states; ``body``: the sacct row, then the pod's status as JSON (``phase``, ``reason``,
  ``message`` and each container's ``state``: the ``k8s.container_terminated`` and
  ``k8s.pod_status_message`` rules read OOMKilled and eviction messages from it);
  ``attributes`` also ``pod``, ``step`` (pod name), ``node``, ``rank_first``/``rank_last``,
  ``disruption`` (the DisruptionTarget reason);
* the workload's spec (``format="workload_yaml"``, host ``_scheduler``, ``attributes.workload``
  = a :class:`schemas.bundle.WorkloadSpec` as JSON, ``scheduler`` ``kueue`` or
  ``kubernetes``): once it runs, and again when it ended -- the record the worker builds its
  workload context from (what the bundle publisher sends for ``workload.yaml``);
* node condition changes (host = the node, ``format="k8s_node"``): ``body`` is ``kubectl
  describe node``'s ``Conditions:`` table (rule ``k8s.node_conditions``); a node seen for the
  first time is reported only when a condition is bad or it is cordoned; ``attributes``:
  ``node``, ``conditions`` (``[{type, status, reason, message}]``), ``bad``, ``unschedulable``;
* events (``kind="scheduler_event"``, ``format="k8s_event"``, host = the node or the pod's
  node): ``body`` is a ``kubectl get events`` row ``<last seen> <type> <reason>
  <kind/name> <message>`` (rule ``k8s.event_row``), once per event and count;
* pod logs (``kind="log_line"``): the containers' logs of every workload pod on a node,
  fetched with ``timestamps=true`` from a persisted ``sinceTime`` per container, appended to
  a spool file per container under ``spool_dir`` and read by a
  :class:`connectors.files.FilesConnector` (the same record grouping, time parsing and rank
  prefixes as the log-file tailer); host = the pod's node, ``workload_id``, ``rank`` (from a
  ``[rankN]`` prefix, else the pod's rank when it has one), ``source`` ``kubernetes``,
  ``attributes.pod`` / ``container``; untimed lines take the kubelet's time of the last
  fetched line (the spool file's modification time) before any timed line.

Times: ``observed_at`` is the transition time the API states (pod ``creationTimestamp``,
``status.startTime``, containers' ``finishedAt``, ``deletionTimestamp``, condition
``lastTransitionTime``, event ``lastTimestamp``/``eventTime``) in UTC ns, else the poll time
(``time_source="transport"``).

Resume without loss or duplicates: the cursor holds the ``resourceVersion`` of every watch,
the last state reported per workload, pod and node, the events reported, the log position of
every container (the kubelet time of the last line read and how many lines had exactly that
time: ``sinceTime`` has second resolution and includes its second, so those are skipped on
the next fetch), the spool sizes and the spool readers' positions. A watch answered ``410
Gone`` (its resourceVersion expired) lists that resource again and compares with the saved
state, so nothing is lost and nothing already reported is repeated (``relists`` counts
them). The connector is a :class:`connectors.source.Source` and
:class:`connectors.source.Rewindable`: :func:`connectors.runner.run` saves :meth:`checkpoint`
only after delivery; :meth:`rewind` (and a restart) go back to the saved cursor: spools are
cut back to their saved sizes, and the same observations come again with the same ids.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Generator

import typer

from connectors.command import Shared, connector
from connectors.bundle import SCHEDULER_HOST
from connectors.cursor import CursorStore
from connectors.files import FilesConnector
from connectors.slurm import _sacct_row
from schemas.bundle import WorkloadSpec
from schemas.records import (
    TIME_QUALITY_EXACT,
    TIME_QUALITY_SECONDS,
    TIME_QUALITY_TRANSPORT,
    CoverageEntry,
    Observation,
    Position,
    Source,
)

__all__ = ["KubernetesConnector", "KubernetesError", "connect_kubernetes_cli", "pod_rank", "pod_workload"]

log = logging.getLogger(__name__)

CURSOR_VERSION = 1
_NS = 1_000_000_000
#: Pod labels naming the job a pod belongs to, by precedence: (label, owner kind).
JOB_LABELS = (
    ("jobset.sigs.k8s.io/jobset-name", "JobSet"),
    ("training.kubeflow.org/job-name", "PyTorchJob"),
    ("batch.kubernetes.io/job-name", "Job"),
    ("job-name", "Job"),
)
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
KUEUE = ("kueue.x-k8s.io", "v1beta1", "workloads")
#: Standard node conditions and their healthy status; any other condition is healthy when False.
HEALTHY = {"Ready": "True", "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False",
           "NetworkUnavailable": "False"}
#: Normal-type event reasons that are still evidence (the k8s.event_row rule reads them).
EVENT_REASONS = {"Preempted", "Evicted", "OOMKilling", "SystemOOM", "NodeNotReady", "Rebooted",
                 "BackoffLimitExceeded", "DeadlineExceeded", "PodFailurePolicy", "EvictionThresholdMet"}
#: DisruptionTarget condition reason -> workload state.
DISRUPTION_STATE = {"PreemptionByScheduler": "PREEMPTED", "PreemptionByKueue": "PREEMPTED",
                    "EvictionByEvictionAPI": "PREEMPTED", "DeletionByTaintManager": "NODE_FAIL",
                    "TerminationByKubelet": "NODE_FAIL", "DeletionByPodGC": "NODE_FAIL"}
_ORDER = {"PENDING": 0, "RUNNING": 1}
#: Which failure names a workload when its pods end differently (worst first).
_SEVERITY = ["OUT_OF_MEMORY", "NODE_FAIL", "TIMEOUT", "PREEMPTED", "FAILED", "CANCELLED", "COMPLETED"]
MAX_EVENTS_KEPT = 5000


class KubernetesError(RuntimeError):
    """The API server failed a request (other than an expired watch, which is relisted), or
    the cursor belongs to another cluster."""


# ---- object helpers -------------------------------------------------------------------------------

def _ts(text: Any) -> int | None:
    """RFC 3339 time of the API (``2026-11-30T01:20:31Z``, ``...31.123456Z``) -> UTC ns."""
    if not isinstance(text, str) or not text:
        return None
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)", text)
    if not m:
        return None
    base = datetime.fromisoformat(m[1] + ("+00:00" if m[3] == "Z" else m[3]))
    return int(base.timestamp()) * _NS + int((m[2] or "0").ljust(9, "0"))


def _rfc1123(ns: int | None) -> str:
    if ns is None:
        return "<unknown>"
    return datetime.fromtimestamp(ns / _NS, UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _key(obj: dict[str, Any]) -> str:
    m = _meta(obj)
    return f"{m.get('namespace')}/{m.get('name')}" if m.get("namespace") else str(m.get("name"))


def pod_workload(pod: dict[str, Any]) -> tuple[str, str] | None:
    """``(workload id, owner kind)`` of a pod from its job labels (:data:`JOB_LABELS`), or
    None for a pod of no job."""
    m = _meta(pod)
    labels = m.get("labels") or {}
    for label, kind in JOB_LABELS:
        if labels.get(label):
            return f"{m.get('namespace')}/{labels[label]}", kind
    return None


def _env(pod: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        for e in c.get("env") or []:
            if isinstance(e.get("value"), str):
                out.setdefault(e["name"], e["value"])
    return out


def _int(text: Any) -> int | None:
    return int(text) if isinstance(text, str) and text.isdigit() else (text if type(text) is int else None)


def pod_rank(pod: dict[str, Any]) -> tuple[int, int] | None:
    """The ranks a pod runs, ``(first, last)``: env ``RANK`` (one process); else the node rank
    (env ``PET_NODE_RANK``, ``NODE_RANK``, ``JOB_COMPLETION_INDEX``, or the annotation
    ``batch.kubernetes.io/job-completion-index``) times the processes per node (env
    ``PET_NPROC_PER_NODE`` / ``NPROC_PER_NODE``, default 1). None when the pod states none."""
    env = _env(pod)
    rank = _int(env.get("RANK"))
    if rank is not None:
        return rank, rank
    node_rank = next((r for r in (_int(env.get(k)) for k in ("PET_NODE_RANK", "NODE_RANK", "JOB_COMPLETION_INDEX"))
                      if r is not None), None)
    if node_rank is None:
        node_rank = _int((_meta(pod).get("annotations") or {}).get(COMPLETION_INDEX))
    if node_rank is None:
        return None
    nproc = next((n for n in (_int(env.get(k)) for k in ("PET_NPROC_PER_NODE", "NPROC_PER_NODE")) if n), 1)
    return node_rank * nproc, node_rank * nproc + nproc - 1


def _condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), None)


def _pod_facts(pod: dict[str, Any], deleted_at: int | None = None) -> dict[str, Any]:
    """The pod's state in the Slurm vocabulary with its times, node, rank and reasons."""
    m, spec, st = _meta(pod), pod.get("spec") or {}, pod.get("status") or {}
    phase = st.get("phase") or "Pending"
    terms = [(c.get("name"), (c.get("state") or {}).get("terminated")) for c in st.get("containerStatuses") or []]
    terms = [(n, t) for n, t in terms if isinstance(t, dict)]
    starts = [_ts(((c.get("state") or {}).get("running") or {}).get("startedAt")) for c in st.get("containerStatuses") or []]
    starts += [_ts(t.get("startedAt")) for _, t in terms]
    starts = [s for s in starts if s]
    start = _ts(st.get("startTime")) or (min(starts) if starts else None)
    ends = [e for e in (_ts(t.get("finishedAt")) for _, t in terms) if e]
    disruption = _condition(pod, "DisruptionTarget")
    d_reason = disruption.get("reason") if disruption and disruption.get("status") == "True" else None
    failed = [(n, t) for n, t in terms if t.get("exitCode") or t.get("reason") not in (None, "Completed")]
    code = next((t.get("exitCode") for _, t in failed if isinstance(t.get("exitCode"), int)), 0)
    sig = next((t.get("signal") for _, t in failed if t.get("signal")), None)
    oom = any(t.get("reason") == "OOMKilled" for _, t in terms)
    reason = st.get("reason")
    if phase == "Succeeded":
        state = "COMPLETED"
    elif phase == "Failed":
        if oom:
            state, reason = "OUT_OF_MEMORY", "OOMKilled"
        elif reason == "DeadlineExceeded":
            state = "TIMEOUT"
        elif reason == "Evicted":
            state = "NODE_FAIL"
        elif d_reason in DISRUPTION_STATE:
            state, reason = DISRUPTION_STATE[d_reason], d_reason
        else:
            state = "FAILED"
            reason = reason or next((t.get("reason") for _, t in failed if t.get("reason")), None)
    elif deleted_at is not None:
        state = DISRUPTION_STATE.get(d_reason or "", "CANCELLED")
        reason = d_reason or "Deleted"
    elif phase == "Running":
        state = "RUNNING"
    else:
        state = "PENDING"
    end = None
    if state not in ("PENDING", "RUNNING"):
        end = max(ends) if ends else (deleted_at or _ts(m.get("deletionTimestamp"))
                                      or _ts((disruption or {}).get("lastTransitionTime")))
    rank = pod_rank(pod)
    return {"state": state, "phase": phase, "node": spec.get("nodeName"), "submit": _ts(m.get("creationTimestamp")),
            "start": start, "end": end, "reason": reason, "exit_code": code, "signal": sig,
            "disruption": d_reason, "rank": list(rank) if rank else None,
            "containers": [c.get("name") for c in spec.get("containers") or []],
            "started": sorted(n for n, r in ((c.get("name"), c.get("state") or {})
                                             for c in st.get("containerStatuses") or [])
                              if "running" in r or "terminated" in r),
            "status": {"phase": phase, "reason": st.get("reason"), "message": st.get("message"),
                       "containerStatuses": [{"name": c.get("name"), "state": c.get("state")}
                                             for c in st.get("containerStatuses") or []]}}


def _workload_facts(wl: dict[str, Any]) -> dict[str, Any]:
    """A Kueue Workload's owner, queue, pod sets, admission and conditions."""
    m, spec, st = _meta(wl), wl.get("spec") or {}, wl.get("status") or {}
    owners = [o for o in m.get("ownerReferences") or [] if o.get("kind") in ("Job", "JobSet", "PyTorchJob")
              or o.get("controller")]
    owner = owners[0] if owners else None
    wid = f"{m.get('namespace')}/{owner['name'] if owner else m.get('name')}"
    conds = [{k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
             for c in st.get("conditions") or []]
    adm = st.get("admission") or {}
    return {"workload": wid, "kind": owner.get("kind") if owner else "Workload", "name": m.get("name"),
            "created": _ts(m.get("creationTimestamp")), "queue": spec.get("queueName"),
            "cluster_queue": adm.get("clusterQueue"),
            "pod_sets": [{"name": p.get("name"), "count": p.get("count")} for p in spec.get("podSets") or []],
            "assignments": [{"name": a.get("name"), "count": a.get("count"), "flavors": a.get("flavors")}
                            for a in adm.get("podSetAssignments") or []],
            "conditions": conds}


def _cond_true(conds: list[dict[str, Any]], ctype: str) -> dict[str, Any] | None:
    return next((c for c in conds if c.get("type") == ctype and c.get("status") == "True"), None)


def _event_row(ev: dict[str, Any], at: int | None) -> str:
    obj = ev.get("involvedObject") or {}
    last = datetime.fromtimestamp(at / _NS, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if at else "<unknown>"
    msg = " ".join(str(ev.get("message") or "").split())
    return f"{last}   {ev.get('type') or 'Normal'}   {ev.get('reason') or 'Unknown'}   " \
           f"{str(obj.get('kind') or 'object').lower()}/{obj.get('name')}   {msg}"


def _conditions_table(conds: list[dict[str, Any]]) -> str:
    rows = [("Type", "Status", "LastHeartbeatTime", "LastTransitionTime", "Reason", "Message"),
            ("----", "------", "-----------------", "------------------", "------", "-------")]
    for c in conds:
        rows.append((c["type"], c["status"], _rfc1123(_ts(c.get("lastHeartbeatTime"))),
                     _rfc1123(_ts(c.get("lastTransitionTime"))), c.get("reason") or "<none>",
                     " ".join(str(c.get("message") or "").split())))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["Conditions:"]
    for r in rows:
        lines.append("  " + "   ".join(r[i].ljust(widths[i]) for i in range(5)) + "   " + r[5])
    return "\n".join(line.rstrip() for line in lines)


def _bad(c: dict[str, Any]) -> bool:
    return c.get("status") != HEALTHY.get(c.get("type"), "False")


# ---- the connector --------------------------------------------------------------------------------

class _SubCursor:
    """The ``{"files": ...}`` document of one spool reader inside the connector's cursor."""

    def __init__(self, owner: KubernetesConnector, key: str) -> None:
        self.owner, self.key = owner, key
        self.path = owner.cursor.path

    def load(self) -> dict[str, Any]:
        saved = self.owner.cursor.load()
        return {"files": ((saved.get("logs") or {}).get(self.key) or {}).get("files") or {}}


class KubernetesConnector:
    """Watch one Kubernetes cluster (see the module docstring for what is read and emitted).

    ``cluster`` names the instance (``Source.instance``, ``Observation.cluster``);
    ``api_client``: a ``kubernetes.client.ApiClient``; ``cursor``: the resume state (read
    here, saved by the runner or :meth:`commit`); ``spool_dir``: where pod logs are spooled
    (default: beside the cursor, ``<cursor>.logs/``); ``namespaces``: watch only these (None:
    all); ``logs``: fetch pod logs; ``follow``: a log record waits (``idle_s``) for a possible
    continuation line across polls (else each poll emits every record read: a one-shot
    run); ``watch_s``: seconds each watch stays open per poll (the
    four watches run in parallel); ``poll_s``: pause between polls the CLI gives the runner;
    ``idle_s``: a log record waiting for a continuation line is emitted after this long;
    ``timeout_s``: bound of each list and log request; ``now``: the clock (Unix seconds),
    for transition records without an API time. Raises :class:`KubernetesError` for a cursor
    of another cluster and ``CursorError`` for a corrupted one.
    """

    def __init__(self, cluster: str, *, api_client: Any, cursor: CursorStore, spool_dir: str | os.PathLike[str] | None = None,
                 namespaces: Iterable[str] | None = None, logs: bool = True, follow: bool = True,
                 watch_s: int = 1, poll_s: float = 5.0,
                 idle_s: float = 1.0, timeout_s: float = 30.0, now: Callable[[], float] = time.time) -> None:
        from kubernetes import client as k8s

        self.cluster = cluster
        self.api_client = api_client
        self.core = k8s.CoreV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.cursor = cursor
        self.spool_dir = Path(spool_dir) if spool_dir is not None else Path(f"{cursor.path}.logs")
        self.namespaces = sorted(set(namespaces)) if namespaces else None
        self.logs = logs
        self.follow = follow
        self.watch_s = max(1, int(watch_s))
        self.poll_s = poll_s
        self.idle_s = idle_s
        self.timeout_s = timeout_s
        self.now = now
        self._source = Source(connector="kubernetes", instance=cluster)
        self.polls = 0
        self.emitted = 0
        self.relists = 0
        self.log_lines = 0
        self.last_error: str | None = None
        self.notes: list[str] = []
        self._kueue = True
        self._restore()

    # -- cursor ---------------------------------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        data = self.cursor.load()
        if not data:
            return {"version": CURSOR_VERSION, "cluster": self.cluster, "rv": {}, "workloads": {},
                    "kueue": {}, "pods": {}, "nodes": {}, "events": {}, "logs": {}}
        if data.get("version") != CURSOR_VERSION or data.get("cluster") != self.cluster:
            raise KubernetesError(
                f"cursor {self.cursor.path}: written for cluster {data.get('cluster')!r} version "
                f"{data.get('version')!r}, not {self.cluster!r} v{CURSOR_VERSION}")
        for k in ("rv", "workloads", "kueue", "pods", "nodes", "events", "logs"):
            data.setdefault(k, {})
        return data

    def _restore(self) -> None:
        """State = the saved cursor; spools cut back to their saved sizes; readers reopened."""
        self._state = self._load()
        self._readers: dict[str, FilesConnector] = {}
        known = {self._spool(key) for key in self._state["logs"]}
        for spool in self.spool_dir.glob("*.log") if self.spool_dir.is_dir() else ():
            if spool not in known:  # written after the last saved cursor: fetched again
                spool.unlink()
        for key, entry in self._state["logs"].items():
            spool = self._spool(key)
            size = int(entry.get("spool", 0))
            if spool.exists() and spool.stat().st_size > size:
                with spool.open("r+b") as fh:
                    fh.truncate(size)

    def checkpoint(self) -> dict[str, Any]:
        """The cursor document after the last :meth:`poll`: ``{"version", "cluster", "rv":
        {resource: resourceVersion}, "workloads": {id: {"state", ...}}, "kueue": {ns/name:
        facts}, "pods": {ns/name: facts}, "nodes": {name: {"conditions", "bad",
        "unschedulable"}}, "events": {uid: count}, "logs": {ns/pod/container: {"ts", "n",
        "spool", "files", "done"}}}`` (``ts``: the kubelet time of the last line read, RFC 3339
        with nanoseconds; ``n``: lines read with exactly that time; ``spool``: bytes; ``done``:
        the pod had ended at the last fetch). Save it only once that poll's observations were delivered."""
        for key, reader in self._readers.items():
            entry = self._state["logs"].setdefault(key, {})
            entry["files"] = reader.checkpoint()["files"]
        return json.loads(json.dumps(self._state))

    def commit(self) -> None:
        """Save :meth:`checkpoint` (after the last poll's observations were delivered). Raises
        ``OSError`` when the cursor cannot be written."""
        self.cursor.save(self.checkpoint())

    def rewind(self) -> None:
        """Go back to the saved cursor (a delivery failed): the next poll emits the same
        observations again, with the same ids."""
        for reader in self._readers.values():
            reader.close()
        self._restore()

    def coverage(self) -> list[CoverageEntry]:
        """One entry ``kubernetes:<cluster>`` (``present`` once observations were emitted,
        ``failed`` after a failed poll, else ``empty``), then one per spooled container log
        (the files reader's entry, ``source`` = ``pod-log:<ns>/<pod>/<container>``)."""
        status = "failed" if self.last_error else ("present" if self.emitted else "empty")
        notes = [f"{self.polls} polls", f"{self.relists} relists", f"{self.log_lines} log lines"] + self.notes
        if self.last_error:
            notes.append(f"last error: {self.last_error}")
        out = [CoverageEntry(source=f"kubernetes:{self.cluster}", status=status, records=self.emitted,
                             detail="; ".join(notes))]
        for key, reader in sorted(self._readers.items()):
            for entry in reader.coverage():
                out.append(entry.model_copy(update={"source": f"pod-log:{key}"}))
        return out

    # -- list and watch -------------------------------------------------------------------------
    def _list_fn(self, kind: str) -> tuple[Callable[..., Any], tuple, dict[str, Any]]:
        if kind == "workloads":
            return self.custom.list_cluster_custom_object, KUEUE, {}
        if kind == "pods":
            return self.core.list_pod_for_all_namespaces, (), {}
        if kind == "nodes":
            return self.core.list_node, (), {}
        return self.core.list_event_for_all_namespaces, (), {}

    def _list(self, kind: str) -> tuple[list[dict[str, Any]], str]:
        fn, args, kw = self._list_fn(kind)
        resp = fn(*args, _preload_content=False, _request_timeout=self.timeout_s, **kw)
        doc = json.loads(resp.data)
        return doc.get("items") or [], str((doc.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, kind: str, rv: str) -> tuple[list[tuple[str, dict[str, Any]]], str]:
        """Events of ``kind`` since ``rv`` for :attr:`watch_s` seconds -> (events, new rv).
        Raises ``ApiException`` (410 when ``rv`` expired)."""
        from kubernetes import watch

        fn, args, kw = self._list_fn(kind)
        out: list[tuple[str, dict[str, Any]]] = []
        w = watch.Watch()
        for ev in w.stream(fn, *args, resource_version=rv, timeout_seconds=self.watch_s,
                           allow_watch_bookmarks=True,
                           _request_timeout=self.watch_s + self.timeout_s, **kw):
            # raw JSON (the client's deserialize=False drops the ERROR event's object, so a
            # 410 would not surface as an ApiException)
            obj = ev.get("raw_object") or {}
            new_rv = _meta(obj).get("resourceVersion")
            if new_rv:
                rv = str(new_rv)
            if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                out.append((ev["type"], obj))
        return out, rv

    def _sync(self, kind: str, rv: str | None) -> tuple[str, list[tuple[str, dict[str, Any]]], bool]:
        """(kind, changes, relisted): a watch from ``rv``; a list (every object ``SYNC``) when
        there is no ``rv`` or it expired (410 Gone)."""
        from kubernetes.client.exceptions import ApiException

        if rv:
            try:
                changes, new_rv = self._watch(kind, rv)
                return new_rv, changes, False
            except ApiException as exc:
                if exc.status != 410:
                    raise
                log.info("kubernetes %s watch from resourceVersion %s expired (410): relisting", kind, rv)
        items, new_rv = self._list(kind)
        return new_rv, [("SYNC", o) for o in items], True

    def poll(self) -> list[Observation]:
        """One poll: watch (or list) workloads, pods, nodes and events, compare with the state
        after the previous poll (or the saved cursor), fetch new pod log lines; returns the
        observations ordered by ``observed_at``. Raises :class:`KubernetesError` when the API
        fails (the state is then unchanged)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        self.polls += 1
        state = json.loads(json.dumps(self._state))
        kinds = ["pods", "nodes", "events"] + (["workloads"] if self._kueue else [])
        try:
            with ThreadPoolExecutor(len(kinds)) as pool:
                futures = {k: pool.submit(self._sync, k, state["rv"].get(k)) for k in kinds}
                results = {}
                for k, f in futures.items():
                    try:
                        results[k] = f.result()
                    except ApiException as exc:
                        if k == "workloads" and exc.status == 404:
                            self._kueue = False
                            self.notes.append("no Kueue Workload CRD (kueue.x-k8s.io/v1beta1): workloads from pods only")
                            continue
                        raise
        except (ApiException, HTTPError, OSError, ValueError) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            raise KubernetesError(f"kubernetes API: {self.last_error}") from exc
        now_ns = int(self.now() * _NS)
        out: list[Observation] = []
        dirty: set[str] = set()
        for kind in ("workloads", "pods", "nodes", "events"):
            if kind not in results:
                continue
            rv, changes, relisted = results[kind]
            self.relists += relisted and bool(state["rv"].get(kind))
            state["rv"][kind] = rv
            getattr(self, f"_apply_{kind}")(state, changes, relisted, now_ns, out, dirty)
        for wid in sorted(dirty):
            out.extend(self._workload_transitions(state, wid, now_ns))
        # forget ended workloads an hour after their end once none of their objects is left
        live = {p["workload"] for p in state["pods"].values()} | {
            w["workload"] for w in state["kueue"].values() if not w.get("deleted")}
        state["workloads"] = {k: v for k, v in state["workloads"].items() if k in live or v["state"] in _ORDER
                              or (v.get("end") or now_ns) >= now_ns - 3600 * _NS}
        state["kueue"] = {k: v for k, v in state["kueue"].items()
                          if not v.get("deleted") or v["deleted"] >= now_ns - 3600 * _NS}
        self._state = state
        if self.logs:
            try:
                out.extend(self._fetch_logs(state))
            except (ApiException, HTTPError, OSError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
                raise KubernetesError(f"kubernetes pod logs: {self.last_error}") from exc
        self.last_error = None
        self.emitted += len(out)
        # equal times (a pod created and started within one second): PENDING, RUNNING, then the
        # end; log records of one container in their line order
        out.sort(key=lambda o: (o.observed_at, _ORDER.get(o.attributes.get("state"), 2),
                                (o.position.file or "", o.position.line or 0) if o.position else ("", 0),
                                o.format or "", o.host, o.observation_id))
        return out

    # -- workloads and pods ---------------------------------------------------------------------
    def _wanted(self, obj: dict[str, Any]) -> bool:
        return self.namespaces is None or _meta(obj).get("namespace") in self.namespaces

    def _apply_workloads(self, state, changes, relisted, now_ns, out, dirty) -> None:
        seen = set()
        for typ, wl in changes:
            if not self._wanted(wl):
                continue
            key = _key(wl)
            seen.add(key)
            facts = _workload_facts(wl)
            if typ == "DELETED":
                facts["deleted"] = now_ns
            if state["kueue"].get(key) != facts:
                state["kueue"][key] = facts
                dirty.add(facts["workload"])
        if relisted:  # gone while not watched
            for key in [k for k in state["kueue"] if k not in seen and not state["kueue"][k].get("deleted")]:
                state["kueue"][key]["deleted"] = now_ns
                dirty.add(state["kueue"][key]["workload"])

    def _apply_pods(self, state, changes, relisted, now_ns, out, dirty) -> None:
        seen = set()
        for typ, pod in changes:
            owner = pod_workload(pod)
            if owner is None or not self._wanted(pod):
                continue
            key = _key(pod)
            seen.add(key)
            prev = state["pods"].get(key)
            uid = _meta(pod).get("uid")
            if prev is not None and prev.get("uid") != uid:
                prev = None  # a new pod of the same name
            facts = _pod_facts(pod, deleted_at=now_ns if typ == "DELETED" else None)
            if typ == "DELETED" and prev is not None and prev["state"] not in ("PENDING", "RUNNING"):
                facts = dict(prev)  # it had ended before it was deleted
            facts.update({"uid": uid, "workload": owner[0], "kind": owner[1], "name": _meta(pod).get("name"),
                          "namespace": _meta(pod).get("namespace"), "gone": typ == "DELETED"})
            out.extend(self._pod_transitions(key, prev, facts))
            state["pods"][key] = facts
            dirty.add(owner[0])
        if relisted:  # deleted while not watched: ended at the latest now
            for key, facts in list(state["pods"].items()):
                if key in seen or facts.get("gone"):
                    continue
                new = dict(facts, gone=True)
                if facts["state"] in ("PENDING", "RUNNING"):
                    new.update(state=DISRUPTION_STATE.get(facts.get("disruption") or "", "CANCELLED"),
                               reason=facts.get("disruption") or "Deleted", end=now_ns)
                out.extend(self._pod_transitions(key, facts, new))
                state["pods"][key] = new
                dirty.add(facts["workload"])
        # forget pods that are gone and ended more than an hour ago
        horizon = now_ns - 3600 * _NS
        state["pods"] = {k: v for k, v in state["pods"].items()
                         if not (v.get("gone") and (v.get("end") or now_ns) < horizon)}

    def _path(self, cur: str, submit: int | None, start: int | None, end: int | None) -> list[tuple[str, int | None]]:
        path = [("PENDING", submit)]
        if cur != "PENDING" and start is not None:
            path.append(("RUNNING", start))
        if cur not in ("PENDING", "RUNNING"):
            path.append((cur, end or start or submit))
        return path

    @staticmethod
    def _todo(prev_state: str | None, cur: str, path: list[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
        if prev_state == cur:
            return []
        if prev_state is None:
            return path
        if prev_state in _ORDER:
            return [(s, at) for s, at in path if _ORDER.get(s, 2) > _ORDER[prev_state]]
        return []  # it had ended already

    def _pod_transitions(self, key: str, prev: dict[str, Any] | None, f: dict[str, Any]) -> Iterable[Observation]:
        cur = f["state"]
        path = self._path(cur, f.get("submit"), f.get("start"), f.get("end"))
        for state, at in self._todo(prev.get("state") if prev else None, cur, path):
            if at is None:
                continue
            final = state not in ("PENDING", "RUNNING")
            attrs: dict[str, Any] = {
                "job_id": f["workload"], "pod": key, "step": f["name"], "namespace": f["namespace"],
                "kind": f["kind"], "state": state, "submit_ns": f.get("submit"),
            }
            if state != "PENDING":
                attrs.update({"node": f.get("node"), "nodes": [f["node"]] if f.get("node") else None,
                              "start_ns": f.get("start")})
                if f.get("rank"):
                    attrs.update({"rank_first": f["rank"][0], "rank_last": f["rank"][1],
                                  "ntasks": f["rank"][1] - f["rank"][0] + 1})
                    if f.get("node"):
                        attrs["ranks"] = {f["node"]: f["rank"]}
            status = "0:0"
            if final:
                sig = f.get("signal") or 0
                status = f"{f.get('exit_code') or 0}:{sig}"
                attrs.update({"end_ns": f.get("end"), "exit_code": f.get("exit_code") or 0, "signal": f.get("signal"),
                              "exit_status": status, "reason": f.get("reason"), "disruption": f.get("disruption")})
            attrs = {k: v for k, v in attrs.items() if v is not None}
            body = _sacct_row(f["name"], f["workload"].split("/", 1)[1], f["namespace"], f["kind"],
                              attrs.get("ntasks", 1), state, status)
            if final:
                body += "\n" + json.dumps(f["status"], sort_keys=True, separators=(",", ":"))
            yield self._obs(at, f.get("node") if state != "PENDING" and f.get("node") else SCHEDULER_HOST,
                            f["workload"], "k8s_pod", body, attrs)

    def _members(self, state: dict[str, Any], wid: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        pods = [p for p in state["pods"].values() if p["workload"] == wid]
        kueue = [w for w in state["kueue"].values() if w["workload"] == wid and not w.get("deleted")]
        return pods, kueue

    def _workload_view(self, state: dict[str, Any], wid: str, now_ns: int) -> dict[str, Any] | None:
        pods, kueue = self._members(state, wid)
        if not pods and not kueue:
            return None
        wl = kueue[-1] if kueue else None
        conds = wl["conditions"] if wl else []
        placed = [p for p in pods if p.get("node") and p["state"] != "PENDING"]
        nodes = sorted({p["node"] for p in placed})
        ranks: dict[str, list[int]] = {}
        for p in placed:
            if p.get("rank"):
                r = ranks.setdefault(p["node"], list(p["rank"]))
                r[0], r[1] = min(r[0], p["rank"][0]), max(r[1], p["rank"][1])
        submits = [x for x in [wl.get("created") if wl else None] + [p.get("submit") for p in pods] if x]
        starts = [p["start"] for p in placed if p.get("start")]
        ends = [p["end"] for p in pods if p.get("end")]
        states = [p["state"] for p in pods]
        finished = _cond_true(conds, "Finished")
        evicted = _cond_true(conds, "Evicted") or _cond_true(conds, "Preempted")
        failures = [s for s in states if s not in ("PENDING", "RUNNING", "COMPLETED")]
        worst = min(failures, key=_SEVERITY.index) if failures else None
        reason, end = None, None
        if finished:
            cur = "COMPLETED" if finished.get("reason") == "Succeeded" else (worst or "FAILED")
            reason, end = finished.get("reason"), _ts(finished.get("lastTransitionTime"))
        elif evicted:
            cur, reason, end = "PREEMPTED", evicted.get("reason"), _ts(evicted.get("lastTransitionTime"))
        elif pods and all(s not in ("PENDING", "RUNNING") for s in states) and (
                not wl or len(pods) >= sum(int(p.get("count") or 0) for p in wl["pod_sets"])):
            cur = worst or "COMPLETED"
        elif any(s == "RUNNING" for s in states) or (worst and starts):
            cur = "RUNNING"
        else:
            cur = "PENDING"
        if cur not in ("PENDING", "RUNNING"):
            end = end or (max(ends) if ends else now_ns)
            bad = [p for p in pods if p["state"] == worst] if worst else []
            reason = reason or (bad[0].get("reason") if bad else None)
        code = next((p.get("exit_code") for p in pods if p["state"] == worst and p.get("exit_code")), 0) if worst else 0
        sig = next((p.get("signal") for p in pods if p["state"] == worst and p.get("signal")), None) if worst else None
        kind = wl["kind"] if wl and wl["kind"] != "Workload" else (pods[0]["kind"] if pods else "Workload")
        return {"state": cur, "submit": min(submits) if submits else None, "start": min(starts) if starts else None,
                "end": end, "nodes": nodes, "ranks": ranks, "reason": reason, "exit_code": code, "signal": sig,
                "kind": kind, "queue": wl.get("queue") if wl else None,
                "cluster_queue": wl.get("cluster_queue") if wl else None, "pods": len(pods),
                "conditions": conds, "kueue": wl is not None, "kueue_name": wl.get("name") if wl else None}

    def _workload_transitions(self, state: dict[str, Any], wid: str, now_ns: int) -> Iterable[Observation]:
        v = self._workload_view(state, wid, now_ns)
        if v is None:
            return
        prev = state["workloads"].get(wid) or {}
        if prev.get("submit") not in (None, v["submit"]) and prev.get("state") not in ("PENDING", "RUNNING"):
            prev = {}  # a new attempt of the same name
        cur = v["state"]
        ns, name = wid.split("/", 1)
        ntasks = sum(r[1] - r[0] + 1 for r in v["ranks"].values()) or None
        for st, at in self._todo(prev.get("state"), cur, self._path(cur, v["submit"], v["start"], v["end"])):
            if at is None:
                continue
            final = st not in ("PENDING", "RUNNING")
            attrs: dict[str, Any] = {"job_id": wid, "state": st, "name": name, "namespace": ns, "kind": v["kind"],
                                     "queue": v["queue"], "cluster_queue": v["cluster_queue"], "pods": v["pods"],
                                     "submit_ns": v["submit"]}
            if st != "PENDING":
                attrs.update({"nodes": v["nodes"], "start_ns": v["start"], "ranks": v["ranks"] or None,
                              "ntasks": ntasks})
            status = "0:0"
            if final:
                status = f"{v['exit_code'] or 0}:{v['signal'] or 0}"
                attrs.update({"end_ns": v["end"], "exit_code": v["exit_code"] or 0, "signal": v["signal"],
                              "exit_status": status, "reason": v["reason"]})
            attrs = {k: val for k, val in attrs.items() if val is not None}
            body = self._workload_row(wid, v)
            for c in v["conditions"]:
                body += "\n" + json.dumps(c, sort_keys=True, separators=(",", ":"))
            yield self._obs(at, SCHEDULER_HOST, wid, "k8s_workload", body, attrs)
        spec_key = None
        if cur != "PENDING" and v["nodes"] and v["start"]:
            spec = self._spec(wid, v)
            if spec is not None:
                spec_json = json.loads(spec.model_dump_json())
                spec_key = json.dumps(spec_json, sort_keys=True)
                if prev.get("spec") != spec_key and (cur != "RUNNING" or not prev.get("spec")):
                    import yaml

                    yield Observation(
                        source=self._source, kind="scheduler_event", observed_at=spec.start_ns, time_source="line",
                        time_quality=TIME_QUALITY_EXACT, host=SCHEDULER_HOST, cluster=self.cluster,
                        workload_id=wid, format="workload_yaml",
                        body=yaml.safe_dump(spec_json, sort_keys=False), attributes={"workload": spec_json},
                    ).with_id()
                else:
                    spec_key = prev.get("spec")
        state["workloads"][wid] = {"state": cur, "submit": v["submit"], "end": v["end"],
                                   "spec": spec_key or prev.get("spec")}

    @staticmethod
    def _workload_row(wid: str, v: dict[str, Any]) -> str:
        """``kubectl get workloads`` columns (NAMESPACE NAME QUEUE RESERVED IN ADMITTED FINISHED)
        for a Kueue workload, else ``<kind> <id>: <n> pods on <nodes>``. It names no state
        word: the state is in the attributes, and a made-up status word no rule reads would
        count as an unrecognised error line."""
        ns, name = wid.split("/", 1)
        if v["kueue"]:
            conds = {c.get("type"): c.get("status") for c in v["conditions"]}
            return "   ".join([ns, v.get("kueue_name") or name, v["queue"] or "<none>", v["cluster_queue"] or "<none>",
                               conds.get("Admitted") or "<none>", conds.get("Finished") or "<none>"])
        return f"{v['kind']} {wid}: {v['pods']} pods on {','.join(v['nodes']) or '<none>'}"

    def _spec(self, wid: str, v: dict[str, Any]) -> WorkloadSpec | None:
        ranks = {}
        for node, (first, last) in sorted(v["ranks"].items()):
            for r in range(first, last + 1):
                ranks[r] = {"host": node}
        per = {last - first + 1 for first, last in v["ranks"].values()}
        try:
            return WorkloadSpec.model_validate({
                "workload_id": wid, "scheduler": "kueue" if v["kueue"] else "kubernetes", "cluster": self.cluster,
                "state": v["state"], "exit_code": f"{v['exit_code'] or 0}:{v['signal'] or 0}"
                if v["state"] not in ("RUNNING",) else None,
                "start": datetime.fromtimestamp(v["start"] / _NS, UTC),
                "end": datetime.fromtimestamp(v["end"] / _NS, UTC) if v["end"] else None,
                "nodes": v["nodes"], "ranks_per_node": per.pop() if len(per) == 1 else None, "ranks": ranks})
        except ValueError as exc:
            self.notes.append(f"workload {wid}: no spec record: {str(exc).splitlines()[0]}")
            return None

    # -- nodes and events -----------------------------------------------------------------------
    def _apply_nodes(self, state, changes, relisted, now_ns, out, dirty) -> None:
        for typ, node in changes:
            if typ == "DELETED":
                state["nodes"].pop(_key(node), None)
                continue
            name = _key(node)
            raw = (node.get("status") or {}).get("conditions") or []
            conds = [{k: c.get(k) for k in ("type", "status", "reason", "message")} for c in raw]
            bad = sorted(c["type"] for c in conds if _bad(c))
            unsched = bool((node.get("spec") or {}).get("unschedulable"))
            cur = {"conditions": conds, "bad": bad, "unschedulable": unsched}
            prev = state["nodes"].get(name)
            state["nodes"][name] = cur
            if prev is None:
                if not bad and not unsched:
                    continue
            elif (prev.get("bad"), prev.get("unschedulable")) == (bad, unsched) and (
                    not bad or [c for c in prev["conditions"] if c["type"] in bad] == [c for c in conds if c["type"] in bad]):
                continue
            times = [_ts(c.get("lastTransitionTime")) for c in raw if c.get("type") in bad or not bad]
            times = [t for t in times if t]
            at, src, q = (max(times), "line", TIME_QUALITY_SECONDS) if times else (now_ns, "transport", TIME_QUALITY_TRANSPORT)
            attrs = {"node": name, "conditions": conds, "bad": bad, "unschedulable": unsched,
                     "previous_bad": prev.get("bad") if prev else None}
            out.append(Observation(
                source=self._source, kind="scheduler_event", observed_at=at, time_source=src, time_quality=q,
                host=name, cluster=self.cluster, format="k8s_node", body=_conditions_table(raw),
                attributes={k: v for k, v in attrs.items() if v is not None}).with_id())

    def _apply_events(self, state, changes, relisted, now_ns, out, dirty) -> None:
        kept = state["events"]
        for typ, ev in changes:
            if typ == "DELETED" or not self._wanted(ev) and (ev.get("involvedObject") or {}).get("kind") != "Node":
                continue
            etype, reason = ev.get("type") or "Normal", ev.get("reason") or ""
            if etype != "Warning" and reason not in EVENT_REASONS:
                continue
            uid, count = _meta(ev).get("uid"), int(ev.get("count") or (ev.get("series") or {}).get("count") or 1)
            if kept.get(uid, 0) >= count:
                continue
            kept[uid] = count
            obj = ev.get("involvedObject") or {}
            host, wid = SCHEDULER_HOST, None
            if obj.get("kind") == "Node":
                host = obj.get("name") or SCHEDULER_HOST
            elif obj.get("kind") == "Pod":
                pod = state["pods"].get(f"{obj.get('namespace')}/{obj.get('name')}")
                if pod is None:
                    continue  # not a workload pod
                host, wid = pod.get("node") or SCHEDULER_HOST, pod["workload"]
            at = (_ts(ev.get("lastTimestamp")) or _ts(ev.get("eventTime")) or _ts(ev.get("firstTimestamp"))
                  or _ts(_meta(ev).get("creationTimestamp")))
            src, q = ("line", TIME_QUALITY_SECONDS) if at else ("transport", TIME_QUALITY_TRANSPORT)
            attrs = {"event_type": etype, "reason": reason, "object": f"{str(obj.get('kind')).lower()}/{obj.get('name')}",
                     "namespace": obj.get("namespace"), "count": count,
                     "source": (ev.get("source") or {}).get("component") or ev.get("reportingComponent") or None}
            out.append(Observation(
                source=self._source, kind="scheduler_event", observed_at=at or now_ns, time_source=src,
                time_quality=q, host=host, cluster=self.cluster, workload_id=wid, format="k8s_event",
                body=_event_row(ev, at), attributes={k: v for k, v in attrs.items() if v is not None}).with_id())
        if len(kept) > MAX_EVENTS_KEPT:  # events expire from the API after an hour: keep the newest
            state["events"] = dict(list(kept.items())[-MAX_EVENTS_KEPT:])

    # -- pod logs -------------------------------------------------------------------------------
    def _spool(self, key: str) -> Path:
        return self.spool_dir / f"{key.replace('/', '__')}.log"

    def _fetch_logs(self, state: dict[str, Any]) -> list[Observation]:
        out: list[Observation] = []
        for pkey, pod in sorted(state["pods"].items()):
            if not pod.get("node") or pod.get("gone"):
                continue
            for container in pod.get("started") or []:
                key = f"{pkey}/{container}"
                entry = state["logs"].setdefault(key, {"ts": None, "n": 0, "spool": 0})
                # an ended pod's logs are complete: one last fetch, then only the spool is read
                lines = [] if entry.get("done") else self._read_log(pod, container, entry)
                if pod["state"] not in _ORDER:
                    entry["done"] = True
                spool = self._spool(key)
                if lines:
                    spool.parent.mkdir(parents=True, exist_ok=True)
                    with spool.open("ab") as fh:
                        fh.write("".join(text + "\n" for _, text in lines).encode("utf-8", errors="replace"))
                    last_ns = _ts(lines[-1][0])
                    if last_ns:
                        os.utime(spool, ns=(last_ns, last_ns))
                    entry["spool"] = spool.stat().st_size
                    self.log_lines += len(lines)
                if key not in self._readers and spool.exists():
                    self._readers[key] = FilesConnector(
                        [spool], host=pod["node"], cluster=self.cluster, workload_id=pod["workload"],
                        cursor=_SubCursor(self, key), follow=self.follow, idle_s=self.idle_s)  # type: ignore[arg-type]
                reader = self._readers.get(key)
                if reader is not None:
                    out.extend(self._as_pod_log(o, pod, container) for o in reader.poll())
        return out

    def _read_log(self, pod: dict[str, Any], container: str, entry: dict[str, Any]) -> list[tuple[str, str]]:
        """New ``(kubelet time, text)`` lines of one container since ``entry`` (updated)."""
        query: list[tuple[str, Any]] = [("container", container), ("timestamps", "true")]
        last = entry.get("ts")
        if last:
            query.append(("sinceTime", last[:19] + "Z"))
        params = self.api_client.param_serialize(
            method="GET", resource_path="/api/v1/namespaces/{namespace}/pods/{name}/log",
            path_params={"namespace": pod["namespace"], "name": pod["name"]}, query_params=query,
            header_params={"Accept": "*/*"}, auth_settings=["BearerToken"])
        resp = self.api_client.call_api(*params, _request_timeout=self.timeout_s)
        resp.read()
        if resp.status == 400 or resp.status == 404:
            return []  # container not started yet / pod gone
        if not 200 <= resp.status < 300:
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=resp.status, reason=(resp.data or b"")[:200].decode(errors="replace"))
        text = resp.data.decode("utf-8", errors="replace")
        out: list[tuple[str, str]] = []
        last_ns = _ts(last) if last else None
        skip = int(entry.get("n") or 0)
        for raw in text.split("\n"):
            if not raw:
                continue
            ts, _, body = raw.partition(" ")
            at = _ts(ts)
            if at is None:
                continue
            if last_ns is not None and at < last_ns:
                continue
            if last_ns is not None and at == last_ns and skip:
                skip -= 1
                continue
            out.append((ts, body))
            if ts == entry.get("ts"):
                entry["n"] = int(entry.get("n") or 0) + 1
            else:
                entry["ts"], entry["n"] = ts, 1
        return out

    def _as_pod_log(self, obs: Observation, pod: dict[str, Any], container: str) -> Observation:
        rank = obs.rank
        if rank is None and pod.get("rank") and pod["rank"][0] == pod["rank"][1]:
            rank = pod["rank"][0]
        line = obs.position.line if obs.position else None
        return obs.model_copy(update={
            "source": self._source, "rank": rank,
            "attributes": {**obs.attributes, "pod": f"{pod['namespace']}/{pod['name']}", "container": container},
            "position": Position(file=f"pods/{pod['namespace']}/{pod['name']}/{container}", line=line),
        }).with_id()

    def _obs(self, at: int, host: str, wid: str, fmt: str, body: str, attrs: dict[str, Any]) -> Observation:
        return Observation(
            source=self._source, kind="scheduler_event", observed_at=at, time_source="line",
            time_quality=TIME_QUALITY_SECONDS, host=host, cluster=self.cluster, workload_id=wid,
            format=fmt, body=body, attributes=attrs).with_id()

    def close(self) -> None:
        """Close the spool readers' files."""
        for reader in self._readers.values():
            reader.close()


# ---- CLI: faultstream connect kubernetes ----------------------------------------------------------


@connector(interval=5.0, cursor=".state/cursors/kubernetes-{cluster}.json", errors=(KubernetesError,))
def connect_kubernetes_cli(
    opts: Shared,
    cluster: Annotated[str, typer.Argument(help="cluster name (Source.instance and cluster of the records)")],
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig file (default: KUBECONFIG, ~/.kube/config, or the in-cluster service account)")] = None,
    context: Annotated[str | None, typer.Option(help="kubeconfig context (default: the current one)")] = None,
    namespace: Annotated[list[str] | None, typer.Option("--namespace", "-n", help="watch only this namespace (repeatable; default: all)")] = None,
    logs: Annotated[bool, typer.Option("--logs/--no-logs", help="stream the workload pods' logs (they spool beside the cursor)")] = True,
) -> Generator[KubernetesConnector, Any, None]:
    """Publish Kubernetes/Kueue workload state transitions (Workloads, Job/JobSet/PyTorchJob pods, node placement, ranks, OOMKilled/Evicted/Preempted), node conditions, events and pod logs to Kafka, key = host; the cursor (resourceVersions, log sinceTimes) is saved only after delivery.

    With --follow it polls every --interval seconds until interrupted (Ctrl-C or SIGTERM); a failed poll or delivery is logged and retried at the next poll with the same record ids. With --once (the default) an API, cursor or Kafka error exits 2 with one line on stderr (the cursor is left as it was)."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        if kubeconfig is not None or os.environ.get("KUBECONFIG") or Path("~/.kube/config").expanduser().exists():
            api_client = config.new_client_from_config(config_file=str(kubeconfig) if kubeconfig else None, context=context)
        else:
            config.load_incluster_config()
            from kubernetes import client as k8s

            api_client = k8s.ApiClient()
    except (ConfigException, OSError, ValueError) as exc:
        raise KubernetesError(f"kubernetes configuration: {exc}") from None
    done = yield KubernetesConnector(cluster, api_client=api_client, cursor=opts.cursor_store(), namespaces=namespace,
                                     logs=logs, follow=opts.follow, poll_s=opts.interval_s)
    typer.echo(f"published {done.sent} records of Kubernetes cluster {cluster} to {opts.topic}", err=True)
