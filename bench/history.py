"""Fleet-history benchmark: replaying an hour of a fleet's logs, from files and from chDB.

Generates a fleet bundle: ``--nodes`` nodes x 8 GPUs, each with ``--files`` small log files
(training glog lines, NCCL INFO lines, ``dmesg -T`` kernel chatter, RFC 3339 syslog) over one
hour, two jobs (``workload.yaml``: job-h1 on the first half of the nodes, ``workloads/job-h2.yaml``
on the rest) and a handful of incidents: a GPU falls off the bus (XID 79) on one node of job-h1
and every other rank of job-h1 logs the NCCL watchdog timeout ten minutes later; job-h2 sees
InfiniBand completion errors (NCCL WARN NET/IB error 12) on two nodes and its watchdog
timeouts. About a thousand lines per million hold a keyword of the rule pack; the rest is noise.

Figures, each the median of ``--runs`` runs in fresh processes, floor and engine alternated in
the same run of this script so they share the machine's load; each line also gives the process
CPU time of both (all threads, chDB's included), steadier than wall time on a shared machine:

Each timed replay runs after one small replay in the same process (:func:`bench.common.warm_up`:
the rule pack loaded and its Hyperscan sets compiled, as in a running service; the floors warm
their own literal set the same way).

* ``files:`` lines/s of the bundle replay end to end (:func:`streams.replay.replay_bundle`:
  read, scan, extract, correlate, decide), and the bare scan floor of the same engine: read
  every log file's bytes and find the keyword occurrences with the same Hyperscan literal set
  (:meth:`correlators.rules.scan.LiteralSet.match_ends`), nothing else;
* ``chdb:`` rows/s of ``replay --from-clickhouse --cluster fleet`` end to end over an
  ``observations`` table holding one row per log line (the candidates and facts written by the
  sink, the noise rows generated in SQL), and the bare scan floor of the same engine: one
  ``SELECT count() ... WHERE multiMatchAny(body, <the escaped literals>)`` over the table, with
  the literal set the replay pushes down (the pack's literals holding no other one). Both in
  a fresh chDB process, so both include compiling that pattern set (Hyperscan, about half a
  second on 2 cores);
* ``chdb-compiled:`` the same two with the pattern set compiled before the timed part, as a
  ClickHouse server holds it in its pattern cache between queries.

Usage: ``python3 bench/history.py [--nodes 500] [--files 4] [--lines-per-file 2000] [--runs 3]``
Exits 1 when a verdict is wrong (job-h1: ``gpu.xid.79`` on the bad node and rank).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START = "2026-11-30T01:00:00Z"
T0_NS = 1_796_000_400_000_000_000  # 2026-11-30T01:00:00Z
CLUSTER = "fleet"


def _noise(kind: int, host: str, n: int, i: int, sec: int, rnd: random.Random) -> str:
    mm, ss = divmod(sec % 3600, 60)
    rank = n * 8 + i % 8
    if kind == 0:
        return (f"[rank{rank}]:[I1130 01:{mm:02d}:{ss:02d}.{rnd.randrange(10**6):06d} {4000 + i % 8} train.py:212] "
                f"step {i} loss {2 + rnd.random():.4f} lr 3.0e-04 grad_norm {rnd.random():.3f} tokens/s {rnd.randrange(90000, 99999)}")
    if kind == 1:
        return (f"{host}:{4000 + i % 8}:{4100 + i % 8} [{i % 8}] NCCL INFO Channel {i % 32:02d}/0 : "
                f"{rank}[{i % 8}] -> {rank + 1}[{(i + 1) % 8}] via P2P/CUMEM/read")
    if kind == 2:
        return (f"[Mon Nov 30 01:{mm:02d}:{ss:02d} 2026] perf: interrupt took too long ({rnd.randrange(2500, 9000)} > 2500), "
                "lowering kernel.perf_event_max_sample_rate")
    return (f"2026-11-30T01:{mm:02d}:{ss:02d}.{rnd.randrange(10**6):06d}+00:00 {host} systemd[1]: "
            f"Started Session {i} of User slurm.")


def generate(out: Path, nodes: int, files: int, lines_per_file: int, seed: int = 11) -> dict:
    """Write the fleet bundle under ``out``; returns its facts (lines, candidates, culprits)."""
    from correlators.rules import load_rule_pack
    from correlators.rules.scan import LiteralSet

    words = LiteralSet(load_rule_pack().prefilter_keywords)
    rnd = random.Random(seed)
    hosts = [f"node-h{i:04d}" for i in range(nodes)]
    half = nodes // 2
    (out / "logs").mkdir(parents=True)
    (out / "workloads").mkdir()

    def spec(wid: str, members: list[str], end: str) -> str:
        return "\n".join([f"workload_id: {wid}", "scheduler: slurm", f"cluster: {CLUSTER}", "state: FAILED",
                          f"start: {START}", f"end: {end}", "ranks_per_node: 8", "nodes:",
                          *[f"  - {h}" for h in members]]) + "\n"

    (out / "workload.yaml").write_text(spec("job-h1", hosts[:half], "2026-11-30T01:25:00Z"))
    (out / "workloads" / "job-h2.yaml").write_text(spec("job-h2", hosts[half:], "2026-11-30T01:45:00Z"))
    bad_node, bad_gpu = half // 3, 5
    bad_rank = bad_node * 8 + bad_gpu
    ib_nodes = {half + (nodes - half) // 4, half + (nodes - half) // 2}
    for probe in range(4):  # the noise holds no keyword of the pack
        line = _noise(probe, hosts[0], 0, 1, 61, rnd)
        if words.search(line):
            raise SystemExit(f"noise line holds a keyword of the pack: {line}")
    total = 0
    for n, host in enumerate(hosts):
        own = out / "logs" / host
        own.mkdir()
        in_h1 = n < half
        for f, name in enumerate(("train.log", "nccl.log", "kern.log", "syslog")[:files] if files <= 4 else
                                 [f"part{k}.log" for k in range(files)]):
            kind = f % 4
            lines = [_noise(kind, host, n, i, i * 3600 // lines_per_file, rnd) for i in range(lines_per_file)]
            if kind == 0:  # the watchdog timeouts of the job's ranks
                end_min = 20 if in_h1 else 40
                for g in range(8):
                    rank = n * 8 + g
                    if in_h1 and rank == bad_rank:
                        continue
                    if not in_h1 and n not in ib_nodes and g != 0:
                        continue
                    sec = end_min * 60 + rnd.randrange(0, 3)
                    lines.insert(int(lines_per_file * sec / 3600), (
                        f"[rank{rank}]:[E1130 01:{sec // 60:02d}:{sec % 60:02d}.{rnd.randrange(10**6):06d} {4000 + g} "
                        f"ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective operation timeout: "
                        f"WorkNCCL(SeqNum=88412, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, "
                        f"Timeout(ms)=600000) ran for {600_000 + rnd.randrange(5, 900)} milliseconds before timing out."))
            if kind == 2 and in_h1 and n == bad_node:
                at = int(lines_per_file * 600 / 3600)
                lines[at:at] = [
                    f"[Mon Nov 30 01:10:00 2026] NVRM: GPU at PCI:0000:9c:00: GPU-00000000-0000-4000-8000-0000000{bad_gpu:05d}",
                    "[Mon Nov 30 01:10:00 2026] NVRM: Xid (PCI:0000:9c:00): 79, pid=0, GPU has fallen off the bus."]
            if kind == 1 and n in ib_nodes:
                at = int(lines_per_file * 1800 / 3600)
                lines.insert(at, f"{host}:4003:4190 [3] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion "
                                 f"from peer 10.0.0.{n % 250}<53522> with error 12, opcode 1, len 0, vendor err 129")
            (own / name).write_text("\n".join(lines) + "\n")
            total += len(lines)
    return {"lines": total, "bad_host": hosts[bad_node], "bad_rank": bad_rank, "nodes": nodes}


# -- children: one measurement each, in a fresh process ------------------------------------------


def files_floor(bundle: Path) -> dict:
    """Read every log file's bytes and find the keyword occurrences, nothing else."""
    from correlators.rules import load_rule_pack
    from correlators.rules.scan import LiteralSet, minimal_literals

    # the reader's own set: the pack's literals that fit in a line and hold no other one
    words = LiteralSet(minimal_literals(k for k in load_rule_pack().prefilter_keywords if "\n" not in k))
    words.match_ends(b"warm up the compiled set")
    t0, c0 = time.perf_counter(), time.process_time()
    hits = 0
    for folder, _dirs, names in os.walk(bundle / "logs"):
        for name in names:
            hits += len(words.match_ends(Path(folder, name).read_bytes()))
    return {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "hits": hits}


