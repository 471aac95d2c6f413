"""connectors.counters: sysfs / perfquery / ibqueryerrors / CSV readers, the delta rules
(increase, reset, saturation, wrap, first sample), vectorised deltas == DeltaTracker, counter
series in a bundle -> fabric_counter observations -> fabric.port_errors, and the live
``faultstream connect counters`` against a real Kafka broker."""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from pathlib import Path

import polars as pl
import pytest
import yaml
from confluent_kafka import Consumer

from connectors.bundle import BundleConnector
from connectors.counters import (
    COUNTERS,
    ERROR_COUNTERS,
    CounterSample,
    DeltaTracker,
    deltas,
    is_error_counter,
    parse_ibqueryerrors,
    parse_perfquery,
    read_counter_csv,
    read_sysfs,
    samples_frame,
)
from correlators.rules import load_rule_pack
from correlators.rules.code import normalize_switch_port
from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: F401

S = 1_000_000_000
T0 = 1_796_001_600 * S  # 2026-11-30T01:20:00Z


# ----------------------------------------------------------------------------- sysfs


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_sysfs(root: Path, values: dict[str, dict[str, int | str]]) -> None:
    """``values``: "<dev>/<port>/<counters|hw_counters>/<name>" -> content."""
    for rel, v in values.items():
        _write(root / "class" / "infiniband" / rel, f"{v}\n")


def test_read_sysfs_two_devices_counters_hw_counters_bad_files(tmp_path: Path) -> None:
    fake_sysfs(tmp_path, {
        "mlx5_0/ports/1/counters/symbol_error": 3,
        "mlx5_0/ports/1/counters/link_downed": 1,
        "mlx5_0/ports/1/counters/port_xmit_data": 18446744073709551000,
        "mlx5_0/ports/1/hw_counters/local_ack_timeout_err": 7,
        "mlx5_0/ports/1/hw_counters/lifespan": 10,
        "mlx5_0/ports/1/counters/VL15_dropped": "N/A",  # garbage
        "mlx5_1/ports/1/counters/symbol_error": 0,
        "mlx5_1/ports/1/counters/port_rcv_errors": 12,
        "mlx5_1/ports/1/hw_counters/out_of_sequence": 4,
    })
    # unreadable: a dangling symlink (EINVAL-like read error; root can read chmod 000 files)
    (tmp_path / "class/infiniband/mlx5_1/ports/1/counters/port_xmit_wait").symlink_to(tmp_path / "nowhere")
    errors: list[str] = []
    samples = read_sysfs(tmp_path, "node-a01", T0, errors=errors)
    assert [(s.node, s.port, s.at_ns) for s in samples] == [("node-a01", "mlx5_0/1", T0), ("node-a01", "mlx5_1/1", T0)]
    assert samples[0].values == {"symbol_error": 3, "link_downed": 1, "port_xmit_data": 18446744073709551000,
                                 "local_ack_timeout_err": 7}
    assert samples[1].values == {"symbol_error": 0, "port_rcv_errors": 12, "out_of_sequence": 4}
    assert len(errors) == 2
    assert any("VL15_dropped: not a counter value: 'N/A'" in e for e in errors)
    assert any("port_xmit_wait: unreadable" in e for e in errors)
    # a root without class/infiniband: no samples, one error, no exception
    errors2: list[str] = []
    assert read_sysfs(tmp_path / "empty", "n", T0, errors=errors2) == [] and len(errors2) == 1


# ----------------------------------------------------------------------------- delta rules


def frame(rows: list[tuple[int, str, str, dict[str, int | None]]]) -> pl.DataFrame:
    return samples_frame([CounterSample(at, n, p, {k: v for k, v in vals.items()}) for at, n, p, vals in rows])


def test_delta_rules_increase_reset_saturation_wrap_first_sample() -> None:
    big = (1 << 64) - 100
    f = frame([
        (T0, "node-a01", "mlx5_0/1", {"symbol_error": 10, "link_downed": 250, "port_xmit_data": big, "out_of_sequence": (1 << 32) - 10}),
        (T0 + 10 * S, "node-a01", "mlx5_0/1", {"symbol_error": 25, "link_downed": 255, "port_xmit_data": 50, "out_of_sequence": 5}),
        (T0 + 20 * S, "node-a01", "mlx5_0/1", {"symbol_error": 65535, "link_downed": 255, "port_xmit_data": 80, "out_of_sequence": 8}),
        (T0 + 30 * S, "node-a01", "mlx5_0/1", {"symbol_error": 65535, "link_downed": 255, "port_xmit_data": 95, "out_of_sequence": 9}),
        (T0 + 40 * S, "node-a01", "mlx5_0/1", {"symbol_error": 4, "link_downed": 0, "port_xmit_data": 10, "out_of_sequence": 1}),
        (T0 + 5 * S, "leaf-01", "17", {"symbol_error": 1}),
    ])
    d = deltas(f)
    # the first sample of each port has no delta; leaf-01/17 has only one sample
    assert d["port"].to_list() == ["mlx5_0/1"] * 4
    rows = d.rows(named=True)
    # normal increase; 8-bit link_downed saturates at 255; 64-bit port_xmit_data wraps (+150);
    # the 32-bit mlx5 queue counter wraps (+15)
    assert rows[0] == {"at_ns": T0 + 10 * S, "node": "node-a01", "port": "mlx5_0/1", "interval_s": 10.0,
                       "reset": False, "saturated": True, "link_downed": 5, "out_of_sequence": 15,
                       "port_xmit_data": 150, "symbol_error": 15}
    # symbol_error reaches 65535 (16-bit max): saturated, delta a lower bound
    assert (rows[1]["symbol_error"], rows[1]["saturated"], rows[1]["reset"]) == (65510, True, False)
    # stuck at the maximum: delta 0, still saturated
    assert (rows[2]["symbol_error"], rows[2]["link_downed"], rows[2]["saturated"]) == (0, 0, True)
    # every counter went back (perfquery -R / reboot): delta = the new value, flagged reset
    assert rows[3] == {"at_ns": T0 + 40 * S, "node": "node-a01", "port": "mlx5_0/1", "interval_s": 10.0,
                       "reset": True, "saturated": False, "link_downed": 0, "out_of_sequence": 1,
                       "port_xmit_data": 10, "symbol_error": 4}


