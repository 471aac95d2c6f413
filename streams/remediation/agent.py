"""Remediation in the stream: the Faust agents that take verdicts, commands and certifications
in and publish guarded actions and their lifecycle.

Three modules, so the logic is tested without Kafka:

* :mod:`streams.remediation.runner` -- :class:`~streams.remediation.runner.RemediationRunner`,
  Kafka-free: one :class:`correlators.remediation.RemediationEngine` (the pure engine:
  proposals, guards, lifecycle) plus the executors of :class:`sinks.executors.ExecutorSettings`
  and a clock.
* :mod:`streams.remediation.inputs` -- decoding and authentication of the records the agents
  read (commands, scheduler workload records); a failure names the dead-letter reason.
* this module -- :func:`attach_remediation`, the Faust agents, table and timer around one
  runner per cluster; :class:`RemediationSettings`; the internal topic
  (:func:`remediation_topic_spec`).

Data flow in the worker::

    <prefix>.attributions (every verdict, any scope)   -- agent remediation_attributions --\\
    <prefix>.remediation-commands (approve/reject/...) -- agent remediation_commands ------+
    <prefix>.certifications (NVCRE, dcgmi diag, ...)   -- agent remediation_certifications -+
    scheduler workload records (the ingest stage)      -- AllocationMessage ---------------+
    timer (every tick_interval_s)                      -- TickMessage ---------------------+
    executor threads                                   -- ExecutedMessage (executed/resumed) /
        -> <app_id>-by-cluster-remediation (internal, key = cluster, a typed
           schemas.messages.RemediationMessage, one handler per type)
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
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Awaitable, Callable

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from correlators.keyed import Execute, Publish
from correlators.remediation import Policy, RemediationEngine, load_policy
from correlators.remediation.guards import GuardSettings
from schemas.bundle import TopologySpec
from schemas.messages import (
    CertificationInMessage,
    CommandInMessage,
    ExecutedMessage,
    TickMessage,
    VerdictInMessage,
    message_json,
    parse_remediation_message,
)
from schemas.records import Attribution, Certification, RemediationAction, canonical_json
from schemas.wire import encode_record
from sinks.executors import ExecutorSettings
from streams.command_auth import CommandKeySettings
from schemas.deadletter import reason_of
from streams.remediation.inputs import CommandInvalid, decode_command
from streams.remediation.machine import RemediationMachine
from streams.remediation.runner import RemediationRunner

__all__ = [
    "RemediationSettings",
    "attach_remediation",
    "remediation_topic_name",
    "remediation_topic_spec",
    "TABLE",
]

log = logging.getLogger("faultstream.remediation")

#: The changelogged table of the remediation agent.
TABLE = "remediation_state"


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



DeadLetterFn = Callable[[str, str, bytes | None, Any], Awaitable[None]]


def attach_remediation(app: Any, settings: Any, *, attributions_topic: Any, dead_letter: DeadLetterFn,
                       metrics: Any) -> None:
    """Add the remediation agents, table and timer to the Faust ``app`` (see the module
    docstring); nothing when ``settings.remediation`` is false. The scheduler's workload
    records (the allocation a verdict may target) reach the agent on its internal topic from
    the batch ingest stage (:func:`streams.remediation.inputs.allocation_message`).

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
    executors = ExecutorSettings()
    log.info("remediation: policy %s@%s, executors %s", policy.policy_id, policy.version,
             executors.enabled() or "dry-run for every cluster")
    registry = metrics.registry
    counters = {
        "records": Counter("faultstream_remediation_records_total", "remediation transitions published",
                           ["state"], registry=registry),
        "commands": Counter("faultstream_remediation_commands_total", "remediation commands by outcome",
                            ["outcome"], registry=registry),
        "executions": Counter("faultstream_remediation_executions_total", "executor calls by result",
                              ["executor", "call", "ok"], registry=registry),
    }
    raw = {"value_serializer": "raw", "key_serializer": "raw"}
    by_cluster = app.topic(remediation_topic_name(settings.app_id), internal=True,
                           partitions=settings.partitions, **raw)
    json_schema = faust.Schema(key_type=str, value_type=None, key_serializer="json", value_serializer="json")
    runners = Runners(app.Table(TABLE, default=None, partitions=settings.partitions, schema=json_schema),
                      getattr(app, "faultstream_topology", None), policy, executors, rsettings)

    async def route(cluster: str, message: Any) -> None:
        """Send a typed remediation message (schemas.messages.RemediationMessage) to the cluster's engine."""
        await by_cluster.send(key=cluster.encode(), value=message_json(message))

    pool = ExecutorPool(route, counters["executions"])
    out = app.topic(settings.topic("remediations"), **raw)
    _attach_engine(app, by_cluster, runners, pool, out, dead_letter, counters, rsettings)
    _attach_feeders(app, route, attributions_topic, app.topic(settings.topic("remediation-commands"), **raw),
                    app.topic(settings.topic("certifications"), **raw), keyring, auth, dead_letter,
                    counters["commands"])

    @app.timer(interval=rsettings.tick_interval_s)
    async def remediation_tick() -> None:
        if app.rebalancing or not app.tables.recovery.completed.is_set():
            return
        try:
            for cluster in runners.waiting_on_the_clock():
                await route(cluster, TickMessage())
        except Exception:  # noqa: BLE001 -- a timer must never take the worker down
            log.exception("remediation tick failed")

    @app.on_partitions_revoked.connect
    async def on_revoked(app: Any, revoked: set, **kwargs: Any) -> None:
        # another worker may own these clusters now: reload from the table when they come back
        runners.forget()