def files_replay(bundle: Path) -> dict:
    """The bundle replay end to end."""
    from bench.common import warm_up
    from streams.replay import replay_bundle

    warm_up()  # the pack loaded and its keyword sets compiled, as in a running service
    t0, c0 = time.perf_counter(), time.process_time()
    result = replay_bundle(bundle)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu": cpu, "lines": result.lines_read, **_verdicts(result.attributions)}


def _verdicts(verdicts) -> dict:
    out = {}
    for v in verdicts:
        if v.scope.kind == "workload":
            out[v.scope.id] = {"root_cause": v.root_cause.code, "hosts": v.culprits.hosts, "ranks": v.culprits.ranks,
                               "quality": v.quality}
    return {"verdicts": out}


def _pushed_down_literals() -> list[str]:
    """The set the replay pushes down: the pack's literals holding no other one, escaped."""
    from correlators.rules import load_rule_pack
    from correlators.rules.scan import minimal_literals

    return sorted({re.escape(w) for w in minimal_literals(load_rule_pack().prefilter_keywords)})


def _compile_patterns(sink) -> None:
    """Have the engine compile the pushed-down pattern set (a one-row query): what a ClickHouse
    server holds in its pattern cache between queries, and a fresh chDB process has not."""
    sink.client.query("SELECT multiMatchAny('', {lits:Array(String)})", parameters={"lits": _pushed_down_literals()})


