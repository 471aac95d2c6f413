"""Code hook of the Python traceback rule (correlators/rules/python.yaml)."""

from __future__ import annotations

import re

from correlators.rules.code import Draft, hook

_RAISE = re.compile(r"(?:^|[:;]\s*|\belse\b\s*)raise\b")


@hook("python_exception")
def python_exception(draft: Draft, match, obs, rule) -> list[Draft]:
    """``raised_in_source``: the last frame's source line (``last_frame``, dropped from the
    attributes) is a ``raise`` statement. An exception type printed in the traceback of the
    launcher (``ChildFailedError``) is not the program's own failure: no event."""
    frame = draft.attributes.pop("last_frame", "") or ""
    frame = re.sub(r"^\[rank\d+\]:\s?", "", frame).strip()
    if draft.attributes.get("exception", "").endswith("ChildFailedError"):
        return []
    draft.attributes["raised_in_source"] = bool(_RAISE.search(frame))
    return [draft]
