"""The records faultstream puts on every topic and in every table.

Four record types (see ``DESIGN.md`` § Records):

* :class:`Observation` -- one normalised input (a log record, a metric sample, ...).
* :class:`Event` -- a typed fact extracted from observations by a rule.
* :class:`Attribution` -- the verdict for one scope (workload attempt, fabric port, incident).
* :class:`RemediationAction` -- a proposed or executed remediation for a verdict.

Conventions shared by all of them:

* Times are integers, **nanoseconds since the Unix epoch, UTC** (fields ``*_at``, ``start``,
  ``end``), each with a text twin ``<name>_utc`` holding the same instant as RFC 3339 UTC with
  nine fractional digits (:mod:`schemas.utc`), for consumers whose JSON parser reads numbers as
  doubles. The twin is derived: it is filled from the integer, kept in step when the integer
  changes, and left out of every id and signature. An input may give either form; both given
  and naming different instants is a validation error. Durations carry their unit in the name
  (``timeout_ms``, ``ran_for_ms``).
* Every record has ``schema_version`` (the constant :data:`SCHEMA_VERSION`) and a
  deterministic id, a hash of its canonical content (:func:`content_id`; ``schema_version``
  and the time twins are not part of it), so duplicates from at-least-once delivery
  collapse.
* Transport positions (Kafka topic/partition/offset) are never part of an id, so the same input
  read from a file or from Kafka yields the same ids.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, ClassVar, Literal

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from schemas.utc import format_utc, parse_utc, twin_name

#: The version of every record schema (the contract's changelog: docs/contract-changelog.md).
SCHEMA_VERSION = 2
#: ``schema_version`` of a record: the constant :data:`SCHEMA_VERSION`, any other is refused.
SchemaVersion = Literal[2]

# -- bounds: every integer fits the ClickHouse column it is stored in (sinks/ddl.sql) -------

#: ``DateTime64(9, 'UTC')`` holds 1900-01-01 00:00:00 .. 2262-04-11 23:47:16.854775807 UTC
#: (nanoseconds since the epoch, an Int64).
TIME_NS_MIN = -2_208_988_800_000_000_000
TIME_NS_MAX = 2**63 - 1
#: Deepest nesting of lists and objects in ``attributes`` (the top-level object is depth 1).
MAX_ATTRIBUTE_DEPTH = 32
#: Most values (scalars, lists and objects, nested ones included) in one ``attributes``.
MAX_ATTRIBUTE_VALUES = 100_000

Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
UInt16 = Annotated[int, Field(ge=0, le=2**16 - 1)]
UInt32 = Annotated[int, Field(ge=0, le=2**32 - 1)]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
#: A time, UTC ns since the epoch, within the range of ``DateTime64(9, 'UTC')``.
TimeNs = Annotated[int, Field(ge=TIME_NS_MIN, le=TIME_NS_MAX,
                              json_schema_extra={"format": "int64"})]
#: The RFC 3339 twin of a :data:`TimeNs` field (:mod:`schemas.utc`).
TimeText = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


def check_json_value(value: Any, *, max_depth: int = MAX_ATTRIBUTE_DEPTH,
                     max_values: int = MAX_ATTRIBUTE_VALUES) -> Any:
    """Return ``value`` (JSON data: dicts, lists, str, int, float, bool, None) unchanged if it
    nests at most ``max_depth`` levels, holds at most ``max_values`` values and every integer
    fits an Int64; raise ``ValueError`` saying which bound it breaks. Iterative: no recursion
    limit is reached whatever the depth."""
    if type(value) is dict and max_depth >= 2 and len(value) < max_values:
        # the common case, a flat object of scalars, in one pass
        for item in value.values():
            kind = type(item)
            if kind is str or kind is float or kind is bool or item is None or (
                    kind is int and -(2**63) <= item <= 2**63 - 1):
                continue
            break
        else:
            return value
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > max_values:
            raise ValueError(f"more than {max_values} values")
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            if isinstance(item, int) and not isinstance(item, bool) and not -(2**63) <= item <= 2**63 - 1:
                raise ValueError(f"integer {item} out of the Int64 range")
            continue
        if depth >= max_depth and children:
            raise ValueError(f"nested deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children)
    return value


#: ``attributes`` of an observation or event: JSON data bounded by :func:`check_json_value`.
Attributes = Annotated[dict[str, Any], AfterValidator(check_json_value)]

#: Observation kinds, as DESIGN.md lists them.
ObservationKind = Literal[
    "log_line",
    "metric_sample",
    "scheduler_event",
    "fabric_counter",
    "telemetry",
    "topology",
    "certification",
    "health_event",
]
TimeSource = Literal["line", "transport", "inferred"]
Outcome = Literal["failed", "hung", "degraded", "preempted", "completed", "unknown"]
Domain = Literal[
    "gpu_hardware",
    "gpu_software",
    "fabric",
    "host",
    "software",
    "storage",
    "scheduler",
    "config",
    "unknown",
]
Quality = Literal["definitive", "probable", "ambiguous", "insufficient"]
ScopeKind = Literal["workload", "fabric_port", "incident"]
AttributionStatus = Literal["provisional", "final", "withdrawn"]
CoverageStatus = Literal["present", "empty", "failed", "lagging"]
EvidenceRole = Literal["cause", "symptom", "context"]
ActionKind = Literal[
    "cordon",
    "drain",
    "reset_gpu",
    "reboot",
    "reprovision",
    "rma",
    "recertify",
    "swap_hot_spare",
    "disable_port",
    "notify",
]
ActionMode = Literal["auto", "needs_approval", "dry_run"]
ActionState = Literal[
    "proposed", "approved", "executing", "done", "failed", "rejected", "expired", "cancelled"
]

#: ``time_quality`` levels (0..1). A timestamp parsed from the line itself with sub-second
#: precision is the best we get; each step down is a weaker claim about when it happened.
TIME_QUALITY_EXACT = 1.0  # sub-second timestamp in the line (ISO, glog, dmesg -T is seconds)
TIME_QUALITY_SECONDS = 0.9  # whole-second timestamp in the line (dmesg -T, NCCL prefix)
TIME_QUALITY_BOOT_RELATIVE = 0.8  # raw dmesg seconds since boot placed with the boot time
TIME_QUALITY_NO_YEAR = 0.7  # syslog without a year, year taken from the workload
TIME_QUALITY_MINUTES = 0.6  # minute resolution, no year (dmesg -H / --time-format reltime)
TIME_QUALITY_INHERITED = 0.5  # no time in the line: taken from a neighbouring line
TIME_QUALITY_TRANSPORT = 0.2  # no time anywhere near: taken from the transport/workload


def canonical_json(data: Any) -> str:
    """Serialise ``data`` (a model or plain JSON data) to canonical JSON.

    Keys are sorted, separators are compact and non-ASCII is kept as UTF-8 (orjson, the same
    bytes as ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``), so
    equal content gives equal bytes. This is the form ids are computed from and the form
    ``--json`` prints. Raises ``TypeError`` for values JSON cannot hold."""
    return _canonical_bytes(data).decode()


def _fields(value: Any) -> dict[str, Any]:
    # faultstream's records hold JSON-native values only, so their field dict is their JSON
    # form (and much cheaper to get); other models go through pydantic's JSON mode
    if isinstance(value, _Record) and value._json_native:
        return value.__dict__
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _canonical_bytes(data: Any) -> bytes:
    try:
        return orjson.dumps(data, default=_fields, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:
        raise TypeError(str(exc)) from exc


def _origin(position: "Position") -> dict[str, Any]:
    return {"file": position.file, "line": position.line}


def content_id(prefix: str, *parts: Any) -> str:
    """Return a deterministic id ``<prefix>-<24 hex>`` from the canonical JSON of ``parts``.

    The hash is BLAKE2b (96 bits shown): collisions are negligible at fleet scale, and the id
    stays short enough for ClickHouse primary keys and Kafka keys.
    """
    digest = hashlib.blake2b(_canonical_bytes(list(parts)), digest_size=12).hexdigest()
    return f"{prefix}-{digest}"


class _Record(BaseModel):
    """Base of every record model: JSON-native field values only (str, int, float, bool,
    None, lists, dicts and other records), which :func:`canonical_json` relies on."""

    model_config = ConfigDict(extra="forbid", frozen=False)
    #: False for a record holding values JSON cannot (bytes): :func:`canonical_json` then goes
    #: through pydantic's JSON mode
    _json_native: ClassVar[bool] = True


class _Timed(_Record):
    """Base of the records with time fields: every field ``X`` that has a field
    :func:`schemas.utc.twin_name` ``(X)`` beside it is a time (int UTC ns, or None) whose twin
    holds its RFC 3339 text.

    On validation a twin given alone sets its time; both given must name one instant (else
    ``ValueError``, so a producer whose JSON parser rounded the integer is caught); then the
    twin is written in the canonical form. Setting a time attribute, or ``model_copy(update=)``
    of one, rewrites its twin, so a twin is never stale."""

    #: time field -> its twin, per class (filled when the class is made).
    _twins: ClassVar[dict[str, str]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._twins = {name: twin_name(name) for name in cls.model_fields
                      if twin_name(name) != name and twin_name(name) in cls.model_fields}

    @model_validator(mode="before")
    @classmethod
    def _time_from_twin(cls, data: Any) -> Any:
        if type(data) is dict:
            for name, twin in cls._twins.items():
                if data.get(name) is None and data.get(twin) is not None:
                    data = {**data, name: parse_utc(data[twin])}
        return data

    @model_validator(mode="after")
    def _twin_from_time(self) -> "_Timed":
        d = self.__dict__
        for name, twin in self._twins.items():
            ns, given = d[name], d[twin]
            text = None if ns is None else format_utc(ns)
            if given is not None and given != text and (ns is None or parse_utc(given) != ns):
                raise ValueError(f"{name}={ns} and {twin}={given!r} name different instants "
                                 "(was the integer read as a double?)")
            d[twin] = text
        return self

    def _refresh_twins(self) -> None:
        d = self.__dict__
        for name, twin in self._twins.items():
            d[twin] = None if d[name] is None else format_utc(d[name])

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        twin = self._twins.get(name)
        if twin is not None:
            self.__dict__[twin] = None if value is None else format_utc(value)

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        """pydantic's ``model_copy``, with the twins of updated times rewritten."""
        out = super().model_copy(update=update, deep=deep)
        if update and not self._twins.keys().isdisjoint(update):
            out._refresh_twins()
        return out


