"""metrics.k8s.io from ``resourceRules`` against a real Prometheus holding cAdvisor, kubelet and node-exporter series
(harness/stores/cadvisor.py), with prometheus-adapter's and kube-prometheus's own configuration files: the objects
answered, their values computed by hand from the series written, what is left out and why, selectors, the PromQL sent
(as prometheus-adapter builds it), errors, discovery and OpenAPI. Quantities are read back with the stand-in API
server's own parser, not the adapter's."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate

from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.kube.wire import parse_quantity
from harness.stores.cadvisor import (
    ANSWERED_PODS,
    PODS,
    cadvisor_prometheus,
    container_usage,
    kubelet_node_usage,
    node_exporter_usage,
    populate,
)
from harness.stores.prometheus import Prometheus
from harness.stores.proxy import PrometheusProxy

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

CONFIGS = Path(__file__).parent / "resource_configs"
PREFIX = "/apis/metrics.k8s.io/v1beta1"
V1 = "/apis/metrics.k8s.io/v1"
MakeAdapter = Callable[..., Awaitable[Adapter]]


@pytest.fixture(scope="module")
def cadvisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with cadvisor_prometheus(tmp_path_factory.mktemp("cadvisor")) as prom:
        yield prom


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeAPIServer]:
    kube = FakeKubeAPIServer()
    populate(kube)
    await kube.start()
    yield kube
    await kube.stop()


@pytest.fixture
async def proxy(cadvisor: Prometheus) -> AsyncIterator[PrometheusProxy]:
    p = PrometheusProxy(cadvisor.url)
    await p.start()
    yield p
    await p.close()


@pytest.fixture
def start(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> Callable[..., Awaitable[Adapter]]:
    """An adapter with a configuration file from resource_configs/ (or the text given), reading Prometheus through
    the proxy."""

    async def make(config: str = "prometheus-adapter", text: str | None = None, **settings: Any) -> Adapter:
        path = CONFIGS / f"{config}.yaml"
        if text is not None:
            path = tmp_path / "config.yaml"
            path.write_text(text)
        kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
        return await make_adapter(settings_for(proxy.url, kubeconfig, config=path, **settings))

    return make


def usage(body: dict[str, str]) -> tuple[Decimal, Decimal]:
    return parse_quantity(body["cpu"]), parse_quantity(body["memory"])


def pods_of(items: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, tuple[Decimal, Decimal]]]:
    return {
        (i["metadata"]["namespace"], i["metadata"]["name"]): {c["name"]: usage(c["usage"]) for c in i["containers"]}
        for i in items
    }


def expected_pods(namespace: str | None = None) -> dict[tuple[str, str], dict[str, tuple[Decimal, Decimal]]]:
    return {(ns, pod): container_usage(ns, pod) for ns, pod in ANSWERED_PODS if namespace in (None, ns)}


def moment(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()


@pytest.mark.parametrize("config", ["prometheus-adapter", "kube-prometheus"])
async def test_pods_of_every_namespace_with_their_containers(
    start: Callable[..., Awaitable[Adapter]], config: str
) -> None:
    adapter = await start(config)
    before = time.time()
    body = await adapter.get(f"{PREFIX}/pods")
    assert (body["kind"], body["apiVersion"], body["metadata"]) == ("PodMetricsList", "metrics.k8s.io/v1beta1", {})
    # idle-0 (no memory series), broken-0 (NaN memory) and new-0 (no series) are left out; gone-0 is not a pod
    assert pods_of(body["items"]) == expected_pods()
    assert pods_of(body["items"])[("ml", "trainer-0")] == {
        "main": (Decimal("0.25"), Decimal(100 * 1024 * 1024)),
        "sidecar": (Decimal("0.125"), Decimal(20 * 1024 * 1024 + 300 * 1024)),
    }
    first = body["items"][0]
    # a list's items carry no kind or apiVersion, as metrics-server's
    assert "kind" not in first
    assert "apiVersion" not in first
    assert first["window"] == "5m0s"
    assert first["metadata"]["labels"] == PODS[("ml", "mixed-0")]
    assert before - 5 <= moment(first["timestamp"]) <= time.time() + 1  # Prometheus's evaluation time
    # the order metrics-server keeps: by namespace, then name
    names = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in body["items"]]
    assert names == sorted(names)


async def test_one_pod_and_the_pods_of_a_namespace(start: Callable[..., Awaitable[Adapter]]) -> None:
    adapter = await start()
    body = await adapter.get(f"{PREFIX}/namespaces/ml/pods/trainer-1")
    assert (body["kind"], body["apiVersion"]) == ("PodMetrics", "metrics.k8s.io/v1beta1")
    assert body["containers"] == [{"name": "main", "usage": {"cpu": "1500m", "memory": "1049088Ki"}}]
    body = await adapter.get(f"{PREFIX}/namespaces/ml/pods")
    assert pods_of(body["items"]) == expected_pods("ml")


async def test_a_container_with_cpu_and_no_memory_reports_zero_memory(start: Callable[..., Awaitable[Adapter]]) -> None:
    adapter = await start()
    body = await adapter.get(f"{PREFIX}/namespaces/ml/pods/mixed-0")
    assert body["containers"] == [
        {"name": "helper", "usage": {"cpu": "125m", "memory": "0"}},
        {"name": "main", "usage": {"cpu": "250m", "memory": "50Mi"}},
    ]


NEGATIVE = """
resourceRules:
  cpu:
    containerQuery: -1 * sum by (<<.GroupBy>>) (container_memory_working_set_bytes{<<.LabelMatchers>>,container!=""})
    nodeQuery: -1 * sum by (<<.GroupBy>>) (node_memory_working_set_bytes{<<.LabelMatchers>>})
    resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}, node: {resource: node}}}
    containerLabel: container
  memory:
    containerQuery: sum by (<<.GroupBy>>) (container_memory_working_set_bytes{<<.LabelMatchers>>,container!=""})
    nodeQuery: sum by (<<.GroupBy>>) (node_memory_working_set_bytes{<<.LabelMatchers>>})
    resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}, node: {resource: node}}}
    containerLabel: container
