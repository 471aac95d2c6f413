"""Detectors: causes that are patterns over many events rather than one line.

Each detector is registered under the id its ``detectors`` entry in ``causal.yaml`` uses and
reads its parameters from there. A detector returns hypotheses, or folds its finding into an
existing hypothesis that it corroborates.

* ``waited_on`` -- waiting-for-peer evidence in any backend (NCCL watchdog, gloo, TCPStore,
  elastic rendezvous): the suspects are the members the others waited on -- named by the
  waits (peer rank, peer address -> host), or silent while every other member reported (the
  stalled rank: when every rank but a few logs a watchdog timeout, the silent ones never
  entered the collective; in a 2-member group the one that did not time out), or, for a
  store/rendezvous short of clients, the nodes of the allocation that never logged. torchrun's
  "Root Cause (first observed failure)" names whichever rank *exited* first, one of the waiting
  ranks in that case (PyTorch elastic docs; seen in the wild): context, never the deciding
  evidence. When a hardware/host hypothesis already names a suspect, the suspects become its
  culprit ranks instead of a rival cause.
* ``roce_gid_index`` -- NET/IB completion error 12 (transport retry counter exceeded) from the
  first connections of a job, with no link-down, module or async port event and ports read
  as ACTIVE, is the RoCE GID index misconfiguration (NCCL issue #426), not the fabric.
* ``gdr_asymmetry`` -- NCCL's channel lines (``... via NET/IB/0/GDRDMA``) say per connection
  whether the local side uses GPUDirect RDMA. When some hosts of a job use it and others never
  do, those others lack the GPUDirect path (nvidia-peermem not loaded, or dma-buf unsupported):
  a configuration fault that costs bandwidth, not a fabric fault (NCCL issue #897,
  transport/net.cc prints the suffix from the local ``useGdr``).
* ``loopback_peer`` -- in a job across several nodes, a rank that fails to *connect* to a
  peer at a loopback address (127.0.0.0/8, ::1, IPv4-mapped loopback; gloo pairs, NCCL
  sockets) was given that address by the peer itself: the peer's host name resolves to
  loopback (Debian's /etc/hosts ``127.0.1.1 <hostname>``) or the socket interface is ``lo``
  (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME). A configuration fault, not the network
  ("Connection refused": nothing listens on the connecting node's own loopback) and not a
  crash (pytorch/pytorch#15592, gloo device.cc binds to the address the host name resolves
  to). One node alone may use loopback: then it says nothing.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Callable, Sequence

from correlators.enrich import Allocation
from correlators.explain import format_ranks
from correlators.hypothesis import Hypothesis, hypothesis_ranks, render_text
from correlators.ids import parse_address
from correlators.process_groups import Membership, ProcessGroup, build_membership
from correlators.timetext import clock
from schemas.records import Event

Detector = Callable[..., list]
_REGISTRY: dict[str, Detector] = {}
#: detectors that take the per-source coverage (``coverage=`` keyword)
_TAKES_COVERAGE: set[str] = set()


def detector(name: str) -> Callable[[Detector], Detector]:
    """Register a detector function under ``name`` (one with a ``coverage`` parameter gets
    the per-source coverage entries)."""

    def wrap(fn: Detector) -> Detector:
        _REGISTRY[name] = fn
        if "coverage" in fn.__code__.co_varnames[: fn.__code__.co_argcount + fn.__code__.co_kwonlyargcount]:
            _TAKES_COVERAGE.add(name)
        return fn

    return wrap


def run_detectors(info, alloc: Allocation, events: Sequence[Event], hyps: list, rules, coverage: Sequence = ()) -> list:
    """Run every detector configured in the causal rules; returns new hypotheses. Detectors
    that take ``coverage`` (the per-source coverage entries) get it: negative evidence needs to
    tell a node without input from a silent one."""
    out = []
    for name in sorted(rules.detectors):
        fn = _REGISTRY.get(name)
        if fn is None:
            raise KeyError(f"causal.yaml names detector {name!r}, which no code registers")
        if name in _TAKES_COVERAGE:
            out.extend(fn(info, alloc, events, hyps, rules.detectors[name], coverage=coverage))
        else:
            out.extend(fn(info, alloc, events, hyps, rules.detectors[name]))
    return out


#: Launcher-side records about a rank (written by torchrun / the scheduler, not by the rank):
#: they say nothing of whether the rank itself was still logging.
LAUNCHER_TYPES = ("torchrun.", "sched.", "proc.killed", "proc.exited", "proc.signal_received", "k8s.", "kueue.")
#: Failures of a waiting rank that its wait explains (it exited because it timed out): context,
#: never evidence against it (torchrun's "first observed failure" is one of them).
CONSEQUENCE_TYPES = ("torchrun.child_failed", "proc.exited", "proc.killed", "app.exception", "nccl.comm_aborted")


def _is_wait(e: Event, params: dict) -> bool:
    """A line that says its rank/host was waiting on another member and gave up."""
    if e.type not in params.get("wait_types", ()):
        return False
    if e.type == "store.error":
        return e.attributes.get("reason") in ("closed", "reset", "refused", "broken_pipe")
    if e.type == "nccl.comm_aborted":
        return e.attributes.get("reason_kind") == "timeout"
    return True


def host_presence(info, alloc: Allocation, events: Sequence[Event], coverage: Sequence = ()) -> dict[str, dict]:
    """Negative evidence per node of the allocation: ``{host: {"input": bool, "last_at": ns or
    None, "lines": n}}``. ``input`` is whether some source (``file:logs/<host>/...``,
    ``file:metrics/<host>/...`` or ``host:<host>``) with records covers the node: a node with
    input and no line is *silent*; one without input is *no input* (its silence proves
    nothing). ``last_at`` is the node's own last event (launcher summaries read from another
    host's log do not count)."""
    sourced: set[str] = set()
    for c in coverage:
        parts = c.source.split("/")
        host = None
        if c.source.startswith("host:"):
            host = c.source[5:]
        elif len(parts) >= 3 and parts[0] in ("file:logs", "file:metrics"):
            host = parts[1]
        if host and (c.records or c.status == "present"):
            sourced.add(host)
    times: dict[str, list[int]] = {}
    for e in events:
        times.setdefault(e.host, []).append(e.at)
    out: dict[str, dict] = {}
    for host in sorted(set(info.nodes) | {h for h, _ in alloc.ranks.values()}):
        own = times.get(host, [])
        out[host] = {"input": host in sourced or bool(own), "last_at": max(own) if own else None, "lines": len(own)}
    return out


