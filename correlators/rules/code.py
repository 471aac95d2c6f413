"""Code hooks of the extraction rule pack: the escape hatch for the few rules a regex and a
field table cannot express.

A rule names a hook with ``code: <name>``; the hook is registered here with :func:`hook`.
The engine first builds a :class:`Draft` from the rule's pattern and ``fields`` (the
declarative part), then calls the hook::

    fn(draft: Draft, match: re.Match | None, obs: Observation, rule: Rule) -> list[Draft]

and turns every returned draft into an :class:`~schemas.records.Event` (an empty list drops
the match). A hook may set ``draft.type`` to any type listed in the rule's ``event`` /
``events``; the loader and the tests check the list against the vocabulary.

This module also holds the normalisers shared by the engine and the hooks (signals, byte
sizes) and names the identifier normalisers of :mod:`correlators.ids` (PCI bus ids, peer
addresses, switch ports) under the names the hooks use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from correlators import xid as xidcat
from correlators.ids import normalise_peer, normalise_pci, normalise_switch_port, pci_from_nccl_busid

if TYPE_CHECKING:  # pragma: no cover
    from correlators.rules import Rule
    from schemas.records import Observation


@dataclass(slots=True)
class Draft:
    """An event under construction. ``gpu_pci`` is normalised (``0000:9c:00``) when the
    event is built; ``began_at`` is UTC ns."""

    type: str
    attributes: dict[str, Any] = field(default_factory=dict)
    host: str | None = None
    rank: int | None = None
    gpu_index: int | None = None
    gpu_pci: str | None = None
    peer: str | None = None
    began_at: int | None = None


Hook = Callable[["Draft", "re.Match[str] | None", "Observation", "Rule"], list[Draft]]
HOOKS: dict[str, Hook] = {}


def hook(name: str) -> Callable[[Hook], Hook]:
    """Register ``fn`` as the code hook ``name`` (referenced by a rule's ``code:``)."""

    def register(fn: Hook) -> Hook:
        if name in HOOKS:
            raise ValueError(f"code hook {name!r} registered twice")
        HOOKS[name] = fn
        return fn

    return register


# --------------------------------------------------------------------------- normalisers

# PCI bus ids, peers and switch ports are normalised by correlators.ids (one form per kind of
# id for the whole engine); the names below are the ones the rule engine and hooks use.
normalize_pci = normalise_pci
nccl_busid_to_pci = pci_from_nccl_busid
normalize_peer = normalise_peer
normalize_switch_port = normalise_switch_port


#: Linux x86-64/arm64 signal numbers (fixed here so results never depend on the platform).
SIGNALS: dict[str, int] = {
    "SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6,
    "SIGBUS": 7, "SIGFPE": 8, "SIGKILL": 9, "SIGUSR1": 10, "SIGSEGV": 11, "SIGUSR2": 12,
    "SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15, "SIGXCPU": 24, "SIGXFSZ": 25,
}
SIGNAL_NAMES: dict[int, str] = {v: k for k, v in SIGNALS.items()}


def to_int(value: object, base: int = 10) -> int | None:
    """``value`` as an int (an int as is, text in ``base``), or None when it is not one."""
    if isinstance(value, int):
        return value
    try:
        return int(str(value), base)
    except (TypeError, ValueError):
        return None


def to_signal(text: str) -> int | None:
    """``-9`` / ``9`` / ``SIGKILL`` / ``KILL`` -> 9 (a negative exit code is a signal)."""
    t = text.strip().upper()
    if t.lstrip("-").isdigit():
        return abs(int(t))
    if not t.startswith("SIG"):
        t = "SIG" + t
    return SIGNALS.get(t)


def to_signal_name(text: str) -> str | None:
    """``-9`` / ``9`` / ``SIGKILL`` -> ``SIGKILL``."""
    num = to_signal(text)
    return None if num is None else SIGNAL_NAMES.get(num, f"SIG{num}")


_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"^\s*([\d.]+)\s*([KMGT]?i?B)\s*$", re.I)


def to_bytes(text: str) -> int | None:
    """``279.40 GiB`` -> 300003465626 (bytes, int); ``518.00 MiB``; ``0 bytes``."""
    t = text.strip().replace("bytes", "B")
    m = _SIZE.match(t)
    if not m:
        return None
    return int(round(float(m.group(1)) * _UNITS[m.group(2).upper()]))


# --------------------------------------------------------------------------- hooks


