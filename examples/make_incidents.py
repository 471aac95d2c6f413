"""Build the incident bundles under ``examples/incidents/`` from the real fixtures.

Every bundle is built around log lines that nobody on this project wrote (the anonymised
fixtures in ``shared/fixtures/real`` beside the checkout): those lines are copied verbatim, except that
placeholders the anonymiser left in public threads (``10.0.0.x``, ``GPU-uuid-a``, ``<pid>``,
...) are filled with concrete anonymised values so that a host, GPU or address can be named.
The lines around them (watchdog timeouts on the other ranks, torchrun summaries, slurmctld
records, kernel segfault / OOM lines) are written in the exact formats of the real logs.

Run:  python3 examples/make_incidents.py   (FAULTSTREAM_FIXTURES overrides the fixture dir)
The output is deterministic; re-running rewrites the bundles byte for byte.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import yaml

FIX = Path(os.environ.get("FAULTSTREAM_FIXTURES", Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"))
H200 = FIX / "h200-2026-11"
PUB = FIX / "public"
OUT = Path(__file__).resolve().parent / "incidents"

UTC = dt.timezone.utc
IPS = {f"node-a0{i}": f"10.0.0.{10 + i}" for i in range(1, 10)}
IPS["node-a45"] = "10.0.0.45"

README_ROWS: list[tuple[str, str, str, str]] = []


# ----------------------------------------------------------------------------- helpers


def t(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def iso(value: dt.datetime) -> str:
    value = value.astimezone(UTC)
    if value.microsecond:
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def read(path: Path) -> list[str]:
    return path.read_text().splitlines()


def lines_of(path: Path, first: int = 1, last: int | None = None) -> list[str]:
    """Lines first..last (1-based, inclusive) of a fixture, verbatim."""
    all_lines = read(path)
    return all_lines[first - 1 : last]


def host_facts(nodes: list[str], boot: dict[str, dt.datetime] | None = None) -> dict:
    """``workload.yaml`` ``hosts``: boot time (when given), time zone UTC, address."""
    hosts = {}
    for host in nodes:
        facts: dict = {}
        if boot and host in boot:
            facts["boot_time"] = iso(boot[host])
        facts["timezone"] = "UTC"
        facts["ip"] = IPS[host]
        hosts[host] = facts
    return hosts


class Bundle:
    def __init__(self, name: str) -> None:
        self.name = name
        self.dir = OUT / name
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)

    def write(self, rel: str, lines: list[str] | str) -> None:
        path = self.dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        text = lines if isinstance(lines, str) else "\n".join(lines) + "\n"
        path.write_text(text)

    def copy(self, rel: str, src: Path) -> None:
        path = self.dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, path)

    def yaml(self, rel: str, data: dict, header: str = "") -> None:
        text = yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=False)
        self.write(rel, header + text)

    def workload(
        self,
        job: str,
        state: str,
        start: dt.datetime,
        end: dt.datetime,
        nodes: list[str],
        scheduler: str = "static",
        exit_code: str | None = None,
        ranks_per_node: int | None = None,
        ranks: dict[int, dict] | None = None,
        boot: dict[str, dt.datetime] | None = None,
    ) -> None:
        data: dict = {"workload_id": job, "scheduler": scheduler, "cluster": "c1", "state": state}
        if exit_code is not None:
            data["exit_code"] = exit_code
        data["start"] = iso(start)
        data["end"] = iso(end)
        data["nodes"] = nodes
        if ranks_per_node:
            data["ranks_per_node"] = ranks_per_node
        if ranks:
            data["ranks"] = ranks
        data["hosts"] = host_facts(nodes, boot)
        self.yaml("workload.yaml", data)

    def expected(self, readme_what: str, source: str, rows: list | None = None, **fields) -> None:
        """Write ``expected.yaml`` and add the bundle's README row (bundle, what, verdict,
        source) to ``rows`` (default: this generator's :data:`README_ROWS`)."""
        data = {k: v for k, v in fields.items() if v is not None}
        self.yaml("expected.yaml", data)
        verdict = []
        if "domain" in data:
            verdict.append(data["domain"])
        if "domain_any_of" in data:
            verdict.append("/".join(data["domain_any_of"]))
        if "root_cause" in data:
            verdict.append(f"`{data['root_cause']}`")
        if "culprit_hosts" in data:
            verdict.append("hosts " + (", ".join(data["culprit_hosts"]) or "none"))
        if "culprit_ranks" in data:
            verdict.append("ranks " + (", ".join(str(r) for r in data["culprit_ranks"]) or "none"))
        if "alternatives" in data:
            verdict.append("alternatives " + (", ".join(f"`{a}`" for a in data["alternatives"]) or "none"))
        if "quality_any_of" in data:
            verdict.append("quality " + "/".join(data["quality_any_of"]))
        (README_ROWS if rows is None else rows).append((self.name, readme_what, "; ".join(verdict), source))


def dmesg_T(at: dt.datetime, text: str) -> str:
    return f"[{at.strftime('%a %b %d %H:%M:%S %Y')}] {text}"


def glog_time(at: dt.datetime, digits: int = 6) -> str:
    frac = f"{at.microsecond:06d}" if digits == 6 else f"{at.microsecond:06d}{(at.microsecond * 7919 + 331) % 1000:03d}"
    return f"{at.month:02d}{at.day:02d} {at.strftime('%H:%M:%S')}.{frac}"


def watchdog_v1(rank: int, at: dt.datetime, tid: int, seq: int, numel: int, ran_ms: int) -> str:
    """The PyTorch watchdog line in the glog-with-thread-id format."""
    return (
        f"[rank{rank}]:[E{glog_time(at)} {tid} ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught "
        f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={numel}, "
        f"NumelOut={numel}, Timeout(ms)=600000) ran for {ran_ms} milliseconds before timing out."
    )


def watchdog_v2(rank: int, at: dt.datetime, seq: int, numel: int, ran_ms: int, op: str = "ALLREDUCE") -> list[str]:
    """The PyTorch 2.11 format (nanosecond glog time, no thread id, ``[PG ID 0 PG GUID 0 Rank n]``,
    as in the real H200 capture), with the two lines the watchdog prints after it."""
    pg = f"[PG ID 0 PG GUID 0 Rank {rank}]"
    stamp = glog_time(at, 9)
    return [
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:690] {pg} Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000) "
        f"ran for {ran_ms} milliseconds before timing out.",
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:2182] {pg} Timeout at NCCL work: {seq}, last enqueued "
        f"NCCL work: {seq}, last completed NCCL work: {seq - 1}.",
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:733] {pg} To avoid data inconsistency, we are taking "
        f"the entire process down.",
    ]


# the launcher traceback torchrun prints before its summary, verbatim from the H200 logs
_SIGKILL = read(H200 / "torchrun-rank-sigkill.log")
_TB0 = _SIGKILL.index("Traceback (most recent call last):")
_TB1 = next(i for i, l in enumerate(_SIGKILL) if l.startswith("torch.distributed.elastic.multiprocessing.errors.ChildFailedError"))
TORCHRUN_TRACEBACK = _SIGKILL[_TB0 : _TB1 + 1]
assert TORCHRUN_TRACEBACK[0] == "Traceback (most recent call last):", TORCHRUN_TRACEBACK[0]
assert TORCHRUN_TRACEBACK[-1].startswith("torch.distributed.elastic.multiprocessing.errors.ChildFailedError")