@detector("waited_on")
def waited_on(info, alloc: Allocation, events: Sequence[Event], hyps: list, params: dict, coverage: Sequence = ()) -> list:
    """Waiting-for-peer evidence, one rule for every backend (NCCL watchdog, gloo, TCPStore,
    elastic rendezvous): the suspects are the members the others waited on.

    * **named**: a wait names its peer (``peer_rank``; ``peer`` address -> ``peer_host``
      through the allocation) that did not itself report waiting;
    * **silent**: every member but a few (``max_silent_fraction``, at least one; in a 2-member
      group the one) reported a wait and the rest said nothing -- the stalled-rank case;
    * **never joined**: a store/rendezvous timed out with ``joined < expected`` and nodes of
      the allocation produced no line at all: those nodes (host, with scheduler and config as
      alternatives); a node without any input source weighs less (no input is not silence).

    The members are the allocation's ranks, unless the waits are placed in process groups whose
    members stated themselves at init (:func:`wait_scope`, ``correlators/process_groups.py``):
    then the members and waiters are those of the group the hang began in (a timeout in a
    2-member pipeline pair makes the partner that did not time out the suspect, whatever the
    other ranks of the job did), and the chain names the group, its size and members.

    A waiter's own exit (SIGABRT from its watchdog, an exception, torchrun's "first observed
    failure") is a consequence of its wait: the suspect outweighs it. A strong cause already on
    the suspect (an XID, OOM kill or SIGKILL of that rank or host) gets the suspect ranks
    instead of a rival hypothesis.

    Phases: :func:`_waits` (who waited, in which group, since when) -> :func:`_named_peers` and
    :func:`_silent_members` (the suspects) -> :func:`_corroborate` (a strong cause on them takes
    their ranks) or :func:`_stall` (the stall hypothesis) -> :func:`_never_joined`."""
    waits = [e for e in events if _is_wait(e, params)]
    reported = lagging_reported(events, alloc, params)
    if not waits and not reported:
        return []
    w = _waits(alloc, events, waits, hyps, params, reported)
    named_ranks, named_hosts = _named_peers(w, alloc)
    silent = _silent_members(w, params)
    suspects = sorted(set(silent) | named_ranks)
    suspect_hosts = {alloc.ranks[r][0] for r in suspects} | named_hosts
    if not (suspects or suspect_hosts):
        return _never_joined(info, alloc, events, w, params, coverage)
    if _corroborate(hyps, suspects, suspect_hosts, w):
        return []
    return [_stall(w, silent, suspects, suspect_hosts, named_ranks, named_hosts, params)]


@dataclass
class _Waits:
    """The waits of a window and what they say: the ``members`` judged (the allocation's
    ranks, or the group the hang began in: ``scope``), the ranks that waited (``waiters``; of
    the group: ``group_waiters``) and their hosts, when the hang ``began``, whether a wait is
    an NCCL watchdog's, each rank's ``last`` own line, the hypotheses' ``weight`` and the
    strength that ``outweigh`` s the waiters' own failure records."""

    waits: list[Event]
    members: list[int]
    waiters: set
    group_waiters: set
    scope: "WaitScope | None"
    waiter_hosts: set
    began: int
    nccl: bool
    last: dict[int, int]
    weight: float
    outweigh: float
    reported: dict[int, Event]


def _waits(alloc: Allocation, events: Sequence[Event], waits: list[Event], hyps: list, params: dict,
           reported: dict[int, Event]) -> _Waits:
    members = sorted(alloc.ranks)
    waiters = {e.rank for e in waits if e.rank is not None}
    # the process group the hang began in, when the ranks' init lines state its members
    scope = wait_scope(waits, build_membership(events), alloc)
    group_waiters = waiters
    if scope is not None:
        members = sorted(scope.group.members)
        group_waiters = {e.rank for e in scope.waits}
    # the last own line of each rank (launcher records about it excluded)
    last: dict[int, int] = {}
    for e in events:
        if e.rank is not None and not e.type.startswith(LAUNCHER_TYPES):
            last[e.rank] = max(last.get(e.rank, e.at), e.at)
    # a waiter's own failure records are explained by its wait: a suspect outweighs them
    consequences = [
        h.strength for h in hyps
        if h.family in ("app", "killed") and h.support
        and all(e.type in CONSEQUENCE_TYPES and e.rank in waiters and e.attributes.get("signal") != 9 for e in h.events)
    ]
    outweigh = max([0.0] + [min(0.9, c + float(params.get("consequence_margin", 0.05))) for c in consequences])
    return _Waits(waits=waits, members=members, waiters=waiters, group_waiters=group_waiters, scope=scope,
                  waiter_hosts={e.host for e in waits if e.host and e.host != "_scheduler"},
                  began=min(e.effective_at for e in waits or reported.values()),
                  nccl=any(e.type == "nccl.watchdog_timeout" for e in waits), last=last,
                  weight=float(params.get("weight", 0.6)), outweigh=outweigh, reported=reported)


