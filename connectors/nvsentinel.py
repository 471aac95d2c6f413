"""NVSentinel interop, both ways: HealthEvents in as evidence, final verdicts out as HealthEvents.

**The HealthEvent** (NVIDIA NVSentinel, ``data-models/protobufs/health_event.proto``, package
``datamodels``): ``version`` (uint32), ``agent`` (the monitor: ``syslog-health-monitor``,
``gpu-health-monitor``, ...), ``componentClass`` (``GPU``, ``NIC``, ``NVSWITCH``,
``INFRASTRUCTURE``), ``checkName`` (``SysLogsXIDError``, ``GpuMemWatch``, ...; the node
condition NVSentinel sets), ``isFatal``, ``isHealthy``, ``message``, ``recommendedAction``
(enum :data:`RECOMMENDED_ACTIONS`), ``errorCode`` (repeated string: ``"79"``,
``"DCGM_FR_VOLATILE_DBE_DETECTED"``), ``entitiesImpacted`` (repeated ``{entityType,
entityValue}``: ``GPU`` = a GPU index (gpu-health-monitor) or UUID (syslog-health-monitor),
``GPU_UUID``, ``PCI``), ``metadata`` (map<string,string>; the syslog monitor puts the kernel line
in ``JOURNAL_MESSAGE``), ``generatedTimestamp`` (google.protobuf.Timestamp), ``nodeName``,
``quarantineOverrides`` / ``drainOverrides`` (``{force, skip}``) and ``processingStrategy``
(:data:`PROCESSING_STRATEGIES`). Its JSON forms, all read here:

* protobuf's JSON mapping (protojson): camelCase names, enums by name, the timestamp as RFC 3339
  text (``2026-11-30T01:21:04.123456789Z``; written with nine fraction digits);
* NVSentinel's event exporter (``event-exporter/pkg/transformer/cloudevents.go``): a CloudEvent
  ``{"specversion": "1.0", "type": "com.nvidia.nvsentinel.health.v1", "data": {"metadata":
  {"cluster": ...}, "healthEvent": {...}}}`` with ``recommendedAction`` as a number;
* Go's encoding/json of the generated struct (``{"seconds", "nanos"}`` timestamps, numbers for
  enums) and NVSentinel's MongoDB documents (``{"healthevent": {...}}`` with lower-case keys):
  names are matched without regard to case;
* a ``HealthEvents`` batch (``{"version": 1, "events": [...]}``) and JSON arrays.

**In** (:class:`HealthEventFiles`, :class:`HealthEventTopic`): each HealthEvent becomes one
Observation of kind ``health_event``, format ``nvsentinel``: ``host`` = ``nodeName``,
``observed_at`` = ``generatedTimestamp`` (UTC ns, ``time_source="line"``, exact; without one the
Kafka message time or the file's modification time, ``"transport"``), ``gpu`` from the first
GPU entity (``GPU_UUID``, a ``GPU`` UUID or index, ``PCI`` normalised to ``dddd:bb:dd``),
``attributes`` = the event's fields in protojson form (camelCase, enums by name). ``body`` is one
line for the rule pack: an unhealthy event names its check, fatality, recommended action, error
codes, entities and message (``... errorCode=DCGM_FR_VOLATILE_DBE_DETECTED ... message:
Detected 2 volatile double-bit ECC error(s) in GPU 1.``), so the DCGM rules read a DCGM failure
reason as they do in any log line; a healthy (recovery) event names neither its codes nor its
message, so no failure rule fires on a recovery. The kernel line of ``JOURNAL_MESSAGE`` stays in
``attributes.metadata`` (not in the body): the same XID read from the kernel log is not counted
twice. Input that is not a HealthEvent (invalid JSON, no ``nodeName`` or ``checkName``, an
unknown enum name, a bad timestamp) becomes a :class:`schemas.deadletter.DeadLetter` with the
reason and the original bytes, published to the dead-letter topic.

**Out** (:class:`VerdictBridge`, :func:`verdict_health_events`): each *final* verdict (``final:
true``, or ``status: "final"``) of a workload scope with culprit hosts becomes one HealthEvent
per culprit host, keyed by that host, on ``<prefix>.nvsentinel-health-events``: ``agent``
``faultstream``, ``checkName`` ``Faultstream<Domain>`` (``FaultstreamGpuHardware``,
``FaultstreamFabric``, ...: one node condition per cause domain), ``componentClass`` from the
domain, ``errorCode`` = the root-cause code (and the bare XID number for an XID cause, the code
NVSentinel's own XID events carry), ``recommendedAction`` from faultstream's remediation policy
(:func:`recommended_action`), ``isFatal`` = the action is not ``NONE`` (NVSentinel's monitors'
own rule), ``isHealthy`` false, ``entitiesImpacted`` the culprit GPUs (``GPU`` index, ``PCI``,
``GPU_UUID``) when the verdict names one culprit host, ``generatedTimestamp`` = the verdict's
``decided_at`` (event time), ``metadata`` the verdict's ids. The same verdict always gives the
same bytes.

NVSentinel's platform connector takes HealthEvents over gRPC only
(``PlatformConnector/HealthEventOccurredV1`` on a Unix socket, ``unix:///var/run/nvsentinel.sock``):
:mod:`transport.nvsentinel` speaks that interface both ways (the bridge's
``--platform-connector`` sends verdicts' events there through :class:`PlatformConnectorProducer`,
``--listen`` receives monitors' events in :class:`HealthEventReceiver`),
and :class:`sinks.executors.nvsentinel.NVSentinelExecutor` turns remediation actions into events
for it.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generator, TYPE_CHECKING, Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from connectors.bundle import is_binary
from connectors.command import Shared, connector, input_files
from connectors.topic import KafkaReadError, TopicReader as _TopicReader, message_ns as _message_ns
from correlators.remediation.policy import PolicyError
from correlators.ids import normalise_pci
from correlators.remediation.policy import SEVERITY, Policy, load_policy, verdict_facts
from schemas.deadletter import DeadLetter, reason_of
from schemas.records import (
    TIME_QUALITY_EXACT,
    TIME_QUALITY_TRANSPORT,
    Attribution,
    CoverageEntry,
    GpuRef,
    Observation,
    Position,
    Source,
)
from schemas.topics import catalogue, topic_name
from schemas.utc import format_utc, parse_utc
from transport.nvsentinel import (
    ACTION_MAP,
    MAX_MESSAGE,
    PlatformConnectorClient,
    PlatformConnectorError,
    serve,
)

if TYPE_CHECKING:  # pragma: no cover
    from connectors.cursor import CursorStore

__all__ = [
    "ACTION_MAP",
    "HEALTH_TOPIC",
    "MAX_MESSAGE",
    "LEGACY_ACTION_NAMES",
    "PROCESSING_STRATEGIES",
    "RECOMMENDED_ACTIONS",
    "BridgeOptions",
    "Entity",
    "HealthEvent",
    "HealthEventError",
    "HealthEventFiles",
    "HealthEventReceiver",
    "PlatformConnectorProducer",
    "HealthEventTopic",
    "VerdictBridge",
    "health_event_values",
    "is_final",
    "parse_health_event",
    "parse_timestamp",
    "recommended_action",
    "to_observation",
    "verdict_health_events",
]

log = logging.getLogger("faultstream.connector.nvsentinel")

#: ``datamodels.RecommendedAction`` (health_event.proto): name -> number.
RECOMMENDED_ACTIONS: dict[str, int] = {
    "NONE": 0, "COMPONENT_RESET": 2, "CONTACT_SUPPORT": 5, "RUN_FIELDDIAG": 6, "RESTART_VM": 15,
    "RESTART_BM": 24, "REPLACE_VM": 25, "RUN_DCGMEUD": 26, "RESTART_APP": 39, "UNKNOWN": 99,
}
_ACTION_NAMES = {v: k for k, v in RECOMMENDED_ACTIONS.items()}
#: Names of the older ``platformconnector.RecommenedAction`` enum (protobufs/platformconnector.proto)
#: that the current one dropped; accepted by name (their numbers now mean other actions).
LEGACY_ACTION_NAMES = frozenset({
    "NODE_REBOOT", "COMPONENT_REPLACEMENT", "APPLICATION_RESTART", "REPORT_ISSUE", "WORKFLOW_XID_13_31",
    "WORKFLOW_ECC_DBE_SRAM", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_XID_45", "WORKFLOW_XID_48", "CHECK_MECHANICALS",
    "WORKFLOW_NVLINK_ERR", "UPDATE_SWFW", "RESET_FABRIC", "WORKFLOW_NVLINK_POTENTIALY_FATAL_ERR",
    "CHECK_FM_CONFIG", "CHECK_THERMALS", "RESET_GPU", "CHECK_LINK_MECHANICAL_CONNECTIONS", "INVESTIGATE_LINK_SI",
})
#: ``datamodels.ProcessingStrategy``: name -> number.
PROCESSING_STRATEGIES: dict[str, int] = {"UNSPECIFIED": 0, "EXECUTE_REMEDIATION": 1, "STORE_ONLY": 2}
_STRATEGY_NAMES = {v: k for k, v in PROCESSING_STRATEGIES.items()}
#: Logical name of the topic the verdict bridge publishes to (``<prefix>.nvsentinel-health-events``).
HEALTH_TOPIC = "nvsentinel-health-events"

_FIELDS = ("version", "agent", "componentClass", "checkName", "isFatal", "isHealthy", "message",
           "recommendedAction", "errorCode", "entitiesImpacted", "metadata", "generatedTimestamp", "nodeName",
           "quarantineOverrides", "drainOverrides", "processingStrategy")
_BY_LOWER = {f.lower(): f for f in _FIELDS}


class HealthEventError(ValueError):
    """A JSON value that is not a usable HealthEvent; the message is the dead-letter reason."""


class Entity(BaseModel):
    """One impacted entity: ``entityType`` (``GPU``, ``GPU_UUID``, ``PCI``, ``NODE``, ...) and its
    ``entityValue``."""

    model_config = ConfigDict(extra="forbid")

    entityType: str
    entityValue: str


class BehaviourOverrides(BaseModel):
    """``quarantineOverrides`` / ``drainOverrides``: force or skip the step for this event."""

    model_config = ConfigDict(extra="forbid")

    force: bool = False
    skip: bool = False


class HealthEvent(BaseModel):
    """A HealthEvent in protobuf's JSON mapping (field names as in health_event.proto, enums by
    name, ``generatedTimestamp`` RFC 3339 UTC text). Built by :func:`parse_health_event` from any
    of the JSON forms the module docstring lists, and by :func:`verdict_health_events`."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(default=1, ge=0, le=2**32 - 1)
    agent: str = ""
    componentClass: str = ""
    checkName: str = ""
    isFatal: bool = False
    isHealthy: bool = False
    message: str = ""
    recommendedAction: str = "NONE"
    errorCode: list[str] = Field(default_factory=list)
    entitiesImpacted: list[Entity] = Field(default_factory=list)
    metadata: dict[str, str] = Field(default_factory=dict)
    generatedTimestamp: str | None = None
    nodeName: str = ""
    quarantineOverrides: BehaviourOverrides | None = None
    drainOverrides: BehaviourOverrides | None = None
    processingStrategy: str = "UNSPECIFIED"


