"""FabricIndex (correlators/topology.py): which cable an event is about, which host an address
is, the failure domains of a host, and the port keys the fabric correlator groups events by.

The topology is a small two-leaf fabric modelled on the bundles' ``topology.yaml``: four hosts
on leaf-01 (one mlx5 HCA each, netdev ``ibp12s0``, PCI ``0000:0c:00.0`` -- the same names on
every host, as on a real homogeneous cluster), and node-a05 with two HCAs, one to each leaf
(``mlx5_0`` -> leaf-02/1, ``mlx5_1`` -> leaf-01/Eth1/12)."""

from __future__ import annotations

import pytest

from correlators.topology import FabricIndex, host_port_id, parse_address
from schemas.bundle import Link, TopologyHost, TopologySpec
from schemas.records import Event

T0 = 1_796_000_000 * 10**9


def link(host, switch, port, hca="mlx5_0", **extra) -> Link:
    return Link(host=host, hca=hca, host_port=1, switch=switch, switch_port=port, **extra)


def spec() -> TopologySpec:
    links = [
        link(f"node-a0{i}", "leaf-01", str(i), netdev="ibp12s0", pci="0000:0c:00.0") for i in range(1, 5)
    ]
    links += [
        link("node-a05", "leaf-02", "1", hca="mlx5_0", netdev="ibp12s0", pci="0000:0c:00.0"),
        link("node-a05", "leaf-01", "Eth1/12", hca="mlx5_1", netdev="ibp13s0", pci="0000:0d:00.0",
             hca_guid="0x0c42a10300aa0001"),
    ]
    return TopologySpec(
        links=links,
        hosts={f"node-a0{i}": TopologyHost(ips=[f"10.0.0.{10 + i}"]) for i in range(1, 6)}
        | {"node-a06": TopologyHost(ips=["fe80::6"])},
        domains={"rack-1": ["node-a01", "node-a02", "node-a03", "node-a04"], "rack-2": ["node-a05"]},
        uplinks=[("leaf-01/33", "spine-01/1"), ("leaf-02/33", "spine-01/2")],
    )


@pytest.fixture(scope="module")
def index() -> FabricIndex:
    return FabricIndex(spec())


def ev(host, type_="fabric.link_down", fabric_port=None, **attrs) -> Event:
    return Event(type=type_, at=T0, host=host, fabric_port=fabric_port, attributes=attrs, rule="test@1").with_id()


def port_of(index, event):
    found = index.link_of(event)
    return None if found is None else found.port_id


# --- link_of --------------------------------------------------------------------------------


def test_switch_side_line_finds_the_cable_by_switch_port(index):
    assert index.link_of(ev("leaf-01", port=3)).host == "node-a03"
    assert index.link_of(ev("leaf-01", port="3")).host == "node-a03"
    assert index.link_of(ev("leaf-01", port="Eth1/12")).host == "node-a05"
    assert index.link_of(ev("leaf-02", port=1)).hca == "mlx5_0"
    # a switch port no host is cabled to (an uplink), or no port named: no host cable
    assert index.link_of(ev("leaf-01", port=33)) is None
    assert index.link_of(ev("leaf-01")) is None


def test_host_side_line_finds_the_cable_by_pci_netdev_or_hca(index):
    # the same PCI function / netdev exists on every host: the event's host decides
    assert port_of(index, ev("node-a03", device="0000:0c:00.0", netdev="ibp12s0")) == "leaf-01/3"
    assert port_of(index, ev("node-a02", device="0000:0c:00.0")) == "leaf-01/2"
    assert port_of(index, ev("node-a05", device="0000:0d:00.0")) == "leaf-01/Eth1/12"
    assert port_of(index, ev("node-a05", device="0000:0C:00.0")) == "leaf-02/1"  # case-insensitive
    assert port_of(index, ev("node-a05", netdev="ibp13s0")) == "leaf-01/Eth1/12"
    assert port_of(index, ev("node-a05", type_="nccl.ib_async_event", device="mlx5_1", port=1)) == "leaf-01/Eth1/12"
    assert port_of(index, ev("node-a05", hca="MLX5_0")) == "leaf-02/1"
    assert port_of(index, ev("node-a05", device="0x0c42a10300aa0001")) == "leaf-01/Eth1/12"  # port GUID
    # a counter sample names the host port as device/port
    assert port_of(index, ev("node-a05", type_="fabric.port_errors", device="mlx5_1/1")) == "leaf-01/Eth1/12"


