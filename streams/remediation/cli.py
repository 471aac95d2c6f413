"""``faultstream remediation``: see and decide remediation actions.

* ``faultstream remediation list [--state S] [--cluster C] [--format text|json]`` -- the latest record of
  every action on the compacted ``<prefix>.remediations`` topic (the highest ``sequence`` per
  ``action_id``), as a table or JSON Lines of ``RemediationAction``.
* ``faultstream remediation show ID [--format text|json]`` -- one action: target, guards with their results,
  decision, executor result, and every transition still on the topic.
* ``faultstream remediation approve ID --by NAME --reason TEXT`` / ``reject`` / ``cancel`` --
  publish a ``RemediationCommand`` on ``<prefix>.remediation-commands`` (key = action id); the
  worker's remediation agent applies it and publishes the transition (``approved`` with
  ``decision = {by, at, reason}``, ...). ``--by`` defaults to ``$USER``; ``at`` is now (UTC ns).
* ``faultstream remediation reset-breaker --cluster C --by NAME --reason TEXT`` -- close the
  cluster's circuit breaker (blocked actions older than the policy's ``stale_after_s`` are
  expired or cancelled, never replayed).

Every command is signed (HMAC-SHA256, ``streams.command_auth``) with the key
``FAULTSTREAM_COMMAND_SIGNING_KEY`` names among ``FAULTSTREAM_COMMAND_KEYS`` /
``FAULTSTREAM_COMMAND_KEY_FILE`` (the only key when there is one); the worker holds the same
keys and dead-letters anything unsigned, badly signed or stale. Without a key the command is
not sent (exit 2). ``--reason`` must say something: an empty or blank reason is refused.

The command names the action's cluster (read from its record): the worker shards remediation
by cluster. A decision is checked against the action's latest state before it is sent
(approving an action that is not ``proposed`` is refused here); the worker checks again, so a
race ends in a dead letter naming the reason, never in a wrong transition.

Errors print one line on stderr and exit 2: an unknown action id (named), a broker that does
not answer within ``--timeout`` seconds, a topic that does not exist, invalid Kafka settings.
Kafka settings are ``KAFKA_*`` (``transport/kafka_settings.py``), ``--bootstrap`` overrides the
servers; topic names follow ``FAULTSTREAM_TOPIC_PREFIX``.
"""

from __future__ import annotations

import getpass
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Annotated, Any, Optional, get_args

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from connectors.registry import cli_fail
from schemas.records import ActionState, RemediationAction, RemediationCommand, canonical_json
from streams.terminal import JSON_ALIAS, RecordFormat, chosen_format, output_console

__all__ = ["app", "read_actions", "ActionLog", "latest", "send_command", "signed"]

app = typer.Typer(help="Remediation actions: list, show, approve, reject, cancel, reset the breaker.",
                  no_args_is_help=True)

ACTIVE = ("proposed", "approved", "executing")

BootstrapOpt = Annotated[Optional[str], typer.Option("--bootstrap", help="Kafka bootstrap servers (default: KAFKA_BOOTSTRAP_SERVERS)")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="seconds to wait for the broker and to read the topic")]
FormatOpt = Annotated[RecordFormat, typer.Option("--format", help="text: for a person; json: the latest RemediationAction records as JSON Lines")]
ByOpt = Annotated[Optional[str], typer.Option("--by", help="who decides (default: $USER)")]
def _reason(value: str) -> str:
    """``--reason`` stripped; an empty or blank reason is a usage error (exit 2)."""
    if not value.strip():
        raise typer.BadParameter("must not be empty: say why (it is recorded on the action)")
    return value.strip()


ReasonOpt = Annotated[str, typer.Option("--reason", callback=_reason, help="why (recorded on the action; not empty)")]


def _kafka(bootstrap: str | None) -> Any:
    """KafkaSettings of :func:`transport.kafka_settings.kafka_settings` (``--bootstrap``
    overriding the servers); invalid settings exit 2."""
    from transport.kafka_settings import KafkaSettingsError, kafka_settings

    try:
        return kafka_settings(bootstrap)
    except KafkaSettingsError as exc:
        cli_fail(str(exc))


def _topic(logical: str) -> str:
    from schemas.topics import catalogue

    return catalogue()[logical].name


def _ts(ns: int | None) -> str:
    """UTC ns -> ``2026-11-30T01:31:04Z`` (``-`` for None)."""
    if not ns:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ActionLog:
    """Every record of one action found on the topic, ordered by ``sequence`` (compaction may
    have removed all but the latest)."""

    records: list[RemediationAction] = field(default_factory=list)

    @property
    def latest(self) -> RemediationAction:
        return self.records[-1]


