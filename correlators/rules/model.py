"""What one extraction rule is, once its YAML entry is validated (pure: no I/O).

:class:`Rule` and the parts it holds (:class:`FieldSpec`, :class:`Condition`,
:class:`Example`) are built by :mod:`correlators.rules.loader` from the rule files and run by
:class:`correlators.rules.engine.RulePack`; :class:`RuleError` is the error of either for an
invalid rule. :data:`EVENT_FIELDS` are the event fields a named group may fill (``to:``),
:data:`FIELD_TYPES` the value types of a field, :data:`MISSING` the value of a field that did
not match or did not convert (it is left out of the event).
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["EVENT_FIELDS", "FIELD_TYPES", "MISSING", "Condition", "Example", "FieldSpec", "Rule", "RuleError"]

#: Event fields (not attributes) a named group or a field's ``to:`` may fill.
EVENT_FIELDS = ("host", "rank", "gpu_index", "gpu_pci", "peer")
#: Value types of a field (``fields.<group>.type``); see :mod:`correlators.rules.loader`.
FIELD_TYPES = ("str", "int", "float", "hex", "bool", "present", "signal", "signal_name",
               "bytes", "lower")
#: A field value that is absent (the group did not match, or the text did not convert).
MISSING = object()


class RuleError(ValueError):
    """A rule file is invalid. The message names the file, the rule id and the field."""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """Where one named group (or, for telemetry, one metric key) goes, and how it is typed."""

    group: str
    to: str = "attr"  # "attr" or one of EVENT_FIELDS
    attr: str = ""
    type: str = "str"
    map: Mapping[str, Any] | None = None
    otherwise: Any = MISSING  # YAML key "else"


@dataclass(frozen=True, slots=True)
class Condition:
    """A telemetry condition ``metric op value`` (op: > >= < <= == !=), or ``metric op other``
    comparing two readings of one sample (``pcie_link_width < pcie_link_width_max``); a
    condition naming a metric the sample lacks does not hold."""

    metric: str
    op: str
    value: float
    other: str | None = None

    #: the operators a condition may name
    OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
            "==": operator.eq, "!=": operator.ne}

    def holds(self, metric: Mapping[str, float]) -> bool:
        v = metric.get(self.metric)
        ref = metric.get(self.other) if self.other else self.value
        return v is not None and ref is not None and self.OPS[self.op](v, ref)


@dataclass(frozen=True, slots=True)
class Example:
    """An example of a rule: a real ``line``/multi-line ``text`` (or a telemetry ``metric``
    dict) and the events the rule must yield from it (``expect``: list of partial events;
    empty for a negative example)."""

    text: str | None
    metric: Mapping[str, float] | None
    expect: tuple[Mapping[str, Any], ...]
    note: str = ""


@dataclass(frozen=True, slots=True)
class Rule:
    """One extraction rule (the YAML shape: :mod:`correlators.rules.loader`)."""

    id: str
    version: int
    source: str
    file: str
    kind: str  # "log" | "telemetry"
    event: str
    events: tuple[str, ...]
    keywords: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    match_all: bool = False
    fields: tuple[FieldSpec, ...] = ()
    attributes: Mapping[str, Any] = field(default_factory=dict)
    backdate_ms: str | None = None
    unless: tuple[str, ...] = ()
    exclusive: bool = False
    fallback: bool = False
    code: str | None = None
    when: tuple[Condition, ...] = ()
    when_any: tuple[Condition, ...] = ()
    unless_metric: tuple[Condition, ...] = ()
    examples: tuple[Example, ...] = ()

    @property
    def ref(self) -> str:
        """``<id>@<version>``, the value of ``Event.rule``."""
        return f"{self.id}@{self.version}"
