"""The fabric correlator: from port-level events to fabric faults and cross-workload incidents.

NVIDIA Attribution sees no HCA port flaps and turns "many suspects" into "systemic";
NVSentinel watches each NIC alone. This module correlates both ends of every cable:

1. **Port evidence** (:func:`port_events`). Every event about a cable -- host-side mlx5
   ``Link down/up`` and port module events, NCCL ``NET/IB : Got async event : port error``,
   switch-side port state changes, counter deltas (``fabric.port_errors``) -- is keyed by the
   cable's switch end ``<switch>/<port>`` through the topology
   (:class:`correlators.topology.FabricIndex`), so the host's and the switch's view of one
   cable meet.
2. **Port faults** (:func:`port_faults`), per port, over event-time *hopping windows*
   (``window_s`` long, one every ``hop_s``): a window is faulty when it holds
   ``flap_min_downs`` link-down transitions (``flapping``), any link-down or LinkDowned
   increase (``link_down``), signal-integrity counters over threshold (``degrading``: symbol
   errors, link error recovery, local link integrity) or other port-error counters over
   threshold (``port_errors``). Faulty windows closer than ``episode_gap_s`` form one fault
   (one episode), named by its most severe kind. Thresholds: :class:`FabricPolicy`.
3. **Grouping** (:func:`group_faults`): hosts of one failure domain lost together (the
   scheduler marks them DOWN / not responding within ``group_s``) are a *rack* fault (power);
   ``switch_min_ports`` or more ports of one switch failing within ``group_s`` (and at least
   ``switch_min_fraction`` of its host ports) are a *switch* fault; the rest stay port faults.
   Member faults are absorbed, so a leaf switch going down is one incident, not dozens.
4. **Linking** (:func:`fault_event`, :func:`relevant`): each fault becomes one derived event
   (``fabric.port_fault``, ``fabric.switch_fault``, ``host.rack_fault``) carrying its
   ``incident_id``; the workload correlator (``correlators.attribution.decide``) receives the
   faults relevant to a workload (the fault's hosts ran it, in its window) as causes like any
   other, so a workload's NCCL errors become the fault's symptoms and its verdict carries the
   incident id.
5. **Incidents** (:func:`assemble`): per fault one fabric verdict (scope ``fabric_port``, both
   ends of the cable named) and one incident verdict (scope ``incident``) whose ``members``
   are the fabric verdict and every workload verdict that names the incident.

Config faults are not fabric faults: error 12 on every host from the first connection with
healthy ports yields no port fault here (nothing crosses a threshold), so the workload
correlator's RoCE GID-index detector decides ``config``; error 12 after hours with one host's
port flapping yields a port fault that explains it (``tests/correlators/test_fabric.py`` has both).

Pure: no I/O, no clock. The same events give the same faults, ids and verdicts in replay and in
the stream (which recomputes a port's faults from the port's events whenever they change).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Sequence

import yaml

from correlators import ENGINE_VERSION
from correlators.attribution import summarise
from correlators.hostlist import expand_hostlist
from correlators.timetext import NS
from correlators.cost import incident_cost
from correlators.topology import FabricIndex, host_port_id
from schemas.bundle import Link
from schemas.records import (
    Affected,
    Attribution,
    Cable,
    Culprits,
    Event,
    EvidenceItem,
    EvidenceRef,
    RootCause,
    Scope,
    Window,
    content_id,
)

__all__ = [
    "FAULT_TYPES",
    "PORT_EVENT_TYPES",
    "FabricPolicy",
    "Fault",
    "PortFault",
    "assemble",
    "correlate",
    "default_fabric_policy",
    "fault_event",
    "group_faults",
    "port_events",
    "port_faults",
    "relevant",
    "withdrawal",
    "workload_faults",
]

#: Event types about one cable (both ends), the input of :func:`port_faults`.
PORT_EVENT_TYPES = frozenset({
    "fabric.link_down",
    "fabric.link_up",
    "fabric.port_state",
    "fabric.module_event",
    "fabric.port_errors",
    "nccl.ib_async_event",
})
#: Derived event types, one per fault level.
FAULT_TYPES = {"port": "fabric.port_fault", "switch": "fabric.switch_fault", "rack": "host.rack_fault"}
_SEVERITY = {"port_errors": 1, "degrading": 2, "link_down": 3, "flapping": 4}
_DOWN_STATES = {"DOWN", "PORT_DOWN", "POLLING", "PORT_POLLING", "DISABLED", "PORT_DISABLED"}
MAX_FAULT_EVIDENCE = 50


class FabricPolicyError(ValueError):
    """``fabric.yaml`` is invalid; the message names the field."""


@dataclass(frozen=True)
class FabricPolicy:
    """Thresholds of the fabric correlator (seconds; counts per window).

    Defaults (``correlators/fabric.yaml``) and where they come from:

    * ``window_s=300``, ``hop_s=60``: five-minute windows every minute -- a flap is a
      seconds-long event, a degrading cable shows over minutes; a fault is seen within a
      minute of its window filling.
    * ``flap_min_downs=2``: one link-down is a link that went down (reseat, reboot); two in
      five minutes is a port that flaps (UFM/switch "link flap" detection counts repeated
      down/up transitions).
    * ``link_downed_min=1``: the IBTA PortCounters ``LinkDownedCounter`` counts failed link
      training / link-down events; any increase is a link that dropped.
    * ``signal_integrity`` / ``port_errors``: per-window error counts over infiniband-diags'
      ``ibcheckerrs`` default thresholds (SymbolErrors 10, LinkRecovers 10, RcvErrors 10,
      LinkIntegrityErrors 10, ExcBufOverrunErrors 10, RcvRemotePhysErrors 100,
      XmtDiscards 100); symbol errors and link error recovery growing is the classic degrading
      cable or transceiver (rc-27).
    * ``episode_gap_s=21600``: a port that flaps again within 6 h was never repaired: the same
      incident.
    * ``group_s=120``, ``switch_min_ports=3``, ``switch_min_fraction=0.5``,
      ``rack_min_hosts=3``: several ports of one switch (or hosts of one rack) failing within
      two minutes share a cause upstream of them.
    """

    version: int = 1
    window_s: int = 300
    hop_s: int = 60
    flap_min_downs: int = 2
    link_downed_min: int = 1
    signal_integrity: dict[str, int] = field(default_factory=dict)
    port_errors: dict[str, int] = field(default_factory=dict)
    episode_gap_s: int = 21600
    group_s: int = 120
    switch_min_ports: int = 3
    switch_min_fraction: float = 0.5
    rack_min_hosts: int = 3
    weights: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FabricPolicy":
        """Build from parsed YAML. Raises :class:`FabricPolicyError` naming a bad field."""
        if not isinstance(data, dict):
            raise FabricPolicyError("fabric policy: expected a mapping")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise FabricPolicyError(f"fabric policy: unknown field(s) {unknown}")
        for name in ("window_s", "hop_s", "flap_min_downs", "episode_gap_s", "group_s"):
            value = data.get(name, 1)
            if not isinstance(value, int) or value <= 0:
                raise FabricPolicyError(f"fabric policy: field {name!r} must be a positive integer, got {value!r}")
        policy = cls(**data)
        if policy.window_s % policy.hop_s:
            raise FabricPolicyError("fabric policy: window_s must be a multiple of hop_s")
        return policy

    def weight(self, kind: str) -> float:
        return float(self.weights.get(kind, 0.8))


@lru_cache(maxsize=1)
def default_fabric_policy() -> FabricPolicy:
    """The packaged ``correlators/fabric.yaml``."""
    text = resources.files("correlators").joinpath("fabric.yaml").read_text()
    return FabricPolicy.from_dict(yaml.safe_load(text))


# --- port evidence ---------------------------------------------------------------------------


def _is_down(event: Event) -> bool:
    """A link-down transition: a down line, a DOWN/POLLING port state, a cable unplugged, or
    the verbs async event IBV_EVENT_PORT_ERR (NCCL's 'port error')."""
    t = event.type
    if t == "fabric.link_down":
        return True
    if t == "fabric.port_state":
        return str(event.attributes.get("state", "")).upper() in _DOWN_STATES
    if t == "fabric.module_event":
        return "unplug" in str(event.attributes.get("event", "")).lower()
    if t == "nccl.ib_async_event":
        return "port error" in str(event.attributes.get("event", "port error")).lower()
    return False


def _side(event: Event, index: FabricIndex) -> str:
    if event.type == "fabric.port_errors":
        return "counters"
    if event.attributes.get("side") == "switch" or index.is_switch(event.host):
        return "switch"
    return "host"


def port_events(events: Iterable[Event], index: FabricIndex) -> dict[str, list[Event]]:
    """Port id -> its events (sorted by time, then id), for every event about a cable whose
    port :meth:`FabricIndex.port_key` can name."""
    out: dict[str, list[Event]] = {}
    for event in events:
        if event.type not in PORT_EVENT_TYPES:
            continue
        key = index.port_key(event)
        if key is not None:
            out.setdefault(key, []).append(event)
    for key in out:
        out[key] = sorted({e.event_id: e for e in out[key]}.values(), key=lambda e: (e.at, e.event_id))
    return out


@dataclass(frozen=True)
class PortFault:
    """One episode of trouble on one cable: ``port`` (``switch/port`` or the fallback key),
    the ``link`` if the topology knows it, the most severe ``kind``, first/last evidence time
    (UTC ns), the most link-downs seen in one window, summed counter deltas, the sides that
    saw it (``host``, ``switch``, ``counters``) and the evidence events."""

    port: str
    link: Link | None
    kind: str
    first_at: int
    last_at: int
    downs: int
    counters: dict[str, int]
    sides: tuple[str, ...]
    events: tuple[Event, ...]

    @property
    def host(self) -> str | None:
        """The node at the other end of the cable: the topology's host; without a topology,
        the node whose own lines name the port (the fallback key ``<node>/<device>``)."""
        if self.link is not None:
            return self.link.host
        node = self.port.split("/", 1)[0]
        return node if {e.host for e in self.events} == {node} else None


def _observer(event: Event, side: str) -> str:
    """Who reported a link-down, for counting transitions: one source (extraction rule) on one
    side -- the host's kernel, ibstatus, the switch's syslog, UFM (which often log the same
    transition twice: Cumulus switchd's carrier and libnl lines, UFM and the switch) -- or one
    NCCL process: every process of a host that has the HCA open gets the same verbs async
    event and logs its own 'port error' line (one per rank)."""
    if event.type == "nccl.ib_async_event":
        gpu = event.gpu.index if event.gpu is not None else None
        return f"nccl:{gpu if gpu is not None else event.rank}"
    return f"{side}:{event.rule.split('@', 1)[0]}"


def _transitions(downs: dict[str, int], counters: dict[str, int]) -> int:
    """Link-down transitions in one window: the largest count of any observer or of the
    LinkDowned counter, because each of them reports the same transitions."""
    return max([*downs.values(), counters.get("link_downed", 0)])


def _window_kind(downs: dict[str, int], counters: dict[str, int], policy: FabricPolicy) -> str | None:
    n = _transitions(downs, counters)
    if n >= policy.flap_min_downs:
        return "flapping"
    if n >= 1 and (downs or counters.get("link_downed", 0) >= policy.link_downed_min):
        return "link_down"
    if any(counters.get(c, 0) > limit for c, limit in policy.signal_integrity.items()):
        return "degrading"
    if any(counters.get(c, 0) > limit for c, limit in policy.port_errors.items()):
        return "port_errors"
    return None


def _deltas(event: Event) -> dict[str, int]:
    deltas = event.attributes.get("deltas")
    if isinstance(deltas, dict):
        return {str(k): int(v) for k, v in deltas.items() if isinstance(v, (int, float)) and v > 0}
    return {}


def port_faults(
    port: str, events: Sequence[Event], index: FabricIndex, policy: FabricPolicy | None = None
) -> list[PortFault]:
    """The faults of one port from its events (any order; duplicates collapse).

    Window ``k`` covers ``[k*hop, k*hop + window)`` in event time; an event at ``t`` falls in
    the ``window/hop`` windows that contain it. Link-down transitions are counted per side
    (host logs, switch logs, each NCCL process's async port errors) and by the LinkDowned
    counter; the window's count is the largest, because each reports the same transitions.
    Returns faults ordered by first time."""
    policy = policy or default_fabric_policy()
    hop, width = policy.hop_s * NS, policy.window_s * NS
    ordered = sorted({e.event_id: e for e in events}.values(), key=lambda e: (e.at, e.event_id))
    windows: dict[int, tuple[dict[str, int], dict[str, int], list[Event]]] = {}
    was_down: dict[str, bool] = {}  # observer -> its last word on the port was "down"
    for event in ordered:
        side = _side(event, index)
        observer = _observer(event, side)
        down = _is_down(event)
        counted = down
        if event.type == "fabric.port_state":
            # a state is a level, not an edge: the port seen down again by the same source
            # (ibstatus polled twice, DOWN then POLLING) is the same transition
            counted = down and not was_down.get(observer, False)
        if down or event.type in ("fabric.port_state", "fabric.link_up"):
            was_down[observer] = down
        deltas = _deltas(event)
        if not down and not deltas:
            continue
        for k in range((event.at - width) // hop + 1, event.at // hop + 1):
            downs, counters, members = windows.setdefault(k, ({}, {}, []))
            if counted:
                downs[observer] = downs.get(observer, 0) + 1
            for name, value in deltas.items():
                counters[name] = counters.get(name, 0) + value
            members.append(event)
    faulty: list[tuple[int, str, int, list[Event]]] = []
    for k in sorted(windows):
        downs, counters, members = windows[k]
        kind = _window_kind(downs, counters, policy)
        if kind is not None:
            faulty.append((k, kind, _transitions(downs, counters), members))
    if not faulty:
        return []
    # episodes: faulty windows whose evidence lies within episode_gap of the previous one's
    episodes: list[list[tuple[int, str, int, list[Event]]]] = []
    last_at = None
    for item in faulty:
        first = item[3][0].at
        if last_at is None or first - last_at > policy.episode_gap_s * NS:
            episodes.append([])
        episodes[-1].append(item)
        last_at = max(last_at or 0, item[3][-1].at)
    link = index.link_of(ordered[0]) if ordered else None
    out = []
    for episode in episodes:
        evidence = sorted({e.event_id: e for _, _, _, m in episode for e in m}.values(),
                          key=lambda e: (e.at, e.event_id))
        counters: dict[str, int] = {}
        for event in evidence:
            for name, value in _deltas(event).items():
                counters[name] = counters.get(name, 0) + value
        kind = max((k for _, k, _, _ in episode), key=_SEVERITY.__getitem__)
        # the most transitions seen in one window (the LinkDowned deltas of a whole episode
        # summed would name hours of single drops a burst "in one window")
        downs = max(n for _, _, n, _ in episode)
        out.append(PortFault(
            port=port,
            link=link,
            kind=kind,
            first_at=evidence[0].at,
            last_at=evidence[-1].at,
            downs=downs,
            counters=dict(sorted(counters.items())),
            sides=tuple(sorted({_side(e, index) for e in evidence})),
            events=tuple(evidence),
        ))
    return out


# --- grouping --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """A decided fabric (or rack) fault: ``level`` ``port`` | ``switch`` | ``rack``; ``key``
    the port id, switch name or domain name; ``code`` (``fabric.port.flapping``,
    ``fabric.switch.down``, ``host.rack.power_loss``); ``hosts`` the culprit nodes to act on
    (the host at the end of a bad cable, the switch, the rack's hosts); ``ports`` the failed
    switch ports; ``victims`` the hosts cabled to them. Times are UTC ns."""

    level: str
    key: str
    code: str
    domain: str
    kind: str
    cluster: str
    hosts: tuple[str, ...]
    ports: tuple[str, ...]
    victims: tuple[str, ...]
    first_at: int
    last_at: int
    weight: float
    sides: tuple[str, ...]
    members: tuple[PortFault, ...]
    evidence: tuple[Event, ...]
    text: str
    episode: int = 0

    @property
    def incident_id(self) -> str:
        """``inc-<hash>`` of (cluster, level, key, episode): stable for one episode.

        ``episode`` is the fault's first time in whole ``episode_gap_s`` periods: two episodes
        of one port are more than that apart, so they differ; a stream worker that sees an
        earlier line of the same episode late keeps the same id (unless the line moves the
        start across a period boundary)."""
        return content_id("inc", self.cluster, self.level, self.key, self.episode)


def _time_clusters(items: list[Any], at, gap_ns: int) -> list[list[Any]]:
    """Split items sorted by ``at(item)`` into runs whose starts are within ``gap_ns`` of the
    run's first item."""
    runs: list[list[Any]] = []
    # ties broken by the item's own id (event id, port), so the runs' member order does not
    # depend on the input order
    for item in sorted(items, key=lambda i: (at(i), getattr(i, "event_id", None) or getattr(i, "port", ""))):
        if runs and at(item) - at(runs[-1][0]) <= gap_ns:
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def _port_fault_to_fault(pf: PortFault, cluster: str, policy: FabricPolicy) -> Fault:
    link = pf.link
    host = pf.host
    if link is not None:
        text = (f"switch port {link.port_id} {pf.kind.replace('_', ' ')}: the cable to "
                f"{link.host} {link.hca} port {link.host_port}")
        ports = (link.port_id,)
    else:
        text = f"fabric port {pf.port} {pf.kind.replace('_', ' ')}"
        ports = (pf.port,)
    detail = []
    if pf.downs:
        detail.append(f"{pf.downs} link-down(s) in {policy.window_s} s")
    detail += [f"{name} +{value}" for name, value in pf.counters.items() if name != "link_downed"]
    if detail:
        text += " (" + ", ".join(detail) + ")"
    text += f"; seen by {'/'.join(pf.sides)}"
    hosts = (host,) if host else ()
    return Fault(
        level="port", key=pf.port, code=f"fabric.port.{pf.kind}", domain="fabric", kind=pf.kind,
        cluster=cluster, hosts=hosts, ports=ports, victims=hosts, first_at=pf.first_at,
        last_at=pf.last_at, weight=policy.weight(pf.kind), sides=pf.sides, members=(pf,),
        evidence=pf.events, text=text, episode=pf.first_at // (policy.episode_gap_s * NS),
    )


def group_faults(
    faults: Sequence[PortFault],
    node_downs: Sequence[Event],
    index: FabricIndex,
    *,
    cluster: str = "",
    policy: FabricPolicy | None = None,
) -> list[Fault]:
    """Group port faults into rack, switch and port faults (see the module docstring).

    ``node_downs``: scheduler node-state events (``sched.node_state`` with state DOWN, e.g.
    slurmctld's "Nodes node-a09 not responding, setting DOWN") -- hosts lost as a whole.
    Returns faults sorted by (first time, level, key)."""
    policy = policy or default_fabric_policy()
    gap = policy.group_s * NS
    remaining = list(faults)
    out: list[Fault] = []

    # racks: hosts of one topology domain lost together. Smallest domain first (a rack before a
    # row holding it), and a loss one domain claimed is not claimed again by another domain with
    # the same hosts (a GB200 NVL72 rack is also its NVLink domain): one loss, one incident
    downs = [e for e in node_downs if str(e.attributes.get("state", "")).upper() == "DOWN"]
    for domain in sorted(index.spec.domains, key=lambda d: (len(set(index.spec.domains[d])), d)):
        members = set(index.spec.domains[domain])
        lost = [e for e in downs if set(_lost_nodes(e)) & members]
        for run in _time_clusters(lost, lambda e: e.at, gap):
            hosts = sorted({n for e in run for n in _lost_nodes(e) if n in members})
            if len(hosts) < policy.rack_min_hosts:
                continue
            claimed = {e.event_id for e in run}
            downs = [e for e in downs if e.event_id not in claimed]
            lo, hi = run[0].at - gap, run[-1].at + gap
            absorbed = [pf for pf in remaining if pf.host in members and lo <= pf.first_at <= hi]
            remaining = [pf for pf in remaining if pf not in absorbed]
            evidence = sorted({e.event_id: e for e in list(run) + [x for pf in absorbed for x in pf.events]}.values(),
                              key=lambda e: (e.at, e.event_id))
            out.append(Fault(
                level="rack", key=domain, code="host.rack.power_loss", domain="host",
                kind="rack_power_loss", cluster=cluster, hosts=tuple(hosts),
                # the switch ports that saw the hosts go are victims, not culprits: no port
                # to disable
                ports=(),
                victims=tuple(hosts), first_at=min(e.at for e in evidence),
                last_at=max(e.at for e in evidence), weight=policy.weight("rack_power_loss"),
                sides=tuple(sorted({"scheduler", *(s for pf in absorbed for s in pf.sides)})),
                members=tuple(absorbed), evidence=tuple(evidence),
                text=f"{len(hosts)} hosts of {domain} ({', '.join(hosts)}) were lost together: "
                     f"power or rack-level failure",
                episode=min(e.at for e in evidence) // (policy.episode_gap_s * NS),
            ))

    # switches: several ports of one switch at once
    by_switch: dict[str, list[PortFault]] = {}
    for pf in remaining:
        if pf.link is not None:
            by_switch.setdefault(pf.link.switch, []).append(pf)
    for switch in sorted(by_switch):
        total = len(index.switch_links.get(switch, ()))
        for run in _time_clusters(by_switch[switch], lambda pf: pf.first_at, gap):
            if len(run) < policy.switch_min_ports or len(run) < policy.switch_min_fraction * total:
                continue
            # the switch's uplinks went down with it: their faults (seen by the spine, or by
            # the switch itself) are part of the same event, not incidents of their own
            lo = min(pf.first_at for pf in run) - gap
            hi = max(pf.last_at for pf in run) + gap
            run += [pf for pf in remaining
                    if pf.link is None and lo <= pf.first_at <= hi and index.uplink_switches(pf.port) & {switch}]
            remaining = [pf for pf in remaining if pf not in run]
            evidence = sorted({e.event_id: e for pf in run for e in pf.events}.values(),
                              key=lambda e: (e.at, e.event_id))
            hosted = [pf for pf in run if pf.link is not None]
            victims = tuple(sorted({pf.link.host for pf in hosted}))
            out.append(Fault(
                level="switch", key=switch, code="fabric.switch.down", domain="fabric",
                kind="switch_down", cluster=cluster, hosts=(switch,),
                ports=tuple(sorted(pf.link.port_id for pf in hosted)), victims=victims,
                first_at=min(pf.first_at for pf in run), last_at=max(pf.last_at for pf in run),
                weight=policy.weight("switch_down"),
                sides=tuple(sorted({s for pf in run for s in pf.sides})), members=tuple(run),
                evidence=tuple(evidence),
                text=f"switch {switch}: {len(hosted)} of its {total} host ports went down together "
                     f"({', '.join(victims)})" + (f" with {len(run) - len(hosted)} uplink(s)" if len(run) > len(hosted) else ""),
                episode=min(pf.first_at for pf in run) // (policy.episode_gap_s * NS),
            ))

    out += [_port_fault_to_fault(pf, cluster, policy) for pf in remaining]
    return sorted(out, key=lambda f: (f.first_at, f.level, f.key))


def _lost_nodes(event: Event) -> list[str]:
    """The nodes a scheduler node-state event is about: its ``node``, the hosts of its Slurm
    ``nodelist`` (``node-a[05-08]``: slurmctld logs a rack lost at once on one line), else its
    host. A malformed nodelist names no node."""
    if event.attributes.get("node"):
        return [str(event.attributes["node"])]
    nodelist = event.attributes.get("nodelist")
    if isinstance(nodelist, str):
        try:
            return expand_hostlist(nodelist)
        except ValueError:
            return []
    return [event.host]


def _ports(pf: PortFault) -> list[str]:
    return [pf.link.port_id] if pf.link is not None else [pf.port]


def correlate(
    events: Iterable[Event], index: FabricIndex, *, cluster: str = "", policy: FabricPolicy | None = None
) -> list[Fault]:
    """All faults of a set of events: :func:`port_events` -> :func:`port_faults` per port ->
    :func:`group_faults` (with the scheduler's node-down events)."""
    policy = policy or default_fabric_policy()
    events = list(events)
    per_port = port_events(events, index)
    faults = [f for port in sorted(per_port) for f in port_faults(port, per_port[port], index, policy)]
    node_downs = [e for e in events if e.type == "sched.node_state"]
    return group_faults(faults, node_downs, index, cluster=cluster, policy=policy)


# --- linking to workloads ----------------------------------------------------------------------


def fault_event(fault: Fault, *, not_before: int | None = None, policy: FabricPolicy | None = None) -> Event:
    """The derived event a fault gives the workload correlator (``fabric.port_fault`` |
    ``fabric.switch_fault`` | ``host.rack_fault``), naming the culprit hosts
    (``attributes.culprit_hosts``), ports and ``incident_id``; evidence points at the
    observations of its first :data:`MAX_FAULT_EVIDENCE` events.

    It is dated at the fault's first evidence at or after ``not_before`` (UTC ns; a
    workload's window start), else its first evidence: a port that went down an hour before a
    job and flaps during it is a cause *inside* that job's window, with the same incident."""
    refs: dict[str, EvidenceRef] = {}
    for event in fault.evidence:
        for ref in event.evidence:
            refs.setdefault(ref.observation_id, ref)
        if len(refs) >= MAX_FAULT_EVIDENCE:
            break
    link = fault.members[0].link if fault.level == "port" and fault.members else None
    attrs: dict[str, Any] = {
        "level": fault.level,
        "kind": fault.kind,
        "key": fault.key,
        "code": fault.code,
        "text": fault.text,
        "incident_id": fault.incident_id,
        "culprit_hosts": list(fault.hosts),
        "ports": list(fault.ports),
        "victims": list(fault.victims),
        "sides": list(fault.sides),
        "last_at": fault.last_at,
        "evidence_events": len(fault.evidence),
    }
    if link is not None:
        attrs.update(switch=link.switch, switch_port=link.switch_port, hca=link.hca,
                     host_port=link.host_port, host_port_id=host_port_id(link))
    if fault.level == "port":
        attrs.update(downs=fault.members[0].downs, counters=fault.members[0].counters)
    host = fault.hosts[0] if fault.level == "port" and fault.hosts else fault.key
    at = fault.first_at
    if not_before is not None:
        at = min((e.at for e in fault.evidence if e.at >= not_before), default=fault.first_at)
    return Event(
        type=FAULT_TYPES[fault.level],
        at=at,
        time_quality=max(e.time_quality for e in fault.evidence),
        host=host,
        cluster=fault.cluster,
        fabric_port=fault.ports[0] if fault.level == "port" and fault.ports else None,
        attributes=attrs,
        rule=f"fabric.correlator@{(policy or default_fabric_policy()).version}",
        evidence=list(refs.values()),
    ).with_id()


def relevant(fault: Fault, nodes: Iterable[str], start_ns: int, end_ns: int | None,
             before_ns: int = 0, after_ns: int = 0) -> bool:
    """True if ``fault`` can explain a workload's failure: one of the fault's hosts (the host
    at the end of the cable, the hosts cabled to a failed switch, a lost rack's hosts) ran the
    workload, and the fault began inside the workload's window widened by ``before_ns`` /
    ``after_ns``."""
    hit = set(fault.victims) | set(fault.hosts)
    if not hit & set(nodes):
        return False
    hi = end_ns + after_ns if end_ns is not None else None
    return fault.last_at >= start_ns - before_ns and (hi is None or fault.first_at <= hi)


def workload_faults(faults: Sequence[Fault], nodes: Iterable[str], start_ns: int, end_ns: int | None,
                    before_ns: int, after_ns: int, policy: FabricPolicy | None = None) -> list[Event]:
    """The fault events to hand one workload's correlator: every fault :func:`relevant` to it,
    dated inside its window (:func:`fault_event` with ``not_before = start - before``).
    Both drivers call this, so replay and the stream give the workload the same events."""
    nodes = list(nodes)
    return [
        fault_event(f, not_before=start_ns - before_ns, policy=policy)
        for f in faults
        if relevant(f, nodes, start_ns, end_ns, before_ns, after_ns)
    ]


# --- fabric and incident verdicts ----------------------------------------------------------------


def fault_cables(fault: Fault) -> list[Cable]:
    """The cables of ``fault`` by role: for each member port fault with a cable the topology
    knows, both ends; without one, the end the evidence names (a two-part id is a switch
    side, a three-part id a host side). Sorted, no duplicates; none for a lost rack."""
    if fault.level == "rack":
        return []
    cables: set[tuple[str | None, str | None]] = set()
    for pf in fault.members:
        if pf.link is not None:
            cables.add((pf.link.port_id, host_port_id(pf.link)))
        elif pf.port.count("/") == 1:
            cables.add((pf.port, None))
        else:
            cables.add((None, pf.port))
    return [Cable(switch_port=s, host_port=h) for s, h in sorted(cables, key=lambda c: (c[0] or "", c[1] or ""))]


def assemble(faults: Sequence[Fault], verdicts: Sequence[Attribution], *, ruleset_version: str,
             policy: FabricPolicy | None = None) -> list[Attribution]:
    """The fabric verdict (scope ``fabric_port``: the port, or the switch; none for a lost
    rack) and the incident verdict (scope ``incident``) of every fault.

    A workload verdict belongs to a fault's incident when its ``incident_id`` is the fault's
    (the workload correlator sets it when the fault won). The fabric verdict names both ends
    of the cable and lists the linked workloads in ``affected.workloads``, their errors as its
    symptoms; the incident verdict's ``members`` are the fabric verdict's and the workload
    verdicts' attribution ids. Returns fabric and incident verdicts, ordered by first time."""
    out: list[Attribution] = []
    for fault in faults:
        linked = sorted((v for v in verdicts if v.incident_id == fault.incident_id),
                        key=lambda v: v.attribution_id)
        event = fault_event(fault, policy=policy)
        symptoms = sorted({s for v in linked for s in v.symptoms})
        hosts = sorted({h for v in linked for h in v.affected.hosts} | set(fault.victims))
        workloads = sorted({v.scope.id for v in linked})
        ports = list(fault.ports)
        if fault.level == "port" and fault.members and fault.members[0].link is not None:
            ports.append(host_port_id(fault.members[0].link))
        cables = fault_cables(fault)
        two_sided = len(set(fault.sides) - {"scheduler"}) > 1
        confidence = round(fault.weight * (1.0 if two_sided else 0.9), 4)
        quality = "definitive" if confidence >= 0.8 else "probable" if confidence >= 0.45 else "insufficient"
        decided_at = max([fault.last_at] + [v.decided_at for v in linked])
        evidence = [
            EvidenceItem(at=e.at, event_id=e.event_id, type=e.type, role="cause", host=e.host,
                         rank=e.rank, summary=summarise(e), observations=list(e.evidence))
            for e in fault.evidence[:MAX_FAULT_EVIDENCE]
        ]
        base = dict(
            outcome="failed" if fault.level != "port" or linked else "degraded",
            domain=fault.domain,
            root_cause=RootCause(code=fault.code, text=fault.text, event_id=event.event_id),
            culprits=Culprits(hosts=sorted(fault.hosts), ports=sorted(ports), cables=cables),
            cost=incident_cost(first_at=fault.first_at, decided_at=decided_at, linked=linked,
                               hosts=set(hosts) | set(fault.hosts)),
            affected=Affected(hosts=hosts, workloads=workloads),
            symptoms=symptoms,
            evidence=evidence,
            confidence=confidence,
            quality=quality,
            incident_id=fault.incident_id,
            ruleset_version=ruleset_version,
            engine_version=ENGINE_VERSION,
            window=Window(start=fault.first_at, end=decided_at),
            decided_at=decided_at,
        )
        fabric_ids = []
        if fault.level != "rack":  # a lost rack is no fabric port: its incident verdict says it all
            fabric_id = content_id("att", "fabric_port", fault.incident_id)
            fabric_ids.append(fabric_id)
            out.append(Attribution(
                attribution_id=fabric_id,
                scope=Scope(kind="fabric_port", id=fault.key, cluster=fault.cluster),
                **base,
            ))
        out.append(Attribution(
            attribution_id=content_id("att", "incident", fault.incident_id),
            scope=Scope(kind="incident", id=fault.incident_id, cluster=fault.cluster),
            members=sorted(fabric_ids + [v.attribution_id for v in linked]),
            **base,
        ))
    return out


def withdrawal(previous: Attribution, current: Sequence[Attribution]) -> Attribution:
    """The revision that withdraws a fabric or incident verdict a stream worker emitted and the
    evidence no longer supports -- two ports first seen as port faults that turn out to be one
    switch, or an episode whose start moved: status ``withdrawn``, no root cause, no culprits
    (nothing to act on), quality ``insufficient``, ``superseded_by`` the incidents of its
    cluster that replace it (empty when none does), and one reasoning sentence saying so. The
    caller sets the revision. Replay never emits one: it sees all evidence at once."""
    same_cluster = sorted({a.incident_id for a in current
                           if a.scope.cluster == previous.scope.cluster and a.incident_id})
    text = ("withdrawn: the evidence now points to " + ", ".join(same_cluster)) if same_cluster \
        else "withdrawn: the evidence no longer shows this fault"
    return previous.model_copy(update={
        "outcome": "unknown",
        "domain": "unknown",
        "root_cause": None,
        "culprits": Culprits(),
        "members": [],
        "confidence": 0.0,
        "quality": "insufficient",
        "alternatives": [],
        "reasoning": [text],
        "status": "withdrawn",
        "superseded_by": same_cluster,
    })
