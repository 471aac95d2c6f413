"""The pipeline (correlators.pipeline) without a broker: the promise "same input, same verdict,
whatever the arrival order" as a unit test, and the windows and the routing rule directly.

Every example bundle's records (as the bundle publisher sends them) go through the in-memory
router in live mode (provisional verdicts, revisions, throttled fabric decisions) in shuffled
orders; once everything is closed, the standing verdicts must equal the batch replay's on
every byte but the revision counter (docs/architecture.md, "Replay and stream").
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from connectors.publish import bundle_records
from correlators.config import EngineConfig, WindowPolicy
from correlators.pipeline import InMemoryRouter, Pipeline, Publish, Route, Stores, Tombstone, batch_events
from correlators.fabric_window import FabricWindow
from correlators.windows import WorkloadIndex, WorkloadWindow
from schemas.bundle import WorkloadSpec
from schemas.messages import (
    ClaimMessage,
    CloseMessage,
    EventMessage,
    GpuMessage,
    InterestMessage,
    Span,
    SpanMessage,
    SpecMessage,
    TopologyMessage,
    PARSERS,
    parse_fabric_message,
    parse_workload_message,
    message_json,
)
from schemas.records import Attribution, Event, EvidenceRef, GpuRef, Observation, Position, Source, canonical_json
from streams.replay import replay_bundle

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"
BUNDLES = sorted(p.parent for p in EXAMPLES.glob("*/expected.yaml"))
T0 = 1_764_000_000 * 10**9
S = 10**9
LIVE = EngineConfig.default(window=WindowPolicy(idle_timeout_s=10.0, fabric_flush_s=2.0))


def live_run(records: list[Observation], config: EngineConfig = LIVE, stores: Stores | None = None,
             *, stage: Pipeline | None = None, batch: int = 1,
             kinds: Counter | None = None) -> tuple[dict[str, Attribution], list[Attribution]]:
    """Feed ``records`` in live mode, ``batch`` at a time (the driver clock advancing 0.5 s a
    record), then let the idle timer and the fabric flush run until nothing is left.
    ``stage``: a pipeline apart that ingests (the stream's ingest stage), the other one
    applying. With ``batch`` > 1, as the ingest stage does: a batch's routes go out with each
    key's events gathered (``batch_events``), and every route crosses the wire (its JSON, parsed
    back); ``kinds`` counts the kinds of the messages applied. Returns (the last revision of
    every verdict, every publication in order)."""
    pipeline = Pipeline(config, stores)
    ingest = stage or pipeline
    router = InMemoryRouter(pipeline)
    now = 0.0
    parse = PARSERS

    def drain() -> None:
        while router.queue:
            route = router.queue.popleft()
            message = parse[route.channel](message_json(route.message)) if batch > 1 else route.message
            if kinds is not None:
                kinds[message.kind] += 1
            router.send(pipeline.apply(route.channel, route.key, message, now=now))

    for i in range(0, len(records), batch):
        effects = [e for obs in records[i:i + batch] for e in ingest.ingest(obs)]
        router.send(batch_events(effects) if batch > 1 else effects)
        drain()
        now += 0.5 * len(records[i:i + batch])
    for _ in range(50):
        now += 60.0
        ticks = pipeline.idle(now) + pipeline.due_flushes(now) + (ingest.due_flushes(now) if stage else [])
        if not ticks:
            break
        router.send(ticks)
        drain()
    else:
        pytest.fail("the pipeline did not settle within 50 timer rounds")
    effects = [e for e in router.published if e.topic == "attributions"]
    # each withdrawal is followed at once by the tombstone of its key, and only a withdrawal is
    for i, e in enumerate(effects):
        if isinstance(e, Tombstone):
            before = effects[i - 1]
            assert isinstance(before, Publish) and before.key == e.key and before.record.status == "withdrawn"
            assert e.schema == "Attribution"
        elif e.record.status == "withdrawn":
            assert isinstance(effects[i + 1], Tombstone) and effects[i + 1].key == e.key
    published = [e.record for e in effects if isinstance(e, Publish)]
    latest: dict[str, Attribution] = {}
    for att in published:
        if att.attribution_id not in latest or att.revision > latest[att.attribution_id].revision:
            latest[att.attribution_id] = att
    return latest, published


def content(att: Attribution) -> str:
    """A verdict's bytes without its revision counter."""
    data = json.loads(canonical_json(att))
    data.pop("revision")
    return json.dumps(data, sort_keys=True)


