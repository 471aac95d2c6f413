"""Shared fixtures, and the markers of the tests that need a real service.

Layout: ``tests/`` mirrors the source tree; a test module sits beside the package it mainly
exercises, one directory (a package, with ``__init__.py``) per source package:

* ``tests/correlators/``: the pure engine with its ``rules/`` and ``remediation/`` subpackages
* ``tests/connectors/``: the inputs: bundle, files, counters, topology, Slurm, certifications,
  Kubernetes, Prometheus, Loki, NVSentinel, NVML
* ``tests/schemas/``: the record contract, the JSON Schema and AsyncAPI files, the YAML reader
* ``tests/sinks/``: the ClickHouse sink and the remediation executors (``sinks/executors``)
* ``tests/streams/``: the worker, the CLI, replay sources, rendering, logging, poison records
* ``tests/transport/``: the Kafka broker, topic creation and Kafka settings (``transport/kafka*``)
* ``tests/``: only project-wide checks (``test_architecture.py``: the import graph of all
  packages; ``test_examples_wellformed.py``: every bundle under ``examples/``), and what all
  share: this file, ``kafka_fixtures.py``, ``slurm_fixtures.py``, ``data/``.

``real_fixtures``: the directory of real inputs (``shared/fixtures/real`` beside the repo
checkout). Tests that need it fail -- never skip -- when it is missing.

Markers (``pyproject.toml``), set here from what a test uses: ``kafka`` (the broker fixtures),
``slurm`` (the single-node Slurm), ``k8s`` (the loopback Kubernetes control plane of
``tests/k8s_fixtures.py``), ``clickhouse`` (the embedded chDB engine, by module:
:data:`CLICKHOUSE_MODULES`); ``prometheus`` and ``browser`` are on the tests themselves. The
fast inner loop is
``pytest -m "not kafka and not slurm and not k8s and not browser and not prometheus"``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REAL_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"


@pytest.fixture(scope="session")
def real_fixtures() -> Path:
    """Path to ``shared/fixtures/real`` (read-only real logs; never edit them)."""
    if not (REAL_FIXTURES / "h200-2026-11").is_dir():
        pytest.fail(
            f"real fixtures not found at {REAL_FIXTURES}: the tests need the shared/ directory "
            "(shared/fixtures/real) next to the repository checkout",
            pytrace=False,
        )
    return REAL_FIXTURES


# Real services: a Kafka broker and a single-node Slurm, started by the fixtures when needed.
from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: E402,F401
from tests.slurm_fixtures import slurm_cluster  # noqa: E402,F401
from tests.k8s_fixtures import k8s_cluster  # noqa: E402,F401


#: test modules that open the embedded ClickHouse engine (chDB), by file name without ``.py``:
#: the last part of the dotted module name (``tests.streams.test_stream`` -> ``test_stream``)
CLICKHOUSE_MODULES = {"test_cli", "test_clickhouse_sink", "test_logs", "test_remediation_sink",
                      "test_remediation_stream", "test_replay_sources", "test_stream", "test_poison", "test_fuzz",
                      "test_ui", "test_report", "test_grafana_panels"}
_SERVICE_FIXTURES = {"kafka_bootstrap": "kafka", "kafka_config": "kafka", "kafka_topic_factory": "kafka",
                     "slurm_cluster": "slurm", "k8s_cluster": "k8s"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with the real services it needs (see the module docstring)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marker in _SERVICE_FIXTURES.items():
            if fixture in names:
                item.add_marker(marker)
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in CLICKHOUSE_MODULES:
            item.add_marker("clickhouse")
