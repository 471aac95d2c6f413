"""Repetition and history of application-class XIDs, and GPU-count signals. Pure functions over events; ``correlators.attribution.decide`` calls them.

**Repetition.** NVIDIA's XID catalog sends XID 13 and 31 (``WORKFLOW_XID_13`` /
``WORKFLOW_XID_31``) to the application unless they repeat on the same GPU, and then to DCGM
diagnostics; NVSentinel's escalation reads it as "XID 31 twice on the same GPU in 24 hours:
run diagnostics; on different GPUs: an application bug". So, per XID code listed in
``causal.yaml`` ``repetition.xids`` and per GPU (host + PCI bus id, or index):

* the *occurrences* are the distinct processes that logged it within ``window_s`` before this
  job's own XID (up to the decision window's end): ``(workload, pid)`` for lines naming a pid;
  the lines of a workload that name no pid count as one process of that workload only when
  none of its lines names one (the driver prints ``pid=`` on one line of a burst);
* when this job logged the code on that GPU and the occurrences reach ``min_processes``, the
  job's XIDs become ``gpu.xid.<N>.repeated`` (domain ``gpu_hardware``) and the application
  hypothesis it absorbs is listed as an alternative;
* when the same code hit every GPU the node is known to have (at least two) within
  ``node_wide_s`` of the job's XID, the repetition says nothing about one GPU: no shift, and
  the driver is named as an alternative of an application verdict (the other way).

``history`` (events of earlier jobs on the same nodes: a bundle's ``workloads/``, a stream's
stored events) only feeds the occurrence count; it is never a cause or a symptom.

**GPU count** (``classify: gpu_count`` in causal.yaml): a node that reports none of its GPUs
(``allocatable 0 of 8``, ``gres/gpu count reported lower than configured (0 < 8)``) is a
driver or configuration signal -- the driver did not load, the device plugin or gres.conf does
not see the devices -- not eight broken GPUs; one fewer is a hardware signal on that GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from correlators.enrich import Allocation
from correlators.ids import normalise_pci
from correlators.timetext import NS
from schemas.records import Event


#: Defaults when causal.yaml has no ``repetition`` block (the packaged file has one).
DEFAULT_REPETITION: dict[str, Any] = {
    "xids": [13, 31, 43],
    "window_s": 86400,
    "min_processes": 2,
    "weight": 0.8,
    "weight_step": 0.05,
    "max_weight": 0.95,
    "node_wide_s": 60,
    "driver_alternative_weight": 0.5,
}


def gpu_key(event: Event, alloc: Allocation) -> tuple[str, str] | None:
    """(host, GPU) of an event: the GPU index when it is known (own or through the PCI table),
    else the normalised PCI bus id, else the UUID; None without a GPU."""
    if event.gpu is None:
        return None
    index = alloc.gpu_index(event.host, event.gpu)
    if index is not None:
        return event.host, f"#{index}"
    pci = normalise_pci(event.gpu.pci_bus_id)
    if pci:
        return event.host, pci
    return (event.host, event.gpu.uuid) if event.gpu.uuid else None


def known_gpus(host: str, alloc: Allocation, events: Iterable[Event]) -> set[str]:
    """The GPUs a host is known to have: the PCI table, the ranks' GPU indexes, and every GPU
    an event of that host names (keys as :func:`gpu_key`)."""
    out = {f"#{i}" for (h, _), i in alloc.gpus.items() if h == host}
    out |= {f"#{g}" for h, g in alloc.ranks.values() if h == host and g is not None}
    for event in events:
        if event.host == host:
            key = gpu_key(event, alloc)
            if key:
                out.add(key[1])
    return out


@dataclass(frozen=True)
class Repetition:
    """The finding for one (host, GPU, XID code) this job logged.

    ``processes`` are the distinct processes that logged the code on the GPU in the history
    window, as sorted labels (``job-1 pid 417``); ``node_wide`` is True when the code hit every
    known GPU of the node at once (then ``gpus_hit`` lists them); ``own`` are this job's XID
    events of that code on that GPU; ``earlier`` the other occurrences' events."""

    host: str
    gpu: str
    xid: int
    processes: tuple[str, ...]
    own: tuple[Event, ...]
    earlier: tuple[Event, ...]
    node_wide: bool = False
    gpus_hit: tuple[str, ...] = ()

    def repeated(self, params: dict[str, Any]) -> bool:
        return not self.node_wide and len(self.processes) >= int(params["min_processes"])

    def weight(self, params: dict[str, Any]) -> float:
        extra = max(0, len(self.processes) - int(params["min_processes"]))
        return round(min(float(params["max_weight"]),
                         float(params["weight"]) + extra * float(params["weight_step"])), 6)


