"""Terminal conventions the ``faultstream`` commands share.

* ``--format``: :class:`Format` (``text`` for a person, ``line`` one line per record, ``json``
  JSON Lines) where a command prints verdicts, :class:`RecordFormat` (``text`` / ``json``)
  where it prints other records; ``--json`` stays as a hidden alias of ``--format json``
  (:data:`JSON_ALIAS`, :func:`chosen_format`).
* :func:`output_console`: the width of what goes to stdout -- the terminal's; piped, the
  ``COLUMNS`` variable when set (rich reads it), else a fixed default.
"""

from __future__ import annotations

import enum
import os
from typing import TypeVar

import typer
from rich.console import Console

__all__ = ["Format", "RecordFormat", "FORMAT_HELP", "JSON_ALIAS", "chosen_format", "output_console"]


class Format(str, enum.Enum):
    """``--format`` of the commands that print verdicts: ``text`` (rich, for a person),
    ``line`` (one line per verdict or revision, :func:`streams.render.verdict_line`), ``json``
    (JSON Lines of Attributions)."""

    text = "text"
    line = "line"
    json = "json"


class RecordFormat(str, enum.Enum):
    """``--format`` of the commands that print other records: ``text`` (a table or a page for
    a person) or ``json`` (JSON Lines of the records)."""

    text = "text"
    json = "json"


FORMAT_HELP = "text: for a person; line: one line per verdict; json: JSON Lines of Attributions"

#: ``--json``, kept for scripts: the same as ``--format json``.
JSON_ALIAS = typer.Option(False, "--json", hidden=True, help="the same as --format json")

F = TypeVar("F", Format, RecordFormat)


def chosen_format(fmt: F, json_alias: bool) -> F:
    """``fmt``, or its ``json`` member when the hidden ``--json`` was given."""
    return type(fmt)("json") if json_alias else fmt


def output_console(piped_width: int = 140) -> Console:
    """The console for stdout: a terminal's width; piped, ``COLUMNS`` when it is set (rich
    reads it), else ``piped_width`` columns."""
    probe = Console()
    if probe.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return probe
    return Console(width=piped_width)
