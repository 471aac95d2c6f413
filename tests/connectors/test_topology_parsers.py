"""Topology parsers (ibnetdiscover, lldpctl JSON, hosts maps, topology.yaml), their merge, the
topology record, and the ``topology`` connector end to end against the real Kafka broker.

Test data under ``tests/data/topology/`` is modelled on real output: ``ibnetdiscover`` as
infiniband-diags prints it (tabs, ``%016`` node ids, unpadded port GUIDs, Mellanox
``MF0;<name>:<model>/U1`` switch descriptions, a SHARP aggregation node on port 41), lldpd's
``lldpctl -f json`` in its one-neighbour (dict) and several-neighbours (list) shapes and
``-f json0``, an ``/etc/hosts`` and a ``host,ip`` CSV."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from connectors.topology import TopologyConnector
from connectors.topology_parsers import (
    FABRIC_HOST,
    TopologyError,
    hosts_topology,
    merge_topology,
    normalize_guid,
    parse_hosts_map,
    parse_ibnetdiscover,
    parse_lldpctl_json,
    parse_node_name_map,
    parse_topology_yaml,
    read_ibnetdiscover,
    read_lldpctl_json,
    topology_from_observation,
    topology_observation,
)
from schemas.bundle import Link, TopologyHost, TopologySpec
from schemas.records import TIME_QUALITY_TRANSPORT, Observation
from schemas.topics import catalogue, create_topics
from transport.kafka_settings import KafkaSettings
from streams.cli import app
from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: F401
from tests.connectors.test_files_connector import consume, settings  # noqa: F401

DATA = Path(__file__).resolve().parents[1] / "data" / "topology"
IBNET = DATA / "ibnetdiscover-3switch.txt"
LLDP_DICT = DATA / "lldpctl-dict-node-a01.json"
LLDP_LIST = DATA / "lldpctl-list-node-a02.json"
LLDP_JSON0 = DATA / "lldpctl-json0-node-a03.json"
HOSTS = DATA / "hosts"
HOSTS_CSV = DATA / "hosts.csv"

LEAF1 = "0x7cfe900300a5a2a0"
LEAF2 = "0x7cfe900300a5b3c0"

runner = CliRunner()


def ibnet_text() -> str:
    return IBNET.read_text()


def error_of(fn, *args, **kwargs) -> TopologyError:
    with pytest.raises(TopologyError) as info:
        fn(*args, **kwargs)
    return info.value


# -- ibnetdiscover ------------------------------------------------------------------------------


def test_ibnetdiscover_three_switch_fabric():
    report = read_ibnetdiscover(ibnet_text())
    spec = report.spec
    assert report.lines == 110 and report.skipped == []
    assert [(ln.host, ln.hca, ln.host_port, ln.port_id) for ln in spec.links] == [
        ("node-a01", "mlx5_0", 1, "leaf-01/1"),
        ("node-a01", "mlx5_1", 1, "leaf-01/2"),
        ("node-a02", "mlx5_0", 1, "leaf-01/3"),
        ("node-a02", "mlx5_1", 1, "leaf-01/4"),
        ("node-a03", "mlx5_0", 1, "leaf-02/1"),
        ("node-a03", "mlx5_1", 1, "leaf-02/2"),
        ("node-a04", "mlx5_0", 1, "leaf-02/3"),
        ("node-a04", "mlx5_1", 1, "leaf-02/4"),
        # "node-a05 HCA-1": no kernel device name, the CA port GUID stands for the HCA
        ("node-a05", "0x506b4b0300c0ffe1", 1, "leaf-01/5"),
    ]
    first = spec.links[0]
    assert first == Link(host="node-a01", hca="mlx5_0", host_port=1, switch="leaf-01", switch_port="1",
                         hca_guid="0xb8599f0300f3d2a5", switch_guid=LEAF1)
    # ibnetdiscover prints "(c42a10300b1e2f1)": the GUID is padded to 16 digits
    a03 = spec.links[4]
    assert a03.hca_guid == "0x0c42a10300b1e2f1" and a03.switch_guid == LEAF2
    assert spec.uplinks == [("leaf-01/33", "spine-01/1"), ("leaf-01/34", "spine-01/2"),
                            ("leaf-02/33", "spine-01/3"), ("leaf-02/34", "spine-01/4")]
    assert spec.hosts == {} and spec.domains == {}
    # the SHARP aggregation node on leaf-01 port 41 is not a host
    assert report.notes == ["H-7cfe900300a5a2a8 is a SHARP aggregation node "
                            "('Mellanox Technologies Aggregation Node'): left out"]
    assert parse_ibnetdiscover(ibnet_text()) == spec


def test_ibnetdiscover_host_names_by_guid_or_description():
    names = {
        "0x506b4b0300c0ffe0": "node-a05 mlx5_4",  # node GUID, 0x form
        "7cfe900300a5c4e0": "MF0;spine-01a:MQM8700/U1",  # 16 hex digits: a GUID
        "node-a01 mlx5_1": "node-a01 mlx5_9",  # a full node description
    }
    spec = parse_ibnetdiscover(ibnet_text(), host_names=names)
    a05 = [ln for ln in spec.links if ln.host == "node-a05"]
    assert [(ln.hca, ln.hca_guid) for ln in a05] == [("mlx5_4", "0x506b4b0300c0ffe1")]
    assert ("node-a01", "mlx5_9", "leaf-01/2") in [(ln.host, ln.hca, ln.port_id) for ln in spec.links]
    assert spec.uplinks[0] == ("leaf-01/33", "spine-01a/1")
    # the same map read from an ibnetdiscover --node-name-map file
    node_map = parse_node_name_map('# name map\n0x506b4b0300c0ffe0 "node-a05 mlx5_4"\n'
                                   '0x7cfe900300a5c4e0   "spine-01a"  # core\n')
    assert node_map == {"0x506b4b0300c0ffe0": "node-a05 mlx5_4", "0x7cfe900300a5c4e0": "spine-01a"}
    spec2 = parse_ibnetdiscover(ibnet_text(), host_names=node_map)
    assert spec2.uplinks[-1] == ("leaf-02/34", "spine-01a/4")
    assert error_of(parse_node_name_map, "0x506b4b0300c0ffe0 node-a05\n").line == 1


def test_ibnetdiscover_unknown_lines_are_skipped_and_counted():
    lines = ibnet_text().splitlines()
    lines.insert(4, "ibwarn: [4127] mad_rpc_open_port: client_register for mgmt 1 failed")
    lines.insert(20, "some unrelated text")
    report = read_ibnetdiscover("\n".join(lines))
    assert report.skipped == [(5, "ibwarn: [4127] mad_rpc_open_port: client_register for mgmt 1 failed"),
                              (21, "some unrelated text")]
    assert report.spec == parse_ibnetdiscover(ibnet_text())


def test_ibnetdiscover_grouping_output_with_ext_ports():
    text = (
        "#\n# Topology file: generated on Mon Nov 30 00:55:02 2026\n#\n"
        "# Initiated from node b8599f0300f3d2a4 port b8599f0300f3d2a5\n"
        "\nChassis 1 (guid 0x7cfe900300a5f000)\n\n# Spine Nodes\n# Line Nodes\n\nNon-Chassis Nodes\n"
        "\nvendid=0x2c9\ndevid=0xd2f0\nsysimgguid=0x7cfe900300a5a2a0\t\t# Chassis 1 (leaf-01)\n"
        "switchguid=0x7cfe900300a5a2a0(7cfe900300a5a2a0)\t# \n"
        'Switch\t41 "S-7cfe900300a5a2a0"\t\t# "MF0;leaf-01:MQM8700/U1" base port 0 lid 3 lmc 0\n'
        '[7][ext 7]\t"H-b8599f0300f3d2a4"[1](b8599f0300f3d2a5) \t\t# "node-a01 mlx5_0" lid 12 4xNDR\n'
        '[33][ext 33]\t"S-7cfe900300a5c4e0"[1][ext 1]\t\t# "spine-01" lid 1 4xNDR\n'
    )
    spec = parse_ibnetdiscover(text)
    assert [(ln.host, ln.hca, ln.port_id, ln.hca_guid) for ln in spec.links] == [
        ("node-a01", "mlx5_0", "leaf-01/7", "0xb8599f0300f3d2a5")]
    assert spec.uplinks == [("leaf-01/33", "spine-01/1")]


def test_ibnetdiscover_generic_descriptions_are_named_by_id():
    text = (
        'vendid=0x2c9\ndevid=0xd2f0\nswitchguid=0x7cfe900300a5a2a0(7cfe900300a5a2a0)\n'
        'Switch\t41 "S-7cfe900300a5a2a0"\t\t# "Quantum Mellanox Technologies" base port 0 lid 3 lmc 0\n'
        '[1]\t"H-b8599f0300f3d2a4"[1](b8599f0300f3d2a5) \t\t# "MT4123 ConnectX6   Mellanox Technologies" lid 12 4xHDR\n'
        '[2]\t"S-7cfe900300a5b3c0"[2]\t\t# "leaf-09" lid 4 4xHDR\n'
        '[3]\t"S-7cfe900300a5c4e0"[2]\t\t# "leaf-09" lid 5 4xHDR\n'
    )
    report = read_ibnetdiscover(text)
    (link,) = report.spec.links
    assert (link.host, link.hca, link.switch, link.switch_port) == (
        "H-b8599f0300f3d2a4", "0xb8599f0300f3d2a5", "S-7cfe900300a5a2a0", "1")
    # two switches both described "leaf-09": ambiguous, both named by their ids
    assert report.spec.uplinks == [("S-7cfe900300a5a2a0/2", "S-7cfe900300a5b3c0/2"),
                                   ("S-7cfe900300a5a2a0/3", "S-7cfe900300a5c4e0/2")]
    assert report.notes == [
        "switch S-7cfe900300a5a2a0 ('Quantum Mellanox Technologies') has no name in its description: named by its id",
        "2 switches are described as 'leaf-09': named by their ids (S-7cfe900300a5b3c0, S-7cfe900300a5c4e0)",
        "CA H-b8599f0300f3d2a4 ('MT4123 ConnectX6   Mellanox Technologies') names no host: named by its id",
    ]


def test_ibnetdiscover_ca_blocks_alone_and_back_to_back_cables():
    ca_only = "\n".join(ibnet_text().split("\n\n")[4:])  # drop the comment and the 3 switch blocks
    assert "Switch" not in ca_only
    spec = parse_ibnetdiscover(ca_only)
    assert spec.links == parse_ibnetdiscover(ibnet_text()).links  # the CA port lines name the switch
    assert spec.uplinks == []
    # two hosts cabled back to back: no switch, no link
    report = read_ibnetdiscover(
        "vendid=0x02c9\ndevid=0x1017\nsysimgguid=0xa088c20300ab0000\ncaguid=0xa088c20300ab0000\n"
        'Ca\t1 "H-a088c20300ab0000"\t\t# "node-a01 mlx5_0"\n'
        '[1](a088c20300ab0001) \t"H-a088c20300bb0000"[1] (a088c20300bb0001) \t\t# lid 1 lmc 0 "node-a02 mlx5_0" lid 2 4xEDR\n')
    assert report.spec.links == []
    assert report.notes == ["cable H-a088c20300ab0000[1] - H-a088c20300bb0000[1] is not host-to-switch "
                            "or switch-to-switch: left out"]


@pytest.mark.parametrize("mutate, line, needle", [
    # the output stops after a block's header lines
    (lambda t: t[: t.index('Switch\t41 "S-7cfe900300a5c4e0"')], 23, "block that starts at line 20 has no Switch/Ca/Rt line"),
    # a truncated node line (no closing quote)
    (lambda t: t.replace('"MF0;leaf-02:MQM8700/U1" enhanced port 0 lid 4 lmc 0', '"MF0;leaf-02:MQM87'), 34,
     "malformed Switch line"),
    # a bad GUID on a port line
    (lambda t: t.replace('"H-b8599f0300f3d2b4"[1](b8599f0300f3d2b5)', '"H-b8599f0300f3d2zz"[1](b8599f0300f3d2b5)'), 12,
     "malformed port line of S-7cfe900300a5a2a0"),
    # a port line cut in the middle of its GUID
    (lambda t: t.replace('[3]\t"H-b8599f0300f3e1c0"[1](b8599f0300f3e1c1) \t\t# "node-a02 mlx5_0" lid 14 4xHDR',
                         '[3]\t"H-b8599f0300f3e1c0"[1](b8599f'), 13, "malformed port line"),
    # a port line cut in its comment
    (lambda t: t.replace('# "node-a02 mlx5_1" lid 15 4xHDR', '# "node-a02 mlx5'), 14, "malformed port line"),
    # a port the switch does not have
    (lambda t: t.replace('[5]\t"H-506b4b0300c0ffe0"', '[42]\t"H-506b4b0300c0ffe0"'), 15, "port 42 of S-7cfe900300a5a2a0, which has 41 ports"),
    # the CA says its port is cabled elsewhere than the switch says
    (lambda t: t.replace('[1](b8599f0300f3d2a5) \t"S-7cfe900300a5a2a0"[1]', '[1](b8599f0300f3d2a5) \t"S-7cfe900300a5a2a0"[9]'), 47,
     "is cabled to S-7cfe900300a5a2a0[9] here but to S-7cfe900300a5a2a0[1] at line 11"),
    # a header value that is not hexadecimal
    (lambda t: t.replace("caguid=0xb8599f0300f3d2a4", "caguid=0xnode-a01"), 45, "caguid= value '0xnode-a01' is not hexadecimal"),
    # a Switch line with a CA node id
    (lambda t: t.replace('Switch\t41 "S-7cfe900300a5a2a0"', 'Switch\t41 "H-7cfe900300a5a2a0"'), 10, "Switch line with a H- node id"),
])
def test_ibnetdiscover_malformed_blocks_name_the_line(mutate, line, needle):
    text = mutate(ibnet_text())
    assert text != ibnet_text()
    exc = error_of(parse_ibnetdiscover, text)
    assert isinstance(exc, ValueError)
    assert exc.line == line, str(exc)
    assert needle in exc.message
    assert str(exc).startswith(f"line {line}: ")


def test_ibnetdiscover_port_line_outside_a_block_and_ports_report():
    exc = error_of(parse_ibnetdiscover, '# header\n[1]\t"H-b8599f0300f3d2a4"[1](b8599f0300f3d2a5) # "node-a01 mlx5_0" lid 12 4xHDR\n')
    assert (exc.line, exc.message) == (2, "port line outside a Switch/Ca/Rt block")
    ports = ("SW     3 33 0x7cfe900300a5a2a0 4x 53.125 Gbps Active/  LinkUp - SW     1  1 "
             "0x7cfe900300a5c4e0 ( 'leaf-01' - 'spine-01' )\n")
    exc = error_of(parse_ibnetdiscover, ports)
    assert exc.line == 1 and "'ibnetdiscover -p'" in exc.message


def test_normalize_guid():
    assert normalize_guid("c42a10300b1e2f1") == "0x0c42a10300b1e2f1"
    assert normalize_guid("0x7CFE900300A5A2A0") == "0x7cfe900300a5a2a0"
    with pytest.raises(ValueError):
        normalize_guid("0x1234567890abcdef0")  # 17 digits


# -- lldpctl ------------------------------------------------------------------------------------


def test_lldpctl_json_one_neighbour_dict_shape():
    spec = parse_lldpctl_json(LLDP_DICT.read_text(), "node-a01")
    assert spec == TopologySpec(links=[Link(host="node-a01", hca="enp12s0np0", host_port=1, switch="leaf-02",
                                            switch_port="Ethernet12", netdev="enp12s0np0")])


def test_lldpctl_json_several_neighbours_list_shape():
    report = read_lldpctl_json(LLDP_LIST.read_text(), "node-a02")
    assert [(ln.hca, ln.netdev, ln.switch, ln.switch_port) for ln in report.spec.links] == [
        # port id subtype mac: the port description names the port
        ("enp12s0np0", "enp12s0np0", "leaf-02", "Ethernet16"),
        # no system name: the chassis id; subtype local without a description: the id
        ("enp13s0np0", "enp13s0np0", "1c:34:da:5e:1b:00", "Ethernet20"),
        # subtype ifname wins over the description
        ("eth0", "eth0", "mgmt-sw-01", "Ethernet7"),
    ]
    assert all(ln.host == "node-a02" and ln.host_port == 1 for ln in report.spec.links)
    assert report.notes == []


def test_lldpctl_json0():
    spec = parse_lldpctl_json(LLDP_JSON0.read_text(), "node-a03")
    assert [(ln.host, ln.hca, ln.port_id) for ln in spec.links] == [("node-a03", "enp12s0np0", "leaf-03/Ethernet0")]


def test_lldpctl_two_neighbours_on_one_interface_keep_the_bridge():
    doc = {"lldp": {"interface": [
        {"enp12s0np0": {"via": "LLDP", "chassis": {"node-a09": {"id": {"type": "mac", "value": "b8:59:9f:00:00:09"},
                                                             "capability": {"type": "Station", "enabled": True}}},
                        "port": {"id": {"type": "mac", "value": "b8:59:9f:00:00:09"}, "descr": "eth1"}}},
        {"enp12s0np0": {"via": "LLDP", "chassis": {"leaf-02": {"id": {"type": "mac", "value": "1c:34:da:5e:0a:00"},
                                                            "capability": [{"type": "Bridge", "enabled": True}]}},
                        "port": {"id": {"type": "ifname", "value": "Ethernet12"}}}},
    ]}}
    report = read_lldpctl_json(json.dumps(doc, indent=2), "node-a01")
    assert [ln.port_id for ln in report.spec.links] == ["leaf-02/Ethernet12"]
    assert report.notes == ["node-a01 enp12s0np0: neighbour node-a09/eth1 left out, leaf-02/Ethernet12 kept"]


def test_lldpctl_without_neighbours_and_concatenated_documents():
    assert parse_lldpctl_json('{\n  "lldp": {\n  }\n}\n', "node-a01") == TopologySpec()
    # lldpcli prints one document per command: both are read
    report = read_lldpctl_json(LLDP_DICT.read_text() + LLDP_LIST.read_text(), "node-a01")
    assert [ln.port_id for ln in report.spec.links] == [
        "leaf-02/Ethernet12", "1c:34:da:5e:1b:00/Ethernet20", "mgmt-sw-01/Ethernet7"]
    assert report.notes == ["node-a01 enp12s0np0: neighbour leaf-02/Ethernet16 left out, leaf-02/Ethernet12 kept"]


@pytest.mark.parametrize("text, line, needle", [
    ('{\n  "lldp": {\n    "interface": {\n      "eth0": {\n        "chassis": {\n', 6, "invalid JSON"),
    ("lldpctl: unable to connect to lldpd daemon\n", 1, "invalid JSON"),
    ('{"neighbors": []}', None, "no top-level 'lldp' object"),
    ("", None, "no JSON document"),
    ('{"lldp": {"interface": {"eth0": {"chassis": {"leaf-02": {"id": {"type": "mac", "value": "1c:34:da:5e:0a:00"}}},'
     ' "port": {"ttl": "120"}}}}}', None, "interface eth0: neighbour leaf-02 has no port id"),
])
def test_lldpctl_malformed(text, line, needle):
    exc = error_of(parse_lldpctl_json, text, "node-a01")
    assert exc.line == line and needle in exc.message, str(exc)


# -- hosts --------------------------------------------------------------------------------------


def test_hosts_file():
    assert parse_hosts_map(HOSTS.read_text()) == {
        "node-a01": ["10.0.0.11", "10.0.0.15", "10.0.0.111"],  # numeric order, 127.0.1.1 left out
        "node-a02": ["10.0.0.12"],
        "node-a02-ib0.cluster.internal": ["10.0.0.112"],  # only a dotted name on the line
        "node-a03": ["10.0.0.13"],
        "node-a04": ["10.0.0.14"],
    }


def test_hosts_csv():
    assert parse_hosts_map(HOSTS_CSV.read_text()) == {
        "node-a01": ["10.0.0.11", "10.0.0.111"], "node-a02": ["10.0.0.12"], "node-a09": ["10.0.0.19"]}
    # no header, IPv6 and a trailing comma
    assert parse_hosts_map("node-a01,10.0.0.11,\nnode-a01,fd00::0b\n") == {"node-a01": ["10.0.0.11", "fd00::b"]}
    assert hosts_topology({"node-a01": ["10.0.0.11"]}) == TopologySpec(hosts={"node-a01": TopologyHost(ips=["10.0.0.11"])})
    assert parse_hosts_map("# nothing\n\n") == {}


@pytest.mark.parametrize("text, line, needle", [
    ("10.0.0.11 node-a01\n10.0.0.300 node-a02\n", 2, "'10.0.0.300' is not an IP address"),
    ("10.0.0.11 node-a01\nnode-a02 10.0.0.12\n", 2, "'node-a02' is not an IP address"),
    ("host,ip\nnode-a01,10.0.0.11\nnode-a02,10.0.0.x\n", 3, "'10.0.0.x' is not an IP address"),
    ("host,ip\nnode-a01,10.0.0.11,rack-1\n", 2, "expected 2 columns host,ip, got 3"),
    ("10.0.0.11 node-a01\n10.0.0.11 node-a02\n", 2, "address 10.0.0.11 belongs to node-a01 (line 1) and to node-a02"),
    ("10.0.0.11\n", 1, "address 10.0.0.11 without a host name"),
])
def test_hosts_invalid(text, line, needle):
    exc = error_of(parse_hosts_map, text)
    assert exc.line == line and needle in exc.message, str(exc)


# -- topology.yaml, merge -----------------------------------------------------------------------

TOPOLOGY_YAML = """\
links:
  - host: node-a01
    hca: enp12s0np0
    host_port: 1
    switch: leaf-02
    switch_port: Ethernet12
    pci: "0000:0c:00.0"
