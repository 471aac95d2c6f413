"""The one YAML reader of spec files: ``workload.yaml``, ``topology.yaml``, ``expected.yaml``,
rule packs and policies.

PyYAML resolves plain scalars by YAML 1.1, where ``1:17`` is the base-60 integer 77 and
``1:0`` is 60: a switch port ``1:17`` or an exit code ``1:0`` would silently become another
number. :func:`load_yaml` reads with ``yaml.SafeLoader``'s implicit resolvers minus three:

* base-60 integers and floats (``1:17``, ``1:30.5``) stay strings, as in YAML 1.2;
* timestamps stay strings (``start: 2026-11-30T01:00:00Z``): the pydantic models parse them,
  so an invalid time is reported naming its field.

Everything else resolves as ``yaml.safe_load`` does (ints in decimal, ``0x``, ``0o``-less
octal ``017`` and ``0b``; floats; ``true``/``yes``/``on`` booleans; ``null``/``~``). Documents
are parsed by libyaml (``yaml.CSafeLoader``, scanner and parser in C, about 5x faster on a
4,096-host topology.yaml) when PyYAML was built with it, else by the pure-Python
``yaml.SafeLoader``; either way tags are resolved by PyYAML's Python resolver with the
resolvers below and constructed by ``SafeConstructor``, so both give the same data.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

__all__ = ["SpecLoader", "load_yaml"]

_BaseLoader: type = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader

_DROPPED = ("tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")

#: YAML 1.1 ints of SafeLoader without the base-60 form
_INT = re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$")
#: YAML 1.1 floats of SafeLoader without the base-60 form
_FLOAT = re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*"
                    r"(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")


class SpecLoader(_BaseLoader):  # type: ignore[misc,valid-type]
    """``yaml.(C)SafeLoader`` with the implicit resolvers of the module docstring."""


SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _DROPPED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
SpecLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
SpecLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def load_yaml(source: Path | str | bytes) -> Any:
    """The one YAML document in ``source``: a :class:`pathlib.Path` (the file is read as bytes;
    libyaml detects UTF-8/UTF-16 from the BOM), or the document itself as ``str`` or ``bytes``.
    Returns what the document holds (None for an empty one).

    Raises ``yaml.MarkedYAMLError`` (``problem`` and ``problem_mark`` give what and where,
    0-based line/column) for invalid YAML and for an alias (``*name``: never needed in a spec,
    and nested aliases expand exponentially), another ``yaml.YAMLError`` for a stream that is not
    text, ``OSError`` when the file cannot be read."""
    data = source.read_bytes() if isinstance(source, Path) else source
    # an alias is written *name: text without the character '*' (a 0x2A byte in UTF-8 and
    # UTF-16 alike) holds none, and is loaded without the scan for one
    star = "*" if isinstance(data, str) else b"*"
    if star in data:
        for event in yaml.parse(data, Loader=SpecLoader):  # noqa: S506 -- a (C)SafeLoader subclass
            if isinstance(event, yaml.AliasEvent):
                # a spec never needs one, and nested aliases expand exponentially (alias bombs)
                raise yaml.MarkedYAMLError(problem=f"YAML alias *{event.anchor} is not allowed in a spec file",
                                           problem_mark=event.start_mark)
    return yaml.load(data, Loader=SpecLoader)  # noqa: S506 -- a (C)SafeLoader subclass
