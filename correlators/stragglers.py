"""Stragglers: the rank, GPU or node that slows a whole synchronous job, found by comparing the
job's ranks with each other, and the reason it is slow.

The ranks of one data-parallel job do the same work each step, so the job is its own baseline
(no per-model threshold). Inputs are the ``perf.*`` events of :mod:`correlators.rules` (``perf.yaml``):

* per-rank times (``perf.step_time`` / ``perf.throughput`` with a rank: Megatron's per-rank
  timers, DeepSpeed's ``[Rank N]`` timers, torchtitan or tqdm lines under torchrun's
  ``[rankN]:`` prefix); a rate becomes seconds per unit (``1 / rate``). The series of one
  (framework, metric) with the most ranks is compared, step by step (a sample without a step
  number is placed by its time, to the second). A series of fewer than ``min_ranks`` ranks (the
  iteration line the last rank prints for the whole job) is the job's own speed: it gives the
  goodput figures, never a culprit;
* NVIDIA Resiliency Extension reports: per-rank scores (``perf.gpu_score``, 1.0 the best) and
  its warnings naming ranks (``perf.straggler_reported``).

Detection (:class:`PeerTracker`, pure and clock-free, numpy over the ranks of one step):

1. each step, every rank's time is divided by the median over the ranks of that step, so what
   slows every rank alike (a checkpoint, a shared storage stall, the data loader of every rank,
   jitter of the whole job) cancels out;
2. each rank's ratio is smoothed by the median of its last ``window_steps`` steps, so a hiccup
   of one step (a data-loader fetch, a GC pause) never counts;
3. a rank is an outlier at a step when its smoothed ratio is at least ``min_slowdown`` above
   the median of the ranks' and at least ``min_z`` robust standard deviations (1.4826 x the MAD
   of the smoothed ratios over the ranks) above it -- slow against its peers all along (a link
   trained down at boot) -- or when it is ``change_slowdown`` above its own level before
   (an exponential average, ``baseline_alpha``, of its smoothed ratios that left the window)
   and ``change_peer`` above the median: a rank that became slow. The second test cancels the
   GPU-to-GPU spread of a healthy job (a GPU 3 % slower than the others from the start is not
   a straggler), so it fires on smaller changes;
4. it is a straggler once it has been an outlier for ``persist_steps`` consecutive steps;
   its slowdown is the median of its ratios over those steps, minus 1;
5. when at least ``node_share`` of a node's ranks are stragglers together (and the node has
   two ranks or more in the series), the node is the straggler (a host cause), not its GPUs;
6. the change point -- since when the rank is slow -- is the split of its ratio series that
   maximises the CUSUM statistic ``|S_k - k * mean|`` (one change in mean), taken only where the
   later segment is the slower one; a rank slow from its first step is slow since then.

NVRx: a rank whose score is at or below ``score_threshold`` in ``persist_reports`` reports in a
row, or that ``persist_reports`` warnings name, is a straggler; its slowdown is ``1 / score - 1``.

Attribution (:func:`attribute`): the evidence on the straggler's GPU, host or port from
``lead_s`` before it became slow to the end of the window names the reason -- thermal or power
slowdown flags, a PCIe link trained down or replaying, NVLink errors, uncorrectable ECC / row
remapping, port error counters of its HCA, host memory pressure (the
``sigkill_memory_pressure`` thresholds), a storage stall (NFS/Lustre unreachable, a task
blocked on I/O, I/O errors) -- with causal.yaml's ``stragglers`` weights; without any, the
cause is ``straggler.unexplained`` (weak on purpose: the verdict is ``ambiguous`` and still
names the slow GPU and host). Hypotheses the rules proposed from the same evidence (a thermal
slowdown alone) are folded into the straggler's.

Goodput: a synchronous step waits for the slowest rank, so the job runs at ``1 / (1 +
slowdown)`` of its healthy speed; when the job's own iteration time is in the input, healthy
and observed are its medians before and after the change point. ``fraction`` = ``1 - healthy /
observed`` step time, and the job loses ``gpus x fraction`` GPU-hours per hour from the change
point (:func:`correlators.cost.workload_cost`).
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from correlators.detectors import _memory_reading as memory_reading
from correlators.detectors import detector
from correlators.enrich import Allocation
from correlators.hypothesis import Hypothesis, gpu_label
from correlators.timetext import NS, clock
from schemas.records import Event

__all__ = ["Goodput", "PeerTracker", "Straggler", "StragglerParams", "attribute", "find_stragglers",
           "goodput", "stragglers"]

PERF_TYPES = ("perf.step_time", "perf.throughput")


@dataclass(frozen=True)
class StragglerParams:
    """Detection parameters (causal.yaml ``detectors: stragglers``); see the module docstring.
    Fractions are of the job's median step time; ``lead_s`` in seconds."""

    window_steps: int = 9
    persist_steps: int = 10
    min_slowdown: float = 0.09
    min_z: float = 4.5
    change_slowdown: float = 0.06
    change_peer: float = 0.04
    baseline_alpha: float = 0.05
    min_ranks: int = 4
    node_share: float = 0.5
    score_threshold: float = 0.9
    persist_reports: int = 2
    lead_s: float = 600.0

    @classmethod
    def of(cls, params: dict[str, Any]) -> "StragglerParams":
        """From a causal.yaml detector entry (unknown keys ignored; ValueError for a window or
        persistence below 1)."""
        names = cls.__dataclass_fields__
        out = cls(**{k: type(getattr(cls, k))(v) for k, v in params.items() if k in names})
        if out.window_steps < 1 or out.persist_steps < 1 or out.persist_reports < 1:
            raise ValueError("stragglers: window_steps, persist_steps and persist_reports must be >= 1")
        return out


