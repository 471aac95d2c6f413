"""The committed JSON Schema files under schemas/json/ are current and validate real records.

If ``test_committed_schema_files_are_current`` fails, regenerate with
``python -m schemas.export`` and commit schemas/json/ and schemas/asyncapi.yaml.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from schemas.export import DEFAULT_ASYNCAPI, DEFAULT_DIR, EXPORTED_MODELS, export_json_schemas
from schemas.records import (
    RECORD_MODELS,
    Affected,
    Alternative,
    Attribution,
    CoverageEntry,
    Culprits,
    EvidenceItem,
    EvidenceRef,
    GpuRef,
    Position,
    RootCause,
    Scope,
    Window,
    canonical_json,
    content_id,
)

COMMITTED = Path(__file__).resolve().parents[2] / "schemas" / "json"
COMMITTED_ASYNCAPI = COMMITTED.parent / "asyncapi.yaml"
NAMES = ["observation", "event", "attribution", "remediation_action", "remediation_command",
         "certification", "dead_letter", "topology_observation"]
T0 = 1_796_001_664_123_000_000  # 2026-11-30 01:21:04.123 UTC


def sample_attribution() -> Attribution:
    return Attribution(
        attribution_id=content_id("att", "workload", "c1", "job-1001"),
        revision=2,
        scope=Scope(kind="workload", id="job-1001", cluster="c1"),
        window=Window(start=T0 - 80_000_000_000, end=T0 + 616_000_000_000),
        outcome="failed",
        domain="gpu_hardware",
        root_cause=RootCause(code="gpu.xid.79", text="GPU 0000:9c:00 on node-a01 fell off the bus",
                             event_id="evt-0c1d2e3f4a5b6c7d8e9f0a1b"),
        culprits=Culprits(hosts=["node-a01"], ranks=[0],
                          gpus=[GpuRef(index=0, pci_bus_id="0000:9c:00")]),
        affected=Affected(hosts=["node-a01", "node-a02"], ranks=list(range(1, 16)),
                          workloads=["job-1001"]),
        symptoms=["evt-111111111111111111111111"],
        evidence=[
            EvidenceItem(at=T0, event_id="evt-0c1d2e3f4a5b6c7d8e9f0a1b", type="gpu.xid",
                         role="cause", host="node-a01", summary="XID 79 on 0000:9c:00",
                         observations=[EvidenceRef(
                             observation_id="obs-aaaaaaaaaaaaaaaaaaaaaaaa",
                             position=Position(file="logs/node-a01/dmesg.log", line=1412))]),
            EvidenceItem(at=T0 + 17_000_000, event_id="evt-111111111111111111111111",
                         type="nccl.watchdog_timeout", role="symptom", host="node-a02", rank=9,
                         summary="watchdog timeout ALLREDUCE SeqNum=4711"),
        ],
        confidence=0.93,
        quality="definitive",
        alternatives=[Alternative(code="fabric.link_down", domain="fabric", text="link flap",
                                  score=0.2, hosts=["node-a02"])],
        coverage=[CoverageEntry(source="logs/node-a01", status="present", records=5210, events=3),
                  CoverageEntry(source="metrics/node-a01", status="failed", detail="bad CSV")],
        ruleset_version="rules-2026.11.1",
        engine_version="0.1.0",
        decided_at=T0 + 616_000_000_000,
    )


def test_committed_schema_files_are_current(tmp_path: Path) -> None:
    written = export_json_schemas(tmp_path)
    assert [p.name for p in written] == [f"{n}.schema.json" for n in NAMES] + ["asyncapi.yaml"]
    assert sorted(RECORD_MODELS) == sorted(n for n in NAMES if n not in ("dead_letter", "topology_observation"))
    assert sorted(EXPORTED_MODELS) == sorted(NAMES)
    assert DEFAULT_DIR == COMMITTED
    assert DEFAULT_ASYNCAPI == COMMITTED_ASYNCAPI
    for path in written:
        committed = COMMITTED_ASYNCAPI if path.name == "asyncapi.yaml" else COMMITTED / path.name
        assert committed.exists(), f"{committed} missing: run python -m schemas.export"
        assert committed.read_bytes() == path.read_bytes(), (
            f"{committed} is stale: run python -m schemas.export and commit schemas/json/ "
            "and schemas/asyncapi.yaml"
        )
    assert sorted(p.name for p in COMMITTED.glob("*.schema.json")) == sorted(
        p.name for p in written if p.name.endswith(".schema.json")
    )


def test_a_stale_asyncapi_document_is_detected_and_rewritten(tmp_path: Path) -> None:
    """The staleness check compares bytes: an edited copy differs, and export restores it."""
    path = export_json_schemas(tmp_path)[-1]
    fresh = path.read_bytes()
    path.write_bytes(fresh.replace(b"partitions: 12", b"partitions: 6", 1))
    assert path.read_bytes() != COMMITTED_ASYNCAPI.read_bytes()
    export_json_schemas(tmp_path)
    assert path.read_bytes() == fresh == COMMITTED_ASYNCAPI.read_bytes()


def test_export_is_byte_stable(tmp_path: Path) -> None:
    first = {p.name: p.read_bytes() for p in export_json_schemas(tmp_path / "a")}
    second = {p.name: p.read_bytes() for p in export_json_schemas(tmp_path / "b")}
    assert first == second
    assert first.pop("asyncapi.yaml").endswith(b"\n")
    for data in first.values():
        assert data.endswith(b"}\n") and not data.endswith(b"\n\n")
        text = data.decode()
        assert json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n" == text


@pytest.mark.parametrize("name", NAMES)
def test_schema_files_are_valid_json_schema(name: str) -> None:
    schema = json.loads((COMMITTED / f"{name}.schema.json").read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == EXPORTED_MODELS[name].__name__
    jsonschema.Draft202012Validator.check_schema(schema)


def test_sample_attribution_validates_and_bad_one_does_not() -> None:
    schema = json.loads((COMMITTED / "attribution.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    att = sample_attribution()
    # what `faultstream replay --json` prints: one canonical JSON line per attribution
    line = canonical_json(att)
    validator.validate(json.loads(line))
    for field in ("scope", "domain", "root_cause", "culprits", "quality", "confidence", "revision"):
        assert field in json.loads(line)

    bad = json.loads(line)
    bad["domain"] = "cosmic_rays"
    bad["confidence"] = 1.7
    del bad["quality"]
    errors = sorted(validator.iter_errors(bad), key=lambda e: list(e.path))
    messages = [(list(e.path), e.validator) for e in errors]
    assert (["confidence"], "maximum") in messages
    assert (["domain"], "enum") in messages
    assert ([], "required") in messages
    extra = json.loads(line)
    extra["culprits"]["switches"] = ["leaf-02"]
    assert not validator.is_valid(extra)  # extra="forbid" becomes additionalProperties: false
