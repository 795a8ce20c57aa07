"""Bad input gets a 400 or 404 Status naming the problem: never a 500, never a traceback."""

from __future__ import annotations

import pytest

from harness.adapter.in_process import Adapter

CM = "/apis/custom.metrics.k8s.io/v1beta2"
EM = "/apis/external.metrics.k8s.io/v1beta1"


@pytest.mark.parametrize(
    ("path", "code", "reason", "message"),
    [
        (f"{CM}/namespaces/ml/pods/*/nope", 404, "NotFound", "the server could not find the metric nope for pods"),
        (
            f"{CM}/namespaces/ml/pods/*/GPU_UTILIZATION",
            404,
            "NotFound",
            "could not find the metric GPU_UTILIZATION for pods",
        ),
        (
            f"{CM}/namespaces/ml/gizmos.example.com/g/gpu_utilization",
            404,
            "NotFound",
            "metric gpu_utilization for gizmos.example.com",
        ),
        (
            f"{CM}/namespaces/ml/deployments.apps/web/gpu_utilization",
            404,
            "NotFound",
            "metric gpu_utilization for deployments.apps",
        ),
        (
            f"{CM}/pods/*/gpu_utilization",
            404,
            "NotFound",
            "pods are namespaced; ask under /namespaces/<namespace>/pods/",
        ),
        (f"{CM}/namespaces/ml/nodes/node-a/gpu_utilization", 404, "NotFound", "nodes are not namespaced"),
        (f"{CM}/namespaces/ml/pods/p", 404, "NotFound", "the server could not find the requested resource"),
        (f"{CM}/namespaces/ml/pods/p/m/x", 404, "NotFound", "the server could not find the requested resource"),
        (
            "/apis/custom.metrics.k8s.io/v9/namespaces/ml/pods/p/m",
            404,
            "NotFound",
            "could not find the requested resource",
        ),
        ("/apis/metrics.k8s.io/v1beta1/nodes", 404, "NotFound", "could not find the requested resource"),
        ("/apis/nope.example.com", 404, "NotFound", "could not find the requested resource"),
        ("/no/such/path", 404, "NotFound", "could not find the requested resource"),
        ("/openapi/v3/apis/apps/v1", 404, "NotFound", "could not find the requested resource"),
        ("/openapi/v1", 404, "NotFound", "could not find the requested resource"),
        (
            f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3D%3D%3D",
            400,
            "BadRequest",
            "unable to parse labelSelector",
        ),
        (
            f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3D%22x%22",
            400,
            "BadRequest",
            "invalid label value",
        ),
        (
            f"{CM}/namespaces/ml/pods/*/gpu_utilization?metricLabelSelector=gpu%3E1",
            400,
            "BadRequest",
            "metricLabelSelector operator '>'",
        ),
        (
            f"{CM}/namespaces/ml/pods/*/gpu_utilization?metricLabelSelector=app.kubernetes.io/name%3Dx",
            400,
            "BadRequest",
            "not a valid Prometheus label name",
        ),
        (f"{CM}/namespaces/*/pods/*/gpu_utilization", 400, "BadRequest", "the namespace must be a name"),
        (f"{CM}/namespaces/ml/pods/%C3%28/gpu_utilization", 400, "BadRequest", "not valid percent-encoded UTF-8"),
        (f"{EM}/namespaces/ml/nope", 404, "NotFound", "could not find the external metric nope"),
        (f"{EM}/namespaces/ml/gpu_utilization?labelSelector=Hostname%21%21", 400, "BadRequest", "labelSelector"),
    ],
)
async def test_client_mistakes_get_a_status_naming_the_problem(
    adapter: Adapter, path: str, code: int, reason: str, message: str
) -> None:
    resp = await adapter.client.get(path)
    text = await resp.text()
    assert resp.status == code, text
    assert "Traceback" not in text
    body = await resp.json()
    assert body["kind"] == "Status"
    assert body["apiVersion"] == "v1"
    assert body["status"] == "Failure"
    assert body["reason"] == reason
    assert body["code"] == code
    assert message in body["message"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
async def test_the_apis_are_read_only(adapter: Adapter, method: str) -> None:
    resp = await adapter.client.request(method, f"{CM}/namespaces/ml/pods/*/gpu_utilization")
    body = await resp.json()
    assert resp.status == 405
    assert body["kind"] == "Status"
    assert body["reason"] == "MethodNotAllowed"


async def test_errors_are_counted_by_route_and_reason(adapter: Adapter) -> None:
    await adapter.client.get(f"{CM}/namespaces/ml/pods/*/nope")
    await adapter.client.get(f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=%3D")
    registry = adapter.components.metrics.registry
    assert (
        registry.get_sample_value("gpuscale_adapter_errors_total", {"route": "custom_wildcard", "reason": "NotFound"})
        == 1
    )
    assert (
        registry.get_sample_value("gpuscale_adapter_errors_total", {"route": "custom_wildcard", "reason": "BadRequest"})
        == 1
    )
