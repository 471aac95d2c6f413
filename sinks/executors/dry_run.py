"""The dry-run executor: says exactly what it would do, does nothing.

``DryRunExecutor(would=SlurmExecutor())`` asks the wrapped executor for its plan
(:meth:`~sinks.executors.base.Executor.plan`: the ``scontrol`` argument list, the
``kubectl``-equivalent commands, the HTTP request line) and logs it; without ``would`` it
describes the action itself (``drain host=node-a01 (action act-..., seq 2)``). Nothing is run
and nothing is contacted. The result is ``ok=True`` with a ``detail`` starting ``dry-run:`` --
except for a target the wrapped executor would refuse (its ``check``: not a valid node name),
or, without ``would``, a target that is not a valid node name: ``ok=False``, ``dry-run: ...
would refuse: <why>``, so a dry run shows the refusal a real run would meet.

Each call logs one INFO record (WARNING for a refusal) on the ``faultstream.executor.dry_run``
logger with the structured fields ``action_id``, ``action``, ``host``, ``sequence``, ``would``
(the wrapped executor's name or ``None``), ``commands`` (list of strings, shell-quoted for
reading) and ``argv`` -- the exact argument lists the wrapped executor would hand to
``subprocess`` (its ``plan_argv``; the Slurm executor has one), else ``None``; with
``faultstream worker --log-format json`` they come out as JSON keys.
"""

from __future__ import annotations

import logging

from schemas.records import RemediationAction
from sinks.executors.base import ExecutionResult, Executor, action_host, describe_action, target_problem

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

    def plan_argv(self, action: RemediationAction) -> list[list[str]] | None:
        """The exact argument lists the wrapped executor would run (its ``plan_argv``), or
        None when it has none (an API or HTTP executor, or no wrapped executor)."""
        planner = getattr(self.would, "plan_argv", None)
        return [list(argv) for argv in planner(action)] if planner is not None else None

    def plan_resume(self, host: str, reason: str) -> list[str]:
        """The wrapped executor's resume plan, or ``resume host=<host>``."""
        if self.would is not None:
            return list(self.would.plan_resume(host, reason))
        return [f"resume host={host}"]

    def check(self, action: RemediationAction) -> str | None:
        """Why a real run would refuse ``action``'s target (the wrapped executor's ``check``,
        else :func:`~sinks.executors.base.target_problem`), or None."""
        checker = getattr(self.would, "check", None)
        if checker is not None:
            return checker(action)
        return target_problem(action)

    def execute(self, action: RemediationAction) -> ExecutionResult:
        """Log the plan for ``action``; ``ok=True``, ``detail`` ``dry-run: would ...``
        (``ok=False``, ``dry-run: ... would refuse: ...`` for a refused target)."""
        target = self.would.name if self.would is not None else None
        fields = {"action_id": action.action_id, "action": action.action, "host": action_host(action),
                  "sequence": action.sequence, "would": target}
        refused = self.check(action)
        if refused:
            detail = f"dry-run: {target or 'an executor'} would refuse: {refused}"
            log.warning("%s", detail, extra={**fields, "commands": [], "argv": []})
            return ExecutionResult(ok=False, detail=detail, executor=self.name, commands=[])
        commands = self.plan(action)
        argv = self.plan_argv(action)
        what = "; ".join(commands) if commands else f"nothing ({action.action} needs no command"
        if not commands:
            what += f" on {target})" if target else ")"
        detail = f"dry-run: would {'run' if commands and target else 'do'}: {what}"
        log.info("%s", detail, extra={**fields, "commands": commands, "argv": argv})
        return ExecutionResult(ok=True, detail=detail, executor=self.name, commands=commands)

    def resume(self, host: str, reason: str) -> ExecutionResult:
        """Log the plan for returning ``host`` to service; ``ok=True`` (``ok=False`` for a host
        that is not a valid node name)."""
        from correlators.remediation.targets import node_name_problem, shown

        target = self.would.name if self.would is not None else None
        invalid = node_name_problem(host)
        if invalid:
            detail = f"dry-run: {target or 'an executor'} would refuse: {shown(host)} is not a valid node name: {invalid}"
            log.warning("%s", detail, extra={"action": "resume", "host": host, "reason": reason, "would": target,
                                             "commands": [], "argv": []})
            return ExecutionResult(ok=False, detail=detail, executor=self.name, commands=[])
        commands = self.plan_resume(host, reason)
        planner = getattr(self.would, "plan_resume_argv", None)
        argv = [list(a) for a in planner(host, reason)] if planner is not None else None
        detail = f"dry-run: would {'run' if target else 'do'}: " + "; ".join(commands)
        log.info("%s", detail, extra={"action": "resume", "host": host, "reason": reason,
                                      "would": target, "commands": commands, "argv": argv})
        return ExecutionResult(ok=True, detail=detail, executor=self.name, commands=commands)