def chdb_floor(url: str, compiled: bool = False) -> dict:
    """One server-side scan of the table with the escaped literals (``compiled``: the pattern
    set compiled before the timed scan)."""
    from sinks.clickhouse import ClickHouseSink

    literals = _pushed_down_literals()
    with ClickHouseSink(url) as sink:
        if compiled:
            _compile_patterns(sink)
        t0, c0 = time.perf_counter(), time.process_time()
        rows, hits = sink.client.query(
            f"SELECT count(), countIf(multiMatchAny(body, {{lits:Array(String)}})) FROM {sink.database}.observations",
            parameters={"lits": literals}).result_rows[0]
        return {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "rows": rows, "hits": hits}


def chdb_replay(url: str, compiled: bool = False) -> dict:
    """``replay --from-clickhouse --cluster fleet`` end to end (the prefilter pushed down;
    ``compiled``: its pattern set compiled before the timed replay)."""
    from bench.common import warm_up
    from correlators.config import EngineConfig
    from sinks.clickhouse import ClickHouseSink
    from streams.replay import replay_observations
    from streams.sources import ReadReport, observations_from_clickhouse

    config = EngineConfig.default()
    warm_up()  # the pack loaded and its keyword sets compiled, as in a running service
    with ClickHouseSink(url) as sink:
        rows = sink.client.query(f"SELECT count() FROM {sink.database}.observations").result_rows[0][0]
        if compiled:
            _compile_patterns(sink)
        t0, c0 = time.perf_counter(), time.process_time()
        report = ReadReport()
        observations = list(observations_from_clickhouse(sink, config, cluster=CLUSTER, report=report, prefilter=True))
        verdicts, _, _ = replay_observations(observations, config)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu": cpu, "rows": rows, "read": report.read, **_verdicts(verdicts)}


