"""``DCGM_EXP_XID_ERRORS_COUNT`` and ``DCGM_EXP_CLOCK_EVENTS_COUNT``: events of the last window, counted by kind.

dcgm-exporter asks DCGM for every value of a field stored in the last ``--xid-count-window-size`` (or
``--clock-events-count-window-size``) milliseconds, 5 minutes by default, and serves per GPU one series per kind
seen, its count as value, labelled ``xid="<n>"`` (or ``clock_event="power_cap"``) and ``window_size_in_ms``; a GPU
with none gets one series of value 0 without the kind label. DCGM stores an XID value per XID event, and a clock
event reasons bitmask per sample, one each collection interval (dcgm-exporter's ``-c``); a sample counts once for
each reason set in it. Here the XID events are the ones NVML delivers, and the bitmask is read each collection
cycle, so the counts mean the same at the same ``-c``.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Iterable

from collector.exposition import Labels

XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
CLOCK_EVENTS_COUNT = "DCGM_EXP_CLOCK_EVENTS_COUNT"

# NVML's clock event reason bits (the same as DCGM's) and dcgm-exporter's names for them; other bits are not counted.
CLOCK_EVENTS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "clocks_setting",
    0x4: "power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}

Samples = tuple[tuple[Labels, float], ...]


def clock_events(mask: int) -> list[int]:
    """The reasons of a clock event reasons bitmask that dcgm-exporter counts."""
    return [bit for bit in CLOCK_EVENTS if mask & bit]


class EventWindow:
    """Events of one kind on one GPU in the last ``seconds``, counted by code as they arrive and as they expire."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._events: deque[tuple[float, int]] = deque()
        self._counts: Counter[int] = Counter()

    def add(self, codes: Iterable[int]) -> None:
        now = self._clock()
        for code in codes:
            self._events.append((now, code))
            self._counts[code] += 1

    def counts(self) -> dict[int, int]:
        horizon = self._clock() - self.seconds
        while self._events and self._events[0][0] <= horizon:
            _, code = self._events.popleft()
            self._counts[code] -= 1
            if not self._counts[code]:
                del self._counts[code]
        return dict(self._counts)

    def samples(self, label: str, name: Callable[[int], str] = str) -> Samples:
        """dcgm-exporter's series for this window: one per code seen, else one 0 without the code's label."""
        window = ("window_size_in_ms", str(round(self.seconds * 1000)))
        counts = self.counts()
        if not counts:
            return (((window,), 0.0),)
        return tuple(((window, (label, name(code))), float(n)) for code, n in sorted(counts.items()))
