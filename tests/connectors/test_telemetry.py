"""connectors.telemetry on the real nvidia-smi / NVML dumps."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from connectors.telemetry import detect_format, normalise_pci_bus_id, parse_telemetry
from connectors.timefmt import TimeContext
from schemas.records import GpuRef

CTX = TimeContext(year=2026)
UUID = "GPU-00000000-0000-4000-8000-000000000001"
REQUIRED = {
    "ecc_uncorrected_volatile", "ecc_corrected_volatile", "remapped_rows_uncorrectable",
    "remapped_rows_pending", "remapped_rows_failure", "hw_slowdown", "hw_thermal_slowdown",
    "hw_power_brake_slowdown", "sw_power_cap", "sw_thermal_slowdown", "temperature_gpu_c", "power_w",
}


def utc(text: str) -> int:
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(value.timestamp()) * 1_000_000_000 + value.microsecond * 1000


def parse(path: Path):
    result = parse_telemetry(path.read_text(encoding="utf-8"), CTX)
    assert result is not None, path
    return result


def test_nvidia_smi_q_xml(real_fixtures: Path) -> None:
    fmt, samples = parse(real_fixtures / "h200-2026-11" / "nvidia-smi-q.xml")
    assert fmt == "nvidia_smi_q_xml" and len(samples) == 1
    s = samples[0]
    assert s.gpu == GpuRef(index=0, uuid=UUID, pci_bus_id="0000:00:06")
    assert REQUIRED | {"pcie_replay_counter"} <= set(s.metric)
    assert s.metric["temperature_gpu_c"] == 41
    assert s.metric["power_w"] == 117.11
    assert s.metric["pcie_replay_counter"] == 1
    assert s.metric["ecc_uncorrected_volatile"] == 0
    assert s.metric["gpu_idle"] == 1 and s.metric["hw_slowdown"] == 0
    assert s.at.at_ns == utc("2026-11-30T01:20:00Z")
    assert s.line == 8  # <gpu id=...>
    assert "temperature_gpu_c=41" in s.summary


def test_nvidia_smi_q_text_and_fragment(real_fixtures: Path) -> None:
    fmt, samples = parse(real_fixtures / "h200-2026-11" / "nvidia-smi-q.txt")
    assert fmt == "nvidia_smi_q" and len(samples) == 1
    s = samples[0]
    assert s.gpu == GpuRef(index=0, uuid=UUID, pci_bus_id="0000:00:06")
    assert REQUIRED | {"pcie_replay_counter"} <= set(s.metric)
    assert (s.metric["power_w"], s.metric["temperature_gpu_c"], s.metric["pcie_replay_counter"]) == (126.84, 41, 1)
    assert s.metric["remapped_rows_pending"] == 0 and s.metric["remapped_rows_failure"] == 0
    # "Retired Pages ... N/A" is omitted, not zero
    assert "retired_pages_pending" not in s.metric
    assert s.at.at_ns == utc("2026-11-30T01:20:00Z")
    # the issue-report fragment (rc-35): SW Power Cap active, nothing in hardware
    fmt, samples = parse(real_fixtures / "public" / "rc-35" / "lines.log")
    assert fmt == "nvidia_smi_q" and len(samples) == 1
    assert samples[0].gpu is None
    assert samples[0].metric == {
        "gpu_idle": 0, "sw_power_cap": 1, "hw_slowdown": 0, "hw_thermal_slowdown": 0,
        "hw_power_brake_slowdown": 0, "sync_boost": 0, "sw_thermal_slowdown": 0,
    }


def test_nvidia_smi_q_text_with_errors_built_from_real_dump(real_fixtures: Path) -> None:
    text = (real_fixtures / "h200-2026-11" / "nvidia-smi-q.txt").read_text()
    volatile = text.index("        Volatile\n")
    dram = text.index("DRAM Uncorrectable                         : 0", volatile)
    text = text[:dram] + "DRAM Uncorrectable                         : 3" + text[dram + 46:]
    text = text.replace("        Pending                                        : No\n        Remapping",
                        "        Pending                                        : Yes\n        Remapping")
    text = text.replace("            HW Thermal Slowdown                        : Not Active",
                        "            HW Thermal Slowdown                        : Active")
    # two samples in one file, as `nvidia-smi -q -l` writes them
    text = text + text.replace("Mon Nov 30 01:20:00 2026", "Mon Nov 30 01:20:05 2026")
    _, samples = parse_telemetry(text, CTX)
    assert len(samples) == 2
    s = samples[0]
    assert s.metric["ecc_uncorrected_volatile"] == 3
    assert s.metric["ecc_uncorrected_aggregate"] == 0
    assert s.metric["remapped_rows_pending"] == 1
    assert s.metric["hw_thermal_slowdown"] == 1 and s.metric["hw_slowdown"] == 0
    assert samples[1].at.at_ns - s.at.at_ns == 5 * 10**9
    assert samples[1].gpu.index == 0


def test_query_gpu_csv(real_fixtures: Path) -> None:
    fmt, samples = parse(real_fixtures / "h200-2026-11" / "nvidia-smi-query-gpu.csv")
    assert fmt == "nvidia_smi_csv" and len(samples) == 1
    s = samples[0]
    assert s.gpu == GpuRef(index=0, uuid=UUID, pci_bus_id="0000:00:06")
    assert REQUIRED <= set(s.metric)
    assert s.metric["power_w"] == 123.30 and s.metric["temperature_gpu_c"] == 40
    assert s.metric["remapped_rows_pending"] == 0  # "No"
    assert "retired_pages_pending" not in s.metric  # "[N/A]"
    assert s.at.at_ns == utc("2026-11-30T01:20:00.821Z") and s.line == 2


def subset_csv(path: Path, keep: list[str], *, nounits: bool = False) -> str:
    """The real ``--query-gpu`` CSV at ``path`` with only the columns named in ``keep`` (their
    names without units), in that order: what ``nvidia-smi --query-gpu=<keep> --format=csv``
    prints on that machine."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(path.read_text()), skipinitialspace=True))
    names = [h.split(" [")[0] for h in rows[0]]
    cols = [names.index(k) for k in keep]
    header = [(names[i] if nounits else rows[0][i]) for i in cols]
    body = [[r[i] for i in cols] for r in rows[1:] if r]
    return "\n".join(", ".join(r) for r in [header, *body]) + "\n"


