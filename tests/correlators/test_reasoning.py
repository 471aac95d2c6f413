"""Reasoning rules on hand-built event sets, each in several shuffled orders.

* waited_on (correlators/detectors.py): the member the others waited on -- silent in a 2-member
  group, silent among many, named by a store wait (peer_rank), never joined a rendezvous;
* negative evidence: a node with input but no line vs a node without input;
* pid -> rank (correlators/pids.py): ranks.N.pid, torchrun summary, NCCL host:pid:tid prefix.

Every verdict must be byte-identical (canonical_json of the Attribution) whatever the order.
"""

from __future__ import annotations

import datetime as dt
import random

from correlators.attribution import WorkloadInfo, decide
from correlators.enrich import Allocation
from correlators.pids import pid_map
from schemas.bundle import WorkloadSpec
from schemas.records import CoverageEntry, Event, canonical_json

T0 = 1_796_000_000 * 10**9
S = 10**9
SEEDS = (0, 1, 7, 42, 1234)


def spec(nodes=("node-a01", "node-a02"), rpn=8, ranks=None) -> WorkloadSpec:
    start = dt.datetime.fromtimestamp(T0 / S, tz=dt.timezone.utc)
    return WorkloadSpec(
        workload_id="job-1001", cluster="c1", state="FAILED", start=start,
        end=start + dt.timedelta(seconds=3600), nodes=list(nodes),
        ranks_per_node=None if ranks else rpn, ranks=ranks or {},
        hosts={n: {"ip": f"10.0.0.{11 + i}"} for i, n in enumerate(nodes)},
    )


def ev(type_, at_s, host, rank=None, peer=None, began_s=None, **attrs) -> Event:
    return Event(
        type=type_, at=T0 + int(at_s * S), began_at=None if began_s is None else T0 + int(began_s * S),
        host=host, cluster="c1", workload_id="job-1001", rank=rank, peer=peer, attributes=attrs,
        rule=f"test.{type_}@1",
    ).with_id()


def watchdog(at_s, host, rank, op="ALLREDUCE", ran_ms=600_017):
    return ev("nccl.watchdog_timeout", at_s, host, rank=rank, began_s=at_s - ran_ms / 1000,
              seq_num=4121, op_type=op, timeout_ms=600_000, ran_for_ms=ran_ms, pg=0)


def present(*hosts):
    return [CoverageEntry(source=f"file:logs/{h}/torchrun.log", status="present", records=10) for h in hosts]


def decide_all_orders(s: WorkloadSpec, events: list[Event], coverage=()) -> object:
    """Decide over ``events`` in several shuffled orders; assert the verdicts are identical."""
    outs = []
    for seed in SEEDS:
        shuffled = list(events)
        random.Random(seed).shuffle(shuffled)
        alloc = Allocation.from_workload(s)
        enriched = [alloc.enrich(e) for e in shuffled]
        cov = list(coverage)
        random.Random(seed + 1).shuffle(cov)
        att = decide(WorkloadInfo.from_spec(s), alloc, enriched, cov, ruleset_version="test")
        outs.append(canonical_json(att.model_dump(mode="json")))
    assert len(set(outs)) == 1, "verdict depends on event order"
    return att


def two_rank_spec():
    return spec(nodes=("node-a01",), ranks={0: {"host": "node-a01", "gpu": 0}, 1: {"host": "node-a01", "gpu": 1}})


def test_two_ranks_the_one_that_did_not_time_out_is_the_suspect():
    s = two_rank_spec()
    events = [
        watchdog(700, "node-a01", 0, op="RECV"),
        ev("torchrun.closing_signal", 700.9, "node-a01", pid=3332, signal=15, signal_name="SIGTERM"),
        ev("proc.killed", 701, "node-a01", pid=3331, signal=6, signal_name="SIGABRT", local_rank=0, exitcode=-6),
        ev("torchrun.child_failed", 701, "node-a01", rank=0, global_rank=0, local_rank=0, exitcode=-6, signal=6,
           pid=3331, first_observed=True),
        ev("torchrun.child_failed", 701, "node-a01", rank=1, global_rank=1, local_rank=1, exitcode=-15, signal=15,
           pid=3332, first_observed=False),
    ]
    att = decide_all_orders(s, events, present("node-a01"))
    assert att.root_cause.code == "nccl.stalled_rank"
    assert att.culprits.ranks == [1]
    assert att.culprits.hosts == ["node-a01"]


