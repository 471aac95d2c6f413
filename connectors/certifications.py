"""Certification inputs: DCGM diagnostics, NCCL tests and NVCRE reports -> ``Certification``.

A node that was taken out of service returns only when a certification of it passes (as in
NVSentinel's re-validation: DCGM diag ``-r 2``, NCCL all-reduce bandwidth). This module turns
the outputs of those tools into :class:`schemas.records.Certification` records (one per host)
and ``faultstream connect certifications`` publishes them on the ``certifications`` topic
(key = host) through :class:`CertificationFiles`, the :class:`connectors.source.Source` of a
set of result files.

Parsers (each raises :class:`CertificationError` with a clear message for input it cannot
read; none returns an empty or half-read result):

* :func:`parse_dcgm_diag_text` -- the table ``dcgmi diag -r N`` prints;
* :func:`parse_dcgm_diag_json` -- ``dcgmi diag -r N -j``;
* :func:`parse_nccl_tests` -- the output of an nccl-tests binary (``all_reduce_perf`` ...),
  judged against a bus-bandwidth threshold;
* :func:`parse_nvcre_json` -- an NVIDIA Cluster Readiness Engine (NVCRE) report, one
  certification per node it names.

Times: ``finished_at`` is UTC ns, given by the caller (none of the DCGM/nccl-tests outputs
carries the time it finished; the CLI takes ``--finished-at`` or the file's mtime, or the
``generatedAt`` of an NVCRE report export envelope, see :func:`document_time`).

**Results.** ``CertificationTest.result`` is ``pass``, ``fail``, ``warn`` or ``skip``;
``Certification.passed`` is True when no test failed and at least one ran (``warn`` and ``skip``
do not fail a certification: DCGM's own exit status treats a warning as success, and a skipped
plugin -- e.g. no ECC on a consumer GPU -- says nothing bad about the host).

**dcgmi diag, text** (formats read from NVIDIA/DCGM ``dcgmi/Diag.cpp``, releases 2.x-4.x;
sample: DCGM issue 253's table, the ``rc-37`` fixture)::

    +---------------------------+------------------------------------------------+
    | Diagnostic                | Result                                         |
    +===========================+================================================+
    |-----  Metadata  ----------+------------------------------------------------|
    | DCGM Version              | 4.2.3                                          |
    |-----  Deployment  --------+------------------------------------------------|
    | software                  | Pass                                           |
    |                           | GPU0: Pass                                     |
    +-----  Hardware  ----------+------------------------------------------------+
    | memory                    | Fail                                           |
    |                           | GPU0: Pass                                     |
    |                           | GPU1: Fail                                     |
    | Warning: GPU1             | <message, 45 characters per row, continued     |
    |                           | on the following rows with an empty name>      |

One row per test (``Pass``, ``Fail``, ``Warn``, ``Skip``), per-entity rows ``<GROUP><id>:
<status>`` (``GPU0: Pass``; 4.x), or the DCGM 2.x/3.x summary rows ``Pass - All``,
``Fail - GPU: 0``, ``Pass - GPUs: 1, 2``; ``Warning``/``Info`` rows (4.x: ``Warning: GPU1``)
whose message DCGM wraps every 45 characters (``DATA_INFO_TAG_LEN``) -- the chunks are joined
back without inserting spaces. A test's result is its own row's status (4.x prints ``Warn`` on
the test row but ``Fail`` on the entity rows of a warning), else the worst entity status.
``Metadata`` rows are not tests (the DCGM version goes into ``source``). A table cut short
(no footer) is read as far as it goes.

**dcgmi diag, JSON** (``-j``; NVIDIA/DCGM ``nvvs/include/NvvsJsonStrings.h``,
``dcgmi/Diag.cpp`` ``HelperJsonAddResult``, ``testing/python3/dcgm_diag_schema.json``)::

    {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "memory", "test_summary": {"status": "Fail"},
         "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1,
                      "status": "Fail", "warnings": [{"warning": "...", "error_id": 83,
                      "error_category": 4, "error_severity": 2}], "info": ["..."]}]}]}]},
     "metadata": {"version": "4.2.3"}}

DCGM 4.x names the root ``"DCGM Diagnostic"`` and results by ``entity_group``/``entity_id``;
DCGM 3.x and earlier name it ``"DCGM GPU Diagnostic"`` and results by ``gpu_id`` (a string) or
``gpu_ids`` (``"0,1,2,3"``), with ``warnings`` a list of ``{"warning": ...}`` objects (3.x) or
one string (2.x) and ``info`` a string. Statuses are matched case-insensitively (``PASS``).
A top-level ``runtime_error`` means the diagnostic did not run: :class:`CertificationError`.

**nccl-tests** (NVIDIA/nccl-tests ``src/common.cu``; bandwidths in GB/s, ``doc/PERFORMANCE.md``)::

    # Collective test starting: all_reduce_perf
    #       size         count      type   redop    root     time   algbw   busbw #wrong ...
      8589934592    2147483648     float     sum      -1    21395  401.49  376.40      0 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 382.21

Lines may carry an MPI prefix (``[1,0]<stdout>:``). For each ``# Avg bus bandwidth`` line a
test ``<collective>_busbw`` passes when the average bus bandwidth is at least
``min_busbw_gbps`` (no 0.9 slack: nccl-tests' own ``NCCL_TESTS_MIN_BW`` check fails below 90 %
of its threshold, ours fails below 100 %), with the peak bus bandwidth of the size rows in the
detail; ``# Out of bounds values : N OK|FAILED`` gives ``<collective>_data_check``. A run that
died (``<host>: Test NCCL failure common.cu:... '...'``, ``Test CUDA failure``) without an
average is a failed certification with that line as the detail; output with neither is an
error.

**NVCRE** (NVIDIA/cluster-readiness-engine, ``docs/api-reference/validation-results.md``
"Machine-readable results", ``pkg/report/report.go`` ``CertReport``): the JSON that
``nvcrectl certification run --wait --results-file`` / ``certification report --results-file``
writes -- a report object or an array of them -- or a report-export envelope
(``{"schemaVersion", "reportID", "source": {"clusterID", ...}, "generatedAt", "report"}``,
``docs/api-reference/report-export.md``). A report has ``name``, ``result`` (``PASSED``,
``FAILED``, ``INCOMPLETE``, ``RUNNING``), ``categories[]`` (``domain``, ``variant``,
``status``, ``failureReason``, ``bandwidth[]`` with ``busBW`` strings like ``"882.51 GB/s"``,
``groupBandwidth[]`` with ``nodes``/``failed``/``belowMin``, ``failedGroups[]`` with ``nodes``
and ``reason``, ``diagnose.confirmedFaulty``), ``failedNodes`` (may be ``null``),
``excludedNodes``, and ``nodeResults[]`` (``name``, ``group``, ``status`` ``Passed``/
``Failed``). NVCRE certifies groups of nodes; this parser gives each node it names a
certification (``suite="nvcre"``) with one test per category (``<domain>/<variant>``): ``fail``
when the node is in one of the category's failed groups, below-minimum bandwidth groups or
confirmed-faulty list (detail: NVCRE's reason), ``pass`` when the node's bandwidth group met the
minimum or the category succeeded, ``warn`` when the category failed but NVCRE does not place
the failure on this node, ``skip`` when it did not finish. A node
``nodeResults`` or ``failedNodes`` calls failed fails even when no category names it. A
``RUNNING`` report is not final: :class:`CertificationError`. In an ``INCOMPLETE`` report nodes
it excluded were never tested and get no certification; the others add a failing test
``nvcre/result`` (an incomplete run does not return a node to service).

NVCRE is NVIDIA's public project; the shapes above were read from its repository and
documentation (release v0.8). The other formats belong to DCGM and nccl-tests. faultstream
defines no result format of its own.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Generator, Annotated, Any, Iterable, Literal

import typer

from connectors.command import Shared, connector
from schemas.records import Certification, CertificationTest, CoverageEntry

__all__ = [
    "CertificationError",
    "CertificationFiles",
    "FORMATS",
    "parse_dcgm_diag_text",
    "parse_dcgm_diag_json",
    "parse_nccl_tests",
    "parse_nvcre_json",
    "parse_certification",
    "detect_format",
    "document_time",
    "connect_certifications_cli",
]

Format = Literal["dcgm-text", "dcgm-json", "nvcre", "nccl-tests"]
FORMATS: tuple[str, ...] = ("dcgm-text", "dcgm-json", "nvcre", "nccl-tests")

#: Characters DCGM prints per row of a wrapped message (``DATA_INFO_TAG_LEN`` in Diag.cpp).
DCGM_INFO_WIDTH = 45

_RESULT = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip",
           "not run": "skip", "notrun": "skip"}
_RANK = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}


class CertificationError(ValueError):
    """Input that is not a certification result this module can read; the message says what
    was expected and where it went wrong."""


def _result(status: Any, where: str) -> str:
    key = str(status).strip().lower()
    if key not in _RESULT:
        raise CertificationError(f"{where}: unknown status {status!r} (expected Pass, Fail, Warn, Skip)")
    return _RESULT[key]


def _worst(results: Iterable[str]) -> str | None:
    results = list(results)
    return max(results, key=_RANK.__getitem__) if results else None


def _certification(host: str, suite: str, tests: list[CertificationTest], finished_at_ns: int,
                   source: str, cluster: str = "") -> Certification:
    if not host:
        raise CertificationError("a host name is needed for the certification")
    ran = [t for t in tests if t.result != "skip"]
    passed = bool(ran) and not any(t.result == "fail" for t in tests)
    return Certification(host=host, cluster=cluster, suite=suite, passed=passed, tests=tests,
                         finished_at=int(finished_at_ns), source=source).with_id()


# -- dcgmi diag, text -------------------------------------------------------------------------

_SECTION = re.compile(r"^[|+]-{3,}\s+(?P<cat>[A-Za-z][A-Za-z /_-]*?)\s+-+[+|]-*[+|]$")
_ENTITY_RESULT = re.compile(r"^(?P<entity>[A-Za-z][A-Za-z_]*\d+): (?P<status>Pass|Fail|Warn|Skip|Not Run)$")
_OLD_RESULT = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip) - (?:(?P<all>All)|GPUs?: (?P<ids>\d+(?:,\s*\d+)*))\s*$")
_DETAIL = re.compile(r"^(?P<kind>Warning|Info)(?::\s*(?P<entity>[A-Za-z][A-Za-z_]*\d+))?$")
_TEST_STATUS = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip|Not Run)$")
_ERROR_LINE = re.compile(r"^\s*Error:?\s+(?P<msg>.+)$", re.IGNORECASE)


#: Table sections whose tests alone do not certify a GPU (software and deployment checks). A
#: table without section rows (a fragment) is judged by its tests alone.
_DEPLOYMENT_ONLY = {"deployment", "metadata"}


class _DiagTest:
    """One test read from the table: its section (``Deployment``, ``Hardware``, ...), its own
    status, per-entity statuses, messages."""

    def __init__(self, name: str, status: str | None):
        self.category = ""
        self.name = name
        self.status = status
        self.entities: dict[str, str] = {}
        self.messages: list[tuple[str, str | None, list[str]]] = []  # (kind, entity, chunks)

    def result(self) -> str:
        return self.status or _worst(self.entities.values()) or "skip"

    def detail(self) -> str:
        """Failing/warning entities with their warnings (``GPU2: Fail: <message>``), then
        warnings not tied to an entity (DCGM 2.x/3.x rows, global warnings)."""
        texts: dict[str | None, list[str]] = {}
        for kind, entity, chunks in self.messages:
            if kind != "Warning":
                continue
            text = "".join(c.ljust(DCGM_INFO_WIDTH)[:DCGM_INFO_WIDTH] for c in chunks[:-1]) + chunks[-1]
            texts.setdefault(entity, []).append(" ".join(text.split()))
        parts = []
        for entity, status in self.entities.items():
            if status not in ("fail", "warn") and entity not in texts:
                continue
            if self.status == "warn" and status == "fail":
                status = "warn"  # DCGM 4.x prints a warning's entity rows as "Fail"
            parts.append(": ".join([entity, status.capitalize(), *texts.pop(entity, [])]))
        for entity, messages in texts.items():
            parts.extend(f"{entity}: {m}" if entity else m for m in messages)
        return "; ".join(parts)


def parse_dcgm_diag_text(text: str, host: str, finished_at_ns: int, *, cluster: str = "") -> Certification:
    """A ``dcgmi diag -r N`` table (see the module docstring) -> Certification
    (``suite="dcgm-diag"``, one test per diagnostic test, detail = failing/warning entities and
    their warnings). Raises :class:`CertificationError` when the text holds no diagnostic
    table, or when ``dcgmi`` reported an error instead of results."""
    tests: list[_DiagTest] = []
    category = ""
    version = ""
    current: _DiagTest | None = None
    message: list[str] | None = None  # chunks of the message being read
    header_seen = False
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if not line.startswith(("|", "+")):
            err = _ERROR_LINE.match(line)
            if err and not tests:
                raise CertificationError(f"dcgmi diag reported an error (line {lineno}): {err['msg'].strip()}")
            continue
        section = _SECTION.match(line)
        if section:
            category, message = section["cat"].strip(), None
            continue
        if not line.startswith("|") or not line.endswith("|") or line.count("|") < 3:
            continue  # a border (+----+) or a row cut off
        name_cell, _, rest = line[1:].partition("|")
        info_cell = rest[:-1]
        name, info = name_cell.strip(), info_cell.strip()
        if name == "Diagnostic" and info == "Result":
            header_seen = True
            continue
        if category.lower() == "metadata":
            if name == "DCGM Version":
                version = info
            continue
        detail = _DETAIL.match(name)
        if detail:
            if current is None:
                raise CertificationError(f"line {lineno}: {detail['kind']} row before any test row")
            message = [info_cell[1:]]
            current.messages.append((detail["kind"], detail["entity"], message))
            continue
        if not name:
            if current is None:
                continue
            entity = _ENTITY_RESULT.match(info)
            old = _OLD_RESULT.match(info)
            if entity:
                current.entities[entity["entity"]] = _result(entity["status"], f"line {lineno}")
                message = None
            elif old:
                _old_rows(current, old, lineno)
                message = None
            elif message is not None:
                message.append(info_cell[1:])
            continue
        # a test row: "| memory | Pass |" or the 2.x/3.x "| GPU Memory | Fail - GPU: 0 |"
        message = None
        status = _TEST_STATUS.match(info)
        old = _OLD_RESULT.match(info)
        if not (status or old):
            raise CertificationError(
                f"line {lineno}: test {name!r} has no result (expected Pass, Fail, Warn, Skip or "
                f"'Pass - All'/'Fail - GPU: 0'), got {info!r}")
        current = _DiagTest(name, _result(status["status"], f"line {lineno}") if status else None)
        current.category = category
        if old:
            _old_rows(current, old, lineno)
        tests.append(current)
    if not tests:
        what = "a table without test rows" if header_seen else "no 'dcgmi diag' table"
        raise CertificationError(f"dcgmi diag text: found {what} (expected rows like '| memory | Pass |')")
    cert_tests = [CertificationTest(name=t.name, result=t.result(), detail=t.detail()) for t in tests]
    if not any(t.category.lower() not in _DEPLOYMENT_ONLY and t.result() != "skip" for t in tests):
        # a table cut short, or 'dcgmi diag -r 1': deployment checks say nothing of the GPU's
        # health, so they cannot return a node to service (NVSentinel re-validates with -r 2)
        cert_tests.append(CertificationTest(
            name="hardware tests", result="fail",
            detail="the run holds no hardware, integration or stress test (output cut short, or -r 1): "
                   "run dcgmi diag -r 2 or higher"))
    source = "dcgmi diag" + (f" (DCGM {version})" if version else "")
    return _certification(host, "dcgm-diag", cert_tests, finished_at_ns, source, cluster)


def _old_rows(test: _DiagTest, match: re.Match[str], lineno: int) -> None:
    result = _result(match["status"], f"line {lineno}")
    if match["all"]:
        test.entities["GPUs"] = result
    else:
        for gpu in match["ids"].split(","):
            test.entities[f"GPU{gpu.strip()}"] = result


# -- dcgmi diag, JSON ---------------------------------------------------------------------------


def _json_document(text: str, what: str) -> Any:
    body = text.strip()
    if body and body[0] not in "{[":
        # dcgmi may print a line before the document; DCGM's own tests trim to the braces
        start, end = body.find("{"), body.rfind("}")
        body = body[start:end + 1] if 0 <= start < end else body
    try:
        return json.loads(body)
    except ValueError as exc:
        raise CertificationError(f"{what}: not valid JSON ({exc})") from None


def _entity_of(result: dict[str, Any]) -> str:
    if "entity_id" in result:
        return f"{result.get('entity_group') or 'GPU'}{result['entity_id']}"
    ids = result.get("gpu_id", result.get("gpu_ids"))
    if ids is None:
        return ""
    ids = str(ids)
    return f"GPU{ids}" if "," not in ids else "GPUs " + ids


def _warnings_of(result: dict[str, Any]) -> list[str]:
    warnings = result.get("warnings")
    if warnings is None:
        return []
    if isinstance(warnings, str):
        return [warnings]
    out = []
    for w in warnings if isinstance(warnings, list) else [warnings]:
        out.append(str(w.get("warning", "")) if isinstance(w, dict) else str(w))
    return [w for w in out if w.strip()]


def parse_dcgm_diag_json(text: str, host: str, finished_at_ns: int, *, cluster: str = "") -> Certification:
    """``dcgmi diag -r N -j`` output (DCGM 2.x-4.x, see the module docstring) -> Certification
    (``suite="dcgm-diag"``). Raises :class:`CertificationError` for invalid JSON, a document
    without ``test_categories``, a ``runtime_error``, or a test without results."""
    doc = _json_document(text, "dcgmi diag JSON")
    if not isinstance(doc, dict):
        raise CertificationError("dcgmi diag JSON: expected an object at the top")
    root_key = next((k for k in ("DCGM Diagnostic", "DCGM GPU Diagnostic") if k in doc), None)
    if root_key is None:
        raise CertificationError("dcgmi diag JSON: no 'DCGM Diagnostic' (DCGM 4.x) or 'DCGM GPU "
                                 f"Diagnostic' (DCGM 3.x and earlier) object; keys: {sorted(doc)[:10]}")
    root = doc[root_key]
    if not isinstance(root, dict):
        raise CertificationError(f"dcgmi diag JSON: {root_key!r} is not an object")
    if root.get("runtime_error"):
        raise CertificationError(f"dcgmi diag did not run: {root['runtime_error']}")
    categories = root.get("test_categories")
    if not isinstance(categories, list) or not categories:
        raise CertificationError(f"dcgmi diag JSON: {root_key!r} has no test_categories")
    tests: list[CertificationTest] = []
    for ci, cat in enumerate(categories):
        for ti, test in enumerate((cat or {}).get("tests") or []):
            where = f"test_categories[{ci}].tests[{ti}]"
            name = str(test.get("name") or "").strip()
            if not name:
                raise CertificationError(f"dcgmi diag JSON: {where} has no name")
            results = test.get("results") or []
            entity_results: list[tuple[str, str, list[str]]] = []
            for ri, res in enumerate(results):
                if not isinstance(res, dict) or "status" not in res:
                    raise CertificationError(f"dcgmi diag JSON: {where}.results[{ri}] has no status")
                entity_results.append((_entity_of(res), _result(res["status"], f"{where}.results[{ri}]"),
                                       _warnings_of(res)))
            summary = test.get("test_summary") or {}
            if "status" in summary:
                result = _result(summary["status"], f"{where}.test_summary")
            elif entity_results:
                result = _worst(r for _, r, _ in entity_results)
            else:
                raise CertificationError(f"dcgmi diag JSON: {where} ({name}) has no results")
            parts = []
            for entity, res, warnings in entity_results:
                if res in ("fail", "warn") or warnings:
                    label = f"{entity}: {res.capitalize()}" if entity else res.capitalize()
                    parts.append(label + (": " + " | ".join(warnings) if warnings else ""))
            summary_warnings = _warnings_of(summary)
            parts.extend(w for w in summary_warnings if not any(w in p for p in parts))
            tests.append(CertificationTest(name=name, result=result, detail="; ".join(parts)))
    if not tests:
        raise CertificationError("dcgmi diag JSON: test_categories hold no tests")
    meta = doc.get("metadata") or {}
    version = meta.get("version") or root.get("version") or ""
    source = "dcgmi diag -j" + (f" (DCGM {version})" if version else "")
    return _certification(host, "dcgm-diag", tests, finished_at_ns, source, cluster)


# -- nccl-tests ----------------------------------------------------------------------------------

_MPI_PREFIX = re.compile(r"^\s*\[\d+,\d+\]<std(?:out|err)>:")
_START = re.compile(r"#\s*Collective test starting:\s*(?P<name>\S+)")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<bw>[-+0-9.eE]+|nan|inf)", re.IGNORECASE)
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<verdict>OK|FAILED)?")
_CRASH = re.compile(r"Test (?:NCCL|CUDA) failure|Test failure \S+:\d+")
_ROW = re.compile(r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+\S+\s+(?P<rest>.+)$")


def _peak_busbw(rows: list[str]) -> tuple[float, int] | None:
    """(peak busbw GB/s, at size in bytes) over the size rows: the out-of-place and in-place
    ``busbw`` columns (the 3rd number after the op columns of each half)."""
    best: tuple[float, int] | None = None
    for row in rows:
        m = _ROW.match(row)
        if not m:
            continue
        nums = []
        for tok in m["rest"].split():
            try:
                nums.append(float(tok))
            except ValueError:
                nums.append(None)
        # tail: time algbw busbw #wrong time algbw busbw #wrong (8 columns)
        tail = nums[-8:]
        if len(tail) < 8:
            continue
        for bw in (tail[2], tail[6]):
            if bw is not None and (best is None or bw > best[0]):
                best = (bw, int(m["size"]))
    return best


def parse_nccl_tests(text: str, host: str, finished_at_ns: int, min_busbw_gbps: float, *,
                     cluster: str = "") -> Certification:
    """nccl-tests output (``all_reduce_perf`` and the other ``*_perf`` binaries; see the module
    docstring) -> Certification (``suite="nccl-tests"``), tests ``<collective>_busbw`` (pass
    when the average bus bandwidth >= ``min_busbw_gbps``, GB/s) and
    ``<collective>_data_check``. Raises :class:`CertificationError` for output without an
    ``# Avg bus bandwidth`` line that is not a crashed run either."""
    if min_busbw_gbps is None or min_busbw_gbps < 0:
        raise CertificationError("nccl-tests: a bus bandwidth threshold (GB/s, >= 0) is needed")
    tests: list[CertificationTest] = []
    collective = "nccl"
    rows: list[str] = []
    oob: re.Match[str] | None = None
    crash = None
    names: list[str] = []
    for raw in text.splitlines():
        line = _MPI_PREFIX.sub("", raw)
        if m := _START.search(line):
            collective, rows, oob = m["name"].removesuffix("_perf") or "nccl", [], None
            continue
        if crash is None and _CRASH.search(line):
            crash = line.strip()
        if m := _OOB.search(line):
            oob = m
            continue
        if m := _AVG.search(line):
            avg = float(m["bw"])
            peak = _peak_busbw(rows)
            name = collective
            if name in names:
                name = f"{collective}_{names.count(collective) + 1}"
            names.append(collective)
            ok = avg == avg and avg >= min_busbw_gbps  # NaN fails
            detail = (f"avg bus bandwidth {avg:g} GB/s {'>=' if ok else '<'} threshold "
                      f"{min_busbw_gbps:g} GB/s")
            if peak:
                detail += f"; peak {peak[0]:g} GB/s at {peak[1]} B"
            tests.append(CertificationTest(name=f"{name}_busbw", result="pass" if ok else "fail",
                                           detail=detail))
            if oob is not None:
                bad = int(oob["n"]) > 0 or oob["verdict"] == "FAILED"
                tests.append(CertificationTest(
                    name=f"{name}_data_check", result="fail" if bad else "pass",
                    detail=f"out of bounds values: {oob['n']}"))
            rows, oob = [], None
            continue
        if not line.lstrip().startswith("#"):
            rows.append(line)
    if crash is not None:
        tests.append(CertificationTest(name=f"{collective}_run", result="fail", detail=crash[:500]))
    if not tests:
        raise CertificationError("nccl-tests: no '# Avg bus bandwidth' line and no 'Test NCCL failure' "
                                 "line: not the complete output of an nccl-tests run")
    return _certification(host, "nccl-tests", tests, finished_at_ns,
                          f"nccl-tests {collective}_perf" if collective != "nccl" else "nccl-tests",
                          cluster)


