"""Build the stack-dump bundles (issue 33) under ``examples/incidents/stacks-*``.

When a job hangs, the stacks every rank dumped say who is not where the others are: most ranks
wait inside one collective, the one that stopped the job is in the data loader, in storage
I/O, in a lock (``correlators.detectors.stack_outlier``). Each dump is written in its tool's
own output format (``correlators/stackdump.py`` names the source code of each):

* ``py-spy dump`` text (per rank: ``logs/<host>/stacks-rank<N>.txt``, the rank from the file
  name), ``py-spy dump --json`` (``pyspy-rank<N>.json``), CPython ``faulthandler`` through
  torchrun's ``[rankN]:`` prefix (``torchrun.log``), gdb ``thread apply all bt``
  (``gdb-rank<N>.txt``), and PyTorch's flight recorder in its JSON form (``fr-rank<N>.json``,
  the control plane's ``dump_nccl_trace_json``) and its pickle form (``nccl_trace_rank_<N>``,
  ``DebugInfoWriter`` on a watchdog timeout, read through a restricted unpickler).
* A shared stall: every rank in the same checkpoint read -> the storage, no rank.
* Counter-case: every rank in the same all_reduce -> the stacks name nobody.

2 nodes (node-a01, node-a02) x 4 ranks (0-3, 4-7), Slurm job ids 6101-6108.

Run:  python3 examples/make_stack_incidents.py   (after make_incidents.py, whose README table it
extends: its rows for ``stacks-*`` bundles are replaced in place).
"""

from __future__ import annotations

import datetime as dt
import json
import pickle
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_incidents import (  # noqa: E402  (examples/ is not a package)
    OUT,
    Bundle,
    glog_agent,
    merge_readme_rows,
    slurmctld,
    t,
    torchrun_summary,
    watchdog_v2,
)

ROWS: list[tuple[str, str, str, str]] = []
NODES = ["node-a01", "node-a02"]
RPN = 4
SP = "/opt/conda/lib/python3.10/site-packages"
SRC = {
    "py-spy": "py-spy src/dump.rs print_traces (text)",
    "py-spy-json": "py-spy src/dump.rs --json (serde of src/stack_trace.rs StackTrace)",
    "faulthandler": "CPython Python/traceback.c write_thread_id / dump_frame (faulthandler.dump_traceback_later)",
    "gdb": "gdb 'thread apply all bt' frame format",
    "fr": "PyTorch torch/csrc/distributed/c10d/FlightRecorder.cpp dump_json / dump (version 2.7)",
}


