"""The windows of the pipeline (:mod:`correlators.pipeline`) and its one routing rule.

* :class:`WorkloadIndex` -- which workload a host's record at an event time belongs to. The
  bundle reader and the pipeline both route with it.
* :class:`WorkloadWindow` -- one workload attempt's evidence, and when it has a verdict:

  - **provisional**: a decisive cause (a cause rule of weight >= ``decisive_weight``, e.g. an
    XID 79 on one of the workload's hosts) arrived -- emit at once, do not wait for the
    watchdog timeouts ten minutes later;
  - **final**: the window's watermark (the max event time of the workload's own events, minus
    the allowed lateness) passed the workload's end; a live driver also closes a window that
    saw nothing new for ``idle_timeout_s`` of its wall clock (that decides only *when* to emit,
    never *what*). The watermark is per workload, not per partition: replayed incidents from
    different days share partitions, and one's events must not close another's window;
  - **late**: an event for a closed window re-opens it; the next emission is a new revision.

* :class:`~correlators.fabric_window.FabricWindow` (its own module) -- one cluster's fabric
  evidence and what it published; :class:`~correlators.host_window.HostWindow` -- one host's.

What a window emits is always the engine's decision over its whole, sorted evidence
(:func:`correlators.attribution.decide`, :func:`correlators.fabric.correlate` +
:func:`~correlators.fabric.assemble`), so the content never depends on arrival order;
``revision`` counts the changes of the verdict published for a scope (an identical
recomputation is not re-published). Window state is plain JSON data (``to_state`` /
``from_state``) so a driver can keep it in a changelogged table.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from correlators.attribution import WorkloadInfo, decide, propose
from correlators.config import EngineConfig, WindowPolicy
from correlators.enrich import Allocation
from correlators.identity import disagreements
from correlators.fabric import PORT_EVENT_TYPES
from schemas.bundle import WorkloadSpec
from schemas.messages import Span
from schemas.records import Attribution, CoverageEntry, Event, canonical_json

__all__ = ["WindowPolicy", "fabric_relevant", "host_key", "workload_key", "WorkloadIndex", "WorkloadWindow", "verdict_digest", "verdict_content", "is_decisive"]



def verdict_digest(att: Attribution) -> str:
    """Digest of a verdict's content, revision excluded: equal digests = nothing new."""
    data = att.model_dump(mode="json")
    data.pop("revision")
    return hashlib.blake2b(canonical_json(data).encode(), digest_size=16).hexdigest()


def verdict_content(att: Attribution) -> str:
    """Digest of what a verdict says: its content without the bookkeeping of when it was
    decided (``revision``, ``decided_at``/``decided_at_utc``, the window's ``end``/``end_utc``
    and ``cost.verdict_after_s``, which move with every event of a running window). Two
    provisional verdicts with equal digests tell a consumer nothing new."""
    data = att.model_dump(mode="json")
    for key in ("revision", "decided_at", "decided_at_utc"):
        data.pop(key, None)
    for key in ("end", "end_utc"):
        (data.get("window") or {}).pop(key, None)
    (data.get("cost") or {}).pop("verdict_after_s", None)
    return hashlib.blake2b(canonical_json(data).encode(), digest_size=16).hexdigest()


def fabric_relevant(event: Event) -> bool:
    """Events the fabric correlator reads: about a cable, or a node the scheduler lost."""
    return event.type in PORT_EVENT_TYPES or (
        event.type == "sched.node_state" and str(event.attributes.get("state", "")).upper() == "DOWN"
    )


def reads_host_facts(event: Event) -> bool:
    """Events whose verdict reads their host's facts (its GPU table, for the GPU's index; its
    node history, for repetition): those that name a GPU, and XIDs."""
    return event.gpu is not None or event.type == "gpu.xid"


def is_decisive(event: Event, config: EngineConfig, start_ns: int | None = None) -> bool:
    """True when ``event`` alone proposes a cause of at least the window policy's
    ``decisive_weight``."""
    weight = config.window.decisive_weight
    return any(h.strength >= weight for h in propose([event], config.causal, start_ns=start_ns))


def host_key(cluster: str, host: str) -> str:
    """The key of a host's facts in the pipeline's host-keyed stores: ``<cluster>/<host>``
    (node names are unique within a cluster only)."""
    return f"{cluster}/{host}"


def workload_key(cluster: str, workload_id: str) -> str:
    """The key of a workload's window on the workload channel and in the stores:
    ``<cluster>/<workload id>``, the bare id for a workload of no cluster (scheduler job ids
    are unique within a cluster only: job 1001 of two clusters is two windows)."""
    return f"{cluster}/{workload_id}" if cluster else workload_id


