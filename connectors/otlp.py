"""OpenTelemetry logs in: OTLP log records from a Kafka topic -> ``log_line`` Observations.

**What is on the topic.** The OpenTelemetry Collector's ``kafka`` exporter
(opentelemetry-collector-contrib ``exporter/kafkaexporter``) writes each batch of logs as one
Kafka message whose value is the batch marshalled by pdata: with ``encoding: otlp_proto`` (the
default) the protobuf bytes of an ``ExportLogsServiceRequest`` (the same wire form as
``LogsData``: field 1, repeated ``ResourceLogs``); with ``encoding: otlp_json`` the OTLP/JSON
form of it (``{"resourceLogs": [...]}``). Its key is empty by default; with
``partition_logs_by_resource_attributes: true`` the exporter sends one message per
``ResourceLogs`` keyed by a 16-byte hash of the resource attributes (so one host's logs keep
their order on one partition: the configuration ``deploy/otel/collector.yaml`` sets it); with
``partition_logs_by_trace_id`` the key is a trace id, with ``message_key_from_metadata_key`` a
request metadata value. Headers are the exporter's ``record_headers`` and
``include_metadata_keys``. Nothing here depends on the key or headers: every message carries its
resources. The exporter's ``raw`` encoding sends bare bodies without any resource, hence
without a host: such messages are dead-lettered (use ``otlp_proto`` or ``otlp_json``).

Both encodings are decoded with the official classes of the ``opentelemetry-proto`` package
(``opentelemetry.proto.logs.v1.logs_pb2.LogsData``); JSON through ``google.protobuf.
json_format`` after the differences of OTLP/JSON from protobuf's JSON mapping are undone
(OTLP specification, "JSON Protobuf Encoding"): ``traceId`` / ``spanId`` are hex, not base64;
64-bit integers may be strings or numbers and enums are numbers (both accepted by
``json_format``); unknown fields are ignored, as OTLP receivers must. ``--encoding auto`` (the
default) tells the two apart by the first byte: ``{``, ``[`` or ``"`` is JSON (as protobuf they
would be a group or field 4, neither of which an ``ExportLogsServiceRequest`` has).

**Log records -> lines.** Each ``LogRecord`` becomes the lines of its body:

* a string body is the line as read (the ``filelog`` receiver's ``body``); bytes are UTF-8
  (invalid bytes replaced with U+FFFD); NUL is shown as U+2400;
* a map body from the ``journald`` receiver (it holds ``MESSAGE``) becomes the line
  ``journalctl -o short`` prints without its date and host: ``SYSLOG_IDENTIFIER[_PID]: MESSAGE``
  (``kernel: NVRM: Xid ...``; no ``[pid]`` for the kernel); a ``MESSAGE`` of byte values (the
  journal's form of non-UTF-8 text) is decoded as UTF-8;
* another map body with a ``message``, ``msg`` or ``log`` string (a JSON log parsed by a
  collector operator) is that string; any other body is its JSON (keys sorted).

A record without a body is counted (``unparsed``) and gives nothing; an empty or blank line is
a line of its stream (it may sit inside a traceback) and, alone, gives nothing, as in
``connect files``. The ``filelog`` receiver trims leading and trailing white space unless told
not to: ``deploy/otel/collector.yaml`` keeps it (``preserve_leading_whitespaces``), since the
indentation of traceback and NCCL block lines is what joins them into one record.

**Source identity** (:mod:`correlators.identity`: a record's host is its source's, never a
name in its text). The host is the first of :attr:`AttributeMap.host` found in the resource
attributes, else in the record's attributes (default ``k8s.node.name``, ``host.name``: a
DaemonSet collector's own ``host.name`` may be its pod's name, the ``k8sattributes``
processor's ``k8s.node.name`` is the node), then the journal's trusted ``_HOSTNAME`` field of a
journald body, then ``default_host``; none: ``_unknown``, noted in the coverage. The file is
``log.file.path`` (else ``log.file.name``) -> ``position.file``, and ``log.file.record_number``
(the filelog receiver's ``include_file_record_number``) -> ``position.line``; the journald unit
(``_SYSTEMD_UNIT``, else ``SYSLOG_IDENTIFIER``) -> ``attributes.unit``. ``service.name``,
``k8s.pod.name``, ``k8s.namespace.name``, ``k8s.container.name``, the severity (text, else the
name of the number: ``ERROR``, ``WARN2``...) and trace/span ids (hex) are kept in
``attributes`` (``service``, ``pod``, ``namespace``, ``container``, ``severity``,
``trace_id``, ``span_id``).

**Lines -> records**, as ``connect files`` makes them from the same file (the same lines give
the same bodies, times, ranks and so the same events and verdicts): the lines of one stream
(host, file, unit) are grouped into multi-line records by :func:`connectors.records.
complete_spans` (tracebacks, NCCL error blocks, torchrun summaries, NVRM continuations), a
record still open at the end of a batch waiting for the stream's next lines; it is closed when
the stream is idle for ``idle_s`` seconds (``--follow``) or the topic's backlog is read (a
one-shot run). Times (UTC ns), in order of trust:

1. the time the line states (:class:`connectors.timefmt.LineClock`, one per stream, fed every
   record's first line in order; ``time_source="line"``, the format's quality);
2. the record's ``time_unix_nano`` when set (the journal's ``__REALTIME_TIMESTAMP``, a collector
   time parser): ``"line"``, :data:`TIME_QUALITY_EXACT` when it has a fraction of a second, else
   :data:`TIME_QUALITY_SECONDS`;
3. the stream's last time (``"inferred"``, :data:`TIME_QUALITY_INHERITED`), or before any, the
   next timed line already read;
4. ``observed_time_unix_nano`` (when the collector read it), else the Kafka message time:
   ``"transport"``, :data:`TIME_QUALITY_TRANSPORT`.

Year-less formats take ``year`` when given, else the year nearest the stream's first
observed time. With the edge prefilter (``--prefilter``, on by default with ``--follow`` as for
``connect files``) only the records a rule could turn into an event are published, after their
time is read; the others are counted in the coverage. Bodies are cut at :data:`connectors.bundle.MAX_BODY_CHARS`; a ``[rankN]:``
prefix sets ``rank``.

**Bad input** never stops the connector: a message that is not OTLP logs (invalid protobuf or
JSON, no ``resourceLogs``, a ``raw``-encoded body, a tombstone) becomes a
:class:`schemas.deadletter.DeadLetter` with the reason and the original bytes, published to the
dead-letter topic; the offsets move on.

**Delivery**: a :class:`connectors.source.Source` over :class:`connectors.topic.TopicReader`
(consumer group; the committed offsets are the cursor, committed after the producer's flush).
A message whose lines are still held in an open record is not committed (the checkpoint stops
before the earliest such message of each partition), so a restart reads it again: at least
once, the same records getting the same ids.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Generator, Literal

import typer
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from pydantic import BaseModel

from connectors.bundle import NUL_MARK, cut_body, rank_of_prefix
from connectors.command import Shared, connector
from connectors.prefilter import EdgePrefilter
from connectors.records import MAX_RECORD_LINES, complete_spans
from connectors.timefmt import LineClock, TimeContext
from connectors.topic import KafkaReadError, TopicReader, message_ns
from schemas.deadletter import DeadLetter
from schemas.records import (
    TIME_QUALITY_EXACT,
    TIME_QUALITY_INHERITED,
    TIME_QUALITY_SECONDS,
    TIME_QUALITY_TRANSPORT,
    CoverageEntry,
    Observation,
    Position,
    Source,
)
from schemas.topics import catalogue

if TYPE_CHECKING:  # pragma: no cover
    from confluent_kafka import Message

__all__ = [
    "AttributeMap",
    "LogLine",
    "OtlpError",
    "OtlpLogs",
    "OtlpTopic",
    "any_value",
    "decode_logs",
    "log_lines",
]

log = logging.getLogger("faultstream.connector.otlp")

Encoding = Literal["auto", "otlp_proto", "otlp_json"]
UNKNOWN_HOST = "_unknown"
#: Journal fields of a journald-receiver body (systemd.journal-fields(7)).
_JOURNAL_MESSAGE = "MESSAGE"
_MESSAGE_KEYS = ("message", "msg", "log")


class OtlpError(ValueError):
    """A payload that is not OTLP logs: the message says why (invalid protobuf or JSON, not a
    logs document, no resource logs)."""


# -- decoding ------------------------------------------------------------------------------------

_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
               bool: "a boolean", type(None): "null"}


def _items(parent: dict, names: tuple[str, str], where: str) -> list[tuple[str, dict]]:
    """(path, object) of each element of the array ``parent[names]`` (OTLP/JSON's lowerCamelCase
    name or its proto name); ``[]`` when absent. Raises :class:`OtlpError` naming the path when
    it is not an array of objects."""
    key = names[0] if names[0] in parent else names[1]
    value = parent.get(key)
    if value is None:
        return []
    path = f"{where}.{key}" if where else key
    if not isinstance(value, list):
        raise OtlpError(f"{path} is {_JSON_TYPES.get(type(value), 'a value')}, not an array")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise OtlpError(f"{path}[{i}] is {_JSON_TYPES.get(type(item), 'a value')}, not an object")
        out.append((f"{path}[{i}]", item))
    return out


def _prepare_json(doc: dict) -> None:
    """Check the nesting of an OTLP/JSON logs document (resourceLogs[] -> scopeLogs[] ->
    logRecords[], each an array of objects) and rewrite the hex ``traceId``/``spanId`` of every
    log record to the base64 that protobuf's JSON mapping expects for ``bytes`` fields (in
    place). Raises :class:`OtlpError` naming the path of a misplaced value or an id that is
    not hex."""
    for rl_path, rl in _items(doc, ("resourceLogs", "resource_logs"), ""):
        for sl_path, sl in _items(rl, ("scopeLogs", "scope_logs"), rl_path):
            for rec_path, rec in _items(sl, ("logRecords", "log_records"), sl_path):
                for key in ("traceId", "trace_id", "spanId", "span_id"):
                    value = rec.get(key)
                    if isinstance(value, str):
                        try:
                            rec[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
                        except ValueError:
                            raise OtlpError(f"{rec_path}.{key} {value[:40]!r} is not hex") from None


_FIELD_CHAIN = re.compile(r"Failed to parse (\w+) field: ")
#: protobuf's json_format passes the interpreter's own messages through for a value of the wrong type
_PYTHON_TEXT = re.compile(r"object is not|argument must be|object has no attribute|unhashable|not supported between")


def _parse_error_text(exc: BaseException) -> str:
    """protobuf's JSON parse error as a reason a person reads: the dotted field path, then what
    is wrong with it (\"a value of the wrong type\" in place of the interpreter's own message)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    fields = _FIELD_CHAIN.findall(text)
    detail = _FIELD_CHAIN.sub("", text)
    if isinstance(exc, RecursionError):
        detail = "nested too deeply"
    elif _PYTHON_TEXT.search(detail):
        detail = "a value of the wrong type"
    return (f"{'.'.join(fields)}: {detail}" if fields else detail)[:200]


def decode_logs(raw: bytes, encoding: Encoding = "auto") -> logs_pb2.LogsData:
    """The ``LogsData`` of one Kafka message value written by the collector's ``kafka`` exporter
    (``otlp_proto``: ``ExportLogsServiceRequest`` bytes; ``otlp_json``: its OTLP/JSON form;
    ``auto``: JSON when the first non-blank byte is ``{``, ``[`` or ``"``). Raises :class:`OtlpError` (a
    ``ValueError``) when it is neither, or holds no resource logs."""
    if not raw:
        raise OtlpError("empty message")
    is_json = encoding == "otlp_json" or (encoding == "auto" and raw.lstrip()[:1] in (b"{", b"[", b'"'))
    data = logs_pb2.LogsData()
    if is_json:
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise OtlpError(f"invalid OTLP/JSON: {str(exc).splitlines()[0][:200]}") from None
        if not isinstance(doc, dict):
            raise OtlpError(f"not an OTLP/JSON logs document but a JSON {type(doc).__name__} "
                            "(the exporter's raw encoding carries no resource: use otlp_json or otlp_proto)")
        _prepare_json(doc)
        try:
            json_format.ParseDict(doc, data, ignore_unknown_fields=True)
        except (json_format.ParseError, TypeError, ValueError, RecursionError) as exc:
            raise OtlpError(f"invalid OTLP/JSON logs: {_parse_error_text(exc)}") from None
    else:
        try:
            data.ParseFromString(raw)
        except (DecodeError, RecursionError) as exc:
            raise OtlpError(f"invalid OTLP protobuf: {exc}") from None
    if not data.resource_logs:
        raise OtlpError("no resourceLogs: not an OTLP logs payload (the exporter's raw encoding, "
                        "or another signal's topic?)")
    return data


def any_value(v: common_pb2.AnyValue) -> Any:
    """An OTLP ``AnyValue`` as a Python value: str, bool, int, float, bytes, list, dict, or None
    (no value set)."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def _attributes(kvs: Sequence[common_pb2.KeyValue]) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs}


# -- mapping -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AttributeMap:
    """Which OTLP attributes give a record's source: for each, the keys tried in order (the first
    present and non-empty wins). The host and the kept attributes are the resource's when it
    has one of the keys, else the record's; the file is the record's (the filelog receiver puts
    ``log.file.path`` there), else the resource's."""

    host: tuple[str, ...] = ("k8s.node.name", "host.name")
    file: tuple[str, ...] = ("log.file.path", "log.file.name")
    keep: tuple[tuple[str, str], ...] = (
        ("service.name", "service"), ("k8s.pod.name", "pod"), ("k8s.namespace.name", "namespace"),
        ("k8s.container.name", "container"),
    )

    @staticmethod
    def first(names: Sequence[str], *maps: dict[str, Any]) -> str | None:
        """The first of ``names`` with a non-empty value in the first of ``maps`` holding it,
        as text."""
        for name in names:
            for m in maps:
                value = m.get(name)
                if value not in (None, "", b""):
                    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        return None


