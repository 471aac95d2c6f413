"""The ``$__`` macros of Grafana's ClickHouse data source plugin, expanded the way the plugin
expands them, so a panel's SQL can run outside Grafana (tests, ``build.py --query``).

Source: the plugin's ``pkg/macros/macros.go`` (grafana/clickhouse-datasource 4.x) and its
documentation (docs/sources/query-editor.md, "Macros"). With the dashboard's time range
``[from, to]`` (UTC) and the query interval (seconds):

=============================  =========================================================================
macro                          expansion
=============================  =========================================================================
``$__timeFilter(c)``           ``c >= toDateTime(<from s>) AND c <= toDateTime(<to s>)``
``$__timeFilter_ms(c)``        ``c >= fromUnixTimestamp64Milli(<from ms>) AND c <= fromUnixTimestamp64Milli(<to ms>)``
``$__dateFilter(c)``           ``c >= toDate('<from date>') AND c <= toDate('<to date>')``
``$__dateTimeFilter(d, t)``    ``(d >= toDate(..) AND d <= toDate(..)) AND (t >= toDateTime(..) AND t <= toDateTime(..))``
                               (``$__dt`` is the same)
``$__timeFrom(c)``             ``c >= toDateTime(<from s>)``; ``$__timeTo(c)``: ``c <= toDateTime(<to s>)``
``$__fromTime``                ``toDateTime(<from s>)``; ``$__toTime``: ``toDateTime(<to s>)``
``$__fromTime_ms``             ``fromUnixTimestamp64Milli(<from ms>)``; ``$__toTime_ms`` likewise
``$__timeInterval(c)``         ``toStartOfInterval(toDateTime(c), INTERVAL <interval s, min 1> second)``
``$__timeInterval_ms(c)``      ``toStartOfInterval(toDateTime64(c, 3), INTERVAL <interval ms, min 1> millisecond)``
``$__interval_s``              ``<interval s, min 1>``
=============================  =========================================================================

``<from s>`` is the Unix time in whole seconds (Go's ``Time.Unix``: rounded down), ``<from ms>``
in milliseconds. Macros inside string literals and comments are left alone, as the plugin
does. A ``$__`` name this module does not know raises :class:`MacroError` (the plugin would
leave it in the SQL for ClickHouse to refuse).

Dashboard variables (:func:`apply_variables`) are replaced before the macros, in the order the
plugin's frontend does it (``applyTemplateVariables`` in ``src/data/CHDatasource.ts``): first
``$__conditionalAll(condition, $var)`` becomes ``1=1`` when ``var`` is "All" (``$__all``) or
empty, else ``condition``; then Grafana's template service replaces ``${var:singlequote}``
(each value in single quotes, ``'`` escaped as ``\\'``, joined by ``,``: Grafana's
``singlequote`` format) and ``$var`` / ``${var}`` (the plugin's default format: one value as
is, several as ``'a','b'``).
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Callable

__all__ = ["MacroError", "apply_variables", "expand", "MACROS"]


class MacroError(ValueError):
    """A ``$__`` macro that is unknown, has the wrong number of arguments or no closing
    parenthesis."""


class _Context:
    def __init__(self, time_from: datetime, time_to: datetime, interval_s: float) -> None:
        if time_from.tzinfo is None or time_to.tzinfo is None:
            raise ValueError("the time range must be timezone-aware (UTC)")
        self.time_from = time_from.astimezone(timezone.utc)
        self.time_to = time_to.astimezone(timezone.utc)
        self.interval_s = interval_s


def _seconds(t: datetime) -> int:
    return math.floor(t.timestamp())


def _ms(t: datetime) -> int:
    # Go's UnixMilli: whole milliseconds, rounded down (microseconds kept exact)
    return (_seconds(t) * 1_000_000 + t.microsecond) // 1000


def _dt(t: datetime) -> str:
    return f"toDateTime({_seconds(t)})"


def _dt64(t: datetime) -> str:
    return f"fromUnixTimestamp64Milli({_ms(t)})"


def _date(t: datetime) -> str:
    return f"toDate('{t.strftime('%Y-%m-%d')}')"


def _args(n: int, name: str, fn: Callable[[_Context, list[str]], str]) -> Callable[[_Context, list[str]], str]:
    def wrapped(ctx: _Context, args: list[str]) -> str:
        if len(args) != n:
            raise MacroError(f"$__{name} expected {n} argument(s), received {len(args)}")
        return fn(ctx, args)
    return wrapped


def _interval_s(ctx: _Context) -> int:
    return int(max(ctx.interval_s, 1))


#: name -> (ctx, args) -> SQL text. A macro without arguments gets ``[]``.
MACROS: dict[str, Callable[[_Context, list[str]], str]] = {
    "timeFilter": _args(1, "timeFilter", lambda c, a: f"{a[0]} >= {_dt(c.time_from)} AND {a[0]} <= {_dt(c.time_to)}"),
    "timeFilter_ms": _args(1, "timeFilter_ms",
                           lambda c, a: f"{a[0]} >= {_dt64(c.time_from)} AND {a[0]} <= {_dt64(c.time_to)}"),
    "dateFilter": _args(1, "dateFilter",
                        lambda c, a: f"{a[0]} >= {_date(c.time_from)} AND {a[0]} <= {_date(c.time_to)}"),
    "dateTimeFilter": _args(2, "dateTimeFilter", lambda c, a: (
        f"({a[0]} >= {_date(c.time_from)} AND {a[0]} <= {_date(c.time_to)}) AND "
        f"({a[1]} >= {_dt(c.time_from)} AND {a[1]} <= {_dt(c.time_to)})")),
    "timeFrom": _args(1, "timeFrom", lambda c, a: f"{a[0]} >= {_dt(c.time_from)}"),
    "timeTo": _args(1, "timeTo", lambda c, a: f"{a[0]} <= {_dt(c.time_to)}"),
    "fromTime": _args(0, "fromTime", lambda c, a: _dt(c.time_from)),
    "toTime": _args(0, "toTime", lambda c, a: _dt(c.time_to)),
    "fromTime_ms": _args(0, "fromTime_ms", lambda c, a: _dt64(c.time_from)),
    "toTime_ms": _args(0, "toTime_ms", lambda c, a: _dt64(c.time_to)),
    "timeInterval": _args(1, "timeInterval", lambda c, a: (
        f"toStartOfInterval(toDateTime({a[0]}), INTERVAL {_interval_s(c)} second)")),
    "timeInterval_ms": _args(1, "timeInterval_ms", lambda c, a: (
        f"toStartOfInterval(toDateTime64({a[0]}, 3), INTERVAL {int(max(c.interval_s * 1000, 1))} millisecond)")),
    "interval_s": _args(0, "interval_s", lambda c, a: str(_interval_s(c))),
}
MACROS["dt"] = MACROS["dateTimeFilter"]

_NAME = re.compile(r"\$__([A-Za-z_][A-Za-z0-9_]*)")


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated arguments of a macro call, trimmed ('' -> [])."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    if last or out:
        out.append(last)
    return out


def expand(sql: str, time_from: datetime, time_to: datetime, *, interval_s: float = 60.0) -> str:
    """``sql`` with every ``$__`` macro expanded for the time range ``[time_from, time_to]``
    (timezone-aware datetimes) and the query interval ``interval_s`` (seconds). Raises
    :class:`MacroError` for an unknown macro, a wrong argument count or an unclosed call;
    ``ValueError`` for naive datetimes."""
    ctx = _Context(time_from, time_to, interval_s)
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'`\"":  # a quoted string or identifier: copied as is (backslash escapes)
            j = i + 1
            while j < n and sql[j] != ch:
                j += 2 if sql[j] == "\\" else 1
            out.append(sql[i:j + 1])
            i = j + 1
            continue
        if sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(sql[i:j])
            i = j
            continue
        if sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(sql[i:j])
            i = j
            continue
        m = _NAME.match(sql, i) if ch == "$" else None
        if m is None:
            out.append(ch)
            i += 1
            continue
        name = m.group(1)
        if name not in MACROS:
            raise MacroError(f"unknown macro $__{name}")
        end = m.end()
        args: list[str] = []
        if end < n and sql[end] == "(":
            depth, j = 0, end
            while j < n:
                if sql[j] == "(":
                    depth += 1
                elif sql[j] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j >= n:
                raise MacroError(f"$__{name}( has no closing parenthesis")
            args = _split_args(sql[end + 1:j])
            end = j + 1
        out.append(MACROS[name](ctx, args))
        i = end
    return "".join(out)


#: Grafana's variable syntax: $name, ${name} and ${name:format} (names of $__ macros excluded)
_VARIABLE = re.compile(r"\$(?!__)(\w+)|\$\{(?!__)(\w+)(?::(\w+))?\}")
_CONDITIONAL_ALL = "$__conditionalAll("


def _call_args(sql: str, open_at: int) -> tuple[list[str], int]:
    """The top-level arguments of the call whose ``(`` is at ``open_at``, and the index after
    its ``)``; MacroError without one."""
    depth = 0
    for j in range(open_at, len(sql)):
        if sql[j] == "(":
            depth += 1
        elif sql[j] == ")":
            depth -= 1
            if depth == 0:
                return _split_args(sql[open_at + 1:j]), j + 1
    raise MacroError("$__conditionalAll( has no closing parenthesis")


def apply_variables(sql: str, values: dict[str, list[str] | None]) -> str:
    """``sql`` with the dashboard variables replaced as the plugin and Grafana replace them
    (module docstring). ``values``: variable name -> the selected values, or None for "All".
    Raises :class:`MacroError` for a ``$__conditionalAll`` without two arguments, a variable
    not in ``values`` or a format other than ``singlequote``."""
    at = sql.rfind(_CONDITIONAL_ALL)
    while at >= 0:  # from the last one, as the plugin does
        args, end = _call_args(sql, at + len(_CONDITIONAL_ALL) - 1)
        if len(args) != 2 or not args[1].startswith("$"):
            raise MacroError(f"$__conditionalAll expects (condition, $variable), received {args}")
        name = args[1][1:]
        if name not in values:
            raise MacroError(f"unknown variable ${name}")
        chosen = values[name]
        sql = sql[:at] + ("1=1" if chosen is None or not chosen else args[0]) + sql[end:]
        at = sql.rfind(_CONDITIONAL_ALL, 0, at)

    def replace(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        fmt = m.group(3)
        if name not in values:
            raise MacroError(f"unknown variable ${name}")
        chosen = values[name]
        if chosen is None:
            raise MacroError(f"${name} is used outside $__conditionalAll, where 'All' cannot be replaced")
        if fmt == "singlequote":
            return ",".join("'" + v.replace("'", "\\'") + "'" for v in chosen)
        if fmt is not None:
            raise MacroError(f"${{{name}:{fmt}}}: only the singlequote format is known here")
        return chosen[0] if len(chosen) == 1 else "'" + "','".join(chosen) + "'"

    return _VARIABLE.sub(replace, sql)
