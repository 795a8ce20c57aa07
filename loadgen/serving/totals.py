"""What a run did, counted as it goes: read for the progress lines (their differences) and the final summary."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from .scheduler import StepOutcome


@dataclass
class Totals:
    arrivals: int = 0
    finished: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    steps: int = 0
    busy_seconds: float = 0.0
    ttft_sum: float = 0.0
    ttft_count: int = 0
    queue_time_sum: float = 0.0

    def add(self, outcome: StepOutcome, seconds: float) -> None:
        self.steps += 1
        self.busy_seconds += seconds
        self.finished += len(outcome.finished)
        self.prompt_tokens += outcome.prompt_tokens
        self.generation_tokens += outcome.generated
        self.preemptions += outcome.preempted
        for request in outcome.first_tokens:
            assert request.first_token is not None
            self.ttft_sum += request.first_token - request.arrival
            self.ttft_count += 1
        self.queue_time_sum += sum(r.queue_time for r in outcome.finished)

    def copy(self) -> Totals:
        return replace(self)

    def summary(self, seconds: float, waiting: int, running: int) -> dict[str, Any]:
        """The run as one JSON object: counts, means and rates over ``seconds``, and what was left at the end."""
        out: dict[str, Any] = {k: v for k, v in asdict(self).items() if not k.endswith(("_sum", "_count"))}
        out |= {
            "seconds": round(seconds, 3),
            "busy_seconds": round(self.busy_seconds, 3),
            "busy_fraction": round(self.busy_seconds / seconds, 4) if seconds > 0 else 0.0,
            "generation_tokens_per_second": round(self.generation_tokens / seconds, 1) if seconds > 0 else 0.0,
            "ttft_mean_seconds": round(self.ttft_sum / self.ttft_count, 6) if self.ttft_count else None,
            "queue_time_mean_seconds": round(self.queue_time_sum / self.finished, 6) if self.finished else None,
            "waiting_at_end": waiting,
            "running_at_end": running,
        }
        return out