def _named_peers(w: _Waits, alloc: Allocation) -> tuple[set[int], set[str]]:
    """The ranks and hosts the waits name as their peer, waiters excluded, and the ranks
    PyTorch's own analysis (desync report, flight-recorder analyzer) names as lagging, whether
    or not they also timed out waiting."""
    named_ranks = {e.attributes.get("peer_rank") for e in w.waits} - {None}
    named_ranks = {r for r in named_ranks if isinstance(r, int) and r in alloc.ranks and r not in w.waiters}
    named_ranks |= set(w.reported)
    named_hosts = {e.attributes.get("peer_host") for e in w.waits} - {None}
    return named_ranks, {h for h in named_hosts if h not in w.waiter_hosts}


def _silent_members(w: _Waits, params: dict) -> list[int]:
    """The few members that stayed silent while (at least half of) the rest reported a wait."""
    if len(w.members) < 2 or not w.group_waiters:
        return []
    quiet = [r for r in w.members if r not in w.group_waiters]
    limit = max(1, int(len(w.members) * float(params.get("max_silent_fraction", 0.25))))
    if quiet and len(quiet) <= limit and len(w.group_waiters) >= len(w.members) / 2:
        return quiet
    return []


def _corroborate(hyps: list, suspects: list[int], suspect_hosts: set[str], w: _Waits) -> bool:
    """A strong cause on a suspect rank (or on its host, not on a waiter) takes the suspects'
    ranks; True if one did. A killed process is the stopped member itself, however weak its
    line is alone (a SIGKILL names the victim, not the sender): the waits that point at it
    make it the cause of the job's failure, so they lend it their weight."""
    for hyp in hyps:
        if hyp.family not in ("gpu", "host", "killed", "app", "fabric", "rack"):
            continue
        if hyp.strength < w.weight and hyp.family != "killed":
            continue
        hr = hypothesis_ranks(hyp)
        on_rank = bool(hr & set(suspects))
        on_host = suspect_hosts <= hyp.hosts and not (hr & w.waiters)
        if on_rank or on_host:
            hyp.extra_ranks |= set(suspects)
            if hyp.strength < w.weight:
                hyp.derived_weight = max(hyp.derived_weight, w.weight)
                hyp.reasons.append(
                    f"{len(w.waiters)} other member(s) waited on rank(s) {', '.join(map(str, suspects))}: "
                    "the kill is what stopped the job")
            return True
    return False


def _stall(w: _Waits, silent: list[int], suspects: list[int], suspect_hosts: set[str], named_ranks: set[int],
           named_hosts: set[str], params: dict) -> Hypothesis:
    """The stall hypothesis on the suspects, with how they were found."""
    how = []
    after = [w.last[r] for r in silent if r in w.last]
    tail = f"; last line at {clock(max(after))}" if after else "; no line of their own"
    if silent and w.scope is not None:
        how.append(w.scope.sentence(silent) + tail)
    elif silent:
        how.append(f"rank(s) {', '.join(map(str, silent))} never reported the wait that "
                   f"{len(w.waiters)} other member(s) did" + tail)
    if w.reported:
        sources = sorted({_REPORT_SOURCE.get(e.attributes.get("kind"), "PyTorch") for e in w.reported.values()})
        how.append(f"{' and '.join(sources)} named rank(s) {', '.join(map(str, sorted(w.reported)))} "
                   "as the lagging rank(s) that never joined the collective")
    named_ranks = named_ranks - set(w.reported)
    if named_ranks or named_hosts:
        how.append("the waiting members named " + ", ".join(
            [f"rank {r}" for r in sorted(named_ranks)] + [f"host {h}" for h in sorted(named_hosts)]))
    hosts = sorted(suspect_hosts)
    if silent:
        code = params["code"] if w.nccl else params.get("code_other", params["code"])
    else:
        code = params.get("code_named", params["code"])
    template = params.get("text_group", params.get("text", code)) if silent and w.scope is not None \
        else params.get("text", code)
    text = render_text(template, None, ranks=", ".join(map(str, suspects)) or "?",
                       hosts=", ".join(hosts), how="; ".join(how), at=clock(w.began))
    return Hypothesis(code=code, family="stall", domain=params.get("domain", "unknown"), text=text,
                      job_wide=False, extra_ranks=set(suspects), extra_hosts=set(hosts),
                      derived_at=w.began, derived_weight=round(max(w.weight, w.outweigh), 6))


def _never_joined(info, alloc: Allocation, events: Sequence[Event], w: _Waits, params: dict,
                  coverage: Sequence) -> list:
    """A store/rendezvous that timed out short of members: the nodes that never logged (those
    with input first; without, at a lower weight), with the configured alternatives."""
    short = [e for e in w.waits if e.type in ("rdzv.timeout", "store.timeout")
             and isinstance(e.attributes.get("joined"), int) and isinstance(e.attributes.get("expected"), int)
             and e.attributes["joined"] < e.attributes["expected"]]
    rdzv = params.get("never_joined") or {}
    if not (short and rdzv):
        return []
    presence = host_presence(info, alloc, events, coverage)
    e0 = min(short, key=lambda e: (e.effective_at, e.event_id))
    missing = e0.attributes["expected"] - e0.attributes["joined"]
    absent = sorted(h for h, p in presence.items() if p["lines"] == 0)
    silent_hosts = [h for h in absent if p_input(presence, h)]
    hosts = silent_hosts if silent_hosts else [h for h in absent if not p_input(presence, h)]
    if not hosts or len(hosts) > missing:
        return []
    weight = float(rdzv.get("weight", 0.6)) if silent_hosts else float(rdzv.get("no_input_weight", 0.4))
    weight = max(weight, w.outweigh)
    ranks = sorted(r for r, (h, _) in alloc.ranks.items() if h in hosts)
    seen = ("logged nothing although its logs were collected" if silent_hosts
            else "has no input source (its logs were not collected)")
    values = dict(hosts=", ".join(hosts), joined=e0.attributes["joined"], expected=e0.attributes["expected"],
                  seen=seen, at=clock(e0.at))
    out = []
    for alt in [rdzv] + list(rdzv.get("alternatives", ())):
        scale = float(alt.get("weight", weight)) / float(rdzv.get("weight", 0.6)) if alt is not rdzv else 1.0
        out.append(Hypothesis(
            code=alt["code"], family="absent", domain=alt.get("domain", "unknown"),
            text=render_text(alt.get("text", alt["code"]), None, **values), job_wide=False,
            extra_ranks=set(ranks), extra_hosts=set(hosts), derived_at=e0.effective_at,
            derived_weight=round(weight * scale, 6)))
    return out


