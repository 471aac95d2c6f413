"""Process-group membership (correlators/process_groups.py) and its use by the waited_on
detector (correlators/detectors.py).

* extraction: every ``nccl.pg_init`` line variant (ProcessGroupNCCL initialization options of
  PyTorch 2.2 / 2.3 / 2.4+, "created ncclComm_", NCCL "- Init COMPLETE" of 2.14-2.28), lines
  built from the sources' format strings;
* membership: members from each rank's own statement, size checks, contradictions;
* waited_on: a known 2-member group makes the partner that did not time out the suspect; an
  unknown group leaves the allocation-wide rule exactly as it was; the chain names the group;
* the pg-* example bundles: the verdict is the same in several event orders.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest
import yaml

from correlators.attribution import WorkloadInfo, decide
from correlators.enrich import Allocation
from correlators.process_groups import build_membership
from correlators.rules import load_rule_pack
from schemas.bundle import WorkloadSpec
from schemas.records import (
    CoverageEntry,
    Event,
    Observation,
    Position,
    Source,
    canonical_json,
)
from streams.replay import replay_bundle

PACK = load_rule_pack()
T0 = 1_796_000_000 * 10**9
S = 10**9
SEEDS = (0, 1, 7, 42, 1234)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"


def extract(line: str, host: str = "obs-host") -> list[Event]:
    obs = Observation(
        source=Source(connector="test", instance="pg"), kind="log_line", observed_at=T0, time_source="line",
        time_quality=0.9, host=host, cluster="c1", workload_id="job-1001", body=line,
        position=Position(file="test.log", line=1),
    ).with_id()
    return [e for e in PACK.extract(obs) if e.type == "nccl.pg_init"]


# ----------------------------------------------------------------------------- extraction


@pytest.mark.parametrize("line, rank, attrs", [
    # 2.4+: "[PG ID <local id> PG GUID <guid> Rank <group rank>]", PG Name = GUID
    ("[I1130 07:00:04.055000331 ProcessGroupNCCL.cpp:988] [PG ID 2 PG GUID 10 Rank 1] ProcessGroupNCCL initialization "
     "options: size: 2, global rank: 13, TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: 0, "
     "SPLIT_COLOR: -2, PG Name: 10",
     13, {"stage": "pg_options", "pg": 2, "pg_guid": "10", "pg_rank": 1, "pg_size": 2, "pg_name": "10"}),
    # 2.4+ with a description (set before the line is printed)
    ("[rank5]:[I1130 07:00:04.1 ProcessGroupNCCL.cpp:988] [PG ID 3 PG GUID 7(pipeline) Rank 0] ProcessGroupNCCL "
     "initialization options: size: 2, global rank: 5, TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0, "
     "SPLIT_FROM: 0, SPLIT_COLOR: -2, PG Name: 7",
     5, {"pg": 3, "pg_guid": "7", "pg_desc": "pipeline", "pg_rank": 0, "pg_size": 2}),
    # 2.3: "[PG <pg_name_> (<desc>) Rank r]"
    ("[I ProcessGroupNCCL.cpp:929] [PG 6 (dp) Rank 3] ProcessGroupNCCL initialization options: size: 4, global rank: 14, "
     "TIMEOUT(ms): 1800000, USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: 6",
     14, {"pg": 6, "pg_desc": "dp", "pg_rank": 3, "pg_size": 4, "pg_name": "6"}),
    # 2.2: "[PG <uid> Rank r]", NCCL version first
    ("[I ProcessGroupNCCL.cpp:852] [PG 1 Rank 1] ProcessGroupNCCL initialization options:NCCL version: 2.19.3, "
     "size: 2, global rank: 11, TORCH_NCCL_ASYNC_ERROR_HANDLING: 1, TORCH_NCCL_DUMP_ON_TIMEOUT: 0, TIMEOUT(ms): 600000",
     11, {"pg": 1, "pg_rank": 1, "pg_size": 2, "nccl_version": "2.19.3", "global_rank": 11}),
    # "created ncclComm_" with the [rankN]: prefix (the global rank)
    ("[rank13]:[I1130 07:00:05.120000000 ProcessGroupNCCL.cpp:2183] [PG ID 2 PG GUID 10(pp) Rank 1] ProcessGroupNCCL "
     "created ncclComm_ 0x55D0C1A2E900 on CUDA device: 5",
     13, {"stage": "comm_created", "pg": 2, "pg_guid": "10", "pg_desc": "pp", "comm": "0x55d0c1a2e900", "cuda_dev": 5}),
    # NCCL 2.20+ "<api> comm ... commId ... - Init COMPLETE": rank/nranks are the communicator's
    ("node-a02:7736:7790 [5] NCCL INFO ncclCommSplit comm 0x55d0c1a2e900 rank 1 nranks 2 cudaDev 5 nvmlDev 5 busId "
     "9a000 commId 0x4f2a91c3d07be115 - Init COMPLETE",
     None, {"stage": "comm_init", "func": "ncclCommSplit", "pg_rank": 1, "pg_size": 2, "comm_id": "0x4f2a91c3d07be115"}),
    # NCCL 2.14-2.17 form
    ("node-a01:6636:6690 [5] NCCL INFO comm 0x7f3e5c000e00 rank 0 nranks 2 cudaDev 5 busId 9a000 - Init COMPLETE",
     None, {"stage": "comm_init", "pg_rank": 0, "pg_size": 2, "bus_id": "9a000"}),
])
def test_each_line_variant_states_membership(line: str, rank: int | None, attrs: dict) -> None:
    events = extract(line)
    assert len(events) == 1, line
    e = events[0]
    assert e.rank == rank
    for key, val in attrs.items():
        assert e.attributes.get(key) == val and type(e.attributes[key]) is type(val), (key, e.attributes)


@pytest.mark.parametrize("line", [
    # a group / communicator of one waits on nobody (real line of the H200 capture)
    "[I1130 01:20:10.815461711 ProcessGroupNCCL.cpp:988] [PG ID 0 PG GUID 0 Rank 0] ProcessGroupNCCL initialization "
    "options: size: 1, global rank: 0, TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: 0, "
    "SPLIT_COLOR: -2, PG Name: 0",
    "node-a01:473:473 [0] NCCL INFO ncclCommInitRankConfig comm 0x36884f70 rank 0 nranks 1 cudaDev 0 nvmlDev 0 "
    "busId 60 commId 0xe7cb455c433afa13 - Init COMPLETE",
    # 1.13-2.1: neither size nor global rank
    "[I ProcessGroupNCCL.cpp:665] [Rank 0] ProcessGroupNCCL initialized with following options:",
    "node-a01:473:473 [0] NCCL INFO comm 0x36884f70 rank 0 nranks 8 cudaDev 0 busId 60 - Destroy COMPLETE",
])
def test_lines_that_state_no_usable_membership_give_nothing(line: str) -> None:
    assert extract(line) == []


# ----------------------------------------------------------------------------- membership


def ev(type_, at_s, host, rank=None, began_s=None, **attrs) -> Event:
    return Event(
        type=type_, at=T0 + int(at_s * S), began_at=None if began_s is None else T0 + int(began_s * S),
        host=host, cluster="c1", workload_id="job-1001", rank=rank, attributes=attrs, rule=f"test.{type_}@1",
    ).with_id()


def host_of(rank: int) -> str:
    return "node-a01" if rank < 8 else "node-a02"


def init(rank: int, pg: int, guid: str | None, size: int, grank: int, at_s: float = 4.0) -> Event:
    attrs = {"stage": "pg_options", "pg": pg, "pg_size": size, "pg_rank": grank, "global_rank": rank}
    if guid is not None:
        attrs["pg_guid"] = guid
        attrs["pg_name"] = guid
    return ev("nccl.pg_init", at_s + rank / 100, host_of(rank), rank=rank, **attrs)


def job_inits(ranks=range(16)) -> list[Event]:
    """World (GUID 0, size 16) and pipeline pairs (r, r+8): PG ID 1, GUID 1 + r % 8."""
    out = []
    for r in ranks:
        out.append(init(r, 0, "0", 16, r))
        out.append(init(r, 1, str(1 + r % 8), 2, r // 8))
    return out


def test_membership_from_every_members_statement() -> None:
    m = build_membership(job_inits())
    pair = m.groups["guid:6"]
    assert pair.members == frozenset({5, 13}) and pair.size == 2 and pair.known
    assert m.groups["guid:0"].members == frozenset(range(16)) and m.groups["guid:0"].known
    wait = ev("nccl.watchdog_timeout", 700, "node-a01", rank=5, pg=1, seq_num=4121, op_type="RECV")
    assert m.group_of(wait) is pair


def test_membership_through_the_waiters_own_id_when_ids_differ_across_ranks() -> None:
    # rank 13 created one group more before the pair: its PG ID 2 is the pair; GUID still 6
    events = [init(5, 1, "6", 2, 0), init(13, 2, "6", 2, 1), init(13, 1, "9", 4, 0)]
    m = build_membership(events)
    assert m.groups["guid:6"].members == frozenset({5, 13})
    assert m.group_of(ev("nccl.watchdog_timeout", 700, "node-a02", rank=13, pg=2)).key == "guid:6"
    assert m.group_of(ev("nccl.watchdog_timeout", 700, "node-a01", rank=5, pg=1)).key == "guid:6"
    # an id that means different groups on different ranks resolves only through the rank itself
    assert m.group_of(ev("nccl.watchdog_timeout", 700, "node-a01", rank=7, pg=1)) is None


def test_missing_member_or_contradiction_leaves_the_group_unknown() -> None:
    only_one = build_membership([init(5, 1, "6", 2, 0)])
    assert only_one.groups["guid:6"].members == frozenset({5}) and not only_one.groups["guid:6"].known
    sizes = build_membership([init(5, 1, "6", 2, 0), init(13, 1, "6", 4, 1)])
    assert sizes.groups["guid:6"].size is None and not sizes.groups["guid:6"].known
    # 2.2: the printed id is per process; three ranks under "PG 1" of size 2 are not one group
    crowd = build_membership([init(r, 1, None, 2, 0) for r in (1, 2, 3)])
    assert crowd.groups["pg:1"].size is None and not crowd.groups["pg:1"].known


def test_nccl_communicator_size_through_the_comm_pointer() -> None:
    created = [ev("nccl.pg_init", 5, host_of(r), rank=r, stage="comm_created", pg=1, pg_guid="6", comm=f"0x{r:x}00")
               for r in (5, 13)]
    complete = [ev("nccl.pg_init", 5.1, host_of(r), rank=r, stage="comm_init", comm=f"0x{r:x}00", pg_size=2, pg_rank=r // 8)
                for r in (5, 13)]
    m = build_membership(created + complete)
    assert m.groups["guid:6"].size == 2 and m.groups["guid:6"].members == frozenset({5, 13})


def test_membership_ignores_order() -> None:
    events = job_inits()
    ref = build_membership(events)
    for seed in SEEDS:
        shuffled = list(events)
        random.Random(seed).shuffle(shuffled)
        got = build_membership(shuffled)
        assert got.groups == ref.groups and got.local == ref.local


# ----------------------------------------------------------------------------- waited_on


def spec16() -> WorkloadSpec:
    start = dt.datetime.fromtimestamp(T0 / S, tz=dt.timezone.utc)
    return WorkloadSpec(
        workload_id="job-1001", cluster="c1", state="FAILED", start=start, end=start + dt.timedelta(seconds=3600),
        nodes=["node-a01", "node-a02"], ranks_per_node=8, ranks={},
        hosts={"node-a01": {"ip": "10.0.0.11"}, "node-a02": {"ip": "10.0.0.12"}},
    )


def present(*hosts):
    return [CoverageEntry(source=f"file:logs/{h}/torchrun.log", status="present", records=10) for h in hosts]


def hang_events(with_init: bool) -> list[Event]:
    """Rank 5 times out on a RECV in its pair (PG ID 1 on rank 5); rank 13 is silent; the other
    ranks are SIGTERMed by their agents."""
    out = job_inits() if with_init else []
    out.append(ev("nccl.watchdog_timeout", 1800.5, "node-a01", rank=5, began_s=1200.5, seq_num=4121, op_type="RECV",
                  timeout_ms=600_000, ran_for_ms=600_000, pg=1, pg_rank=0, wrapped=False))
    out.append(ev("nccl.watchdog_timeout", 1800.6, "node-a01", rank=5, began_s=1200.6, seq_num=4121, op_type="RECV",
                  timeout_ms=600_000, ran_for_ms=600_000, pg_rank=0, wrapped=True))
    out.append(ev("torchrun.child_failed", 1801.4, "node-a01", rank=5, exitcode=-6, first_observed=True, global_rank=5))
    for r in range(16):
        if r != 5:
            out.append(ev("torchrun.closing_signal", 1801.3 + (r >= 8) * 2, host_of(r), rank=r, signal=15))
    return out


def decide_all_orders(events: list[Event], coverage=()) -> object:
    s = spec16()
    outs = []
    for seed in SEEDS:
        shuffled = list(events)
        random.Random(seed).shuffle(shuffled)
        alloc = Allocation.from_workload(s)
        enriched = [alloc.enrich(e) for e in shuffled]
        att = decide(WorkloadInfo.from_spec(s), alloc, enriched, list(coverage), ruleset_version="test")
        outs.append(canonical_json(att.model_dump(mode="json")))
    assert len(set(outs)) == 1, "verdict depends on event order"
    return att


def test_known_pair_makes_the_partner_the_suspect() -> None:
    att = decide_all_orders(hang_events(with_init=True), present("node-a01", "node-a02"))
    assert att.root_cause.code == "nccl.stalled_rank"
    assert att.culprits.ranks == [13] and att.culprits.hosts == ["node-a02"]
    chain = " ".join(att.reasoning)
    assert "rank 13 is the suspect: rank 5 waited on it in PG 1 (GUID 6; size 2, members 5, 13) RECV SeqNum 4121" in chain


def test_unknown_group_keeps_the_allocation_wide_rule() -> None:
    # without init lines one waiter and 14 quiet ranks single out nobody, as before
    att = decide_all_orders(hang_events(with_init=False), present("node-a01", "node-a02"))
    assert att.culprits.ranks == [] and att.root_cause.code == "unknown"
    # init lines from rank 5 only: the pair's other member is not stated -> unchanged too
    partial = [e for e in hang_events(with_init=True) if not (e.type == "nccl.pg_init" and e.rank == 13)]
    att2 = decide_all_orders(partial, present("node-a01", "node-a02"))
    assert att2.culprits.ranks == [] and att2.root_cause.code == "unknown"


def test_world_group_membership_changes_nothing_for_a_world_stall() -> None:
    # 15 of 16 time out in the world group (PG 0): the same suspect with or without membership
    def stall(with_init: bool) -> list[Event]:
        out = job_inits() if with_init else []
        for r in range(16):
            if r != 11:
                out.append(ev("nccl.watchdog_timeout", 1800 + r / 10, host_of(r), rank=r, began_s=1200, seq_num=88213,
                              op_type="ALLREDUCE", timeout_ms=600_000, ran_for_ms=600_000, pg=0))
        return out
    a = decide_all_orders(stall(True), present("node-a01", "node-a02"))
    b = decide_all_orders(stall(False), present("node-a01", "node-a02"))
    assert a.culprits.ranks == b.culprits.ranks == [11]


def test_the_group_the_hang_began_in_wins_over_later_waits() -> None:
    # everyone else then times out in the world group, later than rank 5's pair RECV began
    events = hang_events(with_init=True)
    for r in range(16):
        if r not in (5, 13):
            events.append(ev("nccl.watchdog_timeout", 1810 + r / 10, host_of(r), rank=r, began_s=1210, seq_num=9001,
                             op_type="ALLREDUCE", timeout_ms=600_000, ran_for_ms=600_000, pg=0))
    att = decide_all_orders(events, present("node-a01", "node-a02"))
    assert att.culprits.ranks == [13]
    assert "in PG 1 (GUID 6; size 2, members 5, 13)" in " ".join(att.reasoning)


# ----------------------------------------------------------------------------- bundles


def bundle_decide_all_orders(name: str) -> object:
    path = EXAMPLES / name
    result = replay_bundle(path)
    s = WorkloadSpec.model_validate(yaml.safe_load((path / "workload.yaml").read_text()))
    events = [e for e in result.events if e.workload_id == s.workload_id]
    outs, att = [], None
    for seed in SEEDS:
        shuffled = list(events)
        random.Random(seed).shuffle(shuffled)
        alloc = Allocation.from_workload(s)
        att = decide(WorkloadInfo.from_spec(s), alloc, shuffled, result.attribution.coverage, ruleset_version="test")
        outs.append(canonical_json(att.model_dump(mode="json")))
    assert len(set(outs)) == 1, f"{name}: verdict depends on event order"
    return result, att


def test_bundle_pair_hang_names_the_partner_in_every_order() -> None:
    result, att = bundle_decide_all_orders("pg-pipeline-pair-recv-hang")
    assert sum(1 for e in result.events if e.type == "nccl.pg_init") == 48
    for a in (att, result.attribution):
        assert a.root_cause.code == "nccl.stalled_rank"
        assert a.culprits.ranks == [13] and a.culprits.hosts == ["node-a02"]
        assert any("rank 13 is the suspect: rank 5 waited on it in PG 2 (GUID 10; size 2, members 5, 13) RECV SeqNum 4121"
                   in line for line in a.reasoning)


def test_bundle_without_init_lines_keeps_todays_verdict_in_every_order() -> None:
    result, att = bundle_decide_all_orders("pg-pipeline-pair-recv-hang-no-init")
    assert not any(e.type == "nccl.pg_init" for e in result.events)
    for a in (att, result.attribution):
        assert a.root_cause.code == "unknown" and a.culprits.ranks == [] and a.quality == "insufficient"
