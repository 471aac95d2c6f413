"""Stack drift: each node's stack fingerprint from its version lines, and the ``config.drift``
events where a node's stack differs from a recipe baseline or from the other nodes (pure: no
I/O, no clock).

Inputs are ``stack.version`` events (``correlators/rules/stack.yaml``: NCCL's init line,
nvidia-smi, the NVRM load line, the kernel banner / ``uname -a``, ibstat / ibv_devinfo, the
Fabric Manager log). A fingerprint maps a host to ``{key: version}`` where the key is the
component (``nccl``, ``driver``, ``cuda``, ``kernel``, ``fabric_manager``), or
``hca_firmware/<device>`` for an HCA whose line named it (``hca_firmware`` when it did not).
When a host states a component several times the latest line wins (event time, then event id).

A :class:`Baseline` (built from an AICR recipe by :mod:`connectors.aicr`) holds version
constraints per component. :func:`drift` yields one ``config.drift`` per violated constraint
(``basis: recipe``) and, without a constraint for that key, one per host whose version differs
from every other node of the workload while those agree (``basis: peers``; at least two peers).

Version order (:func:`compare_versions`): :class:`packaging.version.Version` when both sides
parse (``570.124.06``, ``2.21.5``, ``28.39.1002``, ``v26.3.2``); otherwise both are compared as
tuples of their decimal runs, the shorter padded with zeros (``6.8.0-45-generic`` ->
``(6, 8, 0, 45)``, so it is ``>= 6.8`` and ``< 6.8.0-46-generic``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from packaging.version import InvalidVersion, Version

from schemas.records import Event

__all__ = [
    "COMPONENTS",
    "DRIFT",
    "MISMATCH_TYPES",
    "OPERATORS",
    "STACK_VERSION",
    "Baseline",
    "Constraint",
    "compare_versions",
    "drift",
    "drift_events",
    "fingerprint",
]

#: The event type of a version line, and of a drift.
STACK_VERSION = "stack.version"
DRIFT = "config.drift"
#: Components a fingerprint may hold (``stack.version`` attribute ``component``).
COMPONENTS = ("nccl", "driver", "cuda", "kernel", "hca_firmware", "fabric_manager")
#: Operators a constraint may use; ``""`` is AICR's exact string match (no operator).
OPERATORS = ("==", "!=", ">=", "<=", ">", "<", "")
#: Events that report a user-space / kernel-module driver mismatch, by type and attribute:
#: a driver drift on the same host names them (``mismatch: driver_library``).
MISMATCH_TYPES: dict[str, tuple[str, str]] = {
    "nvml.error": ("nvml_error", "NVML_ERROR_LIB_RM_VERSION_MISMATCH"),
    "gpu.init_failed": ("kind", "api_mismatch"),
    "cuda.error": ("error", "system_driver_mismatch"),
}
_RULE = "drift@1"


def _numeric(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1 as version ``a`` is older than, equal to or newer than ``b`` (see the module
    docstring for the order). Raises ``ValueError`` when either holds no digit."""
    try:
        va, vb = Version(a), Version(b)
        return (va > vb) - (va < vb)
    except InvalidVersion:
        pass
    na, nb = _numeric(a), _numeric(b)
    if not na or not nb:
        raise ValueError(f"not a version: {a if not na else b!r}")
    width = max(len(na), len(nb))
    na, nb = na + (0,) * (width - len(na)), nb + (0,) * (width - len(nb))
    return (na > nb) - (na < nb)