def record_data(record: _Record) -> dict[str, Any]:
    """``record.model_dump()`` without its own time twins: the data to change some fields of
    and validate again (a twin left beside a changed time would contradict it)."""
    twins = getattr(record, "_twins", {})
    return record.model_dump(exclude=set(twins.values()) or None)


def _without_twins(record: "_Timed", *drop: str) -> dict[str, Any]:
    """The fields of ``record`` for an id or a signature: its ``__dict__`` less the time twins,
    ``schema_version`` (an id names the content, whatever the version of its envelope) and
    the names in ``drop``."""
    data = dict(record.__dict__)
    for name in (*record._twins.values(), "schema_version", *drop):
        del data[name]
    return data


class Source(_Record):
    """Where an observation came from: the connector and its instance (a bundle path, a
    Slurm cluster, a Prometheus URL, ...)."""

    connector: str
    instance: str = ""


class GpuRef(_Record):
    """A GPU as the logs name it: local index, UUID, PCI bus id (``0000:9c:00``, normalised
    to ``domain:bus:device`` without the function) -- any subset."""

    index: Int32 | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None


class Position(_Record):
    """Evidence trail position: the origin (``file`` relative to the bundle, 1-based ``line``)
    and, when the record travelled through Kafka, the transport position. Only the origin
    is part of ids."""

    file: str | None = None
    line: Int64 | None = None
    topic: str | None = None
    partition: Int32 | None = None
    offset: Int64 | None = None


