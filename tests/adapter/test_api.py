"""The metrics APIs' contract, end to end: a real Prometheus, the Kubernetes API faked at its boundary."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapter.naming.resources import GroupResource
from adapter.query.selectors import parse_selector
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.exporter import FB, GPU, Exporter, exposition
from harness.stores.kinds import PROMETHEUS, VICTORIA_METRICS, on_every_store, run_store
from harness.stores.prometheus import Prometheus
from harness.stores.victoria_metrics import VictoriaMetrics
from harness.waiting import wait_until

pytestmark = on_every_store

CM = "/apis/custom.metrics.k8s.io"
EM = "/apis/external.metrics.k8s.io"
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def values(body: dict[str, Any]) -> dict[str, str]:
    return {item["describedObject"]["name"]: item["value"] for item in body["items"]}


async def test_api_group_list_and_groups(adapter: Adapter) -> None:
    body = await adapter.get("/apis")
    assert body["kind"] == "APIGroupList"
    assert body["apiVersion"] == "v1"
    groups = {g["name"]: g for g in body["groups"]}
    custom = groups["custom.metrics.k8s.io"]
    assert [v["version"] for v in custom["versions"]] == ["v1beta2", "v1beta1"]
    assert custom["preferredVersion"] == {"groupVersion": "custom.metrics.k8s.io/v1beta2", "version": "v1beta2"}
    assert groups["external.metrics.k8s.io"]["preferredVersion"]["version"] == "v1beta1"
    group = await adapter.get("/apis/custom.metrics.k8s.io")
    assert group["kind"] == "APIGroup"
    assert group["name"] == "custom.metrics.k8s.io"


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
async def test_resource_list_names_every_gpu_metric_for_pods_namespaces_and_nodes(
    adapter: Adapter, version: str
) -> None:
    body = await adapter.get(f"{CM}/{version}")
    assert body["kind"] == "APIResourceList"
    assert body["groupVersion"] == f"custom.metrics.k8s.io/{version}"
    resources = {r["name"]: r for r in body["resources"]}
    for metric in ("gpu_utilization", "gpu_memory_used", "gpu_tensor_active"):
        assert resources[f"pods/{metric}"]["namespaced"] is True
        assert resources[f"namespaces/{metric}"]["namespaced"] is False
        assert resources[f"nodes/{metric}"]["namespaced"] is False
    for r in body["resources"]:
        assert r["kind"] == "MetricValueList"
        assert r["verbs"] == ["get"]
        assert r["singularName"] == ""


async def test_external_resource_list(adapter: Adapter) -> None:
    body = await adapter.get(f"{EM}/v1beta1")
    assert body["groupVersion"] == "external.metrics.k8s.io/v1beta1"
    assert {r["name"] for r in body["resources"]} == {
        "gpu_utilization",
        "gpu_memory_used",
        "gpu_engine_active",
        "gpu_sm_active",
        "gpu_tensor_active",
        "gpu_dram_active",
        "inference_requests_waiting",
        "inference_requests_running",
        "inference_kv_cache_usage",
        "inference_time_to_first_token_seconds",
        "inference_queue_time_seconds",
        "inference_demand",
        "inference_request_rate",
        "inference_capacity_demand",
        "inference_activity",
        "inference_capacity_forecast",
        "inference_pool_saturation",
        "inference_gateway_requests_running",
        "inference_stale_endpoints",
        "inference_frontend_time_to_first_token_seconds",
        "inference_frontend_time_to_first_token_p95_seconds",
        "inference_frontend_inter_token_latency_seconds",
        "inference_frontend_inter_token_latency_p95_seconds",
        "inference_inter_token_latency_seconds",
    }
    assert {r["kind"] for r in body["resources"]} == {"ExternalMetricValueList"}


async def test_hpa_pods_request_v1beta2_returns_exactly_the_selected_pods(adapter: Adapter) -> None:
    # the HPA's request, * percent-encoded, Accept asking for protobuf first
    resp = await adapter.client.get(
        f"{CM}/v1beta2/namespaces/ml/pods/%2A/gpu_utilization?labelSelector=app%3Dtrainer",
        headers={"Accept": "application/vnd.kubernetes.protobuf, */*"},
    )
    assert resp.status == 200
    body = await resp.json()
    assert body["kind"] == "MetricValueList"
    assert body["apiVersion"] == "custom.metrics.k8s.io/v1beta2"
    assert body["metadata"] == {}
    # trainer-9 has series in Prometheus but no pod; broken-0 matches but reads NaN; other-0 has another label
    assert values(body) == {"trainer-0": "88", "trainer-1": "40"}
    item = body["items"][0]
    assert item["describedObject"] == {"kind": "Pod", "namespace": "ml", "name": "trainer-0", "apiVersion": "v1"}
    assert item["metric"] == {"name": "gpu_utilization", "selector": None}
    assert item["windowSeconds"] == 60
    assert TIMESTAMP.match(item["timestamp"])
    assert set(item) == {"describedObject", "metric", "timestamp", "windowSeconds", "value"}


async def test_v1beta1_items_have_metric_name_window_and_selector(adapter: Adapter) -> None:
    body = await adapter.get(f"{CM}/v1beta1/namespaces/ml/pods/*/gpu_utilization", labelSelector="app=trainer")
    assert body["apiVersion"] == "custom.metrics.k8s.io/v1beta1"
    item = body["items"][0]
    assert set(item) == {"describedObject", "metricName", "timestamp", "window", "value", "selector"}
    assert item["metricName"] == "gpu_utilization"
    assert item["window"] == 60
    assert item["selector"] is None


async def test_timestamps_are_prometheus_sample_times(adapter: Adapter) -> None:
    body = await adapter.get(f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization", labelSelector="app=trainer")
    explained = await adapter.get(
        f"/explain{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization", labelSelector="app=trainer"
    )
    sample_times = {s["timestamp"] for q in explained["queries"] for s in q["samples"]}
    assert {item["timestamp"] for item in body["items"]} <= sample_times


async def test_wildcard_without_selector_returns_every_pod_of_the_namespace_with_a_value(adapter: Adapter) -> None:
    body = await adapter.get(f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization")
    assert values(body) == {"trainer-0": "88", "trainer-1": "40", "other-0": "10", "share-a": "70", "share-b": "18"}


@pytest.mark.parametrize(
    ("path", "kind"),
    [(f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization", "pods.custom.metrics.k8s.io"),
     (f"{EM}/v1beta1/namespaces/ml/gpu_utilization", "gpu_utilization.external.metrics.k8s.io")],
)  # fmt: skip
async def test_a_watch_of_many_objects_is_405_as_the_api_server_answers_it(
    adapter: Adapter, path: str, kind: str
) -> None:
    body = await adapter.get(path, 405, watch="1")
    assert (body["reason"], body["message"]) == (
        "MethodNotAllowed",
        f'watch is not supported on resources of kind "{kind}"',
    )
    assert (await adapter.get(path, watch="0"))["kind"].endswith("List")


async def test_set_based_selectors(adapter: Adapter) -> None:
    body = await adapter.get(f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization", labelSelector="app in (share,other)")
    assert values(body) == {"other-0": "10", "share-a": "70", "share-b": "18"}
    body = await adapter.get(
        f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization", labelSelector="app notin (trainer),app"
    )
    assert values(body) == {"other-0": "10", "share-a": "70", "share-b": "18"}
    body = await adapter.get(f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization", labelSelector="!app")
    assert body["items"] == []


async def test_metric_label_selector_narrows_the_series_and_is_echoed(adapter: Adapter) -> None:
    body = await adapter.get(
        f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization", labelSelector="app=trainer", metricLabelSelector="gpu=0"
    )
    assert values(body) == {"trainer-0": "95500m"}
    assert body["items"][0]["metric"]["selector"] == {"matchLabels": {"gpu": "0"}}
    body = await adapter.get(
        f"{CM}/v1beta1/namespaces/ml/pods/*/gpu_utilization",
        labelSelector="app=trainer",
        metricLabelSelector="gpu in (1,2)",
    )
    assert values(body) == {"trainer-0": "80500m", "trainer-1": "40"}
    assert body["items"][0]["selector"] == {
        "matchExpressions": [{"key": "gpu", "operator": "In", "values": ["1", "2"]}]
    }


async def test_single_object_gives_exactly_one_item(adapter: Adapter) -> None:
    body = await adapter.get(f"{CM}/v1beta2/namespaces/ml/pods/trainer-0/gpu_utilization")
    assert values(body) == {"trainer-0": "88"}
    body = await adapter.get(f"{CM}/v1beta2/namespaces/ml/pods/trainer-0/gpu_tensor_active")
    assert values(body) == {"trainer-0": "714m"}
    body = await adapter.get(f"{CM}/v1beta2/namespaces/ml/pods/trainer-0/gpu_memory_used")
    assert values(body) == {"trainer-0": "41984"}


async def test_single_object_without_a_value_is_not_found(adapter: Adapter) -> None:
    body = await adapter.get(f"{CM}/v1beta2/namespaces/ml/pods/ghost/gpu_utilization", status=404)
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the metric gpu_utilization for pods ghost in namespace ml",
        "reason": "NotFound",
        "code": 404,
    }


async def test_nan_is_dropped_with_a_log_line(
    adapter: Adapter, store: Prometheus, caplog: pytest.LogCaptureFixture
) -> None:
    await adapter.get(f"{CM}/v1beta2/namespaces/ml/pods/broken-0/gpu_utilization", status=404)
    if isinstance(store, VictoriaMetrics):  # it ignores NaN samples when it ingests them: none reaches the adapter
        assert store.query('DCGM_FI_DEV_GPU_UTIL{pod="broken-0"}') == []
        assert "= NaN" not in caplog.text
        return
    assert "dropped gpu_utilization = NaN for broken-0" in caplog.text
    dropped = adapter.components.metrics.registry.get_sample_value(
        "gpuscale_adapter_dropped_samples_total", {"reason": "nan"}
    )
    assert dropped is not None
    assert dropped >= 1


async def test_a_nan_reading_in_a_namespace_average(adapter: Adapter, store: Prometheus) -> None:
    body = await adapter.get(f"{CM}/v1beta2/namespaces/*/gpu_utilization")
    if isinstance(store, VictoriaMetrics):
        # broken-0's NaN was never stored: ml is the average of the 7 GPUs that read a number, 413 / 7
        assert values(body) == {"ml": "59", "serving": "70"}
    else:  # the NaN makes ml's average NaN, which is left out
        assert values(body) == {"serving": "70"}


async def test_labels_renamed_by_a_scrape_without_honor_labels_are_understood(adapter: Adapter) -> None:
    body = await adapter.get(f"{CM}/v1beta2/namespaces/serving/pods/*/gpu_utilization", labelSelector="app=infer")
    assert values(body) == {"infer-0": "70"}
    assert body["items"][0]["describedObject"]["namespace"] == "serving"


async def test_the_namespace_object_itself(adapter: Adapter) -> None:
    for path in (f"{CM}/v1beta2/namespaces/ml/metrics/gpu_memory_used", f"{CM}/v1beta2/namespaces/ml/gpu_memory_used"):
        body = await adapter.get(path)
        assert values(body) == {"ml": "43484"}
        assert body["items"][0]["describedObject"] == {"kind": "Namespace", "name": "ml", "apiVersion": "v1"}


async def test_namespaces_wildcard_merges_both_label_spellings_and_filters_by_labels(adapter: Adapter) -> None:
    body = await adapter.get(f"{CM}/v1beta2/namespaces/*/gpu_memory_used")
    assert values(body) == {"ml": "43484", "serving": "8192"}
    body = await adapter.get(f"{CM}/v1beta2/namespaces/*/gpu_memory_used", labelSelector="team=inference")
    assert values(body) == {"serving": "8192"}


async def test_nodes_take_one_value_per_gpu_even_when_shared(adapter: Adapter) -> None:
    body = await adapter.get(f"{CM}/v1beta1/nodes/*/gpu_utilization")
    # node-c: GPU-c0 70 and the shared GPU-c1 counted once at its device value 88; node-d reads NaN
    assert values(body) == {"node-a": "72", "node-b": "54500m", "node-c": "79"}
    assert body["items"][0]["describedObject"] == {"kind": "Node", "name": "node-a", "apiVersion": "v1"}
    body = await adapter.get(f"{CM}/v1beta2/nodes/*/gpu_utilization", labelSelector="pool=train")
    assert values(body) == {"node-a": "72", "node-b": "54500m"}
    body = await adapter.get(f"{CM}/v1beta2/nodes/node-a/gpu_memory_used")
    assert values(body) == {"node-a": "43484"}


async def test_external_metrics_from_the_default_rules(adapter: Adapter) -> None:
    body = await adapter.get(f"{EM}/v1beta1/namespaces/ml/gpu_utilization", labelSelector="Hostname=node-a")
    assert body["kind"] == "ExternalMetricValueList"
    assert body["apiVersion"] == "external.metrics.k8s.io/v1beta1"
    assert len(body["items"]) == 1
    item = body["items"][0]
    assert item["metricName"] == "gpu_utilization"
    assert item["metricLabels"] == {}
    assert item["value"] == "72"
    assert TIMESTAMP.match(item["timestamp"])
    body = await adapter.get(f"{EM}/v1beta1/namespaces/ml/gpu_utilization", labelSelector="Hostname in (node-a,node-b)")
    assert [i["value"] for i in body["items"]] == ["65"]


async def test_external_metric_names_match_case_insensitively(adapter: Adapter) -> None:
    body = await adapter.get(f"{EM}/v1beta1/namespaces/ml/GPU_Utilization", labelSelector="Hostname=node-c")
    # ml's series on node-c: the shares of GPU-c1, (70 + 18) / 2
    assert [(i["metricName"], i["value"]) for i in body["items"]] == [("GPU_Utilization", "44")]


def _tenant_gpu(uuid: str, host: str, **owner: str) -> dict[str, str]:
    return {"gpu": uuid[-1], "UUID": uuid, "Hostname": host, "modelName": "NVIDIA H200", **owner}


# Each GPU's utilization and memory is its own: the memory a power of two, so a sum names the GPUs it took in. Each
# namespace owns one GPU the collector labelled itself and one an exporter scraped without honorLabels labelled.
_EXPORTER_POD = {"pod": "dcgm-x", "namespace": "gpu-system"}
TENANT_GPUS = {
    "ml-own": (10, 1, _tenant_gpu("GPU-a0", "node-a", pod="train-0", namespace="ml")),
    "ml-own-2": (20, 2, _tenant_gpu("GPU-a1", "node-a", pod="train-1", namespace="ml")),
    "ml-exported": (30, 4, _tenant_gpu("GPU-c0", "node-c", exported_pod="infer-ml-0", exported_namespace="ml",
                                       **_EXPORTER_POD)),
    "serving-own": (50, 8, _tenant_gpu("GPU-b0", "node-b", pod="serve-0", namespace="serving")),
    "serving-exported": (70, 16, _tenant_gpu("GPU-c1", "node-c", exported_pod="infer-0", exported_namespace="serving",
                                             **_EXPORTER_POD)),
}  # fmt: skip
TENANT_LINES = [
    *((GPU, labels, str(util)) for util, _, labels in TENANT_GPUS.values()),
    *((FB, labels, str(mib)) for _, mib, labels in TENANT_GPUS.values()),
]


@pytest.fixture(scope="module")
def tenant_stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Prometheus], Prometheus]]:
    """A store of the given store's kind scraping only ``TENANT_LINES``, started once per kind."""
    with contextlib.ExitStack() as stack:
        page = stack.enter_context(Exporter(exposition(TENANT_LINES)))
        started: dict[str, Prometheus] = {}

        def like(store: Prometheus) -> Prometheus:
            kind = VICTORIA_METRICS if isinstance(store, VictoriaMetrics) else PROMETHEUS
            if kind not in started:
                started[kind] = stack.enter_context(run_store(kind, tmp_path_factory.mktemp(kind), [page.target]))
                for name in (GPU, FB):
                    started[kind].wait_for(name, min_results=len(TENANT_GPUS))
            return started[kind]

        yield like


