"""Event-time windows of the workload correlator, for drivers that see events one at a time.

The streaming driver (``streams/``) feeds events as they arrive; this module decides, without
any clock of its own, when a workload's window has a verdict to emit:

* **provisional**: a decisive cause (a cause rule of weight >= ``decisive_weight``, e.g. an
  XID 79 on one of the workload's hosts) arrived -- emit at once, do not wait for the watchdog
  timeouts ten minutes later;
* **final**: the window's watermark (the max event time of the workload's own events, minus
  the allowed lateness) passed the workload's end; in live mode the driver also closes a window
  that saw nothing new for ``idle_timeout_s`` of wall-clock time (that only decides *when* to
  emit, never *what*). The watermark is per workload, not per partition: replayed incidents
  from different days share partitions, and one's events must not close another's window;
* **late**: an event for a closed window re-opens it; the next emission is a new revision.

What is emitted is always ``correlators.attribution.decide`` over the window's whole, sorted
event set, so the content never depends on arrival order; ``revision`` counts the changes of the
verdict a driver emitted for that scope (an identical recomputation is not re-emitted). The
replay driver sees the whole window at once, so its verdict is revision 1.

A window's state is plain data (:meth:`WorkloadWindow.to_state` / :meth:`from_state`) so a
driver can keep it in a durable, changelogged table.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from correlators.attribution import WorkloadInfo, decide, default_causal_rules, propose
from correlators.enrich import Allocation
from schemas.bundle import WorkloadSpec
from schemas.records import Attribution, CoverageEntry, Event, canonical_json

NS = 1_000_000_000


@dataclass(frozen=True)
class WindowPolicy:
    """When windows emit. ``allowed_lateness_s``: how far behind the max event time an event
    may arrive and still be in the final verdict. ``idle_timeout_s``: live mode only (None in
    replay-through-stream tests that need exact results). ``decisive_weight``: cause weight
    (0..1) from which a single event triggers a provisional verdict."""

    allowed_lateness_s: float = 30.0
    idle_timeout_s: float | None = 10.0
    decisive_weight: float = 0.9

    @property
    def lateness_ns(self) -> int:
        return int(self.allowed_lateness_s * NS)


def verdict_digest(att: Attribution) -> str:
    """Digest of a verdict's content, revision excluded: equal digests = nothing new."""
    data = att.model_dump(mode="json")
    data.pop("revision")
    return hashlib.blake2b(canonical_json(data).encode(), digest_size=16).hexdigest()


def is_decisive(event: Event, weight: float, start_ns: int | None = None) -> bool:
    """True when ``event`` alone proposes a cause of at least ``weight``."""
    rules = default_causal_rules()
    return any(h.strength >= weight for h in propose([event], rules, start_ns=start_ns))