# -- timestamps ------------------------------------------------------------------------------

def parse_timestamp(value: Any) -> int:
    """A HealthEvent ``generatedTimestamp`` -> UTC ns: RFC 3339 text (protojson, the event
    exporter; :func:`schemas.utc.parse_utc`), ``{"seconds", "nanos"}`` (Go's encoding/json,
    MongoDB documents) or a number of seconds since the epoch. Raises :class:`HealthEventError`
    for anything else or a time before 1990 / after 2100."""
    if isinstance(value, str):
        try:
            ns = parse_utc(value.strip())
        except ValueError:
            raise HealthEventError(f"generatedTimestamp {value[:60]!r} is not RFC 3339") from None
    elif isinstance(value, dict):
        low = {str(k).lower(): v for k, v in value.items()}
        try:
            ns = int(low.get("seconds", 0)) * 1_000_000_000 + int(low.get("nanos", 0))
        except (TypeError, ValueError):
            raise HealthEventError(f"generatedTimestamp {str(value)[:80]!r}: seconds/nanos are not integers") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        ns = round(value * 1e9)
    else:
        raise HealthEventError(f"generatedTimestamp of type {type(value).__name__}")
    if not 631_152_000 * 10**9 <= ns <= 4_102_444_800 * 10**9:
        raise HealthEventError(f"generatedTimestamp {ns} ns is outside 1990..2100")
    return ns


# -- parsing -----------------------------------------------------------------------------------

def _enum(value: Any, names: dict[int, str], known: Iterable[str], what: str) -> str:
    if isinstance(value, bool):
        raise HealthEventError(f"{what} {value!r} is not an enum value")
    if isinstance(value, int):
        return names.get(value, str(value))  # proto3 enums are open: an unknown number is kept
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return names.get(int(text), text)
        if text in known:
            return text
        raise HealthEventError(f"{what} {text[:60]!r} is not a name of the enum")
    raise HealthEventError(f"{what} of type {type(value).__name__}")


def _lower_keys(obj: dict[str, Any]) -> dict[str, Any]:
    return {str(k).lower(): v for k, v in obj.items()}


