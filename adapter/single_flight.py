"""Answers reused for a while, with one fetch in flight per key: the cache in front of Prometheus and of the reviews.

``cachetools`` caches are synchronous, so this keeps two maps: finished answers in an ``LRUCache``, each with its own
expiry (an allowed review may keep longer than a denied one), and running fetches as tasks. Concurrent identical
requests await the same task; a caller that gives up (cancelled) does not cancel the fetch for the others. Failures
are never kept: the next request tries again. A time to live of 0 keeps nothing and only shares fetches in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, Literal, TypeVar

from cachetools import LRUCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# hit: answered from memory; shared: joined a fetch in flight; miss: started the fetch
Outcome = Literal["hit", "shared", "miss"]


class SingleFlightCache(Generic[K, V]):
    def __init__(
        self,
        ttl: float | Callable[[V], float],
        maxsize: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        on_outcome: Callable[[Outcome], None] = lambda _: None,
    ) -> None:
        """``ttl``: seconds an answer keeps, or a function of the answer giving them."""
        if callable(ttl):
            self._ttl_of = ttl
        else:
            seconds = ttl
            self._ttl_of = lambda _answer: seconds
        self._clock = clock
        self._on_outcome = on_outcome
        self._answers: LRUCache[K, tuple[float, V]] = LRUCache(maxsize)
        self._inflight: dict[K, asyncio.Task[V]] = {}

    async def get(self, key: K, fetch: Callable[[], Awaitable[V]]) -> tuple[V, Outcome]:
        """The answer for ``key`` and how it was found."""
        kept = self._answers.get(key)
        if kept is not None:
            if kept[0] > self._clock():
                self._on_outcome("hit")
                return kept[1], "hit"
            self._answers.pop(key, None)
        task = self._inflight.get(key)
        outcome: Outcome = "shared"
        if task is None:
            outcome = "miss"
            task = asyncio.ensure_future(self._fill(key, fetch))
            # a fetch whose every waiter was cancelled still finishes; retrieving its exception here keeps
            # asyncio from reporting it as never retrieved
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._inflight[key] = task
        self._on_outcome(outcome)
        return await asyncio.shield(task), outcome

    async def _fill(self, key: K, fetch: Callable[[], Awaitable[V]]) -> V:
        try:
            answer = await fetch()
            ttl = self._ttl_of(answer)
            if ttl > 0:
                self._answers[key] = (self._clock() + ttl, answer)
            return answer
        finally:
            self._inflight.pop(key, None)

    def cancel(self) -> None:
        """Stop every fetch in flight (their waiters see CancelledError); kept answers stay."""
        for task in self._inflight.values():
            task.cancel()

    def __len__(self) -> int:
        return len(self._answers)
