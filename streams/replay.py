"""The in-process replay driver: an incident bundle in, its verdict out.

A thin driver of the engine, like the Faust agents: read the bundle (``connectors.bundle``),
extract events with the rule pack, enrich them with the allocation table, decide the verdict
(``correlators.attribution.decide``). No clock and no arrival order reaches the engine, so the
same bundle always gives byte-identical verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from connectors.bundle import BundleConnector
from correlators.attribution import WorkloadInfo, decide
from correlators.enrich import Allocation
from correlators.rules import RulePack, load_rule_pack
from schemas.bundle import ExpectedSpec
from schemas.records import Attribution, Event, Observation


@dataclass
class ReplayResult:
    """What one replay produced.

    ``observations`` holds only the observations some event was extracted from (the evidence
    trail); ``lines_read`` counts every physical line of the bundle."""

    attribution: Attribution
    events: list[Event]
    observations: list[Observation]
    lines_read: int
    expected: ExpectedSpec | None = None
    expected_error: str | None = None
    bundle: Path = field(default_factory=Path)


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
    connector = BundleConnector(path, keywords=pack.keywords)
    alloc = Allocation.from_workload(connector.workload)
    raw_events: list[Event] = []
    used: dict[str, Observation] = {}
    for obs in connector.observations():
        if on_observation is not None:
            on_observation(obs)
        if obs.kind == "telemetry":
            alloc.learn_gpu(obs)
        extracted = pack.extract(obs)
        if extracted:
            used[obs.observation_id] = obs
            raw_events.extend(extracted)
    # enrich after the whole bundle is read, so GPU tables learned from telemetry apply to
    # every event whatever the file order
    events = [alloc.enrich(e) for e in raw_events]
    attribution = decide(
        WorkloadInfo.from_spec(connector.workload),
        alloc,
        events,
        connector.coverage(),
        ruleset_version=pack.version,
    )
    return ReplayResult(
        attribution=attribution,
        events=sorted({e.event_id: e for e in events}.values(), key=lambda e: (e.at, e.event_id)),
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


def score(att: Attribution, exp: ExpectedSpec, bundle: str) -> ScoreRow:
    """Compare a verdict with expected.yaml (BUNDLE.md: root_cause is a prefix of the code;
    culprit lists must be equal as sets)."""
    misses = []
    if exp.domain and att.domain != exp.domain:
        misses.append(f"domain {att.domain} != {exp.domain}")
    if exp.domain_any_of and att.domain not in exp.domain_any_of:
        misses.append(f"domain {att.domain} not in {exp.domain_any_of}")
    if exp.root_cause and not att.root_cause.code.startswith(exp.root_cause):
        misses.append(f"root cause {att.root_cause.code} !~ {exp.root_cause}")
    if exp.culprit_hosts is not None and sorted(att.culprits.hosts) != sorted(exp.culprit_hosts):
        misses.append(f"hosts {att.culprits.hosts} != {sorted(exp.culprit_hosts)}")
    if exp.culprit_ranks is not None and sorted(att.culprits.ranks) != sorted(exp.culprit_ranks):
        misses.append(f"ranks {att.culprits.ranks} != {sorted(exp.culprit_ranks)}")
    if exp.culprit_ports is not None and sorted(att.culprits.ports) != sorted(exp.culprit_ports):
        misses.append(f"ports {att.culprits.ports} != {sorted(exp.culprit_ports)}")
    if exp.quality_any_of and att.quality not in exp.quality_any_of:
        misses.append(f"quality {att.quality} not in {exp.quality_any_of}")
    want = exp.root_cause or exp.domain or "/".join(exp.domain_any_of or []) or "?"
    got = f"{att.root_cause.code} ({att.domain}, {att.quality})"
    return ScoreRow(bundle=bundle, expected=want, got=got, misses=tuple(misses))
