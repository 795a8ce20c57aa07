"""Rules over any group-resource, resolved through the stand-in API server's discovery, against a real Prometheus:
``{resource: deployment}`` overrides, the ``<<.Resource>>`` template over ``job`` and ``raycluster`` labels, a
``kube_<<.Group>>_<<.Resource>>`` template over a dotted group (``inferenceservices.serving.kserve.io``), and a CRD
installed while the adapter runs. The same answers through the aggregation layer, with kubectl as the client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapter.security.tls import self_signed
from harness.adapter.in_process import Adapter, settings_for
from harness.adapter.process import secure_adapter
from harness.kube.aggregator import ADMIN, APIService, Endpoints
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import Cluster
from harness.kube.discovery import Served
from harness.kube.kubectl import kubectl_binary, run
from harness.kube.pki import client_context
from harness.stores.exporter import Exporter, exposition
from harness.stores.prometheus import Prometheus, run_prometheus

pytestmark = pytest.mark.prometheus

CM = "/apis/custom.metrics.k8s.io/v1beta2"
RAY = Served("ray.io", ("v1",), "rayclusters", "raycluster", "RayCluster", True, (), ("status",))
ISVC = Served(
    "serving.kserve.io", ("v1beta1",), "inferenceservices", "inferenceservice", "InferenceService", True, ("isvc",)
)
WIDGETS = Served("example.com", ("v1",), "widgets", "widget", "Widget", True)
LINES = [
    ("app_requests", {"namespace": "ml", "deployment": "web", "pod": "web-1"}, "5"),
    ("app_requests", {"namespace": "ml", "deployment": "api", "pod": "api-1"}, "7"),
    ("ray_tasks_pending", {"namespace": "ml", "raycluster": "rc-a"}, "3"),
    ("ray_tasks_pending", {"namespace": "ml", "raycluster": "rc-b"}, "9"),
    ("batch_progress", {"namespace": "ml", "job": "train-1"}, "0.5"),
    ("isvc_queue", {"namespace": "serving", "kube_serving_kserve_io_inferenceservice": "llm"}, "4"),
    ("widget_load", {"namespace": "ml", "widget": "w1"}, "2"),
]
QUERY = "metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'"
RULES = f"""
rules:
- seriesQuery: 'app_requests{{namespace!="",deployment!=""}}'
  resources: {{overrides: {{namespace: {{resource: namespace}}, deployment: {{resource: deployment}}}}}}
  {QUERY}
- seriesQuery: '{{__name__=~"ray_.*|batch_.*",namespace!=""}}'
  resources: {{template: "<<.Resource>>"}}
  {QUERY}
- seriesQuery: 'isvc_queue{{namespace!=""}}'
  resources: {{template: "kube_<<.Group>>_<<.Resource>>", overrides: {{namespace: {{resource: namespace}}}}}}
  {QUERY}
- seriesQuery: 'widget_load{{namespace!=""}}'
  resources: {{overrides: {{namespace: {{resource: namespace}}, widget: {{group: example.com, resource: widgets}}}}}}
  {QUERY}
