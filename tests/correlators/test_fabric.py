"""The fabric correlator (correlators/fabric.py): port faults over hopping windows, grouping
into switch and rack faults, fault events into workload verdicts, fabric and incident verdicts.

Unit tests build Events directly; the end-to-end tests write small bundles (raw log lines in
the formats the rule pack parses, ``topology.yaml``, ``workloads/*.yaml``) under ``tmp_path``
and replay them through :func:`streams.replay.replay_bundle`.

Fabric used throughout: leaf-01 ports 1-4 cable node-a01..a04 (rack-1), leaf-02 ports 1-4
cable node-a05..a08 (rack-2); every host has one mlx5 HCA (``mlx5_0``, netdev ``ibp12s0``,
PCI ``0000:0c:00.0``) and the address 10.0.0.1N."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import re
from pathlib import Path

import pytest
import yaml

from connectors.bundle import BundleError
from correlators.fabric import (
    assemble,
    correlate,
    default_fabric_policy,
    fault_event,
    group_faults,
    port_events,
    port_faults,
    relevant,
    withdrawal,
)
from correlators.topology import FabricIndex
from schemas.bundle import TopologySpec, to_ns
from schemas.records import Event, GpuRef, canonical_json
from streams.replay import replay_bundle, score

S = 10**9
T0 = 1_796_000_040 * S  # a whole minute (window starts are multiples of hop_s), 2026-11-29 UTC
MIN = 60
HOUR = 3600
HOSTS = [f"node-a0{i}" for i in range(1, 9)]
RACK1, RACK2 = HOSTS[:4], HOSTS[4:]
PCI, NETDEV = "0000:0c:00.0", "ibp12s0"


def ip(host: str) -> str:
    return f"10.0.0.{10 + int(host[-2:])}"


def topology_dict(hosts=HOSTS, per_leaf=4) -> dict:
    links = [
        {"host": h, "hca": "mlx5_0", "host_port": 1, "switch": f"leaf-{i // per_leaf + 1:02d}",
         "switch_port": str(i % per_leaf + 1), "netdev": NETDEV, "pci": PCI}
        for i, h in enumerate(hosts)
    ]
    return {"links": links, "domains": {"rack-1": RACK1, "rack-2": RACK2}}


INDEX = FabricIndex(TopologySpec.model_validate(topology_dict()))
POLICY = default_fabric_policy()


# --- event builders ---------------------------------------------------------------------------


def at(s: float) -> int:
    return T0 + int(s * S)


def down(host: str, t: float, **extra) -> Event:
    """mlx5 'Link down' in the host's dmesg."""
    return Event(type="fabric.link_down", at=at(t), time_quality=0.9, host=host, cluster="c1",
                 attributes={"device": PCI, "netdev": NETDEV, "driver": "mlx5_core", **extra},
                 rule="fabric.link_down@1").with_id()


def up(host: str, t: float) -> Event:
    return Event(type="fabric.link_up", at=at(t), time_quality=0.9, host=host, cluster="c1",
                 attributes={"device": PCI, "netdev": NETDEV, "driver": "mlx5_core"},
                 rule="fabric.link_up@1").with_id()


def sw_down(switch: str, port: int, t: float, rule="fabric.onyx_interface_state", type_="fabric.link_down",
            state="DOWN") -> Event:
    """The switch's own log of a port going down (its host is the switch)."""
    return Event(type=type_, at=at(t), host=switch, cluster="c1",
                 attributes={"port": str(port), "state": state, "side": "switch"}, rule=f"{rule}@1").with_id()


def ib_state(host: str, t: float, state: str) -> Event:
    """ibstatus's 'state: 1: DOWN' for mlx5_0 port 1: a level sample, not an edge."""
    return Event(type="fabric.port_state", at=at(t), host=host, cluster="c1",
                 attributes={"state": state, "device": "mlx5_0", "port": 1, "side": "host"},
                 rule="fabric.ibstatus_port_state@1").with_id()


def nccl_port_error(host: str, t: float, gpu: int) -> Event:
    """NCCL's 'NET/IB : Got async event : port error', logged by every rank's process."""
    return Event(type="nccl.ib_async_event", at=at(t), time_quality=0.9, host=host, cluster="c1",
                 gpu=GpuRef(index=gpu), attributes={"event": "port error"},
                 rule="nccl.ib_async_event@1").with_id()


def counters(port: str, t: float, **deltas: int) -> Event:
    """A counter sample: the deltas since the previous sample of the port."""
    return Event(type="fabric.port_errors", at=at(t), host="ufm-01", cluster="c1", fabric_port=port,
                 attributes={"deltas": deltas}, rule="test.port_counters@1").with_id()


def node_down(node: str, t: float, state: str = "DOWN") -> Event:
    """slurmctld 'Nodes <node> not responding, setting DOWN'."""
    return Event(type="sched.node_state", at=at(t), host=node, cluster="c1",
                 attributes={"node": node, "state": state}, rule="sched.slurm_not_responding@1").with_id()


def faults_of(events, policy=POLICY, index=INDEX):
    per_port = port_events(events, index)
    return [f for port in sorted(per_port) for f in port_faults(port, per_port[port], index, policy)]


# --- port_events --------------------------------------------------------------------------------


def test_port_events_key_both_ends_and_counters_by_the_switch_port():
    host_side = down("node-a03", 0)
    switch_side = sw_down("leaf-01", 3, 1)
    sample = counters("node-a03/mlx5_0/1", 2, symbol_error=3)
    other = up("node-a04", 5)
    unrelated = Event(type="nccl.watchdog_timeout", at=at(0), host="node-a03", rule="x@1").with_id()
    got = port_events([sample, other, switch_side, unrelated, host_side, host_side], INDEX)
    assert got == {"leaf-01/3": [host_side, switch_side, sample], "leaf-01/4": [other]}


# --- port_faults --------------------------------------------------------------------------------


def test_one_link_down_is_a_link_down_fault():
    (fault,) = faults_of([down("node-a03", 0), up("node-a03", 4)])
    assert (fault.port, fault.kind, fault.downs, fault.sides, fault.host) == (
        "leaf-01/3", "link_down", 1, ("host",), "node-a03")
    assert fault.link.port_id == "leaf-01/3" and fault.link.hca == "mlx5_0"
    assert fault.first_at == at(0)
    assert fault.counters == {}


def test_two_downs_in_five_minutes_flap():
    events = [down("node-a03", 0), up("node-a03", 4), down("node-a03", 90), up("node-a03", 97)]
    (fault,) = faults_of(events)
    assert (fault.kind, fault.downs, fault.first_at, fault.last_at) == ("flapping", 2, at(0), at(90))


