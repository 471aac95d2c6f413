"""A cluster's fabric window (channel ``fabric``, key: cluster): its cable and node-down
events, topology, the workloads' spans and latest verdicts, and what it published.

It re-decides the cluster from its whole event set, as replay does
(:func:`correlators.fabric.correlate` + :func:`~correlators.fabric.assemble`), at most once per
``fabric_flush_s`` of the driver's time, and sends a shape of faults (which faults, at which
level) to the workloads and the public topic only once it held for ``fabric_flush_s``: four
ports going down one after the other are one switch fault, never first four port faults with
their proposals. Evidence not decided yet is *deferred* until the next flush
(:class:`~schemas.messages.FlushMessage`, which a driver's timer sends).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable, MutableMapping

from pydantic import BaseModel

from correlators.config import EngineConfig
from correlators.fabric import Fault, assemble, correlate, withdrawal, workload_faults
from correlators.keyed import Effect, Route, publish_verdicts
from correlators.topology import FabricIndex
from correlators.windows import verdict_digest, workload_key
from schemas.bundle import TopologySpec
from schemas.messages import EventMessage, FaultsMessage, FlushMessage, Span, SpanMessage, TopologyMessage, VerdictMessage
from schemas.records import Attribution, Event, canonical_json

SEP = "\x1f"  # between a cluster and an event id in event-store keys


@dataclass
class FabricTiming:
    """When a cluster was last decided and since when its faults' shape holds (driver seconds;
    timing only, never state: it outlives the window's cache)."""

    flushed: float = -1e18
    shape_since: float | None = None


