"""Kafka records to and from the pipeline (pure: no I/O): an observation decoded from a
record's bytes or the reason it is dead-lettered, and a pipeline effect as a record. Used by
the Faust agents (:mod:`streams.app`) and the batch ingest stage (:mod:`streams.ingest`)."""

from __future__ import annotations

import json

from pydantic import ValidationError

from correlators.pipeline import Effect, Route, Tombstone
from schemas.deadletter import reason_of
from schemas.messages import message_json
from schemas.records import SCHEMA_VERSION, Observation
from schemas.wire import Headers, encode_record, headers_for


def decode_record(raw: bytes, limit: int | None) -> Observation | str:
    """The observation in ``raw`` (at most ``limit`` bytes; None: any size), or the reason
    it is dead-lettered (``too large: ...``, ``schema version: ...``, ``invalid json: ...``,
    ``invalid record: ...``). Never raises."""
    if limit is not None and len(raw) > limit:
        return f"too large: {len(raw)} bytes > {limit}"
    try:
        # the common case in one pass (pydantic's JSON parser); anything it refuses, or a
        # record without this schema version, takes the path below, which says why
        obs = Observation.model_validate_json(raw)
        if obs.schema_version == SCHEMA_VERSION and "schema_version" in obs.model_fields_set:
            return obs
    except (ValueError, ValidationError):
        pass
    try:
        # JSON on Kafka is UTF-8 (RFC 8259): other bytes are not guessed at as UTF-16/32
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        if data.get("schema_version") != SCHEMA_VERSION:
            return f"schema version: {data.get('schema_version')!r} is not {SCHEMA_VERSION}"
        return Observation.model_validate(data)
    except RecursionError:
        return "invalid json: nested too deeply"
    except UnicodeDecodeError as exc:
        return f"invalid json: not UTF-8: {exc.reason} at byte {exc.start}"
    except ValidationError as exc:
        return f"invalid record: {reason_of(exc)}"
    except ValueError as exc:
        reason = "invalid json" if isinstance(exc, json.JSONDecodeError) else "invalid record"
        return f"{reason}: {reason_of(exc)}"


def encode_effect(effect: Effect) -> tuple[str, bytes, bytes | None, Headers | None]:
    """A pipeline effect as a Kafka record: (where -- the channel of a route, ``workload`` or
    ``fabric``, or the public topic of a publication or tombstone, ``events`` or
    ``attributions`` --, key, value, headers). Routes carry
    :func:`schemas.messages.message_json` and no headers; publications the record's canonical
    JSON and the contract's headers (:mod:`schemas.wire`); a tombstone a None value and the
    headers of its schema. Keys are UTF-8."""
    if isinstance(effect, Route):
        return effect.channel, effect.key.encode(), message_json(effect.message), None
    if isinstance(effect, Tombstone):
        return effect.topic, effect.key.encode(), None, headers_for(effect.schema)
    value, headers = encode_record(effect.record)
    return effect.topic, effect.key.encode(), value, headers
