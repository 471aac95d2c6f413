"""Shared fixtures.

``real_fixtures``: the directory of real inputs (``shared/fixtures/real`` beside the repo
checkout). Tests that need it fail -- never skip -- when it is missing.
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
