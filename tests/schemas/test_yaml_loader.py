"""schemas.yamlspec.load_yaml: the one YAML reader of specs, and every spec path on it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from connectors.bundle import BundleConnector
from connectors.topology import TopologyConnector, connect_topology_cli
from connectors.topology_parsers import parse_topology_yaml
from schemas.yamlspec import load_yaml

TOPOLOGY = """\
links:
  - {host: node-a01, hca: mlx5_0, switch: leaf-01, switch_port: 1:17}
  - {host: node-a02, hca: mlx5_0, switch: leaf-01, switch_port: Eth1/2}
  - {host: node-a03, hca: mlx5_0, switch: leaf-01, switch_port: 18}
hosts:
  node-a01: {ips: [10.0.0.11]}
"""

WORKLOAD = """\
workload_id: job-1
scheduler: slurm
cluster: c1
state: FAILED
exit_code: 1:0
start: 2026-11-30T01:00:00Z
end: 2026-11-30T01:10:00Z
nodes: [node-a01, node-a02, node-a03]
ranks_per_node: 1
"""


def test_base60_scalars_stay_text():
    data = load_yaml("a: 1:17\nb: 1:30.5\nc: 190:20:30\nd: 17\ne: 0x1f\nf: 1.5\ng: true\nh: ~\n")
    assert data == {"a": "1:17", "b": "1:30.5", "c": "190:20:30", "d": 17, "e": 31, "f": 1.5, "g": True, "h": None}
    # what PyYAML's YAML 1.1 default does with the same text
    assert yaml.safe_load("a: 1:17\nc: 190:20:30\n") == {"a": 77, "c": 685230}


def test_timestamps_stay_text_and_sources_agree(tmp_path):
    text = "start: 2026-11-30T01:00:00Z\nday: 2026-11-30\n"
    want = {"start": "2026-11-30T01:00:00Z", "day": "2026-11-30"}
    path = tmp_path / "w.yaml"
    path.write_text(text)
    assert load_yaml(text) == load_yaml(text.encode()) == load_yaml(path) == want
    assert load_yaml("") is None


def test_invalid_yaml_names_the_place():
    with pytest.raises(yaml.MarkedYAMLError) as info:
        load_yaml("links:\n  - {host: node-a01\n")
    assert info.value.problem_mark.line >= 1


def _bundle(tmp_path: Path) -> Path:
    root = tmp_path / "incident"
    (root / "logs" / "node-a01").mkdir(parents=True)
    (root / "logs" / "node-a01" / "dmesg.log").write_text("[Mon Nov 30 01:00:01 2026] hello\n")
    (root / "workload.yaml").write_text(WORKLOAD)
    (root / "topology.yaml").write_text(TOPOLOGY)
    return root


def test_one_topology_yaml_gives_one_port_through_every_reader(tmp_path):
    """The bundle reader (replay), the topology connector (``faultstream connect topology``)
    and its CLI read the same ``topology.yaml`` as the same ports: ``1:17`` stays ``"1:17"``."""
    root = _bundle(tmp_path)
    want = ["1:17", "Eth1/2", "18"]

    bundle = BundleConnector(root)
    assert [link.switch_port for link in bundle.topology.links] == want
    assert bundle.workload.exit_code == "1:0"

    assert [link.switch_port for link in parse_topology_yaml(TOPOLOGY).links] == want
    spec = TopologyConnector("c1", topology_yaml=[root / "topology.yaml"], clock=lambda: 0).read()
    assert [link.switch_port for link in spec.links] == want
    assert bundle.topology.model_dump() == spec.model_dump()

    import typer

    app = typer.Typer()
    app.command()(connect_topology_cli)
    result = CliRunner().invoke(app, ["--cluster", "c1", "--topology-yaml", str(root / "topology.yaml"), "--print"])
    assert result.exit_code == 0, result.output
    printed = load_yaml(result.stdout)
    assert [link["switch_port"] for link in printed["links"]] == want


@pytest.mark.parametrize("encode", [lambda t: t, str.encode, lambda t: t.encode("utf-16")],
                         ids=["str", "utf-8", "utf-16"])
def test_an_alias_is_refused_and_a_star_in_text_is_not_one(encode):
    with pytest.raises(yaml.MarkedYAMLError, match="alias \\*x is not allowed"):
        load_yaml(encode("a: &x [1, 2]\nb: *x\n"))
    assert load_yaml(encode("a: 'x*y'\nb: 2\n")) == {"a": "x*y", "b": 2}
    assert load_yaml(encode("a: &x [1, 2]\n")) == {"a": [1, 2]}  # an anchor alone expands nothing
