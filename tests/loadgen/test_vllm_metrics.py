"""``serve``'s /metrics, read back with prometheus_client's own parser: vLLM's names, types, help texts, labels and
buckets, and a histogram whose buckets, sum and count agree with observations worked by hand."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.serving.metrics import EngineMetrics
from loadgen.serving.request import Request
from loadgen.serving.scheduler import Limits, Scheduler, StepOutcome
from loadgen.serving.server import create_app

LABELS = {"model_name": "toy", "engine": "0"}
# vLLM's V1 PrometheusStatLogger (vllm/v1/metrics/loggers.py): name → type, help
EXPECTED = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches."),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed."),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage."),
    "vllm:num_preemptions": ("counter", "Cumulative number of preemption from the engine."),
    "vllm:prompt_tokens": ("counter", "Number of prefill tokens processed."),
    "vllm:generation_tokens": ("counter", "Number of generation tokens processed."),
    "vllm:request_success": ("counter", "Count of successfully processed requests."),
    "vllm:time_to_first_token_seconds": ("histogram", "Histogram of time to first token in seconds."),
    "vllm:request_queue_time_seconds": ("histogram", "Histogram of time spent in WAITING phase for request."),
    "gpuscale_serve_busy_seconds": ("counter", "Seconds the engine spent in steps (the GPU's work)."),
}
TTFT_LE = ["0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5",
           "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0", "+Inf"]  # fmt: skip
QUEUE_LE = ["0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0", "40.0", "50.0",
            "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0", "+Inf"]  # fmt: skip


def request(arrival: float, scheduled: float, first_token: float) -> Request:
    return Request(0, arrival, 10, 1, generated=1, scheduled=scheduled, first_token=first_token)


def families(text: str) -> dict[str, Any]:
    """The families of a text page, without the ``_created`` gauges prometheus_client writes beside each counter and
    histogram (vLLM's page has them too)."""
    return {f.name: f for f in text_string_to_metric_families(text) if not f.name.endswith("_created")}


def recorded() -> EngineMetrics:
    """Three first tokens 3 ms, 50 ms and 300 ms after arrival; two of the requests finish after queueing 0.2 and
    0.4 s; then the state of a scheduler with 1 running request holding 10 of 40 KV slots and 2 waiting."""
    metrics = EngineMetrics("toy")
    fast, medium, slow = request(1.0, 1.0, 1.003), request(2.0, 2.2, 2.05), request(3.0, 3.4, 3.3)
    metrics.record(StepOutcome(40, 3, 30, first_tokens=[fast, medium, slow], finished=[medium, slow], preempted=1),
                   0.125)  # fmt: skip
    scheduler = Scheduler(Limits(max_batch=1, kv_tokens=40, max_step_tokens=40))
    for i in range(3):
        scheduler.add(Request(i, 0.0, 10, 5))
    scheduler.schedule(0.0)
    metrics.show(scheduler)
    return metrics


def test_every_family_has_vllms_name_type_help_and_labels() -> None:
    found = families(generate_latest(recorded().registry).decode())
    assert {name: (f.type, f.documentation) for name, f in found.items()} == EXPECTED
    for f in found.values():
        for sample in f.samples:
            extra = set(sample.labels) - {"model_name", "engine"}
            assert {k: sample.labels[k] for k in LABELS} == LABELS
            assert extra <= {"le", "finished_reason"}, sample


def test_the_values_follow_the_scheduler_and_the_steps() -> None:
    registry = recorded().registry

    def value(name: str, **more: str) -> float | None:
        return registry.get_sample_value(name, LABELS | more)

    assert (value("vllm:num_requests_running"), value("vllm:num_requests_waiting")) == (1, 2)
    assert value("vllm:kv_cache_usage_perc") == 0.25
    assert (value("vllm:prompt_tokens_total"), value("vllm:generation_tokens_total")) == (30, 3)
    assert (value("vllm:num_preemptions_total"), value("gpuscale_serve_busy_seconds_total")) == (1, 0.125)
    reasons = {r: value("vllm:request_success_total", finished_reason=r) for r in ("stop", "length", "abort")}
    assert reasons == {"stop": 0, "length": 2, "abort": 0}  # every reason is there from the start, as in vLLM


def test_histograms_have_vllms_buckets_and_agree_with_the_observations() -> None:
    found = families(generate_latest(recorded().registry).decode())

    def buckets(name: str) -> dict[str, float]:
        return {s.labels["le"]: s.value for s in found[name].samples if s.name == f"{name}_bucket"}

    def total(name: str, suffix: str) -> float:
        [value] = [float(s.value) for s in found[name].samples if s.name == f"{name}_{suffix}"]
        return value

    ttft = buckets("vllm:time_to_first_token_seconds")
    assert list(ttft) == TTFT_LE
    # 0.003 s from le=0.005, 0.05 s from 0.06, 0.3 s from 0.5; cumulative
    assert [ttft[le] for le in ("0.001", "0.005", "0.04", "0.06", "0.25", "0.5", "+Inf")] == [0, 1, 1, 2, 2, 3, 3]
    assert total("vllm:time_to_first_token_seconds", "count") == 3
    assert abs(total("vllm:time_to_first_token_seconds", "sum") - 0.353) < 1e-9
    queue = buckets("vllm:request_queue_time_seconds")
    assert list(queue) == QUEUE_LE
    assert [queue[le] for le in ("0.3", "0.5", "+Inf")] == [1, 2, 2]  # 0.2 and 0.4 s
    assert total("vllm:request_queue_time_seconds", "count") == 2
    assert abs(total("vllm:request_queue_time_seconds", "sum") - 0.6) < 1e-9


async def test_metrics_are_served_as_text_or_openmetrics_as_the_scraper_asks(aiohttp_client: Any) -> None:
    client: TestClient[Any, Any] = await aiohttp_client(create_app(recorded().registry))
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=")
    assert "vllm:request_success_total{" in await resp.text()
    resp = await client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
    assert (await resp.text()).endswith("# EOF\n")
    assert (await client.get("/health")).status == 200
