"""Persisted connector cursors: one JSON document per connector instance.

A connector keeps in its cursor whatever it needs to resume after a restart without losing or
repeating records (a file offset, the last poll time and the last state seen per Slurm job,
...). It saves the cursor only after its caller confirmed that the records emitted up to that
point were delivered, so a crash between emission and confirmation re-emits those records
(with the same deterministic ids: downstream collapses them) and never skips one.

Writes are atomic: the document goes to a temporary file in the same directory, is flushed to
disk, and replaces the old file with :func:`os.replace`, so a reader (or a restart after a
crash) sees either the old cursor or the new one, never a torn file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["CursorError", "CursorStore"]


class CursorError(ValueError):
    """A cursor file exists but cannot be used: unreadable, not valid JSON, or not a JSON
    object. The message names the file and the reason; the connector does not guess a
    position (that could lose or repeat records) -- remove or fix the file to start over."""


class CursorStore:
    """A JSON object persisted at ``path`` (created with its parent directories on first save).

    ``load()`` returns ``{}`` when the file does not exist yet; ``save(data)`` replaces it
    atomically. ``data`` must be JSON-serialisable (``TypeError`` otherwise, and the old file
    is left untouched).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, Any]:
        """Return the saved object, or ``{}`` when no cursor was saved yet.

        Raises :class:`CursorError` when the file cannot be read, is not UTF-8 JSON, or holds
        something other than a JSON object."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise CursorError(f"cursor {self.path}: cannot read: {exc}") from exc
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CursorError(
                f"cursor {self.path}: corrupted ({exc}); remove the file to start from the "
                "connector's default position"
            ) from exc
        if not isinstance(data, dict):
            raise CursorError(
                f"cursor {self.path}: corrupted (expected a JSON object, found "
                f"{type(data).__name__}); remove the file to start from the connector's "
                "default position"
            )
        return data

    def save(self, data: dict[str, Any]) -> None:
        """Write ``data`` atomically (temporary file in the same directory, fsync,
        :func:`os.replace`, fsync of the directory). Raises ``TypeError`` for data JSON cannot
        hold and ``OSError`` when the directory is not writable."""
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        try:
            dfd = os.open(self.path.parent, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)

    def clear(self) -> None:
        """Remove the saved cursor (the next ``load()`` returns ``{}``)."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"CursorStore({str(self.path)!r})"
