"""correlators.ids: one canonical form per kind of identifier, and every caller on it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from correlators import ids
from correlators.enrich import Allocation
from correlators.ids import (
    normalise_bdf,
    normalise_gid,
    normalise_guid,
    normalise_peer,
    normalise_pci,
    normalise_switch_port,
    parse_address,
    parse_guid,
    pci_from_nccl_busid,
)
from correlators.topology import FabricIndex
from schemas.bundle import Link, TopologySpec
from schemas.records import Event, GpuRef


# --------------------------------------------------------------------------- PCI


@pytest.mark.parametrize("text", [
    "0000:9c:00",          # driver Xid line, 4-digit domain, no function
    "PCI:0000:9C:00",      # "NVRM: Xid (PCI:0000:9C:00)": prefix, upper case
    "pci:0000:9c:00.0",
    "00000000:9C:00.0",    # nvidia-smi: 8-digit domain, function
    "0000:9c:00.0",        # sysfs / lspci -D
    "9c:00.0",             # lspci without -D: no domain
    "9C:00",               # no domain, no function, upper case
    "  0000:9c:00.0 \n",   # blanks around
    "0:9c:0",              # unpadded fields
])
def test_pci_forms_give_one_id(text):
    assert normalise_pci(text) == "0000:9c:00"


def test_pci_keeps_a_wide_domain_and_other_devices():
    assert normalise_pci("10000:E1:00.0") == "10000:e1:00"  # VMD domain (5 digits)
    assert normalise_pci("0000:01:1f.7") == "0000:01:1f"
    assert normalise_pci("0001:02:03") == "0001:02:03"


@pytest.mark.parametrize("text", [
    None, "", "   ", "N/A", "[N/A]", "mlx5_0", "9c", "0000:9c", "0000:9c:00.8",  # function > 7
    "0000:9c:20.0",  # device > 0x1f
    "0000:100:00.0",  # bus > 0xff
    "000000000:9c:00.0",  # domain > 8 digits
    "GPU 00000000:9C:00.0",  # surrounding words: the caller extracts the address
    "0000:9c:00.0:1", "zz:00.0",
])
def test_pci_returns_none_for_what_is_not_a_pci_address(text):
    assert normalise_pci(text) is None


def test_bdf_keeps_the_function():
    assert normalise_bdf("0000:01:00.1") == "0000:01:00.1"
    assert normalise_bdf("01:00.1") == "0000:01:00.1"
    assert normalise_bdf("PCI:0000:9C:00.0") == "0000:9c:00.0"
    assert normalise_bdf("0000:01:00") is None  # names no function
    assert normalise_bdf("mlx5_0") is None
    assert normalise_bdf(None) is None


def test_nccl_busid():
    assert pci_from_nccl_busid("60") == "0000:00:06"
    assert pci_from_nccl_busid("2000") == "0000:02:00"
    assert pci_from_nccl_busid("9c000") == "0000:9c:00"
    assert pci_from_nccl_busid("xyz") is None
    assert pci_from_nccl_busid("") is None
    assert pci_from_nccl_busid("-10") is None


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7),
       st.booleans(), st.booleans(), st.booleans())
def test_pci_every_printed_form_normalises_alike(domain, bus, dev, fn, upper, long_domain, prefix):
    text = f"{domain:08x}" if long_domain else f"{domain:04x}"
    text = f"{text}:{bus:02x}:{dev:02x}.{fn}"
    if upper:
        text = text.upper()
    if prefix:
        text = "PCI:" + text
    assert normalise_pci(text) == f"{domain:04x}:{bus:02x}:{dev:02x}"
    assert normalise_bdf(text) == f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
    assert normalise_pci(normalise_pci(text)) == normalise_pci(text)  # idempotent


def test_the_former_normalisers_are_the_one_function():
    """The rule engine, telemetry parsers and the enrichment table name one function."""
    from connectors import telemetry
    from correlators import enrich
    from correlators.rules import code

    assert code.normalize_pci is ids.normalise_pci
    assert code.nccl_busid_to_pci is ids.pci_from_nccl_busid
    assert code.normalize_peer is ids.normalise_peer
    assert code.normalize_switch_port is ids.normalise_switch_port
    assert enrich.normalise_pci is ids.normalise_pci
    assert telemetry.normalise_pci_bus_id is ids.normalise_pci
    # one PCI id spelt three ways, through each normaliser
    for fn in (code.normalize_pci, enrich.normalise_pci, telemetry.normalise_pci_bus_id):
        assert fn("9c:00.0") == "0000:9c:00"


def test_xid_line_pci_meets_telemetry_pci_in_the_gpu_table():
    """An Xid line naming ``PCI:0000:9C:00`` finds the GPU index nvidia-smi reported for
    ``00000000:9C:00.0`` (same key in Allocation.gpus)."""
    from connectors.telemetry import parse_telemetry
    from connectors.timefmt import TimeContext

    csv = ("timestamp, index, uuid, pci.bus_id, temperature.gpu\n"
           "2026/11/30 01:00:00.000, 3, GPU-aaaa, 00000000:9C:00.0, 40\n")
    fmt, samples = parse_telemetry(csv, TimeContext(year=2026))
    assert fmt == "nvidia_smi_csv"
    alloc = Allocation(workload_id="job-1", cluster="c1", ranks={0: ("node-a01", 3)})
    obs_gpu = samples[0].gpu
    assert obs_gpu.pci_bus_id == "0000:9c:00"
    alloc.gpus[("node-a01", obs_gpu.pci_bus_id)] = obs_gpu.index
    assert alloc.gpu_index("node-a01", GpuRef(pci_bus_id="PCI:0000:9C:00")) == 3
    assert alloc.gpu_index("node-a01", GpuRef(pci_bus_id="9c:00.0")) == 3
    assert alloc.gpu_index("node-a01", GpuRef(pci_bus_id="N/A")) is None


# --------------------------------------------------------------------------- addresses


@pytest.mark.parametrize("text, want", [
    ("10.0.0.15", "10.0.0.15"),
    ("10.0.0.15<38560>", "10.0.0.15"),
    ("10.0.0.15:38560", "10.0.0.15"),
    ("[10.0.0.15]:11692", "10.0.0.15"),
    ("::ffff:10.0.0.15", "10.0.0.15"),         # IPv4-mapped (RoCE v2 GID of an IPv4 interface)
    ("::FFFF:0a00:000f", "10.0.0.15"),
    ("[::ffff:10.0.0.15]:5000", "10.0.0.15"),
    ("[FE80::1]:5000", "fe80::1"),
    ("fe80:0000:0000:0000:ba3f:d2ff:fe11:2233", "fe80::ba3f:d2ff:fe11:2233"),
    ("node-a01", None), ("10.0.0.x", None), ("", None), (None, None),
])
def test_parse_address(text, want):
    assert parse_address(text) == want


def test_peer_form():
    assert normalise_peer("10.0.0.15<38560>") == "10.0.0.15:38560"
    assert normalise_peer("[127.0.0.1]:11692") == "127.0.0.1:11692"
    assert normalise_peer("fe80::1<5000>") == "[fe80::1]:5000"
    assert normalise_peer("node-a01.") == "node-a01"
    assert normalise_peer("") is None


def test_allocation_finds_the_host_of_a_mapped_address():
    """``::ffff:10.0.0.15`` is 10.0.0.15: the enrichment table resolves it as the topology
    index does."""
    alloc = Allocation(workload_id="job-1", cluster="c1", ranks={0: ("node-a01", 0), 1: ("node-a02", 0)},
                       ips={"10.0.0.15": "node-a02", "fe80::1": "node-a01"})
    for peer in ("10.0.0.15", "10.0.0.15<38560>", "10.0.0.15:38560", "[10.0.0.15]:11692",
                 "::ffff:10.0.0.15", "[::ffff:10.0.0.15]:5000"):
        assert alloc.host_of_peer(peer) == "node-a02", peer
    assert alloc.host_of_peer("[FE80::0001]:5000") == "node-a01"
    assert alloc.host_of_peer("node-a01.cluster:5000") == "node-a01"
    assert alloc.host_of_peer("10.0.0.99") is None
    index = FabricIndex(TopologySpec(hosts={"node-a02": {"ips": ["10.0.0.15"]}}))
    for peer in ("::ffff:10.0.0.15", "10.0.0.15<38560>"):
        assert index.host_of_address(peer) == alloc.host_of_peer(peer) == "node-a02"


# --------------------------------------------------------------------------- GIDs, GUIDs


def test_gid():
    assert normalise_gid("fe80:0000:0000:0000:B8CE:F603:00A1:B2C3") == "fe80::b8ce:f603:a1:b2c3"
    assert normalise_gid("fe80::b8ce:f603:a1:b2c3") == "fe80::b8ce:f603:a1:b2c3"
    assert normalise_gid("0000:0000:0000:0000:0000:ffff:0a00:000f") == "::ffff:10.0.0.15"
    assert normalise_gid("::ffff:10.0.0.15") == "::ffff:10.0.0.15"
    assert parse_address(normalise_gid("::ffff:10.0.0.15")) == "10.0.0.15"
    for bad in (None, "", "10.0.0.15", "fe80::zz", "mlx5_0"):
        assert normalise_gid(bad) is None


@pytest.mark.parametrize("text", ["c42a10300b1e2f1", "0xc42a10300b1e2f1", "0x0C42A10300B1E2F1",
                                  " 0c42a10300b1e2f1 "])
def test_guid_forms(text):
    assert normalise_guid(text) == "0x0c42a10300b1e2f1"
    assert parse_guid(text) == 0x0C42A10300B1E2F1


@pytest.mark.parametrize("text", ["", "0x", "0x1234567890abcdef0", "mlx5_0", "0c42:a103:00b1:e2f1"])
def test_guid_raises_for_what_is_not_a_guid(text):
    with pytest.raises(ValueError, match="is not a GUID"):
        normalise_guid(text)


def test_topology_parser_uses_the_one_guid_form():
    from connectors import topology_parsers as topology

    assert topology.normalize_guid is ids.normalise_guid
    assert topology.normalize_guid("7CFE900300A5A2A0") == "0x7cfe900300a5a2a0"


# --------------------------------------------------------------------------- switch ports


@pytest.mark.parametrize("text, want", [
    ("IB1/17", "17"), ("ib port 1/17", "17"), ("IB1/17/2", "17/2"), ("IB3/17", "3/17"),
    ("17", "17"), (" 17. ", "17"), ("Eth1/12", "Eth1/12"), ("swp12", "swp12"),
    ("Ethernet48:", "Ethernet48"), ("1:17", "1:17"),
])
def test_switch_port(text, want):
    assert normalise_switch_port(text) == want


# --------------------------------------------------------------------------- one HCA, several names


def _host_event(device: str) -> Event:
    return Event(type="fabric.link_down", at=1, host="node-a01", attributes={"device": device},
                 rule="test@1").with_id()


def test_fabric_index_matches_a_pci_function_in_any_spelling():
    """A kernel line naming the HCA by PCI function finds the cable whatever spelling the
    topology and the line use; a different function is a different cable."""
    spec = TopologySpec(links=[
        Link(host="node-a01", hca="mlx5_0", host_port=1, switch="leaf-01", switch_port="1", pci="0000:01:00.0"),
        Link(host="node-a01", hca="mlx5_1", host_port=1, switch="leaf-01", switch_port="2", pci="01:00.1"),
    ])
    index = FabricIndex(spec)
    assert index.port_key(_host_event("0000:01:00.0")) == "leaf-01/1"
    assert index.port_key(_host_event("01:00.0")) == "leaf-01/1"
    assert index.port_key(_host_event("0000:01:00.1")) == "leaf-01/2"
    assert index.port_key(_host_event("MLX5_1")) == "leaf-01/2"
    assert index.port_key(_host_event("0000:02:00.0")) == "node-a01/0000:02:00.0/1"  # no such cable
