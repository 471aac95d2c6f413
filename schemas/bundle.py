"""Models of the incident bundle's YAML files (``BUNDLE.md`` v1).

* :class:`WorkloadSpec` -- ``workload.yaml``, the scheduler's view of the attempt.
* :class:`TopologySpec` -- ``topology.yaml``, how hosts are cabled to the fabric.
* :class:`ExpectedSpec` -- ``expected.yaml``, the verdict a correct system gives.

Times are parsed from ISO-8601 (``2026-11-30T01:20:00Z``) and exposed as UTC nanoseconds by
the ``*_ns`` helpers. Validation errors are pydantic ``ValidationError``; the bundle reader turns
them into a :class:`connectors.bundle.BundleError` naming the file and the field.

``workload.yaml`` tolerates the future: a key this reader does not know (at the top level, in
a ``ranks`` entry or in a ``hosts`` entry) is kept, not refused, and
:meth:`WorkloadSpec.unknown_keys` names it (dotted path) so the bundle reader reports it as a
coverage warning; the values of known keys are validated as strictly as ever.
``topology.yaml`` and ``expected.yaml`` stay strict (a typo there silently changes a verdict or
a score).

Optional fields beyond ``BUNDLE.md`` v1: ``ranks.<N>.pid`` (the rank's process id on its host,
as the scheduler or launcher reported it -- the pid an XID's ``pid=``, an OOM kill or an NCCL
``host:pid:tid`` prefix names; :mod:`correlators.pids` gives that rank to events naming the
pid), ``hosts.<h>.boot_times`` (other boots of the host the logs cover, for raw dmesg files
that hold several boots; see :mod:`connectors.timefmt`, *Boots*) and ``task_pids``
(:class:`TaskPid`: the scheduler's step records of which task a process of a host was; the
bundle reader fills it from ``scheduler/<host>/`` ``scontrol listpids`` tables,
:mod:`connectors.slurm_pids`). An empty ``task_pids`` is left out when the spec is serialised,
so a workload record without step records is the same record as before the field existed.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from schemas.records import Domain, Observation, Outcome, Quality


def to_ns(value: dt.datetime) -> int:
    """UTC nanoseconds since the epoch for an aware (or naive = UTC) datetime."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Tolerant(BaseModel):
    """A ``workload.yaml`` part: unknown keys are kept (``model_extra``), known ones validated."""

    model_config = ConfigDict(extra="allow")


class RankSlot(_Tolerant):
    """Where one rank ran: ``host`` (a workload node), ``gpu`` (its GPU index on the host) and
    ``pid`` (optional: the rank's process id on the host)."""

    host: str
    gpu: int | None = None
    pid: int | None = Field(default=None, ge=0)


class TaskPid(_Tolerant):
    """A scheduler's step record of one process: on ``host`` (a workload node), process
    ``pid`` was the task with global id ``rank`` (Slurm's ``SLURM_PROCID``; the training rank
    when srun starts one task per rank) and local id ``local_rank`` of step ``step`` (``"0"``,
    ``"0+1"``). ``source`` says where the record was read (``scheduler/node-a01/
    scontrol-listpids.txt:7``). :mod:`correlators.pids` uses it as a pid -> rank statement
    when the step's task ids agree with the rank layout (see there)."""

    host: str
    pid: int = Field(ge=1, le=0xFFFFFFFF)
    rank: int = Field(ge=0, le=0xFFFFFFFF)
    local_rank: int | None = Field(default=None, ge=0, le=0xFFFFFFFF)
    step: str | None = None
    source: str = "workload.yaml"


class HostFacts(_Tolerant):
    """Per-host facts needed to read its logs: ``boot_time`` places raw dmesg seconds since
    boot (the first boot a file holds), ``boot_times`` (optional) other known boots for files
    holding several, ``timezone`` (IANA) zone-less wall-clock times, ``ip`` lets lines naming
    an address name the host."""

    boot_time: dt.datetime | None = None
    boot_times: list[dt.datetime] = Field(default_factory=list)
    timezone: str = "UTC"
    ip: str | None = None


WorkloadState = Literal[
    "FAILED",
    "NODE_FAIL",
    "TIMEOUT",
    "CANCELLED",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "COMPLETED",
    "RUNNING",
    "HUNG",
]


