"""Remediation under hostile input and disorder.

* Targets come from facts: a verdict built from the real line ``... ALL kernel: NVRM: Xid
  (PCI:0000:9c:00): 79, ...`` (a bundle replayed here, job on node-a01) proposes no drain or
  reboot of ``ALL`` -- a ``notify`` whose ``target_known`` guard says why -- and the Slurm
  executor's dry-run plan holds only the allocation's nodes; every name a node-name grammar
  refuses (``node[01-99]``, ``a;b``, ``$(x)``, 254 characters, ...) is refused by the engine and
  by every executor, which then runs nothing.
* Guards hold under any order: three one-node verdicts a second apart in a 4-node cluster,
  arriving out of event-time order, trip the 50% breaker; a breaker reset keeps the actions
  awaiting approval pending and counted; hypothesis: random orders and timings of verdicts
  (with state round trips and ticks between them) never exceed the breaker, the domain budget
  or the workload budget.
* Authenticated commands: unsigned (a forged ``approve`` by ``root`` at 0), badly signed,
  unknown-key, tampered and stale commands are refused with the reason and change nothing (a
  forged cancel does not stop an executing drain); a signed one applies at the worker's own
  time; a rotated key works; the CLI refuses an empty ``--reason`` and sending without a key.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from correlators.remediation import RemediationEngine, load_policy, parse_policy
from correlators.remediation.guards import (
    CircuitBreakerSettings,
    DomainBudgetSettings,
    GuardSettings,
    WorkloadBudgetSettings,
)
from correlators.remediation.targets import KnownNodes, node_name_problem, valid_node_name
from schemas.bundle import TopologySpec, WorkloadSpec
from schemas.records import (
    Attribution,
    Culprits,
    EvidenceItem,
    RemediationAction,
    RemediationCommand,
    RemediationTarget,
    RootCause,
    Scope,
    Window,
    canonical_json,
)
from sinks.executors import DryRunExecutor, ExecutorSettings, KubernetesExecutor, SlurmExecutor, WebhookExecutor
from streams.command_auth import CommandKeyError, CommandKeySettings, Keyring, authenticate, sign
from streams.remediation.inputs import CommandInvalid, decode_command
from streams.remediation.runner import RemediationRunner
from schemas.utc import format_utc

NS = 1_000_000_000
T0 = 1_800_000_000 * NS
KEY_A = "a" * 40
KEY_B = "b" * 40

#: names no remediation may target, whatever a log line or a record says
BAD_NAMES = ["ALL", "all", "node[01-99]", "node-a[01-02]", "a;b", "$(x)", "`id`", "a,b", "a b", "-rf",
             "NodeName=x", "node-a01 State=RESUME", "a\nb", "a/../b", "", "x" * 254, "node-a01.", ".node",
             "nödé", "a|b", "a&&b", "a>b", "*"]


# == targets from facts =============================================================================


def cause_on(host: str, at: int = T0) -> EvidenceItem:
    """A deciding (cause) evidence item collected on ``host``: it corroborates ``host`` as a
    disruptive target."""
    return EvidenceItem(at=at, event_id="evt-1", type="gpu.xid", role="cause", host=host, summary="Xid 79")


def all_bundle(tmp_path: Path) -> Path:
    """A bundle: a job on node-a01 whose syslog has one line naming host ``ALL`` (XID 79)."""
    bundle = tmp_path / "xid79-host-all"
    (bundle / "logs" / "node-a01").mkdir(parents=True)
    (bundle / "workload.yaml").write_text(
        "workload_id: job-1\nscheduler: slurm\ncluster: c1\nstate: FAILED\nexit_code: '1:0'\n"
        "start: '2026-11-30T00:55:00Z'\nend: '2026-11-30T01:31:10Z'\nnodes:\n- node-a01\n")
    (bundle / "logs" / "node-a01" / "syslog.log").write_text(
        "2026-11-30T01:31:04.120000+00:00 ALL kernel: NVRM: Xid (PCI:0000:9c:00): 79, pid=8800, name=python, "
        "GPU has fallen off the bus.\n")
    return bundle


def all_verdict(tmp_path: Path) -> tuple[Attribution, WorkloadSpec]:
    from streams.replay import replay_bundle

    bundle = all_bundle(tmp_path)
    att = replay_bundle(bundle).attribution
    spec = WorkloadSpec.model_validate(yaml.safe_load((bundle / "workload.yaml").read_text()))
    return att, spec


def test_the_verdict_of_a_line_naming_host_all_proposes_no_action_on_all(tmp_path):
    att, spec = all_verdict(tmp_path)
    # the line was collected on node-a01: its host field ("ALL") is evidence, not the host
    assert (att.root_cause.code, att.culprits.hosts, att.status) == ("gpu.xid.79", ["node-a01"], "final")
    assert [(e.host, e.role) for e in att.evidence] == [("node-a01", "cause")]
    (named,) = [c for c in att.coverage if c.source.startswith("host-name:")]
    assert (named.source, named.status, named.records) == ("host-name:node-a01", "present", 1)
    assert named.detail.startswith("1 record(s) collected on node-a01 name another host in their text ('ALL')")
    assert "ALL" not in canonical_json(att.culprits)
    eng = RemediationEngine(load_policy(), fleet_size=64)
    eng.on_workload(spec.cluster, spec.workload_id, spec.nodes, spec.end_ns)
    out = eng.on_attribution(att)
    # the node that collected the deciding line is the one acted on, and only it
    assert [(a.action, a.state, a.target.model_dump(exclude_defaults=True)) for a in out] == [
        ("drain", "proposed", {"host": "node-a01"}), ("reboot", "proposed", {"host": "node-a01"})]
    assert all("ALL" not in canonical_json(a.target) for a in out)


def test_a_valid_name_outside_the_allocation_is_evidence_and_a_known_one_a_target():
    policy = parse_policy("""