class WorkloadIndex:
    """Host -> the workloads that ran on it, and the one rule that routes a host's record.

    ``spans`` is a mapping :func:`host_key` -> list of ``[workload_id, start_ns, end_ns |
    None]`` (UTC ns), the shape a driver keeps in a table (the stream's global ``allocation``
    table; a dict in replay). A record of ``host`` at ``at_ns`` belongs to the workload whose window -- its
    start less ``before_ns`` to its end plus ``after_ns`` (the causal rules' ``before_start_s``
    / ``after_end_s``) -- holds ``at_ns``; of several, the latest started (a line just after
    job A ended on a host where job B has started is B's); else to none."""

    def __init__(self, spans: Any, *, before_ns: int, after_ns: int) -> None:
        self.spans = spans
        self.before_ns = before_ns
        self.after_ns = after_ns

    def add(self, span: Span) -> None:
        """Record ``span`` on each of its nodes (a span of the same workload is replaced)."""
        entry = [span.workload_id, span.start, span.end]
        for host in span.nodes:
            key = host_key(span.cluster, host)
            kept = [s for s in (self.spans.get(key) or []) if s[0] != span.workload_id]
            self.spans[key] = sorted([*kept, entry], key=lambda s: (s[1], s[0]))

    def holds(self, entry: Sequence[Any], at_ns: int) -> bool:
        """True when ``at_ns`` falls in the window of span ``entry`` (``[wid, start, end]``)."""
        _, start, end = entry
        return start - self.before_ns <= at_ns and (end is None or at_ns <= end + self.after_ns)

    def route(self, cluster: str, host: str, at_ns: int, entries: Iterable[Sequence[Any]] | None = None
              ) -> str | None:
        """The workload a record of ``host`` of ``cluster`` at ``at_ns`` belongs to, or None.
        ``entries`` (default: the host's spans) restricts the candidates."""
        best = None
        candidates = (self.spans.get(host_key(cluster, host)) or []) if entries is None else entries
        for entry in candidates:
            if self.holds(entry, at_ns) and (best is None or (entry[1], entry[0]) > (best[1], best[0])):
                best = entry
        return best[0] if best else None