def _median(a: np.ndarray, axis: int, keepdims: bool = False) -> np.ndarray:
    """``numpy.nanmedian`` of ``a`` along ``axis`` (NaN where a lane has no finite value), by
    ``numpy.median`` when ``a`` holds no NaN: the same values, without nanmedian's masked-array
    path for short axes."""
    if not np.isnan(a).any():
        return np.median(a, axis=axis, keepdims=keepdims)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a lane without samples
        return np.nanmedian(a, axis=axis, keepdims=keepdims)


@functools.lru_cache(maxsize=None)
def _network(n: int) -> tuple[tuple[int, int], ...]:
    """Batcher's odd-even merge sorting network for ``n`` inputs: compare-exchange pairs (i, j),
    i < j, built for the next power of two with the pairs that reach past ``n`` dropped (they
    would only compare +inf padding)."""
    size = 1 << max(0, (n - 1).bit_length())
    pairs = []
    p = 1
    while p < size:
        k = p
        while k >= 1:
            for j in range(k % p, size - k, 2 * k):
                for i in range(min(k, size - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p) and i + j + k < n:
                        pairs.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return tuple(pairs)


def _window_median(ring: np.ndarray) -> np.ndarray:
    """The median along axis 0 of a short stack of steps (the smoothing window), as
    :func:`_median` gives it: by a sorting network of elementwise min/max over the rows when
    there is no NaN (a pure selection, so the same values as ``numpy.median``; 5-10x faster than
    its strided partition), else ``numpy.nanmedian``."""
    n = ring.shape[0]
    if n == 1 or np.isnan(ring).any():
        return _median(ring, 0)
    rows = list(ring)
    for i, j in _network(n):
        lo = np.minimum(rows[i], rows[j])
        rows[j] = np.maximum(rows[i], rows[j])
        rows[i] = lo
    mid = n // 2
    return rows[mid].copy() if n % 2 else (rows[mid - 1] + rows[mid]) / 2.0


class PeerTracker:
    """Peer comparison over the ranks of one job, one step at a time (module docstring, steps
    1-4). ``ranks``: how many ranks (columns). :meth:`step` takes one step's times (seconds,
    NaN where a rank has no sample) and returns the ranks that became stragglers at it. State
    is numpy arrays of O(ranks x window); the history for the change point keeps the last
    ``history`` steps. Deterministic: the same steps give the same answers.

    ``jobs``: when given, the tracker follows that many independent jobs of ``ranks`` ranks at
    once (times of shape ``(jobs, ranks)``, each job compared only with its own ranks, every
    statistic per job); :meth:`step` then returns flat indices ``job * ranks + rank``. A batch
    gives each job exactly what a tracker of its own would."""

    def __init__(self, ranks: int, params: StragglerParams, history: int = 256, jobs: int | None = None) -> None:
        self.params = params
        self.n = 0
        shape = (ranks,) if jobs is None else (jobs, ranks)
        self.ring = np.full((params.window_steps, *shape), np.nan)
        self.past = np.full((params.window_steps, *shape), np.nan)  # smoothed ratios of the last window
        self.baseline = np.full(shape, np.nan)  # each rank's own level, before the window
        self.run = np.zeros(shape, dtype=np.int64)
        self.flagged = np.full(shape, -1, dtype=np.int64)  # step index at which it was flagged
        self.history = np.full((history, *shape), np.nan)
        self.smoothed = np.full(shape, np.nan)
        #: the static threshold of the last step (a float; one per job, shape (jobs, 1), in a batch)
        self.threshold: float | np.ndarray = math.inf

    def step(self, times: np.ndarray) -> np.ndarray:
        """Feed one step (shape ``(ranks,)``, or ``(jobs, ranks)`` in a batch; seconds); returns
        the indices of the ranks flagged at this step (ascending; flat in a batch)."""
        p = self.params
        w = p.window_steps
        with np.errstate(invalid="ignore", divide="ignore"):
            median = _median(times, -1, keepdims=True)
            ratio = np.where(np.isfinite(median) & (median != 0), times / median, np.nan)
        self.ring[self.n % w] = ratio
        self.history[self.n % self.history.shape[0]] = ratio
        self.n += 1
        if self.n < w:
            return np.empty(0, dtype=np.int64)
        with np.errstate(invalid="ignore"):
            smooth = _window_median(self.ring)
            centre = _median(smooth, -1, keepdims=True)
            sigma = 1.4826 * _median(np.abs(smooth - centre), -1, keepdims=True)
        # the rank's own level: an average of its smoothed ratios that left the window w steps ago
        old = self.past[self.n % w]
        if np.isfinite(old).any():
            known = np.isfinite(self.baseline)
            self.baseline = np.where(known & np.isfinite(old), self.baseline + p.baseline_alpha * (old - self.baseline),
                                     np.where(known, self.baseline, old))
        self.past[self.n % w] = smooth
        self.smoothed = smooth
        threshold = np.where(np.isfinite(sigma), np.maximum(p.min_slowdown, p.min_z * sigma), math.inf)
        self.threshold = float(threshold[0]) if threshold.ndim == 1 else threshold
        peer = np.nan_to_num(smooth - centre, nan=-1.0)
        # slower than its peers by the static threshold, or slower than its own level before by
        # change_slowdown while slower than its peers too (the job's GPU-to-GPU spread cancels)
        changed = (np.nan_to_num(smooth - self.baseline, nan=-1.0) >= p.change_slowdown) & (peer >= p.change_peer)
        outlier = (peer >= threshold) | changed
        self.run = np.where(outlier, self.run + 1, 0)
        new = np.flatnonzero((self.run >= p.persist_steps) & (self.flagged < 0))
        self.flagged.flat[new] = self.n - 1
        return new

    def ratios(self, rank: int) -> np.ndarray:
        """The rank's per-step ratios to the step median still held, oldest first (a tracker
        of one job)."""
        h = self.history.shape[0]
        if self.n <= h:
            return self.history[: self.n, rank].copy()
        at = self.n % h
        return np.concatenate([self.history[at:, rank], self.history[:at, rank]])


def _column_means(rows: list[np.ndarray]) -> np.ndarray:
    """The mean of each column of ``rows`` (equal lengths) over its non-NaN values; NaN where
    a column has none (numpy's ``nanmean`` without its empty-slice warning)."""
    m = np.asarray(rows, dtype=float)
    seen = (~np.isnan(m)).sum(axis=0)
    return np.where(seen > 0, np.nansum(m, axis=0) / np.maximum(seen, 1), np.nan)


def change_point(ratios: np.ndarray) -> int:
    """Index of the first step of the slower segment of ``ratios`` (one change in mean, the
    CUSUM split); 0 when the series is slow from its start or has no clear change. NaNs are
    filled with the series median."""
    r = np.asarray(ratios, dtype=float)
    if r.size < 2:
        return 0
    fill = np.nanmedian(r) if np.isfinite(r).any() else 1.0
    r = np.where(np.isfinite(r), r, fill)
    dev = np.cumsum(r - r.mean())
    k = int(np.argmax(np.abs(dev[:-1]))) + 1
    before, after = r[:k].mean(), r[k:].mean()
    return k if after > before and dev[k - 1] < 0 else 0


@dataclass
class Straggler:
    """One straggler: ``level`` ``gpu`` (one rank's GPU) or ``node`` (most ranks of ``host``),
    ``ranks`` slow, ``host``, ``gpu_index`` (None for a node or when unknown), ``slowdown``
    (fraction slower than the job's median), ``since``/``detected`` (UTC ns: the change point
    and the step at which it persisted), ``since_step``/``detected_step`` (the trainer's step
    numbers where printed, else None), ``source`` (``<framework>/<metric>`` or ``nvrx``) and
    the ``samples`` it was read from (the events at its change point and detection)."""

    level: str
    ranks: list[int]
    host: str
    gpu_index: int | None
    slowdown: float
    since: int
    detected: int
    since_step: int | None
    detected_step: int | None
    source: str
    samples: list[Event] = field(default_factory=list)


def _seconds(e: Event) -> float | None:
    a = e.attributes
    s = a.get("seconds")
    if isinstance(s, (int, float)) and s > 0:
        return float(s)
    r = a.get("rate")
    if isinstance(r, (int, float)) and r > 0:
        return 1.0 / float(r)
    return None


def _step_key(e: Event) -> tuple[int, int]:
    """(trainer step or -1, time to the second or -1): one key per step of a series."""
    step = e.attributes.get("step")
    return (step, -1) if isinstance(step, int) else (-1, e.at // NS)


def series(events: Iterable[Event]) -> dict[str, dict[tuple[int, int], dict[int, tuple[float, Event]]]]:
    """Performance samples grouped: ``<framework>/<metric>`` -> step key -> rank -> (seconds,
    event); a job-wide sample (no rank) is kept under rank -1. Duplicates of one (step, rank)
    keep the first by event id."""
    out: dict[str, dict[tuple[int, int], dict[int, tuple[float, Event]]]] = {}
    for e in sorted((e for e in events if e.type in PERF_TYPES), key=lambda e: e.event_id):
        s = _seconds(e)
        if s is None:
            continue
        name = f"{e.attributes.get('framework', '?')}/{e.attributes.get('metric', '?')}"
        rank = e.rank if e.rank is not None else -1
        out.setdefault(name, {}).setdefault(_step_key(e), {}).setdefault(rank, (s, e))
    return out


def _ranked(groups: dict[str, dict]) -> tuple[str, dict] | None:
    """The per-rank series with the most ranks (ties: the name), or None."""
    best = None
    for name in sorted(groups):
        ranks = {r for step in groups[name].values() for r in step if r >= 0}
        if best is None or len(ranks) > best[0]:
            best = (len(ranks), name)
    return (best[1], groups[best[1]]) if best else None


def find_stragglers(events: Sequence[Event], alloc: Allocation, params: StragglerParams) -> list[Straggler]:
    """Every straggler the events show (module docstring), ordered by (since, host, ranks).
    Pure: the same set of events gives the same list whatever their order."""
    out = _from_steps(events, alloc, params) + _from_nvrx(events, alloc, params)
    seen: set[tuple[str, tuple[int, ...]]] = set()
    unique = []
    for s in sorted(out, key=lambda s: (s.since, s.host, s.ranks, s.source)):
        key = (s.host, tuple(s.ranks))
        if key not in seen and not any(h == s.host and set(s.ranks) <= set(r) for h, r in seen):
            seen.add(key)
            unique.append(s)
    return unique


def _host_gpu(alloc: Allocation, rank: int, sample: Event | None) -> tuple[str, int | None]:
    host, gpu = alloc.ranks.get(rank, (None, None))
    if sample is not None:
        host = host or sample.host
        if gpu is None and sample.gpu is not None:
            gpu = sample.gpu.index
    return host or "?", gpu


def _from_steps(events: Sequence[Event], alloc: Allocation, params: StragglerParams) -> list[Straggler]:
    picked = _ranked(series(events))
    if picked is None:
        return []
    name, steps = picked
    ranks = sorted({r for step in steps.values() for r in step if r >= 0})
    if len(ranks) < params.min_ranks:
        return []
    col = {r: i for i, r in enumerate(ranks)}
    keys = sorted(steps)
    tracker = PeerTracker(len(ranks), params, history=len(keys))
    first: dict[int, int] = {}  # rank index -> step index it was flagged at
    slow: dict[int, float] = {}
    for i, key in enumerate(keys):
        times = np.full(len(ranks), np.nan)
        for r, (s, _) in steps[key].items():
            if r >= 0:
                times[col[r]] = s
        for c in tracker.step(times):
            first[int(c)] = i
            recent = tracker.ratios(int(c))[-params.persist_steps:]
            slow[int(c)] = float(np.nanmedian(recent)) - 1.0
    if not first:
        return []

    def sample(key: tuple[int, int], rank: int) -> Event | None:
        got = steps[key].get(rank)
        if got is None:
            near = [k for k in keys if rank in steps[k]]
            got = steps[min(near, key=lambda k: abs(keys.index(k) - keys.index(key)))][rank] if near else None
        return got[1] if got else None

    def step_no(key: tuple[int, int]) -> int | None:
        return key[0] if key[0] >= 0 else None

    found: list[Straggler] = []
    by_host: dict[str, list[int]] = {}
    for c in sorted(first):
        rank = ranks[c]
        host, _ = _host_gpu(alloc, rank, sample(keys[first[c]], rank))
        by_host.setdefault(host, []).append(c)
    for host in sorted(by_host):
        cols = by_host[host]
        on_node = [c for c in range(len(ranks)) if _host_gpu(alloc, ranks[c], None)[0] == host]
        node_level = len(on_node) >= 2 and len(cols) >= params.node_share * len(on_node)
        groups = [cols] if node_level else [[c] for c in cols]
        for group in groups:
            det_i = min(first[c] for c in group)
            # one change point for the group: on the mean of its ranks' ratios
            since_i = change_point(_column_means([tracker.ratios(c)[: det_i + 1] for c in group]))
            lead = group[0]
            s_ev = sample(keys[since_i], ranks[lead])
            d_ev = sample(keys[det_i], ranks[lead])
            _, gpu = _host_gpu(alloc, ranks[lead], d_ev)
            found.append(Straggler(
                level="node" if node_level else "gpu",
                ranks=sorted(ranks[c] for c in group),
                host=host,
                gpu_index=None if node_level else gpu,
                slowdown=round(float(np.median([slow[c] for c in group])), 4),
                since=(s_ev or d_ev).at,
                detected=(d_ev or s_ev).at,
                since_step=step_no(keys[since_i]), detected_step=step_no(keys[det_i]),
                source=name,
                samples=[e for e in (s_ev, d_ev) if e is not None],
            ))
    return found


def _from_nvrx(events: Sequence[Event], alloc: Allocation, params: StragglerParams) -> list[Straggler]:
    scores: dict[int, list[Event]] = {}
    warned: dict[int, list[Event]] = {}
    nvrx = [e for e in events if e.type in ("perf.gpu_score", "perf.straggler_reported")]
    reports = sorted({e.at for e in nvrx if e.type == "perf.gpu_score"})
    for e in sorted(nvrx, key=lambda e: (e.at, e.event_id)):
        if e.type == "perf.gpu_score" and e.rank is not None and isinstance(e.attributes.get("score"), (int, float)):
            scores.setdefault(e.rank, []).append(e)
        elif e.type == "perf.straggler_reported":
            for r in e.attributes.get("ranks", ()):
                if isinstance(r, int):
                    warned.setdefault(r, []).append(e)
    out = []
    for rank in sorted(set(scores) | set(warned)):
        mine = scores.get(rank, [])
        at_report = {e.at: e for e in mine}
        run: list[Event] = []
        hit: list[Event] = []
        for t in reports:
            e = at_report.get(t)
            if e is not None and float(e.attributes["score"]) <= params.score_threshold:
                run.append(e)
                if len(run) >= params.persist_reports:
                    hit = run
                    break
            else:
                run = []
        named = warned.get(rank, [])
        if not hit and len(named) < params.persist_reports:
            continue
        basis = hit or named[: params.persist_reports]
        low = [float(e.attributes["score"]) for e in (hit or mine) if float(e.attributes["score"]) > 0]
        slowdown = round(1.0 / float(np.median(low)) - 1.0, 4) if low else 0.0
        host, gpu = _host_gpu(alloc, rank, None)
        if host == "?":
            node = next((e.attributes.get("node") for e in mine if e.attributes.get("node")), None)
            host = str(node) if node else basis[0].host
        out.append(Straggler(level="gpu", ranks=[rank], host=host, gpu_index=gpu, slowdown=slowdown,
                             since=basis[0].at, detected=basis[-1].at, since_step=None, detected_step=None,
                             source="nvrx", samples=list(basis)))
    return out


# --- attribution -----------------------------------------------------------------------------

#: (cause class, code, family, domain, text) -- the text is formatted with the straggler
CAUSES: dict[str, tuple[str, str, str, str]] = {
    "thermal": ("straggler.gpu_thermal", "gpu", "gpu_hardware", "GPU {gpu} of {host} is throttled by heat (HW thermal slowdown)"),
    "power": ("straggler.gpu_power", "gpu", "gpu_hardware", "GPU {gpu} of {host} is held back by power (HW power brake)"),
    "pcie": ("straggler.pcie_downtrained", "gpu", "gpu_hardware", "the PCIe link of GPU {gpu} of {host} runs below its maximum"),
    "nvlink": ("straggler.nvlink_degraded", "gpu", "gpu_hardware", "NVLink of GPU {gpu} of {host} reports errors or lost links"),
    "gpu_memory": ("straggler.gpu_memory", "gpu", "gpu_hardware", "GPU {gpu} of {host} has uncorrectable memory errors or rows pending remapping"),
    "nic": ("straggler.nic", "fabric", "fabric", "the network port of {host} reports errors"),
    "host_memory": ("straggler.host_memory", "host", "host", "{host} is under host memory pressure"),
    "storage": ("straggler.storage", "host", "storage", "{host} stalls on storage"),
}
UNEXPLAINED = ("straggler.unexplained", "perf", "unknown",
               "no input explains why: check GPU {gpu} of {host} (clocks, PCIe, NVLink, its port) or re-certify it")

_NVLINK_XIDS = {74, 144, 145, 146, 147, 148, 149, 150}


def evidence_class(e: Event, memory_params: dict) -> tuple[str, str] | None:
    """(cause class, level ``gpu``|``host``) when ``e`` is evidence of a slow GPU or host,
    else None. GPU-level evidence counts for the GPU it names."""
    t, a = e.type, e.attributes
    if t == "telemetry.thermal_slowdown":
        return "thermal", "gpu"
    if t == "telemetry.power_brake":
        return "power", "gpu"
    if t in ("telemetry.pcie_downtrained", "telemetry.pcie_replay"):
        return "pcie", "gpu"
    if t == "gpu.nvlink_error" or (t == "gpu.xid" and a.get("xid") in _NVLINK_XIDS):
        return "nvlink", "gpu"
    if t in ("telemetry.remapped_rows", "telemetry.ecc_uncorrected"):
        return "gpu_memory", "gpu"
    if t == "fabric.port_errors" and a.get("side", "host") != "switch":
        return "nic", "host"
    if t == "fabric.port_fault":  # the fabric correlator's episode of a port of this host
        return "nic", "host"
    if t == "host.memory_pressure":
        return ("host_memory", "host") if memory_reading(e, memory_params, {}) else None
    if t in ("storage.server_unreachable", "storage.io_error"):
        return "storage", "host"
    if t == "host.hung_task" and a.get("blocked_on") in ("nfs", "lustre", "local_fs", "block"):
        return "storage", "host"
    return None


def attribute(s: Straggler, events: Sequence[Event], alloc: Allocation, weights: dict[str, float],
              memory_params: dict, lead_s: float, end_ns: int | None) -> tuple[str, list[tuple[float, str, Event]]]:
    """The cause class of straggler ``s`` and its evidence as hypothesis support ((weight,
    rule id, event), strongest class only; ``unexplained`` and no evidence when nothing on its
    GPU, host or port fits). Evidence must fall within ``[since - lead_s, end]``; GPU-level
    evidence counts in full on a GPU straggler's own GPU and at half weight for a node straggler
    (a host cause is likelier there); host-level evidence counts in full for a node straggler
    and at half weight for one GPU of it."""
    lo = s.since - int(lead_s * NS)
    hi = end_ns if end_ns is not None else math.inf
    found: dict[str, list[tuple[float, str, Event]]] = {}
    for e in sorted(events, key=lambda e: (e.at, e.event_id)):
        named = e.attributes.get("culprit_hosts")
        if not (e.host == s.host or (isinstance(named, list) and s.host in named)) or not lo <= e.at <= hi:
            continue
        got = evidence_class(e, memory_params)
        if got is None:
            continue
        kind, level = got
        w = float(weights.get(kind, 0.45))
        if level == "gpu":
            index = alloc.gpu_index(e.host, e.gpu)
            if s.level == "gpu":
                if index is None or index != s.gpu_index:
                    continue
            else:
                w *= 0.5
        elif s.level == "gpu":
            w *= 0.5
        found.setdefault(kind, []).append((round(w, 6), f"stragglers:{kind}", e))
    if not found:
        return "unexplained", []
    kind = max(sorted(found), key=lambda k: max(w for w, _, _ in found[k]))
    return kind, found[kind]


@dataclass(frozen=True)
class Goodput:
    """What a straggler costs: ``fraction`` of the job's speed lost (``1 - healthy /
    observed`` step time), the ``healthy_s`` and ``observed_s`` step times when the job's own
    iteration time was in the input (else None), and ``since`` (UTC ns)."""

    fraction: float
    since: int
    healthy_s: float | None = None
    observed_s: float | None = None


def goodput(s: Straggler, events: Sequence[Event], params: StragglerParams) -> Goodput:
    """The goodput a straggler costs (module docstring): from the job's own iteration times
    before and after its change point when at least three of each are in ``events``, else from
    its slowdown (a synchronous step waits for the slowest rank)."""
    groups = series(events)
    for name in sorted(groups):
        steps = groups[name]
        if len({r for v in steps.values() for r in v if r >= 0}) >= params.min_ranks:
            continue
        # one sample a step: the job's own time (the rank that prints it, or none)
        times = sorted((e.at, sec) for v in steps.values() for sec, e in [v[-1] if -1 in v else v[min(v)]])
        before = [sec for at, sec in times if at < s.since]
        after = [sec for at, sec in times if at >= s.detected]
        if len(before) >= 3 and len(after) >= 3:
            healthy, observed = float(np.median(before)), float(np.median(after))
            if observed > healthy:
                return Goodput(round(1.0 - healthy / observed, 4), s.since, round(healthy, 6), round(observed, 6))
    return Goodput(round(1.0 - 1.0 / (1.0 + max(s.slowdown, 0.0)), 4), s.since)


@detector("stragglers")
def stragglers(info, alloc: Allocation, events: Sequence[Event], hyps: list, params: dict) -> list:
    """Straggler hypotheses (module docstring): one per straggler, named by the cause its
    evidence shows; rules' hypotheses built from that same evidence are folded in."""
    p = StragglerParams.of(params)
    found = find_stragglers(events, alloc, p)
    if not found:
        return []
    weights = {k: float(v) for k, v in (params.get("weights") or {}).items()}
    memory_params = dict(params.get("memory") or {})
    out = []
    for s in found:
        kind, support = attribute(s, events, alloc, weights, memory_params, p.lead_s, info.end_ns)
        code, family, domain, text = CAUSES.get(kind, UNEXPLAINED)
        gpu = "?" if s.gpu_index is None else f"#{s.gpu_index}"
        if s.level == "node":
            gpu = "(all)"
        ranks = ", ".join(str(r) for r in s.ranks[:8]) + (" ..." if len(s.ranks) > 8 else "")
        who = (f"node {s.host} (ranks {ranks})" if s.level == "node"
               else f"rank {ranks} (GPU {gpu} of {s.host})")
        good = goodput(s, events, p)
        hyp = Hypothesis(code=code if s.level == "gpu" or family != "gpu" else code + ".node", family=family,
                         domain=domain, job_wide=False,
                         text=f"straggler: {who} runs {100 * s.slowdown:.0f}% slower than its peers; "
                              + text.format(gpu=gpu, host=s.host))
        weight = float(weights.get("straggler", 0.4))
        own = [e for e in s.samples if e.host == s.host]
        if own:
            hyp.support.append((weight, "stragglers:peer_comparison", own[0]))
        else:  # a report collected elsewhere (NVRx prints on rank 0): context, not the culprit's host
            hyp.derived_weight = weight
            hyp.context += s.samples
        hyp.support += [(w, rule, e) for w, rule, e in support]
        hyp.derived_at = s.since
        hyp.extra_ranks |= set(s.ranks)
        hyp.extra_hosts.add(s.host)
        hyp.goodput = good
        step = f" (step {s.since_step})" if s.since_step is not None else ""
        hyp.reasons.append(
            f"peer comparison over {s.source}: {who} was {100 * s.slowdown:.1f}% slower than the median "
            f"of the job's ranks for {p.persist_steps if s.source != 'nvrx' else p.persist_reports} "
            f"{'steps' if s.source != 'nvrx' else 'reports'} in a row (what slows every rank alike "
            f"cancels out); slow since {clock(s.since)}{step}, detected at {clock(s.detected)}")
        if support:
            hyp.reasons.append(f"the reason: {len(support)} {kind} reading(s) on "
                               f"{'GPU ' + gpu + ' of ' if s.level == 'gpu' and kind in ('thermal', 'power', 'pcie', 'nvlink', 'gpu_memory') else ''}"
                               f"{s.host} while it was slow, e.g. {support[0][2].type}")
        else:
            hyp.reasons.append(f"no reading on {s.host} (throttling, PCIe, NVLink, ECC, its port, host memory, "
                               "storage) explains it: the slow GPU and host are named, the reason is not")
        hyp.reasons.append(f"goodput: the job runs {100 * good.fraction:.1f}% below its healthy speed since "
                           f"{clock(good.since)}"
                           + (f" (iteration {good.healthy_s:.3f} s -> {good.observed_s:.3f} s)" if good.healthy_s else ""))
        used = {e.event_id for _, _, e in support}
        for other in list(hyps):
            if other.support and all(e.event_id in used for e in other.events):
                hyps.remove(other)
                hyp.absorbed.append(other.code)
        out.append(hyp)
    return out


class Recheck:
    """When a live window re-decides for its performance samples (timing only, never what a
    verdict says): at the first sample of every ``every``-th step of the job (a sample without a
    step number by its time, ``every`` x 2 s), so a straggler's provisional ``degraded`` verdict
    comes within a few steps of the persistence that makes it, without one decision per sample.
    Holds the last position checked per window key: a cache a driver may drop (:meth:`clear`)."""

    def __init__(self, every: int = 5) -> None:
        self.every = every
        self.last: dict[str, int] = {}

    def due(self, key: str, event: Event) -> bool:
        """True when ``event`` (of window ``key``) is a performance sample at a step at least
        ``every`` steps past the last one checked; it is then remembered."""
        if event.type not in PERF_TYPES and event.type not in ("perf.gpu_score", "perf.straggler_reported"):
            return False
        step = event.attributes.get("step")
        pos = step if isinstance(step, int) else event.at // (2 * NS)
        last = self.last.get(key)
        if last is not None and pos < last + self.every:
            return False
        self.last[key] = pos
        return True

    def clear(self) -> None:
        """Forget every position (after a rebalance)."""
        self.last.clear()
