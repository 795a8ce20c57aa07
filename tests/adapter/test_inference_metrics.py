"""The built-in inference metrics, end to end: each engine's own /metrics page (harness/stores/engines.py) scraped by a
real store, answered through the custom and external metrics APIs, every value worked out by hand below."""

from __future__ import annotations

from typing import Any

import pytest

from harness.adapter.in_process import Adapter
from harness.stores.kinds import on_every_store
from harness.stores.prometheus import Prometheus
from harness.stores.victoria_metrics import VictoriaMetrics

pytestmark = on_every_store

CM = "/apis/custom.metrics.k8s.io/v1beta2"
EM = "/apis/external.metrics.k8s.io/v1beta1"
INFERENCE = (
    "inference_requests_waiting",
    "inference_requests_running",
    "inference_kv_cache_usage",
    "inference_time_to_first_token_seconds",
    "inference_queue_time_seconds",
)


SUFFIXES = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3}


def number(quantity: str) -> float:
    """A quantity's value, as the HPA reads it."""
    scale = SUFFIXES.get(quantity[-1:], 1.0)
    return float(quantity[:-1] if quantity[-1:] in SUFFIXES else quantity) * scale


def values(body: dict[str, Any]) -> dict[str, str]:
    return {item["describedObject"]["name"]: item["value"] for item in body["items"]}


async def pods(adapter: Adapter, metric: str, namespace: str = "llm", selector: str = "") -> dict[str, str]:
    path = f"{CM}/namespaces/{namespace}/pods/*/{metric}"
    return values(await (adapter.get(path, labelSelector=selector) if selector else adapter.get(path)))


async def external(adapter: Adapter, metric: str, namespace: str = "llm") -> list[str]:
    body = await adapter.get(f"{EM}/namespaces/{namespace}/{metric}")
    return [item["value"] for item in body["items"]]


async def test_every_inference_metric_is_listed_for_pods_namespaces_nodes_and_as_external(adapter: Adapter) -> None:
    custom = {r["name"] for r in (await adapter.get(CM))["resources"]}
    for metric in INFERENCE:
        assert {f"pods/{metric}", f"namespaces/{metric}", f"nodes/{metric}"} <= custom
    names = {r["name"] for r in (await adapter.get(EM))["resources"]}
    assert {*INFERENCE, "inference_demand", "inference_request_rate"} <= names


async def test_the_client_librarys_page_reaches_each_store_in_the_spelling_it_keeps(store: Prometheus) -> None:
    """vLLM's page made by prometheus_client: Prometheus (which asks for OpenMetrics without allowing UTF-8 names)
    gets and stores each colon as "_"; VictoriaMetrics asks for the text format and keeps the colons. The rules read
    both spellings (the tests below)."""
    names = {r["metric"]["__name__"] for r in store.query('{pod="vllm-om-0",__name__=~"vllm.num_requests_waiting"}')}
    assert names == (
        {"vllm:num_requests_waiting"} if isinstance(store, VictoriaMetrics) else {"vllm_num_requests_waiting"}
    )


async def test_requests_waiting_per_pod_from_every_engine(adapter: Adapter) -> None:
    assert await pods(adapter, "inference_requests_waiting") == {
        "vllm-0": "7",  # vLLM 0.34
        "vllm-1": "4",  # two data-parallel engines: 3 + 1
        "vllm-010-0": "2",
        "vllm-091-0": "0",
        "vllm-om-0": "6",  # served by prometheus_client: Prometheus stores vllm_num_requests_waiting
        "sglang-0": "4",  # the total only: not the per-priority shares, not tensor-parallel rank 1's copy
        "tgi-0": "5",
        "triton-0": "3",  # two models: 2 + 1
        "mixed-0": "3",  # vLLM 1 + SGLang 2 in one pod
        # bad-0's queue is NaN: no value, and no 500; garbled-0's page says "seven": the store kept no series of it
    }


async def test_requests_running_leave_out_negative_counts(adapter: Adapter) -> None:
    assert await pods(adapter, "inference_requests_running", selector="app=chat") == {
        "vllm-0": "12",
        "vllm-1": "11",
        "vllm-010-0": "4",
        "vllm-091-0": "1",
        "vllm-om-0": "9",
        "sglang-0": "6",
        "tgi-0": "8",
        "mixed-0": "5",
        # bad-0 says -1: left out, never made 0
    }