# what each namespace is answered, by selector: only its own GPUs, whatever the selector names (the rule for GPUs the
# collector labelled comes first; the one for exported_namespace answers where the first has no series)
TENANT_ANSWERS = {
    ("ml", ""): ["ml-own", "ml-own-2"],
    ("ml", "namespace=serving"): [],
    ("ml", "exported_namespace=serving"): [],
    ("ml", "namespace in (ml,serving)"): ["ml-own", "ml-own-2"],
    ("ml", "exported_pod=infer-0"): [],
    ("ml", "Hostname=node-c"): ["ml-exported"],
    ("ml", "namespace!=ml"): ["ml-exported"],
    ("ml", "pod=serve-0"): [],
    ("serving", ""): ["serving-own"],
    ("serving", "namespace=ml"): [],
    ("serving", "exported_namespace=ml"): [],
    ("serving", "Hostname=node-a"): [],
    ("serving", "Hostname in (node-b,node-c)"): ["serving-own"],
    ("serving", "Hostname=node-c"): ["serving-exported"],
    ("gpu-system", ""): [],
    ("gpu-system", "exported_namespace=serving"): [],
}


@pytest.mark.parametrize(("namespace", "selector"), list(TENANT_ANSWERS))
async def test_no_external_request_reads_another_namespace(
    store: Prometheus,
    tenant_stores: Callable[[Prometheus], Prometheus],
    kube: FakeKubeAPIServer,
    make_adapter: Callable[..., Awaitable[Adapter]],
    tmp_path: Path,
    namespace: str,
    selector: str,
) -> None:
    """A namespace's external values are made of its own GPUs only, whatever the selector names: every built-in
    external rule is scoped to the request's namespace. Each GPU's value is distinct, and the memory a power of two,
    so a GPU of another namespace taken in shows in the answer itself."""
    tenants = tenant_stores(store)
    adapter = await make_adapter(settings_for(tenants.adapter_url, kube.kubeconfig(tmp_path / "kubeconfig")))
    own = [TENANT_GPUS[name] for name in TENANT_ANSWERS[namespace, selector]]
    expected = {
        "gpu_utilization": [f"{sum(util for util, _, _ in own) / len(own):g}"] if own else [],
        "gpu_memory_used": [str(sum(mib for _, mib, _ in own))] if own else [],
    }
    for metric, values_expected in expected.items():
        body = await adapter.get(f"{EM}/v1beta1/namespaces/{namespace}/{metric}", labelSelector=selector)
        assert body["kind"] == "ExternalMetricValueList"
        assert [i["value"] for i in body["items"]] == values_expected, (metric, body["items"])
        report = await adapter.get(f"/explain{EM}/v1beta1/namespaces/{namespace}/{metric}", labelSelector=selector)
        assert all(q["promql"].count(f'namespace="{namespace}"') == 1 for q in report["queries"]), report["queries"]


async def test_wildcard_answers_follow_pod_labels_as_they_change(adapter: Adapter, kube: FakeKubeAPIServer) -> None:
    path = f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization"
    pods = adapter.components.objects.reflectors[GroupResource("pods")]
    kube.put("pods", "other-0", {"app": "trainer"}, namespace="ml")
    await wait_until(lambda: "other-0" in pods.names("ml", parse_selector("app=trainer")))
    assert values(await adapter.get(path, labelSelector="app=trainer")) == {
        "trainer-0": "88",
        "trainer-1": "40",
        "other-0": "10",
    }
    kube.delete("pods", "trainer-1", namespace="ml")
    await wait_until(lambda: "trainer-1" not in pods.names("ml", parse_selector("")))
    assert values(await adapter.get(path, labelSelector="app=trainer")) == {"trainer-0": "88", "other-0": "10"}


async def test_health_endpoints(adapter: Adapter) -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        resp = await adapter.client.get(path)
        assert resp.status == 200
        assert await resp.text() == "ok"