def torchrun_summary(
    script: str,
    at: dt.datetime,
    host: str,
    root: tuple[int, int, int, int],
    others: list[tuple[int, int, int, int]],
) -> list[str]:
    """torchrun's failure summary; entries are (rank, local_rank, exitcode, pid)."""

    def entry(idx: int, rank: int, local: int, code: int, pid: int) -> list[str]:
        sig = {-6: "Signal 6 (SIGABRT)", -9: "Signal 9 (SIGKILL)", -11: "Signal 11 (SIGSEGV)", -15: "Signal 15 (SIGTERM)"}
        tb = f"{sig[code]} received by PID {pid}" if code in sig else (
            "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        )
        return [
            f"[{idx}]:",
            f"  time      : {at.strftime('%Y-%m-%d_%H:%M:%S')}",
            f"  host      : {host}",
            f"  rank      : {rank} (local_rank: {local})",
            f"  exitcode  : {code} (pid: {pid})",
            "  error_file: <N/A>",
            f"  traceback : {tb}",
        ]

    out = list(TORCHRUN_TRACEBACK) + ["=" * 60, f"{script} FAILED", "-" * 60, "Failures:"]
    if others:
        for i, o in enumerate(others, start=1):
            out += entry(i, *o)
    else:
        out.append("  <NO_OTHER_FAILURES>")
    out += ["-" * 60, "Root Cause (first observed failure):"]
    out += entry(0, *root)
    out.append("=" * 60)
    return out


def glog_agent(level: str, at: dt.datetime, pid: int, msg: str, where: str = "api.py:986") -> str:
    return f"{level}{glog_time(at)[:-3]}000 {pid} torch/distributed/elastic/multiprocessing/{where}] {msg}"


def slurmctld(lines: list[tuple[dt.datetime, str]]) -> list[str]:
    return [f"[{a.strftime('%Y-%m-%dT%H:%M:%S')}.{a.microsecond // 1000:03d}] {m}" for a, m in lines]


def slurm_job(job: int, nodelist: str, cpus: int, start: dt.datetime, end: dt.datetime, status: int = 1) -> list[str]:
    return slurmctld(
        [
            (start - dt.timedelta(seconds=2, microseconds=-12000), f"_slurm_rpc_submit_batch_job: JobId={job} InitPrio=4294901759 usec=402"),
            (start + dt.timedelta(microseconds=318000), f"sched: Allocate JobId={job} NodeList={nodelist} #CPUs={cpus} Partition=gpu"),
            (end - dt.timedelta(microseconds=877000), f"_job_complete: JobId={job} WEXITSTATUS {status}"),
            (end - dt.timedelta(microseconds=876000), f"_job_complete: JobId={job} done"),
        ]
    )


def case_source(case: str) -> str:
    data = yaml.safe_load((PUB / case / "case.yaml").read_text())
    return str(data["source"]).split()[0]


def gpu_csv(at: dt.datetime, buses: list[str], name: str, host_no: int) -> list[str]:
    """``nvidia-smi --query-gpu=timestamp,index,pci.bus_id,uuid,name --format=csv`` output."""
    out = ["timestamp, index, pci.bus_id, uuid, name"]
    stamp = at.strftime("%Y/%m/%d %H:%M:%S.") + f"{at.microsecond // 1000 + 4 * host_no + 411:03d}"
    for i, bus in enumerate(buses):
        out.append(f"{stamp}, {i}, 00000000:{bus}:00.0, {uuid_of(host_no, i)}, {name}")
    return out


def uuid_of(host_no: int, idx: int) -> str:
    return f"GPU-00000000-0000-4000-8000-0000000{host_no:02d}{idx:03d}"


def fill(line: str, **subs: str) -> str:
    for old, new in subs.items():
        line = line.replace(old, new)
    return line


# ----------------------------------------------------------------------------- H200 bundles

H200_BOOT_1 = t("2026-11-30T01:19:36Z")  # [0.000000] <-> [Mon Nov 30 01:19:36 2026]; Xid 31 at 88.44 s -> 01:21:04
H200_CASE = "h200-2026-11 (own capture, shared/fixtures/real/h200-2026-11)"


def h200_xid31() -> None:
    b = Bundle("h200-xid31-illegal-address")
    start, end = t("2026-11-30T01:20:58Z"), t("2026-11-30T01:21:06Z")
    b.workload("job-1001", "FAILED", start, end, ["node-a01"], scheduler="slurm", exit_code="1:0",
               ranks={0: {"host": "node-a01", "gpu": 0}})
    dm = read(H200 / "dmesg-T.log")
    cut = next(i for i, l in enumerate(dm) if "Xid (PCI:0000:00:06): 31," in l)
    b.write("logs/node-a01/dmesg-T.log", dm[: cut + 1])  # collected at job end: the later Xid 43 is not there yet
    b.copy("logs/node-a01/app.log", H200 / "app-cupy-illegal-address.log")
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1001, "node-a01", 16, start, end))
    b.expected(
        "oob.py writes far outside its buffer: Xid 31 MMU fault (pid 647) + cudaErrorIllegalAddress",
        H200_CASE,
        domain="software",
        root_cause="app.cuda.illegal_address",
        culprit_hosts=["node-a01"],
        quality_any_of=["definitive", "probable"],
        notes=(
            "H200 capture (fixtures/real/h200-2026-11, README: dmesg-T.log + app-cupy-illegal-address.log). "
            "oob.py launches a kernel that writes p[threadIdx.x << 36]: the driver logs one Xid 31 MMU fault "
            "(FAULT_PDE ACCESS_TYPE_VIRT_WRITE) for pid 647 and the process gets cudaErrorIllegalAddress. "
            "A single Xid 31 from one process, with the application's own illegal-address error and no "
            "repeat on that GPU, is an application bug (XID catalog: WORKFLOW_XID_31, RESTART_APP), so the "
            "domain is software and the culprit is the host the process ran on, not the GPU. The dmesg was "
            "collected at job end, so the later Xid 43 of another program is not in it."
        ),
    )


def h200_xid43() -> None:
    b = Bundle("h200-xid43-device-assert")
    start, end = t("2026-11-30T01:21:06Z"), t("2026-11-30T01:21:13Z")
    b.workload("job-1002", "FAILED", start, end, ["node-a01"], exit_code="1:0",
               ranks={0: {"host": "node-a01", "gpu": 0}}, boot={"node-a01": H200_BOOT_1})
    b.copy("logs/node-a01/dmesg-raw.log", H200 / "dmesg-raw.log")
    b.copy("logs/node-a01/app.log", H200 / "app-torch-device-assert.log")
    b.copy("metrics/node-a01/nvidia-smi-q-after.txt", H200 / "nvidia-smi-q-after.txt")
    b.expected(
        "torch index out of bounds: device-side assert + Xid 43 (pid 671); raw dmesg needs boot_time",
        H200_CASE,
        domain="software",
        root_cause="app.cuda.device_assert",
        culprit_hosts=["node-a01"],
        quality_any_of=["definitive", "probable"],
        notes=(
            "H200 capture (dmesg-raw.log + app-torch-device-assert.log). An index-out-of-bounds in a torch "
            "kernel fires `Assertion ... index out of bounds failed`, the app reports 'device-side assert "
            "triggered', and the driver logs Xid 43 (GPU stopped processing) for pid 671 at 94.208711 s "
            "after boot = 01:21:10Z (boot_time 01:19:36Z, matching dmesg -T). Xid 43 after a device assert "
            "is the channel being torn down for the faulting process: an application fault, domain software. "
            "The raw dmesg was collected at job end and also holds the Xid 31 of the previous job (pid 647, "
            "01:21:04Z, before this workload started) - it must not be blamed. nvidia-smi -q after the run "
            "shows a healthy GPU."
        ),
    )


def h200_sigkill() -> None:
    b = Bundle("h200-torchrun-rank-sigkill")
    start, end = t("2026-11-30T01:20:25Z"), t("2026-11-30T01:20:32Z")
    b.workload("job-1003", "FAILED", start, end, ["node-a01"], scheduler="slurm", exit_code="1:0",
               ranks={0: {"host": "node-a01"}, 1: {"host": "node-a01"}})
    b.copy("logs/node-a01/torchrun.log", H200 / "torchrun-rank-sigkill.log")
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1003, "node-a01", 16, start, end))
    b.expected(
        "kill.py: rank 1 SIGKILLs itself at step 3; rank 0 gets gloo 'Connection reset by peer'",
        H200_CASE,
        domain_any_of=["software", "host"],
        root_cause="proc.killed",
        culprit_hosts=["node-a01"],
        culprit_ranks=[1],
        quality_any_of=["definitive", "probable"],
        notes=(
            "H200 capture (torchrun-rank-sigkill.log; program kill.py). Rank 1 prints 'simulating hard "
            "failure at step 3' and sends itself SIGKILL; rank 0's all_reduce then fails with gloo "
            "'Read error [127.0.0.1]:11692: Connection reset by peer', and torchrun reports rank 1 "
            "exitcode -9 (Signal 9 (SIGKILL)) as 'Root Cause (first observed failure)' - correctly here - "
            "and rank 0 as SIGTERMed by the agent. A killed rank explains the connection reset on its peer: "
            "proc.killed, culprit rank 1. No OOM-killer line exists (the kill came from the program), so "
            "host.oom_kill would be wrong; domain software or host are both acceptable."
        ),
    )


def h200_duplicate_gpu() -> None:
    b = Bundle("h200-nccl-duplicate-gpu")
    start, end = t("2026-11-30T01:20:20Z"), t("2026-11-30T01:20:24Z")
    b.workload("job-1004", "FAILED", start, end, ["node-a01"], exit_code="1:0",
               ranks={0: {"host": "node-a01", "gpu": 0}, 1: {"host": "node-a01", "gpu": 0}})
    b.copy("logs/node-a01/torchrun.log", H200 / "torchrun-nccl-duplicate-gpu.log")
    b.expected(
        "two ranks pinned to the same GPU: NCCL 'Duplicate GPU detected', ncclInvalidUsage",
        H200_CASE + "; pattern as https://github.com/Peterande/D-FINE/issues/289 (RC-09)",
        domain="config",
        root_cause="config.duplicate_gpu",
        quality_any_of=["definitive", "probable"],
        notes=(
            "H200 capture (torchrun-nccl-duplicate-gpu.log; program nccl2.py) - same failure as public "
            "RC-09. Both ranks use CUDA device 60 (the one H200), so NCCL init fails on every rank with "
            "'Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60' / ncclInvalidUsage. This "
            "is a launcher/job misconfiguration (RC-09 verdict: config, node n/a, no hardware fault); "
            "torchrun naming rank 0 as root cause is irrelevant. culprit_hosts is left open because the "
            "fault is the job's device assignment, not a host."
        ),
    )


H200_BOOT_2_T = "dmesg-T-second-boot.log"


def h200_misaligned() -> None:
    b = Bundle("h200-xid13-misaligned-address")
    start, end = t("2026-11-30T01:29:24Z"), t("2026-11-30T01:29:27Z")
    b.workload("job-1005", "FAILED", start, end, ["node-a01"], exit_code="1:0",
               ranks={0: {"host": "node-a01", "gpu": 0}})
    dm = read(H200 / H200_BOOT_2_T)
    cut = next(i for i, l in enumerate(dm) if "pid=446" in l)
    b.write("logs/node-a01/dmesg-T.log", dm[: cut + 1])  # collected at job end (01:29:27)
    b.copy("logs/node-a01/app.log", H200 / "app-cupy-misaligned-address.log")
    b.expected(
        "trap.py misaligned: three Xid 13 lines (Misaligned Address, ESR, pid 446) + CUDA_ERROR_MISALIGNED_ADDRESS",
        H200_CASE,
        domain="software",
        root_cause="app.cuda.misaligned_address",
        culprit_hosts=["node-a01"],
        quality_any_of=["definitive", "probable"],
        notes=(
            "H200 second boot (dmesg-T-second-boot.log + app-cupy-misaligned-address.log). trap.py "
            "misaligned does a misaligned load: the driver logs three Xid 13 lines at 01:29:26 (Graphics "
            "SM Warp Exception 'Misaligned Address', the ESR registers, and the channel/class line with "
            "pid=446) and the app gets cudaErrorMisalignedAddress. Xid 13 from one process with the "
            "application's own error is an application bug (WORKFLOW_XID_13 only points at the GPU when it "
            "repeats on the same GPU across jobs). The Xid 43 at 01:29:22 (pid 417) belongs to the previous "
            "program and predates this workload."
        ),
    )


