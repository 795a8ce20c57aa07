"""Discovery never takes the metrics APIs away, and follows Prometheus's series: with no matching series and with
Prometheus down the group-version documents answer 200 (the declared metrics, or an empty list) while /readyz and
the log say what is wrong; a series that stops being written leaves the catalog after --metrics-max-age."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.exporter import Exporter, exposition
from harness.stores.kinds import STORES, run_store
from harness.stores.prometheus import Prometheus
from harness.stores.proxy import PrometheusProxy
from harness.stores.victoria_metrics import VictoriaMetrics
from harness.waiting import eventually

pytestmark = pytest.mark.prometheus

CM = "/apis/custom.metrics.k8s.io/v1beta2"
MakeAdapter = Callable[..., Awaitable[Adapter]]


async def verbose_readyz(adapter: Adapter) -> str:
    resp = await adapter.client.get("/readyz?verbose")
    assert resp.status == 200  # discovery's troubles never fail readiness
    return await resp.text()


async def names(adapter: Adapter) -> set[str]:
    body = await adapter.get(CM)
    assert body["kind"] == "APIResourceList"
    return {r["name"] for r in body["resources"]}


async def test_no_matching_series_is_an_empty_list_and_readyz_says_why(
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    make_adapter: MakeAdapter,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text('rules:\n- seriesQuery: \'{__name__=~"nothing_here_.*",pod!=""}\'\n')
    adapter = await make_adapter(settings_for(prometheus.url, kube.kubeconfig(tmp_path / "kubeconfig"), config=config))
    body = await adapter.get(CM)
    assert (body["groupVersion"], body["resources"]) == ("custom.metrics.k8s.io/v1beta2", [])
    assert [g["name"] for g in (await adapter.get("/apis"))["groups"]] == ["custom.metrics.k8s.io"]
    await adapter.get("/apis/external.metrics.k8s.io/v1beta1", status=404)  # no external rules: no such group
    assert (await adapter.client.get("/readyz")).status == 200
    text = await verbose_readyz(adapter)
    assert f"[+]discovery ok, the rules ({config}) matched no series: the metrics APIs list no metrics\n" in text
    assert f"the rules ({config}) matched no series with samples in the last" in caplog.text


async def test_prometheus_down_from_the_start_serves_the_declared_metrics(
    kube: FakeKubeAPIServer,
    proxy: PrometheusProxy,
    make_adapter: MakeAdapter,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await proxy.stop()  # connection refused
    adapter = await make_adapter(settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig")))
    # the built-in rules pin their series: their metrics are listed before any relist worked
    assert {"pods/gpu_utilization", "nodes/gpu_memory_used"} <= await names(adapter)
    assert (await adapter.get("/apis/custom.metrics.k8s.io/v1beta1"))["resources"]
    text = await verbose_readyz(adapter)
    assert "[+]discovery ok, the last relist failed, the metrics found before are served: " in text
    assert "unreachable" in text
    assert "relist failed, serving the metrics found before" in caplog.text
    # a request for values still says Prometheus is down
    body = await adapter.get(f"{CM}/namespaces/ml/pods/*/gpu_utilization", status=503)
    assert body["reason"] == "ServiceUnavailable"


async def test_prometheus_down_with_rules_that_declare_nothing_is_an_empty_list(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        'rules:\n- seriesQuery: \'{__name__=~"DCGM_.*",Hostname!=""}\'\n'
        "  resources: {overrides: {Hostname: {resource: node}}}\n"
    )
    adapter = await make_adapter(settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"), config=config))
    assert "nodes/DCGM_FI_DEV_GPU_UTIL" in await names(adapter)
    proxy.respond = (503, b"")
    await adapter.components.discovery.relist()
    assert "nodes/DCGM_FI_DEV_GPU_UTIL" in await names(adapter)  # the last good catalog
    await proxy.stop()
    fresh = await make_adapter(settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig2"), config=config))
    assert await names(fresh) == set()
    assert "the last relist failed" in await verbose_readyz(fresh)


STEADY = ("steady_load", {"namespace": "ml", "pod": "p1"}, "2")


@pytest.fixture(params=STORES)
def fading(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Exporter, Prometheus]]:
    """A store of its own (each store in turn), scraping every second an exporter whose series the test changes."""
    lines = [("fading_load", {"namespace": "ml", "pod": "p1"}, "1"), STEADY]
    with (
        Exporter(exposition(lines)) as exporter,
        run_store(request.param, tmp_path_factory.mktemp("fading"), [exporter.target]) as prom,
    ):
        prom.wait_for("fading_load")
        prom.wait_for("steady_load")
        yield exporter, prom


async def test_a_series_that_stops_leaves_discovery_after_max_age(
    kube: FakeKubeAPIServer,
    fading: tuple[Exporter, Prometheus],
    make_adapter: MakeAdapter,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    exporter, prom = fading
    config = tmp_path / "config.yaml"
    config.write_text(
        'rules:\n- seriesQuery: \'{__name__=~".*_load",namespace!=""}\'\n  resources: {template: "<<.Resource>>"}\n'
    )
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
    url = prom.adapter_url
    short = await make_adapter(settings_for(url, kubeconfig, config=config, relist_interval=1.0, max_age=2.0))
    long = await make_adapter(settings_for(url, kubeconfig, config=config, relist_interval=1.0, max_age=3600.0))
    for adapter in (short, long):
        assert {"pods/fading_load", "pods/steady_load"} <= await names(adapter)

    exporter.text = exposition([STEADY])  # the store marks fading_load stale at its next scrape

    async def no_value() -> bool:
        return prom.query("fading_load") == []

    await eventually(no_value, within=30, what="fading_load's stale marker")
    await short.get(f"{CM}/namespaces/ml/pods/p1/fading_load", status=404)
    if isinstance(prom, VictoriaMetrics):
        # VictoriaMetrics lists a series in /api/v1/series for every day it had samples (a per-day index), however
        # recent the start asked: it stays in discovery until the UTC day ends, though it has no value
        await relisted_twice(short)
        assert {"pods/fading_load", "pods/steady_load"} <= await names(short)
        return

    async def gone() -> bool:
        return "pods/fading_load" not in await names(short)

    await eventually(gone, within=60, what="fading_load to leave discovery")
    assert "pods/steady_load" in await names(short)
    # the same series, relisted with an hour of max-age after it stopped, is still there
    await relisted_twice(long)
    assert {"pods/fading_load", "pods/steady_load"} <= await names(long)


async def relisted_twice(adapter: Adapter) -> None:
    def runs() -> float:
        sample = adapter.components.metrics.registry.get_sample_value
        return sample("gpuscale_adapter_discovery_runs_total", {"result": "success"}) or 0.0

    before = runs()

    async def relisted() -> bool:
        return runs() >= before + 2

    await eventually(relisted, within=30, what="two more relists")
