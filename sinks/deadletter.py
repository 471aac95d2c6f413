"""Dead letters: input faultstream could not process, kept with the reason and the original bytes.

The record model is :class:`schemas.deadletter.DeadLetter` (a schema: exported as JSON Schema
and in the AsyncAPI document); it is named here for the sinks that write it.
"""

from __future__ import annotations

from schemas.deadletter import DeadLetter

__all__ = ["DeadLetter"]