domains:
  rack-1: [node-a02, node-a01]
hosts:
  node-a01: {ips: [10.0.0.15]}
uplinks:
  - [spine-01/1, leaf-01/33]
"""


def test_topology_yaml():
    spec = parse_topology_yaml(TOPOLOGY_YAML)
    assert spec.links[0].pci == "0000:0c:00.0" and spec.uplinks == [("spine-01/1", "leaf-01/33")]
    assert parse_topology_yaml("") == TopologySpec()
    exc = error_of(parse_topology_yaml, "links:\n  - host: node-a01\n    hca: [\n")
    assert exc.line == 4 and "invalid YAML" in exc.message
    exc = error_of(parse_topology_yaml, "links:\n  - host: node-a01\n    hca: mlx5_0\n")
    assert "links.0.switch: Field required" in exc.message
    assert "must be a mapping" in error_of(parse_topology_yaml, "- a\n").message


def test_merge_is_deterministic_and_fills_missing_fields():
    ib = parse_ibnetdiscover(ibnet_text())
    lldp = parse_lldpctl_json(LLDP_DICT.read_text(), "node-a01")
    hosts = hosts_topology(parse_hosts_map(HOSTS.read_text()))
    yml = parse_topology_yaml(TOPOLOGY_YAML)
    merged = merge_topology(ib, lldp, hosts, yml)
    again = merge_topology(yml, hosts, lldp, ib, ib)
    assert merged == again
    dump = yaml.safe_dump(merged.model_dump(mode="json"), sort_keys=False)
    assert dump == yaml.safe_dump(again.model_dump(mode="json"), sort_keys=False)
    assert merged.model_dump_json() == again.model_dump_json()

    assert len(merged.links) == 10  # 9 IB cables + the RoCE NIC (given twice)
    roce = [ln for ln in merged.links if ln.hca == "enp12s0np0"]
    assert roce == [Link(host="node-a01", hca="enp12s0np0", host_port=1, switch="leaf-02",
                         switch_port="Ethernet12", netdev="enp12s0np0", pci="0000:0c:00.0")]
    assert [(ln.host, ln.hca) for ln in merged.links][:3] == [
        ("node-a01", "enp12s0np0"), ("node-a01", "mlx5_0"), ("node-a01", "mlx5_1")]
    assert merged.hosts["node-a01"].ips == ["10.0.0.11", "10.0.0.15", "10.0.0.111"]
    assert list(merged.hosts) == sorted(merged.hosts)
    assert merged.domains == {"rack-1": ["node-a01", "node-a02"]}
    # the yaml's reversed pair is the same cable as ibnetdiscover's
    assert merged.uplinks == ib.uplinks


def test_merge_conflicts():
    ib = parse_ibnetdiscover(ibnet_text())
    moved = TopologySpec(links=[Link(host="node-a01", hca="mlx5_0", switch="leaf-02", switch_port="7")])
    exc = error_of(merge_topology, ib, moved)
    assert exc.message == "node-a01 mlx5_0 port 1 is cabled to leaf-01/1 in one source and to leaf-02/7 in another"
    other_guid = TopologySpec(links=[Link(host="node-a01", hca="mlx5_0", switch="leaf-01", switch_port="1",
                                          hca_guid="0x0000000000000001")])
    assert "hca_guid is 0xb8599f0300f3d2a5 in one source and 0x0000000000000001" in error_of(merge_topology, ib, other_guid).message
    a = TopologySpec(hosts={"node-a01": TopologyHost(ips=["10.0.0.11"])})
    b = TopologySpec(hosts={"node-a02": TopologyHost(ips=["10.0.0.11"])})
    assert error_of(merge_topology, a, b).message == "address 10.0.0.11 belongs to node-a01 and to node-a02"


# -- the record ---------------------------------------------------------------------------------


def test_topology_observation_round_trip():
    spec = merge_topology(parse_ibnetdiscover(ibnet_text()), hosts_topology(parse_hosts_map(HOSTS.read_text())))
    obs = topology_observation(spec, "c1", 1_795_000_000_123_456_789)
    assert (obs.kind, obs.host, obs.cluster, obs.source.connector, obs.source.instance) == (
        "topology", FABRIC_HOST, "c1", "topology", "c1")
    assert obs.host == "_fabric"
    assert obs.observed_at == 1_795_000_000_123_456_789
    assert obs.time_source == "transport" and obs.time_quality == TIME_QUALITY_TRANSPORT
    assert obs.observation_id.startswith("obs-")
    assert obs.attributes == {"topology": spec.model_dump(mode="json")}
    assert topology_from_observation(obs) == spec
    wire = json.loads(obs.model_dump_json())
    assert topology_from_observation(wire) == spec
    assert Observation.model_validate(wire).with_id().observation_id == obs.observation_id


def test_topology_from_malformed_records():
    obs = topology_observation(TopologySpec(), "c1", 1)
    bad_kind = obs.model_copy(update={"kind": "log_line"})
    assert "not a topology" in error_of(topology_from_observation, bad_kind).message
    no_attr = obs.model_copy(update={"attributes": {}})
    assert "no attributes.topology object" in error_of(topology_from_observation, no_attr).message
    bad_spec = obs.model_copy(update={"attributes": {"topology": {"links": [{"host": "node-a01"}]}}})
    assert "links.0.hca: Field required" in error_of(topology_from_observation, bad_spec).message
    assert "not an Observation" in error_of(topology_from_observation, {"kind": "topology"}).message


# -- the connector ------------------------------------------------------------------------------


def test_connector_reads_and_merges_every_source(tmp_path):
    yml = tmp_path / "topology.yaml"
    yml.write_text(TOPOLOGY_YAML)
    conn = TopologyConnector("c1", ibnetdiscover=[IBNET], lldp={"node-a01": LLDP_DICT, "node-a02": LLDP_LIST},
                             hosts=[HOSTS, HOSTS_CSV], topology_yaml=[yml], clock=lambda: 42)
    spec = conn.read()
    assert len(spec.links) == 13  # 9 IB + node-a01's NIC + node-a02's three
    assert spec.hosts["node-a09"].ips == ["10.0.0.19"]
    assert [Path(p).name for p, _ in conn.reports] == [
        "topology.yaml", IBNET.name, LLDP_DICT.name, LLDP_LIST.name, HOSTS.name, HOSTS_CSV.name]
    (obs,) = conn.observations()
    assert obs.observed_at == 42 and topology_from_observation(obs) == spec

    bad = tmp_path / "bad.txt"
    bad.write_text(ibnet_text().replace("caguid=0xb8599f0300f3d2a4", "caguid=0xnode-a01"))
    exc = error_of(TopologyConnector("c1", ibnetdiscover=[bad]).read)
    assert (exc.source, exc.line) == (str(bad), 45) and str(exc).startswith(f"{bad}:45: caguid=")
    exc = error_of(TopologyConnector("c1", hosts=[tmp_path / "missing"]).read)
    assert exc.source == str(tmp_path / "missing") and "cannot read" in exc.message


def test_cli_print(tmp_path):
    result = runner.invoke(app, ["connect", "topology", "--cluster", "c1", "--ibnetdiscover", str(IBNET),
                                 "--lldp", f"node-a01={LLDP_DICT}", "--hosts", str(HOSTS), "--print"])
    assert result.exit_code == 0, result.output
    printed = parse_topology_yaml(result.stdout)
    expected = merge_topology(parse_ibnetdiscover(ibnet_text()), parse_lldpctl_json(LLDP_DICT.read_text(), "node-a01"),
                              hosts_topology(parse_hosts_map(HOSTS.read_text())))
    assert printed == expected
    assert "SHARP aggregation node" in result.stderr
    assert "topology of c1: 10 links, 4 uplinks, 5 hosts, 0 domains" in result.stderr
    # the printed YAML is a topology.yaml: fed back, it prints the same bytes
    (tmp_path / "t.yaml").write_text(result.stdout)
    again = runner.invoke(app, ["connect", "topology", "--cluster", "c1", "--topology-yaml", str(tmp_path / "t.yaml"), "--print"])
    assert again.exit_code == 0 and again.stdout == result.stdout


def test_cli_node_name_map(tmp_path):
    names = tmp_path / "ib-node-name-map"
    names.write_text('# GUID "name"\n0x506b4b0300c0ffe0 "node-a05 mlx5_4"\n0x7cfe900300a5c4e0 "spine-01a"\n')
    result = runner.invoke(app, ["connect", "topology", "--cluster", "c1", "--ibnetdiscover", str(IBNET),
                                 "--node-name-map", str(names), "--print"])
    assert result.exit_code == 0, result.output
    spec = parse_topology_yaml(result.stdout)
    assert [(ln.hca, ln.port_id) for ln in spec.links if ln.host == "node-a05"] == [("mlx5_4", "leaf-01/5")]
    assert spec.uplinks[0] == ("leaf-01/33", "spine-01a/1")
    names.write_text("0x506b4b0300c0ffe0 node-a05\n")
    bad = runner.invoke(app, ["connect", "topology", "--cluster", "c1", "--ibnetdiscover", str(IBNET),
                              "--node-name-map", str(names), "--print"])
    assert bad.exit_code == 2 and f'{names}:1: expected <guid> "<name>"' in bad.stderr


@pytest.mark.parametrize("args, needle", [
    ([], "give at least one of --ibnetdiscover, --lldp, --hosts, --topology-yaml"),
    (["--lldp", "node-a01"], "--lldp 'node-a01': expected HOST=FILE"),
    (["--lldp", f"node-a01={IBNET}"], f"{IBNET}:1: invalid JSON"),
])
def test_cli_errors(args, needle):
    result = runner.invoke(app, ["connect", "topology", "--cluster", "c1", "--print", *args])
    assert result.exit_code == 2
    assert needle in result.stderr and "Traceback" not in result.output


# -- end to end against the real Kafka broker ---------------------------------------------------

def test_connect_topology_publishes_one_record_keyed_by_cluster(settings: KafkaSettings, kafka_config,  # noqa: F811
                                                                kafka_topic_factory):  # noqa: F811
    topic = kafka_topic_factory("topology", config={"cleanup.policy": "compact"})
    result = runner.invoke(app, ["connect", "topology", "--cluster", "c1", "--ibnetdiscover", str(IBNET),
                                 "--lldp", f"node-a02={LLDP_LIST}", "--hosts", str(HOSTS_CSV),
                                 "--bootstrap", settings.bootstrap_servers, "--topic", topic])
    assert result.exit_code == 0, result.output
    assert f"published the topology of c1 (12 links, 4 uplinks, 3 hosts, 0 domains) to {topic}" in result.stderr

    (msg,) = consume(kafka_config, topic, 1)
    assert msg.key() == b"c1"
    assert dict(msg.headers())["schema"] == b"Observation"
    value = json.loads(msg.value())
    obs = Observation.model_validate(value)
    assert (obs.kind, obs.host, obs.cluster, obs.source.connector, obs.source.instance, obs.format) == (
        "topology", "_fabric", "c1", "topology", "c1", "topology")
    assert obs.time_source == "transport" and obs.time_quality == TIME_QUALITY_TRANSPORT
    assert obs.model_copy().with_id().observation_id == obs.observation_id
    expected = TopologyConnector("c1", ibnetdiscover=[IBNET], lldp=[("node-a02", LLDP_LIST)], hosts=[HOSTS_CSV]).read()
    got = topology_from_observation(value)
    assert got == expected
    assert got.links[0] == expected.links[0] and got.uplinks == [("leaf-01/33", "spine-01/1"), ("leaf-01/34", "spine-01/2"),
                                                                 ("leaf-02/33", "spine-01/3"), ("leaf-02/34", "spine-01/4")]
    assert got.hosts["node-a01"].ips == ["10.0.0.11", "10.0.0.111"]


def test_connect_topology_default_topic_is_the_catalogues(settings: KafkaSettings, kafka_config,  # noqa: F811
                                                           kafka_topic_factory, tmp_path):  # noqa: F811
    prefix = kafka_topic_factory.prefix
    spec = catalogue(prefix)["topology"]
    kafka_topic_factory.track(spec.name)
    create_topics(kafka_config, [spec], partitions_override=1)
    yml = tmp_path / "topology.yaml"
    yml.write_text(TOPOLOGY_YAML)
    env = {"FAULTSTREAM_TOPIC_PREFIX": prefix}
    base = ["connect", "topology", "--cluster", "c7", "--bootstrap", settings.bootstrap_servers]
    first = runner.invoke(app, [*base, "--topology-yaml", str(yml)], env=env)
    assert first.exit_code == 0, first.output
    assert f"to {prefix}.topology" in first.stderr
    # a newer topology of the same cluster: same key, compaction keeps the latest
    second = runner.invoke(app, [*base, "--topology-yaml", str(yml), "--hosts", str(HOSTS)], env=env)
    assert second.exit_code == 0, second.output

    msgs = consume(kafka_config, spec.name, 2)
    assert [m.key() for m in msgs] == [b"c7", b"c7"]
    old, new = (topology_from_observation(json.loads(m.value())) for m in msgs)
    assert old == merge_topology(parse_topology_yaml(TOPOLOGY_YAML))  # canonical order: pairs sorted
    assert new == merge_topology(old, hosts_topology(parse_hosts_map(HOSTS.read_text())))
    assert new.hosts["node-a01"].ips == ["10.0.0.11", "10.0.0.15", "10.0.0.111"]


def test_connect_topology_is_registered_and_refuses_an_empty_record(tmp_path):
    from connectors.registry import BUILTIN, connectors

    assert BUILTIN["topology"] == "connectors.topology:connect_topology_cli" and "topology" in connectors()
    missing = runner.invoke(app, ["connect", "topology", "--cluster", "c1", "--lldp", f"node-a01={DATA / 'none.json'}"])
    assert missing.exit_code == 2 and f"{DATA / 'none.json'}: cannot read" in missing.stderr
    empty = tmp_path / "hosts"
    empty.write_text("# no hosts yet\n127.0.0.1 localhost\n")
    # fails before connecting to Kafka: an empty record would replace the cluster's topology
    result = runner.invoke(app, ["connect", "topology", "--cluster", "c1", "--hosts", str(empty),
                                 "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert "the sources give no cables and no host addresses; nothing published" in result.stderr
