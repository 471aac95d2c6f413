"""What every remediation executor shares: the result record, the protocol, and helpers.

An executor turns a :class:`schemas.records.RemediationAction` into side effects on a cluster
(a Slurm node drained, a Kubernetes node cordoned, a webhook called) and reports what happened
as an :class:`ExecutionResult`. Two rules hold for every executor:

* **It never raises for an operational failure** (a command that exits non-zero, a missing
  binary, an API 4xx/5xx, a timeout, a refused connection): it returns ``ok=False`` with the
  reason in ``detail``, so the caller records the failure on the action and the action is never
  lost. Only programming errors (a wrong argument type) propagate.
* **Retries of transient failures use tenacity** (:func:`retrying`), never a hand-written loop,
  and only for failures that may go away by themselves (controller unreachable, HTTP 5xx,
  connection refused); a rejected request (Slurm "Invalid node name", HTTP 4xx) is not retried.

``commands`` lists what was run or attempted (for the dry run: what would be), one
human-readable line per step in order -- the ``scontrol`` argument list, the
``kubectl``-equivalent command, the HTTP request line -- so the remediation record shows exactly
what touched the cluster; on a failure the last line is the step that failed.

**Names are checked again here.** The engine proposes actions only on known nodes
(``correlators.remediation.targets``); every executor still refuses (``ok=False``, nothing
run) a target that is not a valid node name (:func:`target_problem`) -- defence in depth
against a record written by something else on the ``remediations`` topic. Commands are argument
lists handed to ``subprocess`` or an API client, never a shell.
"""

from __future__ import annotations

import shlex
from typing import Callable, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from schemas.records import RemediationAction

__all__ = [
    "ExecutionResult",
    "Executor",
    "TransientError",
    "UNSUPPORTED",
    "retrying",
    "action_host",
    "describe_action",
    "quote_argv",
    "target_problem",
    "REFUSED",
    "REMEDIATION_CHECK",
]

T = TypeVar("T")

#: ``detail`` prefix of a result for an action the executor cannot carry out.
UNSUPPORTED = "unsupported by {name} executor"
#: ``detail`` prefix of a result for a target the executor will not touch.
REFUSED = "refused by {name} executor"
#: The node condition type under which a node taken out by faultstream's remediation says why:
#: the ``checkName`` of the nvsentinel executor's HealthEvents (NVSentinel's platform connector
#: turns a checkName into the node condition of that type) and the condition the kubernetes
#: executor sets itself, so a node reads the same whichever path took it out.
REMEDIATION_CHECK = "FaultstreamRemediation"


class ExecutionResult(BaseModel):
    """The outcome of one executor call.

    ``ok``: the side effect happened (or, for the dry run, was only described) and was
    verified where the executor can verify it. ``detail``: one line for a person -- the
    verified state on success, the reason on failure. ``executor``: the executor's
    :attr:`Executor.name` (``dry_run``, ``slurm``, ``kubernetes``, ``webhook``). ``commands``:
    what was run, in order (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ok: bool
    detail: str
    executor: str
    commands: list[str] = Field(default_factory=list)


@runtime_checkable
class Executor(Protocol):
    """A remediation executor (see the module docstring for its two rules).

    ``execute(action)`` carries out ``action.action`` on ``action.target``; ``resume(host,
    reason)`` returns a node to service after it passed certification. ``plan(action)`` and
    ``plan_resume(host, reason)`` return the ``commands`` those calls would run without running
    anything (the dry run prints them)."""

    name: str

    def execute(self, action: RemediationAction) -> ExecutionResult: ...

    def resume(self, host: str, reason: str) -> ExecutionResult: ...

    def plan(self, action: RemediationAction) -> list[str]: ...

    def plan_resume(self, host: str, reason: str) -> list[str]: ...


class TransientError(Exception):
    """Raised inside an executor for a failure worth retrying (controller unreachable, HTTP
    5xx, connection refused, timeout); :func:`retrying` retries it and the executor turns the
    last one into ``ok=False``."""


def retrying(fn: Callable[[], T], *, attempts: int, wait_s: float, max_wait_s: float,
             retry_on: tuple[type[BaseException], ...] = (TransientError,)) -> T:
    """Call ``fn()`` up to ``attempts`` times while it raises one of ``retry_on``, waiting
    exponentially (``wait_s``, ``2*wait_s``, ... capped at ``max_wait_s`` seconds) in between;
    the last exception is re-raised as is (tenacity ``reraise=True``)."""
    for attempt in Retrying(
        stop=stop_after_attempt(max(1, attempts)),
        wait=wait_exponential(multiplier=wait_s, min=wait_s, max=max_wait_s),
        retry=retry_if_exception_type(retry_on),
        reraise=True,
    ):
        with attempt:
            return fn()
    raise AssertionError("unreachable")  # pragma: no cover -- Retrying re-raises or returns


def action_host(action: RemediationAction) -> str | None:
    """The host an action acts on (``target.host``), or None (a port or a host group)."""
    return action.target.host or None


def target_problem(action: RemediationAction) -> str | None:
    """Why ``action``'s target may not reach an executor, or None: its ``host`` and every
    name in ``hosts`` must be valid node names (:func:`correlators.remediation.targets.node_name_problem`:
    no ``ALL``, hostlist expressions, lists, spaces, ``=`` or shell metacharacters, at most
    253 characters)."""
    from correlators.remediation.targets import node_name_problem, shown

    t = action.target
    for name in ([t.host] if t.host is not None else []) + list(t.hosts):
        problem = node_name_problem(name)
        if problem:
            return f"target {shown(name)} is not a valid node name: {problem}"
    return None


def describe_action(action: RemediationAction) -> str:
    """``drain host=node-a01 gpu=3 (action act-..., seq 2)`` -- for logs and dry-run details."""
    t = action.target
    parts = [action.action]
    if t.host:
        parts.append(f"host={t.host}")
    if t.gpu is not None:
        gpu = t.gpu.index if t.gpu.index is not None else (t.gpu.uuid or t.gpu.pci_bus_id)
        parts.append(f"gpu={gpu}")
    if t.port:
        parts.append(f"port={t.port}")
    if t.hosts:
        parts.append("hosts=" + ",".join(t.hosts))
    return " ".join(parts) + f" (action {action.action_id}, seq {action.sequence})"


def quote_argv(argv: list[str]) -> str:
    """An argument list as one shell-quoted line, for ``commands`` and logs (never executed
    through a shell)."""
    return shlex.join(argv)
