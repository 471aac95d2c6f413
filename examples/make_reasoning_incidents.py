"""Build the reasoning bundles (waits that point at a peer, pid-named faults) under
``examples/incidents/reasoning-*``.

Each behaviour comes with its counter-case:

* **waited on** (``correlators.detectors.waited_on``): a 2-rank job where rank 0's watchdog
  times out on a RECV and rank 1 logs nothing and is then SIGTERMed by torchrun -> rank 1 is
  the suspect, not torchrun's "first observed failure" (rank 0). Counter-case: both ranks time
  out on the same collective -> no member is singled out (symptoms only).
* **never joined** (negative evidence from the allocation): the TCPStore on node-a01 times out
  with ``1/2 clients joined``; node-a02's logs were collected and hold nothing from the job ->
  node-a02 (domain host, scheduler/config as alternatives). Counter-case: node-a02 has no input
  source at all -> the same suspect, but only as weak as a node that cannot be seen
  (``insufficient``).
* **pid -> rank** (``correlators.pids``): the kernel OOM killer names pid 48211 on node-a02;
  ``ranks.12.pid`` in ``workload.yaml`` says that is rank 12 -> culprit rank 12. A second bundle
  states it through torchrun's failure summary and NCCL's ``host:pid:tid`` prefix instead.
  Counter-case: nobody states the pid -> the host only, no rank.

The lines are the real formats: the PyTorch 2.11 watchdog and torchrun agent/summary lines of
the H200 capture (``fixtures/real/h200-2026-11/torchrun-rank-sigkill.log``, through the helpers
of ``make_incidents.py``), the TCPStore message of ``correlators/rules/torch.yaml`` (rdzv.timeout
examples), and the kernel OOM lines of the ``multinode-ambiguous`` bundle (dmesg -T).

Run:  python3 examples/make_reasoning_incidents.py   (after make_incidents.py, whose README
table it extends: its rows for ``reasoning-*`` bundles are replaced in place).
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_incidents import (  # noqa: E402  (examples/ is not a package)
    merge_readme_rows,
    OUT,
    Bundle,
    dmesg_T,
    glog_agent,
    glog_time,
    slurm_job,
    t,
    torchrun_summary,
    watchdog_v2,
)

ROWS: list[tuple[str, str, str, str]] = []
SRC_H200 = "h200-2026-11 torchrun-rank-sigkill.log formats (torchrun agent + summary), PyTorch 2.11 watchdog"


def expected(b: Bundle, what: str, source: str, **fields) -> None:
    """``Bundle.expected`` with this generator's README rows."""
    b.expected(what, source, rows=ROWS, **fields)


# ----------------------------------------------------------------------------- 1: waited on


def _two_rank(name: str, both_time_out: bool) -> Bundle:
    b = Bundle(name)
    start, end = t("2026-11-30T05:10:00Z"), t("2026-11-30T05:21:14Z")
    b.workload("job-3001" if not both_time_out else "job-3002", "FAILED", start, end, ["node-a01"],
               scheduler="slurm", exit_code="1:0",
               ranks={0: {"host": "node-a01", "gpu": 0}, 1: {"host": "node-a01", "gpu": 1}})
    enq = t("2026-11-30T05:11:02.118000Z")
    lines: list[str] = []
    timed = [0, 1] if both_time_out else [0]
    last = enq
    for r in timed:
        ran = 600011 + 7 * r
        at = enq + dt.timedelta(milliseconds=ran + 3 * r)
        last = max(last, at)
        lines += watchdog_v2(r, at, 4121, 1048576, ran, op="RECV" if not both_time_out else "ALLREDUCE")
    fail = last + dt.timedelta(milliseconds=912)
    agent, pid0 = 3310, 3331
    if not both_time_out:
        lines.append(glog_agent("W", fail - dt.timedelta(milliseconds=32), agent,
                                f"Sending process {pid0 + 1} closing signal SIGTERM", where="api.py:1012"))
    lines.append(glog_agent("E", fail, agent, f"failed (exitcode: -6) local_rank: 0 (pid: {pid0}) of binary: /path/to/venv/bin/python3"))
    lines += torchrun_summary("/path/to/p2p.py", fail, "node-a01", (0, 0, -6, pid0),
                              [(1, 1, -6 if both_time_out else -15, pid0 + 1)])
    b.write("logs/node-a01/torchrun.log", lines)
    b.write("logs/_scheduler/slurmctld.log", slurm_job(3001 if not both_time_out else 3002, "node-a01", 16, start, end))
    return b


