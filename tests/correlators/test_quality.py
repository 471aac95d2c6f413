"""Repetition and history of application XIDs, GPU counts, quality conditions, the reasoning
chain and unexplained symptoms, and scores that say no."""

from __future__ import annotations

import io
import random
import shutil
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from correlators.attribution import WorkloadInfo, decide, default_causal_rules
from correlators.enrich import Allocation
from correlators.repetition import classify_gpu_count
from schemas.bundle import ExpectedSpec
from schemas.records import TIME_QUALITY_INHERITED, CoverageEntry, canonical_json
from streams.render import render_attribution
from streams.replay import replay_bundle, score
from tests.correlators.test_attribution import S, ev, present, spec, watchdog, xid

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"


def decide_with(s, events, coverage=(), history=()):
    alloc = Allocation.from_workload(s)
    enriched = [alloc.enrich(e) for e in events]
    return decide(WorkloadInfo.from_spec(s), alloc, enriched, list(coverage), ruleset_version="test",
                  history=list(history))


def other_job(event, job="job-0999"):
    return event.model_copy(update={"workload_id": job}).with_id()


# --- repetition --------------------------------------------------------------------------------


def test_one_process_xid31_is_the_application():
    s = spec(nodes=("node-a01",), rpn=2)
    att = decide_with(s, [xid(100, "node-a01", 31, 0, pid=647)], present("node-a01"))
    assert att.root_cause.code == "app.xid.31"
    assert att.domain == "software"


def test_xid31_from_two_processes_on_one_gpu_shifts_to_the_gpu_with_the_app_as_alternative():
    s = spec(nodes=("node-a01",), rpn=2)
    events = [xid(-60, "node-a01", 31, 0, pid=501), xid(100, "node-a01", 31, 0, pid=647)]
    att = decide_with(s, events, present("node-a01"))
    assert att.root_cause.code == "gpu.xid.31.repeated"
    assert att.domain == "gpu_hardware"
    assert att.culprits.hosts == ["node-a01"]
    assert [a.code for a in att.alternatives] == ["app.xid.31"]
    assert att.quality == "probable"  # a repeat is for diagnostics to confirm
    assert any("2 processes" in r and "pid 501" in r and "pid 647" in r for r in att.reasoning)
    # deterministic whatever the order
    for seed in range(4):
        shuffled = list(events)
        random.Random(seed).shuffle(shuffled)
        assert canonical_json(decide_with(s, shuffled, present("node-a01"))) == canonical_json(att)


def test_history_of_an_earlier_job_counts_and_is_never_a_cause():
    s = spec(nodes=("node-a01",), rpn=2)
    now = [xid(100, "node-a01", 31, 0, pid=647)]
    earlier = [other_job(xid(-8 * 3600, "node-a01", 31, 0, pid=501))]
    without = decide_with(s, now, present("node-a01"))
    with_history = decide_with(s, now, present("node-a01"), history=earlier)
    assert without.root_cause.code == "app.xid.31"
    assert with_history.root_cause.code == "gpu.xid.31.repeated"
    assert earlier[0].event_id not in with_history.symptoms
    # the earlier occurrence is shown as context, not as a cause
    roles = {i.event_id: i.role for i in with_history.evidence}
    assert roles[earlier[0].event_id] == "context"


def test_the_inputs_own_lines_before_the_window_are_history():
    # a host log collected after the job (dmesg -T) holds an earlier process's XID 31 on the
    # same GPU, 23 minutes before the job started: outside the decision window, it is never a
    # cause or a symptom, but it is an occurrence (rc-23)
    s = spec(nodes=("node-a01",), rpn=2)
    earlier = xid(-23 * 60, "node-a01", 31, 0, pid=501)
    att = decide_with(s, [earlier, xid(100, "node-a01", 31, 0, pid=647)], present("node-a01"))
    assert att.root_cause.code == "gpu.xid.31.repeated"
    assert att.domain == "gpu_hardware"
    assert earlier.event_id not in att.symptoms
    # one process's earlier line is no repeat
    same = xid(-23 * 60, "node-a01", 31, 0, pid=647)
    assert decide_with(s, [same, xid(100, "node-a01", 31, 0, pid=647)], present("node-a01")).root_cause.code == "app.xid.31"
    # nor is an earlier XID 31 on another GPU
    other = xid(-23 * 60, "node-a01", 31, 1, pid=501)
    assert decide_with(s, [other, xid(100, "node-a01", 31, 0, pid=647)], present("node-a01")).root_cause.code == "app.xid.31"


