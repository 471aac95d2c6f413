"""The workload channel (key ``<cluster>/<workload id>``): every workload window
(:class:`~correlators.windows.WorkloadWindow`) of a pipeline, and when each emits.

A window emits a **provisional** verdict when decisive evidence arrives (coalesced to at most
one per ``provisional_interval_s`` of the driver's time when that is set), a **final** one when
its watermark passes the workload's end or the idle timer closes it, and a new revision when
late evidence re-opens it (:mod:`correlators.windows`). Timing (activity, held provisionals,
closes and revises in flight) is driver time, never state.
"""

from __future__ import annotations

import collections
from typing import Any, MutableMapping

from pydantic import BaseModel

from correlators.config import EngineConfig
from correlators.host_window import SEP, stored_event
from correlators.keyed import Effect, Publish, Route
from correlators.stragglers import Recheck
from correlators.windows import WorkloadWindow, is_decisive
from schemas.messages import (
    CloseMessage,
    CoverageMessage,
    EventMessage,
    FaultsMessage,
    HostFactsMessage,
    ReviseMessage,
    SpecMessage,
    VerdictMessage,
)
from schemas.records import Event, canonical_json


class WorkloadWindows:
    """The workload windows of one pipeline and their timers.

    ``config``: the engine's rules and window policy; ``meta`` / ``events`` / ``facts``: the
    stores of the windows' states, events and host facts (``Stores.window_*``); ``hold``: batch
    mode (nothing is written until a window decides); ``deferred``: the clusters whose fabric
    evidence is not decided yet (their windows are not closed by the idle timer)."""

    def __init__(self, config: EngineConfig, meta: MutableMapping[str, Any], events: MutableMapping[str, Any],
                 facts: MutableMapping[str, Any], *, hold: bool, deferred: set[str]) -> None:
        self.config = config
        self.meta = meta
        self.events = events
        self.facts = facts
        self.hold = hold
        self.deferred = deferred
        self.windows: dict[str, WorkloadWindow] = {}
        self.loaded = False
        self.activity: dict[str, float] = {}  # window key -> driver time of its last message
        self.pending_close: set[str] = set()
        # provisional coalescing (WindowPolicy.provisional_interval_s), timing only, not state:
        self.provisional_at: dict[str, float] = {}  # window key -> driver time of its last provisional
        self.held: set[str] = set()  # window keys with a provisional revision held back
        self.pending_revise: set[str] = set()  # window keys a ReviseMessage was sent to
        self.recheck = Recheck()  # when performance samples re-decide a window (timing only)

    def apply(self, key: str, message: BaseModel, now: float) -> list[Effect]:
        """A workload window's message: evidence, facts, a close or a revise tick. Raises
        ``ValueError`` for a message of another channel."""
        if isinstance(message, ReviseMessage):  # a tick, not activity: the idle close is not put off
            return self._revise(key, now)
        self.activity[key] = now
        w = self.window(key)
        if isinstance(message, CloseMessage):
            self.pending_close.discard(key)
            return self.emit(w, final=True, now=now) if not w.closed and w.events else []
        if isinstance(message, EventMessage):
            return self._event(key, w, message.event, now)
        return self._facts(key, w, message, now)

    def _revise(self, key: str, now: float) -> list[Effect]:
        """Publish the provisional revision held back, if the window still has one to give."""
        self.pending_revise.discard(key)
        w = self.window(key)
        if key in self.held and not w.closed and w.events and w.spec is not None:
            return self.emit(w, final=False, now=now)
        self.held.discard(key)
        return []

    def _event(self, key: str, w: WorkloadWindow, event: Event, now: float) -> list[Effect]:
        """One event: stored; a final verdict when the window is due, a provisional one when
        the event is decisive."""
        if not w.add_event(event):
            return []  # a duplicate from at-least-once delivery
        if self.hold:
            return []  # batch: nothing to recover
        self.events[f"{key}{SEP}{event.event_id}"] = canonical_json(event).encode()
        if w.due(self.config.window):
            # a window with cable evidence waits for the fabric correlator's faults (or the
            # idle timer) before it is final: a link down may be one port of a lost switch
            return self.emit(w, final=not w.cabled, now=now)
        if w.spec is not None and not w.closed and (is_decisive(event, self.config, w.spec.start_ns)
                                                    or self.recheck.due(key, event)):
            return self.emit(w, final=False, now=now)
        return []

    @staticmethod
    def _take(w: WorkloadWindow, message: BaseModel) -> bool:
        """Add a spec, a coverage entry, faults or a host's facts; True if it changed anything."""
        if isinstance(message, SpecMessage):
            return w.set_spec(message.spec)
        if isinstance(message, CoverageMessage):
            return w.add_coverage(message.entry)
        if isinstance(message, FaultsMessage):
            return w.set_faults(message.events)
        if isinstance(message, HostFactsMessage):
            return w.set_host_facts(message.host, message.gpus, message.history)
        raise ValueError(f"workload channel: unexpected message {getattr(message, 'kind', type(message).__name__)!r}")

    def _facts(self, key: str, w: WorkloadWindow, message: BaseModel, now: float) -> list[Effect]:
        """New facts re-open the window; a spec after decisive evidence and faults re-decide it
        now, anything else waits for the idle timer (or the next due event), so a burst of
        updates gives one revision, not one each."""
        if not self._take(w, message):
            return []  # a re-sent record changes nothing: a final verdict stays final
        if self.hold:
            w.closed = False
            return []  # batch: nothing to recover, the state is written when it decides
        if isinstance(message, HostFactsMessage):
            # stored by host: a 2,048-host job does not rewrite its whole state per host
            self.facts[f"{key}{SEP}{message.host}"] = w.host_facts[message.host]
            if not w.closed and self.meta.get(key) is not None:
                return []
        w.closed = False
        self.meta[key] = w.to_state()
        if isinstance(message, SpecMessage):
            start = w.spec.start_ns
            if any(is_decisive(e, self.config, start) for e in w.events.values()):
                return self.emit(w, final=False, now=now)  # decisive evidence came before the spec
        elif isinstance(message, FaultsMessage):
            # a fault is decisive evidence: re-decide now rather than wait for the idle timer
            if w.due(self.config.window):
                return self.emit(w, final=True, now=now)
            if w.spec is not None and w.events:
                return self.emit(w, final=False, now=now)
        return []

    def window(self, wid: str) -> WorkloadWindow:
        """The workload window ``wid`` (the cache is filled from the stores once after a start
        or :meth:`forget`)."""
        if not self.loaded:
            self.load()
        w = self.windows.get(wid)
        if w is None:
            w = self.windows[wid] = WorkloadWindow(workload_id=wid)
        return w

    def emit(self, w: WorkloadWindow, *, final: bool, now: float | None = None) -> list[Effect]:
        """Publish the window's verdict if it changed. A provisional one is coalesced when the
        policy's ``provisional_interval_s`` is set and ``now`` (driver seconds) is given: the
        window's first is published at once; a later one sooner than the interval after the
        previous one is held (:meth:`idle` sends the tick that publishes it), and one that
        says what the last one said is not published. A final verdict is never held."""
        key = w.workload_id
        interval = self.config.window.provisional_interval_s
        coalesce = not final and interval > 0 and now is not None
        if coalesce:
            last = self.provisional_at.get(key)
            if last is not None and now - last < interval:
                self.held.add(key)
                return []
        att = w.emit(self.config, final=final, coalesce=coalesce)
        self.held.discard(key)
        if final:
            self.provisional_at.pop(key, None)
            if not self.hold:  # live: a closed window keeps its evidence, not its caches
                w.drop_caches()
        elif coalesce and att is not None:
            self.provisional_at[key] = now
        self.meta[w.workload_id] = w.to_state()
        if att is None:
            return []
        return [Publish("attributions", att.attribution_id, att),
                Route("fabric", att.scope.cluster, VerdictMessage(attribution=att))]

    def idle(self, now: float) -> list[Route]:
        """Close messages for the windows with evidence and a spec that saw nothing for the
        window policy's ``idle_timeout_s`` (live mode; none when it is None), except those of a
        cluster whose fabric evidence this pipeline has not decided yet (their faults may be
        on the way; a worker that does not own the cluster's fabric partition cannot know);
        then revise messages for the windows whose provisional revision was held back
        (:meth:`_emit`) and whose ``provisional_interval_s`` passed, unless they are closed
        now. A driver calls it on a timer, more often than either period."""
        out: list[Route] = []
        timeout = self.config.window.idle_timeout_s
        if timeout:
            if not self.loaded:
                self.load()
            for wid in sorted(self.windows):
                w = self.windows[wid]
                if (not w.closed and w.events and w.spec is not None and wid not in self.pending_close
                        and w.spec.cluster not in self.deferred  # its cluster's faults are settling
                        and now - self.activity.setdefault(wid, now) >= timeout):
                    self.pending_close.add(wid)
                    out.append(Route("workload", wid, CloseMessage()))
        interval = self.config.window.provisional_interval_s
        revise = [wid for wid in sorted(self.held - self.pending_revise - self.pending_close)
                  if now - self.provisional_at.get(wid, -1e18) >= interval]
        self.pending_revise.update(revise)
        return out + [Route("workload", wid, ReviseMessage()) for wid in revise]

    def load(self) -> None:
        """Bring every stored workload window into the cache (after a restart or a
        rebalance): each window with a state, an event or a host's facts in the stores. A
        window that holds events but has no state yet (its spec has not come, nothing was
        decided) is rebuilt from its events alone."""
        self.loaded = True
        # values come from the iteration: a changelogged table answers a lookup by key only
        # for the partition of the record being processed
        states = {k: v for k, v in self.meta.items()
                  if v and k not in self.windows}
        grouped: dict[str, list[Event]] = collections.defaultdict(list)
        for k, v in self.events.items():
            wid = k.split(SEP, 1)[0]
            if wid not in self.windows:
                grouped[wid].append(stored_event(v))
        facts: dict[str, dict[str, Any]] = collections.defaultdict(dict)
        for k, v in self.facts.items():
            wid, host = k.split(SEP, 1)
            if wid not in self.windows:
                facts[wid][host] = v
        for wid in sorted(states.keys() | grouped.keys() | facts.keys()):
            state = states.get(wid) or {"workload_id": wid}
            self.windows[wid] = WorkloadWindow.from_state(state, grouped.get(wid, []), facts.get(wid))

    def forget(self) -> None:
        """Drop the cache and the timers in flight: windows are rebuilt from the stores."""
        self.windows.clear()
        self.loaded = False
        self.pending_close.clear()
        self.provisional_at.clear()
        self.held.clear()
        self.pending_revise.clear()
        self.recheck.clear()
