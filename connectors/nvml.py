"""NVML node agent: polls the local GPUs through NVML (nvidia-ml-py) -> telemetry and log Observations.

The poller (:class:`NvmlConnector`) reads through a small boundary, :class:`Readings`:

* :meth:`Readings.devices` -- each GPU's index, UUID, PCI bus id and name
  (``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetUUID``, ``nvmlDeviceGetPciInfo``,
  ``nvmlDeviceGetName``);
* :meth:`Readings.sample` -- one raw reading per GPU, the values pynvml returns, keyed by the
  NVML call (:data:`CALLS`): ``nvmlDeviceGetTotalEccErrors`` for the four (error type, counter
  type) pairs (``"UNCORRECTED,VOLATILE"``, ``"CORRECTED,VOLATILE"``, ``"UNCORRECTED,AGGREGATE"``,
  ``"CORRECTED,AGGREGATE"``), ``nvmlDeviceGetRemappedRows`` (``(corrRows, uncRows, isPending,
  failureOccurred)``), ``nvmlDeviceGetCurrentClocksEventReasons`` (the ``nvmlClocksEventReason*``
  bit mask; drivers before R535 lack it and ``nvmlDeviceGetCurrentClocksThrottleReasons`` is read
  instead), ``nvmlDeviceGetPcieReplayCounter``, ``nvmlDeviceGetCurrPcieLinkGeneration`` /
  ``...Width``, ``nvmlDeviceGetTemperature`` (GPU sensor, C), ``nvmlDeviceGetPowerUsage`` (mW),
  ``nvmlDeviceGetRetiredPagesPendingStatus``; a call that raised is ``{"error": "<NVMLError
  class>", "text": "<nvmlErrorString>"}``;
* :meth:`Readings.wait_xid` -- XID critical error events (``nvmlEventSetCreate``,
  ``nvmlDeviceRegisterEvents(nvmlEventTypeXidCriticalError)``, ``nvmlEventSetWait_v2``): the
  device, the XID (``eventData``), ``gpuInstanceId`` / ``computeInstanceId`` (MIG; 0xFFFFFFFF
  otherwise).

:class:`PynvmlReadings` calls pynvml; :class:`RecordedReadings` replays a recording (JSON, the
same shapes), which is how the conversion is tested without a GPU.

**Observations.** A reading becomes a ``telemetry`` Observation (``format="nvml"``) whose
``metric`` has the names of the nvidia-smi parsers (:mod:`connectors.telemetry`: the reading is
written as that module's ``nvml_json`` form and parsed by
:func:`connectors.telemetry.parse_nvml_json`), so the telemetry rules (``telemetry.yaml``) read
it as they read ``nvidia-smi -q``. Only a change is published: a GPU's reading goes out when one
of :data:`WATCHED` differs from the last published one, the first time, and every
``heartbeat_s`` seconds (temperature, power and idle flags change all the time and alone trigger
nothing). An XID event becomes a ``log_line`` Observation (``format="nvml_event"``) written in the
driver's Xid line form, ``NVRM: Xid (PCI:0000:1b:00): 48, NVML XID event on GPU 1``, so the
``gpu.xid`` rule extracts it with the XID catalog's meaning; its time is when the event was
received (``time_source="transport"``). A failing NVML call other than the normal ones
(:data:`QUIET_ERRORS`: not supported, no data, ...) becomes one ``log_line`` Observation
(``format="nvml_error"``) in pynvml's exception form (``... pynvml.NVMLError_GpuIsLost: GPU is
lost``), which the ``nvml.python_error`` rule reads, once until the error clears. Host: ``host``
(default: this machine's name); ``Source(connector="nvml", instance=host)``.

The cursor holds the last published watched metrics and reported errors per GPU UUID, so a
restart does not publish an unchanged reading again.

Without NVML (no driver: ``NVMLError_LibraryNotFound``, ``NVMLError_DriverNotLoaded``, ...)
:class:`PynvmlReadings` raises :class:`NvmlUnavailable`; the CLI exits 2 with one line.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generator, TYPE_CHECKING, Annotated, Any, Protocol

import typer

from connectors.command import Shared, connector
from connectors.telemetry import parse_nvml_json
from connectors.timefmt import TimeContext
from correlators.ids import normalise_pci
from schemas.records import (
    TIME_QUALITY_EXACT,
    TIME_QUALITY_SECONDS,
    CoverageEntry,
    GpuRef,
    Observation,
    Position,
    Source,
)
from schemas.utc import parse_utc

if TYPE_CHECKING:  # pragma: no cover
    from connectors.cursor import CursorStore

__all__ = [
    "CALLS",
    "ECC_KEYS",
    "NO_INSTANCE",
    "QUIET_ERRORS",
    "WATCHED",
    "XID_CRITICAL_ERROR",
    "DeviceInfo",
    "NvmlConnector",
    "NvmlUnavailable",
    "PynvmlReadings",
    "Readings",
    "RecordedReadings",
    "XidEvent",
    "nvml_json_form",
]

#: ``nvmlEventTypeXidCriticalError`` (nvml.h).
XID_CRITICAL_ERROR = 0x8
#: ``gpuInstanceId`` / ``computeInstanceId`` of an event not attributable to a MIG instance.
NO_INSTANCE = 0xFFFFFFFF
#: The (memory error type, ECC counter type) pairs read, as pynvml names them.
ECC_KEYS = {
    "UNCORRECTED,VOLATILE": ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC", "ecc_uncorrected_volatile"),
    "CORRECTED,VOLATILE": ("NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC", "ecc_corrected_volatile"),
    "UNCORRECTED,AGGREGATE": ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC", "ecc_uncorrected_aggregate"),
    "CORRECTED,AGGREGATE": ("NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC", "ecc_corrected_aggregate"),
}
#: NVML calls of one reading -> the key of :func:`connectors.telemetry.parse_nvml_json`'s form.
CALLS = {
    "nvmlDeviceGetRemappedRows": "remapped_rows",
    "nvmlDeviceGetPcieReplayCounter": "pcie_replay_counter",
    "nvmlDeviceGetCurrPcieLinkGeneration": "pcie_gen",
    "nvmlDeviceGetCurrPcieLinkWidth": "pcie_width",
    "nvmlDeviceGetMaxPcieLinkGeneration": "pcie_gen_max",
    "nvmlDeviceGetMaxPcieLinkWidth": "pcie_width_max",
    "nvmlDeviceGetTemperature": "temperature_gpu_c",
    "nvmlDeviceGetPowerUsage": "power_mw",
    "nvmlDeviceGetRetiredPagesPendingStatus": "retired_pages_pending",
}
_REASON_CALLS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
#: Metrics whose change publishes a reading (fault counters and flags; not temperature, power,
#: idle/boost/power-cap flags or the PCIe generation, which follow the load).
WATCHED = (
    "ecc_uncorrected_volatile", "ecc_corrected_volatile", "ecc_uncorrected_aggregate", "ecc_corrected_aggregate",
    "remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure",
    "retired_pages_pending", "pcie_replay_counter", "pcie_link_width", "hw_slowdown", "hw_thermal_slowdown",
    "hw_power_brake_slowdown", "sw_thermal_slowdown",
)
#: NVML errors a healthy GPU returns for calls it does not implement: not reported.
QUIET_ERRORS = frozenset({"NVMLError_NotSupported", "NVMLError_NoData", "NVMLError_FunctionNotFound",
                          "NVMLError_NoPermission", "NVMLError_NotFound"})


class NvmlUnavailable(Exception):
    """NVML cannot be used on this machine (no library, no driver, no GPU, no permission). The
    message is one line for people."""


@dataclass(frozen=True)
class DeviceInfo:
    """One GPU: NVML ``index``, ``uuid``, ``pci_bus_id`` as NVML prints it
    (``00000000:18:00.0``), ``name``."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str = ""


