"""The fast counter path gives exactly what the plain one gives.

``error_deltas`` (integer keys, no string sort, the delta rules only on rows where an error
counter moved or a counter went down) == ``deltas(...).filter(error_condition(...))``:
values, types and order, on generated frames with wraps, resets, saturation, duplicate
times, missing readings and any row order; whole-second epoch times read as integers ==
the text reader; a batch of poll-order counter files gives the same Observations as the
plain delta path.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import connectors.counter_readers as readers
import connectors.counter_series as series
from connectors.counter_readers import (
    _time_ns,
    _time_ns_text,
    read_counter_batch,
    read_counter_csv,
    table_observations,
)
from connectors.counter_series import (
    COUNTERS,
    deltas,
    error_condition,
    error_deltas,
    plain_integers,
)
from schemas.records import Source

S = 1_000_000_000
T0 = 1_796_001_600 * S

#: counters of every kind of rule: 8/16-bit saturating error counters, a 32-bit wrapping
#: error counter (mlx5 hw_counters), a 32-bit saturating traffic counter and a 64-bit
#: wrapping one, and a name the table does not know (64-bit wrapping error counter)
KINDS = ["link_downed", "symbol_error", "out_of_sequence", "port_xmit_wait", "port_xmit_data", "vendor_thing"]


def _values(name: str) -> st.SearchStrategy[int]:
    spec = COUNTERS.get(name)
    top = (1 << 64) - 1 if spec is None else spec.max
    # few distinct values, so rows repeat (no change), go up, go down, sit at the maximum and
    # wrap just past it
    return st.sampled_from(sorted({0, 1, 2, 5, 7, top - 3, top - 1, top, min(top, 1 << 20)}))


@st.composite
def counter_frames(draw) -> tuple[pl.DataFrame, list[str], list[str]]:
    """A counter frame in any row order: 1-4 ports (digit ports, ``01`` next to ``1``, an
    HCA port), 0-2 files (``_file``), repeated and unordered times, some missing values."""
    ports = draw(st.lists(st.sampled_from([("leaf-01", "1"), ("leaf-01", "01"), ("leaf-01", "17"),
                                           ("leaf-02", "1"), ("node-a01", "mlx5_0/1"), (" leaf-01", "1")]),
                          min_size=1, max_size=4, unique=True))
    files = draw(st.integers(0, 2))
    counters = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4, unique=True))
    n = draw(st.integers(0, 40))
    nulls = draw(st.booleans())
    rows = []
    for i in range(n):
        node, port = draw(st.sampled_from(ports))
        row = {"at_ns": T0 + draw(st.integers(0, 6)) * 10 * S, "node": node, "port": port, "line": i + 2}
        if files:
            row["_file"] = draw(st.integers(0, files - 1))
        for c in counters:
            missing = nulls and draw(st.integers(0, 9)) == 0
            row[c] = None if missing else draw(_values(c))
        rows.append(row)
    schema = {"at_ns": pl.Int64, "node": pl.String, "port": pl.String, "line": pl.Int64}
    if files:
        schema["_file"] = pl.UInt32
    schema.update((c, pl.UInt64) for c in counters)
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    if draw(st.booleans()):  # as a collector writes them: sorted by time, ports in file order
        frame = frame.sort("at_ns", maintain_order=True)
    by = ["_file"] if files else []
    return frame, counters, by


def _plain(frame: pl.DataFrame, counters: list[str], keep: list[str], by: list[str]) -> pl.DataFrame:
    return deltas(frame, counters=counters, keep=keep, by=by).filter(error_condition(counters))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(counter_frames())
@pytest.mark.slow
def test_error_deltas_equal_the_plain_delta_rules(case) -> None:
    frame, counters, by = case
    keep = ["line", *by]
    assert_frame_equal(error_deltas(frame, counters=counters, keep=keep, by=by),
                       _plain(frame, counters, keep, by), check_exact=True)


@st.composite
def poll_order_frames(draw) -> tuple[pl.DataFrame, list[str], list[str]]:
    """Counter files as a collector appends them (every port at t, then every port at
    t + 10 s), one or two files, then maybe spoiled: two rows swapped, a row repeated or
    dropped, a time that goes back, a port listed twice in a poll."""
    counters = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=3, unique=True))
    files = draw(st.integers(1, 2))
    rows = []
    for f in range(files):
        ports = draw(st.lists(st.sampled_from(["1", "2", "3", "17", "01", "mlx5_0/1"]), min_size=1, max_size=4,
                              unique=True))
        if draw(st.booleans()) and len(ports) > 1:
            ports.append(ports[0])  # a port twice in one poll
        for t in range(draw(st.integers(1, 6))):
            for p in ports:
                row = {"at_ns": T0 + t * 10 * S, "node": f"leaf-0{f}", "port": p, "line": len(rows) + 2, "_file": f}
                row.update((c, draw(_values(c))) for c in counters)
                rows.append(row)
    spoil = draw(st.sampled_from(["none", "none", "swap", "repeat", "drop", "back"]))
    if rows and spoil != "none":
        i = draw(st.integers(0, len(rows) - 1))
        j = draw(st.integers(0, len(rows) - 1))
        if spoil == "swap":
            rows[i], rows[j] = rows[j], rows[i]
        elif spoil == "repeat":
            rows.insert(j, dict(rows[i]))
        elif spoil == "drop":
            del rows[i]
        else:
            rows[i] = {**rows[i], "at_ns": rows[i]["at_ns"] - 25 * S}
    schema = {"at_ns": pl.Int64, "node": pl.String, "port": pl.String, "line": pl.Int64, "_file": pl.UInt32}
    schema.update((c, pl.UInt64) for c in counters)
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    by = ["_file"] if draw(st.booleans()) else []
    return frame, counters, by


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(poll_order_frames())
@pytest.mark.slow
def test_error_deltas_of_poll_order_series_equal_the_plain_delta_rules(case) -> None:
    frame, counters, by = case
    keep = ["line", "_file"]
    assert_frame_equal(error_deltas(frame, counters=counters, keep=keep, by=by),
                       _plain(frame, counters, keep, by), check_exact=True)


def test_delta_rules_run_only_on_flagged_rows(monkeypatch) -> None:
    """A poll-order series of 2,000 ports x 30 polls with three error increases and one
    traffic counter going back: the delta rules see the four flagged rows and their previous
    samples (8 rows), never the 60,000; the result is the plain path's."""
    ports = [str(p) for p in range(1, 2001)]
    polls = 30
    n = len(ports) * polls
    rng = np.random.default_rng(7)
    data = np.cumsum(rng.integers(1, 1000, size=(polls, len(ports)), dtype=np.uint64), axis=0)
    sym = np.zeros((polls, len(ports)), dtype=np.uint64)
    sym[10:, 41] += 3  # port 42: +3 at poll 10
    sym[20:, 41] += 50  # and +50 at poll 20
    sym[5:, 1999] += 1  # port 2000: +1 at poll 5
    data[17:, 99] = data[17:, 99] - data[16, 99] + np.uint64(4)  # port 100: data counter cleared at poll 17
    frame = pl.DataFrame({
        "at_ns": np.repeat(T0 + np.arange(polls, dtype=np.int64) * 10 * S, len(ports)),
        "node": ["leaf-01"] * n,
        "port": ports * polls,
        "line": np.arange(2, n + 2, dtype=np.int64),
        "symbol_error": sym.ravel(),
        "port_xmit_data": data.ravel(),
    })
    seen: list[int] = []
    real = series.deltas

    def spy(f, **kw):
        seen.append(f.height)
        return real(f, **kw)

    monkeypatch.setattr(series, "deltas", spy)
    got = error_deltas(frame, counters=["symbol_error", "port_xmit_data"], keep=["line"])
    assert seen == [8]
    monkeypatch.setattr(series, "deltas", real)
    want = _plain(frame, ["symbol_error", "port_xmit_data"], ["line"], [])
    assert_frame_equal(got, want, check_exact=True)
    # after a reset the delta is the new reading; otherwise the increase since the last poll
    assert got.select("port", "at_ns", "symbol_error", "port_xmit_data", "reset").rows() == [
        ("100", T0 + 170 * S, 0, int(data[17, 99]), True),
        ("2000", T0 + 50 * S, 1, int(data[5, 1999] - data[4, 1999]), False),
        ("42", T0 + 100 * S, 3, int(data[10, 41] - data[9, 41]), False),
        ("42", T0 + 200 * S, 50, int(data[20, 41] - data[19, 41]), False)]