_REPORT_SOURCE = {"desync_report": "PyTorch's desync report", "fr_analysis": "the flight-recorder analysis"}


def lagging_reported(events: Sequence[Event], alloc: Allocation, params: dict) -> dict[int, Event]:
    """Ranks PyTorch's own analysis names as lagging: ``nccl.work_progress`` events of kind
    ``desync_report`` (ProcessGroupNCCL's TORCH_NCCL_DESYNC_DEBUG report) or ``fr_analysis``
    (the flight-recorder analyzer's ``missing ranks``) with ``lagging_ranks``. Returns rank ->
    the earliest report naming it, for ranks of the allocation; empty when the reports name
    more than ``max_silent_fraction`` of the members (at least one): then they point at no
    single culprit."""
    named: dict[int, Event] = {}
    for e in sorted(events, key=lambda x: (x.effective_at, x.event_id)):
        if e.type != "nccl.work_progress" or e.attributes.get("kind") not in _REPORT_SOURCE:
            continue
        for r in e.attributes.get("lagging_ranks") or ():
            if isinstance(r, int) and r in alloc.ranks:
                named.setdefault(r, e)
    limit = max(1, int(len(alloc.ranks) * float(params.get("max_silent_fraction", 0.25))))
    return named if len(named) <= limit else {}


@dataclass(frozen=True)
class WaitScope:
    """The process group a hang began in: ``group`` (its stated membership), ``waits`` (the
    wait events in it, the earliest first)."""

    group: ProcessGroup
    waits: tuple

    def sentence(self, suspects: Sequence[int]) -> str:
        """``rank 13 is the suspect: rank 5 waited on it in PG 3 (size 2, members 5, 13) RECV
        SeqNum 4121``."""
        waiting = sorted({e.rank for e in self.waits})
        first = self.waits[0].attributes
        op = " ".join(p for p in (first.get("op_type"), f"SeqNum {first['seq_num']}" if "seq_num" in first else None) if p)
        who = "rank" if len(suspects) == 1 else "ranks"
        facts = f"size {self.group.size}, members {', '.join(map(str, sorted(self.group.members)))}"
        label = self.group.label
        where = f"{label[:-1]}; {facts})" if label.endswith(")") else f"{label} ({facts})"
        return (f"{who} {', '.join(map(str, suspects))} {'is the suspect' if len(suspects) == 1 else 'are the suspects'}: "
                f"{'rank' if len(waiting) == 1 else 'ranks'} {format_ranks(waiting).replace(',', ', ')} waited on "
                f"{'it' if len(suspects) == 1 else 'them'} in {where}" + (f" {op}" if op else ""))


def wait_scope(waits: Sequence[Event], membership: Membership, alloc: Allocation) -> WaitScope | None:
    """The group whose members the waits are to be judged against, or None (judge against the
    whole allocation, as without membership). Every wait must be placed in a group whose
    members all stated themselves (a re-raised copy of a placed wait of the same rank,
    ``wrapped``, needs no group of its own) and whose members are ranks of the allocation; the
    group of the earliest wait (by ``effective_at``) is where the hang began -- waits in other
    groups began later, behind it. A tie between groups at the earliest time gives None."""
    placed: list[tuple[Event, ProcessGroup]] = []
    loose: list[Event] = []
    for e in waits:
        group = membership.group_of(e) if e.rank is not None else None
        if group is None:
            loose.append(e)
        elif not group.known or not group.members <= set(alloc.ranks) or len(group.members) < 2:
            return None
        else:
            placed.append((e, group))
    if not placed:
        return None
    placed_ranks = {e.rank for e, _ in placed}
    if any(not (e.attributes.get("wrapped") is True and e.rank in placed_ranks) for e in loose):
        return None
    start = min(e.effective_at for e, _ in placed)
    first = {g.key for e, g in placed if e.effective_at == start}
    if len(first) != 1:
        return None
    key = next(iter(first))
    mine = sorted((e for e, g in placed if g.key == key), key=lambda e: (e.effective_at, e.event_id))
    return WaitScope(group=next(g for _, g in placed if g.key == key), waits=tuple(mine))


def p_input(presence: dict, host: str) -> bool:
    return bool(presence.get(host, {}).get("input"))


