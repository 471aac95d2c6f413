"""Remediation policy: which actions a verdict calls for.

A policy is a YAML document (the packaged default is ``correlators/remediation/policy.yaml``),
validated at load by pydantic; any error becomes a :class:`PolicyError` naming the file and the
path of the bad field (``rules.3.actions.0.action: Input should be 'cordon', ...``).

Shape (every key but ``version`` has a default)::

    version: "2026.12-1"          # recorded on every action as policy_version
    policy_id: faultstream-default
    default_mode: dry_run         # auto | needs_approval | dry_run, for actions without `mode`
    guards: {...}                 # correlators.remediation.guards.GuardSettings
    ambiguous: {mode, test, severity}   # the recertify proposed for ambiguous/insufficient verdicts
    rules:                        # ordered, first match wins
      - id: gpu-fell-off-bus
        source: "where this default comes from"
        match: {code: [...], code_prefix: [...], domain: [...], outcome: [...], xid: [...],
                with_xid: [...], xid_hint: [...], culprit: host|gpu|port,
                repeated: {count: 2, within_s: 86400}}
        actions:                  # in order: a chain per target (the 2nd waits for the 1st)
          - {action: drain, target: host, mode: dry_run, severity: 30,
             requires_certification: true, test: dcgm-diag-r2}
    xid_buckets:                  # XID catalog immediate-action bucket -> actions
      RESET_GPU: {source: ..., actions: [...]}
    fallback: {source: ..., match: {...}, actions: [...]}   # after everything else

Rule order at match time: ``rules``, then one generated rule per XID code of the catalog
(``correlators.xid``: the code's ``immediate_action`` bucket looked up in ``xid_buckets``;
codes the catalog marks sympathetic use the pseudo-bucket ``SYMPATHETIC``, codes with a blank
action ``UNLISTED``), then ``fallback``. A rule with an empty ``actions`` list matches and
proposes nothing (sympathetic XIDs, completed workloads).

All fields of ``match`` that are given must hold (AND); inside one field any listed value
matches (OR). ``xid`` is the XID number of the verdict's root cause (``gpu.xid.N`` or
``app.xid.N``); ``with_xid`` any XID among the verdict's cause evidence; ``xid_hint`` XID 154's
recovery hint (``RESET_GPU``, ``DRAIN_AND_RESET``, ``RESTART_BM``, ``NONE``); ``culprit`` that
the verdict names at least one culprit of that kind; ``repeated`` that the same XID was the
root cause on the same GPU in at least ``count`` distinct verdicts within ``within_s`` seconds
(this one included; NVSentinel: "XID 31 twice on the same GPU in 24 hours means run
diagnostics").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from correlators import xid as xid_catalog
from correlators.remediation.guards import GuardSettings
from schemas.records import ActionKind, ActionMode, Attribution, Domain, Outcome

#: Default severity of each action kind: a pending proposal is upgraded in place by a more
#: severe one (Together AI). Higher = more disruptive / harder to undo.
SEVERITY: dict[str, int] = {
    "notify": 0,
    "recertify": 10,
    "cordon": 20,
    "disable_port": 25,
    "drain": 30,
    "reset_gpu": 40,
    "reboot": 50,
    "swap_hot_spare": 60,
    "reprovision": 70,
    "rma": 80,
}

#: Action kinds that take capacity out of service (what the circuit breaker, the budgets, the
#: cooldown and the escalation count). ``notify`` and ``recertify`` do not.
DISRUPTIVE: frozenset[str] = frozenset(SEVERITY) - {"notify", "recertify"}

#: Pseudo-buckets for ``xid_buckets``: catalog codes that are side effects of another error
#: (``correlators.xid.is_sympathetic``), and codes whose action cell is blank or unknown.
SYMPATHETIC = "SYMPATHETIC"
UNLISTED = "UNLISTED"

TargetKind = Literal["host", "gpu", "port", "hosts"]

#: XID 154 recovery hints, as ``correlators.xid.recovery_action`` normalises them.
XID_HINTS = frozenset(xid_catalog.RECOVERY_ACTIONS.values())


class PolicyError(ValueError):
    """A policy file that cannot be used. The message names the file and the field path."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PolicyAction(_Model):
    """One action of a rule.

    ``target``: ``host`` (one action per culprit host), ``gpu`` (one per culprit GPU, placed
    on the culprit host when the verdict names exactly one; else one per host with the GPU
    unknown), ``port`` (one per culprit fabric port), ``hosts`` (one action for all culprit
    hosts together -- a recertify plan, a notification). ``mode`` defaults to the policy's ``default_mode``,
    ``severity`` to :data:`SEVERITY`. ``requires_certification``: the action reaches ``done``
    (the node returns to service) only when a passing certification of the host finished
    after it (and its chain) ran. ``test``: the certification test a ``recertify`` asks for."""

    action: ActionKind
    target: TargetKind = "host"
    mode: ActionMode | None = None
    severity: int | None = Field(default=None, ge=0)
    requires_certification: bool = False
    test: str | None = None

    @model_validator(mode="after")
    def _coherent(self) -> "PolicyAction":
        if self.requires_certification and self.target not in ("host", "gpu"):
            raise ValueError(f"requires_certification needs target host or gpu (one node), not {self.target}")
        if self.target == "port" and self.action not in ("disable_port", "notify"):
            raise ValueError(f"a port target takes disable_port or notify, not {self.action}")
        if self.action == "disable_port" and self.target != "port":
            raise ValueError("disable_port needs target: port")
        if self.test is not None and self.action != "recertify":
            raise ValueError("test is only for recertify")
        return self

    @property
    def effective_severity(self) -> int:
        return SEVERITY[self.action] if self.severity is None else self.severity


