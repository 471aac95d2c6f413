"""The Prometheus connector against a real Prometheus (Debian 2.42, ``deploy/prometheus/setup.sh``)
scraping a test exporter that serves the recorded dcgm-exporter and node exporter InfiniBand
metric families of ``tests/data/prometheus`` (four scrapes of node-a01 and node-a02: single-bit
ECC errors, then a DBE with XID 48 and a row remap with XID 63 on node-a01 GPU 2; PCIe replays
then XID 79 and a GPU that stops answering on node-a02 GPU 1; thermal slowdown, power brake and
power cap on node-a02; symbol errors, receive errors and a downed link on the HCA ports).

The module fixture starts Prometheus on loopback (free port, temporary storage), plays the
recording one scrape set at a time (each held until Prometheus scraped it three times) and keeps the
exporter's log of which scrape set it served when; every test reads that Prometheus through
:class:`connectors.prometheus.PrometheusConnector` with a fixed clock, so all see the same
window. When Prometheus cannot be installed or started, the tests fail (never skip).
"""

from __future__ import annotations

import bisect
import datetime as dt
import http.server
import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from connectors.bundle import BundleConnector
from connectors.counter_series import ERROR_COUNTERS
from connectors.cursor import CursorStore
from connectors.prometheus import (
    PrometheusConnector,
    PrometheusQueryError,
    PrometheusResponseError,
    PrometheusUnavailable,
    connect_prometheus_cli,
)
from connectors.registry import connectors
from connectors.runner import run
from correlators.rules import load_rule_pack
from schemas.records import Observation
from transport.kafka import DeliveryError, FailedDelivery
from tests.setup_fixtures import ensure
from tests.kafka_fixtures import kafka_bootstrap  # noqa: F401

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "prometheus"
SETUP = REPO / "deploy" / "prometheus" / "setup.sh"
HOSTS = ("node-a01", "node-a02")
EXPORTERS = ("dcgm-exporter", "node-exporter")
FRAMES = 4
STEP_S = 1.0
#: scrapes of each scrape set before the next one is served
HOLD = 3
#: Prometheus stamps a sample when its scrape starts, a moment before the exporter logs the
#: request: an instant this close after a logged serve may already see the new scrape set.
SERVE_SLACK_S = 0.05


# ----------------------------------------------------------------------------- the recording


def recording() -> dict[tuple[int, str, str], str]:
    """(scrape set, host, exporter) -> the exposition text recorded for it."""
    out = {}
    for n in range(FRAMES):
        for host in HOSTS:
            for exp in EXPORTERS:
                out[(n, host, exp)] = (DATA / f"scrape-{n}" / f"{host}.{exp}.prom").read_text("utf-8")
    return out