def h200_socket_ifname() -> None:
    b = Bundle("h200-nccl-bad-socket-ifname")
    start, end = t("2026-11-30T01:29:40Z"), t("2026-11-30T01:29:43Z")
    b.workload("job-1013", "FAILED", start, end, ["node-a01"], exit_code="1:0",
               ranks={0: {"host": "node-a01", "gpu": 0}})
    b.copy("logs/node-a01/rank0.log", H200 / "nccl-bad-socket-ifname.log")
    b.expected(
        "NCCL_SOCKET_IFNAME names no interface: 'Bootstrap : no socket interface found', ncclInvalidUsage",
        H200_CASE,
        domain="config",
        root_cause="config.socket_ifname",
        quality_any_of=["definitive", "probable"],
        notes=(
            "H200 second boot (nccl-bad-socket-ifname.log; program ncclcfg.py with NCCL_SOCKET_IFNAME set "
            "to an interface that does not exist). NCCL's bootstrap logs 'NCCL WARN Bootstrap : no socket "
            "interface found' and the first all_reduce raises ncclInvalidUsage with the same last error. "
            "Nothing failed in hardware or fabric: it is the job's NCCL environment, domain config. No "
            "culprit host is required (the setting is job-wide)."
        ),
    )


def h200_rank_exception() -> None:
    b = Bundle("h200-torchrun-rank1-exception")
    start, end = t("2026-11-30T01:29:50Z"), t("2026-11-30T01:29:56Z")
    b.workload("job-1014", "FAILED", start, end, ["node-a01"], exit_code="1:0",
               ranks={0: {"host": "node-a01"}, 1: {"host": "node-a01"}})
    b.copy("logs/node-a01/torchrun.log", H200 / "torchrun-record-error-file.log")
    b.copy("logs/node-a01/dmesg-T.log", H200 / H200_BOOT_2_T)  # collected at job end: no Xid during the job
    b.expected(
        "raise.py: rank 1 raises a RuntimeError; rank 0's barrier gets 'Connection closed by peer'",
        H200_CASE,
        domain="software",
        root_cause="app.exception",
        culprit_hosts=["node-a01"],
        culprit_ranks=[1],
        quality_any_of=["definitive", "probable"],
        notes=(
            "H200 second boot (torchrun-record-error-file.log; program raise.py with @record). Rank 1 "
            "raises RuntimeError('CUDA error: an illegal memory access was encountered (simulated in rank "
            "1)') and exits 1; rank 0's gloo barrier fails with 'Connection closed by peer'; torchrun's "
            "summary (with the error file's traceback) names rank 1 as root cause. The text mentions a CUDA "
            "error but it is a Python raise: the host's dmesg (collected at job end) has no Xid after "
            "01:29:29, 20 s before this job, so this is an application exception - domain software, "
            "culprit rank 1: app.exception (the uncaught RuntimeError on rank 1, raised by the program "
            "itself), never app.cuda.*."
        ),
    )


# ----------------------------------------------------------------------------- multi-node bundles


def spread(base: dt.datetime, rank: int, ms: int) -> dt.datetime:
    """A deterministic per-rank jitter of up to ~40 ms around base."""
    return base + dt.timedelta(microseconds=((rank * 7919) % 41) * 1000 + (rank * 104729) % 1000 + ms * 1000)


def timeouts_v1(ranks: list[int], enqueued: dt.datetime, seq: int, numel: int, tid0: int) -> dict[int, tuple[dt.datetime, str]]:
    out = {}
    for r in ranks:
        ran = 600000 + 12 + (r * 37) % 23  # 600012..600034 ms
        began = enqueued + dt.timedelta(microseconds=((r * 131) % 29) * 1000)
        at = began + dt.timedelta(milliseconds=ran)
        out[r] = (at, watchdog_v1(r, at, tid0 + r * 3, seq, numel, ran))
    return out


def public_rc15() -> None:
    b = Bundle("public-rc15-pcie-aer-xid79-multinode")
    start, end = t("2026-11-30T00:55:00Z"), t("2026-11-30T01:31:10Z")
    xid_at = t("2026-11-30T01:21:03.644138Z")
    boot = xid_at - dt.timedelta(seconds=74889, microseconds=644138)  # [74889.644138] Xid 79
    nodes = ["node-a01", "node-a02"]
    b.workload("job-1006", "FAILED", start, end, nodes, scheduler="slurm", exit_code="1:0",
               ranks_per_node=8, boot={"node-a02": boot})
    src = lines_of(PUB / "rc-15" / "lines.log")
    src = [fill(l, **{"GPU-uuid-a": uuid_of(2, 1), "<serial>": "1650123000021"}) for l in src]
    b.write("logs/node-a02/dmesg-raw.log", src)
    buses = ["01", "02", "03", "04", "81", "82", "83", "84"]
    b.write("metrics/node-a02/nvidia-smi-gpus.csv", gpu_csv(start, buses, "NVIDIA H100 80GB HBM3", 2))
    b.write("metrics/node-a01/nvidia-smi-gpus.csv", gpu_csv(start, buses, "NVIDIA H100 80GB HBM3", 1))
    enq = t("2026-11-30T01:21:04.081000Z")
    silent = 9  # node-a02, GPU index 1 = 0000:02:00
    tos = timeouts_v1([r for r in range(16) if r != silent], enq, 4121, 262144, 8800)
    for host, ranks in (("node-a01", range(0, 8)), ("node-a02", range(8, 16))):
        lines = [tos[r] for r in ranks if r in tos]
        lines.sort()
        b.write(f"logs/{host}/train.log", [l for _, l in lines])
    last = max(a for a, _ in tos.values())
    fail = last + dt.timedelta(milliseconds=1400)
    summary = [glog_agent("E", fail, 3121, "failed (exitcode: -6) local_rank: 0 (pid: 3140) of binary: /path/to/venv/bin/python3")]
    summary += torchrun_summary("/path/to/train.py", fail, "node-a01", (0, 0, -6, 3140),
                                [(r, r, -6, 3140 + r) for r in range(1, 8)])
    with (b.dir / "logs/node-a01/train.log").open("a") as fh:
        fh.write("\n".join(summary) + "\n")
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1006, "node-a[01-02]", 224, start, end))
    b.yaml("topology.yaml", {
        "links": [
            {"host": "node-a01", "hca": "mlx5_0", "host_port": 1, "switch": "leaf-01", "switch_port": "Eth1/1"},
            {"host": "node-a02", "hca": "mlx5_0", "host_port": 1, "switch": "leaf-01", "switch_port": "Eth1/2"},
        ],
        "domains": {"rack-1": nodes},
    })
    src_url = case_source("rc-15")
    b.expected(
        "node-a02 GPU 1 (0000:02:00): AER replay timeouts, Surprise Down, Xid 79; 15 other ranks time out 10 min later",
        src_url,
        domain="gpu_hardware",
        root_cause="gpu.xid.79",
        culprit_hosts=["node-a02"],
        culprit_ranks=[9],
        quality_any_of=["definitive", "probable"],
        notes=(
            f"Public RC-15 ({src_url}): corrected PCIe AER 'Replay Timer Timeout' on root port 0000:00:02.0 "
            "~100 s before an uncorrected fatal 'Surprise Down Error', then 'NVRM: Xid (PCI:0000:02:00): 79, "
            "GPU has fallen off the bus.' (lines verbatim; only the GPU-uuid-a and <serial> placeholders "
            "filled). Placed as raw dmesg on node-a02 with boot_time so the Xid 79 lands at 01:21:03.6Z. "
            "0000:02:00 is GPU index 1 in node-a02's nvidia-smi CSV, so with ranks_per_node 8 it is rank 9. "
            "Every other rank (0-8, 10-15) logs a watchdog timeout for SeqNum 4121 ~600 s later "
            "(01:31:04Z): back-dated, the stall starts at 01:21:04, right after the Xid 79. A GPU that fell "
            "off the bus explains the timeouts on all other ranks: gpu_hardware, gpu.xid.79, node-a02, rank "
            "9. torchrun's summary on node-a01 names rank 0 (SIGABRT) - a symptom, not the cause."
        ),
    )


def public_rc25() -> None:
    b = Bundle("public-rc25-fell-off-bus-no-xid-multinode")
    start, end = t("2026-11-30T03:35:00Z"), t("2026-11-30T03:50:20Z")
    event = t("2026-11-30T03:40:12.308145Z")
    boot = event - dt.timedelta(seconds=1843, microseconds=308145)  # [ 1843.308145]
    nodes = ["node-a01", "node-a02"]
    b.workload("job-1007", "FAILED", start, end, nodes, exit_code="1:0", ranks_per_node=8,
               boot={"node-a01": boot})
    src = lines_of(PUB / "rc-25" / "lines.log")
    b.write("logs/node-a01/dmesg-raw.log", src)
    buses = ["1b", "3d", "4c", "5d", "9c", "b3", "c1", "da"]
    b.write("metrics/node-a01/nvidia-smi-gpus.csv", gpu_csv(start, buses, "NVIDIA L40", 1))
    b.write("metrics/node-a02/nvidia-smi-gpus.csv", gpu_csv(start, buses, "NVIDIA L40", 2))
    enq = t("2026-11-30T03:40:12.390000Z")
    silent = 5  # node-a01 GPU index 5 = 0000:b3:00.0
    tos = timeouts_v1([r for r in range(16) if r != silent], enq, 1877, 1048576, 6100)
    for host, ranks in (("node-a01", range(0, 8)), ("node-a02", range(8, 16))):
        lines = sorted(tos[r] for r in ranks if r in tos)
        b.write(f"logs/{host}/train.log", [l for _, l in lines])
    src_url = case_source("rc-25")
    b.expected(
        "node-a01 GPU 0000:b3:00.0 'fallen off the bus' (no Xid number); 15 other ranks time out",
        src_url,
        domain="gpu_hardware",
        root_cause="gpu.xid.79",
        culprit_hosts=["node-a01"],
        culprit_ranks=[5],
        quality_any_of=["definitive", "probable"],
        notes=(
            f"Public RC-25 ({src_url}): the open kernel module's 'The NVIDIA GPU 0000:b3:00.0 (PCI ID: "
            "10de:26b5) installed in this system has fallen off the bus and is not responding to commands.' "
            "- a three-line message (two continuation lines without a timestamp) that carries no Xid "
            "number; the case says a parser must map it to the same class as Xid 79. Lines verbatim, as raw "
            "dmesg on node-a01 with boot_time so [1843.308145] = 03:40:12.3Z. (In the thread the message "
            "was probe-time; here it is placed inside a running job as a format case.) 0000:b3:00.0 is GPU "
            "index 5 in node-a01's CSV -> rank 5, the only rank with no watchdog timeout; all 15 others "
            "time out on SeqNum 1877 ~600 s later. Expected gpu.xid.79 on node-a01, rank 5."
        ),
    )