def test_history_outside_the_window_or_on_another_gpu_does_not_count():
    s = spec(nodes=("node-a01",), rpn=2)
    now = [xid(100, "node-a01", 31, 0, pid=647)]
    too_old = [other_job(xid(-30 * 3600, "node-a01", 31, 0, pid=501))]
    other_gpu = [other_job(xid(-3600, "node-a01", 31, 1, pid=501))]
    assert decide_with(s, now, present("node-a01"), history=too_old).root_cause.code == "app.xid.31"
    assert decide_with(s, now, present("node-a01"), history=other_gpu).root_cause.code == "app.xid.31"


def test_lines_of_one_process_without_pid_are_no_repeat():
    s = spec(nodes=("node-a01",), rpn=2)
    events = [xid(100, "node-a01", 31, 0, pid=647), xid(100.2, "node-a01", 31, 0), xid(100.4, "node-a01", 31, 0)]
    assert decide_with(s, events, present("node-a01")).root_cause.code == "app.xid.31"


def test_the_same_xid_on_every_gpu_of_the_node_points_at_the_driver_or_application():
    s = spec(nodes=("node-a01",), rpn=2)  # the allocation says the node has GPUs 0 and 1
    events = [xid(100, "node-a01", 31, g, pid=700 + g) for g in (0, 1)]
    history = [other_job(xid(-3600, "node-a01", 31, g, pid=600 + g)) for g in (0, 1)]
    att = decide_with(s, events, present("node-a01"), history=history)
    assert att.domain == "software"
    assert att.root_cause.code == "app.xid.31"
    assert any(a.code == "gpu.driver.xid_31_all_gpus" and a.domain == "gpu_software" for a in att.alternatives)
    assert any("all 2 GPUs" in r for r in att.reasoning)


def test_repetition_rules_are_in_yaml_with_their_source():
    rep = default_causal_rules().sections["repetition"]
    assert rep["window_s"] == 86400 and rep["min_processes"] == 2
    assert set(rep["xids"]) == {13, 31, 43}


# --- GPU count ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attrs, code, domain",
    [
        ({"capacity": 8, "allocatable": 0, "missing": 8, "resource": "nvidia.com/gpu"}, "config.gpu.none_visible", "config"),
        ({"capacity": 8, "allocatable": 7, "missing": 1, "resource": "nvidia.com/gpu"}, "gpu.capacity_drop", "gpu_hardware"),
    ],
)
def test_k8s_gpu_count_none_is_config_one_fewer_is_hardware(attrs, code, domain):
    e = ev("k8s.gpu_capacity", 10, "node-a01", **attrs)
    got = classify_gpu_count(e, default_causal_rules().sections["gpu_count"])
    assert (got[0], got[2]) == (code, domain)


def test_slurm_gres_count_zero_is_config_one_fewer_keeps_its_code():
    params = default_causal_rules().sections["gpu_count"]
    none = ev("sched.node_state", 10, "node-a01", reason_kind="gres_low", reported=0, configured=8, gres="gpu")
    one = ev("sched.node_state", 10, "node-a01", reason_kind="gres_low", reported=7, configured=8, gres="gpu")
    assert classify_gpu_count(none, params)[:3] == ("config.gpu.none_visible", "config", "config")
    assert classify_gpu_count(one, params)[0] == "sched.gres_missing"
    assert classify_gpu_count(one, params)[2] == "gpu_hardware"


# --- quality -----------------------------------------------------------------------------------


def _fell_off_bus(s):
    events = [xid(600, "node-a02", 79, 5)]
    events += [watchdog(1200.5 + r / 100, s.rank_map()[r].host, r) for r in range(16) if r != 13]
    return events


def test_definitive_needs_complete_input():
    s = spec()
    assert decide_with(s, _fell_off_bus(s), present("node-a01", "node-a02")).quality == "definitive"
    failed = present("node-a01", "node-a02") + [CoverageEntry(source="file:logs/node-a01/app.log", status="failed")]
    att = decide_with(s, _fell_off_bus(s), failed)
    assert att.quality == "probable"
    assert any("input is incomplete" in r and "file:logs/node-a01/app.log failed" in r for r in att.reasoning)


def _lone_xid(code, host="node-a01", quality=None):
    """One XID line with no symptom around it, as a device plugin or a kernel log gives it."""
    e = ev("gpu.xid", 600, host, xid=code)
    return e if quality is None else e.model_copy(update={"time_quality": quality}).with_id()