def latest(records: list[RemediationAction]) -> dict[str, ActionLog]:
    """Group records by ``action_id``: duplicates (same sequence) collapse, order by
    ``sequence``; the latest state is the highest sequence, whatever the delivery order."""
    logs: dict[str, dict[int, RemediationAction]] = {}
    for r in records:
        logs.setdefault(r.action_id, {})[r.sequence] = r
    return {aid: ActionLog([by_seq[s] for s in sorted(by_seq)]) for aid, by_seq in logs.items()}


def read_actions(kafka: Any, topic: str, timeout_s: float) -> tuple[dict[str, ActionLog], int]:
    """Read ``topic`` from the beginning to its current end (every partition's high watermark
    at the start); returns the actions (:func:`latest`) and the number of records that did not
    parse as ``RemediationAction`` (skipped). Exits 2 when the broker does not answer within
    ``timeout_s`` or the topic does not exist."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer(kafka.confluent_config() | {
        "group.id": f"faultstream-remediation-cli-{uuid.uuid4().hex}",
        "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest",
        "log_level": 0,
    })
    records: list[RemediationAction] = []
    bad = 0
    try:
        try:
            md = consumer.list_topics(topic, timeout=timeout_s)
        except KafkaException as exc:
            cli_fail(f"Kafka at {kafka.bootstrap_servers} did not answer within {timeout_s:g} s: {exc.args[0].str()}")
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            cli_fail(f"topic {topic} does not exist on {kafka.bootstrap_servers} "
                  "(faultstream topics create; is FAULTSTREAM_TOPIC_PREFIX right?)")
        pending: dict[int, int] = {}  # partition -> last offset to read
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if high > low:
                pending[p] = high - 1
        if not pending:
            return {}, 0
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(pending)])
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                cli_fail(f"reading {topic} on {kafka.bootstrap_servers}: not at its end after {timeout_s:g} s "
                      f"(partitions {sorted(pending)} left)")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.pop(msg.partition(), None)
                    continue
                cli_fail(f"reading {topic} on {kafka.bootstrap_servers}: {msg.error().str()}")
            if msg.offset() >= pending.get(msg.partition(), -1):
                pending.pop(msg.partition(), None)
            try:
                records.append(RemediationAction.model_validate_json(msg.value() or b""))
            except ValueError:
                bad += 1
    except KafkaException as exc:
        cli_fail(f"Kafka at {kafka.bootstrap_servers}: {exc.args[0].str()}")
    finally:
        consumer.close()
    return latest(records), bad


def _load(bootstrap: str | None, timeout: float) -> tuple[dict[str, ActionLog], str]:
    kafka = _kafka(bootstrap)
    topic = _topic("remediations")
    actions, bad = read_actions(kafka, topic, timeout)
    if bad:
        typer.echo(f"warning: {bad} records on {topic} are not RemediationAction records (skipped)", err=True)
    return actions, topic


def _target(a: RemediationAction) -> str:
    t = a.target
    parts = []
    if t.host:
        parts.append(t.host)
    if t.gpu is not None:
        gpu = t.gpu.index if t.gpu.index is not None else (t.gpu.pci_bus_id or t.gpu.uuid)
        parts.append(f"gpu {gpu}")
    if t.port:
        parts.append(t.port)
    if t.hosts:
        parts.append(",".join(t.hosts) if len(t.hosts) <= 3 else f"{len(t.hosts)} hosts")
    return " ".join(parts) or "-"


def _console() -> Console:
    return output_console(piped_width=160)


STATE_STYLE = {"proposed": "yellow", "approved": "cyan", "executing": "blue", "done": "green",
               "failed": "bold red", "rejected": "magenta", "expired": "dim", "cancelled": "dim"}


@app.command("list")
def list_actions(
    state: Annotated[Optional[list[str]], typer.Option("--state", help="only these states (repeatable); 'active' = proposed, approved, executing")] = None,
    cluster: Annotated[Optional[str], typer.Option("--cluster", help="only this cluster")] = None,
    fmt: FormatOpt = RecordFormat.text,
    json_alias: bool = JSON_ALIAS,
    bootstrap: BootstrapOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """The latest state of every remediation action (highest sequence per action id)."""
    json_lines = chosen_format(fmt, json_alias) is RecordFormat.json
    known = set(get_args(ActionState))
    unknown = sorted(set(state or []) - known - {"active"})
    if unknown:
        cli_fail(f"--state {', '.join(unknown)}: not a state; one of active, {', '.join(sorted(known))}")
    actions, topic = _load(bootstrap, timeout)
    wanted = {s for x in (state or []) for s in (ACTIVE if x == "active" else (x,))}
    rows = sorted((log.latest for log in actions.values()), key=lambda a: (a.created_at, a.action_id))
    rows = [a for a in rows if (not wanted or a.state in wanted) and (cluster is None or a.cluster == cluster)]
    if json_lines:
        sys.stdout.write("".join(canonical_json(a) + "\n" for a in rows))
        return
    # the id in full (show / approve need it); every text from a record is escaped: a reason
    # or a name may hold [brackets] that rich would read as markup
    table = Table(Column("action id", no_wrap=True, min_width=28), "cluster", "action", "target", "mode", "state",
                  "seq", "guards failed", "decision", "updated (UTC)", title=f"{topic}: {len(rows)} actions")
    for a in rows:
        failed = ", ".join(g.guard for g in a.guards if not g.passed) or "-"
        decision = escape(a.decision.by) if a.decision else "-"
        table.add_row(a.action_id, escape(a.cluster), a.action, escape(_target(a)), a.mode,
                      f"[{STATE_STYLE.get(a.state, '')}]{a.state}[/]", str(a.sequence), failed, decision, _ts(a.updated_at))
    _console().print(table)


@app.command("show")
def show(
    action_id: Annotated[str, typer.Argument(help="the action id (act-...)")],
    fmt: FormatOpt = RecordFormat.text,
    json_alias: bool = JSON_ALIAS,
    bootstrap: BootstrapOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """One action: target, guards, decision, result and its transitions."""
    json_out = chosen_format(fmt, json_alias) is RecordFormat.json
    actions, topic = _load(bootstrap, timeout)
    log = actions.get(action_id)
    if log is None:
        cli_fail(f"unknown remediation action {action_id!r} (not on {topic})")
    a = log.latest
    if json_out:
        sys.stdout.write(canonical_json(a) + "\n")
        return
    out = _console()
    out.print(f"[bold]{a.action_id}[/]  {a.action} {escape(_target(a))}  cluster {escape(a.cluster)}  "
              f"[{STATE_STYLE.get(a.state, '')}]{a.state}[/] (seq {a.sequence})", highlight=False)
    out.print(f"mode {a.mode}; policy {a.policy_id}@{a.policy_version}; cause {a.cause_code}; severity {a.severity}; "
              f"verdict {a.attribution_id}" + (f"; incident {a.incident_id}" if a.incident_id else ""), highlight=False)
    out.print(f"created {_ts(a.created_at)}, updated {_ts(a.updated_at)}, expires {_ts(a.expires_at)}", highlight=False)
    if a.reason:
        out.print(f"reason: {escape(a.reason)}", highlight=False)
    if a.decision:
        out.print(f"decision: {escape(a.decision.by)} at {_ts(a.decision.at)}: {escape(a.decision.reason or '-')}",
                  highlight=False)
    if a.result:
        out.print(f"result ({escape(a.executor or '-')}): {escape(a.result)}", highlight=False)
    if a.guards:
        guards = Table("guard", "passed", "detail", title="guards")
        for g in a.guards:
            guards.add_row(g.guard, "[green]yes[/]" if g.passed else "[red]no[/]", escape(g.detail))
        out.print(guards)
    if a.plan:
        out.print(f"certification plan: {len(a.plan)} groups (stages: "
                  f"{', '.join(sorted({g.stage for g in a.plan}))})", highlight=False)
    history = Table("seq", "state", "at (UTC)", "by", "result / reason", title="transitions on the topic")
    for r in log.records:
        history.add_row(str(r.sequence), r.state, _ts(r.updated_at), escape(r.decision.by) if r.decision else "-",
                        escape(r.result or r.reason))
    out.print(history)


def _keyring() -> Any:
    """The command keys of the environment, with a key to sign with; exits 2 when there is
    none or the settings are bad."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from streams.command_auth import CommandKeyError, CommandKeySettings

    try:
        keyring = CommandKeySettings().keyring()
        keyring.signing_key_id()
    except ValidationError as exc:
        cli_fail("command key settings: " + "; ".join(e["msg"] for e in exc.errors()))
    except SettingsError as exc:
        cli_fail(f"command key settings: {exc} (FAULTSTREAM_COMMAND_KEYS is a JSON object: key id -> secret)")
    except CommandKeyError as exc:
        cli_fail(str(exc))
    return keyring


