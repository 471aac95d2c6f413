"""Where a replay's observations come from besides a bundle, and what changed against the
verdicts stored earlier.

Readers (each an iterator of :class:`schemas.records.Observation`, validated with
``Observation.model_validate_json``; a record that fails is counted in a :class:`ReadReport`
with the first reason, never raised):

* :func:`observations_from_kafka` -- a time range of the observations topic: per partition,
  ``offsets_for_times`` gives the first offset at or after ``since`` and the first at or after
  ``until`` (else the end offset when the range was asked), and the messages between are read,
  then the reader stops. The range is in **Kafka message timestamps** (the producer's create
  time: when a record was published, which in a live stream is close to its event time); a
  republished bundle's records carry the time they were republished, not their event time.
* :func:`observations_from_clickhouse` -- the ``observations`` table (``sinks/ddl.sql``): by
  workload, cluster and/or ``observed_at`` range (**event time**).

Both apply the same selection (:class:`Plan`):

* ``workload=W`` (:func:`plan_workload`): W's workload record (``scheduler_event`` /
  ``workload_yaml``); the cluster's topology record (the latest observed at or before W's
  causal window ends, else the earliest); every observation of the cluster on W's nodes from
  the history look-back before its start (``repetition.window_s`` of the causal rules: the
  earlier jobs' XIDs the rules read) to its end plus ``after_end_s``, and on ``_scheduler``
  and the switches its nodes are cabled to (topology links and uplinks) within its causal
  window (``before_start_s`` / ``after_end_s``, :attr:`correlators.config.EngineConfig.causal`);
  when W is cabled to switches, nodes and switches also the fabric policy's
  ``episode_gap_s`` either side (one port fault's episode, hence its incident, spans that
  long). The related workloads -- same cluster, sharing a node or a switch with W, their
  causal windows overlapping W's range -- come with their workload records and their nodes',
  switches' and ``_scheduler``'s observations within their causal windows. Plus the coverage
  records of all of them and every observation naming one of them. The replay of that
  selection decides W as its bundle does (and every verdict of a bundle alone in the store);
  a related workload is decided on what its window holds.
* no workload (:func:`plan_range`): every observation of the cluster (all clusters when none
  is given) observed within ``[since, until]``, plus the workload and coverage records of the
  workloads whose causal windows overlap that range and each cluster's topology record.
  Workloads only partly inside the range are decided on what lies inside it.

Only one workload record per workload id (the latest: by ``observed_at``, then a known end)
and one topology record per cluster reach the pipeline, so the replay does not depend on the
order of records that restate the same fact. Transport positions (``position.topic`` /
``partition`` / ``offset``) are cleared on read: a replay's verdicts are a function of the
content, so they equal the bundle's.

:func:`diff_verdicts` compares the verdicts of a replay with stored ones (``attributions``
table, latest revision per ``attribution_id``) on what a verdict says: domain, root cause,
quality, culprits (hosts, ranks, GPUs, ports) and alternatives -- never revision, decision
time or evidence transport positions.

Times in this module are UTC nanoseconds since the epoch (``*_ns``); times given as text are
ISO 8601 (:func:`parse_time`).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from schemas.bundle import TopologySpec, WorkloadSpec, to_ns
from schemas.records import Attribution, Observation

if TYPE_CHECKING:  # pragma: no cover
    from correlators.config import EngineConfig
    from sinks.clickhouse import ClickHouseSink

__all__ = [
    "Plan",
    "ReadReport",
    "SourceError",
    "VerdictChange",
    "VerdictDiff",
    "diff_verdicts",
    "observations_from_clickhouse",
    "observations_from_kafka",
    "parse_time",
    "plan_range",
    "plan_workload",
    "select",
    "stored_verdicts",
    "verdict_key",
]

#: the end of time for an open range (UTC ns; the largest Int64)
END_OF_TIME = 2**63 - 1
#: the host of scheduler-side records (connectors.bundle.SCHEDULER_HOST)
SCHEDULER_HOST = "_scheduler"

_DATETIME = TypeAdapter(dt.datetime)


class SourceError(Exception):
    """A source cannot be read: an unreachable broker, a missing topic, a workload without a
    workload record, a read that stalls. The message says which and where."""


def parse_time(text: str) -> int:
    """UTC ns of an ISO 8601 date-time (``2026-11-30T01:00Z``, ``2026-11-30T02:00:00+01:00``,
    ``2026-11-30``); without a zone it is UTC. Parsed by pydantic. Raises ``ValueError`` for
    anything else (a bare number is refused: seconds or milliseconds would be a guess) and for
    a time outside the signed 64-bit nanosecond range (before 1677-09-21, after 2262-04-11)."""
    value = text.strip()
    if not value or value.lstrip("+-").replace(".", "", 1).isdigit():
        raise ValueError(f"{text!r} is not an ISO 8601 date-time (e.g. 2026-11-30T01:00Z)")
    try:
        ns = to_ns(_DATETIME.validate_python(value))
    except ValidationError:
        raise ValueError(f"{text!r} is not an ISO 8601 date-time (e.g. 2026-11-30T01:00Z)") from None
    if not -(1 << 63) <= ns < 1 << 63:
        raise ValueError(f"{text!r} is outside the times a nanosecond clock holds "
                         "(1677-09-21T00:12:44Z to 2262-04-11T23:47:16Z)")
    return ns


@dataclass
class ReadReport:
    """What a reader saw: ``read`` records, ``invalid`` of them not an Observation (or a
    workload record whose spec does not validate), ``first_error`` the first reason with where
    it was (``partition 3 offset 17``, ``row obs-...``)."""

    read: int = 0
    invalid: int = 0
    first_error: str | None = None

    def bad(self, where: str, reason: str) -> None:
        """Count one invalid record."""
        self.invalid += 1
        if self.first_error is None:
            self.first_error = f"{where}: {reason}"

    def summary(self) -> str:
        """``"N records read"`` plus ``", M invalid (first: ...)"`` when some were."""
        text = f"{self.read:,} records read"
        if self.invalid:
            text += f", {self.invalid:,} invalid and skipped (first: {self.first_error})"
        return text


def _parse(raw: bytes | str, where: str, report: ReadReport) -> Observation | None:
    """An Observation from its JSON (transport position cleared), or None (counted)."""
    report.read += 1
    try:
        obs = Observation.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "record"
        report.bad(where, f"{loc}: {first['msg']}")
        return None
    pos = obs.position
    if pos.topic is not None or pos.partition is not None or pos.offset is not None:
        obs.position = pos.model_copy(update={"topic": None, "partition": None, "offset": None})
    return obs


# -- selection ---------------------------------------------------------------------------------


def _is_spec(obs: Observation) -> bool:
    return obs.kind == "scheduler_event" and obs.format == "workload_yaml"


def _is_coverage(obs: Observation) -> bool:
    return obs.kind == "health_event" and obs.format == "coverage"


@dataclass
class Plan:
    """Which observations a replay reads (see the module docstring).

    ``heads``: ids of the chosen workload and topology records; ``workloads``: the selected
    workload ids (their coverage records and the observations naming them are read);
    ``ranges``: host -> ``[(lo, hi), ...]`` UTC ns, inclusive; ``any_host``: a range every
    host's observations are read within (the range selection; None: none); ``clusters``: the
    clusters read (None: all); ``specs``: workload id -> spec, of the selected workloads;
    ``focus``: the workload asked for (None for a range)."""

    heads: set[str] = field(default_factory=set)
    workloads: set[str] = field(default_factory=set)
    ranges: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    any_host: tuple[int, int] | None = None
    clusters: set[str] | None = None
    specs: dict[str, WorkloadSpec] = field(default_factory=dict)
    focus: str | None = None

    def wants(self, obs: Observation) -> bool:
        """True when ``obs`` is part of the selection."""
        if _is_spec(obs) or obs.kind == "topology":
            return obs.observation_id in self.heads
        if self.clusters is not None and obs.cluster not in self.clusters:
            return False
        if _is_coverage(obs) or (obs.workload_id is not None and obs.workload_id in self.workloads):
            return obs.workload_id in self.workloads
        at = obs.observed_at
        if self.any_host is not None and self.any_host[0] <= at <= self.any_host[1]:
            return True
        return any(lo <= at <= hi for lo, hi in self.ranges.get(obs.host, ()))

    @property
    def span(self) -> tuple[int, int]:
        """The earliest and latest time the selection reads (UTC ns)."""
        bounds = [b for rs in self.ranges.values() for b in rs]
        if self.any_host is not None:
            bounds.append(self.any_host)
        if not bounds:
            return (0, END_OF_TIME)
        return (min(b[0] for b in bounds), max(b[1] for b in bounds))


def _specs(records: Iterable[Observation], report: ReadReport) -> dict[str, tuple[Observation, WorkloadSpec]]:
    """Workload id -> its latest workload record and spec (by observed_at, then a known end,
    then the later end, then the id)."""
    best: dict[str, tuple[tuple, Observation, WorkloadSpec]] = {}
    for obs in records:
        try:
            spec = WorkloadSpec.model_validate(obs.attributes.get("workload"))
        except ValidationError as exc:
            report.bad(f"workload record {obs.observation_id}", f"attributes.workload: {exc.errors()[0]['msg']}")
            continue
        rank = (obs.observed_at, spec.end_ns is not None, spec.end_ns or 0, obs.observation_id)
        held = best.get(spec.workload_id)
        if held is None or rank > held[0]:
            best[spec.workload_id] = (rank, obs, spec)
    return {wid: (obs, spec) for wid, (_, obs, spec) in best.items()}


def _topologies(records: Iterable[Observation], report: ReadReport,
                until_ns: int) -> dict[str, tuple[Observation, TopologySpec]]:
    """Cluster -> its topology record: the latest observed at or before ``until_ns``, else
    the earliest after it."""
    by_cluster: dict[str, list[tuple[Observation, TopologySpec]]] = {}
    for obs in records:
        try:
            spec = TopologySpec.model_validate(obs.attributes.get("topology"))
        except ValidationError as exc:
            report.bad(f"topology record {obs.observation_id}", f"attributes.topology: {exc.errors()[0]['msg']}")
            continue
        by_cluster.setdefault(obs.cluster, []).append((obs, spec))
    out = {}
    for cluster, items in by_cluster.items():
        items.sort(key=lambda item: (item[0].observed_at, item[0].observation_id))
        before = [item for item in items if item[0].observed_at <= until_ns]
        out[cluster] = before[-1] if before else items[0]
    return out


def _window(spec: WorkloadSpec, before_ns: int, after_ns: int) -> tuple[int, int]:
    end = spec.end_ns if spec.end_ns is not None else END_OF_TIME - after_ns
    return (spec.start_ns - before_ns, end + after_ns)


def _switches(topology: TopologySpec | None, nodes: Iterable[str]) -> set[str]:
    """The switches ``nodes`` are cabled to, and the switches those are uplinked to."""
    if topology is None:
        return set()
    nodes = set(nodes)
    leaves = {link.switch for link in topology.links if link.host in nodes}
    out = set(leaves)
    for a, b in topology.uplinks:
        sa, sb = a.split("/", 1)[0], b.split("/", 1)[0]
        if sa in leaves:
            out.add(sb)
        if sb in leaves:
            out.add(sa)
    return out


def _lookback_ns(config: EngineConfig) -> tuple[int, int, int]:
    """(before-start, after-end, history look-back) of the causal rules, in ns."""
    from correlators.repetition import DEFAULT_REPETITION

    rules = config.causal
    repetition = {**DEFAULT_REPETITION, **(rules.sections.get("repetition") or {})}
    history = int(float(repetition.get("window_s", 0)) * 1_000_000_000)
    return rules.before_start_ns, rules.after_end_ns, max(rules.before_start_ns, history)


def plan_workload(
    spec_records: Iterable[Observation],
    topology_records: Iterable[Observation],
    workload_id: str,
    config: EngineConfig,
    *,
    cluster: str | None = None,
    since_ns: int | None = None,
    until_ns: int | None = None,
    report: ReadReport | None = None,
) -> Plan:
    """The selection for workload ``workload_id`` (module docstring) from the candidate
    workload and topology records. ``cluster`` restricts the workload records considered;
    ``since_ns`` / ``until_ns`` (UTC ns) clip the observation ranges. Raises
    :class:`SourceError` when no valid workload record of ``workload_id`` is among them."""
    report = report if report is not None else ReadReport()
    specs = _specs((o for o in spec_records if cluster is None or o.cluster == cluster), report)
    if workload_id not in specs:
        where = f" in cluster {cluster}" if cluster else ""
        raise SourceError(f"no workload record (scheduler_event, format workload_yaml) for {workload_id}{where}")
    w_obs, w = specs[workload_id]
    before, after, lookback = _lookback_ns(config)
    c_lo, c_hi = _window(w, before, after)
    topo = _topologies((o for o in topology_records if o.cluster == w.cluster), report, c_hi).get(w.cluster)
    topology = topo[1] if topo else None
    w_switches = _switches(topology, w.nodes)
    # W's nodes: from the history look-back before its start; cabled to switches, also the
    # fabric episode gap either side (a port fault's episode spans that long)
    gap = int(config.fabric.episode_gap_s) * 1_000_000_000 if w_switches else 0
    w_lo, w_hi = min(c_lo - gap, w.start_ns - lookback), min(c_hi + gap, END_OF_TIME)
    chosen = {workload_id: (w_obs, w, (w_lo, w_hi), (c_lo - gap, w_hi))}
    for wid, (obs, spec) in sorted(specs.items()):
        if wid == workload_id or spec.cluster != w.cluster:
            continue
        lo, hi = _window(spec, before, after)
        # on W's nodes within their range, or on W's switches within the fabric horizon
        if hi >= w_lo and lo <= w_hi and (set(spec.nodes) & set(w.nodes) or _switches(topology, spec.nodes) & w_switches):
            chosen[wid] = (obs, spec, (lo, hi), (lo, hi))
    plan = Plan(clusters={w.cluster}, focus=workload_id)
    if topo is not None:
        plan.heads.add(topo[0].observation_id)
    clip_lo = since_ns if since_ns is not None else 0
    clip_hi = until_ns if until_ns is not None else END_OF_TIME
    for wid, (obs, spec, nodes_range, side_range) in chosen.items():
        plan.heads.add(obs.observation_id)
        plan.workloads.add(wid)
        plan.specs[wid] = spec
        for hosts, (a, b) in ((spec.nodes, nodes_range),
                              (sorted(_switches(topology, spec.nodes)) + [SCHEDULER_HOST], side_range)):
            a, b = max(a, clip_lo), min(b, clip_hi)
            if a <= b:
                for host in hosts:
                    plan.ranges.setdefault(host, []).append((a, b))
    return plan


def plan_range(
    spec_records: Iterable[Observation],
    topology_records: Iterable[Observation],
    config: EngineConfig,
    *,
    cluster: str | None = None,
    since_ns: int | None = None,
    until_ns: int | None = None,
    report: ReadReport | None = None,
) -> Plan:
    """The selection of a cluster (all clusters when None) over ``[since_ns, until_ns]`` (UTC
    ns; None: unbounded): see the module docstring."""
    report = report if report is not None else ReadReport()
    lo = since_ns if since_ns is not None else 0
    hi = until_ns if until_ns is not None else END_OF_TIME
    before, after, _ = _lookback_ns(config)
    plan = Plan(any_host=(lo, hi), clusters={cluster} if cluster is not None else None)
    for wid, (obs, spec) in sorted(_specs(spec_records, report).items()):
        if cluster is not None and spec.cluster != cluster:
            continue
        a, b = _window(spec, before, after)
        if b >= lo and a <= hi:
            plan.heads.add(obs.observation_id)
            plan.workloads.add(wid)
            plan.specs[wid] = spec
    topologies = [o for o in topology_records if cluster is None or o.cluster == cluster]
    for obs, _ in _topologies(topologies, report, hi).values():
        plan.heads.add(obs.observation_id)
    return plan


def select(
    observations: Iterable[Observation],
    config: EngineConfig,
    *,
    workload: str | None = None,
    cluster: str | None = None,
    report: ReadReport | None = None,
) -> tuple[list[Observation], Plan]:
    """Apply the selection (:func:`plan_workload` for ``workload``, else :func:`plan_range`
    without a time bound) to observations already read (e.g. a Kafka range); returns the
    selected ones (in input order, each id once) and the plan."""
    items = list(observations)
    specs = [o for o in items if _is_spec(o)]
    topologies = [o for o in items if o.kind == "topology"]
    if workload is not None:
        plan = plan_workload(specs, topologies, workload, config, cluster=cluster, report=report)
    else:
        plan = plan_range(specs, topologies, config, cluster=cluster, report=report)
    seen: set[str] = set()
    out = []
    for obs in items:
        if obs.observation_id not in seen and plan.wants(obs):
            seen.add(obs.observation_id)
            out.append(obs)
    return out, plan


# -- readers -------------------------------------------------------------------------------------


def _ms_ceil(ns: int) -> int:
    return -((-ns) // 1_000_000)


def observations_from_kafka(
    config: dict[str, Any],
    topic: str,
    *,
    since_ns: int | None = None,
    until_ns: int | None = None,
    timeout_s: float = 10.0,
    report: ReadReport | None = None,
) -> Iterator[Observation]:
    """The observations on ``topic`` whose Kafka message timestamp lies in ``[since_ns,
    until_ns)`` (UTC ns; None: from the start / to the end offset when the call began).

    ``config``: confluent_kafka settings (``KafkaSettings.confluent_config()``). Per
    partition the range is ``offsets_for_times(since)`` .. ``offsets_for_times(until)`` (the
    end offset when none is later), read with ``assign`` (no consumer group offsets are
    committed), and the reader stops when every partition reached its end. Messages whose
    timestamp falls outside the range (several producers' clocks) are left out; a message
    older than ``since`` that a producer wrote after a newer one lies before the start offset
    and is not read (Kafka indexes the first offset at or after a time).

    Raises :class:`SourceError` when the broker does not answer within ``timeout_s`` seconds,
    the topic does not exist, or no message arrives for ``timeout_s`` while some are still
    due. Invalid messages are counted in ``report``."""
    from confluent_kafka import Consumer

    report = report if report is not None else ReadReport()
    consumer = Consumer(dict(config) | {
        "group.id": f"faultstream-replay-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "log_level": 0,  # errors are raised below, once
    })
    where = config.get("bootstrap.servers", "?")
    try:
        todo = _offset_ranges(consumer, topic, since_ns, until_ns, timeout_s, where)
        if todo:
            yield from _read_ranges(consumer, topic, todo, since_ns, until_ns, timeout_s, where, report)
    finally:
        consumer.close()


def _offset_ranges(consumer: Any, topic: str, since_ns: int | None, until_ns: int | None, timeout_s: float,
                   where: str) -> dict[int, tuple[int, int]]:
    """Partition -> (first offset, end offset) of the messages of ``topic`` in the time range,
    the partitions with none left out. Raises :class:`SourceError` (see
    :func:`observations_from_kafka`)."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        meta = consumer.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        raise SourceError(f"Kafka at {where} did not answer within {timeout_s:g} s: {_kafka_text(exc)}") from None
    tmeta = meta.topics.get(topic)
    if tmeta is None or tmeta.error is not None or not tmeta.partitions:
        reason = tmeta.error.str() if tmeta is not None and tmeta.error is not None else "no partitions"
        raise SourceError(f"topic {topic!r} on Kafka at {where}: {reason}")
    parts = sorted(tmeta.partitions)
    try:
        bounds = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s) for p in parts}

        def offsets_at(ns: int | None, default: str) -> dict[int, int]:
            if ns is None:
                return {p: bounds[p][0 if default == "low" else 1] for p in parts}
            found = consumer.offsets_for_times([TopicPartition(topic, p, _ms_ceil(ns)) for p in parts],
                                               timeout=timeout_s)
            return {tp.partition: (tp.offset if tp.offset >= 0 else bounds[tp.partition][1]) for tp in found}

        start = offsets_at(since_ns, "low")
        end = offsets_at(until_ns, "high")
    except KafkaException as exc:
        raise SourceError(f"Kafka at {where}: offsets of {topic!r}: {_kafka_text(exc)}") from None
    return {p: (start[p], min(end[p], bounds[p][1])) for p in parts if start[p] < min(end[p], bounds[p][1])}


