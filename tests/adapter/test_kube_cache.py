"""The metadata cache against an API server that speaks list and watch: kubernetes_asyncio over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from adapter.backends.kube_api import KubernetesMetadataAPI
from adapter.backends.kube_cache import ObjectLister, Reflector
from adapter.backends.kube_client import KubeClient
from adapter.errors import ConfigError, KubernetesError
from adapter.naming import resources
from adapter.query.selectors import parse_selector
from adapter.self_metrics import AdapterMetrics
from harness.kube.api import FakeKubeAPIServer
from harness.waiting import wait_until

PODS = "/api/v1/pods"


@pytest.fixture
async def api(kube: FakeKubeAPIServer, tmp_path: Path) -> AsyncIterator[KubernetesMetadataAPI]:
    client = await KubernetesMetadataAPI.connect(kube.kubeconfig(tmp_path / "kubeconfig"))
    yield client
    await client.close()


async def run(reflector: Reflector) -> asyncio.Task[None]:
    task = asyncio.create_task(reflector.run())
    await wait_until(lambda: reflector.synced, what="first list")
    return task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def names(reflector: Reflector, namespace: str | None = "ml", selector: str = "") -> list[str]:
    return reflector.names(namespace, parse_selector(selector))


async def test_list_pages_through_continue_tokens_and_filters_server_side(
    api: KubernetesMetadataAPI, kube: FakeKubeAPIServer
) -> None:
    populated = len(kube.objects["pods"])  # harness/adapter/in_process.py's cluster
    for i in range(1200):
        kube.put("pods", f"p{i:04d}", {"app": "bulk", "shard": str(i % 3)}, namespace="bulk")
    listed = await api.list(resources.PODS)
    assert len(listed.items) == 1200 + populated
    assert listed.resource_version == str(kube.resource_version)
    assert kube.count(PODS) == 3  # pages of 500
    selected = await api.list(resources.PODS, "bulk", "shard=1")
    assert len(selected.items) == 400
    assert {i.labels["shard"] for i in selected.items} == {"1"}
    assert {i.namespace for i in selected.items} == {"bulk"}


async def test_an_expired_continue_token_starts_the_list_again(
    api: KubernetesMetadataAPI, kube: FakeKubeAPIServer
) -> None:
    populated = len(kube.objects["pods"])
    for i in range(600):
        kube.put("pods", f"p{i}", namespace="bulk")
    kube.expire_continue_tokens = True
    task = asyncio.ensure_future(api.list(resources.PODS))
    await wait_until(lambda: kube.count(PODS) >= 2, what="a continue request")
    kube.expire_continue_tokens = False
    listed = await task
    assert len(listed.items) == 600 + populated


async def test_reflector_follows_adds_changes_and_deletes(api: KubernetesMetadataAPI, kube: FakeKubeAPIServer) -> None:
    reflector = Reflector(api, resources.PODS, AdapterMetrics())
    task = await run(reflector)
    try:
        assert names(reflector, selector="app=trainer") == ["broken-0", "trainer-0", "trainer-1"]
        kube.put("pods", "trainer-2", {"app": "trainer"}, namespace="ml")
        kube.put("pods", "trainer-0", {"app": "retired"}, namespace="ml")
        kube.delete("pods", "broken-0", namespace="ml")
        await wait_until(lambda: names(reflector, selector="app=trainer") == ["trainer-1", "trainer-2"])
        assert names(reflector, selector="app=retired") == ["trainer-0"]
        assert names(reflector, namespace="serving") == ["infer-0"]
        assert kube.count(PODS) == 1  # one LIST, then only the watch
    finally:
        await stop(task)


async def test_a_closed_watch_resumes_from_its_resource_version_without_listing(
    api: KubernetesMetadataAPI, kube: FakeKubeAPIServer
) -> None:
    reflector = Reflector(api, resources.PODS, AdapterMetrics())
    task = await run(reflector)
    try:
        await wait_until(lambda: kube.count(PODS, watch=True) == 1)
        kube.close_watches()
        kube.put("pods", "late", {"app": "trainer"}, namespace="ml")
        await wait_until(lambda: "late" in names(reflector))
        watches = [q for p, q in kube.requests if p == PODS and q.get("watch") == "true"]
        assert len(watches) == 2
        assert int(watches[1]["resourceVersion"]) >= int(watches[0]["resourceVersion"])
        assert kube.count(PODS) == 1
    finally:
        await stop(task)


async def test_410_gone_relists_and_keeps_serving_meanwhile(
    api: KubernetesMetadataAPI, kube: FakeKubeAPIServer
) -> None:
    metrics = AdapterMetrics()
    reflector = Reflector(api, resources.PODS, metrics)
    task = await run(reflector)
    try:
        await wait_until(lambda: kube.count(PODS, watch=True) == 1)
        kube.compact()
        kube.close_watches()
        # the change happens while the watch is down and its version is compacted away: only a LIST can see it
        kube.put("pods", "during-outage", {"app": "trainer"}, namespace="ml")
        kube.compact()
        assert "trainer-0" in names(reflector)
        await wait_until(lambda: "during-outage" in names(reflector), what="relist after 410")
        assert kube.count(PODS) == 2
        expired = metrics.registry.get_sample_value(
            "gpuscale_adapter_kube_watch_restarts_total", {"resource": "pods", "reason": "expired"}
        )
        assert expired == 1
        kube.put("pods", "after", namespace="ml")
        await wait_until(lambda: "after" in names(reflector), what="the new watch")
    finally:
        await stop(task)


async def test_bookmarks_move_the_resource_version(api: KubernetesMetadataAPI, kube: FakeKubeAPIServer) -> None:
    kube.put("nodes", "node-x")
    reflector = Reflector(api, resources.NODES, AdapterMetrics())
    task = await run(reflector)
    try:
        await wait_until(lambda: kube.count("/api/v1/nodes", watch=True) == 1)
        kube.put("pods", "unrelated", namespace="ml")  # bumps the global version without a node event
        kube.bookmark()
        await wait_until(lambda: reflector.resource_version == str(kube.resource_version))
    finally:
        await stop(task)


async def test_list_errors_back_off_and_retry(api: KubernetesMetadataAPI, kube: FakeKubeAPIServer) -> None:
    kube.fail_lists = 1
    metrics = AdapterMetrics()
    reflector = Reflector(api, resources.NAMESPACES, metrics, max_backoff=0.05)
    task = asyncio.create_task(reflector.run())
    try:
        await wait_until(lambda: reflector.synced, what="a list after the failure")
        assert names(reflector, namespace=None) == ["edge", "gateway", "gpu-system", "llm", "ml", "serving", "stack"]
        assert (
            metrics.registry.get_sample_value(
                "gpuscale_adapter_kube_watch_restarts_total", {"resource": "namespaces", "reason": "error"}
            )
            == 1
        )
    finally:
        await stop(task)


async def test_lister_uses_live_lists_until_synced_then_memory(
    api: KubernetesMetadataAPI, kube: FakeKubeAPIServer
) -> None:
    metrics = AdapterMetrics()
    lister = ObjectLister(api, metrics)
    before = await lister.names(resources.PODS, "ml", parse_selector("app=trainer"))
    assert before.names == ["broken-0", "trainer-0", "trainer-1"]
    assert before.source == "live LIST (cache not synced yet)"
    assert [q.get("labelSelector") for p, q in kube.requests if p == "/api/v1/namespaces/ml/pods"] == ["app=trainer"]
    tasks = [asyncio.create_task(r.run()) for r in lister.reflectors.values()]
    try:
        await wait_until(lambda: lister.synced)
        lists = len(kube.requests)
        after = await lister.names(resources.PODS, "ml", parse_selector("app=trainer"))
        assert after.names == before.names
        assert after.source == "watch cache"
        nodes = await lister.names(resources.NODES, None, parse_selector("pool=train"))
        assert nodes.names == ["node-a", "node-b"]
        assert len([r for r in kube.requests[lists:] if r[1].get("watch") != "true"]) == 0
        # a resource the cache does not hold is listed live, with the selector
        kube.put("deployments.apps", "web", {"tier": "front"}, namespace="ml")
        deployments_resource = resources.BUILT_IN.lookup("deployments", "apps")
        assert deployments_resource is not None
        deployments = await lister.names(deployments_resource, "ml", parse_selector("tier=front"))
        assert deployments.names == ["web"]
        assert deployments.source == "live LIST (resource not cached)"
        assert metrics.registry.get_sample_value("gpuscale_adapter_kube_live_lists_total", {"resource": "pods"}) == 1
    finally:
        for task in tasks:
            await stop(task)


async def test_a_bad_token_is_a_kubernetes_error(kube: FakeKubeAPIServer, tmp_path: Path) -> None:
    config = kube.kubeconfig(tmp_path / "kubeconfig")
    config.write_text(config.read_text().replace("fake-token", "wrong-token"))
    client = await KubernetesMetadataAPI.connect(config)
    try:
        with pytest.raises(KubernetesError, match="HTTP 401"):
            await client.list(resources.PODS)
    finally:
        await client.close()


async def test_a_missing_kubeconfig_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot configure the Kubernetes client"):
        await KubernetesMetadataAPI.connect(tmp_path / "absent")


async def test_watches_that_end_at_once_are_retried_with_backoff(tmp_path: Path) -> None:
    # a server (or a proxy in front of it) that ends every watch at once, with no event
    requests: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        requests.append(request.query.get("watch", "list"))
        if request.query.get("watch") == "true":
            return web.Response(body=b"", content_type="application/json")
        return web.json_response({"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": []})

    app = web.Application()
    app.router.add_get("/api/v1/pods", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    kubeconfig = tmp_path / "kubeconfig"
    cluster = {"server": f"http://127.0.0.1:{runner.addresses[0][1]}"}
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    client = await KubernetesMetadataAPI.connect(kubeconfig)
    delays: list[float] = []
    three = asyncio.Event()

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 3:
            three.set()
        await asyncio.sleep(0)

    reflector = Reflector(client, resources.PODS, AdapterMetrics(), sleep=sleep, clock=lambda: 0.0, jitter=lambda: 0.0)
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(three.wait(), 10)
        assert delays[:3] == [1.0, 2.0, 4.0]
        assert requests[:4] == ["list", "true", "true", "true"]  # the list is kept; only the watch is retried
    finally:
        await stop(task)
        await client.close()
        await runner.cleanup()


async def test_a_server_that_expires_every_watch_is_listed_with_a_growing_back_off(
    api: KubernetesMetadataAPI, kube: FakeKubeAPIServer
) -> None:
    """Every watch answers 410 Gone: the reflector lists again, but after the second 410 in a row only after a
    back-off (1 s, 2 s, 4 s ...), never in a loop (thousands of LIST+WATCH pairs in seconds). The waits are asked of
    an injected sleep, which lets the first three pass at once and holds the fourth."""
    kube.expire_watches = True
    waits: list[float] = []
    held = asyncio.Event()

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 4:
            await held.wait()

    reflector = Reflector(api, resources.PODS, AdapterMetrics(), sleep=sleep, jitter=lambda: 0.0)
    task = await run(reflector)
    try:
        await wait_until(lambda: len(waits) == 4, what="the fourth back-off")
    finally:
        await stop(task)
    assert waits == [1.0, 2.0, 4.0, 8.0]
    # a LIST at the start and at once after the first 410, then one after each of the three waits that passed
    assert (kube.count(PODS), kube.count(PODS, watch=True)) == (5, 5)
    in_ml = sorted(name for ns, name in kube.objects["pods"] if ns == "ml")
    assert in_ml
    assert sorted(names(reflector)) == in_ml  # still serving the last listing


async def test_a_watch_the_server_never_answers_is_given_up_and_the_copy_is_listed_again(
    kube: FakeKubeAPIServer, tmp_path: Path
) -> None:
    """A hung server or proxy accepts the watch and sends nothing: the watch is given up when its head is late, so
    the copy is listed again within seconds instead of waiting out the read timeout (330 s) with /readyz ok."""
    client = KubernetesMetadataAPI(await KubeClient.connect(kube.kubeconfig(tmp_path / "kubeconfig"), 0.5))
    metrics = AdapterMetrics()
    reflector = Reflector(client, resources.PODS, metrics, max_backoff=0.2, jitter=lambda: 0.0)
    kube.hold_watches = True
    task = await run(reflector)
    try:
        kube.put("pods", "trainer-9", {"app": "trainer"}, namespace="ml")
        await wait_until(lambda: "trainer-9" in names(reflector), 10, "the new pod, by a LIST")
        assert kube.held_watches >= 1
        restarts = metrics.registry.get_sample_value(
            "gpuscale_adapter_kube_watch_restarts_total", {"resource": "pods", "reason": "error"}
        )
        assert restarts is not None
        assert restarts >= 1
    finally:
        await stop(task)
        await client.close()
