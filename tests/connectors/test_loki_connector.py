"""The Loki connector (``connectors/loki.py``) against recorded Loki API responses.

No Loki server can be installed here, so the responses under ``tests/data/loki/`` are written in
Loki's exact ``query_range`` JSON form (``status``, ``data.resultType = "streams"``,
``result[].stream`` / ``result[].values = [["<ns>", "<line>"]]``, ``stats``), and the plain-text
error bodies Loki writes (``pkg/util/server/error.go`` WriteError). A real HTTP server on
loopback serves them by the request's ``start`` and ``limit``; every request the connector makes
is checked against ``pages.json`` (query, end, direction), so the paging protocol itself is
tested: two pages that end inside a timestamp, one timestamp holding more entries than a page
(the limit is doubled), a restart from the saved cursor between pages."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from connectors.cursor import CursorStore
from connectors.loki import LokiConnector, LokiError, LokiQueryError, entry_key
from connectors.runner import run
from correlators.rules import load_rule_pack
from schemas.records import TIME_QUALITY_SECONDS, TIME_QUALITY_TRANSPORT
from tests.kafka_fixtures import kafka_bootstrap  # noqa: F401

DATA = Path(__file__).resolve().parents[1] / "data" / "loki"
MANIFEST = json.loads((DATA / "pages.json").read_text())
QUERY = MANIFEST["query"]
START, END = int(MANIFEST["start"]), int(MANIFEST["end"])
T1 = 1_796_001_664_100_000_000  # 2026-11-30T01:21:04.1Z, three entries of two streams
T5 = 1_796_001_671_000_000_000


class Loki:
    """A loopback HTTP server answering ``/loki/api/v1/query_range`` from recorded files.

    ``script``: list of (status, body file) answered in order before the manifest applies
    (scripted failures). Requests are recorded in ``requests`` (their query parameters)."""

    def __init__(self, script: list[tuple[int, str]] | None = None) -> None:
        self.script = list(script or [])
        self.requests: list[dict[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                params = {k: v[0] for k, v in parse_qs(url.query).items()}
                owner.requests.append(params)
                status, body, ctype = owner.answer(url.path, params)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, path: str, params: dict[str, str]) -> tuple[int, str, str]:
        if path != "/loki/api/v1/query_range":
            return 404, "404 page not found\n", "text/plain; charset=utf-8"
        if self.script:
            status, name = self.script.pop(0)
            ctype = "application/json" if name.endswith(".json") else "text/plain; charset=utf-8"
            return status, (DATA / name).read_text(), ctype
        for req in MANIFEST["requests"]:
            if (params.get("start"), params.get("limit")) == (req["start"], req["limit"]):
                return 200, (DATA / req["file"]).read_text(), "application/json"
        return 500, f"test server: no recorded response for {params}", "text/plain; charset=utf-8"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def loki():
    server = Loki()
    yield server
    server.close()


def connector(url: str, cursor: CursorStore | None, **kw) -> LokiConnector:
    kw.setdefault("limit", 2)
    return LokiConnector(url, QUERY, cursor=cursor, start_ns=START, until_ns=END, cluster="c1",
                         sleep=lambda s: None, **kw)


class Producer:
    """A RecordProducer stand-in: records what was flushed."""

    def __init__(self) -> None:
        self.queued: list = []
        self.flushed: list = []

    def send(self, key, record, *, topic=None) -> None:
        self.queued.append((key, record))

    def flush(self, timeout: float = 60.0) -> int:
        self.flushed += self.queued
        self.queued = []
        return 0


def test_pages_give_every_entry_once_with_the_files_connectors_fields(loki, tmp_path):
    cursor = CursorStore(tmp_path / "loki.json")
    conn = connector(loki.url, cursor)
    producer = Producer()
    assert run(conn, producer, cursor=cursor) == 5
    conn.close()
    # the protocol: forward paging, start moving to the last entry's time, the limit doubled
    # once when one timestamp holds a whole page
    assert [(r["start"], r["limit"]) for r in loki.requests] == [
        (r["start"], r["limit"]) for r in MANIFEST["requests"]]
    assert all(r["query"] == QUERY and r["end"] == str(END) and r["direction"] == "forward" for r in loki.requests)

    got = [rec for _, rec in producer.flushed]
    # time order; entries of one nanosecond by stream (labels), then as Loki listed them
    assert [o.body.split("] ", 1)[-1][:40] for o in got] == [
        "[Rank 1] Watchdog caught collective oper",
        "NVRM: GPU at PCI:0000:00:06: GPU-0000000",
        "NVRM: Xid (PCI:0000:00:06): 31, pid=647,",
        "NVRM: Xid (PCI:0000:00:06): 43, pid=671,",
        "rank 1 simulating hard failure at step 3",
    ]
    assert len({o.observation_id for o in got}) == 5
    assert [k for k, _ in producer.flushed] == ["node-a02", "node-a01", "node-a01", "node-a01", "node-a02"]
    xid31 = got[2]
    assert (xid31.kind, xid31.host, xid31.cluster, xid31.format) == ("log_line", "node-a01", "c1", "dmesg_T")
    assert xid31.observed_at == 1_796_001_664_000_000_000  # the line's own second, not Loki's time
    assert (xid31.time_source, xid31.time_quality) == ("line", TIME_QUALITY_SECONDS)
    assert xid31.source.connector == "loki" and xid31.position.file == "/var/log/dmesg"
    assert xid31.attributes["loki_ts"] == T1 and xid31.attributes["labels"]["job"] == "dmesg"
    watchdog = got[0]
    assert watchdog.rank == 1 and watchdog.format == "glog"
    assert watchdog.observed_at == 1_796_001_664_099_123_456  # glog without a year: 2026 from Loki's time
    assert {k: watchdog.attributes[k] for k in ("pod", "container", "namespace")} == {
        "pod": "llama-7b-worker-1", "container": "pytorch", "namespace": "training"}
    untimed = got[4]
    assert (untimed.observed_at, untimed.time_source, untimed.time_quality, untimed.format) == (
        T5, "transport", TIME_QUALITY_TRANSPORT, "unknown")
    # the rule pack reads them as it reads the same lines from a file
    events = [e for o in got for e in load_rule_pack().extract(o)]
    xids = [(e.host, e.attributes["xid"], e.gpu.pci_bus_id) for e in events if e.type == "gpu.xid"]
    assert xids == [("node-a01", 31, "0000:00:06"), ("node-a01", 43, "0000:00:06")]
    assert any(e.type == "nccl.watchdog_timeout" and e.rank == 1 and e.host == "node-a02" for e in events)

    saved = cursor.load()
    assert saved == {"query": QUERY, "start_ns": END, "seen": []}
    cov = conn.coverage()[0]
    assert (cov.status, cov.records, cov.unparsed) == ("present", 5, 1)
    assert "2 streams, 5 pages" in cov.detail


def test_restart_between_pages_loses_and_repeats_nothing(loki, tmp_path):
    cursor = CursorStore(tmp_path / "loki.json")
    first = connector(loki.url, cursor)
    page = first.poll()
    assert [o.attributes["loki_ts"] for o in page] == [T1, T1] and first.pending
    cursor.save(first.checkpoint())  # delivered
    first.close()
    saved = cursor.load()
    assert saved["start_ns"] == T1 and len(saved["seen"]) == 2
    again = connector(loki.url, cursor)
    producer = Producer()
    run(again, producer, cursor=cursor)
    again.close()
    ids = [o.observation_id for o in page] + [o.observation_id for _, o in producer.flushed]
    assert len(ids) == len(set(ids)) == 5
    # the fresh run's requests resume at T1 with the two entries at T1 remembered
    assert (loki.requests[1]["start"], loki.requests[1]["limit"]) == (str(T1), "2")


def test_rewind_after_a_failed_delivery_gives_the_same_ids(loki, tmp_path):
    cursor = CursorStore(tmp_path / "loki.json")
    conn = connector(loki.url, cursor)
    before = [o.observation_id for o in conn.poll()]
    conn.rewind()
    assert [o.observation_id for o in conn.poll()] == before
    conn.close()


def test_cursor_of_another_query_is_refused(loki, tmp_path):
    cursor = CursorStore(tmp_path / "loki.json")
    cursor.save({"query": '{job="other"}', "start_ns": START, "seen": []})
    with pytest.raises(LokiError, match="saved for the query"):
        connector(loki.url, cursor)


def test_http_400_is_a_query_error_with_lokis_text(tmp_path):
    server = Loki(script=[(400, "error-400.txt")])
    try:
        conn = connector(server.url, None)
        with pytest.raises(LokiQueryError) as info:
            conn.poll()
        conn.close()
    finally:
        server.close()
    assert info.value.detail == (DATA / "error-400.txt").read_text()
    assert "HTTP 400" in str(info.value) and "parse error at line 1, col 22" in str(info.value)
    assert len(server.requests) == 1  # a rejected query is not retried


def test_429_and_503_are_retried_with_backoff(tmp_path):
    waits: list[float] = []
    server = Loki(script=[(429, "error-429.txt"), (503, "error-503.txt")])
    try:
        conn = LokiConnector(server.url, QUERY, cursor=None, start_ns=START, until_ns=END, limit=2,
                             sleep=waits.append, wait_s=0.5)
        page = conn.poll()
        conn.close()
    finally:
        server.close()
    assert len(page) == 2 and conn.stats.retries == 2
    assert waits == [0.5, 1.0]  # exponential back-off (tenacity)
    assert [r["start"] for r in server.requests] == [str(START)] * 3


def test_loki_unavailable_after_the_attempts(tmp_path):
    server = Loki(script=[(503, "error-503.txt")] * 3)
    try:
        conn = connector(server.url, None, attempts=3)
        with pytest.raises(LokiError, match=r"HTTP 503: no healthy upstream \(after 3 attempts\)"):
            conn.poll()
        conn.close()
    finally:
        server.close()


def test_connection_refused_is_retried_then_reported(tmp_path):
    conn = connector("http://127.0.0.1:9", None, attempts=2)
    with pytest.raises(LokiError, match="ConnectError"):
        conn.poll()
    assert conn.stats.retries == 1
    conn.close()


def test_a_metric_query_is_refused(tmp_path):
    server = Loki(script=[(200, "matrix.json")])
    try:
        conn = connector(server.url, None)
        with pytest.raises(LokiError, match="returns 'matrix', not log streams"):
            conn.poll()
        conn.close()
    finally:
        server.close()


def test_host_from_configured_labels(loki, tmp_path):
    from connectors.loki import LabelMap

    conn = connector(loki.url, None, labels=LabelMap(host=("service_name",)))
    hosts = {o.host for o in conn.poll()}
    conn.close()
    assert hosts == {"dmesg", "llama-7b"}
    conn = connector(loki.url, None, labels=LabelMap(host=("kubernetes_node_name",)))
    page = conn.poll()
    conn.close()
    assert {o.host for o in page} == {"_unknown"}
    assert "2 streams without a host label" in conn.coverage()[0].detail


def test_entry_key_depends_on_stream_and_line():
    a = {"host": "node-a01"}
    assert entry_key(a, "x") == entry_key(dict(a), "x")
    assert entry_key(a, "x") != entry_key({"host": "node-a02"}, "x") != entry_key(a, "y")


@pytest.mark.slow
def test_cli_exits_2_on_a_rejected_query(tmp_path, kafka_bootstrap):  # noqa: F811
    from typer.testing import CliRunner

    from streams.cli import app

    server = Loki(script=[(400, "error-400.txt")])
    try:
        result = CliRunner().invoke(app, [
            "connect", "loki", server.url, QUERY, "--start", str(START), "--until", str(END),
            "--cursor", str(tmp_path / "c.json"), "--bootstrap", kafka_bootstrap])
    finally:
        server.close()
    assert result.exit_code == 2, result.output
    assert "refused the query" in result.output and "parse error at line 1, col 22" in result.output
    assert not (tmp_path / "c.json").exists()
