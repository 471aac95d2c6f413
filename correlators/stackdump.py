"""Stack dumps of hung ranks: parsers for what the tools print, and where a thread waits.

When a distributed job hangs, an operator (or the job itself) dumps every rank's stacks. The
rank that is *not* inside the collective the others wait in is the one that stopped the job
(``correlators.detectors.stack_outlier``). This module reads one thread's dump -- the unit
:mod:`connectors.records` groups into one record -- in the formats the tools write, from
their own output code:

* **py-spy dump** (benfred/py-spy ``src/dump.rs`` ``print_traces``): ``Process <pid>: <cmd>``,
  ``Python v<ver> (<exe>)``, then per thread ``Thread <os tid or 0x..> (idle|active|active+gil):
  "<name>"`` and its frames, innermost first, ``    <name> (<short filename>:<line>)`` (``:<line>``
  left out when 0), with ``--locals`` ``        Arguments:``/``Locals:`` and
  ``            <name>: <repr>`` lines below a frame.
* **py-spy dump --json** (``serde_json::to_string_pretty`` of ``Vec<StackTrace>``,
  ``src/stack_trace.rs``): objects with ``pid``, ``thread_id``, ``thread_name``,
  ``os_thread_id``, ``active``, ``owns_gil``, ``frames`` (``name``, ``filename``, ``module``,
  ``short_filename``, ``line``, ``locals``, ``is_entry``; innermost first), ``process_info``.
* **CPython faulthandler** (``Python/traceback.c`` ``write_thread_id`` / ``dump_frame``):
  ``Current thread 0x<hex> (most recent call first):`` or ``Thread 0x<hex> ...`` (3.13+ may add
  `` [<name>]`` before the parenthesis), frames ``  File "<file>", line <n> in <func>``,
  ``  <no Python frame>``, ``  ...`` when cut at 100 frames; a blank line between threads;
  ``dump_traceback_later`` prints ``Timeout (H:MM:SS)!`` first.
* **gdb ``thread apply all bt``**: ``Thread <n> (Thread 0x<hex> (LWP <tid>) "<name>"):`` then
  ``#<i>  0x<pc> in <func> (<args>) at <file>:<line>`` / ``... from <library>`` (frame 0 at
  the start of a line has no ``0x<pc> in``).
* **PyTorch flight recorder** (``torch/csrc/distributed/c10d/FlightRecorder.cpp``
  ``dump_json`` / ``dump`` (pickle of the same dict, written by ``DebugInfoWriter`` to
  ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>``, default ``/tmp/nccl_trace_rank_<rank>``)):
  ``version``, ``pg_config``, ``pg_status``, ``entries`` (``record_id``, ``pg_id``,
  ``process_group``, ``collective_seq_id``, ``p2p_seq_id``, ``op_id``, ``profiling_name``
  (``nccl:all_reduce``), ``time_created_ns``, ``state`` (scheduled|started|completed),
  ``retired``, ``timeout_ms``, ``is_p2p``, ``frames`` (``name``, ``filename``, ``line``) in the
  pickle form). The pickle is read by :func:`load_flight_recorder_pickle`, a restricted
  unpickler that builds plain containers, strings and numbers and refuses every class.

Each parser returns :class:`StackThread` s (or raises :class:`StackDumpError` with a reason);
:func:`classify` says where a thread waits: ``collective`` (NCCL / c10d / torch.distributed),
``dataloader``, ``io``, ``lock``, ``other``, or ``infra`` (the watchdog / heartbeat threads
every rank has, never evidence). Pure: no I/O.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = [
    "Frame", "StackThread", "StackDumpError", "Where", "classify", "parse_record",
    "parse_pyspy_text", "parse_pyspy_json", "parse_faulthandler", "parse_gdb",
    "parse_flight_recorder", "load_flight_recorder_pickle", "reduce_flight_recorder",
    "normalise_dump_bytes", "rank_from_path", "STATES",
]

#: where a thread waits, from the most telling to the least
STATES = ("collective", "dataloader", "io", "lock", "other", "infra")


class StackDumpError(ValueError):
    """A record that looks like a stack dump but cannot be read (the reason says why)."""


@dataclass(frozen=True)
class Frame:
    function: str
    file: str = ""
    line: int = 0

    def label(self) -> str:
        where = self.file.rsplit("/", 1)[-1] if self.file else ""
        return f"{self.function} ({where}:{self.line})" if where and self.line else (
            f"{self.function} ({where})" if where else self.function)


@dataclass
class StackThread:
    """One thread's stack, innermost frame first."""

    format: str
    frames: list[Frame]
    thread: str = ""
    thread_name: str = ""
    main: bool = False
    pid: int | None = None
    rank: int | None = None
    #: flight recorder: the last entry's facts (op, seq, state, pg)
    collective: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- prefix


