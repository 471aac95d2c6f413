"""The generic webhook executor: hands each action to an HTTP endpoint (httpx).

``execute(action)`` sends::

    POST <url>
    Content-Type: application/json
    Idempotency-Key: <action_id>-<sequence>
    <headers given to the executor>

    <schemas.records.canonical_json(action)>

The body is the action's canonical JSON (sorted keys, compact, UTF-8 -- the bytes its id is
computed from and the value on the ``remediations`` topic), so the receiver can validate it with
the ``RemediationAction`` JSON Schema (``schemas/json``). The idempotency key is stable for one
lifecycle transition of one action: a retry of the same transition carries the same key and a
receiver that honours the header (IETF draft ``Idempotency-Key`` HTTP header field) acts once.

``resume(host, reason)`` sends ``{"kind": "resume", "host": ..., "reason": ...}`` (canonical
JSON) to the same URL with ``Idempotency-Key: resume-<hash of host and reason>``.

Outcome: a 2xx response is ``ok=True`` (detail ``HTTP 202``, plus the start of the body). HTTP
408, 425, 429 and 5xx responses, timeouts and connection errors are transient: retried with
exponential back-off (tenacity, ``attempts`` tries in all), then ``ok=False`` with the last
status and the first :data:`BODY_EXCERPT` characters of the body, or the connection error.
Other statuses (400, 401, 404, 409, 422, ...) and an unusable URL (no scheme, invalid host) are
not retried: ``ok=False`` at once.
Nothing is raised.

A target that is not a valid node name (``sinks.executors.base.target_problem``) is refused
(``ok=False``) without a request: the receiver may act on ``target.host``.
"""

from __future__ import annotations

import logging
from typing import Mapping

import httpx

from schemas.records import RemediationAction, canonical_json, content_id
from correlators.remediation.targets import node_name_problem, shown
from sinks.executors.base import REFUSED, ExecutionResult, TransientError, retrying, target_problem

__all__ = ["WebhookExecutor", "BODY_EXCERPT", "idempotency_key"]

log = logging.getLogger("faultstream.executor.webhook")

#: Characters of a response body kept in ``detail``.
BODY_EXCERPT = 200
#: Statuses worth retrying besides 5xx.
_RETRY_STATUS = {408, 425, 429}


def idempotency_key(action: RemediationAction) -> str:
    """``<action_id>-<sequence>``: one key per lifecycle transition of an action."""
    return f"{action.action_id}-{action.sequence}"


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= BODY_EXCERPT else text[:BODY_EXCERPT] + "..."


class _HttpFailure(Exception):
    """A response that is not worth retrying; the message is the detail."""