class Runners:
    """The runner of each cluster this worker applies messages for: a cache of the
    changelogged ``table`` (cluster -> runner state), rebuilt when the cluster's topology in
    ``topologies`` (the worker's global table; None: none) changed since it was built."""

    def __init__(self, table: Any, topologies: Any, policy: Policy, executors: ExecutorSettings,
                 rsettings: RemediationSettings) -> None:
        self.table = table
        self.topologies = topologies
        self.policy = policy
        self.executors = executors
        self.rsettings = rsettings
        self.guard_settings = rsettings.guard_settings(policy)
        self.runners: dict[str, RemediationRunner] = {}
        self.written: dict[str, str] = {}  # cluster -> canonical JSON of the state last written
        self.topology_seen: dict[str, str] = {}  # cluster -> canonical JSON of the topology its engine has

    def _topology_data(self, cluster: str) -> Any:
        return self.topologies.get(cluster) if self.topologies is not None else None

    def _topology_of(self, cluster: str) -> TopologySpec | None:
        data = self._topology_data(cluster)
        self.topology_seen[cluster] = json.dumps(data, sort_keys=True)
        return TopologySpec.model_validate(data) if data else None

    def _kwargs(self, cluster: str) -> dict[str, Any]:
        r = self.rsettings
        return dict(topology=self._topology_of(cluster), fleet_size=r.fleet_size, fleet_nodes=r.fleet_nodes,
                    settings=self.guard_settings, command_wait_s=r.command_wait_s)

    def refresh(self, cluster: str, runner: RemediationRunner) -> RemediationRunner:
        """Rebuild the cluster's engine when its topology changed since it was built."""
        if json.dumps(self._topology_data(cluster), sort_keys=True) == self.topology_seen.get(cluster):
            return runner
        self.runners[cluster] = RemediationRunner.from_state(runner.to_state(), self.policy, self.executors,
                                                             **self._kwargs(cluster))
        return self.runners[cluster]

    def get(self, cluster: str) -> RemediationRunner:
        """The cluster's runner (from the cache, else the table, else new)."""
        runner = self.runners.get(cluster)
        if runner is None:
            state = self.table.get(cluster)
            kwargs = self._kwargs(cluster)
            if state:
                runner = RemediationRunner.from_state(state, self.policy, self.executors, **kwargs)
                self.written[cluster] = canonical_json(state)
            else:
                runner = RemediationRunner(
                    RemediationEngine(self.policy, topology=kwargs["topology"], fleet_size=kwargs["fleet_size"],
                                      fleet_nodes=kwargs["fleet_nodes"], settings=self.guard_settings),
                    self.executors, command_wait_s=kwargs["command_wait_s"])
            self.runners[cluster] = runner
        return runner

    def save(self, cluster: str, runner: RemediationRunner) -> None:
        """Write the runner's state to the table when it changed."""
        state = runner.to_state()
        text = canonical_json(state)
        if self.written.get(cluster) != text:
            self.table[cluster] = state
            self.written[cluster] = text

    def forget(self, cluster: str | None = None) -> None:
        """Drop the cache of ``cluster`` (None: of every cluster); it is reloaded from the table."""
        if cluster is None:
            self.runners.clear()
            self.written.clear()
        else:
            self.runners.pop(cluster, None)
            self.written.pop(cluster, None)

    def waiting_on_the_clock(self) -> list[str]:
        """The clusters whose engine may change with time alone (not loaded here, or busy)."""
        clusters = set(self.table.keys()) | set(self.runners)
        return [c for c in sorted(clusters) if c not in self.runners or self.runners[c].busy()]


