"""Kafka records to and from the pipeline (pure: no I/O): an observation decoded from a
record's bytes or the reason it is dead-lettered, and a pipeline effect as a record. Used by
the Faust agents (:mod:`streams.app`) and the batch ingest stage (:mod:`streams.ingest`)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import msgspec
from pydantic import ValidationError

from correlators.pipeline import Effect, Route, Tombstone
from schemas.deadletter import reason_of
from schemas.messages import message_json
from schemas.records import SCHEMA_VERSION, TIME_NS_MAX, TIME_NS_MIN, Observation, check_json_value
from schemas.utc import format_utc
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


# -- log lines read without pydantic -------------------------------------------------------
# msgspec mirrors of Observation, Source and Position (schemas/records.py) narrowed to a log
# line without a metric or GPU: at least as strict as the pydantic models field by field, so
# what they accept pydantic accepts (tests/streams/test_codec.py checks both the fields and,
# by fuzzing, the acceptance).

_I32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
_I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _LineSource(msgspec.Struct, forbid_unknown_fields=True):
    connector: str
    instance: str = ""


class _LinePosition(msgspec.Struct, forbid_unknown_fields=True):
    file: str | None = None
    line: _I64 | None = None
    topic: str | None = None
    partition: _I32 | None = None
    offset: _I64 | None = None


class _LogLine(msgspec.Struct, forbid_unknown_fields=True):
    schema_version: Literal[SCHEMA_VERSION]  # type: ignore[valid-type]  # required, as decode_record requires it
    source: _LineSource
    kind: Literal["log_line"]
    observed_at: Annotated[int, msgspec.Meta(ge=TIME_NS_MIN, le=TIME_NS_MAX)]
    time_source: Literal["line", "transport", "inferred"]
    time_quality: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
    host: str
    observation_id: str = ""
    observed_at_utc: str | None = None
    cluster: str = ""
    workload_id: str | None = None
    rank: _I32 | None = None
    gpu: None = None
    fabric_port: str | None = None
    format: str = "unknown"
    body: str | None = None
    metric: None = None
    attributes: dict[str, Any] = msgspec.field(default_factory=dict)
    position: _LinePosition = msgspec.field(default_factory=_LinePosition)


_log_line = msgspec.json.Decoder(_LogLine)


def log_line_body(raw: bytes, limit: int | None) -> str | None:
    """The body of the observation in ``raw`` (``""`` when it has none) when ``raw`` is
    certainly a record :func:`decode_record` accepts as an Observation of kind ``log_line``
    without ``metric`` or ``gpu``; None for anything else, or when this fast reading cannot
    tell (then :func:`decode_record` decides, and says why a bad record is bad).

    Read with msgspec into strict mirrors of the record models (about a tenth of pydantic's
    validation of the whole record): no coercion, unknown fields refused, the same integer
    and float bounds, a time twin only in its canonical form, ``attributes`` bounded by
    :func:`schemas.records.check_json_value`. For the ingest stage's log lines no rule can
    match (:meth:`correlators.pipeline.Pipeline.inert_body`), which are counted and go no
    further. Never raises."""
    if limit is not None and len(raw) > limit:
        return None
    try:
        line = _log_line.decode(raw)
        if line.observed_at_utc is not None and line.observed_at_utc != format_utc(line.observed_at):
            return None
        if line.attributes:
            check_json_value(line.attributes)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return None
    return line.body or ""


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
