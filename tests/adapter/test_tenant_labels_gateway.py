"""A tenant's page sets none of the gateway's or the frontend's signals of another namespace or pod, as
test_tenant_labels.py shows for the engines' and the GPUs': the shipped scrape configuration (Kubernetes discovery
replaced by the labels it would set) into a real Prometheus, read through the built-in rules and the KEDA scaler.

The tenant's pod ``tenant/evil-0`` is labelled for the inference engines' job and writes every series the new rules
read, naming the namespace ``idle`` (scaled to zero) and the pod ``serving/epp-0``, as written (Prometheus then
keeps the page's namespace and pod as ``exported_namespace`` and ``exported_pod``) and already renamed. serving's
answers must be its own endpoint picker's and frontend's, and idle must have none."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from adapter.app import KEDA
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.settings import KedaSettings
from harness.adapter.in_process import Adapter, settings_for
from harness.deploy.prometheus_files import discovered_pod, offline_scrape_config
from harness.kube.api import FakeKubeAPIServer
from harness.stores.engines import Page
from harness.stores.exporter import Exporter
from harness.stores.gateways import Frontend, Pool, dynamo_frontend, endpoint_picker
from harness.stores.prometheus import Prometheus, run_prometheus

CM = "/apis/custom.metrics.k8s.io/v1beta2"
EM = "/apis/external.metrics.k8s.io/v1beta1"
OWNERS = ('namespace="idle",pod="idle-0",node="gpu-node"', 'namespace="serving",pod="epp-0",node="gpu-node"')
# what serving's own pods say: its pool at 0.4, 3 running, no stale endpoint; its frontend at 0.3 s and 0.02 s
SERVING = {
    "inference_pool_saturation": 0.4,
    "inference_gateway_requests_running": 3,
    "inference_stale_endpoints": 0,
    "inference_frontend_time_to_first_token_seconds": 0.3,
    "inference_frontend_inter_token_latency_seconds": 0.02,
}


async def answers(adapter: Adapter, path: str) -> dict[str, float]:
    """Each described object's value; none where the adapter has no value (404, as for a metric with no series)."""
    resp = await adapter.client.get(path)
    body = await resp.json()
    if resp.status == 404:
        return {}
    assert resp.status == 200, body
    scales = {"u": 1e-6, "m": 1e-3, "k": 1e3}
    return {
        item.get("describedObject", {}).get("name", ""): float(item["value"].rstrip("umk"))
        * scales.get(item["value"][-1:], 1.0)
        for item in body["items"]
    }


def hostile_page(scrapes: list[int]) -> str:
    """Every series the new rules read, under every owner label, with values that would show; its histograms grow."""
    scrapes[0] += 1
    n = 1000 * scrapes[0]
    lines = []
    for owner in OWNERS:
        exported = owner.replace("namespace=", "exported_namespace=").replace("pod=", "exported_pod=")
        for labels in (owner, exported):
            lines += [
                f'llm_d_epp_flow_control_pool_saturation{{{labels},inference_pool="p",stage="effective"}} 1000',
                f'inference_extension_flow_control_pool_saturation{{{labels},inference_pool="p"}} 1000',
                f"llm_d_epp_request_running{{{labels}}} 1000",
                f"inference_objective_running_requests{{{labels}}} 1000",
                f"llm_d_epp_flow_control_stale_endpoints{{{labels}}} 1000",
            ]
            for family in ("dynamo_frontend_time_to_first_token_seconds", "dynamo_frontend_inter_token_latency_seconds",
                           "vllm:inter_token_latency_seconds"):  # fmt: skip
                lines += [f'{family}_bucket{{{labels},le="+Inf"}} {n}', f"{family}_sum{{{labels}}} {1000 * n}",
                          f"{family}_count{{{labels}}} {n}"]  # fmt: skip
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with contextlib.ExitStack() as stack:

        def serve(text: Callable[[], str]) -> str:
            return stack.enter_context(Exporter(text)).target

        picker = Page(endpoint_picker([Pool("p", {"effective": 0.4})], {"m": 3}, stale=0))
        frontend = Page(dynamo_frontend(Frontend(ttft=0.3, itl=0.02)))
        scrapes = [0]
        engines = [
            discovered_pod(serve(picker.text), "serving", "epp-0", "gpu-node", "epp", engine=True),
            discovered_pod(serve(frontend.text), "serving", "frontend-0", "gpu-node", "frontend", engine=True),
            discovered_pod(serve(lambda: hostile_page(scrapes)), "tenant", "evil-0", "tenant-node", "x", engine=True),
        ]
        shipped = offline_scrape_config(
            {"gpuscale-collector": [], "gpuscale-adapter": [], "gpuscale-inference-engines": engines}
        )
        for job in shipped["scrape_configs"]:
            job.update(scrape_interval="1s", scrape_timeout="1s")
        config = {"global": {"scrape_interval": "1s"}, "scrape_configs": shipped["scrape_configs"]}
        prom = stack.enter_context(run_prometheus(tmp_path_factory.mktemp("prometheus"), extra_config=config))
        prom.wait_for('rate(dynamo_frontend_time_to_first_token_seconds_count{pod="evil-0"}[1m]) > 0')
        prom.wait_for('rate(dynamo_frontend_time_to_first_token_seconds_count{pod="frontend-0"}[1m]) > 0')
        prom.wait_for('llm_d_epp_request_running{pod="epp-0"}')
        yield prom


