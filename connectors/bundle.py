"""Incident-bundle reader (``BUNDLE.md`` v1) -> Observations.

``BundleConnector(path)`` validates ``workload.yaml`` (required), ``topology.yaml`` and
``expected.yaml`` (optional), then :meth:`BundleConnector.observations` reads every file under
``logs/``, ``metrics/`` and ``fabric/`` in sorted relative-path order:

* ``logs/<host>/*``, ``fabric/<switch>/*`` -> ``kind="log_line"``, one Observation per record
  (multi-line records by :mod:`connectors.records`), timed by :mod:`connectors.timefmt`;
* ``logs/_scheduler/*`` -> ``kind="scheduler_event"`` with ``host="_scheduler"``;
* ``logs/_aggregated/*`` -> ``kind="log_line"`` with ``host="_aggregated"``: a declared
  aggregator (a central syslog file, a log store's export), whose lines' own host field names
  the event's host when it is a node of the allocation (:mod:`correlators.identity`); every
  other file's host is its folder's, whatever its lines say;
* ``metrics/<host>/*`` -> ``kind="telemetry"``, one Observation per GPU per sample
  (:mod:`connectors.telemetry`); a file no telemetry parser recognises is read as log lines.
* ``fabric/<node>/*.counters.csv``, ``metrics/<node>/*.counters.csv`` -> port counter series
  (:func:`connectors.counter_readers.read_counter_csv`): deltas computed vectorised, one
  ``kind="fabric_counter"`` Observation per sample with a nonzero error delta or a reset
  (:func:`connectors.counter_readers.table_observations`; ``attributes.side`` is ``switch`` under
  ``fabric/``, ``host`` under ``metrics/``); coverage records = rows, unparsed = malformed rows.
  Consecutive counter files of one header are read in batches (one polars pass and one
  deltas computation per :data:`~connectors.counter_readers.COUNTER_BATCH_BYTES`,
  :func:`connectors.counter_readers.read_counter_batch`) with the same result as file by file.

Record time: the first line's own timestamp (``time_source="line"``), else the nearest earlier
timestamped line of the same file, else the nearest later one (``"inferred"``,
``TIME_QUALITY_INHERITED``, ``attributes.time_from_line``), else -- a file with no time at all
-- the transport's: the workload's ``end``, when the scheduler says the attempt was over and
its logs complete (``"transport"``, ``TIME_QUALITY_TRANSPORT``).
An undated record is never placed at the workload start as if it had happened then; only a
workload still running (no ``end``) has nothing later to offer than its start. Telemetry
samples without a time are placed the same way. Each host's
:class:`~connectors.timefmt.TimeContext` comes from ``workload.yaml``
(``hosts.<h>.boot_time`` / ``boot_times`` / ``timezone``; year-less times take the year
nearest ``start``, so a December line of a January workload is of the year before). Files
holding ``dmesg -H`` relative lines or raw dmesg seconds are timed in file order by a
:class:`~connectors.timefmt.LineClock` (relative lines add to the last absolute one; a raw
clock that goes back starts the next boot).

``workload.yaml`` keys this reader does not know are not an error: they are reported in the
coverage (``source="file:workload.yaml"``, status ``present``, ``detail`` naming them).

**Step records.** ``scheduler/<host>/*`` files hold what the scheduler said about the processes
of a host: ``scontrol listpids`` output taken on that host (any form
:func:`connectors.slurm_pids.parse_listpids` reads, recognised by content; the file name is a
hint, ``scontrol-listpids.txt``). They are read when the bundle is opened, not as log lines:
for every workload of the bundle whose id names a Slurm job
(:func:`connectors.slurm_pids.slurm_job_of`) and whose nodes hold the host, the rows of that
job's numbered steps with task ids (:func:`connectors.slurm_pids.task_pid_rows`) become the
workload's ``task_pids`` (host, pid, rank = the global task id, local rank, step, source =
``<file>:<line>``), so the workload record both drivers read carries them
(:mod:`correlators.pids` turns them into pid -> rank statements). Each file has a coverage
entry: records = rows, unparsed = malformed rows, ``detail`` says how many rows each workload
took and why the others were left out (other jobs, ``-`` ids, batch/extern steps); a file that
is no listpids output is ``failed``. Files over :data:`MAX_STEP_RECORD_BYTES` are not read.

**Fast path (the batch front end).** With ``keywords`` only records containing a keyword are
materialised, and a line that holds none never becomes a Python object: files are read whole
and kept as UTF-8 bytes (CRLF and NUL normalised on the bytes), batched up to
:data:`SCAN_BATCH_BYTES`; per batch one polars pass splits the bytes into lines and computes
the per-line facts coverage and timing need (:data:`~connectors.timefmt.TIMESTAMP_HINT`,
:data:`~connectors.records.STRUCTURE_HINT`, blank, raw/relative dmesg), and one Hyperscan pass
over each file's bytes (:meth:`correlators.rules.scan.LiteralSet.match_ends`) finds the
keywords, mapped to lines by their byte offsets. Python then decodes only the candidate lines
and their record context (:class:`~connectors.records.BlockLines`; records via
:func:`~connectors.records.record_span`, times via a walk over the hint lines). Both paths share
the materialisation, so a record gives the same Observation (id, time) either way.

Bad input never raises past the constructor: unreadable files, invalid UTF-8, NUL bytes /
binary content, huge lines (bodies are cut at :data:`MAX_BODY_CHARS`), empty files and
malformed telemetry are reported in :meth:`BundleConnector.coverage`.
"""

from __future__ import annotations

import functools
import gzip
import io
import os
from bisect import bisect_right
from concurrent.futures import ThreadPoolExecutor
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import polars as pl
import pyarrow as pa
import pydantic
import yaml

from connectors import counter_readers as _counters_mod
from connectors.counter_readers import (
    COUNTER_SUFFIX,
    counter_batch_key,
    read_counter_batch,
    read_counter_csv,
    table_observations,
)
from connectors.slurm_pids import ListpidsError, parse_listpids, slurm_job_of, task_pid_rows
from connectors.telemetry import TelemetrySample, parse_telemetry
from correlators import stackdump as _stackdump
from correlators.attribution import default_causal_rules
from correlators.identity import AGGREGATED_HOST
from correlators.rules.engine import gc_paused, json_attributes, light_record, opt_int32, opt_str, time_ok
from connectors.records import MAX_RECORD_LINES, STRUCTURE_HINT, BlockLines, group_records, record_span
from correlators.rules.scan import LiteralSet, minimal_literals
from connectors.timefmt import TIMESTAMP_HINT, LineClock, LineTime, TimeContext, parse_line_time
from correlators.windows import WorkloadIndex
from schemas.bundle import ExpectedSpec, TaskPid, TopologySpec, WorkloadSpec, to_ns
from schemas.deadletter import reason_of
from schemas.messages import Span
from schemas.records import (
    SCHEMA_VERSION,
    TIME_QUALITY_INHERITED,
    TIME_QUALITY_TRANSPORT,
    CoverageEntry,
    Observation,
    ObservationKind,
    Position,
    Source,
)
from schemas.utc import format_utc
from schemas.yamlspec import load_yaml

