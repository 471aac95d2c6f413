"""Throughput of the bundle reader's fast path (keywords) on a synthetic 1,000,000-line log.

Builds a bundle in a temp dir: one host, one file mixing dmesg -T, NCCL INFO, glog and
untimed lines, with ~2% of lines carrying a keyword (Xid lines, NCCL WARN lines and a few
rank-prefixed tracebacks). Prints lines/s for the fast path and, for scale, the full path.

    python3 bench/read_scan.py [n_lines]
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from connectors.bundle import BundleConnector

KEYWORDS = ["Xid", "NCCL WARN", "Traceback", "fallen off the bus"]


def build(root: Path, n: int) -> None:
    rng = random.Random(7)
    (root / "logs" / "node-a01").mkdir(parents=True)
    (root / "workload.yaml").write_text(
        "workload_id: bench\nstate: FAILED\nstart: 2026-11-30T01:20:00Z\nnodes: [node-a01]\n"
    )
    out = []
    i = 0
    while i < n:
        sec = i // 1000
        stamp = f"[Mon Nov 30 {1 + sec // 3600 % 20:02d}:{sec // 60 % 60:02d}:{sec % 60:02d} 2026]"
        r = rng.random()
        if r < 0.012:
            out.append(f"{stamp} NVRM: Xid (PCI:0000:9c:00): 79, pid=0, GPU has fallen off the bus.")
        elif r < 0.018:
            out.append(f"node-a01:528:{i % 900} [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got "
                       "completion with error 12, opcode 1, len 0, vendor err 129")
        elif r < 0.0185 and i + 6 < n:
            out += ["[rank3]: Traceback (most recent call last):",
                    '[rank3]:   File "/path/train.py", line 8, in <module>',
                    "[rank3]:     dist.all_reduce(x)",
                    "[rank3]: torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote",
                    "[rank3]: ncclRemoteError: A call failed possibly due to a network error",
                    "[rank3]: Last error:",
                    "[rank3]: socketProgressOpt: Call to recv from 10.0.0.x<1> failed"]
            i += 6
        elif r < 0.5:
            out.append(f"{stamp} mlx5_core 0000:01:00.0: some ordinary kernel message {i}")
        elif r < 0.8:
            out.append(f"node-a01:528:{i % 900} [0] NCCL INFO Channel {i % 32:02d}/0 : 0[0] -> 1[1] via P2P/IPC")
        else:
            out.append(f"I1130 01:{sec // 60 % 60:02d}:{sec % 60:02d}.{i % 1000000:06d} 550 "
                       "torch/distributed/elastic/agent.py:100] heartbeat ok")
        i += 1
    (root / "logs" / "node-a01" / "big.log").write_text("\n".join(out[:n]) + "\n")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "bench-bundle"
        build(root, n)
        for label, kw in (("fast path", KEYWORDS), ("full path", None)):
            conn = BundleConnector(root, keywords=kw)
            t0 = time.perf_counter()
            count = sum(1 for _ in conn.observations())
            dt = time.perf_counter() - t0
            print(f"{label}: {conn.lines_read} lines, {count} observations in {dt:.2f} s "
                  f"-> {conn.lines_read / dt:,.0f} lines/s")
            if kw is None:
                break


if __name__ == "__main__":
    main()