_RANK_PREFIX = re.compile(r"^\[rank(\d{1,9})\]: ?")


def _unprefix(line: str) -> tuple[int | None, str]:
    m = _RANK_PREFIX.match(line)
    if m is None:
        return None, line
    return int(m.group(1)), line[m.end():]


_PATH_RANK = re.compile(r"(?:^|[/_.\-])rank[_\-]?(\d{1,6})(?=$|[/_.\-])", re.I)


def rank_from_path(path: str | None) -> int | None:
    """The rank a dump's file name states (``stacks-rank5.txt``, ``nccl_trace_rank_5``,
    ``rank5/pyspy.txt``), or None. Only the file name and its folder are read."""
    if not path:
        return None
    tail = "/".join(path.replace("\\", "/").split("/")[-2:])
    found = _PATH_RANK.findall(tail)
    return int(found[-1]) if found else None


# ----------------------------------------------------------------------------- py-spy text

_PYSPY_HEAD = re.compile(r'^Thread (?P<tid>\d+|0[xX][0-9A-Fa-f]+) \((?P<status>idle|active|active\+gil|gil)\)'
                         r'(?:: "(?P<name>.*)")?\s*$')
_PYSPY_FRAME = re.compile(r"^    (?P<func>\S.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)\s*$")


def parse_pyspy_text(text: str) -> list[StackThread]:
    """One or more ``py-spy dump`` thread blocks."""
    out: list[StackThread] = []
    cur: StackThread | None = None
    for raw in text.split("\n"):
        rank, line = _unprefix(raw)
        m = _PYSPY_HEAD.match(line)
        if m:
            cur = StackThread("py-spy", [], thread=m["tid"], thread_name=m["name"] or "", rank=rank,
                              main=(m["name"] == "MainThread"))
            out.append(cur)
            continue
        if cur is None:
            continue
        f = _PYSPY_FRAME.match(line)
        if f and not line.startswith("     "):
            cur.frames.append(Frame(f["func"], f["file"], int(f["line"] or 0)))
    if not out:
        raise StackDumpError("no py-spy 'Thread <id> (<status>)' header")
    for t in out:
        _main_from_frames(t)
    return out


# ----------------------------------------------------------------------------- py-spy json


def _frames_of(items: Any, name_key: str = "name", file_keys: tuple[str, ...] = ("filename",)) -> list[Frame]:
    frames: list[Frame] = []
    if not isinstance(items, list):
        return frames
    for it in items:
        if not isinstance(it, dict):
            continue
        name = it.get(name_key)
        if not isinstance(name, str):
            continue
        file = ""
        for k in file_keys:
            if isinstance(it.get(k), str) and it[k]:
                file = it[k]
                break
        line = it.get("line") if isinstance(it.get("line"), int) and not isinstance(it.get("line"), bool) else 0
        frames.append(Frame(name, file, line))
    return frames