@detector("roce_gid_index")
def roce_gid_index(info, alloc: Allocation, events: Sequence[Event], hyps: list, params: dict) -> list:
    errors = [
        e
        for e in events
        if e.type == "nccl.ib_completion_error"
        and (e.attributes.get("error_code") == 12 or e.attributes.get("status") == 12)
    ]
    if not errors:
        return []
    fabric_faults = {"fabric.link_down", "fabric.module_event", "nccl.ib_async_event", "fabric.port_errors",
                     # faults the fabric correlator derived (switch-side evidence too)
                     "fabric.port_fault", "fabric.switch_fault", "host.rack_fault"}
    if any(e.type in fabric_faults for e in events):
        return []
    states = [str(e.attributes.get("state", "")).upper() for e in events if e.type == "fabric.port_state"]
    if any("ACTIVE" not in s for s in states):
        return []
    first = min(e.at for e in errors)
    if first - info.start_ns > float(params.get("startup_s", 300)) * 1_000_000_000:
        return []
    hyp = Hypothesis(
        code=params["code"],
        family="config",
        domain=params.get("domain", "config"),
        text=params.get("text", params["code"]),
        job_wide=True,
        derived_weight=float(params.get("weight", 0.8)),
    )
    for e in errors:
        hyp.support.append((float(params.get("weight", 0.8)), "roce_gid_index", e))
    return [hyp]


@detector("gdr_asymmetry")
def gdr_asymmetry(info, alloc: Allocation, events: Sequence[Event], hyps: list, params: dict) -> list:
    by_host: dict[str, list[Event]] = {}
    for e in events:
        if e.type == "nccl.channel_transport" and e.host and isinstance(e.attributes.get("gdr"), bool):
            by_host.setdefault(e.host, []).append(e)
    with_gdr = {h for h, evs in by_host.items() if any(e.attributes["gdr"] for e in evs)}
    without = sorted(h for h, evs in by_host.items() if not any(e.attributes["gdr"] for e in evs))
    if not with_gdr or not without:
        return []
    weight = float(params.get("weight", 0.6))
    hyp = Hypothesis(
        code=params["code"],
        family="config",
        domain=params.get("domain", "config"),
        text=params.get("text", params["code"]).format(hosts=", ".join(without), others=", ".join(sorted(with_gdr))),
        job_wide=False,
    )
    for host in without:
        for e in by_host[host]:
            hyp.support.append((weight, "gdr_asymmetry", e))
    return [hyp]


def is_loopback(peer: str | None) -> bool:
    """True when a peer (``127.0.1.1:3210``, ``[::1]:5000``, ``::ffff:127.0.0.1``, a bare
    address) is a loopback address. A host name (``localhost`` included) is not judged: what
    it resolved to is not in the line."""
    addr = parse_address(peer)
    if addr is None:
        return False
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


@detector("loopback_peer")
def loopback_peer(info, alloc: Allocation, events: Sequence[Event], hyps: list, params: dict) -> list:
    nodes = set(info.nodes) | {h for h, _ in alloc.ranks.values()}
    if len(nodes) < 2:
        return []
    kinds = [dict(k) for k in params.get("when", ())]
    hits = [e for e in events
            if any(e.type == k.get("type") and all(e.attributes.get(a) == v for a, v in k.items() if a != "type")
                   for k in kinds)
            and is_loopback(e.peer)]
    if not hits:
        return []
    weight = float(params.get("weight", 0.8))
    first = min(hits, key=lambda e: (e.at, e.event_id))
    peers = sorted({str(e.peer) for e in hits})
    hyp = Hypothesis(
        code=params["code"],
        family="config",
        domain=params.get("domain", "config"),
        text=render_text(params.get("text", params["code"]), first, peers=", ".join(peers), nodes=len(nodes)),
        job_wide=True,
    )
    for e in hits:
        hyp.support.append((weight, "loopback_peer", e))
    hyp.reasons.append(
        f"{first.host} failed to connect to {', '.join(peers)}, a loopback address, in a job across "
        f"{len(nodes)} nodes: a peer on another node advertised its loopback address")
    return [hyp]


# --------------------------------------------------------------------------- stack dumps


#: how telling a thread's state is, when a rank dumped several threads and none is in a collective
_STACK_ORDER = {"collective": 0, "io": 1, "dataloader": 2, "lock": 3, "other": 4}


def _stack_key(e: Event) -> tuple:
    a = e.attributes
    return (_STACK_ORDER.get(a.get("state"), 9), not a.get("main"), e.at, e.event_id)


def stack_views(events: Sequence[Event]) -> dict[int, Event]:
    """The thread that says where each rank waits, from its ``proc.stack`` events: a thread in
    a collective (the main one first), else the main thread, else its most telling thread
    (I/O, data loader, lock, other). Ranks without a rank number are left out."""
    by_rank: dict[int, list[Event]] = {}
    for e in events:
        if e.type == "proc.stack" and e.rank is not None and e.attributes.get("state") in _STACK_ORDER:
            by_rank.setdefault(e.rank, []).append(e)
    out: dict[int, Event] = {}
    for rank, evs in by_rank.items():
        coll = [e for e in evs if e.attributes.get("state") == "collective"]
        mains = [e for e in evs if e.attributes.get("main")]
        pool = coll or mains or evs
        out[rank] = min(pool, key=_stack_key)
    return out


def _collective_key(e: Event) -> str:
    a = e.attributes
    seq = a.get("seq_num")
    return f"{a.get('op') or '?'}#{seq}" if seq is not None else str(a.get("op") or "?")


def _where(e: Event) -> str:
    a = e.attributes
    if a.get("format") == "flight-recorder":
        last = a.get("last_seq")
        if a.get("state") == "collective":
            return f"in {a.get('profiling_name') or a.get('op')} #{a.get('seq_num')} ({a.get('fr_state')})"
        return (f"between collectives (flight recorder: last {a.get('profiling_name') or a.get('op')} "
                f"#{last} {a.get('fr_state')})")
    frame = a.get("frame") or a.get("function") or "?"
    if a.get("state") == "collective":
        return f"in {a.get('op') or 'a collective'} ({frame})"
    return f"in {a.get('state')} ({frame})"


