"""Build the straggler bundles (issue 35) under ``examples/incidents/straggler-*``: a job that
does not fail but runs slow because one GPU, link or node is slow, with the reason in the
telemetry, kernel or port counters of that GPU's node -- and the counter-cases where every rank
slows together or one rank is slow only while it loads data.

Every bundle is a Megatron-DeepSpeed job of 4 nodes x 8 GPUs (32 ranks, one per GPU; rank =
8 x node + GPU index) running 90 steps of about 2 s. Each rank prints its own DeepSpeed timer
line every step (``[Rank N] time (ms) | fwd: ... | bwd: ...``, ``wall_clock_breakdown`` with
``ranks=-1``: the forward time is the rank's own compute) and the last rank prints Megatron's
iteration line (the job's step time). Telemetry is ``nvidia-smi --query-gpu`` CSV every 30 s
per GPU (clocks event reasons, SM clock, power, PCIe generation and width against their
maximum); port counters are the ``ib-port.counters.csv`` layout of the fabric bundles; PSI
lines as ``grep -H . /proc/pressure/memory`` prints them; NFS as the kernel's ``nfs: server
... not responding, still trying``; NVRx reports as its Lightning callback prints them.

* ``straggler-gpu-thermal``: rank 13 (node-a02 GPU 5) becomes 18 % slower at step 30; its GPU
  reports HW Thermal Slowdown from then on -> ``straggler.gpu_thermal`` on node-a02, rank 13;
* ``straggler-gpu-power-brake``: rank 26 (node-a04 GPU 2) 15 % slower from step 25, HW Power
  Brake Slowdown on that GPU;
* ``straggler-pcie-x8``: rank 18 (node-a03 GPU 2) 12 % slower from the first step, its PCIe
  link at x8 of x16 all along;
* ``straggler-nvlink-xid74``: rank 4 (node-a01 GPU 4) 20 % slower from step 40 after XID 74
  (NVLink) on that GPU;
* ``straggler-node-nic-errors``: every rank of node-a03 12 % slower from step 35 while its HCA
  port counts symbol errors and link recoveries -> the node, ``straggler.nic``;
* ``straggler-node-host-memory``: every rank of node-a04 25 % slower from step 30 while PSI
  memory ``full`` on node-a04 is above 20 % -> the node, ``straggler.host_memory``;
* ``straggler-node-nfs-stall``: every rank of node-a01 30 % slower from step 45 with NFS not
  responding on node-a01 only -> the node, ``straggler.storage``;
* ``straggler-unexplained``: rank 9 (node-a02 GPU 1) 14 % slower from step 20 and nothing on
  its GPU, host or port says why -> ``straggler.unexplained``, ambiguous, GPU and host named;
* ``straggler-nvrx-scores``: no per-rank times; NVRx reports every 60 s rank 21 (node-a03 GPU
  5) at relative score 0.81-0.83 and warns about it, with HW thermal slowdown on that GPU;
* counter-cases, each ``completed`` with no cause: ``straggler-counter-checkpoint`` (every rank
  3x slower for 4 steps: a checkpoint), ``straggler-counter-shared-storage`` (every rank 40 %
  slower for 15 steps: the shared file system), ``straggler-counter-dataloader`` (rank 6 twice
  as slow every 10th step only: its data-loading phase).

Run:  python3 examples/make_straggler_incidents.py   (after make_incidents.py, whose README
table it extends: its rows for ``straggler-*`` bundles are replaced in place).
"""

from __future__ import annotations

import datetime as dt
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_incidents import Bundle, merge_readme_rows, t  # noqa: E402  (examples/ is not a package)

ROWS: list[tuple[str, str, str, str]] = []
SRC = ("DeepSpeed deepspeed/utils/timer.py (log_dist timers); Megatron-LM training_log; nvidia-smi "
       "--query-gpu; infiniband sysfs counters; kernel psi.rst / nfs")
NODES = ["node-a01", "node-a02", "node-a03", "node-a04"]
PCI = ["0000:18:00.0", "0000:2A:00.0", "0000:3A:00.0", "0000:5D:00.0",
       "0000:9A:00.0", "0000:AB:00.0", "0000:BA:00.0", "0000:DB:00.0"]
