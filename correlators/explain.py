"""The verdict's reasoning chain and its unexplained symptoms.

Pure helpers of ``correlators.attribution.decide``: every sentence is built from sorted
events and fixed-order data, so the same events give the same sentences through every driver.
Times are shown ``HH:MM:SS`` UTC.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from correlators.timetext import clock
from schemas.records import CoverageEntry, Event, UnexplainedSymptoms

#: Types listed per sentence at most (the most frequent first).
MAX_TYPES = 4


def format_ranks(ranks: Iterable[int]) -> str:
    """Sorted distinct ranks as ranges: ``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"``; ``""`` for
    none."""
    values = sorted(set(ranks))
    parts, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(parts)


def unexplained_groups(pool: Sequence[Event], own_ids: set[str], explained_ids: set[str]) -> list[UnexplainedSymptoms]:
    """The symptoms of ``pool`` that are neither the cause's own events nor explained by it,
    grouped by type (sorted by count descending, then type)."""
    by_type: dict[str, list[Event]] = {}
    for event in pool:
        if event.event_id in own_ids or event.event_id in explained_ids:
            continue
        by_type.setdefault(event.type, []).append(event)
    out = [
        UnexplainedSymptoms(
            type=typ,
            count=len(evs),
            hosts=sorted({e.host for e in evs if e.host and not e.host.startswith("_")}),
            ranks=sorted({e.rank for e in evs if e.rank is not None}),
            first_at=min(e.effective_at for e in evs),
        )
        for typ, evs in by_type.items()
    ]
    return sorted(out, key=lambda u: (-u.count, u.type))


def _type_counts(events: Sequence[Event]) -> str:
    by_type: dict[str, list[Event]] = {}
    for event in events:
        by_type.setdefault(event.type, []).append(event)
    parts = []
    for typ, evs in sorted(by_type.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:MAX_TYPES]:
        hosts = sorted({e.host for e in evs if not e.host.startswith("_")})
        text = f"{len(evs)} {typ}"
        if len(hosts) == 1:
            text += f" on {hosts[0]}"
        elif hosts:
            text += f" on {len(hosts)} hosts"
        ranks = [e.rank for e in evs if e.rank is not None]
        if ranks:
            text += f" (ranks {format_ranks(ranks)})"
        dated = [e for e in evs if e.began_at is not None]
        if dated:
            text += f", {len(dated)} back-dated to {clock(min(e.began_at for e in dated))}"
        parts.append(text)
    rest = len(by_type) - MAX_TYPES
    if rest > 0:
        parts.append(f"{rest} more type(s)")
    return "; ".join(parts)


def explained_sentence(symptoms: Sequence[Event]) -> str:
    if not symptoms:
        return "it explains no other event: no symptom in the window fits it"
    return f"{len(symptoms)} symptom(s) explained: {_type_counts(symptoms)}"


def unexplained_sentence(groups: Sequence[UnexplainedSymptoms]) -> str | None:
    if not groups:
        return None
    total = sum(g.count for g in groups)
    parts = []
    for g in groups[:MAX_TYPES]:
        text = f"{g.count} {g.type}"
        if g.hosts:
            text += " on " + (g.hosts[0] if len(g.hosts) == 1 else f"{len(g.hosts)} hosts")
        text += f" from {clock(g.first_at)}"
        parts.append(text)
    return f"{total} symptom(s) left unexplained by it: " + "; ".join(parts)


def coverage_gaps(coverage: Sequence[CoverageEntry]) -> list[str]:
    """Sources that are not complete: ``host:node-a02 empty`` ..., sorted by source."""
    return [f"{c.source} {c.status}" for c in sorted(coverage, key=lambda c: c.source)
            if c.status in ("failed", "empty", "lagging")]


def cause_sentence(code: str, domain: str, text: str, primary: Event | None, at: int, hosts: Sequence[str],
                   summary: str, dated: bool) -> str:
    where = ", ".join(hosts) if hosts else "?"
    if primary is not None:
        head = f"{summary} on {primary.host} at {clock(primary.at)}"
    else:
        head = f"a pattern over many events from {clock(at)} on {where}"
    tail = "" if dated else " (no timestamp of its own: its time is inherited or the transport's)"
    return f"{head}{tail} -> {code} ({domain}): {text}"
