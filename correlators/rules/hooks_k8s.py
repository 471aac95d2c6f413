"""Code hooks of the Kubernetes / Kueue rules (``k8s.yaml``): kubectl describe blocks, pod
status YAML/JSON, node conditions and Kueue Workload conditions.

Sources: kubectl ``describe`` (kubernetes/kubectl pkg/describe/describe.go: ``Capacity:`` /
``Allocatable:`` resource lists, the ``Conditions:`` table ``Type Status LastHeartbeatTime
LastTransitionTime Reason Message``, a container's ``State: Terminated`` with ``Reason:``, ``Exit
Code:``, ``Signal:``), core/v1 ``ContainerStateTerminated`` (``exitCode``, ``signal``, ``reason``,
``message``) as YAML/JSON; Kueue ``apis/kueue/v1beta1/workload_types.go`` condition types and
reasons, messages from ``pkg/scheduler/preemption/preemption.go`` (preemptionMessage,
HumanReadablePreemptionReasons), ``pkg/controller/core/workload_controller.go`` and
``pkg/scheduler/scheduler.go`` (kueue v0.6-main, 2026-08).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from correlators.rules.code import Draft, hook

if TYPE_CHECKING:  # pragma: no cover
    from correlators.rules import Rule
    from schemas.records import Observation

# --------------------------------------------------------------------------- describe node capacity

_RESOURCE = re.compile(r"^[ \t]+(?P<name>[\w.\-/]+):[ \t]+(?P<value>\d+)\b", re.M)


@hook("k8s_gpu_capacity")
def k8s_gpu_capacity(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A ``Capacity:`` + ``Allocatable:`` block -> one ``k8s.gpu_capacity`` per GPU resource
    (``nvidia.com/gpu``, ``amd.com/gpu``, MIG ``nvidia.com/mig-*``) whose allocatable count is
    below its capacity. attrs: resource, capacity, allocatable, missing (ints). Rc-60."""
    body = obs.body or ""
    cap_at = body.find("Capacity:")
    alloc_at = body.find("\nAllocatable:")
    if cap_at < 0 or alloc_at < 0:
        return []
    cap = {m["name"]: int(m["value"]) for m in _RESOURCE.finditer(body, cap_at, alloc_at)}
    alloc = {m["name"]: int(m["value"]) for m in _RESOURCE.finditer(body, alloc_at)}
    out = []
    for name, c in cap.items():
        if not (name.endswith("/gpu") or "/mig-" in name) or name not in alloc:
            continue
        a = alloc[name]
        if a < c:
            d = Draft(type=draft.type, attributes={**draft.attributes, "resource": name, "capacity": c,
                                                    "allocatable": a, "missing": c - a})
            out.append(d)
    return out


# --------------------------------------------------------------------------- container termination

_TERM_FIELDS = re.compile(
    r"(?:^|[{,\s])\"?(?P<key>Reason|reason|Exit Code|exitCode|Signal|signal|Message|message|containerID|Container ID)\"?"
    r"\s*:\s*\"?(?P<val>[^\"\n,}]*)")
#: termination reasons that are no failure
_OK_REASONS = {"Completed"}


