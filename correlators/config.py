"""The engine's configuration, passed in whole: rule pack, causal rules, fabric policy and
window policy.

Nothing in ``correlators/`` fetches a policy by itself once a driver holds an
:class:`EngineConfig`; every verdict carries :attr:`EngineConfig.ruleset_version`, which names
the version of each part, so two verdicts with equal versions were decided by the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from correlators.attribution import CausalRules, default_causal_rules
from correlators.drift import Baseline
from correlators.fabric import FabricPolicy, default_fabric_policy
from correlators.rules import RulePack, load_rule_pack
from correlators.timetext import NS


@dataclass(frozen=True)
class WindowPolicy:
    """When windows emit. ``allowed_lateness_s`` (seconds): how far behind the max event time
    an event may arrive and still be in the final verdict. ``idle_timeout_s`` (seconds of
    driver wall-clock; None in batch replay and in tests that need exact results): a live
    window that saw nothing new for this long is closed. ``decisive_weight`` (0..1): cause
    weight from which a single event triggers a provisional verdict. ``fabric_flush_s``
    (seconds of driver wall-clock): a cluster's fabric evidence is re-decided at most this
    often; what arrives sooner is decided together at the next flush.
    ``provisional_interval_s`` (seconds of driver wall-clock; 0: every change is published): a
    workload's provisional revisions are coalesced -- the first is published at once, the next
    no sooner than this after the previous one, and only when what the verdict says changed
    (:func:`correlators.windows.verdict_content`); what arrives in between is published by the
    driver's next tick (:meth:`correlators.pipeline.Pipeline.idle`) or by the final verdict,
    which is never held."""

    allowed_lateness_s: float = 30.0
    idle_timeout_s: float | None = 10.0
    decisive_weight: float = 0.9
    fabric_flush_s: float = 2.0
    provisional_interval_s: float = 0.0

    @property
    def lateness_ns(self) -> int:
        return int(self.allowed_lateness_s * NS)


@dataclass(frozen=True)
class EngineConfig:
    """Everything a decision depends on besides its input.

    ``pack``: the rule pack (``correlators/rules``); ``causal``: what events mean for a verdict
    (``correlators/causal.yaml``); ``fabric``: the fabric correlator's thresholds
    (``correlators/fabric.yaml``); ``window``: when the stream's windows emit (it changes when a
    verdict is published, never what it says, so it is not part of the version); ``baseline``:
    the stack versions a recipe pins (:class:`correlators.drift.Baseline`, read by
    :func:`connectors.aicr.load_recipe`), or None to compare each node with its peers only."""

    pack: RulePack
    causal: CausalRules
    fabric: FabricPolicy
    window: WindowPolicy = field(default_factory=WindowPolicy)
    baseline: Baseline | None = None

    @classmethod
    def default(cls, window: WindowPolicy | None = None) -> "EngineConfig":
        """The packaged rule pack and policies. Raises the loaders' errors
        (``RulePackError``, ``CausalRulesError``, ``FabricPolicyError``) for invalid files."""
        return cls(pack=load_rule_pack(), causal=default_causal_rules(), fabric=default_fabric_policy(),
                   window=window or WindowPolicy())

    @property
    def ruleset_version(self) -> str:
        """``<pack>+causal.<causal>+fabric.<fabric>``, e.g. ``2026.12.0+causal.7+fabric.1``;
        with a baseline ``+recipe.<name>.<digest of its constraints>`` follows."""
        version = f"{self.pack.version}+causal.{self.causal.version}+fabric.{self.fabric.version}"
        if self.baseline is not None:
            version += f"+recipe.{self.baseline.name}.{self.baseline.digest}"
        return version
