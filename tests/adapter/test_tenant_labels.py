"""A pod's own labels never name the owner of a scaling signal: a hostile page scraped by the shipped scrape
configuration (manifests/prometheus/scrape-configs.yaml, Kubernetes discovery replaced by the labels it would set)
into a real Prometheus that runs the shipped recording rules, read through the built-in rules.

The tenant's pod ``tenant/evil-0`` (node ``tenant-node``) is labelled for the inference engines' job, as any tenant
may label its pods, and writes series naming the namespace ``idle`` (nothing running: scaled to zero), the pod
``serving/engine-0`` and the node ``gpu-node``: as it writes them (``namespace=...``, Prometheus then renames them
``exported_namespace``), already renamed (``exported_namespace=...``), and with ``job="gpuscale-collector"``. The
answers for idle, serving/engine-0 and gpu-node must be what the collector and the real engine say, as if the page
did not exist."""

from __future__ import annotations

import contextlib
import math
import time
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
from harness.deploy.prometheus_files import RULES, discovered_pod, offline_scrape_config
from harness.kube.api import FakeKubeAPIServer
from harness.stores.exporter import Exporter
from harness.stores.prometheus import Prometheus, run_prometheus

CM = "/apis/custom.metrics.k8s.io/v1beta2"
EM = "/apis/external.metrics.k8s.io/v1beta1"
OWNERS = 'namespace="idle",pod="idle-0",node="gpu-node",job="gpuscale-collector"'
VICTIM_GPU = 'gpu="0",UUID="GPU-0",Hostname="gpu-node"'

# The collector on gpu-node: serving/engine-0 holds its GPU.
COLLECTOR_PAGE = f"""\
DCGM_FI_DEV_GPU_UTIL{{{VICTIM_GPU},namespace="serving",pod="engine-0",container="main"}} 40
DCGM_FI_DEV_FB_USED{{{VICTIM_GPU},namespace="serving",pod="engine-0",container="main"}} 1000
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{VICTIM_GPU},namespace="serving",pod="engine-0",container="main"}} 0.25
"""
# serving/engine-0's vLLM: 2 waiting, 3 running, half its KV cache, no request arriving
ENGINE_PAGE = """\
vllm:num_requests_waiting{model_name="m",engine="0"} 2
vllm:num_requests_running{model_name="m",engine="0"} 3
vllm:kv_cache_usage_perc{model_name="m",engine="0"} 0.5
vllm:num_incoming_requests_total{model_name="m",engine="0"} 7
"""
# burst: one engine with 3 waiting, one that reports an infinite queue
BURST_PAGE = 'vllm:num_requests_waiting{model_name="m",engine="0"} 3\n'
INFINITE_PAGE = 'vllm:num_requests_waiting{model_name="m",engine="0"} +Inf\n'