def test_missing_values_carry_forward_and_lone_decrease_is_reset() -> None:
    f = frame([
        (T0, "n", "p", {"symbol_error": 5, "port_rcv_data": 1000}),
        (T0 + S, "n", "p", {"symbol_error": None, "port_rcv_data": 1100}),  # file unreadable this time
        (T0 + 2 * S, "n", "p", {"symbol_error": 9, "port_rcv_data": 900}),  # 64-bit: 900 < 1100 is a reset
    ])
    rows = deltas(f).rows(named=True)
    assert rows[0]["symbol_error"] is None and rows[0]["port_rcv_data"] == 100
    assert (rows[1]["symbol_error"], rows[1]["port_rcv_data"], rows[1]["reset"]) == (4, 900, True)


def test_tracker_equals_vectorised_deltas_on_the_same_series() -> None:
    rng = random.Random(7)
    names = ["symbol_error", "link_downed", "port_xmit_data", "out_of_sequence", "port_xmit_wait"]
    ports = [("node-a01", "mlx5_0/1"), ("node-a01", "mlx5_1/1"), ("leaf-01", "17")]
    state = {p: {"symbol_error": 65000, "link_downed": 0, "port_xmit_data": (1 << 64) - 5000,
                 "out_of_sequence": (1 << 32) - 50, "port_xmit_wait": 0} for p in ports}
    polls: list[list[CounterSample]] = []
    for t in range(60):
        batch = []
        for p in ports:
            v = state[p]
            v["symbol_error"] = min(65535, v["symbol_error"] + rng.choice([0, 0, 3, 400]))
            v["link_downed"] = min(255, v["link_downed"] + rng.choice([0, 0, 1]))
            v["port_xmit_data"] = (v["port_xmit_data"] + rng.randrange(100, 2000)) % (1 << 64)
            v["out_of_sequence"] = (v["out_of_sequence"] + rng.randrange(0, 9)) % (1 << 32)
            v["port_xmit_wait"] += rng.randrange(0, 50)
            if rng.random() < 0.05:  # counters cleared
                v.update(symbol_error=0, link_downed=0, port_xmit_wait=0)
            vals = dict(v)
            if rng.random() < 0.1:
                del vals[rng.choice(names)]  # an unreadable file
            batch.append(CounterSample(T0 + t * 10 * S + rng.randrange(0, S), p[0], p[1], vals))
        polls.append(batch)
    everything = [s for b in polls for s in b]
    rng.shuffle(everything)
    vec = deltas(samples_frame(everything, names))
    tracker = DeltaTracker()
    live = []
    for b in polls:
        live.extend(tracker.update(b))
        tracker = DeltaTracker(json.loads(json.dumps(tracker.state())))  # survives a restart
    live.sort(key=lambda d: (d.node, d.port, d.at_ns))
    assert vec.height == len(live) == 3 * 59
    for row, d in zip(vec.iter_rows(named=True), live):
        assert (row["at_ns"], row["node"], row["port"], row["reset"], row["saturated"]) == (
            d.at_ns, d.node, d.port, d.reset, d.saturated)
        assert row["interval_s"] == pytest.approx(d.interval_s, abs=1e-9)
        assert {k: row[k] for k in names if row[k] is not None} == d.deltas
    assert vec["reset"].sum() > 0 and vec["saturated"].sum() > 0
    # stale or repeated samples are ignored
    assert tracker.update(polls[-1]) == [] and tracker.stale == 3


