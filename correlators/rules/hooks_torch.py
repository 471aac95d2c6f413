"""Code hooks of the PyTorch / gloo / torch.distributed.elastic rules (``torch.yaml`` and the
ProcessGroupNCCL entries of ``nccl.yaml``).

Each hook receives the draft the rule's pattern and ``fields`` built and returns the drafts to
emit (see :mod:`correlators.rules.code`). Sources of the formats are named in the rules'
``source:`` keys; the hooks only parse what the regex leaves as free text.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from correlators.rules.code import Draft, hook

if TYPE_CHECKING:  # pragma: no cover
    from correlators.rules import Rule
    from schemas.records import Observation

# ``WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000)``
# as ProcessGroupNCCL's ``operator<<(WorkNCCL)`` prints it; PyTorch <= 1.12 printed
# ``TensorShape=[...]`` and no Numel*. Keys not listed are ignored; "..." placeholders of
# template lines simply do not match.
_WORK_KV = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\))=([\w.]+)")
_WORK_ATTR = {"SeqNum": ("seq_num", int), "OpType": ("op_type", str), "NumelIn": ("numel_in", int),
              "NumelOut": ("numel_out", int), "Timeout(ms)": ("timeout_ms", int)}
# the text right before the watchdog message when it is re-raised inside another message
_RANK_TAG = re.compile(r"\[rank(\d+)\]:")
_WRAPPERS = ("terminated with exception: ", "Original reason for failure was: ",
             "Error: ", "what():  ", "what(): ")


@hook("torch_worknccl")
def torch_worknccl(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """ProcessGroupNCCL watchdog timeout: parse the ``WorkNCCL(...)`` text (group ``work``)
    into seq_num (int), op_type (str), numel_in / numel_out (int elements), timeout_ms (int
    ms); ``ran_for_ms`` (int ms) comes from the pattern. ``wrapped`` (bool) is True when the
    message is quoted inside another one (``Process group watchdog thread terminated with
    exception: [Rank 3] Watchdog caught ...``, ``DistBackendError: [Rank 3] ...``), so a
    consumer can count one timeout per rank and sequence number."""
    assert match is not None
    a = draft.attributes
    work = a.pop("work", "") or ""
    for key, value in _WORK_KV.findall(work):
        name, typ = _WORK_ATTR[key]
        try:
            a[name] = typ(value)
        except ValueError:
            pass
    body = obs.body or ""
    line_start = body.rfind("\n", 0, match.start()) + 1
    before = body[line_start:match.start()]
    a["wrapped"] = any(w in before for w in _WRAPPERS)
    # a launcher prefix ("node-a01: ", "(WorkerDict pid=12) ") can push PyTorch's global-rank
    # tag "[rank17]:" off the line start, where the engine looks for it
    tag = _RANK_TAG.search(before)
    if tag and not before.startswith("[rank"):
        draft.rank = int(tag.group(1))
    return [draft]


def _rank_list(text: str | None) -> list[int]:
    """``"3, 7"`` -> [3, 7] (the desync report's rank lists)."""
    return [int(x) for x in re.findall(r"\d+", text or "")]


@hook("torch_desync_report")
def torch_desync_report(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A line of ProcessGroupNCCL's desync report (TORCH_NCCL_DESYNC_DEBUG=1, TraceUtils.h
    ``retrieveDesyncReport``): ``lagging_ranks`` (list of ints, the ranks the report blames),
    ``state`` (never_joined | not_finished | not_joined) and ``collective_seq`` (int, the
    collective number counted from 1) when the line names one."""
    a = draft.attributes
    never = a.pop("never", None)
    r1, r2, r3 = a.pop("ranks", None), a.pop("ranks2", None), a.pop("ranks3", None)
    seq2, seq3 = a.pop("seq", None), a.pop("seq3", None)
    if r1 is not None or never is not None:
        a["lagging_ranks"], a["state"] = _rank_list(r1), "never_joined"
    elif r2 is not None:
        a["lagging_ranks"], a["state"] = _rank_list(r2), "not_finished"
        a["collective_seq"] = int(seq2)
    elif r3 is not None:
        a["lagging_ranks"], a["state"] = _rank_list(r3), "not_joined"
        a["collective_seq"] = int(seq3)
    a["kind"] = "desync_report"
    return [draft]


@hook("fr_trace_missing")
def fr_trace_missing(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A ``missing ranks`` line of PyTorch's flight-recorder analyzer (torchfrtrace):
    ``lagging_ranks`` (sorted list of ints, the ranks that never joined the collective), with
    ``op`` and ``group`` when the 2.5 one-line form names them."""
    a = draft.attributes
    a["lagging_ranks"] = sorted(set(_rank_list(a.pop("ranks", None))))
    return [draft]


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|min|m|h)?$")
_UNIT_MS = {"ms": 1, "s": 1000, "min": 60_000, "m": 60_000, "h": 3_600_000, None: 1000}


def duration_ms(text: str | None) -> int | None:
    """c10d prints durations through fmt's chrono formatting: ``600000ms``, ``1800s``,
    ``20min``, ``30m`` -> milliseconds (int). A bare number is seconds. None if unparsable."""
    m = _DURATION.match((text or "").strip())
    if not m:
        return None
    return int(float(m.group(1)) * _UNIT_MS[m.group(2)])