def host_of(rank: int) -> str:
    return NODES[rank // RPN]


def pid_of(rank: int) -> int:
    return 51230 + rank * 7 if rank < RPN else 61230 + (rank - RPN) * 7


def expected(b: Bundle, what: str, source: str, **fields) -> None:
    b.expected(what, source, rows=ROWS, **fields)


def cancelled(b: Bundle, job: int, start: dt.datetime, end: dt.datetime) -> None:
    """A hung job the operator cancelled after dumping its stacks (slurmctld)."""
    b.write("logs/_scheduler/slurmctld.log", slurmctld([
        (start - dt.timedelta(seconds=2), f"_slurm_rpc_submit_batch_job: JobId={job} InitPrio=4294901759 usec=402"),
        (start + dt.timedelta(microseconds=318000), f"sched: Allocate JobId={job} NodeList=node-a[01-02] #CPUs=224 Partition=gpu"),
        (end - dt.timedelta(seconds=1), f"_slurm_rpc_kill_job: REQUEST_KILL_JOB JobId={job} uid 1000"),
        (end, f"_job_complete: JobId={job} WTERMSIG 15"),
        (end + dt.timedelta(microseconds=1000), f"_job_complete: JobId={job} done"),
    ]))


def workload(b: Bundle, job: int, start: dt.datetime, end: dt.datetime, state: str = "CANCELLED") -> None:
    b.workload(f"job-{job}", state, start, end, NODES, scheduler="slurm",
               exit_code="0:15" if state == "CANCELLED" else "1:0", ranks_per_node=RPN)


# ----------------------------------------------------------------------------- frames

# (function, file as the tool shows it, line) innermost first; files relative to site-packages
# as py-spy's short_filename shows them
TRAIN = [("train_step", "train.py", 151), ("main", "train.py", 214), ("<module>", "train.py", 231)]
BARRIER = [("barrier", "torch/distributed/distributed_c10d.py", 4159),
           ("wrapper", "torch/distributed/c10d_logger.py", 83),
           ("save_checkpoint", "train.py", 97)] + TRAIN[1:]
ALLREDUCE = [("all_reduce", "torch/distributed/distributed_c10d.py", 2288),
             ("wrapper", "torch/distributed/c10d_logger.py", 83),
             ("_reduce_loss", "train.py", 118)] + TRAIN
DATASET_READ = [("read_array", "numpy/lib/format.py", 822), ("load", "numpy/lib/npyio.py", 456),
                ("__getitem__", "data/shards.py", 77), ("<listcomp>", "torch/utils/data/_utils/fetch.py", 51),
                ("fetch", "torch/utils/data/_utils/fetch.py", 51),
                ("_next_data", "torch/utils/data/dataloader.py", 674),
                ("__next__", "torch/utils/data/dataloader.py", 631), ("train_step", "train.py", 140)] + TRAIN[1:]
WORKER_WAIT = [("wait", "threading.py", 324), ("get", "queue.py", 180),
               ("_try_get_data", "torch/utils/data/dataloader.py", 1133),
               ("_get_data", "torch/utils/data/dataloader.py", 1294),
               ("_next_data", "torch/utils/data/dataloader.py", 1332),
               ("__next__", "torch/utils/data/dataloader.py", 631), ("train_step", "train.py", 140)] + TRAIN[1:]
FILELOCK = [("_acquire", "filelock/_api.py", 332), ("acquire", "filelock/_api.py", 345),
            ("__enter__", "filelock/_api.py", 376), ("prepare_cache", "data/cache.py", 58),
            ("train_step", "train.py", 133)] + TRAIN[1:]
CKPT_READ = [("load_tensor", "torch/serialization.py", 1656), ("persistent_load", "torch/serialization.py", 1694),
             ("_load", "torch/serialization.py", 1723), ("load", "torch/serialization.py", 1097),
             ("load_checkpoint", "train.py", 61), ("main", "train.py", 196), ("<module>", "train.py", 231)]
TQDM = [("wait", "threading.py", 324), ("wait", "threading.py", 607), ("run", "tqdm/_monitor.py", 60),
        ("_bootstrap_inner", "threading.py", 1016), ("_bootstrap", "threading.py", 973)]
PIN = [("select", "selectors.py", 416), ("wait", "multiprocessing/connection.py", 931),
       ("_poll", "multiprocessing/connection.py", 424), ("poll", "multiprocessing/connection.py", 257),
       ("get", "multiprocessing/queues.py", 113), ("do_one_step", "torch/utils/data/_utils/pin_memory.py", 31),
       ("_pin_memory_loop", "torch/utils/data/_utils/pin_memory.py", 54), ("run", "threading.py", 953),
       ("_bootstrap_inner", "threading.py", 1016), ("_bootstrap", "threading.py", 973)]


def threads_of(main: list) -> list[tuple[str, list, bool]]:
    """(thread name, frames, active) of a training process: main, tqdm monitor, pin memory."""
    return [("MainThread", main, True), ("Thread-1", TQDM, False), ("Thread-2 (_pin_memory_loop)", PIN, False)]


# ----------------------------------------------------------------------------- py-spy


def pyspy_text(rank: int, main: list) -> list[str]:
    pid = pid_of(rank)
    out = [f"Process {pid}: /opt/conda/bin/python3 -u /workspace/train.py --config cfg/llama-7b.yaml",
           "Python v3.10.14 (/opt/conda/bin/python3.10)", ""]
    for i, (name, frames, active) in enumerate(threads_of(main)):
        tid = pid if i == 0 else pid + 180 + 50 * i
        out.append(f'Thread {tid} ({"active" if active else "idle"}): "{name}"')
        out += [f"    {f} ({file}:{line})" for f, file, line in frames]
    return out


def pyspy_json(rank: int, main: list) -> str:
    pid = pid_of(rank)
    traces = []
    # py-spy's get_stack_traces walks the interpreter's thread list (newest first)
    for i, (name, frames, active) in reversed(list(enumerate(threads_of(main)))):
        tid = pid if i == 0 else pid + 180 + 50 * i
        traces.append({
            "pid": pid, "thread_id": 139_880_000_000_000 + tid * 4096, "thread_name": name, "os_thread_id": tid,
            "active": active, "owns_gil": False,
            "frames": [{"name": f, "filename": file if file == "train.py" or "/" in file and file.startswith("data/")
                        else (f"/workspace/{file}" if file in ("train.py",) else
                              f"/usr/lib/python3.10/{file}" if "/" not in file or file.startswith("multiprocessing/")
                              else f"{SP}/{file}"),
                        "module": None, "short_filename": file, "line": line, "locals": None, "is_entry": True}
                       for f, file, line in frames],
            "process_info": None,
        })
    return json.dumps(traces, indent=2)


def pyspy_bundle(name: str, job: int, odd: dict[int, list], fmt: str, what: str, **exp) -> Bundle:
    b = Bundle(name)
    start, end = t("2026-11-30T06:00:00Z"), t("2026-11-30T07:02:31Z")
    workload(b, job, start, end)
    default = exp.pop("default", BARRIER)
    for r in range(len(NODES) * RPN):
        main = odd.get(r, default)
        if fmt == "py-spy":
            b.write(f"logs/{host_of(r)}/stacks-rank{r}.txt", pyspy_text(r, main))
        else:
            b.write(f"logs/{host_of(r)}/pyspy-rank{r}.json", pyspy_json(r, main))
    cancelled(b, job, start, end)
    expected(b, what, SRC[fmt], **exp)
    return b


def stacks_pyspy_io() -> None:
    pyspy_bundle(
        "stacks-pyspy-rank5-dataset-read", 6101, {5: DATASET_READ}, "py-spy",
        "8 ranks hang at a checkpoint barrier; py-spy dump of every rank: 7 in barrier, rank 5 (node-a02) in the "
        "DataLoader reading a numpy shard (read_array)",
        domain="storage", root_cause="dist.stalled_rank.stack.io", culprit_hosts=["node-a02"], culprit_ranks=[5],
        quality_any_of=["probable", "definitive"],
        notes=("py-spy dump text (src/dump.rs): 'Thread <tid> (active|idle): \"<name>\"' and '    <func> "
               "(<short filename>:<line>)' frames, innermost first, one file per rank (stacks-rank<N>.txt: the "
               "rank comes from the file name). Ranks 0-4, 6, 7 wait in torch.distributed barrier (called from "
               "save_checkpoint); rank 5's main thread is in DataLoader __next__ -> fetch -> dataset __getitem__ -> "
               "numpy load/read_array: it never reached the barrier because its read of a shard did not return. "
               "The other threads (tqdm monitor, pin-memory loop) are the same on every rank and are not evidence. "
               "No watchdog fired yet (the operator dumped and cancelled the hung job): the stacks alone name rank 5, "
               "domain storage (a read), not the NCCL fabric."))


def stacks_pyspy_json_lock() -> None:
    pyspy_bundle(
        "stacks-pyspy-json-rank2-lock", 6104, {2: FILELOCK}, "py-spy-json",
        "py-spy dump --json of every rank: 7 in all_reduce, rank 2 (node-a01) blocked in filelock acquire "
        "(a dataset cache lock)",
        default=ALLREDUCE, domain="software", root_cause="dist.stalled_rank.stack.lock",
        culprit_hosts=["node-a01"], culprit_ranks=[2], quality_any_of=["probable", "definitive"],
        notes=("py-spy dump --json (serde_json::to_string_pretty of Vec<StackTrace>: pid, thread_id, thread_name, "
               "os_thread_id, active, owns_gil, frames[name, filename, module, short_filename, line, locals, "
               "is_entry], process_info), one file per rank (pyspy-rank<N>.json). Ranks 0, 1, 3-7 wait in "
               "all_reduce (TORCH_NCCL_BLOCKING_WAIT=1, so the wait is inside the call); rank 2's main thread is in "
               "filelock's acquire under prepare_cache: a lock, held by a process that never released it, kept it "
               "from the collective. Software, not hardware."))


# ----------------------------------------------------------------------------- faulthandler


def faulthandler_dump(rank: int, main: list) -> list[str]:
    """faulthandler.dump_traceback_later's output (the watchdog thread has no Python state:
    no 'Current thread'; threads from the newest to the main one), as torchrun prefixes it."""
    pid = pid_of(rank)
    out = ["Timeout (0:20:00)!"]
    blocks = []
    for i, (name, frames, _) in enumerate(threads_of(main)):
        tid = 0x7F3A2C1FF740 - (i * 0x1A00000) - rank * 0x10000
        lines = [f"Thread 0x{tid:016x} (most recent call first):"]
        for f, file, line in frames:
            path = (f"/workspace/{file}" if file.startswith(("train.py", "data/")) else
                    f"/opt/conda/lib/python3.10/{file}" if "/" not in file or file.startswith("multiprocessing/")
                    else f"{SP}/{file}")
            lines.append(f'  File "{path}", line {line} in {f}')
        blocks.append(lines)
    for k, lines in enumerate(reversed(blocks)):
        if k:
            out.append("")
        out += lines
    return [f"[rank{rank}]:{l}" for l in out]


def stacks_faulthandler() -> None:
    b = Bundle("stacks-faulthandler-rank5-dataloader")
    start, end = t("2026-11-30T06:00:00Z"), t("2026-11-30T06:49:02Z")
    job = 6102
    workload(b, job, start, end)
    for host in NODES:
        lines = []
        for r in range(len(NODES) * RPN):
            if host_of(r) == host:
                lines += faulthandler_dump(r, WORKER_WAIT if r == 5 else ALLREDUCE)
        b.write(f"logs/{host}/torchrun.log", lines)
    cancelled(b, job, start, end)
    expected(b, "faulthandler.dump_traceback_later fires on all 8 ranks after 20 min without a step: 7 in "
             "all_reduce, rank 5 (node-a02) waiting for its DataLoader workers (_get_data)", SRC["faulthandler"],
             domain="software", root_cause="dist.stalled_rank.stack.dataloader", culprit_hosts=["node-a02"],
             culprit_ranks=[5], quality_any_of=["probable", "definitive"],
             notes=("CPython faulthandler (Python/traceback.c write_thread_id / dump_frame): 'Timeout (0:20:00)!', "
                    "then 'Thread 0x<hex> (most recent call first):' and '  File \"<file>\", line <n> in <func>' "
                    "per thread (dump_traceback_later runs on a C thread: no 'Current thread', the main thread "
                    "last), every line prefixed '[rankN]:' by torchrun (the rank comes from the prefix). Ranks 0-4, "
                    "6, 7 wait in all_reduce; rank 5's main thread sits in DataLoader _get_data -> _try_get_data -> "
                    "queue.get: its worker processes delivered no batch. The data pipeline (a stuck or dead "
                    "worker), software; the pin-memory and tqdm threads every rank has say nothing."))


# ----------------------------------------------------------------------------- gdb

LIBTC = f"{SP}/torch/lib/libtorch_cuda.so"
LIBTP = f"{SP}/torch/lib/libtorch_python.so"


def _py_tail(n: int) -> list[str]:
    return [
        f"#{n}  0x000055d0c2a5b6e1 in _PyEval_EvalFrameDefault (tstate=<optimized out>, frame=<optimized out>, throwflag=<optimized out>) at ../Python/ceval.c:4769",
        f"#{n + 1}  0x000055d0c2b0e3a4 in PyEval_EvalCode (co=0x7f8c4e9c1a30, globals=0x7f8c4eb1c2c0, locals=0x7f8c4eb1c2c0) at ../Python/ceval.c:1134",
        f"#{n + 2}  0x000055d0c2b9e2f1 in Py_BytesMain (argc=<optimized out>, argv=<optimized out>) at ../Modules/main.c:721",
        f"#{n + 3}  0x00007f8c50e29d90 in __libc_start_call_main (main=main@entry=0x55d0c2b9e2b0 <main>, argc=argc@entry=5, argv=argv@entry=0x7ffc1b8a7a48) at ../sysdeps/nptl/libc_start_call_main.h:58",
        f"#{n + 4}  0x00007f8c50e29e40 in __libc_start_main_impl (main=0x55d0c2b9e2b0 <main>, argc=5, argv=0x7ffc1b8a7a48, init=<optimized out>, fini=<optimized out>, rtld_fini=<optimized out>, stack_end=0x7ffc1b8a7a38) at ../csu/libc-start.c:392",
        f"#{n + 5}  0x000055d0c2b9e1a5 in _start ()",
    ]


def gdb_dump(rank: int, reading: bool) -> list[str]:
    pid = pid_of(rank)
    wd, hb = pid + 41, pid + 42
    out = [f"[New LWP {pid + 3}]", f"[New LWP {pid + 4}]", f"[New LWP {wd}]", f"[New LWP {hb}]",
           "[Thread debugging using libthread_db enabled]",
           'Using host libthread_db library "/lib/x86_64-linux-gnu/libthread_db.so.1".']
    if reading:
        out.append("0x00007f8c50f1c9ef in __GI___libc_read (fd=57, buf=0x7f8a3c000b70, nbytes=4194304) at ../sysdeps/unix/sysv/linux/read.c:26")
        out.append("26\t../sysdeps/unix/sysv/linux/read.c: No such file or directory.")
    else:
        out.append("0x00007f8c50e9e7fa in __GI___clock_nanosleep (clock_id=clock_id@entry=0, flags=flags@entry=0, req=0x7ffc1b8a5f30, rem=0x7ffc1b8a5f30) at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:78")
        out.append("78\t../sysdeps/unix/sysv/linux/clock_nanosleep.c: No such file or directory.")
    out += [
        "",
        f'Thread 3 (Thread 0x7f8b0d7fe640 (LWP {hb}) "pt_nccl_heartbt"):',
        "#0  0x00007f8c50e91117 in __futex_abstimed_wait_common64 (private=0, cancel=true, abstime=0x7f8b0d7fdc90, op=137, expected=0, futex_word=0x55d0c7a1c0a8) at ./nptl/futex-internal.c:57",
        "#1  __futex_abstimed_wait_common (cancel=true, private=0, abstime=0x7f8b0d7fdc90, clockid=0, expected=0, futex_word=0x55d0c7a1c0a8) at ./nptl/futex-internal.c:87",
        "#2  __GI___futex_abstimed_wait_cancelable64 (futex_word=futex_word@entry=0x55d0c7a1c0a8, expected=expected@entry=0, clockid=clockid@entry=1, abstime=abstime@entry=0x7f8b0d7fdc90, private=private@entry=0) at ./nptl/futex-internal.c:139",
        "#3  0x00007f8c50e93e9b in __pthread_cond_wait_common (abstime=0x7f8b0d7fdc90, clockid=1, mutex=0x55d0c7a1c058, cond=0x55d0c7a1c080) at ./nptl/pthread_cond_wait.c:503",
        f"#4  0x00007f8c0a3d51e2 in c10d::ProcessGroupNCCL::HeartbeatMonitor::runLoop() () from {LIBTC}",
        "#5  0x00007f8c4a8dc253 in ?? () from /lib/x86_64-linux-gnu/libstdc++.so.6",
        "#6  0x00007f8c50e94ac3 in start_thread (arg=<optimized out>) at ./nptl/pthread_create.c:442",
        "#7  0x00007f8c50f26850 in clone3 () at ../sysdeps/unix/sysv/linux/x86_64/clone3.S:81",
        "",
        f'Thread 2 (Thread 0x7f8b0dfff640 (LWP {wd}) "pt_nccl_watchdg"):',
        "#0  0x00007f8c50e9e7fa in __GI___clock_nanosleep (clock_id=clock_id@entry=0, flags=flags@entry=0, req=0x7f8b0dffed30, rem=0x7f8b0dffed30) at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:78",
        "#1  0x00007f8c50ea3677 in __GI___nanosleep (req=<optimized out>, rem=<optimized out>) at ../sysdeps/unix/sysv/linux/nanosleep.c:25",
        f"#2  0x00007f8c0a3d8a11 in c10d::ProcessGroupNCCL::Watchdog::runLoop() () from {LIBTC}",
        f"#3  0x00007f8c0a3d9b2c in c10d::ProcessGroupNCCL::Watchdog::run() () from {LIBTC}",
        "#4  0x00007f8c4a8dc253 in ?? () from /lib/x86_64-linux-gnu/libstdc++.so.6",
        "#5  0x00007f8c50e94ac3 in start_thread (arg=<optimized out>) at ./nptl/pthread_create.c:442",
        "#6  0x00007f8c50f26850 in clone3 () at ../sysdeps/unix/sysv/linux/x86_64/clone3.S:81",
        "",
        f'Thread 1 (Thread 0x7f8c4f1ff740 (LWP {pid}) "python3"):',
    ]
    if reading:
        out += [
            "#0  0x00007f8c50f1c9ef in __GI___libc_read (fd=57, buf=0x7f8a3c000b70, nbytes=4194304) at ../sysdeps/unix/sysv/linux/read.c:26",
            "#1  0x000055d0c2b6a1c4 in _Py_read (fd=57, buf=0x7f8a3c000b70, count=4194304) at ../Python/fileutils.c:1819",
            "#2  0x000055d0c2b8f0e2 in _io_FileIO_readinto_impl (self=0x7f8b2c5e2f40, buffer=0x7ffc1b8a5e90) at ../Modules/_io/fileio.c:585",
            "#3  0x000055d0c2b8c3a1 in _bufferedreader_raw_read (self=0x7f8b2c5e3010, start=<optimized out>, len=4194304) at ../Modules/_io/bufferedio.c:1477",
            "#4  0x000055d0c2b8d0f5 in _io__Buffered_read_impl (self=0x7f8b2c5e3010, n=4194304) at ../Modules/_io/bufferedio.c:1005",
        ] + _py_tail(5)
    else:
        out += [
            "#0  0x00007f8c50e9e7fa in __GI___clock_nanosleep (clock_id=clock_id@entry=0, flags=flags@entry=0, req=0x7ffc1b8a5f30, rem=0x7ffc1b8a5f30) at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:78",
            "#1  0x00007f8c50ea3677 in __GI___nanosleep (req=<optimized out>, rem=<optimized out>) at ../sysdeps/unix/sysv/linux/nanosleep.c:25",
            f"#2  0x00007f8c0a3c5d2e in c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal(std::chrono::duration<long, std::ratio<1l, 1000l> >) () from {LIBTC}",
            f"#3  0x00007f8c0a3c6011 in c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >) () from {LIBTC}",
            f"#4  0x00007f8c0a3f0b4d in c10d::ProcessGroupNCCL::barrier(c10d::BarrierOptions const&) () from {LIBTC}",
            f"#5  0x00007f8c3b8e2a4d in c10d::ops::(anonymous namespace)::barrierCUDA(at::Tensor, c10::intrusive_ptr<c10d::ProcessGroup, c10::detail::intrusive_target_default_null_type<c10d::ProcessGroup> > const&, std::vector<long, std::allocator<long> > const&, long) () from {LIBTC}",
            f"#6  0x00007f8c3c61b0e2 in pybind11::cpp_function::dispatcher(_object*, _object*, _object*) () from {LIBTP}",
            "#7  0x000055d0c2a3e8f2 in cfunction_call (func=0x7f8c2a91e930, args=<optimized out>, kwargs=<optimized out>) at ../Objects/methodobject.c:543",
        ] + _py_tail(8)
    out.append(f"[Inferior 1 (process {pid}) detached]")
    return out


def stacks_gdb() -> None:
    b = Bundle("stacks-gdb-rank6-storage-read")
    start, end = t("2026-11-30T06:00:00Z"), t("2026-11-30T06:55:40Z")
    job = 6103
    workload(b, job, start, end)
    for r in range(len(NODES) * RPN):
        b.write(f"logs/{host_of(r)}/gdb-rank{r}.txt", gdb_dump(r, reading=(r == 6)))
    cancelled(b, job, start, end)
    expected(b, "gdb -batch -ex 'thread apply all bt' on every rank: 7 main threads in ProcessGroupNCCL::barrier, "
             "rank 6 (node-a02) in read() under FileIO.readinto", SRC["gdb"],
             domain="storage", root_cause="dist.stalled_rank.stack.io", culprit_hosts=["node-a02"],
             culprit_ranks=[6], quality_any_of=["probable", "definitive"],
             notes=("gdb 'thread apply all bt' of each rank's process (gdb-rank<N>.txt, the rank from the file "
                    "name): 'Thread <n> (Thread 0x.. (LWP <tid>) \"<name>\"):' and '#<i>  0x<pc> in <func> (<args>) "
                    "at <file>:<line>' / 'from <lib>'; threads from the newest to Thread 1, the main one. Every rank "
                    "has the NCCL watchdog (Watchdog::run) and heartbeat (HeartbeatMonitor::runLoop) threads: not "
                    "evidence. Ranks 0-5, 7: Thread 1 in c10d::ProcessGroupNCCL::barrier -> WorkNCCL::wait -> "
                    "synchronizeInternal (the sleep loop of a blocking wait). Rank 6: Thread 1 in __GI___libc_read "
                    "under _io_FileIO_readinto_impl: a read that does not return (storage)."))


# ----------------------------------------------------------------------------- flight recorder


def fr_entries(rank: int, missing: int, pickled: bool) -> list[dict]:
    entries = []
    base_ns = 1_764_484_800_000_000_000  # 2025-11-30 06:40 UTC, the rank's own clock
    last = 1042 if rank != missing else 1041
    for i, seq in enumerate(range(1035, last + 1)):
        created = base_ns + i * 1_400_000_000 + rank * 3_100
        pending = seq == 1042
        e = {
            "record_id": 6210 + i, "pg_id": 0, "process_group": ("0", "default_pg") if pickled else ["0", "default_pg"],
            "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce",
            "time_created_ns": created, "input_sizes": [[8388608]], "input_dtypes": ["Float"],
            "output_sizes": [[8388608]], "output_dtypes": ["Float"],
            "state": "started" if pending else "completed",
            "time_discovered_started_ns": created + 210_000 if pickled else created + 210_000,
            "time_discovered_completed_ns": (None if pickled else 0) if pending else created + 51_000_000,
            "retired": not pending, "timeout_ms": 600000, "is_p2p": False,
        }
        if not pending:
            e["duration_ms"] = 48.5 + (seq % 7) * 0.25
        if pickled:
            e["frames"] = [{"name": f, "filename": (f"{SP}/{file}" if "/" in file else f"/workspace/{file}"), "line": ln}
                           for f, file, ln in ALLREDUCE]
        entries.append(e)
    return entries


def fr_dump(rank: int, missing: int, pickled: bool) -> dict:
    return {
        "version": "2.7",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}},
        "pg_status": {"0": {"last_enqueued_collective": 1042 if rank != missing else 1041,
                            "last_started_collective": 1042 if rank != missing else 1041,
                            "last_completed_collective": 1041}},
        "entries": fr_entries(rank, missing, pickled),
    }


