"""Build the repetition / history / GPU-count bundles under
``examples/incidents/history-*``.

Each behaviour comes with its counter-case:

* **repeated on one GPU, within the bundle**: the H200 second-boot capture
  (``fixtures/real/h200-2026-11/dmesg-T-second-boot.log``, verbatim) holds Xid 43 (pid 417),
  Xid 13 (pid 446) and Xid 13 + Xid 43 (pid 472) on one GPU within seven seconds; the job of
  the third program sees XID 13 and 43 from a second process on the same GPU ->
  ``gpu.xid.13.repeated`` (gpu_hardware), the application as the alternative, ``probable``.
  Counter-case: ``h200-xid13-misaligned-address`` (the second program alone: its XID 13 has
  no earlier XID 13 on that GPU) stays the application.
* **repeated across jobs (history)**: the real Xid 31 line of ``dmesg-T.log`` (pid 647, job
  4101, ``workloads/``) and the same MMU fault eight hours later from another job's process
  (pid 9121) on the same GPU -> ``gpu.xid.31.repeated``. Counter-case: the earlier Xid 31 was
  on another GPU of the node -> the application (NVSentinel: "on different GPUs ->
  application").
* **every GPU of the node at once**: Xid 31 on all four GPUs of a node (telemetry lists four)
  from four ranks' processes, in this job and in an earlier one -> not one GPU: the
  application, with the driver as the alternative.
* **GPU count**: ``kubectl describe node`` of rc-60 (verbatim format) with Allocatable 0 of 8
  -> ``config.gpu.none_visible`` (driver / device plugin / configuration), not eight broken
  GPUs; the counter-case is ``public-rc60-allocatable-gpu-7-of-8`` (one fewer: hardware).

Run:  python3 examples/make_history_incidents.py   (after make_incidents.py, whose README
table it extends: its rows for ``history-*`` bundles are replaced in place).
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_incidents import (  # noqa: E402  (examples/ is not a package)
    merge_readme_rows,
    H200,
    OUT,
    PUB,
    Bundle,
    dmesg_T,
    iso,
    lines_of,
    slurm_job,
    t,
)

ROWS: list[tuple[str, str, str, str]] = []
SRC_H200 = "h200-2026-11 dmesg-T-second-boot.log / dmesg-T.log (verbatim Xid lines)"
#: the real Xid 31 line of dmesg-T.log after its time stamp, with its pid as a placeholder
XID31 = ("NVRM: Xid (PCI:0000:{bus}): 31, pid={pid}, name=python3, channel 0x0000000a, intr 00000000. "
         "MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7fcd_03e00000. "
         "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE")


def expected(b: Bundle, what: str, source: str, **fields) -> None:
    """``Bundle.expected`` with this generator's README rows."""
    b.expected(what, source, rows=ROWS, **fields)


def workload_data(job: str, start: dt.datetime, end: dt.datetime, nodes: list[str],
                  ranks: dict[int, dict] | None = None) -> dict:
    data = {"workload_id": job, "scheduler": "slurm", "cluster": "c1", "state": "FAILED",
            "exit_code": "1:0", "start": iso(start), "end": iso(end), "nodes": nodes}
    if ranks:
        data["ranks"] = ranks
    data["hosts"] = {h: {"timezone": "UTC"} for h in nodes}
    return data


# ----------------------------------------------------------------------------- within the bundle


def three_programs_one_gpu() -> None:
    b = Bundle("history-xid13-43-three-programs-one-gpu")
    start, end = t("2026-11-30T01:29:28Z"), t("2026-11-30T01:29:30Z")
    b.workload("job-2001", "FAILED", start, end, ["node-a01"], scheduler="slurm", exit_code="1:0",
               ranks={0: {"host": "node-a01", "gpu": 0}})
    b.copy("logs/node-a01/dmesg-T.log", H200 / "dmesg-T-second-boot.log")
    b.write("logs/_scheduler/slurmctld.log", slurm_job(2001, "node-a01", 16, start, end))
    expected(
        b, "third faulting program on one GPU: Xid 13 + 43 (pid 472) after Xid 43 (pid 417) and Xid 13 (pid 446)",
        SRC_H200, domain="gpu_hardware", root_cause="gpu.xid.13.repeated", culprit_hosts=["node-a01"],
        alternatives=["app.xid.13"], quality_any_of=["probable"],
        notes=("H200 second boot (dmesg-T-second-boot.log, verbatim). Three programs faulted on GPU 0000:00:06 "
               "within seven seconds: Xid 43 pid 417 (01:29:22), three Xid 13 lines of pid 446 (01:29:26), "
               "two Xid 13 and an Xid 43 of pid 472 (01:29:29). This job is the third program: its Xid 13 and "
               "Xid 43 were each logged by an earlier process on the same GPU too. NVIDIA's XID catalog "
               "(WORKFLOW_XID_13) and NVSentinel read an application-class XID repeated on one GPU across "
               "processes as a GPU to run diagnostics on; the application stays the alternative, so the "
               "verdict is probable, never definitive. (In the capture the programs were deliberately "
               "faulty: a careful person would accept the alternative once diagnostics pass.)"),
    )


