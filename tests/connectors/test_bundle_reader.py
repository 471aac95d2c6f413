"""connectors.bundle.BundleConnector on small bundles built from real files."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from pathlib import Path

import pytest

from connectors.bundle import BundleConnector, BundleError
from connectors.timefmt import TimeContext, parse_line_time
from schemas.records import (
    TIME_QUALITY_BOOT_RELATIVE,
    TIME_QUALITY_INHERITED,
    TIME_QUALITY_MINUTES,
    TIME_QUALITY_SECONDS,
    TIME_QUALITY_TRANSPORT,
    Observation,
)
from streams.replay import replay_bundle

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
    # a file with no time at all: the transport's time, the workload's end -- never its start
    untimed = obs[("logs/node-a01/app-cupy-trap.log", 2)]
    assert untimed.time_source == "transport" and untimed.time_quality == TIME_QUALITY_TRANSPORT
    assert untimed.observed_at == utc("2026-11-30T01:21:20Z") != utc(START)
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


# --- time in every form, tolerant workload.yaml ------------------------------------


def small_bundle(root: Path, files: dict[str, str], workload: str) -> Path:
    """A bundle of ``files`` (relative path -> text) and ``workload`` (workload.yaml text)."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "workload.yaml").write_text(workload)
    return root


WORKLOAD = (
    "workload_id: job-2001\nscheduler: slurm\ncluster: c1\nstate: FAILED\n"
    "start: 2026-11-30T01:20:00Z\nend: 2026-11-30T01:30:00Z\nnodes: [node-a01]\n"
)


def test_undated_line_inherits_its_neighbours_time_with_lowered_quality(tmp_path: Path, real_fixtures: Path) -> None:
    """Lines of h200-2026-11/nccl-bad-socket-ifname.log: NCCL INFO/WARN lines carry no time;
    a dated line written before them in the same file lends its time (inferred, INHERITED)."""
    nccl = (real_fixtures / H200 / "nccl-bad-socket-ifname.log").read_text().splitlines()
    undated = [l for l in nccl if "NCCL" in l and parse_line_time(l, TimeContext(2026)) is None]
    assert undated
    text = "\n".join(["2026-11-30 01:21:00,125 - INFO - launching", *undated, ""])
    root = small_bundle(tmp_path / "b", {"logs/node-a01/train.log": text}, WORKLOAD)
    obs = list(BundleConnector(root).observations())
    head, rest = obs[0], obs[1:]
    assert head.time_source == "line" and head.observed_at == utc("2026-11-30T01:21:00.125Z")
    assert rest and all(o.time_source == "inferred" and o.time_quality == TIME_QUALITY_INHERITED for o in rest)
    assert {o.observed_at for o in rest} == {head.observed_at}
    assert all(o.attributes["time_from_line"] == 1 for o in rest)
    # the same lines with no dated line at all: the workload's end, at transport quality
    root = small_bundle(tmp_path / "c", {"logs/node-a01/train.log": "\n".join(undated) + "\n"}, WORKLOAD)
    obs = list(BundleConnector(root).observations())
    assert {(o.time_source, o.time_quality, o.observed_at) for o in obs} == {
        ("transport", TIME_QUALITY_TRANSPORT, utc("2026-11-30T01:30:00Z"))}


def test_year_rollover_in_a_bundle(tmp_path: Path, real_fixtures: Path) -> None:
    """A January workload whose syslog (rc-75's real hung-task lines, re-dated to New Year's
    Eve) starts in December: those lines are of the year before."""
    lines = (real_fixtures / "public" / "rc-75" / "lines.log").read_text().splitlines()[:3]
    eve = [l.replace("Jun 17 20:18:08", "Dec 31 23:59:58") for l in lines]
    new_year = "messages:Jan  1 00:00:03 node-a01 kernel: nfs: server 10.0.0.5 not responding, still trying"
    workload = WORKLOAD.replace("2026-11-30T01:20:00Z", "2027-01-01T00:00:00Z").replace(
        "2026-11-30T01:30:00Z", "2027-01-01T00:10:00Z")
    root = small_bundle(tmp_path / "b", {"logs/node-a01/messages": "\n".join(eve + [new_year]) + "\n"}, workload)
    obs = list(BundleConnector(root).observations())
    assert obs[0].body.startswith("messages:Dec 31 23:59:58 node-a01 kernel: INFO: task strat1_sim")
    assert obs[0].observed_at == utc("2026-12-31T23:59:58Z") and obs[0].format == "syslog"
    assert obs[-1].observed_at == utc("2027-01-01T00:00:03Z")


def test_dmesg_H_and_several_boots_in_a_bundle(tmp_path: Path, real_fixtures: Path) -> None:
    """dmesg -H (relative lines) and a raw dmesg holding two boots (h200-2026-11/dmesg-raw.log
    twice, the second boot given by hosts.<h>.boot_times): timed in file order, and the fast
    path gives the same observations as the full one."""
    raw = (real_fixtures / H200 / "dmesg-raw.log").read_text()
    human = "[Nov30 01:21] NVRM: Xid (PCI:0000:00:06): 31, pid=647\n[  +6.000100] NVRM: Xid (PCI:0000:00:06): 43\n"
    workload = WORKLOAD + (
        "hosts:\n  node-a01:\n    boot_time: 2026-11-30T01:19:36Z\n    boot_times: [2026-11-30T01:28:57Z]\n")
    root = small_bundle(tmp_path / "b", {"logs/node-a01/dmesg-raw.log": raw + raw,
                                         "logs/node-a01/dmesg-H.log": human}, workload)
    full = list(BundleConnector(root).observations())
    fast = list(BundleConnector(root, keywords=["Xid"]).observations())
    assert [o.model_dump() for o in fast] == [o.model_dump() for o in full if "Xid" in o.body]
    h = [o for o in full if o.position.file.endswith("dmesg-H.log")]
    assert [o.observed_at for o in h] == [utc("2026-11-30T01:21:00Z"), utc("2026-11-30T01:21:06.0001Z")]
    assert all(o.format == "dmesg_H" and o.time_quality == TIME_QUALITY_MINUTES for o in h)
    xid31 = [o for o in full if o.position.file.endswith("dmesg-raw.log") and "): 31," in o.body]
    assert [o.observed_at for o in xid31] == [utc("2026-11-30T01:19:36Z") + 88_442_689_000,
                                              utc("2026-11-30T01:28:57Z") + 88_442_689_000]
    assert all(o.time_quality == TIME_QUALITY_BOOT_RELATIVE for o in xid31)