@dataclass
class FabricWindow:
    """One cluster's fabric state: its cable and node-down events, topology, the workloads'
    spans and latest verdicts, the fault events sent to each workload, and what was published
    (revision and digest per verdict, the verdicts still standing); a
    :class:`~correlators.keyed.Keyed` machine of the ``fabric`` channel (:meth:`apply`).

    :meth:`decide` re-decides the cluster from its whole event set, as replay does. The
    fields after ``faults`` are what :meth:`apply` works with, not state: ``config``, ``hold``
    (batch mode: everything is deferred), ``store`` (the events, one per key
    ``<cluster>`` + :data:`SEP` + event id), ``topologies`` (cluster -> topology data) and
    ``timing``."""

    cluster: str
    events: dict[str, Event] = field(default_factory=dict)
    topology: dict[str, Any] | None = None
    workloads: dict[str, Span] = field(default_factory=dict)
    verdicts: dict[str, Attribution] = field(default_factory=dict)  # workload id -> latest
    sent: dict[str, list[str]] = field(default_factory=dict)  # workload id -> fault event ids
    emitted: dict[str, tuple[int, str]] = field(default_factory=dict)  # attribution id -> (revision, digest)
    live: dict[str, Attribution] = field(default_factory=dict)  # published and still standing
    deferred: bool = False
    shape: str | None = None  # digest of the faults' shape last seen (refresh)
    faults: list[Fault] = field(default_factory=list)  # of the last decision (not state)
    config: EngineConfig | None = None
    hold: bool = False
    store: MutableMapping[str, Any] = field(default_factory=dict)
    topologies: MutableMapping[str, Any] = field(default_factory=dict)
    timing: FabricTiming = field(default_factory=FabricTiming)
    changed: bool = False  # whether the last apply changed the state to save

    def apply(self, message: BaseModel, now: float = 0.0) -> list[Effect]:
        """One fabric-channel message: an event, a topology (None: deleted), a workload's span
        or verdict, or a flush. Returns the fault events routed to the workloads whose faults
        changed and the fabric and incident verdicts. ``changed`` says whether
        :meth:`to_state` must be saved. Raises ``ValueError`` for another message or an invalid
        topology (nothing changes then)."""
        self.changed = False
        if isinstance(message, FlushMessage):
            return self._decide(now, force=True) if self.deferred else []
        if not self._take(message):
            return []
        if isinstance(message, VerdictMessage) and not self.events and not self.deferred:
            # a workload verdict in a cluster without fabric evidence decides no fault: kept
            # for when evidence comes, nothing to settle (the workload's idle close is not held)
            self.changed = True
            return []
        # an event is stored under its own key: the window's state changed only otherwise
        return self._decide(now, state_changed=not isinstance(message, EventMessage))

    def _take(self, message: BaseModel) -> bool:
        """Add the evidence ``message`` carries; True if it changed anything."""
        if isinstance(message, EventMessage):
            changed = self.add_event(message.event)
            if changed:
                self.store[f"{self.cluster}{SEP}{message.event.event_id}"] = canonical_json(message.event).encode()
            return changed
        if isinstance(message, TopologyMessage):
            if message.topology is not None:
                TopologySpec.model_validate(message.topology)  # refused before it is stored
            changed = self.set_topology(message.topology)
            if changed and message.topology is None:
                self.topologies.pop(self.cluster, None)
            elif changed:
                self.topologies[self.cluster] = message.topology
            return changed
        if isinstance(message, SpanMessage):
            return self.add_span(message.span)
        if isinstance(message, VerdictMessage):
            return self.add_verdict(message.attribution)
        raise ValueError(f"fabric channel: unexpected message {getattr(message, 'kind', type(message).__name__)!r}")

    def _decide(self, now: float, *, force: bool = False, state_changed: bool = True) -> list[Effect]:
        """Re-decide the cluster, at most once per ``fabric_flush_s``: a burst (every counter
        sample of a degrading cable) is decided together by the next flush, and the last
        revision still holds all the evidence. Nothing is sent while the faults' shape is
        settling (see the module docstring)."""
        assert self.config is not None, "a fabric window applies messages with its engine config"
        settle = self.config.window.fabric_flush_s
        if self.hold or (not force and now - self.timing.flushed < settle):
            return self._defer(state_changed)
        self.timing.flushed = now
        shape = self.refresh(self.config)
        if shape != self.shape:
            self.shape = shape
            self.timing.shape_since = now
        if self.timing.shape_since is None:
            self.timing.shape_since = now
        if now - self.timing.shape_since < settle:
            return self._defer()
        routes = self.route_faults(self.config)
        verdicts = self.publish(self.config)
        self.changed = True
        out: list[Effect] = [Route("workload", workload_key(self.cluster, wid), FaultsMessage(events=events))
                             for wid, events in routes.items()]
        return out + publish_verdicts(verdicts)

    def _defer(self, state_changed: bool = True) -> list[Effect]:
        """Leave the evidence for the next flush (saved: after a crash a new worker flushes
        it). The state (its verdicts, spans, topology: O(verdicts) to serialise) is to be saved
        when it changed or the window was not deferred yet, not for every event of a burst."""
        was = self.deferred
        self.deferred = True
        self.changed = state_changed or not was
        return []

    def add_event(self, event: Event) -> bool:
        """Add a cable or node-down event; True if it was new."""
        if event.event_id in self.events:
            return False
        self.events[event.event_id] = event
        return True

    def set_topology(self, topology: dict[str, Any] | None) -> bool:
        """Replace the topology (``TopologySpec`` JSON data; None: none known); True if it
        changed."""
        if topology == self.topology:
            return False
        self.topology = topology
        return True

    def add_span(self, span: Span) -> bool:
        """Record a workload's span; True if it changed."""
        if self.workloads.get(span.workload_id) == span:
            return False
        self.workloads[span.workload_id] = span
        return True

    def add_verdict(self, att: Attribution) -> bool:
        """Record a workload verdict unless an equal or later revision is known; True if it
        changed anything."""
        old = self.verdicts.get(att.scope.id)
        if old is not None and (old.revision > att.revision or old == att):
            return False
        self.verdicts[att.scope.id] = att
        return True

    def decide(self, config: EngineConfig) -> tuple[dict[str, list[Event]], list[Attribution]]:
        """Re-decide the cluster: :meth:`refresh`, :meth:`route_faults`, then :meth:`publish`."""
        self.refresh(config)
        routes = self.route_faults(config)
        return routes, self.publish(config)

    def refresh(self, config: EngineConfig) -> str:
        """Re-decide the cluster's faults from its whole event set (``faults``); returns the
        digest of their shape -- which faults at which level, kind, hosts and ports, not how
        much evidence each holds. Ports are named through the topology and the workloads' host
        addresses."""
        self.deferred = False
        topo = TopologySpec.model_validate(self.topology) if self.topology else None
        ips: dict[str, list[str]] = {}
        for wid in sorted(self.workloads):
            for host, ip in self.workloads[wid].ips.items():
                ips.setdefault(host, [ip])
        self.faults = correlate(self.events.values(), FabricIndex(topo, extra_ips=ips), cluster=self.cluster,
                                policy=config.fabric)
        shape = [[f.incident_id, f.level, f.code, list(f.hosts), list(f.ports)] for f in self.faults]
        return hashlib.blake2b(canonical_json(shape).encode(), digest_size=16).hexdigest()

    def route_faults(self, config: EngineConfig) -> dict[str, list[Event]]:
        """The relevant fault events of the last :meth:`refresh` for each workload whose set
        changed since it was last sent (workload id -> events)."""
        rules = config.causal
        routes: dict[str, list[Event]] = {}
        for wid in sorted(self.workloads):
            span = self.workloads[wid]
            linked = workload_faults(self.faults, span.nodes, span.start, span.end,
                                     rules.before_start_ns, rules.after_end_ns, policy=config.fabric)
            ids = sorted(ev.event_id for ev in linked)
            if ids != self.sent.get(wid, []):
                self.sent[wid] = ids
                routes[wid] = linked
        return routes

    def publish(self, config: EngineConfig) -> list[Attribution]:
        """The fabric and incident verdicts of the last :meth:`refresh` over the
        workloads' latest verdicts, revisions set: those whose content changed, and a
        withdrawal (:func:`correlators.fabric.withdrawal`) of each published one the evidence
        no longer supports. A verdict is final when every workload verdict it links is, else
        provisional."""
        verdicts = [self.verdicts[k] for k in sorted(self.verdicts)]
        current = assemble(self.faults, verdicts, ruleset_version=config.ruleset_version, policy=config.fabric)
        out = []
        for att in current:
            linked_verdicts = [v for v in verdicts if v.incident_id == att.incident_id]
            final = all(v.status == "final" for v in linked_verdicts)
            att = att.model_copy(update={"status": "final" if final else "provisional"})
            published = self._publish(att)
            if published is not None:
                self.live[att.attribution_id] = published
                out.append(published)
        standing = {a.attribution_id for a in current}
        for att_id in sorted(set(self.live) - standing):
            published = self._publish(withdrawal(self.live.pop(att_id), current))
            if published is not None:
                out.append(published)
        return out

    def _publish(self, att: Attribution) -> Attribution | None:
        """``att`` with its next revision if its content changed since the last publication."""
        digest = verdict_digest(att)
        revision, last = self.emitted.get(att.attribution_id, (0, None))
        if digest == last:
            return None
        self.emitted[att.attribution_id] = (revision + 1, digest)
        return att.model_copy(update={"revision": revision + 1})

    def to_state(self) -> dict[str, Any]:
        """Everything but the events (stored one per key by the driver)."""
        return {
            "cluster": self.cluster,
            "topology": self.topology,
            "workloads": {k: v.model_dump(mode="json") for k, v in sorted(self.workloads.items())},
            "verdicts": {k: v.model_dump(mode="json") for k, v in sorted(self.verdicts.items())},
            "sent": dict(sorted(self.sent.items())),
            "emitted": {k: list(v) for k, v in sorted(self.emitted.items())},
            "live": {k: v.model_dump(mode="json") for k, v in sorted(self.live.items())},
            "deferred": self.deferred,
            "shape": self.shape,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], events: Iterable[Event], **context: Any) -> "FabricWindow":
        """Rebuild from :meth:`to_state` and the stored events; ``context``: the fields that
        are not state (``config``, ``hold``, ``store``, ``topologies``, ``timing``)."""
        return cls(
            **context,
            cluster=state["cluster"],
            events={e.event_id: e for e in events},
            topology=state.get("topology"),
            workloads={k: Span.model_validate(v) for k, v in state.get("workloads", {}).items()},
            verdicts={k: Attribution.model_validate(v) for k, v in state.get("verdicts", {}).items()},
            sent={k: list(v) for k, v in state.get("sent", {}).items()},
            emitted={k: (int(v[0]), v[1]) for k, v in state.get("emitted", {}).items()},
            live={k: Attribution.model_validate(v) for k, v in state.get("live", {}).items()},
            deferred=bool(state.get("deferred", False)),
            shape=state.get("shape"),
        )
