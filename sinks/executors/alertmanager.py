"""The Alertmanager executor: a remediation action as an alert for a person (API v2).

``execute(action)`` of a ``notify`` action posts one alert (:class:`sinks.alertmanager.AlertmanagerClient`, httpx with
tenacity back-off) whose label set is a function of the action alone, so the same action
posted again (a retry, a restarted worker) updates the one alert:

==============  ==============================================================
label           value
==============  ==============================================================
alertname       ``FaultstreamRemediation``
source          ``faultstream``
action_id       the action's id (stable for one incident, target and action)
verdict_id      the verdict's ``attribution_id``; ``incident`` its ``incident_id``, else the
                same (the verdict's own alert has both: they group together)
action          ``notify``, ``drain``, ...
cluster         the action's cluster (omitted when empty)
root_cause      the verdict's cause code (omitted when empty)
target_host     ``target.host``; ``target_hosts`` the sorted host list;
                ``target_gpu`` / ``target_port`` when the target names one
severity        ``warning`` for ``notify`` and ``recertify``, else ``critical``
==============  ==============================================================

Annotations: ``summary`` (what to do where), ``reason`` (the action's reason: the engine's
words, shown, never acted on), ``state``, ``policy``. ``endsAt`` is ``hold_s`` after the call:
the alert resolves by itself unless posted again. It is the ``notify`` route of
:class:`sinks.executors.settings.ClusterExecutor` (``"notify": {"kind": "alertmanager", "url":
...}``). Any other action is unsupported (``ok=False``, nothing posted): an alert carries out no
drain or reboot, and the action's record must not say it was done.
``resume(host, reason)`` posts nothing (``ok=True``): the verdict's alert resolves when the
node passes certification (:class:`sinks.alertmanager.AlertBook`, ``streams/alerts.py``).

A target that is not a valid node name is refused (``ok=False``) without a request; an
Alertmanager that stays unreachable or refuses is ``ok=False`` with the reason. Nothing is
raised for an operational failure.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Mapping

from schemas.records import RemediationAction
from schemas.utc import format_utc
from sinks.alertmanager import SOURCE, AlertmanagerClient, AlertmanagerError
from sinks.executors.base import REFUSED, UNSUPPORTED, ExecutionResult, describe_action, target_problem

__all__ = ["AlertmanagerExecutor", "action_labels"]

log = logging.getLogger("faultstream.executor.alertmanager")


def action_labels(action: RemediationAction) -> dict[str, str]:
    """The label set of ``action``'s alert (see the module docstring)."""
    t = action.target
    gpu = None
    if t.gpu is not None:
        gpu = str(t.gpu.index) if t.gpu.index is not None else (t.gpu.uuid or t.gpu.pci_bus_id)
    labels = {
        "alertname": "FaultstreamRemediation",
        "source": SOURCE,
        "action_id": action.action_id,
        "verdict_id": action.attribution_id,
        "incident": action.incident_id or action.attribution_id,
        "action": action.action,
        "cluster": action.cluster,
        "root_cause": action.cause_code,
        "target_host": t.host or "",
        "target_hosts": ",".join(sorted(t.hosts)),
        "target_gpu": gpu or "",
        "target_port": t.port or "",
        "severity": "warning" if action.action in ("notify", "recertify") else "critical",
    }
    return {k: v for k, v in labels.items() if v}


class AlertmanagerExecutor:
    """Posts actions as alerts to the Alertmanager at ``url`` (see the module docstring).

    ``hold_s``: seconds until the alert resolves by itself; ``timeout_s``: one request's
    timeout; ``attempts``: tries of a transient failure; ``headers``: extra request headers;
    ``clock``: UTC ns now."""

    name = "alertmanager"

    def __init__(self, url: str, *, hold_s: float = 86400.0, timeout_s: float = 5.0, attempts: int = 3,
                 headers: Mapping[str, str] | None = None, verify: bool | str = True,
                 clock: Callable[[], int] = time.time_ns) -> None:
        self.url = url
        self.hold_s = hold_s
        self.clock = clock
        self._client_options = dict(timeout_s=timeout_s, attempts=attempts, headers=headers, verify=verify)

    def check(self, action: RemediationAction) -> str | None:
        """Why this executor refuses ``action``: not a ``notify``, or a target that is not a valid
        node name; None when it takes it."""
        if action.action != "notify":
            return f"{UNSUPPORTED.format(name=self.name)}: {action.action} (it only notifies)"
        problem = target_problem(action)
        return f"{REFUSED.format(name=self.name)}: {problem}" if problem else None

    def plan(self, action: RemediationAction) -> list[str]:
        """The request ``execute(action)`` would send ([] for an action it refuses)."""
        if self.check(action):
            return []
        return [f"POST {self.url.rstrip('/')}/api/v2/alerts action_id={action.action_id}"]

    def plan_resume(self, host: str, reason: str) -> list[str]:
        """Nothing: a resume posts no alert."""
        return []

    def alert(self, action: RemediationAction) -> dict:
        """The ``postableAlert`` of ``action``."""
        now = self.clock()
        summary = describe_action(action)
        annotations = {"summary": summary, "reason": action.reason, "state": action.state,
                       "policy": f"{action.policy_id}@{action.policy_version}".rstrip("@")}
        return {"labels": action_labels(action), "annotations": {k: v for k, v in annotations.items() if v},
                "startsAt": format_utc(min(action.created_at, now)),
                "endsAt": format_utc(now + int(self.hold_s * 1e9))}

    def execute(self, action: RemediationAction) -> ExecutionResult:
        """Post ``action`` as an alert; never raises for an operational failure."""
        detail = self.check(action)
        if detail:
            log.warning("%s", detail, extra={"action_id": action.action_id, "action": action.action, "ok": False})
            return ExecutionResult(ok=False, detail=detail, executor=self.name, commands=[])
        commands = self.plan(action)
        client = AlertmanagerClient(self.url, **self._client_options)
        try:
            client.post([self.alert(action)])
        except AlertmanagerError as exc:
            log.warning("%s: %s", describe_action(action), exc, extra={"action_id": action.action_id, "ok": False})
            return ExecutionResult(ok=False, detail=str(exc), executor=self.name, commands=commands)
        finally:
            client.close()
        log.info("%s: alert posted to %s", describe_action(action), self.url,
                 extra={"action_id": action.action_id, "ok": True})
        return ExecutionResult(ok=True, detail=f"alert posted to {self.url}", executor=self.name, commands=commands)

    def resume(self, host: str, reason: str) -> ExecutionResult:
        """Nothing to do (``ok=True``)."""
        return ExecutionResult(ok=True, detail="alertmanager: nothing to resume", executor=self.name, commands=[])
