"""How long to wait before trying again: doubling from ``first`` to ``most`` after each failure, back to ``first``
after progress, with up to 20 % jitter so that many replicas do not retry in step."""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    def __init__(self, first: float = 1.0, most: float = 30.0, jitter: Callable[[], float] = random.random) -> None:
        self.first = min(first, most)
        self.most = most
        self.jitter = jitter
        self._delay = self.first

    def next(self) -> float:
        """The wait before this retry; the next one is twice as long, up to ``most``."""
        wait = self._delay * (1 + 0.2 * self.jitter())
        self._delay = min(self._delay * 2, self.most)
        return wait

    def reset(self) -> None:
        self._delay = self.first