def parse_health_event(obj: Any) -> tuple[HealthEvent, int | None]:
    """One HealthEvent object (any of the JSON forms, keys matched without regard to case) ->
    (:class:`HealthEvent` in protojson form, its time in UTC ns or None when it has none).

    Raises :class:`HealthEventError` (the reason) when it is not an object, lacks ``nodeName`` or
    ``checkName``, names an unknown ``recommendedAction`` / ``processingStrategy``, or holds a
    field of the wrong type."""
    if not isinstance(obj, dict):
        raise HealthEventError(f"not a JSON object but {type(obj).__name__}")
    raw = {_BY_LOWER[k]: v for k, v in _lower_keys(obj).items() if k in _BY_LOWER}
    data: dict[str, Any] = {k: v for k, v in raw.items() if v is not None}
    at: int | None = None
    if "generatedTimestamp" in data:
        at = parse_timestamp(data["generatedTimestamp"])
        data["generatedTimestamp"] = format_utc(at)
    if "recommendedAction" in data:
        data["recommendedAction"] = _enum(data["recommendedAction"], _ACTION_NAMES,
                                          set(RECOMMENDED_ACTIONS) | LEGACY_ACTION_NAMES, "recommendedAction")
    if "processingStrategy" in data:
        data["processingStrategy"] = _enum(data["processingStrategy"], _STRATEGY_NAMES, PROCESSING_STRATEGIES,
                                           "processingStrategy")
    codes = data.get("errorCode")
    if isinstance(codes, (str, int)) and not isinstance(codes, bool):
        codes = [codes]
    if codes is not None:
        if not isinstance(codes, list) or not all(isinstance(c, (str, int)) and not isinstance(c, bool) for c in codes):
            raise HealthEventError("errorCode is not a list of strings")
        data["errorCode"] = [str(c) for c in codes]
    ents = data.get("entitiesImpacted")
    if ents is not None:
        if not isinstance(ents, list) or not all(isinstance(e, dict) for e in ents):
            raise HealthEventError("entitiesImpacted is not a list of objects")
        data["entitiesImpacted"] = [
            {"entityType": str(low.get("entitytype", "")), "entityValue": str(low.get("entityvalue", ""))}
            for low in map(_lower_keys, ents)]
    meta = data.get("metadata")
    if meta is not None:
        if not isinstance(meta, dict):
            raise HealthEventError("metadata is not an object")
        data["metadata"] = {str(k): v if isinstance(v, str) else json.dumps(v, sort_keys=True) for k, v in meta.items()}
    for name in ("quarantineOverrides", "drainOverrides"):
        if isinstance(data.get(name), dict):
            data[name] = _lower_keys(data[name])
    try:
        event = HealthEvent.model_validate(data)
    except ValidationError as exc:
        raise HealthEventError(reason_of(exc)) from None
    if not event.nodeName.strip():
        raise HealthEventError("no nodeName: the node the event is about is unknown")
    if not event.checkName.strip():
        raise HealthEventError("no checkName")
    return event, at


def health_event_values(value: Any) -> list[tuple[Any, str]]:
    """The HealthEvent objects inside one decoded JSON value, each with the cluster its envelope
    names (``""`` if none): a bare event, a JSON array, a ``HealthEvents`` batch, a MongoDB
    document (``healthevent``) or an event-exporter CloudEvent (``data.healthEvent``,
    ``data.metadata.cluster``). The objects are not validated (see :func:`parse_health_event`)."""
    out: list[tuple[Any, str]] = []
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, cluster = stack.pop()
        if isinstance(item, list):
            stack.extend((v, cluster) for v in reversed(item))
            continue
        if isinstance(item, dict):
            low = _lower_keys(item)
            if "specversion" in low and isinstance(low.get("data"), dict):
                data = _lower_keys(low["data"])
                meta = data.get("metadata")
                name = str(_lower_keys(meta).get("cluster") or "") if isinstance(meta, dict) else ""
                stack.append((data.get("healthevent"), name or cluster))
                continue
            if isinstance(low.get("events"), list) and not (set(low) & {"checkname", "nodename"}):
                stack.extend((v, cluster) for v in reversed(low["events"]))
                continue
            if isinstance(low.get("healthevent"), dict):
                stack.append((low["healthevent"], cluster))
                continue
        out.append((item, cluster))
    return out


def _gpu_of(entities: Sequence[Entity]) -> GpuRef | None:
    uuid = index = pci = None
    for e in entities:
        kind, value = e.entityType.upper(), e.entityValue.strip()
        if kind == "GPU_UUID" and uuid is None:
            uuid = value or None
        elif kind == "GPU":
            if value.upper().startswith("GPU-") and uuid is None:
                uuid = value
            elif value.isdigit() and index is None and int(value) < 2**31:
                index = int(value)
        elif kind == "PCI" and pci is None:
            pci = normalise_pci(value)
    if uuid is None and index is None and pci is None:
        return None
    return GpuRef(index=index, uuid=uuid, pci_bus_id=pci)


def _body(e: HealthEvent) -> str:
    ents = " ".join(f"{x.entityType}={x.entityValue}" for x in e.entitiesImpacted) or "-"
    head = f"NVSentinel HealthEvent {e.agent or '-'}/{e.checkName} on {e.nodeName}"
    if e.isHealthy:
        return f"{head}: healthy, component={e.componentClass or '-'}, entities={ents}"
    codes = ",".join(e.errorCode) or "-"
    message = " ".join(e.message.split())
    return (f"{head}: unhealthy, fatal={'true' if e.isFatal else 'false'}, "
            f"recommendedAction={e.recommendedAction}, errorCode={codes}, component={e.componentClass or '-'}, "
            f"entities={ents}; message: {message}")


def to_observation(event: HealthEvent, at_ns: int | None, *, instance: str, transport_ns: int,
                   cluster: str = "", workload_id: str | None = None, position: Position | None = None) -> Observation:
    """The ``health_event`` Observation of one parsed HealthEvent (see the module docstring).
    ``at_ns``: its ``generatedTimestamp`` (UTC ns) or None, then ``transport_ns`` (the Kafka
    message or file time) with ``time_source="transport"``. ``instance``: ``Source.instance``
    (the file or topic read)."""
    if at_ns is not None:
        at, source, quality = at_ns, "line", TIME_QUALITY_EXACT
    else:
        at, source, quality = transport_ns, "transport", TIME_QUALITY_TRANSPORT
    return Observation(
        source=Source(connector="nvsentinel", instance=instance),
        kind="health_event",
        observed_at=at,
        time_source=source,
        time_quality=quality,
        host=event.nodeName,
        cluster=cluster,
        workload_id=workload_id,
        gpu=_gpu_of(event.entitiesImpacted),
        format="nvsentinel",
        body=_body(event),
        attributes=event.model_dump(mode="json", exclude_none=True),
        position=position or Position(),
    ).with_id()


