"""Vocabulary spotting, independent of the frame (pure: no I/O).

The words that carry a failure's meaning are stable whatever prints them: CUDA's enum names and
descriptions, ``Xid <n>``, ``SXid <n>``, ``DCGM_FR_*`` names and DCGM's message texts, NVML's
return codes, NCCL's result names. Frame rules (``correlators/rules/*.yaml``) read a line in
the shape one emitter prints and add what only that shape holds (rank, pid, PCI id, peer, time);
the :class:`Spotter` reads the vocabularies wherever they stand -- an application's wrapper
around a CUDA error, a continuation line, a health daemon re-printing a DCGM message, a
fragment an operator pasted -- and gives the event a frame rule would have given, with
``attributes.frame = "none"``. A spot is dropped when a frame rule already gave the same fact
for the record (:meth:`Spot.key`): frame rules win.

Vocabularies (each compiled from its table, never from example lines):

* ``vocab.cuda`` -- ``cuda-errors.csv`` (CUDA ``driver_types.h`` / ``cuda.h``, 11.x-13.x):
  every ``cudaErrorXxx`` / ``CUDA_ERROR_XXX`` name, and every description of four words or more
  when nothing but punctuation, numbers, enum names, a source location or a known framework
  trailer follows it on its line (so ``... (simulated in rank 1)`` is not CUDA's text).
* ``vocab.xid`` -- ``Xid``/``XID`` followed by a number, optionally with the driver's
  ``(PCI:dddd:bb:dd[ GPU-I..])`` and ``:``/``=``; the catalog (``xid-catalog.csv``) fills the
  rest as for the ``NVRM: Xid`` rule (:func:`correlators.rules.hooks_nvidia.nvrm_xid`).
* ``vocab.sxid`` -- ``SXid`` with the NVSwitch's PCI id and a five-digit code (``sxid-codes.csv``).
* ``vocab.dcgm`` -- ``DCGM_FR_*`` names and the message templates of ``dcgm-fr.csv`` (DCGM's
  ``dcgm_errors.h`` printf formats, compiled by :mod:`correlators.rules.hooks_dcgm`).
* ``vocab.nvml`` -- ``NVML_ERROR_*`` names (``nvml.h``).
* ``vocab.nccl`` -- ``ncclResult_t`` names of errors (``nccl.h``: ncclUnhandledCudaError,
  ncclSystemError, ncclInternalError, ncclInvalidArgument, ncclInvalidUsage, ncclRemoteError).

Negative contexts (:data:`NEGATIVE_CONTEXTS`) keep the same words out of places where they
report nothing: comments and source lines (``if``/``raise``/``case``, comparisons, an enum
header's ``NAME = 700,``), shell commands (``grep``), test output, help and listing texts
(``e.g.``, ``such as``, ``one of`` leading to the word), lists of what a tool ignores or skips,
references to an earlier error (``caused by previous Xid``), negations and recoveries (``no
Xid``, ``recovered from Xid 79``), informational levels (``NCCL INFO``, ``level=info``) and
healthy reports. They are checked on the line holding the
word; frame rules honour those marked for them at the start of their match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import ahocorasick

import correlators.rules.hooks_cuda as hooks_cuda
import correlators.rules.hooks_dcgm as hooks_dcgm
from correlators.rules.code import Draft
from correlators.rules.hooks_nccl import RESULT_EVENT
from correlators.rules.hooks_nvidia import MAX_XID, nvrm_xid, nvswitch_sxid
from correlators.rules.model import Rule
from correlators.rules.printf import literal_runs

__all__ = ["NEGATIVE_CONTEXTS", "Spot", "Spotter", "SPOT_RULES", "negative_context"]


def _rule(rid: str, events: tuple[str, ...], source: str) -> Rule:
    return Rule(id=rid, version=1, source=source, file="correlators/rules/spotter.py", kind="log",
                event=events[0], events=events)


#: the pseudo-rules spots are built under (``Event.rule`` = ``vocab.<name>@1``)
SPOT_RULES: dict[str, Rule] = {r.id: r for r in (
    _rule("vocab.cuda", ("cuda.error",), "cuda-errors.csv: CUDA driver_types.h enum cudaError, cuda.h enum "
          "cudaError_enum and their cudaGetErrorString/cuGetErrorString descriptions, CUDA 11.x-13.x"),
    _rule("vocab.xid", ("gpu.xid",), "NVIDIA XID catalog (xid-catalog.csv); the driver's 'Xid (PCI:...): N' "
          "token as open-gpu-kernel-modules nvErrorLog_va prints it, quoted without its NVRM: prefix"),
    _rule("vocab.sxid", ("gpu.sxid",), "sxid-codes.csv: NVSWITCH_ERR_TYPE of open-gpu-kernel-modules "
          "src/common/nvswitch/interface/ctrl_dev_nvswitch.h; 'SXid (PCI:...): NNNNN' as nvswitch prints it"),
    _rule("vocab.dcgm", ("dcgm.failure",), "dcgm-fr.csv: DCGM dcgm_errors.h dcgmError_t names and "
          "DCGM_FR_*_MSG printf formats"),
    _rule("vocab.nvml", ("nvml.error",), "nvml.h nvmlReturn_t names (NVML 12.x/13.x)"),
    _rule("vocab.nccl", ("nccl.system_error", "nccl.internal_error", "nccl.invalid_usage", "nccl.remote_error",
                         "nccl.error"),
          "nccl.h ncclResult_t error names (NCCL 2.x)"),
)}

#: ncclResult_t error names the spotter reads (nccl.h; ncclInProgress and ncclTimeout are
#: states, not failures), each giving the event of :data:`hooks_nccl.RESULT_EVENT`
NCCL_RESULTS = ("ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError", "ncclInvalidArgument",
                "ncclInvalidUsage", "ncclRemoteError")

#: Where a vocabulary word reports nothing: (name, pattern, read, frames). ``read`` says what
#: the pattern is searched in: ``line`` (the whole line holding the word), ``before`` (the
#: line up to the word: the phrase must lead to it), ``from`` (the line from the word on: an
#: enum header's ``NAME = 700,``) or ``end`` (the whole line; for a frame
#: match, the line where it ends: PyTorch's traceback frames start on the echoed source line
#: and end on the exception's). ``frames``: frame rules honour it too; the others are the
#: spotter's alone. Each has negative examples in tests/correlators/test_spotter.py.
NEGATIVE_CONTEXTS: tuple[tuple[str, re.Pattern[str], str, bool], ...] = (
    ("comment", re.compile(r"^\s*(?:#|//|/\*)|\s(?:#|//)\s"), "before", True),
    ("definition", re.compile(r"^[A-Za-z_]\w*\s*=\s*(?:-?\d+\s*(?:[,;:]|/[*/]|$)|(?:ignore|disabled?|off|false|true)\b)",
                              re.IGNORECASE), "from", True),
    ("explanation", re.compile(r"^[\w-]+(?:\s*\(?\d+\)?)?\s+(?:indicates|means|denotes|refers to|"
                               r"is (?:a|an|the|raised|returned))\s", re.IGNORECASE), "from", False),
    ("shell command", re.compile(r"^\s*[$>]\s|\|\s*e?grep\b|\bgrep\s"), "before", True),
    ("test output", re.compile(r"::test_|\b(?:PASSED|XFAIL|XPASS)\b|\bexpected\b[^.;]{0,30}$"), "line", True),
    ("option help", re.compile(r"^\s*(?:usage:|-{1,2}[a-z][\w-]*[ =]+[A-Z_]*\s)", re.IGNORECASE), "line", True),
    ("help or listing", re.compile(
        r"(?i)(?:^\s*usage:|\b(?:e\.g\.|i\.e\.|for example|such as|one of|possible values|valid values|"
        r"search for|codes? like)[\s:,(`'\"]{0,3}(?:[\w.-]+[\s,/]{1,3}){0,3})$"), "before", True),
    ("ignored", re.compile(
        r"(?i)\b(?:ignor(?:e|es|ed|ing)|skip(?:s|ped|ping)?|whitelist(?:ed)?|allowlist(?:ed)?|"
        r"exclud(?:e|ed|ing)|suppress(?:ed|ing)?|filter(?:ed|ing) out|masked)\b[^.;!?]{0,60}$"), "before", True),
    ("source code", re.compile(
        r"^\s*(?:\[rank\d+\]:\s*)?(?:raise|if|elif|else|except|return|case|assert|while|for|def|throw|catch|"
        r"switch|#define|const|static|enum|typedef|yield|print\(|printf\(|fprintf\(|std::cerr|log\.)\b"),
     "end", True),
    ("comparison", re.compile(r"(?:==|!=|<=|>=)\s*[\w.:]*\s*$"), "before", False),
    ("reference", re.compile(r"(?i)\b(?:caused by|triggered by|due to|after|following)(?: an?| the)?"
                             r"(?: previous| prior| earlier)?\s*$|(?i:previous|prior|earlier)\s+$"), "before", False),
    ("negation", re.compile(r"(?i)\b(?:no|without|zero|none of the|never|not|recovered from|cleared|resolved)"
                            r"\s+(?:[\w-]+\s+){0,2}[(\"'`]?$"), "before", True),
    ("informational", re.compile(r"\bNCCL INFO\b|\blevel=(?:info|debug)\b", re.IGNORECASE), "line", False),
    ("healthy", re.compile(r"(?i)\b(?:healthy|no (?:new |recent )?(?:s?xids?|errors?|faults?) (?:found|seen|since))\b"),
     "line", False),
)


#: Per negative context, literals one of which every match of its pattern holds, and whether
#: the pattern ignores case (then they are lower case and tested on the lowered text, for ASCII
#: texts only: Python's case-insensitive matching also pairs a few non-ASCII letters with ASCII
#: ones). A text holding none of them cannot match: the pattern is not run. A context missing
#: here always runs (its pattern is anchored and cheap).
CONTEXT_LITERALS: dict[str, tuple[tuple[str, ...], bool]] = {
    "comment": (("#", "/"), False),
    "definition": (("=",), False),
    "explanation": (("indicates", "means", "denotes", "refers to", "is "), True),
    "shell command": (("$", ">", "grep"), False),
    "test output": (("::test_", "PASSED", "XFAIL", "XPASS", "expected"), False),
    "help or listing": (("usage:", "e.g.", "i.e.", "for example", "such as", "one of", "possible values",
                         "valid values", "search for", "like"), True),
    "ignored": (("ignor", "skip", "whitelist", "allowlist", "exclud", "suppress", "filter", "masked"), True),
    "comparison": (("==", "!=", "<=", ">="), False),
    "reference": (("caused by", "triggered by", "due to", "after", "following", "previous", "prior", "earlier"), True),
    "negation": (("no", "without", "zero", "never", "recovered from", "cleared", "resolved"), True),
    "informational": (("nccl info", "level="), True),
    "healthy": (("healthy", "no "), True),
}


def _may_match(name: str, text: str) -> bool:
    """False when the pattern of context ``name`` cannot match ``text`` (:data:`CONTEXT_LITERALS`)."""
    need = CONTEXT_LITERALS.get(name)
    if need is None:
        return True
    words, caseless = need
    if caseless:
        if not text.isascii():
            return True
        text = text.lower()
    return any(w in text for w in words)


def negative_context(line: str, before: str, frames: bool = False, end_line: str | None = None) -> str | None:
    """The name of the first negative context (:data:`NEGATIVE_CONTEXTS`) a word is in, or
    None: ``line`` is the line holding it, ``before`` the line up to it, ``end_line`` the line
    where a frame match ends (default ``line``). ``frames``: only the contexts frame rules
    honour. A pattern runs only on a text holding one of its literals (:data:`CONTEXT_LITERALS`)."""
    for name, rx, read, for_frames in NEGATIVE_CONTEXTS:
        if frames and not for_frames:
            continue
        if read == "from":
            text = line[len(before):]
        elif read == "before":
            text = before
        else:
            text = end_line if read == "end" and end_line is not None else line
        if _may_match(name, text) and rx.search(text):
            return name
    return None


@dataclass
class Spot:
    """One vocabulary word read in a record: the pseudo-rule (:data:`SPOT_RULES`), the draft of
    its event, the offset of the word in the body, and ``key``: the (attribute, value) a frame
    event carrying the same fact holds (``("xid", 79)``, ``("error", "illegal_address")``,
    ``("type", "nccl.system_error")``)."""

    rule: Rule
    draft: Draft
    start: int
    key: tuple[str, Any]


# --------------------------------------------------------------------------- readers

_WORD = re.compile(r"\w")
_XID = re.compile(
    r"(?:Xid|XID)(?:\s*\((?:PCI:)?(?P<gpu_pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
    r"(?:\s+GPU-I:(?P<gpu_instance>\d+))?(?:\s+GPU-CI:(?P<compute_instance>\d+))?\))?"
    r"\s*(?:[:=#]\s*|\s+)(?P<xid>\d{1,4})(?![\d.:/%xX-]|\s*(?:ms|s|sec|seconds|GB|MB|%)\b)"
    r"(?:,[ \t]*(?:pid=(?P<pid>[^,\s]*),[ \t]*)?(?:name=(?P<process>[^,\n]*),[ \t]*)?(?P<detail>[^\n]*))?")
_SXID = re.compile(
    r"SXid\s*\((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\)\s*:?\s*"
    r"(?P<sxid>\d{5})\b,?\s*(?:(?P<_sev>Fatal|Non-fatal|Correctable)\b,?\s*)?(?P<detail>[^\n]*)"
    r"|SXid\s*[:=#]?\s*(?P<sxid2>\d{5})\b")
_DCGM_NAME = re.compile(r"DCGM_FR_[A-Z0-9_]+")
_NVML_NAME = re.compile(r"NVML_ERROR_[A-Z_]+")
# what may follow a CUDA description on its line: punctuation, numbers, enum names, a source
# location, a framework's trailer (hooks_cuda's) -- nothing that is words of the application's
_CUDA_TAIL_NOISE = re.compile(
    r"\(?\s*(?:error\s*(?:code)?\s*[:=#]?\s*)?-?\d+\s*\)?|\b(?:cuda|CUDA)\w*|\(?[\w./-]+:\d+\)?|[\s'\"`.,;:!()\[\]{}<>=-]")


def _cuda_tail_ok(rest: str) -> bool:
    if hooks_cuda._TRAILERS.match(rest) and rest.strip():
        return True
    return not _CUDA_TAIL_NOISE.sub("", rest)


class Spotter:
    """One matcher for every vocabulary of the pack: an Aho-Corasick automaton over the
    vocabularies' literal anchors (enum names, descriptions, ``Xid``/``SXid``, the DCGM
    templates' longest literal runs), then a small reader per hit. :attr:`literals` are the
    anchors, for the pack's prefilter. :meth:`spot` is pure."""

    def __init__(self) -> None:
        self._auto = ahocorasick.Automaton()
        anchors: dict[str, list[tuple[Callable[..., Spot | None], Any]]] = {}

        literals: set[str] = set()

        def add(word: str, reader: Callable[..., Spot | None], arg: Any, printed: str | None = None) -> None:
            """``word``: the anchor (lower case for texts read case-insensitively);
            ``printed``: the word as the vendor prints it, for the pack's prefilter."""
            anchors.setdefault(word, []).append((reader, arg))
            literals.add(printed or word)

        for row in hooks_cuda.CUDA_ERRORS:
            if row.errno == 0:
                continue
            for name in (row.runtime_enum, row.driver_enum):
                if name:
                    add(name, self._cuda_name, row)
            for text in (row.text, *row.alt_texts):
                if len(text.split()) >= 4:
                    add(text.lower(), self._cuda_text, row, text)
        for word in ("Xid", "XID"):
            add(word, self._xid, None)
        add("SXid", self._sxid, None)
        add("DCGM_FR_", self._dcgm_name, None)
        for template, fc in hooks_dcgm.message_templates():
            # the template's longest literal run anchors it; the compiled template reads it
            lit = max(literal_runs(template), key=len, default="")
            if len(lit) >= 12:
                add(lit.lower(), self._dcgm_text, fc, lit)
        add("NVML_ERROR_", self._nvml_name, None)
        for name in NCCL_RESULTS:
            add(name, self._nccl_name, name)
        for word, readers in anchors.items():
            self._auto.add_word(word, (len(word), tuple(readers)))
        self._auto.make_automaton()
        # every anchor lowered, for one pass over an ASCII body's lowered text (see _hits):
        # lowered word -> (length, {anchor: readers} of the anchors lowering to it, the readers
        # of the lowered word itself when it is an anchor)
        self._folded = ahocorasick.Automaton()
        folded: dict[str, dict[str, tuple]] = {}
        for word, readers in anchors.items():
            folded.setdefault(word.lower(), {})[word] = tuple(readers)
        for low, exact in folded.items():
            self._folded.add_word(low, (len(low), exact, exact.get(low)))
        self._folded.make_automaton()
        #: the anchors as printed, for the pack's prefilter (a record holding none of them holds
        #: no vocabulary word in the case its vendor prints it)
        self.literals: tuple[str, ...] = tuple(sorted(literals))

    def spot(self, body: str) -> list[Spot]:
        """Every vocabulary word of ``body`` outside a negative context, in body order, one
        spot per (key, line)."""
        out: list[Spot] = []
        seen: set[tuple[tuple[str, Any], int]] = set()
        for end, start, readers in self._hits(body):
            line_start = body.rfind("\n", 0, start) + 1
            line_end = body.find("\n", start)
            line = body[line_start:line_end if line_end >= 0 else len(body)]
            if start > 0 and _WORD.match(body[start - 1]):
                continue  # inside a longer word (oXid, my_CUDA_ERROR_X): not the vocabulary's word
            if negative_context(line, body[line_start:start]) is not None:
                continue
            for reader, arg in readers:
                s = reader(body, start, end, line_start, line, arg)
                if s is None:
                    continue
                mark = (s.key, line_start)
                if mark not in seen:
                    seen.add(mark)
                    out.append(s)
                break
        return out

    def _hits(self, body: str, one_pass: bool | None = None) -> Iterator[tuple[int, int, tuple]]:
        """(end, start, readers) of each anchor in ``body``; descriptions and DCGM texts are
        anchored in lower case, so the lowered body is searched as well: an anchor as the body
        spells it is read before a lowered one at the same place. An ASCII body (lowering keeps
        every offset) takes one pass over its lowered text that finds both (``one_pass``
        default: ``body.isascii()``; the two ways agree on every ASCII body)."""
        found = []
        if one_pass if one_pass is not None else body.isascii():
            for end, (n, exact, low) in self._folded.iter(body.lower()):
                start = end + 1 - n
                readers = exact.get(body[start:end + 1], low)
                if readers is not None:
                    found.append((end + 1, start, readers))
        else:
            for text in (body, body.lower()):
                for end, (n, readers) in self._auto.iter(text):
                    found.append((end + 1, end + 1 - n, readers))
        # longest first at one start, then body order
        found.sort(key=lambda h: (h[1], -(h[0] - h[1])))
        last_end = -1
        for end, start, readers in found:
            if start < last_end:
                continue  # a shorter word inside one already read
            last_end = end
            yield end, start, readers

    # -- readers: (body, start, end, line_start, line, arg) -> Spot | None ---------------

    @staticmethod
    def _cuda_draft(row: hooks_cuda.CudaError) -> Draft:
        d = Draft(type="cuda.error")
        hooks_cuda._fill_cuda(d, row, None)
        return d

    def _cuda_name(self, body, start, end, line_start, line, row) -> Spot | None:
        if end < len(body) and (body[end].isalnum() or body[end] == "_"):
            return None  # a longer identifier
        return Spot(SPOT_RULES["vocab.cuda"], self._cuda_draft(row), start, ("error", row.error))

    def _cuda_text(self, body, start, end, line_start, line, row) -> Spot | None:
        rest = line[end - line_start:]
        if not _cuda_tail_ok(rest):
            return None
        d = self._cuda_draft(row)
        d.attributes["text"] = body[start:end]
        return Spot(SPOT_RULES["vocab.cuda"], d, start, ("error", row.error))

    def _xid(self, body, start, end, line_start, line, _) -> Spot | None:
        m = _XID.match(body, start, line_start + len(line))
        if m is None:
            return None
        xid = int(m["xid"])
        if not 0 < xid <= MAX_XID:
            return None
        d = Draft(type="gpu.xid", attributes={"xid": xid})
        for name in ("pid", "gpu_instance", "compute_instance"):
            if m[name] and m[name].isdigit():
                d.attributes[name] = int(m[name])
        if m["process"]:
            d.attributes["process"] = m["process"].strip()
        if m["detail"] and m["detail"].strip():
            d.attributes["detail"] = m["detail"].strip()
        d.gpu_pci = m["gpu_pci"]
        drafts = nvrm_xid(d, m, None, SPOT_RULES["vocab.xid"])  # type: ignore[arg-type]
        return Spot(SPOT_RULES["vocab.xid"], drafts[0], start, ("xid", xid)) if drafts else None

    def _sxid(self, body, start, end, line_start, line, _) -> Spot | None:
        m = _SXID.match(body, start, line_start + len(line))
        if m is None:
            return None
        sxid = int(m["sxid"] or m["sxid2"])
        d = Draft(type="gpu.sxid", attributes={"sxid": sxid})
        if m["pci"]:
            d.attributes["switch"] = m["pci"]
        if m["_sev"]:
            d.attributes["_sev"] = m["_sev"]
        if m["detail"] and m["detail"].strip():
            d.attributes["detail"] = m["detail"].strip()
        drafts = nvswitch_sxid(d, m, None, SPOT_RULES["vocab.sxid"])  # type: ignore[arg-type]
        return Spot(SPOT_RULES["vocab.sxid"], drafts[0], start, ("sxid", sxid)) if drafts else None

    def _dcgm(self, fc: hooks_dcgm.FailureCode | None, name: str | None, detail: str | None, start: int) -> Spot | None:
        d = Draft(type="dcgm.failure")
        if fc is None and name:
            d.attributes["fr_code"] = name
        if not hooks_dcgm._fill(d, fc, detail):
            return None  # an informational code (test skipped, not supported, ...)
        return Spot(SPOT_RULES["vocab.dcgm"], d, start, ("fr_code", d.attributes["fr_code"]))

    def _dcgm_name(self, body, start, end, line_start, line, _) -> Spot | None:
        m = _DCGM_NAME.match(body, start)
        if m is None or m.group().endswith("_"):
            return None
        name = m.group()
        fc = hooks_dcgm.CODES_BY_NAME.get(name)
        if fc is None or name.endswith("_MSG") or name.endswith("_NEXT"):
            return None
        return self._dcgm(fc, name, line[m.end() - line_start:].strip(" :-=") or None, start)

    def _dcgm_text(self, body, start, end, line_start, line, fc) -> Spot | None:
        found = hooks_dcgm.code_of_message(line)
        if found is None:
            return None  # the anchor without the rest of a DCGM message
        return self._dcgm(found, None, line.strip(), start)

    def _nvml_name(self, body, start, end, line_start, line, _) -> Spot | None:
        m = _NVML_NAME.match(body, start)
        if m is None or m.group() not in hooks_cuda.NVML_ERRORS or m.group() in hooks_cuda._NVML_BENIGN:
            return None
        d = Draft(type="nvml.error")
        hooks_cuda._fill_nvml(d, m.group())
        return Spot(SPOT_RULES["vocab.nvml"], d, start, ("nvml_error", m.group()))

    def _nccl_name(self, body, start, end, line_start, line, name) -> Spot | None:
        if end < len(body) and (body[end].isalnum() or body[end] == "_"):
            return None
        etype = RESULT_EVENT.get(name, "nccl.error")
        return Spot(SPOT_RULES["vocab.nccl"], Draft(type=etype, attributes={"result": name}), start, ("result", name))