# -- NVCRE ---------------------------------------------------------------------------------------


def _nvcre_reports(doc: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(reports, envelope) from a report, an array of reports, or an export envelope."""
    envelope: dict[str, Any] = {}
    if isinstance(doc, dict) and isinstance(doc.get("report"), dict):
        envelope, doc = doc, doc["report"]
    reports = doc if isinstance(doc, list) else [doc]
    for i, rep in enumerate(reports):
        if not isinstance(rep, dict) or "result" not in rep or "categories" not in rep:
            raise CertificationError(f"NVCRE report{f' [{i}]' if len(reports) > 1 else ''}: expected an "
                                     "object with 'result' and 'categories' (nvcrectl --results-file)")
    return reports, envelope


def _names(items: Any) -> list[str]:
    return [str(n) for n in items or [] if n]


def _node_failures(cat: dict[str, Any], node: str) -> list[str]:
    why = []
    for group in cat.get("failedGroups") or []:
        if node in _names(group.get("nodes")):
            why.append(f"failed group {group.get('name', '?')}: {group.get('reason') or 'failed'}")
    for group in cat.get("groupBandwidth") or []:
        if node in _names(group.get("nodes")) and (group.get("failed") or group.get("belowMin")):
            what = "job failed" if group.get("failed") else "bus bandwidth below minimum"
            why.append(f"group {group.get('groupName', '?')}: {what} (busBW {group.get('busBW', '?')})")
    diagnose = cat.get("diagnose") or {}
    if node in _names(diagnose.get("confirmedFaulty")):
        why.append("confirmed faulty by NVCRE fault isolation")
    return why


def _category_nodes(cat: dict[str, Any]) -> set[str]:
    nodes: set[str] = set()
    for key in ("failedGroups", "groupBandwidth"):
        for group in cat.get(key) or []:
            nodes.update(_names(group.get("nodes")))
    diagnose = cat.get("diagnose") or {}
    nodes.update(_names(diagnose.get("confirmedFaulty")))
    nodes.update(_names(diagnose.get("maxBWNodes")))
    nodes.update(_names(diagnose.get("minBWNodes")))
    for test in diagnose.get("tests") or []:
        nodes.update(_names(test.get("nodes")))
    return nodes


def _category_summary(cat: dict[str, Any]) -> str:
    rows = cat.get("bandwidth") or []
    if rows:
        last = rows[-1]
        return f"busBW {last.get('busBW', '?')} at {last.get('size', '?')}"
    domains = cat.get("domains") or []
    if domains:
        return "goodput " + ", ".join(str(d.get("goodput", "?")) for d in domains)
    return cat.get("runtime", "") and f"runtime {cat['runtime']}"


def parse_nvcre_json(text: str, finished_at_ns: int, *, host: str | None = None,
                     cluster: str = "") -> list[Certification]:
    """An NVCRE JSON report (see the module docstring) -> one Certification per node it names
    (``suite="nvcre"``), sorted by host; only ``host``'s when given. ``cluster`` defaults to the
    envelope's ``source.clusterID``. Raises :class:`CertificationError` for invalid input, a
    ``RUNNING`` report, or a ``host`` the report does not name or excluded."""
    doc = _json_document(text, "NVCRE report")
    reports, envelope = _nvcre_reports(doc)
    if not cluster:
        cluster = str((envelope.get("source") or {}).get("clusterID") or "")
    out: dict[str, Certification] = {}
    for rep in reports:
        name = str(rep.get("name") or "")
        result = str(rep["result"]).upper()
        if result == "RUNNING":
            raise CertificationError(f"NVCRE report {name!r} is still RUNNING: not a final result")
        categories = rep.get("categories") or []
        if not isinstance(categories, list):
            raise CertificationError(f"NVCRE report {name!r}: 'categories' is not a list")
        excluded = set(_names(rep.get("excludedNodes")))
        failed_nodes = set(_names(rep.get("failedNodes")))
        status = {str(n["name"]): str(n.get("status", "")) for n in rep.get("nodeResults") or []
                  if isinstance(n, dict) and n.get("name")}
        nodes = set(status) | failed_nodes
        for cat in categories:
            nodes |= _category_nodes(cat)
        nodes -= excluded
        if host is not None:
            if host in excluded:
                raise CertificationError(f"NVCRE report {name!r} excluded {host} from testing"
                                         + (f": {rep['exclusionReason']}" if rep.get("exclusionReason") else ""))
            if host not in nodes:
                continue
            nodes = {host}
        for node in sorted(nodes):
            tests = []
            for cat in categories:
                label = f"{cat.get('domain', '?')}/{cat.get('variant', '?')}"
                cat_status = str(cat.get("status", ""))
                why = _node_failures(cat, node)
                ok_groups = [g for g in cat.get("groupBandwidth") or []
                             if node in _names(g.get("nodes")) and not g.get("failed") and not g.get("belowMin")]
                if why:
                    tests.append(CertificationTest(name=label, result="fail", detail="; ".join(why)))
                elif ok_groups:
                    tests.append(CertificationTest(name=label, result="pass", detail="; ".join(
                        f"group {g.get('groupName', '?')}: busBW {g.get('busBW', '?')}" for g in ok_groups)))
                elif cat_status == "Succeeded":
                    tests.append(CertificationTest(name=label, result="pass", detail=_category_summary(cat)))
                elif cat_status == "Failed":
                    node_failed = node in failed_nodes or status.get(node) == "Failed"
                    reason = cat.get("failureReason") or "category failed"
                    tests.append(CertificationTest(
                        name=label, result="fail" if node_failed else "warn",
                        detail=reason if node_failed else f"{reason} (not on this node)"))
                else:
                    tests.append(CertificationTest(name=label, result="skip",
                                                   detail=f"category {cat_status or 'without status'}"))
            node_failed = node in failed_nodes or status.get(node) == "Failed"
            if node_failed and not any(t.result == "fail" for t in tests):
                tests.append(CertificationTest(name="nvcre/node", result="fail",
                                               detail="NVCRE reports this node failed"))
            if result == "INCOMPLETE":
                tests.append(CertificationTest(
                    name="nvcre/result", result="fail",
                    detail="certification INCOMPLETE" + (f": {rep['exclusionReason']}"
                                                         if rep.get("exclusionReason") else "")))
            out[node] = _certification(node, "nvcre", tests, finished_at_ns,
                                       f"nvcre {name}".strip(), cluster)
    if host is not None and host not in out:
        raise CertificationError(f"NVCRE report does not name {host}")
    if not out:
        raise CertificationError("NVCRE report names no nodes (no nodeResults, failedNodes or group nodes)")
    return [out[n] for n in sorted(out)]


# -- format detection, time, dispatch -------------------------------------------------------------


def detect_format(text: str) -> Format:
    """Guess the format of ``text`` (one of :data:`FORMATS`); raises
    :class:`CertificationError` when nothing fits."""
    if re.search(r'"DCGM (?:GPU )?Diagnostic"\s*:', text):
        return "dcgm-json"
    if re.match(r"\s*[{\[]\s*[{\[\"\]}]", text):  # a JSON object or array, not "[1,0]<stdout>:"
        if '"categories"' in text and '"result"' in text:
            return "nvcre"
        raise CertificationError("JSON that is neither dcgmi diag -j output nor an NVCRE report")
    if _AVG.search(text) or _START.search(text) or _CRASH.search(text):
        return "nccl-tests"
    if "| Diagnostic" in text or re.search(r"^\|[^|]+\|\s*(Pass|Fail|Warn|Skip)\s*\|", text, re.M) \
            or "Successfully ran diagnostic" in text:
        return "dcgm-text"
    raise CertificationError("cannot tell the format (dcgmi diag table or JSON, nccl-tests output, "
                             "NVCRE report); pass --format")


def document_time(text: str, fmt: str) -> int | None:
    """The finish time the document itself carries (UTC ns), or None: only an NVCRE report
    export envelope has one (``generatedAt``)."""
    if fmt != "nvcre":
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if isinstance(doc, dict) and isinstance(doc.get("report"), dict) and doc.get("generatedAt"):
        try:
            return iso_to_ns(str(doc["generatedAt"]))
        except CertificationError:
            return None
    return None


def iso_to_ns(text: str) -> int:
    """ISO 8601 (``2026-11-30T01:20:00Z``, ``...+01:00``; no offset = UTC) -> UTC ns."""
    try:
        dt = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise CertificationError(f"not an ISO 8601 time: {text!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1_000


def parse_certification(text: str, fmt: str, *, host: str | None, finished_at_ns: int,
                        cluster: str = "", min_busbw_gbps: float | None = None) -> list[Certification]:
    """Parse ``text`` in format ``fmt`` (``auto`` or one of :data:`FORMATS`) -> Certifications
    (one, except for NVCRE reports). ``host`` is required except for NVCRE; ``min_busbw_gbps``
    for nccl-tests. Raises :class:`CertificationError`."""
    if fmt == "auto":
        fmt = detect_format(text)
    if fmt not in FORMATS:
        raise CertificationError(f"unknown format {fmt!r} (auto, {', '.join(FORMATS)})")
    if fmt == "nvcre":
        return parse_nvcre_json(text, finished_at_ns, host=host, cluster=cluster)
    if not host:
        raise CertificationError(f"--host is required for {fmt} input (only NVCRE reports name their nodes)")
    if fmt == "dcgm-text":
        return [parse_dcgm_diag_text(text, host, finished_at_ns, cluster=cluster)]
    if fmt == "dcgm-json":
        return [parse_dcgm_diag_json(text, host, finished_at_ns, cluster=cluster)]
    if min_busbw_gbps is None:
        raise CertificationError("nccl-tests input needs --min-busbw (GB/s)")
    return [parse_nccl_tests(text, host, finished_at_ns, min_busbw_gbps, cluster=cluster)]


# -- source -------------------------------------------------------------------------------------


class CertificationFiles:
    """Certification result files as a :class:`connectors.source.Source`.

    ``files``: paths; ``fmt``: ``auto`` (:func:`detect_format` per file) or one of
    :data:`FORMATS`; ``host``, ``cluster``, ``min_busbw_gbps``: as :func:`parse_certification`;
    ``finished_at_ns``: the finish time of every file (UTC ns), default the document's own
    (:func:`document_time`), else the file's modification time.

    :meth:`read` parses every file (all or nothing); :meth:`poll` returns the records once
    (reading them first if needed), then nothing. There is no position: :meth:`checkpoint` is
    ``{}``. Raises :class:`CertificationError` prefixed with the file's path for an unreadable
    or malformed file."""

    def __init__(self, files: Iterable[str | Path], *, cluster: str, host: str | None = None, fmt: str = "auto",
                 finished_at_ns: int | None = None, min_busbw_gbps: float | None = None) -> None:
        self.files = [Path(f) for f in files]
        self.cluster = cluster
        self.host = host
        self.fmt = fmt
        self.finished_at_ns = finished_at_ns
        self.min_busbw_gbps = min_busbw_gbps
        self.records: list[Certification] | None = None
        self._per_file: list[tuple[Path, int]] = []
        self._polled = False

    def read(self) -> list[Certification]:
        """Parse every file; returns the records (one per certified host and file)."""
        records: list[Certification] = []
        per_file: list[tuple[Path, int]] = []
        for path in self.files:
            try:
                text = path.read_text("utf-8", errors="replace")
                fmt = detect_format(text) if self.fmt == "auto" else self.fmt
                at = self.finished_at_ns or document_time(text, fmt) or os.stat(path).st_mtime_ns
                got = parse_certification(text, fmt, host=self.host, finished_at_ns=at, cluster=self.cluster,
                                          min_busbw_gbps=self.min_busbw_gbps)
            except OSError as exc:
                raise CertificationError(f"{path}: {exc.strerror or exc}") from None
            except CertificationError as exc:
                raise CertificationError(f"{path}: {exc}") from None
            records += got
            per_file.append((path, len(got)))
        self.records, self._per_file = records, per_file
        return records

    def poll(self) -> list[Certification]:
        """Every record on the first call, ``[]`` afterwards."""
        if self._polled:
            return []
        records = self.records if self.records is not None else self.read()
        self._polled = True
        return list(records)

    def checkpoint(self) -> dict[str, Any]:
        """``{}``: result files are published whole, there is no position to keep."""
        return {}

    def coverage(self) -> list[CoverageEntry]:
        """One entry ``certification:<path>`` per file read, ``records`` = its certifications."""
        return [CoverageEntry(source=f"certification:{path}", status="present" if n else "empty", records=n)
                for path, n in self._per_file]


# -- CLI ----------------------------------------------------------------------------------------


@connector(interval=None, topic="certifications", errors=(CertificationError,))
def connect_certifications_cli(
    opts: Shared,
    files: Annotated[list[Path], typer.Argument(help="result files (dcgmi diag table or -j JSON, nccl-tests output, NVCRE report JSON)")],
    cluster: Annotated[str, typer.Option(help="cluster of the host(s): the worker's remediation is per cluster")],
    host: Annotated[str | None, typer.Option(help="the certified host (required except for NVCRE reports, which name their nodes; for those it selects one)")] = None,
    format: Annotated[str, typer.Option("--format", help="auto, dcgm-text, dcgm-json, nvcre or nccl-tests")] = "auto",
    finished_at: Annotated[str | None, typer.Option("--finished-at", help="when the run finished, ISO 8601 (default: an NVCRE envelope's generatedAt, else the file's mtime)")] = None,
    min_busbw: Annotated[float | None, typer.Option("--min-busbw", min=0.0, help="nccl-tests: minimum average bus bandwidth, GB/s")] = None,
) -> Generator[CertificationFiles, Any, None]:
    """Publish certification results (DCGM diag, nccl-tests, NVCRE) as Certification records, key = host.

    Every file is parsed before anything is sent: an unreadable or malformed file exits 2 with one line on stderr and publishes nothing."""
    if format != "auto" and format not in FORMATS:
        raise CertificationError(f"--format must be auto, {', '.join(FORMATS)}; got {format!r}")
    try:
        explicit = iso_to_ns(finished_at) if finished_at else None
    except CertificationError as exc:
        raise CertificationError(f"--finished-at: {exc}") from None
    source = CertificationFiles(files, cluster=cluster, host=host, fmt=format, finished_at_ns=explicit,
                                min_busbw_gbps=min_busbw)
    records = source.read()
    yield source
    failed = sum(not c.passed for c in records)
    typer.echo(f"published {len(records)} certifications ({len(records) - failed} passed, {failed} failed) "
               f"of {len(files)} files to {opts.topic}", err=True)