class WorkloadSpec(_Tolerant):
    """``workload.yaml``: one workload attempt as the scheduler saw it (``BUNDLE.md``; the
    module doc says which optional fields are added and how unknown keys are treated)."""

    workload_id: str = Field(min_length=1)
    scheduler: Literal["slurm", "kueue", "kubernetes", "static"] = "static"
    cluster: str = ""
    state: WorkloadState
    exit_code: str | None = None
    start: dt.datetime
    end: dt.datetime | None = None
    nodes: list[str] = Field(min_length=1)
    ranks_per_node: int | None = Field(default=None, ge=1, le=4096)
    ranks: dict[int, RankSlot] = Field(default_factory=dict)
    hosts: dict[str, HostFacts] = Field(default_factory=dict)
    task_pids: list[TaskPid] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _without_empty_task_pids(self, handler):
        """The serialised spec without ``task_pids`` when it is empty (module docstring)."""
        data = handler(self)
        if not self.task_pids and isinstance(data, dict):
            data.pop("task_pids", None)
        return data

    @field_validator("exit_code", mode="before")
    @classmethod
    def _exit_code_as_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value

    @model_validator(mode="after")
    def _check(self) -> "WorkloadSpec":
        from schemas.records import TIME_NS_MAX, TIME_NS_MIN

        # the times every record carries (UTC ns since 1900 .. Int64), with a day of margin
        # for the windows around them
        for name, value in (("start", self.start), ("end", self.end)):
            if value is not None and not TIME_NS_MIN <= to_ns(value) <= TIME_NS_MAX - 86_400 * 10**9:
                raise ValueError(f"{name} {value.isoformat()} is outside 1900-01-01 .. 2262-04-10")
        if self.end is not None and self.end < self.start:
            raise ValueError("end is before start")
        for rank, slot in self.ranks.items():
            if slot.host not in self.nodes:
                raise ValueError(f"ranks.{rank}.host {slot.host!r} is not in nodes")
        for i, task in enumerate(self.task_pids):
            if task.host not in self.nodes:
                raise ValueError(f"task_pids.{i}.host {task.host!r} is not in nodes")
        return self

    @property
    def start_ns(self) -> int:
        return to_ns(self.start)

    @property
    def end_ns(self) -> int | None:
        return to_ns(self.end) if self.end is not None else None

    def unknown_keys(self) -> list[str]:
        """Keys of ``workload.yaml`` this reader does not know, as dotted paths
        (``priority``, ``ranks.3.container``, ``hosts.node-a01.rack``), sorted."""
        out = list(self.model_extra or ())
        for rank, slot in self.ranks.items():
            out += [f"ranks.{rank}.{k}" for k in slot.model_extra or ()]
        for host, facts in self.hosts.items():
            out += [f"hosts.{host}.{k}" for k in facts.model_extra or ()]
        for i, task in enumerate(self.task_pids):
            out += [f"task_pids.{i}.{k}" for k in task.model_extra or ()]
        return sorted(out)

    def rank_map(self) -> dict[int, RankSlot]:
        """Rank -> host/GPU: the explicit ``ranks`` map, else ``ranks_per_node`` laid out in
        node order with local rank = GPU index (:meth:`rank_layout`), else empty."""
        if self.ranks:
            return dict(self.ranks)
        # the nodes are validated names and the indexes ints: built without re-validation
        return {r: RankSlot.model_construct(host=host, gpu=gpu) for r, (host, gpu) in self.rank_layout().items()}

    def rank_layout(self) -> dict[int, tuple[str, int | None]]:
        """Rank -> (host, GPU index) of :meth:`rank_map` as plain tuples (a 16,384-rank job's
        layout without building as many models)."""
        if self.ranks:
            return {r: (slot.host, slot.gpu) for r, slot in self.ranks.items()}
        per_node = self.ranks_per_node
        if per_node:
            return {n * per_node + local: (host, local) for n, host in enumerate(self.nodes) for local in range(per_node)}
        return {}


class Link(_Spec):
    """One cable: a host HCA port to a switch port.

    ``hca`` is the RDMA device (``mlx5_0``) or a NIC name; the optional ``netdev``
    (``enp1s0f0``), ``pci`` (``0000:01:00.0``) and ``hca_guid`` / ``switch_guid`` (port GUIDs
    as ``ibnetdiscover`` prints them, ``0x...``) let kernel and fabric lines that name the
    port another way find the same cable."""

    host: str = Field(min_length=1)
    hca: str = Field(min_length=1)
    host_port: int = Field(default=1, ge=0)
    switch: str = Field(min_length=1)
    switch_port: str = Field(min_length=1)
    netdev: str | None = None
    pci: str | None = None
    hca_guid: str | None = None
    switch_guid: str | None = None

    @field_validator("switch_port", mode="before")
    @classmethod
    def _port_as_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value

    @property
    def port_id(self) -> str:
        """The switch-side port id, ``switch/port``."""
        return f"{self.switch}/{self.switch_port}"


class TopologyHost(_Spec):
    """Per-host fabric facts: the addresses its HCAs/NICs answer on (IPv4 or IPv6 text), so
    ``peer 10.0.0.15<38560>`` and ``remoteGid ::ffff:10.0.0.15`` name the host."""

    ips: list[str] = Field(default_factory=list)

    @field_validator("ips")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        for text in value:
            try:
                ipaddress.ip_address(text)
            except ValueError:
                raise ValueError(f"{text!r} is not an IP address") from None
        return value


