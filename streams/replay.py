"""The in-process replay driver: an incident bundle in, its verdict out.

A thin driver of the pipeline (:mod:`correlators.pipeline`), like the Faust worker: the
bundle's records as the bundle publisher would send them, through an in-memory router in batch
mode. No clock and no arrival order reaches the engine, so the same bundle always gives
byte-identical verdicts, and the stream gives the same ones (``docs/architecture.md``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from connectors.publish import bundle_records
from correlators.config import EngineConfig
from correlators.fabric import Fault
from correlators.pipeline import InMemoryRouter, Pipeline, Publish, stored_event
from correlators.rules import RulePack
from correlators.rules.engine import gc_paused
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


#: formats of the records that state facts rather than lines (workload specs, topology,
#: coverage): kept with the evidence, so a replay's stored records can be replayed again
FACT_FORMATS = ("workload_yaml", "topology_yaml", "topology", "coverage")


def replay_observations(
    observations: Iterable[Observation],
    config: EngineConfig,
    *,
    on_observation: Callable[[Observation], None] | None = None,
) -> tuple[list[Attribution], Pipeline, dict[str, Observation]]:
    """Run the pipeline over ``observations`` in batch mode (:class:`InMemoryRouter`): one
    decision per workload, every verdict revision 1, whatever the order of the input.

    Returns (the verdicts: workload verdicts in workload-id order, then each cluster's fabric
    and incident verdicts; the pipeline, for its windows; observation id -> observation, for
    the observations some event was extracted from). Runs with the garbage collector paused
    (:func:`correlators.rules.engine.gc_paused`): the records it builds hold no reference cycles."""
    pipeline = Pipeline(config, hold=True)
    router = InMemoryRouter(pipeline)
    used: dict[str, Observation] = {}
    with gc_paused():
        for obs in observations:
            if on_observation is not None:
                on_observation(obs)
            effects = pipeline.ingest(obs)
            if obs.kind in ("scheduler_event", "topology", "health_event") and obs.format in FACT_FORMATS \
                    or any(isinstance(e, Publish) and e.topic == "events" for e in effects):
                used[obs.observation_id] = obs
            router.send(effects)
            router.drain()
        return router.finish(), pipeline, used


def replay_bundle(
    path: str | Path,
    *,
    rule_pack: RulePack | None = None,
    config: EngineConfig | None = None,
    on_observation: Callable[[Observation], None] | None = None,
) -> ReplayResult:
    """Replay the bundle at ``path``: its records as the bundle publisher sends them
    (:func:`connectors.publish.bundle_records`) through :func:`replay_observations`.

    ``config`` defaults to the packaged rules (``rule_pack`` replaces just the pack). Raises
    :class:`connectors.bundle.BundleError` for a missing or invalid bundle (the message names
    the file and field). ``on_observation`` is called for every materialised observation
    (progress reporting). Runs with the garbage collector paused
    (:func:`correlators.rules.engine.gc_paused`): the records it builds hold no reference cycles."""
    config = config or EngineConfig.default()
    if rule_pack is not None:
        config = dataclasses.replace(config, pack=rule_pack)
    with gc_paused():
        return _replay(path, config, on_observation)


def _replay(path: str | Path, config: EngineConfig,
            on_observation: Callable[[Observation], None] | None) -> ReplayResult:
    records, connector = bundle_records(path, keywords=config.pack.prefilter_keywords)
    verdicts, pipeline, used = replay_observations(records, config, on_observation=on_observation)
    # the bundle's order: workload.yaml's verdict first, then workloads/*.yaml's, then the rest
    order = {spec.workload_id: i for i, spec in enumerate(connector.workloads)}
    workload = sorted((v for v in verdicts if v.scope.kind == "workload"), key=lambda v: order.get(v.scope.id, len(order)))
    verdicts = workload + [v for v in verdicts if v.scope.kind != "workload"]
    events: dict[str, Event] = {}
    for wid in sorted(pipeline.windows):
        events.update((e.event_id, e) for e in pipeline.windows[wid].enriched_events())
    for _, value in sorted(pipeline.stores.host_events.items()):  # events no workload claimed
        event = stored_event(value)
        events.setdefault(event.event_id, event)
    return ReplayResult(
        attribution=verdicts[0],
        attributions=verdicts,
        faults=[f for c in sorted(pipeline.fabric) for f in pipeline.fabric[c].faults],
        events=sorted(events.values(), key=lambda e: (e.at, e.event_id)),
        observations=[used[k] for k in sorted(used)],
        lines_read=connector.lines_read,
        expected=connector.expected,
        expected_error=connector.expected_error,
        bundle=Path(path),
    )


@dataclass(frozen=True)
class ScoreRow:
    """One bundle's score: which checks of expected.yaml failed (empty = hit). ``quality`` is
    the verdict's quality ("" when no verdict was scored)."""

    bundle: str
    expected: str
    got: str
    misses: tuple[str, ...]
    quality: str = ""

    @property
    def hit(self) -> bool:
        return not self.misses

    @property
    def right(self) -> bool:
        """The verdict's conclusion is right: every check but its quality passes."""
        return bool(self.quality) and all(m.startswith(QUALITY_MISS) for m in self.misses)


