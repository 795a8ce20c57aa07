"""One replica of the served model as a pod: loading for its cold start, then ``serve``'s scheduler stepping in
virtual time with the cost model's step times, until it is deleted, drains and goes.

A replica is advanced lazily: nothing happens to it until something asks (a request routed to it, a scrape, the end
of its grace period), and ``advance_to(t)`` then runs every step that ends by ``t``. The step in progress at ``t``
goes on: a request that arrives during a step waits for its end, as in the engine's loop (loadgen/serving/engine.py).
Runs of plain decode steps (``Scheduler.quiet_decodes``) cost an addition each; the scheduler catches up with them
before any step that admits, finishes or preempts.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import Enum

from ..serving.request import Request
from ..serving.scheduler import Limits, Scheduler, Step
from .cost_model import CostModel


class Phase(Enum):
    LOADING = "loading"  # created: costs its GPU, serves nothing, exports no engine metrics, not Ready
    READY = "ready"
    DRAINING = "draining"  # deleted: admits nothing new, finishes what it has until its grace period ends
    GONE = "gone"


@dataclass(eq=False)
class ReplayRequest(Request):
    held: bool = False  # waited at the gateway while no replica was ready
    finished: float | None = None
    cut: bool = False  # its replica's grace period ended before it finished


@dataclass
class Counters:
    """The engine's counters as vLLM exports them, for the metric pipeline."""

    ttft_sum: float = 0.0
    ttft_count: int = 0
    queue_time_sum: float = 0.0
    queue_time_count: int = 0
    success: int = 0
    generated: int = 0


class Replica:
    def __init__(self, index: int, created: float, cold_start: float, limits: Limits, cost: CostModel) -> None:
        self.index = index
        self.name = f"engine-{index}"
        self.created = created
        self.ready_at = created + cold_start
        self.deleted: float | None = None
        self.gone: float | None = None
        self.phase = Phase.LOADING
        self.scheduler = Scheduler(limits)
        self.counters = Counters()
        self._cost = cost
        self._at = self.ready_at  # simulated up to here: the start of the step in progress, or since when idle
        self._step: Step | None = None  # the step in progress when it is not a quiet decode
        self._end = math.inf  # when the step in progress ends; inf while idle
        self._quiet_left = 0  # quiet decodes that may follow the step in progress
        self._quiet_done = 0  # quiet decodes run and not yet handed to the scheduler
        self._busy: deque[tuple[float, float]] = deque()  # (start, end) of busy spells, the last second's and on
        self._busy_from: float | None = None

    @property
    def load(self) -> int:
        """What the gateway balances on: the requests the engine holds."""
        return self.scheduler.held

    @property
    def kv_usage(self) -> float:
        s = self.scheduler
        return (s.kv_used + self._quiet_done * s.running) / s.limits.kv_tokens

    def became_ready(self) -> None:
        self.phase = Phase.READY

    def add(self, request: ReplayRequest, t: float) -> None:
        """A request routed here at ``t``; ``advance_to(t)`` was called."""
        if self.scheduler.waiting == 0:
            self._quiet_left = 0  # the next step may admit it
        self.scheduler.add(request)
        if self._end == math.inf:
            self._start_step(t)

    def advance_to(self, t: float) -> None:
        """Run every step that ends by ``t``."""
        while self._end <= t:
            end = self._end
            if self._step is not None:
                self._complete(self._step, end)
                self._step = None
                self._start_step(end)
                continue
            # a run of quiet decodes: each step is the same batch with one more token of context apiece
            s, cost = self.scheduler, self._cost
            running = s.running
            done, left = self._quiet_done + 1, self._quiet_left
            while left > 0:
                following = end + cost.step_seconds(running, s.kv_used + (done + 1) * running, 0)
                if following > t:
                    break
                end, done, left = following, done + 1, left - 1
            self.counters.generated += (done - self._quiet_done) * running
            self._quiet_done, self._quiet_left = done, left
            self._start_step(end)

    def delete(self, t: float) -> None:
        """Deleted at ``t``: out of the gateway's endpoints; gone once idle (``advance_to``) or cut at the deadline."""
        self.deleted = t
        if self.phase is Phase.LOADING or self._end == math.inf:
            self._go(t)
        else:
            self.phase = Phase.DRAINING

    def cut(self, t: float) -> list[ReplayRequest]:
        """The grace period ended at ``t`` (``advance_to(t)`` was called): what is left is cut, and the pod goes."""
        if self.phase is Phase.GONE:
            return []
        left = [r for r in self.scheduler.holding() if isinstance(r, ReplayRequest)]
        for r in left:
            r.cut = True
        self._go(t)
        return left

    def busy_share(self, t: float, window: float = 1.0) -> float:
        """The share of ``[t - window, t]`` spent in steps: the GPU's utilization as the collector averages it."""
        start = t - window
        while self._busy and self._busy[0][1] <= start:
            self._busy.popleft()
        busy = sum(min(e, t) - max(s, start) for s, e in self._busy if s < t)
        if self._busy_from is not None and self._busy_from < t:
            busy += t - max(self._busy_from, start)
        return max(0.0, min(1.0, busy / window))

    def _start_step(self, t: float) -> None:
        s = self.scheduler
        if self._quiet_left > 0:
            self._quiet_left -= 1
            running = s.running
            context = s.kv_used + (self._quiet_done + 1) * running
            self._end = t + self._cost.step_seconds(running, context, 0)
            return
        if self._quiet_done:
            s.decode_quietly(self._quiet_done)
            self._quiet_done = 0
        if s.idle:
            self._end = math.inf
            if self._busy_from is not None:
                self._busy.append((self._busy_from, t))
                self._busy_from = None
            if self.phase is Phase.DRAINING:
                self._go(t)
            return
        if self._busy_from is None:
            self._busy_from = t
        step = s.schedule(t)
        context = squares = 0
        for scheduled in step.scheduled:
            if scheduled.tokens == 1:
                context += scheduled.request.kv
            else:
                squares += scheduled.tokens * scheduled.tokens
        self._step = step
        self._end = t + self._cost.step_seconds(step.tokens, context, squares)

    def _complete(self, step: Step, end: float) -> None:
        outcome = self.scheduler.complete(step, end)
        c = self.counters
        c.generated += outcome.generated
        for r in outcome.first_tokens:
            assert r.first_token is not None
            c.ttft_sum += r.first_token - r.arrival
            c.ttft_count += 1
        for r in outcome.finished:
            assert isinstance(r, ReplayRequest)
            r.finished = end
            c.queue_time_sum += r.queue_time
            c.queue_time_count += 1
            c.success += 1
        self._quiet_left = self.scheduler.quiet_decodes()

    def _go(self, t: float) -> None:
        self.phase = Phase.GONE
        self.gone = t
        self._end = math.inf
        if self._busy_from is not None:
            self._busy.append((self._busy_from, t))
            self._busy_from = None
