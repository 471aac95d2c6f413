"""The extraction rule pack: every rule's own examples, pack invariants, loader errors, and a
table-driven run over the real fixture files (file -> expected multiset of event types).

Inputs are real lines from /work/shared/fixtures/real (the rule files say which); the few
formats with no real line are written in the exact format their source prints.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import pytest

from correlators.rules import RuleError, load_rule_pack
from correlators.vocabulary import EVENT_TYPES
from schemas.records import GpuRef, Observation, Position, Source

PACK = load_rule_pack()
REAL = Path("/work/shared/fixtures/real")
AT = 1_796_001_631_299_000_000  # 2026-11-30T01:20:31.299Z in ns


def obs_for(text: str | None = None, metric: dict | None = None, *, host: str = "obs-host",
            line: int = 1, gpu: GpuRef | None = None) -> Observation:
    return Observation(
        source=Source(connector="test", instance="rules"),
        kind="telemetry" if metric is not None else "log_line",
        observed_at=AT,
        time_source="line",
        time_quality=0.9,
        host=host,
        cluster="c1",
        workload_id="job-1001",
        gpu=gpu,
        body=text,
        metric=metric,
        position=Position(file="test.log", line=line),
    ).with_id()


def check_event(ev, exp: dict, where: str) -> None:
    assert ev.type == exp["type"], where
    for key, val in exp.get("attributes", {}).items():
        assert key in ev.attributes, f"{where}: attribute {key!r} missing in {ev.attributes}"
        got = ev.attributes[key]
        assert got == val and type(got) is type(val), f"{where}: {key}={got!r}, want {val!r}"
    for key in ("host", "rank", "peer"):
        if key in exp:
            assert getattr(ev, key) == exp[key], f"{where}: {key}={getattr(ev, key)!r}, want {exp[key]!r}"
    if "gpu" in exp:
        assert ev.gpu is not None, f"{where}: no gpu"
        for key, val in exp["gpu"].items():
            assert getattr(ev.gpu, key) == val, f"{where}: gpu.{key}={getattr(ev.gpu, key)!r}"
    if "began_at_offset_ms" in exp:
        assert ev.began_at == AT + exp["began_at_offset_ms"] * 1_000_000, where


@pytest.mark.parametrize("rule_id", [r.id for r in PACK.rules])
def test_rule_examples(rule_id: str) -> None:
    rule = PACK.rule(rule_id)
    assert rule.examples, rule_id
    for i, ex in enumerate(rule.examples):
        where = f"{rule.file}:{rule_id} example {i}"
        if rule.kind == "log":
            assert any(kw in ex.text for kw in rule.keywords) or not ex.expect, (
                f"{where}: holds none of the rule's keywords {rule.keywords}")
            obs = obs_for(ex.text)
        else:
            obs = obs_for(metric=dict(ex.metric), gpu=GpuRef(index=3, pci_bus_id="0000:9c:00"))
        events = [e for e in PACK.extract(obs) if e.rule == rule.ref]
        assert len(events) == len(ex.expect), f"{where}: {[(e.type, e.attributes) for e in events]}"
        for ev, exp in zip(events, ex.expect):
            check_event(ev, exp, where)
            # common fields every event carries
            assert ev.at == AT and ev.time_quality == 0.9 and ev.cluster == "c1"
            assert ev.workload_id == "job-1001"
            assert ev.rule == f"{rule.id}@{rule.version}"
            assert ev.evidence[0].observation_id == obs.observation_id
            assert ev.evidence[0].position.line == 1
            assert ev.event_id.startswith("evt-")
            if "host" not in exp:
                assert ev.host == "obs-host", f"{where}: host {ev.host!r}"


def test_every_rule_emits_known_types_and_ids_are_unique() -> None:
    ids = [r.id for r in PACK.rules]
    assert len(ids) == len(set(ids))
    for r in PACK.rules:
        for t in r.events:
            assert t in EVENT_TYPES, (r.id, t)
        for ex in r.examples:
            for exp in ex.expect:
                assert exp["type"] in r.events, (r.id, exp["type"])
        assert r.source and r.version >= 1


def test_pack_keywords_cover_every_log_rule() -> None:
    assert PACK.version == "2026.11.0"
    log_rules = [r for r in PACK.rules if r.kind == "log"]
    assert {kw for r in log_rules for kw in r.keywords} == set(PACK.keywords)
    # a record holding no keyword is never tried against any rule
    assert PACK.candidates("node-a01:473:473 [0] NCCL INFO Using network Socket") == []
