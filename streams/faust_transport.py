"""Faust's Kafka transport (aiokafka) with the consumer's fetch wait set for latency.

Faust builds its worker consumer with ``fetch_max_wait_ms=1500`` and no setting to change it
(``faust/transport/drivers/aiokafka.py``, ``AIOKafkaConsumerThread._create_worker_consumer``):
a broker holds each fetch of an idle partition up to 1.5 s, and every internal hop of the
pipeline (observations -> by-workload -> a verdict) can wait that long. This transport is
aiokafka's with the app's ``faultstream_fetch_max_wait_ms`` (``FAULTSTREAM_FETCH_MAX_WAIT_MS``,
:class:`streams.settings.WorkerSettings`; default :data:`FETCH_MAX_WAIT_MS`) instead; everything
else is Faust's. It is registered
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
    """Faust's aiokafka consumer with :class:`ConsumerThread`."""

    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with :class:`Consumer`."""

    Consumer = Consumer
