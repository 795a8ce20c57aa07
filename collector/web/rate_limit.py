"""``rate_limit``: a token bucket, as Go's ``rate.NewLimiter(rate.Every(interval), burst).Allow()`` that
exporter-toolkit puts before every request (refused with 429)."""

from __future__ import annotations

import time
from collections.abc import Callable

from collector.web.config import RateLimit


class TokenBucket:
    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._tokens = float(limit.burst)  # full at start, as Go's
        self._last = clock()

    def allow(self) -> bool:
        now = self._clock()
        self._tokens = min(self.limit.burst, self._tokens + (now - self._last) / self.limit.interval)
        self._last = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