class WebhookExecutor:
    """POSTs actions to ``url`` (see the module docstring).

    ``headers``: extra request headers (e.g. ``{"Authorization": "Bearer ..."}``; never
    logged). ``timeout_s``: connect/read/write timeout of one request (seconds). ``attempts``:
    tries of a transiently failing request; ``retry_wait_s``/``retry_max_wait_s``: exponential
    wait between tries (seconds). ``verify``: TLS verification (``True``, ``False`` or a CA
    bundle path), as httpx takes it."""

    name = "webhook"

    def __init__(self, url: str, headers: Mapping[str, str] | None = None, timeout_s: float = 10.0,
                 *, attempts: int = 3, retry_wait_s: float = 1.0, retry_max_wait_s: float = 10.0,
                 verify: bool | str = True):
        self.url = url
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.retry_wait_s = retry_wait_s
        self.retry_max_wait_s = retry_max_wait_s
        self.verify = verify

    def check(self, action: RemediationAction) -> str | None:
        """Why this executor refuses ``action``'s target (not a valid node name), or None."""
        problem = target_problem(action)
        return f"{REFUSED.format(name=self.name)}: {problem}" if problem else None

    def plan(self, action: RemediationAction) -> list[str]:
        """The request line ``execute(action)`` would send ([] for a refused target)."""
        if self.check(action):
            return []
        return [f"POST {self.url} Idempotency-Key: {idempotency_key(action)}"]

    def plan_resume(self, host: str, reason: str) -> list[str]:
        """The request line ``resume(host, reason)`` would send ([] for an invalid name)."""
        if node_name_problem(host):
            return []
        return [f"POST {self.url} Idempotency-Key: {self._resume_key(host, reason)}"]

    @staticmethod
    def _resume_key(host: str, reason: str) -> str:
        return "resume-" + content_id("r", host, reason).split("-", 1)[1]

    def _post_once(self, client: httpx.Client, body: bytes, key: str) -> httpx.Response:
        headers = {**self.headers, "Content-Type": "application/json", "Idempotency-Key": key}
        try:
            resp = client.post(self.url, content=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise TransientError(f"timed out after {self.timeout_s:g} s ({type(exc).__name__})") from exc
        except (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ProxyError) as exc:
            raise TransientError(f"{type(exc).__name__}: {exc}") from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # bad URL or scheme: retrying won't help
            raise _HttpFailure(f"{type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 500 or resp.status_code in _RETRY_STATUS:
            raise TransientError(f"HTTP {resp.status_code}: {_excerpt(resp.text)}")
        if not resp.is_success:
            raise _HttpFailure(f"HTTP {resp.status_code}: {_excerpt(resp.text)}")
        return resp

    def _send(self, body: bytes, key: str, what: str, extra: dict) -> ExecutionResult:
        commands = [f"POST {self.url} Idempotency-Key: {key}"]
        attempts = 0

        def once(client: httpx.Client) -> httpx.Response:
            nonlocal attempts
            attempts += 1
            return self._post_once(client, body, key)

        try:
            with httpx.Client(timeout=self.timeout_s, verify=self.verify) as client:
                resp = retrying(lambda: once(client), attempts=self.attempts,
                                wait_s=self.retry_wait_s, max_wait_s=self.retry_max_wait_s)
        except (TransientError, _HttpFailure) as exc:
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            detail = f"{what} to {self.url} failed{tries}: {exc}"
            log.warning("%s", detail, extra={**extra, "ok": False, "attempts": attempts})
            return ExecutionResult(ok=False, detail=detail, executor=self.name, commands=commands)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:  # e.g. building the client
            detail = f"{what} to {self.url} failed: {type(exc).__name__}: {exc}"
            log.warning("%s", detail, extra={**extra, "ok": False, "attempts": attempts})
            return ExecutionResult(ok=False, detail=detail, executor=self.name, commands=commands)
        detail = f"HTTP {resp.status_code}" + (f": {_excerpt(resp.text)}" if resp.text.strip() else "")
        log.info("%s %s: %s", what, self.url, detail, extra={**extra, "ok": True, "attempts": attempts})
        return ExecutionResult(ok=True, detail=detail, executor=self.name, commands=commands)

    def execute(self, action: RemediationAction) -> ExecutionResult:
        """POST the action's canonical JSON; never raises for an operational failure."""
        refused = self.check(action)
        if refused:
            log.warning("%s", refused, extra={"action_id": action.action_id, "action": action.action, "ok": False})
            return ExecutionResult(ok=False, detail=refused, executor=self.name, commands=[])
        return self._send(canonical_json(action).encode(), idempotency_key(action),
                          f"{action.action} {action.action_id}",
                          {"action_id": action.action_id, "action": action.action,
                           "sequence": action.sequence})

    def resume(self, host: str, reason: str) -> ExecutionResult:
        """POST ``{"kind": "resume", "host", "reason"}``; never raises for an operational
        failure."""
        invalid = node_name_problem(host)
        if invalid:
            detail = f"{REFUSED.format(name=self.name)}: {shown(host)} is not a valid node name: {invalid}"
            log.warning("%s", detail, extra={"action": "resume", "ok": False})
            return ExecutionResult(ok=False, detail=detail, executor=self.name, commands=[])
        body = canonical_json({"kind": "resume", "host": host, "reason": reason}).encode()
        return self._send(body, self._resume_key(host, reason), f"resume {host}",
                          {"action": "resume", "host": host})