class Observation(_Timed):
    """One normalised input record.

    ``body`` holds the raw text of a log record (several physical lines joined with ``\\n``
    for multi-line records such as tracebacks); ``metric`` holds numeric samples for
    telemetry. ``observed_at`` is UTC nanoseconds; ``time_source`` says whether it was read
    from the line, taken from the transport, or inferred from neighbouring lines, and
    ``time_quality`` (0..1, see ``TIME_QUALITY_*``) how much to trust it.
    """

    schema_version: SchemaVersion = SCHEMA_VERSION
    observation_id: str = ""
    source: Source
    kind: ObservationKind
    observed_at: TimeNs
    observed_at_utc: TimeText | None = None
    time_source: TimeSource
    time_quality: float = Field(ge=0.0, le=1.0)
    host: str
    cluster: str = ""
    workload_id: str | None = None
    rank: Int32 | None = None
    gpu: GpuRef | None = None
    fabric_port: str | None = None
    format: str = "unknown"
    body: str | None = None
    metric: dict[str, float] | None = None
    attributes: Attributes = Field(default_factory=dict)
    position: Position = Field(default_factory=Position)

    def with_id(self) -> "Observation":
        """Fill ``observation_id`` from the content (origin position included, transport
        position excluded) and return self."""
        data = _without_twins(self, "observation_id")
        data["position"] = _origin(self.position)
        self.observation_id = content_id("obs", data)
        return self