def standing(latest: dict[str, Attribution]) -> dict[str, str]:
    """The verdicts still standing (not withdrawn), as bytes."""
    return {k: content(v) for k, v in sorted(latest.items()) if v.status != "withdrawn"}


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
@pytest.mark.slow
def test_shuffled_arrival_gives_the_replay_verdicts(bundle: Path) -> None:
    records, _ = bundle_records(bundle)
    replayed = {a.attribution_id: content(a) for a in replay_bundle(bundle).attributions}
    seen = set()
    for seed in range(4):
        order = list(records)
        random.Random(seed).shuffle(order)
        latest, _ = live_run(order)
        got = standing(latest)
        assert got == replayed, f"{bundle.name}: order {seed} differs from replay"
        assert all(v.status != "provisional" for v in latest.values()), f"{bundle.name}: a verdict was left provisional"
        seen.add(json.dumps(got, sort_keys=True))
    assert len(seen) == 1


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
@pytest.mark.slow
def test_an_ingest_stage_apart_that_knows_no_allocation_gives_the_replay_verdicts(bundle: Path) -> None:
    """The stream's batch ingest stage: its pipeline routes every event without a workload id
    to the host window (``route_by_index=False``); the windows' pipeline applies."""
    records, _ = bundle_records(bundle)
    replayed = {a.attribution_id: content(a) for a in replay_bundle(bundle).attributions}
    order = list(records)
    random.Random(11).shuffle(order)
    stage = Pipeline(LIVE, route_by_index=False)
    latest, _ = live_run(order, stage=stage)
    assert standing(latest) == replayed, bundle.name
    assert stage.stores.allocation == {}  # it keeps no allocation


GATHERED = Counter()


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
@pytest.mark.slow
def test_an_ingest_stage_that_gathers_each_batchs_events_gives_the_replay_verdicts(bundle: Path) -> None:
    """As the stream's ingest stage runs: 50 records a batch, each key's events of a batch in
    one message (``EventsMessage``, also what a host window forwards), every message through
    its JSON."""
    records, _ = bundle_records(bundle)
    replayed = {a.attribution_id: content(a) for a in replay_bundle(bundle).attributions}
    order = list(records)
    random.Random(5).shuffle(order)
    latest, _ = live_run(order, stage=Pipeline(LIVE, route_by_index=False), batch=50, kinds=GATHERED)
    assert standing(latest) == replayed, bundle.name


@pytest.mark.slow  # checks what the (slow) test above met
def test_the_gathered_runs_carried_events_in_batches() -> None:
    """The test above met batched events (it runs first, in file order)."""
    assert GATHERED["events"] > 20, GATHERED


def test_batch_replay_is_revision_one_and_order_free() -> None:
    bundle = EXAMPLES / "fabric-leaf-switch-down-two-jobs"
    records, _ = bundle_records(bundle)
    outputs = set()
    for seed in range(3):
        order = list(records)
        random.Random(seed).shuffle(order)
        router = InMemoryRouter(Pipeline(EngineConfig.default(), hold=True))
        router.feed(order)
        verdicts = router.finish()
        assert {v.revision for v in verdicts} == {1}
        assert {v.scope.kind for v in verdicts} == {"workload", "fabric_port", "incident"}
        outputs.add("\n".join(sorted(canonical_json(v) for v in verdicts)))
    assert len(outputs) == 1


# -- WorkloadIndex: the one routing rule -------------------------------------------------------


def spec(wid: str, nodes: list[str], start: int, end: int | None) -> WorkloadSpec:
    return WorkloadSpec.model_validate({
        "workload_id": wid, "cluster": "c1", "scheduler": "slurm", "nodes": nodes,
        "start": start / S, "end": None if end is None else end / S, "state": "FAILED",
    })


def test_a_line_after_job_a_ends_where_job_b_started_belongs_to_b() -> None:
    index = WorkloadIndex({}, before_ns=120 * S, after_ns=300 * S)
    index.add(Span.of(spec("job-a", ["node-a01"], T0, T0 + 600 * S)))
    index.add(Span.of(spec("job-b", ["node-a01"], T0 + 610 * S, None)))
    assert index.route("c1", "node-a01", T0 + 100 * S) == "job-a"
    assert index.route("c1", "node-a01", T0 + 650 * S) == "job-b"  # in both windows: the latest started
    assert index.route("c1", "node-a01", T0 - 121 * S) is None
    assert index.route("c1", "node-a02", T0 + 100 * S) is None
    assert index.route("c2", "node-a01", T0 + 100 * S) is None  # another cluster's node-a01
    # re-adding a span replaces it
    index.add(Span.of(spec("job-a", ["node-a01"], T0, T0 + 700 * S)))
    assert [s[0] for s in index.spans["c1/node-a01"]] == ["job-a", "job-b"]
    assert index.spans["c1/node-a01"][0][2] == T0 + 700 * S


def test_the_bundle_reader_routes_with_the_same_rule(tmp_path: Path) -> None:
    from connectors.bundle import BundleConnector

    conn = BundleConnector(EXAMPLES / "fabric-port-flap-two-jobs", keywords=None)
    rules = EngineConfig.default().causal
    index = WorkloadIndex({}, before_ns=rules.before_start_ns, after_ns=rules.after_end_ns)
    for w in conn.workloads:
        index.add(Span.of(w))
    hosts = sorted({h for w in conn.workloads for h in w.nodes})
    times = [w.start_ns + d * S for w in conn.workloads for d in (-200, -60, 0, 30, 10_000)]
    for host in hosts:
        for at in times:
            assert conn.workload_of(host, at) == index.route(conn.workload.cluster, host, at)


# -- WorkloadWindow ----------------------------------------------------------------------------


def xid_event(host: str, at: int, xid: int = 79, pci: str = "0000:9c:00") -> Event:
    return Event(
        type="gpu.xid", at=at, host=host, cluster="c1", gpu=GpuRef(pci_bus_id=pci), attributes={"xid": xid},
        rule="gpu.xid@3", evidence=[EvidenceRef(observation_id=f"obs-{host}-{at}",
                                                position=Position(file="logs/node-a01/kern.log", line=1))],
    ).with_id()


