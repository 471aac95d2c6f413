"""The one Faust driver of the engine's keyed state machines (:mod:`correlators.keyed`).

A :class:`KeyedAgent` consumes one channel's internal topic and, for each record: decodes it
(the channel's parser, :data:`schemas.messages.PARSERS`), loads the machine of its key, applies
it with the worker's monotonic time, saves the state (the pipeline does both through its
:class:`~correlators.pipeline.Stores`, changelogged Faust tables) and runs the effects
(:class:`EffectRunner`). A record that does not decode, or that the machine refuses, is
dead-lettered with the reason and never stops the agent.

An :class:`EffectRunner` carries the effects out: ``Route`` onto the channel's internal topic,
``Publish`` / ``Tombstone`` onto the public topic (counting verdicts and events), ``DeadLetter``
to the dead-letter topic, ``Execute`` to the executor registered for it.
"""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, Mapping

from pydantic import ValidationError

from correlators.keyed import DeadLetter, Effect, Execute, Route, Tombstone
from schemas.deadletter import reason_of
from schemas.records import Attribution
from streams.codec import encode_effect
from streams.metrics import Metrics

log = logging.getLogger("faultstream.worker")

#: ``(source, reason, original bytes | None, the Faust message)`` -> the dead letter sent
DeadLetterFn = Callable[[str, str, "bytes | None", Any], Awaitable[None]]
#: ``(channel, key, message, now)`` -> effects: a channel's machines, loaded, applied and saved
ApplyFn = Callable[[str, str, Any, float], list]


class EffectRunner:
    """Carries out effects. ``channels``: channel -> internal Faust topic; ``public``: topic name
    (``events``, ``attributions``, ...) -> Faust topic; ``metrics``: the worker's;
    ``dead_letter``: sends a dead letter; ``executors``: :attr:`Execute.kind
    <correlators.keyed.Execute>` -> coroutine function that starts it (none: an ``Execute``
    raises ``ValueError``)."""

    def __init__(self, channels: Mapping[str, Any], public: Mapping[str, Any], metrics: Metrics,
                 dead_letter: DeadLetterFn,
                 executors: Mapping[str, Callable[[Execute], Awaitable[None]]] | None = None) -> None:
        self.channels = channels
        self.public = public
        self.metrics = metrics
        self.dead_letter = dead_letter
        self.executors = dict(executors or {})

    async def run(self, effects: list[Effect], message: Any = None) -> None:
        """Carry out ``effects`` in order; ``message``: the Faust message they came from (the
        position a ``DeadLetter`` effect names)."""
        for effect in effects:
            if isinstance(effect, DeadLetter):
                await self._dead_letter(effect, message)
                continue
            if isinstance(effect, Execute):
                executor = self.executors.get(effect.kind)
                if executor is None:
                    raise ValueError(f"no executor for {effect.kind!r}")
                await executor(effect)
                continue
            where, key, value, headers = encode_effect(effect)
            if isinstance(effect, Route):
                await self.channels[where].send(key=key, value=value)
                continue
            await self.public[where].send(key=key, value=value, headers=headers)
            if not isinstance(effect, Tombstone):
                self._count(effect.record)

    async def _dead_letter(self, effect: DeadLetter, message: Any) -> None:
        original = effect.original if effect.original is not None else getattr(message, "value", None)
        if effect.origin is not None:
            o = effect.origin
            message = SimpleNamespace(key=(o.get("key") or "").encode() or None, topic=o.get("topic"),
                                      partition=o.get("partition"), offset=o.get("offset"))
        await self.dead_letter(effect.source, effect.reason, original, message)

    def _count(self, record: Any) -> None:
        if isinstance(record, Attribution):
            kind = record.status if record.scope.kind == "workload" else record.scope.kind
            self.metrics.verdicts.labels(record.domain, kind).inc()
            log.info("verdict %s %s rev %d %s %s %s", record.scope.kind, record.scope.id, record.revision,
                     record.cause_code or record.status, record.quality, kind)
        else:
            self.metrics.events.labels(record.type).inc()


class KeyedAgent:
    """Drives the machines of ``channel``: ``parse`` decodes a record's value (raises
    ``ValueError``/``ValidationError``), ``apply`` loads, applies and saves (``(channel, key,
    message, now) -> effects``), ``runner`` carries the effects out. ``before``: a coroutine
    called with each Faust message first (the offset continuity check); ``clock``: monotonic
    seconds. Counts every record as ``processed`` or ``dead_lettered`` in
    ``faultstream_agent_inputs_total{agent=<channel>}``."""

    def __init__(self, channel: str, parse: Callable[[bytes], Any], apply: ApplyFn, runner: EffectRunner, *,
                 before: Callable[[Any], Awaitable[None]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.channel = channel
        self.parse = parse
        self.apply = apply
        self.runner = runner
        self.before = before
        self.clock = clock
        inputs = runner.metrics.inputs
        self.processed = inputs.labels(channel, "processed")
        self.dead_lettered = inputs.labels(channel, "dead_lettered")

    async def consume(self, stream: Any) -> None:
        """The Faust agent's body: every event of ``stream``, one at a time (Faust writes table
        changelogs only inside stream iteration)."""
        async for item in stream.events():
            await self.handle(item)

    async def handle(self, item: Any) -> None:
        """One record: decode, apply, run the effects; a bad one is dead-lettered."""
        if self.before is not None:
            await self.before(item.message)
        try:
            if item.value is None:
                raise ValueError("tombstone: no value")
            message = self.parse(item.value)
            key = (item.key or b"").decode()
        except (ValueError, ValidationError, RecursionError) as exc:
            # ValidationError and UnicodeDecodeError are ValueErrors
            await self._refuse(f"invalid message: {reason_of(exc)}", item)
            return
        try:
            await self.runner.run(self.apply(self.channel, key, message, self.clock()), item.message)
        except Exception as exc:  # noqa: BLE001 -- one bad record never stops the agent
            log.exception("%s record %r failed", self.channel, item.key)
            await self._refuse(f"processing error: {type(exc).__name__}: {str(exc)[:300]}", item)
            return
        self.processed.inc()

    async def _refuse(self, reason: str, item: Any) -> None:
        await self.runner.dead_letter(f"agent.{self.channel}", reason, item.value, item.message)
        self.dead_lettered.inc()
