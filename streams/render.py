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
   then the unrecognised error lines as templates ("4 error lines no rule knows, 2
   templates: ..."), those near the cause marked (the one-screen summary gives their count
   in one line);
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

__all__ = ["render_attribution", "render_summary", "verdict_line", "render_score_table", "render_calibration", "format_ns", "format_ranks"]

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


def _header(att: Attribution, *, compact: bool = False) -> Panel:
    """The verdict panel; ``compact`` joins outcome and domain, and quality, confidence and
    revision, on one row each, adds the culprits (:func:`_culprit_rows`) and leaves out the
    rule and engine versions."""
    style = _QUALITY_STYLE.get(att.quality, "white")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    scope = f"{att.scope.kind} {att.scope.id}"
    if att.scope.cluster:
        scope += f" (cluster {att.scope.cluster})"
    revision = f"{att.revision} ({'provisional: the window is still open' if att.status == 'provisional' else att.status})"
    _row(grid, "Scope", scope)
    if compact:
        _row(grid, "Outcome", f"{att.outcome}, domain {att.domain}")
    else:
        _row(grid, "Outcome", att.outcome)
        _row(grid, "Domain", att.domain)
    if att.root_cause is not None:
        _row(grid, "Root cause", Text.assemble((att.root_cause.code, "bold"), " -- ", _safe(att.root_cause.text)))
    else:
        _row(grid, "Root cause", "none: withdrawn" + (f", superseded by {', '.join(att.superseded_by)}"
                                                      if att.superseded_by else ""))
    if compact:
        _row(grid, "Quality", Text.assemble((att.quality, f"bold {style}"),
                                            f", confidence {att.confidence:.2f}, revision {revision}"))
    else:
        _row(grid, "Quality", Text(att.quality, style=f"bold {style}"))
        _row(grid, "Confidence", f"{att.confidence:.2f}")
        _row(grid, "Revision", revision)
    _row(grid, "Window", f"{format_ns(att.window.start)} .. {format_ns(att.window.end)} UTC")
    if compact:
        for key, value in _culprit_rows(att) or [("Culprits", "none named")]:
            _row(grid, key, value)
    if att.cost is not None:
        _row(grid, "Cost", cost_line(att.cost))
    if att.incident_id:
        _row(grid, "Incident", att.incident_id)
    _row(grid, "Verdict id", att.attribution_id)  # what an incident's Members name
    if not compact:
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


def _culprit_rows(att: Attribution) -> list[tuple[str, str]]:
    """(label, value) of each culprit kind the verdict names: hosts, ranks, GPUs, ports, and
    for a fabric or incident verdict the workloads hit and its member verdicts."""
    c = att.culprits
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
    return [(k, v) for k, v in rows if v]


def _culprits(att: Attribution) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    shown = _culprit_rows(att)
    if not shown:
        body: Any = Text("none named", style="dim")
    else:
        for key, value in shown:
            _row(grid, key, value)
        body = grid
    return Panel(body, title="Culprits", title_align="left", box=box.ROUNDED)