class TopologySpec(_Spec):
    """``topology.yaml``: cables, host addresses and failure domains.

    ``domains`` maps a failure-domain name (``rack-1``, ``nvl-domain-3``) to its hosts; a
    leaf switch is a domain of its own (the hosts cabled to it) without being listed.
    ``uplinks`` are switch-to-switch cables (``leaf-01/33`` <-> ``spine-01/1``), as
    ``ibnetdiscover`` shows them."""

    links: list[Link] = Field(default_factory=list)
    hosts: dict[str, TopologyHost] = Field(default_factory=dict)
    domains: dict[str, list[str]] = Field(default_factory=dict)
    uplinks: list[tuple[str, str]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_cable_per_port(self) -> "TopologySpec":
        """A host port has one cable and a switch port one cable: the same port cabled twice
        is a mistake in the file, which would make the correlator blame the wrong end."""
        by_host: dict[tuple[str, str, int], str] = {}
        by_switch: dict[str, str] = {}
        for i, link in enumerate(self.links):
            end = (link.host, link.hca, link.host_port)
            if by_host.setdefault(end, link.port_id) != link.port_id:
                raise ValueError(f"links.{i}: {link.host} {link.hca} port {link.host_port} is cabled to both "
                                 f"{by_host[end]} and {link.port_id}")
            here = f"{link.host}/{link.hca}/{link.host_port}"
            if by_switch.setdefault(link.port_id, here) != here:
                raise ValueError(f"links.{i}: switch port {link.port_id} is cabled to both {by_switch[link.port_id]} and {here}")
        owner: dict[str, str] = {}
        for host in sorted(self.hosts):
            for ip in self.hosts[host].ips:
                if owner.setdefault(ip, host) != host:
                    raise ValueError(f"hosts: address {ip} belongs to both {owner[ip]} and {host}")
        return self


class TopologyAttributes(BaseModel):
    """``attributes`` of a topology record: ``topology`` (the cluster's :class:`TopologySpec`)
    and any other attributes a connector adds (its sources)."""

    model_config = ConfigDict(extra="allow")

    topology: TopologySpec


class TopologyObservation(Observation):
    """The value of the ``topology`` topic: an :class:`schemas.records.Observation` of kind
    ``topology`` whose ``attributes.topology`` is the cluster's :class:`TopologySpec`; the key
    is the cluster. This model is the topic's JSON Schema; the worker reads the record as an
    Observation and validates the topology when it applies it."""

    kind: Literal["topology"]
    attributes: TopologyAttributes


class ExpectedIncident(_Spec):
    """``expected.yaml`` ``incident:``: the cross-workload incident a correct system reports.
    ``level`` port | switch | rack; ``root_cause`` a prefix of its code; ``workloads`` the
    workload verdicts it must group (set equality); ``culprit_ports`` / ``culprit_hosts`` set
    equality with the incident's culprits."""

    level: Literal["port", "switch", "rack"] | None = None
    root_cause: str | None = None
    workloads: list[str] | None = None
    culprit_ports: list[str] | None = None
    culprit_hosts: list[str] | None = None


class ExpectedSpec(_Spec):
    """``expected.yaml``: what a correct verdict says. Every field given must match
    (``faultstream score`` reports each one that does not, with the reason):

    * ``domain`` (equal) or ``domain_any_of`` (one of);
    * ``outcome`` (equal): ``failed``, ``hung``, ``degraded`` (the job runs slow: a straggler),
      ``preempted``, ``completed`` or ``unknown``;
    * ``not_domain``: domains a correct verdict must not blame;
    * ``root_cause``: a prefix of the verdict's root-cause code (``gpu.xid`` matches
      ``gpu.xid.79``; a full code matches only itself and its dotted extensions), or a list
      of such prefixes of which one must match;
    * ``culprit_hosts`` / ``culprit_ranks`` / ``culprit_ports``: set equality with the
      verdict's culprits (``[]`` = it must name none);
    * ``quality_any_of``: the verdict's quality is one of these;
    * ``alternatives``: codes or code prefixes the verdict must list among its
      ``alternatives``, each matched by at least one of them (``[app.xid]`` is met by an
      alternative ``app.xid.31``); ``[]`` = it must list none;
    * ``incident`` / ``incidents``: the cross-workload incident (see :class:`ExpectedIncident`).
    """

    domain: Domain | None = None
    domain_any_of: list[Domain] | None = None
    outcome: Outcome | None = None
    not_domain: list[Domain] | None = None
    root_cause: str | list[str] | None = None
    culprit_hosts: list[str] | None = None
    culprit_ranks: list[int] | None = None
    culprit_ports: list[str] | None = None
    quality_any_of: list[Quality] | None = None
    alternatives: list[str] | None = None
    incident: ExpectedIncident | None = None
    incidents: int | None = Field(default=None, ge=0)
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> "ExpectedSpec":
        if self.domain is not None and self.domain_any_of is not None:
            raise ValueError("give domain or domain_any_of, not both")
        return self