__all__ = ["MAX_BODY_CHARS", "MAX_STEP_RECORD_BYTES", "NUL_MARK", "RANK_PREFIX", "cut_body", "rank_of_prefix", "SCHEDULER_DIR", "SCHEDULER_HOST",
           "BundleConnector", "BundleError"]

#: Bodies longer than this (characters) are cut, with a marker and ``attributes.truncated``.
MAX_BODY_CHARS = 65_536
#: A file whose share of control bytes (NUL and other C0 except tab/CR/LF) exceeds this is
#: binary: reported as ``failed``, not read.
BINARY_CONTROL_SHARE = 0.10

#: The host name of scheduler-side records (BUNDLE.md: ``logs/_scheduler/``), in every connector.
SCHEDULER_HOST = "_scheduler"
_TOP_DIRS = ("fabric", "logs", "metrics")
#: The directory of the scheduler's per-host records (``scheduler/<host>/<file>``): step
#: records read into the workload record, never as log lines.
SCHEDULER_DIR = "scheduler"
#: A step record file larger than this (bytes, after gunzip) is not read: ``scontrol
#: listpids`` prints about 45 bytes a process, so this is some 180,000 processes of one host.
MAX_STEP_RECORD_BYTES = 8 * 1024 * 1024
#: ``[rank3]:`` -- the prefix PyTorch puts on every line a rank prints (shared by the readers).
RANK_PREFIX = re.compile(r"\[rank(\d{1,9})\]:")  # ranks fit an Int32
#: Log bytes (after gunzip) read before one vectorised scan runs over them all (bounds memory).
SCAN_BATCH_BYTES = 32 * 1024 * 1024
#: raw dmesg seconds since boot, also after ``dmesg -r``'s ``<6>`` or ``dmesg -x``'s prefix
_RAW_DMESG = r"^(?:kernel: |<\d{1,3}>|[a-z]+\d? *:[a-z]+ *: )?\[ *\d+\.\d+(?: <[^>]*>)?\]"
#: ``dmesg -H`` relative lines (``[  +0.000123]``): timed only in file order
_REL_DMESG = r"^(?:<\d{1,3}>|[a-z]+\d? *:[a-z]+ *: )?\[ *\+\d+\.\d+\]"
#: Lines the batch scan looks at again one by one (rare: structure and blank lines), in Rust
#: ``regex`` syntax for a line as the scan sees it, with its newline: the end of
#: :data:`~connectors.records.STRUCTURE_HINT` is the end of the line or before its newline
#: (multi-line mode would do the same, at ten times the cost).
_RARE = STRUCTURE_HINT.replace("$", r"\n?\z") + r"|\A\s*\z"
#: Unicode White_Space, what polars' ``strip_chars`` strips (Python's ``str.strip`` also strips
#: U+001C..U+001F)
_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
_STRUCTURE_RE = re.compile(STRUCTURE_HINT)
#: The one alternative of :data:`~connectors.timefmt.TIMESTAMP_HINT` that reads a whole line
#: (``sbatch``/``srun`` banners): a line matches it exactly when it holds one of
#: :data:`_BANNERS`, which a literal pass finds at a third of the regex's cost, so the scan
#: matches the hint without it, or the literals.
_BANNER_HINT = r"|.*\*\*\* (?:JOB|STEP) "
_BANNERS = ("*** JOB ", "*** STEP ")
_HINT_NO_BANNER = TIMESTAMP_HINT.replace(_BANNER_HINT, "")
_RAW_RE = re.compile(_RAW_DMESG)
_REL_RE = re.compile(_REL_DMESG)
NUL_MARK = "\u2400"  # SYMBOL FOR NULL: NUL bytes in text files are shown as this
_OBS_KINDS = frozenset(get_args(ObservationKind))
#: the fields a validated log-record :class:`Observation` of this reader is given
_LOG_OBS_GIVEN = frozenset({"source", "kind", "observed_at", "time_source", "time_quality", "host", "cluster",
                            "workload_id", "rank", "format", "body", "attributes", "position"})


def cut_body(text: str, attributes: dict[str, Any], skipped: int = 0) -> str:
    """``text`` as an observation body: cut to :data:`MAX_BODY_CHARS` characters with a marker
    line saying how many more there were, ``attributes["truncated"]`` set to the full length
    (plus ``skipped``, bytes of its lines already dropped while reading) when it is cut or
    anything was skipped. Every log reader (bundle, files, Loki) cuts the same way."""
    if len(text) > MAX_BODY_CHARS or skipped:
        attributes["truncated"] = len(text) + skipped
        if len(text) > MAX_BODY_CHARS:
            text = text[:MAX_BODY_CHARS] + f"\n[faultstream: cut, {len(text) - MAX_BODY_CHARS} more characters]"
    return text


def rank_of_prefix(first_line: str) -> int | None:
    """The rank of a record whose first line starts with PyTorch's ``[rankN]:`` prefix
    (:data:`RANK_PREFIX`), else None."""
    if first_line.startswith("[rank"):
        m = RANK_PREFIX.match(first_line)
        if m:
            return int(m[1])
    return None
_TEXT_BYTES = bytes([9, 10, 13]) + bytes(range(32, 256))


def is_binary(data: bytes) -> bool:
    """True when ``data`` (a file, or its first bytes) holds NUL bytes and more than
    :data:`BINARY_CONTROL_SHARE` of it are not text (NUL and the other C0 bytes except tab, CR
    and LF): an archive, a core file, a database. The one test of the bundle reader and the
    connectors."""
    return b"\x00" in data and len(data.translate(None, _TEXT_BYTES)) / len(data) > BINARY_CONTROL_SHARE


class BundleError(Exception):
    """A bundle that cannot be read at all. The message names the file and, for validation
    errors, the field: ``workload.yaml: field 'start': invalid datetime ...``. Meant to be
    printed to users as is (no traceback)."""