def public_rc13() -> None:
    b = Bundle("public-rc13-hbm-xid48-hang")
    start, end = t("2026-11-30T01:50:00Z"), t("2026-11-30T02:24:15Z")
    b.workload("job-1008", "FAILED", start, end, ["node-a01"], exit_code="1:0", ranks_per_node=4)
    tmpl = read(PUB / "rc-13" / "template-lines.log")
    filled = [
        fill(l, **{"pid=<pid>": "pid=4177", "name=<proc>": "name=python3", "0x<addr>": "0x1ad2c4a000",
                   "<Drain and Reset>": "0x4 (Drain and Reset)"})
        for l in tmpl
    ]
    stamps = ["Nov 30 02:14:07", "Nov 30 02:14:07", "Nov 30 02:14:07", "Nov 30 02:14:08"]
    b.write("logs/node-a01/kern.log", [f"{s} node-a01 kernel: {l}" for s, l in zip(stamps, filled)])
    # telemetry: nvidia-smi --query-gpu in the H200 capture's exact column set
    header = read(H200 / "nvidia-smi-query-gpu.csv")[0]
    buses = ["4f", "52", "9c", "9f"]
    rows = [header]
    samples = [
        (t("2026-11-30T01:50:05Z"), 3, 0, "No", 0),
        (t("2026-11-30T02:14:10Z"), 4, 1, "Yes", 1),
    ]
    for at, unc_rows, unc_ecc, pending, agg in samples:
        for i, bus in enumerate(buses):
            bad = i == 2
            rows.append(", ".join([
                at.strftime("%Y/%m/%d %H:%M:%S.") + f"{(at.microsecond // 1000) + 312 + i:03d}",
                str(i), uuid_of(1, i), f"00000000:{bus}:00.0", "NVIDIA A100 80GB PCIe", "580.178.04",
                "92.00.A0.00.01", str(52 + i), str(61 + i), f"{212.4 + i * 3.1:.2f} W", "1410 MHz", "1512 MHz",
                "0x0000000000000000", "Not Active", "Not Active", "Not Active", "Not Active", "Not Active",
                "Not Active", "0" if not bad else "12", str(unc_ecc if bad else 0), str(agg + 2 if bad else 0),
                "[N/A]", "0", str(unc_rows if bad else 0), pending if bad else "No", "No", "4", "16",
                "100 %", "38 %", "71820 MiB", "81920 MiB",
            ]))
    b.write("metrics/node-a01/nvidia-smi-query-gpu.csv", rows)
    enq = t("2026-11-30T02:14:06.930000Z")
    lines = []
    for r in (0, 1, 3):
        ran = 600000 + 9 + r * 6
        at = enq + dt.timedelta(milliseconds=ran + r * 3, microseconds=(r * 4219) % 1000 + 117)
        lines += watchdog_v2(r, at, 918274, 4194304, ran, op="ALLREDUCE")
    b.write("logs/node-a01/server.log", lines)
    src_url = case_source("rc-13")
    b.expected(
        "A100 0000:9c:00 (rank 2): Xid 48 DBE, Xid 63 row remap, Xid 94 contained ECC, Xid 154 Drain and Reset; TP4 hangs",
        src_url,
        domain="gpu_hardware",
        root_cause="gpu.",
        culprit_hosts=["node-a01"],
        culprit_ranks=[2],
        quality_any_of=["definitive", "probable"],
        notes=(
            f"Public RC-13 ({src_url}): a degrading HBM on one of four A100-80GB PCIe; the thread logs Xid "
            "48 (uncorrectable DBE), Xid 63 (row remapper), Xid 94 (contained ECC) and Xid 154 (recovery "
            "action -> Drain and Reset), and remapped rows kept growing; the TP4 engine hung on all ranks "
            "and was first blamed on software. The lines come from the case's template-lines.log (the "
            "thread described rather than pasted them) with the <pid>/<proc>/<addr> placeholders filled, "
            "written as journald short lines. The telemetry CSV shows GPU 2 (0000:9c:00) with volatile "
            "uncorrectable ECC 1 and remapped_rows.uncorrectable 3 -> 4, pending Yes. Ranks 0, 1, 3 time "
            "out ~600 s after the Xid 48; rank 2 (on the bad GPU) does not. Verdict: gpu_hardware on "
            "node-a01 / rank 2; root cause gpu.xid.48 preferred, but any gpu.* code (gpu.ecc) is accepted."
        ),
    )


def public_rc05() -> None:
    b = Bundle("public-rc05-dev-shm-too-small")
    start, end = t("2026-11-30T02:00:00Z"), t("2026-11-30T02:00:41Z")
    b.workload("job-1009", "FAILED", start, end, ["node-a01"], exit_code="1:0", ranks_per_node=4)
    src = lines_of(PUB / "rc-05" / "lines.log")
    src = [fill(l, **{"<id>": "4bd7e1b9a3c26f08"}) for l in src]
    src.append("RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:784, unhandled system error, NCCL version 2.7.3")
    b.write("logs/node-a01/train.log", src)
    b.write("logs/node-a01/df-dev-shm.txt", [
        "Filesystem      Size  Used Avail Use% Mounted on",
        "shm              64M     0   64M   0% /dev/shm",
    ])
    src_url = case_source("rc-05")
    b.expected(
        "container's default 64 MB /dev/shm: NCCL SHM posix_fallocate 'No space left on device'",
        "https://github.com/NVIDIA/nccl/issues/342",
        domain="config",
        root_cause="config.shm",
        culprit_hosts=["node-a01"],
        quality_any_of=["definitive", "probable"],
        notes=(
            f"Public RC-05 ({src_url}): NCCL 2.7 started using SHM for intra-node transport and, in a Docker "
            "container with the default 64 MB /dev/shm, 'Call to posix_fallocate failed: No space left on "
            "device' / 'Error while creating shared memory segment' (lines verbatim, <id> placeholder "
            "filled); the framework then raises 'unhandled system error'. The case verdict is config "
            "(container runtime: --shm-size / --ipc=host), on the single host, high confidence. 'No space "
            "left on device' here is not a storage fault."
        ),
    )


def public_rc01() -> None:
    b = Bundle("public-rc01-roce-gid-index")
    start, end = t("2026-11-30T05:00:00Z"), t("2026-11-30T05:01:32Z")
    nodes = ["node-a01", "node-a02"]
    b.workload("job-1015", "FAILED", start, end, nodes, exit_code="1:0", ranks_per_node=2)
    src = lines_of(PUB / "rc-01" / "lines.log")
    warn, devinfo = src[0], src[1:]
    assert warn.startswith("node-a02:946:988 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion with error 12")
    a01_warn = warn.replace("node-a02:946:988", "node-a01:1532:1570")
    b.write("logs/node-a01/nccl.log", [
        "node-a01:1532:1532 [0] NCCL INFO NET/IB : Using [0]mlx5_bond_0:1/RoCE ; OOB bond0:10.0.0.11<0>",
        a01_warn,
    ])
    b.write("logs/node-a02/nccl.log", [
        "node-a02:946:946 [0] NCCL INFO NET/IB : Using [0]mlx5_bond_0:1/RoCE ; OOB bond0:10.0.0.12<0>",
        warn,
    ])
    for host in nodes:
        b.write(f"logs/{host}/ibv_devinfo.txt", devinfo)
    b.yaml("topology.yaml", {
        "links": [
            {"host": "node-a01", "hca": "mlx5_bond_0", "host_port": 1, "switch": "leaf-01", "switch_port": "Eth1/1"},
            {"host": "node-a02", "hca": "mlx5_bond_0", "host_port": 1, "switch": "leaf-01", "switch_port": "Eth1/2"},
        ],
    })
    src_url = case_source("rc-01")
    b.expected(
        "RoCE: 'completion with error 12 ... vendor err 129' on the first connection of every host; ports ACTIVE",
        src_url,
        domain="config",
        root_cause="config.roce_gid_index",
        culprit_hosts=["node-a01", "node-a02"],
        quality_any_of=["definitive", "probable"],
        notes=(
            f"Public RC-01 ({src_url}): on RoCE, 'NET/IB : Got completion with error 12, opcode 1, len 0, "
            "vendor err 129' (retry exceeded) was fixed by setting NCCL_IB_GID_INDEX. The WARN line and the "
            "ibv_devinfo block are verbatim (node-a02); node-a01 logs the same line with its own pid, as the "
            "error hits the first connection on every host. ibv_devinfo shows PORT_ACTIVE, link_layer "
            "Ethernet, and there is no link-down/flap anywhere, so a fabric verdict (both hosts share "
            "leaf-01) would be wrong. Case verdict: config (RoCE GID selection), root-cause 'node' = all "
            "nodes of the job (job-wide env), high confidence."
        ),
    )


