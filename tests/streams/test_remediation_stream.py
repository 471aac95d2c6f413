"""Remediation driven end to end (``streams/remediation/agent.py``, ``streams/remediation/runner.py``,
``streams/remediation/cli.py``).

* The Kafka-free :class:`RemediationRunner` with the **real Slurm** (``slurm_cluster``, Slurm
  22.05 on this machine): a final GPU verdict naming the Slurm node -> a drain (policy mode
  ``auto``) -> the node is DRAINED with the reason; a failed certification keeps it drained; a
  passing one RESUMEs it (idle). An unknown node and an executor that raises end ``failed``
  with the detail; a resume that fails is said on the ``done`` record. The node is put back in
  a ``finally`` whatever happens.
* The runner's command handling: the same approve twice (same id, and a second person's), an
  approve that overtakes its proposal, commands that no longer fit; state round-trip with
  executions in flight (a worker that died mid-execution: ``failed``, never re-run).
* The streaming path: a real ``faultstream worker`` subprocess on the real local Kafka broker;
  the example bundle ``public-rc15-pcie-aer-xid79-multinode`` (XID 79 on node-a02) published
  with ``faultstream connect bundle`` -> drain and reboot ``proposed`` on ``remediations`` -> the
  worker is killed and a new one (no local state) recovers the engine from the changelog ->
  ``faultstream remediation approve`` (subprocess) -> ``approved`` -> ``executing`` -> ``done``
  in dry run (the reboot; the drain waits for certification until ``faultstream connect
  certifications`` publishes a passing DCGM run), each transition one record with increasing
  ``sequence``; duplicated and repeated approvals add no transition; ``remediation list --json``
  shows the final states; the records are in ClickHouse; bad commands are dead letters.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from connectors.slurm import parse_scontrol_nodes
from correlators.remediation import RemediationEngine, load_policy, parse_policy
from schemas.records import (
    Attribution,
    Certification,
    CertificationTest,
    Culprits,
    EvidenceItem,
    GpuRef,
    RemediationAction,
    RemediationCommand,
    RootCause,
    Scope,
    Window,
    canonical_json,
)
from sinks.executors import ExecutionResult, ExecutorSettings
from streams.command_auth import Keyring, authenticate, sign
from streams.remediation.runner import CommandRejected, RemediationRunner
from tests.slurm_fixtures import slurm_cluster  # noqa: F401
from tests.streams.test_stream import consume, publish, stream_env  # noqa: F401
from transport.kafka_settings import with_partitioner
from schemas.utc import format_utc

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "examples" / "incidents" / "public-rc15-pcie-aer-xid79-multinode"
CERTS = ROOT / "tests" / "data" / "certifications"
NS = 1_000_000_000
T0 = 1_800_000_000 * NS
#: The nodes the runner tests' verdicts name: a remediation target must be a known node.
FLEET = ["node-1", "node-2"]
#: The command key of the streaming tests: the worker and the CLI both get it.
COMMAND_KEYS = {"test-1": "t" * 40}

AUTO_DRAIN = parse_policy("""
version: stream-test-1
policy_id: stream-test
rules:
  - id: off-the-bus
    source: "test policy: drain without a person"
    match: {code: gpu.xid.79}
    actions:
      - {action: drain, target: host, mode: auto, requires_certification: true}
""")

NEEDS_APPROVAL = parse_policy("""
version: stream-test-2
policy_id: stream-test
default_mode: needs_approval
rules:
  - id: off-the-bus
    match: {code: gpu.xid.79}
    actions:
      - {action: drain, target: host, requires_certification: true}
