"""Build the six fabric incident bundles under ``examples/incidents/fabric-*``.

The bundles: one flapping port seen from both ends; the same with only
the host side; a degrading cable (rising symbol errors, no link down yet); two jobs hit by one
port; a leaf switch down; and the RoCE GID-index configuration case, which is *not* a fabric
fault. Each is a training job that runs for hours before the fault (except the config case,
which fails on its first connection), with the lines every party would log, in real formats:

* host kernel: the mlx5_core ``<bdf> <netdev>: Link down`` / ``Link up`` lines of
  ``fixtures/real/public/formats/mlx5-link-events.log`` (raw dmesg, seconds since boot, so each
  host carries ``boot_time``);
* NCCL 2.21.5 (the release PyTorch 2.5/2.6 ship, and the one of rc-04): WARN lines exactly as
  ``transport/net_ib.cc`` / ``misc/socket.cc`` of the v2.21.5-1 tag print them
  (``\\n<host>:<pid>:<tid> [<dev>] <file>:<line> NCCL WARN ...``, no time stamp):
  ``NET/IB : Got completion from peer <ip><port> with status=12 opcode=0 len=0 vendor err 129
  (Recv)`` followed, on RoCE only (link layer Ethernet), by `` localGid <gid> remoteGids<gid>``;
  and ``socketProgressOpt: Call to recv from <ip><port> failed : Connection reset by peer``;
* rc-04's four lines (``torch.distributed.DistBackendError ... NCCL version 2.21.5`` /
  ``ncclRemoteError`` / ``Last error:`` / the socket reset) verbatim, placeholder filled;
* PyTorch's watchdog error block (``Some NCCL operations have failed or timed out`` / ``Process
  group watchdog thread terminated with exception: NCCL error: ... Last error: ...``) in the
  glog-with-rank-prefix layout of real reports, torchrun agent lines and failure summaries and
  slurmctld records with the helpers of ``make_incidents.py``;
* switch side: SONiC orchagent ``updatePortOperStatus: Port EthernetN oper state set from up to
  down`` (leaf-01) and Cumulus switchd ``nic_set_carrier: swpN: setting kernel carrier: down`` +
  ``libnl: swpN, family 0, ifi N, oper down`` (leaf-02): the switch formats of the rule pack
  whose source is checked against the vendors' code / docs;
* counters: a ``*.counters.csv`` series (``time,node,port,<sysfs counter names>``, cumulative
  raw values, one sample per port every 10 s) as ``connectors/counters.py`` reads it.

Fabric: hosts ``node-a0N`` (10.0.0.1N), one 400G ConnectX-7 each (``mlx5_0`` port 1, PCI
0000:0c:00.0, netdev ``enp12s0f0np0`` on RoCE); RoCE leaf-01 (SONiC, node-a01..a04 on
Ethernet0/8/16/24) and leaf-02 (Cumulus, node-a05..a08 on swp1..swp4), both uplinked to
spine-01; the degrading-cable bundle is an InfiniBand pod (leaf-01 ports 1..4, IPoIB addresses,
no GIDs in NCCL's line). Cluster ``c1``.

Run:  python3 examples/make_fabric_incidents.py   (after make_incidents.py, whose README table
it extends: its rows for ``fabric-*`` bundles and the fabric paragraph are replaced in place).
The output is deterministic; re-running rewrites the bundles byte for byte.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_incidents import (  # noqa: E402  (examples/ is not a package)
    IPS,
    OUT,
    PUB,
    Bundle,
    host_facts,
    case_source,
    glog_agent,
    glog_time,
    iso,
    lines_of,
    slurm_job,
    t,
    torchrun_summary,
)

ROWS: list[tuple[str, str, str, str]] = []
NCCL_VERSION = "2.21.5"
RC04 = case_source("rc-04")
RC01 = case_source("rc-01")
MLX5_FORMAT = "fixtures/real/public/formats/mlx5-link-events.log"
SONIC_SRC = "SONiC sonic-swss orchagent/portsorch.cpp updatePortOperStatus"
CUMULUS_SRC = "Cumulus Linux 'Monitoring Best Practices' (switchd nic_set_carrier / libnl)"

PCI = "0000:0c:00.0"
NETDEV = "enp12s0f0np0"
IB_NETDEV = "ibp12s0"
LEAF1 = {f"node-a0{i}": f"Ethernet{8 * (i - 1)}" for i in range(1, 5)}  # SONiC: 8 lanes per 400G port
LEAF2 = {f"node-a0{i}": f"swp{i - 4}" for i in range(5, 9)}  # Cumulus
SWITCHD_PID = 5692
ORCHAGENT = "NOTICE swss#orchagent: :- updatePortOperStatus: Port {port} oper state set from {old} to {new}"
SEC = dt.timedelta(seconds=1)
MS = dt.timedelta(milliseconds=1)


# ----------------------------------------------------------------------------- helpers


def us(n: int) -> dt.timedelta:
    return dt.timedelta(microseconds=n)


def roce_topology() -> dict:
    """The RoCE pod: leaf-01 (SONiC) and leaf-02 (Cumulus) under spine-01."""
    links = []
    for host, port in list(LEAF1.items()) + list(LEAF2.items()):
        switch = "leaf-01" if host in LEAF1 else "leaf-02"
        links.append({"host": host, "hca": "mlx5_0", "host_port": 1, "switch": switch, "switch_port": port,
                      "netdev": NETDEV, "pci": PCI})
    return {
        "links": links,
        "hosts": {h: {"ips": [IPS[h]]} for h in sorted(list(LEAF1) + list(LEAF2))},
        "domains": {"rack-1": sorted(LEAF1), "rack-2": sorted(LEAF2)},
        "uplinks": [["leaf-01/Ethernet248", "spine-01/Ethernet0"], ["leaf-02/swp31", "spine-01/Ethernet8"]],
    }


def ib_topology(nodes: list[str]) -> dict:
    """The InfiniBand pod: nodes on leaf-01 ports 1..n (IB port numbers, as ibnetdiscover)."""
    return {
        "links": [{"host": h, "hca": "mlx5_0", "host_port": 1, "switch": "leaf-01", "switch_port": str(i),
                   "netdev": IB_NETDEV, "pci": PCI} for i, h in enumerate(nodes, start=1)],
        "hosts": {h: {"ips": [IPS[h]]} for h in nodes},
        "domains": {"rack-1": list(nodes)},
        "uplinks": [["leaf-01/37", "spine-01/1"]],
    }


def workload_data(cluster: str, job: str, state: str, start: dt.datetime, end: dt.datetime, nodes: list[str],
                  exit_code: str = "1:0", boot: dict[str, dt.datetime] | None = None) -> dict:
    """workload.yaml content, as ``Bundle.workload`` writes it (slurm, 8 ranks per node).

    Each fabric bundle is a cluster of its own (``cluster`` = the bundle's name): published
    together to one stream, their fabrics stay apart as two real clusters' would -- one
    cluster has one topology and one set of cables."""
    return {"workload_id": job, "scheduler": "slurm", "cluster": cluster, "state": state, "exit_code": exit_code,
            "start": iso(start), "end": iso(end), "nodes": nodes, "ranks_per_node": 8,
            "hosts": host_facts(nodes, boot)}


def raw_dmesg(boot: dt.datetime, at: dt.datetime, text: str) -> str:
    """A raw kernel line, ``[seconds.micros] text`` since ``boot`` (formats/mlx5-link-events.log)."""
    delta = at - boot
    secs = delta.days * 86400 + delta.seconds
    return f"[{secs:5d}.{delta.microseconds:06d}] {text}"


def link_line(state: str) -> str:
    return f"mlx5_core {PCI} {NETDEV}: Link {state}"


def sonic(at: dt.datetime, switch: str, port: str, old: str, new: str) -> str:
    return f"{at.strftime('%b %d %H:%M:%S')}.{at.microsecond:06d} {switch} " + ORCHAGENT.format(port=port, old=old, new=new)


def cumulus(at: dt.datetime, switch: str, port: str, state: str, ifi: int) -> list[str]:
    """switchd's two lines for one carrier transition (Cumulus docs, Monitoring Best Practices)."""
    stamp = f"{at.strftime('%Y-%m-%dT%H:%M:%S')}.{at.microsecond:06d}+00:00 {switch} switchd[{SWITCHD_PID}]: "
    later = at + us(412)
    stamp2 = f"{later.strftime('%Y-%m-%dT%H:%M:%S')}.{later.microsecond:06d}+00:00 {switch} switchd[{SWITCHD_PID}]: "
    return [stamp + f"nic.c:213 nic_set_carrier: {port}: setting kernel carrier: {state}",
            stamp2 + f"netlink.c:291 libnl: {port}, family 0, ifi {ifi}, oper {state}"]


def gid(host: str, roce: bool, link_local: bool = False) -> str:
    if link_local:  # GID index 0: the link-local GID from the port's MAC (b8:3f:d2:11:22:NN)
        return f"fe80::ba3f:d2ff:fe11:22{int(IPS[host].rsplit('.', 1)[1]):02d}"
    return f"::ffff:{IPS[host]}"


def ib_error12(host: str, peer: str, port: int, roce: bool = True, link_local: bool = False) -> str:
    """NCCL 2.21.5 net_ib.cc:1909 text of a transport-retry-exceeded completion."""
    text = (f"NET/IB : Got completion from peer {IPS[peer]}<{port}> with status=12 opcode=0 len=0 "
            f"vendor err 129 (Recv)")
    if roce:
        text += f" localGid {gid(host, roce, link_local)} remoteGids{gid(peer, roce, link_local)}"
    return text


def socket_reset(peer: str, port: int) -> str:
    """NCCL 2.21.5 misc/socket.cc:30 text (rc-04)."""
    return f"socketProgressOpt: Call to recv from {IPS[peer]}<{port}> failed : Connection reset by peer"


def nccl_warn(host: str, pid: int, tid: int, dev: int, where: str, text: str) -> list[str]:
    """A WARN as NCCL 2.21.5 debug.cc prints it: a newline, then the prefixed line."""
    return ["", f"{host}:{pid}:{tid} [{dev}] {where} NCCL WARN {text}"]


def watchdog_error(rank: int, at: dt.datetime, last_error: str) -> list[str]:
    """PyTorch's ProcessGroupNCCL watchdog after an NCCL async error (layout of real reports,
    PyTorch 2.6 glog time with nanoseconds and the ``[PG ID 0 PG GUID 0(default_pg) Rank n]``
    prefix), ending in NCCL's last error."""
    s1, s2, s3 = (glog_time(at + us(k), 9) for k in (0, 14, 601))
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    return [
        f"[rank{rank}]:[E{s1} ProcessGroupNCCL.cpp:1681] [Rank {rank}] Some NCCL operations have failed or timed out. "
        "Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        f"[rank{rank}]:[E{s2} ProcessGroupNCCL.cpp:1687] [Rank {rank}] To avoid data inconsistency, we are taking the "
        "entire process down.",
        f"[rank{rank}]:[E{s3} ProcessGroupNCCL.cpp:1595] {pg} Process group watchdog thread terminated with exception: "
        f"NCCL error: remote process exited or there was a network error, NCCL version {NCCL_VERSION}",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "Last error:",
        last_error,
        "Exception raised from checkForNCCLErrorsInternal at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2027 "
        "(most recent call first):",
    ]


def rc04_lines(peer: str, port: int) -> list[str]:
    """rc-04 (NCCL 2.21.5) verbatim, the anonymiser's 10.0.0.x filled with the peer's address."""
    src = lines_of(PUB / "rc-04" / "lines.log")
    assert src[-1] == "socketProgressOpt: Call to recv from 10.0.0.x<33759> failed : Connection reset by peer", src[-1]
    return [line.replace("10.0.0.x<33759>", f"{IPS[peer]}<{port}>") for line in src]


def pid_of(host: str, job: int, local: int) -> int:
    """A deterministic pid per (host, job, local rank)."""
    n = int(host[-2:])
    return 40000 + (job * 37 + n * 1009) % 20000 + local


class Node:
    """One host's torchrun output for one job: failing ranks' NCCL/PyTorch lines, then the agent."""

    def __init__(self, host: str, job: int, index: int):
        self.host, self.job, self.index = host, job, index
        self.lines: list[tuple[dt.datetime, int, list[str]]] = []
        self.failed: dict[int, dt.datetime] = {}  # local rank -> SIGABRT time

    def rank(self, local: int) -> int:
        return self.index * 8 + local

    def tid(self, local: int) -> int:
        return pid_of(self.host, self.job, local) + 179 + 11 * local

    def error12(self, local: int, at: dt.datetime, peer: str, port: int, *, roce: bool = True,
                link_local: bool = False) -> None:
        text = ib_error12(self.host, peer, port, roce, link_local)
        pid = pid_of(self.host, self.job, local)
        block = nccl_warn(self.host, pid, self.tid(local), local, "transport/net_ib.cc:1909", text)
        seen = at + dt.timedelta(milliseconds=388 + 41 * local)
        block += watchdog_error(self.rank(local), seen, text)
        self.lines.append((at, local, block))
        self.failed[local] = seen + dt.timedelta(milliseconds=163)

    def reset(self, local: int, at: dt.datetime, peer: str, port: int, *, rc04: bool = False) -> None:
        text = socket_reset(peer, port)
        pid = pid_of(self.host, self.job, local)
        block = nccl_warn(self.host, pid, self.tid(local) + 3, local, "misc/socket.cc:30", text)
        seen = at + dt.timedelta(milliseconds=211 + 37 * local)
        # the main thread's blocking all_reduce raises first on this rank (rc-04's form)
        block += rc04_lines(peer, port) if rc04 else watchdog_error(self.rank(local), seen, text)
        self.lines.append((at, local, block))
        self.failed[local] = seen + dt.timedelta(milliseconds=171)

    def render(self, script: str = "/path/to/pretrain.py") -> list[str]:
        out: list[str] = []
        for _, _, block in sorted(self.lines, key=lambda x: (x[0], x[1])):
            out += block
        first_local = min(self.failed, key=lambda k: (self.failed[k], k))
        died = self.failed[first_local] + dt.timedelta(milliseconds=620)
        agent = pid_of(self.host, self.job, 0) - 21
        term = [k for k in range(8) if k not in self.failed]
        out += [glog_agent("W", died, agent, f"Sending process {pid_of(self.host, self.job, k)} closing signal SIGTERM",
                           where="api.py:1012") for k in term]
        fail = died + dt.timedelta(milliseconds=830)
        root = (self.rank(first_local), first_local, -6, pid_of(self.host, self.job, first_local))
        out.append(glog_agent("E", fail, agent, f"failed (exitcode: -6) local_rank: {first_local} "
                              f"(pid: {root[3]}) of binary: /path/to/venv/bin/python3"))
        others = [(self.rank(k), k, -6 if k in self.failed else -15, pid_of(self.host, self.job, k))
                  for k in range(8) if k != first_local]
        out += torchrun_summary(script, fail, self.host, root, others)
        return out

    @property
    def ended(self) -> dt.datetime:
        return max(self.failed.values()) + dt.timedelta(seconds=2)


def expected(b: Bundle, what: str, source: str, **fields) -> None:
    data = {k: v for k, v in fields.items() if v is not None}
    b.yaml("expected.yaml", data)
    verdict = []
    if "domain" in data:
        verdict.append(data["domain"])
    if "root_cause" in data:
        verdict.append(f"`{data['root_cause']}`")
    if "culprit_hosts" in data:
        verdict.append("hosts " + ", ".join(data["culprit_hosts"]))
    if "culprit_ports" in data:
        verdict.append("ports " + ", ".join(data["culprit_ports"]))
    if "quality_any_of" in data:
        verdict.append("quality " + "/".join(data["quality_any_of"]))
    if "incidents" in data:
        inc = data.get("incident")
        if inc:
            verdict.append(f"{data['incidents']} {inc['level']}-level incident ("
                           + ", ".join(inc["culprit_hosts"]) + ") of " + ", ".join(inc["workloads"]))
        else:
            verdict.append(f"{data['incidents']} incidents")
    ROWS.append((b.name, what, "; ".join(verdict), source))


# ----------------------------------------------------------------------------- 1 + 2: a flapping port


def flapping_port(name: str, job: int, day: int, switch_logs: bool) -> None:
    """node-a03's cable to leaf-01 Ethernet16 flaps twice; its peers lose their QPs to it."""
    b = Bundle(name)
    nodes = ["node-a01", "node-a02", "node-a03", "node-a04"]
    base = dt.datetime(2026, 11, day, tzinfo=dt.timezone.utc)
    start = base + dt.timedelta(hours=0, minutes=14, seconds=2)
    boot = base - dt.timedelta(days=6, hours=17, minutes=18, seconds=48)  # node-a03 up since the 23rd/24th
    down1 = base + dt.timedelta(hours=3, minutes=1, seconds=10, microseconds=482117)
    up1 = down1 + dt.timedelta(seconds=5, microseconds=608950)
    down2 = down1 + dt.timedelta(seconds=90, microseconds=854322)
    up2 = down2 + dt.timedelta(seconds=46, microseconds=566001)
    dm = [raw_dmesg(boot, down1, link_line("down")), raw_dmesg(boot, up1, link_line("up")),
          raw_dmesg(boot, down2, link_line("down")), raw_dmesg(boot, up2, link_line("up"))]
    b.write("logs/node-a03/dmesg.log", dm)
    # QPs through the dead link exhaust their retries (NCCL_IB_TIMEOUT 20 x retry count 7) ~31 s
    # into the second outage: both directions of every connection to node-a03 fail
    err = down2 + dt.timedelta(seconds=31, microseconds=204551)
    ns = {h: Node(h, job, i) for i, h in enumerate(nodes)}
    ns["node-a02"].error12(0, err, "node-a03", 38560)
    ns["node-a02"].error12(4, err + dt.timedelta(milliseconds=3), "node-a03", 38566)
    ns["node-a04"].error12(0, err + dt.timedelta(milliseconds=17), "node-a03", 51202)
    ns["node-a04"].error12(4, err + dt.timedelta(milliseconds=19), "node-a03", 51208)
    ns["node-a03"].error12(0, err + dt.timedelta(milliseconds=9), "node-a04", 44871)
    ns["node-a03"].error12(4, err + dt.timedelta(milliseconds=12), "node-a02", 39020)
    # node-a01 has no QP to node-a03 in its rings; it loses its socket to node-a03's proxy when
    # node-a03's ranks abort
    gone = ns["node-a03"].failed[0] + dt.timedelta(milliseconds=58)
    ns["node-a01"].reset(0, gone, "node-a03", 33759, rc04=True)
    ns["node-a01"].reset(4, gone + dt.timedelta(milliseconds=2), "node-a03", 33765)
    for h, n in ns.items():
        b.write(f"logs/{h}/train.log", n.render())
    end = max(n.ended for n in ns.values()).replace(microsecond=0) + 4 * SEC
    b.yaml("workload.yaml", workload_data(b.name, f"job-{job}", "FAILED", start, end, nodes, boot={"node-a03": boot}))
    b.write("logs/_scheduler/slurmctld.log", slurm_job(job, "node-a[01-04]", 448, start, end))
    b.yaml("topology.yaml", roce_topology())
    port = f"leaf-01/{LEAF1['node-a03']}"
    if switch_logs:
        skew = dt.timedelta(milliseconds=27)  # the switch's NTP clock vs node-a03's
        b.write("fabric/leaf-01/syslog", [
            sonic(down1 + skew, "leaf-01", LEAF1["node-a03"], "up", "down"),
            sonic(up1 + skew + dt.timedelta(milliseconds=211), "leaf-01", LEAF1["node-a03"], "down", "up"),
            sonic(down2 + skew, "leaf-01", LEAF1["node-a03"], "up", "down"),
            sonic(up2 + skew + dt.timedelta(milliseconds=187), "leaf-01", LEAF1["node-a03"], "down", "up"),
        ])
    sides = "node-a03's kernel and leaf-01's SONiC orchagent" if switch_logs else "node-a03's kernel only (no switch log was collected)"
    expected(
        b,
        ("node-a03's cable to leaf-01 flaps twice in 2.5 min after 3 h of training (" +
         ("host + switch log" if switch_logs else "host side only, no fabric/") +
         "); peers log NCCL error 12 naming 10.0.0.13, resets"),
        f"issue 4; {RC04} (NCCL 2.21.5 lines); {MLX5_FORMAT}" + (f"; {SONIC_SRC}" if switch_logs else ""),
        domain="fabric",
        root_cause="fabric.port.flapping",
        culprit_hosts=["node-a03"],
        culprit_ports=[port],
        quality_any_of=["definitive", "probable"],
        incidents=1,
        incident={"level": "port", "root_cause": "fabric.port.flapping", "workloads": [f"job-{job}"],
                  "culprit_ports": [port, "node-a03/mlx5_0/1"], "culprit_hosts": ["node-a03"]},
        notes=(
            f"RoCE pod (topology.yaml: node-a03 mlx5_0 port 1 = {NETDEV} at {PCI}, cabled to {port}). "
            f"job-{job} (4 x 8 ranks) trains from {iso(start)}; at {iso(down1)} node-a03's link goes down for "
            f"5.6 s, and {iso(down2)} again for 46.6 s: two link-down transitions in 91 s, seen by {sides} "
            "(mlx5 'Link down'/'Link up' as in formats/mlx5-link-events.log, raw dmesg with boot_time). "
            "31 s into the second outage the RC queue pairs through the dead link exhaust their retries: "
            "node-a02 and node-a04 (ranks 8, 12, 24, 28) log NCCL 2.21.5 'NET/IB : Got completion from peer "
            "10.0.0.13<port> with status=12 ... vendor err 129 (Recv) localGid ... remoteGids::ffff:10.0.0.13' "
            "(transport retry counter exceeded, naming node-a03), node-a03 itself logs the same error for "
            "its own sends to node-a02/node-a04, and node-a01, which has no QP to node-a03, gets "
            "'socketProgressOpt: Call to recv from 10.0.0.13<33759> failed : Connection reset by peer' "
            "(rc-04's lines, ncclRemoteError) when node-a03's ranks abort. Every rank's watchdog takes the "
            "process down (SIGABRT); torchrun summaries name the first aborted rank of each node, a "
            "symptom. Hours of healthy training, then error 12 concentrated on node-a03's peers right "
            "after node-a03's port flapped: a flapping cable/port, not the RoCE GID-index config (which "
            "fails on the first connection). One incident: the port, both ends named, this job linked."
        ),
    )


# ----------------------------------------------------------------------------- 3: degrading cable


def degrading_cable(name: str = "fabric-degrading-cable-symbol-errors", ramp_at: str = "2026-11-30T08:52:00Z",
                    doubling_min: float = 5.2) -> None:
    """InfiniBand: node-a02's HCA port sees rising symbol errors and link error recoveries for
    50 minutes, the link never drops; then the peers' QPs to node-a02 exhaust their retries.
    (``ramp_at`` / ``doubling_min`` shape the episode: the first symbol error, and how fast the
    error rate doubles.)"""
    b = Bundle(name)
    job = 2301
    nodes = ["node-a01", "node-a02", "node-a03", "node-a04"]
    start = t("2026-11-30T06:05:03Z")
    ramp = t(ramp_at)  # the first symbol error of this episode
    err = t("2026-11-30T09:41:37.118406Z")
    ns = {h: Node(h, job, i) for i, h in enumerate(nodes)}
    ns["node-a01"].error12(2, err, "node-a02", 51732, roce=False)
    ns["node-a03"].error12(2, err + dt.timedelta(milliseconds=6), "node-a02", 47019, roce=False)
    ns["node-a03"].error12(6, err + dt.timedelta(milliseconds=9), "node-a02", 47025, roce=False)
    ns["node-a02"].error12(2, err + dt.timedelta(milliseconds=14), "node-a01", 40417, roce=False)
    gone = ns["node-a02"].failed[2] + dt.timedelta(milliseconds=49)
    ns["node-a04"].reset(2, gone, "node-a02", 33718, rc04=True)
    ns["node-a04"].reset(6, gone + dt.timedelta(milliseconds=3), "node-a02", 33724)
    for h, n in ns.items():
        b.write(f"logs/{h}/train.log", n.render())
    end = max(n.ended for n in ns.values()).replace(microsecond=0) + 4 * SEC
    b.yaml("workload.yaml", workload_data(b.name, f"job-{job}", "FAILED", start, end, nodes))
    b.write("logs/_scheduler/slurmctld.log", slurm_job(job, "node-a[01-04]", 448, start, end))
    b.yaml("topology.yaml", ib_topology(nodes))
    # host-side sysfs counters of every node's mlx5_0/1, sampled every 10 s from job start
    cols = ["symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
            "port_rcv_remote_physical_errors", "port_xmit_discards", "port_xmit_wait",
            "port_xmit_data", "port_rcv_data"]
    first = start.replace(second=0) + 10 * SEC
    samples = int((end - first).total_seconds() // 10) + 2
    for n_i, host in enumerate(nodes):
        # values accumulated since the last reboot / counter clear (small historical counts)
        state = {"symbol_error": 3 + n_i, "link_error_recovery": 1, "link_downed": 1 + (n_i % 2),
                 "port_rcv_errors": 0, "port_rcv_remote_physical_errors": 0, "port_xmit_discards": 2 * n_i,
                 "port_xmit_wait": 18_200_331 + n_i * 1_402_117, "port_xmit_data": 91_337_200_112 * (n_i + 3),
                 "port_rcv_data": 90_120_400_551 * (n_i + 3)}
        rows = ["time,node,port," + ",".join(cols)]
        for k in range(samples):
            at = first + k * 10 * SEC
            if at <= end:  # after the job, traffic stops and the counters stay
                traffic = 4_100_000_000 + ((k * 7919 + n_i * 104729) % 900_000_000)
                state["port_xmit_data"] += traffic
                state["port_rcv_data"] += traffic - 3_000_000 + n_i * 1_000
                state["port_xmit_wait"] += 21_000 + (k * 131 + n_i * 17) % 9_000
            if host == "node-a02" and at >= ramp:
                m = (at - ramp).total_seconds() / 60.0  # minutes into the episode
                # bit errors grow roughly exponentially: ~1 per sample at first, ~900 at the end
                sym = int(round(1.2 * 2 ** (m / doubling_min))) if at <= end else 0
                sym = sym if k % 3 or m > 10 else max(sym - 1, 0)
                state["symbol_error"] = min(state["symbol_error"] + sym, 65535)
                state["port_rcv_errors"] = min(state["port_rcv_errors"] + sym // 9, 65535)
                left = (end - at).total_seconds() / 60.0  # minutes before the job's end
                if left <= 22 and at <= end and k % max(1, int(6 + left / 2)) == 0:
                    state["link_error_recovery"] = min(state["link_error_recovery"] + 1, 255)
            rows.append(f"{iso(at)},{host},mlx5_0/1," + ",".join(str(state[c]) for c in cols))
        b.write(f"metrics/{host}/ib-port.counters.csv", rows)
    port = "leaf-01/2"
    expected(
        b,
        "InfiniBand: node-a02's port counts rising symbol errors / link error recoveries for 50 min "
        "(10 s sysfs samples), no link down; then peers log NCCL error 12 naming 10.0.0.12",
        f"issue 4; {RC04} (NCCL 2.21.5 lines); rc-27 {case_source('rc-27')} (symbol errors = bad cable)",
        domain="fabric",
        root_cause="fabric.port.degrading",
        culprit_hosts=["node-a02"],
        culprit_ports=[port],
        quality_any_of=["definitive", "probable"],
        incidents=1,
        incident={"level": "port", "root_cause": "fabric.port.degrading", "workloads": [f"job-{job}"],
                  "culprit_ports": [port, "node-a02/mlx5_0/1"], "culprit_hosts": ["node-a02"]},
        notes=(
            "InfiniBand pod (topology.yaml: node-a02 mlx5_0 port 1 on leaf-01 port 2; IPoIB 10.0.0.1N). "
            f"job-{job} trains from {iso(start)}. metrics/<host>/ib-port.counters.csv is the sysfs port "
            "counters of each host's mlx5_0/1 every 10 s (cumulative raw values, header "
            "time,node,port,<counter>). From 08:52Z node-a02's symbol_error grows from ~1 per sample to "
            "hundreds per sample (port_rcv_errors follows), and from ~09:20Z link_error_recovery steps up "
            "(link retrains), while link_downed never moves: a cable/transceiver whose bit error rate "
            "keeps rising (rc-27: SymbolErrorCounter growth means a bad cable), far over ibcheckerrs' "
            "10-per-window threshold. The other three hosts count nothing. At 09:41:37Z the queue pairs "
            "to node-a02 exhaust their retries: node-a01 and node-a03 log NCCL 2.21.5 'NET/IB : Got "
            "completion from peer 10.0.0.12<port> with status=12 ... (Recv)' (no GIDs on an IB link "
            "layer), node-a02 the same for its own send, node-a04 the socket reset when node-a02's "
            "ranks abort (rc-04 lines). No link down anywhere, so this is a degrading port, not a "
            "flapping one; the port is leaf-01/2, the host at its end node-a02."
        ),
    )


# ----------------------------------------------------------------------------- 4: two jobs, one port


def two_jobs_one_port() -> None:
    """node-a05's cable to leaf-02 swp1 flaps during job-2401, nobody acts, job-2417 is scheduled
    on the same nodes 50 minutes later and dies the same way."""
    b = Bundle("fabric-port-flap-two-jobs")
    nodes = ["node-a05", "node-a06", "node-a07", "node-a08"]
    boot = t("2026-11-22T09:12:41.205330Z")
    a_start = t("2026-11-30T00:21:09Z")
    flaps = []
    files: dict[str, list[str]] = {}
    switch: list[str] = []
    jobs = []
    dm: list[str] = []
    for job, start, down1 in ((2401, a_start, t("2026-11-30T02:41:07.503118Z")),
                              (2417, t("2026-11-30T03:36:44Z"), t("2026-11-30T05:02:51.880245Z"))):
        up1 = down1 + dt.timedelta(seconds=3, microseconds=911023)
        down2 = down1 + dt.timedelta(seconds=141, microseconds=207770)
        up2 = down2 + dt.timedelta(seconds=38, microseconds=400100)
        flaps.append((down1, down2))
        for at, state in ((down1, "down"), (up1, "up"), (down2, "down"), (up2, "up")):
            dm.append(raw_dmesg(boot, at, link_line(state)))
            switch += cumulus(at + dt.timedelta(milliseconds=19), "leaf-02", LEAF2["node-a05"], state, 7)
        err = down2 + dt.timedelta(seconds=31, microseconds=88410)
        ns = {h: Node(h, job, i) for i, h in enumerate(nodes)}
        ns["node-a06"].error12(1, err, "node-a05", 40211)
        ns["node-a06"].error12(5, err + dt.timedelta(milliseconds=4), "node-a05", 40217)
        ns["node-a08"].error12(1, err + dt.timedelta(milliseconds=11), "node-a05", 52093)
        ns["node-a05"].error12(1, err + dt.timedelta(milliseconds=8), "node-a06", 37720)
        gone = ns["node-a05"].failed[1] + dt.timedelta(milliseconds=61)
        ns["node-a07"].reset(1, gone, "node-a05", 33759, rc04=True)
        ns["node-a07"].reset(5, gone + dt.timedelta(milliseconds=2), "node-a05", 33765)
        for h, n in ns.items():
            files[f"logs/{h}/train-{job}.log"] = n.render()
        end = max(n.ended for n in ns.values()).replace(microsecond=0) + 4 * SEC
        jobs.append((job, start, end))
    (ja, sa, ea), (jb, sb, eb) = jobs
    assert (sb - ea) >= dt.timedelta(minutes=30), "job-b must start 30+ minutes after job-a ended"
    for rel, lines in files.items():
        b.write(rel, lines)
    b.write("logs/node-a05/dmesg.log", dm)
    b.write("fabric/leaf-02/syslog", switch)
    b.yaml("workload.yaml", workload_data(b.name, f"job-{ja}", "FAILED", sa, ea, nodes, boot={"node-a05": boot}))
    b.yaml(f"workloads/job-{jb}.yaml", workload_data(b.name, f"job-{jb}", "FAILED", sb, eb, nodes, boot={"node-a05": boot}))
    b.write("logs/_scheduler/slurmctld.log",
            slurm_job(ja, "node-a[05-08]", 448, sa, ea) + slurm_job(jb, "node-a[05-08]", 448, sb, eb))
    b.yaml("topology.yaml", roce_topology())
    port = f"leaf-02/{LEAF2['node-a05']}"
    expected(
        b,
        "node-a05's cable to leaf-02 swp1 flaps during job-2401 (02:41) and again during job-2417 "
        "(05:02), the same 4 nodes rescheduled 55 min after job-2401 failed; host + Cumulus switch log",
        f"issue 4; {RC04} (NCCL 2.21.5 lines); {MLX5_FORMAT}; {CUMULUS_SRC}",
        domain="fabric",
        root_cause="fabric.port.flapping",
        culprit_hosts=["node-a05"],
        culprit_ports=[port],
        quality_any_of=["definitive", "probable"],
        incidents=1,
        incident={"level": "port", "root_cause": "fabric.port.flapping", "workloads": [f"job-{ja}", f"job-{jb}"],
                  "culprit_ports": [port, "node-a05/mlx5_0/1"], "culprit_hosts": ["node-a05"]},
        notes=(
            f"RoCE pod, node-a05 mlx5_0 ({NETDEV}) cabled to {port} (Cumulus). job-{ja} (node-a[05-08]) "
            f"trains from {iso(sa)}; at {iso(flaps[0][0])} node-a05's link drops for 3.9 s and 141 s later "
            "for 38 s (mlx5 Link down/up in node-a05's raw dmesg; leaf-02 switchd logs the same carrier "
            "transitions twice each: nic_set_carrier and libnl). 31 s into the second outage node-a06 and "
            "node-a08 log NCCL 2.21.5 status=12 naming 10.0.0.15, node-a05 the same for its own sends, "
            f"node-a07 the socket reset from 10.0.0.15 (rc-04); job-{ja} FAILED at {iso(ea)}. Nobody "
            f"drained node-a05 or replaced the cable: job-{jb} (workloads/job-{jb}.yaml, resubmitted from "
            f"its checkpoint) is scheduled on the same four nodes at {iso(sb)}, {int((sb - ea).total_seconds() // 60)} "
            f"min later, and at {iso(flaps[1][0])} the same port flaps twice again with the same symptoms. "
            "Both jobs' errors come from one bad port 2.4 h apart (the fabric correlator's 6 h episode "
            "gap): one incident naming the port and both workloads, not two unrelated failures."
        ),
    )


# ----------------------------------------------------------------------------- 5: leaf switch down


def leaf_switch_down() -> None:
    """leaf-02 reboots (watchdog reset): its four hosts lose their links within a second; the
    two jobs that use them lose every QP through leaf-02."""
    b = Bundle("fabric-leaf-switch-down-two-jobs")
    job_a, job_b = 2501, 2502
    nodes_a = ["node-a01", "node-a02", "node-a05", "node-a06"]
    nodes_b = ["node-a03", "node-a04", "node-a07", "node-a08"]
    start_a, start_b = t("2026-11-30T01:40:12Z"), t("2026-11-30T02:58:31Z")
    boots = {h: t("2026-11-26T14:03:11Z") + dt.timedelta(minutes=7 * i, seconds=13 * i, microseconds=97_331 * i)
             for i, h in enumerate(sorted(LEAF2))}
    fall = t("2026-11-30T05:12:07.220418Z")
    downs = {h: fall + dt.timedelta(milliseconds=[0, 212, 531, 377][i], microseconds=113 * i)
             for i, h in enumerate(sorted(LEAF2))}
    back = t("2026-11-30T05:15:48.640121Z")  # the switch has rebooted, the ports train again
    ups = {h: back + dt.timedelta(milliseconds=[0, 1450, 930, 2210][i]) for i, h in enumerate(sorted(LEAF2))}
    for h in sorted(LEAF2):
        b.write(f"logs/{h}/dmesg.log", [raw_dmesg(boots[h], downs[h], link_line("down")),
                                        raw_dmesg(boots[h], ups[h], link_line("up"))])
    err = fall + dt.timedelta(seconds=31, microseconds=402_119)
    # job-2501: node-a01/a02 (leaf-01) and node-a05/a06 (leaf-02); every inter-leaf QP and the
    # QPs between node-a05 and node-a06 go through leaf-02
    na = {h: Node(h, job_a, i) for i, h in enumerate(nodes_a)}
    na["node-a01"].error12(0, err, "node-a05", 41120)
    na["node-a02"].error12(0, err + dt.timedelta(milliseconds=5), "node-a06", 41188)
    na["node-a05"].error12(0, err + dt.timedelta(milliseconds=2), "node-a06", 39904)
    na["node-a06"].error12(0, err + dt.timedelta(milliseconds=7), "node-a01", 50311)
    na["node-a02"].error12(4, err + dt.timedelta(milliseconds=9), "node-a05", 41194)
    nb = {h: Node(h, job_b, i) for i, h in enumerate(nodes_b)}
    e2 = err + dt.timedelta(milliseconds=1_310)  # job-2502's last completions were a little later
    nb["node-a03"].error12(3, e2, "node-a07", 36017)
    nb["node-a04"].error12(3, e2 + dt.timedelta(milliseconds=3), "node-a08", 36090)
    nb["node-a07"].error12(3, e2 + dt.timedelta(milliseconds=6), "node-a04", 48822)
    nb["node-a08"].error12(3, e2 + dt.timedelta(milliseconds=4), "node-a03", 48870)
    nb["node-a07"].error12(7, e2 + dt.timedelta(milliseconds=11), "node-a08", 48828)
    for job, ns in ((job_a, na), (job_b, nb)):
        for h, n in ns.items():
            b.write(f"logs/{h}/train-{job}.log", n.render())
    end_a = max(n.ended for n in na.values()).replace(microsecond=0) + 4 * SEC
    end_b = max(n.ended for n in nb.values()).replace(microsecond=0) + 4 * SEC
    b.yaml("workload.yaml", workload_data(b.name, f"job-{job_a}", "FAILED", start_a, end_a, nodes_a,
                                          boot={h: boots[h] for h in nodes_a if h in boots}))
    b.yaml(f"workloads/job-{job_b}.yaml", workload_data(b.name, f"job-{job_b}", "FAILED", start_b, end_b, nodes_b,
                                                        boot={h: boots[h] for h in nodes_b if h in boots}))
    b.write("logs/_scheduler/slurmctld.log", sorted(
        slurm_job(job_a, "node-a[01-02,05-06]", 448, start_a, end_a)
        + slurm_job(job_b, "node-a[03-04,07-08]", 448, start_b, end_b)))
    b.yaml("topology.yaml", roce_topology())
    ports = sorted(f"leaf-02/{p}" for p in LEAF2.values())
    expected(
        b,
        "leaf-02 reboots at 05:12:07: its 4 hosts log mlx5 Link down within 0.6 s (up 3.6 min later); "
        "job-2501 and job-2502 (each half on leaf-02) fail with NCCL error 12; hosts stay up",
        f"issue 4; {RC04} (NCCL 2.21.5 lines); {MLX5_FORMAT}",
        domain="fabric",
        root_cause="fabric.switch.down",
        culprit_ports=ports,
        quality_any_of=["definitive", "probable"],
        incidents=1,
        incident={"level": "switch", "root_cause": "fabric.switch.down",
                  "workloads": [f"job-{job_a}", f"job-{job_b}"], "culprit_ports": list(ports),
                  "culprit_hosts": ["leaf-02"]},
        notes=(
            "RoCE pod: node-a05..a08 are cabled to leaf-02 swp1..swp4 (Cumulus), node-a01..a04 to leaf-01. "
            f"job-{job_a} runs on node-a01/a02/a05/a06 from {iso(start_a)}, job-{job_b} "
            f"(workloads/job-{job_b}.yaml) on node-a03/a04/a07/a08 from {iso(start_b)}. At 05:12:07.2Z "
            "leaf-02 resets: all four hosts cabled to it log mlx5 'Link down' within 0.6 s (raw dmesg, "
            "boot_time per host) and 'Link up' when it is back 3.6 min later; leaf-02 itself logged "
            "nothing (it was rebooting) and slurmctld marks no node down (the management network does "
            "not go through leaf-02: the hosts stay up). ~31 s later every QP through leaf-02 exhausts "
            "its retries: ranks of both jobs on both leaves log NCCL 2.21.5 status=12 naming their peers "
            "(the leaf-02 hosts name leaf-01 hosts and each other too), and abort. Four of leaf-02's "
            "four host ports failing together is the switch, not four cables: one switch-level incident "
            "fabric.switch.down with culprit leaf-02, its four ports, and both workloads. culprit_hosts "
            "is given for the incident only: the switch is not one of the workload's nodes."
        ),
    )


# ----------------------------------------------------------------------------- 6: RoCE GID index


def gid_index_config() -> None:
    """NCCL_IB_GID_INDEX=0 (the link-local RoCE v1 GID): the first all_reduce of every rank
    fails with error 12; ports and cables are healthy."""
    b = Bundle("fabric-roce-gid-index-config")
    job = 2601
    nodes = ["node-a01", "node-a02", "node-a03", "node-a04"]
    start = t("2026-11-30T05:40:00Z")
    src = lines_of(PUB / "rc-01" / "lines.log")
    devinfo = src[1:]
    assert devinfo[0] == "hca_id:\tmlx5_bond_0" and "PORT_ACTIVE (4)" in devinfo[4], devinfo
    first = start + dt.timedelta(seconds=41, microseconds=730_114)  # NCCL init done, first all_reduce
    err = first + dt.timedelta(seconds=30, microseconds=918_207)  # 7 retries of ~4.3 s each
    ns = {h: Node(h, job, i) for i, h in enumerate(nodes)}
    ring = {h: nodes[(i + 1) % 4] for i, h in enumerate(nodes)}
    for i, h in enumerate(nodes):
        ns[h].error12(0, err + dt.timedelta(milliseconds=3 * i), ring[h], 43117 + 6 * i, link_local=True)
        ns[h].error12(4, err + dt.timedelta(milliseconds=3 * i + 1), nodes[(i + 3) % 4], 43120 + 6 * i,
                      link_local=True)
    for i, h in enumerate(nodes):
        pid = pid_of(h, job, 0)
        head = [f"{h}:{pid}:{pid} [0] NCCL INFO NET/IB : Using [0]mlx5_bond_0:1/RoCE ; OOB bond0:{IPS[h]}<0>"]
        b.write(f"logs/{h}/train.log", head + ns[h].render())
        b.write(f"logs/{h}/ibv_devinfo.txt", devinfo)
    end = max(n.ended for n in ns.values()).replace(microsecond=0) + 4 * SEC
    b.yaml("workload.yaml", workload_data(b.name, f"job-{job}", "FAILED", start, end, nodes))
    b.write("logs/_scheduler/slurmctld.log", slurm_job(job, "node-a[01-04]", 448, start, end))
    topo = roce_topology()
    for link in topo["links"]:
        link.update(hca="mlx5_bond_0", netdev="bond0")
    b.yaml("topology.yaml", topo)
    expected(
        b,
        "NCCL_IB_GID_INDEX=0: every rank's first all_reduce fails with error 12 (link-local GIDs) "
        "72 s after start; ibv_devinfo PORT_ACTIVE, no link event, topology present",
        f"issue 4; {RC01} (RC-01 verdict and ibv_devinfo block)",
        domain="config",
        root_cause="config.roce_gid_index",
        culprit_hosts=nodes,
        quality_any_of=["definitive", "probable"],
        incidents=0,
        notes=(
            f"Public RC-01 ({RC01}): on RoCE, NET/IB completion error 12 / vendor err 129 (transport retry "
            "counter exceeded) on the first connection of every host, fixed by setting NCCL_IB_GID_INDEX; "
            "ports ACTIVE (the rc-01 ibv_devinfo block verbatim on every host). Here job-2601 runs with "
            "NCCL_IB_GID_INDEX=0, the port's link-local GID (fe80::..., not routable in the RoCE v2 "
            "fabric): NCCL 2.21.5 initialises over sockets, then the first all_reduce's RDMA traffic "
            "never gets an ACK and ~31 s later (7 retries) every rank with an inter-node QP logs "
            "'status=12 ... vendor err 129 (Recv) localGid fe80::... remoteGidsfe80::...' naming its ring "
            "neighbours - every host names and is named, no host stands out. There is no link-down, "
            "module or async port event, no counter, and the topology (all four hosts on leaf-01) gives "
            "the fabric correlator nothing to find: no port fault, no incident. Verdict: config "
            "(RoCE GID selection), job-wide (all nodes), as RC-01's."
        ),
    )


# ----------------------------------------------------------------------------- README


README_PARAGRAPH = [
    "Fabric bundles (`fabric-*`, issue 4) are generated by `examples/make_fabric_incidents.py` (run it",
    "after `make_incidents.py`: it adds its rows to this table). They describe a RoCE pod (leaf-01 on",
    "SONiC, leaf-02 on Cumulus, spine-01) and one InfiniBand pod in `topology.yaml`, with NCCL 2.21.5",
    "WARN lines exactly as the v2.21.5 `net_ib.cc` / `socket.cc` print them (no time stamp: they take",
    "the time of the next PyTorch watchdog line), rc-04's ncclRemoteError lines, mlx5 `Link down`/`Link",
    "up` as raw dmesg (with `boot_time`), switch logs under `fabric/<switch>/` (SONiC orchagent, Cumulus",
    "switchd), sysfs port counters as `*.counters.csv` (10 s samples), and extra workloads under",
    "`workloads/`. Their `expected.yaml` also checks the incident: `incidents` (how many incident",
    "verdicts) and `incident` (level, root cause, linked workloads, both ends of the cable).",
]
PARAGRAPH_MARK = "Fabric bundles (`fabric-*`"


def update_readme() -> None:
    """Put the fabric rows into the README's table (sorted with the others) and the fabric
    paragraph after it, replacing what an earlier run put there."""
    path = OUT / "README.md"
    lines = path.read_text().splitlines()
    # drop earlier fabric rows and paragraph
    kept, skip = [], False
    for line in lines:
        if line.startswith("| `fabric-"):
            continue
        if line.startswith(PARAGRAPH_MARK):
            skip = True
        if skip:
            if line.strip() == "":
                skip = False
            continue
        kept.append(line)
    rows_at = [i for i, l in enumerate(kept) if l.startswith("| `")]
    if not rows_at:
        raise SystemExit("README.md has no bundle table; run make_incidents.py first")
    first, last = rows_at[0], rows_at[-1]
    rows = kept[first : last + 1] + [f"| `{n}` | {w} | {v} | {s} |" for n, w, v, s in ROWS]
    rows.sort(key=lambda r: r.split("|")[1])
    out = kept[:first] + rows + [""] + README_PARAGRAPH + kept[last + 1 :]
    path.write_text("\n".join(out) + "\n")


def main() -> None:
    for stale in sorted(OUT.glob("fabric-*")):
        if stale.is_dir():
            shutil.rmtree(stale)
    flapping_port("fabric-port-flap-host-and-switch", 2101, 30, switch_logs=True)
    flapping_port("fabric-port-flap-host-side-only", 2201, 29, switch_logs=False)
    degrading_cable()
    two_jobs_one_port()
    leaf_switch_down()
    gid_index_config()
    update_readme()


if __name__ == "__main__":
    main()