def waited_on_silent_peer() -> None:
    b = _two_rank("reasoning-2rank-recv-timeout-silent-peer", both_time_out=False)
    expected(
        b, "2 ranks: rank 0's RECV (SeqNum 4121) times out, rank 1 logs nothing and is SIGTERMed; torchrun blames rank 0",
        SRC_H200 + "; DESIGN.md (a stalled rank is the one that did NOT time out)",
        domain_any_of=["unknown", "software"],
        root_cause="nccl.stalled_rank",
        culprit_hosts=["node-a01"],
        culprit_ranks=[1],
        quality_any_of=["probable", "definitive", "insufficient"],
        notes=(
            "Issue 10 item 1. Rank 0 waits in a point-to-point RECV for rank 1 (WorkNCCL SeqNum=4121, "
            "OpType=RECV, ran for ~600011 ms); rank 1 never logs anything, then torchrun SIGTERMs it "
            "(exitcode -15) after rank 0's watchdog took its process down (SIGABRT, -6), and the summary "
            "names rank 0 'Root Cause (first observed failure)'. In a 2-member group the member that did "
            "not time out is the one waited on: rank 1. torchrun's root cause is context only."
        ),
    )


def waited_on_both_time_out() -> None:
    b = _two_rank("reasoning-2rank-both-time-out", both_time_out=True)
    expected(
        b, "counter-case: both ranks time out on ALLREDUCE SeqNum 4121; nobody was silent",
        SRC_H200,
        root_cause="unknown",
        culprit_hosts=[],
        culprit_ranks=[],
        quality_any_of=["insufficient"],
        notes=(
            "Counter-case of reasoning-2rank-recv-timeout-silent-peer: both members report the timeout of "
            "the same collective, so no member was waited on by the others; torchrun's 'first observed "
            "failure' (rank 0, SIGABRT from its own watchdog) must not become the cause. The inputs hold "
            "symptoms only."
        ),
    )


# ----------------------------------------------------------------------------- 2: never joined


def _rdzv(name: str, a02_collected: bool) -> Bundle:
    b = Bundle(name)
    start, end = t("2026-11-30T06:00:00Z"), t("2026-11-30T06:15:04Z")
    nodes = ["node-a01", "node-a02"]
    b.workload("job-3101" if a02_collected else "job-3102", "FAILED", start, end, nodes, scheduler="slurm",
               exit_code="1:0", ranks_per_node=8)
    at = start + dt.timedelta(seconds=901, milliseconds=212)
    lines = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/path/to/train.py", line 41, in <module>',
        "[rank0]:     dist.init_process_group(\"nccl\")",
        "[rank0]: torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
    ]
    agent = 7120
    lines.append(glog_agent("E", at + dt.timedelta(milliseconds=640), agent,
                            "failed (exitcode: 1) local_rank: 0 (pid: 7141) of binary: /path/to/venv/bin/python3"))
    lines += torchrun_summary("/path/to/train.py", at + dt.timedelta(milliseconds=640), "node-a01", (0, 0, 1, 7141),
                              [(r, r, -15, 7141 + r) for r in range(1, 8)])
    b.write("logs/node-a01/torchrun.log", lines)
    if a02_collected:
        # node-a02's kernel log was collected: it booted long before and says nothing of the job
        b.write("logs/node-a02/dmesg-T.log", [
            dmesg_T(t("2026-11-29T22:04:11Z"), "mlx5_core 0000:0c:00.0: mlx5_pcie_event:301:(pid 0): PCIe slot advertised sufficient power (75W)."),
            dmesg_T(t("2026-11-29T22:04:19Z"), "nvidia-nvlink: Nvlink Core is being initialized, major device number 511"),
        ])
    b.write("logs/_scheduler/slurmctld.log", slurm_job(3101 if a02_collected else 3102, "node-a[01-02]", 224, start, end))
    return b


