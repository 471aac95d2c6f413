"""Line-format recognition and timestamp parsing (pure: no I/O).

:func:`parse_line_time` reads the timestamp at the start of one physical log line and returns
it as UTC nanoseconds with a ``time_quality`` (``schemas.records.TIME_QUALITY_*``) and the name
of the format it recognised. :data:`TIMESTAMP_HINT` is a cheap regex that is true for every
line :func:`parse_line_time` may succeed on, so a vectorised scan (polars) can skip the rest.

Formats (``LineTime.format``), each from logs seen in the wild (``shared/fixtures/real``):

=================== ========================================================== ==============
format              example                                                    quality
=================== ========================================================== ==============
``dmesg_T``         ``[Mon Nov 30 01:21:04 2026] NVRM: Xid ...`` (``dmesg -T``)  SECONDS
``dmesg_raw``       ``[   88.442689] NVRM: ...`` seconds since boot (``dmesg``)   BOOT_RELATIVE
``syslog``          ``Dec  2 10:43:35 node-a01 kernel: ...`` (RFC 3164, no year)  NO_YEAR
``iso8601``         ``2026-11-30T01:20:00.558Z ...``, journald ``short-iso``,       EXACT/SECONDS
                    RFC 3339, Python logging ``2026-11-30 01:20:00,123``,
                    Slurm ``[2026-11-30T01:20:00.123]``
``glog``            ``E1130 01:20:31.299000 550 api.py:986]`` (torch elastic),     EXACT
                    ``[rank1]:[W1130 01:20:23.935194063 ProcessGroupNCCL.cpp:1575]``
                    (c10d logger, no year)
``nccl``            ``[2026-11-30 01:20:22] node-a01:528:528 [0] init.cc:904 NCCL``  SECONDS
                    (NCCL >= 2.23 with ``NCCL_DEBUG_TIMESTAMP_FORMAT`` default)
``torchrun_summary`` ``  time      : 2026-11-30_01:20:31`` (ChildFailedError table) SECONDS
``nvidia_smi_csv``  ``2026/11/30 01:20:00.821, 0, GPU-...`` (``--query-gpu`` CSV)   EXACT
``nvidia_smi_q``    ``Timestamp   : Mon Nov 30 01:20:00 2026`` (``nvidia-smi -q``)   SECONDS
=================== ========================================================== ==============

Times without a zone are wall-clock times of the host and are placed with ``TimeContext.tz``
(an IANA zone name, via :mod:`zoneinfo`). Formats without a year take ``TimeContext.year``.
Impossible timestamps (month 13, Feb 30, hour 25, year < 1990 or > 2100) give ``None``;
nothing here raises on any input string.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from schemas.records import (
    TIME_QUALITY_BOOT_RELATIVE,
    TIME_QUALITY_EXACT,
    TIME_QUALITY_NO_YEAR,
    TIME_QUALITY_SECONDS,
)

__all__ = ["TimeContext", "LineTime", "parse_line_time", "TIMESTAMP_HINT", "wall_to_ns"]

MIN_YEAR = 1990
MAX_YEAR = 2100

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_MON = r"(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DOW = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_HMS = r"(?P<H>\d{2}):(?P<M>\d{2}):(?P<S>\d{2})"
_FRAC = r"(?:[.,](?P<frac>\d{1,9}))?"
_YMD = r"(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})"

#: ``[Mon Nov 30 01:21:04 2026]`` -- ``dmesg -T`` (util-linux), local time, ctime layout.
_DMESG_T = re.compile(rf"\[{_DOW} {_MON} +(?P<d>\d{{1,2}}) {_HMS} (?P<y>\d{{4}})\]")
#: ``[   88.442689]`` -- raw printk time, seconds since boot; optionally after ``kernel: ``.
_DMESG_RAW = re.compile(r"(?:kernel: )?\[ *(?P<sec>\d+)\.(?P<frac>\d{1,9})\]")
#: ``Dec  2 10:43:35 host prog: ...`` -- RFC 3164 syslog, local time, no year.
_SYSLOG = re.compile(rf"{_MON} +(?P<d>\d{{1,2}}) {_HMS}{_FRAC} ")
#: ``[2026-11-30 01:20:22] host:pid:tid [dev] ...`` -- NCCL debug line with a time prefix.
_NCCL = re.compile(rf"\[{_YMD} {_HMS}\] \S+:\d+:\d+ \[\d+\]")
#: ISO-8601 / RFC 3339 / journald short-iso, optionally in brackets (Slurm).
_ISO = re.compile(
    rf"\[?{_YMD}[T ]{_HMS}{_FRAC}(?P<tz>Z|[+-]\d{{2}}:?\d{{2}})?(?:\]|\s|$|[|,;])"
)
#: ``E1130 01:20:31.299000 550 f.py:986]`` / ``[rank1]:[W1130 01:20:23.935194063 f.cpp:1]``.
_GLOG = re.compile(
    rf"(?:\[rank\d+\]:\[|\[)?[IWEF](?P<m>\d{{2}})(?P<d>\d{{2}}) {_HMS}\.(?P<frac>\d{{1,9}})[ \]]"
)
#: ``  time      : 2026-11-30_01:20:31`` -- torchrun ChildFailedError summary entry.
_TORCHRUN = re.compile(rf"\s*time\s*: {_YMD}_{_HMS}\s*$")
#: ``2026/11/30 01:20:00.821`` -- ``nvidia-smi --query-gpu=timestamp,...`` CSV.
_SMI_CSV = re.compile(
    rf"(?P<y>\d{{4}})/(?P<m>\d{{2}})/(?P<d>\d{{2}}) {_HMS}{_FRAC}(?:,|\s*$)"
)
#: ``Timestamp   : Mon Nov 30 01:20:00 2026`` -- ``nvidia-smi -q`` header.
_SMI_Q = re.compile(
    rf"Timestamp\s*: {_DOW} {_MON} +(?P<d>\d{{1,2}}) {_HMS} (?P<y>\d{{4}})\s*$"
)

#: A superset of the lines :func:`parse_line_time` accepts, in the syntax shared by Python
#: ``re`` and Rust ``regex`` (polars): no lookaround, no backreferences, no named groups.
TIMESTAMP_HINT: str = (
    r"^(?:"
    r"\[(?:[A-Z][a-z]{2} [A-Z][a-z]{2} | *\d+\.\d|\d{4}-\d{2}-\d{2}|rank\d+\]:\[[IWEF]\d{4} "
    r"|[IWEF]\d{4} )"
    r"|kernel: \[ *\d+\.\d"
    r"|[A-Z][a-z]{2} +\d{1,2} \d{2}:"
    r"|\d{4}[-/]\d{2}[-/]\d{2}[T ]\d{2}:"
    r"|[IWEF]\d{4} \d{2}:"
    r"|\s*time\s*: \d{4}-"
    r"|Timestamp\s*: "
    r")"
)


@dataclass(frozen=True)
class TimeContext:
    """What a host's log lines do not say about their own times.

    ``year``: for formats without a year (syslog, glog), normally the workload start's year.
    ``boot_time_ns``: the host's boot time, UTC ns, to place raw dmesg seconds since boot;
    ``None`` makes raw dmesg lines unparseable (they then inherit a neighbour's time).
    ``tz``: IANA zone of zone-less wall-clock times (syslog, dmesg -T, NCCL, glog, torchrun,
    nvidia-smi); an unknown zone name is treated as UTC.
    """

    year: int
    boot_time_ns: int | None = None
    tz: str = "UTC"


@dataclass(frozen=True)
class LineTime:
    """A parsed line time: ``at_ns`` UTC nanoseconds since the epoch, ``quality`` one of the
    ``TIME_QUALITY_*`` constants, ``format`` the recognised format's name (see module doc)."""

    at_ns: int
    quality: float
    format: str


@lru_cache(maxsize=64)
def _zone(name: str) -> dt.tzinfo:
    if name in ("UTC", "Z", "utc", ""):
        return dt.timezone.utc
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        return dt.timezone.utc


def _frac_ns(frac: str | None) -> int:
    return int(frac.ljust(9, "0")[:9]) if frac else 0


def wall_to_ns(
    year: int, month: int, day: int, hour: int, minute: int, second: int, frac_ns: int = 0,
    tz: str | dt.tzinfo = "UTC",
) -> int | None:
    """UTC ns of a wall-clock time in zone ``tz`` (IANA name or tzinfo), or ``None`` if the
    date/time is impossible or outside years 1990..2100. Ambiguous local times (DST fall-back)
    take the first occurrence (``fold=0``)."""
    if not MIN_YEAR <= year <= MAX_YEAR:
        return None
    zone = _zone(tz) if isinstance(tz, str) else tz
    if isinstance(zone, dt.timezone):  # fixed offset (UTC): plain arithmetic, no DST
        days = _epoch_day(year, month, day)
        if days is None or not (0 <= hour < 24 and 0 <= minute < 60 and 0 <= second < 60):
            return None
        offset = zone.utcoffset(None)
        secs = days * 86_400 + hour * 3600 + minute * 60 + second - int(offset.total_seconds())
        return secs * 1_000_000_000 + frac_ns
    try:
        local = dt.datetime(year, month, day, hour, minute, second, tzinfo=zone)
    except (ValueError, OverflowError):
        return None
    delta = local - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + frac_ns


@lru_cache(maxsize=4096)
def _epoch_day(year: int, month: int, day: int) -> int | None:
    """Days since 1970-01-01 of a valid date, else None."""
    try:
        return dt.date(year, month, day).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        return None


def _tz_offset(text: str) -> dt.tzinfo:
    if text == "Z":
        return dt.timezone.utc
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:])
    if hours > 23 or minutes > 59:
        raise ValueError(text)
    return dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes))