class ExecutorPool:
    """Executor calls in a thread pool, each result sent back to its cluster's engine
    (``route``) as an :class:`~schemas.messages.ExecutedMessage`; ``running`` holds the
    ``(cluster, action_id)`` calls in flight; ``executions``: the counter of calls by result."""

    def __init__(self, route: Callable[[str, Any], Awaitable[None]], executions: Any) -> None:
        self.route = route
        self.executions = executions
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="remediation")
        self.running: set[tuple[str, str]] = set()
        self.tasks: set[asyncio.Task] = set()

    def start(self, effect: Execute) -> None:
        """Run an ``Execute`` effect's job (``executed``: the action; ``resumed``: a node's resume)."""
        call = RemediationRunner.run_job if effect.kind == "executed" else RemediationRunner.run_resume
        cluster, action_id, kind, job = effect.key, effect.job.action_id, effect.kind, effect.job
        self.running.add((cluster, action_id))

        async def go() -> None:
            try:
                result = await asyncio.get_running_loop().run_in_executor(self.pool, call, job)
                self.executions.labels(result.executor, kind, str(result.ok).lower()).inc()
                await self.route(cluster, ExecutedMessage(kind=kind, action_id=action_id, at=time.time_ns(),
                                                          result=result.model_dump(mode="json")))
            except BaseException:
                # the report is lost (worker stopping, broker gone): the action leaves ``running``,
                # so the tick records a lost execution after lost_after_s; a resume is re-run
                self.running.discard((cluster, action_id))
                log.exception("executor report of %s (%s) not sent", action_id, kind)
                raise

        task = asyncio.ensure_future(go())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


def _attach_engine(app: Any, by_cluster: Any, runners: Runners, pool: ExecutorPool, out: Any,
                   dead_letter: DeadLetterFn, counters: dict[str, Any], rsettings: RemediationSettings) -> None:
    """The agent of the by-cluster topic: each message through the cluster's
    :class:`~streams.remediation.machine.RemediationMachine`, its state saved, then its effects:
    dead letters, executor calls started, transitions published on ``out``."""

    async def publish(records: list[RemediationAction]) -> None:
        for record in records:
            counters["records"].labels(record.state).inc()
            value, headers = encode_record(record)
            await out.send(key=record.action_id.encode(), value=value, headers=headers)
            log.info("remediation %s %s %s seq %d -> %s%s", record.action_id, record.action,
                     record.target.host or record.target.port or ",".join(record.target.hosts),
                     record.sequence, record.state, f" ({record.result})" if record.result else "")

    async def run(effects: list[Any], message: Any, original: bytes) -> None:
        records: list[RemediationAction] = []
        for effect in effects:
            if isinstance(effect, Publish):
                records.append(effect.record)
            elif isinstance(effect, Execute):
                pool.start(effect)
            elif effect.origin is not None:
                o = effect.origin
                await dead_letter(effect.source, effect.reason, effect.original,
                                  SimpleNamespace(key=(o.get("key") or "").encode() or None, topic=o.get("topic"),
                                                  partition=o.get("partition"), offset=o.get("offset")))
            else:
                await dead_letter(effect.source, effect.reason, effect.original or original, message)
        await publish(records)

    @app.agent(by_cluster)
    async def remediation(stream: Any) -> None:
        # one record at a time: Faust writes the table's changelog only inside stream iteration
        async for item in stream.events():
            original: bytes = item.value or b""
            cluster = (item.key or b"").decode("utf-8", "replace")
            try:
                machine = RemediationMachine(cluster, runners.get(cluster), running=pool.running,
                                             lost_after_s=rsettings.lost_after_s,
                                             refresh=lambda runner, c=cluster: runners.refresh(c, runner),
                                             count=lambda outcome: counters["commands"].labels(outcome).inc())
                effects = machine.apply(parse_remediation_message(original), original=original)
                runners.save(cluster, machine.runner)
                await run(effects, item.message, original)
            except Exception as exc:  # noqa: BLE001 -- one bad record never stops the agent
                log.exception("remediation record for cluster %r failed", cluster)
                runners.forget(cluster)  # reload the last good state from the table
                await dead_letter("agent.remediation", f"processing error: {type(exc).__name__}: {reason_of(exc)}",
                                  original, item.message)


