"""Guards: the checks an action must pass before it may run without a person.

Each guard is a pure function (or, for the circuit breaker, a small state object) returning a
:class:`schemas.records.GuardResult` ``(guard, passed, detail)`` that the engine records on the
action. A failed guard never drops an action: the engine keeps it ``proposed`` and forces an
``auto`` mode to ``needs_approval`` (``dry_run`` stays ``dry_run``), so a person sees why.

Guards and their defaults (``GuardSettings``, the ``guards:`` section of the policy):

* ``verdict_final`` -- only a final verdict's actions may run; a provisional one is proposed
  for a person and re-evaluated when the final revision arrives.
* ``verdict_quality`` -- ``ambiguous``/``insufficient`` verdicts get only ``recertify``; the
  detail lists what the policy would have done.
* ``circuit_breaker`` -- per cluster, trips when more than ``max_fraction`` (0.5) of the
  cluster's nodes would be taken out within ``window_s`` (300 s) -- NVSentinel's default
  "50% of GPU nodes cordoned in 5 minutes". It counts a **ledger** of what it admitted, in
  processing order, whatever the event times: an admission counts against every later action
  whose event time is within ``window_s`` of its own, before or after (so verdicts arriving out
  of event-time order cannot each see a window without the others). Event time only places
  admissions in windows. A verdict older than what the ledger still remembers fails closed.
  Stays tripped until a ``reset_breaker`` command; on reset, actions awaiting approval stay
  pending (never replayed, never expired by the reset) and the admissions of actions that
  have not ended stay in the ledger.
* ``domain_budget`` -- at most N nodes of one failure domain (rack, NVLink domain, leaf
  switch = the hosts cabled to it) out of service at once (``default`` 2, per-domain
  ``overrides`` by glob). None of the anchors has it.
* ``workload_budget`` -- at most ``max_nodes`` (2) of one workload's nodes out at once: a
  verdict blaming more of one job's nodes is more likely systemic.
* ``cooldown`` -- ``cooldown_s`` (1800 s) after any remediation of a node began, another
  incident's disruptive action on it waits for a person (Together AI: ~30 min per node); a
  remediation that began after the verdict's event time (a late verdict) counts too.
* ``escalation`` -- after ``max_remediations`` (5) remediations of one node within
  ``period_s`` (7 days) of the verdict, before or after it, the next goes to a person
  (NVSentinel: 5 in 7 days).

* ``target_known`` -- on the ``notify`` the engine proposes instead of actions whose target
  is not a known node (:mod:`correlators.remediation.targets`): passed (a notification may
  go out), the detail names the refused names and the withheld actions.
* ``target_corroborated`` -- on the ``notify`` the engine proposes instead of disruptive
  actions on known nodes that the verdict's deciding evidence was not collected on
  (:class:`correlators.remediation.targets.Corroboration`): passed, the detail says where the
  evidence was collected and which actions were withheld.

Only disruptive actions (:data:`correlators.remediation.policy.DISRUPTIVE`: everything but
``notify`` and ``recertify``) are subject to the capacity guards (breaker, budgets, cooldown,
escalation). Dry-run actions count like real ones, so a dry run shows where the guards would
stop a real one. Times are UTC ns unless the name says ``_s`` (seconds).
"""

from __future__ import annotations

import fnmatch
from typing import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from correlators.timetext import NS
from schemas.bundle import TopologySpec
from schemas.records import Attribution, GuardResult
from schemas.utc import format_utc


VERDICT_FINAL = "verdict_final"
VERDICT_QUALITY = "verdict_quality"
CIRCUIT_BREAKER = "circuit_breaker"
DOMAIN_BUDGET = "domain_budget"
WORKLOAD_BUDGET = "workload_budget"
COOLDOWN = "cooldown"
ESCALATION = "escalation"
TARGET_KNOWN = "target_known"
TARGET_CORROBORATED = "target_corroborated"


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CircuitBreakerSettings(_Settings):
    """Trip when more than ``max_fraction`` of a cluster's nodes are taken out within
    ``window_s`` seconds; on reset, skip blocked proposals older than ``stale_after_s``."""

    max_fraction: float = Field(default=0.5, gt=0.0, le=1.0)
    window_s: int = Field(default=300, gt=0)
    stale_after_s: int = Field(default=300, gt=0)


class DomainBudgetSettings(_Settings):
    """At most ``default`` nodes of one failure domain out of service at once; ``overrides``
    maps a domain-name glob (``rack-*``, ``leaf-0?``) to its own budget (first match wins)."""

    default: int = Field(default=2, ge=1)
    overrides: dict[str, int] = Field(default_factory=dict)

    def budget_of(self, domain: str) -> int:
        for pattern, budget in self.overrides.items():
            if fnmatch.fnmatchcase(domain, pattern):
                return budget
        return self.default


