"""Logging set-up of faultstream's processes: plain text for people, JSON Lines for collectors.

``configure_logging("json", "info")`` makes every record one JSON object on one line
(stderr by default), formatted by python-json-logger's :class:`pythonjsonlogger.json.
JsonFormatter`::

    {"ts": "2026-11-30T01:21:04.123456+00:00", "level": "INFO", "logger": "faultstream.worker",
     "message": "worker starting", "app_id": "faultstream-worker"}

Keys: ``ts`` (the record's creation time, UTC, ISO 8601 with offset), ``level`` (``DEBUG`` ..
``CRITICAL``), ``logger`` (the logger's name), ``message`` (the formatted message), then every
``extra={...}`` field of the call (JSON-encoded; values JSON cannot hold are written with
``str()``), and ``exc_info`` (the formatted traceback) when an exception is logged.

``configure_logging("text", level)`` gives ``<UTC ISO time> <LEVEL> <logger>: <message>``
lines (extra fields are not shown).

The worker (``faultstream worker --log-format json``) hands :func:`logging_config` to
``faust.Worker(logging_config=...)``: mode (Faust's service layer) clears the root handlers
and applies that dictConfig when the worker starts, so the JSON handler is the only one and
Faust's own records (``[^Worker]: Ready``, agent errors) come out as JSON too.
"""

from __future__ import annotations

import enum
import logging
import logging.config
import time
from typing import Any

__all__ = ["LogFormat", "logging_config", "configure_logging", "TEXT_FORMAT"]

#: The text format (``%``-style); times are UTC (see :class:`UTCTextFormatter`).
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogFormat(str, enum.Enum):
    """The two formats: ``text`` (for people) and ``json`` (one object per line)."""

    text = "text"
    json = "json"


class UTCTextFormatter(logging.Formatter):
    """:class:`logging.Formatter` whose ``asctime`` is UTC ISO 8601 with milliseconds
    (``2026-11-30T01:21:04.123Z``)."""

    converter = time.gmtime
    default_time_format = "%Y-%m-%dT%H:%M:%S"
    default_msec_format = "%s.%03dZ"


def _level(level: str | int) -> int:
    """``"info"``/``"INFO"``/``20`` -> 20. Raises ValueError for an unknown level name."""
    if isinstance(level, int):
        return level
    number = logging.getLevelName(str(level).strip().upper())
    if not isinstance(number, int):
        raise ValueError(f"unknown log level {level!r} (debug, info, warning, error, critical)")
    return number


def logging_config(fmt: LogFormat | str = "text", level: str | int = "info", *,
                   stream: str = "ext://sys.stderr") -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` document: one handler on ``stream`` (a dictConfig
    ``ext://`` reference, default stderr) at ``level`` on the root logger, with the ``json``
    or ``text`` formatter; loggers configured earlier stay enabled.

    Raises ValueError for an unknown ``fmt`` or ``level``."""
    fmt = LogFormat(fmt)
    number = _level(level)
    if fmt is LogFormat.json:
        formatter: dict[str, Any] = {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": ["levelname", "name", "message"],
            "rename_fields": {"levelname": "level", "name": "logger"},
            "timestamp": "ts",  # datetime.fromtimestamp(record.created, tz=UTC).isoformat()
        }
    else:
        formatter = {"()": f"{__name__}.UTCTextFormatter", "fmt": TEXT_FORMAT}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"faultstream": formatter},
        "handlers": {
            "faultstream": {
                "class": "logging.StreamHandler",
                "formatter": "faultstream",
                "stream": stream,
                "level": number,
            }
        },
        "root": {"level": number, "handlers": ["faultstream"]},
    }


def configure_logging(fmt: LogFormat | str = "text", level: str | int = "info", *,
                      stream: str = "ext://sys.stderr") -> None:
    """Replace the root logger's handlers by one writing ``fmt`` (``"text"`` or ``"json"``)
    records at ``level`` and above to ``stream`` (see :func:`logging_config`).

    Raises ValueError for an unknown ``fmt`` or ``level``."""
    config = logging_config(fmt, level, stream=stream)
    logging.root.handlers.clear()
    logging.config.dictConfig(config)
