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
:data:`CLICKHOUSE_MODULES`); ``prometheus``, ``browser`` and ``slow`` (a second or more on 2 cores)
are on the tests themselves. Every test with none of :data:`SERVICE_MARKERS` and not ``slow``
is marked ``unit``: ``python3 -m pytest -m unit`` is the inner loop (no service, no set-up
script, under two minutes on 2 cores).

Set-up (``tests/setup_fixtures.py``): the fixtures of the services run the project's
idempotent set-up scripts once per run, with progress on the terminal; the daemons a run
started are stopped when it ends (:func:`pytest_sessionfinish`).
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
from tests import setup_fixtures  # noqa: E402
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


#: markers of the tests that need a real service (a server, a daemon, a browser, built tools):
#: a test with none of them and not ``slow`` is a ``unit`` test
SERVICE_MARKERS = ("kafka", "slurm", "k8s", "browser", "prometheus")


def pytest_configure(config: pytest.Config) -> None:
    """Set-up progress goes to this run's terminal. A checkout without the real fixtures beside
    it (``../shared/fixtures/real``; the example bundles are built from them) ends the run
    before collection with one message naming the folder."""
    if not (REAL_FIXTURES / "h200-2026-11").is_dir():
        raise pytest.UsageError(f"the real fixtures are missing: {REAL_FIXTURES} (clone faultstream next to "
                                "the shared/ folder that holds fixtures/real)")
    setup_fixtures.configure(config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the daemons this run started that outlive their fixtures (the single-node Slurm)."""
    setup_fixtures.stop_started_daemons()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with the real services it needs, and ``unit`` when it needs none and is
    not ``slow`` (see the module docstring)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marker in _SERVICE_FIXTURES.items():
            if fixture in names:
                item.add_marker(marker)
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in CLICKHOUSE_MODULES:
            item.add_marker("clickhouse")
        if not any(item.get_closest_marker(m) for m in (*SERVICE_MARKERS, "slow")):
            item.add_marker("unit")
