"""The framing matrix: every vocabulary entry of the pack, in every framing a real line arrives
in, must give its event (pure: no I/O).

:data:`FRAMINGS` are the frames lines reach faultstream in (bare, RFC 3164 and 5424 syslog,
journald, dmesg raw and ``-T``, a ``pdsh`` prefix, CRI and ``kubectl --prefix``, a JSON log
line, a Python exception and ``logging`` prefix, glog, a continuation line under an
application's own message). :data:`NEGATIVE_FRAMINGS` put the same words where they report
nothing (a source line, a comment, a help text, a list of skipped codes): they must give no
event of the entry's kind. :func:`vocabulary_entries` lists the entries, each compiled from
its table (``cuda-errors.csv``, ``xid-catalog.csv``, ``sxid-codes.csv``, ``dcgm-fr.csv``, NVML's
and NCCL's result codes), never from example lines. :func:`coverage_matrix` runs them through
a :class:`~correlators.rules.engine.RulePack`; ``faultstream rules coverage`` prints it and
``tests/correlators/test_spotter.py`` requires every cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import orjson

from correlators import xid as xid_catalog
import correlators.rules.hooks_cuda as hooks_cuda
import correlators.rules.hooks_dcgm as hooks_dcgm
from correlators.rules.hooks_nvidia import sxid_codes
from correlators.rules.spotter import NCCL_RESULTS
from schemas.records import Observation, Position, Source

__all__ = ["FRAMINGS", "NEGATIVE_FRAMINGS", "Entry", "MatrixRow", "coverage_matrix", "vocabulary_entries"]

#: name -> how a line holding the message ``m`` looks in that framing
FRAMINGS: dict[str, Callable[[str], str]] = {
    "bare": lambda m: m,
    "syslog-rfc3164": lambda m: f"Nov 30 01:20:31 node-a01 trainer[4242]: {m}",
    "syslog-rfc5424": lambda m: f"<11>1 2026-11-30T01:20:31.299Z node-a01 trainer 4242 - - {m}",
    "journald": lambda m: f"2026-11-30T01:20:31+0000 node-a01 trainer[4242]: {m}",
    "dmesg-raw": lambda m: f"[ 1234.567890] {m}",
    "dmesg-T": lambda m: f"[Mon Nov 30 01:20:31 2026] {m}",
    "pdsh": lambda m: f"node-a01: [ 1234.567890] {m}",
    "cri": lambda m: f"2026-11-30T01:20:31.299000000Z stderr F {m}",
    "kubectl-prefix": lambda m: f"[pod/trainer-0/main] {m}",
    "json": lambda m: orjson.dumps({"level": "error", "msg": m, "ts": "2026-11-30T01:20:31Z"}).decode(),
    "python-exception": lambda m: f"RuntimeError: {m}",
    "python-logging": lambda m: f"2026-11-30 01:20:31,299 - trainer - ERROR - {m}",
    "glog": lambda m: f"E1130 01:20:31.299000  4242 trainer.cc:88] {m}",
    "continuation": lambda m: f"ERROR: the training step failed:\n    {m}",
}

#: name -> the same message where it reports nothing
NEGATIVE_FRAMINGS: dict[str, Callable[[str], str]] = {
    "source-line": lambda m: f'    raise RuntimeError("{m}")',
    "comment": lambda m: f"# {m}",
    "option-help": lambda m: f"  --ignore-codes LIST   codes to leave alone, as printed: {m}",
    "help-text": lambda m: f"Codes like {m.rsplit(' ', 1)[-1]} are listed in the manual",
    "skipped": lambda m: f"health monitor: skipping {m}",
}


@dataclass(frozen=True)
class Entry:
    """One vocabulary entry: ``vocabulary`` (cuda, cuda-text, xid, sxid, dcgm, nvml, nccl),
    ``name`` (the word as its table spells it), ``message`` (a message holding it, as an
    application or daemon writes one) and the event it must give: ``type`` with
    ``attributes[attr] == value``."""

    vocabulary: str
    name: str
    message: str
    type: str
    attr: str
    value: Any


def vocabulary_entries() -> list[Entry]:
    """Every entry of every vocabulary the spotter reads, from its table."""
    out: list[Entry] = []
    for row in hooks_cuda.CUDA_ERRORS:
        if row.errno == 0:
            continue
        for name in (row.runtime_enum, row.driver_enum):
            if name and hooks_cuda.cuda_lookup(name=name) is row:
                out.append(Entry("cuda", name, f"cudaStreamSynchronize returned {name} (error {row.errno})",
                                 "cuda.error", "error", row.error))
        for text in (row.text, *row.alt_texts):
            if len(text.split()) >= 4 and hooks_cuda.cuda_lookup(text=text) is row:
                out.append(Entry("cuda-text", text, f"cudaStreamSynchronize failed: {text}",
                                 "cuda.error", "error", row.error))
    for code in sorted(xid_catalog.catalog()):
        out.append(Entry("xid", f"Xid {code}", f"Xid (PCI:0000:3b:00): {code}, pid=4242, name=python3, Ch 00000008",
                         "gpu.xid", "xid", code))
    for code, name in sorted(sxid_codes().items()):
        out.append(Entry("sxid", name, f"SXid (PCI:0000:05:00.0): {code}, Non-fatal, Link 30 reported",
                         "gpu.sxid", "sxid", code))
    for name, fc in sorted(hooks_dcgm.CODES_BY_NAME.items()):
        if fc.fault_class != "none":
            out.append(Entry("dcgm", name, f"GPU 3 health check failed: {name}", "dcgm.failure", "fr_code", name))
    for name in sorted(hooks_cuda.NVML_ERRORS):
        if name not in hooks_cuda._NVML_BENIGN:
            out.append(Entry("nvml", name, f"nvmlDeviceGetHandleByIndex returned {name}", "nvml.error",
                             "nvml_error", name))
    for name in NCCL_RESULTS:
        out.append(Entry("nccl", name, f"{name}: the collective could not complete", "", "result", name))
    return out


@dataclass(frozen=True)
class MatrixRow:
    """One entry's results: the framings (of :data:`FRAMINGS`) that gave its event, and the
    negative framings (of :data:`NEGATIVE_FRAMINGS`) that gave one although they must not."""

    entry: Entry
    hits: tuple[str, ...]
    false_positives: tuple[str, ...]

    @property
    def misses(self) -> tuple[str, ...]:
        return tuple(f for f in FRAMINGS if f not in self.hits)


def _observation(text: str) -> Observation:
    return Observation(
        source=Source(connector="coverage", instance="matrix"), kind="log_line",
        observed_at=1_796_001_631_299_000_000, time_source="line", time_quality=0.9,
        host="node-a01", cluster="coverage", body=text, position=Position(file="coverage.log", line=1),
    ).with_id()


def _gives(pack: Any, text: str, entry: Entry) -> bool:
    return any((not entry.type or e.type == entry.type) and e.attributes.get(entry.attr) == entry.value
               for e in pack.extract(_observation(text)))


def coverage_matrix(pack: Any, entries: Iterable[Entry] | None = None) -> list[MatrixRow]:
    """Run every entry (default: :func:`vocabulary_entries`) in every framing through
    ``pack`` (a :class:`~correlators.rules.engine.RulePack`). A framing is a hit when one event
    of the record has the entry's type and attribute value."""
    rows = []
    for entry in vocabulary_entries() if entries is None else entries:
        hits = tuple(f for f, frame in FRAMINGS.items() if _gives(pack, frame(entry.message), entry))
        wrong = tuple(f for f, frame in NEGATIVE_FRAMINGS.items() if _gives(pack, frame(entry.message), entry))
        rows.append(MatrixRow(entry, hits, wrong))
    return rows
