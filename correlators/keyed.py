"""The contract of every keyed state machine, and the effects they return.

A keyed machine (:class:`Keyed`) owns the state of one key of one channel -- a workload's
window, a host's window, a cluster's fabric window, a remediation scope -- and is driven the
same way everywhere: a driver decodes a message (:mod:`schemas.messages`), loads the machine
for the message's key from its stores (``from_state``), applies the message with the driver's
monotonic time (``apply(message, now) -> effects``), carries out the effects and saves the
state (``to_state``). Replay drives the machines with in-memory queues
(:class:`correlators.router.InMemoryRouter`), the stream with Kafka topics and changelogged
tables (``streams.agent.KeyedAgent``). Machines read no clock and do no I/O: everything they
want done is an effect.

Effects:

* :class:`Route` -- a message to another machine (channel + key);
* :class:`Publish` / :class:`Tombstone` -- a record / a deletion on a public topic;
* :class:`Execute` -- an action for an executor (cordon, drain, requeue, webhook, ...);
* :class:`DeadLetter` -- an input the machine refuses, with the reason; nothing is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol, Union, runtime_checkable

from pydantic import BaseModel

from schemas.messages import EventMessage, EventsMessage
from schemas.records import Attribution, Event

#: The channels a :class:`Route` names: ``workload`` (key ``<cluster>/<workload id>``),
#: ``host`` (key ``<cluster>/<host>``), ``fabric`` (key: cluster), ``remediation`` (key: the
#: remediation scope).
CHANNELS = ("workload", "host", "fabric", "remediation")


@dataclass(frozen=True)
class Route:
    """Send ``message`` to channel ``channel`` (one of :data:`CHANNELS`) under ``key``."""

    channel: str
    key: str
    message: BaseModel


@dataclass(frozen=True)
class Publish:
    """Publish ``record`` on public topic ``topic`` (``"events"`` | ``"attributions"`` |
    ``"remediations"``) under ``key`` (the event's window key; the verdict's attribution id;
    the remediation's scope)."""

    topic: str
    key: str
    record: Union[Event, Attribution, BaseModel]


@dataclass(frozen=True)
class Tombstone:
    """Publish a tombstone (null value) on public topic ``topic`` under ``key``, with the
    headers of a ``schema`` record: the entity the key names has ended (on ``attributions``,
    after a withdrawal, so compaction keeps no verdict for the scope)."""

    topic: str
    key: str
    schema: str


@dataclass(frozen=True)
class Execute:
    """Run ``job`` (an executor call the machine prepared, e.g. a remediation action's) off
    the machine's thread; ``key`` is the machine's key, to which the driver routes the result
    back (a message on the same channel), ``kind`` what the result message says
    (``executed`` | ``resumed``)."""

    key: str
    kind: str
    job: Any


@dataclass(frozen=True)
class DeadLetter:
    """An input is refused: ``reason`` (one line, ``<class>: <detail>``) goes to the
    dead-letter topic. ``source`` names the machine (``agent.<channel>``); ``original``: the
    refused input's bytes (None: the record being applied); ``origin``: where that input was
    read (``topic``, ``partition``, ``offset``, ``key``; None: the record being applied)."""

    source: str
    reason: str
    original: bytes | None = None
    origin: Mapping[str, Any] | None = None


Effect = Union[Route, Publish, Tombstone, Execute, DeadLetter]


@runtime_checkable
class Keyed(Protocol):
    """A state machine over one key: ``apply(message, now)`` returns the effects of one
    message (``now``: the driver's monotonic seconds, which decides *when* a machine emits,
    never *what*); ``to_state()`` is its durable state as JSON data; the class method
    ``from_state(key, state, ...)`` rebuilds it (``state`` None: a new key). ``apply`` raises
    ``ValueError`` (``pydantic.ValidationError`` included) for a message it cannot take; the
    state is unchanged then and the driver dead-letters the input."""

    def apply(self, message: Any, now: float) -> list[Effect]: ...

    def to_state(self) -> Any: ...


#: Most events in one :class:`~schemas.messages.EventsMessage` (about 1 KB each on the wire).
EVENTS_PER_MESSAGE = 64


def batch_events(effects: Iterable[Effect], limit: int = EVENTS_PER_MESSAGE,
                 channels: tuple[str, ...] = ("workload", "host")) -> list[Effect]:
    """``effects`` with the events routed to one key of ``channels`` gathered: every run of
    :class:`~schemas.messages.EventMessage` routes to a key that no other message to that key
    interrupts becomes one :class:`~schemas.messages.EventsMessage` (at most ``limit`` events,
    in their order) where its first event was. Each key's messages keep their order, so a
    window applies the same messages in the same order; messages to other keys, other channels
    and publications are not moved (no order across keys exists on Kafka: their partitions
    differ). A run of one stays an ``EventMessage``. Raises ``ValueError`` for ``limit`` < 1."""
    if limit < 1:
        raise ValueError(f"limit {limit}: must be at least 1")
    out: list[Effect] = []
    batches: list[tuple[int, str, str, list[Event]]] = []  # (position in out, channel, key, events)
    open_batch: dict[tuple[str, str], int] = {}  # (channel, key) -> its batch still open for more events
    for effect in effects:
        if isinstance(effect, Route) and effect.channel in channels:
            where = (effect.channel, effect.key)
            if isinstance(effect.message, EventMessage):
                b = open_batch.get(where)
                if b is not None and len(batches[b][3]) < limit:
                    batches[b][3].append(effect.message.event)
                    continue
                open_batch[where] = len(batches)
                batches.append((len(out), effect.channel, effect.key, [effect.message.event]))
            else:
                open_batch.pop(where, None)  # the key's next event starts a new batch after it
        out.append(effect)
    for at, channel, key, events in batches:
        if len(events) > 1:
            out[at] = Route(channel, key, EventsMessage.model_construct(events=events))
    return out


def publish_verdicts(verdicts: Iterable[Attribution]) -> list[Effect]:
    """The publications of ``verdicts`` on ``attributions`` (key: the attribution id), each
    withdrawal followed by the tombstone of its key."""
    out: list[Effect] = []
    for att in verdicts:
        out.append(Publish("attributions", att.attribution_id, att))
        if att.status == "withdrawn":
            out.append(Tombstone("attributions", att.attribution_id, "Attribution"))
    return out