def test_error_deltas_without_flagged_rows_has_the_plain_columns() -> None:
    frame = pl.DataFrame({"at_ns": [T0, T0 + 10 * S, T0, T0 + 10 * S], "node": ["leaf-01"] * 4,
                          "port": ["1", "1", "2", "2"], "line": [2, 3, 4, 5], "_file": pl.Series([0, 0, 0, 0], dtype=pl.UInt32),
                          "symbol_error": pl.Series([3, 3, 0, 0], dtype=pl.UInt64),
                          "port_xmit_data": pl.Series([10, 20, 30, 40], dtype=pl.UInt64)})
    got = error_deltas(frame, counters=["symbol_error", "port_xmit_data"], keep=["line", "_file"], by=["_file"])
    assert got.height == 0
    assert got.schema == _plain(frame, ["symbol_error", "port_xmit_data"], ["line", "_file"], ["_file"]).schema


CELLS = ["0", "7", "17", "1796001600", "1796001610", "01796001600", "00", "+1796001600", "-5", "-0",
         " 1796001600", "1796001600 ", "1796001600.5", "1796001600.123456789123", "1e9", "١٧٩٦",
         "2026-11-30T01:20:00Z", "2026-11-30 01:20:00.250+01:00", "2026-11-30T01:20:00", "", "yesterday",
         "9223372036", "9223372037", "9223372036854775807", "99999999999999999999", "18446744073709551615"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(CELLS), st.none(), st.integers(0, 10**19).map(str)), max_size=12))
