"""Kafka records to and from the pipeline (pure: no I/O): an observation decoded from a
record's bytes or the reason it is dead-lettered, and a pipeline effect as a record. Used by
the Faust agents (:mod:`streams.app`) and the batch ingest stage (:mod:`streams.ingest`)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import msgspec
from pydantic import ValidationError

from correlators.pipeline import Effect, Pipeline, Route, Tombstone
from schemas.deadletter import reason_of
from schemas.messages import message_json
from schemas.records import (
    SCHEMA_VERSION, TIME_NS_MAX, TIME_NS_MIN, Observation, ObservationKind, TimeSource, check_json_value,
)
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


# -- observations read without pydantic ----------------------------------------------------
# msgspec mirrors of Observation, Source, GpuRef and Position (schemas/records.py), at least as
# strict as the pydantic models field by field: what they accept, pydantic accepts with the
# same values (tests/streams/test_wire_observation.py checks the fields and, by fuzzing,
# acceptance and values). A field left out reads as UNSET.

_I32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
_I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
UNSET = msgspec.UNSET


class _WireSource(msgspec.Struct, forbid_unknown_fields=True):
    connector: str
    instance: str | msgspec.UnsetType = UNSET


class _WireGpu(msgspec.Struct, forbid_unknown_fields=True):
    index: _I32 | None | msgspec.UnsetType = UNSET
    uuid: str | None | msgspec.UnsetType = UNSET
    pci_bus_id: str | None | msgspec.UnsetType = UNSET


class _WirePosition(msgspec.Struct, forbid_unknown_fields=True):
    file: str | None | msgspec.UnsetType = UNSET
    line: _I64 | None | msgspec.UnsetType = UNSET
    topic: str | None | msgspec.UnsetType = UNSET
    partition: _I32 | None | msgspec.UnsetType = UNSET
    offset: _I64 | None | msgspec.UnsetType = UNSET


class WireObservation(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """An observation as msgspec reads it from a record's JSON (:func:`read_observation`):
    the fields of :class:`schemas.records.Observation`, in its order and with its meanings;
    a field the JSON left out is ``msgspec.UNSET``."""

    schema_version: Literal[SCHEMA_VERSION]  # type: ignore[valid-type]  # required, as decode_record requires it
    observation_id: str | msgspec.UnsetType = UNSET
    source: _WireSource
    kind: ObservationKind
    observed_at: Annotated[int, msgspec.Meta(ge=TIME_NS_MIN, le=TIME_NS_MAX)]
    observed_at_utc: str | None | msgspec.UnsetType = UNSET
    time_source: TimeSource
    time_quality: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
    host: str
    cluster: str | msgspec.UnsetType = UNSET
    workload_id: str | None | msgspec.UnsetType = UNSET
    rank: _I32 | None | msgspec.UnsetType = UNSET
    gpu: _WireGpu | None | msgspec.UnsetType = UNSET
    fabric_port: str | None | msgspec.UnsetType = UNSET
    format: str | msgspec.UnsetType = UNSET
    body: str | None | msgspec.UnsetType = UNSET
    metric: dict[str, float] | None | msgspec.UnsetType = UNSET
    attributes: dict[str, Any] | msgspec.UnsetType = UNSET
    position: _WirePosition | msgspec.UnsetType = UNSET

    def inert(self, pipeline: Pipeline) -> bool:
        """True when ``pipeline.ingest`` of this observation yields no effect and changes no
        state now: a log line without a metric whose body no rule can match
        (:meth:`~correlators.pipeline.Pipeline.inert_body`), or a telemetry sample no rule
        fires on that names no GPU (no index, or no PCI id a GPU table can key) or one the
        pipeline's table already holds (:meth:`~correlators.pipeline.Pipeline.inert_sample`).
        False for every other record."""
        metric = None if self.metric is UNSET else self.metric
        if self.kind == "log_line":
            return metric is None and pipeline.inert_body(None if self.body is UNSET else self.body)
        if self.kind != "telemetry":
            return False
        gpu = self.gpu
        index = pci = None
        if gpu is not UNSET and gpu is not None:
            index = None if gpu.index is UNSET else gpu.index
            pci = None if gpu.pci_bus_id is UNSET else gpu.pci_bus_id
        return pipeline.inert_sample("" if self.cluster is UNSET else self.cluster, self.host, index, pci, metric)


_wire_observation = msgspec.json.Decoder(WireObservation)


def read_observation(raw: bytes, limit: int | None) -> WireObservation | None:
    """The observation in ``raw`` read with msgspec when ``raw`` (at most ``limit`` bytes;
    None: any size) is certainly a record :func:`decode_record` accepts; None for anything
    else, or when this fast reading cannot tell (then :func:`decode_record` decides, and says
    why a bad record is bad). Never raises.

    About a fifth of the cost of pydantic's validation: strict mirrors of the record models
    (no coercion but int to float, unknown fields refused, the same integer and float
    bounds), a time twin only in its canonical form, ``attributes`` bounded by
    :func:`schemas.records.check_json_value`. The ingest stage reads every record with it
    first, and counts the ones that are :meth:`WireObservation.inert` without building them
    as records."""
    if limit is not None and len(raw) > limit:
        return None
    try:
        wire = _wire_observation.decode(raw)
        twin = wire.observed_at_utc
        if twin is not UNSET and twin is not None and twin != format_utc(wire.observed_at):
            return None
        if wire.attributes:
            check_json_value(wire.attributes)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return None
    return wire


def encode_effect(effect: Effect) -> tuple[str, bytes, bytes | None, Headers | None]:
    """A pipeline effect as a Kafka record: (where -- the channel of a route, ``workload``,
    ``host`` or ``fabric``, or the public topic of a publication or tombstone, ``events`` or
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
