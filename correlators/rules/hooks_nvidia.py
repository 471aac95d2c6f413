"""Code hooks of the NVIDIA driver / NVSwitch / Fabric Manager rules (``gpu.yaml``,
``fabricmanager.yaml``).

* ``nvrm_xid``      -- the XID catalog row (:func:`correlators.rules.code.xid_catalog`) plus the
  fields some XIDs carry in their message: the NVLink link number (XID 74 and the NVLink5
  family 144-150), the NVLink5 unit and severity, the GSP RPC of XID 119/120.
* ``nvswitch_sxid`` -- the NVSwitch error enum name of an SXid code (``sxid-codes.csv``) and
  the severity, whichever of the driver's line shapes printed it.
* ``peermem_kind``  -- which nvidia-peermem error a ``nvidia-peermem ... ERROR`` line reports.
* ``fm_log``        -- which Fabric Manager error a fabricmanager.log line reports (``kind``).
* ``nvrm_printf``   -- an NV_PRINTF line's ``NVRM: [GPU<n> ]<function>: `` prefix -> ``function``, ``rm_gpu``.
"""

from __future__ import annotations

import csv
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from correlators.rules.code import Draft, hook, xid_catalog

if TYPE_CHECKING:  # pragma: no cover
    from correlators.rules import Rule
    from schemas.records import Observation

SXID_CODES_PATH = Path(__file__).parent / "sxid-codes.csv"

# --------------------------------------------------------------------------- XID details

# XID 74 (NVLINK_ERROR): "NVLink: fatal error detected on link 8(0x0, ...)"
_XID74_LINK = re.compile(r"\bon link (\d+)")
# NVLink5 XIDs 144-150: "<UNIT> <Fatal|Nonfatal> XC0 i0 Link 13 (0x... ...)"
_NVLINK5 = re.compile(r"^(?P<unit>[A-Z][A-Z0-9_]+) (?P<sev>Fatal|Nonfatal|Non-fatal)\b.*?\bLink (?P<link>\d+)")
# XID 119/120 (GSP RPC timeout / GSP error): "... Expected function 76 (GSP_RM_CONTROL) ..."
_GSP_RPC = re.compile(r"Expected function (?P<id>\d+) \((?P<name>[A-Z0-9_]+)\)")
_GSP_TIMEOUT_S = re.compile(r"Timeout after (\d+)s of waiting")



#: XIDs the open kernel module defines stay far below this (the catalog ends in the 150s);
#: a larger number is not an XID (``valid: false`` on the event, a symptom-only cause entry).
MAX_XID = 1000