@hook("k8s_terminated")
def k8s_terminated(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A terminated container state (describe ``State: Terminated`` block, YAML ``terminated:``
    block, JSON ``"terminated": {...}``) -> ``k8s.pod_terminated`` with reason (OOMKilled,
    Error, ContainerCannotRun, StartError, DeadlineExceeded, ...), exit_code, signal, last
    (bool: a ``Last State``/``lastState``). Exit code 0 with reason Completed gives nothing."""
    assert match is not None
    body = obs.body or ""
    seg = body[match.start():match.end()]
    vals: dict[str, str] = {}
    for m in _TERM_FIELDS.finditer(seg):
        key = {"Reason": "reason", "Exit Code": "exitCode", "Signal": "signal", "Message": "message",
               "Container ID": "containerID"}.get(m["key"], m["key"])
        vals.setdefault(key, m["val"].strip())
    reason = vals.get("reason", "")
    code = vals.get("exitCode", "")
    exit_code = int(code) if code.lstrip("-").isdigit() else None
    if (reason in _OK_REASONS or not reason) and not exit_code:
        return []
    a = draft.attributes
    if reason:
        a["reason"] = reason
    if exit_code is not None:
        a["exit_code"] = exit_code
        if exit_code > 128:
            a["signal"] = exit_code - 128
    sig = vals.get("signal", "")
    if sig.isdigit() and int(sig):
        a["signal"] = int(sig)
    if vals.get("message"):
        a["message"] = vals["message"]
    head = seg.lstrip().lower()
    a["last"] = head.startswith("last state") or "laststate" in body[max(0, match.start() - 40):match.start()].lower()
    return [draft]


# --------------------------------------------------------------------------- node conditions

_COND_ROW = re.compile(
    r"^[ \t]+(?P<ctype>[A-Z][A-Za-z0-9_.\-]*)[ \t]+(?P<status>True|False|Unknown)[ \t]+"
    r"(?P<heartbeat>\w{3}, \d\d \w{3} \d{4} [\d:]+ [+-]\d{4}|<unknown>)[ \t]{2,}"
    r"(?P<transition>\w{3}, \d\d \w{3} \d{4} [\d:]+ [+-]\d{4}|<unknown>)[ \t]{2,}"
    r"(?P<reason>\S+)(?:[ \t]{2,}(?P<message>[^\n]*?))?[ \t]*$", re.M)
#: standard node conditions and their healthy status; any other (problem-detector style)
#: condition is healthy when False
_HEALTHY = {"Ready": "True", "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False",
            "NetworkUnavailable": "False"}


@hook("k8s_node_conditions")
def k8s_node_conditions(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``kubectl describe node`` ``Conditions:`` table -> one ``k8s.node_condition`` per
    unhealthy row (Ready False/Unknown; a pressure, NetworkUnavailable or custom condition
    True). attrs: condition, status, reason, message. Pod condition tables give nothing."""
    body = obs.body or ""
    out = []
    for m in _COND_ROW.finditer(body):
        ctype, status = m["ctype"], m["status"]
        healthy = _HEALTHY.get(ctype, "False")
        if status == healthy:
            continue
        d = Draft(type=draft.type, attributes={**draft.attributes, "condition": ctype, "status": status,
                                                "reason": m["reason"]})
        if m["message"]:
            d.attributes["message"] = m["message"]
        out.append(d)
    return out


# --------------------------------------------------------------------------- kueue

_HUMAN_PREEMPTION = {"prioritization in the ClusterQueue": "InClusterQueue",
                     "reclamation within the cohort while borrowing": "InCohortReclaimWhileBorrowing",
                     "reclamation within the cohort": "InCohortReclamation",
                     "Fair Sharing within the cohort": "InCohortFairSharing"}
#: v0.7-v0.8 ``... in the %s`` origin -> the reason Kueue set with it
_ORIGIN_PREEMPTION = {"ClusterQueue": "InClusterQueue", "cohort": "InCohort"}
#: the WorkloadPreempted condition's reasons (apis/kueue/*/workload_types.go)
_PREEMPTION_REASONS = {"InClusterQueue", "InCohort", "InCohortReclamation", "InCohortFairSharing",
                       "InCohortReclaimWhileBorrowing"}
_FIELD = re.compile(r"(?:^|[\s{,])\"?(?P<key>type|status|reason|Type|Status|Reason)\"?\s*:\s*['\"]?(?P<val>[A-Za-z]+)")
# where one condition starts: a YAML list item, a JSON object, a describe 'Last Transition Time:'
_ITEM_START = re.compile(r"^[ \t]*- |\{|^[ \t]*Last Transition Time:", re.M)
_WS = re.compile(r"\s+")


def _kueue_reason(a: dict) -> str:
    """The eviction reason (Kueue's own constant) a matched message states."""
    if a.get("migrated"):
        return "FlavorMigration"
    if a.get("preemption_reason") is not None or a.get("preemptor_uid") is not None or a.get("_preempted"):
        return "Preempted"
    if a.get("workload"):
        return "PodsReadyTimeout"
    if a.get("nodes") or a.get("tas_nodes"):
        return "NodeFailures"
    if a.get("stopped"):
        return f"{a['stopped']}Stopped"
    if a.get("check"):
        return "AdmissionCheck"
    if a.get("manager"):
        return "EvictedOnManagerCluster"
    why = _WS.sub(" ", str(a.get("deactivated") or ""))
    if "maximum execution time" in why:
        return "MaximumExecutionTimeExceeded"
    if "re-queuing retries" in why:
        return "RequeuingLimitExceeded"
    if why.lower().startswith("admission"):
        return "AdmissionCheck"
    return "Deactivated"


def _condition_segment(body: str, start: int, end: int) -> str:
    """The one condition (YAML item, JSON object, describe entry) around ``body[start:end]``."""
    s = 0
    for m in _ITEM_START.finditer(body, 0, start + 1):
        s = m.start()
    nxt = _ITEM_START.search(body, end)
    return body[s:nxt.start() if nxt else len(body)]


@hook("kueue_workload_message")
def kueue_workload_message(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A Kueue eviction message -> ``kueue.workload_condition``: reason (Kueue's eviction reason
    stated by the message: Preempted, FlavorMigration, PodsReadyTimeout, NodeFailures,
    ClusterQueueStopped, LocalQueueStopped, AdmissionCheck, MaximumExecutionTimeExceeded,
    RequeuingLimitExceeded, Deactivated, EvictedOnManagerCluster), type (the condition's
    ``type:``, else Evicted), status, condition_reason (the
    condition's own ``reason:``), preemption_reason (InClusterQueue, InCohort,
    InCohortReclamation, InCohortFairSharing, InCohortReclaimWhileBorrowing), preemptor_uid,
    message (whitespace folded). A cleared condition (``Previously: ...``) gives nothing.
    MultiKueue's ``Evicted on manager: <message>`` takes the reason of the message it wraps."""
    assert match is not None
    a = draft.attributes
    if a.pop("previously", None):
        return []
    body = obs.body or ""
    human = a.pop("human", None)
    origin = a.pop("origin", None)
    if human:
        a["preemption_reason"] = _HUMAN_PREEMPTION.get(_WS.sub(" ", human), "UNKNOWN")
    elif origin:
        a["preemption_reason"] = _ORIGIN_PREEMPTION[origin]
    if match.group(0).lstrip().startswith("Preempted"):
        a["_preempted"] = True
    if a.get("manager") and rule.pattern is not None:
        inner = rule.pattern.search(body, match.end())
        if inner is not None and not inner.group("manager"):
            for k, v in inner.groupdict().items():
                if v is not None and k not in ("human", "origin", "previously"):
                    a[k] = v
            a.pop("manager", None)
            if inner.group(0).lstrip().startswith("Preempted"):
                a["_preempted"] = True
    kind = _kueue_reason(a)
    if a.get("tas_nodes"):
        a["nodes"] = a.pop("tas_nodes")
    if a.get("nodes"):
        a["nodes"] = _WS.sub(" ", a["nodes"])
    for k in ("_preempted", "deactivated", "migrated", "stopped", "check", "manager"):
        a.pop(k, None)
    if a.get("workload"):
        a["workload"] = a["workload"].rstrip("'\",")
    fields: dict[str, str] = {}
    for m in _FIELD.finditer(_condition_segment(body, match.start(), match.end())):
        fields.setdefault(m["key"].lower(), m["val"])
    ctype, creason = fields.get("type"), fields.get("reason")
    if ctype == "Preempted" and creason in _PREEMPTION_REASONS and "preemption_reason" not in a:
        a["preemption_reason"] = creason
    a["reason"] = kind
    if creason:
        a["condition_reason"] = creason
    a["type"] = ctype or "Evicted"
    if fields.get("status"):
        a["status"] = fields["status"]
    a["message"] = _WS.sub(" ", match.group(0).strip()).replace("''", "'").rstrip("'\",")
    return [draft]


# --------------------------------------------------------------------------- pod messages, events


@hook("k8s_pod_status_message")
def k8s_pod_status_message(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """kubelet pod status messages -> ``k8s.pod_terminated`` (reason Evicted + resource or
    condition, NodeShutdown, DeadlineExceeded)."""
    a = draft.attributes
    if "reason" not in a:
        a["reason"] = "Evicted"
    return [draft]


#: Warning events that say something failed; Normal events only when they are a preemption
_FAULT_REASONS = {"FailedScheduling", "Evicted", "Preempted", "OOMKilling", "SystemOOM", "BackOff",
                  "FailedMount", "FailedAttachVolume", "NodeNotReady", "FailedCreatePodSandBox",
                  "UnexpectedAdmissionError", "EvictionThresholdMet", "NodeHasInsufficientMemory",
                  "NodeHasDiskPressure", "Rebooted", "BackoffLimitExceeded", "DeadlineExceeded",
                  "FailedKillPod", "PodFailurePolicy"}
_NORMAL_FAULTS = {"Preempted", "Evicted"}
_EVENT_RESOURCE = re.compile(r"(?:Insufficient|unavailable for|low on resource:) (?P<res>[\w.\-]+(?:/[\w.\-]+)?)")


@hook("k8s_event_row")
def k8s_event_row(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A kubectl event row -> ``k8s.event`` (event_type, reason, age, source or object,
    message, resource named by the message). Normal events other than Preempted/Evicted and
    reasons outside the failure list give nothing."""
    a = draft.attributes
    for k in ("age", "event_type", "reason"):
        v = a.pop(k + "2", None)
        if v is not None:
            a[k] = v
    reason, etype = a.get("reason", ""), a.get("event_type", "")
    if reason not in _FAULT_REASONS or (etype == "Normal" and reason not in _NORMAL_FAULTS):
        return []
    m = _EVENT_RESOURCE.search(str(a.get("message", "")))
    if m:
        a["resource"] = m["res"].rstrip(".,")
    if reason == "UnexpectedAdmissionError":
        # older kubectl prints From as "kubelet, <node>": the node whose kubelet refused the pod
        src = str(a.get("source", ""))
        if src.startswith("kubelet, ") and draft.host is None:
            draft.host = src[len("kubelet, "):].strip()
        admission(draft, str(a.get("message", "")))
    return [draft]


# --------------------------------------------------------------------------- pod admission (issue 33)
# kubelet pkg/kubelet/cm (admission_failure_handler / topologymanager, 1.1x .. 1.33):
# "Allocate failed due to %v, which is unexpected" (reason UnexpectedAdmissionError; the pod's
# status message is "Pod " + it in older kubelets, "Pod was rejected: " + it in newer); %v from
# the device manager (pkg/kubelet/cm/devicemanager/manager.go): "requested number of devices
# unavailable for %s. Requested: %d, Available: %d", "previously allocated devices are no longer
# healthy; cannot allocate unhealthy devices %s", "no healthy devices present; cannot allocate
# unhealthy devices %s", "device plugin GetPreferredAllocation rpc failed with err: %v" (the
# device plugin's own error, e.g. k8s-device-plugin "error creating nvml.Device %d: nvml: %v").
_UNAVAILABLE = re.compile(r"requested number of devices unavailable for (?P<res>[\w.\-]+(?:/[\w.\-]+)?)\. "
                          r"Requested: (?P<req>\d+), Available: (?P<avail>\d+)")
_UNHEALTHY = re.compile(r"cannot allocate unhealthy devices (?P<res>[\w.\-]+(?:/[\w.\-]+)?)")
_NVML_DEVICE = re.compile(r"nvml\.Device (?P<idx>\d+): nvml: (?P<err>[^,;\n]+)")


def admission(draft: Draft, message: str) -> None:
    """Classify a kubelet admission failure's message (see above) into ``draft``: a GPU the
    device plugin's NVML call names as failed -> ``gpu.unhealthy`` (reason nvml_error, the
    GPU's index); devices the kubelet holds unhealthy -> ``gpu.unhealthy`` (reason
    admission_unhealthy); too few devices -> ``k8s.event`` (kind devices_unavailable, requested,
    available); other texts stay ``k8s.event`` (kind other)."""
    from correlators.rules.hooks_cuda import _fill_nvml, nvml_lookup

    a = draft.attributes
    a.setdefault("reason", "UnexpectedAdmissionError")
    m = _NVML_DEVICE.search(message)
    if m:
        draft.type = "gpu.unhealthy"
        draft.gpu_index = int(m["idx"])
        a.update(kind="device_plugin_nvml", all_devices=False)
        _fill_nvml(draft, nvml_lookup(m["err"].strip()))
        a["reason"] = "nvml_error"
        a["text"] = m["err"].strip()
        return
    m = _UNHEALTHY.search(message)
    if m:
        draft.type = "gpu.unhealthy"
        a.update(reason="admission_unhealthy", resource=m["res"], all_devices=False)
        return
    m = _UNAVAILABLE.search(message)
    if m:
        a.update(kind="devices_unavailable", resource=m["res"], requested=int(m["req"]), available=int(m["avail"]))
        return
    a["kind"] = "other"


@hook("k8s_admission")
def k8s_admission(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A pod status / kubelet log line holding the admission message -> :func:`admission`."""
    admission(draft, str(draft.attributes.pop("message", "")))
    return [draft]
