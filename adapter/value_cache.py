"""Query results cached for a short TTL, keyed by the PromQL text, with one query in flight per key.

``cachetools`` caches are synchronous, so this class keeps two maps: finished values in a ``TTLCache`` and running
fetches as tasks. Concurrent identical requests await the same task; a caller that gives up (cancelled) does not
cancel the fetch for the others. Failures are not cached: the next request tries again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from cachetools import TTLCache

from adapter.self_metrics import AdapterMetrics

T = TypeVar("T")


class QueryCache(Generic[T]):
    def __init__(
        self,
        ttl: float,
        metrics: AdapterMetrics,
        maxsize: int = 10_000,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.metrics = metrics
        self._values: TTLCache[str, T] | None = TTLCache(maxsize, ttl, timer) if ttl > 0 else None
        self._inflight: dict[str, asyncio.Task[T]] = {}

    async def get(self, key: str, fetch: Callable[[], Awaitable[T]]) -> tuple[T, str]:
        """The value for ``key`` and how it was found: ``hit``, ``shared`` (joined a running fetch) or ``miss``."""
        if self._values is not None:
            try:
                value = self._values[key]
            except KeyError:
                pass
            else:
                self.metrics.cache_requests.labels("hit").inc()
                return value, "hit"
        task = self._inflight.get(key)
        outcome = "shared"
        if task is None:
            outcome = "miss"
            task = asyncio.ensure_future(self._fill(key, fetch))
            # a fetch whose every waiter was cancelled still finishes; retrieving its exception here keeps
            # asyncio from reporting it as never retrieved
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._inflight[key] = task
        self.metrics.cache_requests.labels(outcome).inc()
        return await asyncio.shield(task), outcome

    async def _fill(self, key: str, fetch: Callable[[], Awaitable[T]]) -> T:
        try:
            value = await fetch()
            if self._values is not None:
                self._values[key] = value
            return value
        finally:
            self._inflight.pop(key, None)

    def __len__(self) -> int:
        return len(self._values) if self._values is not None else 0
