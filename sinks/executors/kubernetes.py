"""Remediation through the Kubernetes API (the official ``kubernetes`` Python client).

=========  ====================================================  ============================
action     default mode                                          ``taint_only=True``
=========  ====================================================  ============================
cordon     ``spec.unschedulable=true``, annotation               ``NoSchedule`` taint only
           ``faultstream.io/cordoned-by=<action_id>``, and a
           ``NoSchedule`` taint ``<taint_key>=<action_id>``
drain      cordon as above, then every pod on the node is        ``NoExecute`` taint only
           evicted through the Eviction API (policy/v1)          (the taint manager evicts)
notify     nothing (ok)                                          nothing (ok)
others     ``ok=False`` ``unsupported by kubernetes executor``   same
resume     remove every ``<taint_key>`` taint; uncordon and      same
           drop the annotation if faultstream cordoned the node
=========  ====================================================  ============================

Besides, cordon and drain (in either mode) set the node condition ``node_condition`` (default
``FaultstreamRemediation``, :data:`sinks.executors.base.REMEDIATION_CHECK`) and resume clears
it, so ``kubectl describe node`` and anything that watches node conditions says why the node is
out.

**The node condition** is written the way NVSentinel's platform connector writes the condition
of a health check (``platform-connectors/pkg/connectors/kubernetes/process_node_events.go``):
``type`` = the check name; ``status`` ``"True"`` with ``reason`` ``<type>IsNotHealthy`` and a
``message`` of entries, each ended by ``;`` (``ErrorCode:<cause code> GPU:<index> PCI:<bus id>
GPU_UUID:<uuid> <the action's reason> (faultstream <action> <action id>, verdict
<attribution id>)``; an action already listed is not added twice, another action on the same
node adds its entry); on resume ``status`` ``"False"``, ``reason`` ``<type>IsHealthy``, ``message``
``No Health Failures``. ``lastHeartbeatTime`` is the action's time (``updated_at``, else
``created_at``; the resume's wall clock), ``lastTransitionTime`` changes only when ``status``
does. It is a strategic merge patch of the ``nodes/<name>/status`` subresource (conditions merge
by ``type``, the kubelet's own are untouched) carrying the read ``resourceVersion`` (409 on a
concurrent change: retried from the read). The message is evidence for a person; the target is
always ``target.host``, checked as below, never anything read from a message. A condition that
cannot be set (e.g. no ``patch`` on ``nodes/status``) makes the result ``ok=False`` with the
reason, after the cordon and drain were done. ``node_condition=None`` sets none.

The taint's value is the action id, so ``kubectl describe node`` says which remediation took the
node out. ``resume`` uncordons only a node that carries faultstream's ``cordoned-by``
annotation: a node a person cordoned stays cordoned (``ok=False``, the detail says so) --
faultstream never overrides a human decision.

**Drain** follows ``kubectl drain --ignore-daemonsets --delete-emptydir-data --force``: pods
owned by a DaemonSet, mirror (static) pods (annotation ``kubernetes.io/config.mirror``), pods
already terminating and finished pods (``Succeeded``/``Failed``) are skipped, every other pod
gets an Eviction. The API server refuses an eviction that would violate a PodDisruptionBudget
with HTTP 429: the node stays cordoned and the result is ``ok=False`` with detail ``eviction
blocked by PodDisruptionBudget: <namespace>/<pod>, ...`` (the action is not lost; it can be
retried). ``drain_timeout_s > 0`` then waits (tenacity, polling every second) until the evicted
pods are gone; pods still there after that time make the result ``ok=False``.

**Configuration**: ``api_client`` when given; otherwise the kubeconfig ``KUBECONFIG`` names (or
``~/.kube/config``) through ``kubernetes.config.new_client_from_config``, else the in-cluster
service account (``load_incluster_config``). It is loaded on first use; a missing configuration
is an ``ok=False`` result, not an exception. Merge patches (RFC 7386) are sent as
``application/merge-patch+json``; the taint list is read, changed and written back with the
node's ``resourceVersion`` so a concurrent change gives HTTP 409, which is retried with a fresh
read.

**Node names** are checked before any request (:func:`node_name_problem`): a Kubernetes node
name is a DNS-1123 subdomain (lower-case letters, digits, ``-`` and ``.``, 253 characters at
most), so it can neither leave the ``/api/v1/nodes/<name>`` path (``/``, ``..``) nor add a term
to the ``spec.nodeName=<name>`` field selector (``,``); a target that is not one is refused
(``ok=False``), nothing is sent.

**Failures**: HTTP 5xx, 409 and connection errors are transient and retried (tenacity,
``attempts`` tries); any other API error is ``ok=False`` with the status and the API's message.

``commands`` holds the ``kubectl`` equivalent of what was done (``kubectl cordon node-a01``,
``kubectl taint nodes node-a01 faultstream.io/remediation=act-...:NoSchedule``) and one
``POST /api/v1/namespaces/<ns>/pods/<pod>/eviction`` line per eviction.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import time
from typing import Any, Callable, Iterable

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from schemas.records import RemediationAction
from correlators.remediation.targets import shown
from sinks.executors.base import (
    REFUSED,
    REMEDIATION_CHECK,
    UNSUPPORTED,
    ExecutionResult,
    TransientError,
    action_host,
    retrying,
    target_problem,
)

__all__ = [
    "KubernetesExecutor",
    "CORDONED_BY",
    "MIRROR_ANNOTATION",
    "cordon_patch",
    "uncordon_patch",
    "taints_with",
    "taints_without",
    "evictable_pods",
    "eviction_body",
    "SUPPORTED",
    "NO_HEALTH_FAILURES",
    "condition_entry",
    "condition_entries",
    "condition_patch",
    "node_name_problem",
]

log = logging.getLogger("faultstream.executor.kubernetes")

#: Node annotation faultstream sets when it cordons a node (value: the action id).
CORDONED_BY = "faultstream.io/cordoned-by"
#: Annotation the kubelet puts on mirror pods of static pods.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
SUPPORTED = frozenset({"cordon", "drain", "notify"})
#: ``message`` of a cleared condition (what NVSentinel's platform connector writes).
NO_HEALTH_FAILURES = "No Health Failures"
#: Longest condition ``message`` written (characters): the oldest entries go first.
MAX_CONDITION_MESSAGE = 4096
#: Longest text taken from an action's reason into one entry (characters).
MAX_ENTRY_TEXT = 512
_CONDITION_TYPE = re.compile(r"^[A-Z][A-Za-z0-9]{0,62}$")


# -- pure builders (unit-tested without a cluster) -------------------------------------------

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$")


def node_name_problem(name: object) -> str | None:
    """Why ``name`` is not a Kubernetes node name, or None: a valid node name
    (:func:`correlators.remediation.targets.node_name_problem`) that is also a DNS-1123
    subdomain (lower-case letters, digits, ``-``, ``.``, at most 253 characters)."""
    from correlators.remediation.targets import node_name_problem as generic_problem

    generic = generic_problem(name)
    if generic:
        return generic
    if len(name) > 253:
        return f"{len(name)} characters (at most 253)"
    if not _DNS1123_SUBDOMAIN.match(name):
        return "not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.')"
    return None



def cordon_patch(action_id: str) -> dict[str, Any]:
    """Merge patch that cordons a node and records who did: ``{"metadata": {"annotations":
    {CORDONED_BY: action_id}}, "spec": {"unschedulable": true}}``."""
    return {"metadata": {"annotations": {CORDONED_BY: action_id}}, "spec": {"unschedulable": True}}


def uncordon_patch() -> dict[str, Any]:
    """Merge patch that uncordons a node and drops faultstream's annotation (``null`` deletes a
    key in a merge patch)."""
    return {"metadata": {"annotations": {CORDONED_BY: None}}, "spec": {"unschedulable": False}}


def _taint_dict(taint: Any) -> dict[str, Any]:
    """A taint (``V1Taint`` or API dict) as the API's JSON dict (``key``, ``value``, ``effect``,
    ``timeAdded`` when set)."""
    if isinstance(taint, dict):
        out = {k: v for k, v in taint.items() if v is not None}
        if "time_added" in out:
            out["timeAdded"] = out.pop("time_added")
        return out
    out = {"key": taint.key, "effect": taint.effect}
    if taint.value is not None:
        out["value"] = taint.value
    if getattr(taint, "time_added", None) is not None:
        added = taint.time_added
        out["timeAdded"] = added.isoformat().replace("+00:00", "Z") if hasattr(added, "isoformat") else added
    return out


def taints_with(existing: Iterable[Any] | None, key: str, value: str, effect: str) -> list[dict[str, Any]]:
    """``existing`` taints plus ``key=value:effect``; a taint with the same key and effect is
    replaced (its value updated), every other taint is kept in order."""
    kept = [_taint_dict(t) for t in existing or []]
    kept = [t for t in kept if not (t.get("key") == key and t.get("effect") == effect)]
    return kept + [{"key": key, "value": value, "effect": effect}]


def taints_without(existing: Iterable[Any] | None, key: str) -> list[dict[str, Any]]:
    """``existing`` taints minus every taint with ``key`` (any effect)."""
    return [t for t in (_taint_dict(t) for t in existing or []) if t.get("key") != key]


def _skip_reason(pod: Any) -> str | None:
    meta = pod.metadata
    if MIRROR_ANNOTATION in (meta.annotations or {}):
        return "mirror pod"
    if any(ref.kind == "DaemonSet" for ref in meta.owner_references or []):
        return "DaemonSet pod"
    if meta.deletion_timestamp is not None:
        return "already terminating"
    if pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
        return f"finished ({pod.status.phase})"
    return None


def evictable_pods(pods: Iterable[Any]) -> tuple[list[Any], list[tuple[Any, str]]]:
    """Split ``pods`` (``V1Pod``) into (to evict, [(skipped pod, why)]) the way ``kubectl drain
    --ignore-daemonsets --force`` does (see the module docstring)."""
    evict, skipped = [], []
    for pod in pods:
        why = _skip_reason(pod)
        if why is None:
            evict.append(pod)
        else:
            skipped.append((pod, why))
    return evict, skipped


def eviction_body(pod: Any) -> Any:
    """The ``policy/v1`` Eviction of ``pod`` (a ``V1Eviction`` naming it)."""
    from kubernetes import client

    return client.V1Eviction(
        api_version="policy/v1", kind="Eviction",
        metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace),
    )


def _pod_name(pod: Any) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


# -- the node condition (pure builders) -------------------------------------------------------

def _flat(text: str) -> str:
    """``text`` on one line without the entry separator ``;`` (control characters and runs of
    white space become one space), cut to :data:`MAX_ENTRY_TEXT` characters."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).replace(";", ",").split())
    return flat if len(flat) <= MAX_ENTRY_TEXT else flat[: MAX_ENTRY_TEXT - 3] + "..."