def stacks_fr_json() -> None:
    b = Bundle("stacks-flight-recorder-json-rank3")
    start, end = t("2026-11-30T06:00:00Z"), t("2026-11-30T07:10:12Z")
    job = 6105
    workload(b, job, start, end)
    for r in range(len(NODES) * RPN):
        # nlohmann::json::dump(): one compact line
        b.write(f"logs/{host_of(r)}/fr-rank{r}.json", json.dumps(fr_dump(r, 3, False), separators=(",", ":")))
    cancelled(b, job, start, end)
    expected(b, "flight recorder JSON (dump_nccl_trace_json) of every rank: 7 with all_reduce #1042 started, rank 3 "
             "(node-a01) last completed #1041 and never entered #1042", SRC["fr"],
             domain="unknown", root_cause="dist.stalled_rank.stack", culprit_hosts=["node-a01"], culprit_ranks=[3],
             quality_any_of=["probable", "definitive", "ambiguous"],
             notes=("PyTorch flight recorder, JSON form (FlightRecorder.cpp dump_json, version 2.7: version, "
                    "pg_config, pg_status, entries with record_id, pg_id, process_group, collective_seq_id, "
                    "profiling_name, time_created_ns, state scheduled|started|completed, retired, timeout_ms, "
                    "is_p2p; no frames in this form), one compact line per rank (fr-rank<N>.json, the rank from the "
                    "file name), fetched through the control plane before any watchdog fired. Ranks 0-2, 4-7 have "
                    "nccl:all_reduce #1042 started and not completed; rank 3's last entry is #1041, completed: it "
                    "never entered the collective the others wait in. Where rank 3 is instead the dump does not say, "
                    "so the domain stays unknown."))