def stalled_rank() -> None:
    b = Bundle("multinode-stalled-rank-11")
    start, end = t("2026-11-30T02:05:00Z"), t("2026-11-30T02:47:26Z")
    nodes = ["node-a01", "node-a02"]
    b.workload("job-1010", "FAILED", start, end, nodes, scheduler="slurm", exit_code="1:0", ranks_per_node=8)
    enq = t("2026-11-30T02:37:18.204000Z")
    silent = 11
    per_host: dict[str, list[tuple[dt.datetime, list[str]]]] = {"node-a01": [], "node-a02": []}
    for r in range(16):
        if r == silent:
            continue
        ran = 600000 + 8 + (r * 13) % 19
        at = enq + dt.timedelta(microseconds=((r * 577) % 37) * 1000 + (r * 7331) % 1000 + ran * 1000)
        per_host["node-a01" if r < 8 else "node-a02"].append((at, watchdog_v2(r, at, 88213, 8388608, ran)))
    last = {}
    for host, items in per_host.items():
        items.sort()
        last[host] = items[-1][0]
    fail = max(last.values()) + dt.timedelta(milliseconds=1100)
    a01 = [l for _, ls in per_host["node-a01"] for l in ls]
    a01.append(glog_agent("E", fail, 2290, "failed (exitcode: -6) local_rank: 0 (pid: 2311) of binary: /path/to/venv/bin/python3"))
    a01 += torchrun_summary("/path/to/train.py", fail, "node-a01", (0, 0, -6, 2311), [(r, r, -6, 2311 + r) for r in range(1, 8)])
    b.write("logs/node-a01/torchrun.log", a01)
    a02 = [l for _, ls in per_host["node-a02"] for l in ls]
    a02.append(glog_agent("W", fail - dt.timedelta(milliseconds=30), 5510, "Sending process 5534 closing signal SIGTERM", where="api.py:1012"))
    a02.append(glog_agent("E", fail + dt.timedelta(milliseconds=40), 5510, "failed (exitcode: -6) local_rank: 0 (pid: 5531) of binary: /path/to/venv/bin/python3"))
    others = [(r, r - 8, -6 if r != silent else -15, 5531 + r - 8) for r in range(9, 16)]
    a02 += torchrun_summary("/path/to/train.py", fail + dt.timedelta(milliseconds=40), "node-a02", (8, 0, -6, 5531), others)
    b.write("logs/node-a02/torchrun.log", a02)
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1010, "node-a[01-02]", 224, start, end))
    b.expected(
        "15 of 16 ranks time out on SeqNum 88213; rank 11 (node-a02) logs nothing; torchrun blames rank 0 / 8",
        "DESIGN.md 'Attribution, in short' (a stalled rank is the one that did NOT time out)",
        domain_any_of=["unknown", "software"],
        root_cause="nccl.stalled_rank",
        culprit_hosts=["node-a02"],
        culprit_ranks=[11],
        quality_any_of=["probable", "definitive"],
        notes=(
            "Synthetic around real formats (PyTorch 2.11 watchdog lines as in the H200 capture; torchrun "
            "summary and agent lines as in torchrun-rank-sigkill.log). Ranks 0-10 and 12-15 each log "
            "'Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88213, OpType=ALLREDUCE, ...) "
            "ran for ~6000xx milliseconds' and 'last completed NCCL work: 88212' around 02:47:18Z; rank 11 "
            "on node-a02 logs nothing - it never entered collective 88213, so everyone else waited on it. "
            "No Xid, OOM, kill, link or scheduler event explains the stall. DESIGN.md: a stalled rank is the "
            "one that did NOT time out, and torchrun's 'Root Cause (first observed failure)' (rank 0 on "
            "node-a01, rank 8 on node-a02, both SIGABRT from the watchdog) gets this wrong; rank 11's "
            "SIGTERM (-15) comes from its agent after the timeouts and is not a cause."
        ),
    )


def ambiguous() -> None:
    b = Bundle("multinode-ambiguous-xid79-vs-oom-kill")
    start, end = t("2026-11-30T02:58:00Z"), t("2026-11-30T03:31:12Z")
    nodes = ["node-a01", "node-a02"]
    xid_at = t("2026-11-30T03:21:03.074554Z")
    boot = xid_at - dt.timedelta(seconds=1084456, microseconds=74554)  # rc-17 [1084456.074554]
    b.workload("job-1011", "FAILED", start, end, nodes, scheduler="slurm", exit_code="1:0", ranks_per_node=8,
               boot={"node-a01": boot})
    src = lines_of(PUB / "rc-17" / "lines.log")
    src = [fill(l, **{"GPU-uuid-b": uuid_of(1, 1)}) for l in src]
    b.write("logs/node-a01/dmesg-raw.log", src)
    buses = ["04", "09", "0c", "0f", "84", "89", "8c", "8f"]
    b.write("metrics/node-a01/nvidia-smi-gpus.csv", gpu_csv(start, buses, "NVIDIA H100 80GB HBM3", 1))
    oom_at = t("2026-11-30T03:21:03Z")
    b.write("logs/node-a02/dmesg-T.log", [
        dmesg_T(oom_at, "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0"),
        dmesg_T(oom_at, "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/system.slice/slurmstepd.scope/job_1011/step_0/user/task_0,task=python3,pid=48211,uid=1000"),
        dmesg_T(oom_at, "Out of memory: Killed process 48211 (python3) total-vm:498123456kB, anon-rss:402318844kB, file-rss:81232kB, shmem-rss:24576kB, UID:1000 pgtables:812344kB oom_score_adj:0"),
    ])
    # node-a02: the agent sees rank 12 die at once and stops the node's other workers
    died = oom_at + dt.timedelta(milliseconds=612)
    a02 = [glog_agent("W", died, 48190, f"Sending process {48207 + i} closing signal SIGTERM", where="api.py:1012")
           for i in range(8) if i != 4]
    a02.append(glog_agent("E", died + dt.timedelta(milliseconds=240), 48190, "failed (exitcode: -9) local_rank: 4 (pid: 48211) of binary: /path/to/venv/bin/python3"))
    a02 += torchrun_summary("/path/to/train.py", died, "node-a02", (12, 4, -9, 48211),
                            [(8 + i, i, -15, 48207 + i) for i in range(8) if i != 4])
    b.write("logs/node-a02/torchrun.log", a02)
    # node-a01: every rank but rank 1 (GPU 0000:09:00) times out ~600 s after 03:21:02
    enq = t("2026-11-30T03:21:02.410000Z")
    items = []
    for r in (0, 2, 3, 4, 5, 6, 7):
        ran = 600000 + 10 + (r * 11) % 17
        at = enq + dt.timedelta(microseconds=((r * 389) % 31) * 1000 + (r * 6143) % 1000 + ran * 1000)
        items.append((at, watchdog_v2(r, at, 51577, 16777216, ran)))
    items.sort()
    a01 = [l for _, ls in items for l in ls]
    fail = items[-1][0] + dt.timedelta(milliseconds=900)
    a01.append(glog_agent("E", fail, 7720, "failed (exitcode: -6) local_rank: 0 (pid: 7741) of binary: /path/to/venv/bin/python3"))
    a01 += torchrun_summary("/path/to/train.py", fail, "node-a01", (0, 0, -6, 7741),
                            [(r, r, -6, 7741 + r) for r in (2, 3, 4, 5, 6, 7)])
    b.write("logs/node-a01/torchrun.log", a01)
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1011, "node-a[01-02]", 224, start, end))
    b.expected(
        "GPU 1 of node-a01 falls off the bus (rc-17 Xid 79) and rank 12 on node-a02 is OOM-killed in the same second",
        case_source("rc-17") + " (Xid 79 lines)",
        quality_any_of=["ambiguous"],
        notes=(
            "Two causes fit equally. node-a01: the RC-17 Xid 79 lines verbatim (GPU-uuid-b filled) as raw "
            "dmesg, landing at 03:21:03.07Z; 0000:09:00 is GPU 1 -> rank 1. node-a02: the global OOM killer "
            "kills pid 48211 at 03:21:03 (dmesg -T, standard kernel format); torchrun on node-a02 reports "
            "rank 12 exitcode -9 and SIGTERMs its other workers. node-a01's ranks 0, 2-7 time out ~600 s "
            "later (03:31:03Z); back-dated, their stall began at ~03:21:02.4, before both events, which are "
            "0.07 s apart on two different hosts (within clock skew). Either the lost GPU (rank 1) or the "
            "killed peer (rank 12, with its node's ranks gone) explains the timeouts; nothing orders them. "
            "A correct verdict says ambiguous and lists the other cause as an alternative."
        ),
    )


def public_rc11() -> None:
    b = Bundle("public-rc11-peer-segfault-broken-pipe")
    start, end = t("2026-11-30T04:00:00Z"), t("2026-11-30T04:12:45Z")
    nodes = ["node-a01", "node-a02"]
    b.workload("job-1012", "FAILED", start, end, nodes, scheduler="slurm", exit_code="1:0", ranks_per_node=8)
    src = lines_of(PUB / "rc-11" / "lines.log")
    src = [fill(l, **{"10.0.0.x": IPS["node-a02"], "remote peer node-a01.cluster": "remote peer node-a02.cluster"}) for l in src]
    seg_at = t("2026-11-30T04:12:37Z")
    a01 = list(src)
    a01.append(glog_agent("E", seg_at + dt.timedelta(milliseconds=1880), 182990,
                          "failed (exitcode: 1) local_rank: 1 (pid: 183006) of binary: /path/to/venv/bin/python3"))
    b.write("logs/node-a01/torchrun.log", a01)
    b.write("logs/node-a02/dmesg-T.log", [
        dmesg_T(seg_at, "python3[12345]: segfault at 0 ip 00007f3a2b4c5d10 sp 00007ffd1c2a3e80 error 4 in libc.so.6[7f3a2b428000+195000] likely on CPU 17 (core 9, socket 0)"),
        dmesg_T(seg_at, "Code: 0f 1f 84 00 00 00 00 00 f3 0f 1e fa 89 f8 31 d2 c5 c5 ef ff 09 f0 25 ff 0f 00 00 3d e0 0f 00 00 0f 87 <c5> fd 74 0f c5 fd d7 c1 85 c0 74 57 f3 0f bc c0 c5 f8 77 c3 66 66"),
    ])
    died = seg_at + dt.timedelta(milliseconds=420)
    a02 = [glog_agent("W", died, 12301, f"Sending process {12344 + i} closing signal SIGTERM", where="api.py:1012")
           for i in range(8) if i != 1]
    a02.append(glog_agent("E", died + dt.timedelta(milliseconds=260), 12301, "failed (exitcode: -11) local_rank: 1 (pid: 12345) of binary: /path/to/venv/bin/python3"))
    a02 += torchrun_summary("/path/to/train.py", died, "node-a02", (9, 1, -11, 12345),
                            [(8 + i, i, -15, 12344 + i) for i in range(8) if i != 1])
    b.write("logs/node-a02/torchrun.log", a02)
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1012, "node-a[01-02]", 192, start, end))
    src_url = case_source("rc-11")
    b.expected(
        "rank 9 on node-a02 segfaults in libc; node-a01 logs NCCL 'Broken pipe' / 'Connection closed by remote peer'",
        src_url,
        domain_any_of=["software", "host"],
        root_cause="proc.killed.sigsegv",
        culprit_hosts=["node-a02"],
        culprit_ranks=[9],
        quality_any_of=["definitive", "probable"],
        notes=(
            f"Public RC-11 ({src_url}): NCCL socket errors on the reporting node ('Call to recv from "
            "<peer> failed : Broken pipe', 'Failed to execute operation Connect from rank 9', 'Connection "
            "closed by remote peer') were caused by the peer rank segfaulting; the case verdict is software "
            "(peer process crash) with the root-cause node = the crashed rank's host, not the reporter. "
            "node-a01's lines are verbatim with the anonymiser's placeholders made concrete (10.0.0.x -> "
            "node-a02's 10.0.0.12; the remote peer name, which the anonymiser collapsed to node-a01, -> "
            "node-a02). node-a02 logs the kernel segfault line for pid 12345 at 04:12:37 and torchrun "
            "reports rank 9 (pid 12345) exitcode -11 (SIGSEGV): proc.killed.sigsegv."
        ),
    )


