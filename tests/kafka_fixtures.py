"""A real Apache Kafka broker for the tests (never a mock), and unique topics per test.

Import into ``tests/conftest.py``::

    from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: F401

Fixtures:

* ``kafka_bootstrap`` (session): ``"host:port"`` of a broker that answered a metadata request.
  In order of preference:

  1. ``KAFKA_BOOTSTRAP_SERVERS`` when set (security from the other ``KAFKA_*`` variables, see
     ``transport/kafka_settings.py``); it must answer within 30 s;
  2. testcontainers' ``KafkaContainer`` (KRaft) when a Docker engine answers a ping
     (image from ``FAULTSTREAM_TEST_KAFKA_IMAGE``, default ``confluentinc/cp-kafka:7.6.0``);
  3. the local broker of ``deploy/kafka/broker.py`` on a free port, with a fresh data dir that
     is deleted again when the session ends (about 5-7 s to start); ``deploy/kafka/setup.sh``
     first installs Java 17 and Maven where missing and resolves the jars
     (:func:`tests.setup_fixtures.ensure`).

  If none of them gives a broker, the fixture FAILS (it never skips) with the reason.
* ``kafka_config`` (session): the confluent_kafka configuration dict for that broker
  (``bootstrap.servers`` plus any security settings).
* ``kafka_topic_factory`` (function): ``make(suffix="t", partitions=1, config=None) -> name``
  creates a topic named ``t-<test name>-<8 hex>-<suffix>`` (unique per call), waits until it
  exists, and deletes every topic it made when the test ends. ``make.prefix`` is a unique
  prefix for this test (e.g. for ``FAULTSTREAM_TOPIC_PREFIX``); topics created under it with
  other tools are deleted too when registered through ``make.track(name)``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.setup_fixtures import ensure

REPO = Path(__file__).resolve().parents[1]
_BROKER_PY = REPO / "deploy" / "kafka" / "broker.py"


def _local_broker_module():
    """deploy/kafka/broker.py loaded by path (deploy/ is not a Python package)."""
    name = "faultstream_local_kafka_broker"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _BROKER_PY)
    assert spec and spec.loader, _BROKER_PY
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _docker_engine_reachable(timeout_s: float = 3.0) -> bool:
    """True when a Docker engine answers a ping within ``timeout_s`` seconds."""
    try:
        import docker  # the docker SDK, installed with testcontainers

        client = docker.from_env(timeout=timeout_s)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _answers(config: dict, timeout_s: float) -> str | None:
    """None when the broker answers a metadata request within ``timeout_s`` s, else the error."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(dict(config, log_level=0))
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
            if md.brokers:
                return None
            last = "metadata lists no broker"
        except Exception as exc:  # KafkaException
            last = str(exc)
        time.sleep(0.2)
    return last


class _Shared:
    """The session's broker, shared by every registration of the fixture (a module importing the
    fixtures as well as conftest.py must not start a second broker); refcounted."""

    bootstrap: str | None = None
    users = 0
    close: Callable[[], None] | None = None


