"""Remediation lifecycle: the transition table, ordering under duplicated and shuffled records,
expiry (by time and by the cause clearing), in-place upgrade, certification gating, commands,
state round-trip and determinism."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from schemas.utc import format_utc

from correlators.remediation import (
    TERMINAL,
    TRANSITIONS,
    LifecycleError,
    RemediationEngine,
    UnknownActionError,
    advance,
    fold,
    load_policy,
    parse_policy,
)
from schemas.records import (
    Attribution,
    Certification,
    CertificationTest,
    Culprits,
    Decision,
    EvidenceItem,
    GpuRef,
    RemediationAction,
    RemediationCommand,
    RemediationTarget,
    RootCause,
    Scope,
    Window,
    canonical_json,
)

NS = 1_000_000_000
T0 = 1_800_000_000 * NS
MIN = 60 * NS
#: The cluster's nodes: remediation targets must be known nodes (correlators.remediation.targets).
FLEET = ["node-1", "node-2", "node-3", "node-4"]

AUTO = parse_policy(
    """
version: life-1
rules:
  - id: off-the-bus
    match: {code: gpu.xid.79}
    actions:
      - {action: drain, target: host, mode: auto, requires_certification: true}
      - {action: reboot, target: host, mode: auto}
  - id: reset
    match: {code: gpu.xid.46}
    actions: [{action: reset_gpu, target: gpu, mode: auto}]