class EvidenceRef(_Record):
    """A pointer from an event to the observation it came from."""

    observation_id: str
    position: Position = Field(default_factory=Position)


class Event(_Timed):
    """A typed fact extracted by a rule.

    ``type`` is dotted (``gpu.xid``, ``nccl.watchdog_timeout``, ...); ``at`` is when the fact
    was logged (UTC ns). ``began_at`` is set when the line itself says the condition began
    earlier -- a PyTorch watchdog timeout is back-dated by its ``ran for N milliseconds``.
    ``peer`` is the other end named by the line (a host or ``ip:port``). ``rule`` is
    ``rule_id@version``.
    """

    schema_version: SchemaVersion = SCHEMA_VERSION
    event_id: str = ""
    type: str
    at: TimeNs
    at_utc: TimeText | None = None
    began_at: TimeNs | None = None
    began_at_utc: TimeText | None = None
    time_quality: float = Field(default=1.0, ge=0.0, le=1.0)
    host: str
    cluster: str = ""
    workload_id: str | None = None
    rank: Int32 | None = None
    gpu: GpuRef | None = None
    fabric_port: str | None = None
    peer: str | None = None
    attributes: Attributes = Field(default_factory=dict)
    rule: str
    evidence: list[EvidenceRef] = Field(default_factory=list)

    def with_id(self) -> "Event":
        """Fill ``event_id`` from the content (transport positions excluded) and return self."""
        data = _without_twins(self, "event_id")
        data["evidence"] = [
            {"observation_id": ref.observation_id, "position": _origin(ref.position)}
            for ref in self.evidence
        ]
        self.event_id = content_id("evt", data)
        return self

    @property
    def effective_at(self) -> int:
        """When the condition began: ``began_at`` if the line told us, else ``at``."""
        return self.began_at if self.began_at is not None else self.at


class Scope(_Record):
    """What a verdict is about: a workload attempt (``id`` = workload id), a fabric port
    (``id`` = the switch side ``<switch>/<port>`` when the topology knows the cable, else the
    end the evidence names in a :class:`Cable` form; a whole switch: its name), or an incident
    (``id`` = the incident id) that groups the verdicts of one fault across workloads."""

    kind: ScopeKind
    id: str
    cluster: str = ""


class Window(_Timed):
    """The event-time window a verdict was decided over, UTC ns, inclusive."""

    start: TimeNs
    start_utc: TimeText | None = None
    end: TimeNs
    end_utc: TimeText | None = None