def test_unknown_workload_keys_are_a_coverage_warning(tmp_path: Path, real_fixtures: Path) -> None:
    """Keys a later BUNDLE.md may add do not stop a replay; ranks.N.pid is a known field;
    known keys' values are still validated."""
    workload = WORKLOAD + (
        "priority: high\n"
        "ranks:\n  0: {host: node-a01, gpu: 0, pid: 647, container: c0}\n"
        "hosts:\n  node-a01: {timezone: UTC, rack: r1}\n"
    )
    dmesg = (real_fixtures / H200 / "dmesg-T.log").read_text()
    root = small_bundle(tmp_path / "b", {"logs/node-a01/dmesg-T.log": dmesg}, workload)
    conn = BundleConnector(root)
    assert conn.workload.ranks[0].pid == 647
    assert conn.workload.unknown_keys() == ["hosts.node-a01.rack", "priority", "ranks.0.container"]
    list(conn.observations())
    cov = {c.source: c for c in conn.coverage()}
    warn = cov["file:workload.yaml"]
    assert warn.status == "present"
    assert "3 unknown key(s)" in warn.detail and "ranks.0.container" in warn.detail
    result = replay_bundle(root)  # the replay succeeds and reports it
    att = result.attribution
    assert "xid.31" in att.root_cause.code
    assert any(c.source == "file:workload.yaml" and "priority" in c.detail for c in att.coverage)
    # strict values: a known key with a bad value is still an error naming the field
    (root / "workload.yaml").write_text(workload.replace("pid: 647", "pid: -1"))
    with pytest.raises(BundleError, match="ranks.0.pid"):
        BundleConnector(root)
    (root / "workload.yaml").write_text(WORKLOAD)
    conn = BundleConnector(root)
    list(conn.observations())
    assert "file:workload.yaml" not in {c.source for c in conn.coverage()}


def test_an_undated_decisive_line_is_at_most_probable(tmp_path: Path) -> None:
    """The rc-25 bundle's "fallen off the bus" record decides a definitive verdict when dated;
    the same record without its time (inherited from the line above it) gives probable."""
    src = Path(__file__).resolve().parents[2] / "examples" / "incidents" / "public-rc25-fell-off-bus-no-xid-multinode"
    root = tmp_path / "rc25"
    shutil.copytree(src, root)
    dmesg = root / "logs" / "node-a01" / "dmesg-raw.log"
    record = dmesg.read_text().splitlines()[:3]  # the 3-line "fallen off the bus" record
    assert record[0].startswith("[ 1843.308145] NVRM: The NVIDIA GPU")
    neighbour = "[ 1843.300000] pci 0000:b3:00.0: [10de:26b5] type 00 class 0x030200"
    dmesg.write_text("\n".join([neighbour, *record]) + "\n")
    dated = replay_bundle(root).attribution
    assert dated.root_cause.code == "gpu.xid.79" and dated.quality == "definitive"
    dmesg.write_text("\n".join([neighbour, record[0].removeprefix("[ 1843.308145] "), *record[1:]]) + "\n")
    result = replay_bundle(root)
    undated = result.attribution
    cause = next(e for e in result.events if e.event_id == undated.root_cause.event_id)
    assert cause.time_quality == TIME_QUALITY_INHERITED
    assert undated.root_cause.code == "gpu.xid.79" and undated.quality == "probable"


def test_the_scans_split_hint_equals_the_timestamp_hint() -> None:
    """The batch scan matches the timestamp hint as its regex without the banner alternative, or
    the banner literals: the same lines, banner lines of Slurm included."""
    import polars as pl

    from connectors import bundle
    from connectors.timefmt import TIMESTAMP_HINT

    assert bundle._BANNER_HINT in TIMESTAMP_HINT and bundle._HINT_NO_BANNER != TIMESTAMP_HINT
    lines = ["slurmstepd: error: *** JOB 4242 ON node-a01 CANCELLED AT 2026-11-30T01:02:03 DUE TO TIME LIMIT ***\n",
             "srun: error: *** STEP 4242.0 ON node-a02 CANCELLED AT 2026-11-30T01:02:03 ***\n",
             "text *** JOBS are not banners\n", "*** STEP\n", "[Mon Nov 30 01:21:04 2026] NVRM: Xid 79\n",
             "2026-11-30T01:00:00.000001+00:00 node-a01 systemd[1]: Started\n", "node-a01:1:2 [0] NCCL INFO x\n", "\n"]
    col = pl.col("line")
    frame = pl.DataFrame({"line": lines}).select(
        col.str.contains(TIMESTAMP_HINT).alias("hint"),
        (col.str.contains(bundle._HINT_NO_BANNER) | col.str.contains_any(list(bundle._BANNERS))).alias("split"))
    assert frame["split"].to_list() == frame["hint"].to_list() == [True, True, False, False, True, True, False, False]