# ----------------------------------------------------------------------------- public cases rc-39 .. rc-77
#
# One bundle per case of fixtures/real/public that has verbatim lines (rc-71 and rc-73 hold
# only template lines). The case's lines are copied verbatim (placeholders filled); the job
# around them (scheduler records, the other ranks' reactions) is written in real formats.

def _case(case: str) -> tuple[list[str], str]:
    return lines_of(PUB / case / "lines.log"), case_source(case)


_PENDING: dict[str, tuple] = {}


def _pub(name: str, case: str, what: str, *, notes: str, **expected) -> tuple[Bundle, list[str], str]:
    """Start the bundle of public case ``case``: returns it, the case's verbatim lines and its
    source URL; ``what``, ``notes`` and the expectations are written by :func:`_done` once
    the logs are in place."""
    b = Bundle(name)
    src, url = _case(case)
    _PENDING[name] = (case, what, url, notes, expected)
    return b, src, url


def _done(b: Bundle) -> None:
    """Write ``expected.yaml`` of a public-case bundle; its notes open with the case's id,
    title and verdict (from ``case.yaml``)."""
    case, what, url, notes, expected = _PENDING.pop(b.name)
    meta = yaml.safe_load((PUB / case / "case.yaml").read_text())
    header = f"Public {meta['id']} ({url}): {meta['title']}. Case verdict: {meta['verdict']} "
    b.expected(what, url, notes=header + notes, **expected)


def public_rc39() -> None:
    b, src, _ = _pub(
        "public-rc39-ibv-reg-mr-memlock", "rc-39",
        "nccl-tests: NCCL WARN 'Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory' (memlock ulimit 8192 KB)",
        root_cause="config.memlock", domain="config", culprit_hosts=["node-a01"], quality_any_of=["definitive", "probable"],
        notes="the WARN line is verbatim, prefixed with the NCCL 'host:pid:tid [dev]' header NCCL "
              "prints (the excerpt dropped it); the job ran on one host with NCCL_SHM_DISABLE=1 to force IB. "
              "ENOMEM from ibv_reg_mr is the locked-memory limit, not the HCA.")
    start, end = t("2026-11-30T05:00:00Z"), t("2026-11-30T05:00:19Z")
    b.workload("job-1039", "FAILED", start, end, ["node-a01"], scheduler="slurm", exit_code="2:0", ranks_per_node=8)
    b.write("logs/node-a01/nccl-tests.log", [f"node-a01:31207:31331 [0] {l}" for l in src])
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1039, "node-a01", 96, start, end, status=2))
    _done(b)


def public_rc41() -> None:
    b, src, _ = _pub(
        "public-rc41-gdrdma-one-side-only", "rc-41",
        "2 nodes: rank 9's send channel uses NET/IB/0/GDRDMA, rank 2's receive side NET/IB/1 without GDRDMA (nvidia-peermem missing on node-a01)",
        root_cause="config.gdr_missing", domain="config", culprit_hosts=["node-a01"], quality_any_of=["probable", "ambiguous", "insufficient"],
        notes="the two channel lines are verbatim, each prefixed with the NCCL header of the rank that "
              "prints it (rank 9 on node-a02 prints its [send] connection, rank 2 on node-a01 its [receive] "
              "connection) and 'NCCL INFO Channel 00/0 : '. GPUDirect RDMA is used on node-a02's side only: "
              "the kernel module nvidia-peermem is not loaded on node-a01. The job completed, slowly.")
    start, end = t("2026-11-30T05:10:00Z"), t("2026-11-30T05:40:00Z")
    b.workload("job-1041", "COMPLETED", start, end, ["node-a01", "node-a02"], scheduler="slurm", exit_code="0:0",
               ranks_per_node=8)
    at = "[2026-11-30 05:10:31] "
    b.write("logs/node-a02/train.log", [f"{at}node-a02:48211:48390 [1] NCCL INFO Channel 00/0 : {src[0]}"])
    b.write("logs/node-a01/train.log", [f"{at}node-a01:51770:51921 [2] NCCL INFO Channel 00/0 : {src[1]}"])
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1041, "node-a[01-02]", 192, start, end, status=0))
    _done(b)


def public_rc43() -> None:
    b, src, _ = _pub(
        "public-rc43-net-ofi-register-memory", "rc-43",
        "EFA: 'NET/OFI Unable to register memory ... RC: -22' (NCCL >= 2.19 in the Python env vs an older Libfabric)",
        root_cause="config.version_skew", domain="config", culprit_hosts=["node-a01", "node-a02"], quality_any_of=["definitive", "probable", "ambiguous"],
        notes="the WARN and the bandwidth summary lines are verbatim; the WARN line is given on both "
              "hosts of the 16-rank job (every node with that image), with the NCCL header it carries in a "
              "full log. A software version skew, not an EFA fault.")
    start, end = t("2026-11-30T05:50:00Z"), t("2026-11-30T05:52:10Z")
    b.workload("job-1043", "FAILED", start, end, ["node-a01", "node-a02"], scheduler="slurm", exit_code="1:0",
               ranks_per_node=8)
    b.write("logs/node-a01/train.log", [f"node-a01:7702:7790 [0] {src[0]}", *src[1:]])
    b.write("logs/node-a02/train.log", [f"node-a02:7655:7741 [0] {src[0]}"])
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1043, "node-a[01-02]", 192, start, end))
    _done(b)


def public_rc45() -> None:
    b, src, _ = _pub(
        "public-rc45-jax-no-socket-interface", "rc-45",
        "JAX/XLA: ncclCommInitRankConfig 'invalid usage', Last NCCL warning 'Bootstrap : no socket interface found' (NCCL_SOCKET_IFNAME wrong)",
        domain="config", root_cause="config.socket_ifname", quality_any_of=["definitive", "probable"],
        notes="the XLA error (two lines), the job's env excerpt and the node's interface line are verbatim; "
              "the error is logged by the worker on each of the two hosts.")
    start, end = t("2026-11-30T06:00:00Z"), t("2026-11-30T06:01:05Z")
    nodes = ["node-a01", "node-a02"]
    b.workload("job-1045", "FAILED", start, end, nodes, exit_code="1", ranks_per_node=8)
    for host in nodes:
        b.write(f"logs/{host}/worker.log", src[:2])
    b.write("logs/node-a01/job-env.yaml", src[2:5])
    b.write("logs/node-a01/ip-addr.txt", src[5:])
    _done(b)


def public_rc47() -> None:
    b, src, _ = _pub(
        "public-rc47-nvls-dual-port-nccl-bug", "rc-47",
        "NCCL 2.18/2.19 NVLS bug on dual-port NICs: 'free(): invalid next size (fast)' and Fabric Manager multicast-team ERROR lines",
        root_cause="app.heap_corruption", domain="software", quality_any_of=["probable", "ambiguous", "insufficient"],
        notes="the glibc abort line and the three Fabric Manager lines are verbatim (fabricmanager.log "
              "in FM's own time format). The FM ERROR lines are a consequence of the NCCL bug, not an FM or "
              "NVSwitch fault; the heap-corruption abort in the NCCL process is the software signature.")
    start, end = t("2023-10-31T21:05:00Z"), t("2023-10-31T21:12:00Z")
    b.workload("job-1047", "FAILED", start, end, ["node-a01"], scheduler="slurm", exit_code="134:0", ranks_per_node=8)
    b.write("logs/node-a01/nccl-tests.log", src[:1])
    b.write("logs/node-a01/fabricmanager.log", src[1:])
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1047, "node-a01", 96, start, end, status=134))
    _done(b)


def public_rc49() -> None:
    b, src, _ = _pub(
        "public-rc49-system-not-yet-initialized", "rc-49",
        "nccl-tests after a reboot: 'Test CUDA failure common.cu:941 'system not yet initialized'' (nvidia-fabricmanager not enabled)",
        root_cause="config.cuda.system_not_ready", domain="config", culprit_hosts=["node-a01"], quality_any_of=["definitive", "probable"],
        notes="the nccl-tests line is verbatim, logged once per rank of the rebooted host (here 2 of 8 "
              "shown, with the 'node-a01: ' prefix mpirun adds). cudaErrorSystemNotReady on an NVSwitch "
              "system means the Fabric Manager is not running: a node service left disabled.")
    start, end = t("2026-11-30T06:20:00Z"), t("2026-11-30T06:20:09Z")
    b.workload("job-1049", "FAILED", start, end, ["node-a01"], scheduler="slurm", exit_code="1:0", ranks_per_node=8)
    b.write("logs/node-a01/nccl-tests.log", [f"node-a01: {src[0]}", f"node-a01: {src[0]}"])
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1049, "node-a01", 96, start, end))
    _done(b)


