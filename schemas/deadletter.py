"""The dead-letter record: input faultstream could not process, kept with the reason and the
original bytes (the value of the ``deadletter`` topic and the ``dead_letters`` table).

DESIGN.md, engineering rules: bad input never stops a worker; it goes to the dead-letter
topic/table with the reason and the original bytes, and is counted. Nothing is silently dropped.

A :class:`DeadLetter` is a plain pydantic model:

* ``source`` -- who rejected it and from where: ``"<component>:<instance>"`` by convention,
  e.g. ``"connector.files:bundles/xid79"`` or ``"agent.extract"``.
* ``reason`` -- why, one line for people (``"json decode error: Expecting value at 0"``).
* ``original`` -- the bytes exactly as received, or None for a Kafka tombstone (a record
  with a null value; ``b""`` is an empty value). In JSON (``model_dump(mode="json")``,
  :func:`schemas.records.canonical_json`) bytes are **standard base64** (RFC 4648 section 4:
  ``+/`` alphabet, ``=`` padding, no line breaks; JSON Schema ``contentEncoding: base64``),
  and None is ``null``; in ClickHouse the ``dead_letters.original`` column is a ``String``
  holding the raw bytes (empty for a tombstone: the ``record`` column tells them apart).
* ``original_key`` -- the Kafka key it was read with (bytes, standard base64 in JSON), when it
  came from Kafka; None when there was no key.
* ``position`` -- where it was read: bundle file + 1-based line and/or Kafka
  topic/partition/offset (:class:`schemas.records.Position`).
* ``at_ns`` -- when it was dead-lettered, UTC nanoseconds since the epoch (``at_utc``: the
  same as RFC 3339 text, :mod:`schemas.utc`). Neither is part of the id.

``dead_letter_id`` is deterministic (``dl-<24 hex>``, a hash of source, reason, original and
position) so replaying the same bad input collapses onto the same row.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, ConfigDict, Field, PlainSerializer, ValidationError, WithJsonSchema

from schemas.records import SCHEMA_VERSION, Position, SchemaVersion, TimeNs, TimeText, _Timed, content_id


def _from_base64(value: Any) -> Any:
    # JSON carries bytes as standard base64 text; Python callers pass bytes
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"not standard base64 (RFC 4648 section 4): {exc}") from None
    return value


def _to_base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


#: Bytes that are standard base64 text in JSON (and in the JSON Schema, ``contentEncoding``).
Base64 = Annotated[
    bytes,
    BeforeValidator(_from_base64),
    PlainSerializer(_to_base64, when_used="json"),
    WithJsonSchema({"type": "string", "contentEncoding": "base64"}),
]


class DeadLetter(_Timed):
    """One rejected input. See the module docstring for the fields; ``with_id`` fills the id."""

    model_config = ConfigDict(extra="forbid")
    #: holds bytes: serialised through pydantic's JSON mode (base64), not its ``__dict__``
    _json_native: ClassVar[bool] = False

    schema_version: SchemaVersion = SCHEMA_VERSION
    dead_letter_id: str = ""
    source: str
    reason: str
    original: Base64 | None
    original_key: Base64 | None = None
    position: Position = Field(default_factory=Position)
    at_ns: TimeNs
    at_utc: TimeText | None = None

    def with_id(self) -> "DeadLetter":
        """Fill ``dead_letter_id`` from source, reason, original bytes and position (``at_ns``
        excluded, so a rerun that rejects the same input again gives the same id); return
        self."""
        data = self.model_dump(mode="json", exclude={"dead_letter_id", "at_ns", "at_utc"})
        self.dead_letter_id = content_id("dl", data)
        return self


def reason_of(exc: BaseException, most: int | None = 3, width: int | None = 300) -> str:
    """The reason text for ``exc`` on one line of at most ``width`` characters (None: any):
    for a pydantic ``ValidationError`` ``field 'loc': message`` of its first ``most`` errors
    (None: all; ``; ``-joined, then ``(+N more)``), else the first line of ``str(exc)`` (the
    class name when it has no message). Dead letters use the defaults."""
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        shown = errors if most is None else errors[:most]
        parts = []
        for err in shown:
            loc = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            parts.append(f"field '{loc}': {msg}" if loc else msg)
        more = f" (+{len(errors) - len(shown)} more)" if len(errors) > len(shown) else ""
        text = "; ".join(parts) + more
    else:
        text = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if width is None else text[:width]
