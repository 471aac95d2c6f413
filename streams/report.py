"""``faultstream replay BUNDLE --html report.html``: one self-contained HTML file of a replay's
verdicts, to attach to a ticket or a post-mortem.

:func:`render_report` renders the explorer's incident page (``streams/ui/templates/
_incident.html``, the same template the server uses) for every verdict of the replay -- the
bundle's workload verdict first, then the other workload verdicts, then each fabric fault's
port and incident verdicts -- with the stylesheet and script inlined and the timeline as
inline SVG. The file references nothing outside itself: no stylesheet, script, font or image
URL, and a Content-Security-Policy (``default-src 'none'``, the inline style and script
allowed by their SHA-256 hashes only) keeps a browser from fetching anything while it is
open. Links between the verdicts of the file are anchors; node and fabric pages, which need the
store, are plain text. Evidence log lines are escaped like every other text.
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING

import streams.ui.views as views
from streams.ui.render import ReportLinks, asset, csp_hash, render

if TYPE_CHECKING:
    from streams.replay import ReplayResult

__all__ = ["render_report"]


def _version() -> str:
    try:
        return metadata.version("faultstream")
    except metadata.PackageNotFoundError:
        return "dev"


def render_report(result: ReplayResult) -> str:
    """The HTML report of ``result`` (a :class:`streams.replay.ReplayResult`) as one string:
    every verdict of ``result.attributions`` (``result.attribution`` alone when that list is
    empty) with its events and the observations of its evidence. Pure: reads nothing but the
    packaged templates and assets. Raises ``jinja2.TemplateError`` only for a template bug."""
    verdicts = list(result.attributions) or [result.attribution]
    events = {e.event_id: e for e in result.events}
    observations = {o.observation_id: o for o in result.observations}
    ids = {a.attribution_id for a in verdicts}
    links = ReportLinks(ids)
    by_id = {a.attribution_id: a for a in verdicts}
    page_views = [views.incident_view(a, events, observations, revisions=[a],
                                      members=[by_id[m] for m in a.members if m in by_id])
                  for a in verdicts]
    csp = ("default-src 'none'; img-src data:; "
           f"style-src {csp_hash(asset('ui.css'))}; script-src {csp_hash(asset('ui.js'))}; "
           "form-action 'none'; base-uri 'none'")
    name = result.bundle.name if str(result.bundle) not in ("", ".") else result.attribution.scope.id
    return render("report.html", {
        "links": links, "auth": None, "page": "report", "flashes": [], "version": _version(), "csp": csp,
        "in_report": True, "report_title": name, "views": page_views, "lines_read": f"{result.lines_read:,}",
        "event_count": f"{len(result.events):,}",
    })
