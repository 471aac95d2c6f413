"""Stream benchmark: one `faultstream worker` on a real Kafka broker, fed a synthetic cluster.

The cluster: 2,048 hosts x 8 GPUs at 10 observations/host/s of event time (20,480 obs per
event second): glog training-step lines, NCCL INFO lines, kernel (dmesg -T) lines and
nvidia-smi telemetry samples -- background noise that yields no events. In it, failing jobs:

* **bulk segment** (``--seconds`` of event time, produced as fast as the producer goes): a
  16,384-rank job on all 2,048 hosts (8 ranks/host). Its workload record first (a
  ``WorkloadSpec`` published like ``connectors.publish.workload_observation``, state RUNNING),
  an XID 79 on one host at 20 % of the segment (the decisive event), the NCCL watchdog
  timeouts of every other rank 600 s of event time later (compressed: they follow in the
  stream at 30 %), and the job's terminal state (the workload record again, state FAILED,
  with its end) at 40 %. This segment measures the worker's sustained throughput
  (the records the ingest stages' consumer group has committed, read from the broker every
  0.25 s, from the first batch committed to the last: sampling costs the workers nothing);
  its latencies include the backlog a saturated worker builds, and are reported
  apart.
* **live segment** (``--live-seconds`` of wall time, paced at ``--live-rate`` obs/s, below the
  worker's capacity; it starts once the Faust agents have committed every message the bulk
  routed to them, the wait printed as "agents caught up"): more noise and ``--jobs`` failing 64-rank jobs (8 hosts each) spread over
  it, each with its workload record, an XID 79, 63 watchdog timeouts and its terminal state.
  End-to-end latency = wall time from the producer's ``produce()`` of the decisive message
  (the XID; the terminal state) to the arrival, on ``<prefix>.attributions``, of a verdict
  naming that workload with root cause ``gpu.xid.79`` (for the terminal state: the verdict
  with outcome ``failed``). The XID yields a provisional verdict at once; the terminal
  state's verdict waits for the worker's idle timeout (``--idle-timeout``, wall clock), the
  live-mode window close -- the allowed lateness is event time and plays no part here.

Decisive lines carry no workload id: the worker routes them through its allocation table
(host -> workload by event time), as it would for node-level connectors. Event times of the
jobs are laid out so no two allocations of one host overlap.

The floor: a bare consume-and-parse loop over the bulk segment on the same topic
(confluent_kafka consumer + ``json.loads`` + ``Observation.model_validate``), run after the
worker has stopped, as obs/s; the report gives worker/floor.

All messages are pre-serialised (canonical JSON, with ids) before anything is timed. Each run
gets a fresh worker, topic prefix and app id; figures are medians over ``--runs``.

Usage::

    python3 bench/stream.py [--runs 3] [--seconds 10] [--live-seconds 30] [--live-rate 1000]
                            [--jobs 20] [--idle-timeout 1] [--lateness 30] [--clickhouse]
                            [--stages all|split] [--workers 1,2]

``--stages split`` runs the worker as two processes, ``worker --stage ingest`` (the batch
loop, whose committed records are the throughput) and ``worker --stage correlate``.
``--workers 1,2,3``: for each N, every run starts N workers (N of each stage with ``split``)
in one consumer group, separate processes with separate data directories; throughput is what
their one ingest consumer group committed. It prints throughput per N and whether the verdicts of
each N equal those of the first N.

**Verdicts checked.** Every run's verdict of every job must be there and be right: the last
verdict with outcome ``failed`` once the attributions topic has been quiet for ``--quiet``
seconds (late events revise a final verdict) names root cause ``gpu.xid.79``, exactly the host
of the XID and the rank whose GPU fell off the bus (the one rank without a watchdog timeout),
quality ``probable`` (the XID names a PCI id the host's telemetry does not report, so the rank
is inferred from the timeouts). The script exits 1 when one is wrong or missing.

Starts its own broker on a free port unless ``KAFKA_BOOTSTRAP_SERVERS`` is set, and stops
it (and every worker) on exit, errors included.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import KafkaException  # noqa: E402

from schemas.bundle import WorkloadSpec  # noqa: E402
from schemas.utc import format_utc  # noqa: E402
from schemas.records import (  # noqa: E402
    SCHEMA_VERSION,
    TIME_QUALITY_EXACT,
    TIME_QUALITY_SECONDS,
    Observation,
    Position,
    Source,
    canonical_json,
    content_id,
)

NS = 1_000_000_000
HOSTS = 2048
GPUS = 8
OBS_PER_HOST_S = 10
T0 = 1_796_000_000 * NS  # 2026-11-30T...Z, event time of the bulk segment's first second
CLUSTER = "bench"
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
DAYS = "Mon Tue Wed Thu Fri Sat Sun".split()


# -- synthetic observations ------------------------------------------------------------------


def _obs(kind: str, at: int, host: str, fmt: str, *, body: str | None = None, metric: dict | None = None,
         gpu: dict | None = None, rank: int | None = None, file: str | None = None, line: int | None = None,
         workload_id: str | None = None, attributes: dict | None = None, quality: float = TIME_QUALITY_EXACT,
         connector: str = "files") -> dict[str, Any]:
    """An Observation as JSON data with its id -- the same bytes ``Observation(...).with_id()``
    gives (checked by :func:`_self_check`), built without pydantic so 1 M of them are cheap."""
    data = {
        "source": {"connector": connector, "instance": host},
        "kind": kind,
        "observed_at": at,
        "time_source": "line",
        "time_quality": quality,
        "host": host,
        "cluster": CLUSTER,
        "workload_id": workload_id,
        "rank": rank,
        "gpu": gpu,
        "fabric_port": None,
        "format": fmt,
        "body": body,
        "metric": metric,
        "attributes": attributes or {},
        "position": {"file": file, "line": line},
    }
    # the id hashes the content without schema_version and the time twin (Observation.with_id)
    data["observation_id"] = content_id("obs", data)
    data["schema_version"] = SCHEMA_VERSION
    data["observed_at_utc"] = format_utc(at)
    data["position"] = {"file": file, "line": line, "topic": None, "partition": None, "offset": None}
    return data


def _self_check(data: dict[str, Any]) -> None:
    obs = Observation.model_validate(data)
    want = obs.model_copy(update={"observation_id": ""}).with_id().observation_id
    if want != data["observation_id"] or canonical_json(obs) != canonical_json(data):
        raise SystemExit("bench/stream.py: synthetic observation differs from Observation.with_id()")


def _dmesg_ts(at: int) -> str:
    t = time.gmtime(at // NS)
    return f"[{DAYS[t.tm_wday]} {MONTHS[t.tm_mon - 1]} {t.tm_mday:2d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} {t.tm_year}]"


def _glog_ts(at: int, level: str) -> str:
    t = time.gmtime(at // NS)
    return f"{level}{t.tm_mon:02d}{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{(at % NS) // 1000:06d}"


class Noise:
    """Background records: per host and event second, 5 training-step glog lines, 2 NCCL INFO
    lines, 1 kernel line and 2 nvidia-smi samples (10 obs/host/s)."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.line = [0] * HOSTS
        self.step = 0

    def second(self, at0: int, hosts: range | list[int] = range(HOSTS)) -> list[tuple[bytes, bytes]]:
        rnd = self.rnd
        out: list[tuple[bytes, bytes]] = []
        self.step += 1
        for slot in range(OBS_PER_HOST_S):
            for h in hosts:
                host = f"node-b{h:04d}"
                at = at0 + slot * (NS // OBS_PER_HOST_S) + rnd.randrange(NS // OBS_PER_HOST_S)
                g = (slot + h) % GPUS
                rank = h * GPUS + g
                self.line[h] += 1
                n = self.line[h]
                if slot < 5:
                    body = (f"[rank{rank}]:[{_glog_ts(at, 'I')} {4000 + g} train.py:212] step {self.step} "
                            f"loss {2 + rnd.random():.4f} lr 3.0e-04 grad_norm {rnd.random():.3f} "
                            f"tokens/s {rnd.randrange(90000, 99999)}")
                    d = _obs("log_line", at, host, "glog", body=body, rank=rank, file=f"logs/{host}/train.log", line=n)
                elif slot < 7:
                    ch = rnd.randrange(32)
                    body = (f"{host}:{4000 + g}:{4100 + g} [{g}] NCCL INFO Channel {ch:02d}/0 : "
                            f"{rank}[{g}] -> {rank + 1}[{(g + 1) % GPUS}] via P2P/CUMEM/read")
                    d = _obs("log_line", at, host, "nccl", body=body, file=f"logs/{host}/train.log", line=n,
                             quality=TIME_QUALITY_SECONDS)
                elif slot == 7:
                    body = (f"{_dmesg_ts(at)} perf: interrupt took too long ({rnd.randrange(2500, 9000)} > 2500), "
                            "lowering kernel.perf_event_max_sample_rate")
                    d = _obs("log_line", at, host, "dmesg", body=body, file=f"logs/{host}/dmesg.log", line=n,
                             quality=TIME_QUALITY_SECONDS)
                else:
                    metric = {
                        "utilization_gpu": float(rnd.randrange(85, 100)), "temperature_gpu": float(rnd.randrange(55, 75)),
                        "power_w": float(rnd.randrange(550, 700)), "memory_used_mib": float(rnd.randrange(70000, 140000)),
                        "ecc_uncorrected_volatile": 0.0, "ecc_corrected_volatile": 0.0, "hw_slowdown": 0.0,
                    }
                    d = _obs("telemetry", at, host, "nvidia_smi_csv", metric=metric, connector="telemetry",
                             gpu={"index": g, "uuid": f"GPU-00000000-0000-4000-8000-{h:08x}{g:04d}", "pci_bus_id": gpu_pci(g)})
                out.append((host.encode(), canonical_json(d).encode()))
        return out


def workload_record(wid: str, hosts: list[str], start_ns: int, *, state: str, end_ns: int | None,
                    at: int) -> tuple[bytes, bytes]:
    """The scheduler's view of ``wid``, as ``connectors.publish.workload_observation`` builds it."""
    iso = lambda ns: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns // NS))  # noqa: E731
    spec = WorkloadSpec(workload_id=wid, scheduler="slurm", cluster=CLUSTER, state=state,
                        start=iso(start_ns), end=iso(end_ns) if end_ns else None, nodes=hosts,
                        ranks_per_node=GPUS, exit_code="1:0" if state == "FAILED" else None)
    text = "\n".join([f"workload_id: {wid}", "scheduler: slurm", f"cluster: {CLUSTER}", f"state: {state}",
                      f"start: {iso(start_ns)}", *([f"end: {iso(end_ns)}"] if end_ns else []),
                      f"ranks_per_node: {GPUS}", "nodes:", *[f"  - {h}" for h in hosts]]) + "\n"
    obs = Observation(
        source=Source(connector="slurm", instance=f"{CLUSTER}/{wid}"), kind="scheduler_event", observed_at=at,
        time_source="line", time_quality=TIME_QUALITY_EXACT, host="_scheduler", cluster=CLUSTER, workload_id=wid,
        format="workload_yaml", body=text, attributes={"workload": json.loads(spec.model_dump_json())},
        position=Position(file="workload.yaml", line=1),
    ).with_id()
    return b"_scheduler", canonical_json(obs).encode()


#: the local index of the GPU that falls off the bus: its rank is the one rank of the job
#: without a watchdog timeout
BAD_GPU = 5


def gpu_pci(g: int) -> str:
    """The PCI bus id nvidia-smi reports for GPU index ``g`` of every synthetic host."""
    return f"0000:{0x10 + g:02x}:00"


def xid_line(h: int, at: int) -> tuple[bytes, bytes]:
    """XID 79 on host ``h``, on a PCI id its telemetry samples do not report: the verdict's
    rank comes from the ranks that timed out, not from the host's GPU table (quality
    ``probable``)."""
    host = f"node-b{h:04d}"
    body = f"{_dmesg_ts(at)} NVRM: Xid (PCI:0000:9c:00): 79, pid=0, GPU has fallen off the bus."
    d = _obs("log_line", at, host, "dmesg", body=body, file=f"logs/{host}/dmesg.log", line=999_999,
             quality=TIME_QUALITY_SECONDS)
    return host.encode(), canonical_json(d).encode()


def watchdog_line(h: int, g: int, at: int, rnd: random.Random, first: int = 0) -> tuple[bytes, bytes]:
    """The PyTorch NCCL watchdog timeout of GPU ``g`` on host ``h``, whose job's first host is
    ``first`` (ranks count from 0 per job, ``ranks_per_node`` = 8)."""
    host = f"node-b{h:04d}"
    rank = (h - first) * GPUS + g
    body = (f"[rank{rank}]:[{_glog_ts(at, 'E')} {4000 + g} ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum=88412, OpType=ALLREDUCE, NumelIn=262144, "
            f"NumelOut=262144, Timeout(ms)=600000) ran for {600_000 + rnd.randrange(5, 900)} milliseconds before timing out.")
    d = _obs("log_line", at, host, "glog", body=body, rank=rank, file=f"logs/{host}/train.log", line=1_000_000 + g)
    return host.encode(), canonical_json(d).encode()


@dataclass
class Job:
    wid: str
    hosts: int
    bad_host: str = ""  # the host of the XID
    bad_rank: int = -1  # the rank of the GPU that fell off the bus (no watchdog timeout)
    xid_index: int = -1  # message index of the XID in its segment
    terminal_index: int = -1
    xid_sent: float | None = None  # wall time of produce()
    terminal_sent: float | None = None


@dataclass
class Segment:
    messages: list[tuple[bytes, bytes]] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    marks: dict[int, tuple[Job, str]] = field(default_factory=dict)  # index -> (job, "xid" | "terminal")


def build_bulk(seconds: int, seed: int) -> Segment:
    """``seconds`` of noise with the 16,384-rank job failing in it."""
    rnd = random.Random(seed)
    noise = Noise(seed)
    seconds = max(seconds, 6)  # room for the XID, the watchdogs and the terminal state
    seg = Segment()
    bad = HOSTS // 3
    job = Job("job-big-16384", HOSTS, bad_host=f"node-b{bad:04d}", bad_rank=bad * GPUS + BAD_GPU)
    seg.jobs.append(job)
    hosts = [f"node-b{h:04d}" for h in range(HOSTS)]
    start = T0 - 3600 * NS
    xid_s = max(1, seconds // 5)
    xid_at = T0 + xid_s * NS + NS // 2
    end = xid_at + 605 * NS
    seg.messages.append(workload_record(job.wid, hosts, start, state="RUNNING", end_ns=None, at=start))
    for s in range(seconds):
        seg.messages.extend(noise.second(T0 + s * NS))
        if s == xid_s:
            seg.marks[len(seg.messages)] = (job, "xid")
            seg.messages.append(xid_line(bad, xid_at))
        if s == max(xid_s + 1, (3 * seconds) // 10):  # the watchdogs, 600 s of event time later
            for h in range(HOSTS):
                for g in range(GPUS):
                    if not (h == bad and g == BAD_GPU):
                        seg.messages.append(watchdog_line(h, g, xid_at + 600 * NS + rnd.randrange(NS), rnd))
        if s == max(xid_s + 2, (4 * seconds) // 10):
            seg.marks[len(seg.messages)] = (job, "terminal")
            seg.messages.append(workload_record(job.wid, hosts, start, state="FAILED", end_ns=end, at=end))
    return seg


def build_live(n_messages: int, jobs: int, seed: int, run: int) -> Segment:
    """About ``n_messages`` of noise (on a rotating subset of the hosts no job uses) with ``jobs`` 64-rank jobs spread
    over it, in event time after the bulk segment's big job ended (no host has two overlapping
    allocations)."""
    rnd = random.Random(seed + 1)
    noise = Noise(seed + 1)
    seg = Segment()
    per_job = 8
    job_hosts = jobs * per_job
    quiet = range(job_hosts, HOSTS)
    seconds = max(jobs * 4, 8)
    # thin the noise to about n_messages: a rotating subset of the quiet hosts each second
    per_second = max(1, min(len(quiet), n_messages // (seconds * OBS_PER_HOST_S)))
    base = T0 + 100_000 * NS  # well after the bulk job's end + the allocation slack
    stride = seconds / max(jobs, 1)
    plan: dict[int, list[tuple[int, str]]] = {}
    for j in range(jobs):
        s0 = int(j * stride)
        for k, what in enumerate(("start", "xid", "watchdogs", "terminal")):
            plan.setdefault(min(seconds - 1, s0 + k), []).append((j, what))
    by_job = [Job(f"job-r{run}-{j:02d}", per_job, bad_host=f"node-b{j * per_job + 3:04d}",
                  bad_rank=3 * GPUS + BAD_GPU) for j in range(jobs)]
    seg.jobs.extend(by_job)
    # the jobs started an hour (event time) before they fail: their workload records come
    # first. (Published next to the XID instead, the XID -- another partition -- can be
    # extracted before the allocation exists; the worker then never routes it to the job.)
    for j, job in enumerate(by_job):
        hosts = [f"node-b{h:04d}" for h in range(j * per_job, (j + 1) * per_job)]
        start = base + int(j * stride) * NS - 3600 * NS
        seg.messages.append(workload_record(job.wid, hosts, start, state="RUNNING", end_ns=None, at=start))
    for s in range(seconds):
        at0 = base + s * NS
        first_quiet = (s * per_second) % len(quiet)
        seg.messages.extend(noise.second(at0, [quiet[(first_quiet + k) % len(quiet)] for k in range(per_second)]))
        for j, what in plan.get(s, []):
            job = by_job[j]
            first = j * per_job
            hosts = [f"node-b{h:04d}" for h in range(first, first + per_job)]
            start = base + int(j * stride) * NS - 3600 * NS
            xid_at = base + (int(j * stride) + 1) * NS + NS // 2
            end = xid_at + 605 * NS
            bad = first + 3
            if what == "start":
                pass  # published up front
            elif what == "xid":
                seg.marks[len(seg.messages)] = (job, "xid")
                seg.messages.append(xid_line(bad, xid_at))
            elif what == "watchdogs":
                for h in range(first, first + per_job):
                    for g in range(GPUS):
                        if not (h == bad and g == BAD_GPU):
                            seg.messages.append(watchdog_line(h, g, xid_at + 600 * NS + rnd.randrange(NS), rnd,
                                                              first))
            else:
                seg.marks[len(seg.messages)] = (job, "terminal")
                seg.messages.append(workload_record(job.wid, hosts, start, state="FAILED", end_ns=end, at=end))
    return seg


# -- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Worker:
    """A `faultstream worker` subprocess (like tests/streams/test_stream.py)."""

    def __init__(self, env: dict[str, str], log: Path, profile: Path | None = None, stage: str = "all") -> None:
        self.log = log
        self.port = free_port()
        # the Faust agents' and the ingest stage's (on its first partition assignment)
        self.ready = {"ingest": ("[^Ingest]: Ready",), "correlate": ("[^Worker]: Ready",)}.get(
            stage, ("[^Worker]: Ready", "[^Ingest]: Ready"))
        cmd = [sys.executable]
        if profile is not None:
            cmd += ["-m", "cProfile", "-o", str(profile)]
        cmd += ["-m", "streams.cli"]
        cmd += ["worker", "--stage", stage, "--web-port", str(self.port), "--loglevel", "info"]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            if all(mark in text for mark in self.ready):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"worker not ready after {timeout} s:\n{self.log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT if "cProfile" in self.proc.args else signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Verdicts(threading.Thread):
    """Consumes ``topic`` from the start; records the arrival wall time of each verdict."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 10})
        self.consumer.subscribe([topic])
        self.seen: list[tuple[float, dict[str, Any]]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.05)
                if msg is None or msg.error():
                    continue
                now = time.time()
                if msg.value() is None:  # a tombstone after a withdrawal
                    continue
                att = json.loads(msg.value())
                cause = att.get("root_cause") or {}
                self.seen.append((now, {"wid": att["scope"]["id"], "code": cause.get("code"),
                                        "outcome": att["outcome"], "revision": att["revision"],
                                        "hosts": att["culprits"]["hosts"], "ranks": att["culprits"]["ranks"],
                                        "quality": att["quality"]}))
        finally:
            self.consumer.close()

    def final(self, wid: str) -> dict[str, Any] | None:
        """The last verdict of ``wid`` seen with outcome ``failed`` (None: none came)."""
        last = None
        for _, v in list(self.seen):
            if v["wid"] == wid and v["outcome"] == "failed":
                last = v
        return last

    def first(self, wid: str, *, after: float, outcome: str | None = None) -> float | None:
        for t, v in list(self.seen):
            if v["wid"] == wid and v["code"] == "gpu.xid.79" and t >= after and (outcome is None or v["outcome"] == outcome):
                return t
        return None


def produce(bootstrap: str, topic: str, seg: Segment, rate: float = 0.0) -> float:
    """Produce ``seg`` (``rate`` obs/s, 0 = as fast as the producer goes); stamp the marked
    messages' produce() wall times. Returns the seconds it took (flush included)."""
    from confluent_kafka import Producer

    from transport.kafka_settings import with_partitioner

    p = Producer(with_partitioner({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10000,
                                   "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                                   "message.max.bytes": 16 * 1024 * 1024}))
    t0 = time.monotonic()
    marks = seg.marks
    for i, (key, value) in enumerate(seg.messages):
        if rate > 0 and i % 50 == 0:
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                p.poll(delay)
        mark = marks.get(i)
        if mark is not None:
            p.flush()  # everything before it is on the broker: the stamp is this message's
            setattr(mark[0], f"{mark[1]}_sent", time.time())
        while True:
            try:
                p.produce(topic, value, key)
                break
            except BufferError:
                p.poll(0.05)
        if mark is not None:
            p.flush()
    p.flush(120)
    return time.monotonic() - t0


def floor(bootstrap: str, topic: str, n: int, timeout: float = 300) -> float:
    """Bare consume + json.loads + Observation.model_validate of the first ``n`` messages
    (across partitions); returns obs/s from the first message to the n-th."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-floor-{uuid.uuid4().hex}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = 0
    t_first = None
    deadline = time.monotonic() + timeout
    try:
        while got < n and time.monotonic() < deadline:
            for msg in c.consume(1000, 0.5):
                if msg.error():
                    continue
                if t_first is None:
                    t_first = time.perf_counter()
                Observation.model_validate(json.loads(msg.value()))
                got += 1
        return got / (time.perf_counter() - (t_first or time.perf_counter()))
    finally:
        c.close()


class Committed:
    """The records of ``topic`` that consumer group ``group`` has committed: the sum of its
    committed offsets over the topic's partitions (a partition with none counts 0)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        self.topic = topic

    def count(self) -> int:
        from confluent_kafka import TopicPartition

        meta = self.consumer.list_topics(self.topic, timeout=10).topics[self.topic]
        tps = [TopicPartition(self.topic, p) for p in meta.partitions]
        return sum(max(tp.offset, 0) for tp in self.consumer.committed(tps, timeout=10))

    def __enter__(self) -> "Committed":
        return self

    def __exit__(self, *_: Any) -> None:
        self.consumer.close()


def wait_caught_up(bootstrap: str, app_id: str, timeout: float) -> float:
    """Wait until the Faust agents' consumer group (``app_id``) has committed the high
    watermark of every partition of the internal topics (``<app_id>-by-workload``,
    ``-by-fabric``), checked every 0.5 s (the agents commit every second). Returns the seconds
    waited; raises ``RuntimeError`` after ``timeout`` s."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": app_id, "enable.auto.commit": False})
    t0 = time.monotonic()
    try:
        topics = [f"{app_id}-by-workload", f"{app_id}-by-fabric"]
        meta = c.list_topics(timeout=10).topics
        tps = [TopicPartition(t, p) for t in topics for p in meta[t].partitions]
        while True:
            lag = 0
            for tp in c.committed(tps, timeout=10):
                _, high = c.get_watermark_offsets(tp, timeout=10)
                lag += high - max(tp.offset, 0)
            if lag <= 0:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"the agents of {app_id} are still {lag} messages behind after {timeout} s")
            time.sleep(0.5)
    finally:
        c.close()


# -- one run ---------------------------------------------------------------------------------


def run_once(args: argparse.Namespace, bootstrap: str, bulk: Segment, live: Segment, run: int, tmp: Path,
             members: int = 1) -> dict[str, Any]:
    """One run with ``members`` workers (of each stage with ``--stages split``) in one consumer
    group: the bulk segment as fast as it goes, then the paced live segment; returns the
    figures and each job's final verdict."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "FAULTSTREAM_TOPIC_PREFIX": prefix,
           "FAULTSTREAM_APP_ID": f"{prefix}-worker", "FAULTSTREAM_IDLE_TIMEOUT_S": str(args.idle_timeout),
           "FAULTSTREAM_ALLOWED_LATENESS_S": str(args.lateness),
           "FAULTSTREAM_PARTITIONS": str(args.partitions), "PYTHONPATH": str(ROOT)}
    if args.clickhouse:
        env["FAULTSTREAM_CLICKHOUSE"] = f"chdb://{tmp / f'chdb-{members}-{run}'}"
    for job in bulk.jobs + live.jobs:
        job.xid_sent = job.terminal_sent = None
    profile = Path(args.profile).resolve() if args.profile and run == 0 and members == 1 else None
    split = args.stages == "split"
    workers: list[Worker] = []
    ingests: list[Worker] = []
    for i in range(members):
        own = {**env, "FAULTSTREAM_DATA_DIR": str(tmp / f"faust-{members}-{run}-{i}")}
        workers.append(Worker(own, tmp / f"worker-{members}-{run}-{i}.log", profile if i == 0 else None,
                              stage="correlate" if split else "all"))
        # split: the batch ingest stages consume the observations
        if split:
            ingests.append(Worker(own, tmp / f"ingest-{members}-{run}-{i}.log", stage="ingest"))
    consumers_of_observations = ingests or workers
    verdicts = None
    try:
        for w in workers + ingests:
            w.wait_ready()
        verdicts = Verdicts(bootstrap, f"{prefix}.attributions")
        verdicts.start()
        samples: list[tuple[float, float]] = []
        sample_errors: list[str] = []
        done = threading.Event()
        total_bulk = len(bulk.messages)

        def sample() -> None:
            # the ingest stages' progress read from the broker (their consumer group's committed
            # offsets: a record counts once the outputs of its batch are delivered), so the
            # sampling costs the workers nothing
            with Committed(bootstrap, f"{env['FAULTSTREAM_APP_ID']}-ingest", f"{prefix}.observations") as committed:
                while not done.is_set():
                    try:
                        v = committed.count()
                    except KafkaException as exc:  # a slow broker: the next sample answers
                        sample_errors.append(str(exc))
                    else:
                        samples.append((time.monotonic(), v))
                        if v >= total_bulk:
                            return
                    done.wait(0.25)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        produce_s = produce(bootstrap, f"{prefix}.observations", bulk)
        sampler.join(timeout=args.timeout)
        done.set()
        consumed = [s for s in samples if s[1] > 0]
        if not consumed or consumed[-1][1] < total_bulk:
            raise RuntimeError(f"workers consumed {consumed[-1][1] if consumed else 0:.0f} of {total_bulk} in time; "
                               f"logs {[str(w.log) for w in consumers_of_observations]}; "
                               f"offset reads that failed: {len(sample_errors)} {sample_errors[-1:]}")
        # first to last batch committed; the samples bracket both ends to within 0.25 s
        (t_a, n_a), (t_b, n_b) = consumed[0], consumed[-1]
        throughput = (n_b - n_a) / (t_b - t_a) if t_b > t_a else float("nan")
        drain_s = t_b - t_a
        # the live segment measures a worker below its capacity: it starts once the Faust
        # agents have committed every routed message the bulk made (the bulk's own latencies
        # include that backlog and are reported apart)
        catch_up_s = wait_caught_up(bootstrap, env["FAULTSTREAM_APP_ID"], timeout=args.timeout)
        time.sleep(args.idle_timeout + 1)
        live_s = produce(bootstrap, f"{prefix}.observations", live, rate=args.live_rate)
        # wait for every job's terminal verdict
        deadline = time.monotonic() + args.settle
        jobs = bulk.jobs + live.jobs
        while time.monotonic() < deadline:
            if all(verdicts.first(j.wid, after=j.terminal_sent or 0, outcome="failed") for j in jobs):
                break
            time.sleep(0.2)
        # then the revisions that late events bring, until the topic has been quiet for --quiet s
        count, quiet_since = len(verdicts.seen), time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - quiet_since < args.quiet:
            time.sleep(0.2)
            if len(verdicts.seen) != count:
                count, quiet_since = len(verdicts.seen), time.monotonic()
        lat = {"bulk_xid": [], "bulk_terminal": [], "xid": [], "terminal": []}
        missing = []
        for j in jobs:
            big = j in bulk.jobs
            tx = verdicts.first(j.wid, after=0)
            tt = verdicts.first(j.wid, after=0, outcome="failed")
            if tx is None or tt is None:
                missing.append(j.wid)
            if tx is not None:
                lat["bulk_xid" if big else "xid"].append(tx - j.xid_sent)
            if tt is not None:
                lat["bulk_terminal" if big else "terminal"].append(tt - j.terminal_sent)
        # what a verdict says, not how many revisions it took (that depends on the timing)
        finals = {j.wid: {k: v for k, v in (verdicts.final(j.wid) or {}).items() if k != "revision"} or None
                  for j in jobs}
        wrong = [j.wid for j in jobs if finals[j.wid] is not None and not right(finals[j.wid], j)]
    finally:
        if verdicts is not None:
            verdicts.stopping.set()
            verdicts.join(timeout=10)
        for w in workers + ingests:
            w.stop()
    floor_rate = floor(bootstrap, f"{prefix}.observations", total_bulk)
    return {"throughput": throughput, "drain_s": drain_s, "catch_up_s": catch_up_s,
            "produce_s": produce_s, "live_s": live_s,
            "floor": floor_rate, "lat": lat, "missing": missing, "wrong": wrong, "finals": finals,
            "prefix": prefix}


def right(verdict: dict[str, Any], job: Job) -> bool:
    """The final verdict names what the synthetic job's failure was (module docstring)."""
    return (verdict["code"] == "gpu.xid.79" and verdict["hosts"] == [job.bad_host]
            and verdict["ranks"] == [job.bad_rank] and verdict["quality"] == "probable")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q / 100 * len(v) + 0.5) - 1))]


def member_counts(text: str) -> list[int]:
    """``--workers``: a comma-separated list of distinct worker counts, e.g. ``1,2,3``."""
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected worker counts like 1,2,3") from None
    if min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every worker count must be at least 1")
    if len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"{text!r}: each worker count once")
    return counts


def positive(text: str) -> int:
    """An integer option that must be at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=positive, default=3)
    parser.add_argument("--seconds", type=positive, default=10, help="event seconds of the bulk segment (x 20,480 obs)")
    parser.add_argument("--live-seconds", type=float, default=30, help="wall seconds of the paced live segment")
    parser.add_argument("--live-rate", type=float, default=1000, help="obs/s of the live segment (keep below capacity)")
    parser.add_argument("--jobs", type=positive, default=20, help="64-rank failing jobs in the live segment")
    parser.add_argument("--idle-timeout", type=float, default=1.0, help="FAULTSTREAM_IDLE_TIMEOUT_S")
    parser.add_argument("--lateness", type=float, default=30.0, help="FAULTSTREAM_ALLOWED_LATENESS_S")
    parser.add_argument("--partitions", type=int, default=12, help="FAULTSTREAM_PARTITIONS")
    parser.add_argument("--clickhouse", action="store_true", help="worker writes to embedded ClickHouse (chdb, tmp dir)")
    parser.add_argument("--timeout", type=float, default=600, help="give up on a run after this long (s)")
    parser.add_argument("--settle", type=float, default=60, help="wait this long after the live segment for the last verdicts (s)")
    parser.add_argument("--quiet", type=float, default=10,
                        help="after every job's first final verdict, wait until no verdict came for this long (s)")
    parser.add_argument("--profile", help="run the first run's worker under cProfile, stats to this file")
    parser.add_argument("--stages", choices=("all", "split"), default="all",
                        help="all: one worker process; split: `worker --stage ingest` (batch loop, its "
                             "observations are counted) and `worker --stage correlate`, two processes")
    parser.add_argument("--workers", type=member_counts, default=[1],
                        help="comma-separated worker counts, e.g. 1,2: each run is repeated with N workers "
                             "in one consumer group")
    args = parser.parse_args()

    t_start = time.monotonic()
    # SIGTERM (timeout, CI) unwinds like Ctrl-C, so the finally blocks stop the worker and broker
    def _terminate(*_: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup short
        sys.exit(143)

    signal.signal(signal.SIGTERM, _terminate)
    broker = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    results: dict[int, list[dict[str, Any]]] = {n: [] for n in args.workers}
    with tempfile.TemporaryDirectory(prefix="fs-bench-stream-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            t0 = time.perf_counter()
            bulk = build_bulk(args.seconds, seed=7)
            _self_check(json.loads(bulk.messages[5][1]))
            lives = [build_live(int(args.live_rate * args.live_seconds), args.jobs, seed=11 + r, run=r)
                     for r in range(args.runs)]
            print(f"generated {len(bulk.messages):,} bulk + {len(lives[0].messages):,} live observations "
                  f"({HOSTS} hosts x {OBS_PER_HOST_S} obs/s, {HOSTS * GPUS:,}-rank job, {args.jobs} x 64-rank jobs) "
                  f"in {time.perf_counter() - t0:.1f} s", flush=True)
            if not bootstrap:
                from deploy.kafka.broker import start

                broker = start(ephemeral=True, fresh=True)
                bootstrap = broker.bootstrap
                print(f"broker {bootstrap} started in {broker.started_in_s:.1f} s", flush=True)
            for n in args.workers:
                for r in range(args.runs):
                    res = run_once(args, bootstrap, bulk, lives[r], r, tmp, members=n)
                    results[n].append(res)
                    print(f"{n} worker(s), run {r + 1}: {res['throughput']:,.0f} obs/s (drained {len(bulk.messages):,} "
                          f"in {res['drain_s']:.1f} s, agents caught up {res['catch_up_s']:.1f} s later; producer {len(bulk.messages) / res['produce_s']:,.0f} obs/s), "
                          f"floor {res['floor']:,.0f} obs/s; live XID p50 {pct(res['lat']['xid'], 50):.2f} s; "
                          f"missing verdicts: {res['missing'] or 'none'}; wrong: {res['wrong'] or 'none'}", flush=True)
        finally:
            if broker is not None:
                broker.stop()
    print()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{platform.system()} {platform.release()}")
    print(f"workload: {HOSTS} hosts x {OBS_PER_HOST_S} obs/host/s = {HOSTS * OBS_PER_HOST_S:,} obs per event second; "
          f"bulk {args.seconds} event s = {len(bulk.messages):,} obs; partitions {args.partitions}; "
          f"lateness {args.lateness:g} s; idle timeout {args.idle_timeout:g} s; clickhouse {args.clickhouse}; "
          f"stages {args.stages}")
    first = args.workers[0]
    failed = []
    for n, runs in results.items():
        thr = statistics.median(r["throughput"] for r in runs)
        flo = statistics.median(r["floor"] for r in runs)
        lat = {k: [x for r in runs for x in r["lat"][k]] for k in runs[0]["lat"]}
        print(f"-- {n} worker(s) in one consumer group --")
        print(f"throughput: median {thr:,.0f} obs/s over {len(runs)} runs "
              f"({', '.join(format(r['throughput'], ',.0f') for r in runs)}); target 20,000 per worker "
              f"(first bar), 50,000")
        print(f"floor (confluent_kafka consume + json.loads + Observation.model_validate): median {flo:,.0f} obs/s")
        print(f"throughput / floor: {thr / flo:.2f}")
        print(f"live segment: {args.live_rate:g} obs/s for ~{args.live_seconds:g} s, {args.jobs} failing 64-rank jobs per run")
        for key, label in (("xid", "XID produced -> provisional verdict"), ("terminal", "terminal state produced -> final verdict")):
            v = lat[key]
            print(f"  {label}: p50 {pct(v, 50):.3f} s  p99 {pct(v, 99):.3f} s  max {max(v, default=float('nan')):.3f} s  (n={len(v)})")
        print(f"  target: provisional p99 <= 1 s; the terminal verdict waits the idle timeout "
              f"({args.idle_timeout:g} s wall clock)")
        print(f"bulk segment (saturated worker, backlog included), 16,384-rank job: "
              f"XID -> verdict {', '.join(f'{x:.1f}' for x in lat['bulk_xid'])} s; "
              f"terminal -> final verdict {', '.join(f'{x:.1f}' for x in lat['bulk_terminal'])} s (target <= 5 s)")
        missing = [m for r in runs for m in r["missing"]]
        wrong = [m for r in runs for m in r["wrong"]]
        same = all(r["finals"] == r0["finals"] for r, r0 in zip(runs, results[first]))
        print(f"verdicts missing: {missing or 'none'}; wrong: {wrong or 'none'}; "
              f"equal to those of {first} worker(s): {'yes' if same else 'NO'}")
        for r in runs:
            for wid in r["wrong"][:3]:
                print(f"  wrong: {wid}: {r['finals'][wid]}")
        failed += [f"{n} worker(s): missing {m}" for m in missing] + [f"{n} worker(s): wrong {m}" for m in wrong]
        if not same:
            failed.append(f"{n} worker(s): verdicts differ from those of {first}")
    print(f"wall time: {time.monotonic() - t_start:.0f} s")
    if failed:
        print(f"FAILED: {'; '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
