"""Remediation in the stream: verdicts, commands and certifications in, guarded actions executed
and their lifecycle out (issue 5, items 3 and 4).

Two layers, so the logic is tested without Kafka:

* :class:`RemediationRunner` -- Kafka-free. One :class:`correlators.remediation.RemediationEngine`
  (the pure engine: proposals, guards, lifecycle) plus the executors of
  :class:`sinks.executors.ExecutorSettings` and a clock. ``handle_attribution`` /
  ``handle_command`` / ``handle_certification`` feed the engine; :meth:`RemediationRunner.run_due`
  starts every executable action, calls its cluster's executor and records the result, and
  returns certified nodes to service (``resume``). The same steps exist split in three
  (:meth:`~RemediationRunner.start_due`, :meth:`~RemediationRunner.run_job`,
  :meth:`~RemediationRunner.finish_job`) so the stream runs the executor in a thread and records
  its result later, in stream context.
* :func:`attach_remediation` -- the Faust agents around one runner per cluster.

Data flow in the worker::

    <prefix>.attributions (every verdict, any scope)   -- agent remediation_attributions --\\
    <prefix>.remediation-commands (approve/reject/...) -- agent remediation_commands ------+
    <prefix>.certifications (NVCRE, dcgmi diag, ...)   -- agent remediation_certifications -+
    <prefix>.observations (scheduler workload records) -- agent remediation_workloads -----+
    timer (every tick_interval_s)                      -- {"kind": "tick"} ----------------+
    executor threads                                   -- {"kind": "executed"/"resumed"} --/
        -> <app_id>-by-cluster-remediation (internal, key = cluster, JSON {"kind": ...})
        -> agent remediation: one RemediationRunner per cluster; state in the changelogged
           table ``remediation_state`` (key cluster -> runner state); the failure domains and
           node count come from the worker's global ``topology`` table (cluster -> latest
           TopologySpec, ``app.faultstream_topology``), re-read with every verdict
        -> <prefix>.remediations (compacted, key action_id): one RemediationAction per
           transition, ``sequence`` increasing

Why everything goes through the one keyed topic: Faust writes a table's changelog only while
iterating a stream, so the timer and the executor threads never touch the state -- they send a
message and the remediation agent applies it. One cluster's messages are on one partition, so
one agent instance owns a cluster's engine and applies its inputs in order.

Targets: a verdict's actions may name only nodes of the workload's allocation (the scheduler's
workload records, read from the observations topic), of the cluster's topology (the global
``topology`` table) or of ``FAULTSTREAM_REMEDIATION_FLEET_NODES``; a host named only by a log
line gets a ``notify`` (``correlators.remediation.targets``).

Commands are authenticated (``streams.command_auth``): a command without a valid HMAC-SHA256
signature of a key the worker holds (``FAULTSTREAM_COMMAND_KEYS`` / ``..._KEY_FILE``), or older
than ``FAULTSTREAM_COMMAND_MAX_AGE_S``, is dead-lettered with the reason and applies nothing;
an accepted command is decided at the worker's time of receipt, not at the command's ``at``.

Bad input (invalid JSON, a record that does not validate, a command or certification without a
cluster) goes to the dead-letter topic through the ``dead_letter`` callable and never stops an
agent. A command that cannot apply any more (approving an expired action) is dead-lettered with
the reason; a repeat of an applied decision is a no-op; a command naming an action the engine
does not know yet (the command topic and the verdicts are separate topics, so it may overtake
the proposal) waits up to ``command_wait_s`` for it, then is dead-lettered.

Executions and crashes: an action is marked ``executing`` (``on_started``, written to the
changelogged table in the same stream step) as its executor starts in a thread; if the worker
dies while the executor runs, the action is recorded ``failed`` ("outcome unknown") once
``lost_after_s`` passed since it started -- it is not run again (a second reboot is not
harmless). Only a crash in the moment between the start and the changelog write reaching Kafka
can start it again after the restart; the executors tolerate that (a drain of a drained node,
a cordon of a cordoned one, a reboot request already pending, a webhook with the same
``Idempotency-Key``). A node to be returned to
service (a passing certification) is resumed before its ``done`` record is published; resumes
interrupted by a crash are re-run (resume is idempotent: Slurm RESUME of an idle node, uncordon
of a schedulable node).

Settings (``FAULTSTREAM_REMEDIATION_*``, :class:`RemediationSettings`) and executors
(``FAULTSTREAM_EXECUTOR_CLUSTERS``, dry-run for every cluster by default) come from the
environment; ``FAULTSTREAM_REMEDIATION=false`` (``streams.settings.WorkerSettings``) turns the
whole part off.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, Literal, Mapping

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from correlators.remediation import (
    TERMINAL,
    LifecycleError,
    Policy,
    RemediationEngine,
    UnknownActionError,
    load_policy,
)
from correlators.remediation.guards import GuardSettings
from schemas.bundle import TopologySpec
from schemas.records import (
    SCHEMA_VERSION,
    Attribution,
    Certification,
    RemediationAction,
    RemediationCommand,
    canonical_json,
)
from sinks.executors import DryRunExecutor, ExecutionResult, Executor, ExecutorSettings
from streams.command_auth import CommandAuthError, CommandKeySettings, Keyring, authenticate

__all__ = [
    "RemediationSettings",
    "RemediationRunner",
    "CommandOutcome",
    "CommandRejected",
    "CommandInvalid",
    "decode_command",
    "Job",
    "ResumeJob",
    "attach_remediation",
    "remediation_topic_name",
    "remediation_topic_spec",
    "TABLE",
]

log = logging.getLogger("faultstream.remediation")

NS = 1_000_000_000
STATE_FORMAT = 1
#: The changelogged table of the remediation agent.
TABLE = "remediation_state"
#: Rounds of :meth:`RemediationRunner.run_due`: each round may make the next step of a chain
#: executable (a reboot after its drain); a policy chain is never this long.
MAX_ROUNDS = 8


class RemediationSettings(BaseSettings):
    """Remediation settings of the worker, from ``FAULTSTREAM_REMEDIATION_*``:

    ========================================  ==================================================
    variable                                  meaning (default)
    ========================================  ==================================================
    FAULTSTREAM_REMEDIATION_POLICY            policy YAML path (the packaged
                                              ``correlators/remediation/policy.yaml``)
    FAULTSTREAM_REMEDIATION_FLEET_SIZE        node count for the circuit breaker when no topology
                                              names the hosts: ``64`` (every cluster) or JSON
                                              ``{"c1": 64}`` (unset: from the topology, else the
                                              breaker fails closed)
    FAULTSTREAM_REMEDIATION_FLEET_NODES       the node names a remediation may target besides the
                                              topology's hosts and the workloads' allocations:
                                              JSON ``["node-a01", ...]`` (every cluster) or
                                              ``{"c1": [...]}``; without a fleet size the breaker
                                              counts them (unset: none)
    FAULTSTREAM_REMEDIATION_PROPOSAL_TTL_S    overrides the policy's ``guards.proposal_ttl_s``:
                                              seconds after the verdict's event time an
                                              unapproved proposal expires (replayed historical
                                              bundles need a long one)
    FAULTSTREAM_REMEDIATION_TICK_INTERVAL_S   expiry / retry timer, wall-clock seconds (5)
    FAULTSTREAM_REMEDIATION_LOST_AFTER_S      an execution whose worker died is recorded failed
                                              this long after it started, seconds (900)
    FAULTSTREAM_REMEDIATION_COMMAND_WAIT_S    how long a command for an action not proposed yet
                                              waits for it before it is dead-lettered, s (600)
    ========================================  ==================================================
    """

    model_config = SettingsConfigDict(env_prefix="FAULTSTREAM_REMEDIATION_", extra="ignore")

    policy: Path | None = None
    fleet_size: int | dict[str, int] | None = None
    fleet_nodes: list[str] | dict[str, list[str]] | None = None
    proposal_ttl_s: int | None = Field(default=None, gt=0)
    tick_interval_s: float = Field(default=5.0, gt=0)
    lost_after_s: float = Field(default=900.0, ge=0)
    command_wait_s: float = Field(default=600.0, ge=0)

    def guard_settings(self, policy: Policy) -> GuardSettings:
        """The policy's guard settings with this deployment's overrides applied."""
        if self.proposal_ttl_s is None:
            return policy.guards
        return policy.guards.model_copy(update={"proposal_ttl_s": self.proposal_ttl_s})


class CommandInvalid(ValueError):
    """A record on the commands topic that is not applied: not JSON, not a valid command, no
    cluster or action id, or not authenticated (:func:`streams.command_auth.authenticate`).
    The message is the dead-letter reason (``invalid json: ...``, ``invalid command: ...``,
    ``unauthenticated command: ...``)."""


def decode_command(raw: bytes, keyring: Keyring, now_ns: int, *, max_age_s: float = 300.0,
                   max_skew_s: float = 30.0) -> RemediationCommand:
    """Parse, validate and authenticate one record of the commands topic at the worker's clock
    ``now_ns`` (UTC ns). Returns the command (its ``command_id`` set); raises
    :class:`CommandInvalid` with the dead-letter reason."""
    try:
        data = json.loads(raw)
    except RecursionError as exc:
        raise CommandInvalid("invalid json: nested too deeply") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CommandInvalid(f"invalid json: {_first_line(exc)}") from exc
    try:
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        if data.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise ValueError(f"schema version {data.get('schema_version')!r} is not {SCHEMA_VERSION}")
        cmd = RemediationCommand.model_validate(data)
        if not cmd.cluster:
            raise ValueError("the command names no cluster (the remediation engine is sharded by "
                             "cluster; faultstream remediation fills it from the action)")
        if cmd.command != "reset_breaker" and not cmd.action_id:
            raise ValueError(f"{cmd.command} names no action_id")
    except (ValueError, ValidationError) as exc:
        raise CommandInvalid(f"invalid command: {_first_line(exc)}") from exc
    try:
        authenticate(cmd, keyring, now_ns, max_age_s=max_age_s, max_skew_s=max_skew_s)
    except CommandAuthError as exc:
        raise CommandInvalid(f"unauthenticated command: {exc}") from exc
    return cmd


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
        only the sender's claim (checked for freshness at the edge, :func:`decode_command`).
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

    def handle_certification(self, cert: Certification) -> list[RemediationAction]:
        """Feed a certification to the engine. Progress records (certification failed: the node
        stays out) are returned; a ``done`` record that returns a node to service
        (:meth:`RemediationEngine.resume_host`) is held until the node was resumed
        (:meth:`run_due`, or :meth:`due_resumes` + :meth:`finish_resume`)."""
        out: list[RemediationAction] = []
        for record in self.engine.on_certification(cert):
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


# ================================================================================================
# the stream


def remediation_topic_name(app_id: str) -> str:
    """The internal topic of the remediation agent: ``<app_id>-by-cluster-remediation``."""
    return f"{app_id}-by-cluster-remediation"


def remediation_topic_spec(settings: Any) -> Any:
    """The :class:`schemas.topics.TopicSpec` of the internal topic (``settings``: a
    ``WorkerSettings``), for ``streams.app.internal_topic_specs``."""
    from schemas.topics import TopicSpec

    return TopicSpec(
        name=remediation_topic_name(settings.app_id), key="cluster", value_schema=None,
        partitions=settings.partitions, cleanup_policy="delete",
        description="verdicts, remediation commands, certifications, topologies, timer ticks and "
                    "executor reports re-keyed by cluster for the remediation agent",
    )


#: Bytes every scheduler workload record on the observations topic holds (``format``).
WORKLOAD_MARK = b'"workload_yaml"'


def workload_payload(raw: bytes) -> dict[str, Any] | None:
    """The remediation agent's ``workload`` message for an observation that is a scheduler
    workload record (``kind`` ``scheduler_event``, ``format`` ``workload_yaml``):
    ``{"kind": "workload", "cluster", "workload_id", "nodes", "at"}`` (``at``: its end, else
    its start, UTC ns); None for any other observation. Raises ``ValueError`` /
    ``ValidationError`` for a record that does not validate."""
    from schemas.bundle import WorkloadSpec
    from schemas.records import Observation

    obs = Observation.model_validate_json(raw)
    if obs.kind != "scheduler_event" or obs.format != "workload_yaml":
        return None
    spec = WorkloadSpec.model_validate(obs.attributes["workload"])
    cluster = spec.cluster or obs.cluster
    if not cluster:
        return None
    return {"kind": "workload", "cluster": cluster, "workload_id": spec.workload_id, "nodes": sorted(spec.nodes),
            "at": spec.end_ns if spec.end_ns is not None else spec.start_ns}


DeadLetterFn = Callable[[str, str, bytes, Any], Awaitable[None]]


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


def attach_remediation(app: Any, settings: Any, *, attributions_topic: Any, dead_letter: DeadLetterFn,
                       metrics: Any) -> None:
    """Add the remediation agents, table and timer to the Faust ``app`` (see the module
    docstring); nothing when ``settings.remediation`` is false.

    ``settings``: the worker's ``WorkerSettings``; ``attributions_topic``: the app's topic
    object of ``<prefix>.attributions``; ``dead_letter(source, reason, original, message)``:
    the app's dead-letter sender (``message`` has ``key``, ``topic``, ``partition``,
    ``offset``); ``metrics``: the app's ``Metrics`` (its ``registry`` gets the remediation
    counters). Raises ``PolicyError`` / ``pydantic.ValidationError`` (both ``ValueError``) for
    a bad policy or bad settings."""
    if not getattr(settings, "remediation", True):
        return
    import faust
    from prometheus_client import Counter

    rsettings = RemediationSettings()
    auth = CommandKeySettings()
    keyring = auth.keyring()
    if not keyring:
        log.warning("remediation: no command keys (FAULTSTREAM_COMMAND_KEYS / FAULTSTREAM_COMMAND_KEY_FILE): "
                    "every remediation command will be dead-lettered")
    else:
        log.info("remediation: command keys %s, max age %g s", keyring.ids(), auth.max_age_s)
    policy = load_policy(rsettings.policy)
    guard_settings = rsettings.guard_settings(policy)
    executors = ExecutorSettings()
    enabled = executors.enabled()
    log.info("remediation: policy %s@%s, executors %s", policy.policy_id, policy.version,
             enabled or "dry-run for every cluster")

    registry = metrics.registry
    m_records = Counter("faultstream_remediation_records_total", "remediation transitions published",
                        ["state"], registry=registry)
    m_commands = Counter("faultstream_remediation_commands_total", "remediation commands by outcome",
                         ["outcome"], registry=registry)
    m_executions = Counter("faultstream_remediation_executions_total", "executor calls by result",
                           ["executor", "call", "ok"], registry=registry)

    raw = {"value_serializer": "raw", "key_serializer": "raw"}
    commands_in = app.topic(settings.topic("remediation-commands"), **raw)
    certifications_in = app.topic(settings.topic("certifications"), **raw)
    observations_in = app.topic(settings.topic("observations"), **raw)
    remediations_out = app.topic(settings.topic("remediations"), **raw)
    by_cluster = app.topic(remediation_topic_name(settings.app_id), internal=True,
                           partitions=settings.partitions, **raw)
    json_schema = faust.Schema(key_type=str, value_type=None, key_serializer="json", value_serializer="json")
    state_table = app.Table(TABLE, default=None, partitions=settings.partitions, schema=json_schema)

    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="remediation")
    runners: dict[str, RemediationRunner] = {}
    written: dict[str, str] = {}  # cluster -> canonical JSON of the state last written
    running: set[tuple[str, str]] = set()  # (cluster, action_id) executing or resuming here
    tasks: set[asyncio.Task] = set()

    async def route(cluster: str, payload: dict[str, Any]) -> None:
        await by_cluster.send(key=cluster.encode(), value=json.dumps(payload, sort_keys=True).encode())

    topologies = getattr(app, "faultstream_topology", None)  # GlobalTable cluster -> TopologySpec data
    topology_seen: dict[str, str] = {}  # cluster -> canonical JSON of the topology its engine has

    def topology_data(cluster: str) -> Any:
        return topologies.get(cluster) if topologies is not None else None

    def topology_of(cluster: str) -> TopologySpec | None:
        data = topology_data(cluster)
        topology_seen[cluster] = json.dumps(data, sort_keys=True)
        return TopologySpec.model_validate(data) if data else None

    def refresh_topology(cluster: str, runner: RemediationRunner) -> RemediationRunner:
        """Rebuild the cluster's engine when its topology changed since it was built."""
        if json.dumps(topology_data(cluster), sort_keys=True) == topology_seen.get(cluster):
            return runner
        runners[cluster] = RemediationRunner.from_state(
            runner.to_state(), policy, executors, topology=topology_of(cluster), fleet_size=rsettings.fleet_size,
            fleet_nodes=rsettings.fleet_nodes, settings=guard_settings, command_wait_s=rsettings.command_wait_s)
        return runners[cluster]

    def runner_for(cluster: str) -> RemediationRunner:
        runner = runners.get(cluster)
        if runner is None:
            state = state_table.get(cluster)
            kwargs = dict(topology=topology_of(cluster), fleet_size=rsettings.fleet_size,
                          fleet_nodes=rsettings.fleet_nodes, settings=guard_settings,
                          command_wait_s=rsettings.command_wait_s)
            if state:
                runner = RemediationRunner.from_state(state, policy, executors, **kwargs)
                written[cluster] = canonical_json(state)
            else:
                runner = RemediationRunner(
                    RemediationEngine(policy, topology=kwargs["topology"], fleet_size=rsettings.fleet_size,
                                      fleet_nodes=rsettings.fleet_nodes, settings=guard_settings),
                    executors, command_wait_s=rsettings.command_wait_s)
            runners[cluster] = runner
        return runner

    def save(cluster: str, runner: RemediationRunner) -> None:
        state = runner.to_state()
        text = canonical_json(state)
        if written.get(cluster) != text:
            state_table[cluster] = state
            written[cluster] = text

    async def publish(records: list[RemediationAction]) -> None:
        for record in records:
            m_records.labels(record.state).inc()
            await remediations_out.send(key=record.action_id.encode(), value=canonical_json(record).encode())
            log.info("remediation %s %s %s seq %d -> %s%s", record.action_id, record.action,
                     record.target.host or record.target.port or ",".join(record.target.hosts),
                     record.sequence, record.state, f" ({record.result})" if record.result else "")

    def origin_of(message: Any, original: bytes) -> dict[str, Any]:
        key = message.key
        return {"topic": message.topic, "partition": message.partition, "offset": message.offset,
                "key": bytes(key).decode("utf-8", "replace") if key else None,
                "original": original.decode("utf-8", "replace")}

    def in_thread(cluster: str, action_id: str, kind: str, call: Callable[[], ExecutionResult]) -> None:
        """Run an executor call in the pool; report its result on the keyed topic."""
        running.add((cluster, action_id))

        async def go() -> None:
            try:
                loop = asyncio.get_running_loop()
                result = await loop.run_in_executor(pool, call)
                m_executions.labels(result.executor, kind, str(result.ok).lower()).inc()
                await route(cluster, {"kind": kind, "action_id": action_id, "at": time.time_ns(),
                                      "result": result.model_dump(mode="json")})
            except BaseException:
                # the report is lost (worker stopping, broker gone): no longer "running here", so
                # the tick records a lost execution after lost_after_s; a resume is re-run
                running.discard((cluster, action_id))
                log.exception("executor report of %s (%s) not sent", action_id, kind)
                raise

        task = asyncio.ensure_future(go())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def start_work(cluster: str, runner: RemediationRunner) -> list[RemediationAction]:
        """Start due executions and resumes in threads; returns the ``executing`` records."""
        records, jobs = runner.start_due()
        for job in jobs:
            in_thread(cluster, job.action_id, "executed", lambda job=job: RemediationRunner.run_job(job))
        mine = {aid for c, aid in running if c == cluster}
        for rjob in runner.due_resumes(mine):
            in_thread(cluster, rjob.action_id, "resumed", lambda rjob=rjob: RemediationRunner.run_resume(rjob))
        return records

    async def apply(cluster: str, payload: dict[str, Any], message: Any, original: bytes) -> list[RemediationAction]:
        kind = payload.get("kind")
        runner = runner_for(cluster)
        if kind == "attribution":
            runner = refresh_topology(cluster, runner)
            return runner.handle_attribution(Attribution.model_validate(payload["attribution"]))
        if kind == "command":
            cmd = RemediationCommand.model_validate(payload["command"])
            # decided at this worker's time of receipt, never the command's own "at"
            result = runner.apply_command(cmd, origin=payload.get("origin"), at=int(payload["received_at"]))
            m_commands.labels(result.outcome).inc()
            if result.outcome == "rejected":
                o = payload.get("origin") or {}
                await dead_letter("agent.remediation", f"command rejected: {result.detail}",
                                  (o.get("original") or original.decode("utf-8", "replace")).encode(),
                                  SimpleNamespace(key=(o.get("key") or "").encode() or None, topic=o.get("topic"),
                                                  partition=o.get("partition"), offset=o.get("offset")))
            elif result.outcome != "applied":
                log.info("command %s: %s", cmd.command_id, result.detail)
            return result.records
        if kind == "workload":
            return runner.handle_workload(cluster, str(payload["workload_id"]), list(payload["nodes"]),
                                          int(payload["at"]))
        if kind == "certification":
            return runner.handle_certification(Certification.model_validate(payload["certification"]))
        if kind == "executed":
            running.discard((cluster, payload["action_id"]))
            result = ExecutionResult.model_validate(payload["result"])
            return runner.finish_job(payload["action_id"], result, at=int(payload["at"]))
        if kind == "resumed":
            running.discard((cluster, payload["action_id"]))
            return runner.finish_resume(payload["action_id"], ExecutionResult.model_validate(payload["result"]))
        if kind == "tick":
            now = time.time_ns()
            out = runner.tick(now)
            mine = {aid for c, aid in running if c == cluster}
            out += runner.fail_lost(mine, rsettings.lost_after_s, now)
            for cmd, o, reason in runner.expire_parked(now):
                m_commands.labels("unknown_action").inc()
                await dead_letter("agent.remediation", reason,
                                  (o.get("original") or canonical_json(cmd)).encode(),
                                  SimpleNamespace(key=(o.get("key") or "").encode() or None, topic=o.get("topic"),
                                                  partition=o.get("partition"), offset=o.get("offset")))
            return out
        raise ValueError(f"unknown remediation message kind {kind!r}")

    @app.agent(by_cluster)
    async def remediation(stream: Any) -> None:
        # one record at a time: Faust writes the table's changelog only inside stream iteration
        async for item in stream.events():
            original: bytes = item.value or b""
            cluster = (item.key or b"").decode("utf-8", "replace")
            try:
                payload = json.loads(original)
                records = await apply(cluster, payload, item.message, original)
                runner = runner_for(cluster)
                records += start_work(cluster, runner)
                save(cluster, runner)
                await publish(records)
            except Exception as exc:  # noqa: BLE001 -- one bad record never stops the agent
                log.exception("remediation record for cluster %r failed", cluster)
                runners.pop(cluster, None)  # reload the last good state from the table
                written.pop(cluster, None)
                await dead_letter("agent.remediation", f"processing error: {type(exc).__name__}: {_first_line(exc)}",
                                  original, item.message)

    # -- feeders: decode, validate, re-key by cluster ----------------------------------------------

    @app.agent(attributions_topic)
    async def remediation_attributions(stream: Any) -> None:
        async for item in stream.events():
            original: bytes = item.value or b""
            try:
                att = Attribution.model_validate_json(original)
            except (ValueError, ValidationError) as exc:
                await dead_letter("agent.remediation", f"invalid attribution: {_first_line(exc)}", original, item.message)
                continue
            await route(att.scope.cluster, {"kind": "attribution", "attribution": json.loads(original)})

    @app.agent(commands_in)
    async def remediation_commands(stream: Any) -> None:
        async for item in stream.events():
            original: bytes = item.value or b""
            now = time.time_ns()
            try:
                cmd = decode_command(original, keyring, now, max_age_s=auth.max_age_s, max_skew_s=auth.max_skew_s)
            except CommandInvalid as exc:
                if str(exc).startswith("unauthenticated"):
                    m_commands.labels("unauthenticated").inc()
                await dead_letter("agent.remediation", str(exc), original, item.message)
                continue
            log.info("command %s (%s by %s, key %s) accepted", cmd.command_id, cmd.command, cmd.by, cmd.key_id)
            await route(cmd.cluster, {"kind": "command", "command": cmd.model_dump(mode="json"), "received_at": now,
                                      "origin": origin_of(item.message, original)})

    @app.agent(observations_in)
    async def remediation_workloads(stream: Any) -> None:
        # the scheduler's workload records: their nodes are what a verdict about the workload
        # may target (every other observation is skipped on a byte test, never parsed)
        async for item in stream.events():
            original: bytes = item.value or b""
            if WORKLOAD_MARK not in original:
                continue
            try:
                payload = workload_payload(original)
            except (ValueError, ValidationError, KeyError, TypeError, RecursionError) as exc:
                log.debug("workload record not used for remediation targets: %s", _first_line(exc))
                continue  # the extract agent dead-letters a bad record; it is not dead-lettered twice
            if payload is not None:
                await route(payload["cluster"], payload)

    @app.agent(certifications_in)
    async def remediation_certifications(stream: Any) -> None:
        async for item in stream.events():
            original: bytes = item.value or b""
            try:
                cert = Certification.model_validate_json(original)
                if not cert.cluster:
                    raise ValueError(f"certification of {cert.host} names no cluster (the remediation engine is "
                                     "sharded by cluster): publish it with --cluster")
            except (ValueError, ValidationError) as exc:
                await dead_letter("agent.remediation", f"invalid certification: {_first_line(exc)}", original,
                                  item.message)
                continue
            await route(cert.cluster, {"kind": "certification", "certification": json.loads(original)})

    @app.timer(interval=rsettings.tick_interval_s)
    async def remediation_tick() -> None:
        if app.rebalancing or not app.tables.recovery.completed.is_set():
            return
        try:
            clusters = set(state_table.keys()) | set(runners)
            for cluster in sorted(clusters):
                runner = runners.get(cluster)
                if runner is not None and not runner.busy():
                    continue  # nothing waits on the clock (pruning happens on the next input)
                await route(cluster, {"kind": "tick"})
        except Exception:  # noqa: BLE001 -- a timer must never take the worker down
            log.exception("remediation tick failed")

    @app.on_partitions_revoked.connect
    async def on_revoked(app: Any, revoked: set, **kwargs: Any) -> None:
        # another worker may own these clusters now: reload from the table when they come back
        runners.clear()
        written.clear()