@pytest.mark.parametrize("keep", [
    ["timestamp", "index", "pci.bus_id", "temperature.gpu", "power.draw", "ecc.errors.uncorrected.volatile.total"],
    ["index", "temperature.gpu", "clocks_event_reasons.hw_thermal_slowdown"],
    ["timestamp", "pci.bus_id", "name", "remapped_rows.pending", "power.draw"],
    ["uuid", "power.draw"],
], ids=["no-uuid", "index-only", "pci-only", "uuid-only"])
def test_query_gpu_csv_with_a_subset_of_the_columns(real_fixtures: Path, keep: list[str]) -> None:
    """Any choice of ``--query-gpu`` columns is telemetry, ``uuid`` or not: the samples keep
    the readings and the GPU identifiers that are there."""
    real = real_fixtures / "h200-2026-11" / "nvidia-smi-query-gpu.csv"
    whole = parse_telemetry(real.read_text(), CTX)[1][0]
    for nounits in (False, True):
        text = subset_csv(real, keep, nounits=nounits)
        assert detect_format(text) == "nvidia_smi_csv", text
        fmt, samples = parse_telemetry(text, CTX)
        assert fmt == "nvidia_smi_csv" and len(samples) == 1
        s = samples[0]
        assert s.gpu == GpuRef(index=0 if "index" in keep else None, uuid=UUID if "uuid" in keep else None,
                               pci_bus_id="0000:00:06" if "pci.bus_id" in keep else None)
        assert s.metric and all(s.metric[k] == whole.metric[k] for k in s.metric)
        if "power.draw" in keep:
            assert s.metric["power_w"] == 123.30
        if "timestamp" in keep:
            assert s.at.at_ns == utc("2026-11-30T01:20:00.821Z")


@pytest.mark.parametrize("header", [
    "name, driver_version",  # names no GPU and no reading
    "index, latency_ms",  # a column nvidia-smi does not print
    "time, host, message",
    "temperature.gpu",  # one column
])
def test_a_csv_that_nvidia_smi_would_not_print_is_not_telemetry(header: str) -> None:
    assert detect_format(f"{header}\n1, 2\n") is None


def test_nvml_json(real_fixtures: Path) -> None:
    fmt, samples = parse(real_fixtures / "h200-2026-11" / "nvml.json")
    assert fmt == "nvml_json" and len(samples) == 1
    s = samples[0]
    assert s.gpu == GpuRef(index=None, uuid=UUID, pci_bus_id="0000:00:06")
    assert REQUIRED <= set(s.metric)
    assert s.metric["power_w"] == pytest.approx(79.121)
    assert s.metric["pcie_replay_counter"] == 1
    assert s.metric["gpu_idle"] == 1 and s.metric["hw_slowdown"] == 0  # mask 0x1
    assert s.metric["remapped_rows_uncorrectable"] == 0
    assert "retired_pages_pending" not in s.metric  # "ERR NVMLError_NotSupported"
    assert s.at is None


def test_nvidia_smi_table(real_fixtures: Path) -> None:
    fmt, samples = parse(real_fixtures / "public" / "rc-33" / "lines.log")
    assert fmt == "nvidia_smi_table"
    assert samples[0].gpu == GpuRef(index=0, pci_bus_id="0000:00:07")
    assert samples[0].metric["ecc_uncorrected_volatile"] == 0
    assert (samples[0].metric["temperature_gpu_c"], samples[0].metric["power_w"]) == (50, 219)


def test_unrecognised_and_malformed(real_fixtures: Path) -> None:
    d = real_fixtures / "h200-2026-11"
    assert parse_telemetry((d / "nvidia-smi-dmon.txt").read_text(), CTX) is None
    assert parse_telemetry((d / "dmesg-T.log").read_text(), CTX) is None
    assert detect_format((d / "proc-driver-nvidia.txt").read_text()) is None
    xml = (d / "nvidia-smi-q.xml").read_text()
    with pytest.raises(ET.ParseError):
        parse_telemetry(xml[: len(xml) // 2], CTX)
    with pytest.raises(ValueError):
        parse_telemetry((d / "nvml.json").read_text()[:-20], CTX)


def test_normalise_pci_bus_id() -> None:
    assert normalise_pci_bus_id("00000000:9C:00.0") == "0000:9c:00"
    assert normalise_pci_bus_id("PCI:0000:09:00") == "0000:09:00"
    assert normalise_pci_bus_id("N/A") is None