def _dead_letter(instance: str, reason: str, original: bytes | None, *, key: bytes | None = None,
                 position: Position | None = None) -> DeadLetter:
    return DeadLetter(source=f"connector.nvsentinel:{instance}", reason=reason, original=original,
                      original_key=key, position=position or Position(), at_ns=time.time_ns()).with_id()


def _records_of(value: Any, original: bytes, *, instance: str, transport_ns: int, cluster: str,
                workload_id: str | None, position: Position, key: bytes | None = None,
                stats: _Counts) -> list[BaseModel]:
    """Observations and dead letters of one decoded JSON value."""
    items = health_event_values(value)
    out: list[BaseModel] = []
    for obj, envelope_cluster in items:
        try:
            event, at = parse_health_event(obj)
        except HealthEventError as exc:
            stats.dead += 1
            raw = original if len(items) == 1 else json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()
            out.append(_dead_letter(instance, f"not a HealthEvent: {exc}", raw, key=key, position=position))
            continue
        stats.events += 1
        out.append(to_observation(event, at, instance=instance, transport_ns=transport_ns,
                                  cluster=cluster or envelope_cluster, workload_id=workload_id, position=position))
    return out


@dataclass
class _Counts:
    events: int = 0
    dead: int = 0
    waiting_bytes: int = 0
    notes: list[str] = field(default_factory=list)


def _record_key(record: BaseModel) -> str:
    if isinstance(record, Observation):
        return record.host
    if isinstance(record, DeadLetter):
        return record.source
    if isinstance(record, HealthEvent):
        return record.nodeName
    raise TypeError(f"no key for {type(record).__name__}")


# -- the file reader -----------------------------------------------------------------------------

#: Bytes read from one file per poll (the rest waits for the next poll).
MAX_PASS_BYTES = 16 << 20
_WS = re.compile(r"[ \t\r\n\ufeff]*")

#: Bytes of a binary file kept in its one dead letter (the head, to recognise the file).
BINARY_SAMPLE_BYTES = 4096


