"""Delivering a connector's records to Kafka: poll, publish, flush, and only then save the cursor.

* :func:`publish` -- send records (key = ``record.host`` or the source's ``key``), flush, then
  persist the cursor. A crash republishes at most the unconfirmed tail (duplicates collapse
  downstream by their deterministic ids) and loses nothing.
* :func:`run` -- the one loop of every ``faultstream connect`` command: polls a
  :class:`connectors.source.Source`, publishes each batch with :func:`publish`, saves the
  source's :meth:`~connectors.source.Source.checkpoint` after the flush; once, or (``follow``)
  every ``poll_s`` seconds until stopped, retrying failed polls and deliveries with tenacity
  when asked to.
* :func:`stop_on_signals` -- a ``threading.Event`` set by SIGTERM or Ctrl-C, the stop signal of a
  following run.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from pydantic import BaseModel
from tenacity import Retrying, retry_if_exception_type, stop_when_event_set, wait_fixed

from connectors.source import Rewindable, Source, record_key

if TYPE_CHECKING:  # pragma: no cover
    from connectors.cursor import CursorStore
    from transport.kafka import RecordProducer

__all__ = ["publish", "run", "stop_on_signals", "StopSignal", "RoutedProducer"]

log = logging.getLogger("faultstream.connector")


def publish(
    observations: Iterable[BaseModel],
    producer: "RecordProducer",
    *,
    topic: str | None = None,
    cursor: "CursorStore | None" = None,
    state: Callable[[], dict[str, Any]] | None = None,
    key: Callable[[BaseModel], str] | None = None,
    flush_timeout: float = 60.0,
) -> int:
    """Send every record (key = ``key(record)``, default ``record.host``) to ``topic``
    (default: the producer's), flush, then persist the cursor.

    ``cursor``: a ``connectors.cursor.CursorStore``; saved **only after the flush succeeded**.
    ``state``: returns the dict to save (a connector's position after the last record it
    produced, e.g. :meth:`connectors.files.FilesConnector.checkpoint`); it is called after
    the iterable is exhausted. Without it, ``{"published": n}`` is saved. ``flush_timeout``:
    seconds. Returns the number of records sent. Raises :class:`transport.kafka.DeliveryError`
    (cursor untouched) when any delivery failed, :class:`transport.kafka.BackPressureTimeout`
    when the broker stays unreachable."""
    n = 0
    for record in observations:
        producer.send(key(record) if key is not None else record.host, record, topic=topic)  # type: ignore[attr-defined]
        n += 1
    producer.flush(flush_timeout)
    if cursor is not None:
        cursor.save(state() if state is not None else {"published": n})
    return n


def run(
    source: Source,
    producer: "RecordProducer",
    *,
    topic: str | None = None,
    cursor: "CursorStore | None" = None,
    follow: bool = False,
    poll_s: float = 1.0,
    stop: threading.Event | None = None,
    retry: bool = False,
    wait: Callable[[float], Any] | None = None,
    flush_timeout: float = 60.0,
) -> int:
    """Poll ``source``, publish, flush, save its checkpoint; returns the number of records
    published.

    One cycle: ``source.poll()``; every record sent to ``topic`` (key: :func:`connectors.source.
    record_key`); the producer flushed (``flush_timeout`` seconds); then, when ``cursor`` is
    given and ``source.checkpoint()`` differs from the last saved document, it is saved. A
    cursor is therefore never ahead of what the broker acknowledged.

    Without ``follow`` the run stops after the first cycle, unless the source is ``pending``
    (more is already available: polled again). With ``follow`` it goes on until ``stop`` is set
    or Ctrl-C. Between cycles it waits ``poll_s`` seconds with ``wait`` (default ``stop.wait``,
    so setting ``stop`` ends the wait), except right after a non-empty batch of a pending
    source.

    ``retry`` (with ``follow``): a cycle that raises (the outside system failing, a delivery
    error) is logged, the source is rewound (:class:`connectors.source.Rewindable`; the
    records come again with the same ids) and the cycle is tried again every ``poll_s``
    seconds (tenacity) until it succeeds or ``stop`` is set. Without ``retry`` the first error
    propagates; the cursor stays at the last successful cycle. A source that cannot rewind is
    never retried (a retry would skip the failed records)."""
    stop = stop if stop is not None else threading.Event()
    pause = wait if wait is not None else stop.wait
    saved: list[dict[str, Any] | None] = [None]

    def cycle() -> int:
        batch = list(source.poll())
        n = publish(batch, producer, topic=topic, key=lambda r: record_key(source, r),
                    flush_timeout=flush_timeout)
        if cursor is not None:
            state = source.checkpoint()
            if state != saved[0]:
                cursor.save(state)
                saved[0] = state
        return n

    def attempt() -> int:
        try:
            return cycle()
        except Exception:
            source.rewind()  # type: ignore[attr-defined]
            raise

    def warn(state: Any) -> None:
        log.warning("connector poll or delivery failed, retrying in %g s: %s", poll_s,
                    state.outcome.exception())

    retrying = retry and follow and isinstance(source, Rewindable)
    total = 0
    try:
        while True:
            if retrying:
                try:
                    n = Retrying(retry=retry_if_exception_type(Exception), wait=wait_fixed(poll_s),
                                 stop=stop_when_event_set(stop), sleep=pause, before_sleep=warn,
                                 reraise=True)(attempt)
                except Exception:
                    if stop.is_set():
                        return total
                    raise
            else:
                n = cycle()
            total += n
            pending = bool(getattr(source, "pending", False))
            if stop.is_set() or not (follow or pending):
                return total
            if not (n and pending):
                pause(poll_s)
                if stop.is_set():
                    return total
    except KeyboardInterrupt:
        if not follow:
            raise
        return total


class StopSignal(threading.Event):
    """The stop event of a run, remembering the signal that set it first (``signum``; None
    while unset or when its owner set it)."""

    def __init__(self) -> None:
        super().__init__()
        self.signum: int | None = None


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopSignal]:
    """A :class:`StopSignal` that SIGTERM or the first SIGINT (Ctrl-C) sets while the block
    runs, so that a run stops between two cycles rather than inside a Kafka client call; a
    second SIGINT raises ``KeyboardInterrupt`` as usual. The previous handlers are restored
    after the block. Outside the main thread (where Python cannot install signal handlers) the
    event is only set by its owner."""
    stop = StopSignal()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT and stop.signum == signal.SIGINT:
            raise KeyboardInterrupt
        if stop.signum is None:
            stop.signum = signum
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class RoutedProducer:
    """A :class:`transport.kafka.RecordProducer` that sends records of some types to their own
    topic (``routes``: model class -> topic), the rest where the caller says: the runner's one
    topic carries the observations (or HealthEvents), dead letters go to the dead-letter topic,
    both confirmed by the same flush."""

    def __init__(self, producer: "RecordProducer", routes: dict[type, str]) -> None:
        self.producer = producer
        self.routes = dict(routes)

    def send(self, key: str, record: BaseModel, *, topic: str | None = None) -> None:
        """Enqueue ``record`` (see :meth:`transport.kafka.RecordProducer.send`)."""
        self.producer.send(key, record, topic=self.routes.get(type(record), topic))

    def flush(self, timeout: float = 60.0) -> int:
        """Flush the producer (raises :class:`transport.kafka.DeliveryError` on failures)."""
        return self.producer.flush(timeout)