class RootCause(_Record):
    """The decided cause: a dotted ``code`` (``gpu.xid.79``, ``proc.killed.sigkill``,
    ``config.nccl.duplicate_gpu``), a sentence for people, and the event that carries it."""

    code: str
    text: str
    event_id: str | None = None


class Cable(_Record):
    """One cable by its two ends, named by role: ``switch_port`` the switch side
    ``<switch>/<port>`` (``leaf-01/Ethernet16``, ``leaf-02/17``), ``host_port`` the host side
    ``<host>/<hca>/<port>`` (``node-a05/mlx5_0/1``: the RDMA device, or the PCI function or
    netdev the line named when no topology maps it, and the 1-based HCA port). An end the
    evidence and the topology do not name is None."""

    switch_port: str | None = None
    host_port: str | None = None


class Culprits(_Record):
    """What to act on. ``ports`` are port ids in the canonical forms of :class:`Cable`
    (``<switch>/<port>`` or ``<host>/<hca>/<port>``; a whole switch is its name in the scope
    id, never here); ``cables`` the same ports grouped by cable, each end named by role."""

    hosts: list[str] = Field(default_factory=list)
    ranks: list[Int32] = Field(default_factory=list)
    gpus: list[GpuRef] = Field(default_factory=list)
    ports: list[str] = Field(default_factory=list)
    cables: list[Cable] = Field(default_factory=list)


class Affected(_Record):
    """Who suffered: hosts and ranks that logged symptoms, workloads hit."""

    hosts: list[str] = Field(default_factory=list)
    ranks: list[Int32] = Field(default_factory=list)
    workloads: list[str] = Field(default_factory=list)


class EvidenceItem(_Timed):
    """One step of the evidence timeline, ordered by ``at`` (back-dated time for symptoms
    that carry one)."""

    at: TimeNs
    at_utc: TimeText | None = None
    event_id: str
    type: str
    role: EvidenceRole
    host: str
    rank: Int32 | None = None
    summary: str
    observations: list[EvidenceRef] = Field(default_factory=list)


class Alternative(_Record):
    """Another cause that fits the evidence, with its score (same scale as the winner's)."""

    code: str
    domain: Domain
    text: str
    score: float
    hosts: list[str] = Field(default_factory=list)
    ranks: list[int] = Field(default_factory=list)


class CoverageEntry(_Record):
    """How one input source fared: ``present`` (read, produced records), ``empty``,
    ``failed`` (could not be read or parsed) or ``lagging`` (behind the watermark).
    ``records`` counts records read, ``unparsed`` those no format recognised, ``events``
    the events extracted from it, ``unrecognised`` its error-severity records no rule knew
    (``log.unrecognised`` events, not counted in ``events``)."""

    source: str
    status: CoverageStatus
    records: int = 0
    unparsed: int = 0
    events: int = 0
    unrecognised: int = 0
    detail: str = ""


class UnrecognisedTemplate(_Timed):
    """A group of error-severity lines no rule knows (``log.unrecognised`` events), mined
    into one ``template`` by drain3 (variable parts ``<*>``, ``<NUM>``, ``<HEX>``, ``<IP>``,
    ``<PCI>``): how many lines, on which hosts, the first one's time (UTC ns) and text, its
    severity marker, and whether a line of it fell near the deciding cause (``near_cause``)."""

    template: str
    count: int
    hosts: list[str] = Field(default_factory=list)
    first_at: TimeNs
    first_at_utc: TimeText | None = None
    example: str
    severity: str = ""
    near_cause: bool = False


class UnexplainedSymptoms(_Timed):
    """Symptoms of one event type that the decided cause does not explain (wrong host, outside
    its time relation, or a type it cannot cause): how many, on which hosts and ranks, and the
    first one's effective time (UTC ns). A verdict that lists these explains only part of what
    went wrong."""

    type: str
    count: int = Field(ge=1)
    hosts: list[str] = Field(default_factory=list)
    ranks: list[int] = Field(default_factory=list)
    first_at: TimeNs
    first_at_utc: TimeText | None = None


