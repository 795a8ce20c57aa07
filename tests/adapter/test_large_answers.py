"""Large Prometheus answers: refused over --prometheus-max-answer-bytes, read without stopping the event loop, and not
kept in memory once nothing needs them.

Through the forwarding proxy in front of the real Prometheus. No test measures time: the event loop's responsiveness
is shown by health probes answered while a parse runs; how long it pauses is a benchmark's figure
(``python -m bench.event_loop_pause``)
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from adapter.backends.prometheus import QueryResult
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.answers import vector
from harness.stores.proxy import PrometheusProxy
from harness.waiting import eventually, wait_until

CM = "/apis/custom.metrics.k8s.io/v1beta2"
TRAINERS = f"{CM}/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer"
MiB = 1024 * 1024


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


async def test_the_adapter_answers_health_probes_while_it_reads_a_large_answer(
    kube: FakeKubeAPIServer, proxy: PrometheusProxy, make_adapter: MakeAdapter, tmp_path: Path
) -> None:
    adapter = await make_adapter(settings_for(proxy.url, kube.kubeconfig(tmp_path / "kubeconfig"), cache_ttl=0.0))
    proxy.respond = (200, vector(60_000))
    request = asyncio.create_task(adapter.client.get(TRAINERS))
    probes = 0
    while not request.done():
        assert (await adapter.client.get("/healthz")).status == 200
        probes += not request.done()
    assert (await request).status == 200
    assert probes >= 3  # answered while the 14 MB answer was read and parsed, not after it


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


async def test_a_rules_answer_for_none_of_the_objects_asked_is_let_go_before_the_next_rule_is_asked(
    capped: Adapter, proxy: PrometheusProxy
) -> None:
    """A request asks its rules in turn until every object has a value; an answer that gave none is not held while
    the next rule's is read (six requests at once, each through three rules of 30 MB answers, held them all)."""
    alive: list[int] = []

    def answer() -> AsyncIterator[bytes]:
        alive.append(len(large_results()))  # results alive as the request's next query arrives (no cache: ttl 0)

        async def chunks() -> AsyncIterator[bytes]:
            yield vector(2_000)  # 0.5 MB, none of it for the pods asked

        return chunks()

    proxy.stream = answer
    assert (await capped.get(TRAINERS))["items"] == []
    assert len(alive) >= 2, "the request asked one rule only"
    assert alive == [0] * len(alive)
