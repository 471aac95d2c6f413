"""The in-process replay driver: an incident bundle in, its verdict out.

A thin driver of the engine, like the Faust agents: read the bundle (``connectors.bundle``),
extract events with the rule pack, enrich them with the allocation table, decide the verdict
(``correlators.attribution.decide``). No clock and no arrival order reaches the engine, so the
same bundle always gives byte-identical verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from connectors.bundle import BundleConnector
from correlators.attribution import WorkloadInfo, decide, default_causal_rules
from correlators.enrich import Allocation
from correlators.fabric import Fault, assemble, correlate, workload_faults
from correlators.rules import RulePack, load_rule_pack
from correlators.topology import FabricIndex
from schemas.bundle import ExpectedSpec
from schemas.records import Attribution, Event, Observation


@dataclass
class ReplayResult:
    """What one replay produced.

    ``attribution`` is the verdict of the bundle's workload (``workload.yaml``);
    ``attributions`` every verdict, in a fixed order: the workload verdicts (``workload.yaml``
    first, then ``workloads/*.yaml``), then per fabric fault its fabric-port verdict and its
    incident verdict. ``observations`` holds only the observations some event was extracted
    from (the evidence trail); ``lines_read`` counts every physical line of the bundle."""

    attribution: Attribution
    events: list[Event]
    observations: list[Observation]
    lines_read: int
    attributions: list[Attribution] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    expected: ExpectedSpec | None = None
    expected_error: str | None = None
    bundle: Path = field(default_factory=Path)


def fabric_index(connector: BundleConnector) -> FabricIndex:
    """The topology index of a bundle: ``topology.yaml`` plus the workloads' host addresses."""
    ips = {h: [f.ip] for w in connector.workloads for h, f in w.hosts.items() if f.ip}
    return FabricIndex(connector.topology, extra_ips=ips)


def decide_workloads(
    connector: BundleConnector,
    events: Sequence[Event],
    *,
    ruleset_version: str,
    gpus: dict[tuple[str, str], int] | None = None,
) -> tuple[list[Attribution], list[Fault], list[Event]]:
    """The verdicts of a bundle's workloads on one fabric, from their raw (unenriched) events.

    1. The fabric correlator (:func:`correlators.fabric.correlate`) finds port, switch and rack
       faults in all events, whatever workload they belong to (switch logs belong to none),
       naming ports through the topology.
    2. Each workload decides (:func:`correlators.attribution.decide`) over its own events
       (``workload_id``), enriched with its allocation, plus the fault events relevant to it
       (:func:`correlators.fabric.relevant`). The events themselves are not rewritten with
       topology facts, so a stream worker that learns the topology late still gives the same
       event ids. The other workloads' earlier events on its nodes are its ``history``
       (repeated XIDs on a GPU across jobs).
    3. :func:`correlators.fabric.assemble` gives each fault its fabric and incident verdicts.

    Returns (verdicts in the order of :class:`ReplayResult`, faults, enriched events). The
    stream's agents call the same engine functions per window."""
    rules = default_causal_rules()
    index = fabric_index(connector)
    cluster = connector.workload.cluster
    faults = correlate(events, index, cluster=cluster)
    verdicts: list[Attribution] = []
    enriched: dict[str, Event] = {}
    for spec in connector.workloads:
        alloc = Allocation.from_workload(spec)
        if gpus:
            alloc.gpus.update(gpus)
        own = [alloc.enrich(e) for e in events if e.workload_id == spec.workload_id]
        enriched.update((e.event_id, e) for e in own)
        linked = workload_faults(faults, spec.nodes, spec.start_ns, spec.end_ns,
                                 rules.before_start_ns, rules.after_end_ns)
        # earlier jobs' lines on the same nodes: the history a repeated XID is counted in
        nodes = set(spec.nodes)
        history = [e for e in events if e.workload_id != spec.workload_id and e.host in nodes
                   and e.at < spec.start_ns]
        verdicts.append(decide(
            WorkloadInfo.from_spec(spec), alloc, own + linked, connector.coverage_for(spec.workload_id),
            ruleset_version=ruleset_version, history=history,
        ))
    for event in events:
        if event.workload_id is None:
            enriched.setdefault(event.event_id, event)
    version = verdicts[0].ruleset_version
    verdicts += assemble(faults, verdicts, ruleset_version=version)
    return verdicts, faults, list(enriched.values())


def replay_bundle(
    path: str | Path,
    *,
    rule_pack: RulePack | None = None,
    on_observation: Callable[[Observation], None] | None = None,
) -> ReplayResult:
    """Replay the bundle at ``path``.

    Raises :class:`connectors.bundle.BundleError` for a missing or invalid bundle (the message
    names the file and field). ``on_observation`` is called for every materialised observation
    (progress reporting)."""
    pack = rule_pack or load_rule_pack()
    connector = BundleConnector(path, keywords=pack.prefilter_keywords)
    gpus = Allocation(workload_id="", cluster="")
    raw_events: list[Event] = []
    used: dict[str, Observation] = {}
    for obs in connector.observations():
        if on_observation is not None:
            on_observation(obs)
        if obs.kind == "telemetry":
            gpus.learn_gpu(obs)
        extracted = pack.extract(obs)
        if extracted:
            used[obs.observation_id] = obs
            raw_events.extend(extracted)
    # enrich after the whole bundle is read, so GPU tables learned from telemetry apply to
    # every event whatever the file order
    verdicts, faults, events = decide_workloads(connector, raw_events, ruleset_version=pack.version, gpus=gpus.gpus)
    return ReplayResult(
        attribution=verdicts[0],
        attributions=verdicts,
        faults=faults,
        events=sorted(events, key=lambda e: (e.at, e.event_id)),
        observations=[used[k] for k in sorted(used)],
        lines_read=connector.lines_read,
        expected=connector.expected,
        expected_error=connector.expected_error,
        bundle=Path(path),
    )


@dataclass(frozen=True)
class ScoreRow:
    """One bundle's score: which checks of expected.yaml failed (empty = hit)."""

    bundle: str
    expected: str
    got: str
    misses: tuple[str, ...]

    @property
    def hit(self) -> bool:
        return not self.misses


def score(att: Attribution, exp: ExpectedSpec, bundle: str, all_verdicts: Sequence[Attribution] = ()) -> ScoreRow:
    """Compare a verdict with expected.yaml: every field it gives is checked
    (:class:`schemas.bundle.ExpectedSpec`; BUNDLE.md: root_cause is a prefix of the code;
    culprit lists must be equal as sets; each expected alternative a prefix of a listed
    alternative's code). Each failed check is one miss with its reason. ``incidents`` counts the incident verdicts among
    ``all_verdicts``; ``incident`` is checked against the incident the workload verdict names."""
    misses = []
    if exp.domain and att.domain != exp.domain:
        misses.append(f"domain {att.domain} != {exp.domain}")
    if exp.domain_any_of and att.domain not in exp.domain_any_of:
        misses.append(f"domain {att.domain} not in {exp.domain_any_of}")
    if exp.root_cause and not _code_matches(att.root_cause.code, exp.root_cause):
        misses.append(f"root cause {att.root_cause.code} !~ {exp.root_cause}")
    misses += _set_misses("", [
        ("hosts", att.culprits.hosts, exp.culprit_hosts),
        ("ranks", att.culprits.ranks, exp.culprit_ranks),
        ("ports", att.culprits.ports, exp.culprit_ports),
    ])
    if exp.quality_any_of and att.quality not in exp.quality_any_of:
        misses.append(f"quality {att.quality} not in {exp.quality_any_of}")
    if exp.alternatives is not None:
        listed = sorted(a.code for a in att.alternatives)
        if not exp.alternatives and listed:
            misses.append(f"alternatives {listed} listed, none expected")
        for want in exp.alternatives:
            if not any(_code_matches(code, want) for code in listed):
                misses.append(f"alternative {want} not among {listed}")
    incidents = [v for v in all_verdicts if v.scope.kind == "incident"]
    if exp.incidents is not None and len(incidents) != exp.incidents:
        misses.append(f"{len(incidents)} incident(s) != {exp.incidents}")
    if exp.incident is not None:
        misses += _score_incident(att, exp.incident, incidents, all_verdicts)
    want = exp.root_cause or exp.domain or "/".join(exp.domain_any_of or []) or "?"
    got = f"{att.root_cause.code} ({att.domain}, {att.quality})"
    return ScoreRow(bundle=bundle, expected=want, got=got, misses=tuple(misses))


def _code_matches(code: str, want: str) -> bool:
    """``want`` is a prefix of ``code`` (BUNDLE.md: ``gpu.xid`` matches ``gpu.xid.79``)."""
    return code.startswith(want)


def _set_misses(prefix: str, checks: Sequence[tuple[str, Sequence, Sequence | None]]) -> list[str]:
    """One miss per (label, got, want) whose sets differ; ``want`` None = not checked."""
    return [
        f"{prefix}{label} {list(got)} != {sorted(want)}"
        for label, got, want in checks
        if want is not None and sorted(got) != sorted(want)
    ]


def _score_incident(att: Attribution, exp, incidents: Sequence[Attribution], verdicts: Sequence[Attribution]) -> list[str]:
    inc = next((i for i in incidents if i.scope.id == att.incident_id), None)
    if inc is None:
        return [f"no incident verdict for incident_id {att.incident_id}"]
    misses = []
    level = {"fabric.switch": "switch", "host.rack": "rack"}.get(inc.root_cause.code.rsplit(".", 1)[0], "port")
    if exp.level and level != exp.level:
        misses.append(f"incident level {level} != {exp.level}")
    if exp.root_cause and not inc.root_cause.code.startswith(exp.root_cause):
        misses.append(f"incident root cause {inc.root_cause.code} !~ {exp.root_cause}")
    misses += _set_misses("incident ", [
        ("workloads", inc.affected.workloads, exp.workloads),
        ("ports", inc.culprits.ports, exp.culprit_ports),
        ("hosts", inc.culprits.hosts, exp.culprit_hosts),
    ])
    members = {v.attribution_id for v in verdicts if v.incident_id == inc.scope.id and v.scope.kind != "incident"}
    if set(inc.members) != members:
        misses.append("incident members do not match the verdicts that name it")
    return misses
