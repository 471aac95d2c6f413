"""Code hooks of the linux kernel / python errno rules (``host.yaml``, ``pcie.yaml``).

* ``aer_bits`` / ``aer_header`` / ``aer_status``: the PCIe AER report of
  drivers/pci/pcie/aer.c (and the APEI/GHES path, ``pci_print_aer``), in every layout kernels
  3.x-6.x print: the ``error received`` line, the ``PCIe Bus Error: severity=...`` line, the
  ``device [vvvv:dddd] error status/mask=`` (or ``aer_status: 0x..``) line and the
  ``[bit] Name`` lines, each as its own record or all in one.
* ``mce_status``: the x86 machine-check bank status word -> corrected / uncorrected / fatal.
* ``python_errno``: ``OSError: [Errno 122] Disk quota exceeded: '/path'`` -> errno name and
  failure category, from the Linux errno table below.

Hooks are pure: they read the record text and the match, nothing else.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from correlators.rules.code import Draft, hook

if TYPE_CHECKING:  # pragma: no cover
    from correlators.rules import Rule
    from schemas.records import Observation


# --------------------------------------------------------------------------- PCIe AER

#: Correctable error bits (PCI_ERR_COR_STATUS) -> (short name of 4.19+ kernels, long name of
#: older kernels). drivers/pci/pcie/aer.c aer_correctable_error_string.
AER_COR_BITS: dict[int, tuple[str, str]] = {
    0: ("RxErr", "Receiver Error"), 6: ("BadTLP", "Bad TLP"), 7: ("BadDLLP", "Bad DLLP"),
    8: ("Rollover", "RELAY_NUM Rollover"), 12: ("Timeout", "Replay Timer Timeout"),
    13: ("NonFatalErr", "Advisory Non-Fatal"), 14: ("CorrIntErr", "Corrected Internal Error"),
    15: ("HeaderOF", "Header Log Overflow"),
}
#: Uncorrectable error bits (PCI_ERR_UNCOR_STATUS); bits 27-31 named since 6.x (PCIe 6.0).
AER_UNCOR_BITS: dict[int, tuple[str, str]] = {
    0: ("Undefined", "Undefined"), 4: ("DLP", "Data Link Protocol"),
    5: ("SDES", "Surprise Down Error"), 12: ("TLP", "Poisoned TLP"),
    13: ("FCP", "Flow Control Protocol"), 14: ("CmpltTO", "Completion Timeout"),
    15: ("CmpltAbrt", "Completer Abort"), 16: ("UnxCmplt", "Unexpected Completion"),
    17: ("RxOF", "Receiver Overflow"), 18: ("MalfTLP", "Malformed TLP"), 19: ("ECRC", "ECRC"),
    20: ("UnsupReq", "Unsupported Request"), 21: ("ACSViol", "ACS Violation"),
    22: ("UncorrIntErr", "Uncorrectable Internal Error"), 23: ("BlockedTLP", "MC Blocked TLP"),
    24: ("AtomicOpBlocked", "AtomicOp Egress Blocked"),
    25: ("TLPBlockedErr", "TLP Prefix Blocked Error"), 26: ("PoisonTLPBlocked", "PoisonTLPBlocked"),
    27: ("DMWrReqBlocked", "DMWr Request Egress Blocked"), 28: ("IDECheck", "IDE Check Failed"),
    29: ("MisIDETLP", "Misrouted IDE TLP"), 30: ("PCRC_CHECK", "PCRC Check Failed"),
    31: ("TLPXlatBlocked", "TLP Translation Egress Blocked"),
}
_COR_BY_NAME = {n: b for b, names in AER_COR_BITS.items() for n in names}
_UNCOR_BY_NAME = {n: b for b, names in AER_UNCOR_BITS.items() for n in names}
#: PCIe spec default Uncorrectable Error Severity: these bits are fatal unless reprogrammed.
AER_DEFAULT_FATAL = {4, 5, 13, 17, 18, 22}
#: Bits only one of the two registers defines: a status word holding one of them says which
#: register it is; 12-15 exist in both and say nothing alone.
_COR_ONLY = {0, 6, 7, 8}
_UNCOR_ONLY = {4, 5} | set(range(16, 32))

_BDF = r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
_AER_SEVERITY = re.compile(
    rf"(?P<dev>{_BDF}):(?: AER:)? PCIe Bus Error: severity=(?P<severity>[^,\n]+)"
    r"(?:, type=(?P<layer>[^,\n]+))?"
)
_AER_BIT_LINE = re.compile(rf"{_BDF}:(?: AER:)?    \[[ \d]\d\] ")


def _severity(text: str) -> tuple[bool, bool | None]:
    """AER severity as printed (``Corrected``/``Correctable``, ``Uncorrected (Non-Fatal)``,
    ``Uncorrectable (Fatal)``, ...) -> (corrected, fatal); fatal is None for corrected."""
    t = text.strip().lower()
    if t.startswith("corr"):
        return True, None
    return False, "non-fatal" not in t and "fatal" in t


def _severity_before(body: str, end: int, device: str | None) -> tuple[str | None, str | None]:
    """The (severity, layer) of the nearest ``PCIe Bus Error: severity=`` line before
    ``end`` in the record, of ``device`` when given (None, None when there is none)."""
    severity = layer = None
    for sm in _AER_SEVERITY.finditer(body, 0, end):
        if device is None or sm["dev"].lower() == device:
            severity, layer = sm["severity"].strip(), sm["layer"]
    return severity, layer


def _set_severity(draft: Draft, severity: str) -> None:
    corrected, fatal = _severity(severity)
    draft.type = "pcie.aer_corrected" if corrected else "pcie.aer_uncorrected"
    draft.attributes["severity"] = severity
    if fatal is not None:
        draft.attributes["fatal"] = fatal


@hook("aer_bits")
def aer_bits(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """One AER error-bit line (``pcieport 0000:00:02.0:    [ 5] Surprise Down Error
    (First)``, 4.19+ ``... AER:    [ 0] RxErr                  (First)``) -> corrected or
    uncorrected event. Severity and layer come from the nearest preceding ``PCIe Bus Error:
    severity=..., type=...`` line of the same device in the record when there is one; a record
    holding only the bit line is classified by the error's name (a name only one register
    defines) and, for uncorrectable bits, by the PCIe default severity (fatal: DLP, Surprise
    Down, FCP, Receiver Overflow, Malformed TLP, Uncorrectable Internal). Attributes: device,
    error (long name), bit, first, severity, error_type, fatal."""
    assert match is not None
    a = draft.attributes
    name = a.pop("error").strip()
    printed_bit = a.pop("printed_bit", None)
    severity, layer = _severity_before(obs.body or "", match.start(), a.get("device"))
    corrected = fatal = None
    if severity:
        corrected, fatal = _severity(severity)
    if name.startswith("Unknown Error Bit"):
        bit = printed_bit
        if corrected is None or bit is None:
            return []
        a["error"] = name
    elif corrected is None:
        if name in _COR_BY_NAME and name in _UNCOR_BY_NAME:
            return []
        corrected = name in _COR_BY_NAME
        bit = _COR_BY_NAME[name] if corrected else _UNCOR_BY_NAME.get(name)
        if bit is None:
            return []
    else:
        table = _COR_BY_NAME if corrected else _UNCOR_BY_NAME
        bit = table.get(name, printed_bit)
        if bit is None:
            return []
    if "error" not in a:
        long_names = AER_COR_BITS if corrected else AER_UNCOR_BITS
        a["error"] = long_names[bit][1] if bit in long_names else name
    draft.type = "pcie.aer_corrected" if corrected else "pcie.aer_uncorrected"
    a["bit"] = bit
    if not corrected:
        a["fatal"] = fatal if fatal is not None else bit in AER_DEFAULT_FATAL
    if severity:
        a["severity"] = severity
    if layer:
        a["error_type"] = layer.strip()
    return [draft]


@hook("aer_header")
def aer_header(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """An AER header line: ``AER: [Multiple ]Corrected error received: id=0010`` (4.x),
    ``...: 0000:01:00.0`` (4.19-6.15), ``AER: Uncorrectable (Fatal) error message received
    from 0000:01:00.0`` (6.16+), or ``PCIe Bus Error: severity=..., type=..., (Receiver ID)``
    (``type=Inaccessible, (Unregistered Agent ID)`` when the device no longer answers). Emits
    only when the record holds no ``[bit] Name`` line (that line carries the event then).
    Attributes: device (the reporting port), severity, fatal, source (error source BDF),
    multiple, error_type, agent; ``error: Inaccessible`` for an unreadable device."""
    assert match is not None
    body = obs.body or ""
    if _AER_BIT_LINE.search(body):
        return []
    a = draft.attributes
    _set_severity(draft, a.pop("severity"))
    if "multiple" in a:
        a["multiple"] = bool(a["multiple"])
    req_id = a.pop("req_id", None)
    if req_id and "source" not in a:
        # 4.x prints the requester id: bus << 8 | devfn, in the reporting port's domain
        value = int(req_id, 16)
        dom = str(a.get("device", "0000"))[:4]
        a["source"] = f"{dom}:{value >> 8:02x}:{(value >> 3) & 0x1F:02x}.{value & 7}"
    if str(a.get("error_type", "")).strip() == "Inaccessible":
        a["error"] = "Inaccessible"
    return [draft]


@hook("aer_status")
def aer_status(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``device [10de:2330] error status/mask=00000001/0000e000`` (aer_print_error),
    ``aer_status: 0x00000020, aer_mask: 0x00000000`` (pci_print_aer, the APEI path) or
    ``aer_uncor_status: ... / aer_cor_status: ...`` (cper_print_aer): the unmasked status
    bits, decoded. The register comes from ``aer_cor``/``aer_uncor`` in the line, else the
    nearest preceding severity line of the record, else from bits only one register defines
    (no event when that is undecidable or nothing is unmasked, or when the record holds the
    ``[bit]`` lines). Attributes: status, mask (ints), errors (long names), error (the
    first), bit, pci_id, severity, fatal (PCIe default severity when no severity line)."""
    assert match is not None
    body = obs.body or ""
    if _AER_BIT_LINE.search(body):
        return []
    a = draft.attributes
    status, mask = a["status"], a.get("mask", 0)
    bits = [b for b in range(32) if (status & ~mask) >> b & 1]
    if not bits:
        return []
    register = a.pop("register", None)
    severity, layer = _severity_before(body, match.start(), a.get("device"))
    if register in ("cor", "uncor"):
        corrected = register == "cor"
    elif severity:
        corrected = _severity(severity)[0]
    elif set(bits) & _COR_ONLY and not set(bits) & _UNCOR_ONLY:
        corrected = True
    elif set(bits) & _UNCOR_ONLY and not set(bits) & _COR_ONLY:
        corrected = False
    else:
        return []
    table = AER_COR_BITS if corrected else AER_UNCOR_BITS
    a["errors"] = [table[b][1] if b in table else f"Unknown Error Bit {b}" for b in bits]
    a["error"], a["bit"] = a["errors"][0], bits[0]
    draft.type = "pcie.aer_corrected" if corrected else "pcie.aer_uncorrected"
    if severity:
        _set_severity(draft, severity)
    elif not corrected:
        a["fatal"] = bool(set(bits) & AER_DEFAULT_FATAL)
    if layer:
        a["error_type"] = layer.strip()
    return [draft]