def test_host_and_switch_reporting_one_flap_count_it_once():
    # both ends log the same two transitions: the window's count is the larger side, not the sum
    events = [down("node-a03", 0), sw_down("leaf-01", 3, 1), down("node-a03", 90), sw_down("leaf-01", 3, 91)]
    (fault,) = faults_of(events)
    assert (fault.kind, fault.downs, fault.sides) == ("flapping", 2, ("host", "switch"))
    assert len(fault.events) == 4
    # one transition seen from both ends is one link-down, not a flap
    (single,) = faults_of([down("node-a03", 0), sw_down("leaf-01", 3, 1)])
    assert (single.kind, single.downs, single.sides) == ("link_down", 1, ("host", "switch"))


def test_every_rank_reporting_the_port_error_of_one_link_down_is_one_transition():
    # one drop: dmesg 'Link down' plus 'Got async event : port error' from each of the 8
    # NCCL processes of the host -- the same transition, nine times
    events = [down("node-a03", 0)] + [nccl_port_error("node-a03", 1, gpu) for gpu in range(8)]
    (fault,) = faults_of(events)
    assert (fault.kind, fault.downs) == ("link_down", 1)
    # two drops seen by every rank are a flap
    events += [down("node-a03", 60)] + [nccl_port_error("node-a03", 61, gpu) for gpu in range(8)]
    (fault,) = faults_of(events)
    assert (fault.kind, fault.downs) == ("flapping", 2)


def test_two_sources_on_one_side_reporting_one_transition_count_it_once():
    # Cumulus switchd logs a carrier line and a libnl line for one link failure; UFM and the
    # switch's syslog both log it
    cumulus = [sw_down("leaf-01", 3, 0, rule="fabric.cumulus_carrier"),
               sw_down("leaf-01", 3, 0, rule="fabric.cumulus_libnl_oper")]
    (fault,) = faults_of(cumulus)
    assert (fault.kind, fault.downs, fault.sides, len(fault.events)) == ("link_down", 1, ("switch",), 2)
    ufm = [sw_down("leaf-01", 3, 0), sw_down("leaf-01", 3, 1, rule="fabric.ufm_link_event")]
    (fault,) = faults_of(ufm + [down("node-a03", 0)])
    assert (fault.kind, fault.downs, fault.sides) == ("link_down", 1, ("host", "switch"))
    # a second transition seen by both sources is a flap
    cumulus += [sw_down("leaf-01", 3, 60, rule="fabric.cumulus_carrier"),
                sw_down("leaf-01", 3, 60, rule="fabric.cumulus_libnl_oper")]
    (fault,) = faults_of(cumulus)
    assert (fault.kind, fault.downs) == ("flapping", 2)


def test_a_port_state_seen_down_again_is_the_same_transition():
    # ibstatus polled every minute while the port stays down
    (fault,) = faults_of([ib_state("node-a03", t, "DOWN") for t in (0, 60, 120, 180)])
    assert (fault.kind, fault.downs, fault.host) == ("link_down", 1, "node-a03")
    # ... and the kernel's 'Link down' before it: still one
    (fault,) = faults_of([down("node-a03", 0), ib_state("node-a03", 30, "DOWN"), ib_state("node-a03", 90, "DOWN")])
    assert (fault.kind, fault.downs) == ("link_down", 1)
    # down, back to ACTIVE, down again: two transitions
    (fault,) = faults_of([ib_state("node-a03", 0, "DOWN"), ib_state("node-a03", 60, "ACTIVE"),
                          ib_state("node-a03", 120, "DOWN")])
    assert (fault.kind, fault.downs) == ("flapping", 2)
    # a switch port DOWN then POLLING (both 'down' states) from one source is one transition
    (fault,) = faults_of([sw_down("leaf-01", 3, 0),
                          sw_down("leaf-01", 3, 5, type_="fabric.port_state", state="POLLING")])
    assert (fault.kind, fault.downs) == ("link_down", 1)
    # DOWN, UP, DOWN from the switch: a flap
    (fault,) = faults_of([sw_down("leaf-01", 3, 0), sw_down("leaf-01", 3, 5, type_="fabric.link_up", state="UP"),
                          sw_down("leaf-01", 3, 60)])
    assert (fault.kind, fault.downs) == ("flapping", 2)


def test_two_downs_ten_minutes_apart_are_one_link_down_episode_not_a_flap():
    (fault,) = faults_of([down("node-a03", 0), down("node-a03", 10 * MIN)])
    assert (fault.kind, fault.downs) == ("link_down", 1)
    assert (fault.first_at, fault.last_at) == (at(0), at(10 * MIN))
    assert [e.at for e in fault.events] == [at(0), at(10 * MIN)]


def test_episodes_split_by_the_episode_gap():
    gap = POLICY.episode_gap_s
    assert gap == 6 * HOUR
    same = faults_of([down("node-a03", 0), down("node-a03", gap)])
    assert len(same) == 1
    split = faults_of([down("node-a03", 0), down("node-a03", 90), down("node-a03", gap + 91)])
    assert [(f.kind, f.first_at, f.last_at) for f in split] == [
        ("flapping", at(0), at(90)), ("link_down", at(gap + 91), at(gap + 91))]
    short = dataclasses.replace(POLICY, episode_gap_s=5 * MIN)
    assert len(faults_of([down("node-a03", 0), down("node-a03", 10 * MIN)], policy=short)) == 2


@pytest.mark.parametrize("port", ["leaf-01/3", "node-a03/mlx5_0/1"])
def test_signal_integrity_counters_over_the_threshold_degrade(port):
    assert POLICY.signal_integrity["symbol_error"] == 10
    assert faults_of([counters(port, 0, symbol_error=10)]) == []
    (fault,) = faults_of([counters(port, 0, symbol_error=11)])
    assert (fault.port, fault.kind, fault.downs, fault.counters, fault.sides, fault.host) == (
        "leaf-01/3", "degrading", 0, {"symbol_error": 11}, ("counters",), "node-a03")
    # deltas of one window add up
    (fault,) = faults_of([counters(port, 0, symbol_error=6), counters(port, 120, symbol_error=5)])
    assert (fault.kind, fault.counters) == ("degrading", {"symbol_error": 11})
    # ... but not across windows
    assert faults_of([counters(port, 0, symbol_error=6), counters(port, 300, symbol_error=5)]) == []


