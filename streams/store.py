"""The worker's ClickHouse writers: agents that batch the topics' records into ClickHouse.

Every observation consumed (so that ``faultstream replay --from-clickhouse`` can re-decide
any stored incident), every event, verdict, dead letter, remediation transition and
certification. A batch is retried with exponential back-off while the failure is transient
(ClickHouse down or overloaded); until then the agent does not move on, so its offsets are not
committed and nothing is lost (writes are idempotent: a batch replayed after a crash adds no
rows). When the worker is asked to stop while a batch still waits, the process exits at once
without committing (as after a crash: the batch is read again at the next start), so a
shutdown never waits for ClickHouse.

A record that does not validate (or a tombstone) is logged, counted in
``faultstream_clickhouse_skipped_total`` and skipped, never holding back the valid records
batched with it; the agent that consumes the topic as input dead-letters it (the events
topic has no other reader: its writer dead-letters it). A valid record whose row ClickHouse
refuses (:meth:`sinks.clickhouse.ClickHouseSink.write_events` ``on_reject``: a value outside
its column type, found by bisecting a refused insert) is counted the same way and sent to the
dead-letter topic with the reason (source ``sink.clickhouse.<table>``); a refused dead letter
is only logged and counted.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable

import faust
from prometheus_client import Counter
from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from schemas.deadletter import DeadLetter, reason_of
from schemas.records import Attribution, Certification, Event, Observation, RemediationAction
from streams.settings import WorkerSettings

log = logging.getLogger("faultstream.worker")


def valid(model: type[BaseModel], batch: list[Any], skipped: Any,
          rejected: list[tuple[Any, str]] | None = None) -> list[tuple[BaseModel, Any]]:
    """The records of ``batch`` (Faust events whose values are raw JSON) that validate as
    ``model``, each with its event; the others are logged, counted in ``skipped`` and, when
    ``rejected`` is given, appended to it as ``(event, reason)``. A tombstone on the
    attributions topic (after a withdrawn verdict, whose record is stored) is left out
    silently; on any other topic it is a bad record like the rest."""
    out = []
    for event in batch:
        value = event.value
        if value is None and model is Attribution:
            continue
        try:
            if value is None:
                raise ValueError("tombstone (no value)")
            out.append((model.model_validate_json(value), event))
        except (ValueError, ValidationError, RecursionError) as exc:
            reason = f"invalid {model.__name__.lower()}: {reason_of(exc)}"
            skipped.labels(model.__name__).inc()
            log.warning("%s not stored in ClickHouse: %s", model.__name__, reason)
            if rejected is not None:
                rejected.append((event, reason))
    return out


def attach_clickhouse(app: faust.App, settings: WorkerSettings, metrics: Any, *, observations: Any,
                      events: Any, attributions: Any, dead_letters: Any,
                      dead_letter: Callable[[str, str, bytes | None, Any], Awaitable[None]],
                      exit_without_commit: Callable[[str], Any]) -> None:
    """Add the ClickHouse writer agents to ``app`` (see the module docstring); ``metrics`` is
    the worker's :class:`streams.metrics.Metrics`; ``dead_letters`` the topic whose records its
    writer stores; ``dead_letter(source, reason, original, message)`` the worker's dead-letter
    publisher. The sink opens on the first write. The agents
    stop retrying once ``app.faultstream_stop`` (an ``asyncio.Event``, set by the worker's
    signal handler) is set or the app stops; then ``exit_without_commit(reason)``
    (:func:`streams.app.exit_without_commit`) ends the process."""
    stop_event: asyncio.Event = getattr(app, "faultstream_stop", None) or asyncio.Event()
    app.faultstream_stop = stop_event  # type: ignore[attr-defined]
    w = ClickHouseWriter(app, settings, metrics, dead_letter, exit_without_commit, stop_event)

    def topic(name: str) -> Any:
        return app.topic(settings.topic(name), value_serializer="raw", key_serializer="raw")

    w.attach(observations, "observations", Observation, 1000)
    # no other agent reads the events topic: its writer dead-letters what does not validate
    w.attach(events, "events", Event, 1000, own_input=True)
    w.attach(attributions, "attributions", Attribution, 100)
    w.attach(dead_letters, "dead_letters", DeadLetter, 100)
    # every remediation transition (ReplacingMergeTree(sequence): the latest per action under
    # FINAL, each transition in remediation_transitions) and every certification
    w.attach(topic("remediations"), "remediations", RemediationAction, 100)
    w.attach(topic("certifications"), "certifications", Certification, 100)


class ClickHouseWriter:
    """Batches of a topic's records into their ClickHouse table, in one writer thread, retried
    with back-off while ClickHouse is down (the agent waits: its offsets are not committed);
    invalid or refused records are dead-lettered. See :func:`attach_clickhouse`."""

    def __init__(self, app: faust.App, settings: WorkerSettings, metrics: Any,
                 dead_letter: Callable[[str, str, bytes | None, Any], Awaitable[None]],
                 exit_without_commit: Callable[[str], Any], stop_event: asyncio.Event) -> None:
        self.app = app
        self.settings = settings
        self.metrics = metrics
        self.dead_letter = dead_letter
        self.exit_without_commit = exit_without_commit
        self.stop_event = stop_event
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clickhouse")
        self.sink: Any = None
        self.skipped = Counter("faultstream_clickhouse_skipped_total", "records not stored: invalid", ["model"],
                               registry=metrics.registry)

    def stopping(self) -> bool:
        return self.stop_event.is_set() or self.app.should_stop

    def _write(self, table: str, records: list[Any]) -> list[tuple[Any, str]]:
        """Write ``records`` (in the writer thread); returns the ones ClickHouse refused."""
        from sinks.clickhouse import ClickHouseSink

        if self.sink is None:
            self.sink = ClickHouseSink(self.settings.clickhouse)
        sink = self.sink
        refused: list[tuple[Any, str]] = []
        {"observations": sink.write_observations, "events": sink.write_events,
         "attributions": sink.write_attributions, "dead_letters": sink.write_dead_letters,
         "remediations": sink.write_remediations, "certifications": sink.write_certifications,
         }[table](records, on_reject=lambda rec, reason: refused.append((rec, reason)))
        return refused

    async def _sleep(self, seconds: float) -> None:
        # the back-off ends early when the worker is asked to stop
        try:
            await asyncio.wait_for(self.stop_event.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    async def _refuse(self, table: str, event: Any, reason: str) -> None:
        await self.dead_letter(f"sink.clickhouse.{table}", reason, event.value, event.message)

    async def store(self, table: str, batch: list[Any], model: type[BaseModel], own_input: bool) -> None:
        """Validate and write one batch of ``table``'s topic."""
        from sinks.clickhouse import SinkError

        invalid: list[tuple[Any, str]] = []
        records = valid(model, batch, self.skipped, invalid if own_input else None)
        for event, reason in invalid:
            await self._refuse(table, event, reason)
        if not records:
            return
        loop = asyncio.get_running_loop()
        refused: list[tuple[Any, str]] = []
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(SinkError),
                stop=lambda _: self.stopping(),
                wait=wait_exponential(multiplier=0.5, max=30),
                sleep=self._sleep,
                before_sleep=lambda rs: log.warning("ClickHouse write failed (%s); retrying", rs.outcome.exception()),
                reraise=True,
            ):
                with attempt:
                    refused = await loop.run_in_executor(self.executor, self._write, table, [r for r, _ in records])
        except SinkError as exc:
            # asked to stop while the batch waits: exit without committing its offsets
            self.exit_without_commit(f"stopping while {len(records)} {table} records wait for ClickHouse ({exc})")
        by_record = {id(rec): event for rec, event in records}
        for rec, reason in refused:
            self.skipped.labels(model.__name__).inc()
            log.warning("%s not stored in ClickHouse: %s", model.__name__, reason)
            event = by_record.get(id(rec))
            if table != "dead_letters" and event is not None:
                await self._refuse(table, event, reason)
        self.metrics.clickhouse_rows.labels(table).inc(len(records) - len(refused))

    def attach(self, topic: Any, table: str, model: type[BaseModel], size: int, *, own_input: bool = False) -> None:
        """An agent writing ``topic``'s records to ``table`` in batches of up to ``size``."""

        async def agent(stream: Any) -> None:
            async for batch in stream.take_events(size, within=1.0):
                await self.store(table, batch, model, own_input)

        agent.__name__ = f"store_{table}"
        agent.__qualname__ = f"store_{table}"
        self.app.agent(topic, name=f"streams.store.store_{table}")(agent)
