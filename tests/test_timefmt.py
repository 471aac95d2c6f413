"""correlators.timefmt on real lines (shared/fixtures/real) and on impossible timestamps."""

from __future__ import annotations

import datetime as dt
import random
import re
from pathlib import Path

import polars as pl

from correlators.timefmt import TIMESTAMP_HINT, LineTime, TimeContext, parse_line_time
from schemas.records import (
    TIME_QUALITY_BOOT_RELATIVE,
    TIME_QUALITY_EXACT,
    TIME_QUALITY_NO_YEAR,
    TIME_QUALITY_SECONDS,
)

CTX = TimeContext(year=2026, boot_time_ns=None)
HINT = re.compile(TIMESTAMP_HINT)


def utc(text: str) -> int:
    """ISO text -> UTC ns (test helper)."""
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(value.timestamp()) * 1_000_000_000 + value.microsecond * 1000


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def line_with(path: Path, needle: str) -> str:
    return next(l for l in read_lines(path) if needle in l)


def derive_boot_ns(dmesg_t: list[str], dmesg_raw: list[str]) -> int:
    """Boot time from the same kernel log printed by ``dmesg -T`` (whole seconds, truncated)
    and raw: every pair bounds it to [T - raw, T + 1 - raw); take the tightest lower bound."""
    lower = None
    for t_line, raw_line in zip(dmesg_t, dmesg_raw):
        t = parse_line_time(t_line, CTX)
        m = re.match(r"\[ *(\d+)\.(\d+)\]", raw_line)
        if t is None or m is None:
            continue
        assert t_line.split("] ", 1)[1] == raw_line.split("] ", 1)[1]
        raw_ns = int(m[1]) * 1_000_000_000 + int(m[2].ljust(9, "0"))
        bound = t.at_ns - raw_ns
        lower = bound if lower is None else max(lower, bound)
    assert lower is not None
    return lower


def test_dmesg_T_xid31_real(real_fixtures: Path) -> None:
    line = line_with(real_fixtures / "h200-2026-11" / "dmesg-T.log", "Xid (PCI:0000:00:06): 31,")
    got = parse_line_time(line, CTX)
    assert got == LineTime(utc("2026-11-30T01:21:04Z"), TIME_QUALITY_SECONDS, "dmesg_T")


def test_dmesg_raw_needs_boot_time_and_matches_dmesg_T(real_fixtures: Path) -> None:
    d = real_fixtures / "h200-2026-11"
    t_lines = [l for l in read_lines(d / "dmesg-T.log") if l]
    raw_lines = [l for l in read_lines(d / "dmesg-raw.log") if l]
    xid_raw = next(l for l in raw_lines if "): 31," in l)
    assert xid_raw.startswith("[   88.442689]")
    assert parse_line_time(xid_raw, CTX) is None  # no boot time -> no time
    boot = derive_boot_ns(t_lines, raw_lines)
    # the capture started after boot and the boot is within a minute of it
    start = utc((d / "capture-start-utc.txt").read_text().strip()[:26] + "Z")
    assert start - 60 * 10**9 < boot < start
    got = parse_line_time(xid_raw, TimeContext(2026, boot))
    assert got is not None and got.format == "dmesg_raw" and got.quality == TIME_QUALITY_BOOT_RELATIVE
    assert got.at_ns == boot + 88_442_689_000
    assert got.at_ns // 10**9 == utc("2026-11-30T01:21:04Z") // 10**9  # the same second
    xid43 = next(l for l in raw_lines if "): 43," in l)
    assert parse_line_time(xid43, TimeContext(2026, boot)).at_ns // 10**9 == utc("2026-11-30T01:21:10Z") // 10**9


def test_syslog_with_embedded_raw_dmesg_uses_syslog_time(real_fixtures: Path) -> None:
    line = read_lines(real_fixtures / "public" / "rc-14" / "lines.log")[0]
    assert "kernel: [240314.528856]" in line
    got = parse_line_time(line, TimeContext(2025, boot_time_ns=utc("2025-11-29T00:00:00Z")))
    assert got == LineTime(utc("2025-12-02T10:43:35Z"), TIME_QUALITY_NO_YEAR, "syslog")
    berlin = parse_line_time(line, TimeContext(2025, None, tz="Europe/Berlin"))
    assert berlin.at_ns == utc("2025-12-02T09:43:35Z")
    slurmd = line_with(real_fixtures / "public" / "rc-28" / "lines.log", "slurmd[")
    assert parse_line_time(slurmd, TimeContext(2026)).at_ns == utc("2026-02-22T17:46:38Z")


def test_glog_nccl_torchrun_real(real_fixtures: Path) -> None:
    d = real_fixtures / "h200-2026-11"
    e = line_with(d / "torchrun-rank-sigkill.log", "E1130 01:20:31.299000")
    assert parse_line_time(e, CTX) == LineTime(utc("2026-11-30T01:20:31.299000Z"), TIME_QUALITY_EXACT, "glog")
    ranked = line_with(d / "torchrun-nccl-duplicate-gpu.log", "[rank1]:[W1130")
    got = parse_line_time(ranked, CTX)
    assert got.format == "glog" and got.at_ns == utc("2026-11-30T01:20:23Z") + 935_194_063
    bracket = line_with(d / "nccl-debug-info-single-rank.log", "[I1130 01:20:10.577164630")
    assert parse_line_time(bracket, CTX).at_ns == utc("2026-11-30T01:20:10Z") + 577_164_630
    nccl = line_with(d / "torchrun-nccl-duplicate-gpu.log", "NCCL WARN Duplicate GPU")
    assert parse_line_time(nccl, CTX) == LineTime(utc("2026-11-30T01:20:22Z"), TIME_QUALITY_SECONDS, "nccl")
    summary = line_with(d / "torchrun-rank-sigkill.log", "time      :")
    assert parse_line_time(summary, CTX) == LineTime(
        utc("2026-11-30T01:20:31Z"), TIME_QUALITY_SECONDS, "torchrun_summary")
    # untimed NCCL INFO lines and rank-prefixed glog without a time
    info = line_with(d / "nccl-debug-info-single-rank.log", "NCCL INFO cudaDriverVersion")
    assert parse_line_time(info, CTX) is None
    heartbeat = read_lines(real_fixtures / "public" / "formats" / "pytorch-heartbeat-monitor.log")[0]
    assert parse_line_time(heartbeat, CTX) is None


