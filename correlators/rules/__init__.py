"""The extraction rule pack: declarative rules (YAML, one file per domain) that turn an
:class:`~schemas.records.Observation` into typed :class:`~schemas.records.Event` s.

Contract::

    pack = load_rule_pack()            # cached default pack; load_rule_pack([extra.yaml]) adds rules
    pack.version                       # "2026.12.0" -> Attribution.ruleset_version
    pack.keywords                      # literals; every record a log rule can match holds one
    pack.prefilter_keywords            # keywords + the error-severity literals (unrecognised)
    pack.rules                         # tuple[Rule, ...] in file order
    pack.extract(obs) -> list[Event]   # events in rule order, each .with_id()
    pack.may_extract(body) -> bool     # False: extract yields nothing from a log record with this body

Modules: :mod:`correlators.rules.loader` (rule files -> validated rules, the file format),
:mod:`correlators.rules.engine` (:class:`RulePack`: prefilter, keyword automaton,
extraction), :mod:`correlators.rules.model` (what a rule is), :mod:`correlators.rules.code`
and ``hooks_<domain>.py`` (code hooks of rules that need more than a pattern).
"""

from __future__ import annotations

from correlators.rules.code import Draft
from correlators.rules.engine import RulePack
from correlators.rules.loader import RULES_DIR, RULESET_VERSION, default_rule_files, load_rule_pack
from correlators.rules.model import Example, FieldSpec, Rule, RuleError

__all__ = [
    "RULESET_VERSION",
    "RULES_DIR",
    "Example",
    "FieldSpec",
    "Rule",
    "RulePack",
    "RuleError",
    "Draft",
    "default_rule_files",
    "load_rule_pack",
]
