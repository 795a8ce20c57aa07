"""The engine's series under vLLM's own names, types, help texts, labels and histogram buckets.

As vLLM's V1 engine writes them in ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``), read in the
vllm-project/vllm source of the v0.12 series; vLLM's pull request 48866 (2026) moved the bucket lists to
``vllm/v1/metrics/buckets.py`` without changing them. Every series carries ``model_name`` (vLLM's served model name)
and ``engine`` (the engine's index, "0" for a single engine). vLLM declares its counters without the ``_total``
suffix and prometheus_client adds it, as here; ``request_success`` has a series for each of vLLM's finish reasons
from the start, and this model finishes every request as ``length`` (it generated all the tokens it asked for).
The registry is the engine's own, so that nothing else in the process shows on its ``/metrics``.

``gpuscale_serve_busy_seconds_total`` is this model's own: the seconds spent in steps, which is what a GPU
utilization reading should follow (the simulated runner has no GPU to read).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .scheduler import Scheduler, StepOutcome

LABELS = ("model_name", "engine")
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


class EngineMetrics:
    def __init__(self, model_name: str, engine: str = "0", registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = (model_name, engine)

        def gauge(name: str, help: str) -> Gauge:
            return Gauge(name, help, LABELS, registry=self.registry).labels(*labels)

        def counter(name: str, help: str) -> Counter:
            return Counter(name, help, LABELS, registry=self.registry).labels(*labels)

        def histogram(name: str, help: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, help, LABELS, registry=self.registry, buckets=buckets).labels(*labels)

        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          (*LABELS, "finished_reason"), registry=self.registry)  # fmt: skip
        self.success = {reason: success.labels(*labels, reason) for reason in FINISH_REASONS}
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.busy = counter("gpuscale_serve_busy_seconds", "Seconds the engine spent in steps (the GPU's work).")

    def record(self, outcome: StepOutcome, seconds: float) -> None:
        """One step that took ``seconds``."""
        self.busy.inc(seconds)
        self.prompt_tokens.inc(outcome.prompt_tokens)
        self.generation_tokens.inc(outcome.generated)
        self.preemptions.inc(outcome.preempted)
        for request in outcome.first_tokens:
            assert request.first_token is not None
            self.ttft.observe(request.first_token - request.arrival)
        for request in outcome.finished:
            self.queue_time.observe(request.queue_time)  # vLLM observes it when the request finishes
            self.success["length"].inc()

    def show(self, scheduler: Scheduler) -> None:
        """The scheduler's state after a step, as vLLM's scheduler stats give it."""
        self.running.set(scheduler.running)
        self.waiting.set(scheduler.waiting)
        self.kv_usage.set(scheduler.kv_usage)