""")


def gpu_verdict(host: str, cluster: str, *, at: int = T0, final: bool = True, att_id: str = "wl-1") -> Attribution:
    """A final (or provisional) definitive verdict: XID 79 on GPU 3 of ``host``."""
    return Attribution(
        attribution_id=att_id, scope=Scope(kind="workload", id="job-77", cluster=cluster),
        window=Window(start=at - 600 * NS, end=at), outcome="failed", domain="gpu_hardware",
        root_cause=RootCause(code="gpu.xid.79", text=f"GPU 3 of {host} fell off the bus (XID 79)"),
        culprits=Culprits(hosts=[host], gpus=[GpuRef(index=3)]), confidence=0.95, quality="definitive",
        status="final" if final else "provisional", ruleset_version="t", engine_version="t", decided_at=at,
        # the deciding line was collected on the culprit: its drain is corroborated
        evidence=[EvidenceItem(at=at, event_id="evt-1", type="gpu.xid", role="cause", host=host, summary="Xid 79")],
    )


def certification(host: str, cluster: str, passed: bool, at: int) -> Certification:
    return Certification(
        host=host, cluster=cluster, suite="dcgm-diag-r2", passed=passed, finished_at=at,
        tests=[CertificationTest(name="memory", result="pass" if passed else "fail",
                                 detail="" if passed else "GPU3: double-bit ECC error"),
               CertificationTest(name="pcie", result="pass")]).with_id()


def approve(action_id: str, cluster: str, *, by: str = "alice", at: int = T0 + 60 * NS,
            command: str = "approve", reason: str = "checked") -> RemediationCommand:
    return RemediationCommand(command=command, action_id=action_id, cluster=cluster, by=by, reason=reason, at=at).with_id()


class Clock:
    """A wall clock the test moves: UTC ns, one second per call."""

    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += NS
        return self.now


# == the runner on the real Slurm ===================================================================


def node_fields(node: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "-o", "show", "node", node], capture_output=True, text=True, check=True)
    return parse_scontrol_nodes(out.stdout)[node]


def node_state(node: str) -> tuple[str, set[str]]:
    parts = [p.rstrip("*~#!%$@^-") for p in node_fields(node)["State"].split("+")]
    return parts[0], set(parts[1:])


def in_service(node: str) -> bool:
    """Idle and neither drained, down nor failed (slurmctld may flag NOT_RESPONDING between pings)."""
    base, flags = node_state(node)
    return base == "IDLE" and not flags & {"DRAIN", "DOWN", "FAIL"}


def put_back(node: str) -> None:
    base, flags = node_state(node)
    if "DRAIN" in flags or base in ("DOWN", "DRAINED"):
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], capture_output=True)
    assert "DRAIN" not in node_state(node)[1], "the test node was left drained"


def slurm_runner(cluster: str, node: str, policy: Any = AUTO_DRAIN, clock: Clock | None = None) -> RemediationRunner:
    executors = ExecutorSettings(clusters={cluster: {"kind": "slurm", "attempts": 1}})
    # "no-such-node-9": a valid name on the fleet list that Slurm does not know
    return RemediationRunner(RemediationEngine(policy, fleet_size=8, fleet_nodes=[node, "no-such-node-9"]),
                             executors, clock=clock or Clock(T0))


def test_slurm_drained_by_a_verdict_kept_out_by_a_failed_certification_resumed_by_a_passing_one(slurm_cluster):  # noqa: F811
    node, cluster = slurm_cluster.node, slurm_cluster.name
    clock = Clock(T0)
    runner = slurm_runner(cluster, node, clock=clock)
    try:
        assert in_service(node)
        proposed, approved = runner.handle_attribution(gpu_verdict(node, cluster))
        aid = proposed.action_id
        assert (proposed.state, approved.state, approved.decision.by) == ("proposed", "approved", "policy:stream-test@stream-test-1")
        assert all(g.passed for g in approved.guards)

        started, executed = runner.run_due()
        assert (started.state, started.executor, started.sequence) == ("executing", "slurm", 3)
        assert (executed.state, executed.sequence) == ("executing", 4)
        base, flags = node_state(node)
        assert "DRAIN" in flags, (base, flags)
        reason = node_fields(node)["Reason"]
        # Reason=faultstream <action id>: <action reason>, and slurmctld's " [user@time]"
        assert reason.startswith(f"faultstream {aid}: rule off-the-bus: GPU 3 of {node} fell off the bus (XID 79)")
        assert executed.result.startswith(f"slurm: {node} State={node_fields(node)['State']} Reason=faultstream {aid}: ")
        assert executed.result.endswith("awaiting certification")
        assert f"[ran: scontrol update NodeName={node} State=DRAIN " in executed.result
        assert runner.run_due() == []  # nothing more to do: the drain waits for certification

        failed = certification(node, cluster, False, clock.now + 60 * NS)
        (kept,) = runner.handle_certification(failed)
        assert (kept.state, kept.sequence) == ("executing", 5)
        assert "failed" in kept.result and "node stays out of service" in kept.result
        assert runner.run_due() == []
        assert "DRAIN" in node_state(node)[1]  # still drained

        passed = certification(node, cluster, True, clock.now + 120 * NS)
        assert runner.handle_certification(passed) == []  # the done record waits for the resume
        assert "DRAIN" in node_state(node)[1]
        (done,) = runner.run_due()
        assert (done.action_id, done.state, done.sequence) == (aid, "done", 6)
        assert done.result.startswith(f"returned to service: certification dcgm-diag-r2 ({passed.certification_id}) "
                                      f"of {node} passed at {format_utc(passed.finished_at)}; slurm resume: {node} State=IDLE")
        assert in_service(node)
        assert "Reason" not in node_fields(node)
        assert runner.run_due() == [] and runner.inflight() == {}
    finally:
        put_back(node)


def test_slurm_approved_by_a_person_and_an_unknown_node_fails_without_losing_the_action(slurm_cluster):  # noqa: F811
    node, cluster = slurm_cluster.node, slurm_cluster.name
    runner = slurm_runner(cluster, node, NEEDS_APPROVAL)
    try:
        (real,) = runner.handle_attribution(gpu_verdict(node, cluster))
        (ghost,) = runner.handle_attribution(gpu_verdict("no-such-node-9", cluster, att_id="wl-2"))
        assert (real.state, real.mode) == ("proposed", "needs_approval")
        assert runner.run_due() == []  # nothing runs without a decision
        assert in_service(node)
        (ok,) = runner.handle_command(approve(real.action_id, cluster, by="bob", reason="XID 79 confirmed"))
        (bad,) = runner.handle_command(approve(ghost.action_id, cluster))
        assert (ok.decision.by, ok.decision.reason) == ("bob", "XID 79 confirmed")
        records = runner.run_due()
        by_id = {}
        for r in records:
            by_id.setdefault(r.action_id, []).append(r)
        assert [r.state for r in by_id[real.action_id]] == ["executing", "executing"]
        assert "DRAIN" in node_state(node)[1]
        assert [r.state for r in by_id[ghost.action_id]] == ["executing", "failed"]
        assert by_id[ghost.action_id][-1].result.startswith("slurm: ")
        assert "Invalid node name specified" in by_id[ghost.action_id][-1].result
        assert runner.engine.get(ghost.action_id).state == "failed"  # recorded, not lost
    finally:
        put_back(node)


class _Raising:
    """An executor with a bug: every call raises (what the runner must survive)."""

    name = "webhook"

    def execute(self, action):
        raise RuntimeError("boom: executor bug")

    def resume(self, host, reason):
        raise RuntimeError("boom: resume bug")

    def plan(self, action):
        return []

    def plan_resume(self, host, reason):
        return []


class _RaisingSettings(ExecutorSettings):
    def executor_for(self, cluster):  # noqa: D401 -- every cluster gets the buggy executor
        return _Raising()


def test_an_executor_that_raises_fails_the_action_and_a_failed_resume_is_on_the_done_record():
    runner = RemediationRunner(RemediationEngine(AUTO_DRAIN, fleet_size=8, fleet_nodes=FLEET), _RaisingSettings(), clock=Clock(T0))
    (_, approved) = runner.handle_attribution(gpu_verdict("node-1", "c1"))
    started, failed = runner.run_due()
    assert (failed.state, failed.executor) == ("failed", "webhook")
    assert failed.result == "webhook: executor raised RuntimeError: boom: executor bug"

    # a second incident on another node: the executor works for execute but not for resume
    class _ResumeFails(_Raising):
        def execute(self, action):
            return ExecutionResult(ok=True, detail="cordoned", executor="webhook")

    class _Settings(ExecutorSettings):
        def executor_for(self, cluster):
            return _ResumeFails()

    runner.executors = _Settings()
    runner.handle_attribution(gpu_verdict("node-2", "c1", att_id="wl-2", at=T0 + 3600 * NS))
    runner.run_due()
    assert runner.handle_certification(certification("node-2", "c1", True, T0 + 7200 * NS)) == []
    (done,) = runner.run_due()
    assert done.state == "done"
    assert done.result.endswith("; webhook resume FAILED: executor raised RuntimeError: boom: resume bug; "
                                "the node is still out of service: return node-2 to service by hand")


# == commands: duplicates, order, moot decisions ===================================================


def dry_runner(policy: Any = NEEDS_APPROVAL, clock: Clock | None = None, **kw: Any) -> RemediationRunner:
    return RemediationRunner(RemediationEngine(policy, fleet_size=8, fleet_nodes=FLEET), ExecutorSettings(clusters={}),
                             clock=clock or Clock(T0), **kw)


def test_the_same_approval_twice_and_a_second_persons_approval_add_no_transition():
    runner = dry_runner()
    (proposed,) = runner.handle_attribution(gpu_verdict("node-1", "c1"))
    first = approve(proposed.action_id, "c1")
    (approved,) = runner.handle_command(first)
    assert (approved.sequence, approved.decision.by) == (2, "alice")
    assert runner.handle_command(first) == []  # the same record delivered again
    again = runner.apply_command(approve(proposed.action_id, "c1", by="carol", at=T0 + 90 * NS))
    assert (again.outcome, again.records) == ("duplicate", [])
    assert again.detail == f"approve of {proposed.action_id}: already approved by alice"
    records = runner.run_due()
    assert [(r.sequence, r.state) for r in records] == [(3, "executing"), (4, "executing")]
    assert runner.apply_command(first).outcome == "duplicate"  # and after it ran
    assert runner.engine.get(proposed.action_id).sequence == 4


def test_an_approval_that_overtakes_its_proposal_waits_for_it():
    clock = Clock(T0)
    runner = dry_runner(clock=clock, command_wait_s=600)
    # the proposal's id is deterministic: learn it from another engine fed the same verdict
    (proposed,) = dry_runner().handle_attribution(gpu_verdict("node-1", "c1"))
    early = runner.apply_command(approve(proposed.action_id, "c1"), origin={"topic": "t", "offset": 7})
    assert (early.outcome, early.records) == ("parked", [])
    assert [c.action_id for c in runner.parked()] == [proposed.action_id]
    # the state survives a restart with the command still waiting
    runner = RemediationRunner.from_state(json.loads(json.dumps(runner.to_state())), NEEDS_APPROVAL,
                                          ExecutorSettings(clusters={}), fleet_size=8, fleet_nodes=FLEET, clock=clock)
    records = runner.handle_attribution(gpu_verdict("node-1", "c1"))
    assert [(r.sequence, r.state) for r in records] == [(1, "proposed"), (2, "approved")]
    assert records[1].decision.by == "alice" and runner.parked() == []

    # a command for an action that never comes is given up after command_wait_s
    runner.apply_command(approve("act-000000000000000000000000", "c1"), origin={"topic": "t", "offset": 9})
    assert runner.expire_parked(clock.now + 599 * NS) == []
    ((cmd, origin, reason),) = runner.expire_parked(clock.now + 601 * NS)
    assert origin == {"topic": "t", "offset": 9}
    assert reason == ("unknown remediation action 'act-000000000000000000000000': no proposal for it within "
                      "600 s (approve by alice)")


def test_decisions_that_no_longer_fit_are_rejected_not_applied():
    runner = dry_runner()
    (proposed,) = runner.handle_attribution(gpu_verdict("node-1", "c1"))
    aid = proposed.action_id
    (rejected,) = runner.handle_command(approve(aid, "c1", command="reject", by="dave", reason="known issue"))
    assert (rejected.state, rejected.decision.by, rejected.reason) == ("rejected", "dave", "known issue")
    with pytest.raises(CommandRejected, match=f"approve of {aid} by alice rejected: the action is rejected"):
        runner.handle_command(approve(aid, "c1", at=T0 + 120 * NS))
    assert runner.apply_command(approve(aid, "c1", command="reject", by="erin", at=T0 + 130 * NS)).outcome == "duplicate"
    assert runner.engine.get(aid).sequence == 2


def test_a_tripped_breaker_holds_execution_until_a_person_resets_it():
    runner = RemediationRunner(RemediationEngine(AUTO_DRAIN, fleet_nodes=FLEET), ExecutorSettings(clusters={}), clock=Clock(T0))
    first = runner.handle_attribution(gpu_verdict("node-1", "c1"))
    (second,) = runner.handle_attribution(gpu_verdict("node-2", "c1", att_id="wl-2", at=T0 + 10 * NS))
    assert [r.state for r in first] == ["proposed", "approved"]
    breaker = next(g for g in second.guards if g.guard == "circuit_breaker")
    assert (second.state, second.mode, breaker.passed) == ("proposed", "needs_approval", False)
    assert breaker.detail == "tripped now: 2 of 2 nodes taken out within 300 s (limit 50%)"
    assert runner.run_due() == []  # the approved drain of node-1 is held too
    reset = RemediationCommand(command="reset_breaker", cluster="c1", by="ops", reason="two bad GPUs, checked",
                               at=T0 + 60 * NS).with_id()
    result = runner.apply_command(reset)
    assert result.outcome == "applied"
    # the blocked drain stays pending for a person: a reset replays nothing
    assert [(r.target.host, r.state, r.mode) for r in result.records] == [("node-2", "proposed", "needs_approval")]
    assert result.detail == "circuit breaker of 'c1' closed by ops: 1 transitions of blocked actions"
    (approved,) = runner.handle_command(approve(second.action_id, "c1", by="ops", reason="two bad GPUs, checked"))
    assert approved.state == "approved"
    ran = runner.run_due()
    assert sorted((r.target.host, r.state) for r in ran) == [("node-1", "executing")] * 2 + [("node-2", "executing")] * 2
    assert runner.apply_command(reset).records == []  # the same reset again


def test_a_worker_that_died_mid_execution_fails_the_action_and_never_reruns_it():
    clock = Clock(T0)
    runner = dry_runner(AUTO_DRAIN, clock=clock)
    runner.handle_attribution(gpu_verdict("node-1", "c1"))
    started, jobs = runner.start_due()  # executing recorded; the executor never reports
    assert [r.state for r in started] == ["executing"] and len(jobs) == 1
    state = json.loads(json.dumps(runner.to_state()))
    assert list(state["inflight"]) == [jobs[0].action_id]
    again = RemediationRunner.from_state(state, AUTO_DRAIN, ExecutorSettings(clusters={}), fleet_size=8,
                                         fleet_nodes=FLEET, clock=clock)
    assert again.start_due() == ([], [])  # not started twice
    assert again.fail_lost(set(), lost_after_s=900, now=jobs[0].started_at + 899 * NS) == []
    assert again.fail_lost({jobs[0].action_id}, lost_after_s=900, now=jobs[0].started_at + 901 * NS) == []  # still running here
    (failed,) = again.fail_lost(set(), lost_after_s=900, now=jobs[0].started_at + 901 * NS)
    assert failed.state == "failed"
    assert failed.result == (f"dry_run: outcome unknown: the worker stopped while the dry_run executor ran (started at "
                             f"{jobs[0].started_at}); check the node, then cancel or redo by hand")
    # the lost executor's late report changes nothing
    assert again.finish_job(jobs[0].action_id, ExecutionResult(ok=True, detail="late", executor="dry_run")) == []


def test_dry_run_mode_never_reaches_a_real_executor():
    runner = RemediationRunner(RemediationEngine(load_policy(), fleet_size=8, fleet_nodes=FLEET),
                               ExecutorSettings(clusters={"c1": {"kind": "slurm", "scontrol": "/nonexistent/scontrol"}}),
                               clock=Clock(T0))
    drain = next(r for r in runner.handle_attribution(gpu_verdict("node-1", "c1")) if r.action == "drain")
    assert drain.mode == "dry_run"  # the packaged policy
    runner.handle_command(approve(drain.action_id, "c1"))
    started, executed = runner.run_due()
    assert started.executor == "dry_run"
    # the plan of the Slurm executor, logged, not run (the binary does not even exist)
    assert executed.result.startswith("dry_run: dry-run: would run: /nonexistent/scontrol update NodeName=node-1 "
                                      f"State=DRAIN 'Reason=faultstream {drain.action_id}: rule gpu-fell-off-bus:")


# == the streaming path ===========================================================================


def cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def records_of(messages: list[Any]) -> list[RemediationAction]:
    return [RemediationAction.model_validate_json(m.value()) for m in messages]


def by_action(records: list[RemediationAction]) -> dict[str, list[RemediationAction]]:
    out: dict[str, list[RemediationAction]] = {}
    for r in records:
        out.setdefault(r.action, []).append(r)
    return out


def latest_of(records: list[RemediationAction], kind: str) -> RemediationAction | None:
    mine = [r for r in records if r.action == kind]
    return max(mine, key=lambda r: r.sequence) if mine else None


def test_bundle_to_proposal_to_cli_approval_to_dry_run_execution_on_a_real_broker(stream_env, kafka_bootstrap,  # noqa: F811
                                                                                  kafka_topic_factory):
    env, prefix = stream_env["env"], stream_env["prefix"]
    env["FAULTSTREAM_COMMAND_KEYS"] = json.dumps(COMMAND_KEYS)  # the workers and the CLI hold the key
    keyring = Keyring({k: v.encode() for k, v in COMMAND_KEYS.items()})
    for name in (f"{prefix}.remediation-commands", f"{env['FAULTSTREAM_APP_ID']}-by-cluster-remediation",
                 f"{env['FAULTSTREAM_APP_ID']}-remediation_state-changelog", f"{env['FAULTSTREAM_APP_ID']}-by-fabric",
                 f"{env['FAULTSTREAM_APP_ID']}-fabric_meta-changelog", f"{env['FAULTSTREAM_APP_ID']}-fabric_events-changelog",
                 f"{env['FAULTSTREAM_APP_ID']}-topology-changelog"):
        kafka_topic_factory.track(name)
    ch_dir = stream_env["tmp"] / "clickhouse"
    # the bundle's events are hours old; proposals must outlive the wall-clock expiry timer
    worker = stream_env["start"](FAULTSTREAM_CLICKHOUSE=f"chdb://{ch_dir}", FAULTSTREAM_REMEDIATION_PROPOSAL_TTL_S="31536000",
                                 FAULTSTREAM_REMEDIATION_TICK_INTERVAL_S="1")
    publish(env, BUNDLE)
    topic = f"{prefix}.remediations"

    def final_proposals(messages: list[Any]) -> bool:
        recs = records_of(messages)
        return all((r := latest_of(recs, k)) is not None and r.state == "proposed" and all(g.passed for g in r.guards)
                   for k in ("drain", "reboot"))

    recs = records_of(consume(kafka_bootstrap, topic, until=final_proposals, timeout=120))
    drain, reboot = latest_of(recs, "drain"), latest_of(recs, "reboot")
    assert (drain.target.host, drain.cluster, drain.mode) == ("node-a02", "c1", "dry_run")
    # the action keeps the cause of the verdict revision that proposed it: the provisional one
    # names the first decisive event to arrive (the fatal AER a second before the XID 79, or the
    # XID); the final revision (gpu.xid.79) calls for the same drain and reboot of node-a02
    assert drain.cause_code in ("gpu.pcie.aer_fatal", "gpu.xid.79")
    assert reboot.reason.endswith(f"runs after drain {drain.action_id}")
    guards = {g.guard: g.detail for g in drain.guards}
    # the bundle's topology reached the engine: 2 nodes, rack-1 and leaf-01
    assert guards["circuit_breaker"] == "1 of 2 nodes taken out within 300 s (limit 50%)"
    assert "rack-1 1/2" in guards["domain_budget"]
    # the provisional verdict came first: proposed with verdict_final failed, then re-evaluated
    first = by_action(recs)["drain"][0]
    assert (first.sequence, first.state) == (1, "proposed")
    assert [r.sequence for r in by_action(recs)["drain"]] == list(range(1, drain.sequence + 1))

    # the worker dies; a new one on another machine (no local state) recovers the engine from
    # the changelog of remediation_state -- else the approvals below would name unknown actions
    worker.stop(signal.SIGKILL)
    worker = stream_env["start"]("second", FAULTSTREAM_CLICKHOUSE=f"chdb://{ch_dir}",
                                 FAULTSTREAM_DATA_DIR=str(stream_env["tmp"] / "faust-second"),
                                 FAULTSTREAM_REMEDIATION_PROPOSAL_TTL_S="31536000",
                                 FAULTSTREAM_REMEDIATION_TICK_INTERVAL_S="1")

    # forged approvals -- unsigned (by root, at 0) and signed with a key the worker does not
    # hold -- are dead letters: the drain stays proposed (else the CLI below would refuse)
    producer = Producer(with_partitioner({"bootstrap.servers": kafka_bootstrap}))
    forged = [approve(drain.action_id, "c1", by="root", at=0),
              sign(approve(drain.action_id, "c1", by="root", at=time.time_ns()), Keyring({"test-1": b"f" * 40}))]
    for cmd in forged:
        producer.produce(f"{prefix}.remediation-commands", key=drain.action_id.encode(), value=canonical_json(cmd).encode())
    producer.flush(30)

    # a person approves both through the CLI
    for action in (drain, reboot):
        out = cli(env, "remediation", "approve", action.action_id, "--by", "alice", "--reason", "checked")
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"approve {action.action_id} ({action.action} node-a02, cluster c1) by alice: cmd-")

    def executed(messages: list[Any]) -> bool:
        recs = records_of(messages)
        d, r = latest_of(recs, "drain"), latest_of(recs, "reboot")
        return (r is not None and r.state == "done" and d is not None and d.state == "executing"
                and d.result.endswith("awaiting certification"))

    recs = records_of(consume(kafka_bootstrap, topic, until=executed, timeout=60))
    flows = by_action(recs)
    for kind, base in (("drain", drain.sequence), ("reboot", reboot.sequence)):
        after = [r for r in flows[kind] if r.sequence > base]
        assert [r.sequence for r in after] == list(range(base + 1, base + 1 + len(after)))  # one record per transition
        assert after[0].state == "approved"
        assert (after[0].decision.by, after[0].decision.reason) == ("alice", "checked")
        assert after[1].state == "executing" and after[1].executor == "dry_run" and after[1].result == "started by dry_run"
    assert [r.state for r in flows["reboot"] if r.sequence > reboot.sequence] == ["approved", "executing", "done"]
    assert flows["reboot"][-1].result.startswith("dry_run: dry-run: would do: reboot host=node-a02")
    assert [r.state for r in flows["drain"] if r.sequence > drain.sequence] == ["approved", "executing", "executing"]
    held = latest_of(recs, "drain")

    # the approval again: the CLI refuses (not proposed), and the same command delivered twice
    # plus a second person's approval straight on the topic add no transition
    again = cli(env, "remediation", "approve", drain.action_id, "--by", "alice", "--reason", "again")
    assert again.returncode == 2
    assert again.stderr.strip() == f"error: {drain.action_id} is executing, not proposed: nothing to approve"
    dup = sign(approve(drain.action_id, "c1", at=time.time_ns()), keyring)
    # and a forged cancel of the executing drain is a dead letter: the drain goes on to done
    forged_cancel = approve(drain.action_id, "c1", command="cancel", by="root", at=0)
    for cmd in (dup, dup, sign(approve(drain.action_id, "c1", by="carol", at=time.time_ns()), keyring), forged_cancel):
        producer.produce(f"{prefix}.remediation-commands", key=drain.action_id.encode(), value=canonical_json(cmd).encode())
    producer.produce(f"{prefix}.remediation-commands", key=b"x", value=b"{not json")
    producer.produce(f"{prefix}.remediation-commands", key=b"y",
                     value=canonical_json(approve(drain.action_id, "")).encode())  # no cluster
    producer.flush(30)
    unknown = cli(env, "remediation", "approve", "act-ffffffffffffffffffffffff", "--by", "alice", "--reason", "x")
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == f"error: unknown remediation action 'act-ffffffffffffffffffffffff' (not on {topic})"

    letters = consume(kafka_bootstrap, f"{prefix}.deadletter",
                      until=lambda ms: sum(json.loads(m.value())["source"] == "agent.remediation" for m in ms) >= 5,
                      timeout=60)
    reasons = sorted(json.loads(m.value())["reason"] for m in letters if json.loads(m.value())["source"] == "agent.remediation")
    assert len(reasons) == 5, reasons
    assert reasons[0].startswith("invalid command: the command names no cluster")
    assert reasons[1].startswith("invalid json: ")
    assert reasons[2:] == [
        "unauthenticated command: approve by 'root': bad signature for key 'test-1'",
        "unauthenticated command: approve by 'root': unsigned (no key_id/signature): sign it with faultstream remediation",
        "unauthenticated command: cancel by 'root': unsigned (no key_id/signature): sign it with faultstream remediation"]

    # a failed, then a passing DCGM run of node-a02, published with the certifications connector
    def certify(path: Path) -> None:
        finished = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        out = cli(env, "connect", "certifications", str(path), "--host", "node-a02", "--cluster", "c1",
                  "--finished-at", finished, "--topic", f"{prefix}.certifications")
        assert out.returncode == 0, out.stderr

    certify(CERTS / "dcgm-diag-r3-4x-fail.txt")
    recs = records_of(consume(kafka_bootstrap, topic, until=lambda ms: latest_of(records_of(ms), "drain") is not None
                              and latest_of(records_of(ms), "drain").sequence > held.sequence, timeout=60))
    kept = latest_of(recs, "drain")
    assert (kept.sequence, kept.state) == (held.sequence + 1, "executing")  # the duplicates added nothing
    assert "failed" in kept.result and kept.result.endswith("node stays out of service")
    certify(CERTS / "dcgm-diag-r2-3x-pass.json")
    recs = records_of(consume(kafka_bootstrap, topic, until=lambda ms: getattr(latest_of(records_of(ms), "drain"), "state", None)
                              == "done", timeout=60))
    done = latest_of(recs, "drain")
    assert done.sequence == kept.sequence + 1
    assert re.fullmatch(r"returned to service: certification dcgm-diag \(cert-\w+\) of node-a02 passed at \d{4}-\d\d-\d\dT[\d:.]+Z; "
                        r"dry_run resume: dry-run: would do: resume host=node-a02", done.result), done.result
    assert (done.decision.by, done.decision.reason) == ("alice", "checked")

    # the operator's view
    listed = cli(env, "remediation", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    shown = {r["action"]: r for r in map(json.loads, listed.stdout.splitlines())}
    assert {k: (v["state"], v["sequence"], v["decision"]["by"]) for k, v in shown.items()} == {
        "drain": ("done", done.sequence, "alice"), "reboot": ("done", reboot.sequence + 3, "alice")}
    assert shown["drain"] == json.loads(canonical_json(done))
    one = cli(env, "remediation", "show", done.action_id, "--json")
    assert one.returncode == 0 and json.loads(one.stdout) == shown["drain"]
    table = cli(env, "remediation", "show", done.action_id)
    assert table.returncode == 0 and "decision: alice at" in table.stdout and "checked" in table.stdout

    # and in ClickHouse: the latest state per action and every transition
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if worker.metrics().get('faultstream_clickhouse_rows_total{table="remediations"}', 0) >= done.sequence + reboot.sequence + 3:
            break
        time.sleep(0.5)
    metrics = worker.metrics()
    assert metrics['faultstream_remediation_commands_total{outcome="applied"}'] == 2
    assert metrics['faultstream_remediation_commands_total{outcome="duplicate"}'] == 3
    assert metrics['faultstream_remediation_commands_total{outcome="unauthenticated"}'] == 3
    worker.stop()
    from sinks.clickhouse import ClickHouseSink

    with ClickHouseSink(f"chdb://{ch_dir}") as sink:
        stored = {a.action: a for a in sink.fetch("remediations")}
        assert {k: (v.state, v.sequence) for k, v in stored.items()} == {
            "drain": ("done", done.sequence), "reboot": ("done", reboot.sequence + 3)}
        assert sink.count("remediation_transitions") == done.sequence + reboot.sequence + 3
        assert sink.count("certifications") == 2


def test_a_line_never_chooses_whom_to_drain_on_a_real_broker(stream_env, kafka_bootstrap):  # noqa: F811
    """The reproduction on a real worker and broker: a job on node-a01 and node-a07 whose
    ``logs/node-a01/kern.log`` holds XID 79 lines naming host ``ALL`` and host ``node-a07`` ->
    the final verdict blames node-a01 alone (the stream gives the replay verdict) and every
    remediation record targets node-a01 alone: drain and reboot of node-a01, nothing of
    ``ALL`` or node-a07."""
    from streams.replay import replay_bundle
    from tests.correlators.test_identity import hostile_bundle
    from tests.streams.test_stream import comparable, latest_verdicts

    env, prefix = stream_env["env"], stream_env["prefix"]
    # yesterday's job: the remediation ledger remembers 7 days, an older verdict fails closed
    bundle = hostile_bundle(stream_env["tmp"], day=(dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)).date())
    replayed = json.loads(canonical_json(replay_bundle(bundle).attribution))
    assert replayed["culprits"]["hosts"] == ["node-a01"]
    stream_env["start"](FAULTSTREAM_REMEDIATION_PROPOSAL_TTL_S="31536000")
    publish(env, bundle)

    def final(messages: list[Any]) -> bool:
        att = latest_verdicts(messages).get(replayed["attribution_id"])
        return att is not None and att["status"] == "final"

    att = latest_verdicts(consume(kafka_bootstrap, f"{prefix}.attributions", until=final, timeout=120))[
        replayed["attribution_id"]]
    assert comparable(att) == comparable(replayed)
    assert {e["host"] for e in att["evidence"]} == {"node-a01"}

    def proposed(messages: list[Any]) -> bool:
        # re-evaluated for the final verdict (the bundle has no topology or fleet size: the
        # circuit breaker fails closed, so a person would have to approve them)
        recs = records_of(messages)
        return all((r := latest_of(recs, k)) is not None
                   and any(g.guard == "verdict_final" and g.passed for g in r.guards) for k in ("drain", "reboot"))

    recs = records_of(consume(kafka_bootstrap, f"{prefix}.remediations", until=proposed, timeout=60))
    assert {(r.action, r.target.host) for r in recs} == {("drain", "node-a01"), ("reboot", "node-a01")}
    assert all(r.target.hosts == [] and r.target.port is None for r in recs)


# == the CLI against a broker, without a worker ====================================================


def test_cli_shows_the_latest_record_and_publishes_only_decisions_that_fit(kafka_bootstrap, kafka_topic_factory):
    prefix = kafka_topic_factory.prefix
    actions_topic = kafka_topic_factory.track(f"{prefix}.remediations")
    commands_topic = kafka_topic_factory.track(f"{prefix}.remediation-commands")
    from schemas.topics import catalogue, create_topics

    specs = catalogue(prefix)
    create_topics({"bootstrap.servers": kafka_bootstrap}, [specs["remediations"], specs["remediation-commands"]],
                  partitions_override=2)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "FAULTSTREAM_TOPIC_PREFIX": prefix, "USER": "zoe",
           "FAULTSTREAM_COMMAND_KEYS": json.dumps(COMMAND_KEYS)}
    now = time.time_ns()
    runner = dry_runner(clock=Clock(now))  # the runner decides at its own clock: the wall clock here
    (fresh,) = runner.handle_attribution(gpu_verdict("node-1", "c7", at=now))
    (old,) = runner.handle_attribution(gpu_verdict("node-2", "c7", at=now - 2 * 3600 * NS, att_id="wl-old"))
    (approved,) = runner.handle_command(approve(fresh.action_id, "c7", at=now + NS))
    producer = Producer(with_partitioner({"bootstrap.servers": kafka_bootstrap}))
    for record in (approved, fresh, approved, old):  # out of order and duplicated
        producer.produce(actions_topic, key=record.action_id.encode(), value=canonical_json(record).encode())
    producer.produce(actions_topic, key=b"junk", value=b"not a record")
    producer.flush(30)

    listed = cli(env, "remediation", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line) for line in listed.stdout.splitlines()] == [json.loads(canonical_json(r)) for r in (old, approved)]
    assert listed.stderr.strip() == f"warning: 1 records on {actions_topic} are not RemediationAction records (skipped)"
    active = cli(env, "remediation", "list", "--json", "--state", "approved", "--cluster", "c7")
    assert [json.loads(line)["action_id"] for line in active.stdout.splitlines()] == [fresh.action_id]
    table = cli(env, "remediation", "list")
    assert table.returncode == 0 and fresh.action_id in table.stdout and "approved" in table.stdout

    # approving what is no longer proposed, or expired, or unknown: refused, nothing published
    for action_id, message in (
        (fresh.action_id, f"{fresh.action_id} is approved, not proposed: nothing to approve"),
        (old.action_id, f"{old.action_id} expired at "),
        ("act-0123", f"unknown remediation action 'act-0123' (not on {actions_topic})"),
    ):
        out = cli(env, "remediation", "approve", action_id, "--reason", "x")
        # (after the warning about the junk record on the topic)
        assert out.returncode == 2 and out.stderr.splitlines()[-1].startswith(f"error: {message}"), out.stderr
    # what fits is published, with the cluster from the record and --by from $USER
    out = cli(env, "remediation", "reject", old.action_id, "--reason", "stale incident")
    assert out.returncode == 0, out.stderr
    out = cli(env, "remediation", "cancel", fresh.action_id, "--by", "yann", "--reason", "job moved")
    assert out.returncode == 0, out.stderr
    out = cli(env, "remediation", "reset-breaker", "--cluster", "c7", "--reason", "checked")
    assert out.returncode == 0 and out.stdout.startswith("reset-breaker of cluster c7 by zoe: cmd-"), out.stderr
    sent = consume(kafka_bootstrap, commands_topic, until=lambda ms: len(ms) >= 3, timeout=30)
    commands = sorted((RemediationCommand.model_validate_json(m.value()) for m in sent), key=lambda c: c.at)
    assert [(c.command, c.action_id, c.cluster, c.by, c.reason) for c in commands] == [
        ("reject", old.action_id, "c7", "zoe", "stale incident"),
        ("cancel", fresh.action_id, "c7", "yann", "job moved"),
        ("reset_breaker", None, "c7", "zoe", "checked")]
    assert all(c.command_id == c.model_copy().with_id().command_id and now < c.at < time.time_ns() for c in commands)
    # every command the CLI sent is signed with the key, and a worker holding it accepts it
    keyring = Keyring({k: v.encode() for k, v in COMMAND_KEYS.items()})
    assert all(c.key_id == "test-1" and authenticate(c, keyring, time.time_ns()) == c for c in commands)
    assert sorted(m.key() for m in sent) == sorted([old.action_id.encode(), fresh.action_id.encode(), b""])

    down = {**env, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9"}
    for args in (("list",), ("approve", fresh.action_id, "--reason", "x"), ("reset-breaker", "--cluster", "c7", "--reason", "x")):
        out = cli(down, "remediation", *args, "--timeout", "2")
        assert out.returncode == 2
        assert out.stderr.startswith("error: Kafka at 127.0.0.1:9 did not answer within 2 s"), out.stderr

    # text from a record is shown as written, never read as rich markup
    from schemas.records import Decision

    marked = approved.model_copy(update={"sequence": approved.sequence + 1, "reason": "see [/link] ticket [INC-42]",
                                         "decision": Decision(by="[bold]eve", at=now, reason="[red]ok")})
    producer.produce(actions_topic, key=marked.action_id.encode(), value=canonical_json(marked).encode())
    producer.flush(30)
    shown = cli(env, "remediation", "show", marked.action_id)
    assert shown.returncode == 0, shown.stderr
    assert "see [/link] ticket [INC-42]" in shown.stdout and "[bold]eve" in shown.stdout and "[red]ok" in shown.stdout
    listed = cli(env, "remediation", "list")
    assert "[bold]eve" in listed.stdout and marked.action_id in listed.stdout
