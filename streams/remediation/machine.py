"""One cluster's remediation as a keyed state machine (:class:`correlators.keyed.Keyed`) of the
``remediation`` channel (key: cluster).

:class:`RemediationMachine` applies one typed message (:data:`schemas.messages.RemediationMessage`)
to the cluster's :class:`~streams.remediation.runner.RemediationRunner` and returns effects:
``Publish("remediations", action_id, record)`` for every transition, ``Execute`` for every
executor call to start (an action that became executable: ``executed``; a node to return to
service: ``resumed``; the driver runs it off the stream and sends its result back as an
:class:`~schemas.messages.ExecutedMessage`), and ``DeadLetter`` for a command that cannot apply,
a certification that changes nothing, or a parked command that expired. Times come from the
runner's clock (UTC ns); the stream's agent (:mod:`streams.remediation.agent`) and the
broker-free tests drive it alike.
"""

from __future__ import annotations

from typing import Any, Callable

from correlators.keyed import DeadLetter, Effect, Execute, Publish
from schemas.messages import (
    AllocationMessage,
    CertificationInMessage,
    CommandInMessage,
    ExecutedMessage,
    TickMessage,
    VerdictInMessage,
)
from schemas.records import RemediationAction, canonical_json
from sinks.executors import ExecutionResult
from streams.remediation.runner import RemediationRunner

SOURCE = "agent.remediation"


class RemediationMachine:
    """The remediation of ``cluster`` (see the module docstring).

    ``runner``: the cluster's runner (its state is the machine's: :meth:`to_state`);
    ``running``: the ``(cluster, action_id)`` executor calls in flight in this process, shared
    with the driver (a call not in it after ``lost_after_s`` is recorded lost); ``refresh``:
    called with the runner before a verdict is applied, returns the runner to use (the driver
    rebuilds it when the cluster's topology changed); ``count``: called with each command's
    outcome (a metric)."""

    def __init__(self, cluster: str, runner: RemediationRunner, *, running: set[tuple[str, str]],
                 lost_after_s: float, refresh: Callable[[RemediationRunner], RemediationRunner] | None = None,
                 count: Callable[[str], None] | None = None) -> None:
        self.cluster = cluster
        self.runner = runner
        self.running = running
        self.lost_after_s = lost_after_s
        self.refresh = refresh or (lambda runner: runner)
        self.count = count or (lambda outcome: None)
        self._handlers = {VerdictInMessage: self._verdict, CommandInMessage: self._command,
                          AllocationMessage: self._allocation, CertificationInMessage: self._certification,
                          ExecutedMessage: self._executed, TickMessage: self._tick}

    def to_state(self) -> dict[str, Any]:
        """The runner's state (JSON data)."""
        return self.runner.to_state()

    def apply(self, message: Any, now: float = 0.0, original: bytes | None = None) -> list[Effect]:
        """One message (``original``: its bytes on the wire, for a rejected command's dead
        letter); then every executor call now due. Returns dead letters, executions to start,
        then the transition records. Raises ``KeyError`` for a message of another type,
        ``ValueError`` (``pydantic.ValidationError``) for an executor result that does not
        validate."""
        letters: list[Effect] = []
        records = self._handlers[type(message)](message, letters, original)
        executes, started = self._start_work()
        return letters + executes + [Publish("remediations", r.action_id, r) for r in records + started]

    def _mine(self) -> set[str]:
        return {aid for c, aid in self.running if c == self.cluster}

    def _start_work(self) -> tuple[list[Effect], list[RemediationAction]]:
        """The executions due (``executing`` records first) and the nodes to return to service."""
        records, jobs = self.runner.start_due()
        out: list[Effect] = [Execute(self.cluster, "executed", job) for job in jobs]
        busy = self._mine() | {job.action_id for job in jobs}
        out += [Execute(self.cluster, "resumed", rjob) for rjob in self.runner.due_resumes(busy)]
        return out, records

    # -- one handler per message type: the transition records --------------------------------

    def _verdict(self, m: VerdictInMessage, letters: list[Effect], _: bytes | None) -> list[RemediationAction]:
        self.runner = self.refresh(self.runner)
        return self.runner.handle_attribution(m.attribution)

    def _command(self, m: CommandInMessage, letters: list[Effect], original: bytes | None) -> list[RemediationAction]:
        # decided at this worker's time of receipt, never the command's own "at"
        result = self.runner.apply_command(m.command, origin=m.origin, at=m.received_at)
        self.count(result.outcome)
        if result.outcome == "rejected":
            o = m.origin or {}
            text = o.get("original") or (original or b"").decode("utf-8", "replace")
            letters.append(DeadLetter(SOURCE, f"command rejected: {result.detail}", text.encode(), o))
        return result.records

    def _allocation(self, m: AllocationMessage, letters: list[Effect], _: bytes | None) -> list[RemediationAction]:
        return self.runner.handle_workload(self.cluster, m.workload_id, list(m.nodes), m.at)

    def _certification(self, m: CertificationInMessage, letters: list[Effect], _: bytes | None
                       ) -> list[RemediationAction]:
        stale: list[str] = []
        records = self.runner.handle_certification(m.certification, stale)
        letters += [DeadLetter(SOURCE, f"certification not applied: {reason}",
                               canonical_json(m.certification).encode()) for reason in stale]
        return records

    def _executed(self, m: ExecutedMessage, letters: list[Effect], _: bytes | None) -> list[RemediationAction]:
        self.running.discard((self.cluster, m.action_id))
        result = ExecutionResult.model_validate(m.result)
        if m.kind == "resumed":
            return self.runner.finish_resume(m.action_id, result)
        return self.runner.finish_job(m.action_id, result, at=m.at)

    def _tick(self, m: TickMessage, letters: list[Effect], _: bytes | None) -> list[RemediationAction]:
        now = self.runner.clock()
        out = self.runner.tick(now)
        out += self.runner.fail_lost(self._mine(), self.lost_after_s, now)
        for cmd, o, reason in self.runner.expire_parked(now):
            self.count("unknown_action")
            letters.append(DeadLetter(SOURCE, reason, (o.get("original") or canonical_json(cmd)).encode(), o))
        return out
