"""Write stored observations back as an incident bundle (``BUNDLE.md`` v1).

:func:`export_bundle` takes the observations of one selection (:mod:`streams.sources`, e.g.
:func:`streams.sources.observations_from_clickhouse` with ``workload=W``) and writes:

* ``workload.yaml`` -- the body of W's workload record (``scheduler_event`` /
  ``workload_yaml``: the scheduler's file as published); ``workloads/<id>.yaml`` -- the
  other workload records of the selection. A record without a body, or whose spec holds task
  pids (from ``scheduler/<host>/`` listpids tables, not exported as files), is written as YAML
  of its ``attributes.workload``.
* ``topology.yaml`` -- the body of the topology record, if any.
* ``logs/<host>/<file>``, ``fabric/<switch>/<file>``, ``metrics/<host>/<file>`` -- every
  record with a body (log lines, scheduler log lines), at its ``position.file`` when that is a
  bundle path (``logs/node-a01/dmesg.log``), else ``logs/<host>/<file name>``; its lines
  from ``position.line`` on (a record spans as many lines as its body has). Lines no record
  holds are written blank, and a file is padded with blank lines to the line count its
  coverage record reports, so every record keeps its line number -- which is part of its
  observation id -- and lines without a time of their own still inherit the same neighbour.
  Records without a line number follow the numbered ones in time order.

Path parts are checked (letters, digits, ``. _ - + @ :``; no ``..``): a position from a log
cannot write outside the output directory.

What does not round-trip:

* lines that were never published -- a connector that filters lines (keywords, levels) only
  published some; blank lines between records come back blank, other unpublished lines are
  lost, so a line without a timestamp may inherit a different neighbour's time;
* telemetry samples (``kind="telemetry"``) and port counter samples (``fabric_counter``) are
  stored as parsed samples, not as their files: they are not written (counted in
  :attr:`ExportReport.skipped`), so GPU tables learnt from telemetry and counter-based fabric
  faults are missing from the exported bundle;
* bodies cut at ``MAX_BODY_CHARS`` are written cut (without the cut marker);
* invalid UTF-8 and NUL bytes were replaced when read (U+FFFD, U+2400) and stay replaced, so
  the coverage notes about them are gone;
* ``expected.yaml`` is never published, so it is not written;
* observation ids name their source: records published by another connector (Slurm, files)
  come back as bundle records with other ids, and a workload exported from
  ``workloads/<id>.yaml`` of its bundle becomes ``workload.yaml`` of the new one (the bundle's
  source instance is named after ``workload.yaml``'s workload). The verdict then says the same
  (:func:`streams.sources.verdict_key`) with other evidence ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml

from schemas.bundle import WorkloadSpec
from schemas.records import CoverageEntry, Observation

__all__ = ["ExportError", "ExportReport", "export_bundle"]

_SAFE = re.compile(r"^[A-Za-z0-9._+@:-]+$")
_TOP = ("logs", "fabric", "metrics")
#: the marker the bundle reader appends to a cut body (connectors.bundle._log_obs)
_CUT = re.compile(r"\n\[faultstream: cut, \d+ more characters\]$")


class ExportError(Exception):
    """The bundle cannot be written: no workload record for the workload, an output
    directory that is not empty, an I/O error."""


@dataclass
class ExportReport:
    """What :func:`export_bundle` wrote: ``files`` (paths relative to the bundle, sorted),
    ``records`` written, ``skipped`` (kind -> count of records not written: telemetry,
    fabric_counter, records without a body), ``overlaps`` (records whose lines another record
    of the same file already held: not written)."""

    out: Path
    files: list[str] = field(default_factory=list)
    records: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    overlaps: int = 0


def _part(text: str, fallback: str) -> str:
    text = text.strip()
    if not text or text in (".", "..") or not _SAFE.match(text):
        cleaned = re.sub(r"[^A-Za-z0-9._+@:-]+", "_", text).strip("._") or fallback
        return cleaned
    return text


def _bundle_path(obs: Observation) -> str:
    """The bundle path of an observation's file (see the module docstring)."""
    file = obs.position.file or ""
    parts = [p for p in PurePosixPath(file).parts if p not in ("/",)]
    if len(parts) >= 3 and parts[0] in _TOP and all(_SAFE.match(p) and p not in (".", "..") for p in parts):
        return "/".join(parts)
    host = _part(obs.host or "_unknown", "_unknown")
    name = _part(PurePosixPath(file).name if file else "", f"{obs.kind}.log")
    return f"logs/{host}/{name}"