# errno names for the store/socket failures c10d prints (errno text or libuv code name)
_STORE_REASON = (
    ("EADDRINUSE", "addr_in_use"), ("ddress already in use", "addr_in_use"),
    ("Connection refused", "refused"), ("ECONNREFUSED", "refused"),
    ("Connection reset by peer", "reset"), ("ECONNRESET", "reset"),
    ("Broken pipe", "broken_pipe"), ("EPIPE", "broken_pipe"),
    ("got 0 bytes", "closed"), ("Connection was likely closed", "closed"),
    ("No route to host", "no_route"), ("Name or service not known", "dns"),
    ("Temporary failure in name resolution", "dns"),
)
_STORE_OPS = (("The client socket", "connect"), ("The server socket", "listen"), ("ailed to recv", "recv"),
              ("Failed to recv", "recv"), ("Socket Timeout", "recv"), ("wait timeout", "wait"))
_TIMEOUT_WORDS = ("Socket Timeout", "timed out", "wait timeout after", "Timed out")


@hook("torch_store")
def torch_store(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A c10d store (TCPStore) failure -> ``store.timeout`` or ``store.error``.

    Attributes: ``op`` (connect | listen | recv | wait | get), ``reason`` (timeout,
    addr_in_use, refused, reset, broken_pipe, closed, no_route, dns, other), ``timeout_ms``
    (int ms, from ``600000ms`` / ``1800s`` / ``20min``), ``key`` (store key waited on),
    ``waiting_rank`` and ``peer_rank`` (ints: ``[3] is setting up NCCL communicator and
    retrieving ncclUniqueId from [0]`` -- rank 3 waited on rank 0), ``errno``, ``port``.
    The event's peer is ``host:port`` of the store when the line names it."""
    a = draft.attributes
    text = a.get("text") or (match.group(0) if match else "")
    if "timeout_text" in a:
        ms = duration_ms(a.pop("timeout_text"))
        if ms is not None:
            a["timeout_ms"] = ms
    if a.get("store_host") and a.get("store_port"):
        draft.peer = f"{a.pop('store_host')}:{a.pop('store_port')}"
    a.pop("store_host", None)
    a.pop("store_port", None)
    if "op" not in a:
        a["op"] = next((op for lead, op in _STORE_OPS if text.startswith(lead)), "other")
    reason = next((r for needle, r in _STORE_REASON if needle in text), None)
    timed_out = any(w in text for w in _TIMEOUT_WORDS)
    if reason is None:
        reason = "timeout" if timed_out else "other"
    a["reason"] = reason
    a.pop("text", None)
    draft.type = "store.timeout" if reason == "timeout" else "store.error"
    return [draft]




@hook("torch_proc_exit")
def torch_proc_exit(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A launcher's report of a worker's end: a negative exit code (or a signal name) is a
    kill by that signal -> ``proc.killed`` (signal, signal_name); a positive exit code ->
    ``proc.exited`` (exitcode); exit code 0 is no fault (dropped). ``local_rank`` (int)
    also sets the GPU index for torchrun, whose local rank is the device."""
    from correlators.rules.code import SIGNAL_NAMES, to_signal

    a = draft.attributes
    code = a.get("exitcode")
    sig = a.get("signal")
    if isinstance(sig, str):
        sig = to_signal(sig)
    if sig is None and isinstance(code, int) and code < 0:
        sig = -code
    if sig:
        a["signal"] = sig
        a["signal_name"] = SIGNAL_NAMES.get(sig, f"SIG{sig}")
        draft.type = "proc.killed"
        return [draft]
    a.pop("signal", None)
    if a.pop("exception", None) is not None:
        a["reason"] = "exception"
    elif code == 0:
        return []
    a.setdefault("reason", "exit_code")
    draft.type = "proc.exited"
    return [draft]


@hook("torch_comm_aborted")
def torch_comm_aborted(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``NCCL communicator was aborted on rank N. Original reason for failure was: <reason>``
    (stage=aborted, comm_rank) or ``... watchdog thread terminated with exception: <reason>``
    (stage=watchdog_exception): ``reason`` (str, the quoted failure) and ``reason_kind``
    (cuda_error | nccl_error | timeout | other) classified from it; the watchdog's ``[PG p
    Rank r]`` prefix gives ``pg`` / ``pg_rank``, and the event's rank for the default group."""
    a = draft.attributes
    wd = a.pop("wd_reason", None)
    guid = a.pop("pg_guid", None)
    if draft.rank is None and isinstance(a.get("pg_rank"), int) and (
            a.get("pg") in (None, 0) or "default_pg" in (guid or "")):
        draft.rank = a["pg_rank"]  # the default group's rank is the global rank
    a["stage"] = "aborted" if "comm_rank" in a else "watchdog_exception"
    reason = (a.get("reason") or wd or "").strip()
    if reason:
        a["reason"] = reason
    else:
        a.pop("reason", None)
    if "CUDA error" in reason or "cuda" in reason.lower().split(":", 1)[0]:
        kind = "cuda_error"
    elif "NCCL error" in reason or "nccl" in reason[:40].lower():
        kind = "nccl_error"
    elif "timeout" in reason.lower() or "timed out" in reason.lower():
        kind = "timeout"
    else:
        kind = "other"
    a["reason_kind"] = kind
    return [draft]


@hook("torch_dump_signal")
def torch_dump_signal(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """ProcessGroupNCCL's heartbeat monitor learnt of a collective timeout: ``kind``
    (dump_signal | global_timeout), ``timeout_rank`` (int: the rank whose timeout raised the
    dump signal; -1 when it is this rank, "from this local rank"), last_enqueued /
    last_completed (ints) when printed."""
    a = draft.attributes
    local = a.pop("local", None)
    a.pop("observed", None)
    glob = a.pop("global", None)
    a["kind"] = "global_timeout" if glob else "dump_signal"
    if local:
        a["timeout_rank"] = -1
    return [draft]
