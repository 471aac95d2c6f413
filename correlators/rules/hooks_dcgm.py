"""Code hooks of the DCGM rules (``dcgm.yaml``): DCGM failure-reason codes (``DCGM_FR_*``) from
their names, their numbers or their messages, and the ``dcgmi diag`` / ``dcgmi health`` tables.

The code table ``dcgm-fr.csv`` (next to this module) was generated from NVIDIA/DCGM
``dcgmlib/dcgm_errors.h`` (the ``dcgmError_t`` enum and the ``<CODE>_MSG`` message templates) and
``dcgmlib/src/dcgm_errors.c`` (``dcgmErrorMeta``: severity ``DCGM_ERROR_*`` and category
``DCGM_FR_EC_*``) of releases v2.4.7, v3.1.8, v3.3.9, v4.2.3 and master (2026-07); renamed codes
(``DCGM_FR_CLOCK_THROTTLE_THERMAL`` -> ``DCGM_FR_CLOCKS_EVENT_THERMAL`` in 4.x) keep one row each.
``fault_class`` is ours: gpu_hardware, fabric (NVLink/NVSwitch), host, config, gpu_software,
internal (DCGM itself failed) or none (informational: test skipped, not supported, OK).

Table layouts (``dcgmi/Diag.cpp``, ``dcgmi/Health.cpp``, ``dcgmi/DcgmiOutput.cpp``): rows
``| <name> | <value> |``; diag messages are cut every 45 characters (``DATA_INFO_TAG_LEN``) into
continuation rows with an empty name cell, so chunks are joined without a separator; test rows
``| memory | Fail |``, entity rows ``| | GPU1: Fail |`` (4.x) or ``| Memory | Fail - GPU: 1 |``
(2.x/3.x), messages ``| Warning: GPU1 | ... |`` (4.x) / ``| Warning | GPU 1 ... |`` (2.x/3.x).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from correlators.rules.printf import CONVERSION, compile_format
from correlators.rules.code import Draft, hook

if TYPE_CHECKING:  # pragma: no cover
    from correlators.rules import Rule
    from schemas.records import Observation

TABLE_PATH = Path(__file__).with_name("dcgm-fr.csv")


@dataclass(frozen=True, slots=True)
class FailureCode:
    """One DCGM failure-reason code: name, number, DCGM severity (ISOLATE, RESET, TRIAGE,
    CONFIG, MONITOR, UNKNOWN), DCGM category (HARDWARE_MEMORY, ...), our fault class."""

    code: str
    id: int
    severity: str
    category: str
    fault_class: str


def _template_regex(template: str) -> re.Pattern[str]:
    """A DCGM message template -> regex (:func:`correlators.rules.printf.compile_format`, blanks
    optional: the tables wrap messages), matched anywhere; the final period is optional."""
    return re.compile(compile_format(template.strip().rstrip("."), blanks="optional"))


def _load() -> tuple[dict[str, FailureCode], dict[int, FailureCode], list[tuple[re.Pattern[str], FailureCode, int]]]:
    by_name: dict[str, FailureCode] = {}
    by_id: dict[int, FailureCode] = {}
    templates: list[tuple[re.Pattern[str], FailureCode, int]] = []
    with TABLE_PATH.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            fc = FailureCode(row["code"], int(row["id"]), row["severity"], row["category"], row["fault_class"])
            by_name[fc.code] = fc
            if row["last_release"] == "HEAD" or fc.id not in by_id:
                by_id[fc.id] = fc
            for t in filter(None, (x.strip() for x in row["templates"].split(" || "))):
                literal = len(CONVERSION.sub("", t))
                if literal >= 12:
                    templates.append((_template_regex(t), fc, literal))
    templates.sort(key=lambda x: -x[2])  # the most specific template first
    return by_name, by_id, templates


CODES_BY_NAME, CODES_BY_ID, _TEMPLATES = _load()


def message_templates() -> list[tuple[str, FailureCode]]:
    """(printf template, code) for every message template of ``dcgm-fr.csv`` whose code
    reports a fault (informational codes left out), in table order."""
    out = []
    with TABLE_PATH.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            fc = CODES_BY_NAME[row["code"]]
            if fc.fault_class != "none":
                out.extend((t, fc) for t in filter(None, (x.strip() for x in row["templates"].split(" || "))))
    return out

#: "Detected %ld %s for GPU %u" is shared by several codes; the field name decides
_SHARED = {"DCGM_FR_FIELD_VIOLATION", "DCGM_FR_SBE_VIOLATION", "DCGM_FR_DBE_VIOLATION",
           "DCGM_FR_PCIE_REPLAY_VIOLATION", "DCGM_FR_FIELD_THRESHOLD", "DCGM_FR_SBE_THRESHOLD_VIOLATION",
           "DCGM_FR_DBE_THRESHOLD_VIOLATION", "DCGM_FR_PCIE_REPLAY_THRESHOLD_VIOLATION",
           "DCGM_FR_FIELD_VIOLATION_DBL", "DCGM_FR_FIELD_THRESHOLD_DBL"}


def _shared_code(text: str) -> FailureCode:
    low = text.lower()
    above = "above the threshold" in low
    if "dbe" in low or "double" in low:
        name = "DCGM_FR_DBE_THRESHOLD_VIOLATION" if above else "DCGM_FR_DBE_VIOLATION"
    elif "sbe" in low or "single" in low:
        name = "DCGM_FR_SBE_THRESHOLD_VIOLATION" if above else "DCGM_FR_SBE_VIOLATION"
    elif "replay" in low:
        name = "DCGM_FR_PCIE_REPLAY_THRESHOLD_VIOLATION" if above else "DCGM_FR_PCIE_REPLAY_VIOLATION"
    else:
        name = "DCGM_FR_FIELD_THRESHOLD" if above else "DCGM_FR_FIELD_VIOLATION"
    return CODES_BY_NAME[name]


def code_of_message(text: str) -> FailureCode | None:
    """The DCGM failure code whose message template ``text`` holds, or None."""
    for rx, fc, _ in _TEMPLATES:
        if rx.search(text):
            return _shared_code(text) if fc.code in _SHARED else fc
    return None


_GPU_IN_MSG = re.compile(r"\bGPU\s*(\d+)\b")


def _fill(draft: Draft, fc: FailureCode | None, detail: str | None) -> bool:
    """Set fr_code/fr_id/severity/category/fault_class; False when the code is informational."""
    a = draft.attributes
    if detail:
        a["detail"] = " ".join(detail.split())
    if fc is None:
        a.setdefault("fr_code", "unknown")
        a.setdefault("fault_class", "unknown")
        return True
    if fc.fault_class == "none":
        return False
    a.update(fr_code=fc.code, fr_id=fc.id, severity=fc.severity, category=fc.category,
             fault_class=fc.fault_class)
    if draft.gpu_index is None and detail:
        m = _GPU_IN_MSG.search(detail)
        if m:
            draft.gpu_index = int(m.group(1))
    return True


@hook("dcgm_fr")
def dcgm_fr(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A DCGM failure named by code (``fr_name``), number (``error_id``) or message
    (``detail``) -> ``dcgm.failure`` with fr_code, fr_id, severity, category, fault_class,
    detail, gpu. Informational codes (test skipped, not supported, ...) and messages that are no
    DCGM template (when no code or number names them) give nothing."""
    a = draft.attributes
    name = a.pop("fr_name", None)
    err_id = a.pop("error_id", None)
    detail = a.get("detail")
    fc = None
    if name:
        fc = CODES_BY_NAME.get(name)
        if fc is None:
            a["fr_code"] = name
    elif err_id is not None:
        fc = CODES_BY_ID.get(int(err_id))
    if fc is None and detail:
        fc = code_of_message(detail)
        if fc is None and not name and err_id is None:
            return []
    return [draft] if _fill(draft, fc, detail) else []


