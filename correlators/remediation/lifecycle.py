"""Lifecycle of a remediation action: explicit states, an ordered transition table, and the fold
a consumer uses to keep the latest record per action.

States and transitions (:data:`TRANSITIONS`)::

    proposed  -> proposed (revised: new guard results, mode, reason)
              -> approved | rejected | expired | cancelled
    approved  -> executing | cancelled
    executing -> executing (progress: executed, awaiting certification; certification failed)
              -> done | failed | cancelled
    done, failed, rejected, expired, cancelled: terminal

Every transition is a new :class:`schemas.records.RemediationAction` record with ``sequence``
one higher and ``updated_at`` the transition's time (UTC ns). A consumer (the CLI, a sink, an
executor) folds records with :func:`fold`: a record with the same ``action_id`` and
``sequence`` as the one held is a duplicate (at-least-once delivery), one with a lower
``sequence`` is stale (out of order) -- both are no-ops, returned as such; a higher one is
applied if its state is reachable from the held state (sequence gaps are fine: a consumer may
miss intermediate records), else :class:`LifecycleError`. So any delivery order of one action's
records ends in the same state.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from schemas.records import ActionState, RemediationAction, record_data

TERMINAL: frozenset[str] = frozenset({"done", "failed", "rejected", "expired", "cancelled"})

TRANSITIONS: dict[str, frozenset[str]] = {
    "proposed": frozenset({"proposed", "approved", "rejected", "expired", "cancelled"}),
    "approved": frozenset({"executing", "cancelled"}),
    "executing": frozenset({"executing", "done", "failed", "cancelled"}),
    "done": frozenset(),
    "failed": frozenset(),
    "rejected": frozenset(),
    "expired": frozenset(),
    "cancelled": frozenset(),
}

FoldOutcome = Literal["applied", "duplicate", "stale"]


class LifecycleError(ValueError):
    """An illegal transition (``from_state`` -> ``to_state``) of action ``action_id``, or two
    different records with the same sequence."""

    def __init__(self, action_id: str, from_state: str, to_state: str, detail: str = ""):
        self.action_id, self.from_state, self.to_state = action_id, from_state, to_state
        msg = f"action {action_id}: illegal transition {from_state} -> {to_state}"
        super().__init__(msg + (f" ({detail})" if detail else ""))


def can_transition(from_state: str, to_state: str) -> bool:
    """True when ``to_state`` directly follows ``from_state`` in :data:`TRANSITIONS`."""
    return to_state in TRANSITIONS[from_state]


def reachable(from_state: str, to_state: str) -> bool:
    """True when ``to_state`` can follow ``from_state`` through one or more transitions."""
    seen, todo = set(), [from_state]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt == to_state:
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def advance(action: RemediationAction, to_state: ActionState, *, at: int, **changes: object) -> RemediationAction:
    """The next record of ``action``: state ``to_state``, ``sequence + 1``, ``updated_at`` the
    later of ``at`` (UTC ns) and the held record's, so it never decreases with ``sequence``
    (transitions are timed by event time and by the wall clock of people's commands and
    executors, which need not agree), and any other field ``changes`` (``reason``,
    ``decision``, ``result``, ...). Raises :class:`LifecycleError` if the transition is not in
    :data:`TRANSITIONS`."""
    if not can_transition(action.state, to_state):
        raise LifecycleError(action.action_id, action.state, to_state)
    data = record_data(action)
    data.update(changes)
    data.update(state=to_state, sequence=action.sequence + 1, updated_at=max(at, action.updated_at))
    return RemediationAction.model_validate(data)


class Folded(NamedTuple):
    """The record to keep and what happened to the incoming one."""

    action: RemediationAction
    outcome: FoldOutcome


def fold(current: RemediationAction | None, record: RemediationAction) -> Folded:
    """Apply ``record`` to the held ``current`` record of the same action.

    Returns ``(record, "applied")`` for a first or newer record; ``(current, "duplicate")`` for
    the same sequence and content; ``(current, "stale")`` for a lower sequence. Raises
    :class:`LifecycleError` when a newer record's state cannot follow the held state, or the
    same sequence carries different content."""
    if current is None:
        return Folded(record, "applied")
    if record.action_id != current.action_id:
        raise ValueError(f"fold: record of {record.action_id} applied to {current.action_id}")
    if record.sequence < current.sequence:
        return Folded(current, "stale")
    if record.sequence == current.sequence:
        if record == current:
            return Folded(current, "duplicate")
        raise LifecycleError(
            current.action_id, current.state, record.state, f"two different records with sequence {record.sequence}"
        )
    if not reachable(current.state, record.state):
        raise LifecycleError(current.action_id, current.state, record.state)
    return Folded(record, "applied")