def test_other_port_error_counters_and_link_downed():
    assert faults_of([counters("leaf-01/3", 0, port_xmit_discards=100)]) == []
    (fault,) = faults_of([counters("leaf-01/3", 0, port_xmit_discards=101)])
    assert (fault.kind, fault.counters) == ("port_errors", {"port_xmit_discards": 101})
    (fault,) = faults_of([counters("leaf-01/3", 0, link_downed=1)])
    assert (fault.kind, fault.downs, fault.host) == ("link_down", 1, "node-a03")
    (fault,) = faults_of([counters("leaf-01/3", 0, link_downed=2)])
    assert (fault.kind, fault.downs) == ("flapping", 2)
    # the counter and the host's line count one transition once
    (fault,) = faults_of([down("node-a03", 0), counters("leaf-01/3", 30, link_downed=1)])
    assert (fault.kind, fault.downs, fault.sides) == ("link_down", 1, ("counters", "host"))
    # zero and negative deltas (a counter reset) are no errors
    assert faults_of([counters("leaf-01/3", 0, symbol_error=0, link_downed=-3)]) == []


def test_link_downed_an_hour_apart_is_one_down_per_window_not_their_sum():
    (fault,) = faults_of([counters("leaf-01/3", 0, link_downed=1), counters("leaf-01/3", HOUR, link_downed=1)])
    assert (fault.kind, fault.downs, fault.counters) == ("link_down", 1, {"link_downed": 2})
    assert "1 link-down(s) in 300 s" in group_faults([fault], [], INDEX, cluster="c1")[0].text


def test_window_boundaries():
    assert (POLICY.window_s, POLICY.hop_s) == (300, 60)
    # exactly window_s apart: no window holds both
    (fault,) = faults_of([down("node-a03", 0), down("node-a03", 300)])
    assert fault.kind == "link_down"
    # one second less, starting on a window start: one window holds both
    (fault,) = faults_of([down("node-a03", 0), down("node-a03", 299)])
    assert fault.kind == "flapping"
    # window_s - hop_s apart: some window holds both, however the pair sits on the hop grid
    for offset in range(0, 60, 7):
        (fault,) = faults_of([down("node-a03", offset), down("node-a03", offset + 240)])
        assert fault.kind == "flapping", offset


def mixed_events() -> list[Event]:
    return [
        down("node-a03", 0), up("node-a03", 4), sw_down("leaf-01", 3, 1), down("node-a03", 90),
        up("node-a03", 97), counters("leaf-01/3", 30, symbol_error=4, link_downed=1),
        counters("node-a05/mlx5_0/1", 100, symbol_error=40), down("node-a07", 5 * HOUR),
        down("node-a02", 0), down("node-a02", 8 * HOUR), nccl_port_error("node-a02", 8 * HOUR + 1, 0),
    ]


def test_port_faults_do_not_depend_on_input_order():
    events = mixed_events()
    want = faults_of(events)
    assert [(f.port, f.kind) for f in want] == [
        ("leaf-01/2", "link_down"), ("leaf-01/2", "link_down"), ("leaf-01/3", "flapping"),
        ("leaf-02/1", "degrading"), ("leaf-02/3", "link_down")]
    rng = random.Random(7)
    for _ in range(20):
        shuffled = list(events)
        rng.shuffle(shuffled)
        assert faults_of(shuffled) == want
        mine = [e for e in shuffled if INDEX.port_key(e) == "leaf-01/3"]
        assert port_faults("leaf-01/3", mine, INDEX) == want[2:3]


def test_duplicate_events_collapse():
    events = mixed_events()
    copies = [e.model_copy() for e in events]
    assert faults_of(events + copies + events) == faults_of(events)
    (fault,) = faults_of([down("node-a03", 0)] * 3)
    assert (fault.kind, fault.downs, len(fault.events)) == ("link_down", 1, 1)


# --- grouping ---------------------------------------------------------------------------------


def test_three_of_four_ports_of_a_leaf_down_together_are_one_switch_fault():
    events = [down("node-a01", 0), down("node-a02", 30), down("node-a03", 100), down("node-a05", 50)]
    faults = correlate(events, INDEX, cluster="c1")
    assert [(f.level, f.key) for f in faults] == [("switch", "leaf-01"), ("port", "leaf-02/1")]
    switch = faults[0]
    assert switch.code == "fabric.switch.down" and switch.domain == "fabric" and switch.kind == "switch_down"
    assert switch.hosts == ("leaf-01",)
    assert switch.ports == ("leaf-01/1", "leaf-01/2", "leaf-01/3")
    assert switch.victims == ("node-a01", "node-a02", "node-a03")
    assert [m.port for m in switch.members] == ["leaf-01/1", "leaf-01/2", "leaf-01/3"]
    assert (switch.first_at, switch.last_at) == (at(0), at(100))
    assert len(switch.evidence) == 3
    assert faults[1].hosts == ("node-a05",) and faults[1].code == "fabric.port.link_down"


def test_a_dead_leafs_uplinks_seen_by_the_spine_are_part_of_the_switch_fault():
    spec = topology_dict()
    spec["uplinks"] = [("leaf-01/33", "spine-01/Ethernet8"), ("leaf-02/33", "spine-01/Ethernet9")]
    index = FabricIndex(TopologySpec.model_validate(spec))
    # leaf-01 reboots: three of its hosts log Link down, and the spine logs its uplink to
    # leaf-01 going down; an unrelated spine port (to leaf-02) flaps an hour later
    events = [down("node-a01", 0), down("node-a02", 1), down("node-a03", 2),
              sw_down("spine-01", "Ethernet8", 3),
              sw_down("spine-01", "Ethernet9", 3600), sw_down("spine-01", "Ethernet9", 3660)]
    faults = correlate(events, index, cluster="c1")
    assert [(f.level, f.key) for f in faults] == [("switch", "leaf-01"), ("port", "spine-01/Ethernet9")]
    switch = faults[0]
    assert [m.port for m in switch.members] == ["leaf-01/1", "leaf-01/2", "leaf-01/3", "spine-01/Ethernet8"]
    assert switch.ports == ("leaf-01/1", "leaf-01/2", "leaf-01/3")  # host ports; the spine is no culprit
    assert switch.victims == ("node-a01", "node-a02", "node-a03")
    assert switch.text.endswith("with 1 uplink(s)")
    assert faults[1].kind == "flapping" and faults[1].hosts == ("spine-01",)  # act on the spine port


def test_two_of_four_ports_stay_port_faults():
    faults = correlate([down("node-a01", 0), down("node-a02", 30)], INDEX, cluster="c1")
    assert [(f.level, f.key, f.code) for f in faults] == [
        ("port", "leaf-01/1", "fabric.port.link_down"), ("port", "leaf-01/2", "fabric.port.link_down")]


def test_ports_failing_further_apart_than_group_s_are_no_switch_fault():
    assert POLICY.group_s == 120
    faults = correlate([down("node-a01", 0), down("node-a02", 30), down("node-a03", 150)], INDEX, cluster="c1")
    assert [f.level for f in faults] == ["port", "port", "port"]


