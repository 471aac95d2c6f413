"""The incident-bundle publisher (and :func:`publish`, named here from :mod:`connectors.runner`).

* :func:`publish` -- send Observations (key = ``obs.host``) through a
  :class:`transport.kafka.RecordProducer`, flush, and only then persist the cursor
  (:mod:`connectors.runner`, which every connector uses).
* :func:`bundle_records` -- an incident bundle as the stream should see it: the scheduler's
  view (``workload.yaml``, then ``workloads/*.yaml``) first, ``topology.yaml`` second (if present), then every record of
  ``BundleConnector(path, keywords=None)`` in event-time order.
* :class:`BundleSource` -- those records as a source read once, optionally paced at ``speed`` x
  real time; :func:`publish_bundle` publishes them through a producer; :class:`BundlesSource`
  several bundles one after the other (`faultstream connect bundle A B ...`).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Generator, Iterable

import typer

from connectors.bundle import SCHEDULER_HOST, BundleConnector, BundleError
from connectors.command import Shared, connector
from connectors.runner import publish, run
from schemas.bundle import WorkloadSpec
from schemas.records import TIME_QUALITY_EXACT, Observation, Position, Source

if TYPE_CHECKING:  # pragma: no cover
    from transport.kafka import RecordProducer

__all__ = ["publish", "bundle_records", "publish_bundle", "workload_observation", "bundle_topology_observation"]



def _spec_data(model: Any) -> dict[str, Any]:
    # JSON round trip: int dict keys (ranks) become strings, datetimes ISO strings
    return json.loads(model.model_dump_json())


def _bundle_record(conn: BundleConnector, *, kind: str, fmt: str, body: str, attributes: dict[str, Any],
                   host: str = SCHEDULER_HOST, file: str | None = None,
                   time_source: str = "transport", spec: WorkloadSpec | None = None) -> Observation:
    """A record about the bundle itself (not one of its log lines), timed at the workload
    start (UTC ns) and attributed to the workload (``spec``, default ``workload.yaml``'s)."""
    w = spec or conn.workload
    return Observation(
        source=Source(connector="bundle", instance=f"{conn.workload.cluster}/{conn.workload.workload_id}"),
        kind=kind,
        observed_at=w.start_ns,
        time_source=time_source,
        time_quality=TIME_QUALITY_EXACT,
        host=host,
        cluster=w.cluster,
        workload_id=w.workload_id,
        format=fmt,
        body=body,
        attributes=attributes,
        position=Position(file=file, line=1 if file and file.endswith(".yaml") else None),
    ).with_id()


def workload_observation(conn: BundleConnector, spec: WorkloadSpec | None = None) -> Observation:
    """The scheduler's view of an attempt (``spec``, default ``workload.yaml``'s):
    ``kind="scheduler_event"``, host ``_scheduler``, ``format="workload_yaml"``, body = the
    file's text, ``attributes.workload`` = the validated :class:`schemas.bundle.WorkloadSpec`
    as JSON data, ``observed_at`` = the workload start (UTC ns)."""
    spec = spec or conn.workload
    file = conn.workload_files[spec.workload_id]
    return _bundle_record(
        conn, kind="scheduler_event", fmt="workload_yaml", time_source="line", spec=spec,
        body=(conn.path / file).read_text("utf-8", errors="replace"),
        attributes={"workload": _spec_data(spec)}, file=file,
    )


def bundle_topology_observation(conn: BundleConnector) -> Observation | None:
    """``topology.yaml`` as ``kind="topology"`` (host ``_scheduler``, ``format="topology_yaml"``,
    ``attributes.topology`` = the validated spec), or None when the bundle has none. The topology connector's record
    (:func:`connectors.topology_parsers.topology_observation`) carries the same ``attributes.topology``;
    the worker reads both."""
    if conn.topology is None:
        return None
    return _bundle_record(
        conn, kind="topology", fmt="topology_yaml",
        body=(conn.path / "topology.yaml").read_text("utf-8", errors="replace"),
        attributes={"topology": _spec_data(conn.topology)}, file="topology.yaml",
    )


def coverage_observations(conn: BundleConnector) -> list[Observation]:
    """The reader's coverage of every source of the bundle, one ``kind="health_event"``
    record each (``format="coverage"``, ``attributes.coverage`` = the
    :class:`schemas.records.CoverageEntry`), so the stream's verdict reports the same coverage
    as ``faultstream replay``. Valid after the connector's observations were read."""
    return [
        _bundle_record(
            conn, kind="health_event", fmt="coverage", spec=spec,
            host=entry.source.split("/")[1] if entry.source.count("/") >= 2 else SCHEDULER_HOST,
            body=f"coverage {entry.source}: {entry.status}, {entry.records} records, {entry.unparsed} unparsed",
            attributes={"coverage": entry.model_dump(mode="json")},
            file=entry.source.removeprefix("file:") if entry.source.startswith("file:") else None,
        )
        for spec in conn.workloads
        for entry in conn.coverage_for(spec.workload_id)
    ]


def bundle_records(path: str | Path, *, keywords: Iterable[str] | None = None) -> tuple[list[Observation], BundleConnector]:
    """All records of the bundle at ``path`` in publishing order: the workload record, the
    topology record (if any), then every ``BundleConnector(path, keywords=None)`` observation
    sorted by ``(observed_at, position.file, position.line)``, then the coverage records. Returns the list and the
    connector (for its ``coverage()``). Raises :class:`connectors.bundle.BundleError` for an
    unreadable bundle. ``keywords``: the reader's prefilter (``RulePack.prefilter_keywords``;
    None reads every line)."""
    conn = BundleConnector(path, keywords=keywords)
    body = sorted(conn.observations(),
                  key=lambda o: (o.observed_at, o.position.file or "", o.position.line or 0))
    head = [workload_observation(conn, spec) for spec in conn.workloads]
    topo = bundle_topology_observation(conn)
    if topo is not None:
        head.append(topo)
    return head + body + coverage_observations(conn), conn


class BundleSource:
    """An incident bundle as a :class:`connectors.source.Source` read once: the records of
    :func:`bundle_records` in that order, paced at ``speed`` x real time (0: all in one poll).
    Paced, each poll sleeps until the next record is due and returns the records due by then
    (``pending`` until the last), sleeping in slices of at most 0.2 s so that setting ``stop``
    ends the wait. No cursor: a bundle is published whole. ``sent``: records returned so far.
    Raises :class:`connectors.bundle.BundleError` for an unreadable bundle."""

    def __init__(self, path: str | Path, *, speed: float = 0.0, sleep: Callable[[float], Any] = time.sleep,
                 stop: threading.Event | None = None) -> None:
        self.records, self.conn = bundle_records(path)
        self.speed = speed
        self.sent = 0
        self._sleep = sleep
        #: set: a paced poll stops waiting (within 0.2 s) and returns no record
        self.stop = stop
        self._start: float | None = None

    @property
    def pending(self) -> bool:
        """True while records are left."""
        return self.sent < len(self.records)

    def _due(self, obs: Observation) -> float:
        assert self._start is not None
        return self._start + max(0, obs.observed_at - self.records[0].observed_at) / 1e9 / self.speed

    def poll(self) -> list[Observation]:
        """The next records: all of them unpaced, else those due when the next one is."""
        if not self.pending:
            return []
        if self.speed <= 0:
            batch = self.records[self.sent:]
        else:
            if self._start is None:
                self._start = time.monotonic()
            due = self._due(self.records[self.sent])
            while (delay := due - time.monotonic()) > 0:
                if self.stop is not None and self.stop.is_set():
                    return []
                self._sleep(min(delay, 0.2))
            end = self.sent
            while end < len(self.records) and self._due(self.records[end]) <= time.monotonic():
                end += 1
            batch = self.records[self.sent:end]
        self.sent += len(batch)
        return batch

    def checkpoint(self) -> dict[str, Any]:
        """``{}``: a bundle keeps no position."""
        return {}

    def coverage(self):  # noqa: ANN201 -- list[CoverageEntry]
        """The bundle reader's coverage (:meth:`connectors.bundle.BundleConnector.coverage`)."""
        return self.conn.coverage()


def publish_bundle(path: str | Path, producer: "RecordProducer", *, speed: float = 0.0,
                   topic: str | None = None) -> tuple[int, BundleConnector]:
    """Publish the bundle at ``path`` (see :func:`bundle_records`) through ``producer``,
    paced at ``speed`` x real time (0 = as fast as possible; the producer serves its delivery
    reports while it waits), flushing each batch. Returns the number of records sent and the
    connector (coverage). Raises ``BundleError``, ``DeliveryError``, ``BackPressureTimeout``."""
    source = BundleSource(path, speed=speed, sleep=producer.poll)
    return run(source, producer, topic=topic), source.conn


# -- CLI ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BundleSent:
    """What was published of one bundle: its path as given, the records sent and of how many,
    and the files the reader could not read (coverage ``failed``)."""

    path: Path
    sent: int
    total: int
    unreadable: tuple[str, ...]


class BundlesSource:
    """Several incident bundles as one source read once: each bundle's :class:`BundleSource`
    in the order given, the next bundle read only when the previous one is sent (so a bundle
    that cannot be read raises :class:`connectors.bundle.BundleError`, its message starting with
    the bundle's path, after the ones before it were published). ``speed`` paces each bundle on
    its own clock. A bundle whose last records were returned is reported to ``on_sent`` (one
    :class:`BundleSent`) at the next poll -- after the runner flushed them to the broker -- or
    by :meth:`finish`; only that summary is kept. ``stop`` (set by the connector framework to
    the run's stop event) ends a paced wait."""

    def __init__(self, paths: list[Path], *, speed: float = 0.0,
                 on_sent: Callable[[BundleSent], Any] = lambda _: None) -> None:
        self.paths = list(paths)
        self.speed = speed
        self.on_sent = on_sent
        self.stop: threading.Event | None = None
        self.sent = 0  #: records returned so far, every bundle together
        self._next = 0  #: index of the next bundle to read
        self._current: tuple[Path, BundleSource] | None = None
        self._unreported: BundleSent | None = None

    @property
    def pending(self) -> bool:
        """True while a bundle or a record of the current one is left."""
        return self._current is not None or self._next < len(self.paths)

    def poll(self) -> list[Observation]:
        """The next records of the current bundle (see :meth:`BundleSource.poll`)."""
        self._report()
        if self._current is None:
            if self._next >= len(self.paths):
                return []
            path = self.paths[self._next]
            self._next += 1
            try:
                self._current = (path, BundleSource(path, speed=self.speed, stop=self.stop))
            except BundleError as exc:  # the message names a file of the bundle: say which bundle
                text = str(exc)
                raise BundleError(text if text.startswith(str(path)) else f"{path}/{text}") from None
        path, one = self._current
        batch = one.poll()
        self.sent += len(batch)
        if not one.pending:
            self._unreported, self._current = _summary(path, one), None
        return batch

    def finish(self) -> tuple[BundleSent | None, list[Path]]:
        """After the run: report the last bundle sent whole; returns the bundle left part-sent
        (None when none) and the bundles never started."""
        self._report()
        partial = _summary(*self._current) if self._current is not None else None
        return partial, self.paths[self._next:]

    def _report(self) -> None:
        if self._unreported is not None:
            done, self._unreported = self._unreported, None
            self.on_sent(done)

    def checkpoint(self) -> dict[str, Any]:
        """``{}``: bundles keep no position."""
        return {}


def _summary(path: Path, one: BundleSource) -> BundleSent:
    return BundleSent(path, one.sent, len(one.records),
                      tuple(c.source for c in one.coverage() if c.status == "failed"))


def _sent_line(done: BundleSent, topic: str) -> str:
    unreadable = ""
    if done.unreadable:
        named = ", ".join(done.unreadable[:3]) + (f" and {len(done.unreadable) - 3} more" if len(done.unreadable) > 3 else "")
        unreadable = f" ({len(done.unreadable)} files could not be read: {named})"
    return f"published {done.sent} records of {done.path} to {topic}{unreadable}"


@connector(interval=None, errors=(BundleError,))
def connect_bundle_cli(
    opts: Shared,
    bundles: Annotated[list[Path], typer.Argument(help="incident bundle directories (BUNDLE.md v1), published in this order")],
    speed: Annotated[float, typer.Option(min=0.0, help="replay each bundle at N x real time (0 = as fast as possible)")] = 0.0,
) -> Generator[BundlesSource, Any, None]:
    """Publish incident bundles' records to Kafka, each bundle whole and in event-time order
    (workload.yaml first), one bundle after the other; a line per bundle once the broker has
    its records. Stopped (SIGTERM) before the last bundle, it says what was left and exits 143."""
    missing = [str(b) for b in bundles if not b.is_dir()]
    if missing:
        raise BundleError(f"not a bundle directory: {', '.join(missing)}")
    seen: dict[Path, Path] = {}
    twice = [str(b) for b in bundles if seen.setdefault(b.resolve(), b) is not b]
    if twice:
        raise BundleError(f"bundle given twice: {', '.join(twice)}")
    source = BundlesSource(bundles, speed=speed, on_sent=lambda done: typer.echo(_sent_line(done, opts.topic), err=True))
    yield source
    partial, unstarted = source.finish()
    if partial is not None or unstarted:
        if partial is not None:
            typer.echo(f"stopped: {partial.sent} of {partial.total} records of {partial.path} published", err=True)
        if unstarted:
            typer.echo(f"stopped: not published: {', '.join(map(str, unstarted))}", err=True)
        raise typer.Exit(143)
