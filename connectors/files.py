"""Log-file tailing connector (``tail -F`` semantics) -> ``log_line`` Observations.

``FilesConnector(paths, host=..., cursor=CursorStore(...))`` reads the new complete lines of
each file from its persisted byte offset. Per path the cursor holds
``{"dev", "ino", "offset", "line", "epoch", "last_ns"}``: the file identity (device + inode),
the byte offset just after the last *emitted* line, that line's number (1-based numbering per
file generation), the generation (``epoch``, +1 at every rotation or truncation) and the last
line time seen (UTC ns). The position is only valid for the file it was taken on: the path
*and* the inode must match.

* **Rotation** (the path now names another inode): the old file is read to its end (its last
  line too, even without a newline, since nobody writes it any more), then the new file is
  read from offset 0. A rotation that happened while the connector was stopped is handled the
  same way when the old file is still in the same directory under another name (``x.log.1``).
* **Truncation** (size < offset, same inode): the pending lines are emitted, reading restarts
  at 0, and it is counted (``truncations``) and noted in :meth:`FilesConnector.coverage`.
* **Partial lines**: bytes after the last newline wait until their newline arrives.
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
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, Iterator, Sequence

import typer

from connectors.bundle import _TEXT_BYTES, BINARY_CONTROL_SHARE, NUL_MARK, RANK_PREFIX, MAX_BODY_CHARS
from connectors.records import MAX_RECORD_LINES, STRUCTURE_HINT, record_span
from connectors.timefmt import LineClock, TimeContext
from schemas.records import (
    TIME_QUALITY_INHERITED,
    TIME_QUALITY_TRANSPORT,
    CoverageEntry,
    Observation,
    Position,
    Source,
)
from schemas.topics import catalogue

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

_STRUCTURE = re.compile(STRUCTURE_HINT)
_SUMMARY_RULE = re.compile(r"={10,}\s*$")


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
    stats: _Stats = field(default_factory=_Stats)
    clock: LineClock | None = None  # times of this file generation's lines, in order
    clock_epoch: int = -1  # the generation ``clock`` belongs to

    def state(self) -> dict[str, Any]:
        return {"dev": self.dev, "ino": self.ino, "offset": self.off, "line": self.line,
                "epoch": self.epoch, "last_ns": self.last_ns}


class FilesConnector:
    """Tails log files and turns their records into ``log_line`` Observations.

    ``paths``: files to follow (need not exist yet). ``host``: the host every file belongs to;
    or ``host_from_path``: a regex with a named group ``host`` searched in each absolute path
    (no match: host ``_unknown``, noted in coverage); neither: this machine's hostname.
    ``cluster``, ``workload_id``: copied into every Observation. ``cursor``: the
    :class:`connectors.cursor.CursorStore` the position is loaded from (saving is the
    publisher's job, see :meth:`checkpoint`). ``follow``: keep polling for new data every
    ``poll_s`` seconds (else one pass to the current end of every file). ``idle_s``: in follow
    mode, a record waiting for a possible continuation line is emitted after this many seconds
    without new data. ``year`` / ``tz``: :class:`~connectors.timefmt.TimeContext` for
    formats without a year or zone (default: the current UTC year, UTC).

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
    ):
        pattern = re.compile(host_from_path) if host_from_path else None
        if pattern is not None and "host" not in pattern.groupindex:
            raise ValueError(f"--host-from-path {host_from_path!r} has no (?P<host>...) group")
        self.cluster = cluster
        self.workload_id = workload_id
        self.cursor = cursor
        self.follow = follow
        self.poll_s = poll_s
        self.idle_s = idle_s
        self.ctx = TimeContext(year=year or time.gmtime().tm_year, tz=tz,
                               ref_ns=None if year else time.time_ns())
        default_host = host or socket.gethostname()
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
        return out

    @property
    def pending(self) -> bool:
        """True when the last :meth:`poll` left data unread (a file had more than
        ``MAX_PASS_BYTES`` waiting): the next poll goes on at once."""
        return self._more

    def checkpoint(self) -> dict[str, Any]:
        """The cursor document after every record returned by :meth:`poll` so far:
        ``{"files": {<absolute path>: {"dev", "ino", "offset", "line", "epoch", "last_ns"}}}``
        (offset in bytes). Save it only once those records were delivered."""
        files = {t.path: t.state() for t in self._tails if t.ino}
        self._marks = [self._marks[0], (files, [t.stats.copy() for t in self._tails])]
        return {"files": files}

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
                         stats=stats[i].copy() if stats is not None else old.stats)
            if problem:
                tail.stats.note(problem)
            self._resume(tail, target.get(old.path))
            self._tails[i] = tail
        self._more = False
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
        ``records``/``unparsed`` counts and notes (rotations, truncations, invalid UTF-8)."""
        entries = []
        for t in self._tails:
            s = t.stats
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
            notes.append(f"{s.lines} lines, {s.rotations} rotations, {s.truncations} truncations")
            status = "failed" if s.errors and not s.records else ("present" if s.records else "empty")
            entries.append(CoverageEntry(source=f"file:{t.path}", status=status, records=s.records,
                                         unparsed=s.unparsed, detail="; ".join(notes)))
        return entries

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
        tail.dropped, tail.binary, tail.skipped = 0, False, {}

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
                self._emit(tail, out, final=(not self.follow) or idle)
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
            if tail.read_off == 0 and self._is_binary(chunk[:BINARY_PROBE_BYTES]):
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

    @staticmethod
    def _is_binary(probe: bytes) -> bool:
        """True when ``probe`` (a file's first bytes) holds NUL bytes and more than
        ``BINARY_CONTROL_SHARE`` of it are not text (the bundle reader's test)."""
        if b"\x00" not in probe:
            return False
        return len(probe.translate(None, _TEXT_BYTES)) / len(probe) > BINARY_CONTROL_SHARE

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
            self._add_lines(tail, bytes(tail.partial) + b"\n", tail.read_off - len(tail.partial) - dropped,
                            first_extra=dropped)
            tail.ends[-1] -= 1  # no newline in the file
            tail.partial, tail.dropped = bytearray(), 0
        if not tail.lines:
            return
        ctx = tail.context
        buf = ctx + tail.lines
        base = len(ctx)
        struct = [j for j, line in enumerate(buf) if _STRUCTURE.match(line)]
        n = len(buf)
        i = base
        while i < n:
            s, e = record_span(buf, i, structure_lines=struct)
            if s < i:  # joins a record already emitted (forced out by idle/end): start anew
                e = i + record_span(buf[i:], 0)[1]
            if e >= n and not final:
                break  # a continuation may still come
            if (not final and e == i + 1 and i > 0 and _SUMMARY_RULE.match(buf[i])
                    and "ChildFailedError:" in buf[i - 1] and n - i < MAX_RECORD_LINES):
                break  # torchrun summary still open
            self._record(tail, buf, i, e, out)
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
        if not text.strip():
            tail.stats.blank += e - s
            return
        attributes: dict[str, Any] = {}
        if tail.epoch:
            attributes["file_epoch"] = tail.epoch
        base = len(tail.context)
        # bytes of its lines skipped while reading (lines longer than MAX_LINE_BYTES)
        skipped = sum(tail.skipped.pop(end, 0) for end in tail.ends[s - base:e - base]) if tail.skipped else 0
        if len(text) > MAX_BODY_CHARS or skipped:
            attributes["truncated"] = len(text) + skipped
            text = text[:MAX_BODY_CHARS] + f"\n[faultstream: cut, {len(text) - MAX_BODY_CHARS} more characters]"
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
        rank = None
        if first.startswith("[rank"):
            m = RANK_PREFIX.match(first)
            if m:
                rank = int(m[1])
        tail.stats.records += 1
        if fmt == "unknown":
            tail.stats.unparsed += 1
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


def connect_files_cli(
    paths: Annotated[list[Path], typer.Argument(help="log files to tail (need not exist yet)")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep following (tail -F)")] = False,
    host: Annotated[str | None, typer.Option(help="host the files belong to (default: this machine)")] = None,
    host_from_path: Annotated[str | None, typer.Option(help="regex with a (?P<host>...) group, searched in each path")] = None,
    cluster: Annotated[str, typer.Option(help="cluster name")] = "",
    workload: Annotated[str | None, typer.Option(help="workload id to attach")] = None,
    cursor: Annotated[Path, typer.Option(help="cursor file (position per file)")] = Path(".state/cursors/files.json"),
    bootstrap: Annotated[str | None, typer.Option(help="Kafka bootstrap servers (default: KAFKA_BOOTSTRAP_SERVERS)")] = None,
    topic: Annotated[str | None, typer.Option(help="topic to publish to (default: the catalogue's observations topic, FAULTSTREAM_TOPIC_PREFIX applied)")] = None,
) -> None:
    """Publish log files' records to Kafka (key = host) from the saved cursor; --follow tails them like tail -F.

    With --follow a failed delivery (broker unreachable, flush timed out) is logged as a warning and the same batch is sent again from the saved cursor until it is delivered or the process is stopped (SIGTERM, Ctrl-C); the cursor never moves past undelivered records. Without --follow a Kafka error exits 2 with one line on stderr."""
    topic = topic or catalogue()["observations"].name
    from connectors.cursor import CursorError, CursorStore
    from connectors.registry import cli_fail, make_producer
    from connectors.runner import run, stop_on_sigterm
    from transport.kafka import KafkaProducerError

    if host and host_from_path:
        cli_fail("give --host or --host-from-path, not both")
    try:
        conn = FilesConnector(paths, host=host, host_from_path=host_from_path, cluster=cluster,
                              workload_id=workload, cursor=CursorStore(cursor), follow=follow)
    except (CursorError, re.error, ValueError) as exc:
        cli_fail(str(exc))
    try:
        with make_producer(bootstrap, topic) as producer, stop_on_sigterm() as stop:
            n = run(conn, producer, topic=topic, cursor=conn.cursor, follow=follow, poll_s=conn.poll_s, stop=stop,
                    retry=follow)
    except KafkaProducerError as exc:
        cli_fail(str(exc))
    except KeyboardInterrupt:
        n = conn.records
    finally:
        conn.close()
    typer.echo(f"published {n} records from {len(paths)} files to {topic}", err=True)
