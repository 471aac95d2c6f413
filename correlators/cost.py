"""What a failure cost: goodput lost, from facts in a verdict's window (:class:`schemas.records.Cost`).

A workload verdict's cost runs from its cause's back-dated time (a watchdog timeout is dated by
its "ran for" back to when the collective stalled, :class:`correlators.attribution`) to the
job's end, or to the window's end while the job still hangs; the GPUs are the workload's rank
map (one GPU per rank). A fabric or incident verdict sums the hours of the workload verdicts it
links. Pure: no clock, no I/O; every figure is rounded to 4 decimals so the same events give the
same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from correlators.enrich import Allocation
from schemas.records import Attribution, Cost, Event

__all__ = ["incident_cost", "workload_cost"]

_NS = 1_000_000_000


def _s(ns: int) -> float:
    return round(max(ns, 0) / _NS, 4)


def _hours(units: int, seconds: float) -> float:
    return round(units * seconds / 3600.0, 4)


def workload_cost(*, cause_at: int, end_ns: int | None, decided_at: int, nodes: Sequence[str],
                  alloc: Allocation, symptoms: Iterable[Event], culprit_hosts: Iterable[str],
                  goodput: Any = None) -> Cost:
    """The cost of one workload attempt's failure: ``cause_at`` the cause's back-dated time,
    ``end_ns`` the job's end (None: still running or hung; then ``decided_at``, the window
    end, bounds it), ``nodes`` its allocation, ``alloc`` its rank map (GPUs = ranks), the
    verdict's ``symptoms`` (the first one logged at or after the cause is when it was
    noticed) and ``culprit_hosts``. Times UTC ns.

    ``goodput`` (a :class:`correlators.stragglers.Goodput`, for a job that runs slow rather
    than failing): the job lost only ``goodput.fraction`` of its speed from ``goodput.since``,
    so the hours lost are that fraction of the GPU- and node-hours (``goodput_lost_fraction``,
    ``gpu_hours_lost_per_hour`` = GPUs x fraction, and the healthy / observed step times when
    known)."""
    fraction = None
    if goodput is not None:
        cause_at, fraction = goodput.since, min(1.0, max(0.0, float(goodput.fraction)))
    until = max(end_ns if end_ns is not None else decided_at, cause_at)
    lost_s = _s(until - cause_at)
    gpus = len(alloc.ranks) or None
    share = 1.0 if fraction is None else fraction
    symptoms = list(symptoms)
    seen = [e.at for e in symptoms if e.at >= cause_at]
    if end_ns is not None and end_ns >= cause_at:
        seen.append(end_ns)
    noticed = min(seen) if seen else None
    hit = {e.host for e in symptoms if e.host != "_scheduler"} | set(culprit_hosts)
    return Cost(
        lost_from=cause_at, lost_until=until, lost_s=lost_s,
        gpus=gpus, nodes=len(nodes),
        gpu_hours_lost=round(_hours(gpus, lost_s) * share, 4) if gpus else None,
        node_hours_lost=round(_hours(len(nodes), lost_s) * share, 4),
        noticed_at=noticed, ran_after_cause_s=_s(noticed - cause_at) if noticed is not None else None,
        verdict_after_s=_s(max(decided_at - cause_at, 0)),
        jobs_hit=1, nodes_hit=len(hit & set(nodes)) or len(hit),
        goodput_lost_fraction=None if fraction is None else round(fraction, 4),
        gpu_hours_lost_per_hour=round(gpus * fraction, 4) if fraction is not None and gpus else None,
        healthy_step_s=getattr(goodput, "healthy_s", None),
        observed_step_s=getattr(goodput, "observed_s", None),
    )


def incident_cost(*, first_at: int, decided_at: int, linked: Sequence[Attribution],
                  hosts: Iterable[str]) -> Cost:
    """The cost of a fabric fault: from its first evidence (``first_at``) over the workload
    verdicts it ``linked`` (their hours summed; GPUs and GPU-hours only when every linked
    verdict knows its GPUs, else None), ``hosts`` the hosts it reached (culprits and
    victims). Without a linked workload no job lost anything: zero hours."""
    costs = [v.cost for v in linked if v.cost is not None]
    until = max([c.lost_until for c in costs] + [first_at])
    known = all(c.gpus is not None for c in costs)
    noticed = min((c.noticed_at for c in costs if c.noticed_at is not None), default=None)
    return Cost(
        lost_from=first_at, lost_until=until, lost_s=_s(until - first_at),
        gpus=sum(c.gpus or 0 for c in costs) if known and costs else None,
        nodes=sum(c.nodes for c in costs),
        gpu_hours_lost=round(sum(c.gpu_hours_lost or 0.0 for c in costs), 4) if known else None,
        node_hours_lost=round(sum(c.node_hours_lost for c in costs), 4),
        noticed_at=noticed,
        ran_after_cause_s=_s(noticed - first_at) if noticed is not None else None,
        verdict_after_s=_s(decided_at - first_at),
        jobs_hit=len(linked), nodes_hit=len(set(hosts)),
    )
