"""Build the process-group bundles under ``examples/incidents/pg-*``.

A 16-rank job on node-a01/node-a02 (8 ranks each, GPU = local rank) with, besides the world
group, four tensor-parallel groups of 4 (``new_group(..., group_desc="tp")``: ranks 0-3, 4-7,
8-11, 12-15) and eight pipeline pairs of 2 (``group_desc="pp"``: ranks r and r+8). Rank 13
(node-a02) hangs outside NCCL and logs nothing more; its pipeline partner rank 5 (node-a01)
times out in their pair on a RECV; rank 5's watchdog takes its process down, torchrun on
node-a01 SIGTERMs the other seven local workers, and the agent on node-a02 stops its eight. No
other rank timed out, so across the whole allocation one rank waited and fourteen said nothing:
only the pair's membership says whom rank 5 waited on.

* ``pg-pipeline-pair-recv-hang``: every rank logs ProcessGroupNCCL's ``initialization options``
  for the world group and for its two subgroups (PyTorch 2.4+ form, as the H200 capture prints
  it: ``[PG ID <id> PG GUID <guid> Rank <group rank>] ... size: N, global rank: G, ..., PG
  Name: <guid>``). Expected: rank 13 on node-a02 (``nccl.stalled_rank``).
* ``pg-pipeline-pair-recv-hang-no-init``: counter-case, the same logs without any init line
  (the default log level hides them). Membership is unknown and the verdict is whatever the
  allocation-wide rule gives (see its ``expected.yaml``).

The GUIDs follow ``_process_group_name``'s counter (world 0, tp groups 1-4, pp pairs 5-12, in
creation order); the ``PG ID`` is the creation index on each rank (0 world, 1 its tp group, 2
its pp pair); the ``Rank`` in the prefix is the rank inside the group. Watchdog, torchrun agent
and summary lines are the helpers of ``make_incidents.py`` (formats of the H200 capture).

Run:  python3 examples/make_pg_incidents.py   (after make_incidents.py; its rows for ``pg-*``
bundles are merged into the README table).
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
    glog_time,
    merge_readme_rows,
    slurm_job,
    t,
    torchrun_summary,
)

ROWS: list[tuple[str, str, str, str]] = []
SOURCE = ("PyTorch ProcessGroupNCCL.cpp constructor 'initialization options' (2.4+ format) and createLogPrefix; "
          "h200-2026-11 nccl-debug-info-single-rank.log (init line), torchrun-rank-sigkill.log formats (torchrun agent + summary)")
NODES = ["node-a01", "node-a02"]
SUSPECT, WAITER = 13, 5


def host_of(rank: int) -> str:
    return NODES[rank // 8]


def groups_of(rank: int) -> list[tuple[int, str, str, int, int]]:
    """(PG ID, GUID, desc, group rank, size) of the groups ``rank`` is a member of."""
    tp = rank // 4
    pp = rank % 8
    return [(0, "0", "default_pg", rank, 16), (1, str(1 + tp), "tp", rank % 4, 4), (2, str(5 + pp), "pp", rank // 8, 2)]


def init_lines(rank: int, at: dt.datetime) -> list[tuple[dt.datetime, str]]:
    out = []
    for i, (pg, guid, _desc, grank, size) in enumerate(groups_of(rank)):
        when = at + dt.timedelta(milliseconds=40 * i)
        out.append((when, f"[I{glog_time(when, 9)} ProcessGroupNCCL.cpp:988] [PG ID {pg} PG GUID {guid} Rank {grank}] "
                          f"ProcessGroupNCCL initialization options: size: {size}, global rank: {rank}, TIMEOUT(ms): 600000, "
                          f"USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: 0, SPLIT_COLOR: -2, PG Name: {guid}"))
    return out


def _bundle(name: str, with_init: bool) -> Bundle:
    b = Bundle(name)
    start, end = t("2026-11-30T07:00:00Z"), t("2026-11-30T07:31:06Z")
    job = 4311 if with_init else 4312
    b.workload(f"job-{job}", "FAILED", start, end, NODES, scheduler="slurm", exit_code="1:0",
               ranks={r: {"host": host_of(r), "gpu": r % 8} for r in range(16)})
    logs: dict[str, list[tuple[dt.datetime, str]]] = {h: [] for h in NODES}
    if with_init:
        for r in range(16):
            logs[host_of(r)] += init_lines(r, start + dt.timedelta(seconds=4, milliseconds=11 * r))
    # rank 5 posts its RECV from rank 13 (pair GUID 10, PG ID 2 on rank 5, group rank 0)
    enq = t("2026-11-30T07:20:01.204000Z")
    ran = 600013
    at = enq + dt.timedelta(milliseconds=ran)
    prefix = f"[rank{WAITER}]:[E{glog_time(at, 9)}"
    pg = "[PG ID 2 PG GUID 10(pp) Rank 0]"
    logs["node-a01"] += [
        (at, f"{prefix} ProcessGroupNCCL.cpp:690] {pg} Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4121, "
             f"OpType=RECV, NumelIn=2097152, NumelOut=2097152, Timeout(ms)=600000) ran for {ran} milliseconds before timing out."),
        (at, f"{prefix} ProcessGroupNCCL.cpp:2182] {pg} Timeout at NCCL work: 4121, last enqueued NCCL work: 4121, "
             f"last completed NCCL work: 4120."),
        (at, f"{prefix} ProcessGroupNCCL.cpp:733] {pg} To avoid data inconsistency, we are taking the entire process down."),
    ]
    # torchrun on node-a01: rank 5 (local 5) died of SIGABRT; the other seven are SIGTERMed
    fail = at + dt.timedelta(milliseconds=874)
    agent1, agent2 = 6610, 7710
    pid = {r: (6631 if r < 8 else 7731) + r % 8 for r in range(16)}
    for r in range(8):
        if r != WAITER:
            logs["node-a01"].append((fail, glog_agent("W", fail, agent1, f"Sending process {pid[r]} closing signal SIGTERM",
                                                      where="api.py:1012")))
    done = fail + dt.timedelta(milliseconds=36)
    logs["node-a01"].append((done, glog_agent("E", done, agent1, f"failed (exitcode: -6) local_rank: {WAITER} (pid: {pid[WAITER]}) "
                                                                  "of binary: /path/to/venv/bin/python3")))
    summary = torchrun_summary("/path/to/train_pp.py", done, "node-a01", (WAITER, WAITER, -6, pid[WAITER]),
                               [(r, r, -15, pid[r]) for r in range(8) if r != WAITER])
    # node-a02: its agent stops its workers when the job ends
    stop = fail + dt.timedelta(seconds=2, milliseconds=310)
    for r in range(8, 16):
        logs["node-a02"].append((stop, glog_agent("W", stop, agent2, f"Sending process {pid[r]} closing signal SIGTERM",
                                                  where="api.py:1012")))
    for host in NODES:
        lines = [text for _, text in sorted(logs[host], key=lambda x: x[0])]
        if host == "node-a01":
            lines += summary
        b.write(f"logs/{host}/torchrun.log", lines)
    b.write("logs/_scheduler/slurmctld.log", slurm_job(job, "node-a[01-02]", 224, start, end))
    return b


def pair_hang() -> None:
    b = _bundle("pg-pipeline-pair-recv-hang", with_init=True)
    b.expected(
        "16 ranks, 2 nodes: rank 5 times out on a RECV (SeqNum 4121) in its pipeline pair PG 2 (GUID 10, ranks 5 and 13); "
        "rank 13 logs nothing; torchrun SIGTERMs the rest and blames rank 5",
        SOURCE + "; DESIGN.md (a stalled rank is the one that did NOT time out)",
        rows=ROWS,
        domain_any_of=["unknown", "software"],
        root_cause="nccl.stalled_rank",
        culprit_hosts=["node-a02"],
        culprit_ranks=[SUSPECT],
        quality_any_of=["probable", "definitive", "insufficient"],
        notes=(
            "Every rank states its groups at init: the world (size 16), its tp group (size 4) and its pp pair (size 2); "
            "ranks 5 and 13 both log 'PG Name: 10' with size 2, so the pair GUID 10 has members 5 and 13. Rank 5's "
            "watchdog times out on WorkNCCL(SeqNum=4121, OpType=RECV) in [PG ID 2 PG GUID 10(pp) Rank 0]; rank 13 logs "
            "nothing after its init lines. Only rank 5 ever waited, so across the allocation the 14 ranks that said "
            "nothing were merely SIGTERMed by their agents; in the 2-member group the member that did not time out is "
            "the one waited on: rank 13 on node-a02. torchrun's 'first observed failure' (rank 5, SIGABRT from its own "
            "watchdog) is context only."
        ),
    )


def pair_hang_no_init() -> None:
    b = _bundle("pg-pipeline-pair-recv-hang-no-init", with_init=False)
    b.expected(
        "counter-case: the same hang without init lines; rank 5's RECV timeout names PG 2 but nothing states its members",
        SOURCE,
        rows=ROWS,
        root_cause="unknown",
        culprit_hosts=[],
        culprit_ranks=[],
        quality_any_of=["insufficient"],
        notes=(
            "Counter-case of pg-pipeline-pair-recv-hang: the same lines without ProcessGroupNCCL's initialization "
            "options. The timeout names [PG ID 2 PG GUID 10(pp) Rank 0] but no line states who else is in that group, "
            "so the group is not known and the rule judges against the allocation: one waiter and fourteen quiet "
            "ranks single out nobody (the quiet ranks are too many to be stalled ones). The verdict stays "
            "symptoms-only; in particular torchrun's 'first observed failure' (rank 5, SIGABRT from its own watchdog) "
            "must not become the cause."
        ),
    )


GENERATORS = (pair_hang, pair_hang_no_init)


def build() -> list[tuple[str, str, str, str]]:
    """Write the ``pg-*`` bundles; returns their README rows."""
    for stale in sorted(OUT.glob("pg-*")):
        if stale.is_dir():
            shutil.rmtree(stale)
    for gen in GENERATORS:
        gen()
    return ROWS


def main() -> None:
    merge_readme_rows("pg-", build())


if __name__ == "__main__":
    main()