@dataclass(frozen=True)
class Constraint:
    """One pinned version: ``component`` (one of :data:`COMPONENTS`), ``op`` (one of
    :data:`OPERATORS`), ``version``; ``name`` is where the recipe stated it (the constraint name,
    e.g. ``GPU.smi.driver-version``, or ``componentRefs/<name>``)."""

    component: str
    op: str
    version: str
    name: str = ""

    def holds(self, found: str) -> bool:
        """Whether version ``found`` satisfies the constraint. An exact match (no operator)
        compares the strings; the operators compare versions (:func:`compare_versions`).
        A ``found`` that holds no digit fails every ordering operator."""
        if self.op == "":
            return found.strip() == self.version.strip()
        try:
            c = compare_versions(found, self.version)
        except ValueError:
            return self.op == "!="
        return {"==": c == 0, "!=": c != 0, ">=": c >= 0, "<=": c <= 0, ">": c > 0, "<": c < 0}[self.op]

    def __str__(self) -> str:
        return f"{self.op} {self.version}" if self.op else self.version


@dataclass(frozen=True)
class Baseline:
    """A recipe's version constraints. ``name``: the recipe (``metadata.name``); several
    constraints may bind one component (``>= 6.8`` and ``< 6.9``)."""

    name: str
    constraints: tuple[Constraint, ...] = ()

    def for_component(self, component: str) -> tuple[Constraint, ...]:
        """The constraints on ``component`` (``hca_firmware/<device>`` reads ``hca_firmware``)."""
        base = component.split("/", 1)[0]
        return tuple(c for c in self.constraints if c.component == base)

    @property
    def digest(self) -> str:
        """A short stable text of the constraints, for the ruleset version of verdicts."""
        import hashlib

        text = "\n".join(f"{c.component} {c.op} {c.version}" for c in sorted(
            self.constraints, key=lambda c: (c.component, c.op, c.version)))
        return hashlib.sha256(f"{self.name}\n{text}".encode()).hexdigest()[:8]


def _key(event: Event) -> str | None:
    a = event.attributes
    comp, version = a.get("component"), a.get("version")
    if comp not in COMPONENTS or not isinstance(version, str) or not version:
        return None
    if comp == "hca_firmware" and a.get("device"):
        return f"hca_firmware/{a['device']}"
    return str(comp)


def _latest(events: Iterable[Event]) -> dict[str, dict[str, Event]]:
    out: dict[str, dict[str, Event]] = {}
    for event in events:
        if event.type != STACK_VERSION:
            continue
        key = _key(event)
        if key is None:
            continue
        mine = out.setdefault(event.host, {})
        old = mine.get(key)
        if old is None or (event.at, event.event_id) > (old.at, old.event_id):
            mine[key] = event
    return out


def fingerprint(events: Iterable[Event]) -> dict[str, dict[str, str]]:
    """``{host: {key: version}}`` from the ``stack.version`` events among ``events`` (other
    types are ignored); keys as in the module docstring, hosts and keys sorted."""
    latest = _latest(events)
    return {h: {k: latest[h][k].attributes["version"] for k in sorted(latest[h])} for h in sorted(latest)}


def _drift_event(host: str, key: str, found: str, expected: str, against: str, basis: str,
                 source: Event | None, at: int, extra: Mapping[str, object]) -> Event:
    component, _, device = key.partition("/")
    attrs: dict[str, object] = {"component": component, "expected": expected, "found": found,
                                "basis": basis, "against": against, **extra}
    if device or component == "hca_firmware":
        attrs["device"] = device or "device not named"
    return Event(
        type=DRIFT,
        at=at,
        time_quality=source.time_quality if source is not None else 1.0,
        host=host,
        cluster=source.cluster if source is not None else "",
        workload_id=source.workload_id if source is not None else None,
        attributes=attrs,
        rule=_RULE,
        evidence=list(source.evidence) if source is not None else [],
    ).with_id()