class Repeat(_Model):
    """``count`` verdicts with the same XID on the same GPU within ``within_s`` seconds."""

    count: int = Field(ge=2)
    within_s: int = Field(gt=0)


class Match(_Model):
    """Conditions on a verdict (see the module docstring)."""

    code: list[str] = Field(default_factory=list)
    code_prefix: list[str] = Field(default_factory=list)
    domain: list[Domain] = Field(default_factory=list)
    outcome: list[Outcome] = Field(default_factory=list)
    xid: list[int] = Field(default_factory=list)
    with_xid: list[int] = Field(default_factory=list)
    xid_hint: list[str] = Field(default_factory=list)
    culprit: Literal["host", "gpu", "port"] | None = None
    repeated: Repeat | None = None

    @field_validator("code", "code_prefix", "domain", "outcome", "xid", "with_xid", "xid_hint", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, (str, int)) else value

    @field_validator("xid_hint")
    @classmethod
    def _known_hint(cls, value: list[str]) -> list[str]:
        for hint in value:
            if hint not in XID_HINTS:
                raise ValueError(f"unknown XID 154 hint {hint!r}; known: {sorted(XID_HINTS)}")
        return value

    def matches(self, att: Attribution, facts: "VerdictFacts") -> bool:
        """True when every given condition holds for ``att`` (with its derived ``facts``)."""
        code = att.root_cause.code
        if self.code and code not in self.code:
            return False
        if self.code_prefix and not any(code.startswith(p) for p in self.code_prefix):
            return False
        if self.domain and att.domain not in self.domain:
            return False
        if self.outcome and att.outcome not in self.outcome:
            return False
        if self.xid and facts.xid not in self.xid:
            return False
        if self.with_xid and not facts.evidence_xids.intersection(self.with_xid):
            return False
        if self.xid_hint and facts.xid_hint not in self.xid_hint:
            return False
        if self.culprit == "host" and not att.culprits.hosts:
            return False
        if self.culprit == "gpu" and not att.culprits.gpus:
            return False
        if self.culprit == "port" and not att.culprits.ports:
            return False
        if self.repeated is not None:
            since = att.decided_at - self.repeated.within_s * 1_000_000_000
            if sum(1 for t in facts.xid_times if t >= since) < self.repeated.count:
                return False
        return True


