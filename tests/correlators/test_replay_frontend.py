"""The replay front end's light records: an Event or Observation built without a second
pydantic validation (:func:`correlators.rules.engine.light_record`) is the record the validated
constructor gives -- same field dict in the same order, same ``model_fields_set``, same twins,
same id -- and values validation would change or refuse still go through pydantic."""

from __future__ import annotations

import datetime as dt

import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.bundle import BundleConnector
from correlators.rules import load_rule_pack
from correlators.rules.engine import gc_paused, json_attributes
from schemas.records import TIME_NS_MAX, TIME_NS_MIN, Event, Observation, Position, Source, canonical_json
from schemas.utc import format_utc


def _same(a, b) -> None:
    assert list(a.__dict__) == list(b.__dict__)
    assert canonical_json(a) == canonical_json(b)
    assert a.__dict__ == b.__dict__
    assert a.model_fields_set == b.model_fields_set
    assert type(a) is type(b)


def _obs(body: str, **over) -> Observation:
    data = dict(source=Source(connector="bundle", instance="c/w"), kind="log_line",
                observed_at=1_764_464_400_123_456_789, time_source="line", time_quality=1.0,
                host="node-a01", cluster="c", workload_id="w", format="glog", body=body,
                position=Position(file="logs/node-a01/train.log", line=7))
    data.update(over)
    return Observation(**data).with_id()


def _validated(pack, obs: Observation) -> list[Event]:
    """The events of ``obs`` rebuilt through pydantic validation from their own fields."""
    out = []
    for ev in pack.extract(obs):
        data = {k: v for k, v in ev.__dict__.items() if k in ev.model_fields_set and k != "event_id"}
        out.append(Event(**data).with_id())
    return out


WATCHDOG = ("[rank3975]:[E1130 01:20:00.017061 4007 ProcessGroupNCCL.cpp:632] [Rank 3975] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=88412, OpType=ALLREDUCE, NumelIn=262144, "
            "NumelOut=262144, Timeout(ms)=600000) ran for 600123 milliseconds before timing out.")
XID = "[Mon Nov 30 01:10:00 2026] NVRM: Xid (PCI:0000:9c:00): 79, pid=0, GPU has fallen off the bus."
NCCL_WARN = ("node-a01:528:901 [3] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion from peer "
             "10.0.0.15<38560> with error 12, opcode 1, len 0, vendor err 129")


@pytest.mark.parametrize("body", [WATCHDOG, XID, NCCL_WARN, "Traceback (most recent call last):\nRuntimeError: boom"])
def test_light_events_equal_validated_events(body):
    pack = load_rule_pack()
    events = pack.extract(_obs(body))
    assert events, body
    for light, checked in zip(events, _validated(pack, _obs(body)), strict=True):
        _same(light, checked)
    if body is WATCHDOG:
        ev = events[0]
        assert ev.type == "nccl.watchdog_timeout" and ev.rank == 3975
        assert ev.began_at == 1_764_464_400_123_456_789 - 600_123 * 1_000_000
        assert ev.began_at_utc == format_utc(ev.began_at) and ev.at_utc == format_utc(ev.at)
        assert ev.event_id.startswith("evt-") and ev.evidence[0].position.line == 7


def test_an_out_of_range_value_still_goes_through_validation():
    # rank 2**31 does not fit the Int32 column: the validated path keeps what is valid and
    # says what was not, exactly as before the light path existed
    pack = load_rule_pack()
    line = WATCHDOG.replace("[rank3975]", "[rank2147483648]")
    (ev,) = pack.extract(_obs(line))
    assert ev.rank is None and "invalid" in ev.attributes


@settings(max_examples=300, deadline=None)
@given(st.integers(TIME_NS_MIN, TIME_NS_MAX), st.integers(TIME_NS_MIN, TIME_NS_MAX))
def test_format_utc_seconds_cache_gives_each_instant_its_own_text(ns, other):
    def uncached(value: int) -> str:
        seconds, frac = divmod(value, 10**9)
        stamp = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)
        return f"{stamp.year:04d}-{stamp:%m-%dT%H:%M:%S}.{frac:09d}Z"

    # alternating seconds, as an event and its back-dated start do, each read from the cache
    for value in (ns, other, ns, other):
        assert format_utc(value) == uncached(value)


def test_json_attributes_refuses_what_validation_would_change():
    assert json_attributes({"a": 1, "b": [1, {"c": "x"}]})
    assert not json_attributes({1: "int key"})
    assert not json_attributes({"big": 2**64})
    assert not json_attributes([("a", 1)])


def test_reader_observations_equal_validated_ones(tmp_path):
    (tmp_path / "logs" / "node-a01").mkdir(parents=True)
    (tmp_path / "workload.yaml").write_text(
        "workload_id: job-1\nstate: FAILED\nstart: 2026-11-30T01:00:00Z\nend: 2026-11-30T01:30:00Z\n"
        "nodes: [node-a01]\n")
    (tmp_path / "logs" / "node-a01" / "train.log").write_text("\n".join([
        "an untimed line before anything",
        XID,
        "NVRM: Xid (PCI:0000:3b:00): 31, pid=4242, name=python3, Ch 00000008",
        WATCHDOG,
        XID + " " + "x" * 70_000,
    ]) + "\n")
    conn = BundleConnector(tmp_path, keywords=load_rule_pack().prefilter_keywords)
    got = list(conn.observations())
    assert [o.position.line for o in got] == [2, 3, 4, 5]
    assert [o.time_source for o in got] == ["line", "inferred", "line", "line"]
    assert got[1].attributes == {"time_from_line": 2}
    assert got[3].attributes["truncated"] == len(XID) + 70_001
    for obs in got:
        data = {k: v for k, v in obs.__dict__.items() if k in obs.model_fields_set and k != "observation_id"}
        _same(obs, Observation(**data).with_id())
    assert gc.isenabled()


def test_gc_paused_restores_the_previous_state():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
