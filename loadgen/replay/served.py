"""What the adapter serves a replay's autoscalers: the metric pipeline's answers (pipeline.py) for one namespace,
the endpoint picker's series (the replay's gateway writes none), the series peers read that the adapter does not
serve, as ``policies.EXTRA_METRICS`` defines them, and ``inference_capacity_forecast`` from a recorded yesterday.

The forecast: Prometheus records ``namespace:inference_capacity_demand_replicas:sum`` (the capacity demand as a
0-1 ratio times the engines reporting; manifests/prometheus/gpuscale-rules.yaml) and the adapter serves 100 x its
largest value over the same time yesterday and the ``FORECAST_AHEAD`` seconds after, 0 where today has a record
and yesterday none. A replay has no yesterday: ``history`` is what ``recorded`` held after a replay of the same
arrivals, at each scrape, as if the day before had been the same (docs/replay.md, "A forecast floor")."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from .pipeline import MetricPipeline, Scrape, served

# llm-d's endpoint picker: a replica is saturated at 5 requests waiting or 80 % of its KV cache (utilization
# detector defaults, docs/replay-policies.md)
SATURATED_WAITING = 5.0
SATURATED_KV = 0.8
FORECAST_AHEAD = 300.0  # the built-in rule's [5m] offset 23h55m: yesterday from now to five minutes ahead


class ServedMetrics:
    def __init__(
        self,
        namespace: str,
        pipeline: MetricPipeline | None = None,
        history: Sequence[tuple[float, float]] = (),
    ) -> None:
        self.namespace = namespace
        self.pipeline = pipeline or MetricPipeline()
        self.recorded: list[tuple[float, float]] = []  # (time, replicas' worth of KV what arrives needs)
        self._history = list(history)
        self._history_at = [t for t, _ in self._history]

    def scrape(self, scrape: Scrape) -> None:
        self.pipeline.scrape(scrape)
        demand = self.pipeline.external("inference_capacity_demand", self.namespace, scrape.at)
        if demand is not None:
            engines = sum(1 for e in scrape.engines if e.namespace == self.namespace)
            self.recorded.append((scrape.at, demand / 100 * engines))

    def _forecast(self, t: float) -> float | None:
        # max_over_time over yesterday's [t, t + 5m], closed at both ends as Prometheus 2.42 reads a range
        lo = bisect.bisect_left(self._history_at, t)
        hi = bisect.bisect_right(self._history_at, t + FORECAST_AHEAD)
        if hi > lo:
            return served(100 * max(v for _, v in self._history[lo:hi]))
        # `or max(today's record) * 0`: the record is there while the capacity demand has a value
        today = self.pipeline.external("inference_capacity_demand", self.namespace, t)
        return None if today is None else 0.0

    def pods_metric(self, name: str, t: float) -> dict[str, float]:
        return {pod: v for (ns, pod), v in self.pipeline.pods(name, t).items() if ns == self.namespace}

    def external_metric(self, name: str, t: float) -> float | None:
        if name == "inference_capacity_forecast":
            return self._forecast(t)
        if name == "inference_request_activity":
            rate = self.pipeline.external("inference_request_rate", self.namespace, t)
            return None if rate is None else float(rate > 0)
        if name == "inference_gateway_requests_running":
            parts = [self.pipeline.external(m, self.namespace, t) for m in
                     ("inference_requests_waiting", "inference_requests_running")]  # fmt: skip
            values = [v for v in parts if v is not None]
            return sum(values) if values else None
        if name == "inference_pool_saturation":
            waiting = self.pods_metric("inference_requests_waiting", t)
            kv = self.pods_metric("inference_kv_cache_usage", t)  # percent
            if not waiting:
                return 1.0  # no ready replica: the pool is saturated
            return max(max(w / SATURATED_WAITING, kv.get(pod, 0.0) / 100 / SATURATED_KV) for pod, w in waiting.items())
        return self.pipeline.external(name, self.namespace, t)
