"""ClickHouse sink: idempotent writes of observations, events, attributions, remediations,
certifications and dead letters, through clickhouse-connect -- to an embedded chDB engine (``chdb://``) or to a
ClickHouse server over HTTP(S).

Tables (``sinks/ddl.sql``, created with ``CREATE ... IF NOT EXISTS`` on every start):

===================  =======================  ==========================================
table                key (ORDER BY)           version column (highest wins under FINAL)
===================  =======================  ==========================================
``observations``     ``observation_id``       -- (last inserted)
``events``           ``event_id``             -- (last inserted)
``attributions``     ``attribution_id``       ``revision`` (the latest revision)
``attribution_       ``attribution_id,        -- (every revision: the provisional ones and
revisions``          revision``               withdrawals too; written by
                                              ``write_attributions`` too)
``remediations``     ``action_id``            ``sequence`` (one higher with every
                                              lifecycle transition: the latest state)
``remediation_       ``action_id, sequence``  -- (every transition: the lifecycle as events;
transitions``                                 written by ``write_remediations`` too)
``certifications``   ``certification_id``     -- (last inserted)
``dead_letters``     ``dead_letter_id``       -- (last inserted)
===================  =======================  ==========================================

Each table has typed columns for what dashboards filter on (times as
``DateTime64(9, 'UTC')``: nanoseconds since the epoch, UTC) plus ``record``, the full
canonical JSON of the record (:func:`schemas.records.canonical_json`), so a row parses back
into a model equal to the one written (:meth:`ClickHouseSink.fetch`).

Schema changes: ``remediations`` was first versioned by a ``state_rank`` column (no
``sequence``); :class:`ClickHouseSink` renames such a table to ``remediations_state_rank_<n>``
before it applies the DDL, so the current table is created (a version column cannot be
altered in place).

Idempotency -- what a rerun of the same replay does to row counts
-----------------------------------------------------------------
Two mechanisms, both verified against chDB 4.4 (ClickHouse 26.9) in
``tests/sinks/test_clickhouse_sink.py``:

1. **ReplacingMergeTree keyed by the deterministic id** -- the guarantee that always holds:
   ``count(table, final=True)`` (``SELECT count() FROM t FINAL``) counts every id once, and
   for attributions the row with the highest ``revision`` is the one FINAL returns. Rows
   written twice may exist physically until a background merge.
2. **Insert deduplication tokens** -- each insert carries ``insert_deduplication_token``, a
   hash of the table and the sorted, de-duplicated canonical records of the batch (chunks
   of ``max_rows_per_insert``). Plain (non-replicated) MergeTree only honours it when the
   table has ``non_replicated_deduplication_window`` > 0; ddl.sql sets 10000 blocks. chDB
   honours it: writing the *same batch* again adds no row, so even a plain ``count()``
   (``final=False``) is unchanged. The guarantee is bounded: it holds when the rerun
   groups records into the same batches (a deterministic replay does) and the earlier
   insert is within the last 10000 inserts of that table. Otherwise the plain count grows
   and FINAL still counts each id once. A retried insert after a transient error reuses the
   token, so a retry never duplicates either.

chDB sessions: one engine path per process
------------------------------------------
Finding (clickhouse-connect 1.12, chdb 4.4): chDB hosts **one embedded engine per process**.
Any number of clients may be open on the *same* path (each has its own handle and session
state); opening a client on a *different* path -- ``:memory:`` included -- while any client
is open raises ``ProgrammingError: EmbeddedServer already initialized with path '/a', cannot
connect with different path '/b' (BAD_ARGUMENTS)``. Closing one client of two is not
enough; once the *last* client on a path is closed, another path can be opened, and
reopening the first later sees its data again.

So the sink keeps a process-wide registry: all ``ClickHouseSink`` objects on one chDB path
share one client (reference-counted; the last :meth:`ClickHouseSink.close` closes it), and
asking for a second path while the first is held raises :class:`SinkError` naming both.
Table names are always qualified with the database, so sinks with different databases on
the same path are isolated. Tests therefore use one chDB directory per test module/session
and a distinct ``database`` per test, and close their sinks, so other test modules can open
their own path afterwards.

URLs
----
* ``chdb:///abs/dir`` -- embedded engine in ``/abs/dir`` (created if missing);
* ``chdb://relative/dir`` -- relative to the current directory (the default
  ``chdb://.state/clickhouse``);
* ``chdb://memory`` or ``chdb://:memory:`` -- in-memory engine;
* ``http://user:pass@host:8123`` / ``https://...`` -- a server; the database is
  ``database=``, not the URL path.

Errors: :class:`SinkError` for a bad URL or database name, an unreachable server, a chDB
path conflict, and any write/read failure (transient errors -- network, timeouts, too many
parts/queries, ... -- are retried with exponential back-off and jitter by tenacity first).
``TypeError`` when a write gets records of the wrong model. ``SinkError.transient`` says
whether a retry may cure it.

Bad rows: every ``write_*`` takes ``on_reject(record, reason)``. With it, a record whose row
does not fit its table (an integer or time outside the range of its column type -- Int32,
UInt16, UInt32, Int64, ``DateTime64(9)`` --, checked before the insert) is handed to it and
left out, and an insert the server refuses with a non-transient error is bisected until the
refused rows are found; the other rows are written. The ``xid`` column of ``events`` is NULL
for an XID code outside Int32 (the ``record`` column keeps the value).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import clickhouse_connect
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError
from pydantic import BaseModel
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from schemas.records import (
    Attribution,
    Cost,
    Certification,
    Event,
    GpuRef,
    Observation,
    RemediationAction,
    canonical_json,
)
from sinks.deadletter import DeadLetter

__all__ = ["ClickHouseSink", "SinkError", "TABLES", "DEFAULT_URL"]

DEFAULT_URL = "chdb://.state/clickhouse"

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: ClickHouse error codes worth retrying: they come from load or the network, not the request.
_TRANSIENT_CODES = frozenset(
    {
        3,  # UNEXPECTED_END_OF_FILE
        159,  # TIMEOUT_EXCEEDED
        164,  # READONLY (replica temporarily read-only)
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        203,  # NO_FREE_CONNECTION
        209,  # SOCKET_TIMEOUT
        210,  # NETWORK_ERROR
        236,  # ABORTED
        241,  # MEMORY_LIMIT_EXCEEDED
        242,  # TABLE_IS_READ_ONLY
        252,  # TOO_MANY_PARTS
        285,  # TOO_FEW_LIVE_REPLICAS
        319,  # UNKNOWN_STATUS_OF_INSERT
        425,  # SYSTEM_ERROR
        999,  # KEEPER_EXCEPTION
    }
)

class SinkError(RuntimeError):
    """A sink could not be opened, or a write or read failed (after retries if transient).

    ``transient``: True when the cause is one a later retry may cure (network, load: see
    ``_is_transient``), False for a request the server refuses (a bad row, a bad URL)."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