"""
)


def verdict(code: str, host: str = "node-1", att_id: str = "a1", at: int = T0, *, revision: int = 1,
            incident: str | None = None, outcome: str = "failed", workload: str = "job-1") -> Attribution:
    return Attribution(
        attribution_id=att_id, revision=revision, scope=Scope(kind="workload", id=workload, cluster="c1"),
        window=Window(start=at - 600 * NS, end=at), outcome=outcome, domain="gpu_hardware",
        root_cause=RootCause(code=code, text=f"{code} on {host}"),
        culprits=Culprits(hosts=[host], gpus=[GpuRef(index=2)]), confidence=0.9, quality="definitive",
        incident_id=incident, ruleset_version="t", engine_version="t", decided_at=at,
        # the deciding evidence was collected on the culprit: its disruptive targets are corroborated
        evidence=[EvidenceItem(at=at, event_id="evt-1", type="gpu.xid", role="cause", host=host, summary="cause")],
    )


def bundle_topology(bundle: Path):
    """The ``topology.yaml`` of an example bundle: the ports and hosts a target may name."""
    import yaml

    from schemas.bundle import TopologySpec

    return TopologySpec.model_validate(yaml.safe_load((bundle / "topology.yaml").read_text()))


def cmd(command, action_id=None, at=T0, by="alice", reason="") -> RemediationCommand:
    return RemediationCommand(command=command, action_id=action_id, cluster="c1", by=by, reason=reason, at=at).with_id()


def cert(passed: bool, at: int, host: str = "node-1") -> Certification:
    tests = [CertificationTest(name="dcgm-diag-r2", result="pass" if passed else "fail"),
             CertificationTest(name="nccl-allreduce", result="pass")]
    return Certification(host=host, cluster="c1", suite="nvcre", passed=passed, tests=tests, finished_at=at).with_id()


# --- the table -----------------------------------------------------------------------------


def test_transition_table():
    assert TRANSITIONS["proposed"] == {"proposed", "approved", "rejected", "expired", "cancelled"}
    assert TRANSITIONS["approved"] == {"executing", "cancelled"}
    assert TRANSITIONS["executing"] == {"executing", "done", "failed", "cancelled"}
    assert all(TRANSITIONS[s] == frozenset() for s in TERMINAL)


def base_record() -> RemediationAction:
    return RemediationAction(action_id="act-1", attribution_id="a1", target=RemediationTarget(host="node-1"),
                             action="drain", policy_id="p", created_at=T0, updated_at=T0)


def test_advance_increments_sequence_and_rejects_illegal_transitions():
    r1 = base_record()
    r2 = advance(r1, "approved", at=T0 + 5, decision=Decision(by="alice", at=T0 + 5))
    assert (r2.state, r2.sequence, r2.updated_at, r2.decision.by) == ("approved", 2, T0 + 5, "alice")
    assert (r1.state, r1.sequence) == ("proposed", 1)  # the old record is untouched
    with pytest.raises(LifecycleError) as err:
        advance(r1, "done", at=T0)
    assert (err.value.from_state, err.value.to_state) == ("proposed", "done")
    assert str(err.value) == "action act-1: illegal transition proposed -> done"
    done = advance(advance(r2, "executing", at=T0 + 6), "done", at=T0 + 7)
    with pytest.raises(LifecycleError, match="done -> proposed"):
        advance(done, "proposed", at=T0 + 8)


# --- ordering under duplicates and shuffles ------------------------------------------------


def test_fold_any_order_of_duplicated_records_gives_the_same_final_state():
    r1 = base_record()
    r2 = advance(r1, "approved", at=T0 + 1, decision=Decision(by="alice", at=T0 + 1))
    r3 = advance(r2, "executing", at=T0 + 2, executor="slurm")
    r4 = advance(r3, "done", at=T0 + 3, result="ok")
    records = [r1, r2, r3, r4, r2.model_copy(), r4.model_copy()]
    finals = set()
    for perm in itertools.permutations(records):
        held, outcomes = None, []
        for rec in perm:
            held, outcome = fold(held, rec)
            outcomes.append(outcome)
        finals.add(canonical_json(held))
        assert outcomes.count("applied") >= 1
        assert outcomes.count("duplicate") + outcomes.count("stale") + outcomes.count("applied") == 6
    assert finals == {canonical_json(r4)}
    assert fold(r3, r2) == (r3, "stale")
    assert fold(r3, r3.model_copy()) == (r3, "duplicate")
    assert fold(r1, r4) == (r4, "applied")  # a gap is fine: done is reachable from proposed


def test_fold_rejects_unreachable_states_and_conflicting_records():
    r1 = base_record()
    rejected = advance(r1, "rejected", at=T0 + 1)
    executing = advance(advance(r1, "approved", at=T0 + 1), "executing", at=T0 + 2)
    with pytest.raises(LifecycleError, match="rejected -> executing"):
        fold(rejected, executing.model_copy(update={"sequence": 4}))
    with pytest.raises(LifecycleError, match="two different records with sequence 2"):
        fold(rejected, advance(r1, "approved", at=T0 + 1))


def test_engine_records_shuffled_and_duplicated_fold_to_the_engine_state():
    eng = RemediationEngine(AUTO, fleet_size=10, fleet_nodes=FLEET)
    records = eng.on_attribution(verdict("gpu.xid.79"))
    drain, reboot = records[1].action_id, records[3].action_id
    records += eng.on_execution(drain, ok=True, detail="drained", executor="slurm", at=T0 + MIN)
    records += eng.on_execution(reboot, ok=True, detail="rebooted", executor="slurm", at=T0 + 5 * MIN)
    records += eng.on_certification(cert(True, T0 + 20 * MIN))
    rng = random.Random(7)
    for _ in range(50):
        delivery = records + rng.sample(records, 4)
        rng.shuffle(delivery)
        held: dict[str, RemediationAction] = {}
        for rec in delivery:
            held[rec.action_id] = fold(held.get(rec.action_id), rec).action
        assert held == {drain: eng.get(drain), reboot: eng.get(reboot)}
    assert eng.get(drain).state == "done" and eng.get(reboot).state == "done"


# --- expiry --------------------------------------------------------------------------------


def test_expiry_by_time():
    eng = RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET)  # default: dry_run, needs an approval
    (drain, reboot) = eng.on_attribution(verdict("gpu.xid.79"))
    assert drain.expires_at == T0 + 3600 * NS
    assert eng.tick(T0 + 3599 * NS) == []
    eng.on_command(cmd("approve", reboot.action_id, at=T0 + 10 * MIN))
    out = eng.tick(T0 + 3600 * NS)
    # the unapproved drain expires; the approved reboot (its successor) is cancelled with it
    assert [(a.action, a.state, a.reason) for a in out] == [
        ("drain", "expired", f"not approved by {format_utc(T0 + 3600 * NS)}"),
        ("reboot", "cancelled", f"its predecessor drain {drain.action_id} is expired"),
    ]
    assert eng.tick(T0 + 7200 * NS) == []


def test_approval_after_expiry_expires_instead():
    eng = RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET)
    drain = eng.on_attribution(verdict("gpu.xid.79"))[0]
    out = eng.on_command(cmd("approve", drain.action_id, at=T0 + 2 * 3600 * NS, by="bob"))
    assert out[0].state == "expired"
    assert out[0].reason == f"expired at {format_utc(T0 + 3600 * NS)} before approval by bob at {format_utc(T0 + 7200 * NS)}"


def test_expiry_when_the_cause_clears():
    eng = RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET)
    first = eng.on_attribution(verdict("gpu.xid.46"))
    assert [a.action for a in first] == ["reset_gpu"]
    # revision 2 of the same verdict: late evidence says it was the OOM killer
    out = eng.on_attribution(verdict("host.oom_kill", at=T0 + MIN, revision=2))
    assert [(a.action, a.state) for a in out] == [("reset_gpu", "expired"), ("notify", "proposed")]
    assert out[0].reason == "cause cleared: revision 2 of a1 says host.oom_kill (failed, definitive)"
    # an older revision arriving late changes nothing
    assert eng.on_attribution(verdict("gpu.xid.46", revision=1)) == []


def test_expiry_when_the_workload_completes():
    eng = RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET)
    eng.on_attribution(verdict("gpu.xid.46"))
    out = eng.on_attribution(verdict("none", at=T0 + MIN, revision=2, outcome="completed"))
    assert [(a.action, a.state) for a in out] == [("reset_gpu", "expired")]
    assert out[0].reason == "cause cleared: revision 2 of a1 says none (completed, definitive)"


def test_cause_still_supported_by_another_verdict_of_the_incident_does_not_expire():
    eng = RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET)
    a = eng.on_attribution(verdict("gpu.xid.46", att_id="job-1-v", incident="inc-9"))
    b = eng.on_attribution(verdict("gpu.xid.46", att_id="job-2-v", incident="inc-9", workload="job-2"))
    assert b == []  # same incident, target and action: one action
    out = eng.on_attribution(verdict("host.oom_kill", att_id="job-1-v", incident="inc-9", revision=2))
    # the reset stays (job-2's verdict still calls for it) and covers the lesser notify of the
    # same incident and host
    assert out == []
    assert eng.get(a[0].action_id).state == "proposed"


# --- in-place upgrade ----------------------------------------------------------------------


def test_more_severe_action_supersedes_the_pending_one():
    eng = RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET)
    reset = eng.on_attribution(verdict("gpu.xid.46", att_id="job-1-v", incident="inc-1"))[0]
    out = eng.on_attribution(verdict("gpu.xid.79", att_id="job-2-v", incident="inc-1", at=T0 + MIN, workload="job-2"))
    reboot = out[2]
    assert [(a.action, a.state) for a in out] == [("reset_gpu", "cancelled"), ("drain", "proposed"), ("reboot", "proposed")]
    assert out[0].action_id == reset.action_id and out[0].sequence == 2
    assert out[0].reason == f"superseded by {reboot.action_id} (reboot, severity 50 > 40)"
    # a less severe action for the same incident and host is covered by the pending reboot
    assert eng.on_attribution(verdict("gpu.xid.46", att_id="job-3-v", incident="inc-1", workload="job-3")) == []
    # another incident on the same host is not affected by this one's plan
    other = eng.on_attribution(verdict("gpu.xid.46", att_id="job-4-v", incident="inc-2", workload="job-4"))
    assert [(a.action, a.state) for a in other] == [("reset_gpu", "proposed")]


def test_revision_with_a_more_severe_cause_supersedes_rather_than_expires():
    eng = RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET)
    eng.on_attribution(verdict("gpu.xid.46"))
    out = eng.on_attribution(verdict("gpu.xid.79", revision=2, at=T0 + MIN))
    assert [(a.action, a.state) for a in out] == [("reset_gpu", "cancelled"), ("drain", "proposed"), ("reboot", "proposed")]
    assert out[0].reason.startswith("superseded by ")


def test_started_actions_are_not_superseded():
    eng = RemediationEngine(AUTO, fleet_size=10, fleet_nodes=FLEET)
    reset = eng.on_attribution(verdict("gpu.xid.46", incident="inc-1"))[-1]
    eng.on_started(reset.action_id, executor="slurm", at=T0 + MIN)
    out = eng.on_attribution(verdict("gpu.xid.79", att_id="a2", incident="inc-1", at=T0 + 2 * MIN))
    assert [a.action for a in out if a.state == "cancelled"] == []
    assert eng.get(reset.action_id).state == "executing"


# --- certification gating ------------------------------------------------------------------


def test_node_returns_to_service_only_after_a_passing_certification():
    eng = RemediationEngine(AUTO, fleet_size=10, fleet_nodes=FLEET)
    out = eng.on_attribution(verdict("gpu.xid.79"))
    drain, reboot = out[1].action_id, out[3].action_id
    with pytest.raises(LifecycleError, match=f"waits for drain {drain}"):
        eng.on_started(reboot, executor="slurm", at=T0 + MIN)
    started = eng.on_started(drain, executor="slurm", at=T0 + MIN)
    assert (started[0].state, started[0].result) == ("executing", "started by slurm")
    assert eng.on_started(drain, executor="slurm", at=T0 + MIN) == []  # repeated start
    ran = eng.on_execution(drain, ok=True, detail="State=DRAIN", executor="slurm", at=T0 + 2 * MIN)
    assert (ran[0].state, ran[0].result) == ("executing", "slurm: State=DRAIN; awaiting certification")
    assert eng.on_execution(drain, ok=True, detail="State=DRAIN", executor="slurm", at=T0 + 2 * MIN) == []
    assert [a.action_id for a in eng.executable()] == [reboot]

    # a certification from before the remediation says nothing about it, and says why
    stale: list[str] = []
    before = cert(True, T0 - MIN)
    assert eng.on_certification(before, stale) == []
    assert stale == [
        f"certification nvcre ({before.certification_id}) of node-1 finished at {format_utc(T0 - MIN)}, "
        f"not after {format_utc(T0 + MIN)}, when the last started step of the chain of drain {drain} started: "
        "it cannot return the node"]
    # passing, but the reboot has not run yet: the node stays out
    early = eng.on_certification(cert(True, T0 + 3 * MIN))
    assert early[0].state == "executing" and "is still pending: node stays out of service" in early[0].result
    eng.on_execution(reboot, ok=True, detail="rebooted", executor="slurm", at=T0 + 5 * MIN)
    assert eng.get(reboot).state == "done"
    # certified before the reboot started: ignored, with the reason
    stale.clear()
    assert eng.on_certification(cert(True, T0 + 4 * MIN), stale) == []
    assert len(stale) == 1 and f"not after {format_utc(T0 + 5 * MIN)}, when the last started step" in stale[0]
    # a failed certification keeps the node out
    failed = cert(False, T0 + 20 * MIN)
    kept = eng.on_certification(failed)
    assert kept[0].state == "executing"
    assert kept[0].result == (
        f"certification nvcre ({failed.certification_id}) of node-1 failed at {format_utc(T0 + 20 * MIN)} (dcgm-diag-r2): "
        "node stays out of service"
    )
    assert eng.on_certification(failed) == []  # the same certification again
    assert eng.on_certification(cert(True, T0 + 30 * MIN, host="node-2")) == []  # another host
    passed = cert(True, T0 + 40 * MIN)
    done = eng.on_certification(passed)
    assert (done[0].action_id, done[0].state) == (drain, "done")
    assert done[0].result == (
        f"returned to service: certification nvcre ({passed.certification_id}) of node-1 passed at {format_utc(T0 + 40 * MIN)}"
    )
    assert done[0].updated_at == T0 + 40 * MIN
    # the executor's cue to resume the node: structured, on the done record of the gated drain only
    assert eng.resume_host(done[0]) == "node-1"
    assert eng.resume_host(eng.get(reboot)) is None and eng.resume_host(ran[0]) is None


def test_execution_failure_and_cancel_take_the_chain_along():
    eng = RemediationEngine(AUTO, fleet_size=10, fleet_nodes=FLEET)
    out = eng.on_attribution(verdict("gpu.xid.79"))
    drain, reboot = out[1].action_id, out[3].action_id
    failed = eng.on_execution(drain, ok=False, detail="scontrol: node busy", executor="slurm", at=T0 + MIN)
    assert [(a.action_id, a.state) for a in failed] == [(drain, "executing"), (drain, "failed"), (reboot, "cancelled")]
    assert failed[1].result == "slurm: scontrol: node busy"
    assert eng.on_execution(drain, ok=False, detail="again", executor="slurm", at=T0 + 2 * MIN) == []

    eng2 = RemediationEngine(AUTO, fleet_size=10, fleet_nodes=FLEET)
    out = eng2.on_attribution(verdict("gpu.xid.79"))
    cancelled = eng2.on_command(cmd("cancel", out[1].action_id, at=T0 + MIN, by="bob", reason="manual uncordon"))
    assert [(a.action, a.state) for a in cancelled] == [("drain", "cancelled"), ("reboot", "cancelled")]
    assert cancelled[0].decision == Decision(by="bob", at=T0 + MIN, reason="manual uncordon")
    assert cancelled[1].reason == f"its predecessor drain {out[1].action_id} is cancelled"


# --- commands ------------------------------------------------------------------------------


def test_commands_record_decisions_and_duplicates_are_no_ops():
    eng = RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET)
    drain, reboot = eng.on_attribution(verdict("gpu.xid.79"))
    approve = cmd("approve", drain.action_id, at=T0 + MIN, by="alice", reason="GPU gone")
    out = eng.on_command(approve)
    assert (out[0].state, out[0].sequence, out[0].decision) == ("approved", 2, Decision(by="alice", at=T0 + MIN, reason="GPU gone"))
    assert eng.on_command(approve) == []  # redelivered
    with pytest.raises(LifecycleError, match="approved -> approved"):
        eng.on_command(cmd("approve", drain.action_id, at=T0 + 2 * MIN, by="carol"))
    rejected = eng.on_command(cmd("reject", reboot.action_id, at=T0 + MIN, by="bob", reason="drain is enough"))
    assert (rejected[0].state, rejected[0].decision.by, rejected[0].reason) == ("rejected", "bob", "drain is enough")
    with pytest.raises(LifecycleError, match="rejected -> cancelled"):
        eng.on_command(cmd("cancel", reboot.action_id, at=T0 + 3 * MIN))
    with pytest.raises(UnknownActionError, match="act-nope"):
        eng.on_command(cmd("approve", "act-nope"))
    with pytest.raises(UnknownActionError):
        eng.on_execution("act-nope", ok=True, detail="", executor="x", at=T0)
    # dry-run actions go to the dry-run executor only
    assert [a.action_id for a in eng.executable("dry_run")] == [drain.action_id]
    assert eng.executable(("auto", "needs_approval")) == []


# --- state round-trip and determinism ------------------------------------------------------


def script():
    """A mixed sequence of inputs as (method, args, kwargs) -- action ids are looked up lazily."""
    def first(eng, kind, host="node-1"):
        return next(a.action_id for a in eng.actions() if a.action == kind and a.target.host == host)

    return [
        lambda e: e.on_attribution(verdict("gpu.xid.79", "node-1", "a1", incident="i1")),
        lambda e: e.on_attribution(verdict("gpu.xid.46", "node-2", "a2", T0 + MIN)),
        lambda e: e.on_attribution(verdict("gpu.xid.46", "node-3", "a3", T0 + MIN, workload="job-3")),
        lambda e: e.on_command(cmd("approve", first(e, "drain"), at=T0 + 2 * MIN)),
        lambda e: e.on_execution(first(e, "drain"), ok=True, detail="drained", executor="dry-run", at=T0 + 3 * MIN),
        lambda e: e.on_command(cmd("approve", first(e, "reboot"), at=T0 + 3 * MIN)),
        lambda e: e.on_attribution(verdict("gpu.xid.79", "node-2", "a2", T0 + 4 * MIN, revision=2)),
        lambda e: e.on_command(cmd("reject", first(e, "reset_gpu", "node-3"), at=T0 + 5 * MIN, by="bob")),
        lambda e: e.on_execution(first(e, "reboot"), ok=True, detail="rebooted", executor="dry-run", at=T0 + 6 * MIN),
        lambda e: e.on_certification(cert(True, T0 + 30 * MIN)),
        lambda e: e.tick(T0 + 2 * 3600 * NS),
        lambda e: e.on_attribution(verdict("gpu.xid.79", "node-4", "a4", T0 + 3 * 3600 * NS, incident="i4")),
    ]


def run(eng, steps):
    return [canonical_json(r) for step in steps for r in step(eng)]


@pytest.mark.slow
def test_state_round_trip_mid_way_gives_the_same_outputs():
    steps = script()
    for cut in range(len(steps) + 1):
        straight = RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET)
        run(straight, steps[:cut])
        rest_straight = run(straight, steps[cut:])

        first = RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET)
        run(first, steps[:cut])
        saved = json.loads(json.dumps(first.to_state()))
        rebuilt = RemediationEngine.from_state(saved, load_policy(), fleet_size=10, fleet_nodes=FLEET)
        assert canonical_json(rebuilt.to_state()) == canonical_json(saved)
        assert run(rebuilt, steps[cut:]) == rest_straight
        assert canonical_json(rebuilt.to_state()) == canonical_json(straight.to_state())
    final = [(a.action, a.target.host, a.state) for a in straight.actions()]
    assert final == [
        ("drain", "node-1", "done"), ("reboot", "node-1", "done"),
        ("reset_gpu", "node-2", "cancelled"),  # superseded by revision 2's drain + reboot
        ("reset_gpu", "node-3", "rejected"),
        ("drain", "node-2", "expired"), ("reboot", "node-2", "cancelled"),  # never approved
        ("drain", "node-4", "proposed"), ("reboot", "node-4", "proposed"),
    ]


def test_same_inputs_give_byte_identical_outputs():
    a = run(RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET), script())
    b = run(RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET), script())
    assert a == b and len(a) > 15
    # ids are content hashes of (cluster, incident, target, action): no counter, no clock
    assert json.loads(a[0])["action_id"] == RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET).on_attribution(
        verdict("gpu.xid.79", "node-1", "a1", incident="i1"))[0].action_id


def test_from_state_rejects_an_unknown_format():
    with pytest.raises(ValueError, match="remediation state format 99"):
        RemediationEngine.from_state({"format": 99}, load_policy())


def test_revision_with_a_less_severe_cause_expires_the_old_plan():
    eng = RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET)
    drain, reboot = eng.on_attribution(verdict("gpu.xid.79"))
    out = eng.on_attribution(verdict("gpu.xid.46", revision=2, at=T0 + MIN))
    assert [(a.action, a.state, a.reason) for a in out] == [
        ("drain", "expired", "cause cleared: revision 2 of a1 says gpu.xid.46 (failed, definitive)"),
        ("reboot", "cancelled", f"its predecessor drain {drain.action_id} is expired"),
        ("reset_gpu", "proposed", out[2].reason),
    ]


def test_definitive_revision_supersedes_the_recertify_of_an_ambiguous_one():
    eng = RemediationEngine(load_policy(), fleet_size=10, fleet_nodes=FLEET)
    amb = verdict("gpu.xid.79")
    amb.quality = "ambiguous"
    (recert,) = eng.on_attribution(amb)
    assert recert.action == "recertify"
    out = eng.on_attribution(verdict("gpu.xid.79", revision=2, at=T0 + MIN))
    assert [(a.action, a.state) for a in out] == [("recertify", "cancelled"), ("drain", "proposed"), ("reboot", "proposed")]
    assert out[0].reason == f"superseded by {out[2].action_id} (reboot, severity 50 > 10)"


def test_two_verdicts_of_one_incident_revised_in_turn_give_one_proposal_and_act_on_the_switch_end():
    """A stream re-emits a workload verdict and the fabric verdict of the same incident many
    times (provisional, final, late evidence). The action they both call for is proposed once:
    its verdict guards combine both verdicts whatever their order, so the revisions do not flip
    it back and forth; and of the two ends of the bad cable only the switch port is disabled."""
    from streams.replay import replay_bundle
    from correlators.remediation import RemediationEngine, load_policy

    bundle = Path(__file__).resolve().parents[2] / "examples/incidents/fabric-degrading-cable-symbol-errors"
    result = replay_bundle(bundle)
    verdicts = [a for a in result.attributions if a.scope.kind in ("workload", "fabric_port")]
    assert {a.quality for a in verdicts} == {"definitive", "probable"}  # they disagree on quality
    engine = RemediationEngine(load_policy(), fleet_size=100, topology=bundle_topology(bundle))
    records = []
    for revision in range(1, 6):
        for att in (verdicts if revision % 2 else verdicts[::-1]):
            records += engine.on_attribution(att.model_copy(update={"revision": revision}))
    assert [(r.action, r.target.port, r.state, r.sequence) for r in records] == [
        ("disable_port", "leaf-01/2", "proposed", 1)]


def test_a_pending_proposal_takes_the_cause_of_the_final_verdict():
    """A provisional verdict proposes an action; the final revision of the same verdict calls
    for the same action with a better-named cause: the proposal is updated in place (one new
    record with the final cause), not left with the provisional one's."""
    from streams.replay import replay_bundle
    from correlators.remediation import RemediationEngine, load_policy

    bundle = Path(__file__).resolve().parents[2] / "examples/incidents/fabric-port-flap-host-side-only"
    result = replay_bundle(bundle)
    final = result.attribution
    provisional = final.model_copy(update={
        "revision": 1, "status": "provisional",
        "root_cause": final.root_cause.model_copy(update={"code": "fabric.port.link_down"})})
    engine = RemediationEngine(load_policy(), fleet_size=100, topology=bundle_topology(bundle))
    first = engine.on_attribution(provisional)
    assert [(r.action, r.cause_code, r.sequence) for r in first] == [("disable_port", "fabric.port.link_down", 1)]
    second = engine.on_attribution(final.model_copy(update={"revision": 2}))
    assert second[0].action_id == first[0].action_id
    assert (second[0].cause_code, second[0].sequence, second[0].state) == ("fabric.port.flapping", 2, "proposed")


def test_a_withdrawn_fabric_verdict_lets_its_proposals_lapse_and_proposes_no_recertification():
    """The stream withdraws a port's verdict when the evidence turns out to be a switch fault
    (status withdrawn, no root cause, quality insufficient): its proposals expire; no recertify
    of its hosts is proposed, as it would be for a verdict that is merely insufficient."""
    from correlators.fabric import withdrawal
    from streams.replay import replay_bundle
    from correlators.remediation import RemediationEngine, load_policy

    bundle = Path(__file__).resolve().parents[2] / "examples/incidents/fabric-port-flap-host-side-only"
    result = replay_bundle(bundle)
    fabric = next(a for a in result.attributions if a.scope.kind == "fabric_port")
    engine = RemediationEngine(load_policy(), fleet_size=100, topology=bundle_topology(bundle))
    (proposed,) = engine.on_attribution(fabric)
    withdrawn = withdrawal(fabric, []).model_copy(update={"revision": 2})
    records = engine.on_attribution(withdrawn)
    assert [(r.action_id, r.state) for r in records] == [(proposed.action_id, "expired")]
    assert records[0].reason == (f"cause cleared: revision 2 of {fabric.attribution_id} says withdrawn "
                                 "(unknown, insufficient)")
