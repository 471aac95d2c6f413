"""The non-Python clients of the contract tests, driven from pytest.

* Kafka's Java console consumer and producer (``org.apache.kafka.tools.consumer.
  ConsoleConsumer`` and ``org.apache.kafka.tools.ConsoleProducer`` of Kafka 4.x) from the
  broker's Maven jars plus ``kafka-tools`` (:func:`tests.transport.test_partitioner.
  java_tools_classpath` fetches it into ``.state/kafka/tools``);
* Node.js scripts of ``deploy/contract/`` (ajv, @asyncapi/parser) and the example consumer of
  ``examples/consumers/node/``, whose npm packages ``deploy/contract/setup.sh`` installs
  (``npm ci`` into ``.state/contract``, cached by the lock files' hashes).

A missing ``java``, ``mvn`` or ``node``, or an install that fails, FAILS the calling test with
the reason (never a skip).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.transport.test_partitioner import java_binary, java_tools_classpath
from tests.setup_fixtures import ensure

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "deploy" / "contract"
EXAMPLE_NODE = REPO / "examples" / "consumers" / "node"

#: Separator of the console consumer's fields (partition, offset, headers, key, value): the
#: ASCII unit separator, which JSON text never holds raw (control characters are escaped).
FIELD_SEP = "\x1f"
#: Separator of the headers (ASCII record separator).
HEADER_SEP = "\x1e"
#: What the console consumer prints for a null key, value or header value (ASCII SUB).
NULL = "\x1a"

#: log4j2 configuration of the Java tools: warnings and errors on stderr (log4j's default
#: configuration prints errors on stdout, between the records).
_LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %d %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
"""


@dataclass(frozen=True)
class Record:
    """One record as a foreign consumer read it: ``value`` and ``key`` are the UTF-8 text
    (None for null), ``headers`` the (name, value) pairs in order (value None for null)."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: str | None
    headers: tuple[tuple[str, str | None], ...]

    @property
    def tombstone(self) -> bool:
        """True for a record with a null value."""
        return self.value is None

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (the first one; None when absent or null)."""
        return next((v for k, v in self.headers if k == name), None)

    def json(self) -> Any:
        """The value parsed as JSON (Python ints are exact). Raises ValueError for a
        tombstone or a value that is not JSON."""
        if self.value is None:
            raise ValueError(f"{self.topic}/{self.partition}@{self.offset} is a tombstone")
        return json.loads(self.value)

    def line(self) -> str:
        """The JSON line validate.mjs reads (the value as its exact text)."""
        return json.dumps({"topic": self.topic, "partition": self.partition, "offset": self.offset,
                           "key": self.key, "value": self.value, "headers": [list(h) for h in self.headers]},
                          ensure_ascii=False)


def _log4j_config() -> Path:
    from tests.kafka_fixtures import _local_broker_module

    path = _local_broker_module().STATE / "contract-tools-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_LOG4J2)
    return path


def _java_tool(main: str, *args: str) -> list[str]:
    return [java_binary(), "-Xmx256m", "-XX:+UseSerialGC", "-Dfile.encoding=UTF-8", "-Dstdout.encoding=UTF-8",
            "-Dsun.stdout.encoding=UTF-8", f"-Dlog4j2.configurationFile={_log4j_config()}",
            "-cp", java_tools_classpath(), main, *args]


def _null(text: str) -> str | None:
    return None if text == NULL else text


def parse_console_line(topic: str, line: str) -> Record:
    """One line of :func:`console_consume`'s output -> a :class:`Record`. Raises ValueError
    for a line of another shape."""
    parts = line.split(FIELD_SEP, 4)
    if len(parts) != 5 or not parts[0].startswith("Partition:") or not parts[1].startswith("Offset:"):
        raise ValueError(f"not a console consumer record line: {line[:300]!r}")
    headers: list[tuple[str, str | None]] = []
    if parts[2] != "NO_HEADERS":
        for item in parts[2].split(HEADER_SEP):
            name, sep, value = item.partition(":")
            if not sep:
                raise ValueError(f"header without ':' in {parts[2]!r}")
            headers.append((name, _null(value)))
    return Record(topic, int(parts[0][len("Partition:"):]), int(parts[1][len("Offset:"):]), _null(parts[3]),
                  _null(parts[4]), tuple(headers))


def console_consume(bootstrap: str, topic: str, expected: int, *, timeout_s: float = 120.0,
                    idle_ms: int = 30_000) -> list[Record]:
    """Read ``expected`` records of ``topic`` from the beginning with Kafka's Java console
    consumer (its own consumer group; ``--max-messages expected``; it gives up after
    ``idle_ms`` ms without a record) and return them. Partition, offset, headers, key and value
    are printed with the separators above. Fails the test when the tool exits non-zero, prints
    a line of another shape, or returns another number of records than ``expected``."""
    if expected == 0:
        return []
    props = {"print.partition": "true", "print.offset": "true", "print.headers": "true", "print.key": "true",
             "print.value": "true", "print.timestamp": "false", "key.separator": FIELD_SEP,
             "headers.separator": HEADER_SEP, "line.separator": "\n", "null.literal": NULL}
    cmd = _java_tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap,
                     "--topic", topic, "--from-beginning", "--group", f"contract-{uuid.uuid4().hex}",
                     "--max-messages", str(expected), "--timeout-ms", str(idle_ms),
                     "--command-property", "auto.offset.reset=earliest",
                     "--command-property", "enable.auto.commit=false",
                     *[arg for k, v in props.items() for arg in ("--formatter-property", f"{k}={v}")])
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"Kafka's console consumer (Java) did not run on {topic}: {exc}", pytrace=False)
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        pytest.fail(f"Kafka's console consumer (Java) exited {proc.returncode} on {topic}:\n{stderr[-3000:]}",
                    pytrace=False)
    text = proc.stdout.decode("utf-8")
    records = [parse_console_line(topic, line) for line in text.split("\n") if line]
    if len(records) != expected:
        pytest.fail(f"Kafka's console consumer read {len(records)} of the {expected} records of {topic}:\n"
                    f"{stderr[-2000:]}", pytrace=False)
    return records