def _read_ranges(consumer: Any, topic: str, todo: dict[int, tuple[int, int]], since_ns: int | None,
                 until_ns: int | None, timeout_s: float, where: str, report: ReadReport) -> Iterator[Observation]:
    """The observations in ``todo``'s offset ranges whose message time is in the range."""
    from confluent_kafka import TopicPartition

    consumer.assign([TopicPartition(topic, p, todo[p][0]) for p in sorted(todo)])
    lo_ms = _ms_ceil(since_ns) if since_ns is not None else None
    hi_ms = _ms_ceil(until_ns) if until_ns is not None else None
    remaining = dict(todo)
    while remaining:
        batch = consumer.consume(num_messages=1000, timeout=timeout_s)
        if not batch:
            raise SourceError(
                f"Kafka at {where}: no message for {timeout_s:g} s while {len(remaining)} partition(s) of "
                f"{topic!r} had messages left to read")
        for msg in batch:
            if msg.error():
                raise SourceError(f"Kafka at {where}: {topic!r}: {msg.error().str()}")
            p, off = msg.partition(), msg.offset()
            if p not in remaining or off >= remaining[p][1]:
                continue
            if off + 1 >= remaining[p][1]:
                del remaining[p]
            _, ts = msg.timestamp()
            if (lo_ms is not None and ts < lo_ms) or (hi_ms is not None and ts >= hi_ms):
                continue
            headers = dict(msg.headers() or ())
            schema = headers.get("schema")
            if schema is not None and schema != b"Observation":
                report.read += 1
                report.bad(f"partition {p} offset {off}", f"not an Observation (schema header {schema!r})")
                continue
            obs = _parse(msg.value() or b"", f"partition {p} offset {off}", report)
            if obs is not None:
                yield obs


