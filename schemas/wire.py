"""A record as it travels on a public topic: its value bytes and its Kafka headers.

Every record of every public topic (``schemas.topics.catalogue``) carries the same three
headers, tombstones included:

* ``schema`` -- the record model's class name (``Observation``, ``Event``, ``Attribution``,
  ``RemediationAction``, ``RemediationCommand``, ``Certification``, ``DeadLetter``; the
  ``topology`` topic carries ``Observation`` records of kind ``topology``);
* ``schema_version`` -- :data:`schemas.records.SCHEMA_VERSION` as decimal text (``"2"``);
* ``content-type`` -- ``application/json`` (the value is the record's canonical JSON,
  :func:`schemas.records.canonical_json`; a tombstone has a null value).

Header values are UTF-8 bytes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from schemas.records import SCHEMA_VERSION, canonical_json

__all__ = ["CONTENT_TYPE", "Headers", "encode_record", "headers_for"]

CONTENT_TYPE = "application/json"
#: Kafka headers as confluent-kafka, aiokafka and Faust take them: (name, value bytes) pairs.
Headers = list[tuple[str, bytes]]


@lru_cache(maxsize=None)
def _headers(schema: str) -> tuple[tuple[str, bytes], ...]:
    return (("schema", schema.encode()), ("schema_version", str(SCHEMA_VERSION).encode()),
            ("content-type", CONTENT_TYPE.encode()))


def headers_for(schema: str) -> Headers:
    """The headers of a record (or tombstone) of model ``schema`` (a class name, e.g.
    ``"Attribution"``): a new list each call, so a caller may extend it."""
    return list(_headers(schema))


def encode_record(record: Any) -> tuple[bytes, Headers]:
    """``record`` (a record model instance) -> (its canonical JSON as UTF-8 bytes, its
    headers). Raises ``TypeError`` for a value JSON cannot hold."""
    return canonical_json(record).encode(), headers_for(type(record).__name__)
