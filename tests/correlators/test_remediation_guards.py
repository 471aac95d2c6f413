"""Remediation guards: each one can block, says why, and never drops the action."""

from __future__ import annotations

import pytest

from correlators.remediation import LifecycleError, RemediationEngine, parse_policy
from correlators.remediation.guards import (
    DomainBudgetSettings,
    FailureDomains,
    GuardSettings,
    WorkloadBudgetSettings,
)
from schemas.bundle import Link, TopologySpec
from schemas.records import (
    Attribution,
    Certification,
    Culprits,
    EvidenceItem,
    RemediationCommand,
    RootCause,
    Scope,
    Window,
)
from schemas.utc import format_utc

NS = 1_000_000_000
T0 = 1_800_000_000 * NS
MIN = 60 * NS
DAY = 86400 * NS

POLICY = parse_policy(
    """
version: guards-1
rules:
  - id: off-the-bus
    match: {code: gpu.xid.79}
    actions:
      - {action: drain, target: host, mode: auto, requires_certification: true}
      - {action: reboot, target: host, mode: auto}
  - id: reset
    match: {code: gpu.xid.46}
    actions: [{action: drain, target: host, mode: auto}]
  - id: dry
    match: {code: gpu.xid.62}
    actions: [{action: drain, target: host}]
  - id: oom
    match: {code: host.oom_kill}
    actions: [{action: notify, target: host, mode: auto}]
"""
)

TOPOLOGY = TopologySpec(
    domains={"rack-1": ["node-1", "node-2", "node-3", "node-4"], "rack-2": ["node-5", "node-6", "node-7", "node-8"]},
    links=[
        Link(host="node-1", hca="mlx5_0", switch="leaf-01", switch_port="1"),
        Link(host="node-5", hca="mlx5_0", switch="leaf-01", switch_port="5"),
        Link(host="node-2", hca="mlx5_0", switch="leaf-02", switch_port="2"),
    ],
)

ROOMY = GuardSettings(
    domain_budget=DomainBudgetSettings(default=10), workload_budget=WorkloadBudgetSettings(max_nodes=10)
)


def verdict(code: str, host: str, att_id: str, at: int = T0, *, workload: str | None = None, final: bool = True,
            revision: int = 1, quality: str = "definitive", cluster: str = "c1") -> Attribution:
    return Attribution(
        attribution_id=att_id, revision=revision,
        scope=Scope(kind="workload", id=workload or f"job-{att_id}", cluster=cluster),
        window=Window(start=at - 600 * NS, end=at), outcome="failed", domain="gpu_hardware",
        root_cause=RootCause(code=code, text=f"{code} on {host}"), culprits=Culprits(hosts=[host]),
        confidence=0.9, quality=quality, status="final" if final else "provisional", ruleset_version="t", engine_version="t", decided_at=at,
        # the deciding evidence was collected on the culprit: its disruptive targets are corroborated
        evidence=[EvidenceItem(at=at, event_id="evt-1", type="gpu.xid", role="cause", host=host, summary="cause")],
    )


def guard(action, name):
    return next(g for g in action.guards if g.guard == name)


def engine(settings=ROOMY, **kw) -> RemediationEngine:
    kw.setdefault("topology", TOPOLOGY)
    return RemediationEngine(POLICY, settings=settings, **kw)


def cmd(command, action_id=None, at=T0, by="alice", reason="", cluster="c1"):
    return RemediationCommand(command=command, action_id=action_id, by=by, reason=reason, at=at, cluster=cluster).with_id()


# --- all pass: auto mode is approved by the policy -----------------------------------------


def test_all_guards_pass_and_auto_mode_is_approved_by_policy():
    eng = engine()
    out = eng.on_attribution(verdict("gpu.xid.79", "node-1", "a1"))
    assert [(a.action, a.state, a.sequence) for a in out] == [
        ("drain", "proposed", 1), ("drain", "approved", 2), ("reboot", "proposed", 1), ("reboot", "approved", 2)
    ]
    drain = out[1]
    assert [g.guard for g in drain.guards] == [
        "verdict_final", "verdict_quality", "cooldown", "escalation", "domain_budget", "workload_budget",
        "circuit_breaker",
    ]
    assert all(g.passed for g in drain.guards)
    assert guard(drain, "circuit_breaker").detail == "1 of 8 nodes taken out within 300 s (limit 50%)"
    assert guard(drain, "domain_budget").detail == "within budget: leaf-01 1/10, rack-1 1/10"
    assert drain.decision.by == "policy:faultstream-default@guards-1"
    assert drain.decision.reason == "auto mode: all guards passed"
    # the reboot waits for the drain
    assert [a.action for a in eng.executable()] == ["drain"]
    assert "runs after drain" in out[3].reason