class Cost(_Timed):
    """What the failure cost, from facts in the verdict's window (goodput lost). Times UTC ns.

    * ``lost_from`` -- when the cause began (its back-dated time); ``lost_until`` -- when the
      job ended, else the window's end (a job still hung); ``lost_s`` the seconds between;
    * ``gpus`` -- GPUs allocated: the workload's rank map (one GPU per rank), None when the
      scheduler record gives no ranks; ``nodes`` -- nodes allocated;
    * ``gpu_hours_lost`` = ``gpus * lost_s / 3600`` (None without ``gpus``),
      ``node_hours_lost`` = ``nodes * lost_s / 3600``;
    * ``noticed_at`` -- when something first said so: the first symptom logged at or after the
      cause (a watchdog timeout, a collective error) or the job's end, whichever came first;
      ``ran_after_cause_s`` the seconds from ``lost_from`` to it (None: nothing noticed yet);
    * ``verdict_after_s`` -- seconds from ``lost_from`` to this revision's ``decided_at`` (event
      time): for the stream's first, provisional revision, the time to faultstream's first
      verdict;
    * ``jobs_hit`` and ``nodes_hit`` -- workloads and hosts the fault reached (culprits and
      hosts with symptoms);
    * for a job that runs slow rather than failing (a straggler, ``outcome`` ``degraded``):
      ``goodput_lost_fraction`` -- the share of the job's speed lost, ``1 - healthy / observed``
      step time (0..1), from ``lost_from`` (since when it is slow); the hours above are that
      share of the allocation's hours; ``gpu_hours_lost_per_hour`` = ``gpus *
      goodput_lost_fraction``; ``healthy_step_s`` / ``observed_step_s`` -- the job's own
      iteration time before and after, when its logs print it (else None).

    An incident's or fabric port's cost sums its workload verdicts' hours. Figures are rounded
    to 4 decimals, so the same events give the same bytes."""

    lost_from: TimeNs
    lost_from_utc: TimeText | None = None
    lost_until: TimeNs
    lost_until_utc: TimeText | None = None
    lost_s: float = Field(ge=0)
    gpus: UInt32 | None = None
    nodes: UInt32 = 0
    gpu_hours_lost: float | None = Field(default=None, ge=0)
    node_hours_lost: float = Field(default=0.0, ge=0)
    noticed_at: TimeNs | None = None
    noticed_at_utc: TimeText | None = None
    ran_after_cause_s: float | None = Field(default=None, ge=0)
    verdict_after_s: float = Field(ge=0)
    jobs_hit: UInt32 = 0
    nodes_hit: UInt32 = 0
    goodput_lost_fraction: float | None = Field(default=None, ge=0, le=1)
    gpu_hours_lost_per_hour: float | None = Field(default=None, ge=0)
    healthy_step_s: float | None = Field(default=None, ge=0)
    observed_step_s: float | None = Field(default=None, ge=0)


class Fingerprint(_Record):
    """One host's stack as its own version lines state it (:func:`correlators.drift.fingerprint`):
    ``components`` maps ``nccl``, ``driver``, ``cuda``, ``kernel``, ``fabric_manager`` and
    ``hca_firmware/<device>`` (``hca_firmware`` when the line named no device) to the version
    text as logged (``570.124.06``, ``2.21.5+cuda12.4`` is logged as ``2.21.5``,
    ``6.8.0-45-generic``, ``28.39.1002``); the latest line of a component wins."""

    host: str
    components: dict[str, str] = Field(default_factory=dict)


