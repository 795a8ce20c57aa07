"""At most one log line per kind of trouble per interval: a fault that repeats every second (a garbage socket, a
scanner's malformed requests) must not fill the log, and a fault whose text varies each time (an address, a byte
count) is still the same kind. The first line of a kind is logged at once; the next says how many were left out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class LogLimit:
    def __init__(self, interval: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()  # the collector logs from several threads

    def allow(self, kind: str) -> int | None:
        """None: leave this one out. Otherwise log it, adding the returned count of lines of this kind left out."""
        now = self._clock()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval:
                self._held[kind] = self._held.get(kind, 0) + 1
                return None
            self._last[kind] = now
            return self._held.pop(kind, 0)

    def clear(self) -> None:
        """The trouble ended: its next occurrence, of any kind, is news and is logged at once."""
        with self._lock:
            self._last.clear()
            self._held.clear()


def left_out(count: int, interval: float) -> str:
    """The suffix for a line after ``count`` left out: "" when none were."""
    return f" ({count} more like it in the last {interval:g} s not logged)" if count else ""
