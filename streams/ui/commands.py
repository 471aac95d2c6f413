"""Remediation decisions from the explorer: the signed command path of ``faultstream
remediation approve | reject`` (``streams.remediation.cli``), without the command line.

A decision is checked against the action's latest state as ClickHouse holds it (the CLI reads
the compacted ``remediations`` topic; the worker checks again either way), becomes a
:class:`schemas.records.RemediationCommand` naming the logged-in person (``by``), the reason,
the action's cluster and now (``at``, UTC ns, wall clock), is signed with the configured key
(:func:`streams.command_auth.sign`: HMAC-SHA256 with ``FAULTSTREAM_COMMAND_SIGNING_KEY`` among
``FAULTSTREAM_COMMAND_KEYS`` / ``FAULTSTREAM_COMMAND_KEY_FILE``) and published with
:class:`transport.kafka.RecordProducer` on ``<prefix>.remediation-commands``, key = the action
id -- the same function, producer, topic and key as the CLI's ``send_command``. The worker
authenticates it (``streams.command_auth.authenticate``) and applies it at its own clock.

Errors: :class:`DecisionRefused` (the action is unknown, not in a state the command applies
to, expired, or the reason is empty: nothing is sent) and :class:`PublishFailed` (the broker
did not take the command within the timeout).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemas.records import RemediationAction, RemediationCommand
from streams.command_auth import Keyring, sign
from streams.remediation.cli import ALLOWED

__all__ = ["DECISIONS", "MAX_REASON", "CommandPublisher", "DecisionRefused", "PublishFailed", "Sent", "decide"]

#: The decisions the explorer offers (a subset of the CLI's commands).
DECISIONS = ("approve", "reject")
#: Longest reason accepted, characters.
MAX_REASON = 1_000


class DecisionRefused(ValueError):
    """A decision that is not sent; the message says why (shown to the person)."""


class PublishFailed(RuntimeError):
    """The command was signed but the broker did not take it; the message names the broker
    error."""


@dataclass(frozen=True)
class Sent:
    """A published command: the signed record and the topic it went to."""

    command: RemediationCommand
    topic: str


class CommandPublisher:
    """Signs commands with ``keyring``'s signing key and publishes them on ``topic`` through
    Kafka (``kafka``: a :class:`transport.kafka_settings.KafkaSettings`). ``timeout_s``: how
    long one publish waits for the broker's acknowledgement, seconds. Raises
    :class:`streams.command_auth.CommandKeyError` at construction when the keyring has no key
    to sign with."""

    def __init__(self, keyring: Keyring, kafka: Any, topic: str, *, timeout_s: float = 10.0) -> None:
        keyring.signing_key_id()  # no key: fail at start, not at the first click
        self.keyring = keyring
        self.kafka = kafka
        self.topic = topic
        self.timeout_s = timeout_s

    def publish(self, cmd: RemediationCommand) -> Sent:
        """Sign ``cmd`` and publish it (key = its action id, empty for a breaker reset);
        returns what was sent once the broker acknowledged it. Raises :class:`PublishFailed`."""
        from transport.kafka import KafkaProducerError, RecordProducer

        signed = sign(cmd, self.keyring)
        try:
            producer = RecordProducer(self.kafka, self.topic, linger_ms=0,
                                      delivery_timeout_ms=max(1000, int(self.timeout_s * 1000)),
                                      config={"log_level": 0})
            producer.send(signed.action_id or "", signed)
            producer.flush(self.timeout_s + 5)
        except KafkaProducerError as exc:
            raise PublishFailed(f"Kafka at {self.kafka.bootstrap_servers}: {exc}") from exc
        return Sent(signed, self.topic)


def decide(command: str, action: RemediationAction | None, action_id: str, *, by: str, reason: str,
           publish: Callable[[RemediationCommand], Sent], now_ns: int | None = None) -> Sent:
    """Send ``command`` (``approve`` | ``reject``) for ``action`` (its latest record; None: not
    stored) by ``by`` with ``reason``: the checks of the CLI (the action exists, is in a state
    the command applies to, an approval is not past ``expires_at``; the reason is not blank and
    at most :data:`MAX_REASON` characters), then ``publish`` of the unsigned command.
    ``now_ns``: the wall clock, UTC ns (default: now). Raises :class:`DecisionRefused` before
    anything is sent, or what ``publish`` raises."""
    if command not in DECISIONS:
        raise DecisionRefused(f"unknown decision {command!r}: {' or '.join(DECISIONS)}")
    reason = reason.strip()
    if not reason:
        raise DecisionRefused("say why: the reason is recorded on the action")
    if len(reason) > MAX_REASON:
        raise DecisionRefused(f"the reason has {len(reason)} characters; at most {MAX_REASON}")
    if not by.strip():
        raise DecisionRefused("no name to record the decision under")
    if action is None:
        raise DecisionRefused(f"unknown remediation action {action_id!r}")
    if action.state not in ALLOWED[command]:
        raise DecisionRefused(f"{action_id} is {action.state}, not {' or '.join(ALLOWED[command])}: "
                              f"nothing to {command}")
    now = time.time_ns() if now_ns is None else now_ns
    if command == "approve" and action.expires_at is not None and now >= action.expires_at:
        raise DecisionRefused(f"{action_id} expired at {action.expires_at_utc} (the policy's proposal_ttl_s "
                              "after its verdict): too late to approve")
    cmd = RemediationCommand(command=command, action_id=action_id, cluster=action.cluster, by=by.strip(),
                             reason=reason, at=now)
    return publish(cmd)
