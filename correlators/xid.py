"""NVIDIA XID catalog: meaning and catalog actions of every XID code.

The table is ``correlators/rules/xid-catalog.csv``, a copy of ``shared/reference/
xid-catalog.csv`` (one row per XID code that NVIDIA's XID catalog lists as applicable to
A100/H100/B100/GB200; source: the catalog spreadsheet shipped in the NVSentinel repository,
``health-monitors/syslog-health-monitor/pkg/common/Xid-Catalog.xlsx``, July 2026 snapshot,
cross-checked with NVIDIA's public XID documentation).

Columns: ``xid`` (int), ``mnemonic``, ``description``, ``gpus`` (comma-separated GPU
families), ``immediate_action`` (what restores service: RESTART_APP, RESET_GPU, RESTART_BM,
RESTART_VM, IGNORE, CHECK_MECHANICALS, UPDATE_SWFW, WORKFLOW_*, XID_154 ...),
``investigatory_action`` (where the root cause is looked for: CONTACT_SUPPORT, CHECK_APP/CUDA,
WORKFLOW_XID_13/31, IGNORE (sympathetic), SYMPATHETIC_REPORT_SOLO, INVESTIGATE_* ...),
``nvsentinel_action`` (what NVSentinel derives: COMPONENT_RESET, RESTART_BM, NONE ...).
A cell holding ``—`` means "not given by the catalog" and is read as ``""``.

Codes the catalog does not list (marked unused for these GPUs, or newer than the snapshot) give
``xid_info(code) is None``; the extraction rule then reports ``immediate_action="UNKNOWN"``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CATALOG_PATH = Path(__file__).parent / "rules" / "xid-catalog.csv"

#: ``immediate_action`` reported for a code the catalog does not list.
UNKNOWN_ACTION = "UNKNOWN"

#: XID 154's recovery hint (last parentheses / angle brackets of the line) -> normalised action.
RECOVERY_ACTIONS: dict[str, str] = {
    "none": "NONE",
    "gpu reset required": "RESET_GPU",
    "drain and reset": "DRAIN_AND_RESET",
    "node reboot required": "RESTART_BM",
    "drain p2p": "DRAIN_P2P",
}


@dataclass(frozen=True, slots=True)
class XidInfo:
    """One catalog row. Actions are the catalog's bucket names, ``""`` when blank."""

    xid: int
    mnemonic: str
    description: str
    immediate_action: str
    investigatory_action: str
    nvsentinel_action: str
    gpus: tuple[str, ...] = ()


def _cell(value: str | None) -> str:
    value = (value or "").strip()
    return "" if value in {"—", "-", "N/A"} else value


@lru_cache(maxsize=1)
def catalog() -> dict[int, XidInfo]:
    """Load the catalog once: ``{xid: XidInfo}``."""
    table: dict[int, XidInfo] = {}
    with CATALOG_PATH.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            code = int(row["xid"])
            table[code] = XidInfo(
                xid=code,
                mnemonic=_cell(row["mnemonic"]),
                description=_cell(row["description"]),
                immediate_action=_cell(row["immediate_action"]),
                investigatory_action=_cell(row["investigatory_action"]),
                nvsentinel_action=_cell(row["nvsentinel_action"]),
                gpus=tuple(g.strip() for g in (row.get("gpus") or "").split(",") if g.strip()),
            )
    return table


def xid_info(code: int) -> XidInfo | None:
    """The catalog row of ``code``, or None when the catalog does not list it."""
    return catalog().get(int(code))


def action_bucket(code: int) -> str:
    """The catalog's immediate-action bucket of ``code`` (``RESTART_APP``, ``RESET_GPU``,
    ``RESTART_BM``, ``WORKFLOW_XID_48`` ...), ``UNKNOWN`` for unlisted codes and ``""`` for
    listed codes whose action cell is blank (162-172 in the July 2026 snapshot)."""
    info = xid_info(code)
    return UNKNOWN_ACTION if info is None else info.immediate_action


def is_sympathetic(code: int) -> bool:
    """True when the catalog says the XID is a side effect of another error: act on it only
    when it is seen alone (``IGNORE (sympathetic)``, ``SYMPATHETIC_REPORT_SOLO``, the XID 45
    workflow "Not Solo: IGNORE", and XID 154, which only reports another XID's recovery)."""
    info = xid_info(code)
    if info is None:
        return False
    inv = info.investigatory_action.upper()
    return (
        "SYMPATHETIC" in inv
        or info.immediate_action in {"WORKFLOW_XID_45", "XID_154"}
        or "INFORMATIONAL ONLY" in inv
    )


def is_app_workflow(code: int) -> bool:
    """True for WORKFLOW_XID_13 / WORKFLOW_XID_31: usually the application's fault, the
    GPU's only when repeated on the same GPU (run DCGM diagnostics then)."""
    info = xid_info(code)
    return info is not None and info.investigatory_action in {"WORKFLOW_XID_13", "WORKFLOW_XID_31"}


def is_ignorable(code: int) -> bool:
    """True when the catalog's immediate action is IGNORE (no service impact by itself)."""
    info = xid_info(code)
    return info is not None and info.immediate_action == "IGNORE"


def needs_reset(code: int) -> bool:
    """True when the immediate action is a GPU reset (or the XID 48 workflow, whose first
    step alone is a GPU reset)."""
    return action_bucket(code) in {"RESET_GPU", "WORKFLOW_XID_48"}


def needs_reboot(code: int) -> bool:
    """True when the immediate action reboots the host (RESTART_BM / RESTART_VM)."""
    return action_bucket(code) in {"RESTART_BM", "RESTART_VM"}


def is_nvlink(code: int) -> bool:
    """True for NVLink XIDs (74, the NVLink5 family 144-150, and 136/137/155/166)."""
    info = xid_info(code)
    if info is None:
        return False
    return "NVLINK" in info.mnemonic or info.immediate_action in {
        "WORKFLOW_NVLINK_ERR",
        "WORKFLOW_NVLINK5_ERR",
    } or code == 136


def recovery_action(text: str) -> str | None:
    """Parse XID 154's recovery hint from the line's tail.

    ``GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)`` ->
    ``RESET_GPU``; ``... to <Drain and Reset>`` -> ``DRAIN_AND_RESET``; ``Node Reboot
    Required`` -> ``RESTART_BM``. The *target* action (after ``to``) is returned; None when
    the text carries no hint.
    """
    lowered = text.lower()
    idx = lowered.rfind(" to ")
    tail = lowered[idx + 4 :] if idx >= 0 else lowered
    for phrase, action in RECOVERY_ACTIONS.items():
        if phrase in tail and phrase != "none":
            return action
    if "none" in tail:
        return "NONE"
    return None