def _pyspy_thread(obj: dict) -> StackThread:
    tid = obj.get("os_thread_id") if obj.get("os_thread_id") is not None else obj.get("thread_id")
    name = obj.get("thread_name") if isinstance(obj.get("thread_name"), str) else ""
    pid = obj.get("pid") if isinstance(obj.get("pid"), int) else None
    t = StackThread("py-spy-json", _frames_of(obj.get("frames"), file_keys=("filename", "short_filename")),
                    thread=str(tid) if tid is not None else "", thread_name=name, pid=pid,
                    main=(name == "MainThread") or (pid is not None and obj.get("os_thread_id") == pid))
    return t


_JSON_STR = r'"((?:[^"\\]|\\.)*)"'
_JSON_FRAME = re.compile(r'"name":\s*' + _JSON_STR + r',\s*"filename":\s*' + _JSON_STR
                         + r'(?:[^{}]*?"line":\s*(-?\d+))?')


def parse_pyspy_json(text: str) -> list[StackThread]:
    """``py-spy dump --json``: the whole array, one thread object (pretty-printed, as one
    record), or -- when a record was cut -- what its frames still say (read field by field)."""
    body = "\n".join(_unprefix(line)[1] for line in text.split("\n")).strip().rstrip(",")
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        data = [data]
    if isinstance(data, list):
        threads = [_pyspy_thread(o) for o in data if isinstance(o, dict) and "frames" in o]
        if not threads:
            raise StackDumpError("py-spy JSON without thread objects (no 'frames')")
        for t in threads:
            _main_from_frames(t)
        return threads
    # a cut record: the fields still there, innermost frames first
    if '"owns_gil"' not in body or '"frames"' not in body:
        raise StackDumpError("not py-spy JSON (no 'owns_gil' / 'frames')")
    head, _, rest = body.partition('"frames"')

    def field_of(key: str) -> str | None:
        m = re.search(rf'"{key}":\s*(?:{_JSON_STR}|(-?\d+))', head)
        return None if m is None else (m.group(1) if m.group(1) is not None else m.group(2))

    frames = []
    for m in _JSON_FRAME.finditer(rest):
        try:
            name, file = json.loads(f'"{m.group(1)}"'), json.loads(f'"{m.group(2)}"')
        except ValueError:
            continue
        frames.append(Frame(name, file, int(m.group(3)) if m.group(3) else 0))
    if not frames:
        raise StackDumpError("py-spy JSON cut before its first frame")
    pid = field_of("pid")
    name = field_of("thread_name") or ""
    t = StackThread("py-spy-json", frames, thread=field_of("os_thread_id") or field_of("thread_id") or "",
                    thread_name=name, pid=int(pid) if pid and pid.lstrip("-").isdigit() else None,
                    main=name == "MainThread")
    _main_from_frames(t)
    return [t]


# ----------------------------------------------------------------------------- faulthandler

_FH_HEAD = re.compile(r"^(?P<current>Current thread|Thread) (?P<tid>0x[0-9a-fA-F]+)"
                      r"(?: \[(?P<name>[^\]]*)\]| <(?P<name2>[^>]*)>)? \(most recent call first\):\s*$")
_FH_FRAME = re.compile(r'^\s*File "(?P<file>.*)", line (?P<line>\d+|\?\?\?) in (?P<func>.+?)\s*$')


def parse_faulthandler(text: str) -> list[StackThread]:
    """CPython faulthandler thread blocks (``[rankN]:`` prefixes allowed)."""
    out: list[StackThread] = []
    cur: StackThread | None = None
    for raw in text.split("\n"):
        rank, line = _unprefix(raw)
        m = _FH_HEAD.match(line.lstrip(" ") if rank is not None else line)
        if m:
            cur = StackThread("faulthandler", [], thread=m["tid"].lower(), thread_name=m["name"] or m["name2"] or "",
                              rank=rank, main=m["current"] == "Current thread")
            out.append(cur)
            continue
        if cur is None:
            continue
        f = _FH_FRAME.match(line)
        if f:
            ln = f["line"]
            cur.frames.append(Frame(f["func"], f["file"], int(ln) if ln.isdigit() else 0))
    if not out:
        raise StackDumpError("no faulthandler 'Thread 0x... (most recent call first):' header")
    for t in out:
        _main_from_frames(t)
    return out


