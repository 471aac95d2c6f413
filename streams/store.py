"""The worker's ClickHouse writers: agents that batch the topics' records into ClickHouse.

Every observation consumed (so that ``faultstream replay --from-clickhouse`` can re-decide
any stored incident), every event, verdict, dead letter, remediation transition and
certification. A batch is retried with exponential back-off until it is written; until then
the agent does not move on, so its offsets are not committed and nothing is lost (writes are
idempotent: a batch replayed after a crash adds no rows). A record that does not validate (or a
tombstone) is logged, counted in ``faultstream_clickhouse_skipped_total`` and skipped, never
holding back the valid records batched with it; the agent that consumes the topic as input
dead-letters it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import faust
from prometheus_client import Counter
from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from schemas.deadletter import DeadLetter
from schemas.records import Attribution, Certification, Event, Observation, RemediationAction
from streams.settings import WorkerSettings

log = logging.getLogger("faultstream.worker")


def valid(model: type[BaseModel], batch: list[Any], skipped: Any) -> list[BaseModel]:
    """The records of ``batch`` (raw JSON values) that validate as ``model``; the others
    (tombstones included) are logged and counted in ``skipped``."""
    out = []
    for value in batch:
        try:
            if value is None:
                raise ValueError("tombstone (no value)")
            out.append(model.model_validate_json(value))
        except (ValueError, ValidationError, RecursionError) as exc:
            skipped.labels(model.__name__).inc()
            log.warning("%s not stored in ClickHouse: %s", model.__name__, str(exc).splitlines()[0][:300])
    return out


def attach_clickhouse(app: faust.App, settings: WorkerSettings, metrics: Any, *, observations: Any,
                      events: Any, attributions: Any, dead_letters: Any) -> None:
    """Add the ClickHouse writer agents to ``app`` (see the module docstring); ``metrics`` is
    the worker's :class:`streams.app.Metrics`. The sink opens on the first write."""
    from sinks.clickhouse import ClickHouseSink, SinkError

    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clickhouse")
    state: dict[str, Any] = {"sink": None}
    skipped = Counter("faultstream_clickhouse_skipped_total", "records not stored: invalid", ["model"],
                      registry=metrics.registry)

    def write(table: str, records: list[Any]) -> None:
        if state["sink"] is None:
            state["sink"] = ClickHouseSink(settings.clickhouse)
        sink = state["sink"]
        {"observations": sink.write_observations, "events": sink.write_events,
         "attributions": sink.write_attributions, "dead_letters": sink.write_dead_letters,
         "remediations": sink.write_remediations, "certifications": sink.write_certifications}[table](records)

    async def store(table: str, records: list[Any]) -> None:
        if not records:
            return
        loop = asyncio.get_running_loop()
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(SinkError),
            wait=wait_exponential(multiplier=0.5, max=30),
            before_sleep=lambda rs: log.warning("ClickHouse write failed (%s); retrying", rs.outcome.exception()),
            reraise=True,
        ):
            with attempt:
                await loop.run_in_executor(executor, write, table, records)
        metrics.clickhouse_rows.labels(table).inc(len(records))

    def writer(topic: Any, table: str, model: type[BaseModel], size: int) -> None:
        async def agent(stream: Any) -> None:
            async for batch in stream.take(size, within=1.0):
                await store(table, valid(model, batch, skipped))

        agent.__name__ = f"store_{table}"
        agent.__qualname__ = f"store_{table}"
        app.agent(topic, name=f"streams.store.store_{table}")(agent)

    def topic(name: str) -> Any:
        return app.topic(settings.topic(name), value_serializer="raw", key_serializer="raw")

    writer(observations, "observations", Observation, 1000)
    writer(events, "events", Event, 1000)
    writer(attributions, "attributions", Attribution, 100)
    writer(dead_letters, "dead_letters", DeadLetter, 100)
    # every remediation transition (ReplacingMergeTree(sequence): the latest per action under
    # FINAL, each transition in remediation_transitions) and every certification
    writer(topic("remediations"), "remediations", RemediationAction, 100)
    writer(topic("certifications"), "certifications", Certification, 100)
