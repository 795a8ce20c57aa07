"""Review answers reused for a short time, with one review in flight per key.

Kubernetes API servers cache TokenReview and SubjectAccessReview answers (10 s by default) because every request
needs both. Allowed and denied answers may keep for different times, so each entry carries its own expiry. Failures
are never cached: the next request asks again. Concurrent identical requests wait for the same review; a caller that
gives up (cancelled) does not cancel it for the others.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from cachetools import LRUCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReviewCache(Generic[K, V]):
    def __init__(
        self,
        ttl_of: Callable[[V], float],
        maxsize: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_of = ttl_of
        self.clock = clock
        self._answers: LRUCache[K, tuple[float, V]] = LRUCache(maxsize)
        self._inflight: dict[K, asyncio.Task[V]] = {}

    async def get(self, key: K, review: Callable[[], Awaitable[V]]) -> tuple[V, bool]:
        """The answer for ``key``, and whether it came from the cache."""
        hit = self._answers.get(key)
        if hit is not None:
            if hit[0] > self.clock():
                return hit[1], True
            self._answers.pop(key, None)
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._fill(key, review))
            # a review whose every waiter was cancelled still finishes; retrieving its exception here keeps
            # asyncio from reporting it as never retrieved
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._inflight[key] = task
        return await asyncio.shield(task), False

    async def _fill(self, key: K, review: Callable[[], Awaitable[V]]) -> V:
        try:
            answer = await review()
            ttl = self.ttl_of(answer)
            if ttl > 0:
                self._answers[key] = (self.clock() + ttl, answer)
            return answer
        finally:
            self._inflight.pop(key, None)

    def __len__(self) -> int:
        return len(self._answers)