class HealthEventFiles:
    """HealthEvents from JSON files (a stream of JSON values: JSON Lines, concatenated or
    pretty-printed objects, arrays), read from a persisted byte offset.

    ``paths``: the files (need not exist yet). ``cursor``: where the offsets are loaded from
    (``{"files": {<absolute path>: {"dev", "ino", "offset", "line"}}}``; the runner saves
    :meth:`checkpoint`). ``cluster`` / ``workload_id``: copied into every Observation
    (``cluster`` overrides an envelope's). A value still being written (no newline after the point
    where it breaks off) waits for the next poll; a value that cannot be parsed is dead-lettered up
    to the end of the line where it broke, and reading goes on after it. A file replaced by another
    (new inode) or truncated is read again from its start. Raises ``CursorError`` (from the
    store) for a corrupt cursor."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]], *, cursor: CursorStore | None,
                 cluster: str = "", workload_id: str | None = None) -> None:
        self.paths = list(dict.fromkeys(os.path.abspath(os.fspath(p)) for p in paths))
        self.cursor = cursor
        self.cluster = cluster
        self.workload_id = workload_id
        saved = (cursor.load().get("files") or {}) if cursor is not None else {}
        self._state: dict[str, dict[str, int]] = {p: dict(saved[p]) for p in self.paths if isinstance(saved.get(p), dict)}
        self._saved = {p: dict(v) for p, v in self._state.items()}
        self._counts = {p: _Counts() for p in self.paths}
        self._more = False
        self._decoder = json.JSONDecoder()

    @property
    def pending(self) -> bool:
        """True when a file had more than :data:`MAX_PASS_BYTES` waiting."""
        return self._more

    def key(self, record: BaseModel) -> str:
        """Kafka key: the host of an Observation, the source of a dead letter."""
        return _record_key(record)

    def poll(self) -> list[BaseModel]:
        """The Observations and dead letters of the JSON values completed since the last poll."""
        out: list[BaseModel] = []
        self._more = False
        for path in self.paths:
            try:
                out += self._poll_file(path)
            except OSError as exc:
                self._counts[path].notes.append(f"cannot read: {exc}")
        return out

    def _poll_file(self, path: str) -> list[BaseModel]:
        counts = self._counts[path]
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return []
        state = self._state.get(path)
        if state is None or (state.get("dev"), state.get("ino")) != (st.st_dev, st.st_ino) or st.st_size < state.get("offset", 0):
            if state is not None:
                counts.notes.append("replaced or truncated: read again from the start")
            state = {"dev": st.st_dev, "ino": st.st_ino, "offset": 0, "line": 1}
            self._state[path] = state
        offset, line = int(state["offset"]), int(state["line"])
        with open(path, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read(MAX_PASS_BYTES)
        if not chunk:
            return []
        if offset == 0 and is_binary(chunk[:BINARY_SAMPLE_BYTES]):
            # not JSON text (an archive, a core file): one dead letter for the file, which is
            # then passed over until it is replaced
            counts.dead += 1
            state["offset"] = st.st_size
            return [_dead_letter(path, "not a HealthEvent file: binary content (NUL bytes), not JSON text",
                                 chunk[:BINARY_SAMPLE_BYTES], position=Position(file=path, line=1))]
        self._more = self._more or len(chunk) == MAX_PASS_BYTES
        text = chunk.decode("utf-8", "surrogateescape")
        out: list[BaseModel] = []
        pos = 0
        counts.waiting_bytes = 0
        while True:
            skip = _WS.match(text, pos).end()  # type: ignore[union-attr]
            line += text.count("\n", pos, skip)
            pos = skip
            if pos >= len(text):
                break
            where = Position(file=path, line=line)
            try:
                value, end = self._decoder.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                nl = text.find("\n", exc.pos)
                if nl < 0:  # broken off at the end: the rest is still being written
                    counts.waiting_bytes = len(text[pos:].encode("utf-8", "surrogateescape"))
                    break
                bad = text[pos:nl + 1]
                at_line = line + text.count("\n", pos, exc.pos)
                counts.dead += 1
                out.append(_dead_letter(path, f"invalid JSON: {exc.msg} at line {at_line}",
                                        bad.encode("utf-8", "surrogateescape"), position=where))
                line += bad.count("\n")
                pos = nl + 1
                continue
            raw = text[pos:end].encode("utf-8", "surrogateescape")
            out += _records_of(value, raw, instance=path, transport_ns=st.st_mtime_ns, cluster=self.cluster,
                               workload_id=self.workload_id, position=where, stats=counts)
            line += text.count("\n", pos, end)
            pos = end
        state["offset"] = offset + len(text[:pos].encode("utf-8", "surrogateescape"))
        state["line"] = line
        return out

    def checkpoint(self) -> dict[str, Any]:
        """``{"files": {path: {"dev", "ino", "offset", "line"}}}`` after the last poll."""
        self._saved = {p: dict(v) for p, v in self._state.items()}
        return {"files": {p: dict(v) for p, v in sorted(self._state.items())}}

    def rewind(self) -> None:
        """Back to the last checkpoint: the next poll returns the same records again."""
        self._state = {p: dict(v) for p, v in self._saved.items()}
        self._more = False

    def coverage(self) -> list[CoverageEntry]:
        """One entry per file: events read (``records``), dead letters (``unparsed``), notes."""
        entries = []
        for path in self.paths:
            c = self._counts[path]
            notes = list(c.notes)
            if c.waiting_bytes:
                notes.append(f"{c.waiting_bytes} bytes of an incomplete JSON value wait for the rest")
            status = "present" if c.events else ("failed" if c.dead else "empty")
            entries.append(CoverageEntry(source=f"file:{path}", status=status, records=c.events, unparsed=c.dead,
                                         detail="; ".join(notes)))
        return entries


# -- Kafka ---------------------------------------------------------------------------------------

class HealthEventTopic:
    """HealthEvents from a Kafka topic (each message one JSON value, any of the forms the
    module docstring lists), read by consumer group ``group``; committed offsets are the cursor
    (:attr:`cursor`, saved by the runner after the flush). ``config``: confluent_kafka settings
    (``KafkaSettings.confluent_config()``)."""

    def __init__(self, config: dict[str, Any], topic: str, *, group: str, cluster: str = "",
                 workload_id: str | None = None, **reader: Any) -> None:
        self.reader = _TopicReader(config, topic, group, **reader)
        self.cursor = self.reader.cursor
        self.cluster = cluster
        self.workload_id = workload_id
        self._counts = _Counts()

    pending = property(lambda self: self.reader.pending, doc="See :attr:`_TopicReader.pending`.")

    def key(self, record: BaseModel) -> str:
        """Kafka key: the host of an Observation, the source of a dead letter."""
        return _record_key(record)

    def poll(self) -> list[BaseModel]:
        """The Observations and dead letters of the next batch of messages."""
        out: list[BaseModel] = []
        for msg in self.reader.messages():
            raw = msg.value()
            where = Position(topic=msg.topic(), partition=msg.partition(), offset=msg.offset())
            if raw is None:
                self._counts.dead += 1
                out.append(_dead_letter(self.reader.topic, "tombstone: no value", None, key=msg.key(), position=where))
                continue
            try:
                value = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                self._counts.dead += 1
                reason = f"invalid JSON: {str(exc).splitlines()[0][:200]}"
                out.append(_dead_letter(self.reader.topic, reason, raw, key=msg.key(), position=where))
                continue
            out += _records_of(value, raw, instance=self.reader.topic, transport_ns=_message_ns(msg),
                               cluster=self.cluster, workload_id=self.workload_id, position=where,
                               key=msg.key(), stats=self._counts)
        return out

    def checkpoint(self) -> dict[str, Any]:
        """The next offsets (committed by :attr:`cursor`)."""
        return self.reader.checkpoint()

    def rewind(self) -> None:
        """Seek back to the committed offsets."""
        self.reader.rewind()

    def coverage(self) -> list[CoverageEntry]:
        """One entry for the topic: events read, dead letters."""
        c = self._counts
        return [CoverageEntry(source=f"kafka:{self.reader.topic}", status="present" if c.events else "empty",
                              records=c.events, unparsed=c.dead,
                              detail=f"{self.reader.consumed} messages, {c.dead} dead-lettered")]

    def close(self) -> None:
        self.reader.close()


# -- verdicts -> HealthEvents ---------------------------------------------------------------------

@dataclass(frozen=True)
class BridgeOptions:
    """How verdicts become HealthEvents. ``reboot_action``: the RecommendedAction of a reboot
    (``RESTART_BM`` bare metal, ``RESTART_VM`` a VM). ``processing_strategy``:
    ``EXECUTE_REMEDIATION`` (NVSentinel may act) or ``STORE_ONLY`` (observe only). ``scopes``: the
    verdict scopes published (``workload``; ``incident`` verdicts repeat their members' hosts)."""

    reboot_action: str = "RESTART_BM"
    processing_strategy: str = "EXECUTE_REMEDIATION"
    scopes: tuple[str, ...] = ("workload",)
    agent: str = "faultstream"


_COMPONENT = {"gpu_hardware": "GPU", "gpu_software": "GPU", "fabric": "NIC"}
_XID_CODE = re.compile(r"^(?:gpu|app)\.xid\.(\d+)$")


def is_final(data: dict[str, Any]) -> bool:
    """Whether an attribution record (its JSON object) is a final verdict: ``status == "final"``
    when it has a ``status``, else its ``final`` flag (``True`` when absent, the model default)."""
    if "status" in data:
        return data.get("status") == "final"
    return data.get("final", True) is True


def recommended_action(att: Attribution, policy: Policy, options: BridgeOptions = BridgeOptions()) -> tuple[str, str | None]:
    """(RecommendedAction name, the policy rule id or None) for a verdict: the action of
    faultstream's remediation policy rule for it (:data:`transport.nvsentinel.ACTION_MAP`, the most severe of the
    rule's actions other than drain/cordon, else drain/cordon's), ``NONE`` for an ``ambiguous`` or
    ``insufficient`` verdict (never quarantine on weak evidence) and when no rule matches."""
    if att.quality in ("ambiguous", "insufficient") or att.root_cause is None:
        return "NONE", None
    rule = policy.select(att, verdict_facts(att))
    if rule is None:
        return "NONE", None
    kinds = [a.action for a in rule.actions]
    main = [k for k in kinds if k not in ("drain", "cordon", "notify")] or [k for k in kinds if k != "notify"]
    if not main:
        return "NONE", rule.id
    kind = max(main, key=lambda k: SEVERITY[k])
    action = options.reboot_action if kind == "reboot" else ACTION_MAP[kind]
    return action, rule.id


def _domain_check(domain: str) -> str:
    return "Faultstream" + "".join(part.capitalize() for part in domain.split("_"))


def _entities(att: Attribution) -> list[Entity]:
    out: list[Entity] = []
    for g in sorted(att.culprits.gpus, key=lambda g: (g.index if g.index is not None else -1, g.pci_bus_id or "", g.uuid or "")):
        if g.index is not None:
            out.append(Entity(entityType="GPU", entityValue=str(g.index)))
        if g.pci_bus_id:
            out.append(Entity(entityType="PCI", entityValue=g.pci_bus_id))
        if g.uuid:
            out.append(Entity(entityType="GPU_UUID", entityValue=g.uuid))
    return out


def verdict_health_events(att: Attribution, policy: Policy, options: BridgeOptions = BridgeOptions()) -> list[HealthEvent]:
    """The HealthEvents of one final verdict: one per culprit host (sorted), none for a scope
    outside ``options.scopes``, a completed workload, a verdict without culprit hosts or without a
    root cause (a withdrawal). See the
    module docstring for the fields; :func:`recommended_action` for the action. A
    ``COMPONENT_RESET`` without a GPU UUID among the entities becomes the reboot action
    (NVSentinel resets a GPU by its UUID; its GPU monitor falls back the same way)."""
    hosts = sorted(set(att.culprits.hosts))
    if att.scope.kind not in options.scopes or att.outcome == "completed" or not hosts or att.root_cause is None:
        return []
    action, rule_id = recommended_action(att, policy, options)
    code = att.root_cause.code
    codes = [code]
    m = _XID_CODE.match(code)
    if m:
        codes.append(m.group(1))
    component = _COMPONENT.get(att.domain, "INFRASTRUCTURE")
    if code.startswith(("gpu.sxid.", "fm.")):
        component = "NVSWITCH"
    where = f"{att.scope.kind} {att.scope.id}" + (f" ({att.scope.cluster})" if att.scope.cluster else "")
    message = (f"{att.root_cause.text} [faultstream verdict on {where}, revision {att.revision}: {att.domain} "
               f"{code}, quality {att.quality}, confidence {att.confidence:.2f}]")
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE - 3] + "..."
    metadata = {
        "faultstream_attribution_id": att.attribution_id,
        "faultstream_revision": str(att.revision),
        "faultstream_scope": f"{att.scope.kind}/{att.scope.id}",
        "faultstream_root_cause": code,
        "faultstream_domain": att.domain,
        "faultstream_quality": att.quality,
        "faultstream_confidence": f"{att.confidence:.4f}",
        "faultstream_ruleset_version": att.ruleset_version,
    }
    if att.scope.cluster:
        metadata["faultstream_cluster"] = att.scope.cluster
    if att.incident_id:
        metadata["faultstream_incident_id"] = att.incident_id
    if rule_id:
        metadata["faultstream_policy_rule"] = rule_id
    out = []
    for host in hosts:
        entities = _entities(att) if len(hosts) == 1 else []
        act = action
        if act == "COMPONENT_RESET" and not any(e.entityType == "GPU_UUID" for e in entities):
            act = options.reboot_action
        out.append(HealthEvent(
            version=1, agent=options.agent, componentClass=component, checkName=_domain_check(att.domain),
            isFatal=act != "NONE", isHealthy=False, message=message, recommendedAction=act, errorCode=codes,
            entitiesImpacted=entities, metadata=metadata, generatedTimestamp=format_utc(att.decided_at),
            nodeName=host, processingStrategy=options.processing_strategy,
        ))
    return out


