"""custom-metrics-apiserver's own API table, replayed against the adapter.

Source: kubernetes-sigs/custom-metrics-apiserver, ``pkg/apiserver/installer/apiserver_test.go`` at commit
a599ebaca1dd4d6286f6c809fc04566895d1cf03 (2026-08-18): ``TestCustomMetricsAPI`` and ``TestExternalMetricsAPI``, with
the external values of ``test-adapter/provider/provider.go`` (``testingExternalMetrics``) that the second one reads.
Their tests serve a fake provider from an in-memory handler; here every case goes to the adapter over TLS, as the
HPA through the aggregator (front-proxy certificate, the HPA's identity reviewed by the fake API server), and every
value comes from a real Prometheus scraping the series the case needs. The cluster is theirs: 4 nodes (2 labelled
``foo=bar``), 16 pods in ``ns`` (8 labelled ``foo=bar``), one of each named ``foo``.

Their table asserts the status, and the item count where it is above 0; this one asserts the names of the items
too. It runs on the version their test serves (``v1beta1``, ``custom_metrics``'s preferred version in
k8s.io/metrics) and on ``v1beta2``. Differences on purpose (docs/adapter.md, "Peers' test tables"):

- ``GET /apis/``: 404 in their table, whose handler serves one group version and nothing above it. A whole API
  server (theirs in a cluster, through k8s.io/apiserver, and this one) answers discovery there: 200, an
  ``APIGroupList`` naming both groups.
- ``namespaces/foo/nonexistent-metric`` (external): 200 with no items from their sample provider, which answers an
  empty list for any name; here 404 naming the metric, as no rule serves it, so that a misspelt name reads as one.
  A metric a rule serves but with no series in the namespace is their empty list (200, 0 items), a case added here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from adapter.app import create_app
from adapter.security import tls
from adapter.security.auth_config import AuthSettings
from harness.adapter.in_process import settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import HPA, Cluster, SecureAdapter, grant_cluster_roles
from harness.kube.pki import Issued
from harness.stores.exporter import Exporter, exposition
from harness.stores.prometheus import Prometheus, run_prometheus
from harness.waiting import eventually

pytestmark = pytest.mark.prometheus

AiohttpServer = Callable[..., Awaitable[TestServer]]

SOURCE = "kubernetes-sigs/custom-metrics-apiserver@a599ebaca1dd4d6286f6c809fc04566895d1cf03"
NODES = ["foo", "node-1", "node-2", "node-3"]  # totalNodesCount 4
PODS = ["foo", *(f"pod-{i:02d}" for i in range(1, 16))]  # totalPodsCount 16
MATCHING_NODES = NODES[:2]  # matchingNodesCount 2
MATCHING_PODS = PODS[:8]  # matchingPodsCount 8
SERIES = [
    *(("some_metric", {"node": n}, str(i + 1)) for i, n in enumerate(NODES)),
    *(("some_metric", {"namespace": "ns", "pod": p}, str(i + 1)) for i, p in enumerate(PODS)),
    # testingExternalMetrics: my-external-metric twice (foo=bar 42, foo=baz 43), other-external-metric once (44)
    ("my_external_metric", {"namespace": "default", "foo": "bar"}, "42"),
    ("my_external_metric", {"namespace": "default", "foo": "baz"}, "43"),
    ("other_external_metric", {"namespace": "default"}, "44"),
]
# their metric names have dashes, which Prometheus names cannot: the rules name them as theirs are named
RULES = """
rules:
- seriesQuery: 'some_metric'
  resources:
    overrides: {node: {resource: node}, namespace: {resource: namespace}, pod: {resource: pod}}
  name: {matches: '^some_metric$', as: 'some-metric'}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
externalRules:
- seriesQuery: '{__name__=~"my_external_metric|other_external_metric",namespace!=""}'
  resources:
    overrides: {namespace: {resource: namespace}}
  name: {matches: '^(.*)_external_metric$', as: '${1}-external-metric'}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (foo)'