def _load_spec(path: Path, model: type[pydantic.BaseModel], required: bool) -> Any:
    name = f"{path.parent.name}/{path.name}" if path.parent.name == "workloads" else path.name
    if not path.is_file():
        if required:
            raise BundleError(f"{name}: missing in {path.parent} (every bundle needs one; see BUNDLE.md)")
        return None
    try:
        data = load_yaml(path)  # timestamps stay strings, 1:0 is no base-60 number
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise BundleError(f"{name}: invalid YAML{where}: {exc.problem}") from None
    except (yaml.YAMLError, OSError, UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{name}: cannot read: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BundleError(f"{name}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise BundleError(f"{name}: {reason_of(exc, most=None, width=None)}") from None


# ---------------------------------------------------------------------------------------------


#: A gzip file is unpacked up to this many bytes whatever it holds, and beyond that only while
#: it expands at most :data:`GZIP_MAX_RATIO` times (text logs expand 5-30x; a decompression
#: bomb about 1,000x).
GZIP_FREE_BYTES = 64 * 1024 * 1024
GZIP_MAX_RATIO = 200


def _read_bytes(file: Path, stats: "_FileStats", limit: int | None = None) -> bytes | None:
    """A file's bytes, gunzipped when they are gzip (noted in ``stats``); None, with the file
    marked failed and the reason in ``stats``, for a corrupt gzip, one that unpacks to more than
    ``limit`` bytes, or one past :data:`GZIP_FREE_BYTES` that expands more than
    :data:`GZIP_MAX_RATIO` times. Unpacked in chunks: a bomb is stopped at its bound, never
    held whole. Raises ``OSError`` when the file cannot be read."""
    data = file.read_bytes()
    if data[:2] != b"\x1f\x8b":
        return data
    bound = max(GZIP_FREE_BYTES, GZIP_MAX_RATIO * len(data))
    if limit is not None:
        bound = min(bound, limit)
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as unpacked:
            while chunk := unpacked.read(1024 * 1024):
                out += chunk
                if len(out) > bound:
                    stats.status = "failed"
                    stats.notes.append(
                        f"over {limit} bytes after gunzip: not read" if limit is not None and bound == limit
                        else f"gzip expands more than {GZIP_MAX_RATIO}x past {GZIP_FREE_BYTES} bytes: "
                             "not read (a decompression bomb?)")
                    return None
    except (OSError, EOFError, zlib.error) as exc:
        stats.status = "failed"
        stats.notes.append(f"corrupt gzip: {exc}")
        return None
    stats.notes.append("gzip")
    return bytes(out)


@dataclass
class _FileStats:
    records: int = 0
    unparsed: int = 0
    notes: list[str] = field(default_factory=list)
    status: str = "present"


@dataclass
class _Decoded:
    """One file's text, waiting for the batch scan: ``body`` is valid UTF-8, CRLF and NUL
    already normalised (a final newline ends the last line). ``src`` may differ from the
    file's first guess (a metrics file no telemetry parser recognised is read as log lines)."""

    src: "_Source"
    body: bytes
    bad_utf8: bool
    nul: bool


def _normalised(data: bytes, nul: bool) -> tuple[bytes, bool, bool]:
    """A file's bytes as the readers read its text: (UTF-8 bytes with invalid sequences
    replaced by U+FFFD, CRLF -> LF, NUL -> :data:`NUL_MARK`; whether any UTF-8 was invalid;
    whether it held NUL). Equal to decoding with ``errors="replace"`` and replacing on the
    text, since UTF-8 is self-synchronising. ``nul``: whether ``data`` holds a NUL byte (the
    caller has looked)."""
    bad_utf8 = False
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            data = data.decode("utf-8", errors="replace").encode("utf-8")
            bad_utf8 = True
    if b"\r" in data:  # one byte: memchr
        data = data.replace(b"\r\n", b"\n")
    if nul:
        data = data.replace(b"\x00", NUL_MARK.encode("utf-8"))
    return data, bad_utf8, nul


#: the thread the batch scan's polars pass runs on (one: a reader scans one batch at a time)
_SCAN_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bundle-scan")


@functools.lru_cache(maxsize=8)
def _literal_set(keywords: tuple[str, ...]) -> LiteralSet:
    """The compiled keyword set of a reader's keywords (cached: one compile per pack). A
    keyword holding a newline can never be inside one line: left out; so is one holding
    another keyword (:func:`~correlators.rules.scan.minimal_literals`: the same lines marked)."""
    return LiteralSet(minimal_literals(k for k in keywords if "\n" not in k))


@dataclass
class _Scan:
    """Per-line boolean arrays of the vectorised scan for one file (``hint``, ``kw``,
    ``struct``, ``raw``, and ``bad_utf8``/``nul`` when present)."""

    arrays: dict[str, np.ndarray]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]


class _Times:
    """Line times of one file with neighbour inheritance. ``before`` is cheapest when called
    with non-decreasing positions (both paths do), walking each hint line at most once.
    ``in_order``: the file holds lines only a :class:`~connectors.timefmt.LineClock` times
    (dmesg -H relative lines, raw dmesg seconds): every hint line is timed up front, in file
    order, so both paths see the same times."""

    def __init__(self, lines: Sequence[str], hint: np.ndarray, ctx: TimeContext, in_order: bool = False):
        self.lines = lines
        self.ctx = ctx
        self.hint = hint
        idx = np.where(hint, np.arange(len(hint), dtype=np.int64), -1)
        self.prev = np.maximum.accumulate(idx) if len(idx) else idx  # last hint index <= i
        self._memo: dict[int, LineTime | None] = {}
        if in_order:
            clock = LineClock(ctx)
            self._memo = {int(j): clock(lines[int(j)]) for j in np.flatnonzero(hint)}
        self._pos = -1  # cache: nearest timed line <= _pos is _near
        self._near: int | None = None
        self._first: int | None | bool = False

    def line(self, j: int) -> LineTime | None:
        if not self.hint[j]:
            return None
        memo = self._memo
        if j not in memo:
            memo[j] = parse_line_time(self.lines[j], self.ctx)
        return memo[j]

    def before(self, s: int) -> int | None:
        """Index of the nearest timed line < s, or None."""
        if s <= 0:
            return None
        top = s - 1
        floor = self._pos if top >= self._pos else -1
        j = int(self.prev[top])
        found: int | None = None
        while j > floor:
            if self.line(j) is not None:
                found = j
                break
            j = int(self.prev[j - 1]) if j > 0 else -1
        if found is None and floor >= 0:
            found = self._near
        self._pos, self._near = top, found
        return found

    def first(self) -> int | None:
        """Index of the file's first timed line, or None."""
        if self._first is False:
            self._first = None
            for j in np.flatnonzero(self.hint):
                if self.line(int(j)) is not None:
                    self._first = int(j)
                    break
        return self._first  # type: ignore[return-value]


@dataclass
class _Source:
    rel: str
    kind: str
    host: str
    ctx: TimeContext


class BundleConnector:
    """Reads an incident bundle (BUNDLE.md v1) into Observations.

    ``path``: the bundle directory. ``keywords``: if given, only records with a line containing
    one of them (case-sensitive literal substrings) become Observations -- the fast path, which
    never loops over every line in Python; telemetry samples are always emitted. ``None``
    emits every record.

    Attributes after construction: ``path``, ``workload``, ``topology``, ``expected`` (None
    when absent or invalid; then ``expected_error`` holds the message naming file and field).
    After :meth:`observations` is exhausted: ``lines_read`` (physical lines of all files) and
    :meth:`coverage`. Raises :class:`BundleError` if the directory or ``workload.yaml`` is
    missing or ``workload.yaml``/``topology.yaml`` is invalid (message names the file and the
    field). Observation sources are ``bundle:<cluster>/<workload_id>``, so ids do not depend
    on the directory the bundle was unpacked in.
    """

    def __init__(self, path: str | Path, *, keywords: Sequence[str] | None = None):
        self.path = Path(path)
        if not self.path.is_dir():
            raise BundleError(f"{self.path}: not a bundle directory")
        self.keywords = None if keywords is None else [k for k in keywords if k.strip()]
        self._index: WorkloadIndex | None = None
        self._kw_set = _literal_set(tuple(self.keywords)) if self.keywords else None
        self.workload: WorkloadSpec = _load_spec(self.path / "workload.yaml", WorkloadSpec, True)
        #: every workload attempt of the bundle: ``workload.yaml`` first, then
        #: ``workloads/*.yaml`` (other attempts on the same fabric, for cross-workload incidents)
        self.workloads: list[WorkloadSpec] = [self.workload]
        #: workload id -> the file it was read from, relative to the bundle
        self.workload_files: dict[str, str] = {self.workload.workload_id: "workload.yaml"}
        extra_dir = self.path / "workloads"
        if extra_dir.is_dir():
            for extra in sorted(extra_dir.glob("*.yaml")):
                spec = _load_spec(extra, WorkloadSpec, True)
                if any(w.workload_id == spec.workload_id for w in self.workloads):
                    raise BundleError(f"workloads/{extra.name}: duplicate workload_id {spec.workload_id!r}")
                if spec.cluster != self.workload.cluster:
                    raise BundleError(f"workloads/{extra.name}: cluster {spec.cluster!r} is not workload.yaml's "
                                      f"{self.workload.cluster!r} (a bundle is one cluster's fabric)")
                self.workloads.append(spec)
                self.workload_files[spec.workload_id] = f"workloads/{extra.name}"
        self.topology: TopologySpec | None = _load_spec(self.path / "topology.yaml", TopologySpec, False)
        # expected.yaml only matters for scoring: a broken one must not stop a replay
        self.expected: ExpectedSpec | None = None
        self.expected_error: str | None = None
        try:
            self.expected = _load_spec(self.path / "expected.yaml", ExpectedSpec, False)
        except BundleError as exc:
            self.expected_error = str(exc)
        # ids must not depend on where the bundle was unpacked: name it by its workload
        self._instance = f"{self.workload.cluster}/{self.workload.workload_id}"
        self._start_ns = self.workload.start_ns
        self._contexts: dict[str, TimeContext] = {}
        for host, facts in ((h, f) for w in reversed(self.workloads) for h, f in w.hosts.items()):
            tz = facts.timezone or "UTC"
            try:
                if tz != "UTC":
                    ZoneInfo(tz)
            except (ZoneInfoNotFoundError, ValueError, TypeError):
                raise BundleError(
                    f"workload.yaml: field 'hosts.{host}.timezone': unknown time zone {tz!r}"
                ) from None
            boots = tuple(sorted(to_ns(b) for b in facts.boot_times))
            self._contexts[host] = TimeContext(
                year=self.workload.start.year,
                boot_time_ns=to_ns(facts.boot_time) if facts.boot_time else (boots[0] if boots else None),
                tz=tz,
                ref_ns=self._start_ns,
                boot_times_ns=boots,
            )
        #: the transport's time of a record with no time in its file (UTC ns): the end
        self._transport_ns = self.workload.end_ns if self.workload.end_ns is not None else self._start_ns
        #: coverage warnings about the specs themselves (unknown workload.yaml keys)
        self._spec_coverage: list[CoverageEntry] = []
        for spec in self.workloads:
            unknown = spec.unknown_keys()
            if unknown:
                self._spec_coverage.append(CoverageEntry(
                    source=f"file:{self.workload_files[spec.workload_id]}", status="present",
                    detail=f"{len(unknown)} unknown key(s), ignored (this reader knows BUNDLE.md v1): "
                    + ", ".join(unknown),
                ))
        self._read_step_records()
        self._coverage: list[CoverageEntry] = list(self._spec_coverage)
        self.lines_read = 0
        #: counter files are read in batches of up to this many bytes (0: one by one)
        self.counter_batch_bytes: int = _counters_mod.COUNTER_BATCH_BYTES

    def _read_step_records(self) -> None:
        """Read ``scheduler/<host>/*`` into the workloads' ``task_pids`` (module docstring,
        *Step records*); one coverage entry per file in ``_spec_coverage``."""
        root = self.path / SCHEDULER_DIR
        if not root.is_dir():
            return
        jobs = [slurm_job_of(spec.workload_id) for spec in self.workloads]
        added: dict[int, dict[tuple, TaskPid]] = {}
        bundle_root = self.path.resolve()
        for file in sorted((p for p in root.rglob("*") if not p.is_dir()),
                           key=lambda p: p.relative_to(self.path).as_posix()):
            rel = file.relative_to(self.path).as_posix()
            parts = rel.split("/")
            stats = _FileStats()
            table = None
            if len(parts) != 3:
                stats.status = "failed"
                stats.notes.append("not a scheduler/<host>/<file> path: not read")
            elif not file.is_file():
                stats.status = "failed"
                stats.notes.append("not a regular file (dangling or looping symlink, FIFO, socket or device): not read")
            elif file.is_symlink() and not file.resolve().is_relative_to(bundle_root):
                stats.status = "failed"
                stats.notes.append("symbolic link to a file outside the bundle: not read")
            else:
                table = self._step_table(file, stats)
            if table is not None:
                host = parts[1]
                stats.records = len(table.rows) + table.malformed
                stats.unparsed = table.malformed
                stats.notes.append(
                    f"scontrol listpids ({table.format}): {len(table.rows)} rows"
                    + (f", {table.malformed} malformed rows skipped" if table.malformed else "")
                    + (f", {table.before_header} lines before the header skipped" if table.before_header else ""))
                stats.notes.extend(table.notes)
                used = False
                for i, spec in enumerate(self.workloads):
                    if host not in spec.nodes:
                        continue
                    used = True
                    job = jobs[i]
                    if job is None:
                        stats.notes.append(f"{spec.workload_id}: its id names no Slurm job id "
                                           "(array task, heterogeneous component or another scheduler): rows not used")
                        continue
                    kept, skipped = task_pid_rows(table.rows, job[0], job[1])
                    mine = added.setdefault(i, {})
                    for row in kept:
                        key = (host, row.pid, row.global_id, row.local_id, row.step_id)
                        mine.setdefault(key, TaskPid(host=host, pid=row.pid, rank=row.global_id,
                                                     local_rank=row.local_id, step=row.step_id,
                                                     source=f"{rel}:{row.line}"))
                    why = [f"{n} {text}" for n, text in (
                        (skipped["other_job"], "of other jobs"), (skipped["other_step"], "of other steps"),
                        (skipped["not_a_task"], "not tasks ('-' ids)"),
                        (skipped["named_step"], "of batch/extern/interactive steps")) if n]
                    step = f" step {job[1]}" if job[1] is not None else ""
                    stats.notes.append(f"{spec.workload_id} (job {job[0]}{step}): {len(kept)} task pids"
                                       + (f"; left out: {', '.join(why)}" if why else ""))
                if not used:
                    stats.notes.append(f"{host} is no node of the bundle's workloads: rows not used")
            self._spec_coverage.append(CoverageEntry(
                source=f"file:{rel}", status=stats.status, records=stats.records,
                unparsed=stats.unparsed, detail="; ".join(stats.notes)))
        for i, tasks in sorted(added.items()):
            if not tasks:
                continue
            spec = self.workloads[i]
            spec = spec.model_copy(update={"task_pids": [*spec.task_pids, *tasks.values()]})
            self.workloads[i] = spec
            if i == 0:
                self.workload = spec

    def _step_table(self, file: Path, stats: "_FileStats"):
        """A step record file's listpids table, or None with ``stats`` saying why."""
        try:
            if file.stat().st_size > MAX_STEP_RECORD_BYTES:
                stats.status = "failed"
                stats.notes.append(f"over {MAX_STEP_RECORD_BYTES} bytes: not read")
                return None
            data = _read_bytes(file, stats, MAX_STEP_RECORD_BYTES)
        except OSError as exc:
            stats.status = "failed"
            stats.notes.append(f"cannot read: {exc}")
            return None
        if data is None:
            return None
        if not data.strip():
            stats.status = "empty"
            stats.notes.append("empty file")
            return None
        text = data.decode("utf-8", errors="replace")
        try:
            return parse_listpids(text)
        except ListpidsError as exc:
            stats.status = "failed"
            stats.notes.append(str(exc))
            stats.records = stats.unparsed = text.count("\n") + (0 if text.endswith("\n") else 1)
            return None

    # -- public ---------------------------------------------------------------------------

    def observations(self) -> Iterator[Observation]:
        """Yield Observations: files in sorted relative-path order, records in file order.

        Log files are read one by one and scanned in batches of up to :data:`SCAN_BATCH_BYTES`
        bytes with one vectorised polars pass per batch (a bundle of thousands of small
        per-host files costs a few passes, not thousands)."""
        self._coverage = list(self._spec_coverage)
        self.lines_read = 0
        seen_hosts: set[str] = set()
        batch: list[tuple[_Source, _FileStats, _Decoded]] = []
        batch_bytes = 0
        # counter files waiting to be read together: consecutive, one header, bounded bytes
        cbatch: list[tuple[_Source, _FileStats, bytes]] = []
        cbatch_bytes = 0
        cbatch_key: bytes | None = None

        def flush() -> Iterator[Observation]:
            nonlocal batch, batch_bytes
            if batch:
                # a batch's records are built with the garbage collector paused (they hold no
                # reference cycles; a collection would only walk the heap), then handed out
                out: list[Observation] = []
                with gc_paused():
                    scans = self._scan([d for _, _, d in batch])
                    for (src, stats, decoded), (block, scan) in zip(batch, scans):
                        out.extend(self._process(decoded, stats, block, scan))
                        self._cover(src, stats)
                yield from out
            batch, batch_bytes = [], 0

        def flush_counters() -> Iterator[Observation]:
            nonlocal cbatch, cbatch_bytes, cbatch_key
            pending, cbatch, cbatch_bytes, cbatch_key = cbatch, [], 0, None
            if pending:
                yield from self._counter_batch(pending)

        for rel, file in self._files():
            src = self._source(file, rel)
            seen_hosts.add(src.host)
            stats = _FileStats()
            decoded = None
            try:
                if not file.is_file():
                    # never open it: a FIFO would block, a loop or dangling link cannot be read
                    stats.status = "failed"
                    stats.notes.append(
                        "not a regular file (dangling or looping symlink, FIFO, socket or device): not read"
                    )
                elif file.is_symlink() and not file.resolve().is_relative_to(self.path.resolve()):
                    # a bundle holds its own evidence: a link out of it is never followed
                    stats.status = "failed"
                    stats.notes.append("symbolic link to a file outside the bundle: not read")
                elif file.name.endswith(COUNTER_SUFFIX) and src.rel.split("/", 1)[0] in ("fabric", "metrics"):
                    yield from flush()  # keep file order
                    data = _read_bytes(file, stats)
                    limit = self.counter_batch_bytes
                    key = counter_batch_key(data) if data is not None and limit > 0 else None
                    if key is not None:
                        if cbatch and (key != cbatch_key or cbatch_bytes + len(data) > limit):
                            yield from flush_counters()
                        cbatch.append((src, stats, data))
                        cbatch_bytes += len(data)
                        cbatch_key = key
                        continue  # covered when its batch is read
                    yield from flush_counters()  # keep file order
                    yield from self._counters(data, src, stats)
                else:
                    yield from flush_counters()  # keep file order
                    if src.kind == "telemetry":
                        yield from flush()  # keep file order
                    decoded = yield from self._load(file, src, stats)
            except (OSError, MemoryError) as exc:
                stats.status = "failed"
                stats.notes.append(f"cannot read: {exc}")
                decoded = None
            if decoded is None:
                yield from flush_counters()  # keep file order
                self._cover(src, stats)
                continue
            batch.append((src, stats, decoded))
            batch_bytes += len(decoded.body)
            if batch_bytes >= SCAN_BATCH_BYTES:
                yield from flush()
        yield from flush_counters()
        yield from flush()
        order: dict[str, int] = {}
        for i, node in enumerate(self.workload.nodes):
            order.setdefault(node, i)  # a node's first place in workload.yaml
        for node in sorted({n for w in self.workloads for n in w.nodes},
                           key=lambda n: (order[n], "") if n in order else (len(order), n)):
            if node not in seen_hosts:
                self._coverage.append(CoverageEntry(
                    source=f"host:{node}", status="empty",
                    detail="no logs or metrics for this node in the bundle",
                ))

    def _cover(self, src: "_Source", stats: "_FileStats") -> None:
        self._coverage.append(CoverageEntry(
            source=f"file:{src.rel}", status=stats.status, records=stats.records,
            unparsed=stats.unparsed, detail="; ".join(stats.notes),
        ))

    def workload_of(self, host: str, at_ns: int) -> str | None:
        """The workload a record of ``host`` at ``at_ns`` (UTC ns) belongs to. A one-workload
        bundle: always that workload (every file is about it). Several workloads: the rule of
        :class:`correlators.windows.WorkloadIndex` (the stream routes with it too), else None --
        switch logs and lines between jobs belong to no workload; the fabric correlator still
        reads them."""
        if len(self.workloads) == 1:
            return self.workload.workload_id
        if self._index is None:
            rules = default_causal_rules()
            self._index = WorkloadIndex({}, before_ns=rules.before_start_ns, after_ns=rules.after_end_ns)
            for spec in self.workloads:
                self._index.add(Span.of(spec))
        return self._index.route(self.workload.cluster, host, at_ns)

    def coverage_for(self, workload_id: str) -> list[CoverageEntry]:
        """The coverage entries about one workload: all of them in a one-workload bundle;
        with several workloads, those of its nodes' files and of ``logs/_scheduler/`` and
        ``logs/_aggregated/``."""
        if len(self.workloads) == 1:
            return self.coverage()
        spec = next(w for w in self.workloads if w.workload_id == workload_id)
        nodes = set(spec.nodes) | {SCHEDULER_HOST, AGGREGATED_HOST}
        own = f"file:{self.workload_files[workload_id]}"
        out = []
        for entry in self._coverage:
            if entry.source == own:
                out.append(entry)
                continue
            kind, _, rest = entry.source.partition(":")
            parts = rest.split("/")
            node = rest if kind == "host" else parts[1] if len(parts) > 2 else None
            if node in nodes:
                out.append(entry)
        return out

    def coverage(self) -> list[CoverageEntry]:
        """One entry per file (``source="file:<relative path>"``) plus ``host:<node>`` entries
        (status ``empty``) for workload nodes with no files. Valid after :meth:`observations`
        is exhausted."""
        return list(self._coverage)

    # -- files ----------------------------------------------------------------------------

    def _files(self) -> list[tuple[str, Path]]:
        """(path relative to the bundle in POSIX form, path) of every entry under the top
        directories but directories, sorted by the relative path."""
        files = []
        for top in _TOP_DIRS:
            root = self.path / top
            if root.is_dir():
                # one scan (os.walk's directory entries carry their type; symbolic links to
                # directories are not followed): everything but directories, so entries that
                # are not regular files are listed too and coverage reports them
                for folder, _dirs, names in os.walk(root):
                    rel_folder = Path(folder).relative_to(self.path).as_posix()
                    files.extend((f"{rel_folder}/{name}", Path(folder, name)) for name in names)
        files.sort(key=lambda item: item[0])
        return files

    def _ctx(self, host: str) -> TimeContext:
        ctx = self._contexts.get(host)
        if ctx is None:
            ctx = self._contexts[host] = TimeContext(year=self.workload.start.year, ref_ns=self._start_ns)
        return ctx

    def _source(self, file: Path, rel: str | None = None) -> _Source:
        if rel is None:
            rel = file.relative_to(self.path).as_posix()
        parts = rel.split("/")
        top = parts[0]
        host = parts[1] if len(parts) > 2 else "_unknown"
        if top == "logs" and host == SCHEDULER_HOST:
            kind = "scheduler_event"
        elif top == "metrics":
            kind = "telemetry"
        else:
            kind = "log_line"
        return _Source(rel, kind, host, self._ctx(host))

    def _load(self, file: Path, src: _Source, stats: _FileStats):
        """Read and decode one file. A generator: telemetry files yield their Observations
        here; returns the decoded lines of a log file (None when there is nothing to scan)."""
        if src.host == "_unknown":
            stats.notes.append("file is not inside a <host>/ directory: host '_unknown'")
        data = _read_bytes(file, stats)
        if data is None:
            return None
        if src.kind == "log_line" and data[:1] in (b"\x80", b"{", b" ", b"\n"):
            # a PyTorch flight-recorder dump (pickle or JSON): one compact JSON record of its
            # last entries (correlators.stackdump; the pickle through a restricted unpickler)
            fr = _stackdump.normalise_dump_bytes(data, src.rel)
            if fr is not None:
                data, note = fr
                stats.notes.append(note)
        if data.endswith(b"\x00"):
            # the zero-filled tail a file system leaves when a node crashed after allocating a
            # log's blocks and before writing them: not content
            text_end = len(data.rstrip(b"\x00"))
            stats.notes.append(f"{len(data) - text_end} NUL bytes at the end (the unwritten tail a crash "
                               "leaves): left out")
            data = data[:text_end]
        if not data:
            stats.status = "empty"
            stats.notes.append("empty file")
            return None
        nul = b"\x00" in data
        if nul and is_binary(data):
            control = len(data.translate(None, _TEXT_BYTES))  # bytes that are not text
            stats.status = "failed"
            nlines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
            self.lines_read += nlines
            stats.records = nlines
            stats.unparsed = nlines
            stats.notes.append(f"binary content ({control} of {len(data)} bytes are NUL/control bytes): not read")
            return None
        data, bad_utf8, nul = _normalised(data, nul)
        if src.kind == "telemetry":
            done = yield from self._telemetry(data.decode("utf-8"), src, stats)
            if done:
                return None
            src = _Source(src.rel, "log_line", src.host, src.ctx)
        return _Decoded(src, data, bad_utf8, nul)

    def _scan(self, files: list[_Decoded]) -> list[tuple[BlockLines, _Scan]]:
        """The per-line facts of several files in one vectorised polars pass, and their
        keyword lines in one Hyperscan pass over each file's bytes; per file its lines
        (:class:`~connectors.records.BlockLines`, decoded only when read) and arrays.

        Polars sees each line as a view of the file's bytes with its newline (Arrow offsets
        from the newline index, no copy per line): :data:`~connectors.timefmt.TIMESTAMP_HINT`
        and the dmesg patterns are anchored at the start and need no end; the structure hint
        is matched in multi-line mode. The hint's banner alternative, the one that reads a
        whole line, is a literal pass (:data:`_BANNERS`). Lines the rare-line pattern marks (structure or blank)
        and the dmesg-marked lines are few; Python re-reads those to say which they are."""
        blocks = [BlockLines(d.body) for d in files]
        chunks = []
        for d, block in zip(files, blocks):
            if len(block):
                offsets = np.empty(len(block) + 1, dtype=np.int64)
                offsets[:-1] = block.starts
                offsets[-1] = len(d.body)
                chunks.append(pa.LargeStringArray.from_buffers(
                    len(block), pa.py_buffer(offsets), pa.py_buffer(d.body)))
        col = pl.col("line")
        exprs = [(col.str.contains(_HINT_NO_BANNER) | col.str.contains_any(list(_BANNERS))).alias("hint"),
                 col.str.contains(_RARE).alias("rare"),
                 col.str.contains(f"{_RAW_DMESG}|{_REL_DMESG}").alias("dmesg")]
        if any(d.bad_utf8 for d in files):
            exprs.append(col.str.contains("\ufffd", literal=True).alias("bad_utf8"))
        if any(d.nul for d in files):
            exprs.append(col.str.contains(NUL_MARK, literal=True).alias("nul"))
        # polars (its own threads) and Hyperscan both run without the GIL: the keyword scan
        # runs here while the polars pass runs on the scan thread
        pending = _SCAN_THREAD.submit(self._select, chunks, exprs)
        kw_ends = [self._kw_set.match_ends(d.body) if self._kw_set is not None else [] for d in files]
        arrays = pending.result()
        out, at = [], 0
        for d, block, ends in zip(files, blocks, kw_ends):
            n = len(block)
            part = {name: a[at:at + n] for name, a in arrays.items()}
            at += n
            rare, dmesg = part.pop("rare"), part.pop("dmesg")
            blank = np.zeros(n, dtype=bool)
            struct = np.zeros(n, dtype=bool)
            for j in np.flatnonzero(rare).tolist():
                line = block[j]
                blank[j] = not line.strip(_WHITE_SPACE)
                struct[j] = _STRUCTURE_RE.match(line) is not None
            raw = np.zeros(n, dtype=bool)
            rel = np.zeros(n, dtype=bool)
            for j in np.flatnonzero(dmesg).tolist():
                line = block[j]
                raw[j] = _RAW_RE.match(line) is not None
                rel[j] = _REL_RE.match(line) is not None
            # a line can be longer than MAX_BODY_CHARS characters only with more bytes than that
            long = (block.ends - block.starts) > MAX_BODY_CHARS
            for j in np.flatnonzero(long).tolist():
                long[j] = len(block[j]) > MAX_BODY_CHARS
            part.update(blank=blank, struct=struct, raw=raw, rel=rel, long=long)
            if self._kw_set is not None:
                kw = np.zeros(n, dtype=bool)
                if ends:
                    kw[block.line_of(np.asarray(ends, dtype=np.int64) - 1)] = True
                part["kw"] = kw
            out.append((block, _Scan(part)))
        return out

    @staticmethod
    def _select(chunks: list[pa.Array], exprs: list[pl.Expr]) -> dict[str, np.ndarray]:
        """The boolean arrays of ``exprs`` over the lines of ``chunks`` (one polars pass)."""
        series = pl.Series("line", pa.chunked_array(chunks, type=pa.large_string()))
        frame = pl.DataFrame([series]).select(exprs)
        return {name: frame[name].to_numpy() for name in frame.columns}

    def _process(self, decoded: _Decoded, stats: _FileStats, block: BlockLines,
                 scan: _Scan) -> Iterator[Observation]:
        bad_utf8, nul, src = decoded.bad_utf8, decoded.nul, decoded.src
        self.lines_read += len(block)
        # blank as polars says (Unicode White_Space); Python's strip also removes \x1c-\x1f
        nonblank = ~scan["blank"]
        first = int(nonblank.argmax()) if len(nonblank) else 0
        if not (nonblank.any() and (block[first].strip()
                                    or any(block[int(j)].strip() for j in np.flatnonzero(nonblank)))):
            stats.status = "empty"
            stats.notes.append("no non-blank lines")
        lines: Sequence[str] = block if self.keywords is not None else block.text(0, len(block)).split("\n")
        counts = {name: int(np.count_nonzero(a)) for name, a in scan.arrays.items()
                  if name in ("bad_utf8", "nul", "raw")}
        if src.ctx.boot_time_ns is not None:
            counts.pop("raw", None)
        hint = scan["hint"]
        if bad_utf8:
            stats.notes.append(f"invalid UTF-8 in {counts['bad_utf8']} lines (replaced with U+FFFD)")
        if nul:
            stats.notes.append(f"NUL bytes in {counts['nul']} lines (replaced with U+2400)")
        if counts.get("raw"):
            stats.notes.append(
                f"{counts['raw']} raw dmesg lines (seconds since boot) and no hosts.{src.host}.boot_time "
                "in workload.yaml: their times are inherited"
            )
        in_order = bool(np.any(scan["rel"])) or (
            src.ctx.boot_time_ns is not None and bool(np.any(scan["raw"])))
        times = _Times(lines, hint, src.ctx, in_order=in_order)
        tally = {"line": 0, "inferred": 0, "transport": 0, "truncated": 0}
        if self.keywords is None:
            for rec in group_records(lines):
                if not rec.text.strip():
                    continue  # a blank line carries nothing to attribute
                s = rec.first_line - 1
                e = s + rec.text.count("\n") + 1
                yield self._log_obs(src, lines, s, e, times, tally, text=rec.text)
        else:
            yield from self._fast(scan, lines, src, times, tally)
        # Coverage counts come from the vectorised scan, identical on both paths, so a verdict
        # replayed from files and one computed from the stream report the same coverage.
        stats.records = len(lines)
        stats.unparsed = int(np.count_nonzero(~hint & ~scan["blank"]))
        stats.notes.append(f"{len(lines)} lines, {stats.unparsed} without a timestamp of their own")
        long_lines = int(np.count_nonzero(scan["long"]))
        if long_lines:
            stats.notes.append(f"{long_lines} lines over {MAX_BODY_CHARS} characters: their records cut")

    def _fast(self, scan: "_Scan", lines: Sequence[str], src: _Source, times: _Times,
              tally: dict[str, int]) -> Iterator[Observation]:
        """Materialise only the records holding a keyword line (see the class docstring)."""
        if not self.keywords or not lines:
            return
        cand = np.flatnonzero(scan["kw"])
        if not len(cand):
            return
        struct = np.flatnonzero(scan["struct"]).tolist()
        end = 0
        for c in cand.tolist():
            if c < end:
                continue  # inside the record just emitted
            # record_span only matters with a structure line in [c - MAX + 1, c + 1].
            k = bisect_right(struct, c + 1)
            if k and struct[k - 1] > c - MAX_RECORD_LINES:
                s, e = record_span(lines, c, structure_lines=struct)
            else:
                s, e = c, c + 1
            end = e
            yield self._log_obs(src, lines, s, e, times, tally)

    def _log_obs(self, src: _Source, lines: Sequence[str], s: int, e: int, times: _Times,
                 tally: dict[str, int], text: str | None = None) -> Observation:
        if text is None:
            text = lines.text(s, e) if isinstance(lines, BlockLines) else "\n".join(lines[s:e])
        attributes: dict[str, Any] = {}
        text = cut_body(text, attributes)
        if "truncated" in attributes:
            tally["truncated"] += 1
        lt = times.line(s)
        fmt = "unknown"
        if lt is not None:
            at, source, quality, fmt = lt.at_ns, "line", lt.quality, lt.format
        else:
            j = times.before(s)
            if j is None:
                j = times.first()
            if j is not None:
                at, source, quality = times.line(j).at_ns, "inferred", TIME_QUALITY_INHERITED  # type: ignore[union-attr]
                attributes["time_from_line"] = j + 1
            else:
                at, source, quality = self._transport_ns, "transport", TIME_QUALITY_TRANSPORT
        tally[source] += 1
        rank = rank_of_prefix(lines[s])
        kind, host, cluster = src.kind, src.host, self.workload.cluster
        workload_id = self.workload_of(host, at)
        if (time_ok(at) and type(quality) is float and 0.0 <= quality <= 1.0 and kind in _OBS_KINDS
                and type(host) is str and type(cluster) is str and opt_str(workload_id) and opt_int32(rank)
                and type(fmt) is str and type(text) is str and json_attributes(attributes)):
            # every value already as validation would leave it: the same record, built light
            return light_record(Observation, {
                "schema_version": SCHEMA_VERSION, "observation_id": "",
                "source": light_record(Source, {"connector": "bundle", "instance": self._instance},
                                       {"connector", "instance"}),
                "kind": kind, "observed_at": at, "observed_at_utc": format_utc(at), "time_source": source,
                "time_quality": quality, "host": host, "cluster": cluster, "workload_id": workload_id,
                "rank": rank, "gpu": None, "fabric_port": None, "format": fmt, "body": text, "metric": None,
                "attributes": attributes,
                "position": light_record(Position, {"file": src.rel, "line": s + 1, "topic": None,
                                                    "partition": None, "offset": None}, {"file", "line"}),
            }, set(_LOG_OBS_GIVEN)).with_id()
        return Observation(
            source=Source(connector="bundle", instance=self._instance),
            kind=src.kind,
            observed_at=at,
            time_source=source,
            time_quality=quality,
            host=src.host,
            cluster=self.workload.cluster,
            workload_id=workload_id,
            rank=rank,
            format=fmt,
            body=text,
            attributes=attributes,
            position=Position(file=src.rel, line=s + 1),
        ).with_id()

    def _counters(self, data: bytes | None, src: _Source, stats: _FileStats) -> Iterator[Observation]:
        """A port counter series (``*.counters.csv``) read on its own: the fabric_counter
        Observations of its samples with a nonzero error delta or a reset (host = the row's
        node, default the directory name); records = data rows, unparsed = malformed rows.
        ``data``: the file's bytes (None: a corrupt gzip, already noted)."""
        if data is None:
            return
        table = read_counter_csv(data, default_node=src.host)
        self.lines_read += table.rows + (1 if data.strip() else 0)
        stats.records, stats.unparsed = table.rows, table.unparsed
        stats.notes.extend(table.notes)
        if table.rows == 0:
            stats.status = "empty"
            stats.notes.append("no counter samples")
            return
        if table.frame.height == 0:
            stats.status = "failed"
            return
        side = "switch" if src.rel.startswith("fabric/") else "host"
        n = 0
        for obs in table_observations(table, source=Source(connector="bundle", instance=self._instance),
                                      rel=src.rel, cluster=self.workload.cluster,
                                      workload_id=self.workload.workload_id, side=side):
            n += 1
            yield obs
        stats.notes.append(f"counter series: {table.frame.height} samples of {len(table.counters)} counters, "
                           f"{n} with error increases or resets")

    def _counter_batch(self, pending: list[tuple[_Source, _FileStats, bytes]]) -> Iterator[Observation]:
        """Counter files of one header (:func:`~connectors.counter_readers.counter_batch_key`) read
        in one polars pass (:func:`~connectors.counter_readers.read_counter_batch`), with the same
        Observations, coverage and order as :meth:`_counters` file by file -- which reads
        them when the batch cannot be read at once (e.g. a bad value in one of them)."""
        results = None
        if len(pending) > 1:
            results = read_counter_batch(
                [(data, src.host, src.rel, "switch" if src.rel.startswith("fabric/") else "host")
                 for src, _, data in pending],
                source=Source(connector="bundle", instance=self._instance), cluster=self.workload.cluster,
                workload_id=self.workload.workload_id)
        if results is None:
            for src, stats, data in pending:
                yield from self._counters(data, src, stats)
                self._cover(src, stats)
            return
        for (src, stats, data), res in zip(pending, results):
            self.lines_read += res.rows + 1  # + the header (a batched file has one)
            stats.records, stats.unparsed = res.rows, res.unparsed
            stats.notes.extend(res.notes)
            if res.samples == 0:
                stats.status = "failed"
            else:
                yield from res.observations
                stats.notes.append(f"counter series: {res.samples} samples of {res.counters} counters, "
                                   f"{len(res.observations)} with error increases or resets")
            self._cover(src, stats)

    def _telemetry(self, text: str, src: _Source, stats: _FileStats) -> Iterator[Observation]:
        """Emit telemetry samples; return True if the file was consumed as telemetry."""
        try:
            parsed = parse_telemetry(text, src.ctx)
        except Exception as exc:  # noqa: BLE001 -- any parser error: fall back to log lines
            # a telemetry file that cannot be read: its coverage says failed, stderr says why
            import logging

            stats.status = "failed"
            stats.notes.append(f"telemetry parse error ({type(exc).__name__}: {exc}); read as log lines")
            logging.getLogger("faultstream.bundle").warning(
                "%s: telemetry cannot be read (%s: %s): coverage failed, its lines read as log lines",
                src.rel, type(exc).__name__, str(exc)[:300])
            return False
        if parsed is None:
            stats.notes.append("no telemetry format recognised; read as log lines")
            return False
        fmt, samples = parsed
        nlines = text.count("\n") + (0 if text.endswith("\n") else 1)
        self.lines_read += nlines
        if not samples:
            stats.status = "empty"
            stats.notes.append(f"{fmt}: no GPU samples")
            stats.unparsed += 1
            return True
        for sample in samples:
            stats.records += 1
            yield self._telemetry_obs(src, sample)
        stats.notes.append(f"{fmt}: {len(samples)} GPU samples")
        return True

    def _telemetry_obs(self, src: _Source, sample: TelemetrySample) -> Observation:
        if sample.at is not None:
            at, source, quality = sample.at.at_ns, "line", sample.at.quality
        else:
            at, source, quality = self._transport_ns, "transport", TIME_QUALITY_TRANSPORT
        return Observation(
            source=Source(connector="bundle", instance=self._instance),
            kind="telemetry",
            observed_at=at,
            time_source=source,
            time_quality=quality,
            host=src.host,
            cluster=self.workload.cluster,
            workload_id=self.workload_of(src.host, at),
            gpu=sample.gpu,
            format=sample.format,
            body=sample.summary,
            metric=dict(sample.metric),
            attributes=dict(sample.attributes),
            position=Position(file=src.rel, line=sample.line),
        ).with_id()
