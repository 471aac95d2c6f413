"""Typed internal messages between the pipeline's stages (:mod:`correlators.pipeline`).

Five channels carry them; in the stream each is an internal Kafka topic, in replay an
in-memory queue:

* **workload** (key: ``<cluster>/<workload id>``): :data:`WorkloadMessage`;
* **host** (key: ``<cluster>/<host>``, a host window: the host's events no workload has
  claimed yet, its GPU table and node history): :data:`HostMessage`;
* **fabric** (key: cluster): :data:`FabricMessage`;
* **remediation** (key: cluster): :data:`RemediationMessage` -- verdicts, commands,
  allocations, certifications, executor results and ticks for the cluster's remediation engine;
* **alerts** (key: cluster): :data:`AlertMessage` -- verdicts, certifications and refresh ticks
  for the cluster's Alertmanager alerts (``streams/alerts.py``).

Each message is a JSON object with a ``kind`` discriminator. Times are UTC nanoseconds.
Parse with :func:`parse_workload_message` / :func:`parse_host_message` /
:func:`parse_fabric_message` (or the channel's entry in :data:`PARSERS`), which raise
``pydantic.ValidationError`` for anything else.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from schemas.bundle import WorkloadSpec
from schemas.records import Attribution, Certification, CoverageEntry, Event, RemediationCommand


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EventMessage(_Message):
    """An extracted (raw, unenriched) event, on either channel."""

    kind: Literal["event"] = "event"
    event: Event


class EventsMessage(_Message):
    """Several events for one workload-channel key, in the order they were routed: the same
    as one :class:`EventMessage` each, in that order (a driver batches the events it routes to
    one key, :func:`correlators.pipeline.batch_events`, so the 16,384 timeouts of a job on
    2,048 hosts are about 2,048 messages to the host windows rather than 16,384)."""

    kind: Literal["events"] = "events"
    events: list[Event] = Field(min_length=1)


class SpecMessage(_Message):
    """The scheduler's record of a workload attempt (``workload.yaml``'s model)."""

    kind: Literal["workload"] = "workload"
    spec: WorkloadSpec


class CoverageMessage(_Message):
    """A connector's coverage report for one source of a workload."""

    kind: Literal["coverage"] = "coverage"
    entry: CoverageEntry


class FaultsMessage(_Message):
    """The whole current set of fabric/rack fault events relevant to a workload."""

    kind: Literal["faults"] = "faults"
    events: list[Event]


class CloseMessage(_Message):
    """Close the workload's window now and emit its final verdict (the idle timer's tick)."""

    kind: Literal["close"] = "close"


class ReviseMessage(_Message):
    """Publish the workload's provisional revision held back by the minimum interval between
    provisional revisions (the driver's tick, once the interval passed); the window stays open."""

    kind: Literal["revise"] = "revise"


class Span(_Message):
    """A workload's time on its nodes: ``start`` and ``end`` in UTC ns (``end`` None while it
    runs), and the nodes' addresses (host -> IP, from the spec's ``hosts``) for naming ports."""

    workload_id: str
    cluster: str = ""
    nodes: list[str]
    start: int
    end: int | None = None
    ips: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of(cls, spec: WorkloadSpec) -> "Span":
        """The span of a workload spec."""
        return cls(workload_id=spec.workload_id, cluster=spec.cluster, nodes=sorted(spec.nodes),
                   start=spec.start_ns, end=spec.end_ns, ips={h: f.ip for h, f in sorted(spec.hosts.items()) if f.ip})

    def on(self, host: str) -> "Span":
        """This span on ``host`` alone (``nodes`` ``[host]``, ``ips`` the host's address if
        known): what a claim to the host's window carries, whatever the workload's size.
        Raises ``ValueError`` when ``host`` is not one of the span's nodes."""
        if host not in self.nodes:
            raise ValueError(f"{host!r} is not a node of workload {self.workload_id!r}")
        return self._on(host)

    def per_host(self) -> list["Span"]:
        """:meth:`on` each of the span's nodes, in their order (one pass over the nodes)."""
        return [self._on(host) for host in self.nodes]

    def _on(self, host: str) -> "Span":
        ip = self.ips.get(host)
        return self.model_copy(update={"nodes": [host], "ips": {host: ip} if ip is not None else {}})


class ClaimMessage(_Message):
    """To a host window (key ``<cluster>/<host>``): a workload now runs on the host; events of the
    host waiting there that fall in its window move to it. ``span`` is the workload's span on
    that host (:meth:`Span.on`, :meth:`Span.per_host`): the window reads its workload id and
    times only, and a 16,384-rank job's claims then cost 2,048 small messages, not 2,048
    copies of its node list."""

    kind: Literal["claim"] = "claim"
    span: Span


class GpuMessage(_Message):
    """To a host window: telemetry says these GPUs of ``host`` (normalised PCI bus id ->
    index) are there."""

    kind: Literal["gpu"] = "gpu"
    host: str
    gpus: dict[str, int]


class HistoryMessage(_Message):
    """To a host window: an XID event of the host (with the workload it was routed to, if
    any), kept as the node's history."""

    kind: Literal["history"] = "history"
    workload_id: str | None = None
    event: Event


class InterestMessage(_Message):
    """To a host window: ``workload_id`` holds an event of the host that names a GPU, so its
    verdict reads the host's facts (a workload without one never gets them)."""

    kind: Literal["interest"] = "interest"
    workload_id: str