def signed(cmd: RemediationCommand) -> RemediationCommand:
    """``cmd`` signed with the environment's signing key (``streams.command_auth.sign``):
    ``key_id``, ``command_id`` and ``signature`` filled. Exits 2 without a key."""
    from streams.command_auth import sign

    return sign(cmd, _keyring())


def send_command(kafka: Any, cmd: RemediationCommand, timeout_s: float) -> str:
    """Publish ``cmd`` (signed, id filled) on the commands topic, key = its action id (empty
    for a breaker reset); returns the topic. Exits 2 when the broker does not take it within
    ``timeout_s``."""
    from transport.kafka import KafkaProducerError, RecordProducer

    topic = _topic("remediation-commands")
    try:
        producer = RecordProducer(kafka, topic, linger_ms=0, delivery_timeout_ms=max(1000, int(timeout_s * 1000)),
                                  config={"log_level": 0})
        producer.send(cmd.action_id or "", cmd)
        producer.flush(timeout_s + 5)
    except KafkaProducerError as exc:
        cli_fail(f"Kafka at {kafka.bootstrap_servers}: {exc}")
    return topic


def _who(by: str | None) -> str:
    name = by or os.environ.get("USER") or os.environ.get("LOGNAME")
    if not name:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):
            name = ""
    if not name.strip():
        cli_fail("--by is required: $USER is not set")
    return name.strip()


