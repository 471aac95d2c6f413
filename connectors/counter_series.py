"""Fabric port counters as series: the counters' widths, the delta rules, per-port tracking.

**Canonical counter names** are the Linux sysfs file names under
``/sys/class/infiniband/<dev>/ports/<n>/counters/`` (``symbol_error``, ``link_downed``,
``port_xmit_data``, ...) and ``.../hw_counters/`` (mlx5: ``local_ack_timeout_err``,
``out_of_sequence``, ...). perfquery / ibqueryerrors names are mapped to them
(:data:`PERFQUERY_NAMES`: ``SymbolErrorCounter`` and the old ``SymbolErrors`` ->
``symbol_error``; detail counters without a sysfs file get a snake_case name such as
``port_neighbor_mtu_discards``).

**Widths and overflow** (:data:`COUNTERS`, sources: kernel ``drivers/infiniband/core/sysfs.c``
``PORT_PMA_ATTR(name, counter, width, offset)``; Documentation/ABI/stable/
sysfs-class-infiniband; IBA PortCounters; mlx5 ``drivers/infiniband/hw/mlx5/counters.c``):

* IB PMA error counters are 4/8/16-bit and **saturate** at ``2**bits - 1`` (they never wrap;
  ``perfquery -R`` / ``ibqueryerrors -k`` clear them). A sample at the maximum sets
  ``saturated``: its delta is a lower bound.
* ``port_xmit_wait`` is 32-bit and saturates too (not an error: congestion ticks).
* Data and packet counters (``port_xmit_data`` ...) are 64-bit and **wrap**; mlx5 queue
  counters (``hw_counters``: ``out_of_sequence`` ...) are 32-bit and wrap, the congestion ones
  64-bit. Counters this table does not know are treated as 64-bit wrapping counters.

**Delta rules** (one implementation, :func:`deltas`; :class:`DeltaTracker` runs it on the
previous and the new sample): with ``old`` the port's previous value of a counter and ``new``
the current one,

* ``new >= old`` -> ``new - old``;
* ``new < old`` on a wrapping counter, ``old`` within its width, and the wrapped difference
  ``(new - old) mod 2**bits`` below half the range -> a **wrap**: delta = that difference;
* any other ``new < old`` -> a **reset** (``perfquery -R``, driver reload, reboot): delta =
  ``new`` (everything counted since the reset), row flag ``reset``;
* a missing value (unreadable file, empty CSV cell) gives no delta for that counter; the
  port's last known value is carried forward, so the next sample's delta covers the gap.

The first sample of a port has no delta (it is dropped); rows flag ``saturated`` when any
saturating counter reads its maximum.

**Only the rows that matter** (:func:`error_deltas`, what a bundle's counter series need): the
rows of :func:`deltas` that are a reset or carry an error delta (:func:`error_condition`). Such
a row needs an error counter that changed or a counter that went down since the port's
previous sample, so those rows are found first with integer keys (whole ns times; node and
port ids; no string sort) and the rules above run on just them and their previous samples.

**Error counters** (:func:`is_error_counter`): every counter except data, packet, request,
wait and congestion-notification counters (:data:`TRAFFIC_COUNTERS` plus names ending in
``_data``, ``_packets``, ``_pkts``, ``_bytes``, ``_requests``, or holding ``xmit_wait``,
``cnp``, ``ecn``). :data:`ERROR_COUNTERS` lists the known ones; the extraction rule
``fabric.port_errors`` (``correlators/rules/fabric.yaml``) names exactly these.

**Port ids**: sysfs ``<dev>/<port>`` (``mlx5_0/1``); switch ports their number as text
(``17``, as ibqueryerrors / ibnetdiscover / topology ``switch_port`` name them); the
observation's ``fabric_port`` is ``<node>/<port>`` (``leaf-01/17``, ``node-a01/mlx5_0/1``).

Everything here works on :class:`CounterSample` values (one port, one time, its counters) or a
polars frame of them (:func:`samples_frame`); reading them from a source is
:mod:`connectors.counter_readers`, the live connector :mod:`connectors.counters`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import polars as pl

__all__ = [
    "COUNTERS",
    "ERROR_COUNTERS",
    "KEY_COLUMNS",
    "TRAFFIC_COUNTERS",
    "CounterDelta",
    "CounterSample",
    "CounterSpec",
    "DeltaTracker",
    "counter_spec",
    "deltas",
    "error_condition",
    "error_deltas",
    "is_error_counter",
    "plain_integers",
    "samples_frame",
]

#: Columns of a counter frame that are not counters.
KEY_COLUMNS = ("at_ns", "node", "port")
_U64 = pl.UInt64


@dataclass(frozen=True, slots=True)
class CounterSpec:
    """One counter: canonical name, width in bits, whether it saturates (IB PMA) or wraps,
    and whether it counts errors."""

    name: str
    bits: int
    saturates: bool
    error: bool

    @property
    def max(self) -> int:
        """The largest value the counter holds (``2**bits - 1``)."""
        return (1 << self.bits) - 1


def _specs() -> dict[str, CounterSpec]:
    out: dict[str, CounterSpec] = {}

    def add(names: Iterable[str], bits: int, saturates: bool, error: bool) -> None:
        for n in names:
            out[n] = CounterSpec(n, bits, saturates, error)

    # IBA PortCounters error counters (kernel sysfs.c PORT_PMA_ATTR widths): saturate
    add(["local_link_integrity_errors", "excessive_buffer_overrun_errors"], 4, True, True)
    add(["link_error_recovery", "link_downed", "port_xmit_constraint_errors",
         "port_rcv_constraint_errors"], 8, True, True)
    add(["symbol_error", "port_rcv_errors", "port_rcv_remote_physical_errors",
         "port_rcv_switch_relay_errors", "port_xmit_discards", "VL15_dropped", "qp1_dropped"],
        16, True, True)
    # PortRcvErrorDetails / PortXmitDiscardDetails (ibqueryerrors --details), 16-bit
    add(["port_local_physical_errors", "port_malformed_packet_errors",
         "port_buffer_overrun_errors", "port_dlid_mapping_errors", "port_vl_mapping_errors",
         "port_looping_errors", "port_inactive_discards", "port_neighbor_mtu_discards",
         "port_sw_lifetime_limit_discards", "port_sw_hoq_lifetime_limit_discards"], 16, True, True)
    add(["port_xmit_wait"], 32, True, False)
    # PortCountersExtended data/packet counters: 64-bit
    add(["port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
         "unicast_xmit_packets", "unicast_rcv_packets", "multicast_xmit_packets",
         "multicast_rcv_packets"], 64, False, False)
    # mlx5 hw_counters: queue counters are 32-bit (be32 in query_q_counter_out)
    add(["out_of_buffer", "out_of_sequence", "duplicate_request", "rnr_nak_retry_err",
         "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err",
         "resp_local_length_error", "resp_cqe_error", "req_cqe_error",
         "req_remote_invalid_request", "req_remote_access_errors", "resp_remote_access_errors",
         "resp_cqe_flush_error", "req_cqe_flush_error", "roce_adp_retrans",
         "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_trans"], 32, False, True)
    add(["rx_write_requests", "rx_read_requests", "rx_atomic_requests", "rx_dct_connect",
         "roce_slow_restart_cnps"], 32, False, False)
    # mlx5 congestion counters and the ext PPCNT group: 64-bit
    add(["rp_cnp_ignored", "rp_cnp_handled", "np_ecn_marked_roce_packets", "np_cnp_sent"],
        64, False, False)
    add(["rx_icrc_encapsulated"], 64, False, True)
    return out


#: Every counter faultstream knows, by canonical name.
COUNTERS: dict[str, CounterSpec] = _specs()
#: The known error counters (sorted); ``fabric.port_errors`` fires on exactly these.
ERROR_COUNTERS: tuple[str, ...] = tuple(sorted(n for n, s in COUNTERS.items() if s.error))
#: The known non-error counters: data, packets, requests, xmit wait, congestion notifications.
TRAFFIC_COUNTERS: tuple[str, ...] = tuple(sorted(n for n, s in COUNTERS.items() if not s.error))
_TRAFFIC_NAME = re.compile(r"(?:_data|_packets|_pkts|_bytes|_requests)$|xmit_wait|cnp|ecn")


def counter_spec(name: str) -> CounterSpec:
    """The spec of ``name``; an unknown counter is a 64-bit wrapping counter whose error flag
    follows :func:`is_error_counter`."""
    spec = COUNTERS.get(name)
    if spec is None:
        spec = CounterSpec(name, 64, False, _TRAFFIC_NAME.search(name) is None)
    return spec


def is_error_counter(name: str) -> bool:
    """True for error counters: known ones by :data:`COUNTERS`, unknown ones unless the
    name looks like a data/packet/request/wait/congestion counter."""
    return counter_spec(name).error



# ----------------------------------------------------------------------------- samples


@dataclass(frozen=True, slots=True)
class CounterSample:
    """Absolute counter readings of one port at one time.

    ``at_ns``: UTC nanoseconds; ``node``: host or switch name; ``port``: port id
    (``mlx5_0/1`` on a host, ``17`` on a switch); ``values``: canonical name -> reading."""

    at_ns: int
    node: str
    port: str
    values: dict[str, int]


@dataclass(frozen=True, slots=True)
class CounterDelta:
    """What one port's counters did since its previous sample: ``deltas`` (canonical name ->
    increase; counters without a delta are absent), ``interval_s`` (seconds since that
    sample), ``reset`` (a counter went back: delta = its new value), ``saturated`` (a
    saturating counter is at its maximum: the delta is a lower bound)."""

    at_ns: int
    node: str
    port: str
    interval_s: float
    reset: bool
    saturated: bool
    deltas: dict[str, int]

    def errors(self) -> dict[str, int]:
        """The nonzero deltas of error counters."""
        return {k: v for k, v in self.deltas.items() if v and is_error_counter(k)}


def samples_frame(samples: Sequence[CounterSample], counters: Sequence[str] | None = None) -> pl.DataFrame:
    """Samples as a counter frame: ``at_ns`` (Int64 UTC ns), ``node``, ``port`` (String) and
    one UInt64 column per counter (the union over the samples unless ``counters`` is given;
    null where a sample lacks it)."""
    if counters is None:
        names: dict[str, None] = {}
        for s in samples:
            names.update(dict.fromkeys(s.values))
        counters = sorted(names)
    data: dict[str, pl.Series] = {
        "at_ns": pl.Series("at_ns", [s.at_ns for s in samples], dtype=pl.Int64),
        "node": pl.Series("node", [s.node for s in samples], dtype=pl.String),
        "port": pl.Series("port", [s.port for s in samples], dtype=pl.String),
    }
    for c in counters:
        vals = [s.values.get(c) for s in samples]
        data[c] = pl.Series(c, [v if v is None or 0 <= v < 1 << 64 else None for v in vals], dtype=_U64)
    return pl.DataFrame(data)


# ----------------------------------------------------------------------------- deltas


def _prev_expr(name: str, same: pl.Expr, group: pl.Expr, ffill: bool) -> pl.Expr:
    """The port's previous value of one counter (null on a port's first row); with ``ffill``
    the last known value, carried over missing readings."""
    col = pl.col(name)
    prev = (col.forward_fill().over(group) if ffill else col).shift(1)
    return pl.when(same).then(prev).alias(f"_old_{name}")


def _counter_exprs(name: str) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """(delta, reset, saturated) expressions of one counter column, given its previous value
    in ``_old_<name>`` (the rules are in the module docstring)."""
    spec = counter_spec(name)
    new = pl.col(name)
    old = pl.col(f"_old_{name}")
    diff = new - old  # UInt64: wraps modulo 2**64
    down = new < old
    if spec.saturates:
        delta = pl.when(down).then(new).otherwise(diff)
        reset = down
        saturated = new >= spec.max
    else:
        if spec.bits < 64:
            mask = spec.max
            wrapped = diff & pl.lit(mask, dtype=_U64)
            wrap = down & (old <= mask) & (wrapped < (1 << (spec.bits - 1)))
        else:
            wrapped = diff
            wrap = down & (diff < pl.lit(1 << 63, dtype=_U64))
        reset = down & ~wrap
        delta = pl.when(reset).then(new).when(wrap).then(wrapped).otherwise(diff)
        saturated = pl.lit(False)
    return (delta.cast(_U64).alias(name), reset.fill_null(False), saturated.fill_null(False))


def _is_sorted(frame: pl.DataFrame, by: Sequence[str] = ()) -> bool:
    """True when ``frame`` is already ordered by (``*by``, node, port, at_ns) (one cheap pass)."""
    if frame.height < 2:
        return True
    keys = [*by, "node", "port"]
    at = pl.col("at_ns")
    ok = at >= at.shift(1)
    for key in reversed(keys):
        k = pl.col(key)
        ok = (k > k.shift(1)) | ((k == k.shift(1)) & ok)
    return bool(frame.select(ok.fill_null(True).all()).item())


def deltas(frame: pl.DataFrame, *, counters: Sequence[str] | None = None,
           keep: Sequence[str] = (), assume_sorted: bool = False, by: Sequence[str] = ()) -> pl.DataFrame:
    """Per-sample deltas of a counter frame, vectorised (no per-row Python).

    ``frame``: columns ``at_ns`` (Int64 UTC ns), ``node``, ``port`` (String) and counters
    (integers; cast to UInt64, negative values become null). ``counters``: which columns are
    counters (default: every column but the keys, ``keep`` and ``by``). ``keep``: extra
    columns copied from the new sample (e.g. a source line number). ``by``: further key
    columns before (node, port): rows with different ``by`` values are separate series even
    for the same port (a bundle reading several files at once passes the file index). Rows
    are sorted by (``*by``, node, port, at_ns) unless ``assume_sorted``.

    Returns one row per sample that has a previous sample of the same port: ``at_ns``,
    ``node``, ``port``, ``interval_s`` (Float64 seconds since the previous sample),
    ``reset``, ``saturated`` (Boolean), the ``keep`` columns, then one UInt64 delta column per
    counter (null: no delta). The rules are in the module docstring."""
    by = list(by)
    if counters is None:
        skip = set(KEY_COLUMNS) | set(keep) | set(by)
        counters = [c for c in frame.columns if c not in skip]
    counters = list(counters)
    if not assume_sorted and not _is_sorted(frame, by):
        frame = frame.sort(*by, "node", "port", "at_ns", maintain_order=True)
    casts = [pl.col(c).cast(_U64, strict=False) for c in counters
             if frame.schema[c] != _U64]
    if casts:
        frame = frame.with_columns(casts)
    same = (pl.col("node") == pl.col("node").shift(1)) & (pl.col("port") == pl.col("port").shift(1))
    for key in by:
        same = same & (pl.col(key) == pl.col(key).shift(1))
    same = same.fill_null(False)
    frame = frame.with_columns(same.alias("_same"), (~same).cum_sum().alias("_group"))
    same_c, group_c = pl.col("_same"), pl.col("_group")
    nulls = frame.select(pl.col(counters).null_count()).row(0) if counters else ()
    frame = frame.with_columns([_prev_expr(c, same_c, group_c, n_null > 0) for c, n_null in zip(counters, nulls)])
    d_exprs, r_exprs, s_exprs = [], [], []
    for c in counters:
        d, r, s = _counter_exprs(c)
        d_exprs.append(d)
        r_exprs.append(r)
        s_exprs.append(s)
    # rounded to the ns: polars may divide by multiplying with 1e-9, which is not exact
    interval = ((pl.col("at_ns") - pl.col("at_ns").shift(1)).cast(pl.Float64) / 1e9).round(9).alias("interval_s")
    reset = (pl.any_horizontal(r_exprs) if r_exprs else pl.lit(False)).alias("reset")
    saturated = (pl.any_horizontal(s_exprs) if s_exprs else pl.lit(False)).alias("saturated")
    out = frame.select(
        "at_ns", "node", "port", interval, reset, saturated, *keep, *d_exprs, "_same",
    )
    return out.filter(pl.col("_same")).drop("_same")


def error_condition(counters: Sequence[str]) -> pl.Expr:
    """The rows of a :func:`deltas` frame worth an Observation: a reset, or a nonzero delta of
    an error counter (:func:`is_error_counter`) among ``counters``."""
    errs = [c for c in counters if is_error_counter(c)]
    cond = pl.col("reset")
    if errs:
        cond = cond | pl.any_horizontal([pl.col(c).fill_null(0) > 0 for c in errs])
    return cond


#: Private columns :func:`error_deltas` adds while it works.
_FLAG_COLUMNS = ("_pair", "_ord")


#: 10**k for k = 0..19 (every power of ten a UInt64 holds).
_POW10 = np.array([10**k for k in range(20)], dtype=np.uint64)


def plain_integers(col: pl.Series) -> np.ndarray | None:
    """The values of a String column whose every cell is a plain non-negative integer (ASCII
    digits, no sign, padding or leading zero: ``0``, ``17``, ``1796001600``) that fits an
    Int64, as an Int64 array; None when some cell is not (or is null).

    A cell passes when its integer value has exactly as many decimal digits as the cell has
    bytes: a sign, a space, a fraction or a non-ASCII digit adds a byte. So distinct cells
    give distinct values, and each value is the cell read as decimal."""
    if col.dtype != pl.String:
        return None
    got = pl.DataFrame({"t": col}).select(pl.col("t").cast(pl.Int64, strict=False).alias("v"),
                                          pl.col("t").str.len_bytes().alias("n"))
    if got["v"].null_count() or got["n"].null_count():
        return None
    v = got["v"].to_numpy()
    k = got["n"].to_numpy()
    if not len(v):
        return v
    k_lo, k_hi = int(k.min()), int(k.max())
    if k_lo < 1 or k_hi > 19:
        return None
    # k digits without a leading zero: 10**(k-1) <= v < 10**k ("0" itself: k = 1, v = 0)
    if k_lo == k_hi:  # one width (epoch seconds): compare the extremes
        return v if (10 ** (k_lo - 1) if k_lo > 1 else 0) <= int(v.min()) and int(v.max()) < 10 ** k_lo else None
    if (v < 0).any():
        return None
    u = v.astype(np.uint64)
    if (u < np.where(k > 1, _POW10[k - 1], 0)).any() or (u >= _POW10[k]).any():
        return None
    return v


def _constant_within(col: pl.Series, prefix: np.ndarray | None) -> bool:
    """True when ``col`` changes (row to row) only where ``prefix`` (a key of the columns
    before it) does and every prefix value is one run of rows: then (prefix, col) groups the
    rows exactly as prefix alone. No prefix: ``col`` is constant."""
    n = col.len()
    changed = (col.slice(1, n - 1) != col.slice(0, n - 1)).to_numpy()
    if prefix is None:
        return not changed.any()
    step = np.diff(prefix)
    return bool((step >= 0).all()) and not bool((changed & (step == 0)).any())


def _key_codes(frame: pl.DataFrame, names: Sequence[str]) -> list[np.ndarray] | None:
    """Integer codes of the key columns ``names``, grouping the rows exactly as the values
    do: an integer column as it is; a String column by 0 where it is constant within the
    groups of the columns before it (:func:`_constant_within`), else by its value where
    every cell is a plain integer (:func:`plain_integers`), else by its categorical code.
    None when a column holds nulls or is of another type."""
    codes: list[np.ndarray] = []
    prefix: np.ndarray | None = None
    for i, name in enumerate(names):
        col = frame[name]
        if col.null_count():
            return None
        if col.dtype.is_integer():
            code = col.to_numpy()
        elif col.dtype == pl.String:
            if (i == 0 or prefix is not None) and _constant_within(col, prefix):
                code = np.zeros(col.len(), dtype=np.int64)
            else:
                code = plain_integers(col)
                if code is None:
                    code = col.cast(pl.Categorical).to_physical().to_numpy()
        else:
            return None
        codes.append(code)
        prefix = _series_key(codes)
    return codes


def _series_key(codes: Sequence[np.ndarray]) -> np.ndarray | None:
    """One Int64 per row, equal where all ``codes`` are equal and ordered as the codes are
    (lexicographically); None when they do not fit in 63 bits together."""
    shifts = []
    total = 0
    for c in codes:
        lo, hi = int(c.min()), int(c.max())
        if lo < 0:
            return None
        shifts.append(hi.bit_length())
        total += shifts[-1]
    if total > 63:
        return None
    key = np.zeros(len(codes[0]), dtype=np.int64)
    for c, bits in zip(codes, shifts):
        key = (key << np.int64(bits)) | c.astype(np.int64)
    return key


def _moved(values: Sequence[tuple[np.ndarray, bool]], new: slice, old: slice) -> np.ndarray:
    """Per row of ``new``: some error counter differs from ``old``'s row, or some counter is
    below it (``values``: (column, is an error counter)). Only such rows can be a reset or
    carry an error delta."""
    out: np.ndarray | None = None
    for v, error in values:
        a, b = v[new], v[old]
        step = (a != b) if error else (a < b)
        out = step if out is None else (out | step)
    assert out is not None
    return out


def _poll_periods(key: np.ndarray, by_key: np.ndarray | None, t: np.ndarray) -> list[tuple[int, int, int]] | None:
    """The rows as a collector appends them, when they are: per run of one ``by`` value
    (``by_key``; each value one run) the same ports in the same order at every poll, times
    not going back. Returns (start, end, ports per poll) per run, so that a row's previous
    sample is the row ``ports`` earlier; None when the rows are not so."""
    n = len(key)
    if by_key is None:
        bounds = [0, n]
    else:
        step = np.diff(by_key)
        if bool((step < 0).any()):
            return None
        bounds = [0, *(np.flatnonzero(step) + 1).tolist(), n]
    out = []
    for a, b in pairwise(bounds):
        ks = key[a:b]
        again = np.flatnonzero(ks[1:] == ks[0])
        p = int(again[0]) + 1 if len(again) else b - a
        if np.unique(ks[:p]).size != p:
            return None
        if p < b - a and not (bool((ks[p:] == ks[:-p]).all()) and bool((t[a + p:b] >= t[a:b - p]).all())):
            return None
        out.append((a, b, p))
    return out


def _empty_deltas(frame: pl.DataFrame, counters: Sequence[str], keep: Sequence[str]) -> pl.DataFrame:
    """A :func:`deltas` frame without rows: its columns and types for ``frame``'s."""
    schema = {"at_ns": frame.schema["at_ns"], "node": frame.schema["node"], "port": frame.schema["port"],
              "interval_s": pl.Float64, "reset": pl.Boolean, "saturated": pl.Boolean}
    schema.update((c, frame.schema[c]) for c in keep)
    schema.update((c, _U64) for c in counters)
    return pl.DataFrame(schema=schema)