@dataclass
class LogLine:
    """One OTLP log record, mapped: ``host``, ``file`` (``log.file.path``), ``unit`` (journald),
    ``text`` (the body as text; several lines when the collector joined them; None: no body), ``time_ns``
    (``time_unix_nano``, 0: unset), ``observed_ns`` (``observed_time_unix_nano``, 0: unset), UTC
    ns; ``record_number`` (``log.file.record_number``), ``attributes`` (what the observation
    keeps), ``host_found`` (False: no attribute named the host)."""

    host: str
    file: str | None
    unit: str | None
    text: str | None
    time_ns: int
    observed_ns: int
    record_number: int | None
    attributes: dict[str, Any]
    host_found: bool = True

    @property
    def stream(self) -> tuple[str, str, str]:
        """The stream the line belongs to: (host, file, unit)."""
        return self.host, self.file or "", self.unit or ""


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list) and value and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", "replace")  # journal MESSAGE as byte values
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=lambda b: b.hex())


def _journal_line(body: dict[str, Any]) -> str:
    """A journald-receiver body as ``journalctl -o short`` prints it, without date and host."""
    ident = _text(body.get("SYSLOG_IDENTIFIER") or body.get("_COMM") or "")
    pid = body.get("SYSLOG_PID") or body.get("_PID")
    message = _text(body.get(_JOURNAL_MESSAGE))
    if not ident:
        return message
    if pid not in (None, "") and ident != "kernel":
        return f"{ident}[{_text(pid)}]: {message}"
    return f"{ident}: {message}"


