"""connectors.bundle.BundleConnector on small bundles built from real files."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from pathlib import Path

import pytest

from connectors.bundle import BundleConnector
from correlators.timefmt import TimeContext, parse_line_time
from schemas.records import (
    TIME_QUALITY_INHERITED,
    TIME_QUALITY_SECONDS,
    TIME_QUALITY_TRANSPORT,
    Observation,
)

H200 = "h200-2026-11"
START = "2026-11-30T01:20:00Z"


def utc(text: str) -> int:
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(value.timestamp()) * 1_000_000_000 + value.microsecond * 1000


def boot_time(real: Path) -> int:
    """Boot time of the capture host from dmesg -T vs raw dmesg (see test_timefmt)."""
    ctx = TimeContext(2026)
    lower = None
    t_lines = (real / H200 / "dmesg-T.log").read_text().splitlines()
    raw_lines = (real / H200 / "dmesg-raw.log").read_text().splitlines()
    for t_line, raw_line in zip(t_lines, raw_lines):
        m = re.match(r"\[ *(\d+)\.(\d+)\]", raw_line)
        t = parse_line_time(t_line, ctx)
        bound = t.at_ns - (int(m[1]) * 10**9 + int(m[2].ljust(9, "0")))
        lower = bound if lower is None else max(lower, bound)
    return lower


def iso(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns // 10**9, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + \
        f".{ns % 10**9:09d}Z"


def make_bundle(tmp_path: Path, real: Path, name: str = "incident-1") -> Path:
    root = tmp_path / name
    host = root / "logs" / "node-a01"
    host.mkdir(parents=True)
    for f in ("dmesg-T.log", "dmesg-raw.log", "torchrun-nccl-duplicate-gpu.log",
              "torchrun-rank-sigkill.log", "app-cupy-trap.log"):
        shutil.copy(real / H200 / f, host / f)
    (root / "logs" / "_scheduler").mkdir()
    (root / "logs" / "_scheduler" / "slurmctld.log").write_text(
        "[2026-11-30T01:20:00.100] sched: Allocate JobId=1001 NodeList=node-a01\n"
        "[2026-11-30T01:21:20.000] _job_complete: JobId=1001 WEXITSTATUS 1\n"
    )
    metrics = root / "metrics" / "node-a01"
    metrics.mkdir(parents=True)
    for f in ("nvidia-smi-q.xml", "nvidia-smi-query-gpu.csv", "nvml.json", "nvidia-smi-dmon.txt"):
        shutil.copy(real / H200 / f, metrics / f)
    (root / "fabric" / "leaf-02").mkdir(parents=True)
    shutil.copy(real / "public" / "formats" / "mlx5-link-events.log", root / "fabric" / "leaf-02" / "syslog")
    (root / "workload.yaml").write_text(
        "workload_id: job-1001\nscheduler: slurm\ncluster: c1\nstate: FAILED\nexit_code: 1:0\n"
        f"start: {START}\nend: 2026-11-30T01:21:20Z\nnodes: [node-a01, node-a02]\nranks_per_node: 2\n"
        f"hosts:\n  node-a01:\n    boot_time: {iso(boot_time(real))}\n    timezone: UTC\n"
    )
    (root / "topology.yaml").write_text(
        "links:\n  - {host: node-a01, hca: mlx5_0, switch: leaf-02, switch_port: Eth1/12}\n"
    )
    (root / "expected.yaml").write_text("domain: gpu_hardware\nculprit_hosts: [node-a01]\n")
    return root


def by_pos(obs: list[Observation]) -> dict[tuple[str, int], Observation]:
    return {(o.position.file, o.position.line): o for o in obs}


def test_specs_and_identity(tmp_path: Path, real_fixtures: Path) -> None:
    conn = BundleConnector(make_bundle(tmp_path, real_fixtures))
    assert conn.workload.workload_id == "job-1001" and conn.workload.exit_code == "1:0"
    assert conn.topology.links[0].port_id == "leaf-02/Eth1/12"
    assert conn.expected.culprit_hosts == ["node-a01"]
    obs = list(conn.observations())
    assert all(o.source.connector == "bundle" and o.source.instance == "c1/job-1001" for o in obs)
    assert all(o.cluster == "c1" and o.workload_id == "job-1001" for o in obs)
    assert all(o.observation_id.startswith("obs-") for o in obs)
    assert len({o.observation_id for o in obs}) == len(obs)
    # files in sorted relative-path order, records in file order
    files = [o.position.file for o in obs]
    assert files == sorted(files)
    for f in set(files):
        ls = [o.position.line for o in obs if o.position.file == f]
        assert ls == sorted(ls)


def test_xid_times_dmesg_T_and_raw(tmp_path: Path, real_fixtures: Path) -> None:
    obs = by_pos(list(BundleConnector(make_bundle(tmp_path, real_fixtures)).observations()))
    t = obs[("logs/node-a01/dmesg-T.log", 361)]
    assert "Xid (PCI:0000:00:06): 31" in t.body
    assert (t.kind, t.host, t.format, t.time_source) == ("log_line", "node-a01", "dmesg_T", "line")
    assert t.observed_at == utc("2026-11-30T01:21:04Z") and t.time_quality == TIME_QUALITY_SECONDS
    raw = obs[("logs/node-a01/dmesg-raw.log", 361)]
    assert raw.format == "dmesg_raw" and raw.time_source == "line"
    assert raw.observed_at // 10**9 == t.observed_at // 10**9


def test_inherited_and_transport_times(tmp_path: Path, real_fixtures: Path) -> None:
    obs = by_pos(list(BundleConnector(make_bundle(tmp_path, real_fixtures)).observations()))
    f = "logs/node-a01/torchrun-nccl-duplicate-gpu.log"
    tb = obs[(f, 10)]  # [rank1]: Traceback ... Duplicate GPU detected (14 lines)
    assert tb.body.count("\n") == 13 and tb.rank == 1
    assert tb.time_source == "inferred" and tb.time_quality == TIME_QUALITY_INHERITED
    assert tb.observed_at == utc("2026-11-30T01:20:22Z")  # the NCCL WARN line 9 above it
    assert tb.attributes["time_from_line"] == 9
    head = obs[(f, 2)]  # "*****" before any timestamp: the nearest later one
    assert head.time_source == "inferred" and head.observed_at == utc("2026-11-30T01:20:22Z")
    summary = obs[(f, 59)]
    assert summary.body.startswith("=====") and summary.observed_at == utc("2026-11-30T01:20:23.444Z")
    untimed = obs[("logs/node-a01/app-cupy-trap.log", 2)]
    assert untimed.time_source == "transport" and untimed.time_quality == TIME_QUALITY_TRANSPORT
    assert untimed.observed_at == utc(START)
    # blank lines are not emitted
    assert (f, 1) not in obs


def test_kinds_hosts_and_telemetry(tmp_path: Path, real_fixtures: Path) -> None:
    conn = BundleConnector(make_bundle(tmp_path, real_fixtures))
    obs = list(conn.observations())
    sched = [o for o in obs if o.position.file.startswith("logs/_scheduler/")]
    assert [o.kind for o in sched] == ["scheduler_event"] * 2
    assert sched[0].host == "_scheduler" and sched[0].observed_at == utc("2026-11-30T01:20:00.1Z")
    fabric = [o for o in obs if o.position.file.startswith("fabric/")]
    assert fabric and all(o.host == "leaf-02" and o.kind == "log_line" for o in fabric)
    tele = [o for o in obs if o.kind == "telemetry"]
    assert sorted(o.format for o in tele) == ["nvidia_smi_csv", "nvidia_smi_q_xml", "nvml_json"]
    for o in tele:
        assert o.gpu.uuid == "GPU-00000000-0000-4000-8000-000000000001" and o.gpu.pci_bus_id == "0000:00:06"
        assert o.metric["ecc_uncorrected_volatile"] == 0 and "temperature_gpu_c" in o.metric
    csv = next(o for o in tele if o.format == "nvidia_smi_csv")
    assert csv.observed_at == utc("2026-11-30T01:20:00.821Z") and csv.time_source == "line"
    nvml = next(o for o in tele if o.format == "nvml_json")
    assert nvml.time_source == "transport"
    # dmon: no telemetry parser -> log lines, nothing lost
    dmon = [o for o in obs if o.position.file.endswith("nvidia-smi-dmon.txt")]
    assert len(dmon) == 7 and all(o.kind == "log_line" for o in dmon)


def test_coverage_and_lines_read(tmp_path: Path, real_fixtures: Path) -> None:
    root = make_bundle(tmp_path, real_fixtures)
    conn = BundleConnector(root)
    obs = list(conn.observations())
    cov = {c.source: c for c in conn.coverage()}
    files = sorted(p.relative_to(root).as_posix() for top in ("logs", "metrics", "fabric")
                   for p in (root / top).rglob("*") if p.is_file())
    assert [s for s in cov if s.startswith("file:")] == [f"file:{f}" for f in files]
    assert cov["host:node-a02"].status == "empty"
    assert cov["file:logs/node-a01/dmesg-T.log"].records == 362
    assert cov["file:logs/node-a01/dmesg-T.log"].unparsed == 0
    assert cov["file:logs/node-a01/app-cupy-trap.log"].unparsed == 10  # no line has a time
    assert "no telemetry format recognised" in cov["file:metrics/node-a01/nvidia-smi-dmon.txt"].detail
    expected_lines = sum(len(p.read_text().splitlines()) for f in files for p in [root / f])
    assert conn.lines_read == expected_lines
    # records count physical lines; multi-line records and blank lines make fewer observations
    log_records = sum(c.records for s, c in cov.items() if s.startswith("file:logs/"))
    log_obs = sum(1 for o in obs if o.position.file.startswith("logs/"))
    assert 0 < log_obs < log_records


@pytest.mark.parametrize("keywords", [
    ["Xid"],
    ["NCCL WARN", "Duplicate GPU", "Connection reset by peer"],
    ["ChildFailedError", "fallen off", "NVRM"],
    ["local_rank: 1", "Last error:", "JobId", "Link up"],
])
def test_fast_path_equals_full_path(tmp_path: Path, real_fixtures: Path, keywords: list[str]) -> None:
    root = make_bundle(tmp_path, real_fixtures)
    full_conn = BundleConnector(root)
    full = list(full_conn.observations())
    fast_conn = BundleConnector(root, keywords=keywords)
    fast = list(fast_conn.observations())
    want = [o for o in full if o.kind == "telemetry" or any(k in o.body for k in keywords)]
    assert [o.model_dump() for o in fast] == [o.model_dump() for o in want]
    assert len(fast) > 3
    assert fast_conn.lines_read == full_conn.lines_read
    cov = {c.source: c for c in fast_conn.coverage()}
    assert cov["file:logs/node-a01/dmesg-T.log"].records == 362
    # coverage is path-independent, so replay and the stream report the same
    assert fast_conn.coverage() == full_conn.coverage()


def test_fast_path_on_public_multiline_records(tmp_path: Path, real_fixtures: Path) -> None:
    root = tmp_path / "rc"
    for rc in ("rc-17", "rc-25", "rc-04", "rc-15"):
        (root / "logs" / f"host-{rc}").mkdir(parents=True)
        shutil.copy(real_fixtures / "public" / rc / "lines.log", root / "logs" / f"host-{rc}" / "kern.log")
    (root / "workload.yaml").write_text(
        f"workload_id: j\nstate: FAILED\nstart: {START}\nnodes: [host-rc-17]\n"
        "hosts:\n  host-rc-17: {boot_time: 2026-11-17T00:00:00Z}\n"
    )
    keywords = ["nvidia-bug-report", "fallen off", "Connection reset", "Surprise Down"]
    full = list(BundleConnector(root).observations())
    fast = list(BundleConnector(root, keywords=keywords).observations())
    assert [o.model_dump() for o in fast] == [o.model_dump() for o in full if any(k in o.body for k in keywords)]
    crash = next(o for o in fast if "nvidia-bug-report" in o.body)
    assert crash.body.count("\n") == 2 and crash.position.line == 6
    assert crash.observed_at == utc("2026-11-17T00:00:00Z") + 1084456_074591_000
    rc25 = next(o for o in fast if o.host == "host-rc-25" and "fallen off" in o.body)
    assert rc25.position.line == 1 and rc25.body.count("\n") == 2
    assert rc25.time_source == "transport"  # raw dmesg and no boot time for that host
