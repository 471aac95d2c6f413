"""Identity comes from the source (``correlators/identity.py``, ``RulePack._event``,
``Allocation.enrich``, the workload window's coverage).

* Extraction: a line collected on node-a01 whose syslog host field says ``ALL`` or
  ``node-a07``, an NCCL ``host:pid:tid`` prefix naming another host, a rule's ``to: host``
  field: the event is node-a01's, the name kept as ``attributes.line_host``; the same host
  (or its short/long form) adds nothing. A scheduler record and a bundle's ``logs/_aggregated/``
  file are declared aggregators: their text names the event's host, with ``collected_on``.
* Settling: an aggregator's name that is a node of the allocation stays (as the node's exact
  name), any other goes back to the collecting host; the disagreement becomes one coverage
  entry per host.
* Replay end to end: the hostile bundle (``ALL`` and ``node-a07`` in lines of
  ``logs/node-a01/kern.log``, node-a07 in the allocation) blames node-a01 alone, its drain and
  reboot target node-a01 alone, and two replays give the same bytes; an aggregated syslog
  naming a node of the job blames it, one naming ``ALL`` or a stranger does not.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from typer.testing import CliRunner

from correlators.config import EngineConfig
from correlators.enrich import Allocation
from correlators.identity import disagreements, event_host, is_aggregator, known_name, same_host, settle
from correlators.remediation import RemediationEngine, load_policy
from schemas.records import Event, Observation, Position, Source

PACK = EngineConfig.default().pack
AT = 1_796_001_631_299_000_000  # 2026-11-30T01:20:31.299Z
XID = "kernel: NVRM: Xid (PCI:0000:9c:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def obs(body: str, host: str = "node-a01", kind: str = "log_line", **attributes) -> Observation:
    return Observation(source=Source(connector="test", instance="identity"), kind=kind, observed_at=AT,
                       time_source="line", time_quality=1.0, host=host, cluster="c1", workload_id="job-1",
                       body=body, attributes=attributes, position=Position(file="kern.log", line=1)).with_id()


def one(o: Observation) -> Event:
    (event,) = [e for e in PACK.extract(o) if e.type == "gpu.xid"]
    return event


# -- the pure helpers ------------------------------------------------------------------------------


def test_same_host_is_equal_ignoring_case_or_a_short_and_a_long_name():
    assert same_host("node-a01", "node-a01") and same_host("node-a01", "NODE-A01")
    assert same_host("node-a01", "node-a01.cluster.local") and same_host("node-a01.c1", "node-a01")
    assert not same_host("node-a01.c1", "node-a01.c2")
    assert not same_host("node-a01", "node-a07") and not same_host("node-a01", "ALL")


def test_event_host_keeps_the_collecting_host_unless_an_aggregator_names_another():
    attrs: dict = {}
    assert event_host("node-a01", "ALL", False, attrs) == "node-a01" and attrs == {"line_host": "ALL"}
    attrs = {}
    assert event_host("node-a01", "node-a01.cluster", False, attrs) == "node-a01" and attrs == {}
    attrs = {}
    assert event_host("_aggregated", "node-a07", True, attrs) == "node-a07" and attrs == {"collected_on": "_aggregated"}
    attrs = {}
    assert event_host("node-a01", "x" * 300, False, attrs) == "node-a01" and attrs == {"line_host": "x" * 253}


def test_the_declared_aggregators():
    assert is_aggregator("_scheduler", "log_line", {}) and is_aggregator("_aggregated", "log_line", {})
    assert is_aggregator("node-a01", "scheduler_event", {})
    assert is_aggregator("syslog-01", "log_line", {"aggregator": True})
    assert not is_aggregator("syslog-01", "log_line", {"aggregator": "yes"})
    assert not is_aggregator("node-a01", "log_line", {}) and not is_aggregator("_unknown", "log_line", None)


def test_known_name_is_exact_or_the_one_same_host():
    nodes = ["node-a01", "node-a07"]
    assert known_name("node-a07", nodes) == "node-a07"
    assert known_name("NODE-A07.cluster", nodes) == "node-a07"
    assert known_name("ALL", nodes) is None and known_name("node-a99", nodes) is None
    assert known_name("node-a01.x", ["node-a01.y", "node-a01.z"]) is None  # neither is its short form


# -- extraction -------------------------------------------------------------------------------------


def test_a_host_field_in_a_line_is_evidence_not_the_host():
    for named in ("ALL", "node-a07"):
        e = one(obs(f"Nov 30 01:20:31 {named} {XID}"))
        assert (e.host, e.attributes["line_host"], e.attributes["xid"]) == ("node-a01", named, 79)
        assert "collected_on" not in e.attributes
    same = one(obs(f"Nov 30 01:20:31 node-a01 {XID}"))
    assert same.host == "node-a01" and "line_host" not in same.attributes


def test_an_nccl_prefix_naming_another_host_is_evidence_too():
    line = ("node-a07:946:988 [3] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion with error 12, "
            "opcode 1, len 0, vendor err 129")
    (event,) = PACK.extract(obs(line))
    assert (event.type, event.host, event.attributes["line_host"]) == ("nccl.ib_completion_error", "node-a01", "node-a07")
    assert event.gpu is not None and event.gpu.index == 3  # the rest of the prefix still counts


def test_a_scheduler_record_and_an_aggregated_file_name_the_host():
    node = "Nov 30 01:20:31 slurmctld[77]: error: Nodes node-a02 not responding, setting DOWN"
    events = PACK.extract(obs(node, host="_scheduler", kind="scheduler_event"))
    assert [(e.host, e.attributes.get("collected_on")) for e in events if e.type.startswith("sched.")] == [
        ("node-a02", "_scheduler")]
    e = one(obs(f"Nov 30 01:20:31 node-a07 {XID}", host="_aggregated"))
    assert (e.host, e.attributes["collected_on"]) == ("node-a07", "_aggregated") and "line_host" not in e.attributes
    e = one(obs(f"Nov 30 01:20:31 node-a07 {XID}", host="syslog-01", aggregator=True))
    assert (e.host, e.attributes["collected_on"]) == ("node-a07", "syslog-01")


def test_settling_keeps_a_node_of_the_allocation_and_sends_anything_else_back():
    alloc = Allocation(workload_id="job-1", cluster="c1", nodes=("node-a01", "node-a07"))
    kept = alloc.enrich(one(obs(f"Nov 30 01:20:31 NODE-A07 {XID}", host="_aggregated")))
    assert (kept.host, kept.attributes["collected_on"]) == ("node-a07", "_aggregated")
    for stranger in ("ALL", "node-a99"):
        back = alloc.enrich(one(obs(f"Nov 30 01:20:31 {stranger} {XID}", host="_aggregated")))
        assert (back.host, back.attributes["line_host"]) == ("_aggregated", stranger)
        assert "collected_on" not in back.attributes
    ordinary = one(obs(f"Nov 30 01:20:31 node-a07 {XID}"))
    assert settle(ordinary, ["node-a07"]) is ordinary  # only an aggregator's event is settled


def test_disagreements_are_one_coverage_warning_per_host():
    events = [one(obs(f"Nov 30 01:20:31 {n} {XID}")) for n in ("ALL", "node-a07", "ALL")]
    events.append(one(obs(f"Nov 30 01:20:31 node-a01 {XID}")))
    (entry,) = disagreements(events)
    assert (entry.source, entry.status, entry.records) == ("host-name:node-a01", "present", 3)
    assert entry.detail == ("3 record(s) collected on node-a01 name another host in their text ('ALL', "
                            "'node-a07'): kept on node-a01; a host named in a line is taken only from a declared "
                            "aggregator and only for a node of the allocation")


# -- replay end to end --------------------------------------------------------------------------------


def hostile_bundle(root: Path, *, aggregated: bool = False, day: dt.date = dt.date(2026, 11, 30)) -> Path:
    """A job on node-a01 and node-a07 on ``day`` (UTC, 01:20-01:21). Lines of
    ``logs/node-a01/kern.log`` (or, with ``aggregated``, of a central syslog
    ``logs/_aggregated/syslog``) name hosts ``ALL`` and ``node-a07`` (and, aggregated, the
    stranger ``node-a99``) in their syslog host field."""
    bundle = root / ("aggregated" if aggregated else "hostile")
    (bundle / "logs" / "node-a01").mkdir(parents=True)
    (bundle / "logs" / "node-a07").mkdir(parents=True)
    (bundle / "workload.yaml").write_text(
        "workload_id: job-4242\nscheduler: slurm\ncluster: c1\nstate: FAILED\nexit_code: '1:0'\n"
        f"start: {day}T01:20:00Z\nend: {day}T01:21:20Z\nnodes: [node-a01, node-a07]\nranks_per_node: 1\n")
    md = f"{day:%b} {day.day:2d}"  # syslog's "%b %e"
    lines = (f"{md} 01:20:30 ALL {XID}\n"
             f"{md} 01:20:31 node-a07 {XID.replace('9c:00', '1b:00')}\n")
    (bundle / "logs" / "node-a07" / "kern.log").write_text(
        f"{md} 01:20:10 node-a07 kernel: usb 1-1: new high-speed USB device number 2 using xhci_hcd\n")
    if aggregated:
        (bundle / "logs" / "_aggregated").mkdir()
        (bundle / "logs" / "_aggregated" / "syslog").write_text(
            lines + f"{md} 01:20:32 node-a99 {XID.replace('9c:00', '3a:00')}\n")
        (bundle / "logs" / "node-a01" / "kern.log").write_text(
            f"{md} 01:20:10 node-a01 kernel: usb 1-1: new high-speed USB device number 2 using xhci_hcd\n")
    else:
        (bundle / "logs" / "node-a01" / "kern.log").write_text(lines)
    return bundle


def test_replay_of_the_hostile_bundle_blames_and_targets_only_the_collecting_node(tmp_path):
    from streams.replay import replay_bundle

    bundle = hostile_bundle(tmp_path)
    att = replay_bundle(bundle).attribution
    assert (att.root_cause.code, att.culprits.hosts) == ("gpu.xid.79", ["node-a01"])
    assert {e.host for e in att.evidence} == {"node-a01"}
    (named,) = [c for c in att.coverage if c.source.startswith("host-name:")]
    assert (named.source, named.records) == ("host-name:node-a01", 2)
    assert "('ALL', 'node-a07')" in named.detail
    eng = RemediationEngine(load_policy(), fleet_size=64)
    eng.on_workload("c1", "job-4242", ["node-a01", "node-a07"], att.decided_at)
    out = eng.on_attribution(att)
    assert [(a.action, a.target.host) for a in out] == [("drain", "node-a01"), ("reboot", "node-a01")]
    # even a verdict that named node-a07 would not drain it: no deciding line was collected there
    forged = att.model_copy(update={"attribution_id": "att-forged",
                                    "culprits": att.culprits.model_copy(update={"hosts": ["node-a07"]})})
    (notify,) = RemediationEngine(load_policy(), fleet_size=64, fleet_nodes=["node-a07"]).on_attribution(forged)
    assert (notify.action, notify.target.hosts) == ("notify", ["node-a07"])
    guard = next(g for g in notify.guards if g.guard == "target_corroborated")
    assert guard.passed and guard.detail == (
        "notify only: 'node-a07' is not corroborated: its deciding evidence was collected on 'node-a01', not on it; "
        "withheld: drain (host), reboot (host); a person decides")


def test_replaying_the_hostile_bundle_twice_gives_the_same_bytes(tmp_path):
    from streams.cli import app

    bundle = hostile_bundle(tmp_path)
    runs = [CliRunner().invoke(app, ["replay", str(bundle), "--json", "--no-store"]) for _ in range(2)]
    assert [r.exit_code for r in runs] == [0, 0]
    assert runs[0].stdout == runs[1].stdout and '"hosts":["node-a01"]' in runs[0].stdout.replace(" ", "")


def test_a_declared_aggregator_names_nodes_of_the_job_and_nothing_else(tmp_path):
    from streams.replay import replay_bundle

    att = replay_bundle(hostile_bundle(tmp_path, aggregated=True)).attribution
    # node-a07 is a node of the job: the central syslog names it; ALL and node-a99 stay on the
    # collecting source, "_aggregated", which is no node name and never a target
    assert sorted(att.culprits.hosts) == ["_aggregated", "node-a07"]
    (named,) = [c for c in att.coverage if c.source.startswith("host-name:")]
    assert (named.source, named.records) == ("host-name:_aggregated", 2)
    assert "('ALL', 'node-a99')" in named.detail
    eng = RemediationEngine(load_policy(), fleet_size=64)
    eng.on_workload("c1", "job-4242", ["node-a01", "node-a07"], att.decided_at)
    targets = {(a.action, a.target.host) for a in eng.on_attribution(att)}
    assert ("drain", "node-a07") in targets and ("reboot", "node-a07") in targets
    assert {host for _, host in targets} <= {"node-a07", None}