def test_notify_is_not_subject_to_capacity_guards():
    eng = engine(fleet_size=None, topology=None)
    eng.on_workload("c1", "job-a1", ["node-1"], T0)  # the target is known from the job's allocation
    out = eng.on_attribution(verdict("host.oom_kill", "node-1", "a1"))
    assert [(a.action, a.state) for a in out] == [("notify", "proposed"), ("notify", "approved")]
    assert [g.guard for g in out[0].guards] == ["verdict_final", "verdict_quality"]


# --- circuit breaker -----------------------------------------------------------------------


def test_breaker_trips_stays_tripped_and_resets_only_by_command_skipping_stale_events():
    eng = engine(fleet_size=4)
    for i, host in enumerate(["node-1", "node-2"]):
        out = eng.on_attribution(verdict("gpu.xid.46", host, f"a{i}", T0 + i * MIN))
        assert out[-1].state == "approved"
    assert guard(out[-1], "circuit_breaker").detail == "2 of 4 nodes taken out within 300 s (limit 50%)"

    third = eng.on_attribution(verdict("gpu.xid.46", "node-3", "a3", T0 + 2 * MIN))
    assert [(a.state, a.mode) for a in third] == [("proposed", "needs_approval")]
    assert guard(third[0], "circuit_breaker").passed is False
    assert guard(third[0], "circuit_breaker").detail == "tripped now: 3 of 4 nodes taken out within 300 s (limit 50%)"
    assert eng.breaker("c1").tripped and eng.breaker("c1").tripped_at == T0 + 2 * MIN

    # hours later, far outside the window: still tripped
    later = eng.on_attribution(verdict("gpu.xid.46", "node-5", "a4", T0 + 120 * MIN))
    assert guard(later[0], "circuit_breaker").detail == (
        "tripped: 3 of 4 nodes taken out within 300 s (limit 50%); reset by a person"
    )
    assert later[0].state == "proposed"
    # nothing disruptive of the cluster may run while tripped, approved or not
    assert eng.executable() == []
    with pytest.raises(LifecycleError, match="circuit breaker of cluster 'c1' is tripped"):
        eng.on_started(out[-1].action_id, executor="slurm", at=T0 + 121 * MIN)
    # another cluster is not affected
    other = eng.on_attribution(verdict("gpu.xid.46", "node-1", "b1", T0 + 120 * MIN, cluster="c2"))
    assert other[-1].state == "approved"

    # reset at +123 min: the drains approved before the trip and older than stale_after_s are
    # cancelled by age, not replayed; the proposals the breaker blocked stay pending for a
    # person (a progress record each: not replayed, not expired by the reset)
    reset = eng.on_command(cmd("reset_breaker", at=T0 + 123 * MIN, by="bob"))
    first_two = [a.action_id for a in eng.actions() if a.target.host in ("node-1", "node-2") and a.cluster == "c1"]
    assert [(a.action_id, a.state) for a in reset] == [
        (first_two[0], "cancelled"), (first_two[1], "cancelled"), (third[0].action_id, "proposed"),
        (later[0].action_id, "proposed"),
    ]
    assert reset[0].reason == "stale at breaker reset by bob: approved 7380 s before (stale_after_s 300); not replayed"
    assert guard(reset[2], "circuit_breaker").detail == (
        "blocked while the breaker was tripped (3 of 4 nodes taken out within 300 s (limit 50%)); "
        f"reset by bob at {format_utc(T0 + 123 * MIN)}: not replayed, waits for a person's approval")
    assert [(a.state, a.mode) for a in reset[2:]] == [("proposed", "needs_approval")] * 2
    assert not eng.breaker("c1").tripped
    assert [(a.cluster, a.target.host) for a in eng.executable()] == [("c2", "node-1")]
    # a person approves the one still wanted; it runs now that the breaker is closed
    eng.on_command(cmd("approve", later[0].action_id, at=T0 + 124 * MIN, by="bob", reason="checked"))
    assert [(a.cluster, a.target.host) for a in eng.executable()] == [("c1", "node-5"), ("c2", "node-1")]
    # the same reset delivered twice, or a reset of a closed breaker: nothing
    assert eng.on_command(cmd("reset_breaker", at=T0 + 123 * MIN, by="bob")) == []
    assert eng.on_command(cmd("reset_breaker", at=T0 + 125 * MIN, by="bob")) == []


def test_breaker_fails_closed_without_a_node_count_and_dry_run_stays_dry_run():
    eng = engine(topology=None)
    eng.on_workload("c1", "job-a1", ["node-1"], T0)  # a known target, but no node count
    out = eng.on_attribution(verdict("gpu.xid.62", "node-1", "a1"))
    assert [(a.action, a.state, a.mode) for a in out] == [("drain", "proposed", "dry_run")]
    assert guard(out[0], "circuit_breaker").detail == (
        "cluster node count unknown (no topology, no fleet_size): cannot bound the blast radius"
    )


