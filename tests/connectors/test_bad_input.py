"""Bad input to the bundle reader: never a crash, never silently dropped.

Each case is built in tmp_path from real lines (shared/fixtures/real) plus the damage."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from connectors.bundle import MAX_BODY_CHARS, BundleConnector, BundleError

START = "2026-11-30T01:20:00Z"
WORKLOAD = f"workload_id: job-1\nstate: FAILED\nstart: {START}\nnodes: [node-a01]\n"


def real_line(real: Path, needle: str, name: str = "dmesg-T.log") -> str:
    return next(l for l in (real / "h200-2026-11" / name).read_text().splitlines() if needle in l)


def bundle(tmp_path: Path, files: dict[str, bytes], workload: str = WORKLOAD) -> Path:
    root = tmp_path / "b"
    root.mkdir(parents=True)
    (root / "workload.yaml").write_text(workload)
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def read(root: Path, keywords=None):
    conn = BundleConnector(root, keywords=keywords)
    obs = list(conn.observations())
    return obs, {c.source: c for c in conn.coverage()}, conn


def test_invalid_utf8_nul_empty_binary_and_continue(tmp_path: Path, real_fixtures: Path) -> None:
    xid = real_line(real_fixtures, "): 31,").encode()
    other = real_line(real_fixtures, "): 43,").encode()
    garbage = bytes(range(256)) * 64 + b"\x00" * 4096
    root = bundle(tmp_path, {
        "logs/node-a01/a-bad-utf8.log": xid + b"\n" + b"[Mon Nov 30 01:21:05 2026] caf\xe9 \xff\xfe\n" + other + b"\n",
        "logs/node-a01/b-binary.bin": garbage,
        "logs/node-a01/c-empty.log": b"",
        "logs/node-a01/d-nul.log": xid + b"\x00\x00\n" + other + b"\n",
        "logs/node-a01/e-ok.log": other + b"\n",
    })
    for keywords in (None, ["Xid", "caf"]):
        obs, cov, conn = read(root, keywords)
        bad = cov["file:logs/node-a01/a-bad-utf8.log"]
        assert bad.status == "present" and "invalid UTF-8 in 1 lines" in bad.detail
        body = next(o.body for o in obs if o.position.file.endswith("a-bad-utf8.log") and o.position.line == 2)
        assert body == "[Mon Nov 30 01:21:05 2026] caf\ufffd \ufffd\ufffd"
        binary = cov["file:logs/node-a01/b-binary.bin"]
        assert binary.status == "failed" and "binary content" in binary.detail and binary.unparsed > 0
        assert not any(o.position.file.endswith(".bin") for o in obs)
        assert cov["file:logs/node-a01/c-empty.log"].status == "empty"
        nul = cov["file:logs/node-a01/d-nul.log"]
        assert nul.status == "present" and "NUL bytes in 1 lines" in nul.detail
        nul_obs = [o for o in obs if o.position.file.endswith("d-nul.log")]
        assert nul_obs[0].body.endswith("\u2400\u2400") and nul_obs[0].format == "dmesg_T"
        assert [o.position.file for o in obs if o.position.file.endswith("e-ok.log")]  # reading went on


def test_huge_single_line(tmp_path: Path, real_fixtures: Path) -> None:
    xid = real_line(real_fixtures, "): 31,")
    huge = xid + " " + "x" * (5 * 1024 * 1024)
    root = bundle(tmp_path, {"logs/node-a01/huge.log": (huge + "\n" + xid + "\n").encode()})
    for keywords in (None, ["Xid"]):
        obs, cov, _ = read(root, keywords)
        assert len(obs) == 2
        cut = obs[0]
        assert cut.attributes["truncated"] == len(huge)
        assert len(cut.body) < MAX_BODY_CHARS + 100 and cut.body.startswith(xid)
        assert cut.format == "dmesg_T" and cut.time_source == "line"
        assert f"1 lines over {MAX_BODY_CHARS} characters: their records cut" in cov["file:logs/node-a01/huge.log"].detail
    assert read(root, None)[0][0].observation_id == read(root, ["Xid"])[0][0].observation_id


def test_unknown_formats_and_impossible_timestamps(tmp_path: Path, real_fixtures: Path) -> None:
    xid = real_line(real_fixtures, "): 31,")
    impossible = xid.replace("Nov 30", "Feb 30")
    root = bundle(tmp_path, {"logs/node-a01/k.log": "\n".join([
        "no timestamp here at all", xid, impossible, "2026-13-45T99:00:00Z also impossible"]).encode()})
    obs, cov, _ = read(root)
    assert [o.time_source for o in obs] == ["inferred", "line", "inferred", "inferred"]
    assert obs[2].format == "unknown" and obs[2].observed_at == obs[1].observed_at
    entry = cov["file:logs/node-a01/k.log"]
    # coverage counts lines with no timestamp-like start (the same on the fast and full
    # paths); the two impossible timestamps are visible on their records instead
    assert (entry.records, entry.unparsed, entry.status) == (4, 1, "present")
    assert [o.format for o in obs] == ["unknown", "dmesg_T", "unknown", "unknown"]
    only_unknown = bundle(tmp_path / "2", {"logs/node-a01/u.txt": b"hello\nworld\n"})
    obs, cov, _ = read(only_unknown)
    assert [o.time_source for o in obs] == ["transport", "transport"]
    assert cov["file:logs/node-a01/u.txt"].unparsed == 2


def test_bad_metrics_fall_back_to_log_lines(tmp_path: Path, real_fixtures: Path) -> None:
    xml = (real_fixtures / "h200-2026-11" / "nvidia-smi-q.xml").read_bytes()
    root = bundle(tmp_path, {
        "metrics/node-a01/cut.xml": xml[: len(xml) // 3],
        "metrics/node-a01/corrupt.gz": b"\x1f\x8b" + b"garbage",
        "metrics/node-a01/ok.xml.gz": gzip.compress(xml),
    })
    obs, cov, _ = read(root)
    cut = cov["file:metrics/node-a01/cut.xml"]
    # telemetry that cannot be read is a failed source, whose lines are still read
    assert "telemetry parse error" in cut.detail and cut.status == "failed"
    assert sum(1 for o in obs if o.position.file.endswith("cut.xml")) == cut.records > 100
    assert cov["file:metrics/node-a01/corrupt.gz"].status == "failed"
    ok = [o for o in obs if o.position.file.endswith("ok.xml.gz")]
    assert len(ok) == 1 and ok[0].kind == "telemetry" and ok[0].metric["temperature_gpu_c"] == 41


def test_file_outside_host_dir_is_read(tmp_path: Path, real_fixtures: Path) -> None:
    root = bundle(tmp_path, {"logs/stray.log": (real_line(real_fixtures, "): 31,") + "\n").encode()})
    obs, cov, _ = read(root)
    assert obs[0].host == "_unknown" and "not inside a <host>/" in cov["file:logs/stray.log"].detail


@pytest.mark.parametrize("workload, message", [
    (None, "workload.yaml: missing"),
    (WORKLOAD.replace(START, "2026-13-30T01:20:00Z"), "workload.yaml: field 'start':"),
    (WORKLOAD.replace("state: FAILED\n", ""), "workload.yaml: field 'state': Field required"),
    (WORKLOAD.replace("state: FAILED", "state: EXPLODED"), "workload.yaml: field 'state':"),
    (WORKLOAD + "hosts:\n  node-a01: {boot_time: yesterday}\n", "field 'hosts.node-a01.boot_time'"),
    (WORKLOAD + "hosts:\n  node-a01: {timezone: Mars/Olympus}\n", "field 'hosts.node-a01.timezone'"),
    (WORKLOAD + "ranks:\n  0: {host: node-z9}\n", "workload.yaml: ranks.0.host"),
    ("workload_id: [unclosed\n", "workload.yaml: invalid YAML at line"),
    ("- just\n- a list\n", "workload.yaml: expected a mapping"),
])
def test_bad_workload_yaml(tmp_path: Path, workload: str | None, message: str) -> None:
    root = tmp_path / "b"
    root.mkdir()
    if workload is not None:
        (root / "workload.yaml").write_text(workload)
    with pytest.raises(BundleError) as err:
        BundleConnector(root)
    assert message in str(err.value)
    assert "Traceback" not in str(err.value)


def test_bad_topology_and_missing_dir(tmp_path: Path) -> None:
    root = bundle(tmp_path, {"topology.yaml": b"links:\n  - {host: node-a01, hca: mlx5_0}\n"})
    with pytest.raises(BundleError, match=r"topology.yaml: field 'links.0.switch': Field required"):
        BundleConnector(root)
    with pytest.raises(BundleError, match="not a bundle directory"):
        BundleConnector(tmp_path / "nope")


def test_exit_code_is_not_sexagesimal(tmp_path: Path) -> None:
    root = bundle(tmp_path, {}, WORKLOAD + "exit_code: 1:0\n")
    assert BundleConnector(root).workload.exit_code == "1:0"


def test_a_query_gpu_csv_without_uuid_is_telemetry_and_unreadable_telemetry_fails_aloud(
        tmp_path: Path, real_fixtures: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An ``nvidia-smi --query-gpu`` CSV with a subset of the columns (no ``uuid``) gives
    telemetry samples, not log lines; a telemetry file that cannot be read is ``failed`` in the
    coverage and says so in the log (stderr)."""
    from tests.connectors.test_telemetry import subset_csv

    real = real_fixtures / "h200-2026-11" / "nvidia-smi-query-gpu.csv"
    text = subset_csv(real, ["timestamp", "index", "pci.bus_id", "temperature.gpu", "power.draw",
                             "clocks_event_reasons.hw_thermal_slowdown", "ecc.errors.uncorrected.volatile.total"])
    xml = (real_fixtures / "h200-2026-11" / "nvidia-smi-q.xml").read_bytes()
    root = bundle(tmp_path, {"metrics/node-a01/gpu.csv": text.encode(),
                             "metrics/node-a01/cut.xml": xml[: len(xml) // 3]})
    with caplog.at_level("WARNING", logger="faultstream.bundle"):
        obs, cov, _ = read(root)
    csv_obs = [o for o in obs if o.position.file == "metrics/node-a01/gpu.csv"]
    assert [(o.kind, o.gpu.index, o.gpu.pci_bus_id, o.metric["power_w"]) for o in csv_obs] == \
        [("telemetry", 0, "0000:00:06", 123.30)]
    entry = cov["file:metrics/node-a01/gpu.csv"]
    assert (entry.status, entry.records) == ("present", 1) and "nvidia_smi_csv: 1 GPU samples" in entry.detail
    assert cov["file:metrics/node-a01/cut.xml"].status == "failed"
    assert any("metrics/node-a01/cut.xml: telemetry cannot be read (ParseError" in r.getMessage()
               for r in caplog.records), caplog.text
