"""The extraction engine: :class:`RulePack` turns an :class:`~schemas.records.Observation`
into :class:`~schemas.records.Event` s with the rules :mod:`correlators.rules.loader` built
(pure: no I/O, no clock).

Generic line context (applied to the line where a match starts; values a rule extracts win,
except that a ``[rankN]:`` prefix -- PyTorch's global rank -- wins over everything):
``[rank3]:`` -> rank 3; Open MPI ``[1,2]<stdout>:`` -> rank 2; NCCL ``host:pid:tid [dev]``
(optionally after ``[2026-11-30 01:20:22] ``) -> host and gpu.index; syslog ``Dec  2
10:43:35 node-a01 kernel:`` / ISO ``2026-...T... node-a01 slurmd[1]:`` -> host. A host the
text names (here, in a rule's ``to: host`` field or from a hook) is evidence: the event's host
is the observation's, the name kept as ``attributes.line_host``; only a declared aggregator's
text names the event's host (``attributes.collected_on``), see :mod:`correlators.identity`.

Peers are normalised (NCCL ``10.0.0.15<38560>`` -> ``10.0.0.15:38560``, gloo
``[127.0.0.1]:11692`` -> ``127.0.0.1:11692``); PCI bus ids to ``0000:9c:00``.

Back-dating (a rule's ``backdate_ms``): ``began_at = observed_at - attributes[backdate_ms]``
from the record's own time; a time inherited from an earlier line is only the earliest the
record can have been written, so the condition is placed at that bound and no earlier
(:func:`backdate`, ``attributes.began_at_bound``).

Unrecognised lines: a log record that no rule turns into an event but that is at error
severity (``correlators.unrecognised.severity_of``: NCCL WARN, glog E/F, kernel err and above,
an ERROR level token, a Python exception line, failure words) yields one ``log.unrecognised``
event (attributes ``severity``, ``text``: the error line, truncated), rule
``unrecognised@1``, so nothing at error severity is silently dropped by either driver.

Speed: rules are indexed by keyword (an Aho-Corasick automaton, pyahocorasick); a record is
only tried against the rules whose keywords occur in it, and one compiled literal scan
(:class:`correlators.rules.scan.LiteralSet`, Hyperscan: rule keywords plus the error-severity
literals) rejects records that hold neither. Events whose
values already have the record's exact types and ranges are built without a second pydantic
validation (:func:`light_record`); any other value goes through the validated constructor, so
an event is the same -- fields, twins, id -- whichever way it was built.
"""

from __future__ import annotations

import gc
import re
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping, Sequence

import ahocorasick
import pydantic

from correlators import unrecognised as _unrecognised
from correlators import identity as _identity
import correlators.rules.code as _code
from correlators.rules.code import HOOKS, Draft, normalize_peer, normalize_pci
from correlators.rules.scan import LiteralSet, minimal_literals
from correlators.rules.spotter import Spotter, negative_context
from correlators.rules.unwrap import unwrap
from correlators.rules.model import MISSING, Condition, FieldSpec, Rule, RuleError
from schemas.records import SCHEMA_VERSION, TIME_NS_MAX, TIME_NS_MIN, TIME_QUALITY_INHERITED, EvidenceRef, Event, GpuRef, Observation, Position, Source, check_json_value
from schemas.utc import format_utc

__all__ = ["RulePack", "backdate", "inherited_lower_bound", "gc_paused", "light_record", "json_attributes", "time_ok", "opt_str", "opt_int32"]


# ----------------------------------------------------------------------------- batch work


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the ``with`` body, restoring its previous
    state after (nested uses keep it paused until the outermost ends). For batch work that
    allocates many records and frees almost none of them (building the rule pack, reading a
    bundle, replaying it): each full collection in between walks the whole heap and finds
    nothing, as records hold no reference cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ----------------------------------------------------------------------------- back-dating