# ----------------------------------------------------------------------------- gdb

_GDB_HEAD = re.compile(r'^Thread (?P<num>\d+) \((?:Thread (?P<addr>0x[0-9a-fA-F]+) )?\(?LWP (?P<lwp>\d+)\)?\)?'
                       r'(?: "(?P<name>[^"]*)")?\)?:\s*$')
_GDB_FRAME = re.compile(r"^#(?P<i>\d+)\s+(?:0x[0-9a-fA-F]+ in )?(?P<func>.+?)(?: \(.*\))?"
                        r"(?: at (?P<file>\S+?):(?P<line>\d+)| from (?P<lib>\S+))?\s*$")


def _gdb_function(text: str) -> str:
    """``c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal (this=0x.., ...)`` -> the name
    without its argument list (C++ names may hold parentheses of their own: templates and
    ``(anonymous namespace)``)."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == "(" and depth == 0 and i > 0 and text[i - 1] == " ":
            return text[:i - 1]
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
    return text


def parse_gdb(text: str) -> list[StackThread]:
    """gdb ``thread apply all bt`` blocks."""
    out: list[StackThread] = []
    cur: StackThread | None = None
    for raw in text.split("\n"):
        rank, line = _unprefix(raw)
        m = _GDB_HEAD.match(line)
        if m:
            cur = StackThread("gdb", [], thread=m["lwp"], thread_name=m["name"] or "", rank=rank,
                              main=m["num"] == "1")
            out.append(cur)
            continue
        if cur is None or not line.startswith("#"):
            continue
        f = re.match(r"^#\d+\s+(?:0x[0-9a-fA-F]+ in )?(?P<rest>.*)$", line)
        if not f:
            continue
        rest = f["rest"]
        loc = re.search(r" (?:at (?P<file>\S+?):(?P<line>\d+)|from (?P<lib>\S+))\s*$", rest)
        head = rest[: loc.start()] if loc else rest
        func = _gdb_function(head.strip())
        file = (loc["file"] or loc["lib"] or "") if loc else ""
        cur.frames.append(Frame(func, file, int(loc["line"]) if loc and loc["line"] else 0))
    if not out:
        raise StackDumpError("no gdb 'Thread <n> (Thread 0x... (LWP <tid>)):' header")
    for t in out:
        _main_from_frames(t)
    return out


# ----------------------------------------------------------------------------- flight recorder

#: how many entries / frames per entry a flight-recorder dump keeps when it is normalised
FR_KEEP_ENTRIES = 24
FR_KEEP_FRAMES = 16


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, str, bytes, int, float, bool and None; any class or
    callable the stream names (GLOBAL / STACK_GLOBAL, REDUCE on one) is refused."""

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle hook
        raise pickle.UnpicklingError(f"flight recorder pickle names {module}.{name}: only plain data is read")

    def persistent_load(self, pid):  # noqa: D401 - pickle hook
        raise pickle.UnpicklingError("flight recorder pickle holds a persistent id: only plain data is read")


def load_flight_recorder_pickle(data: bytes) -> dict:
    """The dict of a flight-recorder pickle (``FlightRecorder::dump``), read with a restricted
    unpickler (plain containers and scalars only). Raises :class:`StackDumpError`."""
    try:
        obj = _PlainUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # noqa: BLE001 -- any malformed stream is an error, never a crash
        raise StackDumpError(f"flight recorder pickle cannot be read: {type(exc).__name__}: {exc}"[:300]) from None
    if not isinstance(obj, dict) or "entries" not in obj and "pg_config" not in obj:
        raise StackDumpError("pickle is not a flight recorder dump (no 'entries' / 'pg_config')")
    return obj


#: most values a normalised flight-recorder dump may hold (a pickle can share one list many
#: times through its memo: copied out, that would grow without bound)
FR_MAX_VALUES = 200_000