class WorkloadBudgetSettings(_Settings):
    """At most ``max_nodes`` nodes of one workload out of service at once."""

    max_nodes: int = Field(default=2, ge=1)


class EscalationSettings(_Settings):
    """After ``max_remediations`` remediations of one node within ``period_s`` seconds, the
    next one needs a person."""

    max_remediations: int = Field(default=5, ge=1)
    period_s: int = Field(default=7 * 86400, gt=0)


class GuardSettings(_Settings):
    """The ``guards:`` section of a policy. ``proposal_ttl_s``: an unapproved proposal
    expires this long (seconds) after its verdict's ``decided_at``."""

    circuit_breaker: CircuitBreakerSettings = Field(default_factory=CircuitBreakerSettings)
    domain_budget: DomainBudgetSettings = Field(default_factory=DomainBudgetSettings)
    workload_budget: WorkloadBudgetSettings = Field(default_factory=WorkloadBudgetSettings)
    cooldown_s: int = Field(default=1800, ge=0)
    escalation: EscalationSettings = Field(default_factory=EscalationSettings)
    proposal_ttl_s: int = Field(default=3600, gt=0)


# --- failure domains --------------------------------------------------------------------------


class FailureDomains:
    """Failure domains of one cluster from its :class:`schemas.bundle.TopologySpec`.

    Domains are the topology's ``domains`` (``rack-1``, ``nvl-domain-3``: name -> hosts) plus
    one per switch cabled to hosts (a leaf switch: its name -> the hosts cabled to it)."""

    def __init__(self, topology: TopologySpec | None = None):
        self._members: dict[str, list[str]] = {}
        self._ports: dict[str, list[str]] = {}
        hosts: set[str] = set()
        if topology is not None:
            for name, members in topology.domains.items():
                self._members[name] = sorted(set(members))
                hosts.update(members)
            leaves: dict[str, set[str]] = {}
            for link in topology.links:
                leaves.setdefault(link.switch, set()).add(link.host)
                hosts.add(link.host)
                self._ports.setdefault(link.port_id, []).append(link.host)
                self._ports.setdefault(f"{link.host}/{link.hca}/{link.host_port}", []).append(link.host)
            for switch, members in sorted(leaves.items()):
                self._members.setdefault(switch, sorted(members))
            hosts.update(topology.hosts)
        self._hosts = frozenset(hosts)
        self._of: dict[str, list[str]] = {}
        for name, members in self._members.items():
            for host in members:
                self._of.setdefault(host, []).append(name)

    @property
    def hosts(self) -> frozenset[str]:
        """Every host the topology names (links, hosts, domains)."""
        return self._hosts

    def domains(self) -> dict[str, list[str]]:
        """``{domain: sorted hosts}``, listed domains first (topology order), then leaf switches."""
        return dict(self._members)

    def domains_of(self, host: str) -> list[str]:
        """The domains ``host`` belongs to, in :meth:`domains` order."""
        return list(self._of.get(host, ()))

    def hosts_of_port(self, port: str) -> list[str]:
        """Hosts cabled to a port id (``switch/port`` or ``host/hca/port``); [] if unknown."""
        return sorted(set(self._ports.get(port, ())))


# --- verdict guards ---------------------------------------------------------------------------


def check_final(att: Attribution) -> GuardResult:
    """Pass for a final verdict; fail for a provisional one (proposed, never executed)."""
    if att.status == "final":
        return GuardResult(guard=VERDICT_FINAL, passed=True, detail="final verdict")
    return GuardResult(
        guard=VERDICT_FINAL,
        passed=False,
        detail="provisional verdict: waits for the final revision",
    )


def check_quality(att: Attribution, withheld: Iterable[str] = ()) -> GuardResult:
    """Pass for ``definitive``/``probable`` verdicts. For ``ambiguous``/``insufficient`` the
    engine proposes only ``recertify``; this result (passed, since recertify is allowed) says
    so and lists the withheld actions."""
    if att.quality in ("definitive", "probable"):
        return GuardResult(guard=VERDICT_QUALITY, passed=True, detail=f"{att.quality} verdict")
    held = ", ".join(withheld) or "none"
    return GuardResult(
        guard=VERDICT_QUALITY,
        passed=True,
        detail=f"{att.quality} verdict: only recertify is proposed; withheld: {held}",
    )


# --- capacity guards --------------------------------------------------------------------------