def test_hosts_of_a_rack_lost_together_are_one_rack_fault():
    events = [
        node_down("node-a01", 20), node_down("node-a02", 40), node_down("node-a03", 70),
        down("node-a01", 0), down("node-a02", 1), down("node-a03", 2),
        down("node-a05", 3),  # another rack: stays a port fault
    ]
    faults = correlate(events, INDEX, cluster="c1")
    assert [(f.level, f.key) for f in faults] == [("rack", "rack-1"), ("port", "leaf-02/1")]
    rack = faults[0]
    assert (rack.code, rack.domain, rack.kind) == ("host.rack.power_loss", "host", "rack_power_loss")
    assert rack.hosts == rack.victims == ("node-a01", "node-a02", "node-a03")
    assert rack.ports == ()  # the switch ports that saw the hosts go are victims, not culprits
    # absorbed: no switch fault for leaf-01
    assert [m.port for m in rack.members] == ["leaf-01/1", "leaf-01/2", "leaf-01/3"]
    assert rack.sides == ("host", "scheduler")
    assert len(rack.evidence) == 6
    # two hosts are not a rack; DRAIN is not a loss
    faults = correlate(events[1:3] + [node_down("node-a01", 20, state="DRAIN")] + events[3:], INDEX, cluster="c1")
    assert [(f.level, f.key) for f in faults] == [("switch", "leaf-01"), ("port", "leaf-02/1")]


def test_a_loss_two_domains_share_is_one_rack_fault_named_by_the_smallest():
    spec = topology_dict()
    spec["domains"] |= {"nvl-1": RACK1, "row-1": HOSTS}  # an NVL72 rack is its NVLink domain too
    index = FabricIndex(TopologySpec.model_validate(spec))
    events = [node_down("node-a01", 0), node_down("node-a02", 10), node_down("node-a03", 20),
              down("node-a01", 0), down("node-a02", 0), down("node-a03", 0)]
    faults = correlate(events, index, cluster="c1")
    assert [(f.level, f.key, [m.port for m in f.members]) for f in faults] == [
        ("rack", "nvl-1", ["leaf-01/1", "leaf-01/2", "leaf-01/3"])]
    # a rack inside a row: the rack
    spec["domains"] = {"row-1": HOSTS, "rack-1": RACK1}
    faults = correlate(events, FabricIndex(TopologySpec.model_validate(spec)), cluster="c1")
    assert [(f.level, f.key) for f in faults] == [("rack", "rack-1")]


def test_a_rack_lost_on_one_slurmctld_hostlist_line_is_one_rack_fault():
    """slurmctld logs hosts lost together on one line with a hostlist expression:
    'Nodes node-a[01-03] not responding, setting DOWN'."""
    line = Event(type="sched.node_state", at=at(0), host="_scheduler", cluster="c1",
                 attributes={"nodelist": "node-a[01-03]", "state": "DOWN"},
                 rule="sched.slurm_not_responding@1").with_id()
    faults = correlate([line, down("node-a01", 0), down("node-a02", 0)], INDEX, cluster="c1")
    assert [(f.level, f.key, f.hosts) for f in faults] == [("rack", "rack-1", ("node-a01", "node-a02", "node-a03"))]
    bad = line.model_copy(update={"attributes": {"nodelist": "node-a[01-03", "state": "DOWN"}}).with_id()
    assert [f.level for f in correlate([bad], INDEX, cluster="c1")] == []


def test_group_faults_do_not_depend_on_input_order():
    events = [node_down("node-a05", 0), node_down("node-a06", 10), node_down("node-a07", 20),
              down("node-a01", 0), down("node-a02", 0), down("node-a03", 0), down("node-a05", 0)]
    want = correlate(events, INDEX, cluster="c1")
    pfs = faults_of(events)
    downs = [e for e in events if e.type == "sched.node_state"]
    rng = random.Random(3)
    for _ in range(10):
        rng.shuffle(pfs)
        rng.shuffle(downs)
        assert group_faults(pfs, downs, INDEX, cluster="c1") == want


def test_incident_ids_are_stable_and_differ_per_episode():
    events = [down("node-a03", 0), down("node-a03", 90), down("node-a03", 7 * HOUR)]
    first = correlate(events, INDEX, cluster="c1")
    again = correlate(list(reversed(events)), INDEX, cluster="c1")
    assert [f.incident_id for f in first] == [f.incident_id for f in again]
    assert len(first) == 2 and first[0].incident_id != first[1].incident_id
    assert all(f.incident_id.startswith("inc-") for f in first)
    # late evidence inside the episode keeps the incident
    later = correlate(events + [down("node-a03", 200)], INDEX, cluster="c1")
    assert later[0].incident_id == first[0].incident_id
    # another cluster, another incident
    assert correlate(events, INDEX, cluster="c2")[0].incident_id != first[0].incident_id


# --- linking: fault events, relevance, fabric and incident verdicts ----------------------------


def test_fault_event_names_the_cable_and_the_incident():
    (fault,) = correlate([down("node-a03", 0), down("node-a03", 90)], INDEX, cluster="c1")
    event = fault_event(fault)
    assert (event.type, event.host, event.at, event.fabric_port, event.cluster) == (
        "fabric.port_fault", "node-a03", at(0), "leaf-01/3", "c1")
    a = event.attributes
    assert (a["kind"], a["code"], a["incident_id"], a["culprit_hosts"], a["ports"]) == (
        "flapping", "fabric.port.flapping", fault.incident_id, ["node-a03"], ["leaf-01/3"])
    assert (a["host_port_id"], a["downs"], a["last_at"]) == ("node-a03/mlx5_0/1", 2, at(90))
    assert fault_event(fault) == event  # deterministic id
    (switch,) = correlate([down(h, i) for i, h in enumerate(RACK1)], INDEX, cluster="c1")
    sev = fault_event(switch)
    assert (sev.type, sev.host, sev.fabric_port, sev.attributes["culprit_hosts"]) == (
        "fabric.switch_fault", "leaf-01", None, ["leaf-01"])
    assert sev.attributes["victims"] == RACK1


def test_relevant_needs_a_shared_host_and_overlapping_time():
    (fault,) = correlate([down("node-a03", 0), down("node-a03", 90)], INDEX, cluster="c1")
    assert relevant(fault, ["node-a01", "node-a03"], at(-HOUR), at(HOUR))
    assert not relevant(fault, ["node-a01", "node-a02"], at(-HOUR), at(HOUR))
    assert not relevant(fault, ["node-a03"], at(HOUR), at(2 * HOUR))  # fault over before the start
    assert relevant(fault, ["node-a03"], at(HOUR), at(2 * HOUR), before_ns=HOUR * S)
    assert not relevant(fault, ["node-a03"], at(-2 * HOUR), at(-HOUR))  # began after the end
    assert relevant(fault, ["node-a03"], at(-2 * HOUR), at(-HOUR), after_ns=HOUR * S)
    assert relevant(fault, ["node-a03"], at(-HOUR), None)  # still running
    (switch,) = correlate([down(h, i) for i, h in enumerate(RACK1)], INDEX, cluster="c1")
    assert relevant(switch, ["node-a02", "node-a07"], at(-HOUR), at(HOUR))  # a victim ran it
    assert not relevant(switch, RACK2, at(-HOUR), at(HOUR))


