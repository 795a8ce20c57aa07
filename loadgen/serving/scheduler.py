"""The scheduler: which requests each step runs, as vLLM's V1 scheduler decides it, in spirit.

Requests wait in arrival order (FIFO). Every step first gives each running request, in the order they were admitted,
the KV for one more token; then, if nobody was preempted, admits waiting requests from the head of the queue while
the batch has room (``max_batch``, vLLM's ``max_num_seqs``), the step has room (``max_step_tokens``, vLLM's
``max_num_batched_tokens``) and the KV cache has room for the head's tokens. The head that does not fit blocks the
ones behind it, as FIFO does.

KV grows a token per step, as vLLM allocates it: a request admitted with a prompt of P tokens takes P slots, and each
later step one more. When a running request cannot have its next slot, the most recently admitted running request is
preempted: it gives back all its KV and goes to the head of the queue, and when admitted again it computes its
prompt and the tokens it already generated once more (vLLM's recompute). KV is counted in tokens, where vLLM counts
blocks of 16; a prompt is computed whole in the step that admits it (vLLM can split it over steps: chunked prefill).

Each scheduled request produces one token per step: the first at the end of the step that computed its prompt,
then one per decode step. A request that has all its output tokens finishes and frees its KV.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .request import Request


@dataclass(frozen=True)
class Limits:
    max_batch: int = 64
    kv_tokens: int = 24576
    max_step_tokens: int = 8192


@dataclass(frozen=True)
class Scheduled:
    request: Request
    tokens: int  # computed in this step: the prompt (and, after a preemption, the output so far), or 1 to decode


@dataclass
class Step:
    started: float
    scheduled: list[Scheduled] = field(default_factory=list)
    preempted: int = 0

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.scheduled)


@dataclass
class StepOutcome:
    tokens: int
    generated: int  # one token per scheduled request
    prompt_tokens: int  # prompts computed for the first time (a recomputation is not counted again, as in vLLM)
    first_tokens: list[Request] = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)
    preempted: int = 0


class Scheduler:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []
        self.kv_used = 0

    def add(self, request: Request) -> None:
        self._waiting.append(request)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def held(self) -> int:
        """Requests waiting and running."""
        return len(self._waiting) + len(self._running)

    @property
    def idle(self) -> bool:
        return not self._waiting and not self._running

    @property
    def kv_usage(self) -> float:
        """The share of KV slots in use, 0 to 1 (vLLM's ``kv_cache_usage_perc``)."""
        return self.kv_used / self.limits.kv_tokens

    def holding(self) -> list[Request]:
        """Every request the engine holds: the running ones, then those waiting, in order."""
        return [*self._running, *self._waiting]

    def waiting_ids(self) -> list[int]:
        return [r.id for r in self._waiting]

    def running_ids(self) -> list[int]:
        return [r.id for r in self._running]

    def schedule(self, now: float) -> Step:
        step = Step(now)
        budget = self.limits.max_step_tokens
        i = 0
        while i < len(self._running):
            request = self._running[i]
            while self.kv_used >= self.limits.kv_tokens:
                victim = self._running.pop()
                self._preempt(victim)
                step.preempted += 1
                if victim is request:
                    break
            else:
                self._allocate(request, 1)
                step.scheduled.append(Scheduled(request, 1))
                budget -= 1
                i += 1
        if step.preempted:
            return step  # as vLLM: a step that had to preempt admits nobody
        while self._waiting and len(self._running) < self.limits.max_batch:
            request = self._waiting[0]
            need = request.known - request.kv
            if need > budget or need > self.limits.kv_tokens - self.kv_used:
                break
            self._waiting.popleft()
            self._allocate(request, need)
            self._running.append(request)
            if request.scheduled is None:
                request.scheduled = now
            step.scheduled.append(Scheduled(request, need))
            budget -= need
        return step

    def complete(self, step: Step, now: float) -> StepOutcome:
        """The step ran and ended at ``now``: each scheduled request has its next token, finished ones leave."""
        outcome = StepOutcome(step.tokens, len(step.scheduled), 0, preempted=step.preempted)
        for s in step.scheduled:
            request = s.request
            request.generated += 1
            if request.first_token is None:
                request.first_token = now
                outcome.first_tokens.append(request)
                outcome.prompt_tokens += request.prompt
            if request.generated >= request.output:
                self._running.remove(request)
                self.kv_used -= request.kv
                request.kv = 0
                outcome.finished.append(request)
        return outcome

    def quiet_decodes(self) -> int:
        """How many steps from now are plain decodes, as long as no request is added to an empty queue: each running
        request gets its next token and nobody is admitted, finishes or is preempted. 0 when the next is no such step.

        A replay steps through these with ``decode_quietly`` at the cost of one addition each, where ``schedule`` and
        ``complete`` go through every running request: what they would do is known. The head of the queue that does
        not fit now does not fit in any of them either: the batch keeps its size, the step its token budget, and the
        KV cache only fills.
        """
        running = len(self._running)
        if not running:
            return 0
        kv_after = self.kv_used + running  # the KV the next step leaves in use
        if self._waiting and running < self.limits.max_batch:
            need = self._waiting[0].known - self._waiting[0].kv
            if need <= self.limits.max_step_tokens - running and need <= self.limits.kv_tokens - kv_after:
                return 0  # the next step admits the head of the queue
        first_to_finish = min(r.output - r.generated for r in self._running)
        # step j allocates its last slot when j x running slots are in use beyond kv_used: none may find the cache full
        fits = (self.limits.kv_tokens - self.kv_used) // running
        return max(0, min(first_to_finish - 1, fits))

    def decode_quietly(self, steps: int) -> None:
        """Run ``steps`` of the steps ``quiet_decodes`` counted, as ``schedule`` and ``complete`` would: a token and
        a KV slot more for each running request per step."""
        for request in self._running:
            request.generated += steps
            request.kv += steps
        self.kv_used += steps * len(self._running)

    def _allocate(self, request: Request, tokens: int) -> None:
        request.kv += tokens
        self.kv_used += tokens

    def _preempt(self, request: Request) -> None:
        self.kv_used -= request.kv
        request.kv = 0
        request.preemptions += 1
        self._waiting.appendleft(request)
