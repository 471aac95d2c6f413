"""The extraction rule pack: every rule's own examples, pack invariants, loader errors, and a
table-driven run over the real fixture files (file -> expected multiset of event types).

Inputs are real lines from shared/fixtures/real beside the checkout (the rule files say which); the few
formats with no real line are written in the exact format their source prints.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from correlators.rules import RuleError, load_rule_pack
from correlators.vocabulary import EVENT_TYPES
from schemas.records import GpuRef, Observation, Position, Source

PACK = load_rule_pack()
from tests.conftest import REAL_FIXTURES as REAL
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
    for key in ("rank", "peer"):
        if key in exp:
            assert getattr(ev, key) == exp[key], f"{where}: {key}={getattr(ev, key)!r}, want {exp[key]!r}"
    if "host" in exp:
        # an example's host is the one its text names: evidence (correlators.identity), kept
        # as attributes.line_host while the event stays on its observation's host
        named = ev.attributes.get("line_host", ev.host)
        assert named == exp["host"], f"{where}: host named {named!r}, want {exp['host']!r}"
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
            # identity comes from the source, whatever host the text names
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
    assert PACK.version == "2026.12.6"
    log_rules = [r for r in PACK.rules if r.kind == "log"]
    assert {kw for r in log_rules for kw in r.keywords} == set(PACK.keywords)
    # a record holding no keyword is never tried against any rule
    assert PACK.candidates("node-a01:473:473 [0] NCCL INFO Using network Socket") == []


# --------------------------------------------------------------------------- real fixture files

def extract_file(path: Path) -> list:
    """Group the file's lines into records the way the bundle reader does
    (connectors.records.group_records) and extract every record."""
    from connectors.records import group_records

    events = []
    for rec in group_records(path.read_text(encoding="utf-8").splitlines()):
        events.extend(PACK.extract(obs_for(rec.text, host="node-x", line=rec.first_line)))
    return events


#: file (relative to fixtures/real) -> expected multiset of event types. Files with no fault
#: (healthy NCCL INFO output, nvidia-smi tables, dcgmi diag, ibqueryerrors) expect no fault, only
#: their version lines (``stack.version``);
#: ``log.unrecognised`` counts the error-severity lines no rule knows (correlators/unrecognised.py).
REAL_EXPECTED: dict[str, dict[str, int]] = {
    "h200-2026-11/app-cupy-illegal-address.log": {"cuda.error": 3},
    "h200-2026-11/app-cupy-misaligned-address.log": {"cuda.error": 3},
    "h200-2026-11/app-cupy-trap.log": {"cuda.error": 3},
    "h200-2026-11/app-torch-cuda-oom.log": {"cuda.error": 1},
    "h200-2026-11/app-torch-device-assert.log": {"cuda.error": 2},
    "h200-2026-11/dmesg-T-second-boot.log": {"gpu.xid": 7, "stack.version": 2},
    "h200-2026-11/dmesg-T.log": {"gpu.xid": 2, "stack.version": 2},
    "h200-2026-11/dmesg-raw.log": {"gpu.xid": 2, "stack.version": 2},
    "h200-2026-11/nccl-bad-socket-ifname.log": {
        "config.no_socket_interface": 2, "nccl.invalid_usage": 1, "stack.version": 1},
    "h200-2026-11/nccl-debug-info-single-rank.log": {"stack.version": 1},
    "h200-2026-11/torchrun-nccl-duplicate-gpu.log": {
        "config.duplicate_gpu": 4, "nccl.invalid_usage": 2, "proc.exited": 1, "stack.version": 3, "torchrun.child_failed": 2, "torchrun.worker_group_failed": 1},
    "h200-2026-11/torchrun-rank-sigkill.log": {
        "log.unrecognised": 1, "net.connection_reset": 1, "proc.killed": 1, "torchrun.child_failed": 2, "torchrun.closing_signal": 1, "torchrun.worker_group_failed": 1},
    "h200-2026-11/torchrun-record-error-file.log": {
        "app.exception": 1, "net.connection_reset": 1, "proc.exited": 1, "torchrun.child_failed": 2, "torchrun.closing_signal": 1, "torchrun.worker_group_failed": 1},
    "public/rc-01/lines.log": {"fabric.port_state": 1, "nccl.ib_completion_error": 1, "stack.version": 1},
    "public/rc-04/lines.log": {"nccl.remote_error": 1, "net.connection_reset": 1, "stack.version": 1},
    "public/rc-05/lines.log": {"config.shm_alloc_failed": 2},
    "public/rc-07/lines.log": {"config.acs_enabled": 1, "nccl.ib_completion_error": 1},
    "public/rc-09/lines.log": {"config.duplicate_gpu": 2, "nccl.invalid_usage": 1, "stack.version": 1},
    "public/rc-11/lines.log": {"nccl.warn": 1, "net.connection_reset": 2},
    "public/rc-13/template-lines.log": {"gpu.xid": 4},
    "public/rc-14/lines.log": {"cuda.error": 1, "gpu.xid": 1},
    "public/rc-15/lines.log": {"gpu.xid": 1, "pcie.aer_corrected": 3, "pcie.aer_uncorrected": 4},
    "public/rc-17/lines.log": {"gpu.fell_off_bus": 1, "gpu.xid": 1, "log.unrecognised": 1},
    "public/rc-18/lines.log": {"gpu.xid": 4},
    "public/rc-21/template-lines.log": {},  # "PCI:0000:xx:00" is a template placeholder
    "public/rc-25/lines.log": {"gpu.fell_off_bus": 1, "gpu.init_failed": 1, "stack.version": 1},
    "public/rc-27/lines.log": {"log.unrecognised": 1},  # ibqueryerrors' timeout on a powered-off port: no fault, shown as unrecognised
    "public/rc-28/lines.log": {"sched.node_state": 1, "sched.prolog_epilog_error": 1},
    "public/rc-33/lines.log": {"stack.version": 2},
    "public/rc-35/lines.log": {},
    "public/rc-37/lines.log": {},
    "public/rc-39/lines.log": {"config.memlock": 1},
    "public/rc-41/lines.log": {"nccl.channel_transport": 2},
    "public/rc-43/lines.log": {"config.net_plugin": 1},
    "public/rc-45/lines.log": {
        "config.no_socket_interface": 1, "log.unrecognised": 1, "nccl.invalid_usage": 1},
    "public/rc-47/lines.log": {"fm.error": 2, "proc.heap_corruption": 1},
    "public/rc-49/lines.log": {"cuda.error": 1},
    "public/rc-51/lines.log": {"cuda.error": 3},
    "public/rc-53/lines.log": {"gpu.sxid": 2, "gpu.xid": 7},
    "public/rc-56/lines.log": {"cuda.error": 1},
    "public/rc-58/lines.log": {"gpu.fell_off_bus": 1, "gpu.xid": 1, "nvml.error": 1, "stack.version": 1},
    "public/rc-60/lines.log": {"k8s.gpu_capacity": 1},
    "public/rc-62/lines.log": {"gpu.init_failed": 8},
    "public/rc-63/lines.log": {"nvml.error": 1},
    "public/rc-64/lines.log": {"nic.cmd_error": 1, "rdma.device_error": 1},
    "public/rc-66/lines.log": {
        "host.oom_kill": 1, "proc.killed": 1, "sched.step_cancelled": 1, "sched.task_exit": 1},
    "public/rc-68/lines.log": {"host.oom_kill": 1},
    "public/rc-69/lines.log": {"cuda.error": 1, "torchrun.closing_signal": 1},
    "public/rc-70/lines.log": {"cuda.error": 1},
    "public/rc-71/lines.log": {},  # the case holds template lines only
    "public/rc-71/template-lines.log": {"log.unrecognised": 1, "nccl.watchdog_timeout": 1},
    "public/rc-73/lines.log": {},  # the case holds template lines only
    "public/rc-73/template-lines.log": {"nccl.watchdog_timeout": 1, "os.error": 2},
    "public/rc-75/lines.log": {"host.hung_task": 1},
    "public/rc-76/lines.log": {"host.service_failed": 3, "sched.config_error": 2},
    "public/rc-77/lines.log": {"proc.signal_received": 2, "sched.step_cancelled": 2},
    "public/formats/mlx5-link-events.log": {"fabric.link_up": 1, "fabric.module_event": 1},
    "public/formats/nvlink-xid-144-145-149-94.log": {"gpu.xid": 4},
    "public/formats/pytorch-heartbeat-monitor.log": {"nccl.heartbeat_timeout": 2},
    "public/formats/xid-13-109.log": {"gpu.xid": 2},
    "public/formats/xid-62-154-gsp.log": {"gpu.xid": 2},
}


def test_real_fixture_table_covers_every_line_file() -> None:
    files = {str(p.relative_to(REAL)) for p in REAL.glob("h200-2026-11/*.log")}
    files |= {str(p.relative_to(REAL)) for p in REAL.glob("public/*/*lines.log")}
    files |= {str(p.relative_to(REAL)) for p in REAL.glob("public/formats/*.log")}
    assert files == set(REAL_EXPECTED)


@pytest.mark.parametrize("rel", sorted(REAL_EXPECTED))
def test_real_fixture_file(rel: str) -> None:
    events = extract_file(REAL / rel)
    assert Counter(e.type for e in events) == Counter(REAL_EXPECTED[rel])


def test_healthy_nccl_info_output_gives_no_event_and_few_rule_tries() -> None:
    path = REAL / "h200-2026-11/nccl-debug-info-single-rank.log"
    lines = path.read_text().splitlines()
    assert len(lines) > 300
    # its one event is the NCCL version line (a stack fact, stack.nccl_version), no fault
    assert [(e.type, e.attributes["version"]) for e in extract_file(path)] == [("stack.version", "2.28.9")]
    tried = sum(1 for ln in lines if PACK.candidates(ln))
    assert tried <= 4, [ln for ln in lines if PACK.candidates(ln)]  # 3 + the NCCL version line


def test_real_values_sigkill_run() -> None:
    ev = extract_file(REAL / "h200-2026-11/torchrun-rank-sigkill.log")
    reset = next(e for e in ev if e.type == "net.connection_reset")
    assert (reset.rank, reset.peer, reset.attributes["backend"], reset.attributes["reason"]) == (
        0, "127.0.0.1:11692", "gloo", "reset")
    killed = next(e for e in ev if e.type == "proc.killed")
    assert killed.attributes["signal"] == 9 and killed.attributes["local_rank"] == 1
    assert killed.gpu == GpuRef(index=1)
    summary = [e for e in ev if e.type == "torchrun.child_failed"]
    root = [e for e in summary if e.attributes["first_observed"]]
    assert len(root) == 1 and root[0].rank == 1 and root[0].attributes["signal"] == 9
    # the summary's "host : node-a01" is evidence; the event is the collecting host's (node-x)
    assert root[0].attributes["signal_name"] == "SIGKILL" and root[0].host == "node-x"
    assert root[0].attributes["line_host"] == "node-a01"
    assert {e.rule for e in summary} == {"torchrun.child_failed@1"}


def test_real_values_rc15_single_lines() -> None:
    ev = extract_file(REAL / "public/rc-15/lines.log")
    by_type = {e.type: e for e in ev}
    assert by_type["pcie.aer_corrected"].attributes["error"] == "Replay Timer Timeout"
    unc = by_type["pcie.aer_uncorrected"].attributes
    assert (unc["error"], unc["fatal"], unc["device"], unc["first"]) == (
        "Surprise Down Error", True, "0000:00:02.0", True)
    assert by_type["gpu.xid"].attributes["xid"] == 79
    assert by_type["gpu.xid"].gpu.pci_bus_id == "0000:02:00"


def test_real_values_rc18_follow_on_xids() -> None:
    ev = extract_file(REAL / "public/rc-18/lines.log")
    assert [e.attributes["caused_by_xid"] for e in ev] == [149, 145, 145, 145]
    assert [e.gpu.pci_bus_id for e in ev] == ["0000:dc:00", "0000:ed:00", "0000:ba:00", "0000:97:00"]


# --------------------------------------------------------------------------- engine details

def test_event_ids_are_deterministic_and_position_sensitive() -> None:
    line = "NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus."
    a = PACK.extract(obs_for(line))
    b = PACK.extract(obs_for(line))
    c = PACK.extract(obs_for(line, line=2))
    assert a[0].event_id == b[0].event_id != c[0].event_id


def test_telemetry_event_carries_obs_gpu_and_time() -> None:
    ev = PACK.extract(obs_for(metric={"ecc_uncorrected_volatile": 1.0, "sw_power_cap": 1.0,
                                      "pcie_replay_counter": 0.0},
                              gpu=GpuRef(index=0, pci_bus_id="0000:07:00")))
    assert [e.type for e in ev] == ["telemetry.ecc_uncorrected", "telemetry.sw_power_cap"]
    assert all(e.gpu == GpuRef(index=0, pci_bus_id="0000:07:00") and e.at == AT for e in ev)


def test_watchdog_timeout_is_backdated() -> None:
    line = ("[rank3]:[E1130 01:30:31.299000000 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=8, "
            "NumelOut=8, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.")
    (ev,) = PACK.extract(obs_for(line))
    assert ev.began_at == AT - 600_017_000_000 and ev.effective_at == ev.began_at


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "extra.yaml"
    p.write_text(text)
    return p


def test_extra_rule_file_is_added_and_changes_version(tmp_path: Path) -> None:
    extra = _write(tmp_path, """