# ----------------------------------------------------------------------------- across jobs


def _two_jobs(name: str, earlier_bus: str, what: str, job: int, day: int, **exp) -> None:
    """Jobs ``job`` + 1 (earlier, in ``workloads/``) and ``job`` + 2 on node-a01 on 2026-11-``day``,
    8 h apart; the verbatim Xid 31 line of the H200 capture in each, on ``earlier_bus`` and then on
    00:06. Each bundle has its own day and job ids, so all bundles can share one stream."""
    b = Bundle(name)
    d = f"2026-11-{day:02d}"
    s1, e1 = t(f"{d}T01:20:58Z"), t(f"{d}T01:21:06Z")
    s2, e2 = t(f"{d}T09:40:00Z"), t(f"{d}T09:40:10Z")
    b.yaml("workload.yaml", workload_data(f"job-{job + 2}", s2, e2, ["node-a01"], {0: {"host": "node-a01", "gpu": 0}}))
    b.yaml(f"workloads/job-{job + 1}.yaml", workload_data(f"job-{job + 1}", s1, e1, ["node-a01"], {0: {"host": "node-a01"}}))
    b.write("logs/node-a01/dmesg-T.log", [dmesg_T(t(f"{d}T01:21:04Z"), XID31.format(bus=earlier_bus, pid=647)),
                                          dmesg_T(t(f"{d}T09:40:05Z"), XID31.format(bus="00:06", pid=9121))])
    b.write("logs/_scheduler/slurmctld.log",
            slurm_job(job + 1, "node-a01", 16, s1, e1) + slurm_job(job + 2, "node-a01", 16, s2, e2))
    expected(b, what, SRC_H200 + "; the later line is the same fault with another pid and time", **exp)


def across_jobs_same_gpu() -> None:
    _two_jobs(
        "history-xid31-repeated-across-jobs", "00:06",
        "Xid 31 MMU fault on GPU 0000:00:06 in job 4101 (pid 647) and again 8 h later in job 4102 (pid 9121)",
        job=4100, day=21,
        domain="gpu_hardware", root_cause="gpu.xid.31.repeated", culprit_hosts=["node-a01"],
        alternatives=["app.xid.31"], quality_any_of=["probable"],
        notes=("The earlier job (workloads/job-4101.yaml) logged the real Xid 31 of dmesg-T.log (pid 647); eight "
               "hours later job 4102's process (pid 9121) logs the same MMU fault on the same GPU. The earlier "
               "job is outside this job's window: it reaches the verdict only as history. NVSentinel: XID 31 "
               "twice on the same GPU in 24 h -> run diagnostics (the GPU); the application is the alternative."),
    )


def across_jobs_other_gpu() -> None:
    _two_jobs(
        "history-xid31-other-gpu-across-jobs", "00:07",
        "counter-case: the earlier job's Xid 31 was on another GPU (0000:00:07) of the node",
        job=4110, day=22,
        domain="software", root_cause="app.xid.31", culprit_hosts=["node-a01"], alternatives=[],
        quality_any_of=["probable", "definitive"],
        notes=("As history-xid31-repeated-across-jobs, but the earlier Xid 31 was on GPU 0000:00:07. NVSentinel: "
               "XID 31 on different GPUs -> an application bug; one XID 31 per GPU is no repeat."),
    )


# ----------------------------------------------------------------------------- every GPU at once


