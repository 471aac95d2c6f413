"""Line-format recognition and timestamp parsing (pure: no I/O).

:func:`parse_line_time` reads the timestamp of one physical log line and returns it as UTC
nanoseconds with a ``time_quality`` (``schemas.records.TIME_QUALITY_*``) and the name of the
format it recognised. :class:`LineClock` does the same for the lines of one file fed in file
order, and also times what a line cannot say alone: ``dmesg -H`` relative lines, and raw
seconds since boot of a file that holds several boots. :data:`TIMESTAMP_HINT` is a cheap
regex that is true for every line either may time, so a vectorised scan (polars) can skip the
rest. Both readers use this module: the bundle reader (:mod:`connectors.bundle`) and the file
tailer (:mod:`connectors.files`).

Formats (``LineTime.format``), each with where its layout comes from. "local" means a
wall-clock time of the host, placed with ``TimeContext.tz``; "no year" means the year comes
from the workload window (see *Years* below).

=================== =================================================================== ===========
format              example and source                                                  quality
=================== =================================================================== ===========
``dmesg_T``         ``[Mon Nov 30 01:21:04 2026] NVRM: ...`` -- ``dmesg -T`` /           SECONDS
                    ``--time-format ctime``; util-linux ``sys-utils/dmesg.c``
                    ``record_ctime()``: ``"[%a %b %e %H:%M:%S %Y] "`` (``%e``: day padded
                    with a space, ``[Wed Dec  2 ...]``), local. With ``-d``:
                    ``[Mon Nov 30 01:21:04 2026 <    0.000123>]`` (``"[%s <%12.06f>] "``).
``dmesg_raw``       ``[   88.442689] NVRM: ...`` -- plain ``dmesg`` (``"[%5ld.%06ld] "``),     BOOT_RELATIVE
                    seconds since boot, placed with ``TimeContext.boot_time_ns``; also
                    ``dmesg -r`` (``"<%d>[%5ld.%06ld] "``, ``<6>`` = facility << 3 |
                    level), ``dmesg -x`` (``"%-6s:%-6s: "``: ``kern  :info  : [...]``),
                    ``dmesg -d`` (``[   38.773115 <    0.000123>]``), ``kernel: [...]``,
                    and journalctl ``-o short-monotonic`` / ``short-delta``
                    (``[   38.773115 <    0.000123 >]``; systemd
                    ``src/shared/logs-show.c`` ``output_timestamp_monotonic()``).
``dmesg_H``         ``[Nov30 01:21] ...`` then ``[  +0.000123] ...`` -- ``dmesg -H`` /     MINUTES
                    ``-e`` / ``--time-format reltime``: ``short_ctime()``
                    ``"[%b%e %H:%M] "`` (local, no year, minute resolution) when the minute
                    changes, else ``"[  %+8.06f] "`` / ``"[ %+9.06f] "``, seconds since the
                    previous message. A relative line is timed only by :class:`LineClock`
                    (the last absolute line plus the deltas since), never by
                    :func:`parse_line_time` alone.
``iso8601``         ``2026-11-30T01:20:00.558Z ...`` and the like: RFC 3339 / ISO-8601    EXACT or
                    with up to nanoseconds and ``Z`` or an offset (``+01:00``,          SECONDS
                    ``+0100``); ``dmesg --time-format iso``
                    (``2026-11-30T01:21:04,123456+00:00``, util-linux
                    ``ISO_TIMESTAMP_COMMA_T``); journalctl ``-o short-iso``
                    (``2026-11-30T01:20:31+0000``, ``+00:00`` since systemd 250) and
                    ``short-iso-precise`` (``...T01:20:31.123456+00:00``); Python logging
                    ``2026-11-30 01:20:31,299 - INFO - ...``; Slurm daemon logs
                    ``[2026-11-30T01:20:31.123] error: ...`` (``src/common/log.c``,
                    ``LogTimeFormat`` iso8601_ms (default), iso8601, rfc5424_ms, rfc5424:
                    ``[%M] `` prefix); zone-less forms are local.
``json``            ``{"log":"...","stream":"stderr","time":"2026-11-30T01:20:31.299Z"}``  EXACT or
                    -- a JSON log line's own time field: Docker's json-file driver          SECONDS
                    (``time``, RFC 3339 with nanoseconds), structured loggers and
                    shippers (``ts``, ``timestamp``, ``@timestamp``: RFC 3339 text, or
                    Unix seconds with a fraction as Fluent Bit's ``date`` and zap's
                    ``ts`` write them).
``rfc5424``         ``<165>1 2026-11-30T01:20:31.123Z node-a01 app 12 - - msg`` (RFC 5424 EXACT or
                    syslog with its PRI and version)                                    SECONDS
``talos``           ``10.0.0.1: kern: warning: [2026-04-22T21:25:20.458998481Z]: NVRM:``  EXACT
                    -- ``talosctl dmesg``: ``<node>: <facility>: <level>: [<RFC 3339>]:``
                    (the node prefix is absent for one node)
``syslog``          ``Jun 17 20:18:08 node-a01 kernel: ...`` -- RFC 3164 (rsyslog          NO_YEAR
                    ``RSYSLOG_TraditionalFileFormat``), optionally after ``<PRI>`` or a
                    ``grep -H`` file prefix (``messages:Jun 17 ...``); journalctl
                    ``-o short`` (``Feb 02 09:51:48 node-a01 slurmd[12912]: ...``,
                    ``"%b %d %H:%M:%S"``) and ``short-precise`` (``... 01:20:31.123456``);
                    local, no year.
``journal_full``    ``Mon 2026-11-30 01:20:31 UTC node-a01 ...`` -- journalctl             SECONDS
                    ``-o short-full`` (``format_timestamp()``: ``"%a %Y-%m-%d %H:%M:%S %Z"``);
                    ``UTC``/``GMT`` zones are UTC, other abbreviations the host zone.
``journal_unix``    ``1764465631.123456 node-a01 ...`` -- journalctl ``-o short-unix``      EXACT
                    (``"%10d.%06d"``, seconds since the epoch, UTC).
``fabricmanager``   ``[Oct 31 2023 21:11:20] [ERROR] [tid 527118] ...`` -- NVIDIA Fabric    SECONDS
                    Manager ``fabricmanager.log`` (``[%b %d %Y %H:%M:%S]``), local.
``glog``            ``E1130 01:20:31.299000 550 api.py:986]`` (glog / torch elastic:        EXACT
                    ``"%c%02d%02d %02d:%02d:%02d.%06d %5d file:line]"``, no year),
                    ``E20261130 01:20:31.299000 ...`` (glog >= 0.6 ``log_year_in_prefix``),
                    ``[E1130 01:20:31.299000000 ProcessGroupNCCL.cpp:632]`` (c10d logger,
                    nanoseconds) and its PyTorch rank prefix ``[rank3]:[E1130 ...]``; local.
``nccl``            ``[2026-11-30 01:20:22] node-a01:528:528 [0] init.cc:904 NCCL``       SECONDS
                    (NCCL >= 2.23, ``NCCL_DEBUG_TIMESTAMP_FORMAT`` default ``"[%F %T] "``;
                    a fraction when the format asks for one), local.
``slurm_short``     ``[Nov 30 01:20:31] error: ...`` -- Slurm ``LogTimeFormat=short``       NO_YEAR
                    (``"%b %d %T"``), local, no year.
``slurm_at``        ``slurmstepd: error: *** STEP 1001.0 ON node-a01 CANCELLED AT          SECONDS
                    2025-01-10T15:27:25 DUE TO TIME LIMIT ***`` -- the time inside
                    slurmstepd's ``*** JOB/STEP ... AT <time> ***`` banner, local.
``torchrun_summary`` ``  time      : 2026-11-30_01:20:31`` (ChildFailedError table)        SECONDS
``nemo``            ``[NeMo W 2026-12-01 02:01:00 module:88] ...`` (NeMo's logger,          SECONDS
                    ``[NeMo %(levelname)1.1s %(asctime)s %(module)s:%(lineno)d]``), local
``iso8601``         also Megatron-LM's ``training_log`` `` [2026-12-01 02:00:07] iteration`` SECONDS
                    (one leading space)
``nvidia_smi_csv``  ``2026/11/30 01:20:00.821, 0, GPU-...`` (``--query-gpu`` CSV)          EXACT
``nvidia_smi_q``    ``Timestamp   : Mon Nov 30 01:20:00 2026`` (``nvidia-smi -q``)          SECONDS
=================== =================================================================== ===========

Not timed (the line inherits a neighbour's time): ``dmesg --time-format delta`` alone
(``[<    0.000123>]``: no absolute time anywhere), ``--time-format notime``, Slurm
``LogTimeFormat=clock`` (CPU microseconds), NCCL lines without the timestamp prefix.

*Years.* Formats without a year (``syslog``, ``slurm_short``, ``dmesg_H``, ``glog`` without
year) take the year that puts the time nearest ``TimeContext.ref_ns`` (the workload start):
a line more than six months after the reference month belongs to the year before (a December
line in a January workload), more than six months before it to the year after. Without
``ref_ns``, ``TimeContext.year``.

*Boots.* Raw seconds since boot are placed with ``TimeContext.boot_time_ns``. When
:class:`LineClock` sees the raw clock go back (by more than :data:`BOOT_STEP_BACK_NS`: the host
rebooted and the file goes on with the next boot), the next boot is the first of
``TimeContext.boot_times_ns`` after the previous boot's last line (``BOOT_RELATIVE``); if none
is known, the new boot is placed right after the previous boot's last line -- the earliest it
can be -- at ``TIME_QUALITY_INHERITED``.

Impossible timestamps (month 13, Feb 30, hour 25, year < 1990 or > 2100) give ``None``;
nothing here raises on any input string.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from correlators.timetext import NS
from schemas.records import (
    TIME_QUALITY_BOOT_RELATIVE,
    TIME_QUALITY_EXACT,
    TIME_QUALITY_INHERITED,
    TIME_QUALITY_MINUTES,
    TIME_QUALITY_NO_YEAR,
    TIME_QUALITY_SECONDS,
)

__all__ = [
    "TimeContext", "LineTime", "LineClock", "parse_line_time", "TIMESTAMP_HINT", "wall_to_ns",
    "BOOT_STEP_BACK_NS",
]

MIN_YEAR = 1990
MAX_YEAR = 2100

#: A raw dmesg time this much smaller than the previous line's starts a new boot (ns).
#: Within one boot printk times only go back by microseconds (CPUs' clocks).
BOOT_STEP_BACK_NS = 1 * NS

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_MON = r"(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DOW = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_HMS = r"(?P<H>\d{2}):(?P<M>\d{2}):(?P<S>\d{2})"
_FRAC = r"(?:[.,](?P<frac>\d{1,9}))?"
_YMD = r"(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})"
_TZ = r"(?P<tz>Z|[+-]\d{2}:?\d{2})"

#: ``[Mon Nov 30 01:21:04 2026]`` -- ``dmesg -T`` (util-linux), local time, ctime layout;
#: ``-T -d`` adds `` <    0.000123>``.
_DMESG_T = re.compile(
    rf"\[{_DOW} {_MON} +(?P<d>\d{{1,2}}) {_HMS} (?P<y>\d{{4}})(?: <\s*\d+\.\d+>)?\]")
#: ``[   88.442689]`` -- raw printk time, seconds since boot; optionally after ``kernel: ``;
#: ``-d`` / journalctl short-delta add `` <    0.000123>`` / `` <    0.000123 >``.
_DMESG_RAW = re.compile(
    r"(?:kernel: )?\[ *(?P<sec>\d+)\.(?P<frac>\d{1,9})(?: <\s*\d+\.\d+[ *]?>)?\]")
#: ``[  +0.000123]`` / ``[ +12.345678]`` -- dmesg -H relative line (seconds since the last).
_DMESG_REL = re.compile(r"\[ *\+(?P<sec>\d+)\.(?P<frac>\d{1,9})\]")
#: ``[Nov30 01:21]`` / ``[Nov 2 01:21]`` -- dmesg -H absolute line (``%b%e %H:%M``).
_DMESG_H = re.compile(rf"\[{_MON} ?(?P<d>\d{{1,2}}) (?P<H>\d{{2}}):(?P<M>\d{{2}})\]")
#: ``<6>`` -- a syslog PRI (dmesg -r, RFC 3164/5424 on the wire); RFC 5424 adds version ``1 ``.
_PRI = re.compile(r"<(?P<pri>\d{1,3})>(?P<v5424>1 )?")
#: ``kern  :info  : `` -- dmesg -x facility and level.
_DECODE = re.compile(
    r"(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|res[0-3]|local[0-7]) *"
    r":(?:emerg|alert|crit|err|warn|notice|info|debug) *: ")
#: ``10.0.0.1: kern: warning: [2026-04-22T21:25:20.458998481Z]: `` -- talosctl dmesg.
_TALOS = re.compile(
    rf"(?:[\w.:-]+: )?[a-z]+\d?: +[a-z]+: \[{_YMD}T{_HMS}{_FRAC}{_TZ}?\]: ")
#: ``messages:Jun 17 ...`` -- ``grep -H`` file prefix before a line (no space after the colon).
_GREP_PREFIX = re.compile(r"[A-Za-z_][\w./-]*:(?=[A-Z][a-z]{2} |\d{4}-\d{2}-\d{2}[T ]|\[)")
#: ``Dec  2 10:43:35 host prog: ...`` -- RFC 3164 syslog / journald short(-precise), no year.
_SYSLOG = re.compile(rf"{_MON} +(?P<d>\d{{1,2}}) {_HMS}{_FRAC} ")
#: ``Mon 2026-11-30 01:20:31 UTC host ...`` -- journald short-full.
_JOURNAL_FULL = re.compile(rf"{_DOW} {_YMD} {_HMS}{_FRAC} (?P<zone>[A-Z]{{1,6}}|[+-]\d{{4}}) ")
#: ``1764465631.123456 host ...`` -- journald short-unix.
_JOURNAL_UNIX = re.compile(r"(?P<sec>\d{9,10})\.(?P<frac>\d{6}) ")
#: ``[Oct 31 2023 21:11:20]`` -- NVIDIA Fabric Manager.
_FABRICMANAGER = re.compile(rf"\[{_MON} +(?P<d>\d{{1,2}}) (?P<y>\d{{4}}) {_HMS}\]")
#: ``[Nov 30 01:20:31]`` -- Slurm LogTimeFormat=short.
_SLURM_SHORT = re.compile(rf"\[{_MON} +(?P<d>\d{{1,2}}) {_HMS}{_FRAC}\]")
#: ``*** STEP 1001.0 ON node-a01 CANCELLED AT 2025-01-10T15:27:25 ...`` -- slurmstepd banner.
_SLURM_AT = re.compile(rf"\*\*\* (?:JOB|STEP) [^*]{{0,120}}? AT {_YMD}T{_HMS}(?: |\*|$)")
#: ``[2026-11-30 01:20:22] host:pid:tid [dev] ...`` -- NCCL debug line with a time prefix.
_NCCL = re.compile(rf"\[{_YMD} {_HMS}{_FRAC}\] \S+:\d+:\d+ \[\d+\]")
#: ISO-8601 / RFC 3339 / journald short-iso, optionally in brackets (Slurm).
_JSON_TIME = re.compile(r'"(?:time|ts|timestamp|@timestamp|date)"\s*:\s*(?:"(?P<iso>\d{4}-[^"]{8,40})"'
                        r'|(?P<sec>\d{10})(?:\.(?P<frac>\d{1,9}))?\d*(?=\s*[,}]))')
_ISO = re.compile(rf"\[?{_YMD}[T ]{_HMS}{_FRAC}{_TZ}?(?:\]|\s|$|[|,;])")
#: ``E1130 01:20:31.299000 550 f.py:986]`` / ``E20261130 ...`` (glog with year) /
#: ``[rank1]:[W1130 01:20:23.935194063 f.cpp:1]``.
_GLOG = re.compile(
    rf"(?:\[rank\d+\]:\[|\[)?[IWEF](?P<y>\d{{4}})?(?P<m>\d{{2}})(?P<d>\d{{2}}) {_HMS}\.(?P<frac>\d{{1,9}})[ \]]"
)
#: The tag torchrun's ``--tee``/``--log-dir`` output puts before each line of a worker:
#: ``[rank3]:`` (PyTorch 2.2+, global rank) or ``[default0]:`` (``<role><local rank>``, before
#: 2.2); the worker's own timestamp follows it.
_LAUNCHER_TAG = re.compile(r"\[(?:rank\d+|[A-Za-z_][\w-]{0,31}?\d+)\]: ?")
#: ``  time      : 2026-11-30_01:20:31`` -- torchrun ChildFailedError summary entry.
_TORCHRUN = re.compile(rf"\s*time\s*: {_YMD}_{_HMS}\s*$")
#: ``[NeMo W 2026-12-01 02:01:00 straggler_det_callback:88]`` -- NeMo's logger
#: (nemo/utils/formatters/base.py: ``[NeMo %(levelname)1.1s %(asctime)s %(module)s:%(lineno)d]``,
#: datefmt ``%Y-%m-%d %H:%M:%S``).
_NEMO = re.compile(rf"\[NeMo [A-Z] {_YMD} {_HMS} ")
#: ``2026/11/30 01:20:00.821`` -- ``nvidia-smi --query-gpu=timestamp,...`` CSV.
_SMI_CSV = re.compile(
    rf"(?P<y>\d{{4}})/(?P<m>\d{{2}})/(?P<d>\d{{2}}) {_HMS}{_FRAC}(?:,|\s*$)"
)
#: ``Timestamp   : Mon Nov 30 01:20:00 2026`` -- ``nvidia-smi -q`` header.
_SMI_Q = re.compile(
    rf"Timestamp\s*: {_DOW} {_MON} +(?P<d>\d{{1,2}}) {_HMS} (?P<y>\d{{4}})\s*$"
)

#: A superset of the lines :func:`parse_line_time` and :class:`LineClock` may time, in the
#: syntax shared by Python ``re`` and Rust ``regex`` (polars): no lookaround, no
#: backreferences, no named groups.
TIMESTAMP_HINT: str = (
    r"^(?:"
    r"\[(?:[A-Z][a-z]{2}[ \d]| *\+?\d+\.\d|\d{4}-\d{2}-\d{2}|rank\d+\]:\[[IWEF]\d{4}|[IWEF]\d{4})"
    r"|\[[A-Za-z_][\w-]*\d+\]: ?(?:\[|\d{4}-|[IWEF]\d{4})"
    r"|<\d{1,3}>"
    r"|kernel: \[ *\d+\.\d"
    r"|[a-z]+\d? *:[a-z]+ *: (?:\[|\d{4}-)"
    r"|(?:[\w.:-]+: )?[a-z]+\d?: +[a-z]+: \[\d{4}-"
    r"|[A-Za-z_][\w./-]*:(?:[A-Z][a-z]{2} |\d{4}-\d{2}-\d{2}[T ]|\[)"
    r"|[A-Z][a-z]{2} +\d{1,2} \d{2}:"
    r"|[A-Z][a-z]{2} \d{4}-\d{2}-\d{2} \d{2}:"
    r"|\d{9,10}\.\d{6} "
    r"|\d{4}[-/]\d{2}[-/]\d{2}[T ]\d{2}:"
    r"|[IWEF]\d{4}(?:\d{4})? \d{2}:"
    r"|\s*time\s*: \d{4}-"
    r"| \[\d{4}-\d{2}-\d{2} \d{2}:"
    r"|\[NeMo [A-Z] \d{4}-"
    r"|Timestamp\s*: "
    r"|.*\*\*\* (?:JOB|STEP) "
    r"|\{.*\"(?:time|ts|timestamp|@timestamp|date)\"\s*:\s*\"?\d"
    r")"
)


@dataclass(frozen=True)
class TimeContext:
    """What a host's log lines do not say about their own times.

    ``year``: for formats without a year (syslog, glog, dmesg -H) when ``ref_ns`` is not
    given, normally the workload start's year. ``boot_time_ns``: the host's boot time, UTC ns,
    to place raw dmesg seconds since boot (of the first boot a file holds); ``None`` makes raw
    dmesg lines untimed (they then inherit a neighbour's time). ``tz``: IANA zone of zone-less
    wall-clock times (syslog, dmesg -T, NCCL, glog, torchrun, nvidia-smi); an unknown zone name
    is treated as UTC. ``ref_ns``: UTC ns near the lines (the workload start): year-less times
    take the year nearest it (see the module doc, *Years*). ``boot_times_ns``: other known boot
    times of the host, UTC ns, for files holding several boots (module doc, *Boots*).
    """

    year: int
    boot_time_ns: int | None = None
    tz: str = "UTC"
    ref_ns: int | None = None
    boot_times_ns: tuple[int, ...] = field(default=())


@dataclass(frozen=True)
class LineTime:
    """A parsed line time: ``at_ns`` UTC nanoseconds since the epoch, ``quality`` one of the
    ``TIME_QUALITY_*`` constants, ``format`` the recognised format's name (see module doc)."""

    at_ns: int
    quality: float
    format: str


@dataclass(frozen=True)
class _Raw:
    """Raw seconds since boot (ns) of a line, before a boot places them."""

    since_boot_ns: int


@dataclass(frozen=True)
class _Rel:
    """A dmesg -H relative line: ns since the previous message."""

    delta_ns: int


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


_MAX_NS = wall_to_ns(MAX_YEAR, 12, 31, 23, 59, 59)
_MIN_NS = wall_to_ns(MIN_YEAR, 1, 1, 0, 0, 0)


@lru_cache(maxsize=256)
def _ref_year_month(ref_ns: int) -> tuple[int, int]:
    day = dt.date.fromordinal(_EPOCH_ORDINAL + ref_ns // (86_400 * NS))
    return day.year, day.month


def _year_for(month: int, ctx: TimeContext) -> int:
    """The year of a year-less time in ``month`` (module doc, *Years*)."""
    if ctx.ref_ns is None:
        return ctx.year
    year, ref_month = _ref_year_month(ctx.ref_ns)
    if month - ref_month > 6:
        return year - 1
    if ref_month - month > 6:
        return year + 1
    return year


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


def _lt(at: int | None, quality: float, fmt: str) -> LineTime | None:
    return LineTime(at, quality, fmt) if at is not None else None


def parse_line_time(line: str, ctx: TimeContext) -> LineTime | None:
    """Parse the timestamp of ``line`` (one physical line, no newline), on its own.

    Returns a :class:`LineTime` (UTC ns, quality, format name), or ``None`` when the line
    carries no recognised timestamp, the timestamp is impossible (month 13, Feb 30, year
    outside 1990..2100), it is raw dmesg and ``ctx.boot_time_ns`` is unknown, or it is a
    ``dmesg -H`` relative line (only :class:`LineClock` times those). Never raises.
    A syslog line that also carries a raw dmesg time (``kernel: [240314.528856]``) is placed by
    the syslog time (wall clock beats seconds since boot, which drift after suspend).
    """
    got = _parse(line, ctx)
    if isinstance(got, _Raw):
        return _place_raw(got.since_boot_ns, ctx.boot_time_ns, TIME_QUALITY_BOOT_RELATIVE)
    if isinstance(got, _Rel):
        return None
    return got


def _place_raw(since_boot_ns: int, boot_ns: int | None, quality: float) -> LineTime | None:
    if boot_ns is None:
        return None
    at = boot_ns + since_boot_ns
    if not _MIN_NS <= at <= _MAX_NS:
        return None
    return LineTime(at, quality, "dmesg_raw")


class LineClock:
    """Times of one file's lines, fed in file order (``clock(line)``; every line, or every
    line :data:`TIMESTAMP_HINT` matches: the others carry no time).

    Returns what :func:`parse_line_time` returns, plus what needs the lines before:

    * ``dmesg -H`` relative lines (``[  +0.000123]``): the running time -- the last
      absolute ``[Nov30 01:21]`` line's minute plus the deltas since (``dmesg_H``,
      ``TIME_QUALITY_MINUTES``: the absolute line hides its seconds); ``None`` before any
      absolute line;
    * raw seconds since boot when the file holds several boots (the raw clock goes back by
      more than :data:`BOOT_STEP_BACK_NS`): module doc, *Boots*.

    ``clock.peek(line)`` times a line without moving the clock (a look-ahead)."""

    def __init__(self, ctx: TimeContext):
        self.ctx = ctx
        self._boot_ns = ctx.boot_time_ns
        self._boot_q = TIME_QUALITY_BOOT_RELATIVE
        self._known_boots = sorted(set(ctx.boot_times_ns) | ({ctx.boot_time_ns} - {None}))  # type: ignore[operator]
        self._last_raw: int | None = None  # seconds since boot (ns) of the last raw line
        self._last_raw_at: int | None = None  # its placed time
        self._rel_at: int | None = None  # running time of dmesg -H lines
        #: boots seen after the first (raw clock went back)
        self.reboots = 0

    def __call__(self, line: str) -> LineTime | None:
        got = _parse(line, self.ctx)
        if got is None:
            return None
        if isinstance(got, _Rel):
            if self._rel_at is None:
                return None
            self._rel_at += got.delta_ns
            return LineTime(self._rel_at, TIME_QUALITY_MINUTES, "dmesg_H")
        if isinstance(got, _Raw):
            return self._raw(got.since_boot_ns)
        if got.format == "dmesg_H":
            self._rel_at = got.at_ns
        return got

    def peek(self, line: str) -> LineTime | None:
        """The line's own time, without moving the clock (relative lines: ``None``)."""
        got = _parse(line, self.ctx)
        if isinstance(got, _Raw):
            return _place_raw(got.since_boot_ns, self._boot_ns, self._boot_q)
        if isinstance(got, _Rel):
            return None
        return got

    def _raw(self, since: int) -> LineTime | None:
        if self._last_raw is not None and since + BOOT_STEP_BACK_NS < self._last_raw:
            self.reboots += 1
            after = self._last_raw_at  # the previous boot's last placed line (None: unplaced)
            floor = after if after is not None else self._boot_ns
            nxt = None if floor is None else next((b for b in self._known_boots if b > floor), None)
            if nxt is not None:
                self._boot_ns, self._boot_q = nxt, TIME_QUALITY_BOOT_RELATIVE
            elif after is not None:
                # the host rebooted after the previous boot's last line: the earliest it can be
                self._boot_ns, self._boot_q = after, TIME_QUALITY_INHERITED
            else:
                self._boot_ns = None
        self._last_raw = since
        got = _place_raw(since, self._boot_ns, self._boot_q)
        if got is not None:
            self._last_raw_at = got.at_ns
        return got


def _parse(line: str, ctx: TimeContext, prefixed: bool = False) -> LineTime | _Raw | _Rel | None:
    """A line's own time: a LineTime, raw seconds since boot, a relative delta, or None."""
    if not line:
        return None
    c = line[0]
    try:
        if c == "[":
            got = _bracketed(line, ctx)
            if got is not None:
                return got
        elif "0" <= c <= "9":
            m = _ISO.match(line)
            if m:
                return _iso(m, ctx)
            m = _SMI_CSV.match(line)
            if m:
                return _lt(_ymd(m, ctx.tz), TIME_QUALITY_EXACT if m["frac"] else TIME_QUALITY_SECONDS,
                           "nvidia_smi_csv")
            m = _JOURNAL_UNIX.match(line)
            if m:
                at = int(m["sec"]) * NS + _frac_ns(m["frac"])
                return LineTime(at, TIME_QUALITY_EXACT, "journal_unix") if _MIN_NS <= at <= _MAX_NS else None
            m = _TALOS.match(line)
            if m:
                return _talos(m, ctx)
        elif c == "<":
            m = _PRI.match(line)
            if m and int(m["pri"]) < 192 and not prefixed:
                rest = line[m.end():]
                if m["v5424"]:
                    m2 = _ISO.match(rest)
                    if m2:
                        got = _iso(m2, ctx)
                        return LineTime(got.at_ns, got.quality, "rfc5424") if got else None
                    return None
                return _parse(rest, ctx, prefixed=True)
            return None
        elif c in "IWEF" and len(line) > 1 and line[1].isdigit():
            m = _GLOG.match(line)
            if m:
                return _glog(m, ctx)
            return None
        elif c == "{":
            return _json_time(line, ctx)
        elif c == "T" and line.startswith("Timestamp"):
            m = _SMI_Q.match(line)
            return _lt(_ctime(m, ctx.tz), TIME_QUALITY_SECONDS, "nvidia_smi_q") if m else None
        elif c in " \t" or c == "t":
            m = _TORCHRUN.match(line)
            if m:
                return _lt(_ymd(m, ctx.tz, frac=False), TIME_QUALITY_SECONDS, "torchrun_summary")
            if line.startswith(" [") and line[2:3].isdigit():
                # Megatron-LM training_log: " [%Y-%m-%d %H:%M:%S] iteration ..." (a leading space)
                m = _ISO.match(line[1:])
                if m:
                    return _iso(m, ctx)
        elif "A" <= c <= "Z":
            m = _SYSLOG.match(line)
            if m:
                month = _MONTHS[m["mon"]]
                at = wall_to_ns(_year_for(month, ctx), month, int(m["d"]), int(m["H"]),
                                int(m["M"]), int(m["S"]), _frac_ns(m["frac"]), ctx.tz)
                return _lt(at, TIME_QUALITY_NO_YEAR, "syslog")
            m = _JOURNAL_FULL.match(line)
            if m:
                zone = m["zone"]
                tz: str | dt.tzinfo = (
                    dt.timezone.utc if zone in ("UTC", "GMT", "Z")
                    else _tz_offset(zone) if zone[0] in "+-" else ctx.tz
                )
                return _lt(_ymd(m, tz), TIME_QUALITY_EXACT if m["frac"] else TIME_QUALITY_SECONDS,
                           "journal_full")
        if "a" <= c <= "z" and not prefixed:
            if c == "k" and line.startswith("kernel: ["):
                m = _DMESG_RAW.match(line)
                if m:
                    return _Raw(int(m["sec"]) * NS + _frac_ns(m["frac"]))
            m = _DECODE.match(line)
            if m:
                return _parse(line[m.end():], ctx, prefixed=True)
            m = _TALOS.match(line)
            if m:
                return _talos(m, ctx)
        if not prefixed and c != "[":
            m = _GREP_PREFIX.match(line)
            if m:
                got = _parse(line[m.end():], ctx, prefixed=True)
                if got is not None:
                    return got
        if "*** " in line:
            m = _SLURM_AT.search(line)
            if m:
                return _lt(_ymd(m, ctx.tz, frac=False), TIME_QUALITY_SECONDS, "slurm_at")
    except (ValueError, OverflowError, KeyError):
        return None
    return None


def _bracketed(line: str, ctx: TimeContext) -> LineTime | _Raw | _Rel | None:
    c1 = line[1:2]
    if c1 == " " or c1.isdigit() or c1 == "+":
        m = _DMESG_RAW.match(line)
        if m:
            return _Raw(int(m["sec"]) * NS + _frac_ns(m["frac"]))
        m = _DMESG_REL.match(line)
        if m:
            return _Rel(int(m["sec"]) * NS + _frac_ns(m["frac"]))
        m = _NCCL.match(line)
        if m:
            return _lt(_ymd(m, ctx.tz), TIME_QUALITY_EXACT if m["frac"] else TIME_QUALITY_SECONDS, "nccl")
        m = _ISO.match(line)
        return _iso(m, ctx) if m else None
    if c1 in ("I", "W", "E", "F", "r") and line[2:3].isdigit() or c1 == "r":
        m = _GLOG.match(line)
        if m:
            return _glog(m, ctx)
    if c1.isalpha():
        m = _LAUNCHER_TAG.match(line)
        if m:
            return _parse(line[m.end():], ctx, prefixed=True)
        if c1 == "r":
            return None
    m = _DMESG_T.match(line)
    if m:
        return _lt(_ctime(m, ctx.tz), TIME_QUALITY_SECONDS, "dmesg_T")
    if line.startswith("[NeMo "):
        m = _NEMO.match(line)
        return _lt(_ymd(m, ctx.tz, frac=False), TIME_QUALITY_SECONDS, "nemo") if m else None
    m = _FABRICMANAGER.match(line)
    if m:
        return _lt(_ctime(m, ctx.tz), TIME_QUALITY_SECONDS, "fabricmanager")
    m = _SLURM_SHORT.match(line)
    if m:
        month = _MONTHS[m["mon"]]
        return _lt(wall_to_ns(_year_for(month, ctx), month, int(m["d"]), int(m["H"]), int(m["M"]),
                              int(m["S"]), _frac_ns(m["frac"]), ctx.tz), TIME_QUALITY_NO_YEAR, "slurm_short")
    m = _DMESG_H.match(line)
    if m:
        month = _MONTHS[m["mon"]]
        return _lt(wall_to_ns(_year_for(month, ctx), month, int(m["d"]), int(m["H"]), int(m["M"]), 0, 0,
                              ctx.tz), TIME_QUALITY_MINUTES, "dmesg_H")
    return None


def _iso(m: re.Match[str], ctx: TimeContext) -> LineTime | None:
    tz: str | dt.tzinfo = _tz_offset(m["tz"]) if m["tz"] else ctx.tz
    at = _ymd(m, tz)
    if at is None:
        return None
    return LineTime(at, TIME_QUALITY_EXACT if m["frac"] else TIME_QUALITY_SECONDS, "iso8601")


def _json_time(line: str, ctx: TimeContext) -> LineTime | None:
    """The time field of a JSON log line (``json`` in the table above): RFC 3339 text or Unix
    seconds; None when it has none."""
    m = _JSON_TIME.search(line)
    if m is None:
        return None
    if m["iso"]:
        m2 = _ISO.match(m["iso"])
        got = _iso(m2, ctx) if m2 else None
        return LineTime(got.at_ns, got.quality, "json") if got else None
    at = int(m["sec"]) * NS + _frac_ns(m["frac"])
    if not _MIN_NS <= at <= _MAX_NS:
        return None
    return LineTime(at, TIME_QUALITY_EXACT if m["frac"] else TIME_QUALITY_SECONDS, "json")


def _talos(m: re.Match[str], ctx: TimeContext) -> LineTime | None:
    got = _iso(m, ctx)
    return LineTime(got.at_ns, got.quality, "talos") if got else None


def _glog(m: re.Match[str], ctx: TimeContext) -> LineTime | None:
    month = int(m["m"])
    year = int(m["y"]) if m["y"] else _year_for(month, ctx)
    at = wall_to_ns(year, month, int(m["d"]), int(m["H"]), int(m["M"]),
                    int(m["S"]), _frac_ns(m["frac"]), ctx.tz)
    return LineTime(at, TIME_QUALITY_EXACT, "glog") if at is not None else None
