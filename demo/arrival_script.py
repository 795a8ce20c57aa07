"""The requests the chat Deployment gets: a rate that steps over time, as ``gpuscale-load serve --rate-file`` reads
one, for arrivals drawn as its Poisson process (loadgen/serving/arrivals.py)."""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.serving.rate_file import RateSchedule


@dataclass(frozen=True)
class ArrivalScript:
    """Requests per second over time: ``steps`` of (from this second, this rate), in order, the first from 0."""

    steps: tuple[tuple[float, float], ...]

    def rate(self, t: float) -> float:
        return self.schedule().rate_at(t)

    def schedule(self) -> RateSchedule:
        return RateSchedule(self.steps)

    def stretched(self, factor: float) -> ArrivalScript:
        return ArrivalScript(tuple((start * factor, rate) for start, rate in self.steps))

    def describe(self) -> str:
        return ", ".join(
            f"{'none' if rate == 0 else f'{rate:g} a second'} from {start:.0f} s" for start, rate in self.steps
        )