def test_two_ranks_waiters_exception_as_first_failure_does_not_win():
    s = two_rank_spec()
    events = [
        ev("gloo.timeout", 1801, "node-a01", rank=0, op="recv", timeout_ms=1_800_000),
        ev("torchrun.child_failed", 1802, "node-a01", rank=0, global_rank=0, local_rank=0, exitcode=1,
           pid=3331, first_observed=True),
        ev("torchrun.child_failed", 1802, "node-a01", rank=1, global_rank=1, local_rank=1, exitcode=-15, signal=15,
           pid=3332, first_observed=False),
    ]
    att = decide_all_orders(s, events, present("node-a01"))
    assert att.root_cause.code == "dist.stalled_rank"
    assert att.culprits.ranks == [1]
    assert any(a.code == "app.exception" for a in att.alternatives) or att.alternatives == []


def test_counter_case_both_ranks_time_out_names_nobody():
    s = two_rank_spec()
    events = [watchdog(700, "node-a01", 0), watchdog(700.2, "node-a01", 1),
              ev("torchrun.child_failed", 701, "node-a01", rank=0, global_rank=0, exitcode=-6, signal=6,
                 pid=3331, first_observed=True)]
    att = decide_all_orders(s, events, present("node-a01"))
    assert att.root_cause.code == "unknown"
    assert att.culprits.ranks == []


def test_sixteen_ranks_one_silent_stalled_rank_is_a_case_of_waited_on():
    s = spec()
    events = [watchdog(1200 + r / 10, "node-a01" if r < 8 else "node-a02", r) for r in range(16) if r != 11]
    events.append(ev("torchrun.child_failed", 1210, "node-a01", rank=0, global_rank=0, exitcode=-6, signal=6,
                     first_observed=True))
    att = decide_all_orders(s, events, present("node-a01", "node-a02"))
    assert att.root_cause.code == "nccl.stalled_rank"
    assert att.culprits.ranks == [11] and att.culprits.hosts == ["node-a02"]


def test_store_wait_names_the_peer_rank():
    s = spec()
    events = [ev("store.timeout", 600 + r, "node-a01" if r < 8 else "node-a02", rank=r, op="get", reason="timeout",
                 waiting_rank=r, peer_rank=0) for r in range(1, 16)]
    att = decide_all_orders(s, events, present("node-a01", "node-a02"))
    assert att.culprits.ranks == [0]
    assert att.culprits.hosts == ["node-a01"]


def test_counter_case_strong_cause_on_the_silent_rank_keeps_its_code():
    s = two_rank_spec()
    events = [
        ev("net.connection_reset", 31.27, "node-a01", rank=0, peer="127.0.0.1:11692", reason="reset", backend="gloo"),
        ev("proc.killed", 31.30, "node-a01", pid=572, signal=9, signal_name="SIGKILL", local_rank=1),
    ]
    att = decide_all_orders(s, events, present("node-a01"))
    assert att.root_cause.code == "proc.killed.sigkill"
    assert att.culprits.ranks == [1]


def rdzv_events():
    return [ev("rdzv.timeout", 901, "node-a01", rank=0, timeout_s=901, joined=1, expected=2, source="store"),
            ev("torchrun.child_failed", 902, "node-a01", rank=0, global_rank=0, exitcode=1, pid=7141,
               first_observed=True)]


def test_rendezvous_short_of_clients_blames_the_silent_node_with_alternatives():
    s = spec()
    cov = present("node-a01") + [CoverageEntry(source="file:logs/node-a02/dmesg-T.log", status="present", records=2)]
    att = decide_all_orders(s, rdzv_events(), cov)
    assert att.root_cause.code == "host.never_joined"
    assert att.domain == "host"
    assert att.culprits.hosts == ["node-a02"]
    assert {a.code for a in att.alternatives} >= {"sched.never_started", "config.rendezvous_mismatch"}
    a02 = next(c for c in att.coverage if c.source == "host:node-a02")
    assert a02.status == "present" and a02.detail.startswith("silent")


