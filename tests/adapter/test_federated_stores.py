"""Multi-tenant and federated stores, against real Prometheus servers behind stand-ins for what fronts them where
the real thing cannot run here (``proxy.py``: a Mimir-style tenant gateway, a Thanos querier with a store down,
Prometheus 2.49's ``limit``):

- the tenant header reaches every call (queries, series and label listings, each relist, explain's probes), and a
  missing one is a clear error;
- ``partial_response`` is sent as Thanos reads it; a partial answer's warnings are logged once a minute, counted and
  shown by explain; a store down with partial responses off is a 503, not a refused query;
- ``limit`` on listings: Prometheus 2.42 ignores it and answers in full, a store that honours it cuts the listing,
  which is logged and counted;
- two real Prometheus servers at once, each a backend with its own tenant: rules of both answer in one discovery and
  in values, caches are kept apart by backend, explain names the backend, and one backend down leaves the other
  answering while its own metrics say 503 and name it; ``resourceRules`` read the backend they name (a third server
  with the kubelets' and cAdvisor's series).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapter.backends.backend_specs import BackendSpec
from adapter.backends.prometheus import PrometheusConfig
from adapter.provider.explain import render_text
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.cadvisor import cadvisor_prometheus
from harness.stores.exporter import Exporter, exposition
from harness.stores.prometheus import Prometheus, run_prometheus
from harness.stores.proxy import PrometheusProxy
from harness.waiting import wait_until

pytestmark = pytest.mark.prometheus

CM = "/apis/custom.metrics.k8s.io/v1beta2"
EM = "/apis/external.metrics.k8s.io/v1beta1"
RM = "/apis/metrics.k8s.io/v1beta1"
RESOURCE_RULES = Path(__file__).parent / "resource_configs" / "prometheus-adapter.yaml"
MakeAdapter = Callable[..., Awaitable[Adapter]]
TRAINERS = {"labelSelector": "app=trainer"}
POD_RESOURCES = "resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}"

# One backend: a rule that pins its series, one listed through label values, an external rule.
ONE = f"""
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{{namespace!="",pod!=""}}'
  {POD_RESOURCES}
  name: {{as: gpu_utilization}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{{<<.LabelMatchers>>}})'
- seriesQuery: '{{__name__=~"DCGM_FI_DEV_FB_.*",namespace!="",pod!=""}}'
  {POD_RESOURCES}
  name: {{matches: ^DCGM_FI_DEV_FB_USED$, as: gpu_memory_used}}
  metricsQuery: 'sum by (<<.GroupBy>>) (<<.Series>>{{<<.LabelMatchers>>}})'
externalRules:
- seriesQuery: 'queue_depth{{namespace!=""}}'
  resources: {{overrides: {{namespace: {{resource: namespace}}}}}}
  metricsQuery: 'sum(<<.Series>>{{<<.LabelMatchers>>}})'
"""
# Two backends: the same series and query in both (gpu_utilization and gpu_utilization_b), and series only the
# second one has, one of them found through its label values.
TWO = f"""
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{{namespace!="",pod!=""}}'
  {POD_RESOURCES}
  name: {{as: gpu_utilization}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{{<<.LabelMatchers>>}})'
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{{namespace!="",pod!=""}}'
  backend: tenant-b
  {POD_RESOURCES}
  name: {{as: gpu_utilization_b}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{{<<.LabelMatchers>>}})'
- seriesQuery: '{{__name__=~"requests_.*",namespace!="",pod!=""}}'
  backend: tenant-b
  {POD_RESOURCES}
  metricsQuery: 'sum by (<<.GroupBy>>) (<<.Series>>{{<<.LabelMatchers>>}})'
externalRules:
- seriesQuery: 'backlog{{namespace!=""}}'
  backend: tenant-b
  resources: {{overrides: {{namespace: {{resource: namespace}}}}}}
  metricsQuery: 'sum(<<.Series>>{{<<.LabelMatchers>>}})'
"""
SECOND = [
    ("DCGM_FI_DEV_GPU_UTIL", {"namespace": "ml", "pod": "trainer-0", "gpu": "0"}, "12"),
    ("DCGM_FI_DEV_GPU_UTIL", {"namespace": "ml", "pod": "trainer-1", "gpu": "1"}, "30"),
    ("requests_in_flight", {"namespace": "ml", "pod": "trainer-0"}, "3"),
    ("requests_in_flight", {"namespace": "ml", "pod": "trainer-1"}, "5"),
    ("backlog", {"namespace": "ml", "queue": "jobs"}, "11"),
]


@pytest.fixture(scope="module")
def second(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A second real Prometheus, holding other series than the session's."""
    with (
        Exporter(exposition(SECOND)) as exporter,
        run_prometheus(tmp_path_factory.mktemp("second"), scrape_targets=[exporter.target]) as prom,
    ):
        prom.wait_for("requests_in_flight", min_results=2)
        prom.wait_for("backlog")
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", min_results=2)
        yield prom


