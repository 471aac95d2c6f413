"""Delivering a connector's Observations to Kafka: publish, flush, and only then save the cursor.

:func:`publish` is the one delivery loop of every connector (files, Slurm, counters, bundles):
a crash republishes at most the unconfirmed tail (duplicates collapse downstream by their
deterministic ids) and loses nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable

from schemas.records import Observation

if TYPE_CHECKING:  # pragma: no cover
    from connectors.cursor import CursorStore
    from sinks.kafka import RecordProducer

__all__ = ["publish"]


def publish(
    observations: Iterable[Observation],
    producer: "RecordProducer",
    *,
    topic: str | None = None,
    cursor: "CursorStore | None" = None,
    state: Callable[[], dict[str, Any]] | None = None,
    flush_timeout: float = 60.0,
) -> int:
    """Send every observation (key = ``obs.host``) to ``topic`` (default: the producer's),
    flush, then persist the cursor.

    ``cursor``: a ``connectors.cursor.CursorStore``; saved **only after the flush succeeded**.
    ``state``: returns the dict to save (a connector's position after the last observation it
    produced, e.g. :meth:`connectors.files.FilesConnector.checkpoint`); it is called after
    the iterable is exhausted. Without it, ``{"published": n}`` is saved. Returns the number
    of observations sent. Raises :class:`sinks.kafka.DeliveryError` (cursor untouched) when
    any delivery failed, :class:`sinks.kafka.BackPressureTimeout` when the broker stays
    unreachable."""
    n = 0
    for obs in observations:
        producer.send(obs.host, obs, topic=topic)
        n += 1
    producer.flush(flush_timeout)
    if cursor is not None:
        cursor.save(state() if state is not None else {"published": n})
    return n
