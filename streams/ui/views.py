"""What the explorer's pages and the HTML report show, computed from records: pure functions,
no I/O, no clock.

* :func:`incident_view` -- one verdict with its events and observations (for back-dated spans
  and the log lines behind each evidence item), its stored revisions, the remediation actions
  it led to with their transitions, and the member verdicts of an incident;
* :func:`fabric_view` -- fabric-port and incident verdicts grouped by switch and port, both
  ends of every cable, the jobs each fault hit, and the faults over time;
* :func:`node_view` -- a node's faults (verdicts naming it a culprit), the verdicts it was
  affected by, its remediation actions and certifications, over time;
* :func:`build_timeline` -- the geometry of an SVG timeline (lanes x time, markers, spans, the
  cause line), rendered by the ``timeline`` macro of ``templates/_macros.html``.

Times in records are int UTC nanoseconds; geometry is in SVG user units (the SVG scales to
the page width). Text from logs is carried as plain strings: the templates escape it (Jinja2
autoescape), so a log line is shown, never interpreted.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any
from urllib.parse import quote

from correlators.explain import format_ranks
from correlators.remediation.policy import DISRUPTIVE
from schemas.records import (
    Attribution,
    Certification,
    Event,
    EvidenceItem,
    GpuRef,
    Observation,
    RemediationAction,
)
from schemas.utc import format_utc
from streams.remediation.cli import ACTIVE
from streams.ui.settings import LINK_PAD_S

__all__ = [
    "SCHEDULER_HOST",
    "ClusterSummary",
    "FabricView",
    "FleetSummary",
    "IncidentCost",
    "LinkOut",
    "ListGroup",
    "IncidentView",
    "NodeView",
    "Timeline",
    "action_views",
    "executed_actions",
    "build_timeline",
    "fabric_view",
    "fleet_summary",
    "format_duration",
    "format_ts",
    "gpu_label",
    "group_rows",
    "incident_view",
    "link_outs",
    "next_action",
    "node_view",
    "target_label",
    "utc_text",
]

NS = 1_000_000_000
#: The host name evidence from the scheduler carries.
SCHEDULER_HOST = "_scheduler"
#: Most rank lanes on an incident timeline; beyond it ranks share their host's lane.
MAX_RANK_LANES = 48
#: Most evidence rows an incident page lists (causes first, then the earliest symptoms).
MAX_EVIDENCE_ROWS = 400
#: Longest log line shown per observation, characters (the rest is cut with a note).
MAX_LINE_CHARS = 4_000


# -- formatting -------------------------------------------------------------------------------

def format_ts(ns: int | None, *, date: bool = True, ms: bool = True) -> str:
    """UTC ns -> ``2026-11-30 01:21:03.542`` (truncated to ms; without ``date`` only the
    time, without ``ms`` whole seconds); ``-`` for None or 0."""
    if not ns:
        return "-"
    seconds, rest = divmod(int(ns), NS)
    stamp = dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    text = stamp.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")
    return f"{text}.{rest // 1_000_000:03d}" if ms else text


def format_iso(ns: int | None) -> str:
    """UTC ns -> ``2026-11-30T01:21:03Z`` (whole seconds, for form fields); ``""`` for None."""
    if ns is None:
        return ""
    return dt.datetime.fromtimestamp(int(ns) // NS, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_duration(ns: int) -> str:
    """A duration in ns for people: ``850 ms``, ``12.345 s``, ``600.014 s (10 min)``,
    ``2 h 5 min``, ``3 d 4 h``."""
    ns = int(ns)
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < NS:
        return f"{sign}{ns / 1e6:.0f} ms" if ns >= 1_000_000 else f"{sign}{ns / 1e6:.3f} ms"
    s = ns / NS
    if s < 60:
        return f"{sign}{s:.3f} s"
    if s < 3600:
        return f"{sign}{s:.3f} s ({int(s) // 60} min)"
    m = int(s) // 60
    h, m = divmod(m, 60)
    if h < 48:
        return f"{sign}{h} h {m} min"
    d, h = divmod(h, 24)
    return f"{sign}{d} d {h} h"


#: A bare integer that reads as UTC nanoseconds between 2001-09-09 and 2065-01-24 (19 digits,
#: starting 1 or 2) and is not part of a longer number or a decimal.
_RAW_NS = re.compile(r"(?<![\d.])[12]\d{18}(?![\d.])")


def utc_text(text: str | None) -> str:
    """``text`` with every bare 19-digit nanosecond time in it written as UTC text
    (``1796005870000000000`` -> ``2026-11-30 02:31:10.000 UTC``): reasons and results stored
    before they named times as text stay readable. ``""`` for None."""
    if not text:
        return ""
    return _RAW_NS.sub(lambda m: format_ts(int(m.group(0))) + " UTC", text)


def gpu_label(gpu: GpuRef | None) -> str:
    """A GPU as people name it: ``GPU 1 (0000:02:00)``, ``GPU-<uuid>``, ``0000:9c:00``."""
    if gpu is None:
        return "-"
    name = gpu.pci_bus_id or gpu.uuid or ""
    if gpu.index is not None:
        return f"GPU {gpu.index}" + (f" ({name})" if name else "")
    return name or "?"


def target_label(a: RemediationAction) -> str:
    """What an action acts on: ``node-a02``, ``node-a02 GPU 1``, ``leaf-02/swp1``, ``3 hosts``."""
    t = a.target
    parts: list[str] = []
    if t.host:
        parts.append(t.host)
    if t.gpu is not None:
        parts.append(gpu_label(t.gpu))
    if t.port:
        parts.append(t.port)
    if t.hosts:
        parts.append(", ".join(t.hosts) if len(t.hosts) <= 4 else f"{len(t.hosts)} hosts")
    return " ".join(parts) or "(no target)"


def _switch_of(port: str | None) -> str | None:
    return port.split("/", 1)[0] if port else None


# -- timeline geometry ------------------------------------------------------------------------

@dataclass
class Lane:
    """One row of a timeline. ``key`` identifies it; ``label`` is shown at the left;
    ``culprit`` highlights it; ``href`` links the label (None: plain text)."""

    key: Any
    label: str
    y: float = 0.0
    culprit: bool = False
    kind: str = "host"
    host: str = ""
    rank: int | None = None
    href_params: dict[str, str] | None = None


@dataclass
class Mark:
    """A point event: ``role`` (cause | symptom | context | fault | remediation | certification
    | scheduler) picks the shape and colour; ``title`` is the hover text; ``text`` a label
    drawn beside it (scheduler states)."""

    lane: Any
    at: int
    role: str
    title: str
    x: float = 0.0
    y: float = 0.0
    text: str = ""
    host: str = ""
    rank: int | None = None
    event_id: str = ""
    failed: bool = False
    #: draw ``text`` to the left of the mark (near the right edge)
    text_left: bool = False
    #: the event type it stands for (``nccl.watchdog_timeout``), "" for none
    type: str = ""


@dataclass
class Span:
    """An interval on a lane: a back-dated watchdog span (``began`` -> ``at`` logged) or a
    fault's window."""

    lane: Any
    start: int
    end: int
    role: str
    title: str
    x0: float = 0.0
    x1: float = 0.0
    y: float = 0.0
    host: str = ""
    rank: int | None = None


