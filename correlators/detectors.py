"""Detectors: causes that are patterns over many events rather than one line.

Each detector is registered under the id its ``detectors`` entry in ``causal.yaml`` uses and
reads its parameters from there. A detector returns hypotheses, or folds its finding into an
existing hypothesis that it corroborates.

* ``stalled_rank`` -- when every rank but a few logs a PyTorch NCCL watchdog timeout, the
  silent ranks are the ones that stalled: they never entered the collective the others wait
  for. torchrun's "Root Cause (first observed failure)" names whichever rank *exited* first,
  which is one of the waiting ranks in that case (PyTorch elastic docs; seen in the wild).
  When a hardware/host hypothesis already names a silent rank's host, the silent ranks become
  its culprit ranks instead of a rival cause.
* ``roce_gid_index`` -- NET/IB completion error 12 (transport retry counter exceeded) from the
  first connections of a job, with no link-down, module or async port event and ports read
  as ACTIVE, is the RoCE GID index misconfiguration (NCCL issue #426), not the fabric.
* ``gdr_asymmetry`` -- NCCL's channel lines (``... via NET/IB/0/GDRDMA``) say per connection
  whether the local side uses GPUDirect RDMA. When some hosts of a job use it and others never
  do, those others lack the GPUDirect path (nvidia-peermem not loaded, or dma-buf unsupported):
  a configuration fault that costs bandwidth, not a fabric fault (NCCL issue #897,
  transport/net.cc prints the suffix from the local ``useGdr``).
"""

from __future__ import annotations

from typing import Callable, Sequence

from correlators.enrich import Allocation
from schemas.records import Event

Detector = Callable[..., list]
_REGISTRY: dict[str, Detector] = {}


def detector(name: str) -> Callable[[Detector], Detector]:
    """Register a detector function under ``name``."""

    def wrap(fn: Detector) -> Detector:
        _REGISTRY[name] = fn
        return fn

    return wrap


def run_detectors(info, alloc: Allocation, events: Sequence[Event], hyps: list, rules) -> list:
    """Run every detector configured in the causal rules; returns new hypotheses."""
    out = []
    for name in sorted(rules.detectors):
        fn = _REGISTRY.get(name)
        if fn is None:
            raise KeyError(f"causal.yaml names detector {name!r}, which no code registers")
        out.extend(fn(info, alloc, events, hyps, rules.detectors[name]))
    return out


@detector("stalled_rank")
def stalled_rank(info, alloc: Allocation, events: Sequence[Event], hyps: list, params: dict) -> list:
    from correlators.attribution import Hypothesis, _render

    all_ranks = set(alloc.ranks)
    timeouts = [e for e in events if e.type == "nccl.watchdog_timeout" and e.rank is not None]
    timed_out = {e.rank for e in timeouts}
    if len(all_ranks) < 2 or not timed_out:
        return []
    silent = sorted(all_ranks - timed_out)
    limit = max(1, int(len(all_ranks) * float(params.get("max_silent_fraction", 0.25))))
    if not silent or len(silent) > limit or len(timed_out) < len(all_ranks) / 2:
        return []
    silent_hosts = {alloc.ranks[r][0] for r in silent}
    began = min(e.effective_at for e in timeouts)
    # corroboration: a strong cause on the silent ranks' host(s) gets them as culprit ranks
    for hyp in hyps:
        if hyp.family in ("gpu", "host", "killed", "app", "fabric") and silent_hosts <= hyp.hosts:
            if hyp.strength >= float(params.get("weight", 0.6)):
                hyp.extra_ranks |= set(silent)
                return []
    hosts = sorted(silent_hosts)
    hyp = Hypothesis(
        code=params["code"],
        family="stall",
        domain=params.get("domain", "unknown"),
        text=_render(params.get("text", params["code"]), None, ranks=", ".join(map(str, silent)), hosts=", ".join(hosts)),
        job_wide=False,
        extra_ranks=set(silent),
        extra_hosts=set(hosts),
        derived_at=began,
        derived_weight=float(params.get("weight", 0.6)),
    )
    return [hyp]


@detector("roce_gid_index")
def roce_gid_index(info, alloc: Allocation, events: Sequence[Event], hyps: list, params: dict) -> list:
    from correlators.attribution import Hypothesis

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
    from correlators.attribution import Hypothesis

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