# --------------------------------------------------------------------------- machine checks


@hook("mce_status")
def mce_status(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``CPU 0: Machine Check[ Exception]: <mcgstatus> Bank <n>: <status>``: IA32_MCi_STATUS
    bit 61 (UC) says uncorrected, bit 57 (PCC) processor context corrupt. Sets ``severity``
    (corrected | uncorrected | fatal) and ``corrected`` (bool); status stays an int."""
    a = draft.attributes
    status = a.get("status")
    if isinstance(status, int):
        uc, pcc = bool(status >> 61 & 1), bool(status >> 57 & 1)
        a["corrected"] = not uc
        a["severity"] = "fatal" if pcc else ("uncorrected" if uc else "corrected")
    return [draft]


# --------------------------------------------------------------------------- python errno

#: Linux errno (asm-generic/errno-base.h, errno.h; x86-64 and arm64 share them) -> (name,
#: category). Categories: storage (the file system or its quota), host (the node's memory),
#: config (limits, permissions, paths, addresses set up wrong), net (a peer or the network;
#: usually a symptom), app (the program's own bookkeeping; a symptom). Negative numbers are
#: getaddrinfo's EAI_* codes as socket.gaierror prints them.
ERRNO: dict[int, tuple[str, str]] = {
    1: ("EPERM", "config"), 2: ("ENOENT", "config"), 3: ("ESRCH", "app"), 4: ("EINTR", "app"),
    5: ("EIO", "storage"), 6: ("ENXIO", "app"), 7: ("E2BIG", "app"), 8: ("ENOEXEC", "config"),
    9: ("EBADF", "app"), 10: ("ECHILD", "app"), 11: ("EAGAIN", "app"), 12: ("ENOMEM", "host"),
    13: ("EACCES", "config"), 14: ("EFAULT", "app"), 16: ("EBUSY", "app"), 17: ("EEXIST", "app"),
    18: ("EXDEV", "app"), 19: ("ENODEV", "app"), 20: ("ENOTDIR", "app"), 21: ("EISDIR", "app"),
    22: ("EINVAL", "app"), 23: ("ENFILE", "config"), 24: ("EMFILE", "config"),
    25: ("ENOTTY", "app"), 26: ("ETXTBSY", "app"), 27: ("EFBIG", "storage"),
    28: ("ENOSPC", "storage"), 29: ("ESPIPE", "app"), 30: ("EROFS", "storage"),
    31: ("EMLINK", "storage"), 32: ("EPIPE", "net"), 36: ("ENAMETOOLONG", "app"),
    37: ("ENOLCK", "storage"), 38: ("ENOSYS", "config"), 39: ("ENOTEMPTY", "app"),
    40: ("ELOOP", "app"), 61: ("ENODATA", "app"), 62: ("ETIME", "net"), 71: ("EPROTO", "net"),
    75: ("EOVERFLOW", "app"), 95: ("EOPNOTSUPP", "config"), 97: ("EAFNOSUPPORT", "config"),
    98: ("EADDRINUSE", "config"), 99: ("EADDRNOTAVAIL", "config"), 100: ("ENETDOWN", "net"),
    101: ("ENETUNREACH", "net"), 103: ("ECONNABORTED", "net"), 104: ("ECONNRESET", "net"),
    105: ("ENOBUFS", "host"), 107: ("ENOTCONN", "net"), 110: ("ETIMEDOUT", "net"),
    111: ("ECONNREFUSED", "net"), 112: ("EHOSTDOWN", "net"), 113: ("EHOSTUNREACH", "net"),
    116: ("ESTALE", "storage"), 117: ("EUCLEAN", "storage"), 121: ("EREMOTEIO", "storage"),
    122: ("EDQUOT", "storage"), 123: ("ENOMEDIUM", "storage"), 125: ("ECANCELED", "app"),
    -2: ("EAI_NONAME", "config"), -3: ("EAI_AGAIN", "net"), -5: ("EAI_NODATA", "config"),
    -8: ("EAI_SERVICE", "config"), -9: ("EAI_ADDRFAMILY", "config"),
}
_EXC_BEFORE = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception|Exit|Warning|timeout|gaierror))\s*:\s*(?:\S+\s*:\s*)?$")
_PATH = re.compile(r"""^(?P<strerror>[^:'"\n]*)(?::\s*(?P<q>['"])(?P<path>[^'"\n]*)(?P=q))?""")


@hook("python_errno")
def python_errno(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``<Exception>: [Errno <n>] <strerror>[: '<path>']`` -> errno (int), errno_name
    (``EDQUOT``), strerror, exception (the class printed right before, e.g. ``OSError``,
    ``FileExistsError``, ``socket.gaierror``), path, category (storage | host | config | net
    | app; ``shm`` for ENOSPC under /dev/shm: shared memory too small, a config fault;
    ``storage`` for ENOTCONN on a path: a FUSE mount that died). Drops the two socket errors
    ``net.python_socket`` reports (ConnectionResetError / BrokenPipeError)."""
    assert match is not None
    a = draft.attributes
    num = a["errno"]
    line_start = (obs.body or "").rfind("\n", 0, match.start()) + 1
    before = (obs.body or "")[line_start : match.start()]
    em = _EXC_BEFORE.search(before)
    exception = em.group(1) if em else None
    if exception in ("ConnectionResetError", "BrokenPipeError"):
        return []
    name, category = ERRNO.get(num, (f"E{num}", "app"))
    rest = a.pop("rest", "") or ""
    pm = _PATH.match(rest)
    path = pm["path"] if pm and pm["path"] is not None else None
    if pm and pm["strerror"]:
        a["strerror"] = pm["strerror"].strip()
    if exception:
        a["exception"] = exception
    if path is not None:
        a["path"] = path
        if name == "ENOTCONN":
            category = "storage"
    if name == "ENOSPC" and (path or "").startswith("/dev/shm"):
        category = "shm"
    a["errno_name"], a["category"] = name, category
    return [draft]