@pytest.mark.parametrize("code", [48, 79, 94, 95])
def test_one_decisive_hardware_line_is_definitive_when_dated(code):
    s = spec()
    # node-a02 sent nothing: an empty source cannot unsay the line on node-a01
    att = decide_with(s, [_lone_xid(code)], present("node-a01") + [
        CoverageEntry(source="host:node-a02", status="empty")])
    assert (att.root_cause.code, att.domain, att.culprits.hosts) == (f"gpu.xid.{code}", "gpu_hardware", ["node-a01"])
    assert att.quality == "definitive"
    assert any("decisive hardware line" in r for r in att.reasoning)


def test_one_decisive_line_without_its_own_time_is_probable_and_names_no_placeholder():
    s = spec()
    att = decide_with(s, [_lone_xid(94, quality=TIME_QUALITY_INHERITED)], present("node-a01", "node-a02"))
    assert (att.root_cause.code, att.quality) == ("gpu.xid.94", "probable")
    assert att.root_cause.text == ("contained uncorrectable memory (ECC) error on a GPU on node-a01 "
                                   "(XID 94: Contained memory error)")


def test_a_decisive_line_on_a_host_outside_the_allocation_is_not_promoted():
    s = spec()
    att = decide_with(s, [_lone_xid(94, host="node-a09", quality=TIME_QUALITY_INHERITED)], present("node-a01", "node-a02"))
    assert att.quality != "definitive"
    assert not any("decisive hardware line" in r for r in att.reasoning)


def test_a_weak_named_cause_is_ambiguous_never_insufficient():
    s = spec()
    # XID 43 alone: the catalog's IGNORE bucket, a cause too weak to be probable
    att = decide_with(s, [xid(600, "node-a01", 43, 0)], present("node-a01", "node-a02"))
    assert att.root_cause.code == "gpu.xid.43" and att.confidence < 0.45
    assert att.quality == "ambiguous"
    assert any("too weak to be probable" in r for r in att.reasoning)


@pytest.mark.parametrize("bundle", sorted(p.name for p in EXAMPLES.iterdir() if (p / "expected.yaml").exists()))
def test_a_verdict_that_names_a_cause_is_never_insufficient(bundle):
    for att in replay_bundle(EXAMPLES / bundle).attributions:
        if att.root_cause.code not in ("unknown", "none"):
            assert att.quality != "insufficient", (att.scope.id, att.root_cause.code)
        assert "GPU ?" not in att.root_cause.text and " ()" not in att.root_cause.text


def test_an_undated_deciding_line_is_at_most_probable():
    s = spec()
    events = _fell_off_bus(s)
    events[0] = events[0].model_copy(update={"time_quality": TIME_QUALITY_INHERITED}).with_id()
    att = decide_with(s, events, present("node-a01", "node-a02"))
    assert att.quality == "probable"
    assert any("no timestamp of its own" in r for r in att.reasoning)


def test_a_cause_after_the_workload_ended_is_no_cause():
    s = spec(dur_s=600)
    events = [xid(700, "node-a02", 79, 5)]
    att = decide_with(s, events, present("node-a01", "node-a02"))
    assert att.root_cause.code == "unknown" and att.quality == "insufficient"
    assert [e.type for e in att.evidence] == ["gpu.xid"]


def test_a_partial_cause_lists_what_it_leaves_unexplained():
    s = spec()
    events = _fell_off_bus(s)
    # a reset on node-a01 eight minutes before the GPU fell off the bus: not its consequence
    events.append(ev("net.connection_reset", 120, "node-a01", rank=2, peer="10.0.0.99:1"))
    att = decide_with(s, events, present("node-a01", "node-a02"))
    assert att.root_cause.code == "gpu.xid.79"
    assert [(u.type, u.count, u.hosts) for u in att.unexplained] == [("net.connection_reset", 1, ["node-a01"])]
    assert any("left unexplained" in r for r in att.reasoning)


def test_reasoning_names_the_cause_time_and_backdated_symptoms():
    s = spec()
    att = decide_with(s, _fell_off_bus(s), present("node-a01", "node-a02"))
    assert "Xid 79" in att.reasoning[0] and "node-a02" in att.reasoning[0]
    assert any("15 nccl.watchdog_timeout" in r and "back-dated" in r for r in att.reasoning)
    assert att.reasoning[-1].startswith("quality definitive")


