"""Code hooks of the training performance rules (``perf.yaml``): one number per sample, in
seconds or per second, whatever unit and grouping the trainer printed.

* ``perf_sample``: ``ms`` (milliseconds, Megatron and DeepSpeed timers) -> ``seconds``;
  ``rate_text`` (``12,345`` as torchtitan's ``{:,}`` prints it) -> ``rate``; a tqdm ``unit``
  of ``s/it`` turns the printed number into ``seconds``, ``it/s`` into ``rate``. A sample whose
  number is missing, zero or negative is dropped (no speed can be read from it).
* ``nvrx_ranks``: the rank set of an NVRx straggler warning (``{3, 17}`` as Python prints a
  set) -> ``ranks``, a sorted list of ints.

Hooks are pure: they read the record text and the match, nothing else.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from correlators.rules.code import Draft, hook

if TYPE_CHECKING:  # pragma: no cover
    from correlators.rules import Rule
    from schemas.records import Observation

_GROUPED = re.compile(r"^\d{1,3}(?:,\d{3})*(?:\.\d+)?$|^\d+(?:\.\d+)?$")


@hook("perf_sample")
def perf_sample(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """Normalise a step-time or throughput sample (see the module docstring)."""
    a = draft.attributes
    if "ms" in a:
        ms = a.pop("ms")
        if isinstance(ms, (int, float)):
            a["seconds"] = round(ms / 1000.0, 6)
    text = a.pop("rate_text", None)
    if isinstance(text, str) and _GROUPED.match(text):
        a["rate"] = float(text.replace(",", ""))
    unit = a.pop("unit", None)
    if unit == "s/it" and "rate" in a:
        a["seconds"] = a.pop("rate")
    value = a.get("seconds", a.get("rate"))
    if not isinstance(value, (int, float)) or value <= 0:
        return []
    if "seconds" in a:
        draft.type = "perf.step_time"
    return [draft]


@hook("nvrx_ranks")
def nvrx_ranks(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """The printed rank set -> ``ranks`` (sorted ints); a warning naming no rank is dropped."""
    ranks = sorted({int(r) for r in re.findall(r"\d+", str(draft.attributes.pop("ranks_text", "")))})
    if not ranks:
        return []
    draft.attributes["ranks"] = ranks
    return [draft]