"""
AS_HPA = [("X-Remote-User", HPA), ("X-Remote-Group", "system:serviceaccounts")]


@dataclass(frozen=True)
class Served:
    """The adapter, and the aggregator's front-proxy certificate the HPA's requests come through."""

    adapter: SecureAdapter
    front_proxy: Issued


@dataclass(frozen=True)
class Case:
    path: str  # under /apis/{group}/{version}/, or from the root when it starts with /
    status: int
    names: tuple[str, ...] | None = None  # the items' names (describedObject's, or the external foo label)
    ours_differs: str = ""  # why the adapter answers otherwise on purpose (the status is then ours)
    kind: str = ""  # the kind of a 200 without items to count
    says: str = ""  # what a 404's message must say


LONG_PREFIX = Case("/apis/", 200, kind="APIGroupList", ours_differs="discovery, as a whole API server answers")
CUSTOM = {
    # checks which should fail
    "GET long prefix": LONG_PREFIX,
    "root GET missing storage": Case("blah", 404),
    "GET at root resource leaf": Case("nodes/foo", 404),
    "GET at namespaced resource leaf": Case("namespaces/ns/pods/bar", 404),
    # positive checks
    "GET for all nodes (root)": Case("nodes/*/some-metric", 200, tuple(NODES)),
    "GET for all pods (namespaced)": Case("namespaces/ns/pods/*/some-metric", 200, tuple(PODS)),
    "GET for namespace": Case("namespaces/ns/metrics/some-metric", 200, ("ns",)),
    "GET for label selected nodes (root)": Case(
        "nodes/*/some-metric?labelSelector=foo%3Dbar", 200, tuple(MATCHING_NODES)
    ),
    "GET for label selected pods (namespaced)": Case(
        "namespaces/ns/pods/*/some-metric?labelSelector=foo%3Dbar", 200, tuple(MATCHING_PODS)
    ),
    "GET for single node (root)": Case("nodes/foo/some-metric", 200, ("foo",)),
    "GET for single pod (namespaced)": Case("namespaces/ns/pods/foo/some-metric", 200, ("foo",)),
}
EXTERNAL = {
    # checks which should fail
    "GET long prefix": LONG_PREFIX,
    "GET at root scope": Case("nonexistent-metric", 404),
    "GET without metric name": Case("namespaces/foo", 404),
    "GET for metric with slashes": Case("namespaces/foo/group/metric", 404),
    # positive checks
    "GET for external metric": Case("namespaces/default/my-external-metric", 200, ("bar", "baz")),
    "GET for external metric with selector": Case(
        "namespaces/default/my-external-metric?labelSelector=foo%3Dbar", 200, ("bar",)
    ),
    "GET for nonexistent metric": Case(
        "namespaces/foo/nonexistent-metric",
        404,
        says="the server could not find the external metric nonexistent-metric",
        ours_differs="no rule serves the name: the HPA is told so (FailedGetExternalMetric), not handed 0 items",
    ),
    # ours: a metric a rule serves, with no series in the namespace, is their empty list
    "GET for a served metric without series in the namespace": Case("namespaces/foo/my-external-metric", 200, ()),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with Exporter(exposition(SERIES)) as exporter, run_prometheus(tmp_path_factory.mktemp("cmapi"),
                                                                 [exporter.target]) as prometheus:  # fmt: skip
        prometheus.wait_for("some_metric", min_results=len(NODES) + len(PODS))
        prometheus.wait_for('{__name__=~".*_external_metric"}', min_results=3)
        yield prometheus


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeAPIServer]:
    """Their cluster: the objects their fake provider has values for, with their labels."""
    fake = FakeKubeAPIServer()
    fake.put("namespaces", "ns")
    fake.put("namespaces", "default")
    fake.put("namespaces", "foo")
    for node in NODES:
        fake.put("nodes", node, {"foo": "bar"} if node in MATCHING_NODES else {})
    for pod in PODS:
        fake.put("pods", pod, {"foo": "bar"} if pod in MATCHING_PODS else {}, namespace="ns")
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def adapter(kube: FakeKubeAPIServer, store: Prometheus, aiohttp_server: AiohttpServer, tmp_path: Path) -> Served:
    """The adapter over TLS with authentication and authorization delegated to the fake API server."""
    cluster = Cluster()
    cluster.publish(kube)
    grant_cluster_roles(kube)
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
    (tmp_path / "rules.yaml").write_text(RULES)
    settings = settings_for(
        store.url,
        kubeconfig,
        config=tmp_path / "rules.yaml",
        insecure_serve_http=False,
        insecure_disable_auth=False,
        auth=AuthSettings(authentication_kubeconfig=kubeconfig, authorization_kubeconfig=kubeconfig),
        tls=tls.TLSSettings(cert_dir=tmp_path / "certs"),
    )
    serving = tls.serving_tls(settings.tls, request_certs=True)
    server: TestServer = await aiohttp_server(create_app(settings, serving=serving), ssl=serving.context)
    secure = SecureAdapter(server.app, str(server.make_url("")).rstrip("/"), tmp_path / "certs" / "apiserver.crt",
                           tmp_path)  # fmt: skip

    async def ready() -> bool:
        return (await secure.get("/readyz")).status == 200

    await eventually(ready, what="the adapter to be ready")
    return Served(secure, cluster.front_proxy)


def names(body: dict[str, Any]) -> tuple[str, ...]:
    items: list[dict[str, Any]] = body.get("items", [body])  # a single object's answer is one MetricValue
    if body.get("kind") == "ExternalMetricValueList":
        return tuple(sorted(i["metricLabels"]["foo"] for i in items))
    return tuple(sorted(i["describedObject"]["name"] for i in items))


async def replay(served: Served, group_version: str, case: Case) -> None:
    path = case.path if case.path.startswith("/") else f"/apis/{group_version}/{case.path}"
    r = await served.adapter.get(path, served.front_proxy, AS_HPA)
    assert r.status == case.status, r.text
    if case.names is not None:
        assert r.body["kind"] in ("MetricValueList", "ExternalMetricValueList"), r.body
        assert names(r.body) == tuple(sorted(case.names)), r.body
        assert len(r.body["items"]) == len(case.names)  # their table's ExpectedCount
    elif case.kind:
        assert r.body["kind"] == case.kind, r.body
        assert [g["name"] for g in r.body["groups"]] == ["custom.metrics.k8s.io", "external.metrics.k8s.io"]
    else:
        assert (r.body["kind"], r.body["reason"]) == ("Status", "NotFound"), r.body
        assert case.says in r.body["message"], r.body
        assert "Traceback" not in r.text


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
@pytest.mark.parametrize("name", list(CUSTOM))
async def test_custom_metrics_api(adapter: Served, name: str, version: str) -> None:
    await replay(adapter, f"custom.metrics.k8s.io/{version}", CUSTOM[name])


@pytest.mark.parametrize("name", list(EXTERNAL))
async def test_external_metrics_api(adapter: Served, name: str) -> None:
    await replay(adapter, "external.metrics.k8s.io/v1beta1", EXTERNAL[name])
