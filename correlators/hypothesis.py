"""Candidate causes of a workload's failure, and the texts they carry.

:class:`Hypothesis` is what :func:`correlators.attribution.propose` builds from cause events
and what the detectors (:mod:`correlators.detectors`) add from patterns across events; the
attribution then scores, merges and explains them. :func:`render_text` fills a cause rule's
or detector's text template from an event. Pure: no I/O.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import Any, Protocol

from correlators.timetext import NS
from schemas.records import TIME_QUALITY_TRANSPORT, Event, GpuRef

__all__ = ["KERNEL_TYPES", "NS", "TEXT_FORMAT", "Hypothesis", "SymptomWindow", "gpu_label", "hypothesis_ranks",
           "render_text"]


#: Event types read from kernel-side logs (dmesg, syslog, journald, switch logs).
KERNEL_TYPES = ("gpu.", "pcie.", "host.", "fabric.")


class SymptomWindow(Protocol):
    """What :meth:`Hypothesis.explains` reads of a symptom rule
    (:class:`correlators.attribution.SymptomRule`): the cause families it accepts (empty: any),
    whether the cause must be on the symptom's host, and how long before the cause (``lead_s``)
    and after its last evidence (``horizon_s``) the symptom may fall, in seconds."""

    @property
    def families(self) -> tuple[str, ...]: ...

    @property
    def same_host(self) -> bool: ...

    @property
    def lead_s(self) -> float: ...

    @property
    def horizon_s(self) -> float: ...


def gpu_label(gpu: GpuRef | None) -> str:
    """How texts name a GPU: its PCI bus id, else ``#<index>``, else its UUID, else ``?``."""
    if gpu is None:
        return "?"
    return gpu.pci_bus_id or (f"#{gpu.index}" if gpu.index is not None else gpu.uuid or "?")


class _Fmt(string.Formatter):
    def get_value(self, key, args, kwargs):  # noqa: D401 - formatter hook
        value = kwargs.get(key)
        return "?" if value is None else value


#: ``str.format`` for text templates where a missing or None value reads as ``?``
TEXT_FORMAT = _Fmt()


# what a text says when a placeholder had no value: "(GPU ?)" and "(pid ?)" go, "GPU ? of" and
# "rank ? on" become "a GPU of" / "a rank on"
_UNKNOWN = (
    (re.compile(r" \((?:GPU|pid|rank)s? \?\)"), ""),
    (re.compile(r"\b(GPU|rank)\(?s?\)? \? (of|on)\b"), r"a \1 \2"),
)


def render_text(template: str, event: Event | None, **extra: Any) -> str:
    """``template`` with the event's attributes, host, rank and GPU filled in; a value the
    event lacks reads as "?", and the phrases around an unknown GPU, pid or rank are
    reworded (:data:`_UNKNOWN`) so a text never shows "GPU ?"."""
    values: dict[str, Any] = {}
    if event is not None:
        values.update(event.attributes)
        values.update(host=event.host, rank=event.rank, gpu=gpu_label(event.gpu))
    values.update(extra)
    text = TEXT_FORMAT.format(template, **values)
    for pattern, repl in _UNKNOWN:
        text = pattern.sub(repl, text)
    return text


# --- hypotheses ------------------------------------------------------------------------------


