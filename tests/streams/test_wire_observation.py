"""``streams.codec.read_observation``: the ingest stage's msgspec reading of an observation.
What it accepts, pydantic's reading (``decode_record``) accepts with the same values, for the
records of the example incidents, for hostile inputs and for every mutation of them
hypothesis draws; what it calls inert (``WireObservation.inert``) changes nothing in the
pipeline; and it does read the common records (else it would save nothing)."""

from __future__ import annotations

import copy
import json
import typing
from pathlib import Path
from typing import Any

import annotated_types
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import AfterValidator
from pydantic.fields import FieldInfo

from connectors.publish import bundle_records
from correlators.config import EngineConfig
from correlators.pipeline import Pipeline
from schemas.records import TIME_NS_MAX, TIME_NS_MIN, GpuRef, Observation, Position, Source
from streams.codec import WireObservation, _WireGpu, _WirePosition, _WireSource, decode_record, read_observation

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"


def _records(name: str) -> list[dict]:
    records, _ = bundle_records(EXAMPLES / name)
    return [json.loads(r.model_dump_json()) for r in records]


def _fed(records: list[dict]) -> Pipeline:
    """A pipeline as the ingest stage keeps one, after ``records`` and a commit (its GPU
    tables sent)."""
    pipeline = Pipeline(EngineConfig.default(), route_by_index=False)
    for record in records:
        pipeline.ingest(Observation.model_validate(record))
    pipeline.pending_tables()
    return pipeline


XID_BUNDLE = _records("public-rc15-pcie-aer-xid79-multinode")
PIPELINE = _fed(XID_BUNDLE)
LOG_LINES = [r for r in XID_BUNDLE if r["kind"] == "log_line"]
SAMPLES = [r for r in XID_BUNDLE if r["kind"] == "telemetry" and r["gpu"]]
INERT = next(r for r in LOG_LINES if PIPELINE.inert(Observation.model_validate(r)))
CANDIDATE = next(r for r in LOG_LINES if not PIPELINE.inert(Observation.model_validate(r)))
OTHERS = [r for r in XID_BUNDLE if r["kind"] not in ("log_line", "telemetry")][:10]
DEEP: list = [1]
for _ in range(40):
    DEEP = [DEEP]


def encode(record: dict) -> bytes:
    return json.dumps(record).encode()


def exact(value: Any) -> Any:
    """``value`` with every scalar tagged with its type, dicts in key order: equal results
    are equal data, type for type (1 is not 1.0)."""
    if isinstance(value, dict):
        return sorted((k, exact(v)) for k, v in value.items())
    if isinstance(value, list):
        return [exact(v) for v in value]
    return (type(value).__name__, repr(value))


def state(pipeline: Pipeline) -> Any:
    return copy.deepcopy((pipeline.gpu_tables.new, pipeline.gpu_tables.sent, pipeline.gpu_tables.unchanged))


def same_record(raw: bytes, pipeline: Pipeline = PIPELINE) -> WireObservation | None:
    """The properties: what msgspec reads, pydantic reads with the same values; a log line
    msgspec calls inert is inert; a record msgspec calls inert changes nothing when ingested."""
    wire = read_observation(raw, None)
    if wire is None:
        return None
    obs = decode_record(raw, None)
    assert isinstance(obs, Observation), (raw[:300], obs)
    read, validated = msgspec.to_builtins(wire), obs.model_dump(exclude_unset=True)
    # the time twin: pydantic writes its canonical form; msgspec read none or that one
    assert read.pop("observed_at_utc", None) in (None, obs.observed_at_utc)
    validated.pop("observed_at_utc", None)
    assert exact(read) == exact(validated), raw[:300]
    inert = wire.inert(pipeline)
    if obs.kind == "log_line":
        assert inert == pipeline.inert(obs)
    if inert:
        before = state(pipeline)
        assert pipeline.ingest(obs) == [] and state(pipeline) == before, raw[:300]
    return wire


def test_the_mirrors_have_the_fields_of_the_records_in_their_order() -> None:
    for wire, model in ((WireObservation, Observation), (_WireSource, Source), (_WireGpu, GpuRef),
                        (_WirePosition, Position)):
        assert wire.__struct_fields__ == tuple(model.model_fields), model.__name__


def _pydantic_checks(annotation: Any, metadata: list[Any]) -> tuple[set[tuple[str, Any]], set[str]]:
    """(the ge/le bounds, the names of after-validators) pydantic applies to a field, its
    nested ``Annotated`` parts included."""
    bounds: set[tuple[str, Any]] = set()
    validators: set[str] = set()
    todo = list(metadata)
    stack = [annotation]
    while stack:
        tp = stack.pop()
        args = typing.get_args(tp)
        if typing.get_origin(tp) is typing.Annotated:
            todo += args[1:]
            stack.append(args[0])
        else:
            stack += args
    while todo:
        item = todo.pop()
        if isinstance(item, FieldInfo):
            todo += item.metadata
        elif isinstance(item, (annotated_types.Ge, annotated_types.Le)):
            bounds.add((type(item).__name__.lower(), item.ge if isinstance(item, annotated_types.Ge) else item.le))
        elif isinstance(item, AfterValidator):
            validators.add(item.func.__name__)
        else:
            raise AssertionError(f"a check the mirrors do not know: {item!r}")
    return bounds, validators