def _plain(obj: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """JSON-able copy: tuples to lists, bytes to text, keys to str; at most
    :data:`FR_MAX_VALUES` values (:class:`StackDumpError` beyond)."""
    if budget is None:
        budget = [FR_MAX_VALUES]
    budget[0] -= 1
    if budget[0] < 0:
        raise StackDumpError(f"flight recorder dump holds more than {FR_MAX_VALUES} values")
    if depth > 12:
        return None
    if isinstance(obj, dict):
        return {str(k): _plain(v, depth + 1, budget) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v, depth + 1, budget) for v in obj]
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def reduce_flight_recorder(dump: dict, rank: int | None = None) -> dict:
    """The part of a flight-recorder dump the engine reads: version, pg_config, pg_status,
    ``rank`` (when known), and the last :data:`FR_KEEP_ENTRIES` entries with at most
    :data:`FR_KEEP_FRAMES` frames each (a real dump holds up to 2000 entries)."""
    entries = dump.get("entries") if isinstance(dump.get("entries"), list) else []
    kept = []
    for e in entries[-FR_KEEP_ENTRIES:]:
        if not isinstance(e, dict):
            continue
        e = dict(e)
        if isinstance(e.get("frames"), list):
            e["frames"] = e["frames"][:FR_KEEP_FRAMES]
        kept.append(e)
    out: dict[str, Any] = {"flight_recorder": True}
    for key in ("version", "pg_config", "pg_status", "rank"):
        if key in dump:
            out[key] = dump[key]
    if rank is not None and "rank" not in out:
        out["rank"] = rank
    out["entries"] = kept
    out["entries_total"] = len(entries)
    return _plain(out)


def normalise_dump_bytes(data: bytes, path: str | None = None) -> tuple[bytes, str] | None:
    """A flight-recorder dump file (pickle or JSON) as one compact JSON line the rule pack
    reads, with a note for the coverage; None when ``data`` is not one. A pickle that cannot
    be read gives a JSON line holding only ``flight_recorder_error`` (the reason), so the
    failure is reported, never raised."""
    rank = rank_from_path(path)
    if data[:1] == b"\x80" and len(data) > 2 and 2 <= data[1] <= 5:
        try:
            dump = load_flight_recorder_pickle(data)
        except StackDumpError as exc:
            if b"entries" not in data and b"pg_config" not in data:
                return None
            line = json.dumps({"flight_recorder_error": str(exc), "rank": rank}, sort_keys=True)
            return line.encode() + b"\n", f"flight recorder pickle not read: {exc}"
        try:
            reduced = reduce_flight_recorder(dump, rank)
        except StackDumpError as exc:
            line = json.dumps({"flight_recorder_error": str(exc), "rank": rank}, sort_keys=True)
            return line.encode() + b"\n", f"flight recorder pickle not read: {exc}"
        line = json.dumps(reduced, sort_keys=True, separators=(",", ":"), default=str)
        return line.encode() + b"\n", (f"flight recorder pickle (version {reduced.get('version', '?')}): "
                                       f"read as one JSON record, last {len(reduced['entries'])} of "
                                       f"{reduced['entries_total']} entries")
    head = data[:4096].lstrip()
    if head[:1] == b"{" and b'"profiling_name"' in data[:1_000_000] or head[:1] == b"{" and b'"pg_config"' in head:
        try:
            dump = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(dump, dict) or ("entries" not in dump and "pg_config" not in dump):
            return None
        try:
            reduced = reduce_flight_recorder(dump, rank)
        except StackDumpError:
            return None
        line = json.dumps(reduced, sort_keys=True, separators=(",", ":"), default=str)
        return line.encode() + b"\n", (f"flight recorder JSON (version {reduced.get('version', '?')}): "
                                       f"last {len(reduced['entries'])} of {reduced['entries_total']} entries")
    return None