"""


@pytest.fixture(scope="module")
def workloads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with (
        Exporter(exposition(LINES)) as exporter,
        run_prometheus(tmp_path_factory.mktemp("workloads"), scrape_targets=[exporter.target]) as prom,
    ):
        for name in ("app_requests", "ray_tasks_pending", "batch_progress", "isvc_queue", "widget_load"):
            prom.wait_for(name)
        yield prom


def populate(kube: FakeKubeAPIServer) -> None:
    kube.discovery.add(RAY)
    kube.discovery.add(ISVC)
    for namespace in ("ml", "serving"):
        kube.put("namespaces", namespace)
    for name in ("web", "api"):
        kube.put("deployments.apps", name, {"tier": name}, namespace="ml")
    kube.put("jobs.batch", "train-1", {"team": "a"}, namespace="ml")
    kube.put("rayclusters.ray.io", "rc-a", {"team": "a"}, namespace="ml")
    kube.put("rayclusters.ray.io", "rc-b", {"team": "b"}, namespace="ml")
    kube.put("inferenceservices.serving.kserve.io", "llm", namespace="serving")


@pytest.fixture
async def cluster_api() -> AsyncIterator[FakeKubeAPIServer]:
    kube = FakeKubeAPIServer()
    populate(kube)
    await kube.start()
    yield kube
    await kube.stop()


@pytest.fixture
async def served(
    cluster_api: FakeKubeAPIServer,
    workloads: Prometheus,
    make_adapter: Callable[..., Awaitable[Adapter]],
    tmp_path: Path,
) -> Adapter:
    (config := tmp_path / "rules.yaml").write_text(RULES)
    kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig")
    return await make_adapter(settings_for(workloads.url, kubeconfig, config=config))


def described(item: dict[str, Any]) -> tuple[str, str, str, str, str]:
    o = item["describedObject"]
    return o["kind"], o["apiVersion"], o["namespace"], o["name"], item["value"]


async def test_group_resources_and_crds_resolve_end_to_end(served: Adapter) -> None:
    listed = {r["name"]: r["namespaced"] for r in (await served.get(CM))["resources"]}
    for name in (
        "deployments.apps/app_requests",
        "jobs.batch/batch_progress",
        "rayclusters.ray.io/ray_tasks_pending",
        "inferenceservices.serving.kserve.io/isvc_queue",
        "namespaces/app_requests",
    ):
        assert name in listed, sorted(listed)
    assert listed["deployments.apps/app_requests"] is True
    assert not any(name.startswith("widgets") for name in listed)  # the CRD is not installed

    # an Object metric on a Deployment, as the HPA asks it, and as kubectl users write it
    for resource in ("deployments.apps", "deployments", "deployment"):
        body = await served.get(f"{CM}/namespaces/ml/{resource}/web/app_requests")
        assert [described(i) for i in body["items"]] == [("Deployment", "apps/v1", "ml", "web", "5")]
    body = await served.get(f"{CM}/namespaces/ml/jobs.batch/*/batch_progress")
    assert [described(i) for i in body["items"]] == [("Job", "batch/v1", "ml", "train-1", "500m")]
    # a CRD's objects, listed live with the selector from the API server
    body = await served.get(f"{CM}/namespaces/ml/rayclusters.ray.io/*/ray_tasks_pending", labelSelector="team=b")
    assert [described(i) for i in body["items"]] == [("RayCluster", "ray.io/v1", "ml", "rc-b", "9")]
    body = await served.get(f"{CM}/namespaces/ml/rayclusters.ray.io/*/ray_tasks_pending")
    assert [described(i)[3:] for i in body["items"]] == [("rc-a", "3"), ("rc-b", "9")]
    body = await served.get(f"{CM}/namespaces/serving/inferenceservices.serving.kserve.io/llm/isvc_queue")
    assert [described(i) for i in body["items"]] == [
        ("InferenceService", "serving.kserve.io/v1beta1", "serving", "llm", "4")
    ]
    # a resource no discovery document lists
    body = await served.get(f"{CM}/namespaces/ml/gizmos.example.com/*/app_requests", status=404)
    assert body["message"] == "the server could not find the metric app_requests for gizmos.example.com"


async def test_a_crd_installed_while_the_adapter_runs_is_served_at_its_first_request(
    served: Adapter, cluster_api: FakeKubeAPIServer, caplog: pytest.LogCaptureFixture
) -> None:
    at_start = "\n".join(r.getMessage() for r in caplog.get_records("setup"))
    assert "rules[3].resources.overrides.widget: widgets.example.com is not a resource API discovery lists" in at_start
    cluster_api.discovery.add(WIDGETS)
    cluster_api.put("widgets.example.com", "w1", namespace="ml")
    discovery_reads = cluster_api.count("/apis")
    body = await served.get(f"{CM}/namespaces/ml/widgets.example.com/w1/widget_load")
    assert [described(i) for i in body["items"]] == [("Widget", "example.com/v1", "ml", "w1", "2")]
    assert cluster_api.count("/apis") == discovery_reads + 1  # one refresh, on demand
    # the catalog was built again from the last relist's series, without waiting for the next relist
    assert "widgets.example.com/widget_load" in {r["name"] for r in (await served.get(CM))["resources"]}
    await served.get(f"{CM}/namespaces/ml/widgets.example.com/*/widget_load")
    assert cluster_api.count("/apis") == discovery_reads + 1


@pytest.mark.slow
async def test_kubectl_reads_them_through_the_aggregation_layer(workloads: Prometheus, tmp_path: Path) -> None:
    kube = FakeKubeAPIServer()
    populate(kube)
    kube.discovery.aggregated = ()  # an API server that serves only the legacy documents
    cert_pem, key_pem = self_signed(["127.0.0.1"])
    (cert := tmp_path / "apiserver.crt").write_bytes(cert_pem)
    (key := tmp_path / "apiserver.key").write_bytes(key_pem)
    await kube.start(serving=(cert, key))
    cluster = Cluster()
    kube.reviews.grant(user=ADMIN.username, verbs=("get",), api_groups=("custom.metrics.k8s.io",))
    (config := tmp_path / "rules.yaml").write_text(RULES)
    try:
        async with secure_adapter(kube, workloads.url, tmp_path, f"--config={config}", cluster=cluster) as adapter:
            tls = client_context(adapter.cert, cluster.front_proxy, tmp_path / "aggregator")
            kube.aggregator.services.append(APIService("custom.metrics.k8s.io", "v1beta2", Endpoints(adapter.url), tls))
            kubeconfig = kube.kubeconfig(tmp_path / "kubectl-config")

            async def raw(path: str) -> dict[str, Any]:
                rc, out, err = await run(kubectl_binary(), f"--kubeconfig={kubeconfig}", "get", "--raw", path)
                assert rc == 0, err
                return json.loads(out)  # type: ignore[no-any-return]

            body = await raw(f"{CM}/namespaces/ml/deployments.apps/api/app_requests")
            assert [described(i) for i in body["items"]] == [("Deployment", "apps/v1", "ml", "api", "7")]
            body = await raw(f"{CM}/namespaces/ml/rayclusters.ray.io/%2A/ray_tasks_pending?labelSelector=team%3Da")
            assert [described(i) for i in body["items"]] == [("RayCluster", "ray.io/v1", "ml", "rc-a", "3")]
            # the adapter read the legacy documents: /api, /apis, then each group version
            assert kube.count("/apis/ray.io/v1") >= 1
    finally:
        await kube.stop()