def hostile_page(started: float) -> str:
    """What the tenant's pod serves: every owner label the rules have read, with values that would show."""
    arrivals = 1000 * (time.monotonic() - started)  # a counter growing 1000/s
    lines = []
    for owner in (OWNERS, OWNERS.replace("idle-0", "engine-0").replace('"idle"', '"serving"')):
        exported = owner.replace("namespace=", "exported_namespace=").replace("pod=", "exported_pod=")
        exported = exported.replace("node=", "exported_node=")
        for labels in (owner, exported):
            lines += [
                f"vllm:num_requests_waiting{{{labels}}} 1000",
                f"vllm:num_requests_running{{{labels}}} 1000",
                f"vllm:kv_cache_usage_perc{{{labels}}} 1",
                f"llm_d_epp_flow_control_queue_size{{{labels}}} 1000",
                f"vllm:num_incoming_requests_total{{{labels}}} {arrivals}",
                f"DCGM_FI_DEV_GPU_UTIL{{{VICTIM_GPU},{labels}}} 33369667",
                f"DCGM_FI_DEV_FB_USED{{{VICTIM_GPU},{labels}}} 33369667",
                f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{VICTIM_GPU},{labels}}} 1",
            ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    started = time.monotonic()
    with contextlib.ExitStack() as stack:

        def serve(page: str | Callable[[], str]) -> str:
            return stack.enter_context(Exporter(page)).target

        engines = [
            discovered_pod(serve(ENGINE_PAGE), "serving", "engine-0", "gpu-node", "vllm", engine=True),
            discovered_pod(serve(BURST_PAGE), "burst", "engine-a", "burst-node", "vllm", engine=True),
            discovered_pod(serve(INFINITE_PAGE), "burst", "engine-inf", "burst-node", "vllm", engine=True),
            discovered_pod(serve(lambda: hostile_page(started)), "tenant", "evil-0", "tenant-node", "x", engine=True),
        ]
        collector = discovered_pod(serve(COLLECTOR_PAGE), "gpuscale", "gpuscale-collector-x1", "gpu-node",
                                   "gpuscale-collector", engine=False)  # fmt: skip
        shipped = offline_scrape_config(
            {"gpuscale-collector": [collector], "gpuscale-adapter": [], "gpuscale-inference-engines": engines}
        )
        for job in shipped["scrape_configs"]:
            job.update(scrape_interval="1s", scrape_timeout="1s")  # the shipped 5 s, so the test takes seconds
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": shipped["scrape_configs"],
        }
        prom = stack.enter_context(run_prometheus(tmp_path_factory.mktemp("prometheus"), extra_config=config))
        # the hostile page scraped, its counter twice (a rate), and the recording rules run over it since
        prom.wait_for('count_over_time(vllm:num_requests_waiting{pod="evil-0"}[1m]) >= 3')
        prom.wait_for('rate(vllm:num_incoming_requests_total{pod="evil-0"}[1m]) > 0')
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="evil-0"}')
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="engine-0"}')
        prom.wait_for("count_over_time(namespace_pod:dcgm_gpu_utilization:avg[1m]) >= 3")
        prom.wait_for('count_over_time(vllm:num_requests_waiting{pod="engine-inf"}[1m]) >= 2')
        prom.wait_for('rate(vllm:num_incoming_requests_total{pod="engine-0"}[1m]) == 0')
        yield prom


@pytest.fixture
async def adapter(
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    make_adapter: Callable[..., Awaitable[Adapter]],
    tmp_path: Path,
) -> Adapter:
    for namespace in ("idle", "serving", "burst", "tenant"):
        kube.put("namespaces", namespace, {})
    for namespace, pod in (("idle", "idle-0"), ("serving", "engine-0"), ("burst", "engine-a"),
                           ("burst", "engine-inf"), ("tenant", "evil-0")):  # fmt: skip
        kube.put("pods", pod, {"app": "vllm"}, namespace=namespace)
    for node in ("gpu-node", "burst-node", "tenant-node"):
        kube.put("nodes", node, {})
    keda = KedaSettings("127.0.0.1:0", stream_interval=0.1)
    return await make_adapter(settings_for(prometheus.url, kube.kubeconfig(tmp_path / "kubeconfig"), keda=keda))


async def answers(adapter: Adapter, path: str) -> dict[str, float]:
    """Each described object's value; none where the adapter has no value (404, as for a metric with no series)."""
    resp = await adapter.client.get(path)
    body = await resp.json()
    if resp.status == 404:
        return {}
    assert resp.status == 200, body
    return {item.get("describedObject", {}).get("name", ""): quantity(item["value"]) for item in body["items"]}


def quantity(text: str) -> float:
    scale = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3}.get(text[-1:], 1.0)
    return float(text[:-1] if text[-1:] in "numk" else text) * scale


async def test_a_tenants_page_sets_no_gpu_value_of_another_pod_namespace_or_node(adapter: Adapter) -> None:
    """Before: idle/idle-0 got gpu_utilization 33369667 from the tenant's page, idle too, and gpu-node (whose
    Hostname the page wrote) the same number instead of the collector's 40."""
    for metric, value in (("gpu_utilization", 40), ("gpu_memory_used", 1000), ("gpu_tensor_active", 0.25)):
        assert await answers(adapter, f"{CM}/namespaces/serving/pods/*/{metric}") == {"engine-0": value}, metric
        assert await answers(adapter, f"{CM}/namespaces/idle/pods/*/{metric}") == {}, metric
        assert await answers(adapter, f"{CM}/namespaces/idle/metrics/{metric}") == {}, metric
        assert await answers(adapter, f"{CM}/namespaces/serving/metrics/{metric}") == {"serving": value}, metric
        assert await answers(adapter, f"{EM}/namespaces/idle/{metric}") == {}, metric
        assert await answers(adapter, f"{EM}/namespaces/serving/{metric}") == {"": value}, metric
        assert await answers(adapter, f"{CM}/nodes/gpu-node/{metric}") == {"gpu-node": value}, metric
        # the tenant's own pod and namespace have no GPU either: the page is not a GPU exporter
        assert await answers(adapter, f"{CM}/namespaces/tenant/pods/*/{metric}") == {}, metric