def condition_entry(action: RemediationAction) -> str:
    """The entry of ``action`` in the condition message, without its ``;``: ``ErrorCode:<cause
    code>``, the target GPU as ``GPU:<index> PCI:<bus id> GPU_UUID:<uuid>`` (those it has), the
    action's reason (else its cause code; one line, no ``;``) and ``(faultstream <action>
    <action id>, verdict <attribution id>)``. The same action always gives the same entry."""
    parts = [f"ErrorCode:{_flat(action.cause_code)}"] if action.cause_code else []
    gpu = action.target.gpu
    if gpu is not None:
        parts += ([f"GPU:{gpu.index}"] if gpu.index is not None else []) + (
            [f"PCI:{gpu.pci_bus_id}"] if gpu.pci_bus_id else []) + ([f"GPU_UUID:{gpu.uuid}"] if gpu.uuid else [])
    text = _flat(action.reason or action.cause_code)
    parts.append(f"{text} (faultstream {action.action} {action.action_id}, verdict {_flat(action.attribution_id)})".lstrip())
    return " ".join(parts)


def condition_entries(message: str | None) -> list[str]:
    """The entries of a condition ``message`` (split on ``;``, empty ones dropped); none for an
    empty message or :data:`NO_HEALTH_FAILURES`."""
    if not message or message == NO_HEALTH_FAILURES:
        return []
    return [e for e in message.split(";") if e.strip()]


