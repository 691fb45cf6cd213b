"""Giving the heap the worker freed back to the system.

Every batch allocates and frees tens of MB (decoded records, samples, facts and their Avro
encodings), some of it in librdkafka's threads. glibc keeps what is freed in its arenas and,
with the pieces fragmented, seldom returns it: over a 24-h backlog a worker's resident size
crept up by ~15 % while its live objects (Python's own arenas included) stayed flat.
``malloc_trim(0)`` after each commit hands the free pages back, in well under a millisecond
here, every ``checkpoint_interval_s``. Where the C library has no ``malloc_trim`` (musl,
macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource

__all__ = ["resident_mib", "trim_heap"]


def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def trim_heap() -> bool:
    """Return the free pages of the heap to the system; False where that is not possible."""
    return bool(_TRIM(0)) if _TRIM is not None else False


def resident_mib() -> tuple[float, float]:
    """(resident now, peak resident) of this process in MiB; now is 0 where ``/proc`` is absent."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    try:
        with open("/proc/self/statm", "rb") as f:
            now = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        now = 0.0
    return round(now, 1), round(peak, 1)