def console_produce(bootstrap: str, topic: str, records: Iterable[tuple[str, str | None, list[tuple[str, str]]]],
                    *, timeout_s: float = 120.0) -> None:
    """Send ``(key, value or None for a tombstone, headers)`` with Kafka's Java console producer
    (``parse.key``, ``parse.headers``, ``null.marker``; ``acks=all``). Every record needs at
    least one header (the tool's line format has no empty header list): ValueError otherwise.
    Fails the test when the tool exits non-zero."""
    lines = []
    for key, value, headers in records:
        if not headers:
            raise ValueError(f"record {key!r}: the console producer needs at least one header")
        head = HEADER_SEP.join(f"{k}:{v}" for k, v in headers)
        lines.append(FIELD_SEP.join([head, key, NULL if value is None else value]))
    cmd = _java_tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", bootstrap, "--topic", topic,
                     "--reader-property", "parse.key=true", "--reader-property", "parse.headers=true",
                     "--reader-property", f"key.separator={FIELD_SEP}",
                     "--reader-property", f"headers.delimiter={FIELD_SEP}",
                     "--reader-property", f"headers.separator={HEADER_SEP}",
                     "--reader-property", "headers.key.separator=:",
                     "--reader-property", f"null.marker={NULL}",
                     "--command-property", "acks=all")
    try:
        proc = subprocess.run(cmd, input=("\n".join(lines) + "\n").encode("utf-8"), capture_output=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"Kafka's console producer (Java) did not run on {topic}: {exc}", pytrace=False)
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr).decode("utf-8", "replace")[-3000:]
        pytest.fail(f"Kafka's console producer (Java) exited {proc.returncode} on {topic}:\n{out}", pytrace=False)


# -- Node.js ---------------------------------------------------------------------------------------

def node_binary() -> str:
    """``node`` on PATH; fails the test when there is none."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("`node` not found on PATH: the contract tests need Node.js >= 20 (ajv, @asyncapi/parser, "
                    "kafkajs)", pytrace=False)
    return node


def install_node_packages() -> None:
    """Run ``deploy/contract/setup.sh`` (``npm ci`` of deploy/contract and the example
    consumer into ``.state/contract``; quick when the lock files did not change). Fails the
    test with the script's output when it fails."""
    node_binary()
    ensure("contract")


@dataclass(frozen=True)
class NodeResult:
    """What a Node.js script returned: exit status, stdout, stderr."""

    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """stdout parsed as one JSON document; fails the test when it is not JSON."""
        try:
            return json.loads(self.stdout)
        except ValueError:
            pytest.fail(f"not JSON on stdout (exit {self.returncode}):\n{self.stdout[-2000:]}\n{self.stderr[-2000:]}",
                        pytrace=False)


def run_node(script: Path, *args: str, stdin: str | None = None, timeout_s: float = 300.0,
             env: dict[str, str] | None = None) -> NodeResult:
    """Run ``node script args...`` from the repository root; fails the test when node cannot
    run or the script outlives ``timeout_s`` seconds."""
    try:
        proc = subprocess.run([node_binary(), str(script), *args], input=stdin, capture_output=True, text=True,
                              timeout=timeout_s, cwd=REPO, env={**os.environ, **(env or {})}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"node {script.name} did not run: {exc}", pytrace=False)
    return NodeResult(proc.returncode, proc.stdout, proc.stderr)


def validate(records: Iterable[Record], tmp: Path, *, prefix: str, asyncapi: Path | None = None,
             schemas: Path | None = None) -> tuple[int, dict]:
    """Validate ``records`` with ``deploy/contract/validate.mjs`` (ajv, lossless JSON) through a
    JSON lines file under ``tmp``; return (exit status, its JSON report). Fails the test when
    the script cannot run (exit 2: arguments, AsyncAPI document or schema files unusable)."""
    lines = tmp / f"records-{uuid.uuid4().hex[:8]}.jsonl"
    lines.write_text("".join(r.line() + "\n" for r in records), encoding="utf-8")
    args = ["--prefix", prefix, "--max-failures", "100000"]
    if asyncapi is not None:
        args += ["--asyncapi", str(asyncapi)]
    if schemas is not None:
        args += ["--schemas", str(schemas)]
    result = run_node(CONTRACT / "validate.mjs", *args, str(lines))
    if result.returncode not in (0, 1):
        pytest.fail(f"validate.mjs exited {result.returncode}:\n{result.stderr[-3000:]}", pytrace=False)
    return result.returncode, result.json()