def never_joined_silent() -> None:
    b = _rdzv("reasoning-rdzv-node-never-joined", a02_collected=True)
    expected(
        b, "TCPStore: 'Timed out after 901 seconds waiting for clients. 1/2 clients joined.'; node-a02 logged nothing",
        "correlators/rules/torch.yaml rdzv.timeout (TCPStore.cpp waitForWorkers); " + SRC_H200,
        domain="host",
        root_cause="host.never_joined",
        culprit_hosts=["node-a02"],
        quality_any_of=["probable", "insufficient"],
        notes=(
            "Issue 10 items 1 and 2. The store on node-a01 (rank 0) waits 901 s for the job's 2 nodes and "
            "only its own agent joins. node-a02's logs were collected (its dmesg is there) and hold no line "
            "from the job's time: the node never started the job or never reached the store. The suspect is "
            "node-a02 (host), with the scheduler (task never started) and the configuration (nnodes / "
            "MASTER_ADDR) as alternatives - not 'symptoms only', and not rank 0, which torchrun names."
        ),
    )


def never_joined_no_input() -> None:
    b = _rdzv("reasoning-rdzv-node-no-input", a02_collected=False)
    expected(
        b, "counter-case: the same store timeout, but node-a02 has no input source at all (no logs collected)",
        "correlators/rules/torch.yaml rdzv.timeout; " + SRC_H200,
        domain="host",
        root_cause="host.never_joined",
        culprit_hosts=["node-a02"],
        quality_any_of=["insufficient", "probable"],
        notes=(
            "Counter-case of reasoning-rdzv-node-never-joined: nothing from node-a02 was collected, so its "
            "silence is 'no input', not evidence. node-a02 is still the only member that can be the missing "
            "client, but the verdict weighs it as a node it cannot see (lower confidence, coverage 'empty')."
        ),
    )


# ----------------------------------------------------------------------------- 4: pid -> rank

OOM_PID = 48211


def _oom_lines(at: dt.datetime) -> list[str]:
    return [
        dmesg_T(at, "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0"),
        dmesg_T(at, f"oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/system.slice/slurmstepd.scope/job_3201/step_0/user/task_0,task=python3,pid={OOM_PID},uid=1000"),
        dmesg_T(at, f"Out of memory: Killed process {OOM_PID} (python3) total-vm:498123456kB, anon-rss:402318844kB, file-rss:81232kB, shmem-rss:24576kB, UID:1000 pgtables:812344kB oom_score_adj:0"),
    ]


