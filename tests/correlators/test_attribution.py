"""Behaviour of the workload correlator on hand-built event sets (the pure engine alone).

Each test mirrors one behaviour the replay issue requires; the bundle-level tests run the same
behaviours from real log lines through the whole driver.
"""

from __future__ import annotations

import datetime as dt
import random

import pytest

from correlators.attribution import WorkloadInfo, decide
from correlators.enrich import Allocation
from schemas.bundle import WorkloadSpec
from schemas.records import CoverageEntry, Event, GpuRef, canonical_json

T0 = 1_796_000_000 * 10**9  # 2026-11-29T... UTC, any fixed instant
S = 10**9


def spec(nodes=("node-a01", "node-a02"), rpn=8, state="FAILED", dur_s=3600) -> WorkloadSpec:
    start = dt.datetime.fromtimestamp(T0 / S, tz=dt.timezone.utc)
    return WorkloadSpec(
        workload_id="job-1001",
        cluster="c1",
        state=state,
        start=start,
        end=start + dt.timedelta(seconds=dur_s),
        nodes=list(nodes),
        ranks_per_node=rpn,
        hosts={n: {"ip": f"10.0.0.{11 + i}"} for i, n in enumerate(nodes)},
    )


def ev(type_, at_s, host, rank=None, gpu=None, peer=None, began_s=None, **attrs) -> Event:
    return Event(
        type=type_,
        at=T0 + int(at_s * S),
        began_at=None if began_s is None else T0 + int(began_s * S),
        host=host,
        cluster="c1",
        workload_id="job-1001",
        rank=rank,
        gpu=gpu,
        peer=peer,
        attributes=attrs,
        rule=f"test.{type_}@1",
    ).with_id()


def xid(at_s, host, code, gpu_index, **extra):
    buckets = {
        79: ("RESTART_BM", "CONTACT_SUPPORT"),
        48: ("WORKFLOW_XID_48", "WORKFLOW_XID_48"),
        31: ("RESTART_APP", "WORKFLOW_XID_31"),
        43: ("IGNORE", "CONTACT_SUPPORT"),
    }[code]
    return ev(
        "gpu.xid", at_s, host, gpu=GpuRef(index=gpu_index, pci_bus_id=f"0000:{gpu_index + 16:02x}:00"),
        xid=code, immediate_action=buckets[0], investigatory_action=buckets[1], **extra,
    )


def watchdog(at_s, host, rank, ran_for_ms=600_017, seq=4121):
    return ev(
        "nccl.watchdog_timeout", at_s, host, rank=rank, began_s=at_s - ran_for_ms / 1000,
        seq_num=seq, op_type="ALLREDUCE", timeout_ms=600_000, ran_for_ms=ran_for_ms,
    )


def run(s: WorkloadSpec, events, coverage=()):
    alloc = Allocation.from_workload(s)
    enriched = [alloc.enrich(e) for e in events]
    run.enriched = enriched
    return decide(WorkloadInfo.from_spec(s), alloc, enriched, list(coverage), ruleset_version="test")


def present(*hosts):
    return [CoverageEntry(source=f"file:logs/{h}/dmesg.log", status="present", records=100) for h in hosts]


def test_fell_off_bus_explains_backdated_timeouts_on_all_other_ranks():
    s = spec()
    bad_rank = 13  # node-a02, GPU 5
    events = [xid(600, "node-a02", 79, 5)]
    # every other rank times out ~10 minutes later; the stall began at the XID
    events += [watchdog(1200.5 + r / 100, s.rank_map()[r].host, r) for r in range(16) if r != bad_rank]
    # decoy: an OOM kill on the healthy host just before the timeouts fire (not near the stall)
    events.append(ev("host.oom_kill", 1190, "node-a01", pid=9, process="sshd"))
    att = run(s, events, present("node-a01", "node-a02"))
    assert att.root_cause.code == "gpu.xid.79"
    assert att.domain == "gpu_hardware"
    assert att.culprits.hosts == ["node-a02"]
    assert att.culprits.ranks == [bad_rank]  # the silent rank on the XID's host
    assert att.quality == "definitive"
    timeouts = {e.event_id for e in events if e.type == "nccl.watchdog_timeout"}
    assert timeouts <= set(att.symptoms)
    assert len(att.affected.ranks) == 15
    # the timeline shows the stall's start, not the timeout's log time
    first_symptom = min(i.at for i in att.evidence if i.role == "symptom")
    assert abs(first_symptom - (T0 + 600 * S)) < 2 * S