def test_window_state_round_trips_and_a_resent_spec_keeps_a_final_verdict_final() -> None:
    config = EngineConfig.default(window=WindowPolicy(idle_timeout_s=None))
    s = spec("job-1", ["node-a01", "node-a02"], T0, T0 + 600 * S)
    w = WorkloadWindow(workload_id="job-1")
    assert w.set_spec(s)
    assert w.add_event(xid_event("node-a01", T0 + 60 * S))
    assert not w.add_event(xid_event("node-a01", T0 + 60 * S))  # a duplicate
    att = w.emit(config, final=True)
    assert att is not None and att.status == "final" and att.revision == 1 and att.root_cause.code.startswith("gpu.xid.79")
    assert w.closed
    assert not w.set_spec(spec("job-1", ["node-a01", "node-a02"], T0, T0 + 600 * S))  # the same record again
    again = WorkloadWindow.from_state(json.loads(json.dumps(w.to_state())), list(w.events.values()))
    assert again.to_state() == w.to_state() and again.closed and again.max_at == w.max_at
    assert again.emit(config, final=True) is None  # nothing new: no revision


def test_pipeline_resent_scheduler_record_does_not_reopen_a_closed_window() -> None:
    config = EngineConfig.default(window=WindowPolicy(idle_timeout_s=10.0))
    p = Pipeline(config)
    s = spec("job-1", ["node-a01"], T0, T0 + 600 * S)
    p.apply("workload", "job-1", SpecMessage(spec=s))
    out = p.apply("workload", "job-1", EventMessage(event=xid_event("node-a01", T0 + 60 * S)))
    assert [e.record.status for e in out if isinstance(e, Publish)] == ["provisional"]  # decisive
    closes = p.idle(100.0)
    assert [r.key for r in closes] == ["job-1"]
    final = p.apply("workload", "job-1", closes[0].message, now=100.0)
    assert [e.record.status for e in final if isinstance(e, Publish)] == ["final"]
    assert p.apply("workload", "job-1", SpecMessage(spec=s), now=101.0) == []
    assert p.windows["job-1"].closed and p.idle(500.0) == []


def test_events_before_their_workload_wait_in_the_host_window_and_are_claimed() -> None:
    p = Pipeline(EngineConfig.default())
    event = xid_event("node-a01", T0 + 60 * S)
    assert p.apply("host", "c1/node-a01", EventMessage(event=event)) == []
    assert list(p.stores.host_events) == [f"c1/node-a01\x1f{event.event_id}"]
    span = Span.of(spec("job-1", ["node-a01"], T0, T0 + 600 * S))
    out = p.apply("host", "c1/node-a01", ClaimMessage(span=span))
    assert [(r.key, r.message.event.event_id) for r in out if isinstance(r, Route)] == [("c1/job-1", event.event_id)]
    assert not p.stores.host_events and not p.stores.window_events
    assert p.stores.host_meta["c1/node-a01"]["claims"] == [["job-1", span.start, span.end]]
    # an event outside every claim stays
    late = xid_event("node-a01", T0 + 10_000 * S)
    assert p.apply("host", "c1/node-a01", EventMessage(event=late)) == []
    assert list(p.stores.host_events) == [f"c1/node-a01\x1f{late.event_id}"]


def test_a_workload_record_claims_each_host_with_its_span_on_that_host() -> None:
    """The claims of a multi-node workload carry the span on their host alone (its id, times
    and the host's address): the fabric channel gets the whole span."""
    records, _ = bundle_records(EXAMPLES / "public-rc15-pcie-aer-xid79-multinode")
    obs = next(r for r in records if r.format == "workload_yaml")
    routes = Pipeline(EngineConfig.default(), route_by_index=False).ingest(obs)
    whole = next(r.message.span for r in routes if isinstance(r.message, SpanMessage))
    claims = [r for r in routes if isinstance(r.message, ClaimMessage)]
    assert len(whole.nodes) >= 2 and len(claims) == len(whole.nodes)
    for host, route in zip(whole.nodes, claims):
        assert (route.channel, route.key) == ("host", f"{whole.cluster}/{host}")
        span = route.message.span
        assert span.nodes == [host]
        assert (span.workload_id, span.cluster, span.start, span.end) == (
            whole.workload_id, whole.cluster, whole.start, whole.end)
        assert span.ips == ({host: whole.ips[host]} if host in whole.ips else {})
    with pytest.raises(ValueError, match="'node-z99' is not a node of workload"):
        whole.on("node-z99")
    assert whole.per_host() == [whole.on(host) for host in whole.nodes]


def test_windows_rebuild_from_the_stores_after_forget() -> None:
    config = EngineConfig.default(window=WindowPolicy(idle_timeout_s=None))
    stores = Stores()
    p = Pipeline(config, stores)
    p.apply("workload", "job-1", SpecMessage(spec=spec("job-1", ["node-a01"], T0, T0 + 600 * S)))
    p.apply("workload", "c1/job-1", EventMessage(event=xid_event("node-a01", T0 + 60 * S)))
    from schemas.messages import HostFactsMessage

    facts = HostFactsMessage(host="node-a01", gpus={"0000:9c:00": 3}, history=[xid_event("node-a01", T0 - 600 * S)])
    p.apply("workload", "c1/job-1", facts)
    before = p.windows["c1/job-1"].to_state()
    p.forget()
    assert p.windows == {}
    w = p.window("c1/job-1")
    assert w.to_state() == before and len(w.events) == 1
    assert w.gpus() == {("node-a01", "0000:9c:00"): 3} and [e.event_id for e in w.history()] == [
        facts.history[0].event_id]