class VerdictBridge:
    """Final verdicts from the attributions topic -> HealthEvents (:func:`verdict_health_events`),
    for :func:`connectors.runner.run` (publish to the HealthEvent topic; the consumer group's
    committed offsets are the cursor). Provisional verdicts are skipped (counted); a record that
    is not a verdict becomes a dead letter."""

    def __init__(self, config: dict[str, Any], topic: str, *, group: str, policy: Policy | None = None,
                 options: BridgeOptions = BridgeOptions(), **reader: Any) -> None:
        self.reader = _TopicReader(config, topic, group, **reader)
        self.cursor = self.reader.cursor
        self.policy = policy if policy is not None else load_policy()
        self.options = options
        self.verdicts = 0  #: final verdicts read
        self.provisional = 0  #: provisional verdicts skipped
        self.published = 0  #: HealthEvents made
        self.dead = 0

    pending = property(lambda self: self.reader.pending, doc="See :attr:`_TopicReader.pending`.")

    def key(self, record: BaseModel) -> str:
        """Kafka key: ``nodeName`` of a HealthEvent, the source of a dead letter."""
        return _record_key(record)

    def poll(self) -> list[BaseModel]:
        """The HealthEvents (and dead letters) of the next batch of attribution records."""
        out: list[BaseModel] = []
        for msg in self.reader.messages():
            raw = msg.value()
            where = Position(topic=msg.topic(), partition=msg.partition(), offset=msg.offset())
            if raw is None:  # a compacted topic's tombstone: nothing to publish
                continue
            try:
                data = json.loads(raw.decode("utf-8"))
                if not isinstance(data, dict):
                    raise TypeError(f"expected a JSON object, got {type(data).__name__}")
                final = is_final(data)
                for name in ("status", "final"):  # whichever of the two the model does not have
                    if name not in Attribution.model_fields:
                        data.pop(name, None)
                att = Attribution.model_validate(data)
            except (UnicodeDecodeError, ValueError, TypeError, RecursionError) as exc:  # ValidationError: a ValueError
                self.dead += 1
                out.append(DeadLetter(source="connector.nvsentinel:verdicts", reason=f"not a verdict: {reason_of(exc)}",
                                      original=raw, original_key=msg.key(), position=where,
                                      at_ns=time.time_ns()).with_id())
                continue
            if not final:
                self.provisional += 1
                continue
            self.verdicts += 1
            events = verdict_health_events(att, self.policy, self.options)
            self.published += len(events)
            out += events
        return out

    def checkpoint(self) -> dict[str, Any]:
        """The next offsets (committed by :attr:`cursor`)."""
        return self.reader.checkpoint()

    def rewind(self) -> None:
        """Seek back to the committed offsets."""
        self.reader.rewind()

    def coverage(self) -> list[CoverageEntry]:
        """One entry for the attributions topic."""
        return [CoverageEntry(source=f"kafka:{self.reader.topic}", status="present" if self.verdicts else "empty",
                              records=self.verdicts, unparsed=self.dead,
                              detail=f"{self.provisional} provisional verdicts skipped, {self.published} HealthEvents")]

    def close(self) -> None:
        self.reader.close()


# -- the platform connector's gRPC interface -------------------------------------------------------

@dataclass
class _Batch:
    """The records of one received call and the event its handler waits on."""

    records: list[BaseModel]
    done: threading.Event = field(default_factory=threading.Event)


class _Acks:
    """The receiver's cursor: saving it (after the runner's flush) answers the calls whose records
    were just delivered."""

    def __init__(self, receiver: "HealthEventReceiver") -> None:
        self.receiver = receiver

    def save(self, state: dict[str, Any]) -> None:
        """Acknowledge every batch polled so far (``state`` is only informational)."""
        self.receiver.acknowledge()


