"""Remediation targets come from facts, never from text.

A verdict names culprit hosts and ports as its evidence named them -- and evidence is log text:
a line ``<ts> ALL kernel: NVRM: Xid (PCI:0000:9c:00): 79, ...`` makes ``ALL`` a "host". A name
may become the target of a disruptive action only when it is

1. a **valid node name** (:func:`node_name_problem`): an RFC 1123-style host name, the
   common ground of Slurm ``NodeName`` and Kubernetes node names -- dot-separated labels of
   ASCII letters, digits, ``-`` and ``_``, each label 1-63 characters starting and ending with
   a letter or digit, 253 characters at most; never Slurm's reserved ``ALL`` (any case), never
   a hostlist expression (``node[01-99]``), a list (``a,b``), spaces, ``=`` or shell
   metacharacters (``a;b``, ``$(x)``); and
2. a **known node** (:class:`KnownNodes`) of the verdict's cluster: a node of the allocation of
   a workload the verdict is about (the scheduler's record of the job: ``WorkloadSpec.nodes``),
   a host of the cluster's topology (links, hosts, failure domains), or a node of the
   deployment's fleet list.

A port target (``switch/port``) must be a port the topology cables to a host. Anything else is
kept as evidence: the engine proposes a ``notify`` for a person instead (its
``target_known`` guard says which names were refused and why) and never puts the name in a
target.

**A disruptive target needs corroboration** (:class:`Corroboration`): a host a drain, reboot,
GPU reset (any action of :data:`~correlators.remediation.policy.DISRUPTIVE`) takes out must
be a host of the verdict's deciding evidence -- an evidence item of role ``cause``, whose host
is where its record was collected (:mod:`correlators.identity`: the observation's host; the
host a telemetry sample, a counter row or the scheduler is about; a declared aggregator's host
for a node of the allocation). A port must be on a switch, or cabled to a host, that the
deciding evidence came from. A known node whose only tie to the verdict is another host's
text (a line on ``node-a01`` naming ``node-a07``), or a culprit a detector inferred from
what did *not* happen (the stalled rank), is not corroborated: its disruptive actions are
downgraded to one ``notify`` of those hosts, its ``target_corroborated`` guard saying why.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from schemas.records import Attribution

__all__ = [
    "MAX_NAME",
    "RESERVED",
    "Corroboration",
    "KnownNodes",
    "node_name_problem",
    "valid_node_name",
    "port_problem",
    "shown",
]

#: Longest node name accepted (RFC 1123 host name limit), characters.
MAX_NAME = 253
#: Names with a meaning of their own to a scheduler (Slurm: ``scontrol reboot ALL``), lower case.
RESERVED = frozenset({"all"})

_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?$")
_PORT_PART = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._:-]{0,62}[A-Za-z0-9])?$")


def shown(name: object, limit: int = 64) -> str:
    """``name`` as a person may safely read it in a reason or a log: ``repr`` (control
    characters and quotes escaped), cut to ``limit`` characters."""
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def node_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid node name (see the module docstring), or None if it is."""
    if not isinstance(name, str):
        return f"not a string ({type(name).__name__})"
    if not name:
        return "empty"
    if len(name) > MAX_NAME:
        return f"{len(name)} characters (at most {MAX_NAME})"
    if name.lower() in RESERVED:
        return f"{name!r} is a reserved scheduler keyword"
    for label in name.split("."):
        if not _LABEL.match(label):
            bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "._-"))})
            if bad:
                return "characters not allowed in a node name: " + " ".join(repr(c) for c in bad[:8])
            return "not a host name (dot-separated labels of letters, digits, '-' and '_', 1-63 characters " \
                   "each, starting and ending with a letter or digit)"
    return None


def valid_node_name(name: object) -> bool:
    """True when ``name`` is a valid node name (:func:`node_name_problem` finds nothing)."""
    return node_name_problem(name) is None


