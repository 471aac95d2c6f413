"""Remediation in the stream: the Faust agents that take verdicts, commands and certifications
in and publish guarded actions and their lifecycle.

Three modules, so the logic is tested without Kafka:

* :mod:`streams.remediation_runner` -- :class:`~streams.remediation_runner.RemediationRunner`,
  Kafka-free: one :class:`correlators.remediation.RemediationEngine` (the pure engine:
  proposals, guards, lifecycle) plus the executors of :class:`sinks.executors.ExecutorSettings`
  and a clock.
* :mod:`streams.remediation_inputs` -- decoding and authentication of the records the agents
  read (commands, scheduler workload records); a failure names the dead-letter reason.
* this module -- :func:`attach_remediation`, the Faust agents, table and timer around one
  runner per cluster; :class:`RemediationSettings`; the internal topic
  (:func:`remediation_topic_spec`).

Data flow in the worker::

    <prefix>.attributions (every verdict, any scope)   -- agent remediation_attributions --\\
    <prefix>.remediation-commands (approve/reject/...) -- agent remediation_commands ------+
    <prefix>.certifications (NVCRE, dcgmi diag, ...)   -- agent remediation_certifications -+
    scheduler workload records (the ingest stage)      -- {"kind": "workload"} ------------+
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
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Awaitable, Callable

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from correlators.remediation import Policy, RemediationEngine, load_policy
from correlators.remediation.guards import GuardSettings
from schemas.bundle import TopologySpec
from schemas.records import Attribution, Certification, RemediationAction, RemediationCommand, canonical_json
from schemas.wire import encode_record
from sinks.executors import ExecutionResult, ExecutorSettings
from streams.command_auth import CommandKeySettings
from schemas.deadletter import reason_of
from streams.remediation_inputs import CommandInvalid, decode_command
from streams.remediation_runner import RemediationRunner

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
    the batch ingest stage (:func:`streams.remediation_inputs.allocation_message`).

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
            value, headers = encode_record(record)
            await remediations_out.send(key=record.action_id.encode(), value=value, headers=headers)
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
                # the report is lost (worker stopping, broker gone): the action leaves ``running``,
                # so the tick records a lost execution after lost_after_s; a resume is re-run
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
            cert = Certification.model_validate(payload["certification"])
            stale: list[str] = []
            records = runner.handle_certification(cert, stale)
            for reason in stale:
                await dead_letter("agent.remediation", f"certification not applied: {reason}",
                                  canonical_json(cert).encode(), message)
            return records
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
                await dead_letter("agent.remediation", f"processing error: {type(exc).__name__}: {reason_of(exc)}",
                                  original, item.message)

    # -- feeders: decode, validate, re-key by cluster ----------------------------------------------

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
            await route(att.scope.cluster, {"kind": "attribution", "attribution": json.loads(original)})

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
            await route(cmd.cluster, {"kind": "command", "command": cmd.model_dump(mode="json"), "received_at": now,
                                      "origin": origin_of(item.message, original)})

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