def _msgspec_bounds(info: Any) -> set[tuple[str, Any]]:
    out: set[tuple[str, Any]] = set()
    for tp in getattr(info, "types", (info,)):
        for name in ("ge", "le"):
            if getattr(tp, name, None) is not None:
                out.add((name, getattr(tp, name)))
    return out


def test_the_mirrors_check_the_bounds_the_models_check_and_no_validator_is_new() -> None:
    # a bound or a validator added to a record model must be added to its mirror (or the
    # mirror would accept what pydantic refuses, and count it instead of dead-lettering it)
    for wire, model in ((WireObservation, Observation), (_WireSource, Source), (_WireGpu, GpuRef),
                        (_WirePosition, Position)):
        fields = {f.name: f.type for f in msgspec.inspect.type_info(wire).fields}
        for name, info in model.model_fields.items():
            bounds, validators = _pydantic_checks(info.annotation, info.metadata)
            assert _msgspec_bounds(fields[name]) == bounds, (model.__name__, name)
            assert validators == ({"check_json_value"} if name == "attributes" else set()), (model.__name__, name)
        decorators = model.__pydantic_decorators__
        assert not (decorators.validators or decorators.field_validators or decorators.root_validators)
        expected = {"_time_from_twin", "_twin_from_time"} if model is Observation else set()
        assert set(decorators.model_validators) == expected, model.__name__


@pytest.mark.slow
def test_every_record_of_the_example_incidents_is_read_as_pydantic_reads_it() -> None:
    read = inert = 0
    seen: set[str] = set()
    for bundle in sorted(p for p in EXAMPLES.iterdir() if p.is_dir()):
        records, _ = bundle_records(bundle)
        pipeline = _fed([json.loads(r.model_dump_json()) for r in records])
        for record in records:
            wire = same_record(record.model_dump_json().encode(), pipeline)
            assert wire is not None, (bundle.name, record.kind)
            read += 1
            inert += wire.inert(pipeline)
            seen.add(record.kind)
    assert read > 1000 and len(seen) >= 4 and 0 < inert < read, (read, inert, seen)


def test_the_inert_and_the_candidate_line_of_an_xid_incident() -> None:
    assert same_record(encode(INERT)).inert(PIPELINE)
    assert not same_record(encode(CANDIDATE)).inert(PIPELINE)


def test_a_sample_is_inert_once_its_gpu_is_in_the_table_sent_and_no_rule_fires() -> None:
    sample = SAMPLES[0]
    assert same_record(encode(sample)).inert(PIPELINE)
    fresh = Pipeline(EngineConfig.default(), route_by_index=False)
    assert not same_record(encode(sample), fresh).inert(fresh)  # its GPU is news to this one
    moved = {**sample, "gpu": {**sample["gpu"], "index": sample["gpu"]["index"] + 1}}
    assert not same_record(encode(moved)).inert(PIPELINE)  # another index for the PCI id
    hot = {**sample, "metric": {**sample["metric"], "ecc_uncorrected_volatile": 3.0, "temperature_gpu": 99.0}}
    assert PIPELINE.config.pack.may_extract_sample(hot["metric"])
    assert not same_record(encode(hot)).inert(PIPELINE)  # a rule fires on it
    no_gpu = {**sample, "gpu": None}
    assert same_record(encode(no_gpu)).inert(PIPELINE)


@pytest.mark.parametrize("change", [
    {"body": None}, {"kind": "telemetry"}, {"metric": {"gpu_temp": 80, "power": 1.5}}, {"gpu": {"index": 0}},
    {"gpu": {"uuid": None, "pci_bus_id": "0000:9c:00"}}, {"position": {}}, {"source": {"connector": "x"}},
    {"time_quality": 1}, {"observed_at": TIME_NS_MAX}, {"observed_at": TIME_NS_MIN}, {"rank": -(2**31)},
    {"attributes": {"a": [1, {"b": None}], "n": 2**63 - 1}}, {"observed_at_utc": None},
])
def test_records_of_every_shape_are_read_as_pydantic_reads_them(change: dict) -> None:
    for base in (INERT, CANDIDATE, SAMPLES[0]):
        record = {k: v for k, v in {**base, **change}.items() if k != "observed_at_utc" or "observed_at" not in change}
        assert same_record(encode(record)) is not None, change


def test_a_record_of_the_required_fields_alone_is_read() -> None:
    required = ("schema_version", "source", "kind", "observed_at", "time_source", "time_quality", "host")
    wire = same_record(encode({k: INERT[k] for k in required}))
    assert wire is not None and wire.inert(PIPELINE)