def test_render_shows_the_reasoning():
    att = replay_bundle(EXAMPLES / "history-xid31-repeated-across-jobs").attribution
    out = io.StringIO()
    render_attribution(att, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "Reasoning" in text and "1. " in text and "gpu.xid.31.repeated" in text


# --- scores that say no --------------------------------------------------------------------------


WRONG = {
    "domain": ({"domain": "fabric"}, "domain gpu_hardware != fabric"),
    "root_cause": ({"root_cause": "app.xid"}, "root cause gpu.xid.31.repeated !~ app.xid"),
    "culprits": ({"culprit_hosts": ["node-a02"]}, "hosts ['node-a01'] != ['node-a02']"),
    "ranks": ({"culprit_ranks": [3]}, "ranks [] != [3]"),
    "quality": ({"quality_any_of": ["definitive"]}, "quality probable not in ['definitive']"),
    "not_domain": ({"not_domain": ["gpu_hardware", "fabric"]}, "domain gpu_hardware in not_domain ['gpu_hardware', 'fabric']"),
    "root_cause_list": ({"root_cause": ["app.xid", "host."]}, "root cause gpu.xid.31.repeated !~ app.xid | host."),
    "alternatives": ({"alternatives": ["host.oom"]}, "alternative host.oom not among ['app.xid.31']"),
    "no_alternatives": ({"alternatives": []}, "alternatives ['app.xid.31'] listed, none expected"),
}


@pytest.mark.parametrize("field", sorted(WRONG))
def test_score_misses_a_wrong_expectation_with_its_reason(tmp_path, field):
    bundle = tmp_path / "b"
    shutil.copytree(EXAMPLES / "history-xid31-repeated-across-jobs", bundle)
    good = yaml.safe_load((bundle / "expected.yaml").read_text())
    assert score(replay_bundle(bundle).attribution, ExpectedSpec(**good), "b").hit
    wrong, reason = WRONG[field]
    (bundle / "expected.yaml").write_text(yaml.safe_dump({**good, **wrong}))
    result = replay_bundle(bundle)
    row = score(result.attribution, result.expected, "b")
    assert not row.hit
    assert reason in row.misses


def test_expected_root_cause_list_accepts_any_prefix_and_not_domain_passes_other_domains():
    att = replay_bundle(EXAMPLES / "history-xid31-repeated-across-jobs").attribution
    assert score(att, ExpectedSpec(root_cause=["host.oom", "gpu.xid.31"], not_domain=["software", "fabric"]), "b").hit


def test_calibration_counts_each_quality_level_and_judges_everything_but_quality():
    from streams.replay import ScoreRow, calibration

    rows = [ScoreRow("a", "x", "x", (), "definitive"),
            ScoreRow("b", "x", "x", ("quality definitive not in ['probable']",), "definitive"),
            ScoreRow("c", "x", "x", ("domain fabric != host",), "probable"),
            ScoreRow("d", "x", "x", (), "probable"),
            ScoreRow("e", "?", "not replayed", ("e: broken",))]
    got = {r.quality: (r.verdicts, r.right, r.rate, r.met) for r in calibration(rows)}
    assert got == {"definitive": (2, 2, 1.0, True), "probable": (2, 1, 0.5, False),
                   "ambiguous": (0, 0, None, True), "insufficient": (0, 0, None, True)}


def test_expected_alternatives_match_by_prefix():
    att = replay_bundle(EXAMPLES / "history-xid31-repeated-across-jobs").attribution
    assert score(att, ExpectedSpec(alternatives=["app."]), "b").hit
    assert score(att, ExpectedSpec(alternatives=["app.xid.31"]), "b").hit


def test_a_cause_logged_after_the_job_ended_does_not_take_over(tmp_path) -> None:
    """An Xid 79 on another node 20 s after the job ended cannot have caused it: the
    verdict's root cause (its event) and culprits stay those of the bundle without it."""
    import shutil
    from pathlib import Path

    from streams.replay import replay_bundle

    src = Path(__file__).resolve().parents[2] / "examples" / "incidents" / "public-rc15-pcie-aer-xid79-multinode"
    base = replay_bundle(src).attribution
    bundle = tmp_path / "b"
    shutil.copytree(src, bundle)
    late = bundle / "logs" / "node-a01" / "kernel-late.log"
    late.write_text("2026-11-30T01:31:30Z node-a01 kernel: NVRM: Xid (PCI:0000:01:00): 79, pid=0, "
                    "GPU has fallen off the bus.\n")
    att = replay_bundle(bundle).attribution
    assert (att.root_cause.code, att.culprits.hosts) == (base.root_cause.code, base.culprits.hosts) == (
        "gpu.xid.79", ["node-a02"])
    assert att.root_cause.event_id == base.root_cause.event_id
