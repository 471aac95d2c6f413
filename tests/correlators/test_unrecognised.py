"""The honest channel: error-severity lines no rule knows become ``log.unrecognised`` events,
are counted in coverage, mined into templates (drain3), keep a verdict near them from
``definitive``, are shown by ``faultstream replay`` and turned into rule skeletons by
``faultstream rules suggest``."""

from __future__ import annotations

import pytest
import random
import re
import shutil
from pathlib import Path

import yaml
from typer.testing import CliRunner

from correlators.unrecognised import mine_templates, severity_of, suggest_rules
from streams.cli import app
from streams.replay import replay_bundle
from tests.correlators.test_rules import PACK, REAL, extract_file, obs_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"


def test_severity_markers_from_their_formats() -> None:
    cases = {
        # NCCL's WARN level (src/include/debug.h), with the host:pid:tid [dev] prefix
        "node-a01:2331:2390 [3] misc/foo.cc:77 NCCL WARN Something new went wrong": "nccl_warn",
        # glog / c10 error and fatal lines
        "[rank2]:[E1130 01:20:31.299000000 Foo.cpp:12] an unseen message": "glog_error",
        "F1130 01:20:31.299000 550 file.py:986] a fatal unseen message": "glog_error",
        # printk levels 0-3 (dmesg -r) and Talos/journald kernel priority
        "<3>[   38.773115] frobnicator 0000:3b:00.0: lost its marbles": "kernel_err",
        "10.0.0.1: kern:     err: [2026-04-22T21:25:20.466440686Z]: frob: lost marbles": "kernel_err",
        "[Oct 31 2023 21:11:20] [ERROR] [tid 527118] an unseen manager error": "level_error",
        "ValueError: an application's own exception": "exception",
        "slurmd: error: some new slurmd complaint": "failure",
        "frobctl: operation failed on device 3": "failure",
    }
    for line, want in cases.items():
        assert severity_of(line) == want, line
    for healthy in [
        "step 12 loss 2.31 lr 3.0e-04",
        "node-a01:2331:2390 [3] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "validation: 0 errors, 0 failures",
        "errors: 0",
        "<6>[   38.773115] nvidia-nvlink: Nvlink Core is being initialized",
        # real: NCCL INFO and glog I lines that mention a failure (h200 nccl-debug-info capture)
        "node-a01:473:473 [0] NCCL INFO Failed to initialize NET plugin IB",
        "[I1130 01:20:12.997542897 TCPStoreLibUvBackend.cpp:1321] [c10d] uv_loop_close failed with:-16 errn:EBUSY desc:resource busy or locked",
    ]:
        assert severity_of(healthy) is None, healthy


def test_unrecognised_event_only_when_no_rule_matches() -> None:
    line = "[rank2]:[E1130 01:20:31.299000000 Frob.cpp:12] [PG ID 0 PG GUID 0 Rank 2] an unseen message"
    (ev,) = PACK.extract(obs_for(line))
    assert ev.type == "log.unrecognised" and ev.rule == "unrecognised@1"
    assert ev.attributes == {"severity": "glog_error", "text": line}
    assert ev.rank == 2
    # an NCCL WARN no specific rule knows is still NCCL's: the nccl.warn fallback keeps it
    (warn,) = PACK.extract(obs_for("node-a01:2331:2390 [3] misc/foo.cc:77 NCCL WARN Something new went wrong"))
    # (collected on obs-host: the prefix's host is evidence, correlators.identity)
    assert warn.type == "nccl.warn" and warn.host == "obs-host" and warn.gpu.index == 3
    assert warn.attributes["line_host"] == "node-a01"
    known = PACK.extract(obs_for("NVRM: Xid (PCI:0000:02:00): 79, pid=0, GPU has fallen off the bus."))
    assert [e.type for e in known] == ["gpu.xid"]
    # a text is truncated, never interpreted
    (long_ev,) = PACK.extract(obs_for("ValueError: " + "x" * 5000))
    assert len(long_ev.attributes["text"]) == 400


def test_healthy_real_output_gives_no_unrecognised_line() -> None:
    for rel in ["h200-2026-11/nccl-debug-info-single-rank.log"]:
        assert [e for e in extract_file(REAL / rel) if e.type == "log.unrecognised"] == []


def test_templates_are_deterministic_whatever_the_order() -> None:
    events = []
    for n in range(12):
        events += PACK.extract(obs_for(f"frobd[{100 + n}]: frob_open failed for unit {n} at 0x{n:04x}", line=n + 1))
        events += PACK.extract(obs_for(f"ValueError: bad shape ({n}, {n + 1})", line=100 + n))
    base = mine_templates(events)
    assert [(t.count, t.template) for t in base] == [
        (12, "frobd[<NUM>]: frob_open failed for unit <NUM> at <HEX>"),
        (12, "ValueError: bad shape (<NUM>, <NUM>)"),
    ] or [(t.count, t.template) for t in base] == [
        (12, "ValueError: bad shape (<NUM>, <NUM>)"),
        (12, "frobd[<NUM>]: frob_open failed for unit <NUM> at <HEX>"),
    ]
    rnd = random.Random(5)
    for _ in range(5):
        shuffled = list(events)
        rnd.shuffle(shuffled)
        assert mine_templates(shuffled) == base