@dataclass
class Tick:
    """A time axis tick at ``x`` with its label."""

    x: float
    label: str


@dataclass
class Timeline:
    """A laid-out SVG timeline: ``width`` x ``height`` user units, lanes from ``top`` with
    ``lane_height`` each, the plot between ``left`` and ``width - right``; ``t0``/``t1``
    (UTC ns) map to those x. ``cause`` is the cause line's mark (None: no cause)."""

    lanes: list[Lane]
    marks: list[Mark]
    spans: list[Span]
    ticks: list[Tick]
    cause: Mark | None
    t0: int
    t1: int
    width: float = 1000.0
    height: float = 0.0
    left: float = 180.0
    right: float = 24.0
    top: float = 30.0
    lane_height: float = 18.0
    caption: str = ""
    hidden_lanes: int = 0
    #: the word before the cause line's time (``cause``, ``inferred cause``)
    cause_label: str = "cause"

    @property
    def plot_right(self) -> float:
        return self.width - self.right

    @property
    def bottom(self) -> float:
        return self.top + self.lane_height * len(self.lanes)


_TICK_STEPS_NS = [n * m for n, m in (
    (1, 1_000_000), (2, 1_000_000), (5, 1_000_000), (10, 1_000_000), (20, 1_000_000), (50, 1_000_000),
    (100, 1_000_000), (200, 1_000_000), (500, 1_000_000),
    (1, NS), (2, NS), (5, NS), (10, NS), (15, NS), (30, NS),
    (60, NS), (120, NS), (300, NS), (600, NS), (900, NS), (1800, NS),
    (3600, NS), (7200, NS), (10800, NS), (21600, NS), (43200, NS),
    (86400, NS), (2 * 86400, NS), (7 * 86400, NS), (30 * 86400, NS))]


