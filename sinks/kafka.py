"""The Kafka producer, under the name ``sinks.kafka`` (see :mod:`transport.kafka`).

Kafka clients live in :mod:`transport.kafka`; this module names the same objects for code
that imports them from ``sinks``.
"""

from transport.kafka import (  # noqa: F401
    BackPressureTimeout,
    DeliveryError,
    FailedDelivery,
    KafkaProducerError,
    RecordProducer,
    consumer_config,
)

__all__ = ["RecordProducer", "DeliveryError", "BackPressureTimeout", "FailedDelivery", "KafkaProducerError",
           "consumer_config"]