def _symptoms(att: Attribution, top: int | None = None) -> Any:
    """The symptom events by type, most frequent first; ``top``: at most that many types, the
    rest summed on one line."""
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
    table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                  show_edge=top is None)
    table.add_column("type", overflow="fold")
    table.add_column("events", justify="right")
    table.add_column("hosts", justify="right")
    table.add_column("ranks", overflow="fold")
    groups = sorted(by_type.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    shown = groups if top is None or len(groups) <= top else groups[:top]
    for typ, group in shown:
        group_ranks = [e.rank for e in group if e.rank is not None]
        _row(table, typ, str(len(group)), str(len({e.host for e in group})),
                      format_ranks(group_ranks) or "-")
    notes = []
    if len(shown) < len(groups):
        rest = groups[len(shown):]
        events = sum(len(g) for _, g in rest)
        notes.append(Text(f"... {len(rest)} more type{'s' if len(rest) != 1 else ''} "
                          f"({events} event{'s' if events != 1 else ''})", style="dim"))
    missing = len(set(att.symptoms) - in_trail)
    if missing:
        notes.append(Text(f"{missing} symptom events not in the evidence trail", style="dim"))
    return Group(table, *notes) if notes else table


def _alternatives_brief(att: Attribution, top: int) -> Group:
    """The ``top`` best alternatives, one wrapped line each (code, domain, score, where, why),
    and the count of the rest."""
    ranked = sorted(att.alternatives, key=lambda a: (-a.score, a.code))
    lines: list[Any] = [Text("Alternatives", style="bold")]
    for alt in ranked[:top]:
        where = ", ".join(alt.hosts) + (f" rank {format_ranks(alt.ranks)}" if alt.ranks else "")
        lines.append(Text.assemble("- ", (alt.code, "bold"), f" ({alt.domain}, score {alt.score:.2f})",
                                   f" on {where}" if where else "", ": ", _safe(alt.text)))
    if len(ranked) > top:
        lines.append(Text(f"... {len(ranked) - top} more", style="dim"))
    return Group(*lines)


def _alternatives(att: Attribution) -> Table:
    """Other causes that fit, best first, as a table."""
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


def _coverage(att: Attribution, narrow: bool = False) -> Any:
    """The coverage table (:func:`_coverage_rows` picks the rows). ``narrow``: the counts
    share one column and the detail goes under the source, so a file name keeps its width."""
    if not att.coverage:
        return Text("Coverage: no sources reported", style="bold yellow")
    table = Table(title="Coverage", title_justify="left", title_style="bold",
                  box=box.SIMPLE_HEAD)
    # a file name keeps its width (folded only when it alone is wider than the screen)
    table.add_column("source", no_wrap=True, overflow="fold")
    table.add_column("status", no_wrap=True)
    if narrow:
        table.add_column("records, events", overflow="fold")
    else:
        for name in ("records", "unparsed", "events", "unknown"):
            table.add_column(name, justify="right")
        table.add_column("detail", overflow="fold")
    shown, rest = _coverage_rows(list(att.coverage))
    for entry in shown:
        style = _COVERAGE_STYLE.get(entry.status, "")
        row_style = style if entry.status != "present" else None
        status = Text(entry.status, style=style)
        if narrow:
            counts = f"{entry.records:,} records, {entry.events:,} events" + "".join(
                f", {n:,} {what}" for n, what in ((entry.unparsed, "unparsed"), (entry.unrecognised, "unknown")) if n)
            source = Text(_safe(entry.source)) + (Text("\n" + _safe(entry.detail), style="dim") if entry.detail else Text(""))
            _row(table, source, status, counts, style=row_style)
        else:
            _row(table, entry.source, status, str(entry.records), str(entry.unparsed), str(entry.events),
                 str(entry.unrecognised), entry.detail, style=row_style)
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
    table.add_column("template", overflow="fold")
    for t in att.unrecognised:
        hosts = ", ".join(t.hosts[:3]) + (f" +{len(t.hosts) - 3}" if len(t.hosts) > 3 else "")
        _row(table, str(t.count), t.severity, hosts,
             Text(_safe(t.template) + ("  <- near the cause" if t.near_cause else "")),
             style="yellow" if t.near_cause else None)
    return Group(head, table)


def _reasoning(att: Attribution, top: int | None = None) -> Any:
    """The reasoning chain and the unexplained symptoms (``top``: at most that many types),
    or None when the verdict has neither."""
    if not att.reasoning and not att.unexplained:
        return None
    parts: list[Any] = [Text("Reasoning", style="bold")]
    for i, sentence in enumerate(att.reasoning, 1):
        parts.append(Text(f"{i}. {_safe(sentence)}"))
    if att.unexplained:
        table = Table(title="Left unexplained", title_justify="left", title_style="bold yellow",
                      box=box.SIMPLE_HEAD, show_edge=top is None)
        table.add_column("type", overflow="fold")
        table.add_column("events", justify="right")
        table.add_column("hosts", overflow="fold")
        table.add_column("ranks", overflow="fold")
        table.add_column("first (UTC)", no_wrap=True)
        for u in att.unexplained[:top]:
            _row(table, u.type, str(u.count), ", ".join(u.hosts), format_ranks(u.ranks), format_ns(u.first_at))
        if top is not None and len(att.unexplained) > top:
            table.caption, table.caption_justify = f"... {len(att.unexplained) - top} more types", "left"
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


def _fold(items: Sequence[EvidenceItem]) -> tuple[list[EvidenceItem], dict[int, int]]:
    """One row per distinct (time as shown, to the millisecond; role, type, host, rank,
    summary): events that read the same (one error printed on three lines, the same frame in
    eight stack dumps, a link-down reported by two daemons in the same millisecond) are one
    row. Returns the first item of each group, in trail order, and its group size by ``id()``."""
    first: dict[tuple, EvidenceItem] = {}
    size: dict[int, int] = {}
    for item in items:
        head = first.setdefault((format_ns(item.at), item.role, item.type, item.host, item.rank, item.summary), item)
        size[id(head)] = size.get(id(head), 0) + 1
    return list(first.values()), size


def _timeline(att: Attribution, max_timeline: int | None, narrow: bool = False) -> Any:
    """The evidence rows in time order, identical rows folded (:func:`_fold`); at most
    ``max_timeline`` rows (None: all). ``narrow`` (a console under :data:`WIDE` columns): type,
    host and rank share one column with the summary below them."""
    items, size = _fold(att.evidence)
    if not items:
        return Text("Evidence: none", style="bold yellow")
    shown = _select_timeline(items, len(items) if max_timeline is None else max(1, max_timeline))
    table = Table(title=f"Evidence timeline ({len(att.evidence)} events, UTC)", title_justify="left",
                  title_style="bold", box=box.SIMPLE_HEAD)
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("role", no_wrap=True)
    if narrow:
        table.add_column("event", overflow="fold")
    else:
        table.add_column("type", overflow="fold")
        table.add_column("host", overflow="fold")
        table.add_column("rank", justify="right")
        table.add_column("summary", overflow="fold")
    for item in shown:
        style = _ROLE_STYLE.get(item.role, "")
        n = size[id(item)]
        rank = "" if item.rank is None else str(item.rank)
        summary = item.summary + (f" (x{n} events)" if n > 1 else "")
        if narrow:
            what = Text.assemble((_safe(item.type), "bold"), f" {_safe(item.host)}", f" rank {rank}" if rank else "",
                                 "\n", (_safe(summary), "dim" if item.role != "cause" else ""))
            _row(table, format_ns(item.at), Text(item.role, style=style), what)
        else:
            _row(table, format_ns(item.at), Text(item.role, style=style), item.type, item.host, rank, summary,
                 style="bold" if item.role == "cause" else None)
    shown_ids = {id(i) for i in shown}
    counts: dict[str, int] = {}
    for item in items:
        if id(item) not in shown_ids:
            counts[item.role] = counts.get(item.role, 0) + size[id(item)]
    hidden = sum(counts.values())
    if not hidden:
        return table
    detail = ", ".join(f"{n} {role}" for role, n in sorted(counts.items()))
    return Group(table, Text(f"... {hidden} more ({detail})", style="dim"))


def _coverage_line(att: Attribution) -> Text:
    """One line on the inputs: source count by status, the first sources that are not
    present named (``Coverage: 12 sources: 10 present, 1 failed, 1 empty (metrics/node-a01,
    fabric/leaf-02)``)."""
    if not att.coverage:
        return Text("Coverage: no sources reported", style="bold yellow")
    by_status: dict[str, int] = {}
    for entry in att.coverage:
        by_status[entry.status] = by_status.get(entry.status, 0) + 1
    n = len(att.coverage)
    if set(by_status) == {"present"}:
        return Text(f"Coverage: {n} source{'s' if n != 1 else ''}, all present", style="dim")
    counts = ", ".join(f"{k} {status}" for status, k in sorted(by_status.items(), key=lambda kv: kv[0] != "present"))
    names = [e.source for e in att.coverage if e.status != "present"]
    named = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
    return Text(f"Coverage: {n} sources: {counts} ({_safe(named)})", style="bold yellow")


#: Consoles narrower than this get the stacked timeline (:func:`_timeline`).
WIDE = 120

#: Rows of each section of :func:`render_summary`.
SUMMARY_ROWS = 5


def render_summary(att: Attribution, console: Console) -> None:
    """Print ``att`` to fit one screen (about 40 lines): the compact verdict panel with the
    culprits, the :data:`SUMMARY_ROWS` most frequent symptom types, the 3 best alternatives,
    one line on the error lines no rule knows, the reasoning, then one line on the coverage and
    what ``--verbose`` (:func:`render_attribution`) adds. Long names (files, hosts) wrap
    whole, never cut."""
    console.print(_header(att, compact=True))
    console.print(_symptoms(att, top=SUMMARY_ROWS))
    if att.alternatives:
        console.print(_alternatives_brief(att, top=3))
    if att.unrecognised:
        lines = sum(t.count for t in att.unrecognised)
        near = sum(t.count for t in att.unrecognised if t.near_cause)
        console.print(Text(f"{lines} error line{'s' if lines != 1 else ''} no rule knows"
                           + (f" ({near} near the cause)" if near else "")
                           + ": --verbose lists their templates", style="yellow"))
    reasoning = _reasoning(att, top=3)
    if reasoning is not None:
        console.print(reasoning)
    line = _coverage_line(att)
    line.append(f"; --verbose: the coverage table and the {len(att.evidence)}-event timeline", style="dim")
    console.print(line)


def verdict_line(att: Attribution) -> str:
    """One line per verdict revision, for following a topic: decision time (UTC, ms), scope,
    revision and status, quality and confidence, root cause, culprit hosts (and ranks, ports
    when named), ``superseded by`` for a withdrawn verdict. Control characters are made
    visible (:func:`_safe`). Example:
    ``2026-11-30 01:21:10.000 workload:job-1001 r1 final definitive 0.93 gpu.xid.79 hosts=node-a01 ranks=0``"""
    c = att.culprits
    parts = [format_ns(att.decided_at), f"{att.scope.kind}:{att.scope.id}", f"r{att.revision}", att.status,
             att.quality, f"{att.confidence:.2f}",
             att.root_cause.code if att.root_cause is not None else "withdrawn"]
    if c.hosts:
        parts.append("hosts=" + ",".join(c.hosts))
    if c.ranks:
        parts.append("ranks=" + format_ranks(c.ranks))
    if c.ports:
        parts.append("ports=" + ",".join(c.ports))
    if att.superseded_by:
        parts.append("superseded_by=" + ",".join(att.superseded_by))
    return _safe(" ".join(parts)).replace("\n", " ").replace("\t", " ")


def render_attribution(att: Attribution, console: Console, *, max_timeline: int | None = 40) -> None:
    """Print ``att`` for a person on ``console`` (see the module docstring for the layout).
    ``max_timeline`` caps the evidence rows (>= 1; None: every row)."""
    console.print(_header(att))
    console.print(_culprits(att))
    console.print(_symptoms(att))
    if att.alternatives:
        console.print(_alternatives(att))
    console.print(_coverage(att, narrow=console.width < WIDE))
    unknown = _unrecognised(att)
    if unknown is not None:
        console.print(unknown)
    reasoning = _reasoning(att)
    if reasoning is not None:
        console.print(reasoning)
    console.print(_timeline(att, max_timeline, narrow=console.width < WIDE))


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
