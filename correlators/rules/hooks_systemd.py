"""Code hook of the systemd rules (correlators/rules/systemd.yaml)."""

from __future__ import annotations

import re

from correlators.rules.code import Draft, hook

_UNIT_IN_DESCRIPTION = re.compile(r"^(?P<unit>[\w@.\\:-]+\.(?:service|socket|mount|timer|target)) - (?P<description>.+)$")


@hook("systemd_unit")
def systemd_unit(draft: Draft, match, obs, rule) -> list[Draft]:
    """One ``unit`` attribute whichever alternative matched; systemd 252+'s
    "Failed to start <unit> - <description>" is split into unit and description."""
    attrs = draft.attributes
    for alt in ("unit2", "unit3"):
        if alt in attrs:
            attrs["unit"] = attrs.pop(alt)
    desc = attrs.get("description")
    if isinstance(desc, str):
        m = _UNIT_IN_DESCRIPTION.match(desc)
        if m:
            attrs["unit"], attrs["description"] = m["unit"], m["description"]
    return [draft]