class Rule(_Model):
    """A named mapping from matching verdicts to an ordered list of actions. ``source`` says
    where the default comes from (catalog bucket, anchor practice)."""

    id: str = Field(min_length=1)
    source: str = ""
    match: Match = Field(default_factory=Match)
    actions: list[PolicyAction] = Field(default_factory=list)


class Bucket(_Model):
    """Actions for every XID code whose catalog ``immediate_action`` is this bucket."""

    source: str = ""
    actions: list[PolicyAction] = Field(default_factory=list)


class AmbiguousPolicy(_Model):
    """What an ``ambiguous`` or ``insufficient`` verdict gets: only a ``recertify`` of the
    suspect hosts (culprits and alternatives' hosts, else the affected hosts), with an
    NVCRE-style screening plan (:func:`correlators.remediation.bisection.plan_screen`)."""

    mode: ActionMode | None = None
    test: str = "nccl-allreduce"
    severity: int = Field(default=SEVERITY["recertify"], ge=0)


class Policy(_Model):
    """A validated remediation policy. Use :func:`load_policy` / :func:`parse_policy`."""

    version: str
    policy_id: str = "faultstream-default"
    default_mode: ActionMode = "dry_run"
    guards: GuardSettings = Field(default_factory=GuardSettings)
    ambiguous: AmbiguousPolicy = Field(default_factory=AmbiguousPolicy)
    rules: list[Rule] = Field(default_factory=list)
    xid_buckets: dict[str, Bucket] = Field(default_factory=dict)
    fallback: Rule | None = None

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    @field_validator("xid_buckets")
    @classmethod
    def _known_buckets(cls, value: dict[str, Bucket]) -> dict[str, Bucket]:
        known = catalog_buckets() | {SYMPATHETIC, UNLISTED}
        for name in value:
            if name not in known:
                raise ValueError(f"unknown XID catalog bucket {name!r}; known: {sorted(known)}")
        return value

    @model_validator(mode="after")
    def _unique_ids(self) -> "Policy":
        seen: set[str] = set()
        for rule in self.rules:
            if rule.id in seen:
                raise ValueError(f"duplicate rule id {rule.id!r}")
            seen.add(rule.id)
        return self

    @cached_property
    def _ordered(self) -> tuple[Rule, ...]:
        return (*self.rules, *_xid_rules(self), *([self.fallback] if self.fallback else []))

    def all_rules(self) -> list[Rule]:
        """The rules in match order: ``rules``, the XID rules generated from the catalog and
        ``xid_buckets`` (one per code, id ``xid-<code>``), then ``fallback``."""
        return list(self._ordered)

    def select(self, att: Attribution, facts: "VerdictFacts") -> Rule | None:
        """The first rule matching ``att``, or None when no rule does."""
        for rule in self._ordered:
            if rule.match.matches(att, facts):
                return rule
        return None

    def mode_of(self, action: PolicyAction) -> ActionMode:
        """The action's mode, or the policy's ``default_mode``."""
        return action.mode or self.default_mode


@dataclass(frozen=True)
class VerdictFacts:
    """What a verdict says beyond its fields, for matching.

    ``xid``: the root cause's XID number (``gpu.xid.N`` / ``app.xid.N``), else None.
    ``evidence_xids``: XIDs among the verdict's cause evidence. ``xid_hint``: XID 154's
    recovery hint. ``xid_times``: decided_at (UTC ns) of the distinct verdicts whose root cause
    was this XID on this GPU (this one included) -- the engine keeps that history."""

    xid: int | None = None
    evidence_xids: frozenset[int] = frozenset()
    xid_hint: str | None = None
    xid_times: tuple[int, ...] = field(default_factory=tuple)


_XID_CODE = re.compile(r"^(?:gpu|app)\.xid\.(\d+)$")
# correlators.attribution.summarise writes an XID event as "Xid <n>: <description>[ -> HINT]"
_XID_SUMMARY = re.compile(r"^Xid (\d+):")
_HINT_IN_TEXT = re.compile(r"\b(" + "|".join(sorted(XID_HINTS)) + r")\b")


