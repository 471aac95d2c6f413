"""The Kafka-free remediation driver: :class:`RemediationRunner`.

One :class:`correlators.remediation.RemediationEngine` (the pure engine: proposals, guards,
lifecycle) plus the executors of :class:`sinks.executors.ExecutorSettings` and a clock.
``handle_attribution`` / ``handle_workload`` / ``handle_command`` / ``handle_certification``
feed the engine; :meth:`RemediationRunner.run_due` starts every executable action, calls its
cluster's executor, records the result and returns certified nodes to service (``resume``).
The same steps exist split in three (:meth:`~RemediationRunner.start_due`,
:meth:`~RemediationRunner.run_job`, :meth:`~RemediationRunner.finish_job`) so the stream
(:mod:`streams.remediation.agent`) runs the executor in a thread and records its result later, in
stream context. :meth:`~RemediationRunner.to_state` / :meth:`~RemediationRunner.from_state`
round-trip everything (JSON-native) through the worker's changelogged table.

A command for an action the engine does not know yet is parked (``command_wait_s``) and applied
when the proposal arrives; an execution whose worker died is recorded ``failed`` after
``lost_after_s`` (:meth:`~RemediationRunner.fail_lost`) and never run again. Times are UTC ns.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

from correlators.remediation import (
    TERMINAL,
    LifecycleError,
    Policy,
    RemediationEngine,
    UnknownActionError,
)
from correlators.remediation.guards import GuardSettings
from correlators.timetext import NS
from schemas.bundle import TopologySpec
from schemas.records import Attribution, Certification, RemediationAction, RemediationCommand
from sinks.executors import DryRunExecutor, ExecutionResult, Executor, ExecutorSettings

__all__ = ["RemediationRunner", "CommandOutcome", "CommandRejected", "Job", "ResumeJob"]

log = logging.getLogger("faultstream.remediation")

STATE_FORMAT = 1
#: Rounds of :meth:`RemediationRunner.run_due`: each round may make the next step of a chain
#: executable (a reboot after its drain); a policy chain is never this long.
MAX_ROUNDS = 8


class CommandRejected(ValueError):
    """A command that cannot apply: it names an action in a state the command does not fit
    (approving an expired, rejected or cancelled action; rejecting a running one)."""


CommandOutcomeKind = Literal["applied", "duplicate", "parked", "rejected"]


@dataclass
class CommandOutcome:
    """What a command did. ``outcome``: ``applied`` (``records`` are its transitions),
    ``duplicate`` (the same command again, or the action already carries that decision: no
    transition), ``parked`` (the action is not known yet: the command waits for it),
    ``rejected`` (it cannot apply; ``detail`` says why)."""

    records: list[RemediationAction]
    outcome: CommandOutcomeKind
    detail: str = ""


@dataclass
class Job:
    """One started execution: the ``executing`` record, the executor that carries it out (a
    :class:`~sinks.executors.DryRunExecutor` for a ``dry_run``-mode action) and when it
    started (UTC ns, wall clock)."""

    action: RemediationAction
    executor: Executor
    started_at: int

    @property
    def action_id(self) -> str:
        return self.action.action_id


@dataclass
class ResumeJob:
    """A node to return to service: the held ``done`` record of a certification-gated action,
    its ``host`` and the ``reason`` given to the executor."""

    record: RemediationAction
    host: str
    reason: str
    executor: Executor

    @property
    def action_id(self) -> str:
        return self.record.action_id


@dataclass
class _Parked:
    command: RemediationCommand
    received_at: int
    origin: dict[str, Any] = field(default_factory=dict)


def _safe_call(executor: Executor, fn: Callable[[], ExecutionResult], what: str) -> ExecutionResult:
    """``fn()``; an exception (an executor bug, an unexpected client error) becomes an
    ``ok=False`` result naming it, so the action is recorded failed, never lost."""
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001 -- any executor failure must become a result
        log.exception("%s executor raised during %s", getattr(executor, "name", "?"), what)
        return ExecutionResult(ok=False, detail=f"executor raised {type(exc).__name__}: {exc}",
                               executor=getattr(executor, "name", "unknown"))
    if not isinstance(result, ExecutionResult):
        return ExecutionResult(ok=False, detail=f"executor returned {type(result).__name__}, not an ExecutionResult",
                               executor=getattr(executor, "name", "unknown"))
    return result


def _with_commands(result: ExecutionResult) -> str:
    """The result's detail, plus the commands a real executor ran (the dry run's detail names
    them already)."""
    if result.commands and result.executor != "dry_run":
        return f"{result.detail} [ran: {' ; '.join(result.commands)}]"
    return result.detail


class RemediationRunner:
    """One engine, its executors and a clock: the Kafka-free remediation driver.

    ``engine``: the :class:`RemediationEngine` (its state is the runner's, see
    :meth:`to_state`). ``executors``: which executor acts on which cluster
    (:class:`ExecutorSettings`; a cluster without an entry is dry-run); an action whose mode is
    ``dry_run`` always goes to a :class:`DryRunExecutor` (wrapping the cluster's executor, so it
    logs the exact command it would run). ``clock``: wall-clock UTC ns -- the time of starts,
    executor reports, expiry (:meth:`tick`) and command parking. ``command_wait_s``: how long a
    command for an unknown action is kept (seconds).

    The held ``done`` record of a node returned to service carries the resume's outcome in its
    ``result`` (``...; slurm resume: node-a01 State=IDLE``); the engine's own copy of that
    record (:meth:`RemediationEngine.get`) does not.
    """

    def __init__(self, engine: RemediationEngine, executors: ExecutorSettings, *,
                 clock: Callable[[], int] = time.time_ns, command_wait_s: float = 600.0):
        self.engine = engine
        self.executors = executors
        self.clock = clock
        self.command_wait_s = command_wait_s
        self._parked: dict[str, _Parked] = {}  # command_id -> parked command
        self._inflight: dict[str, dict[str, Any]] = {}  # action_id -> {"executor", "started_at"}
        self._resumes: dict[str, dict[str, Any]] = {}  # action_id -> {"host", "reason", "record"}
        self._dry: dict[str, Executor] = {}

    # --- executors ----------------------------------------------------------------------------

    def executor_for(self, action: RemediationAction) -> Executor:
        """The executor of ``action``: its cluster's, or a dry run of it for a ``dry_run``-mode
        action."""
        real = self.executors.executor_for(action.cluster)
        if action.mode != "dry_run" or real.name == "dry_run":
            return real
        if action.cluster not in self._dry:
            self._dry[action.cluster] = DryRunExecutor(would=real)
        return self._dry[action.cluster]

    # --- inputs -------------------------------------------------------------------------------

    def handle_attribution(self, att: Attribution) -> list[RemediationAction]:
        """Feed a verdict to the engine; then apply parked commands whose action now exists.
        Returns the transition records, in order."""
        out = self.engine.on_attribution(att)
        if self._parked:
            out += self._retry_parked()
        return out

    def handle_workload(self, cluster: str, workload_id: str, nodes: list[str], at: int) -> list[RemediationAction]:
        """Feed a workload's allocation (the scheduler's record) to the engine
        (:meth:`RemediationEngine.on_workload`): its nodes become valid targets of verdicts
        about it. Returns [] (no transition)."""
        return self.engine.on_workload(cluster, workload_id, nodes, at)

    def handle_command(self, cmd: RemediationCommand) -> list[RemediationAction]:
        """Apply a person's command (see :meth:`apply_command`); returns its transitions ([]
        for a duplicate or a parked command). Raises :class:`CommandRejected` for a command
        that cannot apply."""
        result = self.apply_command(cmd)
        if result.outcome == "rejected":
            raise CommandRejected(result.detail)
        return result.records

    def apply_command(self, cmd: RemediationCommand, *, origin: Mapping[str, Any] | None = None,
                      at: int | None = None) -> CommandOutcome:
        """Apply ``cmd``; never raises for a command that does not fit. ``origin``: where it was
        read (kept with a parked command for its dead letter: ``key``, ``topic``,
        ``partition``, ``offset``, ``original``). The decision time is ``at`` (when this worker
        received it, UTC ns) or the runner's clock -- never the command's own ``at``, which is
        only the sender's claim (checked for freshness at the edge,
        :func:`streams.remediation.inputs.decode_command`).
        Authentication happens before: this method trusts ``cmd``."""
        if not cmd.command_id:
            cmd = cmd.model_copy().with_id()
        decided = self.clock() if at is None else at
        cmd = cmd.model_copy(update={"at": decided})
        try:
            records = self.engine.on_command(cmd)
        except UnknownActionError:
            if cmd.command_id not in self._parked:
                self._parked[cmd.command_id] = _Parked(cmd, decided, dict(origin or {}))
            return CommandOutcome([], "parked", f"action {cmd.action_id} not known yet: waiting for it")
        except LifecycleError as exc:
            current = self.engine.get(cmd.action_id or "")
            return self._moot(cmd, current, exc)
        if cmd.command == "reset_breaker":  # closing a closed breaker is fine: the engine says nothing
            return CommandOutcome(records, "applied", f"circuit breaker of {cmd.cluster!r} closed by {cmd.by}: "
                                                      f"{len(records)} transitions of blocked actions")
        if not records:
            return CommandOutcome([], "duplicate", f"command {cmd.command_id} already applied")
        return CommandOutcome(records, "applied")

    @staticmethod
    def _moot(cmd: RemediationCommand, current: RemediationAction | None, exc: Exception) -> CommandOutcome:
        """A command the engine refused: a repeat of the decision the action already carries is
        a duplicate, anything else is rejected."""
        state = current.state if current else "?"
        already = {
            "approve": {"approved", "executing", "done", "failed"},
            "reject": {"rejected"},
            "cancel": {"cancelled"},
        }.get(cmd.command, set())
        if current is not None and state in already and (cmd.command != "approve" or current.decision is not None):
            by = f" by {current.decision.by}" if current.decision else ""
            return CommandOutcome([], "duplicate", f"{cmd.command} of {cmd.action_id}: already {state}{by}")
        return CommandOutcome([], "rejected", f"{cmd.command} of {cmd.action_id} by {cmd.by} rejected: "
                                              f"the action is {state} ({exc})")

    def _retry_parked(self) -> list[RemediationAction]:
        out: list[RemediationAction] = []
        for cid, parked in sorted(self._parked.items(), key=lambda kv: (kv[1].command.at, kv[0])):
            if self.engine.get(parked.command.action_id or "") is None:
                continue
            del self._parked[cid]
            result = self.apply_command(parked.command, at=parked.received_at)
            if result.outcome == "rejected":
                log.warning("parked command %s: %s", cid, result.detail)
            out += result.records
        return out

    def expire_parked(self, now: int | None = None) -> list[tuple[RemediationCommand, dict[str, Any], str]]:
        """Drop parked commands older than ``command_wait_s``; returns ``(command, origin,
        reason)`` for each, for the dead-letter topic."""
        now = self.clock() if now is None else now
        gone = []
        for cid, parked in list(self._parked.items()):
            if now - parked.received_at >= self.command_wait_s * NS:
                del self._parked[cid]
                gone.append((parked.command, parked.origin,
                             f"unknown remediation action {parked.command.action_id!r}: no proposal for it "
                             f"within {self.command_wait_s:g} s ({parked.command.command} by {parked.command.by})"))
        return gone

    def parked(self) -> list[RemediationCommand]:
        """Commands waiting for their action, oldest first."""
        return [p.command for p in sorted(self._parked.values(), key=lambda p: p.received_at)]

    def handle_certification(self, cert: Certification, stale: list[str] | None = None) -> list[RemediationAction]:
        """Feed a certification to the engine. Progress records (certification failed: the node
        stays out) are returned; a ``done`` record that returns a node to service
        (:meth:`RemediationEngine.resume_host`) is held until the node was resumed
        (:meth:`run_due`, or :meth:`due_resumes` + :meth:`finish_resume`). ``stale`` receives
        why it could not apply to an action awaiting it
        (:meth:`RemediationEngine.on_certification`)."""
        out: list[RemediationAction] = []
        for record in self.engine.on_certification(cert, stale):
            host = self.engine.resume_host(record)
            if host:
                self._resumes[record.action_id] = {
                    "host": host, "reason": f"faultstream {record.action_id}: {record.result}",
                    "record": record.model_dump(mode="json"),
                }
            else:
                out.append(record)
        return out

    def tick(self, now: int | None = None) -> list[RemediationAction]:
        """The engine's expiry and pruning at wall-clock ``now`` (UTC ns, default the clock)."""
        return self.engine.tick(self.clock() if now is None else now)

    # --- execution ----------------------------------------------------------------------------

    def start_due(self) -> tuple[list[RemediationAction], list[Job]]:
        """Start every executable action (``approved -> executing``, recorded before anything
        runs). Returns the ``executing`` records and the jobs to run."""
        records: list[RemediationAction] = []
        jobs: list[Job] = []
        for action in self.engine.executable():
            executor = self.executor_for(action)
            now = self.clock()
            try:
                started = self.engine.on_started(action.action_id, executor=executor.name, at=now)
            except (LifecycleError, UnknownActionError) as exc:
                log.warning("cannot start %s: %s", action.action_id, exc)
                continue
            if not started:
                continue
            records += started
            self._inflight[action.action_id] = {"executor": executor.name, "started_at": now}
            jobs.append(Job(action=started[-1], executor=executor, started_at=now))
        return records, jobs

    @staticmethod
    def run_job(job: Job) -> ExecutionResult:
        """Run ``job``'s executor (blocking; safe in a thread). Never raises."""
        return _safe_call(job.executor, lambda: job.executor.execute(job.action), f"execute {job.action_id}")

    def finish_job(self, action_id: str, result: ExecutionResult, at: int | None = None) -> list[RemediationAction]:
        """Record an executor's result (``at``: when it finished, UTC ns, default now):
        ``done``, ``failed`` with the detail, or "awaiting certification". [] for a report of
        an action no longer held or already ended."""
        self._inflight.pop(action_id, None)
        at = self.clock() if at is None else at
        try:
            return self.engine.on_execution(action_id, ok=result.ok, detail=_with_commands(result),
                                            executor=result.executor, at=at)
        except (LifecycleError, UnknownActionError) as exc:
            log.warning("execution result of %s not recorded: %s", action_id, exc)
            return []

    def inflight(self) -> dict[str, int]:
        """action_id -> start time (UTC ns) of every execution started and not reported."""
        return {aid: v["started_at"] for aid, v in self._inflight.items()}

    def fail_lost(self, running: set[str], lost_after_s: float, now: int | None = None) -> list[RemediationAction]:
        """Record ``failed`` every execution started more than ``lost_after_s`` ago that no
        executor of this process is running (``running``: action ids) -- its worker died. The
        action is never re-executed: a person checks the node."""
        now = self.clock() if now is None else now
        out: list[RemediationAction] = []
        for aid, info in list(self._inflight.items()):
            if aid in running or now - info["started_at"] < lost_after_s * NS:
                continue
            detail = (f"outcome unknown: the worker stopped while the {info['executor']} executor ran "
                      f"(started at {info['started_at']}); check the node, then cancel or redo by hand")
            out += self.finish_job(aid, ExecutionResult(ok=False, detail=detail, executor=info["executor"]), at=now)
        return out

    def due_resumes(self, running: set[str] = frozenset()) -> list[ResumeJob]:  # type: ignore[assignment]
        """Nodes to return to service (held ``done`` records), except those ``running``."""
        jobs = []
        for aid, info in self._resumes.items():
            if aid in running:
                continue
            record = RemediationAction.model_validate(info["record"])
            jobs.append(ResumeJob(record=record, host=info["host"], reason=info["reason"],
                                  executor=self.executor_for(record)))
        return jobs

    @staticmethod
    def run_resume(job: ResumeJob) -> ExecutionResult:
        """Call ``job``'s executor's ``resume`` (blocking; safe in a thread). Never raises."""
        return _safe_call(job.executor, lambda: job.executor.resume(job.host, job.reason), f"resume {job.host}")

    def finish_resume(self, action_id: str, result: ExecutionResult) -> list[RemediationAction]:
        """The held ``done`` record of ``action_id`` with the resume's outcome appended to its
        ``result``; [] if none is held (a repeated report)."""
        info = self._resumes.pop(action_id, None)
        if info is None:
            return []
        record = RemediationAction.model_validate(info["record"])
        if result.ok:
            note = f"{result.executor} resume: {_with_commands(result)}"
        else:
            note = (f"{result.executor} resume FAILED: {_with_commands(result)}; the node is still out of "
                    f"service: return {info['host']} to service by hand")
            log.error("resume of %s for %s failed: %s", info["host"], action_id, result.detail)
        return [record.model_copy(update={"result": f"{record.result}; {note}"})]

    def run_due(self) -> list[RemediationAction]:
        """Synchronously: return certified nodes to service, then start, execute and record
        every executable action (repeating while a chain's next step becomes executable).
        Returns every record, in order. An executor exception or ``ok=False`` ends the action
        ``failed`` with the detail; nothing is lost."""
        out: list[RemediationAction] = []
        for rjob in self.due_resumes():
            out += self.finish_resume(rjob.action_id, self.run_resume(rjob))
        for _ in range(MAX_ROUNDS):
            started, jobs = self.start_due()
            out += started
            if not jobs:
                break
            for job in jobs:
                out += self.finish_job(job.action_id, self.run_job(job))
        return out

    # --- state --------------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """Everything to rebuild this runner (JSON-native): the engine's state, parked
        commands, executions in flight and held resumes."""
        return {
            "format": STATE_FORMAT,
            "engine": self.engine.to_state(),
            "parked": {cid: {"command": p.command.model_dump(mode="json"), "received_at": p.received_at,
                             "origin": p.origin} for cid, p in self._parked.items()},
            "inflight": {k: dict(v) for k, v in self._inflight.items()},
            "resumes": {k: dict(v) for k, v in self._resumes.items()},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], policy: Policy, executors: ExecutorSettings, *,
                   topology: TopologySpec | None = None, fleet_size: int | Mapping[str, int] | None = None,
                   fleet_nodes: Any = None, settings: GuardSettings | None = None,
                   clock: Callable[[], int] = time.time_ns, command_wait_s: float = 600.0) -> "RemediationRunner":
        """Rebuild a runner from :meth:`to_state` output. Raises ``ValueError`` for an unknown
        format."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"remediation runner state format {state.get('format')!r}, expected {STATE_FORMAT}")
        engine = RemediationEngine.from_state(state["engine"], policy, topology=topology,
                                              fleet_size=fleet_size, fleet_nodes=fleet_nodes, settings=settings)
        runner = cls(engine, executors, clock=clock, command_wait_s=command_wait_s)
        runner._parked = {
            cid: _Parked(RemediationCommand.model_validate(p["command"]), p["received_at"], dict(p.get("origin") or {}))
            for cid, p in state.get("parked", {}).items()
        }
        runner._inflight = {k: dict(v) for k, v in state.get("inflight", {}).items()}
        runner._resumes = {k: dict(v) for k, v in state.get("resumes", {}).items()}
        return runner

    def busy(self) -> bool:
        """True while anything waits on the clock: a non-terminal action, a parked command, an
        execution in flight or a held resume."""
        return bool(self._parked or self._inflight or self._resumes
                    or any(a.state not in TERMINAL for a in self.engine.actions()))