def test_a_window_with_events_and_no_spec_yet_survives_forget() -> None:
    """Events routed to a workload before its spec leave no window state, only stored events: a
    rebalance (forget) in between must not lose them -- the spec then decides on them."""
    config = EngineConfig.default(window=WindowPolicy(idle_timeout_s=None))
    p = Pipeline(config, Stores())
    event = xid_event("node-a01", T0 + 60 * S)
    assert p.apply("workload", "c1/job-1", EventMessage(event=event)) == []
    assert "c1/job-1" not in p.stores.window_meta
    p.forget()
    out = p.apply("workload", "c1/job-1", SpecMessage(spec=spec("job-1", ["node-a01"], T0, T0 + 600 * S)))
    verdicts = [e.record for e in out if isinstance(e, Publish)]
    assert len(verdicts) == 1
    att = verdicts[0]
    assert att.root_cause is not None and att.root_cause.code == "gpu.xid.79"
    assert att.culprits.hosts == ["node-a01"]


def run_routes(p: Pipeline, effects: list) -> list:
    """Apply routed messages until none is left; returns the publications."""
    router = InMemoryRouter(p)
    router.send(effects)
    router.drain()
    return router.published


def test_gpu_facts_from_telemetry_without_a_workload_id_reach_the_window() -> None:
    from schemas.records import TIME_QUALITY_EXACT

    p = Pipeline(EngineConfig.default(), hold=True)
    obs = Observation(
        source=Source(connector="telemetry", instance="node-a01"), kind="telemetry", observed_at=T0,
        time_source="line", time_quality=TIME_QUALITY_EXACT, host="node-a01", cluster="c1",
        format="nvidia_smi_csv", body="sample", gpu=GpuRef(index=3, pci_bus_id="00000000:9C:00.0"),
    ).with_id()
    assert run_routes(p, p.ingest(obs)) == []  # collected: a sampling round may hold more GPUs
    assert p.due_flushes(0.0) == []  # not yet held for a whole flush interval
    sent = p.due_flushes(1.0)
    assert [(r.channel, r.key, r.message.gpus) for r in sent] == [("host", "c1/node-a01", {"0000:9c:00": 3})]
    run_routes(p, sent)
    assert p.ingest(obs) == [] and p.due_flushes(10.0) == []  # the same sample again: nothing new
    s1 = spec("job-1", ["node-a01"], T0, T0 + 600 * S)
    span = Span.of(s1)
    run_routes(p, [Route("workload", "c1/job-1", SpecMessage(spec=s1)),
                   Route("host", "c1/node-a01", ClaimMessage(span=span))])
    w = p.windows["c1/job-1"]
    assert w.gpus() == {}  # no event of the job names a GPU of the host: its facts are not read
    run_routes(p, [Route("host", "c1/node-a01", EventMessage(event=xid_event("node-a01", T0 + 60 * S)))])
    assert w.gpus() == {("node-a01", "0000:9c:00"): 3} and w.history() == []


def test_host_facts_go_only_to_workloads_with_an_event_naming_a_gpu_of_the_host() -> None:
    """A 2-host job whose only GPU event is on node-a01 gets node-a01's facts, in any order of
    the claim, the GPU tables and the event, and never node-a02's."""
    s1 = spec("job-1", ["node-a01", "node-a02"], T0, T0 + 600 * S)
    span = Span.of(s1)
    messages = [
        Route("workload", "c1/job-1", SpecMessage(spec=s1)),
        Route("host", "c1/node-a01", ClaimMessage(span=span.on("node-a01"))),
        Route("host", "c1/node-a02", ClaimMessage(span=span.on("node-a02"))),
        Route("host", "c1/node-a01", GpuMessage(host="node-a01", gpus={"0000:9c:00": 3})),
        Route("host", "c1/node-a02", GpuMessage(host="node-a02", gpus={"0000:9c:00": 5})),
        Route("host", "c1/node-a01", InterestMessage(workload_id="job-1")),
    ]
    for seed in range(6):
        order = messages[1:]
        random.Random(seed).shuffle(order)
        p = Pipeline(EngineConfig.default(), hold=True)
        published = run_routes(p, [messages[0], *order])
        assert published == []
        w = p.windows["c1/job-1"]
        assert w.gpus() == {("node-a01", "0000:9c:00"): 3}, seed
        assert set(w.host_facts) == {"node-a01"}, seed


