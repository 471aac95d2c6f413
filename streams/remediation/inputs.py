"""Decoding of the records the remediation agents read from Kafka (pure: no I/O, no clock).

* :func:`decode_command` -- one record of ``<prefix>.remediation-commands``: JSON, then a valid
  :class:`schemas.records.RemediationCommand` of this schema version that names its cluster (and
  an action, except ``reset_breaker``), then authenticated (:func:`streams.command_auth.authenticate`,
  HMAC-SHA256 and freshness at the caller's clock). Any failure is a :class:`CommandInvalid`
  whose message is the dead-letter reason.
* :func:`allocation_message` -- a scheduler workload record (an observation the ingest stage
  decoded) as the remediation agent's ``workload`` message (the nodes a verdict about that
  workload may target).

Used by :mod:`streams.remediation.agent` (the Faust agents).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from schemas.deadletter import reason_of
from schemas.messages import AllocationMessage
from schemas.records import SCHEMA_VERSION, RemediationCommand
from streams.command_auth import CommandAuthError, Keyring, authenticate

__all__ = ["CommandInvalid", "decode_command", "allocation_message"]


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
    except ValueError as exc:  # bad JSON, bad UTF-8, an integer of more digits than Python reads
        raise CommandInvalid(f"invalid json: {reason_of(exc)}") from exc
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
        raise CommandInvalid(f"invalid command: {reason_of(exc)}") from exc
    try:
        authenticate(cmd, keyring, now_ns, max_age_s=max_age_s, max_skew_s=max_skew_s)
    except CommandAuthError as exc:
        raise CommandInvalid(f"unauthenticated command: {exc}") from exc
    return cmd


def allocation_message(obs: Any) -> AllocationMessage | None:
    """The remediation agent's :class:`~schemas.messages.AllocationMessage` for an observation
    that is a scheduler workload record (``kind`` ``scheduler_event``, ``format``
    ``workload_yaml``): cluster, workload id, nodes and ``at`` (its end, else its start, UTC
    ns); None for any other observation. Raises ``ValidationError`` for a
    workload record whose spec does not validate."""
    if obs.kind != "scheduler_event" or obs.format != "workload_yaml":
        return None
    from schemas.bundle import WorkloadSpec

    spec = WorkloadSpec.model_validate(obs.attributes.get("workload"))
    cluster = spec.cluster or obs.cluster
    if not cluster:
        return None
    return AllocationMessage(cluster=cluster, workload_id=spec.workload_id, nodes=sorted(spec.nodes),
                             at=spec.end_ns if spec.end_ns is not None else spec.start_ns)
