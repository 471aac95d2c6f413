"""pydantic v2 models of every record faultstream reads or writes (see ``records`` and
``bundle``), and the JSON Schema export for consumers."""

from schemas.records import (  # noqa: F401
    Attribution,
    Event,
    Observation,
    RemediationAction,
    canonical_json,
    content_id,
)
