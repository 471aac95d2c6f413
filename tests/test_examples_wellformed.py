"""Every incident bundle under ``examples/incidents`` is well formed (BUNDLE.md v1).

* ``workload.yaml`` validates as :class:`schemas.bundle.WorkloadSpec`;
* ``expected.yaml`` validates as :class:`schemas.bundle.ExpectedSpec` and explains itself in ``notes``;
* ``topology.yaml``, when present, validates as :class:`schemas.bundle.TopologySpec`;
* every file under ``logs/`` and ``metrics/`` is non-empty;
* ``workloads/*.yaml`` (the other jobs of a cross-workload incident) validate too;
* every host directory under ``logs/`` and ``metrics/`` is a node of one of the bundle's
  workloads (``logs/_scheduler`` is the scheduler's), every directory under ``fabric/`` is a
  switch or host of the topology, and every expected culprit host is a node (or, for a
  switch-level incident, a switch of the topology).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from schemas.bundle import ExpectedSpec, TopologySpec, WorkloadSpec

INCIDENTS = Path(__file__).resolve().parents[1] / "examples" / "incidents"
BUNDLES = sorted(
    p for p in INCIDENTS.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
) if INCIDENTS.is_dir() else []


def _load(path: Path) -> object:
    with path.open() as fh:
        return yaml.safe_load(fh)


def test_there_are_bundles() -> None:
    assert len(BUNDLES) >= 10, f"expected at least 10 bundles in {INCIDENTS}, found {len(BUNDLES)}"


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_bundle_wellformed(bundle: Path) -> None:
    workload_file = bundle / "workload.yaml"
    assert workload_file.is_file(), f"{bundle.name}: no workload.yaml"
    workload = WorkloadSpec.model_validate(_load(workload_file))
    extra = [WorkloadSpec.model_validate(_load(p)) for p in sorted((bundle / "workloads").glob("*.yaml"))]
    nodes = {n for w in [workload, *extra] for n in w.nodes}
    topology = TopologySpec.model_validate(_load(bundle / "topology.yaml")) if (bundle / "topology.yaml").is_file() else None
    fabric_nodes = {x for link in topology.links for x in (link.host, link.switch)} if topology else set()
    fabric_nodes |= {end.split("/")[0] for pair in (topology.uplinks if topology else []) for end in pair}

    expected_file = bundle / "expected.yaml"
    assert expected_file.is_file(), f"{bundle.name}: no expected.yaml"
    expected = ExpectedSpec.model_validate(_load(expected_file))
    assert expected.notes.strip(), f"{bundle.name}: expected.yaml has no notes"
    for host in expected.culprit_hosts or []:
        assert host in nodes or (expected.incident and expected.incident.level == "switch" and host in fabric_nodes), \
            f"{bundle.name}: culprit host {host} is not in nodes"
    ranks = workload.rank_map()
    for rank in expected.culprit_ranks or []:
        assert not ranks or rank in ranks, f"{bundle.name}: culprit rank {rank} is not in the rank map"

    for w in [workload, *extra]:
        for host in w.hosts:
            assert host in w.nodes, f"{bundle.name}: {w.workload_id} hosts.{host} is not in nodes"

    logs = bundle / "logs"
    assert logs.is_dir(), f"{bundle.name}: no logs/"
    files = [p for p in logs.rglob("*") if p.is_file()]
    assert files, f"{bundle.name}: logs/ is empty"
    if (bundle / "fabric").is_dir():
        for node_dir in (bundle / "fabric").iterdir():
            assert node_dir.name in fabric_nodes, f"{bundle.name}: fabric/{node_dir.name} is not in the topology"
    for top in ("logs", "metrics"):
        root = bundle / top
        if not root.is_dir():
            continue
        for host_dir in root.iterdir():
            assert host_dir.is_dir(), f"{bundle.name}: {top}/{host_dir.name} is not a host directory"
            # _scheduler (BUNDLE.md) and _aggregated (docs/inputs.md: logs of many nodes in one file)
            allowed = host_dir.name in nodes or (top == "logs" and host_dir.name in ("_scheduler", "_aggregated"))
            assert allowed, f"{bundle.name}: {top}/{host_dir.name} is not one of the workloads' nodes"
        for path in root.rglob("*"):
            if path.is_file():
                assert path.stat().st_size > 0, f"{bundle.name}: {path.relative_to(bundle)} is empty"
                assert path.read_bytes().strip(), f"{bundle.name}: {path.relative_to(bundle)} is blank"


def test_workload_ids_are_unique_across_bundles() -> None:
    """Workload windows are keyed by workload id: two bundles published into one stream (as
    the stream tests do, each as its own cluster) must not share one."""
    owners: dict[str, list[str]] = {}
    for bundle in BUNDLES:
        for spec in [bundle / "workload.yaml", *sorted((bundle / "workloads").glob("*.yaml"))]:
            if spec.is_file():
                wid = yaml.safe_load(spec.read_text())["workload_id"]
                owners.setdefault(str(wid), []).append(bundle.name)
    shared = {wid: names for wid, names in owners.items() if len(names) > 1}
    assert not shared, f"workload ids used by more than one bundle: {shared}"
