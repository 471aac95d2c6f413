"""Fabric benchmark: a 4,096-host two-tier fat tree, every port's counters every 10 s
for an hour of event time, and one flapping link.

**The fabric** (``--hosts 4096 --radix 64``): each host ``node-NNNN`` has one HCA port
(``mlx5_0`` port 1, netdev ``ibp12s0``, PCI ``0000:0c:00.0``) cabled to a leaf switch;
a leaf (``leaf-NNN``, ``radix`` ports) has ``radix/2`` down ports (1..32, to hosts) and
``radix/2`` up ports (33..64), one to each spine; a spine (``spine-NN``) has one port per leaf
(128 ports: a 4,096-host two-tier tree of 64-port leaves needs director-class spines). So
4,096 hosts -> 128 leaves, 32 spines; 4,096 host ports + 8,192 leaf ports + 4,096 spine ports
= 16,384 ports. ``topology.yaml`` lists every host cable (``links``, with netdev and PCI) and
every leaf-spine cable (``uplinks``); ``workload.yaml`` holds one job on all hosts (8
ranks/host) and each host's IP (``10.0.<i // 200>.<10 + i % 200>``).

**Counters** (``*.counters.csv``, format of ``connectors.counters.read_counter_csv``: header
``time,node,port,<sysfs counter names>``, cumulative raw values, time in epoch seconds):
``fabric/<switch>/ports.counters.csv`` per switch and ``metrics/<host>/hca.counters.csv`` per
host, rows in poll order (all ports at t, then all ports at t+10 s, as a collector appends
them -- so the reader has to sort), 360 polls (02:00:00..02:59:50Z) of 13 counters: 8 IB PMA
error counters and 5 traffic counters (``port_xmit/rcv_data``, ``_packets``,
``port_xmit_wait``), which grow every poll. 16,384 ports x 360 = 5,898,240 counter samples
(rows; x 13 = 76.7 M counter values). Error counters are flat except:

* **noise** on 12 ports (4 host, 6 leaf, 2 spine ports): ``symbol_error`` +1..3 every
  400 s, ``port_rcv_errors`` +1 / ``port_xmit_discards`` +1..20 on some -- each increment is a
  ``fabric.port_errors`` event, but no 300 s window crosses a threshold (10 symbol errors,
  10 rcv errors, 100 discards): no fault may come of it;
* **the flapping link** ``node-1337/mlx5_0/1`` <-> ``leaf-041/26``: two link-down transitions
  (02:41:10 and 02:42:40, up again 4 s / 7 s later) -- ``link_downed`` +1 after each on both
  ends, ``symbol_error`` bursts (+57, +131, +9) and ``link_error_recovery`` +2; the host's
  dmesg logs the four mlx5 ``Link down`` / ``Link up`` lines; 8 peers log NCCL error 12
  (``Got completion from peer 10.0.6.147<38560> with status=12 ...``) at 02:43:05; the job
  fails at 02:45:00 (it started at 00:30, hours before: not the RoCE GID-index config case).

**The verdict** must be: workload root cause ``fabric.port.flapping`` (domain ``fabric``,
quality ``probable``) naming ``node-1337`` and ``leaf-041/26``, and exactly one incident, which
the workload verdict names and which holds ``leaf-041/26``. ``expected.yaml`` says so too, so
``faultstream score`` works on a bundle kept with ``--out``. Every replay run is checked
(:func:`check`).

**Measured** (each run in a fresh process, median of ``--runs``): ``streams.replay.replay_bundle``
end to end -- counter samples/s (CSV rows read / wall time; the target is >= 1,000,000), events/s,
lines/s (every physical line of the bundle), peak RSS of the child (``VmHWM``, see
:func:`_rss_mib`); and the
floor: the counter files alone, read and their deltas computed as the bundle reader does
(batches of files of one header, ``connectors.counters.read_counter_batch``; a file that
cannot be batched by ``read_counter_csv`` + ``table_observations``; file names and sides
prepared before the clock starts), with the ratio end to end / floor. With ``--profile``, or when the target is missed, one more child runs under
cProfile and the top 15 functions (by own time and by cumulative time) are printed, after a
breakdown by phase measured without the profiler (:func:`phases_once`).

Usage::

    python3 bench/fabric.py [--runs 3] [--hosts 4096] [--radix 64] [--minutes 60]
                            [--out DIR] [--profile]

Exits 1 when the verdict of any run is wrong or missing (the throughput target is reported,
not asserted).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import peak_rss_mib  # noqa: E402 -- after the path set-up

TARGET = 1_000_000  # counter samples/s the fabric path must sustain
INTERVAL_S = 10
JOB_START = dt.datetime(2026, 11, 30, 0, 30, tzinfo=dt.timezone.utc)
T0 = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.timezone.utc)  # first counter poll
FLAPS = [(dt.datetime(2026, 11, 30, 2, 41, 10, tzinfo=dt.timezone.utc), 4),
         (dt.datetime(2026, 11, 30, 2, 42, 40, tzinfo=dt.timezone.utc), 7)]  # (down, seconds until up)
NCCL_AT = dt.datetime(2026, 11, 30, 2, 43, 5, tzinfo=dt.timezone.utc)
JOB_END = dt.datetime(2026, 11, 30, 2, 45, 0, tzinfo=dt.timezone.utc)
ERROR_COUNTERS = ["symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                  "port_rcv_remote_physical_errors", "port_xmit_discards",
                  "local_link_integrity_errors", "excessive_buffer_overrun_errors"]
TRAFFIC_COUNTERS = ["port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                    "port_xmit_wait"]
COUNTERS = ERROR_COUNTERS + TRAFFIC_COUNTERS


def host_name(i: int) -> str:
    return f"node-{i:04d}"


def host_ip(i: int) -> str:
    return f"10.0.{i // 200}.{10 + i % 200}"


class Fabric:
    """The tree's shape: hosts -> leaves (``down`` host ports, ``up`` uplinks) -> spines."""

    def __init__(self, hosts: int, radix: int) -> None:
        if radix % 2 or hosts % (radix // 2):
            raise SystemExit("--radix must be even and --hosts a multiple of radix/2")
        self.hosts = hosts
        self.down = self.up = radix // 2
        self.leaves = hosts // self.down
        self.spines = self.up  # one uplink from each leaf to each spine
        self.spine_ports = self.leaves
        self.bad_host = min(1337, hosts - 1)
        self.bad_leaf, self.bad_leaf_port = divmod(self.bad_host, self.down)
        self.bad_leaf_port += 1

    def leaf(self, i: int) -> str:
        return f"leaf-{i:03d}"

    def spine(self, i: int) -> str:
        return f"spine-{i:02d}"

    @property
    def ports(self) -> int:
        return self.hosts + self.leaves * (self.down + self.up) + self.spines * self.spine_ports


def _utc(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _dmesg(t: dt.datetime) -> str:
    return t.strftime("[%a %b %d %H:%M:%S %Y]")


def _series(rng: np.random.Generator, nodes: list[str], ports: list[str], polls: int,
            bumps: dict[tuple[str, str], dict[str, dict[int, int]]]) -> pl.DataFrame:
    """Cumulative counters of ``len(nodes)`` ports (``nodes[k]``/``ports[k]``) over ``polls``
    polls, in poll order (time-major). ``bumps``: (node, port) -> counter -> {poll: increase}."""
    n = len(nodes)
    t0 = int(T0.timestamp())
    cols: dict[str, np.ndarray] = {}
    for c in ERROR_COUNTERS:
        start = np.zeros(n, dtype=np.uint64)
        if c == "link_downed":  # links trained since boot: a few ports went down once
            start[rng.random(n) < 0.05] = 1
        elif c == "symbol_error":  # old errors from before the hour, flat during it
            old = rng.random(n) < 0.02
            start[old] = rng.integers(1, 40, size=int(old.sum()), dtype=np.uint64)
        cols[c] = np.broadcast_to(start[:, None], (n, polls)).copy()
    # traffic: 4-byte words per 10 s at up to ~400 Gb/s, packets ~ words / 1024, wait ticks
    data_x = rng.integers(5_000_000_000, 125_000_000_000, size=(n, polls), dtype=np.uint64)
    data_r = rng.integers(5_000_000_000, 125_000_000_000, size=(n, polls), dtype=np.uint64)
    for name, inc in (("port_xmit_data", data_x), ("port_rcv_data", data_r),
                      ("port_xmit_packets", data_x // np.uint64(1024)), ("port_rcv_packets", data_r // np.uint64(1024)),
                      ("port_xmit_wait", rng.integers(0, 2_000_000, size=(n, polls), dtype=np.uint64))):
        start = rng.integers(1 << 40, 1 << 50, size=n, dtype=np.uint64)
        cols[name] = start[:, None] + np.cumsum(inc, axis=1, dtype=np.uint64)
    index = {(nodes[k], ports[k]): k for k in range(n)}
    for key, per_counter in bumps.items():
        k = index.get(key)
        if k is None:
            continue
        for c, at in per_counter.items():
            for poll, inc in at.items():
                cols[c][k, poll:] += np.uint64(inc)
    times = pl.DataFrame({"time": np.arange(polls, dtype=np.int64) * INTERVAL_S + t0})
    keys = pl.DataFrame({"node": nodes, "port": ports})
    frame = times.join(keys, how="cross", maintain_order="left_right")  # time-major: poll 0 of every port, ...
    return frame.with_columns(pl.Series(c, cols[c].T.ravel()) for c in COUNTERS)


def generate(out: Path, hosts: int, radix: int, minutes: int, seed: int = 4) -> dict:
    """Write the bundle under ``out``; returns its facts (ports, samples, culprit)."""
    rng = np.random.default_rng(seed)
    fab = Fabric(hosts, radix)
    polls = minutes * 60 // INTERVAL_S
    t0 = T0
    out.mkdir(parents=True, exist_ok=True)
    bad = host_name(fab.bad_host)
    bad_leaf = fab.leaf(fab.bad_leaf)
    bad_port = f"{bad_leaf}/{fab.bad_leaf_port}"

    # -- workload.yaml, topology.yaml, expected.yaml
    names = [host_name(i) for i in range(hosts)]
    wl = ["workload_id: job-fabric", "scheduler: slurm", "cluster: bench", "state: FAILED",
          f"start: {_utc(JOB_START)}", f"end: {_utc(JOB_END)}", "ranks_per_node: 8", "nodes:"]
    wl += [f"  - {h}" for h in names]
    wl += ["hosts:"] + [f"  {h}: {{ip: {host_ip(i)}}}" for i, h in enumerate(names)]
    (out / "workload.yaml").write_text("\n".join(wl) + "\n")
    topo = ["links:"]
    for i, h in enumerate(names):
        leaf, p = divmod(i, fab.down)
        topo.append(f"  - {{host: {h}, hca: mlx5_0, host_port: 1, switch: {fab.leaf(leaf)}, "
                    f'switch_port: "{p + 1}", netdev: ibp12s0, pci: "0000:0c:00.0"}}')
    topo.append("uplinks:")
    for leaf in range(fab.leaves):
        for s in range(fab.spines):
            topo.append(f"  - [{fab.leaf(leaf)}/{fab.down + 1 + s}, {fab.spine(s)}/{leaf + 1}]")
    (out / "topology.yaml").write_text("\n".join(topo) + "\n")
    (out / "expected.yaml").write_text(
        "domain: fabric\nroot_cause: fabric.port.flapping\n"
        f"culprit_hosts: [{bad}]\nculprit_ports: [{bad_port}]\nincidents: 1\n"
        f"incident: {{level: port, root_cause: fabric.port.flapping, workloads: [job-fabric], "
        f"culprit_ports: [{bad_port}, {bad}/mlx5_0/1]}}\n"
        "notes: bench/fabric.py synthetic fat tree\n")

    # -- counter bumps: the flapping link (both ends) and sub-threshold noise
    def poll_after(t: dt.datetime) -> int:
        return int((t - t0).total_seconds()) // INTERVAL_S + 1

    (d1, _), (d2, _) = FLAPS
    p1, p2 = poll_after(d1), poll_after(d2)
    bumps: dict[tuple[str, str], dict[str, dict[int, int]]] = {}
    if p2 + 1 < polls:
        flap = {"link_downed": {p1: 1, p2: 1}, "symbol_error": {p1: 57, p2: 131, p2 + 1: 9},
                "link_error_recovery": {p1: 2, p2: 2}}
        bumps[(bad, "mlx5_0/1")] = flap
        bumps[(bad_leaf, str(fab.bad_leaf_port))] = {**flap, "symbol_error": {p1: 61, p2: 127, p2 + 1: 4}}
    noisy: list[tuple[str, str]] = []
    pick = np.random.default_rng(seed + 1)
    for _ in range(4):
        i = int(pick.integers(hosts))
        if i != fab.bad_host:
            noisy.append((host_name(i), "mlx5_0/1"))
    for _ in range(6):
        leaf, p = int(pick.integers(fab.leaves)), int(pick.integers(1, fab.down + fab.up + 1))
        if (leaf, p) != (fab.bad_leaf, fab.bad_leaf_port):
            noisy.append((fab.leaf(leaf), str(p)))
    for _ in range(2):
        noisy.append((fab.spine(int(pick.integers(fab.spines))), str(int(pick.integers(1, fab.spine_ports + 1)))))
    noise_increments = 0
    for n, key in enumerate(noisy):
        per: dict[str, dict[int, int]] = {"symbol_error": {}}
        for poll in range(int(pick.integers(5, 35)), polls, 40):  # one increment per 400 s
            per["symbol_error"][poll] = int(pick.integers(1, 4))
            noise_increments += 1
        if n % 3 == 0:
            per["port_rcv_errors"] = {poll: 1 for poll in range(17, polls, 90)}
        if n % 4 == 1:
            per["port_xmit_discards"] = {poll: int(pick.integers(1, 21)) for poll in range(23, polls, 60)}
        bumps.setdefault(key, {}).update(per)

    # -- counter series: one file per switch, one per host
    samples = 0
    host_frame = _series(rng, names, ["mlx5_0/1"] * hosts, polls, bumps)
    samples += host_frame.height
    for (node,), part in host_frame.group_by("node", maintain_order=True):
        d = out / "metrics" / node
        d.mkdir(parents=True, exist_ok=True)
        part.write_csv(d / "hca.counters.csv")
    del host_frame
    switches = [(fab.leaf(i), fab.down + fab.up) for i in range(fab.leaves)]
    switches += [(fab.spine(i), fab.spine_ports) for i in range(fab.spines)]
    for start in range(0, len(switches), 16):  # 16 switches per frame: bounded memory
        group = switches[start:start + 16]
        nodes = [s for s, k in group for _ in range(k)]
        ports = [str(p) for _, k in group for p in range(1, k + 1)]
        frame = _series(rng, nodes, ports, polls, bumps)
        samples += frame.height
        for (node,), part in frame.group_by("node", maintain_order=True):
            d = out / "fabric" / node
            d.mkdir(parents=True, exist_ok=True)
            part.write_csv(d / "ports.counters.csv")

    # -- logs: the flapping host's dmesg, error 12 on peers naming its address
    log_lines = 0
    dmesg = []
    for down, up_after in FLAPS:
        dmesg.append(f"{_dmesg(down)} mlx5_core 0000:0c:00.0 ibp12s0: Link down")
        dmesg.append(f"{_dmesg(down + dt.timedelta(seconds=up_after))} mlx5_core 0000:0c:00.0 ibp12s0: Link up")
    (out / "logs" / bad).mkdir(parents=True, exist_ok=True)
    (out / "logs" / bad / "dmesg.log").write_text("\n".join(dmesg) + "\n")
    log_lines += len(dmesg)
    peers = [i for i in range(0, hosts, max(1, hosts // 8)) if i != fab.bad_host][:8]
    for i in peers:
        h = host_name(i)
        line = (f"[{NCCL_AT:%Y-%m-%d %H:%M:%S}] {h}:1208:1270 [3] transport/net_ib.cc:2290 NCCL WARN NET/IB : "
                f"Got completion from peer {host_ip(fab.bad_host)}<38560> with status=12 opcode=0 len=0 "
                f"vendor err 129 (Recv) localGid ::ffff:{host_ip(i)} remoteGids::ffff:{host_ip(fab.bad_host)} hca mlx5_0")
        (out / "logs" / h).mkdir(parents=True, exist_ok=True)
        (out / "logs" / h / "nccl.log").write_text(line + "\n")
        log_lines += 1
    return {
        "hosts": hosts, "leaves": fab.leaves, "spines": fab.spines, "ports": fab.ports,
        "host_ports": hosts, "leaf_ports": fab.leaves * (fab.down + fab.up),
        "spine_ports": fab.spines * fab.spine_ports, "polls": polls, "samples": samples,
        "counters": len(COUNTERS), "log_lines": log_lines, "noisy_ports": len(noisy),
        "noise_increments": noise_increments, "bad_host": bad, "bad_port": bad_port,
        "bad_host_port": f"{bad}/mlx5_0/1", "peers": len(peers),
    }


# ----------------------------------------------------------------------------- children


def run_once(bundle: Path) -> dict:
    """One end-to-end replay in this process; returns its figures."""
    from streams.replay import replay_bundle

    base_rss = peak_rss_mib()
    t0 = time.perf_counter()
    result = replay_bundle(bundle)
    elapsed = time.perf_counter() - t0
    att = result.attribution
    incidents = [a for a in result.attributions if a.scope.kind == "incident"]
    fabric = [a for a in result.attributions if a.scope.kind == "fabric_port"]
    return {
        "seconds": elapsed,
        "lines": result.lines_read,
        "events": len(result.events),
        "event_types": _count(e.type for e in result.events),
        "observations": len(result.observations),
        "rss_mib": peak_rss_mib(),
        "rss_after_imports_mib": base_rss,
        "root_cause": att.root_cause.code,
        "domain": att.domain,
        "quality": att.quality,
        "hosts": att.culprits.hosts,
        "ports": att.culprits.ports,
        "incident_id": att.incident_id,
        "incidents": [{"id": i.scope.id, "root_cause": i.root_cause.code, "ports": i.culprits.ports,
                       "hosts": i.culprits.hosts, "workloads": i.affected.workloads} for i in incidents],
        "fabric_verdicts": [{"port": f.scope.id, "root_cause": f.root_cause.code} for f in fabric],
    }


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items()))


def _counter_files(bundle: Path, top: str | None = None) -> list[tuple[Path, str, str, str]]:
    """The bundle's counter files under ``fabric/`` and ``metrics/`` (or just ``top``) in
    relative-path order, as (path, relative path, node = directory name, side)."""
    from connectors.counters import COUNTER_SUFFIX

    out = []
    for t in ("fabric", "metrics") if top is None else (top,):
        for p in (bundle / t).rglob(f"*{COUNTER_SUFFIX}"):
            rel = p.relative_to(bundle).as_posix()
            out.append((p, rel, p.parent.name, "switch" if t == "fabric" else "host"))
    return sorted(out, key=lambda f: f[1])


def _batches(files: list[tuple[Path, str, str, str]]):
    """The counter files (:func:`_counter_files`) grouped as ``BundleConnector`` reads them:
    consecutive files of one header (``counter_batch_key``) up to ``COUNTER_BATCH_BYTES``;
    lists of (file, bytes) (a list of one: read on its own)."""
    from connectors.counters import COUNTER_BATCH_BYTES, counter_batch_key

    batch: list[tuple[tuple[Path, str, str, str], bytes]] = []
    size, key = 0, None
    for f in files:
        data = f[0].read_bytes()
        k = counter_batch_key(data)
        if batch and (k is None or k != key or size + len(data) > COUNTER_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        if k is None:
            yield [(f, data)]
            continue
        batch.append((f, data))
        size += len(data)
        key = k
    if batch:
        yield batch


def _read_batch(batch: list[tuple[tuple[Path, str, str, str], bytes]], src) -> tuple[int, int]:
    """(samples, observations) of one batch: ``read_counter_batch`` (deltas of the whole
    batch at once), or ``read_counter_csv`` + ``table_observations`` file by file."""
    from connectors.counters import read_counter_batch, read_counter_csv, table_observations

    results = None
    if len(batch) > 1:
        results = read_counter_batch([(data, node, rel, side) for (_, rel, node, side), data in batch],
                                     source=src, cluster="bench", workload_id="job-fabric")
    if results is not None:
        return sum(r.rows for r in results), sum(len(r.observations) for r in results)
    rows = obs = 0
    for (_, rel, node, side), data in batch:
        table = read_counter_csv(data, default_node=node)
        rows += table.rows
        obs += sum(1 for _ in table_observations(table, source=src, rel=rel, cluster="bench",
                                                  workload_id="job-fabric", side=side))
    return rows, obs


def floor_once(bundle: Path) -> dict:
    """The floor: the counter series read and their deltas computed as the bundle reader
    does (batches of files, :func:`_batches`; the few error rows materialised), nothing else."""
    from schemas.records import Source

    src = Source(connector="bundle", instance="bench")
    files = _counter_files(bundle)
    t0 = time.perf_counter()
    rows = obs = batches = 0
    for batch in _batches(files):
        r, o = _read_batch(batch, src)
        rows += r
        obs += o
        batches += 1
    return {"seconds": time.perf_counter() - t0, "samples": rows, "observations": obs, "files": len(files),
            "batches": batches, "rss_mib": peak_rss_mib()}


def phases_once(bundle: Path) -> str:
    """Where the replay's time goes, without profiler overhead: the bundle's specs (YAML +
    pydantic), then per kind of counter file (one-port host files, many-port switch files)
    reading them as ``BundleConnector`` does (:func:`_batches`, :func:`_read_batch`: read,
    deltas, the error filter and materialising the few error rows)."""
    from connectors.bundle import BundleConnector
    from schemas.records import Source

    out = []
    t0 = time.perf_counter()
    BundleConnector(bundle)
    out.append(f"  BundleConnector(): workload.yaml + topology.yaml + expected.yaml (libyaml + pydantic): "
               f"{time.perf_counter() - t0:.2f} s")
    src = Source(connector="bundle", instance="bench")
    for label, top in (("host files (metrics/)", "metrics"), ("switch files (fabric/)", "fabric")):
        files = _counter_files(bundle, top)
        t_read = 0.0
        rows = obs = batches = 0
        for batch in _batches(files):
            a = time.perf_counter()
            r, o = _read_batch(batch, src)
            t_read += time.perf_counter() - a
            rows += r
            obs += o
            batches += 1
        n = max(1, len(files))
        out.append(f"  {label}: {len(files)} files in {batches} batches, {rows:,} samples ({rows // n:,}/file): "
                   f"read + deltas + error rows {t_read:.2f} s ({t_read / n * 1e3:.2f} ms/file), "
                   f"{obs} observations -> {rows / max(t_read, 1e-9):,.0f} samples/s")
    return "\n".join(out)


def profile_once(bundle: Path, top: int) -> str:
    """Replay under cProfile; the top functions by own time and by cumulative time."""
    import cProfile
    import io
    import pstats

    from streams.replay import replay_bundle

    prof = cProfile.Profile()
    prof.enable()
    replay_bundle(bundle)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).strip_dirs()
    buf.write(f"== top {top} by own time (tottime) ==\n")
    stats.sort_stats("tottime").print_stats(top)
    buf.write(f"== top {top} by cumulative time ==\n")
    stats.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


# ----------------------------------------------------------------------------- report


def machine() -> str:
    model = "?"
    mem_kib = 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    try:
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        load = "?"
    return (f"{model}, {os.cpu_count()} cores, {mem_kib / 1024 / 1024:.1f} GiB RAM, {platform.machine()}, "
            f"Python {platform.python_version()}, polars {pl.__version__}; load average {load}")


def check(run: dict, facts: dict) -> list[str]:
    """What is wrong with the verdict of one run (empty: correct): root cause, domain,
    quality, culprit host and port, the one incident and its ports. A missing field is wrong."""
    need = ("root_cause", "domain", "quality", "hosts", "ports", "incidents", "incident_id")
    missing = [k for k in need if k not in run]
    if missing:
        return [f"no verdict ({', '.join(missing)} missing)"]
    bad = []
    if run["root_cause"] != "fabric.port.flapping":  # two link-downs 90 s apart: a flap
        bad.append(f"root cause {run['root_cause']} != fabric.port.flapping")
    if run["domain"] != "fabric":
        bad.append(f"domain {run['domain']} != fabric")
    if run["quality"] != "probable":
        bad.append(f"quality {run['quality']} != probable")
    if run["hosts"] != [facts["bad_host"]]:
        bad.append(f"hosts {run['hosts']} != [{facts['bad_host']}]")
    if facts["bad_port"] not in run["ports"]:
        bad.append(f"ports {run['ports']} lack {facts['bad_port']}")
    if len(run["incidents"]) != 1:
        bad.append(f"{len(run['incidents'])} incidents != 1")
    elif run["incident_id"] != run["incidents"][0]["id"]:
        bad.append("the workload verdict does not name the incident")
    elif facts["bad_port"] not in run["incidents"][0]["ports"]:
        bad.append(f"incident ports {run['incidents'][0]['ports']} lack {facts['bad_port']}")
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=4096)
    parser.add_argument("--radix", type=int, default=64, help="leaf switch ports (half down, half up)")
    parser.add_argument("--minutes", type=int, default=60, help="event time covered by the counter polls")
    parser.add_argument("--out", type=Path, help="write (and keep) the bundle here instead of a temp dir")
    parser.add_argument("--profile", action="store_true", help="always print the cProfile top 15")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="replay", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        bundle = Path(args.child)
        if args.mode == "profile":
            print(profile_once(bundle, 15))
            return
        if args.mode == "phases":
            print(phases_once(bundle))
            return
        figures = floor_once(bundle) if args.mode == "floor" else run_once(bundle)
        print(json.dumps(figures))
        return

    tmp = None
    if args.out is None:
        tmp = tempfile.TemporaryDirectory(prefix="fs-bench-fabric-")
        bundle = Path(tmp.name) / "bundle"
    else:
        bundle = args.out
    try:
        t0 = time.perf_counter()
        facts = generate(bundle, args.hosts, args.radix, args.minutes)
        gen_s = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())

        def child(mode: str) -> str:
            out = subprocess.run([sys.executable, __file__, "--child", str(bundle), "--mode", mode],
                                 capture_output=True, text=True, check=False)
            if out.returncode != 0:  # no figures, no verdict: a wrong run
                print(f"the {mode} child failed (exit {out.returncode}):\n{out.stderr[-4000:]}", file=sys.stderr)
                sys.exit(1)
            return out.stdout

        def last_json(text: str) -> dict:
            return json.loads(text.strip().splitlines()[-1])

        runs = [last_json(child("replay")) for _ in range(args.runs)]
        floors = [last_json(child("floor")) for _ in range(args.runs)]
        med = statistics.median(r["seconds"] for r in runs)
        floor = statistics.median(f["seconds"] for f in floors)
        last = runs[-1]
        samples = facts["samples"]
        rate = samples / med
        problems = [f"run {i}: {p}" for i, run in enumerate(runs, 1) for p in check(run, facts)]

        print(f"machine: {machine()}")
        print(f"bundle: {facts['hosts']:,} hosts, {facts['leaves']} leaves x {args.radix} ports, "
              f"{facts['spines']} spines x {facts['spine_ports'] // facts['spines']} ports; "
              f"{facts['ports']:,} ports ({facts['host_ports']:,} host + {facts['leaf_ports']:,} leaf + "
              f"{facts['spine_ports']:,} spine) x {facts['polls']} polls every {INTERVAL_S} s")
        print(f"        {samples:,} counter samples x {facts['counters']} counters = {samples * facts['counters']:,} values "
              f"in {facts['hosts'] + facts['leaves'] + facts['spines']:,} CSV files, {size / 2**20:,.0f} MiB; "
              f"{facts['log_lines']} log lines; noise: {facts['noise_increments']} symbol-error increments on "
              f"{facts['noisy_ports']} ports; generated in {gen_s:.1f} s")
        print()
        rows = [
            ("runs", f"{args.runs}", ""),
            ("end to end (replay_bundle)", f"{med:.2f} s", "runs: " + ", ".join(f"{r['seconds']:.2f}" for r in runs)),
            ("counter samples/s", f"{rate:,.0f}", f"target {TARGET:,}: {'MET' if rate >= TARGET else 'MISSED'}"),
            ("counter values/s", f"{samples * facts['counters'] / med:,.0f}", ""),
            ("events/s", f"{last['events'] / med:,.1f}", f"{last['events']} events: {last['event_types']}"),
            ("lines/s", f"{last['lines'] / med:,.0f}", f"{last['lines']:,} lines (CSV rows + headers + logs)"),
            ("observations materialised", f"{last['observations']}", ""),
            ("peak RSS (child, VmHWM)", f"{statistics.median(r['rss_mib'] for r in runs):,.0f} MiB",
             f"after imports: {last['rss_after_imports_mib']:,.0f} MiB"),
            ("floor: counter files read + deltas", f"{floor:.2f} s",
             f"{floors[-1]['samples'] / floor:,.0f} samples/s, {floors[-1]['files']} files in "
             f"{floors[-1]['batches']} batches, "
             f"peak RSS {floors[-1]['rss_mib']:,.0f} MiB"),
            ("end to end / floor", f"{med / floor:.2f}x", ""),
        ]
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        for a, b, c in rows:
            print(f"  {a:<{w0}}  {b:>{w1}}  {c}")
        print()
        inc = last["incidents"]
        print(f"verdict: {last['root_cause']} ({last['domain']}, {last['quality']}) hosts={last['hosts']} "
              f"ports={last['ports']}; incidents={len(inc)} "
              + (f"[{inc[0]['root_cause']} ports={inc[0]['ports']} workloads={inc[0]['workloads']}]" if inc else "")
              + f"; fabric verdicts={[f['port'] for f in last['fabric_verdicts']]}")
        print(f"  -> {f'CORRECT in all {len(runs)} runs' if not problems else 'WRONG: ' + '; '.join(problems)}")
        if args.profile or rate < TARGET:
            print()
            print("phases (one process, no profiler):")
            print(child("phases"))
            print("profile of one end-to-end replay (cProfile; its overhead inflates Python-heavy parts):")
            print(child("profile"))
    finally:
        if tmp is not None:
            tmp.cleanup()
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
