"""The AsyncAPI 3.0 document of faultstream's public Kafka topics, generated from the catalogue.

:func:`asyncapi_document` builds it from :func:`schemas.topics.catalogue` and the pydantic
models of :data:`schemas.exported.EXPORTED_MODELS`; :func:`render_asyncapi` gives the YAML text
``faultstream schemas export`` writes (``schemas/asyncapi.yaml`` in the repository). Nothing in
it is written by hand twice: add a topic to the catalogue or a field to a model and
regenerate (``python -m schemas.export``).

Shape (``<t>`` is a topic's logical name, ``<M>`` its value model's class name)::

    asyncapi: 3.0.0
    info: {title, version (= schemas.records.SCHEMA_VERSION), description}
    defaultContentType: application/json
    servers:
      local: {host: localhost:9092, protocol: kafka, ...}          # deploy/kafka's broker
    channels:
      <t>:
        address: faultstream.<t>                                   # the topic name
        messages: {<t>: {$ref: '#/components/messages/<t>'}}
        bindings: {kafka: {topic, partitions, topicConfiguration: {cleanup.policy: [...],
                   retention.ms, max.message.bytes}, bindingVersion: 0.5.0}}
    operations:
      send<T> | receive<T>: {action, channel: {$ref}, messages: [{$ref}]}
    components:
      messages:
        <t>: {name: <M>, contentType: application/json,
              headers: {type: object, required: [schema, schema_version, content-type], ...},
              payload: {$ref: '#/components/schemas/<M>'},          # absent: value not fixed yet
              bindings: {kafka: {key: {type: string, description: <catalogue key>}}}}
      schemas: {<M>: ..., <sub-model>: ...}                        # pydantic's JSON Schemas

Operations are written from the faultstream worker's side: it *receives* the input topics
(:data:`INPUT_TOPICS`: what connectors and people publish) and *sends* the others; a consumer
of verdicts does the opposite. Each operation's description names the publishers and the
consumers of its topic (the catalogue's), and when a tombstone appears on it.
Payload schemas are pydantic's validation-mode JSON Schemas with every shared sub-model
hoisted to ``components/schemas`` (``$ref: '#/components/schemas/Position'``), so the document
is self-contained; the same schemas are exported one file per model under ``schemas/json``.
Topic names use the default prefix ``faultstream``: a deployment with
``FAULTSTREAM_TOPIC_PREFIX`` set has the same topics under its own prefix.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from schemas.exported import EXPORTED_MODELS
from schemas.records import SCHEMA_VERSION
from schemas.topics import DEFAULT_PREFIX, TopicSpec, catalogue
from schemas.wire import CONTENT_TYPE

__all__ = ["ASYNCAPI_VERSION", "KAFKA_BINDING_VERSION", "INPUT_TOPICS", "LOCAL_BROKER",
           "asyncapi_document", "render_asyncapi"]

ASYNCAPI_VERSION = "3.0.0"
#: Version of the AsyncAPI Kafka bindings used (channel, message, operation and server).
KAFKA_BINDING_VERSION = "0.5.0"
#: Topics the worker consumes (operation ``receive``); every other public topic is ``send``.
INPUT_TOPICS = frozenset({"observations", "topology", "certifications", "remediation-commands"})
#: The local broker of ``deploy/kafka`` (``python3 deploy/kafka/broker.py start``).
LOCAL_BROKER = "localhost:9092"
SCHEMA_REF = "#/components/schemas/{model}"
#: Topic configs the Kafka binding's ``topicConfiguration`` knows, as integers.
_INT_CONFIGS = ("retention.ms", "retention.bytes", "delete.retention.ms", "max.message.bytes")


def _models() -> dict[str, type[BaseModel]]:
    """Class name -> model of every topic value model (``Observation``, ..., ``DeadLetter``)."""
    return {m.__name__: m for m in EXPORTED_MODELS.values()}


def _component_schemas(models: dict[str, type[BaseModel]]) -> dict[str, Any]:
    """Every model's JSON Schema and its sub-models', keyed by class name, ``$ref``s pointing
    at ``#/components/schemas/<name>``, sorted by name."""
    _, top = models_json_schema([(m, "validation") for m in models.values()],
                                ref_template=SCHEMA_REF)
    defs = top.get("$defs", {})
    return {name: defs[name] for name in sorted(defs)}


def _channel_binding(spec: TopicSpec) -> dict[str, Any]:
    config: dict[str, Any] = {"cleanup.policy": [spec.cleanup_policy]}
    topic_config = spec.topic_config()
    for key in _INT_CONFIGS:
        if key in topic_config:
            config[key] = int(topic_config[key])
    return {"topic": spec.name, "partitions": spec.partitions, "topicConfiguration": config,
            "bindingVersion": KAFKA_BINDING_VERSION}