class Attribution(_Timed):
    """The verdict for one scope.

    ``attribution_id`` is stable per scope (:func:`content_id` ``("att", "workload", cluster,
    workload_id)``, ``("att", "fabric_port", incident_id)`` or ``("att", "incident",
    incident_id)``); ``revision`` increases when late evidence changes the verdict.

    ``status`` is the verdict's lifecycle state: ``provisional`` while a stream worker's window
    is still open (decisive evidence arrived early; later revisions may change it), ``final``
    once the window closed (a replayed verdict is always final), ``withdrawn`` when a stream
    worker takes back a fabric or incident verdict the evidence no longer supports (two port
    faults that turned out to be one switch, an episode whose start moved). A withdrawal has no
    ``root_cause`` (None), no culprits, quality ``insufficient``, and ``superseded_by`` lists the
    incidents of the same cluster that replace it; on the compacted ``attributions`` topic it is
    followed by a tombstone for its key. Replay never withdraws: it sees all evidence at once. ``decided_at`` is event time (the window's end), never wall-clock time, so the
    same events always give byte-identical verdicts.

    ``incident_id`` links verdicts of one fault across workloads (a flapping switch port that
    broke two jobs): each workload verdict and the fabric verdict carry it, and the incident's
    own verdict (scope ``incident``) lists their attribution ids in ``members``.

    ``cost`` is what the failure cost (:class:`Cost`: GPU-hours lost, how long the job ran on
    after the cause, time to the verdict, jobs and nodes hit); None when no cause was found.

    ``fingerprints`` are the stacks (:class:`Fingerprint`) of the culprit hosts that stated their
    versions in the window's inputs, sorted by host; empty when none did.

    ``reasoning`` is the chain the verdict used, as short sentences in a fixed order (the
    cause and when, what it explains and leaves unexplained, what it absorbed, repetition on
    a GPU, rivals, and why the quality is what it is); like the rest of the verdict it is a
    pure function of the sorted events. ``unexplained`` lists, by event type, the symptoms the
    cause leaves unexplained (empty when it explains them all).
    """

    schema_version: SchemaVersion = SCHEMA_VERSION
    attribution_id: str
    revision: UInt32 = 1
    scope: Scope
    window: Window
    outcome: Outcome
    domain: Domain
    root_cause: RootCause | None
    culprits: Culprits = Field(default_factory=Culprits)
    affected: Affected = Field(default_factory=Affected)
    symptoms: list[str] = Field(default_factory=list)
    evidence: list[EvidenceItem] = Field(default_factory=list)
    confidence: float = Field(ge=0.0, le=1.0)
    quality: Quality
    alternatives: list[Alternative] = Field(default_factory=list)
    coverage: list[CoverageEntry] = Field(default_factory=list)
    unrecognised: list[UnrecognisedTemplate] = Field(default_factory=list)
    unexplained: list[UnexplainedSymptoms] = Field(default_factory=list)
    reasoning: list[str] = Field(default_factory=list)
    incident_id: str | None = None
    members: list[str] = Field(default_factory=list)
    cost: Cost | None = None
    fingerprints: list[Fingerprint] = Field(default_factory=list)
    status: AttributionStatus = "final"
    superseded_by: list[str] = Field(default_factory=list)
    ruleset_version: str
    engine_version: str
    decided_at: TimeNs
    decided_at_utc: TimeText | None = None

    @property
    def cause_code(self) -> str:
        """``root_cause.code``; ``""`` for a withdrawal (no root cause)."""
        return self.root_cause.code if self.root_cause is not None else ""


class RemediationTarget(_Record):
    """What an action acts on: a host, one of its GPUs, a fabric port (``switch/port``), or,
    for a ``recertify`` plan, a group of hosts."""

    host: str | None = None
    gpu: GpuRef | None = None
    port: str | None = None
    hosts: list[str] = Field(default_factory=list)


class GuardResult(_Record):
    """The outcome of one guard (circuit breaker, budget, cooldown, ...) for an action."""

    guard: str
    passed: bool
    detail: str = ""


class Decision(_Timed):
    """A person's (or a policy's) decision on an action: who, when (UTC ns, wall clock of the
    decision), why."""

    by: str
    at: TimeNs
    at_utc: TimeText | None = None
    reason: str = ""


class CertificationGroup(_Record):
    """One step of a bisection / certification plan: the hosts tested together, the test,
    and why (``screen`` a topology domain, ``halve`` a failing group padded with known-healthy
    hosts, ``pair`` a suspect with a healthy host)."""

    step: int
    stage: Literal["screen", "halve", "pair"]
    hosts: list[str]
    test: str
    reason: str = ""