async def test_a_tenants_page_sets_no_inference_value_of_another_pod(adapter: Adapter) -> None:
    """Before: idle/idle-0, a pod with no engine, had 1000 requests waiting and running and its KV cache full."""
    for metric, value in (
        ("inference_requests_waiting", 2),
        ("inference_requests_running", 3),
        ("inference_kv_cache_usage", 50),
    ):
        assert await answers(adapter, f"{CM}/namespaces/serving/pods/*/{metric}") == {"engine-0": value}, metric
        assert await answers(adapter, f"{CM}/namespaces/idle/pods/*/{metric}") == {}, metric
        assert await answers(adapter, f"{CM}/nodes/gpu-node/{metric}") == {"gpu-node": value}, metric


async def test_a_tenants_page_sets_no_demand_or_request_rate_of_another_namespace(adapter: Adapter) -> None:
    """Before: idle, scaled to zero, had an inference_demand of 1000 (the example HPA: 200 replicas) and a request rate
    of 1000/s; serving's demand 2 became 2002."""
    assert await answers(adapter, f"{EM}/namespaces/idle/inference_demand") == {}
    assert await answers(adapter, f"{EM}/namespaces/idle/inference_request_rate") == {}
    assert await answers(adapter, f"{EM}/namespaces/idle/inference_requests_waiting") == {}
    assert await answers(adapter, f"{CM}/namespaces/idle/metrics/inference_requests_waiting") == {}
    assert await answers(adapter, f"{EM}/namespaces/serving/inference_demand") == {"": 2}
    assert await answers(adapter, f"{EM}/namespaces/serving/inference_request_rate") == {"": 0}
    assert await answers(adapter, f"{EM}/namespaces/serving/inference_requests_waiting") == {"": 2}
    # serving's engine finished nothing and nothing arrives: its capacity demand is its KV use, 50, times (3 running
    # + 2 waiting) / 3; 2 wait: active
    assert await answers(adapter, f"{EM}/namespaces/idle/inference_capacity_demand") == {}
    assert await answers(adapter, f"{EM}/namespaces/idle/inference_activity") == {}
    demand = await answers(adapter, f"{EM}/namespaces/serving/inference_capacity_demand")
    assert demand == pytest.approx({"": 50 * 5 / 3}, rel=1e-6)
    assert await answers(adapter, f"{EM}/namespaces/serving/inference_activity") == {"": 1}


async def test_through_keda_a_tenants_page_wakes_no_other_namespace(adapter: Adapter) -> None:
    """Before: KEDA's IsActive for idle's inference_demand was true, and GetMetrics 1000 (2000 here)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{adapter.client.app[KEDA].port}") as channel:
        stub: Any = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        for metric in ("inference_demand", "inference_request_rate", "inference_capacity_demand", "inference_activity"):
            idle = pb.ScaledObjectRef(
                name="s",
                namespace="idle",
                scalerMetadata={"metricName": metric, "metricType": "external", "targetValue": "5"},
            )
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.IsActive(idle)
            assert e.value.code() is grpc.StatusCode.NOT_FOUND, metric
        serving = pb.ScaledObjectRef(
            name="s",
            namespace="serving",
            scalerMetadata={"metricName": "inference_demand", "metricType": "external", "targetValue": "5"},
        )
        assert (await stub.IsActive(serving)).result is True
        asked = pb.GetMetricsRequest(scaledObjectRef=serving, metricName="inference_demand")
        assert [v.metricValueFloat for v in (await stub.GetMetrics(asked)).metricValues] == [2]


async def test_one_engine_reporting_an_infinite_queue_leaves_the_others_demand(adapter: Adapter) -> None:
    """Before: the sum was +Inf, which no quantity can carry, so burst had no inference_demand at all."""
    assert await answers(adapter, f"{EM}/namespaces/burst/inference_demand") == {"": 3}
    assert await answers(adapter, f"{EM}/namespaces/burst/inference_requests_waiting") == {"": 3}
    assert await answers(adapter, f"{CM}/namespaces/burst/metrics/inference_requests_waiting") == {"burst": 3}
    pods = await answers(adapter, f"{CM}/namespaces/burst/pods/*/inference_requests_waiting")
    assert pods == {"engine-a": 3}
    assert not any(math.isinf(v) for v in pods.values())