def _process_labels(events: Sequence[Event]) -> list[str]:
    by_workload: dict[str, set[str]] = {}
    for event in events:
        wid = event.workload_id or "-"
        pid = event.attributes.get("pid")
        by_workload.setdefault(wid, set())
        if isinstance(pid, int):
            by_workload[wid].add(f"pid {pid}")
    labels = []
    for wid in sorted(by_workload):
        pids = by_workload[wid] or {"pid ?"}
        labels += [f"{wid} {p}" for p in sorted(pids)]
    return labels


def find_repetitions(
    ordered: Sequence[Event],
    history: Sequence[Event],
    *,
    workload_id: str,
    start_ns: int,
    end_ns: int | None,
    skew_ns: int,
    alloc: Allocation,
    params: dict[str, Any],
) -> list[Repetition]:
    """Every (host, GPU, code) of ``params['xids']`` that this job logged (from its start to
    its end plus the skew), with the processes that logged the code on that GPU within
    ``window_s`` before it (later programs are not evidence). Sorted by host, GPU, code. Deterministic: a function of the sets."""
    codes = {int(x) for x in params["xids"]}
    window_ns = int(float(params["window_s"]) * NS)
    node_wide_ns = int(float(params["node_wide_s"]) * NS)
    xids = [e for e in list(ordered) + list(history)
            if e.type == "gpu.xid" and e.attributes.get("xid") in codes]
    seen: dict[str, Event] = {e.event_id: e for e in xids}
    xids = sorted(seen.values(), key=lambda e: (e.at, e.event_id))
    # before the start a host's lines belong to earlier processes (as in ``propose``)
    hi = end_ns + skew_ns if end_ns is not None else None
    own_ids = {e.event_id for e in ordered
               if e.type == "gpu.xid" and e.attributes.get("xid") in codes and e.at >= start_ns
               and (hi is None or e.at <= hi)}
    groups: dict[tuple[str, str, int], list[Event]] = {}
    for event in xids:
        key = gpu_key(event, alloc)
        if key is not None:
            groups.setdefault((key[0], key[1], event.attributes["xid"]), []).append(event)
    out = []
    for (host, gpu, code) in sorted(groups):
        group = groups[(host, gpu, code)]
        own = [e for e in group if e.event_id in own_ids]
        if not own:
            continue
        first = min(e.at for e in own)
        # earlier processes only: a later program's fault is not evidence this job had
        earlier = [e for e in group if e.event_id not in own_ids and first - window_ns <= e.at <= first]
        # the same code on every GPU of the node at once: not one GPU's fault
        hit = sorted({g for (h, g, c), evs in groups.items() if h == host and c == code
                      and any(abs(e.at - first) <= node_wide_ns for e in evs)})
        # "every GPU" needs the node's GPUs from the allocation or telemetry, not only the
        # GPUs the lines name (two of eight hit would look like all of them)
        known = known_gpus(host, alloc, ())
        node_wide = len(hit) >= 2 and bool(known) and set(hit) >= known
        # this job's lines are one process unless they name several pids
        own_labels = _process_labels([e.model_copy(update={"workload_id": workload_id}) for e in own])
        labels = sorted(set(own_labels) | set(_process_labels(earlier)))
        out.append(Repetition(host=host, gpu=gpu, xid=code, processes=tuple(labels), own=tuple(own),
                              earlier=tuple(earlier), node_wide=node_wide,
                              gpus_hit=tuple(hit) if node_wide else ()))
    return out


# --- GPU count ---------------------------------------------------------------------------------


def classify_gpu_count(event: Event, params: dict[str, Any]) -> tuple[str, str, str, float, str]:
    """(code, family, domain, weight, text) of a GPU-count event (``k8s.gpu_capacity``:
    capacity / allocatable; ``sched.node_state`` gres_low: configured / reported).

    None of the node's GPUs seen -> ``params['none']`` (driver / configuration); one fewer ->
    ``params['one_fewer']`` (that GPU's hardware); several fewer, but not all ->
    ``params['several']``. Each entry gives code, family, domain, weight, text with
    ``{host} {have} {want} {missing} {resource}`` placeholders, and ``by_type`` overrides per
    event type (the Slurm drain keeps its own code)."""
    a = event.attributes
    want = a.get("capacity", a.get("configured"))
    have = a.get("allocatable", a.get("reported"))
    if not isinstance(want, int) or not isinstance(have, int):
        case = "one_fewer"
        missing = a.get("missing")
    else:
        missing = max(0, want - have)
        case = "none" if have == 0 and want > 0 else ("one_fewer" if missing <= 1 else "several")
    entry = dict(params[case])
    entry.update(entry.pop("by_type", {}).get(event.type, {}))
    values = {"host": a.get("node") or event.host, "have": have, "want": want, "missing": missing,
              "resource": a.get("resource") or a.get("gres") or "gpu"}
    text = str(entry["text"]).format(**{k: ("?" if v is None else v) for k, v in values.items()})
    return (str(entry["code"]), str(entry.get("family", "gpu")), str(entry["domain"]),
            float(entry["weight"]), text)