# --------------------------------------------------------------------------- hung tasks, panics

#: Call-trace symbols -> what a task in D state waits on (first hit in trace order wins).
_BLOCKED_ON = (
    (re.compile(r"\b(?:nfs\w*|rpc_\w+|__rpc_\w+|nfs4_\w+)\+0x|\[(?:nfs|nfsv4|sunrpc)\]"), "nfs"),
    (re.compile(r"\b(?:ll_\w+|ptlrpc_\w+|osc_\w+|cl_\w+|lov_\w+)\+0x|\[(?:lustre|ptlrpc|osc|lov|mdc)\]"), "lustre"),
    (re.compile(r"\b(?:nvidia_\w+|uvm_\w+|os_acquire_\w+|_nv\d+rm)\+0x|\[(?:nvidia|nvidia_uvm)\]"), "gpu_driver"),
    (re.compile(r"\b(?:xfs_\w+|ext4_\w+|jbd2_\w+|btrfs_\w+)\+0x"), "local_fs"),
    (re.compile(r"\b(?:io_schedule\w*|blk_mq_\w+|wait_on_page_bit\w*|folio_wait_bit\w*)\+0x"), "block"),
)


@hook("hung_task")
def hung_task(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A hung-task report: when the record also holds the call trace, ``blocked_on`` names
    what the task waits for (nfs | lustre | gpu_driver | local_fs | block), from the first
    matching frame after the match. Process names are stripped."""
    assert match is not None
    a = draft.attributes
    if "process" in a:
        a["process"] = str(a["process"]).strip()
    tail = (obs.body or "")[match.end():]
    best: tuple[int, str] | None = None
    for rx, what in _BLOCKED_ON:
        m = rx.search(tail)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), what)
    if best:
        a["blocked_on"] = best[1]
    return [draft]


#: Panic message prefixes (kernel/panic.c callers) -> reason_kind.
_PANIC_KINDS = (
    ("Fatal machine check", "machine_check"), ("Machine check", "machine_check"),
    ("Fatal hardware error", "hardware_error"), ("Fatal local machine check", "machine_check"),
    ("hung_task", "hung_task"), ("softlockup", "soft_lockup"), ("Hard LOCKUP", "hard_lockup"),
    ("Watchdog detected hard LOCKUP", "hard_lockup"), ("Out of memory", "oom"),
    ("System is deadlocked on memory", "oom"), ("Attempted to kill init", "init_killed"),
    ("VFS: Unable to mount root fs", "boot"), ("Fatal exception", "oops"), ("Oops", "oops"),
    ("NMI: Not continuing", "nmi"), ("RCU Stall", "rcu_stall"), ("sysrq triggered crash", "sysrq"),
)


@hook("panic_reason")
def panic_reason(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``Kernel panic - not syncing: <reason>``: ``reason_kind`` from the reason's start
    (machine_check, hardware_error, hung_task, soft_lockup, hard_lockup, oom, init_killed,
    boot, oops, nmi, rcu_stall, sysrq; ``other`` otherwise)."""
    reason = str(draft.attributes.get("reason", "")).strip()
    draft.attributes["reason"] = reason
    kind = next((k for prefix, k in _PANIC_KINDS if reason.startswith(prefix)), "other")
    draft.attributes["reason_kind"] = kind
    return [draft]


_GHES_SEVERITY = re.compile(r"\[Hardware Error\]: event severity: (\w+)")


@hook("ghes_severity")
def ghes_severity(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """GHES header / ``event severity:`` line: the header takes the severity of the next
    ``event severity:`` line of the record; severity ``info`` is no fault (no event)."""
    assert match is not None
    a = draft.attributes
    if "severity" not in a:
        m = _GHES_SEVERITY.search(obs.body or "", match.end())
        if m:
            a["severity"] = m.group(1)
    if a.get("severity") == "info":
        return []
    return [draft]


@hook("lustre_rc")
def lustre_rc(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``LustreError: ... rc = -122``: errno (positive int), errno_name and category from
    :data:`ERRNO`; only storage and net categories emit (ENOENT, EAGAIN, EACCES, ... are the
    client's ordinary answers)."""
    a = draft.attributes
    num = abs(int(a["errno"]))
    name, category = ERRNO.get(num, (f"E{num}", "app"))
    if category not in ("storage", "net"):
        return []
    a.update(errno=num, errno_name=name, category=category)
    return [draft]