def test_a_duplicated_field_reads_as_its_last_value_as_pydantic_reads_it() -> None:
    for first, last in ((b"telemetry", b"log_line"), (b"log_line", b"telemetry")):
        raw = encode(INERT).replace(b'"kind": "log_line"', b'"kind": "' + first + b'", "kind": "' + last + b'"')
        assert same_record(raw).kind == last.decode()
    body = encode(INERT).replace(b'"body": ', b'"body": "NVRM: Xid 79", "body": ')
    assert same_record(body).body == INERT["body"]


@pytest.mark.parametrize("raw, why", [
    (encode({k: v for k, v in INERT.items() if k != "schema_version"}), "no schema version"),
    (encode({k: v for k, v in INERT.items() if k != "observed_at"}), "a time given by its twin alone"),
    (encode({**INERT, "schema_version": 1}), "another schema version"),
    (encode({**INERT, "schema_version": "2"}), "a schema version as text"),
    (encode({**INERT, "kind": "gossip"}), "an unknown kind"),
    (encode({**INERT, "unknown": 1}), "an unknown field"),
    (encode({**INERT, "source": {**INERT["source"], "unknown": 1}}), "an unknown field of the source"),
    (encode({**INERT, "gpu": {"index": "0"}}), "a GPU index as text"),
    (encode({**INERT, "metric": {"t": "80"}}), "a metric as text"),
    (encode({**INERT, "time_quality": True}), "a boolean quality"),
    (encode({**INERT, "time_quality": 1.5}), "a quality over 1"),
    (encode({**INERT, "observed_at": TIME_NS_MAX + 1}), "a time past the column"),
    (encode({**INERT, "observed_at": TIME_NS_MIN - 1}), "a time before the column"),
    (encode({**INERT, "observed_at": float(INERT["observed_at"])}), "a time as a float"),
    (encode({**INERT, "rank": 2**31}), "a rank past Int32"),
    (encode({**INERT, "rank": 3.0}), "a rank as a float"),
    (encode({**INERT, "position": {"line": 2**63}}), "a line past Int64"),
    (encode({**INERT, "observed_at_utc": "2026-11-30T00:53:20Z"}), "a twin naming another instant"),
    (encode({**INERT, "attributes": {"n": 2**64}}), "an attribute past Int64"),
    (encode({**INERT, "attributes": {"a": DEEP}}), "attributes nested too deeply"),
    (encode(INERT).replace(b'"kind": "log_line"', b'"kind": "gossip", "kind": "log_line"'), "a duplicated kind, one unknown"),
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
def test_what_is_not_certainly_a_valid_record_is_left_to_pydantic(raw: bytes, why: str) -> None:
    assert read_observation(raw, None) is None, why
    same_record(raw)


def test_a_twin_in_another_form_of_the_same_instant_is_left_to_pydantic() -> None:
    # pydantic accepts it (and rewrites the twin); the fast reading takes the canonical form only
    raw = encode({**INERT, "observed_at": 1796000000000000000, "observed_at_utc": "2026-11-30T00:53:20+00:00"})
    assert read_observation(raw, None) is None
    assert isinstance(decode_record(raw, None), Observation)


def test_a_record_over_the_limit_is_left_to_pydantic_which_says_so() -> None:
    raw = encode(INERT)
    assert read_observation(raw, len(raw)) is not None
    assert read_observation(raw, len(raw) - 1) is None
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
                                              "gpu.uuid", "gpu.pci_bus_id", "metric.temperature_gpu",
                                              "metric.ecc_uncorrected_volatile", "attributes.a", "x"]


def alike(value: object) -> st.SearchStrategy:
    """Values of the type of ``value``: the mutations most likely to stay valid."""
    if isinstance(value, bool) or value is None:
        return st.none() | st.booleans()
    if isinstance(value, int):
        return st.sampled_from(INT_EDGES) | st.integers(min_value=-(2**64), max_value=2**64)
    if isinstance(value, float):
        return st.sampled_from([0.0, 1.0, -0.0, 0.5, 1.0000001, -1e-300, 95.0, 1e6]) | st.floats(min_value=-1, max_value=2) | st.integers(0, 2)
    if isinstance(value, str):
        return st.sampled_from(["", "Xid", "NVRM: Xid (PCI:0000:9c:00): 79, pid=1", "a\\nb", "\u00e9\u2028", "\ud800",
                                "0000:9c:00", "00000000:9C:00.0"]) | st.text(max_size=30)
    if isinstance(value, dict):
        return st.dictionaries(st.text(max_size=6), scalars, max_size=3)
    return values


@st.composite
def mutated(draw) -> bytes:
    record = json.loads(json.dumps(draw(st.sampled_from([INERT, CANDIDATE, *LOG_LINES[:12], *SAMPLES[:8], *OTHERS]))))
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
@pytest.mark.slow
def test_what_the_fast_reading_accepts_pydantic_reads_with_the_same_values(raw: bytes) -> None:
    same_record(raw)