def test_fleet_size_per_cluster_and_from_topology():
    assert engine(fleet_size={"c1": 100}).on_attribution(verdict("gpu.xid.46", "node-1", "a"))[0].guards[-1].detail == (
        "1 of 100 nodes taken out within 300 s (limit 50%)"
    )
    assert engine().on_attribution(verdict("gpu.xid.46", "node-1", "a"))[0].guards[-1].detail.startswith("1 of 8 nodes")


# --- budgets -------------------------------------------------------------------------------


def test_domain_budget_blocks_a_second_node_of_the_same_rack():
    eng = engine(GuardSettings(domain_budget=DomainBudgetSettings(default=1)))
    first = eng.on_attribution(verdict("gpu.xid.46", "node-3", "a1"))
    assert first[-1].state == "approved"
    second = eng.on_attribution(verdict("gpu.xid.46", "node-4", "a2", T0 + MIN))
    assert [(a.state, a.mode) for a in second] == [("proposed", "needs_approval")]
    assert guard(second[0], "domain_budget").detail == (
        "domain rack-1: 2 nodes would be out, budget 1 (already out: node-3)"
    )
    # a failed guard does not stop the breaker from being consulted, but it is not counted
    assert guard(second[0], "circuit_breaker").detail == (
        "1 of 8 nodes taken out within 300 s (limit 50%); this action not counted: another guard failed"
    )
    # the other rack is fine
    assert eng.on_attribution(verdict("gpu.xid.46", "node-6", "a3", T0 + 2 * MIN))[-1].state == "approved"
    # a person may still approve the blocked one; the record keeps what the guard said
    approved = eng.on_command(cmd("approve", second[0].action_id, at=T0 + 3 * MIN, reason="rack is idle"))
    assert approved[0].state == "approved" and approved[0].decision.reason == "rack is idle"
    assert guard(approved[0], "domain_budget").passed is False


def test_domain_budget_of_a_leaf_switch_by_glob():
    settings = GuardSettings(domain_budget=DomainBudgetSettings(default=10, overrides={"leaf-*": 1}))
    eng = engine(settings)
    assert eng.on_attribution(verdict("gpu.xid.46", "node-1", "a1"))[-1].state == "approved"
    blocked = eng.on_attribution(verdict("gpu.xid.46", "node-5", "a2", T0 + MIN))
    assert guard(blocked[0], "domain_budget").detail == (
        "domain leaf-01: 2 nodes would be out, budget 1 (already out: node-1)"
    )
    assert FailureDomains(TOPOLOGY).domains_of("node-1") == ["rack-1", "leaf-01"]


def test_domain_budget_frees_when_the_action_ends():
    eng = engine(GuardSettings(domain_budget=DomainBudgetSettings(default=1)))
    first = eng.on_attribution(verdict("gpu.xid.46", "node-3", "a1"))
    eng.on_execution(first[-1].action_id, ok=True, detail="drained", executor="dry-run", at=T0 + MIN)
    assert eng.get(first[-1].action_id).state == "done"
    assert eng.on_attribution(verdict("gpu.xid.46", "node-4", "a2", T0 + 2 * MIN))[-1].state == "approved"


def test_workload_budget():
    eng = engine(GuardSettings(domain_budget=DomainBudgetSettings(default=10), workload_budget=WorkloadBudgetSettings(max_nodes=1)))
    assert eng.on_attribution(verdict("gpu.xid.46", "node-1", "a1", workload="job-7"))[-1].state == "approved"
    blocked = eng.on_attribution(verdict("gpu.xid.46", "node-5", "a2", T0 + MIN, workload="job-7"))
    assert [(a.state, a.mode) for a in blocked] == [("proposed", "needs_approval")]
    assert guard(blocked[0], "workload_budget").detail == (
        "workload job-7: 2 nodes would be out (node-1, node-5), budget 1"
    )
    # another workload is not limited by job-7's budget
    assert eng.on_attribution(verdict("gpu.xid.46", "node-6", "a3", T0 + MIN, workload="job-8"))[-1].state == "approved"


# --- cooldown and escalation ---------------------------------------------------------------