@pytest.fixture
async def gateways(prometheus: Prometheus, second: Prometheus) -> AsyncIterator[tuple[PrometheusProxy, ...]]:
    """A tenant gateway in front of each server: tenant-a's and tenant-b's."""
    a, b = PrometheusProxy(prometheus.url), PrometheusProxy(second.url)
    a.tenant, b.tenant = "tenant-a", "tenant-b"
    await a.start()
    await b.start()
    yield a, b
    await a.close()
    await b.close()


def rules_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return path


def connection(url: str, **fields: Any) -> PrometheusConfig:
    return PrometheusConfig(url=url, timeout=5.0, **fields)


async def listed(adapter: Adapter, group: str = CM) -> set[str]:
    return {r["name"] for r in (await adapter.get(group))["resources"]}


async def values(adapter: Adapter, metric: str, status: int = 200) -> Any:
    body = await adapter.get(f"{CM}/namespaces/ml/pods/*/{metric}", status=status, **TRAINERS)
    if status != 200:
        return body
    return {i["describedObject"]["name"]: i["value"] for i in body["items"]}


def _has(adapter: Adapter, names: set[str]) -> bool:
    catalog = adapter.components.discovery.catalog
    served = {f"{gr}/{name}" for name, gr in catalog.custom} | {m.name for m in catalog.external.values()}
    return names <= served


async def relisted(adapter: Adapter, names: set[str]) -> None:
    """Until the catalog serves ``names``: a relist found them (the first may still be running)."""
    await wait_until(lambda: _has(adapter, names), what=f"a relist to find {sorted(names)}")