def test_glog_year_and_zone_from_context(real_fixtures: Path) -> None:
    e = line_with(real_fixtures / "h200-2026-11" / "torchrun-rank-sigkill.log", "E1130 01:20:31")
    got = parse_line_time(e, TimeContext(2025, None, tz="America/New_York"))
    assert got.at_ns == utc("2025-11-30T06:20:31.299Z")


def test_nvidia_smi_csv_and_q_timestamps(real_fixtures: Path) -> None:
    d = real_fixtures / "h200-2026-11"
    row = read_lines(d / "nvidia-smi-query-gpu.csv")[1]
    assert parse_line_time(row, CTX) == LineTime(utc("2026-11-30T01:20:00.821Z"), TIME_QUALITY_EXACT, "nvidia_smi_csv")
    stamp = line_with(d / "nvidia-smi-q.txt", "Timestamp")
    assert parse_line_time(stamp, CTX) == LineTime(utc("2026-11-30T01:20:00Z"), TIME_QUALITY_SECONDS, "nvidia_smi_q")


def test_iso8601_variants(real_fixtures: Path) -> None:
    end = (real_fixtures / "h200-2026-11" / "capture-end-utc.txt").read_text().strip()
    got = parse_line_time(end, CTX)
    assert got.format == "iso8601" and got.quality == TIME_QUALITY_EXACT
    assert got.at_ns == utc("2026-11-30T01:21:13Z") + 56_489_330
    # journald short-iso (numeric offset without colon), RFC 3339 with offset, Slurm brackets,
    # Python logging (comma), zone-less (host zone)
    assert parse_line_time("2026-11-30T02:20:22+0100 node-a01 kernel: x", CTX).at_ns == utc("2026-11-30T01:20:22Z")
    assert parse_line_time("2026-11-30T01:20:22.5-05:00 x", CTX).at_ns == utc("2026-11-30T06:20:22.5Z")
    assert parse_line_time("[2026-11-30T01:20:00.123] _slurm_rpc_kill_job", CTX).at_ns == utc("2026-11-30T01:20:00.123Z")
    assert parse_line_time("2026-11-30 01:20:00,250 - INFO - x", CTX).at_ns == utc("2026-11-30T01:20:00.250Z")
    tokyo = parse_line_time("2026-11-30 10:20:00 x", TimeContext(2026, None, tz="Asia/Tokyo"))
    assert tokyo.at_ns == utc("2026-11-30T01:20:00Z") and tokyo.quality == TIME_QUALITY_SECONDS


def test_impossible_timestamps_are_none() -> None:
    for line in [
        "[Mon Nov 31 01:21:04 2026] x",   # Nov 31
        "[Mon Feb 30 01:21:04 2026] x",   # Feb 30
        "[Mon Nov 30 25:21:04 2026] x",   # hour 25
        "[Mon Nov 30 01:21:04 1989] x",   # too early
        "[Mon Nov 30 01:21:04 2101] x",   # too late
        "2026-13-01T00:00:00Z x",         # month 13
        "2026-02-29T00:00:00Z x",         # not a leap year
        "2026-11-30T01:20:00+25:00 x",    # offset out of range
        "E1330 01:20:31.299000 550 f.py:1] x",  # month 13 in glog
        "Feb 30 10:43:35 node kernel: x",  # syslog Feb 30
        "[2026-11-30 01:61:22] node:1:1 [0] NCCL WARN x",
        "  time      : 2026-00-30_01:20:31",
        "2026/11/31 01:20:00.821, 0, GPU-x",
    ]:
        assert parse_line_time(line, CTX) is None, line
    assert parse_line_time("[99999999999.000000] x", TimeContext(2026, 0)) is None
    assert parse_line_time("Feb 29 10:43:35 node kernel: x", TimeContext(2028)) is not None


def _all_real_lines(root: Path) -> list[str]:
    out: list[str] = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out += path.read_text(encoding="utf-8", errors="replace").split("\n")
    return out


def test_hint_is_superset_and_rust_compatible(real_fixtures: Path) -> None:
    lines = _all_real_lines(real_fixtures)
    rng = random.Random(5)
    extra = ["".join(rng.choice("[]0123456789 :-.TZIWEFkernlMoNvDecTimestap_/,") for _ in range(rng.randint(0, 40)))
             for _ in range(20000)]
    lines += extra + ["2026-11-30T02:20:22+0100 x", "[2026-11-30T01:20:00.123] x", "time : 2026-11-30_01:20:31"]
    boot = TimeContext(2026, 1_796_001_575_000_000_000)
    parsed = 0
    for line in lines:
        for ctx in (CTX, boot):
            got = parse_line_time(line, ctx)  # never raises
            if got is not None:
                parsed += 1
                assert HINT.match(line), line
    assert parsed > 1000
    rust = pl.Series(lines, dtype=pl.String).str.contains(TIMESTAMP_HINT).to_list()
    assert rust == [HINT.match(l) is not None for l in lines]
