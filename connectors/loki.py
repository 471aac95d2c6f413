"""Loki connector: LogQL range queries -> ``log_line`` Observations, with a persisted cursor.

``LokiConnector(url, query, cursor=CursorStore(...))`` pages through Loki's
``GET /loki/api/v1/query_range`` (``direction=forward``, ``limit`` entries a page, ``start``
inclusive and ``end`` exclusive, both UTC nanoseconds: Grafana Loki HTTP API reference,
"Query logs within a range of time"). A response is ``{"status": "success", "data":
{"resultType": "streams", "result": [{"stream": {labels}, "values": [["<ns>", "<line>"
(, {structured metadata})], ...]}, ...], "stats": {...}}}``; a metric query (``resultType``
``matrix``) is refused.

**Paging without loss or duplicates.** Loki returns the ``limit`` earliest entries at or after
``start`` over all streams. The position is ``(start_ns, seen)``: the next query start and the
keys of the entries *at exactly* ``start_ns`` already emitted (an entry's key is a hash of its
stream's labels and its line; Loki itself drops a second entry with the same stream, time and
line). A full page moves ``start_ns`` to its last entry's time and remembers the entries at that
time, so the next page (which returns them again, ``start`` being inclusive) emits only the new
ones; a page with fewer entries than ``limit`` ends the window and the next query starts at its
``end``. A full page whose entries all share ``start_ns`` is asked again with a doubled limit
(up to ``max_limit``, Loki's ``max_entries_limit_per_query`` defaults to 5000). The window ends
``lag_s`` seconds before now (entries Loki ingests later than that, with older times, are not
read), or at ``until_ns``. The cursor document is ``{"query", "start_ns", "seen"}``; a cursor
saved for another query is refused (:class:`LokiError`) rather than guessed at.

**Lines -> Observations.** Each entry is one record whose text is the line, timed like the
files connector times a line (:class:`connectors.timefmt.LineClock` per stream, fed in time
order): a line that states its time gets it (``time_source="line"``, the format's quality and
name); a line without one gets Loki's entry time (``"transport"``,
``TIME_QUALITY_TRANSPORT``, format ``unknown``). Year-less formats take the year nearest the
entry's Loki time. Bodies are cut at :data:`connectors.bundle.MAX_BODY_CHARS`, NUL is shown as
U+2400, a ``[rankN]:`` prefix sets ``rank`` -- as the files connector does. Entries are not
joined into multi-line records (Loki holds what the shipper sent as one entry; its multiline
stage joins tracebacks).

Labels: ``host`` is the first of :attr:`LabelMap.host` present in the stream's labels (no such
label: ``_unknown``, noted in the coverage); ``pod``, ``container`` and ``namespace`` the first of
their label lists, kept in ``attributes``; ``attributes.labels`` holds all stream labels,
``attributes.loki_ts`` the entry's Loki time (UTC ns), ``attributes.loki_metadata`` its
structured metadata when Loki sent some. ``position.file`` is the stream's ``filename`` label
(promtail, Alloy) when present.

**HTTP.** httpx, with ``X-Scope-OrgID`` for a tenant and a bearer token when given. HTTP 429,
500, 502, 503, 504 and transport errors (refused connection, timeout) are retried with
exponential back-off (tenacity, ``attempts`` tries); other statuses raise at once: HTTP 400 as
:class:`LokiQueryError` carrying Loki's plain-text error (``parse error at line 1, col 7: ...``).

Delivery: a :class:`connectors.source.Source` (poll, checkpoint, coverage) and
:class:`connectors.source.Rewindable`; :func:`connectors.runner.run` saves the checkpoint
only after the producer's flush.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generator, TYPE_CHECKING, Annotated, Any

import httpx
import typer
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from connectors.command import Shared, connector
from connectors.bundle import NUL_MARK, cut_body, rank_of_prefix
from connectors.timefmt import LineClock, TimeContext
from schemas.records import (
    TIME_QUALITY_TRANSPORT,
    CoverageEntry,
    Observation,
    Position,
    Source,
)
from schemas.utc import parse_utc

if TYPE_CHECKING:  # pragma: no cover
    from connectors.cursor import CursorStore

__all__ = ["QUERY_RANGE_PATH", "LabelMap", "LokiConnector", "LokiError", "LokiQueryError", "entry_key"]

log = logging.getLogger("faultstream.connector.loki")

QUERY_RANGE_PATH = "/loki/api/v1/query_range"
#: Statuses retried (Loki's query scheduler answers 429 when too many queries queue; 5xx from
#: a restarting querier or gateway).
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
#: Characters of Loki's error text kept in an exception message.
ERROR_EXCERPT = 500


class LokiError(Exception):
    """Loki could not be queried (unreachable after the retries, an unexpected status, a
    response that is not a streams result, a cursor of another query). The message names the
    URL and the reason."""


class LokiQueryError(LokiError):
    """HTTP 400 from Loki: the query (or its parameters) is wrong. ``detail`` is Loki's
    plain-text error message."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