def test_without_backdating_the_timeouts_are_not_explained_by_an_old_xid():
    s = spec()
    # same timeouts but the lines carry no "ran for": nothing says when the stall began
    events = [xid(600, "node-a02", 79, 5)]
    events += [
        ev("nccl.watchdog_timeout", 5000 + r, s.rank_map()[r].host, rank=r, seq_num=1)
        for r in range(16)
        if r != 13
    ]
    att = run(s, events, present("node-a01", "node-a02"))
    assert att.root_cause.code == "gpu.xid.79"
    assert not ({e.event_id for e in events[1:]} & set(att.symptoms))


def test_sigkilled_rank_explains_connection_resets_on_its_peers():
    s = spec(nodes=("node-a01", "node-a02"), rpn=1)
    events = [
        ev("proc.killed", 31.30, "node-a02", pid=572, signal=9, signal_name="SIGKILL", local_rank=0),
        ev("net.connection_reset", 31.27, "node-a01", rank=0, peer="10.0.0.12:11692", reason="reset", backend="gloo"),
        ev("torchrun.child_failed", 31, "node-a01", global_rank=0, exitcode=-15, signal=15, first_observed=False),
    ]
    att = run(s, events, present("node-a01", "node-a02"))
    assert att.root_cause.code == "proc.killed.sigkill"
    assert att.culprits.hosts == ["node-a02"]
    assert att.culprits.ranks == [1]
    reset_id = next(e.event_id for e in run.enriched if e.type == "net.connection_reset")
    assert reset_id in att.symptoms
    reset = next(i for i in att.evidence if i.type == "net.connection_reset")
    assert reset.role == "symptom"


def test_the_rank_that_did_not_time_out_is_the_suspect_not_torchruns_first_failure():
    s = spec()
    events = [watchdog(1200 + r / 10, s.rank_map()[r].host, r) for r in range(16) if r != 11]
    # torchrun names rank 0 as "first observed failure": it merely exited first
    events.append(ev("torchrun.child_failed", 1210, "node-a01", global_rank=0, exitcode=-6, signal=6, first_observed=True))
    att = run(s, events, present("node-a01", "node-a02"))
    assert att.root_cause.code == "nccl.stalled_rank"
    assert att.culprits.ranks == [11]
    assert att.culprits.hosts == ["node-a02"]
    assert att.quality in ("definitive", "probable")


def test_duplicate_gpu_is_config_not_hardware():
    s = spec(nodes=("node-a01",), rpn=2)
    events = [
        ev("config.duplicate_gpu", 22, "node-a01", rank=0, ranks=[0, 1], device="60"),
        ev("config.duplicate_gpu", 22, "node-a01", rank=1, ranks=[1, 0], device="60"),
        ev("nccl.invalid_usage", 22.5, "node-a01", rank=0, last_error="Duplicate GPU detected"),
    ]
    att = run(s, events, present("node-a01"))
    assert (att.domain, att.root_cause.code) == ("config", "config.duplicate_gpu")
    assert att.quality == "definitive"


def test_one_xid31_from_an_application_is_the_application():
    s = spec(nodes=("node-a01",), rpn=1)
    events = [
        xid(64, "node-a01", 31, 0, pid=647, process="python3"),
        ev("cuda.error", 64.1, "node-a01", error="illegal_address", text="cudaErrorIllegalAddress"),
    ]
    att = run(s, events, present("node-a01"))
    assert att.domain == "software"
    assert att.root_cause.code == "app.cuda.illegal_address"
    assert att.culprits.hosts == ["node-a01"]


def test_two_fitting_causes_give_ambiguous_with_both():
    s = spec()
    events = [xid(600, "node-a01", 79, 2), ev("host.oom_kill", 601, "node-a02", pid=4242, process="python3")]
    events += [watchdog(1201 + r / 10, s.rank_map()[r].host, r) for r in range(16) if r not in (2, 8)]
    att = run(s, events, present("node-a01", "node-a02"))
    assert att.quality == "ambiguous"
    codes = {att.root_cause.code} | {a.code for a in att.alternatives}
    assert {"gpu.xid.79", "host.oom_kill"} <= codes


def test_missing_sources_lower_confidence_and_show_in_coverage():
    s = spec()
    events = [xid(600, "node-a02", 79, 5)]
    events += [watchdog(1200 + r / 10, s.rank_map()[r].host, r) for r in range(16) if r != 13]
    full = run(s, events, present("node-a01", "node-a02"))
    partial = run(s, events, present("node-a02"))
    assert partial.confidence < full.confidence
    # node-a01's events arrived but no source of it reported coverage: lagging, not present
    entry = next(c for c in partial.coverage if c.source == "host:node-a01")
    assert (entry.status, entry.events) == ("lagging", 0)
    # a node with neither events nor sources is empty
    quiet = spec(nodes=("node-a01", "node-a02", "node-a03"))
    att = run(quiet, events, present("node-a01", "node-a02"))
    entry = next(c for c in att.coverage if c.source == "host:node-a03")
    assert entry.status == "empty"
    assert att.confidence < full.confidence


