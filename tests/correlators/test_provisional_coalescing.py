"""Provisional revisions coalesced per scope (``WindowPolicy.provisional_interval_s``,
``correlators.pipeline.Pipeline._emit``): the first provisional verdict of a workload comes
when it did without coalescing, later ones at most once per interval and only when what
they say changed, the held-back content comes with the next tick (``Pipeline.idle``), and the
final verdicts are those of replay, byte for byte but the revision counter.

Each example bundle goes through the in-memory router in live mode as a burst (the driver
clock advancing 10 ms a record: the whole bundle in a few seconds, as a broker delivers it)
in a shuffled order (a worker reads several partitions: a window's watermark can pass the
job's end before the rest of its evidence comes, and then every event re-decides it -- the
41 to 96 provisional revisions of one verdict of the leaf-switch example seen here, 49 in the
stream).
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest

from connectors.publish import bundle_records
from correlators.config import EngineConfig, WindowPolicy
from correlators.pipeline import InMemoryRouter, Pipeline, Publish
from correlators.windows import verdict_content
from schemas.records import Attribution
from streams.replay import replay_bundle
from tests.correlators.test_pipeline import BUNDLES, EXAMPLES, content

LEAF = EXAMPLES / "fabric-leaf-switch-down-two-jobs"


def burst(bundle: Path, interval: float, *, seed: int = 0, step: float = 0.01,
          idle_s: float = 2.0) -> list[tuple[float, Attribution]]:
    """Every verdict published for ``bundle``'s records, shuffled with ``seed``, fed ``step`` s
    apart, then the timers ticking every 0.5 s until nothing is left (windows idle for
    ``idle_s`` close): (driver time, verdict) in order. ``interval``: the policy's
    ``provisional_interval_s``."""
    config = EngineConfig.default(window=WindowPolicy(idle_timeout_s=idle_s, fabric_flush_s=2.0,
                                                      provisional_interval_s=interval))
    records, _ = bundle_records(bundle)
    random.Random(seed).shuffle(records)
    pipeline = Pipeline(config)
    router = InMemoryRouter(pipeline)
    now = 0.0
    out: list[tuple[float, Attribution]] = []

    def run(effects) -> None:
        router.send(effects)
        while router.queue:
            route = router.queue.popleft()
            router.send(pipeline.apply(route.channel, route.key, route.message, now=now))
        out.extend((now, e.record) for e in router.published if isinstance(e, Publish) and e.topic == "attributions")
        router.published.clear()

    for obs in records:
        now += step
        run(pipeline.ingest(obs))
    for _ in range(400):
        now += 0.5
        ticks = pipeline.idle(now) + pipeline.due_flushes(now)
        if not ticks and now > 60:
            break
        run(ticks)
    else:
        pytest.fail("the pipeline did not settle")
    return out


def by_scope(published: list[tuple[float, Attribution]]) -> dict[str, list[tuple[float, Attribution]]]:
    scopes: dict[str, list[tuple[float, Attribution]]] = defaultdict(list)
    for t, att in published:
        scopes[att.attribution_id].append((t, att))
    return scopes


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
@pytest.mark.slow
def test_coalescing_keeps_the_first_provisional_and_the_finals(bundle: Path) -> None:
    plain, coalesced = by_scope(burst(bundle, 0.0)), by_scope(burst(bundle, 5.0))
    replayed = {a.attribution_id: content(a) for a in replay_bundle(bundle).attributions}
    assert set(coalesced) == set(plain)
    for scope, revisions in coalesced.items():
        before = plain[scope]
        assert [a.revision for _, a in revisions] == list(range(1, len(revisions) + 1)), scope
        assert content(revisions[-1][1]) == content(before[-1][1]), f"{scope}: the last revision differs"
        if scope in replayed and revisions[-1][1].status != "withdrawn":
            assert content(revisions[-1][1]) == replayed[scope], f"{scope}: not the replay verdict"
        first_plain = next(((t, a) for t, a in before if a.status == "provisional"), None)
        first = next(((t, a) for t, a in revisions if a.status == "provisional"), None)
        if first_plain is not None and revisions[0][1].scope.kind == "workload":
            assert first is not None and first[0] == first_plain[0], f"{scope}: first provisional later"
            assert content(first[1]) == content(first_plain[1])
        finals = [t for t, a in revisions if a.status == "final"]
        finals_plain = [t for t, a in before if a.status == "final"]
        assert finals[:1] == finals_plain[:1], f"{scope}: the first final moved"
        provisional = [t for t, a in revisions if a.status == "provisional" and a.scope.kind == "workload"]
        assert all(b - a >= 5.0 for a, b in zip(provisional, provisional[1:])), (scope, provisional)
        contents = [verdict_content(a) for _, a in revisions if a.status == "provisional" and a.scope.kind == "workload"]
        assert all(a != b for a, b in zip(contents, contents[1:])), f"{scope}: a provisional revision said nothing new"


@pytest.mark.parametrize("seed", range(4))
def test_a_leaf_switch_burst_gives_a_few_provisional_revisions(seed: int) -> None:
    plain, coalesced = by_scope(burst(LEAF, 0.0, seed=seed)), by_scope(burst(LEAF, 5.0, seed=seed))
    counts = {f"{v[0][1].scope.kind} {v[0][1].scope.id}":
              (sum(a.status == "provisional" for _, a in v), sum(a.status == "provisional" for _, a in coalesced[s]))
              for s, v in plain.items()}
    assert max(before for before, _ in counts.values()) > 10, f"the burst no longer floods: {counts}"
    assert all(after <= 5 for _, after in counts.values()), counts


def test_a_held_revision_is_published_by_the_next_tick() -> None:
    """Decisive evidence keeps coming inside the interval: one provisional verdict at once,
    the rest held; the timer tick after the interval sends a revise message, which publishes
    the latest content as the next provisional revision, and the idle close still comes as
    it would (the tick is not activity)."""
    records = len(bundle_records(LEAF)[0])
    step = 0.05  # the burst lasts longer than the 1 s interval
    plain = by_scope(burst(LEAF, 0.0, step=step, idle_s=30.0))
    coalesced = by_scope(burst(LEAF, 1.0, step=step, idle_s=30.0))
    job = next(s for s, v in plain.items() if v[0][1].scope.id == "job-2501")
    provisional = [(t, a) for t, a in coalesced[job] if a.status == "provisional"]
    assert 2 <= len(provisional) < sum(a.status == "provisional" for _, a in plain[job]), provisional
    ticks = [t for t, _ in provisional if t > records * step + 1e-9]
    assert ticks, f"no held revision published after the last record: {[t for t, _ in provisional]}"
    final_plain = next(t for t, a in plain[job] if a.status == "final")
    final = next(t for t, a in coalesced[job] if a.status == "final")
    assert final == final_plain, "the revise tick put the idle close off"
    assert content(coalesced[job][-1][1]) == content(plain[job][-1][1])