def test_a_gpu_table_whose_samples_trickle_in_is_sent_once_when_it_holds() -> None:
    from schemas.records import TIME_QUALITY_EXACT

    p = Pipeline(EngineConfig.default(), hold=True)

    def sample(index: int, bus: int) -> Observation:
        return Observation(
            source=Source(connector="telemetry", instance="node-a01"), kind="telemetry", observed_at=T0 + index,
            time_source="line", time_quality=TIME_QUALITY_EXACT, host="node-a01", cluster="c1",
            format="nvidia_smi_csv", body=f"sample {index}", gpu=GpuRef(index=index, pci_bus_id=f"0000:{bus:02x}:00.0"),
        ).with_id()

    sent = []
    for tick, (index, bus) in enumerate([(0, 0x10), (1, 0x11), (2, 0x12)]):
        sent += p.ingest(sample(index, bus)) + p.due_flushes(float(tick))  # one new GPU between two ticks
    assert sent == []  # it changed since every previous tick
    sent = p.due_flushes(3.0) + p.due_flushes(4.0)
    assert [r.message.gpus for r in sent] == [{"0000:10:00": 0, "0000:11:00": 1, "0000:12:00": 2}]


def test_node_history_reaches_later_jobs_in_any_order_and_not_the_jobs_own() -> None:
    s1 = spec("job-1", ["node-a01"], T0, T0 + 600 * S)
    s2 = spec("job-2", ["node-a01"], T0 + 3600 * S, T0 + 4200 * S)
    first, own = xid_event("node-a01", T0 + 60 * S, xid=31), xid_event("node-a01", T0 + 3700 * S, xid=31)
    other = xid_event("node-a01", T0 + 100 * S, xid=31).model_copy(update={"cluster": "c2"}).with_id()
    from schemas.messages import HistoryMessage

    messages = [
        Route("workload", "c1/job-1", SpecMessage(spec=s1)), Route("workload", "c1/job-2", SpecMessage(spec=s2)),
        Route("host", "c1/node-a01", ClaimMessage(span=Span.of(s1))),
        Route("host", "c1/node-a01", ClaimMessage(span=Span.of(s2))),
        Route("host", "c1/node-a01", HistoryMessage(workload_id="job-1", event=first)),
        Route("host", "c1/node-a01", HistoryMessage(workload_id="job-2", event=own)),
        Route("host", "c1/node-a01", HistoryMessage(workload_id="job-2", event=own)),  # redelivered
        Route("host", "c2/node-a01", HistoryMessage(workload_id="job-9", event=other)),  # another cluster
    ]
    states = set()
    for seed in range(6):
        order = list(messages)
        random.Random(seed).shuffle(order)
        p = Pipeline(EngineConfig.default(), hold=True)
        run_routes(p, order)
        assert [e.event_id for e in p.window("c1/job-2").history()] == [first.event_id]
        assert p.window("c1/job-1").history() == []
        states.add(json.dumps(p.window("c1/job-2").to_state(), sort_keys=True))
    assert len(states) == 1


def test_an_xid_routed_by_its_host_window_is_the_jobs_own_not_its_history() -> None:
    """An XID that reached the host window without a workload (an ingest stage that knows no
    allocation, or one read before the job's record) in the job's window but before its start:
    the job's own event, not node history of the job; a later job gets it as history."""
    s1 = spec("job-1", ["node-a01"], T0, T0 + 600 * S)
    s2 = spec("job-2", ["node-a01"], T0 + 3600 * S, T0 + 4200 * S)
    early, later = xid_event("node-a01", T0 - 60 * S, xid=31), xid_event("node-a01", T0 + 3700 * S, xid=31)
    from schemas.messages import HistoryMessage

    host = "c1/node-a01"
    messages = [
        Route("workload", "c1/job-1", SpecMessage(spec=s1)), Route("workload", "c1/job-2", SpecMessage(spec=s2)),
        Route("host", host, ClaimMessage(span=Span.of(s1))), Route("host", host, ClaimMessage(span=Span.of(s2))),
        Route("host", host, EventMessage(event=early)), Route("host", host, HistoryMessage(event=early)),
        Route("host", host, EventMessage(event=later)), Route("host", host, HistoryMessage(event=later)),
    ]
    for seed in range(8):
        order = messages[:2] + random.Random(seed).sample(messages[2:], len(messages) - 2)
        p = Pipeline(EngineConfig.default(), hold=True)
        run_routes(p, order)
        assert early.event_id in p.window("c1/job-1").events, seed
        assert p.window("c1/job-1").history() == [], seed
        assert [e.event_id for e in p.window("c1/job-2").history()] == [early.event_id], seed


# -- FabricWindow ------------------------------------------------------------------------------


def test_fabric_window_publishes_a_revision_only_when_content_changes() -> None:
    bundle = EXAMPLES / "fabric-port-flap-host-and-switch"
    records, _ = bundle_records(bundle)
    config = EngineConfig.default()
    p = Pipeline(config, hold=True)
    router = InMemoryRouter(p)
    router.feed(records)
    router.finish()
    (cluster,) = sorted(p.fabric)
    fw = p.fabric[cluster]
    assert fw.faults and fw.emitted
    routes, again = fw.decide(config)
    assert routes == {} and again == []  # nothing new: nothing published
    state = json.loads(json.dumps(fw.to_state()))
    copy = FabricWindow.from_state(state, list(fw.events.values()))
    assert copy.to_state() == fw.to_state()
    # the evidence gone: each standing verdict is withdrawn by a new revision
    copy.events.clear()
    _, withdrawn = copy.decide(config)
    assert withdrawn and {(a.status, a.root_cause) for a in withdrawn} == {("withdrawn", None)}
    assert all(a.revision == fw.emitted[a.attribution_id][0] + 1 for a in withdrawn)