#: A callback for rows a write cannot store: ``on_reject(record, reason)``.
Reject = Callable[[BaseModel, str], None]


# --------------------------------------------------------------------------------------------
# row builders: record -> typed columns + canonical JSON


def _gpu_label(gpu: GpuRef | None) -> str | None:
    """The most specific name of a GPU: PCI bus id, else UUID, else ``index:N``."""
    if gpu is None:
        return None
    if gpu.pci_bus_id:
        return gpu.pci_bus_id
    if gpu.uuid:
        return gpu.uuid
    if gpu.index is not None:
        return f"index:{gpu.index}"
    return None


_INT32 = (-(2**31), 2**31 - 1)


def _int_or_none(value: Any) -> int | None:
    """``value`` as an Int32 column value: an int (or digits) within the Int32 range, else
    None (the record column keeps the value as it was)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value.strip()) <= 12:
        value = int(value)
    if isinstance(value, int) and _INT32[0] <= value <= _INT32[1]:
        return value
    return None


#: Value ranges of the integer and time column types of ddl.sql (DateTime64(9) as Int64 ns).
_TYPE_RANGES: dict[str, tuple[int, int]] = {
    "Int32": _INT32,
    "UInt16": (0, 2**16 - 1),
    "UInt32": (0, 2**32 - 1),
    "Int64": (-(2**63), 2**63 - 1),
    "DateTime64(9, 'UTC')": (-2_208_988_800_000_000_000, 2**63 - 1),
}
_COLUMN_RE = re.compile(r"^\s+(\w+)\s+(\S.*?)(?:\s+(?:DEFAULT|CODEC)\b.*)?,?\s*$")


def _column_ranges() -> dict[str, dict[str, tuple[int, int]]]:
    """``{table: {column: (lo, hi)}}`` for the integer and time columns of ddl.sql (array
    columns: each element)."""
    text = resources.files("sinks").joinpath("ddl.sql").read_text(encoding="utf-8")
    out: dict[str, dict[str, tuple[int, int]]] = {}
    table = None
    for line in text.splitlines():
        m = re.match(r"CREATE TABLE IF NOT EXISTS \{database\}\.(\w+)(\s+AS\s+\{database\}\.(\w+))?", line)
        if m:
            table = m[1]
            out[table] = dict(out.get(m[3], {})) if m[3] else {}
            continue
        c = _COLUMN_RE.match(line)
        if table and c:
            kind = re.sub(r"^(?:Nullable|Array)\((.*)\)$", r"\1", c[2])
            if kind in _TYPE_RANGES:
                out[table][c[1]] = _TYPE_RANGES[kind]
    return out


#: ``CREATE TABLE ... <table> AS ...<source>`` of ddl.sql: a table made with another's columns.
_COPY_TABLE_RE = re.compile(r"CREATE TABLE IF NOT EXISTS \{database\}\.(?P<table>\w+)\s+AS\s+\{database\}\.(?P<source>\w+)")


_OBS_FILTERS = frozenset({"workload_ids", "cluster", "hosts", "start_ns", "end_ns", "kinds", "formats"})


def _observation_filters(params: dict[str, Any], suffix: str, filters: Mapping[str, Any]) -> list[str] | None:
    """The SQL conditions of one selection of ``observations`` rows
    (:meth:`ClickHouseSink.observation_records`'s filters; None values are no filter), their
    parameters added to ``params`` with names ending in ``suffix``; None when an empty
    sequence makes the selection match nothing. Raises ``ValueError`` for an unknown filter."""
    unknown = set(filters) - _OBS_FILTERS
    if unknown:
        raise ValueError(f"unknown observation filter(s): {sorted(unknown)}")
    where: list[str] = []
    for column, name, key in (("workload_id", "wids", "workload_ids"), ("host", "hosts", "hosts"),
                              ("kind", "kinds", "kinds"), ("format", "formats", "formats")):
        values = filters.get(key)
        if values is not None:
            if not values:
                return None
            where.append(f"{column} IN {{{name}{suffix}:Array(String)}}")
            params[name + suffix] = sorted(set(values))
    if filters.get("cluster") is not None:
        where.append(f"cluster = {{cluster{suffix}:String}}")
        params["cluster" + suffix] = filters["cluster"]
    if filters.get("start_ns") is not None:
        where.append(f"observed_at >= fromUnixTimestamp64Nano({{lo{suffix}:Int64}}, 'UTC')")
        params["lo" + suffix] = int(filters["start_ns"])
    if filters.get("end_ns") is not None:
        where.append(f"observed_at <= fromUnixTimestamp64Nano({{hi{suffix}:Int64}}, 'UTC')")
        params["hi" + suffix] = int(filters["end_ns"])
    return where


def _row_problem(columns: Sequence[str], row: Sequence[Any], ranges: dict[str, tuple[int, int]]) -> str | None:
    """Why ``row`` cannot be stored in its table's typed columns (an integer or time out of
    its column type's range), or None when it fits."""
    for name, value in zip(columns, row):
        bounds = ranges.get(name)
        if bounds is None or value is None:
            continue
        for v in value if isinstance(value, list) else (value,):
            if not isinstance(v, int) or isinstance(v, bool) or not bounds[0] <= v <= bounds[1]:
                return f"column {name}: {v!r} outside [{bounds[0]}, {bounds[1]}]"
    return None


def _observation_row(o: Observation, record: str) -> list[Any]:
    gpu = o.gpu
    return [
        o.observation_id,
        o.schema_version,
        o.kind,
        o.observed_at,
        o.time_source,
        o.time_quality,
        o.host,
        o.cluster,
        o.workload_id,
        o.rank,
        gpu.index if gpu else None,
        gpu.pci_bus_id if gpu else None,
        gpu.uuid if gpu else None,
        o.fabric_port,
        o.source.connector,
        o.source.instance,
        o.format,
        o.position.file,
        o.position.line,
        record,
    ]


def _event_row(e: Event, record: str) -> list[Any]:
    gpu = e.gpu
    return [
        e.event_id,
        e.schema_version,
        e.type,
        e.at,
        e.began_at,
        e.effective_at,
        e.time_quality,
        e.host,
        e.cluster,
        e.workload_id,
        e.rank,
        gpu.index if gpu else None,
        gpu.pci_bus_id if gpu else None,
        gpu.uuid if gpu else None,
        e.fabric_port,
        e.peer,
        _int_or_none(e.attributes.get("xid")),
        e.rule,
        [ref.observation_id for ref in e.evidence],
        record,
    ]


def _cost_columns(cost: Cost | None) -> list[Any]:
    """gpu_hours_lost, node_hours_lost, ran_after_cause_s, verdict_after_s, jobs_hit,
    nodes_hit, goodput_lost_fraction, gpu_hours_lost_per_hour of a verdict's cost (NULLs and
    zeros when it has none)."""
    if cost is None:
        return [None, None, None, None, 0, 0, None, None]
    return [cost.gpu_hours_lost, cost.node_hours_lost, cost.ran_after_cause_s, cost.verdict_after_s,
            cost.jobs_hit, cost.nodes_hit, cost.goodput_lost_fraction, cost.gpu_hours_lost_per_hour]


def _attribution_row(a: Attribution, record: str) -> list[Any]:
    return [
        a.attribution_id,
        a.revision,
        a.schema_version,
        a.scope.kind,
        a.scope.id,
        a.scope.cluster,
        a.window.start,
        a.window.end,
        a.outcome,
        a.domain,
        a.cause_code,
        a.root_cause.text if a.root_cause is not None else "",
        a.root_cause.event_id if a.root_cause is not None else None,
        list(a.culprits.hosts),
        list(a.culprits.ranks),
        [label for label in (_gpu_label(g) for g in a.culprits.gpus) if label],
        list(a.culprits.ports),
        list(a.affected.hosts),
        list(a.affected.ranks),
        list(a.affected.workloads),
        len(a.symptoms),
        a.confidence,
        a.quality,
        a.status,
        *_cost_columns(a.cost),
        [alt.code for alt in a.alternatives],
        [f"{c.source}:{c.status}" for c in a.coverage if c.status != "present"],
        a.incident_id,
        a.ruleset_version,
        a.engine_version,
        a.decided_at,
        record,
    ]


def _remediation_row(r: RemediationAction, record: str) -> list[Any]:
    d = r.decision
    return [
        r.action_id,
        r.sequence,
        r.schema_version,
        r.attribution_id,
        r.incident_id,
        r.cluster,
        r.action,
        r.mode,
        r.state,
        r.policy_id,
        r.policy_version,
        r.cause_code,
        r.severity,
        r.target.host,
        _gpu_label(r.target.gpu),
        r.target.port,
        list(r.target.hosts),
        [g.guard for g in r.guards if not g.passed],
        r.reason,
        d.by if d else None,
        d.at if d else None,
        d.reason if d else None,
        r.executor,
        r.result,
        r.created_at,
        r.updated_at,
        r.expires_at,
        record,
    ]


def _certification_row(c: Certification, record: str) -> list[Any]:
    return [
        c.certification_id,
        c.schema_version,
        c.host,
        c.cluster,
        c.suite,
        c.passed,
        [f"{t.name}:{t.result}" for t in c.tests],
        [t.name for t in c.tests if t.result == "fail"],
        c.finished_at,
        c.source,
        record,
    ]


_ATTRIBUTION_COLUMNS = (
    "attribution_id", "revision", "schema_version", "scope_kind", "scope_id",
    "cluster", "window_start", "window_end", "outcome", "domain",
    "root_cause_code", "root_cause_text", "root_cause_event_id", "culprit_hosts",
    "culprit_ranks", "culprit_gpus", "culprit_ports", "affected_hosts",
    "affected_ranks", "affected_workloads", "symptom_count", "confidence",
    "quality", "status", "gpu_hours_lost", "node_hours_lost", "ran_after_cause_s",
    "verdict_after_s", "jobs_hit", "nodes_hit", "goodput_lost_fraction", "gpu_hours_lost_per_hour",
    "alternative_codes", "coverage_problems", "incident_id",
    "ruleset_version", "engine_version", "decided_at", "record",
)


_REMEDIATION_COLUMNS = (
    "action_id", "sequence", "schema_version", "attribution_id", "incident_id", "cluster",
    "action", "mode", "state", "policy_id", "policy_version", "cause_code", "severity",
    "target_host", "target_gpu", "target_port", "target_hosts", "guards_failed", "reason",
    "decision_by", "decision_at", "decision_reason", "executor", "result", "created_at",
    "updated_at", "expires_at", "record",
)


def _dead_letter_row(d: DeadLetter, record: str) -> list[Any]:
    p = d.position
    return [
        d.dead_letter_id,
        d.schema_version,
        d.source,
        d.reason,
        bytes(d.original) if d.original is not None else b"",  # a tombstone has no value
        p.file,
        p.line,
        p.topic,
        p.partition,
        p.offset,
        d.at_ns,
        record,
    ]


@dataclass(frozen=True)
class _Table:
    name: str
    model: type[BaseModel]
    id_field: str
    version: Callable[[Any], int]
    columns: tuple[str, ...]
    row: Callable[[Any, str], list[Any]]


def _zero(_: Any) -> int:
    return 0


TABLES: dict[str, _Table] = {
    t.name: t
    for t in (
        _Table(
            "observations",
            Observation,
            "observation_id",
            _zero,
            (
                "observation_id", "schema_version", "kind", "observed_at", "time_source",
                "time_quality", "host", "cluster", "workload_id", "rank", "gpu_index",
                "gpu_pci_bus_id", "gpu_uuid", "fabric_port", "source_connector",
                "source_instance", "format", "position_file", "position_line", "record",
            ),
            _observation_row,
        ),
        _Table(
            "events",
            Event,
            "event_id",
            _zero,
            (
                "event_id", "schema_version", "type", "at", "began_at", "effective_at",
                "time_quality", "host", "cluster", "workload_id", "rank", "gpu_index",
                "gpu_pci_bus_id", "gpu_uuid", "fabric_port", "peer", "xid", "rule",
                "observation_ids", "record",
            ),
            _event_row,
        ),
        _Table(
            "attributions",
            Attribution,
            "attribution_id",
            lambda a: a.revision,
            _ATTRIBUTION_COLUMNS,
            _attribution_row,
        ),
        _Table(
            "attribution_revisions",
            Attribution,
            "attribution_id",
            lambda a: a.revision,
            _ATTRIBUTION_COLUMNS,
            _attribution_row,
        ),
        _Table(
            "remediations",
            RemediationAction,
            "action_id",
            lambda r: r.sequence,
            _REMEDIATION_COLUMNS,
            _remediation_row,
        ),
        _Table(
            "remediation_transitions",
            RemediationAction,
            "action_id",
            lambda r: r.sequence,
            _REMEDIATION_COLUMNS,
            _remediation_row,
        ),
        _Table(
            "certifications",
            Certification,
            "certification_id",
            _zero,
            (
                "certification_id", "schema_version", "host", "cluster", "suite", "passed",
                "tests", "tests_failed", "finished_at", "source", "record",
            ),
            _certification_row,
        ),
        _Table(
            "dead_letters",
            DeadLetter,
            "dead_letter_id",
            _zero,
            (
                "dead_letter_id", "schema_version", "source", "reason", "original",
                "position_file", "position_line", "topic", "partition", "offset", "at",
                "record",
            ),
            _dead_letter_row,
        ),
    )
}


#: ``{table: {column: (lo, hi)}}``: the integer and time columns of every table.
_RANGES = _column_ranges()


# --------------------------------------------------------------------------------------------
# chDB: one engine path per process, shared reference-counted clients


@dataclass
class _Engine:
    client: Any
    refs: int


_ENGINE_LOCK = threading.Lock()
_ENGINES: dict[str, _Engine] = {}


def _acquire_chdb(path: str) -> Any:
    """Return the process-wide client on chDB ``path`` (``:memory:`` or an absolute dir),
    opening it if needed. Raises SinkError if another path holds the engine."""
    with _ENGINE_LOCK:
        engine = _ENGINES.get(path)
        if engine is not None:
            engine.refs += 1
            return engine.client
        if _ENGINES:
            held = ", ".join(sorted(_ENGINES))
            raise SinkError(
                f"chDB hosts one engine per process: it is open at {held}, so chdb://{path} "
                "cannot be opened; close the sinks on that path first, or use the same path "
                "with a different database="
            )
        if path != ":memory:":
            try:
                Path(path).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SinkError(f"cannot create the chDB directory {path}: {exc}") from exc
        try:
            client = clickhouse_connect.get_client(interface="chdb", path=path)
        except Exception as exc:  # ProgrammingError when other code holds the engine
            raise SinkError(f"cannot open the chDB engine at {path}: {exc}") from exc
        _ENGINES[path] = _Engine(client=client, refs=1)
        return client


def _release_chdb(path: str) -> None:
    with _ENGINE_LOCK:
        engine = _ENGINES.get(path)
        if engine is None:
            return
        engine.refs -= 1
        if engine.refs <= 0:
            del _ENGINES[path]
            engine.client.close()


def chdb_path(url: str) -> str:
    """The engine directory of a ``chdb://`` URL, absolute (``:memory:`` for ``chdb://memory``
    or ``chdb://:memory:``). Raises :class:`SinkError` for a URL that names no directory or has
    a query or fragment."""
    rest = url[len("chdb://") :]
    if "?" in rest or "#" in rest:
        raise SinkError(f"chDB URL {url!r} takes no query or fragment")
    if rest == "":
        raise SinkError("chDB URL 'chdb://' names no directory: use chdb://DIR, or chdb://memory for a throw-away in-memory engine")
    if rest in ("memory", ":memory:"):
        return ":memory:"
    return str(Path(rest).expanduser().resolve())


def _redact(url: str) -> str:
    try:
        parsed = urlparse(url)
        password = parsed.password
    except ValueError:
        return "<unparseable URL>"
    if password is None:
        return url
    netloc = f"{parsed.username}:***@{parsed.hostname}"
    if parsed.port:
        netloc += f":{parsed.port}"
    return urlunparse(parsed._replace(netloc=netloc))


def _is_transient(exc: BaseException) -> bool:
    """True for errors a retry may cure: transport errors (``OperationalError``) and server
    errors whose code is in ``_TRANSIENT_CODES``."""
    if isinstance(exc, OperationalError):
        return True
    if isinstance(exc, DatabaseError):
        return getattr(exc, "code", None) in _TRANSIENT_CODES
    return isinstance(exc, (ConnectionError, TimeoutError))


class ClickHouseSink:
    """Idempotent ClickHouse writer for every faultstream record (see the module docstring).

    ``url``: ``chdb:///abs/dir``, ``chdb://relative/dir``, ``chdb://memory`` or
    ``http(s)://user:pass@host:port``. ``database``: an identifier; created with the tables
    if missing. ``retry_attempts`` / ``retry_max_wait_s``: tenacity budget for transient
    errors (exponential back-off from 0.2 s with jitter, capped at ``retry_max_wait_s``).
    ``max_rows_per_insert``: batches are split into inserts of at most this many rows, each
    with its own deduplication token. ``connect_timeout_s``: HTTP only.

    Raises :class:`SinkError` on a bad URL or database name, a chDB path conflict, or a
    server that cannot be reached within the retry budget.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        database: str = "faultstream",
        retry_attempts: int = 5,
        retry_max_wait_s: float = 5.0,
        max_rows_per_insert: int = 10_000,
        connect_timeout_s: float = 5.0,
    ) -> None:
        if not _IDENT_RE.match(database or ""):
            raise SinkError(f"bad database name {database!r}: must match {_IDENT_RE.pattern}")
        if retry_attempts < 1:
            raise SinkError("retry_attempts must be >= 1")
        if max_rows_per_insert < 1:
            raise SinkError("max_rows_per_insert must be >= 1")
        self.url = url
        self.database = database
        self.max_rows_per_insert = max_rows_per_insert
        self._retry_attempts = retry_attempts
        self._retry_max_wait_s = retry_max_wait_s
        self._chdb_path: str | None = None
        self._closed = False
        self._client: Any = None

        if url.startswith("chdb://"):
            self._chdb_path = chdb_path(url)
            self._client = _acquire_chdb(self._chdb_path)
        elif url.startswith(("http://", "https://")):
            self._client = self._connect_http(url, connect_timeout_s)
        else:
            raise SinkError(
                f"unsupported ClickHouse URL {_redact(url)!r}: use chdb:///abs/dir, "
                "chdb://relative/dir, chdb://memory or http(s)://user:pass@host:port"
            )
        try:
            self._apply_ddl()
        except BaseException:
            self.close()
            raise

    # -- connection ----------------------------------------------------------------------

    def _connect_http(self, url: str, connect_timeout_s: float) -> Any:
        try:
            parsed = urlparse(url)
            parsed.hostname  # noqa: B018 -- raises ValueError on a malformed IPv6 host
        except ValueError as exc:
            raise SinkError(f"malformed ClickHouse URL: {exc}") from exc
        if not parsed.hostname:
            raise SinkError(f"ClickHouse URL {_redact(url)!r} names no host")
        if parsed.path not in ("", "/"):
            raise SinkError(
                f"ClickHouse URL {_redact(url)!r} has a path; pass the database as "
                "database=, not in the URL"
            )
        try:
            parsed.port  # noqa: B018 -- raises ValueError on a bad port
        except ValueError as exc:
            raise SinkError(f"bad port in ClickHouse URL {_redact(url)!r}: {exc}") from exc
        dsn = urlunparse(parsed._replace(path="", params="", fragment=""))

        def connect() -> Any:
            return clickhouse_connect.get_client(
                dsn=dsn,
                secure=parsed.scheme == "https",
                database="default",
                connect_timeout=connect_timeout_s,
                send_receive_timeout=max(30.0, connect_timeout_s),
            )

        return self._retry(connect, f"connect to ClickHouse at {_redact(url)}")

    def _retry(self, fn: Callable[[], Any], what: str) -> Any:
        retrying = Retrying(
            stop=stop_after_attempt(self._retry_attempts),
            wait=wait_exponential(multiplier=0.2, max=self._retry_max_wait_s)
            + wait_random(0, min(0.2, self._retry_max_wait_s)),
            retry=retry_if_exception(_is_transient),
            reraise=True,
        )
        try:
            return retrying(fn)
        except RetryError as exc:  # pragma: no cover - reraise=True re-raises the cause
            raise SinkError(f"cannot {what}: {exc}", transient=True) from exc
        except SinkError:
            raise
        except Exception as exc:
            attempts = retrying.statistics.get("attempt_number", 1)
            transient = _is_transient(exc)
            kind = "after %d attempts" % attempts if transient else "(not retried)"
            raise SinkError(f"cannot {what} {kind}: {type(exc).__name__}: {exc}",
                            transient=transient) from exc

    def _retire_old_remediations(self) -> None:
        """Rename a ``remediations`` table of the first schema (``state_rank``, no
        ``sequence``) to ``remediations_state_rank_<n>`` so the DDL creates the current one."""
        exists = self._retry(lambda: self._client.command(
            f"EXISTS TABLE {self.database}.remediations"), "inspect the remediations table")
        if str(exists).strip() != "1":
            return
        columns = self._retry(lambda: self._client.query(
            "SELECT name FROM system.columns WHERE database = {db:String} AND table = 'remediations'",
            parameters={"db": self.database}).result_rows, "inspect the remediations table")
        if ("sequence",) in columns:
            return
        n = 1
        while str(self._retry(lambda n=n: self._client.command(
                f"EXISTS TABLE {self.database}.remediations_state_rank_{n}"), "inspect tables")).strip() == "1":
            n += 1
        self._retry(lambda: self._client.command(
            f"RENAME TABLE {self.database}.remediations TO {self.database}.remediations_state_rank_{n}"),
            "rename the old remediations table")

    def _apply_ddl(self) -> None:
        text = resources.files("sinks").joinpath("ddl.sql").read_text(encoding="utf-8")
        statements = [s.strip() for s in re.split(r"(?m)^\s*;\s*$", text)]
        for stmt in statements:
            body = "\n".join(
                line for line in stmt.splitlines() if not line.lstrip().startswith("--")
            ).strip()
            if body:
                sql = body.replace("{database}", self.database)
                self._retry(lambda sql=sql: self._client.command(sql), "apply the DDL")
                if body.startswith("CREATE DATABASE"):
                    self._retire_old_remediations()
                copy = _COPY_TABLE_RE.match(body)
                if copy:
                    self._add_source_columns(copy["table"], copy["source"])

    def _add_source_columns(self, table: str, source: str) -> None:
        """Give ``table`` (made ``AS source``) the columns ``source`` gained after ``table`` was
        created (the ``ALTER ... ADD COLUMN`` statements of ddl.sql only name ``source``), each
        with its type, default and codec, in ``source``'s order."""
        def columns(name: str) -> list[tuple[str, str, str, str, str]]:
            return self._retry(lambda: self._client.query(
                "SELECT name, type, default_kind, default_expression, compression_codec "
                "FROM system.columns WHERE database = {db:String} AND table = {t:String} ORDER BY position",
                parameters={"db": self.database, "t": name}).result_rows, f"inspect the {name} table")

        have = {row[0] for row in columns(table)}
        previous = None
        for name, type_, default_kind, default_expr, codec in columns(source):
            if name not in have:
                spec = f"`{name}` {type_}"
                if default_kind:
                    spec += f" {default_kind} {default_expr}"
                if codec:
                    spec += f" {codec}"
                spec += f" AFTER `{previous}`" if previous else " FIRST"
                sql = f"ALTER TABLE {self.database}.{table} ADD COLUMN IF NOT EXISTS {spec}"
                self._retry(lambda sql=sql: self._client.command(sql), f"add {name} to {table}")
            previous = name

    @property
    def client(self) -> Any:
        """The underlying clickhouse-connect client (shared with other sinks on the same chDB
        path; always qualify table names with :attr:`database`)."""
        self._check_open()
        return self._client

    def _check_open(self) -> None:
        if self._closed:
            raise SinkError("the ClickHouse sink is closed")

    # -- writes --------------------------------------------------------------------------

    def write_observations(self, obs: Sequence[Observation], *, on_reject: Reject | None = None) -> int:
        """Write observations (ids filled from content when empty). Returns the number of
        distinct records submitted (rows the server deduplicated are still counted)."""
        return self._write("observations", obs, on_reject)

    def write_events(self, events: Sequence[Event], *, on_reject: Reject | None = None) -> int:
        """Write events (ids filled from content when empty). Returns the number submitted."""
        return self._write("events", events, on_reject)

    def write_attributions(self, attrs: Sequence[Attribution], *, on_reject: Reject | None = None) -> int:
        """Write attributions to ``attributions`` (under FINAL the highest ``revision`` per
        ``attribution_id`` wins) and to ``attribution_revisions`` (one row per
        ``attribution_id`` and ``revision``: what a verdict said over time, its first revision
        included). Returns the number of distinct records submitted."""
        return self._write_history("attribution_revisions", "attributions", attrs, on_reject)

    def write_remediations(self, actions: Sequence[RemediationAction], *,
                           on_reject: Reject | None = None) -> int:
        """Write remediation transition records to ``remediations`` (under FINAL the record
        with the highest ``sequence`` per ``action_id``: the latest state, whatever the order
        of the writes) and to ``remediation_transitions`` (one row per ``action_id`` and
        ``sequence``: the lifecycle). Returns the number of distinct records submitted."""
        return self._write_history("remediation_transitions", "remediations", actions, on_reject)

    def _write_history(self, history: str, latest: str, records: Sequence[BaseModel],
                       on_reject: Reject | None) -> int:
        """Write ``records`` to the ``history`` table (every version) and the ``latest`` one;
        a record both refuse is reported once. Returns what :meth:`_write` of ``latest`` does."""
        rejected: set[int] = set()

        def once(rec: BaseModel, reason: str) -> None:
            if id(rec) not in rejected and on_reject is not None:
                rejected.add(id(rec))
                on_reject(rec, reason)

        self._write(history, records, once if on_reject else None)
        return self._write(latest, records, once if on_reject else None)

    def write_certifications(self, certs: Sequence[Certification], *, on_reject: Reject | None = None) -> int:
        """Write certification results (ids filled from content when empty). Returns the
        number submitted."""
        return self._write("certifications", certs, on_reject)

    def write_dead_letters(self, rows: Sequence[DeadLetter], *, on_reject: Reject | None = None) -> int:
        """Write dead letters (ids filled from content when empty); ``original`` is stored as
        raw bytes. Returns the number submitted."""
        return self._write("dead_letters", rows, on_reject)

    def _write(self, table: str, records: Sequence[BaseModel], on_reject: Reject | None = None) -> int:
        """Insert ``records`` into ``table`` (chunks of ``max_rows_per_insert``, each with
        its deduplication token). Without ``on_reject``, the first failure raises
        :class:`SinkError`. With it, a record whose row cannot be stored (an integer or time
        outside its column type, a value canonical JSON cannot hold) is passed to
        ``on_reject(record, reason)`` and left out, and a chunk the server refuses with a
        non-transient error is split in halves until the refused rows are found, so one bad
        row never holds back the others; a transient failure (after the retries) still raises
        :class:`SinkError` with ``transient=True``. Returns the number of distinct records
        submitted (rejected ones excluded)."""
        self._check_open()
        spec = TABLES[table]
        ranges = _RANGES.get(table, {})
        prepared: dict[tuple[str, int, str], tuple[list[Any], BaseModel]] = {}
        for rec in records:
            if not isinstance(rec, spec.model):
                raise TypeError(
                    f"{table} takes {spec.model.__name__} records, got {type(rec).__name__}"
                )
            try:
                rid = getattr(rec, spec.id_field)
                if not rid:
                    if not hasattr(rec, "with_id"):
                        raise SinkError(f"{spec.model.__name__} without {spec.id_field}")
                    rec = rec.model_copy(deep=True).with_id()  # type: ignore[attr-defined]
                    rid = getattr(rec, spec.id_field)
                record = canonical_json(rec)
                row = spec.row(rec, record)
                problem = _row_problem(spec.columns, row, ranges)
                if problem is not None:
                    raise SinkError(f"{spec.model.__name__} {rid}: {problem}")
            except (SinkError, TypeError, ValueError) as exc:
                if on_reject is None:
                    raise SinkError(f"cannot store in {table}: {exc}") from exc
                on_reject(rec, f"not stored in {table}: {exc}")
                continue
            prepared[(rid, spec.version(rec), record)] = (row, rec)
        if not prepared:
            return 0
        keys = sorted(prepared)  # deterministic order => deterministic dedup tokens
        stored = 0
        for start in range(0, len(keys), self.max_rows_per_insert):
            stored += self._insert(table, keys[start : start + self.max_rows_per_insert], prepared, on_reject)
        return stored

    def _insert(self, table: str, chunk: list[tuple[str, int, str]],
                prepared: dict[tuple[str, int, str], tuple[list[Any], BaseModel]],
                on_reject: Reject | None) -> int:
        """One insert of ``chunk`` (keys of ``prepared``); with ``on_reject``, a
        non-transient failure is bisected down to the refused rows. Returns rows stored."""
        spec = TABLES[table]
        fq = f"{self.database}.{table}"
        digest = hashlib.blake2b(digest_size=16)
        for rid, version, record in chunk:
            digest.update(f"{rid}\x1f{version}\x1f{record}\x1e".encode())
        token = f"{fq}:{digest.hexdigest()}"
        rows = [prepared[k][0] for k in chunk]
        try:
            self._retry(
                lambda: self._client.insert(
                    fq,
                    rows,
                    column_names=list(spec.columns),
                    settings={"insert_deduplicate": 1, "insert_deduplication_token": token},
                ),
                f"insert {len(rows)} rows into {fq}",
            )
        except SinkError as exc:
            if on_reject is None or exc.transient:
                raise
            if len(chunk) == 1:
                on_reject(prepared[chunk[0]][1], f"not stored in {table}: {exc}")
                return 0
            half = len(chunk) // 2
            return (self._insert(table, chunk[:half], prepared, on_reject)
                    + self._insert(table, chunk[half:], prepared, on_reject))
        return len(chunk)

    # -- reads ---------------------------------------------------------------------------

    def count(self, table: str, *, final: bool = True) -> int:
        """Rows in ``table`` (one of :data:`TABLES`): with ``final`` one per key (the
        guarantee), without it the physical rows not yet merged away."""
        self._check_open()
        if table not in TABLES:
            raise SinkError(f"unknown table {table!r}; one of {', '.join(TABLES)}")
        sql = f"SELECT count() FROM {self.database}.{table}{' FINAL' if final else ''}"
        return int(self._retry(lambda: self._client.command(sql), f"count {table}"))

    def fetch(
        self, table: str, ids: Sequence[str] | None = None, *, final: bool = True
    ) -> list[BaseModel]:
        """Parse the ``record`` column of ``table`` back into models, ordered by id (and
        version); ``ids`` restricts to those ids. With ``final`` (default) one row per id,
        the winning version."""
        self._check_open()
        if table not in TABLES:
            raise SinkError(f"unknown table {table!r}; one of {', '.join(TABLES)}")
        spec = TABLES[table]
        version_col = {"attributions": ", revision", "attribution_revisions": ", revision",
                       "remediations": ", sequence", "remediation_transitions": ", sequence"}.get(table, "")
        sql = f"SELECT record FROM {self.database}.{table}{' FINAL' if final else ''}"
        params: dict[str, Any] = {}
        if ids is not None:
            sql += f" WHERE {spec.id_field} IN {{ids:Array(String)}}"
            params["ids"] = list(ids)
        sql += f" ORDER BY {spec.id_field}{version_col}"
        result = self._retry(
            lambda: self._client.query(sql, parameters=params or None), f"read {table}"
        )
        return [spec.model.model_validate_json(row[0]) for row in result.result_rows]

    def observation_records(
        self,
        *,
        workload_ids: Sequence[str] | None = None,
        cluster: str | None = None,
        hosts: Sequence[str] | None = None,
        start_ns: int | None = None,
        end_ns: int | None = None,
        kinds: Sequence[str] | None = None,
        formats: Sequence[str] | None = None,
        body_any: Sequence[str] | None = None,
        any_of: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[str]:
        """The ``record`` column (an Observation's canonical JSON, not parsed: a caller
        validates each row and reports the ones that fail) of the ``observations`` rows, one
        per id, that match every filter given: ``workload_id`` in ``workload_ids``,
        ``cluster``, ``host`` in ``hosts``, ``start_ns <= observed_at <= end_ns`` (UTC ns,
        both inclusive), ``kind`` in ``kinds``, ``format`` in ``formats``, and, when
        ``any_of`` is given, at least one of its selections (each a mapping of those same
        filters, AND-ed; one query for all of them). An empty sequence matches nothing.
        Ordered by ``observed_at``, then ``observation_id``. Raises :class:`SinkError` when
        the read fails.

        Rows of one id hold one observation (the id is its content hash; copies from
        at-least-once delivery differ at most in the transport position, which readers
        clear): the table is read without FINAL and the first row of each id kept, which
        spares the server merging the sorting key of the whole table on every read.

        ``body_any`` (literals, case-sensitive; the rule pack's ``prefilter_keywords``) pushes
        the replay's prefilter down to the server: a log line without a metric is returned only
        when its body holds one of them (``multiMatchAny`` over the escaped literals, Hyperscan
        inside ClickHouse: one pass whatever their number), every other kind always -- the rows
        :meth:`correlators.pipeline.Pipeline.inert` says the pipeline would skip stay on the
        server. A row without a body (not a valid log line) is returned, so the caller still
        reports it. An empty ``body_any`` keeps no log line with a body."""
        params: dict[str, Any] = {}
        where = _observation_filters(params, "", dict(
            workload_ids=workload_ids, cluster=cluster, hosts=hosts, start_ns=start_ns, end_ns=end_ns,
            kinds=kinds, formats=formats))
        if where is None:
            return []
        if any_of is not None:
            alternatives = []
            for i, selection in enumerate(any_of):
                clause = _observation_filters(params, f"_{i}", selection)
                if clause is not None:
                    alternatives.append("(" + (" AND ".join(clause) or "1") + ")")
            if not alternatives:
                return []
            where.append("(" + " OR ".join(alternatives) + ")")
        if body_any is not None:
            where.append("(kind != 'log_line' OR has_metric OR body = ''"
                         " OR multiMatchAny(body, {body_any:Array(String)}))")
            params["body_any"] = sorted({re.escape(w) for w in body_any if w})
        self._check_open()
        sql = f"SELECT observation_id, record FROM {self.database}.observations"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY observed_at, observation_id"
        result = self._retry(lambda: self._client.query(sql, parameters=params or None), "read observations")
        out, last = [], None
        for oid, record in result.result_rows:
            if oid != last:  # copies of one id are adjacent (same time, same id)
                out.append(record)
                last = oid
        return out

    def attribution_records(
        self,
        *,
        ids: Sequence[str] | None = None,
        scope_ids: Sequence[str] | None = None,
        clusters: Sequence[str] | None = None,
        start_ns: int | None = None,
        end_ns: int | None = None,
    ) -> list[str]:
        """The ``record`` column (an Attribution's canonical JSON, not parsed) of the latest
        revision (FINAL) of every attribution that matches ANY of: its ``attribution_id`` in
        ``ids``; a workload verdict whose ``scope.id`` is in ``scope_ids``; a fabric-port or
        incident verdict of a cluster in ``clusters`` whose window overlaps ``[start_ns,
        end_ns]`` (UTC ns; an open end is unbounded). No filter at all: every attribution.
        Ordered by ``attribution_id``. Raises :class:`SinkError` when the read fails."""
        any_of: list[str] = []
        params: dict[str, Any] = {}
        if ids:
            any_of.append("attribution_id IN {ids:Array(String)}")
            params["ids"] = sorted(set(ids))
        if scope_ids:
            any_of.append("(scope_kind = 'workload' AND scope_id IN {scopes:Array(String)})")
            params["scopes"] = sorted(set(scope_ids))
        if clusters:
            cond = ["scope_kind != 'workload'", "cluster IN {clusters:Array(String)}"]
            params["clusters"] = sorted(set(clusters))
            if end_ns is not None:
                cond.append("window_start <= fromUnixTimestamp64Nano({hi:Int64}, 'UTC')")
                params["hi"] = int(end_ns)
            if start_ns is not None:
                cond.append("window_end >= fromUnixTimestamp64Nano({lo:Int64}, 'UTC')")
                params["lo"] = int(start_ns)
            any_of.append("(" + " AND ".join(cond) + ")")
        if not any_of and (ids is not None or scope_ids is not None or clusters is not None):
            return []
        where = ["(" + " OR ".join(any_of) + ")"] if any_of else []
        return self._records("attributions", where, params, "attribution_id")

    def _records(self, table: str, where: list[str], params: dict[str, Any], order: str) -> list[str]:
        self._check_open()
        sql = f"SELECT record FROM {self.database}.{table} FINAL"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {order}"
        result = self._retry(
            lambda: self._client.query(sql, parameters=params or None), f"read {table}"
        )
        return [row[0] for row in result.result_rows]

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Release the client (for chDB, the engine closes with its last sink). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._chdb_path is not None:
            _release_chdb(self._chdb_path)
        elif self._client is not None:
            self._client.close()

    def __enter__(self) -> "ClickHouseSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"ClickHouseSink({_redact(self.url)!r}, database={self.database!r}, {state})"