def test_counter_case_rendezvous_node_without_input_weighs_less():
    s = spec()
    silent = decide_all_orders(s, rdzv_events(), present("node-a01") + [
        CoverageEntry(source="file:logs/node-a02/dmesg-T.log", status="present", records=2)])
    blind = decide_all_orders(s, rdzv_events(), present("node-a01"))
    assert blind.root_cause.code == "host.never_joined" and blind.culprits.hosts == ["node-a02"]
    assert blind.confidence < silent.confidence
    a02 = next(c for c in blind.coverage if c.source == "host:node-a02")
    assert a02.status == "empty"


def test_counter_case_rendezvous_with_every_node_logging_names_no_node():
    s = spec()
    events = rdzv_events() + [ev("nccl.warn", 300, "node-a02", rank=8, text="something")]
    att = decide_all_orders(s, events, present("node-a01", "node-a02"))
    assert att.root_cause.code != "host.never_joined"


def oom(pid=48211):
    return ev("host.oom_kill", 1263, "node-a02", pid=pid, process="python3", source="kernel")


def test_pid_from_workload_yaml_lands_the_oom_kill_on_its_rank():
    ranks = {r: {"host": "node-a01" if r < 8 else "node-a02", "gpu": r % 8, "pid": 48207 + r % 8 + (0 if r >= 8 else 4000)}
             for r in range(16)}
    s = spec(ranks=ranks)
    att = decide_all_orders(s, [oom()], present("node-a01", "node-a02"))
    assert att.root_cause.code == "host.oom_kill"
    assert att.culprits.ranks == [12]


def test_pid_from_torchrun_summary_and_nccl_prefix():
    s = spec()
    stated = [
        ev("torchrun.child_failed", 1264, "node-a02", rank=12, global_rank=12, local_rank=4, exitcode=-9, signal=9,
           pid=48211, first_observed=True),
    ]
    att = decide_all_orders(s, [oom()] + stated, present("node-a01", "node-a02"))
    assert att.culprits.ranks == [12]
    by_prefix = [ev("nccl.warn", 1200, "node-a02", rank=12, nccl_pid=48211, text="x")]
    att = decide_all_orders(s, [oom()] + by_prefix, present("node-a01", "node-a02"))
    assert att.root_cause.code == "host.oom_kill" and att.culprits.ranks == [12]


def test_counter_case_unstated_or_conflicting_pid_names_no_rank():
    s = spec()
    att = decide_all_orders(s, [oom()], present("node-a01", "node-a02"))
    assert att.culprits.ranks == []
    conflicting = [ev("nccl.warn", 1200, "node-a02", rank=12, nccl_pid=48211, text="x"),
                   ev("nccl.warn", 1201, "node-a02", rank=13, nccl_pid=48211, text="y")]
    alloc = Allocation.from_workload(s)
    assert ("node-a02", 48211) not in pid_map(alloc, conflicting)
    att = decide_all_orders(s, [oom()] + conflicting, present("node-a01", "node-a02"))
    assert att.culprits.ranks == []


def test_nccl_prefix_pid_is_extracted():
    from correlators.rules import load_rule_pack
    from schemas.records import Observation, Position, Source

    pack = load_rule_pack()
    line = ("[rank12]:node-a02:48211:48272 [4] transport/net_ib.cc:1909 NCCL WARN NET/IB : Got completion from peer "
            "10.0.0.11<45873> with status=12 opcode=0 len=0 vendor err 129 (Recv)")
    obs = Observation(source=Source(connector="test", instance="reasoning"), kind="log_line", observed_at=T0,
                      time_source="line", time_quality=0.9, host="node-a02", cluster="c1", body=line,
                      position=Position(file="test.log", line=1)).with_id()
    events = pack.extract(obs)
    assert events and all(e.attributes.get("nccl_pid") == 48211 and e.rank == 12 for e in events)
