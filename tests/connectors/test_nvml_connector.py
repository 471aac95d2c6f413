"""The NVML node agent (``connectors/nvml.py``): its conversion tested on recorded NVML readings,
its no-driver exit run for real.

The recordings under ``tests/data/nvml/`` hold what pynvml returns, call by call
(``nvmlDeviceGetTotalEccErrors`` per error/counter type, ``nvmlDeviceGetRemappedRows`` as its
4-tuple, the clocks event/throttle reason masks, ``nvmlEventSetWait_v2``'s event data, NVMLError
class names and texts for failing calls): ``h200-driver580-capture.json`` is the H200 whose
``nvidia-smi -q`` is ``shared/fixtures/real/h200-2026-11/nvidia-smi-q.txt`` (same values), the
other two are written in those shapes (an H200 node on driver 570 with a double-bit ECC error,
XID 48/63 and then XID 79; an H100 on driver 525 without the clocks-event call, MIG on)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from connectors.cursor import CursorStore
from connectors.nvml import WATCHED, NvmlConnector, RecordedReadings, nvml_json_form
from connectors.runner import run
from connectors.telemetry import parse_nvidia_smi_q_text
from connectors.timefmt import TimeContext
from correlators.rules import load_rule_pack
from schemas.records import TIME_QUALITY_EXACT

DATA = Path(__file__).resolve().parents[1] / "data" / "nvml"
REPO = Path(__file__).resolve().parents[2]


class Clock:
    """Monotonic seconds the test moves by hand."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def polls(name: str, n: int, **kw) -> list[list]:
    """The records of ``n`` polls of a recording, one reading interval apart, each confirmed."""
    clock = Clock()
    kw.setdefault("heartbeat_s", 0)
    conn = NvmlConnector(RecordedReadings(DATA / name), cursor=None, host="node-a01", cluster="c1",
                         interval_s=10, clock=clock, **kw)
    out = []
    for _ in range(n):
        out.append(conn.poll())
        conn.checkpoint()
        clock.t += 10
    return out


def test_readings_have_the_nvidia_smi_metric_names_and_values(real_fixtures):
    [[obs]] = polls("h200-driver580-capture.json", 1)
    smi = parse_nvidia_smi_q_text((real_fixtures / "h200-2026-11" / "nvidia-smi-q.txt").read_text(), TimeContext(year=2026))
    [sample] = smi
    assert (obs.kind, obs.format, obs.host, obs.cluster, obs.source.connector) == ("telemetry", "nvml", "node-a01", "c1", "nvml")
    assert obs.gpu == sample.gpu  # index 0, GPU-...0001, 0000:00:06
    assert obs.observed_at == sample.at.at_ns == 1_796_001_600_000_000_000
    assert (obs.time_source, obs.time_quality) == ("line", TIME_QUALITY_EXACT)
    # every NVML metric is one the nvidia-smi parser writes, with the same value for this GPU
    assert set(obs.metric) <= set(sample.metric)
    assert {k: v for k, v in obs.metric.items()} == {k: sample.metric[k] for k in obs.metric}
    assert obs.metric == {
        "ecc_uncorrected_volatile": 0, "ecc_corrected_volatile": 0, "ecc_uncorrected_aggregate": 0,
        "ecc_corrected_aggregate": 0, "remapped_rows_correctable": 0, "remapped_rows_uncorrectable": 0,
        "remapped_rows_pending": 0, "remapped_rows_failure": 0, "pcie_replay_counter": 1, "pcie_link_gen": 5,
        "pcie_link_width": 16, "temperature_gpu_c": 41, "power_w": 126.84, "gpu_idle": 1, "sw_power_cap": 0,
        "hw_slowdown": 0, "sync_boost": 0, "sw_thermal_slowdown": 0, "hw_thermal_slowdown": 0,
        "hw_power_brake_slowdown": 0}
    assert obs.attributes == {"name": "NVIDIA H200", "driver_version": "580.159.04"}
    assert [(e.type, e.attributes) for e in load_rule_pack().extract(obs)] == [("telemetry.pcie_replay", {"count": 1})]


