"""Kafka connection settings, read once from the environment, for every Kafka client we use.

Every process that talks to Kafka (connectors, the worker, the remediation agent, the CLI)
builds its client from one :class:`KafkaSettings`; a command line with ``--bootstrap`` gets it
from :func:`kafka_settings` (the environment, with the servers overridden).

=========================  =====================================  ============================
environment variable       meaning                                default
=========================  =====================================  ============================
KAFKA_BOOTSTRAP_SERVERS    ``host:port[,host:port...]``           ``127.0.0.1:9092``
KAFKA_SECURITY_PROTOCOL    PLAINTEXT, SSL, SASL_PLAINTEXT,        ``PLAINTEXT``
                           SASL_SSL
KAFKA_SASL_MECHANISM       PLAIN, SCRAM-SHA-256, SCRAM-SHA-512    unset (required for SASL_*)
KAFKA_SASL_USERNAME        SASL user                              unset
KAFKA_SASL_PASSWORD        SASL password (never printed: repr     unset
                           masks it)
KAFKA_SSL_CA_LOCATION      PEM file of the CA that signed the     unset (system trust store)
                           brokers' certificates
=========================  =====================================  ============================

Usage::

    from transport.kafka_settings import KafkaSettings, with_partitioner
    s = KafkaSettings()                                   # from the environment
    s = KafkaSettings(bootstrap_servers="127.0.0.1:19092")  # or explicit
    confluent_kafka.Producer(with_partitioner(s.confluent_config() | {"linger.ms": 5}))
    confluent_kafka.Consumer(s.confluent_config() | {"group.id": "g"})
    aiokafka.AIOKafkaProducer(**s.aiokafka_kwargs())

:meth:`KafkaSettings.confluent_config` gives librdkafka property names
(``bootstrap.servers``, ``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
``sasl.password``, ``ssl.ca.location``); :meth:`KafkaSettings.aiokafka_kwargs` gives
aiokafka/Faust keyword arguments (``bootstrap_servers``, ``security_protocol``,
``sasl_mechanism``, ``sasl_plain_username``, ``sasl_plain_password``, ``ssl_context``).
Only the settings that are set appear in either. Invalid values raise
``pydantic.ValidationError`` at construction (e.g. SASL_SSL without a mechanism).

Partitioning. Every faultstream producer puts a keyed record on the partition Kafka's Java
producer would choose: ``(murmur2(key) & 0x7fffffff) % partitions`` (Kafka's
``Utils.murmur2``, seed ``0x9747b28c``, over the key's bytes -- UTF-8 for our string keys; an
empty key is hashed like any other). The worker (Faust on aiokafka) does so with aiokafka's
``DefaultPartitioner``; librdkafka producers do so with ``partitioner=murmur2_random``
(:data:`PRODUCER_PARTITIONER`), which :func:`with_partitioner` sets on a producer's
configuration -- librdkafka's own default, ``consistent_random`` (CRC32 of the key), would put
the same key elsewhere. A record without a key (null, not empty) goes to a random
partition with both clients; Java's producer sends such records to a "sticky" partition that
changes with each batch, so over time null-keyed records are spread across the partitions in
all three and no consumer may rely on where one lands. :meth:`KafkaSettings.confluent_config`
leaves ``partitioner`` out, as it serves consumers and admin clients too (librdkafka warns
when a consumer is given a producer property).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import pydantic
from pydantic import SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

__all__ = ["KafkaSettings", "KafkaSettingsError", "PRODUCER_PARTITIONER", "kafka_settings", "with_partitioner"]

#: librdkafka ``partitioner`` of every faultstream producer: murmur2 of the key as Kafka's Java
#: producer (and aiokafka's ``DefaultPartitioner``) computes it; records with a null key go to
#: a random partition. See the module docstring.
PRODUCER_PARTITIONER = "murmur2_random"


def with_partitioner(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the librdkafka producer configuration ``config`` with ``partitioner`` =
    :data:`PRODUCER_PARTITIONER`. Every ``confluent_kafka.Producer`` of faultstream is built
    from its result (directly, or through :class:`transport.kafka.RecordProducer`). Raises
    ``ValueError`` when ``config`` already names another partitioner (a producer that would
    put a key on another partition than the worker and Java producers do)."""
    current = config.get("partitioner", PRODUCER_PARTITIONER)
    if current != PRODUCER_PARTITIONER:
        raise ValueError(
            f"librdkafka partitioner {current!r} puts keys on other partitions than the worker and "
            f"Kafka's Java producer; faultstream producers use {PRODUCER_PARTITIONER!r}"
        )
    return {**config, "partitioner": PRODUCER_PARTITIONER}


