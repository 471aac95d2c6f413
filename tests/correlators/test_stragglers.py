"""Stragglers (issue 35): peer comparison, persistence, node vs GPU, change point, NVRx
reports, attribution, goodput, the stream's provisional verdict, the remediation proposal and
the ``outcome`` score."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import numpy as np
import pytest

from connectors.publish import bundle_records
from connectors.timefmt import TimeContext, parse_line_time
from correlators.attribution import default_causal_rules
from correlators.cost import workload_cost
from correlators.enrich import Allocation
from correlators.remediation import RemediationEngine, load_policy
from correlators.stragglers import Goodput, PeerTracker, StragglerParams, change_point, find_stragglers
from schemas.bundle import ExpectedSpec
from schemas.records import Event
from streams.replay import replay_bundle, score
from tests.correlators.test_pipeline import content, live_run, standing
from tests.correlators.test_remediation_policy import TOPOLOGY, verdict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"
PARAMS = StragglerParams.of(default_causal_rules().detectors["stragglers"])
T0 = 1_796_090_400 * 10**9
S = 10**9


def run(times: np.ndarray, params: StragglerParams = PARAMS) -> tuple[PeerTracker, dict[int, int]]:
    """Feed a (steps, ranks) array; returns the tracker and rank -> step it was flagged at."""
    tracker = PeerTracker(times.shape[1], params, history=times.shape[0])
    flagged: dict[int, int] = {}
    for i, row in enumerate(times):
        for c in tracker.step(row):
            flagged[int(c)] = i
    return tracker, flagged


def jitter(steps: int, ranks: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 2.0 * rng.lognormal(0.0, 0.02, (steps, ranks)) * rng.lognormal(0.0, 0.03, (steps, 1))


def test_a_rank_that_slows_mid_run_is_flagged_within_20_steps_with_its_change_point():
    times = jitter(80, 256, 1)
    times[30:, 77] *= 1.12
    tracker, flagged = run(times)
    assert list(flagged) == [77]
    assert 30 < flagged[77] <= 30 + 20
    assert change_point(tracker.ratios(77)[: flagged[77] + 1]) == 30


def test_what_slows_every_rank_alike_and_one_step_hiccups_never_fire():
    times = jitter(120, 256, 2)
    times[40:44] *= 4.0  # a checkpoint
    times[60:75] *= 1.4  # a shared storage stall
    times[::10, 6] *= 2.0  # rank 6's data-loading phase, one step in ten
    _, flagged = run(times)
    assert flagged == {}


def test_a_slowdown_below_the_threshold_or_too_short_is_not_a_straggler():
    times = jitter(80, 128, 3)
    times[20:, 5] *= 1.03  # within GPU-to-GPU variation
    times[20:26, 9] *= 1.5  # slow for 6 steps only
    _, flagged = run(times)
    assert flagged == {}


def test_a_batch_of_jobs_gives_each_job_what_its_own_tracker_gives():
    jobs = [jitter(60, 64, 10 + k) for k in range(3)]
    jobs[1][20:, 9] *= 1.15
    jobs[2][::7, 3] = np.nan  # a rank without a sample every 7th step
    batch = PeerTracker(64, PARAMS, history=60, jobs=3)
    got: dict[int, int] = {}
    for i in range(60):
        for c in batch.step(np.stack([j[i] for j in jobs])):
            got[int(c)] = i
    want = {k * 64 + r: i for k, j in enumerate(jobs) for r, i in run(j)[1].items()}
    assert got == want and list(got) == [64 + 9]
    single = run(jobs[2])[0]
    np.testing.assert_array_equal(batch.smoothed[2], single.smoothed)
    np.testing.assert_array_equal(batch.baseline[2], single.baseline)


@pytest.mark.parametrize("window", [1, 2, 5, 9, 12])
def test_the_window_median_is_numpys(window):
    from correlators.stragglers import _window_median
    ring = np.round(np.random.default_rng(window).random((window, 4, 33)), 2)  # ties included
    np.testing.assert_array_equal(_window_median(ring), np.median(ring, axis=0))
    ring[window // 2, 1, 5] = np.nan  # with a NaN, numpy.nanmedian's values (NaN in an all-NaN lane)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's own all-NaN warning, for the expectation
        np.testing.assert_array_equal(_window_median(ring), np.nanmedian(ring, axis=0))


@pytest.mark.slow
def test_the_bench_quick_run_measures_no_false_positive_and_full_recall_at_10_percent():
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "bench" / "stragglers.py"), "--quick"], capture_output=True,
                         text=True, timeout=600, cwd=root)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for level in ("10.0%", "15.0%", "20.0%", "30.0%"):
        row = next(line.split() for line in lines if line.split()[:1] == [level])
        assert row[1] == "100.0%", row
    fleet = next(line for line in lines if line.strip().startswith("fleet:"))
    assert fleet.split()[1] == "0" and "14.0 healthy job-hours" in fleet, fleet
    assert any("0 straggler(s)" in line for line in lines if "end to end" in line)


def _events(times: np.ndarray, ranks_per_node: int = 8) -> tuple[list[Event], Allocation]:
    steps, ranks = times.shape
    alloc = Allocation(workload_id="job-1", cluster="c1",
                       ranks={r: (f"node-a{r // ranks_per_node + 1:02d}", r % ranks_per_node) for r in range(ranks)})
    events = [Event(type="perf.step_time", at=T0 + i * 2 * S + r * 1000, host=alloc.ranks[r][0], cluster="c1",
                    workload_id="job-1", rank=r, rule="test@1",
                    attributes={"framework": "deepspeed", "metric": "fwd", "step": i, "seconds": float(times[i, r])}).with_id()
              for i in range(steps) for r in range(ranks)]
    return events, alloc


def test_find_stragglers_names_the_gpu_or_the_node_whatever_the_event_order():
    times = jitter(70, 32, 4)
    times[25:, 13] *= 1.2  # one GPU of node-a02
    times[35:, 24:32] *= 1.15  # all of node-a04
    events, alloc = _events(times)
    got = find_stragglers(events, alloc, PARAMS)
    assert [(s.level, s.host, s.ranks, s.gpu_index) for s in got] == [
        ("gpu", "node-a02", [13], 5), ("node", "node-a04", list(range(24, 32)), None)]
    assert got[0].since_step == 25 and got[1].since_step == 35
    assert 0.17 < got[0].slowdown < 0.23 and 0.12 < got[1].slowdown < 0.18
    shuffled = list(events)
    random.Random(7).shuffle(shuffled)
    again = find_stragglers(shuffled, alloc, PARAMS)
    assert [(s.host, s.ranks, s.since, s.detected, s.slowdown) for s in again] == \
        [(s.host, s.ranks, s.since, s.detected, s.slowdown) for s in got]


def test_nvrx_scores_in_consecutive_reports_name_the_rank():
    alloc = Allocation(workload_id="job-1", cluster="c1", ranks={r: (f"node-a{r // 8 + 1:02d}", r % 8) for r in range(32)})

    def score_event(report: int, rank: int, value: float) -> Event:
        return Event(type="perf.gpu_score", at=T0 + report * 60 * S, host="node-a01", cluster="c1", rank=rank,
                     rule="perf.nvrx_score@1", attributes={"score": value, "node": alloc.ranks[rank][0]}).with_id()

    events = [score_event(k, 21, 0.82 if k else 0.98) for k in range(3)] + [score_event(k, 0, 1.0) for k in range(3)]
    got = find_stragglers(events, alloc, PARAMS)
    assert [(s.host, s.ranks, s.source, s.since) for s in got] == [("node-a03", [21], "nvrx", T0 + 60 * S)]
    assert got[0].slowdown == pytest.approx(1 / 0.82 - 1, abs=1e-4)
    # one low report is not persistent
    assert find_stragglers(events[:2] + events[3:], alloc, PARAMS) == []


def test_goodput_cost_is_the_lost_share_from_the_change_point():
    alloc = Allocation(workload_id="job-1", cluster="c1", ranks={r: ("node-a01", r) for r in range(8)})
    cost = workload_cost(cause_at=T0, end_ns=T0 + 7200 * S, decided_at=T0 + 7200 * S, nodes=["node-a01"], alloc=alloc,
                         symptoms=[], culprit_hosts=["node-a01"],
                         goodput=Goodput(fraction=0.2, since=T0 + 3600 * S, healthy_s=2.0, observed_s=2.5))
    assert cost.lost_from == T0 + 3600 * S and cost.lost_s == 3600.0
    assert cost.goodput_lost_fraction == 0.2 and cost.gpu_hours_lost_per_hour == 1.6
    assert cost.gpu_hours_lost == 1.6 and cost.node_hours_lost == 0.2
    assert (cost.healthy_step_s, cost.observed_step_s) == (2.0, 2.5)


def test_the_thermal_example_verdict_names_gpu_cause_and_goodput():
    att = replay_bundle(EXAMPLES / "straggler-gpu-thermal").attribution
    assert (att.outcome, att.root_cause.code, att.culprits.hosts, att.culprits.ranks) == (
        "degraded", "straggler.gpu_thermal", ["node-a02"], [13])
    assert [g.index for g in att.culprits.gpus] == [5]
    # the job's own iteration time: ~2.0 s before, ~2.36 s after (18 % slower rank)
    assert 0.12 < att.cost.goodput_lost_fraction < 0.19
    assert att.cost.gpu_hours_lost_per_hour == pytest.approx(32 * att.cost.goodput_lost_fraction, abs=1e-3)
    assert 1.95 < att.cost.healthy_step_s < 2.05 and 2.3 < att.cost.observed_step_s < 2.45
    assert T0 + 65 * S <= att.cost.lost_from < T0 + 66 * S  # step 30 (5 s + 30 x 2 s after 02:00:00): rank 13's line
    assert "gpu.thermal_slowdown" in " ".join(att.reasoning)  # the rule's own hypothesis, folded in


def test_the_unexplained_straggler_is_ambiguous_and_still_names_the_gpu():
    att = replay_bundle(EXAMPLES / "straggler-unexplained").attribution
    assert (att.outcome, att.root_cause.code, att.quality) == ("degraded", "straggler.unexplained", "ambiguous")
    assert att.culprits.hosts == ["node-a02"] and att.culprits.ranks == [9]
    assert "GPU #1 of node-a02" in att.root_cause.text


@pytest.mark.slow
def test_the_stream_emits_a_provisional_degraded_verdict_before_the_job_ends_then_the_replay_bytes():
    bundle = EXAMPLES / "straggler-gpu-thermal"
    records, _ = bundle_records(bundle)
    records = sorted(records, key=lambda o: (o.observed_at, o.observation_id))
    latest, published = live_run(records)
    replayed = {a.attribution_id: content(a) for a in replay_bundle(bundle).attributions}
    assert standing(latest) == replayed
    early = [a for a in published if a.status == "provisional" and a.root_cause is not None
             and a.root_cause.code == "straggler.gpu_thermal"]
    assert early, "no provisional straggler verdict"
    assert early[0].outcome == "degraded" and early[0].culprits.ranks == [13]
    # decided on the evidence that had arrived: none of it from the job's last 20 steps
    assert max(item.at for item in early[0].evidence) < T0 + 145 * S


@pytest.mark.parametrize("code", ["straggler.gpu_thermal", "straggler.unexplained", "straggler.host_memory"])
def test_the_policy_proposes_cordon_and_recertify_in_dry_run(code):
    eng = RemediationEngine(load_policy(), fleet_size=100, topology=TOPOLOGY)
    actions = eng.on_attribution(verdict(code, outcome="degraded", quality="probable"))
    assert [(a.action, a.mode) for a in actions][:1] == [("cordon", "dry_run")]
    assert any(a.action == "recertify" for a in actions)


def test_outcome_is_scored_like_domain():
    att = replay_bundle(EXAMPLES / "straggler-counter-checkpoint").attribution
    assert att.outcome == "completed" and att.root_cause.code == "none"
    assert score(att, ExpectedSpec(outcome="completed"), "b").misses == ()
    assert score(att, ExpectedSpec(outcome="degraded"), "b").misses == ("outcome completed != degraded",)


@pytest.mark.parametrize("line, want", [
    (" [2026-12-01 02:00:07] iteration        1/      90 | consumed samples:         1024 |", T0 + 7 * S),
    ("[NeMo W 2026-12-01 02:01:00 straggler_det_callback:88] STRAGGLER DETECTION WARNING", T0 + 60 * S),
])
def test_trainer_line_times(line, want):
    got = parse_line_time(line, TimeContext(2026))
    assert got is not None and got.at_ns == want