def build_timeline(lanes: Sequence[Lane], marks: Sequence[Mark], spans: Sequence[Span] = (),
                   cause: Mark | None = None, *, caption: str = "", hidden_lanes: int = 0) -> Timeline:
    """Lay out ``lanes`` (top to bottom, in the order given), ``marks`` and ``spans`` (whose
    ``lane`` is a lane's ``key``; others are dropped) over the time range they cover, padded by
    3 % on each side; ``cause`` (one of ``marks``) draws a line across every lane. Ticks at a
    round step (1 ms .. 30 d) with at most 7 labels. Returns the :class:`Timeline`."""
    tl = Timeline(list(lanes), [], [], [], None, 0, 1, caption=caption, hidden_lanes=hidden_lanes)
    for i, lane in enumerate(tl.lanes):
        lane.y = tl.top + tl.lane_height * i + tl.lane_height / 2
    ys = {lane.key: lane.y for lane in tl.lanes}
    keep_marks = [m for m in marks if m.lane in ys]
    keep_spans = [s for s in spans if s.lane in ys]
    times = [m.at for m in keep_marks] + [t for s in keep_spans for t in (s.start, s.end)]
    if not times:
        tl.height = tl.bottom + 12
        return tl
    lo, hi = min(times), max(times)
    if hi - lo < 1_000_000:
        lo, hi = lo - 500_000_000, hi + 500_000_000
    pad = (hi - lo) * 0.03
    t0, t1 = int(lo - pad), int(hi + pad)
    tl.t0, tl.t1 = t0, t1
    scale = (tl.plot_right - tl.left) / (t1 - t0)

    def x(t: int) -> float:
        return round(tl.left + (t - t0) * scale, 2)

    for m in keep_marks:
        m.x, m.y = x(m.at), ys[m.lane]
    # labels closer than 70 units on one lane are merged into the first one's
    last: dict[Any, Mark] = {}
    for m in sorted((m for m in keep_marks if m.text), key=lambda m: (str(m.lane), m.x)):
        prev = last.get(m.lane)
        if prev is not None and m.x - prev.x < 70:
            if m.text not in prev.text.split(", "):
                prev.text += ", " + m.text
            m.text = ""
            continue
        last[m.lane] = m
    for m in keep_marks:
        m.text_left = bool(m.text) and m.x > tl.plot_right - 8 * len(m.text) - 10
    for s in keep_spans:
        s.x0, s.x1, s.y = x(s.start), x(s.end), ys[s.lane]
    tl.marks = keep_marks
    tl.spans = keep_spans
    if cause is not None and cause.lane in ys:
        tl.cause = cause
    step = next((s for s in _TICK_STEPS_NS if (t1 - t0) / s <= 7), _TICK_STEPS_NS[-1])
    first = -(-t0 // step) * step
    with_ms = step < NS
    with_date = step >= 86400 * NS
    prev_day = None
    t = first
    while t <= t1:
        day = t // (86400 * NS)
        label = format_ts(t, date=with_date or prev_day is None or day != prev_day, ms=with_ms)
        tl.ticks.append(Tick(x(t), label))
        prev_day = day
        t += step
    tl.height = tl.bottom + 14
    return tl


# -- the incident page ------------------------------------------------------------------------

@dataclass
class LogLine:
    """A log line behind an evidence item: where it is (``file:line``) and its text."""

    where: str
    text: str
    cut: int = 0


@dataclass
class EvidenceRow:
    """One evidence item with the log lines it was extracted from; ``began_at`` (UTC ns) is
    set when the event was back-dated (its condition began before the line was logged)."""

    item: EvidenceItem
    logged_at: int
    began_at: int | None
    lines: list[LogLine]
    is_root: bool = False


@dataclass
class BackDated:
    """A symptom whose line says it began earlier (a watchdog's ``ran for N ms``)."""

    host: str
    rank: int | None
    type: str
    began_at: int
    logged_at: int
    event_id: str

    @property
    def duration_ns(self) -> int:
        return self.logged_at - self.began_at


@dataclass
class SymptomGroup:
    """Symptoms of one event type: how many, on which hosts, which ranks (as ranges)."""

    type: str
    count: int
    hosts: list[str]
    ranks: str
    back_dated: int = 0


@dataclass
class SchedulerState:
    """A scheduler fact in the evidence (job state, node state) at ``at`` (UTC ns)."""

    at: int
    type: str
    state: str
    summary: str


@dataclass
class RevisionChange:
    """What changed from revision ``before`` to ``after``: ``(field, old, new)`` triples."""

    before: int
    after: int
    before_status: str
    after_status: str
    changes: list[tuple[str, str, str]]


@dataclass
class ActionView:
    """A remediation action (latest record) and every transition stored for it."""

    action: RemediationAction
    transitions: list[RemediationAction]
    target: str


@dataclass
class IncidentView:
    """Everything the incident page shows (see :func:`incident_view`)."""

    att: Attribution
    timeline: Timeline
    evidence: list[EvidenceRow]
    hidden_evidence: int
    symptoms: list[SymptomGroup]
    back_dated: list[BackDated]
    scheduler: list[SchedulerState]
    revisions: list[Attribution]
    changes: list[RevisionChange]
    actions: list[ActionView]
    members: list[Attribution]
    cause_item: EvidenceItem | None
    culprit_gpus: list[str]
    missing_events: int = 0
    #: the cause has no event of its own: its mark is placed from the pattern (see incident_view)
    cause_inferred: bool = False
    #: the action to look at first (:func:`next_action`); None: no action stored
    next_action: ActionView | None = None
    #: links to the culprit hosts' dashboards, logs and metrics over the window
    links_out: list[LinkOut] = field(default_factory=list)
    #: :attr:`next_action` is a proposal past its ``expires_at``: too late to approve
    next_action_expired: bool = False

    @property
    def other_actions(self) -> int:
        """How many actions there are besides :attr:`next_action`."""
        return max(0, len(self.actions) - (self.next_action is not None))

    @property
    def title(self) -> str:
        a = self.att
        return f"{a.cause_code or 'withdrawn'} -- {a.scope.kind} {a.scope.id}"


def _summary_state(item: EvidenceItem, event: Event | None) -> str:
    if event is not None:
        for key in ("state", "job_state", "node_state", "reason"):
            value = event.attributes.get(key)
            if isinstance(value, str) and value:
                return value
    for part in item.summary.split():
        if part.startswith("state="):
            return part[len("state="):]
    return item.type.removeprefix("sched.")


def _select_rows(items: Sequence[EvidenceItem], max_rows: int) -> list[EvidenceItem]:
    """All items if they fit, else every cause, then the earliest symptoms and context; in
    time order."""
    order = sorted(range(len(items)), key=lambda i: (items[i].at, i))
    if len(items) <= max_rows:
        return [items[i] for i in order]
    chosen = [i for i in order if items[i].role == "cause"][:max_rows]
    taken = set(chosen)
    for i in order:
        if len(chosen) >= max_rows:
            break
        if i not in taken:
            chosen.append(i)
            taken.add(i)
    return [items[i] for i in sorted(chosen, key=lambda i: (items[i].at, i))]


def _lines(item: EvidenceItem, observations: Mapping[str, Observation]) -> list[LogLine]:
    out = []
    for ref in item.observations:
        obs = observations.get(ref.observation_id)
        file, line = ref.position.file, ref.position.line
        if obs is not None:
            file = file or obs.position.file
            line = line if line is not None else obs.position.line
        where = f"{file}:{line}" if file and line is not None else (file or ref.observation_id)
        text = ""
        if obs is not None:
            text = obs.body if obs.body is not None else (
                ", ".join(f"{k}={v:g}" for k, v in sorted((obs.metric or {}).items())))
        cut = max(0, len(text) - MAX_LINE_CHARS)
        out.append(LogLine(where, text[:MAX_LINE_CHARS], cut))
    return out


def _verdict_fields(a: Attribution) -> dict[str, str]:
    c = a.culprits
    return {
        "status": a.status,
        "root cause": a.cause_code or "(none)",
        "domain": a.domain,
        "quality": a.quality,
        "confidence": f"{a.confidence:.2f}",
        "outcome": a.outcome,
        "culprit hosts": ", ".join(sorted(c.hosts)) or "-",
        "culprit ranks": format_ranks(c.ranks) or "-",
        "culprit GPUs": ", ".join(sorted(gpu_label(g) for g in c.gpus)) or "-",
        "culprit ports": ", ".join(sorted(c.ports)) or "-",
        "alternatives": ", ".join(sorted(x.code for x in a.alternatives)) or "-",
        "symptoms": str(len(a.symptoms)),
        "evidence items": str(len(a.evidence)),
        "unexplained": ", ".join(f"{u.count} {u.type}" for u in a.unexplained) or "-",
        "window": f"{format_ts(a.window.start)} .. {format_ts(a.window.end)}",
        "superseded by": ", ".join(a.superseded_by) or "-",
    }


def revision_changes(revisions: Sequence[Attribution]) -> list[RevisionChange]:
    """For each pair of consecutive revisions (sorted by ``revision``), the verdict fields
    that differ (status, root cause, domain, quality, confidence, outcome, culprits,
    alternatives, symptom and evidence counts, unexplained, window, superseded_by)."""
    ordered = sorted(revisions, key=lambda a: a.revision)
    out = []
    for prev, cur in pairwise(ordered):
        a, b = _verdict_fields(prev), _verdict_fields(cur)
        changed = [(k, a[k], b[k]) for k in a if a[k] != b[k]]
        out.append(RevisionChange(prev.revision, cur.revision, prev.status, cur.status, changed))
    return out


def _incident_lanes(items: Sequence[EvidenceItem], culprit_hosts: set[str],
                    culprit_ranks: set[int]) -> tuple[list[Lane], Any, int]:
    """Lanes for ``items``: per host, a host lane (items without a rank) and one lane per rank,
    the scheduler last; with more than :data:`MAX_RANK_LANES` rank lanes, ranks share their
    host's lane. Returns (lanes, item -> lane key function, rank lanes folded away)."""
    hosts = sorted({i.host for i in items}, key=lambda h: (h == SCHEDULER_HOST, h))
    pairs = {(i.host, i.rank) for i in items if i.rank is not None}
    if len(culprit_hosts) == 1:
        # a culprit rank that logged nothing (the silent one) still gets its lane
        (only,) = culprit_hosts
        pairs.update((only, r) for r in culprit_ranks if all(i.rank != r for i in items))
        if only not in hosts and culprit_ranks:
            hosts = sorted([*hosts, only], key=lambda h: (h == SCHEDULER_HOST, h))
    rank_pairs = sorted(pairs)
    by_rank = len(rank_pairs) <= MAX_RANK_LANES
    lanes: list[Lane] = []
    for host in hosts:
        host_items = [i for i in items if i.host == host]
        has_host_lane = not by_rank or any(i.rank is None for i in host_items)
        if has_host_lane:
            kind = "scheduler" if host == SCHEDULER_HOST else "host"
            label = "scheduler" if host == SCHEDULER_HOST else host
            lanes.append(Lane((host, None), label, culprit=host in culprit_hosts, kind=kind, host=host,
                              href_params=None if host == SCHEDULER_HOST else {"host": host}))
        if by_rank:
            for h, rank in rank_pairs:
                if h == host:
                    lanes.append(Lane((host, rank), f"{host} rank {rank}",
                                      culprit=rank in culprit_ranks and host in culprit_hosts,
                                      kind="rank", host=host, rank=rank, href_params={"host": host}))

    def key(item: EvidenceItem) -> Any:
        return (item.host, item.rank if by_rank else None)

    return lanes, key, 0 if by_rank else len(rank_pairs)


@dataclass
class _TimelineParts:
    """What walking an incident's evidence gives: the laid-out timeline, the back-dated
    symptoms, the scheduler states, the cause item (None: none in the evidence), how many
    evidence items have no stored event, and whether the cause mark is inferred."""

    timeline: Timeline
    back_dated: list[BackDated]
    scheduler: list[SchedulerState]
    cause_item: EvidenceItem | None
    missing: int
    inferred: bool


def _logged_and_began(item: EvidenceItem, event: Event | None) -> tuple[int, int | None]:
    """(logged, began) of an evidence item, UTC ns: the event's time and its back-dated start
    when earlier; the item's own time without an event."""
    logged = event.at if event is not None else item.at
    began = event.began_at if event is not None and event.began_at is not None and event.began_at < event.at else None
    return logged, began


def _incident_timeline(att: Attribution, events: Mapping[str, Event]) -> _TimelineParts:
    """Marks, spans and the cause line of ``att``'s evidence on lanes per host and rank (see
    :func:`incident_view`)."""
    items = list(att.evidence)
    root_id = att.root_cause.event_id if att.root_cause is not None else None
    lanes, lane_of, folded = _incident_lanes(items, set(att.culprits.hosts), set(att.culprits.ranks))
    marks: list[Mark] = []
    spans: list[Span] = []
    back_dated: list[BackDated] = []
    scheduler: list[SchedulerState] = []
    cause_mark: Mark | None = None
    cause_item: EvidenceItem | None = None
    missing = 0
    for item in items:
        event = events.get(item.event_id)
        missing += event is None
        logged, began = _logged_and_began(item, event)
        who = item.host + (f" rank {item.rank}" if item.rank is not None else "")
        if item.host == SCHEDULER_HOST or item.type.startswith("sched."):
            state = _summary_state(item, event)
            scheduler.append(SchedulerState(item.at, item.type, state, item.summary))
            marks.append(Mark(lane_of(item), logged, "scheduler", f"{format_ts(logged)} {item.type} {state}",
                              text=state, host=item.host, rank=item.rank, event_id=item.event_id, type=item.type))
            continue
        title = f"{format_ts(logged)} {item.role} {item.type} on {who}: {item.summary}"
        mark = Mark(lane_of(item), logged, item.role, title, host=item.host, rank=item.rank, event_id=item.event_id,
                    type=item.type)
        marks.append(mark)
        if began is not None:
            back_dated.append(BackDated(item.host, item.rank, item.type, began, logged, item.event_id))
            spans.append(Span(lane_of(item), began, logged, "backdated",
                              f"{item.type} on {who}: began {format_ts(began)}, logged {format_ts(logged)} "
                              f"({format_duration(logged - began)} earlier)", host=item.host, rank=item.rank))
        if item.event_id == root_id and cause_mark is None:
            cause_mark, cause_item = mark, item
    if cause_mark is None:  # no evidence item carries the root cause event: the earliest cause item
        cause_mark = min((m for m in marks if m.role == "cause"), key=lambda m: m.at, default=None)
        if cause_mark is not None:
            cause_item = next(i for i in items if i.event_id == cause_mark.event_id)
    inferred = False
    if cause_mark is None and att.root_cause is not None:
        cause_mark = _inferred_cause(att, lanes, items)
        if cause_mark is not None:
            marks.append(cause_mark)
            inferred = True
    if cause_mark is not None:
        cause_mark.role = "root"
    caption = (f"{len(items)} evidence items on {len({i.host for i in items})} hosts"
               + (f"; {folded} rank lanes shown per host" if folded else ""))
    timeline = build_timeline(lanes, marks, spans, cause_mark, caption=caption, hidden_lanes=folded)
    timeline.cause_label = "inferred cause" if inferred else "cause"
    return _TimelineParts(timeline, sorted(back_dated, key=lambda b: (b.began_at, b.host, b.rank or -1)),
                          sorted(scheduler, key=lambda s: s.at), cause_item, missing, inferred)


def _evidence_rows(att: Attribution, events: Mapping[str, Event], observations: Mapping[str, Observation],
                   max_rows: int) -> list[EvidenceRow]:
    """The evidence rows an incident page lists (:func:`_select_rows`), each with its logged
    and began times and the log lines behind it."""
    root_id = att.root_cause.event_id if att.root_cause is not None else None
    rows = []
    for item in _select_rows(att.evidence, max_rows):
        logged, began = _logged_and_began(item, events.get(item.event_id))
        rows.append(EvidenceRow(item, logged, began, _lines(item, observations), item.event_id == root_id))
    return rows


def action_views(actions: Sequence[RemediationAction],
                 transitions: Mapping[str, Sequence[RemediationAction]]) -> list[ActionView]:
    """``actions`` (latest records) with their ``transitions`` (action id -> records by
    sequence), oldest first."""
    return [ActionView(a, list(transitions.get(a.action_id, [])), target_label(a))
            for a in sorted(actions, key=lambda a: (a.created_at, a.action_id))]


def incident_view(
    att: Attribution,
    events: Mapping[str, Event],
    observations: Mapping[str, Observation],
    *,
    revisions: Sequence[Attribution] = (),
    actions: Sequence[RemediationAction] = (),
    transitions: Mapping[str, Sequence[RemediationAction]] | None = None,
    members: Sequence[Attribution] = (),
    max_rows: int = MAX_EVIDENCE_ROWS,
    link_templates: Mapping[str, str] | None = None,
    now_ns: int | None = None,
) -> IncidentView:
    """The incident page of ``att``: its timeline (lanes per host and rank, the scheduler
    last; the root cause event's line; symptoms at their logged time with a bar back to when
    they began when the line says so), the evidence rows with the log lines of ``observations``
    behind each, symptom groups, back-dated spans, scheduler states, what changed between
    ``revisions``, ``actions`` with their ``transitions`` (action id -> records by sequence),
    the action to look at first (:func:`next_action`, with ``now_ns``, UTC ns, telling
    expired proposals apart; None: none is), the link-outs of ``link_templates`` for the
    culprit hosts (:func:`link_outs`) and the ``members`` of an incident verdict. ``events``
    (event id -> Event) gives the logged and began times; an evidence item whose event is
    missing is placed at its own ``at``."""
    parts = _incident_timeline(att, events)
    rows = _evidence_rows(att, events, observations, max_rows)
    ordered_revisions = sorted(revisions, key=lambda a: a.revision)
    views = action_views(actions, transitions or {})
    return IncidentView(
        att=att, timeline=parts.timeline, evidence=rows, hidden_evidence=len(att.evidence) - len(rows),
        symptoms=_symptom_groups(att.evidence, {b.event_id for b in parts.back_dated}),
        back_dated=parts.back_dated, scheduler=parts.scheduler, revisions=ordered_revisions,
        changes=revision_changes(ordered_revisions), actions=views,
        members=[m for m in members if m.attribution_id != att.attribution_id],
        cause_item=parts.cause_item, culprit_gpus=[gpu_label(g) for g in att.culprits.gpus],
        missing_events=parts.missing, cause_inferred=parts.inferred,
        next_action=(first := next_action(views, now_ns)),
        next_action_expired=(first is not None and first.action.state == "proposed" and now_ns is not None
                             and first.action.expires_at is not None and first.action.expires_at <= now_ns),
        links_out=link_outs(link_templates or {}, att.culprits.hosts, att.scope.cluster, att.window.start,
                            att.window.end),
    )


def _inferred_cause(att: Attribution, lanes: list, items: Sequence[EvidenceItem]) -> Mark | None:
    """The mark of a cause inferred from a pattern (a rank that never logged the wait the
    others did): on the culprit's lane (added when it has none), when the earliest symptom
    began; None without a culprit host."""
    lane_keys = [lane.key for lane in lanes]
    host = att.culprits.hosts[0] if att.culprits.hosts else None
    rank = att.culprits.ranks[0] if att.culprits.ranks else None
    key = next((k for k in ((host, rank), (host, None)) if k in lane_keys), None)
    if key is None and host is not None:
        lanes.insert(0, Lane((host, None), host, culprit=True, host=host, href_params={"host": host}))
        key = (host, None)
    if key is None:
        return None
    effective = [i.at for i in items if i.role == "symptom"]
    at = min(effective) if effective else att.window.start
    return Mark(key, at, "root", f"{format_ts(at)} inferred cause {att.cause_code}: {att.root_cause.text}",
                host=key[0], rank=key[1])


def _symptom_groups(items: Sequence[EvidenceItem], back_ids: set[str]) -> list[SymptomGroup]:
    """The symptom items by type (most first): count, hosts, ranks, how many were back-dated."""
    groups: dict[str, list[EvidenceItem]] = defaultdict(list)
    for item in items:
        if item.role == "symptom":
            groups[item.type].append(item)
    return sorted(
        (SymptomGroup(t, len(g), sorted({i.host for i in g}), format_ranks(i.rank for i in g if i.rank is not None),
                      sum(i.event_id in back_ids for i in g))
         for t, g in groups.items()), key=lambda s: (-s.count, s.type))


def incident_event_ids(att: Attribution) -> list[str]:
    """The event ids an incident page reads: the evidence items' and the root cause's."""
    ids = {i.event_id for i in att.evidence}
    if att.root_cause is not None and att.root_cause.event_id:
        ids.add(att.root_cause.event_id)
    return sorted(ids)


def incident_observation_ids(att: Attribution, max_rows: int = MAX_EVIDENCE_ROWS) -> list[str]:
    """The observation ids behind the evidence rows an incident page lists."""
    return sorted({ref.observation_id for item in _select_rows(att.evidence, max_rows) for ref in item.observations})


# -- what to do first: the next action, link-outs, the list's groups and the fleet summary ------

#: How long an incident without any remediation action counts as open, ns.
OPEN_WITHOUT_ACTION_NS = 86_400 * NS


def next_action(actions: Sequence[ActionView], now_ns: int | None = None) -> ActionView | None:
    """The action a person looks at first: a proposal still waiting for a decision (not past
    its ``expires_at`` at ``now_ns``, UTC ns; None: no expiry check), the most severe and then
    the one expiring soonest; else one approved or executing; else a failed one; else the
    latest. None when there is no action."""
    def waiting(v: ActionView) -> bool:
        a = v.action
        return a.state == "proposed" and (now_ns is None or a.expires_at is None or a.expires_at > now_ns)

    for pick in (waiting, lambda v: v.action.state in ("approved", "executing"), lambda v: v.action.state == "failed"):
        chosen = [v for v in actions if pick(v)]
        if chosen:
            return min(chosen, key=lambda v: (-v.action.severity, v.action.expires_at or 0, v.action.created_at,
                                              v.action.action_id))
    return max(actions, key=lambda v: (v.action.updated_at, v.action.action_id), default=None)


@dataclass(frozen=True)
class LinkOut:
    """A link to another tool (``name``: Grafana, Loki, Prometheus) for ``host``."""

    name: str
    host: str
    url: str


def link_outs(templates: Mapping[str, str], hosts: Sequence[str], cluster: str, start_ns: int, end_ns: int,
              *, pad_s: int = LINK_PAD_S, max_hosts: int = 4) -> list[LinkOut]:
    """The link-outs of ``templates`` (name -> template checked by
    :func:`streams.ui.settings.check_link_template`) for each of the first ``max_hosts`` of
    ``hosts`` (the scheduler left out) over ``[start_ns - pad_s, end_ns + pad_s]`` (UTC ns):
    per host, one link per template in the order given. Every value is percent-encoded with no
    safe character. [] without templates or hosts."""
    lo, hi = start_ns - pad_s * NS, end_ns + pad_s * NS
    times = {"from_ms": lo // 1_000_000, "to_ms": hi // 1_000_000, "from_s": lo // NS, "to_s": hi // NS,
             "from_iso": format_utc(lo // NS * NS).replace(".000000000Z", "Z"),
             "to_iso": format_utc(-(-hi // NS) * NS).replace(".000000000Z", "Z")}
    out = []
    for host in [h for h in hosts if h and not h.startswith("_")][:max_hosts]:
        values = {k: quote(str(v), safe="") for k, v in {**times, "host": host, "cluster": cluster}.items()}
        out += [LinkOut(name, host, t.format(**values)) for name, t in templates.items()]
    return out


@dataclass
class ListGroup:
    """One row of the incident list: ``head`` (the incident verdict when stored, else the
    fabric-port verdict, else the newest) and the other verdicts of the same incident folded
    under it (workload verdicts first). ``key``: the incident id, or the verdict's own id."""

    key: str
    head: Any
    members: list[Any]

    @property
    def decided_at(self) -> int:
        """The newest ``decided_at`` of the group, UTC ns."""
        return max(r.decided_at for r in [self.head, *self.members])


_HEAD_ORDER = {"incident": 0, "fabric_port": 1}


def group_rows(rows: Sequence[Any]) -> list[ListGroup]:
    """Fold list rows (:class:`streams.ui.queries.IncidentRow`: ``attribution_id``,
    ``incident_id``, ``scope_kind``, ``decided_at``) into one :class:`ListGroup` per
    incident (rows sharing ``incident_id``; a row without one is its own), newest group
    first (then by the head's id)."""
    by_key: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        by_key[r.incident_id or r.attribution_id].append(r)
    groups = []
    for key, members in by_key.items():
        head = min(members, key=lambda r: (_HEAD_ORDER.get(r.scope_kind, 2), -r.decided_at, r.attribution_id))
        rest = sorted((r for r in members if r is not head),
                      key=lambda r: (r.scope_kind != "workload", -r.decided_at, r.attribution_id))
        groups.append(ListGroup(key, head, rest))
    return sorted(groups, key=lambda g: (-g.decided_at, g.head.attribution_id))


@dataclass(frozen=True)
class IncidentCost:
    """One incident as the fleet summary counts it (the Grafana panels' convention: verdicts
    sharing an ``incident_id`` are one incident; withdrawn verdicts and those without a fault
    left out): its cluster, key, first and last ``decided_at`` (UTC ns) and the GPU-hours its
    workload verdicts lost."""

    cluster: str
    key: str
    first_at: int
    last_at: int
    gpu_hours_lost: float


@dataclass
class ClusterSummary:
    """The fleet summary of one cluster (``cluster`` ``""``: every cluster together): open
    incidents, nodes out of service (``cordoned``: taken out by a disruptive action still
    executing; ``awaiting_certification``: of those, the ones whose action has run and now
    waits for a certification), incidents and GPU-hours lost today (UTC day)."""

    cluster: str
    open_incidents: int = 0
    cordoned: list[str] = field(default_factory=list)
    awaiting_certification: list[str] = field(default_factory=list)
    incidents_today: int = 0
    gpu_hours_today: float = 0.0

    @property
    def nodes_out(self) -> int:
        """Nodes cordoned or awaiting re-certification."""
        return len(set(self.cordoned) | set(self.awaiting_certification))


@dataclass
class FleetSummary:
    """The list page's summary: per cluster (sorted), the total, and the UTC day it counts
    (``day_start`` .. ``now``, UTC ns)."""

    clusters: list[ClusterSummary]
    total: ClusterSummary
    day_start: int
    now: int


def executed_actions(transitions: Mapping[str, Sequence[RemediationAction]]) -> set[str]:
    """The ids among ``transitions`` (action id -> records by sequence) of actions that have
    run and wait in ``executing`` for a certification: a second ``executing`` record follows
    the one that started them (``correlators.remediation.engine``'s ``on_execution``)."""
    return {aid for aid, records in transitions.items() if sum(r.state == "executing" for r in records) > 1}


def _action_key(a: RemediationAction) -> str:
    return a.incident_id or a.attribution_id


def _hosts_out(a: RemediationAction) -> list[str]:
    return sorted({h for h in [a.target.host, *a.target.hosts] if h})


def fleet_summary(incidents: Sequence[IncidentCost], open_actions: Sequence[RemediationAction],
                  incidents_with_actions: set[str], executed: set[str], now_ns: int) -> FleetSummary:
    """The fleet summary at ``now_ns`` (UTC ns).

    * an incident is **open** when one of ``open_actions`` (latest records proposed, approved
      or executing: ``streams.remediation.cli.ACTIVE``; a proposal past its ``expires_at``
      does not count) is for it, or when nothing was proposed for it (its key not in
      ``incidents_with_actions``) and its last verdict is less than
      :data:`OPEN_WITHOUT_ACTION_NS` old;
    * a node is **cordoned** while a disruptive action (``correlators.remediation.policy
      .DISRUPTIVE``) on it is ``executing``; **awaiting re-certification** when that action's
      id is in ``executed`` (it ran and waits for a certification to return the node);
    * **today** is the UTC day of ``now_ns``; an incident counts on the day of its first
      verdict, with the GPU-hours its workload verdicts lost.

    ``incidents``: :class:`IncidentCost` of the incidents with a verdict since the start of
    the day or within :data:`OPEN_WITHOUT_ACTION_NS`."""
    day_start = now_ns - now_ns % (86_400 * NS)
    clusters: dict[str, ClusterSummary] = {}

    def of(cluster: str) -> ClusterSummary:
        return clusters.setdefault(cluster, ClusterSummary(cluster))

    open_keys: set[tuple[str, str]] = set()
    for a in open_actions:
        if a.state not in ACTIVE or (a.state == "proposed" and a.expires_at is not None
                                           and a.expires_at <= now_ns):
            continue
        open_keys.add((a.cluster, _action_key(a)))
        if a.state == "executing" and a.action in DISRUPTIVE:
            s = of(a.cluster)
            (s.awaiting_certification if a.action_id in executed else s.cordoned).extend(_hosts_out(a))
    for inc in incidents:
        s = of(inc.cluster)
        if inc.key not in incidents_with_actions and now_ns - inc.last_at < OPEN_WITHOUT_ACTION_NS:
            open_keys.add((inc.cluster, inc.key))
        if day_start <= inc.first_at <= now_ns:
            s.incidents_today += 1
            s.gpu_hours_today += inc.gpu_hours_lost
    for cluster, _ in open_keys:
        of(cluster).open_incidents += 1
    total = ClusterSummary("")
    for s in clusters.values():
        s.cordoned = sorted(set(s.cordoned) - set(s.awaiting_certification))
        s.awaiting_certification = sorted(set(s.awaiting_certification))
        s.gpu_hours_today = round(s.gpu_hours_today, 4)
        total.open_incidents += s.open_incidents
        total.incidents_today += s.incidents_today
        total.gpu_hours_today += s.gpu_hours_today
        total.cordoned += [f"{s.cluster}/{h}" for h in s.cordoned]
        total.awaiting_certification += [f"{s.cluster}/{h}" for h in s.awaiting_certification]
    total.gpu_hours_today = round(total.gpu_hours_today, 4)
    return FleetSummary(sorted(clusters.values(), key=lambda s: s.cluster), total, day_start, now_ns)


# -- the fabric page --------------------------------------------------------------------------

@dataclass
class PortFault:
    """One fabric fault on a port or a switch: its verdict, the cables it names (switch side,
    host side), when it began and was last seen (UTC ns), the jobs it hit, and the incident
    verdict that groups it (None: none stored)."""

    verdict: Attribution
    switch: str
    port: str
    cables: list[tuple[str, str]]
    first_at: int
    last_at: int
    jobs: list[str]
    incident: Attribution | None


@dataclass
class SwitchView:
    """A switch and the faults on its ports (or on the whole switch)."""

    name: str
    faults: list[PortFault]


@dataclass
class FabricView:
    """The fabric page: switches with their faulty ports, every cable named (both ends), the
    faults over time, the incident verdicts."""

    switches: list[SwitchView]
    cables: list[tuple[str, str, str]]
    timeline: Timeline
    incidents: list[Attribution]


def fabric_view(verdicts: Sequence[Attribution]) -> FabricView:
    """Group fabric-port verdicts by switch (``<switch>/<port>`` scope ids; a whole-switch
    verdict is its name) with both ends of each cable from ``culprits.cables``, the jobs each
    hit (``affected.workloads``) and the incident verdict of the same ``incident_id`` among
    ``verdicts``; a timeline with one lane per port and a mark per evidence item (switch-side
    and host-side lines apart) over each fault's window."""
    incidents = {a.incident_id: a for a in verdicts if a.scope.kind == "incident" and a.incident_id}
    by_switch: dict[str, list[PortFault]] = defaultdict(list)
    cables: dict[tuple[str, str], str] = {}
    lanes: list[Lane] = []
    marks: list[Mark] = []
    spans: list[Span] = []
    port_verdicts = [a for a in verdicts if a.scope.kind == "fabric_port"]
    for a in sorted(port_verdicts, key=lambda a: (a.scope.id, a.window.start)):
        pairs = [(c.switch_port or "", c.host_port or "") for c in a.culprits.cables]
        switch = _switch_of(next((p for p, _ in pairs if p), None)) or _switch_of(a.scope.id) or a.scope.id
        times = [i.at for i in a.evidence] or [a.window.start, a.window.end]
        fault = PortFault(a, switch, a.scope.id, pairs, min(times), max(times), sorted(a.affected.workloads),
                          incidents.get(a.incident_id))
        by_switch[switch].append(fault)
        for sw, host in pairs:
            cables.setdefault((sw, host), a.attribution_id)
        key = (a.scope.cluster, a.scope.id)
        if all(lane.key != key for lane in lanes):
            same = sum(lane.label.split(" (")[0] == a.scope.id for lane in lanes)
            lanes.append(Lane(key, a.scope.id + (f" ({same + 1})" if same else ""), kind="port", host=switch))
        spans.append(Span(key, fault.first_at, fault.last_at, "fault",
                          f"{a.cause_code} on {a.scope.id}: {format_ts(fault.first_at)} .. {format_ts(fault.last_at)}"))
        switch_hosts = {switch}
        for item in a.evidence:
            side = "switch" if item.host in switch_hosts else "host"
            marks.append(Mark(key, item.at, item.role if side == "host" else f"{item.role}-switch",
                              f"{format_ts(item.at)} {item.type} on {item.host} ({side} side): {item.summary}",
                              host=item.host, event_id=item.event_id, type=item.type))
    switches = [SwitchView(name, sorted(faults, key=lambda f: (f.port, f.first_at)))
                for name, faults in sorted(by_switch.items())]
    timeline = build_timeline(lanes, marks, spans, caption=f"{len(port_verdicts)} port faults on {len(switches)} switches")
    cable_rows = [(sw, host, aid) for (sw, host), aid in sorted(cables.items())]
    return FabricView(switches, cable_rows, timeline, sorted(incidents.values(), key=lambda a: -a.decided_at))


# -- the node page ----------------------------------------------------------------------------

@dataclass
class NodeView:
    """A node's history: ``faults`` (verdicts naming it a culprit), ``affected`` (verdicts it
    only suffered from), remediation actions with transitions, certifications, its event
    counts by type and a timeline of all of it."""

    host: str
    cluster: str
    faults: list[Attribution]
    affected: list[Attribution]
    actions: list[ActionView]
    certifications: list[Certification]
    event_counts: list[tuple[str, int, int, int]]
    timeline: Timeline


def cause_time(a: Attribution) -> int:
    """When ``a``'s cause happened (UTC ns): its root cause event's evidence time, else the
    earliest cause item's, else (a cause inferred from a pattern) the earliest symptom's, else
    the window's start."""
    rid = a.root_cause.event_id if a.root_cause is not None else None
    for item in a.evidence:
        if item.event_id == rid:
            return item.at
    causes = [i.at for i in a.evidence if i.role == "cause"] or [i.at for i in a.evidence if i.role == "symptom"]
    return min(causes) if causes else a.window.start


def node_view(host: str, cluster: str, verdicts: Sequence[Attribution], actions: Sequence[RemediationAction],
              transitions: Mapping[str, Sequence[RemediationAction]], certifications: Sequence[Certification],
              event_counts: Sequence[tuple[str, int, int, int]] = ()) -> NodeView:
    """The node page of ``host``: ``verdicts`` split into faults (``host`` among the culprit
    hosts) and affected-by, the ``actions`` on it with their ``transitions``, its
    ``certifications``; a timeline with lanes faults / affected / remediation / certification
    (each fault at its cause's time, each transition at its ``updated_at``, each
    certification at ``finished_at``)."""
    faults = [a for a in verdicts if host in a.culprits.hosts]
    affected = [a for a in verdicts if host not in a.culprits.hosts]
    views = action_views(actions, transitions)
    lanes = [Lane("fault", "faults (culprit)", culprit=True, kind="row"),
             Lane("affected", "affected by", kind="row"),
             Lane("remediation", "remediation", kind="row"),
             Lane("certification", "certification", kind="row")]
    marks: list[Mark] = []
    for a in faults:
        marks.append(Mark("fault", cause_time(a), "root", f"{format_ts(cause_time(a))} {a.cause_code} "
                          f"({a.scope.kind} {a.scope.id}, {a.quality})", event_id=a.attribution_id))
    for a in affected:
        marks.append(Mark("affected", cause_time(a), "symptom", f"{format_ts(cause_time(a))} {a.cause_code} "
                          f"({a.scope.kind} {a.scope.id}) on {', '.join(a.culprits.hosts) or 'no host'}"))
    for v in views:
        for r in v.transitions or [v.action]:
            marks.append(Mark("remediation", r.updated_at or r.created_at, "remediation",
                              f"{format_ts(r.updated_at or r.created_at)} {r.action} {r.state} (seq {r.sequence})",
                              text=r.state if r.state in ("done", "failed", "rejected") else "",
                              failed=r.state == "failed"))
    for c in certifications:
        marks.append(Mark("certification", c.finished_at, "certification",
                          f"{format_ts(c.finished_at)} {c.suite}: {'passed' if c.passed else 'FAILED'}",
                          text="pass" if c.passed else "fail", failed=not c.passed))
    timeline = build_timeline(lanes, marks, caption=f"history of {host}")
    return NodeView(host, cluster, faults, affected, views, list(certifications), list(event_counts), timeline)