def test_a_dual_port_hca_line_naming_its_port_finds_that_ports_cable():
    idx = FabricIndex(TopologySpec(links=[
        Link(host="node-a07", hca="mlx4_0", host_port=1, switch="leaf-02", switch_port="2"),
        Link(host="node-a07", hca="mlx4_0", host_port=2, switch="leaf-02", switch_port="3"),
    ]))
    # NCCL's "NET/IB : mlx4_0:2 Got async event : port error"
    assert port_of(idx, ev("node-a07", type_="nccl.ib_async_event", device="mlx4_0", port=2)) == "leaf-02/3"
    assert port_of(idx, ev("node-a07", type_="nccl.ib_async_event", device="mlx4_0", port=1)) == "leaf-02/2"
    assert port_of(idx, ev("node-a07", fabric_port="node-a07/mlx4_0/2")) == "leaf-02/3"
    # without the port the HCA alone is ambiguous between its cables: its first is taken
    assert port_of(idx, ev("node-a07", device="mlx4_0")) == "leaf-02/2"


def test_fabric_port_in_switch_or_host_form(index):
    assert port_of(index, ev("node-a05", fabric_port="node-a05/mlx5_0/1")) == "leaf-02/1"
    assert port_of(index, ev("node-a05", fabric_port="node-a05/mlx5_1/1")) == "leaf-01/Eth1/12"
    assert port_of(index, ev("ufm", type_="fabric.port_errors", fabric_port="leaf-01/4")) == "leaf-01/4"
    # fabric_port wins over the line's own device naming
    assert port_of(index, ev("node-a05", fabric_port="leaf-02/1", device="0000:0d:00.0")) == "leaf-02/1"
    assert host_port_id(index.by_port["leaf-01/Eth1/12"]) == "node-a05/mlx5_1/1"


def test_single_link_host_falls_back_to_its_only_cable(index):
    # "NET/IB : Got async event : port error" (older NCCL) names no device
    assert port_of(index, ev("node-a04", type_="nccl.ib_async_event", event="port error")) == "leaf-01/4"
    # an unknown device name on a one-cable host still is that cable
    assert port_of(index, ev("node-a04", device="0000:99:00.0")) == "leaf-01/4"


def test_two_cables_and_no_device_is_ambiguous(index):
    assert index.link_of(ev("node-a05", type_="nccl.ib_async_event", event="port error")) is None
    assert index.link_of(ev("node-a05", device="mlx5_7")) is None
    assert index.port_key(ev("node-a05", type_="nccl.ib_async_event", event="port error")) is None
    # a host the topology does not know
    assert index.link_of(ev("node-z99", device="0000:0c:00.0")) is None


def test_port_key_is_the_switch_end_when_the_topology_knows_the_cable(index):
    assert index.port_key(ev("node-a03", device="0000:0c:00.0")) == "leaf-01/3"
    assert index.port_key(ev("leaf-01", port=3)) == "leaf-01/3"
    assert index.port_key(ev("x", fabric_port="node-a03/mlx5_0/1")) == "leaf-01/3"
    # an unknown cable falls back to what the line names
    assert index.port_key(ev("node-z99", device="0000:0c:00.0")) == "node-z99/0000:0c:00.0/1"
    # a known switch's own line about a port no host is cabled to (an uplink) is that port
    assert index.port_key(ev("leaf-01", type_="fabric.port_state", port=33, state="DOWN")) == "leaf-01/33"
    assert index.port_key(ev("spine-01", type_="fabric.port_state", port=1, state="DOWN")) == "spine-01/1"


