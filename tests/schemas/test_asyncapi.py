"""The AsyncAPI 3.0 document of the public topics (schemas/asyncapi.py, schemas/asyncapi.yaml).

PyPI has no well-kept AsyncAPI 3 validator (the packages there are v2-only, early 0.0.x object
models or payload validators), so the document is checked here against the AsyncAPI 3.0.0
specification's required fields and object shapes, every ``$ref`` is resolved, the Kafka
bindings are checked against the 0.5.0 binding fields and the catalogue, and the payload
schemas are exercised with real records (valid ones pass, broken ones fail).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from typer.testing import CliRunner

from schemas.asyncapi import (
    ASYNCAPI_VERSION,
    INPUT_TOPICS,
    KAFKA_BINDING_VERSION,
    asyncapi_document,
    render_asyncapi,
)
from schemas.export import EXPORTED_MODELS
from schemas.records import Observation, Position, Source, canonical_json
from schemas.topics import DAY_MS, catalogue
from sinks.deadletter import DeadLetter
from tests.schemas.test_schema_files import T0, sample_attribution

COMMITTED = Path(__file__).resolve().parents[2] / "schemas" / "asyncapi.yaml"

# AsyncAPI 3.0.0: fields of the objects used, and the required ones
TOP_LEVEL = {"asyncapi", "id", "info", "servers", "defaultContentType", "channels", "operations",
             "components"}
INFO = {"title", "version", "description", "termsOfService", "contact", "license", "tags",
        "externalDocs"}
SERVER = {"host", "protocol", "protocolVersion", "pathname", "description", "title", "summary",
          "variables", "security", "tags", "externalDocs", "bindings"}
CHANNEL = {"address", "messages", "title", "summary", "description", "servers", "parameters",
           "tags", "externalDocs", "bindings"}
OPERATION = {"action", "channel", "title", "summary", "description", "security", "tags",
             "externalDocs", "bindings", "traits", "messages", "reply"}
MESSAGE = {"headers", "payload", "correlationId", "contentType", "name", "title", "summary",
           "description", "tags", "externalDocs", "bindings", "examples", "traits"}
COMPONENTS = {"schemas", "servers", "channels", "operations", "messages", "securitySchemes",
              "serverVariables", "parameters", "correlationIds", "replies", "replyAddresses",
              "externalDocs", "tags", "operationTraits", "messageTraits", "serverBindings",
              "channelBindings", "operationBindings", "messageBindings"}
# Kafka bindings 0.5.0
KAFKA_CHANNEL = {"topic", "partitions", "replicas", "topicConfiguration", "bindingVersion"}
KAFKA_TOPIC_CONFIG = {"cleanup.policy", "retention.ms", "retention.bytes", "delete.retention.ms",
                      "max.message.bytes", "confluent.key.schema.validation",
                      "confluent.key.subject.name.strategy", "confluent.value.schema.validation",
                      "confluent.value.subject.name.strategy"}
KAFKA_MESSAGE = {"key", "schemaIdLocation", "schemaIdPayloadEncoding", "schemaLookupStrategy",
                 "bindingVersion"}
COMPONENT_KEY = re.compile(r"^[a-zA-Z0-9.\-_]+$")


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return yaml.safe_load(COMMITTED.read_text("utf-8"))


def refs(node: Any, path: str = "#") -> Iterator[tuple[str, str]]:
    """Every ``(location, $ref value)`` in ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield path, value
            else:
                yield from refs(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from refs(value, f"{path}/{i}")


def resolve(doc: dict[str, Any], ref: str) -> Any:
    """A local JSON Pointer reference (``#/a/b``) in ``doc``; KeyError when it does not exist."""
    assert ref.startswith("#/"), f"non-local $ref {ref!r}: the document must be self-contained"
    node: Any = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def test_committed_document_equals_the_generated_one(doc: dict[str, Any]) -> None:
    assert COMMITTED.read_text("utf-8") == render_asyncapi()
    assert doc == asyncapi_document()


def test_required_asyncapi_3_fields_and_object_shapes(doc: dict[str, Any]) -> None:
    assert doc["asyncapi"] == ASYNCAPI_VERSION == "3.0.0"
    assert set(doc) <= TOP_LEVEL
    assert set(doc["info"]) <= INFO
    assert isinstance(doc["info"]["title"], str) and doc["info"]["title"]
    assert isinstance(doc["info"]["version"], str) and doc["info"]["version"] == "2"
    assert doc["defaultContentType"] == "application/json"

    assert list(doc["servers"]) == ["local"]
    server = doc["servers"]["local"]
    assert set(server) <= SERVER
    assert server["host"] == "localhost:9092" and server["protocol"] == "kafka"

    assert set(doc["components"]) <= COMPONENTS
    for section, items in doc["components"].items():
        assert all(COMPONENT_KEY.match(k) for k in items), (section, list(items))

    for name, channel in doc["channels"].items():
        assert set(channel) <= CHANNEL, name
        assert isinstance(channel["address"], str)
        assert channel["messages"], name
    for name, op in doc["operations"].items():
        assert set(op) <= OPERATION, name
        assert op["action"] in ("send", "receive")
        assert set(op["channel"]) == {"$ref"}
        # 3.0: an operation's messages are references to messages of its own channel
        channel_ref = op["channel"]["$ref"]
        for msg in op["messages"]:
            assert msg["$ref"].startswith(channel_ref + "/messages/"), (name, msg)
    for name, message in doc["components"]["messages"].items():
        assert set(message) <= MESSAGE, name
        assert message["contentType"] == "application/json"


def test_every_ref_resolves(doc: dict[str, Any]) -> None:
    found = list(refs(doc))
    assert len(found) > 40  # channels, operations, messages, payloads and sub-models
    targets = set()
    for where, ref in found:
        try:
            target = resolve(doc, ref)
        except (KeyError, IndexError, ValueError) as exc:
            pytest.fail(f"{where}: $ref {ref!r} does not resolve ({exc!r})")
        assert isinstance(target, dict), (where, ref)
        targets.add(ref)
    # every component schema is used by some payload (directly or through a sub-model)
    schemas = {f"#/components/schemas/{n}" for n in doc["components"]["schemas"]}
    assert schemas <= targets
    assert resolve(doc, "#/components/schemas/Attribution")["title"] == "Attribution"


def test_broken_ref_is_detected(doc: dict[str, Any]) -> None:
    with pytest.raises(KeyError):
        resolve(doc, "#/components/schemas/NoSuchModel")


def test_one_channel_per_catalogue_topic_with_its_kafka_bindings(doc: dict[str, Any]) -> None:
    specs = catalogue("faultstream")
    assert list(doc["channels"]) == list(specs)
    assert len(specs) == 8
    for logical, spec in specs.items():
        channel = doc["channels"][logical]
        assert channel["address"] == spec.name == f"faultstream.{logical}"
        kafka = channel["bindings"]["kafka"]
        assert set(kafka) <= KAFKA_CHANNEL
        assert kafka["bindingVersion"] == KAFKA_BINDING_VERSION == "0.5.0"
        assert kafka["topic"] == spec.name
        assert kafka["partitions"] == spec.partitions
        config = kafka["topicConfiguration"]
        assert set(config) <= KAFKA_TOPIC_CONFIG
        assert config["cleanup.policy"] == [spec.cleanup_policy]
        assert config.get("retention.ms") == spec.retention_ms
        # the message and its key
        message = resolve(doc, channel["messages"][logical]["$ref"])
        mkafka = message["bindings"]["kafka"]
        assert set(mkafka) <= KAFKA_MESSAGE
        assert mkafka["key"]["type"] == "string"
        assert spec.key in mkafka["key"]["description"]
        if spec.value_schema is None:
            assert "payload" not in message
        else:
            assert message["name"] == spec.value_schema
            assert message["payload"] == {"$ref": f"#/components/schemas/{spec.value_schema}"}
        op = f"{'receive' if logical in INPUT_TOPICS else 'send'}{logical.capitalize()}"
        assert doc["operations"][op]["channel"] == {"$ref": f"#/channels/{logical}"}

    # the figures a consumer needs, written out
    obs = doc["channels"]["observations"]["bindings"]["kafka"]
    assert obs["partitions"] == 12
    assert obs["topicConfiguration"] == {"cleanup.policy": ["delete"], "retention.ms": 7 * DAY_MS,
                                         "max.message.bytes": 10 * 1024 * 1024}
    att = doc["channels"]["attributions"]["bindings"]["kafka"]["topicConfiguration"]
    assert att == {"cleanup.policy": ["compact"]}
    dl = doc["channels"]["deadletter"]["bindings"]["kafka"]
    assert dl["partitions"] == 3 and dl["topicConfiguration"]["retention.ms"] == 30 * DAY_MS
    assert doc["operations"]["receiveObservations"]["action"] == "receive"
    assert doc["operations"]["sendAttributions"]["action"] == "send"
    # people publish commands through the CLI and the worker consumes them
    commands = doc["operations"]["receiveRemediation-commands"]
    assert commands["action"] == "receive"
    assert commands["description"].startswith("published by people, through faultstream remediation")
    assert "Tombstones (null value): right after a withdrawn verdict" in doc["operations"]["sendAttributions"]["description"]
    # every message declares the three headers, the topology topic's as Observation records
    for logical, message in doc["components"]["messages"].items():
        props = message["headers"]["properties"]
        assert message["headers"]["required"] == ["schema", "schema_version", "content-type"]
        assert props["schema_version"]["const"] == "2" and props["content-type"]["const"] == "application/json"
        want = "Observation" if logical == "topology" else message["name"]
        assert props["schema"]["const"] == want, logical


def test_the_prefix_names_the_addresses() -> None:
    other = asyncapi_document("t-42")
    assert other["channels"]["events"]["address"] == "t-42.events"
    assert other["channels"]["events"]["bindings"]["kafka"]["topic"] == "t-42.events"


def test_payload_schemas_are_the_models_and_validate_real_records(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    for model in EXPORTED_MODELS.values():
        assert schemas[model.__name__]["title"] == model.__name__
        # the AsyncAPI Schema Object is a superset of JSON Schema draft-07
        jsonschema.Draft7Validator.check_schema(schemas[model.__name__])

    registry = Registry().with_resource("urn:faultstream:asyncapi",
                                        Resource.from_contents(doc, default_specification=DRAFT202012))

    def validator(channel: str) -> jsonschema.Draft202012Validator:
        message = resolve(doc, doc["channels"][channel]["messages"][channel]["$ref"])
        ref = "urn:faultstream:asyncapi" + message["payload"]["$ref"]
        return jsonschema.Draft202012Validator({"$ref": ref}, registry=registry)

    att = json.loads(canonical_json(sample_attribution()))
    validator("attributions").validate(att)
    bad = dict(att, quality="certain")
    assert [e.validator for e in validator("attributions").iter_errors(bad)] == ["enum"]

    obs = Observation(source=Source(connector="slurm", instance="fs-test"), kind="scheduler_event",
                      observed_at=T0, time_source="line", time_quality=0.9, host="_scheduler",
                      cluster="fs-test", workload_id="42", format="slurm_sacct",
                      body="42  fail  debug  root  1  FAILED  3:0",
                      attributes={"job_id": "42", "state": "FAILED", "exit_code": 3}).with_id()
    data = json.loads(canonical_json(obs))
    validator("observations").validate(data)
    assert not validator("observations").is_valid(dict(data, kind="telepathy"))
    assert not validator("observations").is_valid({k: v for k, v in data.items() if k != "host"})

    dead = DeadLetter(source="agent.extract", reason="json decode error: Expecting value at 0",
                      original=b"\xff{not json", position=Position(topic="faultstream.observations",
                                                                   partition=0, offset=17),
                      at_ns=T0).with_id()
    dl = json.loads(dead.model_dump_json())
    validator("deadletter").validate(dl)
    assert base64.urlsafe_b64decode(dl["original"]) == b"\xff{not json"
    assert not validator("deadletter").is_valid(dict(dl, surprise=1))  # extra="forbid"
    assert not validator("deadletter").is_valid({k: v for k, v in dl.items() if k != "reason"})


def test_dead_letter_json_schema_is_exported() -> None:
    path = Path(__file__).resolve().parents[2] / "schemas" / "json" / "dead_letter.schema.json"
    schema = json.loads(path.read_text())
    assert schema["title"] == "DeadLetter"
    assert schema["required"] == ["source", "reason", "original", "at_ns"]
    dead = DeadLetter(source="connector.files:x", reason="bad", original=b"abc", at_ns=T0).with_id()
    jsonschema.Draft202012Validator(schema).validate(json.loads(dead.model_dump_json()))


def test_cli_schemas_export_writes_the_asyncapi_document(tmp_path: Path) -> None:
    from streams.cli import app

    result = CliRunner().invoke(app, ["schemas", "export", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    listed = [Path(line).name for line in result.output.splitlines()]
    assert listed == [f"{n}.schema.json" for n in EXPORTED_MODELS] + ["asyncapi.yaml"]
    assert (tmp_path / "out" / "asyncapi.yaml").read_bytes() == COMMITTED.read_bytes()


def test_cli_schemas_export_to_a_file_is_a_clear_error(tmp_path: Path) -> None:
    from streams.cli import app

    target = tmp_path / "a-file"
    target.write_text("x")
    result = CliRunner().invoke(app, ["schemas", "export", str(target)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {target}: not a directory"
    assert target.read_text() == "x"
