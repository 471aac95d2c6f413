"""The `faultstream` command line on the example bundles: replay (rich and --json), rows in
ClickHouse, byte-identical reruns, score, and clear errors for broken bundles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from streams.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "incidents"
BUNDLES = sorted(p.parent for p in EXAMPLES.glob("*/expected.yaml"))
SCHEMA = json.loads((ROOT / "schemas" / "json" / "attribution.schema.json").read_text())

runner = CliRunner()


def test_there_are_enough_example_bundles():
    assert len(BUNDLES) >= 8, [b.name for b in BUNDLES]


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
@pytest.mark.slow
def test_replay_json_is_valid_and_byte_identical_three_times(bundle):
    outputs = []
    for _ in range(3):
        result = runner.invoke(app, ["replay", str(bundle), "--json", "--no-store"])
        assert result.exit_code == 0, result.output
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1] == outputs[2]
    records = [json.loads(line) for line in outputs[0].strip().splitlines()]
    # the workload verdicts first (workload.yaml's, then workloads/*.yaml); a fabric fault adds
    # its fabric-port and incident verdicts
    kinds = [r["scope"]["kind"] for r in records]
    jobs = kinds.count("workload")
    assert jobs >= 1 and kinds[:jobs] == ["workload"] * jobs
    assert kinds[jobs:] == ["fabric_port", "incident"] * ((len(kinds) - jobs) // 2)
    for record in records:
        jsonschema.validate(record, SCHEMA)
        for key in ("scope", "domain", "quality", "confidence", "revision"):
            assert key in record
        assert {"hosts", "ranks", "ports"} <= set(record["culprits"])
        assert record["root_cause"]["code"]


@pytest.mark.slow
def test_score_examples_is_all_hits():
    result = runner.invoke(app, ["score", str(EXAMPLES)])
    assert result.exit_code == 0, result.output
    assert f"{len(BUNDLES)} hit, 0 miss" in result.stdout


def test_score_follows_linked_bundles_once_and_names_a_missing_directory(tmp_path):
    bundle = next(b for b in BUNDLES if "rc15" in b.name)
    (tmp_path / "a").symlink_to(bundle, target_is_directory=True)
    (tmp_path / "loop").symlink_to(tmp_path, target_is_directory=True)
    result = runner.invoke(app, ["score", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "1/1 hit, 0 miss" in result.stdout
    missing = runner.invoke(app, ["score", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and f"no such directory: {tmp_path / 'nope'}" in missing.output


@pytest.mark.slow
def test_score_calibration_on_every_labelled_bundle_keeps_the_quality_promises():
    """Every labelled bundle: the examples and the real public bundles (shared fixtures)."""
    real = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "real" / "bundles"
    assert real.is_dir(), f"the real bundles are missing: {real}"
    result = runner.invoke(app, ["score", "--calibration", str(EXAMPLES), str(real)], terminal_width=200)
    table = result.stdout.split("calibration (right", 1)[1]
    rows = {line.split()[0]: line.split() for line in table.splitlines()
            if line.split() and line.split()[0] in ("definitive", "probable", "ambiguous", "insufficient")}
    assert set(rows) == {"definitive", "probable", "ambiguous", "insufficient"}
    assert sum(int(r[1]) for r in rows.values()) >= len(BUNDLES) + 33
    assert rows["definitive"][-1] == "yes" and rows["probable"][-1] == "yes", table


REAL_BUNDLES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "real" / "bundles"


@pytest.mark.parametrize("bundle", sorted(p.parent.name for p in REAL_BUNDLES.glob("*/*/expected.yaml")))
def test_every_real_public_bundle_scores(bundle):
    """The 33 bundles built from real public threads (shared fixtures, never edited)."""
    from streams.replay import replay_bundle, score as score_one

    (path,) = REAL_BUNDLES.glob(f"*/{bundle}")
    result = replay_bundle(path)
    assert result.expected is not None, result.expected_error
    row = score_one(result.attribution, result.expected, bundle, result.attributions)
    assert row.hit, f"{bundle}: {row.got}: {'; '.join(row.misses)}"


def test_the_real_public_bundles_are_there():
    assert len(list(REAL_BUNDLES.glob("*/*/expected.yaml"))) == 33, f"the real bundles are missing: {REAL_BUNDLES}"


def test_replay_writes_rows_to_embedded_clickhouse_once(tmp_path):
    from sinks.clickhouse import ClickHouseSink

    url = f"chdb://{tmp_path / 'ch'}"
    bundle = next(b for b in BUNDLES if "xid31" in b.name or "illegal" in b.name)
    for _ in range(2):  # a rerun adds no duplicate rows
        result = runner.invoke(app, ["replay", str(bundle), "--clickhouse", url])
        assert result.exit_code == 0, result.output
    assert "app.cuda.illegal_address" in result.stdout
    with ClickHouseSink(url) as sink:
        assert sink.count("attributions") == 1
        events = sink.count("events")
        assert events >= 2
        assert sink.count("events", final=False) == events


def test_human_output_names_cause_culprit_and_timeline():
    bundle = next(b for b in BUNDLES if "sigkill" in b.name)
    result = runner.invoke(app, ["replay", str(bundle), "--no-store"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "proc.killed.sigkill" in out
    assert "node-a01" in out
    assert "net.connection_reset" in out


def _broken(tmp_path: Path, name: str, workload: str | None) -> Path:
    bundle = tmp_path / name
    (bundle / "logs" / "node-a01").mkdir(parents=True)
    (bundle / "logs" / "node-a01" / "dmesg.log").write_text("[Mon Nov 30 01:21:04 2026] hello\n")
    if workload is not None:
        (bundle / "workload.yaml").write_text(workload)
    return bundle


@pytest.mark.parametrize(
    "name, workload, needle",
    [
        ("missing", None, "workload.yaml"),
        ("bad-yaml", "workload_id: [unclosed\n", "workload.yaml"),
        ("no-start", "workload_id: j1\nstate: FAILED\nnodes: [node-a01]\n", "start"),
        ("bad-state", "workload_id: j1\nstate: EXPLODED\nstart: 2026-11-30T01:20:00Z\nnodes: [node-a01]\n", "state"),
        ("bad-time", "workload_id: j1\nstate: FAILED\nstart: 2026-13-45T99:00:00Z\nnodes: [node-a01]\n", "start"),
    ],
)
@pytest.mark.slow
def test_broken_workload_yaml_gives_a_clear_error_without_traceback(tmp_path, name, workload, needle):
    bundle = _broken(tmp_path, name, workload)
    proc = subprocess.run(
        [sys.executable, "-m", "streams.cli", "replay", str(bundle), "--no-store"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert needle in proc.stderr
    assert "workload.yaml" in proc.stderr


def test_missing_bundle_dir_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["replay", str(tmp_path / "nope"), "--no-store"])
    assert result.exit_code == 2
    assert "nope" in result.output


def test_bad_inputs_in_a_bundle_are_counted_not_fatal(tmp_path):
    src = next(b for b in BUNDLES if "sigkill" in b.name)
    bundle = tmp_path / "messy"
    shutil.copytree(src, bundle)
    logs = bundle / "logs" / "node-a01"
    (logs / "garbage.bin").write_bytes(bytes(range(256)) * 64)
    (logs / "invalid-utf8.log").write_bytes(b"\xff\xfe broken \xc3\x28 line\n[Mon Nov 30 01:20:31 2026] ok line\n")
    (logs / "empty.log").write_bytes(b"")
    (logs / "huge-line.log").write_bytes(b"x" * (5 * 1024 * 1024) + b"\n")
    (logs / "impossible-time.log").write_text("[Mon Feb 30 99:99:99 2026] NVRM: nonsense\n")
    result = runner.invoke(app, ["replay", str(bundle), "--json", "--no-store"])
    assert result.exit_code == 0, result.output
    att = json.loads(result.stdout)
    assert att["root_cause"]["code"] == "proc.killed.sigkill"
    cov = {c["source"]: c for c in att["coverage"]}
    assert cov["file:logs/node-a01/empty.log"]["status"] == "empty"
    assert cov["file:logs/node-a01/garbage.bin"]["status"] in ("failed", "present")
    assert cov["file:logs/node-a01/garbage.bin"]["unparsed"] > 0 or cov["file:logs/node-a01/garbage.bin"]["status"] == "failed"
    assert "utf" in cov["file:logs/node-a01/invalid-utf8.log"]["detail"].lower()


def test_score_reports_a_broken_bundle_and_scores_the_rest(tmp_path):
    good = next(b for b in BUNDLES if "sigkill" in b.name)
    shutil.copytree(good, tmp_path / "good")
    shutil.copytree(good, tmp_path / "bad-expected")
    (tmp_path / "bad-expected" / "expected.yaml").write_text("domain: not_a_domain\n")
    result = runner.invoke(app, ["score", str(tmp_path)], env={"COLUMNS": "250"})
    assert result.exit_code == 1
    assert "1/2 hit, 1 miss" in result.stdout
    assert "bad-expected" in result.stdout
    # replay does not need expected.yaml: a broken one does not stop it
    replayed = runner.invoke(app, ["replay", str(tmp_path / "bad-expected"), "--json", "--no-store"])
    assert replayed.exit_code == 0, replayed.output


def test_ids_do_not_depend_on_the_bundle_directory_name(tmp_path):
    src = next(b for b in BUNDLES if "sigkill" in b.name)
    shutil.copytree(src, tmp_path / "renamed-copy")
    a = runner.invoke(app, ["replay", str(src), "--json", "--no-store"]).stdout
    b = runner.invoke(app, ["replay", str(tmp_path / "renamed-copy"), "--json", "--no-store"]).stdout
    assert a == b


def test_non_regular_files_are_reported_in_coverage(tmp_path):
    src = next(b for b in BUNDLES if "sigkill" in b.name)
    bundle = tmp_path / "odd"
    shutil.copytree(src, bundle)
    logs = bundle / "logs" / "node-a01"
    (logs / "dangling.log").symlink_to(tmp_path / "does-not-exist")
    (logs / "loop.log").symlink_to(logs / "loop.log")
    os.mkfifo(logs / "pipe.log")
    result = runner.invoke(app, ["replay", str(bundle), "--json", "--no-store"])
    assert result.exit_code == 0, result.output
    cov = {c["source"]: c for c in json.loads(result.stdout)["coverage"]}
    for name in ("dangling.log", "loop.log", "pipe.log"):
        entry = cov[f"file:logs/node-a01/{name}"]
        assert entry["status"] == "failed"
        assert "not a regular file" in entry["detail"]


def test_remediation_list_refuses_a_state_that_does_not_exist():
    """A misspelt --state is an error naming the states, not an empty table (no broker needed:
    it is refused before Kafka is asked)."""
    result = runner.invoke(app, ["remediation", "list", "--state", "bogus", "--state", "done"])
    assert result.exit_code == 2
    assert ("--state bogus: not a state; one of active, approved, cancelled, done, executing, expired, "
            "failed, proposed, rejected") in result.output


def test_a_worker_setting_out_of_range_is_one_line_naming_the_field():
    result = runner.invoke(app, ["worker", "--web-port", "99999"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: worker settings: field 'web_port': Input should be less than or equal to 65535"