def sample(adapter: Adapter, name: str, **labels: str) -> float:
    return adapter.components.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_the_tenant_header_reaches_every_call_through_a_tenant_gateway(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    proxy.tenant = "tenant-a"
    settings = settings_for(
        proxy.url,
        kube.kubeconfig(tmp_path / "kubeconfig"),
        prometheus=connection(proxy.url, headers=(("X-Scope-OrgID", "tenant-a"),)),
        config=rules_file(tmp_path, ONE),
        cache_ttl=0.0,
    )
    adapter = await make_adapter(settings)
    await relisted(adapter, {"pods/gpu_memory_used"})
    assert await values(adapter, "gpu_utilization") == {"trainer-0": "88", "trainer-1": "40"}
    assert await values(adapter, "gpu_memory_used") == {"trainer-0": "41984", "trainer-1": "1500"}
    external = await adapter.get(f"{EM}/namespaces/ml/queue_depth")
    assert [i["value"] for i in external["items"]] == ["49"]
    report = await adapter.get(f"/explain{CM}/namespaces/serving/pods/ghost/gpu_utilization")
    assert "Prometheus has DCGM_FI_DEV_GPU_UTIL series, but none with namespace=serving" in report["why"]
    await adapter.components.discovery.relist()  # a second relist, through the same header
    paths = {s.path for s in proxy.seen}
    assert {"/api/v1/query", "/api/v1/series", "/api/v1/label/__name__/values"} <= paths
    probes = [s for s in proxy.seen if s.form.get("query", "").startswith("count")]
    assert probes, "explain's probe queries went through the gateway"
    assert sum(s.path == "/api/v1/label/__name__/values" for s in proxy.seen) >= 2  # one per relist
    assert {s.headers.get("X-Scope-OrgID") for s in proxy.seen} == {"tenant-a"}
    assert proxy.refused == 0


async def test_without_the_tenant_header_the_gateway_refuses_and_the_error_says_what_is_missing(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    proxy.tenant = "tenant-a"
    settings = settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"), config=rules_file(tmp_path, ONE))
    adapter = await make_adapter(settings)
    body = await values(adapter, "gpu_utilization", status=503)
    assert body["message"] == "the metrics backend (Prometheus) is currently unavailable"
    report = await adapter.get(f"/explain{CM}/namespaces/ml/pods/trainer-0/gpu_utilization")
    (query,) = report["queries"]
    assert query["backend"] == "default"
    assert query["error"].startswith("Prometheus /api/v1/query answered HTTP 401 with 10 bytes that are not its API's")
    assert query["error"].endswith(
        "(a credential or tenant header missing or refused? --prometheus-header, --prometheus-token-file)"
    )
    assert "HTTP 401" in (report["discovery"]["lastError"] or "")
    assert proxy.refused >= 2


async def test_partial_response_is_sent_on_every_call_only_when_asked(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    kubeconfig, config = kube.kubeconfig(tmp_path / "kubeconfig"), rules_file(tmp_path, ONE)
    for asked, sent in ((None, set()), (True, {"true"}), (False, {"false"})):
        proxy.seen.clear()
        settings = settings_for(
            proxy.url, kubeconfig, prometheus=connection(proxy.url, partial_response=asked), config=config
        )
        adapter = await make_adapter(settings)
        await relisted(adapter, {"pods/gpu_memory_used"})
        await values(adapter, "gpu_utilization")
        await adapter.client.close()
        assert {s.path for s in proxy.seen} >= {"/api/v1/query", "/api/v1/series", "/api/v1/label/__name__/values"}
        assert {s.form.get("partial_response") for s in proxy.seen} - {None} == sent
        assert all(s.form.get("partial_response") for s in proxy.seen) == bool(sent)
        # every call carries its deadline; the listings their limit (10,001 names: one more than discovery serves)
        assert all(s.form.get("timeout") in ("5s", "30s") for s in proxy.seen)
        assert {s.form.get("limit") for s in proxy.seen if s.path == "/api/v1/series"} == {"30000"}
        assert {s.form.get("limit") for s in proxy.seen if s.path.startswith("/api/v1/label/")} == {"10001"}


async def test_a_partial_answer_is_served_and_its_warnings_logged_once_counted_and_explained(
    kube: FakeKubeAPIServer,
    proxy: PrometheusProxy,
    make_adapter: MakeAdapter,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    proxy.stores_down = ["store-eu:10901"]
    settings = settings_for(
        proxy.url,
        kube.kubeconfig(tmp_path / "kubeconfig"),
        prometheus=connection(proxy.url, partial_response=True),
        config=rules_file(tmp_path, ONE),
        cache_ttl=0.0,
    )
    caplog.set_level(logging.WARNING, logger="adapter.backends.prometheus_warnings")
    adapter = await make_adapter(settings)
    await relisted(adapter, {"pods/gpu_memory_used"})
    for _ in range(3):
        assert await values(adapter, "gpu_utilization") == {"trainer-0": "88", "trainer-1": "40"}
    warned = sample(
        adapter, "gpuscale_adapter_prometheus_warnings_total", backend="default", endpoint="query", kind="warning"
    )
    assert warned >= 3
    assert sample(adapter, "gpuscale_adapter_prometheus_warnings_total", backend="default", endpoint="series",
                  kind="warning") >= 1  # fmt: skip
    lines = [r.getMessage() for r in caplog.records if "/api/v1/query for " in r.getMessage()]
    assert len(lines) == 1, lines  # the time range in the text differs each time: still one remark
    assert "warned, so the answer may be incomplete: receive series from Addr: store-eu:10901" in lines[0]
    report = await adapter.get(f"/explain{CM}/namespaces/ml/pods/*/gpu_utilization", labelSelector="app=trainer")
    (query,) = report["queries"]
    assert [w.split(" LabelSets")[0] for w in query["warnings"]] == ["receive series from Addr: store-eu:10901"]
    assert "\n  warning: receive series from Addr: store-eu:10901 LabelSets" in render_text(report)  # the CLI's text
    assert any(
        line.startswith(f"{settings.config}: rules[0]: Prometheus warned, so its answer may be partial: receive series")
        for line in report["why"]
    )


@pytest.mark.parametrize("sent", [False, None], ids=["partial_response=false", "the querier's default off"])
async def test_a_store_down_without_partial_responses_is_unavailable_not_a_refused_query(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path, sent: bool | None
) -> None:
    proxy.stores_down = ["store-eu:10901"]
    proxy.partial_response_default = False
    settings = settings_for(
        proxy.url,
        kube.kubeconfig(tmp_path / "kubeconfig"),
        prometheus=connection(proxy.url, partial_response=sent),
        config=rules_file(tmp_path, ONE),
    )
    adapter = await make_adapter(settings)
    body = await values(adapter, "gpu_utilization", status=503)
    assert body["reason"] == "ServiceUnavailable"
    assert sample(adapter, "gpuscale_adapter_prometheus_errors_total", endpoint="query", kind="unavailable") >= 1
    assert sample(adapter, "gpuscale_adapter_prometheus_errors_total", endpoint="query", kind="refused") == 0
    report = await adapter.get(f"/explain{CM}/namespaces/ml/pods/trainer-0/gpu_utilization")
    assert (
        "HTTP 422 execution: expanding series: proxy Series(): rpc error: code = Aborted"
        in report["queries"][0]["error"]
    )
    assert "receive series from" in (report["discovery"]["lastError"] or "")


def listing_one_series(kube: FakeKubeAPIServer, proxy: PrometheusProxy, tmp_path: Path) -> Any:
    """The rules of ONE, each listing asked for at most one series (--prometheus-series-limit=1)."""
    return settings_for(
        proxy.url,
        kube.kubeconfig(tmp_path / "kubeconfig"),
        prometheus=connection(proxy.url, series_limit=1),
        config=rules_file(tmp_path, ONE),
    )


async def test_prometheus_2_42_ignores_limit_and_the_listing_is_complete(
    kube: FakeKubeAPIServer,
    proxy: PrometheusProxy,
    make_adapter: MakeAdapter,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    adapter = await make_adapter(listing_one_series(kube, proxy, tmp_path))
    await relisted(adapter, {"pods/gpu_memory_used", "namespaces/gpu_memory_used"})
    assert {s.form.get("limit") for s in proxy.seen if s.path == "/api/v1/series"} == {"1"}
    assert sample(adapter, "gpuscale_adapter_prometheus_warnings_total", backend="default", endpoint="series",
                  kind="truncated") == 0  # fmt: skip
    assert "--prometheus-series-limit" not in caplog.text


async def test_a_listing_cut_at_the_limit_is_logged_and_counted_once(
    kube: FakeKubeAPIServer,
    proxy: PrometheusProxy,
    make_adapter: MakeAdapter,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    proxy.honour_limit = True  # as Prometheus 2.49 and later: at most limit entries, and a warning
    adapter = await make_adapter(listing_one_series(kube, proxy, tmp_path))
    await relisted(adapter, {"pods/gpu_memory_used"})
    cut = sample(
        adapter, "gpuscale_adapter_prometheus_warnings_total", backend="default", endpoint="series", kind="truncated"
    )
    assert cut >= 2  # each listing of the relist
    assert (
        'Prometheus /api/v1/series for DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""} stopped at 1 series' in caplog.text
    )
    assert "results truncated due to limit" not in caplog.text  # said once, in the adapter's words
    assert sample(adapter, "gpuscale_adapter_prometheus_warnings_total", backend="default", endpoint="series",
                  kind="warning") == 0  # fmt: skip


def two_backends(kube: FakeKubeAPIServer, gateways: tuple[PrometheusProxy, ...], tmp_path: Path, **more: Any) -> Any:
    a, b = gateways
    return settings_for(
        a.url,
        kube.kubeconfig(tmp_path / "kubeconfig"),
        prometheus=connection(a.url, headers=(("X-Scope-OrgID", "tenant-a"),)),
        backends=(BackendSpec("tenant-b", b.url, (("X-Scope-OrgID", "tenant-b"),)),),
        config=rules_file(tmp_path, TWO),
        **more,
    )


B_METRICS = {"pods/gpu_utilization_b", "pods/requests_in_flight", "backlog"}


async def test_rules_of_two_backends_answer_in_one_discovery_and_in_values(
    kube: FakeKubeAPIServer, gateways: tuple[PrometheusProxy, ...], make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    a, b = gateways
    settings = two_backends(kube, gateways, tmp_path, cache_ttl=60.0)
    config = settings.config
    adapter = await make_adapter(settings)
    await relisted(adapter, {"pods/gpu_utilization", *B_METRICS})
    assert {"pods/gpu_utilization", "pods/gpu_utilization_b", "pods/requests_in_flight"} <= await listed(adapter)
    assert await listed(adapter, EM) == {"backlog"}
    # the same PromQL to both servers: kept apart in the cache (60 s) by backend
    assert await values(adapter, "gpu_utilization") == {"trainer-0": "88", "trainer-1": "40"}
    assert await values(adapter, "gpu_utilization_b") == {"trainer-0": "12", "trainer-1": "30"}
    assert await values(adapter, "gpu_utilization") == {"trainer-0": "88", "trainer-1": "40"}
    assert await values(adapter, "requests_in_flight") == {"trainer-0": "3", "trainer-1": "5"}
    assert [i["value"] for i in (await adapter.get(f"{EM}/namespaces/ml/backlog"))["items"]] == ["11"]
    reports = [
        await adapter.get(f"/explain{CM}/namespaces/ml/pods/*/{m}", labelSelector="app=trainer")
        for m in ("gpu_utilization", "gpu_utilization_b")
    ]
    (q_a,), (q_b,) = (r["queries"] for r in reports)
    assert (q_a["backend"], q_b["backend"]) == ("default", "tenant-b")
    assert q_a["promql"] == q_b["promql"]
    assert f"query ({config}: rules[1], backend tenant-b, cache " in render_text(reports[1])
    assert f"query ({config}: rules[0], cache " in render_text(reports[0])
    # each gateway saw only its own tenant's calls, and only the series of its own rules
    for gateway, tenant in ((a, "tenant-a"), (b, "tenant-b")):
        assert {s.headers.get("X-Scope-OrgID") for s in gateway.seen} == {tenant}
        assert gateway.refused == 0
    assert {"/api/v1/query", "/api/v1/series", "/api/v1/label/__name__/values"} <= {s.path for s in b.seen}
    assert not [s for s in a.seen if "requests_" in str(s.form) or "backlog" in str(s.form)]


async def test_one_backend_down_the_other_still_answers_and_errors_name_the_backend(
    kube: FakeKubeAPIServer,
    gateways: tuple[PrometheusProxy, ...],
    make_adapter: MakeAdapter,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = gateways
    adapter = await make_adapter(two_backends(kube, gateways, tmp_path, cache_ttl=0.0))
    discovery = adapter.components.discovery
    await relisted(adapter, {"pods/gpu_utilization", *B_METRICS})
    await b.stop()  # tenant-b's store: connection refused
    await discovery.relist()
    error = discovery.catalog.error or ""
    # the first of its calls that failed: the names its regex rule lists are asked before any series listing
    assert error.startswith(f"Prometheus backend tenant-b /api/v1/label/__name__/values at {b.url} unreachable")
    assert "relist failed in part, serving the metrics found before from what failed: Prometheus backend tenant-b" in (
        caplog.text
    )
    # tenant-b's metrics stay listed (found before, even the one only its label values named); the default answers
    assert _has(adapter, {"pods/gpu_utilization", *B_METRICS})
    assert await values(adapter, "gpu_utilization") == {"trainer-0": "88", "trainer-1": "40"}
    body = await values(adapter, "requests_in_flight", status=503)
    assert body["message"] == "the metrics backend (Prometheus) is currently unavailable"
    assert f"Prometheus backend tenant-b /api/v1/query at {b.url} unreachable" in caplog.text
    report = await adapter.get(f"/explain{CM}/namespaces/ml/pods/trainer-0/requests_in_flight")
    (query,) = report["queries"]
    assert query["backend"] == "tenant-b"
    assert query["error"].startswith(f"Prometheus backend tenant-b /api/v1/query at {b.url} unreachable")
    assert report["discovery"]["lastError"] == error
    assert (await adapter.client.get("/readyz")).status == 200
    assert sample(adapter, "gpuscale_adapter_discovery_runs_total", result="error") >= 1
    await b.start()  # back on the same port
    await discovery.relist()
    assert discovery.catalog.error is None
    assert await values(adapter, "requests_in_flight") == {"trainer-0": "3", "trainer-1": "5"}
    assert a.refused == b.refused == 0


@pytest.fixture(scope="module")
def kubelets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A third real Prometheus, with the containers' and nodes' CPU and memory (harness/stores/cadvisor.py)."""
    with cadvisor_prometheus(tmp_path_factory.mktemp("kubelets")) as prom:
        yield prom


@pytest.mark.parametrize("named", [True, False], ids=["backend: kubelets", "no backend key"])
async def test_resource_rules_are_asked_of_the_backend_they_name(
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    kubelets: Prometheus,
    make_adapter: MakeAdapter,
    tmp_path: Path,
    named: bool,
) -> None:
    text = RESOURCE_RULES.read_text()
    if named:
        text = text.replace('"resourceRules":\n', '"resourceRules":\n  "backend": "kubelets"\n', 1)
    settings = settings_for(
        prometheus.url,
        kube.kubeconfig(tmp_path / "kubeconfig"),
        backends=(BackendSpec("kubelets", kubelets.url),),
        config=rules_file(tmp_path, text),
    )
    adapter = await make_adapter(settings)
    if not named:  # the default server has no container series
        body = await adapter.get(f"{RM}/namespaces/ml/pods/trainer-1", status=404)
        assert body["message"] == 'podmetrics.metrics.k8s.io "ml/trainer-1" not found'
        return
    body = await adapter.get(f"{RM}/namespaces/ml/pods/trainer-1")
    assert body["containers"] == [{"name": "main", "usage": {"cpu": "1500m", "memory": "1049088Ki"}}]