version: t
rules:
  - {id: bus, match: {code: gpu.xid.79}, actions: [{action: drain, target: host, mode: auto}]}
""")
    eng = RemediationEngine(policy, fleet_size=8)
    eng.on_workload("c1", "job-1", ["node-a01", "node-a02"], T0)

    def verdict(host: str, att_id: str, workload: str = "job-1") -> Attribution:
        return Attribution(
            attribution_id=att_id, scope=Scope(kind="workload", id=workload, cluster="c1"),
            window=Window(start=T0 - 600 * NS, end=T0), outcome="failed", domain="gpu_hardware",
            root_cause=RootCause(code="gpu.xid.79", text="fell off the bus"), culprits=Culprits(hosts=[host]),
            evidence=[cause_on(host)], confidence=0.9, quality="definitive", ruleset_version="t",
            engine_version="t", decided_at=T0)

    ok = eng.on_attribution(verdict("node-a02", "v1"))
    assert [(a.action, a.target.host, a.state) for a in ok] == [("drain", "node-a02", "proposed"),
                                                                ("drain", "node-a02", "approved")]
    other = eng.on_attribution(verdict("node-z99", "v2"))
    # the notify takes the withheld drain's mode (auto): a person is told at once
    assert [(a.action, a.target.host, a.state) for a in other] == [("notify", None, "proposed"),
                                                                   ("notify", None, "approved")]
    assert next(g for g in other[0].guards if g.guard == "target_known").detail.startswith(
        "not a target, evidence only: 'node-z99' is not a node of the workload's allocation, the topology or the "
        "fleet (known: allocation of job-1 (2 nodes))")
    # another job's allocation does not make a name a target of this job's verdict
    eng.on_workload("c1", "job-2", ["node-z99"], T0)
    assert {a.action for a in eng.on_attribution(verdict("node-z99", "v3"))} == {"notify"}
    assert [a.target.host for a in eng.on_attribution(verdict("node-z99", "v4", "job-2"))] == ["node-z99", "node-z99"]
    # the allocation survives the changelog round trip
    again = RemediationEngine.from_state(json.loads(json.dumps(eng.to_state())), policy, fleet_size=8)
    assert [a.target.host for a in again.on_attribution(verdict("node-a01", "v5"))] == ["node-a01", "node-a01"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_names_the_grammar_refuses_never_become_targets_even_when_listed_as_facts(name):
    assert not valid_node_name(name) and node_name_problem(name)
    known = KnownNodes()
    known.add([name], "fleet")  # a fact source listing a bad name does not make it a target
    assert name not in known
    policy = parse_policy("""
version: t
rules:
  - {id: bus, match: {code: gpu.xid.79}, actions: [{action: drain, target: host, mode: auto}, {action: reboot, target: host, mode: auto}]}
""")
    eng = RemediationEngine(policy, fleet_size=8, fleet_nodes=[name, "node-a01"])
    eng.on_workload("c1", "job-1", [name, "node-a01"], T0)
    att = Attribution(
        attribution_id="v1", scope=Scope(kind="workload", id="job-1", cluster="c1"),
        window=Window(start=T0 - 600 * NS, end=T0), outcome="failed", domain="gpu_hardware",
        root_cause=RootCause(code="gpu.xid.79", text="fell off the bus"), culprits=Culprits(hosts=[name]),
        evidence=[cause_on(name)], confidence=0.9, quality="definitive", ruleset_version="t", engine_version="t",
        decided_at=T0)
    out = eng.on_attribution(att)
    assert {a.action for a in out} == {"notify"}
    assert all(a.target == RemediationTarget() for a in out)


# == a target needs corroboration ====================================================================

CORROBORATE = parse_policy("""
version: t
rules:
  - {id: bus, match: {code: gpu.xid.79}, actions: [{action: drain, target: host, mode: auto}, {action: reboot, target: host, mode: auto}]}
  - {id: stall, match: {code: nccl.stalled_rank}, actions: [{action: drain, target: host, mode: auto}]}
  - {id: port, match: {code: fabric.port.flapping, culprit: port}, actions: [{action: disable_port, target: port, mode: auto}]}
