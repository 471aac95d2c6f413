"""NVCRE-style bisection: screening plan per topology domain, and the adaptive screen -> halve ->
pair procedure finding 1-2 bad hosts among 232 in far fewer tests than pairs (NVCRE: ~55
tests instead of ~27,000)."""

from __future__ import annotations

import random

import pytest

from correlators.remediation import RemediationEngine, bisect, load_policy, plan_screen, screen_groups
from schemas.bundle import Link, TopologySpec
from schemas.records import Attribution, Culprits, RootCause, Scope, Window

NS = 1_000_000_000
T0 = 1_800_000_000 * NS
HOSTS = [f"n{i:03d}" for i in range(232)]
RACKS = TopologySpec(domains={f"rack-{r}": HOSTS[r * 29 : (r + 1) * 29] for r in range(8)})
PAIRS = 232 * 231 // 2  # testing every pair


def sim(bad):
    """A group passes iff it holds no bad host (what an NCCL all-reduce over it would show)."""
    return lambda group: not set(group) & set(bad)


def test_screen_groups_follow_domains_then_leaf_switches_then_chunks():
    topo = TopologySpec(
        domains={"rack-1": ["a", "b"], "nvl-1": ["b", "c"]},
        links=[Link(host="d", hca="mlx5_0", switch="leaf-07", switch_port="1")],
    )
    assert screen_groups(["e", "d", "c", "b", "a"], topo) == [
        ("rack-1", ["a", "b"]), ("nvl-1", ["c"]), ("leaf-07", ["d"]), ("unplaced", ["e"])
    ]
    assert screen_groups([f"h{i:02d}" for i in range(5)], None, max_group=2) == [
        ("unplaced#1", ["h00", "h01"]), ("unplaced#2", ["h02", "h03"]), ("unplaced#3", ["h04"])
    ]


def test_plan_screen_one_parallel_group_per_domain():
    plan = plan_screen(HOSTS, RACKS, ["spare-1"])
    assert [g.step for g in plan] == list(range(1, 9))
    assert {g.stage for g in plan} == {"screen"} and {g.test for g in plan} == {"nccl-allreduce"}
    assert plan[0].hosts == HOSTS[:29] and plan[0].reason == "screen rack-0: 29 host(s)"
    assert sorted(h for g in plan for h in g.hosts) == HOSTS
    single = plan_screen(["n005"], RACKS, ["n005", "spare-1"], test="dcgm-diag-r2")
    assert [(g.hosts, g.test, g.reason) for g in single] == [
        (["n005", "spare-1"], "dcgm-diag-r2", "screen rack-0: 1 host(s), paired with known-healthy spare-1")
    ]


@pytest.mark.parametrize("nbad", [1, 2])
def test_bisect_finds_the_bad_hosts_among_232_in_at_most_55_tests(nbad):
    counts = []
    for seed in range(200):
        bad = random.Random(seed * 10 + nbad).sample(HOSTS, nbad)
        result = bisect(HOSTS, RACKS, ["spare-1", "spare-2"], sim(bad))
        assert result.suspects == sorted(bad)
        assert result.tests_run == len(result.steps)
        counts.append(result.tests_run)
    assert max(counts) <= 55 < PAIRS
    # screening 8 racks + ~log2(29) halvings per bad host
    assert max(counts) == (18 if nbad == 1 else 27)


def test_bisect_without_topology_chunks_the_hosts():
    bad = ["n017", "n200"]
    result = bisect(HOSTS, None, [], sim(bad))
    assert result.suspects == bad
    assert result.tests_run <= 55
    assert [g.hosts for g, _ in result.steps if g.stage == "screen"][0] == HOSTS[:32]


def test_bisect_steps_screen_halve_pair_with_healthy_padding():
    hosts = [f"h{i}" for i in range(8)]
    result = bisect(hosts, TopologySpec(domains={"rack-a": hosts}), ["good-1"], sim(["h5"]))
    assert result.suspects == ["h5"]
    steps = [(g.stage, g.hosts, passed) for g, passed in result.steps]
    assert steps == [
        ("screen", hosts, False),
        ("halve", ["h0", "h1", "h2", "h3"], True),  # first half passes: the second must fail,
        ("halve", ["h4", "h5"], False),             # so it is split without a test of its own
        ("pair", ["h4", "good-1"], True),
        # h5 is inferred (its sibling passed): confirmed paired with a known-healthy host
        ("pair", ["h5", "good-1"], False),
        ("halve", ["h6", "h7"], True),              # a second bad host could hide here
    ]
    assert result.steps[3][0].reason == "confirm suspect h4; padded with known-healthy good-1"
    assert [g.step for g, _ in result.steps] == [1, 2, 3, 4, 5, 6]


def test_bisect_learns_healthy_hosts_when_none_is_given():
    hosts = [f"h{i}" for i in range(4)]
    topo = TopologySpec(domains={"r1": hosts[:2], "r2": hosts[2:]})
    result = bisect(hosts, topo, [], sim(["h3"]))
    assert result.suspects == ["h3"]
    # r1 passed in screening, so its hosts pad the pair tests of r2
    assert [(g.stage, g.hosts) for g, _ in result.steps] == [
        ("screen", ["h0", "h1"]), ("screen", ["h2", "h3"]), ("pair", ["h2", "h0"]), ("pair", ["h3", "h0"])
    ]


def test_bisect_interaction_fault_yields_no_false_suspect():
    # fails only when h1 and h6 are together (a bad link between them): no host fails its pair
    hosts = [f"h{i}" for i in range(8)]
    result = bisect(hosts, None, ["good"], lambda g: not {"h1", "h6"} <= set(g))
    assert result.suspects == []
    assert [(g.stage, passed) for g, passed in result.steps] == [
        ("screen", False), ("halve", True), ("halve", True), ("pair", True), ("pair", True)
    ]


def test_ambiguous_verdict_proposes_a_screening_plan_over_the_affected_hosts():
    att = Attribution(
        attribution_id="att-nccl", scope=Scope(kind="workload", id="job-232", cluster="c1"),
        window=Window(start=T0 - 600 * NS, end=T0), outcome="hung", domain="unknown",
        root_cause=RootCause(code="nccl.watchdog_timeout", text="NCCL timeouts on every rank"),
        culprits=Culprits(), confidence=0.2, quality="insufficient", ruleset_version="t", engine_version="t",
        decided_at=T0,
    )
    att.affected.hosts = HOSTS
    eng = RemediationEngine(load_policy(), topology=RACKS)
    (action,) = eng.on_attribution(att)
    assert action.action == "recertify" and action.target.hosts == HOSTS
    assert action.mode == "dry_run" and action.state == "proposed"
    assert [g.hosts for g in action.plan] == [HOSTS[r * 29 : (r + 1) * 29] for r in range(8)]
    assert action.reason == (
        "insufficient verdict: nccl.watchdog_timeout; recertify 232 host(s) before any repair "
        "(NVCRE screen -> halve -> pair)"
    )
