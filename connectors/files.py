"""Log-file tailing connector (``tail -F`` semantics) -> ``log_line`` Observations.

``FilesConnector(paths, host=..., cursor=CursorStore(...))`` reads the new complete lines of
each file from its persisted byte offset. Per path the cursor holds
``{"dev", "ino", "offset", "line", "epoch", "last_ns"}``: the file identity (device + inode),
the byte offset just after the last *emitted* line, that line's number (1-based numbering per
file generation), the generation (``epoch``, +1 at every rotation or truncation) and the last
line time seen (UTC ns); with coverage records also ``"totals"`` (the file's coverage counts
since the cursor was created). The position is only valid for the file it was taken on: the path
*and* the inode must match.

* **Rotation** (the path now names another inode): the old file is read to its end (its last
  line too, even without a newline, since nobody writes it any more), then the new file is
  read from offset 0. A rotation that happened while the connector was stopped is handled the
  same way when the old file is still in the same directory under another name (``x.log.1``).
* **Truncation** (size < offset, same inode): the pending lines are emitted, reading restarts
  at 0, and it is counted (``truncations``) and noted in :meth:`FilesConnector.coverage`.
* **Partial lines**: bytes after the last newline wait until their newline arrives. A last
  line without a newline is never dropped without a word: a one-shot run publishes it when
  the file was not modified for ``idle_s`` seconds (its writer is done with it; the cursor
  then notes the line was unterminated, so a newline appended later only ends that line and
  more text is read as the next line, noted in the coverage), and so does a rotation or a
  truncation; otherwise (a file being written, a following run that stops) the cursor stays
  before it, the next run reads it again, and :meth:`FilesConnector.unterminated` (the CLI's
  stderr) gives its offset.
* **Multi-line records** (tracebacks, NCCL error blocks, torchrun summaries, NVRM
  continuations; :mod:`connectors.records`): a record is emitted when the line after it
  shows it is complete, at the end of a pass in one-shot mode, or after ``idle_s`` seconds
  without new data in follow mode.
* **Time** (a :class:`connectors.timefmt.LineClock` per file generation, fed each record's
  first line in file order, so ``dmesg -H`` relative lines and raw dmesg files holding several
  boots are timed too): lines without a time inherit the last time seen in that file
  (``time_source="inferred"``, ``TIME_QUALITY_INHERITED``); before any timed line, the next
  timed line already read, else the file's modification time (``"transport"``,
  ``TIME_QUALITY_TRANSPORT``). Without ``year``, year-less times (syslog, glog) take the year
  nearest the time they are read (a December line read in January is of the year before).
* **Bad input** never raises: invalid UTF-8 is replaced (U+FFFD) and counted, NUL bytes are
  shown as U+2400, huge records are cut at :data:`connectors.bundle.MAX_BODY_CHARS` like the
  bundle reader does, unreadable files are reported in the coverage.

**Edge prefilter** (``prefilter=True``, ``connect files --prefilter``): after grouping, each
whole record is tested with the rule pack's own keyword matcher
(:meth:`connectors.prefilter.EdgePrefilter.keep`, i.e. :meth:`correlators.rules.RulePack.may_extract`, on
the body as it would be published, cut included); a record no rule and no error-severity
marker can match is counted and dropped instead of published. Its time is still read (it
times the untimed lines after it) and its lines still count, so the kept records have the
same times, line numbers and ids as without the prefilter, and so have their events. Per file
the connector counts records read / published / dropped and their file bytes
(:class:`connectors.prefilter.EdgeTotals`, :meth:`FilesConnector.totals`).

**Coverage records** (``publish_coverage=True``; on whenever the prefilter is): the connector
also publishes one ``kind="health_event"``, ``format="coverage"`` Observation per file
(``attributes.coverage`` = its :class:`schemas.records.CoverageEntry`, ``attributes.edge`` =
the :class:`~connectors.prefilter.EdgeTotals` counts, ``prefilter`` on or off and the
``ruleset`` version), the shape the bundle publisher sends, so a worker given the workload
(``workload_id``) reports that file's coverage in the verdict. ``records`` counts every record
read, dropped ones included: the verdict's coverage is the same with and without the
prefilter; only the ``detail`` says how many were dropped at the edge. Coverage counts are
totals since the cursor was created (kept in the cursor under ``totals``), so a restart does
not report a smaller count. A file's record goes out when its counts changed: after each
complete pass in one-shot mode; in follow mode at most every ``coverage_s`` seconds, and
once more at exit (:meth:`FilesConnector.coverage_records`).

Delivery: the connector is a :class:`connectors.source.Source`. :meth:`FilesConnector.poll`
returns the records of one pass; :meth:`FilesConnector.checkpoint` the cursor document valid
once those records are delivered. :func:`connectors.runner.run` saves it only after the
producer's flush succeeded, so a crash re-reads at most the unconfirmed tail (same ids:
downstream collapses them) and loses nothing. The connector is also
:class:`connectors.source.Rewindable`: after a failed delivery :meth:`FilesConnector.rewind`
returns to the saved cursor, so a following run (``connect files --follow``) retries the same
batch while the broker is away, reading no further ahead than that batch.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generator, TYPE_CHECKING, Annotated, Any, BinaryIO, Callable, Iterator, Sequence

import typer

from connectors.command import Shared, connector, input_files
from connectors.runner import publish
from connectors.bundle import NUL_MARK, cut_body, is_binary, rank_of_prefix
from connectors.prefilter import EdgePrefilter, EdgeTotals
from connectors.records import MAX_RECORD_LINES, complete_spans
from connectors.timefmt import LineClock, TimeContext
from correlators import stackdump as _stackdump
from correlators.identity import AGGREGATED_HOST
from schemas.records import (
    TIME_QUALITY_INHERITED,
    TIME_QUALITY_TRANSPORT,
    CoverageEntry,
    Observation,
    Position,
    Source,
)

if TYPE_CHECKING:  # pragma: no cover
    from connectors.cursor import CursorStore

__all__ = ["FilesConnector", "READ_CHUNK_BYTES"]

#: Bytes read from one file per read call.
READ_CHUNK_BYTES = 1 << 20
#: Bytes read from one file per pass (the rest waits for the next pass; bounds memory).
#: A record that straddles the limit is held back until the next pass completes it.
MAX_PASS_BYTES = 16 << 20
#: Longest line kept (bytes): the rest of a longer line is skipped without being held in
#: memory, and the cut is noted in the coverage.
MAX_LINE_BYTES = 1 << 20
#: Bytes at the start of a file checked for binary content (NUL and other control bytes).
BINARY_PROBE_BYTES = 8192
#: Largest PyTorch flight-recorder dump file read whole (bytes).
MAX_DUMP_BYTES = 256 << 20


def _is_dump_head(chunk: bytes) -> bool:
    """True when a file's first bytes look like a PyTorch flight-recorder dump: a pickle
    (protocol 2-5 header) or a JSON object naming ``pg_config`` / ``profiling_name`` early."""
    if chunk[:1] == b"\x80":
        return len(chunk) > 2 and 2 <= chunk[1] <= 5
    head = chunk[:4096]
    return head.lstrip()[:1] == b"{" and (b'"pg_config"' in head or b'"profiling_name"' in head)



@dataclass
class _Stats:
    lines: int = 0
    records: int = 0
    unparsed: int = 0
    blank: int = 0
    bad_utf8: int = 0
    long_lines: int = 0  # lines cut at MAX_LINE_BYTES
    skipped_bytes: int = 0  # bytes not read: the rest of long lines, binary files
    truncations: int = 0
    rotations: int = 0
    errors: int = 0
    dropped: int = 0  # records the edge prefilter did not publish
    bytes_read: int = 0  # file bytes of every record handed to _record (blank ones too)
    bytes_published: int = 0  # file bytes of the published records
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.notes) < 50:
            self.notes.append(text)

    def copy(self) -> _Stats:
        """An independent copy (the notes list too)."""
        return _Stats(**{**self.__dict__, "notes": list(self.notes)})


@dataclass
class _Tail:
    """Reading state of one configured path."""

    path: str
    host: str
    fh: BinaryIO | None = None
    dev: int = 0
    ino: int = 0
    epoch: int = 0
    read_off: int = 0  # bytes of the open file consumed into `lines`/`partial`
    partial: bytearray = field(default_factory=bytearray)
    dropped: int = 0  # bytes of the partial line skipped past MAX_LINE_BYTES
    skipped: dict[int, int] = field(default_factory=dict)  # end offset of a cut line -> bytes skipped
    binary: bool = False  # this file generation is binary: skipped, not read as lines
    lines: list[str] = field(default_factory=list)  # complete lines not yet emitted
    ends: list[int] = field(default_factory=list)  # byte offset after each of `lines`
    context: list[str] = field(default_factory=list)  # last emitted lines (record grouping)
    off: int = 0  # committed: byte offset after the last emitted line
    line: int = 0  # committed: number of the last emitted line
    last_ns: int | None = None
    last_data: float = 0.0  # monotonic time new bytes last arrived
    draining: bool = False  # the open file is a rotated-away one: finish it, then switch
    open_line: bool = False  # committed: the last emitted line had no newline (published at the end)
    published_open: list[tuple[int, int]] = field(default_factory=list)  # (offset, bytes) of lines published without newline
    stats: _Stats = field(default_factory=_Stats)
    clock: LineClock | None = None  # times of this file generation's lines, in order
    clock_epoch: int = -1  # the generation ``clock`` belongs to
    carried: dict[str, int] = field(default_factory=dict)  # coverage totals of earlier runs (cursor)

    def totals(self) -> dict[str, int]:
        """Coverage counts since the cursor was created: earlier runs' plus this run's."""
        s, c = self.stats, self.carried
        mine = {"lines": s.lines, "records": s.records, "unparsed": s.unparsed, "dropped": s.dropped,
                "bytes_read": s.bytes_read, "bytes_published": s.bytes_published}
        return {k: v + int(c.get(k, 0)) for k, v in mine.items()}

    def state(self, totals: bool) -> dict[str, Any]:
        out = {"dev": self.dev, "ino": self.ino, "offset": self.off, "line": self.line,
               "epoch": self.epoch, "last_ns": self.last_ns}
        if self.open_line:
            out["unterminated"] = True
        if totals or self.carried:  # kept once a run wrote them, so later counts stay totals
            out["totals"] = self.totals()
        return out


class FilesConnector:
    """Tails log files and turns their records into ``log_line`` Observations.

    ``paths``: files to follow (need not exist yet). ``host``: the host every file belongs to;
    or ``host_from_path``: a regex with a named group ``host`` searched in each absolute path
    (no match: host ``_unknown``, noted in coverage); neither: this machine's hostname.
    ``aggregator``: the files are a declared aggregator (a central syslog file holding the lines
    of many nodes): every record carries ``attributes.aggregator = True``, so a host its text
    names (the syslog host field) is taken as its host when that is a node of the allocation
    (:mod:`correlators.identity`); without ``host``/``host_from_path`` the records' host is then
    ``_aggregated``, not this machine's. Without it a file's records are its host's, whatever
    host their text names.
    ``cluster``, ``workload_id``: copied into every Observation. ``cursor``: the
    :class:`connectors.cursor.CursorStore` the position is loaded from (saving is the
    publisher's job, see :meth:`checkpoint`). ``follow``: keep polling for new data every
    ``poll_s`` seconds (else one pass to the current end of every file). ``idle_s``: in follow
    mode, a record waiting for a possible continuation line is emitted after this many seconds
    without new data; in one-shot mode, a last line without a newline is published when the
    file was not modified for this many seconds. ``year`` / ``tz``: :class:`~connectors.timefmt.TimeContext` for
    formats without a year or zone (default: the current UTC year, UTC). ``prefilter``: True
    (the packaged rule pack) or an :class:`~connectors.prefilter.EdgePrefilter`: publish only
    the records it keeps (see the module docstring); ``publish_coverage``: add coverage
    records to the polled batches (default: on with a prefilter); ``coverage_s``: in follow
    mode, seconds between two coverage records of a file; ``on_checkpoint``: called with no
    argument at the end of every :meth:`checkpoint` (the CLI prints the byte totals there).

    Counters (totals over all files): ``lines_read``, ``records``, ``unparsed`` (records whose
    first line has no recognised time format), ``bad_utf8_lines``, ``truncations``,
    ``rotations``; per file: :meth:`coverage`. Raises ``CursorError`` (from the store) when the
    cursor file is corrupt, ``re.error`` for an invalid ``host_from_path``, ``ValueError``
    when it has no ``host`` group.
    """

    def __init__(
        self,
        paths: Sequence[str | os.PathLike[str]],
        *,
        host: str | None = None,
        host_from_path: str | None = None,
        cluster: str = "",
        workload_id: str | None = None,
        cursor: "CursorStore",
        follow: bool = False,
        poll_s: float = 0.5,
        idle_s: float = 1.0,
        year: int | None = None,
        tz: str = "UTC",
        prefilter: bool | EdgePrefilter = False,
        publish_coverage: bool | None = None,
        coverage_s: float = 30.0,
        on_checkpoint: Callable[[], None] | None = None,
        aggregator: bool = False,
    ):
        pattern = re.compile(host_from_path) if host_from_path else None
        self.aggregator = aggregator
        if pattern is not None and "host" not in pattern.groupindex:
            raise ValueError(f"--host-from-path {host_from_path!r} has no (?P<host>...) group")
        self.cluster = cluster
        self.workload_id = workload_id
        self.cursor = cursor
        self.follow = follow
        self.poll_s = poll_s
        self.idle_s = idle_s
        self.prefilter: EdgePrefilter | None = (
            prefilter if isinstance(prefilter, EdgePrefilter) else (EdgePrefilter() if prefilter else None))
        self.publish_coverage = self.prefilter is not None if publish_coverage is None else publish_coverage
        self.coverage_s = coverage_s
        self.on_checkpoint = on_checkpoint
        self._cov_sent: dict[str, CoverageEntry] = {}  # per path: last coverage record delivered
        self._cov_pending: dict[str, CoverageEntry] = {}  # per path: sent, not yet confirmed
        self._cov_at = float("-inf")  # monotonic time of the last coverage records (follow mode)
        self.ctx = TimeContext(year=year or time.gmtime().tm_year, tz=tz,
                               ref_ns=None if year else time.time_ns())
        default_host = host or (AGGREGATED_HOST if aggregator else socket.gethostname())
        saved = (cursor.load().get("files") or {}) if cursor is not None else {}
        self._tails: list[_Tail] = []
        self._more = False  # a file had more than MAX_PASS_BYTES waiting in the last pass
        for p in dict.fromkeys(os.path.abspath(os.fspath(p)) for p in paths):
            h = default_host
            if pattern is not None and host is None:
                m = pattern.search(p)
                h = m["host"] if m and m["host"] else "_unknown"
            tail = _Tail(path=p, host=h)
            if pattern is not None and host is None and h == "_unknown":
                tail.stats.note(f"host not found in the path by {host_from_path!r}: host '_unknown'")
            self._resume(tail, saved.get(p))
            totals = (saved.get(p) or {}).get("totals") if isinstance(saved.get(p), dict) else None
            if isinstance(totals, dict):  # coverage counts of earlier runs
                tail.carried = {k: v for k, v in totals.items() if type(v) is int and v >= 0}
            self._tails.append(tail)
        self._start: dict[str, Any] = saved  # the cursor's files document given at start
        # rewind points: (files document, counters of every tail at that point); the start and
        # the last checkpoint() taken
        self._marks: list[tuple[dict[str, Any], list[_Stats]]] = [(saved, [t.stats.copy() for t in self._tails])]
        self.rewinds = 0  #: times :meth:`rewind` returned to the saved cursor

    # -- public ---------------------------------------------------------------------------

    @property
    def lines_read(self) -> int:
        return sum(t.stats.lines for t in self._tails)

    @property
    def records(self) -> int:
        return sum(t.stats.records for t in self._tails)

    @property
    def unparsed(self) -> int:
        return sum(t.stats.unparsed for t in self._tails)

    @property
    def dropped(self) -> int:
        """Records of this run the edge prefilter did not publish."""
        return sum(t.stats.dropped for t in self._tails)

    def totals(self) -> EdgeTotals:
        """Records and file bytes read and published by this run, over all files
        (:class:`connectors.prefilter.EdgeTotals`)."""
        out = EdgeTotals()
        for t in self._tails:
            s = t.stats
            out = out + EdgeTotals(s.records, s.records - s.dropped, s.dropped, s.bytes_read, s.bytes_published)
        return out

    @property
    def bad_utf8_lines(self) -> int:
        return sum(t.stats.bad_utf8 for t in self._tails)

    @property
    def truncations(self) -> int:
        return sum(t.stats.truncations for t in self._tails)

    @property
    def rotations(self) -> int:
        return sum(t.stats.rotations for t in self._tails)

    def poll(self) -> list[Observation]:
        """One pass over every file: read what was appended, return the records now complete
        (file order within a file, files in the configured order). Never raises on file
        problems (they are counted and noted in :meth:`coverage`)."""
        out: list[Observation] = []
        self._more = False
        for tail in self._tails:
            try:
                self._poll_tail(tail, out)
            except OSError as exc:
                tail.stats.errors += 1
                tail.stats.note(f"cannot read: {exc}")
                self._close(tail)
        if self.publish_coverage and not self._more and (
                not self.follow or time.monotonic() - self._cov_at >= self.coverage_s):
            out += self.coverage_records()
        return out

    @property
    def pending(self) -> bool:
        """True when the last :meth:`poll` left data unread (a file had more than
        ``MAX_PASS_BYTES`` waiting): the next poll goes on at once."""
        return self._more

    def checkpoint(self) -> dict[str, Any]:
        """The cursor document after every record returned by :meth:`poll` so far:
        ``{"files": {<absolute path>: {"dev", "ino", "offset", "line", "epoch", "last_ns"}}}``
        (offset in bytes), plus ``"totals"`` (the coverage counts since the cursor was created)
        when coverage records are published or an earlier run saved totals. Save it only once
        those records were delivered."""
        files = {t.path: t.state(self.publish_coverage) for t in self._tails if t.ino}
        self._marks = [self._marks[0], (files, [t.stats.copy() for t in self._tails])]
        self._cov_sent.update(self._cov_pending)
        self._cov_pending = {}
        if self.on_checkpoint is not None:
            self.on_checkpoint()
        return {"files": files}

    def coverage_records(self) -> list[Observation]:
        """The coverage records (``kind="health_event"``, ``format="coverage"``; see the module
        docstring) of the files whose :meth:`coverage` changed since the last record sent
        (delivery is confirmed by the next :meth:`checkpoint`; :meth:`rewind` forgets the
        unconfirmed ones). :meth:`poll` adds them to its batch (in follow mode every
        ``coverage_s`` seconds); call it directly for the last ones at exit. Time: the file's
        last line time (UTC ns), else its modification time."""
        out = []
        self._cov_at = time.monotonic()
        for tail, entry in zip(self._tails, self.coverage()):
            last = self._cov_pending.get(tail.path, self._cov_sent.get(tail.path))
            if last == entry:
                continue
            self._cov_pending[tail.path] = entry
            t = tail.totals()
            edge = {"records_read": t["records"], "records_published": t["records"] - t["dropped"],
                    "records_dropped": t["dropped"], "bytes_read": t["bytes_read"],
                    "bytes_published": t["bytes_published"], "prefilter": self.prefilter is not None,
                    "ruleset": self.prefilter.ruleset if self.prefilter is not None else None}
            out.append(Observation(
                source=Source(connector="files", instance=tail.host),
                kind="health_event",
                observed_at=tail.last_ns if tail.last_ns is not None else self._mtime(tail),
                time_source="transport",
                time_quality=TIME_QUALITY_TRANSPORT,
                host=tail.host,
                cluster=self.cluster,
                workload_id=self.workload_id,
                format="coverage",
                body=f"coverage {entry.source}: {entry.status}, {entry.records} records, "
                     f"{entry.unparsed} unparsed, {t['dropped']} dropped at the edge",
                attributes={"coverage": entry.model_dump(mode="json"), "edge": edge},
                position=Position(file=tail.path),
            ).with_id())
        return out

    def rewind(self) -> None:
        """Return every file to the last saved cursor (:class:`connectors.source.Rewindable`):
        the position in ``self.cursor`` as saved after the last successful delivery, or the one
        loaded at start when there is no cursor store or it cannot be read any more. Open files
        are closed and lines read past that position are forgotten; the next :meth:`poll`
        reopens each file (the rotated-away one by its inode, like a restart) and returns the
        records after the position again, with the same observation ids. Counters and coverage
        go back to their values at that position when it is the start or the last
        :meth:`checkpoint` (so re-read records are not counted twice). Never raises: going back
        to the start position instead of an unreadable cursor repeats records, never skips
        them."""
        target = self._start
        problem = None
        if self.cursor is not None:
            try:
                target = self.cursor.load().get("files") or {}
            except (ValueError, OSError) as exc:  # CursorError is a ValueError
                problem = f"cursor unreadable at rewind ({exc}): back to the start position"
            if not isinstance(target, dict):
                target, problem = self._start, "cursor holds no files object at rewind: back to the start position"
        stats = next((list(s) for doc, s in reversed(self._marks) if doc == target), None)
        for i, old in enumerate(self._tails):
            self._close(old)
            tail = _Tail(path=old.path, host=old.host,
                         stats=stats[i].copy() if stats is not None else old.stats, carried=old.carried)
            if problem:
                tail.stats.note(problem)
            self._resume(tail, target.get(old.path))
            self._tails[i] = tail
        self._more = False
        self._cov_pending = {}
        self.rewinds += 1

    def observations(self) -> Iterator[Observation]:
        """Yield records as :meth:`poll` finds them; in follow mode forever (sleeping ``poll_s``
        between empty passes), else until every file was read to its current end (one pass
        reads at most ``MAX_PASS_BYTES`` per file). The position is not saved here."""
        while True:
            batch = self.poll()
            yield from batch
            if not self.follow and not self._more:
                return
            if not batch:
                time.sleep(self.poll_s)

    def coverage(self) -> list[CoverageEntry]:
        """One entry per file: ``source="file:<absolute path>"``, status ``present`` (records
        read), ``empty`` (none yet, or the file does not exist) or ``failed`` (read errors),
        ``records``/``unparsed`` counts and notes (rotations, truncations, invalid UTF-8).
        ``records``, ``unparsed`` and the line count are totals since the cursor was created
        (earlier runs included); ``records`` counts the records the prefilter dropped too, and
        with a prefilter the detail says how many it dropped and the bytes published."""
        entries = []
        for t in self._tails:
            s = t.stats
            tot = t.totals()
            notes = list(s.notes)
            if s.bad_utf8:
                notes.append(f"invalid UTF-8 in {s.bad_utf8} lines (replaced with U+FFFD)")
            if s.blank:
                notes.append(f"{s.blank} blank lines not emitted")
            if s.long_lines:
                notes.append(f"{s.long_lines} lines longer than {MAX_LINE_BYTES} bytes cut "
                             f"({s.skipped_bytes} bytes not read)")
            elif s.skipped_bytes:
                notes.append(f"{s.skipped_bytes} bytes of binary content not read")
            notes.append(f"{tot['lines']} lines, {s.rotations} rotations, {s.truncations} truncations")
            if self.prefilter is not None or tot["dropped"]:
                ratio = EdgeTotals(tot["records"], tot["records"] - tot["dropped"], tot["dropped"],
                                   tot["bytes_read"], tot["bytes_published"])
                notes.append(f"edge prefilter (rules {self.prefilter.ruleset if self.prefilter else '?'}): "
                             f"{ratio.records_dropped} of {ratio.records_read} records not published, "
                             f"{100 * ratio.saved:.1f}% of bytes saved")
            status = "failed" if s.errors and not tot["records"] else ("present" if tot["records"] else "empty")
            entries.append(CoverageEntry(source=f"file:{t.path}", status=status, records=tot["records"],
                                         unparsed=tot["unparsed"], detail="; ".join(notes)))
        return entries

    def unterminated(self) -> list[tuple[str, int, int, bool]]:
        """The lines without a newline at the end of a file: ``(path, byte offset of the line,
        its length in bytes, published)``. ``published``: this run published it (a one-shot
        run's end, a rotation, a truncation); False: it is pending (a following run; the
        cursor stays before it and the next run reads it again)."""
        out = [(t.path, off, n, True) for t in self._tails for off, n in t.published_open]
        for t in self._tails:
            if t.partial or t.dropped:
                out.append((t.path, t.read_off - len(t.partial) - t.dropped, len(t.partial) + t.dropped, False))
        return out

    def close(self) -> None:
        """Close every open file."""
        for t in self._tails:
            self._close(t)

    # -- opening, rotation, truncation ----------------------------------------------------

    def _resume(self, tail: _Tail, entry: dict[str, Any] | None) -> None:
        if not entry:
            return
        try:
            dev, ino, off = int(entry["dev"]), int(entry["ino"]), int(entry["offset"])
            line, epoch = int(entry.get("line", 0)), int(entry.get("epoch", 0))
            last = entry.get("last_ns")
            last_ns = int(last) if last is not None else None
        except (KeyError, TypeError, ValueError):
            tail.stats.note("cursor entry unusable: file read from the start")
            return
        tail.dev, tail.ino, tail.off, tail.line, tail.epoch, tail.last_ns = dev, ino, off, line, epoch, last_ns
        tail.open_line = entry.get("unterminated") is True
        try:
            st = os.stat(tail.path)
            same = (st.st_dev, st.st_ino) == (dev, ino)
        except OSError:
            st, same = None, False
        if same:
            return  # _open seeks to the offset (or notices a truncation)
        old = self._find_inode(tail.path, dev, ino)
        if old is not None:
            try:
                fh = open(old, "rb")  # noqa: SIM115 -- kept open while tailing
                fh.seek(off)
            except OSError as exc:
                tail.stats.note(f"rotated file {old} cannot be read: {exc}")
            else:
                tail.fh, tail.read_off, tail.draining = fh, off, True
                tail.stats.note(f"rotated while stopped: finishing {old} from byte {off}")
                return
        if st is not None:
            tail.stats.note(f"rotated while stopped and the old file (inode {ino}) is gone: "
                            "its unread tail is lost; new file read from the start")
        self._new_generation(tail, 0, 0)

    @staticmethod
    def _find_inode(path: str, dev: int, ino: int) -> str | None:
        try:
            with os.scandir(os.path.dirname(path) or ".") as it:
                for e in it:
                    if e.inode() == ino and e.is_file(follow_symlinks=False) and e.stat().st_dev == dev:
                        return e.path
        except OSError:
            return None
        return None

    def _new_generation(self, tail: _Tail, dev: int, ino: int) -> None:
        if tail.ino:
            tail.epoch += 1
        tail.dev, tail.ino = dev, ino
        tail.off = tail.read_off = tail.line = 0
        tail.lines, tail.ends, tail.context, tail.partial = [], [], [], bytearray()
        tail.dropped, tail.binary, tail.skipped, tail.open_line = 0, False, {}, False

    def _open(self, tail: _Tail) -> bool:
        try:
            if not stat.S_ISREG(os.stat(tail.path).st_mode):
                # never open it: a FIFO would block
                if not tail.stats.errors:
                    tail.stats.note("not a regular file (FIFO, socket, device, directory): not read")
                tail.stats.errors += 1
                return False
            fh = open(tail.path, "rb")  # noqa: SIM115 -- kept open while tailing
        except FileNotFoundError:
            return False
        st = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) != (tail.dev, tail.ino):
            if tail.ino:
                tail.stats.rotations += 1
            self._new_generation(tail, st.st_dev, st.st_ino)
        elif st.st_size < tail.off:
            self._truncated(tail, st.st_size)
        fh.seek(tail.off)
        if tail.open_line:  # the last line was published without its newline
            nxt = fh.read(1)
            if nxt == b"\n":  # its newline came since: it ends that line, no new (blank) line
                tail.off += 1
                tail.open_line = False
            elif nxt:
                tail.stats.note(f"line {tail.line} was published without its newline; the text appended "
                                f"to it since (from byte {tail.off}) is read as the next line")
                tail.open_line = False
            fh.seek(tail.off)
        tail.fh, tail.read_off = fh, tail.off
        tail.last_data = time.monotonic()
        return True

    def _truncated(self, tail: _Tail, size: int) -> None:
        tail.stats.truncations += 1
        tail.stats.note(f"truncated to {size} bytes at offset {tail.read_off or tail.off}: read again from 0")
        dev, ino = tail.dev, tail.ino
        self._new_generation(tail, dev, ino)

    @staticmethod
    def _close(tail: _Tail) -> None:
        if tail.fh is not None:
            try:
                tail.fh.close()
            except OSError:
                pass
            tail.fh = None

    def _poll_tail(self, tail: _Tail, out: list[Observation]) -> None:
        for _ in range(8):  # at most a few rotations handled per pass
            if tail.fh is None and not self._open(tail):
                self._emit(tail, out, final=not self.follow)
                return
            assert tail.fh is not None
            if not tail.draining:
                size = os.fstat(tail.fh.fileno()).st_size
                if size < tail.read_off:
                    self._emit(tail, out, final=True, with_partial=True)
                    self._truncated(tail, size)
                    tail.fh.seek(0)
            at_limit = self._read(tail) >= MAX_PASS_BYTES
            if not tail.draining and not at_limit:
                try:
                    st = os.stat(tail.path)
                    tail.draining = (st.st_dev, st.st_ino) != (tail.dev, tail.ino)
                except FileNotFoundError:
                    pass  # moved away, not yet recreated: keep reading the old one
                if tail.draining:
                    at_limit = self._read(tail) >= MAX_PASS_BYTES  # written before the switch
            if at_limit:
                self._more = True  # the rest in the next pass (bounds memory)
                self._emit(tail, out, final=False)
                return
            if not tail.draining:
                idle = self.follow and time.monotonic() - tail.last_data >= self.idle_s
                # one-shot: a file its writer is done with (not modified for idle_s) is read as
                # it is, its last line too even without a newline
                done = not self.follow and time.time() - os.fstat(tail.fh.fileno()).st_mtime >= self.idle_s
                self._emit(tail, out, final=(not self.follow) or idle, with_partial=done)
                return
            # finish the rotated-away file: every line, the last one even without its newline
            self._emit(tail, out, final=True, with_partial=True)
            self._close(tail)
            tail.draining = False
            tail.stats.rotations += 1
            self._new_generation(tail, 0, 0)  # _open assigns the new file's identity

    # -- reading and grouping -------------------------------------------------------------

    def _read(self, tail: _Tail) -> int:
        """Read up to MAX_PASS_BYTES; split complete lines into tail.lines. Returns bytes read."""
        fh = tail.fh
        assert fh is not None
        total = 0
        while total < MAX_PASS_BYTES:
            chunk = fh.read(READ_CHUNK_BYTES)
            if not chunk:
                break
            total += len(chunk)
            tail.last_data = time.monotonic()
            if tail.read_off == 0 and _is_dump_head(chunk) and self._read_dump(tail, chunk):
                return total
            if tail.read_off == 0 and is_binary(chunk[:BINARY_PROBE_BYTES]):
                tail.binary = True
                tail.stats.errors += 1
                tail.stats.note(f"binary content (NUL/control bytes in the first {BINARY_PROBE_BYTES} bytes): "
                                "not read as log lines")
            if tail.binary:  # skipped to its end; the cursor moves past it
                tail.read_off += len(chunk)
                tail.off = tail.read_off
                tail.stats.skipped_bytes += len(chunk)
                continue
            start = tail.read_off - len(tail.partial) - tail.dropped
            tail.read_off += len(chunk)
            nl = chunk.rfind(b"\n")
            if nl < 0:
                self._extend_partial(tail, chunk)
                continue
            first = chunk.find(b"\n")
            self._extend_partial(tail, chunk[:first])
            block = bytes(tail.partial) + chunk[first: nl + 1]
            dropped, tail.dropped = tail.dropped, 0
            tail.partial = bytearray()
            self._extend_partial(tail, chunk[nl + 1:])
            self._add_lines(tail, block, start, first_extra=dropped)
        return total

    def _read_dump(self, tail: _Tail, first: bytes) -> bool:
        """A PyTorch flight-recorder dump file (pickle or JSON, written whole by the rank's
        DebugInfoWriter) is read whole and published as the one compact JSON record
        :func:`correlators.stackdump.normalise_dump_bytes` makes of it, as the bundle reader
        does. True when the file was taken as a dump (published, or left for a later pass
        while a file still being written does not read yet); False to read it as lines.
        Dumps over ``MAX_DUMP_BYTES`` are not read as dumps (noted)."""
        fh = tail.fh
        assert fh is not None
        data = first + fh.read(MAX_DUMP_BYTES + 1 - len(first))
        if len(data) > MAX_DUMP_BYTES:
            tail.stats.note(f"flight-recorder dump over {MAX_DUMP_BYTES} bytes: not read as a dump")
            fh.seek(len(first))
            return False
        got = _stackdump.normalise_dump_bytes(data, tail.path)
        if got is None:
            fh.seek(len(first))
            return False
        line, note = got
        if line.startswith(b'{"flight_recorder_error"') and self.follow \
                and time.time() - os.fstat(fh.fileno()).st_mtime < self.idle_s:
            fh.seek(0)  # still being written: read it again in a later pass
            return True
        tail.stats.note(note)
        tail.read_off = len(data)
        tail.ends.append(len(data))
        tail.lines.append(line.rstrip(b"\n").decode("utf-8", errors="replace"))
        tail.stats.lines += 1
        return True

    @staticmethod
    def _extend_partial(tail: _Tail, data: bytes) -> None:
        """Append ``data`` to the line without its newline yet, keeping at most
        ``MAX_LINE_BYTES``; the rest is skipped (counted in ``tail.dropped``)."""
        room = MAX_LINE_BYTES - len(tail.partial)
        if len(data) > room:
            if not tail.dropped:
                tail.stats.long_lines += 1
            tail.partial += data[:max(0, room)]
            tail.dropped += len(data) - max(0, room)
            tail.stats.skipped_bytes += len(data) - max(0, room)
        else:
            tail.partial += data

    def _add_lines(self, tail: _Tail, block: bytes, start: int, first_extra: int = 0) -> None:
        """Decode ``block`` (complete lines, ending with a newline) that starts at byte
        ``start`` and append its lines with their end offsets; ``first_extra``: bytes of the
        first line that were skipped (past ``MAX_LINE_BYTES``), not in ``block``."""
        raw = block.split(b"\n")
        raw.pop()  # after the final newline
        pos = start + first_extra
        if first_extra and raw:
            tail.skipped[start + first_extra + len(raw[0]) + 1] = first_extra
        for b in raw:
            pos += len(b) + 1
            tail.ends.append(pos)
            tail.lines.append(self._decode(tail, b))
        tail.stats.lines += len(raw)

    @staticmethod
    def _decode(tail: _Tail, b: bytes) -> str:
        if b.endswith(b"\r"):
            b = b[:-1]
        try:
            s = b.decode("utf-8")
        except UnicodeDecodeError:
            s = b.decode("utf-8", errors="replace")
            tail.stats.bad_utf8 += 1
        if "\x00" in s:
            s = s.replace("\x00", NUL_MARK)
        return s

    def _emit(self, tail: _Tail, out: list[Observation], *, final: bool, with_partial: bool = False) -> None:
        """Emit the complete records among the pending lines; with ``final`` also the last one
        (no continuation can come), with ``with_partial`` also a line without its newline."""
        if with_partial and tail.partial:
            dropped = tail.dropped
            start = tail.read_off - len(tail.partial) - dropped
            tail.published_open = tail.published_open[-99:] + [(start, len(tail.partial) + dropped)]
            tail.stats.note(f"the last line (byte {start}, {len(tail.partial) + dropped} bytes) has no newline: "
                            "published as it is")
            self._add_lines(tail, bytes(tail.partial) + b"\n", start, first_extra=dropped)
            tail.ends[-1] -= 1  # no newline in the file
            tail.partial, tail.dropped = bytearray(), 0
            tail.open_line = True  # until a generation change: the cursor says the line is open
        if not tail.lines:
            return
        ctx = tail.context
        buf = ctx + tail.lines
        base = len(ctx)
        i = base
        for s, e in complete_spans(buf, base, final=final):
            self._record(tail, buf, s, e, out)
            i = e
        done = i - base
        if done:
            tail.off = tail.ends[done - 1]
            tail.line += done
            del tail.lines[:done], tail.ends[:done]
            tail.context = buf[max(0, i - MAX_RECORD_LINES):i]

    def _record(self, tail: _Tail, buf: list[str], s: int, e: int, out: list[Observation]) -> None:
        text = "\n".join(buf[s:e])
        lineno = tail.line + (s - len(tail.context)) + 1
        base = len(tail.context)
        # the record's bytes in the file: from the end of the line before it to its last line's end
        span = tail.ends[e - base - 1] - (tail.ends[s - base - 1] if s > base else tail.off)
        tail.stats.bytes_read += span
        if not text.strip():
            tail.stats.blank += e - s
            return
        attributes: dict[str, Any] = {}
        if tail.epoch:
            attributes["file_epoch"] = tail.epoch
        if self.aggregator:
            attributes["aggregator"] = True
        # bytes of its lines skipped while reading (lines longer than MAX_LINE_BYTES)
        skipped = sum(tail.skipped.pop(end, 0) for end in tail.ends[s - base:e - base]) if tail.skipped else 0
        text = cut_body(text, attributes, skipped)
        first = buf[s]
        if tail.clock is None or tail.clock_epoch != tail.epoch:
            tail.clock, tail.clock_epoch = LineClock(self.ctx), tail.epoch
        clock = tail.clock
        lt = clock(first[:512])
        fmt = "unknown"
        if lt is not None:
            at, source, quality, fmt = lt.at_ns, "line", lt.quality, lt.format
            tail.last_ns = at
        elif tail.last_ns is not None:
            at, source, quality = tail.last_ns, "inferred", TIME_QUALITY_INHERITED
        else:
            ahead = next((t for t in (clock.peek(x[:512]) for x in buf[e:]) if t), None)
            if ahead is not None:
                at, source, quality = ahead.at_ns, "inferred", TIME_QUALITY_INHERITED
            else:
                at, source, quality = self._mtime(tail), "transport", TIME_QUALITY_TRANSPORT
        rank = rank_of_prefix(first)
        tail.stats.records += 1
        if fmt == "unknown":
            tail.stats.unparsed += 1
        if self.prefilter is not None and not self.prefilter.keep(text):
            tail.stats.dropped += 1  # timed and counted above: the records after it keep their times
            return
        tail.stats.bytes_published += span
        out.append(Observation(
            source=Source(connector="files", instance=tail.host),
            kind="log_line",
            observed_at=at,
            time_source=source,
            time_quality=quality,
            host=tail.host,
            cluster=self.cluster,
            workload_id=self.workload_id,
            rank=rank,
            format=fmt,
            body=text,
            attributes=attributes,
            position=Position(file=tail.path, line=lineno),
        ).with_id())

    @staticmethod
    def _mtime(tail: _Tail) -> int:
        try:
            if tail.fh is not None:
                return os.fstat(tail.fh.fileno()).st_mtime_ns
            return os.stat(tail.path).st_mtime_ns
        except OSError:
            return time.time_ns()


# -- CLI ------------------------------------------------------------------------------------


#: Seconds between two byte-total lines a following ``connect files --prefilter`` prints.
REPORT_S = 60.0


@connector(interval=0.5, cursor=".state/cursors/files.json")
def connect_files_cli(
    opts: Shared,
    paths: Annotated[list[Path], typer.Argument(help="log files to read (with --follow: to tail; they need not exist yet)")],
    host: Annotated[str | None, typer.Option(help="host the files belong to (default: this machine)")] = None,
    host_from_path: Annotated[str | None, typer.Option(help="regex with a (?P<host>...) group, searched in each path")] = None,
    aggregator: Annotated[bool, typer.Option(
        "--aggregator", help="the files are a declared aggregator (a central syslog file): a host its lines name is "
                             "taken as their host when it is a node of the allocation; default host '_aggregated'. "
                             "Without it every record is the file's host's, whatever its text names")] = False,
    cluster: Annotated[str, typer.Option(help="cluster name")] = "",
    workload: Annotated[str | None, typer.Option(help="workload id to attach")] = None,
    prefilter: Annotated[bool | None, typer.Option(
        "--prefilter/--no-prefilter",
        help="publish only the records the rule pack could turn into an event (a rule keyword or an "
             "error-severity marker), count the rest in the coverage records. Default: on with --follow "
             "(live, high-volume tailing of running jobs), off without (archival reads, where every record "
             "should reach the topic and its sinks)")] = None,
    coverage: Annotated[bool | None, typer.Option(
        "--coverage/--no-coverage",
        help="also publish one coverage record per file (records read, published, dropped at the edge), "
             "so a worker's verdict reports each file's exact record count. Default: on with the prefilter "
             "(which needs it), off otherwise")] = None,
) -> Generator[FilesConnector, Any, None]:
    """Publish log files' records to Kafka (key = host) from the saved cursor; --follow tails them like tail -F.

    With --follow a failed delivery (broker unreachable, flush timed out) is logged as a warning and the same batch is sent again from the saved cursor until it is delivered or the process is stopped (SIGTERM, Ctrl-C); the cursor never moves past undelivered records. With --once (the default) a Kafka error exits 2 with one line on stderr, and so does a file that cannot be read as log lines (binary content, a read error), after the other files are published; the cursor passes over such a file.

    Edge prefilter (--prefilter): whole records (a traceback, an NCCL error block) are kept or dropped by the rule pack's own keyword matcher, after their time and line number are read, so the published records, their ids and the events the workers extract are those of an unfiltered run; the dropped ones are counted in the coverage records, whose record counts equal an unfiltered run's. At the end (and with --follow every minute while it changes) the bytes read, published and the share saved are printed."""
    follow = opts.follow
    if host and host_from_path:
        raise ValueError("give --host or --host-from-path, not both")
    paths = input_files(paths, follow=follow)
    use_prefilter = follow if prefilter is None else prefilter
    if use_prefilter and coverage is False:
        raise ValueError("--prefilter needs the coverage records (they count what it drops): drop --no-coverage")
    last_report = [time.monotonic(), EdgeTotals()]

    def report() -> None:
        if follow and use_prefilter and time.monotonic() - last_report[0] >= REPORT_S:
            totals = conn.totals()
            if totals != last_report[1]:
                typer.echo(f"prefilter: {totals.summary()}", err=True)
                last_report[:] = [time.monotonic(), totals]

    conn = FilesConnector(paths, host=host, host_from_path=host_from_path, cluster=cluster,
                          workload_id=workload, cursor=opts.cursor_store(), follow=follow, poll_s=opts.interval_s,
                          prefilter=use_prefilter, publish_coverage=coverage, on_checkpoint=report,
                          aggregator=aggregator)
    done = yield conn
    from transport.kafka import KafkaProducerError

    n = done.sent
    if follow and conn.publish_coverage:
        # the coverage of the last records read (follow mode sends it every coverage_s)
        try:
            n += publish(conn.coverage_records(), done.producer, topic=opts.topic, flush_timeout=10.0)
        except KafkaProducerError as exc:
            typer.echo(f"last coverage records not delivered: {exc}", err=True)
    for path, offset, size, published in conn.unterminated():
        if published:
            typer.echo(f"{path}: the last line (byte {offset}, {size} bytes) has no newline: published as it is",
                       err=True)
        else:
            typer.echo(f"{path}: a last line without its newline (byte {offset}, {size} bytes) is not published "
                       "yet: the cursor stays before it and the next run reads it again", err=True)
    logs = conn.totals().records_published
    extra = f" ({logs} log records, {n - logs} coverage records)" if conn.publish_coverage else ""
    typer.echo(f"published {n} records{extra} from {len(paths)} files to {opts.topic}", err=True)
    if conn.prefilter is not None:
        typer.echo(f"prefilter: {conn.totals().summary()}", err=True)
    failed = [e for e in conn.coverage() if e.status == "failed"]
    for entry in failed:
        typer.echo(f"{entry.source.removeprefix('file:')}: not read: {entry.detail}", err=True)
    if failed and not follow:
        raise typer.Exit(2)