rules:
  - id: site.custom_fault
    version: 2
    source: site runbook
    keywords: ["CUSTOMFAULT"]
    pattern: 'CUSTOMFAULT code=(?P<code>\\d+)'
    event: host.kernel_oops
    fields: {code: int}
    examples:
      - line: "CUSTOMFAULT code=7"
        expect: {type: host.kernel_oops, attributes: {code: 7}}
""")
    pack = load_rule_pack([extra])
    assert pack.version.startswith("2026.12.6+") and "CUSTOMFAULT" in pack.keywords
    (ev,) = pack.extract(obs_for("CUSTOMFAULT code=7"))
    assert ev.rule == "site.custom_fault@2" and ev.attributes == {"code": 7}
    assert load_rule_pack() is PACK  # the default pack is cached and untouched


@pytest.mark.parametrize(
    "body, message",
    [
        ("event: no.such_type", "extra.yaml: rule 'bad.rule': field 'event'"),
        ("event: host.kernel_oops\n    fields: {nogroup: int}", "field 'fields.nogroup'"),
        ("event: host.kernel_oops\n    fields: {x: integer}", "field 'fields.x.type'"),
        ("event: host.kernel_oops\n    code: not_registered", "field 'code'"),
        ("event: host.kernel_oops\n    frobnicate: 1", "field 'frobnicate'"),
    ],
)
def test_bad_rule_file_names_file_rule_and_field(tmp_path: Path, body: str, message: str) -> None:
    extra = _write(tmp_path, f"""
rules:
  - id: bad.rule
    version: 1
    source: test
    keywords: ["X="]
    pattern: 'X=(?P<x>\\d+)'
    {body}
    examples:
      - line: "X=1"
        expect: []
""")
    with pytest.raises(RuleError) as err:
        load_rule_pack([extra])
    assert message in str(err.value)


def test_duplicate_id_and_bad_regex_are_rejected(tmp_path: Path) -> None:
    dup = _write(tmp_path, """
rules:
  - id: gpu.xid
    version: 9
    source: test
    keywords: ["NVRM: Xid"]
    pattern: 'NVRM: Xid'
    event: gpu.xid
    examples: [{line: "NVRM: Xid", expect: []}]
""")
    with pytest.raises(RuleError, match=r"rule 'gpu.xid': field 'id': duplicate id \(also in gpu.yaml\)"):
        load_rule_pack([dup])
    bad = _write(tmp_path, """
rules:
  - id: bad.regex
    version: 1
    source: test
    keywords: ["X"]
    pattern: 'X(?P<x>'
    event: gpu.xid
    examples: [{line: "X", expect: []}]
""")
    with pytest.raises(RuleError, match=r"rule 'bad.regex': field 'pattern': does not compile"):
        load_rule_pack([bad])