def test_deltas_of_500k_samples_are_one_per_sample_after_the_first() -> None:
    """A fleet-sized table (2,000 ports x 250 polls) in one vectorised pass; its speed is
    bench/fabric.py's to measure."""
    n_ports, n = 2000, 250  # 500k samples
    f = pl.DataFrame({
        "at_ns": pl.int_range(0, n_ports * n, eager=True) % n * 10 * S + T0,
        "node": pl.Series([f"node-{i // 4:04d}" for i in range(n_ports)]).gather(pl.int_range(0, n_ports * n, eager=True) // n),
        "port": pl.Series([f"mlx5_{i % 4}/1" for i in range(n_ports)]).gather(pl.int_range(0, n_ports * n, eager=True) // n),
        **{c: pl.int_range(0, n_ports * n, eager=True, dtype=pl.UInt64) for c in ("symbol_error", "port_xmit_data", "link_downed")},
    })
    out = deltas(f)
    assert out.height == n_ports * (n - 1)


# ----------------------------------------------------------------------------- tools


PERFQUERY = """\
# Port counters: Lid 12 port 1 (CapMask: 0x5A00)
PortSelect:......................1
CounterSelect:...................0x0000
SymbolErrorCounter:..............25
LinkErrorRecoveryCounter:........2
LinkDownedCounter:...............3
PortRcvErrors:...................7
PortRcvRemotePhysicalErrors:.....0
PortRcvSwitchRelayErrors:........0
PortXmitDiscards:................1
PortXmitConstraintErrors:........0
PortRcvConstraintErrors:.........0
CounterSelect2:..................0x00
LocalLinkIntegrityErrors:........0
ExcessiveBufferOverrunErrors:....0
QP1Dropped:......................0
VL15Dropped:.....................0
PortXmitData:....................4294967295
PortRcvData:.....................4294967295
PortXmitPkts:....................191340291
PortRcvPkts:.....................183422940
PortXmitWait:....................12031
# Port extended counters: Lid 12 port 1 (CapMask: 0x5A00)
PortSelect:......................1
CounterSelect:...................0x0000
PortXmitData:....................987654321012
PortRcvData:.....................876543210987
PortXmitPkts:....................191340291
PortRcvPkts:.....................183422940
PortUnicastXmitPkts:.............191338000
PortUnicastRcvPkts:..............183420000
PortMulticastXmitPkts:...........2291
PortMulticastRcvPkts:............2940
ibwarn: [1234] mad_rpc: _do_madrpc failed; dport (Lid 12)
"""


def test_parse_perfquery_basic_and_extended_blocks() -> None:
    errors: list[str] = []
    (s,) = parse_perfquery(PERFQUERY, at_ns=T0, node="node-a01", errors=errors)
    assert (s.node, s.port, s.at_ns) == ("node-a01", "1", T0)
    assert s.values["symbol_error"] == 25 and s.values["link_error_recovery"] == 2
    assert s.values["link_downed"] == 3 and s.values["port_rcv_errors"] == 7
    assert s.values["port_xmit_discards"] == 1 and s.values["qp1_dropped"] == 0
    assert s.values["port_xmit_wait"] == 12031
    # the extended (64-bit) block wins over the saturated 32-bit data counters
    assert s.values["port_xmit_data"] == 987654321012 and s.values["unicast_rcv_packets"] == 183420000
    assert "CounterSelect" not in s.values and "counter_select" not in s.values
    assert len(errors) == 1 and "ibwarn" in errors[0]
    # old short names (infiniband-diags < 1.5) and a LID-only node name
    old = "# Port counters: Lid 936 port 1\nPortSelect:......................1\nSymbolErrors:....................65535\nLinkDowned:......................4\nXmtData:.........................905972985\n"
    (o,) = parse_perfquery(old, at_ns=T0)
    assert (o.node, o.port, o.values) == ("lid-936", "1", {"symbol_error": 65535, "link_downed": 4, "port_xmit_data": 905972985})


IBQUERYERRORS = """\
Errors for 0x0002c90300a1b2c3 "leaf-01"
   GUID 0x0002c90300a1b2c3 port ALL: [SymbolErrorCounter == 25] [LinkDownedCounter == 3]
   GUID 0x0002c90300a1b2c3 port 17: [SymbolErrorCounter == 25] [LinkDownedCounter == 3]
       Link info:      4   17[  ] ==( 4X      53.125 Gbps Active/  LinkUp)==>  0x0002c90300a1b2d0      5    1[  ] "node-a01 mlx5_0" ( )
   GUID 0x0002c90300a1b2c3 port 18: [PortXmitWait == 6130712 (5.847M)] [PortXmitDiscards == 12]
Errors for "node-a01 mlx5_0"
   GUID 0x0002c90300a1b2d0 port 1: [PortRcvErrors == 9] [PortRcvRemotePhysicalErrors == 2]
"leaf-02" port 5: [SymbolErrors == 4]
   GUID 0x0002c90300a1b2c3 port 19 [garbled
this line is not ibqueryerrors output

## Summary: 3 nodes checked, 3 bad nodes found
##          60 ports checked, 4 ports have errors beyond threshold
## Thresholds:
## Suppressed:
"""


def test_parse_ibqueryerrors_switch_ca_one_line_and_garbage() -> None:
    errors: list[str] = []
    got = {(s.node, s.port): s.values for s in parse_ibqueryerrors(IBQUERYERRORS, at_ns=T0, errors=errors)}
    assert got == {
        ("leaf-01", "17"): {"symbol_error": 25, "link_downed": 3},
        ("leaf-01", "18"): {"port_xmit_wait": 6130712, "port_xmit_discards": 12},
        ("node-a01", "mlx5_0/1"): {"port_rcv_errors": 9, "port_rcv_remote_physical_errors": 2},
        ("leaf-02", "5"): {"symbol_error": 4},
    }
    assert len(errors) == 2, errors


# ----------------------------------------------------------------------------- CSV + bundle


def test_read_counter_csv_times_and_malformed_rows(tmp_path: Path) -> None:
    csv = ("time,node,port,symbol_error,PortXmitData\n"
           "2026-11-30T01:20:00Z,leaf-01,17,5,100\n"
           "1796001610.25,leaf-01,17,7,200\n"
           "2026-11-30 01:20:20.5,leaf-01,17,,300\n"
           "yesterday,leaf-01,17,9,400\n"
           "2026-11-30T01:20:40Z,leaf-01,17,-3,500\n"
           "2026-11-30T01:20:50Z,leaf-01,,9,600\n"
           "2026-11-30T02:21:00+01:00,leaf-01,17,12,700\n")
    t = read_counter_csv(csv.encode())
    assert (t.rows, t.unparsed) == (7, 3)
    assert t.counters == ["symbol_error", "port_xmit_data"]
    assert t.frame["at_ns"].to_list() == [T0, T0 + 10 * S + S // 4, T0 + 20 * S + S // 2, T0 + 60 * S]
    assert t.frame["line"].to_list() == [2, 3, 4, 8]
    assert t.frame["symbol_error"].to_list() == [5, 7, None, 12]
    assert "3 malformed rows" in t.notes[0]
    bad = read_counter_csv(b"a,b\n1,2\n")
    assert bad.frame.height == 0 and bad.unparsed == 1 and "header" in bad.notes[0]


WORKLOAD = {
    "workload_id": "job-2001", "scheduler": "slurm", "cluster": "c1", "state": "FAILED",
    "start": "2026-11-30T01:20:00Z", "end": "2026-11-30T01:30:00Z",
    "nodes": ["node-a01", "node-a02"], "ranks_per_node": 8,
}


def test_counter_series_in_bundle_to_observations_and_port_errors(tmp_path: Path) -> None:
    (tmp_path / "workload.yaml").write_text(yaml.safe_dump(WORKLOAD))
    sw = tmp_path / "fabric" / "leaf-01"
    sw.mkdir(parents=True)
    rows = ["time,node,port,symbol_error,link_downed,port_xmit_data,port_xmit_wait"]
    for i in range(6):
        t = f"2026-11-30T01:2{i}:00Z"
        sym = 0 if i < 3 else 25 * (i - 2)  # errors start at 01:23
        rows.append(f"{t},leaf-01,17,{sym},{1 if i >= 4 else 0},{1000 * i},{7 * i}")
        rows.append(f"{t},leaf-01,18,0,0,{2000 * i},{3 * i}")
    rows.append("garbage,leaf-01,18,1,1,1,1")
    (sw / "ports.counters.csv").write_text("\n".join(rows) + "\n")
    host = tmp_path / "metrics" / "node-a01"
    host.mkdir(parents=True)
    (host / "hca.counters.csv").write_text(
        "time,port,local_ack_timeout_err,rx_read_requests\n"
        "1796001600,mlx5_0/1,10,100\n1796001610,mlx5_0/1,10,200\n1796001620,mlx5_0/1,3,300\n")
    conn = BundleConnector(tmp_path)
    obs = list(conn.observations())
    assert all(o.kind == "fabric_counter" and o.body is None for o in obs)
    sw_obs = [o for o in obs if o.host == "leaf-01"]
    # port 17: three samples with error increases; port 18 never errs: nothing materialised
    assert [(o.fabric_port, o.observed_at, o.metric) for o in sw_obs] == [
        ("leaf-01/17", T0 + 180 * S, {"symbol_error": 25.0, "port_xmit_data": 1000.0, "port_xmit_wait": 7.0}),
        ("leaf-01/17", T0 + 240 * S, {"symbol_error": 25.0, "link_downed": 1.0, "port_xmit_data": 1000.0, "port_xmit_wait": 7.0}),
        ("leaf-01/17", T0 + 300 * S, {"symbol_error": 25.0, "port_xmit_data": 1000.0, "port_xmit_wait": 7.0}),
    ]
    o = sw_obs[1]
    assert o.attributes == {"port": "17", "node": "leaf-01", "interval_s": 60.0, "reset": False,
                            "saturated": False, "side": "switch"}
    assert (o.time_source, o.time_quality, o.cluster, o.workload_id) == ("line", 1.0, "c1", "job-2001")
    assert o.position.file == "fabric/leaf-01/ports.counters.csv" and o.position.line == 10
    # host side: node from the directory, the reset (10 -> 3) is materialised with its delta
    (h,) = [o for o in obs if o.host == "node-a01"]
    assert (h.fabric_port, h.metric, h.attributes["reset"], h.attributes["side"]) == (
        "node-a01/mlx5_0/1", {"local_ack_timeout_err": 3.0, "rx_read_requests": 100.0}, True, "host")
    cov = {c.source: c for c in conn.coverage()}
    sc = cov["file:fabric/leaf-01/ports.counters.csv"]
    assert (sc.status, sc.records, sc.unparsed) == ("present", 13, 1)
    hc = cov["file:metrics/node-a01/hca.counters.csv"]
    assert (hc.status, hc.records, hc.unparsed) == ("present", 3, 0)
    # extraction: one fabric.port_errors event per sample, deltas of error counters only
    pack = load_rule_pack()
    (ev,) = pack.extract(o)
    assert ev.type == "fabric.port_errors" and ev.fabric_port == "leaf-01/17" and ev.host == "leaf-01"
    assert ev.attributes == {"deltas": {"link_downed": 1, "symbol_error": 25}, "interval_s": 60.0,
                             "reset": False, "saturated": False, "port": "17", "node": "leaf-01", "side": "switch"}
    assert ev.at == T0 + 240 * S and ev.evidence[0].observation_id == o.observation_id
    (hev,) = pack.extract(h)
    assert hev.attributes["deltas"] == {"local_ack_timeout_err": 3} and hev.attributes["reset"] is True
    # the same bundle read twice gives the same ids
    assert [x.observation_id for x in BundleConnector(tmp_path).observations()] == [x.observation_id for x in obs]


def _series_csv(node: str | None, ports: list[str], polls: int, *, bumps: dict | None = None,
                start: int = 1_796_001_600, node_col: bool = True) -> str:
    """A time-major counter series (all ports at t, then at t+10 s, ...); ``bumps``:
    (port, poll) -> (counter, increase) from that poll on."""
    names = ["symbol_error", "link_downed", "port_xmit_data"]
    head = ["time", "node", "port", *names] if node_col else ["time", "port", *names]
    rows = [",".join(head)]
    vals = {p: {n: 0 for n in names} for p in ports}
    for t in range(polls):
        for p in ports:
            v = vals[p]
            v["port_xmit_data"] += 1000
            for (bp, bt), (c, inc) in (bumps or {}).items():
                if bp == p and bt == t:
                    v[c] = v[c] + inc if inc >= 0 else 0  # a negative bump: a reset to 0
            cells = [str(start + 10 * t)] + ([node or ""] if node_col else []) + [p] + [str(v[n]) for n in names]
            rows.append(",".join(cells))
    return "\n".join(rows) + "\n"


def by_file_of(obs: list[dict], rel: str) -> list[dict]:
    return [o for o in obs if o["position"]["file"] == rel]


def test_counter_files_batched_equal_file_by_file(tmp_path: Path, monkeypatch) -> None:
    """Counter files read in batches (one polars pass per batch) give exactly the
    observations (ids, positions, order), coverage and line count of reading them one by one:
    a gzip file, malformed rows (in a batch and, with a bad value, by the per-file fallback),
    headers that differ, a file without a node column, a log file between counter files,
    blank lines, files that cannot be batched (quotes, CRLF, empty, header only, corrupt gzip)
    and a port that appears in two files (two series, not one)."""
    import gzip as gz

    (tmp_path / "workload.yaml").write_text(yaml.safe_dump(WORKLOAD))

    def put(rel: str, data: str | bytes) -> None:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)

    flap = {("17", 3): ("symbol_error", 25), ("17", 4): ("link_downed", 1), ("18", 2): ("symbol_error", 5),
            ("18", 5): ("symbol_error", -1)}  # port 18: errors, then a reset
    put("fabric/leaf-01/ports.counters.csv", _series_csv("leaf-01", ["17", "18", "3"], 8, bumps=flap))
    put("fabric/leaf-02/ports.counters.csv",  # gzip, same header: in the same batch
        gz.compress(_series_csv("leaf-02", ["1", "2"], 6, bumps={("2", 2): ("link_downed", 1)}).encode()))
    bad_rows = _series_csv("leaf-03", ["5"], 6, bumps={("5", 4): ("symbol_error", 3)}).splitlines()
    bad_rows.insert(3, "yesterday,leaf-03,5,1,1,1")  # bad time
    bad_rows.insert(5, "1796001635,leaf-03,,1,1,1")  # no port
    bad_rows.append("1796001700,leaf-03,5,9")  # short row: missing counters are null
    put("fabric/leaf-03/ports.counters.csv", "\n".join(bad_rows))  # no final newline
    # the same port as leaf-01's file, and node left empty on a row (directory name)
    put("fabric/leaf-04/ports.counters.csv",
        _series_csv("leaf-01", ["17"], 4, bumps={("17", 1): ("symbol_error", 2)}).replace(",leaf-01,17,0,0,2000", ",,17,0,0,2000"))
    put("fabric/leaf-05/ports.counters.csv",  # quotes: read on its own
        _series_csv("leaf-05", ["1"], 4, bumps={("1", 2): ("symbol_error", 1)}).replace(",1,0,0,", ',"1",0,0,'))
    put("fabric/leaf-06/ports.counters.csv", "")  # empty
    put("fabric/leaf-07/ports.counters.csv", "time,node,port,symbol_error\n")  # header only
    put("fabric/leaf-08/ports.counters.csv", _series_csv("leaf-08", ["1"], 4, bumps={("1", 1): ("symbol_error", 1)}))
    put("fabric/leaf-09/ports.counters.csv", b"\x1f\x8b\x08garbage")  # corrupt gzip
    put("fabric/leaf-10/ports.counters.csv",  # CRLF
        _series_csv("leaf-10", ["1"], 4, bumps={("1", 1): ("symbol_error", 4)}).replace("\n", "\r\n"))
    # a different header (other counters, other order): its own batch
    put("fabric/spine-01/ports.counters.csv",
        "time,node,port,port_rcv_errors,symbol_error\n"
        + "".join(f"{1_796_001_600 + 10 * t},spine-01,{p},{t // 3},{t if p == 2 else 0}\n"
                  for t in range(5) for p in (1, 2)))
    put("fabric/spine-02/ports.counters.csv",  # blank lines: rows of nulls, malformed
        "time,node,port,port_rcv_errors,symbol_error\n\n1796001600,spine-02,1,0,0\n\n1796001610,spine-02,1,2,0\n\n")
    put("logs/node-a01/dmesg.log", "[Mon Nov 30 01:21:00 2026] mlx5_core 0000:0c:00.0 ibp12s0: Link down\n")
    # no node column: the directory names the node
    for i, bumps in ((1, {2: ("symbol_error", 2)}), (2, {2: ("link_downed", 1)}),
                     (4, {1: ("symbol_error", 3), 3: ("symbol_error", -1)})):
        put(f"metrics/node-a0{i}/hca.counters.csv",
            _series_csv(None, ["mlx5_0/1"], 5, bumps={("mlx5_0/1", t): b for t, b in bumps.items()}, node_col=False))
    put("metrics/node-a03/hca.counters.csv",  # a bad value: its whole batch is read file by file
        _series_csv(None, ["mlx5_0/1"], 5, bumps={("mlx5_0/1", 1): ("symbol_error", 7)}, node_col=False)
        .replace("1796001620,mlx5_0/1,7", "1796001620,mlx5_0/1,N/A"))
    put("metrics/node-a05/hca.counters.csv",  # a blank line
        _series_csv(None, ["mlx5_0/1"], 4, bumps={("mlx5_0/1", 3): ("symbol_error", 1)}, node_col=False)
        .replace("\n1796001620", "\n\n1796001620"))
    put("metrics/node-a06/hca.counters.csv",
        _series_csv(None, ["mlx5_0/1"], 4, bumps={("mlx5_0/1", 3): ("link_downed", 2)}, node_col=False))

    import connectors.bundle as bundle_mod

    calls: list[tuple[int, bool]] = []
    real = bundle_mod.read_counter_batch

    def spy(files, **kw):
        out = real(files, **kw)
        calls.append((len(files), out is not None))
        return out

    monkeypatch.setattr(bundle_mod, "read_counter_batch", spy)

    def read(batch_bytes: int):
        conn = BundleConnector(tmp_path)
        conn.counter_batch_bytes = batch_bytes
        obs = list(conn.observations())
        return ([o.model_dump() for o in obs], [c.model_dump() for c in conn.coverage()], conn.lines_read)

    one_by_one = read(0)
    assert calls == []
    batched = read(32 << 20)
    # leaf-01..04 (leaf-02 gzip); spine-01, -02; node-a01..a06 (a bad value in a03: file by file)
    assert sorted(calls) == sorted([(4, True), (2, True), (6, False)])
    assert batched[0] == one_by_one[0]
    assert batched[1] == one_by_one[1]
    assert batched[2] == one_by_one[2]
    cov = {c["source"].removeprefix("file:"): c for c in batched[1]}
    assert cov["fabric/leaf-02/ports.counters.csv"]["detail"].startswith("gzip; counter series: 12 samples")
    assert (cov["fabric/leaf-03/ports.counters.csv"]["records"], cov["fabric/leaf-03/ports.counters.csv"]["unparsed"]) == (9, 2)
    assert "2 malformed rows skipped (1 bad times, 1 without node/port)" in cov["fabric/leaf-03/ports.counters.csv"]["detail"]
    assert cov["metrics/node-a03/hca.counters.csv"]["unparsed"] == 1
    assert (cov["fabric/spine-02/ports.counters.csv"]["records"], cov["fabric/spine-02/ports.counters.csv"]["unparsed"]) == (5, 3)
    assert [o["position"]["line"] for o in by_file_of(batched[0], "fabric/spine-02/ports.counters.csv")] == [5]
    assert [cov[f"fabric/leaf-0{i}/ports.counters.csv"]["status"] for i in (6, 7, 9)] == ["empty", "empty", "failed"]
    # a port in two files makes two series: leaf-04's first row has no delta
    by_file: dict[str, list] = {}
    for o in batched[0]:
        by_file.setdefault(o["position"]["file"], []).append(o)
    assert [(o["fabric_port"], o["position"]["line"], o["metric"]) for o in by_file["fabric/leaf-04/ports.counters.csv"]] == [
        ("leaf-01/17", 3, {"symbol_error": 2.0, "port_xmit_data": 1000.0})]
    assert [o["fabric_port"] for o in by_file["fabric/leaf-01/ports.counters.csv"]] == [
        "leaf-01/17", "leaf-01/17", "leaf-01/18", "leaf-01/18"]
    assert by_file["fabric/leaf-01/ports.counters.csv"][3]["attributes"]["reset"] is True
    assert [o["host"] for o in by_file["metrics/node-a02/hca.counters.csv"]] == ["node-a02"]
    assert [o["attributes"]["reset"] for o in by_file["metrics/node-a04/hca.counters.csv"]] == [False, True]
    files = list(by_file)
    assert files == sorted(files)  # files in bundle order
    assert {"fabric/leaf-05/ports.counters.csv", "fabric/leaf-10/ports.counters.csv",
            "metrics/node-a05/hca.counters.csv", "metrics/node-a03/hca.counters.csv"} <= set(files)
    assert [o["host"] for o in by_file_of(batched[0], "metrics/node-a03/hca.counters.csv")] == ["node-a03"]
    # a batch bounded to a few hundred bytes: smaller batches, the same result
    calls.clear()
    small = read(600)
    assert small == one_by_one
    assert calls and all(n < 4 for n, _ in calls)


def test_rule_names_exactly_the_error_counters() -> None:
    rule = load_rule_pack().rule("fabric.port_errors")
    assert sorted(c.metric for c in rule.when_any) == sorted(ERROR_COUNTERS)
    assert all(c.op == ">" and c.value == 0 for c in rule.when_any)
    assert not is_error_counter("port_xmit_wait") and not is_error_counter("port_rcv_data")
    assert not is_error_counter("np_cnp_sent") and not is_error_counter("some_vendor_rx_bytes")
    assert is_error_counter("symbol_error") and is_error_counter("some_vendor_crc_errors")
    assert COUNTERS["symbol_error"].max == 65535 and COUNTERS["link_downed"].max == 255
    assert COUNTERS["local_link_integrity_errors"].max == 15 and not COUNTERS["port_xmit_data"].saturates


def test_switch_port_normalisation() -> None:
    assert [normalize_switch_port(p) for p in ("IB1/17", "ib port 1/17", "IB1/17/2", "IB3/17", "17",
                                               "Eth1/12", "swp12", "Ethernet48")] == [
        "17", "17", "17/2", "3/17", "17", "Eth1/12", "swp12", "Ethernet48"]


# ----------------------------------------------------------------------------- live connector


def consume(config: dict, topic: str, expect: int, timeout_s: float = 30.0, settle_s: float = 0.5) -> list[dict]:
    c = Consumer(dict(config, **{"group.id": f"test-{uuid.uuid4().hex}", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False}))
    c.subscribe([topic])
    out, deadline, settle_until = [], time.monotonic() + timeout_s, None
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append((msg.key().decode(), json.loads(msg.value())))
            if len(out) >= expect:
                settle_until = settle_until or time.monotonic() + settle_s
                if time.monotonic() >= settle_until:
                    break
    finally:
        c.close()
    return out


def test_cli_connect_counters_once_and_restart_from_state(tmp_path, kafka_bootstrap, kafka_config,  # noqa: F811
                                                         kafka_topic_factory, monkeypatch):  # noqa: F811
    from typer.testing import CliRunner

    import connectors.counters as counters_mod
    from connectors.registry import connectors
    from streams.cli import app

    assert "counters" in connectors()
    topic = kafka_topic_factory("counters")
    root = tmp_path / "sys"
    fake_sysfs(root, {
        "mlx5_0/ports/1/counters/symbol_error": 3, "mlx5_0/ports/1/counters/port_xmit_data": 1000,
        "mlx5_1/ports/1/counters/symbol_error": 0, "mlx5_1/ports/1/hw_counters/local_ack_timeout_err": 5,
    })
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() or kafka_bootstrap
    polls: list[int] = []
    poll = counters_mod.CountersConnector.poll

    def moving(self):  # between the two polls of --once the counters move
        polls.append(self.polls)
        if self.polls == 1:
            fake_sysfs(root, {"mlx5_0/ports/1/counters/symbol_error": 28, "mlx5_0/ports/1/counters/port_xmit_data": 5000,
                              "mlx5_1/ports/1/hw_counters/local_ack_timeout_err": 5})
        return poll(self)

    monkeypatch.setattr(counters_mod.CountersConnector, "poll", moving)
    state = tmp_path / "state.json"
    args = ["connect", "counters", "--sysfs-root", str(root), "--node", "node-a01", "--cluster", "c1",
            "--once", "--interval", "0.2", "--cursor", str(state), "--bootstrap", bootstrap, "--topic", topic]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert polls == [0, 1] and "published 2 counter deltas from 4 port samples (2 polls" in first.output
    got = consume(kafka_config, topic, 2)
    by_port = {v["attributes"]["port"]: (k, v) for k, v in got}
    assert set(by_port) == {"mlx5_0/1", "mlx5_1/1"}
    k0, o0 = by_port["mlx5_0/1"]
    assert k0 == "node-a01" and o0["kind"] == "fabric_counter" and o0["fabric_port"] == "node-a01/mlx5_0/1"
    assert o0["metric"] == {"symbol_error": 25.0, "port_xmit_data": 4000.0}
    assert o0["cluster"] == "c1" and o0["format"] == "sysfs" and o0["attributes"]["side"] == "host"
    # zeros are published too: the port is watched
    assert by_port["mlx5_1/1"][1]["metric"] == {"symbol_error": 0.0, "local_ack_timeout_err": 0.0}
    saved = json.loads(state.read_text())
    assert {p["port"]: p["values"]["symbol_error"] for p in saved["tracker"]["ports"]} == {"mlx5_0/1": 28, "mlx5_1/1": 0}

    # the connector is stopped; the link takes errors; a restart computes the delta from the state
    fake_sysfs(root, {"mlx5_0/ports/1/counters/symbol_error": 40, "mlx5_0/ports/1/counters/link_downed": 2})
    polls.clear()
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert polls == [0] and "(1 polls" in again.output  # deltas on the first poll: nothing to prime
    got = consume(kafka_config, topic, 4)
    (k, o) = [(k, v) for k, v in got if v["attributes"]["port"] == "mlx5_0/1" and v["metric"].get("symbol_error") == 12.0][0]
    assert o["metric"]["symbol_error"] == 12.0 and "link_downed" not in o["metric"]  # new counter: primes only
    ev = load_rule_pack().extract(__import__("schemas.records", fromlist=["Observation"]).Observation.model_validate(o))
    assert [(e.type, e.attributes["deltas"], e.fabric_port) for e in ev] == [
        ("fabric.port_errors", {"symbol_error": 12}, "node-a01/mlx5_0/1")]

    # nothing to read: a clear error at once, exit code 2, nothing polled
    bad = CliRunner().invoke(app, ["connect", "counters", "--sysfs-root", str(tmp_path / "none"), "--node", "n",
                                   "--cluster", "c1", "--once", "--interval", "1", "--bootstrap", bootstrap,
                                   "--topic", topic])
    assert bad.exit_code == 2
    assert bad.output.strip() == f"error: {tmp_path / 'none'}: no class/infiniband directory (is this the sysfs mount of a host with RDMA devices?)"


def test_connector_reads_ibqueryerrors_file_with_state(tmp_path: Path) -> None:
    from connectors.counters import CountersConnector
    from connectors.cursor import CursorStore

    f = tmp_path / "iqe.txt"
    f.write_text(IBQUERYERRORS)
    store = CursorStore(tmp_path / "st.json")
    clock = iter([T0, T0 + 60 * S])
    c = CountersConnector(node="ufm-01", ibqueryerrors=f, cursor=store, clock=lambda: next(clock))
    assert c.poll() == [] and len(c.tracker) == 4  # primes
    store.save(c.checkpoint())
    f.write_text(IBQUERYERRORS.replace("[SymbolErrorCounter == 25] [LinkDownedCounter == 3]\n       Link",
                                       "[SymbolErrorCounter == 31] [LinkDownedCounter == 4]\n       Link"))
    c2 = CountersConnector(node="ufm-01", ibqueryerrors=f, cursor=store, clock=lambda: next(clock))
    obs = {o.fabric_port: o for o in c2.poll()}
    o = obs["leaf-01/17"]
    assert o.metric == {"symbol_error": 6.0, "link_downed": 1.0} and o.attributes["side"] == "switch"
    assert o.attributes["interval_s"] == 60.0 and obs["node-a01/mlx5_0/1"].attributes["side"] == "host"
    (cov,) = c2.coverage()
    assert cov.unparsed == 2 and cov.status == "present" and cov.source == "counters:ufm-01"


@pytest.mark.parametrize("make, reason", [
    (lambda d: d / "absent.txt", "{path}: no such file"),
    (lambda d: d, "{path}: is a directory"),
    (lambda d: (d / "core").write_bytes(b"\x7fELF\x00\x01" * 100) and d / "core", "{path}: binary content, not perfquery output"),
], ids=["missing", "directory", "binary"])
def test_a_bad_counter_file_is_one_error_line_before_kafka_is_tried(tmp_path, make, reason) -> None:
    from typer.testing import CliRunner

    from streams.cli import app

    path = make(tmp_path)
    result = CliRunner().invoke(app, ["connect", "counters", "--cluster", "c1", "--node", "node-a01", "--perfquery",
                                      str(path), "--bootstrap", "127.0.0.1:9", "--timeout", "0.5"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: " + reason.format(path=path)