def test_dbe_row_remap_and_lost_gpu_on_driver_570():
    batches = polls("h200-driver570-dbe-xid.json", 4)
    assert [[(o.kind, o.format, o.gpu.index) for o in b] for b in batches] == [
        [("telemetry", "nvml", 0), ("telemetry", "nvml", 1)],  # first reading of both GPUs
        [("telemetry", "nvml", 1), ("log_line", "nvml_event", 1), ("log_line", "nvml_event", 1)],
        [],  # nothing watched changed (GPU 1 went idle; temperatures moved)
        [("log_line", "nvml_error", 1), ("log_line", "nvml_event", 1)],
    ]
    pack = load_rule_pack()
    tel = batches[1][0]
    assert {k: tel.metric[k] for k in ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "remapped_rows_uncorrectable",
                                       "remapped_rows_pending", "remapped_rows_failure")} == {
        "ecc_uncorrected_volatile": 2, "ecc_uncorrected_aggregate": 2, "remapped_rows_uncorrectable": 1,
        "remapped_rows_pending": 1, "remapped_rows_failure": 0}
    assert [(e.type, e.attributes) for e in pack.extract(tel)] == [
        ("telemetry.ecc_uncorrected", {"count": 2}),
        ("telemetry.remapped_rows", {"uncorrectable": 1, "pending": 1, "failure": 0})]
    xid48, xid63 = batches[1][1:]
    assert xid48.body == "NVRM: Xid (PCI:0000:2a:00): 48, NVML XID event on GPU 1"
    assert (xid48.observed_at, xid48.time_source) == (1_796_001_904_212_000_000, "transport")
    assert xid48.attributes == {"xid": 48, "event_type": 8, "nvml_call": "nvmlEventSetWait_v2"}
    [e48] = pack.extract(xid48)
    assert (e48.type, e48.host, e48.gpu.pci_bus_id, e48.attributes["xid"], e48.attributes["mnemonic"]) == (
        "gpu.xid", "node-a01", "0000:2a:00", 48, "ROBUST_CHANNEL_GPU_ECC_DBE")
    assert pack.extract(xid63)[0].attributes["immediate_action"] == "IGNORE"
    lost, xid79 = batches[3]
    assert lost.body == "NVML nvmlDeviceGetTotalEccErrors on GPU 1 (0000:2a:00): pynvml.NVMLError_GpuIsLost: GPU is lost"
    [err] = pack.extract(lost)
    assert (err.type, err.attributes["nvml_error"], err.gpu.pci_bus_id) == ("nvml.error", "NVML_ERROR_GPU_IS_LOST", "0000:2a:00")
    [e79] = pack.extract(xid79)
    assert (e79.attributes["xid"], e79.attributes["immediate_action"]) == (79, "RESTART_BM")


def test_older_driver_throttle_reasons_and_a_mig_xid():
    [[tel, xid]] = polls("h100-driver525-throttle-mig.json", 1)
    assert (tel.metric["hw_slowdown"], tel.metric["hw_thermal_slowdown"], tel.metric["hw_power_brake_slowdown"]) == (1, 1, 0)
    assert tel.metric["power_w"] == 688.5 and tel.attributes["driver_version"] == "525.125.06"
    pack = load_rule_pack()
    assert [(e.type, e.attributes) for e in pack.extract(tel)] == [("telemetry.thermal_slowdown", {"reason": "hw_thermal_slowdown"})]
    assert xid.body == "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 31, NVML XID event on GPU 0"
    [ev] = pack.extract(xid)
    assert (ev.attributes["xid"], ev.attributes["gpu_instance"], ev.attributes["compute_instance"]) == (31, 1, 0)
    assert xid.attributes["gpu_instance_id"] == 1 and xid.attributes["compute_instance_id"] == 0


