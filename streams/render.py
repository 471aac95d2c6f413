"""Rich renderings of verdicts for operators (``faultstream replay``) and of score tables
(``faultstream score``).

:func:`render_attribution` prints, in order:

1. a header panel -- scope, outcome, domain, root cause code and text, quality, confidence,
   revision, window (UTC) and rule/engine versions; the border colour follows the quality;
2. culprits -- hosts, ranks (as ranges, ``0-15``), GPUs (PCI bus id / UUID / index), ports;
3. symptoms -- counts of symptom events by type with the hosts and ranks they came from;
4. alternatives (if any) -- other causes that fit, with scores;
5. coverage -- each input source with status and counts (``unknown``: error lines no rule
   knows); ``failed`` is red, ``empty`` and ``lagging`` yellow. Beyond
   :data:`MAX_COVERAGE_ROWS` sources (a 4,000-node job) it shows the sources that are not
   ``present`` first, then present ones with unknown error lines, then the rest up to the
   limit, and below the table one line summing what it left out by status;
   then the unrecognised error
   lines as templates ("4 error lines no rule knows, 2 templates: ..."), those near the cause
   marked;
6. the reasoning -- the verdict's chain as numbered sentences (``reasoning``), then the
   symptoms its cause leaves unexplained (``unexplained``) when there are any;
7. the evidence timeline -- UTC time to the millisecond (``2026-11-30 01:21:04.123``), role
   (cause / symptom / context), event type, host, rank, summary. Beyond ``max_timeline``
   rows it keeps every cause, then the earliest symptoms (at least half of what is left),
   then the earliest of the rest, shows them in time order and ends with
   ``... N more (k symptom, j context)``.

Times in records are integers, UTC nanoseconds since the epoch; they are truncated (not
rounded) to milliseconds for display.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from correlators.explain import format_ranks  # noqa: F401 (re-exported: streams.render.format_ranks)
from correlators.timetext import clock

from schemas.records import Attribution, Cost, CoverageEntry, EvidenceItem, GpuRef

if TYPE_CHECKING:
    from streams.replay import CalibrationRow, ScoreRow

__all__ = ["render_attribution", "render_score_table", "render_calibration", "format_ns", "format_ranks"]

_QUALITY_STYLE = {
    "definitive": "green",
    "probable": "cyan",
    "ambiguous": "yellow",
    "insufficient": "red",
}
_ROLE_STYLE = {"cause": "bold red", "symptom": "yellow", "context": "dim"}
_COVERAGE_STYLE = {"present": "green", "empty": "bold yellow", "lagging": "bold yellow",
                   "failed": "bold red"}


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _safe(text: str) -> str:
    """``text`` with control characters (ESC and the rest of C0/C1 but tab and newline)
    shown as ``\\xNN``: a log line never drives the operator's terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _plain(*cells: Any) -> list[Any]:
    """Table cells with every plain string wrapped in :class:`rich.text.Text`, so text that
    came from logs (``[/pytorch/...]``, ``[rank0]``) is shown as written, never parsed as
    rich markup, and with control characters made visible (:func:`_safe`)."""
    return [Text(_safe(c)) if isinstance(c, str) else c for c in cells]


def _row(table: Table, *cells: Any, **kwargs: Any) -> None:
    table.add_row(*_plain(*cells), **kwargs)


def format_ns(ns: int) -> str:
    """UTC nanoseconds since the epoch -> ``YYYY-MM-DD HH:MM:SS.mmm`` (UTC, truncated to ms)."""
    seconds, rest = divmod(int(ns), 1_000_000_000)
    stamp = dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc)
    return f"{stamp:%Y-%m-%d %H:%M:%S}.{rest // 1_000_000:03d}"


def _gpu_label(gpu: GpuRef) -> str:
    parts = []
    if gpu.pci_bus_id:
        parts.append(gpu.pci_bus_id)
    if gpu.uuid:
        parts.append(gpu.uuid)
    if gpu.index is not None:
        parts.append(f"index {gpu.index}")
    return " / ".join(parts) or "?"


