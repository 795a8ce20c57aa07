"""What one engine step costs: the ``StepRunner`` protocol, the clock it runs on, and the modelled runner.

The scheduler decides a step; a runner does its work and returns when it is done. On a GPU that is real work
(``gpu_steps.py``); without one, ``SimulatedSteps`` lets the clock pass for the time the step is modelled to take, a
fixed part (reading the weights, launching the kernels) plus a part per token computed. Everything else, the
scheduler included, is the same code either way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class ModelClock:
    """A clock that moves only when something sleeps on it: with simulated steps, a run in model time, at once and the
    same every time (a capacity measured, a scheduler worked through by hand)."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


class StepRunner(Protocol):
    def run(self, tokens: int) -> None:
        """Do one step's work for ``tokens`` tokens (prompts and decodes together) and return when it is done."""
        ...


@dataclass(frozen=True)
class StepCost:
    """A modelled step: ``fixed`` seconds plus ``per_token`` seconds for each token computed.

    The defaults follow ``serve``'s GEMM chain at its defaults on an H200 where most steps are, 64 decodes with or
    without a 256-token prompt (2.37 and 4.54 ms measured, 2.34 and 4.52 here). There a step costs the same from 1
    to about 128 tokens (it is bound by reading the weights) and 13 us a token above about 500 (bound by the tensor
    cores): 109 ms for 8192 tokens, where this line gives 71.
    """

    fixed: float = 0.0018
    per_token: float = 0.0000085

    def seconds(self, tokens: int) -> float:
        return self.fixed + self.per_token * tokens


class SimulatedSteps:
    def __init__(self, clock: Clock, cost: StepCost) -> None:
        self._clock = clock
        self.cost = cost

    def run(self, tokens: int) -> None:
        self._clock.sleep(self.cost.seconds(tokens))
