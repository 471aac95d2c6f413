"""Code hooks of the CUDA / NVML / nvidia-smi / device-plugin rules (``cuda.yaml``).

The rules only find a *framing* (``CUDA error: ...``, ``Cuda failure 700 '...'``,
``CUDADriverError: CUDA_ERROR_X: ...``, ``Failed to initialize NVML: ...``); these hooks look
the printed error up in two vendor tables and fill the attributes:

* ``cuda-errors.csv`` (next to this file): one row per ``cudaError_t`` / ``CUresult`` code,
  CUDA 11.x - 13.x -- ``errno`` (the enum value; runtime and driver share it since CUDA 10.1),
  ``runtime_enum`` (``cudaErrorIllegalAddress``), ``driver_enum`` (``CUDA_ERROR_ILLEGAL_ADDRESS``),
  ``error`` (short snake_case name, the ``cuda.error`` attribute the causal rules key on),
  ``fault_class`` (gpu_hardware | gpu_software | config | app | unknown), ``text`` (the
  ``cudaGetErrorString`` / ``cuGetErrorString`` description) and ``alt_texts`` (``|``-separated
  wordings of other releases or of the documentation). Sources: CUDA ``driver_types.h`` enum
  ``cudaError`` and ``cuda.h`` enum ``cudaError_enum`` (CUDA 12.8 / 13.0 values), description
  strings as libcudart / libcuda return them (cross-checked in several public re-implementations
  of ``cudaGetErrorString`` / ``cuGetErrorString``).
* :data:`NVML_ERRORS`: ``nvmlReturn_t`` (``nvml.h``, NVML 12.x/13.x: NVML_SUCCESS = 0 ...
  NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30, NVML_ERROR_UNKNOWN = 999) with the
  ``nvmlErrorString`` texts (as DCGM's ``nvml_error_strings.h`` mirrors them) and the older
  texts the Python bindings (``pynvml`` / nvidia-ml-py ``NVMLError._errcode_to_string``) print.

Why the lookup is strict: an application may put a CUDA error string into its own message
(``raise RuntimeError("CUDA error: an illegal memory access was encountered (simulated in rank
1)")``, h200-2026-11/raise.py). CUDA's own framings end the description where the library
ends it (end of line, a closing quote, or a known trailer such as PyTorch's ``CUDA kernel errors
might be asynchronously reported``), so a description is only accepted when the WHOLE text the
framing holds is one of the vendor's strings (after removing those trailers); anything else
(``... (simulated in rank 1)``, a quoted source line echoed in a traceback) gives no event.
Framings that carry the enum name or number as well (CuPy, XLA, NCCL, HPL) are trusted with a
prefix match.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from correlators.rules.code import Draft, hook, to_int

if TYPE_CHECKING:  # pragma: no cover
    from correlators.rules import Rule
    from schemas.records import Observation

CUDA_TABLE_PATH = Path(__file__).parent / "cuda-errors.csv"


@dataclass(frozen=True, slots=True)
class CudaError:
    """One row of ``cuda-errors.csv``."""

    errno: int
    runtime_enum: str
    driver_enum: str
    error: str
    fault_class: str
    text: str
    alt_texts: tuple[str, ...]

    @property
    def name(self) -> str:
        """The runtime enum name (``cudaErrorXxx``), or the driver's when the runtime has none."""
        return self.runtime_enum or self.driver_enum


def _load_cuda_table() -> tuple[CudaError, ...]:
    with CUDA_TABLE_PATH.open(newline="", encoding="utf-8") as fh:
        return tuple(
            CudaError(
                errno=int(r["errno"]), runtime_enum=r["runtime_enum"], driver_enum=r["driver_enum"],
                error=r["error"], fault_class=r["fault_class"], text=r["text"],
                alt_texts=tuple(t for t in r["alt_texts"].split("|") if t),
            )
            for r in csv.DictReader(fh)
        )