""")


def corroboration_verdict(culprits: list[str], cause_hosts: list[str], *, code: str = "gpu.xid.79",
                          ports: tuple[str, ...] = ()) -> Attribution:
    return Attribution(
        attribution_id=f"att-{code}", scope=Scope(kind="workload", id="job-1", cluster="c1"),
        window=Window(start=T0 - 600 * NS, end=T0), outcome="failed", domain="gpu_hardware",
        root_cause=RootCause(code=code, text=code), culprits=Culprits(hosts=culprits, ports=list(ports)),
        evidence=[cause_on(h) for h in cause_hosts], confidence=0.9, quality="definitive", ruleset_version="t",
        engine_version="t", decided_at=T0)


def corroboration_engine(**kw) -> RemediationEngine:
    eng = RemediationEngine(CORROBORATE, fleet_size=64, settings=ROOMY, **kw)
    eng.on_workload("c1", "job-1", ["node-a01", "node-a07"], T0)
    return eng


def test_only_culprits_the_deciding_evidence_was_collected_on_are_taken_out():
    out = corroboration_engine().on_attribution(corroboration_verdict(["node-a01", "node-a07"], ["node-a01"]))
    assert [(a.action, a.state, a.target.model_dump(exclude_defaults=True)) for a in out] == [
        ("drain", "proposed", {"host": "node-a01"}), ("drain", "approved", {"host": "node-a01"}),
        ("reboot", "proposed", {"host": "node-a01"}), ("reboot", "approved", {"host": "node-a01"}),
        ("notify", "proposed", {"hosts": ["node-a07"]}), ("notify", "approved", {"hosts": ["node-a07"]})]
    guard = next(g for g in out[-1].guards if g.guard == "target_corroborated")
    assert guard.passed and guard.detail == (
        "notify only: 'node-a07' is not corroborated: its deciding evidence was collected on 'node-a01', not on it; "
        "withheld: drain (host), reboot (host); a person decides")
    assert out[-1].reason.startswith("rule bus: gpu.xid.79: notify only: 'node-a07' is not corroborated")


def test_a_culprit_without_deciding_evidence_is_notified_not_drained():
    # a stalled rank is inferred from what its host did not log: no line of it decides
    (notify, approved) = corroboration_engine().on_attribution(
        corroboration_verdict(["node-a07"], [], code="nccl.stalled_rank"))
    assert (notify.action, notify.target.hosts, approved.state) == ("notify", ["node-a07"], "approved")
    assert next(g for g in notify.guards if g.guard == "target_corroborated").detail == (
        "notify only: 'node-a07' is not corroborated: the verdict holds no deciding (cause) evidence, not on it; "
        "withheld: drain (host); a person decides")


def test_a_port_is_corroborated_by_its_switch_or_a_host_cabled_to_it():
    topo = TopologySpec.model_validate({"links": [{"host": "node-a01", "hca": "mlx5_0", "switch": "leaf-01",
                                                   "switch_port": "3"}]})
    for causes in (["leaf-01"], ["node-a01"]):
        out = corroboration_engine(topology=topo).on_attribution(
            corroboration_verdict(["node-a01"], causes, code="fabric.port.flapping", ports=("leaf-01/3",)))
        assert [(a.action, a.target.port, a.state) for a in out] == [("disable_port", "leaf-01/3", "proposed"),
                                                                    ("disable_port", "leaf-01/3", "approved")]
    out = corroboration_engine(topology=topo).on_attribution(
        corroboration_verdict(["node-a01"], ["node-a07"], code="fabric.port.flapping", ports=("leaf-01/3",)))
    assert [(a.action, a.target.port, a.target.hosts) for a in out] == [("notify", None, []), ("notify", None, [])]
    assert next(g for g in out[0].guards if g.guard == "target_corroborated").detail.startswith(
        "notify only: port 'leaf-01/3' is not corroborated: its deciding evidence was collected on 'node-a07', "
        "not on its switch or a host cabled to it")


def test_valid_node_names():
    for name in ("node-a01", "gpu001", "NODE_07", "n1.rack-3.example", "a", "x" * 63 + "." + "y" * 63):
        assert valid_node_name(name), name
    assert node_name_problem("x" * 64) is not None  # a label of 64 characters


def action(host: str | None, kind: str = "drain", **target) -> RemediationAction:
    return RemediationAction(
        action_id="act-5f0c2a1e5d1b4c579a4e1f2b", attribution_id="v1", cluster="c1",
        target=RemediationTarget(host=host, **target), action=kind, mode="auto", policy_id="p",
        state="executing", sequence=3, reason="xid 79", created_at=T0, updated_at=T0)


@pytest.fixture
def recording_scontrol(tmp_path: Path) -> tuple[str, Path]:
    """A stand-in ``scontrol`` that appends its argv to a file: proves whether anything ran."""
    log = tmp_path / "calls.jsonl"
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {log}\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), log


@pytest.mark.parametrize("name", BAD_NAMES)
def test_every_executor_refuses_a_bad_name_and_runs_nothing(name, recording_scontrol):
    scontrol, calls = recording_scontrol
    slurm = SlurmExecutor(scontrol, attempts=1)
    for kind in ("drain", "cordon", "reboot"):
        assert slurm.plan_argv(action(name, kind)) == [] and slurm.plan(action(name, kind)) == []
        res = slurm.execute(action(name, kind))
        assert not res.ok and res.detail.startswith("refused by slurm executor: target ") and res.commands == []
    res = slurm.resume(name, "certified")
    assert not res.ok and res.detail.startswith("refused by slurm executor") and res.commands == []
    assert slurm.plan_resume(name, "x") == []
    assert not calls.exists(), calls.read_text()
    res = slurm.execute(action("node-a01", hosts=[name]))
    assert not res.ok and not calls.exists()

    kube = KubernetesExecutor(api_client=object(), attempts=1)  # any request would fail loudly
    res = kube.execute(action(name))
    assert not res.ok and res.detail.startswith("refused by kubernetes executor") and kube.plan(action(name)) == []
    assert not kube.resume(name, "x").ok and kube.plan_resume(name, "x") == []
    hook = WebhookExecutor("http://127.0.0.1:9/hook", attempts=1)
    res = hook.execute(action(name))
    assert not res.ok and res.detail.startswith("refused by webhook executor") and res.commands == []

    dry = DryRunExecutor(would=slurm).execute(action(name))
    assert not dry.ok and dry.detail.startswith("dry-run: slurm would refuse: refused by slurm executor")
    assert not DryRunExecutor().execute(action(name)).ok
    assert not DryRunExecutor(would=slurm).resume(name, "x").ok
    assert not calls.exists()


def test_kubernetes_refuses_upper_case_names_slurm_takes_them():
    assert KubernetesExecutor(api_client=object()).check(action("NODE-A01")).startswith(
        "refused by kubernetes executor: target 'NODE-A01' is not a Kubernetes node name")
    assert SlurmExecutor().check(action("NODE-A01")) is None


def test_dry_run_logs_the_exact_argv(caplog):
    caplog.set_level(logging.INFO, logger="faultstream.executor.dry_run")
    res = DryRunExecutor(would=SlurmExecutor("/usr/bin/scontrol")).execute(action("node-a01"))
    argv = ["/usr/bin/scontrol", "update", "NodeName=node-a01", "State=DRAIN",
            "Reason=faultstream act-5f0c2a1e5d1b4c579a4e1f2b: xid 79"]
    assert res.ok and res.commands == ["/usr/bin/scontrol update NodeName=node-a01 State=DRAIN "
                                       "'Reason=faultstream act-5f0c2a1e5d1b4c579a4e1f2b: xid 79'"]
    (rec,) = caplog.records
    assert rec.argv == [argv] and rec.commands == res.commands
    caplog.clear()
    DryRunExecutor(would=SlurmExecutor("/usr/bin/scontrol")).resume("node-a01", "certified")
    assert caplog.records[0].argv == [["/usr/bin/scontrol", "update", "NodeName=node-a01", "State=RESUME"]]


def test_the_slurm_dry_run_plan_of_the_all_verdict_names_only_allocation_nodes(tmp_path, recording_scontrol, caplog):
    caplog.set_level(logging.INFO, logger="faultstream.executor.dry_run")
    scontrol, calls = recording_scontrol
    att, spec = all_verdict(tmp_path)
    executors = ExecutorSettings(clusters={"c1": {"kind": "slurm", "dry_run": True, "scontrol": scontrol}})
    clock = iter(range(att.decided_at + 60 * NS, att.decided_at + 10_000 * NS, NS))  # before the proposals expire
    runner = RemediationRunner(RemediationEngine(load_policy(), fleet_size=64), executors, clock=lambda: next(clock))
    runner.handle_workload("c1", spec.workload_id, spec.nodes, spec.end_ns)
    # a second verdict of the job blames the real node: its actions are planned
    real = att.model_copy(update={"attribution_id": "wl-real", "culprits": Culprits(hosts=["node-a01"])})
    records = runner.handle_attribution(att) + runner.handle_attribution(real)
    for r in [r for r in records if r.state == "proposed"]:
        records += runner.handle_command(RemediationCommand(command="approve", action_id=r.action_id, cluster="c1",
                                                            by="alice", reason="checked", at=T0).with_id())
    records += runner.run_due()
    planned = [r.result for r in records if r.state in ("executing", "done") and r.result.startswith("dry_run:")]
    assert any("NodeName=node-a01" in p for p in planned), planned
    for r in records:
        assert r.target.host in (None, "node-a01") and set(r.target.hosts) <= {"node-a01"}
    # the exact argument lists the Slurm executor would run: every node named is node-a01 (the
    # reason may quote the verdict's text, "GPU ... on ALL fell off the bus": one argument, text)
    plans = [argv for rec in caplog.records for argv in (getattr(rec, "argv", None) or [])]
    assert {tuple(argv[1:3]) for argv in plans} == {("update", "NodeName=node-a01"), ("reboot", "ASAP")}
    for argv in plans:
        assert argv[0] == scontrol
        named = [a.split("=", 1)[1] for a in argv if a.startswith("NodeName=")] + ([argv[-1]] if argv[1] == "reboot" else [])
        assert named == ["node-a01"], argv
        assert len(argv) == (5 if argv[1] == "update" else 6)
    assert not calls.exists()  # a dry run


# == guards under any order ===========================================================================

DRAIN = parse_policy("""
version: t
rules:
  - {id: reset, match: {code: gpu.xid.46}, actions: [{action: drain, target: host, mode: auto}]}
  - {id: dry, match: {code: gpu.xid.62}, actions: [{action: drain, target: host}]}
