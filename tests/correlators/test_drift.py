"""Stack fingerprints and drift: version lines (real ones from shared/fixtures/real) through the
rule pack into fingerprints, drift against AICR recipes (tests/data/aicr, NVIDIA/aicr's format)
and against the other nodes, and the verdicts that drift makes or joins."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pytest

from connectors.aicr import RecipeError, load_recipe, parse_recipe
from connectors.records import group_records
from correlators.attribution import WorkloadInfo, decide
from correlators.config import EngineConfig
from correlators.drift import Baseline, Constraint, compare_versions, drift, drift_events, fingerprint
from correlators.enrich import Allocation
from correlators.rules import load_rule_pack
from schemas.bundle import WorkloadSpec
from schemas.records import Attribution, Observation, Position, Source
from tests.conftest import REAL_FIXTURES as REAL

PACK = load_rule_pack()
AICR = Path(__file__).resolve().parents[1] / "data" / "aicr"
S = 10**9
T0 = 1_796_001_600 * S  # 2026-11-30T01:20:00Z
H200 = REAL / "h200-2026-11"


def extract(text: str, host: str, at: int = T0 + 5 * S, file: str = "test.log") -> list:
    """Every event of ``text`` (grouped into records as the bundle reader does) on ``host``."""
    out = []
    for rec in group_records(text.splitlines()):
        obs = Observation(source=Source(connector="test", instance="drift"), kind="log_line",
                          observed_at=at, time_source="line", time_quality=0.9, host=host,
                          cluster="c1", workload_id="job-1001", body=rec.text,
                          position=Position(file=f"logs/{host}/{file}", line=rec.first_line)).with_id()
        out.extend(PACK.extract(obs))
    return out


def real_line(path: Path, needle: str) -> str:
    return next(ln for ln in path.read_text(encoding="utf-8").splitlines() if needle in ln)


def h200_stack(host: str) -> list:
    """The version events of the real H200 capture, as if logged on ``host``."""
    events = []
    for name in ("dmesg-T.log", "nccl-debug-info-single-rank.log", "nvidia-smi-q.txt"):
        events += [e for e in extract((H200 / name).read_text(encoding="utf-8"), host, file=name)
                   if e.type == "stack.version"]
    return events


def spec(nodes, dur_s=600) -> WorkloadSpec:
    start = dt.datetime.fromtimestamp(T0 / S, tz=dt.timezone.utc)
    return WorkloadSpec(workload_id="job-1001", cluster="c1", state="FAILED", start=start,
                        end=start + dt.timedelta(seconds=dur_s), nodes=list(nodes), ranks_per_node=8)


def verdict(nodes, events, baseline=None) -> Attribution:
    sp = spec(nodes)
    alloc = Allocation.from_workload(sp)
    return decide(WorkloadInfo.from_spec(sp), alloc, [alloc.enrich(e) for e in events], [],
                  ruleset_version="test", baseline=baseline)


# ------------------------------------------------------------------------------- fingerprints

def test_fingerprint_of_the_real_h200_capture() -> None:
    events = h200_stack("node-a01")
    assert fingerprint(events) == {"node-a01": {
        "cuda": "13.0", "driver": "580.159.04", "kernel": "6.18.44-fc-v657-gpu", "nccl": "2.28.9"}}
    by = {(e.attributes["component"], e.attributes.get("reported_by")) for e in events}
    assert ("driver", "kernel_module") in by and ("driver", "nvidia-smi") in by
    nccl = next(e for e in events if e.attributes["component"] == "nccl")
    assert nccl.attributes["built_for_cuda"] == "13.0" and nccl.rule == "stack.nccl_version@1"


def test_fingerprint_keeps_the_latest_line_and_names_hcas() -> None:
    block = (REAL / "public/rc-01/lines.log").read_text(encoding="utf-8")
    hca = [e for e in extract(block, "node-a01") if e.type == "stack.version"]
    assert [(e.attributes["component"], e.attributes["version"]) for e in hca] == [("hca_firmware", "16.28.2006")]
    ca = "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n\tHardware version: 0"
    # the bundle reader keeps ibstat's lines apart: the firmware line alone names no device ...
    apart = [e for e in extract(ca, "node-a01") if e.type == "stack.version"]
    assert fingerprint(apart) == {"node-a01": {"hca_firmware": "28.39.1002"}}
    # ... a record that holds the CA header does
    obs = Observation(source=Source(connector="test", instance="drift"), kind="log_line", observed_at=T0,
                      time_source="line", time_quality=0.9, host="node-a01", cluster="c1", body=ca,
                      position=Position(file="logs/node-a01/ibstat.txt", line=1)).with_id()
    assert fingerprint(PACK.extract(obs)) == {"node-a01": {"hca_firmware/mlx5_0": "28.39.1002"}}
    old = extract(real_line(H200 / "dmesg-T.log", "NVRM: loading"), "node-a01", at=T0)
    new = extract(real_line(H200 / "dmesg-T.log", "NVRM: loading").replace("580.159.04", "580.159.05"),
                  "node-a01", at=T0 + S)
    assert fingerprint(old + new)["node-a01"]["driver"] == "580.159.05"
    assert fingerprint(new + old)["node-a01"]["driver"] == "580.159.05"


# ------------------------------------------------------------------------------- versions

@pytest.mark.parametrize("a,b,want", [
    ("570.124.06", "570.124.6", 0),
    ("570.86.10", "570.124.06", -1),
    ("2.21.5", "2.19.3", 1),
    ("28.39.1002", "28.39.1010", -1),
    ("6.8.0-45-generic", "6.8", 1),
    ("6.8.0-45-generic", "6.8.0-46-generic", -1),
    ("6.18.44-fc-v657-gpu", "6.8", 1),
    ("v26.3.2", "26.3.2", 0),
])
def test_compare_versions(a: str, b: str, want: int) -> None:
    assert compare_versions(a, b) == want
    assert compare_versions(b, a) == -want


def test_constraint_operators() -> None:
    c = lambda op, v: Constraint("driver", op, v)  # noqa: E731
    assert c(">=", "570.124.06").holds("570.124.06") and not c(">=", "570.124.06").holds("570.86.10")
    assert c("<", "6.9").holds("6.8.0-45-generic") and not c("<=", "6.8").holds("6.8.0-45-generic")
    assert c("==", "2.21.5").holds("2.21.5") and c("!=", "2.21.5").holds("2.19.3")
    assert c(">", "13.0").holds("13.1") and not c(">", "13.0").holds("13.0")
    assert c("", "ubuntu").holds("ubuntu") and not c("", "24.04").holds("24.4")
    assert str(c(">=", "6.8")) == ">= 6.8"


# ------------------------------------------------------------------------------- recipes

def test_aicr_recipe_into_a_baseline() -> None:
    b = load_recipe(AICR / "h200-ubuntu-training.yaml")
    assert b.name == "h200-ubuntu-training"
    assert {(c.component, c.op, c.version, c.name) for c in b.constraints} == {
        ("kernel", ">=", "6.8", "OS.sysctl./proc/sys/kernel/osrelease"),
        ("driver", ">=", "580.82.07", "GPU.smi.driver-version"),
        ("cuda", ">=", "13.0", "GPU.smi.cuda-version"),
        ("nccl", "==", "2.28.9", "componentRefs/nccl"),
        ("hca_firmware", "==", "28.39.1002", "componentRefs/hca-firmware"),
    }  # K8s.server.version, OS.release.ID and the gpu-operator chart say nothing of a node's stack
    mixin = load_recipe(AICR / "driver-570-124.yaml")
    assert [(c.component, str(c)) for c in mixin.constraints] == [("driver", ">= 570.124.06"), ("kernel", ">= 6.8")]


@pytest.mark.parametrize("doc,msg", [
    ({"kind": "Deployment", "apiVersion": "apps/v1"}, "kind 'Deployment'"),
    ({"kind": "RecipeMixin", "apiVersion": "aicr.run/v2"}, "apiVersion 'aicr.run/v2'"),
    ({"kind": "RecipeMixin", "apiVersion": "aicr.run/v1beta1", "spec": {"constraints": [{"name": "GPU.smi.driver-version"}]}},
     "spec.constraints[0]: needs 'name' and 'value'"),
    ({"kind": "RecipeMixin", "apiVersion": "aicr.run/v1beta1",
      "spec": {"constraints": [{"name": "GPU.smi.driver-version", "value": "=> 570"}]}}, "unknown operator"),
    ({"kind": "RecipeMixin", "apiVersion": "aicr.run/v1beta1",
      "spec": {"constraints": [{"name": "GPU.smi.driver-version", "value": ">= latest"}]}}, "holds no version number"),
    ([1, 2], "not a YAML mapping"),
])
def test_invalid_recipes_name_the_entry(doc, msg: str) -> None:
    with pytest.raises(RecipeError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        parse_recipe(doc, "r.yaml")


# ------------------------------------------------------------------------------- drift

def test_the_real_h200_stack_meets_its_recipe_and_an_old_driver_does_not() -> None:
    recipe = load_recipe(AICR / "h200-ubuntu-training.yaml")
    real = h200_stack("node-a01")
    assert drift(fingerprint(real), recipe) == []
    old = real_line(H200 / "dmesg-T.log", "NVRM: loading").replace("580.159.04", "570.86.10")
    stale = extract(old, "node-a02")
    found = drift(fingerprint(real + stale), recipe)
    assert [(e.host, e.attributes["component"], e.attributes["found"], e.attributes["expected"],
             e.attributes["basis"], e.attributes["recipe"]) for e in found] == [
        ("node-a02", "driver", "570.86.10", ">= 580.82.07", "recipe", "h200-ubuntu-training")]
    assert found[0].type == "config.drift" and found[0].rule == "drift@1"


def test_hca_firmware_that_differs_from_the_other_nodes() -> None:
    block = (REAL / "public/rc-01/lines.log").read_text(encoding="utf-8")
    events = []
    for host in ("node-a01", "node-a02", "node-a03"):
        events += extract(block, host)
    events += extract(block.replace("16.28.2006", "16.35.2000"), "node-a04")
    fps = fingerprint(events)
    out = drift(fps)
    assert [(e.host, e.attributes["component"], e.attributes["found"], e.attributes["expected"],
             e.attributes["basis"], e.attributes["against"]) for e in out] == [
        ("node-a04", "hca_firmware", "16.35.2000", "16.28.2006", "peers", "the other 3 nodes' 16.28.2006")]
    # two nodes that differ: neither is the odd one out
    two = {h: fps[h] for h in ("node-a01", "node-a04")}
    assert drift(two) == []
    # a recipe pin on the component replaces the peer comparison
    pinned = Baseline("fw", (Constraint("hca_firmware", "==", "16.35.2000"),))
    assert sorted(e.host for e in drift(fps, pinned)) == ["node-a01", "node-a02", "node-a03"]


def test_drift_events_are_placed_in_the_workload_and_carry_the_lines_evidence() -> None:
    line = real_line(H200 / "dmesg-T.log", "NVRM: loading").replace("580.159.04", "570.86.10")
    boot = extract(line, "node-a02", at=T0 - 3 * 3600 * S)  # logged at boot, hours before the job
    prints, out = drift_events(boot, load_recipe(AICR / "driver-570-124.yaml"), ["node-a01", "node-a02"],
                               start_ns=T0, end_ns=T0 + 600 * S)
    assert prints == {"node-a02": {"driver": "570.86.10"}}
    assert len(out) == 1 and out[0].at == T0
    assert out[0].evidence == boot[0].evidence and "mismatch" not in out[0].attributes


# ------------------------------------------------------------------------------- verdicts

def test_nvml_mismatch_with_a_driver_drift_names_the_drift() -> None:
    nodes = ("node-a01", "node-a02", "node-a03")
    mismatch = extract(real_line(REAL / "public/rc-63/lines.log", "Driver/library version mismatch"),
                       "node-a02", at=T0 + 4 * S)
    assert [e.type for e in mismatch] == ["nvml.error"]
    stacks = h200_stack("node-a01") + h200_stack("node-a03")
    line = real_line(H200 / "dmesg-T.log", "NVRM: loading").replace("580.159.04", "570.86.10")
    stale = extract(line, "node-a02", at=T0 - 3600 * S)
    recipe = load_recipe(AICR / "driver-570-124.yaml")

    before = verdict(nodes, mismatch + stacks)  # no version line of node-a02: the mismatch alone
    assert before.root_cause.code == "config.driver_mismatch" and before.fingerprints == []
    after = verdict(nodes, mismatch + stacks + stale, baseline=recipe)
    assert after.root_cause.code == "config.driver_mismatch.drift"
    assert after.root_cause.code.startswith(before.root_cause.code)
    assert after.root_cause.text.startswith(
        "driver 570.86.10 on node-a02 differs from the recipe's >= 570.124.06: the NVML driver/library mismatch")
    assert after.culprits.hosts == ["node-a02"] and after.domain == "config"
    assert after.confidence >= before.confidence
    assert [(f.host, f.components) for f in after.fingerprints] == [("node-a02", {"driver": "570.86.10"})]
    assert any(i.type == "config.drift" for i in after.evidence)
    assert not any(i.type == "stack.version" for i in after.evidence)
    # without a recipe the other two nodes' 580.159.04 is the basis
    peers = verdict(nodes, mismatch + stacks + stale)
    assert peers.root_cause.code == "config.driver_mismatch.drift"
    assert "differs from the other 2 nodes' 580.159.04" in peers.root_cause.text


def test_a_hardware_xid_outweighs_a_driver_drift() -> None:
    nodes = ("node-a01", "node-a02", "node-a03")
    xid = extract("[Mon Nov 30 01:20:40 2026] NVRM: Xid (PCI:0000:00:06): 79, pid=<unknown>, name=<unknown>, "
                  "GPU has fallen off the bus.", "node-a03", at=T0 + 40 * S)
    line = real_line(H200 / "dmesg-T.log", "NVRM: loading").replace("580.159.04", "570.86.10")
    stale = extract(line, "node-a02", at=T0 - 3600 * S)
    v = verdict(nodes, xid + stale + h200_stack("node-a01"), baseline=load_recipe(AICR / "driver-570-124.yaml"))
    assert v.root_cause.code == "gpu.xid.79" and v.culprits.hosts == ["node-a03"]
    assert [(i.type, i.host) for i in v.evidence if i.type == "config.drift"] == [("config.drift", "node-a02")]
    # a drift alone is a probable-at-best config cause
    alone = verdict(nodes, stale + h200_stack("node-a01"), baseline=load_recipe(AICR / "driver-570-124.yaml"))
    assert alone.root_cause.code == "config.drift.driver" and alone.domain == "config"
    assert "(a driver change outside the recipe" in alone.root_cause.text
    assert alone.quality != "definitive"


def test_engine_config_baseline_is_part_of_the_ruleset_version() -> None:
    base = EngineConfig.default()
    assert base.baseline is None and "+recipe." not in base.ruleset_version
    with_recipe = dataclasses.replace(base, baseline=load_recipe(AICR / "h200-ubuntu-training.yaml"))
    assert with_recipe.ruleset_version.startswith(base.ruleset_version + "+recipe.h200-ubuntu-training.")