def error_deltas(frame: pl.DataFrame, *, counters: Sequence[str] | None = None,
                 keep: Sequence[str] = (), by: Sequence[str] = ()) -> pl.DataFrame:
    """``deltas(frame, counters=, keep=, by=).filter(error_condition(counters))``: the same
    rows, columns, values and order, computed only where they can be nonzero.

    A row can only be a reset or carry an error delta where some error counter changed or
    some counter went down since the port's previous sample. Each row's previous sample is
    found with integer keys (:func:`_key_codes`; ``at_ns`` as Int64 ns, no string sort): the
    row before when the frame is already in (``*by``, node, port, at_ns) order, the row one
    poll earlier when it is in poll order (:func:`_poll_periods`), else by one stable integer
    sort. Then the delta rules (:func:`deltas`) run on just the rows so flagged and their
    previous samples, and the result is put in :func:`deltas`' order. Falls back to
    :func:`deltas` on the whole frame when a counter or key column holds nulls (missing
    readings are carried forward over a port's whole series) or a key column is neither
    String nor integer. Arguments and columns as :func:`deltas`."""
    by = list(by)
    keep = list(keep)
    if counters is None:
        skip = set(KEY_COLUMNS) | set(keep) | set(by)
        counters = [c for c in frame.columns if c not in skip]
    counters = list(counters)
    cond = error_condition(counters)
    if any(c in frame.columns for c in _FLAG_COLUMNS):
        return deltas(frame, counters=counters, keep=keep, by=by).filter(cond)
    schema = frame.schema
    casts = [pl.col(c).cast(_U64, strict=False) for c in counters if schema[c] != _U64]
    if casts:
        frame = frame.with_columns(casts)
    if frame.height < 2 or not counters:
        return deltas(frame, counters=counters, keep=keep, by=by, assume_sorted=frame.height < 2).filter(cond)
    nulls = frame.select(pl.col(counters).null_count()).row(0)
    at = frame["at_ns"]
    codes = None if any(nulls) or at.null_count() or not at.dtype.is_integer() \
        else _key_codes(frame, [*by, "node", "port"])
    if codes is None:
        return deltas(frame, counters=counters, keep=keep, by=by).filter(cond)
    t = at.to_numpy()
    values = [(frame[c].to_numpy(), is_error_counter(c)) for c in counters]
    key = _series_key(codes)
    new_rows: np.ndarray | None = None  # frame rows that may be flagged ...
    old_rows: np.ndarray | None = None  # ... and their ports' previous samples
    ordinal: np.ndarray | None = None  # their place in (*by, node, port, at_ns) order
    if key is not None:
        step = np.diff(key)
        if bool(((step > 0) | ((step == 0) & (t[1:] >= t[:-1]))).all()):
            # already in (*by, node, port, at_ns) order: a row's previous sample is the row before
            hits = np.flatnonzero((step == 0) & _moved(values, slice(1, None), slice(0, -1))) + 1
            new_rows, old_rows, ordinal = hits, hits - 1, hits
        else:
            periods = _poll_periods(key, _series_key(codes[:len(by)]) if by else None, t)
            if periods is not None:
                # poll order: a row's previous sample is one poll (period) earlier in its file
                found, back = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
                for a, b, p in periods:
                    if b - a > p:
                        found.append(np.flatnonzero(_moved(values, slice(a + p, b), slice(a, b - p))) + (a + p))
                        back.append(found[-1] - p)
                new_rows, old_rows = np.concatenate(found), np.concatenate(back)
                ordinal = new_rows
    if new_rows is None:
        # stable sort by (*by, node, port, at_ns): ties keep frame order, as deltas' sort does
        order = np.lexsort([t, key] if key is not None else [t, *reversed(codes)])
        same = np.ones(len(order) - 1, dtype=bool)
        for c in [key] if key is not None else codes:
            cs = c[order]
            same &= cs[1:] == cs[:-1]
        moved = np.zeros(len(order) - 1, dtype=bool)
        for v, error in values:
            vs = v[order]
            moved |= (vs[1:] != vs[:-1]) if error else (vs[1:] < vs[:-1])
        hits = np.flatnonzero(same & moved)  # sorted position - 1 of each flagged row
        new_rows, old_rows, ordinal = order[hits + 1], order[hits], hits + 1
    m = len(new_rows)
    if m == 0:
        return _empty_deltas(frame, counters, keep)
    rows = np.empty(2 * m, dtype=np.int64)
    rows[0::2] = old_rows
    rows[1::2] = new_rows
    extra = [c for c in by if c not in keep]
    pairs = frame.select("at_ns", "node", "port", *keep, *extra, *counters)[rows].with_columns(
        pl.Series("_pair", np.repeat(np.arange(m, dtype=np.int64), 2)),
        pl.Series("_ord", np.repeat(ordinal, 2), dtype=pl.Int64))
    out = deltas(pairs, counters=counters, keep=[*keep, *extra, "_ord"], by=["_pair"], assume_sorted=True)
    out = out.filter(cond)
    # back to (*by, node, port, at_ns) order: the sorted position breaks ties as deltas' sort does
    return out.sort(*by, "node", "port", "_ord").drop("_ord", *extra)