""")
ROOMY = GuardSettings(domain_budget=DomainBudgetSettings(default=100),
                      workload_budget=WorkloadBudgetSettings(max_nodes=100))
FOUR = ["node-1", "node-2", "node-3", "node-4"]


def one_node(host: str, att_id: str, at: int, code: str = "gpu.xid.46", workload: str | None = None) -> Attribution:
    return Attribution(
        attribution_id=att_id, scope=Scope(kind="workload", id=workload or f"job-{att_id}", cluster="c1"),
        window=Window(start=at - 600 * NS, end=at), outcome="failed", domain="gpu_hardware",
        root_cause=RootCause(code=code, text=f"{code} on {host}"), culprits=Culprits(hosts=[host]),
        evidence=[cause_on(host, at)], confidence=0.9, quality="definitive", ruleset_version="t", engine_version="t",
        decided_at=at)


def breaker_detail(records: list[RemediationAction]) -> str:
    return next(g.detail for g in records[0].guards if g.guard == "circuit_breaker")


def test_three_verdicts_out_of_event_time_order_trip_the_breaker():
    eng = RemediationEngine(DRAIN, fleet_nodes=FOUR, settings=ROOMY)
    first = eng.on_attribution(one_node("node-3", "c", T0 + 2 * NS))
    second = eng.on_attribution(one_node("node-1", "a", T0))
    third = eng.on_attribution(one_node("node-2", "b", T0 + NS))
    assert [r.state for r in first] == ["proposed", "approved"]
    assert breaker_detail(second) == "2 of 4 nodes taken out within 300 s (limit 50%)"
    assert [r.state for r in second] == ["proposed", "approved"]
    assert [(r.state, r.mode) for r in third] == [("proposed", "needs_approval")]
    assert breaker_detail(third) == "tripped now: 3 of 4 nodes taken out within 300 s (limit 50%)"
    approved = [a for a in eng.actions() if a.state == "approved"]
    assert len(approved) == 2 and eng.executable() == []  # and the tripped breaker holds them


def test_a_verdict_older_than_the_ledger_remembers_fails_closed():
    eng = RemediationEngine(DRAIN, fleet_nodes=[f"node-{i}" for i in range(1, 9)], settings=ROOMY)
    eng.on_attribution(one_node("node-1", "a", T0))
    eng.on_attribution(one_node("node-2", "b", T0 + 8 * 86400 * NS))
    eng.tick(T0 + 8 * 86400 * NS)  # the ledger forgets admissions 7 days (the longest guard period) older than its newest
    late = eng.on_attribution(one_node("node-3", "c", T0 + 100 * NS))
    assert late[0].state == "proposed" and breaker_detail(late).startswith(
        f"event time {format_utc(T0 + 100 * NS)} is within 300 s of admissions the breaker no longer holds")


def test_a_breaker_reset_keeps_pending_actions_pending_and_counted():
    eng = RemediationEngine(DRAIN, fleet_nodes=FOUR, settings=ROOMY)
    # dry-run drains: all guards pass, so they count, and they wait for a person's approval
    pending = [eng.on_attribution(one_node(h, f"v{i}", T0 + i * NS, code="gpu.xid.62"))[0]
               for i, h in enumerate(["node-1", "node-2"])]
    assert [(a.state, a.mode) for a in pending] == [("proposed", "dry_run")] * 2
    blocked = eng.on_attribution(one_node("node-3", "v3", T0 + 2 * NS, code="gpu.xid.62"))
    assert breaker_detail(blocked) == "tripped now: 3 of 4 nodes taken out within 300 s (limit 50%)"
    # the reset comes long after: nothing it held is expired or approved by the reset
    reset = eng.on_command(RemediationCommand(command="reset_breaker", cluster="c1", by="bob", reason="checked",
                                              at=T0 + 3600 * NS).with_id())
    assert [(r.action_id, r.state) for r in reset] == [(blocked[0].action_id, "proposed")]
    assert {eng.get(a.action_id).state for a in pending} == {"proposed"}
    assert set(eng.breaker("c1").admissions) == {a.action_id for a in pending}
    # the pending drains still count: a fourth node within the window trips the breaker again
    fourth = eng.on_attribution(one_node("node-4", "v4", T0 + 3 * NS, code="gpu.xid.46"))
    assert breaker_detail(fourth) == "tripped now: 3 of 4 nodes taken out within 300 s (limit 50%)"
    # resetting a closed breaker forgets nothing
    eng2 = RemediationEngine(DRAIN, fleet_nodes=FOUR, settings=ROOMY)
    eng2.on_attribution(one_node("node-1", "v1", T0))
    assert eng2.on_command(RemediationCommand(command="reset_breaker", cluster="c1", by="bob", at=T0).with_id()) == []
    assert len(eng2.breaker("c1").admissions) == 1


HOSTS = [f"node-{i}" for i in range(1, 9)]
RACKS = TopologySpec(domains={"rack-1": HOSTS[:4], "rack-2": HOSTS[4:]})

verdict_plan = st.lists(
    st.tuples(st.sampled_from(HOSTS), st.integers(0, 900), st.sampled_from(["job-a", "job-b", "job-c"]),
              st.sampled_from(["gpu.xid.46", "gpu.xid.62"]), st.sampled_from(["none", "tick", "roundtrip"])),
    min_size=1, max_size=14)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=verdict_plan, fraction=st.sampled_from([0.25, 0.5, 0.75]), domain=st.integers(1, 4),
       per_job=st.integers(1, 3), window=st.sampled_from([60, 300]))
def test_no_order_or_timing_of_verdicts_exceeds_the_breaker_or_a_budget(plan, fraction, domain, per_job, window):
    guard_settings = GuardSettings(
        circuit_breaker=CircuitBreakerSettings(max_fraction=fraction, window_s=window),
        domain_budget=DomainBudgetSettings(default=domain), workload_budget=WorkloadBudgetSettings(max_nodes=per_job))
    eng = RemediationEngine(DRAIN, topology=RACKS, settings=guard_settings)
    for i, (host, offset_s, job, code, between) in enumerate(plan):
        eng.on_attribution(one_node(host, f"v{i}", T0 + offset_s * NS, code=code, workload=job))
        if between == "tick":
            eng.tick(T0)
        elif between == "roundtrip":
            eng = RemediationEngine.from_state(json.loads(json.dumps(eng.to_state())), DRAIN, topology=RACKS,
                                               settings=guard_settings)
    # what the guards let through by themselves: auto drains approved by the policy, dry-run
    # drains with every guard passed (they count as if real)
    admitted = [a for a in eng.actions() if a.action == "drain" and all(g.passed for g in a.guards)
                and a.state in ("proposed", "approved")]
    assert all(a.state == "approved" and a.decision.by.startswith("policy:") for a in admitted if a.mode == "auto")
    times = {a.action_id: a.created_at for a in admitted}
    for a in admitted:  # every window of window_s seconds, placed at each admission
        inside = {b.target.host for b in admitted if 0 <= times[b.action_id] - times[a.action_id] < window * NS}
        assert len(inside) <= fraction * len(HOSTS), (window, sorted(inside))
    for rack, members in RACKS.domains.items():
        assert len({a.target.host for a in admitted if a.target.host in members}) <= domain, rack
    job_of = {f"v{i}": job for i, (_, _, job, _, _) in enumerate(plan)}
    by_job: dict[str, set[str]] = {}
    for a in admitted:
        by_job.setdefault(job_of[a.attribution_id], set()).add(a.target.host)
    assert all(len(hosts) <= per_job for hosts in by_job.values()), by_job


# == authenticated commands ===========================================================================


def keyring(**keys: str) -> Keyring:
    return Keyring({k: v.encode() for k, v in keys.items()})


def command(command: str = "approve", action_id: str | None = "act-1", by: str = "alice", at: int | None = None,
            **kw) -> RemediationCommand:
    return RemediationCommand(command=command, action_id=action_id, cluster="c1", by=by, reason="checked",
                              at=time.time_ns() if at is None else at, **kw)


def raw(cmd: RemediationCommand) -> bytes:
    return canonical_json(cmd).encode()


def test_unsigned_badly_signed_unknown_key_tampered_and_stale_commands_are_refused():
    keys = keyring(k1=KEY_A)
    now = time.time_ns()
    cases = {
        "forged": raw(command(by="root", at=0).with_id()),
        "unsigned": raw(command().with_id()),
        "other key": raw(sign(command(), keyring(k1=KEY_B))),
        "unknown key": raw(sign(command(), keyring(k9=KEY_A))),
        "stale": raw(sign(command(at=now - 301 * NS), keys)),
        "future": raw(sign(command(at=now + 31 * NS), keys)),
    }
    tampered = json.loads(cases["unsigned"])
    good = sign(command(), keys)
    cases["tampered by"] = raw(good.model_copy(update={"by": "root"}))
    cases["tampered at"] = raw(good.model_copy(update={"at": good.at + 1}))
    cases["junk signature"] = raw(good.model_copy(update={"signature": "zz" * 32}))
    reasons = {}
    for name, data in cases.items():
        with pytest.raises(CommandInvalid) as err:
            decode_command(data, keys, now)
        reasons[name] = str(err.value)
    assert reasons["forged"] == "unauthenticated command: approve by 'root': unsigned (no key_id/signature): sign " \
                                "it with faultstream remediation"
    assert reasons["other key"] == "unauthenticated command: approve by 'alice': bad signature for key 'k1'"
    assert reasons["unknown key"] == "unauthenticated command: approve by 'alice': signed with unknown key 'k9'"
    assert reasons["stale"] == "unauthenticated command: approve by 'alice': stale: sent 301 s ago (max_age_s 300)"
    assert reasons["future"].endswith("s in the future (max_skew_s 30)")
    for name in ("tampered by", "tampered at", "junk signature"):
        assert reasons[name].endswith("bad signature for key 'k1'"), reasons[name]
    assert tampered["signature"] == ""
    # a worker without keys refuses everything, a good command included
    with pytest.raises(CommandInvalid, match="the worker holds no command key"):
        decode_command(raw(good), Keyring({}), now)
    assert decode_command(raw(good), keys, now) == good


def drain_runner() -> tuple[RemediationRunner, str]:
    clock = iter(range(T0 + 10 * NS, T0 + 10_000 * NS, NS))
    runner = RemediationRunner(RemediationEngine(DRAIN, fleet_nodes=HOSTS, settings=ROOMY),
                               ExecutorSettings(clusters={}), clock=lambda: next(clock))
    (proposed,) = runner.handle_attribution(one_node("node-1", "v1", T0, code="gpu.xid.62"))
    return runner, proposed.action_id


def worker_apply(runner: RemediationRunner, data: bytes, keys: Keyring, now: int) -> str:
    """What the worker's command agent does: decode and authenticate, then apply at its own
    time of receipt -- or dead-letter with the reason."""
    try:
        cmd = decode_command(data, keys, now)
    except CommandInvalid as exc:
        return f"dead letter: {exc}"
    return runner.apply_command(cmd, at=now).outcome


def test_a_forged_approve_runs_nothing_and_a_signed_one_applies_at_the_workers_time():
    keys = keyring(k1=KEY_A)
    runner, aid = drain_runner()
    now = time.time_ns()
    forged = raw(command(action_id=aid, by="root", at=0).with_id())
    assert worker_apply(runner, forged, keys, now).startswith("dead letter: unauthenticated command: approve by 'root'")
    assert runner.engine.get(aid).state == "proposed" and runner.run_due() == []
    signed = sign(command(action_id=aid, at=now - 5 * NS), keys)
    assert worker_apply(runner, raw(signed), keys, now) == "applied"
    approved = runner.engine.get(aid)
    assert (approved.state, approved.decision.by, approved.decision.at) == ("approved", "alice", now)
    assert worker_apply(runner, raw(signed), keys, now + NS) == "duplicate"  # a replay within max_age


def test_a_forged_cancel_does_not_stop_an_executing_drain():
    keys = keyring(k1=KEY_A)
    runner, aid = drain_runner()
    now = time.time_ns()
    assert worker_apply(runner, raw(sign(command(action_id=aid, at=now), keys)), keys, now) == "applied"
    started, jobs = runner.start_due()
    assert [r.state for r in started] == ["executing"]
    for forged in (command("cancel", aid, by="root", at=0).with_id(),
                   command("cancel", aid, by="root", key_id="k1", signature="0" * 64).with_id(),
                   sign(command("cancel", aid, by="root"), keyring(k1=KEY_B))):
        assert worker_apply(runner, raw(forged), keys, now).startswith("dead letter: unauthenticated command: cancel")
    assert runner.engine.get(aid).state == "executing"
    (done,) = runner.finish_job(aid, RemediationRunner.run_job(jobs[0]))
    assert done.state == "done"


def test_a_rotated_key_works(tmp_path, monkeypatch):
    # the worker holds the old and the new key; the CLI switched to the new one
    key_file = tmp_path / "command-keys.json"
    key_file.write_text(json.dumps({"2026-12": KEY_B}))
    monkeypatch.setenv("FAULTSTREAM_COMMAND_KEYS", json.dumps({"2026-11": KEY_A}))
    monkeypatch.setenv("FAULTSTREAM_COMMAND_KEY_FILE", str(key_file))
    worker = CommandKeySettings().keyring()
    assert worker.ids() == ["2026-11", "2026-12"]
    with pytest.raises(CommandKeyError, match="set FAULTSTREAM_COMMAND_SIGNING_KEY"):
        worker.signing_key_id()
    monkeypatch.setenv("FAULTSTREAM_COMMAND_SIGNING_KEY", "2026-12")
    cli = CommandKeySettings().keyring()
    base = command()
    new = sign(base, cli)
    old = sign(base, keyring(**{"2026-11": KEY_A}))
    assert new.key_id == "2026-12" and new.command_id == old.command_id  # the id does not depend on the key
    now = time.time_ns()
    assert authenticate(new, worker, now) == new and authenticate(old, worker, now) == old
    # the old key removed from the worker: commands signed with it are refused
    with pytest.raises(Exception, match="signed with unknown key '2026-11'"):
        authenticate(old, Keyring({"2026-12": KEY_B.encode()}), now)


def test_bad_key_settings_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(CommandKeyError, match="at least 32 are needed"):
        Keyring({"k1": b"short"})
    with pytest.raises(CommandKeyError, match="1-64 letters"):
        Keyring({"bad id": KEY_A.encode()})
    bad = tmp_path / "keys.json"
    bad.write_text("[1, 2]")
    monkeypatch.setenv("FAULTSTREAM_COMMAND_KEY_FILE", str(bad))
    with pytest.raises(CommandKeyError, match="expected a JSON object"):
        CommandKeySettings().keyring()
    monkeypatch.setenv("FAULTSTREAM_COMMAND_KEY_FILE", str(tmp_path / "missing.json"))
    with pytest.raises(CommandKeyError, match="cannot read"):
        CommandKeySettings().keyring()


def test_the_cli_refuses_an_empty_reason_and_sending_without_a_key(monkeypatch):
    from streams.remediation.cli import app

    for name in ("FAULTSTREAM_COMMAND_KEYS", "FAULTSTREAM_COMMAND_KEY_FILE", "FAULTSTREAM_COMMAND_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    for reason in ("", "   "):
        out = runner.invoke(app, ["approve", "act-1", "--by", "alice", "--reason", reason])
        assert out.exit_code == 2 and "must not be empty" in out.output, out.output
    out = runner.invoke(app, ["reset-breaker", "--cluster", "c1", "--by", "alice", "--reason", ""])
    assert out.exit_code == 2 and "must not be empty" in out.output
    # no key: refused before the broker is even asked (the bootstrap is unreachable)
    out = runner.invoke(app, ["approve", "act-1", "--by", "alice", "--reason", "checked",
                              "--bootstrap", "127.0.0.1:9", "--timeout", "1"])
    assert out.exit_code == 2 and "no command signing key" in out.output, out.output
    assert os.environ.get("FAULTSTREAM_COMMAND_KEYS") is None


def test_the_workers_workload_records_give_the_allocation(tmp_path):
    """What the ingest stage hands the remediation agents: the scheduler's record as the
    bundle publisher puts it on the observations topic -> the allocation of the job."""
    from connectors.bundle import BundleConnector
    from connectors.publish import workload_observation
    from schemas.records import Observation
    from streams.remediation.inputs import allocation_message

    conn = BundleConnector(all_bundle(tmp_path))
    record = Observation.model_validate_json(canonical_json(workload_observation(conn)))
    payload = allocation_message(record)
    assert payload.model_dump() == {"kind": "workload", "cluster": "c1", "workload_id": "job-1",
                                    "nodes": ["node-a01"], "at": conn.workload.end_ns}
    line = next(o for o in conn.observations() if o.kind == "log_line")
    assert allocation_message(line) is None
    runner = RemediationRunner(RemediationEngine(DRAIN, fleet_size=8), ExecutorSettings(clusters={}))
    runner.handle_workload(payload.cluster, payload.workload_id, payload.nodes, payload.at)
    out = runner.handle_attribution(one_node("node-a01", "x", T0, workload="job-1"))
    assert [(a.action, a.target.host) for a in out] == [("drain", "node-a01"), ("drain", "node-a01")]
