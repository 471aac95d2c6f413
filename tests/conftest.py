"""Shared fixtures, and the markers of the tests that need a real service.

``real_fixtures``: the directory of real inputs (``shared/fixtures/real`` beside the repo
checkout). Tests that need it fail -- never skip -- when it is missing.

Markers (``pyproject.toml``), set here from what a test uses: ``kafka`` (the broker fixtures),
``slurm`` (the single-node Slurm), ``clickhouse`` (the embedded chDB engine, by module:
:data:`CLICKHOUSE_MODULES`); ``k8s`` (a Kubernetes cluster from ``KUBECONFIG``) is on the tests
themselves. The fast inner
loop is ``pytest -m "not kafka and not slurm"``.
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


#: test modules that open the embedded ClickHouse engine (chDB)
CLICKHOUSE_MODULES = {"test_cli", "test_clickhouse_sink", "test_logs", "test_remediation_sink",
                      "test_remediation_stream", "test_replay_sources", "test_stream", "test_poison", "test_fuzz"}
_SERVICE_FIXTURES = {"kafka_bootstrap": "kafka", "kafka_config": "kafka", "kafka_topic_factory": "kafka",
                     "slurm_cluster": "slurm"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with the real services it needs (see the module docstring)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marker in _SERVICE_FIXTURES.items():
            if fixture in names:
                item.add_marker(marker)
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in CLICKHOUSE_MODULES:
            item.add_marker("clickhouse")