def origin_of(message: Any, original: bytes) -> dict[str, Any]:
    """Where a record was read, and its text (kept with a command for its dead letter)."""
    key = message.key
    return {"topic": message.topic, "partition": message.partition, "offset": message.offset,
            "key": bytes(key).decode("utf-8", "replace") if key else None,
            "original": original.decode("utf-8", "replace")}


def _attach_feeders(app: Any, route: Callable[[str, Any], Awaitable[None]], attributions_topic: Any,
                    commands_in: Any, certifications_in: Any, keyring: Any, auth: CommandKeySettings,
                    dead_letter: DeadLetterFn, m_commands: Any) -> None:
    """The agents that decode, validate and re-key by cluster: verdicts, commands
    (authenticated) and certifications; a bad record is dead-lettered with the reason."""

    @app.agent(attributions_topic)
    async def remediation_attributions(stream: Any) -> None:
        async for item in stream.events():
            if item.value is None:
                continue  # the tombstone after a withdrawal, which the engine has already seen
            original: bytes = item.value
            try:
                att = Attribution.model_validate_json(original)
            except (ValueError, ValidationError) as exc:
                await dead_letter("agent.remediation", f"invalid attribution: {reason_of(exc)}", original, item.message)
                continue
            await route(att.scope.cluster, VerdictInMessage(attribution=att))

    @app.agent(commands_in)
    async def remediation_commands(stream: Any) -> None:
        async for item in stream.events():
            if item.value is None:
                await dead_letter("agent.remediation", "tombstone: a command needs a value", None, item.message)
                continue
            original: bytes = item.value
            now = time.time_ns()
            try:
                cmd = decode_command(original, keyring, now, max_age_s=auth.max_age_s, max_skew_s=auth.max_skew_s)
            except CommandInvalid as exc:
                if str(exc).startswith("unauthenticated"):
                    m_commands.labels("unauthenticated").inc()
                await dead_letter("agent.remediation", str(exc), original, item.message)
                continue
            log.info("command %s (%s by %s, key %s) accepted", cmd.command_id, cmd.command, cmd.by, cmd.key_id)
            await route(cmd.cluster, CommandInMessage(command=cmd, received_at=now,
                                                      origin=origin_of(item.message, original)))

    @app.agent(certifications_in)
    async def remediation_certifications(stream: Any) -> None:
        async for item in stream.events():
            if item.value is None:
                await dead_letter("agent.remediation", "tombstone: a certification needs a value", None, item.message)
                continue
            original: bytes = item.value
            try:
                cert = Certification.model_validate_json(original)
                if not cert.cluster:
                    raise ValueError(f"certification of {cert.host} names no cluster (the remediation engine is "
                                     "sharded by cluster): publish it with --cluster")
                # a result from the future would return a node now and date every later
                # transition after it (updated_at never goes back): refused, as a command is
                ahead_s = (cert.finished_at - time.time_ns()) / 1e9
                if ahead_s > auth.max_skew_s:
                    raise ValueError(f"certification of {cert.host} finished at {cert.finished_at_utc}, "
                                     f"{ahead_s:,.0f} s after this worker's clock (more than "
                                     f"{auth.max_skew_s:g} s of skew)")
            except (ValueError, ValidationError) as exc:
                await dead_letter("agent.remediation", f"invalid certification: {reason_of(exc)}", original,
                                  item.message)
                continue
            await route(cert.cluster, CertificationInMessage(certification=cert))
