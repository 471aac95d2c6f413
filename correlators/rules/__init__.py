"""The extraction rule pack: declarative rules (YAML, one file per domain) that turn an
:class:`~schemas.records.Observation` into typed :class:`~schemas.records.Event` s.

Contract::

    pack = load_rule_pack()            # cached default pack; load_rule_pack([extra.yaml]) adds rules
    pack.version                       # "2026.12.0" -> Attribution.ruleset_version
    pack.keywords                      # literals; every record a log rule can match holds one
    pack.prefilter_keywords            # keywords + the error-severity literals (unrecognised)
    pack.rules                         # tuple[Rule, ...] in file order
    pack.extract(obs) -> list[Event]   # events in rule order, each .with_id()

Rule files (``correlators/rules/<domain>.yaml``)::

    domain: gpu
    rules:
      - id: gpu.xid                    # unique across the pack
        version: 1                     # int; Event.rule = "gpu.xid@1"
        source: "..."                  # where the format comes from (driver doc, NCCL file, issue URL)
        keywords: ["NVRM: Xid"]        # log rules: literals, case-sensitive; the prefilter index
        pattern: 'NVRM: Xid \\((?:PCI:)?(?P<gpu_pci>...)\\): (?P<xid>\\d+), ...'
        event: gpu.xid                 # type, or a list when a code hook chooses among several
        match: all                     # 'first' (default): one event per record; 'all': one per match
        fields:                        # named group -> attribute (or event field), typed
          xid: int                     #   shorthand: attribute of the same name and type
          pid: {attr: pid, type: int}
          reason: {map: {"Connection reset by peer": reset}, else: other}
          exitcode: [{type: int}, {attr: signal, type: signal}]   # several targets
        attributes: {backend: nccl}    # constant attributes
        backdate_ms: ran_for_ms        # began_at = at - attributes[ran_for_ms] * 1e6
        unless: ["traps: "]            # skip the record when it holds any of these literals
        exclusive: true                # when this rule yields events, no other rule runs on the record
        fallback: true                 # runs only when no other rule yielded an event (catch-alls)
        code: xid_catalog              # optional hook in correlators/rules/code.py
        examples:
          - line: "NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus."
            expect: {type: gpu.xid, attributes: {xid: 79}, gpu: {pci_bus_id: "0000:02:00"}}

Telemetry rules have ``kind: telemetry``, no pattern/keywords, and conditions on
``obs.metric`` (``"ecc_uncorrected_volatile > 0"``; a condition on a missing metric is
false): ``when`` (all hold), ``when_any`` (one holds), ``unless`` (none holds); ``fields``
then map metric keys to attributes.

Field types: ``str`` (default), ``int``, ``float``, ``hex`` (int from hex), ``bool``
(``+``/``true``/``yes``/``1`` -> True), ``present`` (True when the group matched, else False),
``signal`` (``-9``/``SIGKILL`` -> 9), ``signal_name`` (-> ``SIGKILL``), ``bytes``
(``139.80 GiB`` -> int bytes), ``lower``. A value that does not convert is omitted. ``map``
translates the matched text (``else`` for unmapped text). ``to:`` sends the value to an event
field instead of an attribute: ``host``, ``rank``, ``gpu_index``, ``gpu_pci``, ``peer``.
Named groups with those names go there without a ``fields`` entry; other groups not listed
become ``str`` attributes of the same name.

Generic line context (applied to the line where a match starts; values a rule extracts win,
except that a ``[rankN]:`` prefix -- PyTorch's global rank -- wins over everything):
``[rank3]:`` -> rank 3; Open MPI ``[1,2]<stdout>:`` -> rank 2; NCCL ``host:pid:tid [dev]``
(optionally after ``[2026-11-30 01:20:22] ``) -> host and gpu.index; syslog ``Dec  2
10:43:35 node-a01 kernel:`` / ISO ``2026-...T... node-a01 slurmd[1]:`` -> host.

Peers are normalised (NCCL ``10.0.0.15<38560>`` -> ``10.0.0.15:38560``, gloo
``[127.0.0.1]:11692`` -> ``127.0.0.1:11692``); PCI bus ids to ``0000:9c:00``.

Unrecognised lines: a log record that no rule turns into an event but that is at error
severity (``correlators.unrecognised.severity_of``: NCCL WARN, glog E/F, kernel err and above,
an ERROR level token, a Python exception line, failure words) yields one ``log.unrecognised``
event (attributes ``severity``, ``text``: the error line, truncated), rule
``unrecognised@1``, so nothing at error severity is silently dropped by either driver.

Speed: rules are indexed by keyword (an Aho-Corasick automaton, pyahocorasick); a record is
only tried against the rules whose keywords occur in it, and a single prefilter regex (rule keywords plus the error-severity literals)
rejects records that hold neither.
"""