def check_domain_budget(
    hosts: Iterable[str],
    held: Iterable[str],
    domains: FailureDomains,
    settings: DomainBudgetSettings,
) -> GuardResult:
    """Fail when taking ``hosts`` out would put more than the budget of one domain out of
    service. ``held``: hosts already out (non-terminal admitted/approved/executing disruptive
    actions of other incidents or targets)."""
    new = set(hosts)
    out = set(held)
    checked = []
    for domain in sorted({d for h in new for d in domains.domains_of(h)}):
        members = set(domains.domains()[domain])
        would = (out | new) & members
        budget = settings.budget_of(domain)
        checked.append(f"{domain} {len(would)}/{budget}")
        if len(would) > budget:
            already = sorted((out & members) - new)
            return GuardResult(
                guard=DOMAIN_BUDGET,
                passed=False,
                detail=f"domain {domain}: {len(would)} nodes would be out, budget {budget} "
                f"(already out: {', '.join(already) or 'none'})",
            )
    return GuardResult(
        guard=DOMAIN_BUDGET,
        passed=True,
        detail=("within budget: " + ", ".join(checked)) if checked else "no failure domain known for the target",
    )


def check_workload_budget(
    hosts: Iterable[str],
    workloads: Iterable[str],
    held_by_workload: Mapping[str, Iterable[str]],
    settings: WorkloadBudgetSettings,
) -> GuardResult:
    """Fail when, for one of ``workloads``, the hosts already out for it plus ``hosts`` exceed
    ``max_nodes``. ``held_by_workload``: workload -> hosts out of service for it."""
    new = set(hosts)
    checked = []
    for wl in sorted(set(workloads)):
        would = set(held_by_workload.get(wl, ())) | new
        checked.append(f"{wl} {len(would)}/{settings.max_nodes}")
        if len(would) > settings.max_nodes:
            return GuardResult(
                guard=WORKLOAD_BUDGET,
                passed=False,
                detail=f"workload {wl}: {len(would)} nodes would be out ({', '.join(sorted(would))}), "
                f"budget {settings.max_nodes}",
            )
    return GuardResult(
        guard=WORKLOAD_BUDGET,
        passed=True,
        detail=("within budget: " + ", ".join(checked)) if checked else "no workload named",
    )


def check_cooldown(
    hosts: Iterable[str],
    incident: str,
    at: int,
    history: Mapping[str, Iterable[tuple[str, int]]],
    cooldown_s: int,
) -> GuardResult:
    """Fail when another incident's remediation of one of ``hosts`` began less than
    ``cooldown_s`` before or after ``at`` (UTC ns; after: the verdict arrived late).
    ``history``: host -> (incident, began_at ns)."""
    for host in sorted(set(hosts)):
        near = sorted((abs(at - t), t, inc) for inc, t in history.get(host, ()) if inc != incident)
        if near and near[0][0] < cooldown_s * NS:
            _, t, inc = near[0]
            if t <= at:
                when = f"was remediated {(at - t) / NS:.0f} s ago"
            else:
                when = f"was remediated {(t - at) / NS:.0f} s after this verdict's time"
            return GuardResult(
                guard=COOLDOWN,
                passed=False,
                detail=f"{host} {when} (incident {inc}); cooldown {cooldown_s} s",
            )
    return GuardResult(guard=COOLDOWN, passed=True, detail=f"no remediation in the last {cooldown_s} s")


def check_escalation(
    hosts: Iterable[str],
    incident: str,
    at: int,
    history: Mapping[str, Iterable[tuple[str, int]]],
    settings: EscalationSettings,
) -> GuardResult:
    """Fail ("escalated") when one of ``hosts`` already had ``max_remediations`` remediations
    (distinct incidents other than ``incident``) that began within ``period_s`` of ``at``
    (before it, or after it for a late verdict)."""
    period = settings.period_s * NS
    for host in sorted(set(hosts)):
        incidents = {inc for inc, t in history.get(host, ()) if inc != incident and abs(at - t) <= period}
        if len(incidents) >= settings.max_remediations:
            days = settings.period_s / 86400
            return GuardResult(
                guard=ESCALATION,
                passed=False,
                detail=f"escalated: {host} had {len(incidents)} remediations in {days:g} days "
                f"(limit {settings.max_remediations}); a person decides",
            )
    return GuardResult(guard=ESCALATION, passed=True, detail="below the escalation threshold")


class Admission(BaseModel):
    """One entry of the breaker's ledger: the action's event time (UTC ns, places it in
    windows), the hosts it takes out and ``seq``, its place in processing order."""

    model_config = ConfigDict(extra="forbid")
    at: int
    hosts: list[str]
    seq: int = 0