class HealthEventReceiver:
    """HealthEvents in over NVSentinel's own interface: a ``datamodels.PlatformConnector`` gRPC
    server (:func:`transport.nvsentinel.serve`) whose events become ``health_event`` Observations
    (:func:`to_observation`, the same mapping as files and topics); a
    :class:`connectors.source.Source` for :func:`connectors.runner.run`.

    An event that is not a usable HealthEvent becomes a dead letter (reason, the event's protobuf
    bytes). A call returns only once its records are on Kafka: the runner saves :attr:`cursor`
    after its flush, which acknowledges the batches polled; a call not acknowledged within
    ``ack_timeout_s`` seconds fails ``UNAVAILABLE`` so the sender retries (same ids, duplicates
    collapse downstream). A call with no usable record returns at once.

    ``listen``: address to bind (``unix:///run/faultstream/nvsentinel.sock``, ``0.0.0.0:50051``,
    ``127.0.0.1:0`` for a free port; :attr:`address` is the bound one after :meth:`start`).
    ``cluster`` / ``workload_id``: set on every observation. ``block_s``: how long a poll waits
    for a first call (seconds); the runner polls again at once (:attr:`wait_s` 0), so a call is
    delivered and answered as soon as it arrives, not at the next interval."""

    pending = False
    #: seconds the runner waits between polls: a poll itself waits for calls (``block_s``)
    wait_s = 0.0

    def __init__(self, listen: str, *, cluster: str = "", workload_id: str | None = None,
                 ack_timeout_s: float = 30.0, max_workers: int = 4, block_s: float = 0.5) -> None:
        self.block_s = block_s
        self.listen = self.address = listen
        self.cluster = cluster
        self.workload_id = workload_id
        self.ack_timeout_s = ack_timeout_s
        self.max_workers = max_workers
        self.cursor = _Acks(self)
        self.stats = _Counts()
        self.calls = 0  #: calls received
        self.batches = 0  #: batches polled (the checkpoint)
        self.timeouts = 0  #: calls answered UNAVAILABLE: delivery took longer than ack_timeout_s
        self._queue: queue.SimpleQueue[_Batch] = queue.SimpleQueue()
        self._inflight: list[_Batch] = []
        self._requeued: list[_Batch] = []
        self._lock = threading.Lock()
        self._server: Any = None

    def start(self) -> str:
        """Bind and serve; returns the bound address. Raises
        :class:`transport.nvsentinel.PlatformConnectorError` when the address cannot be bound."""
        self._server, self.address = serve(self.listen, self._handle, max_workers=self.max_workers)
        return self.address

    def _handle(self, events: list[tuple[dict[str, Any], bytes]]) -> str | None:
        self.calls += 1
        now = time.time_ns()
        records: list[BaseModel] = []
        for obj, raw in events:
            records += _records_of(obj, raw, instance=f"grpc:{self.address}", transport_ns=now, cluster=self.cluster,
                                   workload_id=self.workload_id, position=Position(), stats=self.stats)
        if not records:
            return None
        batch = _Batch(records)
        self._queue.put(batch)
        if batch.done.wait(self.ack_timeout_s):
            return None
        self.timeouts += 1
        return f"{len(records)} records not delivered to Kafka within {self.ack_timeout_s:g} s; retry"

    def poll(self) -> list[BaseModel]:
        """The records of the calls received since the last poll, in arrival order; waits up to
        ``block_s`` seconds for a first call when none is waiting."""
        with self._lock:
            batches, self._requeued = self._requeued, []
        if not batches:
            try:
                batches.append(self._queue.get(timeout=self.block_s))
            except queue.Empty:
                return []
        with self._lock:
            while True:
                try:
                    batches.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._inflight += batches
            self.batches += len(batches)
        return [r for b in batches for r in b.records]

    def checkpoint(self) -> dict[str, Any]:
        """``{"batches": n}``, the calls polled so far: it changes with every non-empty poll, so
        the runner saves :attr:`cursor` (the acknowledgement) after each delivered batch."""
        return {"batches": self.batches}

    def acknowledge(self) -> None:
        """Answer the calls of every batch polled so far (their records are delivered)."""
        with self._lock:
            done, self._inflight = self._inflight, []
        for b in done:
            b.done.set()

    def rewind(self) -> None:
        """Hand the unacknowledged batches to the next poll again (a failed delivery)."""
        with self._lock:
            self.batches -= len(self._inflight)
            self._requeued = self._inflight + self._requeued
            self._inflight = []

    def coverage(self) -> list[CoverageEntry]:
        """One entry for the server: events read, dead letters, calls, delivery timeouts."""
        return [CoverageEntry(source=f"grpc:{self.address}", status="present" if self.stats.events else "empty",
                              records=self.stats.events, unparsed=self.stats.dead,
                              detail=f"{self.calls} HealthEventOccurredV1 calls, {self.timeouts} not acknowledged in time")]

    def close(self, grace_s: float = 2.0) -> None:
        """Stop serving (calls in progress get ``grace_s`` seconds)."""
        if self._server is not None:
            self._server.stop(grace_s).wait()
            self._server = None


class PlatformConnectorProducer:
    """Stands in for the Kafka producer of :func:`connectors.runner.run` when the bridge sends its
    HealthEvents to NVSentinel's platform connector (``--platform-connector``): :meth:`send`
    buffers HealthEvents and hands any other record (a dead letter) to ``kafka`` for
    ``deadletter_topic``; :meth:`flush` sends the buffered events in one ``HealthEventOccurredV1``
    call, then flushes ``kafka``. Raises :class:`transport.nvsentinel.PlatformConnectorError`
    when the call fails (the runner rewinds; the events come again)."""

    def __init__(self, client: PlatformConnectorClient, kafka: Any, *, deadletter_topic: str) -> None:
        self.client = client
        self.kafka = kafka
        self.deadletter_topic = deadletter_topic
        self._events: list[HealthEvent] = []
        self.sent = 0  #: HealthEvents the platform connector accepted

    def send(self, key: str, record: BaseModel, *, topic: str | None = None) -> None:
        """Buffer a HealthEvent; send any other record to the dead-letter topic."""
        if isinstance(record, HealthEvent):
            self._events.append(record)
        else:
            self.kafka.send(key, record, topic=self.deadletter_topic)

    def flush(self, timeout: float = 60.0) -> int:
        """Send the buffered HealthEvents, then flush Kafka (its return value)."""
        events, self._events = self._events, []
        self.sent += self.client.send([e.model_dump(mode="json", exclude_none=True) for e in events])
        return self.kafka.flush(timeout)


# -- CLI -------------------------------------------------------------------------------------------