from __future__ import annotations

import hashlib
import importlib
import pkgutil
import operator
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import ahocorasick
import pydantic
import yaml

from correlators import unrecognised as _unrecognised
from correlators.rules import code as _code
from correlators.rules.code import HOOKS, Draft, normalize_peer, normalize_pci
from correlators.vocabulary import EVENT_TYPES
from schemas.records import EvidenceRef, Event, GpuRef, Observation

__all__ = [
    "RULESET_VERSION",
    "RULES_DIR",
    "Example",
    "FieldSpec",
    "Rule",
    "RulePack",
    "RuleError",
    "Draft",
    "load_rule_pack",
]

#: Version of the default rule pack (goes into ``Attribution.ruleset_version``). Bump it with
#: every change of a rule file; packs with extra files get ``+<hash of the extra files>``.
RULESET_VERSION = "2026.12.0"
RULES_DIR = Path(__file__).parent

# Hooks of one emitter live in their own module ``correlators/rules/hooks_<domain>.py`` and
# register themselves with ``code.hook`` on import; every such module is imported here, in
# name order, before any rule file is validated against ``HOOKS``.
for _mod in sorted(m.name for m in pkgutil.iter_modules([str(RULES_DIR)]) if m.name.startswith("hooks_")):
    importlib.import_module(f"{__name__}.{_mod}")

EVENT_FIELDS = ("host", "rank", "gpu_index", "gpu_pci", "peer")
FIELD_TYPES = ("str", "int", "float", "hex", "bool", "present", "signal", "signal_name",
               "bytes", "lower")
_RULE_KEYS = {"id", "version", "source", "kind", "keywords", "pattern", "event", "match",
              "fields", "attributes", "backdate_ms", "unless", "exclusive", "code", "examples",
              "when", "when_any", "flags", "note", "fallback"}
_MISSING = object()


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
    otherwise: Any = _MISSING  # YAML key "else"


@dataclass(frozen=True, slots=True)
class Condition:
    """A telemetry condition ``metric op value`` (op: > >= < <= == !=)."""

    metric: str
    op: str
    value: float

    _OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
            "==": operator.eq, "!=": operator.ne}

    def holds(self, metric: Mapping[str, float]) -> bool:
        v = metric.get(self.metric)
        return v is not None and self._OPS[self.op](v, self.value)


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
    """One extraction rule (see the module docstring for the YAML shape)."""

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


# ----------------------------------------------------------------------------- conversion


def _convert(value: str | None, spec: FieldSpec) -> Any:
    if spec.type == "present":
        return value is not None
    if value is None:
        return _MISSING
    if spec.map is not None:
        if value in spec.map:
            return spec.map[value]
        return spec.otherwise
    t = spec.type
    try:
        if t == "str":
            return value.strip()
        if t == "int":
            return int(value)
        if t == "float":
            return float(value)
        if t == "hex":
            return int(value, 16)
        if t == "bool":
            return value.strip().lower() in {"+", "true", "yes", "1", "on", "active"}
        if t == "lower":
            return value.strip().lower()
        if t == "signal":
            r = _code.to_signal(value)
        elif t == "signal_name":
            r = _code.to_signal_name(value)
        elif t == "bytes":
            r = _code.to_bytes(value)
        else:  # pragma: no cover - rejected by the loader
            raise AssertionError(t)
        return _MISSING if r is None else r
    except ValueError:
        return _MISSING


_LINE_CTX = re.compile(
    r"(?:\[rank(?P<rank>\d+)\]:\s?|\[\d+,(?P<mpi_rank>\d+)\]<std\w+>:)?"
    r"(?:\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\] )?"
    r"(?:(?P<nccl_host>[\w.-]+):(?P<nccl_pid>\d+):\d+ \[(?P<dev>\d+)\] "
    r"|(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT[\d:.,+\-Z]+) "
    r"(?P<sys_host>[\w.-]+) [\w.\-/]+(?:\[\d+\])?: )?"
)


