"""Replay benchmark: a 2,048-node x 8-GPU incident (16,384 ranks, >= 1,000,000 log lines).

One GPU falls off the bus (XID 79) on one node; ~10 minutes later every other rank logs the
PyTorch NCCL watchdog timeout; the rest is background noise (training progress lines, NCCL INFO
lines, kernel chatter). The benchmark replays the bundle end to end (read, scan, extract,
enrich, decide; ClickHouse off unless ``--store``) and reports, as the median of N runs each in
a fresh process after one small replay there (:func:`bench.common.warm_up`: the rule pack
loaded and its keyword sets compiled, as in a running service; its time is printed, not
counted): lines/s, peak RSS, and whether the verdict is right; and the floor: a bare
scan of the same lines with the rule pack's keyword prefilter only (read + vectorised match),
as a ratio.

Usage: ``python3 bench/replay.py [--runs 5] [--nodes 2048] [--lines-per-node 500] [--store]``
Prints its figures and checks the verdict of every run (cause ``gpu.xid.79``, the bad host and
rank, quality definitive); exits 1 when one is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import peak_rss_mib, warm_up  # noqa: E402 -- after the path set-up

START = "2026-11-30T01:00:00Z"
XID_AT = (1, 10, 0)  # 01:10:00 -- the GPU falls off the bus
TIMEOUT_AT = (1, 20, 0)  # ~01:20:00 -- watchdog timeouts fire (600 s later)


def generate(out: Path, nodes: int, lines_per_node: int, seed: int = 7) -> dict:
    """Write the synthetic bundle under ``out``; returns its facts (bad node/rank, lines)."""
    rnd = random.Random(seed)
    hosts = [f"node-b{i:04d}" for i in range(nodes)]
    bad_node = nodes // 3
    bad_gpu = 5
    bad_rank = bad_node * 8 + bad_gpu
    (out / "logs").mkdir(parents=True, exist_ok=True)
    workload = [
        "workload_id: job-bench",
        "scheduler: slurm",
        "cluster: bench",
        "state: FAILED",
        f"start: {START}",
        "end: 2026-11-30T01:25:00Z",
        "ranks_per_node: 8",
        "nodes:",
        *[f"  - {h}" for h in hosts],
    ]
    (out / "workload.yaml").write_text("\n".join(workload) + "\n")
    expected = f"domain: gpu_hardware\nroot_cause: gpu.xid.79\nculprit_hosts: [{hosts[bad_node]}]\nculprit_ranks: [{bad_rank}]\n"
    (out / "expected.yaml").write_text(expected)
    total = 0
    for n, host in enumerate(hosts):
        lines = []
        for i in range(lines_per_node - 8):
            sec = 60 + i * 2
            mm, ss = divmod(sec, 60)
            rank = n * 8 + (i % 8)
            kind = i % 5
            if kind < 3:
                lines.append(
                    f"[rank{rank}]:[I1130 01:{mm:02d}:{ss:02d}.{rnd.randrange(10**6):06d} {4000 + i % 8} train.py:212] "
                    f"step {i} loss {2 + rnd.random():.4f} lr 3.0e-04 grad_norm {rnd.random():.3f} tokens/s {rnd.randrange(90000, 99999)}"
                )
            elif kind == 3:
                lines.append(
                    f"{host}:{4000 + i % 8}:{4100 + i % 8} [{i % 8}] NCCL INFO Channel {i % 32:02d}/0 : "
                    f"{rank}[{i % 8}] -> {rank + 1}[{(i + 1) % 8}] via P2P/CUMEM/read"
                )
            else:
                lines.append(f"[Mon Nov 30 01:{mm:02d}:{ss:02d} 2026] perf: interrupt took too long ({rnd.randrange(2500, 9000)} > 2500), lowering kernel.perf_event_max_sample_rate")
        for g in range(8):
            rank = n * 8 + g
            if rank == bad_rank:
                continue
            ms = 600_000 + rnd.randrange(5, 900)
            sec = 20 * 60 + rnd.randrange(0, 3)
            lines.append(
                f"[rank{rank}]:[E1130 01:{sec // 60:02d}:{sec % 60:02d}.{rnd.randrange(10**6):06d} {4000 + g} ProcessGroupNCCL.cpp:632] "
                f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88412, OpType=ALLREDUCE, "
                f"NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for {ms} milliseconds before timing out."
            )
        if n == bad_node:
            lines.append(f"[Mon Nov 30 01:10:00 2026] NVRM: GPU at PCI:0000:9c:00: GPU-00000000-0000-4000-8000-00000000b0{bad_gpu:02d}")
            lines.append("[Mon Nov 30 01:10:00 2026] NVRM: Xid (PCI:0000:9c:00): 79, pid=0, GPU has fallen off the bus.")
            metrics = out / "metrics" / host
            metrics.mkdir(parents=True, exist_ok=True)
            csv_lines = ["timestamp, index, uuid, pci.bus_id, name"]
            for g in range(8):
                pci = "00000000:9C:00.0" if g == bad_gpu else f"00000000:{0x10 + g:02X}:00.0"
                csv_lines.append(f"2026/11/30 01:00:05.000, {g}, GPU-00000000-0000-4000-8000-00000000b0{g:02d}, {pci}, NVIDIA H200")
            (metrics / "nvidia-smi-query-gpu.csv").write_text("\n".join(csv_lines) + "\n")
        host_dir = out / "logs" / host
        host_dir.mkdir(parents=True, exist_ok=True)
        (host_dir / "train.log").write_text("\n".join(lines) + "\n")
        total += len(lines)
    return {"lines": total, "bad_host": hosts[bad_node], "bad_rank": bad_rank}


def run_once(bundle: Path, store: bool) -> dict:
    """One end-to-end replay in this process; returns its figures."""
    from streams.replay import replay_bundle

    warm = warm_up()  # the pack loaded and its keyword sets compiled, as in a running service
    t0, c0 = time.perf_counter(), time.process_time()
    result = replay_bundle(bundle)
    if store:
        from sinks.clickhouse import ClickHouseSink

        sink = ClickHouseSink(f"chdb://{tempfile.mkdtemp(prefix='fs-bench-ch-')}")
        sink.write_observations(result.observations)
        sink.write_events(result.events)
        sink.write_attributions([result.attribution])
        sink.close()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    att = result.attribution
    return {
        "seconds": elapsed,
        "cpu": cpu,
        "warm_up": warm,
        "lines": result.lines_read,
        "events": len(result.events),
        "rss_mib": peak_rss_mib(),
        "root_cause": att.root_cause.code,
        "hosts": att.culprits.hosts,
        "ranks": att.culprits.ranks,
        "quality": att.quality,
    }


def floor_once(bundle: Path) -> dict:
    """The floor: read every log file and count keyword-prefilter matches, nothing else."""
    import polars as pl

    from correlators.rules import load_rule_pack

    import re

    pattern = "|".join(re.escape(k) for k in load_rule_pack().prefilter_keywords)
    t0, c0 = time.perf_counter(), time.process_time()
    lines = matched = 0
    for path in sorted((bundle / "logs").rglob("*")):
        if path.is_file():
            series = pl.Series(path.read_bytes().decode("utf-8", "replace").split("\n"))
            lines += len(series)
            matched += int(series.str.contains(pattern).sum())
    return {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "lines": lines, "matched": matched}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=2048)
    parser.add_argument("--lines-per-node", type=int, default=500)
    parser.add_argument("--store", action="store_true", help="also write to embedded ClickHouse")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        figures = floor_once(Path(args.child)) if args.floor else run_once(Path(args.child), args.store)
        print(json.dumps(figures))
        return
    with tempfile.TemporaryDirectory(prefix="fs-bench-") as tmp:
        bundle = Path(tmp) / "bundle"
        t0 = time.perf_counter()
        facts = generate(bundle, args.nodes, args.lines_per_node)
        print(f"generated {facts['lines']:,} lines for {args.nodes} nodes x 8 GPUs in {time.perf_counter() - t0:.1f} s")

        def child(extra: list[str]) -> dict:
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(bundle), *extra],
                check=True, capture_output=True, text=True,
            )
            return json.loads(out.stdout.strip().splitlines()[-1])

        runs = [child(["--store"] if args.store else []) for _ in range(args.runs)]
        floors = [child(["--floor"]) for _ in range(args.runs)]
    med = statistics.median(r["seconds"] for r in runs)
    floor = statistics.median(f["seconds"] for f in floors)
    last = runs[-1]

    def correct(run: dict) -> bool:
        return (run["root_cause"] == "gpu.xid.79" and run["hosts"] == [facts["bad_host"]]
                and run["ranks"] == [facts["bad_rank"]] and run["quality"] == "definitive")

    wrong = [i for i, run in enumerate(runs) if not correct(run)]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"lines: {last['lines']:,}  events: {last['events']:,}  runs: {args.runs}  store: {args.store}")
    print(f"end to end: median {med:.3f} s = {last['lines'] / med:,.0f} lines/s (after a warm-up replay of "
          f"{statistics.median(r['warm_up'] for r in runs):.2f} s, not counted)")
    print(f"peak RSS (child, VmHWM): median {statistics.median(r['rss_mib'] for r in runs):,.0f} MiB")
    print(f"floor (read + keyword scan only): median {floor:.3f} s = {last['lines'] / floor:,.0f} lines/s")
    print(f"end to end / floor time ratio: {med / floor:.2f}x")
    cpu, cpu_floor = statistics.median(r["cpu"] for r in runs), statistics.median(f["cpu"] for f in floors)
    print(f"process CPU time (all threads; steadier than wall time on a shared machine): end to end {cpu:.3f} s, "
          f"floor {cpu_floor:.3f} s, floor / end to end = {cpu_floor / cpu:.2f}")
    for i, run in enumerate(runs):
        print(f"verdict of run {i + 1}: {run['root_cause']} hosts={run['hosts']} ranks={run['ranks']} "
              f"quality={run['quality']} -> {'WRONG' if i in wrong else 'CORRECT'}")
    if wrong:
        sys.exit(1)


if __name__ == "__main__":
    main()
