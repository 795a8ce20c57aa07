"""What the adapter serves a replay's autoscalers: the metric pipeline's answers (pipeline.py) for one namespace,
and the series peers read that the adapter does not serve, as ``policies.EXTRA_METRICS`` defines them."""

from __future__ import annotations

from .pipeline import MetricPipeline, Scrape

# llm-d's endpoint picker: a replica is saturated at 5 requests waiting or 80 % of its KV cache (utilization
# detector defaults, docs/replay-policies.md)
SATURATED_WAITING = 5.0
SATURATED_KV = 0.8


class ServedMetrics:
    def __init__(self, namespace: str, pipeline: MetricPipeline | None = None) -> None:
        self.namespace = namespace
        self.pipeline = pipeline or MetricPipeline()

    def scrape(self, scrape: Scrape) -> None:
        self.pipeline.scrape(scrape)

    def pods_metric(self, name: str, t: float) -> dict[str, float]:
        return {pod: v for (ns, pod), v in self.pipeline.pods(name, t).items() if ns == self.namespace}

    def external_metric(self, name: str, t: float) -> float | None:
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
