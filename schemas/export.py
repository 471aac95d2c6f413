"""Export the JSON Schema of every record model for consumers of the topics and tables.

``python -m schemas.export [OUT_DIR]`` (default ``schemas/json/``) writes one file per model in
:data:`schemas.records.RECORD_MODELS`::

    observation.schema.json  event.schema.json  attribution.schema.json
    remediation_action.schema.json

Each file is pydantic's ``model_json_schema()`` (validation mode, JSON Schema draft 2020-12,
shared sub-models under ``$defs``) with a ``$schema`` key added, serialised with sorted keys,
two-space indent, ASCII-only escapes and a trailing newline, so regenerating from unchanged
models gives identical bytes (``tests/test_schema_files.py`` fails when the committed files
are stale).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from schemas.records import RECORD_MODELS

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

#: Where the committed schema files live.
DEFAULT_DIR = Path(__file__).resolve().parent / "json"


def schema_for(name: str) -> dict[str, Any]:
    """The JSON Schema (a dict) of the record model registered as ``name`` in
    ``RECORD_MODELS`` (``observation``, ``event``, ``attribution``, ``remediation_action``).
    Raises KeyError for an unknown name."""
    schema = RECORD_MODELS[name].model_json_schema()
    return {"$schema": JSON_SCHEMA_DIALECT, **schema}


def render_schema(name: str) -> str:
    """The exact text written for ``name``: sorted keys, indent 2, trailing newline."""
    return json.dumps(schema_for(name), indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def export_json_schemas(out_dir: Path = DEFAULT_DIR) -> list[Path]:
    """Write ``<name>.schema.json`` for every record model into ``out_dir`` (created if
    missing) and return the paths written, in ``RECORD_MODELS`` order. Files are only
    rewritten when their bytes change. Raises OSError if the directory is not writable."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in RECORD_MODELS:
        path = out_dir / f"{name}.schema.json"
        data = render_schema(name).encode("utf-8")
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
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