@dataclass
class WorkloadWindow:
    """One workload attempt's window: the scheduler's spec (once known), raw events by id,
    coverage reports by source, the fabric faults relevant to it, and emission state."""

    workload_id: str
    spec: WorkloadSpec | None = None
    events: dict[str, Event] = field(default_factory=dict)
    coverage: dict[str, CoverageEntry] = field(default_factory=dict)
    faults: dict[str, Event] = field(default_factory=dict)
    #: host -> {"gpus": {PCI bus id: index}, "history": [event data]} (HostFactsMessage)
    host_facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_at: int = 0
    revision: int = 0
    digest: str | None = None
    content: str | None = None  # verdict_content of the last verdict published
    closed: bool = False
    cabled: bool = False  # holds an event the fabric correlator reads (fabric_relevant)

    # -- updates -------------------------------------------------------------------------

    def add_event(self, event: Event) -> bool:
        """Add an event (duplicates collapse); returns True if it was new. A new event in a
        closed window re-opens it."""
        if event.event_id in self.events:
            return False
        self.events[event.event_id] = event
        self.max_at = max(self.max_at, event.at)
        self.cabled = self.cabled or fabric_relevant(event)
        self.closed = False
        return True

    def add_coverage(self, entry: CoverageEntry) -> bool:
        """Record a connector's coverage report for one source (latest wins); True if it
        changed anything."""
        if self.coverage.get(entry.source) == entry:
            return False
        cache = self._coverage_json()
        self.coverage[entry.source] = entry
        cache[entry.source] = entry.model_dump(mode="json")
        return True

    def _coverage_json(self) -> dict[str, Any]:
        """The coverage entries as JSON data (kept with ``coverage``: a window with thousands
        of sources is not re-serialised entry by entry on every update)."""
        cache = self.__dict__.get("_cov_json")
        if cache is None or len(cache) != len(self.coverage):
            cache = self.__dict__["_cov_json"] = {k: v.model_dump(mode="json") for k, v in self.coverage.items()}
        return cache

    def set_spec(self, spec: WorkloadSpec) -> bool:
        """Record the scheduler's spec; True if it changed (an identical re-sent record
        changes nothing)."""
        if self.spec == spec:
            return False
        self.spec = spec
        return True

    def set_faults(self, events: list[Event]) -> bool:
        """Replace the fabric/rack fault events relevant to this workload (the fabric
        correlator sends the whole current set); returns True if it changed."""
        new = {e.event_id: e for e in events}
        if new.keys() == self.faults.keys():
            return False
        self.faults = new
        return True

    def set_host_facts(self, host: str, gpus: Mapping[str, int], history: Sequence[Event]) -> bool:
        """Replace what ``host`` knows (its GPU table, the XID events of earlier jobs); True if
        it changed."""
        facts = {"gpus": dict(sorted(gpus.items())),
                 "history": [e.model_dump(mode="json") for e in sorted(history, key=lambda e: (e.at, e.event_id))]}
        if self.host_facts.get(host) == facts:
            return False
        self.host_facts[host] = facts
        self.__dict__.pop("_history", None)
        return True

    def gpus(self) -> dict[tuple[str, str], int]:
        """(host, PCI bus id) -> GPU index, from the hosts' facts."""
        return {(h, pci): int(i) for h in sorted(self.host_facts) for pci, i in self.host_facts[h]["gpus"].items()}

    def history(self) -> list[Event]:
        """The XID events of earlier jobs on the workload's hosts (cached until facts change)."""
        cached = self.__dict__.get("_history")
        if cached is None:
            cached = [Event.model_validate(d) for h in sorted(self.host_facts) for d in self.host_facts[h]["history"]]
            self.__dict__["_history"] = cached
        return cached

    # -- decisions -----------------------------------------------------------------------

    def due(self, policy: WindowPolicy) -> bool:
        """True when the watermark (max event time less the allowed lateness) has passed the
        workload's end and the window is not closed."""
        end = self.spec.end_ns if self.spec else None
        return not self.closed and end is not None and self.max_at - policy.lateness_ns >= end

    def verdict(self, config: EngineConfig) -> Attribution | None:
        """The verdict over everything in the window (None while the spec is unknown): its
        events enriched with the allocation and the hosts' GPU tables, the fabric faults, the
        coverage, and the hosts' history (:func:`correlators.attribution.decide`)."""
        spec = self.spec
        gpus = self.gpus()
        if spec is None:
            return None
        # enrichment depends only on the spec, the GPU tables and the event: cached, so a
        # window re-decided on every revision does not re-enrich thousands of events
        key = tuple(sorted(gpus.items()))
        cache = self.__dict__.get("_enriched")
        if cache is None or cache[0] is not spec or cache[1] != key:
            alloc = Allocation.from_workload(spec)
            alloc.gpus.update(gpus)
            cache = (spec, key, alloc, {})
            self.__dict__["_enriched"] = cache
        alloc, enriched = cache[2], cache[3]
        for event_id, event in self.events.items():
            if event_id not in enriched:
                enriched[event_id] = alloc.enrich(event)
        events = [enriched[event_id] for event_id in self.events] + list(self.faults.values())
        # a host name a line gave that was not taken is reported (correlators.identity)
        coverage = [self.coverage[k] for k in sorted(self.coverage)] + disagreements(enriched[i] for i in self.events)
        return decide(WorkloadInfo.from_spec(spec), alloc, events, coverage,
                      ruleset_version=config.ruleset_version, rules=config.causal, history=self.history(),
                      baseline=config.baseline)

    def drop_caches(self) -> None:
        """Forget what :meth:`verdict` caches (the enriched copy of every event, the hosts'
        history): a closed window's memory is then its evidence alone; the next verdict, after
        a late event re-opened it, builds them again."""
        self.__dict__.pop("_enriched", None)
        self.__dict__.pop("_history", None)

    def enriched_events(self) -> list[Event]:
        """The window's events as the last :meth:`verdict` enriched them."""
        cache = self.__dict__.get("_enriched")
        return list(cache[3].values()) if cache else []

    def emit(self, config: EngineConfig, *, final: bool, coalesce: bool = False) -> Attribution | None:
        """The verdict to publish now, or None if it equals the last one published.
        ``final`` closes the window (status ``final``); else the verdict is ``provisional``.
        ``coalesce`` (provisional only): also None when it says what the last one published
        said, bookkeeping aside (:func:`verdict_content`)."""
        att = self.verdict(config)
        if att is None:
            return None
        if final:
            self.closed = True
        else:
            att = att.model_copy(update={"status": "provisional"})
        digest = verdict_digest(att)
        if digest == self.digest:
            return None
        content = verdict_content(att)
        if coalesce and not final and content == self.content:
            return None
        self.digest = digest
        self.content = content
        self.revision += 1
        return att.model_copy(update={"revision": self.revision})

    # -- persistence ---------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """Everything but the events and the host facts (a driver stores those one per key,
        so this changes only with the spec, coverage, faults and emissions, not with every
        event or every host's GPU table)."""
        return {
            "workload_id": self.workload_id,
            "spec": self.spec.model_dump(mode="json") if self.spec else None,
            "coverage": dict(sorted(self._coverage_json().items())),
            "faults": [self.faults[k].model_dump(mode="json") for k in sorted(self.faults)],
            "revision": self.revision,
            "digest": self.digest,
            "content": self.content,
            "closed": self.closed,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], events: Iterable[Event],
                   host_facts: Mapping[str, dict[str, Any]] | None = None) -> "WorkloadWindow":
        """Rebuild a window from :meth:`to_state`, its stored events and host facts."""
        window = cls(
            workload_id=state["workload_id"],
            spec=WorkloadSpec.model_validate(state["spec"]) if state.get("spec") else None,
            coverage={k: CoverageEntry.model_validate(v) for k, v in state.get("coverage", {}).items()},
            faults={e.event_id: e for e in (Event.model_validate(f) for f in state.get("faults", []))},
            revision=int(state.get("revision", 0)),
            digest=state.get("digest"),
            content=state.get("content"),
            closed=bool(state.get("closed", False)),
        )
        for event in events:
            window.add_event(event)
        window.host_facts = dict(sorted((host_facts or {}).items()))
        window.closed = bool(state.get("closed", False))
        return window