@hook("nvrm_xid")
def nvrm_xid(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``NVRM: Xid`` match -> catalog fields (see ``xid_catalog``) plus, when the message
    carries them: ``link`` (int; XID 74 and 144-150), ``nvlink_unit`` (``RLW_RXPIPE``,
    ``SAW_MVB``, ...) and ``nvlink_severity`` (``fatal``/``nonfatal``) for 144-150,
    ``rpc_function`` (``GSP_RM_CONTROL``) / ``rpc_function_id`` (int) / ``timeout_s`` (int)
    for the GSP XIDs 119 and 120; ``valid: false`` for a number above :data:`MAX_XID`. MIG attribution (``GPU-I:05 GPU-CI:01``) arrives from the
    rule's pattern as ``gpu_instance`` / ``compute_instance`` (ints)."""
    out = xid_catalog(draft, match, obs, rule)
    a = draft.attributes
    code = a["xid"]
    if not 0 < code <= MAX_XID:
        # no driver prints such a number: the line is kept as evidence, never a cause
        a["valid"] = False
        return out
    detail = a.get("detail", "")
    if code == 74:
        m = _XID74_LINK.search(detail)
        if m:
            a["link"] = int(m.group(1))
    elif 144 <= code <= 150:
        m = _NVLINK5.search(detail)
        if m:
            a["nvlink_unit"] = m["unit"]
            a["nvlink_severity"] = "fatal" if m["sev"] == "Fatal" else "nonfatal"
            a["link"] = int(m["link"])
    elif code in (119, 120):
        m = _GSP_RPC.search(detail)
        if m:
            a["rpc_function_id"] = int(m["id"])
            a["rpc_function"] = m["name"]
        m = _GSP_TIMEOUT_S.search(detail)
        if m:
            a["timeout_s"] = int(m.group(1))
    return out


# --------------------------------------------------------------------------- NVSwitch SXid


@lru_cache(maxsize=1)
def sxid_codes() -> dict[int, str]:
    """``{sxid: enum name}`` from ``sxid-codes.csv`` (NVSWITCH_ERR_TYPE of the open kernel
    modules' src/common/nvswitch/interface/ctrl_dev_nvswitch.h)."""
    with SXID_CODES_PATH.open(newline="", encoding="utf-8") as fh:
        return {int(r["sxid"]): r["name"] for r in csv.DictReader(fh)}


_SXID_SEVERITY = {"Fatal": "fatal", "Non-fatal": "non-fatal", "Correctable": "correctable",
                  "1": "fatal", "0": "non-fatal"}
#: SXids printed without a severity word whose meaning is fatal to the switch (thermal
#: shutdown, SOE firmware halted/unresponsive, OSFP module faults).
_SXID_FATAL_NO_WORD = {"HOST_THERMAL_SHUTDOWN", "SOE_HALT", "SOE_WATCHDOG", "SOE_SHUTDOWN",
                       "SOE_EXTERR", "SOE_RESET", "SOE_BOOTSTRAP", "SOE_TIMEOUT", "SOE_COMMAND",
                       "CCI_MODULE"}


@hook("nvswitch_sxid")
def nvswitch_sxid(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """An SXid line -> ``code`` (``NVSWITCH_ERR_HW_NPORT_SOURCETRACK_SOURCETRACK_TIME_OUT_ERR``;
    ``""`` for a code the table lacks), ``severity`` (fatal | non-fatal | correctable) from the
    severity word (``Fatal, Link 08 ...``) or the error-log dump (``Severity 1 Engine instance
    12 ...``: 1 fatal, 0 non-fatal), ``record`` (``report`` for the descriptive line,
    ``error_log`` for the dump, ``data`` for the dump's ``Data {0x..., ...}`` register lines,
    which carry no severity: ``data`` = the register list as printed)."""
    a = draft.attributes
    data = a.pop("_data", None)
    name = sxid_codes().get(a["sxid"], "")
    a["code"] = name
    sev = a.pop("_sev", None) or a.pop("_sevnum", None)
    a.pop("_sev", None)
    a.pop("_sevnum", None)
    if sev is not None:
        a["severity"] = _SXID_SEVERITY[sev]
    elif any(name.startswith("NVSWITCH_ERR_HW_" + p) for p in _SXID_FATAL_NO_WORD):
        a["severity"] = "fatal"
    a["record"] = "data" if data else "error_log" if "engine_instance" in a else "report"
    if data:
        a.pop("detail", None)
        a["data"] = a.pop("_regs", "").strip()
    elif not a.get("detail"):
        a.pop("detail", None)
    return [draft]


# --------------------------------------------------------------------------- NV_PRINTF prefix

#: RmMsgPrefix's default prefix after "NVRM: ": "[GPU<instance> ]<function>" (nvlog_printf.c)
_RM_PREFIX = re.compile(r"^(?:GPU(?P<gpu>\d+) )?(?P<function>\w+)$")


@hook("nvrm_printf")
def nvrm_printf(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A rule given as ``format: "NVRM: %s: <NV_PRINTF format>"`` with ``args: [function, ...]``:
    the driver's print path (nvDbg_Printf -> RmMsgPrefix, src/nvidia/src/kernel/diagnostics/
    nvlog_printf.c) prints ``NVRM: [GPU<n> ]<function>: <message>``; the ``%s`` reads both, so
    split it into ``function`` and ``rm_gpu`` (the RM GPU instance, int). A prefix that is not
    ``[GPU<n> ]<identifier>`` (the message of another print) gives no event."""
    a = draft.attributes
    m = _RM_PREFIX.match(str(a.get("function", "")).strip())
    if m is None:
        return []
    a["function"] = m["function"]
    if m["gpu"] is not None:
        a.setdefault("rm_gpu", int(m["gpu"]))
    return [draft]


# --------------------------------------------------------------------------- nvidia-peermem


@hook("peermem_kind")
def peermem_kind(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """An nvidia-peermem ``ERROR`` line -> ``kind``: invalid_context (``detected invalid
    context``: the GPU memory under an RDMA registration was freed), client_register
    (registering with ib_core's peer-memory API failed), p2p_error (any nvidia_p2p_* call or
    DMA mapping error)."""
    detail = draft.attributes.get("detail", "")
    if "invalid context" in detail:
        kind = "invalid_context"
    elif "registering" in detail:
        kind = "client_register"
    else:
        kind = "p2p_error"
    draft.attributes["kind"] = kind
    return [draft]


# --------------------------------------------------------------------------- Fabric Manager

#: lower-cased literal in the message -> kind (first hit wins; specific first). Texts from the
#: Fabric Manager user guide's error-handling chapters and public fabricmanager.log excerpts.
_FM_KINDS: tuple[tuple[str, str], ...] = (
    ("multicast team", "multicast_team"),
    ("multicast group", "multicast_team"),
    ("request memory:", "multicast_team"),
    ("version mismatch", "version_mismatch"),
    ("not compatible", "version_mismatch"),
    ("incompatible", "version_mismatch"),
    ("query nvswitch device information", "nvswitch_query"),
    ("nvswitch fatal error", "nvswitch_fatal"),
    ("nvswitch non-fatal error", "nvswitch_nonfatal"),
    ("nvswitch non fatal error", "nvswitch_nonfatal"),
    ("training", "nvlink_training"),
    ("nvlink", "nvlink_error"),
    ("non critical error", "fabric_degraded"),
    ("degraded", "fabric_degraded"),
    ("failed to register", "gpu_registration"),
    ("register gpu", "gpu_registration"),
    ("gpu handle", "gpu_registration"),
    ("stopped", "service_stopped"),
    ("abort", "service_stopped"),
    ("exit code", "service_stopped"),
    ("exiting", "service_stopped"),
    ("terminat", "service_stopped"),
)


#: an NV_STATUS name in brackets, as FM prints a failed driver call: "[NV_WARN_NOTHING_TO_DO]"
_NV_STATUS = re.compile(r"\[(NV_[A-Z0-9_]+)\]")


@hook("fm_log")
def fm_log(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A Fabric Manager ERROR/CRITICAL/FATAL line -> ``kind`` (multicast_team,
    version_mismatch, nvswitch_query, nvswitch_fatal, nvswitch_nonfatal, nvlink_training,
    nvlink_error, fabric_degraded, gpu_registration, service_stopped, other), ``severity``
    (error | critical | fatal, lower-cased log level), ``detail`` (the message) and ``code``
    (the ``NV_*`` status a failed driver call prints, e.g. ``NV_WARN_NOTHING_TO_DO``)."""
    a = draft.attributes
    detail = (a.get("detail") or "").strip()
    low = detail.lower()
    a["detail"] = detail
    m = _NV_STATUS.search(detail)
    if m and "code" not in a:
        a["code"] = m.group(1)
    for lit, kind in _FM_KINDS:
        if lit in low:
            a["kind"] = kind
            break
    else:
        a["kind"] = "other"
    return [draft]
