"""The models whose JSON Schema consumers of the topics and tables get.

:data:`EXPORTED_MODELS` maps the file stem of each exported schema to its model: the record
models of :data:`schemas.records.RECORD_MODELS` plus the dead-letter topic's
:class:`schemas.deadletter.DeadLetter` and the topology topic's
:class:`schemas.bundle.TopologyObservation`. :mod:`schemas.export` writes one JSON Schema file per
entry; :mod:`schemas.asyncapi` inlines them as the payloads of the topics' messages.
"""

from __future__ import annotations

from pydantic import BaseModel

from schemas.bundle import TopologyObservation
from schemas.deadletter import DeadLetter
from schemas.records import RECORD_MODELS

__all__ = ["EXPORTED_MODELS"]

#: file stem -> model of every exported JSON Schema: the records, the dead letter and the
#: topology topic's record.
EXPORTED_MODELS: dict[str, type[BaseModel]] = {**RECORD_MODELS, "dead_letter": DeadLetter,
                                               "topology_observation": TopologyObservation}