def test_verdict_is_a_pure_function_of_the_event_set():
    s = spec()
    events = [xid(600, "node-a02", 79, 5)]
    events += [watchdog(1200 + r / 10, s.rank_map()[r].host, r) for r in range(16) if r != 13]
    first = canonical_json(run(s, events, present("node-a01", "node-a02")))
    for seed in range(3):
        shuffled = events + events[:3]  # duplicates from at-least-once delivery collapse
        random.Random(seed).shuffle(shuffled)
        assert canonical_json(run(s, shuffled, present("node-a02", "node-a01"))) == first


def test_no_cause_is_insufficient_not_a_guess():
    s = spec()
    events = [ev("net.connection_reset", 100, "node-a01", rank=0, peer="10.0.0.99:1234", reason="reset")]
    att = run(s, events, present("node-a01", "node-a02"))
    assert att.quality == "insufficient"
    assert att.root_cause.code == "unknown"
    assert att.symptoms == [events[0].event_id]


def test_application_faults_before_the_start_belong_to_earlier_processes():
    s = spec(nodes=("node-a01",), rpn=1)
    events = [
        xid(-1.6, "node-a01", 31, 0, pid=647, process="python3"),  # the previous job's fault
        xid(4, "node-a01", 43, 0, pid=671, process="python3"),
        ev("cuda.error", 3.5, "node-a01", error="device_assert", text="device-side assert triggered"),
    ]
    att = run(s, events, present("node-a01"))
    assert att.root_cause.code == "app.cuda.device_assert"
    causes = [i for i in att.evidence if i.role == "cause"]
    assert all(i.at >= T0 for i in causes), [i.summary for i in causes]
    assert not any("Xid 31" in i.summary for i in att.evidence if i.role != "context")


def test_a_kernel_line_whose_time_could_not_be_read_does_not_outrank_a_timed_one():
    s = spec()
    timed = xid(600, "node-a02", 79, 5)
    guessed = xid(0, "node-a01", 48, 2).model_copy(update={"time_quality": 0.2}).with_id()
    events = [timed, guessed] + [
        watchdog(1200 + r / 10, s.rank_map()[r].host, r) for r in range(16) if r not in (2, 13)
    ]
    att = run(s, events, present("node-a01", "node-a02"))
    assert att.root_cause.code == "gpu.xid.79"
    assert att.culprits.hosts == ["node-a02"]
    assert att.quality != "ambiguous"


def test_one_gpu_named_by_pci_id_and_by_index_is_one_culprit():
    s = spec(nodes=("node-a01",), rpn=8)
    alloc = Allocation.from_workload(s)
    alloc.gpus[("node-a01", "0000:9c:00")] = 2
    a = ev("gpu.xid", 10, "node-a01", gpu=GpuRef(pci_bus_id="0000:9c:00"), xid=48,
           immediate_action="WORKFLOW_XID_48", investigatory_action="WORKFLOW_XID_48")
    b = ev("telemetry.ecc_uncorrected", 11, "node-a01", gpu=GpuRef(index=2, uuid="GPU-0002"), count=3)
    events = [alloc.enrich(e) for e in (a, b)]
    att = decide(WorkloadInfo.from_spec(s), alloc, events, present("node-a01"), ruleset_version="t")
    assert [g.model_dump() for g in att.culprits.gpus] == [
        {"index": 2, "uuid": "GPU-0002", "pci_bus_id": "0000:9c:00"}
    ]
    assert att.culprits.ranks == [2]


def test_one_cause_on_two_hosts_is_named_after_its_primary_event():
    # the same XID on both hosts: one multi-culprit cause whose sentence and event are both
    # the earliest XID's (node-a02's), whichever host's hypothesis was grouped first
    s = spec()
    events = [xid(700, "node-a01", 79, 3), xid(600, "node-a02", 79, 5)]
    events += [watchdog(1300.5 + r / 100, s.rank_map()[r].host, r) for r in range(16) if r not in (3, 13)]
    att = run(s, events, present("node-a01", "node-a02"))
    assert att.root_cause.code == "gpu.xid.79"
    assert att.root_cause.event_id == run.enriched[1].event_id  # node-a02's XID, enriched
    assert "node-a02" in att.root_cause.text and "node-a01" not in att.root_cause.text
    assert att.culprits.hosts == ["node-a01", "node-a02"]