@dataclass(frozen=True)
class XidEvent:
    """One XID critical error event: GPU ``index``, the XID, MIG instance ids (:data:`NO_INSTANCE`
    when none), ``at_ns`` when it was received (UTC ns)."""

    index: int
    xid: int
    at_ns: int
    gpu_instance_id: int = NO_INSTANCE
    compute_instance_id: int = NO_INSTANCE


@dataclass(frozen=True)
class Reading:
    """One GPU's raw reading (see the module docstring for ``raw``) taken at ``at_ns`` (UTC ns)."""

    index: int
    at_ns: int
    raw: dict[str, Any]


class Readings(Protocol):
    """What the poller reads from NVML (see the module docstring)."""

    def versions(self) -> dict[str, Any]:
        """``{"driver": "570.133.20", "nvml": "12.570.133.20", "cuda_driver": 12080}``."""
        ...

    def devices(self) -> list[DeviceInfo]:
        """The GPUs NVML sees."""
        ...

    def sample(self) -> list[Reading]:
        """One reading of every GPU."""
        ...

    def wait_xid(self, timeout_ms: int) -> list[XidEvent]:
        """XID events: waits up to ``timeout_ms`` for the first, returns it with any already queued."""
        ...

    def close(self) -> None:
        """Release NVML."""
        ...


