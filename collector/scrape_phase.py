"""When in each collection interval the scraper comes, so that a cycle can finish just before it.

A cycle and a scrape each run once per interval, each at a phase of its own. When Prometheus happens to scrape
just before the cycle publishes, every scrape takes the value of the cycle before: on the H200 that added 0.9-1.0 s
to the time a load took to reach the custom metrics API (docs/results/h200-freshness.md), while another phase added
almost nothing. The collector sees the scrapes arrive; when most of them fall at one phase of the interval (a
Prometheus scraping every interval, or every 15 s at a fixed offset), the next cycle is moved so that it ends a
little before that phase. Scrapes spread over the interval (people, several scrapers at different offsets) give no
phase, and the cycles keep their own.
"""

from __future__ import annotations

import math
import threading
from collections import deque

from common.median import median

_WINDOW_SECONDS = 120.0  # scrapes older than this are forgotten: a scraper that moved is followed within it
_MAX_SCRAPES = 4096  # a bound whatever the request rate
_BINS = 50  # the interval cut in 50 (20 ms at 1 s)
_MIN_SCRAPES = 3  # at the peak phase, before it counts
_PEAK_OVER_MEDIAN = 2.0  # the peak holds at least this many times the scrapes of a median phase
MARGIN_SECONDS = 0.05  # a cycle ends this long before the scrape it is for


class ScrapePhase:
    """Scrape arrival times in (``seen``, from the server's thread); the phase most scrapes come at out (``phase``,
    from the collection thread). Times are ``time.monotonic()`` seconds."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._times: deque[float] = deque(maxlen=_MAX_SCRAPES)
        self._lock = threading.Lock()

    def seen(self, now: float) -> None:
        with self._lock:
            self._times.append(now)

    def phase(self, now: float) -> float | None:
        """The phase (seconds into the interval, 0 <= phase < interval) at which most recent scrapes arrived; None
        when there are too few or no phase stands out."""
        with self._lock:
            while self._times and self._times[0] < now - _WINDOW_SECONDS:
                self._times.popleft()
            times = list(self._times)
        if len(times) < _MIN_SCRAPES:
            return None
        width = self._interval / _BINS
        phases = [t % self._interval for t in times]
        slots = [int(p / width) % _BINS for p in phases]
        bins = [0] * _BINS
        for slot in slots:
            bins[slot] += 1
        # a phase and its two neighbours: a scraper whose arrivals straddle two bins still makes one peak
        windows = [bins[i - 1] + bins[i] + bins[(i + 1) % _BINS] for i in range(_BINS)]
        peak = max(range(_BINS), key=windows.__getitem__)
        # measured against the median phase, which clients polling at every phase (people, a bench) raise evenly
        if windows[peak] < _MIN_SCRAPES + _PEAK_OVER_MEDIAN * median(windows):
            return None
        # the mean arrival phase inside the peak's three bins, on the circle (the peak may wrap past 0)
        turn = 2 * math.pi / self._interval
        near = [
            p for p, slot in zip(phases, slots, strict=True) if min((slot - peak) % _BINS, (peak - slot) % _BINS) <= 1
        ]
        angle = math.atan2(sum(math.sin(p * turn) for p in near), sum(math.cos(p * turn) for p in near))
        return (angle / turn) % self._interval

    def wait(self, natural_start: float, duration: float, now: float) -> float:
        """How long to wait from ``now`` before the next cycle, which would start at ``natural_start`` (one interval
        after the last one) and takes about ``duration``: moved, by at most half an interval, so that it ends
        ``MARGIN_SECONDS`` before the scrapers' phase when there is one."""
        start = natural_start
        phase = self.phase(now)
        if phase is not None:
            target = (phase - MARGIN_SECONDS - duration) % self._interval
            shift = (target - natural_start % self._interval) % self._interval
            if shift > self._interval / 2:
                shift -= self._interval  # earlier rather than later
            start = natural_start + shift
        return max(0.0, start - now)
