"""Kafka settings, under the name ``sinks.kafka_settings`` (see :mod:`transport.kafka_settings`).

The settings live in :mod:`transport.kafka_settings`; this module names the same objects for
code that imports them from ``sinks`` (``streams/app.py``, ``tests/kafka_fixtures.py``).
"""

from transport.kafka_settings import KafkaSettings, KafkaSettingsError, kafka_settings  # noqa: F401

__all__ = ["KafkaSettings", "KafkaSettingsError", "kafka_settings"]