async def test_kv_cache_usage_in_percent_from_the_new_the_old_and_sglangs_gauges(adapter: Adapter) -> None:
    assert await pods(adapter, "inference_kv_cache_usage") == {
        "vllm-0": "81230m",  # 0.8123
        "vllm-1": "50",  # two engines averaged: (0.6 + 0.4) / 2
        "vllm-010-0": "50",  # 0.10 writes 0.5 under both names
        "vllm-091-0": "25",  # 0.9.1: the old name only
        "vllm-om-0": "30",
        "sglang-0": "42",
        "mixed-0": "40",  # (0.3 + 0.5) / 2
        # bad-0 says 1.7: no KV cache is 170 % full, left out
    }


async def test_times_are_the_histograms_means_over_the_last_minute(adapter: Adapter) -> None:
    # every request a stand-in engine finishes took the same time, so the mean is that time exactly
    ttft = await pods(adapter, "inference_time_to_first_token_seconds", selector="app=chat")
    mixed = number(ttft.pop("mixed-0"))
    assert ttft == {
        "vllm-0": "250m",
        "vllm-1": "375m",  # engines at 0.5 s and 0.25 s, as many requests each
        "vllm-010-0": "250m",
        "vllm-091-0": "250m",
        "vllm-om-0": "250m",
        "sglang-0": "500m",
        "bad-0": "250m",  # its histograms are sound
        # TGI writes no time to first token
    }
    # two pages in one pod, each scraped on its own: between vLLM's 0.25 s and SGLang's 0.5 s, by their rates
    assert 0.25 < mixed < 0.5
    queue = await pods(adapter, "inference_queue_time_seconds", selector="app in (chat,vision)")
    mixed = number(queue.pop("mixed-0"))
    assert queue == {
        "vllm-0": "100m",
        "vllm-1": "100m",
        "vllm-010-0": "100m",
        "vllm-091-0": "100m",
        "vllm-om-0": "100m",
        "sglang-0": "200m",
        "tgi-0": "50m",
        "triton-0": "2m",  # (8,000 + 2,000) us queued / (4 + 1) requests each scrape = 2 ms
        "bad-0": "100m",
    }
    assert 0.1 < mixed < 0.2


async def test_per_namespace_and_per_node(adapter: Adapter) -> None:
    body = await adapter.get(f"{CM}/namespaces/llm/metrics/inference_requests_waiting")
    assert [item["value"] for item in body["items"]] == ["34"]  # 7 + 4 + 2 + 0 + 6 + 4 + 5 + 3 + 3
    nodes = values(await adapter.get(f"{CM}/nodes/*/inference_requests_waiting"))
    # node-b: sglang 4, tgi 5, stack-vllm 9; node-c: triton 3, mixed 3, and edge's tgi 1 and sglang 2
    assert nodes == {"node-a": "19", "node-b": "18", "node-c": "9"}


async def test_external_values_are_the_namespaces_own(adapter: Adapter) -> None:
    assert await external(adapter, "inference_requests_waiting") == ["34"]
    assert await external(adapter, "inference_requests_running") == ["56"]  # 12 + 11 + 4 + 1 + 9 + 6 + 8 + 5
    # production-stack's router writes vllm:num_requests_running for what it routed: not counted again
    assert await external(adapter, "inference_requests_running", "stack") == ["12"]
    assert await external(adapter, "inference_requests_waiting", "stack") == ["9"]


async def test_demand_counts_the_gateway_queue_once_and_the_engines_queues(adapter: Adapter) -> None:
    # the endpoint picker writes its queue (6) under the new and the old name: counted once, plus the engines' 34
    assert await external(adapter, "inference_demand") == ["40"]
    assert await external(adapter, "inference_demand", "stack") == ["9"]  # the router keeps no queue


@pytest.mark.usefixtures("minute_of_engine_history")
async def test_request_rate_is_counted_at_the_front_door(adapter: Adapter) -> None:
    """The endpoint picker's counter (3/s, written twice) in llm; production-stack's router's (2/s) in stack: not the
    engines' own counters as well, which count the same requests again. With nothing in front (edge), the engines'
    own: TGI's 2/s and SGLang's /generate 1.5/s, without the scrapes of its /metrics."""
    for namespace, expected in (("llm", 3.0), ("stack", 2.0), ("edge", 3.5)):
        (value,) = await external(adapter, "inference_request_rate", namespace)
        assert number(value) == pytest.approx(expected, rel=0.1)


async def test_a_metric_label_selector_narrows_an_external_value(adapter: Adapter) -> None:
    body = await adapter.get(f"{EM}/namespaces/llm/inference_requests_waiting", labelSelector="pod in (vllm-0,tgi-0)")
    assert [item["value"] for item in body["items"]] == ["12"]