CUDA_ERRORS: tuple[CudaError, ...] = _load_cuda_table()
_BY_ERRNO: dict[int, CudaError] = {}
_BY_NAME: dict[str, CudaError] = {}
_BY_TEXT: dict[str, CudaError] = {}
for _row in CUDA_ERRORS:
    _BY_ERRNO.setdefault(_row.errno, _row)
    for _n in (_row.runtime_enum, _row.driver_enum):
        if _n:
            _BY_NAME[_n] = _row
    for _t in (_row.text, *_row.alt_texts):
        _BY_TEXT.setdefault(_t.lower(), _row)  # first row wins (200 before 300 for "device kernel image is invalid")
#: known descriptions, longest first (prefix matching prefers the most specific one)
_TEXTS_LONGEST_FIRST = sorted(_BY_TEXT, key=len, reverse=True)

# What a framework prints after CUDA's description on the same line when a collector has joined
# the lines of one message (PyTorch c10 get_cuda_check_suffix / get_cuda_error_help), or the
# source location a wrapper appends (THC "... at /path/file.cu:26", TensorRT-LLM "(/path:123)").
_TRAILERS = re.compile(
    r"\s*(?:$|CUDA kernel errors might be|Search for `|Compile with `|For debugging consider"
    r"|at \S+:\d+|\(\S+:\d+\)|\(Triggered internally at|;\s)",
    re.IGNORECASE,
)


def cuda_lookup(text: str | None = None, name: str | None = None, errno: int | None = None,
                strict: bool = True) -> CudaError | None:
    """The table row for a printed CUDA error: by enum ``name`` (runtime ``cudaErrorXxx`` or
    driver ``CUDA_ERROR_XXX``), else by ``errno`` (int), else by description ``text``.

    ``strict``: ``text`` must be exactly a vendor description, optionally followed by a known
    trailer (:data:`_TRAILERS`); otherwise any known description that ``text`` starts with
    matches (for framings that also print the name or number). Returns None when nothing fits.
    """
    if name and name in _BY_NAME:
        return _BY_NAME[name]
    if errno is not None and errno in _BY_ERRNO:
        return _BY_ERRNO[errno]
    if text is None:
        return None
    t = text.strip().lower()
    row = _BY_TEXT.get(t)
    if row is not None:
        return row
    for known in _TEXTS_LONGEST_FIRST:
        if t.startswith(known):
            rest = t[len(known):]
            if not strict or _TRAILERS.match(rest):
                return _BY_TEXT[known]
    return None


def _fill_cuda(draft: Draft, row: CudaError | None, text: str | None) -> None:
    a = draft.attributes
    if row is None:
        a.update(error="other", fault_class="unknown")
    else:
        a.update(error=row.error, cuda_error=row.name, cuda_errno=row.errno, fault_class=row.fault_class)
        if row.driver_enum:
            a["driver_error"] = row.driver_enum
    if text:
        a["text"] = text.strip()[:300]


#: ProcessGroupNCCL's log prefix on its watchdog / abort lines (torch/csrc/distributed/c10d/
#: ProcessGroupNCCL.cpp): "[Rank N] " (1.x-2.1), "[PG <id> Rank N] " (2.2-2.3), "[PG ID <id> PG
#: GUID <guid>(<desc>) Rank N] " (2.4+); N is the rank within that process group, the global
#: rank for the default group (PG 0, default_pg) and for the unnumbered legacy form
_PG_RANK = re.compile(r"\[(?:PG (?:ID )?(?P<pg>\d+) )?(?:PG GUID (?P<guid>[^\]\s]+) )?Rank (?P<rank>\d+)\]")


def pg_global_rank(line: str) -> int | None:
    """The global rank a ProcessGroupNCCL prefix in ``line`` states (the last one before the
    text that matters), or None for a sub-group's rank or no prefix."""
    found = list(_PG_RANK.finditer(line))
    if not found:
        return None
    m = found[-1]
    if m["pg"] not in (None, "0") and "default_pg" not in (m["guid"] or ""):
        return None
    return int(m["rank"])


