"""The rule-file loader: YAML rule files -> validated :class:`~correlators.rules.model.Rule` s
-> a :class:`~correlators.rules.engine.RulePack` (reads only the rule files it is given).

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

A message a vendor prints from a printf format may be given as the format itself instead of
a pattern: ``format: "NET/IB : %s:%d async event: %s"`` with ``args: [device, port, event]``
(one name per conversion, ``_`` to skip one); the loader compiles it
(:mod:`correlators.rules.printf`) and takes the format's longest literal run as the keyword
unless ``keywords`` are given.

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

Every problem raises :class:`~correlators.rules.model.RuleError` naming the file, the rule id
and the field (``gpu.yaml: rule 'gpu.xid': field 'pattern': does not compile: ...``). Code hooks
(``code:``) are validated against :data:`correlators.rules.code.HOOKS`, which every
``correlators/rules/hooks_<domain>.py`` fills on import (done here, before any rule file is read).
"""

from __future__ import annotations

import hashlib
import importlib
import pkgutil
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from correlators.rules.code import HOOKS
from correlators.rules.engine import RulePack, gc_paused
from correlators.rules.printf import compile_format, literal_runs
from correlators.rules.model import (
    EVENT_FIELDS,
    FIELD_TYPES,
    MISSING,
    Condition,
    Example,
    FieldSpec,
    Rule,
    RuleError,
)
from correlators.vocabulary import EVENT_TYPES

__all__ = ["RULESET_VERSION", "RULES_DIR", "default_rule_files", "load_rule_pack"]

#: Version of the default rule pack (goes into ``Attribution.ruleset_version``). Bump it with
#: every change of a rule file; packs with extra files get ``+<hash of the extra files>``.
RULESET_VERSION = "2026.12.6"
RULES_DIR = Path(__file__).parent

# Hooks of one emitter live in their own module ``correlators/rules/hooks_<domain>.py`` and
# register themselves with ``code.hook`` on import; every such module is imported here, in
# name order, before any rule file is validated against ``HOOKS``.
for _mod in sorted(m.name for m in pkgutil.iter_modules([str(RULES_DIR)]) if m.name.startswith("hooks_")):
    importlib.import_module(f"correlators.rules.{_mod}")

_RULE_KEYS = {"id", "version", "source", "kind", "keywords", "pattern", "event", "match",
              "fields", "attributes", "backdate_ms", "unless", "exclusive", "code", "examples",
              "when", "when_any", "flags", "note", "fallback", "format", "args"}


def _err(file: str, rule_id: str, fld: str, msg: str) -> RuleError:
    return RuleError(f"{file}: rule {rule_id!r}: field {fld!r}: {msg}")


_COND = re.compile(r"^\s*(?P<metric>[A-Za-z_][\w.]*)\s*(?P<op>>=|<=|==|!=|>|<)\s*(?:(?P<value>-?[\d.]+)|(?P<other>[A-Za-z_][\w.]*))\s*$")


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
            raise _err(file, rid, key, f"bad condition {c!r} (want 'metric > 0' or 'metric < other_metric')")
        if m["other"]:
            out.append(Condition(m["metric"], m["op"], 0.0, other=m["other"]))
        else:
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
                otherwise=item.get("else", MISSING),
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
    pat, kws = _format_pattern(file, rid, raw) if "format" in raw else (raw.get("pattern"), raw.get("keywords"))
    if isinstance(kws, str):
        kws = [kws]
    if not isinstance(kws, list) or not kws or not all(isinstance(k, str) and k for k in kws):
        raise _err(file, rid, "keywords", "required: a non-empty list of literal strings")
    if not isinstance(pat, str) or not pat:
        raise _err(file, rid, "pattern", "required for a log rule (or a printf 'format')")
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


def _format_pattern(file: str, rid: str, raw: dict) -> tuple[str, Any]:
    """(pattern, keywords) of a rule given as a printf ``format`` with its ``args`` names
    (:func:`correlators.rules.printf.compile_format`); the keywords default to the format's
    longest literal run, which must then hold at least 6 characters."""
    if "pattern" in raw:
        raise _err(file, rid, "format", "give a pattern or a format, not both")
    fmt, args = raw["format"], raw.get("args") or []
    if not isinstance(fmt, str) or not fmt.strip():
        raise _err(file, rid, "format", "must be the printf format string as the source prints it")
    if not isinstance(args, list) or not all(isinstance(a, str) and a for a in args):
        raise _err(file, rid, "args", "must be a list of names, one per conversion ('_' to skip one)")
    try:
        pattern = compile_format(fmt, args)
    except ValueError as exc:
        raise _err(file, rid, "format", str(exc)) from None
    kws = raw.get("keywords")
    if kws is None:
        longest = max(literal_runs(fmt), key=len, default="")
        if len(longest) < 6:
            raise _err(file, rid, "keywords", f"the format's longest literal {longest!r} is too short: give keywords")
        kws = [longest]
    return pattern, kws


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
    with gc_paused():  # hundreds of rules, compiled patterns and examples, none of them garbage
        return _build_pack_now(files, extra)


def _build_pack_now(files: Sequence[Path], extra: Sequence[Path]) -> RulePack:
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