def verdict_facts(att: Attribution, xid_times: Iterable[int] = ()) -> VerdictFacts:
    """Derive :class:`VerdictFacts` from ``att``.

    The XID number comes from the structured root-cause code. The other XIDs and XID 154's
    hint are read from the cause evidence written by ``correlators.attribution`` (summaries
    ``Xid 63: ...`` and ``... -> RESET_GPU``, root-cause text ``driver asks for RESET_GPU``),
    matching only the normalised tokens that module writes -- never free log text. If the
    verdict ever carries them as fields, this is the one place to change."""
    m = _XID_CODE.match(att.root_cause.code)
    code = int(m.group(1)) if m else None
    evidence: set[int] = set()
    hint: str | None = None
    for item in att.evidence:
        if item.role != "cause" or item.type != "gpu.xid":
            continue
        s = _XID_SUMMARY.match(item.summary)
        if s:
            evidence.add(int(s.group(1)))
            if int(s.group(1)) == 154 and " -> " in item.summary:
                h = _HINT_IN_TEXT.search(item.summary.split(" -> ", 1)[1])
                hint = h.group(1) if h else hint
    if code == 154 and hint is None:
        h = _HINT_IN_TEXT.search(att.root_cause.text)
        hint = h.group(1) if h else None
    if code is not None:
        evidence.add(code)
    return VerdictFacts(code, frozenset(evidence), hint, tuple(sorted(xid_times)))


def catalog_buckets() -> set[str]:
    """Every non-blank ``immediate_action`` bucket of the XID catalog."""
    return {i.immediate_action for i in xid_catalog.catalog().values() if i.immediate_action}


def xid_bucket(code: int) -> str:
    """The ``xid_buckets`` key for an XID code: ``SYMPATHETIC`` for side effects of another
    error, ``UNLISTED`` for blank/unknown catalog actions, else the catalog's
    ``immediate_action``."""
    if xid_catalog.is_sympathetic(code):
        return SYMPATHETIC
    bucket = xid_catalog.action_bucket(code)
    return UNLISTED if bucket in ("", xid_catalog.UNKNOWN_ACTION) else bucket


def _xid_rules(policy: Policy) -> list[Rule]:
    rules = []
    for code in sorted(xid_catalog.catalog()):
        bucket = xid_bucket(code)
        spec = policy.xid_buckets.get(bucket)
        if spec is None:
            continue
        rules.append(
            Rule(
                id=f"xid-{code}",
                source=f"XID catalog: XID {code} immediate action {xid_catalog.action_bucket(code) or 'blank'}"
                + (f" ({bucket})" if bucket in (SYMPATHETIC, UNLISTED) else "")
                + (f"; {spec.source}" if spec.source else ""),
                match=Match(xid=[code]),
                actions=list(spec.actions),
            )
        )
    return rules


# --- loading ----------------------------------------------------------------------------------

DEFAULT_POLICY = "policy.yaml"


def parse_policy(text: str, *, origin: str = "<policy>") -> Policy:
    """Parse and validate policy YAML text. Raises :class:`PolicyError` naming ``origin`` and
    the path of each bad field."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{origin}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise PolicyError(f"{origin}: a policy is a mapping with at least 'version', got {type(data).__name__}")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(f"{origin}: {_describe(exc)}") from exc


def load_policy(path: str | Path | None = None) -> Policy:
    """Load the policy at ``path``, or the packaged default (``policy.yaml`` beside this
    module, read with importlib.resources) when ``path`` is None."""
    if path is None:
        text = resources.files("correlators.remediation").joinpath(DEFAULT_POLICY).read_text("utf-8")
        return parse_policy(text, origin=f"correlators/remediation/{DEFAULT_POLICY}")
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    return parse_policy(text, origin=str(p))


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "<root>"
        msg = err["msg"]
        if err["type"] == "missing":
            msg = "required field missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)
