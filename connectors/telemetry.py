"""Parsers for GPU telemetry dumps -> per-GPU metric samples.

Recognised by content, never by file name (:func:`detect_format`):

* ``nvidia_smi_q_xml`` -- ``nvidia-smi -q -x`` (root element ``<nvidia_smi_log>``; element
  names from NVIDIA's ``nvsmi_device_v*.dtd``).
* ``nvidia_smi_q`` -- ``nvidia-smi -q`` text (``==============NVSMI LOG==============``
  header, one or more samples per file as ``-q -l`` writes them), or a bare section copied out
  of it such as the ``Clocks Event Reasons`` / older ``Clocks Throttle Reasons`` block (seen in
  issue reports, fixture rc-35).
* ``nvidia_smi_csv`` -- ``nvidia-smi --query-gpu=timestamp,index,uuid,... --format=csv``
  with any choice of columns: a header line whose every column is a field ``nvidia-smi
  --help-query-gpu`` lists (:func:`is_query_gpu_header`; ``[unit]`` suffixes and
  ``nounits`` alike) and that names a GPU or a reading this module keeps.
* ``nvml_json`` -- a JSON object (or list / JSON Lines of objects) with a ``uuid`` key, as
  written by small NVML (pynvml) collectors.
* ``nvidia_smi_table`` -- the default ``nvidia-smi`` summary table (``| NVIDIA-SMI ...``,
  fixture rc-33): temperature, power, volatile uncorrected ECC per GPU.

Every sample carries a ``metric`` dict with normalised keys (floats; booleans and
Active/Not Active/Yes/No as 1/0; ``N/A``, ``[N/A]``, ``Not Supported`` and errors omitted):

``ecc_uncorrected_volatile``, ``ecc_corrected_volatile``, ``ecc_uncorrected_aggregate``,
``ecc_corrected_aggregate``, ``remapped_rows_correctable``, ``remapped_rows_uncorrectable``,
``remapped_rows_pending``, ``remapped_rows_failure``, ``retired_pages_pending``,
``gpu_idle``, ``sw_power_cap``, ``hw_slowdown``, ``hw_thermal_slowdown``,
``hw_power_brake_slowdown``, ``sw_thermal_slowdown``, ``sync_boost``,
``pcie_replay_counter``, ``pcie_link_gen``, ``pcie_link_width``, ``pcie_link_gen_max``,
``pcie_link_width_max`` (the link's maximum: a current value below it is a link trained down),
``temperature_gpu_c``,
``temperature_memory_c``, ``power_w``, ``clocks_sm_mhz``, ``utilization_gpu_pct``,
``memory_used_mib``, ``memory_total_mib``.

Pure functions of the text (no I/O); zone-less sample times are placed with a
:class:`connectors.timefmt.TimeContext`.
"""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, Callable

from correlators.ids import normalise_pci
from connectors.timefmt import LineTime, TimeContext, parse_line_time
from schemas.records import TIME_QUALITY_SECONDS, GpuRef

__all__ = [
    "CLOCK_EVENT_REASON_BITS",
    "TelemetrySample",
    "detect_format",
    "parse_telemetry",
    "parse_nvidia_smi_q_text",
    "parse_nvidia_smi_q_xml",
    "parse_nvidia_smi_csv",
    "is_query_gpu_header",
    "parse_nvml_json",
    "parse_nvidia_smi_table",
    "normalise_pci_bus_id",
]


@dataclass
class TelemetrySample:
    """One GPU's readings at one time.

    ``at`` is the sample's own time (UTC ns, quality, format) or ``None`` when the dump has
    none (NVML JSON without a ``timestamp``). ``line`` is the 1-based line where the GPU's
    section starts. ``summary`` is a one-line text for ``Observation.body``.
    """

    format: str
    line: int
    gpu: GpuRef | None
    metric: dict[str, float]
    at: LineTime | None = None
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        who = "GPU"
        if self.gpu is not None:
            ids = [str(v) for v in (self.gpu.index, self.gpu.pci_bus_id, self.gpu.uuid) if v is not None]
            who = "GPU " + " ".join(ids) if ids else "GPU"
        vals = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(self.metric.items()))
        return f"{self.format} {who}: {vals}"


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


