"""The remediation machine without a broker: typed messages in, effects out, and the same
final actions whatever order the verdicts, allocations, commands and ticks arrive in (a command
that overtakes its proposal is parked and applied when the proposal comes)."""

from __future__ import annotations

import collections
import random

import pytest

from correlators.keyed import DeadLetter, Execute, Publish
from correlators.remediation import RemediationEngine, parse_policy
from correlators.remediation.guards import DomainBudgetSettings, GuardSettings, WorkloadBudgetSettings
from schemas.bundle import TopologySpec
from schemas.messages import (
    AllocationMessage,
    CommandInMessage,
    ExecutedMessage,
    TickMessage,
    VerdictInMessage,
    message_json,
    parse_remediation_message,
)
from schemas.records import Attribution, Culprits, EvidenceItem, RemediationCommand, RootCause, Scope, Window
from sinks.executors import ExecutorSettings
from streams.remediation.machine import RemediationMachine
from streams.remediation.runner import RemediationRunner

NS = 1_000_000_000
T0 = 1_800_000_000 * NS
POLICY = parse_policy("""
version: machine-1
rules:
  - id: off-the-bus
    match: {code: gpu.xid.79}
    actions:
      - {action: drain, target: host, mode: auto, requires_certification: true}
      - {action: reboot, target: host, mode: auto}
  - id: by-hand
    match: {code: gpu.xid.62}
    actions: [{action: drain, target: host}]
""")
TOPOLOGY = TopologySpec(domains={"rack-1": ["node-1", "node-2", "node-3", "node-4"],
                                 "rack-2": ["node-5", "node-6", "node-7", "node-8"]})
ROOMY = GuardSettings(domain_budget=DomainBudgetSettings(default=10),
                      workload_budget=WorkloadBudgetSettings(max_nodes=10))


def verdict(code: str, host: str, att_id: str, workload: str) -> Attribution:
    return Attribution(
        attribution_id=att_id, revision=1, scope=Scope(kind="workload", id=workload, cluster="c1"),
        window=Window(start=T0 - 600 * NS, end=T0), outcome="failed", domain="gpu_hardware",
        root_cause=RootCause(code=code, text=f"{code} on {host}"), culprits=Culprits(hosts=[host]),
        confidence=0.9, quality="definitive", status="final", ruleset_version="t", engine_version="t", decided_at=T0,
        evidence=[EvidenceItem(at=T0, event_id=f"evt-{att_id}", type="gpu.xid", role="cause", host=host,
                               summary="cause")])


def machine() -> RemediationMachine:
    ticks = iter(range(10**6))
    runner = RemediationRunner(RemediationEngine(POLICY, topology=TOPOLOGY, settings=ROOMY),
                               ExecutorSettings(clusters={}), clock=lambda: T0 + next(ticks) * NS)
    return RemediationMachine("c1", runner, running=set(), lost_after_s=3600)


def drive(m: RemediationMachine, messages: list) -> tuple[list, list[DeadLetter]]:
    """Apply ``messages`` (each through its wire form), then every executor result the effects
    ask for, until none is left; returns every record published and every dead letter."""
    queue = collections.deque(messages)
    published, letters = [], []
    while queue:
        message = parse_remediation_message(message_json(queue.popleft()))
        for effect in m.apply(message):
            if isinstance(effect, Publish):
                published.append(effect.record)
            elif isinstance(effect, DeadLetter):
                letters.append(effect)
            else:
                assert isinstance(effect, Execute) and effect.key == "c1"
                m.running.add(("c1", effect.job.action_id))
                call = RemediationRunner.run_job if effect.kind == "executed" else RemediationRunner.run_resume
                result = call(effect.job)
                queue.append(ExecutedMessage(kind=effect.kind, action_id=effect.job.action_id,
                                             at=m.runner.clock(), result=result.model_dump(mode="json")))
    return published, letters


def final(published: list) -> dict[str, tuple]:
    """Each action's last state: (action, host, state)."""
    latest = {}
    for record in published:
        if record.action_id not in latest or record.sequence > latest[record.action_id].sequence:
            latest[record.action_id] = record
    return {aid: (r.action, r.target.host, r.state) for aid, r in sorted(latest.items())}