# --------------------------------------------------------------------------- dcgmi tables

_WIDTH = 45  # DATA_INFO_TAG_LEN
_ENTITY = re.compile(r"^(?P<group>[A-Za-z][A-Za-z_]*?)(?P<id>\d+): (?P<status>Pass|Fail|Warn|Skip|Not Run)$")
_OLD = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip) - (?:(?P<all>All)|GPUs?: (?P<ids>\d+(?:,\s*\d+)*))\s*$")
_STATUS = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip|Not Run)$")
_DETAIL = re.compile(r"^(?P<kind>Warning|Info)(?::\s*(?P<group>[A-Za-z][A-Za-z_]*?)(?P<id>\d+))?$")
_SECTION = re.compile(r"^[|+]-{3,}\s+(?P<cat>[A-Za-z][A-Za-z /_-]*?)\s+-+[+|]")
_OLD_GPU_MSG = re.compile(r"^GPU\s*(\d+)\s+")


def _cells(line: str) -> tuple[str, str] | None:
    if not (line.startswith("|") and line.rstrip().endswith("|")) or line.count("|") < 3:
        return None
    name, _, rest = line.rstrip()[1:-1].partition("|")
    return name, rest


@hook("dcgm_diag_table")
def dcgm_diag_table(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A whole ``dcgmi diag`` table -> one ``dcgm.failure`` per failing/warning test and entity
    (attrs test, status fail|warn, entity (GPU0), category (the table section), fr_code...,
    detail = the joined warning; gpu index). Passing, skipped and metadata rows give nothing."""
    body = obs.body or ""
    section = ""
    test: str | None = None
    test_status = ""
    # (test, entity) -> [status, [message chunks]]
    found: dict[tuple[str, str | None], list] = {}
    order: list[tuple[str, str | None]] = []
    chunks: list[str] | None = None
    for line in body.splitlines():
        sec = _SECTION.match(line)
        if sec:
            section, chunks = sec["cat"].strip(), None
            continue
        cells = _cells(line)
        if cells is None:
            continue
        name_cell, info_cell = cells
        name, info = name_cell.strip(), info_cell.strip()
        if (name, info) == ("Diagnostic", "Result") or section.lower() == "metadata":
            continue
        det = _DETAIL.match(name)
        if det and test is not None:
            chunks = None
            if det["kind"] != "Warning":
                continue
            entity = f"{det['group']}{det['id']}" if det["id"] else None
            text = info_cell[1:] if info_cell.startswith(" ") else info_cell
            if entity is None:
                old = _OLD_GPU_MSG.match(text)
                if old:
                    entity = f"GPU{old.group(1)}"
            key = (test, entity)
            if key not in found:
                found[key] = [test_status if test_status in ("fail", "warn") else "warn", [], section]
                order.append(key)
            chunks = []
            found[key][1].append(chunks)
            chunks.append(text)
            continue
        if not name:
            if test is None:
                continue
            ent = _ENTITY.match(info)
            old = _OLD.match(info)
            if ent or old:
                chunks = None
                status = (ent or old)["status"].lower()
                if status not in ("fail", "warn"):
                    continue
                ids = [f"{ent['group']}{ent['id']}"] if ent else (
                    ["GPUs"] if old["all"] else [f"GPU{i.strip()}" for i in old["ids"].split(",")])
                for e in ids:
                    key = (test, e)
                    if key not in found:
                        found[key] = ["warn" if test_status == "warn" else status, [], section]
                        order.append(key)
            elif chunks is not None:
                chunks.append(info_cell[1:] if info_cell.startswith(" ") else info_cell)
            continue
        chunks = None
        st = _STATUS.match(info)
        old = _OLD.match(info)
        test = name
        test_status = (st or old)["status"].lower() if (st or old) else ""
        if old and test_status in ("fail", "warn"):
            ids = ["GPUs"] if old["all"] else [f"GPU{i.strip()}" for i in old["ids"].split(",")]
            for e in ids:
                key = (test, e)
                if key not in found:
                    found[key] = [test_status, [], section]
                    order.append(key)
        elif test_status in ("fail", "warn") and not old:
            key = (test, None)
            found.setdefault(key, [test_status, [], section])
            order.append(key)
    out: list[Draft] = []
    tests_with_entities = {t for t, e in order if e is not None}
    seen = set()
    for key in order:
        if key in seen:
            continue
        seen.add(key)
        t, entity = key
        if entity is None and t in tests_with_entities and not found[key][1]:
            continue  # the test row of a test whose entities carry the result
        status, messages, sec = found[key]
        texts = ["".join(c.ljust(_WIDTH)[:_WIDTH] for c in m[:-1]) + m[-1] for m in messages]
        detail = "; ".join(" ".join(x.split()) for x in texts) or None
        d = Draft(type=draft.type, attributes={**draft.attributes, "test": t, "status": status})
        if sec:
            d.attributes["section"] = sec
        if entity:
            d.attributes["entity"] = entity
            m = re.match(r"GPU(\d+)$", entity)
            if m:
                d.gpu_index = int(m.group(1))
        fc = code_of_message(detail) if detail else None
        if _fill(d, fc, detail):
            out.append(d)
    return out


_HEALTH_STATE = re.compile(r"^(?P<health>Warning|Failure)\s*-\s*(?P<msg>.*)$")
_HEALTH_ENTITY = re.compile(r"^(?:->\s*)?(?:GPU(?: ID)?:?\s*)?(?P<id>\d+)$")


@hook("dcgm_health_table")
def dcgm_health_table(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A ``dcgmi health -c`` report -> one ``dcgm.failure`` per incident row ``<System>
    system | Warning|Failure - <message>`` (attrs test = the health system, status warn|fail,
    fr_code... from the message; gpu = the entity row above it). Healthy reports give nothing."""
    body = obs.body or ""
    gpu: int | None = None
    current: list | None = None
    incidents: list[list] = []
    for line in body.splitlines():
        cells = _cells(line)
        if cells is None:
            continue
        name, info = cells[0].strip(), cells[1].strip()
        if name:
            current = None
            ent = _HEALTH_ENTITY.match(name)
            if ent and name != "Overall Health":
                gpu = int(ent["id"])
                continue
            st = _HEALTH_STATE.match(info)
            system = name.lstrip("-> ").strip()
            if st and system.endswith("system"):
                current = [system, st["health"], gpu, [st["msg"]]]
                incidents.append(current)
        elif current is not None and info:
            current[3].append(info)
    out = []
    for system, health, g, parts in incidents:
        detail = " ".join(" ".join(parts).split())
        d = Draft(type=draft.type, attributes={**draft.attributes, "test": system,
                                                "status": "fail" if health == "Failure" else "warn"})
        d.gpu_index = g
        if _fill(d, code_of_message(detail), detail):
            out.append(d)
    return out