def _line_context(body: str, pos: int) -> tuple[int | None, int | None, str | None, int | None, int | None]:
    """(prefix rank, mpi rank, host, gpu index, NCCL pid) from the start of the line holding
    ``pos``; the pid is that of NCCL's ``host:pid:tid [dev]`` prefix."""
    start = body.rfind("\n", 0, pos) + 1
    m = _LINE_CTX.match(body, start)
    if m is None or m.end() == start:
        return None, None, None, None, None
    rank = int(m["rank"]) if m["rank"] else None
    mpi = int(m["mpi_rank"]) if m["mpi_rank"] else None
    host = m["nccl_host"] or m["sys_host"]
    dev = int(m["dev"]) if m["dev"] else None
    pid = int(m["nccl_pid"]) if m["nccl_pid"] else None
    return rank, mpi, host, dev, pid


# ----------------------------------------------------------------------------- the pack


def _trie_regex(words: Iterable[str]) -> re.Pattern[str]:
    """One regex matching any of ``words``, with common prefixes factored out (a trie), so
    the engine tests each position of a record against a handful of first characters instead
    of every keyword: about twice as fast as a flat alternation or a loop of ``in`` tests."""
    trie: dict[str, Any] = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        if "" in node:
            return ""  # a keyword ends here: any longer keyword through this node matches too
        alts = [re.escape(ch) + build(child) for ch, child in sorted(node.items())]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return re.compile(build(trie))



