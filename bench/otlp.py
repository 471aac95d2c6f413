"""Throughput of ``connect otlp``'s decoding and mapping (connectors/otlp.py) against two floors
measured in the same run: ``connect files`` reading the same lines from a file (what the
OpenTelemetry path replaces), and the bare protobuf parse of the same messages.

Builds one log of ``n`` lines (the mix of ``bench/read_scan.py``: dmesg -T, NCCL INFO, glog,
XID lines and rank tracebacks), sends it as the Collector's filelog receiver would (one record a
line, ``log.file.path`` and ``log.file.record_number``, 1,000 records a message, encoding
``otlp_proto``), and times ``OtlpLogs.add`` + ``emit`` over the messages (no Kafka: the
consumer's cost is the same for every input and is in ``bench/stream.py``), without and with
the edge prefilter. Checks that both paths give the same records.

    python3 bench/otlp.py [n_lines] [--runs R]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1 import logs_pb2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.read_scan import build  # noqa: E402 -- after the path set-up
from connectors.files import FilesConnector  # noqa: E402
from connectors.otlp import OtlpLogs  # noqa: E402
from connectors.prefilter import EdgePrefilter  # noqa: E402

BATCH = 1000


def messages(path: Path, host: str) -> list[bytes]:
    """The filelog receiver's messages of ``path``'s lines."""
    lines = path.read_text().splitlines()
    observed = path.stat().st_mtime_ns
    out = []
    for start in range(0, len(lines), BATCH):
        req = ExportLogsServiceRequest()
        rl = req.resource_logs.add()
        rl.resource.attributes.append(KeyValue(key="k8s.node.name", value=AnyValue(string_value=host)))
        sl = rl.scope_logs.add()
        for i, line in enumerate(lines[start:start + BATCH], start + 1):
            rec = sl.log_records.add(observed_time_unix_nano=observed)
            rec.body.string_value = line
            rec.attributes.append(KeyValue(key="log.file.path", value=AnyValue(string_value=str(path))))
            rec.attributes.append(KeyValue(key="log.file.record_number", value=AnyValue(int_value=i)))
        out.append(req.SerializeToString())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root, args.n)
        path = root / "logs" / "node-a01" / "big.log"
        msgs = messages(path, "node-a01")
        best = {"otlp": float("inf"), "otlp --prefilter": float("inf"), "files": float("inf"), "parse": float("inf")}
        prefilter = EdgePrefilter()
        for _ in range(args.runs):
            t = time.perf_counter()
            for raw in msgs:
                logs_pb2.LogsData.FromString(raw)
            best["parse"] = min(best["parse"], time.perf_counter() - t)
            t = time.perf_counter()
            files = list(FilesConnector([path], host="node-a01", cursor=None, year=2026).observations())
            best["files"] = min(best["files"], time.perf_counter() - t)
            t = time.perf_counter()
            logs = OtlpLogs(year=2026)
            otlp = []
            for i, raw in enumerate(msgs):
                logs.add(raw, where=("otlp_logs", 0, i))
                otlp += logs.emit()
            otlp += logs.emit(final=True)
            best["otlp"] = min(best["otlp"], time.perf_counter() - t)
            t = time.perf_counter()
            logs = OtlpLogs(year=2026, prefilter=prefilter)
            kept = []
            for i, raw in enumerate(msgs):
                logs.add(raw, where=("otlp_logs", 0, i))
                kept += logs.emit()
            kept += logs.emit(final=True)
            best["otlp --prefilter"] = min(best["otlp --prefilter"], time.perf_counter() - t)
            same = [(o.body, o.observed_at, o.time_source) for o in otlp] == [(o.body, o.observed_at, o.time_source) for o in files]
            assert same, "connect otlp and connect files gave different records"
        n = args.n
        print(f"machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"{n:,} lines in {len(msgs)} OTLP messages ({sum(map(len, msgs)) / 1e6:.1f} MB), {len(otlp):,} records, "
              "the same records both ways")
        print(f"--prefilter published {len(kept):,} of them")
        for name in best:
            print(f"{name:17s} {n / best[name]:>12,.0f} lines/s ({best[name]:.3f} s, best of {args.runs})")
        print(f"otlp / files floor: {best['files'] / best['otlp']:.2f}; otlp / protobuf parse floor: "
              f"{best['parse'] / best['otlp']:.3f}")


if __name__ == "__main__":
    main()