def inherited_lower_bound(obs: Observation) -> bool:
    """Whether ``obs.observed_at`` is only the *earliest* the record can have been written:
    its time is inherited (``time_quality`` at or below ``TIME_QUALITY_INHERITED``) from an
    earlier line of its source -- the bundle reader's ``attributes.time_from_line`` before the
    record's own line, a live tail's last time seen (no ``time_from_line``) -- or a line clock
    placed it right after the previous one (``time_source="line"`` at that quality: a new boot
    with no known boot time). A time from a later line (``time_from_line`` after the record)
    or from the transport (the workload's end, a file's mtime) is a *latest* bound instead."""
    if obs.time_quality > TIME_QUALITY_INHERITED or obs.time_source == "transport":
        return False
    source_line = (obs.attributes or {}).get("time_from_line")
    own_line = obs.position.line if obs.position is not None else None
    if isinstance(source_line, int) and isinstance(own_line, int) and source_line > own_line:
        return False
    return True


def backdate(obs: Observation, lasted_ns: int, attributes: dict[str, Any]) -> int:
    """``began_at`` of a record that states how long its condition had lasted when it was
    written (``lasted_ns``: a watchdog's "ran for N milliseconds").

    Back-dating is from the record's *own* time: ``observed_at - lasted_ns`` when the line
    carries its time (or the inherited time is a latest bound: a later line's, the
    transport's -- then the stall began no later than that, and the cost counted from it is
    never more than what was lost). An inherited time that is only an earliest bound
    (:func:`inherited_lower_bound`: PyTorch 2.2/2.3 ``[E ProcessGroupNCCL.cpp:N]`` lines carry
    no time and take the previous dated line's) is not a timestamp: the line was written at
    or after it, the stall began after the neighbour that was still logging, and pushing the
    neighbour's time back by the whole timeout would date the stall before the last healthy
    step and count the timeout twice in the cost. The stall is then placed at the bound
    (``began_at = observed_at``) and ``attributes.began_at_bound = "inherited"`` says so; the
    event keeps the inherited time quality (never above ``TIME_QUALITY_INHERITED``)."""
    at = obs.observed_at
    began = at - lasted_ns
    if inherited_lower_bound(obs) and began < at:
        attributes["began_at_bound"] = "inherited"
        return at
    return began


# ----------------------------------------------------------------------------- light records

_setattr = object.__setattr__
_NS = 1_000_000_000
_I32 = 2**31


def light_record(cls: type, values: dict[str, Any], fields_set: set[str]) -> Any:
    """An instance of the pydantic record class ``cls`` holding ``values`` as its field dict,
    without validation (what ``cls.model_construct`` does, without its per-field Python loop).

    ``values`` must hold every field of ``cls`` in declaration order, each already of the type
    and range validation would give (time twins included); ``fields_set`` is what
    ``model_fields_set`` reports (the names a validated construction was given). The caller
    checks the values; the classes built here are asserted at import to have the field order
    the callers write (:data:`LIGHT_FIELDS`)."""
    obj = cls.__new__(cls)
    _setattr(obj, "__dict__", values)
    _setattr(obj, "__pydantic_fields_set__", fields_set)
    _setattr(obj, "__pydantic_extra__", None)
    _setattr(obj, "__pydantic_private__", None)
    return obj


#: the field order :func:`light_record`'s callers write, per record class
LIGHT_FIELDS: dict[type, tuple[str, ...]] = {
    Event: ("schema_version", "event_id", "type", "at", "at_utc", "began_at", "began_at_utc",
            "time_quality", "host", "cluster", "workload_id", "rank", "gpu", "fabric_port", "peer",
            "attributes", "rule", "evidence"),
    Observation: ("schema_version", "observation_id", "source", "kind", "observed_at", "observed_at_utc",
                  "time_source", "time_quality", "host", "cluster", "workload_id", "rank", "gpu",
                  "fabric_port", "format", "body", "metric", "attributes", "position"),
    GpuRef: ("index", "uuid", "pci_bus_id"),
    EvidenceRef: ("observation_id", "position"),
    Position: ("file", "line", "topic", "partition", "offset"),
    Source: ("connector", "instance"),
}
for _cls, _names in LIGHT_FIELDS.items():
    if tuple(_cls.model_fields) != _names:  # pragma: no cover - a schema change must update the light paths
        raise RuntimeError(f"{_cls.__name__} fields are {tuple(_cls.model_fields)}, the light record path "
                           f"writes {_names}: update correlators/rules/engine.py and connectors/bundle.py")

