"""``streams.codec.log_line_body``: the ingest stage's msgspec reading of a log line no rule
can match. What it accepts, pydantic's reading (``decode_record``) accepts as the same log
line, for the records of the example incidents, for hostile inputs and for every mutation of
them hypothesis draws; and it does read the common records (else it would save nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.publish import bundle_records
from correlators.config import EngineConfig
from correlators.pipeline import Pipeline
from schemas.records import TIME_NS_MAX, TIME_NS_MIN, Observation, Position, Source
from streams.codec import _LineSource, _LinePosition, _LogLine, decode_record, log_line_body

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"
PIPELINE = Pipeline(EngineConfig.default())


def _records(name: str) -> list[dict]:
    records, _ = bundle_records(EXAMPLES / name)
    return [json.loads(r.model_dump_json()) for r in records]


XID_BUNDLE = _records("public-rc15-pcie-aer-xid79-multinode")
LOG_LINES = [r for r in XID_BUNDLE if r["kind"] == "log_line"]
INERT = next(r for r in LOG_LINES if PIPELINE.inert(Observation.model_validate(r)))
DEEP: list = [1]
for _ in range(40):
    DEEP = [DEEP]
CANDIDATE = next(r for r in LOG_LINES if not PIPELINE.inert(Observation.model_validate(r)))
OTHERS = [r for r in XID_BUNDLE if r["kind"] != "log_line"][:20]


def encode(record: dict) -> bytes:
    return json.dumps(record).encode()


def same_log_line(raw: bytes) -> None:
    """The property: a body read by msgspec is the body of the log line pydantic reads."""
    body = log_line_body(raw, None)
    if body is None:
        return
    obs = decode_record(raw, None)
    assert isinstance(obs, Observation), (raw[:300], obs)
    assert obs.kind == "log_line" and obs.metric is None and obs.gpu is None
    assert (obs.body or "") == body
    assert PIPELINE.inert_body(body) == PIPELINE.inert(obs)


def test_the_mirrors_have_the_fields_of_the_records() -> None:
    assert set(_LogLine.__struct_fields__) == set(Observation.model_fields)
    assert set(_LineSource.__struct_fields__) == set(Source.model_fields)
    assert set(_LinePosition.__struct_fields__) == set(Position.model_fields)


def test_every_log_line_of_the_example_incidents_is_read_as_pydantic_reads_it() -> None:
    read = 0
    for bundle in sorted(p for p in EXAMPLES.iterdir() if p.is_dir()):
        records, _ = bundle_records(bundle)
        for record in records:
            raw = record.model_dump_json().encode()
            body = log_line_body(raw, None)
            same_log_line(raw)
            if record.kind == "log_line" and record.gpu is None:
                assert body == (record.body or ""), (bundle.name, record.observation_id)
                read += 1
            else:
                assert body is None, (bundle.name, record.kind)
    assert read > 1000


def test_the_inert_and_the_candidate_line_of_an_xid_incident() -> None:
    assert PIPELINE.inert_body(log_line_body(encode(INERT), None))
    assert "Xid" in CANDIDATE["body"] or not PIPELINE.inert_body(CANDIDATE["body"])
    assert log_line_body(encode(CANDIDATE), None) == CANDIDATE["body"]
    assert not PIPELINE.inert_body(log_line_body(encode(CANDIDATE), None))


def test_a_record_without_a_body_reads_as_an_empty_one() -> None:
    record = {**INERT, "body": None}
    assert log_line_body(encode(record), None) == ""
    assert PIPELINE.inert_body("")


@pytest.mark.parametrize("raw, why", [
    (encode({**INERT, "kind": "telemetry"}), "another kind"),
    (encode({**INERT, "metric": {"gpu_temp": 80.0}}), "a metric"),
    (encode({**INERT, "gpu": {"index": 0}}), "a GPU"),
    (encode({k: v for k, v in INERT.items() if k != "schema_version"}), "no schema version"),
    (encode({**INERT, "schema_version": 1}), "another schema version"),
    (encode({**INERT, "schema_version": "2"}), "a schema version as text"),
    (encode({**INERT, "unknown": 1}), "an unknown field"),
    (encode({**INERT, "source": {**INERT["source"], "unknown": 1}}), "an unknown field of the source"),
    (encode({**INERT, "time_quality": True}), "a boolean quality"),
    (encode({**INERT, "time_quality": 1.5}), "a quality over 1"),
    (encode({**INERT, "observed_at": TIME_NS_MAX + 1}), "a time past the column"),
    (encode({**INERT, "observed_at": TIME_NS_MIN - 1}), "a time before the column"),
    (encode({**INERT, "observed_at": float(INERT["observed_at"])}), "a time as a float"),
    (encode({**INERT, "rank": 2**31}), "a rank past Int32"),
    (encode({**INERT, "position": {"line": 2**63}}), "a line past Int64"),
    (encode({**INERT, "observed_at_utc": "2026-11-30T00:53:20Z"}), "a twin naming another instant"),
    (encode({**INERT, "attributes": {"n": 2**64}}), "an attribute past Int64"),
    (encode({**INERT, "attributes": {"a": DEEP}}),
     "attributes nested too deeply"),
    (encode(INERT).replace(b'"body": "', b'"body": "\\ud800'), "a lone surrogate"),
    (b"\xef\xbb\xbf" + encode(INERT), "a byte order mark"),
    (encode(INERT) + b" x", "trailing bytes"),
    (encode(INERT).replace(b'"body": "', b'"body": "\xff'), "bytes that are not UTF-8"),
    (encode({**INERT, "attributes": {"a": 1}}).replace(b'"a": 1', b'"a": NaN'), "NaN"),
    (encode({**INERT, "attributes": {"a": 1}}).replace(b'"a": 1', b'"a": 1e400'), "a number past a double"),
    (b"[" * 100_000, "deep nesting"),
    (b"", "nothing"),
    (b"null", "null"),
])
def test_what_is_not_certainly_a_valid_log_line_is_left_to_pydantic(raw: bytes, why: str) -> None:
    assert log_line_body(raw, None) is None, why
    same_log_line(raw)


def test_a_record_of_the_required_fields_alone_is_read() -> None:
    required = ("schema_version", "source", "kind", "observed_at", "time_source", "time_quality", "host")
    raw = encode({k: INERT[k] for k in required})
    assert log_line_body(raw, None) == ""
    same_log_line(raw)


def test_a_duplicated_field_reads_as_pydantic_reads_it() -> None:
    # both parsers take the last value; msgspec also checks the first one
    twice = encode(INERT).replace(b'"kind": "log_line"', b'"kind": "telemetry", "kind": "log_line"')
    assert log_line_body(twice, None) is None
    assert decode_record(twice, None).kind == "log_line"
    last = encode(INERT).replace(b'"kind": "log_line"', b'"kind": "log_line", "kind": "telemetry"')
    assert log_line_body(last, None) is None
    assert decode_record(last, None).kind == "telemetry"
    body = encode(INERT).replace(b'"body": ', b'"body": "NVRM: Xid 79", "body": ')
    assert log_line_body(body, None) == INERT["body"] == decode_record(body, None).body


def test_a_twin_in_another_form_of_the_same_instant_is_left_to_pydantic() -> None:
    # pydantic accepts it (and rewrites the twin); the fast reading takes the canonical form only
    raw = encode({**INERT, "observed_at": 1796000000000000000, "observed_at_utc": "2026-11-30T00:53:20+00:00"})
    assert log_line_body(raw, None) is None
    assert isinstance(decode_record(raw, None), Observation)


def test_a_record_over_the_limit_is_left_to_pydantic_which_says_so() -> None:
    raw = encode(INERT)
    assert log_line_body(raw, len(raw)) == INERT["body"]
    assert log_line_body(raw, len(raw) - 1) is None
    assert decode_record(raw, len(raw) - 1).startswith("too large")


# -- fuzzing: mutations of real records ---------------------------------------------------

INT_EDGES = [0, -1, 1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1,
             TIME_NS_MIN, TIME_NS_MIN - 1, TIME_NS_MAX, 10**30]
scalars = (st.none() | st.booleans() | st.sampled_from(INT_EDGES) | st.integers()
           | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, 1.0, -0.0, 1.0000001, 1e308])
           | st.text(max_size=12)
           | st.sampled_from(["log_line", "telemetry", "line", "inferred", "", "\ud800", "Xid", "NVRM: Xid (PCI:0000:9c:00): 79",
                              "2026-11-30T00:53:20.056978001Z", "2026-11-30T00:53:20Z"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                      max_leaves=8)
FIELDS = sorted(Observation.model_fields) + ["source.connector", "source.instance", "source.x", "position.line",
                                              "position.file", "position.partition", "position.offset", "gpu.index",
                                              "metric.gpu_temp", "attributes.a", "x"]


def alike(value: object) -> st.SearchStrategy:
    """Values of the type of ``value``: the mutations most likely to stay valid."""
    if isinstance(value, bool) or value is None:
        return st.none() | st.booleans()
    if isinstance(value, int):
        return st.sampled_from(INT_EDGES) | st.integers(min_value=-(2**64), max_value=2**64)
    if isinstance(value, float):
        return st.sampled_from([0.0, 1.0, -0.0, 0.5, 1.0000001, -1e-300]) | st.floats(min_value=-1, max_value=2) | st.integers(0, 2)
    if isinstance(value, str):
        return st.sampled_from(["", "Xid", "NVRM: Xid (PCI:0000:9c:00): 79, pid=1", "a\\nb", "\u00e9\u2028", "\ud800"]) | st.text(max_size=30)
    if isinstance(value, dict):
        return st.dictionaries(st.text(max_size=6), scalars, max_size=3)
    return values


@st.composite
def mutated(draw) -> bytes:
    record = json.loads(json.dumps(draw(st.sampled_from([INERT, CANDIDATE, *LOG_LINES[:20], *OTHERS[:10]]))))
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        path = draw(st.sampled_from(FIELDS)).split(".")
        target = record
        if len(path) == 2:
            if not isinstance(record.get(path[0]), dict):
                record[path[0]] = {}
            target = record[path[0]]
        how = draw(st.sampled_from(["drop", "any", "alike", "alike"]))
        if how == "drop":
            target.pop(path[-1], None)
        else:  # any JSON value, or one of the type already there (near the bounds, keywords)
            target[path[-1]] = draw(values if how == "any" else alike(target.get(path[-1])))
    text = json.dumps(record, ensure_ascii=draw(st.booleans()))
    raw = text.encode("utf-8", "surrogatepass")
    cut = draw(st.sampled_from(["none", "none", "none", "none", "duplicate", "truncate", "byte"]))
    if cut == "duplicate":
        key = draw(st.sampled_from(sorted(record) or ["kind"]))
        raw = b"{" + json.dumps(key).encode() + b": " + json.dumps(draw(values)).encode("utf-8", "surrogatepass") + b", " + raw[1:]
    elif cut == "truncate":
        raw = raw[:draw(st.integers(min_value=0, max_value=len(raw)))]
    elif cut == "byte" and raw:
        at = draw(st.integers(min_value=0, max_value=len(raw) - 1))
        raw = raw[:at] + bytes([draw(st.integers(min_value=0, max_value=255))]) + raw[at + 1:]
    return raw


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_what_the_fast_reading_accepts_pydantic_reads_as_the_same_log_line(raw: bytes) -> None:
    same_log_line(raw)