def _error(exc: BaseException) -> dict[str, str]:
    return {"error": type(exc).__name__, "text": str(exc)}


class PynvmlReadings:
    """:class:`Readings` of the local GPUs through pynvml (nvidia-ml-py). ``xid_events``:
    register every GPU for XID critical error events (a GPU that cannot be registered is noted in
    :attr:`notes`). Raises :class:`NvmlUnavailable` when pynvml is not installed or
    ``nvmlInit`` fails."""

    def __init__(self, *, xid_events: bool = True) -> None:
        try:
            import pynvml
        except ImportError:
            raise NvmlUnavailable("the NVML bindings are not installed (pip install nvidia-ml-py)") from None
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            hint = {"NVMLError_LibraryNotFound": "no NVIDIA driver on this machine (libnvidia-ml.so.1 not found)",
                    "NVMLError_DriverNotLoaded": "the NVIDIA kernel driver is not loaded",
                    "NVMLError_NoPermission": "no permission to open the GPU devices"}.get(type(exc).__name__, "")
            raise NvmlUnavailable(f"NVML cannot start: {exc} ({type(exc).__name__})" + (f": {hint}" if hint else "")) from None
        self.notes: list[str] = []
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        if not self._handles:
            pynvml.nvmlShutdown()
            raise NvmlUnavailable("NVML sees no GPU on this machine")
        self._events = None
        if xid_events:
            self._events = pynvml.nvmlEventSetCreate()
            for i, h in enumerate(self._handles):
                try:
                    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, self._events)
                except pynvml.NVMLError as exc:
                    self.notes.append(f"GPU {i}: no XID events ({type(exc).__name__}: {exc})")

    def versions(self) -> dict[str, Any]:
        n = self._nvml
        return {"driver": n.nvmlSystemGetDriverVersion(), "nvml": n.nvmlSystemGetNVMLVersion(),
                "cuda_driver": n.nvmlSystemGetCudaDriverVersion()}

    def devices(self) -> list[DeviceInfo]:
        n = self._nvml
        return [DeviceInfo(i, n.nvmlDeviceGetUUID(h), n.nvmlDeviceGetPciInfo(h).busId, n.nvmlDeviceGetName(h))
                for i, h in enumerate(self._handles)]

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            value = fn(*args)
        except self._nvml.NVMLError as exc:
            return _error(exc)
        return list(value) if isinstance(value, tuple) else value

    def sample(self) -> list[Reading]:
        n = self._nvml
        out = []
        for i, h in enumerate(self._handles):
            raw: dict[str, Any] = {"nvmlDeviceGetTotalEccErrors": {
                key: self._call(n.nvmlDeviceGetTotalEccErrors, h, getattr(n, et), getattr(n, ct))
                for key, (et, ct, _) in ECC_KEYS.items()}}
            for call in CALLS:
                args = (h, n.NVML_TEMPERATURE_GPU) if call == "nvmlDeviceGetTemperature" else (h,)
                raw[call] = self._call(getattr(n, call), *args)
            reasons = self._call(n.nvmlDeviceGetCurrentClocksEventReasons, h)
            raw[_REASON_CALLS[0]] = reasons
            if isinstance(reasons, dict) and reasons.get("error") == "NVMLError_FunctionNotFound":
                raw[_REASON_CALLS[1]] = self._call(n.nvmlDeviceGetCurrentClocksThrottleReasons, h)
            out.append(Reading(i, time.time_ns(), raw))
        return out

    def wait_xid(self, timeout_ms: int) -> list[XidEvent]:
        if self._events is None:
            time.sleep(timeout_ms / 1000)
            return []
        n = self._nvml
        out: list[XidEvent] = []
        wait = max(0, int(timeout_ms))
        while True:
            try:
                data = n.nvmlEventSetWait_v2(self._events, wait)
            except n.NVMLError_Timeout:
                return out
            if data.eventType == n.nvmlEventTypeXidCriticalError:
                out.append(XidEvent(n.nvmlDeviceGetIndex(data.device), int(data.eventData), time.time_ns(),
                                    int(data.gpuInstanceId), int(data.computeInstanceId)))
            wait = 0  # then only what is already queued

    def close(self) -> None:
        n = self._nvml
        try:
            if self._events is not None:
                n.nvmlEventSetFree(self._events)
        finally:
            n.nvmlShutdown()


