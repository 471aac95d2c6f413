"""connectors.timefmt on real lines (shared/fixtures/real), on each documented layout written
exactly as its emitter prints it, and on impossible timestamps."""

from __future__ import annotations

import datetime as dt
import random
import re
from pathlib import Path

import polars as pl

from connectors.timefmt import TIMESTAMP_HINT, LineClock, LineTime, TimeContext, parse_line_time
from schemas.records import (
    TIME_QUALITY_BOOT_RELATIVE,
    TIME_QUALITY_EXACT,
    TIME_QUALITY_INHERITED,
    TIME_QUALITY_MINUTES,
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


# --- every form the wild has: real lines, then each documented layout -------------

PUBLIC = "public"


def test_real_lines_of_many_formats(real_fixtures: Path) -> None:
    """One real line per format from the public cases (file named in each assertion)."""
    pub = real_fixtures / PUBLIC
    # rc-53: talosctl dmesg, RFC 3339 with nanoseconds and Z, behind node/facility/level
    talos = read_lines(pub / "rc-53" / "lines.log")[0]
    assert parse_line_time(talos, CTX) == LineTime(
        utc("2026-04-22T21:25:20Z") + 458_998_481, TIME_QUALITY_EXACT, "talos")
    err = read_lines(pub / "rc-53" / "lines.log")[1]  # "kern:     err:" (level padded)
    assert parse_line_time(err, CTX).at_ns == utc("2026-04-22T21:25:20Z") + 466_440_686
    # rc-47: NVIDIA Fabric Manager log, with its own year
    fm = line_with(pub / "rc-47" / "lines.log", "[ERROR] [tid 527118]")
    assert parse_line_time(fm, CTX) == LineTime(utc("2023-10-31T21:11:20Z"), TIME_QUALITY_SECONDS, "fabricmanager")
    # rc-58: dmesg -T with a space-padded day ("Apr  8") and a Tuesday
    t = line_with(pub / "rc-58" / "lines.log", "[Mon Apr  8 17:04:05 2024]")
    assert parse_line_time(t, CTX) == LineTime(utc("2024-04-08T17:04:05Z"), TIME_QUALITY_SECONDS, "dmesg_T")
    tue = line_with(pub / "rc-58" / "lines.log", "[Tue Apr  9 01:21:38 2024]")
    assert parse_line_time(tue, CTX).at_ns == utc("2024-04-09T01:21:38Z")
    # rc-62: raw dmesg, placed with the boot time
    raw = line_with(pub / "rc-62" / "lines.log", "[   38.773764] NVRM: rm_init_adapter failed")
    boot = utc("2024-03-01T10:00:00Z")
    assert parse_line_time(raw, CTX) is None
    assert parse_line_time(raw, TimeContext(2024, boot)) == LineTime(
        boot + 38_773_764_000, TIME_QUALITY_BOOT_RELATIVE, "dmesg_raw")
    # rc-75: syslog behind a grep -H "messages:" prefix; year from the workload
    msg = read_lines(pub / "rc-75" / "lines.log")[0]
    assert msg.startswith("messages:Jun 17 20:18:08 node-a01 kernel:")
    assert parse_line_time(msg, TimeContext(2019)) == LineTime(utc("2019-06-17T20:18:08Z"), TIME_QUALITY_NO_YEAR, "syslog")
    # rc-76: journalctl -o short (zero-padded day)
    jd = line_with(pub / "rc-76" / "lines.log", "slurmd[12912]: slurmd: error")
    assert parse_line_time(jd, TimeContext(2021)) == LineTime(utc("2021-02-02T09:51:48Z"), TIME_QUALITY_NO_YEAR, "syslog")
    # rc-77: the ISO time inside slurmstepd's CANCELLED banner
    cancel = line_with(pub / "rc-77" / "lines.log", "CANCELLED AT")
    assert parse_line_time(cancel, CTX) == LineTime(utc("2025-01-10T15:27:25Z"), TIME_QUALITY_SECONDS, "slurm_at")
    for line in (talos, err, fm, t, tue, raw, msg, jd, cancel):
        assert HINT.match(line), line


B0 = utc("2026-11-30T01:00:00Z")
REF = TimeContext(2026, B0, ref_ns=utc("2026-11-30T01:20:00Z"))

#: each documented layout, written exactly as its emitter prints it (module doc of timefmt):
#: (line, expected UTC (ISO text, or ns where it has nanoseconds), quality, format)
DOCUMENTED = [
    # util-linux dmesg (sys-utils/dmesg.c print_record)
    ("[Mon Nov 30 01:21:04 2026] NVRM: Xid", "2026-11-30T01:21:04Z", TIME_QUALITY_SECONDS, "dmesg_T"),  # -T / ctime
    ("[Wed Dec  2 01:21:04 2026] x", "2026-12-02T01:21:04Z", TIME_QUALITY_SECONDS, "dmesg_T"),  # %e day, W like glog
    ("[Fri Nov 27 01:21:04 2026 <    0.000123>] x", "2026-11-27T01:21:04Z", TIME_QUALITY_SECONDS, "dmesg_T"),  # -T -d
    ("[   38.773115] NVRM: x", "2026-11-30T01:00:38.773115Z", TIME_QUALITY_BOOT_RELATIVE, "dmesg_raw"),  # default
    ("<6>[   38.773115] NVRM: x", "2026-11-30T01:00:38.773115Z", TIME_QUALITY_BOOT_RELATIVE, "dmesg_raw"),  # -r
    ("<14>[   38.773115] x", "2026-11-30T01:00:38.773115Z", TIME_QUALITY_BOOT_RELATIVE, "dmesg_raw"),  # -r, user facility
    ("kern  :info  : [   38.773115] x", "2026-11-30T01:00:38.773115Z", TIME_QUALITY_BOOT_RELATIVE, "dmesg_raw"),  # -x
    ("kern  :err   : [Mon Nov 30 01:21:04 2026] x", "2026-11-30T01:21:04Z", TIME_QUALITY_SECONDS, "dmesg_T"),  # -x -T
    ("[   38.773115 <    0.000123>] x", "2026-11-30T01:00:38.773115Z", TIME_QUALITY_BOOT_RELATIVE, "dmesg_raw"),  # -d
    ("[Nov30 01:21] NVRM: x", "2026-11-30T01:21:00Z", TIME_QUALITY_MINUTES, "dmesg_H"),  # -H absolute
    ("[Dec 2 01:21] x", "2026-12-02T01:21:00Z", TIME_QUALITY_MINUTES, "dmesg_H"),  # -H, %e day
    ("2026-11-30T01:21:04,123456+00:00 NVRM: x", "2026-11-30T01:21:04.123456Z", TIME_QUALITY_EXACT, "iso8601"),  # iso
    # systemd journalctl output modes (src/shared/logs-show.c output_timestamp_*)
    ("Nov 30 01:20:31 node-a01 kernel: x", "2026-11-30T01:20:31Z", TIME_QUALITY_NO_YEAR, "syslog"),  # short
    ("Nov 30 01:20:31.123456 node-a01 kernel: x", "2026-11-30T01:20:31.123456Z", TIME_QUALITY_NO_YEAR, "syslog"),  # short-precise
    ("2026-11-30T01:20:31+0000 node-a01 unit[1]: x", "2026-11-30T01:20:31Z", TIME_QUALITY_SECONDS, "iso8601"),  # short-iso (old)
    ("2026-11-30T02:20:31+01:00 node-a01 unit[1]: x", "2026-11-30T01:20:31Z", TIME_QUALITY_SECONDS, "iso8601"),  # short-iso
    ("2026-11-30T01:20:31.123456+00:00 node-a01 unit[1]: x", "2026-11-30T01:20:31.123456Z", TIME_QUALITY_EXACT,
     "iso8601"),  # short-iso-precise
    ("Mon 2026-11-30 01:20:31 UTC node-a01 unit[1]: x", "2026-11-30T01:20:31Z", TIME_QUALITY_SECONDS, "journal_full"),
    ("1796001631.123456 node-a01 unit[1]: x", "2026-11-30T01:20:31.123456Z", TIME_QUALITY_EXACT, "journal_unix"),
    ("[   38.773115 <    0.000123 >] node-a01 kernel: x", "2026-11-30T01:00:38.773115Z", TIME_QUALITY_BOOT_RELATIVE,
     "dmesg_raw"),  # short-delta
    # syslog on the wire / in files
    ("Dec  2 10:43:35 node-a01 kernel: x", "2026-12-02T10:43:35Z", TIME_QUALITY_NO_YEAR, "syslog"),  # RFC 3164
    ("<13>Nov 30 01:20:31 node-a01 app: x", "2026-11-30T01:20:31Z", TIME_QUALITY_NO_YEAR, "syslog"),  # with PRI
    ("kern.log:Nov 30 01:20:31 node-a01 kernel: x", "2026-11-30T01:20:31Z", TIME_QUALITY_NO_YEAR, "syslog"),  # grep -H
    ("<165>1 2026-11-30T01:20:31.123Z node-a01 app 12 - - x", "2026-11-30T01:20:31.123Z", TIME_QUALITY_EXACT, "rfc5424"),
    ("node-a01: kern: warning: [2026-11-30T01:20:31.458998481Z]: NVRM: x", utc("2026-11-30T01:20:31Z") + 458_998_481,
     TIME_QUALITY_EXACT, "talos"),
    ("kern: warning: [2026-11-30T01:20:31.458998481Z]: NVRM: x", utc("2026-11-30T01:20:31Z") + 458_998_481,
     TIME_QUALITY_EXACT,
     "talos"),  # talosctl dmesg on one node: no node prefix
    # NVIDIA Fabric Manager
    ("[Nov 30 2026 01:20:31] [ERROR] [tid 527118] x", "2026-11-30T01:20:31Z", TIME_QUALITY_SECONDS, "fabricmanager"),
    # glog ("%c%02d%02d %02d:%02d:%02d.%06d %5d file:line]"), with year, c10d, PyTorch rank prefix
    ("E1130 01:20:31.299000 550 file.py:986] x", "2026-11-30T01:20:31.299Z", TIME_QUALITY_EXACT, "glog"),
    ("E20261130 01:20:31.299000 550 file.py:986] x", "2026-11-30T01:20:31.299Z", TIME_QUALITY_EXACT, "glog"),
    ("[E1130 01:20:31.299000000 ProcessGroupNCCL.cpp:632] x", "2026-11-30T01:20:31.299Z", TIME_QUALITY_EXACT, "glog"),
    ("[rank3]:[E1130 01:20:31.299000000 ProcessGroupNCCL.cpp:632] x", "2026-11-30T01:20:31.299Z", TIME_QUALITY_EXACT,
     "glog"),
    # NCCL (NCCL_DEBUG_TIMESTAMP_FORMAT default "[%F %T] "; with a fraction)
    ("[2026-11-30 01:20:22] node-a01:528:528 [0] init.cc:904 NCCL INFO x", "2026-11-30T01:20:22Z",
     TIME_QUALITY_SECONDS, "nccl"),
    ("[2026-11-30 01:20:22.123456] node-a01:528:528 [0] init.cc:904 NCCL INFO x", "2026-11-30T01:20:22.123456Z",
     TIME_QUALITY_EXACT, "nccl"),
    # Python logging (asctime, comma milliseconds)
    ("2026-11-30 01:20:31,299 - INFO - x", "2026-11-30T01:20:31.299Z", TIME_QUALITY_EXACT, "iso8601"),
    # Slurm log_msg (src/common/log.c): LogTimeFormat iso8601_ms, iso8601, rfc5424_ms, short
    ("[2026-11-30T01:20:31.123] error: x", "2026-11-30T01:20:31.123Z", TIME_QUALITY_EXACT, "iso8601"),
    ("[2026-11-30T01:20:31] error: x", "2026-11-30T01:20:31Z", TIME_QUALITY_SECONDS, "iso8601"),
    ("[2026-11-30T02:20:31.123+01:00] error: x", "2026-11-30T01:20:31.123Z", TIME_QUALITY_EXACT, "iso8601"),
    ("[Nov 30 01:20:31] error: x", "2026-11-30T01:20:31Z", TIME_QUALITY_NO_YEAR, "slurm_short"),
    ("slurmstepd: error: *** JOB 1001 ON node-a01 CANCELLED AT 2026-11-30T01:20:31 ***", "2026-11-30T01:20:31Z",
     TIME_QUALITY_SECONDS, "slurm_at"),
]


def test_documented_layouts() -> None:
    for line, when, quality, fmt in DOCUMENTED:
        at = when if isinstance(when, int) else utc(when)
        assert parse_line_time(line, REF) == LineTime(at, quality, fmt), line
        assert HINT.match(line), line
    lines = [line for line, *_ in DOCUMENTED]
    assert pl.Series(lines, dtype=pl.String).str.contains(TIMESTAMP_HINT).all()


def test_lines_without_an_absolute_time_are_none() -> None:
    for line in (
        "[  +0.000123] NVRM: x",  # dmesg -H relative: only a LineClock times it
        "[<    0.000123>] NVRM: x",  # dmesg --time-format delta: no absolute time anywhere
        "[rank: 0] Received SIGTERM: 15",
        "node-a02:946:988 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion with error 12",
        "[Wednesday] x",
    ):
        assert parse_line_time(line, REF) is None, line


def test_dmesg_H_relative_lines_add_to_the_last_absolute_one() -> None:
    clock = LineClock(REF)
    got = [clock(line) for line in (
        "[  +0.500000] before any absolute line",
        "[Nov30 01:21] NVRM: a",
        "[  +0.000123] b",
        "[ +12.500000] c",  # delta >= 10 s: "[ %+9.06f]"
        "[Nov30 01:22] d",
        "[  +1.000000] e",
    )]
    assert got[0] is None
    assert [g.at_ns for g in got[1:]] == [
        utc("2026-11-30T01:21:00Z"), utc("2026-11-30T01:21:00.000123Z"), utc("2026-11-30T01:21:12.500123Z"),
        utc("2026-11-30T01:22:00Z"), utc("2026-11-30T01:22:01Z")]
    assert {(g.quality, g.format) for g in got[1:]} == {(TIME_QUALITY_MINUTES, "dmesg_H")}
    assert clock.peek("[  +1.0] f") is None  # a look-ahead never moves the clock
    assert clock("[  +1.000000] g").at_ns == utc("2026-11-30T01:22:02Z")


def test_raw_dmesg_with_several_boots(real_fixtures: Path) -> None:
    """The real raw capture (h200-2026-11/dmesg-raw.log) twice in one file: two boots."""
    raw = [l for l in read_lines(real_fixtures / "h200-2026-11" / "dmesg-raw.log") if l]
    first = utc("2026-11-30T01:19:36Z")
    second = utc("2026-11-30T01:28:57Z")
    # the next boot known: placed with it
    clock = LineClock(TimeContext(2026, first, boot_times_ns=(second,)))
    times = [clock(l) for l in raw + raw]
    assert clock.reboots == 1
    n = len(raw)
    assert times[0].at_ns == first + 0 and times[n].at_ns == second
    assert all(t.quality == TIME_QUALITY_BOOT_RELATIVE for t in times)
    xid = next(i for i, l in enumerate(raw) if "): 31," in l)
    assert times[n + xid].at_ns == second + 88_442_689_000
    # the next boot unknown: right after the previous boot's last line, quality lowered
    clock = LineClock(TimeContext(2026, first))
    times = [clock(l) for l in raw + raw]
    last = times[n - 1].at_ns
    assert times[n].at_ns == last and times[n].quality == TIME_QUALITY_INHERITED
    assert times[n + xid].at_ns == last + 88_442_689_000
    assert all(t.at_ns >= last for t in times[n:])
    # the stateless parser places every line with the one boot time it knows
    assert parse_line_time(raw[xid], TimeContext(2026, first)).at_ns == first + 88_442_689_000


def test_year_rollover_from_the_workload_window() -> None:
    """A December line of a January workload is of the year before; a January line of a
    December workload of the year after; without a reference, ``year``."""
    january = TimeContext(2027, ref_ns=utc("2027-01-01T00:00:30Z"))
    for line, when in (
        ("Dec 31 23:59:50 node-a01 kernel: NVRM: Xid x", "2026-12-31T23:59:50Z"),
        ("messages:Dec 31 23:59:50 node-a01 kernel: x", "2026-12-31T23:59:50Z"),
        ("E1231 23:59:50.000100 550 file.py:1] x", "2026-12-31T23:59:50.0001Z"),
        ("[Dec31 23:59] x", "2026-12-31T23:59:00Z"),
        ("[Dec 31 23:59:50] error: x", "2026-12-31T23:59:50Z"),
        ("Jan  1 00:00:10 node-a01 kernel: x", "2027-01-01T00:00:10Z"),
        ("E20261231 23:59:50.000100 550 file.py:1] x", "2026-12-31T23:59:50.0001Z"),  # glog with its year
    ):
        assert parse_line_time(line, january).at_ns == utc(when), line
    december = TimeContext(2026, ref_ns=utc("2026-12-31T23:59:00Z"))
    assert parse_line_time("Jan  1 00:00:10 node-a01 kernel: x", december).at_ns == utc("2027-01-01T00:00:10Z")
    assert parse_line_time("Jun 30 00:00:10 node-a01 kernel: x", december).at_ns == utc("2026-06-30T00:00:10Z")
    assert parse_line_time("Dec 31 23:59:50 node-a01 kernel: x", TimeContext(2027)).at_ns == utc("2027-12-31T23:59:50Z")


def test_a_json_log_line_is_timed_by_its_own_time_field() -> None:
    """Docker's json-file line (RFC 3339 with ns), a shipper's Unix seconds (Fluent Bit date,
    zap ts), a line with no time field."""
    docker = '{"log":"cudaErrorECCUncorrectable: uncorrectable ECC error encountered\\n","stream":"stderr","time":"2024-08-09T13:32:51.873588972Z"}'
    got = parse_line_time(docker, CTX)
    assert got == LineTime(utc("2024-08-09T13:32:51.873588") + 972, 1.0, "json")
    assert HINT.match(docker)
    fluent = '{"date":1723210371.5,"log":{"message":"x"}}'
    assert parse_line_time(fluent, CTX) == LineTime(1_723_210_371_500_000_000, 1.0, "json")
    zap = '{"level":"error","ts":1723210371,"msg":"x"}'
    assert parse_line_time(zap, CTX) == LineTime(1_723_210_371_000_000_000, TIME_QUALITY_SECONDS, "json")
    for untimed in ('{"level":"error","msg":"no time"}', '{"time":"soon"}', '{"ts":12}', "{not json"):
        assert parse_line_time(untimed, CTX) is None, untimed


def test_worker_tag_then_the_workers_own_time() -> None:
    """torchrun's --tee/--log-dir tag (``[rank3]:`` from PyTorch 2.2, ``[default0]:`` before)
    comes before the worker's own line: its time is read after the tag; a tagged line without
    a time stays untimed."""
    cases = {
        "[rank3]:2026-11-30 01:20:31,123 - INFO - step 5": (dt.datetime(2026, 11, 30, 1, 20, 31, 123000), "iso8601"),
        "[default0]:[2026-11-30 01:20:31,123] [INFO] [utils.py:789:see_memory_usage] x":
            (dt.datetime(2026, 11, 30, 1, 20, 31, 123000), "iso8601"),
        "[rank12]: [2026-11-30T01:20:31Z] x": (dt.datetime(2026, 11, 30, 1, 20, 31), "iso8601"),
        "[worker-3]:2026-11-30 01:20:31 x": (dt.datetime(2026, 11, 30, 1, 20, 31), "iso8601"),
        "[rank1]:[W1130 01:20:23.935194063 ProcessGroupNCCL.cpp:1] x": (dt.datetime(2026, 11, 30, 1, 20, 23, 935194), "glog"),
    }
    for line, (when, fmt) in cases.items():
        got = parse_line_time(line, CTX)
        assert got is not None and got.format == fmt, (line, got)
        assert got.at_ns // 1000 == int(when.replace(tzinfo=dt.timezone.utc).timestamp() * 1_000_000), (line, got)
        assert re.match(TIMESTAMP_HINT, line), line
    for line in ("[rank3]: Traceback (most recent call last):", "[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] x",
                 "[default0]: step 5"):
        assert parse_line_time(line, CTX) is None, line
