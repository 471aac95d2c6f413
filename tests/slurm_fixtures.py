"""A real single-node Slurm 22.05 for the tests (never a mock).

Import into ``tests/conftest.py``::

    from tests.slurm_fixtures import slurm_cluster  # noqa: F401

``slurm_cluster`` (session): a :class:`SlurmCluster` (cluster name, node name) of a Slurm that
answers ``sinfo`` with its node idle and ``sacct`` (accounting through slurmdbd + MariaDB).
When Slurm is not answering yet, ``deploy/slurm/setup.sh`` starts it through
:func:`tests.setup_fixtures.start_slurm` (installs the Debian packages if missing, about 1-2 s
when installed, 30-60 s with the install; progress on the terminal, log in
``.state/setup/slurm.log``) and the run stops it again when it ends (``deploy/slurm/stop.sh``);
a Slurm that was already answering is used and left running. If it cannot start, the fixture
FAILS (never skips) with the tail of that log.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

import pytest

from tests.setup_fixtures import start_slurm

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
        start_slurm()
        node = _answering()
        if node is None:
            pytest.fail("Slurm started by deploy/slurm/setup.sh does not answer sinfo/sacct; "
                        "its log: .state/setup/slurm.log, the daemons': /var/log/slurm", pytrace=False)
    return SlurmCluster(name=CLUSTER, node=node)