class RulePack:
    """A loaded, validated, keyword-indexed set of rules."""

    def __init__(self, rules: Sequence[Rule], version: str) -> None:
        self.version: str = version
        self.rules: tuple[Rule, ...] = tuple(rules)
        self._by_id = {r.id: r for r in self.rules}
        self._log_rules = [r for r in self.rules if r.kind == "log"]
        self._telemetry_rules = tuple(r for r in self.rules if r.kind == "telemetry")
        index: dict[str, list[int]] = {}
        for i, r in enumerate(self.rules):
            for kw in r.keywords:
                index.setdefault(kw, []).append(i)
        self.keywords: tuple[str, ...] = tuple(sorted(index))
        # longest first, so the prefilter alternation prefers specific keywords
        self._index: tuple[tuple[str, tuple[int, ...]], ...] = tuple(
            (kw, tuple(ix)) for kw, ix in sorted(index.items(), key=lambda kv: (-len(kv[0]), kv[0]))
        )
        # one Aho-Corasick pass (pyahocorasick, C) finds every keyword a record holds, whatever
        # the size of the pack
        self._automaton = ahocorasick.Automaton()
        for kw, ix in self._index:
            self._automaton.add_word(kw, ix)
        if index:
            self._automaton.make_automaton()
        self.prefilter_keywords: tuple[str, ...] = tuple(sorted(set(self.keywords) | set(_unrecognised.PREFILTER_LITERALS)))
        self._prefilter = _trie_regex(self.prefilter_keywords)
        rid, _, rver = _unrecognised.RULE_REF.partition("@")
        self._unrecognised_rule = Rule(
            id=rid, version=int(rver), source="correlators/unrecognised.py", file="(engine)",
            kind="log", event=_unrecognised.EVENT_TYPE, events=(_unrecognised.EVENT_TYPE,))

    def rule(self, rule_id: str) -> Rule:
        """The rule with id ``rule_id`` (KeyError if absent)."""
        return self._by_id[rule_id]

    def candidates(self, body: str) -> list[Rule]:
        """Rules whose keywords occur in ``body``, exclusive rules first, then pack order."""
        if self._prefilter.search(body) is None:
            return []
        return self._rules_hit(body)

    def _rules_hit(self, body: str) -> list[Rule]:
        if not self.keywords:
            return []
        hit: set[int] = set()
        for _, ix in self._automaton.iter(body):
            hit.update(ix)
        rules = self.rules
        return [rules[i] for i in sorted(hit, key=lambda i: (not rules[i].exclusive, i))]

    # -- extraction ------------------------------------------------------------------------

    def extract(self, obs: Observation) -> list[Event]:
        """Events the pack extracts from ``obs`` (a log record or a telemetry sample)."""
        if obs.kind == "telemetry" or (obs.body is None and obs.metric is not None):
            drafts: list[tuple[Rule, Draft]] = []
            metric = obs.metric or {}
            for rule in self._telemetry_rules:
                drafts.extend((rule, d) for d in self._apply_telemetry(rule, obs, metric))
            return [self._build(rule, d, obs) for rule, d in drafts]
        body = obs.body
        if not body or self._prefilter.search(body) is None:
            return []
        out: list[Event] = []
        hit = self._rules_hit(body)
        for rule in hit:
            if rule.fallback or (rule.unless and any(u in body for u in rule.unless)):
                continue
            drafts = self._apply_log(rule, obs, body)
            if not drafts:
                continue
            events = [self._build(rule, d, obs) for d in drafts]
            if rule.exclusive:
                return events
            out.extend(events)
        for rule in hit if not out else ():
            if rule.fallback and not (rule.unless and any(u in body for u in rule.unless)):
                out.extend(self._build(rule, d, obs) for d in self._apply_log(rule, obs, body))
        if not out:
            severity = _unrecognised.severity_of(body)
            if severity is not None:
                d = Draft(type=_unrecognised.EVENT_TYPE,
                          attributes={"severity": severity, "text": _unrecognised.error_line(body)})
                p_rank, mpi_rank, host, dev, _ = _line_context(body, 0)
                d.rank = p_rank if p_rank is not None else mpi_rank
                d.host, d.gpu_index = host, dev
                out.append(self._build(self._unrecognised_rule, d, obs))
        return out

    def apply(self, rule: Rule, obs: Observation) -> list[Event]:
        """Events one rule alone yields from ``obs`` (keywords and ``unless`` honoured)."""
        if rule.kind == "telemetry":
            return [self._build(rule, d, obs) for d in self._apply_telemetry(rule, obs, obs.metric or {})]
        body = obs.body or ""
        if not any(kw in body for kw in rule.keywords) or any(u in body for u in rule.unless):
            return []
        return [self._build(rule, d, obs) for d in self._apply_log(rule, obs, body)]

    @staticmethod
    def _fill(draft: Draft, spec: FieldSpec, value: Any) -> None:
        if value is _MISSING:
            return
        if spec.to == "attr":
            draft.attributes[spec.attr] = value
        elif spec.to == "rank" or spec.to == "gpu_index":
            try:
                setattr(draft, spec.to, int(value))
            except (TypeError, ValueError):
                pass
        else:
            setattr(draft, spec.to, str(value))

    def _apply_log(self, rule: Rule, obs: Observation, body: str) -> list[Draft]:
        assert rule.pattern is not None
        matches: Iterable[re.Match[str]]
        if rule.match_all:
            matches = rule.pattern.finditer(body)
        else:
            m = rule.pattern.search(body)
            matches = (m,) if m else ()
        out: list[Draft] = []
        for m in matches:
            d = Draft(type=rule.event, attributes=dict(rule.attributes))
            groups = m.groupdict()
            for spec in rule.fields:
                self._fill(d, spec, _convert(groups.get(spec.group), spec))
            p_rank, mpi_rank, ctx_host, ctx_dev, nccl_pid = _line_context(body, m.start())
            if p_rank is not None:
                d.rank = p_rank
            elif d.rank is None and mpi_rank is not None:
                d.rank = mpi_rank
            if d.host is None and ctx_host is not None:
                d.host = ctx_host
            if d.gpu_index is None and ctx_dev is not None:
                d.gpu_index = ctx_dev
            if nccl_pid is not None and "nccl_pid" not in d.attributes:
                # NCCL's host:pid:tid prefix: which process the line is from (correlators/pids.py)
                d.attributes["nccl_pid"] = nccl_pid
            if rule.backdate_ms and isinstance(d.attributes.get(rule.backdate_ms), (int, float)):
                d.began_at = obs.observed_at - int(d.attributes[rule.backdate_ms] * 1_000_000)
            if rule.code:
                out.extend(HOOKS[rule.code](d, m, obs, rule))
            else:
                out.append(d)
        return out

    def _apply_telemetry(self, rule: Rule, obs: Observation, metric: Mapping[str, float]) -> list[Draft]:
        if rule.when and not all(c.holds(metric) for c in rule.when):
            return []
        if rule.when_any and not any(c.holds(metric) for c in rule.when_any):
            return []
        if any(c.holds(metric) for c in rule.unless_metric):
            return []
        d = Draft(type=rule.event, attributes=dict(rule.attributes))
        for spec in rule.fields:
            v = metric.get(spec.group)
            if v is None:
                continue
            if spec.type == "int":
                val: Any = int(v)
            elif spec.type == "bool":
                val = bool(v)
            else:
                val = float(v)
            self._fill(d, spec, val)
        if rule.code:
            return HOOKS[rule.code](d, None, obs, rule)
        return [d]

    def _build(self, rule: Rule, d: Draft, obs: Observation) -> Event:
        if d.type not in rule.events:
            raise RuleError(f"{rule.file}: rule {rule.id!r}: field 'code': hook emitted "
                            f"{d.type!r}, not one of its declared events {list(rule.events)}")
        try:
            return self._event(rule, d, obs)
        except pydantic.ValidationError as exc:
            # a value the line states out of every range the record allows (a rank or a
            # code beyond Int32/Int64): the event keeps what is valid and says what was not
            reason = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])[:300]
            d.rank = d.rank if d.rank is None or 0 <= d.rank < 2**31 else None
            d.gpu_index = d.gpu_index if d.gpu_index is None or 0 <= d.gpu_index < 2**31 else None
            d.attributes = {**{k: (str(v) if isinstance(v, int) and not -2**63 <= v < 2**63 else v)
                               for k, v in d.attributes.items()}, "invalid": reason}
            return self._event(rule, d, obs)

    def _event(self, rule: Rule, d: Draft, obs: Observation) -> Event:
        pci = normalize_pci(d.gpu_pci) if d.gpu_pci else None
        if pci is not None or d.gpu_index is not None:
            gpu: GpuRef | None = GpuRef(index=d.gpu_index, pci_bus_id=pci)
        else:
            gpu = obs.gpu.model_copy() if obs.gpu is not None else None
        return Event(
            type=d.type,
            at=obs.observed_at,
            began_at=d.began_at,
            time_quality=obs.time_quality,
            host=d.host or obs.host,
            cluster=obs.cluster,
            workload_id=obs.workload_id,
            rank=d.rank if d.rank is not None else obs.rank,
            gpu=gpu,
            fabric_port=obs.fabric_port,
            peer=normalize_peer(d.peer) if d.peer else None,
            attributes=d.attributes,
            rule=rule.ref,
            evidence=[EvidenceRef(observation_id=obs.observation_id, position=obs.position.model_copy())],
        ).with_id()