# --- loopback peers (detectors.loopback_peer) ----------------------------------------------------


def _connect(at_s, host, peer, *, type_="net.connection_reset", **attrs):
    base = {"backend": "gloo", "op": "connect", "reason": "refused"} if type_ == "net.connection_reset" else {"op": "connect"}
    return ev(type_, at_s, host, peer=peer, **{**base, **attrs})


@pytest.mark.parametrize("peer", ["127.0.1.1:3210", "127.0.0.1:29501", "[::1]:5000", "[::ffff:127.0.0.1]:5000"])
def test_a_connect_to_a_loopback_peer_across_nodes_is_config(peer):
    att = run(spec(rpn=2), [_connect(30, "node-a02", peer)], present("node-a01", "node-a02"))
    assert att.domain == "config"
    assert att.root_cause.code == "config.loopback_address"


def test_an_nccl_socket_connect_to_loopback_across_nodes_is_config():
    att = run(spec(rpn=2), [_connect(30, "node-a02", "127.0.0.1:45321", type_="nccl.socket_error",
                                     error="Connection refused")], present("node-a01", "node-a02"))
    assert att.root_cause.code == "config.loopback_address"


@pytest.mark.parametrize("nodes, peer, attrs", [
    (("node-a01",), "127.0.0.1:3210", {}),             # one node: loopback is the right address
    (("node-a01", "node-a02"), "10.0.0.11:3210", {}),  # a routable peer: no address fault
    (("node-a01", "node-a02"), "127.0.0.1:3210", {"op": "read", "reason": "reset"}),  # not a connect
    (("node-a01", "node-a02"), "localhost:3210", {}),  # a name: what it resolved to is not said
])
def test_loopback_needs_a_connect_to_a_loopback_address_in_a_multi_node_job(nodes, peer, attrs):
    att = run(spec(nodes=nodes, rpn=2), [_connect(30, nodes[-1], peer, **attrs)], present(*nodes))
    assert att.root_cause.code != "config.loopback_address"


# --- errnos only a program produces ------------------------------------------------------------


@pytest.mark.parametrize("name, code", [("EFAULT", "app.errno.EFAULT"), ("EBADF", "app.errno.EBADF")])
def test_a_program_fault_errno_is_software_not_storage(name, code):
    e = ev("os.error", 30, "node-a01", errno={"EFAULT": 14, "EBADF": 9}[name], errno_name=name, category="app",
           exception="OSError", strerror="Bad address")
    att = run(spec(rpn=2), [e], present("node-a01", "node-a02"))
    assert att.domain == "software" and att.root_cause.code == code


def test_a_storage_errno_stays_storage():
    e = ev("os.error", 30, "node-a01", errno=5, errno_name="EIO", category="storage", exception="OSError",
           strerror="Input/output error", path="/ckpt/x")
    assert run(spec(rpn=2), [e], present("node-a01", "node-a02")).domain == "storage"


# --- SIGKILL: the victim, not the sender ----------------------------------------------------------


def test_a_lone_sigkill_names_its_victim_weakly_and_never_the_program():
    # torch.multiprocessing: "process 0 terminated with signal SIGKILL", no OOM-killer line
    s = spec(nodes=("node-a01",), rpn=1)
    att = run(s, [ev("proc.killed", 30, "node-a01", signal=9, signal_name="SIGKILL", process_index=0,
                     source="mp.spawn")], present("node-a01"))
    assert att.root_cause.code == "proc.killed.sigkill"
    assert att.domain == "host"  # sent from outside the process: the OOM killer most often
    lone = att.confidence
    # the peers that waited on the killed rank make it the cause of the job's failure
    s2 = spec(nodes=("node-a01", "node-a02"), rpn=1)
    events = [ev("proc.killed", 31.30, "node-a02", pid=572, signal=9, signal_name="SIGKILL", local_rank=0),
              ev("net.connection_reset", 31.27, "node-a01", rank=0, peer="10.0.0.12:11692", reason="reset",
                 backend="gloo")]
    corroborated = run(s2, events, present("node-a01", "node-a02"))
    assert corroborated.root_cause.code == "proc.killed.sigkill"
    assert corroborated.culprits.ranks == [1]
    assert corroborated.confidence > lone


def test_an_oom_kill_line_outweighs_the_sigkill_it_sent():
    s = spec(nodes=("node-a01",), rpn=1)
    events = [ev("host.oom_kill", 29, "node-a01", pid=4242, process="python3"),
              ev("proc.killed", 30, "node-a01", signal=9, signal_name="SIGKILL", pid=4242)]
    assert run(s, events, present("node-a01")).root_cause.code == "host.oom_kill"
