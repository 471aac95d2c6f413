"""The honest channel for what no rule knows: error-severity lines that no extraction rule
matched become ``log.unrecognised`` events, are counted per source in the verdict's coverage,
grouped into templates, and keep a verdict from ``definitive`` when they sit near the failure.

Contract::

    severity_of(text) -> str | None           # which error marker a record holds, or None
    PREFILTER_LITERALS                         # literals every such record holds (prefilter)
    mine_templates(events) -> [Template]       # drain3 over the sorted unrecognised events
    suggest_rules(templates) -> str            # YAML rule skeletons, one per template

A record is at error severity when the format says so, not when a word merely occurs:

=============== ==================================================================== ========
severity        marker (source)                                                      example
=============== ==================================================================== ========
``nccl_warn``   NCCL's ``WARN`` level (src/include/debug.h: ``NCCL WARN``)            ``... NCCL WARN ...``
``glog_error``  glog/c10 ``E``/``F`` lines (``[E1130 01:20:31.299 ...]``)              PyTorch c10d
``kernel_err``  printk levels 0-3: ``dmesg -r`` ``<3>``, ``kern: err:`` (Talos/journald) kernel
``level_error`` a log-level token ``ERROR``/``FATAL``/``CRITICAL`` or ``level=error``    Python logging, Fabric Manager
``exception``   a Python exception line ``SomeError: text`` / ``...Exception: text``    tracebacks
``failure``     ``error:``/``fatal:`` message prefixes and the words ``failed``,         slurmd, tools
                ``failure``, ``timed out``, ``Segmentation fault``, ``core dumped``,
                ``Aborted``, ``panic``, unless the line states a lower level (INFO)
=============== ==================================================================== ========

A record whose only marker is a negated count (``0 errors``, ``no error``, ``errors: 0``) is
not an error. Texts are evidence, never instructions: they are stored truncated
(:data:`MAX_TEXT` characters) and never interpreted.

Templates come from drain3's Drain algorithm (a maintained log-template miner) with masking of
addresses, hex and numbers; the events are fed in canonical order (time, host, text), so the
templates are a pure function of the set of events, whatever the arrival order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import yaml

__all__ = [
    "EVENT_TYPE",
    "MAX_TEXT",
    "PREFILTER_LITERALS",
    "RULE_REF",
    "Template",
    "mine_templates",
    "severity_of",
    "suggest_rules",
]

EVENT_TYPE = "log.unrecognised"
RULE_REF = "unrecognised@1"
#: Characters of the error line kept on the event (the rest is in the observation).
MAX_TEXT = 400

#: Literals, case-sensitive, at least one of which every error-severity record holds. They
#: join the rule pack's keywords in its single prefilter, so a line that holds neither costs
#: one literal scan (:class:`correlators.rules.scan.LiteralSet`).
PREFILTER_LITERALS: tuple[str, ...] = (
    "NCCL WARN", "[E0", "[E1", "[F0", "[F1", "<0>", "<1>", "<2>", "<3>",
    "err:", "crit:", "alert:", "emerg:", "ERROR", "FATAL", "CRITICAL", "level=error",
    "level=fatal", "Error", "Exception", "rror:", "atal:", "ailed", "FAILED", "ailure",
    "imed out", "egmentation fault", "ore dumped", "Aborted", "panic",
)

_SEVERITY: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nccl_warn", re.compile(r"\bNCCL WARN\b")),
    ("glog_error", re.compile(r"(?:^|[\[\]:\s])[EF][01]\d[0-3]\d \d\d:\d\d:\d\d", re.M)),
    ("kernel_err", re.compile(r"(?:^|\s)<[0-3]>(?:\[|\w)|\bkern:\s+(?:err|crit|alert|emerg):", re.M)),
    ("level_error", re.compile(r"\b(?:ERROR|FATAL|CRITICAL)\b|\blevel=(?:error|fatal)\b")),
    ("exception", re.compile(r"^\s*(?:\[rank\d+\]:\s*)?(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b(?::|$)", re.M)),
    ("failure", re.compile(
        r"\b(?:[Ee]rror|[Ff]atal)\s*:|\b(?:[Ff]ailed|FAILED|[Ff]ailure|[Tt]imed out|"
        r"[Ss]egmentation fault|[Cc]ore dumped|Aborted|[Kk]ernel panic|panic:)")),
)
_NEGATED = re.compile(
    r"\b(?:0|no|zero|without) (?:errors?|failures?)\b|\b(?:errors?|failures?|failed)\s*[=:]\s*0\b"
    r"|\b0 failed\b", re.I)
_STRONG = ("nccl_warn", "glog_error", "kernel_err", "level_error", "exception")
# an explicit level below error: NCCL INFO/TRACE, glog I/W lines, INFO/DEBUG tokens, printk 4-7
_LOW_LEVEL = re.compile(
    r"\bNCCL (?:INFO|TRACE)\b|(?:^|[\[\]:\s])[IWD][01]\d[0-3]\d \d\d:\d\d:\d\d|\b(?:INFO|DEBUG|TRACE)\b"
    r"|(?:^|\s)<[4-7]>(?:\[|\w)|\bkern:\s+(?:warning|notice|info|debug):", re.M)


def severity_of(text: str) -> str | None:
    """The error marker ``text`` holds (one of ``nccl_warn``, ``glog_error``, ``kernel_err``,
    ``level_error``, ``exception``, ``failure``; the first in that order), or None when the
    record is not at error severity. A record whose only marker is ``failure`` is not an
    error when it states a zero count (``0 errors``) or carries an explicit lower level
    (``NCCL INFO``, a glog ``I``/``W`` line, ``INFO``, printk levels 4-7)."""
    for name, pattern in _SEVERITY:
        if pattern.search(text):
            if name not in _STRONG and (_NEGATED.search(text) or _LOW_LEVEL.search(text)):
                return None
            return name
    return None


def error_line(text: str) -> str:
    """The first line of a (multi-line) record that holds an error marker, else its first
    line; at most :data:`MAX_TEXT` characters."""
    lines = text.splitlines() or [text]
    for line in lines:
        if any(p.search(line) for _, p in _SEVERITY):
            return line.strip()[:MAX_TEXT]
    return lines[0].strip()[:MAX_TEXT]


@dataclass(frozen=True, slots=True)
class Template:
    """One group of unrecognised lines: the drain3 ``template`` (variable parts ``<*>`` or
    ``<IP>``/``<HEX>``/``<NUM>``), how many events it holds, their hosts, the first event's
    time (UTC ns) and line, and the severity of that first line."""

    template: str
    count: int
    hosts: tuple[str, ...]
    first_at: int
    example: str
    severity: str


_MASKS = (
    (r"((?<=[^A-Za-z0-9])|^)[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?((?=[^A-Za-z0-9])|$)", "PCI"),
    (r"((?<=[^A-Za-z0-9])|^)\[?(?:[0-9a-fA-F]{0,4}:){4,7}[0-9a-fA-F]{0,4}\]?((?=[^A-Za-z0-9])|$)", "IP"),
    (r"((?<=[^A-Za-z0-9])|^)[0-9a-fA-F]{0,4}::[0-9a-fA-F:.]*((?=[^A-Za-z0-9])|$)", "IP"),
    (r"((?<=[^A-Za-z0-9])|^)\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?:[:<]\d+>?)?((?=[^A-Za-z0-9])|$)", "IP"),
    (r"((?<=[^A-Za-z0-9])|^)0x[0-9a-fA-F]+((?=[^A-Za-z0-9])|$)", "HEX"),
    (r"((?<=[^A-Za-z0-9])|^)[-+]?\d+(?:\.\d+)?((?=[^A-Za-z0-9])|$)", "NUM"),
)


def _miner():
    """A drain3 TemplateMiner configured in code (no config file, no persistence)."""
    from drain3 import TemplateMiner
    from drain3.masking import MaskingInstruction
    from drain3.template_miner_config import TemplateMinerConfig

    config = TemplateMinerConfig()
    config.masking_instructions = [MaskingInstruction(p, name) for p, name in _MASKS]
    config.drain_sim_th = 0.5
    config.drain_depth = 4
    config.profiling_enabled = False
    return TemplateMiner(persistence_handler=None, config=config)


def _strip_prefix(line: str) -> str:
    """The message without its per-line context (PyTorch ``[rankN]:``, glog header, NCCL
    ``host:pid:tid [dev]``, syslog/dmesg time and host), so templates group messages, not
    prefixes."""
    return _PREFIX.sub("", line, count=1)


_PREFIX = re.compile(
    r"^(?:\S+: kern:\s+\w+: \[[^\]]+\]:\s*)?"
    r"(?:\[rank\d+\]:)?"
    r"(?:\[?[IWEF]\d{4} [\d:.]+(?: \d+)? [\w./-]+:\d+\]\s*)?"
    r"(?:\[[^\]]{6,40}\]\s*)?"
    r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ \S+?(?:\[\d+\])?:\s*)?"
    r"(?:[\w.-]+:\d+:\d+ \[\d+\]\s*)?"
)


def mine_templates(events: Iterable, limit: int | None = None, *, with_members: bool = False) -> list:
    """Group ``log.unrecognised`` events (anything with ``.attributes['text']``, ``.at``,
    ``.host``) into templates, most frequent first (then first time, then template text).

    Input order does not matter: events are fed to drain3 sorted by (time, host, text, id).
    ``limit`` keeps the first N templates. Returns ``[Template]``, or with ``with_members``
    ``[(Template, [events])]``."""
    rows = sorted(
        (e for e in events if isinstance(e.attributes.get("text"), str)),
        key=lambda e: (e.at, e.host or "", e.attributes["text"], getattr(e, "event_id", "")),
    )
    if not rows:
        return []
    miner = _miner()
    groups: dict[int, list] = {}
    for event in rows:
        result = miner.add_log_message(_strip_prefix(event.attributes["text"]))
        groups.setdefault(result["cluster_id"], []).append(event)
    clusters = {c.cluster_id: c.get_template() for c in miner.drain.clusters}
    out = []
    for cid, members in groups.items():
        first = members[0]
        out.append((Template(
            template=clusters[cid],
            count=len(members),
            hosts=tuple(sorted({m.host for m in members if m.host})),
            first_at=first.at,
            example=first.attributes["text"],
            severity=str(first.attributes.get("severity", "")),
        ), members))
    out.sort(key=lambda tm: (-tm[0].count, tm[0].first_at, tm[0].template))
    out = out[:limit] if limit is not None else out
    return out if with_members else [t for t, _ in out]


_TOKEN = re.compile(r"<(?:\*|IP|HEX|PCI|NUM)>")


def _pattern_of(template: str) -> tuple[str, str]:
    """(regex, longest literal) of a drain3 template: literal runs escaped, each variable part
    a named group ``v1``, ``v2``, ..."""
    parts = _TOKEN.split(template)
    regex = []
    for i, lit in enumerate(parts):
        regex.append(re.escape(lit).replace("\\ ", " "))
        if i < len(parts) - 1:
            regex.append(f"(?P<v{i + 1}>\\S+)")
    literal = max((p.strip() for p in parts), key=len, default="")
    return "".join(regex), literal


def suggest_rules(templates: Sequence[Template], *, min_count: int = 1) -> str:
    """YAML text with one rule skeleton per template holding at least ``min_count`` lines, in
    the rule-file format of ``correlators/rules/*.yaml``: id, version, ``source`` (to fill in:
    the code or document that prints the message), keywords (the template's longest literal),
    pattern (literal parts escaped, variable parts as named groups), ``event`` (to choose from
    ``correlators.vocabulary``) and the first line as an example. Each skeleton is commented
    with the count, hosts and severity it was mined from."""
    rules = []
    notes = []
    for n, t in enumerate(x for x in templates if x.count >= min_count):
        pattern, literal = _pattern_of(t.template)
        slug = re.sub(r"[^a-z0-9]+", "_", literal.lower()).strip("_")[:40] or f"template_{n + 1}"
        rules.append({
            "id": f"site.{slug}",
            "version": 1,
            "source": "TODO: the code or vendor document that prints this message, and its versions",
            "keywords": [literal] if literal else ["TODO"],
            "pattern": pattern,
            "event": "TODO (a type from correlators/vocabulary.py)",
            "examples": [{"line": t.example, "expect": {"type": "TODO"}}],
        })
        notes.append(f"# {t.count} line(s), severity {t.severity or '?'}, hosts: "
                     f"{', '.join(t.hosts) or '-'}; template: {t.template}")
    if not rules:
        return "# no unrecognised error lines\n"
    chunks = []
    for note, rule in zip(notes, rules):
        body = yaml.safe_dump([rule], sort_keys=False, width=100, allow_unicode=False)
        chunks.append(note + "\n" + "\n".join("  " + ln for ln in body.splitlines()))
    return "rules:\n" + "\n".join(chunks) + "\n"
