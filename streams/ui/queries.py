"""Read-only queries of the incident explorer over faultstream's ClickHouse tables
(``sinks/ddl.sql``).

:class:`IncidentStore` opens the store and runs a fixed set of ``SELECT`` statements. Every
value that comes from a request (a cluster, an attribution id, a host, a time) reaches
ClickHouse as a typed query parameter (``{name:Type}``, bound by clickhouse-connect); the SQL
text itself is made only of the constants in this module and the database name, an
identifier checked against ``^[A-Za-z_][A-Za-z0-9_]*$`` when the store opens. A filter that is
present adds one of the constant clauses below; nothing of the request is formatted into SQL.

Connections:

* ``chdb://DIR`` (default ``chdb://.state/clickhouse``): the embedded engine, opened through
  :class:`sinks.clickhouse.ClickHouseSink` so that it shares the process-wide engine with any
  sink on the same path (chDB hosts one engine path per process). Opening it creates the
  tables if they are missing (``CREATE ... IF NOT EXISTS``, so an empty directory shows an
  empty explorer); no row is ever written.
* ``http(s)://user:pass@host:port``: a ClickHouse server through clickhouse-connect, with no
  DDL at all (a read-only user is enough).

Records are parsed from the ``record`` column (the full canonical JSON), so every page sees
exactly what was written. Latest state comes from ``FINAL`` (highest ``revision`` per
``attribution_id``, highest ``sequence`` per ``action_id``). Older revisions of a verdict come
from a table ``attribution_revisions`` (one row per ``attribution_id`` and ``revision``, the
counterpart of ``remediation_transitions``) when the database has one; without it they are the
rows of ``attributions`` that ClickHouse has not merged away yet (read without ``FINAL``: a
ReplacingMergeTree merge keeps only the highest revision). Transitions of an action come from
``remediation_transitions``, which keeps every one. Times are int UTC nanoseconds throughout.

Errors: :class:`StoreError` for a bad URL or database name, a store that cannot be opened, and
any failed query (its message names what was being read).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse, urlunparse

from pydantic import ValidationError

from schemas.records import (
    Attribution,
    Certification,
    Event,
    Observation,
    RemediationAction,
)
from streams.ui.views import IncidentCost

__all__ = ["LIST_LIMIT", "IncidentFilter", "IncidentRow", "IncidentStore", "StoreError"]

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Most rows one list query returns.
LIST_LIMIT = 500
#: Most ids passed in one ``IN {ids:Array(String)}`` parameter.
_MAX_IDS = 5_000


class StoreError(RuntimeError):
    """The store could not be opened, or a query failed; the message says which."""


@dataclass(frozen=True)
class IncidentFilter:
    """Filters of the incident list; ``None`` or ``""`` means no filter. ``since_ns`` /
    ``until_ns``: UTC ns, the verdict's window overlaps ``[since_ns, until_ns]``. ``root_cause``
    matches a code or a dotted prefix of one (``gpu.xid`` matches ``gpu.xid.79``)."""

    cluster: str = ""
    domain: str = ""
    root_cause: str = ""
    quality: str = ""
    status: str = ""
    scope_kind: str = ""
    since_ns: int | None = None
    until_ns: int | None = None
    limit: int = 200


@dataclass(frozen=True)
class IncidentRow:
    """One verdict of the list (typed columns of ``attributions``, latest revision). Times are
    UTC ns."""

    attribution_id: str
    revision: int
    scope_kind: str
    scope_id: str
    cluster: str
    domain: str
    root_cause_code: str
    root_cause_text: str
    quality: str
    status: str
    confidence: float
    culprit_hosts: list[str]
    culprit_ranks: list[int]
    culprit_ports: list[str]
    affected_workloads: list[str]
    symptom_count: int
    decided_at: int
    window_start: int
    window_end: int
    incident_id: str | None

    def as_json(self) -> dict[str, Any]:
        """The row as JSON data (what ``/api/incidents`` returns per verdict)."""
        return dict(self.__dict__)


@dataclass
class Facets:
    """The distinct values the list's filters offer: clusters, domains, root cause codes,
    qualities and statuses present in the store."""

    clusters: list[str] = field(default_factory=list)
    domains: list[str] = field(default_factory=list)
    root_causes: list[str] = field(default_factory=list)
    qualities: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)


_LIST_COLUMNS = (
    "attribution_id, revision, scope_kind, scope_id, cluster, domain, root_cause_code, "
    "root_cause_text, quality, status, confidence, culprit_hosts, culprit_ranks, culprit_ports, "
    "affected_workloads, symptom_count, toUnixTimestamp64Nano(decided_at), "
    "toUnixTimestamp64Nano(window_start), toUnixTimestamp64Nano(window_end), incident_id"
)
#: filter name -> the constant clause it adds (its value is the parameter of the same name)
_LIST_CLAUSES = {
    "cluster": "cluster = {cluster:String}",
    "domain": "domain = {domain:String}",
    "root_cause": "(root_cause_code = {root_cause:String} OR startsWith(root_cause_code, concat({root_cause:String}, '.')))",
    "quality": "quality = {quality:String}",
    "status": "status = {status:String}",
    "scope_kind": "scope_kind = {scope_kind:String}",
    "since_ns": "window_end >= fromUnixTimestamp64Nano({since_ns:Int64}, 'UTC')",
    "until_ns": "window_start <= fromUnixTimestamp64Nano({until_ns:Int64}, 'UTC')",
}


def _redact(url: str) -> str:
    try:
        parsed = urlparse(url)
        if parsed.password is None:
            return url
        netloc = f"{parsed.username}:***@{parsed.hostname}" + (f":{parsed.port}" if parsed.port else "")
        return urlunparse(parsed._replace(netloc=netloc))
    except ValueError:
        return "<unparseable URL>"


class IncidentStore:
    """Read-only access to faultstream's tables for the explorer and its JSON endpoint.

    ``url``: ``chdb://DIR``, ``chdb://memory`` or ``http(s)://user:pass@host:port``;
    ``database``: the database the sink writes (``faultstream``). Queries are serialised by a
    lock (the embedded engine and an HTTP session take one query at a time). Use as a context
    manager or call :meth:`close`. ``has_revision_table``: whether the database has an
    ``attribution_revisions`` table (read by :meth:`revisions`). Raises :class:`StoreError`."""

    def __init__(self, url: str, *, database: str = "faultstream", connect_timeout_s: float = 5.0) -> None:
        if not _IDENT_RE.match(database or ""):
            raise StoreError(f"bad database name {database!r}: must match {_IDENT_RE.pattern}")
        self.url = url
        self.database = database
        self._lock = threading.Lock()
        self._sink: Any = None
        if url.startswith("chdb://"):
            from sinks.clickhouse import ClickHouseSink, SinkError, chdb_path

            try:
                path = chdb_path(url)
                if path != ":memory:" and not Path(path).is_dir():
                    raise StoreError(f"no store at {path}: replay a bundle or run a worker with --clickhouse {url} "
                                     "first, or give the store's directory")
                self._sink = ClickHouseSink(url, database=database)
            except SinkError as exc:
                raise StoreError(f"cannot open {url}: {exc}") from exc
            self._client = self._sink.client
        elif url.startswith(("http://", "https://")):
            self._client = self._connect_http(url, connect_timeout_s)
        else:
            raise StoreError(f"unsupported ClickHouse URL {_redact(url)!r}: use chdb://DIR or http(s)://host:8123")
        try:
            self.has_revision_table = bool(self._rows(
                "SELECT count() FROM system.tables WHERE database = {db:String} AND name = 'attribution_revisions'",
                {"db": database}, "the table list")[0][0])
        except StoreError:
            self.close()
            raise

    @staticmethod
    def _connect_http(url: str, connect_timeout_s: float) -> Any:
        import clickhouse_connect

        try:
            parsed = urlparse(url)
            parsed.port  # noqa: B018 -- raises ValueError on a bad port
        except ValueError as exc:
            raise StoreError(f"malformed ClickHouse URL {_redact(url)!r}: {exc}") from exc
        if not parsed.hostname:
            raise StoreError(f"ClickHouse URL {_redact(url)!r} names no host")
        if parsed.path not in ("", "/"):
            raise StoreError(f"ClickHouse URL {_redact(url)!r} has a path; the database is --database")
        dsn = urlunparse(parsed._replace(path="", params="", query="", fragment=""))
        try:
            return clickhouse_connect.get_client(
                dsn=dsn, secure=parsed.scheme == "https", database="default",
                connect_timeout=connect_timeout_s, send_receive_timeout=30,
                autogenerate_session_id=False)
        except Exception as exc:  # clickhouse-connect raises its own OperationalError/DatabaseError
            raise StoreError(f"cannot connect to ClickHouse at {_redact(url)}: {exc}") from exc

    # -- plumbing ----------------------------------------------------------------------------

    def _t(self, table: str) -> str:
        return f"{self.database}.{table}"

    def _rows(self, sql: str, params: dict[str, Any], what: str) -> list[tuple]:
        try:
            with self._lock:
                return [tuple(r) for r in self._client.query(sql, parameters=params or None).result_rows]
        except Exception as exc:
            raise StoreError(f"reading {what}: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}") from exc

    @staticmethod
    def _parse(model: type, raws: Iterable[str]) -> list[Any]:
        out = []
        for raw in raws:
            try:
                out.append(model.model_validate_json(raw))
            except (ValidationError, ValueError):
                continue  # a row of another schema version is left out, never shown half-parsed
        return out

    # -- the incident list -------------------------------------------------------------------

    def incidents(self, flt: IncidentFilter) -> list[IncidentRow]:
        """The latest revision of every verdict that matches ``flt``, newest ``decided_at``
        first (then by id), at most ``min(flt.limit, LIST_LIMIT)``."""
        where: list[str] = []
        params: dict[str, Any] = {}
        for name, clause in _LIST_CLAUSES.items():
            value = getattr(flt, name)
            if value is None or value == "":
                continue
            where.append(clause)
            params[name] = int(value) if name.endswith("_ns") else str(value)
        params["limit"] = max(1, min(int(flt.limit), LIST_LIMIT))
        sql = (f"SELECT {_LIST_COLUMNS} FROM {self._t('attributions')} FINAL"
               + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY decided_at DESC, attribution_id LIMIT {limit:UInt32}")
        rows = self._rows(sql, params, "the incident list")
        return [IncidentRow(r[0], int(r[1]), r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], float(r[10]),
                            list(r[11]), [int(x) for x in r[12]], list(r[13]), list(r[14]), int(r[15]),
                            int(r[16]), int(r[17]), int(r[18]), r[19]) for r in rows]

    def facets(self) -> Facets:
        """The distinct clusters, domains, root cause codes, qualities and statuses of the
        stored verdicts (latest revisions), each sorted."""
        sql = (f"SELECT groupUniqArray(cluster), groupUniqArray(domain), groupUniqArray(root_cause_code), "
               f"groupUniqArray(quality), groupUniqArray(status) FROM {self._t('attributions')} FINAL")
        rows = self._rows(sql, {}, "the filter values")
        if not rows:
            return Facets()
        c, d, r, q, s = (sorted(x for x in col if x) for col in rows[0])
        return Facets(c, d, r, q, s)

    def incident_costs(self, since_ns: int) -> list[IncidentCost]:
        """Every incident with a verdict decided at or after ``since_ns`` (UTC ns), one per
        cluster and ``coalesce(incident_id, attribution_id)``: withdrawn verdicts and verdicts
        without a fault (root cause ``none`` or none at all) left out; its first and last
        ``decided_at`` and the GPU-hours its workload verdicts lost (an incident or
        fabric-port verdict's cost already sums them). Sorted by cluster and key."""
        sql = ("SELECT cluster, coalesce(incident_id, attribution_id) AS incident, "
               "toUnixTimestamp64Nano(min(decided_at)), toUnixTimestamp64Nano(max(decided_at)), "
               "ifNull(sumIf(gpu_hours_lost, scope_kind = 'workload'), 0) "
               f"FROM {self._t('attributions')} FINAL "
               "WHERE status != 'withdrawn' AND root_cause_code NOT IN ('', 'none') "
               "GROUP BY cluster, incident "
               "HAVING max(decided_at) >= fromUnixTimestamp64Nano({since:Int64}, 'UTC') ORDER BY cluster, incident")
        return [IncidentCost(r[0], r[1], int(r[2]), int(r[3]), float(r[4]))
                for r in self._rows(sql, {"since": int(since_ns)}, "the fleet summary")]

    def incidents_with_actions(self, keys: Sequence[str]) -> set[str]:
        """The incident keys (incident ids, or attribution ids of verdicts without one) among
        ``keys`` that any remediation action, in any state, was proposed for."""
        keys = sorted(set(keys))[:_MAX_IDS]
        if not keys:
            return set()
        rows = self._rows(f"SELECT DISTINCT incident_id, attribution_id FROM {self._t('remediations')} "
                          "WHERE incident_id IN {keys:Array(String)} OR attribution_id IN {keys:Array(String)}",
                          {"keys": keys}, "the actions of incidents")
        wanted = set(keys)
        return {k for r in rows for k in r if k in wanted}

    # -- one verdict -------------------------------------------------------------------------

    def attribution(self, attribution_id: str) -> Attribution | None:
        """The latest revision of ``attribution_id``, or None."""
        rows = self._rows(f"SELECT record FROM {self._t('attributions')} FINAL "
                          "WHERE attribution_id = {id:String} LIMIT 1", {"id": attribution_id}, "a verdict")
        found = self._parse(Attribution, (r[0] for r in rows))
        return found[0] if found else None

    def attributions(self, ids: Sequence[str]) -> list[Attribution]:
        """The latest revisions of ``ids`` (those stored), ordered by id."""
        ids = sorted(set(ids))[:_MAX_IDS]
        if not ids:
            return []
        rows = self._rows(f"SELECT record FROM {self._t('attributions')} FINAL "
                          "WHERE attribution_id IN {ids:Array(String)} ORDER BY attribution_id",
                          {"ids": ids}, "verdicts")
        return self._parse(Attribution, (r[0] for r in rows))

    def revisions(self, attribution_id: str) -> list[Attribution]:
        """Every stored revision of ``attribution_id``, one per revision, oldest first: from
        ``attribution_revisions`` when the database has it, else the rows of ``attributions``
        not yet merged away."""
        table = self._t("attribution_revisions" if self.has_revision_table else "attributions")
        rows = self._rows(f"SELECT revision, any(record) FROM {table} "
                          "WHERE attribution_id = {id:String} GROUP BY revision ORDER BY revision",
                          {"id": attribution_id}, "revisions")
        return self._parse(Attribution, (r[1] for r in rows))

    def members_of(self, incident_id: str) -> list[Attribution]:
        """The verdicts (latest revisions) that carry ``incident_id``, workload verdicts first."""
        rows = self._rows(f"SELECT record FROM {self._t('attributions')} FINAL "
                          "WHERE incident_id = {inc:String} ORDER BY scope_kind = 'workload' DESC, attribution_id",
                          {"inc": incident_id}, "an incident's verdicts")
        return self._parse(Attribution, (r[0] for r in rows))

    def events(self, ids: Sequence[str]) -> dict[str, Event]:
        """``event_id -> Event`` of the stored events among ``ids``."""
        ids = sorted(set(ids))[:_MAX_IDS]
        if not ids:
            return {}
        rows = self._rows(f"SELECT record FROM {self._t('events')} FINAL WHERE event_id IN {{ids:Array(String)}}",
                          {"ids": ids}, "events")
        return {e.event_id: e for e in self._parse(Event, (r[0] for r in rows))}

    def observations(self, ids: Sequence[str]) -> dict[str, Observation]:
        """``observation_id -> Observation`` of the stored observations among ``ids``."""
        ids = sorted(set(ids))[:_MAX_IDS]
        if not ids:
            return {}
        rows = self._rows(f"SELECT record FROM {self._t('observations')} FINAL "
                          "WHERE observation_id IN {ids:Array(String)}", {"ids": ids}, "observations")
        return {o.observation_id: o for o in self._parse(Observation, (r[0] for r in rows))}

    # -- remediation ---------------------------------------------------------------------------

    def actions(self, *, states: Sequence[str] | None = None, cluster: str = "",
                attribution_ids: Sequence[str] = (), incident_ids: Sequence[str] = (),
                host: str = "", limit: int = LIST_LIMIT) -> list[RemediationAction]:
        """The latest record of each remediation action (FINAL), newest ``updated_at`` first.
        Filters, all optional: ``states`` (state in), ``cluster``, and -- any of --
        ``attribution_ids`` / ``incident_ids`` (the verdicts it came from) / ``host`` (its
        target host or one of its target hosts)."""
        where: list[str] = []
        params: dict[str, Any] = {"limit": max(1, min(int(limit), LIST_LIMIT))}
        if states:
            where.append("state IN {states:Array(String)}")
            params["states"] = sorted(set(states))
        if cluster:
            where.append("cluster = {cluster:String}")
            params["cluster"] = cluster
        any_of: list[str] = []
        if attribution_ids:
            any_of.append("attribution_id IN {aids:Array(String)}")
            params["aids"] = sorted(set(attribution_ids))[:_MAX_IDS]
        if incident_ids:
            any_of.append("incident_id IN {iids:Array(String)}")
            params["iids"] = sorted(set(incident_ids))[:_MAX_IDS]
        if host:
            any_of.append("(target_host = {host:String} OR has(target_hosts, {host:String}))")
            params["host"] = host
        if any_of:
            where.append("(" + " OR ".join(any_of) + ")")
        sql = (f"SELECT record FROM {self._t('remediations')} FINAL"
               + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY updated_at DESC, action_id LIMIT {limit:UInt32}")
        return self._parse(RemediationAction, (r[0] for r in self._rows(sql, params, "remediation actions")))

    def action(self, action_id: str) -> RemediationAction | None:
        """The latest record of ``action_id``, or None."""
        rows = self._rows(f"SELECT record FROM {self._t('remediations')} FINAL WHERE action_id = {{id:String}} LIMIT 1",
                          {"id": action_id}, "a remediation action")
        found = self._parse(RemediationAction, (r[0] for r in rows))
        return found[0] if found else None

    def transitions(self, action_ids: Sequence[str]) -> dict[str, list[RemediationAction]]:
        """``action_id -> every transition record`` (``remediation_transitions``), by
        ``sequence``."""
        ids = sorted(set(action_ids))[:_MAX_IDS]
        if not ids:
            return {}
        rows = self._rows(f"SELECT record FROM {self._t('remediation_transitions')} FINAL "
                          "WHERE action_id IN {ids:Array(String)} ORDER BY action_id, sequence",
                          {"ids": ids}, "remediation transitions")
        out: dict[str, list[RemediationAction]] = {}
        for r in self._parse(RemediationAction, (row[0] for row in rows)):
            out.setdefault(r.action_id, []).append(r)
        return out

    # -- nodes and fabric ----------------------------------------------------------------------

    def node_verdicts(self, host: str, cluster: str = "", limit: int = LIST_LIMIT) -> list[Attribution]:
        """Verdicts (latest revisions) that name ``host`` as a culprit or an affected host,
        newest first."""
        where = ["(has(culprit_hosts, {host:String}) OR has(affected_hosts, {host:String}))"]
        params: dict[str, Any] = {"host": host, "limit": max(1, min(int(limit), LIST_LIMIT))}
        if cluster:
            where.append("cluster = {cluster:String}")
            params["cluster"] = cluster
        sql = (f"SELECT record FROM {self._t('attributions')} FINAL WHERE " + " AND ".join(where)
               + " ORDER BY decided_at DESC, attribution_id LIMIT {limit:UInt32}")
        return self._parse(Attribution, (r[0] for r in self._rows(sql, params, "a node's verdicts")))

    def node_event_counts(self, host: str, cluster: str = "") -> list[tuple[str, int, int, int]]:
        """``(event type, count, first, last)`` of the events logged on ``host`` (first/last:
        UTC ns), most frequent first."""
        where = ["host = {host:String}"]
        params: dict[str, Any] = {"host": host}
        if cluster:
            where.append("cluster = {cluster:String}")
            params["cluster"] = cluster
        sql = (f"SELECT type, count(), toUnixTimestamp64Nano(min(at)), toUnixTimestamp64Nano(max(at)) "
               f"FROM {self._t('events')} FINAL WHERE " + " AND ".join(where)
               + " GROUP BY type ORDER BY count() DESC, type LIMIT 200")
        return [(r[0], int(r[1]), int(r[2]), int(r[3])) for r in self._rows(sql, params, "a node's events")]

    def certifications(self, host: str, cluster: str = "") -> list[Certification]:
        """Certification results of ``host``, newest ``finished_at`` first."""
        where = ["host = {host:String}"]
        params: dict[str, Any] = {"host": host}
        if cluster:
            where.append("cluster = {cluster:String}")
            params["cluster"] = cluster
        sql = (f"SELECT record FROM {self._t('certifications')} FINAL WHERE " + " AND ".join(where)
               + " ORDER BY finished_at DESC, certification_id LIMIT 200")
        return self._parse(Certification, (r[0] for r in self._rows(sql, params, "certifications")))

    def fabric_verdicts(self, cluster: str = "", since_ns: int | None = None, until_ns: int | None = None,
                        limit: int = LIST_LIMIT) -> list[Attribution]:
        """Fabric-port verdicts and fabric-domain incident verdicts (latest revisions) whose
        window overlaps ``[since_ns, until_ns]`` (UTC ns; open ends unbounded), newest
        first."""
        where = ["(scope_kind = 'fabric_port' OR (scope_kind = 'incident' AND domain = 'fabric'))"]
        params: dict[str, Any] = {"limit": max(1, min(int(limit), LIST_LIMIT))}
        if cluster:
            where.append(_LIST_CLAUSES["cluster"])
            params["cluster"] = cluster
        if since_ns is not None:
            where.append(_LIST_CLAUSES["since_ns"])
            params["since_ns"] = int(since_ns)
        if until_ns is not None:
            where.append(_LIST_CLAUSES["until_ns"])
            params["until_ns"] = int(until_ns)
        sql = (f"SELECT record FROM {self._t('attributions')} FINAL WHERE " + " AND ".join(where)
               + " ORDER BY decided_at DESC, attribution_id LIMIT {limit:UInt32}")
        return self._parse(Attribution, (r[0] for r in self._rows(sql, params, "fabric verdicts")))

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Release the connection (the embedded engine closes with its last user). Idempotent."""
        if self._sink is not None:
            self._sink.close()
            self._sink = None
        elif self._client is not None:
            self._client.close()
        self._client = None

    def __enter__(self) -> IncidentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