#: GPU bus ids are normalised to the one engine form (``0000:9c:00``, see
#: :func:`correlators.ids.normalise_pci`); None for ``N/A`` and other non-addresses.
normalise_pci_bus_id = normalise_pci


_NUM = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*(?:[A-Za-z%/()x]+.*)?$")
_HEX = re.compile(r"^\s*0x[0-9A-Fa-f]+\s*$")
_BOOL = {
    "active": 1.0, "not active": 0.0, "yes": 1.0, "no": 0.0, "enabled": 1.0, "disabled": 0.0,
    "true": 1.0, "false": 0.0,
}


def _value(raw: Any) -> float | None:
    """A reading as a float: numbers (units stripped), booleans, Active/Not Active, Yes/No;
    ``None`` for N/A, [N/A], Not Supported, errors and anything else."""
    if raw is None:
        return None
    if isinstance(raw, bool):
        return 1.0 if raw else 0.0
    if isinstance(raw, (int, float)):
        return float(raw)
    text = str(raw).strip()
    low = text.lower()
    if low in _BOOL:
        return _BOOL[low]
    if _HEX.match(text):
        return float(int(text, 16))
    m = _NUM.match(text)
    if m:
        return float(m[1])
    return None


def _put(metric: dict[str, float], key: str, raw: Any) -> None:
    v = _value(raw)
    if v is not None:
        metric[key] = v


def _sum_put(metric: dict[str, float], key: str, raws: list[Any]) -> None:
    vals = [v for v in (_value(r) for r in raws) if v is not None]
    if vals:
        metric[key] = float(sum(vals))


# ---------------------------------------------------------------------------------------------
# nvidia-smi -q (text)

_REASONS = {  # nvidia-smi -q label (lower case) -> metric key
    "idle": "gpu_idle",
    "gpu idle": "gpu_idle",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "sync boost": "sync_boost",
}
_KV = re.compile(r"^(?P<ind>\s*)(?P<key>\S[^:]*?)\s*:\s?(?P<val>.*?)\s*$")
_SECTION = re.compile(r"^(?P<ind>\s*)(?P<key>\S.*?)\s*$")
_HEADER = "==============NVSMI LOG=============="
_GPU_LINE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")


def _tree_paths(lines: list[str]) -> list[tuple[tuple[str, ...], str]]:
    """(section path of lower-case labels, value) for each ``key : value`` line of an
    indented nvidia-smi -q block."""
    out: list[tuple[tuple[str, ...], str]] = []
    stack: list[tuple[int, str]] = []
    for line in lines:
        if not line.strip():
            continue
        m = _KV.match(line)
        is_kv = m is not None and ":" in line
        ind = len(line) - len(line.lstrip())
        key = (m["key"] if is_kv else line.strip()).lower()
        while stack and stack[-1][0] >= ind:
            stack.pop()
        if is_kv and m["val"] != "":
            out.append((tuple(k for _, k in stack) + (key,), m["val"]))
        else:
            stack.append((ind, key.rstrip(":").strip()))
    return out