def _ymd(m: re.Match[str], tz: str | dt.tzinfo, frac: bool = True) -> int | None:
    return wall_to_ns(
        int(m["y"]), int(m["m"]), int(m["d"]), int(m["H"]), int(m["M"]), int(m["S"]),
        _frac_ns(m["frac"]) if frac else 0, tz,
    )


def _ctime(m: re.Match[str], tz: str) -> int | None:
    return wall_to_ns(int(m["y"]), _MONTHS[m["mon"]], int(m["d"]),
                      int(m["H"]), int(m["M"]), int(m["S"]), 0, tz)


def parse_line_time(line: str, ctx: TimeContext) -> LineTime | None:
    """Parse the timestamp at the start of ``line`` (one physical line, no newline).

    Returns a :class:`LineTime` (UTC ns, quality, format name), or ``None`` when the line
    carries no recognised timestamp, the timestamp is impossible (month 13, Feb 30, year
    outside 1990..2100), or it is raw dmesg and ``ctx.boot_time_ns`` is unknown. Never raises.
    A syslog line that also carries a raw dmesg time (``kernel: [240314.528856]``) is placed by
    the syslog time (wall clock beats seconds since boot, which drift after suspend).
    """
    if not line:
        return None
    c = line[0]
    try:
        if c == "[":
            return _bracketed(line, ctx)
        if "0" <= c <= "9":
            m = _ISO.match(line)
            if m:
                return _iso(m, ctx)
            m = _SMI_CSV.match(line)
            if m:
                at = _ymd(m, ctx.tz)
                return LineTime(at, TIME_QUALITY_EXACT if m["frac"] else TIME_QUALITY_SECONDS,
                                "nvidia_smi_csv") if at is not None else None
            return None
        if c in "IWEF":
            m = _GLOG.match(line)
            if m:
                return _glog(m, ctx)
        if c == "k":
            m = _DMESG_RAW.match(line)
            return _raw(m, ctx) if m else None
        if c == "T":
            m = _SMI_Q.match(line)
            if m:
                at = _ctime(m, ctx.tz)
                return LineTime(at, TIME_QUALITY_SECONDS, "nvidia_smi_q") if at is not None else None
            return None
        if c in " \t" or c == "t":
            m = _TORCHRUN.match(line)
            if m:
                at = _ymd(m, ctx.tz, frac=False)
                return LineTime(at, TIME_QUALITY_SECONDS, "torchrun_summary") if at is not None else None
            return None
        if "A" <= c <= "Z":
            m = _SYSLOG.match(line)
            if m:
                at = wall_to_ns(ctx.year, _MONTHS[m["mon"]], int(m["d"]), int(m["H"]),
                                int(m["M"]), int(m["S"]), _frac_ns(m["frac"]), ctx.tz)
                return LineTime(at, TIME_QUALITY_NO_YEAR, "syslog") if at is not None else None
    except (ValueError, OverflowError, KeyError):
        return None
    return None