def _header(att: Attribution) -> Panel:
    style = _QUALITY_STYLE.get(att.quality, "white")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    scope = f"{att.scope.kind} {att.scope.id}"
    if att.scope.cluster:
        scope += f" (cluster {att.scope.cluster})"
    _row(grid, "Scope", scope)
    _row(grid, "Outcome", att.outcome)
    _row(grid, "Domain", att.domain)
    if att.root_cause is not None:
        _row(grid, "Root cause", Text.assemble((att.root_cause.code, "bold"), " -- ", att.root_cause.text))
    else:
        _row(grid, "Root cause", "none: withdrawn" + (f", superseded by {', '.join(att.superseded_by)}"
                                                      if att.superseded_by else ""))
    _row(grid, "Quality", Text(att.quality, style=f"bold {style}"))
    _row(grid, "Confidence", f"{att.confidence:.2f}")
    _row(grid, "Revision", f"{att.revision} ({'provisional: the window is still open' if att.status == 'provisional' else att.status})")
    _row(grid, "Window", f"{format_ns(att.window.start)} .. {format_ns(att.window.end)} UTC")
    if att.cost is not None:
        _row(grid, "Cost", cost_line(att.cost))
    if att.incident_id:
        _row(grid, "Incident", att.incident_id)
    _row(grid, "Verdict id", att.attribution_id)  # what an incident's Members name
    _row(grid, "Rules", f"{att.ruleset_version}, engine {att.engine_version}")
    return Panel(grid, title="faultstream verdict", title_align="left", border_style=style,
                 box=box.ROUNDED)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def cost_line(cost: Cost) -> str:
    """One line of a verdict's cost: GPU-hours (else node-hours) lost, how long it ran on
    after the cause until noticed, time to this verdict, jobs and nodes hit."""
    lost = (f"{cost.gpu_hours_lost:g} GPU-hours lost ({cost.gpus} GPUs x {_duration(cost.lost_s)})"
            if cost.gpu_hours_lost is not None
            else f"{cost.node_hours_lost:g} node-hours lost ({cost.nodes} nodes x {_duration(cost.lost_s)})")
    noticed = (f"noticed {_duration(cost.ran_after_cause_s)} after the cause" if cost.ran_after_cause_s is not None
               else "not noticed yet")
    if cost.goodput_lost_fraction is not None:
        # a slow job loses a share of its speed, not all of it
        lost = (f"goodput {100 * cost.goodput_lost_fraction:.1f}% lost"
                + (f" ({cost.gpu_hours_lost_per_hour:g} GPU-hours per hour)" if cost.gpu_hours_lost_per_hour is not None else "")
                + f" since {clock(cost.lost_from)}"
                + (f", step {cost.healthy_step_s:g} s -> {cost.observed_step_s:g} s" if cost.healthy_step_s is not None else "")
                + "; " + lost.replace(" lost (", " lost so far (", 1))
    return (f"{lost}; {noticed}; verdict {_duration(cost.verdict_after_s)} after it; "
            f"{cost.jobs_hit} job(s), {cost.nodes_hit} node(s) hit")


def _culprits(att: Attribution) -> Panel:
    c = att.culprits
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows = [
        ("Hosts", ", ".join(c.hosts)),
        ("Ranks", format_ranks(c.ranks)),
        ("GPUs", ", ".join(_gpu_label(g) for g in c.gpus)),
        ("Ports", ", ".join(c.ports)),
    ]
    if att.scope.kind != "workload":
        # a fabric or incident verdict: the jobs the fault broke, and the verdicts it groups
        rows += [("Workloads hit", ", ".join(att.affected.workloads) or "none named"),
                 ("Members", ", ".join(att.members))]
    shown = [(k, v) for k, v in rows if v]
    if not shown:
        body: Any = Text("none named", style="dim")
    else:
        for key, value in shown:
            _row(grid, key, value)
        body = grid
    return Panel(body, title="Culprits", title_align="left", box=box.ROUNDED)


