"""The explain endpoint: which rule, which PromQL, what Prometheus said, and why nothing came back."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from harness.adapter.in_process import Adapter

CM = "/apis/custom.metrics.k8s.io/v1beta2"
EXPLAIN = f"/explain{CM}"


def why(report: dict[str, Any]) -> str:
    return "\n".join(report["why"])


async def test_a_successful_request_shows_rule_query_samples_and_missing_objects(adapter: Adapter) -> None:
    report = await adapter.get(f"{EXPLAIN}/namespaces/ml/pods/*/gpu_utilization", labelSelector="app=trainer")
    assert report["parsed"]["labelSelector"] == "app=trainer"
    assert report["rules"][0] == {"rule": "built-in default rules: rules[2]", "series": "DCGM_FI_DEV_GPU_UTIL"}
    assert report["objects"] == {"source": "watch cache", "count": 3, "names": ["broken-0", "trainer-0", "trainer-1"]}
    (query,) = report["queries"]
    assert query["promql"] == (
        'avg by (pod) (DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod=~"broken-0|trainer-0|trainer-1",'
        'job=~"gpuscale-collector|(nvidia-)?dcgm-exporter",exported_pod=""})'
    )
    assert {s["labels"]["pod"]: s["value"] for s in query["samples"]} == {
        "trainer-0": "88",
        "trainer-1": "40",
        "broken-0": "NaN",
    }
    assert query["dropped"] == [{"object": "broken-0", "value": "NaN"}]
    assert [i["describedObject"]["name"] for i in report["answer"]["items"]] == ["trainer-0", "trainer-1"]
    assert "answered 2 item(s)" in why(report)
    assert "objects matching labelSelector without a value: broken-0" in why(report)


async def test_a_series_name_asked_as_a_metric_is_pointed_to_its_api_name(adapter: Adapter) -> None:
    report = await adapter.get(f"{EXPLAIN}/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL")
    assert report["answer"]["reason"] == "NotFound"
    assert "DCGM_FI_DEV_GPU_UTIL is a Prometheus series name; the rules expose it as gpu_utilization" in why(report)


async def test_a_typo_gets_similar_names(adapter: Adapter) -> None:
    report = await adapter.get(f"{EXPLAIN}/namespaces/ml/pods/*/gpu_utilisation")
    assert "similar metric names: gpu_utilization" in why(report)


async def test_a_metric_asked_for_the_wrong_resource(adapter: Adapter) -> None:
    report = await adapter.get(f"{EXPLAIN}/namespaces/ml/deployments.apps/web/gpu_utilization")
    assert "gpu_utilization exists for namespaces, nodes, pods, not for deployments.apps" in why(report)


async def test_no_objects_match_the_label_selector(adapter: Adapter) -> None:
    report = await adapter.get(f"{EXPLAIN}/namespaces/ml/pods/*/gpu_utilization", labelSelector="app=nothing")
    assert report["answer"]["items"] == []
    assert report["queries"] == []
    assert "no pods in namespace ml match labelSelector app=nothing (objects from: watch cache)" in why(report)


async def test_an_object_without_series_says_which_objects_have_them(adapter: Adapter) -> None:
    report = await adapter.get(f"{EXPLAIN}/namespaces/serving/pods/ghost/gpu_memory_used")
    assert report["answer"]["reason"] == "NotFound"
    text = why(report)
    assert "rules[10]: Prometheus returned no samples" in text
    assert "Prometheus has DCGM_FI_DEV_FB_USED series, but none with namespace=serving" in text
    assert "DCGM_FI_DEV_FB_USED series in serving exist for exported_pod in: infer-0" in text


async def test_a_malformed_request_is_explained(adapter: Adapter) -> None:
    report = await adapter.get(f"{EXPLAIN}/namespaces/ml/pods/*/m", labelSelector="a in (")
    assert report["answer"]["code"] == 400
    assert why(report).startswith("the request itself is wrong: unable to parse labelSelector")


async def test_discovery_requests_list_the_catalog(adapter: Adapter) -> None:
    report = await adapter.get("/explain/apis/external.metrics.k8s.io/v1beta1")
    assert report["answer"] == [
        "gpu_dram_active",
        "gpu_engine_active",
        "gpu_memory_used",
        "gpu_sm_active",
        "gpu_tensor_active",
        "gpu_utilization",
        "inference_activity",
        "inference_capacity_demand",
        "inference_capacity_forecast",
        "inference_demand",
        "inference_frontend_inter_token_latency_p95_seconds",
        "inference_frontend_inter_token_latency_seconds",
        "inference_frontend_time_to_first_token_p95_seconds",
        "inference_frontend_time_to_first_token_seconds",
        "inference_gateway_requests_running",
        "inference_inter_token_latency_seconds",
        "inference_kv_cache_usage",
        "inference_pool_saturation",
        "inference_queue_time_seconds",
        "inference_request_rate",
        "inference_requests_running",
        "inference_requests_waiting",
        "inference_stale_endpoints",
        "inference_time_to_first_token_seconds",
    ]


async def test_self_metrics_count_requests_queries_and_cache_outcomes(adapter: Adapter) -> None:
    path = f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer"
    await adapter.client.get(path)
    await adapter.client.get(path)
    resp = await adapter.client.get("/metrics")
    assert resp.status == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(await resp.text())
        for s in family.samples
    }
    assert (
        samples[("gpuscale_adapter_request_duration_seconds_count", (("code", "200"), ("route", "custom_wildcard")))]
        == 2
    )
    assert samples[("gpuscale_adapter_query_cache_requests_total", (("result", "miss"),))] >= 1
    assert samples[("gpuscale_adapter_query_cache_requests_total", (("result", "hit"),))] >= 1
    assert samples[("gpuscale_adapter_prometheus_request_duration_seconds_count", (("endpoint", "query"),))] >= 1
    assert samples[("gpuscale_adapter_prometheus_request_duration_seconds_count", (("endpoint", "series"),))] >= 1
    assert samples[("gpuscale_adapter_kube_cache_synced", (("resource", "pods"),))] == 1
    assert samples[("gpuscale_adapter_discovery_runs_total", (("result", "success"),))] >= 1


async def test_a_profiling_metric_on_gpus_without_profiling_counters(adapter: Adapter) -> None:
    # the test Prometheus has no DCGM_FI_PROF_GR_ENGINE_ACTIVE series, as with GPUs older than Hopper
    path = f"{CM}/namespaces/ml/pods/*/gpu_engine_active"
    body = await adapter.get(path, labelSelector="app=trainer")
    assert body["items"] == []  # declared by the built-in rules, so listed, but no value for any pod
    single = await adapter.get(f"{CM}/namespaces/ml/pods/trainer-0/gpu_engine_active", status=404)
    assert single["message"] == (
        "the server could not find the metric gpu_engine_active for pods trainer-0 in namespace ml"
    )
    report = await adapter.get(f"/explain{path}", labelSelector="app=trainer")
    assert "Prometheus returned no samples" in why(report)


async def test_a_keda_triggers_question_is_explained_over_http_as_the_http_question_it_asks(adapter: Adapter) -> None:
    """docs/keda.md: the ScaledObject's namespace after ``keda/``, the trigger's metadata as the query, at the
    adapter's /explain/ as with ``gpuscale-adapter explain``."""
    report = await adapter.get(
        "/explain/keda/ml", metricName="gpu_utilization", labelSelector="app=trainer", targetValue="70"
    )
    asked = await adapter.get(f"{EXPLAIN}/namespaces/ml/pods/*/gpu_utilization", labelSelector="app=trainer")
    assert report["request"] == asked["request"]
    assert {i["describedObject"]["name"]: i["value"] for i in report["answer"]["items"]} == {
        "trainer-0": "88",
        "trainer-1": "40",
    }
    assert report["answer"]["items"] == asked["answer"]["items"]


async def test_a_keda_question_the_scaler_would_refuse_is_answered_400_with_why(adapter: Adapter) -> None:
    body = await adapter.get("/explain/keda/ml", status=400, metricName="gpu_utilization")
    assert (body["kind"], body["code"]) == ("Status", 400)
    assert "targetValue" in body["message"]
    body = await adapter.get("/explain/keda/Not_A_Namespace", status=400, metricName="m", targetValue="1")
    assert "keda/NAMESPACE" in body["message"]
