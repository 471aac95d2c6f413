"""What a failure cost (``correlators.cost``): GPU-hours lost from the back-dated cause to the
job's end, how long the job ran on until something noticed, time to the verdict, and the sums
of a fabric incident, on real example incidents and on hand-made windows."""

from __future__ import annotations

from pathlib import Path

import pytest

from correlators.cost import incident_cost, workload_cost
from correlators.enrich import Allocation
from schemas.records import Event
from streams.replay import replay_bundle

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"
S = 1_000_000_000
T0 = 1_796_001_664_000_000_000


def test_xid79_on_a_16_gpu_job_costs_the_ten_minutes_the_watchdog_waited() -> None:
    """rc-15: GPU 1 of node-a02 falls off the bus; the NCCL watchdogs of the other ranks time
    out 600 s later, the job ends 6 s after that: 16 GPUs x 606.458 s."""
    (att,) = replay_bundle(EXAMPLES / "public-rc15-pcie-aer-xid79-multinode").attributions
    c = att.cost
    assert (c.gpus, c.nodes, c.lost_s) == (16, 2, 606.458)
    assert c.gpu_hours_lost == round(16 * 606.458 / 3600, 4) == 2.6954
    assert c.node_hours_lost == round(2 * 606.458 / 3600, 4)
    assert c.ran_after_cause_s == 600.551  # the first watchdog line after the XID
    # from the cause's first line (the PCIe AER error 0.1 s before the XID it brought down)
    assert c.lost_from == min(item.at for item in att.evidence if item.role == "cause")
    assert c.lost_until == att.window.end
    assert c.verdict_after_s == c.lost_s  # replay decides at the window's end
    assert (c.jobs_hit, c.nodes_hit) == (1, 2)
    assert c.lost_from_utc.endswith("Z") and c.noticed_at_utc is not None


def test_a_port_flapping_under_two_jobs_costs_both_jobs() -> None:
    result = replay_bundle(EXAMPLES / "fabric-port-flap-two-jobs")
    by_kind: dict[str, list] = {}
    for att in result.attributions:
        by_kind.setdefault(att.scope.kind, []).append(att)
    jobs = by_kind["workload"]
    (incident,) = by_kind["incident"]
    c = incident.cost
    assert c.jobs_hit == 2 and c.gpus == sum(j.cost.gpus for j in jobs) == 64
    assert c.gpu_hours_lost == round(sum(j.cost.gpu_hours_lost for j in jobs), 4)
    assert c.lost_until == max(j.cost.lost_until for j in jobs)
    assert by_kind["fabric_port"][0].cost == c


def test_a_hung_job_is_costed_to_the_window_end_and_gpus_come_from_the_rank_map() -> None:
    alloc = Allocation(workload_id="job-1", cluster="c1", ranks={r: ("node-a01", r) for r in range(8)})
    watchdog = Event(type="nccl.watchdog_timeout", at=T0 + 1800 * S, began_at=T0 + 60 * S,
                     host="node-a01", rule="r@1")
    c = workload_cost(cause_at=T0 + 60 * S, end_ns=None, decided_at=T0 + 3600 * S, nodes=["node-a01"],
                      alloc=alloc, symptoms=[watchdog], culprit_hosts=["node-a01"])
    assert (c.gpus, c.lost_s, c.gpu_hours_lost) == (8, 3540.0, round(8 * 3540 / 3600, 4))
    assert (c.noticed_at, c.ran_after_cause_s) == (T0 + 1800 * S, 1740.0)
    # no ranks known: GPU-hours unknown, node-hours still there; nothing noticed yet
    bare = Allocation(workload_id="job-1", cluster="c1")
    c = workload_cost(cause_at=T0, end_ns=None, decided_at=T0 + 720 * S, nodes=["node-a01", "node-a02"],
                      alloc=bare, symptoms=[], culprit_hosts=["node-a02"])
    assert (c.gpus, c.gpu_hours_lost, c.node_hours_lost, c.ran_after_cause_s) == (None, None, 0.4, None)
    assert c.nodes_hit == 1


def test_a_fault_no_job_ran_into_lost_nothing() -> None:
    c = incident_cost(first_at=T0, decided_at=T0 + 90 * S, linked=[], hosts=["node-a03"])
    assert (c.jobs_hit, c.gpu_hours_lost, c.node_hours_lost, c.lost_s, c.nodes_hit) == (0, 0.0, 0.0, 0.0, 1)


@pytest.mark.parametrize("bundle", ["public-rc70-bogus-1eb-oom-after-timeout", "reasoning-2rank-both-time-out"])
def test_a_verdict_without_a_cause_has_no_cost(bundle: str) -> None:
    (att,) = replay_bundle(EXAMPLES / bundle).attributions
    assert att.root_cause.code and att.cost is None
