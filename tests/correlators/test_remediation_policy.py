"""Remediation policy: the packaged defaults (derived from the XID catalog and the anchors'
practice), rule matching, and load errors that name the bad field's path."""

from __future__ import annotations

import pytest

from correlators import xid as xid_catalog
from correlators.remediation import RemediationEngine, load_policy, parse_policy, verdict_facts
from correlators.remediation.policy import PolicyError, xid_bucket
from schemas.bundle import Link, TopologySpec
from schemas.records import (
    Alternative,
    Attribution,
    Culprits,
    EvidenceItem,
    GpuRef,
    RootCause,
    Scope,
    Window,
)

NS = 1_000_000_000
T0 = 1_800_000_000 * NS
GPU0 = GpuRef(index=0, pci_bus_id="0000:19:00")
GPU3 = GpuRef(index=3, pci_bus_id="0000:9c:00")


def verdict(code: str, *, hosts=("node-1",), gpus=(GPU0,), ports=(), quality="definitive", outcome="failed",
            domain="gpu_hardware", at=T0, att_id="att-1", text=None, evidence=(), revision=1) -> Attribution:
    return Attribution(
        attribution_id=att_id, revision=revision, scope=Scope(kind="workload", id="job-1", cluster="c1"),
        window=Window(start=at - 600 * NS, end=at), outcome=outcome, domain=domain,
        root_cause=RootCause(code=code, text=text or f"cause {code}"),
        culprits=Culprits(hosts=list(hosts), gpus=list(gpus), ports=list(ports)),
        evidence=list(evidence) or causes(hosts, at), confidence=0.9, quality=quality, ruleset_version="t",
        engine_version="t", decided_at=at,
    )


def causes(hosts, at: int = T0) -> list[EvidenceItem]:
    """A deciding (cause) evidence item collected on each of ``hosts``: what corroborates a
    disruptive target (correlators.remediation.targets.Corroboration)."""
    return [EvidenceItem(at=at, event_id=f"evt-{h}", type="gpu.xid", role="cause", host=h, summary="cause")
            for h in hosts]


#: The cluster's cabling: remediation targets must be known nodes or cabled ports
#: (correlators.remediation.targets).
TOPOLOGY = TopologySpec(hosts={f"node-{i}": {} for i in range(1, 5)},
                        links=[Link(host="node-3", hca="mlx5_0", switch="leaf-01", switch_port="3")])


def xid_item(code: int, summary_tail: str = "", at: int = T0) -> EvidenceItem:
    return EvidenceItem(at=at, event_id=f"evt-{code}", type="gpu.xid", role="cause", host="node-1",
                        summary=f"Xid {code}: something{summary_tail} [0000:19:00]")


def proposed(code: str, **kw) -> list[tuple[str, dict]]:
    """(action, target) of what the default policy proposes for a verdict."""
    eng = RemediationEngine(load_policy(), fleet_size=100, topology=TOPOLOGY)
    return [(a.action, a.target.model_dump(exclude_defaults=True)) for a in eng.on_attribution(verdict(code, **kw))]


@pytest.fixture(scope="module")
def policy():
    return load_policy()


def test_default_policy_loads_versioned(policy):
    assert policy.version == "2026.12-1"
    assert policy.policy_id == "faultstream-default"
    assert policy.default_mode == "dry_run"
    assert policy.guards.circuit_breaker.max_fraction == 0.5
    assert policy.guards.circuit_breaker.window_s == 300
    assert policy.guards.cooldown_s == 1800
    assert policy.guards.escalation.max_remediations == 5
    assert policy.guards.escalation.period_s == 7 * 86400
    # every default action is dry-run
    for rule in policy.all_rules():
        assert all(policy.mode_of(a) == "dry_run" for a in rule.actions), rule.id


def test_xid_rules_are_generated_from_the_catalog(policy):
    generated = {r.id: r for r in policy.all_rules() if r.id.startswith("xid-")}
    assert set(generated) == {f"xid-{c}" for c in xid_catalog.catalog()}
    kinds = {int(i.split("-")[1]): [a.action for a in r.actions] for i, r in generated.items()}
    for code, info in xid_catalog.catalog().items():
        if xid_catalog.is_sympathetic(code) or info.immediate_action in ("IGNORE", "WORKFLOW_XID_45"):
            assert kinds[code] == [], code
        elif info.immediate_action == "RESET_GPU":
            assert kinds[code] == ["reset_gpu"], code
        elif info.immediate_action in ("RESTART_BM", "RESTART_VM"):
            assert kinds[code] == ["drain", "reboot"], code
        elif info.immediate_action == "RESTART_APP":
            assert kinds[code] == ["notify"], code
    assert kinds[46] == ["reset_gpu"] and kinds[79] == ["drain", "reboot"] and kinds[8] == ["notify"]
    assert kinds[95] == [] and xid_bucket(95) == "SYMPATHETIC"  # RESET_GPU but "IGNORE (sympathetic)"
    assert kinds[14] == [] and kinds[163] == ["notify"] and xid_bucket(163) == "UNLISTED"
    assert "XID 46 immediate action RESET_GPU" in generated["xid-46"].source


