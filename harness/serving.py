"""Stand-ins for ``gpuscale-load serve``'s engine in tests: arrivals at the times a test lists."""

from __future__ import annotations

from loadgen.serving.request import Request


class Listed:
    """Requests that arrive when the test says, in place of the Poisson process."""

    def __init__(self, *requests: Request) -> None:
        self._requests = list(requests)

    def next_time(self) -> float | None:
        return self._requests[0].arrival if self._requests else None

    def due(self, t: float) -> list[Request]:
        due = [r for r in self._requests if r.arrival <= t]
        self._requests = self._requests[len(due) :]
        return due