def json_attributes(attributes: Any) -> bool:
    """True when ``attributes`` is what an ``Attributes`` field keeps as it is after validation:
    a dict with str keys whose values pass :func:`schemas.records.check_json_value`."""
    if type(attributes) is not dict:
        return False
    for key in attributes:
        if type(key) is not str:
            return False
    try:
        check_json_value(attributes)
    except ValueError:
        return False
    return True


def time_ok(ns: Any) -> bool:
    """True when ``ns`` is an int of UTC ns within the records' range (``TIME_NS_MIN`` ..
    ``TIME_NS_MAX``), as a time field keeps it after validation."""
    return type(ns) is int and TIME_NS_MIN <= ns <= TIME_NS_MAX


def opt_str(value: Any) -> bool:
    """True for None or a str (an optional text field, unchanged by validation)."""
    return value is None or type(value) is str


def opt_int32(value: Any) -> bool:
    """True for None or an int that fits a signed 32-bit column (``Int32`` fields)."""
    return value is None or (type(value) is int and -_I32 <= value < _I32)


# ----------------------------------------------------------------------------- conversion


def _convert(value: str | None, spec: FieldSpec) -> Any:
    if spec.type == "present":
        return value is not None
    if value is None:
        return MISSING
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
        return MISSING if r is None else r
    except ValueError:
        return MISSING


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


def _in_negative_context(body: str, pos: int, end: int) -> bool:
    """True when a frame match starting at ``pos`` is in a context where words report nothing
    (a comment, a help text leading to it, a list of skipped codes: the contexts of
    :data:`correlators.rules.spotter.NEGATIVE_CONTEXTS` that frames honour)."""
    start = body.rfind("\n", 0, pos) + 1
    stop = body.find("\n", pos)
    last = body.rfind("\n", 0, max(end - 1, pos)) + 1
    last_stop = body.find("\n", last)
    return negative_context(body[start:stop if stop >= 0 else len(body)], body[start:pos], frames=True,
                            end_line=body[last:last_stop if last_stop >= 0 else len(body)]) is not None


# ----------------------------------------------------------------------------- the pack


#: A telemetry rule's conditions: (``when``: all hold, ``when_any``: one holds,
#: ``unless_metric``: none holds), each a tuple of (metric, operator, value); a value that is a
#: string names another metric of the same sample.
_Gates = tuple[tuple[tuple[str, Any, float | str], ...], ...]


def _gates(rule: Rule) -> _Gates:
    return tuple(tuple((c.metric, Condition.OPS[c.op], c.other or c.value) for c in conds)
                 for conds in (rule.when, rule.when_any, rule.unless_metric))


def _passes(gates: _Gates, metric: Mapping[str, float]) -> bool:
    """True when a telemetry rule applies to ``metric``: every ``when`` condition holds, one
    ``when_any`` condition holds (if it has any), no ``unless_metric`` condition holds; a
    condition on a metric the sample lacks does not hold (:meth:`Condition.holds`)."""
    when, when_any, unless = gates
    get = metric.get
    for key, op, value in when:
        v = get(key)
        ref = get(value) if type(value) is str else value
        if v is None or ref is None or not op(v, ref):
            return False
    if when_any:
        for key, op, value in when_any:
            v = get(key)
            ref = get(value) if type(value) is str else value
            if v is not None and ref is not None and op(v, ref):
                break
        else:
            return False
    for key, op, value in unless:
        v = get(key)
        ref = get(value) if type(value) is str else value
        if v is not None and ref is not None and op(v, ref):
            return False
    return True