"""


async def test_negative_values_become_zero(start: Callable[..., Awaitable[Adapter]]) -> None:
    adapter = await start(text=NEGATIVE)
    pod = await adapter.get(f"{PREFIX}/namespaces/serving/pods/infer-0")
    assert pod["containers"] == [{"name": "main", "usage": {"cpu": "0", "memory": "300Mi"}}]
    assert pod["window"] == "0s"  # no window in the file
    node = await adapter.get(f"{PREFIX}/nodes/node-a")
    assert node["usage"] == {"cpu": "0", "memory": "8Gi"}


async def test_pods_left_out_are_not_found_alone(start: Callable[..., Awaitable[Adapter]]) -> None:
    adapter = await start()
    for pod in ("idle-0", "broken-0", "new-0"):
        body = await adapter.get(f"{PREFIX}/namespaces/ml/pods/{pod}", 404)
        assert body["message"] == f'podmetrics.metrics.k8s.io "ml/{pod}" not found'
    # a pod Kubernetes does not have, though Prometheus has its series, is not found as a pod
    body = await adapter.get(f"{PREFIX}/namespaces/ml/pods/gone-0", 404)
    assert body["message"] == 'pods "gone-0" not found'
    assert adapter.components.metrics.registry.get_sample_value(
        "gpuscale_adapter_dropped_samples_total", {"reason": "nan"}
    )


@pytest.mark.parametrize(
    ("config", "expected"), [("prometheus-adapter", kubelet_node_usage), ("kube-prometheus", node_exporter_usage)]
)
async def test_nodes(
    start: Callable[..., Awaitable[Adapter]], config: str, expected: Callable[[str], tuple[Decimal, Decimal]]
) -> None:
    adapter = await start(config)
    body = await adapter.get(f"{PREFIX}/nodes")
    assert body["kind"] == "NodeMetricsList"
    # node-c has no series: left out
    assert {i["metadata"]["name"]: usage(i["usage"]) for i in body["items"]} == {
        node: expected(node) for node in ("node-a", "node-b")
    }
    one = await adapter.get(f"{PREFIX}/nodes/node-a")
    assert (one["kind"], one["metadata"]["name"], one["window"]) == ("NodeMetrics", "node-a", "5m0s")
    assert usage(one["usage"]) == expected("node-a")
    missing = await adapter.get(f"{PREFIX}/nodes/node-c", 404)
    assert missing["message"] == 'nodemetrics.metrics.k8s.io "node-c" not found'
    missing = await adapter.get(f"{PREFIX}/nodes/node-z", 404)
    assert missing["message"] == 'node "node-z" not found'


async def test_label_and_field_selectors(start: Callable[..., Awaitable[Adapter]]) -> None:
    adapter = await start()

    async def pods(path: str = f"{PREFIX}/pods", **params: str) -> set[tuple[str, str]]:
        # status by name: otherwise mypy matches the ** dict of selectors against it too
        return set(pods_of((await adapter.get(path, status=200, **params))["items"]))

    assert await pods(labelSelector="app=trainer") == {("ml", "trainer-0"), ("ml", "trainer-1")}
    assert await pods(labelSelector="app in (infer,mixed)") == {("ml", "mixed-0"), ("serving", "infer-0")}
    assert await pods(fieldSelector="metadata.namespace=serving") == {("serving", "infer-0")}
    assert await pods(fieldSelector="metadata.namespace!=serving,metadata.name!=trainer-0") == {
        ("ml", "trainer-1"),
        ("ml", "mixed-0"),
    }
    assert await pods(f"{PREFIX}/namespaces/ml/pods", fieldSelector="metadata.name==trainer-1") == {("ml", "trainer-1")}
    nodes = await adapter.get(f"{PREFIX}/nodes", labelSelector="pool=infer")
    assert [i["metadata"]["name"] for i in nodes["items"]] == ["node-b"]
    nodes = await adapter.get(f"{PREFIX}/nodes", fieldSelector="metadata.name!=node-a")
    assert [i["metadata"]["name"] for i in nodes["items"]] == ["node-b"]
    # nothing matches: an empty list, not an error
    assert await pods(labelSelector="app=nothing") == set()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"labelSelector": "app in (a"}, "labelSelector"),
        ({"fieldSelector": "spec.nodeName=node-a"}, '"spec.nodeName" is not a known field selector'),
        ({"fieldSelector": "metadata.name"}, "can't understand 'metadata.name'"),
        ({"fieldSelector": "metadata.name=a\\b"}, "invalid escape sequence"),
    ],
)
async def test_bad_selectors_are_a_400_that_says_why(
    start: Callable[..., Awaitable[Adapter]], params: dict[str, str], message: str
) -> None:
    adapter = await start()
    body = await adapter.get(f"{PREFIX}/pods", 400, **params)
    assert body["reason"] == "BadRequest"
    assert message in body["message"]


async def test_the_queries_are_built_as_prometheus_adapter_builds_them(
    start: Callable[..., Awaitable[Adapter]], proxy: PrometheusProxy
) -> None:
    adapter = await start()
    await adapter.get(f"{PREFIX}/pods")
    await adapter.get(f"{PREFIX}/nodes")
    sent = [s.query.get("query", "") for s in proxy.seen if s.path == "/api/v1/query"]
    ml = 'namespace="ml",pod=~"broken-0|idle-0|mixed-0|new-0|trainer-0|trainer-1"'
    cpu = (
        "sum by (pod,container) (\n  irate (\n      container_cpu_usage_seconds_total{"
        f'{ml},container!="",pod!=""}}[4m]\n  )\n)\n'
    )
    memory = f'sum by (pod,container) (\n  container_memory_working_set_bytes{{{ml},container!="",pod!=""}}\n)\n'
    node_cpu = (
        'sum by (node) (\n  irate(\n      node_cpu_usage_seconds_total{node=~"node-a|node-b|node-c"}[4m]\n  )\n)\n'
    )
    # one CPU and one memory query per namespace, and for the nodes
    assert {cpu, memory, node_cpu} <= set(sent)
    assert len(sent) == 6


async def test_prometheus_down_is_a_503_not_an_empty_list(
    start: Callable[..., Awaitable[Adapter]], proxy: PrometheusProxy
) -> None:
    adapter = await start()
    await proxy.stop()
    for path in (f"{PREFIX}/pods", f"{PREFIX}/nodes", f"{PREFIX}/namespaces/ml/pods/trainer-0"):
        body = await adapter.get(path, 503)
        assert body["message"] == "the metrics backend (Prometheus) is currently unavailable"


# what names the version, and the times, which may differ from one request to the next (``creationTimestamp`` is the
# moment of the answer, ``timestamp`` Prometheus's evaluation time)
_VARYING = ("apiVersion", "groupVersion", "creationTimestamp", "timestamp")


def unversioned(body: Any) -> Any:
    """An answer without its version and its times."""
    if isinstance(body, dict):
        return {k: unversioned(v) for k, v in body.items() if k not in _VARYING}
    if isinstance(body, list):
        return [unversioned(v) for v in body]
    return body


async def test_v1_answers_what_v1beta1_answers_under_its_own_api_version(
    start: Callable[..., Awaitable[Adapter]],
) -> None:
    adapter = await start()
    paths = (
        ("", "APIResourceList"),
        ("/pods", "PodMetricsList"),
        ("/namespaces/ml/pods", "PodMetricsList"),
        ("/namespaces/ml/pods/trainer-0", "PodMetrics"),
        ("/nodes", "NodeMetricsList"),
        ("/nodes/node-a", "NodeMetrics"),
    )
    for path, kind in paths:
        v1, v1beta1 = await adapter.get(f"{V1}{path}"), await adapter.get(f"{PREFIX}{path}")
        assert v1["kind"] == v1beta1["kind"] == kind
        if kind == "APIResourceList":
            assert (v1["groupVersion"], v1beta1["groupVersion"]) == ("metrics.k8s.io/v1", "metrics.k8s.io/v1beta1")
        else:
            assert (v1["apiVersion"], v1beta1["apiVersion"]) == ("metrics.k8s.io/v1", "metrics.k8s.io/v1beta1")
        assert unversioned(v1) == unversioned(v1beta1)
    assert pods_of((await adapter.get(f"{V1}/pods"))["items"]) == expected_pods()
    # the errors are the group's, whatever the version
    body = await adapter.get(f"{V1}/namespaces/ml/pods/new-0", 404)
    assert body["message"] == 'podmetrics.metrics.k8s.io "ml/new-0" not found'
    for path in ("/apis/metrics.k8s.io/v2", "/apis/metrics.k8s.io/v1alpha1/pods", f"{V1}/x"):
        body = await adapter.get(path, 404)
        assert body["message"] == "the server could not find the requested resource"


async def test_without_resource_rules_the_group_is_not_served(start: Callable[..., Awaitable[Adapter]]) -> None:
    adapter = await start(text="rules: []\n")
    assert "metrics.k8s.io" not in {g["name"] for g in (await adapter.get("/apis"))["groups"]}
    for prefix in (V1, PREFIX):
        for path in ("/apis/metrics.k8s.io", prefix, f"{prefix}/pods", f"{prefix}/nodes/node-a", f"{prefix}/x/y/z/w"):
            body = await adapter.get(path, 404)
            assert body["message"] == "the server could not find the requested resource"
    assert "apis/metrics.k8s.io/v1" not in (await adapter.get("/openapi/v3"))["paths"]  # its keys have no leading /


async def test_discovery_and_openapi(start: Callable[..., Awaitable[Adapter]]) -> None:
    adapter = await start()
    both = [
        {"groupVersion": "metrics.k8s.io/v1", "version": "v1"},
        {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"},
    ]
    groups = {g["name"]: g for g in (await adapter.get("/apis"))["groups"]}
    # v1 first and preferred, as kube-apiserver lists a group with a GA and a beta version
    assert groups["metrics.k8s.io"]["versions"] == both
    assert groups["metrics.k8s.io"]["preferredVersion"] == both[0]
    group = await adapter.get("/apis/metrics.k8s.io")
    assert (group["kind"], group["name"], group["versions"], group["preferredVersion"]) == (
        "APIGroup",
        "metrics.k8s.io",
        both,
        both[0],
    )
    for prefix in (V1, PREFIX):
        resources = await adapter.get(prefix)
        assert resources["groupVersion"] == f"metrics.k8s.io/{prefix.rsplit('/', 1)[1]}"
        assert [(r["name"], r["kind"], r["namespaced"], r["verbs"]) for r in resources["resources"]] == [
            ("nodes", "NodeMetrics", False, ["get", "list"]),
            ("pods", "PodMetrics", True, ["get", "list"]),
        ]
    swagger = await adapter.get("/openapi/v2")
    validate(swagger)
    index = (await adapter.get("/openapi/v3"))["paths"]
    for version in ("v1", "v1beta1"):
        prefix = f"/apis/metrics.k8s.io/{version}"
        defs = f"io.k8s.metrics.pkg.apis.metrics.{version}"
        pod = swagger["paths"][f"{prefix}/namespaces/{{namespace}}/pods/{{name}}"]
        assert pod["get"]["responses"]["200"]["schema"] == {"$ref": f"#/definitions/{defs}.PodMetrics"}
        assert swagger["definitions"][f"{defs}.NodeMetricsList"]["x-kubernetes-group-version-kind"] == [
            {"group": "metrics.k8s.io", "kind": "NodeMetricsList", "version": version}
        ]
        assert f"apis/metrics.k8s.io/{version}" in index
        v3 = await adapter.get(f"/openapi/v3/apis/metrics.k8s.io/{version}")
        validate(v3)
        schemas = v3["components"]["schemas"]
        assert schemas[f"{defs}.PodMetricsList"]["x-kubernetes-group-version-kind"][0]["version"] == version
        # each document describes its own version only
        assert not [name for name in schemas if name.startswith("io.k8s.metrics.") and not name.startswith(defs + ".")]
    # the two versions' types are the same but for the names they point at
    v1_defs = {k: v for k, v in swagger["definitions"].items() if k.startswith("io.k8s.metrics.pkg.apis.metrics.v1.")}
    renamed = json.loads(json.dumps(v1_defs).replace("metrics.v1.", "metrics.v1beta1.").replace('"v1"', '"v1beta1"'))
    assert {k.replace(".v1.", ".v1beta1."): v for k, v in renamed.items()} == {
        k: v for k, v in swagger["definitions"].items() if k.startswith("io.k8s.metrics.pkg.apis.metrics.v1beta1.")
    }


async def test_without_a_kubernetes_api_it_says_what_is_missing(
    make_adapter: MakeAdapter, proxy: PrometheusProxy
) -> None:
    adapter = await make_adapter(settings_for(proxy.url, None, config=CONFIGS / "prometheus-adapter.yaml"))
    body = await adapter.get(f"{PREFIX}/pods", 503)
    assert "--lister-kubeconfig" in body["message"]


@pytest.mark.parametrize(("path", "kind"), [("/pods", "pods"), ("/namespaces/ml/pods", "pods"), ("/nodes", "nodes")])
async def test_a_watch_is_405_as_metrics_server_answers_it(
    start: Callable[..., Awaitable[Adapter]], path: str, kind: str
) -> None:
    # a list in its place breaks kubectl get -w: it reads a watch event stream and finds a PodMetricsList
    adapter = await start()
    body = await adapter.get(f"{PREFIX}{path}", 405, watch="true")
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "MethodNotAllowed", 405)
    assert body["message"] == f'watch is not supported on resources of kind "{kind}.metrics.k8s.io"'
    assert (await adapter.get(f"{PREFIX}{path}", watch="false"))["kind"].endswith("MetricsList")
    assert (await adapter.get(f"{PREFIX}{path}", 400, watch="yes"))["reason"] == "BadRequest"
    # one object is a get, whatever ?watch says
    assert (await adapter.get(f"{PREFIX}/namespaces/ml/pods/trainer-1", watch="true"))["kind"] == "PodMetrics"


# what kubectl get sends: a Table of meta.k8s.io v1, else v1beta1, else the object
KUBECTL_GET = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


async def get_as(adapter: Adapter, path: str, accept: str, status: int = 200, **params: str) -> Any:
    response = await adapter.client.get(path, headers={"Accept": accept}, params=params or None)
    body = await response.json()
    assert response.status == status, body
    return body


def without_age(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k != "creationTimestamp"}  # the moment of each answer


async def test_kubectl_get_gets_metrics_servers_table(start: Callable[..., Awaitable[Adapter]]) -> None:
    adapter = await start()
    table = await get_as(adapter, f"{PREFIX}/namespaces/ml/pods", KUBECTL_GET)
    assert (table["kind"], table["apiVersion"], table["metadata"]) == ("Table", "meta.k8s.io/v1", {})
    assert [(c["name"], c["format"]) for c in table["columnDefinitions"]] == [
        ("Name", "name"), ("cpu", "quantity"), ("memory", "quantity"), ("Window", "duration")]  # fmt: skip
    listed = (await adapter.get(f"{PREFIX}/namespaces/ml/pods"))["items"]
    assert [row["cells"][0] for row in table["rows"]] == [item["metadata"]["name"] for item in listed]
    for row, item in zip(table["rows"], listed, strict=True):
        _, cpu, memory, window = row["cells"]
        # a pod's usage is the sum over its containers, as metrics-server's table shows it
        assert parse_quantity(cpu) == sum(parse_quantity(c["usage"]["cpu"]) for c in item["containers"])
        assert parse_quantity(memory) == sum(parse_quantity(c["usage"]["memory"]) for c in item["containers"])
        assert window == item["window"] == "5m0s"
        assert (row["object"]["kind"], row["object"]["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1")
        assert without_age(row["object"]["metadata"]) == without_age(item["metadata"])
    trainer = next(row["cells"] for row in table["rows"] if row["cells"][0] == "trainer-0")
    assert (parse_quantity(trainer[1]), parse_quantity(trainer[2])) == (
        Decimal("0.375"),
        Decimal(120 * 1024 * 1024 + 300 * 1024),
    )


async def test_a_table_of_nodes_of_one_object_and_of_each_includeobject(
    start: Callable[..., Awaitable[Adapter]],
) -> None:
    adapter = await start()
    nodes = await get_as(adapter, f"{PREFIX}/nodes", KUBECTL_GET)
    listed = (await adapter.get(f"{PREFIX}/nodes"))["items"]
    assert [row["cells"] for row in nodes["rows"]] == [
        [n["metadata"]["name"], n["usage"]["cpu"], n["usage"]["memory"], n["window"]] for n in listed]  # fmt: skip
    one = await get_as(adapter, f"{PREFIX}/namespaces/ml/pods/trainer-1", KUBECTL_GET)
    assert [row["cells"][0] for row in one["rows"]] == ["trainer-1"]
    whole = await get_as(adapter, f"{PREFIX}/namespaces/ml/pods/trainer-1", KUBECTL_GET, includeObject="Object")
    assert whole["rows"][0]["object"]["kind"] == "PodMetrics"
    bare = await get_as(adapter, f"{PREFIX}/nodes", KUBECTL_GET, includeObject="None")
    assert all("object" not in row for row in bare["rows"])
    older = await get_as(adapter, f"{PREFIX}/nodes", "application/json;as=Table;v=v1beta1;g=meta.k8s.io")
    assert older["apiVersion"] == "meta.k8s.io/v1beta1"
    assert older["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"
    refused = await get_as(adapter, f"{PREFIX}/nodes", KUBECTL_GET, 400, includeObject="All")
    assert "includeObject 'All'" in refused["message"]
    # a client that asks for the object first, or for nothing in particular, gets the object
    for accept in ("application/json", "application/json,application/json;as=Table;v=v1;g=meta.k8s.io", "*/*"):
        assert (await get_as(adapter, f"{PREFIX}/nodes", accept))["kind"] == "NodeMetricsList"
