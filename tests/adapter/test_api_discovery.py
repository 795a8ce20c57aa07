"""The REST mapping read from the stand-in API server's discovery documents over HTTP: aggregated (v2, v2beta1) and
legacy alike, a group version whose server is down, a CRD installed later, and a refresh per unknown resource at
most once per gap."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from adapter.backends.api_resources import ApiDiscovery
from adapter.backends.kube_client import KubeClient
from adapter.backends.rest_mapper import RETRY_SECONDS, RestMapper
from adapter.components import components
from adapter.naming.resources import BUILT_IN, GroupResource, ResourceInfo
from adapter.self_metrics import AdapterMetrics
from adapter.settings import parse_settings
from harness.kube.api import FakeKubeAPIServer
from harness.kube.discovery import Served
from harness.waiting import wait_until

RAY = Served("ray.io", ("v1",), "rayclusters", "raycluster", "RayCluster", True, ("rc",), ("status",))


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeAPIServer]:
    fake = FakeKubeAPIServer()
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def client(kube: FakeKubeAPIServer, tmp_path: Path) -> AsyncIterator[KubeClient]:
    c = await KubeClient.connect(kube.kubeconfig(tmp_path / "kubeconfig"), 5.0)
    yield c
    await c.close()


def mapper_for(client: KubeClient, gap: float = 30.0) -> RestMapper:
    return RestMapper(ApiDiscovery(client), AdapterMetrics(), interval=600, gap=gap)


def summary(mapper: RestMapper) -> list[tuple[str, str, str, str, bool]]:
    return [
        (i.group_resource.group, i.group_resource.resource, i.version, i.kind, i.namespaced) for i in mapper.mapping
    ]


@pytest.mark.parametrize("aggregated", [("v2", "v2beta1"), ("v2beta1",), ()], ids=["v2", "v2beta1", "legacy"])
async def test_every_kind_of_discovery_gives_the_same_mapping(
    kube: FakeKubeAPIServer, client: KubeClient, aggregated: tuple[str, ...]
) -> None:
    kube.discovery.aggregated = aggregated
    kube.discovery.add(RAY)
    mapper = mapper_for(client)
    await mapper.refresh()
    mapping = mapper.mapping
    assert mapping.lookup("deployment") == ResourceInfo(
        GroupResource("deployments", "apps"), "deployment", "Deployment", "v1", True
    )
    assert mapping.lookup("hpa") is None  # short names are kubectl's, not the REST mapper's
    hpa = mapping.lookup("horizontalpodautoscalers")
    assert hpa is not None
    assert hpa.version == "v2"  # the preferred version
    assert mapping.lookup("events") == ResourceInfo(GroupResource("events"), "event", "Event", "v1", True)
    assert mapping.lookup("nodes") == BUILT_IN.lookup("nodes")
    assert mapping.lookup("rayclusters.ray.io") == ResourceInfo(
        GroupResource("rayclusters", "ray.io"), "raycluster", "RayCluster", "v1", True
    )
    assert all("/" not in i.group_resource.resource for i in mapping)  # subresources left out
    # which requests: two with aggregated discovery, one more per group version without
    asked = {path for path, _ in kube.requests}
    assert ("/apis/apps/v1" in asked) == (not aggregated)
    if aggregated:
        assert len(kube.requests) == 2
    assert mapper.source is not None
    assert mapper.source.last_success is not None
    # the same resources in the same order whichever way they were read
    if aggregated == ():
        kube.discovery.aggregated = ("v2",)
        again = mapper_for(client)
        await again.refresh()
        assert summary(again) == summary(mapper)


@pytest.mark.parametrize("aggregated", [("v2",), ()], ids=["aggregated", "legacy"])
async def test_a_group_version_that_cannot_be_read_keeps_its_resources_from_before(
    kube: FakeKubeAPIServer, client: KubeClient, aggregated: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    kube.discovery.aggregated = aggregated
    kube.discovery.add(RAY)
    mapper = mapper_for(client)
    await mapper.refresh()
    assert mapper.mapping.lookup("rayclusters") is not None
    kube.discovery.unavailable.add(("ray.io", "v1"))
    kube.discovery.add(Served("batch", ("v1",), "widgets", "widget", "Widget", True))
    await mapper.refresh()
    assert mapper.mapping.lookup("widgets", "batch") is not None  # the rest is read
    assert mapper.mapping.lookup("rayclusters") is not None  # kept from the last mapping that had it
    assert "API discovery: ray.io/v1 not read" in caplog.text
    # a group version never read before is simply missing
    fresh = mapper_for(client)
    await fresh.refresh()
    assert fresh.mapping.lookup("rayclusters") is None
    assert fresh.mapping.lookup("deployments") is not None


async def test_a_resource_installed_later_is_found_by_one_refresh_at_most_per_gap(
    kube: FakeKubeAPIServer, client: KubeClient
) -> None:
    mapper = mapper_for(client)
    await mapper.refresh()
    asked = len(kube.requests)
    assert await mapper.resolve(GroupResource("deployments", "apps")) is not None
    assert len(kube.requests) == asked  # a known resource asks nothing
    kube.discovery.add(RAY)
    assert mapper.mapping.lookup("rayclusters") is None
    found = await mapper.resolve(GroupResource("rayclusters", "ray.io"))
    assert found is not None
    assert found.kind == "RayCluster"
    assert len(kube.requests) == asked + 2  # one refresh: /api and /apis
    # within the gap, an unknown resource does not read discovery again, however often it is asked
    for _ in range(5):
        assert await mapper.resolve(GroupResource("gizmos", "example.com")) is None
    assert len(kube.requests) == asked + 2


async def test_an_unknown_resource_is_looked_up_again_once_the_gap_has_passed(
    kube: FakeKubeAPIServer, client: KubeClient
) -> None:
    now = [0.0]
    mapper = RestMapper(ApiDiscovery(client), AdapterMetrics(), interval=600, gap=30, clock=lambda: now[0])
    await mapper.refresh()
    asked = len(kube.requests)
    assert await mapper.resolve(GroupResource("rayclusters", "ray.io")) is None  # not installed yet
    assert len(kube.requests) == asked + 2
    kube.discovery.add(RAY)
    now[0] = 29.0
    assert await mapper.resolve(GroupResource("rayclusters", "ray.io")) is None  # within the gap: not asked
    assert len(kube.requests) == asked + 2
    now[0] = 31.0
    assert await mapper.resolve(GroupResource("rayclusters", "ray.io")) is not None
    assert len(kube.requests) == asked + 4


async def test_a_failed_refresh_keeps_the_mapping_and_reports_the_source(
    kube: FakeKubeAPIServer, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    kube.discovery.add(RAY)
    mapper = mapper_for(client)
    await mapper.refresh()
    before = list(mapper.mapping)
    await kube.stop()
    await mapper.refresh()
    assert list(mapper.mapping) == before
    assert mapper.source is not None
    assert mapper.source.failing_since is not None
    assert "API discovery failed; the mapping in force" in caplog.text
    assert mapper.attempted


async def test_without_a_kubernetes_api_the_built_in_mapping_is_used() -> None:
    mapper = RestMapper(None, AdapterMetrics(), interval=600)
    await mapper.refresh()
    assert mapper.attempted
    assert mapper.source is None
    assert mapper.mapping is BUILT_IN
    assert await mapper.resolve(GroupResource("deployments", "apps")) == BUILT_IN.lookup("deployments", "apps")
    assert await mapper.resolve(GroupResource("rayclusters", "ray.io")) is None


async def test_discovery_is_read_again_every_interval_and_sooner_after_a_failure(
    kube: FakeKubeAPIServer, client: KubeClient
) -> None:
    """``--discovery-interval`` (here 45 s) is the wait between two reads; after a failed read the wait is at most
    ``RETRY_SECONDS``. The waits are asked of an injected sleep, which lets each one pass at once."""
    waits: list[float] = []
    resumed = asyncio.Queue[None]()

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await resumed.get()

    mapper = RestMapper(ApiDiscovery(client), AdapterMetrics(), interval=45, sleep=sleep)
    await mapper.refresh()
    task = asyncio.create_task(mapper.run())
    try:

        def waited(n: int) -> Callable[[], bool]:
            return lambda: len(waits) == n

        for reads in (1, 2, 3):
            await wait_until(waited(reads), what=f"wait {reads}")
            assert sum(1 for path, _ in kube.requests if path == "/api") == reads
            if reads < 3:
                resumed.put_nowait(None)
        assert waits == [45, 45, 45]
        await kube.stop()  # the next read fails: the one after it comes after RETRY_SECONDS, not the interval
        resumed.put_nowait(None)
        await wait_until(lambda: len(waits) == 4, what="the wait after a failed read")
        assert waits[-1] == RETRY_SECONDS
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_discovery_interval_flag_is_the_interval_the_adapters_mapper_runs_at(
    kube: FakeKubeAPIServer, tmp_path: Path
) -> None:
    """``--discovery-interval`` reaches the REST mapper the adapter builds (the test above: the mapper waits it)."""
    settings = parse_settings(
        ["--prometheus-url=http://127.0.0.1:9", f"--lister-kubeconfig={kube.kubeconfig(tmp_path / 'kubeconfig')}",
         "--discovery-interval=45s", "--insecure-serve-http", "--insecure-disable-auth"]
    )  # fmt: skip
    async with components(settings) as c:
        assert c.rest_mapper.interval == 45
        assert c.rest_mapper.api is not None