def _ns(value: Any) -> int:
    return value if isinstance(value, int) else parse_utc(value)


class RecordedReadings:
    """:class:`Readings` replaying a recording: a JSON object with ``system``
    (``nvmlSystemGetDriverVersion``, ``nvmlSystemGetNVMLVersion``, ``nvmlSystemGetCudaDriverVersion``),
    ``devices`` (``index``, ``nvmlDeviceGetUUID``, ``nvmlDeviceGetPciInfo.busId``,
    ``nvmlDeviceGetName``) and ``polls``: each ``{"at": RFC 3339 or UTC ns, "readings": {"<index>":
    {<call>: <value>}}, "events": [{"device", "eventType", "eventData", "gpuInstanceId",
    "computeInstanceId", "at"}]}``. Each :meth:`sample` returns the next poll's readings and makes
    its events the next :meth:`wait_xid`'s; past the last poll, nothing."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.data = json.loads(self.path.read_text(encoding="utf-8"))
        self._polls = list(self.data.get("polls") or [])
        self._events: list[dict[str, Any]] = []
        self.closed = False

    def versions(self) -> dict[str, Any]:
        s = self.data.get("system") or {}
        return {"driver": s.get("nvmlSystemGetDriverVersion"), "nvml": s.get("nvmlSystemGetNVMLVersion"),
                "cuda_driver": s.get("nvmlSystemGetCudaDriverVersion")}

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(int(d["index"]), d["nvmlDeviceGetUUID"], d["nvmlDeviceGetPciInfo"]["busId"],
                           d.get("nvmlDeviceGetName", "")) for d in self.data["devices"]]

    def sample(self) -> list[Reading]:
        if not self._polls:
            return []
        poll = self._polls.pop(0)
        self._events = list(poll.get("events") or [])
        at = _ns(poll["at"])
        return [Reading(int(i), at, raw) for i, raw in sorted(poll["readings"].items(), key=lambda kv: int(kv[0]))]

    def wait_xid(self, timeout_ms: int) -> list[XidEvent]:
        events, self._events = self._events, []
        return [XidEvent(int(e["device"]), int(e["eventData"]), _ns(e["at"]), int(e.get("gpuInstanceId", NO_INSTANCE)),
                         int(e.get("computeInstanceId", NO_INSTANCE)))
                for e in events if int(e.get("eventType", XID_CRITICAL_ERROR)) == XID_CRITICAL_ERROR]

    def close(self) -> None:
        self.closed = True


def _ok(value: Any) -> bool:
    return not (isinstance(value, dict) and "error" in value)


def nvml_json_form(device: DeviceInfo, raw: dict[str, Any]) -> dict[str, Any]:
    """A raw reading -> the ``nvml_json`` object :func:`connectors.telemetry.parse_nvml_json`
    reads (``uuid``, ``index``, ``pci_bus_id``, ``ecc_*``, ``remapped_rows``,
    ``clocks_event_reasons`` (or ``clocks_throttle_reasons`` from the older call),
    ``pcie_replay_counter``, ``pcie_gen``, ``pcie_width``, ``pcie_gen_max``, ``pcie_width_max``
    (the link's maximum, nvmlDeviceGetMaxPcieLinkGeneration/Width), ``temperature_gpu_c``, ``power_mw``,
    ``retired_pages_pending``); calls that failed are left out."""
    out: dict[str, Any] = {"uuid": device.uuid, "index": device.index, "pci_bus_id": device.pci_bus_id}
    ecc = raw.get("nvmlDeviceGetTotalEccErrors") or {}
    if _ok(ecc):
        for key, (_, _, name) in ECC_KEYS.items():
            if key in ecc and _ok(ecc[key]):
                out[name] = ecc[key]
    for call, name in CALLS.items():
        if call in raw and _ok(raw[call]):
            out[name] = raw[call]
    if _REASON_CALLS[0] in raw and _ok(raw[_REASON_CALLS[0]]):
        out["clocks_event_reasons"] = raw[_REASON_CALLS[0]]
    elif _REASON_CALLS[1] in raw and _ok(raw[_REASON_CALLS[1]]):
        out["clocks_throttle_reasons"] = raw[_REASON_CALLS[1]]
    return out


def _errors(raw: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """error class -> (the NVML call, its text), for the errors worth reporting."""
    found: dict[str, tuple[str, str]] = {}
    items: list[tuple[str, Any]] = []
    for call, value in raw.items():
        if call == "nvmlDeviceGetTotalEccErrors" and isinstance(value, dict) and "error" not in value:
            items += [(call, v) for v in value.values()]
        else:
            items.append((call, value))
    for call, value in items:
        if isinstance(value, dict) and value.get("error") and value["error"] not in QUIET_ERRORS:
            found.setdefault(str(value["error"]), (call, str(value.get("text", ""))))
    return found


class NvmlConnector:
    """Polls NVML through ``readings`` (:class:`Readings`) into Observations (see the module
    docstring).

    ``host``: the node's name (default: this machine's). ``cluster``, ``workload_id``: copied into
    every Observation. ``cursor``: where the last published state is loaded from (the runner
    saves :meth:`checkpoint`). ``interval_s``: seconds between two readings of the GPUs;
    ``follow``: each :meth:`poll` waits for XID events until the next reading is due (else it
    takes what is queued). ``heartbeat_s``: publish an unchanged reading again after this many
    seconds (0: never). ``clock``: monotonic seconds (tests). Raises ``CursorError`` (from the
    store) for a corrupt cursor."""

    def __init__(self, readings: Readings, *, cursor: CursorStore | None, host: str | None = None,
                 cluster: str = "", workload_id: str | None = None, interval_s: float = 10.0,
                 follow: bool = False, heartbeat_s: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.readings = readings
        self.cursor = cursor
        self.host = host or socket.gethostname()
        self.cluster = cluster
        self.workload_id = workload_id
        self.interval_s = interval_s
        self.follow = follow
        #: seconds the runner waits between polls: a following poll waits for XID events itself
        self.wait_s = 0.05
        self.heartbeat_s = heartbeat_s
        self._clock = clock
        self.versions = readings.versions()
        self.devices = {d.index: d for d in readings.devices()}
        saved = cursor.load() if cursor is not None else {}
        self._state: dict[str, dict[str, Any]] = {u: dict(v) for u, v in (saved.get("gpus") or {}).items()
                                                  if isinstance(v, dict)}
        self._saved = json.loads(json.dumps(self._state))
        self._last_sent: dict[str, float] = {}  # uuid -> monotonic time of its last published reading
        self._next_read = float("-inf")
        self._batch: list[Observation] = []  # the records of the last poll, not yet confirmed
        self._replay = False
        self.ctx = TimeContext(year=time.gmtime().tm_year)
        self.readings_taken = 0
        self.published = {"telemetry": 0, "xid": 0, "error": 0}

    # -- Source ---------------------------------------------------------------------------

    def poll(self) -> list[Observation]:
        """A reading of every GPU when one is due (published where it changed), and the XID
        events received (in follow mode waiting for them until the next reading is due)."""
        if self._replay:  # the last batch was not delivered: the same records again
            self._replay = False
            return list(self._batch)
        out: list[Observation] = []
        if self._clock() >= self._next_read:
            self._next_read = self._clock() + self.interval_s
            for reading in self.readings.sample():
                out += self._reading(reading)
        # at most a second at a time, so a stop request is seen soon
        wait_ms = int(min(1.0, max(0.0, self._next_read - self._clock())) * 1000) if self.follow else 0
        for event in self.readings.wait_xid(wait_ms):
            out.append(self._xid(event))
        self._batch = out
        return out

    def checkpoint(self) -> dict[str, Any]:
        """``{"gpus": {uuid: {"metric": {watched metrics}, "errors": [classes]}}}`` after the last poll."""
        self._saved = json.loads(json.dumps(self._state))
        self._batch = []
        return {"gpus": json.loads(json.dumps(self._state))}

    def rewind(self) -> None:
        """The last poll's records were not delivered: the next poll returns them again (same ids)."""
        self._replay = bool(self._batch)

    def coverage(self) -> list[CoverageEntry]:
        """One entry for the node's NVML: readings taken, records published by kind."""
        p = self.published
        detail = (f"driver {self.versions.get('driver')}, {len(self.devices)} GPUs, {self.readings_taken} readings; "
                  f"published {p['telemetry']} telemetry, {p['xid']} XID, {p['error']} NVML error records")
        return [CoverageEntry(source=f"nvml:{self.host}", status="present" if self.readings_taken else "empty",
                              records=sum(p.values()), detail=detail)]

    def close(self) -> None:
        """Release NVML."""
        self.readings.close()

    # -- records --------------------------------------------------------------------------

    def _gpu(self, index: int) -> tuple[DeviceInfo, GpuRef]:
        dev = self.devices.get(index) or DeviceInfo(index, f"index-{index}", "")
        return dev, GpuRef(index=dev.index, uuid=dev.uuid if dev.uuid.startswith("GPU-") else None,
                           pci_bus_id=normalise_pci(dev.pci_bus_id))

    def _obs(self, **kw: Any) -> Observation:
        return Observation(source=Source(connector="nvml", instance=self.host), host=self.host, cluster=self.cluster,
                           workload_id=self.workload_id, position=Position(), **kw).with_id()

    def _reading(self, reading: Reading) -> list[Observation]:
        self.readings_taken += 1
        dev, gpu = self._gpu(reading.index)
        state = self._state.setdefault(dev.uuid, {})
        out: list[Observation] = []
        errors = _errors(reading.raw)
        reported = set(state.get("errors") or ())
        for cls, (call, text) in sorted(errors.items()):
            if cls in reported:
                continue
            self.published["error"] += 1
            out.append(self._obs(kind="log_line", observed_at=reading.at_ns, time_source="line",
                                 time_quality=TIME_QUALITY_EXACT, gpu=gpu, format="nvml_error",
                                 body=f"NVML {call} on GPU {dev.index} ({gpu.pci_bus_id}): pynvml.{cls}: {text}",
                                 attributes={"nvml_call": call, "nvml_error": cls}))
        state["errors"] = sorted(errors)
        samples = parse_nvml_json(json.dumps(nvml_json_form(dev, reading.raw)), self.ctx)
        if not samples or not samples[0].metric:
            return out
        sample = samples[0]
        sample.format = "nvml"
        watched = {k: sample.metric[k] for k in WATCHED if k in sample.metric}
        now = self._clock()
        # a reading restored from the cursor counts as sent now (a restart is no heartbeat)
        last = self._last_sent.setdefault(dev.uuid, now if "metric" in state else float("-inf"))
        due = self.heartbeat_s > 0 and now - last >= self.heartbeat_s
        if watched == state.get("metric") and not due:
            return out
        state["metric"] = watched
        self._last_sent[dev.uuid] = now
        self.published["telemetry"] += 1
        attributes = {"name": dev.name} if dev.name else {}
        if self.versions.get("driver"):
            attributes["driver_version"] = self.versions["driver"]
        out.append(self._obs(kind="telemetry", observed_at=reading.at_ns, time_source="line",
                             time_quality=TIME_QUALITY_EXACT, gpu=gpu, format="nvml", body=sample.summary,
                             metric=dict(sample.metric), attributes=attributes))
        return out

    def _xid(self, event: XidEvent) -> Observation:
        dev, gpu = self._gpu(event.index)
        where = f"PCI:{gpu.pci_bus_id}"
        if event.gpu_instance_id != NO_INSTANCE:
            where += f" GPU-I:{event.gpu_instance_id:02d}"
            if event.compute_instance_id != NO_INSTANCE:
                where += f" GPU-CI:{event.compute_instance_id:02d}"
        self.published["xid"] += 1
        attributes: dict[str, Any] = {"xid": event.xid, "event_type": XID_CRITICAL_ERROR, "nvml_call": "nvmlEventSetWait_v2"}
        if event.gpu_instance_id != NO_INSTANCE:
            attributes["gpu_instance_id"] = event.gpu_instance_id
        if event.compute_instance_id != NO_INSTANCE:
            attributes["compute_instance_id"] = event.compute_instance_id
        return self._obs(kind="log_line", observed_at=event.at_ns, time_source="transport",
                         time_quality=TIME_QUALITY_SECONDS, gpu=gpu, format="nvml_event",
                         body=f"NVRM: Xid ({where}): {event.xid}, NVML XID event on GPU {dev.index}",
                         attributes=attributes)


