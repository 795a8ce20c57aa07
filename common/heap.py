"""Hand memory freed by closed connections back to the system.

Each TLS connection's state (OpenSSL's and the Python objects around it) is a few dozen small allocations from the C
heap. Once the connection closes they are free, but glibc keeps free memory inside its heap for reuse and returns
only what lies at the heap's top; after a burst of connections the process stays as large as at the burst's peak
(measured: docs/reliability.md). ``malloc_trim`` returns the free pages wherever they lie.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable


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