def store(bundle: Path, url: str, facts: dict) -> int:
    """Fill the chDB ``observations`` table: the bundle's facts, candidates and coverage
    through the sink, then one noise row per remaining log line, generated in SQL."""
    from connectors.publish import bundle_records
    from correlators.rules import load_rule_pack
    from sinks.clickhouse import ClickHouseSink

    records, _ = bundle_records(bundle, keywords=load_rule_pack().prefilter_keywords)
    logs = sum(1 for o in records if o.kind == "log_line")
    noise = facts["lines"] - logs
    nodes = facts["nodes"]
    with ClickHouseSink(url) as sink:
        sink.write_observations(records)
        db = sink.database
        body = ("multiIf(number % 4 = 0, concat('[rank', toString(h * 8 + number % 8), ']:[I1130 01:', "
                "leftPad(toString(intDiv(s, 60)), 2, '0'), ':', leftPad(toString(s % 60), 2, '0'), "
                "'.000000 4000 train.py:212] step ', toString(number), ' loss 2.1234 lr 3.0e-04'), "
                "number % 4 = 1, concat(host, ':4000:4100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read'), "
                "number % 4 = 2, concat('[Mon Nov 30 01:', leftPad(toString(intDiv(s, 60)), 2, '0'), ':', "
                "leftPad(toString(s % 60), 2, '0'), ' 2026] perf: interrupt took too long (3000 > 2500)'), "
                "concat('2026-11-30T01:', leftPad(toString(intDiv(s, 60)), 2, '0'), ':', leftPad(toString(s % 60), 2, '0'), "
                "'.000000+00:00 ', host, ' systemd[1]: Started Session 1 of User slurm.'))")
        sink.client.command(f"""
            INSERT INTO {db}.observations (observation_id, schema_version, kind, observed_at, time_source,
                time_quality, host, cluster, workload_id, source_connector, source_instance, format,
                position_file, position_line, record)
            SELECT id, 2, 'log_line', fromUnixTimestamp64Nano(at), 'line', 1.0, host, '{CLUSTER}', wid, 'bundle',
                '{CLUSTER}/job-h1', 'unknown', file, line,
                concat('{{"attributes":{{}},"body":', toJSONString(b), ',"cluster":"{CLUSTER}","fabric_port":null,',
                       '"format":"unknown","gpu":null,"host":"', host, '","kind":"log_line","metric":null,',
                       '"observation_id":"', id, '","observed_at":', toString(at), ',"observed_at_utc":"',
                       formatDateTime(fromUnixTimestamp64Nano(at), '%Y-%m-%dT%H:%i:%S.000000000Z'), '",',
                       '"position":{{"file":"', file, '","line":', toString(line), ',"offset":null,"partition":null,',
                       '"topic":null}},"rank":null,"schema_version":2,"source":{{"connector":"bundle",',
                       '"instance":"{CLUSTER}/job-h1"}},"time_quality":1.0,"time_source":"line","workload_id":"', wid, '"}}')
            FROM (
                SELECT number, h, host, s, concat('obs-noise-', hex(number)) AS id,
                       toInt64({T0_NS}) + toInt64(s) * 1000000000 AS at,
                       if(h < {nodes // 2}, 'job-h1', 'job-h2') AS wid,
                       concat('logs/', host, '/noise.log') AS file, toInt64(intDiv(number, {nodes}) + 1) AS line,
                       {body} AS b
                FROM (SELECT number, number % {nodes} AS h, concat('node-h', leftPad(toString(h), 4, '0')) AS host,
                             toUInt32(intDiv(number, {nodes}) * 3600 / greatest(1, intDiv({noise}, {nodes}))) % 3600 AS s
                      FROM numbers({noise}))
            )""")
        sink.client.command(f"OPTIMIZE TABLE {db}.observations FINAL")
        return int(sink.client.query(f"SELECT count() FROM {db}.observations").result_rows[0][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--files", type=int, default=4, help="log files per node")
    parser.add_argument("--lines-per-file", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-chdb", action="store_true", help="files only")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, where = args.child
        fn = {"files-floor": files_floor, "files": files_replay, "chdb-floor": chdb_floor, "chdb": chdb_replay,
              "chdb-floor-compiled": functools.partial(chdb_floor, compiled=True),
              "chdb-compiled": functools.partial(chdb_replay, compiled=True)}[what]
        print(json.dumps(fn(Path(where) if what.startswith("files") else where)))
        return
    with tempfile.TemporaryDirectory(prefix="fs-history-") as tmp:
        bundle = Path(tmp) / "fleet"
        t0 = time.perf_counter()
        facts = generate(bundle, args.nodes, args.files, args.lines_per_file)
        print(f"generated {facts['lines']:,} lines in {args.nodes * args.files:,} files "
              f"({args.nodes} nodes x 8 GPUs) in {time.perf_counter() - t0:.1f} s")

        def child(what: str, where: str) -> dict:
            out = subprocess.run([sys.executable, __file__, "--child", what, where],
                                 check=True, capture_output=True, text=True)
            return json.loads(out.stdout.strip().splitlines()[-1])

        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
        wrong = []
        floors, runs = [], []
        for _ in range(args.runs):
            floors.append(child("files-floor", str(bundle)))
            runs.append(child("files", str(bundle)))
        wrong += _check(runs, facts)
        _report("files", "lines", facts["lines"], runs, floors)
        if not args.no_chdb:
            url = f"chdb://{Path(tmp) / 'chdb'}"
            t0 = time.perf_counter()
            rows = store(bundle, url, facts)
            print(f"stored {rows:,} observations rows in chDB in {time.perf_counter() - t0:.1f} s")
            for suffix in ("", "-compiled"):
                floors, runs = [], []
                for _ in range(args.runs):
                    floors.append(child("chdb-floor" + suffix, url))
                    runs.append(child("chdb" + suffix, url))
                wrong += _check(runs, facts)
                _report("chdb" + suffix, "rows", rows, runs, floors)
            print(f"chdb rows read by the replay (after the push-down): {runs[-1]['read']:,}")
        for job, v in sorted(runs[-1]["verdicts"].items()):
            print(f"verdict {job}: {v['root_cause']} hosts={v['hosts']} ranks={v['ranks']} quality={v['quality']}")
    if wrong:
        print("WRONG verdicts: " + "; ".join(wrong))
        sys.exit(1)


def _check(runs: list[dict], facts: dict) -> list[str]:
    bad = []
    for i, run in enumerate(runs):
        v = run["verdicts"].get("job-h1", {})
        if (v.get("root_cause") != "gpu.xid.79" or v.get("hosts") != [facts["bad_host"]]
                or v.get("ranks") != [facts["bad_rank"]]):
            bad.append(f"run {i + 1}: job-h1 {v}")
    return bad


def _report(label: str, unit: str, n: int, runs: list[dict], floors: list[dict]) -> None:
    med = statistics.median(r["seconds"] for r in runs)
    floor = statistics.median(f["seconds"] for f in floors)
    cpu = statistics.median(r["cpu"] for r in runs)
    cpu_floor = statistics.median(f["cpu"] for f in floors)
    print(f"{label}: {n / med:,.0f} {unit}/s end to end ({med:.3f} s for {n:,} {unit}); bare scan floor "
          f"{n / floor:,.0f} {unit}/s ({floor:.3f} s); end to end / floor = {floor / med:.2f}; process CPU "
          f"{cpu:.3f} s, floor {cpu_floor:.3f} s, ratio {cpu_floor / cpu:.2f}")


if __name__ == "__main__":
    main()
