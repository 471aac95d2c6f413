"""Slurm hostlist expressions (``node-a[01-03,07],gpu1``), as slurmctld, sacct, scontrol and
sinfo print node sets. Pure; shared by the Slurm connector and the fabric correlator (a rack
lost at once is logged as one ``Nodes node-a[05-08] not responding, setting DOWN`` line)."""

from __future__ import annotations

import re

__all__ = ["expand_hostlist"]


def expand_hostlist(expr: str | None) -> list[str]:
    """Expand a Slurm hostlist expression (``node-a[01-03,07],gpu1``) into host names, in
    order. ``None``, ``""`` and ``"None assigned"`` (sacct for jobs that never started) give
    ``[]``. Raises ``ValueError`` for unbalanced brackets."""
    if not expr or expr == "None assigned" or expr == "(null)":
        return []
    out: list[str] = []
    for item in _split_top(expr):
        out.extend(_expand_one(item))
    return out


def _split_top(expr: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ValueError(f"unbalanced hostlist {expr!r}")
    parts.append("".join(cur))
    return [p for p in parts if p]


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[: m.start()], item[m.end():]
    names = []
    for rng in m[1].split(","):
        lo, _, hi = rng.partition("-")
        if not hi:
            names.append(lo)
        else:
            width = len(lo)
            names.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return [h for n in names for h in _expand_one(head + n + tail)]
