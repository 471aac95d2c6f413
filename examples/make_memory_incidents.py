"""Build the host-memory and back-dating bundles (issue 33 items 2 and 6) under
``examples/incidents/memory-*`` and ``examples/incidents/backdate-*``.

Each behaviour comes with its counter-case:

* **SIGKILL with memory pressure** (``correlators.detectors.sigkill_memory_pressure``): rank 5
  on node-a02 is killed by SIGKILL (torchrun: exitcode -9) with no OOM-killer line; a memory
  monitor on node-a02 (``grep -H . /proc/pressure/memory`` every 30 s after a ``date`` line)
  shows PSI memory ``full`` rising to 40 % just before -> probable host OOM on node-a02.
  Counter-case: the same kill with PSI near zero -> the SIGKILL stays unexplained
  (``proc.killed.sigkill``).
* **A trainer's own line and the cgroup's counters**: DeepSpeed's ``see_memory_usage`` on rank
  0 (``CPU Virtual Memory: used = ... GB, percent = 97.4%``) and the job cgroup's
  ``memory.events`` collected after the job (``oom 1``, ``oom_kill 1``) on the node where rank
  2 was SIGKILLed -> probable host OOM. Counter-case: the same lines at 9 % and zero counts.
* **Back-dating only from a line's own time**: PyTorch 2.2/2.3 watchdog lines
  (``[rankN]:[E ProcessGroupNCCL.cpp:563] ...``, no timestamp) after dated step lines inherit
  the last step's time; the stall is placed no earlier than that step, not 10 minutes before
  it, and the GPU-hours lost are counted once. Counter-case: the same hang with PyTorch 2.4+
  dated lines, back-dated by "ran for" from their own time.

Formats: the PyTorch 2.11 watchdog and torchrun agent/summary lines of the H200 capture
(through ``make_incidents.py``); the 2.3 undated watchdog as quoted in vllm-project/vllm#6042
(``[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught ...``, ``[PG 1 Rank 1] Timeout
at NCCL work``); PSI lines as psi.rst / grep -H print them; DeepSpeed's see_memory_usage lines
as deepspeed/runtime/utils.py logs them; memory.events as mm/memcontrol.c prints it.

Run:  python3 examples/make_memory_incidents.py   (after make_incidents.py, whose README
table it extends: its rows for ``memory-*`` and ``backdate-*`` bundles are replaced in place).
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_incidents import (  # noqa: E402  (examples/ is not a package)
    OUT,
    Bundle,
    glog_agent,
    merge_readme_rows,
    slurm_job,
    t,
    torchrun_summary,
    watchdog_v2,
)

ROWS: list[tuple[str, str, str, str]] = []
SRC_PSI = "Linux Documentation/accounting/psi.rst (grep -H /proc/pressure/memory); h200-2026-11 torchrun formats"
SRC_DS = ("DeepSpeed deepspeed/runtime/utils.py see_memory_usage; mm/memcontrol.c memory.events; "
          "h200-2026-11 torchrun formats")
SRC_PT22 = ("PyTorch 2.2/2.3 undated watchdog (vllm-project/vllm#6042, pytorch/pytorch#118369); "
            "h200-2026-11 torchrun formats")


def expected(b: Bundle, what: str, source: str, **fields) -> None:
    b.expected(what, source, rows=ROWS, **fields)


def stamp(at: dt.datetime) -> str:
    """Python logging's asctime as DeepSpeed's logger prints it."""
    return f"[{at.strftime('%Y-%m-%d %H:%M:%S')},{at.microsecond // 1000:03d}]"


def step_line(at: dt.datetime, step: int, rank: int | None = None) -> str:
    pre = f"[rank{rank}]:" if rank is not None else ""
    return f"{pre}{stamp(at)} [INFO] [train.py:212:train] step {step} | loss {2.2 - step * 1e-5:.4f} | 1.43 s/it"


# ----------------------------------------------------------------------------- 1: PSI


def _psi_kill(name: str, job: int, pressured: bool, killer: str | None = None) -> Bundle:
    """Rank 5 (pid 8832) on node-a02 killed; ``killer``: None (no line names the sender),
    ``earlyoom`` (earlyoom SIGTERMs pid 8832: exit -15) or ``systemd-oomd`` (systemd-oomd kills
    the job's cgroup on node-a02: exit -9), each with its own syslog lines."""
    b = Bundle(name)
    start, kill = t("2026-11-30T04:00:00Z"), t("2026-11-30T04:10:07.412000Z")
    nodes = ["node-a01", "node-a02"]
    fail = kill + dt.timedelta(seconds=1, milliseconds=204)
    # ranks on node-a01 wait for rank 5 in the next all_reduce and time out 10 minutes later
    enq = kill + dt.timedelta(milliseconds=388)
    end = enq + dt.timedelta(seconds=602)
    b.workload(f"job-{job}", "FAILED", start, end, nodes, scheduler="slurm", exit_code="1:0", ranks_per_node=4)
    a01: list[str] = []
    for r in range(4):
        ran = 600000 + 11 + 3 * r
        a01 += watchdog_v2(r, enq + dt.timedelta(milliseconds=ran + 2 * r), 40212, 4194304, ran)
    stop = enq + dt.timedelta(milliseconds=600030)
    a01.append(glog_agent("E", stop + dt.timedelta(milliseconds=900), 7710,
                          "failed (exitcode: -6) local_rank: 0 (pid: 7731) of binary: /path/to/venv/bin/python3"))
    a01 += torchrun_summary("/path/to/train.py", stop + dt.timedelta(milliseconds=900), "node-a01", (0, 0, -6, 7731),
                            [(r, r, -6, 7731 + r) for r in range(1, 4)])
    b.write("logs/node-a01/torchrun.log", a01)
    a02 = [glog_agent("W", fail - dt.timedelta(milliseconds=40), 8810, f"Sending process {8831 + r} closing signal SIGTERM",
                      where="api.py:1012") for r in (0, 2, 3)]
    code = -15 if killer == "earlyoom" else -9
    a02.append(glog_agent("E", fail, 8810, f"failed (exitcode: {code}) local_rank: 1 (pid: 8832) of binary: /path/to/venv/bin/python3"))
    a02 += torchrun_summary("/path/to/train.py", fail, "node-a02", (5, 1, code, 8832),
                            [(4, 0, -15, 8831), (6, 2, -15, 8833), (7, 3, -15, 8834)])
    b.write("logs/node-a02/torchrun.log", a02)
    if killer is not None:
        sys_at = kill.strftime("%b %d %H:%M:%S")
        if killer == "earlyoom":
            syslog = [f"{sys_at} node-a02 earlyoom[912]: mem avail:  9214 of 2063999 MiB ( 0.45%), swap free:    0 of    0 MiB ( 0.00%)",
                      f"{sys_at} node-a02 earlyoom[912]: low memory! at or below SIGTERM limits: mem 10.00%, swap 10.00%",
                      f'{sys_at} node-a02 earlyoom[912]: sending SIGTERM to process 8832 uid 1000 "python3": badness 987, VmRSS 1843214 MiB']
        else:
            syslog = [f"{sys_at} node-a02 systemd-oomd[640]: Killed /system.slice/slurmstepd.scope/job_{job} due to memory "
                      "pressure for /system.slice/slurmstepd.scope being 74.12% > 60.00% for > 20s with reclaim activity"]
        b.write("logs/node-a02/syslog", syslog)
        pressured = False
    # the memory monitor: every 30 s, `date -u +%FT%TZ; grep -H . /proc/pressure/memory`
    mon: list[str] = []
    at = t("2026-11-30T04:05:00Z")
    total_some, total_full = 1_204_332, 402_118
    i = 0
    while at < kill + dt.timedelta(seconds=20):
        if pressured:
            ramp = max(0.0, (at - t("2026-11-30T04:07:00Z")).total_seconds() / 180.0)
            some10, full10 = min(88.0, 92.0 * ramp), min(41.0, 40.0 * ramp)
        else:
            some10, full10 = 0.12 if i % 3 == 0 else 0.0, 0.0
        some60, full60 = some10 * 0.7, full10 * 0.6
        some300, full300 = some10 * 0.3, full10 * 0.25
        total_some += int(some10 * 300_000)
        total_full += int(full10 * 300_000)
        mon += [at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                f"/proc/pressure/memory:some avg10={some10:.2f} avg60={some60:.2f} avg300={some300:.2f} total={total_some}",
                f"/proc/pressure/memory:full avg10={full10:.2f} avg60={full60:.2f} avg300={full300:.2f} total={total_full}"]
        at += dt.timedelta(seconds=30)
        i += 1
    b.write("logs/node-a02/memwatch.log", mon)
    b.write("logs/_scheduler/slurmctld.log", slurm_job(job, "node-a[01-02]", 64, start, end))
    return b


def psi_sigkill() -> None:
    b = _psi_kill("memory-sigkill-psi-full", 3601, pressured=True)
    expected(
        b, "rank 5 on node-a02 SIGKILLed (torchrun -9), no OOM-killer line; PSI memory full rises to 40 % on node-a02 just before",
        SRC_PSI,
        domain="host",
        root_cause="host.oom_kill.probable",
        culprit_hosts=["node-a02"],
        culprit_ranks=[5],
        quality_any_of=["probable"],
        notes=(
            "Issue 33 item 2. torchrun on node-a02 reports rank 5 'exitcode: -9' (Signal 9 (SIGKILL)) and "
            "SIGTERMs its siblings; ranks 0-3 on node-a01 time out in all_reduce SeqNum 40212 ten minutes later. "
            "No kernel OOM-killer line was collected, so the SIGKILL alone does not say who sent it. The node's "
            "memory monitor (grep -H . /proc/pressure/memory every 30 s after a date line; the PSI lines inherit "
            "its time) shows 'full avg10' climbing from 0 to 40 % in the three minutes before the kill: all "
            "tasks stalled on memory a third of the time. PSI full >= 10 % within 10 min before the kill makes "
            "it a probable host OOM on node-a02 (causal.yaml sigkill_memory_pressure); the plain SIGKILL (the "
            "launcher, the scheduler, a user) stays as its alternative, so probable, never definitive."
        ),
    )


def psi_sigkill_healthy() -> None:
    b = _psi_kill("memory-sigkill-psi-healthy", 3602, pressured=False)
    expected(
        b, "counter-case: the same SIGKILL of rank 5; PSI memory stays at ~0 on node-a02",
        SRC_PSI,
        domain="host",
        root_cause="proc.killed.sigkill",
        culprit_hosts=["node-a02"],
        culprit_ranks=[5],
        quality_any_of=["probable", "ambiguous"],
        notes=(
            "Counter-case of memory-sigkill-psi-full: the same kill and timeouts, but the memory monitor reads "
            "'some avg10=0.12' at most and 'full' 0.00 throughout. Healthy memory says nothing about who sent "
            "the SIGKILL: the verdict stays what a SIGKILL alone gives (proc.killed.sigkill, domain host, the "
            "victim named, not the reason) - not a host OOM."
        ),
    )


# ----------------------------------------------------------------------------- 2: trainer + cgroup


def _trainer_kill(name: str, job: int, pressured: bool) -> Bundle:
    b = Bundle(name)
    start, kill = t("2026-11-30T05:00:00Z"), t("2026-11-30T05:09:52.118000Z")
    end = kill + dt.timedelta(seconds=3)
    b.workload(f"job-{job}", "FAILED", start, end, ["node-a01"], scheduler="slurm",
               exit_code="0:9", ranks_per_node=4)
    lines: list[str] = []
    at = start + dt.timedelta(seconds=40)
    pct = [9.1, 9.3, 9.4, 9.4] if not pressured else [61.8, 84.2, 93.9, 97.4]
    used = [round(2015.6 * p / 100, 2) for p in pct]
    for i, (u, p) in enumerate(zip(used, pct)):
        lines += [
            f"{stamp(at)} [INFO] [utils.py:781:see_memory_usage] {['Before initializing optimizer states', 'After initializing optimizer states', 'After loading shards', 'After step 20'][i]}",
            f"{stamp(at)} [INFO] [utils.py:782:see_memory_usage] MA 31.02 GB         Max_MA 33.4 GB         CA 35.1 GB         Max_CA 35 GB",
            f"{stamp(at)} [INFO] [utils.py:789:see_memory_usage] CPU Virtual Memory:  used = {u} GB, percent = {p}%",
        ]
        at += dt.timedelta(seconds=130)
    fail = kill + dt.timedelta(milliseconds=831)
    lines += [glog_agent("W", fail - dt.timedelta(milliseconds=35), 6610, f"Sending process {6631 + r} closing signal SIGTERM",
                         where="api.py:1012") for r in (0, 1, 3)]
    lines.append(glog_agent("E", fail, 6610, "failed (exitcode: -9) local_rank: 2 (pid: 6633) of binary: /path/to/venv/bin/python3"))
    lines += torchrun_summary("/path/to/train_ds.py", fail, "node-a01", (2, 2, -9, 6633),
                              [(0, 0, -15, 6631), (1, 1, -15, 6632), (3, 3, -15, 6634)])
    b.write("logs/node-a01/train.log", lines)
    # collected by the epilog after the job: grep -H . <job cgroup>/memory.events
    cg = f"/sys/fs/cgroup/system.slice/slurmstepd.scope/job_{job}/memory.events"
    counts = {"low": 0, "high": 0, "max": 4127, "oom": 1, "oom_kill": 1, "oom_group_kill": 0} if pressured else \
        {"low": 0, "high": 0, "max": 0, "oom": 0, "oom_kill": 0, "oom_group_kill": 0}
    epilog = [end.strftime("%Y-%m-%dT%H:%M:%SZ") + f" epilog: job {job} cgroup memory.events"]
    epilog += [f"{cg}:{k} {v}" for k, v in counts.items()]
    b.write("logs/node-a01/epilog.log", epilog)
    b.write("logs/_scheduler/slurmctld.log", slurm_job(job, "node-a01", 32, start, end))
    return b


def trainer_cgroup_sigkill() -> None:
    b = _trainer_kill("memory-sigkill-deepspeed-cgroup-events", 3303, pressured=True)
    expected(
        b, "rank 2 SIGKILLed (torchrun -9); DeepSpeed 'CPU Virtual Memory ... percent = 97.4%' on rank 0 of the node; job cgroup memory.events oom 1, oom_kill 1",
        SRC_DS,
        domain="host",
        root_cause="host.oom_kill.probable",
        culprit_hosts=["node-a01"],
        culprit_ranks=[2],
        quality_any_of=["probable"],
        notes=(
            "Issue 33 item 2, the trainer's own line and the cgroup's counters. DeepSpeed's see_memory_usage "
            "(rank 0, same node) reports host memory climbing to 97.4 % (psutil percent: used = total - "
            "available) eight minutes before; torchrun then reports rank 2 exitcode -9. The epilog's snapshot of "
            "the job cgroup's memory.events (taken after the job: the counters count since the cgroup was "
            "created) holds oom 1 and oom_kill 1: an OOM killer killed a process of the job. No kernel line was "
            "collected. The DeepSpeed reading is 8 min before the kill (within lead_s 600), the counters after "
            "it (cumulative): probable host OOM on node-a01, rank 2."
        ),
    )


def trainer_cgroup_healthy() -> None:
    b = _trainer_kill("memory-sigkill-deepspeed-healthy", 3304, pressured=False)
    expected(
        b, "counter-case: the same SIGKILL of rank 2; DeepSpeed reports 9.4 % host memory used, memory.events all zero",
        SRC_DS,
        domain="host",
        root_cause="proc.killed.sigkill",
        culprit_hosts=["node-a01"],
        culprit_ranks=[2],
        quality_any_of=["probable", "ambiguous"],
        notes=(
            "Counter-case of memory-sigkill-deepspeed-cgroup-events: the same lines with 'percent = 9.4%' and "
            "every memory.events counter 0. Nothing points at memory: the SIGKILL stays unexplained "
            "(proc.killed.sigkill)."
        ),
    )


# ----------------------------------------------------------------------------- 3: back-dating


def undated_watchdog(rank: int, seq: int, numel: int, ran_ms: int) -> list[str]:
    """PyTorch 2.2/2.3 (c10 logging without glog): no time in the line (launched without
    torchrun's ``[rankN]:`` prefix, as in pytorch/pytorch#118369)."""
    return [
        f"[E ProcessGroupNCCL.cpp:563] [Rank {rank}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000) ran for "
        f"{ran_ms} milliseconds before timing out.",
        f"[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank {rank}] Timeout at NCCL work: {seq}, last enqueued "
        f"NCCL work: {seq}, last completed NCCL work: {seq - 1}.",
        f"[E ProcessGroupNCCL.cpp:577] [Rank {rank}] Some NCCL operations have failed or timed out. Due "
        "to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        f"[E ProcessGroupNCCL.cpp:583] [Rank {rank}] To avoid data inconsistency, we are taking the "
        "entire process down.",
    ]


def _stall(name: str, job: int, dated: bool) -> Bundle:
    b = Bundle(name)
    start = t("2026-11-30T06:00:00Z")
    last_step = t("2026-11-30T06:31:40.118000Z")
    enq = last_step + dt.timedelta(milliseconds=212)
    silent = 6
    fire = enq + dt.timedelta(milliseconds=600021)
    fail = fire + dt.timedelta(milliseconds=1300)
    end = fail + dt.timedelta(seconds=2)
    nodes = ["node-a01", "node-a02"]
    b.workload(f"job-{job}", "FAILED", start, end, nodes, scheduler="slurm", exit_code="1:0", ranks_per_node=4)
    for h, ranks in (("node-a01", range(0, 4)), ("node-a02", range(4, 8))):
        lines: list[str] = []
        for step in range(4117, 4121):
            at = last_step - dt.timedelta(milliseconds=1430 * (4120 - step))
            lines.append(step_line(at, step))  # the trainer logs from local rank 0, without a prefix
        for r in ranks:
            if r == silent:
                continue
            ran = 600011 + 4 * r
            if dated:
                lines += watchdog_v2(r, enq + dt.timedelta(milliseconds=ran + r), 88120, 4194304, ran)
            else:
                lines += undated_watchdog(r, 88120, 4194304, ran)
        agent, pid0 = (7710, 7731) if h == "node-a01" else (8810, 8831)
        root = ranks[0]
        others = [(r, r - root, -15 if r == silent else -6, pid0 + r - root) for r in ranks if r != root]
        if h == "node-a02":
            lines.append(glog_agent("W", fail - dt.timedelta(milliseconds=30), agent,
                                    f"Sending process {pid0 + silent - root} closing signal SIGTERM", where="api.py:1012"))
        lines.append(glog_agent("E", fail, agent, f"failed (exitcode: -6) local_rank: 0 (pid: {pid0}) of binary: /path/to/venv/bin/python3"))
        lines += torchrun_summary("/path/to/train.py", fail, h, (root, 0, -6, pid0), others)
        b.write(f"logs/{h}/train.log", lines)
    b.write("logs/_scheduler/slurmctld.log", slurm_job(job, "node-a[01-02]", 64, start, end))
    return b


def stall_undated() -> None:
    b = _stall("backdate-undated-watchdog-pt22", 3311, dated=False)
    expected(
        b, "7 of 8 ranks time out (PyTorch 2.2/2.3 watchdog lines without a time) right after dated step 4120; rank 6 silent",
        SRC_PT22,
        domain_any_of=["unknown", "software"],
        root_cause="nccl.stalled_rank",
        culprit_hosts=["node-a02"],
        culprit_ranks=[6],
        quality_any_of=["probable", "ambiguous", "definitive"],
        notes=(
            "Issue 33 item 6. Every rank logs dated step lines up to step 4120 at 06:31:40.118Z; then 7 ranks "
            "print '[rankN]:[E ProcessGroupNCCL.cpp:563] ... ran for ~600011 milliseconds' with no time of their "
            "own (PyTorch 2.2/2.3 c10 logging), so they inherit step 4120's time. That time is only the earliest "
            "the lines can have been written: the stall began after step 4120, not 600 s before it. The stall is "
            "placed at the inherited bound (attributes.began_at_bound = inherited), so the cost runs from "
            "06:31:40 to the job's end (~10 min x 8 GPUs, ~1.34 GPU-hours), not from 06:21:40 (twice that). "
            "Rank 6 did not time out: the stalled rank. The cause is placed by lines without a time of their "
            "own, so never definitive by that alone."
        ),
    )


def stall_dated() -> None:
    b = _stall("backdate-dated-watchdog-counter", 3312, dated=True)
    expected(
        b, "counter-case: the same hang with PyTorch 2.4+ dated watchdog lines at 06:41:40; back-dated by 'ran for' to 06:31:40",
        SRC_PT22,
        domain_any_of=["unknown", "software"],
        root_cause="nccl.stalled_rank",
        culprit_hosts=["node-a02"],
        culprit_ranks=[6],
        quality_any_of=["probable", "definitive"],
        notes=(
            "Counter-case of backdate-undated-watchdog-pt22: the watchdog lines carry their own glog time "
            "(06:41:40.35Z), so 'ran for 600011 ms' back-dates the stall from that time to 06:31:40.3Z, just "
            "after step 4120: the same place and the same cost (~1.34 GPU-hours) as the undated case, now "
            "measured rather than bounded."
        ),
    )


def earlyoom_kill() -> None:
    b = _psi_kill("memory-earlyoom-sigterm-rank5", 3603, pressured=False, killer="earlyoom")
    expected(
        b, "earlyoom on node-a02 SIGTERMs pid 8832 (rank 5, torchrun: exitcode -15) with 0.45 % memory available",
        "rfjakob/earlyoom kill.c kill_process and main.c print_mem_stats; h200-2026-11 torchrun formats",
        domain="host",
        root_cause="host.oom_kill",
        culprit_hosts=["node-a02"],
        culprit_ranks=[5],
        quality_any_of=["definitive", "probable"],
        notes=(
            "Issue 33 item 2, a user-space OOM killer that names its victim. earlyoom's syslog lines on node-a02 "
            "('mem avail: 9214 of 2063999 MiB ( 0.45%)', 'low memory! at or below SIGTERM limits', 'sending "
            "SIGTERM to process 8832 uid 1000 \"python3\"') name pid 8832, which torchrun's summary on the same "
            "node gives to rank 5 (exitcode -15): the host ran out of memory and earlyoom stopped rank 5. A SIGTERM "
            "alone would say nothing; the killer's own line decides, as the kernel's OOM-killer line does."
        ),
    )


def oomd_kill() -> None:
    b = _psi_kill("memory-systemd-oomd-job-scope", 3604, pressured=False, killer="systemd-oomd")
    expected(
        b, "systemd-oomd on node-a02 kills the job's cgroup (memory pressure 74 % > 60 %); rank 5 exits -9",
        "systemd src/oom/oomd-manager.c (Killed %s due to memory pressure for %s being ...); h200-2026-11 torchrun formats",
        domain="host",
        root_cause="host.oom_kill",
        culprit_hosts=["node-a02"],
        quality_any_of=["definitive", "probable"],
        notes=(
            "Issue 33 item 2. systemd-oomd kills a whole cgroup with SIGKILL when its memory pressure stays above "
            "the limit; its syslog line on node-a02 names the job's scope "
            "(/system.slice/slurmstepd.scope/job_3604) and the pressure (74.12 % > 60.00 % for > 20 s). Rank 5's "
            "SIGKILL (torchrun: exitcode -9) is explained by it: a host OOM on node-a02, named by the killer's own "
            "line, not inferred from pressure readings."
        ),
    )


GENERATORS = (psi_sigkill, psi_sigkill_healthy, earlyoom_kill, oomd_kill, trainer_cgroup_sigkill, trainer_cgroup_healthy, stall_undated, stall_dated)


def main() -> None:
    for prefix in ("memory-", "backdate-"):
        for stale in sorted(OUT.glob(prefix + "*")):
            if stale.is_dir():
                shutil.rmtree(stale)
    for gen in GENERATORS:
        gen()
    merge_readme_rows("memory-", [r for r in ROWS if r[0].startswith("memory-")])
    merge_readme_rows("backdate-", [r for r in ROWS if r[0].startswith("backdate-")])


if __name__ == "__main__":
    main()