@connector(interval=2.0, cursor=".state/cursors/nvsentinel.json", errors=(KafkaReadError, PolicyError, PlatformConnectorError))
def connect_nvsentinel_cli(
    opts: Shared,
    files: Annotated[list[Path] | None, typer.Argument(help="files of NVSentinel HealthEvents (JSON Lines, arrays, event-exporter CloudEvents)")] = None,
    from_topic: Annotated[str | None, typer.Option("--from-topic", help="read HealthEvents from this Kafka topic instead of files")] = None,
    publish_verdicts: Annotated[bool, typer.Option("--publish-verdicts", help="bridge: publish final verdicts of the attributions topic as HealthEvents")] = False,
    attributions_topic: Annotated[str | None, typer.Option(help="with --publish-verdicts: verdicts to read (default: the catalogue's attributions topic)")] = None,
    health_topic: Annotated[str | None, typer.Option(help=f"with --publish-verdicts: HealthEvent topic (default: <prefix>.{HEALTH_TOPIC})")] = None,
    group: Annotated[str | None, typer.Option(help="Kafka consumer group (default: faultstream-nvsentinel-in / faultstream-nvsentinel-verdicts)")] = None,
    cluster: Annotated[str, typer.Option(help="cluster name of the observations (default: the event exporter's, else empty)")] = "",
    workload: Annotated[str | None, typer.Option(help="workload id to attach to the observations")] = None,
    deadletter_topic: Annotated[str | None, typer.Option(help="dead-letter topic (default: the catalogue's)")] = None,
    reboot_action: Annotated[str, typer.Option(help="RecommendedAction of a reboot: RESTART_BM or RESTART_VM")] = "RESTART_BM",
    store_only: Annotated[bool, typer.Option("--store-only", help="publish with processingStrategy STORE_ONLY (NVSentinel records, never acts)")] = False,
    scope: Annotated[list[str] | None, typer.Option("--scope", help="verdict scopes to publish (repeatable; default: workload)")] = None,
    policy: Annotated[Path | None, typer.Option(help="remediation policy deciding recommendedAction (default: the packaged one)")] = None,
    assign_timeout_s: Annotated[float, typer.Option("--assign-timeout-s", min=0.1, help="give up when no partition of the topic is assigned within this many seconds")] = 30.0,
    listen: Annotated[str | None, typer.Option("--listen", help="serve NVSentinel's PlatformConnector gRPC service on this address (unix:///run/faultstream/nvsentinel.sock, 0.0.0.0:50051) and publish the HealthEvents it receives; always follows")] = None,
    platform_connector: Annotated[str | None, typer.Option("--platform-connector", help="with --publish-verdicts: send the HealthEvents over gRPC to NVSentinel's platform connector at this address (unix:///var/run/nvsentinel.sock) instead of the Kafka topic")] = None,
    ack_timeout_s: Annotated[float, typer.Option("--ack-timeout-s", min=0.1, help="with --listen: a call fails UNAVAILABLE (the sender retries) when its events are not on Kafka within this many seconds")] = 30.0,
) -> Generator[Any, Any, None]:
    """NVSentinel interop: read its HealthEvents as observations, or (--publish-verdicts) publish final verdicts as HealthEvents.

    Reading (files, --from-topic, or --listen): every HealthEvent becomes a health_event observation (host = nodeName, the GPU from entitiesImpacted) on the observations topic (--topic); input that is no HealthEvent goes to the dead-letter topic with the reason. Files resume from the saved cursor (--cursor); a topic from the consumer group's committed offsets, committed only after delivery. --listen serves NVSentinel's PlatformConnector gRPC service (HealthEventOccurredV1) so its monitors can send to faultstream directly; a call is answered as soon as its events are on Kafka (--interval does not apply); it runs until Ctrl-C or SIGTERM.

    --publish-verdicts: every final verdict (final: true or status: final) of a workload with culprit hosts becomes one HealthEvent per culprit host on the HealthEvent topic (--health-topic, key = host): checkName Faultstream<Domain>, errorCode the root-cause code, recommendedAction from the remediation policy, isFatal when that is not NONE, generatedTimestamp the verdict's decided_at. With --platform-connector they go over gRPC to NVSentinel's platform connector instead (its quarantine, drain and remediation act on them).

    With --once (the default) any error exits 2 with one line on stderr; with --follow a failed poll, delivery or gRPC call is logged and retried."""
    modes = [bool(files), from_topic is not None, publish_verdicts, listen is not None]
    if sum(modes) != 1:
        raise ValueError("give HealthEvent files, --from-topic TOPIC, --listen ADDRESS or --publish-verdicts (exactly one)")
    if platform_connector is not None and not publish_verdicts:
        raise ValueError("--platform-connector goes with --publish-verdicts")
    if reboot_action not in ("RESTART_BM", "RESTART_VM"):
        raise ValueError(f"--reboot-action {reboot_action!r}: RESTART_BM or RESTART_VM")
    cat = catalogue()
    dl_topic = opts.routes[DeadLetter] = deadletter_topic or cat["deadletter"].name
    config = opts.kafka.confluent_config() if (from_topic is not None or publish_verdicts) else {}
    source: Any
    if publish_verdicts:
        opts.topic = health_topic or topic_name(HEALTH_TOPIC)
        options = BridgeOptions(reboot_action=reboot_action,
                                processing_strategy="STORE_ONLY" if store_only else "EXECUTE_REMEDIATION",
                                scopes=tuple(scope or ("workload",)))
        source = VerdictBridge(config, attributions_topic or cat["attributions"].name,
                               group=group or "faultstream-nvsentinel-verdicts",
                               policy=load_policy(policy), options=options, assign_timeout_s=assign_timeout_s)
        what = f"HealthEvents from {source.reader.topic}"
        if platform_connector is not None:
            client = PlatformConnectorClient(platform_connector)
            opts.through = lambda kafka: PlatformConnectorProducer(client, kafka, deadletter_topic=dl_topic)
    elif listen is not None:
        source = HealthEventReceiver(listen, cluster=cluster, workload_id=workload, ack_timeout_s=ack_timeout_s)
        source.start()
        opts.follow = True
        typer.echo(f"listening on {source.address} (datamodels.PlatformConnector/HealthEventOccurredV1)", err=True)
        what = f"observations received on {source.address}"
    elif from_topic is not None:
        source = HealthEventTopic(config, from_topic, group=group or "faultstream-nvsentinel-in",
                                  cluster=cluster, workload_id=workload, assign_timeout_s=assign_timeout_s)
        what = f"observations from {from_topic}"
    else:
        files = input_files(files or [], follow=opts.follow)
        source = HealthEventFiles(files, cursor=opts.cursor_store(), cluster=cluster, workload_id=workload)
        what = f"observations from {len(files or [])} files"
    done = yield source
    to = f"NVSentinel's platform connector at {platform_connector}" if platform_connector else opts.topic
    typer.echo(f"published {done.sent} records ({what}) to {to}", err=True)