def test_a_fault_no_workload_names_still_gets_fabric_and_incident_verdicts():
    (fault,) = correlate([counters("leaf-02/2", 0, symbol_error=50)], INDEX, cluster="c1")
    fabric, incident = assemble([fault], [], ruleset_version="t")
    assert (fabric.scope.kind, fabric.scope.id, fabric.outcome, fabric.domain) == (
        "fabric_port", "leaf-02/2", "degraded", "fabric")
    assert (fabric.root_cause.code, fabric.culprits.hosts, fabric.culprits.ports) == (
        "fabric.port.degrading", ["node-a06"], ["leaf-02/2", "node-a06/mlx5_0/1"])
    assert fabric.affected.workloads == [] and fabric.affected.hosts == ["node-a06"]
    assert (incident.scope.kind, incident.scope.id, incident.members) == (
        "incident", fault.incident_id, [fabric.attribution_id])
    assert fabric.incident_id == incident.incident_id == fault.incident_id
    assert fabric.confidence == round(POLICY.weight("degrading") * 0.9, 4)  # one side only


# --- end to end: bundles ------------------------------------------------------------------------

D = dt.datetime


def dmesg_link(t: dt.datetime, state: str) -> str:
    return f"[{t:%a %b %d %H:%M:%S %Y}] mlx5_core {PCI} {NETDEV}: Link {state}"


def nccl_error12(t: dt.datetime, host: str, peer: str, gpu: int = 3) -> str:
    return (f"[{t:%Y-%m-%d %H:%M:%S}] {host}:1208:1270 [{gpu}] transport/net_ib.cc:2290 NCCL WARN NET/IB : "
            f"Got completion from peer {ip(peer)}<38560> with status=12 opcode=0 len=0 vendor err 129 (Recv) "
            f"localGid ::ffff:{ip(host)} remoteGids::ffff:{ip(peer)} hca mlx5_0")


def nccl_error12_legacy(host: str, gpu: int = 0) -> str:
    return (f"{host}:946:988 [{gpu}] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion with error 12, "
            f"opcode 1, len 0, vendor err 129")


def workload(wid: str, nodes, start: dt.datetime, end: dt.datetime, state="FAILED") -> dict:
    return {"workload_id": wid, "scheduler": "slurm", "cluster": "c1", "state": state,
            "start": start.strftime("%Y-%m-%dT%H:%M:%SZ"), "end": end.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "nodes": list(nodes), "ranks_per_node": 8, "hosts": {h: {"ip": ip(h)} for h in nodes}}