# -- CLI ------------------------------------------------------------------------------------

@connector(interval=10.0, cursor=".state/cursors/nvml.json", errors=(NvmlUnavailable,))
def connect_nvml_cli(
    opts: Shared,
    heartbeat_s: Annotated[float, typer.Option("--heartbeat-s", min=0.0, help="publish an unchanged reading again after this many seconds (0: never)")] = 300.0,
    xid_events: Annotated[bool, typer.Option("--xid-events/--no-xid-events", help="publish NVML XID critical error events (turn off when the kernel log of this node is read too, so an XID is not counted twice)")] = True,
    host: Annotated[str | None, typer.Option(help="node name (default: this machine's)")] = None,
    cluster: Annotated[str, typer.Option(help="cluster name")] = "",
    workload: Annotated[str | None, typer.Option(help="workload id to attach")] = None,
) -> Generator[NvmlConnector, Any, None]:
    """Node agent: poll this machine's GPUs through NVML and publish ECC counts, remapped rows, clocks event reasons, PCIe replays and XID events (key = host).

    Readings carry the metric names of the nvidia-smi parsers; a GPU's reading is published when a fault counter or flag changed (and every --heartbeat-s). XID critical error events are published as they arrive, in the driver's Xid line form; with --follow a poll waits for them until the next reading (every --interval seconds) is due. Without an NVIDIA driver (or GPU) it exits 2 with one line on stderr, before connecting to Kafka. With --follow a failed delivery is logged and retried with the same records."""
    readings = PynvmlReadings(xid_events=xid_events)
    try:
        conn = NvmlConnector(readings, cursor=opts.cursor_store(), host=host, cluster=cluster, workload_id=workload,
                             interval_s=opts.interval_s, follow=opts.follow, heartbeat_s=heartbeat_s)
    except BaseException:
        readings.close()
        raise
    done = yield conn
    typer.echo(f"published {done.sent} records of {len(conn.devices)} GPUs on {conn.host} to {opts.topic}", err=True)
