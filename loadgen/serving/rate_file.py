"""``--rate-file``: the request rate as a step function of time, one ``seconds rate`` line per step.

Line ``t r`` means: from ``t`` seconds after the start, requests arrive at ``r`` per second, until the next line's
time; the last rate holds to the end. The first step starts at 0 and times increase. Blank lines and ``#`` comments
are allowed. The file is read once, strictly: every error names the file, the line and what is wrong there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import LoadError


@dataclass(frozen=True)
class RateSchedule:
    """Requests per second over time: ``steps`` are (from second, rate), the first from 0, times increasing."""

    steps: tuple[tuple[float, float], ...]

    @classmethod
    def constant(cls, rate: float) -> RateSchedule:
        return cls(((0.0, rate),))

    def rate_at(self, t: float) -> float:
        return next(rate for start, rate in reversed(self.steps) if start <= t)

    def next_change(self, t: float) -> float | None:
        """The first step boundary after ``t``; None when the rate no longer changes."""
        return next((start for start, _ in self.steps if start > t), None)


def parse_rates(text: str, source: str) -> RateSchedule:
    steps: list[tuple[float, float]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source}:{number}"
        fields = line.split()
        if len(fields) != 2:
            raise LoadError(f"{where}: expected 'seconds rate', got {line[:60]!r}")
        start, rate = (_number(field, name, where) for field, name in zip(fields, ("seconds", "rate"), strict=True))
        if not steps and start != 0:
            raise LoadError(f"{where}: the first step must start at 0 seconds, got {start:g}")
        if steps and start <= steps[-1][0]:
            raise LoadError(f"{where}: seconds must increase from line to line, got {start:g} after {steps[-1][0]:g}")
        steps.append((start, rate))
    if not steps:
        raise LoadError(f"{source}: no 'seconds rate' line")
    return RateSchedule(tuple(steps))


def _number(text: str, name: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise LoadError(f"{where}: {name} must be a number, got {text[:40]!r}") from None
    if not math.isfinite(value) or value < 0:
        raise LoadError(f"{where}: {name} must be 0 or more, got {text[:40]}")
    return value


def read_rates(path: Path) -> RateSchedule:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise LoadError(f"rate file {path} cannot be read: {why}") from None
    return parse_rates(text, str(path))