class CircuitBreaker(BaseModel):
    """The circuit breaker of one cluster (JSON-serialisable, part of the engine state, so
    the ledger is changelogged with it).

    ``admissions``: the ledger, action id -> :class:`Admission`, in processing order: the
    disruptive actions let through (all guards passed, or approved by a person). An admission
    counts against any action whose event time is within ``window_s`` of its own, earlier or
    later. ``admitted``: admissions so far (the next ``seq``). ``horizon``: the newest event
    time the ledger has forgotten (pruned); a check whose window reaches back to it fails
    closed. Once ``tripped`` it stays tripped until :meth:`reset`."""

    model_config = ConfigDict(extra="forbid")
    tripped: bool = False
    tripped_at: int | None = None
    detail: str = ""
    admissions: dict[str, Admission] = Field(default_factory=dict)
    admitted: int = 0
    horizon: int | None = None
    resets: list[str] = Field(default_factory=list)

    def taken_out(self, at: int, settings: CircuitBreakerSettings, exclude: str | None = None) -> set[str]:
        """Hosts of every admission whose event time is within ``window_s`` of ``at`` (UTC
        ns), before or after it, except those of action ``exclude``."""
        window = settings.window_s * NS
        return {
            h for aid, adm in self.admissions.items() if aid != exclude and abs(adm.at - at) < window for h in adm.hosts
        }

    def check(
        self,
        action_id: str,
        hosts: Iterable[str],
        at: int,
        fleet_size: int | None,
        settings: CircuitBreakerSettings,
        *,
        count: bool = True,
    ) -> GuardResult:
        """Check the breaker for an action taking ``hosts`` out at event time ``at`` (UTC ns):
        it trips when the hosts of the ledger's admissions within ``window_s`` of ``at``, these
        included, would exceed ``max_fraction`` of ``fleet_size``. With ``count=False``
        (another guard already failed, so the action will not run by itself) it only reports
        the current share. Fails closed when ``fleet_size`` is unknown, and when ``at`` is so
        old that the window reaches admissions the ledger has forgotten."""
        if self.tripped:
            return GuardResult(
                guard=CIRCUIT_BREAKER, passed=False, detail=f"tripped: {self.detail}; reset by a person"
            )
        if not fleet_size:
            return GuardResult(
                guard=CIRCUIT_BREAKER,
                passed=False,
                detail="cluster node count unknown (no topology, no fleet_size): cannot bound the blast radius",
            )
        if self.horizon is not None and at - settings.window_s * NS < self.horizon:
            return GuardResult(
                guard=CIRCUIT_BREAKER,
                passed=False,
                detail=f"event time {format_utc(at)} is within {settings.window_s} s of admissions the breaker no longer "
                f"holds (forgotten up to {format_utc(self.horizon)}): too late to bound the blast radius; a person decides",
            )
        others = self.taken_out(at, settings, exclude=action_id)
        limit = f"(limit {settings.max_fraction:.0%})"
        if not count:
            return GuardResult(
                guard=CIRCUIT_BREAKER,
                passed=True,
                detail=f"{len(others)} of {fleet_size} nodes taken out within {settings.window_s} s {limit}; "
                "this action not counted: another guard failed",
            )
        out = others | set(hosts)
        share = f"{len(out)} of {fleet_size} nodes taken out within {settings.window_s} s"
        if len(out) > settings.max_fraction * fleet_size:
            self.tripped, self.tripped_at = True, at
            self.detail = f"{share} {limit}"
            return GuardResult(guard=CIRCUIT_BREAKER, passed=False, detail=f"tripped now: {self.detail}")
        return GuardResult(guard=CIRCUIT_BREAKER, passed=True, detail=f"{share} {limit}")

    def admit(self, action_id: str, hosts: Iterable[str], at: int) -> None:
        """Add an action that takes ``hosts`` out at event time ``at`` to the ledger
        (idempotent per action id: its first admission stays)."""
        if action_id not in self.admissions:
            self.admissions[action_id] = Admission(at=at, hosts=sorted(set(hosts)), seq=self.admitted)
            self.admitted += 1

    def prune(self, keep_ns: int) -> None:
        """Forget admissions more than ``keep_ns`` older (event time) than the newest one;
        :attr:`horizon` remembers how far the ledger was cut."""
        if not self.admissions:
            return
        newest = max(adm.at for adm in self.admissions.values())
        gone = [adm.at for adm in self.admissions.values() if adm.at <= newest - keep_ns]
        if gone:
            self.horizon = max([*gone, *([self.horizon] if self.horizon is not None else [])])
            self.admissions = {k: v for k, v in self.admissions.items() if v.at > newest - keep_ns}

    def reset(self, keep: Iterable[str] = ()) -> None:
        """Close the breaker (a person's ``reset_breaker``): the window starts again, except
        that the admissions of the actions ``keep`` (those not ended: awaiting approval,
        approved, executing) stay in the ledger -- they still take their nodes out."""
        kept = set(keep)
        self.tripped, self.tripped_at, self.detail = False, None, ""
        self.admissions = {k: v for k, v in self.admissions.items() if k in kept}