# ----------------------------------------------------------------------------- loading


def _err(file: str, rule_id: str, fld: str, msg: str) -> RuleError:
    return RuleError(f"{file}: rule {rule_id!r}: field {fld!r}: {msg}")


_COND = re.compile(r"^\s*(?P<metric>[A-Za-z_][\w.]*)\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<value>-?[\d.]+)\s*$")


def _conditions(file: str, rid: str, key: str, raw: Any) -> tuple[Condition, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise _err(file, rid, key, "must be a condition string or a list of them")
    out = []
    for c in raw:
        m = _COND.match(str(c))
        if not m:
            raise _err(file, rid, key, f"bad condition {c!r} (want 'metric > 0')")
        out.append(Condition(m["metric"], m["op"], float(m["value"])))
    return tuple(out)


def _field_specs(file: str, rid: str, raw: Any, groups: Iterable[str], telemetry: bool) -> tuple[FieldSpec, ...]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _err(file, rid, "fields", "must be a mapping group -> spec")
    groups = list(groups)
    specs: list[FieldSpec] = []
    for group, spec in raw.items():
        if not telemetry and group not in groups:
            raise _err(file, rid, f"fields.{group}", "no such named group in 'pattern'")
        items = spec if isinstance(spec, list) else [spec]
        for item in items:
            if item is None or isinstance(item, str):
                item = {"type": item or "str"}
            if not isinstance(item, dict):
                raise _err(file, rid, f"fields.{group}", "spec must be a type name or a mapping")
            unknown = set(item) - {"attr", "type", "map", "else", "to"}
            if unknown:
                raise _err(file, rid, f"fields.{group}", f"unknown keys {sorted(unknown)}")
            typ = str(item.get("type", "str"))
            if typ not in FIELD_TYPES:
                raise _err(file, rid, f"fields.{group}.type", f"{typ!r} is not one of {FIELD_TYPES}")
            to = str(item.get("to", "attr"))
            if to != "attr" and to not in EVENT_FIELDS:
                raise _err(file, rid, f"fields.{group}.to", f"{to!r} is not 'attr' or one of {EVENT_FIELDS}")
            mp = item.get("map")
            if mp is not None and not isinstance(mp, dict):
                raise _err(file, rid, f"fields.{group}.map", "must be a mapping")
            specs.append(FieldSpec(
                group=group, to=to, attr=str(item.get("attr", group)), type=typ,
                map={str(k): v for k, v in mp.items()} if mp is not None else None,
                otherwise=item.get("else", _MISSING),
            ))
    if not telemetry:
        for g in groups:
            if g in raw:
                continue
            if g in EVENT_FIELDS:
                specs.append(FieldSpec(group=g, to=g, attr=g))
            else:
                specs.append(FieldSpec(group=g, attr=g))
    return tuple(specs)


def _examples(file: str, rid: str, raw: Any, telemetry: bool) -> tuple[Example, ...]:
    if not isinstance(raw, list) or not raw:
        raise _err(file, rid, "examples", "at least one example is required")
    out = []
    for i, ex in enumerate(raw):
        where = f"examples[{i}]"
        if not isinstance(ex, dict):
            raise _err(file, rid, where, "must be a mapping")
        unknown = set(ex) - {"line", "text", "metric", "expect", "note"}
        if unknown:
            raise _err(file, rid, where, f"unknown keys {sorted(unknown)}")
        text = ex.get("line", ex.get("text"))
        metric = ex.get("metric")
        if telemetry and not isinstance(metric, dict):
            raise _err(file, rid, where, "a telemetry example needs 'metric'")
        if not telemetry and not isinstance(text, str):
            raise _err(file, rid, where, "needs 'line' or 'text'")
        if "line" in ex and "\n" in ex["line"].rstrip("\n"):
            raise _err(file, rid, where + ".line", "holds several lines; use 'text'")
        if "expect" not in ex:
            raise _err(file, rid, where, "needs 'expect' (a partial event, a list, or [])")
        expect = ex["expect"]
        if isinstance(expect, dict):
            expect = [expect]
        if not isinstance(expect, list) or not all(isinstance(e, dict) for e in expect):
            raise _err(file, rid, where + ".expect", "must be a mapping or a list of mappings")
        for e in expect:
            if "type" not in e:
                raise _err(file, rid, where + ".expect", "each expected event needs 'type'")
        out.append(Example(text=text.rstrip("\n") if isinstance(text, str) else None,
                           metric={k: float(v) for k, v in metric.items()} if metric else None,
                           expect=tuple(expect), note=str(ex.get("note", ""))))
    return tuple(out)


def _parse_rule(file: str, raw: Any, pos: int) -> Rule:
    if not isinstance(raw, dict):
        raise RuleError(f"{file}: rules[{pos}]: must be a mapping")
    rid = raw.get("id")
    if not isinstance(rid, str) or not rid:
        raise RuleError(f"{file}: rules[{pos}]: field 'id': missing or not a string")
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise _err(file, rid, sorted(unknown)[0], f"unknown key(s) {sorted(unknown)}")
    version = raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _err(file, rid, "version", "must be a positive int")
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise _err(file, rid, "source", "required: where the format comes from")
    kind = raw.get("kind", "log")
    if kind not in ("log", "telemetry"):
        raise _err(file, rid, "kind", "must be 'log' or 'telemetry'")
    ev = raw.get("event")
    events = tuple(ev) if isinstance(ev, list) else (ev,)
    if not events or not all(isinstance(e, str) for e in events):
        raise _err(file, rid, "event", "required: an event type or a list of them")
    for e in events:
        if e not in EVENT_TYPES:
            raise _err(file, rid, "event", f"{e!r} is not in correlators.vocabulary.EVENT_TYPES")
    code = raw.get("code")
    if code is not None and code not in HOOKS:
        raise _err(file, rid, "code", f"no hook {code!r} registered in correlators/rules/code.py")
    if len(events) > 1 and code is None:
        raise _err(file, rid, "event", "several event types need a 'code' hook to choose")
    attrs = raw.get("attributes") or {}
    if not isinstance(attrs, dict):
        raise _err(file, rid, "attributes", "must be a mapping")
    common = dict(id=rid, version=version, source=source.strip(), file=file, kind=kind,
                  event=events[0], events=events, attributes=attrs, code=code,
                  examples=_examples(file, rid, raw.get("examples"), kind == "telemetry"))
    if kind == "telemetry":
        for key in ("pattern", "keywords", "match", "backdate_ms", "exclusive", "fallback"):
            if key in raw:
                raise _err(file, rid, key, "not allowed in a telemetry rule")
        when = _conditions(file, rid, "when", raw.get("when"))
        when_any = _conditions(file, rid, "when_any", raw.get("when_any"))
        if not when and not when_any:
            raise _err(file, rid, "when", "a telemetry rule needs 'when' or 'when_any'")
        return Rule(**common, when=when, when_any=when_any,
                    unless_metric=_conditions(file, rid, "unless", raw.get("unless")),
                    fields=_field_specs(file, rid, raw.get("fields"), (), True))
    kws = raw.get("keywords")
    if isinstance(kws, str):
        kws = [kws]
    if not isinstance(kws, list) or not kws or not all(isinstance(k, str) and k for k in kws):
        raise _err(file, rid, "keywords", "required: a non-empty list of literal strings")
    pat = raw.get("pattern")
    if not isinstance(pat, str) or not pat:
        raise _err(file, rid, "pattern", "required for a log rule")
    flags = re.MULTILINE
    for f in raw.get("flags") or []:
        if f == "ignorecase":
            flags |= re.IGNORECASE
        elif f == "dotall":
            flags |= re.DOTALL
        else:
            raise _err(file, rid, "flags", f"unknown flag {f!r}")
    try:
        regex = re.compile(pat, flags)
    except re.error as exc:
        raise _err(file, rid, "pattern", f"does not compile: {exc}") from None
    match = raw.get("match", "first")
    if match not in ("first", "all"):
        raise _err(file, rid, "match", "must be 'first' or 'all'")
    unless = raw.get("unless") or []
    if not isinstance(unless, list) or not all(isinstance(u, str) and u for u in unless):
        raise _err(file, rid, "unless", "must be a list of literal strings")
    backdate = raw.get("backdate_ms")
    fields = _field_specs(file, rid, raw.get("fields"), regex.groupindex, False)
    if backdate is not None and not any(s.to == "attr" and s.attr == backdate for s in fields):
        raise _err(file, rid, "backdate_ms", f"no attribute {backdate!r} among the fields")
    return Rule(**common, keywords=tuple(kws), pattern=regex, match_all=match == "all",
                fields=fields, backdate_ms=backdate, unless=tuple(unless),
                exclusive=bool(raw.get("exclusive", False)), fallback=bool(raw.get("fallback", False)))


def _load_file(path: Path) -> list[Rule]:
    name = path.name if path.parent == RULES_DIR else str(path)
    try:
        # libyaml's C loader when present: the pack loads on every CLI start
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise RuleError(f"{name}: not valid YAML: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rules"), list):
        raise RuleError(f"{name}: top level must be a mapping with a 'rules' list")
    return [_parse_rule(name, raw, i) for i, raw in enumerate(doc["rules"])]