def public_rc51() -> None:
    b, src, _ = _pub(
        "public-rc51-nvls-cuda-999-fabric-manager", "rc-51",
        "H200 NVLS: node-a02 'Cuda failure 999 unknown error' in transport/nvls.cc, node-a01 'invalid argument'; FM in a non-critical error state",
        root_cause="host.nvls", domain_any_of=["host", "gpu_hardware"], culprit_hosts=["node-a02"], quality_any_of=["probable", "ambiguous", "insufficient"],
        notes="the three lines are verbatim (the first NCCL WARN carries its unbalanced quote as "
              "printed); node-a02's line goes to node-a02's log, the other two to node-a01's. The failure "
              "originates where NVLS multicast setup got CUDA 999 (node-a02); node-a01's 'invalid argument' "
              "and the HPL illegal access are consequences.")
    start, end = t("2026-11-30T06:30:00Z"), t("2026-11-30T06:31:40Z")
    nodes = ["node-a01", "node-a02"]
    b.workload("job-1051", "FAILED", start, end, nodes, scheduler="slurm", exit_code="1:0", ranks_per_node=8)
    b.write("logs/node-a02/nccl.log", [f"[2026-11-30 06:30:41] {src[0]}"])
    b.write("logs/node-a01/nccl.log", [f"[2026-11-30 06:30:41] {src[1]}", src[2]])
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1051, "node-a[01-02]", 192, start, end))
    _done(b)


def public_rc53() -> None:
    b, src, _ = _pub(
        "public-rc53-sxid-nvlink-xid74-gsp", "rc-53",
        "8x A100: NVSwitch SXid 24007, Xid 62/45/74 (NVLink link 8)/154 on GPU 0000:48:00, then Xid 119 GSP timeouts",
        domain="gpu_hardware", root_cause="gpu.", culprit_hosts=["node-a01"],
        quality_any_of=["definitive", "probable", "ambiguous"],
        notes="the 14 kernel lines are verbatim (Talos 'kern:' format with RFC 3339 nanosecond times; "
              "GPU-uuid-a/-b and <serial> placeholders filled). The fatal NVLink error on GPU 0000:48:00 link 8 "
              "and the NVSwitch SXid precede the GSP timeouts on other GPUs: the intra-node NVLink path.")
    start, end = t("2026-04-22T21:00:00Z"), t("2026-04-22T21:28:30Z")
    b.workload("job-1053", "FAILED", start, end, ["node-a01"], exit_code="1", ranks_per_node=8)
    lines = [fill(l, **{"GPU-uuid-a": uuid_of(1, 2), "GPU-uuid-b": uuid_of(1, 0), "<serial>": "1650000000001"})
             for l in src]
    b.write("logs/node-a01/kernel.log", lines)
    _done(b)


def public_rc56() -> None:
    b, src, _ = _pub(
        "public-rc56-cuda-uncorrectable-ecc", "rc-56",
        "PyTorch 'RuntimeError: CUDA error: uncorrectable ECC error encountered' on node-a01 (the node fails many users' jobs)",
        root_cause="gpu.cuda.ecc_uncorrectable", domain="gpu_hardware", culprit_hosts=["node-a01"], quality_any_of=["definitive", "probable"],
        notes="the four PyTorch lines are verbatim, preceded by the traceback header PyTorch prints; the "
              "error names the GPU's memory, not the program.")
    start, end = t("2026-11-30T06:40:00Z"), t("2026-11-30T06:44:02Z")
    b.workload("job-1056", "FAILED", start, end, ["node-a01"], scheduler="slurm", exit_code="1:0", ranks_per_node=1)
    b.write("logs/node-a01/job.out", ["Traceback (most recent call last):",
                                      '  File "/path/to/train.py", line 211, in <module>',
                                      "    loss.backward()", *src])
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1056, "node-a01", 12, start, end))
    _done(b)


def public_rc58() -> None:
    b, src, _ = _pub(
        "public-rc58-xid79-kubernetes-gpu", "rc-58",
        "Kubernetes GPU node: Xid 79 on GPU 0000:a1:00 (fallen off the bus), nvidia-smi 'Unknown Error' for that device",
        domain="gpu_hardware", root_cause="gpu.xid.79", culprit_hosts=["node-a01"],
        quality_any_of=["definitive", "probable"],
        notes="the dmesg -T lines (driver 535.161.07) and the nvidia-smi line are verbatim; GPU-uuid-a "
              "filled. The pod storm in the thread is a consequence.")
    start, end = t("2024-04-09T01:00:00Z"), t("2024-04-09T01:25:00Z")
    b.workload("job-1058", "FAILED", start, end, ["node-a01"], exit_code="1", ranks_per_node=1)
    lines = [fill(l, **{"GPU-uuid-a": uuid_of(1, 5)}) for l in src]
    b.write("logs/node-a01/dmesg-T.log", lines[1:])
    b.write("logs/node-a01/nvidia-smi.txt", lines[:1])
    _done(b)


def public_rc60() -> None:
    b, src, _ = _pub(
        "public-rc60-allocatable-gpu-7-of-8", "rc-60",
        "kubectl describe node: nvidia.com/gpu Capacity 8, Allocatable 7 after an Xid 94; device-plugin health log",
        root_cause="gpu.capacity_drop", domain="gpu_hardware", culprit_hosts=["node-a01"], quality_any_of=["probable", "insufficient", "ambiguous"],
        notes="the describe-node excerpt and the device plugin line are verbatim. One GPU fewer than "
              "the node has points at that GPU's health event (contained ECC, Xid 94), not at the scheduler; "
              "the severity is low.")
    start, end = t("2026-10-25T02:00:00Z"), t("2026-10-25T02:30:00Z")
    b.workload("job-1060", "FAILED", start, end, ["node-a01"], exit_code="1", ranks_per_node=8)
    b.write("logs/node-a01/kubectl-describe-node.txt", src[:16])
    b.write("logs/node-a01/nvidia-device-plugin.log", src[16:])
    _done(b)


def public_rc62() -> None:
    b, src, _ = _pub(
        "public-rc62-rminitadapter-failed", "rc-62",
        "'NVRM: RmInitAdapter failed! (0x26:0xffff:1127)' for GPU minor 0 at boot; containers given that GPU fail",
        root_cause="gpu.init_failed", domain="gpu_hardware", culprit_hosts=["node-a01"], quality_any_of=["definitive", "probable"],
        notes="the raw dmesg lines are verbatim (the first one's head was cut in the thread), placed with "
              "the host's boot time.")
    boot = t("2026-11-30T06:59:20Z")
    start, end = t("2026-11-30T07:00:00Z"), t("2026-11-30T07:00:30Z")
    b.workload("job-1062", "FAILED", start, end, ["node-a01"], exit_code="1", ranks_per_node=4, boot={"node-a01": boot})
    b.write("logs/node-a01/dmesg-raw.log", src)
    _done(b)


def public_rc63() -> None:
    b, src, _ = _pub(
        "public-rc63-nvml-driver-library-mismatch", "rc-63",
        "'Failed to initialize NVML: Driver/library version mismatch' after unattended-upgrade on a Slurm GPU node",
        root_cause="config.driver_mismatch", domain="config", culprit_hosts=["node-a01"], quality_any_of=["definitive", "probable"],
        notes="nvidia-smi output, squeue output and the apt history entry are verbatim. A user-space / "
              "kernel driver skew from the package manager; running jobs are unaffected.")
    start, end = t("2021-04-24T07:00:00Z"), t("2021-04-24T07:00:04Z")
    b.workload("job-1063", "FAILED", start, end, ["node-a01"], scheduler="slurm", exit_code="1:0", ranks_per_node=1)
    b.write("logs/node-a01/prolog-nvidia-smi.txt", src[:2])
    b.write("logs/_scheduler/squeue.txt", src[2:6])
    b.write("logs/node-a01/apt-history.log", src[6:])
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1063, "node-a01", 12, start, end))
    _done(b)


def public_rc64() -> None:
    b, src, _ = _pub(
        "public-rc64-mlx4-hca-firmware", "rc-64",
        "InfiniBand not initialised on node-a45: ibstatus 'sys files not found', mlx4_core 'command 0x5a failed: fw status = 0x2'",
        root_cause="fabric.hca.", domain="fabric", culprit_hosts=["node-a45"], quality_any_of=["definitive", "probable", "ambiguous"],
        notes="the ibstatus session and the raw dmesg lines of two boots are verbatim; the node's HCA "
              "firmware differs from the others' (fixed by a firmware update).")
    boot = t("2026-11-30T07:10:00Z")
    start, end = t("2026-11-30T07:12:00Z"), t("2026-11-30T07:13:00Z")
    b.workload("job-1064", "FAILED", start, end, ["node-a45"], scheduler="slurm", exit_code="1:0", ranks_per_node=1,
               boot={"node-a45": boot})
    b.write("logs/node-a45/ibstatus.txt", src[:2])
    b.write("logs/node-a45/dmesg-raw.log", src[6:])
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1064, "node-a45", 16, start, end))
    _done(b)


def public_rc66() -> None:
    b, src, _ = _pub(
        "public-rc66-slurm-cgroup-oom-kill", "rc-66",
        "Slurm GPU job: 'Killed' and 'slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1000001.batch cgroup'",
        domain="host", root_cause="host.oom", culprit_hosts=["node-a01"], quality_any_of=["definitive", "probable"],
        notes="the batch script's 'Killed' line and the slurmstepd line are verbatim (job output file); "
              "host RAM of the job's cgroup, not GPU memory.")
    start, end = t("2026-11-30T07:20:00Z"), t("2026-11-30T08:31:14Z")
    b.workload("job-1000001", "OUT_OF_MEMORY", start, end, ["node-a01"], scheduler="slurm", exit_code="0:125",
               ranks_per_node=1)
    b.write("logs/node-a01/slurm-1000001.out", src[:2])
    b.write("logs/_scheduler/slurmctld.log", slurm_job(1000001, "node-a01", 8, start, end, status=0))
    _done(b)


