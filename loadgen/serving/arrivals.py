"""When requests arrive and how long they are: a Poisson process at the schedule's rate, sizes fixed or drawn.

The process is exact for a rate that steps: a gap is drawn at the current rate, and when it would cross the next step
the draw starts again at that step with the new rate (the exponential distribution has no memory, so nothing is
lost). Everything random comes from one seeded generator, so a run is repeated by giving the same seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .rate_file import RateSchedule
from .request import Request


@dataclass(frozen=True)
class TokenRange:
    """A request's length in tokens: ``low`` to ``high`` inclusive, uniformly; fixed when they are equal."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str) -> TokenRange:
        """``128`` or ``64-256``; ValueError with the text and what is valid."""
        parts = text.strip().split("-")
        try:
            if len(parts) not in (1, 2):
                raise ValueError
            low, high = int(parts[0]), int(parts[-1])
        except ValueError:
            raise ValueError(f"expected tokens as N or LOW-HIGH, got {text!r}") from None
        if low < 1 or high < low:
            raise ValueError(f"expected 1 <= LOW <= HIGH tokens, got {text!r}")
        return cls(low, high)

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    def draw(self, rng: random.Random) -> int:
        return self.low if self.low == self.high else rng.randint(self.low, self.high)

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


class Sizes:
    """Each request's prompt and output lengths, drawn in turn from ``rng``."""

    def __init__(self, prompt: TokenRange, output: TokenRange, rng: random.Random) -> None:
        self.prompt = prompt
        self.output = output
        self._rng = rng

    def draw(self) -> tuple[int, int]:
        return self.prompt.draw(self._rng), self.output.draw(self._rng)


class Arrivals:
    """The requests of one run, in arrival order, drawn as the run asks for them."""

    def __init__(self, rates: RateSchedule, prompt: TokenRange, output: TokenRange, seed: int = 0) -> None:
        self._rates = rates
        self._rng = random.Random(seed)
        self._sizes = Sizes(prompt, output, self._rng)
        self._count = 0
        self._next = self._after(0.0)

    def next_time(self) -> float | None:
        """When the next request arrives; None when none will (the rate is 0 from here on)."""
        return self._next

    def due(self, t: float) -> list[Request]:
        """The requests that arrived up to ``t`` and were not handed out before."""
        out = []
        while self._next is not None and self._next <= t:
            out.append(Request(self._count, self._next, *self._sizes.draw()))
            self._count += 1
            self._next = self._after(self._next)
        return out

    def _after(self, t: float) -> float | None:
        while True:
            rate, change = self._rates.rate_at(t), self._rates.next_change(t)
            if rate > 0:
                at = t + self._rng.expovariate(rate)
                if change is None or at < change:
                    return at
            if change is None:
                return None
            t = change