def stacks_fr_pickle() -> None:
    b = Bundle("stacks-flight-recorder-pickle-rank3")
    start, end = t("2026-11-30T06:00:00Z"), t("2026-11-30T06:51:31Z")
    job = 6106
    workload(b, job, start, end, state="FAILED")
    enq = t("2026-11-30T06:40:58.412000Z")
    missing = 3
    per_host: dict[str, list] = {h: [] for h in NODES}
    for r in range(len(NODES) * RPN):
        b.write(f"logs/{host_of(r)}/nccl_trace_rank_{r}", b"")  # replaced below (bytes)
        path = b.dir / f"logs/{host_of(r)}/nccl_trace_rank_{r}"
        path.write_bytes(pickle.dumps(fr_dump(r, missing, True), protocol=2))
        if r == missing:
            continue
        ran = 600000 + 11 + (r * 13) % 17
        at = enq + dt.timedelta(milliseconds=ran + 3 * r)
        per_host[host_of(r)].append((at, watchdog_v2(r, at, 1042, 8388608, ran)))
    last = max(at for items in per_host.values() for at, _ in items)
    fail = last + dt.timedelta(milliseconds=1200)
    for i, host in enumerate(NODES):
        items = sorted(per_host[host])
        lines = [l for _, ls in items for l in ls]
        agent = 4410 + 1100 * i
        first = i * RPN
        lines.append(glog_agent("E", fail, agent, f"failed (exitcode: -6) local_rank: 0 (pid: {pid_of(first)}) of binary: /opt/conda/bin/python3"))
        others = [(r, r - first, -6 if r != missing else -15, pid_of(r)) for r in range(first + 1, first + RPN)]
        lines += torchrun_summary("/workspace/train.py", fail, host, (first, 0, -6, pid_of(first)), others)
        b.write(f"logs/{host}/torchrun.log", lines)
    b.write("logs/_scheduler/slurmctld.log", slurmctld([
        (start - dt.timedelta(seconds=2), f"_slurm_rpc_submit_batch_job: JobId={job} InitPrio=4294901759 usec=402"),
        (start + dt.timedelta(microseconds=318000), f"sched: Allocate JobId={job} NodeList=node-a[01-02] #CPUs=224 Partition=gpu"),
        (end - dt.timedelta(microseconds=877000), f"_job_complete: JobId={job} WEXITSTATUS 1"),
        (end - dt.timedelta(microseconds=876000), f"_job_complete: JobId={job} done"),
    ]))
    expected(b, "7 ranks time out on all_reduce SeqNum 1042 and the watchdog writes the flight recorder (pickle, "
             "nccl_trace_rank_<N>) of all 8: rank 3 (node-a01) last completed #1041 and never entered #1042", SRC["fr"],
             domain="unknown", root_cause=["dist.stalled_rank.stack", "nccl.stalled_rank"],
             culprit_hosts=["node-a01"], culprit_ranks=[3], quality_any_of=["probable", "definitive"],
             notes=("PyTorch flight recorder, pickle form (FlightRecorder.cpp dump(): pickle of the same dict with "
                    "frames per entry; DebugInfoWriter writes TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>, default "
                    "/tmp/nccl_trace_rank_<rank>, on a watchdog timeout). The bundle reader reads it through a "
                    "restricted unpickler (plain containers and scalars only, every class refused) and keeps its last "
                    "entries as one JSON record. Ranks 0-2, 4-7 log the PyTorch 2.11 watchdog timeout on SeqNum 1042 "
                    "and their dumps hold nccl:all_reduce #1042 started; rank 3 logs nothing and its dump ends with "
                    "#1041 completed. Both the silent-rank rule (nccl.stalled_rank) and the flight recorder "
                    "(dist.stalled_rank.stack) name rank 3; torchrun's first observed failure (rank 0 / 4, SIGABRT "
                    "from the watchdog) is a consequence."))