def _headers_schema(spec: TopicSpec) -> dict[str, Any]:
    """The Kafka headers of every record of ``spec``'s topic (:mod:`schemas.wire`)."""
    schema = "Observation" if spec.value_schema == "TopologyObservation" else spec.value_schema
    return {
        "type": "object",
        "required": ["schema", "schema_version", "content-type"],
        "properties": {
            "schema": {"type": "string", "const": schema, "description": "the record model"},
            "schema_version": {"type": "string", "const": str(SCHEMA_VERSION)},
            "content-type": {"type": "string", "const": CONTENT_TYPE},
        },
    }


def _camel(logical: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in logical.split("_"))


def asyncapi_document(prefix: str = DEFAULT_PREFIX) -> dict[str, Any]:
    """The AsyncAPI 3.0 document (a dict; shape in the module docstring) of every topic of
    ``catalogue(prefix)``. Deterministic: the same catalogue and models give an equal dict.

    Raises KeyError when a catalogue entry names a ``value_schema`` that is not a model of
    :data:`schemas.exported.EXPORTED_MODELS`."""
    models = _models()
    specs = catalogue(prefix)
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    used: dict[str, type[BaseModel]] = {}
    for logical, spec in specs.items():
        message: dict[str, Any] = {"name": spec.value_schema or f"{logical}-value",
                                   "title": f"{logical} record", "contentType": "application/json"}
        if spec.value_schema is None:
            message["summary"] = "value format not fixed yet"
        else:
            model = models[spec.value_schema]  # KeyError: catalogue and models disagree
            used[model.__name__] = model
            message["summary"] = " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())
            message["payload"] = {"$ref": SCHEMA_REF.format(model=model.__name__)}
            message["headers"] = _headers_schema(spec)
        message["bindings"] = {"kafka": {
            "key": {"type": "string", "description": f"record key: {spec.key} (UTF-8)"},
            "bindingVersion": KAFKA_BINDING_VERSION,
        }}
        messages[logical] = message
        channels[logical] = {
            "address": spec.name,
            "title": logical,
            "description": spec.description,
            "messages": {logical: {"$ref": f"#/components/messages/{logical}"}},
            "bindings": {"kafka": _channel_binding(spec)},
        }
        action = "receive" if logical in INPUT_TOPICS else "send"
        operations[f"{action}{_camel(logical)}"] = {
            "action": action,
            "channel": {"$ref": f"#/channels/{logical}"},
            "summary": (f"the worker consumes {spec.name}" if action == "receive"
                        else f"the worker publishes to {spec.name}"),
            "description": (f"published by {spec.publishers}; consumed by {spec.consumers}. "
                            + (f"Tombstones (null value): {spec.tombstones}." if spec.tombstones
                               else "No tombstones.")),
            "messages": [{"$ref": f"#/channels/{logical}/messages/{logical}"}],
        }
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": "faultstream topics",
            "version": str(SCHEMA_VERSION),
            "description": (
                "Kafka topics of faultstream, streaming root-cause attribution for GPU clusters. "
                "Values are the canonical JSON of the record models (schema_version "
                f"{SCHEMA_VERSION}, a constant); keys are UTF-8 strings, as each message's "
                "Kafka key binding says. Every time is an int64 of UTC nanoseconds with an "
                "RFC 3339 twin <name>_utc; bytes are standard base64. Every record carries the "
                "headers schema, schema_version and content-type. Topic names carry the prefix "
                f"'{prefix}' (FAULTSTREAM_TOPIC_PREFIX). Compacted topics keep the latest "
                "revision per key; a tombstone ends the entity its key names. Contract "
                "changes: docs/contract-changelog.md. Generated from schemas/topics.py and the "
                "pydantic models by `faultstream schemas export`."
            ),
            "license": {"name": "Apache-2.0"},
        },
        "defaultContentType": "application/json",
        "servers": {
            "local": {
                "host": LOCAL_BROKER,
                "protocol": "kafka",
                "description": "single-node Apache Kafka 4 broker of deploy/kafka "
                               "(python3 deploy/kafka/broker.py start), PLAINTEXT on loopback",
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": _component_schemas(used)},
    }


def render_asyncapi(prefix: str = DEFAULT_PREFIX) -> str:
    """:func:`asyncapi_document` as the YAML text written to ``asyncapi.yaml``: block style,
    keys in document order, ASCII only, ends with one newline; byte-identical for unchanged
    inputs."""
    text = yaml.safe_dump(asyncapi_document(prefix), sort_keys=False, allow_unicode=False,
                          default_flow_style=False, width=100)
    return "# Generated by `faultstream schemas export` (schemas/asyncapi.py): do not edit.\n" + text