def test_suggested_rule_skeleton_is_yaml_whose_pattern_matches_its_example() -> None:
    events = []
    for n in range(3):
        events += PACK.extract(obs_for(f"frobd[{100 + n}]: frob_open failed for unit {n} at 0x{n:04x}", line=n + 1))
    text = suggest_rules(mine_templates(events))
    doc = yaml.safe_load(text)
    (rule,) = doc["rules"]
    assert rule["version"] == 1 and rule["source"].startswith("TODO")
    assert rule["keywords"] == ["]: frob_open failed for unit"]
    example = rule["examples"][0]["line"]
    assert rule["keywords"][0] in example
    assert re.search(rule["pattern"], example)
    assert "# 3 line(s), severity failure" in text


def _bundle_with_line(tmp_path: Path, line: str) -> Path:
    dst = tmp_path / "b"
    shutil.copytree(EXAMPLES / "h200-xid31-illegal-address", dst)
    log = dst / "logs" / "node-a01" / "dmesg-T.log"
    log.write_text(log.read_text() + line + "\n")
    return dst


def test_unexplained_error_line_near_the_cause_keeps_the_verdict_from_definitive(tmp_path: Path) -> None:
    base = replay_bundle(EXAMPLES / "h200-xid31-illegal-address").attribution
    assert base.quality == "definitive" and base.unrecognised == []
    near = replay_bundle(_bundle_with_line(
        tmp_path, "[Mon Nov 30 01:21:02 2026] frobnicator 0000:3b:00.0: self-test failed")).attribution
    assert near.root_cause.code == base.root_cause.code
    assert near.quality == "probable"
    (t,) = near.unrecognised
    assert (t.count, t.near_cause, t.severity) == (1, True, "failure")
    assert t.template == "frobnicator <PCI>: self-test failed"
    alt = [a for a in near.alternatives if a.code == "log.unrecognised"]
    assert len(alt) == 1 and "self-test failed" in alt[0].text and alt[0].hosts == ["node-a01"]
    dmesg = next(c for c in near.coverage if c.source.endswith("dmesg-T.log"))
    assert dmesg.unrecognised == 1
    assert next(c for c in near.coverage if c.source == "host:node-a01").unrecognised == 1


def test_error_line_far_from_the_cause_is_reported_but_does_not_lower_quality(tmp_path: Path) -> None:
    # inside the window (it ends 300 s after the job), more than near_s (120 s) after the cause
    far = replay_bundle(_bundle_with_line(
        tmp_path, "[Mon Nov 30 01:25:30 2026] frobnicator 0000:3b:00.0: self-test failed")).attribution
    assert far.quality == "definitive"
    (t,) = far.unrecognised
    assert t.near_cause is False
    assert not [a for a in far.alternatives if a.code == "log.unrecognised"]


def test_replay_shows_and_rules_suggest_prints_unrecognised_lines(tmp_path: Path) -> None:
    bundle = _bundle_with_line(tmp_path, "[Mon Nov 30 01:21:02 2026] frobnicator 0000:3b:00.0: self-test failed")
    runner = CliRunner()
    out = runner.invoke(app, ["replay", str(bundle), "--no-store"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "1 error line no rule knows (1 near the cause): --verbose lists their templates" in out.output
    out = runner.invoke(app, ["replay", str(bundle), "--no-store", "--verbose"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "1 error line no rule knows, 1 template" in out.output
    assert "frobnicator <PCI>: self-test failed" in out.output
    sug = runner.invoke(app, ["rules", "suggest", str(bundle)])
    assert sug.exit_code == 0, sug.output
    (rule,) = yaml.safe_load(sug.output)["rules"]
    assert rule["keywords"] == [": self-test failed"]
    assert rule["examples"][0]["line"].endswith("frobnicator 0000:3b:00.0: self-test failed")
    bad = runner.invoke(app, ["rules", "suggest", str(tmp_path / "missing")])
    assert bad.exit_code == 2


def test_rules_suggest_offers_a_line_only_a_fallback_rule_read(tmp_path: Path) -> None:
    """A bare NCCL WARN no specific rule explains gives the fallback nccl.warn event; it is
    offered for a rule of its own like an unrecognised line."""
    bundle = _bundle_with_line(
        tmp_path, "[Mon Nov 30 01:21:02 2026] node-a01:4107:4160 [0] misc/frob.cc:12 NCCL WARN frobnicator 3 lost its lease")
    events = [e for e in replay_bundle(bundle).events if e.type == "nccl.warn"]
    assert events and all(e.rule.startswith("nccl.warn@") for e in events)
    sug = CliRunner().invoke(app, ["rules", "suggest", str(bundle)])
    assert sug.exit_code == 0, sug.output
    (rule,) = yaml.safe_load(sug.output)["rules"]
    assert "frobnicator" in rule["examples"][0]["line"] and "lost its lease" in rule["examples"][0]["line"]


@pytest.mark.slow
def test_rules_coverage_prints_the_framing_matrix_without_a_miss() -> None:
    out = CliRunner().invoke(app, ["rules", "coverage"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "not: source-line" in out.output and "continuation" in out.output
    from correlators.rules.coverage import FRAMINGS, vocabulary_entries

    n = len(vocabulary_entries())
    assert out.output.strip().splitlines()[-1] == (
        f"{n} entries x {len(FRAMINGS)} framings: {n * len(FRAMINGS)} hits, 0 misses, 0 false positives")


def test_a_log_line_never_drives_the_terminal(tmp_path: Path) -> None:
    bundle = _bundle_with_line(tmp_path, "[Mon Nov 30 01:21:02 2026] frob \x1b[31mself-test\x1b[0m failed")
    out = CliRunner().invoke(app, ["replay", str(bundle), "--no-store"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "\x1b[31m" not in out.output and "\\x1b[31mself-test" in out.output
