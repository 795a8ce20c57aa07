"""Room for the Prometheus answers being read and decoded at once, shared by every request to every backend.

``--prometheus-max-answer-bytes`` bounds one answer; answers to distinct queries add up past it (six requests at once
over 30 MB answers took the adapter to 1.6 GiB). ``--prometheus-max-bytes-in-flight`` bounds their bytes together: an
answer takes room for each chunk as it arrives and gives it all back once decoded, so the room counts the raw bytes
of every answer from its first chunk to the end of its decoding. Memory meanwhile is about 4.3 times that: the bytes,
the text decoded from them (a byte a character, for the ASCII Prometheus sends) and the samples built, which stay as
the result (about twice the bytes). Measured with tracemalloc on DCGM vectors of 20,000 to 140,000 series (5 to
35 MB): 4.2 to 4.3; 5.3 for 1,000 series (0.2 MB), where fixed costs weigh more.

An answer waits for room rather than failing, until its request's deadline. Most answers are read without knowing
their size: Prometheus (Go's net/http) sends a large answer chunked, without a Content-Length (2.42 here: a 45 KB
answer chunked, a 162-byte one with its length). Answers that each hold part of the room while waiting for more
could wait for one another to the end (six answers, each with a sixth of the room). So room is given only when,
after it, the answers holding room could all still be read to the end one after another, each as large as it may
yet turn out (its Content-Length, else the per-answer limit): the banker's algorithm with one resource. The answer
that holds most can then always go on, so one always does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


class AnswerBudget:
    """The bytes held by answers being read and decoded; ``limit`` 0: no bound, only counted."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0  # bytes held now, by every answer together
        self.peak = 0  # the most ever held at once
        self.waits = 0  # chunks that waited for room
        self._holding: set[Answer] = set()
        self._waiters: list[asyncio.Future[None]] = []

    def answer(self, most: int) -> Answer:
        """The room of one answer, which ``most`` bytes bound (the per-answer limit); ``release`` gives it back."""
        return Answer(self, min(most, self.limit) if self.limit else most)

    async def _take(self, answer: Answer, size: int) -> None:
        waited = False
        while not self._grants(answer, size):
            waited = True
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                self._waiters.remove(waiter)
        self.waits += waited
        answer.held += size
        self.held += size
        self.peak = max(self.peak, self.held)
        self._holding.add(answer)

    def _grants(self, answer: Answer, size: int) -> bool:
        if not self.limit:
            return True
        if self.held + size > self.limit:
            return False
        grown = {a: a.held + size * (a is answer) for a in self._holding | {answer}}
        return _safe(self.limit - self.held - size, ((a.most - held, held) for a, held in grown.items()))

    def _release(self, answer: Answer) -> None:
        self.held -= answer.held
        answer.held = 0
        self._holding.discard(answer)
        self._wake()

    def _wake(self) -> None:
        """Room was given back or an answer's bound fell: every waiter looks again."""
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)


def _safe(free: int, answers: Iterable[tuple[int, int]]) -> bool:
    """Whether answers of (bytes still to come at most, bytes held) can all end, one after another, with ``free``
    bytes of room: the one that needs least first, since each that ends gives back what it held."""
    for need, held in sorted(answers):
        if need > free:
            return False
        free += held
    return True


class Answer:
    """The room one answer holds: ``held`` bytes taken so far, of at most ``most``."""

    def __init__(self, budget: AnswerBudget, most: int) -> None:
        self.budget = budget
        self.most = most
        self.held = 0
        self._kept: asyncio.Future[Any] | None = None

    def expect(self, size: int) -> None:
        """The answer's size is known (its Content-Length): it takes no more than that."""
        if size < self.most:
            self.most = size
            self.budget._wake()

    async def take(self, size: int) -> None:
        """Room for ``size`` more bytes, waiting until there is; the caller bounds the wait by its deadline."""
        await self.budget._take(self, size)

    def keep_until(self, work: asyncio.Future[Any]) -> None:
        """The bytes stay in use until ``work`` (a decoding left running in a thread by a cancelled request) ends."""
        self._kept = work
        work.add_done_callback(self._decoded)

    def _decoded(self, work: asyncio.Future[Any]) -> None:
        if not work.cancelled():
            work.exception()  # retrieved: nobody awaits it any more, and asyncio would log it as never retrieved
        self.budget._release(self)

    def release(self) -> None:
        """Give the room back, unless a decoding still uses the bytes (``keep_until``)."""
        if self._kept is None:
            self.budget._release(self)