def parse_flight_recorder(text: str) -> list[StackThread]:
    """A flight-recorder dump (JSON text, or the line :func:`normalise_dump_bytes` made of a
    pickle) -> one :class:`StackThread` for the rank: its last collective entry (op, sequence
    number, state) and that entry's frames. A rank whose last entry completed is between
    collectives (``collective.state == "completed"``)."""
    try:
        dump = json.loads(text.strip())
    except ValueError as exc:
        raise StackDumpError(f"flight recorder JSON cannot be read: {exc}"[:300]) from None
    if not isinstance(dump, dict):
        raise StackDumpError("flight recorder JSON is not an object")
    if "flight_recorder_error" in dump:
        raise StackDumpError(str(dump["flight_recorder_error"]))
    entries = [e for e in dump.get("entries") or [] if isinstance(e, dict)] if isinstance(dump.get("entries"), list) else []
    rank = dump.get("rank") if isinstance(dump.get("rank"), int) and not isinstance(dump.get("rank"), bool) else None
    if not entries:
        raise StackDumpError("flight recorder dump without entries")
    colls = [e for e in entries if not e.get("is_p2p")] or entries
    last = max(colls, key=lambda e: (e.get("collective_seq_id") or 0, e.get("record_id") or 0))
    pending = [e for e in colls if e.get("state") in ("scheduled", "started")]
    cur = min(pending, key=lambda e: (e.get("collective_seq_id") or 0, e.get("record_id") or 0)) if pending else last
    op = str(cur.get("profiling_name") or "")
    pg = cur.get("process_group")
    info = {"op": op.split(":", 1)[-1] if op else "", "profiling_name": op,
            "seq": cur.get("collective_seq_id"), "state": cur.get("state"), "pg_id": cur.get("pg_id"),
            "last_seq": last.get("collective_seq_id")}
    if isinstance(pg, list) and pg:
        info["pg_name"] = str(pg[0])
    frames = _frames_of(cur.get("frames"))
    # the flight recorder's frames are innermost first, like the other tools'
    t = StackThread("flight-recorder", frames, thread="", rank=rank, main=True,
                    collective={k: v for k, v in info.items() if v is not None})
    return [t]


# ----------------------------------------------------------------------------- dispatch


def parse_record(text: str) -> list[StackThread]:
    """The threads of one record in whichever format it is (raises :class:`StackDumpError`)."""
    probe = "\n".join(_unprefix(line)[1] for line in text.split("\n")[:3])
    if "(most recent call first)" in probe:
        return parse_faulthandler(text)
    if "(LWP " in probe:
        return parse_gdb(text)
    if '"owns_gil"' in text or '"os_thread_id"' in text:
        return parse_pyspy_json(text)
    if '"flight_recorder' in text or '"profiling_name"' in text or '"pg_config"' in text:
        return parse_flight_recorder(text)
    if _PYSPY_HEAD.match(_unprefix(text.split("\n", 1)[0])[1]):
        return parse_pyspy_text(text)
    raise StackDumpError("not a stack dump any parser knows")


# ----------------------------------------------------------------------------- where it waits


def _main_from_frames(t: StackThread) -> None:
    """A thread whose outermost frame is the program's entry (``<module>``, ``main``,
    ``__libc_start_main``, ``Py_BytesMain``) is the main thread."""
    if t.main or not t.frames:
        return
    outer = [f.function for f in t.frames[-3:]]
    if any(f in ("<module>", "_run_module_as_main", "Py_BytesMain", "Py_RunMain", "__libc_start_main",
                 "__libc_start_call_main", "_start") for f in outer):
        t.main = True


_INFRA = re.compile(r"ncclCommWatchdog|[Ww]atchdog(?:Handler)?\b|::Watchdog::|heartbeatMonitor|HeartbeatMonitor"
                    r"|_heartbeat|ncclProxyService|ncclProxyProgress|persistentSocketThread|TCPStoreMasterDaemon"
                    r"|pt_autograd|_monitor_loop|watchdog_thread|_pin_memory_loop")