START = t("2026-12-01T02:00:00Z")
STEPS = 90
STEP_S = 2.0
FWD_MS = 620.0


def stamp(at: dt.datetime) -> str:
    """Python logging's asctime as DeepSpeed's logger prints it."""
    return f"[{at.strftime('%Y-%m-%d %H:%M:%S')},{at.microsecond // 1000:03d}]"


def step_at(step: int) -> dt.datetime:
    return START + dt.timedelta(seconds=5 + step * STEP_S)


class Job:
    """One 32-rank job: ``slow(rank, step) -> factor`` decides each rank's forward time."""

    def __init__(self, name: str, job: int, slow, seed: int) -> None:
        self.b = Bundle(name)
        self.job = job
        self.slow = slow
        self.rng = random.Random(seed)
        self.extra: dict[str, list[str]] = {h: [] for h in NODES}

    def build(self, *, rank_lines: bool = True) -> Bundle:
        end = step_at(STEPS) + dt.timedelta(seconds=20)
        self.b.workload(f"job-{self.job}", "COMPLETED", START, end, NODES, scheduler="slurm",
                        exit_code="0:0", ranks_per_node=8)
        logs: dict[str, list[str]] = {h: [] for h in NODES}
        for step in range(1, STEPS + 1):
            at = step_at(step)
            worst = 1.0
            for rank in range(32):
                factor = self.slow(rank, step)
                worst = max(worst, factor)
                fwd = FWD_MS * factor * self.rng.lognormvariate(0.0, 0.015)
                bwd = 2.0 * fwd * self.rng.lognormvariate(0.0, 0.01)
                when = at + dt.timedelta(milliseconds=200 + self.rng.randrange(0, 300))
                if rank_lines:
                    logs[NODES[rank // 8]].append(
                        f"{stamp(when)} [INFO] [logging.py:128:log_dist] [Rank {rank}] time (ms) | fwd: {fwd:.2f} | "
                        f"bwd: {bwd:.2f} | bwd_inner: {bwd * 0.95:.2f} | bwd_allreduce: {bwd * 0.05:.2f} | step: 20.{rank:02d}")
            iteration = STEP_S * 1000 * worst * self.rng.lognormvariate(0.0, 0.005)
            logs["node-a04"].append(
                f" [{(at + dt.timedelta(milliseconds=600)).strftime('%Y-%m-%d %H:%M:%S')}] iteration {step:8d}/{STEPS:8d} | "
                f"consumed samples: {step * 1024:12d} | elapsed time per iteration (ms): {iteration:.1f} | "
                f"learning rate: 3.000000E-04 | global batch size:  1024 | lm loss: {3.1 - step * 0.004:.6E} | "
                "loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |")
        for host in NODES:
            if logs[host]:
                self.b.write(f"logs/{host}/train.log", sorted(logs[host]) if host != "node-a04" else logs[host])
            if self.extra[host]:
                self.b.write(f"logs/{host}/{'kern.log' if self.extra[host][0][:1] != '/' else 'memwatch.log'}",
                             self.extra[host])
        return self.b

    def telemetry(self, flag=lambda host, gpu, at: {}) -> None:
        """nvidia-smi --query-gpu CSV every 30 s on every node; ``flag(host, gpu, at)`` gives
        the readings that differ from a healthy GPU."""
        header = ("timestamp, index, pci.bus_id, utilization.gpu [%], temperature.gpu, clocks.sm [MHz], "
                  "power.draw [W], clocks_event_reasons.hw_thermal_slowdown, "
                  "clocks_event_reasons.hw_power_brake_slowdown, pcie.link.gen.current, pcie.link.gen.max, "
                  "pcie.link.width.current, pcie.link.width.max")
        for host in NODES:
            rows = [header]
            at = START + dt.timedelta(seconds=30)
            while at < step_at(STEPS):
                for gpu in range(8):
                    r = {"temp": 62 + gpu % 3, "sm": 1980, "power": 690.0 + gpu, "thermal": "Not Active",
                         "brake": "Not Active", "width": 16}
                    r.update(flag(host, gpu, at))
                    rows.append(f"{at.strftime('%Y/%m/%d %H:%M:%S')}.000, {gpu}, 0000000{PCI[gpu][3:]}, 98 %, "
                                f"{r['temp']}, {r['sm']} MHz, {r['power']:.2f} W, {r['thermal']}, {r['brake']}, "
                                f"5, 5, {r['width']}, 16")
                at += dt.timedelta(seconds=30)
            self.b.write(f"metrics/{host}/nvidia-smi.csv", rows)


def one_rank(target: int, factor: float, from_step: int):
    return lambda rank, step: factor if rank == target and step >= from_step else 1.0


def one_node(node: int, factor: float, from_step: int):
    return lambda rank, step: factor if rank // 8 == node and step >= from_step else 1.0


def expected(b: Bundle, what: str, **fields) -> None:
    b.expected(what, SRC, rows=ROWS, **fields)


def gpu_thermal() -> None:
    j = Job("straggler-gpu-thermal", 3501, one_rank(13, 1.18, 30), 1)
    hot = step_at(29)
    j.telemetry(lambda h, g, at: {"temp": 91, "sm": 1410, "thermal": "Active"} if h == "node-a02" and g == 5 and at >= hot else {})
    expected(j.build(), "rank 13 (node-a02 GPU 5) 18 % slower from step 30; HW thermal slowdown on that GPU",
             outcome="degraded", domain="gpu_hardware", root_cause="straggler.gpu_thermal",
             culprit_hosts=["node-a02"], culprit_ranks=[13], quality_any_of=["probable", "definitive"],
             notes="Issue 35. The job completes, 15 % below its speed from step 30: every step waits for rank 13, "
                   "whose forward time is 18 % above the median of the 32 ranks for 60 steps; nvidia-smi shows "
                   "HW Thermal Slowdown Active and the SM clock at 1410 MHz on GPU 5 of node-a02 from then on.")


def gpu_power() -> None:
    j = Job("straggler-gpu-power-brake", 3502, one_rank(26, 1.15, 25), 2)
    j.telemetry(lambda h, g, at: {"brake": "Active", "power": 410.0, "sm": 1500}
                if h == "node-a04" and g == 2 and at >= step_at(24) else {})
    expected(j.build(), "rank 26 (node-a04 GPU 2) 15 % slower from step 25; HW power brake on that GPU",
             outcome="degraded", domain="gpu_hardware", root_cause="straggler.gpu_power",
             culprit_hosts=["node-a04"], culprit_ranks=[26], quality_any_of=["probable", "definitive"],
             notes="Issue 35. HW Power Brake Slowdown (the node's power supply asks the GPU to slow down) on one "
                   "GPU makes its rank the job's straggler.")


def pcie_x8() -> None:
    j = Job("straggler-pcie-x8", 3503, one_rank(18, 1.12, 1), 3)
    j.telemetry(lambda h, g, at: {"width": 8} if h == "node-a03" and g == 2 else {})
    expected(j.build(), "rank 18 (node-a03 GPU 2) 12 % slower from the first step; its PCIe link at x8 of x16",
             outcome="degraded", domain="gpu_hardware", root_cause="straggler.pcie_downtrained",
             culprit_hosts=["node-a03"], culprit_ranks=[18], quality_any_of=["probable", "definitive"],
             notes="Issue 35. The link of GPU 2 on node-a03 trained to x8 (its maximum is x16): it passes its health "
                   "checks, shows full utilisation and is slow from the start (no change point: slow since step 1).")


def nvlink() -> None:
    j = Job("straggler-nvlink-xid74", 3504, one_rank(4, 1.20, 40), 4)
    j.telemetry()
    at = step_at(39)
    j.extra["node-a01"] = [
        f"{at.strftime('%b %d %H:%M:%S')} node-a01 kernel: NVRM: Xid (PCI:0000:9a:00): 74, pid='<unknown>', "
        "name=<unknown>, NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"]
    expected(j.build(), "rank 4 (node-a01 GPU 4) 20 % slower from step 40, after XID 74 (NVLink) on that GPU",
             outcome="degraded", domain="gpu_hardware", root_cause="straggler.nvlink_degraded",
             culprit_hosts=["node-a01"], culprit_ranks=[4],
             notes="Issue 35. One NVLink of GPU 4 on node-a01 failed (XID 74); the job goes on over the remaining "
                   "links, 20 % slower on that rank. The XID hypothesis is folded into the straggler's.")


def node_nic() -> None:
    j = Job("straggler-node-nic-errors", 3505, one_node(2, 1.12, 35), 5)
    j.telemetry()
    rows = ["time,node,port,symbol_error,link_error_recovery,link_downed,port_rcv_errors,port_xmit_wait,port_xmit_data,port_rcv_data"]
    at, sym, rec = START + dt.timedelta(seconds=10), 0, 0
    while at < step_at(STEPS):
        if at >= step_at(34):
            sym += 40
            rec += 1
        n = int((at - START).total_seconds())
        rows.append(f"{at.strftime('%Y-%m-%dT%H:%M:%SZ')},node-a03,mlx5_0/1,{sym},{rec},0,{sym // 4},{n * 2000},{n * 10**9},{n * 10**9}")
        at += dt.timedelta(seconds=10)
    j.b.write("metrics/node-a03/ib-port.counters.csv", rows)
    expected(j.build(), "every rank of node-a03 12 % slower from step 35 while its HCA port counts symbol errors",
             outcome="degraded", root_cause="straggler.nic", culprit_hosts=["node-a03"],
             culprit_ranks=list(range(16, 24)),
             notes="Issue 35. All eight ranks of node-a03 slow together and no other node does: the node, not a GPU. "
                   "Its port mlx5_0/1 counts symbol errors and link error recoveries from then on.")


def node_memory() -> None:
    j = Job("straggler-node-host-memory", 3506, one_node(3, 1.25, 30), 6)
    j.telemetry()
    mon, at, total = [], START + dt.timedelta(seconds=15), 1000
    while at < step_at(STEPS):
        full = 24.0 if at >= step_at(29) else 0.0
        total += int(full * 300_000)
        mon += [at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                f"/proc/pressure/memory:some avg10={full * 1.8:.2f} avg60={full * 1.2:.2f} avg300={full * 0.4:.2f} total={total * 2}",
                f"/proc/pressure/memory:full avg10={full:.2f} avg60={full * 0.7:.2f} avg300={full * 0.25:.2f} total={total}"]
        at += dt.timedelta(seconds=30)
    j.b.write("logs/node-a04/memwatch.log", mon)
    expected(j.build(), "every rank of node-a04 25 % slower from step 30 with PSI memory full above 20 % on node-a04",
             outcome="degraded", domain="host", root_cause="straggler.host_memory", culprit_hosts=["node-a04"],
             culprit_ranks=list(range(24, 32)),
             notes="Issue 35. The host's memory is under pressure (all non-idle tasks stalled on memory a quarter of "
                   "the time): its eight ranks slow together.")


def node_nfs() -> None:
    j = Job("straggler-node-nfs-stall", 3507, one_node(0, 1.30, 45), 7)
    j.telemetry()
    j.extra["node-a01"] = [
        f"{(step_at(44) + dt.timedelta(seconds=k * 30)).strftime('%b %d %H:%M:%S')} node-a01 kernel: "
        "nfs: server 10.0.0.50 not responding, still trying" for k in range(3)]
    expected(j.build(), "every rank of node-a01 30 % slower from step 45; NFS not responding on node-a01 only",
             outcome="degraded", domain="storage", root_cause="straggler.storage", culprit_hosts=["node-a01"],
             culprit_ranks=list(range(0, 8)),
             notes="Issue 35. Only node-a01 loses its NFS server, so only its ranks wait on reads: a node straggler "
                   "with a storage reason (compare straggler-counter-shared-storage, where every node waits).")


def unexplained() -> None:
    j = Job("straggler-unexplained", 3508, one_rank(9, 1.14, 20), 8)
    j.telemetry()
    expected(j.build(), "rank 9 (node-a02 GPU 1) 14 % slower from step 20; nothing in the inputs says why",
             outcome="degraded", domain="unknown", root_cause="straggler.unexplained", culprit_hosts=["node-a02"],
             culprit_ranks=[9], quality_any_of=["ambiguous"],
             notes="Issue 35. The slow GPU and host are named; no reading of its GPU, host or port explains it, so "
                   "the verdict is ambiguous (confirm it: re-certify the GPU).")


def nvrx() -> None:
    j = Job("straggler-nvrx-scores", 3509, one_rank(21, 1.2, 30), 9)
    j.telemetry(lambda h, g, at: {"temp": 90, "sm": 1450, "thermal": "Active"}
                if h == "node-a03" and g == 5 and at >= step_at(28) else {})
    b = j.build(rank_lines=False)
    lines = []
    for k, at in enumerate(START + dt.timedelta(seconds=60 * (i + 1)) for i in range(3)):
        bad = k >= 1
        when = at.strftime("%Y-%m-%d %H:%M:%S")
        if bad:
            lines.append(f"[NeMo W {when} straggler_det_callback:88] STRAGGLER DETECTION WARNING: Some GPUs have worse "
                         "relative performance. Affected ranks: {21}")
        lines.append(f"[NeMo I {when} straggler_det_callback:120] ")
        lines.append("GPU relative performance:")
        lines.append(" Worst performing 2/32 ranks:")
        lines.append(f"  Rank=21 Node=node-a03 Score={0.82 if bad else 0.98:.2f}")
        lines.append("  Rank=7 Node=node-a01 Score=0.97")
        lines.append(" Best performing 2/32 ranks:")
        lines.append("  Rank=0 Node=node-a01 Score=1.00")
        lines.append("  Rank=30 Node=node-a04 Score=0.99")
    b.write("logs/node-a01/nvrx.log", lines)
    expected(b, "NVRx reports rank 21 (node-a03 GPU 5) at relative score 0.82 twice and warns; HW thermal slowdown there",
             outcome="degraded", domain="gpu_hardware", root_cause="straggler.gpu_thermal", culprit_hosts=["node-a03"],
             culprit_ranks=[21],
             notes="Issue 35. No per-rank step times: the NVIDIA Resiliency Extension's own reports name the slow "
                   "rank (score 1.0 is the best rank), and nvidia-smi says why.")


def counter_checkpoint() -> None:
    j = Job("straggler-counter-checkpoint", 3510, lambda r, s: 3.0 if 40 <= s < 44 else 1.0, 10)
    j.telemetry()
    expected(j.build(), "every rank 3x slower for 4 steps (a checkpoint): not a straggler",
             outcome="completed", root_cause="none", culprit_hosts=[],
             notes="Issue 35 counter-case. What slows every rank alike cancels out in the peer comparison.")


def counter_shared_storage() -> None:
    j = Job("straggler-counter-shared-storage", 3511, lambda r, s: 1.4 if 50 <= s < 65 else 1.0, 11)
    j.telemetry()
    expected(j.build(), "every rank 40 % slower for 15 steps (the shared file system): not a straggler",
             outcome="completed", root_cause="none", culprit_hosts=[],
             notes="Issue 35 counter-case. A stall of the file system every node reads from slows every rank "
                   "alike: no rank stands out.")


def counter_dataloader() -> None:
    j = Job("straggler-counter-dataloader", 3512, lambda r, s: 2.0 if r == 6 and s % 10 == 0 else 1.0, 12)
    j.telemetry()
    expected(j.build(), "rank 6 twice as slow on every 10th step only (its data-loading phase): not a straggler",
             outcome="completed", root_cause="none", culprit_hosts=[],
             notes="Issue 35 counter-case. One slow step in ten never moves the rank's rolling median.")


def main() -> None:
    for build in (gpu_thermal, gpu_power, pcie_x8, nvlink, node_nic, node_memory, node_nfs, unexplained, nvrx,
                  counter_checkpoint, counter_shared_storage, counter_dataloader):
        build()
    merge_readme_rows("straggler-", ROWS)


if __name__ == "__main__":
    main()
