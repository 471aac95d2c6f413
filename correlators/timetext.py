"""Times in verdict text (pure: no clock, no I/O).

Event and verdict times are UTC nanoseconds since the epoch (``int``). :data:`NS` is one
second in those units; :func:`clock` writes such a time as ``HH:MM:SS`` for the sentences of a
verdict that name a moment of the incident (attribution, detectors, explanations). Parsing the
timestamps of log lines is ingest's job: :mod:`connectors.timefmt`.
"""

from __future__ import annotations

import datetime as dt

__all__ = ["NS", "clock"]

#: Nanoseconds in one second.
NS = 1_000_000_000


def clock(ns: int) -> str:
    """``HH:MM:SS`` (UTC) of ``ns``, a time in nanoseconds since the epoch.

    Only the time of day is written (no date): verdict texts name moments within one incident.
    Raises ``OverflowError``/``OSError``/``ValueError`` only for a time outside what
    :func:`datetime.datetime.fromtimestamp` accepts.
    """
    return dt.datetime.fromtimestamp(ns // NS, tz=dt.UTC).strftime("%H:%M:%S")