def public_rc68() -> None:
    b, src, _ = _pub(
        "public-rc68-ray-memory-monitor-kill", "rc-68",
        "Ray's memory monitor kills a worker at 0.952 > 0.95 of node memory",
        root_cause="host.oom", domain="host", culprit_hosts=["node-a01"], quality_any_of=["definitive", "probable"],
        notes="the raylet message is verbatim (<node-id>, <task-id>, <worker-id> filled). The killed task "
              "is chosen by recency; the node ran out of memory.")
    start, end = t("2023-02-20T10:00:00Z"), t("2023-02-20T10:40:00Z")
    b.workload("job-1068", "FAILED", start, end, ["node-a01"], exit_code="1", ranks_per_node=1)
    line = fill(src[0], **{"<node-id>": "5f1d0c0e9a7b", "<task-id>": "c8ef45ccd0112571ffffffffffffffffffffffff01000000",
                           "<worker-id>": "0a7d0b8c9e"})
    b.write("logs/node-a01/driver.log", [line])
    _done(b)


def public_rc69() -> None:
    b, src, _ = _pub(
        "public-rc69-rank11-cuda-oom", "rc-69",
        "4 nodes x 4 A100, ZeRO-3: rank 11 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.35 GiB'; torchrun SIGTERMs siblings",
        domain="software", root_cause="app.cuda.out_of_memory", culprit_hosts=["node-a03"], culprit_ranks=[11],
        quality_any_of=["definitive", "probable"],
        notes="the [rank11] lines and torchrun's SIGTERM line are verbatim; rank 11 is local rank 3 of "
              "node index 2 (node-a03). The job's memory footprint exceeds the GPU.")
    start, end = t("2026-10-26T03:30:00Z"), t("2026-10-26T03:51:40Z")
    nodes = ["node-a01", "node-a02", "node-a03", "node-a04"]
    b.workload("job-1069", "FAILED", start, end, nodes, exit_code="1", ranks_per_node=4)
    b.write("logs/node-a03/train.log", src)
    _done(b)


def public_rc70() -> None:
    b, src, _ = _pub(
        "public-rc70-bogus-1eb-oom-after-timeout", "rc-70",
        "NCCL broadcast watchdog timeout, then 'CUDA out of memory. Tried to allocate more than 1EB memory': the OOM is a symptom",
        root_cause="unknown", domain="unknown", quality_any_of=["insufficient", "probable", "ambiguous"],
        notes="the OOM line is verbatim; the watchdog timeouts of the two ranks before it are written "
              "in PyTorch 2.x's format. A >1 EB allocation after an aborted collective is a garbage size, not "
              "GPU memory exhaustion; the timeout itself stays unexplained.")
    start, end = t("2026-11-30T08:00:00Z"), t("2026-11-30T08:41:00Z")
    nodes = ["node-a01"]
    b.workload("job-1070", "FAILED", start, end, nodes, exit_code="1", ranks_per_node=2)
    enq = t("2026-11-30T08:10:02Z")
    lines = []
    for r in (0, 1):
        at = enq + dt.timedelta(milliseconds=1800000 + 40 + r * 7)
        lines += watchdog_v2(r, at, 5611, 1, 1800040 + r * 7, op="BROADCAST")
    lines.append(f"[rank0]: {src[0]}")
    b.write("logs/node-a01/train.log", lines)
    _done(b)


def public_rc75() -> None:
    b, src, _ = _pub(
        "public-rc75-hung-task-nfs", "rc-75",
        "kernel 'INFO: task strat1_sim:78808 blocked for more than 120 seconds' writing to the shared NFS home",
        root_cause="host.hung_task", domain_any_of=["storage", "host"], culprit_hosts=["node-a01"],
        quality_any_of=["probable", "insufficient", "ambiguous"],
        notes="the four syslog lines are verbatim (grep's 'messages:' prefix kept); the year comes from "
              "the workload window. Tentative in the thread: a D-state task on NFS.")
    start, end = t("2019-06-17T19:00:00Z"), t("2019-06-17T20:30:00Z")
    b.workload("job-1075", "HUNG", start, end, ["node-a01"], scheduler="slurm", ranks_per_node=1)
    b.write("logs/node-a01/messages.log", src)
    _done(b)


def public_rc76() -> None:
    b, src, _ = _pub(
        "public-rc76-slurmd-gres-conf-dev-nvidia0", "rc-76",
        "slurmd will not start: 'fatal: can't stat gres.conf file /dev/nvidia0: No such file or directory'",
        root_cause="config.slurm_gres_file", domain="config", culprit_hosts=["node-a01"], quality_any_of=["definitive", "probable"],
        notes="the journal lines are verbatim (journalctl short format, year from the workload window). "
              "GRES configuration versus device nodes at boot; no NVRM probe error is present.")
    start, end = t("2026-02-02T09:51:00Z"), t("2026-02-02T09:55:00Z")
    b.workload("job-1076", "NODE_FAIL", start, end, ["node-a01"], scheduler="slurm", ranks_per_node=1)
    b.write("logs/node-a01/journal-slurmd.log", src)
    _done(b)


def public_rc77() -> None:
    b, src, _ = _pub(
        "public-rc77-slurm-time-limit", "rc-77",
        "slurmstepd '*** STEP 1000001.0 ON node-a01 CANCELLED AT 2025-01-10T15:27:25 DUE TO TIME LIMIT ***'; Lightning 'Bypassing SIGTERM'",
        root_cause="sched.time_limit", domain="scheduler", quality_any_of=["definitive", "probable"],
        notes="the four lines are verbatim (job output file). The job's time limit ended it; no node is "
              "at fault.")
    start, end = t("2025-01-10T13:27:20Z"), t("2025-01-10T15:27:58Z")
    b.workload("job-1000077", "TIMEOUT", start, end, ["node-a01"], scheduler="slurm", exit_code="0:15", ranks_per_node=1)
    b.write("logs/node-a01/slurm-1000001.out", src)
    _done(b)


PUBLIC_CASES = (
    public_rc39, public_rc41, public_rc43, public_rc45, public_rc47, public_rc49, public_rc51, public_rc53,
    public_rc56, public_rc58, public_rc60, public_rc62, public_rc63, public_rc64, public_rc66, public_rc68,
    public_rc69, public_rc70, public_rc75, public_rc76, public_rc77,
)


# ----------------------------------------------------------------------------- README


def merge_readme_rows(prefix: str, rows: list[tuple[str, str, str, str]]) -> None:
    """Replace the README table's rows of bundles named ``prefix*`` with ``rows`` (bundle,
    what, verdict, source), sorted with the others; for the generators run after this one."""
    path = OUT / "README.md"
    lines = [l for l in path.read_text().splitlines() if not l.startswith(f"| `{prefix}")]
    rows_at = [i for i, l in enumerate(lines) if l.startswith("| `")]
    if not rows_at:
        raise SystemExit("README.md has no bundle table; run make_incidents.py first")
    first, last = rows_at[0], rows_at[-1]
    table = lines[first : last + 1] + [f"| `{n}` | {w} | {v} | {src} |" for n, w, v, src in rows]
    table.sort(key=lambda r: r.split("|")[1])
    path.write_text("\n".join(lines[:first] + table + lines[last + 1 :]) + "\n")


def write_readme() -> None:
    lines = [
        "# Incident bundles",
        "",
        "Each directory is one incident bundle in the format of `BUNDLE.md` (v1): `workload.yaml`,",
        "raw logs under `logs/<host>/`, scheduler logs under `logs/_scheduler/`, optional telemetry",
        "under `metrics/<host>/`, optional `topology.yaml`, and an `expected.yaml` with the verdict a",
        "correct system gives (its `notes:` say why). `faultstream score examples/incidents` scores them.",
        "",
        "Every bundle is built around real log lines from `fixtures/real` (the H200 capture of",
        "2026-11-30 and anonymised public failure reports), copied verbatim; only the anonymiser's",
        "placeholders (`10.0.0.x`, `GPU-uuid-a`, `<pid>`, ...) are filled in. The lines around them",
        "(watchdog timeouts on the other ranks, torchrun summaries, slurmctld records, kernel",
        "segfault/OOM lines) are written in the exact formats of real logs. Two watchdog formats occur:",
        "`[rank5]:[E1130 01:31:04.123456 8812 ProcessGroupNCCL.cpp:632] [Rank 5] ...` (glog with a",
        "thread id) and the PyTorch 2.11 form `[rank5]:[E1130 02:47:18.123456789 ProcessGroupNCCL.cpp:690]",
        "[PG ID 0 PG GUID 0 Rank 5] ...` seen in the H200 capture. Hosts are `node-a0N` (10.0.0.1N),",
        "cluster `c1`. The bundles are generated by `examples/make_incidents.py` (deterministic).",
        "",
        "| bundle | what happened | expected verdict | source |",
        "|---|---|---|---|",
    ]
    for name, what, verdict, source in sorted(README_ROWS):
        lines.append(f"| `{name}` | {what} | {verdict} | {source} |")
    lines += [
        "",
        "H200 capture: `shared/fixtures/real/h200-2026-11` (one H200, driver 580.159.04, CUDA 13.0,",
        "NCCL 2.28.9, PyTorch 2.11; first boot 01:19:36Z, capture 01:20:00Z-01:21:13Z; second boot",
        "01:28:57Z). Where a host's kernel log is collected at job end, it also holds earlier Xids of",
        "previous programs on the same GPU: those fall before the workload's start and must not be blamed.",
        "",
    ]
    (OUT / "README.md").write_text("\n".join(lines))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for fn in (
        h200_xid31, h200_xid43, h200_sigkill, h200_duplicate_gpu, h200_misaligned, h200_socket_ifname,
        h200_rank_exception, public_rc15, public_rc25, public_rc13, public_rc05, public_rc01,
        stalled_rank, ambiguous, public_rc11, *PUBLIC_CASES,
    ):
        fn()
    write_readme()


if __name__ == "__main__":
    main()
