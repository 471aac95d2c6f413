"""Hostile and malformed incident bundles: every one is refused with a clear one-line error or
read with the problem in its coverage -- never a traceback, never a file outside the bundle."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from connectors.bundle import BundleConnector, BundleError
from schemas.yamlspec import load_yaml
from streams.replay import replay_bundle

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "incidents" / "public-rc15-pcie-aer-xid79-multinode"


def copy_bundle(tmp_path: Path) -> Path:
    root = tmp_path / "b"
    shutil.copytree(EXAMPLE, root)
    return root


def set_key(root: Path, key: str, value: str) -> None:
    spec = root / "workload.yaml"
    text = spec.read_text()
    if re.search(rf"(?m)^{key}:", text):
        text = re.sub(rf"(?m)^{key}:.*$", f"{key}: {value}", text)
    else:
        text += f"\n{key}: {value}\n"
    spec.write_text(text)


def replay_cli(root: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streams.cli", "replay", str(root), "--no-store"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("key,value,message", [
    ("start", "'0001-01-01T00:00:00Z'", "outside 1900-01-01"),
    ("end", "'9999-12-31T23:59:59Z'", "outside 1900-01-01"),
    ("ranks_per_node", "99999999999999999999", "ranks_per_node"),
])
@pytest.mark.slow
def test_out_of_range_workload_values_are_a_clear_error(tmp_path: Path, key: str, value: str, message: str) -> None:
    root = copy_bundle(tmp_path)
    if key == "ranks_per_node":
        text = (root / "workload.yaml").read_text()
        text = re.sub(r"(?ms)^ranks:.*?(?=^\S)", "", text + "\n") if "ranks:" in text else text
        (root / "workload.yaml").write_text(text)
    set_key(root, key, value)
    with pytest.raises(BundleError, match=message):
        BundleConnector(root)
    run = replay_cli(root)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]


@pytest.mark.slow
def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join(f'*a{i - 1}' for _ in range(9))}]" for i in range(1, 9)]
    bomb = "\n".join(lines) + "\n"
    with pytest.raises(Exception, match="alias"):
        load_yaml(bomb)
    root = copy_bundle(tmp_path)
    (root / "workload.yaml").write_text(bomb + (EXAMPLE / "workload.yaml").read_text())
    run = replay_cli(root)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "alias" in run.stderr, run.stderr[-2000:]


def test_a_symlink_out_of_the_bundle_is_not_read(tmp_path: Path) -> None:
    root = copy_bundle(tmp_path)
    outside = tmp_path / "secret.log"
    outside.write_text("Nov 30 01:00:00 node-a02 kernel: NVRM: Xid (PCI:0000:9c:00): 79, pid=1, GPU has fallen off the bus.\n")
    host_dir = next(p for p in (root / "logs").iterdir() if p.is_dir() and p.name != "_scheduler")
    os.symlink(outside, host_dir / "linked.log")
    result = replay_bundle(root)
    entry = next(c for c in result.attribution.coverage if c.source.endswith("linked.log"))
    assert entry.status == "failed" and "outside the bundle" in entry.detail
    assert not any(o.kind == "log_line" and (o.position.file or "").endswith("linked.log") for o in result.observations)


def test_a_gzip_bomb_is_stopped_at_its_bound_not_unpacked(tmp_path: Path) -> None:
    """A log that gunzips to 100 MiB of spaces (about 1,000x) and a step record table that
    gunzips past its 8 MiB limit: each is refused with the reason, the rest of the bundle
    still decides (the reader unpacks in chunks and stops at the bound)."""
    import gzip

    from connectors.bundle import MAX_STEP_RECORD_BYTES

    root = copy_bundle(tmp_path)
    host_dir = next(p for p in (root / "logs").iterdir() if p.is_dir() and p.name != "_scheduler")
    (host_dir / "extra.log.gz").write_bytes(gzip.compress(b" " * (100 * 1024 * 1024), compresslevel=1))
    steps = root / "scheduler" / host_dir.name
    steps.mkdir(parents=True)
    table = b"PID      JOBID    STEPID   LOCALID GLOBALID\n" + b" " * (MAX_STEP_RECORD_BYTES + 1024)
    (steps / "scontrol-listpids.txt.gz").write_bytes(gzip.compress(table, compresslevel=1))
    result = replay_bundle(root)
    coverage = {c.source.rsplit("/", 1)[-1]: c for c in result.attribution.coverage}
    assert coverage["extra.log.gz"].status == "failed"
    assert "decompression bomb" in coverage["extra.log.gz"].detail
    assert coverage["scontrol-listpids.txt.gz"].status == "failed"
    assert f"over {MAX_STEP_RECORD_BYTES} bytes after gunzip" in coverage["scontrol-listpids.txt.gz"].detail
    assert result.attribution.root_cause.code == replay_bundle(EXAMPLE).attribution.root_cause.code


def test_the_zero_filled_tail_a_crash_leaves_is_left_out_and_the_log_still_read(tmp_path: Path) -> None:
    """The dmesg of the node that crashed ends in 600 NUL bytes (blocks allocated, never
    written): the tail is left out, the file is read, its XID 79 still decides."""
    root = copy_bundle(tmp_path)
    dmesg = root / "logs" / "node-a02" / "dmesg-raw.log"
    dmesg.write_bytes(dmesg.read_bytes() + b"\x00" * 600)
    result = replay_bundle(root)
    want = replay_bundle(EXAMPLE).attribution
    assert (result.attribution.root_cause.code, result.attribution.culprits.hosts) == (
        want.root_cause.code, want.culprits.hosts) == ("gpu.xid.79", ["node-a02"])
    entry = next(c for c in result.attribution.coverage if c.source.endswith("node-a02/dmesg-raw.log"))
    assert entry.status == "present" and "600 NUL bytes at the end" in entry.detail


def test_a_replay_keeps_the_scheduler_records_with_its_evidence() -> None:
    """So what `faultstream replay` stores can be replayed from ClickHouse and exported."""
    result = replay_bundle(EXAMPLE)
    formats = {o.format for o in result.observations if o.kind in ("scheduler_event", "health_event")}
    assert "workload_yaml" in formats and "coverage" in formats


def test_unparseable_command_keys_are_a_clear_cli_error() -> None:
    env = {**os.environ, "FAULTSTREAM_COMMAND_KEYS": "not json"}
    run = subprocess.run([sys.executable, "-m", "streams.cli", "remediation", "approve", "act-0", "--by", "alice",
                          "--reason", "test"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=env)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "command key settings" in run.stderr


@pytest.mark.slow
def test_a_replay_whose_store_is_held_prints_its_verdict_and_says_why_it_was_not_stored(tmp_path: Path) -> None:
    """Two replays on one embedded store: the second still prints its verdict, then exits 2
    with the reason and what to do (chDB allows one process per directory)."""
    store = tmp_path / "ch"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from sinks.clickhouse import ClickHouseSink; "
         f"s = ClickHouseSink('chdb://{store}'); print('ready', flush=True); time.sleep(60)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        run = subprocess.run([sys.executable, "-m", "streams.cli", "replay", str(EXAMPLE), "--json",
                              "--clickhouse", f"chdb://{store}"], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert '"gpu.xid.79' in run.stdout  # the verdict was printed
    assert "were not stored" in run.stderr and "--no-store" in run.stderr