def port_problem(port: object) -> str | None:
    """Why ``port`` is not a valid port id (``switch/port`` or ``host/hca/port``, each part a
    name of letters, digits, ``.``, ``_``, ``-``, ``:``), or None."""
    if not isinstance(port, str) or not port:
        return "empty"
    if len(port) > MAX_NAME:
        return f"{len(port)} characters (at most {MAX_NAME})"
    parts = port.split("/")
    if len(parts) not in (2, 3) or not all(_PORT_PART.match(p) for p in parts):
        return "not a port id (switch/port or host/hca/port)"
    return None


@dataclass
class KnownNodes:
    """The nodes a verdict's actions may target, with where each one is known from.

    ``sources``: node -> the facts naming it (``allocation of job-7``, ``topology``,
    ``fleet``), only valid node names (a fact source that lists an invalid name does not make
    it a target either)."""

    sources: dict[str, list[str]] = field(default_factory=dict)

    def add(self, nodes: Iterable[str], source: str) -> None:
        """Add ``nodes`` known from ``source``; invalid names are skipped."""
        for node in nodes:
            if valid_node_name(node):
                self.sources.setdefault(node, [])
                if source not in self.sources[node]:
                    self.sources[node].append(source)

    def __contains__(self, node: object) -> bool:
        return isinstance(node, str) and node in self.sources

    def describe(self) -> str:
        """The fact sources consulted, for a refusal's detail (``allocation of job-7 (2 nodes),
        topology (8 nodes)``; ``no allocation, topology or fleet known`` when empty)."""
        counts: dict[str, int] = {}
        for node_sources in self.sources.values():
            for source in node_sources:
                counts[source] = counts.get(source, 0) + 1
        if not counts:
            return "no allocation, topology or fleet known"
        return ", ".join(f"{s} ({n} node{'s' if n != 1 else ''})" for s, n in sorted(counts.items()))

    def problem(self, name: object) -> str | None:
        """Why ``name`` may not be a target (invalid, or not a known node), or None."""
        invalid = node_name_problem(name)
        if invalid:
            return f"{shown(name)} is not a valid node name: {invalid}"
        if name not in self:
            return f"{shown(name)} is not a node of the workload's allocation, the topology or the fleet " \
                   f"(known: {self.describe()})"
        return None


@dataclass(frozen=True)
class Corroboration:
    """The hosts a verdict's deciding evidence was collected on (see the module docstring).

    ``hosts``: the hosts of the verdict's evidence items of role ``cause`` (valid node names
    or not: a name that is not one is never a target anyway)."""

    hosts: frozenset[str] = frozenset()

    @classmethod
    def of(cls, att: "Attribution") -> "Corroboration":
        """The corroboration of ``att``: the hosts of its ``cause`` evidence items."""
        return cls(frozenset(e.host for e in att.evidence if e.role == "cause"))

    def _where(self) -> str:
        if not self.hosts:
            return "the verdict holds no deciding (cause) evidence"
        names = sorted(self.hosts)
        more = f" and {len(names) - 4} more" if len(names) > 4 else ""
        return "its deciding evidence was collected on " + ", ".join(shown(h) for h in names[:4]) + more

    def problem(self, host: str) -> str | None:
        """Why ``host`` may not be taken out by a disruptive action of this verdict, or None
        when the deciding evidence was collected on it."""
        if host in self.hosts:
            return None
        return f"{shown(host)} is not corroborated: {self._where()}, not on it"

    def port_problem(self, port: str, cabled: Iterable[str]) -> str | None:
        """Why a disruptive action on ``port`` (``switch/port``) is not corroborated, or None
        when the deciding evidence came from its switch or from a host ``cabled`` to it."""
        switch = port.split("/", 1)[0]
        if switch in self.hosts or any(h in self.hosts for h in cabled):
            return None
        return f"port {shown(port)} is not corroborated: {self._where()}, not on its switch or a host cabled to it"