class RulePack:
    """A loaded, validated, keyword-indexed set of rules."""

    def __init__(self, rules: Sequence[Rule], version: str) -> None:
        self.version: str = version
        self.rules: tuple[Rule, ...] = tuple(rules)
        self._by_id = {r.id: r for r in self.rules}
        # telemetry rules with their conditions as (metric, operator, value), tested in order
        self._telemetry: tuple[tuple[Rule, _Gates], ...] = tuple(
            (r, _gates(r)) for r in self.rules if r.kind == "telemetry")
        self._gates_by_id = {r.id: g for r, g in self._telemetry}
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
        #: the frame-independent vocabulary matcher (correlators/rules/spotter.py)
        self.spotter: Spotter = Spotter()
        self.prefilter_keywords: tuple[str, ...] = tuple(sorted(
            set(self.keywords) | set(_unrecognised.PREFILTER_LITERALS) | set(self.spotter.literals)))
        self._prefilter = LiteralSet(minimal_literals(self.prefilter_keywords))  # the same answer, fewer literals
        rid, _, rver = _unrecognised.RULE_REF.partition("@")
        self._unrecognised_rule = Rule(
            id=rid, version=int(rver), source="correlators/unrecognised.py", file="(engine)",
            kind="log", event=_unrecognised.EVENT_TYPE, events=(_unrecognised.EVENT_TYPE,))

    def rule(self, rule_id: str) -> Rule:
        """The rule with id ``rule_id`` (KeyError if absent)."""
        return self._by_id[rule_id]

    def may_extract(self, body: str) -> bool:
        """True when :meth:`extract` can yield an event -- a rule's or a ``log.unrecognised``
        one -- from a log record whose body is ``body`` (several lines joined with ``\\n``):
        the body holds one of :attr:`prefilter_keywords`. False guarantees that ``extract``
        returns ``[]`` for every log Observation with this body, whatever its time, host or
        position: it is the test ``extract`` applies first. Pure (no I/O)."""
        return self._prefilter.search(body)

    def may_extract_sample(self, metric: Mapping[str, float]) -> bool:
        """True when :meth:`extract` can yield an event from a telemetry sample whose metric is
        ``metric``: the conditions of one telemetry rule hold (the test ``extract`` applies to
        each rule first). False guarantees ``extract`` returns ``[]`` for every telemetry
        Observation with this metric. Pure (no I/O)."""
        for _, gates in self._telemetry:
            if _passes(gates, metric):
                return True
        return False

    def candidates(self, body: str) -> list[Rule]:
        """Rules whose keywords occur in ``body``, exclusive rules first, then pack order."""
        if not self._prefilter.search(body):
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
            for rule, gates in self._telemetry:
                drafts.extend((rule, d) for d in self._apply_telemetry(rule, gates, obs, metric))
            return [self._build(rule, d, obs) for rule, d in drafts]
        body = obs.body
        if not body or not self._prefilter.search(body):
            return []
        body = unwrap(body)
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
        spotted = self._spots(body, out)
        out.extend(self._build(rule, d, obs) for rule, d in spotted)
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

    def _spots(self, body: str, framed: Sequence[Event]) -> list[tuple[Rule, Draft]]:
        """The vocabulary spots of ``body`` (:class:`correlators.rules.spotter.Spotter`) that no
        frame event of the record already carries (the same type for a ``type`` key, else the
        same attribute value), as drafts with ``frame: none`` and the line's rank and NCCL
        device prefix."""
        out: list[tuple[Rule, Draft]] = []
        for spot in self.spotter.spot(body):
            attr, value = spot.key
            if any((e.type == value) if attr == "type" else (e.attributes.get(attr) == value) for e in framed):
                continue
            d = spot.draft
            d.attributes["frame"] = "none"
            p_rank, mpi_rank, _, ctx_dev, _ = _line_context(body, spot.start)
            d.rank = p_rank if p_rank is not None else mpi_rank
            if d.gpu_index is None:
                d.gpu_index = ctx_dev
            out.append((spot.rule, d))
        return out

    def apply(self, rule: Rule, obs: Observation) -> list[Event]:
        """Events one rule alone yields from ``obs`` (keywords and ``unless`` honoured)."""
        if rule.kind == "telemetry":
            return [self._build(rule, d, obs)
                    for d in self._apply_telemetry(rule, self._gates_by_id[rule.id], obs, obs.metric or {})]
        body = obs.body or ""
        if not any(kw in body for kw in rule.keywords) or any(u in body for u in rule.unless):
            return []
        return [self._build(rule, d, obs) for d in self._apply_log(rule, obs, body)]

    @staticmethod
    def _fill(draft: Draft, spec: FieldSpec, value: Any) -> None:
        if value is MISSING:
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
            if _in_negative_context(body, m.start(), m.end()):
                continue
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
                d.began_at = backdate(obs, int(d.attributes[rule.backdate_ms] * 1_000_000), d.attributes)
            if rule.code:
                out.extend(HOOKS[rule.code](d, m, obs, rule))
            else:
                out.append(d)
        return out

    def _apply_telemetry(self, rule: Rule, gates: _Gates, obs: Observation,
                         metric: Mapping[str, float]) -> list[Draft]:
        """The drafts of a telemetry rule (``gates``: its conditions, :func:`_gates`); none
        unless they hold (:func:`_passes`)."""
        if not _passes(gates, metric):
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
        gi = d.gpu_index
        if pci is not None or gi is not None:
            if opt_int32(gi) and opt_str(pci):
                gpu: GpuRef | None = light_record(GpuRef, {"index": gi, "uuid": None, "pci_bus_id": pci},
                                                  {"index", "pci_bus_id"})
            else:
                gpu = GpuRef(index=gi, pci_bus_id=pci)
        else:
            gpu = obs.gpu.model_copy() if obs.gpu is not None else None
        at, began, quality = obs.observed_at, d.began_at, obs.time_quality
        # identity comes from the source: the line's host is evidence (correlators.identity)
        host = obs.host
        if d.host is not None and d.host != host:
            host = _identity.event_host(host, d.host, _identity.is_aggregator(host, obs.kind, obs.attributes),
                                        d.attributes)
        rank = d.rank if d.rank is not None else obs.rank
        peer = normalize_peer(d.peer) if d.peer else None
        ref = rule.ref
        pos = obs.position
        if (type(d.type) is str and time_ok(at) and (began is None or time_ok(began))
                and type(quality) is float and 0.0 <= quality <= 1.0 and type(host) is str
                and type(obs.cluster) is str and opt_str(obs.workload_id) and opt_int32(rank)
                and opt_str(obs.fabric_port) and opt_str(peer) and type(ref) is str
                and type(obs.observation_id) is str and type(pos) is Position
                and json_attributes(d.attributes)):
            position = light_record(Position, dict(pos.__dict__), set(pos.__pydantic_fields_set__))
            evidence = light_record(EvidenceRef, {"observation_id": obs.observation_id, "position": position},
                                    {"observation_id", "position"})
            return light_record(Event, {
                "schema_version": SCHEMA_VERSION, "event_id": "", "type": d.type, "at": at, "at_utc": format_utc(at),
                "began_at": began, "began_at_utc": None if began is None else format_utc(began),
                "time_quality": quality, "host": host, "cluster": obs.cluster,
                "workload_id": obs.workload_id, "rank": rank, "gpu": gpu, "fabric_port": obs.fabric_port,
                "peer": peer, "attributes": dict(d.attributes), "rule": ref, "evidence": [evidence],
            }, set(_EVENT_GIVEN)).with_id()
        return Event(
            type=d.type,
            at=at,
            began_at=began,
            time_quality=quality,
            host=host,
            cluster=obs.cluster,
            workload_id=obs.workload_id,
            rank=rank,
            gpu=gpu,
            fabric_port=obs.fabric_port,
            peer=peer,
            attributes=d.attributes,
            rule=ref,
            evidence=[EvidenceRef(observation_id=obs.observation_id, position=pos.model_copy())],
        ).with_id()


#: the fields a validated :class:`Event` construction in :meth:`RulePack._event` is given
_EVENT_GIVEN = frozenset({"type", "at", "began_at", "time_quality", "host", "cluster", "workload_id", "rank",
                          "gpu", "fabric_port", "peer", "attributes", "rule", "evidence"})