class RemediationAction(_Timed):
    """A remediation proposed for a verdict, and its lifecycle state.

    One record per state transition: ``action_id`` is stable for one (incident, target,
    action) and ``sequence`` increases with every transition, so a consumer keeps the record
    with the highest ``sequence`` per ``action_id`` and duplicates or out-of-order deliveries
    never move an action backwards. Defaults to ``dry_run``: nothing is executed unless a
    policy says so. Times are UTC ns: ``created_at`` is the verdict's event time,
    ``updated_at`` the time of this transition, ``expires_at`` when an unapproved proposal
    lapses."""

    schema_version: SchemaVersion = SCHEMA_VERSION
    action_id: str
    attribution_id: str
    incident_id: str | None = None
    cluster: str = ""
    target: RemediationTarget
    action: ActionKind
    mode: ActionMode = "dry_run"
    policy_id: str
    policy_version: str = ""
    cause_code: str = ""
    severity: UInt16 = 0
    guards: list[GuardResult] = Field(default_factory=list)
    state: ActionState = "proposed"
    sequence: UInt32 = 1
    reason: str = ""
    decision: Decision | None = None
    executor: str | None = None
    result: str = ""
    plan: list[CertificationGroup] = Field(default_factory=list)
    created_at: TimeNs
    created_at_utc: TimeText | None = None
    updated_at: TimeNs = 0
    updated_at_utc: TimeText | None = None
    expires_at: TimeNs | None = None
    expires_at_utc: TimeText | None = None


class RemediationCommand(_Timed):
    """A person's command to the remediation engine (``faultstream remediation approve |
    reject | cancel | reset-breaker``), published on the ``remediation-commands`` topic.
    ``action_id`` is empty for ``reset_breaker``. ``at`` is UTC ns (wall clock): when it was
    sent, as the sender says (the worker checks its age and decides at its own time).
    ``key_id`` / ``signature``: the HMAC-SHA256 signature (hex) over the command's canonical
    JSON without ``signature``, and the id of the shared key it was made with
    (``streams.command_auth``); the worker rejects a command without a valid one."""

    schema_version: SchemaVersion = SCHEMA_VERSION
    command_id: str = ""
    command: Literal["approve", "reject", "cancel", "reset_breaker"]
    action_id: str | None = None
    cluster: str = ""
    by: str
    reason: str = ""
    at: TimeNs
    at_utc: TimeText | None = None
    key_id: str = ""
    signature: str = ""

    def with_id(self) -> "RemediationCommand":
        """Fill ``command_id`` from the content (everything but ``command_id``, ``key_id`` and
        ``signature``: the same command signed with another key has the same id) and return
        self."""
        data = _without_twins(self, "command_id", "key_id", "signature")
        self.command_id = content_id("cmd", data)
        return self


class CertificationTest(_Record):
    """One test of a certification run (a DCGM diagnostic plugin, an NCCL all-reduce check),
    its result and the detail line that explains a failure."""

    name: str
    result: Literal["pass", "fail", "warn", "skip"]
    detail: str = ""


class Certification(_Timed):
    """The result of certifying a host (NVCRE, ``dcgmi diag``, NCCL tests): whether it may
    return to service. ``finished_at`` is UTC ns. ``passed`` is False if any test failed."""

    schema_version: SchemaVersion = SCHEMA_VERSION
    certification_id: str = ""
    host: str
    cluster: str = ""
    suite: str
    passed: bool
    tests: list[CertificationTest] = Field(default_factory=list)
    finished_at: TimeNs
    finished_at_utc: TimeText | None = None
    source: str = ""

    def with_id(self) -> "Certification":
        """Fill ``certification_id`` from the content and return self."""
        data = _without_twins(self, "certification_id")
        self.certification_id = content_id("cert", data)
        return self


RECORD_MODELS: dict[str, type[BaseModel]] = {
    "observation": Observation,
    "event": Event,
    "attribution": Attribution,
    "remediation_action": RemediationAction,
    "remediation_command": RemediationCommand,
    "certification": Certification,
}