def test_cooldown_per_node():
    eng = engine()
    a = eng.on_attribution(verdict("gpu.xid.46", "node-1", "inc-a"))
    eng.on_started(a[-1].action_id, executor="slurm", at=T0 + MIN)
    eng.on_execution(a[-1].action_id, ok=True, detail="ok", executor="slurm", at=T0 + 2 * MIN)
    b = eng.on_attribution(verdict("gpu.xid.46", "node-1", "inc-b", T0 + 10 * MIN))
    assert [(x.state, x.mode) for x in b] == [("proposed", "needs_approval")]
    assert guard(b[0], "cooldown").detail == "node-1 was remediated 540 s ago (incident inc-a); cooldown 1800 s"
    # another node is not cooling down
    assert eng.on_attribution(verdict("gpu.xid.46", "node-2", "inc-c", T0 + 10 * MIN))[-1].state == "approved"
    # 30 minutes after the start, node-1 may be remediated again
    c = eng.on_attribution(verdict("gpu.xid.46", "node-1", "inc-d", T0 + 31 * MIN + 1))
    assert c[-1].state == "approved" and guard(c[-1], "cooldown").passed


def remediate(eng, host, incident, at):
    out = eng.on_attribution(verdict("gpu.xid.46", host, incident, at))
    eng.on_execution(out[-1].action_id, ok=True, detail="ok", executor="slurm", at=at + MIN)
    return out


def test_escalation_after_five_remediations_in_seven_days():
    eng = engine()
    for day in range(5):
        assert remediate(eng, "node-1", f"inc-{day}", T0 + day * DAY)[-1].state == "approved"
    sixth = eng.on_attribution(verdict("gpu.xid.46", "node-1", "inc-5", T0 + 5 * DAY))
    assert [(a.state, a.mode) for a in sixth] == [("proposed", "needs_approval")]
    assert guard(sixth[0], "escalation").detail == (
        "escalated: node-1 had 5 remediations in 7 days (limit 5); a person decides"
    )
    # 7 days after the first one began, only 4 remain in the period
    later = eng.on_attribution(verdict("gpu.xid.46", "node-1", "inc-6", T0 + 7 * DAY + 2 * MIN))
    assert later[-1].state == "approved" and guard(later[-1], "escalation").passed


# --- verdict guards ------------------------------------------------------------------------


@pytest.mark.parametrize("quality", ["ambiguous", "insufficient"])
def test_ambiguous_and_insufficient_verdicts_only_get_recertify(quality):
    out = engine().on_attribution(verdict("gpu.xid.79", "node-1", "a1", quality=quality))
    assert [(a.action, a.target.hosts, a.state) for a in out] == [("recertify", ["node-1"], "proposed")]
    assert guard(out[0], "verdict_quality").detail == (
        f"{quality} verdict: only recertify is proposed; withheld: drain (host), reboot (host)"
    )
    assert out[0].plan[0].stage == "screen" and out[0].plan[0].hosts == ["node-1"]


def test_provisional_verdict_is_proposed_but_not_executed_until_final():
    eng = engine()
    prov = eng.on_attribution(verdict("gpu.xid.46", "node-1", "a1", final=False))
    assert [(a.state, a.mode) for a in prov] == [("proposed", "needs_approval")]
    assert guard(prov[0], "verdict_final").detail == "provisional verdict: waits for the final revision"
    assert guard(prov[0], "circuit_breaker").detail == (
        "0 of 8 nodes taken out within 300 s (limit 50%); this action not counted: another guard failed"
    )
    assert eng.executable() == []
    final = eng.on_attribution(verdict("gpu.xid.46", "node-1", "a1", T0 + MIN, final=True, revision=2))
    assert [(a.action_id, a.state, a.mode, a.sequence) for a in final] == [
        (prov[0].action_id, "proposed", "auto", 2), (prov[0].action_id, "approved", "auto", 3)
    ]
    assert all(g.passed for g in final[0].guards)
    assert [a.action_id for a in eng.executable("auto")] == [prov[0].action_id]
    assert eng.executable("dry_run") == []


def test_guard_blocked_actions_are_kept_with_the_reason_never_dropped():
    eng = engine(GuardSettings(domain_budget=DomainBudgetSettings(default=1)))
    eng.on_attribution(verdict("gpu.xid.46", "node-1", "a1"))
    blocked = eng.on_attribution(verdict("gpu.xid.79", "node-2", "a2", T0 + MIN))
    assert [(a.action, a.state, a.mode) for a in blocked] == [
        ("drain", "proposed", "needs_approval"), ("reboot", "proposed", "needs_approval")
    ]
    assert {a.action_id for a in eng.actions()} >= {b.action_id for b in blocked}


def test_certification_marks_hosts_healthy_for_bisection_padding():
    eng = engine()
    eng.on_certification(Certification(host="node-8", cluster="c1", suite="nvcre", passed=True, finished_at=T0 - DAY))
    out = eng.on_attribution(verdict("gpu.xid.79", "node-1", "a1", quality="ambiguous"))
    assert out[0].plan[0].hosts == ["node-1", "node-8"]
    assert out[0].plan[0].reason == "screen rack-1: 1 host(s), paired with known-healthy node-8"
