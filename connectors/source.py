"""The contract of a live connector: what :func:`connectors.runner.run` needs from a source.

A source turns something outside faultstream (log files, Slurm, port counters, certification
results, topology files) into records. It is **polled**: every call of ``poll()`` returns the
records found since the previous call; the runner publishes them, flushes the producer, and
only then saves ``checkpoint()`` to the connector's cursor
(:class:`connectors.cursor.CursorStore`). The source itself never saves its position.

Required (:class:`Source`, a ``typing.Protocol``: any object with these methods is one):

``poll() -> Sequence[record]``
    The records found since the last poll, in the order to publish them: ``schemas.records.
    Observation`` for most connectors, ``schemas.records.Certification`` for certification
    results; any pydantic record with a ``host`` field. An empty sequence when there is
    nothing new. Errors of the outside system are the connector's own exceptions
    (``SlurmError``, ``CertificationError``, ...); problems with single inputs (an unreadable
    file, a malformed line) are counted in ``coverage()`` rather than raised.
``checkpoint() -> dict``
    The cursor document valid once every record returned by ``poll()`` so far is delivered: a
    JSON object (``json.dumps`` must accept it) the connector reads back from its cursor when
    it starts. ``{}`` for a source without a position.
``coverage() -> list[schemas.records.CoverageEntry]``
    What the source read so far, one entry per input (``source`` names it, ``status`` is
    ``present``, ``empty`` or ``failed``, ``records`` / ``unparsed`` count).

Optional (the runner uses them when present):

``pending: bool``
    True when the last poll stopped before the end of what is already available (a bounded
    pass over a large file, a first sample that only primes counter deltas): a one-shot run
    polls again instead of stopping.
``rewind() -> None`` (:class:`Rewindable`)
    Forget what the polls since the last saved checkpoint found, so the next poll returns those
    records again (same deterministic ids). A runner that retries after a failed delivery needs
    it; without it a failure ends the run.
``wait_s: float``
    Seconds the runner waits between two polls, instead of ``--interval``: a source whose
    poll itself waits for what comes (NVML's XID event wait) sets a short one.
``close() -> None``
    Release what the source holds (connections, NVML); called once when the command ends.
``key(record) -> str``
    The Kafka key of a record (default: ``record.host``); the topology source keys by cluster.

Not to be confused with ``schemas.records.Source``, the provenance (connector name and
instance) that every Observation carries.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from pydantic import BaseModel

from schemas.records import CoverageEntry

__all__ = ["Source", "Rewindable", "record_key"]


@runtime_checkable
class Source(Protocol):
    """A polled source of records (see the module docstring for the shapes)."""

    def poll(self) -> Sequence[BaseModel]:
        """The records found since the previous poll (empty when nothing is new)."""
        ...

    def checkpoint(self) -> dict[str, Any]:
        """The JSON-able cursor document valid once the polled records are delivered."""
        ...

    def coverage(self) -> list[CoverageEntry]:
        """One :class:`~schemas.records.CoverageEntry` per input read so far."""
        ...


@runtime_checkable
class Rewindable(Source, Protocol):
    """A :class:`Source` that can return to its last saved checkpoint after a failed delivery."""

    def rewind(self) -> None:
        """Make the next poll start again from the last saved cursor."""
        ...


def record_key(source: object, record: BaseModel) -> str:
    """The Kafka key of ``record`` from ``source``: ``source.key(record)`` when the source has
    a ``key`` method, else ``record.host``. Raises ``AttributeError`` for a record without a
    ``host`` from a source without ``key``."""
    key = getattr(source, "key", None)
    return key(record) if callable(key) else record.host  # type: ignore[attr-defined]
