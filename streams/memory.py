"""Giving freed memory back to the operating system after a burst.

A worker's heap grows while it handles a burst (a batch of thousands of records, a verdict
over a 16,384-rank job's events) and most of it is freed afterwards, but glibc's allocator
keeps freed pages mapped in its arenas: measured on the stream benchmark's bulk segment, a
whole worker stayed at ~340 MiB after the burst from ~150 MiB at start, ~100 MiB of it free
heap pages that only ``malloc_trim`` returns. :func:`release_memory` calls it (through ctypes);
the worker calls it on a timer (``streams.app``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("faultstream.worker")

_TRIM: object | None = None  # the C function, False where there is none


def _malloc_trim() -> object | None:
    global _TRIM
    if _TRIM is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _TRIM = libc.malloc_trim
            _TRIM.argtypes, _TRIM.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
            _TRIM = False
    return _TRIM or None


def release_memory() -> bool:
    """Return the free pages of the C heap to the operating system (glibc's
    ``malloc_trim(0)``; about 20 ms on a 300 MiB heap, the caller's thread waits). Returns
    True when memory was released, False when none was or the C library has no
    ``malloc_trim``. Never raises."""
    trim = _malloc_trim()
    if trim is None:
        return False
    try:
        return bool(trim(0))
    except Exception:  # noqa: BLE001 -- a best-effort call: never take the worker down
        log.debug("malloc_trim failed", exc_info=True)
        return False