class _Retryable(LokiError):
    """A status or transport error worth another try."""


@dataclass(frozen=True)
class LabelMap:
    """Which stream labels name the host, pod, container and namespace: for each, the label
    names tried in order (the first present wins)."""

    host: tuple[str, ...] = ("host", "hostname", "node", "node_name", "nodename", "kubernetes_node_name")
    pod: tuple[str, ...] = ("pod", "pod_name", "kubernetes_pod_name")
    container: tuple[str, ...] = ("container", "container_name", "kubernetes_container_name")
    namespace: tuple[str, ...] = ("namespace", "kubernetes_namespace")

    @staticmethod
    def first(labels: dict[str, str], names: Sequence[str]) -> str | None:
        """The value of the first of ``names`` present (and non-empty) in ``labels``."""
        for name in names:
            value = labels.get(name)
            if value:
                return value
        return None


def stream_key(labels: dict[str, str]) -> str:
    """A stream's identity: its labels in LogQL selector form, sorted (``{a="1", b="2"}``)."""
    return "{" + ", ".join(f'{k}="{labels[k]}"' for k in sorted(labels)) + "}"


def entry_key(labels: dict[str, str], line: str) -> str:
    """The key of an entry among those at one timestamp: 16 hex of BLAKE2b over the stream's
    labels and the line (Loki keeps one entry per stream, time and line)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(stream_key(labels).encode("utf-8", "surrogatepass"))
    h.update(b"\n")
    h.update(line.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


@dataclass
class _Position:
    start_ns: int
    seen: frozenset[str] = frozenset()

    def doc(self, query: str) -> dict[str, Any]:
        return {"query": query, "start_ns": self.start_ns, "seen": sorted(self.seen)}


@dataclass
class _Entry:
    ts: int
    line: str
    labels: dict[str, str]
    skey: str
    metadata: dict[str, Any] | None = None


@dataclass
class _Stats:
    pages: int = 0
    entries: int = 0  # entries returned by Loki (re-returned boundary entries included)
    records: int = 0  # Observations emitted
    unparsed: int = 0
    retries: int = 0
    unknown_host_streams: set[str] = field(default_factory=set)
    streams: set[str] = field(default_factory=set)


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_EXCERPT else text[:ERROR_EXCERPT] + "..."


class LokiConnector:
    """Reads the entries of a LogQL log query from Loki, page by page (see the module docstring).

    ``url``: Loki's base URL (``http://loki-gateway:3100``; the API path is appended).
    ``query``: a LogQL log query (``{namespace="training"} |= "NVRM"``). ``cursor``: where the
    position is loaded from (saving is the runner's job). ``labels``: :class:`LabelMap`.
    ``cluster``, ``workload_id``: copied into every Observation. ``limit``: entries a page
    (Loki's ``limit``); ``max_limit``: the largest limit asked for when one timestamp holds
    more than a page. ``lag_s``: the window ends this many seconds before now. ``since_s``:
    without a cursor, start this many seconds before now; ``start_ns`` (UTC ns) overrides it.
    ``until_ns``: end of the window (UTC ns, exclusive) for a bounded read; None follows now.
    ``tenant``: ``X-Scope-OrgID``; ``token``: bearer token. ``timeout_s``: one request's
    timeout (seconds). ``attempts`` / ``wait_s`` / ``max_wait_s``: tries of a retried request
    and the exponential wait between them (seconds). ``year`` / ``tz``: for line times without
    a year or zone (default: the year nearest each entry's Loki time, UTC). ``transport``:
    an httpx transport (tests). ``sleep``: the wait between retries (tests); ``clock``: now
    in UTC ns (tests).

    Raises :class:`LokiError` for a cursor saved for another query, ``CursorError`` (from the
    store) for a corrupt cursor file."""

    def __init__(
        self,
        url: str,
        query: str,
        *,
        cursor: CursorStore | None,
        labels: LabelMap = LabelMap(),
        cluster: str = "",
        workload_id: str | None = None,
        limit: int = 1000,
        max_limit: int = 5000,
        lag_s: float = 30.0,
        since_s: float = 3600.0,
        start_ns: int | None = None,
        until_ns: int | None = None,
        tenant: str | None = None,
        token: str | None = None,
        timeout_s: float = 30.0,
        attempts: int = 5,
        wait_s: float = 0.5,
        max_wait_s: float = 10.0,
        year: int | None = None,
        tz: str = "UTC",
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        if limit < 1 or max_limit < limit:
            raise ValueError(f"limit {limit} must be >= 1 and <= max_limit {max_limit}")
        self.url = url.rstrip("/")
        self.query = query
        self.cursor = cursor
        self.labels = labels
        self.cluster = cluster
        self.workload_id = workload_id
        self.limit = limit
        self.max_limit = max_limit
        self.lag_ns = int(lag_s * 1e9)
        self.until_ns = until_ns
        self.year = year
        self.tz = tz
        self.attempts = attempts
        self.wait_s = wait_s
        self.max_wait_s = max_wait_s
        self._sleep = sleep
        self._clock = clock
        headers = {"Accept": "application/json"}
        if tenant:
            headers["X-Scope-OrgID"] = tenant
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, transport=transport)
        saved = cursor.load() if cursor is not None else {}
        if saved:
            if saved.get("query") != query:
                raise LokiError(f"cursor {getattr(cursor, 'path', '')} was saved for the query "
                                f"{saved.get('query')!r}, not {query!r}: use another --cursor file")
            try:
                pos = _Position(int(saved["start_ns"]), frozenset(str(k) for k in saved.get("seen") or ()))
            except (KeyError, TypeError, ValueError) as exc:
                raise LokiError(f"cursor {getattr(cursor, 'path', '')}: unusable position ({exc}); "
                                "remove the file to start from --since") from None
        else:
            pos = _Position(start_ns if start_ns is not None else clock() - int(since_s * 1e9))
        self._pos = pos  # where the next poll starts
        self._saved = _Position(pos.start_ns, pos.seen)  # the last checkpoint (or the start)
        self._more = False
        self._clocks: dict[str, LineClock] = {}
        self.stats = _Stats()
        self.rewinds = 0

    # -- Source ---------------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        """True when the last poll returned a full page: more entries wait in the window."""
        return self._more

    def poll(self) -> list[Observation]:
        """One page: the entries after the position, in time order, as Observations. Raises
        :class:`LokiError` / :class:`LokiQueryError` when Loki fails (the position does not
        move)."""
        end = self.until_ns if self.until_ns is not None else self._clock() - self.lag_ns
        pos = self._pos
        self._more = False
        if end <= pos.start_ns:
            return []
        limit = self.limit
        while True:
            entries = self._page(pos.start_ns, end, limit)
            full = len(entries) >= limit
            if full and entries[-1].ts == pos.start_ns and limit < self.max_limit:
                limit = min(limit * 2, self.max_limit)  # one timestamp holds more than a page
                continue
            break
        if full and entries[-1].ts == pos.start_ns:
            raise LokiError(f"Loki at {self.url}: more than {limit} entries at {pos.start_ns} ns: the query "
                            "cannot be paged without loss; narrow it or raise --max-limit")
        new = [e for e in entries if not (e.ts == pos.start_ns and entry_key(e.labels, e.line) in pos.seen)]
        out = [self._observation(e) for e in new]
        if full:
            last = entries[-1].ts
            at_last = {entry_key(e.labels, e.line) for e in entries if e.ts == last}
            self._pos = _Position(last, frozenset(at_last | (pos.seen if last == pos.start_ns else frozenset())))
            self._more = True
        else:
            self._pos = _Position(end)
        return out

    def checkpoint(self) -> dict[str, Any]:
        """``{"query", "start_ns", "seen"}`` after the last poll: save it once its records are
        delivered."""
        self._saved = _Position(self._pos.start_ns, self._pos.seen)
        return self._pos.doc(self.query)

    def rewind(self) -> None:
        """Return to the last checkpoint (or the start position): the next poll asks for the
        same page again and returns the same observations (same ids)."""
        self._pos = _Position(self._saved.start_ns, self._saved.seen)
        self._more = False
        self._clocks.clear()
        self.rewinds += 1

    def coverage(self) -> list[CoverageEntry]:
        """One entry for the query: ``source="loki:<url> <query>"``, records and unparsed counts,
        streams, pages and retries in the detail."""
        s = self.stats
        notes = [f"{len(s.streams)} streams, {s.pages} pages, {s.entries} entries returned, {s.retries} retries"]
        if s.unknown_host_streams:
            notes.append(f"{len(s.unknown_host_streams)} streams without a host label "
                         f"({', '.join(self.labels.host)}): host '_unknown'")
        return [CoverageEntry(source=f"loki:{self.url} {self.query}",
                              status="present" if s.records else "empty",
                              records=s.records, unparsed=s.unparsed, detail="; ".join(notes))]

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()

    # -- HTTP -----------------------------------------------------------------------------

    def _get(self, params: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = self._client.get(QUERY_RANGE_PATH, params=params)
        except httpx.TransportError as exc:  # refused, reset, timed out
            raise _Retryable(f"Loki at {self.url}: {type(exc).__name__}: {exc}") from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise LokiError(f"Loki at {self.url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code in RETRY_STATUS:
            raise _Retryable(f"Loki at {self.url}: HTTP {resp.status_code}: {_excerpt(resp.text)}")
        if resp.status_code == 400:
            detail = resp.text.strip()
            raise LokiQueryError(f"Loki at {self.url} refused the query {self.query!r}: HTTP 400: "
                                 f"{_excerpt(detail)}", detail)
        if not resp.is_success:
            raise LokiError(f"Loki at {self.url}: HTTP {resp.status_code}: {_excerpt(resp.text)}")
        try:
            data = resp.json()
        except ValueError as exc:
            raise LokiError(f"Loki at {self.url}: response is not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("status") != "success":
            raise LokiError(f"Loki at {self.url}: status {data.get('status') if isinstance(data, dict) else data!r}")
        body = data.get("data")
        if not isinstance(body, dict) or body.get("resultType") != "streams":
            kind = body.get("resultType") if isinstance(body, dict) else None
            raise LokiError(f"Loki at {self.url}: the query returns {kind!r}, not log streams: give a log "
                            "query (a stream selector and filters, no metric aggregation)")
        return body

    def _page(self, start: int, end: int, limit: int) -> list[_Entry]:
        params = {"query": self.query, "start": str(start), "end": str(end), "limit": str(limit),
                  "direction": "forward"}

        def count(state: Any) -> None:
            self.stats.retries += 1
            log.warning("Loki request failed, retrying: %s", state.outcome.exception())

        retrying = Retrying(retry=retry_if_exception(lambda e: isinstance(e, _Retryable)),
                            stop=stop_after_attempt(self.attempts),
                            wait=wait_exponential(multiplier=self.wait_s, max=self.max_wait_s),
                            sleep=self._sleep, before_sleep=count, reraise=True)
        try:
            body = retrying(self._get, params)
        except _Retryable as exc:
            raise LokiError(f"{exc} (after {self.attempts} attempts)") from None
        self.stats.pages += 1
        entries: list[_Entry] = []
        for stream in body.get("result") or []:
            labels = {str(k): str(v) for k, v in (stream.get("stream") or {}).items()}
            skey = stream_key(labels)
            self.stats.streams.add(skey)
            for value in stream.get("values") or []:
                try:
                    ts = int(value[0])
                    line = str(value[1])
                except (IndexError, TypeError, ValueError):
                    raise LokiError(f"Loki at {self.url}: malformed entry {str(value)[:200]!r} in stream {skey}") from None
                meta = value[2] if len(value) > 2 and isinstance(value[2], dict) else None
                entries.append(_Entry(ts, line, labels, skey, meta))
        # Loki merges the streams in time order; the streams themselves are listed in any order
        entries.sort(key=lambda e: (e.ts, e.skey))
        self.stats.entries += len(entries)
        return entries

    # -- records --------------------------------------------------------------------------

    def _observation(self, e: _Entry) -> Observation:
        labels = self.labels
        host = labels.first(e.labels, labels.host)
        if host is None:
            host = "_unknown"
            self.stats.unknown_host_streams.add(e.skey)
        text = e.line.rstrip("\r\n")
        if "\x00" in text:
            text = text.replace("\x00", NUL_MARK)
        clock = self._clocks.get(e.skey)
        if clock is None:
            year = self.year or time.gmtime(e.ts / 1e9).tm_year
            clock = self._clocks[e.skey] = LineClock(
                TimeContext(year=year, tz=self.tz, ref_ns=None if self.year else e.ts))
        first = text.split("\n", 1)[0]
        lt = clock(first[:512])
        if lt is not None:
            at, source, quality, fmt = lt.at_ns, "line", lt.quality, lt.format
        else:
            at, source, quality, fmt = e.ts, "transport", TIME_QUALITY_TRANSPORT, "unknown"
            self.stats.unparsed += 1
        attributes: dict[str, Any] = {"loki_ts": e.ts, "labels": dict(e.labels)}
        for name, names in (("pod", labels.pod), ("container", labels.container), ("namespace", labels.namespace)):
            value = labels.first(e.labels, names)
            if value is not None:
                attributes[name] = value
        if e.metadata:
            attributes["loki_metadata"] = e.metadata
        text = cut_body(text, attributes)
        rank = rank_of_prefix(first)
        self.stats.records += 1
        return Observation(
            source=Source(connector="loki", instance=host),
            kind="log_line",
            observed_at=at,
            time_source=source,
            time_quality=quality,
            host=host,
            cluster=self.cluster,
            workload_id=self.workload_id,
            rank=rank,
            format=fmt,
            body=text,
            attributes=attributes,
            position=Position(file=e.labels.get("filename") or None),
        ).with_id()


# -- CLI ------------------------------------------------------------------------------------

_NS_DIGITS = re.compile(r"^\d{10,19}$")


def _time_ns(text: str) -> int:
    """``--start`` / ``--until``: UTC ns since the epoch, or RFC 3339 text (:func:`schemas.utc.parse_utc`)."""
    return int(text) if _NS_DIGITS.match(text) else parse_utc(text)


@connector(interval=10.0, cursor=".state/cursors/loki.json", errors=(LokiError,), first_pass_strict=True)
def connect_loki_cli(
    opts: Shared,
    url: Annotated[str, typer.Argument(help="Loki base URL, e.g. http://loki-gateway:3100")],
    query: Annotated[str, typer.Argument(help='LogQL log query, e.g. \'{namespace="training"} |= "NVRM"\'')],
    host_label: Annotated[list[str] | None, typer.Option("--host-label", help="stream label naming the host; repeat to try several in order (default: host, hostname, node, node_name, nodename, kubernetes_node_name)")] = None,
    pod_label: Annotated[list[str] | None, typer.Option("--pod-label", help="stream label naming the pod (repeatable)")] = None,
    container_label: Annotated[list[str] | None, typer.Option("--container-label", help="stream label naming the container (repeatable)")] = None,
    namespace_label: Annotated[list[str] | None, typer.Option("--namespace-label", help="stream label naming the namespace (repeatable)")] = None,
    since: Annotated[float, typer.Option("--since-s", min=0.0, help="without a cursor: start this many seconds ago")] = 3600.0,
    start: Annotated[str | None, typer.Option(help="without a cursor: start here (UTC ns or RFC 3339), instead of --since-s")] = None,
    until: Annotated[str | None, typer.Option(help="stop at this time (UTC ns or RFC 3339, exclusive) instead of following now")] = None,
    lag_s: Annotated[float, typer.Option("--lag-s", min=0.0, help="read up to this many seconds before now (entries ingested later are missed)")] = 30.0,
    limit: Annotated[int, typer.Option(min=1, help="entries a page (Loki's limit)")] = 1000,
    max_limit: Annotated[int, typer.Option("--max-limit", min=1, help="largest page asked for when one timestamp holds more entries than --limit")] = 5000,
    tenant: Annotated[str | None, typer.Option(help="tenant (X-Scope-OrgID header)")] = None,
    token_file: Annotated[Path | None, typer.Option("--token-file", help="file holding a bearer token for Loki")] = None,
    cluster: Annotated[str, typer.Option(help="cluster name")] = "",
    workload: Annotated[str | None, typer.Option(help="workload id to attach")] = None,
) -> Generator[LokiConnector, Any, None]:
    """Publish the lines of a LogQL query to Kafka (key = host) from the saved cursor; --follow keeps querying.

    Pages through /loki/api/v1/query_range (direction=forward) with a nanosecond cursor that neither repeats nor skips an entry across pages and restarts. Stream labels give the host (and pod, container, namespace); each line becomes the log_line Observation the files connector makes for it. HTTP 429/5xx and connection errors are retried with back-off; a rejected query (HTTP 400) or any error of the first pass exits 2 with one line on stderr, with --follow too. With --follow, later failures are logged and retried from the saved cursor; with --until it stops there."""
    defaults = LabelMap()
    labels = LabelMap(host=tuple(host_label or defaults.host), pod=tuple(pod_label or defaults.pod),
                      container=tuple(container_label or defaults.container),
                      namespace=tuple(namespace_label or defaults.namespace))
    start_ns = _time_ns(start) if start else None
    until_ns = _time_ns(until) if until else None
    if until_ns is not None:
        opts.follow = False
    token = token_file.read_text(encoding="utf-8").strip() if token_file else None
    conn = LokiConnector(url, query, cursor=opts.cursor_store(), labels=labels, cluster=cluster,
                         workload_id=workload, limit=limit, max_limit=max(limit, max_limit), lag_s=lag_s,
                         since_s=since, start_ns=start_ns, until_ns=until_ns, tenant=tenant, token=token)
    done = yield conn
    typer.echo(f"published {done.sent} records from Loki {url} to {opts.topic}", err=True)