# ----------------------------------------------------------------------------- shared / counter-case


def stacks_shared() -> None:
    pyspy_bundle(
        "stacks-shared-checkpoint-read", 6107, {}, "py-spy",
        "resume from a checkpoint on shared storage hangs: py-spy dump of all 8 ranks shows each in torch.load "
        "(load_tensor), none in a collective",
        default=CKPT_READ, domain="storage", root_cause="dist.shared_stall.stack.io", culprit_ranks=[],
        quality_any_of=["probable", "definitive", "ambiguous"],
        notes=("py-spy dump text of every rank (stacks-rank<N>.txt). All 8 main threads are in the same frame: "
               "torch.load -> _load -> persistent_load -> load_tensor (torch/serialization.py), reading the "
               "checkpoint at start-up, and no rank is in a collective. No rank is the odd one out: the storage "
               "they all read from stalled (domain storage), and no rank may be blamed for it."))


def stacks_counter_case() -> None:
    pyspy_bundle(
        "stacks-all-in-allreduce", 6108, {}, "py-spy",
        "counter-case: py-spy dump of all 8 ranks, every main thread in the same all_reduce",
        default=ALLREDUCE, domain="unknown", root_cause="unknown", culprit_hosts=[], culprit_ranks=[],
        quality_any_of=["insufficient"],
        notes=("Counter-case of stacks-pyspy-rank5-dataset-read: every rank's main thread waits in all_reduce "
               "(torch/distributed/distributed_c10d.py) under _reduce_loss, so the stacks show no rank outside the "
               "collective. They say the job hung inside NCCL (the fabric, a GPU, NCCL itself: other evidence must "
               "tell) and must not name a rank. The inputs hold no cause."))