def test_xid_defaults_through_the_engine():
    assert proposed("gpu.xid.46") == [("reset_gpu", {"host": "node-1", "gpu": {"index": 0, "pci_bus_id": "0000:19:00"}})]
    assert proposed("gpu.xid.79") == [("drain", {"host": "node-1"}), ("reboot", {"host": "node-1"})]
    assert proposed("gpu.xid.151") == [("drain", {"host": "node-1"}), ("reboot", {"host": "node-1"})]  # RESTART_VM
    assert proposed("gpu.xid.8") == [("notify", {"host": "node-1"})]  # RESTART_APP
    assert proposed("gpu.xid.63") == []  # IGNORE
    assert proposed("gpu.xid.94") == []  # sympathetic
    assert [a for a, _ in proposed("gpu.xid.48")] == ["reset_gpu"]
    assert [a for a, _ in proposed("gpu.xid.48", evidence=[xid_item(48), xid_item(64)])] == ["drain", "reset_gpu"]


def test_xid154_follows_the_recovery_hint():
    def hinted(hint):
        return [a for a, _ in proposed("gpu.xid.154", evidence=[xid_item(154, f" -> {hint}")])]

    assert hinted("RESET_GPU") == ["reset_gpu"]
    assert hinted("DRAIN_AND_RESET") == ["drain", "reset_gpu"]
    assert hinted("RESTART_BM") == ["drain", "reboot"]
    assert hinted("NONE") == ["notify"]
    # the hint in the root-cause text correlators.attribution writes
    assert [a for a, _ in proposed("gpu.xid.154", text="GPU 0 on node-1: driver asks for RESTART_BM")] == ["drain", "reboot"]
    assert [a for a, _ in proposed("gpu.xid.154")] == ["notify"]


def test_verdict_facts_read_structured_tokens_only():
    att = verdict("gpu.xid.48", evidence=[xid_item(48), xid_item(63), xid_item(154, " -> DRAIN_AND_RESET"),
                                          EvidenceItem(at=T0, event_id="e", type="nccl.watchdog_timeout",
                                                       role="symptom", host="node-2", summary="Xid 79: not a cause")])
    facts = verdict_facts(att, [T0])
    assert facts.xid == 48
    assert facts.evidence_xids == {48, 63, 154}
    assert facts.xid_hint == "DRAIN_AND_RESET"
    assert facts.xid_times == (T0,)
    assert verdict_facts(verdict("app.xid.31")).xid == 31
    assert verdict_facts(verdict("host.oom_kill")).xid is None


def test_xid13_31_recertify_only_when_repeated_on_the_same_gpu():
    eng = RemediationEngine(load_policy(), fleet_size=100, topology=TOPOLOGY)
    first = eng.on_attribution(verdict("app.xid.31", att_id="job-a", gpus=[GPU3], domain="software"))
    assert [a.action for a in first] == ["notify"]
    # another job, another GPU of the same host: still the application
    other = eng.on_attribution(verdict("app.xid.31", att_id="job-b", gpus=[GPU0], domain="software", at=T0 + 3600 * NS))
    assert [a.action for a in other] == ["notify"]
    # the same GPU again within 24 h: the GPU -> drain and run DCGM diagnostics
    again = eng.on_attribution(verdict("app.xid.31", att_id="job-c", gpus=[GPU3], domain="software", at=T0 + 7200 * NS))
    assert [a.action for a in again] == ["drain", "recertify"]
    recert = again[1]
    assert recert.plan[0].test == "dcgm-diag-r2" and recert.plan[0].hosts == ["node-1"]
    assert "xid13-31-repeated" in recert.reason
    # a revision of an attribution already counted does not count twice
    eng2 = RemediationEngine(load_policy(), fleet_size=100, topology=TOPOLOGY)
    eng2.on_attribution(verdict("app.xid.13", att_id="job-a", gpus=[GPU3], domain="software"))
    rev = eng2.on_attribution(verdict("app.xid.13", att_id="job-a", gpus=[GPU3], domain="software", revision=2))
    assert rev == []  # same action, nothing changed
    # and older than 24 h does not count
    late = eng2.on_attribution(verdict("app.xid.13", att_id="job-z", gpus=[GPU3], domain="software", at=T0 + 25 * 3600 * NS))
    assert [a.action for a in late] == ["notify"]