#: command -> the states its action must be in.
ALLOWED = {"approve": ("proposed",), "reject": ("proposed",), "cancel": ACTIVE}


def _decide(command: str, action_id: str, by: str | None, reason: str, bootstrap: str | None, timeout: float) -> None:
    who = _who(by)
    _keyring()  # no key: fail before reading the topic
    actions, topic = _load(bootstrap, timeout)
    log = actions.get(action_id)
    if log is None:
        cli_fail(f"unknown remediation action {action_id!r} (not on {topic})")
    a = log.latest
    if a.state not in ALLOWED[command]:
        cli_fail(f"{action_id} is {a.state}, not {' or '.join(ALLOWED[command])}: nothing to {command}")
    now = time.time_ns()
    if command == "approve" and a.expires_at is not None and now >= a.expires_at:
        cli_fail(f"{action_id} expired at {_ts(a.expires_at)} (the policy's proposal_ttl_s after its verdict): "
              "too late to approve")
    cmd = signed(RemediationCommand(command=command, action_id=action_id, cluster=a.cluster, by=who, reason=reason,
                                    at=time.time_ns()))
    sent_to = send_command(_kafka(bootstrap), cmd, timeout)
    typer.echo(f"{command} {action_id} ({a.action} {_target(a)}, cluster {a.cluster}) by {who}: "
               f"{cmd.command_id} sent to {sent_to}")


@app.command("approve")
def approve(action_id: Annotated[str, typer.Argument(help="the action id (act-...)")], reason: ReasonOpt,
            by: ByOpt = None, bootstrap: BootstrapOpt = None, timeout: TimeoutOpt = 10.0) -> None:
    """Approve a proposed action; the worker executes it (dry run unless the cluster's executor is enabled)."""
    _decide("approve", action_id, by, reason, bootstrap, timeout)


@app.command("reject")
def reject(action_id: Annotated[str, typer.Argument(help="the action id (act-...)")], reason: ReasonOpt,
           by: ByOpt = None, bootstrap: BootstrapOpt = None, timeout: TimeoutOpt = 10.0) -> None:
    """Reject a proposed action (its later chain steps are cancelled)."""
    _decide("reject", action_id, by, reason, bootstrap, timeout)


@app.command("cancel")
def cancel(action_id: Annotated[str, typer.Argument(help="the action id (act-...)")], reason: ReasonOpt,
           by: ByOpt = None, bootstrap: BootstrapOpt = None, timeout: TimeoutOpt = 10.0) -> None:
    """Cancel an action that has not ended (proposed, approved or executing)."""
    _decide("cancel", action_id, by, reason, bootstrap, timeout)


@app.command("reset-breaker")
def reset_breaker(
    cluster: Annotated[str, typer.Option("--cluster", help="the cluster whose circuit breaker to close")],
    reason: ReasonOpt,
    by: ByOpt = None,
    bootstrap: BootstrapOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Close a cluster's tripped circuit breaker; blocked actions older than stale_after_s are expired, not replayed."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    who = _who(by)
    if not cluster.strip():
        cli_fail("--cluster must name a cluster")
    _keyring()
    kafka = _kafka(bootstrap)
    topic = _topic("remediation-commands")
    try:
        md = AdminClient(kafka.confluent_config() | {"log_level": 0}).list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        cli_fail(f"Kafka at {kafka.bootstrap_servers} did not answer within {timeout:g} s: {exc.args[0].str()}")
    meta = md.topics.get(topic)
    if meta is None or meta.error is not None:
        cli_fail(f"topic {topic} does not exist on {kafka.bootstrap_servers} (faultstream topics create)")
    cmd = signed(RemediationCommand(command="reset_breaker", cluster=cluster, by=who, reason=reason, at=time.time_ns()))
    send_command(kafka, cmd, timeout)
    typer.echo(f"reset-breaker of cluster {cluster} by {who}: {cmd.command_id} sent to {topic}")