def default_rule_files() -> list[Path]:
    """The packaged rule files, in name order."""
    return sorted(RULES_DIR.glob("*.yaml"))


def _build_pack(files: Sequence[Path], extra: Sequence[Path]) -> RulePack:
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for path in [*files, *extra]:
        for rule in _load_file(Path(path)):
            if rule.id in seen:
                raise _err(rule.file, rule.id, "id", f"duplicate id (also in {seen[rule.id]})")
            seen[rule.id] = rule.file
            rules.append(rule)
    version = RULESET_VERSION
    if extra:
        h = hashlib.blake2b(digest_size=4)
        for path in extra:
            h.update(Path(path).read_bytes())
        version = f"{RULESET_VERSION}+{h.hexdigest()}"
    return RulePack(rules, version)


@lru_cache(maxsize=1)
def _default_pack() -> RulePack:
    return _build_pack(default_rule_files(), ())


def load_rule_pack(extra_files: Sequence[Path] = ()) -> RulePack:
    """Load the packaged rules plus ``extra_files``. The default pack (no extras) is cached.

    Raises :class:`RuleError` naming the file, rule id and field of the first problem.
    """
    if not extra_files:
        return _default_pack()
    return _build_pack(default_rule_files(), tuple(Path(p) for p in extra_files))