@dataclass
class WorkloadWindow:
    """One workload attempt's window: the scheduler's spec (once known), raw events by id,
    coverage reports by source, GPU tables learned from telemetry, and emission state."""

    workload_id: str
    spec: dict[str, Any] | None = None
    events: dict[str, Event] = field(default_factory=dict)
    coverage: dict[str, CoverageEntry] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)  # "host|pci" -> GPU index
    faults: dict[str, Event] = field(default_factory=dict)  # fabric fault events relevant to it
    max_at: int = 0
    revision: int = 0
    digest: str | None = None
    closed: bool = False

    # -- updates -------------------------------------------------------------------------

    def add_event(self, event: Event) -> bool:
        """Add an event (duplicates collapse); returns True if it was new. A new event in a
        closed window re-opens it."""
        if event.event_id in self.events:
            return False
        self.events[event.event_id] = event
        self.max_at = max(self.max_at, event.at)
        self.closed = False
        return True

    def add_coverage(self, entry: CoverageEntry) -> None:
        """Record a connector's coverage report for one source (latest wins)."""
        self.coverage[entry.source] = entry

    def set_faults(self, events: list[Event]) -> bool:
        """Replace the fabric/rack fault events relevant to this workload (the fabric
        correlator sends the whole current set); returns True if it changed."""
        new = {e.event_id: e for e in events}
        if new.keys() == self.faults.keys():
            return False
        self.faults = new
        return True

    def learn_gpu(self, host: str, pci: str, index: int) -> None:
        """Record that GPU ``pci`` of ``host`` has index ``index`` (from telemetry)."""
        self.gpus[f"{host}|{pci}"] = index

    # -- decisions -----------------------------------------------------------------------

    @property
    def workload(self) -> WorkloadSpec | None:
        """The parsed spec (cached until ``spec`` changes)."""
        if not self.spec:
            return None
        cached = self.__dict__.get("_parsed")
        if cached is None or cached[0] is not self.spec:
            cached = (self.spec, WorkloadSpec.model_validate(self.spec))
            self.__dict__["_parsed"] = cached
        return cached[1]

    def end_ns(self) -> int | None:
        """The workload's end from its spec, if the scheduler said it ended."""
        spec = self.workload
        return spec.end_ns if spec else None

    def due(self, watermark_ns: int, policy: WindowPolicy) -> bool:
        """True when the watermark has passed the workload's end plus the allowed lateness
        and the window holds something not yet closed."""
        end = self.end_ns()
        return (
            not self.closed
            and self.spec is not None
            and end is not None
            and watermark_ns - policy.lateness_ns >= end
        )

    def verdict(self, ruleset_version: str) -> Attribution | None:
        """The verdict over everything in the window (None while the spec is unknown)."""
        spec = self.workload
        if spec is None:
            return None
        # enrichment depends only on the spec, the GPU tables and the event: cache it, so a
        # window re-decided on every revision does not re-enrich thousands of events
        gpus = tuple(sorted(self.gpus.items()))
        cache = self.__dict__.get("_enriched")
        if cache is None or cache[0] is not spec or cache[1] != gpus:
            alloc = Allocation.from_workload(spec)
            for key, index in gpus:
                host, pci = key.split("|", 1)
                alloc.gpus[(host, pci)] = index
            cache = (spec, gpus, alloc, {})
            self.__dict__["_enriched"] = cache
        alloc, enriched = cache[2], cache[3]
        for event_id, event in self.events.items():
            if event_id not in enriched:
                enriched[event_id] = alloc.enrich(event)
        # fault events come from the fabric correlator whole, as replay hands them to decide
        events = [enriched[event_id] for event_id in self.events] + list(self.faults.values())
        coverage = [self.coverage[k] for k in sorted(self.coverage)]
        return decide(
            WorkloadInfo.from_spec(spec), alloc, events, coverage, ruleset_version=ruleset_version
        )

    def emit(self, ruleset_version: str, *, final: bool) -> Attribution | None:
        """The verdict to publish now, or None if it equals the last one emitted. ``final``
        closes the window."""
        att = self.verdict(ruleset_version)
        if att is None:
            return None
        if final:
            self.closed = True
        if not final:
            att = att.model_copy(update={"final": False})
        digest = verdict_digest(att)
        if digest == self.digest:
            return None
        self.digest = digest
        self.revision += 1
        return att.model_copy(update={"revision": self.revision})

    # -- persistence ---------------------------------------------------------------------

    def meta_state(self) -> dict[str, Any]:
        """Everything but the events (which a driver stores one per key, so this changes
        only with the spec, coverage, GPU tables and emissions, not with every event)."""
        return {
            "workload_id": self.workload_id,
            "spec": self.spec,
            "coverage": {k: v.model_dump(mode="json") for k, v in sorted(self.coverage.items())},
            "gpus": dict(sorted(self.gpus.items())),
            "faults": [self.faults[k].model_dump(mode="json") for k in sorted(self.faults)],
            "revision": self.revision,
            "digest": self.digest,
            "closed": self.closed,
        }

    @classmethod
    def from_state(cls, meta: dict[str, Any], events: list[Event]) -> "WorkloadWindow":
        """Rebuild a window from :meth:`meta_state` and its stored events."""
        window = cls(
            workload_id=meta["workload_id"],
            spec=meta.get("spec"),
            coverage={k: CoverageEntry.model_validate(v) for k, v in meta.get("coverage", {}).items()},
            gpus=dict(meta.get("gpus", {})),
            faults={e.event_id: e for e in (Event.model_validate(f) for f in meta.get("faults", []))},
            max_at=max((e.at for e in events), default=0),
            revision=int(meta.get("revision", 0)),
            digest=meta.get("digest"),
            closed=bool(meta.get("closed", False)),
        )
        window.events = {e.event_id: e for e in events}
        return window