def write_bundle(root: Path, main: dict, logs: dict[str, list[str]], *, topology=True, extra=(), expected=None) -> Path:
    root.mkdir(parents=True)
    (root / "workload.yaml").write_text(yaml.safe_dump(main, sort_keys=False))
    if topology:
        (root / "topology.yaml").write_text(yaml.safe_dump(topology_dict(), sort_keys=False))
    for spec in extra:
        (root / "workloads").mkdir(exist_ok=True)
        (root / "workloads" / f"{spec['workload_id']}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    for rel, lines in logs.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines))
    if expected is not None:
        (root / "expected.yaml").write_text(yaml.safe_dump(expected, sort_keys=False))
    return root


def flap_lines(t: dt.datetime) -> list[str]:
    """Two down/up transitions of one port within two minutes."""
    sec = dt.timedelta(seconds=1)
    return [dmesg_link(t, "down"), dmesg_link(t + 4 * sec, "up"),
            dmesg_link(t + 90 * sec, "down"), dmesg_link(t + 97 * sec, "up")]


def verdicts_by_kind(result) -> dict[str, list]:
    out: dict[str, list] = {}
    for v in result.attributions:
        out.setdefault(v.scope.kind, []).append(v)
    return out


def config_bundle(root: Path) -> Path:
    """RoCE GID-index misconfiguration: error 12 on every host from the first connection (40 s
    after the start), ports healthy, the job dies within two minutes."""
    start = D(2026, 11, 30, 1, 0, 0)
    t = start + dt.timedelta(seconds=40)
    logs = {f"logs/{h}/nccl.log": [nccl_error12(t, h, RACK1[(i + 1) % 4])] for i, h in enumerate(RACK1)}
    logs["logs/node-a02/nccl.log"].append(nccl_error12_legacy("node-a02", 0))
    return write_bundle(root, workload("job-1001", RACK1, start, start + dt.timedelta(minutes=2)), logs)


def fabric_bundle(root: Path, *, topology=True) -> Path:
    """Error 12 after three hours of training, from the peers of node-a03 (10.0.0.13), whose
    port flaps twice in two minutes just before."""
    start = D(2026, 11, 30, 0, 0, 0)
    flap = D(2026, 11, 30, 3, 1, 10)
    err = D(2026, 11, 30, 3, 2, 50)
    logs = {"logs/node-a03/dmesg.log": flap_lines(flap)}
    for h in ("node-a01", "node-a02", "node-a04"):
        logs[f"logs/{h}/nccl.log"] = [nccl_error12(err, h, "node-a03", gpu) for gpu in (0, 3)]
    expected = {"domain": "fabric", "root_cause": "fabric.port.flapping", "culprit_hosts": ["node-a03"],
                "culprit_ports": ["leaf-01/3"], "incidents": 1,
                "incident": {"level": "port", "root_cause": "fabric.port.flapping", "workloads": ["job-2001"],
                             "culprit_ports": ["leaf-01/3", "node-a03/mlx5_0/1"], "culprit_hosts": ["node-a03"]}}
    return write_bundle(root, workload("job-2001", RACK1, start, D(2026, 11, 30, 3, 10, 0)), logs,
                        topology=topology, expected=expected if topology else None)


def test_error_12_from_the_first_connection_with_healthy_ports_is_config(tmp_path):
    result = replay_bundle(config_bundle(tmp_path / "cfg"))
    kinds = verdicts_by_kind(result)
    (verdict,) = kinds["workload"]
    assert (verdict.domain, verdict.root_cause.code) == ("config", "config.roce_gid_index")
    assert verdict.culprits.ports == [] and verdict.incident_id is None
    assert verdict.culprits.hosts == RACK1 and verdict.quality == "definitive"
    causes = [e for e in verdict.evidence if e.role == "cause"]
    assert len(causes) == 5 and {e.type for e in causes} == {"nccl.ib_completion_error"}  # new and legacy form
    assert result.faults == [] and set(kinds) == {"workload"}


def test_error_12_after_hours_with_a_flapping_peer_port_is_that_port(tmp_path):
    result = replay_bundle(fabric_bundle(tmp_path / "fab"))
    kinds = verdicts_by_kind(result)
    (verdict,) = kinds["workload"]
    assert (verdict.domain, verdict.root_cause.code) == ("fabric", "fabric.port.flapping")
    assert verdict.culprits.hosts == ["node-a03"] and verdict.culprits.ports == ["leaf-01/3"]
    assert verdict.quality == "definitive"
    errors = {e.event_id for e in result.events if e.type == "nccl.ib_completion_error"}
    assert len(errors) == 6 and errors <= set(verdict.symptoms)
    assert "config.roce_gid_index" not in [a.code for a in verdict.alternatives]
    (fabric,) = kinds["fabric_port"]
    (incident,) = kinds["incident"]
    assert (fabric.scope.id, fabric.root_cause.code) == ("leaf-01/3", "fabric.port.flapping")
    assert fabric.culprits.ports == ["leaf-01/3", "node-a03/mlx5_0/1"]
    assert fabric.affected.workloads == ["job-2001"]
    assert errors <= set(fabric.symptoms)
    assert verdict.incident_id == fabric.incident_id == incident.scope.id == result.faults[0].incident_id
    assert incident.members == sorted([verdict.attribution_id, fabric.attribution_id])
    row = score(result.attribution, result.expected, "fab", result.attributions)
    assert row.hit, row.misses


def test_a_fault_that_lasts_for_hours_explains_errors_near_its_end(tmp_path):
    """A port that began flapping 2.5 h before the job failed (one episode: flaps closer than
    episode_gap_s) still explains the error-12 lines of the failure: the cause lasts until its
    last evidence, not just one horizon past its first."""
    start = D(2026, 11, 30, 0, 0, 0)
    logs = {"logs/node-a03/dmesg.log": flap_lines(D(2026, 11, 30, 0, 30, 0)) + flap_lines(D(2026, 11, 30, 3, 1, 10))}
    err = D(2026, 11, 30, 3, 2, 50)
    for h in ("node-a01", "node-a02"):
        logs[f"logs/{h}/nccl.log"] = [nccl_error12(err, h, "node-a03")]
    result = replay_bundle(write_bundle(tmp_path / "long", workload("job-2001", RACK1, start, D(2026, 11, 30, 3, 10)), logs))
    (fault,) = result.faults
    assert (fault.first_at, fault.kind) == (to_ns(D(2026, 11, 30, 0, 30, 0)), "flapping")
    verdict = result.attribution
    assert verdict.root_cause.code == "fabric.port.flapping"
    errors = {e.event_id for e in result.events if e.type == "nccl.ib_completion_error"}
    assert len(errors) == 2 and errors <= set(verdict.symptoms)


def test_without_topology_the_flapping_port_is_still_found_by_its_host_side_name(tmp_path):
    result = replay_bundle(fabric_bundle(tmp_path / "fab", topology=False))
    (fault,) = result.faults
    assert (fault.level, fault.key, fault.kind, fault.hosts) == (
        "port", f"node-a03/{PCI}/1", "flapping", ("node-a03",))
    verdict = result.attribution
    assert (verdict.domain, verdict.root_cause.code, verdict.culprits.hosts) == (
        "fabric", "fabric.port.flapping", ["node-a03"])
    (fabric,) = verdicts_by_kind(result)["fabric_port"]
    # no topology: only the host side of the cable is known, in the three-part form
    assert [c.model_dump() for c in fabric.culprits.cables] == [
        {"switch_port": None, "host_port": f"node-a03/{PCI}/1"}]


def test_both_ends_of_one_link_down_meet_on_the_switch_port_and_stay_one_transition(tmp_path):
    """node-a03's dmesg and leaf-01's Cumulus switchd (two lines per transition: carrier and
    libnl) report one drop of swp3: one link-down seen by host and switch, not a flap."""
    topo = topology_dict()
    for entry in topo["links"]:
        entry["switch_port"] = "swp" + entry["switch_port"]
    t = D(2026, 11, 30, 3, 1, 10)
    switchd = "2026-11-30T03:01:{:09.6f}+00:00 leaf-01 switchd[5692]: "
    logs = {
        "logs/node-a03/dmesg.log": [dmesg_link(t, "down"), dmesg_link(t + dt.timedelta(seconds=6), "up")],
        "fabric/leaf-01/syslog": [
            switchd.format(10.523456) + "nic.c:213 nic_set_carrier: swp3: setting kernel carrier: down",
            switchd.format(10.523999) + "netlink.c:291 libnl: swp3, family 0, ifi 20, oper down",
            switchd.format(16.1) + "nic.c:213 nic_set_carrier: swp3: setting kernel carrier: up",
            switchd.format(16.1004) + "netlink.c:291 libnl: swp3, family 0, ifi 20, oper up",
        ],
    }
    for h in ("node-a01", "node-a02", "node-a04"):
        logs[f"logs/{h}/nccl.log"] = [nccl_error12(t + dt.timedelta(seconds=30), h, "node-a03")]
    root = write_bundle(tmp_path / "cumulus", workload("job-3001", RACK1, D(2026, 11, 30, 0, 0), D(2026, 11, 30, 3, 5)),
                        logs, topology=False)
    (root / "topology.yaml").write_text(yaml.safe_dump(topo))
    result = replay_bundle(root)
    assert sorted((e.host, e.rule) for e in result.events if e.type == "fabric.link_down") == [
        ("leaf-01", "fabric.cumulus_carrier@1"), ("leaf-01", "fabric.cumulus_libnl_oper@1"),
        ("node-a03", "fabric.link_down@1")]
    (fault,) = result.faults
    (member,) = fault.members
    assert (fault.key, fault.kind, member.downs, fault.sides) == ("leaf-01/swp3", "link_down", 1, ("host", "switch"))
    verdict = result.attribution
    assert (verdict.root_cause.code, verdict.culprits.hosts, verdict.culprits.ports, verdict.incident_id) == (
        "fabric.port.link_down", ["node-a03"], ["leaf-01/swp3"], fault.incident_id)
    fabric = next(v for v in result.attributions if v.scope.kind == "fabric_port")
    assert fabric.culprits.ports == ["leaf-01/swp3", "node-a03/mlx5_0/1"]
    assert fabric.confidence == POLICY.weight("link_down")  # both ends saw it


def test_error_12_at_start_while_the_switch_sees_the_peer_port_flap_is_the_port(tmp_path):
    topo = topology_dict()
    for entry in topo["links"]:
        entry["switch_port"] = "swp" + entry["switch_port"]
    start = D(2026, 11, 30, 1, 0, 0)
    line = "2026-11-30T01:00:{:09.6f}+00:00 leaf-01 switchd[5692]: nic.c:213 nic_set_carrier: swp3: setting kernel carrier: {}"
    logs = {"fabric/leaf-01/syslog": [line.format(20.0, "down"), line.format(24.0, "up"),
                                      line.format(50.0, "down"), line.format(55.0, "up")]}
    for h in ("node-a01", "node-a02", "node-a04"):
        logs[f"logs/{h}/nccl.log"] = [nccl_error12(start + dt.timedelta(seconds=52), h, "node-a03")]
    root = write_bundle(tmp_path / "b", workload("job-1", RACK1, start, start + dt.timedelta(minutes=3)), logs,
                        topology=False, extra=[workload("job-0", RACK2, start, start + dt.timedelta(minutes=3))])
    (root / "topology.yaml").write_text(yaml.safe_dump(topo))
    result = replay_bundle(root)
    (fault,) = result.faults
    assert (fault.key, fault.kind, fault.sides) == ("leaf-01/swp3", "flapping", ("switch",))
    verdict = result.attribution
    assert (verdict.domain, verdict.root_cause.code, verdict.incident_id) == (
        "fabric", "fabric.port.flapping", fault.incident_id)


def two_jobs_bundle(root: Path) -> Path:
    """job-a (00:00-02:05) then job-b (03:00-04:35) on rack-1; node-a03's port flaps during
    both (02:00 and 04:30, 2.5 h apart: one episode); both jobs' peers of node-a03 fail."""
    a_flap, b_flap = D(2026, 11, 30, 2, 0, 10), D(2026, 11, 30, 4, 30, 10)
    logs = {"logs/node-a03/dmesg.log": flap_lines(a_flap) + flap_lines(b_flap)}
    for h in ("node-a01", "node-a02", "node-a04"):
        logs[f"logs/{h}/nccl.log"] = [nccl_error12(a_flap + dt.timedelta(minutes=2), h, "node-a03"),
                                      nccl_error12(b_flap + dt.timedelta(minutes=2), h, "node-a03")]
    return write_bundle(
        root, workload("job-a", RACK1, D(2026, 11, 30, 0, 0), D(2026, 11, 30, 2, 5)), logs,
        extra=[workload("job-b", RACK1, D(2026, 11, 30, 3, 0), D(2026, 11, 30, 4, 35))])


def test_a_port_flapping_during_two_jobs_is_one_fault(tmp_path):
    result = replay_bundle(two_jobs_bundle(tmp_path / "two"))
    kinds = verdicts_by_kind(result)
    assert [v.scope.id for v in kinds["workload"]] == ["job-a", "job-b"]
    (fault,) = result.faults
    assert (fault.level, fault.key, fault.kind) == ("port", "leaf-01/3", "flapping")
    assert len(kinds["incident"]) == 1 and len(kinds["fabric_port"]) == 1
    job_a = kinds["workload"][0]
    assert (job_a.root_cause.code, job_a.incident_id) == ("fabric.port.flapping", fault.incident_id)
    # job-b is a fabric fault on node-a03 either way
    job_b = kinds["workload"][1]
    assert job_b.domain == "fabric" and job_b.culprits.hosts == ["node-a03"]


def test_a_port_flapping_during_two_jobs_is_one_incident_naming_both(tmp_path):
    result = replay_bundle(two_jobs_bundle(tmp_path / "two"))
    kinds = verdicts_by_kind(result)
    (fault,) = result.faults
    (fabric,) = kinds["fabric_port"]
    (incident,) = kinds["incident"]
    assert [v.incident_id for v in kinds["workload"]] == [fault.incident_id] * 2
    assert [v.root_cause.code for v in kinds["workload"]] == ["fabric.port.flapping"] * 2
    assert fabric.affected.workloads == ["job-a", "job-b"]
    assert incident.members == sorted([fabric.attribution_id] + [v.attribution_id for v in kinds["workload"]])
    # the topology knows the cable: both ends, by role, and both in ports
    (cable,) = fabric.culprits.cables
    assert cable.switch_port == fabric.scope.id and cable.host_port.startswith("node-a03/mlx5_")
    assert fabric.culprits.ports == sorted([cable.switch_port, cable.host_port])


def test_a_port_that_went_down_before_the_job_and_flaps_during_it_is_the_jobs_incident(tmp_path):
    logs = {"logs/node-a03/dmesg.log": [dmesg_link(D(2026, 11, 30, 0, 0, 10), "down"),
                                        dmesg_link(D(2026, 11, 30, 0, 0, 30), "up")]
            + flap_lines(D(2026, 11, 30, 3, 1, 10))}
    for h in ("node-a01", "node-a02", "node-a04"):
        logs[f"logs/{h}/nccl.log"] = [nccl_error12(D(2026, 11, 30, 3, 3, 0), h, "node-a03")]
    result = replay_bundle(write_bundle(
        tmp_path / "pre", workload("job-p", RACK1, D(2026, 11, 30, 1, 0), D(2026, 11, 30, 3, 10)), logs))
    (fault,) = result.faults
    assert fault.kind == "flapping"
    assert (result.attribution.root_cause.code, result.attribution.incident_id) == (
        "fabric.port.flapping", fault.incident_id)


def test_hosts_of_a_rack_the_scheduler_lost_together_are_one_rack_incident(tmp_path):
    t = D(2026, 11, 30, 5, 0, 10)
    logs = {"logs/_scheduler/slurmctld.log": [
        f"[2026-11-30T05:0{i}:30.000] error: Nodes {h} not responding, setting DOWN" for i, h in enumerate(RACK1[:3])]}
    for i, h in enumerate(RACK1[:3]):
        logs[f"logs/{h}/dmesg.log"] = [dmesg_link(t + dt.timedelta(seconds=i), "down")]
    logs["logs/node-a04/nccl.log"] = [nccl_error12(t + dt.timedelta(seconds=40), "node-a04", "node-a01")]
    result = replay_bundle(write_bundle(
        tmp_path / "rack", workload("job-r", RACK1, D(2026, 11, 30, 4, 0), D(2026, 11, 30, 5, 5)), logs))
    (fault,) = result.faults
    assert (fault.level, fault.key, fault.code) == ("rack", "rack-1", "host.rack.power_loss")
    verdict = result.attribution
    assert (verdict.domain, verdict.root_cause.code, verdict.incident_id) == (
        "host", "host.rack.power_loss", fault.incident_id)
    assert verdict.culprits.hosts == RACK1[:3]
    kinds = verdicts_by_kind(result)
    assert "fabric_port" not in kinds  # a lost rack is no fabric port
    assert kinds["incident"][0].members == [verdict.attribution_id]


def switch_bundle(root: Path) -> Path:
    """leaf-01 dies at 05:00: node-a01/a02 (job-x) and node-a03/a04 (job-y) log Link down
    within the same minute; job-y also loses its NCCL connections."""
    t = D(2026, 11, 30, 5, 0, 10)
    logs = {f"logs/{h}/dmesg.log": [dmesg_link(t + dt.timedelta(seconds=7 * i), "down")]
            for i, h in enumerate(RACK1)}
    logs["logs/node-a04/nccl.log"] = [nccl_error12(t + dt.timedelta(seconds=40), "node-a04", "node-a03")]
    return write_bundle(
        root, workload("job-x", RACK1[:2], D(2026, 11, 30, 4, 0), D(2026, 11, 30, 5, 1)), logs,
        extra=[workload("job-y", RACK1[2:], D(2026, 11, 30, 3, 0), D(2026, 11, 30, 5, 2))])


def test_a_leaf_switch_down_is_one_switch_incident_for_both_jobs(tmp_path):
    result = replay_bundle(switch_bundle(tmp_path / "sw"))
    kinds = verdicts_by_kind(result)
    (fault,) = result.faults
    assert (fault.level, fault.key, fault.code) == ("switch", "leaf-01", "fabric.switch.down")
    for verdict in kinds["workload"]:
        assert (verdict.domain, verdict.root_cause.code, verdict.culprits.hosts) == (
            "fabric", "fabric.switch.down", ["leaf-01"]), verdict.scope.id
        assert verdict.culprits.ports == ["leaf-01/1", "leaf-01/2", "leaf-01/3", "leaf-01/4"]
        assert verdict.incident_id == fault.incident_id
    (fabric,) = kinds["fabric_port"]
    (incident,) = kinds["incident"]
    assert (fabric.scope.id, fabric.culprits.hosts) == ("leaf-01", ["leaf-01"])
    assert fabric.affected.workloads == ["job-x", "job-y"]
    assert fabric.affected.hosts == RACK1
    assert incident.members == sorted([fabric.attribution_id] + [v.attribution_id for v in kinds["workload"]])


@pytest.mark.parametrize("build", [fabric_bundle, switch_bundle, two_jobs_bundle, config_bundle])
def test_replay_is_byte_identical(tmp_path, build):
    first = replay_bundle(build(tmp_path / "a"))
    second = replay_bundle(build(tmp_path / "b"))  # another directory, same content
    again = replay_bundle(tmp_path / "a")
    dump = [canonical_json(v) for v in first.attributions]
    assert dump == [canonical_json(v) for v in second.attributions]
    assert dump == [canonical_json(v) for v in again.attributions]
    assert [f.incident_id for f in first.faults] == [f.incident_id for f in again.faults]


def test_a_second_workload_file_repeating_the_main_workload_id_is_refused(tmp_path):
    start = D(2026, 11, 30, 1, 0)
    root = write_bundle(tmp_path / "dup", workload("job-1", RACK1, start, start + dt.timedelta(hours=1)),
                        {"logs/node-a01/dmesg.log": [dmesg_link(start, "down")]},
                        extra=[workload("job-2", RACK2, start, start + dt.timedelta(hours=1))])
    (root / "workloads" / "x.yaml").write_text(
        yaml.safe_dump(workload("job-1", RACK2, start, start + dt.timedelta(hours=2))))
    with pytest.raises(BundleError, match=r"workloads/x\.yaml.*duplicate workload_id 'job-1'"):
        replay_bundle(root)


def test_a_withdrawn_verdict_names_its_successor_and_leaves_nothing_to_act_on(tmp_path):
    result = replay_bundle(fabric_bundle(tmp_path / "fab"))
    (incident,) = verdicts_by_kind(result)["incident"]
    early = incident.model_copy(update={"incident_id": "inc-000000000000000000000000",
                                        "attribution_id": "att-000000000000000000000000"})
    withdrawn = withdrawal(early, result.attributions)
    assert withdrawn.attribution_id == early.attribution_id and withdrawn.scope == early.scope
    assert (withdrawn.status, withdrawn.root_cause, withdrawn.cause_code) == ("withdrawn", None, "")
    assert withdrawn.superseded_by == [incident.incident_id]
    assert withdrawn.reasoning == [f"withdrawn: the evidence now points to {incident.incident_id}"]
    assert withdrawn.culprits.hosts == [] and withdrawn.culprits.ports == [] and withdrawn.members == []
    assert (withdrawn.quality, withdrawn.confidence) == ("insufficient", 0.0)
    alone = withdrawal(early, [])
    assert alone.superseded_by == [] and alone.reasoning == ["withdrawn: the evidence no longer shows this fault"]


@pytest.mark.parametrize("change, message", [
    (lambda t: t["links"].append({**t["links"][2], "switch_port": "9"}),
     "topology.yaml: links.8: node-a03 mlx5_0 port 1 is cabled to both leaf-01/3 and leaf-01/9"),
    (lambda t: t["links"].append({**t["links"][2], "host": "node-a09"}),
     "topology.yaml: links.8: switch port leaf-01/3 is cabled to both node-a03/mlx5_0/1 and node-a09/mlx5_0/1"),
    (lambda t: t["links"][0].update(switch_port=""), "links.0.switch_port"),
    (lambda t: t["links"][0].update(host_port=-5), "links.0.host_port"),
    (lambda t: t.update(hosts={"node-a01": {"ips": ["not-an-ip"]}}), "'not-an-ip' is not an IP address"),
    (lambda t: t.update(hosts={"node-a01": {"ips": ["10.0.0.11"]}, "node-a02": {"ips": ["10.0.0.11"]}}),
     "address 10.0.0.11 belongs to both node-a01 and node-a02"),
])
def test_a_topology_that_cables_a_port_twice_or_names_bad_addresses_is_refused(tmp_path, change, message):
    from connectors.bundle import BundleError

    root = fabric_bundle(tmp_path / "fab")
    topo = yaml.safe_load((root / "topology.yaml").read_text())
    change(topo)
    (root / "topology.yaml").write_text(yaml.safe_dump(topo))
    with pytest.raises(BundleError, match=re.escape(message)):
        replay_bundle(root)


def test_a_bundle_is_one_clusters_fabric(tmp_path):
    from connectors.bundle import BundleError

    root = fabric_bundle(tmp_path / "fab")
    (root / "workloads").mkdir()
    other = {**workload("job-9", ["node-a01"], D(2026, 11, 30, 5), D(2026, 11, 30, 6)), "cluster": "c2"}
    (root / "workloads" / "job-9.yaml").write_text(yaml.safe_dump(other))
    with pytest.raises(BundleError, match=re.escape("workloads/job-9.yaml: cluster 'c2' is not workload.yaml's 'c1'")):
        replay_bundle(root)