@hook("cuda_error")
def cuda_error(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """Resolve a CUDA error framing into ``cuda.error`` attributes.

    Reads (and removes) the rule's private attributes ``_desc`` (printed description),
    ``_name`` (enum name as printed), ``_errno`` (number as printed) and ``_strict``
    (constant: True unless the framing itself proves CUDA printed it, e.g. NCCL's ``Cuda
    failure`` and nccl-tests' ``Test CUDA failure``). Sets ``error``, ``cuda_error`` (runtime
    enum name, ``cudaErrorIllegalAddress``), ``driver_error`` (``CUDA_ERROR_ILLEGAL_ADDRESS``
    when the driver API has the code), ``cuda_errno`` (int), ``fault_class`` and ``text`` (the
    description, <= 300 chars). A strict framing whose text is not a vendor description gives
    no event (application text); a lenient one gives ``error: other``."""
    a = draft.attributes
    desc = a.pop("_desc", None)
    name = a.pop("_name", None)
    errno = to_int(a.pop("_errno", None))
    strict = bool(a.pop("_strict", True))
    if name is None and errno is None and desc is None:
        return []
    row = None
    if name:
        row = _BY_NAME.get(name)
        if row is None:
            return []  # an identifier that looks like an enum but is none (cudaErrorFoo)
    if row is None and desc is not None:
        # a printed number or name already proves CUDA printed the line: prefix match
        row = cuda_lookup(text=desc, strict=strict and errno is None)
    if row is None and errno is not None:
        row = _BY_ERRNO.get(errno)
    if row is None and strict:
        return []
    _fill_cuda(draft, row, desc)
    site = a.get("site")
    if isinstance(site, str):
        # NCCL call site "transport/nvls.cc:223" -> nccl_transport "nvls" (p2p, shm, net_ib, ...)
        m = re.match(r"(?:.*/)?transport/(\w+)\.\w+:\d+$", site)
        if m:
            a["nccl_transport"] = m.group(1)
    if errno is not None and (row is None or row.errno != errno):
        # CUDA <= 10.0 numbered some codes differently (device-side assert was 59)
        a["printed_errno"] = errno
        a.setdefault("cuda_errno", errno)
    if draft.rank is None and match is not None:
        # "[Rank 1] NCCL watchdog thread terminated with exception: CUDA error: ...": the
        # watchdog checks its own process's device, so the CUDA error is that rank's
        body = obs.body or ""
        line_start = body.rfind("\n", 0, match.start()) + 1
        rank = pg_global_rank(body[line_start:match.start()])
        if rank is not None:
            draft.rank = rank
    return [draft]


# --------------------------------------------------------------------------- cuda libraries

#: library status names -> (error, fault_class). cuBLAS ``cublasStatus_t`` (cublas_api.h),
#: cuDNN ``cudnnStatus_t`` (cudnn_ops / cudnn_graph.h, v8 and v9 names), cuFFT ``cufftResult``,
#: cuSOLVER / cuSPARSE / cuRAND status enums. Unlisted names: fault_class app.
_LIB_CLASS = {
    "ALLOC_FAILED": ("out_of_memory", "app"),
    "NOT_INITIALIZED": ("not_initialized", "app"),
    "EXECUTION_FAILED": ("execution_failed", "app"),
    "INTERNAL_ERROR": ("internal_error", "app"),
    "ARCH_MISMATCH": ("arch_mismatch", "config"),
    "VERSION_MISMATCH": ("version_mismatch", "config"),
    "SUBLIBRARY_VERSION_MISMATCH": ("version_mismatch", "config"),
    "LICENSE_ERROR": ("license_error", "config"),
    "MAPPING_ERROR": ("mapping_error", "app"),
    "INVALID_VALUE": ("invalid_value", "app"),
    "BAD_PARAM": ("invalid_value", "app"),
    "NOT_SUPPORTED": ("not_supported", "app"),
    "RUNTIME_FP_OVERFLOW": ("fp_overflow", "app"),
}


@hook("cuda_library_error")
def cuda_library_error(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``CUBLAS_STATUS_EXECUTION_FAILED`` / ``CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH`` /
    ``CUFFT_INTERNAL_ERROR`` -> ``library`` (cublas, cudnn, cufft, cusolver, cusparse,
    curand), ``status`` (the enum name), ``error`` (short: execution_failed, out_of_memory,
    ...) and ``fault_class``. ``*_SUCCESS`` gives no event."""
    a = draft.attributes
    status = a.get("status", "")
    lib, _, rest = status.partition("_")
    rest = rest[len("STATUS_"):] if rest.startswith("STATUS_") else rest
    if not rest or rest == "SUCCESS":
        return []
    a["library"] = lib.lower()
    key = next((k for k in _LIB_CLASS if rest == k or rest.startswith(k + "_")), None)
    if key is None and rest.startswith("BAD_PARAM"):
        key = "BAD_PARAM"
    error, fault_class = _LIB_CLASS.get(key or "", (rest.lower(), "app"))
    a.update(error=error, fault_class=fault_class)
    return [draft]


# --------------------------------------------------------------------------- NVML

#: nvmlReturn_t: enum name -> (value, short error, nvmlErrorString texts of current and older
#: releases). The first text is what libnvidia-ml returns today (DCGM nvml_error_strings.h);
#: the others are the Python bindings' fallback strings.
NVML_ERRORS: dict[str, tuple[int, str, tuple[str, ...]]] = {
    "NVML_ERROR_UNINITIALIZED": (1, "uninitialized", ("Uninitialized",)),
    "NVML_ERROR_INVALID_ARGUMENT": (2, "invalid_argument", ("Invalid Argument",)),
    "NVML_ERROR_NOT_SUPPORTED": (3, "not_supported", ("Not Supported",)),
    "NVML_ERROR_NO_PERMISSION": (4, "no_permission", ("Insufficient Permissions",)),
    "NVML_ERROR_ALREADY_INITIALIZED": (5, "already_initialized", ("Already Initialized",)),
    "NVML_ERROR_NOT_FOUND": (6, "not_found", ("Not Found",)),
    "NVML_ERROR_INSUFFICIENT_SIZE": (7, "insufficient_size", ("Insufficient Size",)),
    "NVML_ERROR_INSUFFICIENT_POWER": (8, "insufficient_power", ("Insufficient External Power",)),
    "NVML_ERROR_DRIVER_NOT_LOADED": (9, "driver_not_loaded", ("Driver Not Loaded",)),
    "NVML_ERROR_TIMEOUT": (10, "timeout", ("Timeout",)),
    "NVML_ERROR_IRQ_ISSUE": (11, "irq_issue", ("Interrupt Request Issue",)),
    "NVML_ERROR_LIBRARY_NOT_FOUND": (12, "library_not_found", ("NVML Shared Library Not Found",
                                                               "could not load NVML library")),
    "NVML_ERROR_FUNCTION_NOT_FOUND": (13, "function_not_found", ("Function Not Found",)),
    "NVML_ERROR_CORRUPTED_INFOROM": (14, "corrupted_inforom", ("Corrupted infoROM",)),
    "NVML_ERROR_GPU_IS_LOST": (15, "gpu_is_lost", ("GPU is lost",)),
    "NVML_ERROR_RESET_REQUIRED": (16, "reset_required", ("GPU requires reset", "GPU requires restart")),
    "NVML_ERROR_OPERATING_SYSTEM": (17, "operating_system", (
        "GPU access blocked by the operating system", "The operating system has blocked the request.")),
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": (18, "driver_mismatch", (
        "Driver/library version mismatch", "RM has detected an NVML/RM version mismatch.")),
    "NVML_ERROR_IN_USE": (19, "in_use", ("In use by another client", "The GPU is currently in use")),
    "NVML_ERROR_MEMORY": (20, "memory", ("Insufficient Memory",)),
    "NVML_ERROR_NO_DATA": (21, "no_data", ("No data",)),
    "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED": (22, "vgpu_ecc_not_supported", (
        "Requested vgpu operation not available with ECC enabled",)),
    "NVML_ERROR_INSUFFICIENT_RESOURCES": (23, "insufficient_resources", ("Insufficient Resources",)),
    "NVML_ERROR_FREQ_NOT_SUPPORTED": (24, "freq_not_supported", ()),
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH": (25, "argument_version_mismatch", ()),
    "NVML_ERROR_DEPRECATED": (26, "deprecated", ()),
    "NVML_ERROR_NOT_READY": (27, "not_ready", ()),
    "NVML_ERROR_GPU_NOT_FOUND": (28, "gpu_not_found", ()),
    "NVML_ERROR_INVALID_STATE": (29, "invalid_state", ()),
    "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED": (30, "reset_type_not_supported", ()),
    "NVML_ERROR_UNKNOWN": (999, "unknown", ("Unknown Error",)),
}
_NVML_BY_TEXT = {t.lower().rstrip("."): name for name, (_, _, texts) in NVML_ERRORS.items() for t in texts}
_NVML_TEXTS_LONGEST_FIRST = sorted(_NVML_BY_TEXT, key=len, reverse=True)
#: pynvml exception class suffix (``NVMLError_GpuIsLost``) -> enum name
_NVML_BY_CLASS = {
    "".join(p.capitalize() for p in name[len("NVML_ERROR_"):].split("_")): name for name in NVML_ERRORS
}
#: codes that a monitoring client meets on healthy GPUs (an unsupported query, no samples yet):
#: from a Python-binding exception they are no fault
_NVML_BENIGN = {"NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_DATA", "NVML_ERROR_INSUFFICIENT_SIZE",
                "NVML_ERROR_ALREADY_INITIALIZED", "NVML_ERROR_NOT_FOUND", "NVML_ERROR_FUNCTION_NOT_FOUND",
                "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_DEPRECATED",
                "NVML_ERROR_FREQ_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_TIMEOUT"}


def nvml_lookup(text: str | None) -> str | None:
    """The ``NVML_ERROR_*`` name for a printed NVML error: an ``nvmlErrorString`` text (a longer
    text starting with one also matches: nvidia-smi's ``GPU is lost.  Reboot the system to
    recover this GPU``), or go-nvml's fallback name (``ERROR_GPU_IS_LOST``), or the enum name."""
    if not text:
        return None
    t = text.strip().rstrip(".")
    up = t.upper()
    if up in NVML_ERRORS:
        return up
    if "NVML_" + up in NVML_ERRORS:
        return "NVML_" + up
    low = t.lower()
    if low in _NVML_BY_TEXT:
        return _NVML_BY_TEXT[low]
    for known in _NVML_TEXTS_LONGEST_FIRST:
        if low.startswith(known) and not low[len(known):len(known) + 1].isalnum():
            return _NVML_BY_TEXT[known]
    return None


def _fill_nvml(draft: Draft, name: str | None) -> None:
    a = draft.attributes
    if name is None:
        a["nvml_error"] = "unrecognised"
        a.setdefault("error", "other")
        return
    value, short, _ = NVML_ERRORS[name]
    a.update(nvml_error=name, nvml_errno=value)
    a.setdefault("error", short)


@hook("nvml_error")
def nvml_error(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """Resolve an NVML framing into ``nvml.error`` / ``gpu.unhealthy`` attributes.

    Reads the private attributes ``_text`` (the printed error), ``_class`` (a pynvml exception
    class suffix), ``_name`` (an enum name as printed) and ``_strict`` (constant; an unknown
    text then gives no event). Sets ``nvml_error`` (``NVML_ERROR_GPU_IS_LOST``), ``nvml_errno``
    (int), ``error`` (short: gpu_is_lost, driver_mismatch, unknown, ...) and ``text``. A
    pynvml exception of a benign code (Not Supported, No data, ...) gives no event."""
    a = draft.attributes
    text = a.pop("_text", None)
    cls = a.pop("_class", None)
    name = a.pop("_name", None)
    strict = bool(a.pop("_strict", False))
    resolved = None
    if cls is not None:
        resolved = _NVML_BY_CLASS.get(cls)
        if resolved is None or resolved in _NVML_BENIGN or nvml_lookup(text) != resolved:
            return []
    resolved = resolved or nvml_lookup(name) or nvml_lookup(text)
    if resolved is None and strict:
        return []
    _fill_nvml(draft, resolved)
    if text:
        a["text"] = text.strip()[:300]
    return [draft]