def _k8s_time(ns: int) -> str:
    """UTC ns -> the API's time text (RFC 3339, whole seconds, ``Z``)."""
    return dt.datetime.fromtimestamp(ns // 1_000_000_000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition_of(conditions: Iterable[Any] | None, type_: str) -> dict[str, Any] | None:
    """The condition of ``type_`` among ``conditions`` (``V1NodeCondition`` or API dicts) as
    ``{"status", "lastTransitionTime"}`` (the time as the API's text), or None."""
    for c in conditions or []:
        if not isinstance(c, dict):
            c = {"type": c.type, "status": c.status, "lastTransitionTime": c.last_transition_time}
        if c.get("type") == type_:
            since = c.get("lastTransitionTime")
            if isinstance(since, dt.datetime):
                since = since.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            return {"status": c.get("status"), "lastTransitionTime": since}
    return None


def condition_patch(conditions: Iterable[Any] | None, type_: str, entries: list[str], at_ns: int) -> dict[str, Any]:
    """The strategic merge patch of ``nodes/<name>/status`` that sets condition ``type_`` given
    the node's current ``conditions`` (``V1NodeCondition`` objects or API dicts): ``"True"``,
    ``<type>IsNotHealthy`` and the ``entries`` joined, each ended by ``;`` (the oldest dropped
    beyond :data:`MAX_CONDITION_MESSAGE` characters), or, with no entries, ``"False"``,
    ``<type>IsHealthy``, :data:`NO_HEALTH_FAILURES`. ``lastHeartbeatTime`` is ``at_ns`` (UTC
    ns); ``lastTransitionTime`` too when the status changes, else the current one."""
    while entries and sum(len(e) + 1 for e in entries) > MAX_CONDITION_MESSAGE:
        entries = entries[1:]
    status = "True" if entries else "False"
    now = _k8s_time(at_ns)
    before = _condition_of(conditions, type_)
    since = before["lastTransitionTime"] if before and before["status"] == status and before["lastTransitionTime"] else now
    return {"status": {"conditions": [{
        "type": type_, "status": status,
        "reason": f"{type_}IsNotHealthy" if entries else f"{type_}IsHealthy",
        "message": "".join(f"{e};" for e in entries) if entries else NO_HEALTH_FAILURES,
        "lastHeartbeatTime": now, "lastTransitionTime": since,
    }]}}


# -- the executor --------------------------------------------------------------------------------


class _Failed(Exception):
    """A non-transient failure; the message is the detail."""


class KubernetesExecutor:
    """Remediation through the Kubernetes API (see the module docstring).

    ``api_client``: a ``kubernetes.client.ApiClient`` (default: from ``KUBECONFIG`` or
    in-cluster). ``taint_only``: only taint, never cordon or evict. ``taint_key``: the taint's
    key. ``node_condition``: the node condition type set on cordon/drain and cleared on resume
    (CamelCase, at most 63 characters; None: none). ``drain_timeout_s``: how long a drain waits
    for evicted pods to go (0: do not wait). ``attempts``, ``retry_wait_s``,
    ``retry_max_wait_s``: retries of transient API failures. Raises ValueError for a
    ``node_condition`` that is not CamelCase."""

    name = "kubernetes"

    def __init__(self, api_client: Any = None, taint_only: bool = False,
                 taint_key: str = "faultstream.io/remediation", *, node_condition: str | None = REMEDIATION_CHECK,
                 drain_timeout_s: float = 0.0, attempts: int = 3, retry_wait_s: float = 1.0,
                 retry_max_wait_s: float = 10.0):
        if node_condition is not None and not _CONDITION_TYPE.match(node_condition):
            raise ValueError(f"node_condition {node_condition!r}: CamelCase letters and digits, at most 63")
        self._api_client = api_client
        self.taint_only = taint_only
        self.taint_key = taint_key
        self.node_condition = node_condition
        self.drain_timeout_s = drain_timeout_s
        self.attempts = attempts
        self.retry_wait_s = retry_wait_s
        self.retry_max_wait_s = retry_max_wait_s
        self._core = None

    # -- client -----------------------------------------------------------------------------

    def core(self) -> Any:
        """The ``CoreV1Api`` (configuration loaded on first use); raises ``_Failed``."""
        if self._core is not None:
            return self._core
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        api = self._api_client
        if api is None:
            # KUBECONFIG read now, not when the kubernetes package was imported (its default)
            path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
            try:
                api = config.new_client_from_config(config_file=path)
            except (ConfigException, OSError) as kube_exc:
                cfg = client.Configuration()
                try:
                    config.load_incluster_config(client_configuration=cfg)
                except ConfigException as cluster_exc:
                    raise _Failed(f"no Kubernetes configuration: kubeconfig: {kube_exc}; "
                                  f"in-cluster: {cluster_exc}") from cluster_exc
                api = client.ApiClient(cfg)
            self._api_client = api
        self._core = client.CoreV1Api(api)
        return self._core

    def _call(self, what: str, fn, *, ok_status: tuple[int, ...] = ()) -> Any:
        """``fn()`` with transient failures retried; returns its value, or None for an
        ApiException whose status is in ``ok_status``. Raises ``_Failed`` (message names
        ``what``) or ``TransientError`` when retries ran out."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config.config_exception import ConfigException
        from urllib3.exceptions import HTTPError as Urllib3Error

        def once():
            try:
                return fn()
            except ApiException as exc:
                if exc.status in ok_status:
                    return None
                message = _api_message(exc)
                if exc.status == 429 and "disruption budget" in message.lower():
                    raise _PdbBlocked(message) from exc
                if exc.status in (409, 429, 0) or (exc.status or 0) >= 500:
                    raise TransientError(f"{what}: HTTP {exc.status} {message}") from exc
                raise _Failed(f"{what}: HTTP {exc.status} {message}") from exc
            except Urllib3Error as exc:
                raise TransientError(f"{what}: {type(exc).__name__}: {exc}") from exc
            except (ConfigException, OSError, ValueError) as exc:
                # credentials that cannot be refreshed, unreadable certificates, an answer the
                # client cannot deserialise: operational, not worth retrying
                raise _Failed(f"{what}: {type(exc).__name__}: {exc}") from exc

        return retrying(once, attempts=self.attempts, wait_s=self.retry_wait_s,
                        max_wait_s=self.retry_max_wait_s)

    # -- planning -------------------------------------------------------------------------------

    def check(self, action: RemediationAction) -> str | None:
        """Why this executor refuses ``action``'s target (not a valid node name, not a
        Kubernetes node name), or None."""
        problem = target_problem(action)
        host = action_host(action)
        if problem is None and host is not None and node_name_problem(host):
            problem = f"target {shown(host)} is not a Kubernetes node name: {node_name_problem(host)}"
        return f"{REFUSED.format(name=self.name)}: {problem}" if problem else None

    def _taint_cmd(self, host: str, value: str, effect: str) -> str:
        return f"kubectl taint nodes {host} {self.taint_key}={value}:{effect} --overwrite"

    def plan(self, action: RemediationAction) -> list[str]:
        """The ``kubectl`` equivalents ``execute(action)`` would run (evictions not listed: they
        depend on the pods found)."""
        host = action_host(action)
        if not host or action.action not in ("cordon", "drain") or self.check(action):
            return []
        if self.taint_only:
            effect = "NoExecute" if action.action == "drain" else "NoSchedule"
            return [self._taint_cmd(host, action.action_id, effect)] + self._condition_cmd(host, True)
        cmds = [f"kubectl cordon {host}",
                f"kubectl annotate node {host} {CORDONED_BY}={action.action_id} --overwrite",
                self._taint_cmd(host, action.action_id, "NoSchedule")] + self._condition_cmd(host, True)
        if action.action == "drain":
            cmds.append(f"kubectl drain {host} --ignore-daemonsets --delete-emptydir-data --force")
        return cmds

    def plan_resume(self, host: str, reason: str) -> list[str]:
        """The ``kubectl`` equivalents ``resume(host)`` would run ([] for an invalid name)."""
        if node_name_problem(host):
            return []
        return [f"kubectl taint nodes {host} {self.taint_key}-",
                f"kubectl uncordon {host}  # only if annotated {CORDONED_BY}",
                f"kubectl annotate node {host} {CORDONED_BY}-"] + self._condition_cmd(host, False)

    def _condition_cmd(self, host: str, failing: bool) -> list[str]:
        """The request line of setting (``failing``) or clearing the node condition ([] without one)."""
        if self.node_condition is None:
            return []
        c = self.node_condition
        return [f"PATCH /api/v1/nodes/{host}/status condition {c}="
                + (f"True reason {c}IsNotHealthy" if failing else f"False reason {c}IsHealthy")]

    # -- steps ---------------------------------------------------------------------------------

    def _set_taints(self, host: str, change) -> list[dict[str, Any]]:
        """Read the node, apply ``change(taints) -> taints`` and write the list back with the
        read ``resourceVersion`` (409 on a concurrent change: retried from the read)."""
        core = self.core()

        def once():
            node = core.read_node(host)
            new = change(node.spec.taints)
            body = {"metadata": {"resourceVersion": node.metadata.resource_version},
                    "spec": {"taints": new}}
            core.patch_node(host, body, _content_type=MERGE_PATCH)
            return new

        return self._call(f"taint node {host}", once)

    def _set_condition(self, host: str, change: Callable[[list[str]], list[str]], at_ns: int, *,
                       only_existing: bool = False) -> bool:
        """Read the node, apply ``change(entries) -> entries`` to the entries of its condition
        :attr:`node_condition` and write the condition (:func:`condition_patch`) to the status
        subresource with the read ``resourceVersion`` (409: retried from the read).
        ``only_existing``: do nothing when the node has no such condition. Returns whether it
        wrote."""
        core = self.core()
        kind = self.node_condition

        def once() -> bool:
            node = core.read_node(host)
            conditions = (node.status.conditions if node.status is not None else None) or []
            current = next((c for c in conditions if c.type == kind), None)
            if current is None and only_existing:
                return False
            body = condition_patch(conditions, kind, change(condition_entries(current.message if current else None)), at_ns)
            body["metadata"] = {"resourceVersion": node.metadata.resource_version}
            core.patch_node_status(host, body, _content_type=STRATEGIC_MERGE_PATCH)
            return True

        return bool(self._call(f"set node condition {kind} of {host}", once))

    def _mark(self, host: str, action: RemediationAction, commands: list[str]) -> str | None:
        """Add ``action``'s entry to the node condition; returns why it could not be set, or None."""
        if self.node_condition is None:
            return None
        entry = condition_entry(action)
        commands += self._condition_cmd(host, True)
        try:
            self._set_condition(host, lambda entries: entries if entry in entries else [*entries, entry],
                                action.updated_at or action.created_at)
        except (_Failed, TransientError) as exc:
            return str(exc)
        return None

    def _taint(self, host: str, action_id: str, effect: str) -> None:
        self._set_taints(host, lambda taints: taints_with(taints, self.taint_key, action_id, effect))

    def _cordon(self, host: str, action_id: str) -> None:
        core = self.core()
        self._call(f"cordon node {host}",
                   lambda: core.patch_node(host, cordon_patch(action_id), _content_type=MERGE_PATCH))

    def _evict(self, host: str, commands: list[str]) -> tuple[list[str], list[str], list[str]]:
        """Evict every evictable pod on ``host``; returns (evicted, blocked by a PDB, skipped
        descriptions). Raises ``_Failed``/``TransientError`` for other API failures."""
        core = self.core()
        pods = self._call(f"list pods on {host}", lambda: core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={host}")).items
        evict, skipped = evictable_pods(pods)
        evicted, blocked = [], []
        for pod in evict:
            name, ns = pod.metadata.name, pod.metadata.namespace
            commands.append(f"POST /api/v1/namespaces/{ns}/pods/{name}/eviction")
            try:
                self._call(f"evict {ns}/{name}", lambda: core.create_namespaced_pod_eviction(
                    name, ns, eviction_body(pod)), ok_status=(404,))
            except _PdbBlocked:
                blocked.append(_pod_name(pod))
                continue
            evicted.append(_pod_name(pod))
        return evicted, blocked, [f"{_pod_name(p)} ({why})" for p, why in skipped]

    def _wait_gone(self, host: str, names: list[str]) -> list[str]:
        """Poll until none of ``names`` (``ns/name``) is on ``host`` any more, for at most
        ``drain_timeout_s``; returns those still there."""
        core = self.core()
        wanted = set(names)

        def remaining() -> list[str]:
            pods = self._call(f"list pods on {host}", lambda: core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={host}")).items
            return sorted(wanted & {_pod_name(p) for p in pods})

        try:
            return Retrying(stop=stop_after_delay(self.drain_timeout_s), wait=wait_fixed(1.0),
                            retry=retry_if_result(bool))(remaining)
        except RetryError as exc:
            return exc.last_attempt.result()

    # -- the protocol -----------------------------------------------------------------------------

    def execute(self, action: RemediationAction) -> ExecutionResult:
        """Carry out ``action`` (see the module docstring); never raises for an operational
        failure."""
        host = action_host(action)
        commands: list[str] = []
        unmarked: str | None = None  # why the node condition could not be set

        def result(ok: bool, detail: str) -> ExecutionResult:
            if unmarked:
                ok, detail = False, f"{detail}; node condition not set: {unmarked}"
            log.log(logging.INFO if ok else logging.WARNING, "kubernetes %s %s: %s", action.action,
                    host, detail, extra={"action_id": action.action_id, "action": action.action,
                                         "host": host, "ok": ok, "commands": list(commands)})
            return ExecutionResult(ok=ok, detail=detail, executor=self.name, commands=list(commands))

        if action.action == "notify":
            return result(True, "notify: nothing to do on Kubernetes")
        if action.action not in SUPPORTED:
            return result(False, UNSUPPORTED.format(name=self.name) + f": {action.action}")
        refused = self.check(action)
        if refused:
            return result(False, refused)
        if not host:
            return result(False, f"{action.action} needs a target host")
        try:
            if self.taint_only:
                effect = "NoExecute" if action.action == "drain" else "NoSchedule"
                commands.append(self._taint_cmd(host, action.action_id, effect))
                self._taint(host, action.action_id, effect)
                unmarked = self._mark(host, action, commands)
                return result(True, f"{host} tainted {self.taint_key}={action.action_id}:{effect}")
            plan = self.plan(action)
            commands.extend(plan[:2])
            self._cordon(host, action.action_id)
            commands.append(plan[2])
            self._taint(host, action.action_id, "NoSchedule")
            unmarked = self._mark(host, action, commands)
            if action.action == "cordon":
                return result(True, f"{host} cordoned and tainted "
                                    f"{self.taint_key}={action.action_id}:NoSchedule")
            commands.append(plan[-1])
            evicted, blocked, skipped = self._evict(host, commands)
            summary = (f"{host} cordoned; {len(evicted)} pods evicted"
                       + (f", {len(skipped)} skipped ({', '.join(skipped[:5])}"
                          f"{', ...' if len(skipped) > 5 else ''})" if skipped else ""))
            if blocked:
                return result(False, "eviction blocked by PodDisruptionBudget: "
                                     + ", ".join(blocked) + f" ({summary}; node stays cordoned)")
            if self.drain_timeout_s > 0 and evicted:
                left = self._wait_gone(host, evicted)
                if left:
                    return result(False, f"{summary}; still on the node after "
                                         f"{self.drain_timeout_s:g} s: {', '.join(left)}")
                summary += ", all gone"
            return result(True, summary)
        except (_Failed, TransientError, _PdbBlocked) as exc:
            return result(False, str(exc))

    def resume(self, host: str, reason: str) -> ExecutionResult:
        """Remove faultstream's taint and, if faultstream cordoned ``host``, uncordon it; clear
        the node condition (``"False"``, :data:`NO_HEALTH_FAILURES`) when the node has it;
        never raises for an operational failure."""
        invalid = node_name_problem(host)
        commands = [] if invalid else [f"kubectl taint nodes {host} {self.taint_key}-"]

        def result(ok: bool, detail: str) -> ExecutionResult:
            log.log(logging.INFO if ok else logging.WARNING, "kubernetes resume %s: %s", shown(host),
                    detail, extra={"host": host, "reason": reason, "ok": ok, "commands": list(commands)})
            return ExecutionResult(ok=ok, detail=detail, executor=self.name, commands=list(commands))

        if invalid:
            return result(False, f"{REFUSED.format(name=self.name)}: {shown(host)} is not a Kubernetes node "
                                 f"name: {invalid}")

        try:
            core = self.core()
            self._set_taints(host, lambda taints: taints_without(taints, self.taint_key))
            node = self._call(f"read node {host}", lambda: core.read_node(host))
            annotations = node.metadata.annotations or {}
            if annotations.get(CORDONED_BY):
                commands += [f"kubectl uncordon {host}", f"kubectl annotate node {host} {CORDONED_BY}-"]
                self._call(f"uncordon node {host}",
                           lambda: core.patch_node(host, uncordon_patch(), _content_type=MERGE_PATCH))
                ok, detail = True, (f"{host} taint {self.taint_key} removed, uncordoned "
                                    f"(cordoned by {annotations[CORDONED_BY]})")
            elif node.spec.unschedulable:
                ok, detail = False, (f"{host} taint {self.taint_key} removed but the node stays cordoned: it was "
                                     f"not cordoned by faultstream (no {CORDONED_BY} annotation)")
            else:
                ok, detail = True, f"{host} taint {self.taint_key} removed; node schedulable"
            # faultstream's reason is gone either way: its condition is cleared (a person's cordon stays)
            if self.node_condition is not None:
                clear = self._condition_cmd(host, False)
                if self._set_condition(host, lambda entries: [], time.time_ns(), only_existing=True):
                    commands += clear
                    detail += f"; condition {self.node_condition} cleared"
            return result(ok, detail)
        except (_Failed, TransientError, _PdbBlocked) as exc:
            return result(False, str(exc))


class _PdbBlocked(Exception):
    """HTTP 429 on an eviction: a PodDisruptionBudget forbids it right now."""


def _api_message(exc: Any) -> str:
    """The ``message`` of a Kubernetes Status body, else the reason phrase."""
    import json

    try:
        body = json.loads(exc.body or "")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except (TypeError, ValueError):
        pass
    return str(exc.reason or "")