def test_fabric_host_and_software_defaults():
    assert proposed("fabric.port.flapping", ports=["leaf-01/3"], hosts=["node-3"], domain="fabric") == [
        ("disable_port", {"port": "leaf-01/3"})
    ]
    assert proposed("fabric.link_down", ports=[], hosts=["node-3"], domain="fabric") == [("drain", {"host": "node-3"})]
    assert proposed("fabric.switch.down", ports=[], hosts=["node-3", "node-4"], domain="fabric") == [
        ("notify", {"hosts": ["node-3", "node-4"]})
    ]
    assert proposed("config.shm", domain="config", hosts=["node-1", "node-2"]) == [
        ("notify", {"hosts": ["node-1", "node-2"]})
    ]
    assert proposed("host.oom_kill", domain="host") == [("notify", {"host": "node-1"})]
    assert proposed("proc.killed.sigkill", domain="software") == [("notify", {"host": "node-1"})]
    assert proposed("gpu.thermal_slowdown") == [("swap_hot_spare", {"host": "node-1"})]
    assert proposed("host.lockup", domain="host") == [("drain", {"host": "node-1"}), ("reboot", {"host": "node-1"})]
    assert proposed("none", outcome="completed", domain="unknown") == []
    assert proposed("something.new", domain="storage") == [("notify", {"host": "node-1"})]  # fallback


def test_a_rule_chain_and_certification_flags(policy):
    rule = next(r for r in policy.rules if r.id == "gpu-fell-off-bus")
    assert [(a.action, a.requires_certification, a.effective_severity) for a in rule.actions] == [
        ("drain", True, 30), ("reboot", False, 50)
    ]


MINIMAL = "version: 3\nrules:\n  - id: r1\n    match: {code: gpu.xid.79}\n    actions: [{action: drain}]\n"


def test_minimal_policy_and_version_as_text():
    p = parse_policy(MINIMAL)
    assert p.version == "3"
    assert p.xid_buckets == {} and [r.id for r in p.all_rules()] == ["r1"]


@pytest.mark.parametrize(
    "text, expected",
    [
        (MINIMAL.replace("action: drain", "action: nuke"), "rules.0.actions.0.action: Input should be 'cordon'"),
        (MINIMAL.replace("{action: drain}", "{action: drain, mode: yolo}"), "rules.0.actions.0.mode: Input should be 'auto'"),
        (MINIMAL.replace("version: 3\n", ""), "version: required field missing"),
        (MINIMAL.replace("  - id: r1\n", "  - source: x\n"), "rules.0.id: required field missing"),
        (MINIMAL.replace("{action: drain}", "{action: drain, colour: red}"), "rules.0.actions.0.colour: unknown field"),
        (MINIMAL + "xid_buckets:\n  RESET_EVERYTHING: {actions: []}\n", "xid_buckets: Value error, unknown XID catalog bucket 'RESET_EVERYTHING'"),
        (MINIMAL.replace("{action: drain}", "{action: drain, target: port}"), "rules.0.actions.0: Value error, a port target takes disable_port"),
        (MINIMAL.replace("{action: drain}", "{action: drain, target: hosts, requires_certification: true}"),
         "rules.0.actions.0: Value error, requires_certification needs target host or gpu (one node), not hosts"),
        (MINIMAL.replace("{code: gpu.xid.79}", "{xid_hint: REBOOT_PLEASE}"), "rules.0.match.xid_hint: Value error, unknown XID 154 hint"),
        (MINIMAL + "guards: {circuit_breaker: {max_fraction: 1.5}}\n", "guards.circuit_breaker.max_fraction: Input should be less than or equal to 1"),
        (MINIMAL + "  - id: r1\n    actions: []\n", "duplicate rule id 'r1'"),
    ],
)
def test_policy_errors_name_the_field_path(text, expected):
    with pytest.raises(PolicyError) as err:
        parse_policy(text, origin="site.yaml")
    assert str(err.value).startswith("site.yaml: ")
    assert expected in str(err.value)


def test_policy_syntax_and_file_errors(tmp_path):
    with pytest.raises(PolicyError, match=r"^p.yaml: not valid YAML"):
        parse_policy("version: [1\n", origin="p.yaml")
    with pytest.raises(PolicyError, match="a policy is a mapping"):
        parse_policy("- 1\n")
    bad = tmp_path / "policy.yaml"
    bad.write_text(MINIMAL.replace("action: drain", "action: nuke"))
    with pytest.raises(PolicyError, match=rf"^{bad}: rules.0.actions.0.action"):
        load_policy(bad)
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")
    good = tmp_path / "good.yaml"
    good.write_text(MINIMAL)
    assert load_policy(good).version == "3"


def test_ambiguous_alternatives_hosts_join_the_recertify():
    att = verdict("gpu.xid.79", quality="ambiguous", hosts=["node-1"])
    att.alternatives = [Alternative(code="host.oom_kill", domain="host", text="oom", score=0.8, hosts=["node-2"])]
    eng = RemediationEngine(load_policy(), fleet_size=100, topology=TOPOLOGY)
    out = eng.on_attribution(att)
    assert [(a.action, a.target.hosts) for a in out] == [("recertify", ["node-1", "node-2"])]
    quality = next(g for g in out[0].guards if g.guard == "verdict_quality")
    assert quality.detail == "ambiguous verdict: only recertify is proposed; withheld: drain (host), reboot (host)"