def _bracketed(line: str, ctx: TimeContext) -> LineTime | None:
    c1 = line[1:2]
    if c1 == " " or c1.isdigit():
        m = _DMESG_RAW.match(line)
        if m:
            return _raw(m, ctx)
        m = _NCCL.match(line)
        if m:
            at = _ymd(m, ctx.tz, frac=False)
            return LineTime(at, TIME_QUALITY_SECONDS, "nccl") if at is not None else None
        m = _ISO.match(line)
        return _iso(m, ctx) if m else None
    if c1 in ("I", "W", "E", "F", "r"):
        m = _GLOG.match(line)
        return _glog(m, ctx) if m else None
    m = _DMESG_T.match(line)
    if m:
        at = _ctime(m, ctx.tz)
        return LineTime(at, TIME_QUALITY_SECONDS, "dmesg_T") if at is not None else None
    return None


def _raw(m: re.Match[str], ctx: TimeContext) -> LineTime | None:
    if ctx.boot_time_ns is None:
        return None
    at = ctx.boot_time_ns + int(m["sec"]) * 1_000_000_000 + _frac_ns(m["frac"])
    if wall_to_ns(MAX_YEAR, 12, 31, 23, 59, 59) < at:
        return None
    return LineTime(at, TIME_QUALITY_BOOT_RELATIVE, "dmesg_raw")


def _iso(m: re.Match[str], ctx: TimeContext) -> LineTime | None:
    tz: str | dt.tzinfo = _tz_offset(m["tz"]) if m["tz"] else ctx.tz
    at = _ymd(m, tz)
    if at is None:
        return None
    return LineTime(at, TIME_QUALITY_EXACT if m["frac"] else TIME_QUALITY_SECONDS, "iso8601")


def _glog(m: re.Match[str], ctx: TimeContext) -> LineTime | None:
    at = wall_to_ns(ctx.year, int(m["m"]), int(m["d"]), int(m["H"]), int(m["M"]),
                    int(m["S"]), _frac_ns(m["frac"]), ctx.tz)
    return LineTime(at, TIME_QUALITY_EXACT, "glog") if at is not None else None
