"""Hand freed memory back to the system: after closed connections, and for large blocks as they are freed.

Each TLS connection's state (OpenSSL's and the Python objects around it) is a few dozen small allocations from the C
heap. Once the connection closes they are free, but glibc keeps free memory inside its heap for reuse and returns
only what lies at the heap's top; after a burst of connections the process stays as large as at the burst's peak
(measured: docs/reliability.md). ``malloc_trim`` returns the free pages wherever they lie.

Large blocks (the adapter's Prometheus answers: the bytes, the text decoded from them, lists of 100,000 samples) are
mapped on their own by glibc, and unmapped when freed, only until the first such block is freed: glibc then raises
its threshold to that block's size (up to 32 MiB), so later answers come from the heaps of the threads that decode
them, where freed room stays with that thread's heap and between small blocks still in use. Eight rounds of six 31 MB
answers grew from 369 to 469 MiB at their peak; with the threshold held at 1 MiB, 266 to 279
(``map_large_blocks``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

M_MMAP_THRESHOLD = -3  # mallopt's parameter, from glibc's malloc.h
LARGE_BLOCK = 1024 * 1024


def map_large_blocks(threshold: int = LARGE_BLOCK) -> bool:
    """glibc's ``mallopt(M_MMAP_THRESHOLD, threshold)``: every block of ``threshold`` bytes or more is mapped on its
    own and given back to the system when freed, the threshold no longer raised by glibc. False where the C library
    has no ``mallopt`` (musl) or refuses."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))


def _no_trim() -> None:
    """Other C libraries (musl) have no malloc_trim."""


def malloc_trim() -> Callable[[], None]:
    """glibc's ``malloc_trim(0)``, or nothing where the C library has none."""
    try:
        # the symbols already loaded into the process, the C library's among them
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return _no_trim
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def release() -> None:
        trim(0)

    return release