def _spec_text(obs: Observation) -> str:
    spec = WorkloadSpec.model_validate(obs.attributes.get("workload"))
    # the scheduler's file as published, unless the record holds what the file does not say
    # (task pids read from the bundle's scheduler/<host>/ tables, which are not exported)
    if obs.body and not spec.task_pids:
        return obs.body if obs.body.endswith("\n") else obs.body + "\n"
    return yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False)


def export_bundle(observations: Iterable[Observation], workload_id: str, out: str | Path) -> ExportReport:
    """Write ``observations`` as a bundle for workload ``workload_id`` in directory ``out``
    (created; it must not hold files). Returns what was written. Raises :class:`ExportError`
    when no workload record of ``workload_id`` is among the observations, ``out`` is not
    empty, or a file cannot be written."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out}: exists and is not an empty directory")
    report = ExportReport(out=out)
    specs: dict[str, Observation] = {}
    topology: Observation | None = None
    lines_of: dict[str, int] = {}  # bundle path -> line count from its coverage record
    files: dict[str, list[Observation]] = {}
    for obs in observations:
        if obs.kind == "scheduler_event" and obs.format == "workload_yaml":
            wid = obs.workload_id or str((obs.attributes.get("workload") or {}).get("workload_id", ""))
            held = specs.get(wid)
            if held is None or (obs.observed_at, obs.observation_id) > (held.observed_at, held.observation_id):
                specs[wid] = obs
        elif obs.kind == "topology":
            if topology is None or (obs.observed_at, obs.observation_id) > (topology.observed_at, topology.observation_id):
                topology = obs
        elif obs.kind == "health_event" and obs.format == "coverage":
            try:
                entry = CoverageEntry.model_validate(obs.attributes.get("coverage"))
            except ValueError:
                continue
            if entry.source.startswith("file:"):
                rel = entry.source.removeprefix("file:")
                lines_of[rel] = max(lines_of.get(rel, 0), entry.records)
        elif obs.kind in ("telemetry", "fabric_counter") or obs.body is None:
            report.skipped[obs.kind] = report.skipped.get(obs.kind, 0) + 1
        else:
            files.setdefault(_bundle_path(obs), []).append(obs)
    if workload_id not in specs:
        raise ExportError(f"no workload record (scheduler_event, format workload_yaml) for {workload_id}")
    texts: dict[str, str] = {"workload.yaml": _spec_text(specs[workload_id])}
    for wid, obs in sorted(specs.items()):
        if wid != workload_id:
            texts[f"workloads/{_part(wid, 'workload')}.yaml"] = _spec_text(obs)
    if topology is not None and topology.body:
        texts["topology.yaml"] = topology.body if topology.body.endswith("\n") else topology.body + "\n"
    for rel, records in sorted(files.items()):
        texts[rel] = _file_text(records, lines_of.get(rel, 0), report)
    try:
        for rel, text in sorted(texts.items()):
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            report.files.append(rel)
    except OSError as exc:
        raise ExportError(f"cannot write the bundle in {out}: {exc}") from exc
    return report


def _file_text(records: list[Observation], line_count: int, report: ExportReport) -> str:
    """One file's text: each record's lines at its line number, gaps blank, padded to
    ``line_count`` lines."""
    numbered = sorted((r for r in records if r.position.line), key=lambda r: (r.position.line, r.observation_id))
    loose = sorted((r for r in records if not r.position.line), key=lambda r: (r.observed_at, r.observation_id))
    lines: dict[int, str] = {}
    for rec in numbered:
        body = _CUT.sub("", rec.body or "") if rec.attributes.get("truncated") else (rec.body or "")
        chunk = body.split("\n")
        start = int(rec.position.line)  # type: ignore[arg-type]
        if any(start + i in lines for i in range(len(chunk))):
            report.overlaps += 1
            continue
        for i, text in enumerate(chunk):
            lines[start + i] = text
        report.records += 1
    last = max(lines, default=0)
    for rec in loose:
        for text in (rec.body or "").split("\n"):
            last += 1
            lines[last] = text
        report.records += 1
    total = max(max(lines, default=0), line_count)
    if total == 0:
        return ""
    return "\n".join(lines.get(i, "") for i in range(1, total + 1)) + "\n"
