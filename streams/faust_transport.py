"""Faust's Kafka transport (aiokafka) with the consumer's fetch wait set for latency, and
stream partitions resumed only after they were seeked to their committed offsets.

Faust builds its worker consumer with ``fetch_max_wait_ms=1500`` and no setting to change it
(``faust/transport/drivers/aiokafka.py``, ``AIOKafkaConsumerThread._create_worker_consumer``):
a broker holds each fetch of an idle partition up to 1.5 s, and every internal hop of the
pipeline (observations -> by-workload -> a verdict) can wait that long. This transport is
aiokafka's with the app's ``faultstream_fetch_max_wait_ms`` (``FAULTSTREAM_FETCH_MAX_WAIT_MS``,
:class:`streams.settings.WorkerSettings`; default :data:`FETCH_MAX_WAIT_MS`) instead; everything
else is Faust's but two at-least-once fixes (:class:`Consumer`). It is registered
under the URL scheme ``faultstream://`` through Faust's ``faust.transports`` entry point
(``pyproject.toml``), and the worker's broker URLs use it (``streams/app.py``).
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

#: Longest time (ms) the broker holds a fetch that has no data yet, unless the app says.
FETCH_MAX_WAIT_MS = 50


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, its aiokafka consumer built with the app's fetch wait."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # read by AIOKafkaConsumer.start() when it builds its fetcher
        consumer._fetch_max_wait_ms = int(getattr(self.app, "faultstream_fetch_max_wait_ms", FETCH_MAX_WAIT_MS))
        return consumer


class Consumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer with :class:`ConsumerThread`, and stream partitions that
    resume only once seeked to their committed offsets.

    After a rebalance Faust's recovery (``faust/tables/recovery.py``, ``_resume_streams``)
    resumes the stream partitions and then seeks them to their committed offsets, with the
    flow already running: for the length of the seek (hundreds of ms) the fetcher hands the
    agents records from the consumer's fetch position, which is past the committed offset
    when the worker fetched ahead before the rebalance. Faust then drops the records it reads
    again after the seek below the highest offset it has read, and commits past them:
    observations never processed, a verdict decided without its events (seen with two
    workers and a rebalance mid-stream). Here :meth:`resume_partitions` holds back the
    partitions of stream topics (changelogs resume at once: recovery reads them) until
    :meth:`perform_seek` has seeked every partition; only then do they resume, from the
    committed offsets.

    Faust also treats a jump in a partition's offsets as a gap to commit past (``_add_gap``),
    and commits past a record missing right after the committed offset (``_new_offset``):
    both lose records in topics without holes. Here neither happens for the topics the app
    names, and :meth:`perform_seek` tells the app each partition's start, so the first record
    of a generation is checked too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._resume_after_seek: set[Any] = set()  # stream partitions waiting for the seek

    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def resume_partitions(self, tps: Any) -> None:
        """Resume changelog partitions now; stream partitions after the next seek."""
        tps = set(tps)
        streams = {tp for tp in tps if not self._is_changelog_tp(tp)}
        self._resume_after_seek |= streams
        super().resume_partitions(tps - streams)

    def pause_partitions(self, tps: Any) -> None:
        """Pause ``tps`` (a partition paused again is no longer waiting for a seek)."""
        tps = set(tps)
        self._resume_after_seek -= tps
        super().pause_partitions(tps)

    async def perform_seek(self) -> None:
        """Seek every partition to its committed offset, tell the app where each partition
        of a topic with consecutive offsets starts (``app.faultstream_on_seek(starts)``,
        ``{TP: offset}``, only offsets the partition still holds), then resume the stream
        partitions that were waiting for it."""
        await super().perform_seek()
        on_seek = getattr(self.app, "faultstream_on_seek", None)
        consecutive = getattr(self.app, "faultstream_consecutive_topics", frozenset())
        if on_seek is not None:
            starts = {tp: offset for tp, offset in self._committed_offset.items()
                      if tp.topic in consecutive and offset is not None and tp in self.assignment()}
            if starts:
                earliest = await self.earliest_offsets(*starts)
                on_seek({tp: offset for tp, offset in starts.items() if offset >= (earliest.get(tp) or 0)})
        waiting, self._resume_after_seek = self._resume_after_seek, set()
        super().resume_partitions(waiting & set(self.assignment()))

    def _new_offset(self, tp: Any) -> Any:
        """The offset to commit for ``tp``: Faust's, except that in a topic with consecutive
        offsets nothing is committed while the record at the committed offset itself is not
        processed (Faust 0.15 takes the committed offset for the last record processed, so a
        hole of one record right after it was committed past)."""
        if tp.topic in getattr(self.app, "faultstream_consecutive_topics", frozenset()):
            acked, committed = self._acked[tp], self._committed_offset[tp]
            if acked and committed is not None and min(acked) > committed:
                return None
        return super()._new_offset(tp)

    async def _add_gap(self, tp: Any, offset_from: int, offset_to: int) -> None:
        """Faust counts offsets it jumped over as processed (a gap, committed past): right for
        compacted or transactional topics, whose offsets have holes. In a topic whose offsets
        are consecutive (``app.faultstream_consecutive_topics``) a jump is records left out of
        the stream: they stay uncommitted, to be read again (:mod:`streams.offsets`)."""
        if tp.topic in getattr(self.app, "faultstream_consecutive_topics", frozenset()):
            return
        await super()._add_gap(tp, offset_from, offset_to)


class Transport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with :class:`Consumer`."""

    Consumer = Consumer
