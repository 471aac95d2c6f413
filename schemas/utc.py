"""Times as text: the RFC 3339 form of faultstream's integer UTC nanoseconds.

Every time in a record is an integer of nanoseconds since the Unix epoch, UTC. Those integers
are above 2**53, so a JSON parser that reads numbers as IEEE doubles (JavaScript's
``JSON.parse``, many others by default) changes them silently. Each time field therefore has a
text twin, ``<name>_utc`` (``at_ns`` -> ``at_utc``), holding the same instant as RFC 3339
(section 5.6) in UTC with exactly nine fractional digits::

    1714564800123456789  <->  "2024-05-01T12:00:00.123456789Z"

:func:`format_utc` writes that form; :func:`parse_utc` reads it back, and also accepts what
other producers write: ``T`` or ``t``, ``Z``/``z`` or a numeric offset, 0 to 9 fractional
digits. Instants outside years 1 .. 9999 have no RFC 3339 form.
"""

from __future__ import annotations

import datetime as dt
import re

__all__ = ["format_utc", "parse_utc", "twin_name"]

_NS = 1_000_000_000
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)\Z"
)
# whole second -> its text, for the seconds formatted lately (up to _SECONDS_KEPT): records come
# in runs of a few seconds, an event and its back-dated start alternate between two
_seconds: dict[int, str] = {}
_SECONDS_KEPT = 4096


def twin_name(field: str) -> str:
    """The name of a time field's text twin: ``observed_at`` -> ``observed_at_utc``,
    ``at_ns`` -> ``at_utc``."""
    return field.removesuffix("_ns") + "_utc"


def format_utc(ns: int) -> str:
    """``ns`` (int, UTC nanoseconds since the epoch) as RFC 3339 UTC text with nine fractional
    digits, e.g. ``"2024-05-01T12:00:00.123456789Z"``. Raises ``ValueError`` for an instant
    before year 1 or after year 9999."""
    seconds, frac = divmod(ns, _NS)
    text = _seconds.get(seconds)
    if text is None:
        try:
            stamp = _EPOCH + dt.timedelta(seconds=seconds)
        except OverflowError:
            raise ValueError(f"{ns} ns is outside the years 1..9999 RFC 3339 can write") from None
        text = f"{stamp.year:04d}-{stamp:%m-%dT%H:%M:%S}"
        if len(_seconds) >= _SECONDS_KEPT:
            _seconds.clear()
        _seconds[seconds] = text
    return f"{text}.{frac:09d}Z"


def parse_utc(text: str) -> int:
    """RFC 3339 text (any offset, 0-9 fractional digits) -> int UTC nanoseconds since the
    epoch. Raises ``ValueError`` naming the text when it is not RFC 3339 or names no real
    date (``2024-02-30``)."""
    m = _RFC3339.match(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second, frac, offset = m.groups()
    try:
        stamp = dt.datetime(int(year), int(month), int(day), int(hour), int(minute),
                            min(int(second), 59), tzinfo=dt.UTC)
    except ValueError as exc:
        raise ValueError(f"not a real time: {text!r} ({exc})") from None
    seconds = (stamp - _EPOCH) // dt.timedelta(seconds=1) + (int(second) == 60)
    if offset not in ("Z", "z"):
        sign = 1 if offset[0] == "+" else -1
        seconds -= sign * (int(offset[1:3]) * 3600 + int(offset[4:6]) * 60)
    return seconds * _NS + int((frac or "").ljust(9, "0") or 0)
