"""The remediation engine: verdicts, commands, certifications and executor reports in,
:class:`schemas.records.RemediationAction` transition records out.

Pure and deterministic: no I/O, no clock. Time comes only from the records (``decided_at`` of a
verdict, ``at`` of a command or executor report, ``finished_at`` of a certification) and from
:meth:`RemediationEngine.tick`. Ids are content hashes (:func:`schemas.records.content_id`), so
the same inputs in the same order give byte-identical records (``canonical_json``). All state
round-trips through :meth:`RemediationEngine.to_state` / :meth:`RemediationEngine.from_state`
(JSON-native), so a stream worker keeps it in a changelogged table and rebuilds after a crash.

How a verdict becomes actions (:meth:`RemediationEngine.on_attribution`):

1. A revision not newer than the last one seen for its ``attribution_id`` is a no-op.
2. ``ambiguous``/``insufficient`` verdict: one ``recertify`` of the suspect hosts with an
   NVCRE screening plan, nothing else (the withheld actions are named in its
   ``verdict_quality`` guard). Otherwise the first matching policy rule gives the actions; the
   actions of one rule on one target form a chain (a later one runs only after the earlier
   one executed: no reboot before the drain).
3. **Targets come from facts** (:mod:`correlators.remediation.targets`): a host target must be
   a valid node name and a node of the allocation of a workload the verdict is about
   (:meth:`RemediationEngine.on_workload`), of the topology or of the fleet list; a port
   target a port the topology cables. A name the verdict has only from its evidence (a log
   line's host field: ``ALL``, ``node[01-99]``, ``a;b``) is never a target: the actions on it
   are withheld and one ``notify`` (empty target) is proposed instead, its ``target_known``
   guard naming the refused names and the withheld actions. **A disruptive target needs
   corroboration**: a host a drain, reboot or GPU reset takes out must be one the verdict's
   deciding (``cause``) evidence was collected on (a port: on its switch or a host cabled to
   it); the disruptive actions on any other known node are withheld and one ``notify`` of
   those hosts is proposed instead, its ``target_corroborated`` guard saying why.
4. ``action_id = content_id("act", cluster, incident, target, action)`` where ``incident`` is
   the verdict's ``incident_id`` or, without one, its ``attribution_id``: several verdicts of
   one incident (the fabric verdict and each workload it hit) share one action per target.
5. **In-place upgrade** (Together AI): when a verdict of the same incident asks for a more
   severe action on a target that has pending (proposed/approved, not started) actions, the new
   action gets its own id (ids are per action kind) and the pending ones are ``cancelled``
   with ``reason = "superseded by <id> (<action>, severity N > M)"``. A less or equally severe
   new action on a target with a pending more severe one is not proposed (it is covered).
6. **Cause cleared**: a later revision of a verdict that no longer calls for a ``proposed``
   action it alone supported (its root cause changed, or the workload ``completed`` -- whose
   root cause is ``none``) expires it with the reason; approved or running actions are left
   to a person (``cancel``).
7. Guards (:mod:`correlators.remediation.guards`) run for each new action, in order; all
   results are recorded on it. All passed and mode ``auto``: the action is approved by the
   policy at once (two records: ``proposed``, ``approved`` with ``Decision(by="policy:<id>@<v>")``).
   Any failed: it stays ``proposed`` and ``auto`` becomes ``needs_approval``; a person may
   approve it (the record keeps what the guards said). A provisional (not ``final``) verdict
   fails ``verdict_final``: its actions are proposed for a person and re-evaluated when the
   final revision arrives.
8. An unapproved proposal expires at ``expires_at`` = ``decided_at + proposal_ttl_s``
   (:meth:`tick`, or an approval arriving after it).

Modes: ``auto`` and ``needs_approval`` actions are for real executors, ``dry_run`` ones for the
dry-run executor only (they still need an approval, and count in the guards as if real).
:meth:`executable` lists approved actions due for an executor. While a cluster's circuit
breaker is tripped no disruptive action of it is executable, approved or not (the breaker
holds execution, not approval). The breaker and budgets count what they admitted in
processing order (the breaker's ledger is part of the state), so the order verdicts arrive in
does not matter. On ``reset_breaker`` the proposals it blocked stay pending for a person (a
progress record says the reset does not replay them), approved ones older than
``stale_after_s`` are cancelled by age, and the ledger keeps the admissions of every action
that has not ended.

Return to service: an action with ``requires_certification`` stays ``executing`` after its
executor reports success ("awaiting certification") and becomes ``done`` -- the executor's cue
to resume/uncordon the node -- only when a passing :class:`Certification` of its host arrives
whose ``finished_at`` is after every step of its chain started, and no step of the chain is
still pending. A failed certification keeps the node out (a progress record says so).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field

import correlators.remediation.guards as g
from correlators.remediation.bisection import plan_screen
from correlators.remediation.guards import CircuitBreaker, FailureDomains, GuardSettings
from correlators.remediation.lifecycle import TERMINAL, LifecycleError, advance
from correlators.remediation.policy import DISRUPTIVE, SEVERITY, Policy, PolicyAction, Rule, verdict_facts
from schemas.utc import format_utc
from correlators.remediation.targets import Corroboration, KnownNodes, port_problem, shown, valid_node_name
from correlators.timetext import NS
from schemas.bundle import TopologySpec
from schemas.records import (
    ActionMode,
    Attribution,
    Certification,
    CertificationGroup,
    Decision,
    GuardResult,
    RemediationAction,
    RemediationCommand,
    RemediationTarget,
    content_id,
)

STATE_FORMAT = 1


class UnknownActionError(LookupError):
    """A command or executor report names an action the engine does not hold."""



class TrackedAction(BaseModel):
    """The engine's view of one action: its latest record plus what the record does not say.

    ``incident``: the incident key (``incident_id`` or ``attribution_id``); ``after``: the
    chain predecessor's id; ``sources``: verdicts currently calling for it; ``subjects``:
    hosts/ports it acts on (for upgrades); ``hosts``: hosts it takes out of service (disruptive
    actions only); ``admitted``: all guards passed at the last evaluation; ``source_guards``:
    the verdict-level guard results of each verdict calling for it (combined by
    :meth:`verdict_guards`); ``started_at`` /
    ``executed_at``: when it began executing / its executor reported success (UTC ns);
    ``commands`` / ``certifications``: ids already applied (duplicates are no-ops)."""

    model_config = ConfigDict(extra="forbid")

    action: RemediationAction
    incident: str
    after: str | None = None
    sources: list[str] = Field(default_factory=list)
    subjects: list[str] = Field(default_factory=list)
    hosts: list[str] = Field(default_factory=list)
    workloads: list[str] = Field(default_factory=list)
    disruptive: bool = False
    admitted: bool = False
    requires_certification: bool = False
    policy_mode: ActionMode = "dry_run"
    source_guards: dict[str, list[GuardResult]] = Field(default_factory=dict)
    started_at: int | None = None
    executed_at: int | None = None
    commands: list[str] = Field(default_factory=list)
    certifications: list[str] = Field(default_factory=list)

    @property
    def action_id(self) -> str:
        return self.action.action_id

    @property
    def state(self) -> str:
        return self.action.state

    def verdict_guards(self) -> list[GuardResult]:
        """The verdict-level guards over every verdict calling for the action (a workload
        verdict and the fabric verdict of one incident, say): per guard the passing result of
        the verdict with the smallest attribution id, else the failing one of that verdict --
        independent of the order the verdicts arrived in, so alternating revisions of two
        verdicts do not flip the action back and forth."""
        best: dict[str, tuple[bool, str, GuardResult]] = {}
        for source in sorted(self.source_guards):
            for result in self.source_guards[source]:
                key = (not result.passed, source)
                if result.guard not in best or key < best[result.guard][:2]:
                    best[result.guard] = (not result.passed, source, result)
        return [best[name][2] for name in best]


class SeenAttribution(BaseModel):
    """The last revision seen of one verdict."""

    model_config = ConfigDict(extra="forbid")
    revision: int
    at: int
    cause: str


@dataclass
class _Spec:
    """One concrete action a verdict calls for, before guards."""

    action_id: str
    target: RemediationTarget
    kind: str
    severity: int
    mode: ActionMode
    subjects: list[str]
    hosts: list[str]
    requires_certification: bool = False
    after: str | None = None
    reason: str = ""
    plan: list[CertificationGroup] = field(default_factory=list)
    verdict_guards: list[GuardResult] = field(default_factory=list)


class RemediationEngine:
    """All remediation state of a deployment; pure methods turn inputs into transition records.

    ``policy``: a validated :class:`Policy`. ``topology``: failure domains (racks, NVLink
    domains, leaf switches) and, without ``fleet_size``, the node count for the circuit
    breaker. ``fleet_size``: the node count of every cluster (an int) or per cluster (a
    mapping); the breaker fails closed when neither gives one. ``fleet_nodes``: the node names
    of every cluster (an iterable) or per cluster (a mapping) -- targets may be these nodes,
    and without ``fleet_size`` the breaker counts them. ``settings``: guard settings replacing
    the policy's ``guards:`` section (tests, deployment overrides)."""

    def __init__(
        self,
        policy: Policy,
        *,
        topology: TopologySpec | None = None,
        fleet_size: int | Mapping[str, int] | None = None,
        fleet_nodes: Iterable[str] | Mapping[str, Iterable[str]] | None = None,
        settings: GuardSettings | None = None,
    ):
        self.policy = policy
        self.settings = settings or policy.guards
        self.domains = FailureDomains(topology)
        self._has_topology = topology is not None
        self._fleet = fleet_size
        if fleet_nodes is None:
            self._fleet_nodes: dict[str | None, list[str]] = {}
        elif isinstance(fleet_nodes, Mapping):
            self._fleet_nodes = {c: sorted(set(n)) for c, n in fleet_nodes.items()}
        else:
            self._fleet_nodes = {None: sorted(set(fleet_nodes))}
        self._allocations: dict[str, dict[str, dict[str, Any]]] = {}  # cluster -> workload -> {nodes, at}
        self._actions: dict[str, TrackedAction] = {}
        self._attributions: dict[str, SeenAttribution] = {}
        self._breakers: dict[str, CircuitBreaker] = {}
        self._history: dict[str, dict[str, dict[str, int]]] = {}  # cluster -> host -> incident -> began_at
        self._xids: dict[str, dict[str, int]] = {}  # cluster|host|gpu|xid -> attribution -> decided_at
        self._certified: dict[str, dict[str, int]] = {}  # cluster -> host -> last passing finished_at

    # --- inputs -----------------------------------------------------------------------------

    def on_workload(self, cluster: str, workload_id: str, nodes: Iterable[str], at: int) -> list[RemediationAction]:
        """Learn a workload's allocation from the scheduler's record (``WorkloadSpec.nodes``):
        its valid node names become targets for verdicts about that workload. ``at``: the
        record's time (its end, else its start; UTC ns), for pruning. A later record replaces
        the allocation. Returns [] (an allocation makes no transition)."""
        valid = sorted({n for n in nodes if valid_node_name(n)})
        self._allocations.setdefault(cluster, {})[workload_id] = {"nodes": valid, "at": at}
        return []

    def known_nodes(self, att: Attribution) -> KnownNodes:
        """The nodes ``att``'s actions may target: the allocations of the workloads it is
        about (its scope, if a workload, and ``affected.workloads``), the topology's hosts and
        the fleet list of its cluster (see :mod:`correlators.remediation.targets`)."""
        known = KnownNodes()
        cluster = att.scope.cluster
        workloads = {att.scope.id} if att.scope.kind == "workload" else set()
        workloads.update(att.affected.workloads)
        allocations = self._allocations.get(cluster, {})
        for wl in sorted(workloads):
            if wl in allocations:
                known.add(allocations[wl]["nodes"], f"allocation of {wl}")
        known.add(self.domains.hosts, "topology")
        known.add(self._fleet_nodes.get(cluster, self._fleet_nodes.get(None, [])), "fleet")
        return known

    def on_attribution(self, att: Attribution) -> list[RemediationAction]:
        """Propose, refresh, upgrade or expire actions for a verdict (see the module docstring).
        Returns the new records in order; [] for a duplicate or older revision."""
        seen = self._attributions.get(att.attribution_id)
        if seen is not None and att.revision <= seen.revision:
            return []
        self._attributions[att.attribution_id] = SeenAttribution(
            revision=att.revision, at=att.decided_at, cause=att.cause_code
        )
        at = att.decided_at
        cluster = att.scope.cluster
        incident = att.incident_id or att.attribution_id
        specs = self._specs(att, incident)
        new_ids = {s.action_id for s in specs}
        out: list[RemediationAction] = []

        # what this verdict no longer calls for
        leaving: list[TrackedAction] = []
        for t in self._actions.values():
            if att.attribution_id in t.sources and t.action_id not in new_ids:
                t.sources.remove(att.attribution_id)
                if not t.sources and t.state == "proposed":
                    leaving.append(t)
        leaving_ids = {t.action_id for t in leaving}

        # in-place upgrade: compare new actions with the pending actions of the same incident
        # on each subject (host or port)
        superseded: dict[str, str] = {}
        by_subject: dict[str, list[_Spec]] = {}
        for s in specs:
            if s.action_id not in self._actions:
                for subject in s.subjects:
                    by_subject.setdefault(subject, []).append(s)
        covered: set[str] = set()
        for subject, subject_specs in by_subject.items():
            top = max(subject_specs, key=lambda s: (s.severity, s.action_id))
            pending = [
                t
                for t in self._pending(cluster, incident, subject)
                if t.action_id not in new_ids and t.action_id not in leaving_ids
            ]
            if pending and top.severity <= max(t.action.severity for t in pending):
                covered.update(s.action_id for s in subject_specs)
                continue
            # what this verdict called for before is superseded only by a plan more severe than
            # all of it (else it expires below: the cause cleared)
            before = [t for t in leaving if subject in t.subjects]
            if before and top.severity <= max(t.action.severity for t in before):
                before = []
            for t in pending + before:
                superseded.setdefault(
                    t.action_id,
                    f"superseded by {top.action_id} ({top.kind}, severity {top.severity} > {t.action.severity})",
                )
        keep = [s for s in specs if s.action_id not in covered]

        for aid, reason in superseded.items():
            if self._actions[aid].state not in TERMINAL:  # a superseded predecessor may have taken it along
                out += self._end(self._actions[aid], "cancelled", at, reason=reason)
        for t in leaving:
            if t.action_id not in superseded and t.state == "proposed":
                why = (
                    f"cause cleared: revision {att.revision} of {att.attribution_id} says "
                    f"{att.cause_code or 'withdrawn'} ({att.outcome}, {att.quality})"
                )
                out += self._end(t, "expired", at, reason=why)

        workloads = [att.scope.id] if att.scope.kind == "workload" else sorted(att.affected.workloads)
        for s in keep:
            t = self._actions.get(s.action_id)
            if t is None:
                out += self._propose(att, incident, s, workloads)
            else:
                if att.attribution_id not in t.sources:
                    t.sources.append(att.attribution_id)
                if t.state == "proposed":
                    t.source_guards[att.attribution_id] = s.verdict_guards
                    if att.attribution_id == t.action.attribution_id and t.action.cause_code != att.root_cause.code:
                        # a later revision of the verdict that proposed it names the cause
                        # better (the final verdict says gpu.xid.79 where the provisional one
                        # said gpu.pcie.aer_fatal); other verdicts of the incident do not flip it
                        out.append(self._move(t, "proposed", at, cause_code=att.root_cause.code, reason=s.reason))
                    out += self._reevaluate(t, at)
        return out

    def on_command(self, cmd: RemediationCommand) -> list[RemediationAction]:
        """Apply a person's command. ``approve``/``reject`` record ``Decision(by, at, reason)``;
        ``approve`` after ``expires_at`` expires the proposal instead; ``cancel`` ends any
        non-terminal action (and its chain's unstarted steps); ``reset_breaker`` closes the
        cluster's breaker, expires/cancels blocked actions older than ``stale_after_s`` and
        re-evaluates the rest. A repeated command (same ``command_id``) returns []. Raises
        :class:`UnknownActionError` for an unknown action, :class:`LifecycleError` for an
        illegal transition (approving a done action)."""
        cid = cmd.command_id or cmd.model_copy().with_id().command_id
        if cmd.command == "reset_breaker":
            return self._reset_breaker(cmd, cid)
        t = self._get(cmd.action_id)
        if cid in t.commands:
            return []
        decision = Decision(by=cmd.by, at=cmd.at, reason=cmd.reason)
        out: list[RemediationAction] = []
        if cmd.command == "approve":
            if t.state != "proposed":
                raise LifecycleError(t.action_id, t.state, "approved")
            expires = t.action.expires_at
            if expires is not None and cmd.at >= expires:
                out += self._end(
                    t, "expired", cmd.at,
                    reason=f"expired at {format_utc(expires)} before approval by {cmd.by} at {format_utc(cmd.at)}",
                )
            else:
                out.append(self._move(t, "approved", cmd.at, decision=decision))
                if t.disruptive:
                    self._breaker(t.action.cluster).admit(t.action_id, t.hosts, cmd.at)
        elif cmd.command == "reject":
            if t.state != "proposed":
                raise LifecycleError(t.action_id, t.state, "rejected")
            out += self._end(t, "rejected", cmd.at, decision=decision, reason=cmd.reason or "rejected")
        else:  # cancel
            if t.state in TERMINAL:
                raise LifecycleError(t.action_id, t.state, "cancelled")
            out += self._end(t, "cancelled", cmd.at, decision=decision, reason=cmd.reason or f"cancelled by {cmd.by}")
        t.commands.append(cid)
        return out

    def on_certification(self, cert: Certification, stale: list[str] | None = None) -> list[RemediationAction]:
        """Release (``done``) or keep out (progress record) the actions awaiting a
        certification of ``cert.host``. A passing certification also makes the host a
        known-healthy candidate for bisection padding. A certification that finished before an
        awaiting action's chain started cannot vouch for the node after it: it moves nothing,
        and when ``stale`` is given one line per such action is appended to it (the reason a
        driver dead-letters it with). A repeated certification returns []; one without a
        cluster matches the host in any cluster."""
        cid = cert.certification_id or cert.model_copy().with_id().certification_id
        if cert.passed:
            known = self._certified.setdefault(cert.cluster, {})
            known[cert.host] = max(known.get(cert.host, 0), cert.finished_at)
        out: list[RemediationAction] = []
        for t in list(self._actions.values()):
            a = t.action
            if not (t.requires_certification and a.state == "executing" and t.executed_at is not None):
                continue
            if cert.host not in t.subjects or (cert.cluster and a.cluster and cert.cluster != a.cluster):
                continue
            if cid in t.certifications:
                continue
            chain = self._chain(t)
            floor = max(c.started_at for c in chain if c.started_at is not None)
            if cert.finished_at <= floor:
                if stale is not None:
                    stale.append(
                        f"certification {cert.suite} ({cid}) of {cert.host} finished at {format_utc(cert.finished_at)}, "
                        f"not after {format_utc(floor)}, when the last started step of the chain of {a.action} "
                        f"{a.action_id} started: it cannot return the node")
                continue
            t.certifications.append(cid)
            # steps still to run (a started recertify is the certification itself: not waiting)
            waiting = [
                c for c in chain
                if c is not t and c.state not in TERMINAL and c.executed_at is None
                and (c.started_at is None or c.disruptive)
            ]
            label = f"certification {cert.suite} ({cid}) of {cert.host}"
            if not cert.passed:
                failed = ", ".join(x.name for x in cert.tests if x.result == "fail") or "failed"
                out.append(self._move(t, "executing", cert.finished_at,
                                      result=f"{label} failed at {format_utc(cert.finished_at)} ({failed}): node stays out of service"))
            elif waiting:
                names = ", ".join(f"{c.action.action} {c.action_id} ({c.state})" for c in waiting)
                out.append(self._move(t, "executing", cert.finished_at,
                                      result=f"{label} passed but {names} is still pending: node stays out of service"))
            else:
                out += self._end(t, "done", cert.finished_at,
                                 result=f"returned to service: {label} passed at {format_utc(cert.finished_at)}")
        return out

    def on_started(self, action_id: str, *, executor: str, at: int) -> list[RemediationAction]:
        """An executor began an approved action: ``approved -> executing``. Raises
        :class:`LifecycleError` when the action is not executable (not approved, its chain
        predecessor has not executed, or its cluster's breaker is tripped); [] if it already
        started."""
        t = self._get(action_id)
        if t.state == "executing" or t.state in TERMINAL and t.started_at is not None:
            return []
        if t.state != "approved":
            raise LifecycleError(action_id, t.state, "executing")
        why = self._hold(t)
        if why:
            raise LifecycleError(action_id, t.state, "executing", why)
        t.started_at = at
        if t.disruptive:
            hist = self._history.setdefault(t.action.cluster, {})
            for host in t.hosts:
                hist.setdefault(host, {})[t.incident] = at
        return [self._move(t, "executing", at, executor=executor, result=f"started by {executor}")]

    def on_execution(self, action_id: str, *, ok: bool, detail: str, executor: str, at: int) -> list[RemediationAction]:
        """An executor's result: ``executing -> done`` (or, with ``requires_certification``, a
        progress record "awaiting certification") when ``ok``, ``-> failed`` otherwise (and the
        chain's unstarted steps are cancelled). An approved action is first moved to
        ``executing`` (as :meth:`on_started`). A repeated report returns []."""
        t = self._get(action_id)
        out: list[RemediationAction] = []
        if t.state == "approved":
            out += self.on_started(action_id, executor=executor, at=at)
        if t.state in TERMINAL or t.executed_at is not None:
            return out
        if t.state != "executing":
            raise LifecycleError(action_id, t.state, "done" if ok else "failed")
        if not ok:
            return out + self._end(t, "failed", at, executor=executor, result=f"{executor}: {detail}")
        t.executed_at = at
        if t.requires_certification:
            return out + [self._move(t, "executing", at, executor=executor,
                                     result=f"{executor}: {detail}; awaiting certification")]
        return out + self._end(t, "done", at, executor=executor, result=f"{executor}: {detail}")

    def tick(self, now_ns: int) -> list[RemediationAction]:
        """Expire proposals whose ``expires_at`` <= ``now_ns`` and forget history older than
        the guards need (breaker window, cooldown, escalation period; terminal actions and
        seen verdicts older than that)."""
        out: list[RemediationAction] = []
        for t in list(self._actions.values()):
            exp = t.action.expires_at
            if t.state == "proposed" and exp is not None and exp <= now_ns:
                out += self._end(t, "expired", now_ns, reason=f"not approved by {format_utc(exp)}")
        self._prune(now_ns)
        return out

    # --- queries ----------------------------------------------------------------------------

    def executable(self, mode_filter: ActionMode | Iterable[ActionMode] | None = None) -> list[RemediationAction]:
        """Approved actions due for an executor, in creation order: not started, their chain
        predecessor executed, their cluster's breaker closed (disruptive ones). ``mode_filter``:
        a mode or modes to keep (``"dry_run"`` for the dry-run executor, ``("auto",
        "needs_approval")`` for real ones); None keeps all."""
        modes = {mode_filter} if isinstance(mode_filter, str) else set(mode_filter) if mode_filter else None
        return [
            t.action
            for t in self._actions.values()
            if t.state == "approved" and (modes is None or t.action.mode in modes) and not self._hold(t)
        ]

    def actions(self) -> list[RemediationAction]:
        """The latest record of every action held, in creation order."""
        return [t.action for t in self._actions.values()]

    def get(self, action_id: str) -> RemediationAction | None:
        """The latest record of ``action_id``, or None."""
        t = self._actions.get(action_id)
        return t.action if t else None

    def resume_host(self, record: RemediationAction) -> str | None:
        """The host an executor must now return to service (Slurm RESUME, uncordon) because of
        ``record`` -- set only for the ``done`` record of a certification-gated action (what
        :meth:`on_certification` emits on a passing certification), else None. A structured
        test: never match the record's text."""
        t = self._actions.get(record.action_id)
        if t is None or not t.requires_certification or record.state != "done":
            return None
        return record.target.host

    def breaker(self, cluster: str) -> CircuitBreaker:
        """The circuit breaker of ``cluster`` (a copy; closed if never used)."""
        return self._breaker(cluster).model_copy(deep=True)

    # --- state ------------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """All mutable state as JSON-native data (dicts keep creation order)."""
        return {
            "format": STATE_FORMAT,
            "policy": {"id": self.policy.policy_id, "version": self.policy.version},
            "actions": {k: t.model_dump(mode="json") for k, t in self._actions.items()},
            "attributions": {k: v.model_dump(mode="json") for k, v in self._attributions.items()},
            "breakers": {k: v.model_dump(mode="json") for k, v in self._breakers.items()},
            "history": copy.deepcopy(self._history),
            "xids": copy.deepcopy(self._xids),
            "certified": copy.deepcopy(self._certified),
            "allocations": copy.deepcopy(self._allocations),
        }

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any],
        policy: Policy,
        *,
        topology: TopologySpec | None = None,
        fleet_size: int | Mapping[str, int] | None = None,
        fleet_nodes: Iterable[str] | Mapping[str, Iterable[str]] | None = None,
        settings: GuardSettings | None = None,
    ) -> "RemediationEngine":
        """Rebuild an engine from :meth:`to_state` output (plus the same constructor
        arguments). Raises ``ValueError`` for an unknown state format."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"remediation state format {state.get('format')!r}, expected {STATE_FORMAT}")
        eng = cls(policy, topology=topology, fleet_size=fleet_size, fleet_nodes=fleet_nodes, settings=settings)
        eng._actions = {k: TrackedAction.model_validate(v) for k, v in state["actions"].items()}
        eng._attributions = {k: SeenAttribution.model_validate(v) for k, v in state["attributions"].items()}
        eng._breakers = {k: CircuitBreaker.model_validate(v) for k, v in state["breakers"].items()}
        eng._history = {c: {h: dict(i) for h, i in hosts.items()} for c, hosts in state["history"].items()}
        eng._xids = {k: dict(v) for k, v in state["xids"].items()}
        eng._certified = {c: dict(v) for c, v in state["certified"].items()}
        eng._allocations = {c: {w: dict(v) for w, v in wls.items()} for c, wls in state.get("allocations", {}).items()}
        return eng

    # --- proposal ---------------------------------------------------------------------------

    def _specs(self, att: Attribution, incident: str) -> list[_Spec]:
        if att.status == "withdrawn":
            # a stream worker withdrew this fabric/incident verdict (correlators.fabric.withdrawal):
            # what it called for lapses like a cleared cause; it is no ambiguous verdict to recertify
            return []
        facts = verdict_facts(att, self._note_xid(att))
        rule = self.policy.select(att, facts)
        cluster = att.scope.cluster
        final = g.check_final(att)
        known = self.known_nodes(att)
        if att.quality in ("ambiguous", "insufficient"):
            return self._recertify_spec(att, incident, rule, final, known)
        if rule is None:
            return []
        quality = g.check_quality(att)
        specs: list[_Spec] = []
        last_on: dict[str, str] = {}
        refused: dict[str, None] = {}  # why each refused name is not a target, in order
        withheld: dict[str, ActionMode] = {}  # "drain (host)" -> its mode
        corroboration = Corroboration.of(att)
        unsupported: dict[str, None] = {}  # why each disruptive target is not corroborated, in order
        unsupported_hosts: dict[str, None] = {}
        downgraded: dict[str, ActionMode] = {}  # "drain (host)" -> its mode
        for pa in rule.actions:
            targets, problems = self._targets(att, pa, known)
            if problems:
                refused.update(dict.fromkeys(problems))
                withheld.setdefault(f"{pa.action} ({pa.target})", self.policy.mode_of(pa))
            if pa.action in DISRUPTIVE:
                targets, why, hosts_held = self._corroborated(targets, corroboration)
                if why:
                    unsupported.update(dict.fromkeys(why))
                    unsupported_hosts.update(dict.fromkeys(hosts_held))
                    downgraded.setdefault(f"{pa.action} ({pa.target})", self.policy.mode_of(pa))
            for target, hosts, subjects in targets:
                aid = content_id("act", cluster, incident, target.model_dump(mode="json"), pa.action)
                chain_key = subjects[0] if subjects else ""
                after = last_on.get(chain_key)
                reason = f"rule {rule.id}: {att.root_cause.text}"
                if rule.source:
                    reason += f" [{rule.source}]"
                if after:
                    reason += f"; runs after {self._kind_of(specs, after)} {after}"
                plan: list[CertificationGroup] = []
                if pa.action == "recertify":
                    plan = plan_screen(hosts or subjects, self.domains, self._healthy(cluster, subjects),
                                       test=pa.test or self.policy.ambiguous.test)
                specs.append(
                    _Spec(
                        action_id=aid, target=target, kind=pa.action, severity=pa.effective_severity,
                        mode=self.policy.mode_of(pa), subjects=subjects,
                        hosts=hosts if pa.action in DISRUPTIVE else [],
                        requires_certification=pa.requires_certification, after=after, reason=reason,
                        plan=plan, verdict_guards=[final, quality],
                    )
                )
                last_on[chain_key] = aid
        if refused:
            specs.append(self._refusal_spec(att, incident, f"rule {rule.id}", list(refused), withheld, [final, quality]))
        if unsupported:
            specs.append(self._downgrade_spec(att, incident, f"rule {rule.id}", list(unsupported),
                                              sorted(unsupported_hosts), downgraded, [final, quality]))
        return specs

    @staticmethod
    def _corroborated(targets: list[tuple[RemediationTarget, list[str], list[str]]], corroboration: Corroboration
                      ) -> tuple[list[tuple[RemediationTarget, list[str], list[str]]], list[str], list[str]]:
        """The targets of a disruptive action that the verdict's deciding evidence corroborates
        (:class:`~correlators.remediation.targets.Corroboration`), why each other one is not,
        and the hosts of those others (a port's: none)."""
        kept, why, held = [], [], []
        for target, hosts, subjects in targets:
            if target.port is not None:
                problems = [p for p in [corroboration.port_problem(target.port, hosts)] if p]
            else:
                problems = [p for p in (corroboration.problem(h) for h in hosts) if p]
            if problems:
                why += problems
                held += [h for h in hosts if target.port is None and corroboration.problem(h)]
            else:
                kept.append((target, hosts, subjects))
        return kept, why, held

    def _downgrade_spec(self, att: Attribution, incident: str, origin: str, problems: list[str], hosts: list[str],
                        withheld: Mapping[str, ActionMode], verdict_guards: list[GuardResult]) -> _Spec:
        """The ``notify`` proposed instead of disruptive actions whose targets the verdict's
        deciding evidence does not corroborate: the hosts concerned as its target (known nodes,
        never taken out by it), the reasons in its ``target_corroborated`` guard (passed: a
        notification may go out) and reason, the mode of the first withheld action."""
        held = ", ".join(withheld) or "none"
        why = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        detail = f"notify only: {why}; withheld: {held}; a person decides"
        guard = GuardResult(guard=g.TARGET_CORROBORATED, passed=True, detail=detail)
        target = RemediationTarget(hosts=hosts)
        return _Spec(
            action_id=content_id("act", att.scope.cluster, incident, target.model_dump(mode="json"), "notify",
                                 "target_corroborated"),
            target=target, kind="notify", severity=SEVERITY["notify"],
            mode=next(iter(withheld.values()), self.policy.default_mode), subjects=[], hosts=[],
            reason=f"{origin}: {att.root_cause.code}: {detail}", verdict_guards=[*verdict_guards, guard],
        )

    def _refusal_spec(self, att: Attribution, incident: str, origin: str, problems: list[str],
                      withheld: Mapping[str, ActionMode], verdict_guards: list[GuardResult]) -> _Spec:
        """The ``notify`` proposed instead of actions whose targets are not known nodes: an
        empty target (a refused name is never put in one), the refusals in its
        ``target_known`` guard and reason, the mode of the first withheld action."""
        held = ", ".join(withheld) or "none"
        why = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        detail = f"not a target, evidence only: {why}; withheld: {held}; a person decides"
        guard = GuardResult(guard=g.TARGET_KNOWN, passed=True, detail=detail)
        target = RemediationTarget()
        return _Spec(
            action_id=content_id("act", att.scope.cluster, incident, target.model_dump(mode="json"), "notify",
                                 "target_known"),
            target=target, kind="notify", severity=SEVERITY["notify"],
            mode=next(iter(withheld.values()), self.policy.default_mode), subjects=[], hosts=[],
            reason=f"{origin}: {att.root_cause.code}: {detail}", verdict_guards=[*verdict_guards, guard],
        )

    def _recertify_spec(self, att: Attribution, incident: str, rule: Rule | None, final: GuardResult,
                        known: KnownNodes) -> list[_Spec]:
        hosts = set(att.culprits.hosts) | {h for alt in att.alternatives for h in alt.hosts}
        if not hosts:
            hosts = set(att.affected.hosts)
        if not hosts:
            return []
        problems = [p for p in (known.problem(h) for h in sorted(hosts, key=str)) if p]
        suspects = sorted(h for h in hosts if h in known)
        withheld = [f"{pa.action} ({pa.target})" for pa in rule.actions] if rule else []
        cluster = att.scope.cluster
        amb = self.policy.ambiguous
        quality = g.check_quality(att, withheld)
        specs: list[_Spec] = []
        if suspects:
            target = RemediationTarget(hosts=suspects)
            alts = ", ".join(a.code for a in att.alternatives)
            reason = (
                f"{att.quality} verdict: {att.root_cause.code}"
                + (f" vs {alts}" if alts else "")
                + f"; recertify {len(suspects)} host(s) before any repair (NVCRE screen -> halve -> pair)"
            )
            specs.append(_Spec(
                action_id=content_id("act", cluster, incident, target.model_dump(mode="json"), "recertify"),
                target=target, kind="recertify", severity=amb.severity,
                mode=amb.mode or self.policy.default_mode, subjects=suspects, hosts=[], reason=reason,
                plan=plan_screen(suspects, self.domains, self._healthy(cluster, suspects), test=amb.test),
                verdict_guards=[final, quality],
            ))
        if problems:
            specs.append(self._refusal_spec(att, incident, f"{att.quality} verdict", problems,
                                            {"recertify (hosts)": amb.mode or self.policy.default_mode},
                                            [final, quality]))
        return specs

    def _targets(self, att: Attribution, pa: PolicyAction,
                 known: KnownNodes) -> tuple[list[tuple[RemediationTarget, list[str], list[str]]], list[str]]:
        """(target, hosts taken out, subjects) for each concrete target of ``pa`` whose names
        are known nodes (or cabled ports), and why each other name is refused."""
        names = sorted(set(att.culprits.hosts), key=str)
        problems = [p for p in (known.problem(h) for h in names) if p]
        hosts = [h for h in names if h in known]
        if pa.target == "host":
            return [(RemediationTarget(host=h), [h], [h]) for h in hosts], problems
        if pa.target == "gpu":
            if len(names) == 1 and hosts and att.culprits.gpus:
                return [(RemediationTarget(host=hosts[0], gpu=gpu), hosts, hosts) for gpu in att.culprits.gpus], problems
            return [(RemediationTarget(host=h), [h], [h]) for h in hosts], problems
        if pa.target == "port":
            # a fabric verdict names both ends of a cable (switch/port and host/hca/port): act
            # on the switch end, the one a fabric manager can disable
            ports = sorted(set(att.culprits.ports), key=str)
            ports = [p for p in ports if p.count("/") < 2] or ports
            out, problems = [], []
            for p in ports:
                bad = port_problem(p)
                cabled = self.domains.hosts_of_port(p) if bad is None else []
                if bad is None and not cabled:
                    bad = "not a port the topology cables to a host"
                elif bad is None and not all(h in known for h in cabled):
                    bad = "cabled to a host that is not a valid node name"
                if bad:
                    problems.append(f"port {shown(p)}: {bad}")
                else:
                    out.append((RemediationTarget(port=p), cabled, [p]))
            return out, problems
        return ([(RemediationTarget(hosts=hosts), hosts, hosts)] if hosts else []), problems

    @staticmethod
    def _kind_of(specs: list[_Spec], action_id: str) -> str:
        return next((s.kind for s in specs if s.action_id == action_id), "step")

    def _propose(self, att: Attribution, incident: str, s: _Spec, workloads: list[str]) -> list[RemediationAction]:
        at = att.decided_at
        record = RemediationAction(
            action_id=s.action_id,
            attribution_id=att.attribution_id,
            incident_id=att.incident_id,
            cluster=att.scope.cluster,
            target=s.target,
            action=s.kind,
            mode=s.mode,
            policy_id=self.policy.policy_id,
            policy_version=self.policy.version,
            cause_code=att.root_cause.code,
            severity=s.severity,
            state="proposed",
            sequence=1,
            reason=s.reason,
            plan=s.plan,
            created_at=at,
            updated_at=at,
            expires_at=at + self.settings.proposal_ttl_s * NS,
        )
        t = TrackedAction(
            action=record, incident=incident, after=s.after, sources=[att.attribution_id],
            subjects=s.subjects, hosts=s.hosts, workloads=workloads, disruptive=s.kind in DISRUPTIVE,
            requires_certification=s.requires_certification, policy_mode=s.mode,
            source_guards={att.attribution_id: s.verdict_guards},
        )
        self._actions[s.action_id] = t
        guards, mode = self._evaluate(t, at)
        t.action = record.model_copy(update={"guards": guards, "mode": mode})
        out = [t.action]
        if t.admitted and mode == "auto":
            out.append(self._auto_approve(t, at))
        return out

    def _reevaluate(self, t: TrackedAction, at: int) -> list[RemediationAction]:
        guards, mode = self._evaluate(t, at)
        out: list[RemediationAction] = []
        if guards != t.action.guards or mode != t.action.mode:
            out.append(self._move(t, "proposed", at, guards=guards, mode=mode))
        if t.admitted and mode == "auto":
            out.append(self._auto_approve(t, at))
        return out

    def _auto_approve(self, t: TrackedAction, at: int) -> RemediationAction:
        by = f"policy:{self.policy.policy_id}@{self.policy.version}"
        return self._move(t, "approved", at, decision=Decision(by=by, at=at, reason="auto mode: all guards passed"))

    def _evaluate(self, t: TrackedAction, at: int) -> tuple[list[GuardResult], ActionMode]:
        """Run the guards for ``t`` at ``at``; sets ``t.admitted`` and, when admitted and
        disruptive, counts it in the breaker. Returns (results, mode)."""
        s = self.settings
        results = t.verdict_guards()
        cluster = t.action.cluster
        if t.disruptive:
            held = self._held(cluster, exclude=t.action_id)
            hist = self._history.get(cluster, {})
            incidents = {h: list(hist.get(h, {}).items()) for h in t.hosts}
            results.append(g.check_cooldown(t.hosts, t.incident, at, incidents, s.cooldown_s))
            results.append(g.check_escalation(t.hosts, t.incident, at, incidents, s.escalation))
            results.append(g.check_domain_budget(t.hosts, {h for h, _ in held}, self.domains, s.domain_budget))
            by_wl: dict[str, set[str]] = {}
            for host, other in held:
                for wl in other.workloads:
                    by_wl.setdefault(wl, set()).add(host)
            results.append(g.check_workload_budget(t.hosts, t.workloads, by_wl, s.workload_budget))
            others_ok = all(r.passed for r in results)
            breaker = self._breaker(cluster)
            results.append(
                breaker.check(t.action_id, t.hosts, at, self._fleet_size(cluster), s.circuit_breaker, count=others_ok)
            )
        t.admitted = all(r.passed for r in results)
        if t.admitted and t.disruptive:
            self._breaker(cluster).admit(t.action_id, t.hosts, at)
        mode = t.policy_mode
        if not t.admitted and mode == "auto":
            mode = "needs_approval"
        return results, mode

    # --- lifecycle helpers ------------------------------------------------------------------

    def _move(self, t: TrackedAction, to: str, at: int, **changes: Any) -> RemediationAction:
        t.action = advance(t.action, to, at=at, **changes)
        return t.action

    def _end(self, t: TrackedAction, to: str, at: int, **changes: Any) -> list[RemediationAction]:
        """Move ``t`` to a terminal state; a step that did not succeed takes its chain's
        unstarted later steps with it (no reboot after a cancelled drain)."""
        out = [self._move(t, to, at, **changes)]
        if to != "done":
            for nxt in self._actions.values():
                if nxt.after == t.action_id and nxt.state in ("proposed", "approved") and nxt.started_at is None:
                    out += self._end(nxt, "cancelled", at, reason=f"its predecessor {t.action.action} {t.action_id} is {to}")
        return out

    def _hold(self, t: TrackedAction) -> str:
        """Why an approved action may not start now ('' if it may)."""
        if t.after is not None:
            prev = self._actions.get(t.after)
            if prev is not None and prev.executed_at is None and prev.state != "done":
                return f"waits for {prev.action.action} {prev.action_id} ({prev.state})"
        if t.disruptive and self._breaker(t.action.cluster).tripped:
            return f"circuit breaker of cluster {t.action.cluster!r} is tripped"
        return ""

    def _chain(self, t: TrackedAction) -> list[TrackedAction]:
        """``t`` and every action linked to it through ``after`` (both directions)."""
        members = {t.action_id: t}
        changed = True
        while changed:
            changed = False
            for other in self._actions.values():
                if other.action_id in members:
                    continue
                if other.after in members or any(m.after == other.action_id for m in members.values()):
                    members[other.action_id] = other
                    changed = True
        return list(members.values())

    def _reset_breaker(self, cmd: RemediationCommand, cid: str) -> list[RemediationAction]:
        """Close a tripped breaker (a closed one is left as it is, its ledger included):
        approved actions it held that are older than ``stale_after_s`` are cancelled (not
        replayed); the proposals it blocked stay proposed for a person, with a progress record
        saying so; the ledger keeps the admissions of every action that has not ended."""
        breaker = self._breaker(cmd.cluster)
        if cid in breaker.resets:
            return []
        breaker.resets.append(cid)
        if not breaker.tripped:
            return []
        tripped = breaker.detail
        stale_s = self.settings.circuit_breaker.stale_after_s
        out: list[RemediationAction] = []
        blocked: list[TrackedAction] = []
        for t in list(self._actions.values()):
            a = t.action
            if a.cluster != cmd.cluster or not t.disruptive or t.started_at is not None or t.state in TERMINAL:
                continue
            if a.state == "proposed" and any(r.guard == g.CIRCUIT_BREAKER and not r.passed for r in a.guards):
                blocked.append(t)
            elif a.state == "approved":
                since = max(a.created_at, a.decision.at if a.decision else 0)
                if cmd.at - since > stale_s * NS:
                    out += self._end(t, "cancelled", cmd.at, reason=(
                        f"stale at breaker reset by {cmd.by}: approved {(cmd.at - since) // NS} s before "
                        f"(stale_after_s {stale_s}); not replayed"))
        breaker.reset(keep=[aid for aid, t in self._actions.items() if t.state not in TERMINAL])
        note = GuardResult(guard=g.CIRCUIT_BREAKER, passed=False, detail=(
            f"blocked while the breaker was tripped ({tripped}); reset by {cmd.by} at {format_utc(cmd.at)}: "
            "not replayed, waits for a person's approval"))
        for t in blocked:
            if t.state != "proposed":  # a cancelled predecessor took it along
                continue
            guards = [note if r.guard == g.CIRCUIT_BREAKER else r for r in t.action.guards]
            mode = "needs_approval" if t.action.mode == "auto" else t.action.mode
            out.append(self._move(t, "proposed", cmd.at, guards=guards, mode=mode))
        return out

    # --- state helpers ----------------------------------------------------------------------

    def _get(self, action_id: str | None) -> TrackedAction:
        t = self._actions.get(action_id or "")
        if t is None:
            raise UnknownActionError(f"unknown remediation action {action_id!r}")
        return t

    def _breaker(self, cluster: str) -> CircuitBreaker:
        return self._breakers.setdefault(cluster, CircuitBreaker())

    def _fleet_size(self, cluster: str) -> int | None:
        if isinstance(self._fleet, int):
            return self._fleet
        if self._fleet is not None and not isinstance(self._fleet, int) and cluster in self._fleet:
            return self._fleet[cluster]
        fleet = self._fleet_nodes.get(cluster, self._fleet_nodes.get(None))
        if fleet:
            return len(fleet)
        return len(self.domains.hosts) if self._has_topology and self.domains.hosts else None

    def _pending(self, cluster: str, incident: str, subject: str) -> list[TrackedAction]:
        return [
            t
            for t in self._actions.values()
            if t.action.cluster == cluster
            and t.incident == incident
            and subject in t.subjects
            and t.state in ("proposed", "approved")
            and t.started_at is None
        ]

    def _held(self, cluster: str, exclude: str) -> list[tuple[str, TrackedAction]]:
        """(host, action) for hosts out of service: disruptive, non-terminal actions that were
        admitted by the guards or approved/started."""
        return [
            (h, t)
            for t in self._actions.values()
            if t.action_id != exclude
            and t.disruptive
            and t.action.cluster == cluster
            and t.state not in TERMINAL
            and (t.admitted or t.state != "proposed")
            for h in t.hosts
        ]

    def _healthy(self, cluster: str, exclude: Iterable[str]) -> list[str]:
        skip = set(exclude)
        return sorted(h for h in self._certified.get(cluster, {}) if h not in skip and valid_node_name(h))

    def _note_xid(self, att: Attribution) -> list[int]:
        """Record this verdict's root-cause XID on its GPU; return the decided_at of every
        verdict with that XID on that GPU (this one included)."""
        facts = verdict_facts(att)
        if facts.xid is None:
            return []
        hosts = sorted(set(att.culprits.hosts))
        host = hosts[0] if len(hosts) == 1 else ",".join(hosts)
        gpu = att.culprits.gpus[0] if att.culprits.gpus else None
        gpu_key = (gpu.uuid or gpu.pci_bus_id or str(gpu.index)) if gpu else "?"
        key = "|".join((att.scope.cluster, host, gpu_key, str(facts.xid)))
        seen = self._xids.setdefault(key, {})
        seen.setdefault(att.attribution_id, att.decided_at)
        return sorted(seen.values())

    def _prune(self, now: int) -> None:
        s = self.settings
        keep_ns = max(s.escalation.period_s, s.cooldown_s, s.circuit_breaker.window_s, 86400) * NS
        repeat_ns = max(
            [r.match.repeated.within_s for r in self.policy.rules if r.match.repeated] + [86400]
        ) * NS
        for breaker in self._breakers.values():
            breaker.prune(keep_ns)
        for hosts in self._history.values():
            for host in list(hosts):
                hosts[host] = {i: t for i, t in hosts[host].items() if t > now - keep_ns}
                if not hosts[host]:
                    del hosts[host]
        for workloads in self._allocations.values():
            for wl in [w for w, v in workloads.items() if v["at"] <= now - keep_ns]:
                del workloads[wl]
        for key in list(self._xids):
            self._xids[key] = {a: t for a, t in self._xids[key].items() if t > now - repeat_ns}
            if not self._xids[key]:
                del self._xids[key]
        self._attributions = {k: v for k, v in self._attributions.items() if v.at > now - keep_ns}
        self._actions = {
            k: t
            for k, t in self._actions.items()
            if t.state not in TERMINAL or t.action.updated_at > now - keep_ns
        }