def _kafka_text(exc: Exception) -> str:
    arg = exc.args[0] if exc.args else exc
    return arg.str() if hasattr(arg, "str") else str(arg)


def _rows(rows: Iterable[str], report: ReadReport, seen: set[str]) -> Iterator[Observation]:
    for raw in rows:
        obs = _parse(raw, "observations row", report)
        if obs is None:
            continue
        if obs.observation_id in seen:
            report.read -= 1  # the same row from an overlapping query
            continue
        seen.add(obs.observation_id)
        yield obs


def observations_from_clickhouse(
    sink: ClickHouseSink,
    config: EngineConfig,
    *,
    workload: str | None = None,
    cluster: str | None = None,
    since_ns: int | None = None,
    until_ns: int | None = None,
    report: ReadReport | None = None,
    plan_out: list[Plan] | None = None,
    prefilter: bool = False,
) -> Iterator[Observation]:
    """The stored observations (``observations`` table) of the selection (module docstring):
    workload ``workload``, or cluster ``cluster`` (all when None) within ``[since_ns,
    until_ns]`` (UTC ns of ``observed_at``, inclusive; None: unbounded). Ordered by
    ``observed_at``, then id. The SQL filters are a coarse pre-selection; :meth:`Plan.wants`
    decides. ``plan_out`` (a list) receives the plan. Raises :class:`SourceError` for a
    workload without a workload record and ``sinks.clickhouse.SinkError`` when a read fails.
    Invalid rows are counted in ``report``. ``prefilter``: only the rows the pipeline would
    not skip as inert come from the server (``config.pack``'s prefilter literals pushed down,
    :meth:`sinks.clickhouse.ClickHouseSink.observation_records` ``body_any``): the same
    verdicts, from a fraction of the rows; off, every row of the selection (an export)."""
    from correlators.rules.engine import gc_paused
    from correlators.rules.scan import minimal_literals

    report = report if report is not None else ReadReport()
    seen: set[str] = set()
    # the literals holding no other one: the same rows, a smaller pattern set for the server
    literals = minimal_literals(config.pack.prefilter_keywords) if prefilter else None
    spec_rows = sink.observation_records(kinds=["scheduler_event"], formats=["workload_yaml"], cluster=cluster)
    topo_rows = sink.observation_records(kinds=["topology"], cluster=cluster)
    specs = list(_rows(spec_rows, report, seen))
    topologies = list(_rows(topo_rows, report, seen))
    if workload is not None:
        plan = plan_workload(specs, topologies, workload, config, cluster=cluster,
                             since_ns=since_ns, until_ns=until_ns, report=report)
    else:
        plan = plan_range(specs, topologies, config, cluster=cluster, since_ns=since_ns,
                          until_ns=until_ns, report=report)
    if plan_out is not None:
        plan_out.append(plan)
    picked = [o for o in specs + topologies if o.observation_id in plan.heads]
    # the coarse queries: the selected workloads' records, then each host range
    queries: list[dict[str, Any]] = []
    clusters = sorted(plan.clusters) if plan.clusters is not None else [None]
    for c in clusters:
        if plan.workloads:
            queries.append({"workload_ids": sorted(plan.workloads), "cluster": c})
        if plan.any_host is not None:
            queries.append({"cluster": c, "start_ns": plan.any_host[0] or None,
                            "end_ns": None if plan.any_host[1] == END_OF_TIME else plan.any_host[1]})
        groups: dict[tuple[int, int], list[str]] = {}
        for host, ranges in plan.ranges.items():
            for r in ranges:
                groups.setdefault(r, []).append(host)
        for (lo, hi), hosts in sorted(groups.items()):
            queries.append({"cluster": c, "hosts": sorted(hosts), "start_ns": lo,
                            "end_ns": None if hi >= END_OF_TIME else hi})
    # one query for all the selections: the table is scanned once
    rows = sink.observation_records(any_of=queries, body_any=literals)
    with gc_paused():  # thousands of records parsed, none of them garbage
        body: list[Observation] = [o for o in _rows(rows, report, seen) if plan.wants(o)]
    body.sort(key=lambda o: (o.observed_at, o.observation_id))
    yield from picked
    yield from body


