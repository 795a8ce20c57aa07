"""What differs with VictoriaMetrics as the store, against the real server (docs/adapter.md, "VictoriaMetrics, Thanos,
Mimir"): its answers near now lag by -search.latencyOffset unless the adapter's URL asks for nocache=1; a series
listing over -search.maxSeries fails the relist, which keeps the metrics it had and says which limit to raise; it
answers 422 to every error, so its timeouts are told from refused queries by their text.

The rest of the adapter's behaviour against VictoriaMetrics is checked by the same tests as against Prometheus
(``on_every_store``: test_api, test_config_rules, test_discovery, test_discovery_lifecycle, the kubectl tests of
test_cli and the PromQL escaping test).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.exporter import Exporter
from harness.stores.proxy import PrometheusProxy
from harness.stores.victoria_metrics import VictoriaMetrics, run_victoria_metrics
from harness.waiting import eventually

CM = "/apis/custom.metrics.k8s.io/v1beta2"
TRAINERS = f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer"
MakeAdapter = Callable[..., Awaitable[Adapter]]
LATENCY_OFFSET = 30  # seconds: -search.latencyOffset's default in 1.79

SAMPLED_AT = """
rules:
- seriesQuery: 'queue_depth{namespace!=""}'
  resources: {overrides: {namespace: {resource: namespace}}}
  name: {matches: "^queue_depth$", as: "queue_sampled_at"}
  metricsQuery: 'max by (<<.GroupBy>>) (timestamp(<<.Series>>{<<.LabelMatchers>>}))'
