"""The topic contract's rules in the record models: RFC 3339 twins of every time, a constant
schema_version, standard base64 with null kept apart from empty, the headers of every record,
updated_at that never goes back, and the JSON Schema files saying the same."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from correlators.remediation.lifecycle import advance
from schemas.deadletter import DeadLetter
from schemas.records import (TIME_NS_MAX, TIME_NS_MIN, Attribution, Certification, Decision, Event,
                             Observation, RemediationAction, RemediationTarget, RootCause, Scope, Source,
                             Window, canonical_json, record_data)
from schemas.utc import format_utc, parse_utc, twin_name
from schemas.wire import encode_record, headers_for

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas" / "json"
T0 = 1_714_564_800_123_456_789  # 2024-05-01T12:00:00.123456789Z


def obs(**kw):
    base = dict(source=Source(connector="files"), kind="log_line", observed_at=T0, time_source="line",
                time_quality=1.0, host="node-a01", body="Xid 79")
    return Observation(**(base | kw)).with_id()


def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


# -- times ---------------------------------------------------------------------------------

def test_rfc3339_text_of_known_instants() -> None:
    assert format_utc(T0) == "2024-05-01T12:00:00.123456789Z"
    assert format_utc(0) == "1970-01-01T00:00:00.000000000Z"
    assert format_utc(-1) == "1969-12-31T23:59:59.999999999Z"
    assert format_utc(TIME_NS_MIN) == "1900-01-01T00:00:00.000000000Z"
    assert format_utc(TIME_NS_MAX) == "2262-04-11T23:47:16.854775807Z"
    # what other producers write: offsets, fewer digits, lower case
    assert parse_utc("2024-05-01T14:00:00.123456789+02:00") == T0
    assert parse_utc("2024-05-01t12:00:00.5z") == T0 - 123_456_789 + 500_000_000
    assert parse_utc("2024-05-01T12:00:00Z") == T0 - 123_456_789
    assert twin_name("observed_at") == "observed_at_utc" and twin_name("at_ns") == "at_utc"


@pytest.mark.parametrize("text", ["2024-05-01 12:00:00Z", "2024-05-01T12:00:00", "2024-02-30T00:00:00Z",
                                  "2024-05-01T12:00:00.1234567891Z", "1714564800123456789", ""])
def test_text_that_is_not_rfc3339_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_utc(text)


@given(st.integers(min_value=TIME_NS_MIN, max_value=TIME_NS_MAX))
def test_twin_round_trips_every_instant(ns: int) -> None:
    assert parse_utc(format_utc(ns)) == ns


def test_every_time_has_its_twin_in_the_record_and_the_wire() -> None:
    o = obs()
    data = json.loads(canonical_json(o))
    assert data["observed_at"] == T0 and data["observed_at_utc"] == "2024-05-01T12:00:00.123456789Z"
    att = Attribution(attribution_id="att-1", scope=Scope(kind="workload", id="job-1"),
                      window=Window(start=T0 - 10**9, end=T0), outcome="failed", domain="gpu_hardware",
                      root_cause=RootCause(code="gpu.xid.79", text="t"), confidence=1.0, quality="definitive",
                      ruleset_version="r", engine_version="e", decided_at=T0)
    a = json.loads(canonical_json(att))
    assert (a["window"]["start_utc"], a["window"]["end_utc"], a["decided_at_utc"]) == (
        "2024-05-01T11:59:59.123456789Z", "2024-05-01T12:00:00.123456789Z", "2024-05-01T12:00:00.123456789Z")
    ev = Event(type="gpu.xid", at=T0, host="node-a01", rule="r@1")
    assert json.loads(canonical_json(ev))["began_at_utc"] is None  # a null time has a null twin


def test_a_twin_alone_sets_the_time_and_a_rounded_integer_is_refused() -> None:
    data = json.loads(canonical_json(obs()))
    alone = {k: v for k, v in data.items() if k != "observed_at"}
    assert Observation.model_validate(alone).observed_at == T0
    # what JavaScript's JSON.parse makes of the integer (nearest double), beside the intact text
    rounded = dict(data, observed_at=float(T0).__int__())
    assert rounded["observed_at"] != T0
    with pytest.raises(ValidationError, match="name different instants"):
        Observation.model_validate(rounded)
    # the same instant spelled with an offset is the same time
    assert Observation.model_validate(dict(data, observed_at_utc="2024-05-01T13:00:00.123456789+01:00")).observed_at == T0
    with pytest.raises(ValidationError, match="not an RFC 3339 time"):
        Observation.model_validate(dict(alone, observed_at_utc="yesterday"))


def test_a_changed_time_rewrites_its_twin_and_twins_are_in_no_id() -> None:
    o = obs()
    before = o.observation_id
    o.observed_at = T0 + 1
    assert o.observed_at_utc == "2024-05-01T12:00:00.123456790Z"
    copy = o.model_copy(update={"observed_at": 0})
    assert copy.observed_at_utc == "1970-01-01T00:00:00.000000000Z"
    # the id hashes the content without the twins and without schema_version
    assert obs().observation_id == before
    o2 = obs()
    o2.__dict__["observed_at_utc"] = "anything"
    assert o2.with_id().observation_id == before


def test_record_data_drops_the_twins_so_a_changed_time_validates() -> None:
    action = RemediationAction(action_id="act-1", attribution_id="att-1", target=RemediationTarget(host="node-a01"),
                               action="drain", policy_id="p", created_at=T0, updated_at=T0)
    data = record_data(action)
    assert "updated_at_utc" not in data and "created_at_utc" not in data
    data["updated_at"] = T0 + 5
    assert RemediationAction.model_validate(data).updated_at_utc == "2024-05-01T12:00:00.123456794Z"


def test_updated_at_never_goes_back_with_sequence() -> None:
    action = RemediationAction(action_id="act-1", attribution_id="att-1", target=RemediationTarget(host="node-a01"),
                               action="drain", policy_id="p", created_at=T0, updated_at=T0 + 60 * 10**9)
    # a person approves by the wall clock, which here is behind the verdict's event time
    approved = advance(action, "approved", at=T0, decision=Decision(by="sre", at=T0))
    assert (approved.sequence, approved.updated_at) == (2, T0 + 60 * 10**9)
    later = advance(approved, "executing", at=T0 + 120 * 10**9)
    assert later.updated_at == T0 + 120 * 10**9 and later.updated_at_utc == format_utc(T0 + 120 * 10**9)


# -- schema_version, headers, bytes -----------------------------------------------------------

@pytest.mark.parametrize("version", [1, 3, 99, "2"])
def test_a_record_of_another_schema_version_is_refused_by_model_and_json_schema(version) -> None:
    data = json.loads(canonical_json(obs()))
    with pytest.raises(ValidationError, match="schema_version"):
        Observation.model_validate(dict(data, schema_version=version))
    assert not validator("observation").is_valid(dict(data, schema_version=version))
    validator("observation").validate(data)


def test_every_record_carries_the_three_headers() -> None:
    cert = Certification(host="node-a01", suite="dcgmi diag -r 3", passed=True, finished_at=T0).with_id()
    value, headers = encode_record(cert)
    assert value == canonical_json(cert).encode()
    assert headers == [("schema", b"Certification"), ("schema_version", b"2"), ("content-type", b"application/json")]
    assert headers_for("Attribution")[0] == ("schema", b"Attribution")


def test_dead_letter_bytes_are_standard_base64_and_null_is_not_empty() -> None:
    raw = bytes([0xFB, 0xFF, 0xBF, 0x00])  # base64url would write -_ where standard base64 writes +/
    letter = DeadLetter(source="stage.ingest", reason="invalid json", original=raw, original_key=b"node-a01",
                        at_ns=T0).with_id()
    data = json.loads(canonical_json(letter))
    assert data["original"] == base64.b64encode(raw).decode() == "+/+/AA=="
    assert data["original_key"] == "bm9kZS1hMDE=" and data["at_utc"] == "2024-05-01T12:00:00.123456789Z"
    assert DeadLetter.model_validate_json(canonical_json(letter)).original == raw
    tombstone = json.loads(canonical_json(DeadLetter(source="s", reason="tombstone", original=None, at_ns=T0)))
    empty = json.loads(canonical_json(DeadLetter(source="s", reason="empty", original=b"", at_ns=T0)))
    assert (tombstone["original"], empty["original"]) == (None, "")
    with pytest.raises(ValidationError, match="not standard base64"):
        DeadLetter.model_validate(dict(data, original="-_-_AA=="))
    schema = validator("dead_letter")
    schema.validate(data)
    assert schema.schema["properties"]["original"]["anyOf"][0] == {"type": "string", "contentEncoding": "base64"}


def test_json_schema_files_declare_int64_times_with_date_time_twins() -> None:
    props = json.loads((SCHEMAS / "observation.schema.json").read_text())["properties"]
    assert props["observed_at"]["format"] == "int64" and props["observed_at"]["type"] == "integer"
    assert props["observed_at_utc"]["anyOf"][0] == {"format": "date-time", "type": "string"}
    assert props["schema_version"] == {"const": 2, "default": 2, "title": "Schema Version", "type": "integer"}
    status = json.loads((SCHEMAS / "attribution.schema.json").read_text())["properties"]["status"]
    assert status["enum"] == ["provisional", "final", "withdrawn"]