@dataclass
class Hypothesis:
    """A candidate cause: its code, domain, supporting events and what it explains."""

    code: str
    family: str
    domain: str
    text: str
    job_wide: bool
    support: list[tuple[float, str, Event]] = field(default_factory=list)  # (weight, rule, event)
    extra_ranks: set[int] = field(default_factory=set)
    extra_hosts: set[str] = field(default_factory=set)
    derived_at: int | None = None
    derived_weight: float = 0.0
    explained: dict[str, Event] = field(default_factory=dict)
    #: sentences for the verdict's ``reasoning`` when this hypothesis wins (a detector's chain)
    reasons: list[str] = field(default_factory=list)
    #: codes of the weaker hypotheses this one absorbed (their events are its symptoms)
    absorbed: list[str] = field(default_factory=list)
    #: events shown as context when this hypothesis wins (earlier occurrences from history)
    context: list[Event] = field(default_factory=list)
    #: alternatives to list when this hypothesis wins: (code, domain, text, score, hosts, ranks)
    side_alternatives: list[tuple[str, str, str, float, tuple[str, ...], tuple[int, ...]]] = field(default_factory=list)
    #: the goodput a slow (not failed) cause costs (:class:`correlators.stragglers.Goodput`), or None
    goodput: Any = None

    @property
    def strength(self) -> float:
        """Noisy-OR of the best weight of each distinct supporting rule (0..1). A kernel-side
        event (driver, PCIe, host, fabric lines: every real collection of those carries a time)
        whose time is only the transport's counts at half weight: its own timestamp was
        missing or impossible, so where it sits in the timeline is a guess. Application
        lines are often timeless by nature and keep their weight."""
        best: dict[str, float] = {}
        for weight, rule, event in self.support:
            if event.time_quality <= TIME_QUALITY_TRANSPORT and event.type.startswith(KERNEL_TYPES):
                weight *= 0.5
            best[rule] = max(best.get(rule, 0.0), weight)
        if self.derived_weight:
            best["_derived"] = self.derived_weight
        miss = 1.0
        for weight in best.values():
            miss *= 1.0 - weight
        return round(1.0 - miss, 6)

    @property
    def at(self) -> int:
        """When the cause happened: the earliest supporting event (or the detector's time)."""
        times = [e.at for _, _, e in self.support]
        if self.derived_at is not None:
            times.append(self.derived_at)
        return min(times)

    @property
    def until(self) -> int:
        """When the cause was last seen: a derived fault event says how long its evidence
        lasted (``attributes.last_at``: a cable degrading for hours); else :attr:`at`."""
        ends = [e.attributes["last_at"] for _, _, e in self.support if isinstance(e.attributes.get("last_at"), int)]
        return max([self.at, *ends])

    @property
    def hosts(self) -> set[str]:
        """Culprit hosts: each supporting event's host, or the ``culprit_hosts`` a derived
        event names (a fabric fault names the host at the end of the cable, a switch, or a
        rack's hosts), plus hosts a detector added."""
        out = set(self.extra_hosts)
        for _, _, e in self.support:
            named = e.attributes.get("culprit_hosts")
            if isinstance(named, list) and named:
                out.update(named)
            elif e.host != "_scheduler":
                out.add(e.host)
        return out

    @property
    def events(self) -> list[Event]:
        """The supporting events, in the order they were added."""
        return [e for _, _, e in self.support]

    def absorb(self, other: "Hypothesis") -> None:
        """Take ``other``'s support, ranks and hosts into this hypothesis."""
        self.support.extend(other.support)
        self.extra_ranks |= other.extra_ranks
        self.extra_hosts |= other.extra_hosts

    def explains(self, symptom: Event, rule: SymptomWindow, skew_ns: int,
                 span: tuple[int, int, set[str]] | None = None) -> bool:
        """Whether this cause explains ``symptom`` under ``rule``: an accepted family, the same
        host when the rule asks for it (a job-wide cause is on every host), and the symptom's
        start within [cause - lead, last evidence + horizon], widened by ``skew_ns`` (ns).
        ``span``: this hypothesis's (:attr:`at`, :attr:`until`, :attr:`hosts`) when the caller
        has them (testing many symptoms against an unchanged hypothesis)."""
        if rule.families and self.family not in rule.families:
            return False
        at, until, hosts = span if span is not None else (self.at, self.until, None)
        if rule.same_host and not self.job_wide and symptom.host not in (hosts if hosts is not None else self.hosts):
            return False
        when = symptom.effective_at
        lo = at - int(rule.lead_s * NS) - skew_ns
        hi = until + int(rule.horizon_s * NS) + skew_ns
        return lo <= when <= hi


def hypothesis_ranks(hyp: Hypothesis) -> set[int]:
    """The ranks a hypothesis blames: its events' ranks plus those a detector added."""
    return {e.rank for e in hyp.events if e.rank is not None} | hyp.extra_ranks
