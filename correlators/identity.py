"""Identity comes from the source: which host a record is about (pure: no I/O, no clock).

The host of a record is the host whose source produced it: a bundle's ``logs/<host>/`` folder,
the node a connector runs on (``connect files --host``), the pod's node. A host name inside
the text (a syslog host field, NCCL's ``host:pid:tid [dev]`` prefix, a rule's ``to: host``
field, a hook's ``host :`` line) is evidence, never the record's host:

* from an ordinary source the event stays on the observation's host, and the name the text
  gave is kept as ``attributes.line_host`` when it is another host (:func:`same_host` is
  false) -- the verdict's coverage then reports the disagreement (:func:`disagreements`);
* from a **declared aggregator** (:func:`is_aggregator`: the scheduler's own records --
  host ``_scheduler``, kind ``scheduler_event`` --, a bundle's ``logs/_aggregated/`` files,
  ``connect files --aggregator``) the text's host is taken as the event's host and the
  observation's host is kept as ``attributes.collected_on``. It stays the event's host only
  when it names a node known to the workload's allocation (:func:`settle`, run when the event
  is enriched with the allocation: :meth:`correlators.enrich.Allocation.enrich`); otherwise
  the event goes back to the host that collected it (``collected_on``), the name moves to
  ``line_host`` and the coverage reports it.

So a line collected on ``node-a01`` whose text says ``ALL kernel: NVRM: Xid ... 79`` or
``node-a07 kernel: ...`` is an event of ``node-a01``; a remediation target must moreover be
corroborated by the verdict's deciding evidence (:mod:`correlators.remediation.targets`).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from schemas.records import CoverageEntry, Event

__all__ = [
    "AGGREGATED_HOST",
    "AGGREGATOR_HOSTS",
    "COLLECTED_ON",
    "LINE_HOST",
    "MAX_LINE_HOST",
    "OUTSIDE_ALLOCATION",
    "SCHEDULER_HOST",
    "disagreements",
    "event_host",
    "is_aggregator",
    "known_name",
    "same_host",
    "settle",
]

#: The host of scheduler-side records (BUNDLE.md ``logs/_scheduler/``; connectors.bundle).
SCHEDULER_HOST = "_scheduler"
#: The host of a declared aggregator's records (BUNDLE.md ``logs/_aggregated/``: a central
#: syslog file, a log store's export; ``connect files --aggregator`` without ``--host``).
AGGREGATED_HOST = "_aggregated"
#: Observation hosts whose sources are declared aggregators.
AGGREGATOR_HOSTS = frozenset({SCHEDULER_HOST, AGGREGATED_HOST})
#: Event attribute: the host name the record's text gave, when it is not the event's host.
LINE_HOST = "line_host"
#: Event attribute: the host that collected an aggregator's record (its observation's host),
#: when the event's host is the one the text named.
COLLECTED_ON = "collected_on"
#: Event attribute (``True``): an aggregator's record named a host that is not a node of the
#: allocation -- a line about another node, which causal rules may keep from being a cause.
OUTSIDE_ALLOCATION = "outside_allocation"
#: Longest in-line host name kept as evidence (characters; longer ones are cut).
MAX_LINE_HOST = 253
#: The coverage source prefix of the disagreement reports (``host-name:<host>``).
COVERAGE_PREFIX = "host-name:"


def is_aggregator(host: str, kind: str, attributes: Mapping[str, Any] | None) -> bool:
    """True when an observation of ``host`` and ``kind`` with ``attributes`` comes from a
    declared aggregator, whose in-line host names may be taken as the record's host: the
    scheduler (host ``_scheduler`` or kind ``scheduler_event``), a bundle's
    ``logs/_aggregated/`` (host ``_aggregated``), or a connector told so
    (``attributes.aggregator`` is ``True``)."""
    return (host in AGGREGATOR_HOSTS or kind == "scheduler_event"
            or (attributes is not None and attributes.get("aggregator") is True))


def same_host(a: str, b: str) -> bool:
    """True when host names ``a`` and ``b`` name the same host: equal ignoring case, or one is
    the other's short name (``node-a01`` and ``node-a01.cluster.local``)."""
    if a == b:
        return True
    a, b = a.lower(), b.lower()
    return a == b or a.split(".", 1)[0] == b.split(".", 1)[0] and ("." in a) != ("." in b)


def event_host(obs_host: str, line_host: str | None, aggregator: bool,
               attributes: dict[str, Any]) -> str:
    """The host of an event extracted from an observation of ``obs_host`` whose text named
    ``line_host`` (None: it named none); writes the evidence attribute into ``attributes``
    (``line_host`` from an ordinary source, ``collected_on`` from an aggregator; nothing when
    both name the same host). ``aggregator``: :func:`is_aggregator` of the observation."""
    if not line_host or type(line_host) is not str or same_host(line_host, obs_host):
        return obs_host
    line_host = line_host[:MAX_LINE_HOST]
    if aggregator:
        attributes[COLLECTED_ON] = obs_host
        return line_host
    attributes[LINE_HOST] = line_host
    return obs_host


def known_name(name: str, nodes: Iterable[str]) -> str | None:
    """The node of ``nodes`` that ``name`` names (exactly, else the one node
    :func:`same_host` matches), or None."""
    nodes = list(nodes)
    if name in nodes:
        return name
    hits = [n for n in nodes if same_host(name, n)]
    return hits[0] if len(hits) == 1 else None


def settle(event: Event, nodes: Iterable[str]) -> Event:
    """``event`` with its host settled against the known ``nodes`` (the allocation's): an
    aggregator's event (``attributes.collected_on``) whose host is not a known node goes back
    to the host that collected it, the name its text gave kept as ``attributes.line_host``;
    one that names a known node keeps it (as that node's exact name). Other events are
    returned as they are. A changed event is re-identified (:meth:`Event.with_id`)."""
    attrs = event.attributes
    collected = attrs.get(COLLECTED_ON)
    if not isinstance(collected, str):
        return event
    node = known_name(event.host, nodes)
    if node == event.host:
        return event
    if node is not None:
        return event.model_copy(update={"host": node}).with_id()
    rest = {k: v for k, v in attrs.items() if k != COLLECTED_ON}
    rest[LINE_HOST] = event.host
    rest[OUTSIDE_ALLOCATION] = True
    return event.model_copy(update={"host": collected, "attributes": rest}).with_id()


def disagreements(events: Iterable[Event]) -> list[CoverageEntry]:
    """One coverage entry per host whose events' text named another host that was not taken
    (``attributes.line_host``): source ``host-name:<host>``, status ``present`` (a warning, not
    a gap), ``records`` = how many events, ``detail`` naming up to five of the names. Sorted by
    source."""
    by_host: dict[str, dict[str, int]] = {}
    for e in events:
        name = e.attributes.get(LINE_HOST)
        if isinstance(name, str):
            names = by_host.setdefault(e.host, {})
            names[name] = names.get(name, 0) + 1
    out = []
    for host in sorted(by_host):
        names = by_host[host]
        shown = ", ".join(repr(n)[:66] for n in sorted(names)[:5]) + (
            f" and {len(names) - 5} more" if len(names) > 5 else "")
        out.append(CoverageEntry(
            source=f"{COVERAGE_PREFIX}{host}", status="present", records=sum(names.values()),
            detail=(f"{sum(names.values())} record(s) collected on {host} name another host in their text "
                    f"({shown}): kept on {host}; a host named in a line is taken only from a declared "
                    "aggregator and only for a node of the allocation"),
        ))
    return out