class KafkaSettings(BaseSettings):
    """Bootstrap servers and security settings (see the module docstring for the variables)."""

    model_config = SettingsConfigDict(env_prefix="KAFKA_", extra="ignore", case_sensitive=False)

    bootstrap_servers: str = "127.0.0.1:9092"
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = None

    @field_validator("security_protocol", "sasl_mechanism", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.strip().upper() if isinstance(v, str) else v

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, v: str) -> str:
        parts = [p.strip() for p in v.split(",") if p.strip()]
        if not parts or any(":" not in p for p in parts):
            raise ValueError(f"bootstrap servers must be host:port[,host:port...], got {v!r}")
        return ",".join(parts)

    @model_validator(mode="after")
    def _sasl_complete(self) -> "KafkaSettings":
        if self.security_protocol.startswith("SASL_"):
            if self.sasl_mechanism is None:
                raise ValueError(f"KAFKA_SASL_MECHANISM is required with {self.security_protocol}")
            if not self.sasl_username or self.sasl_password is None:
                raise ValueError("KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD are required with SASL")
        return self

    def confluent_config(self) -> dict[str, str]:
        """librdkafka (confluent_kafka) configuration: set values only, string-typed."""
        cfg: dict[str, str] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        if self.security_protocol.startswith("SASL_"):
            cfg["sasl.mechanism"] = str(self.sasl_mechanism)
            cfg["sasl.username"] = str(self.sasl_username)
            cfg["sasl.password"] = self.sasl_password.get_secret_value() if self.sasl_password else ""
        if self.ssl_ca_location and self.security_protocol in ("SSL", "SASL_SSL"):
            cfg["ssl.ca.location"] = self.ssl_ca_location
        return cfg

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's producer/consumer/admin (and Faust's broker
        credentials): ``bootstrap_servers`` is a list of ``host:port``; for SSL an
        ``ssl.SSLContext`` trusting ``ssl_ca_location`` (or the system store)."""
        kw: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers.split(","),
            "security_protocol": self.security_protocol,
        }
        if self.security_protocol.startswith("SASL_"):
            kw["sasl_mechanism"] = self.sasl_mechanism
            kw["sasl_plain_username"] = self.sasl_username
            kw["sasl_plain_password"] = self.sasl_password.get_secret_value() if self.sasl_password else ""
        if self.security_protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            kw["ssl_context"] = create_ssl_context(cafile=self.ssl_ca_location)
        return kw


class KafkaSettingsError(ValueError):
    """The ``KAFKA_*`` environment (or ``--bootstrap``) does not give valid settings. The
    message is one line: ``Kafka settings: <reason>[; <reason>...]``."""


def kafka_settings(bootstrap: str | None = None) -> KafkaSettings:
    """:class:`KafkaSettings` from the ``KAFKA_*`` environment, with ``bootstrap``
    (``host:port[,host:port...]``, as given to a ``--bootstrap`` option) overriding
    ``KAFKA_BOOTSTRAP_SERVERS`` when it is not empty. Raises :class:`KafkaSettingsError`
    naming every invalid setting."""
    try:
        return KafkaSettings(bootstrap_servers=bootstrap) if bootstrap else KafkaSettings()
    except pydantic.ValidationError as exc:
        raise KafkaSettingsError("Kafka settings: " + "; ".join(e["msg"] for e in exc.errors())) from None
