"""The built-in gateway and frontend metrics, and vLLM's inter-token latency under its new and its hidden name, end
to end: each program's own /metrics page (harness/stores/gateways.py, harness/stores/engines.py) scraped by a real
store, answered through the custom and external metrics APIs and the KEDA scaler, every value worked out by hand.

Histogram quantiles are Prometheus's linear interpolation inside the bucket that holds the rank: with every
observation of a page in one bucket (lo, hi], its 95th percentile is lo + 0.95 x (hi - lo).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from adapter.app import KEDA
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.settings import KedaSettings
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores import gateways
from harness.stores.kinds import on_every_store
from harness.stores.prometheus import Prometheus

pytestmark = on_every_store

CM = "/apis/custom.metrics.k8s.io/v1beta2"
EM = "/apis/external.metrics.k8s.io/v1beta1"
GATEWAY = (
    "inference_pool_saturation",
    "inference_gateway_requests_running",
    "inference_stale_endpoints",
    "inference_frontend_time_to_first_token_seconds",
    "inference_frontend_time_to_first_token_p95_seconds",
    "inference_frontend_inter_token_latency_seconds",
    "inference_frontend_inter_token_latency_p95_seconds",
)
SUFFIXES = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3}


@pytest.fixture
async def adapter(
    kube: FakeKubeAPIServer, store: Prometheus, make_adapter: Callable[..., Awaitable[Adapter]], tmp_path: Path
) -> Adapter:
    # every page of the gateway namespace scraped: the store starts scraping its targets at different times
    pages = {p.pod for p in gateways.pods()}
    store.wait_for('count by (pod) ({namespace="gateway"})', min_results=len(pages))
    keda = KedaSettings("127.0.0.1:0", stream_interval=0.1)
    return await make_adapter(settings_for(store.adapter_url, kube.kubeconfig(tmp_path / "kubeconfig"), keda=keda))


def number(quantity: str) -> float:
    scale = SUFFIXES.get(quantity[-1:], 1.0)
    return float(quantity[:-1] if quantity[-1:] in SUFFIXES else quantity) * scale


async def pods(adapter: Adapter, metric: str, namespace: str = "gateway", selector: str = "") -> dict[str, float]:
    path = f"{CM}/namespaces/{namespace}/pods/*/{metric}"
    body = await (adapter.get(path, labelSelector=selector) if selector else adapter.get(path))
    return {item["describedObject"]["name"]: number(item["value"]) for item in body["items"]}


async def one(adapter: Adapter, path: str) -> float:
    body = await adapter.get(path)
    [item] = body["items"]
    return number(item["value"])


def p95(lo: float, hi: float) -> float:
    return lo + 0.95 * (hi - lo)


async def test_each_metric_is_listed_for_pods_and_namespaces_and_as_external(adapter: Adapter) -> None:
    custom = {r["name"] for r in (await adapter.get(CM))["resources"]}
    for metric in GATEWAY:
        assert {f"pods/{metric}", f"namespaces/{metric}"} <= custom
    itl = "inference_inter_token_latency_seconds"
    assert {f"pods/{itl}", f"namespaces/{itl}", f"nodes/{itl}"} <= custom
    assert {*GATEWAY, itl} <= {r["name"] for r in (await adapter.get(EM))["resources"]}


async def test_pool_saturation_is_the_effective_stage_of_the_most_saturated_pool_and_keeps_values_above_1(
    adapter: Adapter,
) -> None:
    # epp-0: pool chat at 1.3 (decode 1.3, prefill 0.4), pool code at 0.2; epp-old-0 (v0.10.0, no stage) 0.5
    assert await pods(adapter, "inference_pool_saturation") == {"epp-0": 1.3, "epp-old-0": 0.5}
    assert await one(adapter, f"{CM}/namespaces/gateway/metrics/inference_pool_saturation") == 1.3
    assert await one(adapter, f"{EM}/namespaces/gateway/inference_pool_saturation") == 1.3


async def test_running_requests_count_each_picker_once_under_whichever_name_it_writes(adapter: Adapter) -> None:
    # epp-0 writes 12 + 4 under both names: 16, not 32; epp-old-0 7 under both; gaie-epp-0 5 under the old only
    assert await pods(adapter, "inference_gateway_requests_running") == {"epp-0": 16, "epp-old-0": 7, "gaie-epp-0": 5}
    assert await one(adapter, f"{EM}/namespaces/gateway/inference_gateway_requests_running") == 28
    assert await one(adapter, f"{CM}/namespaces/gateway/metrics/inference_gateway_requests_running") == 28


async def test_stale_endpoints(adapter: Adapter) -> None:
    assert await pods(adapter, "inference_stale_endpoints") == {"epp-0": 2, "epp-old-0": 0}
    assert await one(adapter, f"{EM}/namespaces/gateway/inference_stale_endpoints") == 2


async def test_frontend_time_to_first_token_mean_and_p95_under_either_prefix(adapter: Adapter) -> None:
    # frontend-0 (dynamo_frontend_) at 0.3 s, in Dynamo's bucket (0.22, 0.47]; frontend-1 (nv_llm_http_service_) at
    # 2 s, in (1, 2.2]
    mean = await pods(adapter, "inference_frontend_time_to_first_token_seconds")
    assert mean == {"frontend-0": pytest.approx(0.3), "frontend-1": pytest.approx(2.0)}
    tail = await pods(adapter, "inference_frontend_time_to_first_token_p95_seconds")
    assert tail == {"frontend-0": pytest.approx(p95(0.22, 0.47)), "frontend-1": pytest.approx(p95(1.0, 2.2))}
    # the namespace: as many requests at each, so the mean lies between and the 95th percentile in the slow half
    assert 0.3 < await one(adapter, f"{EM}/namespaces/gateway/inference_frontend_time_to_first_token_seconds") < 2
    namespace = await one(adapter, f"{EM}/namespaces/gateway/inference_frontend_time_to_first_token_p95_seconds")
    assert 1.0 < namespace < 2.2
    path = f"{CM}/namespaces/gateway/metrics/inference_frontend_time_to_first_token_p95_seconds"
    assert await one(adapter, path) == pytest.approx(namespace, rel=0.05)


async def test_frontend_inter_token_latency_mean_and_p95(adapter: Adapter) -> None:
    # 0.02 s in (0.013, 0.024], 0.05 s in (0.045, 0.084]
    mean = await pods(adapter, "inference_frontend_inter_token_latency_seconds")
    assert mean == {"frontend-0": pytest.approx(0.02), "frontend-1": pytest.approx(0.05)}
    tail = await pods(adapter, "inference_frontend_inter_token_latency_p95_seconds")
    assert tail == {"frontend-0": pytest.approx(p95(0.013, 0.024)), "frontend-1": pytest.approx(p95(0.045, 0.084))}


async def test_vllms_inter_token_latency_under_the_new_the_old_and_both_names(adapter: Adapter) -> None:
    got = await pods(adapter, "inference_inter_token_latency_seconds", "llm", selector="app=chat")
    assert got == {
        "vllm-0": pytest.approx(0.02),  # vllm:inter_token_latency_seconds
        "vllm-1": pytest.approx(0.03),  # engines at 0.04 and 0.02, as many tokens each
        "vllm-010-0": pytest.approx(0.05),  # vllm:time_per_output_token_seconds, before the rename
        "vllm-091-0": pytest.approx(0.02),
        "mixed-0": pytest.approx(0.02),  # its SGLang writes no such histogram
        "bad-0": pytest.approx(0.02),
        # vllm-om-0's page has no time between tokens
    }
    both = await pods(adapter, "inference_inter_token_latency_seconds", selector="app=chat")
    assert both == {"vllm-hidden-0": pytest.approx(0.03), "vllm-gw-0": pytest.approx(0.06)}
    # as many tokens at 0.03 (written twice, counted once) and at 0.06: 0.045, where counting the hidden name again
    # would make it (2 x 0.03 + 0.06) / 3 = 0.04
    assert await one(adapter, f"{EM}/namespaces/gateway/inference_inter_token_latency_seconds") == pytest.approx(
        0.045, rel=0.05
    )


# KEDA triggers' metadata, and what GetMetrics answers: exactly, or (low, high) for the namespace's 95th percentile
TRIGGERS: list[tuple[dict[str, str], float | tuple[float, float]]] = [
    ({"metricName": "inference_pool_saturation", "metricType": "external", "targetValue": "0.7"}, 1.3),
    ({"metricName": "inference_gateway_requests_running", "labelSelector": "app=epp", "targetValue": "16"}, 28),
    (
        {"metricName": "inference_frontend_time_to_first_token_p95_seconds", "metricType": "external",
         "targetValue": "0.5"},
        (1.0, 2.2),
    ),
]  # fmt: skip


async def test_through_keda(adapter: Adapter) -> None:
    """llm-d's two triggers, asked of our scaler: the pool's saturation (external, a value above 1 kept) and the
    pickers' running requests over the pods that match (pods); and Dynamo's p95 time to first token."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{adapter.client.app[KEDA].port}") as channel:
        stub: Any = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        for metadata, expected in TRIGGERS:
            ref = pb.ScaledObjectRef(name="s", namespace="gateway", scalerMetadata=metadata)
            assert (await stub.IsActive(ref)).result is True
            asked = pb.GetMetricsRequest(scaledObjectRef=ref, metricName=metadata["metricName"])
            [value] = [v.metricValueFloat for v in (await stub.GetMetrics(asked)).metricValues]
            if isinstance(expected, tuple):
                assert expected[0] < value < expected[1], metadata
            else:
                assert value == pytest.approx(expected), metadata