def _oom(name: str, how: str) -> Bundle:
    """how: 'workload' (ranks.N.pid), 'logs' (torchrun summary + NCCL prefix), 'none'."""
    b = Bundle(name)
    start, end = t("2026-11-30T07:00:00Z"), t("2026-11-30T07:31:40Z")
    nodes = ["node-a01", "node-a02"]
    ranks = None
    if how == "workload":
        ranks = {r: {"host": nodes[r // 8], "gpu": r % 8, "pid": (52011 if r < 8 else 48207) + r % 8} for r in range(16)}
    b.workload({"workload": "job-3201", "logs": "job-3202", "none": "job-3203"}[how], "FAILED", start, end, nodes,
               scheduler="slurm", exit_code="1:0", ranks_per_node=None if ranks else 8, ranks=ranks)
    oom_at = t("2026-11-30T07:21:03Z")
    b.write("logs/node-a02/dmesg-T.log", _oom_lines(oom_at))
    if how == "logs":
        # the rank's NCCL INFO/WARN prefix names its pid; torchrun's summary states rank + pid
        warn_at = oom_at - dt.timedelta(seconds=40)
        b.write("logs/node-a02/torchrun.log", [
            f"[rank12]:[{warn_at.strftime('%Y-%m-%d %H:%M:%S')}] node-a02:{OOM_PID}:{OOM_PID + 61} [4] NCCL WARN "
            "NET/IB : req 0 (size 8) is still in flight, proxyState not initialized",
            glog_agent("E", oom_at + dt.timedelta(milliseconds=852), 48190,
                       "failed (exitcode: -9) local_rank: 4 (pid: 48211) of binary: /path/to/venv/bin/python3"),
            *torchrun_summary("/path/to/train.py", oom_at + dt.timedelta(milliseconds=852), "node-a02",
                              (12, 4, -9, OOM_PID), [(8 + i, i, -15, 48207 + i) for i in range(8) if i != 4]),
        ])
    # node-a01's ranks lose their peer: gloo-style resets from node-a02's address
    a01 = []
    for r in range(8):
        seen = oom_at + dt.timedelta(milliseconds=420 + 17 * r)
        a01.append(f"[rank{r}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] "
                   f"Read error [10.0.0.12]:{29400 + r}: Connection reset by peer")
    fail = oom_at + dt.timedelta(seconds=2)
    a01.append(glog_agent("E", fail, 52000, "failed (exitcode: 1) local_rank: 0 (pid: 52011) of binary: /path/to/venv/bin/python3"))
    a01 += torchrun_summary("/path/to/train.py", fail, "node-a01", (0, 0, 1, 52011), [(r, r, 1, 52011 + r) for r in range(1, 8)])
    b.write("logs/node-a01/torchrun.log", a01)
    b.write("logs/_scheduler/slurmctld.log", slurm_job(3201, "node-a[01-02]", 224, start, end))
    return b


def oom_pid_from_workload() -> None:
    b = _oom("reasoning-oom-pid-rank-from-workload", "workload")
    expected(
        b, "kernel OOM killer kills pid 48211 on node-a02; workload.yaml ranks.12.pid = 48211 -> rank 12",
        "kernel mm/oom_kill.c format (dmesg -T, as multinode-ambiguous-xid79-vs-oom-kill); BUNDLE.md ranks.N.pid",
        domain="host",
        root_cause="host.oom_kill",
        culprit_hosts=["node-a02"],
        culprit_ranks=[12],
        quality_any_of=["definitive", "probable"],
        notes=(
            "Issue 10 item 4. The OOM killer names a pid, not a rank. The scheduler's record "
            "(workload.yaml ranks.<N>.pid) says pid 48211 on node-a02 is rank 12, so the verdict names "
            "rank 12; node-a01's ranks then see 'Connection reset by peer' from node-a02's address."
        ),
    )


def oom_pid_from_logs() -> None:
    b = _oom("reasoning-oom-pid-rank-from-logs", "logs")
    expected(
        b, "the same OOM kill; the rank is stated by torchrun's summary (rank 12, pid 48211) and NCCL's host:pid:tid prefix",
        "torchrun summary as h200-2026-11/torchrun-rank-sigkill.log; NCCL debug.cc WARN prefix",
        domain="host",
        root_cause="host.oom_kill",
        culprit_hosts=["node-a02"],
        culprit_ranks=[12],
        quality_any_of=["definitive", "probable"],
        notes=(
            "Issue 10 item 4, from the logs: '[rank12]:... node-a02:48211:48272 [4] NCCL WARN' ties pid 48211 "
            "to rank 12, and torchrun's summary says 'rank : 12 (local_rank: 4)' / 'exitcode : -9 (pid: "
            "48211)'. The kernel's OOM kill of pid 48211 lands on rank 12."
        ),
    )


def oom_pid_unknown() -> None:
    b = _oom("reasoning-oom-pid-unstated", "none")
    expected(
        b, "counter-case: the same OOM kill, but nothing states which rank pid 48211 was",
        "kernel mm/oom_kill.c format (dmesg -T)",
        domain="host",
        root_cause="host.oom_kill",
        culprit_hosts=["node-a02"],
        culprit_ranks=[],
        quality_any_of=["definitive", "probable"],
        notes=(
            "Counter-case of reasoning-oom-pid-rank-*: no workload record, summary or NCCL prefix names pid "
            "48211, so the verdict names the host and no rank rather than guess one."
        ),
    )


# ----------------------------------------------------------------------------- README

GENERATORS = (waited_on_silent_peer, waited_on_both_time_out, never_joined_silent, never_joined_no_input,
              oom_pid_from_workload, oom_pid_from_logs, oom_pid_unknown)


def main() -> None:
    for stale in sorted(OUT.glob("reasoning-*")):
        if stale.is_dir():
            shutil.rmtree(stale)
    for gen in GENERATORS:
        gen()
    merge_readme_rows("reasoning-", ROWS)


if __name__ == "__main__":
    main()
