"""Straggler benchmark: a 2,048-node x 8-GPU synchronous job (16,384 ranks) with realistic
per-step jitter and injected stragglers of 5-30 %, through the engine's peer comparison
(:class:`correlators.stragglers.PeerTracker`, the code the ``stragglers`` detector runs, with
causal.yaml's parameters).

**Jitter model** (each rank's time for one step, seconds = 2.0 x the product of):

* the job's step factor, every rank alike: lognormal sigma 3 %, a checkpoint every 300 steps
  (x4 for 3 steps), a shared-storage stall every 700 steps (x1.5 for 12 steps);
* the node's factor this step: lognormal sigma 0.5 % (host CPU, PCIe switch, NIC);
* the rank's static bias: normal sigma 1 % (GPU to GPU variation, kept for the run);
* the rank's own jitter this step: lognormal sigma 2 %;
* data-loader hiccups: with probability 0.3 % a rank's step takes 1.3-3x (one step);
* a straggler: from its onset step on, x (1 + slowdown).

**Recall** (``--batches`` runs of ``--steps`` steps): each run injects ``--per-level``
stragglers per slowdown level (5, 7.5, 10, 15, 20, 30 %) on distinct nodes at random onsets in
[20, 60); a straggler is found when the tracker flags its rank within 20 steps of its onset.
Steps-to-detect is counted from the onset. Any other rank flagged is a false positive.

**False positives per 1,000 healthy job-hours**, measured, no straggler injected (2 s steps =
1,800 steps a job-hour): a fleet of healthy jobs of the sizes of ``--fleet`` (``NODESxJOBSxHOURS``
each: that many jobs of NODES x 8 GPUs, each for HOURS; by default 40 jobs of 8 nodes, 40 of 64
and 20 of 256 for 10 h each = 1,000 job-hours, 1.15 G rank-steps), each job with its own jitter
and checkpoint / storage-stall phases, run through the same ``PeerTracker`` (one batch per size:
each job compared only with its own ranks); and the 2,048-node job itself for
``--healthy-hours``. Every flagged rank is a false positive; the count, the span (job-hours,
GPU-hours) and the rate per 1,000 job-hours are printed per size and in all, with the outlier
rank-steps (a rank past a threshold at a step, before persistence) as the margin left.
End to end, :func:`correlators.stragglers.find_stragglers` runs over ``--engine-hours`` of a
healthy 256-rank job as ``perf.step_time`` Events (the detector's own grouping, step keys and
tracker): its stragglers are false positives too.

**Throughput**: samples/s through ``PeerTracker.step`` over the 16,384 ranks against a floor
measured in the same run (one ``numpy.median`` over the same step arrays: the least any peer
comparison does), and events/s through the engine's detector (:func:`correlators.stragglers.
find_stragglers` over ``perf.step_time`` Events of a 256-rank job) against a floor (sorting
the same events by id, which the detector does first).

``--quick`` (CI): 2 recall runs of 4 stragglers per slowdown, a 14 job-hour fleet, 0.2 h of the
big job and 0.1 h through the engine, in well under a minute.

Run:  python3 bench/stragglers.py [--batches 20 --healthy-hours 4 --fleet 8x40x10,64x40x10,256x20x10]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from correlators.attribution import default_causal_rules  # noqa: E402
from correlators.enrich import Allocation  # noqa: E402
from correlators.stragglers import PeerTracker, StragglerParams, find_stragglers  # noqa: E402
from schemas.records import Event  # noqa: E402

NODES, GPUS = 2048, 8
RANKS = NODES * GPUS
STEP_S = 2.0
LEVELS = (0.05, 0.075, 0.10, 0.15, 0.20, 0.30)
WITHIN = 20


class Job:
    """The jitter model (module docstring) for one run: ``jobs`` independent jobs of ``nodes`` x
    8 GPUs (``jobs`` None: one job, steps of shape ``(ranks,)``; else ``(jobs, ranks)``), each
    with its own checkpoint and storage-stall phase."""

    def __init__(self, rng: np.random.Generator, nodes: int = NODES, jobs: int | None = None) -> None:
        self.rng = rng
        self.nodes = nodes
        self.lead = () if jobs is None else (jobs,)
        self.shape = (*self.lead, nodes * GPUS)
        self.bias = rng.normal(0.0, 0.01, self.shape)
        self.extra = np.ones(self.shape)
        self.phase = rng.integers(0, 2100, self.lead + (1,)) if jobs is not None else np.zeros(1, dtype=np.int64)

    def step(self, i: int) -> np.ndarray:
        r = self.rng
        at = i + self.phase
        job = np.exp(r.normal(0.0, 0.03, self.lead + (1,))) if self.lead else np.exp(r.normal(0.0, 0.03, 1))
        job = job * np.where(np.isin(at % 300, (150, 151, 152)), 4.0, 1.0) * np.where((at % 700 >= 500) & (at % 700 < 512), 1.5, 1.0)
        node = np.repeat(r.lognormal(0.0, 0.005, (*self.lead, self.nodes)), GPUS, axis=-1)
        own = r.lognormal(0.0, 0.02, self.shape)
        hit = r.random(self.shape) < 0.003
        own[hit] *= r.uniform(1.3, 3.0, int(hit.sum()))  # data-loader hiccups
        return STEP_S * job * node * (1.0 + self.bias) * own * self.extra


def recall(params: StragglerParams, batches: int, steps: int, per_level: int, seed: int) -> dict:
    found = {lv: [] for lv in LEVELS}  # level -> steps to detect (None: missed)
    fp = 0
    for b in range(batches):
        rng = np.random.default_rng(seed + b)
        job = Job(rng)
        nodes = rng.choice(NODES, size=per_level * len(LEVELS), replace=False)
        injected = {}
        for k, node in enumerate(nodes):
            rank = int(node) * GPUS + int(rng.integers(GPUS))
            injected[rank] = (LEVELS[k // per_level], int(rng.integers(20, 60)))
        tracker = PeerTracker(RANKS, params, history=steps)
        flagged: dict[int, int] = {}
        for i in range(steps):
            for rank, (level, onset) in injected.items():
                if i == onset:
                    job.extra[rank] = 1.0 + level
            for c in tracker.step(job.step(i)):
                flagged.setdefault(int(c), i)
        for rank, (level, onset) in injected.items():
            at = flagged.get(rank)
            found[level].append(at - onset + 1 if at is not None and at - onset + 1 <= WITHIN else None)
        fp += sum(1 for r in flagged if r not in injected)
    return {"found": found, "fp": fp, "trials": batches * per_level}


def healthy(params: StragglerParams, nodes: int, jobs: int | None, hours: float, seed: int) -> dict:
    """``jobs`` healthy jobs (None: one) of ``nodes`` x 8 GPUs for ``hours`` each through one
    tracker: flagged ranks (false positives) and outlier rank-steps."""
    steps = int(round(hours * 3600 / STEP_S))
    job = Job(np.random.default_rng(seed), nodes, jobs)
    tracker = PeerTracker(nodes * GPUS, params, history=1, jobs=jobs)
    flags = outliers = 0
    for i in range(steps):
        flags += len(tracker.step(job.step(i)))
        outliers += int(np.count_nonzero(tracker.run))
    n = jobs or 1
    return {"nodes": nodes, "jobs": n, "job_hours": n * steps * STEP_S / 3600, "flags": flags,
            "outlier_steps": outliers, "rank_steps": n * steps * nodes * GPUS}


def fleet_spec(text: str) -> list[tuple[int, int, float]]:
    """``NODESxJOBSxHOURS,...`` -> [(nodes, jobs, hours)]; ValueError on a malformed entry."""
    out = []
    for part in text.split(","):
        try:
            nodes, jobs, hours = part.strip().split("x")
            out.append((int(nodes), int(jobs), float(hours)))
        except ValueError:
            raise ValueError(f"--fleet: {part!r} is not NODESxJOBSxHOURS") from None
    return out


def _perf_events(times: np.ndarray, start: int = 0) -> list[Event]:
    """``perf.step_time`` Events of one job, one per (step, rank) of ``times`` (steps, ranks),
    step numbers from ``start``, ranks on nodes of 8."""
    base = 1_796_090_400 * 10**9
    return [Event(type="perf.step_time", at=base + int((start + i) * STEP_S * 1e9) + r * 1000, host=f"node-{r // 8:04d}",
                  cluster="c1", workload_id="job-1", rank=r, rule="bench@1",
                  attributes={"framework": "deepspeed", "metric": "fwd", "step": start + i, "seconds": float(t)}).with_id()
            for i, row in enumerate(times) for r, t in enumerate(row)]


def _allocation(ranks: int) -> Allocation:
    return Allocation(workload_id="job-1", cluster="c1", ranks={r: (f"node-{r // 8:04d}", r % 8) for r in range(ranks)})


def engine_healthy(params: StragglerParams, hours: float, seed: int) -> dict:
    """``find_stragglers`` over ``hours`` of a healthy 256-rank job as Events: its stragglers
    (false positives) and the events it read."""
    steps = int(round(hours * 3600 / STEP_S))
    job = Job(np.random.default_rng(seed), 32)
    events = _perf_events(np.array([job.step(i) for i in range(steps)]))
    t0 = time.perf_counter()
    got = find_stragglers(events, _allocation(256), params)
    return {"hours": steps * STEP_S / 3600, "events": len(events), "flags": sum(len(s.ranks) for s in got),
            "seconds": time.perf_counter() - t0}


def throughput(params: StragglerParams, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    job = Job(rng)
    arrays = [job.step(i) for i in range(60)]
    t0 = time.perf_counter()
    for a in arrays:
        np.median(a)
    floor = time.perf_counter() - t0
    tracker = PeerTracker(RANKS, params, history=64)
    t0 = time.perf_counter()
    for a in arrays:
        tracker.step(a)
    tracked = time.perf_counter() - t0
    # the engine's detector over Events: a 256-rank job (32 nodes x 8), 100 steps, rank 77 20 % slower from step 30
    ranks, steps = 256, 100
    alloc = _allocation(ranks)
    events = _perf_events(np.array([job.step(i)[:ranks] * (1 + 0.2 * (np.arange(ranks) == 77) * (i >= 30))
                                    for i in range(steps)]))
    t0 = time.perf_counter()
    sorted(events, key=lambda e: e.event_id)
    efloor = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = find_stragglers(events, alloc, params)
    engine = time.perf_counter() - t0
    assert [s.ranks for s in got] == [[77]], f"the engine found {[s.ranks for s in got]}, want rank 77"
    return {"samples_per_s": len(arrays) * RANKS / tracked, "floor_samples_per_s": len(arrays) * RANKS / floor,
            "events_per_s": len(events) / engine, "floor_events_per_s": len(events) / efloor}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--steps", type=int, default=90)
    ap.add_argument("--per-level", type=int, default=16)
    ap.add_argument("--healthy-hours", type=float, default=4.0, help="hours of the healthy 2,048-node job")
    ap.add_argument("--fleet", default="8x40x10,64x40x10,256x20x10",
                    help="healthy jobs NODESxJOBSxHOURS,... (default: 1,000 job-hours)")
    ap.add_argument("--engine-hours", type=float, default=1.0, help="hours of a healthy 256-rank job through the engine")
    ap.add_argument("--quick", action="store_true", help="a short run (CI): see the module docstring")
    ap.add_argument("--seed", type=int, default=35)
    args = ap.parse_args()
    if args.quick:
        args.batches, args.per_level, args.healthy_hours, args.fleet, args.engine_hours = 2, 4, 0.2, "8x4x2,64x2x2,256x1x2", 0.1
    fleet = fleet_spec(args.fleet)
    params = StragglerParams.of(default_causal_rules().detectors["stragglers"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs (load average "
          f"{load:.1f}), Python {platform.python_version()}, numpy {np.__version__}")
    print(f"job: {NODES} nodes x {GPUS} GPUs = {RANKS} ranks, {STEP_S:g} s steps; params {params}")
    t0 = time.perf_counter()
    r = recall(params, args.batches, args.steps, args.per_level, args.seed)
    print(f"\nrecall within {WITHIN} steps ({r['trials']} stragglers per slowdown, {args.batches} runs):")
    print(f"  {'slowdown':>9} {'recall':>8} {'steps to detect (median / max)':>32}")
    for level, got in r["found"].items():
        hits = [s for s in got if s is not None]
        rate = len(hits) / len(got)
        steps = f"{int(np.median(hits))} / {max(hits)}" if hits else "-"
        print(f"  {100 * level:>8.1f}% {100 * rate:>7.1f}% {steps:>32}")
    print(f"  other ranks flagged (false positives) in those runs: {r['fp']}")

    print("\nhealthy jobs, no straggler (every flagged rank is a false positive):")
    print(f"  {'job':>22} {'job-hours':>10} {'GPU-hours':>12} {'flagged':>8} {'per 1,000 job-h':>16} "
          f"{'outlier rank-steps':>24}")
    rows = [healthy(params, nodes, jobs, hours, args.seed + 1000 + k) for k, (nodes, jobs, hours) in enumerate(fleet)]
    big = healthy(params, NODES, None, args.healthy_hours, args.seed + 999)
    for h in rows + [big]:
        gpu_h = h["job_hours"] * h["nodes"] * GPUS
        print(f"  {h['jobs']:>4} x {h['nodes']:>5} x {GPUS} GPUs {h['job_hours']:>10,.1f} {gpu_h:>12,.0f} {h['flags']:>8} "
              f"{1000 * h['flags'] / h['job_hours']:>16.2f} {h['outlier_steps']:>10,} of {h['rank_steps']:>11,}")
    hours = sum(h["job_hours"] for h in rows)
    flags = sum(h["flags"] for h in rows)
    gpu_h = sum(h["job_hours"] * h["nodes"] * GPUS for h in rows)
    print(f"  fleet: {flags} false positive(s) in {hours:,.1f} healthy job-hours ({gpu_h:,.0f} GPU-hours) = "
          f"{1000 * flags / hours:.2f} per 1,000 job-hours (target <= 1)"
          + ("" if flags else f"; 95 % upper bound {1000 * 3.0 / hours:.2f}"))
    e = engine_healthy(params, args.engine_hours, args.seed + 1500)
    print(f"  end to end (find_stragglers over Events): {e['flags']} straggler(s) in {e['hours']:.1f} job-hours of a "
          f"256-rank job ({e['events']:,} events, {e['events'] / e['seconds'] / 1e3:.1f} k events/s)")

    t = throughput(params, args.seed + 2000)
    print("\nthroughput:")
    print(f"  PeerTracker over {RANKS} ranks: {t['samples_per_s'] / 1e6:.2f} M samples/s = "
          f"{t['samples_per_s'] / t['floor_samples_per_s']:.2f} x the floor (numpy.median per step: "
          f"{t['floor_samples_per_s'] / 1e6:.2f} M samples/s)")
    print(f"  engine detector over perf.step_time events: {t['events_per_s'] / 1e3:.1f} k events/s = "
          f"{t['events_per_s'] / t['floor_events_per_s']:.3f} x the floor (sorting them by id: "
          f"{t['floor_events_per_s'] / 1e3:.0f} k events/s)")
    print(f"\nwall time {time.perf_counter() - t0:.0f} s")
    if flags * 1000 > hours:
        raise SystemExit(f"false positives {1000 * flags / hours:.2f} per 1,000 job-hours > 1")


if __name__ == "__main__":
    main()