def _symptoms(att: Attribution) -> Any:
    items = [e for e in att.evidence if e.role == "symptom"]
    in_trail = {e.event_id for e in items}
    by_type: dict[str, list[EvidenceItem]] = {}
    for item in items:
        by_type.setdefault(item.type, []).append(item)
    hosts = {e.host for e in items if not e.host.startswith("_")}  # not _scheduler/_unknown
    ranks = {e.rank for e in items if e.rank is not None}
    total = len(set(att.symptoms) | in_trail)
    title = (
        f"Symptoms: {total} event{'s' if total != 1 else ''} on {len(hosts)} "
        f"host{'s' if len(hosts) != 1 else ''}, {len(ranks)} rank{'s' if len(ranks) != 1 else ''}"
    )
    if not items and att.scope.kind != "workload" and att.symptoms:
        # a fabric or incident verdict: its symptoms are the errors of the workloads it hit
        hit = att.affected.workloads
        return Text(f"Symptoms: {total} events of {len(hit)} workload{'s' if len(hit) != 1 else ''} "
                    f"({', '.join(hit)}), on {len(att.affected.hosts)} hosts: see their verdicts", style="bold")
    if not items:
        return Group(Text(title, style="bold"), Text("no symptom events in the evidence", style="dim"))
    table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD)
    table.add_column("type")
    table.add_column("events", justify="right")
    table.add_column("hosts", justify="right")
    table.add_column("ranks")
    for typ, group in sorted(by_type.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        group_ranks = [e.rank for e in group if e.rank is not None]
        _row(table, typ, str(len(group)), str(len({e.host for e in group})),
                      format_ranks(group_ranks) or "-")
    missing = len(set(att.symptoms) - in_trail)
    if missing:
        return Group(table, Text(f"{missing} symptom events not in the evidence trail",
                                 style="dim"))
    return table


def _alternatives(att: Attribution) -> Table:
    table = Table(title="Alternatives", title_justify="left", title_style="bold",
                  box=box.SIMPLE_HEAD)
    table.add_column("code")
    table.add_column("domain")
    table.add_column("score", justify="right")
    table.add_column("hosts")
    table.add_column("ranks")
    table.add_column("why")
    for alt in sorted(att.alternatives, key=lambda a: (-a.score, a.code)):
        _row(table, alt.code, alt.domain, f"{alt.score:.2f}", ", ".join(alt.hosts),
                      format_ranks(alt.ranks), alt.text)
    return table


#: Coverage rows printed before the rest is summarised.
MAX_COVERAGE_ROWS = 40


def _coverage_rows(entries: list[CoverageEntry]) -> tuple[list[CoverageEntry], str]:
    """The entries to print (at most :data:`MAX_COVERAGE_ROWS`, problems first, then in their
    order) and the summary of the others ("" when all are printed)."""
    if len(entries) <= MAX_COVERAGE_ROWS:
        return entries, ""
    order = sorted(range(len(entries)), key=lambda i: (entries[i].status == "present", not entries[i].unrecognised, i))
    shown = sorted(order[:MAX_COVERAGE_ROWS])
    left = [entries[i] for i in order[MAX_COVERAGE_ROWS:]]
    by_status: dict[str, list[CoverageEntry]] = {}
    for entry in left:
        by_status.setdefault(entry.status, []).append(entry)
    parts = [f"{len(group):,} {status} ({sum(e.records for e in group):,} records, "
             f"{sum(e.events for e in group):,} events)" for status, group in sorted(by_status.items())]
    return [entries[i] for i in shown], f"... {len(left):,} more sources: " + ", ".join(parts)


def _coverage(att: Attribution) -> Any:
    if not att.coverage:
        return Text("Coverage: no sources reported", style="bold yellow")
    table = Table(title="Coverage", title_justify="left", title_style="bold",
                  box=box.SIMPLE_HEAD)
    table.add_column("source")
    table.add_column("status")
    table.add_column("records", justify="right")
    table.add_column("unparsed", justify="right")
    table.add_column("events", justify="right")
    table.add_column("unknown", justify="right")
    table.add_column("detail")
    shown, rest = _coverage_rows(list(att.coverage))
    for entry in shown:
        style = _COVERAGE_STYLE.get(entry.status, "")
        row_style = style if entry.status != "present" else None
        _row(table, entry.source, Text(entry.status, style=style), str(entry.records),
                      str(entry.unparsed), str(entry.events), str(entry.unrecognised),
                      entry.detail, style=row_style)
    if rest:
        table.caption, table.caption_justify = rest, "left"
    return table


def _unrecognised(att: Attribution) -> Any:
    """The error lines no rule knows, as templates, or None when there are none."""
    if not att.unrecognised:
        return None
    lines = sum(t.count for t in att.unrecognised)
    head = Text(f"{lines} error line{'s' if lines != 1 else ''} no rule knows, "
                f"{len(att.unrecognised)} template{'s' if len(att.unrecognised) != 1 else ''}"
                " (faultstream rules suggest BUNDLE turns them into rule skeletons):",
                style="bold yellow")
    table = Table(box=box.SIMPLE_HEAD, show_header=True)
    table.add_column("lines", justify="right")
    table.add_column("severity")
    table.add_column("hosts")
    table.add_column("template")
    for t in att.unrecognised:
        hosts = ", ".join(t.hosts[:3]) + (f" +{len(t.hosts) - 3}" if len(t.hosts) > 3 else "")
        _row(table, str(t.count), t.severity, hosts,
             Text(_safe(t.template) + ("  <- near the cause" if t.near_cause else "")),
             style="yellow" if t.near_cause else None)
    return Group(head, table)


def _reasoning(att: Attribution) -> Any:
    """The reasoning chain and the unexplained symptoms, or None when the verdict has neither."""
    if not att.reasoning and not att.unexplained:
        return None
    parts: list[Any] = [Text("Reasoning", style="bold")]
    for i, sentence in enumerate(att.reasoning, 1):
        parts.append(Text(f"{i}. {_safe(sentence)}"))
    if att.unexplained:
        table = Table(title="Left unexplained", title_justify="left", title_style="bold yellow",
                      box=box.SIMPLE_HEAD)
        table.add_column("type")
        table.add_column("events", justify="right")
        table.add_column("hosts")
        table.add_column("ranks")
        table.add_column("first (UTC)", no_wrap=True)
        for u in att.unexplained:
            _row(table, u.type, str(u.count), ", ".join(u.hosts), format_ranks(u.ranks), format_ns(u.first_at))
        parts.append(table)
    return Group(*parts)


def _select_timeline(items: Sequence[EvidenceItem], max_rows: int) -> list[EvidenceItem]:
    """The rows to show: all if they fit, else causes, then the earliest symptoms (at least
    half of the rows left), then the earliest of the rest; returned in time order."""
    ordered = sorted(range(len(items)), key=lambda i: (items[i].at, i))
    if len(items) <= max_rows:
        return [items[i] for i in ordered]
    chosen: list[int] = [i for i in ordered if items[i].role == "cause"][:max_rows]
    budget = max_rows - len(chosen)
    symptoms = [i for i in ordered if items[i].role == "symptom"]
    chosen += symptoms[: max(budget // 2, budget - sum(items[i].role == "context" for i in ordered))]
    taken = set(chosen)
    for i in ordered:
        if len(chosen) >= max_rows:
            break
        if i not in taken:
            chosen.append(i)
            taken.add(i)
    return [items[i] for i in sorted(chosen, key=lambda i: (items[i].at, i))]


def _timeline(att: Attribution, max_timeline: int) -> Any:
    items = att.evidence
    if not items:
        return Text("Evidence: none", style="bold yellow")
    shown = _select_timeline(items, max(1, max_timeline))
    table = Table(title=f"Evidence timeline ({len(items)} events, UTC)", title_justify="left",
                  title_style="bold", box=box.SIMPLE_HEAD)
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("role")
    table.add_column("type")
    table.add_column("host")
    table.add_column("rank", justify="right")
    table.add_column("summary")
    for item in shown:
        style = _ROLE_STYLE.get(item.role, "")
        _row(table, format_ns(item.at), Text(item.role, style=style), item.type, item.host,
                      "" if item.rank is None else str(item.rank), item.summary,
                      style="bold" if item.role == "cause" else None)
    hidden = len(items) - len(shown)
    if not hidden:
        return table
    shown_ids = {id(i) for i in shown}
    counts: dict[str, int] = {}
    for item in items:
        if id(item) not in shown_ids:
            counts[item.role] = counts.get(item.role, 0) + 1
    detail = ", ".join(f"{n} {role}" for role, n in sorted(counts.items()))
    return Group(table, Text(f"... {hidden} more ({detail})", style="dim"))


def render_attribution(att: Attribution, console: Console, *, max_timeline: int = 40) -> None:
    """Print ``att`` for a person on ``console`` (see the module docstring for the layout).
    ``max_timeline`` caps the evidence rows (>= 1)."""
    console.print(_header(att))
    console.print(_culprits(att))
    console.print(_symptoms(att))
    if att.alternatives:
        console.print(_alternatives(att))
    console.print(_coverage(att))
    unknown = _unrecognised(att)
    if unknown is not None:
        console.print(unknown)
    reasoning = _reasoning(att)
    if reasoning is not None:
        console.print(reasoning)
    console.print(_timeline(att, max_timeline))


def render_score_table(rows: Iterable["ScoreRow"], console: Console) -> None:
    """Print the score table of :class:`streams.replay.ScoreRow` rows: bundle, expected, got,
    HIT/MISS (and the misses, joined with ``; ``, when any row has one), then
    ``N/M hit, K miss``."""
    score_rows = list(rows)
    hits = sum(r.hit for r in score_rows)
    table = Table(title="faultstream score", title_justify="left", title_style="bold",
                  box=box.SIMPLE_HEAD)
    table.add_column("bundle")
    table.add_column("expected")
    table.add_column("got")
    table.add_column("result")
    with_detail = any(r.misses for r in score_rows)
    if with_detail:
        table.add_column("detail")
    for r in score_rows:
        cells: list[Any] = [r.bundle, r.expected, r.got,
                            Text("HIT", style="bold green") if r.hit else Text("MISS", style="bold red")]
        if with_detail:
            cells.append("; ".join(r.misses))
        _row(table, *cells)
    console.print(table)
    misses = len(score_rows) - hits
    style = "bold green" if misses == 0 and score_rows else "bold red"
    console.print(Text(f"{hits}/{len(score_rows)} hit, {misses} miss", style=style))


def render_calibration(rows: Iterable["CalibrationRow"], console: Console) -> None:
    """Print the calibration table of :class:`streams.replay.CalibrationRow` rows: quality,
    verdicts, right, hit rate, target (``-`` where the level promises none) and whether it is
    met."""
    table = Table(title="calibration (right = every check but quality passes)", title_justify="left",
                  title_style="bold", box=box.SIMPLE_HEAD)
    for name in ("quality", "verdicts", "right", "hit rate", "target", "met"):
        table.add_column(name, justify="left" if name == "quality" else "right")
    for r in rows:
        rate = "-" if r.rate is None else f"{r.rate:.1%}"
        target = "-" if r.target is None else f">= {r.target:.0%}"
        met = Text("yes", style="green") if r.met else Text("NO", style="bold red")
        _row(table, r.quality, str(r.verdicts), str(r.right), rate, target, met)
    console.print(table)
