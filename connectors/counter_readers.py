"""Reading fabric port counters: sysfs, ``perfquery``, ``ibqueryerrors`` and CSV series,
and the ``fabric_counter`` Observations of their deltas.

**Canonical counter names** are the Linux sysfs file names (:mod:`connectors.counter_series`);
perfquery / ibqueryerrors names are mapped to them (:data:`PERFQUERY_NAMES`:
``SymbolErrorCounter`` and the old ``SymbolErrors`` -> ``symbol_error``; detail counters
without a sysfs file get a snake_case name such as ``port_neighbor_mtu_discards``).

Readers: :func:`read_sysfs`, :func:`parse_perfquery`, :func:`parse_ibqueryerrors` and the
CSV series format (:func:`read_counter_csv`: header ``time,node,port,<counters...>``, time
ISO-8601 (UTC unless it has an offset) or epoch seconds, file name ``*.counters.csv``).
Bad input never raises: unreadable files, garbage values and malformed rows are counted.

A bundle's counter files (``*.counters.csv``, :data:`COUNTER_SUFFIX`) are read file by file
(:func:`read_counter_csv`, :func:`table_observations`) or, files of one header together, in
one polars pass (:func:`read_counter_batch`); either way the delta rules run only on the rows
where an error counter changed or a counter went down
(:func:`~connectors.counter_series.error_deltas`). :func:`delta_observation` makes the
Observation of one live delta.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import polars as pl

from connectors.counter_series import (
    KEY_COLUMNS,
    CounterDelta,
    CounterSample,
    error_deltas,
    plain_integers,
)
from schemas.records import TIME_QUALITY_EXACT, Observation, Position, Source

__all__ = [
    "COUNTER_BATCH_BYTES",
    "COUNTER_SUFFIX",
    "PERFQUERY_NAMES",
    "CounterFileResult",
    "CounterTable",
    "counter_batch_key",
    "delta_observation",
    "parse_ibqueryerrors",
    "parse_perfquery",
    "read_counter_batch",
    "read_counter_csv",
    "read_sysfs",
    "table_observations",
]

#: File-name suffix of a counter series in a bundle (``fabric/<node>/`` or ``metrics/<node>/``).
COUNTER_SUFFIX = ".counters.csv"
_U64 = pl.UInt64

#: perfquery / ibqueryerrors field names (infiniband-diags ``mad_field_name``; the short
#: names are those of infiniband-diags before 1.5) -> canonical counter names.
PERFQUERY_NAMES: dict[str, str] = {
    "SymbolErrorCounter": "symbol_error", "SymbolErrors": "symbol_error",
    "LinkErrorRecoveryCounter": "link_error_recovery", "LinkRecovers": "link_error_recovery",
    "LinkDownedCounter": "link_downed", "LinkDowned": "link_downed",
    "PortRcvErrors": "port_rcv_errors", "RcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "RcvRemotePhysErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors",
    "RcvSwRelayErrors": "port_rcv_switch_relay_errors",
    "PortXmitDiscards": "port_xmit_discards", "XmtDiscards": "port_xmit_discards",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "XmtConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "RcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "LinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors",
    "ExcBufOverrunErrors": "excessive_buffer_overrun_errors",
    "VL15Dropped": "VL15_dropped", "QP1Dropped": "qp1_dropped",
    "PortXmitData": "port_xmit_data", "XmtData": "port_xmit_data",
    "PortRcvData": "port_rcv_data", "RcvData": "port_rcv_data",
    "PortXmitPkts": "port_xmit_packets", "XmtPkts": "port_xmit_packets",
    "PortRcvPkts": "port_rcv_packets", "RcvPkts": "port_rcv_packets",
    "PortXmitWait": "port_xmit_wait", "XmtWait": "port_xmit_wait",
    "PortUnicastXmitPkts": "unicast_xmit_packets", "PortUnicastRcvPkts": "unicast_rcv_packets",
    "PortMulticastXmitPkts": "multicast_xmit_packets",
    "PortMulticastRcvPkts": "multicast_rcv_packets",
    "PortLocalPhysicalErrors": "port_local_physical_errors",
    "PortMalformedPktErrors": "port_malformed_packet_errors",
    "PortBufferOverrunErrors": "port_buffer_overrun_errors",
    "PortDLIDMappingErrors": "port_dlid_mapping_errors",
    "PortVLMappingErrors": "port_vl_mapping_errors",
    "PortLoopingErrors": "port_looping_errors",
    "PortInactiveDiscards": "port_inactive_discards",
    "PortNeighborMTUDiscards": "port_neighbor_mtu_discards",
    "PortSwLifetimeLimitDiscards": "port_sw_lifetime_limit_discards",
    "PortSwHOQLifetimeLimitDiscards": "port_sw_hoq_lifetime_limit_discards",
}
#: perfquery fields that are not counters.
_NOT_COUNTERS = {"PortSelect", "CounterSelect", "CounterSelect2"}


# ----------------------------------------------------------------------------- readers


def read_sysfs(root: str | Path, node: str, at_ns: int, *, errors: list[str] | None = None) -> list[CounterSample]:
    """Read ``<root>/class/infiniband/<dev>/ports/<n>/counters/*`` and ``.../hw_counters/*``.

    One sample per port, port id ``<dev>/<n>``, timed ``at_ns`` (UTC ns). ``hw_counters``
    values win over a ``counters`` file of the same name; ``lifespan`` (a setting, not a
    counter) is skipped. Unreadable files (EINVAL from ports without the counter, permission
    errors) and garbage values are skipped and described in ``errors`` (``"<path>: reason"``)
    when a list is given; never raises. Samples sorted by port id."""
    base = Path(root) / "class" / "infiniband"
    out: list[CounterSample] = []
    try:
        devs = sorted(p for p in base.iterdir() if p.is_dir())
    except OSError as exc:
        if errors is not None:
            errors.append(f"{base}: {exc.strerror or exc}")
        return out
    for dev in devs:
        try:
            ports = sorted((p for p in (dev / "ports").iterdir() if p.is_dir()), key=lambda p: p.name)
        except OSError:
            continue  # a device without ports (or not readable): nothing to sample
        for port in ports:
            values: dict[str, int] = {}
            for sub in ("counters", "hw_counters"):
                d = port / sub
                try:
                    files = sorted(d.iterdir())
                except OSError:
                    continue
                for f in files:
                    if f.name == "lifespan" or f.is_dir():
                        continue
                    try:
                        text = f.read_text("ascii", errors="strict").strip()
                    except (OSError, UnicodeDecodeError) as exc:
                        if errors is not None:
                            errors.append(f"{f}: unreadable ({getattr(exc, 'strerror', None) or exc})")
                        continue
                    if not text.isdigit() or int(text) >= 1 << 64:
                        if errors is not None:
                            errors.append(f"{f}: not a counter value: {text[:40]!r}")
                        continue
                    values[f.name] = int(text)
            if values:
                out.append(CounterSample(at_ns, node, f"{dev.name}/{port.name}", values))
    return out


_PQ_HEADER = re.compile(r"^# Port (?:extended )?counters: Lid (?P<lid>\d+) (?:port (?P<port>\d+)|(?P<all>all ports))")
_PQ_FIELD = re.compile(r"^(?P<name>[A-Za-z0-9]+):\.*(?P<value>\S+)\s*$")


def parse_perfquery(text: str, *, at_ns: int, node: str | None = None,
                    errors: list[str] | None = None) -> list[CounterSample]:
    """Samples from ``perfquery`` / ``perfquery -x`` output (several blocks may follow each
    other; basic and extended blocks of the same port merge, the later value winning)::

        # Port counters: Lid 12 port 1 (CapMask: 0x5A00)
        PortSelect:......................1
        SymbolErrorCounter:..............0
        ...

    ``node``: the node the output is about (perfquery names only the LID; default
    ``lid-<lid>``); port id = the port number as text. ``all ports`` blocks (aggregates over
    every port) are skipped. Lines that are neither a header, a ``Name:....value`` field nor
    blank are described in ``errors``; unknown field names are ignored."""
    merged: dict[tuple[str, str], dict[str, int]] = {}
    cur: dict[str, int] | None = None
    skipping = False
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        m = _PQ_HEADER.match(s)
        if m:
            if m["all"]:
                cur, skipping = None, True
                continue
            key = (node or f"lid-{m['lid']}", m["port"])
            cur, skipping = merged.setdefault(key, {}), False
            continue
        if s.startswith("#"):
            continue
        m = _PQ_FIELD.match(s)
        if m is None or (cur is None and not skipping):
            if errors is not None:
                errors.append(f"line {no}: not perfquery output: {s[:80]!r}")
            continue
        if skipping or m["name"] in _NOT_COUNTERS:
            continue
        canon = PERFQUERY_NAMES.get(m["name"])
        if canon is None:
            continue
        value = m["value"]
        if not value.isdigit():
            if errors is not None:
                errors.append(f"line {no}: {m['name']}: not a counter value {value!r}")
            continue
        assert cur is not None
        cur[canon] = int(value)
    return [CounterSample(at_ns, n, p, v) for (n, p), v in merged.items() if v]


_IQE_HEADER = re.compile(r'^(?:Errors|Data Counters) for (?:(?P<guid>0x[0-9a-fA-F]+) )?"(?P<name>.*)"\s*$')
_IQE_PORT = re.compile(r"^GUID 0x[0-9a-fA-F]+ port (?P<port>\d+|ALL):(?P<rest>.*)$")
_IQE_ONE_LINE = re.compile(
    r'^(?:Errors for )?(?:(?P<guid>0x[0-9a-fA-F]+) )?"(?P<name>[^"]*)"\s+(?:GUID 0x[0-9a-fA-F]+ )?'
    r"port (?P<port>\d+):(?P<rest>.*\[.*)$")
_IQE_COUNTER = re.compile(r"\[(?P<name>\w+) == (?P<value>\d+)(?: \([^)\]]*\))?\]")
_IQE_SKIP = ("Link info:", "##", "Suppress", "ibwarn:", "Thresholds:")


def _iqe_node_port(name: str, switch: bool, port: str) -> tuple[str, str]:
    if switch:
        return name, port
    # a CA's node description is "<host> <dev>" (rdma-ndd's default "%h %d") or
    # "<host> HCA-1" (older OFED): the host is the node, the device goes into the port id
    head, _, rest = name.strip().partition(" ")
    rest = rest.strip()
    if rest:
        return head, f"{rest}/{port}"
    return head or name, port


def parse_ibqueryerrors(text: str, *, at_ns: int, errors: list[str] | None = None) -> list[CounterSample]:
    """Samples from ``ibqueryerrors`` output (infiniband-diags ``ibqueryerrors.c``)::

        Errors for 0x0002c90300a1b2c3 "leaf-01"
           GUID 0x0002c90300a1b2c3 port 17: [SymbolErrorCounter == 25] [LinkDownedCounter == 3]
        Errors for "node-a01 mlx5_0"
           GUID 0x0002c90300a1b2d0 port 1: [PortXmitWait == 6130712 (5.847M)]

    A header with a GUID is a switch (ibqueryerrors prints the GUID only for switches):
    node = its node description (``leaf-01``), port id = the port number (``17``). For a CA,
    node = the first word of the description and port id = ``<rest>/<port>``
    (``node-a01``, ``mlx5_0/1``). The one-line form (``"leaf-01" port 17: [...]``, node and
    port on one line) and ``--data`` / ``--counters`` output are read too; ``port ALL``
    aggregates, ``Link info:`` and ``##`` summary lines are skipped. Only the counters
    ibqueryerrors printed are in a sample (it prints values above the threshold, 0 by
    default). Unrecognised lines are described in ``errors``."""
    merged: dict[tuple[str, str], dict[str, int]] = {}
    cur_name: str | None = None
    cur_switch = False

    def add(name: str, switch: bool, port: str, rest: str, no: int) -> None:
        key = _iqe_node_port(name, switch, port)
        vals = merged.setdefault(key, {})
        found = False
        for cm in _IQE_COUNTER.finditer(rest):
            found = True
            canon = PERFQUERY_NAMES.get(cm["name"])
            if canon is not None:
                vals[canon] = int(cm["value"])
        if not found and errors is not None:
            errors.append(f"line {no}: no [Counter == value] in {rest.strip()[:80]!r}")

    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith(_IQE_SKIP):
            continue
        m = _IQE_HEADER.match(s)
        if m:
            cur_name, cur_switch = m["name"], m["guid"] is not None
            continue
        m = _IQE_PORT.match(s)
        if m and cur_name is not None:
            if m["port"] != "ALL":
                add(cur_name, cur_switch, m["port"], m["rest"], no)
            continue
        m = _IQE_ONE_LINE.match(s)
        if m:
            # no GUID in the one-line form: a one-word description is a switch, "<host> <dev>" a CA
            add(m["name"], m["guid"] is not None or " " not in m["name"].strip(), m["port"], m["rest"], no)
            continue
        if errors is not None:
            errors.append(f"line {no}: not ibqueryerrors output: {s[:80]!r}")
    return [CounterSample(at_ns, n, p, v) for (n, p), v in merged.items()]


# ----------------------------------------------------------------------------- CSV series


@dataclass
class CounterTable:
    """A counter series read from CSV: ``frame`` (``at_ns``, ``node``, ``port``, ``line``
    (1-based line of the row in the file), UInt64 counter columns) holds the good rows;
    ``rows`` counts data rows, ``unparsed`` the malformed ones (bad time, empty port, a
    counter cell that is not a non-negative integer); ``notes`` say why."""

    frame: pl.DataFrame
    rows: int = 0
    unparsed: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def counters(self) -> list[str]:
        """The counter columns."""
        return [c for c in self.frame.columns if c not in (*KEY_COLUMNS, "line")]


_ISO_FORMATS = ("%Y-%m-%dT%H:%M:%S%.f%#z", "%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f",
                "%Y-%m-%d %H:%M:%S%.f")


def _time_ns(times: pl.Series) -> pl.Series:
    """CSV time text -> Int64 UTC ns: epoch seconds (``1796001600.25``, exact to the ns,
    no float rounding) or ISO-8601 (naive means UTC); null when it is neither. A column of
    plain whole seconds (:func:`~connectors.counter_series.plain_integers`: what a collector
    writes) is converted as integers, any other by :func:`_time_ns_text`; both give the same
    values."""
    secs = plain_integers(times)
    if secs is None:
        return _time_ns_text(times)
    # the epoch rule of _time_ns_text for a cell without a fraction: seconds x 10**9 + 0
    return pl.DataFrame({"s": secs}).select(pl.col("s") * 1_000_000_000 + 0).to_series()


def _time_ns_text(times: pl.Series) -> pl.Series:
    """:func:`_time_ns` of any column: the text is stripped, then read as epoch seconds with
    an optional fraction or as ISO-8601; each form is only parsed when the column holds it
    (one cheap scan decides)."""
    df = pl.DataFrame({"t": times})
    t = pl.col("t").str.strip_chars()
    is_epoch = t.str.contains(r"^\d+(?:\.\d+)?$")
    n_epoch = int(df.select(is_epoch.sum()).item() or 0)
    parts = t.str.split_exact(".", 1)
    epoch = (parts.struct.field("field_0").cast(pl.Int64, strict=False) * 1_000_000_000
             + parts.struct.field("field_1").fill_null("").str.pad_end(9, "0").str.slice(0, 9)
             .cast(pl.Int64, strict=False).fill_null(0))
    if n_epoch == df.height:
        return df.select(epoch).to_series()
    iso: pl.Expr | None = None
    for fmt in _ISO_FORMATS:
        one = t.str.to_datetime(fmt, time_zone="UTC", time_unit="ns", strict=False).dt.epoch("ns")
        iso = one if iso is None else pl.coalesce(iso, one)
        if n_epoch == 0 and df.select(one.null_count() == t.null_count()).item():
            break  # this format reads every time of the column: skip the others
    assert iso is not None
    return df.select(pl.when(is_epoch).then(epoch).otherwise(iso) if n_epoch else iso).to_series()


_CSV_OPTS: dict[str, Any] = dict(infer_schema=False, truncate_ragged_lines=True, raise_if_empty=False)


def _header_columns(header: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(stripped name -> CSV column, canonical counter name -> CSV column) of a header."""
    cols = {c.strip(): c for c in header}
    counter_cols: dict[str, str] = {}
    for name, orig in cols.items():
        if name not in ("time", "node", "port"):
            counter_cols[PERFQUERY_NAMES.get(name, name)] = orig
    return cols, counter_cols


def _rows_frame(raw: pl.DataFrame, cols: Mapping[str, str], counter_cols: Mapping[str, str], typed: bool,
                default_node: str | Callable[[], pl.Series] | None, line: pl.Expr,
                extra: Sequence[pl.Expr] = ()) -> tuple[pl.DataFrame, pl.Series, pl.Series, pl.Series]:
    """The counter frame of CSV rows (``at_ns``, ``node``, ``port``, ``line``, ``extra``,
    counters) and the row masks (bad time, no node/port, any bad). ``default_node``: the node
    of rows without one (no ``node`` column, or an empty cell): one name, or a function giving
    one per row of ``raw`` (called only when some row needs it)."""
    n = raw.height
    node_expr = (pl.col(cols["node"]).str.strip_chars() if "node" in cols else pl.lit(None, pl.String))
    exprs = [
        pl.lit(_time_ns(raw[cols["time"]])).alias("at_ns") if n else pl.lit(None, pl.Int64).alias("at_ns"),
        node_expr.alias("node"),
        pl.col(cols["port"]).str.strip_chars().alias("port"),
        line.alias("line"),
        *extra,
    ]
    bad_parts = []
    for canon, orig in counter_cols.items():
        if typed:
            exprs.append(pl.col(orig).alias(canon))
            continue
        cell = pl.col(orig).str.strip_chars()
        val = cell.cast(_U64, strict=False)
        exprs.append(val.alias(canon))
        bad_parts.append(cell.is_not_null() & (cell != "") & val.is_null())
    frame = raw.select(exprs)
    if default_node is not None:
        node = frame["node"]
        missing = node.is_null() | (node == "")
        if missing.any():
            fill = pl.lit(default_node, pl.String) if isinstance(default_node, str) else default_node()
            frame = frame.with_columns(pl.when(missing).then(fill).otherwise(pl.col("node")).alias("node"))
    bad_time = frame["at_ns"].is_null()
    bad_key = frame["port"].is_null() | (frame["port"] == "") | frame["node"].is_null() | (frame["node"] == "")
    bad = bad_time | bad_key
    if bad_parts:
        bad = bad | raw.select(pl.any_horizontal(bad_parts)).to_series()
    return frame, bad_time, bad_key, bad


def _malformed_notes(unparsed: int, n_bad_time: int, n_bad_key: int, n_time_or_key: int) -> list[str]:
    """The note on a file's malformed rows (none when there are none)."""
    if not unparsed:
        return []
    reasons = []
    if n_bad_time:
        reasons.append(f"{n_bad_time} bad times")
    if n_bad_key:
        reasons.append(f"{n_bad_key} without node/port")
    rest = unparsed - n_time_or_key
    if rest:
        reasons.append(f"{rest} with a counter that is not a non-negative integer")
    return [f"{unparsed} malformed rows skipped ({', '.join(reasons)})"]


def read_counter_csv(source: str | Path | bytes, *, default_node: str | None = None) -> CounterTable:
    """Read a counter series (``*.counters.csv``) with ``polars.read_csv`` (vectorised).

    Header ``time,node,port,<counter columns>`` (counter names canonical; a perfquery name
    such as ``SymbolErrorCounter`` is mapped); ``node`` may be left out when
    ``default_node`` is given (a bundle uses the directory name). Counters are parsed as
    UInt64 by polars directly; only a file with a bad value is re-read as text to find and
    count the malformed rows. Never raises: a file that is not such a CSV gives an empty
    table with a note. (:func:`read_counter_batch` reads many such files at once, with the
    same result per file.)"""
    empty = pl.DataFrame(schema={"at_ns": pl.Int64, "node": pl.String, "port": pl.String, "line": pl.Int64})
    if isinstance(source, Path):
        source = str(source)
    opts = _CSV_OPTS
    try:
        header = pl.read_csv(source, n_rows=0, **opts).columns
    except (pl.exceptions.PolarsError, ValueError, OSError) as exc:
        return CounterTable(empty, 0, 0, [f"not a counter CSV ({type(exc).__name__}: {exc})"])
    cols, counter_cols = _header_columns(header)
    raw: pl.DataFrame | None = None
    typed = True
    try:
        raw = pl.read_csv(source, schema_overrides={o: _U64 for o in counter_cols.values()}, **opts)
    except (pl.exceptions.PolarsError, ValueError):
        typed = False  # some cell is not a UInt64: read as text, count the bad rows
    try:
        if raw is None:
            raw = pl.read_csv(source, **opts)
    except (pl.exceptions.PolarsError, ValueError, OSError) as exc:
        return CounterTable(empty, 0, 0, [f"not a counter CSV ({type(exc).__name__}: {exc})"])
    if "time" not in cols or "port" not in cols or ("node" not in cols and default_node is None):
        need = "time,node,port" if default_node is None else "time,port"
        return CounterTable(empty, raw.height, raw.height,
                            [f"header must start with {need}; got {list(cols)[:6]}"])
    n = raw.height
    frame, bad_time, bad_key, bad = _rows_frame(
        raw, cols, counter_cols, typed, default_node, pl.int_range(0, pl.len(), dtype=pl.Int64) + 2)
    unparsed = int(bad.sum())
    notes = _malformed_notes(unparsed, int(bad_time.sum()), int(bad_key.sum()),
                             int((bad_time | bad_key).sum())) if unparsed else []
    return CounterTable(frame.filter(~bad) if unparsed else frame, n, unparsed, notes)


# ----------------------------------------------------------------------------- batches

#: A bundle reads consecutive counter files with the same header in batches of up to this
#: many (decompressed) bytes, one polars pass each (:func:`read_counter_batch`); 0 reads them
#: one by one (:func:`read_counter_csv`). Peak memory grows with it (bench/fabric.py, 682 MiB
#: of counters: peak RSS ~230 MiB at 8 MiB, ~450 MiB at 32 MiB) and throughput does not.
COUNTER_BATCH_BYTES = 8 << 20
#: Column names the batch reader adds; a file with such a column is read on its own.
_BATCH_COLUMNS = ("_file", "_line", "_default")


def counter_batch_key(data: bytes) -> bytes | None:
    """The header line of a counter file that :func:`read_counter_batch` may read together
    with others of the same header; None when the file must be read on its own.

    A batch concatenates the files' bytes (each header but the first dropped), so it needs
    every physical line after the header to be exactly one CSV row: no quotes (a quoted
    field may span lines) and no carriage returns (a blank line is a row of nulls, in a
    file as in a batch); and at least one data row (an empty series gets its own coverage
    note)."""
    end = data.find(b"\n")
    if end <= 0 or b'"' in data or b"\r" in data:
        return None
    header = data[:end]
    if not header.strip() or len(data) == end + 1:
        return None
    return header


def _newlines(data: bytes) -> int:
    """How many ``\n`` bytes ``data`` holds (a vectorised count: several times faster than
    ``bytes.count`` on megabytes)."""
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == 10))


@dataclass
class CounterFileResult:
    """What :func:`read_counter_batch` found in one file: ``rows`` (data rows), ``unparsed``
    (malformed rows), ``notes`` (as :class:`CounterTable`), ``samples`` (good rows),
    ``counters`` (counter columns) and the file's fabric_counter ``observations``."""

    rows: int
    unparsed: int
    notes: list[str]
    samples: int
    counters: int
    observations: list[Observation]


def read_counter_batch(files: Sequence[tuple[bytes, str | None, str, str]], *, source: Source, cluster: str,
                       workload_id: str | None) -> list[CounterFileResult] | None:
    """Read several counter files of one header (:func:`counter_batch_key`) in one polars
    pass and compute their deltas at once; per file the same rows, notes and Observations
    (ids, positions, order) as :func:`read_counter_csv` + :func:`table_observations`.

    ``files``: (data, default node, relative path, side) per file, in bundle order. The
    files' rows are concatenated with a file index; deltas are keyed by (file, node, port),
    so a port appearing in two files still makes two series, as when the files are read one
    by one. Returns None when the batch cannot be read that way (a value that is not a
    UInt64 anywhere in the batch, a header without ``time``/``port``/node, a parse
    error): the caller then reads the files one by one, which counts the bad rows."""
    if not files:
        return []
    first = files[0][0]
    try:
        header = pl.read_csv(first, n_rows=0, **_CSV_OPTS).columns
    except (pl.exceptions.PolarsError, ValueError, OSError):
        return None
    cols, counter_cols = _header_columns(header)
    counters = list(counter_cols)
    if ("time" not in cols or "port" not in cols or not counters
            or any(c in cols or c in header for c in _BATCH_COLUMNS)
            or ("node" not in cols and any(d is None for _, d, _, _ in files))):
        return None
    # data rows per file: the lines after the header (a last line without a newline counts)
    counts = np.fromiter((_newlines(d) - (1 if d.endswith(b"\n") else 0) for d, _, _, _ in files),
                         dtype=np.int64, count=len(files))
    parts: list[bytes | memoryview] = [first]
    for data, _, _, _ in files[1:]:
        if parts[-1][-1:] != b"\n":
            parts.append(b"\n")
        parts.append(memoryview(data)[data.index(b"\n") + 1:])  # the body, not copied
    if parts[-1][-1:] != b"\n":
        parts.append(b"\n")
    blob = b"".join(parts)
    del parts
    try:
        raw = pl.read_csv(blob, schema_overrides={o: _U64 for o in counter_cols.values()}, **_CSV_OPTS)
    except (pl.exceptions.PolarsError, ValueError):
        return None  # a cell that is not a UInt64 (or worse): the files one by one count it
    del blob
    if raw.height != int(counts.sum()):
        return None  # a line that is not one row: never guess which file it belongs to
    n_files = len(files)
    file_idx = np.repeat(np.arange(n_files, dtype=np.uint32), counts)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    line = np.arange(raw.height, dtype=np.int64) - np.repeat(starts, counts) + 2
    file_s = pl.Series("_file", file_idx, dtype=pl.UInt32)
    raw = raw.with_columns(file_s, pl.Series("_line", line, dtype=pl.Int64))
    defaults = [d for _, d, _, _ in files]

    def default_nodes() -> pl.Series:
        """Each row's default node: its file's."""
        return pl.Series("_default", defaults, dtype=pl.String).gather(file_s)

    try:
        frame, bad_time, bad_key, bad = _rows_frame(
            raw, cols, counter_cols, True, default_nodes if any(d is not None for d in defaults) else None,
            pl.col("_line"), [pl.col("_file")])
    except (pl.exceptions.PolarsError, ValueError):
        return None
    del raw

    def per_file(mask: pl.Series) -> np.ndarray:
        return np.bincount(file_idx, weights=mask.to_numpy().astype(np.float64), minlength=n_files).astype(np.int64)

    n_bad = per_file(bad)
    n_time = n_key = n_tk = n_bad
    if n_bad.any():
        n_time, n_key, n_tk = per_file(bad_time), per_file(bad_key), per_file(bad_time | bad_key)
        frame = frame.filter(~bad)
    results = []
    for i in range(n_files):
        unparsed = int(n_bad[i])
        notes = _malformed_notes(unparsed, int(n_time[i]), int(n_key[i]), int(n_tk[i])) if unparsed else []
        results.append(CounterFileResult(int(counts[i]), unparsed, notes, int(counts[i]) - unparsed,
                                          len(counters), []))
    del bad, bad_time, bad_key
    if frame.height:
        out = error_deltas(frame, counters=counters, keep=["line", "_file"], by=["_file"])
        del frame
        for f, row in _error_rows(out):
            res = results[f]
            _, _, rel, side = files[f]
            res.observations.append(_row_observation(row, counters, source=source, cluster=cluster,
                                                     workload_id=workload_id, rel=rel, side=side))
    return results


# ----------------------------------------------------------------------------- observations


def delta_observation(d: CounterDelta, *, source: Source, cluster: str = "", workload_id: str | None = None,
                      fmt: str = "counters", side: str = "host", zeros: bool = True,
                      position: Position | None = None) -> Observation:
    """A ``kind="fabric_counter"`` Observation of one delta: host = the node, ``fabric_port``
    = ``<node>/<port>``, ``metric`` = the deltas as floats (only the nonzero ones unless
    ``zeros``), ``attributes`` = {port, node, interval_s, reset, saturated, side},
    ``time_source="line"`` (the sample's own time), exact quality. ``body`` stays None: the
    rule pack reads the metric (``fabric.port_errors``)."""
    metric = {k: float(v) for k, v in sorted(d.deltas.items()) if zeros or v}
    return Observation(
        source=source,
        kind="fabric_counter",
        observed_at=d.at_ns,
        time_source="line",
        time_quality=TIME_QUALITY_EXACT,
        host=d.node,
        cluster=cluster,
        workload_id=workload_id,
        fabric_port=f"{d.node}/{d.port}",
        format=fmt,
        metric=metric,
        attributes={"port": d.port, "node": d.node, "interval_s": d.interval_s,
                    "reset": d.reset, "saturated": d.saturated, "side": side},
        position=position or Position(),
    ).with_id()


def table_observations(table: CounterTable, *, source: Source, rel: str, cluster: str,
                       workload_id: str | None, side: str) -> Iterator[Observation]:
    """The fabric_counter Observations of a CSV series in a bundle: deltas computed
    vectorised, materialised only for rows with a nonzero error delta or a reset
    (``metric`` = every nonzero delta of the row), in (node, port, time) order; the position
    is the row's line in ``rel``."""
    frame = table.frame
    counters = table.counters
    if frame.height == 0 or not counters:
        return
    out = error_deltas(frame, counters=counters, keep=["line"])
    for _, row in _error_rows(out):
        yield _row_observation(row, counters, source=source, cluster=cluster, workload_id=workload_id,
                               rel=rel, side=side)


def _error_rows(out: pl.DataFrame) -> Iterator[tuple[int, dict[str, Any]]]:
    """(file index, row) of the rows of an :func:`~connectors.counter_series.error_deltas`
    frame (rows with a nonzero error delta or a reset), in frame order; the index is the row's
    ``_file`` (0 without that column)."""
    has_file = "_file" in out.columns
    for row in out.iter_rows(named=True):
        yield (row["_file"] if has_file else 0), row


def _row_observation(row: Mapping[str, Any], counters: Sequence[str], *, source: Source, cluster: str,
                     workload_id: str | None, rel: str, side: str) -> Observation:
    """The fabric_counter Observation of one deltas row of a CSV series (position: the
    row's line in ``rel``)."""
    d = CounterDelta(row["at_ns"], row["node"], row["port"], row["interval_s"], row["reset"],
                     row["saturated"], {c: row[c] for c in counters if row[c]})
    return delta_observation(d, source=source, cluster=cluster, workload_id=workload_id,
                             fmt="counters_csv", side=side, zeros=False,
                             position=Position(file=rel, line=row["line"]))