def parsed(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(metric name as Prometheus stores it, labels, value) of every sample of an exposition
    text (prometheus_client's parser, which names a counter without ``_total`` ``<name>_total``:
    that suffix is taken off again)."""
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name
            if fam.type == "counter" and f"{name}{{" not in text:
                name = name.removesuffix("_total")
            out.append((name, dict(s.labels), float(s.value)))
    return out


def dcgm_values(text: str) -> dict[int, dict[str, float]]:
    """GPU index -> {DCGM field: value} of a dcgm-exporter text."""
    out: dict[int, dict[str, float]] = {}
    for name, labels, value in parsed(text):
        out.setdefault(int(labels["gpu"]), {})[name] = value
    return out


def ib_values(text: str) -> dict[str, dict[str, float]]:
    """``<device>/<port>`` -> {node exporter family without the prefix: value}."""
    out: dict[str, dict[str, float]] = {}
    for name, labels, value in parsed(text):
        if "port" in labels:
            out.setdefault(f"{labels['device']}/{labels['port']}", {})[name.removeprefix("node_infiniband_")] = value
    return out


# ----------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Exporter:
    """An HTTP server serving, at ``/<host>/<exporter>/metrics``, the recorded text of the
    current scrape set ``frame``; ``served`` logs (path, frame, Unix time) per request."""

    def __init__(self) -> None:
        self.texts = recording()
        self.frame = 0
        self.served: list[tuple[str, int, float]] = []
        self.lock = threading.Lock()
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 -- http.server's name
                parts = self.path.strip("/").split("/")
                if len(parts) != 3 or parts[2] != "metrics" or parts[0] not in HOSTS or parts[1] not in EXPORTERS:
                    self.send_error(404, "no such exporter")
                    return
                with exporter.lock:
                    frame = exporter.frame
                    exporter.served.append((self.path, frame, time.time()))
                body = exporter.texts[(frame, parts[0], parts[1])].encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def count(self, path: str, frame: int) -> int:
        with self.lock:
            return sum(1 for p, f, _ in self.served if p == path and f == frame)

    def first_served(self, host: str, exporter: str, frame: int) -> float:
        path = f"/{host}/{exporter}/metrics"
        return min(t for p, f, t in self.served if p == path and f == frame)

    def frames_at(self, host: str, exporter: str, at_s: float) -> set[int]:
        """The scrape sets Prometheus may hold as the latest sample of the target at ``at_s``."""
        path = f"/{host}/{exporter}/metrics"
        log = [(t, f) for p, f, t in self.served if p == path]
        times = [t for t, _ in log]
        out = set()
        for probe in (at_s, at_s + SERVE_SLACK_S):
            i = bisect.bisect_right(times, probe)
            if i:
                out.add(log[i - 1][1])
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class PrometheusServer:
    """A Prometheus process on 127.0.0.1:``port`` with its storage in ``root``."""

    root: Path
    port: int
    exporter_port: int
    binary: str
    proc: subprocess.Popen | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> Path:
        groups = {exp: [{"targets": [f"127.0.0.1:{self.exporter_port}"],
                         "labels": {"__metrics_path__": f"/{host}/{exp}/metrics",
                                    "instance": f"{host}:{9400 if exp == 'dcgm-exporter' else 9100}"}}
                        for host in HOSTS] for exp in EXPORTERS}
        cfg = {"global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1m"},
               "scrape_configs": [{"job_name": exp, "static_configs": groups[exp]} for exp in EXPORTERS]}
        path = self.root / "prometheus.yml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    @property
    def log_path(self) -> Path:
        return self.root / "prometheus.log"

    def start(self, timeout: float = 60.0) -> None:
        self.starts += 1
        log = self.log_path.open("a")
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={self.config()}", f"--storage.tsdb.path={self.root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        import httpx

        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"Prometheus exited with status {self.proc.returncode} at start; "
                            f"log {self.log_path}:\n{self.tail()}", pytrace=False)
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        pytest.fail(f"Prometheus not ready on {self.url} after {timeout:g} s; log:\n{self.tail()}", pytrace=False)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


def prometheus_binary() -> str:
    """The prometheus binary, installed by ``deploy/prometheus/setup.sh`` where missing
    (:func:`tests.setup_fixtures.ensure`); fails the test (never skips) when there is none."""
    ensure("prometheus")
    found = shutil.which("prometheus")
    if not found:
        pytest.fail(f"{SETUP} succeeded but no prometheus binary is on PATH", pytrace=False)
    return found


@dataclass
class Recorded:
    """The played recording: the servers, when each scrape set was first served, the start of
    the window (``t0``) and the fixed clock of every connector (``clock_s``)."""

    exporter: Exporter
    prom: PrometheusServer
    t0: float
    clock_s: float
    starts: dict[tuple[str, str, int], float] = field(default_factory=dict)

    def connector(self, *, clock_s: float | None = None, **kw: Any) -> PrometheusConnector:
        """A connector on this Prometheus whose window starts at ``t0`` and ends one step
        before ``clock_s`` (default: after the whole recording)."""
        now = self.clock_s if clock_s is None else clock_s
        url = kw.pop("url", self.prom.url)
        opts: dict[str, Any] = dict(cluster="c1", step_s=STEP_S, delay_s=1.0, lookback_s=now - self.t0,
                                    history_s=10.0, attempts=3, backoff_s=0.05, max_backoff_s=0.2)
        opts.update(kw)
        return PrometheusConnector(url, clock=lambda: now, **opts)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    binary = prometheus_binary()
    exporter = Exporter()
    root = tmp_path_factory.mktemp("prometheus")
    prom = PrometheusServer(root=root, port=free_port(), exporter_port=exporter.port, binary=binary)
    prom.start()
    t0 = math.floor(time.time()) + 0.5
    try:
        for n in range(FRAMES):
            with exporter.lock:
                exporter.frame = n
            deadline = time.monotonic() + 30
            paths = [f"/{h}/{e}/metrics" for h in HOSTS for e in EXPORTERS]
            while not all(exporter.count(p, n) >= HOLD for p in paths):
                if time.monotonic() > deadline:
                    pytest.fail(f"Prometheus did not scrape the test exporter {HOLD} times in 30 s (scrape set "
                                f"{n}); log:\n{prom.tail()}", pytrace=False)
                time.sleep(0.1)
        time.sleep(2 * STEP_S)  # the window (which ends a step before the clock) covers the last set
        rec = Recorded(exporter, prom, t0, clock_s=time.time())
        for host in HOSTS:
            for exp in EXPORTERS:
                for n in range(FRAMES):
                    rec.starts[(host, exp, n)] = exporter.first_served(host, exp, n)
        time.sleep(1.5)  # the last instants of the window are ingested
        yield rec
    finally:
        prom.stop()
        exporter.close()


@pytest.fixture(scope="module")
def full(recorded: Recorded) -> list[Observation]:
    """The observations of the whole recording, one poll."""
    conn = recorded.connector()
    try:
        obs = conn.poll()
    finally:
        conn.close()
    assert not conn.pending
    return obs


class Producer:
    """A RecordProducer stand-in: ``flushed`` holds the records of every successful flush;
    the first ``fail`` flushes raise DeliveryError."""

    def __init__(self, fail: int = 0) -> None:
        self.queued: list[tuple[str, Observation]] = []
        self.flushed: list[list[tuple[str, Observation]]] = []
        self.fail = fail

    def send(self, key: str, record: Observation, *, topic: str | None = None) -> None:
        self.queued.append((key, record))

    def flush(self, timeout: float = 60.0) -> int:
        batch, self.queued = self.queued, []
        if self.fail:
            self.fail -= 1
            raise DeliveryError([FailedDelivery(key=k, topic="t", error="broker down") for k, _ in batch])
        self.flushed.append(batch)
        return 0

    def records(self) -> list[Observation]:
        return [r for batch in self.flushed for _, r in batch]


def gpu_of(o: Observation) -> int:
    assert o.gpu is not None and o.gpu.index is not None
    return o.gpu.index


def t_s(o: Observation) -> float:
    return o.observed_at / 1e9


# ----------------------------------------------------------------------------- observations

#: the test's statement of the DCGM field -> telemetry metric mapping (values read as is)
DCGM_EXPECTED = {
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_corrected_volatile",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_uncorrected_volatile",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "ecc_corrected_aggregate",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "ecc_uncorrected_aggregate",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "remapped_rows_correctable",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "remapped_rows_uncorrectable",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "remapped_rows_pending",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "remapped_rows_failure",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replay_counter",
    "DCGM_FI_DEV_PCIE_LINK_GEN": "pcie_link_gen",
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": "pcie_link_width",
    "DCGM_FI_DEV_GPU_TEMP": "temperature_gpu_c",
    "DCGM_FI_DEV_MEMORY_TEMP": "temperature_memory_c",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_SM_CLOCK": "clocks_sm_mhz",
    "DCGM_FI_DEV_GPU_UTIL": "utilization_gpu_pct",
    "DCGM_FI_DEV_FB_USED": "memory_used_mib",
    "DCGM_FI_DEV_THERMAL_VIOLATION": "thermal_violation",
    "DCGM_FI_DEV_POWER_VIOLATION": "power_violation",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "nvlink_crc_flit_errors",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "nvlink_crc_data_errors",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "nvlink_replay_errors",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "nvlink_recovery_errors",
}
#: nvmlClocksEventReason* bits (nvml.h) -> metric
REASON_BITS = {"gpu_idle": 0x1, "sw_power_cap": 0x4, "hw_slowdown": 0x8, "sync_boost": 0x10,
               "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80}


def expected_metric(gpu_fields: dict[str, float]) -> dict[str, float]:
    """What a telemetry observation of one GPU's recorded fields holds (without ``xid``)."""
    out = {m: gpu_fields[f] for f, m in DCGM_EXPECTED.items() if f in gpu_fields}
    if "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" in gpu_fields:
        mask = int(gpu_fields["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"])
        out.update({r: float(bool(mask & bit)) for r, bit in REASON_BITS.items()})
    return out


def test_telemetry_observations_carry_the_recorded_dcgm_values(recorded: Recorded, full: list[Observation]) -> None:
    texts = recorded.exporter.texts
    assert {o.kind for o in full} == {"telemetry", "fabric_counter"}
    assert {o.host for o in full} == set(HOSTS)
    assert all(o.source.connector == "prometheus" and o.source.instance == recorded.prom.url for o in full)
    assert all(o.cluster == "c1" and o.observed_at % 1_000_000_000 == 0 for o in full)
    assert len({o.observation_id for o in full}) == len(full)
    tele = [o for o in full if o.kind == "telemetry"]
    # GPU references from dcgm-exporter's gpu / UUID / pci_bus_id labels
    a01_gpus = {(o.gpu.index, o.gpu.uuid, o.gpu.pci_bus_id) for o in tele if o.host == "node-a01"}
    assert a01_gpus == {(0, "GPU-3f6c1a0e-58c2-4e0b-9a41-a01000000000", "0000:18:00"),
                        (1, "GPU-3f6c1a0e-58c2-4e0b-9a41-a01000000001", "0000:2a:00"),
                        (2, "GPU-3f6c1a0e-58c2-4e0b-9a41-a01000000002", "0000:3a:00"),
                        (3, "GPU-3f6c1a0e-58c2-4e0b-9a41-a01000000003", "0000:5d:00")}
    assert all(o.format == "dcgm_exporter" and o.time_source == "line" and o.time_quality == 0.9 for o in tele)
    checked = 0
    for o in tele:
        frames = recorded.exporter.frames_at(o.host, "dcgm-exporter", t_s(o))
        assert frames, f"an observation before the first scrape: {o.observed_at}"
        wanted = [expected_metric(dcgm_values(texts[(n, o.host, "dcgm-exporter")]).get(gpu_of(o), {}))
                  for n in frames]
        got = {k: v for k, v in o.metric.items() if k != "xid"}
        assert got in wanted, (o.host, gpu_of(o), t_s(o), frames)
        assert o.body.startswith(f"dcgm_exporter GPU {gpu_of(o)} ")
        checked += 1
    assert checked >= 8 * 8
    # every GPU has one sample per instant from its first scrape on, except node-a02 GPU 1
    # once it stops answering (only its XID gauge is left: no sample)
    last = max(t_s(o) for o in tele)
    for host in HOSTS:
        for gpu in range(4):
            times = sorted(t_s(o) for o in tele if o.host == host and gpu_of(o) == gpu)
            assert times == [times[0] + i for i in range(len(times))], (host, gpu)
            if (host, gpu) == ("node-a02", 1):
                assert times[-1] < recorded.starts[(host, "dcgm-exporter", 3)] + SERVE_SLACK_S
            else:
                assert times[-1] == last
    # the clock event reasons decoded: HW thermal slowdown on node-a02 GPU 3 in scrape sets 1-2
    hot = [o for o in tele if o.host == "node-a02" and gpu_of(o) == 3 and o.metric.get("hw_thermal_slowdown")]
    assert hot and all(o.metric["hw_slowdown"] == 1.0 and o.metric["temperature_gpu_c"] in (88.0, 89.0) for o in hot)


def test_xid_is_published_where_the_last_xid_changes(recorded: Recorded, full: list[Observation]) -> None:
    xids = [o for o in full if o.kind == "telemetry" and "xid" in o.metric]
    got = [(o.host, gpu_of(o), int(o.metric["xid"])) for o in xids]
    assert sorted(got) == [("node-a01", 2, 48), ("node-a01", 2, 63), ("node-a02", 1, 79)]
    for o in xids:
        frame = {48: 2, 63: 3, 79: 2}[int(o.metric["xid"])]
        start = recorded.starts[(o.host, "dcgm-exporter", frame)]
        # the first instant at or after the scrape that brought it
        assert start - SERVE_SLACK_S <= t_s(o) < start + STEP_S + SERVE_SLACK_S, (o.host, o.metric["xid"])
    # dcgm-exporter 4 (node-a02) puts err_code/err_msg labels on the XID series: a new series,
    # still one change of the GPU's last XID, and the same XID is not repeated later
    assert sum(1 for o in xids if o.host == "node-a02") == 1


def test_infiniband_counters_become_fabric_counter_deltas(recorded: Recorded, full: list[Observation]) -> None:
    fab = sorted((o for o in full if o.kind == "fabric_counter"), key=lambda o: (o.host, o.fabric_port, o.observed_at))
    errors = [(o.host, o.fabric_port, {k: int(v) for k, v in o.metric.items() if k in ERROR_COUNTERS}) for o in fab]
    assert errors == [
        ("node-a01", "node-a01/mlx5_1/1", {"symbol_error": 7}),
        ("node-a01", "node-a01/mlx5_1/1", {"link_error_recovery": 1, "symbol_error": 12}),
        ("node-a02", "node-a02/mlx5_0/1", {"port_rcv_errors": 4}),
        ("node-a02", "node-a02/mlx5_0/1", {"link_downed": 1, "symbol_error": 247}),
    ]
    texts = recorded.exporter.texts
    for o, frame in zip(fab, (1, 2, 2, 3)):
        start = recorded.starts[(o.host, "node-exporter", frame)]
        assert start - SERVE_SLACK_S <= t_s(o) < start + STEP_S + SERVE_SLACK_S
        port = o.attributes["port"]
        assert o.attributes == {"port": port, "node": o.host, "interval_s": 1.0, "reset": False,
                                "saturated": False, "side": "host"}
        assert o.format == "node_exporter" and o.time_source == "line"
        new = ib_values(texts[(frame, o.host, "node-exporter")])[port]
        old = ib_values(texts[(frame - 1, o.host, "node-exporter")])[port]
        # the data counters go back to sysfs units (4-octet words); packets as they are
        assert o.metric["port_rcv_data"] == (new["port_data_received_bytes_total"]
                                             - old["port_data_received_bytes_total"]) / 4
        assert o.metric["port_xmit_packets"] == new["port_packets_transmitted_total"] - old["port_packets_transmitted_total"]
        assert all(v > 0 for v in o.metric.values())  # only the non-zero deltas, as the bundle reader
    cov = {c.source: c for c in recorded_coverage(recorded)}
    assert set(cov) == {f"prometheus:{recorded.prom.url}/dcgm", f"prometheus:{recorded.prom.url}/infiniband"}
    assert all(c.status == "present" and c.records > 0 and c.unparsed == 0 for c in cov.values())


def recorded_coverage(recorded: Recorded):
    conn = recorded.connector()
    try:
        conn.poll()
        return conn.coverage()
    finally:
        conn.close()


def test_all_deltas_and_host_labels(recorded: Recorded) -> None:
    conn = recorded.connector(all_deltas=True)
    obs = conn.poll()
    fab = [o for o in obs if o.kind == "fabric_counter"]
    # every instant after a port's first sample, zeros included (2 hosts x 2 ports)
    per_port: dict[str, list[Observation]] = {}
    for o in fab:
        per_port.setdefault(o.fabric_port, []).append(o)
    assert set(per_port) == {f"{h}/mlx5_{k}/1" for h in HOSTS for k in (0, 1)}
    for port, rows in per_port.items():
        assert len(rows) >= 6 and "symbol_error" in rows[0].metric
        assert sum(r.metric["symbol_error"] for r in rows) == {"node-a01/mlx5_1/1": 19, "node-a02/mlx5_0/1": 247}.get(port, 0)
    conn.close()
    # dcgm series are named by their instance label when asked to
    by_instance = recorded.connector(host_labels=("instance",))
    assert {o.host for o in by_instance.poll()} == set(HOSTS)
    by_instance.close()
    # no series has a "node" label: nothing is published and the coverage says why
    nobody = recorded.connector(host_labels=("node",))
    assert nobody.poll() == []
    cov = nobody.coverage()
    assert all(c.status == "empty" and c.unparsed > 0 and "without a host label (node)" in c.detail for c in cov)
    nobody.close()


# ----------------------------------------------------------------------------- the cursor


def test_cursor_resume_no_gap_no_duplicate(recorded: Recorded, full: list[Observation], tmp_path: Path) -> None:
    ids = [o.observation_id for o in full]
    mid = recorded.starts[("node-a01", "dcgm-exporter", 2)] + 0.3
    store = CursorStore(tmp_path / "prom.json")
    first = recorded.connector(clock_s=mid, cursor=store)
    p1 = Producer()
    run(first, p1, cursor=store)
    first.close()
    saved = store.load()
    assert saved == {"version": 1, "through_ms": (int(mid * 1000) - 1000) // 1000 * 1000}
    # restart: a new connector on the same cursor, later
    second = recorded.connector(cursor=store)
    p2 = Producer()
    run(second, p2, cursor=store)
    second.close()
    a, b = [o.observation_id for o in p1.records()], [o.observation_id for o in p2.records()]
    assert a and b and not set(a) & set(b), "an observation published twice across the restart"
    assert sorted(a + b) == sorted(ids), "the two runs differ from one uninterrupted run"
    assert max(o.observed_at for o in p1.records()) < min(o.observed_at for o in p2.records())
    assert store.load()["through_ms"] == max(o.observed_at for o in full) // 1_000_000
    # the telemetry of a GPU runs on without a gap across the restart
    times = sorted(t_s(o) for o in p1.records() + p2.records()
                   if o.kind == "telemetry" and o.host == "node-a01" and gpu_of(o) == 0)
    assert times == [times[0] + i for i in range(len(times))]
    # a third run finds nothing new
    third = recorded.connector(cursor=store)
    assert third.poll() == [] and third.checkpoint() == store.load()
    third.close()


def test_backlog_in_bounded_polls_and_redelivery_after_a_failed_flush(
        recorded: Recorded, full: list[Observation], tmp_path: Path) -> None:
    ids = sorted(o.observation_id for o in full)
    store = CursorStore(tmp_path / "chunks.json")
    conn = recorded.connector(cursor=store, max_points=3)
    p = Producer()
    run(conn, p, cursor=store)  # one-shot, but polled again while the source is pending
    conn.close()
    assert len(p.flushed) >= 5 and sorted(o.observation_id for o in p.records()) == ids
    # a flush that fails leaves the cursor where it was; the retry (rewind) sends the same ids
    store2 = CursorStore(tmp_path / "retry.json")
    conn = recorded.connector(cursor=store2)
    failing = Producer(fail=1)
    with pytest.raises(DeliveryError):
        run(conn, failing, cursor=store2)
    assert store2.load() == {}
    conn.rewind()
    run(conn, failing, cursor=store2)
    conn.close()
    assert sorted(o.observation_id for o in failing.records()) == ids
    # and a restarted connector that never saved its cursor repeats them with the same ids
    again = recorded.connector(cursor=CursorStore(tmp_path / "never-saved.json"))
    assert sorted(o.observation_id for o in again.poll()) == ids
    again.close()


# ----------------------------------------------------------------------------- the engine


#: the test's statement of the nvidia-smi --query-gpu column of each DCGM field
SMI_COLUMNS = {
    "DCGM_FI_DEV_GPU_TEMP": "temperature.gpu", "DCGM_FI_DEV_MEMORY_TEMP": "temperature.memory",
    "DCGM_FI_DEV_POWER_USAGE": "power.draw [W]", "DCGM_FI_DEV_SM_CLOCK": "clocks.current.sm [MHz]",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc.errors.corrected.volatile.total",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc.errors.uncorrected.volatile.total",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "ecc.errors.corrected.aggregate.total",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "ecc.errors.uncorrected.aggregate.total",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "remapped_rows.correctable",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "remapped_rows.uncorrectable",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "remapped_rows.pending", "DCGM_FI_DEV_ROW_REMAP_FAILURE": "remapped_rows.failure",
    "DCGM_FI_DEV_PCIE_LINK_GEN": "pcie.link.gen.current", "DCGM_FI_DEV_PCIE_LINK_WIDTH": "pcie.link.width.current",
    "DCGM_FI_DEV_GPU_UTIL": "utilization.gpu [%]", "DCGM_FI_DEV_FB_USED": "memory.used [MiB]",
}
YES_NO = {"DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE"}
#: the test's statement of the sysfs counter of each node exporter family in the recording
SYSFS_COUNTERS = {
    "symbol_error_total": "symbol_error", "link_downed_total": "link_downed",
    "link_error_recovery_total": "link_error_recovery", "port_errors_received_total": "port_rcv_errors",
    "port_receive_remote_physical_errors_total": "port_rcv_remote_physical_errors",
    "port_discards_transmitted_total": "port_xmit_discards", "port_transmit_wait_total": "port_xmit_wait",
    "local_link_integrity_errors_total": "local_link_integrity_errors",
    "excessive_buffer_overrun_errors_total": "excessive_buffer_overrun_errors",
    "port_packets_received_total": "port_rcv_packets", "port_packets_transmitted_total": "port_xmit_packets",
    "out_of_sequence_packets_received_total": "out_of_sequence", "local_ack_timeout_errors_total": "local_ack_timeout_err",
    "rx_write_requests_total": "rx_write_requests",
}


#: the test's statement of the NVML reading (pynvml collector JSON) of each DCGM field
NVML_KEYS = {
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_corrected_volatile", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_uncorrected_volatile",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "ecc_corrected_aggregate", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "ecc_uncorrected_aggregate",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replay_counter", "DCGM_FI_DEV_PCIE_LINK_GEN": "pcie_gen",
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": "pcie_width", "DCGM_FI_DEV_GPU_TEMP": "temperature_gpu",
    "DCGM_FI_DEV_MEMORY_TEMP": "temperature_memory_c", "DCGM_FI_DEV_GPU_UTIL": "utilization_gpu_pct",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "clocks_event_reasons",
}


def nvml_rows(recorded: Recorded, host: str) -> list[dict[str, Any]]:
    """One NVML JSON object per GPU per scrape set (``nvmlDeviceGetRemappedRows`` as its
    ``(corr, unc, pending, failure)`` tuple, power in mW), timed when the exporter first
    served the set."""
    texts = recorded.exporter.texts
    out = []
    for n in range(FRAMES):
        at = dt.datetime.fromtimestamp(recorded.starts[(host, "dcgm-exporter", n)], dt.timezone.utc)
        stamp = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"
        labels = {int(lb["gpu"]): lb for _, lb, _ in parsed(texts[(n, host, "dcgm-exporter")])}
        for gpu, fields in sorted(dcgm_values(texts[(n, host, "dcgm-exporter")]).items()):
            row: dict[str, Any] = {"timestamp": stamp, "index": gpu, "uuid": labels[gpu]["UUID"],
                                   "pci_bus_id": labels[gpu]["pci_bus_id"]}
            row.update({k: int(fields[f]) for f, k in NVML_KEYS.items() if f in fields})
            if "DCGM_FI_DEV_POWER_USAGE" in fields:
                row["power_mw"] = round(fields["DCGM_FI_DEV_POWER_USAGE"] * 1000)
            if "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS" in fields:
                row["remapped_rows"] = [int(fields["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"]),
                                        int(fields["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"]),
                                        bool(fields["DCGM_FI_DEV_ROW_REMAP_PENDING"]),
                                        bool(fields["DCGM_FI_DEV_ROW_REMAP_FAILURE"])]
            out.append(row)
    return out


def write_bundle(recorded: Recorded, root: Path) -> Path:
    """The same readings as an incident bundle: per host an ``nvidia-smi --query-gpu`` CSV
    and an NVML JSON Lines file (one row per GPU per scrape set, timed when the exporter
    first served it; the CSV has no PCIe replay counter, the NVML file has it) and an
    ``ib.counters.csv`` series of the HCA ports."""
    texts = recorded.exporter.texts
    root.mkdir(parents=True)
    start = dt.datetime.fromtimestamp(recorded.t0 - 5, dt.timezone.utc)
    end = dt.datetime.fromtimestamp(recorded.clock_s + 5, dt.timezone.utc)
    (root / "workload.yaml").write_text(yaml.safe_dump({
        "workload_id": "job-4242", "scheduler": "static", "cluster": "c1", "state": "FAILED",
        "exit_code": "1:0", "start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "end": end.strftime("%Y-%m-%dT%H:%M:%SZ"), "nodes": list(HOSTS), "ranks_per_node": 4,
        "hosts": {h: {"timezone": "UTC", "ip": f"10.0.0.{11 + i}"} for i, h in enumerate(HOSTS)}}))
    reasons = ["gpu_idle", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
               "sw_thermal_slowdown", "sync_boost"]
    header = (["timestamp", "index", "uuid", "pci.bus_id", *SMI_COLUMNS.values()]
              + [f"clocks_event_reasons.{r}" for r in reasons])
    for host in HOSTS:
        d = root / "metrics" / host
        d.mkdir(parents=True)
        rows = [", ".join(header)]
        for n in range(FRAMES):
            at = dt.datetime.fromtimestamp(recorded.starts[(host, "dcgm-exporter", n)], dt.timezone.utc)
            stamp = at.strftime("%Y/%m/%d %H:%M:%S.") + f"{at.microsecond // 1000:03d}"
            labels = {int(lb["gpu"]): lb for _, lb, _ in parsed(texts[(n, host, "dcgm-exporter")])}
            for gpu, fields in sorted(dcgm_values(texts[(n, host, "dcgm-exporter")]).items()):
                lb = labels[gpu]
                cells = [stamp, str(gpu), lb["UUID"], lb["pci_bus_id"]]
                for f in SMI_COLUMNS:
                    if f not in fields:
                        cells.append("[N/A]")
                    elif f in YES_NO:
                        cells.append("Yes" if fields[f] else "No")
                    elif f == "DCGM_FI_DEV_POWER_USAGE":
                        cells.append(f"{fields[f]} W")
                    else:
                        cells.append(str(int(fields[f])))
                mask = fields.get("DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
                cells += ["[N/A]" if mask is None else ("Active" if int(mask) & REASON_BITS[r] else "Not Active")
                          for r in reasons]
                rows.append(", ".join(cells))
        (d / "nvidia-smi-query-gpu.csv").write_text("\n".join(rows) + "\n")
        (d / "nvml.jsonl").write_text("".join(json.dumps(r) + "\n" for r in nvml_rows(recorded, host)))
        lines = ["time,node,port," + ",".join(SYSFS_COUNTERS.values()) + ",port_rcv_data"]
        for n in range(FRAMES):
            at = recorded.starts[(host, "node-exporter", n)]
            for port, vals in sorted(ib_values(texts[(n, host, "node-exporter")]).items()):
                cells = [f"{at:.3f}", host, port] + [str(int(vals[f])) for f in SYSFS_COUNTERS]
                cells.append(str(int(vals["port_data_received_bytes_total"]) // 4))
                lines.append(",".join(cells))
        (d / "ib.counters.csv").write_text("\n".join(lines) + "\n")
    return root


def event_key(e) -> tuple:
    attrs = {k: v for k, v in e.attributes.items() if k != "interval_s"}
    gpu = (e.gpu.index, e.gpu.uuid, e.gpu.pci_bus_id) if e.gpu else None
    return (e.type, e.host, gpu, e.fabric_port, repr(sorted(attrs.items())))


def test_engine_events_match_the_equivalent_bundle(recorded: Recorded, full: list[Observation], tmp_path: Path) -> None:
    pack = load_rule_pack()
    bundle = BundleConnector(write_bundle(recorded, tmp_path / "bundle"))
    b_obs = [o for o in bundle.observations() if o.kind in ("telemetry", "fabric_counter")]
    assert {o.format for o in b_obs} == {"nvidia_smi_csv", "nvml_json", "counters_csv"}
    assert {c.status for c in bundle.coverage() if c.source.startswith("file:metrics/")} == {"present"}
    b_events = [e for o in b_obs for e in pack.extract(o)]
    p_all = [e for o in full for e in pack.extract(o)]
    # an XID reaches the bundle as a kernel log line, not as telemetry: a telemetry XID rule,
    # where the pack has one, gives exactly the three XID changes
    p_xid = sorted((e.host, e.gpu.index, e.attributes["xid"]) for e in p_all if e.type == "gpu.xid")
    assert p_xid in ([], [("node-a01", 2, 48), ("node-a01", 2, 63), ("node-a02", 1, 79)])
    p_events = [e for e in p_all if e.type != "gpu.xid"]
    assert {e.type for e in b_events} == {e.type for e in p_events} == {
        "telemetry.ecc_corrected", "telemetry.ecc_uncorrected", "telemetry.remapped_rows", "telemetry.pcie_replay",
        "telemetry.thermal_slowdown", "telemetry.power_brake", "telemetry.sw_power_cap", "fabric.port_errors"}

    def first_seen(events) -> dict[tuple, float]:
        out: dict[tuple, float] = {}
        for e in sorted(events, key=lambda e: e.at):
            out.setdefault(event_key(e), e.at / 1e9)
        return out

    b_first, p_first = first_seen(b_events), first_seen(p_events)
    assert set(p_first) == set(b_first)
    for key, at in b_first.items():
        # Prometheus evaluates at the first instant after the scrape the bundle row stands for
        assert at - SERVE_SLACK_S <= p_first[key] < at + STEP_S + SERVE_SLACK_S, key
    # one fabric.port_errors per error increase on both sides, same deltas
    b_fab = sorted(event_key(e) for e in b_events if e.type == "fabric.port_errors")
    p_fab = sorted(event_key(e) for e in p_events if e.type == "fabric.port_errors")
    assert b_fab == p_fab and len(p_fab) == 4
    # the same readings give the same metric names and values; Prometheus adds only DCGM's own
    extra_ok = {"xid", "thermal_violation", "power_violation", "nvlink_crc_flit_errors", "nvlink_crc_data_errors",
                "nvlink_replay_errors", "nvlink_recovery_errors"}
    p_tele = {(o.host, gpu_of(o), o.observed_at): o for o in full if o.kind == "telemetry"}
    merged: dict[tuple[str, int, int], dict[str, float]] = {}
    for o in b_obs:
        if o.kind != "telemetry" or not o.metric:
            continue
        instant = math.ceil(t_s(o)) * 1_000_000_000  # the first instant after its scrape
        p = p_tele[(o.host, gpu_of(o), instant)]
        assert p.gpu == o.gpu
        assert {k: p.metric[k] for k in o.metric} == o.metric, (o.format, o.host, gpu_of(o))
        merged.setdefault((o.host, gpu_of(o), instant), {}).update(o.metric)
    assert len(merged) == 2 * 4 * FRAMES - 1  # node-a02 GPU 1 answers nothing in the last set
    for key, metric in merged.items():
        assert set(p_tele[key].metric) - set(metric) <= extra_ok, key


# ----------------------------------------------------------------------------- errors


def test_unreachable_prometheus_is_retried_then_reported(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    conn = PrometheusConnector(f"http://127.0.0.1:{port}", cluster="c1", step_s=1, delay_s=0, lookback_s=60,
                               attempts=3, backoff_s=0.05)
    with caplog.at_level(logging.WARNING, "faultstream.connector.prometheus"):
        with pytest.raises(PrometheusUnavailable) as err:
            conn.poll()
    assert conn.requests == 3 and err.value.attempts == 3
    assert str(err.value).startswith(f"Prometheus at http://127.0.0.1:{port} unreachable after 3 attempts: ConnectError")
    assert [r.getMessage().split(";")[1].strip() for r in caplog.records] == [
        "retrying in 0.05 s (attempt 1 of 3)", "retrying in 0.1 s (attempt 2 of 3)"]
    assert conn.checkpoint() == {} and {c.status for c in conn.coverage()} == {"failed"}
    conn.close()
    with pytest.raises(ValueError, match="not an http"):
        PrometheusConnector("prometheus:9090", cluster="c1")


def test_cli_reports_an_unreachable_prometheus(tmp_path: Path, kafka_bootstrap: str) -> None:  # noqa: F811
    assert connectors()["prometheus"] is connect_prometheus_cli
    port = free_port()
    cursor = tmp_path / "cursor.json"
    proc = subprocess.run(
        [sys.executable, "-m", "streams.cli", "connect", "prometheus", f"http://127.0.0.1:{port}", "--cluster", "c1",
         "--once", "--retries", "2", "--backoff", "0.05", "--cursor", str(cursor), "--bootstrap", kafka_bootstrap],
        cwd=REPO, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: Prometheus at http://127.0.0.1:{port} unreachable after 2 attempts: ConnectError")
    assert "Traceback" not in proc.stderr and not cursor.exists()


def test_bad_answers_are_reported(recorded: Recorded) -> None:
    bad = recorded.connector(match='job=~"("')
    with pytest.raises(PrometheusQueryError) as err:
        bad.poll()
    assert bad.requests == 1 and err.value.error_type == "bad_data"
    assert str(err.value).startswith(f"Prometheus at {recorded.prom.url} (/api/v1/query_range, HTTP 400): bad_data: ")
    assert "parse error" in err.value.detail
    bad.close()
    # something that is no Prometheus: the test exporter answers a POST with an HTML error page
    other = recorded.connector(url=f"http://127.0.0.1:{recorded.exporter.port}")
    with pytest.raises(PrometheusResponseError, match=r"HTTP 501\): not a Prometheus API answer \(text/html"):
        other.poll()
    assert other.requests == 1
    other.close()


def test_prometheus_restarted_during_the_retries(recorded: Recorded, full: list[Observation]) -> None:
    """Last in the module: it stops and restarts the module's Prometheus."""
    ids = sorted(o.observation_id for o in full)
    recorded.prom.stop()
    conn = recorded.connector(attempts=60, backoff_s=0.2, max_backoff_s=0.5)
    result: dict[str, Any] = {}

    def poll() -> None:
        try:
            result["obs"] = conn.poll()
        except Exception as exc:  # noqa: BLE001 -- reported below
            result["error"] = exc

    worker = threading.Thread(target=poll)
    worker.start()
    deadline = time.monotonic() + 10
    while conn.requests < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert conn.requests >= 2, "the connector did not retry the stopped Prometheus"
    recorded.prom.start()
    worker.join(timeout=120)
    conn.close()
    assert "error" not in result, result.get("error")
    # the restarted Prometheus replayed its WAL: the same window gives the same observations
    assert sorted(o.observation_id for o in result["obs"]) == ids
    assert conn.requests > 3