_COLL_FUNC = re.compile(
    r"^(?:all_reduce|all_gather|all_gather_into_tensor|all_gather_object|_all_gather_base|reduce_scatter"
    r"|reduce_scatter_tensor|_reduce_scatter_base|all_to_all|all_to_all_single|broadcast|broadcast_object_list"
    r"|reduce|gather|gather_object|scatter|scatter_object_list|barrier|monitored_barrier|send|recv|isend|irecv"
    r"|batch_isend_irecv|wait)$")
_COLL_FILE = re.compile(r"torch/distributed/(?:distributed_c10d|c10d_logger|_functional_collectives)\.py"
                        r"|deepspeed/comm/|torch/distributed/fsdp/|megatron/core/tensor_parallel/mappings\.py")
_COLL_NATIVE = re.compile(r"c10d::|ProcessGroupNCCL|ProcessGroupGloo|\bnccl(?:AllReduce|AllGather|ReduceScatter"
                          r"|Broadcast|Reduce|Send|Recv|GroupEnd|CommInitRank)\b|WorkNCCL")
_DATALOADER = re.compile(r"torch/utils/data/(?:dataloader|_utils/fetch|_utils/worker)\.py"
                         r"|/(?:webdataset|datasets|streaming|dali|ffcv)/")
_IO_FUNC = re.compile(
    r"^(?:read|readinto|readline|readlines|pread|pread64|__libc_read|__GI___libc_read|__libc_pread64|__pread64"
    r"|__GI___pread64|read_nocancel|__read_nocancel|readv|preadv|write|__libc_write|__GI___libc_write|pwrite64"
    r"|fsync|fdatasync|__libc_open64|__open64|open|openat|openat64|__GI___open64_nocancel|stat|lstat|fstat"
    r"|statx|newfstatat|__GI___statx|listdir|scandir|copyfileobj|copyfile|sendfile|_io_FileIO_readinto"
    r"|_io_FileIO_readinto_impl|_io__Buffered_read|_bufferedreader_raw_read|load|save|fromfile|memmap"
    r"|getitem|get_object|download_file|download_fileobj|_read_file|_load_from_bytes|_open_file|_open_zipfile_reader)$")
_IO_FILE = re.compile(r"torch/serialization\.py|numpy/lib/(?:npyio|format)\.py|numpy/_core/.*npyio|/h5py/"
                      r"|/pyarrow/|/fsspec/|/s3fs/|/boto3/|/botocore/|/gcsfs/|/zarr/|/safetensors/|shutil\.py"
                      r"|/lustre|/nfs|libnfs|/gpfs|/beegfs|/weka")
_IO_PYTHON_OPEN = re.compile(r"^(?:read|readinto|readline|readlines|write|open|load|save|fromfile|memmap|"
                             r"listdir|scandir|stat|copyfileobj|copyfile)$")
_LOCK = re.compile(
    r"^(?:acquire|_acquire|_acquire_restore|wait|join|_wait_for_tstate_lock|__enter__|lock|_lock|"
    r"pthread_mutex_lock|__pthread_mutex_lock|___pthread_mutex_lock|__lll_lock_wait|lll_lock_wait|"
    r"pthread_rwlock_rdlock|pthread_rwlock_wrlock|__pthread_rwlock_wrlock_full|sem_wait|__new_sem_wait_slow"
    r"|take_gil|PyThread_acquire_lock_timed|acquire_timed|lock_PyThread_acquire_lock|flock|__flock|fcntl|lockf)$")
_LOCK_FILE = re.compile(r"threading\.py|filelock/|fasteners/|multiprocessing/synchronize\.py|portalocker/")


def _is_collective(f: Frame) -> bool:
    if _COLL_NATIVE.search(f.function) or _COLL_NATIVE.search(f.file):
        return True
    return bool(_COLL_FILE.search(f.file)) and bool(_COLL_FUNC.match(f.function))


def _python(f: Frame) -> bool:
    return f.file.endswith((".py", ".pyx")) or f.file.startswith("<")