# --- addresses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, host",
    [
        ("10.0.0.15<38560>", "node-a05"),  # NCCL ip<port>
        ("10.0.0.15:38560", "node-a05"),  # sockets layer
        ("::ffff:10.0.0.15", "node-a05"),  # IPv4-mapped RoCE v2 GID
        ("10.0.0.15", "node-a05"),
        (" 10.0.0.13<1> ", "node-a03"),
        ("[fe80::6]:5000", "node-a06"),
        ("fe80::6", "node-a06"),
        ("10.0.0.99<38560>", None),  # unknown address
        ("10.0.0.x", None),  # placeholder
        ("node-a05", None),  # a host name is not an address
        ("", None),
        (None, None),
    ],
)
def test_host_of_address(index, text, host):
    assert index.host_of_address(text) == host


def test_parse_address_normalises():
    assert parse_address("10.0.0.15<38560>") == "10.0.0.15"
    assert parse_address("::ffff:10.0.0.15") == "10.0.0.15"
    assert parse_address("[FE80::1]:5000") == "fe80::1"
    assert parse_address("fe80::ba3f:d2ff:fe11:2233") == "fe80::ba3f:d2ff:fe11:2233"
    assert parse_address("garbage") is None


def test_extra_ips_name_hosts_the_topology_does_not():
    idx = FabricIndex(spec(), extra_ips={"node-a07": ["10.0.0.17"], "node-a01": ["10.0.1.11"]})
    assert idx.host_of_address("10.0.0.17<1>") == "node-a07"
    assert idx.host_of_address("10.0.1.11:22") == "node-a01"
    assert idx.host_of_address("10.0.0.11:22") == "node-a01"  # the topology's own still holds


# --- domains --------------------------------------------------------------------------------


def test_domains_of_includes_the_leaf_switches(index):
    assert index.domains_of("node-a03") == ["rack-1", "switch:leaf-01"]
    assert index.domains_of("node-a05") == ["rack-2", "switch:leaf-01", "switch:leaf-02"]
    assert index.domains_of("node-z99") == []
    assert index.domain_hosts("switch:leaf-01") == ["node-a01", "node-a02", "node-a03", "node-a04", "node-a05"]
    assert index.domain_hosts("switch:leaf-02") == ["node-a05"]
    assert index.domain_hosts("rack-1") == ["node-a01", "node-a02", "node-a03", "node-a04"]
    assert index.domain_hosts("rack-9") == []


def test_switches_include_uplink_ends(index):
    assert index.is_switch("leaf-01") and index.is_switch("leaf-02") and index.is_switch("spine-01")
    assert not index.is_switch("node-a01")
    assert [l.port_id for l in index.host_links("node-a05")] == ["leaf-01/Eth1/12", "leaf-02/1"]
    assert len(index.switch_links["leaf-01"]) == 5


# --- no topology ----------------------------------------------------------------------------


def test_without_topology_port_keys_fall_back_to_the_line():
    idx = FabricIndex(None)
    assert idx.link_of(ev("node-a03", device="0000:0c:00.0")) is None
    assert idx.port_key(ev("node-a03", device="0000:0c:00.0", netdev="ibp12s0")) == "node-a03/0000:0c:00.0/1"
    assert idx.port_key(ev("node-a03", netdev="ibp12s0")) == "node-a03/ibp12s0/1"
    assert idx.port_key(ev("node-a03", type_="nccl.ib_async_event", device="mlx5_2", port=1)) == "node-a03/mlx5_2/1"
    assert idx.port_key(ev("leaf-01", type_="fabric.port_state", side="switch", port=7, state="DOWN")) == "leaf-01/7"
    assert idx.port_key(ev("x", type_="fabric.port_errors", fabric_port="node-a03/mlx5_0/1")) == "node-a03/mlx5_0/1"
    assert idx.port_key(ev("node-a03", type_="nccl.ib_async_event", event="port error")) is None
    assert idx.host_of_address("10.0.0.13<1>") is None
    assert idx.domains_of("node-a03") == []
    assert not idx.is_switch("leaf-01")
    # workload addresses alone still name hosts
    assert FabricIndex(None, extra_ips={"node-a03": ["10.0.0.13"]}).host_of_address("::ffff:10.0.0.13") == "node-a03"
