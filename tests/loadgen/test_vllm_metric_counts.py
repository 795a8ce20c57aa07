"""vLLM's own expectations of its /metrics, replayed against ``gpuscale-load serve``'s engine.

Source: vllm-project/vllm ``tests/entrypoints/openai/test_metrics.py`` at 0419b117 (``_get_expected_values``,
``test_metrics_counts``, ``test_abort_metrics_reset``): after N requests of P prompt tokens and M tokens each, sent one
after the other, each histogram's ``_count`` is N (the time per output token's N x (M - 1)), the token counters and
the token histograms' ``_sum`` are N x P and N x M, ``vllm:request_success_total`` is N; and once no request is in
the engine, running, waiting and KV-cache use are back to 0.

Where serve differs on purpose (docs/end-to-end.md, "serve", says why):
- serve writes the families the autoscaling signals read and a few counters, not all of vLLM's: no
  e2e/inference/prefill/decode time, no per-request token or parameter histograms, no iteration tokens, no time per
  output token or inter-token latency (``NOT_WRITTEN`` below; the adapter's rules read vLLM's own pages for those).
- serve makes its own arrivals and has no client that can go away, so vLLM's abort test has no counterpart: no
  request is aborted (``finished_reason="abort"`` stays 0). What the abort test checks at its end, every gauge back
  to 0 with nothing in the engine, is checked here once the requests finish.
"""

from __future__ import annotations

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from harness.serving import Listed
from loadgen.serving.engine import Engine
from loadgen.serving.metrics import EngineMetrics
from loadgen.serving.request import Request
from loadgen.serving.scheduler import Limits, Scheduler
from loadgen.serving.steps import ModelClock, SimulatedSteps, StepCost

LABELS = {"model_name": "m", "engine": "0"}
N, PROMPT, MAX_TOKENS = 10, 12, 10  # vLLM's test: 10 requests of max_tokens 10
NOT_WRITTEN = ("vllm:e2e_request_latency_seconds", "vllm:request_inference_time_seconds",
               "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds", "vllm:request_prompt_tokens",
               "vllm:request_generation_tokens", "vllm:request_params_n", "vllm:request_params_max_tokens",
               "vllm:iteration_tokens_total", "vllm:time_per_output_token_seconds",
               "vllm:inter_token_latency_seconds")  # fmt: skip


def served(requests: list[Request]) -> Engine:
    """The requests through serve's engine on a model clock, long enough for all of them to finish."""
    clock = ModelClock()
    engine = Engine(Scheduler(Limits()), SimulatedSteps(clock, StepCost(fixed=2**-6, per_token=2**-12)),
                    Listed(*requests), EngineMetrics("m"), clock)  # fmt: skip
    engine.run(float(4 * N))
    return engine


def one_after_the_other() -> list[Request]:
    """As vLLM's test sends them: each request after the previous one is answered (4 s apart is after it)."""
    return [Request(i, 4.0 * i, prompt=PROMPT, output=MAX_TOKENS) for i in range(N)]


def samples(engine: Engine) -> dict[str, float]:
    """Every sample of the page as a scraper parses it, by name (one engine, one model: one of each)."""
    text = generate_latest(engine.metrics.registry).decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "le" not in sample.labels and sample.labels.get("finished_reason", "length") == "length":
                found[sample.name] = sample.value
    return found


def test_counts_and_sums_after_n_requests_are_vllms() -> None:
    page = samples(served(one_after_the_other()))
    assert page["vllm:time_to_first_token_seconds_count"] == N
    assert page["vllm:request_queue_time_seconds_count"] == N
    assert page["vllm:prompt_tokens_total"] == N * PROMPT
    assert page["vllm:generation_tokens_total"] == N * MAX_TOKENS
    assert page["vllm:request_success_total"] == N  # every request finished as "length"
    # one after the other, none waited: the queue's sum is 0; each first token came one prefill step after arrival
    assert page["vllm:request_queue_time_seconds_sum"] == 0
    assert page["vllm:time_to_first_token_seconds_sum"] == N * (2**-6 + PROMPT * 2**-12)


def test_running_waiting_and_kv_are_back_to_0_with_no_request_in_the_engine() -> None:
    # all ten at once, so that they wait and run together before they finish
    engine = served([Request(i, 0.0, prompt=PROMPT, output=MAX_TOKENS) for i in range(N)])
    registry = engine.metrics.registry
    gauges = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
    assert [registry.get_sample_value(g, LABELS) for g in gauges] == [0, 0, 0]
    assert registry.get_sample_value("vllm:request_success_total", {**LABELS, "finished_reason": "length"}) == N
    assert registry.get_sample_value("vllm:request_success_total", {**LABELS, "finished_reason": "abort"}) == 0


def test_the_families_serve_does_not_write_are_those_it_says() -> None:
    text = generate_latest(served(one_after_the_other()).metrics.registry).decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert not names & set(NOT_WRITTEN)
    assert {"vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds", "vllm:prompt_tokens"} <= names