@detector("stack_outlier")
def stack_outlier(info, alloc: Allocation, events: Sequence[Event], hyps: list, params: dict) -> list:
    """Stack dumps of a hung job (``proc.stack``, issue 33): compare where the ranks wait.

    * **one rank out**: most ranks (at least half of those that dumped) wait in the same
      collective and a few (``max_outlier_fraction``, at least one) do not -- they are in the
      data loader, in I/O, in a lock, computing, in another collective, or (flight recorder)
      between collectives, never having entered the one the others wait in. Those ranks are the
      cause, the domain from where they are (``states``); their frames are the evidence.
    * **all stuck in one place**: no collective holds most ranks, and nearly all of them
      (all but ``max_outlier_fraction``) wait in the same non-collective frame (a shared storage
      read, a lock, the data loader): that frame is the cause, job-wide (``shared``).
    * ranks all in the same collective (or spread without a pattern) give nothing: the stacks
      then name no rank.

    The cause is dated at the earliest back-dated wait of the job (a watchdog timeout's stall
    start) when there is one, else at the dumps: the dumps show where a rank *is*, the waits
    when the others began to wait on it."""
    views = stack_views(events)
    if len(views) < int(params.get("min_ranks", 2)):
        return []
    ranks = sorted(views)
    members = set(alloc.ranks) if alloc.ranks else set(ranks)
    unseen = sorted(members - set(ranks))
    limit = max(1, int(len(ranks) * float(params.get("max_outlier_fraction", 0.25))))
    weight = float(params.get("weight", 0.8))
    if unseen:
        weight *= float(params.get("partial_factor", 0.85))
    waits = [e for e in events if e.type in params.get("wait_types", ())]
    began = min((e.effective_at for e in waits), default=None)
    fmt = ", ".join(sorted({str(views[r].attributes.get("format")) for r in ranks}))
    seen = (f"{len(ranks)} of {len(members)} ranks dumped their stacks ({fmt})" if unseen
            else f"all {len(ranks)} ranks dumped their stacks ({fmt})")

    in_coll = {r: _collective_key(views[r]) for r in ranks if views[r].attributes.get("state") == "collective"}
    if in_coll:
        counts: dict[str, int] = {}
        for key in in_coll.values():
            counts[key] = counts.get(key, 0) + 1
        top, n_top = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if n_top * 2 < len(ranks) or n_top < 2:
            return []
        outliers = [r for r in ranks if in_coll.get(r) != top]
        if not outliers or len(outliers) > limit:
            return []
        states = [views[r].attributes.get("state") for r in outliers]
        state = min(set(states), key=lambda s: (-states.count(s), _STACK_ORDER.get(s, 9)))
        spec = dict((params.get("states") or {}).get(state) or (params.get("states") or {}).get("other") or {})
        waiting = [r for r in ranks if in_coll.get(r) == top]
        hosts = sorted({views[r].host for r in outliers})
        first = views[outliers[0]]
        op = views[waiting[0]].attributes.get("op") or "a collective"
        how = "; ".join(f"rank {r} on {views[r].host} {_where(views[r])}" for r in outliers)
        text = render_text(spec.get("text", params.get("text", "{ranks}")), first,
                           ranks=", ".join(map(str, outliers)), hosts=", ".join(hosts), op=op,
                           waiting=format_ranks(waiting).replace(",", ", "), how=how)
        hyp = Hypothesis(code=spec.get("code", "dist.stalled_rank.stack"), family="stall",
                         domain=spec.get("domain", "unknown"), text=text, job_wide=False,
                         extra_ranks=set(outliers), extra_hosts=set(hosts),
                         derived_at=began if began is not None and began < first.at else None)
        for r in outliers:
            hyp.support.append((weight, "stack_outlier", views[r]))
        frames = views[outliers[0]].attributes.get("frames") or []
        hyp.reasons.append(
            f"{seen}: rank(s) {format_ranks(waiting).replace(',', ', ')} wait in {op} ({top}); "
            f"{how}" + (f"; its innermost frames: {' <- '.join(map(str, frames[:5]))}" if frames else ""))
        if unseen:
            hyp.reasons.append(f"rank(s) {format_ranks(unseen).replace(',', ', ')} dumped no stack: "
                               "one of them may be elsewhere too")
        return [hyp]

    # no collective holds the ranks: one frame they all wait in
    sigs: dict[str, list[int]] = {}
    for r in ranks:
        a = views[r].attributes
        if a.get("state") in ("io", "dataloader", "lock"):
            sigs.setdefault(str(a.get("signature")), []).append(r)
    if not sigs:
        return []
    sig, same = min(sigs.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    if len(ranks) - len(same) > (limit if len(ranks) > 4 else 0) or len(same) < 2:
        return []
    first = views[same[0]]
    state = str(first.attributes.get("state"))
    spec = dict((params.get("shared") or {}).get(state) or {})
    if not spec:
        return []
    w = float(params.get("shared_weight", 0.6)) * (float(params.get("partial_factor", 0.85)) if unseen else 1.0)
    frame = first.attributes.get("frame") or first.attributes.get("function") or "?"
    text = render_text(spec.get("text", "{frame}"), first, frame=frame, n=len(same), m=len(ranks),
                       file=first.attributes.get("file", "?"))
    hyp = Hypothesis(code=spec.get("code", f"dist.shared_stall.stack.{state}"), family="stall",
                     domain=spec.get("domain", "unknown"), text=text, job_wide=True,
                     derived_at=began if began is not None and began < first.at else None)
    for r in same:
        # the frames are the evidence, the ranks are not culprits: a shared resource stalled
        hyp.support.append((w, "stack_shared", views[r].model_copy(update={"rank": None})))
    hyp.reasons.append(f"{seen}: {len(same)} of them wait in the same place, {state} in {frame}, and none in a "
                       "collective: a resource they share stalled, not one rank")
    return [hyp]


# --- host memory behind a SIGKILL (issue 33 item 2) --------------------------------------------


def _memory_reading(e: Event, params: dict, meminfo_total: dict) -> tuple[str, float, str] | None:
    """(kind, weight, what it says) when a ``host.memory_pressure`` reading is high by the
    detector's thresholds, else None. ``meminfo_total``: (host, file) -> [(line, MemTotal
    bytes)] to pair a MemAvailable line with the nearest MemTotal of its file."""
    a = e.attributes
    w = params.get("weights", {})
    src = a.get("source")
    if src == "psi":
        worst = max(float(a.get("avg10") or 0.0), float(a.get("avg60") or 0.0))
        kind = a.get("kind")
        if kind == "full" and worst >= float(params.get("psi_full_pct", 10)):
            return "psi_full", float(w.get("psi_full", 0.55)), f"PSI memory full avg10={a.get('avg10')} avg60={a.get('avg60')}"
        if kind == "some" and worst >= float(params.get("psi_some_pct", 40)):
            return "psi_some", float(w.get("psi_some", 0.4)), f"PSI memory some avg10={a.get('avg10')} avg60={a.get('avg60')}"
        return None
    if a.get("cumulative"):
        def n(key: str) -> int:
            v = a.get(key)
            return v if isinstance(v, int) else 0
        if n("oom_kill") > 0 or n("oom_group_kill") > 0:
            return "oom_kill_count", float(w.get("oom_kill_count", 0.6)), f"{src} oom_kill={n('oom_kill')} (OOM kills counted)"
        if n("oom") > 0 or n("under_oom") > 0:
            return "oom_count", float(w.get("oom_count", 0.5)), f"{src} oom={n('oom')} under_oom={n('under_oom')}"
        if n("max") > 0 or n("failcnt") > 0:
            return "limit_hits", float(w.get("limit_hits", 0.35)), f"{src} max={n('max')} failcnt={n('failcnt')} (memory limit reached)"
        return None
    if a.get("at_limit") is True:
        return "used", float(w.get("used", 0.45)), f"{src}: available memory at its {a.get('limit', 'kill')} limit"
    used = a.get("used_pct")
    if isinstance(a.get("available_pct"), (int, float)):
        used = 100.0 - float(a["available_pct"])
    avail = a.get("mem_available_bytes")
    if isinstance(avail, int):
        ref = e.evidence[0].position if e.evidence else None
        key = (e.host, ref.file if ref else None)
        line = ref.line if ref and ref.line is not None else 0
        totals = meminfo_total.get(key, [])
        if totals:
            _, total = min(totals, key=lambda t: (abs(t[0] - line), t[0]))
            if total > 0:
                used = 100.0 * (1.0 - avail / total)
    if isinstance(used, (int, float)) and used >= float(params.get("used_pct", 90)):
        return "used", float(w.get("used", 0.45)), f"{src} memory {used:.1f}% used"
    return None


def _k8s_memory(e: Event) -> bool:
    a = e.attributes
    if e.type == "k8s.node_condition":
        return a.get("condition") == "MemoryPressure" and a.get("status", "True") == "True"
    return e.type in ("k8s.event", "k8s.pod_terminated") and a.get("reason") == "Evicted" and a.get("resource") == "memory"


@detector("sigkill_memory_pressure")
def sigkill_memory_pressure(info, alloc: Allocation, events: Sequence[Event], hyps: list, params: dict) -> list:
    """A rank killed by SIGKILL with no line naming the sender (``proc.killed.sigkill``) on a
    host whose memory was under high pressure shortly before is a probable host OOM: the
    kernel's or a user-space OOM killer (systemd-oomd, earlyoom, the kubelet, Slurm's cgroup)
    sent it, and its own line is missing (dmesg not collected, a user-space killer).

    Evidence on the killed rank's host (``host.memory_pressure`` readings, judged here by
    ``causal.yaml`` thresholds; the kubelet's MemoryPressure condition or a memory eviction):
    a level reading (PSI, a trainer's psutil percent, ``free``, meminfo) within ``lead_s``
    before the kill (or ``after_s`` after it); a cumulative cgroup counter (``oom_kill``,
    ``oom``/``under_oom``, ``max``/``failcnt``) from ``lead_s`` before the kill to the end of
    the window (a snapshot taken after the job still counts the kill). The evidence joins the
    SIGKILL hypothesis, which is renamed ``code`` (domain host) and keeps the plain SIGKILL as
    its alternative (a kill from the launcher, the scheduler or a user): probable at best.
    Without such evidence, or with a kernel OOM-killer line on the host (that line decides by
    itself), nothing changes."""
    codes = set(params.get("applies_to", ("proc.killed.sigkill",)))
    lead = int(float(params.get("lead_s", 600)) * 1_000_000_000)
    after = int(float(params.get("after_s", 60)) * 1_000_000_000)
    oom_hosts = {e.host for e in events if e.type == "host.oom_kill"}
    meminfo_total: dict = {}
    for e in events:
        if e.type == "host.memory_pressure" and isinstance(e.attributes.get("mem_total_bytes"), int):
            pos = e.evidence[0].position if e.evidence else None
            meminfo_total.setdefault((e.host, pos.file if pos else None), []).append(
                ((pos.line or 0) if pos else 0, e.attributes["mem_total_bytes"]))
    readings = [e for e in events if e.type == "host.memory_pressure" or _k8s_memory(e)]
    if not readings:
        return []
    for hyp in hyps:
        if hyp.code not in codes or not hyp.support:
            continue
        kills: dict[str, int] = {}
        for e in hyp.events:
            if e.host and e.host != "_scheduler" and e.host not in oom_hosts:
                kills[e.host] = min(kills.get(e.host, e.at), e.at)
        found: list[tuple[float, str, Event, str]] = []
        for e in sorted(readings, key=lambda x: (x.at, x.event_id)):
            killed_at = kills.get(e.host)
            if killed_at is None:
                continue
            if _k8s_memory(e):
                judged = ("k8s", float(params.get("weights", {}).get("k8s", 0.5)), "kubelet: memory pressure / eviction")
            else:
                judged = _memory_reading(e, params, meminfo_total)
            if judged is None:
                continue
            kind, weight, what = judged
            cumulative = bool(e.attributes.get("cumulative"))
            if e.at < killed_at - lead or (not cumulative and e.at > killed_at + after):
                continue
            found.append((weight, kind, e, what))
        if not found:
            continue
        # per host and kind, the reading nearest the kill: the cause is dated by the kill and
        # the last reading before it, not by the first of a long series
        nearest: dict[tuple[str, str], tuple[float, str, Event, str]] = {}
        for f in found:
            key = (f[2].host, f[1])
            held = nearest.get(key)
            if held is None or (abs(f[2].at - kills[f[2].host]), -f[0]) < (abs(held[2].at - kills[f[2].host]), -held[0]):
                nearest[key] = f
        found = [nearest[k] for k in sorted(nearest)]
        hosts = sorted({e.host for _, _, e, _ in found})
        before = hyp.strength
        alt_text = hyp.text
        for weight, kind, e, _ in found:
            # a reading is of the host, not of the rank that printed it (DeepSpeed logs from rank 0)
            hyp.support.append((weight, f"sigkill_memory_pressure:{kind}",
                                e if e.rank is None else e.model_copy(update={"rank": None})))
        first = min(found, key=lambda f: (-f[0], f[2].at, f[2].event_id))
        kill = min((e for e in hyp.events if e.host in hosts and e.type != "host.memory_pressure"
                    and not _k8s_memory(e)), key=lambda e: (e.at, e.event_id))
        hyp.code = params["code"]
        hyp.domain = params.get("domain", "host")
        hyp.text = render_text(params.get("text", params["code"]), kill, hosts=", ".join(hosts),
                               evidence=first[3])
        strongest = {}
        for weight, kind, e, what in found:
            if weight > strongest.get(kind, (0.0, ""))[0]:
                strongest[kind] = (weight, what)
        hyp.reasons.append(
            f"no line names who sent the SIGKILL; memory on {', '.join(hosts)} was under pressure around the "
            f"kill ({'; '.join(w for _, w in sorted(strongest.values(), key=lambda x: -x[0]))}): "
            "most likely an OOM killer whose own line is missing")
        alt = params.get("alternative", {})
        hyp.side_alternatives.append((
            alt.get("code", "proc.killed.sigkill"), alt.get("domain", "unknown"),
            render_text(alt.get("text", alt_text), kill), round(before, 4),
            tuple(sorted(hyp.hosts)), tuple(sorted(hypothesis_ranks(hyp)))))
    return []


#: Completion-error event types a GID table change can explain (NCCL's and rdma-core's).
_COMPLETION_TYPES = ("nccl.ib_completion_error", "rdma.completion_error")
#: Per-host link/port faults that rewrite the GID table themselves (then the fault is the cause).
_PORT_FAULTS = ("fabric.link_down", "fabric.module_event", "nccl.ib_async_event", "fabric.port_fault",
                "fabric.switch_fault", "host.rack_fault")


def _is_gid_change(e: Event) -> bool:
    return (e.type == "nccl.warn" and e.attributes.get("kind") == "ib_async_info"
            and e.attributes.get("event") == "GID table change")


@detector("gid_change")
def gid_change(info, alloc: Allocation, events: Sequence[Event], hyps: list, params: dict) -> list:
    """A GID table change on a host followed within ``window_s`` by completion errors on that
    host (issue 33): the addressing changed under the job -> a config cause on that host.
    Nothing when the host shows a link/port fault, or a port state other than ACTIVE."""
    window = int(float(params.get("window_s", 300)) * 1_000_000_000)
    weight = float(params.get("weight", 0.75))
    changes: dict[str, list[Event]] = {}
    for e in events:
        if _is_gid_change(e) and e.host:
            changes.setdefault(e.host, []).append(e)
    out = []
    for host in sorted(changes):
        if any(e.host == host and (e.type in _PORT_FAULTS or (
                e.type == "fabric.port_state" and "ACTIVE" not in str(e.attributes.get("state", "")).upper()))
               for e in events):
            continue
        firsts = sorted(changes[host], key=lambda e: (e.at, e.event_id))
        errors = [e for e in events if e.type in _COMPLETION_TYPES and e.host == host
                  and any(0 <= e.at - c.at <= window for c in firsts)]
        if not errors:
            continue
        first_err = min(e.at for e in errors)
        change = max((c for c in firsts if c.at <= first_err), key=lambda c: (c.at, c.event_id))
        hyp = Hypothesis(
            code=params["code"],
            family="config",
            domain=params.get("domain", "config"),
            text=render_text(params.get("text", params["code"]), change, at=clock(change.at), n=len(errors),
                             window=int(window // 1_000_000_000)),
            job_wide=False,
        )
        hyp.support.append((weight, "gid_change", change))
        hyp.reasons.append(
            f"{len(errors)} completion error(s) on {host} from {clock(first_err)}, within "
            f"{int(window // 1_000_000_000)} s after its GID table changed at {clock(change.at)}, with no link or port fault there")
        out.append(hyp)
    return out