def fr_analysis(seq: int, missing: set[int]) -> list[str]:
    """What PyTorch's flight-recorder analyzer (torchfrtrace, 2.6 logger form) prints for one
    collective that not every rank joined."""
    return [f"Not all ranks joining collective {seq} at entry {seq - 1}",
            "group info: 0:default_pg",
            "collective: nccl:all_reduce",
            "missing ranks: {" + ", ".join(map(str, sorted(missing))) + "}",
            "input sizes: [[4194304]]",
            "output sizes: [[4194304]]",
            f"expected ranks: {len(NODES) * RPN}",
            "collective state: scheduled",
            "collective stack trace: ",
            f" all_reduce at {SP}/torch/distributed/distributed_c10d.py:2288",
            f" wrapper at {SP}/torch/distributed/c10d_logger.py:83",
            " _reduce_loss at /workspace/train.py:118"]


def _fr_analyzer_bundle(name: str, job: int, missing: set[int]) -> Bundle:
    b = Bundle(name)
    start, end = t("2026-11-30T06:00:00Z"), t("2026-11-30T06:48:03Z")
    workload(b, job, start, end)
    # the operator collected every rank's dump and ran torchfrtrace over them; its output is
    # kept with the job's logs (no timestamps of its own)
    out = ["$ torchfrtrace --prefix nccl_trace_rank_ /scratch/fr/job_%d" % job]
    for seq in (1042, 1043):
        out += fr_analysis(seq, missing)
    b.write("logs/_aggregated/torchfrtrace.txt", out)
    cancelled(b, job, start, end)
    return b