def _is_io(f: Frame) -> bool:
    if _python(f):
        # Python frames: a storage library's frame, or a read/write/open outside the modules
        # whose reads are waits on other processes (queues, pipes, sockets, locks)
        return bool(_IO_FILE.search(f.file)) or (
            bool(_IO_PYTHON_OPEN.match(f.function)) and not _LOCK_FILE.search(f.file)
            and not _DATALOADER.search(f.file) and not re.search(r"queues?\.py|connection\.py|selectors\.py"
                                                                  r"|socket|subprocess\.py|popen_", f.file))
    return bool(_IO_FUNC.match(f.function)) or bool(_IO_FILE.search(f.file))


def _is_lock(f: Frame) -> bool:
    if _LOCK_FILE.search(f.file):
        return True
    return bool(_LOCK.match(f.function)) and not _python(f)


@dataclass(frozen=True)
class Where:
    """Where one thread waits: ``state`` (one of :data:`STATES`), the innermost frame that
    says so (``frame``), the collective op when in one, and a short signature (state, that
    frame's function and file) that ranks waiting in the same place share."""

    state: str
    frame: Frame | None
    op: str = ""

    @property
    def signature(self) -> str:
        if self.state == "collective":
            return f"collective:{self.op or '?'}"
        if self.frame is None:
            return self.state
        return f"{self.state}:{self.frame.function}@{self.frame.file.rsplit('/', 1)[-1]}"


def _op_of(frames: Iterable[Frame]) -> str:
    for f in frames:
        if _COLL_FILE.search(f.file) and _COLL_FUNC.match(f.function) and f.function != "wait":
            return f.function
        m = re.search(r"ProcessGroup\w+::(allreduce|allgather|_allgather_base|reduce_scatter|_reduce_scatter_base"
                      r"|broadcast|barrier|alltoall|alltoall_base|send|recv|reduce|gather|scatter)\b", f.function)
        if m:
            return {"allreduce": "all_reduce", "allgather": "all_gather", "alltoall": "all_to_all",
                    "alltoall_base": "all_to_all_single", "_allgather_base": "all_gather_into_tensor",
                    "_reduce_scatter_base": "reduce_scatter_tensor"}.get(m.group(1), m.group(1))
        m = re.match(r"nccl(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|Send|Recv)$", f.function)
        if m:
            return re.sub(r"(?<!^)([A-Z])", r"_\1", m.group(1)).lower()
    return ""


def classify(t: StackThread) -> Where:
    """Where ``t`` waits. A flight-recorder thread is ``collective`` while its last entry is
    pending (scheduled/started) and ``other`` once it completed. Otherwise the whole stack
    decides, the most telling state first: a collective frame anywhere (``collective``), a
    data-loader frame (``dataloader``, or ``io`` when a read sits inside it), a storage read or
    write (``io``), a lock or condition wait (``lock``); the watchdog / heartbeat threads every
    rank has are ``infra``; anything else is ``other`` (computing, or no frame at all)."""
    frames = t.frames
    if t.format == "flight-recorder":
        c = t.collective
        if c.get("state") in ("scheduled", "started"):
            return Where("collective", frames[0] if frames else None, str(c.get("op", "")))
        return Where("other", frames[0] if frames else None)
    if not frames:
        return Where("other", None)
    if (any(_INFRA.search(f.function) for f in frames) or _INFRA.search(t.thread_name or "")) and not t.main:
        return Where("infra", frames[0])
    coll = next((f for f in frames if _is_collective(f)), None)
    if coll is not None:
        return Where("collective", coll, _op_of(frames))
    io_f = next((f for f in frames if _is_io(f)), None)
    dl = next((f for f in frames if _DATALOADER.search(f.file)), None)
    if io_f is not None:
        return Where("io", io_f)
    if dl is not None:
        return Where("dataloader", dl)
    lock = next((f for f in frames if _is_lock(f)), None)
    if lock is not None:
        # the innermost frame of the program's own code above the lock tells whose lock it is
        return Where("lock", lock)
    return Where("other", frames[0])
