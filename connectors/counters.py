"""Fabric port counters: the live ``counters`` connector and ``faultstream connect counters``.

:class:`CountersConnector` reads the port counters of one node (sysfs, or a ``perfquery`` /
``ibqueryerrors`` output file) at every poll, keeps the previous values per port
(:class:`~connectors.counter_series.DeltaTracker`, persisted in its cursor) and returns the
deltas as ``fabric_counter`` Observations; as a :class:`connectors.source.Source` it is run by
:func:`connectors.runner.run` (:func:`connect_counters_cli`).

The parts it is made of live in their own modules, and their names are importable from here
too (``from connectors.counters import deltas, read_counter_csv``):

* :mod:`connectors.counter_series` -- counter widths (wrap or saturate), the delta rules
  (:func:`~connectors.counter_series.deltas`), :class:`~connectors.counter_series.DeltaTracker`;
* :mod:`connectors.counter_readers` -- the readers (sysfs, perfquery, ibqueryerrors, CSV series,
  batches of CSV files) and the Observations of deltas.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Generator, TYPE_CHECKING, Annotated, Any

import typer

from connectors.bundle import is_binary
from connectors.command import Shared, connector, input_files
from connectors.files import BINARY_PROBE_BYTES
from connectors.registry import cli_fail
from connectors.counter_readers import (
    COUNTER_BATCH_BYTES,
    COUNTER_SUFFIX,
    PERFQUERY_NAMES,
    CounterFileResult,
    CounterTable,
    counter_batch_key,
    delta_observation,
    parse_ibqueryerrors,
    parse_perfquery,
    read_counter_batch,
    read_counter_csv,
    read_sysfs,
    table_observations,
)
from connectors.counter_series import (
    COUNTERS,
    ERROR_COUNTERS,
    TRAFFIC_COUNTERS,
    CounterDelta,
    CounterSample,
    CounterSpec,
    DeltaTracker,
    counter_spec,
    deltas,
    is_error_counter,
    samples_frame,
)
from schemas.records import CoverageEntry, Observation, Position, Source

if TYPE_CHECKING:  # pragma: no cover
    from connectors.cursor import CursorStore

__all__ = [
    "COUNTERS",
    "COUNTER_SUFFIX",
    "ERROR_COUNTERS",
    "PERFQUERY_NAMES",
    "TRAFFIC_COUNTERS",
    "CounterDelta",
    "CounterSample",
    "CounterSpec",
    "COUNTER_BATCH_BYTES",
    "CounterFileResult",
    "CounterTable",
    "CountersConnector",
    "DeltaTracker",
    "connect_counters_cli",
    "counter_batch_key",
    "counter_spec",
    "deltas",
    "delta_observation",
    "is_error_counter",
    "parse_ibqueryerrors",
    "parse_perfquery",
    "read_counter_batch",
    "read_counter_csv",
    "read_sysfs",
    "samples_frame",
    "table_observations",
]


# ----------------------------------------------------------------------------- live connector


class CountersConnector:
    """Polls port counters and turns them into ``fabric_counter`` Observations of deltas.

    Sources: a sysfs root (``sysfs_root``; every HCA port of this node) or, read once per
    poll, a file of ``perfquery`` or ``ibqueryerrors`` output. ``cursor``: a
    :class:`connectors.cursor.CursorStore` holding the :class:`DeltaTracker` state, so a
    restart computes the delta across the downtime instead of losing it. Every delta is
    published, zeros included (coverage shows the port is watched); a port's first sample
    only primes it."""

    def __init__(self, *, node: str, sysfs_root: str | Path | None = "/sys", perfquery: str | Path | None = None,
                 ibqueryerrors: str | Path | None = None, cluster: str = "",
                 cursor: "CursorStore | None" = None, clock=time.time_ns) -> None:
        if sum(x is not None for x in (perfquery, ibqueryerrors)) > 1:
            raise ValueError("give --perfquery or --ibqueryerrors, not both")
        self.node = node
        self.cluster = cluster
        self.sysfs_root = Path(sysfs_root) if sysfs_root is not None else None
        self.perfquery = Path(perfquery) if perfquery is not None else None
        self.ibqueryerrors = Path(ibqueryerrors) if ibqueryerrors is not None else None
        self.cursor = cursor
        self.clock = clock
        state = cursor.load() if cursor is not None else {}
        self.tracker = DeltaTracker(state.get("tracker") if isinstance(state, dict) else None)
        self.polls = 0
        self.samples = 0
        self.published = 0  #: deltas returned by poll (the runner publishes them all)
        self._last = 0
        self.errors: list[str] = []

    @property
    def mode(self) -> str:
        """``sysfs``, ``perfquery`` or ``ibqueryerrors``."""
        if self.perfquery is not None:
            return "perfquery"
        if self.ibqueryerrors is not None:
            return "ibqueryerrors"
        return "sysfs"

    def read(self, at_ns: int) -> list[CounterSample]:
        """One reading of the configured source (problems go to ``errors``, never raised)."""
        errors: list[str] = []
        if self.mode == "sysfs":
            samples = read_sysfs(self.sysfs_root or "/sys", self.node, at_ns, errors=errors)
        else:
            path = self.perfquery or self.ibqueryerrors
            assert path is not None
            try:
                text = path.read_text("utf-8", errors="replace")
            except OSError as exc:
                errors.append(f"{path}: cannot read: {exc.strerror or exc}")
                text = ""
            if self.mode == "perfquery":
                samples = parse_perfquery(text, at_ns=at_ns, node=self.node, errors=errors)
            else:
                samples = parse_ibqueryerrors(text, at_ns=at_ns, errors=errors)
        self.errors.extend(errors[: max(0, 200 - len(self.errors))])
        return samples

    def _side(self, d: CounterDelta) -> str:
        """``switch`` for ibqueryerrors switch ports (a bare port number), else ``host``."""
        return "switch" if self.mode == "ibqueryerrors" and "/" not in d.port else "host"

    def poll(self) -> list[Observation]:
        """Read once and return the Observations of the deltas (none for ports seen the
        first time)."""
        at = int(self.clock())
        samples = self.read(at)
        self.polls += 1
        self.samples += len(samples)
        src = Source(connector="counters", instance=self.node)
        where = str(self.perfquery or self.ibqueryerrors or (self.sysfs_root or Path("/sys")) / "class/infiniband")
        out = [
            delta_observation(d, source=src, cluster=self.cluster, fmt=self.mode, side=self._side(d),
                              position=Position(file=where))
            for d in self.tracker.update(samples)
        ]
        self._last = len(out)
        self.published += len(out)
        return out

    def checkpoint(self) -> dict[str, Any]:
        """The cursor document: the tracker state after the last poll."""
        return {"tracker": self.tracker.state()}

    @property
    def pending(self) -> bool:
        """True after a first sysfs poll that only primed the ports (no delta yet): one more
        poll, an interval later, gives the first deltas."""
        return self.mode == "sysfs" and self.polls == 1 and self._last == 0

    def coverage(self) -> list[CoverageEntry]:
        """One entry ``counters:<node>``: port samples read (``records``), unreadable or
        malformed inputs (``unparsed``, the first five in ``detail``)."""
        status = "present" if self.samples else ("failed" if self.errors else "empty")
        return [CoverageEntry(source=f"counters:{self.node}", status=status, records=self.samples,
                              unparsed=len(self.errors), detail="; ".join(self.errors[:5]))]


@connector(interval=10.0, cursor=None)
def connect_counters_cli(
    opts: Shared,
    cluster: Annotated[str, typer.Option(help="cluster name (the fabric correlator works per cluster)")],
    sysfs_root: Annotated[Path, typer.Option(help="sysfs mount to poll (reads class/infiniband/*/ports/*/counters and hw_counters)")] = Path("/sys"),
    perfquery: Annotated[Path | None, typer.Option(help="read this perfquery output once instead of sysfs")] = None,
    ibqueryerrors: Annotated[Path | None, typer.Option(help="read this ibqueryerrors output once instead of sysfs")] = None,
    node: Annotated[str | None, typer.Option(help="node name (default: this machine's hostname)")] = None,
) -> Generator[CountersConnector, Any, None]:
    """Publish fabric port counter deltas (kind fabric_counter, key = node): poll sysfs (with --follow every --interval seconds; --once: one poll, two --interval apart when the first only primes the deltas), or read a perfquery/ibqueryerrors file once. A port's first sample only primes its deltas; --cursor keeps the last counter values, so a restart (or the next file) loses no delta."""
    if perfquery is None and ibqueryerrors is None and not (sysfs_root / "class" / "infiniband").is_dir():
        raise ValueError(f"{sysfs_root}: no class/infiniband directory (is this the sysfs mount of a host with RDMA devices?)")
    conn = CountersConnector(
        node=node or socket.gethostname(), sysfs_root=sysfs_root, perfquery=perfquery,
        ibqueryerrors=ibqueryerrors, cluster=cluster, cursor=opts.cursor_store())
    if conn.mode != "sysfs" and opts.follow:
        raise ValueError("--follow polls sysfs: a perfquery or ibqueryerrors file is read once")
    if conn.mode != "sysfs":
        (path,) = input_files([perfquery or ibqueryerrors], follow=False)  # type: ignore[list-item]
        with path.open("rb") as fh:
            if is_binary(fh.read(BINARY_PROBE_BYTES)):
                raise ValueError(f"{path}: binary content, not {conn.mode} output")
    yield conn
    (cov,) = conn.coverage()
    typer.echo(f"published {conn.published} counter deltas from {conn.samples} port samples "
               f"({conn.polls} polls, {cov.unparsed} unreadable inputs) to {opts.topic}", err=True)
    if conn.samples == 0:
        cli_fail(f"no counters read ({conn.mode}): " + ("; ".join(conn.errors[:3]) or "no ports found"))
