"""Code hooks of the host memory readings (``memory.yaml``): one ``host.memory_pressure``
event per reading, its numbers as attributes the ``sigkill_memory_pressure`` detector
(:mod:`correlators.detectors`) judges.

* ``memory_counter``: a cgroup counter line (``memory.events`` ``<key> <n>``, v1
  ``memory.oom_control`` ``under_oom``/``oom_kill``, ``memory.failcnt``) -> the attribute named
  by the key (``oom_kill: 1``), ``cumulative: true`` (the counters count since the cgroup was
  created: a snapshot taken after the kill still shows it).
* ``memory_free``: ``free``'s ``Mem:`` line (procps-ng 3.3.10+: total used free shared
  buff/cache available; ``free -w``: buffers and cache apart) in any of its units (KiB by
  default, ``-m``/``-g`` numbers, ``-h`` ``1.9Ti``/``3.1Gi``) -> ``available_pct``.
* ``memory_meminfo``: ``MemTotal:``/``MemAvailable:`` ``<n> kB`` -> ``mem_total_bytes`` /
  ``mem_available_bytes`` (the two are separate lines: the detector pairs them).

Hooks are pure: they read the record text and the match, nothing else.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from correlators.rules.code import Draft, hook

if TYPE_CHECKING:  # pragma: no cover
    from correlators.rules import Rule
    from schemas.records import Observation

_UNITS = {"": 1, "B": 1, "K": 1024, "Ki": 1024, "M": 1024**2, "Mi": 1024**2, "G": 1024**3, "Gi": 1024**3,
          "T": 1024**4, "Ti": 1024**4, "P": 1024**5, "Pi": 1024**5}
_SIZE = re.compile(r"^(?P<n>\d+(?:[.,]\d+)?)(?P<u>[BKMGTP]i?)?$")


def _size(text: str | None) -> float | None:
    """A ``free`` column in its own unit (a plain number stays as printed: only ratios of
    one line's columns are taken)."""
    if not text:
        return None
    m = _SIZE.match(text)
    if m is None:
        return None
    return float(m["n"].replace(",", ".")) * _UNITS[m["u"] or ""]


@hook("memory_counter")
def memory_counter(d: Draft, m: "re.Match[str] | None", obs: "Observation", rule: "Rule") -> list[Draft]:
    a = d.attributes
    key, value = a.pop("key", None), a.pop("value", None)
    if isinstance(key, str) and value is not None:
        try:
            a[key] = int(value)
        except (TypeError, ValueError):
            return []
    a["cumulative"] = True
    return [d]


@hook("memory_free")
def memory_free(d: Draft, m: "re.Match[str] | None", obs: "Observation", rule: "Rule") -> list[Draft]:
    a = d.attributes
    total, avail = _size(a.pop("total", None)), _size(a.pop("available", None))
    if total is None or avail is None or total <= 0 or avail > total:
        return []
    a["available_pct"] = round(100.0 * avail / total, 2)
    return [d]


@hook("memory_meminfo")
def memory_meminfo(d: Draft, m: "re.Match[str] | None", obs: "Observation", rule: "Rule") -> list[Draft]:
    a = d.attributes
    key, kb = a.pop("key", None), a.pop("kb", None)
    if not isinstance(kb, int):
        return []
    a["mem_total_bytes" if key == "MemTotal" else "mem_available_bytes"] = kb * 1024
    return [d]
