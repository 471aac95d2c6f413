"""Grouping physical log lines into multi-line records (pure: no I/O).

A *record* is what one ``Observation.body`` holds. Most records are one physical line; these
multi-line shapes, recognised by content (never by file name), are kept together:

* **Python tracebacks** -- ``Traceback (most recent call last):``, the indented frame lines,
  through the final (non-indented) exception line. Also when every line carries the same
  ``[rankN]: `` prefix (PyTorch elastic's per-rank output). If the exception line is an NCCL
  error (``...DistBackendError: NCCL error in: ...``) the NCCL block below it belongs to it.
* **torchrun ChildFailedError summaries** -- from the ``====`` line right after the
  ``...ChildFailedError:`` line to the closing ``====`` line (torch.distributed.elastic).
* **dmesg continuation lines** -- indented ``NVRM:`` lines below a ``NVRM:`` line that has a
  timestamp (the driver's multi-line printk messages, e.g. "GPU crash dump" and "fallen off
  the bus" at probe time; fixtures rc-17, rc-25).
* **NCCL / torch error blocks** -- ``ncclRemoteError: ...`` / ``ncclInvalidUsage: ...`` (any
  ``nccl<Name>: ``) with the ``NCCL error in:`` line just above it, and ``Last error:`` plus
  the line after it (fixtures rc-04, rc-09, ``torchrun-nccl-duplicate-gpu.log``).

* **Key blocks** (scheduler and cluster tools; added for the slurm/kubernetes/dcgm rules) -- a
  head line and the lines below it indented deeper: ``scontrol show node``/``job`` (``NodeName=``
  / ``JobId=`` and its ``   Key=Value`` lines), kubectl describe ``Capacity:`` (through the
  ``Allocatable:`` block after it), ``Conditions:``, a container's ``State: Terminated``; pod and
  Workload YAML ``terminated:`` and ``- lastTransitionTime:`` items; pretty JSON ``"terminated":
  {`` and condition objects through the closing brace; a whole ``dcgmi diag`` / ``dcgmi health``
  table (every ``|``/``+`` line after its title row).

* **Stack dumps** (issue 33; parsed by :mod:`correlators.stackdump`) -- one thread each: a
  faulthandler ``Thread 0x.. (most recent call first):`` / ``Current thread ...`` header and its
  ``  File "..", line N in f`` lines (``[rankN]:`` prefixes allowed, the same on every line); a
  py-spy ``Thread <tid> (idle|active|active+gil)`` header and its indented frame (and locals)
  lines; a gdb ``Thread <n> (Thread 0x.. (LWP <tid>) ..):`` header and its ``#<i>`` frame lines;
  a pretty-printed ``py-spy dump --json`` thread object (``  {`` with ``"pid":`` next, through
  its closing ``  }``).

Records never exceed :data:`MAX_RECORD_LINES` lines (a longer one is cut there), so
:func:`record_span` only looks :data:`MAX_RECORD_LINES` lines back and forward and stays cheap
when called around a few candidate lines of a huge file. :data:`STRUCTURE_HINT` lets a
vectorised scan skip it altogether: if no line in ``lines[i - MAX_RECORD_LINES : i + 2]``
matches it, ``record_span(lines, i) == (i, i + 1)``.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import Iterator, Sequence, overload

import numpy as np

__all__ = [
    "BlockLines",
    "RawRecord",
    "record_span",
    "complete_spans",
    "group_records",
    "MAX_RECORD_LINES",
    "STRUCTURE_HINT",
]

#: Upper bound of a record's physical lines; also how far :func:`record_span` looks back.
MAX_RECORD_LINES = 256

_PREFIX = r"(?P<p>\[rank\d+\]: )?"
_TRACEBACK = re.compile(_PREFIX + r"Traceback \(most recent call last\):\s*$")
_NCCL_ANCHOR = re.compile(_PREFIX + r"nccl[A-Z]\w*: ")
_SUMMARY_RULE = re.compile(r"={10,}\s*$")
_CONTINUATION = re.compile(r"[ \t]+NVRM: ")
_NVRM_HEAD = re.compile(r"\S.*NVRM: ")

#: Every line that can start or continue a multi-line record matches this (Python ``re`` and
#: Rust ``regex`` syntax, for polars). Lines not matching it are one-line records unless a
#: line within ``MAX_RECORD_LINES`` before them, or the line right after them, matches.
STRUCTURE_HINT: str = (
    r"^(?:\[rank\d+\]: )?(?:Traceback \(most recent|nccl[A-Z]\w*: )|^={10,}\s*$|^[ \t]+NVRM: "
    # key blocks (scontrol show node/job, kubectl describe, pod/workload YAML and JSON, dcgmi tables)
    r"|^(?:NodeName=\S+ |JobId=\d+ |(?:Capacity|Conditions):[ \t]*$|\| (?:Diagnostic|Health Monitor Report) )"
    r"|^[ \t]+(?:Last )?State:[ \t]+(?:Terminated|Waiting)[ \t]*$"
    r"|^[ \t]*(?:terminated:[ \t]*$|- last(?:Probe|Transition)Time: |\"terminated\": ?\{[ \t]*$"
    r"|\"last(?:Probe|Transition)Time\": )"
    # stack dumps: faulthandler, py-spy, gdb thread headers; a py-spy JSON thread object
    r"|^(?:\[rank\d+\]: ?)?(?:Current thread|Thread) 0x[0-9a-fA-F]+[^\n]*\(most recent call first\):"
    r"|^Thread (?:\d+|0x[0-9A-Fa-f]+) \((?:idle|active|active\+gil|gil)\)"
    r"|^Thread \d+ \((?:Thread 0x[0-9a-fA-F]+ )?\(LWP \d+\)|^    \"pid\": \d+,"
)


_STRUCTURE = re.compile(STRUCTURE_HINT)

# Key blocks: a head line and the lines below it indented deeper (scontrol show node/job: the
# ``NodeName=``/``JobId=`` line and its ``   Key=value`` lines; kubectl describe: ``Capacity:``
# (through the ``Allocatable:`` block after it), ``Conditions:``, a container's ``State:
# Terminated``; pod/Workload YAML: ``terminated:`` and ``- lastTransitionTime:`` list items;
# pretty JSON: ``"terminated": {`` and a ``{`` whose first key is ``"lastProbeTime"`` /
# ``"lastTransitionTime"``, through the closing brace).
_BLOCK_HEAD = re.compile(
    r"(?:NodeName=\S+ |JobId=\d+ |(?:Capacity|Conditions):[ \t]*$"
    r"|[ \t]+(?:Last )?State:[ \t]+(?:Terminated|Waiting)[ \t]*$"
    r"|[ \t]*(?:terminated:[ \t]*$|- last(?:Probe|Transition)Time: |(?P<brace>\"terminated\": ?\{)[ \t]*$))"
)
_JSON_COND_KEY = re.compile(r"[ \t]*\"last(?:Probe|Transition)Time\": ")
_DCGM_TABLE_TITLE = re.compile(r"\| (?:Diagnostic|Health Monitor Report) ")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _key_block(lines: Sequence[str], s: int, limit: int) -> int:
    """End (exclusive) of the key block starting at ``s``, or ``s + 1`` if none starts there."""
    line = lines[s]
    c = line[0]
    if c == "+" or c == "|":
        # dcgmi diag / dcgmi health table: its title row (after the top border), then every
        # row and border line
        title = s + 1 if c == "+" else s
        if not (line.startswith(("+-", "| ")) and title < limit and _DCGM_TABLE_TITLE.match(lines[title])):
            return s + 1
        e = title + 1
        while e < limit and lines[e][:1] in ("|", "+"):
            e += 1
        return e
    brace = False
    if c in " \t{" and line.strip() == "{":
        if not (s + 1 < limit and _JSON_COND_KEY.match(lines[s + 1])):
            return s + 1
        brace = True
    else:
        m = _BLOCK_HEAD.match(line)
        if m is None:
            return s + 1
        brace = m["brace"] is not None
    d = _indent(line)
    e = s + 1
    while e < limit:
        cur = lines[e]
        if cur.strip() and _indent(cur) > d:
            e += 1
        elif c == "C" and cur.rstrip() == "Allocatable:" and line.startswith("Capacity:"):
            e += 1  # describe node: Capacity, then Allocatable, one record
        else:
            break
    if brace and e < limit and _indent(lines[e]) == d and lines[e].lstrip()[:1] == "}":
        e += 1
    return e


_STACK_PREFIX = re.compile(r"\[rank\d+\]: ?")
_FH_HEAD = re.compile(r"(?:Current thread|Thread) 0x[0-9a-fA-F]+[^\n]*\(most recent call first\):\s*$")
_FH_LINE = re.compile(r"\s*(?:File \"|<no Python frame>|\.\.\.\s*$)")
_PYSPY_HEAD = re.compile(r"Thread (?:\d+|0x[0-9A-Fa-f]+) \((?:idle|active|active\+gil|gil)\)(?:: \".*\")?\s*$")
_GDB_HEAD = re.compile(r"Thread \d+ \((?:Thread 0x[0-9a-fA-F]+ )?\(LWP \d+\)")
_GDB_LINE = re.compile(r"#\d+\s|[ \t]+\S")
_PYSPY_JSON_PID = re.compile(r"    \"pid\": \d+,\s*$")


def _stack_block(lines: Sequence[str], s: int, limit: int) -> int:
    """End (exclusive) of the stack-dump thread block starting at ``s``, or ``s + 1``."""
    line = lines[s]
    m = _STACK_PREFIX.match(line)
    prefix = line[: m.end()] if m else ""
    bare = line[len(prefix):]
    tag = prefix.rstrip(" ")
    if _FH_HEAD.match(bare.lstrip(" ") if prefix else bare):
        e = s + 1
        while e < limit:
            cur = lines[e]
            if not cur.startswith(tag):
                break
            rest = cur[len(tag):]
            if not _FH_LINE.match(rest):
                break
            e += 1
        return e
    if prefix:
        return s + 1
    if _PYSPY_HEAD.match(line):
        e = s + 1
        while e < limit and lines[e].startswith("    ") and lines[e].strip():
            e += 1
        return e
    if _GDB_HEAD.match(line):
        e = s + 1
        while e < limit and _GDB_LINE.match(lines[e]):
            e += 1
        return e
    if line.rstrip() == "  {" and s + 1 < limit and _PYSPY_JSON_PID.match(lines[s + 1]):
        e = s + 1
        while e < limit and lines[e].rstrip() not in ("  }", "  },"):
            if not lines[e].startswith("    "):
                return e  # not closed where it should be: the lines read so far
            e += 1
        return min(e + 1, limit)
    return s + 1


@dataclass(frozen=True)
class RawRecord:
    """One record: ``first_line`` is the 1-based line number of its first physical line in the
    file, ``text`` its physical lines joined with ``"\\n"`` (no trailing newline)."""

    first_line: int
    text: str


def _prefix_of(match: re.Match[str]) -> str:
    return match["p"] or ""


def _nccl_tail(lines: Sequence[str], a: int, prefix: str, limit: int) -> int:
    """End (exclusive) of the NCCL block whose ``nccl<Name>:`` anchor is at ``a``."""
    e = a + 1
    if e < limit and lines[e].startswith(prefix) and lines[e][len(prefix):].rstrip() == "Last error:":
        e += 1
        if e < limit and lines[e].startswith(prefix):
            e += 1
    return e


def _is_nccl_error_line(lines: Sequence[str], j: int, limit: int) -> str | None:
    """If line ``j`` says ``NCCL error`` and line ``j+1`` is an NCCL anchor with the same
    prefix, return that prefix."""
    if j + 1 >= limit or "NCCL error" not in lines[j]:
        return None
    m = _NCCL_ANCHOR.match(lines[j + 1])
    if m is None:
        return None
    p = _prefix_of(m)
    return p if lines[j].startswith(p) and not lines[j][len(p):][:1].isspace() else None


def _extent(lines: Sequence[str], s: int) -> int:
    """End (exclusive) of the record that starts at ``s``, assuming ``s`` starts one; at most
    ``s + MAX_RECORD_LINES``. A line that starts nothing special gives ``s + 1``."""
    n = len(lines)
    limit = min(n, s + MAX_RECORD_LINES)
    line = lines[s]
    if not line:
        return s + 1
    c = line[0]
    if c == "T" or c == "[":
        m = _TRACEBACK.match(line)
        if m:
            p = _prefix_of(m)
            lp = len(p)
            e = s + 1
            while e < limit:
                cur = lines[e]
                if not cur.startswith(p) or cur[lp:lp + 1] not in (" ", "\t"):
                    break
                e += 1
            if e < limit and lines[e].startswith(p) and lines[e][lp:].strip():
                e += 1  # the exception line
                if e < limit:
                    a = _NCCL_ANCHOR.match(lines[e])
                    if a and _prefix_of(a) == p and "NCCL error" in lines[e - 1]:
                        e = _nccl_tail(lines, e, p, limit)
            return e
    if (c == "T" or c == "C" or c == "[" or c == " ") and (
            "(most recent call first):" in line or " (LWP " in line or line.startswith("Thread ")
            or line.rstrip() == "  {"):
        e = _stack_block(lines, s, limit)
        if e > s + 1:
            return e
    if c == "=" and s > 0 and _SUMMARY_RULE.match(line) and "ChildFailedError:" in lines[s - 1]:
        for e in range(s + 1, limit):
            if _SUMMARY_RULE.match(lines[e]):
                return e + 1
        return s + 1  # unclosed within bounds: no record
    if c == "n" or c == "[":
        m = _NCCL_ANCHOR.match(line)
        if m:
            return _nccl_tail(lines, s, _prefix_of(m), limit)
    p = _is_nccl_error_line(lines, s, limit)
    if p is not None:
        return _nccl_tail(lines, s + 1, p, limit)
    if s + 1 < limit and _CONTINUATION.match(lines[s + 1]) and _NVRM_HEAD.match(line):
        e = s + 1
        while e < limit and _CONTINUATION.match(lines[e]):
            e += 1
        return e
    if c in "NJC+| \t-{":
        return _key_block(lines, s, limit)
    return s + 1


def record_span(
    lines: Sequence[str], i: int, *, structure_lines: Sequence[int] | None = None
) -> tuple[int, int]:
    """Return the 0-based ``[start, end)`` of the record containing line ``i``.

    Looks at most :data:`MAX_RECORD_LINES` lines back and forward from ``i``; agrees with
    :func:`group_records` on every line. ``structure_lines``, if given, are the sorted 0-based
    indices of all lines matching :data:`STRUCTURE_HINT` (from a vectorised scan); they only
    save time. Raises ``IndexError`` if ``i`` is out of range.
    """
    n = len(lines)
    if not 0 <= i < n:
        raise IndexError(i)
    lo = max(0, i - MAX_RECORD_LINES + 1)
    hi = min(n, i + 2)
    if structure_lines is None:
        marked = [j for j in range(lo, hi) if _STRUCTURE.match(lines[j])]
    else:
        a, b = bisect_left(structure_lines, lo), bisect_left(structure_lines, hi)
        marked = [int(j) for j in structure_lines[a:b]]
    # A record other than a single line starts at s only if line s or s+1 matches the hint.
    # The answer is the outermost (earliest) such start whose record still covers i.
    starts = sorted({s for j in marked for s in (j - 1, j) if lo <= s <= i})
    for s in starts:
        e = _extent(lines, s)
        if e > i:
            return s, e
    return i, _extent(lines, i)


def complete_spans(buf: Sequence[str], start: int, *, final: bool) -> Iterator[tuple[int, int]]:
    """The records of a stream of lines read so far that are complete, in order: 0-based
    ``[start, end)`` spans over ``buf`` from index ``start`` (the lines before ``start`` are
    already-emitted context, at most :data:`MAX_RECORD_LINES` of them, so a record is never
    joined to one emitted earlier). A record reaching the end of ``buf`` may still grow when
    more lines come: it is yielded only with ``final`` (no continuation can come: end of the
    input, idle stream). A torchrun ``ChildFailedError`` summary whose closing rule has not
    come yet waits too. Used by every connector that reads a stream of lines (files, OTLP)."""
    struct = [j for j, line in enumerate(buf) if _STRUCTURE.match(line)]
    n = len(buf)
    i = start
    while i < n:
        s, e = record_span(buf, i, structure_lines=struct)
        if s < i:  # joins a record already emitted (forced out by idle/end): start anew
            e = i + record_span(buf[i:], 0)[1]
        if e >= n and not final:
            return  # a continuation may still come
        if (not final and e == i + 1 and i > 0 and _SUMMARY_RULE.match(buf[i])
                and "ChildFailedError:" in buf[i - 1] and n - i < MAX_RECORD_LINES):
            return  # torchrun summary still open
        yield i, e
        i = e


def group_records(lines: Sequence[str]) -> Iterator[RawRecord]:
    """Group physical ``lines`` (no newlines) into records, in order; every line lands in
    exactly one record. Yields :class:`RawRecord` (1-based ``first_line``)."""
    n = len(lines)
    s = 0
    while s < n:
        e = _extent(lines, s)
        yield RawRecord(s + 1, "\n".join(lines[s:e]))
        s = e


class BlockLines(Sequence[str]):
    """The physical lines of one block of text, decoded only when read.

    ``BlockLines(body)``: ``body`` is valid UTF-8 text whose lines end with ``\n`` (a final
    newline ends the last line; no empty line follows it). One vectorised pass (numpy) finds
    the newlines: :attr:`starts` and :attr:`ends` are the byte offsets of each line's first
    byte and of its end (its newline, or the end of ``body``), int64 arrays. ``lines[i]``
    decodes one line, ``lines[s:e]`` a list of them, :meth:`text` the lines ``[s, e)`` joined
    with ``\n`` in one decode. Equal, line for line, to ``body.decode().split("\n")`` without
    the empty string after a final newline; :func:`record_span` and the readers take it
    wherever they take a list of lines. Raises ``IndexError`` out of range and
    ``UnicodeDecodeError`` when a line read is not UTF-8."""

    __slots__ = ("body", "starts", "ends")

    def __init__(self, body: bytes) -> None:
        self.body = body
        newlines = np.flatnonzero(np.frombuffer(body, dtype=np.uint8) == 10)
        if not body.endswith(b"\n"):
            newlines = np.append(newlines, len(body))
        self.ends: np.ndarray = newlines.astype(np.int64, copy=False)
        self.starts: np.ndarray = np.empty_like(self.ends)
        if len(self.ends):
            self.starts[0] = 0
            self.starts[1:] = self.ends[:-1] + 1

    def __len__(self) -> int:
        return len(self.ends)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            s, e, step = i.indices(len(self.ends))
            if step != 1:
                return [self[j] for j in range(s, e, step)]
            return self.text(s, e).split("\n") if e > s else []
        n = len(self.ends)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return self.body[int(self.starts[i]):int(self.ends[i])].decode("utf-8")

    def text(self, s: int, e: int) -> str:
        """Lines ``[s, e)`` (0-based, ``s < e``) joined with ``\n``."""
        return self.body[int(self.starts[s]):int(self.ends[e - 1])].decode("utf-8")

    def line_of(self, offsets: np.ndarray) -> np.ndarray:
        """The index of the line holding each byte offset of ``body`` (int64 array; a
        newline belongs to the line it ends)."""
        return np.searchsorted(self.ends, offsets, side="left")