def _body_text(body: Any) -> str | None:
    if body is None:
        return None
    if isinstance(body, dict):
        if _JOURNAL_MESSAGE in body:
            return _journal_line(body)
        for key in _MESSAGE_KEYS:
            if isinstance(body.get(key), str):
                return body[key]
    return _text(body)


def _severity(rec: logs_pb2.LogRecord) -> str | None:
    if rec.severity_text:
        return rec.severity_text
    if rec.severity_number:
        return logs_pb2.SeverityNumber.Name(rec.severity_number).removeprefix("SEVERITY_NUMBER_")
    return None


def log_lines(data: logs_pb2.LogsData, names: AttributeMap = AttributeMap(),
              default_host: str | None = None) -> Iterator[LogLine]:
    """Every log record of ``data`` as a :class:`LogLine`, in order (resources, scopes,
    records). The mapping is the module docstring's."""
    for rl in data.resource_logs:
        res = _attributes(rl.resource.attributes)
        res_host = names.first(names.host, res)
        res_file = names.first(names.file, res)
        res_kept = {name: v for key, name in names.keep if (v := names.first((key,), res)) is not None}
        for sl in rl.scope_logs:
            for rec in sl.log_records:
                attrs = _attributes(rec.attributes) if rec.attributes else {}
                body = any_value(rec.body) if rec.HasField("body") else None
                journal = body if isinstance(body, dict) and _JOURNAL_MESSAGE in body else None
                host = res_host or (names.first(names.host, attrs) if attrs else None)
                if host is None and journal is not None and journal.get("_HOSTNAME"):
                    host = _text(journal["_HOSTNAME"])
                found = host is not None
                if host is None:
                    host = default_host or UNKNOWN_HOST
                unit = None
                if journal is not None:
                    unit = _text(journal.get("_SYSTEMD_UNIT") or journal.get("SYSLOG_IDENTIFIER") or "") or None
                kept: dict[str, Any] = dict(res_kept)
                if attrs:
                    for key, name in names.keep:
                        if name not in kept and (value := names.first((key,), attrs)) is not None:
                            kept[name] = value
                if unit:
                    kept["unit"] = unit
                sev = _severity(rec)
                if sev:
                    kept["severity"] = sev
                if rec.trace_id:
                    kept["trace_id"] = rec.trace_id.hex()
                if rec.span_id:
                    kept["span_id"] = rec.span_id.hex()
                number = attrs.get("log.file.record_number")
                yield LogLine(
                    host=host, file=(names.first(names.file, attrs) if attrs else None) or res_file, unit=unit,
                    text=_body_text(body),
                    time_ns=rec.time_unix_nano, observed_ns=rec.observed_time_unix_nano,
                    record_number=int(number) if isinstance(number, (int, float)) and not isinstance(number, bool)
                    else None,
                    attributes=kept, host_found=found)