#: how a miss on the quality check starts (:func:`score`)
QUALITY_MISS = "quality "


@dataclass(frozen=True)
class CalibrationRow:
    """Calibration of one quality level over scored bundles: ``verdicts`` scored at that
    level, ``right`` of them right in everything but quality (:attr:`ScoreRow.right`),
    ``target`` the least hit rate the level promises (DESIGN.md: definitive 0.98, probable
    0.80; None where the level promises none)."""

    quality: str
    verdicts: int
    right: int
    target: float | None

    @property
    def rate(self) -> float | None:
        """``right / verdicts`` (None for no verdict)."""
        return self.right / self.verdicts if self.verdicts else None

    @property
    def met(self) -> bool:
        """The level keeps its promise (a level with no verdict keeps it)."""
        return self.target is None or self.rate is None or self.rate >= self.target


#: the least hit rate each quality level promises (DESIGN.md "Quality means what it says")
CALIBRATION_TARGETS: dict[str, float | None] = {
    "definitive": 0.98, "probable": 0.80, "ambiguous": None, "insufficient": None}


def calibration(rows: Sequence[ScoreRow]) -> list[CalibrationRow]:
    """Per quality level (definitive, probable, ambiguous, insufficient): how many scored
    verdicts have it and how many of those are right (:attr:`ScoreRow.right`). Rows without a
    verdict (a bundle that could not be replayed) are left out."""
    out = []
    for level, target in CALIBRATION_TARGETS.items():
        at = [r for r in rows if r.quality == level]
        out.append(CalibrationRow(quality=level, verdicts=len(at), right=sum(r.right for r in at), target=target))
    return out


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
    if exp.outcome and att.outcome != exp.outcome:
        misses.append(f"outcome {att.outcome} != {exp.outcome}")
    if exp.not_domain and att.domain in exp.not_domain:
        misses.append(f"domain {att.domain} in not_domain {exp.not_domain}")
    causes = [exp.root_cause] if isinstance(exp.root_cause, str) else exp.root_cause or []
    if causes and not any(_code_matches(att.root_cause.code, want) for want in causes):
        misses.append(f"root cause {att.root_cause.code} !~ {' | '.join(causes)}")
    misses += _set_misses("", [
        ("hosts", att.culprits.hosts, exp.culprit_hosts),
        ("ranks", att.culprits.ranks, exp.culprit_ranks),
        ("ports", att.culprits.ports, exp.culprit_ports),
    ])
    if exp.quality_any_of and att.quality not in exp.quality_any_of:
        misses.append(f"{QUALITY_MISS}{att.quality} not in {exp.quality_any_of}")
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
    want = " | ".join(causes) or exp.domain or "/".join(exp.domain_any_of or []) or "?"
    got = f"{att.root_cause.code} ({att.domain}, {att.quality})"
    return ScoreRow(bundle=bundle, expected=want, got=got, misses=tuple(misses), quality=att.quality)


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
