"""Large Prometheus answers: refused over --prometheus-max-answer-bytes, read without stopping the event loop, and not
kept in memory once nothing needs them.

Through the forwarding proxy in front of the real Prometheus. No test measures time against a fixed bound: the
event loop's responsiveness is compared between two runs, or shown by health probes answered while a parse runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from adapter.backends.prometheus import PrometheusClient, PrometheusConfig, QueryResult, make_session
from adapter.self_metrics import AdapterMetrics
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.proxy import PrometheusProxy
from harness.waiting import eventually, wait_until

CM = "/apis/custom.metrics.k8s.io/v1beta2"
TRAINERS = f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer"
MiB = 1024 * 1024


@functools.cache
def vector(series: int) -> bytes:
    """About 240 bytes a series, as DCGM labels them, for pods no request names."""
    result = [
        {
            "metric": {
                "__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": f"node-{i // 8:05d}", "UUID": f"GPU-{i:08x}-0f3c-4b5e",
                "container": "main", "gpu": str(i % 8), "modelName": "NVIDIA H200", "namespace": "ml",
                "pod": f"elsewhere-{i:06d}",
            },
            "value": [1.8e9, str(i % 100)],
        }
        for i in range(series)
    ]  # fmt: skip
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def errors(adapter: Adapter, kind: str, endpoint: str = "query") -> float:
    registry = adapter.components.metrics.registry
    labels = {"endpoint": endpoint, "kind": kind}
    return registry.get_sample_value("gpuscale_adapter_prometheus_errors_total", labels) or 0.0


MakeAdapter = Callable[..., Awaitable[Adapter]]


@pytest.fixture
async def capped(kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path) -> Adapter:
    """An adapter that reads at most 1 MiB of an answer."""
    settings = settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"), cache_ttl=0.0)
    prometheus = dataclasses.replace(settings.prometheus, timeout=5.0, max_answer_bytes=MiB)
    return await make_adapter(dataclasses.replace(settings, prometheus=prometheus))


LIMIT = "it is larger than the 1Mi limit of --prometheus-max-answer-bytes"


async def test_an_answer_whose_content_length_is_over_the_limit_is_a_503_naming_the_limit(
    capped: Adapter, proxy: PrometheusProxy
) -> None:
    proxy.respond = (200, vector(20_000))  # 4.8 MB
    status = await capped.get(TRAINERS, status=503)
    assert status["reason"] == "ServiceUnavailable"
    assert status["message"] == f"the metrics backend (Prometheus) sent an answer the adapter cannot use: {LIMIT}"
    assert errors(capped, "too_large") >= 1
    assert (await capped.client.get("/healthz")).status == 200
    proxy.respond = None
    assert len((await capped.get(TRAINERS))["items"]) == 2


async def test_an_endless_answer_without_a_content_length_is_cut_off_at_the_limit(
    capped: Adapter, proxy: PrometheusProxy
) -> None:
    async def endless() -> AsyncIterator[bytes]:
        yield b'{"status":"success","data":{"resultType":"vector","result":['
        item = b'{"metric":{"pod":"elsewhere"},"value":[1800000000,"1"]},' * 1000
        while True:  # ends when the adapter hangs up
            yield item

    proxy.stream = endless
    status = await capped.get(TRAINERS, status=503)
    assert status["message"].endswith(LIMIT)
    await wait_until(lambda: proxy.hung_up >= 1, what="the adapter to hang up on the stream")
    assert (await capped.client.get("/healthz")).status == 200


async def test_discovery_keeps_its_catalog_when_a_series_list_is_over_the_limit(
    capped: Adapter, proxy: PrometheusProxy, caplog: pytest.LogCaptureFixture
) -> None:
    series = [{"__name__": "DCGM_FI_DEV_GPU_UTIL", "pod": f"p{i:06d}", "namespace": "ml"} for i in range(30_000)]
    proxy.respond = (200, json.dumps({"status": "success", "data": series}).encode())  # 1.9 MB of series
    await capped.components.discovery.relist()
    catalog = capped.components.discovery.catalog
    assert catalog.error is not None
    assert "the 1Mi limit of --prometheus-max-answer-bytes" in catalog.error
    assert "relist failed, serving the metrics found before" in caplog.text
    assert "--prometheus-max-answer-bytes" in caplog.text
    resources = await capped.get(CM)
    assert "pods/gpu_utilization" in {r["name"] for r in resources["resources"]}


class Ticker:
    """Runs every 2 ms while open; ``longest`` is the longest the event loop kept it waiting, ``lasted`` how long it
    was open."""

    def __init__(self) -> None:
        self.longest = self.lasted = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(0.002)
            self.longest = max(self.longest, loop.time() - last)
            last = loop.time()

    async def __aenter__(self) -> Ticker:
        self.lasted = asyncio.get_running_loop().time()
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.sleep(0.05)  # the ticker notes a pause that ended just now
        self.lasted = asyncio.get_running_loop().time() - self.lasted
        if self._task is not None:
            self._task.cancel()


async def largest_pause(proxy: PrometheusProxy, config: PrometheusConfig) -> float:
    """The longest the event loop kept a 2 ms ticker waiting while the client read a large answer."""
    client = PrometheusClient(make_session(config), config, AdapterMetrics())
    try:
        async with Ticker() as ticker:
            result = await client.query("up")
    finally:
        await client.session.close()
    assert len(result.samples) == 60_000
    return ticker.longest


async def test_a_large_answer_is_parsed_without_stopping_the_event_loop(proxy: PrometheusProxy) -> None:
    proxy.respond = (200, vector(60_000))  # 14 MB
    on_the_loop = PrometheusConfig(url=proxy.url, parse_in_thread_above=1024**3)
    in_a_thread = PrometheusConfig(url=proxy.url)
    # the same answer parsed both ways, twice, interleaved: the machine's load falls on both alike
    paused = [await largest_pause(proxy, config) for config in (on_the_loop, in_a_thread, on_the_loop, in_a_thread)]
    assert min(paused[0], paused[2]) > 4 * max(paused[1], paused[3]), paused


async def test_the_adapter_answers_health_probes_while_it_reads_a_large_answer(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    adapter = await make_adapter(settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"), cache_ttl=0.0))
    proxy.respond = (200, vector(60_000))
    async with Ticker() as ticker:
        request = asyncio.create_task(adapter.client.get(TRAINERS))
        probes = 0
        while not request.done():
            assert (await adapter.client.get("/healthz")).status == 200
            probes += not request.done()
        assert (await request).status == 200
    assert probes >= 3
    # parsed on the event loop, the answer stopped it for a third of the request or more
    assert ticker.longest < ticker.lasted / 5, (ticker.longest, ticker.lasted)


def large_results() -> list[QueryResult]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, QueryResult) and len(o.samples) > 1000]


async def test_answers_that_match_nothing_are_not_kept_once_their_time_to_live_is_over(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    adapter = await make_adapter(settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig")))  # ttl 250ms
    proxy.respond = (200, vector(20_000))
    for app in ("trainer", "other", "share"):  # three requests, three queries, each answered by 20,000 series
        body = await adapter.get(f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3D{app}")
        assert body["items"] == []

    async def released() -> bool:
        return not large_results()

    await eventually(released, what="the large results to be released")
