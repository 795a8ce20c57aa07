"""The engine's loop: take in what arrived, schedule a step, run it, account for it; idle until work comes.

As vLLM's engine core does, steps follow each other without a pause while any request waits or runs, so the GPU is
busy whenever there is work, however little. Requests that arrive during a step wait for its end.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .arrivals import Sizes, TokenRange
from .metrics import EngineMetrics
from .progress import Progress
from .request import Request
from .scheduler import Limits, Scheduler
from .steps import Clock, StepRunner
from .totals import Totals


class Source(Protocol):
    """Where requests come from (``Arrivals``): when the next one comes, and those that came up to a time."""

    def next_time(self) -> float | None: ...

    def due(self, t: float) -> list[Request]: ...


# the longest idle wait between looks at the stop flag: Ctrl-C is answered within it
IDLE_NAP = 0.05


class Engine:
    def __init__(
        self,
        scheduler: Scheduler,
        runner: StepRunner,
        arrivals: Source,
        metrics: EngineMetrics,
        clock: Clock,
        progress: Progress | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.runner = runner
        self.arrivals = arrivals
        self.metrics = metrics
        self.clock = clock
        self.progress = progress
        self.totals = Totals()
        self.elapsed = 0.0

    def run(self, seconds: float, stop: Callable[[], bool] = lambda: False) -> Totals:
        """Run for ``seconds`` or until ``stop()``; the step in progress then finishes."""
        start = self.clock.now()
        self.metrics.show(self.scheduler)
        while not stop():
            t = self.clock.now() - start
            if t >= seconds:
                break
            self._take_arrivals(t)
            if self.scheduler.idle:
                arrival = self.arrivals.next_time()
                wake = min(seconds, seconds if arrival is None else arrival, t + IDLE_NAP)
                if self.progress is not None:
                    wake = min(wake, self.progress.next_line)
                self.clock.sleep(max(0.0, wake - t))
            else:
                step = self.scheduler.schedule(t)
                self.runner.run(step.tokens)
                end = self.clock.now() - start
                outcome = self.scheduler.complete(step, end)
                self.totals.add(outcome, end - t)
                self.metrics.record(outcome, end - t)
                self._take_arrivals(end)
            self.metrics.show(self.scheduler)
            if self.progress is not None:
                self.progress.tick(self.clock.now() - start, self.scheduler, self.totals)
        self.elapsed = self.clock.now() - start
        return self.totals

    def _take_arrivals(self, t: float) -> None:
        for request in self.arrivals.due(t):
            self.scheduler.add(request)
            self.totals.arrivals += 1


@dataclass(frozen=True)
class Capacity:
    tokens_per_second: float  # generated tokens per second with the batch kept full
    requests_per_second: float  # the same in requests of the mean output length


def measure_capacity(
    runner: StepRunner,
    limits: Limits,
    prompt: TokenRange,
    output: TokenRange,
    clock: Clock,
    seconds: float = 3.0,
    warmup: float = 1.0,
    seed: int = 0,
) -> Capacity:
    """The most the engine generates: once the batch is full, the queue is never empty; counted for ``seconds`` from
    the first step that ends ``warmup`` seconds in with the batch full (or the KV cache the limit)."""
    scheduler = Scheduler(limits)
    sizes = Sizes(prompt, output, random.Random(seed))
    # While the batch fills, requests are let in at the pace that fills it in one output's length, which spreads them
    # over it: they then finish a few at a time, and the prompts of those that take their places are computed beside
    # the others' decodes, as under a steady stream of arrivals. Let in all at once they would finish together, and
    # their prompts would fill steps of their own, a lockstep no stream of arrivals has (on the H200, 20 % fewer
    # tokens per second).
    pace = limits.max_batch / output.mean  # requests per step
    ids = itertools.count()
    start, steps, counted, full = clock.now(), 0, 0, False
    counting_from: float | None = None
    while counting_from is None or clock.now() - start < counting_from + seconds:
        t = clock.now() - start
        # once full, a batch's worth waits: the queue is never empty
        wanted = 2 * limits.max_batch if full else min(limits.max_batch, math.ceil((steps + 1) * pace))
        while scheduler.running + scheduler.waiting < wanted:
            scheduler.add(Request(next(ids), t, *sizes.draw()))
        step = scheduler.schedule(t)
        full = full or scheduler.running >= limits.max_batch or scheduler.waiting > 0
        runner.run(step.tokens)
        steps += 1
        end = clock.now() - start
        outcome = scheduler.complete(step, end)
        if counting_from is not None:
            counted += outcome.generated
        elif full and end >= warmup:
            counting_from = end
    span = clock.now() - start - counting_from
    tokens = counted / span if span > 0 else 0.0
    return Capacity(tokens, tokens / output.mean)
