"""Stand-ins for the replay's tests: a step cost that is the same for every step, and a metric pipeline whose
answers the test sets."""

from __future__ import annotations

from collections.abc import Mapping

from loadgen.replay.cost_model import CostModel, Table
from loadgen.replay.pipeline import Scrape

STEP = 0.01  # seconds, whatever the step computes
FLAT = CostModel(Table((1.0, 8192.0), (STEP, STEP)), Table((1.0, 2.0), (0.0, 0.0)), 0.0, 0.0)


class Scripted:
    """What the adapter serves, set by the test: every ready pod's value of a Pods metric, a namespace's external
    value; the scrapes it was handed, kept."""

    def __init__(self, pods: float | None = None, external: float | None = None) -> None:
        self.pods, self.external = pods, external
        self.scrapes: list[Scrape] = []

    def scrape(self, scrape: Scrape) -> None:
        self.scrapes.append(scrape)

    def pods_metric(self, name: str, t: float) -> Mapping[str, float]:
        engines = self.scrapes[-1].engines if self.scrapes else []
        return {} if self.pods is None else {e.pod: self.pods for e in engines}

    def external_metric(self, name: str, t: float) -> float | None:
        return self.external