# -- verdict diff ------------------------------------------------------------------------------


def _gpu_label(gpu: Any) -> str:
    return gpu.pci_bus_id or gpu.uuid or (f"index:{gpu.index}" if gpu.index is not None else "?")


def verdict_key(att: Attribution) -> dict[str, Any]:
    """What a verdict says, for comparison: domain, root cause code, quality, culprits
    (sorted hosts, ranks, GPUs, ports) and alternative codes (sorted)."""
    c = att.culprits
    return {
        "domain": att.domain,
        "root_cause": att.cause_code,
        "quality": att.quality,
        "culprits": {"hosts": sorted(c.hosts), "ranks": sorted(c.ranks),
                     "gpus": sorted(_gpu_label(g) for g in c.gpus), "ports": sorted(c.ports)},
        "alternatives": sorted(a.code for a in att.alternatives),
    }


@dataclass(frozen=True)
class VerdictChange:
    """One attribution id: ``before`` (stored, None: new) and ``after`` (replayed, None:
    gone); ``fields`` the compared fields that differ (``root_cause``, ``quality``, ...)."""

    attribution_id: str
    scope: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    fields: tuple[str, ...]

    @property
    def status(self) -> str:
        """``same`` | ``changed`` | ``new`` | ``gone``."""
        if self.before is None:
            return "new"
        if self.after is None:
            return "gone"
        return "changed" if self.fields else "same"

    def lines(self) -> list[str]:
        """The change for a person: a head line, then one ``field: before -> after`` each."""
        head = f"{self.status:7s} {self.scope} {self.attribution_id}"
        if self.status in ("new", "gone"):
            key = self.after if self.after is not None else self.before
            return [head + f": {key['root_cause']} ({key['domain']}, {key['quality']})"]
        out = [head]
        for name in self.fields:
            out.append(f"    {name}: {_show(self.before[name])} -> {_show(self.after[name])}")  # type: ignore[index]
        return out


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_show(v)}" for k, v in value.items() if v) or "none"
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


