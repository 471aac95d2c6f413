"""printf formats -> regular expressions: one compiler for every message catalog (pure).

Vendors print their messages from C format strings (NCCL's ``WARN("...")``, the NVIDIA
driver's ``NV_PRINTF``/``nvErrorLog``, DCGM's ``DCGM_FR_*_MSG``, Slurm's ``error()``, the
kernel's ``dev_err``). Keeping the format as data and compiling it mechanically reads every line
the format can print, with its arguments captured as fields, instead of a hand-written regex per
message. Used by the rule loader (a rule's ``format:``/``args:``, :mod:`correlators.rules.loader`)
and by the DCGM message table (:mod:`correlators.rules.hooks_dcgm`).

Conversions (C99 ``printf`` plus the kernel's ``%pV``-free subset the vendors use): flags
``-+ #0``, a width, a precision, the length modifiers ``hh h l ll z j t L q``; ``d i u`` read a
signed decimal, ``x X`` hex with an optional ``0x``, ``o`` octal, ``f F e E g G a A`` a float,
``s`` text (lazily, up to what follows; to the end of the line when last), ``c`` one
character, ``p`` a pointer, ``%%`` a percent sign. ``%*d`` (width from an argument) reads like
``%d``. Anything else raises :class:`ValueError`.
"""

from __future__ import annotations

import re
from typing import Sequence

__all__ = ["CONVERSION", "compile_format", "conversions", "literal_runs"]

#: one conversion specification
CONVERSION = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?"
                        r"(?P<len>hh|h|ll|l|z|j|t|L|q)?(?P<conv>[diuxXofFeEgGaAscp%])")
_ANY = re.compile(r"%")

_NUMBER = {
    "d": r"[-+]?\d+", "i": r"[-+]?\d+", "u": r"\d+",
    "x": r"(?:0[xX])?[0-9a-fA-F]+", "X": r"(?:0[xX])?[0-9a-fA-F]+", "o": r"[0-7]+",
    "p": r"(?:0x[0-9a-fA-F]+|\(nil\)|\(null\))",
    "c": r"\S",
}
_FLOAT = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)"


def conversions(fmt: str) -> list[str]:
    """The conversion characters of ``fmt`` in order (``%%`` left out); ValueError for a
    ``%`` that starts no valid conversion."""
    out, pos = [], 0
    for m in _ANY.finditer(fmt):
        if m.start() < pos:
            continue
        spec = CONVERSION.match(fmt, m.start())
        if spec is None:
            raise ValueError(f"format {fmt!r}: '%' at {m.start()} starts no conversion")
        pos = spec.end()
        if spec["conv"] != "%":
            out.append(spec["conv"])
    return out


def literal_runs(fmt: str) -> list[str]:
    """The literal text between the conversions of ``fmt``, blanks collapsed, empty runs left
    out (``"NET/IB : %s:%d Got async event"`` -> ``["NET/IB :", ":", "Got async event"]``)."""
    return [" ".join(part.split()) for part in CONVERSION.sub("\x00", fmt).split("\x00")
            if part.strip()]


def compile_format(fmt: str, args: Sequence[str] = (), *, blanks: str = "required") -> str:
    """Regular-expression source reading every line ``fmt`` prints.

    ``args`` name the conversions in order: a name gives a named group (``(?P<name>...)``), ``_``
    or a missing name an unnamed one; more names than conversions raise ValueError. A name used
    twice raises ValueError. ``blanks``: ``required`` (a blank in the format reads one or more
    blanks) or ``optional`` (zero or more: tables that wrap a message). The pattern is not
    anchored; a ``%s`` reads lazily up to what follows it, or to the end of the line when it
    is last."""
    if blanks not in ("required", "optional"):
        raise ValueError(f"blanks must be 'required' or 'optional', not {blanks!r}")
    fmt = fmt.rstrip("\n")  # printk's and fprintf's line end
    convs = conversions(fmt)
    if len(args) > len(convs):
        raise ValueError(f"format {fmt!r}: {len(args)} argument names for {len(convs)} conversions")
    named = [a for a in args if a and a != "_"]
    if len(named) != len(set(named)):
        raise ValueError(f"format {fmt!r}: an argument name is used twice: {list(args)}")
    blank = r"[ \t]+" if blanks == "required" else r"[ \t]*"
    out: list[str] = []
    pos = 0
    index = 0
    specs = [m for m in CONVERSION.finditer(fmt)]
    for n, m in enumerate(specs):
        out.append(_literal(fmt[pos:m.start()], blank))
        pos = m.end()
        conv = m["conv"]
        if conv == "%":
            out.append("%")
            continue
        name = args[index] if index < len(args) else "_"
        index += 1
        last = all(s["conv"] == "%" for s in specs[n + 1:]) and not fmt[pos:].strip()
        if conv == "s":
            body = r"[^\n]*" if last else r"[^\n]+?"
        elif conv in _NUMBER:
            body = _NUMBER[conv]
        else:
            body = _FLOAT
        out.append(f"(?P<{name}>{body})" if name and name != "_" else f"(?:{body})")
    out.append(_literal(fmt[pos:], blank))
    return "".join(out)


def _literal(text: str, blank: str) -> str:
    parts = re.split(r"\s+", text)
    return blank.join(re.escape(p) for p in parts) if text else ""
