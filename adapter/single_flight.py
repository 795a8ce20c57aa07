"""Answers reused for a while, with one fetch in flight per key: the cache in front of Prometheus and of the reviews.

``cachetools`` caches are synchronous, so this keeps two maps: finished answers in a ``TLRUCache``, each with its own
expiry (an allowed review may keep longer than a denied one), and running fetches as tasks. Concurrent identical
requests await the same task; a caller that gives up (cancelled) does not cancel the fetch for the others. Failures
are never kept: the next request tries again. A time to live of 0 keeps nothing and only shares fetches in flight.
Expired answers are dropped by a sweep that runs while any are kept, not only when their key is asked again: an
answer nobody asks for again would otherwise stay until 10,000 others pushed it out, however large it is.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, Literal, TypeVar

from cachetools import TLRUCache

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
        weigh: Callable[[V], int] | None = None,
    ) -> None:
        """``ttl``: seconds an answer keeps, or a function of the answer giving them. ``maxsize``: how many answers
        are kept, or with ``weigh`` (an answer's weight, such as its bytes) how much they may weigh together; an
        answer heavier than that alone is shared while in flight but not kept."""
        if callable(ttl):
            self._ttl_of = ttl
        else:
            seconds = ttl
            self._ttl_of = lambda _answer: seconds
        self._on_outcome = on_outcome
        self._weigh = weigh
        self._maxsize = maxsize
        self._answers: TLRUCache[K, V] = TLRUCache(
            maxsize, lambda _key, answer, now: now + self._ttl_of(answer), timer=clock, getsizeof=weigh
        )
        self._inflight: dict[K, asyncio.Task[V]] = {}
        self._sweep: asyncio.TimerHandle | None = None

    async def get(self, key: K, fetch: Callable[[], Awaitable[V]]) -> tuple[V, Outcome]:
        """The answer for ``key`` and how it was found."""
        try:
            answer = self._answers[key]  # KeyError when expired, too
        except KeyError:
            pass
        else:
            self._on_outcome("hit")
            return answer, "hit"
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
            self._keep(key, answer)
            return answer
        finally:
            self._inflight.pop(key, None)

    def _keep(self, key: K, answer: V) -> None:
        ttl = self._ttl_of(answer)
        if ttl <= 0 or (self._weigh is not None and self._weigh(answer) > self._maxsize):
            return
        self._answers[key] = answer
        if self._sweep is None and math.isfinite(ttl):
            self._sweep = asyncio.get_running_loop().call_later(ttl, self._expire, ttl)

    def _expire(self, every: float) -> None:
        """Drop expired answers; again in ``every`` seconds while any are kept."""
        self._answers.expire()
        self._sweep = asyncio.get_running_loop().call_later(every, self._expire, every) if self._answers else None

    def cancel(self) -> None:
        """Stop every fetch in flight (their waiters see CancelledError); kept answers stay."""
        for task in self._inflight.values():
            task.cancel()

    def __len__(self) -> int:
        return len(self._answers)