# -- streams of lines -> records -----------------------------------------------------------------

@dataclass
class _Pending:
    """One physical line waiting in its stream, with where it came from."""

    text: str
    line: LogLine
    where: tuple[str, int, int]  # topic, partition, offset
    transport_ns: int


@dataclass
class _Stream:
    lines: list[_Pending] = field(default_factory=list)
    context: list[str] = field(default_factory=list)
    clock: LineClock | None = None
    last_ns: int | None = None
    seen: float = 0.0  # monotonic time of its last line


@dataclass
class _Counts:
    messages: int = 0
    records: int = 0  # OTLP log records read
    observations: int = 0
    empty: int = 0
    dead: int = 0
    dropped: int = 0  # records the edge prefilter did not publish
    unknown_host: set[tuple[str, str, str]] = field(default_factory=set)
    streams: set[tuple[str, str, str]] = field(default_factory=set)


class OtlpLogs:
    """Turns OTLP log payloads into ``log_line`` Observations, stream by stream (see the module
    docstring); the Kafka-free part of :class:`OtlpTopic`.

    ``add(raw, where=(topic, partition, offset), transport_ns=..., key=...)`` decodes one
    message value (a bad one returns its :class:`DeadLetter`); ``emit(final=...)`` returns the
    records now complete (``final``: every open record too; ``idle_s`` with ``now``: those of
    streams without a line for that long). ``names``, ``default_host``: the source identity;
    ``cluster``, ``workload_id``: copied into every Observation; ``encoding``: see
    :func:`decode_logs`; ``year`` / ``tz``: for line times without a year or zone; ``forget_s``: a
    stream with no line for this many seconds (monotonic) and none waiting is forgotten (its
    line clock and context: memory stays bounded as pods come and go). ``prefilter``: publish
    only the records it keeps (:class:`connectors.prefilter.EdgePrefilter`: those a rule could
    turn into an event), after their time is read, so the kept records are those of an
    unfiltered run; the dropped ones are counted in the coverage."""

    def __init__(self, *, names: AttributeMap = AttributeMap(), default_host: str | None = None,
                 cluster: str = "", workload_id: str | None = None, encoding: Encoding = "auto",
                 year: int | None = None, tz: str = "UTC", instance: str = "otlp",
                 forget_s: float = 3600.0, prefilter: EdgePrefilter | None = None) -> None:
        self.names = names
        self.prefilter = prefilter
        self.forget_s = forget_s
        self.default_host = default_host
        self.cluster = cluster
        self.workload_id = workload_id
        self.encoding = encoding
        self.year = year
        self.tz = tz
        self.instance = instance
        self.counts = _Counts()
        self._streams: dict[tuple[str, str, str], _Stream] = {}

    def add(self, raw: bytes | None, *, where: tuple[str, int, int] = ("", 0, 0), transport_ns: int = 0,
            key: bytes | None = None, now: float | None = None) -> DeadLetter | None:
        """Read one message value into the streams. Returns the dead letter of a value that is
        not OTLP logs (nothing is raised), else None."""
        self.counts.messages += 1
        try:
            if raw is None:
                raise OtlpError("tombstone: no value")
            data = decode_logs(raw, self.encoding)
        except OtlpError as exc:
            self.counts.dead += 1
            return DeadLetter(source=f"connector.otlp:{self.instance}", reason=str(exc), original=raw,
                              original_key=key, position=Position(topic=where[0] or None, partition=where[1],
                                                                  offset=where[2]),
                              at_ns=time.time_ns()).with_id()
        seen = time.monotonic() if now is None else now
        for line in log_lines(data, self.names, self.default_host):
            self.counts.records += 1
            if line.text is None:
                self.counts.empty += 1
                continue
            sid = line.stream
            self.counts.streams.add(sid)
            if not line.host_found:
                self.counts.unknown_host.add(sid)
            stream = self._streams.setdefault(sid, _Stream())
            stream.seen = seen
            text = line.text.replace("\r\n", "\n")
            if "\x00" in text:
                text = text.replace("\x00", NUL_MARK)
            for part in text.rstrip("\n").split("\n"):
                stream.lines.append(_Pending(part.removesuffix("\r"), line, where, transport_ns))
        return None

    def emit(self, *, final: bool = False, idle_s: float | None = None, now: float | None = None) -> list[Observation]:
        """The records of every stream that are complete (see :func:`connectors.records.
        complete_spans`); with ``final``, or for a stream whose last line is ``idle_s`` seconds
        old at ``now`` (monotonic), the open ones too."""
        out: list[Observation] = []
        t = time.monotonic() if now is None else now
        for sid, stream in list(self._streams.items()):
            if not stream.lines:
                if t - stream.seen >= self.forget_s:
                    del self._streams[sid]  # a stream silent that long (a deleted pod's file) is forgotten
                continue
            closing = final or (idle_s is not None and t - stream.seen >= idle_s)
            buf = stream.context + [p.text for p in stream.lines]
            base = len(stream.context)
            i = base
            for s, e in complete_spans(buf, base, final=closing):
                if any(x.strip() for x in buf[s:e]):
                    obs = self._record(sid, stream, buf, s, e)
                    if obs is not None:
                        out.append(obs)
                else:
                    self.counts.empty += e - s  # blank lines: no record, as connect files
                i = e
            done = i - base
            if done:
                del stream.lines[:done]
                stream.context = buf[max(0, i - MAX_RECORD_LINES):i]
        self.counts.observations += len(out)
        return out

    def held(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the earliest offset whose lines wait in an open record."""
        out: dict[tuple[str, int], int] = {}
        for stream in self._streams.values():
            for p in stream.lines:
                key = (p.where[0], p.where[1])
                out[key] = min(out.get(key, p.where[2]), p.where[2])
        return out

    def forget(self) -> None:
        """Drop every waiting line and line clock (after a rewind: they are read again)."""
        self._streams.clear()

    def _record(self, sid: tuple[str, str, str], stream: _Stream, buf: list[str], s: int, e: int) -> Observation | None:
        base = len(stream.context)
        first_p = stream.lines[s - base]
        line = first_p.line
        text = "\n".join(buf[s:e])
        attributes = dict(line.attributes)
        text = cut_body(text, attributes)
        first = buf[s]
        if stream.clock is None:
            ref = line.time_ns or line.observed_ns or first_p.transport_ns or None
            year = self.year or (time.gmtime(ref / 1e9).tm_year if ref else time.gmtime().tm_year)
            stream.clock = LineClock(TimeContext(year=year, tz=self.tz, ref_ns=None if self.year else ref))
        lt = stream.clock(first[:512])
        fmt = "unknown"
        if lt is not None:
            at, source, quality, fmt = lt.at_ns, "line", lt.quality, lt.format
            stream.last_ns = at
        elif line.time_ns:
            at, source = line.time_ns, "line"
            quality = TIME_QUALITY_EXACT if line.time_ns % 1_000_000_000 else TIME_QUALITY_SECONDS
            stream.last_ns = at
        elif stream.last_ns is not None:
            at, source, quality = stream.last_ns, "inferred", TIME_QUALITY_INHERITED
        else:
            ahead = next((x for x in (stream.clock.peek(t[:512]) for t in buf[e:]) if x), None)
            if ahead is not None:
                at, source, quality = ahead.at_ns, "inferred", TIME_QUALITY_INHERITED
            else:
                at, source, quality = line.observed_ns or first_p.transport_ns, "transport", TIME_QUALITY_TRANSPORT
        if self.prefilter is not None and not self.prefilter.keep(text):
            self.counts.dropped += 1  # timed above: the records after it keep their times
            return None
        topic, partition, offset = first_p.where
        return Observation(
            source=Source(connector="otlp", instance=sid[0]),
            kind="log_line",
            observed_at=at,
            time_source=source,
            time_quality=quality,
            host=sid[0],
            cluster=self.cluster,
            workload_id=self.workload_id,
            rank=rank_of_prefix(first),
            format=fmt,
            body=text,
            attributes=attributes,
            position=Position(file=line.file, line=line.record_number, topic=topic or None,
                              partition=partition if topic else None, offset=offset if topic else None),
        ).with_id()

    def coverage(self, source: str) -> list[CoverageEntry]:
        """One entry for the input named ``source``: OTLP records read, observations, empty bodies
        and dead letters; streams without a host attribute are noted."""
        c = self.counts
        notes = [f"{c.messages} messages, {c.records} log records, {len(c.streams)} streams, "
                 f"{c.observations} records published, {c.dropped} dropped at the edge, {c.empty} empty bodies, "
                 f"{c.dead} dead-lettered"]
        if c.unknown_host:
            notes.append(f"{len(c.unknown_host)} streams without a host attribute: host "
                         f"{self.default_host or UNKNOWN_HOST!r}")
        return [CoverageEntry(source=source, status="present" if c.records else "empty",
                              records=c.records, unparsed=c.empty + c.dead, detail="; ".join(notes))]


def _record_key(record: BaseModel) -> str:
    if isinstance(record, Observation):
        return record.host
    if isinstance(record, DeadLetter):
        return record.source
    raise TypeError(f"no key for {type(record).__name__}")


class OtlpTopic:
    """OTLP logs from a Kafka topic written by the collector's ``kafka`` exporter, read by
    consumer group ``group`` (:class:`connectors.topic.TopicReader`; ``config``: confluent_kafka
    settings). ``follow``: records still open close after ``idle_s`` seconds without a line of
    their stream; else when the backlog is read. The other keywords go to :class:`OtlpLogs`;
    ``reader``: to the reader (``assign_timeout_s``, ``batch``...)."""

    def __init__(self, config: dict[str, Any], topic: str, *, group: str, follow: bool = False,
                 idle_s: float = 1.0, reader: dict[str, Any] | None = None, **logs: Any) -> None:
        self.reader = TopicReader(config, topic, group, **(reader or {}))
        self.cursor = self.reader.cursor
        self.follow = follow
        self.idle_s = idle_s
        self.logs = OtlpLogs(instance=topic, **logs)

    @property
    def pending(self) -> bool:
        """True while the backlog at assignment is not read, or a record waits for its end."""
        return self.reader.pending or (not self.follow and bool(self.logs.held()))

    def key(self, record: BaseModel) -> str:
        """Kafka key: the host of an Observation, the source of a dead letter."""
        return _record_key(record)

    def poll(self) -> list[BaseModel]:
        """The Observations completed and the dead letters of the next batch of messages."""
        out: list[BaseModel] = []
        msgs: list[Message] = self.reader.messages()
        for msg in msgs:
            dead = self.logs.add(msg.value(), where=(msg.topic(), msg.partition(), msg.offset()),
                                 transport_ns=message_ns(msg), key=msg.key())
            if dead is not None:
                out.append(dead)
        caught_up = not self.reader.pending
        out += self.logs.emit(final=caught_up and not self.follow, idle_s=self.idle_s if self.follow else None)
        return out

    def checkpoint(self) -> dict[str, Any]:
        """The next offsets, each partition stopped before its earliest message whose lines wait
        in an open record (committed by :attr:`cursor`)."""
        doc = self.reader.checkpoint()
        offsets = dict(doc["offsets"])
        for (t, p), off in self.logs.held().items():
            name = f"{t}/{p}"
            offsets[name] = min(offsets.get(name, off), off)
        return {"offsets": offsets}

    def rewind(self) -> None:
        """Seek back to the committed offsets; the waiting lines are read again from there."""
        self.reader.rewind()
        self.logs.forget()

    def coverage(self) -> list[CoverageEntry]:
        """One entry for the topic (:meth:`OtlpLogs.coverage`)."""
        return self.logs.coverage(f"kafka:{self.reader.topic}")

    def close(self) -> None:
        self.reader.close()


# -- CLI -------------------------------------------------------------------------------------------

@connector(interval=1.0, errors=(KafkaReadError,))
def connect_otlp_cli(
    opts: Shared,
    from_topic: Annotated[str, typer.Option("--from-topic", help="Kafka topic the OpenTelemetry Collector's kafka exporter writes logs to (its logs::topic, default otlp_logs)")],
    encoding: Annotated[str, typer.Option(help="payload encoding: auto (by the first byte), otlp_proto or otlp_json (the exporter's logs::encoding)")] = "auto",
    group: Annotated[str, typer.Option(help="Kafka consumer group; its committed offsets are the position")] = "faultstream-otlp-in",
    host_attribute: Annotated[list[str] | None, typer.Option("--host-attribute", help="resource/record attribute naming the host; repeat to try several in order (default: k8s.node.name, host.name; then a journald body's _HOSTNAME)")] = None,
    default_host: Annotated[str | None, typer.Option("--default-host", help="host of records no attribute names (default: _unknown, noted in the coverage)")] = None,
    cluster: Annotated[str, typer.Option(help="cluster name")] = "",
    workload: Annotated[str | None, typer.Option(help="workload id to attach")] = None,
    year: Annotated[int | None, typer.Option(min=1970, max=9999, help="year of line times without one (default: the year nearest the collector's time)")] = None,
    prefilter: Annotated[bool | None, typer.Option(
        "--prefilter/--no-prefilter",
        help="publish only the records the rule pack could turn into an event, after their time is read (the "
             "others are counted in the coverage). Default: on with --follow, off without, as connect files")] = None,
    idle_s: Annotated[float, typer.Option("--idle-s", min=0.0, help="with --follow: a multi-line record still open is published after this many seconds without a line of its stream")] = 1.0,
    deadletter_topic: Annotated[str | None, typer.Option(help="dead-letter topic (default: the catalogue's)")] = None,
    assign_timeout_s: Annotated[float, typer.Option("--assign-timeout-s", min=0.1, help="give up when no partition of the topic is assigned within this many seconds")] = 30.0,
) -> Generator[OtlpTopic, Any, None]:
    """Publish OpenTelemetry logs (OTLP, from the Collector's kafka exporter) as observations (key = host).

    Reads ExportLogsServiceRequest payloads (encoding otlp_proto or otlp_json) from --from-topic with a consumer group, and turns each log record into the log_line observation connect files makes of the same line: the host from the resource attributes (k8s.node.name, host.name) or a journald record's _HOSTNAME, the file from log.file.path, multi-line records (tracebacks, NCCL blocks) joined per stream, times from the line, else the record's time. A message that is not OTLP logs goes to the dead-letter topic with the reason. Offsets are committed only after delivery. With --once (the default) the backlog is read and the command exits; with --follow it keeps reading."""
    if encoding not in ("auto", "otlp_proto", "otlp_json"):
        raise ValueError(f"--encoding {encoding!r}: auto, otlp_proto or otlp_json (the raw encoding carries no "
                         "resource attributes, so no host)")
    opts.routes[DeadLetter] = deadletter_topic or catalogue()["deadletter"].name
    names = AttributeMap(host=tuple(host_attribute)) if host_attribute else AttributeMap()
    source = OtlpTopic(opts.kafka.confluent_config(), from_topic, group=group, follow=opts.follow, idle_s=idle_s,
                       reader={"assign_timeout_s": assign_timeout_s}, names=names, default_host=default_host,
                       cluster=cluster, workload_id=workload, encoding=encoding, year=year,  # type: ignore[arg-type]
                       prefilter=EdgePrefilter() if (opts.follow if prefilter is None else prefilter) else None)
    done = yield source
    c = source.logs.counts
    dropped = f", {c.dropped} records dropped at the edge" if source.logs.prefilter is not None else ""
    typer.echo(f"published {done.sent} records ({c.records} OTLP log records from {from_topic}{dropped}, "
               f"{c.dead} dead-lettered) to {opts.topic}", err=True)
