"""One request as the scheduler follows it: its sizes, how far it got, the KV it holds, and when things happened.

Times are seconds from the start of the run, on the engine's clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False)
class Request:
    id: int
    arrival: float
    prompt: int  # tokens
    output: int  # tokens to generate; the request finishes (reason "length") once it has them all
    generated: int = 0
    kv: int = 0  # tokens whose KV the request holds; 0 while it waits (a preempted request gave its KV back)
    scheduled: float | None = None  # the start of the step that first ran it
    first_token: float | None = None  # the end of the step that gave its first token
    preemptions: int = 0

    @property
    def known(self) -> int:
        """Tokens the request's next step must have KV for: its prompt and what it generated so far."""
        return self.prompt + self.generated

    @property
    def queue_time(self) -> float:
        """vLLM's queue time: arrival to first scheduled (a preempted request's later waits do not count)."""
        assert self.scheduled is not None, "only a request that ran has a queue time"
        return self.scheduled - self.arrival