"""


def seconds(rfc3339: str) -> int:
    return calendar.timegm(time.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ"))


async def age(adapter: Adapter) -> float | None:
    """How old the newest queue_depth sample in ml was at the time the answer is stamped with; None: no answer."""
    report = await adapter.get(f"/explain{CM}/namespaces/ml/metrics/queue_sampled_at")
    samples = [s for q in report["queries"] for s in q.get("samples", [])]
    if not samples:
        return None
    (sample,) = samples
    return seconds(sample["timestamp"]) - float(sample["value"])


@pytest.mark.slow
async def test_nocache_in_the_url_gives_values_as_of_now_instead_of_the_latency_offset_ago(
    kube: FakeKubeAPIServer,
    victoria_metrics: VictoriaMetrics,
    make_adapter: MakeAdapter,
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(SAMPLED_AT)
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
    plain = await make_adapter(settings_for(victoria_metrics.url, kubeconfig, config=config, cache_ttl=0.0))
    fresh = await make_adapter(settings_for(victoria_metrics.adapter_url, kubeconfig, config=config, cache_ttl=0.0))
    assert victoria_metrics.adapter_url.endswith("/?nocache=1")

    async def answered() -> bool:  # nothing until the server has held data for the offset
        return await age(plain) is not None

    await eventually(answered, within=LATENCY_OFFSET + 30, what="an answer as of the latency offset ago")
    lagging, current = await age(plain), await age(fresh)
    assert lagging is not None
    assert current is not None
    # without nocache=1 the value is the one of 30 s before, stamped with the time asked
    assert lagging >= LATENCY_OFFSET - 1  # the stamp is shown in whole seconds
    assert current < lagging


@pytest.fixture
def few_series_allowed(tmp_path: Path, exporter: Exporter) -> Iterator[VictoriaMetrics]:
    """A VictoriaMetrics that lists at most 5 series: fewer than the 9 DCGM_FI_DEV_GPU_UTIL it stores (the 10th reads
    NaN, which VictoriaMetrics does not store)."""
    with run_victoria_metrics(tmp_path / "vm", [exporter.target], extra_args=["-search.maxSeries=5"]) as vm:
        vm.wait_for("DCGM_FI_DEV_GPU_UTIL", min_results=9)
        yield vm


async def test_a_listing_over_max_series_fails_the_relist_and_says_which_limit(
    kube: FakeKubeAPIServer,
    few_series_allowed: VictoriaMetrics,
    make_adapter: MakeAdapter,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    vm = few_series_allowed
    # The limit holds for a listing with a label matcher; a listing by name alone (DCGM_FI_DEV_GPU_UTIL{}, which the
    # built-in rules share) was answered in full, so these rules list with matchers, as a user's rules may.
    config = tmp_path / "rules.yaml"
    config.write_text(
        "rules:\n"
        "- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{Hostname=~\"node-.+\"}'\n"
        "  resources: {overrides: {Hostname: {resource: node}}}\n"
        "  name: {as: gpu_utilization}\n"
        "  metricsQuery: 'avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'\n"
        '- seriesQuery: \'DCGM_FI_DEV_GPU_UTIL{pod!="",namespace!=""}\'\n'
        "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
        "  name: {as: gpu_utilization}\n"
        "  metricsQuery: 'avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'\n"
    )
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
    adapter = await make_adapter(settings_for(vm.adapter_url, kubeconfig, config=config))
    await adapter.components.discovery.relist()
    error = adapter.components.discovery.catalog.error or ""
    assert "/api/v1/series answered HTTP 422" in error
    assert "the number of matching timeseries exceeds 5" in error
    assert "-search.max" in error  # VictoriaMetrics' own words name the flags to raise
    assert "relist failed, serving the metrics found before" in caplog.text
    # the rules' metrics stay listed (their series are declared) and answered: queries are not bound by
    # -search.maxSeries
    resources = {r["name"] for r in (await adapter.get(CM))["resources"]}
    assert {"pods/gpu_utilization", "nodes/gpu_utilization"} <= resources
    body = await adapter.get(f"{CM}/namespaces/ml/pods/*/gpu_utilization", labelSelector="app=trainer")
    assert {i["describedObject"]["name"]: i["value"] for i in body["items"]} == {"trainer-0": "88", "trainer-1": "40"}


# What VictoriaMetrics 1.79 answers when a query's deadline passes while it reads (app/vmselect/main.go
# sendPrometheusError: 422 for any error without a status of its own; netstorage.go's message; Deadline.String)
VM_TIMEOUT = (
    b'{"status":"error","errorType":"422","error":"error when executing query=\\"avg by (pod) (DCGM_FI_DEV_GPU_UTIL)'
    b'\\" for (time=1796300122652, step=300000): timeout exceeded during the query: 10.000 seconds (elapsed 10.412 '
    b'seconds); the timeout can be adjusted with `-search.maxQueryDuration` command-line flag"}'
)


async def test_its_timeout_is_a_503_and_a_query_it_refuses_a_500(
    kube: FakeKubeAPIServer,
    victoria_metrics: VictoriaMetrics,
    make_adapter: MakeAdapter,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    proxy = PrometheusProxy(victoria_metrics.url)
    await proxy.start()
    config = tmp_path / "config.yaml"
    config.write_text(
        "rules:\n- seriesQuery: 'queue_depth{namespace!=\"\"}'\n"
        "  resources: {overrides: {namespace: {resource: namespace}}}\n"
        "  metricsQuery: 'sum by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>}'\n"  # one parenthesis short
    )
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
    try:
        adapter = await make_adapter(settings_for(f"{proxy.url}/?nocache=1", kubeconfig, cache_ttl=0.0))
        assert len((await adapter.get(TRAINERS))["items"]) == 2
        proxy.respond = (422, VM_TIMEOUT)
        body = await adapter.get(TRAINERS, status=503)
        assert body["reason"] == "ServiceUnavailable"
        assert (
            'answered HTTP 422 422: error when executing query="avg by (pod) (DCGM_FI_DEV_GPU_UTIL)" for' in caplog.text
        )
        assert "timeout exceeded during the query" in caplog.text
        proxy.respond = None
        assert len((await adapter.get(TRAINERS))["items"]) == 2
        # the real server's 422 for a query it cannot parse stays what it is: a rule's fault, a 500
        broken = await make_adapter(settings_for(victoria_metrics.adapter_url, kubeconfig, config=config))
        body = await broken.get(f"{CM}/namespaces/ml/metrics/queue_depth", status=500)
        assert body["reason"] == "InternalError"
        assert "answered HTTP 422 422: error when executing query=" in caplog.text
    finally:
        await proxy.close()