@dataclass
class VerdictDiff:
    """Every compared attribution id, sorted (changed first, then new, gone, same)."""

    changes: list[VerdictChange]

    def count(self, status: str) -> int:
        return sum(1 for c in self.changes if c.status == status)

    @property
    def differs(self) -> bool:
        """True when any verdict changed, is new or is gone."""
        return any(c.status != "same" for c in self.changes)

    def summary(self) -> str:
        """``N same, M changed, K new, L gone``."""
        return (f"{self.count('same')} same, {self.count('changed')} changed, "
                f"{self.count('new')} new, {self.count('gone')} gone")


def diff_verdicts(replayed: Sequence[Attribution], stored: Sequence[Attribution]) -> VerdictDiff:
    """Compare replayed verdicts with stored ones by ``attribution_id`` on :func:`verdict_key`
    (the stored list holds the latest revision of each id)."""
    old = {a.attribution_id: a for a in stored}
    new = {a.attribution_id: a for a in replayed}
    order = {"changed": 0, "new": 1, "gone": 2, "same": 3}
    changes = []
    for aid in sorted(old.keys() | new.keys()):
        a, b = old.get(aid), new.get(aid)
        ka = verdict_key(a) if a is not None else None
        kb = verdict_key(b) if b is not None else None
        fields = tuple(k for k in (kb or {}) if ka is not None and kb is not None and ka[k] != kb[k])
        ref = b if b is not None else a
        scope = f"{ref.scope.kind}:{ref.scope.id}"  # type: ignore[union-attr]
        changes.append(VerdictChange(aid, scope, ka, kb, fields))
    changes.sort(key=lambda c: (order[c.status], c.scope, c.attribution_id))
    return VerdictDiff(changes)


