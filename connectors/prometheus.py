"""Prometheus connector: DCGM exporter and node exporter InfiniBand series -> the telemetry and
fabric counter Observations the bundle reader makes, over PromQL ``query_range`` with a
persisted cursor.

``PrometheusConnector(url, cluster=..., cursor=CursorStore(...))`` asks Prometheus's HTTP API
``POST /api/v1/query_range`` (form ``query``, ``start``, ``end``, ``step``; Unix seconds) for
two selectors every poll: the DCGM fields of :data:`DCGM_FIELDS` and the node exporter
InfiniBand families of :data:`NODE_INFINIBAND` (``{__name__=~"..."}`` plus the extra label
matchers of ``match``). The answer is ``{"status": "success", "data": {"resultType":
"matrix", "result": [{"metric": {labels}, "values": [[<unix s>, "<value>"], ...]}, ...]}}``
(Prometheus HTTP API reference, "Range queries").

**Mapping** (written from dcgm-exporter's ``etc/default-counters.csv`` /
``dcp-metrics-included.csv``, the DCGM field meanings of ``dcgm_fields.h``, node_exporter's
``collector/infiniband_linux.go`` and procfs ``sysfs/class_infiniband.go``):

* DCGM fields -> one ``kind="telemetry"`` Observation per GPU per evaluation time, ``metric``
  keys as :mod:`connectors.telemetry` names them (``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` ->
  ``ecc_uncorrected_volatile``, ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`` ->
  ``remapped_rows_uncorrectable``, ``DCGM_FI_DEV_PCIE_REPLAY_COUNTER`` ->
  ``pcie_replay_counter``, ...; the table is :data:`DCGM_FIELDS`). The clock event reasons
  bit mask (``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``, field 112, older name
  ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``; NVML's ``nvmlClocksEventReason*`` bits) becomes ``gpu_idle``, ``sw_power_cap``,
  ``hw_slowdown``, ``hw_thermal_slowdown``, ``hw_power_brake_slowdown``,
  ``sw_thermal_slowdown``, ``sync_boost`` (1/0), as the NVML JSON reader decodes it;
  ``DCGM_FI_DEV_RETIRED_PENDING`` (pages pending retirement) becomes the 1/0 flag
  ``retired_pages_pending`` of the nvidia-smi readers. Fields no bundle parser has keep a DCGM
  name: ``thermal_violation`` / ``power_violation`` (cumulative throttling time in the
  exporter's unit: ns in current dcgm-exporter counters files and ``dcgm_fields.h``, µs in
  older ``dcgm_fields.h``), ``nvlink_crc_flit_errors``,
  ``nvlink_crc_data_errors``, ``nvlink_replay_errors``, ``nvlink_recovery_errors`` (totals
  over the GPU's links) and ``xid``: the value of ``DCGM_FI_DEV_XID_ERRORS`` (the last XID of
  the GPU) in the sample where it **changed** to a non-zero value -- the gauge holds the last
  XID for ever, so only a change is an XID that happened (a repeat of the same XID cannot be
  seen in it). dcgm-exporter 4 puts ``err_code``/``err_msg`` labels on that series, so a new
  XID starts a new series: the change is found per GPU, whatever the other labels.
  ``format="dcgm_exporter"``; ``body`` the one-line summary the bundle reader writes
  (:attr:`connectors.telemetry.TelemetrySample.summary`); ``attributes`` empty.
* node exporter ``node_infiniband_*`` counters -> the sysfs counter names of
  :mod:`connectors.counter_series` (``symbol_error_total`` -> ``symbol_error``,
  ``port_errors_received_total`` -> ``port_rcv_errors``, ...; ``port_data_*_bytes_total`` are
  divided by 4 back into the sysfs ``port_*_data`` units, procfs having multiplied them), one
  :class:`~connectors.counter_series.CounterSample` per HCA port (``<device>/<port>``,
  ``mlx5_0/1``) per evaluation time, deltas by :class:`~connectors.counter_series.DeltaTracker`
  (the one delta rule: widths, saturation, resets), Observations by
  :func:`connectors.counter_readers.delta_observation` (``kind="fabric_counter"``,
  ``fabric_port`` = ``<host>/<device>/<port>``, ``side="host"``, ``format="node_exporter"``).
  Like the bundle reader, only deltas with an error increase or a reset are published, with
  their non-zero deltas (``all_deltas`` publishes every delta, zeros included, as the live
  ``counters`` connector does).

**Labels**: the host is the first of ``host_labels`` present on a series (default
``Hostname``, ``hostname`` (dcgm-exporter 3 and 4), ``node``, ``nodename``, ``instance``; an
``instance`` of ``host:port`` loses the port); a series without any is left out and counted
in the coverage. The GPU is ``GpuRef(index=<gpu>, uuid=<UUID | uuid | gpu_uuid>,
pci_bus_id=<pci_bus_id>)`` (dcgm-exporter's labels, the bus id normalised to ``0000:9c:00``);
series with an ``nvlink`` label (per-link metrics) are not read. Several series of one field
for the same GPU and time (MIG instances, two exporters) give their largest value.

**Time and cursor.** Evaluation times are the multiples of ``step_s`` (epoch-aligned), so every
run asks for the same instants. A poll covers the instants after the cursor's ``through_ms``
up to ``now - delay_s`` (``delay_s`` leaves Prometheus the time to ingest a scrape), at most
``max_points`` of them (a longer backlog leaves the source ``pending``: the runner polls again
at once). The first poll of an empty cursor starts ``lookback_s`` before now. Each query also
reaches ``history_s`` before the first new instant: those earlier samples give the previous
value of every series (the counter deltas and the XID change of the first new instant) and are
not published themselves; a series silent for longer than ``history_s`` starts over (its first
sample only primes the deltas). Observations are timed at their evaluation instant
(``time_source="line"``; telemetry ``TIME_QUALITY_SECONDS``: the value is the last scrape at or
before the instant; counter deltas the exact quality ``delta_observation`` gives). The cursor
document is ``{"version": 1, "through_ms": <Unix ms>}``; it is saved by
:func:`connectors.runner.run` only after the producer's flush, and
:meth:`PrometheusConnector.rewind` returns to the instant before the failed poll, so a restart
or a retry repeats a window with the same observation ids (content hashes) and never skips one.

**Errors.** Refused connections, timeouts and HTTP 429/500/502/503/504 are retried with
exponential back-off (tenacity, ``attempts`` tries, ``backoff_s`` doubling up to
``max_backoff_s``), then raise :class:`PrometheusUnavailable`; Prometheus's own error answer
(HTTP 400 ``bad_data``, 422 ``execution``) raises :class:`PrometheusQueryError` with its
``errorType`` and ``error``; an answer that is not a Prometheus matrix result (HTML from a
proxy, another API) raises :class:`PrometheusResponseError`. Single bad values (``NaN``, a
negative counter) are skipped and counted in the coverage, Prometheus ``warnings`` noted there.

Delivery: a :class:`connectors.source.Source` and :class:`connectors.source.Rewindable`;
``faultstream connect prometheus`` (:func:`connect_prometheus_cli`) runs it through
:func:`connectors.runner.run`.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generator, TYPE_CHECKING, Annotated, Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

import httpx
import typer
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from connectors.command import Shared, connector
from connectors.counter_readers import delta_observation
from connectors.counter_series import CounterDelta, CounterSample, DeltaTracker
from connectors.telemetry import CLOCK_EVENT_REASON_BITS as NVML_CLOCK_EVENT_BITS
from connectors.telemetry import TelemetrySample
from correlators.ids import normalise_pci
from schemas.records import TIME_QUALITY_SECONDS, CoverageEntry, GpuRef, Observation, Position, Source

if TYPE_CHECKING:  # pragma: no cover
    from connectors.cursor import CursorStore

__all__ = [
    "CLOCK_EVENT_FIELDS",
    "CURSOR_VERSION",
    "DCGM_FIELDS",
    "DEFAULT_HOST_LABELS",
    "NODE_INFINIBAND",
    "PrometheusConnector",
    "PrometheusError",
    "PrometheusQueryError",
    "PrometheusResponseError",
    "PrometheusUnavailable",
    "QUERY_RANGE_PATH",
    "XID_FIELD",
    "connect_prometheus_cli",
    "host_of",
]

log = logging.getLogger("faultstream.connector.prometheus")

QUERY_RANGE_PATH = "/api/v1/query_range"
CURSOR_VERSION = 1
#: Statuses worth another try: 429 (too many queries), 5xx (a restarting server or proxy; a
#: Prometheus that is still replaying its WAL answers 503).
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
#: Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS_PER_SERIES = 11_000
#: Characters of a bad answer kept in an exception message.
ERROR_EXCERPT = 300

#: DCGM field (dcgm-exporter metric name) -> telemetry metric key, read as the value.
DCGM_FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_uncorrected_volatile",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_corrected_volatile",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "ecc_uncorrected_aggregate",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "ecc_corrected_aggregate",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "remapped_rows_correctable",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "remapped_rows_uncorrectable",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "remapped_rows_pending",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "remapped_rows_failure",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replay_counter",
    "DCGM_FI_DEV_PCIE_LINK_GEN": "pcie_link_gen",
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": "pcie_link_width",
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": "pcie_link_gen_max",
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": "pcie_link_width_max",
    "DCGM_FI_DEV_GPU_TEMP": "temperature_gpu_c",
    "DCGM_FI_DEV_MEMORY_TEMP": "temperature_memory_c",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_SM_CLOCK": "clocks_sm_mhz",
    "DCGM_FI_DEV_GPU_UTIL": "utilization_gpu_pct",
    "DCGM_FI_DEV_FB_USED": "memory_used_mib",
    "DCGM_FI_DEV_FB_TOTAL": "memory_total_mib",
    "DCGM_FI_DEV_THERMAL_VIOLATION": "thermal_violation",
    "DCGM_FI_DEV_POWER_VIOLATION": "power_violation",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "nvlink_crc_flit_errors",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "nvlink_crc_data_errors",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "nvlink_replay_errors",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "nvlink_recovery_errors",
}
#: DCGM fields read as a 1/0 flag (value > 0).
DCGM_FLAG_FIELDS: dict[str, str] = {"DCGM_FI_DEV_RETIRED_PENDING": "retired_pages_pending"}
#: The clock event reasons bit mask, by its DCGM 3.2+ and its older name (field id 112).
CLOCK_EVENT_FIELDS: tuple[str, ...] = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
#: The last XID of the GPU (a gauge); published as ``xid`` where it changes.
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"

#: node exporter family (after ``node_infiniband_``) -> (sysfs counter name, divisor).
NODE_INFINIBAND: dict[str, tuple[str, int]] = {
    # PortCounters (sysfs ports/<n>/counters)
    "excessive_buffer_overrun_errors_total": ("excessive_buffer_overrun_errors", 1),
    "link_downed_total": ("link_downed", 1),
    "link_error_recovery_total": ("link_error_recovery", 1),
    "local_link_integrity_errors_total": ("local_link_integrity_errors", 1),
    "multicast_packets_received_total": ("multicast_rcv_packets", 1),
    "multicast_packets_transmitted_total": ("multicast_xmit_packets", 1),
    "port_constraint_errors_received_total": ("port_rcv_constraint_errors", 1),
    "port_constraint_errors_transmitted_total": ("port_xmit_constraint_errors", 1),
    "port_data_received_bytes_total": ("port_rcv_data", 4),
    "port_data_transmitted_bytes_total": ("port_xmit_data", 4),
    "port_discards_received_total": ("port_rcv_discards", 1),
    "port_discards_transmitted_total": ("port_xmit_discards", 1),
    "port_errors_received_total": ("port_rcv_errors", 1),
    "port_packets_received_total": ("port_rcv_packets", 1),
    "port_packets_transmitted_total": ("port_xmit_packets", 1),
    "port_receive_remote_physical_errors_total": ("port_rcv_remote_physical_errors", 1),
    "port_receive_switch_relay_errors_total": ("port_rcv_switch_relay_errors", 1),
    "port_transmit_wait_total": ("port_xmit_wait", 1),
    "symbol_error_total": ("symbol_error", 1),
    "unicast_packets_received_total": ("unicast_rcv_packets", 1),
    "unicast_packets_transmitted_total": ("unicast_xmit_packets", 1),
    "vl15_dropped_total": ("VL15_dropped", 1),
    # mlx5 hw_counters (sysfs ports/<n>/hw_counters)
    "duplicate_requests_packets_total": ("duplicate_request", 1),
    "implied_nak_seq_errors_total": ("implied_nak_seq_err", 1),
    "local_ack_timeout_errors_total": ("local_ack_timeout_err", 1),
    "np_cnp_packets_sent_total": ("np_cnp_sent", 1),
    "np_ecn_marked_roce_packets_received_total": ("np_ecn_marked_roce_packets", 1),
    "out_of_buffer_drops_total": ("out_of_buffer", 1),
    "out_of_sequence_packets_received_total": ("out_of_sequence", 1),
    "packet_sequence_errors_total": ("packet_seq_err", 1),
    "req_cqes_errors_total": ("req_cqe_error", 1),
    "req_cqes_flush_errors_total": ("req_cqe_flush_error", 1),
    "req_remote_access_errors_total": ("req_remote_access_errors", 1),
    "req_remote_invalid_request_errors_total": ("req_remote_invalid_request", 1),
    "resp_cqes_errors_total": ("resp_cqe_error", 1),
    "resp_cqes_flush_errors_total": ("resp_cqe_flush_error", 1),
    "resp_local_length_errors_total": ("resp_local_length_error", 1),
    "resp_remote_access_errors_total": ("resp_remote_access_errors", 1),
    "rnr_nak_retry_packets_received_total": ("rnr_nak_retry_err", 1),
    "roce_adp_retransmits_total": ("roce_adp_retrans", 1),
    "roce_adp_retransmits_timeout_total": ("roce_adp_retrans_to", 1),
    "roce_slow_restart_used_total": ("roce_slow_restart", 1),
    "roce_slow_restart_cnps_total": ("roce_slow_restart_cnps", 1),
    "roce_slow_restart_total": ("roce_slow_restart_trans", 1),
    "rp_cnp_packets_handled_total": ("rp_cnp_handled", 1),
    "rp_cnp_ignored_packets_received_total": ("rp_cnp_ignored", 1),
    "rx_atomic_requests_total": ("rx_atomic_requests", 1),
    "rx_dct_connect_requests_total": ("rx_dct_connect", 1),
    "rx_read_requests_total": ("rx_read_requests", 1),
    "rx_write_requests_total": ("rx_write_requests", 1),
    "rx_icrc_encapsulated_errors_total": ("rx_icrc_encapsulated", 1),
}
IB_PREFIX = "node_infiniband_"

#: Labels tried for the host, in order.
DEFAULT_HOST_LABELS: tuple[str, ...] = ("Hostname", "hostname", "node", "nodename", "instance")
#: dcgm-exporter's GPU UUID label: ``UUID``, ``uuid`` with ``--use-old-namespace``, ``gpu_uuid``
#: on its per-link series.
UUID_LABELS: tuple[str, ...] = ("UUID", "uuid", "gpu_uuid")


# ----------------------------------------------------------------------------- errors


class PrometheusError(Exception):
    """Prometheus could not be queried; the message names the URL and the reason."""


class PrometheusUnavailable(PrometheusError):
    """No answer (refused connection, timeout) or a retryable status after every attempt.
    ``attempts``: how many were made."""

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class PrometheusQueryError(PrometheusError):
    """Prometheus answered ``"status": "error"``: ``error_type`` (``bad_data``,
    ``execution``, ...) and ``detail`` are its ``errorType`` and ``error``."""

    def __init__(self, message: str, error_type: str, detail: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.detail = detail


class PrometheusResponseError(PrometheusError):
    """The answer is not a Prometheus range-query result (not JSON, another shape, a value
    that is not a number)."""


class _Retryable(Exception):
    """A transport error or a status worth another try (internal to :meth:`_query`)."""


# ----------------------------------------------------------------------------- helpers


def host_of(labels: Mapping[str, str], host_labels: Sequence[str] = DEFAULT_HOST_LABELS) -> str | None:
    """The host a series belongs to: the value of the first of ``host_labels`` present and
    non-empty; an ``instance`` label loses its ``:port`` (``node-a01:9100`` -> ``node-a01``,
    ``[fd00::11]:9100`` -> ``fd00::11``). ``None`` when no label names one."""
    for name in host_labels:
        value = labels.get(name)
        if not value:
            continue
        if name == "instance":
            if value.startswith("[") and "]" in value:
                return value[1:value.index("]")] or None
            head, sep, tail = value.rpartition(":")
            if sep and tail.isdigit() and ":" not in head:
                return head or None
        return value
    return None


def _gpu_of(labels: Mapping[str, str]) -> GpuRef | None:
    """The GPU of a dcgm-exporter series (``gpu``, ``UUID``/``uuid``/``gpu_uuid``,
    ``pci_bus_id`` labels); ``None`` when it names none."""
    index: int | None = None
    raw = labels.get("gpu", "")
    if raw.isdigit():
        index = int(raw)
    uuid = next((labels[k] for k in UUID_LABELS if labels.get(k)), None)
    pci = normalise_pci(labels.get("pci_bus_id") or None)
    if index is None and uuid is None and pci is None:
        return None
    return GpuRef(index=index, uuid=uuid, pci_bus_id=pci)


def _gpu_key(gpu: GpuRef) -> tuple[int, str, str]:
    return (gpu.index if gpu.index is not None else -1, gpu.uuid or "", gpu.pci_bus_id or "")


def _regex_alternation(names: Iterable[str]) -> str:
    """``a|b|c`` for a PromQL ``=~`` matcher (RE2, anchored by Prometheus); names are metric
    names, so only ``.`` would need escaping and none has one."""
    return "|".join(sorted(names))


def _selector(names: Iterable[str], match: str) -> str:
    extra = match.strip().strip(",")
    inner = f'__name__=~"{_regex_alternation(names)}"'
    return "{" + inner + ("," + extra if extra else "") + "}"


def sanitized_url(url: str) -> str:
    """``url`` without user info, query and fragment (``http://prom:9090/prometheus``): what
    names the instance in records and messages."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


@dataclass
class _Stats:
    """What one family read: series and points kept, series without a host, bad values."""

    series: int = 0
    points: int = 0
    no_host: int = 0
    bad_values: int = 0
    warnings: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- connector


class PrometheusConnector:
    """Polls Prometheus for DCGM and node exporter InfiniBand series (module docstring: the
    mapping, the window, the cursor, the errors).

    ``url``: Prometheus base URL (``http://prometheus:9090``; a path prefix such as
    ``/prometheus`` is kept; user info in the URL is sent as basic auth). ``cluster``:
    ``Observation.cluster``. ``cursor``: persists the position (read here, saved by the
    runner). ``step_s``: seconds between evaluation instants (> 0, at least 1 ms).
    ``delay_s``: how far behind now the window ends (seconds, >= 0). ``lookback_s``: where an
    empty cursor starts (seconds before now). ``history_s``: how far before the first new
    instant each query reaches for previous values (default ``10 * step_s``). ``max_points``:
    new instants per poll (each query loads series x (``max_points`` + history / step) samples
    into Prometheus, whose ``--query.max-samples`` is 50 million by default: split a large
    cluster over several connectors with ``match``). ``host_labels``: labels naming the host, in order. ``match``: extra
    PromQL label matchers for both selectors (``cluster="c1",job=~"dcgm|node"``).
    ``all_deltas``: publish every counter delta, zeros included. ``timeout_s``: per request.
    ``attempts``/``backoff_s``/``max_backoff_s``: retries of unreachable or 429/5xx answers
    (seconds). ``bearer_token``: sent as ``Authorization: Bearer``. ``client``: an
    ``httpx.Client`` to use instead of one of its own. ``clock``: Unix seconds (tests).
    ``sleep``: the pause between attempts (tests).

    Raises ``ValueError`` for impossible settings and :class:`connectors.cursor.CursorError`
    for an unreadable cursor, :class:`PrometheusError` when the cursor holds another
    version. ``ValueError`` also for a URL that is not ``http(s)://host[:port][/prefix]``."""

    def __init__(self, url: str, *, cluster: str, cursor: "CursorStore | None" = None,
                 step_s: float = 30.0, delay_s: float = 60.0, lookback_s: float = 3600.0,
                 history_s: float | None = None, max_points: int = 120,
                 host_labels: Sequence[str] = DEFAULT_HOST_LABELS, match: str = "",
                 all_deltas: bool = False, timeout_s: float = 30.0, attempts: int = 5,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 bearer_token: str | None = None, client: httpx.Client | None = None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.step_ms = int(round(step_s * 1000))
        if self.step_ms < 1:
            raise ValueError("step must be at least 1 ms")
        if delay_s < 0 or lookback_s < 0:
            raise ValueError("delay and lookback must be >= 0 seconds")
        if attempts < 1:
            raise ValueError("attempts must be >= 1")
        if not host_labels:
            raise ValueError("at least one host label is needed")
        history = 10 * step_s if history_s is None else history_s
        self.history_ms = max(self.step_ms, int(math.ceil(history * 1000 / self.step_ms)) * self.step_ms)
        if max_points < 1 or self.history_ms // self.step_ms + max_points > MAX_POINTS_PER_SERIES:
            raise ValueError(f"max_points plus history/step must stay within 1..{MAX_POINTS_PER_SERIES} "
                             "(Prometheus's limit of points per series)")
        self.url = url.rstrip("/")
        self.instance = sanitized_url(url)
        self.cluster = cluster
        self.cursor = cursor
        self.delay_ms = int(round(delay_s * 1000))
        self.lookback_ms = int(round(lookback_s * 1000))
        self.max_points = max_points
        self.host_labels = tuple(host_labels)
        self.match = match
        self.all_deltas = all_deltas
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.clock = clock
        self.sleep = sleep
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{sanitized_url(url) or url!r}: not an http(s) URL of a Prometheus server")
        self.headers = {"Accept": "application/json"}
        if bearer_token:
            self.headers["Authorization"] = f"Bearer {bearer_token}"
        self._own_client = client is None
        self.client = client if client is not None else httpx.Client(timeout=timeout_s)
        self._source = Source(connector="prometheus", instance=self.instance)
        saved = self._load()
        self._saved: int | None = saved   # through_ms of the cursor as read at start
        self._state: int | None = saved   # through_ms after the last poll
        self._before: int | None = saved  # through_ms before the last poll (rewind target)
        self.pending = False
        self.polls = 0
        self.published = 0
        self.requests = 0
        self.last_error: str | None = None
        self._stats = {"dcgm": _Stats(), "infiniband": _Stats()}

    # -- cursor -----------------------------------------------------------------------------
    def _load(self) -> int | None:
        if self.cursor is None:
            return None
        data = self.cursor.load()
        if not data:
            return None
        if data.get("version") != CURSOR_VERSION or not isinstance(data.get("through_ms"), int):
            raise PrometheusError(
                f"cursor {self.cursor.path}: not a Prometheus connector cursor of version "
                f"{CURSOR_VERSION} ({data!r:.120}); remove it to start from --lookback")
        return int(data["through_ms"])

    def checkpoint(self) -> dict[str, Any]:
        """``{"version": 1, "through_ms": <Unix ms of the last instant published>}`` after the
        last poll (``{}`` before any instant was read); save it only once that poll's
        observations were delivered."""
        if self._state is None:
            return {}
        return {"version": CURSOR_VERSION, "through_ms": self._state}

    def rewind(self) -> None:
        """Forget the last poll (its delivery failed): the next poll asks for the same
        instants again, giving the same observations with the same ids."""
        self._state = self._before
        self.pending = False

    def close(self) -> None:
        """Close the HTTP client when this connector made it."""
        if self._own_client:
            self.client.close()

    # -- window -----------------------------------------------------------------------------
    def window(self) -> tuple[int, int, int] | None:
        """The next poll's ``(query_start_ms, first_new_ms, last_new_ms)`` on the step grid,
        or ``None`` when no new instant is due yet."""
        step = self.step_ms
        now_ms = int(self.clock() * 1000)
        end = (now_ms - self.delay_ms) // step * step
        if self._state is None:
            first = (now_ms - self.lookback_ms) // step * step
        else:
            first = (self._state // step + 1) * step
        if first > end:
            return None
        last = min(end, first + (self.max_points - 1) * step)
        self.pending = last < end
        return first - self.history_ms, first, last

    # -- HTTP -------------------------------------------------------------------------------
    def _query(self, query: str, start_ms: int, end_ms: int) -> tuple[list[dict[str, Any]], list[str]]:
        """One range query (retried as the module docstring says): the matrix ``result`` and
        Prometheus's ``warnings``."""
        form = {"query": query, "start": f"{start_ms / 1000:.3f}", "end": f"{end_ms / 1000:.3f}",
                "step": f"{self.step_ms / 1000:.3f}"}
        target = self.url + QUERY_RANGE_PATH

        def attempt() -> httpx.Response:
            self.requests += 1
            try:
                resp = self.client.post(target, data=form, headers=self.headers)
            except httpx.TransportError as exc:
                raise _Retryable(f"{type(exc).__name__}: {exc or 'no answer'}") from exc
            if resp.status_code in RETRY_STATUS:
                raise _Retryable(f"HTTP {resp.status_code}: {resp.text[:ERROR_EXCERPT].strip()}")
            return resp

        def warn(state: Any) -> None:
            log.warning("Prometheus %s: %s; retrying in %.2g s (attempt %d of %d)", self.instance,
                        state.outcome.exception(), state.next_action.sleep, state.attempt_number,
                        self.attempts)

        retrying = Retrying(retry=retry_if_exception_type(_Retryable), stop=stop_after_attempt(self.attempts),
                            wait=wait_exponential(multiplier=self.backoff_s, max=self.max_backoff_s),
                            sleep=self.sleep, before_sleep=warn)
        try:
            resp = retrying(attempt)
        except RetryError as exc:
            reason = exc.last_attempt.exception()
            raise PrometheusUnavailable(
                f"Prometheus at {self.instance} unreachable after {self.attempts} attempts: {reason}",
                self.attempts) from reason
        return self._result(resp)

    def _result(self, resp: httpx.Response) -> tuple[list[dict[str, Any]], list[str]]:
        where = f"Prometheus at {self.instance} ({QUERY_RANGE_PATH}, HTTP {resp.status_code})"
        try:
            body = resp.json()
        except ValueError:
            kind = resp.headers.get("content-type", "no content type")
            raise PrometheusResponseError(
                f"{where}: not a Prometheus API answer ({kind}): {resp.text[:ERROR_EXCERPT].strip()!r}") from None
        if not isinstance(body, dict) or body.get("status") not in ("success", "error"):
            raise PrometheusResponseError(f"{where}: not a Prometheus API answer: {str(body)[:ERROR_EXCERPT]!r}")
        if body["status"] == "error" or resp.status_code >= 400:
            error_type = str(body.get("errorType", "unknown"))
            detail = str(body.get("error", ""))[:ERROR_EXCERPT]
            raise PrometheusQueryError(f"{where}: {error_type}: {detail}", error_type, detail)
        data = body.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            shape = data.get("resultType") if isinstance(data, dict) else type(data).__name__
            raise PrometheusResponseError(f"{where}: expected a matrix result, got {shape!r}")
        for series in data["result"]:
            if not (isinstance(series, dict) and isinstance(series.get("metric"), dict)
                    and isinstance(series.get("values", []), list)):
                raise PrometheusResponseError(f"{where}: a result entry is not a series: {str(series)[:ERROR_EXCERPT]!r}")
        warnings = [str(w) for w in body.get("warnings") or []]
        return data["result"], warnings

    # -- polling ----------------------------------------------------------------------------
    def poll(self) -> list[Observation]:
        """The observations of the instants after the cursor (up to ``max_points`` of them),
        in (time, host, kind, GPU / port) order. Raises :class:`PrometheusError` (nothing is
        consumed: the next poll asks again)."""
        self._before = self._state
        win = self.window()
        if win is None:
            return []
        start, first, last = win
        try:
            dcgm, dcgm_warn = self._query(self._dcgm_selector(), start, last)
            ib, ib_warn = self._query(self._ib_selector(), start, last)
        except PrometheusError as exc:
            self.last_error = str(exc)
            self.pending = False
            raise
        self.last_error = None
        self._stats["dcgm"].warnings = dcgm_warn[:5]
        self._stats["infiniband"].warnings = ib_warn[:5]
        out = self._telemetry(dcgm, first) + self._counters(ib, first)
        out.sort(key=lambda o: (o.observed_at, o.host, o.kind, _gpu_key(o.gpu) if o.gpu else (-1, "", ""),
                                o.fabric_port or ""))
        self._state = last
        self.polls += 1
        self.published += len(out)
        return out

    def _dcgm_selector(self) -> str:
        return _selector([*DCGM_FIELDS, *DCGM_FLAG_FIELDS, *CLOCK_EVENT_FIELDS, XID_FIELD], self.match)

    def _ib_selector(self) -> str:
        return _selector([IB_PREFIX + n for n in NODE_INFINIBAND], self.match)

    def _points(self, series: Mapping[str, Any], stats: _Stats) -> Iterable[tuple[int, float]]:
        """(Unix ms, value) of a series' finite values (others counted in ``stats``)."""
        for pair in series.get("values", []):
            try:
                t, raw = pair
                value = float(raw)
                at_ms = int(round(float(t) * 1000))
            except (TypeError, ValueError):
                stats.bad_values += 1
                continue
            if not math.isfinite(value):
                stats.bad_values += 1
                continue
            stats.points += 1
            yield at_ms, value

    def _telemetry(self, result: list[dict[str, Any]], first_ms: int) -> list[Observation]:
        stats = self._stats["dcgm"]
        # (host, gpu key) -> GpuRef; (host, gpu key, t) -> metric; (host, gpu key) -> {t: xid}
        gpus: dict[tuple[str, tuple[int, str, str]], GpuRef] = {}
        samples: dict[tuple[str, tuple[int, str, str], int], dict[str, float]] = {}
        xids: dict[tuple[str, tuple[int, str, str]], dict[int, float]] = {}
        for series in result:
            labels = {str(k): str(v) for k, v in series["metric"].items()}
            name = labels.get("__name__", "")
            if "nvlink" in labels:
                continue
            host = host_of(labels, self.host_labels)
            gpu = _gpu_of(labels)
            if host is None or gpu is None:
                stats.no_host += 1
                continue
            stats.series += 1
            gk = _gpu_key(gpu)
            gpus.setdefault((host, gk), gpu)
            for at_ms, value in self._points(series, stats):
                if name == XID_FIELD:
                    slot = xids.setdefault((host, gk), {})
                    slot[at_ms] = max(value, slot.get(at_ms, value))
                    continue
                if at_ms < first_ms:
                    continue
                metric = samples.setdefault((host, gk, at_ms), {})
                if name in DCGM_FIELDS:
                    if value < 0:
                        stats.bad_values += 1
                        continue
                    key = DCGM_FIELDS[name]
                    metric[key] = max(value, metric.get(key, value))
                elif name in DCGM_FLAG_FIELDS:
                    key = DCGM_FLAG_FIELDS[name]
                    metric[key] = max(1.0 if value > 0 else 0.0, metric.get(key, 0.0))
                elif name in CLOCK_EVENT_FIELDS:
                    mask = int(value)
                    for reason, bit in NVML_CLOCK_EVENT_BITS.items():
                        metric[reason] = max(1.0 if mask & bit else 0.0, metric.get(reason, 0.0))
        for (host, gk), by_time in xids.items():
            previous: float | None = None
            for at_ms in sorted(by_time):
                value = by_time[at_ms]
                if at_ms >= first_ms:
                    metric = samples.setdefault((host, gk, at_ms), {})
                    if value > 0 and value != previous:
                        metric["xid"] = float(int(value))
                previous = value
        out = []
        for (host, gk, at_ms), metric in samples.items():
            if not metric:
                continue
            gpu = gpus[(host, gk)]
            sample = TelemetrySample("dcgm_exporter", 0, gpu, dict(sorted(metric.items())))
            out.append(Observation(
                source=self._source, kind="telemetry", observed_at=at_ms * 1_000_000,
                time_source="line", time_quality=TIME_QUALITY_SECONDS, host=host,
                cluster=self.cluster, gpu=gpu.model_copy(), format="dcgm_exporter",
                body=sample.summary, metric=sample.metric, position=Position(),
            ).with_id())
        return out

    def _counters(self, result: list[dict[str, Any]], first_ms: int) -> list[Observation]:
        stats = self._stats["infiniband"]
        ports: dict[tuple[str, str, int], dict[str, int]] = {}
        for series in result:
            labels = {str(k): str(v) for k, v in series["metric"].items()}
            family = labels.get("__name__", "")[len(IB_PREFIX):]
            spec = NODE_INFINIBAND.get(family)
            host = host_of(labels, self.host_labels)
            device, port = labels.get("device"), labels.get("port")
            if spec is None:
                continue
            if host is None or not device or not port:
                stats.no_host += 1
                continue
            stats.series += 1
            counter, divisor = spec
            for at_ms, value in self._points(series, stats):
                if value < 0:
                    stats.bad_values += 1
                    continue
                ports.setdefault((host, f"{device}/{port}", at_ms), {})[counter] = int(value) // divisor
        samples = [CounterSample(at_ms * 1_000_000, host, port, values)
                   for (host, port, at_ms), values in ports.items()]
        tracker = DeltaTracker()
        out = []
        first_ns = first_ms * 1_000_000
        for d in tracker.update(samples):
            if d.at_ns < first_ns:
                continue
            if not self.all_deltas and not (d.reset or d.errors()):
                continue
            out.append(self._delta_obs(d))
        return out

    def _delta_obs(self, d: CounterDelta) -> Observation:
        return delta_observation(d, source=self._source, cluster=self.cluster, fmt="node_exporter",
                                 side="host", zeros=self.all_deltas, position=Position())

    def coverage(self) -> list[CoverageEntry]:
        """Two entries, ``prometheus:<url>/dcgm`` and ``prometheus:<url>/infiniband``:
        ``records`` = points read, ``unparsed`` = series without a host (or GPU / HCA port)
        plus bad values; ``failed`` with the error while the last poll failed."""
        out = []
        for name, st in self._stats.items():
            if self.last_error is not None:
                status, detail = "failed", self.last_error
            else:
                status = "present" if st.points else "empty"
                notes = []
                if st.no_host:
                    notes.append(f"{st.no_host} series without a host label ({', '.join(self.host_labels)}) "
                                 "or without the GPU / HCA port labels")
                if st.bad_values:
                    notes.append(f"{st.bad_values} values not read (NaN, infinite, negative)")
                notes.extend(f"warning: {w}" for w in st.warnings)
                detail = "; ".join(notes)
            out.append(CoverageEntry(source=f"prometheus:{self.instance}/{name}", status=status,
                                     records=st.points, unparsed=st.no_host + st.bad_values, detail=detail[:500]))
        return out


# ----------------------------------------------------------------------------- CLI


@connector(interval="step", cursor=".state/cursors/prometheus-{cluster}.json", errors=(PrometheusError,))
def connect_prometheus_cli(
    opts: Shared,
    url: Annotated[str, typer.Argument(help="Prometheus base URL (http://prometheus:9090; a path prefix such as /prometheus is kept)")],
    cluster: Annotated[str, typer.Option(help="cluster name (Observation.cluster)")],
    step: Annotated[float, typer.Option(min=0.001, help="seconds between evaluation instants (query_range step)")] = 30.0,
    delay: Annotated[float, typer.Option(min=0.0, help="seconds behind now the window ends (time for Prometheus to ingest a scrape)")] = 60.0,
    lookback: Annotated[float, typer.Option(min=0.0, help="seconds before now the first run (no cursor) starts")] = 3600.0,
    history: Annotated[float | None, typer.Option(min=0.0, help="seconds before each window read for previous values (counter deltas, XID changes; default 10 steps)")] = None,
    host_label: Annotated[list[str] | None, typer.Option("--host-label", help="label naming the host, in order (repeat; default Hostname, hostname, node, nodename, instance)")] = None,
    match: Annotated[str, typer.Option(help='extra PromQL label matchers for both selectors, e.g. \'cluster="c1",job=~"dcgm|node"\'')] = "",
    all_deltas: Annotated[bool, typer.Option("--all-deltas", help="publish every InfiniBand counter delta, zeros included (default: error increases and resets)")] = False,
    max_points: Annotated[int, typer.Option(min=1, help="instants per query (a longer backlog is read in several polls; Prometheus loads series x instants samples per query)")] = 120,
    request_timeout: Annotated[float, typer.Option("--request-timeout", min=0.1, help="seconds per HTTP request")] = 30.0,
    retries: Annotated[int, typer.Option(min=1, help="attempts per query when Prometheus is unreachable or answers 429/5xx")] = 5,
    backoff: Annotated[float, typer.Option(min=0.0, help="seconds before the second attempt (doubling, at most 30 s)")] = 1.0,
    bearer_token_file: Annotated[Path | None, typer.Option(help="file holding a bearer token for Prometheus")] = None,
) -> Generator[PrometheusConnector, Any, None]:
    """Publish DCGM exporter telemetry (kind telemetry) and node exporter InfiniBand counter deltas (kind fabric_counter) read from Prometheus with query_range, key = host; the cursor is saved only after delivery.

    With --once (the default) it reads up to now - --delay, publishes, saves the cursor and exits; a Prometheus, cursor or Kafka error exits 2 with one line on stderr (the cursor is left as it was). With --follow it polls every --interval seconds (default: --step) until interrupted (Ctrl-C or SIGTERM); an unreachable Prometheus is retried (--retries, --backoff) and a failed poll or delivery is tried again at the next poll with the same record ids."""
    token = None
    if bearer_token_file is not None:
        try:
            token = bearer_token_file.read_text("utf-8").strip()
        except OSError as exc:
            raise PrometheusError(f"{bearer_token_file}: cannot read the bearer token: {exc.strerror or exc}") from None
    conn = PrometheusConnector(
        url, cluster=cluster, cursor=opts.cursor_store(), step_s=step, delay_s=delay,
        lookback_s=lookback, history_s=history, max_points=max_points,
        host_labels=tuple(host_label) if host_label else DEFAULT_HOST_LABELS, match=match,
        all_deltas=all_deltas, timeout_s=request_timeout, attempts=retries, backoff_s=backoff,
        bearer_token=token)
    done = yield conn
    typer.echo(f"published {done.sent} records from Prometheus {conn.instance} to {opts.topic}", err=True)
