"""Runs a :class:`~correlators.pipeline.Pipeline` without a broker: the replay driver."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Iterable

from correlators.keyed import Effect, Publish, Route, Tombstone, publish_verdicts
from correlators.windows import workload_key
from schemas.messages import FaultsMessage
from schemas.records import Attribution, Observation

if TYPE_CHECKING:
    from correlators.pipeline import Pipeline


class InMemoryRouter:
    """Runs a :class:`Pipeline` without a broker: routes go to an in-memory queue and are
    applied in order until none is left; published records are collected in ``published``.

    Used in batch mode (``Pipeline(hold=True)``) by replay: :meth:`feed` every observation,
    then :meth:`finish` decides each cluster's faults, then each workload once (final), then
    each cluster's fabric and incident verdicts over those workload verdicts."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.queue: collections.deque[Route] = collections.deque()
        self.published: list[Publish | Tombstone] = []

    def send(self, effects: Iterable[Effect]) -> None:
        """Queue routes, collect publications."""
        for effect in effects:
            if isinstance(effect, Route):
                self.queue.append(effect)
            else:
                self.published.append(effect)

    def drain(self) -> None:
        """Apply queued routes until the queue is empty."""
        while self.queue:
            route = self.queue.popleft()
            self.send(self.pipeline.apply(route.channel, route.key, route.message))

    def feed(self, observations: Iterable[Observation]) -> None:
        """Ingest every observation and apply what it routes."""
        for obs in observations:
            self.send(self.pipeline.ingest(obs))
            self.drain()

    def finish(self) -> list[Attribution]:
        """Decide everything fed so far (batch mode); returns the verdicts published by this
        call: the workload verdicts in workload-id order, then per cluster its fabric and
        incident verdicts in the fabric correlator's order."""
        p = self.pipeline
        start = len(self.published)
        self.send(p.pending_tables())
        self.drain()
        for cluster in sorted(p.fabric):
            fw = p.fabric[cluster]
            fw.refresh(p.config)
            routes = fw.route_faults(p.config)
            for wid, events in routes.items():
                self.send([Route("workload", workload_key(cluster, wid), FaultsMessage(events=events))])
        self.drain()
        p.workloads.load()
        for wid in sorted(p.windows):
            w = p.windows[wid]
            if w.spec is not None:
                self.send(p.workloads.emit(w, final=True))
        self.drain()
        for cluster in sorted(p.fabric):
            fw = p.fabric[cluster]
            self.send(publish_verdicts(fw.publish(p.config)))
            p.stores.fabric_meta[cluster] = fw.to_state()
        return [e.record for e in self.published[start:] if isinstance(e, Publish) and e.topic == "attributions"]