def _metrics_from_q_paths(paths: list[tuple[tuple[str, ...], str]]) -> tuple[dict[str, float], dict[str, str]]:
    metric: dict[str, float] = {}
    ident: dict[str, str] = {}
    ecc: dict[str, list[str]] = {"uv": [], "cv": [], "ua": [], "ca": []}
    ecc_total: dict[str, str] = {}
    power: dict[str, str] = {}
    for path, val in paths:
        key = path[-1]
        sect = path[:-1]
        if key == "gpu uuid":
            ident["uuid"] = val
        elif key == "bus id" and sect[-1:] == ("pci",):
            ident["pci"] = val
        elif sect and sect[-1] in ("clocks event reasons", "clocks throttle reasons", "hw slowdown") \
                and key in _REASONS:
            _put(metric, _REASONS[key], val)
        elif "ecc errors" in sect:
            scope = "v" if "volatile" in sect else "a" if "aggregate" in sect else None
            if scope is None:
                continue
            if "double bit" in sect or "single bit" in sect:  # pre-Ampere layout: use Total
                if key == "total":
                    ecc_total[("u" if "double bit" in sect else "c") + scope] = val
            elif "uncorrectable" in key:
                ecc["u" + scope].append(val)
            elif "correctable" in key:
                ecc["c" + scope].append(val)
        elif sect[-1:] == ("remapped rows",):
            name = {"correctable error": "remapped_rows_correctable",
                    "uncorrectable error": "remapped_rows_uncorrectable",
                    "pending": "remapped_rows_pending",
                    "remapping failure occurred": "remapped_rows_failure"}.get(key)
            if name:
                _put(metric, name, val)
        elif sect[-1:] == ("retired pages",) and key in ("pending page blacklist", "pending page retirement"):
            _put(metric, "retired_pages_pending", val)
        elif key == "replays since reset":
            _put(metric, "pcie_replay_counter", val)
        elif sect[-1:] == ("pcie generation",) and key == "current":
            _put(metric, "pcie_link_gen", val)
        elif sect[-1:] == ("link width",) and key == "current":
            _put(metric, "pcie_link_width", val)
        elif sect[-1:] == ("pcie generation",) and key in ("max", "device max"):
            _put(metric, "pcie_link_gen_max", val)
        elif sect[-1:] == ("link width",) and key in ("max", "device max"):
            _put(metric, "pcie_link_width_max", val)
        elif key == "gpu current temp":
            _put(metric, "temperature_gpu_c", val)
        elif key == "memory current temp":
            _put(metric, "temperature_memory_c", val)
        elif sect[-1:] in (("gpu power readings",), ("power readings",)):
            power[key] = val
        elif sect[-1:] == ("clocks",) and key == "sm":
            _put(metric, "clocks_sm_mhz", val)
        elif sect[-1:] == ("utilization",) and key == "gpu":
            _put(metric, "utilization_gpu_pct", val)
        elif sect[-1:] == ("fb memory usage",) and key in ("used", "total"):
            _put(metric, f"memory_{key}_mib", val)
    for short, name in (("uv", "ecc_uncorrected_volatile"), ("cv", "ecc_corrected_volatile"),
                        ("ua", "ecc_uncorrected_aggregate"), ("ca", "ecc_corrected_aggregate")):
        if short in ecc_total:
            _put(metric, name, ecc_total[short])
        else:
            _sum_put(metric, name, ecc[short])
    for key in ("instantaneous power draw", "power draw", "average power draw"):
        if _value(power.get(key)) is not None:
            metric["power_w"] = _value(power[key])  # type: ignore[assignment]
            break
    return metric, ident


def parse_nvidia_smi_q_text(text: str, ctx: TimeContext) -> list[TelemetrySample]:
    """Parse ``nvidia-smi -q`` text: every ``NVSMI LOG`` sample, every ``GPU <bus id>`` section.
    A bare fragment without header or GPU line (a copied ``Clocks Event Reasons`` block) gives
    one sample with ``gpu=None``. Time: the sample's ``Timestamp`` line (ctime, host zone)."""
    lines = text.split("\n")
    samples: list[TelemetrySample] = []
    at: LineTime | None = None
    gpu_start: int | None = None
    gpu_bus: str | None = None
    index = 0

    def flush(end: int) -> None:
        nonlocal index
        if gpu_start is None:
            return
        metric, ident = _metrics_from_q_paths(_tree_paths(lines[gpu_start + 1:end]))
        gpu = GpuRef(index=index, uuid=ident.get("uuid"),
                     pci_bus_id=normalise_pci(ident.get("pci") or gpu_bus))
        index += 1
        samples.append(TelemetrySample("nvidia_smi_q", gpu_start + 1, gpu, metric, at))

    for n, line in enumerate(lines):
        if line.strip() == _HEADER:
            flush(n)
            gpu_start, at, index = None, None, 0
            continue
        if line.startswith("Timestamp"):
            lt = parse_line_time(line, ctx)
            at = lt if lt is not None else at
            continue
        m = _GPU_LINE.match(line)
        if m:
            flush(n)
            gpu_start, gpu_bus = n, m[1]
    flush(len(lines))
    if not samples:
        metric, ident = _metrics_from_q_paths(_tree_paths(lines))
        if metric:
            gpu = None
            if ident:
                gpu = GpuRef(uuid=ident.get("uuid"), pci_bus_id=normalise_pci(ident.get("pci")))
            first = next((i for i, l in enumerate(lines) if l.strip()), 0)
            samples.append(TelemetrySample("nvidia_smi_q", first + 1, gpu, metric, at))
    return samples