def every_gpu_at_once() -> None:
    b = Bundle("history-xid31-every-gpu-at-once")
    buses = ["00:06", "00:07", "00:08", "00:09"]
    s1, e1 = t("2026-11-23T07:00:00Z"), t("2026-11-23T07:00:10Z")
    s2, e2 = t("2026-11-23T09:40:00Z"), t("2026-11-23T09:40:10Z")
    ranks = {r: {"host": "node-a01", "gpu": r} for r in range(4)}
    b.yaml("workload.yaml", workload_data("job-4202", s2, e2, ["node-a01"], ranks))
    b.yaml("workloads/job-4201.yaml", workload_data("job-4201", s1, e1, ["node-a01"], ranks))
    lines = [dmesg_T(t("2026-11-23T07:00:05Z"), XID31.format(bus=bus, pid=7100 + i)) for i, bus in enumerate(buses)]
    lines += [dmesg_T(t("2026-11-23T09:40:05Z"), XID31.format(bus=bus, pid=9100 + i)) for i, bus in enumerate(buses)]
    b.write("logs/node-a01/dmesg-T.log", lines)
    # one nvidia-smi snapshot in each job, so each job's own window knows the node's GPUs
    b.write("metrics/node-a01/nvidia-smi-gpus.csv", ["timestamp, index, pci.bus_id, uuid, name"] + [
        f"{start.strftime('%Y/%m/%d %H:%M:%S')}.415, {i}, 00000000:{bus}.0, GPU-00000000-0000-4000-8000-000000001{i:03d}, NVIDIA H200"
        for start in (s1, s2) for i, bus in enumerate(buses)])
    b.write("logs/_scheduler/slurmctld.log",
            slurm_job(4201, "node-a01", 16, s1, e1) + slurm_job(4202, "node-a01", 16, s2, e2))
    expected(
        b, "Xid 31 on all four GPUs of the node at once, in this job and an earlier one",
        "dmesg-T.log Xid 31 line format (verbatim text, other pids and buses)",
        domain="software", root_cause="app.xid.31", culprit_hosts=["node-a01"],
        alternatives=["gpu.driver.xid_31"], quality_any_of=["probable"],
        notes=("Each of the four ranks' processes logged the same MMU fault on its own GPU at 09:40:05, and an "
               "earlier job did the same on all four at 07:00:05. A repeat that hits every GPU of the node at once "
               "is not one GPU's fault: the application (every rank runs the same code) or the driver, which is "
               "named as the alternative. Telemetry (nvidia-smi) says the node has these four GPUs."),
    )


# ----------------------------------------------------------------------------- GPU count


def none_of_its_gpus() -> None:
    b = Bundle("history-k8s-allocatable-0-of-8")
    src = lines_of(PUB / "rc-60" / "lines.log")[:16]
    describe = [l.replace("nvidia.com/gpu:             7", "nvidia.com/gpu:             0") for l in src]
    start, end = t("2026-10-26T02:00:00Z"), t("2026-10-26T02:30:00Z")
    b.workload("job-4301", "FAILED", start, end, ["node-a01"], exit_code="1", ranks_per_node=8)
    b.write("logs/node-a01/kubectl-describe-node.txt", describe)
    expected(
        b, "kubectl describe node: nvidia.com/gpu Capacity 8, Allocatable 0 (none of its GPUs)",
        "rc-60 describe-node excerpt (verbatim format), Allocatable changed to 0",
        domain="config", root_cause="config.gpu.none_visible", culprit_hosts=["node-a01"],
        quality_any_of=["probable", "insufficient"],
        notes=("A node that advertises none of its eight GPUs has not lost eight GPUs: the driver did not load, "
               "or the device plugin / GPU configuration does not see them (a driver or configuration signal). "
               "Counter-case public-rc60-allocatable-gpu-7-of-8: one fewer is that GPU's hardware."),
    )


# ----------------------------------------------------------------------------- README

GENERATORS = (three_programs_one_gpu, across_jobs_same_gpu, across_jobs_other_gpu, every_gpu_at_once,
              none_of_its_gpus)


def main() -> None:
    for stale in sorted(OUT.glob("history-*")):
        if stale.is_dir():
            shutil.rmtree(stale)
    for gen in GENERATORS:
        gen()
    merge_readme_rows("history-", ROWS)


if __name__ == "__main__":
    main()