@hook("xid_catalog")
def xid_catalog(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """Enrich an ``NVRM: Xid`` match with the catalog row (mnemonic, description,
    immediate/investigatory action; ``UNKNOWN`` for codes the catalog does not list), the
    XID 45 follow-on (``caused by previous Xid N`` -> ``caused_by_xid``) and the XID 154
    recovery hint (``recovery_action``: RESET_GPU, DRAIN_AND_RESET, RESTART_BM, NONE)."""
    a = draft.attributes
    code = a["xid"]
    info = xidcat.xid_info(code)
    if info is None:
        a.update(mnemonic="", description="", immediate_action=xidcat.UNKNOWN_ACTION,
                 investigatory_action=xidcat.UNKNOWN_ACTION)
    else:
        a.update(mnemonic=info.mnemonic, description=info.description,
                 immediate_action=info.immediate_action,
                 investigatory_action=info.investigatory_action)
    if a.get("process", "").startswith("<"):
        a.pop("process")  # '<unknown>' or a redaction placeholder
    detail = a.get("detail", "")
    m = re.search(r"caused by previous Xid (\d+)", detail)
    if m:
        a["caused_by_xid"] = int(m.group(1))
    if code == 154:
        action = xidcat.recovery_action(detail)
        if action is not None:
            a["recovery_action"] = action
    return [draft]


@hook("nccl_duplicate_gpu")
def nccl_duplicate_gpu(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60``: the device is
    NCCL's compact bus id in hex; decode it into ``gpu.pci_bus_id``. ``ranks`` = [the
    reporting rank, the other rank] (ints)."""
    a = draft.attributes
    ranks = [a.pop(k) for k in ("_rank", "_other_rank") if k in a]
    if ranks:
        a["ranks"] = ranks
    dev = a.get("device")
    if dev:
        draft.gpu_pci = nccl_busid_to_pci(dev)
    return [draft]


@hook("ibv_port_state")
def ibv_port_state(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``state: PORT_ACTIVE (4)`` from ``ibv_devinfo``: take the HCA (``hca_id:``) and port
    number (``port:``) from the nearest preceding lines of the same record, when present."""
    assert match is not None
    head = (obs.body or "")[: match.start()]
    hca = re.findall(r"hca_id:\s*(\S+)", head)
    port = re.findall(r"^\s*port:\s*(\d+)\s*$", head, re.M)
    if hca:
        draft.attributes["device"] = hca[-1]
    if port:
        draft.attributes["port"] = int(port[-1])
    return [draft]


_TR_ENTRY = re.compile(r"^\[(?P<idx>\d+)\]:\s*$")
_TR_KV = re.compile(r"^\s{1,4}(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<val>.*)$")


@hook("torchrun_summary")
def torchrun_summary(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A torchrun ``ChildFailedError`` summary (the block between the ``====`` rules) -> one
    ``torchrun.child_failed`` per failure entry::

        [0]:
          time      : 2026-11-30_01:20:31
          host      : node-a01
          rank      : 1 (local_rank: 1)
          exitcode  : -9 (pid: 572)
          error_file: <N/A>
          traceback : Signal 9 (SIGKILL) received by PID 572

    Attributes: global_rank, local_rank, exitcode, pid, time (``2026-11-30T01:20:31``, the
    launcher host's local time as printed), signal / signal_name (negative exit code or
    ``Signal 9 (SIGKILL)``), error (last line of a ``@record`` error-file traceback),
    first_observed (True for the entry under ``Root Cause (first observed failure):``).
    Event host = the entry's host, rank = global rank, gpu.index = local rank.
    """
    out: list[Draft] = []
    first = False
    cur: dict[str, Any] | None = None
    tb: list[str] = []

    def flush() -> None:
        if cur is None:
            return
        d = Draft(type=draft.type, attributes={"first_observed": cur["first"]})
        a = d.attributes
        m = re.match(r"(\d+) \(local_rank: (\d+)\)", cur.get("rank", ""))
        if m:
            a["global_rank"], a["local_rank"] = int(m.group(1)), int(m.group(2))
            d.rank, d.gpu_index = a["global_rank"], a["local_rank"]
        m = re.match(r"(-?\d+) \(pid: (\d+)\)", cur.get("exitcode", ""))
        if m:
            a["exitcode"], a["pid"] = int(m.group(1)), int(m.group(2))
            if a["exitcode"] < 0:
                a["signal"] = -a["exitcode"]
        if cur.get("host"):
            d.host = cur["host"]
        if cur.get("time"):
            a["time"] = cur["time"].replace("_", "T", 1)
        tb_lines = [ln.strip() for ln in tb if ln.strip()]
        if tb_lines:
            m = re.match(r"Signal (\d+) \((SIG\w+)\)", tb_lines[0])
            if m:
                a["signal"] = int(m.group(1))
                a["signal_name"] = m.group(2)
            elif tb_lines[0].startswith("Traceback"):
                a["error"] = tb_lines[-1]
        if "signal" in a and "signal_name" not in a:
            a["signal_name"] = SIGNAL_NAMES.get(a["signal"], f"SIG{a['signal']}")
        out.append(d)

    for line in (obs.body or "").splitlines():
        if line.startswith("Root Cause"):
            flush()
            cur, tb, first = None, [], True
            continue
        if line.startswith("---") or line.startswith("==="):
            flush()
            cur, tb = None, []
            continue
        m = _TR_ENTRY.match(line)
        if m:
            flush()
            cur, tb = {"first": first}, []
            continue
        if cur is None:
            continue
        m = _TR_KV.match(line)
        if m and not tb:
            cur[m["key"]] = m["val"].strip()
            if m["key"] == "traceback":
                tb.append(m["val"])
        elif tb:
            tb.append(line)
    flush()
    return out


# --------------------------------------------------------------------------- fabric


@hook("fabric_port_errors")
def fabric_port_errors(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A ``fabric_counter`` sample (``connectors.counters``) -> one ``fabric.port_errors``
    event: ``deltas`` = {counter: increase (int)} of the error counters the rule's
    ``when_any`` names that increased, plus ``interval_s``, ``reset``, ``saturated``,
    ``port``, ``node`` and ``side`` copied from the observation's attributes when present
    (the event's ``fabric_port`` is the observation's). The error-counter list lives in the
    rule (``fabric.yaml``), so a counter is an error for extraction iff the rule names it."""
    metric = obs.metric or {}
    deltas = {c.metric: int(metric[c.metric]) for c in rule.when_any if c.holds(metric)}
    if not deltas:
        return []
    a = draft.attributes
    a["deltas"] = dict(sorted(deltas.items()))
    for key in ("interval_s", "reset", "saturated", "port", "node", "side"):
        if key in obs.attributes:
            a[key] = obs.attributes[key]
    return [draft]


@hook("switch_port_event")
def switch_port_event(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A switch-side port line (Onyx, Cumulus switchd, SONiC orchagent, UFM) -> link_down /
    link_up / port_state. ``interface`` (the name as printed) becomes ``port`` =
    :func:`normalize_switch_port`; ``state`` is upper-cased (``DOWN``/``UP``); the type is
    ``fabric.link_down`` for DOWN, ``fabric.link_up`` for UP, else ``fabric.port_state``.
    ``side: switch``. When the line names the switch (UFM ``Switch:leaf-01``, syslog host),
    that is the event host; otherwise the observation's host (``fabric/<switch>/`` files)."""
    a = draft.attributes
    iface = str(a.get("interface", "")).strip()
    if not iface:
        return []
    a["interface"] = iface
    a["port"] = normalize_switch_port(iface)
    state = str(a.get("state", "")).strip().upper()
    a["state"] = _SWITCH_STATES.get(state, state)
    if "from_state" in a:
        prev = str(a["from_state"]).strip().upper()
        a["from_state"] = _SWITCH_STATES.get(prev, prev)
    a["side"] = "switch"
    sw = a.pop("switch", None)
    if sw:
        draft.host = str(sw)
    if a["state"] == "DOWN" and "fabric.link_down" in rule.events:
        draft.type = "fabric.link_down"
    elif a["state"] == "UP" and "fabric.link_up" in rule.events:
        draft.type = "fabric.link_up"
    elif "fabric.port_state" in rule.events:
        draft.type = "fabric.port_state"
    else:
        return []
    return [draft]


#: Switch-log state words -> DOWN / UP (anything else stays upper-cased: INIT, ARMED, ...).
_SWITCH_STATES = {"ACTIVE": "UP", "LINKUP": "UP", "LINK UP": "UP", "WENT UP": "UP", "UP": "UP",
                  "LINKDOWN": "DOWN", "LINK DOWN": "DOWN", "WENT DOWN": "DOWN", "DOWN": "DOWN"}


@hook("ib_port_status")
def ib_port_status(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``ibstatus`` (``state: 4: ACTIVE``) / ``ibstat`` (``State: Active``) port state lines:
    the HCA and port come from the nearest preceding header of the same record
    (``Infiniband device 'mlx5_0' port 1 status:`` / ``CA 'mlx5_0'`` + ``Port 1:``) when
    present. ``state`` upper-case (``ACTIVE``, ``DOWN``, ``INIT``, ``ARMED``), ``side: host``."""
    assert match is not None
    head = (obs.body or "")[: match.start()]
    a = draft.attributes
    st = str(a.get("state", "")).strip().upper()
    a["state"] = {"INITIALIZING": "INIT", "INITIALIZE": "INIT"}.get(st, st)
    dev = re.findall(r"Infiniband device '([^']+)' port (\d+) status:", head)
    if dev:
        a["device"], a["port"] = dev[-1][0], int(dev[-1][1])
    else:
        ca = re.findall(r"^CA '([^']+)'", head, re.M)
        port = re.findall(r"^\s*Port (\d+):\s*$", head, re.M)
        if ca:
            a["device"] = ca[-1]
        if port:
            a["port"] = int(port[-1])
    a["side"] = "host"
    return [draft]
