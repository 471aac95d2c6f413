"""Export the JSON Schema of every record model for consumers of the topics and tables.

``python -m schemas.export [OUT_DIR]`` (default ``schemas/json/``) writes one file per model in
:data:`EXPORTED_MODELS` (the record models of :data:`schemas.records.RECORD_MODELS` plus the
dead-letter topic's :class:`schemas.deadletter.DeadLetter`; the registry is
:mod:`schemas.exported`)::

    observation.schema.json  event.schema.json  attribution.schema.json
    remediation_action.schema.json  dead_letter.schema.json

and the AsyncAPI 3.0 document of the public topics (:mod:`schemas.asyncapi`), ``asyncapi.yaml``:
into ``OUT_DIR`` when one is given, beside the ``json/`` folder (``schemas/asyncapi.yaml``) for
the committed layout. The document is self-contained (its payload schemas are inlined under
``components/schemas``), so it is the same file wherever it is written.

Each file is pydantic's ``model_json_schema()`` (validation mode, JSON Schema draft 2020-12,
shared sub-models under ``$defs``) with a ``$schema`` key added, serialised with sorted keys,
two-space indent, ASCII-only escapes and a trailing newline, so regenerating from unchanged
models gives identical bytes (``tests/schemas/test_schema_files.py`` fails when the committed files
are stale).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from schemas.asyncapi import render_asyncapi
from schemas.exported import EXPORTED_MODELS

__all__ = ["DEFAULT_ASYNCAPI", "DEFAULT_DIR", "EXPORTED_MODELS", "asyncapi_path_for", "export_json_schemas",
           "render_schema", "schema_for"]

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

#: Where the committed schema files live.
DEFAULT_DIR = Path(__file__).resolve().parent / "json"
#: Where the committed AsyncAPI document lives (beside DEFAULT_DIR).
DEFAULT_ASYNCAPI = DEFAULT_DIR.parent / "asyncapi.yaml"
ASYNCAPI_FILE = "asyncapi.yaml"

def schema_for(name: str) -> dict[str, Any]:
    """The JSON Schema (a dict) of the model registered as ``name`` in :data:`EXPORTED_MODELS`
    (``observation``, ``event``, ``attribution``, ``remediation_action``, ``dead_letter``).
    Raises KeyError for an unknown name."""
    schema = EXPORTED_MODELS[name].model_json_schema()
    return {"$schema": JSON_SCHEMA_DIALECT, **schema}


def render_schema(name: str) -> str:
    """The exact text written for ``name``: sorted keys, indent 2, trailing newline."""
    return json.dumps(schema_for(name), indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def _write_if_changed(path: Path, data: bytes) -> None:
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)


def asyncapi_path_for(out_dir: Path) -> Path:
    """Where :func:`export_json_schemas` writes the AsyncAPI document for ``out_dir``:
    :data:`DEFAULT_ASYNCAPI` when ``out_dir`` is :data:`DEFAULT_DIR` (the committed layout),
    else ``out_dir / "asyncapi.yaml"``."""
    out_dir = Path(out_dir)
    return DEFAULT_ASYNCAPI if out_dir.resolve() == DEFAULT_DIR else out_dir / ASYNCAPI_FILE


def export_json_schemas(out_dir: Path = DEFAULT_DIR, *, asyncapi: bool = True) -> list[Path]:
    """Write ``<name>.schema.json`` for every model of :data:`EXPORTED_MODELS` into ``out_dir``
    (created if missing) and, unless ``asyncapi`` is false, the AsyncAPI document at
    :func:`asyncapi_path_for` ``(out_dir)``. Returns the paths written: the schema files in
    ``EXPORTED_MODELS`` order, then the AsyncAPI document. Files are only rewritten when their
    bytes change. Raises OSError if a directory is not writable."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in EXPORTED_MODELS:
        path = out_dir / f"{name}.schema.json"
        _write_if_changed(path, render_schema(name).encode("utf-8"))
        written.append(path)
    if asyncapi:
        path = asyncapi_path_for(out_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_if_changed(path, render_asyncapi().encode("utf-8"))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else DEFAULT_DIR
    for path in export_json_schemas(out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
