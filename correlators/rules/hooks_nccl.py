"""Code hooks of the NCCL library rules (``correlators/rules/nccl.yaml``).

Tables read from NCCL's source (github.com/NVIDIA/nccl, tags v2.18.3-1 .. v2.30.7-1):

* :data:`RESULT_BY_TEXT` -- ``ncclGetErrorString()`` (src/init.cc) text -> ``ncclResult_t``
  enum name; :data:`RESULT_EVENT` -- enum name -> event type.
* :data:`IBV_EVENTS` -- rdma-core ``ibv_event_type_str()`` texts NCCL's async thread prints
  (src/transport/net_ib*.cc ``ncclIbAsyncThreadMain``), with whether NCCL treats the event as
  an error and as fatal (2.23+ switch; the 2.18-2.22 thread printed every event alike).
* :data:`ERRNO_BY_TEXT` -- glibc ``strerror()`` texts NCCL prints (socket.cc, ibvwrap.cc)
  -> errno names.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from correlators.rules.code import Draft, hook

if TYPE_CHECKING:  # pragma: no cover
    from correlators.rules import Rule
    from schemas.records import Observation

#: ncclGetErrorString() texts (prefix; "(run with NCCL_DEBUG=... for details)" follows some),
#: longest first so "internal error" is tried after nothing it is a part of.
RESULT_BY_TEXT: tuple[tuple[str, str], ...] = (
    ("remote process exited or there was a network error", "ncclRemoteError"),
    ("unhandled cuda error", "ncclUnhandledCudaError"),
    ("unhandled system error", "ncclSystemError"),
    ("NCCL operation in progress", "ncclInProgress"),
    ("unknown result code", "unknown"),
    ("invalid argument", "ncclInvalidArgument"),
    ("invalid usage", "ncclInvalidUsage"),
    ("internal error", "ncclInternalError"),
    ("timeout", "ncclTimeout"),
)

#: cupy's NcclError names (NCCL_ERROR_<X>) -> ncclResult_t enum names.
CUPY_RESULT: dict[str, str] = {
    "UNHANDLED_CUDA_ERROR": "ncclUnhandledCudaError", "SYSTEM_ERROR": "ncclSystemError",
    "INTERNAL_ERROR": "ncclInternalError", "INVALID_ARGUMENT": "ncclInvalidArgument",
    "INVALID_USAGE": "ncclInvalidUsage", "REMOTE_ERROR": "ncclRemoteError",
    "IN_PROGRESS": "ncclInProgress", "TIMEOUT": "ncclTimeout",
}

#: ncclResult_t -> event type (the four older types stay; the rest share nccl.error).
RESULT_EVENT: dict[str, str] = {
    "ncclRemoteError": "nccl.remote_error",
    "ncclSystemError": "nccl.system_error",
    "ncclInternalError": "nccl.internal_error",
    "ncclInvalidUsage": "nccl.invalid_usage",
}

_RESULT_NAMES = {"ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError", "ncclInvalidArgument",
                 "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress", "ncclTimeout"}


def result_from_text(text: str | None) -> str | None:
    """ncclGetErrorString() text (or a line holding it) -> enum name, None if none is named."""
    if not text:
        return None
    low = text.strip().lower()
    for phrase, name in RESULT_BY_TEXT:
        if phrase == "timeout":
            if low == "timeout" or low.startswith("timeout"):
                return name
            continue
        if phrase.lower() in low:
            return name
    return None


@hook("nccl_result")
def nccl_result(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """An NCCL result code as a framework prints it -> the event of its code.

    Attributes in: ``name`` (the ``ncclXxx:`` line's enum name, PyTorch), ``errstr`` (the
    ncclGetErrorString text), ``cupy`` (cupy's ``NCCL_ERROR_X``), ``last_error`` /
    ``last_error_inline`` (the ``Last error:`` text, NCCL's ncclGetLastError()). Out:
    ``result`` (``ncclSystemError``, ...; ``unknown``), ``last_error``; the event type is
    nccl.remote_error / system_error / internal_error / invalid_usage, else nccl.error.
    Drops the match when no code is named."""
    a = draft.attributes
    name = a.pop("name", None)
    errstr = a.pop("errstr", None)
    cupy = a.pop("cupy", None)
    inline = a.pop("last_error_inline", None)
    result = name if name in _RESULT_NAMES else None
    if result is None and cupy:
        result = CUPY_RESULT.get(cupy)
    if result is None:
        result = result_from_text(errstr)
    if result is None:
        return []
    last = (a.get("last_error") or inline or "").strip()
    if len(last) > 1 and last[0] == last[-1] == "'":
        last = last[1:-1].strip()
    if last and last.lower() not in ("unknown nccl error", ""):
        a["last_error"] = last
    else:
        a.pop("last_error", None)
    a["result"] = result
    draft.type = RESULT_EVENT.get(result, "nccl.error")
    return [draft]


#: glibc strerror() text -> errno name (the values NCCL's socket and verbs WARNs carry).
ERRNO_BY_TEXT: dict[str, str] = {
    "Operation not permitted": "EPERM", "No such file or directory": "ENOENT",
    "Interrupted system call": "EINTR", "Input/output error": "EIO", "Bad file descriptor": "EBADF",
    "Resource temporarily unavailable": "EAGAIN", "Cannot allocate memory": "ENOMEM",
    "Permission denied": "EACCES", "Bad address": "EFAULT", "Device or resource busy": "EBUSY",
    "File exists": "EEXIST", "No such device": "ENODEV", "Invalid argument": "EINVAL",
    "Too many open files": "EMFILE", "No space left on device": "ENOSPC", "Broken pipe": "EPIPE",
    "Function not implemented": "ENOSYS", "Protocol not available": "ENOPROTOOPT",
    "Protocol not supported": "EPROTONOSUPPORT", "Operation not supported": "EOPNOTSUPP",
    "Address family not supported by protocol": "EAFNOSUPPORT", "Address already in use": "EADDRINUSE",
    "Cannot assign requested address": "EADDRNOTAVAIL", "Network is down": "ENETDOWN",
    "Network is unreachable": "ENETUNREACH", "Network dropped connection on reset": "ENETRESET",
    "Software caused connection abort": "ECONNABORTED", "Connection reset by peer": "ECONNRESET",
    "No buffer space available": "ENOBUFS", "Transport endpoint is not connected": "ENOTCONN",
    "Connection timed out": "ETIMEDOUT", "Connection refused": "ECONNREFUSED", "Host is down": "EHOSTDOWN",
    "No route to host": "EHOSTUNREACH", "Remote I/O error": "EREMOTEIO", "No data available": "ENODATA",
    "Message too long": "EMSGSIZE", "Success": "OK",
}

#: ibv_event_type_str() text -> (IBV_EVENT_* name, an error?, fatal in NCCL 2.23+?)
IBV_EVENTS: dict[str, tuple[str, bool, bool]] = {
    "CQ error": ("IBV_EVENT_CQ_ERR", True, True),
    "local work queue catastrophic error": ("IBV_EVENT_QP_FATAL", True, True),
    "invalid request local work queue error": ("IBV_EVENT_QP_REQ_ERR", True, True),
    "local access violation work queue error": ("IBV_EVENT_QP_ACCESS_ERR", True, True),
    "communication established": ("IBV_EVENT_COMM_EST", False, False),
    "send queue drained": ("IBV_EVENT_SQ_DRAINED", False, False),
    "path migrated": ("IBV_EVENT_PATH_MIG", False, False),
    "path migration request error": ("IBV_EVENT_PATH_MIG_ERR", True, False),
    "local catastrophic error": ("IBV_EVENT_DEVICE_FATAL", True, True),
    "port active": ("IBV_EVENT_PORT_ACTIVE", False, False),
    "port error": ("IBV_EVENT_PORT_ERR", True, False),
    "LID change": ("IBV_EVENT_LID_CHANGE", False, False),
    "P_Key change": ("IBV_EVENT_PKEY_CHANGE", False, False),
    "SM change": ("IBV_EVENT_SM_CHANGE", False, False),
    "SRQ catastrophic error": ("IBV_EVENT_SRQ_ERR", True, True),
    "SRQ limit reached": ("IBV_EVENT_SRQ_LIMIT_REACHED", False, False),
    "last WQE reached": ("IBV_EVENT_QP_LAST_WQE_REACHED", False, False),
    "client reregistration": ("IBV_EVENT_CLIENT_REREGISTER", False, False),
    "GID table change": ("IBV_EVENT_GID_CHANGE", False, False),
    "WQ fatal": ("IBV_EVENT_WQ_FATAL", True, True),
}


def _errno(a: dict) -> None:
    """Set ``errno`` (name) from ``error`` (strerror text) or a numeric ``errno_num``."""
    err = a.get("error")
    if isinstance(err, str):
        err = err.strip().rstrip(".")
        a["error"] = err
        name = ERRNO_BY_TEXT.get(err)
        if name:
            a["errno"] = name


@hook("nccl_errno")
def nccl_errno(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """Add ``errno`` (``ECONNREFUSED``, ...) from the strerror text in ``error``."""
    _errno(draft.attributes)
    return [draft]


@hook("nccl_ibv_call")
def nccl_ibv_call(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``Call to ibv_<verb> failed [with error <strerror> [errno N]]`` (misc/ibvwrap.cc): add
    ``errno``; a memory registration (``ibv_reg_mr*``, ``ibv_reg_dmabuf_mr``) failing with
    ENOMEM is the locked-memory limit (``ulimit -l``) -> ``config.memlock``; every other
    failure -> ``nccl.ib_error`` (kind ``verbs_call``)."""
    a = draft.attributes
    _errno(a)
    call = a.get("call", "")
    if call.startswith("ibv_reg_") and a.get("errno") == "ENOMEM":
        draft.type = "config.memlock"
    else:
        draft.type = "nccl.ib_error"
        a["kind"] = "verbs_call"
    if call == "ibv_modify_qp" and not _modify_qp(draft):
        return []
    return [draft]


#: NCCL 2.24+ ibvModifyQpLog() (misc/ibvwrap.cc): "on dev %s:%d, curr state %s, next state %s,
#: local GID index %d, local GID %s, remote GID %s" (states from ibvQpStateName: RESET, INIT,
#: RTR, RTS, SQD, SQE, ERR); the INFO retry line adds ", retrying %d/%d after %u msec of sleep".
_MODIFY_QP = re.compile(
    r"on dev (?P<device>[\w.-]+):(?P<port>-?\d+), curr state (?P<curr_state>\w+), next state (?P<next_state>\w+)"
    r"(?:, local GID index (?P<gid_index>-?\d+))?(?:, local GID (?P<local_gid>[^,\s]+))?(?:, remote GID (?P<remote_gid>[^,\s]+))?")


def _modify_qp(draft: Draft) -> bool:
    """Fields of a failed ``ibv_modify_qp`` (NCCL 2.24+ names the transition, the device and
    both GIDs): device, port, curr_state, next_state, gid_index, local/remote GID, and the
    peer when the remote GID is an IPv4-mapped RoCE v2 GID. False for the INFO line of a
    retry NCCL makes (``..., retrying 1/2 after 500 msec of sleep``): not a failure yet."""
    a = draft.attributes
    detail = str(a.get("detail") or "")
    if ", retrying " in detail:
        return False
    m = _MODIFY_QP.search(detail)
    if m is None:
        return True
    for key in ("device", "curr_state", "next_state", "local_gid", "remote_gid"):
        if m[key] and m[key] != "N/A":
            a[key] = m[key]
    a["port"] = int(m["port"])
    if m["gid_index"] is not None:
        a["gid_index"] = int(m["gid_index"])
    remote = a.get("remote_gid")
    if isinstance(remote, str) and remote.lower().startswith("::ffff:") and draft.peer is None:
        draft.peer = remote[7:]
    return True


@hook("nccl_ib_async")
def nccl_ib_async(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A NET/IB async event line -> ``nccl.ib_async_event`` for error events (``fatal`` as
    NCCL 2.23+ classifies them, ``ibv_event`` the enum name), ``fabric.port_state``
    (state ACTIVE, side host) for "port active", and the informational ones (GID table
    change, client reregistration, LID/SM/P_Key change, ...) -> ``nccl.warn`` with
    ``kind: ib_async_info`` so they are kept but name no fabric fault."""
    a = draft.attributes
    text = str(a.get("event", "")).strip()
    if not text and match is not None and match.groupdict().get("device_g"):
        text = "GID table change"  # 2.29+: "<dev>:<port> GID table changed"
    qual = a.pop("qualifier", None)  # 2.23+: "fatal" / "non-fatal" / "error"
    if text.endswith(")") and "(" in text:  # 2.29+: "port error(10)"
        base, _, num = text[:-1].rpartition("(")
        if num.isdigit():
            text = base.strip()
            a["event_num"] = int(num)
    a["event"] = text
    info = IBV_EVENTS.get(text)
    if info is None:
        name, is_error, fatal = "", True, qual == "fatal"
    else:
        name, is_error, fatal = info
    if qual == "fatal":
        fatal = True
    if name:
        a["ibv_event"] = name
    if not is_error:
        if text == "port active":
            draft.type = "fabric.port_state"
            a.update(state="ACTIVE", side="host")
            return [draft]
        draft.type = "nccl.warn"
        a["kind"] = "ib_async_info"
        a["fatal"] = False
        return [draft]
    draft.type = "nccl.ib_async_event"
    a["fatal"] = fatal
    return [draft]


#: NCCL source file (as the WARN prefix prints it) -> event type of a WARN no specific rule knows.
_SITE_TYPES: tuple[tuple[str, str], ...] = (
    ("graph/", "nccl.topology_error"),
    ("transport/nvls", "nccl.nvls_error"),
    ("mnnvl", "nccl.nvls_error"),
    ("bootstrap", "nccl.bootstrap_error"),
    ("transport/net_ib", "nccl.ib_error"),
    ("misc/ibvwrap", "nccl.ib_error"),
    ("misc/socket", "nccl.socket_error"),
    ("os/linux", "nccl.socket_error"),
    ("transport/net_socket", "nccl.socket_error"),
)
#: the same by the text's subsystem prefix, for lines whose site names no NCCL file
_TEXT_TYPES: tuple[tuple[str, str], ...] = (
    ("NET/IB", "nccl.ib_error"),
    ("NET/Socket", "nccl.socket_error"),
    ("Bootstrap", "nccl.bootstrap_error"),
    ("XML ", "nccl.topology_error"),
    ("TOPO/", "nccl.topology_error"),
)


@hook("nccl_warn")
def nccl_warn(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A ``NCCL WARN`` line no specific rule claims: ``site`` = ``file:line`` as printed
    (``transport/net_ib.cc:839``; a plugin prints its function, ``register_mr_buffers:544``),
    ``file``, ``line`` (int), ``func`` (2.29+ ``(func)``), ``text``; ``subsystem`` from the
    text's ``NET/IB``-style prefix. The type follows the site's file: graph/* ->
    nccl.topology_error, transport/nvls.cc / mnnvl.cc -> nccl.nvls_error, bootstrap.cc ->
    nccl.bootstrap_error, net_ib / ibvwrap -> nccl.ib_error, socket.cc / os/linux.cc /
    net_socket.cc -> nccl.socket_error, else nccl.warn."""
    a = draft.attributes
    f = a.get("file")
    ln = a.pop("line_no", None)
    if f and ln is not None:
        a["site"] = f"{f}:{ln}"
        a["line"] = int(ln)
    text = str(a.get("text", "")).strip()
    a["text"] = text
    m = re.match(r"(NET/\w+|[A-Z][A-Za-z]+/[A-Za-z]+|Bootstrap|Proxy)\b", text)
    if m:
        a["subsystem"] = m.group(1)
    etype = "nccl.warn"
    for key, t in _SITE_TYPES:
        if f and key in f:
            etype = t
            break
    else:
        for key, t in _TEXT_TYPES:
            if text.startswith(key):
                etype = t
                break
    draft.type = etype
    return [draft]


#: negative errno values (aws-ofi-nccl "RC: -22") -> errno names
_ERRNO_BY_NUM: dict[int, str] = {
    1: "EPERM", 2: "ENOENT", 4: "EINTR", 5: "EIO", 11: "EAGAIN", 12: "ENOMEM", 13: "EACCES", 14: "EFAULT",
    16: "EBUSY", 19: "ENODEV", 22: "EINVAL", 24: "EMFILE", 28: "ENOSPC", 38: "ENOSYS", 61: "ENODATA",
    95: "EOPNOTSUPP", 103: "ECONNABORTED", 104: "ECONNRESET", 110: "ETIMEDOUT", 111: "ECONNREFUSED",
    113: "EHOSTUNREACH", 121: "EREMOTEIO",
}


@hook("nccl_socket")
def nccl_socket(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A socket connect/accept/recv/send failure: ``op`` (connect | accept | recv | send, from
    the alternative that matched and the printing function), ``errno`` from ``error``."""
    assert match is not None
    g = match.groupdict()
    a = draft.attributes
    func = g.get("func") or ""
    if g.get("op_s"):
        a["op"] = g["op_s"]
    elif g.get("error_a") or g.get("error_a2") or "ccept" in func:
        a["op"] = "accept"
    else:
        a["op"] = "connect"
    _errno(a)
    return [draft]


@hook("nccl_net_plugin")
def nccl_net_plugin(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """Net plugin selection failures -> ``kind``: network_not_found (NCCL_NET names no
    network; ``network``), no_net_plugin, incompatible_version (``plugin``, ``plugin_version``)."""
    a = draft.attributes
    none = a.pop("_none", None)
    if a.get("network") is not None:
        a["kind"] = "network_not_found"
    elif none:
        a["kind"] = "no_net_plugin"
    else:
        a["kind"] = "incompatible_version"
    return [draft]


@hook("nccl_ofi_register")
def nccl_ofi_register(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """aws-ofi-nccl memory registration failure: ``errno`` from ``RC`` (negative errno);
    ENOMEM -> ``config.memlock``, otherwise ``config.net_plugin`` kind ofi_mr_register (RC -22
    with a newer NCCL than the host's Libfabric is the version skew of public/rc-43)."""
    a = draft.attributes
    rc = a.get("rc")
    name = _ERRNO_BY_NUM.get(abs(rc)) if isinstance(rc, int) else None
    if name is None:
        _errno(a)
    else:
        a["errno"] = name
    a["kind"] = "ofi_mr_register"
    draft.type = "config.memlock" if a.get("errno") == "ENOMEM" else "config.net_plugin"
    return [draft]


@hook("nccl_nvls")
def nccl_nvls(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """NVLS / MNNVL setup failure: ``kind`` multicast_bind (cuMulticastBindMem failed:
    ``cuda_error``, ``error``, ``size``), mnnvl_imex, nvls_enable_conflict."""
    a = draft.attributes
    if "kind" not in a:
        a["kind"] = "multicast_bind"
    return [draft]