def test_an_xid79_verdict_is_drained_and_rebooted_through_execute_effects() -> None:
    m = machine()
    published, letters = drive(m, [AllocationMessage(cluster="c1", workload_id="job-1", nodes=["node-1"], at=T0),
                                   VerdictInMessage(attribution=verdict("gpu.xid.79", "node-1", "a1", "job-1"))])
    assert letters == []
    got = final(published)
    # the drain ran and waits for the node's certification before it is done; the reboot is done
    assert sorted(got.values()) == [("drain", "node-1", "executing"), ("reboot", "node-1", "done")]
    drain = [r for r in published if r.action == "drain"]
    assert [r.state for r in drain] == ["proposed", "approved", "executing", "executing"]
    assert "would do: drain host=node-1" in drain[-1].result and "awaiting" in drain[-1].result
    assert m.running == set()  # every execution reported back
    assert m.to_state() == RemediationRunner.from_state(m.to_state(), POLICY, ExecutorSettings(clusters={}),
                                                        topology=TOPOLOGY, settings=ROOMY).to_state()


def test_a_message_of_no_remediation_kind_is_refused_at_the_edge() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        parse_remediation_message(b'{"kind": "flush"}')
    with pytest.raises(ValidationError):
        parse_remediation_message(b'{"kind": "executed", "action_id": "x"}')  # no time, no result


def test_the_final_actions_are_the_same_whatever_the_arrival_order() -> None:
    v79 = VerdictInMessage(attribution=verdict("gpu.xid.79", "node-1", "a1", "job-1"))
    v62 = VerdictInMessage(attribution=verdict("gpu.xid.62", "node-5", "a2", "job-2"))
    allocations = [AllocationMessage(cluster="c1", workload_id="job-1", nodes=["node-1", "node-2"], at=T0),
                   AllocationMessage(cluster="c1", workload_id="job-2", nodes=["node-5", "node-6"], at=T0)]
    # the by-hand drain's id, from a first run: the approval names it
    first, _ = drive(machine(), [*allocations, v79, v62])
    by_hand = next(r for r in first if r.action == "drain" and r.target.host == "node-5")
    assert final(first)[by_hand.action_id] == ("drain", "node-5", "proposed")
    approve = CommandInMessage(command=RemediationCommand(command="approve", action_id=by_hand.action_id, by="alice",
                                                          reason="checked", at=T0, cluster="c1").with_id(),
                               received_at=T0 + 5 * NS)
    messages = [*allocations, v79, v62, approve, TickMessage()]
    expected = None
    for seed in range(12):
        order = random.Random(seed).sample(messages, len(messages))
        published, letters = drive(machine(), order + [TickMessage()])
        assert letters == [], (seed, letters)
        got = final(published)
        assert got[by_hand.action_id] == ("drain", "node-5", "done"), seed  # approved, parked or not
        expected = expected or got
        assert got == expected, seed
    assert sorted(expected.values()) == [("drain", "node-1", "executing"), ("drain", "node-5", "done"),
                                         ("reboot", "node-1", "done")]


def test_a_rejected_command_is_a_dead_letter_with_its_origin() -> None:
    m = machine()
    proposed, _ = drive(m, [VerdictInMessage(attribution=verdict("gpu.xid.62", "node-5", "a2", "job-2"))])
    action_id = proposed[-1].action_id
    for command in ("reject", "approve"):  # approving a rejected action cannot apply
        cmd = RemediationCommand(command=command, action_id=action_id, by="alice", reason="no", at=T0,
                                 cluster="c1").with_id()
        origin = {"topic": "faultstream.remediation-commands", "partition": 0, "offset": 7, "key": "c1",
                  "original": '{"command": "%s"}' % command}
        _, letters = drive(m, [CommandInMessage(command=cmd, received_at=T0 + NS, origin=origin)])
    assert len(letters) == 1 and letters[0].reason.startswith("command rejected: ")
    assert letters[0].origin["offset"] == 7 and letters[0].original == b'{"command": "approve"}'
