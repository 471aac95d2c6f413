"""Remediation through NVSentinel: each action becomes a HealthEvent on its platform connector.

Where NVSentinel already runs, faultstream does not cordon or drain by itself: it reports to
NVSentinel as one more health monitor (``agent`` ``faultstream``) over the platform connector's
gRPC interface (:class:`transport.nvsentinel.PlatformConnectorClient`, service
``datamodels.PlatformConnector``), and NVSentinel's own modules act: fault-quarantine cordons the
node of a fatal event and sets the node condition named by ``checkName``, node-drainer drains it,
fault-remediation carries out the ``recommendedAction``.

==============  ===========================================================================
action          HealthEvent on ``target.host`` (``checkName`` :data:`CHECK_NAME`)
==============  ===========================================================================
cordon          ``isFatal`` true, ``CONTACT_SUPPORT``, ``drainOverrides.skip`` (no drain)
drain           ``isFatal`` true, ``CONTACT_SUPPORT`` (quarantine, then drain)
reset_gpu       ``isFatal`` true, ``COMPONENT_RESET`` with the GPU's ``GPU_UUID`` entity;
                without a UUID the reboot action (NVSentinel resets a GPU by its UUID)
reboot          ``isFatal`` true, ``reboot_action`` (``RESTART_BM``, or ``RESTART_VM``)
reprovision     ``isFatal`` true, ``REPLACE_VM``
recertify       ``isFatal`` true, ``RUN_DCGMEUD``
rma, swap_...   ``isFatal`` true, ``CONTACT_SUPPORT``
notify          nothing sent (ok)
disable_port    ``ok=False`` unsupported (NVSentinel acts on nodes, not switch ports)
resume          ``isHealthy`` true, ``isFatal`` false, ``NONE``: NVSentinel clears the
                condition and lifts its quarantine
==============  ===========================================================================

Every event carries ``errorCode`` = the action's cause code, the culprit GPU as entities
(``GPU`` index, ``PCI``, ``GPU_UUID``), ``metadata`` with the action, verdict, incident and
policy ids, ``generatedTimestamp`` = the action's ``updated_at`` (else ``created_at``), and
``processingStrategy`` (``EXECUTE_REMEDIATION``, or ``STORE_ONLY`` to have NVSentinel record
without acting). The same action gives the same event.

Failures: a call ending ``UNAVAILABLE`` / ``DEADLINE_EXCEEDED`` / ``RESOURCE_EXHAUSTED`` is retried
(``attempts``), then ``ok=False`` with the gRPC status; nothing is raised. A target that is not
a valid node name is refused without a call.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from transport.nvsentinel import ACTION_MAP, DEFAULT_SOCKET, MAX_MESSAGE, PlatformConnectorClient, PlatformConnectorError
from correlators.remediation.targets import node_name_problem, shown
from schemas.records import RemediationAction
from schemas.utc import format_utc
from sinks.executors.base import (
    REFUSED,
    REMEDIATION_CHECK,
    UNSUPPORTED,
    ExecutionResult,
    action_host,
    target_problem,
)

__all__ = ["CHECK_NAME", "NVSentinelExecutor", "action_health_event", "resume_health_event"]

log = logging.getLogger("faultstream.executor.nvsentinel")

#: ``checkName`` of faultstream's remediation events: the node condition NVSentinel sets
#: (:data:`sinks.executors.base.REMEDIATION_CHECK`, the one the kubernetes executor sets too).
CHECK_NAME = REMEDIATION_CHECK
AGENT = "faultstream"
_UNSUPPORTED = frozenset({"disable_port"})


def _entities(action: RemediationAction) -> list[dict[str, str]]:
    g = action.target.gpu
    if g is None:
        return []
    out = []
    if g.index is not None:
        out.append({"entityType": "GPU", "entityValue": str(g.index)})
    if g.pci_bus_id:
        out.append({"entityType": "PCI", "entityValue": g.pci_bus_id})
    if g.uuid:
        out.append({"entityType": "GPU_UUID", "entityValue": g.uuid})
    return out


def action_health_event(action: RemediationAction, *, reboot_action: str = "RESTART_BM",
                        processing_strategy: str = "EXECUTE_REMEDIATION") -> dict[str, Any]:
    """The HealthEvent (protojson object, :mod:`transport.nvsentinel`) that asks NVSentinel to
    carry out ``action`` (the mapping: module docstring). Raises ValueError for an action without
    a target host or one NVSentinel cannot carry out (``disable_port``, ``notify``)."""
    host = action_host(action)
    if not host:
        raise ValueError(f"{action.action} has no target host")
    if action.action in _UNSUPPORTED or action.action == "notify":
        raise ValueError(f"{action.action} is not an NVSentinel action")
    entities = _entities(action)
    recommended = reboot_action if action.action == "reboot" else ACTION_MAP[action.action]
    if recommended == "COMPONENT_RESET" and not any(e["entityType"] == "GPU_UUID" for e in entities):
        recommended = reboot_action
    message = (f"faultstream remediation {action.action} of {host}: {action.reason or action.cause_code} "
               f"[action {action.action_id}, verdict {action.attribution_id}]")
    metadata = {"faultstream_action_id": action.action_id, "faultstream_action": action.action,
                "faultstream_attribution_id": action.attribution_id, "faultstream_policy_rule": action.policy_id}
    if action.incident_id:
        metadata["faultstream_incident_id"] = action.incident_id
    if action.cluster:
        metadata["faultstream_cluster"] = action.cluster
    event: dict[str, Any] = {
        "version": 1, "agent": AGENT, "componentClass": "GPU" if entities else "INFRASTRUCTURE",
        "checkName": CHECK_NAME, "isFatal": True, "isHealthy": False, "message": message[:MAX_MESSAGE],
        "recommendedAction": recommended, "errorCode": [action.cause_code] if action.cause_code else [],
        "entitiesImpacted": entities, "metadata": metadata,
        "generatedTimestamp": format_utc(action.updated_at or action.created_at), "nodeName": host,
        "processingStrategy": processing_strategy,
    }
    if action.action == "cordon":
        event["drainOverrides"] = {"force": False, "skip": True}
    return event


def resume_health_event(host: str, reason: str, at_ns: int, *,
                        processing_strategy: str = "EXECUTE_REMEDIATION") -> dict[str, Any]:
    """The healthy HealthEvent (protojson object) that returns ``host`` to service (``at_ns``:
    its ``generatedTimestamp``, UTC ns)."""
    return {
        "version": 1, "agent": AGENT, "componentClass": "INFRASTRUCTURE", "checkName": CHECK_NAME,
        "isFatal": False, "isHealthy": True, "message": f"faultstream: {host} back in service: {reason}"[:MAX_MESSAGE],
        "recommendedAction": "NONE", "errorCode": [], "entitiesImpacted": [], "metadata": {},
        "generatedTimestamp": format_utc(at_ns), "nodeName": host, "processingStrategy": processing_strategy,
    }


class NVSentinelExecutor:
    """Remediation by HealthEvents to NVSentinel's platform connector (module docstring).

    ``target``: the platform connector's gRPC address (default
    :data:`transport.nvsentinel.DEFAULT_SOCKET`). ``reboot_action``: ``RESTART_BM`` or
    ``RESTART_VM``. ``store_only``: send with ``processingStrategy`` ``STORE_ONLY``.
    ``timeout_s`` (per call), ``attempts``, ``retry_wait_s``, ``retry_max_wait_s``: see
    :class:`~transport.nvsentinel.PlatformConnectorClient`."""

    name = "nvsentinel"

    def __init__(self, target: str = DEFAULT_SOCKET, *, reboot_action: str = "RESTART_BM", store_only: bool = False,
                 timeout_s: float = 10.0, attempts: int = 3, retry_wait_s: float = 0.5,
                 retry_max_wait_s: float = 5.0) -> None:
        if reboot_action not in ("RESTART_BM", "RESTART_VM"):
            raise ValueError(f"reboot_action {reboot_action!r}: RESTART_BM or RESTART_VM")
        self.target = target
        self.reboot_action = reboot_action
        self.strategy = "STORE_ONLY" if store_only else "EXECUTE_REMEDIATION"
        self.client = PlatformConnectorClient(target, timeout_s=timeout_s, attempts=attempts,
                                              retry_wait_s=retry_wait_s, retry_max_wait_s=retry_max_wait_s)

    def _line(self, event: dict[str, Any]) -> str:
        return (f"HealthEventOccurredV1 {self.target} nodeName={event['nodeName']} checkName={event['checkName']} "
                f"isFatal={str(event['isFatal']).lower()} isHealthy={str(event['isHealthy']).lower()} "
                f"recommendedAction={event['recommendedAction']} processingStrategy={event['processingStrategy']}")

    def _problem(self, action: RemediationAction) -> str | None:
        if action.action in _UNSUPPORTED or (action.action != "notify" and not action_host(action)):
            return UNSUPPORTED.format(name=self.name) + f": {action.action}" + (
                "" if action_host(action) else " without a target host")
        problem = target_problem(action)
        return f"{REFUSED.format(name=self.name)}: {problem}" if problem else None

    def plan(self, action: RemediationAction) -> list[str]:
        """The call :meth:`execute` would make ([] for notify or a refused action)."""
        if action.action == "notify" or self._problem(action):
            return []
        return [self._line(action_health_event(action, reboot_action=self.reboot_action,
                                               processing_strategy=self.strategy))]

    def plan_resume(self, host: str, reason: str) -> list[str]:
        """The call :meth:`resume` would make ([] for an invalid node name)."""
        if node_name_problem(host):
            return []
        return [self._line(resume_health_event(host, reason, 0, processing_strategy=self.strategy))]

    def _send(self, event: dict[str, Any], what: str, extra: dict) -> ExecutionResult:
        commands = [self._line(event)]
        try:
            self.client.send([event])
        except PlatformConnectorError as exc:
            log.warning("nvsentinel %s: %s", what, exc, extra=extra)
            return ExecutionResult(ok=False, detail=str(exc), executor=self.name, commands=commands)
        detail = (f"{event['nodeName']}: HealthEvent {event['checkName']} "
                  + (f"fatal, {event['recommendedAction']}" if event["isFatal"] else "healthy")
                  + " accepted by NVSentinel")
        log.info("nvsentinel %s: %s", what, detail, extra=extra)
        return ExecutionResult(ok=True, detail=detail, executor=self.name, commands=commands)

    def execute(self, action: RemediationAction) -> ExecutionResult:
        """Send ``action``'s HealthEvent; never raises for an operational failure."""
        if action.action == "notify":
            return ExecutionResult(ok=True, detail="notify: nothing to send to NVSentinel", executor=self.name)
        problem = self._problem(action)
        if problem:
            return ExecutionResult(ok=False, detail=problem, executor=self.name)
        event = action_health_event(action, reboot_action=self.reboot_action, processing_strategy=self.strategy)
        return self._send(event, f"{action.action} {action_host(action)}",
                          {"action_id": action.action_id, "action": action.action, "host": action_host(action)})

    def resume(self, host: str, reason: str) -> ExecutionResult:
        """Send the healthy event for ``host``; never raises for an operational failure."""
        invalid = node_name_problem(host)
        if invalid:
            return ExecutionResult(ok=False, executor=self.name,
                                   detail=f"{REFUSED.format(name=self.name)}: {shown(host)}: {invalid}")
        return self._send(resume_health_event(host, reason, time.time_ns(), processing_strategy=self.strategy),
                          f"resume {host}", {"host": host, "reason": reason})
