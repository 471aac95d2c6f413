"""The dry-run executor: says exactly what it would do, does nothing.

``DryRunExecutor(would=SlurmExecutor())`` asks the wrapped executor for its plan
(:meth:`~sinks.executors.base.Executor.plan`: the ``scontrol`` argument list, the
``kubectl``-equivalent commands, the HTTP request line) and logs it; without ``would`` it
describes the action itself (``drain host=node-a01 (action act-..., seq 2)``). Nothing is run,
nothing is contacted, and the result is always ``ok=True`` with a ``detail`` starting
``dry-run:``.

Each call logs one INFO record on the ``faultstream.executor.dry_run`` logger with the
structured fields ``action_id``, ``action``, ``host``, ``sequence``, ``would`` (the wrapped
executor's name or ``None``) and ``commands`` (list of strings); with ``faultstream worker
--log-format json`` they come out as JSON keys.
"""

from __future__ import annotations

import logging

from schemas.records import RemediationAction
from sinks.executors.base import ExecutionResult, Executor, action_host, describe_action

__all__ = ["DryRunExecutor"]

log = logging.getLogger("faultstream.executor.dry_run")


class DryRunExecutor:
    """Logs what ``would`` (another executor, optional) would run; never acts. See the module
    docstring."""

    name = "dry_run"

    def __init__(self, would: Executor | None = None):
        self.would = would

    def plan(self, action: RemediationAction) -> list[str]:
        """The wrapped executor's plan, or a one-line description of the action."""
        if self.would is not None:
            return list(self.would.plan(action))
        return [describe_action(action)]

    def plan_resume(self, host: str, reason: str) -> list[str]:
        """The wrapped executor's resume plan, or ``resume host=<host>``."""
        if self.would is not None:
            return list(self.would.plan_resume(host, reason))
        return [f"resume host={host}"]

    def execute(self, action: RemediationAction) -> ExecutionResult:
        """Log the plan for ``action``; ``ok=True``, ``detail`` ``dry-run: would ...``."""
        commands = self.plan(action)
        target = self.would.name if self.would is not None else None
        what = "; ".join(commands) if commands else f"nothing ({action.action} needs no command"
        if not commands:
            what += f" on {target})" if target else ")"
        detail = f"dry-run: would {'run' if commands and target else 'do'}: {what}"
        log.info("%s", detail, extra={
            "action_id": action.action_id, "action": action.action, "host": action_host(action),
            "sequence": action.sequence, "would": target, "commands": commands,
        })
        return ExecutionResult(ok=True, detail=detail, executor=self.name, commands=commands)

    def resume(self, host: str, reason: str) -> ExecutionResult:
        """Log the plan for returning ``host`` to service; ``ok=True``."""
        commands = self.plan_resume(host, reason)
        target = self.would.name if self.would is not None else None
        detail = f"dry-run: would {'run' if target else 'do'}: " + "; ".join(commands)
        log.info("%s", detail, extra={"action": "resume", "host": host, "reason": reason,
                                      "would": target, "commands": commands})
        return ExecutionResult(ok=True, detail=detail, executor=self.name, commands=commands)