def drift(fingerprints: Mapping[str, Mapping[str, str]], baseline: Baseline | None = None, *,
          sources: Mapping[str, Mapping[str, Event]] | None = None, at: int = 0,
          extra: Mapping[str, Mapping[str, object]] | None = None) -> list[Event]:
    """``config.drift`` events for ``fingerprints`` (``{host: {key: version}}``, as from
    :func:`fingerprint`; pass only the workload's nodes).

    Against ``baseline``: one event per host and key whose version violates a constraint on its
    component (``expected``: the constraint, e.g. ``>= 570.124.06``; ``basis: recipe``). A key
    no constraint binds is compared with the peers: when every other host states the same
    version (two hosts or more) and this one differs, one event (``expected``: the peers'
    version; ``basis: peers``). ``sources`` (``{host: {key: Event}}``) gives each drift the
    time and evidence of the version line it rests on; otherwise ``at`` (UTC ns) is used.
    ``extra`` (``{host: attrs}``) adds attributes to the drifts of that host. Sorted by
    host, key."""
    out: list[Event] = []
    sources = sources or {}
    extra = extra or {}
    recipe = baseline.name if baseline is not None else ""
    keys = sorted({k for fp in fingerprints.values() for k in fp})
    for key in keys:
        constraints = baseline.for_component(key) if baseline is not None else ()
        holders = {h: fp[key] for h, fp in fingerprints.items() if key in fp}
        for host in sorted(holders):
            found = holders[host]
            src = sources.get(host, {}).get(key)
            when = src.at if src is not None else at
            if constraints:
                failed = [c for c in constraints if not c.holds(found)]
                if failed:
                    expected = " and ".join(str(c) for c in failed)
                    out.append(_drift_event(host, key, found, expected, f"the recipe's {expected}",
                                            "recipe", src, when, {"recipe": recipe, **extra.get(host, {})}))
                continue
            peers = {v for h, v in holders.items() if h != host}
            n_peers = len(holders) - 1
            if n_peers >= 2 and len(peers) == 1 and found not in peers:
                expected = next(iter(peers))
                out.append(_drift_event(host, key, found, expected,
                                        f"the other {n_peers} nodes' {expected}", "peers", src, when,
                                        dict(extra.get(host, {}))))
    return sorted(out, key=lambda e: (e.host, e.attributes["component"], str(e.attributes.get("device", "")),
                                      e.event_id))


def drift_events(events: Iterable[Event], baseline: Baseline | None, nodes: Sequence[str], *,
                 start_ns: int, end_ns: int | None = None) -> tuple[dict[str, dict[str, str]], list[Event]]:
    """The fingerprints of ``nodes`` from ``events`` and their drift events, for a workload
    verdict (:func:`correlators.attribution.decide`).

    A drift is a standing condition: its event is placed at its version line's time clamped
    into the workload's ``[start_ns, end_ns]`` (UTC ns), so a version line logged at boot, hours
    before the job, still counts while the job ran. A driver drift on a host that also
    reported a user-space / kernel-module driver mismatch (:data:`MISMATCH_TYPES`) carries
    ``mismatch: driver_library``. Returns ``(fingerprints, drifts)``."""
    events = list(events)
    wanted = set(nodes)
    latest = {h: keys for h, keys in _latest(events).items() if h in wanted}
    fps = {h: {k: latest[h][k].attributes["version"] for k in sorted(latest[h])} for h in sorted(latest)}
    mismatched = {
        e.host for e in events
        if e.type in MISMATCH_TYPES and e.attributes.get(MISMATCH_TYPES[e.type][0]) == MISMATCH_TYPES[e.type][1]
    }
    clamped: dict[str, dict[str, Event]] = {}
    for host, keys in latest.items():
        for key, ev in keys.items():
            at = max(ev.at, start_ns)
            if end_ns is not None:
                at = min(at, max(end_ns, start_ns))
            clamped.setdefault(host, {})[key] = ev.model_copy(update={"at": at}) if at != ev.at else ev
    found = drift(fps, baseline, sources=clamped, at=start_ns)
    out = []
    for ev in found:
        if ev.attributes["component"] == "driver" and ev.host in mismatched:
            ev = ev.model_copy(update={"attributes": {**ev.attributes, "mismatch": "driver_library"}}).with_id()
        out.append(ev)
    return fps, out