# ---------------------------------------------------------------------------------------------
# nvidia-smi -q -x (XML)

_XML_REASONS = {
    "clocks_event_reason_gpu_idle": "gpu_idle",
    "clocks_event_reason_sw_power_cap": "sw_power_cap",
    "clocks_event_reason_hw_slowdown": "hw_slowdown",
    "clocks_event_reason_hw_thermal_slowdown": "hw_thermal_slowdown",
    "clocks_event_reason_hw_power_brake_slowdown": "hw_power_brake_slowdown",
    "clocks_event_reason_sw_thermal_slowdown": "sw_thermal_slowdown",
    "clocks_event_reason_sync_boost": "sync_boost",
}


def _xtext(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    return found.text if found is not None else None


def parse_nvidia_smi_q_xml(text: str, ctx: TimeContext) -> list[TelemetrySample]:
    """Parse ``nvidia-smi -q -x`` XML (one ``<nvidia_smi_log>``). Older drivers name the
    reasons ``clocks_throttle_reason_*``; both are read. Raises ``ET.ParseError`` on broken
    XML. Time: ``<timestamp>`` (ctime, host zone)."""
    # The DOCTYPE names an external DTD; ElementTree never fetches it.
    root = ET.fromstring(text)
    at = None
    stamp = _xtext(root, "timestamp")
    if stamp:
        at = parse_line_time(f"Timestamp : {stamp.strip()}", ctx)
    lines = text.split("\n")
    gpu_lines = [i + 1 for i, l in enumerate(lines) if l.lstrip().startswith("<gpu ")]
    samples = []
    for index, g in enumerate(root.findall("gpu")):
        metric: dict[str, float] = {}
        for reasons in ("clocks_event_reasons", "clocks_throttle_reasons"):
            block = g.find(reasons)
            if block is None:
                continue
            for child in block:
                name = child.tag.replace("clocks_throttle_reason_", "clocks_event_reason_")
                if name in _XML_REASONS:
                    _put(metric, _XML_REASONS[name], child.text)
        for scope, short in (("volatile", "volatile"), ("aggregate", "aggregate")):
            sect = g.find(f"ecc_errors/{scope}")
            if sect is None:
                continue
            unc, cor = [], []
            for child in sect.iter():
                tag = child.tag
                if tag == "total" or child is sect:
                    continue
                if "uncorrectable" in tag:
                    unc.append(child.text)
                elif "correctable" in tag:
                    cor.append(child.text)
            dbl = _xtext(sect, "double_bit/total")
            sgl = _xtext(sect, "single_bit/total")
            if dbl is not None or sgl is not None:
                _put(metric, f"ecc_uncorrected_{short}", dbl)
                _put(metric, f"ecc_corrected_{short}", sgl)
            else:
                _sum_put(metric, f"ecc_uncorrected_{short}", unc)
                _sum_put(metric, f"ecc_corrected_{short}", cor)
        for tag, name in (("remapped_row_corr", "remapped_rows_correctable"),
                          ("remapped_row_unc", "remapped_rows_uncorrectable"),
                          ("remapped_row_pending", "remapped_rows_pending"),
                          ("remapped_row_failure", "remapped_rows_failure")):
            _put(metric, name, _xtext(g, f"remapped_rows/{tag}"))
        _put(metric, "retired_pages_pending", _xtext(g, "retired_pages/pending_retirement"))
        _put(metric, "pcie_replay_counter", _xtext(g, "pci/replay_counter"))
        _put(metric, "pcie_link_gen", _xtext(g, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"))
        _put(metric, "pcie_link_width", _xtext(g, "pci/pci_gpu_link_info/link_widths/current_link_width"))
        _put(metric, "pcie_link_gen_max", _xtext(g, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")
             or _xtext(g, "pci/pci_gpu_link_info/pcie_gen/device_pcie_gen_max"))
        _put(metric, "pcie_link_width_max", _xtext(g, "pci/pci_gpu_link_info/link_widths/max_link_width"))
        _put(metric, "temperature_gpu_c", _xtext(g, "temperature/gpu_temp"))
        _put(metric, "temperature_memory_c", _xtext(g, "temperature/memory_temp"))
        for path in ("gpu_power_readings/instant_power_draw", "gpu_power_readings/power_draw",
                     "power_readings/power_draw", "gpu_power_readings/average_power_draw"):
            v = _value(_xtext(g, path))
            if v is not None:
                metric["power_w"] = v
                break
        _put(metric, "clocks_sm_mhz", _xtext(g, "clocks/sm_clock"))
        _put(metric, "utilization_gpu_pct", _xtext(g, "utilization/gpu_util"))
        _put(metric, "memory_used_mib", _xtext(g, "fb_memory_usage/used"))
        _put(metric, "memory_total_mib", _xtext(g, "fb_memory_usage/total"))
        gpu = GpuRef(index=index, uuid=(_xtext(g, "uuid") or "").strip() or None,
                     pci_bus_id=normalise_pci(_xtext(g, "pci/pci_bus_id") or g.get("id")))
        line = gpu_lines[index] if index < len(gpu_lines) else 1
        samples.append(TelemetrySample("nvidia_smi_q_xml", line, gpu, metric, at))
    return samples


# ---------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu CSV

_CSV_KEYS = {
    "ecc.errors.uncorrected.volatile.total": "ecc_uncorrected_volatile",
    "ecc.errors.corrected.volatile.total": "ecc_corrected_volatile",
    "ecc.errors.uncorrected.aggregate.total": "ecc_uncorrected_aggregate",
    "ecc.errors.corrected.aggregate.total": "ecc_corrected_aggregate",
    "remapped_rows.correctable": "remapped_rows_correctable",
    "remapped_rows.uncorrectable": "remapped_rows_uncorrectable",
    "remapped_rows.pending": "remapped_rows_pending",
    "remapped_rows.failure": "remapped_rows_failure",
    "retired_pages.pending": "retired_pages_pending",
    "pcie.link.gen.current": "pcie_link_gen",
    "pcie.link.width.current": "pcie_link_width",
    "pcie.link.gen.max": "pcie_link_gen_max",
    "pcie.link.gen.gpumax": "pcie_link_gen_max",
    "pcie.link.width.max": "pcie_link_width_max",
    "temperature.gpu": "temperature_gpu_c",
    "temperature.memory": "temperature_memory_c",
    "power.draw": "power_w",
    "power.draw.instant": "power_w",
    "clocks.current.sm": "clocks_sm_mhz",
    "clocks.sm": "clocks_sm_mhz",
    "utilization.gpu": "utilization_gpu_pct",
    "memory.used": "memory_used_mib",
    "memory.total": "memory_total_mib",
}
for _prefix in ("clocks_event_reasons.", "clocks_throttle_reasons.", "clocks_event_reasons_", ):
    for _k in ("gpu_idle", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
               "hw_power_brake_slowdown", "sw_thermal_slowdown", "sync_boost"):
        _CSV_KEYS[_prefix + _k] = _k


def _csv_header(line: str) -> list[str]:
    return [re.sub(r"\s*\[.*\]$", "", h.strip()).lower() for h in line.split(",")]


#: ``nvidia-smi --help-query-gpu`` field names without a dot (and their aliases)
_QUERY_NAMES = frozenset({
    "timestamp", "driver_version", "count", "name", "gpu_name", "serial", "gpu_serial", "uuid", "gpu_uuid",
    "gpu_bus_id", "index", "display_mode", "display_attached", "display_active", "persistence_mode",
    "addressing_mode", "vbios_version", "pstate", "compute_mode", "compute_cap",
})
#: the first dotted part of the other ``--help-query-gpu`` fields (``pci.bus_id``,
#: ``clocks.current.sm``, ``ecc.errors.corrected.volatile.total``, ...)
_QUERY_FAMILIES = frozenset({
    "pci", "pcie", "vgpu_driver_capability", "vgpu_device_capability", "accounting", "driver_model", "inforom",
    "gom", "fan", "clocks_event_reasons", "clocks_throttle_reasons", "clocks_event_reasons_counters", "memory",
    "utilization", "encoder", "ecc", "retired_pages", "remapped_rows", "temperature", "power", "enforced",
    "module", "clocks", "mig", "fabric", "gsp", "c2c", "protected_memory", "platform", "reset_status",
    "dramencryption", "conf_compute", "gpu_recovery_action",
})
#: aliases nvidia-smi accepts for the identifying columns
_CSV_ALIASES = {"gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id", "gpu_name": "name", "gpu_serial": "serial"}
#: the columns that name a GPU
_CSV_IDS = frozenset({"index", "uuid", "pci.bus_id", "gpu_uuid", "gpu_bus_id"})


def is_query_gpu_header(columns: list[str]) -> bool:
    """True when ``columns`` (a CSV header, :func:`_csv_header`-normalised) is one
    ``nvidia-smi --query-gpu=... --format=csv`` prints: at least two columns, every one a
    ``--help-query-gpu`` field, at least one of them naming a GPU (``index``, ``uuid``,
    ``pci.bus_id``) or a reading this module keeps (``temperature.gpu``, ``ecc.errors...``)."""
    if len(columns) < 2:
        return False
    for col in columns:
        if col not in _CSV_KEYS and col not in _QUERY_NAMES and col.split(".", 1)[0] not in _QUERY_FAMILIES:
            return False
    return any(col in _CSV_IDS or col in _CSV_KEYS for col in columns)


def parse_nvidia_smi_csv(text: str, ctx: TimeContext) -> list[TelemetrySample]:
    """Parse ``nvidia-smi --query-gpu=... --format=csv`` (header with units such as
    ``power.draw [W]``; ``nounits`` works too). One sample per data row; time from the
    ``timestamp`` column (``2026/11/30 01:20:00.821``, host zone); the GPU from whichever of
    ``index``, ``uuid`` and ``pci.bus_id`` are there (none: a sample that names no GPU).
    Raises ``ValueError`` when the first non-empty line is not such a header
    (:func:`is_query_gpu_header`)."""
    lines = text.split("\n")
    start = next((i for i, l in enumerate(lines) if l.strip()), None)
    if start is None:
        raise ValueError("no header")
    header = _csv_header(lines[start])
    if not is_query_gpu_header(header):
        raise ValueError("the header is not one of nvidia-smi --query-gpu fields")
    first = header[0]
    header = [_CSV_ALIASES.get(col, col) for col in header]
    samples = []
    for n in range(start + 1, len(lines)):
        if not lines[n].strip():
            continue
        row = next(csv.reader(io.StringIO(lines[n]), skipinitialspace=True))
        cells = dict(zip(header, (c.strip() for c in row)))
        if row and _csv_header(row[0])[0] == first:
            continue  # repeated header (nvidia-smi -l)
        metric: dict[str, float] = {}
        for col, val in cells.items():
            if col in _CSV_KEYS:
                _put(metric, _CSV_KEYS[col], val)
        at = None
        if "timestamp" in cells:
            at = parse_line_time(cells["timestamp"], ctx)
        index = _value(cells.get("index"))
        gpu = GpuRef(index=int(index) if index is not None else None,
                     uuid=cells.get("uuid") or None,
                     pci_bus_id=normalise_pci(cells.get("pci.bus_id")))
        samples.append(TelemetrySample("nvidia_smi_csv", n + 1, gpu, metric, at))
    return samples


# ---------------------------------------------------------------------------------------------
# NVML JSON

_NVML_KEYS = {
    "ecc_uncorrected_volatile": "ecc_uncorrected_volatile",
    "ecc_corrected_volatile": "ecc_corrected_volatile",
    "ecc_uncorrected_aggregate": "ecc_uncorrected_aggregate",
    "ecc_corrected_aggregate": "ecc_corrected_aggregate",
    "pcie_replay_counter": "pcie_replay_counter",
    "pcie_gen": "pcie_link_gen",
    "pcie_width": "pcie_link_width",
    "pcie_gen_max": "pcie_link_gen_max",
    "pcie_width_max": "pcie_link_width_max",
    "temperature_gpu_c": "temperature_gpu_c",
    "temperature_gpu": "temperature_gpu_c",
    "temperature_memory_c": "temperature_memory_c",
    "power_w": "power_w",
    "retired_pages_pending": "retired_pages_pending",
    "remapped_rows_correctable": "remapped_rows_correctable",
    "remapped_rows_uncorrectable": "remapped_rows_uncorrectable",
    "remapped_rows_pending": "remapped_rows_pending",
    "remapped_rows_failure": "remapped_rows_failure",
    "utilization_gpu_pct": "utilization_gpu_pct",
}
#: nvmlClocksEventReason* bit masks (nvml.h): reason flag name -> bit, shared by every reader of
#: clocks event reasons (NVML JSON, DCGM_FI_DEV_CLOCK_THROTTLE_REASONS).
CLOCK_EVENT_REASON_BITS = {
    "gpu_idle": 0x1, "sw_power_cap": 0x4, "hw_slowdown": 0x8, "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80,
}
_TUPLE4 = re.compile(r"^\(?\s*(\S+?)\s*,\s*(\S+?)\s*,\s*(\S+?)\s*,\s*(\S+?)\s*\)?$")


def _nvml_objects(text: str) -> list[tuple[int, dict[str, Any]]]:
    stripped = text.strip()
    try:
        data = json.loads(stripped)
        line = text[: len(text) - len(text.lstrip())].count("\n") + 1
        if isinstance(data, dict):
            return [(line, data)] if "uuid" in data else []
        if isinstance(data, list):
            return [(line, d) for d in data if isinstance(d, dict) and "uuid" in d]
        return []
    except json.JSONDecodeError:
        out = []
        for n, l in enumerate(text.split("\n"), 1):  # JSON Lines
            if l.strip():
                d = json.loads(l)
                if isinstance(d, dict) and "uuid" in d:
                    out.append((n, d))
        return out


def parse_nvml_json(text: str, ctx: TimeContext) -> list[TelemetrySample]:
    """Parse NVML readings as JSON: an object with ``uuid``, a list of them, or JSON Lines.
    ``power_mw`` is converted to ``power_w``; ``clocks_event_reasons`` (or the older
    ``clocks_throttle_reasons``) is decoded from the NVML bit mask; ``remapped_rows`` as
    ``nvmlDeviceGetRemappedRows``' ``(corr, unc, pending, failure)`` tuple. Time: a
    ``timestamp`` key (ISO-8601 or epoch seconds) if present. Raises ``ValueError`` (JSON
    errors) on malformed text."""
    samples = []
    for n, d in _nvml_objects(text):
        metric: dict[str, float] = {}
        for key, name in _NVML_KEYS.items():
            if key in d:
                _put(metric, name, d[key])
        if "power_w" not in metric and _value(d.get("power_mw")) is not None:
            metric["power_w"] = _value(d["power_mw"]) / 1000.0  # type: ignore[operator]
        mask = d.get("clocks_event_reasons", d.get("clocks_throttle_reasons"))
        if isinstance(mask, int) and not isinstance(mask, bool):
            for name, bit in CLOCK_EVENT_REASON_BITS.items():
                metric[name] = 1.0 if mask & bit else 0.0
        rr = d.get("remapped_rows")
        vals: list[Any] | None = None
        if isinstance(rr, (list, tuple)) and len(rr) == 4:
            vals = list(rr)
        elif isinstance(rr, str) and _TUPLE4.match(rr.strip()):
            vals = list(_TUPLE4.match(rr.strip()).groups())  # type: ignore[union-attr]
        if vals:
            for name, v in zip(("remapped_rows_correctable", "remapped_rows_uncorrectable",
                                "remapped_rows_pending", "remapped_rows_failure"), vals):
                _put(metric, name, v)
        at = None
        ts = d.get("timestamp")
        if isinstance(ts, (int, float)) and not isinstance(ts, bool) and 631152000 <= ts <= 4102444800:
            at = LineTime(int(round(ts * 1e9)), TIME_QUALITY_SECONDS if float(ts).is_integer() else 1.0,
                          "epoch")
        elif isinstance(ts, str):
            at = parse_line_time(ts, ctx)
        index = d.get("index")
        gpu = GpuRef(index=index if isinstance(index, int) and not isinstance(index, bool) else None,
                     uuid=str(d["uuid"]) if d.get("uuid") else None,
                     pci_bus_id=normalise_pci(str(d.get("pci_bus_id") or "")))
        samples.append(TelemetrySample("nvml_json", n, gpu, metric, at))
    return samples


# ---------------------------------------------------------------------------------------------
# nvidia-smi default table

_TABLE_ROW1 = re.compile(
    r"^\|\s+(?P<idx>\d+)\s+(?P<name>.+?)\s+(?:On|Off)\s+\|\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
    r"[0-9A-Fa-f]{2}\.[0-7])\s+(?:On|Off)\s+\|\s+(?P<ecc>\S+)\s+\|\s*$"
)
_TABLE_ROW2 = re.compile(
    r"^\|\s+(?P<fan>\S+)\s+(?P<temp>\S+?)C?\s+(?P<perf>P\d+)\s+(?P<pwr>\S+?)W?\s*/\s*\S+\s+\|"
    r"\s+(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s+\|\s+(?P<util>\d+)%"
)


def parse_nvidia_smi_table(text: str, ctx: TimeContext) -> list[TelemetrySample]:
    """Parse the default ``nvidia-smi`` table: per GPU the ``| idx name persist | bus disp |
    volatile uncorr ECC |`` row and the ``| fan temp perf pwr/cap | mem | util |`` row after it.
    No time (the table has none beyond a header date that is often cut off)."""
    lines = text.split("\n")
    samples = []
    for n, line in enumerate(lines):
        m = _TABLE_ROW1.match(line)
        if not m:
            continue
        metric: dict[str, float] = {}
        _put(metric, "ecc_uncorrected_volatile", m["ecc"])
        if n + 1 < len(lines):
            m2 = _TABLE_ROW2.match(lines[n + 1])
            if m2:
                _put(metric, "temperature_gpu_c", m2["temp"])
                _put(metric, "power_w", m2["pwr"])
                _put(metric, "memory_used_mib", m2["used"])
                _put(metric, "memory_total_mib", m2["total"])
                _put(metric, "utilization_gpu_pct", m2["util"])
        gpu = GpuRef(index=int(m["idx"]), pci_bus_id=normalise_pci(m["bus"]))
        samples.append(TelemetrySample("nvidia_smi_table", n + 1, gpu, metric, None))
    return samples


# ---------------------------------------------------------------------------------------------

_PARSERS: dict[str, Callable[[str, TimeContext], list[TelemetrySample]]] = {
    "nvidia_smi_q_xml": parse_nvidia_smi_q_xml,
    "nvidia_smi_q": parse_nvidia_smi_q_text,
    "nvidia_smi_csv": parse_nvidia_smi_csv,
    "nvml_json": parse_nvml_json,
    "nvidia_smi_table": parse_nvidia_smi_table,
}
_Q_FRAGMENT = re.compile(r"^\s*Clocks (?:Event|Throttle) Reasons\s*$", re.M)


def detect_format(text: str) -> str | None:
    """The telemetry format of ``text`` by content (see module doc), or ``None``."""
    head = text.lstrip("\ufeff \t\r\n")[:4096]
    if head.startswith("<?xml") or head.startswith("<!DOCTYPE nvidia_smi_log") \
            or head.startswith("<nvidia_smi_log"):
        return "nvidia_smi_q_xml" if "<nvidia_smi_log" in head else None
    if _HEADER in head:
        return "nvidia_smi_q"
    first = head.split("\n", 1)[0]
    if "," in first:
        cols = _csv_header(first)
        if is_query_gpu_header(cols):
            return "nvidia_smi_csv"
    if head.startswith("{") or head.startswith("["):
        return "nvml_json" if '"uuid"' in text[:65536] else None
    if re.search(r"^\| NVIDIA-SMI ", head, re.M) or _TABLE_ROW1.search(head):
        return "nvidia_smi_table"
    if _Q_FRAGMENT.search(head):
        return "nvidia_smi_q"
    return None


def parse_telemetry(text: str, ctx: TimeContext) -> tuple[str, list[TelemetrySample]] | None:
    """Detect the format of ``text`` and parse it. Returns ``(format, samples)``, or ``None``
    when no parser recognises the text (the caller then reads it as log lines). Raises
    ``ValueError`` (including ``json.JSONDecodeError``) or ``xml.etree.ElementTree.ParseError``
    when the format is recognised but the content is malformed."""
    fmt = detect_format(text)
    if fmt is None:
        return None
    return fmt, _PARSERS[fmt](text, ctx)
