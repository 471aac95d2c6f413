"""A real single-node Slurm 22.05 for the tests (never a mock).

Import into ``tests/conftest.py``::

    from tests.slurm_fixtures import slurm_cluster  # noqa: F401

``slurm_cluster`` (session): a :class:`SlurmCluster` (cluster name, node name) of a Slurm that
answers ``sinfo`` with its node idle and ``sacct`` (accounting through slurmdbd + MariaDB).
When Slurm is not answering yet, ``deploy/slurm/setup.sh`` starts it (installs the Debian
packages if missing, about 1-2 s when installed, 30-60 s with the install); the log goes to
``.state/slurm-setup.log``. If it cannot start, the fixture FAILS (never skips) with the tail
of that log. Slurm is left running after the session (``deploy/slurm/stop.sh`` stops it).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SETUP = REPO / "deploy" / "slurm" / "setup.sh"
SETUP_LOG = REPO / ".state" / "slurm-setup.log"
CLUSTER = "fs-test"


@dataclass(frozen=True)
class SlurmCluster:
    """The test cluster: ``name`` (``ClusterName``) and its single ``node``."""

    name: str
    node: str


def _answering() -> str | None:
    """The node name when slurmctld answers, the node is usable and slurmdbd answers sacct."""
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%n %T"], capture_output=True, text=True,
                             timeout=10)
        acct = subprocess.run(["sacct", "-n", "-X", "-S", "now-1minutes"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or acct.returncode != 0 or not out.stdout.strip():
        return None
    name, _, state = out.stdout.split("\n")[0].partition(" ")
    return name if state.strip() in ("idle", "mixed", "allocated") else None


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    node = _answering()
    if node is None:
        SETUP_LOG.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with SETUP_LOG.open("w") as log:
            try:
                rc = subprocess.run(["bash", str(SETUP)], stdout=log, stderr=subprocess.STDOUT,
                                    timeout=900).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout (900 s)"
        tail = "\n".join(SETUP_LOG.read_text(errors="replace").splitlines()[-40:])
        if rc != 0:
            pytest.fail(f"deploy/slurm/setup.sh failed ({rc}) after {time.monotonic() - t0:.0f} s; "
                        f"log tail ({SETUP_LOG}):\n{tail}", pytrace=False)
        node = _answering()
        if node is None:
            pytest.fail(f"Slurm started by deploy/slurm/setup.sh does not answer sinfo/sacct; "
                        f"log tail ({SETUP_LOG}):\n{tail}", pytrace=False)
    return SlurmCluster(name=CLUSTER, node=node)