@pytest.fixture
async def adapter(
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    make_adapter: Callable[..., Awaitable[Adapter]],
    tmp_path: Path,
) -> Adapter:
    for namespace in ("idle", "serving", "tenant"):
        kube.put("namespaces", namespace, {})
    for namespace, pod in (("idle", "idle-0"), ("serving", "epp-0"), ("serving", "frontend-0"), ("tenant", "evil-0")):
        kube.put("pods", pod, {"app": "x"}, namespace=namespace)
    keda = KedaSettings("127.0.0.1:0", stream_interval=0.1)
    return await make_adapter(settings_for(prometheus.url, kube.kubeconfig(tmp_path / "kubeconfig"), keda=keda))


async def test_a_tenants_page_sets_no_gateway_or_frontend_value_of_another_namespace_or_pod(adapter: Adapter) -> None:
    for metric, value in SERVING.items():
        assert await answers(adapter, f"{EM}/namespaces/serving/{metric}") == {"": pytest.approx(value)}, metric
        assert await answers(adapter, f"{CM}/namespaces/serving/metrics/{metric}") == {
            "serving": pytest.approx(value)
        }, metric
        assert await answers(adapter, f"{EM}/namespaces/idle/{metric}") == {}, metric
        assert await answers(adapter, f"{CM}/namespaces/idle/metrics/{metric}") == {}, metric
        assert await answers(adapter, f"{CM}/namespaces/idle/pods/*/{metric}") == {}, metric
    for metric in ("inference_pool_saturation", "inference_gateway_requests_running", "inference_stale_endpoints"):
        assert await answers(adapter, f"{CM}/namespaces/serving/pods/*/{metric}") == {"epp-0": SERVING[metric]}
    # the 95th percentile of serving's frontend (every request at 0.3 s, Dynamo's bucket (0.22, 0.47]); serving runs
    # no vLLM, so it has no engines' inter-token latency, whatever the page wrote for it
    path = f"{CM}/namespaces/serving/pods/*/inference_frontend_time_to_first_token_p95_seconds"
    assert await answers(adapter, path) == {"frontend-0": pytest.approx(0.22 + 0.95 * 0.25)}
    for metric in ("inference_frontend_time_to_first_token_p95_seconds", "inference_inter_token_latency_seconds"):
        assert await answers(adapter, f"{EM}/namespaces/idle/{metric}") == {}, metric
    assert await answers(adapter, f"{EM}/namespaces/serving/inference_inter_token_latency_seconds") == {}


async def test_through_keda_a_tenants_page_wakes_no_other_namespace(adapter: Adapter) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{adapter.client.app[KEDA].port}") as channel:
        stub: Any = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        for metric in ("inference_pool_saturation", "inference_gateway_requests_running"):
            metadata = {"metricName": metric, "metricType": "external", "targetValue": "1"}
            idle = pb.ScaledObjectRef(name="s", namespace="idle", scalerMetadata=metadata)
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.IsActive(idle)
            assert e.value.code() is grpc.StatusCode.NOT_FOUND, metric
            serving = pb.ScaledObjectRef(name="s", namespace="serving", scalerMetadata=metadata)
            asked = pb.GetMetricsRequest(scaledObjectRef=serving, metricName=metric)
            [value] = [v.metricValueFloat for v in (await stub.GetMetrics(asked)).metricValues]
            assert value == pytest.approx(SERVING[metric]), metric