class DeltaTracker:
    """Per-port state for the live path: the last sample of every port (values carried
    forward over missing readings). :meth:`update` runs :func:`deltas` on the stored and the
    new samples, so the live path and the vectorised path share one rule.

    ``state``: a document from :meth:`state` (as persisted by a cursor). Samples not newer
    than a port's stored sample are ignored and counted in ``stale``."""

    def __init__(self, state: Mapping[str, Any] | None = None) -> None:
        self._last: dict[tuple[str, str], tuple[int, dict[str, int]]] = {}
        self.stale = 0
        for entry in (state or {}).get("ports", []):
            try:
                key = (str(entry["node"]), str(entry["port"]))
                vals = {str(k): int(v) for k, v in dict(entry["values"]).items()}
                self._last[key] = (int(entry["at_ns"]), vals)
            except (KeyError, TypeError, ValueError):
                continue  # a damaged entry only costs that port one priming sample

    def __len__(self) -> int:
        return len(self._last)

    def known(self, node: str, port: str) -> bool:
        """True when a previous sample of the port is stored."""
        return (node, port) in self._last

    def update(self, samples: Sequence[CounterSample]) -> list[CounterDelta]:
        """Deltas of ``samples`` against the stored state (a port's first sample primes it
        and gives no delta), sorted by (node, port, at_ns); the state then holds the newest
        sample of each port."""
        fresh: list[CounterSample] = []
        for s in sorted(samples, key=lambda s: (s.node, s.port, s.at_ns)):
            last = self._last.get((s.node, s.port))
            prev_at = fresh[-1].at_ns if fresh and (fresh[-1].node, fresh[-1].port) == (s.node, s.port) else None
            if (last is not None and s.at_ns <= last[0]) or (prev_at is not None and s.at_ns <= prev_at):
                self.stale += 1
                continue
            fresh.append(s)
        if not fresh:
            return []
        prior = [CounterSample(self._last[k][0], k[0], k[1], dict(self._last[k][1]))
                 for k in dict.fromkeys((s.node, s.port) for s in fresh) if k in self._last]
        frame = samples_frame(prior + fresh)
        out = deltas(frame)
        counters = [c for c in out.columns if c not in (*KEY_COLUMNS, "interval_s", "reset", "saturated")]
        result = [
            CounterDelta(
                at_ns=row["at_ns"], node=row["node"], port=row["port"],
                interval_s=row["interval_s"], reset=row["reset"], saturated=row["saturated"],
                deltas={c: row[c] for c in counters if row[c] is not None},
            )
            for row in out.iter_rows(named=True)
        ]
        for s in fresh:
            key = (s.node, s.port)
            merged = dict(self._last[key][1]) if key in self._last else {}
            merged.update(s.values)
            self._last[key] = (s.at_ns, merged)
        return result

    def state(self) -> dict[str, Any]:
        """JSON-serialisable state: ``{"ports": [{"node", "port", "at_ns", "values"}, ...]}``."""
        return {"ports": [
            {"node": n, "port": p, "at_ns": at, "values": dict(sorted(v.items()))}
            for (n, p), (at, v) in sorted(self._last.items())
        ]}


