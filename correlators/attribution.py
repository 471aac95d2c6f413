"""The workload correlator: from the events of one workload attempt to its verdict.

A verdict is a pure function of the set of events in the window (sorted canonically first), the
workload facts, the coverage of the inputs and the causal rules -- never of arrival order or of
wall-clock time -- so the same bundle replayed, or streamed, gives byte-identical JSON.

How a verdict is reached (the rules are data, ``correlators/causal.yaml``):

1. **Causes.** Every event matching a cause rule proposes a hypothesis: a code
   (``gpu.xid.79``), a domain, a weight (how strongly the event alone proves it) and a family.
   XIDs take code, domain and weight from the NVIDIA XID catalog buckets the extraction rules
   copied onto the event (``immediate_action``, ``investigatory_action``): XID 13/31 and CUDA
   errors are the application; sympathetic XIDs (45, 63, 94, 43, ...) only count when alone.
2. **Grouping.** Hypotheses of one family on one host (several XIDs of one GPU; the glog line
   and the torchrun summary of one killed rank) merge; their strength is the noisy-OR of the
   weights of their distinct supporting rules (halved for a kernel-side event whose time is
   only the transport's), and the highest-weight, best-timed event names them. Before the workload
   start only persistent faults (GPU, host, fabric) count; earlier application faults on the
   same host belong to earlier processes. Hypotheses with the same code on several hosts
   merge into one with several culprits.
3. **Detectors** propose causes that are patterns over many events (``correlators.detectors``):
   the *stalled rank* (every rank but a few logged a watchdog timeout: the silent ones stalled
   first) and the *RoCE GID index* misconfiguration.
4. **Explanation.** A hypothesis explains a symptom when the symptom's type is listed in
   ``symptoms`` and its effective time -- back-dated by the watchdog's ``ran for`` duration --
   falls within ``[cause - lead - skew, cause + horizon + skew]`` (and on the same host where
   the rule says so). A weaker hypothesis all of whose events a stronger one explains is
   absorbed (a CUDA error after an XID 79 on that host; a SIGKILL after the OOM killer).
5. **Decision.** ``score = strength * (1 + explained fraction of symptoms)``. The best score
   wins; a runner-up at ``ambiguity_ratio`` of it or more makes the verdict ``ambiguous`` with
   both listed. Confidence = ``strength * (0.5 + 0.5 * explained) * coverage factor *
   (1 - 0.3 * rival ratio)``; missing or failed sources lower the coverage factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from importlib import resources
from typing import Any, Iterable, Sequence

import yaml

from correlators import ENGINE_VERSION
from correlators import xid as xid_catalog
from correlators.cost import workload_cost
from correlators.drift import STACK_VERSION, Baseline, drift_events
from correlators.enrich import Allocation
from correlators.ids import normalise_pci
from correlators.explain import (
    cause_sentence,
    coverage_gaps,
    explained_sentence,
    unexplained_groups,
    unexplained_sentence,
)
from correlators.hypothesis import (
    TEXT_FORMAT as _FMT,
    Hypothesis,
    gpu_label as _gpu_label,
    hypothesis_ranks as _ranks,
    render_text as _render,
)
from correlators.timetext import NS, clock
from correlators.unrecognised import EVENT_TYPE as UNRECOGNISED, mine_templates
from schemas.bundle import WorkloadSpec
from schemas.records import (
    Affected,
    Alternative,
    Attribution,
    CoverageEntry,
    Culprits,
    Event,
    EvidenceItem,
    Fingerprint,
    GpuRef,
    TIME_QUALITY_INHERITED,
    RootCause,
    Scope,
    UnrecognisedTemplate,
    Window,
    content_id,
)

#: Evidence trail cap: every cause event, then this many symptoms and context events.
MAX_EVIDENCE_SYMPTOMS = 100
MAX_EVIDENCE_CONTEXT = 50


class CausalRulesError(ValueError):
    """The causal rule file is invalid (the message names the entry and field)."""


@dataclass(frozen=True)
class CauseRule:
    """One entry of ``causes`` in causal.yaml."""

    id: str
    type: str
    when: tuple[tuple[str, Any], ...]
    code: str = ""
    family: str = ""
    domain: str = "unknown"
    weight: float = 0.5
    job_wide: bool = False
    text: str = ""
    classify: str = ""
    symptom_only: bool = False

    def matches(self, event: Event) -> bool:
        if event.type != self.type:
            return False
        return all(event.attributes.get(k) == v for k, v in self.when)


@dataclass(frozen=True)
class SymptomRule:
    """One entry of ``symptoms``: a type a cause can explain, and the time relation (s)."""

    type: str
    lead_s: float = 0.0
    horizon_s: float = 3600.0
    same_host: bool = False
    families: tuple[str, ...] = ()


@dataclass(frozen=True)
class CausalRules:
    """The parsed causal.yaml."""

    version: str
    skew_ns: int
    before_start_ns: int
    after_end_ns: int
    ambiguity_ratio: float
    causes: tuple[CauseRule, ...]
    symptoms: dict[str, SymptomRule]
    detectors: dict[str, dict[str, Any]]
    unrecognised_near_ns: int = 120 * NS
    #: the ``repetition``, ``gpu_count`` and ``quality`` blocks of causal.yaml, as written
    sections: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def causes_by_type(self) -> dict[str, tuple[CauseRule, ...]]:
        """event type -> its cause rules, in file order (the first match wins)."""
        by_type: dict[str, list[CauseRule]] = {}
        for rule in self.causes:
            by_type.setdefault(rule.type, []).append(rule)
        return {etype: tuple(rules) for etype, rules in by_type.items()}


def parse_causal_rules(data: dict[str, Any], name: str = "causal.yaml") -> CausalRules:
    """Validate and parse causal rules; raises :class:`CausalRulesError`."""
    from correlators.vocabulary import EVENT_TYPES

    def need(entry: dict, key: str, where: str) -> Any:
        if key not in entry:
            raise CausalRulesError(f"{name}: {where}: missing field {key!r}")
        return entry[key]

    causes = []
    for i, entry in enumerate(need(data, "causes", "top level")):
        where = f"causes[{i}] ({entry.get('id', '?')})"
        when = dict(need(entry, "when", where))
        etype = when.pop("type", None)
        if etype not in EVENT_TYPES:
            raise CausalRulesError(f"{name}: {where}: unknown event type {etype!r}")
        if entry.get("classify") == "gpu_count" and "gpu_count" not in data:
            raise CausalRulesError(f"{name}: {where}: classify gpu_count needs the top-level gpu_count block")
        if not entry.get("classify") and not entry.get("symptom_only"):
            for key in ("code", "family", "domain", "weight"):
                need(entry, key, where)
        causes.append(
            CauseRule(
                id=need(entry, "id", where),
                type=etype,
                when=tuple(sorted(when.items())),
                code=entry.get("code", ""),
                family=entry.get("family", ""),
                domain=entry.get("domain", "unknown"),
                weight=float(entry.get("weight", 0.5)),
                job_wide=bool(entry.get("job_wide", False)),
                text=entry.get("text", ""),
                classify=entry.get("classify", ""),
                symptom_only=bool(entry.get("symptom_only", False)),
            )
        )
    symptoms = {}
    for i, entry in enumerate(need(data, "symptoms", "top level")):
        etype = need(entry, "type", f"symptoms[{i}]")
        if etype not in EVENT_TYPES:
            raise CausalRulesError(f"{name}: symptoms[{i}]: unknown event type {etype!r}")
        symptoms[etype] = SymptomRule(
            type=etype,
            lead_s=float(entry.get("lead_s", 0)),
            horizon_s=float(entry.get("horizon_s", 3600)),
            same_host=bool(entry.get("same_host", False)),
            families=tuple(entry.get("families", ())),
        )
    window = data.get("window", {})
    return CausalRules(
        version=str(need(data, "version", "top level")),
        skew_ns=int(float(data.get("skew_s", 5)) * NS),
        before_start_ns=int(float(window.get("before_start_s", 120)) * NS),
        after_end_ns=int(float(window.get("after_end_s", 300)) * NS),
        ambiguity_ratio=float(data.get("ambiguity_ratio", 0.8)),
        causes=tuple(causes),
        symptoms=symptoms,
        detectors={d["id"]: dict(d) for d in data.get("detectors", [])},
        unrecognised_near_ns=int(float(data.get("unrecognised", {}).get("near_s", 120)) * NS),
        sections={k: data[k] for k in ("repetition", "gpu_count", "quality") if k in data},
    )


@lru_cache(maxsize=1)
def default_causal_rules() -> CausalRules:
    """The packaged ``correlators/causal.yaml``."""
    text = resources.files("correlators").joinpath("causal.yaml").read_text()
    return parse_causal_rules(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


@dataclass(frozen=True)
class WorkloadInfo:
    """What the correlator needs to know of a workload attempt (times UTC ns)."""

    workload_id: str
    cluster: str
    state: str
    start_ns: int
    end_ns: int | None
    nodes: tuple[str, ...]

    @classmethod
    def from_spec(cls, spec: WorkloadSpec) -> "WorkloadInfo":
        return cls(
            workload_id=spec.workload_id,
            cluster=spec.cluster,
            state=spec.state,
            start_ns=spec.start_ns,
            end_ns=spec.end_ns,
            nodes=tuple(spec.nodes),
        )


# --- XID classification from the catalog buckets --------------------------------------------

#: Investigatory buckets that point at the application rather than the GPU, beyond the XID
#: 13/31 workflows (:func:`correlators.xid.is_app_workflow`).
_APP_BUCKETS = {"CHECK_APP/CUDA", "INVESTIGATE_SW_USER"}
_HW_IMMEDIATE = {
    "RESET_GPU",
    "RESTART_BM",
    "RESTART_VM",
    "CHECK_MECHANICALS",
    "WORKFLOW_XID_48",
    "CONTACT_SUPPORT",
}


#: XIDs that are an uncorrectable GPU memory error themselves (NVIDIA XID catalog:
#: ROBUST_CHANNEL_CONTAINED_ERROR, ROBUST_CHANNEL_UNCONTAINED_ERROR). The catalog files them
#: as sympathetic because they accompany XID 48/63/64 when those are logged; seen alone (the
#: device plugin's XidCriticalError, an NVML event) they are the fault: (kind, weight)
_MEMORY_ERROR_XIDS = {94: ("contained", 0.85), 95: ("uncontained", 0.95)}


def classify_xid(event: Event) -> tuple[str, str, str, float, str]:
    """(code, family, domain, weight, text) for an XID event, from its catalog buckets
    (``correlators.xid``, NVIDIA's XID catalog, shared/reference/README.md).

    WORKFLOW_XID_13/31 and CHECK_APP/CUDA point at the application; INVESTIGATE_SW and
    UPDATE_SWFW at the driver/firmware; IGNORE and sympathetic buckets are side effects of
    another error; reset/reboot/mechanical/XID-48 buckets are the GPU itself."""
    a = event.attributes
    xid = a.get("xid")
    info = xid_catalog.xid_info(xid) if isinstance(xid, int) else None
    imm = info.immediate_action if info else ""
    inv = info.investigatory_action if info else ""
    desc = a.get("description") or a.get("mnemonic") or (info.description if info else "") or "no description"
    label = _gpu_label(event.gpu)
    where = f"a GPU on {event.host}" if label == "?" else f"GPU {label} on {event.host}"
    if xid == 79:
        return "gpu.xid.79", "gpu", "gpu_hardware", 1.0, f"{where} fell off the bus (XID 79)"
    if info and (xid_catalog.is_app_workflow(xid) or inv in _APP_BUCKETS):
        return (
            f"app.xid.{xid}",
            "app",
            "software",
            0.7,
            f"the application faulted on {where} (XID {xid}: {desc}); one process, not the GPU",
        )
    if xid in _MEMORY_ERROR_XIDS:
        kind, weight = _MEMORY_ERROR_XIDS[xid]
        return (f"gpu.xid.{xid}", "gpu", "gpu_hardware", weight,
                f"{kind} uncorrectable memory (ECC) error on {where} (XID {xid}: {desc})")
    if xid == 154:
        hint = str(a.get("recovery_action") or "None")
        weight = 0.2 if hint.upper() in ("NONE", "") else 0.5
        return "gpu.xid.154", "gpu", "gpu_hardware", weight, f"{where}: driver asks for {hint}"
    if info and (xid_catalog.is_sympathetic(xid) or xid_catalog.is_ignorable(xid)):
        return f"gpu.xid.{xid}", "gpu", "gpu_hardware", 0.2, f"XID {xid} ({desc}) on {where}"
    if inv == "INVESTIGATE_SW" or imm == "UPDATE_SWFW":
        return f"gpu.xid.{xid}", "gpu", "gpu_software", 0.8, f"driver/firmware fault XID {xid} ({desc}) on {where}"
    if imm.startswith("WORKFLOW_NVLINK"):
        return f"gpu.xid.{xid}", "gpu", "gpu_hardware", 0.9, f"NVLink error XID {xid} ({desc}) on {where}"
    if imm in _HW_IMMEDIATE:
        return f"gpu.xid.{xid}", "gpu", "gpu_hardware", 1.0, f"XID {xid} ({desc}) on {where}"
    if imm == "RESTART_APP":
        return f"gpu.xid.{xid}", "gpu", "gpu_hardware", 0.5, f"XID {xid} ({desc}) on {where}"
    return f"gpu.xid.{xid}", "gpu", "gpu_hardware", 0.4, f"XID {xid} ({desc}) on {where}"


def _primary(hyp: Hypothesis) -> Event:
    """The event that names a hypothesis: the highest weight, then the best time quality,
    then the earliest."""
    return max(hyp.support, key=lambda s: (s[0], s[2].time_quality, -s[2].at, s[2].event_id))[2]


def _event_sort_key(event: Event) -> tuple[int, int, str]:
    at = event.at  # effective_at, inlined: this key sorts every event of a window
    return (event.began_at if event.began_at is not None else at, at, event.event_id)


#: Families whose faults outlive a process: a GPU, host or link that broke shortly before the
#: workload started still explains its failure. An application fault (XID 13/31, a CUDA
#: error) before the start belongs to another process.
PERSISTENT_FAMILIES = ("gpu", "host", "fabric")


def propose(events: Sequence[Event], rules: CausalRules, start_ns: int | None = None,
            end_ns: int | None = None) -> list[Hypothesis]:
    """Hypotheses from single cause events, grouped by (family, host) then by code.

    An event after ``end_ns`` (the workload's end plus the clock skew) cannot have caused the
    failure: it is never a cause (it may still be a symptom or context).

    An event whose time is not from its own line or a neighbour (``time_quality`` at the
    transport level: no timestamp anywhere near it) counts at half weight: its place in the
    timeline is a guess. Before ``start_ns`` only strong, persistent faults count."""
    by_key: dict[tuple[str, str], Hypothesis] = {}
    by_type = rules.causes_by_type
    for event in events:
        if end_ns is not None and event.at > end_ns:
            continue
        for rule in by_type.get(event.type, ()):
            if not rule.matches(event):
                continue
            if rule.symptom_only:
                break
            if rule.classify == "xid":
                code, family, domain, weight, text = classify_xid(event)
                job_wide = False
            elif rule.classify == "gpu_count":
                from correlators.repetition import classify_gpu_count

                code, family, domain, weight, text = classify_gpu_count(event, rules.sections["gpu_count"])
                job_wide = False
            else:
                code, family, domain, weight = rule.code, rule.family, rule.domain, rule.weight
                code = _render(code, event)
                text = _render(rule.text or code, event)
                job_wide = rule.job_wide
            if start_ns is not None and event.at < start_ns and (
                family not in PERSISTENT_FAMILIES or weight < 0.8
            ):
                break
            key = (family, "*" if job_wide else event.host)
            hyp = by_key.get(key)
            if hyp is None:
                hyp = by_key[key] = Hypothesis(code, family, domain, text, job_wide)
            hyp.support.append((weight, f"{rule.id}:{code}", event))
            if _primary(hyp) is event:
                hyp.code, hyp.domain, hyp.text = code, domain, text
            break
    # hypotheses naming the same cause on several hosts are one multi-culprit cause
    by_code: dict[str, Hypothesis] = {}
    for key in sorted(by_key):
        hyp = by_key[key]
        if hyp.code in by_code:
            merged = by_code[hyp.code]
            named_by = _primary(merged)
            merged.absorb(hyp)
            # the merged cause is named after its primary event, which may be ``hyp``'s
            if _primary(merged) is not named_by:
                merged.code, merged.domain, merged.text = hyp.code, hyp.domain, hyp.text
        else:
            by_code[hyp.code] = hyp
    return [by_code[c] for c in sorted(by_code)]


def _outcome(state: str, has_cause: bool, events: Sequence[Event]) -> str:
    if state in ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY"):
        return "failed"
    if state in ("TIMEOUT", "HUNG"):
        return "hung"
    if state == "PREEMPTED":
        return "preempted"
    if state == "COMPLETED":
        return "degraded" if has_cause else "completed"
    if state == "CANCELLED":
        return "failed" if has_cause else "unknown"
    if any(e.type in ("nccl.watchdog_timeout", "nccl.heartbeat_timeout") for e in events):
        return "hung"
    return "degraded" if has_cause else "unknown"


def summarise(event: Event) -> str:
    """A one-line, human summary of an event for the evidence timeline."""
    a = event.attributes
    t = event.type
    if t == "gpu.xid":
        text = f"Xid {a.get('xid')}: {a.get('description') or a.get('mnemonic') or ''}".strip()
        if a.get("recovery_action"):
            text += f" -> {a['recovery_action']}"
        if a.get("caused_by_xid") is not None:
            text += f" (caused by Xid {a['caused_by_xid']})"
        return f"{text} [{_gpu_label(event.gpu)}]"
    if t == "nccl.watchdog_timeout":
        text = (
            f"watchdog timeout {a.get('op_type', '?')} SeqNum={a.get('seq_num', '?')} "
            f"ran for {a.get('ran_for_ms', '?')} ms (timeout {a.get('timeout_ms', '?')} ms)"
        )
        if a.get("began_at_bound") == "inherited":
            text += ("; the line has no time of its own (inherited from an earlier line): the stall "
                     "is placed no earlier than that line, not back-dated by the timeout")
        elif event.began_at is not None:
            text += f"; placed at the stall's start, logged {(event.at - event.began_at) / NS:.1f} s later"
        return text
    # where a record was collected and what host its text named are not what it says
    keys = [k for k in sorted(a) if k not in ("description", "text", "detail", "collected_on", "line_host")
            and a[k] not in (None, "")]
    parts = [f"{k}={a[k]}" for k in keys[:4]]
    if event.peer:
        parts.append(f"peer={event.peer}")
    detail = a.get("text") or a.get("detail") or a.get("last_error") or ""
    text = t + (" " + " ".join(parts) if parts else "")
    if detail and not parts:
        text += f": {str(detail)[:120]}"
    return text


def _coverage_factor(coverage: Sequence[CoverageEntry]) -> float:
    factor = 1.0
    for entry in coverage:
        if entry.status == "failed":
            factor -= 0.05
        elif entry.status in ("empty", "lagging") and entry.source.startswith("host:"):
            factor -= 0.1
    return max(0.6, round(factor, 6))


def node_coverage(
    info: WorkloadInfo, coverage: Sequence[CoverageEntry], hosts_with_events: set[str] = frozenset()
) -> list[CoverageEntry]:
    """Per-node coverage entries: a node of the workload that no source covers is ``empty``,
    or ``lagging`` when events from it arrived but its sources' coverage reports did not yet
    (a stream verdict emitted before the connector's report).

    Sources are matched by name: ``file:logs/<host>/...`` and ``file:metrics/<host>/...``
    (BUNDLE.md layout); an existing ``host:<node>`` entry is kept as it is."""
    by_host: dict[str, list[CoverageEntry]] = {}
    for entry in coverage:
        parts = entry.source.split("/")
        if entry.source.startswith("host:"):
            by_host.setdefault(entry.source[5:], []).append(entry)
        elif len(parts) >= 3 and parts[0] in ("file:logs", "file:metrics"):
            by_host.setdefault(parts[1], []).append(entry)
    out = []
    for node in sorted(info.nodes):
        mine = by_host.get(node, [])
        if any(c.source == f"host:{node}" for c in mine):
            continue
        records = sum(c.records for c in mine)
        events = sum(c.events for c in mine)
        unknown = sum(c.unrecognised for c in mine)
        if records == 0 and node in hosts_with_events:
            out.append(
                CoverageEntry(
                    source=f"host:{node}",
                    status="lagging",
                    events=events,
                    detail="events from this node arrived; its sources' coverage reports have not yet",
                )
            )
        elif records == 0:
            out.append(
                CoverageEntry(
                    source=f"host:{node}",
                    status="empty",
                    detail="no logs or telemetry from this node: its faults cannot be seen",
                )
            )
        else:
            # "silent" (input present, no event from the node) is negative evidence the
            # waited_on detector uses; "empty" above is no input at all
            out.append(CoverageEntry(source=f"host:{node}", status="present", records=records,
                                     events=events, unrecognised=unknown,
                                     detail="" if events or node in hosts_with_events
                                     else "silent: its sources were read and hold no event"))
    return out


def decide(
    info: WorkloadInfo,
    alloc: Allocation,
    events: Iterable[Event],
    coverage: Sequence[CoverageEntry],
    *,
    ruleset_version: str,
    rules: CausalRules | None = None,
    revision: int = 1,
    history: Iterable[Event] = (),
    baseline: Baseline | None = None,
) -> Attribution:
    """Decide the verdict of one workload attempt, as a chain of named phases:
    :func:`_gather` (the window's events, drift, ranks) -> :func:`_hypotheses` (rules,
    detectors, repetitions) -> :func:`_absorb` (a weaker hypothesis another explains is a
    symptom) -> :func:`_explain` (symptoms each hypothesis explains) -> :func:`_rank` (scores)
    -> :func:`_coverage` -> :func:`_grade` (confidence, quality and why) -> :func:`_verdict`
    (or :func:`_no_cause` when nothing is a cause).

    ``ruleset_version`` is stamped on the verdict as given (drivers pass
    :attr:`correlators.config.EngineConfig.ruleset_version`). ``history`` (optional) holds events of earlier jobs on the same nodes (a bundle's
    ``workloads/``, a stream's stored events of those nodes); it only counts repetitions of
    application-class XIDs on a GPU (:mod:`correlators.repetition`), never causes or symptoms.

    ``stack.version`` events are the nodes' fingerprints, not evidence: they become the
    ``config.drift`` events of :func:`correlators.drift.drift_events` (against ``baseline``,
    :attr:`correlators.config.EngineConfig.baseline`, and against the other nodes) and the
    culprit hosts' ``fingerprints`` on the verdict.

    ``events`` must already be enriched (:meth:`Allocation.enrich`); duplicates (same
    ``event_id``) collapse and order does not matter. ``coverage`` is the per-source coverage
    the connectors reported (``file:<path>`` sources); the events counted per source (from
    the events' evidence positions) and per-node entries are added here. Returns one :class:`Attribution` whose
    ``decided_at`` is the window end (event time). Pure: no I/O, no clock.
    """
    rules = rules or default_causal_rules()
    window = _gather(info, alloc, events, rules, baseline)
    hyps = _hypotheses(info, alloc, window, list(history), rules, coverage)
    kept = _absorb(hyps, rules)
    # before the start (less the skew) nothing is a symptom: earlier lines of the same host
    # log belong to earlier processes
    symptom_pool = [e for e in window.ordered if e.type in rules.symptoms and e.at >= info.start_ns - rules.skew_ns]
    _explain(kept, symptom_pool, rules)
    scored = _rank(kept, symptom_pool)
    coverage_all = _coverage(info, coverage, window.all_events)
    window_end = info.end_ns if info.end_ns is not None else max([e.at for e in window.ordered] + [info.start_ns])
    base = dict(
        attribution_id=content_id("att", "workload", info.cluster, info.workload_id),
        revision=revision,
        scope=Scope(kind="workload", id=info.workload_id, cluster=info.cluster),
        window=Window(start=info.start_ns, end=window_end),
        coverage=coverage_all,
        ruleset_version=ruleset_version,
        engine_version=ENGINE_VERSION,
        decided_at=window_end,
    )
    if not scored:
        return _no_cause(info, window, symptom_pool, coverage_all, base, rules)
    grade = _grade(info, window, scored, coverage_all, rules)
    base["unrecognised"] = unrecognised_templates(window.unknown_lines, grade.near)
    return _verdict(info, alloc, window, scored, symptom_pool, grade, base, rules)


@dataclass
class _Window:
    """What :func:`decide` reads of a window: every event (drift included, fingerprints
    excluded) by id, the events inside the window's time bounds ``lo``..``hi`` that rules
    read (``ordered``), the error lines no rule knows (``unknown_lines``) and the nodes'
    stack fingerprints (``prints``)."""

    all_events: dict[str, Event]
    ordered: list[Event]
    unknown_lines: list[Event]
    prints: dict[str, Any]
    lo: float
    hi: float


def _gather(info: WorkloadInfo, alloc: Allocation, events: Iterable[Event], rules: CausalRules,
            baseline: Baseline | None) -> _Window:
    """Phase 1: the window's events: ranks from pids, fingerprints and drift, the time bounds."""
    from correlators.pids import assign_ranks

    lo = info.start_ns - rules.before_start_ns
    hi = (info.end_ns if info.end_ns is not None else math.inf) + rules.after_end_ns
    all_events = {e.event_id: e for e in events}
    # a kernel/driver line's pid= names a rank when the launcher or the logs state it
    all_events = assign_ranks(alloc, all_events)
    stack = [e for e in all_events.values() if e.type == STACK_VERSION]
    all_events = {k: e for k, e in all_events.items() if e.type != STACK_VERSION}
    prints, drifts = drift_events(list(all_events.values()) + stack, baseline, info.nodes,
                                  start_ns=info.start_ns, end_ns=info.end_ns)
    all_events.update((e.event_id, e) for e in drifts)
    ordered = sorted((e for e in all_events.values() if lo <= e.at <= hi), key=_event_sort_key)
    # error lines no rule knows are neither causes nor symptoms: they are reported, and keep
    # a verdict from definitive when they sit near its cause
    unknown_lines = [e for e in ordered if e.type == UNRECOGNISED]
    ordered = [e for e in ordered if e.type != UNRECOGNISED]
    return _Window(all_events, ordered, unknown_lines, prints, lo, hi)


def _hypotheses(info: WorkloadInfo, alloc: Allocation, window: _Window, history: list[Event],
                rules: CausalRules, coverage: Sequence[CoverageEntry]) -> list[Hypothesis]:
    """Phase 2: the causes the rules propose, the detectors' and the repetitions'."""
    import correlators.stragglers  # noqa: F401 -- registers the stragglers detector
    from correlators.detectors import run_detectors

    # before the start (less the skew) only persistent faults may be causes
    hyps = propose(window.ordered, rules, start_ns=info.start_ns,
                   end_ns=None if info.end_ns is None else info.end_ns + rules.skew_ns)
    hyps += run_detectors(info, alloc, window.ordered, hyps, rules, coverage=coverage)
    # the same application-class XID on one GPU from several processes: the GPU
    # (the input's own lines from before the window -- a host log collected after the job
    # holds the earlier processes' XIDs -- are history too, never causes or symptoms)
    earlier_lines = [e for e in window.all_events.values() if e.at < window.lo and e.type == "gpu.xid"]
    hyps += _repetition_hypotheses(info, alloc, window.ordered, history + earlier_lines, hyps, rules)
    return hyps


def _absorb(hyps: list[Hypothesis], rules: CausalRules) -> list[Hypothesis]:
    """Phase 3: a weaker hypothesis whose every event a stronger one explains is a symptom of
    it (its events explained, its code absorbed); returns the others, strongest first."""
    hyps.sort(key=lambda h: (-h.strength, h.at, h.code))
    kept: list[Hypothesis] = []
    for hyp in hyps:
        absorber = next((strong for strong in kept
                         if hyp.support and strong.strength > hyp.strength
                         and all(_explains(strong, event, rules) for event in hyp.events)), None)
        if absorber is None:
            kept.append(hyp)
            continue
        for event in hyp.events:
            absorber.explained[event.event_id] = event
        absorber.absorbed.append(hyp.code)
        if hyp.family == absorber.family:
            absorber.extra_ranks |= hyp.extra_ranks
    return kept


def _explain(kept: list[Hypothesis], symptom_pool: list[Event], rules: CausalRules) -> None:
    """Phase 4: each hypothesis's ``explained`` gets the symptoms it explains."""
    for hyp in kept:
        own = {e.event_id for e in hyp.events}
        span = (hyp.at, hyp.until, hyp.hosts)  # the loop changes only hyp.explained
        for event in symptom_pool:
            if event.event_id in own or event.event_id in hyp.explained:
                continue
            rule = rules.symptoms.get(event.type)
            if rule is not None and hyp.explains(event, rule, rules.skew_ns, span):
                hyp.explained[event.event_id] = event


#: ``((score, fraction of the symptoms explained), hypothesis)``, best first
_Scored = list[tuple[tuple[float, float], Hypothesis]]


def _rank(kept: list[Hypothesis], symptom_pool: list[Event]) -> _Scored:
    """Phase 5: each hypothesis's score (its strength, raised by the share of the other
    symptoms it explains), best first."""

    def score(hyp: Hypothesis) -> tuple[float, float]:
        own = {e.event_id for e in hyp.events}
        pool = [e for e in symptom_pool if e.event_id not in own]
        frac = sum(1 for e in pool if e.event_id in hyp.explained) / len(pool) if pool else 1.0
        return round(hyp.strength * (1.0 + frac), 6), frac

    return sorted(((score(h), h) for h in kept), key=lambda x: (-x[0][0], x[1].at, x[1].code))


def _coverage(info: WorkloadInfo, coverage: Sequence[CoverageEntry], all_events: dict[str, Event]
              ) -> list[CoverageEntry]:
    """Phase 6: the connectors' coverage with the events counted per source (from the events'
    own evidence, so every driver counts alike) and the per-node entries, by source."""
    per_source: dict[str, int] = {}
    unknown_per_source: dict[str, int] = {}
    for event in all_events.values():
        counts = unknown_per_source if event.type == UNRECOGNISED else per_source
        for source in {f"file:{ref.position.file}" for ref in event.evidence if ref.position.file}:
            counts[source] = counts.get(source, 0) + 1
    coverage = [
        c.model_copy(update={"events": per_source.get(c.source, c.events),
                             "unrecognised": unknown_per_source.get(c.source, c.unrecognised)})
        if c.source in per_source or c.source in unknown_per_source else c
        for c in coverage
    ]
    return sorted(list(coverage) + node_coverage(info, coverage, {e.host for e in all_events.values()}),
                  key=lambda c: c.source)


def _no_cause(info: WorkloadInfo, window: _Window, symptom_pool: list[Event], coverage_all: list[CoverageEntry],
              base: dict[str, Any], rules: CausalRules) -> Attribution:
    """The verdict when no event is a cause: none (completed) or unknown, quality insufficient."""
    base["unrecognised"] = unrecognised_templates(window.unknown_lines)
    outcome = _outcome(info.state, False, window.ordered)
    reasoning = ["no event in the window is a cause any rule knows"]
    if symptom_pool:
        reasoning.append(f"the inputs hold symptoms only: {_symptom_counts(symptom_pool)}")
    gaps = coverage_gaps(coverage_all)
    if gaps:
        reasoning.append("the input is incomplete: " + ", ".join(gaps[:4]))
    return Attribution(
        **base,
        unexplained=unexplained_groups(symptom_pool, set(), set()),
        reasoning=reasoning,
        outcome=outcome,
        domain="unknown",
        root_cause=RootCause(
            code="none" if outcome == "completed" else "unknown",
            text="no fault evidence in the window" if outcome == "completed"
            else "no cause found: the inputs hold symptoms only",
        ),
        affected=_affected(info, symptom_pool),
        symptoms=[e.event_id for e in symptom_pool],
        evidence=_evidence([], symptom_pool, [e for e in window.ordered if e.type not in rules.symptoms]),
        confidence=0.0,
        quality="insufficient",
    )


@dataclass
class _Grade:
    """How sure a verdict is: ``confidence``, ``quality``, the winner's score and the
    runner-up's ratio to it (``rival``), whether the cause is ``decisive`` and ``dated``, the
    unknown error lines ``near`` it, and each reason it is not definitive."""

    confidence: float
    quality: str
    win_score: float
    rival: float
    decisive: bool
    dated: bool
    definitive_at: float
    near: list[Event]
    not_definitive: list[str]


def _grade(info: WorkloadInfo, window: _Window, scored: _Scored, coverage_all: list[CoverageEntry],
           rules: CausalRules) -> _Grade:
    """Phase 7: confidence and quality (causal.yaml ``quality``); definitive needs more than
    confidence: each unmet condition is a reason, and the first one makes the verdict probable."""
    (win_score, frac), winner = scored[0]
    rival = scored[1][0][0] / win_score if len(scored) > 1 and win_score > 0 else 0.0
    confidence = winner.strength * (0.5 + 0.5 * frac) * _coverage_factor(coverage_all) * (1.0 - 0.3 * rival)
    confidence = round(min(1.0, max(0.0, confidence)), 4)
    table = rules.sections.get("quality", {})
    definitive_at = float(table.get("definitive_confidence", 0.8))
    decisive = is_decisive(winner.code, table.get("decisive", ())) and bool(winner.hosts & set(info.nodes))
    if rival >= rules.ambiguity_ratio:
        quality = "ambiguous"
    elif confidence >= definitive_at or decisive:
        quality = "definitive"
    elif confidence >= float(table.get("probable_confidence", 0.45)):
        quality = "probable"
    else:
        quality = "ambiguous"
    near = [e for e in window.unknown_lines if abs(e.effective_at - winner.at) <= rules.unrecognised_near_ns]
    # a cause whose every supporting line lacks a time of its own (inherited from a
    # neighbour, or the transport's) is not placed well enough to be definitive
    dated = not winner.support or max(e.time_quality for e in winner.events) > TIME_QUALITY_INHERITED
    not_definitive = _not_definitive(info, scored, coverage_all, near, dated, decisive,
                                     float(table.get("competing_ratio", 0.5)), rules)
    if quality == "definitive" and not_definitive:
        quality = "probable"
    return _Grade(confidence, quality, win_score, rival, decisive, dated, definitive_at, near, not_definitive)


def _not_definitive(info: WorkloadInfo, scored: _Scored, coverage_all: list[CoverageEntry], near: list[Event],
                    dated: bool, decisive: bool, competing_ratio: float, rules: CausalRules) -> list[str]:
    """Each reason the winner of ``scored`` cannot be definitive."""
    (win_score, _), winner = scored[0]
    out: list[str] = []
    if near:
        out.append(f"{len(near)} error line(s) no rule knows sit near the cause")
    if not dated:
        out.append("the deciding line has no timestamp of its own")
    if info.end_ns is not None and winner.at > info.end_ns + rules.skew_ns:
        out.append(f"its cause at {clock(winner.at)} comes after the workload ended ({clock(info.end_ns)})")
    # a decisive line is its own proof: a source that gave nothing cannot unsay it, while one
    # that failed or lags may hold what would
    gaps = [g for g in coverage_gaps(coverage_all) if not (decisive and g.endswith(" empty"))]
    if gaps:
        out.append("the input is incomplete: " + ", ".join(gaps[:4]))
    rivals = [(sc, h) for (sc, _), h in scored[1:] if h.domain != winner.domain and sc >= competing_ratio * win_score]
    if rivals:
        sc, h = rivals[0]
        out.append(f"{h.code} ({h.domain}) competes at {sc / win_score:.2f} of its score")
    if winner.side_alternatives:
        # a pattern (a repeat) that names its own alternative is for diagnostics to confirm
        out.append(f"{winner.side_alternatives[0][0]} remains a fitting alternative")
    return out


def _alternatives(scored: _Scored, near: list[Event]) -> list[Alternative]:
    """The other causes within 0.3 of the winner's score (at most five), the winner's own side
    alternatives and, when unknown error lines sit near the cause, those lines."""
    (win_score, _), winner = scored[0]
    alternatives = [
        Alternative(code=h.code, domain=h.domain, text=h.text, score=round(s, 4), hosts=sorted(h.hosts),
                    ranks=sorted(_ranks(h)))
        for (s, _), h in scored[1:6]
        if s >= 0.3 * win_score
    ]
    for code, domain, text, alt_score, hosts, ranks in winner.side_alternatives:
        if all(a.code != code for a in alternatives):
            alternatives.append(Alternative(code=code, domain=domain, text=text, score=round(alt_score, 4),
                                            hosts=list(hosts), ranks=list(ranks)))
    if near:
        alternatives.append(Alternative(
            code=UNRECOGNISED,
            domain="unknown",
            text=f"{len(near)} error line(s) no rule knows near the cause, e.g. "
            f"{near[0].attributes.get('text', '')!r}",
            score=round(0.3 * win_score, 4),
            hosts=sorted({e.host for e in near if e.host}),
            ranks=sorted({e.rank for e in near if e.rank is not None}),
        ))
    return alternatives


def _reasoning(alloc: Allocation, window: _Window, scored: _Scored, grade: _Grade, primary: Event | None,
               symptoms: list[Event], unexplained: Any, alternatives: list[Alternative],
               rules: CausalRules) -> list[str]:
    """The verdict's ``reasoning`` sentences: the cause, the winner's reasons, pid conflicts,
    what it explains and leaves unexplained, what it absorbed, the alternatives, the quality."""
    from correlators.pids import pid_conflicts

    winner = scored[0][1]
    reasoning = [cause_sentence(winner.code, winner.domain, winner.text, primary, winner.at,
                                sorted(winner.hosts), summarise(primary) if primary else "", grade.dated)]
    reasoning += winner.reasons
    reasoning += pid_conflicts(alloc, [e for e in window.all_events.values() if window.lo <= e.at <= window.hi])
    reasoning.append(explained_sentence(symptoms))
    left = unexplained_sentence(unexplained)
    if left:
        reasoning.append(left)
    if winner.absorbed:
        reasoning.append("absorbed as its consequences: " + ", ".join(sorted(set(winner.absorbed))))
    listed = [a for a in alternatives if a.code != UNRECOGNISED]
    if listed:
        reasoning.append("alternatives: " + "; ".join(
            f"{a.code} ({a.domain}, {a.score / grade.win_score:.2f} of its score)" for a in listed[:4]))
    else:
        reasoning.append("no other cause fits")
    reasoning.append(_quality_sentence(scored, grade, rules))
    return reasoning


def _quality_sentence(scored: _Scored, grade: _Grade, rules: CausalRules) -> str:
    """Why the verdict has its quality."""
    strength = ("a decisive hardware line on a host of the allocation" if grade.decisive
                else f"confidence {grade.confidence:.2f}")
    if grade.quality == "definitive":
        return (f"quality definitive: {strength}, a dated cause that fits the failure, "
                + ("" if grade.decisive else "complete input, ")
                + "no competing cause, no unknown error line near it")
    if grade.quality == "ambiguous" and grade.rival >= rules.ambiguity_ratio:
        return (f"quality ambiguous: {scored[1][1].code} scores {grade.rival:.2f} of the winner "
                f"(>= {rules.ambiguity_ratio})")
    if grade.quality == "ambiguous":
        return (f"quality ambiguous: the best-supported cause at confidence {grade.confidence:.2f}, "
                f"too weak to be probable: confirm it before acting")
    below = not grade.decisive and grade.confidence < grade.definitive_at
    why = [strength + (f" below {grade.definitive_at}" if below else "")] + grade.not_definitive
    return f"quality {grade.quality}, not definitive: " + "; ".join(why)


def _verdict(info: WorkloadInfo, alloc: Allocation, window: _Window, scored: _Scored, symptom_pool: list[Event],
             grade: _Grade, base: dict[str, Any], rules: CausalRules) -> Attribution:
    """Phase 8: the verdict of the winning hypothesis: causes, symptoms, context, culprits,
    alternatives, reasoning, cost and fingerprints."""
    winner = scored[0][1]
    causes = sorted(winner.events, key=_event_sort_key)
    symptoms = sorted(winner.explained.values(), key=_event_sort_key)
    symptom_ids = {e.event_id for e in symptoms}
    cause_ids = {e.event_id for e in causes}
    context = [e for e in window.ordered if e.event_id not in symptom_ids and e.event_id not in cause_ids]
    in_window = {e.event_id for e in window.ordered}
    context = sorted(context + [e for e in winner.context if e.event_id not in in_window], key=_event_sort_key)
    primary = _primary(winner) if winner.support else None
    unexplained = unexplained_groups(symptom_pool, cause_ids, symptom_ids)
    alternatives = _alternatives(scored, grade.near)
    window_end = base["decided_at"]
    return Attribution(
        **base,
        unexplained=unexplained,
        reasoning=_reasoning(alloc, window, scored, grade, primary, symptoms, unexplained, alternatives, rules),
        outcome=_outcome(info.state, True, window.ordered),
        domain=winner.domain,
        root_cause=RootCause(code=winner.code, text=winner.text, event_id=primary.event_id if primary else None),
        culprits=Culprits(
            hosts=sorted(winner.hosts),
            ranks=sorted(_ranks(winner)),
            gpus=_gpus(winner, alloc),
            ports=sorted({e.fabric_port for e in causes if e.fabric_port}
                         | {p for e in causes for p in e.attributes.get("ports", ()) if isinstance(p, str)}),
        ),
        affected=_affected(info, symptoms),
        symptoms=[e.event_id for e in symptoms],
        evidence=_evidence(causes, symptoms, context),
        confidence=grade.confidence,
        quality=grade.quality,
        alternatives=alternatives,
        incident_id=primary.attributes.get("incident_id") if primary else None,
        cost=workload_cost(cause_at=winner.at, end_ns=info.end_ns, decided_at=window_end, nodes=info.nodes,
                           alloc=alloc, symptoms=symptoms, culprit_hosts=winner.hosts, goodput=winner.goodput),
        fingerprints=[Fingerprint(host=h, components=window.prints[h]) for h in sorted(winner.hosts)
                      if h in window.prints],
    )


def is_decisive(code: str, prefixes: Iterable[str]) -> bool:
    """True when the root-cause ``code`` is one of the decisive causes of causal.yaml's
    ``quality.decisive`` table: equal to one of ``prefixes`` or a dotted extension of it
    (``gpu.xid.79`` matches ``gpu.xid.79`` and ``gpu.xid.79.repeated``, not ``gpu.xid.790``)."""
    return any(code == p or code.startswith(p + ".") for p in prefixes)


def _symptom_counts(events: Sequence[Event]) -> str:
    from correlators.explain import explained_sentence

    return explained_sentence(events).split(": ", 1)[1]


def _repetition_hypotheses(
    info: WorkloadInfo,
    alloc: Allocation,
    ordered: Sequence[Event],
    history: Sequence[Event],
    hyps: Sequence[Hypothesis],
    rules: CausalRules,
) -> list[Hypothesis]:
    """``gpu.xid.<N>.repeated`` hypotheses for application-class XIDs this job logged on a GPU
    that earlier processes or jobs logged too (:mod:`correlators.repetition`, causal.yaml
    ``repetition``), with the application hypotheses of that host as their alternatives. The
    same XID on every GPU of the node instead adds the driver as an alternative (and a reason)
    to the application hypotheses of that host. Mutates ``hyps`` only to add those."""
    from correlators.repetition import DEFAULT_REPETITION, find_repetitions

    params = {**DEFAULT_REPETITION, **rules.sections.get("repetition", {})}
    reps = find_repetitions(ordered, history, workload_id=info.workload_id, start_ns=info.start_ns,
                            end_ns=info.end_ns, skew_ns=rules.skew_ns, alloc=alloc, params=params)
    out: dict[tuple[str, str], Hypothesis] = {}
    window_h = round(float(params["window_s"]) / 3600, 1)
    # several codes repeated on one GPU are one hypothesis, named by the most repeated code
    reps = sorted(reps, key=lambda r: (r.host, r.gpu, -len(r.processes), r.xid))
    for rep in reps:
        gpu = rep.gpu.lstrip("#")
        apps = [h for h in hyps if h.family == "app" and rep.host in h.hosts]
        ranks = tuple(sorted({e.rank for e in rep.own if e.rank is not None}))
        if rep.node_wide:
            text = _FMT.format(str(params.get("driver_text", "XID {xid} on every GPU of {host}")),
                               xid=rep.xid, host=rep.host, gpus=", ".join(g.lstrip("#") for g in rep.gpus_hit))
            for hyp in apps:
                hyp.side_alternatives.append((_FMT.format(str(params.get("driver_code", "gpu.driver.xid_{xid}_all_gpus")),
                                                          xid=rep.xid),
                                              "gpu_software", text,
                                              hyp.strength * float(params["driver_alternative_weight"]),
                                              (rep.host,), ()))
                hyp.reasons.append(f"XID {rep.xid} hit all {len(rep.gpus_hit)} GPUs of {rep.host} at once: "
                                   "not one GPU's fault, so the repetition does not point at a GPU")
            continue
        if not rep.repeated(params):
            continue
        text = _FMT.format(str(params.get("text", "XID {xid} repeated on GPU {gpu} of {host}")), xid=rep.xid,
                           gpu=gpu, host=rep.host, n=len(rep.processes), window_h=window_h,
                           processes=", ".join(rep.processes))
        code = _FMT.format(str(params.get("code", "gpu.xid.{xid}.repeated")), xid=rep.xid)
        hyp = out.get((rep.host, rep.gpu))
        if hyp is None:
            hyp = out[(rep.host, rep.gpu)] = Hypothesis(code=code, family="gpu", domain="gpu_hardware",
                                                        text=text, job_wide=False)
        weight = rep.weight(params)
        hyp.support += [(weight, f"xid_repeat:{code}", e) for e in rep.own]
        hyp.context += list(rep.earlier)
        first = min(rep.earlier, key=lambda e: (e.at, e.event_id)) if rep.earlier else None
        hyp.reasons.append(
            f"XID {rep.xid} on GPU {gpu} of {rep.host} came from {len(rep.processes)} processes "
            f"({', '.join(rep.processes)})"
            + (f", the first at {clock(first.at)}" if first else "")
            + f", within {window_h} h: NVIDIA's XID catalog"
            + (f" (WORKFLOW_XID_{rep.xid})" if rep.xid in (13, 31) else "")
            + " and NVSentinel read a "
            "repeat on one GPU as the GPU, so the application is only the alternative")
        named = {a[0] for a in hyp.side_alternatives}
        for app in apps:
            if app.code not in named:
                hyp.side_alternatives.append((app.code, app.domain, app.text, app.strength,
                                              tuple(sorted(app.hosts)), tuple(sorted(_ranks(app)))))
        if not apps and f"app.xid.{rep.xid}" not in named:
            hyp.side_alternatives.append((f"app.xid.{rep.xid}", "software",
                                          _FMT.format(str(params.get("app_text", "the application faulted")),
                                                      xid=rep.xid, gpu=gpu, host=rep.host),
                                          0.5 * weight, (rep.host,), ranks))
    return [out[k] for k in sorted(out)]


#: Templates of unrecognised lines listed on a verdict (the most frequent first).
MAX_UNRECOGNISED_TEMPLATES = 10


def unrecognised_templates(
    lines: Sequence[Event], near: Sequence[Event] = (), limit: int = MAX_UNRECOGNISED_TEMPLATES
) -> list[UnrecognisedTemplate]:
    """The ``log.unrecognised`` events ``lines`` as drain3 templates (most frequent first, at
    most ``limit``); ``near_cause`` marks templates with a line among ``near``."""
    near_ids = {e.event_id for e in near}
    out = []
    for t, members in mine_templates(lines, limit=limit, with_members=True):
        out.append(UnrecognisedTemplate(
            template=t.template, count=t.count, hosts=list(t.hosts), first_at=t.first_at,
            example=t.example, severity=t.severity,
            near_cause=any(m.event_id in near_ids for m in members),
        ))
    return out


def _explains(hyp: Hypothesis, event: Event, rules: CausalRules) -> bool:
    rule = rules.symptoms.get(event.type)
    return rule is not None and hyp.explains(event, rule, rules.skew_ns)


def _gpus(hyp: Hypothesis, alloc: Allocation) -> list[GpuRef]:
    """Culprit GPUs, one entry per GPU: lines naming it by PCI id, index or UUID merge when
    the host's GPU table links them."""
    merged: dict[tuple[str, str], dict] = {}
    for event in hyp.events:
        if event.gpu is None:
            continue
        pci = normalise_pci(event.gpu.pci_bus_id)
        index = alloc.gpu_index(event.host, event.gpu)
        key = (event.host, pci or (f"#{index}" if index is not None else event.gpu.uuid or "?"))
        ref = merged.setdefault(key, {"index": None, "uuid": None, "pci_bus_id": pci})
        ref["index"] = ref["index"] if ref["index"] is not None else index
        ref["uuid"] = ref["uuid"] or event.gpu.uuid
    # an index-only entry is the same GPU as a PCI entry of that host with that index
    for key in [k for k in merged if k[1].startswith("#")]:
        loose = merged[key]
        for (host, _), ref in merged.items():
            if host == key[0] and ref["pci_bus_id"] and ref["index"] == loose["index"]:
                ref["uuid"] = ref["uuid"] or loose["uuid"]
                del merged[key]
                break
    return [GpuRef(**merged[k]) for k in sorted(merged)]


def _affected(info: WorkloadInfo, symptoms: Sequence[Event]) -> Affected:
    return Affected(
        hosts=sorted({e.host for e in symptoms if e.host != "_scheduler"}),
        ranks=sorted({e.rank for e in symptoms if e.rank is not None}),
        workloads=[info.workload_id],
    )


def _item(event: Event, role: str) -> EvidenceItem:
    return EvidenceItem(
        at=event.effective_at,
        event_id=event.event_id,
        type=event.type,
        role=role,
        host=event.host,
        rank=event.rank,
        summary=summarise(event),
        observations=list(event.evidence),
    )


def _evidence(causes: Sequence[Event], symptoms: Sequence[Event], context: Sequence[Event]) -> list[EvidenceItem]:
    """The evidence trail: each event once, in its strongest role (cause, then symptom, then
    context), at most MAX_EVIDENCE_SYMPTOMS symptoms and MAX_EVIDENCE_CONTEXT context events,
    sorted by (time, event id)."""
    listed = {e.event_id for e in causes}
    symptoms = [e for e in symptoms if e.event_id not in listed][:MAX_EVIDENCE_SYMPTOMS]
    listed |= {e.event_id for e in symptoms}
    context = [e for e in context if e.event_id not in listed][:MAX_EVIDENCE_CONTEXT]
    items = [_item(e, "cause") for e in causes] + [_item(e, "symptom") for e in symptoms]
    items += [_item(e, "context") for e in context]
    return sorted(items, key=lambda i: (i.at, i.event_id))