def stored_verdicts(
    sink: ClickHouseSink,
    replayed: Sequence[Attribution],
    *,
    workloads: Iterable[str] = (),
    clusters: Iterable[str] = (),
    span: tuple[int, int] | None = None,
    report: ReadReport | None = None,
) -> list[Attribution]:
    """The stored verdicts (latest revision per id) to compare a replay with: those with the
    replayed ids, the workload verdicts of ``workloads`` and the fabric-port / incident verdicts
    of ``clusters`` whose window overlaps ``span`` (UTC ns). Rows that do not validate as an
    Attribution are counted in ``report``. Raises ``sinks.clickhouse.SinkError``."""
    report = report if report is not None else ReadReport()
    lo, hi = span if span is not None else (None, None)
    rows = sink.attribution_records(
        ids=[a.attribution_id for a in replayed], scope_ids=sorted(set(workloads)),
        clusters=sorted(set(clusters)), start_ns=lo, end_ns=None if hi is None or hi >= END_OF_TIME else hi)
    out = []
    for raw in rows:
        report.read += 1
        try:
            out.append(Attribution.model_validate_json(raw))
        except ValidationError as exc:
            first = exc.errors()[0]
            report.bad("attributions row", f"{'.'.join(map(str, first.get('loc', ())))}: {first['msg']}")
    return out