class HostFactsMessage(_Message):
    """To a workload window: what one of its hosts knows -- its GPU table (PCI bus id ->
    index) and its history (XID events of earlier jobs, before the workload's start). The
    whole current set; it replaces the previous one."""

    kind: Literal["host_facts"] = "host_facts"
    host: str
    gpus: dict[str, int] = Field(default_factory=dict)
    history: list[Event] = Field(default_factory=list)


class TopologyMessage(_Message):
    """A cluster's topology (``schemas.bundle.TopologySpec`` as JSON data); None: the cluster's
    topology was deleted (a tombstone on the topology topic)."""

    kind: Literal["topology"] = "topology"
    topology: dict[str, Any] | None


class SpanMessage(_Message):
    """To the fabric channel: a workload's nodes and time span."""

    kind: Literal["span"] = "span"
    span: Span


class VerdictMessage(_Message):
    """To the fabric channel: a workload verdict (the latest revision wins)."""

    kind: Literal["verdict"] = "verdict"
    attribution: Attribution


class FlushMessage(_Message):
    """To the fabric channel: decide the cluster's deferred evidence now."""

    kind: Literal["flush"] = "flush"


# -- the remediation channel (key: cluster) ----------------------------------------------------


class VerdictInMessage(_Message):
    """To a cluster's remediation engine: a verdict (any scope) from the attributions topic."""

    kind: Literal["attribution"] = "attribution"
    attribution: Attribution


class CommandInMessage(_Message):
    """An authenticated operator command (approve, reject, ...), decided at ``received_at``
    (the worker's time of receipt, UTC ns; never the command's own ``at``). ``origin``: where it
    was read (``topic``, ``partition``, ``offset``, ``key``, ``original``: the record's text), for
    its dead letter if it is rejected."""

    kind: Literal["command"] = "command"
    command: RemediationCommand
    received_at: int
    origin: dict[str, Any] | None = None


class AllocationMessage(_Message):
    """A scheduler workload record's allocation: the nodes a verdict about ``workload_id`` may
    target. ``at``: the workload's end, else its start (UTC ns)."""

    kind: Literal["workload"] = "workload"
    cluster: str
    workload_id: str
    nodes: list[str]
    at: int


class CertificationInMessage(_Message):
    """A node certification result (NVCRE, dcgmi diag, ...) that may return a node to service."""

    kind: Literal["certification"] = "certification"
    certification: Certification


class ExecutedMessage(_Message):
    """An executor call finished (``executed``: an action ran; ``resumed``: a resume ran) for
    ``action_id`` at ``at`` (UTC ns); ``result``: the executor's ``ExecutionResult`` as JSON data."""

    kind: Literal["executed", "resumed"] = "executed"
    action_id: str
    at: int
    result: dict[str, Any]


class TickMessage(_Message):
    """A timer's tick: the remediation engine expires, times out and fails what waited on the
    clock; the alerts re-post their firing alerts before they lapse."""

    kind: Literal["tick"] = "tick"


RemediationMessage = Annotated[
    Union[VerdictInMessage, CommandInMessage, AllocationMessage, CertificationInMessage, ExecutedMessage,
          TickMessage],
    Field(discriminator="kind"),
]
_REMEDIATION = TypeAdapter(RemediationMessage)


def parse_remediation_message(data: bytes | str) -> Any:
    """A :data:`RemediationMessage` from its JSON. Raises ``pydantic.ValidationError``."""
    return _REMEDIATION.validate_json(data)


#: The alerts channel (key: cluster; ``streams.alerts``): verdicts, certifications, refresh ticks.
AlertMessage = Annotated[Union[VerdictInMessage, CertificationInMessage, TickMessage], Field(discriminator="kind")]
_ALERT = TypeAdapter(AlertMessage)


def parse_alert_message(data: bytes | str) -> Any:
    """An :data:`AlertMessage` from its JSON. Raises ``pydantic.ValidationError``."""
    return _ALERT.validate_json(data)


WorkloadMessage = Annotated[
    Union[EventMessage, EventsMessage, SpecMessage, CoverageMessage, FaultsMessage, CloseMessage,
          HostFactsMessage, ReviseMessage],
    Field(discriminator="kind"),
]
HostMessage = Annotated[
    Union[EventMessage, EventsMessage, ClaimMessage, GpuMessage, HistoryMessage, InterestMessage],
    Field(discriminator="kind"),
]
FabricMessage = Annotated[
    Union[EventMessage, TopologyMessage, SpanMessage, VerdictMessage, FlushMessage],
    Field(discriminator="kind"),
]

_WORKLOAD = TypeAdapter(WorkloadMessage)
_FABRIC = TypeAdapter(FabricMessage)
_HOST = TypeAdapter(HostMessage)


def parse_workload_message(data: bytes | str) -> Any:
    """A :data:`WorkloadMessage` from its JSON. Raises ``pydantic.ValidationError``."""
    return _WORKLOAD.validate_json(data)


def parse_host_message(data: bytes | str) -> Any:
    """A :data:`HostMessage` from its JSON. Raises ``pydantic.ValidationError``."""
    return _HOST.validate_json(data)


#: The parser of each channel's messages.
PARSERS = {"workload": parse_workload_message, "host": parse_host_message,
           "fabric": lambda data: _FABRIC.validate_json(data), "remediation": parse_remediation_message,
           "alerts": parse_alert_message}


def parse_fabric_message(data: bytes | str) -> Any:
    """A :data:`FabricMessage` from its JSON. Raises ``pydantic.ValidationError``."""
    return _FABRIC.validate_json(data)


def message_json(message: _Message) -> bytes:
    """The wire form of a message (compact JSON, fields in declaration order)."""
    return message.model_dump_json(exclude_none=False).encode()