@pytest.mark.slow
def test_whole_second_times_read_as_integers_equal_the_text_reader(cells) -> None:
    col = pl.Series("time", cells, dtype=pl.String)
    assert _time_ns(col).to_list() == _time_ns_text(col).to_list()


def test_plain_integers_only_for_plain_digit_strings() -> None:
    assert plain_integers(pl.Series(["0", "17", "1796001600"])).tolist() == [0, 17, 1_796_001_600]
    for bad in (["1", "01"], ["+1"], ["-1"], [" 1"], ["1 "], ["1.0"], ["١"], [""], ["1", None],
                ["9223372036854775808"]):
        assert plain_integers(pl.Series(bad, dtype=pl.String)) is None, bad
    assert plain_integers(pl.Series([1, 2])) is None  # not text


def _poll_order_csv(node: str | None, ports: list[str], polls: int, bumps: dict[tuple[str, int], tuple[str, int]],
                    blank_node_at: int | None = None) -> bytes:
    """A counter file as a collector appends it: every port at t, then every port at t+10 s;
    ``bumps``: (port, poll) -> (counter, increase from that poll on)."""
    head = "time," + ("node," if node is not None else "") + "port,symbol_error,link_downed,port_xmit_data\n"
    lines = []
    extra: dict[str, dict[str, int]] = {p: {"symbol_error": 0, "link_downed": 0} for p in ports}
    for t in range(polls):
        for k, p in enumerate(ports):
            if (p, t) in bumps:
                c, inc = bumps[(p, t)]
                extra[p][c] += inc
            data = 1000 * (t + 1) * (k + 1) if (p, t) != ("3", 4) else 5  # port 3 cleared at poll 4
            who = "" if blank_node_at == t else node
            cells = [str(1_796_001_600 + 10 * t)] + ([who] if node is not None else []) + [
                p, str(extra[p]["symbol_error"]), str(extra[p]["link_downed"]), str(data)]
            lines.append(",".join(cells))
    return (head + "\n".join(lines) + "\n").encode()


def test_batch_of_poll_order_files_equals_the_plain_delta_path(monkeypatch) -> None:
    """Switch files in poll order (errors, a link down, a traffic counter cleared, a row with
    an empty node) and host files without a node column, read in one batch and one by one:
    the same Observations (ids, positions, order) as with the plain delta rules on every row."""
    files = [
        (_poll_order_csv("leaf-01", ["1", "2", "3", "17"], 12, {("17", 3): ("symbol_error", 25), ("2", 6): ("link_downed", 1)},
                         blank_node_at=7), "leaf-01", "fabric/leaf-01/ports.counters.csv", "switch"),
        (_poll_order_csv("leaf-02", ["1", "2", "3"], 12, {("1", 9): ("symbol_error", 2)}),
         "leaf-02", "fabric/leaf-02/ports.counters.csv", "switch"),
    ]
    hosts = [(_poll_order_csv(None, ["mlx5_0/1"], 12, {("mlx5_0/1", 5): ("symbol_error", 4)} if i == 1 else {}),
              f"node-a0{i}", f"metrics/node-a0{i}/hca.counters.csv", "host") for i in range(3)]
    src = Source(connector="bundle", instance="test")

    def observations() -> list[str]:
        out = []
        for group in (files, hosts):
            results = read_counter_batch(group, source=src, cluster="c1", workload_id="job-1")
            assert results is not None
            out += [o.model_dump_json() for r in results for o in r.observations]
            for data, node, rel, side in group:
                table = read_counter_csv(data, default_node=node)
                out += ["file " + o.model_dump_json() for o in table_observations(
                    table, source=src, rel=rel, cluster="c1", workload_id="job-1", side=side)]
        return out

    fast = observations()

    def plain(frame, *, counters, keep=(), by=()):
        return deltas(frame, counters=counters, keep=keep, by=by).filter(error_condition(counters))

    monkeypatch.setattr(readers, "error_deltas", plain)
    assert fast == observations()
    batched = [o for o in fast if not o.startswith("file ")]
    assert batched == [o.removeprefix("file ") for o in fast if o.startswith("file ")]
    # leaf-01/17 +25 symbol errors, leaf-01/2 link down, leaf-01/3 and leaf-02/3 cleared, leaf-02/1 +2, node-a01 +4
    assert len(batched) == 6
    assert sum('"reset":true' in o for o in batched) == 2
    assert sum('"host":"leaf-01"' in o for o in batched) == 3


@pytest.mark.parametrize("rows", [0, 1])
def test_tiny_series(rows: int) -> None:
    frame = pl.DataFrame({"at_ns": [T0] * rows, "node": ["a"] * rows, "port": ["1"] * rows,
                          "symbol_error": pl.Series([1] * rows, dtype=pl.UInt64)})
    assert_frame_equal(error_deltas(frame, counters=["symbol_error"]), _plain(frame, ["symbol_error"], [], []))