def _open_broker() -> tuple[str, Callable[[], None]]:
    """Find or start a broker (see the module docstring); return (bootstrap, close). Fails the
    test (pytest.fail) when none can be had."""
    from transport.kafka_settings import KafkaSettings

    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if env:
        try:
            cfg = KafkaSettings().confluent_config()
        except Exception as exc:
            pytest.fail(f"invalid KAFKA_* settings: {exc}", pytrace=False)
        error = _answers(cfg, 30.0)
        if error is not None:
            pytest.fail(f"KAFKA_BOOTSTRAP_SERVERS={env} does not answer within 30 s: {error}", pytrace=False)
        return env, lambda: None

    if _docker_engine_reachable():
        from testcontainers.kafka import KafkaContainer

        image = os.environ.get("FAULTSTREAM_TEST_KAFKA_IMAGE", "confluentinc/cp-kafka:7.6.0")
        try:
            container = KafkaContainer(image).with_kraft().start()
        except Exception as exc:
            pytest.fail(f"a Docker engine answers but the Kafka container ({image}) did not start: {exc}", pytrace=False)
        bootstrap = container.get_bootstrap_server()
        error = _answers({"bootstrap.servers": bootstrap}, 60.0)
        if error is not None:
            container.stop()
            pytest.fail(f"the Kafka container at {bootstrap} does not answer: {error}", pytrace=False)
        return bootstrap, container.stop

    ensure("kafka")  # Java, Maven and the broker's jars (deploy/kafka/setup.sh)
    local = _local_broker_module()
    try:
        broker = local.start(None, fresh=True, ephemeral=True, timeout_s=90.0)
    except Exception as exc:  # BrokerError, or an unexpected OSError
        pytest.fail(
            "no Kafka broker for the tests: KAFKA_BOOTSTRAP_SERVERS is not set, no Docker engine "
            f"answers, and the local broker (deploy/kafka/broker.py) did not start:\n{exc}",
            pytrace=False,
        )
    return broker.bootstrap, broker.stop


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """``host:port`` of a real Kafka broker for this test session (see the module docstring)."""
    if _Shared.bootstrap is None:
        _Shared.bootstrap, _Shared.close = _open_broker()
    _Shared.users += 1
    try:
        yield _Shared.bootstrap
    finally:
        _Shared.users -= 1
        if _Shared.users == 0 and _Shared.close is not None:
            close, _Shared.close, _Shared.bootstrap = _Shared.close, None, None
            close()


@pytest.fixture(scope="session")
def kafka_config(kafka_bootstrap: str) -> dict[str, str]:
    """confluent_kafka configuration for the session's broker (copy it before changing it)."""
    from transport.kafka_settings import KafkaSettings

    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        return KafkaSettings().confluent_config()
    return KafkaSettings(bootstrap_servers=kafka_bootstrap, security_protocol="PLAINTEXT").confluent_config()


class TopicFactory:
    """Creates uniquely named topics for one test; :meth:`cleanup` deletes them."""

    def __init__(self, config: dict[str, str], test_name: str) -> None:
        from confluent_kafka.admin import AdminClient

        self._admin = AdminClient(dict(config))
        slug = re.sub(r"[^A-Za-z0-9]+", "-", test_name).strip("-")[:40] or "test"
        self.prefix = f"t-{slug}-{uuid.uuid4().hex[:8]}"
        self.created: list[str] = []

    def __call__(self, suffix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        """Create ``<prefix>-<suffix>`` with ``partitions`` partitions and topic ``config``;
        return its name once the broker lists it. Raises RuntimeError if creation fails."""
        from confluent_kafka.admin import NewTopic

        name = f"{self.prefix}-{suffix}"
        futures = self._admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))],
            operation_timeout=30,
        )
        try:
            futures[name].result(timeout=30)
        except Exception as exc:
            raise RuntimeError(f"could not create test topic {name}: {exc}") from exc
        self.created.append(name)
        self._wait_listed(name)
        return name

    def track(self, name: str) -> str:
        """Delete ``name`` too at the end of the test (a topic made by other code)."""
        self.created.append(name)
        return name

    def _wait_listed(self, name: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            md = self._admin.list_topics(topic=name, timeout=5)
            t = md.topics.get(name)
            if t is not None and t.error is None and t.partitions and all(
                p.leader >= 0 for p in t.partitions.values()
            ):
                return
            time.sleep(0.05)
        raise RuntimeError(f"topic {name} not ready after {timeout_s} s")

    def cleanup(self) -> None:
        """Delete every topic this factory created or tracked (missing ones are fine).
        Raises confluent_kafka.KafkaException on any other deletion error."""
        from confluent_kafka import KafkaError, KafkaException

        if not self.created:
            return
        futures = self._admin.delete_topics(sorted(set(self.created)), operation_timeout=30)
        for fut in futures.values():
            try:
                fut.result(timeout=30)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise  # a topic already gone is fine; anything else is a real failure


@pytest.fixture
def kafka_topic_factory(kafka_config: dict[str, str], request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """``make(suffix="t", partitions=1, config=None) -> topic name``, unique per test; see
    :class:`TopicFactory`. Topics are deleted when the test ends."""
    factory = TopicFactory(kafka_config, request.node.name)
    try:
        yield factory
    finally:
        factory.cleanup()