def stacks_fr_analyzer() -> None:
    b = _fr_analyzer_bundle("stacks-fr-analyzer-missing-rank6", 6109, {6})
    expected(b, "torchfrtrace over every rank's flight-recorder dump: all_reduce #1042 and #1043 miss rank 6 "
             "(node-a02); the job hung and was cancelled", "PyTorch torch/distributed/flight_recorder fr_trace "
             "(components/builder.py, types.py EntryState.log, 2.6 logger form)",
             domain="unknown", root_cause="dist.peer_waited_on", culprit_hosts=["node-a02"], culprit_ranks=[6],
             quality_any_of=["probable", "ambiguous"],
             notes=("Issue 33 item 1, the flight recorder's text form: the job hung with no watchdog line (the "
                    "timeout was longer than the operator's patience) and was cancelled; the operator ran PyTorch's "
                    "analyzer (torchfrtrace) over the ranks' dumps and kept its output (logs/_aggregated, no host "
                    "of its own). It prints 'Not all ranks joining collective 1042 at entry 1041' ... 'missing "
                    "ranks: {6}' for the collective the others wait in: rank 6 never entered it. Where rank 6 is "
                    "instead the analysis does not say, so the domain stays unknown."))


def stacks_fr_analyzer_counter() -> None:
    b = _fr_analyzer_bundle("stacks-fr-analyzer-half-missing", 6110, {0, 1, 2, 4, 5})
    expected(b, "counter-case: torchfrtrace names 5 of 8 ranks missing from all_reduce #1042", "PyTorch "
             "torch/distributed/flight_recorder fr_trace (2.6 logger form)",
             domain="unknown", root_cause="unknown", culprit_hosts=[], culprit_ranks=[],
             quality_any_of=["insufficient"],
             notes=("Counter-case of stacks-fr-analyzer-missing-rank6: the analysis names five of the eight ranks "
                    "as missing, which points at no single rank (the job's ranks diverged, or dumps are missing): "
                    "no rank is named."))


GENERATORS = (stacks_pyspy_io, stacks_pyspy_json_lock, stacks_faulthandler, stacks_gdb, stacks_fr_json,
              stacks_fr_pickle, stacks_shared, stacks_counter_case, stacks_fr_analyzer, stacks_fr_analyzer_counter)


def main() -> None:
    for stale in sorted(OUT.glob("stacks-*")):
        if stale.is_dir():
            shutil.rmtree(stale)
    for gen in GENERATORS:
        gen()
    merge_readme_rows("stacks-", ROWS)


if __name__ == "__main__":
    main()
