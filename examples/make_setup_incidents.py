"""Build the setup-failure bundles of issue 33 (items 3, 4, 5) under ``examples/incidents/``:
``verbs-*`` (queue-pair and completion errors as causes of their own), ``slurm-node-*``
(node-side scheduler failures pinned on the node) and ``k8s-admission-*`` (a pod the kubelet
refused, tied to its node and GPU). Each behaviour comes with its counter-case, the same line
where it is only a symptom of a fault that outweighs it.

Formats, written from their sources: NCCL misc/ibvwrap.cc ``Call to ibv_modify_qp failed with
%d %s, on dev %s:%d, curr state %s, next state %s, local GID index %d, local GID %s, remote GID
%s`` (2.24+), transport/net_ib ``Got completion from peer ... with status=%d opcode=%d len=%d
vendor err %d (%s) localGid .. remoteGids.. hca %s`` (2.22-2.28), net_ib/common.cc ``%s:%d GID
table changed`` (2.29+), NCCL_DEBUG timestamps ``[YYYY-MM-DD HH:MM:SS]``; Slurm
api/step_launch.c ``Task launch for %ps failed on node %s: %m``, slurm_protocol_api.c ``[%s]
auth_g_verify: %s has authentication error: %s``, auth_munge.c ``Munge decode failed: %s`` /
``Check for out of sync clocks``, agent.c ``Prolog/Epilog failure on nodes %s, set to state
DRAIN``; kubelet ``Allocate failed due to %v, which is unexpected`` in ``kubectl describe``
event rows, k8s-device-plugin ``'%s' device marked unhealthy: %s``; mlx5_core ``Link down`` /
``Link up`` and NVRM ``Xid (PCI:%s): 79, GPU has fallen off the bus.`` in syslog form.

Run:  python3 examples/make_setup_incidents.py   (after make_incidents.py, whose README table
it extends: its rows for the bundles above are replaced in place).
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_incidents import Bundle, merge_readme_rows, slurm_job, t  # noqa: E402

ROWS: list[tuple[str, str, str, str]] = []
SRC_QP = "NCCL misc/ibvwrap.cc ibvModifyQpLog (v2.24.3-1 .. v2.30.7-1, printIbModifyQpHint); issue 33"
SRC_CQE = "NCCL transport/net_ib.cc completion WARN (2.22-2.28); rdma-core ibv_wc_status (status 4 = IBV_WC_LOC_PROT_ERR); rc-07"
SRC_GID = "NCCL net_ib/common.cc 'GID table changed' (2.29+); rdma-core enum_strs.c IBV_EVENT_GID_CHANGE"
SRC_SLURM = "SchedMD/slurm 22.05-25.11: api/step_launch.c, slurm_protocol_api.c, auth_munge.c, slurmctld/agent.c"
SRC_K8S = "kubelet admission 'Allocate failed due to %v, which is unexpected' (devicemanager); NVIDIA k8s-device-plugin server.go"


def ts(at: dt.datetime) -> str:
    return at.strftime("[%Y-%m-%d %H:%M:%S]")


def syslog(at: dt.datetime, host: str, text: str) -> str:
    return f"{at.strftime('%b %d %H:%M:%S')} {host} {text}"


def ctld(at: dt.datetime, text: str) -> str:
    return f"[{at.strftime('%Y-%m-%dT%H:%M:%S')}.{at.microsecond // 1000:03d}] {text}"


def s(at: dt.datetime, seconds: float) -> dt.datetime:
    return at + dt.timedelta(seconds=seconds)


def nccl(at: dt.datetime, host: str, pid: int, dev: int, text: str) -> str:
    return f"{ts(at)} {host}:{pid}:{pid + 70} [{dev}] {text}"


def remote_error(at: dt.datetime, rank: int) -> str:
    stamp = at.strftime("%m%d %H:%M:%S.") + f"{at.microsecond:06d}153"
    return (f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] "
            "Process group watchdog thread terminated with exception: NCCL error: remote process exited or "
            "there was a network error, NCCL version 2.27.3")


def system_error(at: dt.datetime, rank: int, last: str) -> list[str]:
    stamp = at.strftime("%m%d %H:%M:%S.") + f"{at.microsecond:06d}153"
    return [
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process "
        "group watchdog thread terminated with exception: NCCL error: unhandled system error (run with "
        "NCCL_DEBUG=INFO for details), NCCL version 2.27.3",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
        "Last error:",
        last,
    ]


def two_nodes(b: Bundle, job: str, start: dt.datetime, end: dt.datetime, nodes=("node-a01", "node-a02"),
              scheduler: str = "static") -> None:
    b.workload(job, "FAILED", start, end, list(nodes), scheduler=scheduler, exit_code="1:0" if scheduler == "slurm" else None,
               ranks_per_node=8)


# ----------------------------------------------------------------------------- item 3: verbs

def modify_qp_line(host: str, dev: str, state: str, nxt: str, gid: int, local: str, remote: str,
                   err: tuple[int, str] = (110, "Connection timed out")) -> str:
    return (f"misc/ibvwrap.cc:376 NCCL WARN Call to ibv_modify_qp failed with {err[0]} {err[1]}, on dev {dev}:1, "
            f"curr state {state}, next state {nxt}, local GID index {gid}, local GID {local}, remote GID {remote}")


def verbs_modify_qp(counter: bool) -> None:
    name = "verbs-modify-qp-peer-link-down" if counter else "verbs-modify-qp-rtr-timeout"
    b = Bundle(name)
    start = t("2026-12-02T03:10:00Z")
    fail = s(start, 48)
    end = s(start, 95)
    two_nodes(b, "job-7301" if not counter else "job-7302", start, end)
    a01 = [nccl(s(start, 30), "node-a01", 40211, 0, "NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB bond0:10.0.0.11<0>"),
           nccl(s(start, 31), "node-a01", 40211, 0, "NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.")]
    qp = modify_qp_line("node-a01", "mlx5_1", "INIT", "RTR", 3, "::ffff:10.0.0.11", "::ffff:10.0.0.12")
    a01.append(nccl(s(fail, -1.5), "node-a01", 40211, 1, qp.replace("NCCL WARN", "NCCL INFO").replace(
        "remote GID ::ffff:10.0.0.12", "remote GID ::ffff:10.0.0.12, retrying 1/2 after 500 msec of sleep")))
    a01.append(nccl(fail, "node-a01", 40211, 1, qp))
    a01 += system_error(s(fail, 0.4), 1, qp.split("NCCL WARN ", 1)[1])
    a02 = [nccl(s(start, 30), "node-a02", 50333, 0, "NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB bond0:10.0.0.12<0>"),
           remote_error(s(fail, 3.2), 9)]
    b.write("logs/node-a01/train.log", a01)
    if counter:
        b.write("logs/node-a02/syslog", [
            syslog(s(fail, -20), "node-a02", "kernel: mlx5_core 0000:2a:00.1 enp42s0f1np1: Link down"),
            syslog(s(fail, -20), "node-a02", "kernel: bond0: (slave enp42s0f1np1): link status definitely down, disabling slave"),
        ])
    b.write("logs/node-a02/train.log", a02)
    if counter:
        b.expected("counter-case: node-a01's RTR transition towards node-a02 times out 20 s after node-a02's rail-1 port went down",
                   SRC_QP + "; mlx5_core link events", domain="fabric", culprit_hosts=["node-a02"], not_domain=["config"],
                   quality_any_of=["definitive", "probable"],
                   notes=("Counter-case of verbs-modify-qp-rtr-timeout: the same 'Call to ibv_modify_qp failed with 110 "
                          "Connection timed out ... next state RTR' on node-a01, but node-a02's rail-1 port (mlx5_1's "
                          "netdev) went down 20 s before. The peer was unreachable because its link was down: the "
                          "link-down on node-a02 explains node-a01's setup failure and the remote errors; the QP error "
                          "is its symptom, not a configuration of node-a01."))
    else:
        b.expected("NCCL 2.27 on node-a01 cannot bring a rail-1 QP to RTR towards 10.0.0.12 (ETIMEDOUT after its retry); ports up, no link event",
                   SRC_QP, domain="config", root_cause="config.ib_peer_unreachable", culprit_hosts=["node-a01"],
                   not_domain=["fabric", "gpu_hardware"], quality_any_of=["definitive", "probable"],
                   notes=("Issue 33 item 3. node-a01's NCCL (2.24+ form, ibvModifyQpLog) logs an INFO retry and then "
                          "'Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_1:1, curr state "
                          "INIT, next state RTR, local GID index 3 ... remote GID ::ffff:10.0.0.12'. For a RoCE QP the "
                          "kernel resolves the peer's address in the INIT->RTR transition: a timeout there is the peer "
                          "unreachable on that path (rail not cross-connected, routing, subnet, GID index; NCCL 2.30.7 "
                          "prints that hint). No link, port or HCA event on either host: a config cause on the host "
                          "that shows it, naming the peer (10.0.0.12 = node-a02). node-a02's remote error is its symptom."))


def verbs_loc_prot(counter: bool) -> None:
    name = "verbs-loc-prot-after-xid79" if counter else "verbs-loc-prot-gpudirect"
    b = Bundle(name)
    start = t("2026-12-02T04:00:00Z")
    fail = s(start, 140)
    end = s(start, 200)
    two_nodes(b, "job-7311" if not counter else "job-7312", start, end)
    cqe = ("transport/net_ib.cc:1702 NCCL WARN NET/IB: Got completion from peer 10.0.0.11<43117> with status=4 opcode=0 "
           "len=524288 vendor err 81 (Send) localGid ::ffff:10.0.0.12 remoteGids::ffff:10.0.0.11 hca mlx5_0")
    a02 = [nccl(s(start, 40), "node-a02", 61200, 3, "NCCL INFO Channel 00/0 : 11[3] -> 3[3] [send] via NET/IB/0/GDRDMA"),
           nccl(fail, "node-a02", 61200, 3, cqe)]
    a02 += system_error(s(fail, 0.3), 11, cqe.split("NCCL WARN ", 1)[1])
    flush = ("transport/net_ib.cc:1702 NCCL WARN NET/IB: Got completion from peer 10.0.0.12<43120> with status=5 opcode=0 "
             "len=0 vendor err 249 (Recv) localGid ::ffff:10.0.0.11 remoteGids::ffff:10.0.0.12 hca mlx5_0")
    a01 = [nccl(s(start, 40), "node-a01", 52100, 3, "NCCL INFO Channel 00/0 : 3[3] -> 11[3] [send] via NET/IB/0/GDRDMA"),
           nccl(s(fail, 0.2), "node-a01", 52100, 3, flush), remote_error(s(fail, 2.5), 3)]
    b.write("logs/node-a01/train.log", a01)
    b.write("logs/node-a02/train.log", a02)
    if counter:
        b.write("logs/node-a02/syslog", [
            syslog(s(fail, -2), "node-a02", "kernel: NVRM: Xid (PCI:0000:9c:00): 79, pid=61200, GPU has fallen off the bus."),
            syslog(s(fail, -2), "node-a02", "kernel: NVRM: GPU 0000:9c:00.0: GPU has fallen off the bus."),
        ])
        b.expected("counter-case: the same status=4 completion on node-a02, 2 s after its GPU fell off the bus (Xid 79)",
                   SRC_CQE + "; NVRM Xid 79", domain="gpu_hardware", root_cause="gpu.xid.79", culprit_hosts=["node-a02"],
                   not_domain=["config"], quality_any_of=["definitive", "probable"],
                   notes=("Counter-case of verbs-loc-prot-gpudirect: node-a02's GPU fell off the bus (Xid 79) 2 s "
                          "before the local protection error. The HCA could not reach the GPU buffer because the GPU "
                          "was gone, not because of ACS/IOMMU: the Xid explains the completion error and its peers' "
                          "errors; the config cause is absorbed."))
    else:
        b.expected("node-a02's send completes with status=4 (IBV_WC_LOC_PROT_ERR) on its GDRDMA channel; node-a01 sees the flush",
                   SRC_CQE, domain="config", root_cause="config.gpudirect_rdma", culprit_hosts=["node-a02"],
                   not_domain=["fabric", "gpu_hardware"], quality_any_of=["definitive", "probable"],
                   notes=("Issue 33 item 3. A completion with local protection error (status 4) means the HCA was "
                          "refused the memory the request named -- with NCCL's GPUDirect RDMA channel (via "
                          "NET/IB/0/GDRDMA) the GPU buffer: PCIe ACS redirection or the IOMMU between NIC and GPU, "
                          "nvidia-peermem or dma-buf. A config cause on the host that shows it (node-a02); node-a01's "
                          "WR_FLUSH (status 5) and remote error are its symptoms. No link event, no Xid."))


def verbs_gid_change(counter: bool) -> None:
    name = "verbs-gid-change-after-link-flap" if counter else "verbs-gid-change-completion-errors"
    b = Bundle(name)
    start = t("2026-12-02T05:00:00Z")
    change = s(start, 1800)
    end = s(change, 120)
    two_nodes(b, "job-7321" if not counter else "job-7322", start, end, nodes=("node-a03", "node-a04"))
    a03 = [nccl(s(start, 25), "node-a03", 7101, 0, "NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB bond0:10.0.0.13<0>"),
           nccl(change, "node-a03", 7101, 0, "transport/net_ib/common.cc:153 NCCL WARN NET/IB : mlx5_0:1 GID table changed")]
    errs = []
    for i, (rank, peer) in enumerate(((0, "10.0.0.14<40110>"), (4, "10.0.0.14<40116>"))):
        at = s(change, 31 + i * 0.4)
        errs.append(nccl(at, "node-a03", 7101 + rank, rank,
                         f"transport/net_ib/p2p.cc:688 NCCL WARN NET/IB: Got completion from peer {peer} with "
                         "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  localGid ::ffff:10.0.0.13 "
                         "remoteGids::ffff:10.0.0.14 hca mlx5_0"))
    a03 += errs + [remote_error(s(change, 33), 0)]
    a04 = [nccl(s(start, 25), "node-a04", 8202, 0, "NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB bond0:10.0.0.14<0>"),
           remote_error(s(change, 34), 8), remote_error(s(change, 34.2), 12)]
    b.write("logs/node-a03/train.log", a03)
    b.write("logs/node-a04/train.log", a04)
    if counter:
        b.write("logs/node-a03/syslog", [
            syslog(s(change, -6), "node-a03", "kernel: mlx5_core 0000:0c:00.0 enp12s0f0np0: Link down"),
            syslog(s(change, -1), "node-a03", "kernel: mlx5_core 0000:0c:00.0 enp12s0f0np0: Link up"),
        ])
        b.expected("counter-case: node-a03's port goes down and up, its GID table changes, completion errors 12 follow",
                   SRC_GID + "; mlx5_core link events", domain="fabric", culprit_hosts=["node-a03"], not_domain=["config"],
                   quality_any_of=["definitive", "probable", "ambiguous"],
                   notes=("Counter-case of verbs-gid-change-completion-errors: the same GID table change and "
                          "completion errors on node-a03, but its port went down 6 s before and came back: a link "
                          "that goes down rewrites the GID table itself. The link event is the cause (fabric, "
                          "node-a03); the GID change and the errors are its symptoms, not an addressing change."))
    else:
        b.expected("30 min into the job node-a03's mlx5_0:1 GID table changes; 31 s later its QPs fail with retry exceeded (12)",
                   SRC_GID, domain="config", root_cause="config.gid_changed", culprit_hosts=["node-a03"],
                   not_domain=["fabric", "gpu_hardware"], quality_any_of=["definitive", "probable"],
                   notes=("Issue 33 item 3. NCCL 2.29's async thread logs 'mlx5_0:1 GID table changed' "
                          "(IBV_EVENT_GID_CHANGE) on node-a03 half an hour into the job, with no link or port event; "
                          "31 s later node-a03's connections to node-a04 fail with IBV_WC_RETRY_EXC_ERR. The addressing "
                          "of the port changed under the job (an IP re-assigned on the RoCE netdev, a VLAN/bond "
                          "change): a config cause on node-a03. Not the RoCE GID index detector's start-up pattern "
                          "(the errors come 30 min after the start)."))


# ----------------------------------------------------------------------------- item 4: slurm

def slurm_cred_expired(counter: bool) -> None:
    name = "slurm-node-prolog-after-xid79" if counter else "slurm-node-task-launch-cred-expired"
    b = Bundle(name)
    start = t("2026-12-03T01:00:00Z")
    end = s(start, 45)
    job = 7402 if counter else 7401
    b.workload(f"job-{job}", "FAILED", start, end, ["node-a01", "node-a02", "node-a03", "node-a04"],
               scheduler="slurm", exit_code="1:0", ranks_per_node=8)
    ctl = slurm_job(job, "node-a[01-04]", 448, start, end)
    if counter:
        ctl.insert(2, ctld(s(start, 9), "error: Prolog/Epilog failure on nodes node-a03, set to state DRAIN"))
        out = [f"srun: error: Task launch for StepId={job}.0 failed on node node-a03: Job prolog failed",
               "srun: error: Application launch failed: Job prolog failed",
               "srun: Job step aborted: Waiting up to 32 seconds for job step to finish."]
        b.write("logs/node-a03/syslog", [
            syslog(s(start, 2), "node-a03", "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1890, GPU has fallen off the bus."),
            syslog(s(start, 8), "node-a03", f"slurmd[2100]: slurmd: error: [job {job}] prolog failed status=1:0"),
        ])
    else:
        out = [f"srun: error: Task launch for StepId={job}.0 failed on node node-a03: Job credential expired",
               "srun: error: Application launch failed: Job credential expired",
               "srun: Job step aborted: Waiting up to 32 seconds for job step to finish."]
        ctl.insert(2, ctld(s(start, 3), "error: Munge decode failed: Rewound credential"))
        ctl.insert(3, ctld(s(start, 3), "error: Check for out of sync clocks"))
        ctl.insert(4, ctld(s(start, 3), "error: slurm_unpack_received_msg: [[node-a03]:41022] auth_g_verify: "
                                        "MESSAGE_NODE_REGISTRATION_STATUS has authentication error: Invalid authentication credential"))
    b.write("logs/_scheduler/slurmctld.log", ctl)
    b.write("logs/_scheduler/slurm-%d.out" % job, out)
    if not counter:
        # slurmd on each node; node-a03's clock runs ~10 min ahead: munge credentials from the
        # controller look expired there (and node-a03's look rewound to the controller)
        for i, host in enumerate(("node-a01", "node-a02", "node-a03", "node-a04")):
            lines = [ctld(s(start, 1 + i * 0.01), f"launch task StepId={job}.0 request from UID:1000 GID:1000 "
                                                    f"HOST:10.0.0.11 PORT:{41200 + i}")]
            if host == "node-a03":
                lines = [ctld(s(start, 601), "error: Munge decode failed: Expired credential"),
                         ctld(s(start, 601), "ENCODED: Thu Dec 03 01:00:01 2026"),
                         ctld(s(start, 601), "DECODED: Thu Dec 03 01:10:01 2026")]
            b.write(f"logs/{host}/slurmd.log", lines)
    if counter:
        b.expected("counter-case: node-a03's prolog (a GPU health check) fails 6 s after its GPU fell off the bus; srun names node-a03",
                   SRC_SLURM + "; NVRM Xid 79", domain="gpu_hardware", root_cause="gpu.xid.79", culprit_hosts=["node-a03"],
                   not_domain=["config", "scheduler"], quality_any_of=["definitive", "probable"],
                   notes=("Counter-case of slurm-node-task-launch-cred-expired: the scheduler-side lines name node-a03 "
                          "again (slurmctld 'Prolog/Epilog failure on nodes node-a03', srun 'Task launch ... failed on "
                          "node node-a03: Job prolog failed') and slurmd there logs 'prolog failed status=1:0', but "
                          "node-a03's GPU fell off the bus 6 s earlier: the prolog's health check failed because of it. "
                          "The Xid on node-a03 explains the prolog failure (same host); the node-setup cause is its "
                          "symptom. Never _scheduler."))
    else:
        b.expected("srun: task launch on node-a03 fails 'Job credential expired'; slurmctld rejects node-a03's registration (munge: rewound)",
                   SRC_SLURM, domain="host", culprit_hosts=["node-a03"], not_domain=["scheduler", "gpu_hardware"],
                   root_cause=["host.slurm_cred_expired", "host.slurm_auth_failed", "host.clock_skew"],
                   quality_any_of=["definitive", "probable"],
                   notes=("Issue 33 item 4. All lines are the scheduler's (logs/_scheduler: slurmctld.log and the "
                          "job's srun output), a declared aggregator whose named node is taken when it is a node of "
                          "the allocation: srun 'Task launch for StepId=7401.0 failed on node node-a03: Job "
                          "credential expired' and slurmctld '[[node-a03]:41022] auth_g_verify: "
                          "MESSAGE_NODE_REGISTRATION_STATUS has authentication error', after 'Munge decode failed: "
                          "Rewound credential' / 'Check for out of sync clocks' (no node named: context); node-a03's "
                          "own slurmd says 'Munge decode failed: Expired credential' with its clock 10 min ahead "
                          "(ENCODED 01:00:01, DECODED 01:10:01). node-a03's clock is out of sync: a host cause on "
                          "node-a03, never the _scheduler pseudo-host."))


def slurm_foreign_node() -> None:
    b = Bundle("slurm-node-foreign-node-named")
    start = t("2026-12-03T02:00:00Z")
    end = s(start, 60)
    b.workload("job-7403", "FAILED", start, end, ["node-a01", "node-a02"], scheduler="slurm", exit_code="1:0",
               ranks_per_node=8)
    ctl = slurm_job(7403, "node-a[01-02]", 224, start, end)
    ctl.insert(2, ctld(s(start, 3), "error: slurm_unpack_received_msg: [[node-a07]:41022] auth_g_verify: "
                                    "MESSAGE_NODE_REGISTRATION_STATUS has authentication error: Invalid authentication credential"))
    ctl.insert(3, ctld(s(start, 4), "error: Prolog/Epilog failure on nodes node-a07, set to state DRAIN"))
    b.write("logs/_scheduler/slurmctld.log", ctl)
    b.write("logs/node-a02/train.log", [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 88, in <module>',
        "    main()",
        '  File "/workspace/train.py", line 61, in main',
        '    cfg = load_config(args.config)',
        "KeyError: 'optimizer'",
    ])
    b.expected("counter-case: slurmctld's munge and prolog errors name node-a07, a node outside the job; the job fails on its own KeyError",
               SRC_SLURM, not_domain=["host", "config"], culprit_hosts=["node-a02"], domain_any_of=["software", "unknown"],
               quality_any_of=["definitive", "probable", "ambiguous"],
               notes=("Counter-case for issue 33 item 4: the same controller lines (auth_g_verify error, Prolog/Epilog "
                      "failure on nodes ...) name node-a07, which is not a node of job-7403's allocation: an "
                      "aggregator's named host is trusted only for a node of the allocation (correlators/identity.py), "
                      "so they stay on _scheduler with line_host node-a07 and blame nobody. The job died of its own "
                      "exception on node-a02."))


# ----------------------------------------------------------------------------- item 5: kubernetes

def k8s_admission(counter: bool) -> None:
    name = "k8s-admission-after-xid79" if counter else "k8s-admission-unhealthy-gpu"
    b = Bundle(name)
    start = t("2026-12-04T01:00:00Z")
    end = s(start, 90)
    b.workload("default/train-7501" if not counter else "default/train-7502", "FAILED", start, end,
               ["node-a01", "node-a02"], scheduler="kubernetes", ranks_per_node=8)
    pod = "train-7501-worker-1" if not counter else "train-7502-worker-1"
    b.write("logs/_scheduler/describe-pod.txt", [
        f"Name:             {pod}",
        "Namespace:        default",
        "Node:             node-a02/10.0.0.12",
        "Status:           Failed",
        "Reason:           UnexpectedAdmissionError",
        "Events:",
        "  Type     Reason                    Age   From               Message",
        "  ----     ------                    ----  ----               -------",
        f"  Normal   Scheduled                 70s   default-scheduler  Successfully assigned default/{pod} to node-a02",
        "  Warning  UnexpectedAdmissionError  69s   kubelet, node-a02  Allocate failed due to previously allocated devices "
        "are no longer healthy; cannot allocate unhealthy devices nvidia.com/gpu, which is unexpected",
    ])
    dp = ["I1204 01:00:04.102211       1 main.go:317] Starting OS watcher.",
          "I1204 01:00:19.551203       1 server.go:287] 'nvidia.com/gpu' device marked unhealthy: "
          "GPU-5f0c2d1e-8a3b-4c7d-9e21-0a6b3c4d5e6f"]
    if counter:
        dp.insert(1, "I1204 01:00:19.551001       1 health.go:159] XidCriticalError: Xid=79 on "
                     "Device=GPU-5f0c2d1e-8a3b-4c7d-9e21-0a6b3c4d5e6f; marking device as unhealthy.")
        b.write("logs/node-a02/syslog", [
            syslog(s(start, 19), "node-a02", "kernel: NVRM: Xid (PCI:0000:9c:00): 79, pid=2231, GPU has fallen off the bus."),
        ])
    b.write("logs/node-a02/nvidia-device-plugin.log", dp)
    if counter:
        b.expected("counter-case: the same admission refusal, after node-a02's GPU fell off the bus (Xid 79, and the device plugin says so)",
                   SRC_K8S + "; NVRM Xid 79", domain="gpu_hardware", root_cause="gpu.xid.79", culprit_hosts=["node-a02"],
                   not_domain=["config", "scheduler", "software"], quality_any_of=["definitive", "probable"],
                   notes=("Counter-case of k8s-admission-unhealthy-gpu: node-a02's kernel logged Xid 79 for the GPU "
                          "the device plugin then marked unhealthy. The fallen GPU is the cause (decisive); the "
                          "UnexpectedAdmissionError and the 'marked unhealthy' line are its symptoms."))
    else:
        b.expected("kubelet on node-a02 refuses worker-1 (UnexpectedAdmissionError: unhealthy nvidia.com/gpu); the device plugin there marked GPU-5f0c... unhealthy",
                   SRC_K8S, domain="gpu_hardware", root_cause="gpu.device_unhealthy", culprit_hosts=["node-a02"],
                   not_domain=["scheduler", "software", "config"], quality_any_of=["probable", "ambiguous"],
                   notes=("Issue 33 item 5. The pod's describe output (logs/_scheduler, a declared aggregator) shows "
                          "the kubelet of node-a02 ('From: kubelet, node-a02') refusing it: 'Allocate failed due to "
                          "previously allocated devices are no longer healthy; cannot allocate unhealthy devices "
                          "nvidia.com/gpu, which is unexpected'. The NVIDIA device plugin on node-a02 had marked "
                          "GPU-5f0c2d1e-... unhealthy 15 s before, with no Xid or NVML line saying why: a GPU fault on "
                          "node-a02, named by its UUID; probable at best, since the reason is not in the lines."))


def main() -> None:
    import make_incidents

    for fn in (verbs_modify_qp, verbs_loc_prot, verbs_gid_change, slurm_cred_expired, k8s_admission):
        for counter in (False, True):
            fn(counter)
    slurm_foreign_node()
    rows = sorted(make_incidents.README_ROWS)
    for prefix in ("verbs-", "slurm-node-", "k8s-admission-"):
        merge_readme_rows(prefix, [r for r in rows if r[0].startswith(prefix)])


if __name__ == "__main__":
    main()