def test_a_restart_does_not_publish_an_unchanged_reading_and_heartbeats_do(tmp_path):
    cursor = CursorStore(tmp_path / "nvml.json")

    class Producer:
        def __init__(self) -> None:
            self.sent: list = []

        def send(self, key, record, *, topic=None) -> None:
            self.sent.append((key, record))

        def flush(self, timeout: float = 60.0) -> int:
            return 0

    p = Producer()
    conn = NvmlConnector(RecordedReadings(DATA / "h200-driver580-capture.json"), cursor=cursor, host="node-a01")
    assert run(conn, p, cursor=cursor) == 1 and p.sent[0][0] == "node-a01"
    saved = cursor.load()["gpus"]["GPU-00000000-0000-4000-8000-000000000001"]
    assert set(saved["metric"]) <= set(WATCHED) and saved["metric"]["pcie_replay_counter"] == 1 and saved["errors"] == []
    clock = Clock()
    again = NvmlConnector(RecordedReadings(DATA / "h200-driver580-capture.json"), cursor=cursor, host="node-a01",
                          heartbeat_s=300, clock=clock)
    assert again.poll() == []
    twice = json.loads((DATA / "h200-driver580-capture.json").read_text())
    twice["polls"] *= 2  # the same reading twice
    (tmp_path / "twice.json").write_text(json.dumps(twice))
    restored = NvmlConnector(RecordedReadings(tmp_path / "twice.json"), cursor=cursor, host="node-a01",
                             interval_s=10, heartbeat_s=300, clock=clock)
    assert restored.poll() == []
    clock.t = 300
    assert [o.kind for o in restored.poll()] == ["telemetry"]  # the heartbeat counts from the restart
    # a heartbeat republishes an unchanged reading once heartbeat_s passed since the last one
    clock = Clock()
    readings = RecordedReadings(DATA / "h200-driver570-dbe-xid.json")
    beat = NvmlConnector(readings, cursor=None, host="node-a01", interval_s=10, heartbeat_s=15, clock=clock)
    first = beat.poll()
    clock.t = 10
    second = beat.poll()  # GPU 0 unchanged, 10 s < 15 s
    clock.t = 20
    third = beat.poll()  # GPU 0: 20 s >= 15 s since its last one; GPU 1: published 10 s ago
    assert [o.gpu.index for o in first] == [0, 1]
    assert [o.gpu.index for o in second if o.kind == "telemetry"] == [1]
    assert [o.gpu.index for o in third if o.kind == "telemetry"] == [0]


def test_rewind_returns_the_same_records():
    conn = NvmlConnector(RecordedReadings(DATA / "h200-driver570-dbe-xid.json"), cursor=None, host="node-a01",
                         interval_s=0)
    conn.poll()
    conn.checkpoint()
    batch = conn.poll()  # telemetry + XID 48 + XID 63
    conn.rewind()
    assert [o.observation_id for o in conn.poll()] == [o.observation_id for o in batch] and len(batch) == 3
    conn.checkpoint()
    assert conn.poll() == []  # the next recorded poll: nothing changed


def test_failed_calls_are_left_out_of_the_reading():
    from connectors.nvml import DeviceInfo

    raw = json.loads((DATA / "h200-driver570-dbe-xid.json").read_text())["polls"][3]["readings"]["1"]
    dev = DeviceInfo(1, "GPU-00000000-0000-4000-8000-000000000011", "00000000:2A:00.0")
    assert nvml_json_form(dev, raw) == {"uuid": dev.uuid, "index": 1, "pci_bus_id": "00000000:2A:00.0"}
    ok = json.loads((DATA / "h200-driver580-capture.json").read_text())["polls"][0]["readings"]["0"]
    form = nvml_json_form(dev, ok)
    assert "retired_pages_pending" not in form and form["remapped_rows"] == [0, 0, 0, 0]
    assert form["clocks_event_reasons"] == 1 and form["power_mw"] == 126840


def _nvml_present() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_without_a_driver_the_agent_exits_2_with_one_line():
    # runs the real command: pynvml looks for libnvidia-ml.so.1, which this machine lacks
    proc = subprocess.run([sys.executable, "-c", "from streams.cli import app; app()", "connect", "nvml", "--once",
                           "--bootstrap", "127.0.0.1:9"], capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    if _nvml_present():  # a GPU machine: NVML starts, and the unreachable broker is what fails
        assert proc.returncode == 2 and "error:" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 2, proc.stderr
    # one line (a warning another connector's import may log before it is not the agent's)
    message = ("error: NVML cannot start: NVML Shared Library Not Found (NVMLError_LibraryNotFound): "
               "no NVIDIA driver on this machine (libnvidia-ml.so.1 not found)")
    assert [line for line in lines if line.startswith("error:")] == lines[-1:] == [message], proc.stderr
    assert proc.stdout == ""