# -- messages ----------------------------------------------------------------------------------


def test_messages_round_trip_and_bad_ones_are_refused() -> None:
    from pydantic import ValidationError

    msg = EventMessage(event=xid_event("node-a01", T0))
    assert parse_workload_message(message_json(msg)) == msg
    assert parse_fabric_message(message_json(msg)) == msg
    with pytest.raises(ValidationError):
        parse_workload_message(b'{"kind": "flush"}')  # a fabric message on the workload channel
    with pytest.raises(ValidationError):
        PARSERS["host"](b'{"kind": "close"}')  # a workload message on the host channel
    claim = ClaimMessage(span=Span.of(spec("job-1", ["node-a01"], T0, None)))
    assert PARSERS["host"](message_json(claim)) == claim
    with pytest.raises(ValidationError):
        parse_workload_message(message_json(claim))  # a host message on the workload channel
    with pytest.raises(ValidationError):
        parse_fabric_message(b'{"kind": "event", "event": {"type": "gpu.xid"}}')
    with pytest.raises(ValidationError):
        parse_workload_message(b"[" * 100 + b"]" * 100)


class PartitionLocal(dict):
    """A store like a changelogged Faust table: lookups by key answer only for the key of the
    record being processed (``active``); iteration sees every key."""

    active: str | None = None

    def __getitem__(self, key):
        if key != self.active:
            raise KeyError(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        return self[key] if key == self.active and key in self else default


def test_recovery_reads_windows_by_iteration_not_by_lookup() -> None:
    config = EngineConfig.default(window=WindowPolicy(idle_timeout_s=None, fabric_flush_s=1e9))
    meta = PartitionLocal()
    stores = Stores(window_meta=meta)
    p = Pipeline(config, stores)
    for wid in ("job-1", "job-2"):
        meta.active = wid
        p.apply("workload", wid, SpecMessage(spec=spec(wid, ["node-a01"], T0, T0 + 600 * S)))
        p.apply("workload", wid, EventMessage(event=xid_event("node-a01", T0 + 60 * S)))
    p.forget()
    meta.active = "job-2"
    p.apply("workload", "job-2", CloseMessage())
    assert sorted(p.windows) == ["job-1", "job-2"] and p.windows["job-2"].closed


FABRIC_BUNDLES = [b for b in BUNDLES if b.name.startswith("fabric-")]


@pytest.mark.parametrize("bundle", FABRIC_BUNDLES, ids=lambda p: p.name)
@pytest.mark.slow
def test_live_fabric_verdicts_wait_for_a_settled_shape(bundle: Path) -> None:
    """In event-time order (as a live cluster sends it), nothing is published from a shape of
    faults that changes within the flush interval: every fabric or incident verdict published
    is one replay gives (none is withdrawn: no port faults for the ports of a lost switch), and
    every final workload verdict names the cause replay names. A port that went down and
    minutes later flaps is first published as down: that shape held."""
    records, _ = bundle_records(bundle)
    replayed = {a.attribution_id: a for a in replay_bundle(bundle).attributions}
    _, published = live_run(records)
    assert [a.scope.id for a in published if a.status == "withdrawn"] == []
    finals = [a for a in published if a.scope.kind == "workload" and a.status == "final"]
    assert finals
    for att in finals:
        assert att.root_cause.code == replayed[att.attribution_id].root_cause.code, att.scope.id
    assert {a.attribution_id for a in published} <= set(replayed)


def test_a_topology_tombstone_deletes_the_clusters_topology_and_its_fabric_verdicts_follow() -> None:
    """``faultstream connect topology --delete``: the stream forgets the topology; the port
    verdict is decided again without it, on the host side of the cable the logs name."""
    bundle = EXAMPLES / "fabric-port-flap-host-side-only"
    records, _ = bundle_records(bundle)
    stores = Stores()
    latest, _ = live_run(records, stores=stores)
    (cluster,) = {r.cluster for r in records if r.kind == "topology"}
    assert cluster in stores.topology
    before = next(a for a in latest.values() if a.scope.kind == "fabric_port")
    assert before.scope.id == "leaf-01/Ethernet16"
    p = Pipeline(LIVE, stores)
    (route,) = p.delete_topology(cluster)
    assert (route.channel, route.key, route.message) == ("fabric", cluster, TopologyMessage(topology=None))
    effects = p.apply(route.channel, route.key, route.message, now=1e6)
    for now in (1e6 + 60, 1e6 + 120):  # the fabric flushes: the new shape settles, then is sent
        for flush in p.due_flushes(now):
            effects += p.apply(flush.channel, flush.key, flush.message, now=now)
    assert cluster not in stores.topology and p.fabric[cluster].topology is None
    published = [e for e in effects if isinstance(e, (Publish, Tombstone)) and e.topic == "attributions"]
    # without the cable map the port is the host side the logs name: a new fabric verdict, and
    # the switch-side one withdrawn and tombstoned
    (now_fabric,) = [e.record for e in published if isinstance(e, Publish)
                     and e.record.scope.kind == "fabric_port" and e.record.status != "withdrawn"]
    assert now_fabric.scope.id == "node-a03/0000:0c:00.0/1"
    assert [c.model_dump() for c in now_fabric.culprits.cables] == [
        {"switch_port": None, "host_port": "node-a03/0000:0c:00.0/1"}]
    withdrawn = next(e.record for e in published if isinstance(e, Publish) and e.key == before.attribution_id)
    assert withdrawn.status == "withdrawn" and withdrawn.superseded_by
    assert any(isinstance(e, Tombstone) and e.key == before.attribution_id for e in published)


def _as(records: list[Observation], cluster: str, workload_id: str) -> list[Observation]:
    """``records`` of a one-workload bundle moved to ``cluster`` with the job id ``workload_id``."""
    out = []
    for obs in records:
        data = json.loads(canonical_json(obs))
        data["cluster"] = cluster
        if data.get("workload_id"):
            data["workload_id"] = workload_id
        spec = data["attributes"].get("workload")
        if obs.format == "workload_yaml" and isinstance(spec, dict):
            spec.update(cluster=cluster, workload_id=workload_id)
        for k in ("observation_id", "observed_at_utc"):
            data.pop(k, None)
        out.append(Observation.model_validate(data).with_id())
    return out


def test_one_job_id_in_two_clusters_is_two_workloads() -> None:
    """Scheduler job ids are unique within a cluster only: job 7 of cluster east (an XID 79)
    and job 7 of cluster west (a CUDA out of memory), with the same node names, are decided
    apart, each as its bundle alone."""
    from streams.replay import replay_observations

    east_bundle = EXAMPLES / "public-rc15-pcie-aer-xid79-multinode"
    west_bundle = EXAMPLES / "public-rc69-rank11-cuda-oom"
    east = _as(bundle_records(east_bundle)[0], "east", "7")
    west = _as(bundle_records(west_bundle)[0], "west", "7")
    alone = {b.name: replay_bundle(b).attribution for b in (east_bundle, west_bundle)}
    for order in (east + west, west + east):
        verdicts, _, _ = replay_observations(order, EngineConfig.default())
        got = {(a.scope.cluster, a.scope.id): a for a in verdicts if a.scope.kind == "workload"}
        assert sorted(got) == [("east", "7"), ("west", "7")]
        for (cluster, _), bundle in ((("east", "7"), east_bundle), (("west", "7"), west_bundle)):
            att, want = got[(cluster, "7")], alone[bundle.name]
            assert (att.root_cause.code, att.culprits.hosts, att.culprits.ranks, att.quality) == (
                want.root_cause.code, want.culprits.hosts, want.culprits.ranks, want.quality), cluster
            assert len(att.symptoms) == len(want.symptoms), cluster


def _expand(effects: list) -> list[tuple]:
    """Each effect as (channel or topic, key, kind, event id or None), events of an
    EventsMessage one by one."""
    out = []
    for e in effects:
        if isinstance(e, Route) and e.message.kind == "events":
            out += [(e.channel, e.key, "event", ev.event_id) for ev in e.message.events]
        elif isinstance(e, Route):
            out.append((e.channel, e.key, e.message.kind, getattr(getattr(e.message, "event", None), "event_id", None)))
        else:
            out.append((e.topic, e.key, "publish", e.record.event_id))
    return out


def _per_key(items: list[tuple]) -> dict[tuple, list[tuple]]:
    grouped: dict[tuple, list[tuple]] = {}
    for item in items:
        grouped.setdefault(item[:2], []).append(item)
    return grouped


def test_batch_events_keeps_each_keys_order_and_gathers_only_uninterrupted_runs() -> None:
    from schemas.messages import EventsMessage, HistoryMessage

    rnd = random.Random(3)
    for _ in range(200):
        effects = []
        for i in range(rnd.randrange(0, 40)):
            channel, key = rnd.choice([("workload", "c/job-1"), ("workload", "c/job-2"), ("host", "c/node-a01")])
            ev = xid_event("node-a01", T0 + i * S, xid=rnd.choice([13, 31, 79]))
            pick = rnd.random()
            if pick < 0.6:
                effects.append(Route(channel, key, EventMessage(event=ev)))
            elif pick < 0.75:
                effects.append(Route(channel, key, HistoryMessage(event=ev)))
            elif pick < 0.9:
                effects.append(Route("fabric", "c", EventMessage(event=ev)))
            else:
                effects.append(Publish("events", key, ev))
        limit = rnd.choice([1, 2, 3, 64])
        got = batch_events(effects, limit=limit)
        assert _per_key(_expand(got)) == _per_key(_expand(effects))
        # what is not a workload event stays in its relative order
        others = lambda xs: [x for x in _expand(xs) if not (x[0] in ("workload", "host") and x[2] == "event")]  # noqa: E731
        assert others(got) == others(effects)
        for e in got:
            if isinstance(e, Route) and isinstance(e.message, EventsMessage):
                assert 2 <= len(e.message.events) <= limit
        # nothing left to gather: a second pass changes nothing
        assert _expand(batch_events(got, limit=limit)) == _expand(got)
        # gathered as far as the limit allows: two events of one key that follow each other
        # (no message of that key between them) are apart only when the first one's is full
        last: dict[tuple[str, str], tuple[int, int]] = {}  # (channel, key) -> (index in got, events there) of its last event message
        for i, e in enumerate(got):
            if not (isinstance(e, Route) and e.channel in ("workload", "host")):
                continue
            where = (e.channel, e.key)
            if isinstance(e.message, (EventMessage, EventsMessage)):
                n = len(e.message.events) if isinstance(e.message, EventsMessage) else 1
                if where in last:
                    assert last[where][1] == limit, (limit, effects)
                last[where] = (i, n)
            else:
                last.pop(where, None)
    with pytest.raises(ValueError, match="at least 1"):
        batch_events([], limit=0)


def test_an_events_message_is_its_events_one_by_one() -> None:
    """A workload window and a host window applying one EventsMessage end where they end
    applying each event as an EventMessage, and what a host window forwards is gathered."""
    from schemas.messages import EventsMessage

    wid = "c1/job-1"
    sp = spec("job-1", ["node-a01", "node-a02"], T0, None)
    events = [xid_event("node-a01", T0 + i * S, xid=x) for i, x in enumerate([13, 31, 43, 79])]

    def run(gathered: bool) -> tuple[list, list]:
        p = Pipeline(LIVE)
        applied = []
        host = "c1/node-a01"
        p.apply("host", host, ClaimMessage(span=Span.of(sp)), now=1.0)
        msgs = [EventsMessage(events=events)] if gathered else [EventMessage(event=e) for e in events]
        out = [e for m in msgs for e in p.apply("host", host, m, now=1.0)]
        forwarded = [r for r in out if isinstance(r, Route) and r.key == wid]
        p.apply("workload", wid, SpecMessage(spec=sp), now=1.0)
        for r in forwarded:
            applied += p.apply("workload", wid, r.message, now=2.0)
        w = p.window(wid)
        return _expand(forwarded), [sorted(w.events), [canonical_json(a.record) for a in applied if isinstance(a, Publish)]]

    one_by_one, gathered = run(False), run(True)
    assert gathered[1] == one_by_one[1]
    assert gathered[0] == one_by_one[0] and len(gathered[0]) == 4
    assert len(gathered[1][0]) == 4


def test_an_events_message_round_trips_and_an_empty_one_is_refused() -> None:
    from pydantic import ValidationError

    from schemas.messages import EventsMessage

    events = [xid_event("node-a01", T0 + i * S) for i in range(3)]
    back = parse_workload_message(message_json(EventsMessage(events=events)))
    assert isinstance(back, EventsMessage) and [e.event_id for e in back.events] == [e.event_id for e in events]
    with pytest.raises(ValidationError, match="at least 1 item"):
        parse_workload_message(b'{"kind":"events","events":[]}')
    with pytest.raises(ValidationError):
        parse_fabric_message(message_json(EventsMessage(events=events)))  # the workload channel's only


@pytest.mark.parametrize("route_by_index", [True, False], ids=["replay", "ingest-stage"])
@pytest.mark.slow
def test_an_inert_record_yields_nothing_whatever_came_before(route_by_index: bool) -> None:
    """``Pipeline.inert`` keeps its promise on every line of every example bundle, as the
    publisher sends them (every line, not only the candidates), each ingested after all the
    records before it: an inert record yields no effect. Most lines are inert, and every
    record that yielded an effect was not. The straggler bundles are left out of the tally (not
    of the check): they hold per-rank step times, every line of which a rule reads."""
    tally: Counter = Counter()
    for bundle in BUNDLES:
        records, _ = bundle_records(bundle)
        pipeline = Pipeline(LIVE, route_by_index=route_by_index)
        for obs in records:
            inert = pipeline.inert(obs)
            effects = pipeline.ingest(obs)
            assert not (inert and effects), (bundle.name, obs.observation_id, effects[:2])
            if not bundle.name.startswith("straggler-"):
                tally[(obs.kind, inert, bool(effects))] += 1
    assert tally[("log_line", True, False)] > tally[("log_line", False, True)] > 0, tally
    assert not any(inert for (kind, inert, _) in tally if kind != "log_line"), tally


def test_inert_is_the_prefilter_on_log_lines_only() -> None:
    """Which records are inert: a log line with a body no prefilter literal occurs in, or
    with no body and no metric; never a log line with a keyword, one that carries a metric
    and no body (read as a sample), a sample, or a scheduler record."""
    pipeline = Pipeline(LIVE, route_by_index=False)

    def obs(**fields) -> Observation:
        base = dict(source=Source(connector="test"), kind="log_line", observed_at=T0, time_source="line",
                    time_quality=1.0, host="node-a01", cluster="c1")
        return Observation(**{**base, **fields}).with_id()

    xid = "NVRM: Xid (PCI:0000:9c:00): 79, pid=0, GPU has fallen off the bus."
    assert pipeline.inert(obs(body="step 12 loss 2.31 lr 3.0e-04"))
    assert pipeline.inert(obs(body=None))
    assert pipeline.inert(obs(body=""))
    assert not pipeline.inert(obs(body=xid))
    assert pipeline.ingest(obs(body=xid))  # not inert, and it does yield
    assert not pipeline.inert(obs(body=None, metric={"gpu_temp_c": 97.0}))
    assert not pipeline.inert(obs(kind="telemetry", body=None, metric={"gpu_temp_c": 40.0}))
    assert not pipeline.inert(obs(kind="scheduler_event", body="step 12 loss 2.31"))
